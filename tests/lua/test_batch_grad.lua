-- test_batch_grad.lua — gradients of a padded batch (issue #44): loss "ce"
-- and logit_diff with incl_bwd on tokens [B, T] + attention_mask (left and
-- right padding, rows of different lengths) give at every hook point, at each
-- row's real positions, the gradients of that row run alone (unpadded), to
-- 5e-5 of the largest (float32 rounding), scaled by the metric's averaging (ce: counted
-- positions of the batch / of the row; logit_diff: B); the pad positions'
-- gradients are 0, and at hook_pattern / hook_attn_scores every entry of a
-- pad query or a pad key is 0; "ce" ignores pad targets (the loss equals the
-- count-weighted mean of the rows' losses); bwd_hooks fire on the padded
-- batch; mp.attribution_patch with attention_mask sums the rows' own
-- estimates. RoPE, learned positions, rope_id + GQA, entmax15, qk_norm.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local V = 20
local prompts = {{3, 5, 7}, {1, 2, 3, 4, 5, 6, 7}, {9, 8, 4, 2, 11}}
local PAD = 0
-- float32 rounding: the batch's products and sums run over other shapes than
-- the single run's (measured worst 2.7e-5 of the tensor's largest entry)
local TOL = 5e-5
local worst = 0

local function pad(rows, left)
  local T = 0
  for _, r in ipairs(rows) do T = math.max(T, #r) end
  local toks, mask, off = {}, {}, {}
  for b, r in ipairs(rows) do
    toks[b], mask[b] = {}, {}
    off[b] = left and T - #r or 0
    for i = 1, T do toks[b][i], mask[b][i] = PAD, 0 end
    for i = 1, #r do toks[b][off[b] + i], mask[b][off[b] + i] = r[i], 1 end
  end
  return toks, mask, off, T
end

-- targets of row r (1-based tokens): the next token, -1 at its last position
local function targets_of(r)
  local tg = {}
  for i = 1, #r do tg[i] = i < #r and r[i + 1] or -1 end
  return tg
end

local function is_map(name) return name:find("hook_pattern") or name:find("hook_attn_scores") end

-- every element of a tensor of shape sh (1-based index tables)
local function each(sh, fn)
  local idx = {}
  local function rec(d)
    if d > #sh then return fn(idx) end
    for i = 1, sh[d] do idx[d] = i; rec(d + 1) end
  end
  rec(1)
end

-- the batch's gradient g (row b, offset off, n real tokens) against the single
-- run's g1 times scale; pads 0. Returns the max error relative to max |g1|.
local function compare(name, g, g1, b, off, n, mask_row, scale)
  local sh, err, big = g1:shape(), 0, 0
  local map = is_map(name)
  each(sh, function(i)
    local j = {b, table.unpack(i, 2)}
    if map then j[3], j[4] = off + i[3], off + i[4] else j[2] = off + i[2] end
    local s = g1:get(table.unpack(i)) * scale
    big = math.max(big, math.abs(s))
    err = math.max(err, math.abs(g:get(table.unpack(j)) - s))
  end)
  -- pads: every entry of a pad position (a pad query or key for the maps) is 0
  local zero = true
  each(g:shape(), function(i)
    if i[1] ~= b then return end
    local pad_here = map and (mask_row[i[3]] == 0 or mask_row[i[4]] == 0) or (not map and mask_row[i[2]] == 0)
    if pad_here and g:get(table.unpack(i)) ~= 0 then zero = false end
  end)
  return big > 0 and err / big or err, zero
end

local configs = {
  {name = "rope", cfg = {pos = "rope"}},
  {name = "learned", cfg = {pos = "learned", norm = "layer", mlp = "gelu"}},
  {name = "rope_id+gqa", cfg = {pos = "rope_id", n_head = 4, n_kv_head = 2, ctx = 4}},
  {name = "entmax15", cfg = {pos = "rope", attn = "entmax15"}},
  {name = "qk_norm", cfg = {pos = "rope", qk_norm = "head"}},
}
for _, c in ipairs(configs) do
  local spec = {d_model = 16, n_layer = 2, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, seed = 5, init_std = 0.5}
  for k, v in pairs(c.cfg) do spec[k] = v end
  local m = mp.model.new(spec)
  -- each row alone: ce over its n-1 counted positions, logit_diff at its last token
  local ce1, ld1, lce1 = {}, {}, {}
  for b, p in ipairs(prompts) do
    local _, c1 = m:run_with_cache(p, {incl_bwd = true, loss = "ce", targets = targets_of(p)})
    ce1[b], lce1[b] = c1, c1.loss
    local _, c2 = m:run_with_cache(p, {incl_bwd = true, loss = {logit_diff = {4, 9}}})
    ld1[b] = c2
  end
  for _, left in ipairs{false, true} do
    local what = c.name .. (left and " left" or " right")
    local toks, mask, off, T = pad(prompts, left)
    local tg = {}
    local count, wsum = 0, 0
    for b, p in ipairs(prompts) do
      tg[b] = {}
      for i = 1, T do tg[b][i] = -1 end
      local r = targets_of(p)
      for i = 1, #p do tg[b][off[b] + i] = r[i] end
      count = count + #p - 1
      wsum = wsum + lce1[b] * (#p - 1)
    end
    t.case(what .. ": ce gradients of each row as the row alone", function()
      local _, cache = m:run_with_cache(toks, {incl_bwd = true, loss = "ce", targets = tg, attention_mask = mask})
      t.near(cache.loss, wsum / count, 1e-5, what .. " ce loss = the rows' count-weighted mean")
      local n = 0
      for name, g in pairs(cache) do
        if type(name) == "string" and name:sub(-5) == "_grad" then
          local base = name:sub(1, -6)
          for b, p in ipairs(prompts) do
            local e, zero = compare(base, g, ce1[b][name], b, off[b], #p, mask[b], (#p - 1) / count)
            worst = math.max(worst, e)
            assert(e <= TOL, ("%s row %d %s: relative error %.3g"):format(what, b, name, e))
            assert(zero, ("%s row %d %s: a pad position has a gradient"):format(what, b, name))
          end
          n = n + 1
        end
      end
      assert(n > 20, what .. ": " .. n .. " gradients only")
    end)
    t.case(what .. ": logit_diff at each row's last real token", function()
      local _, cache = m:run_with_cache(toks, {incl_bwd = true, loss = {logit_diff = {4, 9}}, attention_mask = mask})
      local want = 0
      for b = 1, #prompts do want = want + ld1[b].loss / #prompts end
      t.near(cache.loss, want, 1e-5, what .. " logit_diff value")
      for name, g in pairs(cache) do
        if type(name) == "string" and name:sub(-5) == "_grad" then
          for b, p in ipairs(prompts) do
            local e, zero = compare(name:sub(1, -6), g, ld1[b][name], b, off[b], #p, mask[b], 1 / #prompts)
            worst = math.max(worst, e)
            assert(e <= TOL, ("%s row %d %s: relative error %.3g"):format(what, b, name, e))
            assert(zero, ("%s row %d %s: a pad position has a gradient"):format(what, b, name))
          end
        end
      end
    end)
  end
end

local m = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, seed = 9, init_std = 0.5}
local toks, mask, off = pad(prompts, true)

t.case("bwd_hooks fire on the padded batch and an edit propagates", function()
  local seen
  local _, v = m:run_with_hooks(toks, {attention_mask = mask, loss = {logit_diff = {4, 9}},
    bwd_hooks = {{"blocks.1.hook_resid_pre", function(g) seen = g:shape() end}}})
  assert(seen and seen[1] == 3 and seen[2] == 7, "the hook saw [B, T, D]")
  assert(v == v, "a value")
  -- zeroing the gradient at resid_post of the last layer zeroes it everywhere upstream
  local _, cache = m:run_with_cache(toks, {attention_mask = mask, loss = {logit_diff = {4, 9}}, incl_bwd = true,
    names = "hook_embed",
    bwd_hooks = {{"blocks.1.hook_resid_post", function(g) g:fill_(0) end}}})
  assert(cache["hook_embed_grad"]:abs():max() == 0, "the edit reached hook_embed")
end)

t.case("attribution_patch with attention_mask sums the rows' own estimates", function()
  local corrupt = {}
  for b, r in ipairs(toks) do
    corrupt[b] = {}
    for i, v in ipairs(r) do corrupt[b][i] = mask[b][i] == 1 and (v + 3) % V or v end
  end
  local name = "blocks.0.hook_resid_mid"
  local est = mp.attribution_patch(m, toks, corrupt, {names = name, metric = {logit_diff = {4, 9}}, per = "all",
    attention_mask = mask})
  local want = 0
  for b, p in ipairs(prompts) do
    local cp = {}
    for i = 1, #p do cp[i] = corrupt[b][off[b] + i] end
    local e1 = mp.attribution_patch(m, p, cp, {names = name, metric = {logit_diff = {4, 9}}, per = "all"})
    want = want + e1[name]:get(1) / #prompts
  end
  t.near(est[name]:get(1), want, 1e-5 * math.max(1, math.abs(want)), "attribution total")
end)

print(("test_batch_grad: worst relative error %.3g"):format(worst))
t.finish("test_batch_grad")
