-- test_autograd.lua — reverse-mode autograd over the Tensor (analyze/autograd.c,
-- lua/lautograd.c), each result against an independent reference:
--  * every op's gradient against central finite differences of the same
--    forward (float32 Tensors: step h = 1e-2 on inputs of O(1), the scalar
--    accumulated in double; tolerance 2e-3 (1 + |g|): truncation O(h^2) and
--    rounding O(1e-7 / h)); inputs kept away from the kinks of abs, relu,
--    clamp and max by more than h; the loss is sum(f(x) * R) with a fixed
--    random R, so that every output element counts with a different weight;
--  * closed forms: d sum(x^2) = 2x, broadcast sums, accumulation over two
--    backwards, no_grad, detach;
--  * loss = fn by autograd against the hand-written (value, dlogits) form on a
--    tiny random model: every cache _grad entry equal to 1e-6;
--  * the optimizers: AdamW and SGD with momentum fit least squares to the
--    closed-form solution (normal equations, solved in double here);
--  * the errors: non-scalar backward, in-place on a saved Tensor, backward
--    twice, in-place on a leaf that requires grad, an op with no rule.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local lcg = t.lcg(12345)
local function rnd() return (lcg() + 1) / 2 end -- uniform in [0, 1)
-- a Tensor of shape with entries uniform in [lo, hi), away from 0 by at least gap when gap is given
local function rand(shape, lo, hi, gap)
  lo, hi = lo or -1, hi or 1
  local n = t.numel(shape)
  local flat = {}
  for i = 1, n do
    local v
    repeat v = lo + (hi - lo) * rnd() until not gap or math.abs(v) > gap
    flat[i] = v
  end
  return mp.tensor(flat):reshape(shape)
end

local H, TOL = 1e-2, 2e-3

-- Checks the gradients of fn(inputs...) (a Tensor or 0-dim result) with respect
-- to every input listed in which (default all), against central differences.
local function gradcheck(name, fn, inputs, which)
  t.case(name, function()
    local R -- fixed weights for the output elements
    local function loss(...)
      local y = fn(...)
      if type(y) == "number" or y:dim() == 0 then return y end
      if not R then R = rand(y:shape(), 0.5, 1.5) end
      return (y * R):sum()
    end
    local leaves = {}
    for i, x in ipairs(inputs) do
      leaves[i] = x:clone()
      if not which or which[i] then leaves[i]:requires_grad_() end
    end
    local L = loss(table.unpack(leaves))
    assert(mp.is_tensor(L) and L.requires_grad, name .. ": the loss is not tracked")
    L:backward()
    for i, x in ipairs(inputs) do
      if not which or which[i] then
        local g = leaves[i].grad
        assert(g, name .. ": input " .. i .. " got no gradient")
        local flat = x:reshape(-1)
        local gf = g:reshape(-1)
        for e = 1, x:numel() do
          local function at(d)
            local xs = {}
            for k, v in ipairs(inputs) do xs[k] = v:clone() end
            local f = xs[i]:reshape(-1)
            f[e] = flat[e] + d
            return mp.no_grad(function() local v = loss(table.unpack(xs)) return type(v) == "number" and v or v:item() end)
          end
          local fd = (at(H) - at(-H)) / (2 * H)
          local ag = gf[e]
          assert(math.abs(fd - ag) <= TOL * (1 + math.abs(fd)),
                 ("%s: d/d input %d [%d]: autograd %.7g, finite differences %.7g"):format(name, i, e, ag, fd))
        end
      end
    end
  end)
end

