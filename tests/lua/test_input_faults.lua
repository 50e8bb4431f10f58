-- test_input_faults.lua — bad inputs through the real CLI (issue 17, items 8
-- and 11): token ids on the command line, inconsistent or foreign model files
-- (made here), a model that does not fit group_arith. Each case must exit
-- non-zero (not by a signal), print "mechprobe..." with the expected words and
-- no Lua traceback (input errors are not script errors), and write nothing.
local exe = arg[-1]
local data = os.getenv("MP_TESTDATA") or "tests/data"
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local dir = os.tmpname()
os.remove(dir)
mp.mkdir(dir)

local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function spit(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
-- under ASan a failed huge allocation must return NULL, as malloc does
local asan = os.getenv("ASAN_OPTIONS")
local env = asan and ("ASAN_OPTIONS=" .. q(asan .. ":allocator_may_return_null=1") .. " ") or ""

local function run(args)
  local errf = dir .. "/stderr.txt"
  local ok, how, code = os.execute(env .. exe .. " " .. args .. " >/dev/null 2>" .. errf)
  return ok, how, code, slurp(errf)
end

local function expect_fail(label, args, words)
  local out = dir .. "/o.h5"
  os.remove(out)
  local ok, how, code, err = run(args)
  -- ASan's note on a refused huge allocation (the loader then reports it) is not a fault
  err = err:gsub("==%d+==WARNING: AddressSanitizer failed to allocate[^\n]*\n", "")
  local bad = {}
  if ok or how ~= "exit" or code >= 126 then bad[#bad + 1] = ("exit %s %s"):format(how, tostring(code)) end
  for _, w in ipairs(type(words) == "table" and words or {words}) do
    if not err:find(w, 1, true) then bad[#bad + 1] = ("stderr lacks '%s'"):format(w) end
  end
  if err:find("stack traceback", 1, true) then bad[#bad + 1] = "a Lua traceback for an input error" end
  if not err:find("^mechprobe") then bad[#bad + 1] = "the message does not start with 'mechprobe'" end
  if err:find("AddressSanitizer") or err:find("runtime error:") then bad[#bad + 1] = "sanitizer report" end
  if io.open(out) then bad[#bad + 1] = "output written" end
  t.ok(#bad == 0, ("%s: %s\n  stderr: %s"):format(label, table.concat(bad, "; "), err))
end

local good = data .. "/ref_tied.bin" -- vocab 40
local function capture(model, tokens) return ("capture --model %s --tokens %s --out %s/o.h5"):format(q(model), tokens, dir) end

-- item 8: token ids on the command line
expect_fail("--tokens 2^32+1", capture(good, "1,4294967297"),
  {"--tokens: item 2, 4294967297, is outside the vocabulary (0..39; the model", "has 40 tokens"})
expect_fail("--tokens -1", capture(good, "1,-1"), "item 2, -1, is outside the vocabulary")
expect_fail("--tokens 40", capture(good, "40"), "item 1, 40, is outside the vocabulary (0..39")
expect_fail("--tokens 1.7", capture(good, "1.7"), "--tokens: '1.7' is not an integer")
expect_fail("--tokens 1e10", capture(good, "1e10"), "--tokens: '1e10' is not an integer")
expect_fail("--tokens nan", capture(good, "nan"), "--tokens: 'nan' is not an integer")

-- item 11: foreign and inconsistent model files
local m = mp.model.new{d_model = 8, n_layer = 1, n_head = 1, vocab = 257, ctx = 8, seed = 1}
m:save(dir .. "/v.gguf")
m:save(dir .. "/hf", {format = "hf"})
m:close()

-- GGUF: llama.vocab_size (u32 after its key and type) says 300, the embedding has 257 rows
local g = slurp(dir .. "/v.gguf")
local key = "llama.vocab_size"
local at = assert(g:find(key, 1, true)) + #key
assert(string.unpack("<I4I4", g, at) == 4, "vocab_size is a u32")
local _, v = string.unpack("<I4I4", g, at)
assert(v == 257)
spit(dir .. "/bad_vocab.gguf", g:sub(1, at + 3) .. string.pack("<I4", 300) .. g:sub(at + 8))
expect_fail("GGUF vocab_size vs embedding", capture(dir .. "/bad_vocab.gguf", "1"),
  {"bad_vocab.gguf: metadata llama.vocab_size = 300 but token_embd.weight has 257 rows"})
t.ok(pcall(mp.load, dir .. "/v.gguf"), "the unpatched GGUF loads")

-- HF: "rope_scaling": "linear" (a string) instead of an object
local cfg = slurp(dir .. "/hf/config.json")
mp.mkdir(dir .. "/hf_str")
spit(dir .. "/hf_str/model.safetensors", slurp(dir .. "/hf/model.safetensors"))
spit(dir .. "/hf_str/config.json", (cfg:gsub("^{", '{\n  "rope_scaling": "linear",')))
expect_fail("rope_scaling as a string", capture(dir .. "/hf_str", "1"),
  {"hf_str/config.json: rope_scaling must be null or an object such as {\"type\": \"linear\", \"factor\": 2.0} (got a string)"})
spit(dir .. "/hf_str/config.json", (cfg:gsub("^{", '{\n  "rope_scaling": {"type": 2, "factor": 2.0},')))
expect_fail("rope_scaling type a number", capture(dir .. "/hf_str", "1"),
  "rope_scaling.type must be a string such as \"linear\" (got a number)")
spit(dir .. "/hf_str/config.json", (cfg:gsub("^{", '{\n  "rope_scaling": {"type": "linear", "factor": 2.0},')))
local ok, hm = pcall(mp.load, dir .. "/hf_str")
t.ok(ok and hm.config.rope_scale == 2, "the object form is read (rope_scale 2)")

-- HF: sizes whose parameters cannot be allocated: the error names the folder
mp.mkdir(dir .. "/hf_huge")
spit(dir .. "/hf_huge/model.safetensors", slurp(dir .. "/hf/model.safetensors"))
spit(dir .. "/hf_huge/config.json", (cfg:gsub('"hidden_size": 8', '"hidden_size": 65536')
  :gsub('"num_hidden_layers": 1', '"num_hidden_layers": 512'):gsub('"head_dim": 8', '"head_dim": 65536')
  :gsub('"intermediate_size": 32', '"intermediate_size": 262144')))
expect_fail("parameters beyond memory", capture(dir .. "/hf_huge", "1"), {"hf_huge", "out of memory"})

-- not model files
spit(dir .. "/notes.txt", "These are my notes about the model.\nNothing else.\n")
expect_fail("a text file", capture(dir .. "/notes.txt", "1"),
  {"notes.txt: not a model file: not HDF5, GGUF, safetensors or llama2.c (it is text, starting \"These are my notes"})
expect_fail("a safetensors file instead of its folder", capture(dir .. "/hf/model.safetensors", "1"),
  {"model.safetensors: not a model file", "a safetensors file: pass the folder"})
expect_fail("a missing file", capture(dir .. "/nope.bin", "1"), "nope.bin: cannot open")

-- group_arith --model on a model that is not an algebra-task model
expect_fail("group_arith on an unrelated model", ("group_arith --quick --model %s --out %s/ga"):format(good, dir),
  {"mechprobe group_arith: --model", "ref_tied.bin has a vocabulary of 40 tokens; the algebra task's models have 19"})
t.ok(io.open(dir .. "/ga") == nil, "group_arith made no output folder for a refused model")

-- a real script error keeps its traceback; an input error raised in a script has none
spit(dir .. "/script.lua", "local x = nil\nreturn x.field\n")
local _, _, _, err = run(q(dir .. "/script.lua"))
t.ok(err:find("stack traceback", 1, true) ~= nil, "a script error keeps its traceback:\n" .. err)
spit(dir .. "/load.lua", ("mp.load(%q)\n"):format(dir .. "/notes.txt"))
expect_fail("input error in a user script", q(dir .. "/load.lua"), {"load.lua:1: ", "notes.txt: not a model file"})
local _, _, _, err2 = run(("-e %s"):format(q(("local ok, e = pcall(mp.load, %q); error('rethrown: ' .. e)"):format(dir .. "/notes.txt"))))
t.ok(err2:find("stack traceback", 1, true) ~= nil, "an error the script made from one keeps the traceback:\n" .. err2)

os.execute("rm -rf " .. q(dir))
t.finish("test_input_faults")
