-- test_outputs.lua — issue #17 (outputs) through the CLI and the Lua API:
-- capture refuses a FIFO, a directory, a symbolic link and a device node as
-- --out (the destination stays as it was), with --tokens too and with
-- --tokens-file (the dataset-capture writer), which also removes a stale
-- temporary of its output left by a dead process; sinks writes DIR/sinks.h5 only when
-- complete (an error injected between the captures and /stats leaves neither
-- sinks.h5 nor a temporary); mp.output commits and aborts; and the smaller
-- cases: --hooks '' and sinks --window 0 are errors naming the option, a hook
-- glob longer than 255 bytes is matched whole, a FIFO given as --model or
-- --tokenizer is refused (it used to block forever), mp.tasks.text refuses
-- /dev/zero and a corpus over 4 GiB (it used to read until memory ran out).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local exe = arg[-1]
local data = os.getenv("MP_TESTDATA") or "tests/data"
local model = data .. "/ref_tied.bin"
local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function spit(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end
-- the CLI under a time limit (a FIFO used to block forever): ok, exit code, stderr
local function run(args)
  local errf = dir .. "/stderr.txt"
  local ok, how, code = os.execute(("timeout 20 %s %s >/dev/null 2>%s"):format(exe, args, errf))
  return ok, how, code, slurp(errf)
end
local function kind(p) -- the file type letter of ls -ld (or nil when absent)
  local h = io.popen("ls -ld " .. q(p) .. " 2>/dev/null")
  local s = h:read("a"); h:close()
  return s:sub(1, 1) ~= "" and s:sub(1, 1) or nil
end
local function tmp_count(d)
  local h = io.popen("ls -a " .. q(d) .. " | grep -c '\\.tmp\\.' || true")
  local n = tonumber(h:read("a")); h:close()
  return n
end
local function expect_cli_fail(label, args, words)
  local ok, how, code, err = run(args)
  local good = not ok and how == "exit" and code >= 1 and code < 124
  local msg = good and "" or ("exit %s %s"):format(how, tostring(code))
  for _, w in ipairs(words) do
    if not err:find(w, 1, true) then good = false; msg = msg .. (" stderr lacks '%s'"):format(w) end
  end
  t.ok(good, ("%s: %s\n  stderr: %s"):format(label, msg, err))
end

-- 1. capture --out onto things that are not regular files
local root = io.popen("id -u"):read("l") == "0"
spit(dir .. "/target.h5", "keep")
assert(os.execute("mkfifo " .. q(dir .. "/fifo.h5")))
assert(os.execute(("ln -s %s %s"):format(q(dir .. "/target.h5"), q(dir .. "/link.h5"))))
assert(os.execute("mkdir " .. q(dir .. "/d.h5")))
local dests = {{"fifo.h5", "is a FIFO", "p"}, {"link.h5", "is a symbolic link", "l"}, {"d.h5", "is a directory", "d"}}
if root and os.execute("mknod " .. q(dir .. "/null.h5") .. " c 1 3 2>/dev/null") then
  dests[#dests + 1] = {"null.h5", "is a character device", "c"}
else
  print("note: no device node here (not root or no CAP_MKNOD); /dev/null itself is not tried")
end
spit(dir .. "/prompts.txt", "1,2,3\n4,5\n")
for _, input in ipairs{"--tokens 1,2,3", "--tokens-file " .. q(dir .. "/prompts.txt")} do
  for _, d in ipairs(dests) do
    local p = dir .. "/" .. d[1]
    expect_cli_fail(("capture %s --out %s"):format(input, d[1]), ("capture --model %s %s --out %s"):format(model,
      input, q(p)), {p, d[2]})
    t.ok(kind(p) == d[3], ("%s is still a %s (now %s)"):format(d[1], d[3], tostring(kind(p))))
  end
end
t.ok(slurp(dir .. "/target.h5") == "keep", "the symbolic link's target is untouched")
t.ok(tmp_count(dir) == 0, "no temporary left by the refused captures")
-- a stale temporary of a dead process (pid of a reaped child) is removed by the
-- dataset capture, like by every other writer; the capture is complete
do
  local dead = tonumber(io.popen("sh -c 'echo $$'"):read("l"))
  -- temporaries are <path>.tmp.<host>.<pid>.<n>, host: [A-Za-z0-9-] kept, others '_', at most 64
  local hn = io.popen("uname -n"); local host = hn:read("l"); hn:close()
  host = ((host ~= nil and host ~= "") and host or "localhost"):sub(1, 64):gsub("[^%w%-]", "_")
  local stale = ("%s/ds.h5.tmp.%s.%d.0"):format(dir, host, dead)
  spit(stale, "partial")
  local ok, how, code, err = run(("capture --model %s --tokens-file %s --out %s"):format(model,
    q(dir .. "/prompts.txt"), q(dir .. "/ds.h5")))
  t.ok(ok, ("capture --tokens-file: exit %s %s: %s"):format(how, tostring(code), err))
  t.ok(not kind(stale), "the stale temporary " .. stale .. " was removed")
  local f <close> = mp.h5.open(dir .. "/ds.h5")
  local lens = f:read_int("lengths")
  t.ok(lens[1] == 3 and lens[2] == 2, "the dataset capture's /lengths are 3, 2")
  t.ok(tmp_count(dir) == 0, "no temporary left by the dataset capture")
end

-- 11. --hooks '' and sinks --window 0 name the option; nothing is written
expect_cli_fail("--hooks ''", ("capture --model %s --tokens 1,2 --hooks '' --out %s"):format(model, dir .. "/e.h5"),
  {"--hooks"})
t.ok(not kind(dir .. "/e.h5"), "--hooks '': no run file")
expect_cli_fail("--window 0", ("sinks --model %s --tokens 1,2,3,4,5,6 --window 0 --out %s"):format(model,
  dir .. "/w"), {"--window"})
t.ok(not kind(dir .. "/w/sinks.h5"), "--window 0: no run file")

-- 11. a FIFO as the model or the tokenizer is refused, not opened (it blocked)
assert(os.execute("mkfifo " .. q(dir .. "/model.fifo")))
expect_cli_fail("--model FIFO", ("capture --model %s --tokens 1 --out %s"):format(q(dir .. "/model.fifo"),
  dir .. "/f.h5"), {"model.fifo", "FIFO"})
expect_cli_fail("--tokenizer FIFO", ("capture --model %s --tokenizer %s --text hi --out %s"):format(model,
  q(dir .. "/model.fifo"), dir .. "/f.h5"), {"model.fifo", "FIFO"})

local m = mp.load(model)

-- 11. a glob longer than 255 bytes is matched whole: 300 stars then a suffix
-- select exactly the hook_resid_pre of every layer (truncated, the stars alone
-- selected every hook)
t.case("long hook glob", function()
  local n = m:capture({1, 2, 3}, {out = dir .. "/g.h5", hooks = ("*"):rep(300) .. "hook_resid_pre"})
  assert(n == m.config.n_layer, ("%d datasets, expected %d (one per layer)"):format(n, m.config.n_layer))
  t.expect_error(function() m:capture({1, 2}, {out = dir .. "/g2.h5", hooks = ("*"):rep(300) .. "hook_nothing"}) end,
    "hook_nothing", "a long glob matching nothing")
end)

-- 11. text corpora: regular files of at most 4 GiB
t.case("text corpus from /dev/zero", function()
  t.expect_error(function() mp.tasks.text{path = "/dev/zero"} end, "/dev/zero: is a character device")
end)
t.case("text corpus from a FIFO", function()
  t.expect_error(function() mp.tasks.text{path = dir .. "/model.fifo"} end, "is a FIFO")
end)
t.case("text corpus over 4 GiB", function()
  local big = dir .. "/big.txt"
  local f = assert(io.open(big, "wb")); assert(f:seek("set", 5 * 2 ^ 30)); f:write("x"); f:close() -- sparse
  t.expect_error(function() mp.tasks.text{path = big} end, "larger than the 4.0 GiB")
  os.remove(big)
end)

-- 9. sinks: an error between the captures and /stats leaves no sinks.h5
t.case("sinks kill-safety", function()
  local sinks = require "sinks"
  local out = dir .. "/sinks"
  local massive = mp.analyze.massive
  mp.analyze.massive = function() error("injected fault") end
  local ok, err = pcall(sinks.run, m, {1, 2, 3, 4, 5, 6, 7, 8}, {out = out, boot = 10, window = 2})
  mp.analyze.massive = massive
  assert(not ok and tostring(err):find("injected fault", 1, true), "the injected error surfaces: " .. tostring(err))
  assert(not kind(out .. "/sinks.h5"), "sinks.h5 exists after a failure before /stats")
  assert(tmp_count(out) == 0, "a temporary was left in " .. out)
  t.expect_error(function() sinks.run(m, {1, 2, 3, 4, 5, 6}, {out = out, window = 0}) end, "window")
  -- and a complete run has /stats
  local s = sinks.run(m, {1, 2, 3, 4, 5, 6, 7, 8}, {out = out, boot = 10, window = 2})
  local f <close> = mp.h5.open(s.run)
  assert(f:has("stats/alpha") and f:has("acts/blocks.0.attn.hook_pattern"), "sinks.h5 lacks /stats or /acts")
  assert(tmp_count(out) == 0, "a temporary was left after a complete run")
end)

-- mp.output: commit renames, abort and __close remove, refusals as for writers
t.case("mp.output", function()
  local p = dir .. "/o.txt"
  do
    local o <close> = mp.output(p)
    spit(o.tmp, "new")
    assert(not kind(p), "nothing under the final name before commit")
    assert(o:commit() == p)
    assert(not pcall(function() return o.tmp end), "a committed output has no temporary")
  end
  assert(slurp(p) == "new", "committed content")
  do
    local o <close> = mp.output(p)
    spit(o.tmp, "half")
  end -- closed without commit
  assert(slurp(p) == "new", "an uncommitted output leaves the old file")
  local o = mp.output(p); spit(o.tmp, "x"); o:abort()
  assert(tmp_count(dir) == 0, "abort and __close remove the temporary")
  t.expect_error(function() mp.output(dir .. "/fifo.h5") end, "is a FIFO")
  t.expect_error(function() mp.output(dir .. "/link.h5") end, "is a symbolic link")
end)

-- probes' text outputs (report.txt, verdicts .tsv) go through cli.write_text: atomic,
-- and a FIFO, a device or a link is refused like by every other writer (they were io.open)
t.case("probe text outputs", function()
  local cli = require "cli"
  local p = dir .. "/report.txt"
  cli.write_text(p, "first\n")
  cli.write_text(p, "second\n")
  assert(slurp(p) == "second\n", "report.txt replaced whole")
  t.expect_error(function() cli.write_text(dir .. "/fifo.h5", "x") end, "is a FIFO")
  t.expect_error(function() cli.write_text(dir .. "/link.h5", "x") end, "is a symbolic link")
  assert(kind(dir .. "/fifo.h5") == "p" and kind(dir .. "/link.h5") == "l", "the FIFO and the link are untouched")
  assert(tmp_count(dir) == 0, "no temporary left")
end)

-- files updated in place (mp.h5.open, t:save) refuse a FIFO instead of blocking on it
t.case("h5 in place on a FIFO", function()
  t.expect_error(function() mp.h5.open(dir .. "/fifo.h5", "a") end, "is a FIFO")
  t.expect_error(function() mp.h5.open(dir .. "/fifo.h5") end, "is a FIFO")
  t.expect_error(function() mp.zeros{2}:save(dir .. "/fifo.h5", "x") end, "is a FIFO")
end)

os.execute("rm -rf " .. q(dir))
t.finish("test_outputs_lua")
