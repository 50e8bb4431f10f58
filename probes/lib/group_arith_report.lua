-- group_arith_report.lua (library) — the output of `mechprobe group_arith`:
-- every number into DIR/group_arith.h5 (with every evaluation item under
-- /eval, so that anyone can re-check it), the figures (accuracy bars, patching
-- heatmaps, phase curves, PCA scatter, probe accuracy by layer), and the
-- verdict table (DIR/verdicts.tsv and on stdout) comparing each claim of the
-- paper with ours: SUPPORTED / NOT SUPPORTED / INCONCLUSIVE by a stated rule
-- on 95% intervals, with n and the seeds.
--
--   local report = require "group_arith_report"
--   report.write_h5(path, o, R)       -- R = {train=, accuracy=, coverage=, copying=, identity=, probes=, phases=}
--   local figs = report.figures(o, R)
--   local S = report.stats(o, R)      -- the per-item data the verdicts use
--   local rows = report.verdicts(S [, boot]) -- S of one run, or report.merge{S1, S2, ...} over seeds
--   report.print_verdicts(rows, path [, out])   -- out: the print function (default print)
--   report.parse_verdicts(text)       -- the inverse of the printed table (tests use it)
--   report.rule_*(...)                -- each rule on its own (tests plant inputs)
local ga = require "group_arith"
local paper = require "group_arith_paper"
local M = {}

