-- test_save_format.lua — m:save with an explicit format writes that format
-- whatever the path ends in (io/model_io.c decides): before, format = "h5" on a
-- ".bin" path wrote a llama2.c file and format = "llama2c" on a ".h5" path a
-- checkpoint. The file's first bytes say what was written.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local dir = os.tmpname()
os.remove(dir)
mp.mkdir(dir)
local function head(path, n)
  local f = assert(io.open(path, "rb"))
  local s = f:read(n)
  f:close()
  return s
end
local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 32, ctx = 16, seed = 2}
m:save(dir .. "/ckpt.bin", {format = "h5"})
t.ok(head(dir .. "/ckpt.bin", 4) == "\137HDF", "format h5 on a .bin path writes HDF5")
m:save(dir .. "/model.h5", {format = "llama2c"})
t.ok(head(dir .. "/model.h5", 4) ~= "\137HDF", "format llama2c on a .h5 path writes llama2.c")
local r = mp.load(dir .. "/model.h5")
t.ok(r.config.format == "llama2c-v0" or tostring(r):find("llama2c", 1, true), "it loads as llama2.c: " .. tostring(r))
m:save(dir .. "/g.h5", {format = "gguf"})
t.ok(head(dir .. "/g.h5", 4) == "GGUF", "format gguf on a .h5 path writes GGUF")
-- without a format the path decides, as before
m:save(dir .. "/plain.h5")
t.ok(head(dir .. "/plain.h5", 4) == "\137HDF", ".h5 path: checkpoint")
-- an HF folder gets the model's tokenizer, so that it reloads with it: a
-- tokenizer.json is copied as tokenizer.json, a llama2.c tokenizer.bin as
-- tokenizer.bin; the reloaded folder tokenizes as the original did
local data = os.getenv("MP_TESTDATA") or "tests/data"
local text = "Hello world, tokenizers 123!"
local big = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, d_mlp = 8, vocab = 128256, ctx = 16, seed = 2}
big:save(dir .. "/big.h5")
big:close()
local withjson = mp.load(dir .. "/big.h5", {tokenizer = data .. "/bpe_llama3_tokenizer.json"})
withjson:save(dir .. "/hf_json", {format = "hf"})
t.ok(head(dir .. "/hf_json/tokenizer.json", 1) == "{", "HF folder: tokenizer.json written")
local back = mp.load(dir .. "/hf_json")
local a, b = withjson:to_tokens(text), back:to_tokens(text)
t.ok(#a > 3 and #a == #b, ("HF folder reloads its tokenizer.json (%d vs %d ids)"):format(#a, #b))
local same = true
for i = 1, #a do same = same and a[i] == b[i] end
t.ok(same, "same ids after the HF round trip (tokenizer.json)")
local shared = os.getenv("MP_SHARED_DIR")
local bin = shared and (shared .. "/models/aidreams260K.bin")
if bin and io.open(bin, "rb") then
  local m2 = mp.load(bin)
  m2:save(dir .. "/hf_bin", {format = "hf"})
  t.ok(io.open(dir .. "/hf_bin/tokenizer.bin", "rb") ~= nil, "HF folder: tokenizer.bin written")
  local r2 = mp.load(dir .. "/hf_bin")
  local x, y = m2:to_tokens("Once upon a time"), r2:to_tokens("Once upon a time")
  local ok = #x == #y and #x > 3
  for i = 1, #x do ok = ok and x[i] == y[i] end
  t.ok(ok, "same ids after the HF round trip (tokenizer.bin)")
end
os.execute("rm -rf '" .. dir .. "/hf_json' '" .. dir .. "/hf_bin'")
for _, f in ipairs{"ckpt.bin", "model.h5", "g.h5", "plain.h5", "big.h5"} do os.remove(dir .. "/" .. f) end
os.remove(dir)
t.finish("test_save_format")
