-- test_mirror_rules.lua — the mirror_descent claims (probes/lib/mirror_rules.lua)
-- as rows of the verdict engine, on planted inputs: every rule reaches
-- SUPPORTED, NOT SUPPORTED and INCONCLUSIVE where its words say, with each
-- reason class that applies to it (interval straddles, precondition absent,
-- not learned at this scale, too few seeds); the fits against closed forms;
-- the whole table (M.rows) in claim order, parsed back and as verdicts.tsv.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
package.path = (os.getenv("MP_SRC") or ".") .. "/probes/lib/?.lua;" .. package.path
local R = require "mirror_rules"
local V = require "verdicts"
local S, N, I = V.S, V.N, V.I

local function is(row, word, reason, what)
  assert(row.word == word and row.reason == (reason or ""),
         ("%s: %s (%s), expected %s (%s): %s"):format(what, row.word, row.reason, word, reason or "", row.ours))
end

t.case("fits and the bootstrap interval", function()
  local T, eta = {24, 32, 48, 64, 96, 128, 192}, {}
  for i, x in ipairs(T) do eta[i] = 3 * x ^ -0.8 end
  local slope, se, c, rms = R.fit_loglog(T, eta)
  t.near(slope, -0.8, 1e-12, "slope"); t.near(c, math.log(3), 1e-12, "intercept")
  assert(se < 1e-10 and rms < 1e-12, "exact power law: no residual")
  for i, x in ipairs(T) do eta[i] = 3 / (x + 10) end
  local a, b, r2 = R.fit_offset(T, eta)
  t.near(a, 3, 1e-3, "a"); t.near(b, 10, 1e-2, "b"); assert(r2 < 1e-5, "rms " .. r2)
  local sorted = {}
  for i = 1, 200 do sorted[i] = i end
  local lo, hi = R.boot_interval(sorted)
  assert(lo == 5 and hi == 195, ("2.5%% / 97.5%% of 200: %d, %d"):format(lo, hi))
  assert(R.mean_ci == V.mean_ci, "mean_ci is the engine's (kept for rope_id_rules, test_sinks_train)")
end)

t.case("C1", function()
  local function c1(vals) return R.C1{values = vals, draws = {1, 2, 3, 4}, sequences = 256, eta0 = 0.25, T = 4,
                                      boot = {eta = 0.24, lo = 0.22, hi = 0.27, n = 256, nb = 200}} end
  is(c1{0.24, 0.23, 0.245, 0.235}, S, nil, "inside the band")
  is(c1{0.5, 0.48, 0.52, 0.49}, N, nil, "outside the band")
  is(c1{0.2, 0.3, 0.15, 0.35}, I, V.STRADDLES, "straddles")
  local r = c1{0.24, 0.23, 0.245, 0.235}
  assert(r.unit:find("4 pi* draws (t-interval over draws; each its own pi* and 256 sequences)", 1, true)
         and r.n_seeds == 0, "unit: " .. r.unit)
  t.near(r.mean, 0.2375, 1e-12, "the mean over draws")
  assert(r.ours:find("draws 0.2400, 0.2300, 0.2450, 0.2350", 1, true), "every draw shown: " .. r.ours)
  assert(r.describe:find("bootstrap interval over its 256 sequences [0.2200, 0.2700]", 1, true),
         "the one-draw bootstrap is described: " .. r.describe)
  is(c1{0.24, 0.23}, I, V.PRECONDITION, "two draws")
  is(R.C1{eta0 = 0.25, T = 4, boot = {eta = 0.24, lo = 0.22, hi = 0.27, n = 256, nb = 200}}, I, V.PRECONDITION,
     "a file without draws")
end)

