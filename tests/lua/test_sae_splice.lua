-- test_sae_splice.lua — SAEs attached to a model (m:add_sae, run_with_saes;
-- hooks/sae_splice.c) on a tiny random model with random SAEs:
--  * use_error_term with no edit: logits bitwise equal to the clean run (also
--    with readers and an editing-capable Lua hook at the sub-points);
--  * without it: logits equal a hand-made fwd hook that replaces the
--    activation by sae:forward (1e-6), on a [B,T,D] point and on attn.hook_z;
--  * a feature ablated / steered through interventions at hook_sae_acts_post
--    equals the same done by a hand hook (1e-6);
--  * gradients at hook_sae_acts_post and hook_sae_input (the SAE's input, what
--    the backward sends upstream) against central differences of the metric
--    (logit difference, computed in double from float32 logits) for each
--    normalization and architecture;
--  * attribution patching on features against real patching (correlation);
--  * loss / generate / run_with_cache paths, and the refusals.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local function flat(x)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
  end
  walk(x:totable())
  return out
end
local function maxdiff(a, b)
  local fa, fb, m = flat(a), flat(b), 0
  assert(#fa == #fb, ("sizes %d vs %d"):format(#fa, #fb))
  for i = 1, #fa do m = math.max(m, math.abs(fa[i] - fb[i])) end
  return m
end
local function bitwise(a, b)
  local fa, fb = flat(a), flat(b)
  if #fa ~= #fb then return false end
  for i = 1, #fa do if fa[i] ~= fb[i] then return false end end
  return true
end

local D, V = 8, 13
local m = mp.model.new{d_model = D, n_layer = 2, n_head = 2, vocab = V, ctx = 8, seed = 5}
local toks = {{1, 4, 2, 7, 3, 9}, {5, 2, 8, 1, 11, 6}}
local spec = {logit_diff = {{3, 4}, {2, 10}}}
local function logit_diff(lg) -- the metric in double, as mp_grad_logit_diff
  local s = 0
  for b = 1, 2 do s = s + lg:get(b, 6, spec.logit_diff[1][b] + 1) - lg:get(b, 6, spec.logit_diff[2][b] + 1) end
  return s / 2
end

local seed = 100
local function random_sae(o)
  seed = seed + 1
  local s = mp.sae.new(o)
  local din, dsae = o.d_in, o.d_sae
  s.W_enc:copy_(mp.randn({din, dsae}, {seed = seed}):mul(0.5))
  s.b_enc:copy_(mp.randn({dsae}, {seed = seed + 1000}):mul(0.1))
  s.W_dec:copy_(mp.randn({dsae, din}, {seed = seed + 2000}):mul(0.3))
  s.b_dec:copy_(mp.randn({din}, {seed = seed + 3000}):mul(0.1))
  if o.architecture == "jumprelu" then s.threshold:copy_(mp.rand({dsae}, {seed = seed + 4000}):mul(0.3)) end
  return s
end

local H = "blocks.0.hook_resid_post"
local case = t.case
t.case = function(name, fn) m:reset_saes(); return case(name, fn) end -- a failed case leaves nothing attached
local clean = m:forward(toks)

t.case("use_error_term, no edit: the clean run, bitwise", function()
  for _, norm in ipairs{"none", "constant_norm_rescale", "layer_norm"} do
    local s = random_sae{d_in = D, d_sae = 16, hook_name = H, normalize_activations = norm}
    m:add_sae(s, {use_error_term = true})
    t.ok(bitwise(m:forward(toks), clean), norm .. ": forward with the error term is the clean run")
    local lg, cache = m:run_with_cache(toks)
    t.ok(bitwise(lg, clean), norm .. ": run_with_cache (readers at every sub-point) is the clean run")
    t.ok(cache[H .. ".hook_sae_acts_post"] ~= nil and cache[H .. ".hook_sae_error"] ~= nil, "sub-points cached")
    -- a Lua hook that could edit but does not: the output recomputed, still exactly x
    local lg2 = m:forward(toks, {fwd_hooks = {{H .. ".hook_sae_acts_post", function(a) end}}})
    t.ok(bitwise(lg2, clean), norm .. ": an unedited Lua hook at acts_post keeps the clean run")
    -- the error point is x - recons: error + output-without-error = x
    local x = cache[H .. ".hook_sae_input"]
    local rec = s:forward(x)
    t.ok(maxdiff(cache[H .. ".hook_sae_error"], x:sub(rec)) < 1e-6, norm .. ": hook_sae_error = x - sae(x)")
    m:reset_saes()
  end
end)

t.case("without the error term: a hand hook with sae:forward", function()
  for _, arch in ipairs{"standard", "topk", "jumprelu"} do
    local s = random_sae{architecture = arch, k = arch == "topk" and 3 or nil, d_in = D, d_sae = 16, hook_name = H,
                         normalize_activations = "layer_norm"}
    local hand = m:forward(toks, {fwd_hooks = {{H, function(a) return (s:forward(a)) end}}})
    t.ok(not bitwise(hand, clean), arch .. ": the SAE changes the logits")
    m:add_sae(s)
    local d = maxdiff(m:forward(toks), hand)
    t.ok(d < 1e-6, arch .. ": spliced forward vs hand hook, max diff " .. d)
    local r = m:run_with_cache(toks, {names = H .. ".*"})
    t.ok(maxdiff(r, hand) < 1e-6, arch .. ": run_with_cache")
    m:reset_saes()
    t.ok(bitwise(m:forward(toks), clean), arch .. ": reset_saes restores the model")
  end
  -- attn.hook_z: d_in = H * Dh, rows B*T
  local Z = "blocks.1.attn.hook_z"
  local s = random_sae{d_in = D, d_sae = 12, hook_name = Z}
  local hand = m:forward(toks, {fwd_hooks = {{Z, function(a)
    local sh = a:shape()
    return (s:forward(a:reshape{sh[1], sh[2], sh[3] * sh[4]})):reshape(sh)
  end}}})
  local got = m:run_with_saes(toks, {saes = {s}})
  t.ok(maxdiff(got, hand) < 1e-6, "hook_z: run_with_saes vs hand hook")
  t.ok(#m:saes() == 0, "run_with_saes detaches")
end)

t.case("features ablated and steered through interventions", function()
  local s = random_sae{d_in = D, d_sae = 16, hook_name = H}
  local P = H .. ".hook_sae_acts_post"
  for _, err in ipairs{false, true} do
    m:add_sae(s, {use_error_term = err})
    local _, cache = m:run_with_cache(toks, {names = P})
    local acts = cache[P]
    -- the feature with the largest total activation, zeroed by a patch
    local best, bj = -1, 1
    for j = 1, 16 do
      local v = 0
      for b = 1, 2 do for p = 1, 6 do v = v + acts:get(b, p, j) end end
      if v > best then best, bj = v, j end
    end
    local src = acts:clone()
    for b = 1, 2 do for p = 1, 6 do src:set(0, b, p, bj) end end
    local by_iv = m:forward(toks, {fwd_hooks = {{P, mp.patch(src)}}})
    m:reset_saes()
    local by_hand = m:forward(toks, {fwd_hooks = {{H, function(x)
      local a = s:encode(x)
      local recon = s:decode(a, x)
      for b = 1, 2 do for p = 1, 6 do a:set(0, b, p, bj) end end
      local abl = s:decode(a, x)
      if err then return x:add(abl:sub(recon)) end
      return abl
    end}}})
    local d = maxdiff(by_iv, by_hand)
    t.ok(d < 1e-5, ("error term %s: feature %d ablated by mp.patch vs by hand, max diff %g"):format(err, bj, d))
    t.ok(maxdiff(by_iv, clean) > 1e-4, "the ablation changes the logits")
    -- steering feature bj by 2 at every position
    m:add_sae(s, {use_error_term = err})
    local vec = mp.zeros{16}
    vec:set(2, bj)
    local st = m:forward(toks, {fwd_hooks = {{P, mp.steer(vec)}}})
    m:reset_saes()
    local st_hand = m:forward(toks, {fwd_hooks = {{H, function(x)
      local a = s:encode(x)
      local recon = s:decode(a, x)
      for b = 1, 2 do for p = 1, 6 do a:set(a:get(b, p, bj) + 2, b, p, bj) end end
      local out = s:decode(a, x)
      if err then return x:add(out:sub(recon)) end
      return out
    end}}})
    d = maxdiff(st, st_hand)
    t.ok(d < 1e-5, ("error term %s: mp.steer on feature %d vs by hand, max diff %g"):format(err, bj, d))
  end
end)

-- gradients against central differences: perturb one entry of the sub-point by +-h through a fwd hook
local function check_grad(label, err)
  local worst = 0
  for _, sub in ipairs{"hook_sae_acts_post", "hook_sae_input"} do
    local name = H .. "." .. sub
    local _, cache = m:run_with_cache(toks, {names = name, incl_bwd = true, loss = spec})
    local g, act = cache[name .. "_grad"], cache[name]
    t.ok(g ~= nil and #g:shape() == 3, label .. " " .. sub .. ": gradient cached")
    local W = g:shape()[3]
    local checked = 0
    for k = 1, 12 do
      if checked == 6 then break end
      local b, p, j = (k % 2) + 1, (k * 5) % 6 + 1, (k * 7) % W + 1
      if sub == "hook_sae_acts_post" then -- a feature that fires there (a dead one's gradient is exact too)
        for jj = 0, W - 1 do
          local c = (j + jj - 1) % W + 1
          if act:get(b, p, c) > 0 then j = c; break end
        end
      end
      local function f(eps)
        local lg = m:forward(toks, {fwd_hooks = {{name, function(a) a:set(a:get(b, p, j) + eps, b, p, j) end}}})
        return logit_diff(lg)
      end
      -- the step: 1e-2 for a feature; for the input a small fraction of the row's size (the normalizations are
      -- nonlinear at the scale of the row), with Richardson's extrapolation of steps h and h/2 (error O(h^4))
      local fd
      if sub == "hook_sae_acts_post" then
        fd = (f(1e-2) - f(-1e-2)) / 2e-2
      else
        local ss = 0
        for i = 1, W do ss = ss + act:get(b, p, i) ^ 2 end
        local h = 0.02 * math.sqrt(ss / W)
        local d1, d2 = (f(h) - f(-h)) / (2 * h), (f(h / 2) - f(-h / 2)) / h
        fd = (4 * d2 - d1) / 3
        -- a topk / relu / threshold switch within the step (the SAE is not smooth there): another element
        if math.abs(d1 - d2) > 0.05 * math.abs(d2) + 1e-3 then goto next end
      end
      checked = checked + 1
      local an = g:get(b, p, j)
      local e = math.abs(fd - an) / (math.abs(fd) + 1e-2)
      worst = math.max(worst, e)
      t.ok(e < 2e-2, ("%s %s [%d,%d,%d]: analytic %.6g vs central difference %.6g"):format(label, sub, b, p, j, an, fd))
      ::next::
    end
    t.ok(checked >= 4, label .. " " .. sub .. ": at least 4 smooth elements checked, got " .. checked)
  end
  return worst
end

t.case("gradients through the SAE against central differences", function()
  local worst = 0
  for _, norm in ipairs{"none", "expected_average_only_in", "constant_norm_rescale", "layer_norm"} do
    for _, arch in ipairs{"standard", "topk", "jumprelu"} do
      local s = random_sae{architecture = arch, k = arch == "topk" and 5 or nil, d_in = D, d_sae = 16,
                           hook_name = H, normalize_activations = norm}
      m:add_sae(s)
      worst = math.max(worst, check_grad(norm .. "/" .. arch))
      m:reset_saes()
    end
  end
  io.write(("gradient check: worst relative error %.3g\n"):format(worst))
  -- with the error term: the same gradient upstream (J^T g, the error detached) and g at the error node
  local s = random_sae{d_in = D, d_sae = 16, hook_name = H, normalize_activations = "layer_norm"}
  m:add_sae(s, {use_error_term = true})
  local _, c1 = m:run_with_cache(toks, {names = H .. "*", incl_bwd = true, loss = spec})
  t.ok(maxdiff(c1[H .. ".hook_sae_error_grad"], c1[H .. ".hook_sae_output_grad"]) == 0,
       "error node gradient = the output's")
  t.ok(maxdiff(c1[H .. ".hook_sae_output_grad"], c1[H .. "_grad"]) == 0,
       "a backward hook at the point sees the output's gradient")
  -- upstream of the point: d/d resid_mid is the SAE's input gradient carried back through the MLP branch
  local _, c0 = m:run_with_cache(toks, {names = "blocks.0.hook_resid_mid", incl_bwd = true, loss = spec})
  m:reset_saes()
  local _, c2 = m:run_with_cache(toks, {names = "blocks.0.hook_resid_mid", incl_bwd = true, loss = spec})
  t.ok(maxdiff(c0["blocks.0.hook_resid_mid_grad"], c2["blocks.0.hook_resid_mid_grad"]) > 1e-5,
       "the SAE's backward changes the gradient upstream (J^T g, not g)")
end)

t.case("attribution patching on features vs real patching", function()
  local s = random_sae{d_in = D, d_sae = 16, hook_name = H}
  m:add_sae(s, {use_error_term = true})
  local P = H .. ".hook_sae_acts_post"
  local cl, cx = {{1, 4, 2, 7, 3, 9}}, {{1, 4, 2, 5, 3, 9}}
  local met = {logit_diff = {3, 2}}
  local attr, vals = mp.attribution_patch(m, cl, cx, {names = P, metric = met, per = "neuron"})
  local a = attr[P]
  t.ok(#a:shape() == 1 and a:shape()[1] == 16, "one estimate per feature")
  local _, cc = m:run_with_cache(cl, {names = P})
  local _, cxc = m:run_with_cache(cx, {names = P})
  local function ld(lg) return lg:get(1, 6, 4) - lg:get(1, 6, 3) end
  local base = ld(m:forward(cx))
  t.ok(math.abs(base - vals.corrupt) < 1e-5, "the corrupt metric")
  -- real patching: feature j from the clean run into the corrupted one, every position
  local est, real = {}, {}
  for j = 1, 16 do
    local lg = m:forward(cx, {fwd_hooks = {{P, function(x)
      for p = 1, 6 do x:set(cc[P]:get(1, p, j), 1, p, j) end
    end}}})
    real[j] = ld(lg) - base
    est[j] = a:get(j)
  end
  local function corr(u, v)
    local n, su, sv = #u, 0, 0
    for i = 1, n do su, sv = su + u[i], sv + v[i] end
    local mu, mv, cuv, cuu, cvv = su / n, sv / n, 0, 0, 0
    for i = 1, n do
      cuv = cuv + (u[i] - mu) * (v[i] - mv); cuu = cuu + (u[i] - mu) ^ 2; cvv = cvv + (v[i] - mv) ^ 2
    end
    return cuv / math.sqrt(cuu * cvv)
  end
  local r = corr(est, real)
  io.write(("attribution vs real patching on 16 features: correlation %.4f\n"):format(r))
  t.ok(r > 0.8, "attribution patching correlates with real patching (r = " .. r .. ")")
  m:reset_saes()
end)

t.case("loss, generate and run_with_cache_with_saes", function()
  local s = random_sae{d_in = D, d_sae = 16, hook_name = H}
  local tg = {{4, 2, 7, 3, 9, 1}, {2, 8, 1, 11, 6, 0}}
  local hand = m:loss(toks, tg, {fwd_hooks = {{H, function(a) return (s:forward(a)) end}}})
  m:add_sae(s)
  local l = m:loss(toks, tg)
  t.ok(math.abs(l - hand) < 1e-6, ("m:loss with an SAE %.9g vs hand hook %.9g"):format(l, hand))
  local _, g1 = m:generate({1, 4, 2}, {max_new_tokens = 4, temperature = 0})
  m:reset_saes()
  local _, g2 = m:generate({1, 4, 2}, {max_new_tokens = 4, temperature = 0,
                                       fwd_hooks = {{H, function(a) return (s:forward(a)) end}}})
  t.ok(table.concat(g1, ",") == table.concat(g2, ","), "generate with the SAE = generate with the hand hook")
  m:add_sae(s, {use_error_term = true})
  local _, g3 = m:generate({1, 4, 2}, {max_new_tokens = 4, temperature = 0})
  m:reset_saes()
  local _, g4 = m:generate({1, 4, 2}, {max_new_tokens = 4, temperature = 0})
  t.ok(table.concat(g3, ",") == table.concat(g4, ","), "generate with the error term = without the SAE")
  local lg, cache = m:run_with_cache_with_saes(toks, {saes = s, names = "*hook_sae_recons"})
  t.ok(cache[H .. ".hook_sae_recons"] ~= nil and maxdiff(lg, m:forward(toks)) > 0, "run_with_cache_with_saes")
  t.ok(#m:saes() == 0, "detached after run_with_cache_with_saes")
end)

t.case("m:capture runs the attached SAE", function()
  local s = random_sae{d_in = D, d_sae = 16, hook_name = H}
  local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
  m:add_sae(s)
  local _, cache = m:run_with_cache(toks, {names = "blocks.1.hook_resid_pre"})
  m:capture(toks, {out = dir .. "/sae.h5", hooks = "blocks.1.hook_resid_pre"})
  m:reset_saes()
  local _, plain = m:run_with_cache(toks, {names = "blocks.1.hook_resid_pre"})
  local f = mp.h5.open(dir .. "/sae.h5")
  local got = f:read("/acts/blocks.1.hook_resid_pre")
  f:close()
  os.execute("rm -rf " .. dir)
  t.ok(maxdiff(got, cache["blocks.1.hook_resid_pre"]) == 0, "captured = run_with_cache with the SAE")
  t.ok(maxdiff(got, plain["blocks.1.hook_resid_pre"]) > 1e-4, "and not the model without it")
end)

t.case("refusals", function()
  local function err_of(f, ...) local ok, e = pcall(f, ...); return not ok and tostring(e) or "" end
  local s = random_sae{d_in = 5, d_sae = 16, hook_name = H}
  local e = err_of(m.add_sae, m, s)
  t.ok(e:find("d_in is 5", 1, true) and e:find("8 values per position", 1, true), "wrong d_in names both: " .. e)
  s = random_sae{d_in = D, d_sae = 16, hook_name = "blocks.7.hook_resid_post"}
  e = err_of(m.add_sae, m, s)
  t.ok(e:find("not a hook point", 1, true) and e:find("out of range", 1, true), "unknown hook: " .. e)
  s = random_sae{d_in = 6, d_sae = 16, hook_name = "blocks.0.attn.hook_pattern"}
  e = err_of(m.add_sae, m, s)
  t.ok(e:find("attention map", 1, true), "pattern refused: " .. e)
  s = random_sae{d_in = D, d_sae = 16, hook_name = H}
  m:add_sae(s)
  e = err_of(m.add_sae, m, random_sae{d_in = D, d_sae = 4, hook_name = H})
  t.ok(e:find("already", 1, true), "a second SAE at the point: " .. e)
  e = err_of(s.close, s)
  t.ok(e:find("attached", 1, true), "closing an attached SAE is refused: " .. e)
  t.ok(#m:saes() == 1 and m:saes()[1] == s, "m:saes() lists it")
  local names = m:hook_names()
  local at
  for i, n in ipairs(names) do if n == H then at = i end end
  t.ok(at and names[at + 1] == H .. ".hook_sae_input" and names[at + 5] == H .. ".hook_sae_output" and
       names[at + 6] == "blocks.1.hook_resid_pre", "hook_names lists the sub-points after the point, in order")
  e = err_of(m.forward, m, toks, {fwd_hooks = {{H .. ".hook_sae_error", function() end}}})
  t.ok(e:find("unknown hook name", 1, true), "no error point without use_error_term: " .. e)
  e = err_of(m.forward, m, toks, {fwd_hooks = {{H .. ".hook_sae_acts_post", function() error("boom") end}}})
  t.ok(e:find("boom", 1, true) and e:find(H .. ".hook_sae_acts_post", 1, true), "a hook's error names it: " .. e)
  m:reset_saes()
  s:close()
end)

t.finish("test_sae_splice")
