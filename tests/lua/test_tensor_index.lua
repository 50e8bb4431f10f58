-- test_tensor_index.lua — the Tensor's masks, indexing, sorting, random and
-- linear-algebra operations (lua/ltensor_index.c over analyze/tensor_index.c,
-- and the list-of-dims reductions of lua/ltensor_math.c): comparisons
-- eq/ne/lt/le/gt/ge, mp.where, masked_fill, gather, diagonal, tril/triu,
-- sort/argsort, mp.randn/mp.rand/mp.manual_seed, sum/mean/max/min over a
-- list of dims, svd, and their error messages.
-- References: plain Lua loops over the float32 values the Tensor holds (exact
-- where the operation only moves or compares values; sums in double: 1e-6
-- relative); mp.rand against golden values of the MT19937 stream (numpy's
-- MT19937 with legacy seeding is the same generator as GSL's gsl_rng_mt19937
-- with gsl_rng_set: `g = np.random.MT19937(0); g._legacy_seeding(42);
-- np.float32(g.random_raw(8) / 2**32)`); mp.randn against GSL's polar
-- Box-Muller written out here over mp.rand's stream of the same seed (1e-5:
-- the uniforms come back rounded to float32) and against its moments; svd by
-- its defining properties (U diag(S) Vh = A to 1e-5 relative, orthonormal
-- columns/rows to 1e-5, S descending and >= 0) and by a closed form.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near, expect_error, deep_eq = t.case, t.near, t.expect_error, t.deep_eq

-- ---- helpers ----

local rnd = t.lcg(4242) -- deterministic uniform in [-1, 1)

local numel, each = t.numel, t.each

-- a Tensor of shape with values from gen() (default: rnd rounded to quarters, so that ties occur)
local function randt(shape, gen)
  local x = mp.zeros(shape)
  gen = gen or function() return math.floor(rnd() * 4 + 0.5) / 4 end
  each(shape, function(idx) x:set(gen(), table.unpack(idx)) end)
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

local function nested_get(tbl, idx)
  local v = tbl
  for _, i in ipairs(idx) do v = v[i] end
  return v
end

-- ---- comparisons ----

local cmp = {
  eq = function(x, y) return x == y end, ne = function(x, y) return x ~= y end,
  lt = function(x, y) return x < y end, le = function(x, y) return x <= y end,
  gt = function(x, y) return x > y end, ge = function(x, y) return x >= y end,
}

check("comparisons broadcast and give float 0/1 masks", function()
  local a, b = randt({3, 4}), randt({4})
  for name, f in pairs(cmp) do
    local m = a[name](a, b)
    shape_eq(m, {3, 4}, name)
    each({3, 4}, function(idx)
      local want = f(at(a, idx), at(b, bidx({4}, idx))) and 1 or 0
      assert(at(m, idx) == want, ("%s at %d,%d: %s"):format(name, idx[1], idx[2], at(m, idx)))
    end)
    local s = a[name](a, 0.25) -- a number on the right
    each({3, 4}, function(idx) assert(at(s, idx) == (f(at(a, idx), 0.25) and 1 or 0), name .. " scalar") end)
    local tb = a[name](a, {{0}, {0.25}, {-0.5}}) -- a table, [3,1]
    each({3, 4}, function(idx)
      local y = ({0, 0.25, -0.5})[idx[1]]
      assert(at(tb, idx) == (f(at(a, idx), y) and 1 or 0), name .. " table")
    end)
  end
end)

check("comparisons with NaN: false except ne", function()
  local x = mp.tensor{0 / 0, 1}
  for name in pairs(cmp) do
    local m = x[name](x, 1)
    assert(m[1] == (name == "ne" and 1 or 0), name .. " NaN")
  end
end)

check("comparison errors", function()
  expect_error(function() return mp.ones(2, 2):eq(mp.ones(3)) end,
               "eq: shapes [2,2] and [3] differ and do not broadcast", "eq shape")
  expect_error(function() return mp.ones(2):lt("x") end, "Tensor or table expected", "lt string")
end)

-- ---- where, masked_fill ----

