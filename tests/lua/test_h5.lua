-- test_h5.lua — HDF5 files from Lua (lua/lh5.c, t:save in lua/ltensor.c):
-- write/read round trips, attributes, listing, modes and errors, and reading
-- a run file written by an independent writer (h5py: tests/data/ref_tied.h5).
-- Values are float32 copies, so round trips compare exactly.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, expect_error, deep_eq = t.case, t.expect_error, t.deep_eq
local data = os.getenv("MP_TESTDATA") or "tests/data"
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))

local path = dir .. "/t.h5"

check("write and read back", function()
  local f <close> = mp.h5.open(path, "w")
  assert(tostring(f):find("t.h5, w", 1, true), tostring(f))
  local t = mp.tensor{{1.5, -2, 3}, {4, 5, 6.25}}
  f:write("/a/b/x", t)
  f:write("y", {7, 8, 9}, {compress = 6})
  f:write("/a/b/x", t:mul(2)) -- replace
  local x = f:read("/a/b/x")
  deep_eq(x:totable(), {{3, -4, 6}, {8, 10, 12.5}})
  deep_eq(f:read("y"):totable(), {7, 8, 9})
  deep_eq(f:shape("/a/b/x"), {2, 3})
  f:close()
  f:close() -- idempotent
  expect_error(function() f:read("y") end, "H5 file is closed", "use after close")
end)

check("attributes", function()
  local f <close> = mp.h5.open(path, "r+")
  f:set_attr("/", "name", "probe run")
  f:set_attr("/", "n", 42)
  f:set_attr("/", "eps", 1e-5)
  f:set_attr("/", "flag", true)
  f:set_attr("/a/b/x", "ints", {1, -2, 3})
  f:set_attr("/a/b/x", "floats", {0.5, 1, 2})
  f:set_attr("/a", "vec", mp.tensor{0.25, 0.5})
  f:set_attr("/", "n", 43) -- replace
  local r = f:attrs()
  assert(r.name == "probe run" and r.n == 43 and math.type(r.n) == "integer", "root attrs")
  assert(r.eps == 1e-5 and r.flag == 1, "float and boolean attrs")
  local xa = f:attrs("/a/b/x")
  deep_eq(xa.ints, {1, -2, 3})
  deep_eq(xa.floats, {0.5, 1.0, 2.0})
  assert(math.type(xa.ints[1]) == "integer" and math.type(xa.floats[2]) == "float", "array element types")
  deep_eq(f:attrs("a").vec, {0.25, 0.5})
  expect_error(function() f:attrs("/nope") end, "/nope", "attrs of a missing object")
  expect_error(function() f:set_attr("/", "bad", function() end) end, "number, string, boolean", "function value")
end)

check("list and has", function()
  local f <close> = mp.h5.open(path)
  deep_eq(f:list(), {"a", "y"})
  deep_eq(f:list("/a/b"), {"x"})
  local ok, kind = f:has("/a/b")
  assert(ok and kind == "group", "has group")
  ok, kind = f:has("y")
  assert(ok and kind == "dataset", "has dataset")
  assert(not f:has("/a/c/d"), "missing path")
  expect_error(function() f:list("/y") end, "not a group", "list of a dataset")
  expect_error(function() f:list("/zz") end, "no such group", "list of a missing group")
end)

check("modes and errors", function()
  local f <close> = mp.h5.open(path, "r")
  expect_error(function() f:write("z", {1}) end, "read-only", "write to read-only")
  expect_error(function() f:read("/nope/x") end, "/nope/x", "missing dataset is named")
  expect_error(function() f:read("/a") end, "not a dataset", "group read as dataset")
  expect_error(function() mp.h5.open(dir .. "/missing.h5") end, dir .. "/missing.h5: cannot open", "missing file")
  expect_error(function() mp.h5.open(path, "x") end, "invalid option", "bad mode")
  local txt = dir .. "/text.h5"
  local h = assert(io.open(txt, "w")); h:write("hello\n"); h:close()
  expect_error(function() mp.h5.open(txt) end, "not an HDF5 file", "text file")
  expect_error(function() mp.h5.open(dir .. "/no/dir/x.h5", "w") end, dir .. "/no/dir/x.h5", "create in a missing dir")
end)