local A, B3 = rand({3, 4}), rand({3, 4})
-- arithmetic with broadcasting and numbers
gradcheck("add broadcast", function(a, b) return a + b end, {rand({3, 4}), rand({4})})
gradcheck("sub broadcast", function(a, b) return a - b end, {rand({2, 1, 4}), rand({3, 1})})
gradcheck("mul broadcast", function(a, b) return a * b end, {rand({3, 4}), rand({3, 1})})
gradcheck("div", function(a, b) return a / b end, {rand({3, 4}), rand({4}, 0.5, 2)})
gradcheck("numbers", function(a) return (2 - a) * 3 + a / 4 - 1 end, {A})
gradcheck("number / tensor", function(a) return 1 / a end, {rand({5}, 0.5, 2)})
gradcheck("unary minus", function(a) return -a end, {A})
gradcheck("pow number", function(a) return a ^ 3 end, {A})
gradcheck("pow 0.5", function(a) return a:pow(0.5) end, {rand({4}, 0.5, 2)})
gradcheck("pow tensor exponent", function(a, b) return a ^ b end, {rand({4}, 0.5, 2), rand({4})})
gradcheck("number ^ tensor", function(a) return 2 ^ a end, {A})
-- elementwise functions
gradcheck("exp", function(a) return a:exp() end, {A})
gradcheck("log", function(a) return a:log() end, {rand({3, 4}, 0.5, 2)})
gradcheck("sqrt", function(a) return a:sqrt() end, {rand({3, 4}, 0.5, 2)})
gradcheck("tanh", function(a) return a:tanh() end, {A})
gradcheck("sigmoid", function(a) return a:sigmoid() end, {A})
gradcheck("relu", function(a) return a:relu() end, {rand({3, 4}, -1, 1, 0.05)})
gradcheck("abs", function(a) return a:abs() end, {rand({3, 4}, -1, 1, 0.05)})
gradcheck("clamp", function(a) return a:clamp(-0.5, 0.5) end,
          {mp.tensor({-0.9, -0.3, 0.1, 0.45, 0.7, -0.2})})
gradcheck("clamp lo only", function(a) return a:clamp(0.2) end, {mp.tensor({-0.9, 0.3, 0.1, 0.45})})
-- reductions
gradcheck("sum all", function(a) return a:sum() end, {A})
gradcheck("mean all", function(a) return a:mean() end, {A})
gradcheck("sum dim", function(a) return a:sum(2) end, {rand({2, 3, 4})})
gradcheck("mean dim keepdim", function(a) return a:mean(-1, true) end, {rand({2, 3, 4})})
gradcheck("sum dims list", function(a) return a:sum({1, 3}) end, {rand({2, 3, 4})})
gradcheck("mean dims list keepdim", function(a) return a:mean({2, 3}, true) end, {rand({2, 3, 4})})
gradcheck("max dim values", function(a) local v = a:max(2) return v end, {rand({3, 5})})
gradcheck("min dim keepdim", function(a) local v = a:min(1, true) return v end, {rand({3, 5})})
gradcheck("max all", function(a) return a:max() end, {rand({3, 5})})
gradcheck("max dims list", function(a) return a:max({1, 2}) end, {rand({2, 3, 2})})
gradcheck("norm all", function(a) return a:norm() end, {A})
gradcheck("norm p=3 dim", function(a) return a:norm(3, 2) end, {rand({3, 4}, -1, 1, 0.05)})
gradcheck("norm p=1", function(a) return a:norm(1) end, {rand({3, 4}, -1, 1, 0.05)})
gradcheck("softmax", function(a) return a:softmax(-1) end, {rand({3, 5})})
gradcheck("softmax dim 1", function(a) return a:softmax(1) end, {rand({3, 5})})
gradcheck("log_softmax", function(a) return a:log_softmax(2) end, {rand({2, 3, 5})})
-- products
gradcheck("matmul 2-D", function(a, b) return a:matmul(b) end, {rand({3, 4}), rand({4, 2})})
gradcheck("matmul batched broadcast", function(a, b) return mp.matmul(a, b) end, {rand({2, 3, 4}), rand({4, 2})})
gradcheck("matmul batch dims broadcast", function(a, b) return mp.matmul(a, b) end,
          {rand({2, 1, 3, 4}), rand({3, 4, 2})})
