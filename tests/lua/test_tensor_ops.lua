-- test_tensor_ops.lua — the Tensor's torch-style operations (lua/ltensor_ops.c,
-- lua/ltensor_math.c): matmul and batched matmul, transposes and views, slicing
-- along any dim, cat/stack, broadcasting arithmetic, elementwise functions,
-- softmax, reductions over every dim with keepdim, topk, ranges, cosine
-- similarity, allclose, and the error messages.
-- Every reference is computed here in plain Lua loops (double precision) from
-- the float32 values the Tensor holds. Tolerances: exact where the operation
-- only moves values; sums of products |ref - got| <= 1e-5 * sum |terms| + 1e-6
-- (float32 accumulation in sgemm); functions computed in double and rounded
-- to float32: 2e-7 relative (+1e-7 absolute).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near, expect_error, deep_eq = t.case, t.near, t.expect_error, t.deep_eq

-- ---- helpers ----

local rand = t.lcg(12345) -- deterministic uniform in [-1, 1)

local numel, each = t.numel, t.each

local function randt(shape)
  local x = mp.zeros(shape)
  each(shape, function(idx) x:set(rand(), table.unpack(idx)) end)
  return x
end

local function at(x, idx) return x:get(table.unpack(idx)) end

local function copy(idx) return {table.unpack(idx)} end

local function shape_eq(x, shape, what) deep_eq(x:shape(), shape, what or "shape") end

-- the index into a broadcast operand of shape s for the output index idx
local function bidx(s, idx)
  local off, r = #idx - #s, {}
  for i = 1, #s do r[i] = s[i] == 1 and 1 or idx[i + off] end
  return r
end

-- ---- matmul ----