check("mp.where broadcasts mask, a and b", function()
  local mask, a = randt({3, 1}):gt(0), randt({3, 4})
  local r = mp.where(mask, a, -7)
  shape_eq(r, {3, 4})
  each({3, 4}, function(idx)
    assert(at(r, idx) == (at(mask, {idx[1], 1}) ~= 0 and at(a, idx) or -7), "where")
  end)
  local x = randt({2, 5})
  assert(mp.where(x:gt(0), x, 0):allclose(x:relu(), 0, 0), "where(x > 0, x, 0) == relu(x)")
  local r2 = mp.where(mp.tensor{1, 0, 1}, 5, mp.tensor{{1}, {2}}) -- [3] with a scalar and [2,1]
  deep_eq(r2:totable(), {{5, 1, 5}, {5, 2, 5}}, "where [2,3]")
  expect_error(function() return mp.where(mp.ones(2), mp.ones(3), 0) end,
               "mp.where: shapes [2] and [3] differ and do not broadcast", "where shapes")
end)

check("masked_fill", function()
  local x, mask = randt({3, 4}), randt({4}):lt(0)
  local r = x:masked_fill(mask, -1e9)
  shape_eq(r, {3, 4})
  each({3, 4}, function(idx)
    local want = at(mask, {idx[2]}) ~= 0 and -1e9 or at(x, idx)
    assert(at(r, idx) == mp.tensor{want}[1], "masked_fill")
  end)
  assert(r ~= x and x:allclose(x:clone()), "a new Tensor")
  -- the causal mask as TransformerLens builds it
  local scores = mp.ones(3, 3):masked_fill(mp.ones(3, 3):triu(1), -math.huge)
  assert(scores:get(1, 2) == -math.huge and scores:get(2, 1) == 1 and scores:get(3, 3) == 1, "causal")
  expect_error(function() return mp.ones(3, 4):masked_fill(mp.ones(2, 3, 4), 0) end,
               "masked_fill: the mask [2,3,4] does not broadcast to the Tensor's shape [3,4]", "mask too big")
  expect_error(function() return mp.ones(3, 4):masked_fill(mp.ones(3), 0) end,
               "masked_fill: shapes [3,4] and [3] differ and do not broadcast", "mask mismatch")
  expect_error(function() return mp.ones(3):masked_fill(mp.ones(3)) end, "number expected", "no value")
end)

-- ---- gather ----