t.case("C2", function()
  -- eta = a T^p on each draw, a little noise; the draws differ in a and p
  local Ta = {24, 48, 96, 192, 384, 768, 1536, 3072, 6144, 8192}
  local function asym(ps)
    local eta = {}
    for d, p in ipairs(ps) do
      eta[d] = {}
      for i, x in ipairs(Ta) do eta[d][i] = (2 + d) * x ^ p * (1 + 0.01 * ((i % 3) - 1)) end
    end
    return {T = Ta, eta = eta, draws = {11, 12, 13, 14}, sequences = 256}
  end
  local T, e = {24, 32, 48, 64, 96, 128, 192}, {}
  for i, x in ipairs(T) do e[i] = 2 / (x + 6) end
  local function c2(ps) return R.C2{asym = ps and asym(ps), T = T, eta = e, m = 3} end
  is(c2{-1, -0.99, -1.01, -1}, S, nil, "slope -1")
  is(c2{-0.7, -0.72, -0.69, -0.7}, N, nil, "slope -0.7")
  is(c2{-0.85, -0.95, -1.0, -0.8}, I, V.STRADDLES, "draws on both sides of the band's edge")
  local r = c2{-1, -0.99, -1.01, -1}
  assert(r.unit:find("4 pi* draws", 1, true) and r.statistic:find("T 384..8192", 1, true), r.unit .. " / " .. r.statistic)
  assert(r.describe:find("a/(T+b)", 1, true) and r.describe:find("slope on T 24..192", 1, true),
         "the short range is described: " .. r.describe)
  local A, want = asym{-1, -0.99, -1.01, -1}, 0
  for d = 1, 4 do
    local lx, ly, n = {}, {}, 0
    for i = 5, #Ta do n = n + 1; lx[n] = math.log(Ta[i]); ly[n] = math.log(A.eta[d][i]) end
    local mx, my, sxy, sxx = 0, 0, 0, 0
    for i = 1, n do mx = mx + lx[i] / n; my = my + ly[i] / n end
    for i = 1, n do sxy = sxy + (lx[i] - mx) * (ly[i] - my); sxx = sxx + (lx[i] - mx) ^ 2 end
    want = want + sxy / sxx / 4
  end
  t.near(r.tests[1].mean, want, 1e-12, "the mean of the per-draw least-squares slopes on T >= 384")
  is(c2{-1, -1}, I, V.PRECONDITION, "two draws")
  is(c2(nil), I, V.PRECONDITION, "a file without draws")
  local short = asym{-1, -1, -1}
  short.T = {24, 48, 96, 192, 384, 768}
  for d = 1, 3 do short.eta[d] = {table.unpack(short.eta[d], 1, 6)} end
  is(R.C2{asym = short, T = T, eta = e, m = 3}, I, V.PRECONDITION, "two T values in the asymptotic range")
end)

