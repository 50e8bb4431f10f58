-- test_plot.lua — the Lua API of plots/ and analyze/ (lua/lplot.c, lua/lanalyze.c):
-- figures of every series kind saved as PNG (size read from the IHDR chunk), SVG
-- and PDF; misuse and bad paths raise errors naming the argument or file; the
-- analyses on constructed inputs with closed-form answers (tolerances stated).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near, expect_error = t.case, t.near, t.expect_error
if not (mp.plot and mp.analyze) then
  print("SKIP: mp.plot / mp.analyze are not registered in this build")
  os.exit(77)
end

local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function exists(p) local f = io.open(p, "rb"); if f then f:close() end; return f ~= nil end

local dir = os.tmpname()
os.remove(dir)
mp.mkdir(dir)

math.randomseed(42)
local function randn()
  return math.sqrt(-2 * math.log(1 - math.random())) * math.cos(2 * math.pi * math.random())
end

local function png_size(p)
  local s = slurp(p)
  assert(s:sub(1, 8) == "\137PNG\r\n\26\n", p .. " is not a PNG")
  return string.unpack(">I4I4", s, 17)
end

-- ---- figures ----
check("grid of every series kind, three formats", function()
  local fig = mp.plot.figure{rows = 2, cols = 2, title = "all kinds"}
  local x, y, cat, val = {}, {}, {}, {}
  for i = 1, 200 do
    local c = (i % 3) + 1
    x[i], y[i] = randn() + 3 * c, randn() - c
    cat[i] = ({"queries", "keys", "sink"})[c]
    val[i] = i
  end
  fig:axes(1, 1):scatter(x, y, {category = cat, size = 4}):set{title = "categories", xlabel = "PC 1", ylabel = "PC 2"}:legend()
  fig:axes(1, 2):scatter(mp.tensor(x), mp.tensor(y), {color = val, cmap = "magma", colorbar_label = "position"})
  local z = {}
  for q = 1, 16 do z[q] = {} for k = 1, 16 do z[q][k] = k <= q and 1 / q or 0 end end
  fig:axes(2, 1):heatmap(mp.tensor(z), {log = true, mask_upper = true, colorbar_label = "attention"})
  local ys, lo, hi = {}, {}, {}
  for i = 1, 30 do ys[i] = math.exp(-i / 10); lo[i] = ys[i] * 0.8; hi[i] = ys[i] * 1.2 end
  local ax = fig:axes(2, 2)
  ax:line(nil, ys, {label = "decay", band_lo = lo, band_hi = hi})
  ax:line(nil, lo, {label = "lower", dashed = true, marker = true})
  ax:set{ylog = true, xlabel = "step", ylabel = "value", xlim = {0, 31}}:legend()
  for _, ext in ipairs{"png", "svg", "pdf"} do
    local p = dir .. "/grid." .. ext
    assert(fig:save(p) == p)
    assert(exists(p), p .. " missing")
  end
  local w, h = png_size(dir .. "/grid.png")
  assert(w == 900 and h == 675, ("default 432x324 pt at 150 dpi is 900x675, got %dx%d"):format(w, h))
  fig:save(dir .. "/grid72.png", {dpi = 72})
  w, h = png_size(dir .. "/grid72.png")
  assert(w == 432 and h == 324, ("72 dpi: %dx%d"):format(w, h))
  assert(slurp(dir .. "/grid.pdf"):sub(1, 4) == "%PDF")
  local svg = slurp(dir .. "/grid.svg")
  assert(svg:find('width="432pt" height="324pt"', 1, true), "svg size")
  fig:close()
end)

check("bars and figure options", function()
  local fig = mp.plot.figure{width = 300, height = 200, font_size = 9}
  local ax = fig:axes()
  ax:bars({"copy", "identity", "closure"}, {{0.9, 0.5, 0.2}, {0.4, 0.8, 0.6}},
          {labels = {"layer 1", "layer 2"}, err = {{0.05, 0.05, 0.1}, {0.1, 0.02, 0.05}}})
  ax:set{ylabel = "accuracy", title = "heads"}:legend()
  fig:set{title = "bars"}
  fig:save(dir .. "/bars.png", {dpi = 144})
  local w, h = png_size(dir .. "/bars.png")
  assert(w == 600 and h == 400, ("%dx%d"):format(w, h))
  assert(tostring(fig):find("Figure", 1, true))
  assert(tostring(ax) == "Axes(1, 1)")
  fig:close()
end)

