-- quickstart.lua — the README's main job: a tour of mechprobe on a small model.
--
--   mechprobe quickstart [--out DIR] [--model FILE]
--
-- Without --model it makes a demo model: a randomly initialised Llama-style
-- transformer (d_model 64, 4 layers, 4 query heads sharing 2 key/value heads,
-- SwiGLU MLP 172 wide, RoPE, seed 1) with a byte-level tokenizer. Its weights
-- are random, so its text is noise; the point is the workflow (a trained
-- default replaces it once training lands). Then it: captures every hook point
-- to an HDF5 run file, reads attention patterns back through the Lua API,
-- ablates a head and measures the effect, and generates text.
local cli = require "cli"
local o = cli.parse(arg, {
  name = "quickstart",
  summary = "Capture, inspect, intervene and generate on a small model; outputs go to --out.",
  {"out", "DIR", "output folder", default = "out/quickstart"},
  {"model", "FILE", "use this llama2.c checkpoint instead of the demo model"},
})
mp.mkdir(o.out)

local path = o.model
if not path then
  path = o.out .. "/demo-model.bin"
  local vocab = mp.tokenizer.save_bytelevel(o.out .. "/tokenizer.bin")
  mp.model.new{d_model = 64, n_layer = 4, n_head = 4, n_kv_head = 2, d_mlp = 172,
               vocab = vocab, ctx = 128, seed = 1}:save(path)
  print(("demo model: randomly initialised (seed 1), written to %s with %s/tokenizer.bin"):format(path, o.out))
end
local m = mp.load(path)
print(m)

-- 1. Stream every hook point (and the logits) to an HDF5 run file.
local text = "The quick brown fox jumps over the lazy dog."
local tokens = m:to_tokens(text)
local run_file = o.out .. "/capture.h5"
local n = m:capture(tokens, {out = run_file, hooks = "*", logits = true})
print(("\n1. captured %d datasets for %d tokens -> %s"):format(n, #tokens, run_file))
print("   in Python: h5py.File(path)['acts/blocks.0.attn.hook_pattern'][0, head]")

-- 2. The same activations in memory, like TransformerLens' run_with_cache.
local logits, cache = m:run_with_cache(tokens, {names = "blocks.*.attn.hook_pattern"})
print("\n2. mean attention to the first token (BOS), per layer and head:")
local cfg = m.config
for l = 0, cfg.n_layer - 1 do
  local pat = cache[("blocks.%d.attn.hook_pattern"):format(l)]  -- [B,H,T,T]
  local row = {}
  for h = 1, cfg.n_head do
    local s = 0
    for q = 1, #tokens do s = s + pat:get(1, h, q, 1) end
    row[#row + 1] = ("%.3f"):format(s / #tokens)
  end
  print(("   layer %d: %s"):format(l, table.concat(row, "  ")))
end

-- 3. Zero-ablate head 0 of layer 1 and measure how the next-token prediction moves.
local ablated = m:run_with_hooks(tokens, {fwd_hooks = {
  {"blocks.1.attn.hook_z", mp.ablate.zero{head = 0}},
}})
local diff = ablated:sub(logits)
print(("\n3. zero-ablating blocks.1 head 0 changes the logits by %.4f (L2 norm over all positions)"):format(diff:norm()))

-- 4. Generate a continuation (greedy).
local out = m:generate(text, {max_new_tokens = 24, temperature = 0})
print(("\n4. greedy continuation:\n   %q"):format(out))
print(("\noutputs are in %s"):format(o.out))
