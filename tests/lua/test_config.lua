-- test_config.lua — every field of the model config table (MP_CONFIG_TABLE,
-- seen through mp.model.config_fields) round-trips through every path with
-- non-default values: mp.model.new's options -> m.config; checkpoint /config
-- (save, then load -> m.config); run file /model (m:capture and
-- m:capture_prompts). The fields are iterated from the table, never listed
-- here: a field added to the table fails this test until a sample below gives
-- it a non-default value, and fails it if any path leaves it out.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local fields = mp.model.config_fields()
local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)

-- Samples: valid configs that together give every field a non-default value.
local samples = {
  { -- LayerNorm, gelu_tanh, half_rope with 4 rotated channels, YaRN, entmax, biases
    d_model = 16, n_layer = 1, n_head = 2, n_kv_head = 1, d_head = 8, d_mlp = 24, vocab = 260, ctx = 12,
    tied = false, rope_theta = 5e5, norm_eps = 1e-6, norm = "layer", mlp = "gelu_tanh", pos = "half_rope",
    rope_dims = 4, qkv_bias = true, linear_bias = true, rope_scale = 2, rope_scaling = "yarn",
    rope_factor = 4, rope_orig_ctx = 8, yarn_beta_fast = 16, yarn_beta_slow = 2, attn = "entmax",
    alpha = 1.75, tokenizer = "bytes", parallel_attn = true,
  },
  { -- rope_id (4 of 8 channels rotate) without its temperature; Shaw relative values
    d_model = 24, n_layer = 2, n_head = 2, vocab = 40, ctx = 10, pos = "rope_id", rope_dims = 4,
    pos_temp = false, attn = "ssmax", qk_norm = "head", rel_values = 3,
  },
  { -- RoPE with per-frequency divisors (Llama 3 style); a Gemma-2-style sliding window
    d_model = 16, n_layer = 1, n_head = 2, vocab = 40, ctx = 10, rope_freqs = {1, 2, 4, 8}, mlp = "gelu",
    gelu_tanh = true, sliding_window = 3, sliding_window_pattern = 2, qk_norm = "full",
  },
  { -- Gemma 2: (1 + w) norms, scaled embedding, GeGLU, post-norms, soft caps, query scale
    d_model = 16, n_layer = 1, n_head = 2, d_head = 12, vocab = 40, ctx = 10, mlp = "swiglu", gelu_tanh = true,
    norm_offset = true, embed_scale = true, post_norms = true, attn_softcap = 5, final_softcap = 3,
    query_pre_attn_scalar = 20,
  },
  { -- OLMo 2: no pre-norms, post-norms, the q/k norm over the whole projections
    d_model = 16, n_layer = 1, n_head = 2, n_kv_head = 1, vocab = 40, ctx = 10, pre_norms = false,
    post_norms = true, qk_norm = "full",
  },
  { -- Gemma 3: q/k norm, a windowed layer rotating with its own base, linear scaling on the global one
    d_model = 16, n_layer = 2, n_head = 2, d_head = 8, vocab = 40, ctx = 10, mlp = "swiglu", gelu_tanh = true,
    norm_offset = true, embed_scale = true, post_norms = true, qk_norm = "head", sliding_window = 3,
    sliding_window_pattern = 2, rope_theta = 1e6, rope_scale = 8, rope_local_theta = 100,
  },
}
local plain = {d_model = 8, n_layer = 1, n_head = 1, vocab = 11, ctx = 4}

local function same(a, b)
  if type(a) == "number" and type(b) == "number" then
    return a == b or math.abs(a - b) <= 1e-6 * math.max(math.abs(a), math.abs(b))
  end
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false end
    for i = 1, #a do if not same(a[i], b[i]) then return false end end
    return true
  end
  return a == b
end
local function show(v)
  if type(v) == "table" then
    local s = {}
    for i = 1, #v do s[i] = tostring(v[i]) end
    return "{" .. table.concat(s, ", ") .. "}"
  end
  return tostring(v)
end

local function attrs_of(path, group)
  local f <close> = mp.h5.open(path)
  return f:attrs(group)
end

