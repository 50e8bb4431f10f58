-- test_weights.lua — TransformerLens's weight shortcuts and weight processing.
-- Shortcuts (m.W_E, m:W_Q(l), ...) are checked element by element against the
-- [out, in] parameter views of m:param (the index maps of TL's shapes written
-- out here by hand), on a GPT-2-style model (LayerNorm, learned positions,
-- biases, GELU, untied) and a Llama-style one (RMSNorm, GQA, SwiGLU, tied);
-- m:set_weight is checked by a round trip and by giving the same logits as
-- the same edit made through m:param. m:process_weights is checked by the
-- invariance it promises: logits (log_softmax for center_unembed) before and
-- after, within 1e-5 relative, on both models with random norm weights and
-- biases, and on the shared llama2.c model when ../shared is present; plus the
-- state each step leaves (norm weights 1, means 0, b_V 0) and its refusals.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local data = os.getenv("MP_TESTDATA") or "tests/data"
local shared = os.getenv("MP_SHARED_DIR") or "../shared"

-- deterministic pseudo-random values in [-a, a]
local seed = 12345
local function rnd(a)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return (seed / 2147483648 * 2 - 1) * a
end

-- sets every element of the view p to base + rnd(a)
local function randomize(p, base, a)
  local flat = p:reshape{p:numel()}
  for i = 1, p:numel() do flat:set(base + rnd(a), i) end
end

local function gpt2like(extra)
  local o = {d_model = 12, n_layer = 2, n_head = 3, d_head = 4, d_mlp = 20, vocab = 17, ctx = 8, norm = "layer",
             pos = "learned", mlp = "gelu_tanh", linear_bias = true, qkv_bias = true, tied = false, seed = 7,
             init_std = 0.3}
  for k, v in pairs(extra or {}) do o[k] = v end
  return mp.model.new(o)
end

local function llamalike(extra)
  local o = {d_model = 16, n_layer = 2, n_head = 4, n_kv_head = 2, d_head = 4, d_mlp = 24, vocab = 19, ctx = 8,
             norm = "rms", pos = "rope", mlp = "swiglu", tied = true, seed = 9, init_std = 0.3}
  for k, v in pairs(extra or {}) do o[k] = v end
  return mp.model.new(o)
end

-- random norm weights around 1, norm biases and linear biases around 0
local function perturb(m)
  for _, name in ipairs(m:params()) do
    if name:match("ln%d?%.weight$") or name == "ln_final.weight" then randomize(m:param(name), 1, 0.5)
    elseif name:match("%.bias$") or name:match("%.b[qkvo123]$") then randomize(m:param(name), 0, 0.5) end
  end
  return m
end

local toks = {{1, 5, 3, 7, 2, 6}, {4, 4, 0, 2, 9, 1}}

local function max_abs(x)
  local f, m = x:reshape{x:numel()}, 0
  for i = 1, x:numel() do m = math.max(m, math.abs(f:get(i))) end
  return m
end

-- max |a - b| / max |a|
local function rel(a, b)
  return max_abs(a - b) / math.max(max_abs(a), 1e-30)
end

local function log_softmax(x) -- [B, T, V] -> a new tensor
  local y = x:clone()
  local B, T, V = x:size(1), x:size(2), x:size(3)
  for b = 1, B do
    for i = 1, T do
      local mx = -math.huge
      for v = 1, V do mx = math.max(mx, x:get(b, i, v)) end
      local s = 0
      for v = 1, V do s = s + math.exp(x:get(b, i, v) - mx) end
      local lse = mx + math.log(s)
      for v = 1, V do y:set(x:get(b, i, v) - lse, b, i, v) end
    end
  end
  return y
end

-- ---- shortcuts against m:param, index by index ----