check("gather along every dim (Tensor and table indices, negative ones)", function()
  local x = randt({3, 4, 5}, rnd)
  for d = 1, 3 do
    local ishape = {3, 4, 5}
    ishape[d] = ishape[d] == 4 and 6 or 2          -- along d: any length
    if d ~= 2 then ishape[2] = 3 end               -- elsewhere: may be smaller
    local n = x:size(d)
    local idx = mp.zeros(ishape)
    each(ishape, function(i) idx:set(math.floor((rnd() + 1) / 2 * n) + 1, table.unpack(i)) end)
    local g = x:gather(d, idx)
    shape_eq(g, ishape, "gather shape")
    each(ishape, function(i)
      local src = copy(i)
      src[d] = at(idx, i)
      assert(at(g, i) == at(x, src), "gather dim " .. d)
    end)
    local neg = idx:totable() -- the same as nested tables of negative indices
    each(ishape, function(i)
      local row = neg
      for k = 1, #i - 1 do row = row[i[k]] end
      row[i[#i]] = math.tointeger(row[i[#i]] - n - 1)
    end)
    assert(x:gather(-4 + d, neg):allclose(g, 0, 0), "gather with a negative dim and indices")
  end
end)

check("gather errors", function()
  local x = mp.ones(3, 4)
  expect_error(function() return x:gather(3, {{1}}) end,
               "gather: argument #1 (dim) must be an integer in [-2, -1] or [1, 2], got 3", "bad dim")
  expect_error(function() return x:gather(2, {{1, 5}}) end,
               "gather: index[1][2] must be an integer in [-4, -1] or [1, 4], got 5", "bad index")
  expect_error(function() return x:gather(2, mp.tensor{{1, 0.5}}) end,
               "gather: index element 2 must be an integer in [-4, -1] or [1, 4], got 0.5", "fractional index")
  expect_error(function() return x:gather(2, {1, 2}) end,
               "gather: the index [2] has 1 dims, the Tensor [3,4] has 2", "index rank")
  expect_error(function() return x:gather(2, {{1}, {1}, {1}, {1}}) end,
               "gather: the index [4,1] is larger than the Tensor [3,4] in dim 1 (only dim 2 may be)", "index shape")
  expect_error(function() return x:gather(2, {{1, 2}, {1}}) end,
               "gather: ragged index: index[2] has 1 entries, expected 2", "ragged")
end)

-- ---- diagonal, tril, triu ----

check("diagonal with offsets", function()
  local x = randt({3, 5}, rnd)
  for _, off in ipairs{0, 1, 2, 4, 5, 9, -1, -2, -3, -10} do
    local dg = x:diagonal(off ~= 0 and off or nil)
    local want = {}
    for i = 1, 3 do
      local j = i + off
      if j >= 1 and j <= 5 then want[#want + 1] = x:get(i, j) end
    end
    shape_eq(dg, {#want}, "diagonal " .. off)
    for k = 1, #want do assert(dg[k] == want[k], "diagonal " .. off) end
  end
  expect_error(function() return mp.ones(2, 2, 2):diagonal() end, "diagonal: needs a 2-D Tensor, got [2,2,2]", "3-D")
  expect_error(function() return mp.ones(2, 2):diagonal(0.5) end, "diagonal: argument #1 (offset) must be an integer", "offset")
end)

check("tril and triu, batched over leading dims", function()
  local x = randt({2, 3, 4}, rnd)
  for _, k in ipairs{0, 1, -1, 3, -3, 10} do
    local lo, up = x:tril(k), x:triu(k)
    each({2, 3, 4}, function(idx)
      local j_i = idx[3] - idx[2]
      assert(at(lo, idx) == (j_i <= k and at(x, idx) or 0), "tril " .. k)
      assert(at(up, idx) == (j_i >= k and at(x, idx) or 0), "triu " .. k)
    end)
  end
  assert(x:tril():add(x:triu(1)):allclose(x, 0, 0), "tril + triu(1) = x")
  expect_error(function() return mp.ones(3):tril() end, "tril: needs a Tensor of at least 2 dims, got [3]", "1-D")
end)

-- ---- sort, argsort ----

-- plain-Lua stable sort of a list of values: returns values and 1-based indices
local function ref_sort(vals, desc)
  local order = {}
  for i = 1, #vals do order[i] = i end
  table.sort(order, function(i, j)
    local a, b = vals[i], vals[j]
    local na, nb = a ~= a, b ~= b
    if na ~= nb then if desc then return na else return nb end end
    if not na and a ~= b then if desc then return a > b else return a < b end end
    return i < j
  end)
  local sorted = {}
  for k, i in ipairs(order) do sorted[k] = vals[i] end
  return sorted, order
end

check("sort and argsort along each dim, stable, both directions", function()
  local x = randt({3, 6}) -- quarters: many ties
  x:set(0 / 0, 2, 3)
  for _, d in ipairs{1, 2, -1} do
    local dd = d < 0 and 2 + d + 1 or d
    for _, desc in ipairs{false, true} do
      local v, i = x:sort(d, desc)
      local ai = x:argsort(d, desc)
      shape_eq(v, {3, 6})
      deep_eq(ai, i, "argsort = sort's indices")
      local other = dd == 1 and 6 or 3
      for o = 1, other do
        local vals = {}
        for k = 1, x:size(dd) do vals[k] = dd == 1 and x:get(k, o) or x:get(o, k) end
        local sv, si = ref_sort(vals, desc)
        for k = 1, #vals do
          local got = dd == 1 and v:get(k, o) or v:get(o, k)
          local gi = dd == 1 and i[k][o] or i[o][k]
          assert(got == sv[k] or (got ~= got and sv[k] ~= sv[k]), "sort value")
          assert(gi == si[k], ("sort index dim %d desc %s: %d vs %d"):format(dd, tostring(desc), gi, si[k]))
        end
      end
      assert(x:gather(d, i):eq(v):add(v:ne(v)):sum() == 18, "gather(argsort) = sorted values")
    end
  end
  local v1, i1 = mp.tensor{3, 1, 2}:sort()
  deep_eq(v1:totable(), {1, 2, 3}, "default ascending, last dim")
  deep_eq(i1, {2, 3, 1}, "indices")
  expect_error(function() return x:sort(3) end, "sort: argument #1 (dim) must be an integer in [-2, -1] or [1, 2], got 3", "dim")
  expect_error(function() return x:argsort(1, 1) end, "argsort: descending must be a boolean, got number", "descending")
end)

-- ---- random tensors ----

check("mp.rand matches the MT19937 stream (golden)", function()
  local golden = {0.3745401203632355, 0.7965430021286011, 0.9507142901420593, 0.18343478441238403,
                  0.7319939136505127, 0.7796909809112549, 0.5986585021018982, 0.5968501567840576}
  local r = mp.rand({2, 4}, {seed = 42})
  shape_eq(r, {2, 4})
  local flat = r:reshape(8)
  for k = 1, 8 do assert(flat[k] == golden[k], ("rand[%d] %.17g vs %.17g"):format(k, flat[k], golden[k])) end
  assert(mp.rand(2, 4, {seed = 42}):allclose(r, 0, 0), "dims form = table form")
end)

check("mp.randn is GSL's polar Box-Muller over the same stream", function()
  local n = 64
  local u = mp.rand({4 * n}, {seed = 7})
  local z = mp.randn({n}, {seed = 7})
  local k = 1
  for i = 1, n do
    local x, y, r2
    repeat
      x = -1 + 2 * u[k]; y = -1 + 2 * u[k + 1]; k = k + 2
      r2 = x * x + y * y
    until r2 <= 1 and r2 ~= 0
    local want = y * math.sqrt(-2 * math.log(r2) / r2)
    near(z[i], want, 1e-5 * (1 + math.abs(want)), "randn[" .. i .. "]")
  end
end)

check("same seed, same tensor; moments of large draws", function()
  local a, b = mp.randn({3, 5}, {seed = 123}), mp.randn({3, 5}, {seed = 123})
  assert(a:allclose(b, 0, 0), "same seed")
  assert(not a:allclose(mp.randn({3, 5}, {seed = 124}), 0, 0), "another seed differs")
  assert(mp.randn({15}, {seed = 123}):reshape(3, 5):allclose(a, 0, 0), "row-major: the shape does not change the stream")
  local n = 100000
  local z, u = mp.randn({n}, {seed = 1}), mp.rand({n}, {seed = 1})
  -- 5 standard errors: mean 1/sqrt(n), variance sqrt(2/n) (normal), sqrt(1/(12 n)) and sqrt(1/(180 n)) (uniform)
  near(z:mean(), 0, 5 / math.sqrt(n), "randn mean")
  near(z:var(), 1, 5 * math.sqrt(2 / n), "randn var")
  near(u:mean(), 0.5, 5 * math.sqrt(1 / (12 * n)), "rand mean")
  near(u:var(), 1 / 12, 5 * math.sqrt(1 / (180 * n)), "rand var")
  assert(u:min() >= 0 and u:max() < 1, "rand in [0, 1)")
end)

check("mp.manual_seed and the module generator", function()
  mp.manual_seed(7)
  local a, a2 = mp.randn(4), mp.randn(4)
  mp.manual_seed(7)
  local b, b2 = mp.randn(4), mp.randn(4)
  assert(a:allclose(b, 0, 0) and a2:allclose(b2, 0, 0), "manual_seed replays")
  assert(not a:allclose(a2, 0, 0), "successive draws differ")
  assert(mp.randn({8}, {seed = 7}):allclose(mp.cat{a, a2}, 0, 0), "manual_seed(s) = {seed = s}")
  assert(mp.randn(0):numel() == 0 and mp.rand({2, 0}):numel() == 0, "empty shapes")
end)

check("random errors", function()
  expect_error(function() return mp.randn({2}, {seed = -1}) end,
               "mp.randn: option 'seed' must be an integer in [0, 4294967295], got -1", "negative seed")
  expect_error(function() return mp.rand({2}, {sed = 1}) end, "mp.rand: unknown option 'sed'", "unknown option")
  expect_error(function() return mp.randn({-2}) end, "must be an integer in [0,", "negative extent")
  expect_error(function() return mp.randn() end, "shape expected", "no shape")
  expect_error(function() return mp.manual_seed(1.5) end, "mp.manual_seed: argument #1 (seed) must be an integer", "seed")
end)

-- ---- reductions over a list of dims ----

-- plain-Lua reduction of x over the dims in set red (a set of 1-based dims)
local function ref_reduce(x, red, kind, keep)
  local shape, oshape = x:shape(), {}
  for i, e in ipairs(shape) do
    if not red[i] then oshape[#oshape + 1] = e elseif keep then oshape[#oshape + 1] = 1 end
  end
  local acc, cnt, keys = {}, {}, {}
  each(shape, function(idx)
    local key = {}
    for i, v in ipairs(idx) do
      if not red[i] then key[#key + 1] = v elseif keep then key[#key + 1] = 1 end
    end
    local ks = table.concat(key, ",")
    local v = at(x, idx)
    if acc[ks] == nil then
      acc[ks], cnt[ks], keys[#keys + 1] = v, 1, ks
    else
      cnt[ks] = cnt[ks] + 1
      if kind == "sum" or kind == "mean" then acc[ks] = acc[ks] + v
      elseif kind == "max" then acc[ks] = math.max(acc[ks], v)
      else acc[ks] = math.min(acc[ks], v) end
    end
  end)
  local out = {}
  for _, ks in ipairs(keys) do out[ks] = kind == "mean" and acc[ks] / cnt[ks] or acc[ks] end
  return out, oshape
end

check("sum/mean/max/min over a list of dims, keepdim", function()
  local x = randt({2, 3, 4, 2}, rnd)
  for _, dims in ipairs{{1, 3}, {3, 1}, {-1, -2}, {2}, {1, 2, 4}} do
    local red = {}
    for _, d in ipairs(dims) do red[d < 0 and 4 + d + 1 or d] = true end
    for _, kind in ipairs{"sum", "mean", "max", "min"} do
      for _, keep in ipairs{false, true} do
        local r = x[kind](x, dims, keep and {keepdim = true} or nil)
        local want, oshape = ref_reduce(x, red, kind, keep)
        shape_eq(r, oshape, kind .. " shape")
        local r2 = x[kind](x, dims, keep)
        assert(r2:allclose(r, 0, 0), "keepdim boolean = {keepdim = ...}")
        each(oshape, function(idx)
          local w = want[table.concat(idx, ",")]
          near(at(r, idx), w, 1e-6 * (1 + math.abs(w)), kind)
        end)
      end
    end
  end
  near(x:sum{1, 2, 3, 4}, x:sum(), 1e-6 * (1 + math.abs(x:sum())), "all dims: a number (float32)")
  assert(x:max{4, 3, 2, 1} == x:max(), "max over all dims")
  assert(x:sum({1, 2, 3, 4}, {keepdim = true}):dim() == 4, "keepdim keeps the rank")
  local y = mp.tensor{{1, 0 / 0}, {3, 4}}
  assert(y:max({1, 2}) ~= y:max({1, 2}), "a NaN propagates")
  assert(mp.zeros(2, 0, 3):sum({2, 3}):allclose(mp.zeros(2), 0, 0), "sum over no elements is 0")
  assert(x:sum(2, {keepdim = true}):dim() == 4, "one dim with an options table")
end)

check("list-of-dims reduction errors", function()
  local x = mp.ones(2, 3)
  expect_error(function() return x:sum({}) end, "sum: the list of dims is empty", "empty")
  expect_error(function() return x:mean({1, -2}) end, "mean: dim 1 appears twice in the list of dims", "twice")
  expect_error(function() return x:max({1, 3}) end, "max: argument #1 (dims)[2] must be an integer in [-2, -1] or [1, 2], got 3", "range")
  expect_error(function() return x:min({1, 2, 1}) end, "min: 3 dims listed for a 2-dim Tensor", "too many")
  expect_error(function() return mp.zeros(2, 0):max({2}) end, "max: max over dims with no elements", "empty max")
  expect_error(function() return x:sum({1}, {keep = true}) end, "sum: unknown option 'keep'", "option")
  expect_error(function() return x:sum({1}, 1) end, "sum: keepdim must be a boolean, got number (or an options table {keepdim = b})", "keepdim")
end)

-- ---- svd ----

local function check_svd(a, what)
  local m, n = a:size(1), a:size(2)
  local k = math.min(m, n)
  local u, s, vh = a:svd()
  shape_eq(u, {m, k}, what .. " U")
  shape_eq(s, {k}, what .. " S")
  shape_eq(vh, {k, n}, what .. " Vh")
  local scale = a:norm()
  for i = 1, k do
    assert(s[i] >= 0 and (i == 1 or s[i] <= s[i - 1]), what .. ": S descending, >= 0")
  end
  for i = 1, m do -- U diag(S) Vh = A
    for j = 1, n do
      local acc = 0
      for l = 1, k do acc = acc + u:get(i, l) * s[l] * vh:get(l, j) end
      near(acc, a:get(i, j), 1e-5 * scale, what .. " reconstruction")
    end
  end
  for p = 1, k do -- U^T U = I, Vh Vh^T = I
    for q = 1, k do
      local uu, vv = 0, 0
      for i = 1, m do uu = uu + u:get(i, p) * u:get(i, q) end
      for j = 1, n do vv = vv + vh:get(p, j) * vh:get(q, j) end
      near(uu, p == q and 1 or 0, 1e-5, what .. " U orthonormal")
      near(vv, p == q and 1 or 0, 1e-5, what .. " Vh orthonormal")
    end
  end
  return u, s, vh
end

check("svd: tall, wide, square, rank-deficient", function()
  check_svd(randt({6, 3}, rnd), "tall")
  check_svd(randt({3, 7}, rnd), "wide")
  check_svd(randt({4, 4}, rnd), "square")
  local r1 = mp.tensor{{1}, {2}, {3}}:matmul(mp.tensor{{1, -1, 2, 0}}) -- rank 1
  local _, s = check_svd(r1, "rank 1")
  near(s[1], math.sqrt(14) * math.sqrt(6), 1e-5, "rank 1: |u| |v|")
  near(s[2], 0, 1e-5, "rank 1: zero singular values")
  local _, sd = check_svd(mp.tensor{{0, 3}, {-2, 0}, {0, 0}}, "closed form")
  deep_eq(sd:totable(), {3, 2}, "singular values of a signed permutation")
  local u0, s0, v0 = mp.zeros(0, 3):svd()
  shape_eq(u0, {0, 0}); shape_eq(s0, {0}); shape_eq(v0, {0, 3})
end)

check("svd errors", function()
  expect_error(function() return mp.ones(2, 2, 2):svd() end, "svd: needs a 2-D Tensor, got [2,2,2]", "3-D")
  expect_error(function() return mp.tensor{{1, 0 / 0}}:svd() end, "svd: element 2 is not finite", "NaN")
end)

-- ---- einsum ----

-- plain-Lua einsum: every assignment of the letters, products summed into the output
local function ref_einsum(eq, ...)
  local ops = {...}
  local lhs, out = eq:match("^(.-)%->(.*)$")
  local terms, ext, letters = {}, {}, {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  for k, term in ipairs(terms) do
    for i = 1, #term do
      local c = term:sub(i, i)
      if not ext[c] then letters[#letters + 1] = c end
      ext[c] = ops[k]:size(i)
    end
  end
  local oshape = {}
  for i = 1, #out do oshape[i] = ext[out:sub(i, i)] end
  local acc = {}
  local shape = {}
  for i, c in ipairs(letters) do shape[i] = ext[c] end
  each(shape, function(idx)
    local val = {}
    for i, c in ipairs(letters) do val[c] = idx[i] end
    local prod = 1
    for k, term in ipairs(terms) do
      local oi = {}
      for i = 1, #term do oi[i] = val[term:sub(i, i)] end
      prod = prod * (#oi > 0 and at(ops[k], oi) or ops[k]:item())
    end
    local key = {}
    for i = 1, #out do key[i] = val[out:sub(i, i)] end
    local ks = table.concat(key, ",")
    acc[ks] = (acc[ks] or 0) + prod
  end)
  return acc, oshape
end

check("mp.einsum against plain loops", function()
  local cases = {
    {"ij,jk->ik", {3, 4}, {4, 5}}, {"bij,bjk->bik", {2, 3, 4}, {2, 4, 2}},
    {"bhqd,bhkd->bhqk", {2, 2, 3, 4}, {2, 2, 5, 4}}, {"i,i->", {6}, {6}}, {"i,j->ij", {3}, {4}},
    {"ij->ji", {3, 4}}, {"ij->", {3, 4}}, {"ij->j", {3, 4}}, {"ij,ij->i", {3, 4}, {3, 4}},
    {"bpd,dv->bpv", {2, 3, 4}, {4, 5}}, {"ij,jk->i", {3, 4}, {4, 2}}, {"Ab,bC->CA", {2, 3}, {3, 4}},
    {"ijk,ik->j", {2, 3, 4}, {2, 4}}, {"dh,hm->md", {4, 2}, {2, 4}},
  }
  for _, c in ipairs(cases) do
    local ops = {randt(c[2], rnd), c[3] and randt(c[3], rnd) or nil}
    local got = mp.einsum(c[1], table.unpack(ops))
    local want, oshape = ref_einsum(c[1], table.unpack(ops))
    if #oshape == 0 then
      assert(type(got) == "number", c[1] .. ": a number")
      near(got, want[""], 1e-5 * (1 + math.abs(want[""])), c[1])
    else
      shape_eq(got, oshape, c[1] .. " shape")
      each(oshape, function(idx)
        local w = want[table.concat(idx, ",")]
        near(at(got, idx), w, 1e-5 * (1 + math.abs(w)), c[1])
      end)
    end
  end
  local a, b = randt({3, 4}, rnd), randt({4, 5}, rnd)
  assert(mp.einsum("ij,jk", a, b):allclose(a:matmul(b), 1e-6, 1e-6), "implicit output: ik")
  assert(mp.einsum("ji", a):allclose(a:t(), 0, 0), "implicit output of ji is ij (alphabetical): the transpose")
  assert(mp.einsum(" i j , j k -> i k ", a, b):allclose(a:matmul(b), 1e-6, 1e-6), "spaces")
end)

check("mp.einsum errors", function()
  local a, b = mp.ones(3, 4), mp.ones(4, 5)
  expect_error(function() return mp.einsum("...ij,jk->ik", a, b) end, 'mp.einsum: "..." is not supported', "ellipsis")
  expect_error(function() return mp.einsum("ii->i", mp.ones(3, 3)) end,
               "mp.einsum: letter 'i' repeated in operand 1 (diagonals and traces are not supported)", "repeat")
  -- valid: a letter in one operand only is summed there first (j in a, k in b)
  assert(mp.einsum("ij,kl->il", a, b):allclose(a:sum(2, true):matmul(b:sum(1, true)), 1e-6, 1e-6), "sums first")
  expect_error(function() return mp.einsum("ij,ik->jk", a, b) end, "mp.einsum: letter 'i' has extent 3 and 4", "extent")
  expect_error(function() return mp.einsum("ijk,jk->ik", a, b) end, 'mp.einsum: operand 1 has 2 dims, its term "ijk" 3 letters', "rank")
  expect_error(function() return mp.einsum("ij,jk->iz", a, b) end, "mp.einsum: output letter 'z' is in no operand", "output")
  expect_error(function() return mp.einsum("ij,jk->ik", a) end, "mp.einsum: the equation names 2 operands, 1 given", "count")
  expect_error(function() return mp.einsum("ij,jk->ik", a, b, a) end, "mp.einsum: 3 operands given (1 or 2 are supported)", "three")
  expect_error(function() return mp.einsum("i1,jk->ik", a, b) end, "mp.einsum: '1' in operand 1 is not a letter", "digit")
end)

t.finish("test_tensor_index")
