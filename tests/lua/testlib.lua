-- testlib.lua — what the Lua tests share: counted checks (a condition with a
-- message, or a named case run under pcall), tolerance and error assertions,
-- deep equality, and the closing line with the exit status.
--
--   local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
--   t.ok(x == 1, "x is 1")                    -- counts; prints FAIL: msg when false
--   t.case("sum", function() t.near(s, 3, 1e-6, "sum") end)  -- counts; an error fails it
--   t.read_file(p), t.sh(cmd), t.rejudge_stored(probe, name)   -- files, commands, a stored run re-judged
--   t.finish("test_x")                        -- "test_x: N passed, M failed"; exit 1 on failures
local M = {passed = 0, failed = 0}

-- A condition: counted, and reported on stderr when false.
function M.ok(cond, msg)
  if cond then M.passed = M.passed + 1 else
    M.failed = M.failed + 1
    io.stderr:write("FAIL: " .. tostring(msg) .. "\n")
  end
  return cond
end

-- |a - b| <= tol as a counted check.
function M.ok_near(a, b, tol, msg)
  return M.ok(math.abs(a - b) <= tol, ("%s: %.9g vs %.9g (tol %g)"):format(msg, a, b, tol))
end

-- A named case: fn's assertions (plain assert or the raising helpers below) decide it.
function M.case(name, fn)
  local ok, err = pcall(fn)
  if ok then M.passed = M.passed + 1 else
    M.failed = M.failed + 1
    io.stderr:write(("FAIL %s: %s\n"):format(name, tostring(err)))
  end
end

-- Raising assertions, for use inside a case.
function M.near(a, b, tol, what)
  assert(math.abs(a - b) <= tol, ("%s: %.9g vs %.9g (tol %g)"):format(what or "value", a, b, tol))
end

function M.expect_error(fn, pattern, what)
  local ok, err = pcall(fn)
  assert(not ok, (what or "call") .. " should have failed")
  assert(tostring(err):find(pattern, 1, true),
         ("%s: error '%s' lacks '%s'"):format(what or "call", tostring(err), pattern))
end

function M.deep_eq(a, b, path)
  path = path or "t"
  if type(a) ~= "table" then
    assert(a == b, ("%s: %s ~= %s"):format(path, tostring(a), tostring(b)))
    return
  end
  assert(type(b) == "table" and #a == #b, path .. ": lengths differ")
  for i = 1, #a do M.deep_eq(a[i], b[i], path .. "[" .. i .. "]") end
end

-- Runs the shipped probe `mechprobe NAME ARGS --out DIR/NAME` (DIR a fresh
-- temporary folder; remove it when done) and prints how long it took. Returns
-- its stdout and stderr together, whether it exited 0, the output folder and DIR.
function M.run_probe(name, args)
  local root = os.tmpname(); os.remove(root); mp.mkdir(root)
  local out = root .. "/" .. name
  local t0 = os.time()
  local p = io.popen(("%s %s %s --out %s 2>&1"):format(arg[-1], name, args, out))
  local report = p:read("a")
  local ok = p:close()
  io.write(("%s %s: %d s\n"):format(name, args, os.time() - t0))
  return report, ok, out, root
end

-- A file's bytes (nil when it cannot be opened).
function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- A shell command's stdout and stderr together, and whether it exited 0.
function M.sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  return out, p:close() == true
end

-- `mechprobe PROBE --rejudge` on a copy of the stored run tests/data/rejudge/NAME
-- (a small run kept with the verdicts.tsv and report.txt it wrote): checks that
-- they come back byte for byte. Returns the copy's folder, what --rejudge
-- printed, and the stored verdicts.tsv text.
function M.rejudge_stored(probe, name)
  local src = (os.getenv("MP_TESTDATA") or ((os.getenv("MP_SRC") or ".") .. "/tests/data")) .. "/rejudge/" .. name
  local tsv, report = M.read_file(src .. "/verdicts.tsv"), M.read_file(src .. "/report.txt")
  M.ok(tsv and report, "the stored run is there: " .. src)
  local root = os.tmpname(); os.remove(root); mp.mkdir(root)
  local dir = root .. "/run"
  os.execute(("cp -r '%s' '%s'"):format(src, dir))
  local out, ok = M.sh(("'%s' %s --rejudge --out '%s'"):format(arg[-1], probe, dir))
  M.ok(ok, probe .. " --rejudge exited 0:\n" .. out)
  M.ok(M.read_file(dir .. "/verdicts.tsv") == tsv, probe .. ": verdicts.tsv re-judged byte for byte as the run wrote it")
  M.ok(M.read_file(dir .. "/report.txt") == report, probe .. ": report.txt re-judged byte for byte")
  return dir, out, tsv
end

-- The closing line; a non-zero exit when anything failed.
function M.finish(name)
  print(("%s: %d passed, %d failed"):format(name, M.passed, M.failed))
  if M.failed > 0 then os.exit(1) end
end

-- A deterministic uniform in [-1, 1) (a linear congruential generator from seed):
-- test data that needs no library generator.
function M.lcg(seed)
  return function()
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed / 1073741824 - 1
  end
end

-- The element count of a shape {d1, d2, ...}.
function M.numel(shape)
  local n = 1
  for _, e in ipairs(shape) do n = n * e end
  return n
end

-- Calls fn(idx) for every 1-based multi-index of shape in row-major order (idx is reused).
function M.each(shape, fn)
  local nd, idx = #shape, {}
  if M.numel(shape) == 0 then return end
  for i = 1, nd do idx[i] = 1 end
  while true do
    fn(idx)
    local i = nd
    while i >= 1 do
      idx[i] = idx[i] + 1
      if idx[i] <= shape[i] then break end
      idx[i] = 1
      i = i - 1
    end
    if i < 1 then return end
  end
end

return M
