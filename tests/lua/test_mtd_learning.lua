-- test_mtd_learning.lua — learning, not just running: a small transformer
-- trained for a few hundred steps on MTD sequences (q = 8 symbols, m = 2 lags)
-- must get its held-out loss clearly below the unigram baseline (the entropy of
-- the token marginal, measured on the same held-out batch), heading towards the
-- oracle (the mean entropy of the true next-token distributions, from the
-- generator's ground truth).
local task = mp.tasks.mtd{q = 8, m = 2, concentration = 0.5, seed = 11, targets = "all"}
local m = mp.model.new{d_model = 48, n_layer = 2, n_head = 4, d_mlp = 96, vocab = 8, ctx = 64, seed = 5}
local r = m:train{task = task, steps = 300, batch = 16, lr = 3e-3, warmup = 30, progress = false}

-- held-out batch from a differently seeded stream of the same task (same pi*)
local eval = mp.tasks.mtd{q = 8, m = 2, concentration = 0.5, seed = 11, targets = "all"}
eval:seed(999)
local tokens, targets, truth = eval:sample(64, 64)
local loss = m:loss(tokens, targets)

-- unigram baseline: entropy of the target marginal on this batch
local counts, n = {}, 0
for b = 1, 64 do for t = 1, 64 do
  local y = targets:get(b, t)
  if y >= 0 then counts[y] = (counts[y] or 0) + 1; n = n + 1 end
end end
local unigram = 0
for _, c in pairs(counts) do unigram = unigram - c / n * math.log(c / n) end
-- oracle: cross-entropy of the true next-token distribution = its entropy in expectation;
-- measure the log-loss of the truth on the actual targets
local oracle, k = 0, 0
for b = 1, 64 do for t = 1, 64 do
  local y = targets:get(b, t)
  if y >= 0 then oracle = oracle - math.log(truth.next:get(b, t, y + 1)); k = k + 1 end
end end
oracle = oracle / k
print(("held-out loss %.3f nats; unigram baseline %.3f; oracle (true mixture) %.3f; training %.3f -> %.3f"):format(
  loss, unigram, oracle, r.loss[1], r.final_loss))
local ok = loss < unigram - 0.1 and loss > oracle - 0.05
print(("%d passed, %d failed"):format(ok and 1 or 0, ok and 0 or 1))
if not ok then os.exit(1) end
