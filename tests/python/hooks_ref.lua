-- hooks_ref.lua — the Lua binding's results that tests/python/test_{cache,hooks,grad}.py
-- compare the Python module with, bit for bit: run by the tests as
--   mechprobe hooks_ref.lua MODEL TOKENS_FILE OUT_H5 OUT_TXT
-- TOKENS_FILE holds B lines of T token ids. Writes every array under a fixed
-- name into OUT_H5 and the metrics' values (%.17g) as "key value" lines into OUT_TXT.
local model, tokfile, out_h5, out_txt = arg[1], arg[2], arg[3], arg[4]
local m = mp.load(model)
local toks = {}
for line in io.lines(tokfile) do
  local row = {}
  for w in line:gmatch("%S+") do row[#row + 1] = tonumber(w) end
  toks[#toks + 1] = row
end
local B, T = #toks, #toks[1]
local f <close> = mp.h5.open(out_h5, "w")
local txt <close> = assert(io.open(out_txt, "w"))
local function num(k, v) txt:write(string.format("%s %.17g\n", k, v)) end

-- run_with_cache: every point (the opt-in attn.hook_result too)
local logits, cache = m:run_with_cache(toks, {names = {"*", "blocks.*.attn.hook_result"}})
f:write("logits", logits)
for k, v in pairs(cache) do f:write("cache/" .. k, v) end
-- the cache's helpers
f:write("acc", cache:accumulated_resid(nil, {incl_mid = true, apply_ln = true}))
f:write("acc_mlp", cache:accumulated_resid(1, {mlp_input = true, pos_slice = -1}))
f:write("dec", cache:decompose_resid(nil, {apply_ln = true}))
f:write("dec_attn", cache:decompose_resid(1, {mode = "attn", pos_slice = 1, apply_ln = true}))
f:write("heads", cache:stack_head_results(nil, {apply_ln = true, pos_slice = -1}))
local _, c_z = m:run_with_cache(toks, {names = "*"}) -- no hook_result: from hook_z and W_O
f:write("heads_z", c_z:stack_head_results(nil))
local dec = cache:decompose_resid(nil)
f:write("ln_stack", cache:apply_ln_to_stack(dec, nil, {pos_slice = -1}))
local normed = cache:apply_ln_to_stack(dec)
local attrs, bias = cache:logit_attrs(normed, 7, {incorrect_tokens = 9})
f:write("attrs", attrs)
f:write("attrs_bias", bias)

-- forward hooks: zero-ablate head 2 of block 1's hook_z
f:write("ablated", m:run_with_hooks(toks, {fwd_hooks = {{"blocks.1.attn.hook_z", mp.ablate.zero({head = 2})}}}))
-- m:loss with the same hook (row 1, next-token targets)
local lin, ltg = {}, {}
for t = 1, T - 1 do lin[t], ltg[t] = toks[1][t], toks[1][t + 1] end
num("loss_ablated", m:loss(lin, ltg, {fwd_hooks = {{"blocks.1.attn.hook_z", mp.ablate.zero({head = 2})}}}))

-- gradients
local tg = {}
for b = 1, B do
  tg[b] = {}
  for t = 1, T do tg[b][t] = t < T and toks[b][t + 1] or -1 end
end
local _, gc = m:run_with_cache(toks, {names = "blocks.*", incl_bwd = true, loss = "ce", targets = tg})
for k, v in pairs(gc) do
  if type(k) == "string" and k:sub(-5) == "_grad" then f:write("ce_grad/" .. k, v) end
end
num("ce", gc.loss)
local _, gl = m:run_with_cache(toks, {names = "hook_embed,blocks.0.attn.hook_pattern", incl_bwd = true,
                                      loss = {logit_diff = {5, 6}}})
f:write("ld_embed_grad", gl["hook_embed_grad"])
f:write("ld_pattern_grad", gl["blocks.0.attn.hook_pattern_grad"])
num("logit_diff", gl.loss)
-- a loss function: value = mean logit of token 3 at the last position
local function metric(lg)
  local V = lg:shape()[3]
  local d = mp.zeros(B, T, V)
  local v = 0
  for b = 1, B do
    v = v + lg:get(b, T, 4) / B
    d:set(1 / B, b, T, 4)
  end
  return v, d
end
local _, gf = m:run_with_cache(toks, {names = "blocks.0.hook_resid_post", incl_bwd = true, loss = metric})
f:write("fn_grad", gf["blocks.0.hook_resid_post_grad"])
num("fn", gf.loss)
-- a backward hook zeroing the gradient at blocks.1.hook_resid_pre
local _, gb = m:run_with_cache(toks, {names = "hook_embed,blocks.1.hook_resid_mid", incl_bwd = true,
                                      loss = {logit_diff = {5, 6}},
                                      bwd_hooks = {{"blocks.1.attn.hook_z", mp.ablate.zero({head = 1})}}})
f:write("bwd_embed_grad", gb["hook_embed_grad"])
f:write("bwd_mid_grad", gb["blocks.1.hook_resid_mid_grad"])

-- attribution patching (corrupt: the tokens reversed in each row)
local corrupt = {}
for b = 1, B do
  corrupt[b] = {}
  for t = 1, T do corrupt[b][t] = toks[b][T + 1 - t] end
end
local ap, vals = mp.attribution_patch(m, toks, corrupt, {names = "blocks.*.attn.hook_z", metric = {logit_diff = {5, 6}},
                                                         per = "head_position"})
for k, v in pairs(ap) do f:write("ap_z/" .. k, v) end
num("ap_z_clean", vals.clean)
num("ap_z_corrupt", vals.corrupt)
local ap2, vals2 = mp.attribution_patch(m, toks, corrupt, {names = "blocks.*.hook_resid_pre", metric = "ce",
                                                           targets = tg, per = "neuron"})
for k, v in pairs(ap2) do f:write("ap_resid/" .. k, v) end
num("ap_resid_clean", vals2.clean)
num("ap_resid_corrupt", vals2.corrupt)
