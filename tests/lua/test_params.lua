-- test_params.lua — m:params() and m:param(name): the names follow the checkpoint
-- schema, a view writes into the model (hand-set weights give the closed-form
-- forward of a one-layer attention-only model), views die with the model
-- (close, collection) instead of touching freed memory, saying why, a view keeps
-- its model alive, views a script drops are collected (m:param in a loop does
-- not grow the heap), a model with quantized weights gives no view of any name
-- until m:dequantize() (training would free the memory a view points at), an
-- unknown name is refused, a read-only (memory-mapped) model gives copies and
-- refuses writes naming mp.load's copy = true, and TransformerLens's names of
-- the norm weights ("blocks.0.ln1.w") view the same parameters.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local data = os.getenv("MP_TESTDATA") or "tests/data"

local D, V, T = 4, 3, 4
local function tiny()
  return mp.model.new{d_model = D, n_layer = 1, n_head = 1, d_head = D, vocab = V, ctx = T, mlp = "none",
                      pos = "none", seed = 5}
end

t.case("names", function()
  local m <close> = tiny()
  t.deep_eq(m:params(), {"embed", "blocks.0.ln1.weight", "blocks.0.attn.wq", "blocks.0.attn.wk",
                         "blocks.0.attn.wv", "blocks.0.attn.wo", "ln_final.weight"})
  local m2 <close> = mp.model.new{d_model = 8, n_layer = 2, n_head = 2, vocab = 5, ctx = 8, pos = "learned", tied = false}
  local names = m2:params()
  local set = {}
  for _, n in ipairs(names) do set[n] = true end
  assert(set["blocks.1.mlp.w2"] and set["pos_embed"] and set["unembed"] and #names == 2 * 9 + 4,
         "two-layer names: " .. table.concat(names, " "))
  local w = m2:param("blocks.1.mlp.w1")
  assert(w:dim() == 2 and w:size(1) == 32 and w:size(2) == 8, "w1 shape [M, D]")
  assert(m2:param("pos_embed"):size(1) == 8, "pos_embed [ctx, D]")
end)

-- Hand-set weights: wq = wk = 0 (uniform causal attention), wv = wo = identity,
-- norm gains 1, tied embedding E. Closed form per position t:
--   n_j = E[y_j] / rms(E[y_j]);  r_t = E[y_t] + mean_{j<=t} n_j;  logits_t = E r_t / rms(r_t)
t.case("hand-set weights give the closed form", function()
  local m <close> = tiny()
  local E = {{1.0, -0.5, 0.25, 2.0}, {-1.5, 0.75, 1.0, -0.25}, {0.5, 0.5, -2.0, 1.0}}
  local e = m:param("embed")
  for v = 1, V do for d = 1, D do e:set(E[v][d], v, d) end end
  m:param("blocks.0.ln1.weight"):fill_(1)
  m:param("ln_final.weight"):fill_(1)
  m:param("blocks.0.attn.wq"):fill_(0)
  m:param("blocks.0.attn.wk"):fill_(0)
  for _, name in ipairs{"blocks.0.attn.wv", "blocks.0.attn.wo"} do
    local w = m:param(name)
    w:fill_(0)
    for d = 1, D do w:set(1, d, d) end
  end
  local eps = m.config.norm_eps
  local function rmsn(x)
    local s = 0
    for d = 1, D do s = s + x[d] * x[d] end
    local r = math.sqrt(s / D + eps)
    local y = {}
    for d = 1, D do y[d] = x[d] / r end
    return y
  end
  local toks = {2, 0, 1, 2}
  local logits = m:forward(toks)
  local worst, acc = 0, {0, 0, 0, 0}
  for i = 1, T do
    local n = rmsn(E[toks[i] + 1])
    for d = 1, D do acc[d] = acc[d] + n[d] end
    local r = {}
    for d = 1, D do r[d] = E[toks[i] + 1][d] + acc[d] / i end
    local f = rmsn(r)
    for v = 1, V do
      local want = 0
      for d = 1, D do want = want + E[v][d] * f[d] end
      worst = math.max(worst, math.abs(logits:get(1, i, v) - want))
    end
  end
  assert(worst < 1e-5, ("forward vs closed form: max |diff| %.3g"):format(worst))
  -- a write through the view changes the next forward
  m:param("ln_final.weight"):fill_(2)
  local l2 = m:forward(toks)
  t.near(l2:get(1, 3, 2), 2 * logits:get(1, 3, 2), 1e-5, "gain 2 doubles the logits")
end)

