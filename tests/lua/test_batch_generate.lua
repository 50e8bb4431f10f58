-- test_batch_generate.lua — batched m:generate (issue #44): a list of prompts
-- of different lengths decodes in one batch (left padding, per-row positions,
-- a mask over the cached keys: runtime/sample.c, ragged.c) and row b's tokens
-- equal generating that prompt alone with the same seed, greedy and sampled
-- (top_p), for RoPE, learned positions, rope_id + GQA and a sliding window;
-- per-row seeds; the three prompt forms (token lists, tokens [B, T] +
-- attention_mask, texts) give the same rows; fwd_hooks fire on the batch and an
-- edit matches the same edit on each prompt alone; one prompt keeps its
-- return (text, tokens); bad calls are refused with a message. On the shared
-- aidreams260K model (skipped when absent): texts, and per-row stops at EOS
-- (the rows end at different lengths, each as its prompt alone).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local shared = os.getenv("MP_SHARED_DIR") or "../shared"

local V = 24
local prompts = {{3, 5, 7}, {1, 2, 3, 4, 5, 6, 7, 8}, {9}, {9, 8, 4, 2, 11}}

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local configs = {
  {name = "rope", cfg = {pos = "rope"}},
  {name = "learned", cfg = {pos = "learned", norm = "layer", mlp = "gelu"}},
  {name = "rope_id+gqa", cfg = {pos = "rope_id", n_head = 4, n_kv_head = 2}},
  {name = "window+local rope", cfg = {pos = "rope", sliding_window = 4, sliding_window_pattern = 2, rope_local_theta = 100}},
}
for _, c in ipairs(configs) do
  local spec = {d_model = 32, n_layer = 2, n_head = 2, d_mlp = 64, vocab = V, ctx = 64, seed = 3, init_std = 0.3}
  for k, v in pairs(c.cfg) do spec[k] = v end
  local ok, m = pcall(mp.model.new, spec)
  if not ok then error(c.name .. ": " .. tostring(m)) end
  for _, opts in ipairs{{temperature = 0}, {temperature = 1.0, top_p = 0.9, seed = 77}, {temperature = 1.5, top_p = 1}} do
    local what = ("%s T=%g"):format(c.name, opts.temperature)
    t.case(what .. ": each row as its prompt alone", function()
      local o = {max_new_tokens = 12}
      for k, v in pairs(opts) do o[k] = v end
      local texts, rows = m:generate(prompts, o)
      assert(texts == nil, "no tokenizer: no texts")
      assert(#rows == #prompts, "one row per prompt")
      for b, p in ipairs(prompts) do
        local _, one = m:generate(p, o)
        assert(same(rows[b], one), ("%s row %d differs from its prompt alone"):format(what, b))
        assert(#one == #p + 12, "max_new_tokens")
      end
    end)
  end
end

local m = mp.model.new{d_model = 32, n_layer = 2, n_head = 2, d_mlp = 64, vocab = V, ctx = 64, seed = 8, init_std = 0.3}

t.case("per-row seeds: row b as its prompt alone with seed[b]", function()
  local seeds = {5, 6, 7, 8}
  local _, rows = m:generate(prompts, {max_new_tokens = 10, temperature = 1, seed = seeds})
  for b, p in ipairs(prompts) do
    local _, one = m:generate(p, {max_new_tokens = 10, temperature = 1, seed = seeds[b]})
    assert(same(rows[b], one), "row " .. b)
  end
  local _, again = m:generate(prompts, {max_new_tokens = 10, temperature = 1, seed = seeds})
  for b = 1, #prompts do assert(same(rows[b], again[b]), "reproducible row " .. b) end
end)

t.case("tokens [B, T] + attention_mask (right or left padded, a Tensor too) give the same rows", function()
  local _, want = m:generate(prompts, {max_new_tokens = 6, temperature = 0})
  for _, left in ipairs{false, true} do
    local T = 8
    local toks, mask = {}, {}
    for b, p in ipairs(prompts) do
      toks[b], mask[b] = {}, {}
      local off = left and T - #p or 0
      for i = 1, T do toks[b][i], mask[b][i] = 0, 0 end
      for i = 1, #p do toks[b][off + i], mask[b][off + i] = p[i], 1 end
    end
    local _, rows = m:generate(toks, {max_new_tokens = 6, temperature = 0, attention_mask = mask})
    for b = 1, #prompts do assert(same(rows[b], want[b]), (left and "left" or "right") .. " row " .. b) end
    local _, rt = m:generate(mp.tensor(toks), {max_new_tokens = 6, temperature = 0, attention_mask = mask})
    for b = 1, #prompts do assert(same(rt[b], want[b]), "Tensor row " .. b) end
  end
end)

t.case("fwd_hooks fire on the batch; an edit gives each prompt's edited run", function()
  local calls, shape = 0, nil
  local function hook(a) calls = calls + 1; shape = shape or a:shape() end
  m:generate(prompts, {max_new_tokens = 5, temperature = 0, fwd_hooks = {{"blocks.0.hook_resid_post", hook}}})
  assert(calls == 5, "one call per forward (prefill + 4 steps), got " .. calls)
  assert(shape[1] == #prompts and shape[2] == 8, "the prefill's [B, P, D]")
  local edit = {{"blocks.1.mlp.hook_post", function(a) a:mul_(0.25) end}}
  local _, rows = m:generate(prompts, {max_new_tokens = 8, temperature = 0, fwd_hooks = edit})
  local _, plain = m:generate(prompts, {max_new_tokens = 8, temperature = 0})
  local differs = false
  for b, p in ipairs(prompts) do
    local _, one = m:generate(p, {max_new_tokens = 8, temperature = 0, fwd_hooks = edit})
    assert(same(rows[b], one), "edited row " .. b)
    differs = differs or not same(rows[b], plain[b])
  end
  assert(differs, "the edit changes some row")
end)

t.case("one prompt keeps its return; bad calls are refused", function()
  local text, toks = m:generate({3, 5, 7}, {max_new_tokens = 4, temperature = 0})
  assert(text == nil and type(toks) == "table" and type(toks[1]) == "number" and #toks == 7, "text, tokens")
  local _, one = m:generate({{3, 5, 7}}, {max_new_tokens = 4, temperature = 0})
  assert(same(one, toks), "[1, T] is one prompt")
  t.expect_error(function() m:generate(prompts, {on_token = function() end}) end, "on_token streams one prompt",
    "on_token")
  t.expect_error(function() m:generate(prompts, {seed = {1, 2}}) end, "2 seeds for 4 prompts", "seeds")
  t.expect_error(function() m:generate({{1, 2}, {3, 4, 99}}) end, "prompt[2][3] = 99 is outside the vocabulary",
    "bad id")
  t.expect_error(function() m:generate({{1, 2}, {3, 1.5, 2}}) end, "prompt[2][2] must be an integer", "bad value")
  t.expect_error(function() m:generate({{1, 2}, {}}) end, "prompt 2 is empty", "empty row")
end)

local path = shared .. "/models/aidreams260K.bin"
local f = io.open(path, "rb")
if f then
  f:close()
  local am = mp.load(path, {tokenizer = shared .. "/models/aidreams260K.tok512.bin"})
  local texts = {"Once upon a time", "The cat", "Lily and her mom went to the park and"}
  t.case("aidreams260K: texts; per-row stops at EOS", function()
    for _, temp in ipairs{0, 0.8} do
      local out, rows = am:generate(texts, {max_new_tokens = 200, temperature = temp, seed = 11})
      local lens = {}
      for b, p in ipairs(texts) do
        local text1, one = am:generate(p, {max_new_tokens = 200, temperature = temp, seed = 11})
        assert(same(rows[b], one), ("T=%g row %d"):format(temp, b))
        assert(out[b] == text1, "text of row " .. b)
        lens[#one] = true
      end
      local n = 0
      for _ in pairs(lens) do n = n + 1 end
      assert(n > 1, "the rows stop at different lengths")
    end
  end)
else
  print("aidreams260K absent: its case skipped")
end

t.finish("test_batch_generate")