gradcheck("matmul 1-D left", function(a, b) return a:matmul(b) end, {rand({4}), rand({2, 4, 3})})
gradcheck("matmul 1-D right", function(a, b) return a:matmul(b) end, {rand({2, 3, 4}), rand({4})})
gradcheck("mm", function(a, b) return a:mm(b) end, {rand({2, 3}), rand({3, 2})})
gradcheck("dot", function(a, b) return a:dot(b) end, {rand({5}), rand({5})})
gradcheck("matmul 1-D . 1-D", function(a, b) return a:matmul(b) end, {rand({5}), rand({5})})
-- shapes and selection
gradcheck("reshape/view", function(a) return a:reshape(2, 6):view(6, 2) end, {A})
gradcheck("permute", function(a) return a:permute(3, 1, 2) end, {rand({2, 3, 4})})
gradcheck("transpose/t", function(a) return a:transpose(1, 2):t() end, {A})
gradcheck("unsqueeze/squeeze/flatten", function(a) return a:unsqueeze(2):squeeze():flatten() end, {A})
gradcheck("select / t[i]", function(a) return a[2] * 2 + a:select(3) end, {A})
gradcheck("t[i] of 1-D", function(a) return a[2] * a[3] end, {rand({4})})
gradcheck("narrow", function(a) return a:narrow(2, 2, 2) end, {A})
gradcheck("narrow dim 1", function(a) return a:narrow(2, 2) end, {A})
gradcheck("slice step", function(a) return a:slice(2, 1, -1, 2) end, {A})
gradcheck("index_select repeats", function(a) return a:index_select(2, {4, 1, 4}) end, {A})
gradcheck("gather", function(a) return a:gather(2, {{1, 1}, {3, 4}, {2, 2}}) end, {A})
gradcheck("cat", function(a, b) return mp.cat({a, b, a}, 2) end, {rand({2, 3}), rand({2, 2})})
gradcheck("stack", function(a, b) return mp.stack({a, b}, 2) end, {rand({2, 3}), rand({2, 3})})
gradcheck("where", function(a, b) return mp.where(mp.tensor({{1, 0, 1}}), a, b) end, {rand({2, 3}), rand({3})})
gradcheck("where number", function(a) return mp.where(a:gt(0), a, 0.5) end, {rand({2, 3}, -1, 1, 0.05)})
gradcheck("masked_fill", function(a) return a:masked_fill(mp.tensor({0, 1, 0, 1}), -3) end, {A})
gradcheck("clone", function(a) return a:clone() * a end, {A})
-- only some inputs tracked
gradcheck("mul, one side", function(a, b) return a * b end, {A, B3}, {true, false})
gradcheck("matmul, right side", function(a, b) return a:matmul(b) end, {rand({3, 4}), rand({4, 2})}, {false, true})
-- a composite: a one-layer MLP with cross-entropy through log_softmax + gather
gradcheck("mlp ce", function(x, w1, w2)
  local h = x:matmul(w1):tanh()
  local lp = h:matmul(w2):log_softmax(-1)
  return -lp:gather(2, {{2}, {1}, {3}}):mean()
end, {rand({3, 4}), rand({4, 5}), rand({5, 3})})

