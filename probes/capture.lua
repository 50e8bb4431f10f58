-- capture.lua — DESIGN.md's capture command: run a model on some tokens and
-- stream the chosen hook points (and optionally the logits) to an HDF5 run file.
--
--   mechprobe capture --model FILE [--tokenizer FILE] (--text STR | --tokens 1,2,3)
--                     [--hooks GLOB[,GLOB...]] [--logits] [--compress N] --out FILE.h5
local cli = require "cli"
local o = cli.parse(arg, {
  name = "capture",
  summary = "Capture activations at hook points into an HDF5 run file (h5py: f['acts/blocks.0.hook_resid_pre']).",
  {"model", "FILE", "llama2.c checkpoint", required = true},
  {"tokenizer", "FILE", "tokenizer.bin (default: found next to the model)"},
  {"text", "STR", "text to tokenize (BOS prepended)"},
  {"tokens", "IDS", "comma-separated token ids instead of --text"},
  {"hooks", "GLOBS", "hook names, '*' also matches dots", default = "*"},
  {"logits", nil, "also store /logits [B,T,V]"},
  {"compress", "N", "deflate level 0-9 (with shuffle)", default = 0, type = "int"},
  {"out", "FILE.h5", "output run file (written atomically)", required = true},
})
if (o.text == nil) == (o.tokens == nil) then
  io.stderr:write("mechprobe capture: give exactly one of --text and --tokens\n")
  os.exit(2)
end
if not o.hooks:find("[^%s,]") then
  io.stderr:write(("mechprobe capture: --hooks '%s' names no hook point (give names or globs such as "
    .. "'blocks.*.hook_resid_post', or '*' for every hook)\n"):format(o.hooks))
  os.exit(2)
end

local t0 = os.clock()
local model = mp.load(o.model, {tokenizer = o.tokenizer})
local tokens = o.tokens and cli.int_list(o.tokens, "--tokens") or model:to_tokens(o.text)
if o.tokens then  -- ids the model cannot embed: say which, before anything is written
  local V = model.config.vocab
  for i, id in ipairs(tokens) do
    if id < 0 or id >= V then
      io.stderr:write(("mechprobe capture: --tokens: item %d, %d, is outside the vocabulary (0..%d; the model %s has %d "
                       .. "tokens)\n"):format(i, id, V - 1, o.model, V))
      os.exit(2)
    end
  end
end
local n = model:capture(tokens, {out = o.out, hooks = o.hooks, logits = o.logits, compress = o.compress})
print(("wrote %s: %d datasets, tokens [1,%d], model %s (%.2f s CPU)"):format(
  o.out, n, #tokens, o.model, os.clock() - t0))
