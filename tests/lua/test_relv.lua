-- test_relv.lua — Shaw relative values (rel_values R > 0, runtime/relv.h) from
-- Lua: hook_z against z computed here from hook_pattern, hook_v and the rel_v
-- rows (z_i = sum_j a_ij (v_j + rel_v[min(i - j, R)]), T > R + 1 so the
-- clipped row is used; a sliding-window layer too); KV-cached decoding
-- (m:generate) giving the full forward's hook_z; padded batches (left and right)
-- giving each row's own logits, generations and gradients; checkpoint round
-- trip; GGUF / HF / llama2.c exports refused naming rel_values; training on MTD
-- lowering the held-out loss and moving rel_v; bad values refused.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local R = 3
local spec = {d_model = 16, n_layer = 2, n_head = 2, n_kv_head = 1, d_head = 8, d_mlp = 32, vocab = 20, ctx = 16,
              pos = "rope", rel_values = R, seed = 3, init_std = 0.4}
local function new(extra)
  local s = {}
  for k, v in pairs(spec) do s[k] = v end
  for k, v in pairs(extra or {}) do s[k] = v end
  return mp.model.new(s)
end
local m = new()
-- rel_v starts at normal(0, init_std); made larger here so the term is far above float rounding
for l = 0, 1 do m:param(("blocks.%d.attn.rel_v"):format(l)):mul_(3) end
local toks = {{3, 5, 7, 1, 9, 2, 4, 8, 6, 11}, {2, 2, 9, 13, 4, 4, 1, 0, 17, 5}}
local B, T, H, Dh = 2, 10, 2, 8

