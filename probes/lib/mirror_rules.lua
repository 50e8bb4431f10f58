-- mirror_rules.lua — the verdict rules of the mirror_descent probe as pure
-- functions of summary numbers, so each rule can be unit-tested on planted
-- inputs (tests/lua/test_mirror_rules.lua). Every rule returns one row:
--   {id, claim, paper, ours, word, n, seeds, lo, hi, rule}
-- word is SUPPORTED, NOT SUPPORTED or INCONCLUSIVE; n what the interval is
-- over; seeds the number of trained-model seeds behind it (1 for estimators on
-- one data draw); [lo, hi] a 95% interval of the quantity the rule reads; rule
-- the rule in words, printed under the row and written to verdicts.tsv.
local M = {}

local S, N, I = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
M.MIN_SEEDS = 3

-- two-sided 97.5% quantile of Student's t with df degrees of freedom
local T975 = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
              2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
              2.045, 2.042}
function M.t975(df)
  if df < 1 then return math.huge end
  return T975[df] or (1.96 + 2.4 / df)   -- within 0.002 of the exact value for df > 30
end

-- mean and 95% t-interval of a list (n = 1: an infinite interval)
function M.mean_ci(xs)
  local n, s = #xs, 0
  for _, x in ipairs(xs) do s = s + x end
  local mean = s / n
  if n < 2 then return mean, -math.huge, math.huge end
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - mean) ^ 2 end
  local h = M.t975(n - 1) * math.sqrt(v / (n - 1) / n)
  return mean, mean - h, mean + h
end

local function row(id, claim, paper, ours, word, n, seeds, lo, hi, rule)
  return {id = id, claim = claim, paper = paper, ours = ours, word = word, n = n, seeds = seeds, lo = lo, hi = hi,
          rule = rule}
end

-- the interval [lo, hi] against a band [a, b]: inside, outside or straddling
local function band(lo, hi, a, b)
  if lo >= a and hi <= b then return S end
  if hi < a or lo > b then return N end
  return I
end

-- C1: the one-step eta closest to Bayes with no evidence (T = m + 1) against
-- 1/(m+1). x = {eta, lo, hi (bootstrap over sequences), eta0, n}
function M.C1(x)
  return row("C1", "one MD step from uniform = Bayes mean to first order",
    ("eta = 1/(m+1) = %.3f at no evidence"):format(x.eta0),
    ("eta closest to Bayes at N=1: %.3f [%.3f, %.3f]"):format(x.eta, x.lo, x.hi),
    band(x.lo, x.hi, 0.75 * x.eta0, 1.25 * x.eta0), x.n, 1, x.lo, x.hi,
    "SUPPORTED if the 95% bootstrap interval of the eta closest to Bayes (T = m+1) lies within 1/(m+1) +- 25%, "
      .. "NOT SUPPORTED if it lies outside, else INCONCLUSIVE")
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

-- C2: stable steps ~ 1/T. x = {slope, se, n (points, T >= 8m), rms_power (RMS log
-- residual of the power fit), T = {...}, eta = {...} (the same points), Tmax}
function M.C2(x)
  local h = M.t975(x.n - 2) * x.se
  local lo, hi = x.slope - h, x.slope + h
  local a, b, rms = M.fit_offset(x.T, x.eta)
  -- eta T = a T / (T + b) has reached >= 80% of its plateau a at the largest T
  local levels = rms <= x.rms_power and b <= x.Tmax / 4
  local word
  if x.n < 3 then word = I
  elseif levels or (lo <= -1 and hi >= -1 and h <= 0.15) then word = S
  elseif lo <= -1 and hi >= -1 then word = I          -- contains -1, but too wide to say
  else word = N end
  return row("C2", "stable (best) step sizes scale as 1/T (large T)", "slope -1",
    ("slope %.3f [%.3f, %.3f], %d T; a/(T+b): b = %.3g, eta T at T=%d: %.0f%% of a; RMS log residual %.3f "
      .. "(power %.3f)"):format(x.slope, lo, hi, x.n, b, x.Tmax, 100 * x.Tmax / (x.Tmax + b), rms, x.rms_power),
    word, x.n, 1, lo, hi,
    "SUPPORTED if the 95% interval of the log-log slope (T >= 8m) contains -1 and is at most +-0.15 wide, or "
      .. "eta = a/(T+b) fits as well as the power law with b <= Tmax/4 (eta*T has levelled off); INCONCLUSIVE if "
      .. "the interval contains -1 but is wider, or with fewer than 3 points; NOT SUPPORTED otherwise")
end