-- torch.matmul in plain Lua: returns the result shape and a function idx -> value, bound
local function ref_matmul(a, b)
  local sa, sb = a:shape(), b:shape()
  local a1, b1 = #sa == 1, #sb == 1
  local pa = a1 and {1, sa[1]} or sa
  local pb = b1 and {sb[1], 1} or sb
  local n, k, m = pa[#pa - 1], pa[#pa], pb[#pb]
  local ba, bb = {}, {}
  for i = 1, #pa - 2 do ba[i] = pa[i] end
  for i = 1, #pb - 2 do bb[i] = pb[i] end
  local nb = math.max(#ba, #bb)
  local bs = {}
  for i = 1, nb do
    local ea = ba[i - (nb - #ba)] or 1
    local eb = bb[i - (nb - #bb)] or 1
    bs[i] = ea == 1 and eb or ea
  end
  local shape = {}
  for i = 1, nb do shape[i] = bs[i] end
  if not a1 then shape[#shape + 1] = n end
  if not b1 then shape[#shape + 1] = m end
  local function value(idx)
    local bi = {}
    for i = 1, nb do bi[i] = idx[i] end
    local i = a1 and 1 or idx[nb + 1]
    local j = b1 and 1 or idx[#idx]
    local s, bound = 0, 0
    for kk = 1, k do
      local ia, ib = bidx(ba, bi), bidx(bb, bi)
      if a1 then ia = {kk} else ia[#ia + 1] = i; ia[#ia + 1] = kk end
      if b1 then ib = {kk} else ib[#ib + 1] = kk; ib[#ib + 1] = j end
      local p = at(a, ia) * at(b, ib)
      s = s + p
      bound = bound + math.abs(p)
    end
    return s, bound
  end
  return shape, value
end

check("matmul against a triple loop", function()
  local cases = {
    {{3, 4}, {4, 5}}, {{17, 33}, {33, 9}}, {{4}, {4, 5}}, {{3, 4}, {4}}, {{2, 3, 4}, {4, 5}},
    {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{4}, {2, 4, 5}}, {{2, 3, 4}, {4}},
    {{3, 4}, {2, 4, 5}}, {{1, 4}, {4, 1}}, {{2, 3, 0}, {0, 2}},
  }
  for _, c in ipairs(cases) do
    local a, b = randt(c[1]), randt(c[2])
    local shape, value = ref_matmul(a, b)
    local r = a:matmul(b)
    local what = ("matmul %s x %s"):format(table.concat(c[1], ","), table.concat(c[2], ","))
    shape_eq(r, shape, what)
    each(shape, function(idx)
      local v, bound = value(idx)
      near(at(r, idx), v, 1e-5 * bound + 1e-6, what)
    end)
    local r2 = mp.matmul(a, b)
    each(shape, function(idx) assert(at(r2, idx) == at(r, idx), "mp.matmul = a:matmul") end)
  end
  local u, v = randt{7}, randt{7}
  local s = 0
  for i = 1, 7 do s = s + u:get(i) * v:get(i) end
  near(u:matmul(v), s, 1e-12, "1-D . 1-D is a number")
  local x = mp.matmul({{1, 2}, {3, 4}}, {{5}, {6}})
  deep_eq(x:totable(), {{17}, {39}}, "tables convert")
  local a, b = randt{3, 4}, randt{4, 2}
  deep_eq(a:mm(b):totable(), a:matmul(b):totable(), "mm = matmul for 2-D")
end)

check("matmul errors name both shapes", function()
  expect_error(function() return randt{3, 4}:matmul(randt{5, 2}) end,
    "matmul: shapes [3,4] and [5,2] do not multiply (4 columns against 5 rows)", "inner dims")
  expect_error(function() return mp.matmul(randt{2, 3, 4}, randt{3, 4, 5}) end,
    "mp.matmul: shapes [2,3,4] and [3,4,5] have batch dims that do not broadcast", "batch dims")
  expect_error(function() return randt{3}:matmul(randt{4}) end, "shapes [3] and [4] differ", "1-D")
  expect_error(function() return randt{2, 3, 4}:mm(randt{4, 2}) end, "mm: shapes [2,3,4] and [4,2] are not both 2-D",
    "mm is 2-D only")
end)

-- ---- transposes and views ----

check("transpose, t, permute", function()
  local x = randt{2, 3, 4}
  local y = x:transpose(1, 3)
  shape_eq(y, {4, 3, 2})
  each({2, 3, 4}, function(i) assert(y:get(i[3], i[2], i[1]) == at(x, i), "transpose(1, 3)") end)
  local z = x:transpose(-1, -2)
  shape_eq(z, {2, 4, 3})
  each({2, 3, 4}, function(i) assert(z:get(i[1], i[3], i[2]) == at(x, i), "transpose(-1, -2)") end)
  local p = x:permute(3, 1, 2)
  each({2, 3, 4}, function(i) assert(p:get(i[3], i[1], i[2]) == at(x, i), "permute varargs") end)
  deep_eq(x:permute{-1, 1, 2}:totable(), p:totable(), "negative dims in permute")
  local m = randt{3, 5}
  local mt = m:t()
  shape_eq(mt, {5, 3})
  each({3, 5}, function(i) assert(mt:get(i[2], i[1]) == at(m, i), "t()") end)
  mt:set(99, 1, 1)
  assert(m:get(1, 1) ~= 99, "t() is a copy")
  deep_eq(mp.tensor{1, 2}:t():totable(), {1, 2}, "t() of a 1-D Tensor")
  expect_error(function() return x:t() end, "t: needs a Tensor of at most 2 dims, got [2,3,4]", "t of 3-D")
  expect_error(function() return x:transpose(1, 4) end, "transpose: argument #2 (dim) must be an integer in [-3, -1] or [1, 3], got 4", "dim range")
end)

check("view, unsqueeze, squeeze, flatten share memory", function()
  local x = randt{2, 3, 4}
  shape_eq(x:view(6, 4), {6, 4})
  shape_eq(x:view{-1}, {24})
  shape_eq(x:unsqueeze(1), {1, 2, 3, 4})
  shape_eq(x:unsqueeze(3), {2, 3, 1, 4})
  shape_eq(x:unsqueeze(-1), {2, 3, 4, 1})
  shape_eq(x:unsqueeze(4), {2, 3, 4, 1})
  shape_eq(x:unsqueeze(-4), {1, 2, 3, 4})
  local s = mp.zeros{1, 3, 1, 2}
  shape_eq(s:squeeze(), {3, 2})
  shape_eq(s:squeeze(3), {1, 3, 2})
  shape_eq(s:squeeze(2), {1, 3, 1, 2}, "squeeze of a dim that is not 1 changes nothing")
  shape_eq(x:flatten(), {24})
  shape_eq(x:flatten(2), {2, 12})
  shape_eq(x:flatten(1, 2), {6, 4})
  shape_eq(x:flatten(-2, -1), {2, 12})
  local v = x:unsqueeze(2):flatten(3):squeeze()
  shape_eq(v, {2, 12})
  v:set(42, 2, 12)
  assert(x:get(2, 3, 4) == 42, "views write through")
  assert(x:contiguous() == x, "contiguous is the Tensor itself")
  expect_error(function() return x:unsqueeze(5) end, "unsqueeze: argument #1 (dim) must be an integer in [-4, -1] or [1, 4], got 5", "unsqueeze range")
  expect_error(function() return x:flatten(3, 2) end, "flatten: end dim 2 is before start dim 3", "flatten order")
end)

-- ---- slicing ----

check("narrow, slice, index_select along every dim", function()
  local shape = {4, 5, 6}
  local x = randt(shape)
  for d = 1, 3 do
    local n = shape[d]
    -- narrow(dim, start, len)
    local r = x:narrow(d, 2, n - 2)
    local rs = copy(shape); rs[d] = n - 2
    shape_eq(r, rs, "narrow shape")
    each(rs, function(i) local j = copy(i); j[d] = j[d] + 1; assert(at(r, i) == at(x, j), "narrow dim " .. d) end)
    -- slice(dim, start, stop, step) with inclusive stop
    local sl = x:slice(d, 2, -1, 2)
    local cnt = 0
    for k = 2, n, 2 do cnt = cnt + 1 end
    rs = copy(shape); rs[d] = cnt
    shape_eq(sl, rs, "slice shape")
    each(rs, function(i) local j = copy(i); j[d] = 2 + (j[d] - 1) * 2; assert(at(sl, i) == at(x, j), "slice dim " .. d) end)
    local sl2 = x:slice(d, -3, -2)
    rs = copy(shape); rs[d] = 2
    shape_eq(sl2, rs, "slice from the end")
    each(rs, function(i) local j = copy(i); j[d] = n - 3 + j[d]; assert(at(sl2, i) == at(x, j), "slice -3..-2") end)
    shape_eq(x:slice(d, 3, 2), (function() local s = copy(shape); s[d] = 0; return s end)(), "empty slice")
    -- index_select(dim, idx) with a table and with a Tensor
    local idx = {n, 1, -1, 2}
    local is = x:index_select(d, idx)
    local ist = x:index_select(d, mp.tensor{n, 1, -1, 2})
    rs = copy(shape); rs[d] = 4
    shape_eq(is, rs, "index_select shape")
    each(rs, function(i)
      local j = copy(i); local v = idx[j[d]]; j[d] = v < 0 and n + 1 + v or v
      assert(at(is, i) == at(x, j) and at(ist, i) == at(x, j), "index_select dim " .. d)
    end)
  end
  -- views along dim 1 (step 1), copies otherwise
  local y = mp.zeros{3, 4}
  y:narrow(1, 2, 1):fill_(1)
  y:slice(1, 3, 3):fill_(2)
  y:narrow(2, 1, 2):fill_(5) -- a copy: y unchanged
  y:slice(1, 1, 3, 2):fill_(7) -- step 2: a copy
  y:index_select(1, {1}):fill_(9) -- always a copy
  deep_eq(y:totable(), {{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 2, 2, 2}})
  deep_eq(y:narrow(2, 2):totable(), {{1, 1, 1, 1}, {2, 2, 2, 2}}, "2-argument narrow(start, len) is along dim 1")
  expect_error(function() return y:narrow(2, 4, 2) end, "narrow: argument #3 (length) must be an integer in [0, 1], got 2", "narrow length")
  expect_error(function() return y:slice(2, 1, 5) end, "slice: argument #3 (stop) must be an integer in [-5, -1] or [0, 4], got 5", "slice stop")
  expect_error(function() return y:slice(2, 1, 2, 0) end, "slice: argument #4 (step) must be an integer in [1, ", "slice step")
  expect_error(function() return y:index_select(2, {5}) end, "index_select: argument #2 (indices)[1] must be an integer in [-4, -1] or [1, 4], got 5", "index_select range")
  expect_error(function() return y:index_select(2, {1.5}) end, "index_select: argument #2 (indices)[1] must be an integer in [-4, -1] or [1, 4], got 1.5", "non-integer index")
end)

check("cat and stack", function()
  local a, b = randt{2, 3}, randt{2, 1}
  local c = mp.cat({a, b}, 2)
  shape_eq(c, {2, 4})
  each({2, 4}, function(i)
    local v = i[2] <= 3 and a:get(i[1], i[2]) or b:get(i[1], i[2] - 3)
    assert(at(c, i) == v, "cat along dim 2")
  end)
  local c1 = mp.cat{a, randt{1, 3}, {{7, 8, 9}}}
  shape_eq(c1, {4, 3}, "cat along dim 1 (default), a table entry")
  deep_eq(c1[4]:totable(), {7, 8, 9})
  deep_eq(c1[1]:totable(), a[1]:totable())
  local s = mp.stack({a, a:mul(2), a:mul(3)}, 2)
  shape_eq(s, {2, 3, 3})
  each({2, 3, 3}, function(i) near(at(s, i), a:get(i[1], i[3]) * i[2], 1e-6, "stack along dim 2") end)
  shape_eq(mp.stack{a, a}, {2, 2, 3}, "stack along dim 1")
  shape_eq(mp.stack({a, a}, -1), {2, 3, 2}, "stack along a new last dim")
  expect_error(function() return mp.cat({a, randt{3, 3}}, 2) end,
    "cat: shapes [2,3] and [3,3] (entries 1 and 2) may differ only in dim 2", "cat shapes")
  expect_error(function() return mp.stack{a, b} end, "stack: shapes [2,3] and [2,1] (entries 1 and 2) differ", "stack shapes")
  expect_error(function() return mp.cat{} end, "cat: the list of Tensors is empty", "empty list")
  expect_error(function() return mp.cat{a, 3} end, "cat: entry 2 is a number, expected a Tensor", "bad entry")
end)

-- ---- broadcasting arithmetic ----

check("add/sub/mul/div/pow broadcast as torch", function()
  local ops = {
    add = function(x, y) return x + y end, sub = function(x, y) return x - y end,
    mul = function(x, y) return x * y end, div = function(x, y) return x / y end,
  }
  local pairs_ = {{{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {4}}, {{3, 1}, {2, 1, 4}}, {{1}, {2, 3}}, {{2, 3}, {2, 3}}}
  for _, p in ipairs(pairs_) do
    local a, b = randt(p[1]), randt(p[2])
    local out = {}
    local nd = math.max(#p[1], #p[2])
    for i = 1, nd do
      local ea = p[1][i - (nd - #p[1])] or 1
      local eb = p[2][i - (nd - #p[2])] or 1
      out[i] = ea == 1 and eb or ea
    end
    for name, f in pairs(ops) do
      local r = a[name](a, b)
      shape_eq(r, out, name)
      each(out, function(i)
        local v = f(at(a, bidx(p[1], i)), at(b, bidx(p[2], i)))
        near(at(r, i), v, 2e-7 * math.abs(v) + 1e-7, name .. " broadcast")
      end)
    end
    local r = a + b
    each(out, function(i) near(at(r, i), at(a, bidx(p[1], i)) + at(b, bidx(p[2], i)), 1e-6, "+") end)
  end
  local x = mp.tensor{{1, 2}, {3, 4}}
  deep_eq((x ^ 2):totable(), {{1, 4}, {9, 16}}, "x ^ 2")
  deep_eq(x:pow(0.5):totable(), x:sqrt():totable(), "pow(0.5) = sqrt")
  deep_eq(x:pow{1, 2}:totable(), {{1, 4}, {3, 16}}, "pow with a broadcast Tensor exponent")
  deep_eq((2 ^ x):totable(), {{2, 4}, {8, 16}}, "number ^ Tensor")
  deep_eq((x - {10, 20}):totable(), {{-9, -18}, {-7, -16}}, "a table right side broadcasts")
  deep_eq((1 / x):get(2, 2), 0.25, "number / Tensor")
  expect_error(function() return x + mp.zeros{3} end,
    "add: shapes [2,2] and [3] differ and do not broadcast (dim 2 of the result: 2 vs 3)", "no broadcast")
end)

check("in-place ops take a broadcast right side", function()
  local x = mp.tensor{{1, 2, 3}, {4, 5, 6}}
  assert(x:add_{10, 20, 30} == x, "add_ returns self")
  deep_eq(x:totable(), {{11, 22, 33}, {14, 25, 36}})
  x:sub_{{1}, {4}}
  deep_eq(x:totable(), {{10, 21, 32}, {10, 21, 32}})
  x:mul_(mp.tensor{1, 0, 2}):div_(2)
  deep_eq(x:totable(), {{5, 0, 32}, {5, 0, 32}})
  x:copy_{1, 2, 3}
  deep_eq(x:totable(), {{1, 2, 3}, {1, 2, 3}}, "copy_ broadcasts")
  x[2]:mul_(10)
  x:add_(x[2]) -- the right side is a view of the left: read before written
  deep_eq(x:totable(), {{11, 22, 33}, {20, 40, 60}})
  x:sub_(x)
  deep_eq(x:totable(), {{0, 0, 0}, {0, 0, 0}}, "x:sub_(x)")
  expect_error(function() return mp.zeros{3}:add_(mp.zeros{2, 3}) end,
    "add_: the right side [2,3] does not broadcast to the Tensor's shape [3] (in place)", "in-place widening")
  expect_error(function() return mp.zeros{3}:copy_{1, 2} end, "copy_: shapes [3] and [2] differ", "copy_ shapes")
end)

-- ---- elementwise functions ----

check("elementwise functions", function()
  local x = randt{3, 7}:mul(4)
  local pos = x:abs():add(0.01)
  local function sig(v) return 1 / (1 + math.exp(-v)) end
  local cases = {
    {"exp", x, math.exp}, {"log", pos, math.log}, {"sqrt", pos, math.sqrt}, {"abs", x, math.abs},
    {"tanh", x, function(v) return (math.exp(2 * v) - 1) / (math.exp(2 * v) + 1) end},
    {"relu", x, function(v) return v > 0 and v or 0 end}, {"sigmoid", x, sig},
  }
  for _, c in ipairs(cases) do
    local name, src, f = c[1], c[2], c[3]
    local r = src[name](src)
    shape_eq(r, {3, 7}, name)
    each({3, 7}, function(i)
      local v = f(at(src, i))
      near(at(r, i), v, 2e-7 * math.abs(v) + 1e-7, name)
    end)
  end
  local cl = x:clamp(-1, 0.5)
  each({3, 7}, function(i) assert(at(cl, i) == math.min(0.5, math.max(-1, at(x, i))), "clamp") end)
  local lo = x:clamp(0)
  each({3, 7}, function(i) assert(at(lo, i) == math.max(0, at(x, i)), "clamp(lo)") end)
  local hi = x:clamp(nil, 0)
  each({3, 7}, function(i) assert(at(hi, i) == math.min(0, at(x, i)), "clamp(nil, hi)") end)
  near(mp.tensor{-800}:sigmoid():get(1), 0, 0, "sigmoid of a large negative is 0, not NaN")
  expect_error(function() return x:clamp() end, "clamp: give lo, hi or both", "clamp without bounds")
  expect_error(function() return x:clamp(1, 0) end, "clamp: lo = 1", "lo above hi")
end)

-- ---- softmax ----

check("softmax and log_softmax over every dim", function()
  local shape = {3, 4, 5}
  local x = randt(shape):mul(6)
  for _, d in ipairs{1, 2, 3, -1} do
    local dd = d < 0 and 3 + 1 + d or d
    local sm, lsm = x:softmax(d), x:log_softmax(d)
    shape_eq(sm, shape)
    each(shape, function(i)
      local mx, z = -math.huge, 0
      local j = copy(i)
      for k = 1, shape[dd] do j[dd] = k; mx = math.max(mx, at(x, j)) end
      for k = 1, shape[dd] do j[dd] = k; z = z + math.exp(at(x, j) - mx) end
      local ref = math.exp(at(x, i) - mx) / z
      near(at(sm, i), ref, 2e-7 * ref + 1e-9, "softmax dim " .. d)
      local lref = at(x, i) - mx - math.log(z)
      near(at(lsm, i), lref, 2e-7 * math.abs(lref) + 1e-7, "log_softmax dim " .. d)
    end)
    local sums = sm:sum(d)
    each(sums:shape(), function(i) near(at(sums, i), 1, 1e-6, "softmax sums to 1 along dim " .. d) end)
  end
  local big = mp.tensor{{1000, 1001, 999}, {-1000, -1000, -1000}}:softmax(-1)
  local e = math.exp(1)
  near(big:get(1, 2), e / (1 + e + 1 / e), 1e-7, "no overflow at 1000")
  near(big:get(2, 1), 1 / 3, 1e-7, "no underflow at -1000")
  expect_error(function() return x:softmax() end, "softmax: give the dim", "dim required")
end)

-- ---- reductions ----

check("reductions over every dim, keepdim", function()
  local shape = {3, 4, 5}
  local x = randt(shape)
  for _, d in ipairs{1, 2, 3, -1, -3} do
    local dd = d < 0 and 3 + 1 + d or d
    local rs, ks = {}, copy(shape)
    for i = 1, 3 do if i ~= dd then rs[#rs + 1] = shape[i] end end
    ks[dd] = 1
    local sum, mean = x:sum(d), x:mean(d)
    local mx, imx = x:max(d)
    local mn, imn = x:min(d)
    local amx, amn = x:argmax(d), x:argmin(d)
    local var, varb, std = x:var(d), x:var(d, {unbiased = false}), x:std(d)
    local n1, n2, ninf, n3 = x:norm(1, d), x:norm(2, d), x:norm(math.huge, d), x:norm(3, d)
    for _, r in ipairs{sum, mean, mx, mn, var, varb, std, n1, n2, ninf, n3} do shape_eq(r, rs, "reduced shape") end
    each(rs, function(i)
      local vals = {}
      -- the full index, with dim dd running
      local full = {}
      local p = 1
      for k = 1, 3 do if k == dd then full[k] = 0 else full[k] = i[p]; p = p + 1 end end
      for k = 1, shape[dd] do full[dd] = k; vals[k] = at(x, full) end
      local s, am, an, a1, a2, a3, ainf = 0, 1, 1, 0, 0, 0, 0
      for k, v in ipairs(vals) do
        s = s + v
        if v > vals[am] then am = k end
        if v < vals[an] then an = k end
        a1 = a1 + math.abs(v); a2 = a2 + v * v; a3 = a3 + math.abs(v) ^ 3; ainf = math.max(ainf, math.abs(v))
      end
      local n = #vals
      local m = s / n
      local ss = 0
      for _, v in ipairs(vals) do ss = ss + (v - m) ^ 2 end
      near(at(sum, i), s, 1e-6, "sum dim " .. d)
      near(at(mean, i), m, 1e-7, "mean dim " .. d)
      assert(at(mx, i) == vals[am] and at(mn, i) == vals[an], "max/min values dim " .. d)
      local ti = imx
      for _, v in ipairs(i) do ti = ti[v] end
      assert(ti == am, "max indices dim " .. d)
      ti = amn
      for _, v in ipairs(i) do ti = ti[v] end
      assert(ti == an, "argmin dim " .. d)
      ti = amx
      for _, v in ipairs(i) do ti = ti[v] end
      assert(ti == am, "argmax dim " .. d)
      ti = imn
      for _, v in ipairs(i) do ti = ti[v] end
      assert(ti == an, "min indices dim " .. d)
      near(at(var, i), ss / (n - 1), 1e-6, "var dim " .. d)
      near(at(varb, i), ss / n, 1e-6, "biased var dim " .. d)
      near(at(std, i), math.sqrt(ss / (n - 1)), 1e-6, "std dim " .. d)
      near(at(n1, i), a1, 1e-6, "1-norm"); near(at(n2, i), math.sqrt(a2), 1e-6, "2-norm")
      near(at(n3, i), a3 ^ (1 / 3), 1e-6, "3-norm"); assert(at(ninf, i) == ainf, "inf-norm")
    end)
    -- keepdim: the reduced dim stays with extent 1, same values
    local sk = x:sum(d, true)
    shape_eq(sk, ks, "sum keepdim")
    deep_eq(sk:reshape(rs):totable(), sum:totable(), "keepdim values")
    local mk, ik = x:max(d, true)
    shape_eq(mk, ks, "max keepdim")
    local depth, tt = 0, ik
    while type(tt) == "table" do depth = depth + 1; tt = tt[1] end
    assert(depth == 3, "keepdim indices keep the dim")
    shape_eq(x:var(d, {keepdim = true}), ks, "var keepdim")
    shape_eq(x:norm(2, d, true), ks, "norm keepdim")
  end
  -- whole-Tensor reductions stay numbers
  local s = 0
  each(shape, function(i) s = s + at(x, i) end)
  near(x:sum(), s, 1e-6, "sum of all")
  assert(type(x:var()) == "number" and type(x:norm()) == "number", "numbers without a dim")
  -- a 1-D Tensor reduced over its only dim gives a number (argmax a plain integer)
  local v = mp.tensor{3, 9, 1, 9}
  assert(v:sum(1) == 22 and v:argmax(-1) == 2 and v:argmin(1) == 3, "0-dim results are numbers")
  local val, idx = v:max(1)
  assert(val == 9 and idx == 2, "max(dim) of a 1-D Tensor: the first of tied maxima")
  shape_eq(v:sum(1, true), {1}, "keepdim on 1-D")
  local nan = mp.tensor{1, 0 / 0, 3}
  local nv, ni = nan:max(1)
  assert(nv ~= nv and ni == 2 and nan:argmin() == 2, "NaN propagates through max/min")
  expect_error(function() return x:sum(4) end, "sum: argument #1 (dim) must be an integer in [-3, -1] or [1, 3], got 4", "dim range")
  expect_error(function() return x:sum(1.5) end, "sum: argument #1 (dim) must be an integer in [-3, -1] or [1, 3], got 1.5", "fractional dim")
  expect_error(function() return x:mean("x") end, "mean: argument #1 (dim) must be an integer in [-3, -1] or [1, 3], got string", "string dim")
  expect_error(function() return x:sum(1, 1) end, "sum: keepdim must be a boolean, got number", "keepdim type")
  expect_error(function() return x:var(1, {unbiassed = true}) end, "Tensor:var: unknown option 'unbiassed'", "var opts")
  expect_error(function() return mp.zeros{2, 0}:max(2) end, "max over dim 2, which is empty", "empty dim")
  expect_error(function() return x:norm(-1) end, "norm: p = -1", "negative p")
end)

-- ---- topk ----

check("topk with ties documented", function()
  local x = randt{4, 9}
  for _, largest in ipairs{true, false} do
    local v, i = x:topk(3, -1, largest)
    shape_eq(v, {4, 3})
    for r = 1, 4 do
      local row = {}
      for c = 1, 9 do row[c] = {x:get(r, c), c} end
      table.sort(row, function(p, q)
        if p[1] ~= q[1] then if largest then return p[1] > q[1] else return p[1] < q[1] end end
        return p[2] < q[2]
      end)
      for k = 1, 3 do
        assert(v:get(r, k) == row[k][1] and i[r][k] == row[k][2], "topk row " .. r)
      end
    end
  end
  local v1, i1 = x:topk(2, 1)
  shape_eq(v1, {2, 9}, "topk along dim 1")
  for c = 1, 9 do
    local best = 1
    for r = 2, 4 do if x:get(r, c) > x:get(best, c) then best = r end end
    assert(i1[1][c] == best and v1:get(1, c) == x:get(best, c), "topk dim 1 column " .. c)
  end
  -- ties: the lower index first, for largest and smallest
  local tv, ti = mp.tensor{5, 1, 5, 3, 1}:topk(3)
  deep_eq(tv:totable(), {5, 5, 3}); deep_eq(ti, {1, 3, 4})
  local sv, si = mp.tensor{5, 1, 5, 3, 1}:topk(2, 1, false)
  deep_eq(sv:totable(), {1, 1}); deep_eq(si, {2, 5})
  shape_eq(x:topk(0), {4, 0}, "k = 0")
  expect_error(function() return x:topk(10) end, "topk: argument #1 (k) must be an integer in [0, 9], got 10", "k too large")
end)

-- ---- constructors, comparisons, conversions ----

check("arange, linspace, eye", function()
  deep_eq(mp.arange(5):totable(), {0, 1, 2, 3, 4}, "arange(end): values from 0, end excluded")
  deep_eq(mp.arange(1, 4):totable(), {1, 2, 3})
  deep_eq(mp.arange(0, 1, 0.25):totable(), {0, 0.25, 0.5, 0.75})
  deep_eq(mp.arange(5, 0, -2):totable(), {5, 3, 1})
  shape_eq(mp.arange(3, 3), {0}, "empty range")
  local l = mp.linspace(-1, 2, 7)
  for k = 1, 7 do near(l:get(k), -1 + (k - 1) * 0.5, 1e-7, "linspace") end
  assert(l:get(1) == -1 and l:get(7) == 2, "linspace ends exact")
  deep_eq(mp.linspace(3, 9, 1):totable(), {3})
  deep_eq(mp.eye(2, 3):totable(), {{1, 0, 0}, {0, 1, 0}})
  deep_eq(mp.eye(2):totable(), {{1, 0}, {0, 1}})
  expect_error(function() return mp.arange(0, 5, -1) end, "mp.arange: step -1", "wrong-way step")
  expect_error(function() return mp.arange(0, 5, 0) end, "step non-zero", "zero step")
  expect_error(function() return mp.linspace(0, 1, -2) end, "mp.linspace: argument #3 (steps) must be an integer in [0, 4611686018427387903], got -2", "negative steps")
end)

check("cos_sim, allclose, item, tolist", function()
  local a, b = randt{3, 6}, randt{3, 6}
  local c = a:cos_sim(b, -1)
  local c2 = mp.cosine_similarity(a, b)
  shape_eq(c, {3})
  for r = 1, 3 do
    local xy, xx, yy = 0, 0, 0
    for k = 1, 6 do
      local u, v = a:get(r, k), b:get(r, k)
      xy = xy + u * v; xx = xx + u * u; yy = yy + v * v
    end
    local ref = xy / math.sqrt(xx * yy)
    near(c:get(r), ref, 2e-7, "cos_sim row")
    assert(c2:get(r) == c:get(r), "mp.cosine_similarity")
  end
  local cd1 = a:cos_sim(b, 1)
  shape_eq(cd1, {6}, "cos_sim along dim 1")
  local cb = a:cos_sim(a[2], 2) -- the row broadcasts against every row
  near(cb:get(2), 1, 1e-6, "a row with itself")
  near(mp.tensor{1, 0}:cos_sim{0, 3}, 0, 0, "orthogonal 1-D vectors give a number")
  assert(mp.zeros{3}:cos_sim(mp.ones(3)) == 0, "zero vector: 0 (eps), not NaN")
  assert(a:allclose(a:clone()), "allclose to itself")
  assert(not a:allclose(a:add(1e-3)), "not close")
  assert(a:allclose(a:add(1e-3), 0, 2e-3), "atol")
  assert(mp.tensor{{1, 1}, {1, 1}}:allclose{1, 1}, "allclose broadcasts")
  assert(not mp.tensor{0 / 0}:allclose{0 / 0}, "NaN is never close")
  assert(mp.tensor{{2.5}}:item() == 2.5, "item")
  expect_error(function() return a:item() end, "item: the Tensor [3,6] has 18 elements, not one", "item of many")
  deep_eq(mp.tensor{{1, 2}, {3, 4}}:tolist(), {{1, 2}, {3, 4}}, "tolist = totable")
  expect_error(function() return a:cos_sim(randt{3, 5}) end, "cos_sim: shapes [3,6] and [3,5] differ", "cos_sim shapes")
end)

t.finish("test_tensor_ops")