t.case("views die with the model", function()
  local m = tiny()
  local w = m:param("blocks.0.attn.wq")
  local w2 = w:select(1, 1)              -- a view of the view
  m:close()
  t.expect_error(function() return w:sum() end, "Tensor is no longer valid (the model was closed)", "view after close")
  t.expect_error(function() return w2:sum() end, "Tensor is no longer valid (the model was closed)",
                 "view of a view after close")
  t.expect_error(function() return m:param("embed") end, "closed", "param on a closed model")
end)

t.case("a view keeps its model alive", function()
  local m = tiny()
  local e = m:param("embed")
  local before = e:sum()
  m = nil
  collectgarbage(); collectgarbage()
  t.near(e:sum(), before, 0, "embed still readable after the model's last reference went")
end)

t.case("refusals", function()
  local m <close> = tiny()
  t.expect_error(function() return m:param("blocks.1.attn.wq") end, 'no parameter "blocks.1.attn.wq"', "bad layer")
  t.expect_error(function() return m:param("unembed") end, 'no parameter "unembed"', "tied unembed")
end)

-- A llama2.c file's weights are its read-only memory map: m:param reads a copy
-- (equal to the view of the same file loaded with copy = true, and to the
-- TransformerLens shortcut W_Q, a different path); writing goes through
-- m:set_weight, which refuses, naming copy = true; with copy = true it writes.
t.case("memory-mapped weights: read a copy, writes refused naming copy = true", function()
  local f <close> = mp.load(data .. "/ref_gqa_untied.bin")
  local g <close> = mp.load(data .. "/ref_gqa_untied.bin", {copy = true})
  local a, b = f:param("blocks.1.attn.wq"), g:param("blocks.1.attn.wq")
  t.near((a - b):abs():max(), 0, 0, "the copy equals the copied model's view")
  local Dh, D = f.config.d_head, f.config.d_model
  local Q = f:W_Q(1)
  t.near(a:get(2 * Dh + 3, D), Q:get(3, D, 3), 0, "wq[(h Dh + e), d] = W_Q[h, d, e]")
  local before = a:get(1, 1)
  a:set(before + 1, 1, 1)
  t.near(f:param("blocks.1.attn.wq"):get(1, 1), before, 0, "a write to the copy does not reach the mapped model")
  t.expect_error(function() f:set_weight("W_Q", 1, Q) end, "mp.load(path, {copy = true})", "mapped: set_weight")
  t.expect_error(function() f:set_weight("W_Q", 1, Q) end, "ref_gqa_untied.bin", "the message names the file")
  Q:set(Q:get(3, D, 3) + 0.5, 3, D, 3)
  g:set_weight("W_Q", 1, Q)
  t.near(b:get(2 * Dh + 3, D), Q:get(3, D, 3), 1e-6, "copy = true: set_weight writes the view")
  t.expect_error(function() mp.load(data .. "/ref_gqa_untied.bin", {copy = 1}) end, "copy", "copy must be a boolean")
end)