t.case("the table", function()
  t.ok(#fields >= 28, "config_fields lists the table (" .. #fields .. " fields)")
  local seen = {}
  for _, f in ipairs(fields) do
    t.ok(type(f.key) == "string" and type(f.attr) == "string" and not seen[f.key], "field " .. tostring(f.key))
    seen[f.key] = true
    if f.type == "kind" then t.ok(#f.names >= 2, f.key .. ": kind names") end
  end
end)

-- the default config's /config, for "non-default"
local m0 = mp.model.new(plain)
m0:save(dir .. "/plain.h5")
local plain_cfg = attrs_of(dir .. "/plain.h5", "config")
local covered_opt, covered_cfg, covered_model, covered_lua = {}, {}, {}, {}

for si, s in ipairs(samples) do
  t.case("sample " .. si, function()
    local m = mp.model.new(s)
    local c = m.config
    -- mp.model.new -> m.config: every option given comes back under its key
    for _, f in ipairs(fields) do
      if s[f.key] ~= nil then
        covered_opt[f.key] = true
        local want = s[f.key]
        if f.key == "mlp" and want == "gelu" and s.gelu_tanh then want = "gelu_tanh" end -- the label
        t.ok(same(c[f.key], want), ("%s: m.config.%s = %s, option %s"):format(si, f.key, show(c[f.key]), show(want)))
      end
      if c[f.key] ~= nil then covered_lua[f.key] = true end
    end
    -- checkpoint: /config carries the field, and loading gives the same m.config
    local ck = dir .. "/s" .. si .. ".h5"
    m:save(ck)
    local cfg = attrs_of(ck, "config")
    local m2 = mp.load(ck)
    for _, f in ipairs(fields) do
      t.ok(same(m2.config[f.key], c[f.key]),
        ("%s: %s after save/load: %s, before %s"):format(si, f.key, show(m2.config[f.key]), show(c[f.key])))
      if cfg[f.attr] ~= nil and not same(cfg[f.attr], plain_cfg[f.attr]) then covered_cfg[f.key] = true end
    end
    t.ok(cfg.tokenizer == s.tokenizer, si .. ": /config tokenizer")
    t.ok(m2.config.tokenizer == s.tokenizer, si .. ": tokenizer after save/load")
    -- run files: /model carries what /config does (mlp under its label), from both writers
    local run, runp = dir .. "/r" .. si .. ".h5", dir .. "/p" .. si .. ".h5"
    m:capture({{1, 2, 3}}, {out = run})
    m:capture_prompts({{1, 2, 3}}, {out = runp})
    local model, modelp = attrs_of(run, "model"), attrs_of(runp, "model")
    for _, f in ipairs(fields) do
      local want = cfg[f.attr]
      if f.key == "mlp" then want = c.mlp end
      t.ok(same(model[f.attr], want), ("%s: /model %s = %s, /config %s"):format(si, f.attr, show(model[f.attr]), show(want)))
      t.ok(same(modelp[f.attr], want), ("%s: capture_prompts /model %s"):format(si, f.attr))
      if model[f.attr] ~= nil and not same(model[f.attr], plain_cfg[f.attr]) then covered_model[f.key] = true end
    end
    t.ok(model.tokenizer == s.tokenizer and modelp.tokenizer == s.tokenizer, si .. ": /model tokenizer")
    t.ok(model.source == modelp.source, si .. ": /model source")
  end)
end

t.case("every field on every path with a non-default value", function()
  for _, f in ipairs(fields) do
    t.ok(covered_opt[f.key], f.key .. ": no sample passes it to mp.model.new (add one to the samples)")
    t.ok(covered_lua[f.key], f.key .. ": m.config never shows it")
    t.ok(covered_cfg[f.key], f.key .. ": no sample writes a non-default /config attribute '" .. f.attr .. "'")
    t.ok(covered_model[f.key], f.key .. ": no sample writes a non-default /model attribute '" .. f.attr .. "'")
  end
end)

-- the measured drift of issue 13: a gelu_tanh, rope_id (rope_dims 4), qkv_bias model
t.case("/model of a gelu_tanh rope_id qkv_bias model", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 260, ctx = 8, mlp = "gelu_tanh",
                         pos = "rope_id", rope_dims = 4, qkv_bias = true, tokenizer = "bytes"}
  m:capture({{1, 2}}, {out = dir .. "/drift.h5"})
  local a = attrs_of(dir .. "/drift.h5", "model")
  t.ok(a.mlp == "gelu_tanh" and a.gelu_tanh == 1 and a.rope_dims == 4 and a.qkv_bias == 1 and a.pos == "rope_id"
       and a.tokenizer == "bytes", "mlp, gelu_tanh, rope_dims, qkv_bias, tokenizer")
end)

-- fields that do not apply are refused (files would drop them), except the
-- values in force that m.config shows; what m.config shows is what loads back
t.case("fields that do not apply", function()
  local function with(extra)
    local o = {}
    for k, v in pairs(plain) do o[k] = v end
    for k, v in pairs(extra) do o[k] = v end
    return o
  end
  local refused = {
    {{rope_orig_ctx = 3}, "rope_orig_ctx (3) applies to RoPE scaling only (rope_scaling none)"},
    {{yarn_beta_fast = 3}, "yarn_beta_fast (3) applies to RoPE scaling only (rope_scaling none)"},
    {{yarn_beta_slow = 0.5}, "yarn_beta_slow (0.5) applies to RoPE scaling only (rope_scaling none)"},
    {{rope_factor = 3}, "rope_factor (3) applies to RoPE scaling only (rope_scaling none)"},
    {{mlp = "gelu_tanh", gelu_tanh = false}, 'mlp = "gelu_tanh" contradicts gelu_tanh = false'},
    {{mlp = "none", gelu_tanh = true}, "gelu_tanh applies to mlp gelu and swiglu (GeGLU) only (mlp none)"},
    {{norm = "layer", post_norms = true}, "post_norms applies to norm rms only (norm layer)"},
    {{attn_softcap = -1}, "attn_softcap (-1) and final_softcap (0) must be non-negative and finite"},
    {{attn = "ssmax", attn_softcap = 5}, "attn_softcap applies to softmax attention only (attn ssmax)"},
    {{query_pre_attn_scalar = -2}, "query_pre_attn_scalar (-2) must be non-negative and finite (0: d_head)"},
    {{pos = "rope", pos_temp = false}, "pos_temp = false applies to pos rope_id only (pos rope)"},
    {{pre_norms = false}, "pre_norms = false (a block without ln1 / ln2, OLMo 2) needs post_norms"},
    {{pre_norms = false, post_norms = true, parallel_attn = true},
     "pre_norms = false (OLMo 2's block) is not supported with parallel_attn"},
    {{rope_local_theta = 100}, "rope_local_theta (the windowed layers' RoPE base) needs pos rope (pos rope), a sliding_window (0)"},
    {{rel_values = 4097}, "rel_values (4097) must be in 0..4096"},
  }
  for _, r in ipairs(refused) do
    local ok, err = pcall(mp.model.new, with(r[1]))
    t.ok(not ok and tostring(err):find("mp.model.new: ", 1, true) and tostring(err):find(r[2], 1, true),
         ("refused with %q: got %s"):format(r[2], ok and "a model" or tostring(err)))
  end
  -- the values m.config shows without scaling are accepted, and survive save/load
  local m = mp.model.new(with{rope_factor = 1, rope_orig_ctx = plain.ctx, yarn_beta_fast = 32, yarn_beta_slow = 1,
                              gelu_tanh = false, mlp = "gelu"})
  m:save(dir .. "/defaults.h5")
  local m2 = mp.load(dir .. "/defaults.h5")
  for _, f in ipairs(fields) do
    t.ok(same(m2.config[f.key], m.config[f.key]),
      ("defaults: %s after save/load %s, before %s"):format(f.key, show(m2.config[f.key]), show(m.config[f.key])))
  end
  -- set_pos away from rope clears the scaling fields (none would refuse them)
  local y = mp.model.new(with{rope_scaling = "yarn", rope_factor = 2, rope_orig_ctx = 2, yarn_beta_fast = 8})
  y:set_pos("none")
  t.ok(y.config.rope_scaling == "none" and y.config.rope_orig_ctx == plain.ctx and y.config.yarn_beta_fast == 32,
       "set_pos none after yarn")
  y:save(dir .. "/y.h5")
  t.ok(mp.load(dir .. "/y.h5").config.pos == "none", "and it saves and loads")
end)

os.execute("rm -rf '" .. dir .. "'")
t.finish("test_config")
