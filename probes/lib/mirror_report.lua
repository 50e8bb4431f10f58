-- mirror_report.lua — the mirror_descent probe's files: the HDF5 file (every
-- curve, estimate and per-model result) and the figures. C (the context) is
-- {estimators, EST, lag_weights} from probes/lib/mirror.lua.
local R = {}
local C   -- set by R.setup
function R.setup(ctx) C = ctx end

function R.write_h5(o, path, task, D, S, models, G, W)
  local f <close> = mp.h5.open(path, "w")
  f:write("pi", task:pi())
  f:write("T", o.T)
  f:write("eval/tokens", D.eval_tok)
  f:write("eval/lambda", D.eval_lambda)
  for _, k in ipairs{"q", "m", "concentration", "seed", "B_eval", "B_tune", "boot", "d_model", "n_head", "steps",
                     "batch", "lr", "warmup", "B_mech", "seeds", "pos", "init_std"} do
    f:set_attr("T", k, o[k])
  end
  f:set_attr("T", "preset", o.preset)
  f:write("estimators/eta_grid", o.eta_grid)
  f:write("estimators/beta_grid", o.beta_grid)
  for _, e in ipairs(C.estimators) do
    local g = "estimators/" .. e.key
    f:write(g .. "/kl", S.kl[e.key])
    f:write(g .. "/kl_mean", S.mean[e.key])
    f:write(g .. "/kl_lo", S.lo[e.key])
    f:write(g .. "/kl_hi", S.hi[e.key])
    f:write(g .. "/lambda", S.lambda[e.key])
    f:set_attr(g .. "/kl", "label", e.label)
  end
  f:write("estimators/oracle/kl", S.kl.oracle)
  f:write("estimators/bayes/rhat", S.rhat)
  for k, v in pairs(S.best_eta) do f:write("estimators/best_eta/" .. k, v) end
  for k, v in pairs(S.tune_kl) do f:write("estimators/tuning_kl/" .. k, v) end
  f:set_attr("estimators/best_eta/md1", "fit_slope", S.fit.slope)
  f:set_attr("estimators/best_eta/md1", "fit_slope_se", S.fit.slope_se)
  f:set_attr("estimators/best_eta/md1", "fit_intercept", S.fit.intercept)
  f:set_attr("estimators/best_eta/md1", "fit_r2", S.fit.r2)
  f:set_attr("estimators/best_eta/md1", "fit_T_min", 2 * o.m)
  if S.fit_large then
    f:set_attr("estimators/best_eta/md1", "fit_large_T_slope", S.fit_large.slope)
    f:set_attr("estimators/best_eta/md1", "fit_large_T_slope_se", S.fit_large.slope_se)
    f:set_attr("estimators/best_eta/md1", "fit_large_T_min", 8 * o.m)
  end
  f:set_attr("estimators/best_eta/bayes_match", "fit_slope", S.fit_bayes.slope)
  -- C1's evidence: the bootstrap resamples' re-tuned etas (sorted), at T = m + 1
  f:write("estimators/best_eta/bayes_match_boot", S.c1.boot)
  f:set_attr("estimators/best_eta/bayes_match_boot", "T", o.T[S.c1.i])
  f:set_attr("estimators/best_eta/bayes_match_boot", "sequences", S.c1.n)
  f:set_attr("estimators/construction_fixed/kl", "beta", S.beta)
  f:write("estimators/construction/rel_diff_vs_md1", S.rel_diff)
  f:write("estimators/construction/best_beta", S.best_beta)
  f:write("estimators/construction/implied_eta", S.implied_eta)
  f:write("estimators/construction_fixed/rel_diff_vs_md1", S.rel_diff_fixed)
  f:set_attr("estimators/bayes/rhat", "gibbs_vs_quadrature_max_diff", G.diff)
  f:write("estimators/construction_weights/kl_mean", W.kl)
  f:write("estimators/construction_weights/kl_diff_vs_md1", W.diff)
  for k, v in pairs{max_prob_diff_vs_md1 = W.max_dp, pattern_vs_gamma_max_diff = W.gamma_diff,
                    d_model = W.info.d_model, d_mlp = W.info.d_mlp, log_knots = W.info.knots} do
    f:set_attr("estimators/construction_weights/kl_mean", k, v)
  end
  for _, r in ipairs(models) do
    local g = "models/" .. r.name
    f:write(g .. "/kl", r.kl)
    f:write(g .. "/kl_mean", r.mean)
    f:write(g .. "/kl_lo", r.lo)
    f:write(g .. "/kl_hi", r.hi)
    f:write(g .. "/train_loss", r.loss)
    local d = {}
    for i, e in ipairs(C.estimators) do d[i] = r.dist[e.key] end
    f:write(g .. "/dist_to_estimators", d)
    f:write(g .. "/attn_kl", r.attn.kl)
    f:write(g .. "/attn_mass", r.attn.mass)
    f:write(g .. "/attn_kl_last_query", r.attn.kl_last)
    f:write(g .. "/ablation_kl", r.ablate_best_kl)
    f:write(g .. "/gamma", r.attn.gamma)
    f:write(g .. "/layer0_pattern", r.attn.pattern:narrow(1, 1))
    for k, v in pairs{arch = r.spec.arch, depth = r.spec.depth, loss = r.spec.loss, closest = r.closest,
                      best_head = r.attn.best - 1, uniform_attn_kl = r.attn.uniform_kl, kl_avg = r.kl_avg,
                      any_layer = r.any.layer, any_head = r.any.head - 1, any_attn_kl = r.any.kl,
                      ablate_any = r.ablate_any,
                      ablate_best = r.ablate_best, ablate_control = r.ablate_control or -1,
                      final_loss = r.final_loss, seconds = r.seconds, seed = r.spec.seed or 1,
                      n_params = r.n_params} do
      f:set_attr(g .. "/kl", k, v)
    end
  end
  local names = {}
  for i, e in ipairs(C.estimators) do names[i] = e.key end
  f:set_attr("T", "estimators", table.concat(names, ","))
  f:set_attr("T", "archs", table.concat(o.archs, ","))