t.case("closed forms", function()
  local x = mp.tensor({1, -2, 3}, {requires_grad = true})
  local y = (x * x):sum()
  assert(mp.is_tensor(y) and y:dim() == 0 and y:item() == 14, "sum of squares is a 0-dim Tensor")
  y:backward()
  t.deep_eq(x.grad:totable(), {2, -4, 6})
  -- accumulation: a second graph adds
  ;(x * 3):sum():backward()
  t.deep_eq(x.grad:totable(), {5, -1, 9})
  x.grad = nil
  assert(x.grad == nil, "t.grad = nil clears it")
  ;(x:sum() * 2):backward()
  t.deep_eq(x.grad:totable(), {2, 2, 2})
  x:zero_grad()
  assert(x.grad == nil, "zero_grad clears")
  assert(x.is_leaf and x.requires_grad and x.grad_fn == nil, "leaf fields")
  local z = x * 2
  assert(not z.is_leaf and z.requires_grad and z.grad_fn == "mul", "non-leaf fields: " .. tostring(z.grad_fn))
  -- backward with a gradient
  z:backward(mp.tensor({1, 0, -1}))
  t.deep_eq(x.grad:totable(), {2, 0, -2})
  -- detach and no_grad record nothing
  local d = x:detach()
  assert(not d.requires_grad and d:totable()[1] == 1, "detach shares the values, untracked")
  local n = mp.no_grad(function() return x * 2 end)
  assert(not n.requires_grad and mp.is_grad_enabled(), "no_grad records nothing and restores")
  assert(pcall(mp.no_grad, error, "boom") == false and mp.is_grad_enabled(), "no_grad restores on error")
  -- untracked Tensors keep their old behaviour: numbers from full reductions
  local u = mp.tensor({1, 2})
  assert(type(u:sum()) == "number" and type(u[1]) == "number" and not u.requires_grad and u.grad == nil,
         "untracked results unchanged")
  -- retain_graph lets a second backward through
  local w = mp.tensor({1, 2}):requires_grad_()
  local l = (w:exp()):sum()
  l:backward{retain_graph = true}
  l:backward()
  t.near(w.grad:totable()[2], 2 * math.exp(2), 1e-4, "two backwards accumulate")
  -- requires_grad_(false) stops tracking
  w:requires_grad_(false)
  assert(not (w * 2).requires_grad, "requires_grad_(false)")
end)

t.case("errors", function()
  local x = mp.tensor({1, 2, 3}):requires_grad_()
  t.expect_error(function() (x * 2):backward() end, "has 3 elements, not one", "non-scalar backward")
  t.expect_error(function() (x * 2):backward(mp.tensor({1, 2})) end, "differs from the output's shape [3]",
                 "gradient shape")
  local y = x:exp():sum()
  y:backward()
  t.expect_error(function() y:backward() end, "already freed by an earlier backward", "backward twice")
  local c = mp.tensor({1, 2, 3})
  local p = (x * c):sum()
  c:mul_(2)
  t.expect_error(function() p:backward() end, "modified by an in-place op", "in-place on a saved Tensor")
  local s = x:exp()
  mp.no_grad(function() x:add_(1) end) -- allowed, but exp saved its output, not x: backward still fine
  s:sum():backward()
  local q = x:log()
  mp.no_grad(function() x:add_(1) end)
  t.expect_error(function() q:sum():backward() end, "modified by an in-place op", "in-place on a saved leaf")
  t.expect_error(function() x:add_(1) end, "add_: in-place op on a Tensor [3] that requires grad", "in-place on a leaf")
  t.expect_error(function() x[1] = 5 end, "in-place op on a Tensor [3] that requires grad", "t[i] = v on a leaf")
  t.expect_error(function() x:fill_(0) end, "fill_: in-place", "fill_ on a leaf")
  t.expect_error(function() x:var() end, "no gradient rule for this op", "an op without a rule")
  t.expect_error(function() x:topk(1) end, "topk: no gradient rule", "topk")
  t.expect_error(function() mp.tensor({1}):backward() end, "does not require grad", "untracked backward")
  t.expect_error(function() (x * 2):requires_grad_() end, "not a leaf", "requires_grad_ on a non-leaf")
  t.expect_error(function() x.grad = mp.tensor({1, 2}) end, "a gradient [2] for a Tensor [3]", "grad shape")
  t.expect_error(function() x:norm(math.huge) end, "no gradient for p = inf", "inf norm")
  t.expect_error(function() mp.tensor({1}, {requires_grad = 1}) end, "requires_grad", "bad option")
end)


