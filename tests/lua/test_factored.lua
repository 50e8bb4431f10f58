-- test_factored.lua — t:eig(), t:eigh() and mp.FactoredMatrix (with m:OV / m:QK).
-- References: closed forms (a rotation's e^{+-i theta}, a diagonal matrix, the
-- [[2,1],[1,2]] pair, the tridiagonal (-1, 2, -1) matrix's 2 - 2cos(k pi/(n+1)));
-- numpy goldens (float64 LAPACK) pasted below, made with /usr/bin/python3 by:
--   import numpy as np
--   M = np.array([[1, 2, 0, -1], [0.5, -1, 3, 2], [-2, 1, 0.25, 1], [1, 0, -1.5, 2]])
--   ev = sorted(np.linalg.eigvals(M), key=lambda z: (-abs(z), -z.real, -z.imag))
--   S = np.array([[4, 1, -2, 0.5], [1, 3, 0, 1], [-2, 0, 5, -1], [0.5, 1, -1, 2]])
--   w, v = np.linalg.eigh(S)          # printed: ev's real/imag parts, w, abs(v)
-- (tolerance 1e-5 relative: the inputs are exact in float32, GSL works in double
-- and the results are rounded to float32); the FactoredMatrix against the
-- product formed with matmul and decomposed by t:svd() / t:eig() (1e-4 relative:
-- float32 products on both sides), and m:OV / m:QK against m:W_V(l) @ m:W_O(l)
-- and m:W_Q(l) @ m:W_K(l)^T (exact: the same float32 matmul); a random 8x8 by
-- trace identities (sum lambda = tr A, sum lambda^2 = tr A^2).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near, expect_error, deep_eq = t.case, t.near, t.expect_error, t.deep_eq

local function vec_near(x, ref, tol, what)
  assert(x:numel() == #ref, what .. ": length " .. x:numel() .. " vs " .. #ref)
  for i = 1, #ref do near(x:get(i), ref[i], tol, what .. "[" .. i .. "]") end
end

-- max |x - y| over equal shapes
local function maxdiff(x, y, what)
  deep_eq(x:shape(), y:shape(), what .. " shape")
  return (x - y):abs():max()
end

-- ---- eig ----

check("eig: a rotation by theta has eigenvalues cos theta +- i sin theta", function()
  local th = 0.7
  local c, s = math.cos(th), math.sin(th)
  local re, im = mp.tensor{{c, -s}, {s, c}}:eig()
  deep_eq(re:shape(), {2}, "re shape")
  vec_near(re, {c, c}, 1e-6, "rotation re")
  vec_near(im, {s, -s}, 1e-6, "rotation im (+ first)")
end)

check("eig: a diagonal matrix, sorted by |lambda| descending", function()
  local re, im = mp.tensor{{3, 0, 0}, {0, -5, 0}, {0, 0, 1}}:eig()
  vec_near(re, {-5, 3, 1}, 1e-6, "diag re")
  vec_near(im, {0, 0, 0}, 0, "diag im")
end)

check("eig: a general 4x4 against numpy", function()
  local re, im = mp.tensor{{1, 2, 0, -1}, {0.5, -1, 3, 2}, {-2, 1, 0.25, 1}, {1, 0, -1.5, 2}}:eig()
  vec_near(re, {-3.1166811706379827, 1.53339291433124, 1.53339291433124, 2.2998953419755006}, 1e-5 * 3.2, "re")
  vec_near(im, {0.0, 2.306871015346594, -2.306871015346594, 0.0}, 1e-5 * 3.2, "im")
end)

check("eig: a random 8x8: sum of eigenvalues = trace, sum of squares = trace(A^2)", function()
  local a = mp.randn(8, 8, {seed = 21})
  local re, im = a:eig()
  local sre, sim, sq = 0, 0, 0
  for i = 1, 8 do
    sre, sim = sre + re:get(i), sim + im:get(i)
    sq = sq + re:get(i) ^ 2 - im:get(i) ^ 2 -- Re(lambda^2)
  end
  local tr, tr2 = 0, 0
  local a2 = a:matmul(a)
  for i = 1, 8 do tr, tr2 = tr + a:get(i, i), tr2 + a2:get(i, i) end
  near(sre, tr, 1e-4, "sum re = trace")
  near(sim, 0, 1e-4, "sum im = 0")
  near(sq, tr2, 1e-3, "sum lambda^2 = trace(A^2)")
  for i = 2, 8 do
    assert(math.sqrt(re:get(i) ^ 2 + im:get(i) ^ 2) <= math.sqrt(re:get(i - 1) ^ 2 + im:get(i - 1) ^ 2) * (1 + 1e-6),
           "|lambda| descending")
  end
end)

check("eig: batched over leading dims", function()
  local a = mp.stack({mp.tensor{{0, -1}, {1, 0}}, mp.tensor{{2, 0}, {0, -3}}}, 1)
  local re, im = a:eig()
  deep_eq(re:shape(), {2, 2}, "batched shape")
  vec_near(re:select(1), {0, 0}, 1e-7, "rotation 90 re")
  vec_near(im:select(1), {1, -1}, 1e-7, "rotation 90 im")
  vec_near(re:select(2), {-3, 2}, 1e-7, "diag re")
end)

check("eig/eigh: bad input is a clear error", function()
  expect_error(function() mp.tensor{{1, 2, 3}, {4, 5, 6}}:eig() end, "eig: needs a square matrix [..., n, n], got [2,3]", "2x3")
  expect_error(function() mp.tensor{1, 2}:eigh() end, "eigh: needs a square matrix", "1-D")
  expect_error(function() mp.tensor{{1, 0 / 0}, {0, 1}}:eig() end, "eig: element 2 is not finite", "NaN")
end)

-- ---- eigh ----

check("eigh: [[2,1],[1,2]] and a diagonal matrix", function()
  local w, v = mp.tensor{{2, 1}, {1, 2}}:eigh()
  vec_near(w, {1, 3}, 1e-6, "values ascending")
  local r = 1 / math.sqrt(2)
  -- columns: (1, -1)/sqrt2 and (1, 1)/sqrt2, each up to sign
  local s1, s2 = v:get(1, 1) > 0 and 1 or -1, v:get(1, 2) > 0 and 1 or -1
  near(s1 * v:get(1, 1), r, 1e-6, "v11"); near(s1 * v:get(2, 1), -r, 1e-6, "v21")
  near(s2 * v:get(1, 2), r, 1e-6, "v12"); near(s2 * v:get(2, 2), r, 1e-6, "v22")
  local w2, v2 = mp.tensor{{3, 0, 0}, {0, -5, 0}, {0, 0, 1}}:eigh()
  vec_near(w2, {-5, 1, 3}, 1e-6, "diag values")
  near(math.abs(v2:get(2, 1)), 1, 1e-6, "first vector e2")
  near(math.abs(v2:get(3, 2)), 1, 1e-6, "second vector e3")
  near(math.abs(v2:get(1, 3)), 1, 1e-6, "third vector e1")
end)

check("eigh: tridiagonal (-1, 2, -1) has 2 - 2cos(k pi / (n + 1))", function()
  local n = 6
  local a = mp.zeros(n, n)
  for i = 1, n do
    a:set(2, i, i)
    if i < n then a:set(-1, i, i + 1); a:set(-1, i + 1, i) end
  end
  local w, v = a:eigh()
  local ref = {}
  for k = 1, n do ref[k] = 2 - 2 * math.cos(k * math.pi / (n + 1)) end
  vec_near(w, ref, 1e-5, "tridiagonal")
  -- A v = v diag(w)
  local av, vw = a:matmul(v), v * w
  assert(maxdiff(av, vw, "A v") < 1e-5, "A v = v diag(w)")
end)

check("eigh: a symmetric 4x4 against numpy (vectors up to sign); reads only the lower triangle", function()
  local s = {{4, 1, -2, 0.5}, {1, 3, 0, 1}, {-2, 0, 5, -1}, {0.5, 1, -1, 2}}
  local w, v = mp.tensor(s):eigh()
  vec_near(w, {1.047138640929087, 2.3609454269745447, 3.60257440033976, 6.989341531756605}, 7e-5 * 1, "values")
  local absv = {{0.2695752192603051, 0.7174994986878304, 0.2271796025045675, 0.6007604337415512},
                {0.5187947492237333, 0.2348224610928722, 0.7939353884583267, 0.21301882287182006},
                {0.324501499493447, 0.3287404039181093, 0.5049175736331963, 0.7291685453272296},
                {0.7435589997876069, 0.5674351310773387, 0.2512255381042265, 0.24904440338690406}}
  for i = 1, 4 do for j = 1, 4 do near(math.abs(v:get(i, j)), absv[i][j], 1e-5, "|v|") end end
  -- the strict upper triangle is not read (torch's UPLO = "L")
  local u = mp.tensor(s)
  u:set(100, 1, 4); u:set(-7, 2, 3)
  local w2 = u:eigh()
  assert(maxdiff(w2, w, "upper ignored") == 0, "upper triangle ignored")
end)

-- ---- FactoredMatrix ----

local function fm_check_svd(f, what)
  local ab = f.AB
  local u, s, vh = f:svd()
  local nd = ab:dim()
  local r = math.min(f.ldim, f.mdim, f.rdim)
  assert(u:size(-1) == r and s:size(-1) == r and vh:size(-2) == r, what .. ": r = mdim")
  local scale = ab:abs():max()
  -- U diag(S) Vh = AB
  local rec = (u * s:unsqueeze(-2)):matmul(vh)
  assert(maxdiff(rec, ab, what) < 1e-4 * scale, what .. ": U diag(S) Vh = AB")
  -- orthonormal columns of U and rows of Vh
  local eye = mp.eye(r)
  assert((u:transpose(-2, -1):matmul(u) - eye):abs():max() < 1e-5, what .. ": U^T U = I")
  assert((vh:matmul(vh:transpose(-2, -1)) - eye):abs():max() < 1e-5, what .. ": Vh Vh^T = I")
  -- S equals the product's singular values (t:svd() per matrix)
  local mats = nd == 2 and {ab} or {}
  local ss = nd == 2 and {s} or {}
  if nd == 3 then for i = 1, ab:size(1) do mats[i] = ab:select(i); ss[i] = s:select(i) end end
  for i, m in ipairs(mats) do
    local _, sref = m:svd()
    for j = 1, r do near(ss[i]:get(j), sref:get(j), 1e-4 * scale, what .. " S[" .. j .. "]") end
  end
end

check("FactoredMatrix: AB, shape, dims, svd, norm (2-D and batched, k < m, n)", function()
  local A, B = mp.randn(6, 3, {seed = 1}), mp.randn(3, 5, {seed = 2})
  local f = mp.FactoredMatrix(A, B)
  deep_eq(f.shape, {6, 5}, "shape")
  assert(f.ldim == 6 and f.mdim == 3 and f.rdim == 5 and f.ndim == 2, "dims")
  assert(maxdiff(f.AB, A:matmul(B), "AB") == 0, "AB = A @ B")
  assert(f.A:numel() == 18 and f.B:numel() == 15, ".A, .B")
  fm_check_svd(f, "2-D")
  near(f:norm(), f.AB:norm(), 1e-5 * f.AB:norm(), "norm")
  -- k larger than m and n: mdim is min(m, k, n)
  local g = mp.FactoredMatrix(mp.randn(4, 7, {seed = 3}), mp.randn(7, 5, {seed = 4}))
  assert(g.mdim == 4, "mdim = min(ldim, k, rdim)")
  fm_check_svd(g, "k large")
  -- batched, and leading dims broadcast
  local Ab, Bb = mp.randn(3, 5, 2, {seed = 5}), mp.randn(3, 2, 4, {seed = 6})
  local h = mp.FactoredMatrix(Ab, Bb)
  deep_eq(h.shape, {3, 5, 4}, "batched shape")
  fm_check_svd(h, "batched")
  local n = h:norm()
  deep_eq(n:shape(), {3}, "batched norm shape")
  for i = 1, 3 do
    local ref = h.AB:select(i):norm()
    near(n:get(i), ref, 1e-5 * ref, "batched norm")
  end
  local bc = mp.FactoredMatrix(Ab:select(2), Bb)
  deep_eq(bc.shape, {3, 5, 4}, "broadcast shape")
  assert(maxdiff(bc.AB, Ab:select(2):matmul(Bb), "broadcast") < 1e-6, "broadcast AB")
end)

check("FactoredMatrix: eigenvalues of BA are AB's nonzero ones; BA", function()
  local A, B = mp.randn(6, 3, {seed = 7}), mp.randn(3, 6, {seed = 8})
  local f = mp.FactoredMatrix(A, B)
  assert(maxdiff(f.BA, B:matmul(A), "BA") == 0, "BA = B @ A")
  local re, im = f:eigenvalues()
  deep_eq(re:shape(), {3}, "k eigenvalues")
  local rre, rim = f.AB:eig() -- |lambda| descending: the 3 nonzero ones first
  local scale = math.abs(rre:get(1)) + math.abs(rim:get(1))
  for i = 1, 3 do
    near(re:get(i), rre:get(i), 1e-4 * scale, "re[" .. i .. "]")
    near(im:get(i), rim:get(i), 1e-4 * scale, "im[" .. i .. "]")
  end
  for i = 4, 6 do near(math.abs(rre:get(i)) + math.abs(rim:get(i)), 0, 1e-4 * scale, "AB's zero eigenvalues") end
  expect_error(function() return mp.FactoredMatrix(mp.randn(4, 2), mp.randn(2, 3)):eigenvalues() end,
               "eigenvalues: needs a square product (ldim == rdim), got 4 and 3", "non-square")
  expect_error(function() return mp.FactoredMatrix(mp.randn(4, 2), mp.randn(2, 3)).BA end, "BA needs ldim == rdim", "BA")
end)

check("FactoredMatrix: T, matmul, rmatmul, fm @ fm, get_corner", function()
  local A, B = mp.randn(6, 2, {seed = 9}), mp.randn(2, 5, {seed = 10})
  local f = mp.FactoredMatrix(A, B)
  local ab = f.AB
  assert(maxdiff(f:T().AB, ab:transpose(1, 2), "T") < 1e-6, "T")
  -- fm @ x: rdim 5 > mdim 2 keeps A (A, B x); rdim <= mdim uses (AB, x)
  local x = mp.randn(5, 3, {seed = 11})
  local fx = f:matmul(x)
  deep_eq(fx.shape, {6, 3}, "fm @ x shape")
  assert(maxdiff(fx.A, A, "kept A") == 0, "rdim > mdim keeps A")
  assert(maxdiff(fx.AB, ab:matmul(x), "fm @ x") < 1e-5, "fm @ x")
  local v = mp.randn(5, {seed = 12})
  assert(maxdiff(f:matmul(v), ab:matmul(v), "fm @ v") < 1e-5, "fm @ vector")
  local sq = mp.FactoredMatrix(mp.randn(3, 4, {seed = 13}), mp.randn(4, 2, {seed = 14})) -- rdim 2 <= mdim 2
  local y = mp.randn(2, 3, {seed = 15})
  assert(maxdiff(sq:matmul(y).A, sq.AB, "(AB, x)") == 0, "rdim <= mdim: FactoredMatrix(AB, x)")
  -- x @ fm
  local z = mp.randn(4, 6, {seed = 16})
  local zf = f:rmatmul(z)
  assert(maxdiff(zf.B, B, "kept B") == 0, "ldim > mdim keeps B")
  assert(maxdiff(zf.AB, z:matmul(ab), "x @ fm") < 1e-5, "x @ fm")
  local u = mp.randn(6, {seed = 17})
  assert(maxdiff(f:rmatmul(u), u:matmul(ab), "v @ fm") < 1e-5, "vector @ fm")
  -- fm @ fm
  local g = mp.FactoredMatrix(mp.randn(5, 3, {seed = 18}), mp.randn(3, 4, {seed = 19}))
  local fg = f:matmul(g)
  assert(getmetatable(fg) == getmetatable(f), "fm @ fm is a FactoredMatrix")
  assert(maxdiff(fg.AB, ab:matmul(g.AB), "fm @ fm") < 1e-4, "fm @ fm")
  -- get_corner
  local c = f:get_corner(2)
  deep_eq(c:shape(), {2, 2}, "corner shape")
  for i = 1, 2 do for j = 1, 2 do near(c:get(i, j), ab:get(i, j), 1e-6, "corner") end end
  expect_error(function() return f:matmul(mp.randn(4, 3)) end, "matmul: x's second-to-last dim must equal rdim 5, got 4", "bad x")
end)

check("FactoredMatrix: bad factors are a clear error", function()
  expect_error(function() return mp.FactoredMatrix(mp.randn(3, 2), mp.randn(3, 4)) end,
               "mp.FactoredMatrix: A's last dim must equal B's second-to-last", "k mismatch")
  expect_error(function() return mp.FactoredMatrix(mp.randn(3), mp.randn(3, 4)) end, "at least 2-D", "1-D")
  expect_error(function() return mp.FactoredMatrix(mp.randn(2, 3, 2), mp.randn(4, 2, 4)) end, "do not broadcast", "batch")
  -- no gradient rule: a tracked factor or operand is refused, not silently dropped
  local w = mp.randn(3, 2, {seed = 20}):requires_grad_()
  expect_error(function() return mp.FactoredMatrix(w, mp.randn(2, 3)) end, "mp.FactoredMatrix: no gradient rule", "grad")
  expect_error(function() return mp.FactoredMatrix(mp.randn(4, 2), mp.randn(2, 3)):matmul(w) end, "matmul: no gradient rule", "grad x")
  expect_error(function() return w:eig() end, "eig: no gradient rule", "grad eig")
  -- a FactoredMatrix is not a Tensor: a clear type error
  local svd = mp.FactoredMatrix(mp.randn(4, 2), mp.randn(2, 3)).svd
  expect_error(function() return svd(mp.randn(2, 2)) end, "FactoredMatrix expected", "self")
end)

-- ---- m:OV / m:QK ----

check("m:OV / m:QK equal W_V W_O and W_Q W_K^T per head (GQA: K/V heads repeated)", function()
  local m = mp.model.new{d_model = 16, n_layer = 2, n_head = 4, n_kv_head = 2, d_head = 4, d_mlp = 24, vocab = 11,
                         ctx = 8, seed = 3}
  for l = 0, 1 do
    local ov, qk = m:OV(l), m:QK(l)
    deep_eq(ov.shape, {4, 16, 16}, "OV shape")
    deep_eq(qk.shape, {4, 16, 16}, "QK shape")
    assert(ov.mdim == 4 and qk.mdim == 4, "mdim = d_head")
    assert(maxdiff(ov.AB, m:W_V(l):matmul(m:W_O(l)), "OV") == 0, "OV = W_V W_O")
    assert(maxdiff(qk.AB, m:W_Q(l):matmul(m:W_K(l):transpose(-2, -1)), "QK") == 0, "QK = W_Q W_K^T")
  end
  -- heads 1 and 2 share K/V head 1: their W_V factor is the same
  local ov = m:OV(1)
  assert(maxdiff(ov.A:select(1), ov.A:select(2), "GQA") == 0, "repeated K/V heads")
  local all = m:OV()
  deep_eq(all.shape, {2, 4, 16, 16}, "all layers")
  assert(maxdiff(all.AB:select(2), m:OV(1).AB, "stacked") == 0, "stacked layer 1")
  local s = select(2, ov:svd())
  deep_eq(s:shape(), {4, 4}, "per-head singular values")
  m:close()
end)

t.finish("test_factored")