-- TL index (0-based h, d, e) -> element of the [out, in] view, 1-based
local function check_heads_in(m, name, pname, l, heads, rep)
  local W, P = m[name](m, l), m:param(("blocks.%d.attn.%s"):format(l, pname))
  local Dh, D = m.config.d_head, m.config.d_model
  t.deep_eq(W:shape(), {heads, D, Dh}, name .. " shape")
  for h = 0, heads - 1 do
    for d = 0, D - 1 do
      for e = 0, Dh - 1 do
        assert(W:get(h + 1, d + 1, e + 1) == P:get((h // rep) * Dh + e + 1, d + 1),
               ("%s(%d)[%d][%d][%d]"):format(name, l, h, d, e))
      end
    end
  end
end

local function check_transpose(W, P, what)
  t.deep_eq(W:shape(), {P:size(2), P:size(1)}, what .. " shape")
  for i = 1, P:size(1) do
    for j = 1, P:size(2) do assert(W:get(j, i) == P:get(i, j), what .. (" [%d][%d]"):format(j, i)) end
  end
end

local function same(a, b, what)
  t.deep_eq(a:shape(), b:shape(), what .. " shape")
  assert(max_abs(a - b) == 0, what .. ": values differ")
end

t.case("GPT-2-style shortcuts are TL's shapes of the [out, in] parameters", function()
  local m <close> = perturb(gpt2like())
  local c = m.config
  local H, Dh, D, M = c.n_head, c.d_head, c.d_model, c.d_mlp
  same(m.W_E, m:param("embed"), "W_E")
  same(m.W_pos, m:param("pos_embed"), "W_pos")
  check_transpose(m.W_U, m:param("unembed"), "W_U")
  for l = 0, c.n_layer - 1 do
    local pre = "blocks." .. l
    check_heads_in(m, "W_Q", "wq", l, H, 1)
    check_heads_in(m, "W_K", "wk", l, H, 1)
    check_heads_in(m, "W_V", "wv", l, H, 1)
    local WO, wo = m:W_O(l), m:param(pre .. ".attn.wo")
    t.deep_eq(WO:shape(), {H, Dh, D}, "W_O shape")
    for h = 0, H - 1 do
      for e = 0, Dh - 1 do
        for d = 0, D - 1 do assert(WO:get(h + 1, e + 1, d + 1) == wo:get(d + 1, h * Dh + e + 1), "W_O") end
      end
    end
    check_transpose(m:W_in(l), m:param(pre .. ".mlp.w1"), "W_in (GELU: w1)")
    check_transpose(m:W_out(l), m:param(pre .. ".mlp.w2"), "W_out")
    t.deep_eq(m:W_in(l):shape(), {D, M}, "W_in [d_model, d_mlp]")
    local bq = m:b_Q(l)
    t.deep_eq(bq:shape(), {H, Dh}, "b_Q shape")
    for h = 0, H - 1 do
      for e = 0, Dh - 1 do assert(bq:get(h + 1, e + 1) == m:param(pre .. ".attn.bq"):get(h * Dh + e + 1), "b_Q") end
    end
    same(m:b_O(l), m:param(pre .. ".attn.bo"), "b_O")
    same(m:b_in(l), m:param(pre .. ".mlp.b1"), "b_in")
    same(m:b_out(l), m:param(pre .. ".mlp.b2"), "b_out")
  end
  -- stacked: m:W_Q() is [n_layer, ...] of the per-layer copies
  local all = m:W_Q()
  t.deep_eq(all:shape(), {c.n_layer, H, D, Dh}, "stacked W_Q shape")
  same(all[2], m:W_Q(1), "stacked W_Q layer 1")
  same(m:b_V()[1], m:b_V(0), "stacked b_V layer 0")
end)

t.case("Llama-style shortcuts: GQA repeats W_K/W_V per query head, SwiGLU gate and up, tied W_U", function()
  local m <close> = llamalike()
  local c = m.config
  local H, K, Dh, D = c.n_head, c.n_kv_head, c.d_head, c.d_model
  check_heads_in(m, "W_Q", "wq", 1, H, 1)
  check_heads_in(m, "W_K", "wk", 1, H, H // K)
  check_heads_in(m, "W_V", "wv", 0, H, H // K)
  check_heads_in(m, "_W_K", "wk", 0, K, 1)
  check_heads_in(m, "_W_V", "wv", 1, K, 1)
  check_transpose(m.W_U, m:param("embed"), "tied W_U = W_E^T")
  check_transpose(m:W_gate(0), m:param("blocks.0.mlp.w1"), "W_gate (w1)")
  check_transpose(m:W_in(0), m:param("blocks.0.mlp.w3"), "W_in (SwiGLU: w3, the up projection)")
  check_transpose(m:W_out(1), m:param("blocks.1.mlp.w2"), "W_out")
  -- a copy: writing it leaves the model alone
  local q = m:W_Q(0)
  q:fill_(0)
  assert(max_abs(m:W_Q(0)) > 0, "W_Q is a copy")
end)

t.case("shortcuts the config lacks are errors naming it", function()
  local m <close> = llamalike()
  t.expect_error(function() return m.W_pos end, 'no learned positions (pos = "rope")', "W_pos")
  t.expect_error(function() return m.b_U end, "no unembedding bias", "b_U")
  t.expect_error(function() return m:b_Q(0) end, "qkv_bias = false", "b_Q")
  t.expect_error(function() return m:b_O(0) end, "linear_bias = false", "b_O")
  t.expect_error(function() return m:W_Q(2) end, "W_Q: argument #1 (layer) must be an integer in [0, 1], got 2", "layer 2")
  local g <close> = gpt2like()
  t.expect_error(function() return g:W_gate(0) end, 'has no gate (SwiGLU only)', "W_gate of GELU")
  local a <close> = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, vocab = 5, ctx = 4, mlp = "none"}
  t.expect_error(function() return a:W_in(0) end, 'no MLP (mlp = "none")', "W_in without MLP")
  t.expect_error(function() return a:set_weight("W_X", 0, {}) end, 'unknown weight "W_X"', "unknown name")
end)

t.case("set_weight: round trip, and the same logits as the edit made through m:param", function()
  for _, make in ipairs{gpt2like, llamalike} do
    local a <close> = perturb(make())
    seed = 777
    local b <close> = perturb(make()) -- the same model, built twice
    seed = 777
    perturb(a)
    local base = a:forward(toks)
    same(base, b:forward(toks), "two copies")
    -- writing every shortcut's own value back changes nothing
    for _, n in ipairs{"W_Q", "_W_K", "_W_V", "W_O", "W_in", "W_out"} do a:set_weight(n, 1, a[n](a, 1)) end
    a:set_weight("W_E", a.W_E)
    a:set_weight("W_U", a.W_U)
    a:set_weight("W_Q", a:W_Q())                        -- stacked
    same(a:forward(toks), base, "round trip")
    -- one element of W_Q (layer 1, head 2, d 3, e 1): wq row (2 Dh + 1), column 3 through m:param
    local W = a:W_Q(1)
    W:set(W:get(3, 4, 2) + 0.75, 3, 4, 2)
    a:set_weight("W_Q", 1, W)
    local Dh = a.config.d_head
    local wq = b:param("blocks.1.attn.wq")
    wq:set(wq:get(2 * Dh + 2, 4) + 0.75, 2 * Dh + 2, 4)
    local la, lb = a:forward(toks), b:forward(toks)
    same(la, lb, "set_weight vs m:param edit")
    assert(max_abs(la - base) > 1e-4, "the edit changed the logits")
    -- W_O and W_out likewise
    local O = a:W_O(0)
    O:set(O:get(2, 1, 5) - 0.5, 2, 1, 5)
    a:set_weight("W_O", 0, O)
    local wo = b:param("blocks.0.attn.wo")
    wo:set(wo:get(5, Dh + 1) - 0.5, 5, Dh + 1)
    same(a:forward(toks), b:forward(toks), "W_O edit")
  end
end)

t.case("set_weight refusals", function()
  local m <close> = llamalike()
  t.expect_error(function() m:set_weight("W_K", 0, m:W_K(0)) end, 'write the key/value heads with "_W_K"', "GQA W_K")
  t.expect_error(function() m:set_weight("W_Q", 0, m:W_O(0)) end, "W_Q must be [4, 16, 4] (TransformerLens's shape), got [4, 4, 16]",
                 "wrong shape")
  t.expect_error(function() m:set_weight("W_E", 0, m.W_E) end, 'W_E has no layers', "layer on W_E")
  local f <close> = mp.load(data .. "/ref_gqa_untied.bin")   -- llama2.c: memory-mapped read-only
  t.expect_error(function() f:set_weight("W_O", 0, f:W_O(0)) end, "read-only", "mapped weights")
end)

-- ---- weight processing ----

local ALL = {"fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases"}

-- Runs process_weights(opts) on a fresh model and compares outputs.
local function invariant(make, opts, what, logprobs)
  local m = perturb(make()) -- the caller closes it
  local before = m:forward(toks)
  local rec = m:process_weights(opts)
  local after = m:forward(toks)
  local r = logprobs and rel(log_softmax(before), log_softmax(after)) or rel(before, after)
  assert(r <= 1e-5, ("%s: outputs moved by %.3g relative (limit 1e-5)"):format(what, r))
  return m, rec, before, after
end

t.case("each step keeps the logits (log-probabilities for center_unembed): GPT-2 style", function()
  local m = invariant(gpt2like, {fold_ln = true, center_writing_weights = false, center_unembed = false,
                                 fold_value_biases = false}, "fold_ln")
  for _, name in ipairs(m:params()) do
    if name:match("ln.*weight") then assert(max_abs(m:param(name) - 1) == 0, name .. " is 1") end
    if name:match("ln[12]%.bias") then assert(max_abs(m:param(name)) == 0, name .. " is 0 (folded into biases)") end
  end
  m:close()
  m = invariant(gpt2like, {fold_ln = false, center_writing_weights = true, center_unembed = false,
                           fold_value_biases = false}, "center_writing_weights")
  assert(max_abs(m.W_E:mean(2)) < 1e-6 and max_abs(m.W_pos:mean(2)) < 1e-6, "W_E, W_pos rows centred")
  assert(max_abs(m:W_O(1):mean(3)) < 1e-6 and max_abs(m:W_out(0):mean(2)) < 1e-6, "W_O, W_out centred over d_model")
  assert(math.abs(m:b_O(0):mean()) < 1e-6 and math.abs(m:b_out(1):mean()) < 1e-6, "b_O, b_out centred")
  m:close()
  local before, after
  m, _, before, after = invariant(gpt2like, {fold_ln = false, center_writing_weights = false, center_unembed = true,
                                             fold_value_biases = false}, "center_unembed", true)
  assert(rel(before, after) > 1e-3, "center_unembed moved the logits (by a constant per position)")
  assert(max_abs(m.W_U:mean(2)) < 1e-6, "W_U centred over the vocabulary")
  m:close()
  m = invariant(gpt2like, {fold_ln = false, center_writing_weights = false, center_unembed = false,
                           fold_value_biases = true}, "fold_value_biases")
  assert(max_abs(m:b_V()) == 0, "b_V folded away")
  m:close()
  local rec
  m, rec = invariant(gpt2like, nil, "all four", true)
  t.deep_eq(rec.applied, ALL, "all four applied")
  m:close()
end)

t.case("Llama style (RMSNorm, GQA, tied): fold_ln unties, centring the writers is skipped", function()
  local m <close> = perturb(llamalike())
  local e = m:param("embed")
  local before = m:forward(toks)
  local rec = m:process_weights()
  t.near(rel(log_softmax(before), log_softmax(m:forward(toks))), 0, 1e-5, "log-probabilities")
  t.deep_eq(rec.applied, {"fold_ln", "center_unembed"}, "applied")
  assert(rec.skipped.center_writing_weights:find("RMSNorm", 1, true), "skip reason names RMSNorm")
  assert(rec.skipped.fold_value_biases:find("no value biases", 1, true), "nothing to fold")
  assert(m.config.tied == false, "untied")
  t.expect_error(function() return e:sum() end, "parameter memory was replaced", "a view of the old memory")
  for _, name in ipairs(m:params()) do
    if name:match("weight$") then assert(max_abs(m:param(name) - 1) == 0, name .. " is 1") end
  end
  -- a trained tied model: untying drops the optimizer state sized for the tied layout, so m:save works
  local tr <close> = llamalike()
  tr:train_step(mp.optim.adamw{lr = 1e-3}, toks, toks)
  assert(tr.optimizer, "an optimizer after training")
  tr:process_weights()
  assert(tr.optimizer == nil, "optimizer dropped on untying")
  local tmp = os.tmpname()
  tr:save(tmp .. ".h5")
  local back <close> = mp.load(tmp .. ".h5")
  same(back:forward(toks), tr:forward(toks), "processed model saved and reloaded")
  os.remove(tmp .. ".h5"); os.remove(tmp)
  -- fold_ln alone keeps the logits themselves
  invariant(llamalike, {center_unembed = false}, "fold_ln (RMSNorm)")
  t.expect_error(function() m:process_weights{center_writing_weights = true} end,
                 "process_weights: center_writing_weights: the model uses RMSNorm", "explicit on RMSNorm")
end)

t.case("LayerNorm without biases to fold into, and value biases without b_O", function()
  -- ln1/ln2/ln_final keep b / w as their bias: still exact
  local m = invariant(function() return gpt2like{linear_bias = false, qkv_bias = false, tied = true} end,
                      {center_unembed = false}, "fold_ln without consumer biases")
  assert(max_abs(m:param("blocks.0.ln1.weight") - 1) == 0 and max_abs(m:param("blocks.0.ln1.bias")) > 0,
         "weight 1, bias b / w kept")
  m:close()
  -- a zero weight under a nonzero bias cannot be folded: refused, the model unchanged
  local z <close> = perturb(gpt2like{linear_bias = false, qkv_bias = false})
  z:param("blocks.1.ln2.weight"):set(0, 3)
  local before = z:forward(toks)
  t.expect_error(function() z:process_weights() end, "blocks.1.ln2.weight[2] is 0 where its bias is not", "w = 0")
  same(z:forward(toks), before, "unchanged after the refusal")
  -- Qwen2 style: b_V but no b_O
  local q <close> = perturb(llamalike{qkv_bias = true})
  local rec = q:process_weights{center_unembed = false}
  assert(rec.skipped.fold_value_biases:find("no attention-output bias", 1, true), "skipped by default")
  t.expect_error(function() q:process_weights{fold_value_biases = true} end, "linear_bias = false", "explicit")
  t.expect_error(function() q:process_weights{fold_ln = 1} end, "must be a boolean", "option type")
  t.expect_error(function() q:process_weights{fold_LN = true} end, "unknown option 'fold_LN'", "option name")
end)

t.case("memory-mapped and quantized models", function()
  local f <close> = mp.load(data .. "/ref_gqa_untied.bin")
  local before = f:forward(toks)
  f:process_weights{center_unembed = false}
  local r = rel(before, f:forward(toks))
  assert(r <= 1e-5, ("mapped llama2.c model: %.3g"):format(r))
  -- mp.load's options do the same at load time
  local p <close> = mp.load(data .. "/ref_gqa_untied.bin", {fold_ln = true})
  same(p:forward(toks), f:forward(toks), "mp.load{fold_ln = true} = load, then process_weights")
  assert(max_abs(p:param("ln_final.weight") - 1) == 0, "folded at load")
  t.expect_error(function() mp.load(data .. "/ref_gqa_untied.bin", {center_writing_weights = true}) end,
                 "ref_gqa_untied.bin: process_weights: center_writing_weights: the model uses RMSNorm", "load option")
  local tmp = os.tmpname()
  local g <close> = mp.model.new{d_model = 32, n_layer = 1, n_head = 2, vocab = 40, ctx = 8, seed = 3}
  g:save(tmp .. ".q8.gguf", {type = "q8_0"})
  local q <close> = mp.load(tmp .. ".q8.gguf")
  t.expect_error(function() q:process_weights() end, "keeps quantized weights (Q8_0): call m:dequantize() first",
                 "quantized")
  t.expect_error(function() return q:W_Q(0) end, "quantized weights", "W_Q of a quantized model")
  os.remove(tmp .. ".q8.gguf"); os.remove(tmp)
end)

local fh = io.open(shared .. "/models/aidreams260K.bin", "rb")
if fh then
  fh:close()
  t.case("the shared llama2.c model", function()
    local m <close> = mp.load(shared .. "/models/aidreams260K.bin")
    local tk = {{1, 200, 37, 412, 9, 88, 301, 5}}
    local before = m:forward(tk)
    m:process_weights{center_unembed = false}
    local mid = m:forward(tk)
    local r = rel(before, mid)
    assert(r <= 1e-5, ("fold_ln on aidreams260K: %.3g relative"):format(r))
    m:process_weights()
    r = rel(log_softmax(before), log_softmax(m:forward(tk)))
    assert(r <= 1e-5, ("all steps on aidreams260K: log_softmax moved %.3g"):format(r))
  end)
else
  io.stderr:write("test_weights: " .. shared .. "/models absent: the shared-model case is skipped\n")
end

t.finish("test_weights")