local function tensor1(list)
  local t = mp.zeros{math.max(#list, 1)}
  for i, v in ipairs(list) do t:set(v, i) end
  return t
end

local function fmt_pct(x) return x == x and ("%.1f%%"):format(100 * x) or "n/a" end

-- ---------------------------------------------------------------- HDF5

-- Every evaluation item: /eval/<population>/<distribution>_k<K>/{tokens [n, T],
-- query_pos [n] (0-based index of the final '=' whose answer is scored),
-- target [n], predicted [n] (the model's argmax), group [n] (0-based row of
-- /eval/<population>/groups), assignment [n, 10] (the token id of each element
-- of the query's group, -1 past its order)}, all int32; and
-- /eval/<population>/groups [G, 10, 10] int32, each group's multiplication
-- table over elements 0..order-1 (-1 padded; attribute "names"): the query's
-- answer in token ids is assignment[table[elem(a)][elem(b)]].
local MAXO = 10
function M.write_eval(f, o, acc)
  for _, pop in ipairs(ga.POPULATIONS) do
    local names = paper.FAMILIES[pop == "held-out" and "held_out" or pop]
    local gindex = {}
    local tables = mp.full({#names, MAXO, MAXO}, -1)
    for gi, name in ipairs(names) do
      gindex[name] = gi - 1
      local G = paper.group(name)
      for x = 0, G.order - 1 do
        for y = 0, G.order - 1 do tables:set(G.mul[x][y], gi, x + 1, y + 1) end
      end
    end
    f:write(("eval/%s/groups"):format(pop), tables, {int32 = true})
    f:set_attr(("eval/%s/groups"):format(pop), "names", table.concat(names, ","))
    for _, k in ipairs(o.k_list) do
      for _, d in ipairs(ga.DISTS) do
        local s = acc[pop][k][d]
        local n, T = s.tokens:size(1), s.tokens:size(2)
        local qpos, target, pred, grp = mp.zeros{n}, mp.zeros{n}, mp.zeros{n}, mp.zeros{n}
        local asg = mp.full({n, MAXO}, -1)
        for b, tr in ipairs(s.truth) do
          qpos:set(T - 1, b); target:set(tr.query.answer, b); pred:set(s.predicted[b], b)
          local gname = tr.groups[tr.query.group]
          grp:set(gindex[gname] or -1, b)
          for e, sym in ipairs(tr.assignment[tr.query.group]) do asg:set(sym, b, e) end
        end
        local base = ("eval/%s/%s_k%d/"):format(pop, d, k)
        f:write(base .. "tokens", s.tokens, {int32 = true})
        f:write(base .. "query_pos", qpos, {int32 = true})
        f:write(base .. "target", target, {int32 = true})
        f:write(base .. "predicted", pred, {int32 = true})
        f:write(base .. "group", grp, {int32 = true})
        f:write(base .. "assignment", asg, {int32 = true})
      end
    end
  end
end

function M.write_h5(path, o, R)
  local f <close> = mp.h5.open(path, "w")
  f:write("meta/k_list", tensor1(o.k_list))
  for _, key in ipairs{"d_model", "n_layer", "n_head", "d_mlp", "train_k", "steps", "batch", "n_eval", "k_mech", "seed"} do
    f:set_attr("meta", key, o[key])
  end
  f:set_attr("meta", "lr", o.lr)
  f:set_attr("meta", "mode", o.mode)
  f:set_attr("meta", "eval_groups", o.eval_groups)
  f:set_attr("meta", "k_patch", o.k_patch)
  f:set_attr("meta", "rules", table.concat(ga.RULES, ","))
  f:set_attr("/", "format", "mechprobe.group_arith")
  f:set_attr("/", "version", 2)
  -- 1. training
  local tr = R.train
  if tr and tr.loss then
    f:write("train/loss", tensor1(tr.loss))
    f:write("train/step", tensor1(tr.step))
    if tr.pool and #tr.pool == #tr.step then f:write("train/pool", tensor1(tr.pool)) end
    if tr.pool_share and #tr.pool_share == #tr.step then f:write("train/pool_share", tensor1(tr.pool_share)) end
    if tr.k and #tr.k == #tr.step then f:write("train/k", tensor1(tr.k)) end
    local cs = {}
    for i, c in ipairs(tr.checkpoints) do cs[i] = c.step end
    f:write("train/checkpoint_steps", tensor1(cs))
    f:set_attr("train", "seconds", tr.seconds)
    f:set_attr("train", "tokens_per_s", tr.tokens_per_s)
    f:set_attr("train", "final_loss", tr.final_loss)
    f:set_attr("train", "model", tr.model)
  end
  -- 2. accuracy per population: accuracy/<population>/{acc,lo,hi,p_answer} [k, distribution]
  for _, pop in ipairs(ga.POPULATIONS) do
    local A = R.accuracy[pop]
    for _, field in ipairs{"acc", "lo", "hi", "p_answer"} do
      local t = mp.zeros{#o.k_list, #ga.DISTS}
      for ki, k in ipairs(o.k_list) do
        for di, d in ipairs(ga.DISTS) do t:set(A[k][d][field], ki, di) end
      end
      f:write(("accuracy/%s/%s"):format(pop, field), t)
    end
    f:set_attr("accuracy/" .. pop, "columns", table.concat(ga.DISTS, ","))
  end
  f:set_attr("accuracy", "n", o.n_eval)
  M.write_eval(f, o, R.accuracy)
  -- 3. coverage
  local cum, accs, by = mp.zeros{#o.k_list, #ga.RULES}, mp.zeros{#o.k_list}, mp.zeros{#o.k_list, #ga.RULES + 1}
  for ki, k in ipairs(o.k_list) do
    local c = R.coverage[k]
    for ri = 1, #ga.RULES do cum:set(c.cumulative[ri], ki, ri) end
    for ri = 1, #ga.RULES + 1 do by:set(c.accuracy_by_first_rule[ri], ki, ri) end
    accs:set(c.accuracy, ki)
  end
  f:write("coverage/cumulative", cum)
  f:write("coverage/model_accuracy", accs)
  f:write("coverage/accuracy_by_first_rule", by)
  f:set_attr("coverage", "columns", table.concat(ga.RULES, ",") .. ",none")
  -- 4. copying head: both patching designs, then the ablation of our design's top head
  local C = R.copying
  for _, design in ipairs{"paper", "ours"} do
    local D = C[design]
    f:write(("copying/%s/ie_exact"):format(design), D.exact.ie)
    f:write(("copying/%s/ie_commuted"):format(design), D.commuted.ie)
    f:write(("copying/%s/top_head"):format(design), tensor1{D.top.l, D.top.h, D.top.value, D.top_commuted_ie})
    f:set_attr("copying/" .. design, "k", D.exact.k)
    f:set_attr("copying/" .. design, "n", D.exact.n)
    f:set_attr("copying/" .. design, "p_source_exact", D.exact.p_clean)
    f:set_attr("copying/" .. design, "p_base_exact", D.exact.p_corrupt)
    f:set_attr("copying/" .. design, "p_source_commuted", D.commuted.p_clean)
    f:set_attr("copying/" .. design, "p_base_commuted", D.commuted.p_corrupt)
  end
  f:set_attr("copying/paper", "design", "source: a copy (commuted copy) sequence; base: an unrelated sequence with no copy "
    .. "possible, another query and answer; IE = P(source answer | base with the head's hook_z at the final '=' from the source) - P(source answer | base)")
  f:set_attr("copying/ours", "design", "source: a copy sequence; base: the same sequence with the copied facts' answers "
    .. "corrupted; IE = P(answer | patched) - P(answer | corrupted)")
  local drop, abl = mp.zeros{#ga.RULES}, mp.zeros{#ga.RULES}
  for ri, r in ipairs(ga.RULES) do drop:set(C.drop[r], ri); abl:set(C.ablated[r], ri) end
  f:write("copying/ablation_drop", drop)
  f:write("copying/ablated_accuracy", abl)
  f:set_attr("copying", "self_patch_max_diff", C.self_patch_diff)
  f:set_attr("copying", "ablation", "mean ablation of hook_z of our design's top exact-copy head")
  -- 5. identity
  local I = R.identity
  f:write("identity/dla_query", I.dla_query)
  f:write("identity/dla_identity", I.dla_identity)
  f:write("identity/dla_other", I.dla_other)
  f:write("identity/pc1", tensor1(I.pc1))
  f:write("identity/pc2", tensor1(I.pc2))
  f:write("identity/is_identity", tensor1(I.labels))
  f:write("identity/pc_ratio", I.pc_ratio)
  f:set_attr("identity", "pc1_separation", I.pc1_separation)
  f:write("identity/promote_head", tensor1{I.promote.l, I.promote.h, I.promote.value})
  f:write("identity/suppress_head", tensor1{I.suppress.l, I.suppress.h, I.suppress.value})
  -- 6. probes
  for _, prop in ipairs{"in_group", "answered"} do
    f:write("probes/" .. prop .. "_balanced_accuracy", R.probes[prop].balanced_accuracy)
    f:write("probes/" .. prop .. "_majority", R.probes[prop].majority)
  end
  f:set_attr("probes", "layers", "0 = hook_embed, l = blocks.(l-1).hook_resid_post")
  f:set_attr("probes", "n_train", R.probes.n_train)
  f:set_attr("probes", "n_test", R.probes.n_test)
  -- 7. phases
  local P = R.phases
  if P then
    f:write("phases/step", tensor1(P.steps))
    local cur = mp.zeros{#ga.PHASE_SKILLS, math.max(#P.steps, 1)}
    local cross = mp.zeros{#ga.PHASE_SKILLS}
    for si, s in ipairs(ga.PHASE_SKILLS) do
      for ci, v in ipairs(P.curves[s]) do cur:set(v, si, ci) end
      cross:set(P.crossing[s] or -1, si)
    end
    f:write("phases/accuracy", cur)
    f:write("phases/crossing_step", cross)
    f:set_attr("phases", "skills", table.concat(ga.PHASE_SKILLS, ","))
    f:set_attr("phases", "threshold", P.threshold)
  end
end

-- ---------------------------------------------------------------- figures

function M.figures(o, R)
  local figs = {}
  local function save(fig, name)
    local path = ("%s/%s.%s"):format(o.out, name, o.format)
    fig:save(path)
    fig:close()
    figs[#figs + 1] = path
    return path
  end
  do -- accuracy per distribution: one panel per population and k
    local np = #ga.POPULATIONS
    local fig = mp.plot.figure{rows = np, cols = #o.k_list, width = 520 * #o.k_list, height = 300 * np,
      title = "Accuracy on the final query (95% bootstrap interval); cancel, associate: the paper's constructions"}
    for pi, pop in ipairs(ga.POPULATIONS) do
      for ki, k in ipairs(o.k_list) do
        local v, e, labels = {}, {}, {}
        for di, d in ipairs(ga.DISTS) do
          local a = R.accuracy[pop][k][d]
          v[di], e[di] = a.acc, (a.hi - a.lo) / 2
          labels[di] = d:gsub("_natural", " (nat.)")
        end
        fig:axes(pi, ki):bars(labels, {v}, {labels = {("k = %d"):format(k)}, err = {e}})
          :set{title = ("%s groups, k = %d facts"):format(pop, k), ylabel = "accuracy", ylim = {0, 1}}
      end
    end
    save(fig, "accuracy")
  end
  do -- coverage against accuracy
    local fig = mp.plot.figure{width = 420, height = 300}
    local ax = fig:axes(1, 1)
    for _, k in ipairs(o.k_list) do
      ax:line(nil, R.coverage[k].cumulative, {label = ("solvers, k = %d"):format(k), marker = true})
      local flat = {}
      for i = 1, #ga.RULES do flat[i] = R.coverage[k].accuracy end
      ax:line(nil, flat, {label = ("model, k = %d"):format(k), dashed = true})
    end
    ax:set{title = "Cumulative solver coverage (1 copy .. 5 associate) vs model", xlabel = "solvers applied",
      ylabel = "share of queries", ylim = {0, 1}}
    ax:legend()
    save(fig, "coverage")
  end
  do -- patching heatmaps: the paper's design (unrelated base) and ours (corrupted copy)
    local C = R.copying
    local H = C.paper.exact.ie:size(2)
    local fig = mp.plot.figure{rows = 2, cols = 2, width = math.max(560, 2 * (120 + 45 * H)),
      height = 2 * (110 + 40 * C.paper.exact.ie:size(1)),
      title = "Patching hook_z per head at the final '=': IE = P(c | patched base) - P(c | base)"}
    for di, design in ipairs{"paper", "ours"} do
      local D = C[design]
      local base = design == "paper" and "unrelated base" or "corrupted copy"
      fig:axes(di, 1):heatmap(D.exact.ie, {cmap = "rdbu_r", vmin = -1, vmax = 1, colorbar_label = "IE"})
        :set{title = ("exact copies, %s, k = %d"):format(base, D.exact.k), xlabel = "head", ylabel = "layer"}
      fig:axes(di, 2):heatmap(D.commuted.ie, {cmap = "rdbu_r", vmin = -1, vmax = 1, colorbar_label = "IE"})
        :set{title = ("commuted copies, %s, k = %d"):format(base, D.commuted.k), xlabel = "head", ylabel = "layer"}
    end
    save(fig, "patching")
  end
  do -- direct logit attribution
    local I = R.identity
    local H = I.dla_query:size(2)
    local fig = mp.plot.figure{rows = 1, cols = 2, width = math.max(560, 2 * (120 + 45 * H)), height = 110 + 40 * I.dla_query:size(1),
      title = "Direct logit attribution per head, identity queries"}
    local lim = 1e-6
    for _, t in ipairs{I.dla_query, I.dla_identity} do lim = math.max(lim, math.abs(t:max()), math.abs(t:min())) end
    fig:axes(1, 1):heatmap(I.dla_query, {cmap = "rdbu_r", vmin = -lim, vmax = lim, colorbar_label = "logit"})
      :set{title = "query variables a, b", xlabel = "head", ylabel = "layer"}
    fig:axes(1, 2):heatmap(I.dla_identity, {cmap = "rdbu_r", vmin = -lim, vmax = lim, colorbar_label = "logit"})
      :set{title = "identity e", xlabel = "head", ylabel = "layer"}
    save(fig, "identity_dla")
  end
  do -- PCA scatter
    local I = R.identity
    -- "PC1 (43%)": the component's share of the variance, when the run recorded it
    local function pc_label(k, ratio)
      local ok, r = pcall(function() return ratio:get(k) end)
      return ok and r and ("PC%d (%.0f%%)"):format(k, 100 * r) or ("PC" .. k)
    end
    local cat = {}
    for i, v in ipairs(I.labels) do cat[i] = v == 1 and "identity query" or "other query" end
    local fig = mp.plot.figure{width = 420, height = 340}
    fig:axes(1, 1):scatter(I.pc1, I.pc2, {category = cat, size = 4, alpha = 0.7})
      :set{title = ("Last layer attention output (final '='): PC1 separates %s"):format(fmt_pct(I.pc1_separation)),
           xlabel = pc_label(1, I.pc_ratio), ylabel = pc_label(2, I.pc_ratio)}
    fig:axes(1, 1):legend()
    save(fig, "identity_pca")
  end
  do -- probe accuracy by layer
    local P = R.probes
    local x = {}
    for l = 1, P.layers do x[l] = l - 1 end
    local fig = mp.plot.figure{width = 420, height = 300}
    local ax = fig:axes(1, 1)
    ax:line(x, P.in_group.balanced_accuracy, {label = "symbol in the query's group (closure)", marker = true})
    ax:line(x, P.answered.balanced_accuracy, {label = "symbol answered in a shared-slot fact (cancel)", marker = true})
    local half = {}
    for l = 1, P.layers do half[l] = 0.5 end
    ax:line(x, half, {label = "chance", dashed = true})
    ax:set{title = "Linear probes on the residual stream at the final '='", xlabel = "layer (0 = embeddings)",
      ylabel = "held-out balanced accuracy", ylim = {0.3, 1}}
    ax:legend()
    save(fig, "probes")
  end
  if R.phases and #R.phases.steps > 1 then -- phases
    local P = R.phases
    local fig = mp.plot.figure{width = 480, height = 320}
    local ax = fig:axes(1, 1)
    local x = {}
    for i, s in ipairs(P.steps) do x[i] = math.max(s, 1) end
    for _, s in ipairs(ga.PHASE_SKILLS) do ax:line(x, P.curves[s], {label = s, marker = true}) end
    ax:set{title = "Skills against training step (checkpoints)", xlabel = "training step (0 drawn at 1)", ylabel = "accuracy",
      ylim = {0, 1}, xlog = true}
    ax:legend()
    save(fig, "phases")
  end
  return figs
end

-- ---------------------------------------------------------------- verdicts

-- ---------------------------------------------------------------- statistics

M.SUP, M.NOT, M.INC = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
M.BOOT = 2000

local function mean(t)
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return #t > 0 and s / #t or 0 / 0
end

-- Percentile bootstrap 95% interval of f(means of the lists), each list
-- resampled on its own (lists of paired values are given as one list of
-- differences). Returns estimate, lo, hi.
function M.boot(lists, f, B, seed)
  f = f or function(m) return m[1] end
  B = B or M.BOOT
  local rng = paper.rng(seed or 17)
  local means = {}
  for i, l in ipairs(lists) do means[i] = mean(l) end
  local est = f(means)
  for _, l in ipairs(lists) do if #l == 0 then return est, 0 / 0, 0 / 0 end end
  local vals = {}
  for r = 1, B do
    local m = {}
    for i, l in ipairs(lists) do
      local s, n = 0, #l
      for _ = 1, n do s = s + l[rng(n)] end
      m[i] = s / n
    end
    vals[r] = f(m)
  end
  table.sort(vals)
  return est, vals[math.max(1, math.floor(0.025 * B + 0.5))], vals[math.min(B, math.floor(0.975 * B + 0.5))]
end

-- Normal-approximation 95% interval of a proportion p measured on n items.
local function prop_ci(p, n)
  if n <= 0 or p ~= p then return 0 / 0, 0 / 0 end
  local h = 1.96 * math.sqrt(math.max(p * (1 - p), 0.25 / n) / n)
  return math.max(0, p - h), math.min(1, p + h)
end

local function pct(x) return x == x and ("%.1f%%"):format(100 * x) or "n/a" end
local function ci_pct(e, lo, hi) return ("%s [%s, %s]"):format(pct(e), pct(lo), pct(hi)) end
local function ci_num(e, lo, hi) return ("%+.2f [%+.2f, %+.2f]"):format(e, lo, hi) end

-- ---------------------------------------------------------------- preconditions
-- The project's rule: a row is INCONCLUSIVE when the claim's precondition is
-- absent (or not established) or when its interval straddles the threshold.
-- Each rule below checks its precondition first, from its own arguments, and
-- says which one failed in its text.

-- "The model has the skill": its accuracy interval's low end >= 50%, above
-- the chance 1/|G| of every training group (at most 1/3, C3) and about three
-- times their mean (17%). A model below this does not do what the mechanism
-- rows explain, so they have nothing to test.
M.SOLVED = 0.5
-- "A copying head exists": the head's exact-copy IE interval low end >= 0.1.
M.HEAD_FLOOR = 0.1

-- Precondition "solved": ok, text.
function M.pre_solved(items, what, boot, seed)
  local e, lo, hi = M.boot({items}, nil, boot, seed)
  return lo >= M.SOLVED, ("%s %s"):format(what, ci_pct(e, lo, hi))
end

-- Precondition "a copying head exists": ok, text.
function M.pre_head(ie, boot, seed)
  local e, lo, hi = M.boot({ie}, nil, boot, seed)
  return lo >= M.HEAD_FLOOR, ("top head exact-copy IE %s"):format(ci_num(e, lo, hi))
end

local function absent(why, text)
  return M.INC, ("precondition not met (%s): %s"):format(text, why)
end

-- ---------------------------------------------------------------- rules
-- Each rule returns verdict, text (our numbers with their intervals).

-- "Reaches at least x": SUPPORTED when the interval's lower end is >= x, NOT
-- SUPPORTED when its upper end is below x, else INCONCLUSIVE. Precondition:
-- none (an accuracy row measures the skill itself).
function M.rule_at_least(items, x, boot, seed)
  local e, lo, hi = M.boot({items}, nil, boot, seed)
  local v = lo >= x and M.SUP or hi < x and M.NOT or M.INC
  return v, ci_pct(e, lo, hi)
end

-- Generalisation to held-out groups: their accuracy reaches x. Precondition:
-- the model solves the training families (train_items: natural queries on
-- them, "solved"); a model that has not learned the task has nothing to
-- generalise, and its low held-out accuracy says nothing about generalising.
function M.rule_held_out(items, train_items, x, boot, seed)
  local ok, pre = M.pre_solved(train_items, "training families", boot, (seed or 17) + 50)
  if not ok then return absent("the model does not solve the training families", pre) end
  local v, t = M.rule_at_least(items, x, boot, seed)
  return v, t .. "; " .. pre
end

-- Associativity is the hardest distribution: associate above chance (its
-- interval above the mean chance 1/|G| of its items) and every other
-- distribution above associate (the interval of each difference above 0).
-- NOT SUPPORTED when associate's interval lies at or below chance or some
-- other distribution's difference lies below 0. Precondition: copy, commute,
-- identity and cancel are each learned at all (interval low end above
-- chance): the claim orders difficulties, and skills that all sit at the
-- floor have no order to compare.
function M.rule_hardest(acc, chance, boot, seed)
  local ch = mean(chance)
  local below = {}
  for i, d in ipairs{"copy", "commute", "identity", "cancel"} do
    local e, lo, hi = M.boot({acc[d]}, nil, boot, (seed or 17) + 10 + i)
    if not (lo > ch) then below[#below + 1] = ("%s %s"):format(d, ci_pct(e, lo, hi)) end
  end
  if #below > 0 then
    return absent("not every other distribution is learned, so there is no order of difficulty to test",
      ("%s not above chance %s"):format(table.concat(below, ", "), pct(ch)))
  end
  local e, lo, hi = M.boot({acc.associate}, nil, boot, seed)
  local sup, no = lo > ch, hi <= ch
  local parts = {("associate %s vs chance %s"):format(ci_pct(e, lo, hi), pct(ch))}
  for i, d in ipairs{"copy", "commute", "identity", "cancel"} do
    local de, dlo, dhi = M.boot({acc[d], acc.associate}, function(m) return m[1] - m[2] end, boot, (seed or 17) + i)
    sup = sup and dlo > 0
    no = no or dhi < 0
    parts[#parts + 1] = ("%s-assoc %+.1f [%+.1f, %+.1f]"):format(d, 100 * de, 100 * dlo, 100 * dhi)
  end
  return no and M.NOT or sup and M.SUP or M.INC, table.concat(parts, "; ")
end

-- One dedicated copying head: the top head's IE >= 0.5 and every other head's
-- < 0.15 (the second-largest's interval decides for all the others).
-- Precondition: the model copies (copy: its copy accuracy per item, "solved");
-- a model that copies through many heads, none dedicated, is NOT SUPPORTED.
function M.rule_dedicated(top, second, copy, boot, seed)
  local ok, pre = M.pre_solved(copy, "copy accuracy", boot, (seed or 17) + 50)
  if not ok then return absent("the model does not copy, no copying head to test", pre) end
  local e1, lo1, hi1 = M.boot({top}, nil, boot, seed)
  local e2, lo2, hi2 = M.boot({second}, nil, boot, (seed or 17) + 1)
  local v = (lo1 >= 0.5 and hi2 < 0.15) and M.SUP or (hi1 < 0.5 or lo2 >= 0.15) and M.NOT or M.INC
  return v, ("top %s, next %s; %s"):format(ci_num(e1, lo1, hi1), ci_num(e2, lo2, hi2), pre)
end

-- The copying head also serves commuted copies: its IE on commuted copies is at
-- least half its IE on exact copies (the paper: 0.48 of 0.91), i.e. the
-- interval of IE_commuted - IE_exact / 2 is above 0 (SUPPORTED) or below 0 (NOT
-- SUPPORTED). Precondition: the head is a copying head (its exact IE interval's
-- low end >= 0.1).
function M.rule_commuted(exact, commuted, boot, seed)
  local ok, pre = M.pre_head(exact, boot, seed)
  if not ok then return absent("no copying head to test", pre) end
  local ee, elo, ehi = M.boot({exact}, nil, boot, seed)
  local ce, clo, chi = M.boot({commuted}, nil, boot, (seed or 17) + 1)
  local de, dlo, dhi = M.boot({commuted, exact}, function(m) return m[1] - 0.5 * m[2] end, boot, (seed or 17) + 2)
  local v = dhi < 0 and M.NOT or dlo > 0 and M.SUP or M.INC
  return v, ("exact %s, commuted %s, commuted - exact/2 %s"):format(ci_num(ee, elo, ehi), ci_num(ce, clo, chi),
    ci_num(de, dlo, dhi))
end

-- Ablating the copying head hurts copying: copy drops >= 20 points while
-- identity, cancel and associate drop < 10 points each (commute is not judged:
-- a head that also serves commuted copies, as the paper's does, may hurt it).
-- drops: per-item paired differences (clean - ablated, 0/1) per distribution.
-- Preconditions: the model copies (copy: clean copy accuracy per item,
-- "solved"; a 20-point drop needs copying to drop from) and the ablated head
-- is a copying head (head_ie: its exact-copy IE per item, low end >= 0.1).
function M.rule_ablation(drops, copy, head_ie, boot, seed)
  local ok, pre = M.pre_solved(copy, "copy accuracy", boot, (seed or 17) + 50)
  if not ok then return absent("the model does not copy, no copying head to test", pre) end
  local ok2, pre2 = M.pre_head(head_ie, boot, (seed or 17) + 51)
  if not ok2 then return absent("no copying head to test", pre2) end
  local ce, clo, chi = M.boot({drops.copy}, nil, boot, seed)
  local sup, no = clo >= 0.2, chi < 0.2
  local parts = {("drop: copy %s"):format(ci_pct(ce, clo, chi))}
  for i, d in ipairs{"identity", "cancel", "associate"} do
    local e, lo, hi = M.boot({drops[d]}, nil, boot, (seed or 17) + i)
    sup = sup and hi < 0.1
    no = no or lo >= 0.1
    parts[#parts + 1] = ("%s %s"):format(d, ci_pct(e, lo, hi))
  end
  if drops.commute then
    local e, lo, hi = M.boot({drops.commute}, nil, boot, (seed or 17) + 9)
    parts[#parts + 1] = ("(commute %s, not judged)"):format(ci_pct(e, lo, hi))
  end
  return no and M.NOT or sup and M.SUP or M.INC, table.concat(parts, ", ")
end

-- Identity recognition, selective as in the paper: the promoting head raises
-- the query variables (> 0) and more than the identity; the suppressing head
-- lowers the identity (< 0) and more than the query variables; two heads.
-- I: per-item lists promote_q, promote_e, suppress_q, suppress_e; same_head.
-- Precondition: the model solves identity facts (ident: identity accuracy per
-- item, "solved"); without it there is no identity mechanism to find.
function M.rule_identity(I, ident, boot, seed)
  local ok, pre = M.pre_solved(ident, "identity accuracy", boot, (seed or 17) + 50)
  if not ok then return absent("the model does not solve identity facts, no identity mechanism to test", pre) end
  local function diff(x, y) local d = {} for i = 1, #x do d[i] = x[i] - y[i] end return d end
  local qe, qlo, qhi = M.boot({I.promote_q}, nil, boot, seed)
  local de, dlo, dhi = M.boot({diff(I.promote_q, I.promote_e)}, nil, boot, (seed or 17) + 1)
  local ee, elo, ehi = M.boot({I.suppress_e}, nil, boot, (seed or 17) + 2)
  local se, slo, shi = M.boot({diff(I.suppress_q, I.suppress_e)}, nil, boot, (seed or 17) + 3)
  local v
  if I.same_head or qhi <= 0 or dhi <= 0 or elo >= 0 or shi <= 0 then v = M.NOT
  elseif qlo > 0 and dlo > 0 and ehi < 0 and slo > 0 then v = M.SUP
  else v = M.INC end
  return v, ("%spromoter a,b %s (minus e %s); suppressor e %s (a,b minus e %s)"):format(
    I.heads and (I.heads .. ": ") or "", ci_num(qe, qlo, qhi), ci_num(de, dlo, dhi), ci_num(ee, elo, ehi),
    ci_num(se, slo, shi))
end

-- A proportion p measured on n items reaches x (normal-approximation interval).
-- Precondition: none (the probe rows use it: group membership and answered
-- symbols are properties of the context, and the claim is that the residual
-- stream carries them, whether or not the model solves the task).
function M.rule_prop(p, n, x)
  local lo, hi = prop_ci(p, n)
  return lo >= x and M.SUP or hi < x and M.NOT or M.INC, ci_pct(p, lo, hi)
end

-- PC1 of the last attention output separates identity facts: rule_prop at x.
-- Precondition: the model solves identity facts (ident, "solved"): the
-- separation is the output of the identity mechanism.
function M.rule_pc1(p, n, x, ident, boot, seed)
  local ok, pre = M.pre_solved(ident, "identity accuracy", boot, (seed or 17) + 50)
  if not ok then return absent("the model does not solve identity facts, no identity mechanism to test", pre) end
  local v, t = M.rule_prop(p, n, x)
  return v, t .. "; " .. pre
end

-- Phases in the paper's order: structure <= closure <= copy <= identity, cancel
-- <= associate (first checkpoint at >= threshold). NOT SUPPORTED when two skills
-- that both crossed did so out of order, SUPPORTED when all crossed in order,
-- else (some never crossed) INCONCLUSIVE. crossing: skill -> step or nil.
-- Precondition: the skills are learned (a skill that never crosses has no
-- step to order), which the INCONCLUSIVE case above is.
M.PHASE_ORDER = {{"structure", "closure"}, {"closure", "copy"}, {"copy", "identity"}, {"copy", "cancel"},
                 {"identity", "associate"}, {"cancel", "associate"}}
function M.rule_phases(crossing)
  local all, bad = true, {}
  for _, p in ipairs(M.PHASE_ORDER) do
    local a, b = crossing[p[1]], crossing[p[2]]
    if a and b then
      if a > b then bad[#bad + 1] = p[2] .. " before " .. p[1] end
    else
      all = false
    end
  end
  for _, s in ipairs(ga.PHASE_SKILLS) do if not crossing[s] then all = false end end
  local v = #bad > 0 and M.NOT or all and M.SUP or M.INC
  return v, #bad > 0 and table.concat(bad, ", ") or nil
end

-- Accuracy keeps up with the copy..cancel solvers on natural queries: the
-- per-item model-minus-solvers difference has its interval's low end >= -5
-- points (SUPPORTED) or its high end < -5 (NOT SUPPORTED). Precondition: none
-- (it compares the model with what the solvers answer on the same items; a
-- model that has learned nothing genuinely does not keep up).
function M.rule_keeps_up(diff, model, cov4, boot, seed)
  local e, lo, hi = M.boot({diff}, nil, boot, seed)
  local v = lo >= -0.05 and M.SUP or hi < -0.05 and M.NOT or M.INC
  return v, ("model %s, solvers %s, difference %+.1f [%+.1f, %+.1f] points"):format(pct(mean(model)),
    pct(mean(cov4)), 100 * e, 100 * lo, 100 * hi)
end

-- ---------------------------------------------------------------- per-item statistics

-- The per-item data the verdicts read, from one run's results R.
function M.stats(o, R)
  local S = {seeds = {o.seed}, k_list = o.k_list, k_mech = o.k_mech, k_patch = o.k_patch, pop = o.eval_groups,
             acc = {}, chance = {}}
  for _, pop in ipairs(ga.POPULATIONS) do
    S.acc[pop], S.chance[pop] = {}, {}
    for _, k in ipairs(o.k_list) do
      S.acc[pop][k], S.chance[pop][k] = {}, {}
      for _, d in ipairs(ga.DISTS) do
        S.acc[pop][k][d] = R.accuracy[pop][k][d].correct
        S.chance[pop][k][d] = R.accuracy[pop][k][d].chance
      end
    end
  end
  S.cov = {}
  for _, k in ipairs(o.k_list) do
    local c, d = R.coverage[k], {}
    for b = 1, #c.items_correct do d[b] = c.items_correct[b] - c.items_cov4[b] end
    S.cov[k] = {diff = d, model = c.items_correct, cov4 = c.items_cov4}
  end
  local C = R.copying
  S.patch = {}
  for _, design in ipairs{"paper", "ours"} do
    local D = C[design]
    S.patch[design] = {top = D.exact.items[D.top.l][D.top.h], second = D.exact.items[D.second.l][D.second.h],
                       commuted = D.commuted.items[D.top.l][D.top.h],
                       heads = {("L%dH%d"):format(D.top.l, D.top.h)}, k = D.exact.k}
  end
  S.drops, S.ablated_head = C.drop_items, {("L%dH%d"):format(C.top.l, C.top.h)}
  local I = R.identity
  S.ident = {promote_q = I.items.promote_q, promote_e = I.items.promote_e, suppress_q = I.items.suppress_q,
             suppress_e = I.items.suppress_e, same_head = I.promote.l == I.suppress.l and I.promote.h == I.suppress.h,
             heads = ("L%dH%d/L%dH%d"):format(I.promote.l, I.promote.h, I.suppress.l, I.suppress.h)}
  S.pc1 = {{v = I.pc1_separation, n = #I.labels}}
  S.probes = {in_group = {{v = R.probes.in_group.best, n = R.probes.n_test}},
              answered = {{v = R.probes.answered.best, n = R.probes.n_test}}}
  S.phases = R.phases and #R.phases.steps > 1 and {R.phases.crossing} or {}
  return S
end

-- The statistics of several runs (seeds) pooled: per-item lists concatenated
-- (head lists are each run's own top heads), proportions weighted by n.
function M.merge(list)
  if #list == 1 then return list[1] end
  local function cat(get)
    local out = {}
    for _, S in ipairs(list) do for _, v in ipairs(get(S)) do out[#out + 1] = v end end
    return out
  end
  local S1 = list[1]
  local S = {seeds = cat(function(S) return S.seeds end), k_list = S1.k_list, k_mech = S1.k_mech, k_patch = S1.k_patch,
             pop = S1.pop, acc = {}, chance = {}, cov = {}, patch = {}}
  for pop in pairs(S1.acc) do
    S.acc[pop], S.chance[pop] = {}, {}
    for k in pairs(S1.acc[pop]) do
      S.acc[pop][k], S.chance[pop][k] = {}, {}
      for d in pairs(S1.acc[pop][k]) do
        S.acc[pop][k][d] = cat(function(x) return x.acc[pop][k][d] end)
        S.chance[pop][k][d] = cat(function(x) return x.chance[pop][k][d] end)
      end
    end
  end
  for k in pairs(S1.cov) do
    S.cov[k] = {diff = cat(function(x) return x.cov[k].diff end), model = cat(function(x) return x.cov[k].model end),
                cov4 = cat(function(x) return x.cov[k].cov4 end)}
  end
  for design in pairs(S1.patch) do
    S.patch[design] = {k = S1.patch[design].k}
    for _, f in ipairs{"top", "second", "commuted", "heads"} do
      S.patch[design][f] = cat(function(x) return x.patch[design][f] end)
    end
  end
  S.drops = {}
  for d in pairs(S1.drops) do S.drops[d] = cat(function(x) return x.drops[d] end) end
  S.ablated_head = cat(function(x) return x.ablated_head end)
  S.ident = {same_head = false}
  local heads = {}
  for _, x in ipairs(list) do
    S.ident.same_head = S.ident.same_head or x.ident.same_head
    heads[#heads + 1] = x.ident.heads
  end
  S.ident.heads = table.concat(heads, ",")
  for _, f in ipairs{"promote_q", "promote_e", "suppress_q", "suppress_e"} do
    S.ident[f] = cat(function(x) return x.ident[f] end)
  end
  S.pc1 = cat(function(x) return x.pc1 end)
  S.probes = {in_group = cat(function(x) return x.probes.in_group end),
              answered = cat(function(x) return x.probes.answered end)}
  S.phases = cat(function(x) return x.phases end)
  return S
end

local function pooled(list)
  local s, n = 0, 0
  for _, x in ipairs(list) do s, n = s + x.v * x.n, n + x.n end
  return n > 0 and s / n or 0 / 0, n
end

-- ---------------------------------------------------------------- verdicts

-- Figure 3c of the paper (Todd et al., arXiv 2512.16902; values as quoted in
-- issue 16): accuracy by distribution at k = 50 and k = 100.
M.PAPER_ACC = {[50] = {copy = 1.00, commute = 1.00, identity = 1.00, cancel = 0.96, associate = 0.55},
               [100] = {copy = 1.00, commute = 0.99, identity = 1.00, cancel = 0.90, associate = 0.50}}

-- The verdict rows of statistics S (one run, or M.merge of several):
-- {claim, rule, paper, ours, n, seeds, verdict}.
function M.verdicts(S, boot)
  local rows = {}
  local seeds = table.concat(S.seeds, ",")
  local function add(claim, rule, paperv, ours, n, verdict)
    rows[#rows + 1] = {claim = claim, rule = rule, paper = paperv, ours = ours, n = tostring(n), seeds = seeds,
                       verdict = verdict}
  end
  local P = S.pop
  local kk = S.k_list[#S.k_list]
  -- copy accuracy for the copying-head preconditions: at the patching k when it
  -- is measured, else at k_mech (--preset gpu patches at k = 200)
  local function copy_k(k) return S.acc[P][k] and k or S.k_mech end
  local function copy_items(k) return S.acc[P][copy_k(k)].copy end
  do
    local items = S.acc["held-out"][kk].natural
    local v, t = M.rule_held_out(items, S.acc.training[kk].natural, 0.9, boot, 1)
    add(("generalises to held-out groups Q8, C2xC4, C2xC2xC2 (natural queries, k=%d)"):format(kk),
        "precondition: the model solves the training families (natural queries there: interval low end >= 50%), else INCONCLUSIVE; "
        .. "SUPPORTED if the 95% interval's low end >= 90%, NOT SUPPORTED if its high end < 90%", "near-perfect",
        t, #items, v)
  end
  for _, k in ipairs(S.k_list) do
    local pa = M.PAPER_ACC[k]
    if pa then
      for _, d in ipairs(ga.RULES) do
        local items = S.acc[P][k][d]
        local v, t = M.rule_at_least(items, pa[d] - 0.05, boot, 2)
        add(("%s accuracy, %s families, k=%d%s"):format(d, P, k, ga.CONSTRUCTED[d] and " (paper's construction)" or ""),
            "precondition: none; SUPPORTED if the interval's low end >= paper - 5 points, NOT SUPPORTED if its high end < paper - 5 points",
            pct(pa[d]), t, #items, v)
      end
      for _, d in ipairs{"cancel", "associate"} do
        local items = S.acc[P][k][d .. "_natural"]
        local v, t = M.rule_at_least(items, pa[d] - 0.05, boot, 3)
        add(("%s accuracy, %s families, k=%d, natural contexts filtered by our solver (our design, not the paper's)"):format(d, P, k),
            "precondition: none; as above, against the paper's figure for its own construction", pct(pa[d]), t, #items, v)
      end
    end
  end
  do
    local A = S.acc[P][kk]
    local v, t = M.rule_hardest({copy = A.copy, commute = A.commute, identity = A.identity, cancel = A.cancel,
                                 associate = A.associate}, S.chance[P][kk].associate, boot, 4)
    add(("associativity is the hardest distribution, k=%d"):format(kk),
        "precondition: copy, commute, identity, cancel each learned at all (interval low end above chance 1/|G|), else INCONCLUSIVE; "
        .. "SUPPORTED if associate's interval is above chance 1/|G| and each other distribution minus associate is above 0; "
        .. "NOT SUPPORTED if associate's is at or below chance or a difference is below 0", pct((M.PAPER_ACC[kk] or
        M.PAPER_ACC[100]).associate) .. " (lowest)", t, #A.associate, v)
  end
  do
    local c = S.cov[kk]
    local v, t = M.rule_keeps_up(c.diff, c.model, c.cov4, boot, 5)
    add(("accuracy keeps up with the copy..cancel solvers, natural queries, k=%d"):format(kk),
        "precondition: none; model accuracy minus the share copy..cancel answer: SUPPORTED if the interval's low end >= -5 points, NOT SUPPORTED if its high end < -5",
        "accuracy tracks the solvers", t, #c.diff, v)
  end
  for _, design in ipairs{"paper", "ours"} do
    local D = S.patch[design]
    local what = design == "paper" and "the paper's design: unrelated base with no copy" or "our design: corrupted copy in the same context"
    local v, t = M.rule_dedicated(D.top, D.second, copy_items(D.k), boot, 6)
    add(("one dedicated copying head (%s, k=%d)"):format(what, D.k),
        ("precondition: the model copies (copy accuracy, k=%d: interval low end >= 50%%), else INCONCLUSIVE; "):format(copy_k(D.k))
        .. "SUPPORTED if the top head's IE interval low end >= 0.5 and the next head's high end < 0.15; NOT SUPPORTED if the top's high end < 0.5 or the next's low end >= 0.15",
        "0.91, others < 0.08", table.concat(D.heads, ",") .. " " .. t, #D.top, v)
    v, t = M.rule_commuted(D.top, D.commuted, boot, 7)
    add(("the copying head also serves commuted copies (%s)"):format(what),
        "precondition: a copying head (its exact IE interval low end >= 0.1), else INCONCLUSIVE; SUPPORTED if IE(commuted) - IE(exact)/2 has its interval above 0, NOT SUPPORTED if below 0",
        "0.48 of 0.91", t, #D.top, v)
  end
  do
    local v, t = M.rule_ablation(S.drops, S.acc[P][S.k_mech].copy, S.patch.ours.top, boot, 8)
    add(("mean-ablating the copying head (%s) hurts copying, not identity/cancel/associate, k=%d"):format(
        table.concat(S.ablated_head, ","), S.k_mech),
        "precondition: the model copies (clean copy accuracy: interval low end >= 50%) and the ablated head is a copying head (exact IE low end >= 0.1), else INCONCLUSIVE; "
        .. "SUPPORTED if copy's drop has its interval low end >= 20 points and identity, cancel, associate each a high end < 10; NOT SUPPORTED if copy's high end < 20 or another's low end >= 10",
        "copy hurt", t, #S.drops.copy, v)
  end
  do
    local v, t = M.rule_identity(S.ident, S.acc[P][S.k_mech].identity, boot, 9)
    add("identity: one head promotes the query variables, another lowers the identity (each more than the other kind)",
        ("precondition: the model solves identity facts (identity accuracy, k=%d: interval low end >= 50%%), else INCONCLUSIVE; "):format(S.k_mech)
        .. "SUPPORTED if all four intervals (promoter a,b > 0 and > e; suppressor e < 0 and below a,b) are on the right side of 0 and the heads differ; NOT SUPPORTED if one is on the wrong side or one head does both",
        "two heads", t, #S.ident.promote_q, v)
  end
  do
    local p, n = pooled(S.pc1)
    local v, t = M.rule_pc1(p, n, 0.9, S.acc[P][S.k_mech].identity, boot, 10)
    add("PC1 of the last attention output separates identity facts",
        ("precondition: the model solves identity facts (identity accuracy, k=%d: interval low end >= 50%%), else INCONCLUSIVE; "):format(S.k_mech)
        .. "best threshold accuracy: SUPPORTED if the interval's low end >= 90%, NOT SUPPORTED if its high end < 90% (normal approximation)",
        "separated", t, n, v)
  end
  for _, pr in ipairs{{"in_group", "closure: query-group membership linearly decodable"},
                      {"answered", "cancellation: answered symbols linearly decodable"}} do
    local p, n = pooled(S.probes[pr[1]])
    local v, t = M.rule_prop(p, n, 0.8)
    add(pr[2], "precondition: none (a property of the context); best layer's held-out balanced accuracy: SUPPORTED if the interval's low end >= 80%, NOT SUPPORTED if its high end < 80% (normal approximation, n = test items)",
        "decodable", t, n, v)
  end
  do
    local verdicts, texts = {}, {}
    for i, c in ipairs(S.phases) do
      local v, why = M.rule_phases(c)
      verdicts[i] = v
      local order = {}
      for j, s in ipairs(ga.PHASE_SKILLS) do order[j] = ("%s %s"):format(s, c[s] and tostring(c[s]) or "never") end
      texts[i] = table.concat(order, " ") .. (why and (" (" .. why .. ")") or "")
    end
    local v = #verdicts == 0 and M.INC or M.SUP
    for _, x in ipairs(verdicts) do
      if x == M.NOT then v = M.NOT elseif x == M.INC and v ~= M.NOT then v = M.INC end
    end
    add("phases: structure, closure, copy, then identity + cancel, associate last (first checkpoint at >= 90%)",
        "precondition: the skills are learned (one never crossed: INCONCLUSIVE); per run: NOT SUPPORTED if two skills that both crossed did so out of order, SUPPORTED if all crossed in order, else INCONCLUSIVE; over runs: any NOT, else any INCONCLUSIVE (no interval: an order of crossings)",
        "that order", #texts > 0 and table.concat(texts, "; ") or "no checkpoints", #S.phases, v)
  end
  return rows
end

M.COLUMNS = {"claim", "rule", "paper", "ours", "n", "seeds", "verdict"}
M.HEADER = table.concat(M.COLUMNS, " | ")

function M.print_verdicts(rows, path, out, title)
  local lines = {title or "VERDICTS", M.HEADER}
  for _, r in ipairs(rows) do
    local c = {}
    for i, key in ipairs(M.COLUMNS) do c[i] = r[key] end
    lines[#lines + 1] = table.concat(c, " | ")
  end
  lines[#lines + 1] = "END VERDICTS"
  ;(out or print)(table.concat(lines, "\n"))
  if path then
    local tsv = {table.concat(M.COLUMNS, "\t") .. "\n"}
    for _, r in ipairs(rows) do
      local c = {}
      for i, key in ipairs(M.COLUMNS) do c[i] = r[key] end
      tsv[#tsv + 1] = table.concat(c, "\t") .. "\n"
    end
    require("cli").write_text(path, table.concat(tsv))
  end
end

-- Parses the printed table ("VERDICTS" ... "END VERDICTS") back into rows;
-- nil and a message when it is malformed.
function M.parse_verdicts(text)
  local body = text:match("VERDICTS[^\n]*\n(.-)\nEND VERDICTS")
  if not body then return nil, "no VERDICTS ... END VERDICTS block" end
  local rows, first = {}, true
  for line in (body .. "\n"):gmatch("(.-)\n") do
    if first then
      if line ~= M.HEADER then return nil, "bad header: " .. line end
      first = false
    else
      local f = {}
      for x in (line .. " | "):gmatch("(.-) | ") do f[#f + 1] = x end
      if #f ~= #M.COLUMNS then return nil, "bad row (" .. #f .. " fields): " .. line end
      local r = {}
      for i, key in ipairs(M.COLUMNS) do r[key] = f[i] end
      if r.verdict ~= M.SUP and r.verdict ~= M.NOT and r.verdict ~= M.INC then
        return nil, "bad verdict '" .. r.verdict .. "' in: " .. line
      end
      rows[#rows + 1] = r
    end
  end
  return rows
end

return M
