-- sae_train_ref.lua — the Lua binding's SAE training and metrics (lua/lsae_train.c)
-- that tests/python/test_sae_train.py compares the Python module with, bit for bit:
--   mechprobe sae_train_ref.lua DIR
-- Makes a tiny random model (DIR/model.h5, loaded back as Python loads it) and a
-- capture file of its blocks.0.hook_resid_post (DIR/acts.h5), trains SAEs from
-- the three sources (DIR/sae_<name> SAELens folders) and writes the results and
-- metrics (%.17g) as "key value" lines into DIR/ref.txt.
local dir = arg[1]
mp.model.new{d_model = 16, n_layer = 2, n_head = 2, vocab = 20, ctx = 16, seed = 1}:save(dir .. "/model.h5")
local m <close> = mp.load(dir .. "/model.h5")
local hook = "blocks.0.hook_resid_post"
local toks = {}
for b = 1, 6 do
  local row = {}
  for t = 1, 10 do row[t] = (b * 7 + t * 3) % 20 end
  toks[b] = row
end
m:capture_prompts(toks, {out = dir .. "/acts.h5", hooks = hook})
local rows
do
  local f <close> = mp.h5.open(dir .. "/acts.h5")
  rows = f:read("acts/" .. hook):reshape{60, 16}
end
local txt <close> = assert(io.open(dir .. "/ref.txt", "w"))
local keys = {"steps", "tokens", "mse_loss", "l1_loss", "auxiliary_reconstruction_loss", "l0", "explained_variance",
              "dead_features", "rows", "mse", "dead_fraction", "ce_loss_clean", "ce_loss_with_sae",
              "ce_loss_zero_ablation", "ce_loss_recovered"}
local function put(name, t)
  for _, k in ipairs(keys) do
    if t[k] ~= nil then txt:write(string.format("%s.%s %.17g\n", name, k, t[k])) end
  end
end
local function run(name, o)
  local s, r = mp.sae.train(o)
  s:save(dir .. "/sae_" .. name)
  put(name, r)
  return s
end
local topk = {architecture = "topk", d_sae = 32, k = 4, batch_size = 20, steps = 12, lr = 1e-3, seed = 3,
              shuffle_buffer = 40}
local function with(extra)
  local o = {}
  for k, v in pairs(topk) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end
local live = run("live", with{model = m, hook = hook, tokens = toks, seqs_per_forward = 1})
run("dataset", with{dataset = dir .. "/acts.h5", hook = hook, chunk_rows = 7})
local std = run("data_std", {architecture = "standard", d_sae = 24, data = rows, batch_size = 30, steps = 9,
                             l1_coefficient = 0.5, l1_warm_up_steps = 3, lr = 2e-3, lr_scheduler = "cosineannealing",
                             lr_warm_up_steps = 2, lr_decay_steps = 2, seed = 9, shuffle_buffer = 50})
run("continued", {sae = std, data = rows, steps = 2, batch_size = 20})
put("eval_model", live:evaluate{model = m, tokens = toks})
put("eval_data", live:evaluate{data = rows})
