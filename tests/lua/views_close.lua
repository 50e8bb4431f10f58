-- views_close.lua — a Tensor closed (a <close> variable) by Lua code that one of
-- its own methods runs while reading its arguments (an options table's
-- __index, a dims table's __len) must not be read afterwards: var, std and
-- save read their options before the Tensor (the call then raises "Tensor is
-- no longer valid (it was closed)"), permute reads its dims table raw (no
-- metamethod runs).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

-- An options table whose every read closes x.
local function closer(x)
  return setmetatable({}, {__index = function() local _ <close> = x end})
end
local CLOSED = "Tensor is no longer valid (it was closed)"

t.case("var and std: options that close the Tensor", function()
  local x = mp.ones{64, 64}
  t.expect_error(function() return x:var(1, closer(x)) end, CLOSED, "var")
  local y = mp.ones{64, 64}
  t.expect_error(function() return y:std(2, closer(y)) end, CLOSED, "std")
  local z = mp.tensor{{1, 2}, {3, 5}}
  t.near(z:var(1, {unbiased = false})[2], 2.25, 0, "plain options still work")
end)

t.case("save: options that close the Tensor", function()
  local x = mp.ones{64, 64}
  local path = os.tmpname() .. ".h5"
  t.expect_error(function() x:save(path, "x", closer(x)) end, CLOSED, "save")
  os.remove(path)
end)

t.case("permute: a dims table whose __len closes the Tensor", function()
  local x = mp.ones{64, 64}
  local dims = setmetatable({}, {__len = function() local _ <close> = x; return 2 end,
                                 __index = function(_, k) return 3 - k end})
  t.expect_error(function() return x:permute(dims) end, "0 dims given for a 2-dim Tensor", "read raw")
  t.ok(x:sum() == 64 * 64, "x is still open: the metamethods did not run")
  t.deep_eq(mp.tensor{{1, 2}}:permute{2, 1}:totable(), {{1}, {2}}, "a plain dims table")
end)

t.finish("views_close")
