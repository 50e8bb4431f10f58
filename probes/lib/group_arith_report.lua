-- group_arith_report.lua (library) — the output of `mechprobe group_arith`:
-- every number into DIR/group_arith.h5, the figures (accuracy bars, patching
-- heatmaps, phase curves, PCA scatter, probe accuracy by layer), and the
-- verdict table (DIR/verdicts.tsv and on stdout) comparing each claim of the
-- paper with ours.
--
--   local report = require "group_arith_report"
--   report.write_h5(path, o, R)       -- R = {train=, accuracy=, coverage=, copying=, identity=, probes=, phases=}
--   local figs = report.figures(o, R)
--   local rows = report.verdicts(o, R) -- {{claim=, paper=, ours=, supported="yes"|"no"|"n/a"}, ...}
--   report.print_verdicts(rows, path [, out])   -- out: the print function (default print)
--   report.parse_verdicts(text)       -- the inverse of the printed table (tests use it)
local ga = require "group_arith"
local M = {}

local function tensor1(list)
  local t = mp.zeros{math.max(#list, 1)}
  for i, v in ipairs(list) do t:set(v, i) end
  return t
end

local function fmt_pct(x) return x == x and ("%.1f%%"):format(100 * x) or "n/a" end

-- ---------------------------------------------------------------- HDF5

function M.write_h5(path, o, R)
  local f <close> = mp.h5.open(path, "w")
  f:write("meta/k_list", tensor1(o.k_list))
  for _, key in ipairs{"d_model", "n_layer", "n_head", "d_mlp", "train_k", "steps", "batch", "n_eval", "k_mech", "seed"} do
    f:set_attr("meta", key, o[key])
  end
  f:set_attr("meta", "lr", o.lr)
  f:set_attr("meta", "mode", o.mode)
  f:set_attr("meta", "eval_groups", o.eval_groups or "held-out (Q8, C2xC4, C2xC2xC2)")
  f:set_attr("meta", "rules", table.concat(ga.RULES, ","))
  f:set_attr("/", "format", "mechprobe.group_arith")
  f:set_attr("/", "version", 1)
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
  -- 2. accuracy per distribution: [k, rule] tables of acc, lo, hi, p_answer
  local A = R.accuracy
  for _, field in ipairs{"acc", "lo", "hi", "p_answer"} do
    local t = mp.zeros{#o.k_list, #ga.RULES}
    for ki, k in ipairs(o.k_list) do
      for ri, r in ipairs(ga.RULES) do t:set(A[k][r][field], ki, ri) end
    end
    f:write("accuracy/" .. field, t)
  end
  local nat = mp.zeros{#o.k_list, 3}
  for ki, k in ipairs(o.k_list) do nat:set(A[k].all.acc, ki, 1); nat:set(A[k].all.lo, ki, 2); nat:set(A[k].all.hi, ki, 3) end
  f:write("accuracy/natural_acc_lo_hi", nat)
  f:set_attr("accuracy", "n", o.n_eval)
  f:set_attr("accuracy", "columns", table.concat(ga.RULES, ","))
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
  -- 4. copying head
  local C = R.copying
  f:write("copying/ie_exact", C.exact.ie)
  f:write("copying/ie_commuted", C.commuted.ie)
  local drop, abl = mp.zeros{#ga.RULES}, mp.zeros{#ga.RULES}
  for ri, r in ipairs(ga.RULES) do drop:set(C.drop[r], ri); abl:set(C.ablated[r], ri) end
  f:write("copying/ablation_drop", drop)
  f:write("copying/ablated_accuracy", abl)
  f:write("copying/top_head", tensor1{C.top.l, C.top.h, C.top.value, C.top_commuted_ie})
  f:set_attr("copying", "p_clean_exact", C.exact.p_clean)
  f:set_attr("copying", "p_corrupt_exact", C.exact.p_corrupt)
  f:set_attr("copying", "p_clean_commuted", C.commuted.p_clean)
  f:set_attr("copying", "p_corrupt_commuted", C.commuted.p_corrupt)
  f:set_attr("copying", "self_patch_max_diff", C.self_patch_diff)
  f:set_attr("copying", "ablation", "mean ablation of hook_z of the top exact-copy head")
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
  do -- accuracy per distribution, one panel per k
    local fig = mp.plot.figure{rows = 1, cols = #o.k_list, width = 330 * #o.k_list, height = 300,
      title = "Accuracy on the final query, held-out order-8 groups (95% bootstrap interval)"}
    for ki, k in ipairs(o.k_list) do
      local v, e = {}, {}
      for ri, r in ipairs(ga.RULES) do
        local a = R.accuracy[k][r]
        v[ri], e[ri] = a.acc, (a.hi - a.lo) / 2
      end
      fig:axes(1, ki):bars(ga.RULES, {v}, {labels = {("k = %d"):format(k)}, err = {e}})
        :set{title = ("k = %d facts"):format(k), ylabel = "accuracy", ylim = {0, 1}}
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
  do -- patching heatmaps
    local C = R.copying
    local cfg_h = C.exact.ie:size(2)
    local fig = mp.plot.figure{rows = 1, cols = 2, width = math.max(560, 2 * (120 + 45 * cfg_h)), height = 110 + 40 * C.exact.ie:size(1),
      title = "Patching hook_z per head: IE = P(c | patched) - P(c | corrupted)"}
    fig:axes(1, 1):heatmap(C.exact.ie, {cmap = "rdbu_r", vmin = -1, vmax = 1, colorbar_label = "IE"})
      :set{title = "exact copies", xlabel = "head", ylabel = "layer"}
    fig:axes(1, 2):heatmap(C.commuted.ie, {cmap = "rdbu_r", vmin = -1, vmax = 1, colorbar_label = "IE"})
      :set{title = "commuted copies", xlabel = "head", ylabel = "layer"}
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
    local cat = {}
    for i, v in ipairs(I.labels) do cat[i] = v == 1 and "identity query" or "other query" end
    local fig = mp.plot.figure{width = 420, height = 340}
    fig:axes(1, 1):scatter(I.pc1, I.pc2, {category = cat, size = 4, alpha = 0.7})
      :set{title = ("Last layer attention output (final '='): PC1 separates %s"):format(fmt_pct(I.pc1_separation)),
           xlabel = "PC1", ylabel = "PC2"}
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

-- The identity-recognition verdict, selective as in the paper: the promoting
-- head raises the query variables more than the identity, the suppressing head
-- lowers the identity more than the query variables, and they are two heads (a
-- head that moves both alike only marks "in the context"). I is ga.identity's
-- result (promote, suppress: {l, h} 0-based; dla_query, dla_identity: [L, H]).
function M.identity_verdict(I)
  local pq, pe = I.dla_query:get(I.promote.l + 1, I.promote.h + 1), I.dla_identity:get(I.promote.l + 1, I.promote.h + 1)
  local sq, se = I.dla_query:get(I.suppress.l + 1, I.suppress.h + 1), I.dla_identity:get(I.suppress.l + 1, I.suppress.h + 1)
  local text = ("promote L%dH%d a,b %+.2f (e %+.2f), lower L%dH%d e %+.2f (a,b %+.2f)"):format(I.promote.l, I.promote.h,
    pq, pe, I.suppress.l, I.suppress.h, se, sq)
  return pq > 0 and pq > pe and se < 0 and se < sq and (I.promote.l ~= I.suppress.l or I.promote.h ~= I.suppress.h), text
end

-- Each claim of the paper (the issue's figures) against ours, with the rule
-- that decides "supported" written next to it.
function M.verdicts(o, R)
  local rows = {}
  local function add(claim, paper, ours, ok) rows[#rows + 1] = {claim = claim, paper = paper, ours = ours,
    supported = ok == nil and "n/a" or (ok and "yes" or "no")} end
  local kk = o.k_list[#o.k_list]
  local A = R.accuracy[kk]
  add(("generalises to unseen groups (natural queries, k=%d, acc >= 90%%)"):format(kk), "near-perfect",
      ("%s [%s, %s]"):format(fmt_pct(A.all.acc), fmt_pct(A.all.lo), fmt_pct(A.all.hi)), A.all.hi >= 0.9)
  local paper = {copy = 1.00, commute = 0.99, identity = 1.00, cancel = 0.97, associate = 0.60}
  for _, r in ipairs{"copy", "commute", "identity", "cancel"} do
    -- supported when the interval reaches within 5 points of the paper's figure
    add(("%s accuracy, k=%d (interval reaches paper - 5 points)"):format(r, kk), fmt_pct(paper[r]),
        ("%s [%s, %s]"):format(fmt_pct(A[r].acc), fmt_pct(A[r].lo), fmt_pct(A[r].hi)), A[r].hi >= paper[r] - 0.05)
  end
  local lowest = true
  for _, r in ipairs{"copy", "commute", "identity", "cancel"} do if A[r].acc < A.associate.acc then lowest = false end end
  add(("associativity is the hardest distribution, k=%d"):format(kk), "60% (lowest)",
      ("%s (%s)"):format(fmt_pct(A.associate.acc), lowest and "lowest" or "not lowest"), lowest)
  local cov = R.coverage[kk]
  add(("accuracy >= coverage of copy..cancel solvers, k=%d"):format(kk), "accuracy tracks the solvers",
      ("model %s vs copy..cancel %s, all five %s"):format(fmt_pct(cov.accuracy), fmt_pct(cov.cumulative[4]),
        fmt_pct(cov.cumulative[5])), cov.accuracy >= cov.cumulative[4] - 0.05)
  local C = R.copying
  add("one dedicated copying head (top IE >= 0.5, every other < 0.15)", "0.91, others < 0.08",
      ("L%dH%d %.2f, next %.2f"):format(C.top.l, C.top.h, C.top.value, C.second.value),
      C.top.value >= 0.5 and C.second.value < 0.15)
  add("the copying head also serves commuted copies (IE >= 0.2)", "0.48",
      ("%.2f"):format(C.top_commuted_ie), C.top_commuted_ie >= 0.2)
  local worst, wd = nil, -math.huge
  for _, r in ipairs(ga.RULES) do if C.drop[r] > wd then worst, wd = r, C.drop[r] end end
  add("ablating the copying head hurts copying most (drop >= 20 points)", "copy",
      ("largest drop: %s %.1f points (copy %.1f)"):format(worst, 100 * wd, 100 * C.drop.copy),
      worst == "copy" and wd >= 0.2)
  local I = R.identity
  local ok, text = M.identity_verdict(I)
  add("identity: one head promotes the query variables, another lowers the identity (each more than the other kind)",
      "two heads", text, ok)
  add("PC1 of the last attention output separates identity facts (>= 90%)", "separated",
      fmt_pct(I.pc1_separation), I.pc1_separation >= 0.9)
  add("closure: query-group membership linearly decodable (balanced acc >= 80%)", "closure-based",
      fmt_pct(R.probes.in_group.best), R.probes.in_group.best >= 0.8)
  add("cancellation: answered symbols linearly decodable (balanced acc >= 80%)", "cancellation",
      fmt_pct(R.probes.answered.best), R.probes.answered.best >= 0.8)
  local P = R.phases
  if P and #P.steps > 1 then
    local c = P.crossing
    local function at(s) return c[s] or math.huge end
    local function show(s) return c[s] and tostring(c[s]) or "never" end
    local order = {}
    for i, s in ipairs(ga.PHASE_SKILLS) do order[i] = ("%s %s"):format(s, show(s)) end
    local ok = at("structure") <= at("closure") and at("closure") <= at("copy") and at("copy") <= at("identity")
      and at("copy") <= at("cancel") and at("associate") >= math.max(at("identity"), at("cancel"), at("copy"))
      and c.copy ~= nil
    add(("phases: structure, closure, copy, cancel + identity, associate last (first step >= %d%%)"):format(
      math.floor(100 * P.threshold)), "that order", table.concat(order, ", "), ok)
  else
    add("phases: structure, closure, copy, cancel + identity, associate last", "that order", "no checkpoints", nil)
  end
  return rows
end

M.HEADER = "claim | paper | ours | supported"

function M.print_verdicts(rows, path, out)
  local lines = {"VERDICTS", M.HEADER}
  for _, r in ipairs(rows) do
    lines[#lines + 1] = ("%s | %s | %s | %s"):format(r.claim, r.paper, r.ours, r.supported)
  end
  lines[#lines + 1] = "END VERDICTS"
  ;(out or print)(table.concat(lines, "\n"))
  if path then
    local tsv = {"claim\tpaper\tours\tsupported\n"}
    for _, r in ipairs(rows) do tsv[#tsv + 1] = ("%s\t%s\t%s\t%s\n"):format(r.claim, r.paper, r.ours, r.supported) end
    require("cli").write_text(path, table.concat(tsv))
  end
end

-- Parses the printed table ("VERDICTS" ... "END VERDICTS") back into rows;
-- nil and a message when it is malformed.
function M.parse_verdicts(text)
  local body = text:match("VERDICTS\n(.-)\nEND VERDICTS")
  if not body then return nil, "no VERDICTS ... END VERDICTS block" end
  local rows, first = {}, true
  for line in (body .. "\n"):gmatch("(.-)\n") do
    if first then
      if line ~= M.HEADER then return nil, "bad header: " .. line end
      first = false
    else
      local c, p, ours, s = line:match("^(.-) | (.-) | (.-) | (%S+)$")
      if not c then return nil, "bad row: " .. line end
      if s ~= "yes" and s ~= "no" and s ~= "n/a" then return nil, "bad verdict '" .. s .. "' in: " .. line end
      rows[#rows + 1] = {claim = c, paper = p, ours = ours, supported = s}
    end
  end
  return rows
end

return M