end

function R.figures(o, S, models)
  local function save(fig, name)
    local path = ("%s/%s.%s"):format(o.out, name, o.format)
    fig:save(path)
    return path
  end
  local paths = {}
  local T = o.T
  do -- 1. estimators: KL vs T with bootstrap bands
    local fig = mp.plot.figure{width = 520, height = 360}
    local ax = fig:axes(1, 1)
    for _, e in ipairs(C.estimators) do
      ax:line(T, S.mean[e.key], {label = e.label, band_lo = S.lo[e.key], band_hi = S.hi[e.key], marker = true,
                                 dashed = e.key == "uniform" or e.fixed})
    end
    ax:set{title = ("Estimators: KL(truth || predictor), q=%d m=%d (95%% bootstrap bands)"):format(o.q, o.m),
           xlabel = "T (context length)", ylabel = "KL (nats)", xlog = true, ylog = true}
    ax:legend()
    paths[#paths + 1] = save(fig, "kl_vs_T")
  end
  do -- 2. best eta vs T, log-log, with the fitted slope
    local fig = mp.plot.figure{width = 520, height = 360}
    local ax = fig:axes(1, 1)
    for s = 1, 3 do ax:line(T, S.best_eta["md" .. s], {label = ("tuned eta, %d step%s"):format(s, s > 1 and "s" or ""), marker = true}) end
    ax:line(T, S.best_eta.bayes_match, {label = "eta closest to Bayes (1 step)", marker = true, dashed = true})
    local fx, fy, cx, cy = {}, {}, {}, {}
    for i, t in ipairs(S.fit_T) do fx[i] = t; fy[i] = math.exp(S.fit.intercept) * t ^ S.fit.slope end
    ax:line(fx, fy, {label = ("fit T>=%d: eta ~ T^%.2f"):format(2 * o.m, S.fit.slope), width = 2.5})
    if S.fit_large then
      local gx, gy = {}, {}
      for i, t in ipairs(S.fit_large_T) do gx[i] = t; gy[i] = math.exp(S.fit_large.intercept) * t ^ S.fit_large.slope end
      ax:line(gx, gy, {label = ("fit T>=%d: eta ~ T^%.2f"):format(8 * o.m, S.fit_large.slope), width = 2.5})
    end
    for i, t in ipairs(T) do cx[i] = t; cy[i] = S.beta / (o.m * math.max(t - o.m, 1)) end
    ax:line(T, S.implied_eta, {label = "construction: tuned beta / (m(T-m))", dashed = true, marker = true})
    ax:line(cx, cy, {label = ("one beta=%.3g: beta/(m(T-m))"):format(S.beta), dashed = true})
    ax:set{title = "Best mirror-descent step against T", xlabel = "T", ylabel = "eta", xlog = true, ylog = true}
    ax:legend()
    paths[#paths + 1] = save(fig, "best_eta")
  end
  if #models > 0 then -- 3. trained models vs estimators, one panel per (arch, loss)
    local panels, order = {}, {}
    for _, r in ipairs(models) do
      local key = r.spec.arch .. ", loss on " .. (r.spec.loss == "all" and "all tokens" or "the last token")
      if not panels[key] then panels[key] = {}; order[#order + 1] = key end
      table.insert(panels[key], r)
    end
    local cols = math.min(2, #order)
    local rows = (#order + cols - 1) // cols
    local fig = mp.plot.figure{rows = rows, cols = cols, width = 460 * cols, height = 340 * rows,
                               title = "Trained transformers against the estimators: KL(truth || prediction)"}
    for pi_, key in ipairs(order) do
      local ax = fig:axes((pi_ - 1) // cols + 1, (pi_ - 1) % cols + 1)
      for _, k in ipairs{"bayes", "md1", "uniform"} do
        ax:line(T, S.mean[k], {label = C.EST[k].label, dashed = true, band_lo = S.lo[k], band_hi = S.hi[k]})
      end
      for _, r in ipairs(panels[key]) do
        ax:line(T, r.mean, {label = ("depth %d, seed %d"):format(r.spec.depth, r.spec.seed or 1), marker = true,
                            band_lo = r.lo, band_hi = r.hi})
      end
      ax:set{title = key, xlabel = "T", ylabel = "KL (nats)", xlog = true, ylog = true}
      ax:legend()
    end
    paths[#paths + 1] = save(fig, "models_kl_vs_T")
  end
  if #models > 0 then -- 4. depth comparison
    local fig = mp.plot.figure{rows = 1, cols = 2, width = 920, height = 340}
    local ax = fig:axes(1, 1)
    local series = {}
    for _, r in ipairs(models) do
      local key = r.spec.arch .. "/" .. r.spec.loss
      series[key] = series[key] or {x = {}, y = {}}
      table.insert(series[key].x, r.spec.depth)
      table.insert(series[key].y, r.kl_avg)
    end
    local depths = {}
    for _, r in ipairs(models) do depths[r.spec.depth] = true end
    local dl = {}
    for d in pairs(depths) do dl[#dl + 1] = d end
    table.sort(dl)
    local lo_d, hi_d = dl[1], dl[#dl]
    if lo_d == hi_d then lo_d, hi_d = lo_d - 0.5, hi_d + 0.5 end
    for _, k in ipairs{"bayes", "md1", "md2", "md3", "uniform"} do
      local s = 0
      for i = 1, #T do s = s + S.mean[k]:get(i) end
      ax:line({lo_d, hi_d}, {s / #T, s / #T}, {label = C.EST[k].label, dashed = true})
    end
    local keys = {}
    for k in pairs(series) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do ax:line(series[k].x, series[k].y, {label = k, marker = true}) end
    ax:set{title = "KL averaged over the T grid", xlabel = "depth (layers)", ylabel = "KL (nats)", ylog = true}
    ax:legend()
    local ax2 = fig:axes(1, 2)
    for _, e in ipairs(C.estimators) do
      if not e.fixed then
        local x, y = {}, {}
        for _, r in ipairs(models) do
          if r.spec.loss == "all" and r.spec.arch == o.archs[1] then x[#x + 1] = r.spec.depth; y[#y + 1] = r.dist[e.key] end
        end
        if #x > 0 then ax2:line(x, y, {label = e.label, marker = true}) end
      end
    end
    ax2:set{title = ("Distance to each estimator (%s, all tokens)"):format(o.archs[1]), xlabel = "depth",
            ylabel = "mean KL(estimator || model)", ylog = true}
    ax2:legend()
    paths[#paths + 1] = save(fig, "depth")
  end
  if #models > 0 then -- 5. attention vs gamma heatmaps (one sequence, the verdict model)
    local r = models[1]
    for _, x in ipairs(models) do if x.spec.loss == "all" and x.spec.arch == o.archs[1] then r = x; break end end
    local av = r.attn
    local H = av.pattern:size(2)
    local W = math.min(48, o.T[#o.T] - o.m)
    local g = mp.zeros{o.m, W}
    local heads = {}
    for h = 1, H do heads[h] = mp.zeros{o.m, W} end
    for i = 1, W do
      local k = o.m + i
      for lag = 1, o.m do
        g:set(av.gamma:get(1, i, lag), lag, i)
        for h = 1, H do
          heads[h]:set(C.lag_weights(av.pattern, 1, h, k, o.m)[lag], lag, i)
        end
      end
    end
    local fig = mp.plot.figure{rows = H + 1, cols = 1, width = 640, height = 110 * (H + 1) + 30,
                               title = ("%s: first-layer attention on lags 1..%d vs responsibilities"):format(r.name, o.m)}
    fig:axes(1, 1):heatmap(g, {vmin = 0, vmax = 1, colorbar_label = "gamma"})
      :set{title = "responsibilities gamma_k(g) (rows: lag g = 1..m; columns: query k)", ylabel = "lag - 1"}
    for h = 1, H do
      fig:axes(h + 1, 1):heatmap(heads[h], {vmin = 0, vmax = 1, colorbar_label = "attention"})
        :set{title = ("L0 H%d, renormalised on lags 1..m: mean KL(gamma || attn) = %.3f%s"):format(h - 1, av.kl[h],
             h == av.best and " (best)" or ""), ylabel = "lag - 1"}
    end
    paths[#paths + 1] = save(fig, "attention_vs_gamma")
  end
  if #models > 0 then -- 6. ablation
    local groups, clean, abl, ctl = {}, {}, {}, {}
    for i, r in ipairs(models) do
      groups[i] = ("%s L%d %s s%d"):format(r.spec.arch == "standard" and "std" or "attn", r.spec.depth, r.spec.loss,
                                          r.spec.seed or 1)
      clean[i], abl[i], ctl[i] = r.kl_avg, r.ablate_best, r.ablate_control or r.ablate_best
    end
    local fig = mp.plot.figure{width = math.max(480, 70 * #models), height = 340}
    fig:axes(1, 1):bars(groups, {clean, abl, ctl}, {labels = {"intact", "best-matching L0 head zeroed",
                                                              "worst-matching L0 head zeroed"}})
      :set{title = "KL to the truth (mean over the T grid) after ablating one first-layer head", ylabel = "KL (nats)"}
      :legend()
    paths[#paths + 1] = save(fig, "ablation")
  end
  return paths
end

-- ---------------------------------------------------------------- reading the evidence back

-- the true next-token distributions at position T-1 (1-based row T): next
-- [B, Tmax, q] -> [B, q]; mirror.lua and mirror_asym.lua use it
function R.truth_at(nxt, T)
  local B, q = nxt:size(1), nxt:size(3)
  local out = mp.zeros{B, q}
  for b = 1, B do out[b]:copy_(nxt[b][T]) end
  return out
end

-- tokens [B, Tmax] -> [B, T] (a copy); mirror.lua uses it too
function R.prefix(tok, T)
  local B = tok:size(1)
  local out = mp.zeros{B, T}
  for b = 1, B do out[b]:copy_(tok[b]:narrow(1, T)) end
  return out
end
local prefix = R.prefix

-- C1's bootstrap: resample the sequences (te [B, T], their Bayes predictions
-- pb [B, q]) nb = min(boot, 200) times with a fixed LCG, re-tune one MD step's
-- eta on each against the Bayes predictor; returns the etas, sorted. The run
-- calls it with the task, a rejudge of a file that predates the stored
-- resamples with {pi =, m =} from the file.
function R.c1_bootstrap(mtd, te, pb, grid, seed, boot)
  local B, q = te:size(1), pb:size(2)
  local state, etas = seed * 7 + 3, {}
  local nb = math.min(boot, 200)
  for r = 1, nb do
    local tk, pr = mp.zeros{B, te:size(2)}, mp.zeros{B, q}
    for b = 1, B do
      state = (state * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
      local j = (state >> 17) % B + 1
      tk[b]:copy_(te[j]); pr[b]:copy_(pb[j])
    end
    etas[r] = mp.mtd.tune(mtd, tk, pr, {method = "md", steps = 1, grid = grid}).best
  end
  table.sort(etas)
  return etas
end

-- The positional schemes of the trained models (the probe's --pos): the
-- mp.model.new options each one sets. rope: RoPE on the scores, values
-- without position (the control); learned: GPT-2's learned absolute
-- positions, added to the residual (values carry the key's absolute
-- position); rope_relv: RoPE on the scores and Shaw et al.'s relative
-- embeddings on the values (rel_values = m + 1: one vector per lag 0..m, one
-- for every longer lag), so a layer's output holds its attention mass per lag.
R.SCHEMES = {"rope", "learned", "rope_relv"}
function R.scheme_opts(name, m)
  if name == "rope" or name == "learned" then return {pos = name} end
  if name == "rope_relv" then return {pos = "rope", rel_values = m + 1} end
  error(("unknown positional scheme '%s' (rope, learned or rope_relv)"):format(tostring(name)), 0)
end

-- the parameters of a freshly built model of a stored shape (files that
-- predate the n_params attribute)
local function count_params(a, arch, depth, Tmax)
  local opts = {d_model = a.d_model, n_layer = depth, n_head = a.n_head, vocab = a.q, ctx = Tmax,
                mlp = arch == "standard" and "swiglu" or "none", norm = "rms", init_std = a.init_std or 0.02, seed = 1}
  for k, v in pairs(R.scheme_opts(a.pos or "rope", math.tointeger(a.m) or a.m)) do opts[k] = v end
  local m = mp.model.new(opts)
  local n = 0
  for _, p in ipairs(m:params()) do n = n + m:param(p):numel() end
  m:close()
  return n
end

-- Everything the verdict rules (mirror_rules.rows) read, from an open run
-- file f (path: its name in errors): the estimators' numbers, C1's bootstrap,
-- the construction's per-sequence differences and every model's summary.
-- Files written before the C1 resamples and n_params were stored (commit
-- 4d4655c and older) get them recomputed from the file's own tokens, pi and
-- Bayes lambda, and from the stored model shape; E.notes says so.
function R.read_evidence(f, path)
  local function need(name)
    if not f:has(name) then error(("%s: not a complete mirror_descent run file (no /%s)"):format(path, name), 0) end
  end
  for _, name in ipairs{"T", "pi", "eval/tokens", "estimators/eta_grid", "estimators/best_eta/md1",
                        "estimators/best_eta/bayes_match", "estimators/uniform/kl_mean", "estimators/md1/kl",
                        "estimators/md1/kl_mean", "estimators/construction_weights/kl_diff_vs_md1",
                        "estimators/construction_weights/kl_mean"} do
    need(name)
  end
  local a = f:attrs("T")
  for _, k in ipairs{"m", "q", "seed", "boot", "estimators"} do
    if a[k] == nil then error(("%s: /T lacks the attribute %s: not a mirror_descent run file"):format(path, k), 0) end
  end
  local function get(name) return f:read(name):totable() end
  local m = math.tointeger(a.m) or a.m
  local T = {}
  for i, x in ipairs(get("T")) do T[i] = math.floor(x + 0.5) end
  local nT, Tmax = #T, T[#T]
  local E = {m = m, q = a.q, T = T, preset = a.preset, notes = {}}
  local function avg_over_T(name)
    local s = 0
    for _, x in ipairs(get(name)) do s = s + x end
    return s / nT
  end
  E.uniform_kl, E.md_kl = avg_over_T("estimators/uniform/kl_mean"), avg_over_T("estimators/md1/kl_mean")
  -- C1
  local i1 = 1
  for i, x in ipairs(T) do if x == m + 1 then i1 = i end end
  local tok = f:read("eval/tokens")
  local mtd = {pi = f:read("pi"), m = m}
  local boot
  if f:has("estimators/best_eta/bayes_match_boot") then
    boot = get("estimators/best_eta/bayes_match_boot")
  else
    need("estimators/bayes/lambda")
    local te = prefix(tok, T[i1])
    local pb = mp.mtd.predict(mtd, te, f:read("estimators/bayes/lambda")[i1])
    boot = R.c1_bootstrap(mtd, te, pb, get("estimators/eta_grid"), a.seed, a.boot)
    E.notes[#E.notes + 1] = "C1's bootstrap recomputed from the file's tokens, pi and Bayes lambda (the file "
      .. "predates the stored resamples)"
  end
  local Rl = require "mirror_rules"
  local lo, hi = Rl.boot_interval(boot)
  local X = require("mirror_asym").read(f)
  E.asym = X
  E.c1 = {boot = {eta = get("estimators/best_eta/bayes_match")[i1], lo = lo, hi = hi, n = tok:size(1), nb = #boot},
          eta0 = 1 / (m + 1), T = X and X.T1 or m + 1, note = E.notes[1], values = X and X.c1 or {},
          draws = X and X.draws or {}, sequences = X and X.sequences}
  -- C2: the tuned one-step eta at T >= 8m
  local eta = get("estimators/best_eta/md1")
  E.c2 = {T = {}, eta = {}, m = m, asym = X}
  for i, x in ipairs(T) do
    if x >= 8 * m then E.c2.T[#E.c2.T + 1] = x; E.c2.eta[#E.c2.eta + 1] = eta[i] end
  end
  -- C6: the construction's weights against one-step MD on the first n_seq sequences
  local diff = get("estimators/construction_weights/kl_diff_vs_md1")
  local n_seq = #diff // nT
  local kl_md1 = get("estimators/md1/kl")
  local md = 0
  for i = 1, nT do
    local s = 0
    for b = 1, n_seq do s = s + kl_md1[i][b] end
    md = md + s / n_seq / nT
  end
  E.c6 = {diff = diff, md = md, n_seq = n_seq, nT = nT,
          max_dp = f:attrs("estimators/construction_weights/kl_mean").max_prob_diff_vs_md1}
  -- the models
  local keys = {}
  for k in tostring(a.estimators):gmatch("[^,]+") do keys[#keys + 1] = k end
  local archs = {}
  for x in tostring(a.archs or "standard,attn-only"):gmatch("[^,]+") do archs[#archs + 1] = x end
  E.models = {}
  local params = {}
  if f:has("models") then
    for _, name in ipairs(f:list("models")) do
      local g = "models/" .. name
      for _, d in ipairs{"/kl", "/attn_kl", "/dist_to_estimators"} do need(g .. d) end
      local ma = f:attrs(g .. "/kl")
      for _, k in ipairs{"arch", "depth", "loss", "seed", "kl_avg", "best_head", "uniform_attn_kl", "ablate_best",
                         "ablate_control"} do
        if ma[k] == nil then error(("%s: /%s/kl lacks the attribute %s"):format(path, g, k), 0) end
      end
      local attn, dv, dist = get(g .. "/attn_kl"), get(g .. "/dist_to_estimators"), {}
      for i, k in ipairs(keys) do dist[k] = dv[i] end
      local key = ma.arch .. "/" .. ma.depth
      local np = ma.n_params or params[key]
      if not np then
        np = count_params(a, ma.arch, ma.depth, Tmax)
        if #E.notes < 2 then E.notes[#E.notes + 1] = "parameters counted from the stored shape" end
      end
      params[key] = np
      E.models[#E.models + 1] = {name = name, arch = ma.arch, depth = ma.depth, loss = ma.loss, seed = ma.seed,
        kl_avg = ma.kl_avg, attn_kl = attn[ma.best_head + 1], uniform_attn_kl = ma.uniform_attn_kl,
        ablate_best = ma.ablate_best, ablate_control = ma.ablate_control >= 0 and ma.ablate_control or ma.ablate_best,
        dist = dist, n_params = np}
    end
  end
  -- in the run's order: architecture (as the run lists them), depth, loss, seed
  local rank = {}
  for i, x in ipairs(archs) do rank[x] = i end
  table.sort(E.models, function(x, y)
    local ax, ay = rank[x.arch] or #archs + 1, rank[y.arch] or #archs + 1
    if ax ~= ay then return ax < ay end
    if x.arch ~= y.arch then return x.arch < y.arch end
    if x.depth ~= y.depth then return x.depth < y.depth end
    if x.loss ~= y.loss then return x.loss < y.loss end
    return x.seed < y.seed
  end)
  E.arch = archs[1]
  local plo, phi = math.huge, 0
  for _, r in ipairs(E.models) do
    if r.loss == "all" then plo = math.min(plo, r.n_params); phi = math.max(phi, r.n_params) end
  end
  if a.steps and a.batch and phi > 0 then
    E.train = {steps = a.steps, batch = a.batch, Tmax = Tmax, params_lo = plo, params_hi = phi}
  end
  -- C5's spread: the largest mean KL (over T) between two of md1, md2, md3, bayes
  E.spread = 0
  if #E.models > 0 then
    local ek = {"md1", "md2", "md3", "bayes"}
    local lam = {}
    for _, k in ipairs(ek) do
      need("estimators/" .. k .. "/lambda")
      lam[k] = f:read("estimators/" .. k .. "/lambda")
    end
    local d = {}
    for i, x in ipairs(T) do
      local te, pred = prefix(tok, x), {}
      for _, k in ipairs(ek) do pred[k] = mp.mtd.predict(mtd, te, lam[k][i]) end
      for u = 1, #ek do for v = 1, #ek do if u ~= v then
        local key = u * 10 + v
        d[key] = (d[key] or 0) + mp.mtd.kl(pred[ek[u]], pred[ek[v]]):mean() / nT
      end end end
    end
    for _, x in pairs(d) do E.spread = math.max(E.spread, x) end
  end
  return E
end

return R
