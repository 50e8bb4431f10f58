-- test_attn.lua — the attention variants from Lua: mp.model.new{attn=, alpha=}
-- with m.config.attn / m.config.alpha, exact zeros in hook_pattern for the
-- entmax kinds (rows still sum to 1), training steps lowering the loss,
-- checkpoints keeping the variant (same loss after load), GGUF export refused,
-- bad names and alphas refused.
local function check(c, ...) if not c then error(string.format(...), 2) end end

local T = 12
local toks, tgts = {}, {}
for t = 1, T do toks[t] = (t * 5) % 20; tgts[t] = (t * 5 + 5) % 20 end
local want = {softmax = 1, ssmax = 1, entmax15 = 1.5, entmax = 1.3, asentmax = 1.5}
for _, kind in ipairs{"softmax", "ssmax", "entmax15", "entmax", "asentmax"} do
  local m = mp.model.new{d_model=16, n_layer=2, n_head=2, d_mlp=32, vocab=20, ctx=8, seed=2, init_std=0.3,
                         attn=kind, alpha=(kind == "entmax" and 1.3 or nil)}
  check(m.config.attn == kind, "attn %s -> %s", kind, m.config.attn)
  check(math.abs(m.config.alpha - want[kind]) < 1e-6, "%s: alpha %s", kind, m.config.alpha)
  local _, cache = m:run_with_cache(toks, {names = "blocks.0.attn.hook_pattern"})
  local pat = cache["blocks.0.attn.hook_pattern"]
  local zeros, worst = 0, 0
  for h = 1, 2 do
    for i = 1, T do
      local s = 0
      for j = 1, i do
        local a = pat:get(1, h, i, j)
        s = s + a
        if a == 0 then zeros = zeros + 1 end
      end
      worst = math.max(worst, math.abs(s - 1))
    end
  end
  check(worst < 1e-5, "%s: pattern rows sum to 1 within %g", kind, worst)
  local sparse = kind:find("entmax") ~= nil
  check((zeros > 0) == sparse, "%s: %d exact zeros in hook_pattern", kind, zeros)
  local opt = mp.optim.adamw{lr = 1e-2}
  local l0 = m:loss({toks}, {tgts})
  for _ = 1, 15 do m:train_step(opt, {toks}, {tgts}) end
  local l1 = m:loss({toks}, {tgts})
  check(l1 < l0 - 0.1, "%s: training does not lower the loss (%.4f -> %.4f)", kind, l0, l1)
  local path = os.tmpname() .. ".h5"
  m:save(path)
  local m2 = mp.model.load(path)
  check(m2.config.attn == kind and math.abs(m2.config.alpha - want[kind]) < 1e-6, "%s: checkpoint keeps attn", kind)
  check(math.abs(m2:loss({toks}, {tgts}) - l1) < 1e-6, "%s: same loss after load", kind)
  os.remove(path)
  if kind ~= "softmax" then
    local ok, err = pcall(m.save, m, path .. ".gguf")
    check(not ok and err:find("attention variant"), "%s: GGUF export refused: %s", kind, tostring(err))
  end
  print(string.format("attn %-9s alpha %.1f: layer-0 pattern zeros %3d, loss %.4f -> %.4f after 15 steps",
                      kind, m.config.alpha, zeros, l0, l1))
end
local ok, err = pcall(mp.model.new, {d_model=16, n_layer=1, n_head=2, vocab=20, ctx=8, attn="sparse"})
check(not ok and err:find("attn must be one of"), "unknown attn refused: %s", err)
ok, err = pcall(mp.model.new, {d_model=16, n_layer=1, n_head=2, vocab=20, ctx=8, attn="entmax", alpha=1})
check(not ok and err:find("alpha"), "alpha 1 refused: %s", err)
ok, err = pcall(mp.model.new, {d_model=16, n_layer=1, n_head=2, vocab=20, ctx=8, attn="ssmax", alpha=1.5})
check(not ok and err:find("alpha"), "alpha with ssmax refused: %s", err)
print("test_attn.lua: ok")
