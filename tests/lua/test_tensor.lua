-- test_tensor.lua — the Lua Tensor type (lua/ltensor.c): constructors, shape,
-- element access, views sharing memory, arithmetic, reductions and errors.
-- References are computed here in plain Lua (double precision); values pass
-- through float32, so comparisons use a tolerance of 1e-6 relative (stated per
-- check), exact where no rounding can happen (small integers).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near, expect_error, deep_eq = t.case, t.near, t.expect_error, t.deep_eq
check("construct from nested table", function()
  local t = mp.tensor{{1, 2, 3}, {4, 5, 6}}
  deep_eq(t:shape(), {2, 3})
  assert(tostring(t) == "Tensor[2,3] float32", tostring(t))
  assert(#t == 2 and t.ndim == 2 and t:dim() == 2 and t:numel() == 6, "shape facts")
  assert(t:size(1) == 2 and t:size(2) == 3 and t:size(-1) == 3, "size")
  deep_eq(t:totable(), {{1, 2, 3}, {4, 5, 6}})
  assert(mp.is_tensor(t) and not mp.is_tensor({}), "is_tensor")
  local c = mp.tensor(t)
  c:set(0, 1, 1)
  assert(t:get(1, 1) == 1, "mp.tensor(t) copies")
end)

check("zeros, ones, full", function()
  deep_eq(mp.zeros{2, 3}:shape(), {2, 3})
  deep_eq(mp.zeros(2, 3):shape(), {2, 3})
  assert(mp.zeros{2, 3}:sum() == 0, "zeros")
  assert(mp.ones(4):sum() == 4, "ones")
  local f = mp.full({2, 2}, 2.5)
  assert(f:sum() == 10 and f:get(2, 2) == 2.5, "full")
  local e = mp.zeros{0}
  assert(e:numel() == 0 and #e == 0 and e:sum() == 0, "empty tensor")
  expect_error(function() e:max() end, "empty", "max of empty")
  expect_error(function() mp.zeros{-1} end, "mp.zeros: argument #1 (shape)[1] must be an integer in [0, 4611686018427387903], got -1", "negative extent")
  expect_error(function() mp.zeros() end, "shape expected", "no shape")
end)

check("float32 storage", function()
  local t = mp.tensor{0.1}
  near(t:get(1), 0.1, 1e-8, "0.1 as float32")
  assert(t:get(1) ~= 0.1, "values are float32, not double")
end)

check("get/set and index errors", function()
  local t = mp.zeros{2, 3}
  t:set(7, 2, 3)
  assert(t:get(2, 3) == 7 and t:get(-1, -1) == 7, "set then get (negative = from the end)")
  assert(t:set(1, 1, 1) == t, "set returns the tensor")
  expect_error(function() t:get(1, 4) end, "get: argument #2 (index into dim 2) must be an integer in [-3, -1] or [1, 3], got 4", "column 4")
  expect_error(function() t:get(3, 1) end, "get: argument #1 (index into dim 1) must be an integer in [-2, -1] or [1, 2], got 3", "row 3")
  expect_error(function() t:get(1) end, "needs 2 indices, got 1", "too few indices")
  expect_error(function() t:get(1, "x") end, "get: argument #2 (index into dim 2) must be an integer in [-3, -1] or [1, 3], got string", "non-numeric index")
end)

check("views share memory", function()
  local t = mp.tensor{{1, 2, 3}, {4, 5, 6}}
  local row = t[2]
  assert(tostring(row) == "Tensor[3] float32", tostring(row))
  row:set(40, 1)
  assert(t:get(2, 1) == 40, "write through select view")
  assert(t[1][3] == 3 and t[-1][-1] == 6, "1-D index gives numbers")
  assert(t:select(1):sum() == 6, "select")
  t[1] = {7, 8, 9}
  deep_eq(t:totable(), {{7, 8, 9}, {40, 5, 6}})
  t[2] = 0
  deep_eq(t[2]:totable(), {0, 0, 0})
  row[2] = 5
  assert(t:get(2, 2) == 5, "__newindex on a 1-D view")
  expect_error(function() t[3] = 1 end, "t[i] = v: i must be an integer in [-2, -1] or [1, 2], got 3", "row 3 assignment")
  expect_error(function() t[1] = {1, 2} end, "differ", "shape mismatch in assignment")
  expect_error(function() t.foo = 1 end, "cannot set field", "string key assignment")
  assert(t.nosuchmethod == nil, "unknown field is nil")
end)

check("view outlives its parent", function()
  local v = mp.tensor{{1, 2}, {3, 4}}[2]
  collectgarbage(); collectgarbage()
  v:set(9, 1)
  deep_eq(v:totable(), {9, 4})
end)

check("narrow and reshape", function()
  local t = mp.tensor{{1, 2}, {3, 4}, {5, 6}, {7, 8}}
  local n = t:narrow(2, 2)
  deep_eq(n:totable(), {{3, 4}, {5, 6}})
  n:fill_(0)
  assert(t:sum() == 1 + 2 + 7 + 8, "narrow is a view")
  deep_eq(t:narrow(5, 0):shape(), {0, 2})
  expect_error(function() t:narrow(4, 2) end, "narrow: argument #2 (length) must be an integer in [0, 1], got 2", "narrow past the end")
  expect_error(function() t:narrow(6, 1) end, "narrow: argument #1 (start) must be an integer in [-4, -1] or [1, 5], got 6", "narrow start")
  local r = t:reshape{2, 4}
  deep_eq(r:shape(), {2, 4})
  r:set(100, 1, 1)
  assert(t:get(1, 1) == 100, "reshape is a view")
  deep_eq(t:reshape(-1):shape(), {8})
  deep_eq(t:reshape(2, -1, 2):shape(), {2, 2, 2})
  expect_error(function() t:reshape{3, 3} end, "has 9 elements", "bad reshape")
  expect_error(function() t:reshape{-1, -1} end, "at most one", "two -1")
end)

check("clone, copy_, fill_", function()
  local t = mp.tensor{1, 2, 3}
  local c = t:clone()
  c:fill_(5)
  assert(t:sum() == 6 and c:sum() == 15, "clone is independent")
  t:copy_(c)
  assert(t:sum() == 15, "copy_ from tensor")
  t:copy_{1, 1, 1}
  assert(t:sum() == 3, "copy_ from table")
  expect_error(function() t:copy_{1, 2} end, "shapes [3] and [2] differ", "copy_ shape")
end)

check("arithmetic", function()
  local a = mp.tensor{{1, 2}, {3, 4}}
  local b = mp.tensor{{10, 20}, {30, 40}}
  deep_eq(a:add(b):totable(), {{11, 22}, {33, 44}})
  deep_eq(b:sub(a):totable(), {{9, 18}, {27, 36}})
  deep_eq(a:mul(b):totable(), {{10, 40}, {90, 160}})
  deep_eq(a:mul(2):totable(), {{2, 4}, {6, 8}})
  deep_eq(a:add(1):totable(), {{2, 3}, {4, 5}})
  deep_eq(b:div(a):totable(), {{10, 10}, {10, 10}})
  deep_eq((a + b):totable(), {{11, 22}, {33, 44}})
  deep_eq((b - a):totable(), {{9, 18}, {27, 36}})
  deep_eq((2 * a):totable(), {{2, 4}, {6, 8}})
  deep_eq((10 - a):totable(), {{9, 8}, {7, 6}})
  deep_eq((-a):totable(), {{-1, -2}, {-3, -4}})
  deep_eq(a:totable(), {{1, 2}, {3, 4}}, "a unchanged")
  local c = a:clone()
  assert(c:add_(b) == c, "add_ returns self")
  deep_eq(c:totable(), {{11, 22}, {33, 44}})
  c:sub_(b):mul_(3)
  deep_eq(c:totable(), {{3, 6}, {9, 12}})
  c:mul_(a)
  deep_eq(c:totable(), {{3, 12}, {27, 48}})
  c:add_(c)
  deep_eq(c:totable(), {{6, 24}, {54, 96}}, "aliased add_")
  c:add_{{1, 1}, {1, 1}}
  assert(c:get(1, 1) == 7, "add_ with a table")
  expect_error(function() a:add(mp.zeros{2, 3}) end, "shapes [2,2] and [2,3] differ", "shape mismatch")
  expect_error(function() a:add_("x") end, "Tensor or table", "bad operand")
end)

check("reductions against plain Lua", function()
  local vals, n = {}, 1000
  for i = 1, n do vals[i] = math.sin(i) * 3 + (i % 7) * 0.25 end
  local t = mp.tensor(vals)
  local s, mx, mn, am, sq = 0, -math.huge, math.huge, 0, 0
  for i = 1, n do
    local v = t:get(i) -- the float32 value
    s = s + v; sq = sq + v * v
    if v > mx then mx = v; am = i end
    if v < mn then mn = v end
  end
  near(t:sum(), s, 1e-9 * n, "sum")
  near(t:mean(), s / n, 1e-9, "mean")
  assert(t:max() == mx and t:min() == mn, "max/min exact")
  assert(t:argmax() == am, ("argmax %d vs %d"):format(t:argmax(), am))
  near(t:norm(), math.sqrt(sq), 1e-9 * math.sqrt(sq), "norm")
  near(t:dot(t), sq, 1e-9 * sq, "dot with itself")
  local u = mp.ones(n)
  near(t:dot(u), s, 1e-9 * n, "dot with ones")
  expect_error(function() t:dot(mp.ones(3)) end, "differ", "dot shapes")
end)

check("reductions over the last dim", function()
  local t = mp.tensor{{1, 5, 2}, {7, 0, 9}}
  deep_eq(t:argmax(-1), {2, 3})
  deep_eq(t:sum(-1):totable(), {8, 16})
  deep_eq(t:max(-1):totable(), {5, 9})
  deep_eq(t:min(-1):totable(), {1, 0})
  near(t:mean(-1):get(1), 8 / 3, 1e-6, "row mean")
  assert(t:argmax() == 6, "flat argmax is 1-based")
  local t3 = mp.tensor{{{1, 2}, {4, 3}}, {{0, 0}, {5, 6}}}
  deep_eq(t3:argmax(-1), {{2, 1}, {1, 2}})
  deep_eq(t3:sum(-1):shape(), {2, 2})
  assert(mp.tensor{3, 9, 1}:argmax(-1) == 2, "1-D argmax(-1) is a number")
  deep_eq(t:sum(1):totable(), {8, 5, 11}, "other dims reduce too (tests/lua/test_tensor_ops.lua)")
end)

check("ragged and bad tables", function()
  expect_error(function() mp.tensor{{1, 2}, {3}} end, "ragged", "ragged")
  expect_error(function() mp.tensor{{1, 2}, 3} end, "expected a table", "mixed depth")
  expect_error(function() mp.tensor{1, "x"} end, "expected a number", "string element")
  expect_error(function() mp.tensor(3) end, "table expected", "number")
end)

check("closed tensors raise", function()
  local t = mp.zeros{3}
  local v = t:narrow(1, 2)
  do
    local c <close> = t
  end
  expect_error(function() t:sum() end, "no longer valid", "use after close")
  assert(tostring(t) == "Tensor(invalid)", tostring(t))
  getmetatable(t).__gc(t) -- idempotent
  assert(v:sum() == 0, "a view keeps the storage alive")
  expect_error(function() mp.zeros{2}:add(t) end, "no longer valid", "closed operand")
end)

check("wrong self", function()
  local t = mp.zeros{2}
  expect_error(function() t.sum({}) end, "Tensor expected", "table as self")
end)

check("permute copies with the dims reordered", function()
  local t = mp.zeros{2, 3, 4}
  for i = 1, 2 do for j = 1, 3 do for k = 1, 4 do t:set(100 * i + 10 * j + k, i, j, k) end end end
  local p = t:permute{2, 3, 1}
  deep_eq(p:shape(), {3, 4, 2})
  for i = 1, 2 do for j = 1, 3 do for k = 1, 4 do
    assert(p:get(j, k, i) == t:get(i, j, k), "element")
  end end end
  p:set(0, 1, 1, 1)
  assert(t:get(1, 1, 1) == 111, "a copy, not a view")
  expect_error(function() t:permute{1, 1, 2} end, "not a permutation", "repeated dim")
  expect_error(function() t:permute{1, 2} end, "2 dims given", "wrong count")
end)

t.finish("test_tensor")