check("heatmap token labels (Unicode) and the diverging default", function()
  local toks = {"\u{2581}the", "\u{f6}", "\u{65e5}\u{672c}", "\xff", "a very long token piece indeed"}
  local z = {}
  for i = 1, 5 do z[i] = {} for j = 1, 5 do z[i][j] = j <= i and (i - j) / 4 - 0.5 or 0 end end
  local fig = mp.plot.figure{rows = 1, cols = 2, width = 500, height = 240}
  fig:axes(1, 1):heatmap(z, {mask_upper = true, xticklabels = toks, yticklabels = toks})
    :set{xlabel = "key", ylabel = "query"}
  fig:axes(1, 2):heatmap(z, {cmap = "auto", vmax = 1, xticklabels = {1, 2, 3, 4, 5}, yticklabels = toks})
  for _, ext in ipairs{"png", "svg", "pdf"} do
    assert(fig:save(dir .. "/tokens." .. ext) == dir .. "/tokens." .. ext)
    assert(exists(dir .. "/tokens." .. ext), ext)
  end
  local w, h = png_size(dir .. "/tokens.png")
  assert(w == 1042 and h == 500, ("150 dpi: %dx%d"):format(w, h))
  local ax = fig:axes(1, 1)
  expect_error(function() ax:heatmap(z, {xticklabels = {"a", "b"}}) end, "xticklabels has 2 labels but there are 5 columns",
               "label count")
  expect_error(function() ax:heatmap(z, {yticklabels = {"a", "b", {}, "d", "e"}}) end, "yticklabels[3] is not a string",
               "non-string label")
  expect_error(function() ax:heatmap(z, {xticklabels = "abcde"}) end, "xticklabels must be a table", "labels not a table")
  expect_error(function() ax:heatmap(z, {xtick_labels = toks}) end, "unknown option 'xtick_labels'", "strict options")
  expect_error(function() ax:heatmap(z, {cmap = "jet"}) end, "use auto, viridis", "cmap names listed")
  fig:close()
end)

check("misuse and bad paths raise errors naming the problem", function()
  local fig = mp.plot.figure{rows = 1, cols = 2}
  local ax = fig:axes(1, 2)
  expect_error(function() fig:axes(2, 1) end, "fig:axes: argument #1 (row) must be an integer in [1, 1], got 2", "axes out of range")
  expect_error(function() ax:scatter({1, 2}, {1}) end, "x has 2 values but y has 1", "length mismatch")
  expect_error(function() ax:scatter({1, 2}, {1, 2}, {cmap = "jet"}) end, "jet", "unknown cmap")
  expect_error(function() ax:heatmap({1, 2, 3}) end, "2-D", "1-D heatmap")
  expect_error(function() ax:set{xlim = {2, 1}} end, "lo < hi", "bad xlim")
  expect_error(function() ax:bars({"a", "b"}, {{1, 2, 3}}) end, "3 values per series but there are 2 groups", "bars shape")
  ax:line({1, 2, 3}, {1, 2, 3})
  local bad = dir .. "/figure.bmp"
  expect_error(function() fig:save(bad) end, bad, "unknown extension")
  assert(not exists(bad), "nothing written for a bad extension")
  expect_error(function() fig:save("/nonexistent-mechprobe-dir/f.png") end, "/nonexistent-mechprobe-dir/f.png", "unwritable")
  expect_error(function() mp.plot.figure{rows = 0} end, "rows", "0 rows")
  fig:close()
  fig:close()  -- idempotent
  expect_error(function() ax:line({1}, {1}) end, "closed", "axes of a closed figure")
  expect_error(function() fig:save(dir .. "/x.png") end, "closed", "save after close")
  do local f2 <close> = mp.plot.figure{} ; f2:axes():line(nil, {1, 2}) end  -- __close
end)

-- ---- analyses ----
check("pca recovers a planted direction", function()
  -- x = 3 z e1 + 0.1 noise in R^4 with e1 = (1,1,0,0)/sqrt(2): explained[1] ~ 9 (5% for n = 3000).
  local X = {}
  for i = 1, 3000 do
    local z = 3 * randn()
    X[i] = {z / math.sqrt(2) + 0.1 * randn() + 5, z / math.sqrt(2) + 0.1 * randn(), 0.1 * randn(), 0.1 * randn()}
  end
  local p = mp.analyze.pca(mp.tensor(X), 2)
  assert(p.method == "svd" and p.k == 2 and p.n == 3000 and p.d == 4)
  near(math.abs(p.components:get(1, 1)), 1 / math.sqrt(2), 0.01, "component x")
  near(math.abs(p.components:get(1, 2)), 1 / math.sqrt(2), 0.01, "component y")
  near(p.explained[1] / 9.01, 1, 0.08, "explained variance")
  assert(p.ratio[1] > 0.99, "ratio " .. p.ratio[1])
  near(p.mean[1], 5, 0.2, "mean")
  local s = p.proj:shape()
  assert(s[1] == 3000 and s[2] == 2)
end)

