-- test_hook_points.lua — the hook points of issue 14 (the norms' hook_scale,
-- attn.hook_result, hook_attn_in / hook_q,k,v_input, hook_mlp_in,
-- hook_pos_embed) and the cache helpers (accumulated_resid, decompose_resid,
-- stack_head_results, apply_ln_to_stack, logit_attrs), each against a
-- computation of its own in Lua from the cached activations and the weights,
-- on an RMSNorm/RoPE/SwiGLU/GQA model and a LayerNorm/learned/GELU model whose
-- norm weights and biases are not 1 and 0 (so that where they enter matters).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check = t.ok

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
-- sum over the first axis of a stack [C, ...]
local function sum_first(st)
  local acc = st:select(1):clone()
  for i = 2, st:shape()[1] do acc = acc:add(st:select(i)) end
  return acc
end
-- sum over the head axis of [B, T, H, D]
local function sum_heads(r)
  local s = r:shape()
  local out = mp.zeros{s[1], s[2], s[4]}
  for b = 1, s[1] do for tt = 1, s[2] do for d = 1, s[4] do
    local v = 0
    for h = 1, s[3] do v = v + r:get(b, tt, h, d) end
    out:set(v, b, tt, d)
  end end end
  return out
end
local function maxabs(a)
  local m = 0
  for _, v in ipairs(flat(a)) do m = math.max(m, math.abs(v)) end
  return m
end

