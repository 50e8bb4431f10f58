-- test_models.lua — real-model formats through the Lua API: mp.load detects
-- the format by content (GGUF, Hugging Face folder, checkpoint, llama2.c),
-- Qwen2 / GPT-2 golden activations via run_with_cache, m:save to GGUF
-- (f32 / f16 / q8_0) and to a Hugging Face folder, tokenizers travelling with
-- the model (a "bytes" model's byte vocabulary; aidreams260K's SentencePiece
-- vocabulary exported from tokenizer.bin to GGUF when ../shared is present),
-- and clear errors for malformed inputs.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check = t.ok
local data = os.getenv("MP_TESTDATA") or "tests/data"
local shared = os.getenv("MP_SHARED_DIR") or "../shared"
local tmp = os.tmpname()
os.remove(tmp)
local function maxdiff(a, b)
  local d = a:sub(b)
  return math.max(math.abs(d:max()), math.abs(d:min()))
end

-- golden: every hook of the PyTorch reference, from HF folders and GGUF files
for _, case in ipairs({{"arch_qwen2", "hf-qwen2"}, {"arch_qwen2.gguf", "gguf-qwen2"},
                       {"arch_gpt2", "hf-gpt2"}, {"arch_gpt2.gguf", "gguf-gpt2"}}) do
  local m = mp.load(data .. "/" .. case[1])
  check(m.config.format == case[2], case[1] .. ": format " .. tostring(m.config.format))
  local g <close> = mp.h5.open(data .. "/" .. case[1]:gsub("%.gguf$", "") .. ".h5")
  local logits, cache = m:run_with_cache(g:read_int("tokens"))
  local worst = maxdiff(logits, g:read("logits"))
  for _, name in ipairs(g:list("acts")) do
    local got = cache[name]
    check(got ~= nil, case[1] .. ": hook " .. name)
    if got then worst = math.max(worst, maxdiff(got, g:read("acts/" .. name))) end
  end
  check(worst < 1e-4, ("%s: worst |diff| %.3g"):format(case[1], worst))
  check(m.config.memory == m.config.n_params * 4, case[1] .. ": config.memory")
end
local gpt2 = mp.load(data .. "/arch_gpt2")
check(gpt2.config.pos == "learned" and gpt2.config.mlp == "gelu_tanh" and gpt2.config.linear_bias, "gpt2 config")
local qwen = mp.load(data .. "/arch_qwen2.gguf")
check(qwen.config.qkv_bias and not qwen.config.linear_bias and qwen.config.rope_theta == 1e6, "qwen2 config")

-- m:save round trips: GGUF and HF folders
local toks = {3, 1, 4, 1, 5, 9, 2, 6}
for _, m in ipairs({gpt2, qwen}) do
  local ref = m:forward(toks)
  for _, ty in ipairs({"f32", "f16", "q8_0"}) do
    m:save(tmp .. ".gguf", {type = ty})
    local r = mp.load(tmp .. ".gguf")
    local d = maxdiff(r:forward(toks), ref)
    check(ty == "f32" and d == 0 or ty ~= "f32" and d < 0.5, ("%s -> %s GGUF: |diff| %.3g"):format(m.config.format, ty, d))
    os.remove(tmp .. ".gguf")
  end
  m:save(tmp .. "_hf", {format = "hf"})
  local r = mp.load(tmp .. "_hf")
  check(maxdiff(r:forward(toks), ref) == 0, m.config.format .. " -> HF folder exact")
  os.remove(tmp .. "_hf/model.safetensors"); os.remove(tmp .. "_hf/config.json"); os.remove(tmp .. "_hf")
end

-- a byte-level model keeps its tokenizer through GGUF
local b = mp.model.new{d_model = 32, n_layer = 1, n_head = 2, vocab = 260, ctx = 32, tokenizer = "bytes", seed = 3}
b:save(tmp .. "_b.gguf")
local b2 = mp.load(tmp .. "_b.gguf")
check(b2.has_tokenizer, "bytes model: GGUF carries a tokenizer")
local ids = b2:to_tokens("héllo\n")
local want = b:to_tokens("héllo\n")
check(#ids == #want and ids[1] == 256, "bytes vocabulary: BOS 256 then bytes (" .. #ids .. " tokens)")
local same = true
for i = 1, #want do same = same and ids[i] == want[i] end
check(same, "bytes vocabulary: same ids as the bytes hint")
check(b2:to_string(ids) == "héllo\n", "bytes vocabulary: decode")
check(maxdiff(b2:forward(ids), b:forward(ids)) == 0, "bytes model: logits survive GGUF")
os.remove(tmp .. "_b.gguf")

-- aidreams260K (../shared): tokenizer.bin -> GGUF "llama" vocabulary, same ids and text
local f = io.open(shared .. "/models/aidreams260K.bin", "rb")
if f then
  f:close()
  local m = mp.load(shared .. "/models/aidreams260K.bin")
  m:save(tmp .. "_a.gguf", {type = "f16"})
  local r = mp.load(tmp .. "_a.gguf")
  check(r.has_tokenizer and r.tokenizer == tmp .. "_a.gguf", "aidreams260K GGUF: own tokenizer")
  for _, text in ipairs({"Once upon a time, Lily met a cat.", "  two  spaces\nand é"}) do
    local a, c = m:to_tokens(text), r:to_tokens(text)
    local eq = #a == #c
    for i = 1, #a do eq = eq and a[i] == c[i] end
    check(eq, "aidreams260K GGUF tokenizer ids: " .. text)
    check(r:to_string(c) == m:to_string(a), "aidreams260K GGUF decode: " .. text)
  end
  local pieces = r:to_str_tokens("Once upon")
  check(#pieces >= 2, "to_str_tokens through mp_tok")
  local text = r:generate("Once upon a time", {max_new_tokens = 8, temperature = 0})
  check(type(text) == "string" and text:find("^Once upon a time"), "generate with the GGUF tokenizer")
  os.remove(tmp .. "_a.gguf")
else
  print("aidreams260K checks skipped: " .. shared .. " is absent")
end

-- malformed inputs: clear errors
local function err_of(fn, ...)
  local ok, e = pcall(fn, ...)
  return not ok and tostring(e) or nil
end
os.execute("mkdir -p " .. tmp .. "_bad")
local e = err_of(mp.load, tmp .. "_bad")
check(e and e:find("without config.json", 1, true), "folder without config.json: " .. tostring(e))
local cf = io.open(tmp .. "_bad/config.json", "w"); cf:write('{"model_type": "mamba"}'); cf:close()
e = err_of(mp.load, tmp .. "_bad")
check(e and e:find('unknown model_type "mamba"', 1, true), "unknown model_type: " .. tostring(e))
os.remove(tmp .. "_bad/config.json"); os.remove(tmp .. "_bad")
e = err_of(function() qwen:save(tmp .. ".gguf", {type = "q4_0"}) end)
check(e and e:find("type must be", 1, true), "bad export type: " .. tostring(e))
local nope = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 20, ctx = 8, pos = "none"}
e = err_of(function() nope:save(tmp .. ".gguf") end)
check(e and e:find("no architecture", 1, true), "NoPE model export: " .. tostring(e))

t.finish("test_models")
