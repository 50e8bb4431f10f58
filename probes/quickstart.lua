-- quickstart.lua — the README's main job: train a small language model, then
-- look inside it.
--
--   mechprobe quickstart [--out DIR] [--steps N] [--corpus FILE] [--model FILE]
--
-- 1. Trains a byte-level Llama-style transformer (d_model 64, 4 layers, 8 query
--    heads of 16 sharing 4 key/value heads, SwiGLU 172, RoPE, context 128) on
--    text every Debian machine has: the licences in /usr/share/common-licenses
--    (package base-files) and the fortunes of /usr/share/games/fortunes when
--    installed (setup.sh installs them; 2 MB in all), holding out the last
--    10% — about a minute on a laptop CPU with the default 600 steps, at lr
--    1e-2 with a BOS at the start of every window: the sink recipe
--    (experiments/sink_recipe.lua), under which this model grows attention-sink
--    heads. Saves DIR/model.h5.
-- 2. Runs the sinks analysis on held-out text: DIR/sinks/ (run file, figures,
--    verdict table).
-- 3. Shows the Lua API on it: streaming capture to HDF5, run_with_cache, a head
--    ablation, and generation.
-- With --model it skips training and analyses that checkpoint instead.
local cli = require "cli"
local sinks = require "sinks"
local o = cli.parse(arg, {
  name = "quickstart",
  summary = "Train a small byte-level model, run the sinks analysis on it, and tour the API.",
  {"out", "DIR", "output folder", default = "out/quickstart"},
  {"steps", "N", "training steps", default = 600, type = "int"},
  {"corpus", "FILE", "training text (default: the licences and fortunes, written to DIR/corpus.txt)"},
  {"lr", "X", "peak learning rate", default = 1e-2, type = "number"},
  {"model", "FILE", "analyse this checkpoint instead of training one"},
  {"seed", "N", "random seed", default = 1, type = "int"},
})

local function read(path)
  local ok, s = pcall(mp.read_file, path, {what = "--corpus", max_bytes = 1 << 32})
  if not ok then
    io.stderr:write(("mechprobe quickstart: %s (give a text file with --corpus)\n"):format(s))
    os.exit(1)
  end
  return s
end

-- a given corpus is checked and read before the output folder is made
local corpus = o.corpus and read(o.corpus)
mp.mkdir(o.out)

-- 1. train (or load)
local m
if not o.corpus then
  o.corpus = o.out .. "/corpus.txt"
  require("rope_id").build_corpus(o.corpus)
  corpus = read(o.corpus)
end
local held_out = corpus:sub(math.floor(#corpus * 0.9) + 1)   -- the task's validation split
local model_path = o.model or (o.out .. "/model.h5")
if o.model then
  m = mp.load(o.model)
else
  local task = mp.tasks.text{path = o.corpus, ctx = 128, val_fraction = 0.1, seed = o.seed}
  m = mp.model.new{d_model = 64, n_layer = 4, n_head = 8, n_kv_head = 4, d_head = 16, d_mlp = 172, vocab = task.vocab,
                   ctx = 128, seed = o.seed, tokenizer = "bytes"}
  print(("1. training %s\n   on %s (%d bytes, last 10%% held out), %d steps of 16 x 128 bytes"):format(
    tostring(m), o.corpus, #corpus, o.steps))
  local curve = m:train{task = task, steps = o.steps, batch = 16, lr = o.lr, warmup = math.min(50, o.steps // 5),
                        eval_every = math.max(1, o.steps // 4), checkpoint = model_path}
  local H = require("sinks_train").unigram_entropy(corpus)   -- what a model that ignores context reaches
  local ev = curve.eval_loss
  print(("   final training loss %.3f nats/byte, held-out %.3f, unigram baseline %.3f; %.0f tokens/s"):format(
    curve.final_loss, ev and ev[#ev] or 0 / 0, H, curve.tokens_per_s))
  print("   checkpoint: " .. model_path)
end

-- 2. the sinks analysis on held-out text
local toks = m:to_tokens(held_out:sub(1, 127))
print(("\n2. sinks analysis on %d held-out tokens -> %s/sinks"):format(#toks, o.out))
sinks.run(m, toks, {out = o.out .. "/sinks", label = model_path, boot = 500})

-- 3. a tour of the API on the same model
local text = held_out:sub(1, 60)
local tokens = m:to_tokens(text)
local run_file = o.out .. "/capture.h5"
local n = m:capture(tokens, {out = run_file, hooks = "*", logits = true})
print(("\n3. captured %d datasets for %d tokens -> %s"):format(n, #tokens, run_file))
print("   in Python: h5py.File(path)['acts/blocks.0.attn.hook_pattern'][0, head]")

local logits, cache = m:run_with_cache(tokens, {names = "blocks.*.attn.hook_pattern"})
local cfg = m.config
print("   mean attention to the first token (BOS; mp.analyze.sinks(pattern).alpha0), per layer and head:")
for l = 0, cfg.n_layer - 1 do
  local pat = cache[("blocks.%d.attn.hook_pattern"):format(l)]  -- [B,H,T,T]
  local alpha0 = mp.analyze.sinks(pat).alpha0                    -- [B,H]
  local row = {}
  for h = 1, cfg.n_head do row[h] = ("%.3f"):format(alpha0:get(1, h)) end
  print(("   layer %d: %s"):format(l, table.concat(row, "  ")))
end

local ablated = m:run_with_hooks(tokens, {fwd_hooks = {{"blocks.1.attn.hook_z", mp.ablate.zero{head = 0}}}})
print(("   zero-ablating blocks.1 head 0 moves the logits by %.3f (L2 over all positions)"):format(
  ablated:sub(logits):norm()))

local out = m:generate(text, {max_new_tokens = 60, temperature = 0})
print(("   greedy continuation of the held-out text:\n   %q"):format(out))
print(("\noutputs are in %s"):format(o.out))