-- loss = function(logits, cache): a metric of cached activations; its direct
-- partial joins the backward at the cached point (closed form: W), and the
-- total reaches upstream points (central differences)
t.case("loss = fn(logits, cache)", function()
  local m = mp.model.new{d_model = 8, n_layer = 2, n_head = 2, vocab = 11, ctx = 8, seed = 5, init_std = 0.3}
  local toks = {{1, 4, 2, 7}}
  local P = "blocks.0.hook_resid_post"
  local W = mp.randn({1, 4, 8}, {seed = 9})
  local function logit_only(logits) return logits[1][4][3] end
  local function both(logits, cache) return logits[1][4][3] + (cache[P] * W):sum() end
  local names = {P, "hook_embed", "blocks.1.hook_resid_post"}
  local _, c1 = m:run_with_cache(toks, {names = names, incl_bwd = true, loss = logit_only})
  local _, c2 = m:run_with_cache(toks, {names = names, incl_bwd = true, loss = both})
  local d = (c2[P .. "_grad"] - c1[P .. "_grad"] - W):abs():max()
  assert(d <= 1e-6, "the direct partial at " .. P .. " is W: off by " .. d)
  local d1 = (c2["blocks.1.hook_resid_post_grad"] - c1["blocks.1.hook_resid_post_grad"]):abs():max()
  assert(d1 == 0, "a point downstream of the cached one is unchanged: " .. d1)
  t.near(c2.loss, c1.loss + (c1[P] * W):sum(), 1e-5, "the value")
  -- upstream, at hook_embed: central differences of the metric, in a few entries
  local function value_with(p, k, eps)
    local _, c = m:run_with_cache(toks, {names = P, loss = both,
      fwd_hooks = {{"hook_embed", function(e) e:set(e:get(1, p, k) + eps, 1, p, k) end}}})
    return c.loss
  end
  local g = c2["hook_embed_grad"]
  for _, pk in ipairs({{1, 2}, {2, 5}, {4, 8}}) do
    local p, k = pk[1], pk[2]
    local fd = (value_with(p, k, 1e-2) - value_with(p, k, -1e-2)) / 2e-2
    t.near(g:get(1, p, k), fd, 2e-3 * (1 + math.abs(fd)), ("d/d hook_embed[%d][%d]"):format(p, k))
  end
  -- bwd_hooks see the total gradient too
  local seen
  m:run_with_cache(toks, {names = P, loss = both, bwd_hooks = {{P, function(gr) seen = gr:clone() end}}})
  assert((seen - c2[P .. "_grad"]):abs():max() <= 1e-6, "a backward hook at the point sees the total gradient")
end)

-- loss = fn by autograd, against the hand-written (value, dlogits) form
t.case("loss = fn by autograd", function()
  local V = 11
  local m = mp.model.new{d_model = 8, n_layer = 2, n_head = 2, vocab = V, ctx = 8, seed = 3, init_std = 0.3}
  local toks = {{1, 4, 2, 7}, {3, 3, 9, 0}}
  local ref = mp.tensor({{0.1, 0.5, 0.2, 0.9, 0.0, 0.3, 0.7, 0.2, 0.4, 0.6, 0.1}})
  -- KL(ref || softmax(logits at the last position)) summed over rows, by hand
  local function by_hand(logits)
    local last = logits:narrow(2, 4, 1):reshape(2, V) -- [2, V]: the last position
    local lp = last:log_softmax(-1)
    local p = ref / ref:sum()
    local v, dl = 0, mp.zeros(2, 4, V)
    local sm = lp:exp()
    for b = 1, 2 do
      for k = 1, V do
        local pk = p[1][k]
        if pk > 0 then v = v + pk * (math.log(pk) - lp[b][k]) end
        dl[b][4][k] = sm[b][k] - pk -- d/dlogit of sum_k p_k (log p_k - logsoftmax_k)
      end
    end
    return v, dl
  end
  local function auto(logits)
    local lp = logits:narrow(2, 4, 1):reshape(2, V):log_softmax(-1)
    local p = ref / ref:sum()
    local logp = mp.where(p:gt(0), p, 1):log()
    return (p * (logp - lp)):sum()
  end
  local _, c1 = m:run_with_cache(toks, {incl_bwd = true, loss = by_hand})
  local _, c2 = m:run_with_cache(toks, {incl_bwd = true, loss = auto})
  local n = 0
  for k, v in pairs(c1) do
    if k:match("_grad$") then
      n = n + 1
      local d = (v - c2[k]):abs():max()
      assert(d <= 1e-6, k .. ": autograd loss differs from the hand-written one by " .. d)
    end
  end
  assert(n > 5, "compared " .. n .. " gradients")
  -- the value: the cache's loss entry is the metric, the same by both forms
  t.near(c1.loss, c2.loss, 1e-6, "the metric's value")
  t.expect_error(function() m:run_with_cache(toks, {incl_bwd = true, loss = function(l) return l:sum(1) end}) end,
                 "the loss function returned a Tensor [4,11]; a metric is one number", "a non-scalar Tensor")
  t.expect_error(function()
    m:run_with_cache(toks, {incl_bwd = true, loss = function(l) return l:detach():sum() end})
  end, "returned a number", "a metric that does not depend on the tracked logits")
  -- the logits the caller gets back stay untracked
  local lg = m:run_with_cache(toks, {incl_bwd = true, loss = auto})
  assert(not lg.requires_grad and type(lg:sum()) == "number", "returned logits are untracked")
end)

