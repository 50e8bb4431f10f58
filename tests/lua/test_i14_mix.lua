-- test_i14_mix.lua — the parts of issue 14 together (each part has its own
-- tests; these check the seams the merge made): a left-padded batch with learned
-- positions while hook_pos_embed is read or written, with the per-head input path
-- (attn.hook_q_input) and with attn.hook_result, each row against the same prompt
-- run alone with the same hooks; attention_mask with the gradient options (the
-- padded batch's gradients run); bwd_hooks / incl_bwd at points without a gradient;
-- m:process_weights{fold_ln} followed by the cache helpers, which must still add
-- up to the logits; Tensor operations on cache entries and gradients against
-- element loops.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local function maxdiff(a, b)
  local fa, fb = a:reshape(-1), b:reshape(-1)
  assert(fa:numel() == fb:numel(), ("sizes %d vs %d"):format(fa:numel(), fb:numel()))
  local m = 0
  for i = 1, fa:numel() do m = math.max(m, math.abs(fa:get(i) - fb:get(i))) end
  return m
end

-- norm weights and biases away from 1 and 0 (deterministic) so folding them matters
local function perturb_norms(m)
  for _, n in ipairs(m:params()) do
    if n:find("ln") and (n:find("weight") or n:find("bias")) then
      local p = m:param(n)
      local bias = n:find("bias") ~= nil
      for i = 1, p:numel() do p:set((bias and 0 or 1) + (bias and 0.3 or 0.4) * math.sin(i * 1.3 + #n), i) end
    end
  end
end

-- LayerNorm, learned positions, biases (GPT-2 style); RMSNorm, RoPE, GQA
local mL = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, vocab = 40, ctx = 16, seed = 11, norm = "layer",
                        pos = "learned", mlp = "gelu"}
local mR = mp.model.new{d_model = 16, n_layer = 2, n_head = 4, n_kv_head = 2, vocab = 40, ctx = 16, seed = 12}
perturb_norms(mL)
perturb_norms(mR)

-- a left-padded batch: row 1 is a 3-token prompt behind 2 pads, row 2 a 5-token one
local short, long = {4, 17, 9}, {3, 8, 21, 30, 11}
local toks = {{0, 0, 4, 17, 9}, {3, 8, 21, 30, 11}}
local mask = {{0, 0, 1, 1, 1}, {1, 1, 1, 1, 1}}

-- each row's real positions of the batched logits against the prompt run alone
-- with the same options (hooks built afresh for each run by mk())
local function rows_match(m, mk, tol, what)
  local batched = m:forward(toks, {attention_mask = mask, fwd_hooks = mk()})
  local worst = 0
  for b, p in ipairs{short, long} do
    local alone = m:forward(p, {fwd_hooks = mk()})
    local pad = 5 - #p
    for tt = 1, #p do
      worst = math.max(worst, maxdiff(batched[b][pad + tt], alone[1][tt]))
    end
  end
  assert(worst <= tol, ("%s: a padded row differs from its prompt alone by %g"):format(what, worst))
  return worst
end

t.case("left padding, learned positions, hook_pos_embed read", function()
  local _, cache = mL:run_with_cache(toks, {attention_mask = mask, names = "hook_pos_embed"})
  local pe, W = cache["hook_pos_embed"], mL.W_pos -- [B,T,D], [ctx, D]
  -- row 1's real tokens take positions 0, 1, 2 (its pads position 0), row 2's 0..4
  local pos = {{0, 0, 0, 1, 2}, {0, 1, 2, 3, 4}}
  for b = 1, 2 do for tt = 1, 5 do
    assert(maxdiff(pe[b][tt], W[pos[b][tt] + 1]) == 0, ("hook_pos_embed[%d][%d] is not W_pos[%d]"):format(b, tt,
      pos[b][tt]))
  end end
  rows_match(mL, function() return {{"hook_pos_embed", function() end}} end, 1e-5, "reading hook_pos_embed")
end)

t.case("left padding, learned positions, hook_pos_embed written", function()
  -- doubling the position rows: each row as its prompt alone with the same edit
  local mk = function() return {{"hook_pos_embed", function(x) x:mul_(2) end}} end
  rows_match(mL, mk, 1e-5, "doubling hook_pos_embed")
  local plain, edited = mL:forward(toks, {attention_mask = mask}), mL:forward(toks, {attention_mask = mask,
    fwd_hooks = mk()})
  assert(maxdiff(plain, edited) > 1e-3, "the edit of hook_pos_embed had no effect")
end)

for _, c in ipairs{{"layer/learned", mL}, {"rms/rope/gqa", mR}} do
  local label, m = c[1], c[2]
  t.case(label .. ": left padding with the per-head input path", function()
    -- reading hook_q_input switches the block to per-head projections
    rows_match(m, function() return {{"blocks.*.attn.hook_q_input", function() end}} end, 1e-5,
               "reading hook_q_input")
    -- scaling head 1's query input, head 0's key input and head 1's value input of block 1
    local mk = function() return {{"blocks.1.attn.hook_q_input", mp.scale(0.5, {head = 1})},
                                  {"blocks.1.attn.hook_k_input", mp.scale(1.5, {head = 0})},
                                  {"blocks.1.attn.hook_v_input", mp.scale(3, {head = 1})}} end
    rows_match(m, mk, 1e-5, "editing the per-head inputs")
    local base = m:forward(toks, {attention_mask = mask})
    assert(maxdiff(base, m:forward(toks, {attention_mask = mask, fwd_hooks = mk()})) > 1e-4, "no effect")
  end)

  t.case(label .. ": left padding with hook_scale and hook_mlp_in written", function()
    local mk = function() return {{"blocks.0.ln1.hook_scale", mp.scale(2)}, {"blocks.1.hook_mlp_in", mp.scale(1.5)},
                                  {"ln_final.hook_scale", mp.scale(0.5)}} end
    rows_match(m, mk, 1e-5, "editing hook_scale and hook_mlp_in")
  end)

  t.case(label .. ": left padding with hook_result", function()
    local _, cache = m:run_with_cache(toks, {attention_mask = mask,
      names = "blocks.0.attn.hook_result,blocks.0.hook_attn_out"})
    -- the heads' results plus b_O are hook_attn_out, pads included
    local r, out = cache["blocks.0.attn.hook_result"], cache["blocks.0.hook_attn_out"]
    local sum = r:sum(3)
    local ok_b, bO = pcall(function() return m:b_O(0) end)
    if ok_b and bO then sum = sum + bO end
    assert(maxdiff(sum, out) < 1e-5, "sum of hook_result + b_O vs hook_attn_out")
    rows_match(m, function() return {{"blocks.*.attn.hook_result", mp.scale(0.25, {head = 1})}} end, 1e-5,
               "scaling a head's result")
  end)
end

t.case("left padding, the cache helpers at pos_slice = -1 as each prompt alone", function()
  for _, m in ipairs{mL, mR} do
    local _, cache = m:run_with_cache(toks, {attention_mask = mask})
    local st = cache:decompose_resid(nil, {apply_ln = true, pos_slice = -1})
    local attrs, bias = cache:logit_attrs(st, {5, 7})
    for b, p in ipairs{short, long} do
      local lg, c1 = m:run_with_cache(p)
      local a1, b1 = c1:logit_attrs(c1:decompose_resid(nil, {apply_ln = true, pos_slice = -1}), b == 1 and 5 or 7)
      assert(attrs:size(1) == a1:size(1), "components")
      for c = 1, a1:size(1) do t.near(attrs:get(c, b), a1:get(c, 1), 1e-5, "component " .. c) end
      t.near(attrs:sum(1):get(b) + bias:get(b), lg:get(1, #p, (b == 1 and 5 or 7) + 1), 1e-4, "row " .. b .. "'s logit")
    end
  end
end)

t.case("attention_mask with the gradient options runs the padded batch (tests/lua/test_batch_grad.lua checks it)",
  function()
  local _, c1 = mL:run_with_cache(toks, {attention_mask = mask, incl_bwd = true, loss = {logit_diff = {1, 2}},
    names = "hook_embed"})
  assert(c1["hook_embed_grad"] and c1.loss == c1.loss, "run_with_cache incl_bwd + mask")
  local _, v = mL:forward(toks, {attention_mask = mask, loss = {logit_diff = {1, 2}}})
  t.near(v, c1.loss, 1e-6, "forward loss + mask")
  local fired = false
  mL:run_with_hooks(toks, {attention_mask = mask, loss = {logit_diff = {1, 2}},
    bwd_hooks = {{"blocks.0.hook_resid_pre", function() fired = true end}}})
  assert(fired, "run_with_hooks bwd_hooks + mask")
  -- incl_bwd = false asks for no gradient: the mask is taken
  local _, cache = mL:run_with_cache(toks, {attention_mask = mask, incl_bwd = false, names = "hook_embed"})
  assert(cache["hook_embed"] and not rawget(cache, "hook_embed_grad"), "incl_bwd = false with a mask")
end)


t.case("bwd_hooks / incl_bwd at a point without a gradient", function()
  local loss = {logit_diff = {5, 6}}
  local P = "blocks.0.attn.hook_q_input"   -- the per-head inputs have no gradient yet
  t.expect_error(function()
    mR:run_with_hooks(long, {loss = loss, bwd_hooks = {{P, function() end}}})
  end, "no gradient at hook " .. P .. " yet", "bwd_hooks naming hook_q_input")
  t.expect_error(function()
    mR:run_with_cache(long, {loss = loss, incl_bwd = true, names = P})
  end, "no gradient at hook " .. P .. " yet", "incl_bwd naming hook_q_input")
  -- a glob skips it: the activation is cached, without a gradient; its neighbours have one
  local _, cache = mR:run_with_cache(long, {loss = loss, incl_bwd = true,
                                            names = "blocks.0.*,blocks.*.attn.hook_q_input"})
  assert(cache[P] and not rawget(cache, P .. "_grad"), "glob: hook_q_input")
  assert(cache["blocks.0.hook_resid_pre_grad"] and cache["blocks.0.ln1.hook_normalized_grad"]
         and cache["blocks.0.ln1.hook_scale_grad"], "glob: neighbours (hook_scale has one)")
  -- a names filter function is a filter, as a glob: it skips the points without a gradient
  local _, c2 = mR:run_with_cache(long, {loss = loss, incl_bwd = true,
    names = function(n) return n:find("blocks.0.", 1, true) == 1 end})
  assert(not rawget(c2, P .. "_grad"), "filter: hook_q_input")
  assert(maxdiff(c2["blocks.0.hook_resid_pre_grad"], cache["blocks.0.hook_resid_pre_grad"]) == 0, "filter: grad")
  -- attribution patching over a glob that matches only such points is an error, not an empty result
  t.expect_error(function()
    mp.attribution_patch(mR, long, {3, 8, 9, 30, 11}, {names = "blocks.*.attn.hook_q_input", metric = loss,
                                                       per = "head"})
  end, "names 'blocks.*.attn.hook_q_input' selects no hook point with a gradient", "attribution_patch")
  -- a glob in bwd_hooks never fires there
  local seen = {}
  mR:run_with_hooks(long, {loss = loss, bwd_hooks = {{"blocks.0.*", function(_, hook) seen[hook.name] = true end},
                                                     {"blocks.*.attn.hook_q_input", function(_, hook)
                                                       seen[hook.name] = true end}}})
  assert(seen["blocks.0.hook_resid_pre"] and seen["blocks.0.ln1.hook_scale"] and not seen[P], "bwd glob")
end)

t.case("process_weights{fold_ln} then the cache helpers add up", function()
  local m = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, vocab = 40, ctx = 16, seed = 11, norm = "layer",
                         pos = "learned", mlp = "gelu"}
  perturb_norms(m)
  local before = m:forward(long)
  -- the options not given default to TL's true: center_writing_weights and
  -- center_unembed apply too (the latter moves each position's logits by a constant)
  t.deep_eq(m:process_weights{fold_ln = true}.applied, {"fold_ln", "center_writing_weights", "center_unembed"})
  local logits, cache = m:run_with_cache(long)
  assert(maxdiff(before:log_softmax(-1), logits:log_softmax(-1)) < 1e-4, "processing changed the log-probabilities")
  local T, a, w = #long, 7, 13
  local want = logits:get(1, T, a + 1) - logits:get(1, T, w + 1)
  for _, f in ipairs{"decompose_resid", "accumulated_resid"} do
    local st = cache[f](cache, nil, {apply_ln = true, pos_slice = -1})
    local attrs, bias = cache:logit_attrs(st, a, {incorrect_tokens = w})
    -- decompose: the components' sum; accumulated: the last one (the final residual)
    local got = f == "decompose_resid" and attrs:sum() + bias:get(1) or attrs:get(st:size(1), 1) + bias:get(1)
    t.near(got, want, 1e-4, f .. " after fold_ln")
  end
  -- the per-head stack with apply_ln_to_stack applied separately equals apply_ln = true
  local heads = cache:stack_head_results(nil, {pos_slice = -1})
  local h1 = cache:apply_ln_to_stack(heads, nil, {pos_slice = -1})
  local h2 = cache:stack_head_results(nil, {pos_slice = -1, apply_ln = true})
  assert(maxdiff(h1, h2) == 0, "apply_ln_to_stack vs apply_ln")
  -- the full-position stack: logit_attrs at every position sums to each position's logit (minus the bias)
  local all = cache:decompose_resid(nil, {apply_ln = true})
  local attrs, bias = cache:logit_attrs(all, a)
  for tt = 1, T do
    t.near(attrs:sum(1):get(1, tt) + bias:get(1), logits:get(1, tt, a + 1), 1e-4, "position " .. tt)
  end
end)

t.case("Tensor ops on cache entries and gradients", function()
  local m = mR
  local logits, cache = m:run_with_cache({long, {9, 9, 1, 2, 3}}, {incl_bwd = true, loss = {logit_diff = {5, 6}},
    names = "ln_final.hook_normalized,blocks.1.attn.hook_pattern,blocks.1.attn.hook_z"})
  -- logits = ln_final.hook_normalized @ W_U (no b_U)
  local ln = cache["ln_final.hook_normalized"]
  assert(maxdiff(ln:matmul(m.W_U), logits) < 1e-4, "hook_normalized @ W_U")
  -- a pattern's rows sum to 1 along the key dim, and sum(2) over heads by loops
  local pat = cache["blocks.1.attn.hook_pattern"] -- [B,H,T,T]
  assert(maxdiff(pat:sum(-1), mp.ones{2, 4, 5}) < 1e-5, "pattern rows")
  local s2 = pat:sum(2)
  for b = 1, 2 do for q = 1, 5 do for k = 1, 5 do
    local v = 0
    for h = 1, 4 do v = v + pat:get(b, h, q, k) end
    t.near(s2:get(b, q, k), v, 1e-6, "sum(2)")
  end end end
  -- a gradient's reductions over dims against the sum of its elements
  local g = cache["blocks.1.attn.hook_z_grad"] -- [B,T,H,Dh]
  local total = 0
  for _, v in ipairs(g:reshape(-1):totable()) do total = total + v end
  t.near(g:sum(), total, 1e-5, "grad sum")
  t.near(g:sum(4):sum(3):sum(2):sum(), total, 1e-5, "grad chained sums")
  -- first-order change of the metric from scaling z: <grad, z> by a dot of flattened views
  local z = cache["blocks.1.attn.hook_z"]
  local dot = z:reshape(-1):dot(g:reshape(-1))
  local eps = 1e-3
  local function metric(scale)
    local _, v = m:forward({long, {9, 9, 1, 2, 3}}, {loss = {logit_diff = {5, 6}},
      fwd_hooks = {{"blocks.1.attn.hook_z", mp.scale(scale)}}})
    return v
  end
  local fd = (metric(1 + eps) - metric(1 - eps)) / (2 * eps)
  t.near(fd, dot, 1e-2 * math.max(1, math.abs(dot)), "<z, dL/dz> vs finite difference")
  -- matmul of a gradient with W_U's transpose-free shapes: [B,T,D] x [D,V]
  local lg = cache["ln_final.hook_normalized_grad"]
  assert(#lg:matmul(m.W_U):shape() == 3, "grad @ W_U")
end)

t.case("a cache with gradients has the helpers", function()
  local logits, cache = mR:run_with_cache(long, {incl_bwd = true, loss = {logit_diff = {5, 6}}})
  assert(cache["hook_embed_grad"] and cache.loss, "gradients cached")
  local st = cache:decompose_resid(nil, {apply_ln = true, pos_slice = -1})
  local attrs, bias = cache:logit_attrs(st, 5, {incorrect_tokens = 6})
  t.near(attrs:sum() + bias:get(1), cache.loss, 1e-4, "DLA of the metric sums to cache.loss")
  local acc = cache:accumulated_resid(nil, {pos_slice = -1})
  assert(maxdiff(acc:select(acc:size(1)):reshape(-1), cache["blocks.1.hook_resid_post"][1][#long]) == 0, "final")
end)

t.finish("test_i14_mix")