t.case("C6", function()
  local function diffs(mu, sd, n)
    local d = {}
    for i = 1, n do d[i] = mu + sd * ((i % 2 == 0) and 1 or -1) end
    return d
  end
  local function c6(d) return R.C6{diff = d, md = 0.02, n_seq = #d, nT = 1, max_dp = 1e-5} end
  is(c6(diffs(1e-7, 1e-6, 200)), S, nil, "agrees to 1e-7")
  is(c6(diffs(0.01, 1e-4, 200)), N, nil, "off by half")
  is(c6(diffs(0.0002, 0.002, 20)), I, V.STRADDLES, "noisy around the band edge")
end)

-- planted trained models: uniform-lambda KL 0.10, one-step MD 0.04 (learned:
-- KL <= 0.07), three seeds per group unless said
local function model(arch, depth, seed, x)
  local r = {name = ("%s-L%d-all-s%d"):format(arch, depth, seed), arch = arch, depth = depth, loss = "all", seed = seed,
             kl_avg = 0.045, attn_kl = 0.1, uniform_attn_kl = 0.46, ablate_best = 0.09, ablate_control = 0.046,
             dist = {md1 = 0.001, md2 = 0.0015, md3 = 0.0016, bayes = 0.002}}
  for k, v in pairs(x or {}) do r[k] = v end
  return r
end
-- groups: {{arch, depth, fn(seed) -> fields}}
local function planted(groups, nseeds)
  local E = {uniform_kl = 0.10, md_kl = 0.04, spread = 0.004, arch = "standard",
             scale = "our models: 19k-148k parameters x 3.07M training tokens", models = {}}
  for _, g in ipairs(groups) do
    for s = 1, nseeds or 3 do E.models[#E.models + 1] = model(g[1], g[2], s, g[3] and g[3](s)) end
  end
  return E
end

t.case("learned-task test", function()
  t.near(R.learn_threshold{uniform_kl = 0.10, md_kl = 0.04}, 0.07, 1e-12, "halfway from uniform to MD")
  local E = planted{{"standard", 3, function() return {kl_avg = 0.09} end}}
  for _, f in ipairs{R.C3, R.C4, R.C5, R.C7} do
    local r = f(E)
    is(r, I, V.NOT_LEARNED, r.id .. " when no seed learned")
    assert(r.ours:find("standard-L3 0/3", 1, true) and r.ours:find("19k-148k parameters", 1, true),
           r.id .. ": the learned test and the scale are printed: " .. r.ours)
  end
end)

t.case("C3", function()
  local close = function(s) return {attn_kl = 0.05 + 0.01 * s} end
  local far = function(s) return {attn_kl = 0.45 + 0.001 * s} end
  local noisy = function(s) return {attn_kl = ({0.1, 0.6, 0.3})[s]} end
  is(R.C3(planted{{"standard", 3, close}, {"attn-only", 3, close}, {"standard", 2, far}}), S, nil,
     "every deep group closer; depth 2 not judged")
  is(R.C3(planted{{"standard", 3, close}, {"attn-only", 3, far}}), N, nil, "one deep group at uniform")
  is(R.C3(planted{{"standard", 3, noisy}}), I, V.STRADDLES, "straddles 0.9")
  is(R.C3(planted({{"standard", 3, close}}, 2)), I, V.FEW_SEEDS, "two seeds")
  is(R.C3(planted{{"standard", 2, close}}), I, V.PRECONDITION, "no group of depth >= 3")
  -- a deep group that did not learn is described, the learned one judged
  local r = R.C3(planted{{"standard", 3, close}, {"attn-only", 3, function(s) return {kl_avg = 0.09, attn_kl = 2} end}})
  assert(r.word == S and r.describe:find("not learned, not judged: attn-only-L3", 1, true), r.describe)
end)

t.case("C4", function()
  local good = function(s) return {kl_avg = 0.040 + 0.001 * (s - 2)} end
  local bad = function(s) return {kl_avg = 0.065 + 0.001 * s} end
  local wide = function(s) return {kl_avg = ({0.03, 0.068, 0.05})[s]} end
  local r = R.C4(planted{{"standard", 3, good}, {"standard", 4, good},
                         {"standard", 2, function() return {kl_avg = 0.2} end}})
  is(r, S, nil, "every deep group within 50%")
  assert(r.describe:find("standard-L2", 1, true), "depth 2 described: " .. r.describe)
  is(R.C4(planted{{"standard", 3, good}, {"standard", 4, bad}}), N, nil, "one group 65% off")
  is(R.C4(planted{{"standard", 3, good}, {"attn-only", 3, wide}}), I, V.STRADDLES, "one interval straddles")
  is(R.C4(planted({{"standard", 3, good}}, 1)), I, V.FEW_SEEDS, "one seed")
end)

t.case("C5", function()
  -- g = KL(MD1, model) - KL(Bayes, model): -0.001 at depth 2; deeper: nearer Bayes (g up) or not
  local function d(g, s)
    return {dist = {md1 = 0.001, md2 = 0.0012, md3 = 0.0013, bayes = 0.001 - g + 1e-4 * (s - 2)}}
  end
  local function at(g) return function(s) return d(g, s) end end
  is(R.C5(planted{{"standard", 2, at(-0.001)}, {"standard", 3, at(0)}, {"standard", 4, at(0.001)}}), S, nil,
     "deeper nearer Bayes")
  is(R.C5(planted{{"standard", 2, at(0.001)}, {"standard", 4, at(-0.001)}}), N, nil, "deeper nearer one-step MD")
  local noisy = function(s) return d(({-0.003, 0.004, 0.001})[s], 0) end
  is(R.C5(planted{{"standard", 2, at(0)}, {"standard", 4, noisy}}), I, V.STRADDLES, "straddles 0")
  local E = planted{{"standard", 2, at(-0.001)}, {"standard", 4, at(0.001)}}
  E.spread = 0.0005
  local r = R.C5(E)
  is(r, I, V.PRECONDITION, "models farther from every estimator than the estimators from each other")
  assert(r.ours:find("0.0005", 1, true), "the spread is printed: " .. r.ours)
  is(R.C5(planted{{"standard", 3, at(0)}}), I, V.PRECONDITION, "one depth")
  is(R.C5(planted{{"attn-only", 2, at(0)}, {"attn-only", 4, at(0.001)}}), I, V.NOT_LEARNED,
     "only the first architecture is judged: none of it here")
end)

t.case("C7", function()
  local hurt = function(s) return {ablate_best = 0.09 + 0.001 * s, ablate_control = 0.046} end
  local harmless = function(s) return {ablate_best = 0.046 + 0.0002 * s, ablate_control = 0.046} end
  local noisy = function(s) return {ablate_best = ({0.046, 0.08, 0.06})[s], ablate_control = 0.046} end
  local r = R.C7(planted{{"standard", 3, hurt}})
  is(r, S, nil, "gamma head, zeroing it doubles the KL")
  assert(r.ours:find("control head zeroed", 1, true), "the control is printed: " .. r.ours)
  is(R.C7(planted{{"standard", 3, harmless}}), N, nil, "gamma head, zeroing it harmless")
  is(R.C7(planted{{"standard", 3, noisy}}), I, V.STRADDLES, "straddles 10%")
  is(R.C7(planted{{"standard", 3, function(s) return {attn_kl = 0.46, ablate_best = 0.09} end}}), I, V.PRECONDITION,
     "no gamma-like head")
end)

t.case("the table: M.rows, the report lines, verdicts.tsv", function()
  local E = planted{{"standard", 2}, {"standard", 3}, {"attn-only", 3}}
  E.c1 = {values = {0.24, 0.23, 0.245}, draws = {1, 2, 3}, sequences = 256, eta0 = 0.25, T = 4}
  E.c2 = {T = {24, 32, 48}, eta = {0.08, 0.06, 0.04}, m = 3}
  E.c6 = {diff = {1e-7, -1e-7, 2e-7}, md = 0.04, n_seq = 3, nT = 1, max_dp = 1e-5}
  local rows = R.rows(E)
  local ids = {}
  for i, r in ipairs(rows) do ids[i] = r.id end
  assert(table.concat(ids, ",") == "C1,C2,C3,C4,C5,C6,C7", "claim order: " .. table.concat(ids, ","))
  local lines = V.report_lines(rows, {58, 36, 1})
  local parsed = V.parse(table.concat(lines, "\n"))
  assert(#parsed == 7 and #V.problems(parsed) == 0, "well-formed rows: " .. table.concat(V.problems(parsed), "; "))
  local tsv = V.tsv(rows)
  assert(select(2, tsv:gsub("\n", "")) == 8 and tsv:find("^id\tclaim\tpaper\tsource\tstatistic"), "TSV header, 7 rows")
  -- without trained models: C1, C2, C6 only
  E.models = {}
  assert(#R.rows(E) == 3, "no models: three rows")
end)

t.finish("test_mirror_rules")
