-- test_inputs3.lua — inputs that never end, the process environment and the
-- smaller input faults (reliability issue, "inputs3"), through the real CLI:
--   * --text-file, --tokens-file and --corpus given a FIFO, /dev/zero or a
--     directory (capture, sinks, rope_id, quickstart): refused at once, naming
--     the flag, the file and what it is; nothing written;
--   * numbers on the command line: negative counts (sinks --max-tokens -1 used
--     to loop for ever), values that wrap (hex 2^63), 2^63 in decimal, inf,
--     absurdly large steps; and mp.read_file's own cap;
--   * a stray MECHPROBE_CHECKPOINT_READER has no effect;
--   * a corrupt checkpoint fails within seconds (not 30 s); valid ones still load;
--   * an unreadable model or a directory is reported as such;
--   * a small llama2.c .bin truncated in place while loaded does not crash.
-- Each command runs under `timeout` (a hang is a failure, exit 124) and, without
-- ASan, under `ulimit -v` (reading /dev/zero to the end is a failure, not an OOM).
local exe = arg[-1]
local data = os.getenv("MP_TESTDATA") or "tests/data"
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local dir = os.tmpname()
os.remove(dir)
mp.mkdir(dir)

local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function spit(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local asan = os.getenv("ASAN_OPTIONS")
local limits = asan and "" or "ulimit -v 6000000; "
local function now() local p = io.popen("date +%s.%N"); local s = p:read("l"); p:close(); return tonumber(s) end

-- Runs mechprobe ARGS with env prefix ENV; returns ok, how, code, stdout, stderr, seconds.
local function run(args, env, secs)
  local errf, outf = dir .. "/stderr.txt", dir .. "/stdout.txt"
  local t0 = now()
  local ok, how, code = os.execute(("%s%s timeout %d %s %s >%s 2>%s"):format(limits, env or "", secs or 30, exe, args,
    outf, errf))
  return ok, how, code, slurp(outf), slurp(errf), now() - t0
end

-- The output folder holds nothing (or does not exist).
local function empty(out)
  local p = io.popen("ls -A " .. q(out) .. " 2>/dev/null")
  local s = p:read("a")
  p:close()
  return s == ""
end

local function expect_fail(label, args, words, out)
  if out then os.execute("rm -rf " .. q(out)) end
  local ok, how, code, _, err = run(args)
  local bad = {}
  if ok or how ~= "exit" or code == 124 or code >= 126 then bad[#bad + 1] = ("exit %s %s"):format(how, tostring(code)) end
  for _, w in ipairs(type(words) == "table" and words or {words}) do
    if not err:find(w, 1, true) then bad[#bad + 1] = ("stderr lacks '%s'"):format(w) end
  end
  if err:find("stack traceback", 1, true) then bad[#bad + 1] = "a Lua traceback for an input error" end
  if err:find("AddressSanitizer") or err:find("runtime error:") then bad[#bad + 1] = "sanitizer report" end
  if out and not empty(out) then bad[#bad + 1] = "output written in " .. out end
  t.ok(#bad == 0, ("%s: %s\n  stderr: %s"):format(label, table.concat(bad, "; "), err:sub(1, 2000)))
end

local model = data .. "/ref_tied.bin"   -- llama2.c, vocab 40
local fifo, zero, folder = dir .. "/fifo", "/dev/zero", dir .. "/folder"
assert(os.execute("mkfifo " .. q(fifo)))
mp.mkdir(folder)
local kinds = {{fifo, "is a FIFO, not a regular file"}, {zero, "is a character device, not a regular file"},
               {folder, "is a directory, not a regular file"}}

-- 1. inputs that never end, for each flag that names an input file
for _, k in ipairs(kinds) do
  local path, what = k[1], k[2]
  local o = dir .. "/out"
  expect_fail("capture --text-file " .. path, ("capture --model %s --text-file %s --out %s/o.h5"):format(q(model), q(path), o),
    {"--text-file " .. path .. ": " .. what}, o)
  expect_fail("capture --tokens-file " .. path,
    ("capture --model %s --tokens-file %s --out %s/o.h5"):format(q(model), q(path), o), {"--tokens-file " .. path .. ": " .. what}, o)
  expect_fail("sinks --text-file " .. path, ("sinks --model %s --text-file %s --out %s"):format(q(model), q(path), o),
    {"--text-file " .. path .. ": " .. what}, o)
  expect_fail("sinks --corpus " .. path, ("sinks --preset quick --corpus %s --steps 2 --out %s"):format(q(path), o),
    {"--corpus " .. path .. ": " .. what}, o)
  expect_fail("rope_id --corpus " .. path, ("rope_id --quick --corpus %s --steps 2 --out %s"):format(q(path), o),
    {"--corpus " .. path .. ": " .. what}, o)
  expect_fail("quickstart --corpus " .. path, ("quickstart --corpus %s --steps 2 --out %s"):format(q(path), o),
    {"--corpus " .. path .. ": " .. what}, o)
end

-- files the probes look for by name: group_arith --model, rope_id --rejudge's run file
expect_fail("group_arith --model FIFO", ("group_arith --model %s --out %s"):format(q(fifo), dir .. "/ga"),
  {"--model " .. fifo .. ": is a FIFO, not a regular file"}, dir .. "/ga")
mp.mkdir(dir .. "/rj")
assert(os.execute("mkfifo " .. q(dir .. "/rj/rope_id.h5")))
expect_fail("rope_id --rejudge with a FIFO as the run file", ("rope_id --rejudge --out %s"):format(q(dir .. "/rj")),
  {dir .. "/rj/rope_id.h5: is a FIFO, not a regular file"})

-- the same reader from a script: a cap, and a regular file is read whole
spit(dir .. "/ten.txt", "0123456789")
t.case("mp.read_file", function()
  assert(mp.read_file(dir .. "/ten.txt") == "0123456789")
  assert(mp.read_file(dir .. "/ten.txt", {max_bytes = 10}) == "0123456789")
  t.expect_error(function() mp.read_file(dir .. "/ten.txt", {max_bytes = 9, what = "--text-file"}) end,
    "--text-file " .. dir .. "/ten.txt: 10 B is larger than the 9 B allowed for it", "cap")
  t.expect_error(function() mp.read_file(fifo, {what = "--corpus"}) end, "--corpus " .. fifo .. ": is a FIFO", "fifo")
  t.expect_error(function() mp.read_file(dir .. "/none", {what = "--corpus"}) end,
    "--corpus " .. dir .. "/none: cannot open: No such file or directory", "missing")
  t.expect_error(function() mp.read_file(dir .. "/ten.txt", {max_bytse = 1}) end, "unknown option 'max_bytse'", "option")
  assert(mp.input_size(dir .. "/ten.txt") == 10)
end)

-- a text file still works, line by line (the last line without a newline too)
spit(dir .. "/prompts.txt", "1,2,3\n4,5\n6")
do
  local ok, how, code, _, err = run(("capture --model %s --tokens-file %s --out %s/ok.h5"):format(q(model),
    q(dir .. "/prompts.txt"), dir))
  t.ok(ok, ("capture --tokens-file of 3 lines: %s %s %s"):format(how, code, err))
  if ok then
    local f = mp.h5.open(dir .. "/ok.h5")
    local toks = f:read("/tokens")
    t.ok(toks:shape()[1] == 3, "3 prompts captured, got " .. tostring(toks:shape()[1]))
    f:close()
  end
end

-- 2. numbers on the command line
local sinks = ("sinks --model %s --tokens 1,2,3,4,5,6 --out %s"):format(q(model), dir .. "/s")
expect_fail("sinks --max-tokens -1", sinks .. " --max-tokens -1", "option --max-tokens = -1 is out of range (4..1048576)",
  dir .. "/s")
expect_fail("sinks --boot 0", sinks .. " --boot 0", "option --boot = 0 is out of range (1..1000000)", dir .. "/s")
expect_fail("sinks --eps 1e999", sinks .. " --eps 1e999", "option --eps: a finite number expected, got '1e999'", dir .. "/s")
expect_fail("sinks --eps -nan", sinks .. " --eps nan", "option --eps: a number expected, got 'nan'", dir .. "/s")
expect_fail("sinks --seed 2^63", sinks .. " --seed 9223372036854775808",
  "option --seed = 9223372036854775808 is out of range (0..2147483647)", dir .. "/s")
expect_fail("sinks --seed hex 2^63 (wraps)", sinks .. " --seed 0x8000000000000000",
  "option --seed: an integer expected, got '0x8000000000000000'", dir .. "/s")
expect_fail("sinks --preset --seeds hex (wraps)", ("sinks --preset quick --seeds 0xffffffffffffffff --out %s"):format(dir .. "/s"),
  "--seeds: '0xffffffffffffffff' is not an integer", dir .. "/s")
expect_fail("sinks --preset --seeds -3", ("sinks --preset quick --seeds -3 --out %s"):format(dir .. "/s"),
  "--seeds: -3 is out of range (0..2147483647)", dir .. "/s")
expect_fail("generate --steps 1e11", ("generate --model %s --steps 99999999999"):format(q(model)),
  "option --steps = 99999999999 is out of range (0..2147483647)")
expect_fail("generate --top-p 2", ("generate --model %s --top-p 2"):format(q(model)), "option --top-p = 2 is out of range (0..1)")
expect_fail("generate --temperature -1", ("generate --model %s --temperature -1"):format(q(model)),
  "option --temperature = -1 is out of range (0..)")
expect_fail("quickstart --steps -5", ("quickstart --steps -5 --out %s"):format(dir .. "/qs"),
  "option --steps = -5 is out of range (0..2147483647)", dir .. "/qs")

-- 3. the checkpoint reader's variable: a stray value has no effect
do
  local ok, how, code, out, err = run("--version", "MECHPROBE_CHECKPOINT_READER=1 ")
  t.ok(ok and out:find(mp.VERSION, 1, true), ("MECHPROBE_CHECKPOINT_READER=1 mechprobe --version: %s %s, stdout '%s' stderr '%s'")
    :format(how, code, out, err))
  -- the old format of the variable, naming standard output as the pipe: no reader, no binary on stdout
  local forged = ("MECHPROBE_CHECKPOINT_READER=%s "):format(q("1,0,0,30,0,100," .. data .. "/ref_tied.h5"))
  ok, how, code, out, err = run("--version", forged)
  t.ok(ok and out == ("mechprobe %s\n"):format(mp.VERSION) or (ok and out:find(mp.VERSION, 1, true) and #out < 80),
    ("forged reader variable (old format): %s %s, %d bytes on stdout"):format(how, code, #out))
  -- the new format with a made-up token and standard output: no reader either
  forged = ("MECHPROBE_CHECKPOINT_READER=%s "):format(q("1,0," .. ("ab"):rep(16) .. ",0,0,30,0,100," .. data .. "/ref_tied.h5"))
  ok, how, code, out = run("--version", forged)
  t.ok(ok and out:find(mp.VERSION, 1, true) and #out < 80, ("forged reader variable (new format): %s %s, %d bytes on stdout")
    :format(how, code, #out))
  -- the same for the HDF5 file check's variable (mp.h5.open's guarded child)
  for _, v in ipairs({"1", "1,1,30," .. data .. "/ref_tied.h5", "1,0," .. ("ab"):rep(16) .. ",1,30," .. data .. "/ref_tied.h5"}) do
    ok, how, code, out = run("--version", ("MECHPROBE_H5_VALIDATOR=%s "):format(q(v)))
    t.ok(ok and out:find(mp.VERSION, 1, true) and #out < 80, ("MECHPROBE_H5_VALIDATOR=%s mechprobe --version: %s %s, %d bytes on stdout")
      :format(v, how, code, #out))
  end
  -- a script that loads a checkpoint with the variable set works as usual
  spit(dir .. "/load.lua", ("local m = mp.load(%q); print('vocab', m.config.vocab)"):format(data .. "/train_ref_a.h5"))
  ok, how, code, out, err = run(q(dir .. "/load.lua"), "MECHPROBE_CHECKPOINT_READER=1 ")
  t.ok(ok and out:find("vocab\t", 1, true), ("a checkpoint loads with the variable set: %s %s '%s' '%s'"):format(how, code,
    out, err))
end

-- 4. the loader's time limit scales with the file: a small corrupt (looping) file
-- fails in seconds, and valid files load under the default limit
do
  local limit = asan and 25 or 12   -- 5 s (20 s under ASan) for a small file, plus start-up
  spit(dir .. "/hang.lua", ("local ok, e = pcall(mp.load, %q); io.stderr:write(tostring(e), '\\n'); os.exit(ok and 0 or 3)")
    :format(data .. "/ckpt_hostile_hang.h5"))
  local ok, how, code, _, err, secs = run(q(dir .. "/hang.lua"), "", 60)
  t.ok(not ok and code == 3 and err:find("timed out after", 1, true) and secs < limit,
    ("a small looping checkpoint fails within %d s: %s %s after %.1f s: %s"):format(limit, how, code, secs, err))
  local valid = {}
  for _, n in ipairs{"attn_ref.h5", "ckpt_fuzz_seed.h5", "pos_ref.h5", "train_ref_a.h5", "train_ref_b.h5", "train_ref_c.h5"} do
    valid[#valid + 1] = ("assert(mp.load(%q))"):format(data .. "/" .. n)
  end
  -- and a 50 MB one (limit 8 s; 32 s under ASan)
  local big = mp.model.new{d_model = 512, n_layer = 4, n_head = 8, d_mlp = 2048, vocab = 4096, ctx = 64, seed = 1}
  big:save(dir .. "/big.h5")
  big:close()
  valid[#valid + 1] = ("assert(mp.load(%q))"):format(dir .. "/big.h5")
  spit(dir .. "/valid.lua", ("for i = 1, 4 do %s end print('ok')"):format(table.concat(valid, " ")))
  ok, how, code, _, err = run(q(dir .. "/valid.lua"), "", 300)
  t.ok(ok, ("valid checkpoints load under the default limit: %s %s %s"):format(how, code, err))
end

-- 5. an unreadable model, a directory
mp.mkdir(dir .. "/nomodel")
expect_fail("a directory as --model", ("capture --model %s --tokens 1 --out %s/o.h5"):format(q(dir .. "/nomodel"), dir .. "/o5"),
  {dir .. "/nomodel: is a directory"}, dir .. "/o5")
spit(dir .. "/locked.bin", slurp(model))
os.execute("chmod 000 " .. q(dir .. "/locked.bin") .. " && chmod 755 " .. q(dir))
-- root reads any file: run as nobody there (skipped where setpriv is missing)
local as_nobody = ""
local p = io.popen("id -u"); local uid = p:read("l"); p:close()
if uid == "0" then
  as_nobody = os.execute("command -v setpriv >/dev/null") and "setpriv --reuid=65534 --regid=65534 --clear-groups " or nil
end
if as_nobody then
  local ok, how, code, _, err = run(("capture --model %s --tokens 1 --out /tmp/never.h5"):format(q(dir .. "/locked.bin")),
    as_nobody)
  t.ok(not ok and how == "exit" and code ~= 124 and err:find(dir .. "/locked.bin: cannot open the model file: Permission denied",
    1, true), ("an unreadable model: %s %s: %s"):format(how, code, err))
else
  print("note: setpriv not found: the unreadable-model case is skipped")
end

-- 6. a small llama2.c .bin truncated in place while loaded: no SIGBUS
spit(dir .. "/live.bin", slurp(model))
spit(dir .. "/trunc.lua", ([[
local m = mp.load(%q)
local a = m:forward({1, 2, 3}):sum()
assert(os.execute("truncate -s 64 " .. %q))
local b = m:forward({1, 2, 3}):sum()
assert(a == b, "the loaded weights changed")
print("same")
]]):format(dir .. "/live.bin", dir .. "/live.bin"))
do
  local ok, how, code, out, err = run(q(dir .. "/trunc.lua"))
  t.ok(ok and out:find("same", 1, true), ("a loaded .bin truncated in place: %s %s: %s"):format(how, code, err))
end

os.execute("rm -rf " .. q(dir))
t.finish("test_inputs3")
