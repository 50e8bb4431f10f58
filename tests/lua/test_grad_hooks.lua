-- test_grad_hooks.lua — gradients at hook points (m:run_with_cache{incl_bwd},
-- bwd_hooks) and attribution patching, each against an independent computation:
--  * every hook's gradient against central finite differences of the metric,
--    the perturbation made by a forward hook on one element (float32 forward:
--    step 1e-2, tolerance 2e-4 + 2e-3 |g|: truncation O(h^2) and rounding
--    O(1e-7 / h) of an O(1) metric), on a Llama-style GQA model, a GPT-2-style
--    LayerNorm/GELU/learned-positions model with biases, an ssmax model, and
--    (steps 5e-3 / 3e-3) an entmax15 model and a rope_id model;
--  * backward hooks: reverse firing order, the same gradients as the cache, and
--    edits against closed forms (doubling at a cut doubles everything upstream
--    exactly; zeroing hook_attn_out leaves resid_pre's gradient equal to
--    resid_mid's);
--  * attribution patching: exact (1e-5) against real activation patching where
--    the metric is linear in the patched activation (ln_final with logit_diff),
--    and the correlation with real patching over every head of hook_z;
--  * the loss forms ("ce" against m:loss, a Lua function) and the errors.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local V, B, T = 40, 2, 5
local function model(extra)
  local o = {d_model = 16, n_layer = 2, n_head = 4, n_kv_head = 2, vocab = V, ctx = 16, seed = 7, init_std = 0.3}
  for k, v in pairs(extra or {}) do o[k] = v end
  return mp.model.new(o)
end
local toks = {{1, 5, 9, 3, 7}, {2, 8, 4, 6, 11}}
local spec = {logit_diff = {{3, 12}, {5, 7}}} -- per-row correct / wrong ids

-- the metric in Lua from the logits: mean over rows of logit[c] - logit[w] at the last position
local function logit_diff(logits)
  local s = 0
  for b = 1, B do
    local c, w = spec.logit_diff[1][b], spec.logit_diff[2][b]
    s = s + logits:get(b, T, c + 1) - logits:get(b, T, w + 1)
  end
  return s / B
end

-- indices (1-based, one per dim) of flat element e of shape sh
local function unflat(e, sh)
  local idx = {}
  for d = #sh, 1, -1 do
    idx[d] = (e - 1) % sh[d] + 1
    e = (e - 1) // sh[d] + 1
  end
  return idx
end

-- elements to check: the largest |g| and a few spread ones; attention maps only on and below the diagonal
local function picks(g, is_map)
  local sh, flat = g:shape(), g:reshape(-1)
  local n, best, bv = g:numel(), nil, -1
  local function ok(e)
    if not is_map then return true end
    local i = unflat(e, sh)
    return i[4] <= i[3]
  end
  for e = 1, n do
    local v = math.abs(flat[e])
    if ok(e) and v > bv then best, bv = e, v end
  end
  local out = {best}
  for k = 1, 3 do
    local e = (k * 7919 * 13) % n + 1
    while not ok(e) do e = e % n + 1 end
    out[#out + 1] = e
  end
  return out
end

local function check_fd(label, m, h)
  local _, cache = m:run_with_cache(toks, {incl_bwd = true, loss = spec})
  local worst, nchk = 0, 0
  h = h or 1e-2
  for _, name in ipairs(m:hook_names()) do
    local g, act = rawget(cache, name .. "_grad"), rawget(cache, name)
    if not g then -- an opt-in point ('*' leaves it out): asked for by name
      local ok, r1, r2 = pcall(m.run_with_cache, m, toks, {names = name, incl_bwd = true, loss = spec})
      if ok then
        g, act = r2[name .. "_grad"], r2[name]
      else -- a hook point without a backward yet: asking for it by name says so
        t.ok(tostring(r1):find("no gradient at hook " .. name .. " yet", 1, true) ~= nil,
             label .. " " .. name .. ": " .. tostring(r1))
        goto continue
      end
    end
    t.ok(#g:shape() == #act:shape(), label .. " " .. name .. ": gradient has the activation's shape")
    local is_map = name:find("hook_attn_scores") or name:find("hook_pattern")
    for _, e in ipairs(picks(g, is_map)) do
      local idx = unflat(e, g:shape())
      local function f(eps)
        local lg = m:forward(toks, {fwd_hooks = {{name, function(a)
          a:set(a:get(table.unpack(idx)) + eps, table.unpack(idx))
        end}}})
        return logit_diff(lg)
      end
      local fd = (f(h) - f(-h)) / (2 * h)
      if name:find("hook_scale", 1, true) then
        -- a norm's scale s divides everything after it: central differences at a step of a few % of s are
        -- truncation-bound, so Richardson's extrapolation of steps 4% and 2% of s (error O(h^4))
        local hh = 0.04 * math.abs(act:get(table.unpack(idx)))
        local d1, d2 = (f(hh) - f(-hh)) / (2 * hh), (f(hh / 2) - f(-hh / 2)) / hh
        fd = (4 * d2 - d1) / 3
      end
      local gv = g:get(table.unpack(idx))
      local err = math.abs(fd - gv)
      worst = math.max(worst, err / (2e-4 + 2e-3 * math.abs(gv)))
      nchk = nchk + 1
      t.ok(err <= 2e-4 + 2e-3 * math.abs(gv),
           ("%s %s [%s]: gradient %.6g vs finite difference %.6g"):format(label, name,
             table.concat(idx, ","), gv, fd))
    end
    ::continue::
  end
  print(("%s: %d elements checked against finite differences, worst error %.3f of the tolerance")
        :format(label, nchk, worst))
end

t.case("finite differences, Llama-style GQA (RMSNorm, SwiGLU, RoPE)", function()
  check_fd("llama", model())
end)
t.case("finite differences, GPT-2 style (LayerNorm, GELU, learned positions, biases)", function()
  check_fd("gpt2", model{norm = "layer", mlp = "gelu", pos = "learned", linear_bias = true, tied = false,
                         n_kv_head = 4})
end)
t.case("finite differences, ssmax attention (a row factor on the scores)", function()
  check_fd("ssmax", model{attn = "ssmax", seed = 3})
end)

-- smaller steps where the curvature is larger (rope_id's temperature) or the map
-- is only piecewise smooth (entmax's support: a smaller init keeps it moderate)
t.case("finite differences, entmax15 attention and rope_id (a per-position logit factor)", function()
  check_fd("entmax15", model{attn = "entmax15", seed = 5, init_std = 0.15}, 5e-3)
  check_fd("rope_id", model{pos = "rope_id", seed = 9}, 3e-3)
end)

t.case("backward hooks: reverse order, the cache's gradients", function()
  local m = model()
  local fwd, bwd, seen = {}, {}, {}
  local _, cache = m:run_with_cache(toks, {incl_bwd = true, loss = spec,
    fwd_hooks = {{"*", function(_, hook) fwd[#fwd + 1] = hook.name end}},
    bwd_hooks = {{"*", function(g, hook) bwd[#bwd + 1] = hook.name; seen[hook.name] = g:clone() end}}})
  -- the points with a gradient (the cache has NAME_grad for exactly those)
  local with = {}
  for _, name in ipairs(fwd) do if rawget(cache, name .. "_grad") then with[#with + 1] = name end end
  fwd = with
  t.ok(#fwd >= 20 and #bwd == #fwd, "every point with a gradient fires once each way")
  for i = 1, #fwd do t.ok(bwd[i] == fwd[#fwd + 1 - i], ("backward %d is %s (got %s)"):format(i, fwd[#fwd + 1 - i], bwd[i])) end
  for name, g in pairs(seen) do
    t.ok(g:sub(cache[name .. "_grad"]):norm() == 0, name .. ": the hook saw the cached gradient")
  end
end)

t.case("backward hooks: edits propagate as the closed forms say", function()
  local m = model()
  local _, base = m:run_with_cache(toks, {incl_bwd = true, loss = spec})
  -- blocks.1.hook_resid_mid is a cut: everything before it reaches the metric through it alone
  local _, dbl = m:run_with_cache(toks, {incl_bwd = true, loss = spec,
    bwd_hooks = {{"blocks.1.hook_resid_mid", function(g) g:mul_(2) end}}})
  for _, name in ipairs(m:hook_names()) do
    local a, b = rawget(base, name .. "_grad"), rawget(dbl, name .. "_grad")
    if not a then goto continue end
    local up = name == "hook_embed" or name:find("^blocks%.0%.") or name:find("^blocks%.1%.hook_resid_pre")
             or name:find("^blocks%.1%.ln1") or name:find("^blocks%.1%.attn") or name:find("^blocks%.1%.hook_attn_out")
             or name == "blocks.1.hook_resid_mid"
    local want = up and a:mul(2) or a
    t.ok(b:sub(want):norm() == 0, name .. (up and ": doubled exactly" or ": unchanged downstream of the edit"))
    ::continue::
  end
  -- zeroing hook_attn_out's gradient: resid_pre then gets resid_mid's through the skip alone
  local _, z = m:run_with_cache(toks, {incl_bwd = true, loss = spec,
    bwd_hooks = {{"blocks.1.hook_attn_out", mp.ablate.zero()}}})
  t.ok(z["blocks.1.hook_resid_pre_grad"]:sub(z["blocks.1.hook_resid_mid_grad"]):norm() == 0,
       "attn_out zeroed: d resid_pre = d resid_mid")
  t.ok(base["blocks.1.hook_resid_pre_grad"]:sub(base["blocks.1.hook_resid_mid_grad"]):norm() > 1e-4,
       "without the edit they differ")
  t.ok(z["blocks.1.attn.hook_z_grad"]:norm() == 0 and z["blocks.1.hook_attn_out_grad"]:norm() == 0,
       "the attention branch sees the zero")
  t.ok(z["blocks.1.hook_resid_mid_grad"]:sub(base["blocks.1.hook_resid_mid_grad"]):norm() == 0,
       "the residual gradient at the edit is unchanged")
  -- zeroing hook_mlp_in's gradient (the MLP branch's input): resid_mid then gets resid_post's alone
  local _, mi = m:run_with_cache(toks, {incl_bwd = true, loss = spec,
    bwd_hooks = {{"blocks.1.hook_mlp_in", mp.ablate.zero()}}})
  t.ok(mi["blocks.1.hook_resid_mid_grad"]:sub(mi["blocks.1.hook_resid_post_grad"]):norm() == 0,
       "mlp_in zeroed: d resid_mid = d resid_post")
  t.ok(base["blocks.1.hook_resid_mid_grad"]:sub(base["blocks.1.hook_resid_post_grad"]):norm() > 1e-4,
       "without the edit they differ")
  -- hook_result (opt-in): each head's gradient is attn_out's; zeroing head 2's zeroes its hook_z gradient only
  local names = "blocks.1.attn.hook_result,blocks.1.attn.hook_z,blocks.1.hook_attn_out"
  local _, r0 = m:run_with_cache(toks, {names = names, incl_bwd = true, loss = spec})
  local gr, ga = r0["blocks.1.attn.hook_result_grad"], r0["blocks.1.hook_attn_out_grad"]   -- [B,T,H,D], [B,T,D]
  for h = 1, 4 do t.ok(gr:narrow(3, h, 1):sub(ga:unsqueeze(3)):norm() == 0, ("hook_result head %d: d = d attn_out"):format(h - 1)) end
  local _, r1 = m:run_with_cache(toks, {names = names, incl_bwd = true, loss = spec,
    bwd_hooks = {{"blocks.1.attn.hook_result", mp.ablate.zero{head = 2}}}})
  local z0, z1 = r0["blocks.1.attn.hook_z_grad"], r1["blocks.1.attn.hook_z_grad"]           -- [B,T,H,Dh]
  local zb = base["blocks.1.attn.hook_z_grad"]                      -- through the fused W_O backward
  t.ok(z0:sub(zb):norm() <= 1e-5 * zb:norm(), ("hook_z gradient through the per-head hook_result path = the fused one "
       .. "(%.2g of %.2g)"):format(z0:sub(zb):norm(), zb:norm()))
  for h = 1, 4 do
    local a, b = z0:narrow(3, h, 1), z1:narrow(3, h, 1)
    local d = b:sub(a):norm()
    if h == 3 then t.ok(b:norm() == 0 and a:norm() > 1e-4, "head 2's hook_z gradient zeroed")
    else t.ok(d < 1e-6 * (1 + a:norm()), ("head %d's hook_z gradient unchanged (%.2g)"):format(h - 1, d)) end
  end
end)

t.case("loss forms: \"ce\" is m:loss, a Lua function is its own gradient", function()
  local m = model()
  local targets = {{5, 9, 3, 7, -1}, {8, 4, 6, 11, 1}}
  local _, c = m:run_with_cache(toks, {incl_bwd = true, loss = "ce", targets = targets,
                                       names = "blocks.0.hook_resid_pre"})
  t.ok_near(c.loss, m:loss(toks, targets), 1e-5, "cache.loss is m:loss")
  -- finite differences of m:loss at one element
  local g = c["blocks.0.hook_resid_pre_grad"]
  local function f(eps)
    return m:loss(toks, targets, {fwd_hooks = {{"blocks.0.hook_resid_pre", function(a) a:set(a:get(1, 3, 2) + eps, 1, 3, 2) end}}})
  end
  local fd = (f(1e-2) - f(-1e-2)) / 2e-2
  t.ok(math.abs(fd - g:get(1, 3, 2)) <= 1e-3 + 2e-2 * math.abs(fd), ("ce gradient %.6g vs fd %.6g"):format(g:get(1, 3, 2), fd))
  -- logit_diff written as a Lua function gives the same gradients
  local function fn(logits)
    local d = mp.zeros(logits:shape())
    for b = 1, B do
      d:set(1 / B, b, T, spec.logit_diff[1][b] + 1)
      d:set(-1 / B, b, T, spec.logit_diff[2][b] + 1)
    end
    return logit_diff(logits), d
  end
  local _, a = m:run_with_cache(toks, {incl_bwd = true, loss = spec, names = "blocks.*.attn.hook_z"})
  local _, b = m:run_with_cache(toks, {incl_bwd = true, loss = fn, names = "blocks.*.attn.hook_z"})
  t.ok(math.abs(a.loss - b.loss) < 1e-6, "same value")
  t.ok(a["blocks.0.attn.hook_z_grad"]:sub(b["blocks.0.attn.hook_z_grad"]):norm() == 0, "same gradient")
  -- run_with_hooks with a loss returns its value
  local lg, v = m:run_with_hooks(toks, {loss = spec})
  t.ok(math.abs(v - logit_diff(lg)) < 1e-5, "run_with_hooks returns logits, value")
end)

t.case("attribution patching: exact where the metric is linear in the activation", function()
  local m = model()
  local clean, corrupt = toks, {{1, 5, 9, 13, 7}, {2, 8, 17, 6, 11}}
  local name = "ln_final.hook_normalized"
  local attr, v = mp.attribution_patch(m, clean, corrupt, {names = name, metric = spec, per = "position"})
  local _, cc = m:run_with_cache(clean, {names = name})
  local base = logit_diff(m:forward(corrupt))
  t.ok(math.abs(v.corrupt - base) < 1e-5 and math.abs(v.clean - logit_diff(m:forward(clean))) < 1e-5,
       "the metric values")
  for p = 0, T - 1 do
    local real = logit_diff(m:forward(corrupt, {fwd_hooks = {{name, mp.patch(cc[name], {positions = p})}}})) - base
    t.ok_near(attr[name][p + 1], real, 1e-5, "position " .. p .. ": attribution = activation patching")
  end
  local all = mp.attribution_patch(m, clean, corrupt, {names = name, metric = spec, per = "all"})
  t.ok_near(all[name][1], logit_diff(m:forward(corrupt, {fwd_hooks = {{name, mp.patch(cc[name])}}})) - base, 1e-5,
            "all positions")
end)

t.case("attribution patching over heads of hook_z vs real activation patching", function()
  local m = model{seed = 11, init_std = 0.2}
  local clean, corrupt = toks, {{1, 5, 9, 13, 7}, {2, 8, 17, 6, 11}}
  local attr = mp.attribution_patch(m, clean, corrupt, {names = "blocks.*.attn.hook_z", metric = spec, per = "head"})
  local _, cc = m:run_with_cache(clean, {names = "blocks.*.attn.hook_z"})
  local base = logit_diff(m:forward(corrupt))
  local xs, ys = {}, {}
  for l = 0, 1 do
    local name = "blocks." .. l .. ".attn.hook_z"
    t.ok(attr[name]:numel() == 4, name .. ": one estimate per head")
    for h = 0, 3 do
      xs[#xs + 1] = attr[name][h + 1]
      ys[#ys + 1] = logit_diff(m:forward(corrupt, {fwd_hooks = {{name, mp.patch(cc[name], {head = h})}}})) - base
    end
  end
  -- the sums themselves, from the caches: (clean - corrupt) * grad at the corrupted run, per head
  local _, xc = m:run_with_cache(corrupt, {names = "blocks.*.attn.hook_z", incl_bwd = true, loss = spec})
  local hp = mp.attribution_patch(m, clean, corrupt, {names = "blocks.1.attn.hook_z", metric = spec,
                                                      per = "head_position"})["blocks.1.attn.hook_z"]
  t.ok(#hp:shape() == 2 and hp:size(1) == 4 and hp:size(2) == T, "head_position is [H, T]")
  local d = cc["blocks.1.attn.hook_z"]:sub(xc["blocks.1.attn.hook_z"]):mul(xc["blocks.1.attn.hook_z_grad"])
  for h = 1, 4 do
    local s = 0
    for p = 1, T do
      local sp = 0
      for b = 1, B do for e = 1, 4 do sp = sp + d:get(b, p, h, e) end end
      t.ok_near(hp:get(h, p), sp, 1e-6, ("head %d position %d sum"):format(h - 1, p - 1))
      s = s + sp
    end
    t.ok_near(attr["blocks.1.attn.hook_z"][h], s, 1e-6, ("head %d sum"):format(h - 1))
  end
  local n, mx, my = #xs, 0, 0
  for i = 1, n do mx, my = mx + xs[i] / n, my + ys[i] / n end
  local sxy, sxx, syy = 0, 0, 0
  for i = 1, n do
    sxy = sxy + (xs[i] - mx) * (ys[i] - my); sxx = sxx + (xs[i] - mx) ^ 2; syy = syy + (ys[i] - my) ^ 2
  end
  local r = sxy / math.sqrt(sxx * syy)
  print(("attribution vs activation patching over %d heads of hook_z: correlation %.4f"):format(n, r))
  -- one token differs per row, so each head's patch is small and the first-order
  -- estimate should track the real effect closely (0.98 measured); 0.9 leaves room
  -- for a different BLAS summation order while still failing a wrong sign, scale
  -- or grouping (those give correlations near 0 or negative)
  t.ok(r > 0.9, "correlation above 0.9")
end)

t.case("errors name the option", function()
  local m = model()
  t.expect_error(function() m:run_with_cache(toks, {incl_bwd = true}) end, "incl_bwd = true needs a 'loss'")
  t.expect_error(function() m:run_with_hooks(toks, {bwd_hooks = {{"hook_embed", function() end}}}) end,
                 "bwd_hooks needs a 'loss'")
  t.expect_error(function() m:run_with_cache(toks, {incl_bwd = true, loss = "mse"}) end, 'unknown loss "mse"')
  t.expect_error(function() m:run_with_cache(toks, {incl_bwd = true, loss = {kl = 1}}) end, "unknown loss {kl = ...}")
  t.expect_error(function() m:forward(toks, {loss = "ce"}) end, "loss \"ce\" needs 'targets'")
  t.expect_error(function() m:forward(toks, {targets = toks}) end, "option 'targets' is for loss = \"ce\"")
  t.expect_error(function() m:forward(toks, {loss = {logit_diff = {1, V}}}) end, "logit_diff: wrong")
  t.expect_error(function()
    m:run_with_cache(toks, {incl_bwd = true, loss = function(l) return 1, mp.zeros(2, 3) end})
  end, "dlogits has shape [2,3]; the logits' is [2,5,40]")
  t.expect_error(function()
    m:run_with_cache(toks, {incl_bwd = true, loss = function(l) return 1 end})
  end, "one scalar Tensor computed from the logits")
  t.expect_error(function()
    m:run_with_cache(toks, {incl_bwd = true, loss = spec, bwd_hooks = {{"blocks.0.hook_zz", function() end}}})
  end, "bwd_hooks[1]")
  t.expect_error(function() mp.attribution_patch(m, toks, toks, {names = "blocks.0.attn.hook_z", metric = spec, per = "neuron"}) end,
                 'per = "neuron" does not apply to blocks.0.attn.hook_z')
  t.expect_error(function() mp.attribution_patch(m, toks, {{1, 2}}, {names = "hook_embed", metric = spec}) end,
                 "the clean tokens are [2,5] but the corrupt tokens [1,2]")
  t.expect_error(function() mp.attribution_patch(m, toks, toks, {names = "hook_embed"}) end, "option 'metric' is required")
  t.expect_error(function() m:run_with_cache(toks, {incl_bwd = true, loss = spec, logits = "last"}) end,
                 "option 'logits' must be \"all\" with a loss")
  -- a hook edit that raises in the backward is reported with the hook's name
  t.expect_error(function()
    m:run_with_cache(toks, {incl_bwd = true, loss = spec, bwd_hooks = {{"blocks.0.hook_z", function() error("boom") end}}})
  end, "bwd_hooks[1]")
  t.expect_error(function()
    m:run_with_cache(toks, {incl_bwd = true, loss = spec, bwd_hooks = {{"blocks.0.attn.hook_z", function() error("boom") end}}})
  end, "hook at blocks.0.attn.hook_z: ")
end)

t.finish("test_grad_hooks")