-- per-group seed check: INCONCLUSIVE reasons for groups with too few seeds
local function seeds_of(groups)
  local smin = math.huge
  for _, g in ipairs(groups) do smin = math.min(smin, #g.seeds) end
  return smin == math.huge and 0 or smin
end

-- per seed of a group: KL(gamma || best layer-0 head) / KL(gamma || uniform on the
-- lags); its mean and 95% interval (below 1: closer to gamma than uniform is)
local function attn_ratio(g)
  local d = {}
  for i, s in ipairs(g.seeds) do d[i] = s.attn_kl / s.uniform_kl end
  return M.mean_ci(d)
end

-- C3: first-layer attention ~ gamma. groups = {{name, depth, seeds = {{attn_kl,
-- uniform_kl, ...}, ...}}, ...}
function M.C3(groups)
  local smin, n_closer, n_not, best, best_name, best_lo, best_hi = seeds_of(groups), 0, 0, math.huge, "", 0, 0
  for _, g in ipairs(groups) do
    local r, lo, hi = attn_ratio(g)
    if hi < 1 then n_closer = n_closer + 1 end
    if lo > 0.9 then n_not = n_not + 1 end
    if r < best then best, best_name, best_lo, best_hi = r, g.name, lo, hi end
  end
  local word
  if #groups == 0 or smin < M.MIN_SEEDS then word = I
  elseif n_closer * 2 > #groups then word = S
  elseif n_not * 2 > #groups then word = N
  else word = I end
  return row("C3", "first-layer attention approximates the responsibilities", "KL 0.0376 at T=192",
    ("%d/%d groups closer to gamma than uniform; best %s: KL / uniform KL %.3f [%.3f, %.3f]"):format(n_closer,
      #groups, best_name, best, best_lo, best_hi),
    word, #groups, smin, best_lo, best_hi,
    "per (arch, depth): 95% t-interval over seeds of KL(gamma || best layer-0 head) / KL(gamma || uniform on the "
      .. "lags); SUPPORTED if it lies below 1 for most groups, NOT SUPPORTED if it lies above 0.9 for most (no "
      .. "head even 10% closer than uniform), else (or < 3 seeds) INCONCLUSIVE")
end

-- C4: models match one-step MD. groups = {{name, depth, seeds = {{kl_avg}, ...}}},
-- md = one-step MD's KL to the truth averaged over T. A group matches when the
-- interval of (model - MD) / MD lies within +-50%.
function M.C4(groups, md, min_depth)
  min_depth = min_depth or 3
  local smin, judged, n_match, n_miss, parts = seeds_of(groups), 0, 0, 0, {}
  local wlo, whi = math.huge, -math.huge
  for _, g in ipairs(groups) do
    local r = {}
    for i, s in ipairs(g.seeds) do r[i] = s.kl_avg / md - 1 end
    local m, lo, hi = M.mean_ci(r)
    local v = band(lo, hi, -0.5, 0.5)
    parts[#parts + 1] = ("%s %+.0f%%"):format(g.name, 100 * m)
    if g.depth >= min_depth then
      judged = judged + 1
      if v == S then n_match = n_match + 1 elseif v == N then n_miss = n_miss + 1 end
      wlo, whi = math.min(wlo, lo), math.max(whi, hi)
    end
  end
  local word
  if judged == 0 or smin < M.MIN_SEEDS then word = I
  elseif n_match == judged then word = S
  elseif n_miss > 0 then word = N
  else word = I end
  return row("C4", "trained models match one-step MD (KL to the truth)", "model ~ one-step MD",
    ("%d/%d groups (depth >= %d) within +-50%% of MD %.4f: %s"):format(n_match, judged, min_depth, md,
      table.concat(parts, ", ")),
    word, judged, smin, judged > 0 and wlo or 0, judged > 0 and whi or 0,
    ("every (arch, depth >= %d) group: 95%% t-interval over seeds of (model KL - MD KL) / MD KL, KL to the truth "
      .. "averaged over T; SUPPORTED if every interval lies within +-50%%, NOT SUPPORTED if any lies outside, else "
      .. "(or < 3 seeds) INCONCLUSIVE"):format(min_depth))
end

-- C5: deeper models ~ more MD steps. groups (one architecture, by depth) =
-- {{name, depth, seeds = {{kl_avg, dist}}}} with dist = min over estimators of
-- mean KL(estimator || model); est = {{key, steps, kl_avg}} (md1, md2, md3,
-- bayes) and spread = the largest mean KL between two of them.
function M.C5(groups, est, spread)
  local smin = seeds_of(groups)
  table.sort(groups, function(a, b) return a.depth < b.depth end)
  local dmax, parts, steps, ambiguous = 0, {}, {}, false
  local lo1, hi1 = 0, 0
  for gi, g in ipairs(groups) do
    local d, k = {}, {}
    for i, s in ipairs(g.seeds) do d[i] = s.dist; k[i] = s.kl_avg end
    local dm = M.mean_ci(d)
    dmax = math.max(dmax, dm)
    local km, lo, hi = M.mean_ci(k)
    if gi == #groups then lo1, hi1 = lo, hi end
    -- the estimators whose KL lies in the group's interval
    local inside, near, nd = {}, nil, math.huge
    for _, e in ipairs(est) do
      if e.kl_avg >= lo and e.kl_avg <= hi then inside[#inside + 1] = e end
      if math.abs(e.kl_avg - km) < nd then near, nd = e, math.abs(e.kl_avg - km) end
    end
    if #inside > 1 then ambiguous = true end
    steps[gi] = (#inside == 1 and inside[1] or near).steps
    parts[#parts + 1] = ("L%d:%s"):format(g.depth, #inside == 1 and inside[1].key or
      (#inside > 1 and "several" or (near.key .. "?")))
  end
  local word
  if #groups < 3 or smin < M.MIN_SEEDS then word = I
  elseif dmax > spread then word = I
  elseif ambiguous then word = I
  else
    local mono = true
    for i = 2, #steps do if steps[i] < steps[i - 1] then mono = false end end
    word = (mono and steps[#steps] > steps[1]) and S or N
  end
  return row("C5", "deeper models track multi-step MD", "more layers ~ more steps",
    ("%s; model-estimator distance %.4f vs spread between estimators %.4f"):format(table.concat(parts, " "), dmax,
      spread),
    word, #groups, smin, lo1, hi1,
    "INCONCLUSIVE if the models' distance to their closest estimator (mean KL(estimator || model)) exceeds the "
      .. "largest distance between two estimators, or a depth's 95% t-interval (over seeds) of KL to the truth "
      .. "contains several estimators' KL, or < 3 depths / seeds; else SUPPORTED if the matched number of MD steps "
      .. "grows with depth (non-decreasing, deepest > shallowest), NOT SUPPORTED otherwise")
end

-- C6: the construction as transformer weights against one-step MD with the
-- same step. x = {diff = per-sequence KL(construction) - KL(MD), pooled over
-- T, md = MD's mean KL, n}
function M.C6(x)
  local m, lo, hi = M.mean_ci(x.diff)
  local tol = 0.01 * x.md
  return row("C6", "the 3-layer construction (as weights) implements one MD step", "exact construction",
    ("runtime forward vs MD: KL diff %.2e [%.2e, %.2e] (MD KL %.4f), max |p diff| %.1e"):format(m, lo, hi, x.md,
      x.max_dp or 0),
    band(lo, hi, -tol, tol), x.n, 1, lo, hi,
    "95% t-interval over sequences x T of KL(truth || construction forward) - KL(truth || one-step MD, same eta); "
      .. "SUPPORTED if within +-1% of MD's mean KL, NOT SUPPORTED if outside, else INCONCLUSIVE")
end

-- C7: zeroing the gamma head hurts. groups as C3, each seed also {kl_avg,
-- ablate_best, ablate_control}. Judged only on groups whose best head is
-- measurably closer to gamma than uniform attention.
function M.C7(groups)
  local smin, judged, n_hurt, n_not = seeds_of(groups), 0, 0, 0
  local wlo, whi = math.huge, -math.huge
  for _, g in ipairs(groups) do
    local _, _, hi = attn_ratio(g)
    if hi < 1 then
      judged = judged + 1
      local d = {}
      for i, s in ipairs(g.seeds) do d[i] = (s.ablate_best - s.ablate_control) / s.kl_avg end
      local _, lo, h = M.mean_ci(d)
      wlo, whi = math.min(wlo, lo), math.max(whi, h)
      if lo > 0.1 then n_hurt = n_hurt + 1 elseif h <= 0.1 then n_not = n_not + 1 end
    end
  end
  local word
  if judged == 0 or smin < M.MIN_SEEDS then word = I
  elseif n_hurt * 2 > judged then word = S
  elseif n_not * 2 > judged then word = N
  else word = I end
  return row("C7", "zeroing the responsibility head hurts prediction", "mechanism is causal",
    judged == 0 and "no group has a layer-0 head closer to gamma than uniform attention"
      or ("%d/%d gamma-like groups: ablation hurts > 10%% more than the control head"):format(n_hurt, judged),
    word, judged, smin, judged > 0 and wlo or 0, judged > 0 and whi or 0,
    "judged on the groups whose best layer-0 head is closer to gamma than uniform (C3's interval below 1); "
      .. "per group the 95% t-interval over seeds of (KL after zeroing that head - KL after zeroing the control "
      .. "head) / intact KL; SUPPORTED if it lies above 10% for most, NOT SUPPORTED if at or below 10% for most, "
      .. "INCONCLUSIVE otherwise or when no group qualifies")
end

-- The report lines and the TSV of the rows.
function M.lines(rows)
  local out = {}
  for _, v in ipairs(rows) do
    local function clean(x) return (tostring(x):gsub("|", "/")) end
    out[#out + 1] = ("VERDICT %s | %-55s | %-30s | %s | %s"):format(v.id, clean(v.claim), clean(v.paper),
      clean(v.ours), v.word)
    out[#out + 1] = ("   n %d, seeds %d, 95%% interval [%.4g, %.4g]; rule: %s"):format(v.n, v.seeds, v.lo, v.hi,
      v.rule)
  end
  return out
end

function M.tsv(rows)
  local t = {"id\tclaim\tpaper\tours\tn\tseeds\tlo\thi\trule\tverdict\n"}
  for _, v in ipairs(rows) do
    local function c(x) return (tostring(x):gsub("[\t\n]", " ")) end
    t[#t + 1] = ("%s\t%s\t%s\t%s\t%d\t%d\t%.6g\t%.6g\t%s\t%s\n"):format(v.id, c(v.claim), c(v.paper), c(v.ours), v.n,
      v.seeds, v.lo, v.hi, c(v.rule), v.word)
  end
  return table.concat(t)
end

return M
