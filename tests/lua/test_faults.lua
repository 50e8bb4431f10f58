-- test_faults.lua — bad input through the real CLI: every case must exit
-- non-zero (not by a signal), print an error naming the file or argument, and
-- leave no output file (not even a temporary one). Bad model files are made
-- here with string.pack from the committed reference model.
local exe = arg[-1]
local data = os.getenv("MP_TESTDATA") or "tests/data"
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function spit(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function run(args)
  local errf = dir .. "/stderr.txt"
  local ok, how, code = os.execute(exe .. " " .. args .. " >/dev/null 2>" .. errf)
  return ok, how, code, slurp(errf)
end

local function no_output(out)
  local p = io.popen("ls " .. dir .. " | grep -c '" .. out .. "' || true")
  local n = tonumber(p:read("a")) ; p:close()
  return n == 0
end

local function expect_fail(label, args, must_contain, out)
  local ok, how, code, err = run(args)
  local good = not ok and how == "exit" and code >= 1 and code < 126
  local msg = ""
  if not good then msg = ("exit %s %s"):format(how, tostring(code)) end
  for _, s in ipairs(type(must_contain) == "table" and must_contain or {must_contain}) do
    if not err:find(s, 1, true) then good = false; msg = msg .. (" stderr lacks '%s'"):format(s) end
  end
  if err:find("AddressSanitizer") or err:find("runtime error:") then good = false; msg = msg .. " sanitizer report" end
  if out and not no_output(out) then good = false; msg = msg .. " output file left behind" end
  t.ok(good, ("%s: %s\n  stderr: %s"):format(label, msg, err))
end

local good_model = data .. "/ref_tied.bin"
local raw = slurp(good_model)
local function header(dim, hid, nl, nh, nkv, vocab, seq)
  return string.pack("<i4i4i4i4i4i4i4", dim, hid, nl, nh, nkv, vocab, seq)
end
local body = raw:sub(29)
local cases = {
  {"truncated", raw:sub(1, #raw - 1), "truncated"},
  {"header only", raw:sub(1, 20), "header only.bin"},
  {"empty", "", "empty.bin"},
  {"zero dim", header(0, 64, 2, 2, 2, 40, 24) .. body, "zero dim.bin"},
  {"negative layers", header(32, 64, -2, 2, 2, 40, 24) .. body, "negative layers.bin"},
  {"enormous dim", header(1 << 30, 64, 2, 2, 2, 40, 24) .. body, "enormous dim.bin"},
  {"heads not divisible", header(32, 64, 2, 4, 3, 40, 24) .. body, "divisible"},
  {"overflowing sizes", header(1 << 20, 1 << 20, 4096, 1, 1, 1 << 24, 1 << 20) .. body, "overflowing sizes.bin"},
  {"trailing bytes", raw .. "xxxx", "trailing"},
  {"v1 bad version", string.pack("<I4i4", 0x616b3432, 7) .. raw, "version"},
}
for _, c in ipairs(cases) do
  local p = dir .. "/" .. c[1] .. ".bin"
  spit(p, c[2])
  expect_fail("model: " .. c[1], ("capture --model %s --tokens 1,2,3 --out %s"):format(q(p), dir .. "/o.h5"),
    {c[3]}, "o.h5")
end
expect_fail("missing model", ("capture --model %s/nope.bin --tokens 1 --out %s/o.h5"):format(dir, dir),
  "nope.bin", "o.h5")
-- a tokenizer that does not match the model (354-piece tokenizer for a 40-token model)
local tok = dir .. "/tokenizer354.bin"
assert(os.execute(("%s -e %s"):format(exe, q(("mp.tokenizer.save_bytelevel(%q)"):format(tok)))))
expect_fail("tokenizer mismatch", ("capture --model %s --tokenizer %s --text hi --out %s/o.h5"):format(
  good_model, tok, dir), "tokenizer354.bin", "o.h5")
expect_fail("unknown hook", ("capture --model %s --tokens 1,2 --hooks blocks.0.attn.hook_patern --out %s/o.h5"):format(
  good_model, dir), "blocks.0.attn.hook_patern", "o.h5")
expect_fail("hook layer out of range", ("capture --model %s --tokens 1,2 --hooks blocks.7.hook_z --out %s/o.h5"):format(
  good_model, dir), "blocks.7.hook_z", "o.h5")
expect_fail("unwritable output", ("capture --model %s --tokens 1,2 --out %s/no/such/dir/o.h5"):format(
  good_model, dir), "no/such/dir/o.h5", "o.h5")
expect_fail("token out of range", ("capture --model %s --tokens 1,40 --out %s/o.h5"):format(good_model, dir),
  "outside the vocabulary", "o.h5")
expect_fail("bad token list", ("capture --model %s --tokens 1,x --out %s/o.h5"):format(good_model, dir), "'x'", "o.h5")
expect_fail("missing --out", ("capture --model %s --tokens 1"):format(good_model), "--out is required")
expect_fail("unknown option", ("capture --model %s --tokns 1 --out %s/o.h5"):format(good_model, dir), "--tokns")
expect_fail("unknown probe", "no_such_probe", "no_such_probe")
-- a script error: file:line: message and a traceback
local script = dir .. "/bad_script.lua"
spit(script, "local x = 1\nlocal function f() error('boom') end\nf()\n")
expect_fail("script error", q(script), {"bad_script.lua:2: boom", "stack traceback"})
-- misuse of the API names the argument
spit(script, ("local m = mp.load(%q)\nm:run_with_cache({1,2}, {names='blocks.0.hook_nope'})\n"):format(good_model))
expect_fail("API misuse", q(script), {"blocks.0.hook_nope", "bad_script.lua:2"})

-- --help of every shipped command: every format loads, so no help may say a
-- model is a llama2.c checkpoint, and no option prints an empty "(default )"
for _, cmd in ipairs({"capture", "generate", "sinks", "quickstart", "rope_id", "mirror_descent", "group_arith"}) do
  local p = io.popen(exe .. " " .. cmd .. " --help 2>&1")
  local help = p:read("a"); p:close()
  t.ok(help:find("usage: mechprobe " .. cmd, 1, true), cmd .. " --help prints its usage")
  t.ok(not help:find("(default )", 1, true), cmd .. " --help has an empty (default ): " .. help)
  t.ok(not help:find("(default: [^)]*%) %(default"), cmd .. " --help gives a default twice: " .. help)
  t.ok(not help:find("llama2.c checkpoint", 1, true), cmd .. " --help says llama2.c checkpoint: " .. help)
end

os.execute("rm -rf " .. dir)
t.finish("test_faults")
