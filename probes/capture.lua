-- capture.lua — DESIGN.md's capture command: run a model on some tokens and
-- stream the chosen hook points (and optionally the logits) to an HDF5 run file.
-- This file parses the arguments and loads the model; the workflow itself
-- (tokenizing, splitting over ranks, the forward, the file) is mp.capture, C's
-- mp_capture_run (mpi/capture.h).
--
--   mechprobe capture --model FILE [--tokenizer FILE] (--text STR | --tokens 1,2,3)
--                     [--hooks GLOB[,GLOB...]] [--logits] [--compress N] --out FILE.h5
--                     [--device cpu|cuda] [--precision fp32|bf16]
--
-- Dataset captures, one prompt per line (rows of /acts/<hook> [N, Tmax, ...],
-- ragged lengths in /lengths); under `mpirun -np R` the lines are split across
-- the ranks, which write their rows into the one file:
--
--   [mpirun -np R] mechprobe capture --model FILE (--text-file F | --tokens-file F) ... --out FILE.h5
local cli = require "cli"
local o = cli.parse(arg, {
  name = "capture",
  summary = "Capture activations at hook points into an HDF5 run file (h5py: f['acts/blocks.0.hook_resid_pre']).",
  {"model", "FILE", "model file (checkpoint .h5, llama2.c .bin, GGUF, HF folder)", required = true},
  {"tokenizer", "FILE", "tokenizer file (default: found next to the model)"},
  cli.DEVICE_OPTS[1], cli.DEVICE_OPTS[2],
  {"text", "STR", "text to tokenize (BOS prepended)"},
  {"tokens", "IDS", "comma-separated token ids instead of --text"},
  {"text_file", "FILE", "one prompt per line: a dataset capture [N, Tmax, ...] with /lengths (split over MPI ranks)"},
  {"tokens_file", "FILE", "like --text-file, each line comma-separated token ids"},
  {"hooks", "GLOBS", "hook names, '*' also matches dots", default = "*"},
  {"logits", nil, "also store /logits [B,T,V]"},
  {"compress", "N", "deflate level 0-9 (with shuffle)", default = 0, type = "int", max = 9},
  {"out", "FILE.h5", "output run file (written atomically)", required = true},
})
local given = (o.text and 1 or 0) + (o.tokens and 1 or 0) + (o.text_file and 1 or 0) + (o.tokens_file and 1 or 0)
if given ~= 1 then
  io.stderr:write("mechprobe capture: give exactly one of --text, --tokens, --text-file and --tokens-file\n")
  os.exit(2)
end
if not o.hooks:find("[^%s,]") then
  io.stderr:write(("mechprobe capture: --hooks '%s' names no hook point (give names or globs such as "
    .. "'blocks.*.hook_resid_post', or '*' for every hook)\n"):format(o.hooks))
  os.exit(2)
end

local dev = cli.check_device("capture", o)

local t0 = os.clock()
mp.check_output(o.out, o.model, o.tokenizer, o.text_file, o.tokens_file) -- never replace an input
local model = mp.load(o.model, {tokenizer = o.tokenizer, device = dev.device, precision = dev.precision})

if o.text_file or o.tokens_file then
  -- the C capture workflow (mp.capture, mpi/capture.h): each rank reads the
  -- file, tokenizes and checks only its own lines, and writes its rows
  local path = o.text_file or o.tokens_file
  local n, total = mp.capture{model = model, out = o.out, hooks = o.hooks, logits = o.logits, compress = o.compress,
                              text_file = o.text_file, tokens_file = o.tokens_file,
                              what = o.text_file and "--text-file" or "--tokens-file"}
  if mp.mpi.rank() == 0 then
    print(("wrote %s: %d datasets, %d prompts from %s, model %s, %d rank%s (%.2f s CPU on rank 0)"):format(
      o.out, n, total, path, o.model, mp.mpi.size(), mp.mpi.size() > 1 and "s" or "", os.clock() - t0))
  end
  return
end

if mp.mpi.rank() ~= 0 then return end   -- one prompt: rank 0 alone writes it under mpirun
local tokens = o.tokens and cli.int_list(o.tokens, "--tokens")
if tokens then  -- ids the model cannot embed: say which, before anything is written
  local V = model.config.vocab
  for i, id in ipairs(tokens) do
    if id < 0 or id >= V then
      io.stderr:write(("mechprobe capture: --tokens: item %d, %d, is outside the vocabulary (0..%d; the model %s has %d "
                       .. "tokens)\n"):format(i, id, V - 1, o.model, V))
      os.exit(2)
    end
  end
end
local n, _, T = mp.capture{model = model, out = o.out, hooks = o.hooks, logits = o.logits, compress = o.compress,
                           tokens = tokens, text = not tokens and o.text or nil}
print(("wrote %s: %d datasets, tokens [1,%d], model %s (%.2f s CPU)"):format(
  o.out, n, T, o.model, os.clock() - t0))
