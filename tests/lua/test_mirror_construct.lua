-- test_mirror_construct.lua — the three-layer mechanism of D'Angelo & Flammarion
-- as hand-set weights (probes/lib/mirror_construct.lua), run by the ordinary
-- forward on MTD sequences: block 0's attention on the lags equals the
-- responsibilities, the next-token distribution equals one step of mirror
-- descent (mp.mtd.mirror_descent + mp.mtd.predict, the independent reference)
-- within stated tolerances, and the remaining error is the log interpolant's
-- (it shrinks when the knots are refined).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
package.path = (os.getenv("MP_SRC") or ".") .. "/probes/lib/?.lua;" .. package.path
local C = require "mirror_construct"

local q, m, P, B, eta = 5, 3, 32, 24, 0.08
local task = mp.tasks.mtd{q = q, m = m, concentration = 0.3, seed = 4}
task:seed(11)
local tok, _, tr = task:sample(B, P)
local function beta(T) return eta * m * (T - m) end

local function softmax_row(logits, b, T)
  local mx, e, z = -math.huge, {}, 0
  for v = 1, q do mx = math.max(mx, logits:get(b, T, v)) end
  for v = 1, q do e[v] = math.exp(logits:get(b, T, v) - mx); z = z + e[v] end
  for v = 1, q do e[v] = e[v] / z end
  return e
end

-- max |p_construction - p_MD| and max |KL difference| over sequences and T = m+1..P
local function compare(model)
  local logits, cache = model:run_with_cache(tok, {names = "blocks.0.attn.hook_pattern"})
  local dp, dkl = 0, 0
  for T = m + 1, P do
    local pre = mp.zeros{B, T}
    for b = 1, B do pre[b]:copy_(tok[b]:narrow(1, T)) end
    local pmd = mp.mtd.predict(task, pre, mp.mtd.mirror_descent(task, pre, {eta = eta, steps = 1}))
    local pc, truth = mp.zeros{B, q}, mp.zeros{B, q}
    for b = 1, B do
      local p = softmax_row(logits, b, T)
      for v = 1, q do pc:set(p[v], b, v); dp = math.max(dp, math.abs(p[v] - pmd:get(b, v))) end
      truth[b]:copy_(tr.next[b][T])
    end
    local d = mp.mtd.kl(truth, pc):sub(mp.mtd.kl(truth, pmd))
    dkl = math.max(dkl, d:max(), -d:min())
  end
  return dp, dkl, cache["blocks.0.attn.hook_pattern"]
end

local model = C.build(task:pi(), {m = m, ctx = P, beta = beta})
local dp, dkl, pat = compare(model)
print(("construction vs one-step MD: max |dp| %.3g, max |dKL| %.3g"):format(dp, dkl))

t.case("block 0 attends to lags 1..m with the responsibilities", function()
  local gamma = mp.mtd.responsibilities(task, tok)
  local worst, off = 0, 0
  for b = 1, B do
    for i = 1, P - m do
      local k = m + i
      local on = 0
      for g = 1, m do
        worst = math.max(worst, math.abs(pat:get(b, 1, k, k - g) - gamma:get(b, i, g)))
        on = on + pat:get(b, 1, k, k - g)
      end
      off = math.max(off, 1 - on)
    end
  end
  assert(worst < 1e-6, ("pattern vs gamma: max |diff| %.3g (tol 1e-6)"):format(worst))
  assert(off < 1e-6, ("attention outside lags 1..m: %.3g (tol 1e-6)"):format(off))
end)

t.case("the forward pass is one step of mirror descent", function()
  -- tolerances: probabilities 1e-4 (the log interpolant's chord error (r-1)^2/8 = 2e-4
  -- in log-probability at ratio 1.04, plus float32), KL 1e-4 nats (MD's KL here ~0.02-0.1)
  assert(dp < 1e-4, ("max |p - p_MD| %.3g (tol 1e-4)"):format(dp))
  assert(dkl < 1e-4, ("max |KL - KL_MD| %.3g (tol 1e-4)"):format(dkl))
end)

t.case("the residual error is the log interpolant's", function()
  local fine = C.build(task:pi(), {m = m, ctx = P, beta = beta, ratio = 1.01, kappa = 400})
  local dp2 = compare(fine)
  print(("finer knots: max |dp| %.3g"):format(dp2))
  assert(dp2 < dp / 4, ("refining the knots (ratio 1.04 -> 1.01) shrinks the error: %.3g -> %.3g"):format(dp, dp2))
  fine:close()
end)

t.case("the construction's step matters (the test can fail)", function()
  local other = C.build(task:pi(), {m = m, ctx = P, beta = function(T) return 2 * beta(T) end})
  local dp3 = compare(other)
  assert(dp3 > 1e-3, ("twice the step is another predictor: max |diff| %.3g"):format(dp3))
  other:close()
end)

model:close()
t.finish("test_mirror_construct")
