-- mirror_rules.lua — the claims of the mirror_descent probe (C1..C7) as rows of
-- the one verdict engine (probes/lib/verdicts.lua): each rule is a pure function
-- of numbers read from the run file (mirror_report.read_evidence) and returns
-- verdicts.judge's row, so each is unit-tested on planted inputs
-- (tests/lua/test_mirror_rules.lua). M.rows(E) builds the whole table from the
-- run file's evidence E; the run and `--rejudge` both call it on the file.
--
-- C1 and C2 are about estimators on independent pi* draws (the unit of their
-- interval), C6 about hand-set weights on one draw: trained = false, with
-- their own unit. C3, C4, C5 and C7 are about trained
-- models: one value per seed within each (architecture, depth) group, a
-- learned-task test per seed (the model's KL to the truth, averaged over the T
-- grid, at most halfway from the uniform-lambda predictor's to one-step MD's)
-- and the scale of our models beside it.
local V = require "verdicts"
local M = {}

-- other probes' rule files once took their interval from here
M.mean_ci = V.mean_ci

M.SOURCE = "D'Angelo & Flammarion (MTD in-context estimation)"
M.MIN_DEPTH = 3            -- the construction's depth: C3, C4, C7 judge models at least this deep
M.C2_BAND = 0.1            -- C2: the slope within -1 +- this
M.C2_T_MIN = 384           -- C2: the asymptotic range, T >= this (twice the models' longest T)
M.MIN_DRAWS = 3            -- C1, C2: independent pi* draws needed for an interval
M.C3_BELOW = 0.9           -- C3: KL(gamma, best L0 head) / KL(gamma, uniform) below this
M.C4_BAND = 0.5            -- C4: (model KL - MD KL) / MD KL within +- this
M.C7_ABOVE = 0.1           -- C7: (ablated - control-ablated) / intact KL above this

-- ---------------------------------------------------------------- fits

-- least squares of log eta = c + slope log T: slope, its standard error, c and
-- the RMS log residual
function M.fit_loglog(T, eta)
  local n, sx, sy = #T, 0, 0
  for i = 1, n do sx = sx + math.log(T[i]); sy = sy + math.log(eta[i]) end
  local mx, my = sx / n, sy / n
  local sxx, sxy = 0, 0
  for i = 1, n do
    local dx = math.log(T[i]) - mx
    sxx = sxx + dx * dx; sxy = sxy + dx * (math.log(eta[i]) - my)
  end
  local slope = sxy / sxx
  local c = my - slope * mx
  local ss = 0
  for i = 1, n do ss = ss + (math.log(eta[i]) - c - slope * math.log(T[i])) ^ 2 end
  local se = n > 2 and math.sqrt(ss / (n - 2) / sxx) or 0 / 0
  return slope, se, c, math.sqrt(ss / n)
end

-- least squares of log eta = log a - log(T + b) over b in [-(min T)+1, 100 max T]
-- (a golden-section search on log(T_min + b)); returns a, b and the RMS log residual
function M.fit_offset(T, eta)
  local n = #T
  local function sse(b)
    local la = 0
    for i = 1, n do la = la + (math.log(eta[i]) + math.log(T[i] + b)) / n end
    local s = 0
    for i = 1, n do s = s + (math.log(eta[i]) - la + math.log(T[i] + b)) ^ 2 end
    return s, math.exp(la)
  end
  local tmin, tmax = math.huge, 0
  for i = 1, n do tmin = math.min(tmin, T[i]); tmax = math.max(tmax, T[i]) end
  local lo, hi = math.log(1e-3), math.log(tmin + 100 * tmax)   -- u = log(tmin + b)
  local gr = (math.sqrt(5) - 1) / 2
  local function f(u) return (sse(math.exp(u) - tmin)) end
  local a1, b1 = hi - gr * (hi - lo), lo + gr * (hi - lo)
  local fa, fb = f(a1), f(b1)
  for _ = 1, 100 do
    if fa < fb then hi, b1, fb = b1, a1, fa; a1 = hi - gr * (hi - lo); fa = f(a1)
    else lo, a1, fa = a1, b1, fb; b1 = lo + gr * (hi - lo); fb = f(b1) end
  end
  local b = math.exp((lo + hi) / 2) - tmin
  local s, a = sse(b)
  return a, b, math.sqrt(s / n)
end

-- The 2.5% and 97.5% order statistics of sorted bootstrap values (the run's rule)
function M.boot_interval(sorted)
  local nb = #sorted
  return sorted[math.max(1, math.floor(0.025 * nb + 0.5))], sorted[math.min(nb, math.ceil(0.975 * nb))]
end

-- ---------------------------------------------------------------- estimator rows

-- the values of a list as "v1, v2, ..." in fmt
local function list_text(xs, fmt)
  local t = {}
  for i, x in ipairs(xs) do t[i] = fmt:format(x) end
  return table.concat(t, ", ")
end

local function draws_text(x)
  return ("%d pi* draws (t-interval over draws; each its own pi* and %d sequences)"):format(#(x.values or {}),
    x.sequences or 0)
end

-- C1: the one-step eta closest to Bayes with no evidence (T = m + 1) against
-- 1/(m+1), one value per independent pi* draw. x = {values = {eta per draw},
-- draws = {seed per draw}, sequences, eta0, T, boot = {eta, lo, hi, n, nb}
-- (optional: the run's own draw, bootstrapped over its sequences; described),
-- note (optional, described)}. No draws (a file that predates them):
-- INCONCLUSIVE, one draw cannot give a sampling interval over pi*.
function M.C1(x)
  local vals = x.values or {}
  local est, lo, hi = V.mean_ci(vals)
  local desc = {}
  if x.boot then
    desc[#desc + 1] = ("the run's own draw: eta %.4f, 95%% bootstrap interval over its %d sequences [%.4f, %.4f] (%d "
      .. "resamples, eta re-tuned on each)"):format(x.boot.eta, x.boot.n, x.boot.lo, x.boot.hi, x.boot.nb)
  end
  if x.note then desc[#desc + 1] = x.note end
  return V.judge{
    id = "C1", claim = "one MD step from uniform = Bayes mean to first order",
    paper = ("eta = 1/(m+1) = %.3f at no evidence"):format(x.eta0), source = M.SOURCE,
    statistic = ("per pi* draw: the one-step eta closest to the Bayes predictor at T = %d"):format(x.T),
    trained = false, unit = draws_text(x),
    name = "eta", est = est, lo = lo, hi = hi, inside = {0.75 * x.eta0, 1.25 * x.eta0}, fmt = "%.4f",
    extra = #vals > 0 and ("draws %s"):format(list_text(vals, "%.4f")) or nil,
    pre = {{ok = #vals >= M.MIN_DRAWS,
            text = ("%d independent pi* draws in this file (%d needed: a bootstrap over one draw's sequences says "
              .. "nothing about another pi*; rerun the probe)"):format(#vals, M.MIN_DRAWS)}},
    describe = table.concat(desc, "; "),
    rule = ("SUPPORTED if the 95%% t-interval over independent pi* draws of the one-step eta closest to Bayes at "
      .. "T = m+1 lies within 1/(m+1) +- 25%%, NOT SUPPORTED if it lies outside, else INCONCLUSIVE; fewer than %d "
      .. "draws: precondition absent"):format(M.MIN_DRAWS)}
end

-- C2: stable steps ~ 1/T on the asymptotic range. x = {asym = {T = {...},
-- eta = {[draw] = {per T}}, draws = {seeds}, sequences} (nil: a file that
-- predates the draws), T = {...}, eta = {...} (the run's own draw at T >= 8m:
-- the short-range slope, described), m}
-- Each draw's log-log slope of eta against T over t_min <= T <= t_max (t_max
-- nil: no bound) of A = {T, eta = {[draw] = {per T}}}: the slopes (none when
-- fewer than 2 T values are in range) and those T values.
function M.draw_slopes(A, t_min, t_max)
  local Ts, idx = {}, {}
  for i, T in ipairs(A.T) do
    if T >= t_min and (not t_max or T <= t_max) then Ts[#Ts + 1], idx[#idx + 1] = T, i end
  end
  local slopes = {}
  if #Ts >= 2 then
    for d = 1, #A.eta do
      local ys = {}
      for k, i in ipairs(idx) do ys[k] = A.eta[d][i] end
      slopes[d] = (M.fit_loglog(Ts, ys))
    end
  end
  return slopes, Ts
end

function M.C2(x)
  local A = x.asym
  local slopes, Tt = {}, {}
  if A then slopes, Tt = M.draw_slopes(A, M.C2_T_MIN) end
  local nfit = #Tt
  local est, lo, hi = V.mean_ci(slopes)
  local desc = {}
  local n = #x.T
  if n >= 3 then
    local slope, se = M.fit_loglog(x.T, x.eta)
    local a, b, rms_off = M.fit_offset(x.T, x.eta)
    local tmax = x.T[n]
    desc[#desc + 1] = ("the run's own draw on the models' range T %s: slope %.3f (SE %.3f); eta = a/(T+b) fit b = %.3g, "
      .. "eta T at T = %d is %.0f%% of a (RMS log residual %.3f)"):format(table.concat(x.T, ","), slope, se, b, tmax,
      100 * tmax / (tmax + b), rms_off)
  end
  if A then
    local lv, nT = {}, #A.T
    for d = 1, #A.eta do lv[d] = A.eta[d][nT] * A.T[nT] end
    local ms = M.draw_slopes(A, 8 * x.m, 192)
    desc[#desc + 1] = ("eta* T at T = %d per draw: %s"):format(A.T[nT], list_text(lv, "%.3f"))
    if #ms > 0 then
      desc[#desc + 1] = ("the same draws' slope on T %d..192: %s (mean %.3f)"):format(8 * x.m, list_text(ms, "%.3f"),
        (V.mean_ci(ms)))
    end
  end
  return V.judge{
    id = "C2", claim = "stable (best) step sizes scale as 1/T (large T)", paper = "slope -1", source = M.SOURCE,
    statistic = ("per pi* draw: log-log slope of the tuned one-step eta against T on the asymptotic range T %s")
      :format(#Tt > 0 and (Tt[1] .. ".." .. Tt[#Tt]) or (">= " .. M.C2_T_MIN)),
    trained = false, unit = draws_text{values = slopes, sequences = A and A.sequences},
    name = "slope", est = est, lo = lo, hi = hi, inside = {-1 - M.C2_BAND, -1 + M.C2_BAND}, fmt = "%.3f",
    extra = #slopes > 0 and ("draws %s"):format(list_text(slopes, "%.3f")) or nil,
    pre = {{ok = A ~= nil, text = "this file holds no asymptotic-range draws (T up to its models' range only); rerun "
              .. "the probe"},
           {ok = #slopes >= M.MIN_DRAWS and nfit >= 3,
            text = ("%d pi* draws with %d T values >= %d: the slope interval needs %d draws and 3 T values")
              :format(#slopes, nfit, M.C2_T_MIN, M.MIN_DRAWS)}},
    describe = table.concat(desc, "; "),
    rule = ("per independent pi* draw, the log-log slope of the tuned one-step eta against T over T >= %d (to %s); "
      .. "SUPPORTED if the 95%% t-interval over draws lies within -1 +- %g, NOT SUPPORTED if it lies outside, else "
      .. "INCONCLUSIVE; fewer than %d draws or 3 such T: precondition absent"):format(M.C2_T_MIN,
      A and tostring(A.T[#A.T]) or "the file's longest T", M.C2_BAND, M.MIN_DRAWS)}
end

-- C6: the construction as transformer weights against one-step MD with the
-- same step. x = {diff = per sequence x T KL(construction) - KL(MD), md = MD's
-- mean KL on the same sequences, max_dp, n_seq, nT}
function M.C6(x)
  local m, lo, hi = V.mean_ci(x.diff)
  local tol = 0.01 * x.md
  return V.judge{
    id = "C6", claim = "the 3-layer construction (as weights) implements one MD step", paper = "exact construction",
    source = M.SOURCE,
    statistic = "KL(truth, construction forward) - KL(truth, one-step MD, same eta)",
    trained = false, unit = ("%d sequences x %d T (t-interval)"):format(x.n_seq, x.nT),
    name = "KL difference", est = m, lo = lo, hi = hi, inside = {-tol, tol}, fmt = "%.2e",
    describe = ("MD mean KL %.4f on the same sequences; max abs. probability difference %.1e"):format(x.md,
      x.max_dp or 0),
    rule = "95% t-interval over sequences x T of KL(truth, construction forward) - KL(truth, one-step MD, same "
      .. "eta); SUPPORTED if within +-1% of MD's mean KL, NOT SUPPORTED if outside, else INCONCLUSIVE"}
end

-- ---------------------------------------------------------------- trained-model rows

-- The learned-task test: a seed learned when its KL to the truth (mean over
-- the T grid) is at most halfway from the uniform-lambda predictor's KL to
-- one-step MD's. E = {uniform_kl, md_kl}
function M.learn_threshold(E) return E.uniform_kl - 0.5 * (E.uniform_kl - E.md_kl) end

-- The models trained on all tokens by (architecture, depth), in order of first
-- appearance: {name, arch, depth, seeds = {ids}, models = {per seed}}; each
-- model gets .learned.
local function groups_of(E)
  local thr = M.learn_threshold(E)
  local by, order = {}, {}
  for _, r in ipairs(E.models) do
    if r.loss == "all" then
      local key = ("%s-L%d"):format(r.arch, r.depth)
      local g = by[key]
      if not g then
        g = {name = key, arch = r.arch, depth = r.depth, seeds = {}, models = {}}
        by[key] = g; order[#order + 1] = g
      end
      r.learned = r.kl_avg <= thr
      g.seeds[#g.seeds + 1] = r.seed
      g.models[#g.models + 1] = r
    end
  end
  for _, g in ipairs(order) do
    g.n_learned = 0
    for _, r in ipairs(g.models) do if r.learned then g.n_learned = g.n_learned + 1 end end
    g.learned = g.n_learned == #g.models and #g.models > 0
  end
  return order
end
M.groups = groups_of

-- the seeds every group has (in the first group's order) and each group's
-- values f(model) on them
local function common_seeds(gs)
  if #gs == 0 then return {} end
  local seeds = {}
  for _, s in ipairs(gs[1].seeds) do
    local all = true
    for k = 2, #gs do
      local has = false
      for _, t in ipairs(gs[k].seeds) do if t == s then has = true end end
      all = all and has
    end
    if all then seeds[#seeds + 1] = s end
  end
  return seeds
end

local function values_on(g, seeds, f)
  local v = {}
  for i, s in ipairs(seeds) do
    for k, t in ipairs(g.seeds) do if t == s then v[i] = f(g.models[k]) end end
  end
  return v
end

local function range_text(xs, fmt)
  local lo, hi = math.huge, -math.huge
  for _, x in ipairs(xs) do lo = math.min(lo, x); hi = math.max(hi, x) end
  if lo == math.huge then return "-" end
  return (fmt .. "-" .. fmt):format(lo, hi)
end

-- the learned-task test over the groups gs: {ok, text}
local function learned_test(E, gs)
  local parts, kls, ok = {}, {}, false
  for _, g in ipairs(gs) do
    parts[#parts + 1] = ("%s %d/%d"):format(g.name, g.n_learned, #g.models)
    for _, r in ipairs(g.models) do kls[#kls + 1] = r.kl_avg end
    ok = ok or g.learned
  end
  return {ok = ok, text = ("seeds learned (KL to the truth over the T grid <= %.4f, halfway from the uniform-lambda "
    .. "predictor's %.4f to one-step MD's %.4f): %s; the models' KL %s"):format(M.learn_threshold(E), E.uniform_kl,
    E.md_kl,
    #parts > 0 and table.concat(parts, ", ") or "no group", range_text(kls, "%.4f"))}
end

-- The groups a claim on the mechanism judges: depth >= M.MIN_DEPTH and every
-- seed learned (when none learned: all deep groups, shown but not judged).
-- Returns the judged groups, the deep groups, the others' names and the learned test.
local function deep_groups(E)
  local all = groups_of(E)
  local deep, shallow, judged = {}, {}, {}
  for _, g in ipairs(all) do
    if g.depth >= M.MIN_DEPTH then deep[#deep + 1] = g else shallow[#shallow + 1] = g end
  end
  for _, g in ipairs(deep) do if g.learned then judged[#judged + 1] = g end end
  local learned = learned_test(E, #deep > 0 and deep or all)
  local pre = {ok = #deep > 0, text = ("no group of depth >= %d (the construction's depth)"):format(M.MIN_DEPTH)}
  if #judged == 0 then judged = #deep > 0 and deep or all end   -- shown, not judged (the learned test or pre fails)
  if #deep == 0 then deep, shallow = all, {} end
  return judged, deep, shallow, learned, pre
end

local function not_judged_text(deep, judged)
  local out = {}
  for _, g in ipairs(deep) do
    local inn = false
    for _, h in ipairs(judged) do if h == g then inn = true end end
    if not inn then out[#out + 1] = g.name end
  end
  return #out > 0 and (" not learned, not judged: " .. table.concat(out, ", ") .. ";") or ""
end

local function seed_mean_text(gs, f, fmt)
  local out = {}
  for _, g in ipairs(gs) do
    local v = {}
    for k, r in ipairs(g.models) do v[k] = f(r) end
    out[#out + 1] = ("%s " .. fmt):format(g.name, (V.mean_ci(v)))
  end
  return #out > 0 and table.concat(out, ", ") or "none"
end

local function attn_ratio(r) return r.attn_kl / r.uniform_attn_kl end

-- C3: first-layer attention ~ gamma. E = {models = {{arch, depth, loss, seed,
-- kl_avg, attn_kl (best L0 head), uniform_attn_kl}}, uniform_kl, md_kl, scale}
-- What C3 and C4 share: one test per learned group of depth >= MIN_DEPTH on
-- the per-seed value f (the threshold fields of thr: below / inside), "no
-- group" when none is left, and the seed means of every group as the
-- description (fmt their format).
local function group_row(E, f, thr, fmt)
  local judged, deep, shallow, learned, pre = deep_groups(E)
  local seeds = common_seeds(judged)
  local function test(name, values)
    local t = {name = name, values = values}
    for k, v in pairs(thr) do t[k] = v end
    return t
  end
  local tests = {}
  for _, g in ipairs(judged) do tests[#tests + 1] = test(g.name, values_on(g, seeds, f)) end
  if #tests == 0 then tests = {test("no group", {})} end
  return {seeds = seeds, tests = tests, learned = learned, pre = {pre},
          describe = ("seed means: %s;%s shallower (not judged): %s"):format(seed_mean_text(deep, f, fmt),
            not_judged_text(deep, judged), seed_mean_text(shallow, f, fmt))}
end

function M.C3(E)
  local G = group_row(E, attn_ratio, {below = M.C3_BELOW}, "%.3f")
  return V.judge{
    id = "C3", claim = "first-layer attention approximates the responsibilities", paper = "KL 0.0376 at T=192",
    source = M.SOURCE, seeds = G.seeds, tests = G.tests, learned = G.learned, pre = G.pre, scale = E.scale,
    statistic = "per seed: KL(gamma, best layer-0 head) / KL(gamma, uniform attention on the lags)",
    describe = G.describe,
    rule = ("one test per (architecture, depth >= %d) group whose seeds all learned: the 95%% t-interval over seeds "
      .. "of KL(gamma, best layer-0 head) / KL(gamma, uniform on the lags); SUPPORTED if every group's lies below "
      .. "%g, NOT SUPPORTED if any lies above, else INCONCLUSIVE"):format(M.MIN_DEPTH, M.C3_BELOW)}
end

-- C4: models match one-step MD. E as C3, and md_kl (one-step MD's KL averaged over T)
function M.C4(E)
  local function rel(r) return r.kl_avg / E.md_kl - 1 end
  local G = group_row(E, rel, {inside = {-M.C4_BAND, M.C4_BAND}}, "%+.3f")
  return V.judge{
    id = "C4", claim = "trained models match one-step MD (KL to the truth)", paper = "model ~ one-step MD",
    source = M.SOURCE, seeds = G.seeds, tests = G.tests, learned = G.learned, pre = G.pre, scale = E.scale,
    statistic = ("per seed: (model KL - MD KL) / MD KL, KL to the truth averaged over the T grid (MD %.4f)")
      :format(E.md_kl),
    describe = G.describe,
    rule = ("one test per (architecture, depth >= %d) group whose seeds all learned: the 95%% t-interval over seeds "
      .. "of (model KL - one-step MD KL) / MD KL; SUPPORTED if every group's lies within +-%g, NOT SUPPORTED if any "
      .. "lies outside, else INCONCLUSIVE"):format(M.MIN_DEPTH, M.C4_BAND)}
end

-- C5: deeper models ~ more MD steps, on the first architecture. E as C3 with
-- per model dist = {md1, md2, md3, bayes: mean KL(estimator, model)}, arch
-- (the architecture judged) and spread (the largest mean KL between two of
-- md1, md2, md3, bayes)
function M.C5(E)
  local gs = {}
  for _, g in ipairs(groups_of(E)) do if g.arch == E.arch then gs[#gs + 1] = g end end
  table.sort(gs, function(a, b) return a.depth < b.depth end)
  local learned = learned_test(E, gs)
  local all_learned = #gs > 0
  for _, g in ipairs(gs) do all_learned = all_learned and g.learned end
  learned.ok = all_learned
  if #gs == 0 then learned.text = "no group of " .. tostring(E.arch) end
  local lo, hi = gs[1], gs[#gs]
  local pair = lo and hi and lo ~= hi and {lo, hi} or {}
  local seeds = common_seeds(pair)
  local function g_of(r) return r.dist.md1 - r.dist.bayes end
  local vals = {}
  if #pair == 2 then
    local a, b = values_on(lo, seeds, g_of), values_on(hi, seeds, g_of)
    for i = 1, #seeds do vals[i] = b[i] - a[i] end
  end
  -- the premise: every depth's models as near their closest estimator as the
  -- estimators are to each other (else which one they track cannot be read)
  local dmax, near = 0, {}
  for _, g in ipairs(gs) do
    local d = {}
    for k, r in ipairs(g.models) do
      d[k] = math.min(r.dist.md1, r.dist.md2, r.dist.md3, r.dist.bayes)
    end
    local dm = V.mean_ci(d)
    dmax = math.max(dmax, dm)
    near[#near + 1] = ("L%d %.4f"):format(g.depth, dm)
  end
  local pre = {
    {ok = #pair == 2, text = ("%d depth(s) of %s: the claim needs two"):format(#gs, tostring(E.arch))},
    {ok = #gs > 0 and dmax <= E.spread,
     text = ("the models' distance to their closest estimator (%s) exceeds the largest distance between two "
       .. "estimators (%.4f)"):format(table.concat(near, ", "), E.spread)},
  }
  return V.judge{
    id = "C5", claim = "deeper models track multi-step MD", paper = "more layers ~ more steps", source = M.SOURCE,
    seeds = seeds, name = #pair == 2 and ("L%d - L%d"):format(hi.depth, lo.depth) or "deepest - shallowest",
    values = vals, above = 0,
    fmt = "%.4f", learned = learned, pre = pre, scale = E.scale,
    statistic = ("per seed, %s: [KL(MD1, model) - KL(Bayes, model)] at the deepest depth minus at the shallowest")
      :format(tostring(E.arch)),
    describe = ("closest-estimator distance by depth %s vs spread between estimators %.4f; KL(MD1, model) - "
      .. "KL(Bayes, model) seed means %s"):format(table.concat(near, ", "), E.spread,
      seed_mean_text(gs, g_of, "%+.4f")),
    rule = "on the first architecture: per seed, how much nearer Bayes than one-step MD the deepest model's "
      .. "predictions are, minus the same for the shallowest (distances: mean KL(estimator, model)); SUPPORTED if "
      .. "the 95% t-interval over seeds lies above 0, NOT SUPPORTED if below, else INCONCLUSIVE; precondition: every "
      .. "depth's models lie as near their closest estimator (MD 1-3 steps, Bayes) as two estimators lie apart"}
end

-- C7: zeroing the gamma head hurts. E as C3, each model also ablate_best,
-- ablate_control (KL after zeroing the best / worst-matching L0 head).
-- Judged on the groups whose best layer-0 head passes C3's test.
function M.C7(E)
  local judged, deep, _, learned, pre_deep = deep_groups(E)
  local seeds = common_seeds(judged)
  local gamma_like = {}
  for _, g in ipairs(judged) do
    local _, _, hi = V.mean_ci(values_on(g, seeds, attn_ratio))
    if hi < M.C3_BELOW then gamma_like[#gamma_like + 1] = g end
  end
  local function hurt(r) return (r.ablate_best - r.kl_avg) / r.kl_avg end
  local function ctl(r) return (r.ablate_control - r.kl_avg) / r.kl_avg end
  local show = #gamma_like > 0 and gamma_like or judged
  local tests = {}
  for _, g in ipairs(show) do
    tests[#tests + 1] = {name = g.name, values = values_on(g, seeds, hurt), above = M.C7_ABOVE,
                         control = {name = "control head zeroed", values = values_on(g, seeds, ctl)}}
  end
  if #tests == 0 then tests = {{name = "no group", values = {}, above = M.C7_ABOVE}} end
  return V.judge{
    id = "C7", claim = "zeroing the responsibility head hurts prediction", paper = "mechanism is causal",
    source = M.SOURCE, seeds = seeds, tests = tests, learned = learned, scale = E.scale,
    pre = {pre_deep, {ok = #gamma_like > 0,
      text = ("no judged group's best layer-0 head is gamma-like (C3's interval below %g)")
      :format(M.C3_BELOW)}},
    statistic = "per seed: (KL after zeroing the best-matching L0 head - intact KL) / intact KL, against the same "
      .. "for the worst-matching L0 head (control)",
    describe = ("seed means of the relative damage: %s; control head: %s"):format(seed_mean_text(deep, hurt, "%+.3f"),
      seed_mean_text(deep, ctl, "%+.3f")),
    rule = ("on the groups C3 judges whose best layer-0 head is gamma-like (C3's interval below %g): per seed (KL "
      .. "after zeroing that head - KL after zeroing the worst-matching L0 head) / intact KL; SUPPORTED if every "
      .. "group's 95%% t-interval over seeds lies above %g, NOT SUPPORTED if any lies below, else INCONCLUSIVE; no "
      .. "gamma-like head: precondition absent"):format(M.C3_BELOW, M.C7_ABOVE)}
end

-- ---------------------------------------------------------------- the table

-- The scale text of the trained-model rows. E.train = {steps, batch, Tmax,
-- params_lo, params_hi}
function M.scale_text(tr)
  local tokens = tr.steps * tr.batch * tr.Tmax
  return ("our models: %.0fk-%.0fk parameters x %.2fM training tokens (%d steps x %d sequences x %d); the paper's "
    .. "model size and tokens are not recorded in this repository"):format(tr.params_lo / 1000, tr.params_hi / 1000,
    tokens / 1e6, tr.steps, tr.batch, tr.Tmax)
end

-- Every row, from the run file's evidence (mirror_report.read_evidence):
-- C1, C2, C6 always; C3, C4, C5, C7 when the run trained models.
function M.rows(E)
  E.scale = E.scale or (E.train and M.scale_text(E.train))
  local rows = {M.C1(E.c1), M.C2(E.c2)}
  local any = false
  for _, r in ipairs(E.models) do if r.loss == "all" then any = true end end
  if any then
    rows[#rows + 1] = M.C3(E)
    rows[#rows + 1] = M.C4(E)
    rows[#rows + 1] = M.C5(E)
  end
  rows[#rows + 1] = M.C6(E.c6)
  if any then rows[#rows + 1] = M.C7(E) end
  return rows
end

return M
