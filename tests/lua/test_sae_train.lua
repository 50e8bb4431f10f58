-- tests/lua/test_sae_train.lua — mp.sae.train / sae:evaluate / mp.sae.evaluate
-- (lua/lsae_train.c): a live source (model + hook + tokens), a capture file
-- (dataset =) and in-memory rows (data =) train the same SAE bit for bit when
-- they hand out the same rows; results and metrics tables; checkpoints; errors.
local fails = 0
local function check(c, msg) if not c then fails = fails + 1; io.stderr:write("FAIL: " .. msg .. "\n") end end
local function expect_error(f, pat, what)
  local ok, err = pcall(f)
  check(not ok and tostring(err):find(pat, 1, true), what .. ": expected an error containing '" .. pat .. "', got " .. tostring(err))
end

local m <close> = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, vocab = 20, ctx = 16, seed = 1}
local hook = "blocks.0.hook_resid_post"
local toks = {}
for b = 1, 6 do
  local row = {}
  for t = 1, 10 do row[t] = (b * 7 + t * 3) % 20 end
  toks[b] = row
end

local common = {architecture = "topk", d_sae = 32, k = 4, batch_size = 20, steps = 12, lr = 1e-3, seed = 3,
                shuffle_buffer = 40, epochs = 0}
local function opts(extra)
  local o = {}
  for k, v in pairs(common) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

-- live
local calls = {}
local sae1, r1 = mp.sae.train(opts{model = m, hook = hook, tokens = toks, seqs_per_forward = 1, checkpoint_every = 5,
                                   on_checkpoint = function(s, step, tokens) calls[#calls + 1] = step; check(s.cfg.d_in == 16, "ckpt sae") end})
check(r1.steps == 12 and r1.tokens == 240, "live: steps/tokens " .. r1.steps .. " " .. r1.tokens)
check(#calls == 3 and calls[1] == 5 and calls[2] == 10 and calls[3] == 12, "checkpoints at 5, 10 and the end")
check(sae1.cfg.hook_name == hook and sae1.cfg.hook_layer == 0 and sae1.cfg.architecture == "topk", "live: cfg")
check(r1.l0 <= 4 and r1.mse_loss > 0 and r1.auxiliary_reconstruction_loss >= 0 and r1.tokens_per_second > 0, "live: result fields")

-- the same rows from a capture file and from a Tensor
local path = os.tmpname() .. ".h5"
m:capture_prompts(toks, {out = path, hooks = hook})
local sae2, r2 = mp.sae.train(opts{dataset = path, hook = hook, chunk_rows = 7})
local rows = {}
do
  local f <close> = mp.h5.open(path)
  local a = f:read("acts/" .. hook)           -- [6, 10, 16]
  rows = a:reshape{60, 16}
end
local sae3, r3 = mp.sae.train(opts{data = rows})
os.remove(path)
local function same(a, b)
  local d = (a - b):abs():max()
  if type(d) ~= "number" then d = d:item() end
  return d == 0
end
check(same(sae1.W_dec, sae2.W_dec) and same(sae1.b_dec, sae2.b_dec), "live and dataset train the same SAE")
check(same(sae2.W_enc, sae3.W_enc) and same(sae2.b_enc, sae3.b_enc), "dataset and data train the same SAE")
check(r2.mse_loss == r3.mse_loss, "same losses")

-- continue training a given SAE (no re-init)
local before = sae3.W_dec:clone()
local sae4, r4 = mp.sae.train{sae = sae3, data = rows, steps = 2, batch_size = 20}
check(rawequal(sae4, sae3) and r4.steps == 2 and not same(before, sae3.W_dec), "a given SAE trains in place")

-- metrics
local met = sae1:evaluate{model = m, tokens = toks}
check(met.rows == 60 and met.l0 <= 4 and met.explained_variance < 1 and met.ce_loss_recovered ~= nil, "evaluate fields")
check(math.abs(met.ce_loss_recovered - (met.ce_loss_zero_ablation - met.ce_loss_with_sae) /
      (met.ce_loss_zero_ablation - met.ce_loss_clean)) < 1e-12, "CE recovered formula")
local met2 = mp.sae.evaluate(sae1, {model = m, tokens = toks})
check(met2.ce_loss_with_sae == met.ce_loss_with_sae, "mp.sae.evaluate = sae:evaluate")
local met3 = sae1:evaluate{data = rows}
check(met3.rows == 60 and math.abs(met3.explained_variance - met.explained_variance) < 1e-4, "rows metrics: EV "
      .. met3.explained_variance .. " vs " .. met.explained_variance)

-- standard
local s5, r5 = mp.sae.train{architecture = "standard", d_sae = 24, data = rows, batch_size = 30, training_tokens = 90,
                            l1_coefficient = 0.5, l1_warm_up_steps = 2, lr_scheduler = "cosineannealing"}
check(r5.steps == 3 and r5.l1_loss ~= nil, "standard: training_tokens / batch_size steps, l1_loss")

-- errors
expect_error(function() mp.sae.train{architecture = "topk", d_sae = 8, k = 2, data = rows} end,
             "exactly one of 'steps' and 'training_tokens'", "no steps")
expect_error(function() mp.sae.train{sae = sae3, d_sae = 8, data = rows, steps = 1} end, "for a new SAE", "sae + d_sae")
expect_error(function() mp.sae.train(opts{data = rows, model = m}) end, "exactly one data source", "two sources")
expect_error(function() mp.sae.train(opts{dataset = "x.h5"}) end, "needs option 'hook'", "dataset without hook")
expect_error(function() mp.sae.train(opts{dataset = "/nonexistent/x.h5", hook = hook}) end, "/nonexistent/x.h5", "missing file")
expect_error(function() mp.sae.train(opts{data = rows, architecture = "jumprelu"}) end, "architecture", "jumprelu")
expect_error(function() mp.sae.train(opts{data = rows, lr = -1}) end, "lr must be > 0", "bad lr")
expect_error(function() mp.sae.train(opts{model = m, hook = "blocks.7.hook_resid_post", tokens = toks}) end,
             "blocks.7.hook_resid_post", "bad hook")
expect_error(function() mp.sae.train(opts{data = rows, checkpoint_every = 2, on_checkpoint = function() error("boom") end}) end,
             "boom", "a failing checkpoint callback")
expect_error(function() mp.sae.train(opts{model = m, hook = hook, tokens = toks, checkpoint_every = 2,
                                          on_checkpoint = function() m:close() end}) end, "in use", "closing the model")
expect_error(function() mp.sae.train(opts{data = rows, checkpoint_every = 2, on_checkpoint = function(s) s:close() end}) end,
             "closed the SAE being trained", "closing the SAE")
check(m.config.d_model == 16, "the model survives")
expect_error(function() sae1:evaluate{model = m} end, "needs option 'tokens'", "evaluate without tokens")

if fails > 0 then error(fails .. " check(s) failed") end
print("test_sae_train.lua: ok")