-- norm weights ~ 1 +- 0.4, biases ~ +-0.3 (deterministic)
local function perturb_norms(m)
  for _, n in ipairs(m:params()) do
    if n:find("ln") and (n:find("weight") or n:find("bias")) then
      local p = m:param(n)
      local bias = n:find("bias") ~= nil
      for i = 1, p:numel() do p:set((bias and 0 or 1) + (bias and 0.3 or 0.4) * math.sin(i * 1.7 + #n), i) end
    end
  end
end

local mR = mp.model.new{d_model = 16, n_layer = 2, n_head = 4, n_kv_head = 2, vocab = 40, ctx = 16, seed = 3}
local mL = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, vocab = 40, ctx = 16, seed = 4, norm = "layer",
                        pos = "learned", mlp = "gelu"}
perturb_norms(mR)
perturb_norms(mL)
local toks = {{1, 5, 9, 13, 2, 7}, {3, 3, 8, 21, 30, 11}}
local B, T = 2, 6

-- the scale of row (b, tt) of x [B, T, D] as each norm defines it
local function ref_scale(x, b, tt, layer, eps)
  local D = x:shape()[3]
  local s, ss = 0, 0
  for d = 1, D do local v = x:get(b, tt, d); s = s + v; ss = ss + v * v end
  if layer then local mu = s / D; return math.sqrt(ss / D - mu * mu + eps) end
  return math.sqrt(ss / D + eps)
end

for _, case in ipairs{{"rms", mR, false}, {"layer", mL, true}} do
  local label, m, layer = case[1], case[2], case[3]
  local cfg = m.config
  local logits, cache = m:run_with_cache(toks)

  t.case(label .. ": hook_scale is the norm's scale of its input", function()
    local worst = 0
    for l = 0, cfg.n_layer - 1 do
      for _, pair in ipairs{{"ln1", "hook_resid_pre"}, {"ln2", "hook_resid_mid"}} do
        local sc, x = cache[("blocks.%d.%s.hook_scale"):format(l, pair[1])], cache[("blocks.%d.%s"):format(l, pair[2])]
        assert(sc:shape()[3] == 1, "shape [B,T,1]")
        for b = 1, B do for tt = 1, T do
          local r = ref_scale(x, b, tt, layer, cfg.norm_eps)
          worst = math.max(worst, math.abs(sc:get(b, tt, 1) - r) / r)
        end end
      end
    end
    local sc, x = cache["ln_final.hook_scale"], cache[("blocks.%d.hook_resid_post"):format(cfg.n_layer - 1)]
    for b = 1, B do for tt = 1, T do
      local r = ref_scale(x, b, tt, layer, cfg.norm_eps)
      worst = math.max(worst, math.abs(sc:get(b, tt, 1) - r) / r)
    end end
    assert(worst < 1e-5, "relative error " .. worst)
  end)

  t.case(label .. ": writing hook_scale", function()
    local same = m:run_with_hooks(toks, {fwd_hooks = {{"*.hook_scale", function(x, hook) x:copy_(cache[hook.name]) end}}})
    assert(maxdiff(same, logits) == 0, "writing back the cached scale changed the logits")
    local _, c2 = m:run_with_cache(toks, {names = "blocks.1.ln1.hook_normalized",
      fwd_hooks = {{"blocks.1.ln1.hook_scale", function(x) x:mul_(2) end}}})
    -- normalized = (x - mean) / scale * w + b: doubling the scale halves everything but b
    local b = layer and m:param("blocks.1.ln1.bias") or nil
    local was, now = cache["blocks.1.ln1.hook_normalized"], c2["blocks.1.ln1.hook_normalized"]
    local worst = 0
    for bb = 1, B do for tt = 1, T do for d = 1, cfg.d_model do
      local bias = b and b:get(d) or 0
      worst = math.max(worst, math.abs((now:get(bb, tt, d) - bias) * 2 - (was:get(bb, tt, d) - bias)))
    end end end
    assert(worst < 1e-5, "doubling the scale: max error " .. worst)
  end)

  t.case(label .. ": the cache helpers", function()
    local nl = cfg.n_layer
    local final = cache[("blocks.%d.hook_resid_post"):format(nl - 1)]
    -- decompose_resid: the components sum to the final residual
    local st, labels = cache:decompose_resid(nil, {return_labels = true})
    local want = layer and {"embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"}
                        or {"embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"}
    t.deep_eq(labels, want, "decompose_resid labels")
    assert(maxdiff(sum_first(st), final) < 1e-5, "decompose_resid sums to the final resid_post")
    local s1 = cache:decompose_resid(1, {mode = "attn", incl_embeds = false})
    assert(s1:shape()[1] == 1 and maxdiff(s1:select(1), cache["blocks.0.hook_attn_out"]) == 0, "mode attn")
    -- accumulated_resid: resid_pre of each block, then the final residual
    local acc, al = cache:accumulated_resid(nil, {return_labels = true, incl_mid = true})
    t.deep_eq(al, {"0_pre", "0_mid", "1_pre", "1_mid", "final_post"}, "accumulated_resid labels")
    local acc2 = cache:accumulated_resid(1)
    assert(acc2:shape()[1] == 2, "accumulated_resid(1): blocks 0 and 1's inputs")
    for l = 0, nl - 1 do
      assert(maxdiff(acc2:select(l + 1), cache[("blocks.%d.hook_resid_pre"):format(l)]) == 0, "resid_pre " .. l)
    end
    assert(maxdiff(acc:select(5), final) == 0, "final_post")
    -- apply_ln_to_stack: the final residual through it, times w, plus b, is ln_final's output
    local lnst = cache:apply_ln_to_stack(cache:accumulated_resid(nil), nil)
    local w, bb = m:param("ln_final.weight"), layer and m:param("ln_final.bias")
    local normed, ref = lnst:select(nl + 1), cache["ln_final.hook_normalized"]
    local worst = 0
    for b = 1, B do for tt = 1, T do for d = 1, cfg.d_model do
      local v = normed:get(b, tt, d) * w:get(d) + (bb and bb:get(d) or 0)
      worst = math.max(worst, math.abs(v - ref:get(b, tt, d)))
    end end end
    assert(worst < 1e-5, "apply_ln_to_stack vs ln_final: " .. worst)
    -- direct logit attribution: the normalized decomposition, through w_lnf and
    -- W_U, plus the final norm's bias term, is the model's logit difference
    local dst = cache:decompose_resid(nil, {apply_ln = true, pos_slice = -1})
    assert(dst:dim() == 3, "pos_slice gives [C, B, D]")
    local right, wrong = {7, 12}, {20, 4}
    local attrs, bias = cache:logit_attrs(dst, right, {incorrect_tokens = wrong})
    for b = 1, B do
      local sum = bias:get(b)
      for c = 1, dst:shape()[1] do sum = sum + attrs:get(c, b) end
      local ld = logits:get(b, T, right[b] + 1) - logits:get(b, T, wrong[b] + 1)
      assert(math.abs(sum - ld) <= 1e-4 * math.max(1, math.abs(ld)), ("row %d: attributions %.7g, logit diff %.7g"):format(b, sum, ld))
    end
    if not layer then assert(maxabs(bias) == 0, "RMSNorm has no bias term") end
    -- the same through a whole-position stack and pos_slice in logit_attrs
    local a2 = cache:logit_attrs(cache:decompose_resid(nil, {apply_ln = true}), right, {incorrect_tokens = wrong, pos_slice = T - 1})
    assert(maxdiff(a2, attrs) < 1e-6, "pos_slice in logit_attrs")
    -- a single token: the logit itself
    local a3, b3 = cache:logit_attrs(dst, 9)
    for b = 1, B do
      local sum = b3:get(b)
      for c = 1, dst:shape()[1] do sum = sum + a3:get(c, b) end
      assert(math.abs(sum - logits:get(b, T, 10)) <= 1e-4 * math.max(1, math.abs(logits:get(b, T, 10))), "logit of 9")
    end
  end)

  t.case(label .. ": hook_result and stack_head_results", function()
    local H = cfg.n_head
    local _, c = m:run_with_cache(toks, {names = {"blocks.*.attn.hook_result", "blocks.*.hook_attn_out", "blocks.*.attn.hook_z"}})
    for l = 0, cfg.n_layer - 1 do
      local r, out = c[("blocks.%d.attn.hook_result"):format(l)], c[("blocks.%d.hook_attn_out"):format(l)]
      assert(r:dim() == 4 and r:shape()[3] == H and r:shape()[4] == cfg.d_model, "shape [B,T,H,D]")
      assert(maxdiff(sum_heads(r), out) < 1e-5, "the heads' results sum to hook_attn_out (no b_O here)")
    end
    local hs, hl = c:stack_head_results(nil, {return_labels = true})
    assert(hl[1] == "L0H0" and hl[H + 2] == "L1H1" and #hl == cfg.n_layer * H, "labels " .. table.concat(hl, ","))
    local _, cz = m:run_with_cache(toks, {names = "blocks.*.attn.hook_z"})
    assert(maxdiff(cz:stack_head_results(nil), hs) < 1e-5, "from hook_z and W_O = from hook_result")
    -- writing a head's result: the attention output is the sum of what was written;
    -- zeroing head 1 there equals zero-ablating head 1 of hook_z
    local _, ca = m:run_with_cache(toks, {names = "blocks.0.hook_attn_out",
      fwd_hooks = {{"blocks.0.attn.hook_result", mp.ablate.zero{head = 1}}}})
    local _, cb = m:run_with_cache(toks, {names = "blocks.0.hook_attn_out",
      fwd_hooks = {{"blocks.0.attn.hook_z", mp.ablate.zero{head = 1}}}})
    assert(maxdiff(ca["blocks.0.hook_attn_out"], cb["blocks.0.hook_attn_out"]) < 1e-5, "result ablation = z ablation")
    assert(maxdiff(ca["blocks.0.hook_attn_out"], c["blocks.0.hook_attn_out"]) > 1e-3, "the ablation did something")
    -- steering one head's result by v moves hook_attn_out by v at every position
    local v = {}
    for d = 1, cfg.d_model do v[d] = 0.1 * d end
    local _, cs = m:run_with_cache(toks, {names = "blocks.1.hook_attn_out",
      fwd_hooks = {{"blocks.1.attn.hook_result", mp.steer(mp.tensor(v), {head = 1})}}})
    local moved = cs["blocks.1.hook_attn_out"]:sub(c["blocks.1.hook_attn_out"])
    for b = 1, B do for tt = 1, T do for d = 1, cfg.d_model do
      assert(math.abs(moved:get(b, tt, d) - v[d]) < 1e-5, "steered head result")
    end end end
  end)
end

-- per-head inputs (GQA: 4 query heads, 2 kv heads), checked by hand
t.case("per-head q/k/v inputs", function()
  local m, cfg = mR, mR.config
  local D, H, K, Dh = cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.d_head
  local base, cache = m:run_with_cache(toks)
  local read = m:run_with_hooks(toks, {fwd_hooks = {{"blocks.*.hook_attn_in", function() end}}})
  assert(maxdiff(read, base) < 1e-5, "the per-head path reading only: logits as the fused path")
  local delta = {}
  for d = 1, D do delta[d] = 0.25 * math.cos(d) end
  local names = {"blocks.0.ln1.hook_normalized", "blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v",
                 "blocks.0.attn.hook_q_input", "blocks.0.attn.hook_k_input", "blocks.0.hook_attn_in"}
  local _, c = m:run_with_cache(toks, {names = names, fwd_hooks = {
    {"blocks.0.attn.hook_q_input", function(x) -- query head 2 (0-based) gets +delta
      for b = 1, B do for tt = 1, T do for d = 1, D do x:set(x:get(b, tt, 3, d) + delta[d], b, tt, 3, d) end end end
    end},
    {"blocks.0.attn.hook_k_input", function(x) -- kv head 1 gets -delta
      for b = 1, B do for tt = 1, T do for d = 1, D do x:set(x:get(b, tt, 2, d) - delta[d], b, tt, 2, d) end end end
    end}}})
  local ln1 = c["blocks.0.ln1.hook_normalized"]
  local ai = c["blocks.0.hook_attn_in"]
  assert(ai:dim() == 4 and ai:shape()[3] == H and ai:shape()[4] == D, "hook_attn_in [B,T,H,D]")
  assert(c["blocks.0.attn.hook_k_input"]:shape()[3] == K, "hook_k_input [B,T,K,D]")
  for h = 1, H do assert(maxdiff(ai:select(1):select(1):select(h), ln1:select(1):select(1)) == 0, "attn_in copies ln1") end
  local function proj(wname, x, head, sign)
    local W = m:param(wname) -- [heads*Dh, D]
    local out = {}
    for j = 1, Dh do
      local s = 0
      for d = 1, D do s = s + W:get((head - 1) * Dh + j, d) * (x[d] + sign * delta[d]) end
      out[j] = s
    end
    return out
  end
  local worst, q, k, v = 0, c["blocks.0.attn.hook_q"], c["blocks.0.attn.hook_k"], c["blocks.0.attn.hook_v"]
  local q0, k0, v0 = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_k"], cache["blocks.0.attn.hook_v"]
  for b = 1, B do for tt = 1, T do
    local x = {}
    for d = 1, D do x[d] = ln1:get(b, tt, d) end
    local qe, ke, ve = proj("blocks.0.attn.wq", x, 3, 1), proj("blocks.0.attn.wk", x, 2, -1), proj("blocks.0.attn.wv", x, 2, 0)
    for j = 1, Dh do
      worst = math.max(worst, math.abs(q:get(b, tt, 3, j) - qe[j]), math.abs(k:get(b, tt, 2, j) - ke[j]),
                       math.abs(v:get(b, tt, 2, j) - ve[j]))
      for h = 1, H do if h ~= 3 then worst = math.max(worst, math.abs(q:get(b, tt, h, j) - q0:get(b, tt, h, j))) end end
      worst = math.max(worst, math.abs(k:get(b, tt, 1, j) - k0:get(b, tt, 1, j)), math.abs(v:get(b, tt, 1, j) - v0:get(b, tt, 1, j)))
    end
  end end
  assert(worst < 1e-5, "per-head projections vs by hand: " .. worst)
  -- an edit of hook_attn_in reaches q_input (and the kv inputs of its group's first head)
  local _, c2 = m:run_with_cache(toks, {names = {"blocks.0.attn.hook_q_input", "blocks.0.attn.hook_v_input"},
    fwd_hooks = {{"blocks.0.hook_attn_in", function(x) x:mul_(2) end}}})
  assert(maxdiff(c2["blocks.0.attn.hook_q_input"]:select(1):select(1):select(1), ln1:select(1):select(1):mul(2)) < 1e-6, "attn_in -> q_input")
  assert(maxdiff(c2["blocks.0.attn.hook_v_input"]:select(1):select(1):select(2), ln1:select(1):select(1):mul(2)) < 1e-6, "attn_in -> v_input")
end)

t.case("hook_mlp_in feeds the MLP only", function()
  local m = mL
  local _, c0 = m:run_with_cache(toks, {names = "blocks.0.*"})
  assert(maxdiff(c0["blocks.0.hook_mlp_in"], c0["blocks.0.hook_resid_mid"]) == 0, "mlp_in is resid_mid")
  local vec = {}
  for d = 1, 16 do vec[d] = 0.7 * math.sin(d * 0.9) end
  local _, c = m:run_with_cache(toks, {names = "blocks.0.*", fwd_hooks = {{"blocks.0.hook_mlp_in", mp.steer(mp.tensor(vec))}}})
  assert(maxdiff(c["blocks.0.hook_mlp_out"], c0["blocks.0.hook_mlp_out"]) > 1e-3, "the MLP saw the edit")
  assert(maxdiff(c["blocks.0.hook_resid_mid"], c0["blocks.0.hook_resid_mid"]) == 0, "resid_mid untouched")
  assert(maxdiff(c["blocks.0.hook_resid_post"], c["blocks.0.hook_resid_mid"]:add(c["blocks.0.hook_mlp_out"])) < 1e-6,
         "resid_post = resid_mid + the MLP's output (the skip keeps resid_mid)")
  local s = c["blocks.0.ln2.hook_scale"]
  local edited = c0["blocks.0.hook_resid_mid"]:clone()
  for d = 1, 16 do edited:set(edited:get(1, 1, d) + vec[d], 1, 1, d) end
  local r = ref_scale(edited, 1, 1, true, m.config.norm_eps)
  assert(math.abs(s:get(1, 1, 1) - r) < 1e-5 * r, "ln2's scale is that of the edited input")
end)

t.case("hook_pos_embed", function()
  local m = mL
  local _, c = m:run_with_cache(toks, {names = "hook_*"})
  local pe, E, P = c["hook_pos_embed"], m:param("embed"), m:param("pos_embed")
  for b = 1, B do for tt = 1, T do for d = 1, 16 do
    assert(pe:get(b, tt, d) == P:get(tt, d), "the position rows")
    assert(math.abs(c["hook_embed"]:get(b, tt, d) - E:get(toks[b][tt] + 1, d) - P:get(tt, d)) < 1e-6, "embed = token + position")
  end end end
  local _, c2 = m:run_with_cache(toks, {names = "hook_embed", fwd_hooks = {{"hook_pos_embed", mp.ablate.zero()}}})
  for tt = 1, T do assert(c2["hook_embed"]:get(1, tt, 3) == E:get(toks[1][tt] + 1, 3), "without positions: token rows") end
  t.expect_error(function() mR:run_with_hooks(toks, {fwd_hooks = {{"hook_pos_embed", function() end}}}) end,
                 "hook_pos_embed", "no hook_pos_embed with RoPE")
end)

t.case("opt-in points and capture files", function()
  local m = mR
  local _, all = m:run_with_cache(toks)
  assert(rawget(all, "blocks.0.attn.hook_result") == nil and rawget(all, "blocks.0.hook_attn_in") == nil, "'*' leaves them out")
  assert(all["blocks.0.ln1.hook_scale"] ~= nil and all["ln_final.hook_scale"] ~= nil, "'*' has the scales")
  local names = mp.hook_names(m)
  local seen = {}
  for _, n in ipairs(names) do seen[n] = true end
  assert(seen["blocks.1.attn.hook_result"] and seen["blocks.1.attn.hook_v_input"], "mp.hook_names lists them")
  local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
  local globs = "*hook_scale,blocks.*.attn.hook_result,*hook_q_input,*hook_k_input,*hook_attn_in,*hook_mlp_in"
  local nds = m:capture(toks, {out = dir .. "/run.h5", hooks = globs})
  assert(nds == 5 + 5 * 2, "datasets " .. nds)
  local _, c = m:run_with_cache(toks, {names = globs})
  local f <close> = mp.h5.open(dir .. "/run.h5")
  local n = 0
  for name, x in pairs(c) do
    assert(maxdiff(f:read("acts/" .. name), x) == 0, name .. ": file vs cache")
    n = n + 1
  end
  assert(n == nds, "every dataset compared")
  os.remove(dir .. "/run.h5"); os.remove(dir)
end)

t.case("cache helper errors", function()
  local _, c = mR:run_with_cache(toks, {names = "blocks.*.hook_resid_pre"})
  t.expect_error(function() c:decompose_resid() end, "the cache has no 'hook_embed'", "missing hook named")
  t.expect_error(function() c:accumulated_resid(0, {apply_ln = true}) end, "blocks.0.ln1.hook_scale", "missing scale")
  t.expect_error(function() c:accumulated_resid(7) end, "layer", "layer out of range")
  t.expect_error(function() c:accumulated_resid(0, {pos_slice = 6}) end, "pos_slice", "position out of range")
  t.expect_error(function() c:accumulated_resid(0, {incl_mids = true}) end, "unknown option 'incl_mids'", "strict options")
  t.expect_error(function() c.accumulated_resid({}, 0) end, "run_with_cache", "not a cache")
  -- a layer past the last block is said so, not "unknown" alone (mR has 2 layers)
  t.expect_error(function() mR:run_with_cache(toks, {names = "blocks.9.hook_resid_post"}) end,
                 "layer 9 out of range: the model has 2 layers (0..1)", "run_with_cache: layer out of range")
  t.expect_error(function() mR:run_with_hooks(toks, {fwd_hooks = {{"blocks.2.hook_resid_post", function() end}}}) end,
                 "layer 2 out of range: the model has 2 layers (0..1)", "run_with_hooks: layer out of range")
  -- a name the cache lacks: an error naming it and the nearest captured names (by edit distance)
  t.expect_error(function() return c["blocks.1.hook_resid_post"] end,
                 "cache: no 'blocks.1.hook_resid_post': it captured", "missing key named")
  local _, big = mR:run_with_cache(toks, {names = "blocks.*"})
  t.expect_error(function() return big["blocks.1.hook_resid_pos"] end,
                 "the nearest blocks.1.hook_resid_post, blocks.0.hook_resid_post, blocks.1.hook_resid_pre",
                 "nearest names")
  t.expect_error(function() return big["hook_embed_grad"] end, "incl_bwd = true", "a gradient: how to get it")
  assert(rawget(big, "hook_embed") == nil and big.loss == nil, "rawget and non-hook keys stay nil")
  local small <close> = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, vocab = 5, ctx = 8, mlp = "none", seed = 1}
  local _, few = small:run_with_cache({1, 2}, {names = "blocks.0.hook_resid_*"})
  t.expect_error(function() return few["blocks.0.hook_attn_out"] end,
                 "it captured blocks.0.hook_resid_", "a small cache lists every name")
  local st = c:accumulated_resid(1)
  t.expect_error(function() c:logit_attrs(st, {1}) end, "1 ids given for a batch of 2", "token count")
  t.expect_error(function() c:logit_attrs(st, 40) end, "outside the vocabulary", "token range")
  t.expect_error(function() c:logit_attrs(mp.zeros{2, 3}, 1) end, "the stack must be", "stack shape")
end)

t.case("training: reading the new points leaves loss and gradients", function()
  local function step(hooks)
    local m = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, vocab = 40, ctx = 16, seed = 9, norm = "layer",
                           pos = "learned", mlp = "gelu"}
    local opt = mp.optim.adamw{lr = 1e-3}
    local tg = {{5, 9, 13, 2, 7, 1}, {3, 8, 21, 30, 11, 4}}
    return m:train_step(opt, toks, tg, {fwd_hooks = hooks})
  end
  local noop = function() end
  local l0, g0 = step(nil)
  local l1, g1 = step({{"*hook_scale", noop}, {"blocks.*.attn.hook_result", noop}, {"*hook_mlp_in", noop},
                       {"blocks.0.attn.hook_q_input", noop}, {"hook_pos_embed", noop}})
  assert(math.abs(l1 - l0) <= 1e-6 * math.abs(l0) and math.abs(g1 - g0) <= 1e-5 * math.abs(g0),
         ("loss %.9g vs %.9g, grad norm %.9g vs %.9g"):format(l1, l0, g1, g0))
end)

t.case("a model with Q8_0 weights: per-head paths and head results", function()
  local tmp = os.tmpname()
  local f = mp.model.new{d_model = 64, n_layer = 2, n_head = 2, vocab = 300, ctx = 64, seed = 5, tied = false}
  f:save(tmp .. ".q8.gguf", {type = "q8_0"})
  local q = mp.load(tmp .. ".q8.gguf")
  os.remove(tmp .. ".q8.gguf"); os.remove(tmp)
  assert(q.weights == "Q8_0", "weights kept quantized")
  local base, cache = q:run_with_cache(toks, {names = {"blocks.*.hook_attn_out", "blocks.*.attn.hook_result", "blocks.*.attn.hook_z"}})
  local noop = function() end
  t.expect_error(function() q:run_with_hooks(toks, {fwd_hooks = {{"blocks.*.attn.hook_?_input", noop}}}) end,
                 "matches only opt-in points", "a glob that does not spell an opt-in point")
  local split = q:run_with_hooks(toks, {fwd_hooks = {{"blocks.*.attn.hook_q_input", noop},
                                                     {"blocks.*.attn.hook_k_input,blocks.*.attn.hook_v_input", noop}}})
  local scale = maxabs(base)
  assert(maxdiff(split, base) <= 1e-5 * scale, "per-head quantized projections: logits moved by " .. maxdiff(split, base))
  local worst = 0
  for l = 0, 1 do
    local r = cache[("blocks.%d.attn.hook_result"):format(l)]
    worst = math.max(worst, maxdiff(sum_heads(r), cache[("blocks.%d.hook_attn_out"):format(l)]))
  end
  -- each head through the quantized W_O with the others zeroed; the fused product
  -- quantizes the whole z row at once (8-bit activations per 32 values)
  assert(worst <= 1e-5 * maxabs(cache["blocks.0.hook_attn_out"]) + 1e-6, "quantized head results sum to attn_out: " .. worst)
  local hs = cache:stack_head_results(nil)
  assert(hs:size(1) == 4, "from the cached hook_result")
  local _, cz = q:run_with_cache(toks, {names = "blocks.*.attn.hook_z"})
  t.expect_error(function() cz:stack_head_results(nil) end, "cache blocks.0.attn.hook_result", "quantized W_O needs hook_result")
  t.expect_error(function() cz:logit_attrs(hs:narrow(1, 1), 3) end, "quantized", "quantized unembedding refused")
end)

t.finish("test_hook_points")