-- |hook_z - reference| over both layers; also the largest rel term (to show it matters)
local function check_z(model, tokens, what)
  local names = {}
  for l = 0, 1 do
    for _, p in ipairs{"attn.hook_pattern", "attn.hook_v", "attn.hook_z"} do
      names[#names + 1] = ("blocks.%d.%s"):format(l, p)
    end
  end
  local _, cache = model:run_with_cache(tokens, {names = names})
  local worst, big = 0, 0
  for l = 0, 1 do
    local pat, v, z = cache[("blocks.%d.attn.hook_pattern"):format(l)], cache[("blocks.%d.attn.hook_v"):format(l)],
                      cache[("blocks.%d.attn.hook_z"):format(l)]
    local rv = model:param(("blocks.%d.attn.rel_v"):format(l))
    for b = 1, #tokens do
      for h = 1, H do
        for i = 1, T do
          for e = 1, Dh do
            local s, rel = 0, 0
            for j = 1, i do
              local a = pat:get(b, h, i, j)
              local k = math.min(i - j, R)
              s = s + a * v:get(b, j, 1, e)          -- one kv head (GQA group of 2)
              rel = rel + a * rv:get(k + 1, e)
            end
            worst = math.max(worst, math.abs(z:get(b, i, h, e) - (s + rel)))
            big = math.max(big, math.abs(rel))
          end
        end
      end
    end
  end
  assert(worst <= 1e-5, ("%s: hook_z differs from the reference by %.3g"):format(what, worst))
  assert(big > 0.1, ("%s: the relative term is negligible (%.3g)"):format(what, big))
  print(("%s: hook_z vs reference worst %.2g (relative term up to %.3g)"):format(what, worst, big))
end

t.case("config and parameter", function()
  assert(m.config.rel_values == R, "m.config.rel_values")
  local rv = m:param("blocks.1.attn.rel_v")
  local sh = rv:shape()
  assert(#sh == 2 and sh[1] == R + 1 and sh[2] == Dh, "rel_v is [R+1, d_head]")
  local plain = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 20, ctx = 8}
  assert(plain.config.rel_values == 0, "rel_values defaults to 0")
  for _, name in ipairs(plain:params()) do assert(not name:find("rel_v"), "a plain model has no rel_v") end
end)

t.case("hook_z = sum_j a_ij (v_j + rel_v[min(i-j, R)])", function() check_z(m, toks, "rope") end)

t.case("sliding window: the same formula over the keys a query sees", function()
  local w = new{sliding_window = 4, sliding_window_pattern = 2}   -- layer 0 windowed, layer 1 global
  for l = 0, 1 do w:param(("blocks.%d.attn.rel_v"):format(l)):mul_(3) end
  check_z(w, toks, "window 4")
end)

t.case("KV-cached decoding gives the full forward's hook_z", function()
  local steps = {}
  local _, out = m:generate({3, 5, 7, 1}, {max_new_tokens = 8, temperature = 0, stop_at_eos = false,
    fwd_hooks = {{"blocks.1.attn.hook_z", function(z, hook)
      steps[#steps + 1] = {pos0 = hook.pos0, z = z:clone()}
    end}}})
  -- the prefill of 4 then one call per new token but the last (nothing reads its logits)
  assert(#out == 12 and #steps == 8 and steps[1].pos0 == 0 and steps[8].pos0 == 10,
         ("12 tokens, 8 calls (got %d, %d)"):format(#out, #steps))
  local _, cache = m:run_with_cache({out}, {names = "blocks.1.attn.hook_z"})
  local full, worst = cache["blocks.1.attn.hook_z"], 0
  for _, s in ipairs(steps) do
    local n = s.z:shape()[2]
    for r = 1, n do
      for h = 1, H do
        for e = 1, Dh do worst = math.max(worst, math.abs(s.z:get(1, r, h, e) - full:get(1, s.pos0 + r, h, e))) end
      end
    end
  end
  assert(worst <= 1e-5, ("decode vs full hook_z: %.3g"):format(worst))
  -- greedy: each new token is the full forward's argmax at the position before it
  local logits = m:forward({out})
  for p = 4, 11 do assert(logits[1][p]:argmax() - 1 == out[p + 1], "greedy token " .. p) end
end)

-- rows of different lengths, padded on either side
local prompts = {{3, 5, 7, 1, 9, 2}, {4, 8}, {6, 11, 13, 2, 0}}
local function pad(left)
  local W = 6
  local tk, mk, off = {}, {}, {}
  for b, r in ipairs(prompts) do
    tk[b], mk[b] = {}, {}
    off[b] = left and W - #r or 0
    for i = 1, W do tk[b][i], mk[b][i] = 0, 0 end
    for i = 1, #r do tk[b][off[b] + i], mk[b][off[b] + i] = r[i], 1 end
  end
  return tk, mk, off
end

for _, left in ipairs{true, false} do
  local side = left and "left" or "right"
  t.case(side .. " padding: each row's logits and gradients as the row alone", function()
    local tk, mk, off = pad(left)
    local logits = m:forward(tk, {attention_mask = mk})
    local _, cache = m:run_with_cache(tk, {attention_mask = mk, incl_bwd = true, loss = {logit_diff = {4, 9}},
                                           names = "hook_embed"})
    local g = cache["hook_embed_grad"]
    local worst, gworst = 0, 0
    for b, p in ipairs(prompts) do
      local l1 = m:forward({p})
      local _, c1 = m:run_with_cache({p}, {incl_bwd = true, loss = {logit_diff = {4, 9}}, names = "hook_embed"})
      local g1 = c1["hook_embed_grad"]
      for i = 1, #p do
        for v = 1, 20 do worst = math.max(worst, math.abs(logits[b][off[b] + i][v] - l1[1][i][v])) end
        for d = 1, 16 do
          gworst = math.max(gworst, math.abs(g:get(b, off[b] + i, d) - g1:get(1, i, d) / #prompts))
        end
      end
    end
    assert(worst <= 1e-4, ("%s: logits differ by %.3g"):format(side, worst))
    assert(gworst <= 1e-5, ("%s: hook_embed gradients differ by %.3g"):format(side, gworst))
    print(("%s padding: logits within %.2g, hook_embed gradients within %.2g"):format(side, worst, gworst))
  end)
end

t.case("batched generation: each row as its prompt alone", function()
  local _, rows = m:generate({{3, 5, 7, 1, 9}, {4, 8}}, {max_new_tokens = 6, temperature = 0, stop_at_eos = false})
  for b, p in ipairs{{3, 5, 7, 1, 9}, {4, 8}} do
    local _, alone = m:generate(p, {max_new_tokens = 6, temperature = 0, stop_at_eos = false})
    t.deep_eq(rows[b], alone, "row " .. b)
  end
end)

local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)

t.case("checkpoint round trip", function()
  local path = dir .. "/relv.h5"
  m:save(path)
  local m2 = mp.model.load(path)
  assert(m2.config.rel_values == R, "the checkpoint keeps rel_values")
  for l = 0, 1 do
    local name = ("blocks.%d.attn.rel_v"):format(l)
    assert((m2:param(name) - m:param(name)):abs():max() == 0, name .. " read back exactly")
  end
  local a, b = m:forward(toks), m2:forward(toks)
  assert((a - b):abs():max() == 0, "same logits after load")
end)

t.case("foreign formats refuse the model, naming rel_values", function()
  t.expect_error(function() m:save(dir .. "/relv.gguf") end, "rel_values", "GGUF")
  t.expect_error(function() m:save(dir .. "/hf", {format = "hf"}) end, "rel_values", "HF folder")
  -- a llama2.c-shaped model (RMSNorm, SwiGLU, RoPE theta 10000, d_head = d_model / n_head)
  local l2 = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 20, ctx = 8, rel_values = 2}
  t.expect_error(function() l2:save(dir .. "/relv.bin", {format = "llama2c"}) end, "rel_values", "llama2.c")
  local f = io.open(dir .. "/relv.gguf", "rb")
  assert(not f, "nothing written")
end)

t.case("training lowers the held-out loss and moves rel_v", function()
  local task = mp.tasks.mtd{q = 8, m = 2, concentration = 0.5, seed = 11, targets = "all"}
  local tm = mp.model.new{d_model = 32, n_layer = 2, n_head = 2, d_mlp = 64, vocab = 8, ctx = 32, seed = 5,
                          rel_values = 2}
  local eval = mp.tasks.mtd{q = 8, m = 2, concentration = 0.5, seed = 11, targets = "all"}
  eval:seed(999)
  local et, eg = eval:sample(16, 32)
  local l0 = tm:loss(et, eg)
  local r0 = tm:param("blocks.0.attn.rel_v"):clone()
  tm:train{task = task, steps = 40, batch = 8, lr = 3e-3, warmup = 5, progress = false}
  local l1 = tm:loss(et, eg)
  local moved = (tm:param("blocks.0.attn.rel_v") - r0):abs():max()
  assert(l1 < l0 - 0.1, ("held-out loss %.4f -> %.4f"):format(l0, l1))
  assert(moved > 1e-3, ("rel_v moved by %.3g only"):format(moved))
  print(("training: held-out loss %.4f -> %.4f in 40 steps, rel_v moved by %.3g"):format(l0, l1, moved))
end)

t.case("bad values refused", function()
  t.expect_error(function() new{rel_values = -1} end, "'rel_values' must be an integer in [0,", "negative")
  t.expect_error(function() new{rel_values = 5000} end, "rel_values (5000) must be in 0..4096", "too large")
end)

os.execute("rm -rf '" .. dir .. "'")
t.finish("test_relv")