-- the optimizers: least squares min |X w - y|^2 to its closed form
local function lstsq_problem()
  local X = rand({20, 3})
  local w_true = mp.tensor({{0.7}, {-1.2}, {0.4}})
  local y = X:matmul(w_true) + rand({20, 1}) * 0.05
  -- normal equations X^T X w = X^T y, solved in double (Gaussian elimination)
  local XT = X:t()
  local M, r = XT:matmul(X):totable(), XT:matmul(y):totable()
  local n = 3
  for i = 1, n do M[i][n + 1] = r[i][1] end
  for i = 1, n do
    for k = i + 1, n do
      local f = M[k][i] / M[i][i]
      for j = i, n + 1 do M[k][j] = M[k][j] - f * M[i][j] end
    end
  end
  local w = {}
  for i = n, 1, -1 do
    local s = M[i][n + 1]
    for j = i + 1, n do s = s - M[i][j] * w[j] end
    w[i] = s / M[i][i]
  end
  return X, y, w
end

t.case("adamw fits least squares", function()
  local X, y, w_star = lstsq_problem()
  local w = mp.zeros(3, 1):requires_grad_()
  local opt = mp.optim.adamw{params = {w}, lr = 0.05, weight_decay = 0, grad_clip = 0, beta2 = 0.999}
  for _ = 1, 600 do
    opt:zero_grad()
    local l = ((X:matmul(w) - y) ^ 2):mean()
    l:backward()
    opt:step()
  end
  assert(opt.steps == 600, "steps counted")
  for i = 1, 3 do t.near(w:get(i, 1), w_star[i], 2e-4, "adamw w[" .. i .. "]") end
end)

t.case("sgd with momentum fits least squares", function()
  local X, y, w_star = lstsq_problem()
  local w = mp.zeros(3, 1):requires_grad_()
  local opt = mp.optim.sgd{params = {w}, lr = 0.1, momentum = 0.9}
  for _ = 1, 400 do
    opt:zero_grad()
    ;((X:matmul(w) - y) ^ 2):mean():backward()
    opt:step()
  end
  for i = 1, 3 do t.near(w:get(i, 1), w_star[i], 1e-4, "sgd w[" .. i .. "]") end
  assert(w.grad ~= nil, "the last backward left a grad")
  opt:zero_grad()
  assert(w.grad == nil, "opt:zero_grad clears the grads")
  t.expect_error(function() mp.optim.sgd{params = {mp.zeros(2)}, lr = 0.1} end, "requires_grad", "sgd untracked param")
  t.expect_error(function() mp.optim.sgd{params = {w}, lr = -1} end, "lr", "sgd bad lr")
  local o = mp.optim.adamw{lr = 1e-3}
  assert(o.step == 0 and o.steps == 0, "mp.optim.adamw{} without params is the training Optimizer, as before")
  t.expect_error(function() o:zero_grad() end, "attempt to call", "no zero_grad without params")
  local m = mp.model.new{d_model = 8, n_layer = 1, n_head = 1, vocab = 4, ctx = 4}
  local sopt = mp.optim.adamw{params = {w}}
  t.expect_error(function() m:train_step(sopt, {{1, 2}}, {{2, 3}}) end, "steps script Tensors", "train_step")
end)

t.finish("test_autograd")
