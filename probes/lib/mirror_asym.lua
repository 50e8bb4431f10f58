-- mirror_asym.lua — the estimator claims C1 and C2 of the mirror_descent probe
-- on independent data draws: each draw has its own pi* (rows ~ Dirichlet) and
-- its own sequences, so the spread of a statistic over draws is a sampling
-- interval (the probe's other estimator numbers come from one draw and
-- bootstrap its sequences, which says nothing about another pi*).
--   C2 (stable steps scale as 1/T, an asymptotic claim): per draw, the one-step
--      eta tuned against the truth at T up to 8192 (the models stay on their
--      trained range; the estimators cost seconds there), and the log-log slope
--      over the asymptotic range T >= T_fit.
--   C1 (one MD step from uniform = the Bayes mean to first order): per draw,
--      the one-step eta closest to the Bayes predictor (Gibbs) at T = m + 1.
--
--   local A = require "mirror_asym"
--   local X = A.run(o, log)          -- o.asym = {T =, draws =, sequences =}; o.q, o.m, o.concentration, o.seed
--   A.write_h5(f, X); local X = A.read(f)   -- /asymptotic/... (nil when the file predates it)
--   A.report(out, X, m); A.figure(o, X)      -- the report's lines; eta* T against T, one line per draw
local M = {}

M.T_FIT = require("mirror_rules").C2_T_MIN   -- C2 judges the slope over T >= this

-- the eta grid of the asymptotic tuning: 20 per decade, 1e-5 .. 1 (the tuner
-- refines the best point by a parabola in log eta)
local function eta_grid()
  local g = {}
  for i = 0, 100 do g[#g + 1] = 10 ^ (-5 + 0.05 * i) end
  return g
end
M.eta_grid = eta_grid

-- the seed of draw d's task (pi*) and of its sequences: apart from the run's
-- own draw (seed) and from each other
function M.draw_seed(seed, d) return seed * 1000 + 500 + d end


-- The draws: X = {T = {...}, draws = {seed per draw}, eta = {[d] = {per T}},
-- c1 = {per draw}, T1 = m + 1, sequences}
function M.run(o, log)
  local a = o.asym
  local prefix, truth_at = require("mirror_report").prefix, require("mirror_report").truth_at
  local grid, fine = eta_grid(), o.eta_grid
  local Tmax = a.T[#a.T]
  local X = {T = a.T, draws = {}, eta = {}, c1 = {}, T1 = o.m + 1, sequences = a.sequences, t0 = os.time()}
  for d = 1, a.draws do
    local s = M.draw_seed(o.seed, d)
    local task = mp.tasks.mtd{q = o.q, m = o.m, concentration = o.concentration, seed = s}
    task:seed(s)
    local tok, _, tr = task:sample(a.sequences, Tmax)
    X.draws[d], X.eta[d] = s, {}
    for i, T in ipairs(a.T) do
      local r = mp.mtd.tune(task, prefix(tok, T), truth_at(tr.next, T), {method = "md", steps = 1, grid = grid})
      X.eta[d][i] = r.best
    end
    -- C1: the one-step eta closest to Bayes at T = m + 1 (the run's own eta grid)
    local te = prefix(tok, X.T1)
    local mean = mp.mtd.bayes(task, te, {chains = o.gibbs.chains, burn = o.gibbs.burn, samples = o.gibbs.samples,
                                         seed = s})
    X.c1[d] = mp.mtd.tune(task, te, mp.mtd.predict(task, te, mean), {method = "md", steps = 1, grid = fine}).best
    task:close()
    if log then
      log("asymptotic draw %d/%d (seed %d): eta* T at T = %d: %.3f; eta closest to Bayes at T = %d: %.4f (%ds)", d,
          a.draws, s, Tmax, X.eta[d][#a.T] * Tmax, X.T1, X.c1[d], os.time() - X.t0)
    end
  end
  return X
end

function M.write_h5(f, X)
  f:write("asymptotic/T", X.T)
  f:write("asymptotic/best_eta", mp.tensor(X.eta))        -- [draws, T]: one-step eta tuned against the truth
  f:write("asymptotic/draw_seed", X.draws)
  f:write("asymptotic/c1_eta", X.c1)             -- [draws]: one-step eta closest to Bayes at T = m + 1
  f:set_attr("asymptotic/best_eta", "sequences", X.sequences)
  f:set_attr("asymptotic/best_eta", "fit_T_min", M.T_FIT)
  f:set_attr("asymptotic/best_eta", "eta_grid", "1e-5..1, 20 per decade, parabola-refined")
  f:set_attr("asymptotic/c1_eta", "T", X.T1)
end

-- The draws from a run file, or nil when it predates them.
function M.read(f)
  if not f:has("asymptotic/best_eta") then return nil end
  local function rows(x) return type(x[1]) == "table" and x or {x} end
  local T = {}
  for i, x in ipairs(f:read("asymptotic/T"):totable()) do T[i] = math.floor(x + 0.5) end
  local eta = rows(f:read("asymptotic/best_eta"):totable())
  local draws = {}
  for i, x in ipairs(f:read("asymptotic/draw_seed"):totable()) do draws[i] = math.floor(x + 0.5) end
  return {T = T, eta = eta, draws = draws, c1 = f:read("asymptotic/c1_eta"):totable(),
          T1 = math.floor(f:attrs("asymptotic/c1_eta").T + 0.5),
          sequences = math.floor(f:attrs("asymptotic/best_eta").sequences + 0.5)}
end

function M.report(out, X, m)
  out("-- 1b. Independent draws (pi* and sequences each; %d draws x %d sequences): the tuned one-step eta at long T",
      #X.draws, X.sequences)
  out("   eta* T at each T (one-step eta tuned against the truth); slope: log-log over T >= %d; eta~Bayes: the one-step",
      M.T_FIT)
  out("   eta closest to the Bayes predictor at T = %d", X.T1)
  local hdr = ("%6s"):format("seed")
  for _, T in ipairs(X.T) do hdr = hdr .. (" %6d"):format(T) end
  out("%s %7s %9s", hdr, "slope", "eta~Bayes")
  local sl = require("mirror_rules").draw_slopes(X, M.T_FIT)
  for d, s in ipairs(X.draws) do
    local row = ("%6d"):format(s)
    for i, T in ipairs(X.T) do row = row .. (" %6.3f"):format(X.eta[d][i] * T) end
    out("%s %7.3f %9.4f", row, sl[d] or 0 / 0, X.c1[d])
  end
  out("(C1 and C2 are judged on these draws: m = %d, 1/(m+1) = %.4f)", m, 1 / (m + 1))
end

function M.figure(o, X)
  local fig = mp.plot.figure{width = 520, height = 360}
  local ax = fig:axes(1, 1)
  for d, s in ipairs(X.draws) do
    local y = {}
    for i, T in ipairs(X.T) do y[i] = X.eta[d][i] * T end
    ax:line(X.T, y, {label = ("draw %d (seed %d)"):format(d, s), marker = true})
  end
  ax:set{title = ("Tuned one-step eta x T on independent pi* draws (slope judged on T >= %d)"):format(M.T_FIT),
         xlabel = "T", ylabel = "eta* T", xlog = true}
  ax:legend()
  local path = ("%s/best_eta_draws.%s"):format(o.out, o.format)
  fig:save(path)
  return path
end

return M
