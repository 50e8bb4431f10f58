-- test_outputs2.lua — the output race and writes, through the CLI and the Lua
-- API: mp.h5.open(path, "w"/"a"/"r+") and t:save refuse a symbolic link (the
-- link's target is untouched); "w" is atomic (nothing under the name until
-- close, the old file kept when the <close> scope ends by an error or the
-- handle is dropped unclosed); t:save is atomic (an error leaves the old file
-- whole and no temporary); capture --out equal to --model (by the same or
-- another name) is refused and the model is untouched.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local exe = arg[-1]
local data = os.getenv("MP_TESTDATA") or "tests/data"
local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function spit(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end
local function exists(p) return os.execute("test -e " .. q(p) .. " -o -L " .. q(p)) == true end
local function tmp_count(d)
  local h = io.popen("ls -a " .. q(d) .. " | grep -c '\\.tmp\\.' || true")
  local n = tonumber(h:read("a")); h:close()
  return n
end

t.case("mp.h5.open and t:save refuse a symbolic link", function()
  local target, link = dir .. "/target.h5", dir .. "/link.h5"
  do local f <close> = mp.h5.open(target, "w"); f:write("a", mp.tensor{1, 2}) end
  local before = slurp(target)
  assert(os.execute(("ln -s %s %s"):format(q(target), q(link))))
  for _, mode in ipairs{"w", "a", "r+"} do
    t.expect_error(function() mp.h5.open(link, mode) end, "is a symbolic link", "mode " .. mode)
  end
  t.expect_error(function() mp.tensor{3}:save(link, "b") end, "is a symbolic link", "t:save")
  t.ok(slurp(target) == before, "the link's target is unchanged")
  t.ok(os.execute("test -L " .. q(link)) == true, "the link is still a link")
  t.ok(tmp_count(dir) == 0, "no temporary left")
  os.remove(link); os.remove(target)
end)

t.case('mp.h5.open "w" is atomic', function()
  local p = dir .. "/atomic.h5"
  local f = mp.h5.open(p, "w")
  f:write("x", mp.tensor{1, 2, 3})
  t.ok(not exists(p), "nothing under the final name before close")
  f:close()
  local g <close> = mp.h5.open(p)
  t.deep_eq(g:read("x"):totable(), {1, 2, 3})
  g:close()
  -- an error in the <close> scope keeps the old file
  local ok = pcall(function()
    local h <close> = mp.h5.open(p, "w")
    h:write("y", mp.tensor{9})
    error("boom")
  end)
  t.ok(not ok, "the scope failed")
  local r <close> = mp.h5.open(p)
  t.ok(r:has("x") and not r:has("y"), "the old file is kept after an error")
  r:close()
  -- a handle dropped without close is not committed
  do local h = mp.h5.open(p, "w"); h:write("z", mp.tensor{1}) end
  collectgarbage(); collectgarbage()
  local r2 <close> = mp.h5.open(p)
  t.ok(r2:has("x") and not r2:has("z"), "an unclosed handle is thrown away")
  r2:close()
  t.ok(tmp_count(dir) == 0, "no temporary left")
  os.remove(p)
end)

t.case("t:save is atomic", function()
  local p = dir .. "/save.h5"
  mp.tensor{1, 2}:save(p, "a")
  mp.tensor{{3, 4}}:save(p, "b")
  local f <close> = mp.h5.open(p)
  t.deep_eq(f:read("a"):totable(), {1, 2})
  t.deep_eq(f:read("b"):totable(), {{3, 4}})
  f:close()
  -- a write that fails (a bad dataset name) leaves the file as it was
  local before = slurp(p)
  t.expect_error(function() mp.tensor{5}:save(p, "/") end, "", "a bad dataset name")
  t.ok(slurp(p) == before, "the file is unchanged after a failed save")
  -- a file that is not HDF5 is refused, not replaced
  spit(dir .. "/text.h5", "not hdf5")
  t.expect_error(function() mp.tensor{5}:save(dir .. "/text.h5", "x") end, "not an HDF5 file")
  t.ok(slurp(dir .. "/text.h5") == "not hdf5", "the non-HDF5 file is unchanged")
  t.ok(tmp_count(dir) == 0, "no temporary left")
  os.remove(p); os.remove(dir .. "/text.h5")
end)

t.case("capture --out equal to --model is refused", function()
  local m = dir .. "/model.bin"
  assert(os.execute(("cp %s %s"):format(q(data .. "/ref_tied.bin"), q(m))))
  local before = slurp(m)
  for _, out in ipairs{m, dir .. "/./model.bin"} do
    local errf = dir .. "/stderr.txt"
    local ok = os.execute(("timeout 60 %s capture --model %s --tokens 1,2,3 --out %s >/dev/null 2>%s"):format(
      exe, q(m), q(out), q(errf)))
    local err = slurp(errf)
    t.ok(not ok and err:find("same file as the input", 1, true), "refused: " .. err)
  end
  t.ok(slurp(m) == before, "the model is unchanged")
  t.ok(tmp_count(dir) == 0, "no temporary left")
end)

os.execute("rm -rf " .. q(dir))
t.finish("test_outputs2_lua")
