-- views_zero.lua — Tensors with no elements but a huge extent ({2^50, 0, 5}:
-- possible from mp.zeros, reshape or an HDF5 file) must not make an op loop
-- over the huge outer extent: each op below returns at once (the test's ctest
-- TIMEOUT turns a regression into a failure), with the right shape, or raises
-- a clear error where the answer would be that many Lua tables; and shapes
-- whose non-zero extents multiply past the addressable size are refused where
-- Tensors are made. `mechprobe views_zero.lua OP` runs one case (by hand).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local only = arg[1]

local H = 1 << 50
local function shape_is(x, want, what)
  t.deep_eq(x:shape(), want, what)
end

local cases = {}
local function case(name, fn) cases[#cases + 1] = {name, fn} end

case("totable", function()
  t.deep_eq(mp.zeros{3, 0}:totable(), {{}, {}, {}}, "{3, 0} is three empty tables")
  t.deep_eq(mp.zeros{0, H}:totable(), {}, "{0, 2^50} is one empty table")
  t.expect_error(function() return mp.zeros{H, 0}:totable() end, "empty tables", "{2^50, 0}")
end)
case("cat", function()
  local a = mp.zeros{H, 0}
  shape_is(mp.cat({a, a}, 2), {H, 0}, "cat along the empty dim")
  shape_is(mp.cat({a, a}, 1), {2 * H, 0}, "cat along the huge dim")
  local b = mp.zeros{H, 0, 5}
  shape_is(mp.cat({b, b}, 3), {H, 0, 10}, "cat after an empty dim")
end)
case("stack", function()
  local b = mp.zeros{H, 0, 5}
  shape_is(mp.stack({b, b}, 3), {H, 0, 2, 5}, "stack")
end)
case("topk", function()
  -- its indices would be 2^50 empty tables: an error, at once
  t.expect_error(function() return mp.zeros{H, 3, 0}:topk(0, 2) end, "empty tables", "topk, k = 0, middle dim")
  local v, i = mp.zeros{H, 0}:topk(0, 1)
  shape_is(v, {0, 0}, "topk over the huge dim")
  t.deep_eq(i, {}, "no indices")
end)
case("log_softmax", function()
  shape_is(mp.zeros{H, 0}:log_softmax(2), {H, 0}, "log_softmax over the empty dim")
  shape_is(mp.zeros{H, 0}:log_softmax(1), {H, 0}, "log_softmax over the huge dim")
end)
case("softmax", function()
  shape_is(mp.zeros{H, 0}:softmax(-1), {H, 0}, "softmax")
end)
case("sum", function()
  shape_is(mp.zeros{H, 3, 0}:sum(2), {H, 0}, "sum over a middle dim")
  shape_is(mp.zeros{H, 3, 0}:mean(2, true), {H, 1, 0}, "mean, keepdim")
end)
case("var", function()
  shape_is(mp.zeros{H, 3, 0}:var(2), {H, 0}, "var")
  shape_is(mp.zeros{H, 3, 0}:std(2), {H, 0}, "std")
end)
case("norm", function()
  shape_is(mp.zeros{H, 3, 0}:norm(2, 2), {H, 0}, "norm over a dim")
  t.ok(mp.zeros{H, 0}:norm() == 0, "the norm of nothing")
end)
case("max", function()
  -- values and indices: the indices would be 2^50 empty tables
  t.expect_error(function() return mp.zeros{H, 3, 0}:max(2) end, "empty tables", "max over a dim")
  t.expect_error(function() return mp.zeros{H, 3, 0}:argmin(2) end, "empty tables", "argmin over a dim")
end)
case("cos_sim", function()
  local a = mp.zeros{H, 3, 0}
  shape_is(a:cos_sim(a, 2), {H, 0}, "cos_sim over a middle dim")
end)
case("index_select", function()
  shape_is(mp.zeros{H, 0, 5}:index_select(2, {}), {H, 0, 5}, "no index along an empty dim")
end)
case("slice", function()
  shape_is(mp.zeros{H, 0, 5}:slice(2, 1, 0, 2), {H, 0, 5}, "a stepped slice of an empty dim")
  shape_is(mp.zeros{7}:slice(1, 2, 7, math.maxinteger), {1}, "a step of maxinteger is one row")
end)
case("overflow", function()
  t.expect_error(function() return mp.zeros{H, 0, H} end, "Tensor size overflows", "{2^50, 0, 2^50}")
  t.expect_error(function() return mp.zeros{0}:reshape(0, H, H) end, "Tensor size overflows", "reshape")
  -- an extent past MP_TENSOR_NUMEL_MAX (2^62 - 1) is refused by the integer reader itself
  t.expect_error(function() return mp.zeros{math.maxinteger, 0} end,
    "mp.zeros: argument #1 (shape)[1] must be an integer in [0, 4611686018427387903], got " .. math.maxinteger,
    "an extent past 2^62")
  shape_is(mp.zeros{H, 0, 1024}, {H, 0, 1024}, "a product that fits is fine")
end)

for _, c in ipairs(cases) do
  if not only or only == c[1] then
    local t0 = os.clock()
    t.case(c[1], c[2])
    local dt = os.clock() - t0
    t.ok(dt < 5, ("%s took %.1f s of CPU (limit 5)"):format(c[1], dt))
  end
end
t.finish("views_zero")