-- TransformerLens's state_dict names of the norm weights view the same
-- parameters as the checkpoint names (a write through one reads through the
-- other); names the model lacks are refused saying what its config lacks.
t.case("norm weights under TransformerLens's names", function()
  local m <close> = mp.model.new{d_model = 8, n_layer = 2, n_head = 2, vocab = 5, ctx = 8, norm = "layer", seed = 3}
  local pairs_ = {{"blocks.1.ln1.w", "blocks.1.ln1.weight"}, {"blocks.1.ln1.b", "blocks.1.ln1.bias"},
                  {"blocks.0.ln2.w", "blocks.0.ln2.weight"}, {"blocks.0.ln2.b", "blocks.0.ln2.bias"},
                  {"ln_final.w", "ln_final.weight"}, {"ln_final.b", "ln_final.bias"}}
  for i, p in ipairs(pairs_) do
    local tl, ck = m:param(p[1]), m:param(p[2])
    assert(tl:dim() == 1 and tl:size(1) == 8, p[1] .. ": [d_model]")
    tl:set(0.25 * i, 3)
    t.near(ck:get(3), 0.25 * i, 0, p[1] .. " writes " .. p[2])
    ck:set(-0.5 * i, 5)
    t.near(tl:get(5), -0.5 * i, 0, p[2] .. " reads back through " .. p[1])
  end
  t.expect_error(function() return m:param("blocks.2.ln1.w") end,
                 "blocks.2.ln1.w: layer 2 out of range: the model has 2 layers (0..1)", "layer out of range")
  t.expect_error(function() return m:param("blocks.0.ln1_post.w") end, "no post-norms", "no post-norms")
  t.expect_error(function() return m:param("blocks.0.attn.q_norm.w") end, 'no q/k norms (qk_norm = "none")', "no qk")
  local r <close> = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, vocab = 5, ctx = 8, mlp = "none",
                                 post_norms = true, qk_norm = "head", seed = 4}
  t.expect_error(function() return r:param("ln_final.b") end, 'RMSNorm (norm = "rms"): they have no bias', "rms bias")
  t.expect_error(function() return r:param("blocks.0.ln2.w") end, 'no MLP (mlp = "none")', "no MLP")
  for _, p in ipairs{{"blocks.0.ln1_post.w", "blocks.0.ln1_post.weight", 8},
                     {"blocks.0.attn.q_norm.w", "blocks.0.attn.q_norm.weight", 4},
                     {"blocks.0.attn.k_norm.w", "blocks.0.attn.k_norm.weight", 4}} do
    local tl = r:param(p[1])
    assert(tl:size(1) == p[3], p[1] .. " width")
    tl:set(7, 2)
    t.near(r:param(p[2]):get(2), 7, 0, p[1] .. " is " .. p[2])
  end
  t.expect_error(function() return r:param("blocks.0.ln1.x") end, 'no parameter "blocks.0.ln1.x"', "unknown name")
end)

t.case("views a script drops are collected", function()
  local m <close> = tiny()
  local kept = m:param("embed")
  local function views(n)
    for _ = 1, n do m:param("blocks.0.attn.wq") end
    collectgarbage(); collectgarbage()
    return collectgarbage("count")
  end
  -- the first rounds size the registry tables (weak: their slots are reused);
  -- more rounds must not grow the heap (a strong list holds every view: > 2 MB
  -- per 20000)
  views(20000)
  local before = views(20000)
  views(20000)
  local after = views(20000)
  t.ok(after - before < 100, ("40000 more dropped views: the Lua heap grew by %.0f KiB (limit 100)"):format(after - before))
  m:close()
  t.expect_error(function() return kept:sum() end, "the model was closed", "a kept view is still detached")
end)

t.case("a quantized model gives no views until dequantized", function()
  local tmp = os.tmpname()
  local f <close> = mp.model.new{d_model = 32, n_layer = 1, n_head = 2, vocab = 40, ctx = 8, seed = 3}
  f:save(tmp .. ".q8.gguf", {type = "q8_0"})
  local q <close> = mp.load(tmp .. ".q8.gguf")
  -- float32 tensors of a quantized model too: training would replace their memory
  for _, name in ipairs{"blocks.0.ln1.weight", "ln_final.weight", "blocks.0.attn.wq", "embed"} do
    t.expect_error(function() return q:param(name) end, "call m:dequantize() first", name)
  end
  q:train_step(mp.optim.adamw{lr = 1e-3}, {{1, 2, 3, 4}}, {{2, 3, 4, 5}}) -- dequantizes
  local w = q:param("blocks.0.ln1.weight")
  w:set(42.0, 1)
  q:train_step(mp.optim.adamw{lr = 0}, {{1, 2, 3, 4}}, {{2, 3, 4, 5}})
  t.near(w:get(1), 42.0, 1e-6, "a view of a float32 model survives training (lr 0)")
  t.near(q:param("blocks.0.ln1.weight"):get(1), 42.0, 1e-6, "and sees the model's value")
  os.remove(tmp .. ".q8.gguf"); os.remove(tmp)
end)

t.finish("test_params")