check("gc closes files", function()
  -- HDF5 refuses to open a file read-write while this process has it open
  -- read-only, so the second open shows that collecting the first closed it.
  local f = mp.h5.open(path, "r")
  assert(f:has("y"))
  f = nil
  collectgarbage(); collectgarbage()
  local g <close> = mp.h5.open(path, "r+")
  g:write("gc", {1})
  deep_eq(g:read("gc"):totable(), {1})
end)

check("Tensor:save", function()
  local p = dir .. "/saved.h5"
  local t = mp.tensor{{1, 2}, {3, 4}}
  t:save(p, "/stats/m")
  t:mul(10):save(p, "/stats/m10", {compress = 4})
  t:save(p, "/stats/m") -- replace in an existing file
  local f <close> = mp.h5.open(p)
  deep_eq(f:read("/stats/m"):totable(), {{1, 2}, {3, 4}})
  deep_eq(f:read("/stats/m10"):totable(), {{10, 20}, {30, 40}})
  expect_error(function() t:save(dir .. "/no/dir/s.h5", "x") end, "no/dir/s.h5", "save into a missing dir")
end)

check("read an h5py-written run file", function()
  local f <close> = mp.h5.open(data .. "/ref_tied.h5")
  local root = f:attrs()
  assert(root.format == "mechprobe.run" and root.version == 1, "root attrs")
  local model = f:attrs("/model")
  local tok = f:read_int("/tokens")
  local tokf = f:read("/tokens")     -- int32 dataset converted to float
  local B, T = #tok, #tok[1]
  deep_eq(tokf:shape(), {B, T})
  for b = 1, B do
    for t = 1, T do
      assert(math.type(tok[b][t]) == "integer", "read_int gives integers")
      assert(tokf:get(b, t) == tok[b][t], "float and int reads agree")
      assert(tok[b][t] >= 0 and tok[b][t] < model.vocab, "token in vocab")
    end
  end
  local logits = f:read("/logits")
  deep_eq(logits:shape(), {B, T, model.vocab})
  local emb = f:read("/acts/blocks.0.hook_resid_pre")
  deep_eq(emb:shape(), {B, T, model.d_model})
  local pat = f:read("/acts/blocks.0.attn.hook_pattern")
  deep_eq(pat:shape(), {B, model.n_head, T, T})
  -- each attention row sums to 1 (tolerance 1e-5: float32 softmax)
  for h = 1, model.n_head do
    for q = 1, T do
      local s = pat[1][h][q]:sum()
      assert(math.abs(s - 1) < 1e-5, ("pattern row %d,%d sums to %g"):format(h, q, s))
    end
  end
  local acts = f:list("/acts")
  assert(#acts > 10, "acts listed")
  -- totable and sum agree (double accumulation both ways; 1e-9 relative)
  local s = 0
  for _, row in ipairs(logits[1]:totable()) do for _, v in ipairs(row) do s = s + v end end
  assert(math.abs(logits:sum() - s) <= 1e-9 * math.max(1, math.abs(s)), "sum")
end)

t.case("delete: a group with what is under it, a dataset; errors name the object", function()
  local path = dir .. "/delete.h5"
  do
    local f <close> = mp.h5.open(path, "w")
    f:write("g/x", {1, 2}); f:write("g/sub/y", {3}); f:write("keep", {4, 5, 6}); f:set_attr("g", "note", "hi")
    f:delete("g")
    assert(not f:has("g") and not f:has("g/sub/y"), "the group and everything under it are gone")
    f:write("g/x", {7})                                   -- the name can be used again
    f:delete("keep")
    t.expect_error(function() f:delete("keep") end, "keep: no such object", "deleting twice")
    t.expect_error(function() f:delete("/") end, "the root group cannot be deleted", "the root")
  end
  local f <close> = mp.h5.open(path, "r")
  assert(f:read("g/x"):tolist()[1] == 7 and not f:has("keep") and f:attrs("g").note == nil, "as written after the deletes")
  t.expect_error(function() f:delete("g") end, "opened read-only", "a read-only file")
end)

os.execute("rm -rf " .. dir)
t.finish("test_h5")
