-- h5trust_deep.lua — 2000 nested groups (h5trust/deep.h5): opening is refused
-- by the check (objects nested more than 64 groups deep) in modes "r", "r+"
-- and "a" alike; opened as trusted,
-- a path of 2000 components is refused at once by every method (looking each
-- prefix up costs the square of the depth: minutes); 64 components still work.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, expect_error, deep_eq = t.case, t.expect_error, t.deep_eq
local path = "h5trust/deep.h5"

check("a file nested 2000 deep is refused on open", function()
  local t0 = os.time()
  expect_error(function() mp.h5.open(path) end, path .. ": /: objects nested more than 64 groups deep", "open")
  expect_error(function() mp.h5.open(path, "r+") end, "objects nested more than 64 groups deep", "open r+")
  expect_error(function() mp.h5.open(path, "a", {trusted = false}) end, "objects nested more than 64 groups deep", "open a")
  assert(os.time() - t0 < 10, "refused in seconds")
end)

check("paths deeper than 64 groups are refused", function()
  local f <close> = mp.h5.open(path, {trusted = true})
  local deep = ("/g"):rep(2000) .. "/x"
  deep_eq(f:list("/"), {"g"})
  for _, m in ipairs{"read", "read_int", "shape", "has", "attrs", "list"} do
    expect_error(function() f[m](f, deep) end, path .. ": /g/g/g", m)
    expect_error(function() f[m](f, deep) end, "path deeper than 64 groups (refused)", m)
  end
end)

check("64 components are fine", function()
  local f <close> = mp.h5.open("h5trust/deep64.h5", "r")
  deep_eq(f:read(("/g"):rep(63) .. "/x"):totable(), {1, 2, 3})
  local g <close> = mp.h5.open("h5trust/deep64.h5", {mode = "r", trusted = false})
  deep_eq(g:shape(("/g"):rep(63) .. "/x"), {3})
end)

t.finish("h5trust_deep")
