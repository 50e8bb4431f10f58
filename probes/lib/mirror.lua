-- mirror.lua (library) — the experiments behind `mechprobe mirror_descent`: does a
-- transformer trained on Mixture-of-Transition-Distribution (MTD) sequences
-- estimate the mixture weights in context like one step of mirror descent?
--
--   local mirror = require "mirror"
--   local r = mirror.run(mirror.preset("quick"), {out = DIR, format = "png"})
--
-- Sections (each a part of the printed report and of DIR/mirror.h5):
--   1. estimators alone against T (Bayes by Gibbs, mirror descent with tuned and
--      fixed steps, 2 and 3 steps; the best step against T with a fitted slope)
--   2. trained transformers (standard pre-norm and attention-only, several depths,
--      loss on all tokens or on the last one) against the estimators
--   3. mechanism: first-layer attention restricted to lags 1..m vs the
--      responsibilities gamma, and ablation of the best-matching head
--   4. the three-layer construction with one fixed beta against one-step MD
-- then the figures and the verdict table (rows "VERDICT id | claim | paper | ours | verdict").
local M = {}

-- ---------------------------------------------------------------- presets

local function range_grid(lo, step, n)
  local g = {}
  for i = 0, n - 1 do g[#g + 1] = 10 ^ (lo + step * i) end
  return g
end

local base = {
  q = 8, m = 3, concentration = 0.3, seed = 1,
  eta_grid = range_grid(-4, 0.1, 61),      -- 1e-4 .. 1e2
  beta_grid = range_grid(-2, 0.1, 71),     -- 1e-2 .. 1e5
  archs = {"standard", "attn-only"},
  losses = {"all", "last"},
  lr = 1e-2, warmup = 100,
}

M.presets = {
  quick = {
    T = {4, 5, 6, 8, 12, 16, 24, 32, 48}, B_eval = 96, B_tune = 96,
    gibbs = {chains = 4, burn = 100, samples = 300}, boot = 200,
    depths = {2}, d_model = 32, n_head = 2, steps = 150, batch = 16, warmup = 20,
    B_mech = 32, last_depths = {2},
  },
  medium = {
    T = {4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}, B_eval = 192, B_tune = 192,
    gibbs = {chains = 4, burn = 150, samples = 600}, boot = 500,
    depths = {2, 3, 4}, d_model = 48, n_head = 4, steps = 1500, batch = 8,
    B_mech = 64, last_depths = {3},
  },
  full = {
    T = {4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192}, B_eval = 256, B_tune = 256,
    gibbs = {chains = 4, burn = 200, samples = 1000}, boot = 1000,
    depths = {2, 3, 4, 5, 6}, d_model = 48, n_head = 4, steps = 3500, batch = 8,
    B_mech = 64, last_depths = {2, 4, 6},
  },
}

function M.preset(name) return require("cli").preset(base, M.presets, name) end

-- ---------------------------------------------------------------- helpers

local function log(fmt, ...)
  -- under mpirun: rank 0's lines, and every rank's inside its sweep items
  if mp.mpi.size() > 1 and mp.mpi.rank() ~= 0 then return end
  local who = mp.mpi.world_size() > 1 and (" rank %d"):format(mp.mpi.world_rank()) or ""
  io.stderr:write(("[mirror%s %s] " .. fmt .. "\n"):format(who, os.date("%H:%M:%S"), ...)); io.stderr:flush()
end

-- tokens [B, Tmax] -> [B, T] (a copy)
local function prefix(tok, T)
  local B = tok:size(1)
  local out = mp.zeros{B, T}
  for b = 1, B do out[b]:copy_(tok[b]:narrow(1, T)) end
  return out
end

-- next [B, Tmax, q] -> [B, q] at position T-1 (1-based row T)
local function truth_at(nxt, T)
  local B, q = nxt:size(1), nxt:size(3)
  local out = mp.zeros{B, q}
  for b = 1, B do out[b]:copy_(nxt[b][T]) end
  return out
end

-- logits [B, Tmax, q] -> softmax probabilities [B, q] at row T
local function probs_at(logits, T)
  local B, q = logits:size(1), logits:size(3)
  local out = mp.zeros{B, q}
  for b = 1, B do
    local mx = -math.huge
    for v = 1, q do mx = math.max(mx, logits:get(b, T, v)) end
    local z, e = 0, {}
    for v = 1, q do e[v] = math.exp(logits:get(b, T, v) - mx); z = z + e[v] end
    for v = 1, q do out:set(e[v] / z, b, v) end
  end
  return out
end

local function mean_of(t) return t:mean() end

local function ci(values, o, salt)
  local r = mp.analyze.bootstrap(values, {n = o.boot, seed = o.seed * 1000 + (salt or 0)})
  return r.estimate, r.lo, r.hi
end

-- Spearman rank correlation of two equal-length lists (ties get average ranks).
local function spearman(x, y)
  local function ranks(v)
    local idx = {}
    for i = 1, #v do idx[i] = i end
    table.sort(idx, function(a, b) return v[a] < v[b] end)
    local r, i = {}, 1
    while i <= #idx do
      local j = i
      while j < #idx and v[idx[j + 1]] == v[idx[i]] do j = j + 1 end
      for k = i, j do r[idx[k]] = (i + j) / 2 end
      i = j + 1
    end
    return r
  end
  local rx, ry = ranks(x), ranks(y)
  local n, mx, my = #x, 0, 0
  for i = 1, n do mx = mx + rx[i] / n; my = my + ry[i] / n end
  local sxy, sxx, syy = 0, 0, 0
  for i = 1, n do
    sxy = sxy + (rx[i] - mx) * (ry[i] - my); sxx = sxx + (rx[i] - mx) ^ 2; syy = syy + (ry[i] - my) ^ 2
  end
  if sxx == 0 or syy == 0 then return 0 end
  return sxy / math.sqrt(sxx * syy)
end

-- The estimators of section 1, in report order. `steps` orders them for the
-- depth claim (uniform = 0 steps, Bayes = the limit of many).
M.estimators = {
  {key = "bayes", label = "Bayes (Gibbs)", steps = math.huge},
  {key = "md1", label = "MD 1 step, tuned eta", steps = 1},
  {key = "md1_fixed", label = "MD 1 step, eta=1/(m+1)", steps = 1, fixed = true},
  {key = "md2", label = "MD 2 steps, tuned eta", steps = 2},
  {key = "md3", label = "MD 3 steps, tuned eta", steps = 3},
  {key = "construction", label = "construction, beta tuned per T", steps = 1},
  {key = "construction_fixed", label = "construction, one beta for all T", steps = 1, fixed = true},
  {key = "uniform", label = "uniform lambda", steps = 0},
}
local EST = {}
for _, e in ipairs(M.estimators) do EST[e.key] = e end

-- A task whose batches carry one target per sequence, at a random position
-- m-1..T-1: loss on the last token of a random-length prefix (the model is causal).
local function last_token_task(task, m, seed)
  local rng_state = seed
  local function rand(n)   -- deterministic LCG (independent of math.random)
    rng_state = (rng_state * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return (rng_state >> 17) % n
  end
  return {
    sample = function(_, B, T)
      local tok, tgt = task:sample(B, T, {truth = false})
      local out = mp.full({B, T}, -1)
      for b = 1, B do
        local t = m + rand(T - m + 1)        -- 1-based position index m..T (0-based m-1..T-1)
        out:set(tgt:get(b, t), b, t)
      end
      return tok, out
    end,
  }
end

-- ---------------------------------------------------------------- section 1 + 4

local function section_estimators(o, task, D)
  local nT, m = #o.T, o.m
  local S = {kl = {}, mean = {}, lo = {}, hi = {}, pred = {}, lambda = {}}
  for _, e in ipairs(M.estimators) do
    S.kl[e.key] = mp.zeros{nT, o.B_eval}
    S.mean[e.key], S.lo[e.key], S.hi[e.key] = mp.zeros{nT}, mp.zeros{nT}, mp.zeros{nT}
    S.pred[e.key] = {}
    S.lambda[e.key] = mp.zeros{nT, o.B_eval, m}
  end
  S.kl.oracle = mp.zeros{nT, o.B_eval}
  S.best_eta = {md1 = mp.zeros{nT}, md2 = mp.zeros{nT}, md3 = mp.zeros{nT}, bayes_match = mp.zeros{nT}}
  S.best_beta = mp.zeros{nT}
  S.tune_kl = {md1 = mp.zeros{nT, #o.eta_grid}, md2 = mp.zeros{nT, #o.eta_grid}, md3 = mp.zeros{nT, #o.eta_grid},
               construction = mp.zeros{nT, #o.beta_grid}, bayes_match = mp.zeros{nT, #o.eta_grid}}
  S.rhat = mp.zeros{nT, o.B_eval}
  local beta_sum = {}
  for j = 1, #o.beta_grid do beta_sum[j] = 0 end
  local tok_eval, tok_tune = {}, {}
  for i, T in ipairs(o.T) do
    local te, tt = prefix(D.eval_tok, T), prefix(D.tune_tok, T)
    tok_eval[i], tok_tune[i] = te, tt
    local truth_e, truth_t = truth_at(D.eval_next, T), truth_at(D.tune_next, T)
    D.truth[i] = truth_e
    -- tuning on the separate tuning set
    local eta = {}
    for s = 1, 3 do
      local r = mp.mtd.tune(task, tt, truth_t, {method = "md", steps = s, grid = o.eta_grid})
      eta[s] = r.best
      S.best_eta["md" .. s]:set(r.best, i)
      S.tune_kl["md" .. s][i]:copy_(r.kl)
    end
    local rc = mp.mtd.tune(task, tt, truth_t, {method = "construction", grid = o.beta_grid})
    S.tune_kl.construction[i]:copy_(rc.kl)
    S.best_beta:set(rc.best, i)
    for j = 1, #o.beta_grid do beta_sum[j] = beta_sum[j] + rc.kl:get(j) end
    -- the estimators on the evaluation set
    local lam = {}
    local mean, rhat = mp.mtd.bayes(task, te, {chains = o.gibbs.chains, burn = o.gibbs.burn,
                                               samples = o.gibbs.samples, seed = o.seed})
    lam.bayes = mean
    S.rhat[i]:copy_(rhat)
    lam.md1 = mp.mtd.mirror_descent(task, te, {eta = eta[1], steps = 1})
    lam.md1_fixed = mp.mtd.mirror_descent(task, te, {eta = 1 / (m + 1), steps = 1})
    lam.md2 = mp.mtd.mirror_descent(task, te, {eta = eta[2], steps = 2})
    lam.md3 = mp.mtd.mirror_descent(task, te, {eta = eta[3], steps = 3})
    lam.uniform = mp.full({o.B_eval, m}, 1 / m)
    lam.construction = mp.mtd.construction(task, te, {beta = rc.best})
    for _, e in ipairs(M.estimators) do
      if lam[e.key] then
        local p = mp.mtd.predict(task, te, lam[e.key])
        S.pred[e.key][i] = p
        S.lambda[e.key][i]:copy_(lam[e.key])
        S.kl[e.key][i]:copy_(mp.mtd.kl(truth_e, p))
      end
    end
    S.kl.oracle[i]:copy_(mp.mtd.kl(truth_e, mp.mtd.predict(task, te, D.eval_lambda)))
    -- the step that makes one MD step closest to the Bayes predictor (eval set)
    local rb = mp.mtd.tune(task, te, S.pred.bayes[i], {method = "md", steps = 1, grid = o.eta_grid})
    S.best_eta.bayes_match:set(rb.best, i)
    S.tune_kl.bayes_match[i]:copy_(rb.kl)
    log("section 1: T=%d  KL bayes %.4f md1 %.4f (eta %.3g) md2 %.4f md3 %.4f  max R-hat %.3f", T,
        S.kl.bayes[i]:mean(), S.kl.md1[i]:mean(), eta[1], S.kl.md2[i]:mean(), S.kl.md3[i]:mean(), rhat:max())
  end
  -- section 4: the construction with one beta for every T (tuned on the pooled tuning KL)
  local bj = 1
  for j = 2, #o.beta_grid do if beta_sum[j] < beta_sum[bj] then bj = j end end
  S.beta = o.beta_grid[bj]
  for i, T in ipairs(o.T) do
    local lam, p = mp.mtd.construction(task, tok_eval[i], {beta = S.beta})
    S.pred.construction_fixed[i] = p
    S.lambda.construction_fixed[i]:copy_(lam)
    S.kl.construction_fixed[i]:copy_(mp.mtd.kl(D.truth[i], p))
  end
  -- bands
  for k, e in ipairs(M.estimators) do
    for i = 1, nT do
      local est, lo, hi = ci(S.kl[e.key][i], o, 10 * i + k)
      S.mean[e.key]:set(est, i); S.lo[e.key]:set(lo, i); S.hi[e.key]:set(hi, i)
    end
  end
  -- the best step against T: fit over T >= 2m
  local xs, ys = {}, {}
  for i, T in ipairs(o.T) do
    if T >= 2 * m then xs[#xs + 1] = T; ys[#ys + 1] = S.best_eta.md1:get(i) end
  end
  S.fit = mp.mtd.fit_power(xs, ys)
  S.fit_T = xs
  -- the large-T regime (T >= 8m), where "stable steps scale as 1/T" is a statement
  local xa, ya = {}, {}
  for i, T in ipairs(o.T) do
    if T >= 8 * m then xa[#xa + 1] = T; ya[#ya + 1] = S.best_eta.md1:get(i) end
  end
  if #xa >= 3 then S.fit_large = mp.mtd.fit_power(xa, ya); S.fit_large_T = xa end
  local xb, yb = {}, {}
  for i, T in ipairs(o.T) do
    if T >= 2 * m then xb[#xb + 1] = T; yb[#yb + 1] = S.best_eta.bayes_match:get(i) end
  end
  S.fit_bayes = mp.mtd.fit_power(xb, yb)
  -- construction vs one-step MD: relative KL difference per T, and the step
  -- the tuned beta implies, beta / (m N)
  local function rel_diff(key)
    local d, s = mp.zeros{nT}, 0
    for i = 1, nT do
      local a, b = S.mean[key]:get(i), S.mean.md1:get(i)
      d:set(math.abs(a - b) / b, i)
      s = s + math.abs(a - b) / b
    end
    return d, s / nT
  end
  S.rel_diff, S.rel_diff_mean = rel_diff("construction")
  S.rel_diff_max = S.rel_diff:max()
  S.rel_diff_fixed, S.rel_diff_fixed_mean = rel_diff("construction_fixed")
  S.implied_eta = mp.zeros{nT}
  for i, T in ipairs(o.T) do S.implied_eta:set(S.best_beta:get(i) / (m * (T - m)), i) end
  S.tok_eval = tok_eval
  return S
end

-- Gibbs against quadrature on an m = 2 task (the probe's own check of the sampler).
local function gibbs_check(o)
  local t2 = mp.tasks.mtd{q = o.q, m = 2, concentration = o.concentration, seed = o.seed + 7}
  local worst, worst_rhat = 0, 1
  for _, T in ipairs{8, 32, 128} do
    local tok = t2:sample(32, T, {truth = false})
    local ex = mp.mtd.bayes(t2, tok, {exact = true})
    local gb, rh = mp.mtd.bayes(t2, tok, {chains = o.gibbs.chains, burn = o.gibbs.burn, samples = 4 * o.gibbs.samples,
                                          seed = o.seed})
    worst = math.max(worst, ex:sub(gb):max(), gb:sub(ex):max())
    worst_rhat = math.max(worst_rhat, rh:max())
  end
  t2:close()
  return worst, worst_rhat
end

-- ---------------------------------------------------------------- sections 2 + 3

local function model_name(spec) return ("%s-L%d-%s"):format(spec.arch, spec.depth, spec.loss) end

-- KL(truth || model) per T [nT, B] from logits [B, Tmax, q]
local function model_kl(o, D, logits)
  local nT = #o.T
  local kl, probs = mp.zeros{nT, o.B_eval}, {}
  for i, T in ipairs(o.T) do
    probs[i] = probs_at(logits, T)
    kl[i]:copy_(mp.mtd.kl(D.truth[i], probs[i]))
  end
  return kl, probs
end

-- attention on lags 1..m renormalised (a floor of 1e-12 per lag: a query with no
-- mass there reads as uniform, never 0/0)
local LAG_EPS = 1e-12
local function lag_weights(pat, b, h, k, m)
  local a, mass = {}, 0
  for g = 1, m do a[g] = pat:get(b, h, k, k - g); mass = mass + a[g] end
  local w = {}
  for g = 1, m do w[g] = (a[g] + LAG_EPS) / (mass + m * LAG_EPS) end
  return w, mass
end

-- attention of layer `layer` (0-based) vs gamma: per-head mean KL(gamma || attention
-- on lags 1..m, renormalised), mean attention mass on those lags, the KL at the
-- last query; gamma [B, T-m, m] from mp.mtd.responsibilities
local function attention_vs_gamma(o, model, tok, gamma, layer)
  local m = o.m
  local name = ("blocks.%d.attn.hook_pattern"):format(layer)
  local _, cache = model:run_with_cache(tok, {names = name, logits = "none"})
  local pat = cache[name]                                  -- [B, H, T, T]
  local B, H, T = pat:size(1), pat:size(2), pat:size(3)
  local res = {kl = {}, mass = {}, kl_last = {}, pattern = pat, gamma = gamma, layer = layer}
  for h = 1, H do
    local skl, smass, slast, n = 0, 0, 0, 0
    for b = 1, B do
      for i = 1, T - m do
        local k = m + i            -- 1-based row of query position m + i - 1
        local w, mass = lag_weights(pat, b, h, k, m)
        local kl = 0
        for g = 1, m do
          local p = gamma:get(b, i, g)
          if p > 0 then kl = kl + p * (math.log(p) - math.log(w[g])) end
        end
        skl = skl + kl; smass = smass + mass; n = n + 1
        if i == T - m then slast = slast + kl end
      end
    end
    res.kl[h], res.mass[h], res.kl_last[h] = skl / n, smass / n, slast / B
  end
  -- the baseline: uniform attention over the lags
  local su, n = 0, 0
  for b = 1, B do
    for i = 1, T - m do
      for g = 1, m do
        local p = gamma:get(b, i, g)
        if p > 0 then su = su + p * (math.log(p) - math.log(1 / m)) end
      end
      n = n + 1
    end
  end
  res.uniform_kl = su / n
  res.best = 1
  for h = 2, H do if res.kl[h] < res.kl[res.best] then res.best = h end end
  res.worst = 1
  for h = 2, H do if res.kl[h] > res.kl[res.worst] then res.worst = h end end
  return res
end

local function section_models(o, task, D, S)
  local nT = #o.T
  local specs = {}
  for _, loss in ipairs(o.losses) do
    for _, arch in ipairs(o.archs) do
      for _, depth in ipairs(loss == "last" and o.last_depths or o.depths) do
        specs[#specs + 1] = {arch = arch, depth = depth, loss = loss}
      end
    end
  end
  local mech_tok = D.eval_tok:narrow(1, o.B_mech)
  local function train_one(spec, si)
    local w0 = os.time()
    local model = mp.model.new{d_model = o.d_model, n_layer = spec.depth, n_head = o.n_head, vocab = o.q,
                               ctx = o.T[nT], mlp = spec.arch == "standard" and "swiglu" or "none", norm = "rms",
                               pos = "rope", seed = o.seed + spec.depth}
    task:seed(o.seed * 7919 + 17)                         -- every model sees the same training stream
    local train_task = spec.loss == "all" and task or last_token_task(task, o.m, o.seed + 99)
    local r = model:train{task = train_task, steps = o.steps, batch = o.batch, seq_len = o.T[nT], lr = o.lr,
                          warmup = o.warmup, progress = o.progress or false}
    local logits = model:forward(D.eval_tok)
    local kl, probs = model_kl(o, D, logits)
    local res = {spec = spec, name = model_name(spec), kl = kl, mean = mp.zeros{nT}, lo = mp.zeros{nT},
                 hi = mp.zeros{nT}, loss = r.loss, final_loss = r.final_loss, tokens_per_s = r.tokens_per_s}
    for i = 1, nT do
      local e, lo, hi = ci(kl[i], o, 500 + 10 * i + si)
      res.mean:set(e, i); res.lo:set(lo, i); res.hi:set(hi, i)
    end
    -- which estimator it tracks: mean over T and sequences of KL(p_est || p_model)
    res.dist = {}
    for _, e in ipairs(M.estimators) do
      local s = 0
      for i = 1, nT do s = s + mp.mtd.kl(S.pred[e.key][i], probs[i]):mean() end
      res.dist[e.key] = s / nT
    end
    res.closest = M.estimators[1].key
    for _, e in ipairs(M.estimators) do
      if not e.fixed and res.dist[e.key] < res.dist[res.closest] then res.closest = e.key end
    end
    -- section 3: mechanism and ablation
    local gamma = mp.mtd.responsibilities(task, mech_tok)
    local av = attention_vs_gamma(o, model, mech_tok, gamma, 0)
    res.attn = av
    -- the best-matching head of any layer (the paper looks at the first one)
    res.any = {layer = 0, head = av.best, kl = av.kl[av.best], mass = av.mass[av.best]}
    for l = 1, spec.depth - 1 do
      local al = attention_vs_gamma(o, model, mech_tok, gamma, l)
      if al.kl[al.best] < res.any.kl then res.any = {layer = l, head = al.best, kl = al.kl[al.best], mass = al.mass[al.best]} end
    end
    local function ablated_kl(h, layer)
      local hook = ("blocks.%d.attn.hook_z"):format(layer or 0)
      local lg = model:run_with_hooks(D.eval_tok, {fwd_hooks = {{hook, mp.ablate.zero{head = h - 1}}}})
      local k = model_kl(o, D, lg)
      local s = 0
      for i = 1, nT do s = s + k[i]:mean() end
      return s / nT, k
    end
    local clean = 0
    for i = 1, nT do clean = clean + kl[i]:mean() end
    res.kl_avg = clean / nT
    res.ablate_best, res.ablate_best_kl = ablated_kl(av.best)
    if av.worst ~= av.best then res.ablate_control = ablated_kl(av.worst) end
    if res.any.layer ~= 0 then res.ablate_any = ablated_kl(res.any.head, res.any.layer) else res.ablate_any = res.ablate_best end
    res.seconds = os.time() - w0
    log("section 2/3: %s (%d/%d): loss %.3f -> %.3f, KL@T=%d %.4f (bayes %.4f, md1 %.4f), closest %s, "
        .. "L0H%d attn KL %.3f, ablation KL %.4f -> %.4f, %ds", res.name, si, #specs, r.loss[1], r.final_loss,
        o.T[nT], res.mean:get(nT), S.mean.bayes:get(nT), S.mean.md1:get(nT), res.closest, av.best - 1,
        av.kl[av.best], res.kl_avg, res.ablate_best, res.seconds)
    return res
  end
  -- The models are independent (each reseeds the task and its own weights):
  -- under mpirun they spread over the ranks, and rank 0 gets them all in
  -- order, as the serial loop makes them (nil on the other ranks).
  return mp.mpi.sweep(specs, train_one)
end

-- ---------------------------------------------------------------- output

local function write_h5(o, path, task, D, S, models, G)
  local f <close> = mp.h5.open(path, "w")
  f:write("pi", task:pi())
  f:write("T", o.T)
  f:write("eval/tokens", D.eval_tok)
  f:write("eval/lambda", D.eval_lambda)
  for _, k in ipairs{"q", "m", "concentration", "seed", "B_eval", "B_tune", "boot", "d_model", "n_head", "steps",
                     "batch", "lr", "warmup", "B_mech"} do
    f:set_attr("T", k, o[k])
  end
  f:set_attr("T", "preset", o.preset)
  f:write("estimators/eta_grid", o.eta_grid)
  f:write("estimators/beta_grid", o.beta_grid)
  for _, e in ipairs(M.estimators) do
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
  f:set_attr("estimators/construction_fixed/kl", "beta", S.beta)
  f:write("estimators/construction/rel_diff_vs_md1", S.rel_diff)
  f:write("estimators/construction/best_beta", S.best_beta)
  f:write("estimators/construction/implied_eta", S.implied_eta)
  f:write("estimators/construction_fixed/rel_diff_vs_md1", S.rel_diff_fixed)
  f:set_attr("estimators/bayes/rhat", "gibbs_vs_quadrature_max_diff", G.diff)
  for _, r in ipairs(models) do
    local g = "models/" .. r.name
    f:write(g .. "/kl", r.kl)
    f:write(g .. "/kl_mean", r.mean)
    f:write(g .. "/kl_lo", r.lo)
    f:write(g .. "/kl_hi", r.hi)
    f:write(g .. "/train_loss", r.loss)
    local d = {}
    for i, e in ipairs(M.estimators) do d[i] = r.dist[e.key] end
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
                      final_loss = r.final_loss, seconds = r.seconds} do
      f:set_attr(g .. "/kl", k, v)
    end
  end
  local names = {}
  for i, e in ipairs(M.estimators) do names[i] = e.key end
  f:set_attr("T", "estimators", table.concat(names, ","))
end

local function figures(o, S, models)
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
    for _, e in ipairs(M.estimators) do
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
        ax:line(T, S.mean[k], {label = EST[k].label, dashed = true, band_lo = S.lo[k], band_hi = S.hi[k]})
      end
      for _, r in ipairs(panels[key]) do
        ax:line(T, r.mean, {label = ("depth %d"):format(r.spec.depth), marker = true, band_lo = r.lo, band_hi = r.hi})
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
      ax:line({lo_d, hi_d}, {s / #T, s / #T}, {label = EST[k].label, dashed = true})
    end
    local keys = {}
    for k in pairs(series) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do ax:line(series[k].x, series[k].y, {label = k, marker = true}) end
    ax:set{title = "KL averaged over the T grid", xlabel = "depth (layers)", ylabel = "KL (nats)", ylog = true}
    ax:legend()
    local ax2 = fig:axes(1, 2)
    for _, e in ipairs(M.estimators) do
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
          heads[h]:set(lag_weights(av.pattern, 1, h, k, o.m)[lag], lag, i)
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
      groups[i] = ("%s L%d %s"):format(r.spec.arch == "standard" and "std" or "attn", r.spec.depth, r.spec.loss)
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

-- ---------------------------------------------------------------- the run

function M.run(o)
  local t_start = os.time()
  mp.mkdir(o.out)
  o.format = o.format or "png"
  local m, q = o.m, o.q
  local task = mp.tasks.mtd{q = q, m = m, concentration = o.concentration, seed = o.seed}
  local Tmax = o.T[#o.T]
  local D = {truth = {}}
  task:seed(o.seed * 1000 + 1)
  local tok, _, tr = task:sample(o.B_eval, Tmax)
  D.eval_tok, D.eval_next, D.eval_lambda = tok, tr.next, tr.lambda
  task:seed(o.seed * 1000 + 2)
  local tok2, _, tr2 = task:sample(o.B_tune, Tmax)
  D.tune_tok, D.tune_next = tok2, tr2.next

  local lines = {}
  local root = mp.mpi.rank() == 0     -- under mpirun, rank 0 alone reports and writes
  local function out(fmt, ...)
    local s = select("#", ...) > 0 and fmt:format(...) or fmt
    lines[#lines + 1] = s
    if root then print(s) end
  end

  out("== mechprobe mirror_descent (%s) ==", o.preset)
  out("MTD: q = %d tokens, m = %d lags, pi* rows ~ Dirichlet(%g), lambda ~ Dirichlet(1) per sequence, seed %d",
      q, m, o.concentration, o.seed)
  out("T grid: %s (prediction of y_T from y_0..y_{T-1}; N = T - m observations)", table.concat(o.T, ","))
  out("sets: %d evaluation and %d tuning sequences (separate draws); bootstrap %d resamples",
      o.B_eval, o.B_tune, o.boot)
  out("Bayes: Gibbs, %d chains x (%d burn-in + %d kept) sweeps; eta grid 1e-4..1e2 and beta grid 1e-2..1e5 (10/decade)",
      o.gibbs.chains, o.gibbs.burn, o.gibbs.samples)
  out("models: d_model %d, %d heads, RoPE, RMSNorm, depths %s (last-token loss: %s), %s; %d steps x batch %d x T %d, "
      .. "AdamW lr %g, warmup %d", o.d_model, o.n_head, table.concat(o.depths, ","), table.concat(o.last_depths, ","),
      table.concat(o.archs, " / "), o.steps, o.batch, Tmax, o.lr, o.warmup)

  -- 1 + 4
  log("section 1: estimators on %d T values", #o.T)
  local t1 = os.time()
  local S = section_estimators(o, task, D)
  local G = {}
  G.diff, G.rhat = gibbs_check(o)
  local worst_rhat = S.rhat:max()
  out("")
  out("-- 1. Estimators against T: mean KL(truth || predictor) over the evaluation set (95% bootstrap CIs in the")
  out("   figure and the HDF5 file); eta*(s): tuned step of s-step MD; eta~Bayes: one-step eta closest to Bayes")
  local short = {bayes = "bayes", md1 = "md1", md1_fixed = "md1_1/(m+1)", md2 = "md2", md3 = "md3",
                 construction = "constr", construction_fixed = "constr_1beta", uniform = "uniform"}
  local hdr = ("%5s"):format("T")
  for _, e in ipairs(M.estimators) do hdr = hdr .. (" %12s"):format(short[e.key]) end
  out(hdr .. (" %9s %9s %9s %9s"):format("eta*(1)", "eta*(2)", "eta*(3)", "eta~Bayes"))
  for i, T in ipairs(o.T) do
    local row = ("%5d"):format(T)
    for _, e in ipairs(M.estimators) do row = row .. (" %12.4f"):format(S.mean[e.key]:get(i)) end
    out(row .. (" %9.4g %9.4g %9.4g %9.4g"):format(S.best_eta.md1:get(i), S.best_eta.md2:get(i), S.best_eta.md3:get(i),
                                               S.best_eta.bayes_match:get(i)))
  end
  out("oracle predictor (true lambda): max KL %.2e", S.kl.oracle:max())
  out("best one-step eta against T (T >= %d): slope %.3f +- %.3f (SE), R^2 %.3f; eta closest to Bayes: slope %.3f",
      2 * m, S.fit.slope, S.fit.slope_se, S.fit.r2, S.fit_bayes.slope)
  if S.fit_large then
    out("large T (T >= %d, %d points): slope %.3f +- %.3f (SE), R^2 %.3f", 8 * m, S.fit_large.n, S.fit_large.slope,
        S.fit_large.slope_se, S.fit_large.r2)
  end
  out("Gibbs: worst R-hat %.4f over %d sequences x %d T; check against quadrature (m = 2, 96 sequences): max |diff| %.4f, "
      .. "worst R-hat %.4f", worst_rhat, o.B_eval, #o.T, G.diff, G.rhat)
  out("-- 4. Construction (3 layers: responsibilities, uniform average, readout softmax(beta * mean gamma))")
  out("%5s %10s %12s %12s %10s %10s %10s", "T", "best beta", "beta/(m N)", "eta*(1)", "KL constr", "KL MD1",
      "KL 1 beta")
  for i, T in ipairs(o.T) do
    out("%5d %10.4g %12.4g %12.4g %10.4f %10.4f %10.4f", T, S.best_beta:get(i), S.implied_eta:get(i),
        S.best_eta.md1:get(i), S.mean.construction:get(i), S.mean.md1:get(i), S.mean.construction_fixed:get(i))
  end
  out("beta tuned per T: KL relative to one-step MD (eta tuned per T): mean %.1f%%, max %.1f%%",
      100 * S.rel_diff_mean, 100 * S.rel_diff_max)
  out("one beta for all T (%.4g, tuned on the pooled tuning KL; = MD with eta = beta/(m N), i.e. eta ~ 1/T): "
      .. "mean %.1f%% from one-step MD", S.beta, 100 * S.rel_diff_fixed_mean)
  local s1 = os.time() - t1

  -- 2 + 3
  local t2 = os.time()
  local models = {}
  if #o.depths > 0 then
    log("section 2: training models")
    models = section_models(o, task, D, S)
  end
  if not root then return nil end
  local s2 = os.time() - t2
  out("")
  out("-- 2. Trained transformers (verdict uses the models trained with the loss on all tokens)")
  out("%-22s %7s %9s %9s %9s  %-13s %s", "model", "loss", "KL@T=" .. Tmax, "KL avg", "train s", "closest",
      "distance to: bayes md1 md2 md3 constr uniform")
  for _, r in ipairs(models) do
    out("%-22s %7.4f %9.4f %9.4f %9d  %-13s %.4f %.4f %.4f %.4f %.4f %.4f", r.name, r.final_loss, r.mean:get(#o.T),
        r.kl_avg, r.seconds, r.closest, r.dist.bayes, r.dist.md1, r.dist.md2, r.dist.md3, r.dist.construction,
        r.dist.uniform)
  end
  out(("%-22s %7s %9.4f %9s"):format("(Bayes)", "", S.mean.bayes:get(#o.T), ""))
  out(("%-22s %7s %9.4f %9s"):format("(one-step MD)", "", S.mean.md1:get(#o.T), ""))
  out("")
  out("-- 3. Mechanism: first-layer attention on lags 1..m vs gamma (mean KL over queries, %d sequences of T = %d)",
      o.B_mech, Tmax)
  out("(attn KL: KL(gamma || attention renormalised on lags 1..m), mean over queries; last q: the last query only;")
  out(" uniform: the same for uniform attention on the lags; lag mass: attention on lags 1..m before renormalising;")
  out(" ablation: KL to the truth averaged over the T grid, intact -> head zeroed (worst-matching L0 head as control);")
  out(" any layer: the best-matching head of any layer, its KL and the KL after zeroing it)")
  out("%-22s %5s %9s %9s %9s %9s  %-36s %s", "model", "head", "attn KL", "last q", "uniform", "lag mass",
      "ablation (control)", "any layer")
  for _, r in ipairs(models) do
    local a = r.attn
    out("%-22s  L0H%d %9.4f %9.4f %9.4f %9.3f  %-36s L%dH%d %.4f -> %.4f", r.name, a.best - 1, a.kl[a.best],
        a.kl_last[a.best], a.uniform_kl, a.mass[a.best],
        ("%.4f -> %.4f (%s)"):format(r.kl_avg, r.ablate_best,
          r.ablate_control and ("%.4f, L0H%d"):format(r.ablate_control, a.worst - 1) or "n/a"),
        r.any.layer, r.any.head - 1, r.any.kl, r.ablate_any)
  end

  -- output files
  local h5 = o.out .. "/mirror.h5"
  write_h5(o, h5, task, D, S, models, G)
  local figs = figures(o, S, models)

  -- verdicts
  local V = {}
  local function verdict(id, claim, paper, ours, ok)
    local function clean(x) return (x:gsub("|", "/")) end   -- "|" separates the columns
    V[#V + 1] = {id = id, claim = clean(claim), paper = clean(paper), ours = clean(ours), ok = ok}
  end
  local eta0 = 1 / (m + 1)
  local i1 = 1
  for i, T in ipairs(o.T) do if T == m + 1 then i1 = i end end
  local eb = S.best_eta.bayes_match:get(i1)
  verdict("C1", "one MD step from uniform = Bayes mean to first order",
          ("eta = 1/(m+1) = %.3f at no evidence"):format(eta0),
          ("eta closest to Bayes at T=%d (N=%d): %.3f"):format(o.T[i1], o.T[i1] - m, eb),
          math.abs(eb / eta0 - 1) <= 0.25)
  local fl = S.fit_large or S.fit
  verdict("C2", "stable (best) step sizes scale as 1/T (large T)", "slope -1",
          ("slope %.2f +- %.2f for T >= %d (%.2f for T >= %d)"):format(fl.slope, 1.96 * fl.slope_se,
            S.fit_large and 8 * m or 2 * m, S.fit.slope, 2 * m),
          math.abs(fl.slope + 1) <= 0.15)
  verdict("C6", "the 3-layer construction coincides with one-step MD", "same KL curve",
          ("beta tuned per T: KL within %.1f%% of MD (one beta: %.0f%%)"):format(100 * S.rel_diff_mean,
            100 * S.rel_diff_fixed_mean), S.rel_diff_mean <= 0.05)
  local all = {}
  for _, r in ipairs(models) do if r.spec.loss == "all" then all[#all + 1] = r end end
  if #all > 0 then
    local n_match, best_kl, best_name, n_abl = 0, math.huge, "", 0
    for _, r in ipairs(all) do
      local k = r.attn.kl[r.attn.best]
      if k <= 0.1 and k <= r.attn.uniform_kl / 3 then n_match = n_match + 1 end
      if k < best_kl then best_kl, best_name = k, r.name end
      if r.ablate_best >= 1.5 * r.kl_avg and r.ablate_best > (r.ablate_control or 0) then n_abl = n_abl + 1 end
    end
    verdict("C3", "first-layer attention approximates the responsibilities", "KL 0.0376 at T=192",
            ("%d/%d models: a head with KL <= 0.1; best %.3f (%s)"):format(n_match, #all, best_kl, best_name),
            n_match * 2 > #all)
    -- C4: the model of the construction's depth (3 layers; else the shallowest)
    -- tracks one-step MD
    local shallow = all[1]
    for _, r in ipairs(all) do
      if r.spec.arch == o.archs[1] and (shallow.spec.arch ~= o.archs[1] or r.spec.depth < shallow.spec.depth) then
        shallow = r
      end
    end
    for _, r in ipairs(all) do
      if r.spec.arch == o.archs[1] and r.spec.depth == 3 then shallow = r end
    end
    -- matched: closest to one-step MD (or its construction) and as good as it
    -- (KL to the truth averaged over T within 1.5x of one-step MD's)
    local c = shallow.closest
    local md_avg = 0
    for i = 1, #o.T do md_avg = md_avg + S.mean.md1:get(i) / #o.T end
    verdict("C4", "trained models match one-step MD (KL to the truth)", "model ~ one-step MD",
            ("%s closest to %s; KL avg %.4f vs MD %.4f"):format(shallow.name, c, shallow.kl_avg, md_avg),
            (c == "md1" or c == "construction") and shallow.kl_avg <= 1.5 * md_avg)
    -- C5: depth tracks more steps (standard arch, all tokens)
    local xs, ys, seq = {}, {}, {}
    for _, r in ipairs(all) do
      if r.spec.arch == o.archs[1] then
        xs[#xs + 1] = r.spec.depth
        ys[#ys + 1] = EST[r.closest].steps == math.huge and 99 or EST[r.closest].steps
        seq[#seq + 1] = ("L%d:%s"):format(r.spec.depth, r.closest)
      end
    end
    local rho = #xs >= 2 and spearman(xs, ys) or 0
    verdict("C5", "deeper models track multi-step MD", "more layers ~ more steps",
            ("%s rho %.2f"):format(table.concat(seq, " "), rho),
            #xs >= 3 and rho >= 0.6 and ys[#ys] >= 2)
    verdict("C7", "zeroing the responsibility head hurts prediction", "mechanism is causal",
            ("%d/%d models: KL x1.5 and above control"):format(n_abl, #all), n_abl * 2 > #all)
  end
  out("")
  out("-- Verdicts (rows: VERDICT id | claim | paper | ours | verdict; models: loss on all tokens)")
  for _, v in ipairs(V) do
    local word = v.ok and "SUPPORTED" or "NOT SUPPORTED"
    if (v.id == "C5") and #o.depths < 3 then word = "INCONCLUSIVE" end
    v.word = word
    out("VERDICT %s | %-55s | %-36s | %-52s | %s", v.id, v.claim, v.paper, v.ours, word)
  end
  out("")
  out("HDF5: %s", h5)
  for _, p in ipairs(figs) do out("figure: %s", p) end
  out("time: estimators %ds, models %ds, total %ds", s1, s2, os.time() - t_start)
  require("cli").write_text(o.out .. "/report.txt", table.concat(lines, "\n") .. "\n")
  return {verdicts = V, h5 = h5, figures = figs, S = S, models = models}
end

return M