check("stable rank, sigma1 share, separation", function()
  local X = {}
  for i = 1, 50 do X[i] = {i, 2 * i, -i} end
  near(mp.analyze.stable_rank(X), 1, 1e-6, "rank-1 srank")
  near(mp.analyze.sigma1_share(X), 1, 1e-6, "rank-1 share")
  local sp = mp.analyze.spectrum(X)
  near(sp.stable_rank * sp.sigma1_share, 1, 1e-9, "share = 1/srank")
  -- Clouds {mu +- e_j}: cos 1/sqrt(2), distance 3, spread 1.
  local A, B = {}, {}
  for j = 1, 4 do for s = -1, 1, 2 do
    local a, b = {3, 0, 0, 0}, {3, 3, 0, 0}
    a[j] = a[j] + s; b[j] = b[j] + s
    A[#A + 1] = a; B[#B + 1] = b
  end end
  local r = mp.analyze.separation(A, B)
  near(r.cos, 1 / math.sqrt(2), 1e-6, "cos")
  near(r.centroid_dist, 3, 1e-6, "distance")
  near(r.spread, 1, 1e-6, "spread")
  assert(r.fisher_acc == 1, "separable clouds")
  expect_error(function() mp.analyze.separation(A, {{1, 2}}) end, "dimensions", "dimension mismatch")
end)

check("sinks, entropy, key norms, max q.k", function()
  -- [2 layers, 2 heads, T=16]: three heads put all mass on token 1, one is uniform
  -- (its alpha_1 = H_16 / 16 = 0.21 < eps = 0.3).
  local T = 16
  local P = {}
  for l = 1, 2 do P[l] = {} for h = 1, 2 do
    local A = {}
    for q = 1, T do A[q] = {} for k = 1, T do
      if l == 2 and h == 2 then A[q][k] = k <= q and 1 / q or 0 else A[q][k] = k == 1 and 1 or 0 end
    end end
    P[l][h] = A
  end end
  local s = mp.analyze.sinks(mp.tensor(P), {bins = 4})
  near(s.sink_rate, 0.75, 1e-12, "sink rate")
  assert(s.sink_heads == 3 and s.pairs == 4)
  near(s.alpha:get(1, 1, 1), 1, 1e-6, "alpha_1 of a sink head")
  local H16 = 0
  for q = 1, T do H16 = H16 + 1 / q end
  near(s.alpha0:get(2, 2), H16 / T, 1e-6, "alpha_1 of the uniform head")
  near(s.entropy:get(2, 2, 5), math.log(5), 1e-6, "uniform row entropy = log q")
  near(s.entropy:get(1, 1, 5), 0, 1e-12, "sink row entropy")
  assert(s.bin_start[1] == 1 and s.bin_end[1] == 4 and s.bin_start[2] == 5 and s.bin_end[4] == 16, "bins")
  near(s.first_by_pos[1], (3 * 4 + 1 + 1 / 2 + 1 / 3 + 1 / 4) / 16, 1e-6, "first-token attention in bin 1")
  local H = mp.analyze.entropy(P)
  near(H:get(2, 2, 16), math.log(16), 1e-6, "entropy function")
  near(mp.analyze.key_norm_ratio{{3, 4}, {1, 0}, {0, 1}, {-1, 0}, {0, -1}}, 25 / 9, 1e-6, "key norm ratio")
  local mx, am = mp.analyze.max_qk({{1, 0}, {0, 1}, {1, 1}}, {{2, 0}, {0, 3}, {1, 0}})
  near(mx[1], 2, 1e-6, "q1 sees k1 only"); assert(am[1] == 1)
  near(mx[2], 3, 1e-6, "q2 best k2"); assert(am[2] == 2)
  near(mx[3], 3, 1e-6, "q3 best k2"); assert(am[3] == 2)
  expect_error(function() mp.analyze.sinks({{1, 0}, {-0.5, 1.5}}) end, "not a probability", "negative entry")
end)

check("massive activations", function()
  local h = {}
  for l = 1, 2 do h[l] = {} for t = 1, 6 do h[l][t] = {} for c = 1, 32 do h[l][t][c] = randn() end end end
  h[2][4][7] = 5000
  local m = mp.analyze.massive(h)
  assert(#m.hits == 1 and m.n_hits_total == 1, "one hit, got " .. #m.hits)
  local hit = m.hits[1]
  assert(hit.layer == 2 and hit.pos == 4 and hit.channel == 7 and hit.value == 5000)
  assert(m.ratio:get(2, 4) > 1000)
  assert(m.median[1] > 0.3 and m.median[1] < 1.2)
end)

check("bootstrap", function()
  local v = {}
  for i = 1, 40 do v[i] = 10 + randn() end
  local a = mp.analyze.bootstrap(v, {n = 500, seed = 7})
  local b = mp.analyze.bootstrap(mp.tensor(v), {n = 500, seed = 7})
  assert(a.lo == b.lo and a.hi == b.hi, "deterministic for a seed")
  assert(a.lo < a.estimate and a.estimate < a.hi)
  near(a.se, 1 / math.sqrt(40), 0.08, "se")
  local med = mp.analyze.bootstrap(v, {n = 200, stat = "median"})
  assert(med.lo <= med.estimate and med.estimate <= med.hi)
  local mx = mp.analyze.bootstrap(v, {n = 100, stat = function(t) return math.max(table.unpack(t)) end})
  assert(mx.hi <= mx.estimate + 1e-9, "max of resamples never exceeds the sample max")
  expect_error(function() mp.analyze.bootstrap(v, {stat = function() error("boom") end}) end, "boom", "stat error")
  expect_error(function() mp.analyze.bootstrap(v, {level = 2}) end, "level", "bad level")
end)

os.execute("rm -rf '" .. dir .. "'")
t.finish("test_plot")
