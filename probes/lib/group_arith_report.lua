-- group_arith_report.lua (library) — the output of `mechprobe group_arith`:
-- every number into DIR/group_arith.h5 (with every evaluation item under
-- /eval, so that anyone can re-check it, and the untrained model's answers to
-- the same items under /control/untrained), the figures (accuracy bars,
-- patching heatmaps, phase curves, PCA scatter, probe accuracy by layer), and
-- the verdicts, built from the run files alone by the one verdict engine
-- (verdicts.lua): one value per seed, a 95% t-interval over the seeds, each
-- row's learned-task test (the skill above the untrained model by a margin in
-- every seed) and premise first.
--
--   local report = require "group_arith_report"
--   report.write_h5(path, o, R)       -- R = {train=, accuracy=, coverage=, copying=, identity=, probes=, phases=}
--   report.untrained_control(path, ckpt [, o])  -- the step-0 checkpoint on the file's /eval items, into the file
--   local figs = report.figures(o, R)
--   local E = report.load(path)       -- what the verdicts read, from one seed's run file
--   local rows = report.judge{E1, E2, ...}      -- verdicts.judge rows C1, C2, ... over the seeds
--   local rows, section = report.judge_dir(dir [, seeds])   -- the run's files -> verdicts.tsv, /verdicts
--   report.rejudge(dir)               -- the same, and the verdict section of DIR/report.txt
local V = require "verdicts"
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

-- ---------------------------------------------------------------- the untrained control

-- The untrained model's answers to the run's own evaluation items: the step-0
-- checkpoint of the same seed (ckpt) run on every /eval/<population>/<dist>_k<K>
-- tokens of the run file at path, by the same code as the trained model
-- (ga.final_logits, argmax at the final '='). Written into the run file as
--   /control/untrained/<population>/<dist>_k<K>/predicted [n] int32
--   /control/untrained/accuracy/<population>/acc [k, distribution] float32
-- and /control/untrained/available = 1, with attributes checkpoint (the path
-- as given, relative to the run file's folder when it lies under it), step 0,
-- absent "". ckpt = nil records why there is no control instead (available =
-- 0, attribute absent); the learned-task tests then fail and say so. The file
-- is rewritten atomically (a copy, then a rename).
local function copy_file(src, dst)
  local i = assert(io.open(src, "rb"))
  local o = assert(io.open(dst, "wb"))
  while true do
    local b = i:read(1 << 20)
    if not b then break end
    assert(o:write(b))
  end
  i:close()
  assert(o:close())
end

-- Runs fn(f) on the HDF5 file at path opened "r+", atomically: on a copy that
-- is renamed over path only when fn returns.
local function rewrite_h5(path, fn)
  local out <close> = mp.output(path)
  copy_file(path, out.tmp)
  local f = mp.h5.open(out.tmp, "r+")
  local ok, err = pcall(fn, f)
  f:close()
  if not ok then error(err, 0) end
  out:commit()
end

local function run_dir(path) return path:match("^(.*)/[^/]*$") or "." end

function M.untrained_control(path, ckpt, o, absent)
  local f = mp.h5.open(path)
  local k_list = f:read("meta/k_list"):totable()
  local pred, acc = {}, {}
  if ckpt then
    local m = mp.load(ckpt, {device = o and o.device or "cpu"})
    for _, pop in ipairs(ga.POPULATIONS) do
      pred[pop], acc[pop] = {}, mp.zeros{#k_list, #ga.DISTS}
      for ki, k in ipairs(k_list) do
        for di, d in ipairs(ga.DISTS) do
          local base = ("eval/%s/%s_k%d/"):format(pop, d, k)
          if not f:has(base .. "tokens") then
            m:close(); f:close()
            error(("%s: no %stokens (not a complete group_arith run file)"):format(path, base), 0)
          end
          local tokens = mp.tensor(f:read_int(base .. "tokens"))
          local target = f:read_int(base .. "target")
          local rows, p, right = ga.final_logits(m, tokens), mp.zeros{#target}, 0
          for b, row in ipairs(rows) do
            local a = ga.argmax(row)
            p:set(a, b)
            if a == target[b] then right = right + 1 end
          end
          pred[pop][base] = p
          acc[pop]:set(right / #target, ki, di)
        end
      end
    end
    m:close()
  end
  f:close()
  local dir = run_dir(path)
  local rel = ckpt and (ckpt:sub(1, #dir + 1) == dir .. "/" and ckpt:sub(#dir + 2) or ckpt)
  rewrite_h5(path, function(g)
    if ckpt then
      for _, pop in ipairs(ga.POPULATIONS) do
        for base, p in pairs(pred[pop]) do g:write("control/untrained/" .. base:sub(6) .. "predicted", p, {int32 = true}) end
        g:write(("control/untrained/accuracy/%s/acc"):format(pop), acc[pop])
        g:set_attr("control/untrained/accuracy/" .. pop, "columns", table.concat(ga.DISTS, ","))
      end
      g:write("control/untrained/available", mp.tensor{1})
      g:set_attr("control/untrained", "absent", "")
      g:set_attr("control/untrained", "checkpoint", rel)
      g:set_attr("control/untrained", "step", 0)
      g:set_attr("control/untrained", "what", "the same seed's step-0 checkpoint (untrained) on the /eval items: its "
        .. "argmax at the final '=' by the code that scores the trained model")
    else
      g:write("control/untrained/available", mp.tensor{0})
      g:set_attr("control/untrained", "absent", absent or "no step-0 checkpoint")
    end
  end)
end

-- mechprobe group_arith --control --out DIR: the untrained control of every run
-- file of the run in DIR that lacks it (a run made before the control existed),
-- from DIR[/seed_S]/checkpoints/step_000000.h5. Every file and checkpoint is
-- checked before any is written; each file is rewritten atomically. Returns
-- one line per file.
function M.control_dir(dir, o)
  local paths = M.run_files(dir)
  local todo, msgs = {}, {}
  for _, path in ipairs(paths) do
    local ok, f = pcall(mp.h5.open, path)
    if not ok then error(("%s: cannot read: %s"):format(path, tostring(f)), 0) end
    local fmt, has, complete = f:attrs("/").format, f:has("control/untrained"), f:has("eval") and f:has("meta/k_list")
    local absent = has and f:attrs("control/untrained").absent
    if absent == "" then absent = nil end
    f:close()
    if fmt ~= "mechprobe.group_arith" then error(("%s: not a group_arith run file (format %s)"):format(path, tostring(fmt)), 0) end
    if not complete then error(("%s: no /eval items (not a complete group_arith run file)"):format(path), 0) end
    local ckpt = run_dir(path) .. "/checkpoints/step_000000.h5"
    local fh = io.open(ckpt, "rb")
    if fh then fh:close() end
    if has and not absent then
      msgs[#msgs + 1] = ("%s: /control/untrained already there"):format(path)
    elseif fh then
      todo[#todo + 1] = {path = path, ckpt = ckpt}
    elseif absent then
      msgs[#msgs + 1] = ("%s: /control/untrained still absent (%s; no %s)"):format(path, tostring(absent), ckpt)
    else
      error(("%s: no untrained checkpoint %s to compute its control from"):format(path, ckpt), 0)
    end
  end
  for _, t in ipairs(todo) do
    M.untrained_control(t.path, t.ckpt, o)
    msgs[#msgs + 1] = ("%s: /control/untrained from %s"):format(t.path, t.ckpt)
  end
  return msgs
end

-- ---------------------------------------------------------------- reading a run file

-- Everything the verdicts read, from one seed's run file (path) alone: per
-- population, k and distribution the accuracy (/eval: predicted == target),
-- the chance 1/|G| (mean over the items of 1 / the order of the query's group)
-- and the untrained model's accuracy (/control/untrained); the coverage; both
-- patching designs' top and second heads; the ablation drops; the identity
-- heads; PC1's separation; the probes' best layer; the phases' crossings; the
-- model's size and training tokens. Each a seed's mean over its items (the
-- item lists are not the unit of replication). Errors name the file.
function M.load(path)
  local fh = io.open(path, "rb")
  if not fh then error(("%s: no such run file"):format(path), 0) end
  fh:close()
  local okf, f = pcall(mp.h5.open, path)
  if not okf then error(("%s: cannot read: %s"):format(path, tostring(f)), 0) end
  local function fail(msg) f:close(); error(("%s: %s"):format(path, msg), 0) end
  local function need(name)
    if not f:has(name) then fail(("no %s (not a complete group_arith run file)"):format(name)) end
    return name
  end
  local root = f:attrs("/")
  if root.format ~= "mechprobe.group_arith" then
    fail(("not a group_arith run file (format %s)"):format(tostring(root.format)))
  end
  local meta = f:attrs(need("meta"))
  for _, key in ipairs{"seed", "k_mech", "k_patch", "n_layer", "d_model", "d_mlp", "batch", "train_k"} do
    if type(meta[key]) ~= "number" then fail(("meta has no %s attribute (not a complete group_arith run file)"):format(key)) end
  end
  local E = {path = path, seed = math.tointeger(meta.seed) or meta.seed, meta = meta,
             k_list = f:read(need("meta/k_list")):totable(), k_mech = math.tointeger(meta.k_mech),
             k_patch = math.tointeger(meta.k_patch), pop = meta.eval_groups}
  for i, k in ipairs(E.k_list) do E.k_list[i] = math.tointeger(k) or k end
  -- accuracy, chance, untrained
  local has_control = f:has("control/untrained")
  local cattr = has_control and f:attrs("control/untrained") or {}
  if not has_control then
    E.control_missing = true
  elseif cattr.absent and cattr.absent ~= "" then
    E.control_absent = tostring(cattr.absent)
  end
  E.acc, E.chance, E.untrained, E.n = {}, {}, {}, {}
  for _, pop in ipairs(ga.POPULATIONS) do
    E.acc[pop], E.chance[pop], E.untrained[pop], E.n[pop] = {}, {}, {}, {}
    for _, k in ipairs(E.k_list) do
      E.acc[pop][k], E.chance[pop][k], E.untrained[pop][k], E.n[pop][k] = {}, {}, {}, {}
      for _, d in ipairs(ga.DISTS) do
        local base = ("eval/%s/%s_k%d/"):format(pop, d, k)
        local target, pred = f:read_int(need(base .. "target")), f:read_int(need(base .. "predicted"))
        local asg = f:read_int(need(base .. "assignment"))
        local right, ch = 0, 0
        for b = 1, #target do
          if pred[b] == target[b] then right = right + 1 end
          local order = 0
          for _, s in ipairs(asg[b]) do if s >= 0 then order = order + 1 end end
          ch = ch + 1 / order
        end
        local n = #target
        if n == 0 then fail(base .. "target is empty") end
        E.acc[pop][k][d], E.chance[pop][k][d], E.n[pop][k][d] = right / n, ch / n, n
        if has_control and not E.control_absent then
          local cbase = ("control/untrained/%s/%s_k%d/predicted"):format(pop, d, k)
          local up = f:read_int(need(cbase))
          if #up ~= n then fail(("%s has %d items, %starget %d"):format(cbase, #up, base, n)) end
          local ur = 0
          for b = 1, n do if up[b] == target[b] then ur = ur + 1 end end
          E.untrained[pop][k][d] = ur / n
        end
      end
    end
  end
  -- coverage: the model's accuracy and the share copy..cancel answer (cumulative column 4)
  local cum, cacc = f:read(need("coverage/cumulative")), f:read(need("coverage/model_accuracy"))
  E.cov = {}
  for ki, k in ipairs(E.k_list) do E.cov[k] = {model = cacc:get(ki), cov4 = cum:get(ki, 4)} end
  -- copying heads, both designs
  E.patch = {}
  for _, design in ipairs{"paper", "ours"} do
    local g = "copying/" .. design
    local ie, iec = f:read(need(g .. "/ie_exact")), f:read(need(g .. "/ie_commuted"))
    local best, second = ga.top2(ie)
    E.patch[design] = {top = best.value, second = second.value, commuted = iec:get(best.l + 1, best.h + 1),
                       head = ("L%dH%d"):format(best.l, best.h), next_head = ("L%dH%d"):format(second.l, second.h),
                       k = math.tointeger(f:attrs(g).k)}
  end
  local drop = f:read(need("copying/ablation_drop")):totable()
  E.drop = {}
  for ri, r in ipairs(ga.RULES) do E.drop[r] = drop[ri] end
  E.ablation = tostring(f:attrs("copying").ablation or "")
  E.ablated_head = E.patch.ours.head
  -- identity
  local dq, de = f:read(need("identity/dla_query")), f:read(need("identity/dla_identity"))
  local ph, sh = f:read(need("identity/promote_head")):totable(), f:read(need("identity/suppress_head")):totable()
  local pl, phh, sl, shh = math.tointeger(ph[1]), math.tointeger(ph[2]), math.tointeger(sh[1]), math.tointeger(sh[2])
  E.ident = {promote_q = dq:get(pl + 1, phh + 1), promote_e = de:get(pl + 1, phh + 1),
             suppress_q = dq:get(sl + 1, shh + 1), suppress_e = de:get(sl + 1, shh + 1),
             same_head = pl == sl and phh == shh, heads = ("L%dH%d/L%dH%d"):format(pl, phh, sl, shh)}
  E.pc1 = f:attrs(need("identity")).pc1_separation
  if type(E.pc1) ~= "number" then fail("identity has no pc1_separation attribute") end
  -- probes: the best layer's held-out balanced accuracy
  E.probes = {}
  for _, prop in ipairs{"in_group", "answered"} do
    local best = -math.huge
    for _, v in ipairs(f:read(need("probes/" .. prop .. "_balanced_accuracy")):totable()) do
      if v == v and v > best then best = v end
    end
    E.probes[prop] = best > -math.huge and best or 0 / 0
  end
  -- phases: the first checkpoint at >= threshold per skill (-1: never)
  if f:has("phases/crossing_step") then
    local cross = f:read("phases/crossing_step"):totable()
    local skills = {}
    for s in tostring(f:attrs("phases").skills):gmatch("[^,]+") do skills[#skills + 1] = s end
    E.phases = {}
    for i, s in ipairs(skills) do
      local v = cross[i]
      if v and v >= 0 then E.phases[s] = math.tointeger(v) or v end
    end
  end
  -- size: non-embedding parameters and training tokens (per step: the stage's batch x 5 (k + 1))
  E.params = meta.n_layer * (4 * meta.d_model ^ 2 + 2 * meta.d_model * meta.d_mlp)
  if f:has("train/k") then
    local tok = 0
    for _, k in ipairs(f:read("train/k"):totable()) do
      local b = math.max(1, math.floor(meta.batch * (meta.train_k + 1) / (k + 1) + 0.5))
      tok = tok + b * 5 * (k + 1)
    end
    E.tokens = tok
  end
  f:close()
  return E
end

-- ---------------------------------------------------------------- verdicts

-- Figure 3c of the paper (Todd et al., "In-Context Algebra", arXiv 2512.16902;
-- values as quoted in issue 16): accuracy by distribution at k = 50 and k = 100.
M.PAPER_ACC = {[50] = {copy = 1.00, commute = 1.00, identity = 1.00, cancel = 0.96, associate = 0.55},
               [100] = {copy = 1.00, commute = 0.99, identity = 1.00, cancel = 0.90, associate = 0.50}}
M.PAPER = 'Todd et al., "In-Context Algebra", arXiv 2512.16902'
M.SOURCE_ACC = M.PAPER .. ", Figure 3c"
M.SOURCE_NA = M.PAPER .. ", figure no. unverified"

-- The learned-task test: the skill's accuracy above the untrained model's
-- (the same seed's step-0 checkpoint on the same items) by this much, in every
-- seed. The untrained model scores about 2-3% on the paper's cancel
-- construction, below 1/|G|: chance is not the floor, the untrained model is.
M.MARGIN = 0.10
-- The premise "the model solves it": the seed's accuracy >= 50% (above the
-- chance 1/|G| of every training group, at most 1/3), in every seed.
M.SOLVED = 0.5
-- The premise "a copying head exists": the seed's top head's mean exact-copy IE >= 0.1, in every seed.
M.HEAD_FLOOR = 0.1

local function per(Es, fn) local t = {} for i, E in ipairs(Es) do t[i] = fn(E) end return t end
local function f3(x) return V.num(x, "%.3f") end
local function list3(xs) local t = {} for i, x in ipairs(xs) do t[i] = f3(x) end return table.concat(t, ", ") end
local function pct(x) return x == x and ("%.1f%%"):format(100 * x) or "n/a" end

-- seeds failing a per-seed condition, as "seeds 2, 3" (or nil when none)
local function failing(Es, ok)
  local bad = {}
  for i, E in ipairs(Es) do if not ok[i] then bad[#bad + 1] = tostring(E.seed) end end
  if #bad == 0 then return nil end
  return (#bad == 1 and "seed " or "seeds ") .. table.concat(bad, ", ")
end

-- learned = {ok, text}: get(E) above the untrained model's uget(E) by M.MARGIN in every seed.
local function learned(Es, what, get, uget)
  local missing = {}
  for _, E in ipairs(Es) do
    if E.control_absent or E.control_missing then
      missing[#missing + 1] = ("seed %s: %s"):format(E.seed, E.control_absent or "no /control/untrained")
    end
  end
  if #missing > 0 then
    return {ok = false, text = ("no untrained control to compare %s with (%s)"):format(what, table.concat(missing, "; "))}
  end
  local v, u, ok = per(Es, get), per(Es, uget), {}
  for i = 1, #Es do ok[i] = v[i] - u[i] >= M.MARGIN end
  local bad = failing(Es, ok)
  return {ok = bad == nil, text = ("%s %s vs untrained %s (needs +%.2f in every seed)%s"):format(
    what, list3(v), list3(u), M.MARGIN, bad and ("; fails in " .. bad) or "")}
end

-- pre = {ok, text}: get(E) >= x in every seed (a premise, per seed).
local function each_seed(Es, what, get, x)
  local v, ok = per(Es, get), {}
  for i = 1, #Es do ok[i] = v[i] >= x end
  local bad = failing(Es, ok)
  return {ok = bad == nil, text = ("%s %s (>= %s in every seed)%s"):format(what, list3(v), f3(x),
    bad and ("; fails in " .. bad) or "")}
end

-- Item-pooled accuracy over the seeds: described, never judged.
local function pooled_acc(Es, pop, k, d)
  local right, n = 0, 0
  for _, E in ipairs(Es) do
    right, n = right + E.acc[pop][k][d] * E.n[pop][k][d], n + E.n[pop][k][d]
  end
  return ("items pooled over the seeds: %s of %d"):format(pct(right / n), n)
end

-- The compute ratio to the paper, printed beside a row that was not learned:
-- non-embedding parameters x training tokens, ours (the first seed's run file)
-- against the paper's setup (ga.PAPER_SETUP, as probes/lib/group_arith.lua states it).
function M.scale_text(Es)
  local P = ga.PAPER_SETUP
  local pp = P.n_layer * (4 * P.d_model ^ 2 + 2 * P.d_model * P.d_mlp)
  local ptok = P.steps * P.batch * P.T
  local E = Es[1]
  local theirs = ("the paper's %.3g x %.3g (%d layers, d_model %d; %dk steps of %d x %d tokens)"):format(pp, ptok,
    P.n_layer, P.d_model, P.steps // 1000, P.batch, P.T)
  if not E.tokens then
    return ("scale: our parameters x tokens %.3g x unknown (a given model); %s"):format(E.params, theirs)
  end
  return ("scale: our parameters x tokens %.3g x %.3g, %s: %.1e times ours"):format(E.params, E.tokens, theirs,
    pp * ptok / (E.params * E.tokens))
end

-- The verdict rows of the seeds' loaded run files Es (M.load), in seed order:
-- verdicts.judge rows with ids C1, C2, ... (see docs/probes.md "How the probes judge a claim").
function M.judge(Es)
  assert(#Es >= 1, "group_arith_report.judge: no seeds")
  local E1 = Es[1]
  for _, E in ipairs(Es) do
    if table.concat(E.k_list, ",") ~= table.concat(E1.k_list, ",") or E.k_mech ~= E1.k_mech or E.pop ~= E1.pop then
      error(("%s and %s were not run with the same design (k list, k_mech, --eval-groups)"):format(E1.path, E.path), 0)
    end
  end
  local seeds = per(Es, function(E) return E.seed end)
  local P, kk, km = E1.pop, E1.k_list[#E1.k_list], E1.k_mech
  local scale = M.scale_text(Es)
  local rows = {}
  local function add(x)
    x.id = "C" .. (#rows + 1)
    x.seeds, x.scale = seeds, scale
    rows[#rows + 1] = V.judge(x)
  end
  local function acc(pop, k, d) return function(E) return E.acc[pop][k][d] end end
  local function unt(pop, k, d) return function(E) return E.untrained[pop][k][d] end end
  local function learned_acc(pop, k, d)
    return learned(Es, ("%s accuracy (%s, k=%d)"):format(d, pop, k), acc(pop, k, d), unt(pop, k, d))
  end
  local LEARNED = ("learned: the skill's accuracy above the untrained step-0 model's on the same items by >= %.0f "
    .. "points in every seed"):format(100 * M.MARGIN)
  -- copy accuracy for the copying-head rows: at the patching k when measured, else at k_mech
  local function copy_k(k) return E1.acc[P][k] and k or km end

  -- generalisation to held-out groups
  add{claim = ("generalises to held-out groups Q8, C2xC4, C2xC2xC2 (natural queries, k=%d)"):format(kk),
      paper = "near-perfect", source = M.SOURCE_NA, statistic = ("held-out natural accuracy at k = %d"):format(kk),
      values = per(Es, acc("held-out", kk, "natural")), above = 0.9,
      learned = learned_acc(P, kk, "natural"),
      pre = {each_seed(Es, ("the training families solved: natural accuracy (k=%d)"):format(kk), acc(P, kk, "natural"),
                       M.SOLVED)},
      describe = pooled_acc(Es, "held-out", kk, "natural"),
      rule = LEARNED .. " (natural queries, training families); premise: the training families solved (natural "
        .. ">= 50% in every seed); SUPPORTED if the interval over the seeds lies above 0.90, NOT SUPPORTED if below"}
  -- accuracy per distribution against Figure 3c
  for _, k in ipairs(E1.k_list) do
    local pa = M.PAPER_ACC[k]
    if pa then
      for _, d in ipairs(ga.RULES) do
        local describe = ("%s; chance (1 / the group's order) by seed %s"):format(pooled_acc(Es, P, k, d),
          list3(per(Es, function(E) return E.chance[P][k][d] end)))
        if ga.CONSTRUCTED[d] then
          local nat = d .. "_natural"
          describe = describe .. ("; our design (natural contexts filtered by our solver, not the paper's "
            .. "construction): seeds %s, %s"):format(list3(per(Es, acc(P, k, nat))), pooled_acc(Es, P, k, nat))
        end
        add{claim = ("%s accuracy, %s families, k=%d%s"):format(d, P, k, ga.CONSTRUCTED[d] and " (paper's construction)" or ""),
            paper = ("%.2f"):format(pa[d]), source = M.SOURCE_ACC, statistic = ("%s accuracy at k = %d"):format(d, k),
            values = per(Es, acc(P, k, d)), above = pa[d] - 0.05,
            learned = learned_acc(P, k, d), describe = describe,
            rule = LEARNED .. "; SUPPORTED if the interval over the seeds lies above the paper's figure minus 5 points, "
              .. "NOT SUPPORTED if below"}
      end
    end
  end
  -- associativity is the hardest
  do
    local others = {"copy", "commute", "identity", "cancel"}
    local tests = {{name = "associate - chance", values = per(Es, acc(P, kk, "associate")),
                    control = {name = "chance 1/order", values = per(Es, function(E) return E.chance[P][kk].associate end)},
                    above = 0}}
    local parts, okall, texts = {}, true, {}
    for _, d in ipairs(others) do
      tests[#tests + 1] = {name = d .. " - associate", values = per(Es, acc(P, kk, d)),
                           control = {name = "associate", values = per(Es, acc(P, kk, "associate"))}, above = 0}
      local l = learned_acc(P, kk, d)
      okall = okall and l.ok
      texts[#texts + 1] = l.text
    end
    local pa = M.PAPER_ACC[kk] or M.PAPER_ACC[100]
    add{claim = ("associativity is the hardest distribution, k=%d"):format(kk),
        paper = ("associate %.2f, the lowest"):format(pa.associate), source = M.SOURCE_ACC,
        statistic = ("accuracy differences at k = %d"):format(kk), tests = tests,
        learned = {ok = okall, text = table.concat(texts, "; ")},
        rule = "learned: copy, commute, identity and cancel each above the untrained model by the margin in every seed "
          .. "(skills at the floor have no order); SUPPORTED if associate minus chance (1 / the group's order) and each other distribution "
          .. "minus associate lie above 0, NOT SUPPORTED if one lies below 0"}
  end
  -- accuracy keeps up with the copy..cancel solvers
  add{claim = ("accuracy keeps up with the copy..cancel solvers, natural queries, k=%d"):format(kk),
      paper = "accuracy tracks the solvers", source = M.SOURCE_NA,
      statistic = ("model accuracy minus the share copy..cancel answer, k = %d"):format(kk),
      name = "model - solvers", values = per(Es, function(E) return E.cov[kk].model - E.cov[kk].cov4 end), above = -0.05,
      learned = learned_acc(P, kk, "natural"),
      describe = ("model %s, solvers %s by seed"):format(list3(per(Es, function(E) return E.cov[kk].model end)),
        list3(per(Es, function(E) return E.cov[kk].cov4 end))),
      rule = LEARNED .. " (natural queries); SUPPORTED if the model-minus-solvers interval lies above -0.05, "
        .. "NOT SUPPORTED if below"}
  -- the copying head, both designs
  for _, design in ipairs{"paper", "ours"} do
    local D1 = E1.patch[design]
    local what = design == "paper" and "the paper's design: unrelated base with no copy"
                 or "our design: corrupted copy in the same context"
    local ck = copy_k(D1.k)
    local heads = table.concat(per(Es, function(E) return E.patch[design].head end), ",")
    local lcopy = learned_acc(P, ck, "copy")
    local pcopy = each_seed(Es, ("the model copies: copy accuracy (k=%d)"):format(ck), acc(P, ck, "copy"), M.SOLVED)
    add{claim = ("one dedicated copying head (%s, k=%d)"):format(what, D1.k), paper = "IE 0.91, others < 0.08",
        source = M.SOURCE_NA, statistic = "top head's mean exact-copy IE; the next head's",
        tests = {{name = "top head IE", values = per(Es, function(E) return E.patch[design].top end), above = 0.5},
                 {name = "next head IE", values = per(Es, function(E) return E.patch[design].second end), below = 0.15}},
        learned = lcopy, pre = {pcopy}, extra = "heads " .. heads,
        rule = ("learned: copy accuracy (k=%d) above the untrained model by the margin in every seed; premise: the "
          .. "model copies (copy >= 50%% in every seed); SUPPORTED if the top head's IE lies above 0.5 and the next "
          .. "head's below 0.15, NOT SUPPORTED if either lies on the other side"):format(ck)}
    add{claim = ("the copying head also serves commuted copies (%s)"):format(what), paper = "0.48 of 0.91",
        source = M.SOURCE_NA, statistic = "top head's commuted-copy IE minus half its exact-copy IE",
        name = "commuted IE", values = per(Es, function(E) return E.patch[design].commuted end),
        control = {name = "exact IE / 2", values = per(Es, function(E) return E.patch[design].top / 2 end)}, above = 0,
        learned = lcopy,
        pre = {each_seed(Es, "a copying head: top head's exact-copy IE", function(E) return E.patch[design].top end,
                         M.HEAD_FLOOR)},
        extra = "heads " .. heads,
        rule = ("learned: copy accuracy (k=%d) above the untrained model by the margin in every seed; premise: a "
          .. "copying head (top exact IE >= 0.1 in every seed); SUPPORTED if commuted IE - exact IE / 2 lies above 0, "
          .. "NOT SUPPORTED if below"):format(ck)}
  end
  -- ablation of our design's top copying head
  do
    local heads = table.concat(per(Es, function(E) return E.ablated_head end), ",")
    local ours_head = {}
    for i, E in ipairs(Es) do ours_head[i] = E.ablation:find("our design", 1, true) ~= nil end
    local bad = failing(Es, ours_head)
    add{claim = ("mean-ablating our design's top copying head (%s) hurts copying, not identity/cancel/associate, k=%d")
          :format(heads, km),
        paper = "copy hurt", source = M.SOURCE_NA, statistic = ("accuracy drop (clean - ablated) at k = %d"):format(km),
        tests = {{name = "copy drop", values = per(Es, function(E) return E.drop.copy end), above = 0.2},
                 {name = "identity drop", values = per(Es, function(E) return E.drop.identity end), below = 0.1},
                 {name = "cancel drop", values = per(Es, function(E) return E.drop.cancel end), below = 0.1},
                 {name = "associate drop", values = per(Es, function(E) return E.drop.associate end), below = 0.1}},
        learned = learned_acc(P, km, "copy"),
        pre = {each_seed(Es, ("the model copies: copy accuracy (k=%d)"):format(km), acc(P, km, "copy"), M.SOLVED),
               each_seed(Es, "the ablated head is a copying head: our design's top exact-copy IE",
                         function(E) return E.patch.ours.top end, M.HEAD_FLOOR),
               {ok = bad == nil, text = bad and ("the run file of %s ablated another head than our design's (an older "
                  .. "run)"):format(bad) or "the run files ablated our design's top head"}},
        describe = ("commute drop %s by seed (a head that serves commuted copies may hurt it: not judged)"):format(
          list3(per(Es, function(E) return E.drop.commute end))),
        rule = ("learned: copy accuracy (k=%d) above the untrained model by the margin in every seed; premises: the "
          .. "model copies (>= 50%% in every seed), the ablated head (our design's top head) has exact IE >= 0.1 in "
          .. "every seed; SUPPORTED if copy's drop lies above 0.20 and identity's, cancel's, associate's each below "
          .. "0.10, NOT SUPPORTED if one lies on the other side"):format(km)}
  end
  -- identity recognition
  do
    local lid = learned_acc(P, km, "identity")
    local pid = each_seed(Es, ("the model solves identity facts: identity accuracy (k=%d)"):format(km),
                          acc(P, km, "identity"), M.SOLVED)
    local I = function(f) return per(Es, function(E) return E.ident[f] end) end
    add{claim = "identity: one head promotes the query variables, another lowers the identity (each more than the other kind)",
        paper = "two heads", source = M.SOURCE_NA, statistic = "direct logit attribution of the two heads (centred)",
        tests = {{name = "promoter a,b", values = I("promote_q"), above = 0},
                 {name = "promoter a,b - e", values = I("promote_q"), control = {name = "promoter e", values = I("promote_e")},
                  above = 0},
                 {name = "suppressor e", values = I("suppress_e"), below = 0},
                 {name = "suppressor a,b - e", values = I("suppress_q"),
                  control = {name = "suppressor e", values = I("suppress_e")}, above = 0},
                 {name = "two distinct heads", values = per(Es, function(E) return E.ident.same_head and 0 or 1 end),
                  above = 0.5}},
        learned = lid, pre = {pid},
        extra = "heads (promoter/suppressor) " .. table.concat(per(Es, function(E) return E.ident.heads end), ","),
        rule = ("learned: identity accuracy (k=%d) above the untrained model by the margin in every seed; premise: "
          .. "identity solved (>= 50%% in every seed); SUPPORTED if the promoter's a,b logit and its excess over e "
          .. "lie above 0, the suppressor's e logit below 0 and its a,b excess above 0, and the heads differ (1 per "
          .. "seed, above 0.5); NOT SUPPORTED if one lies on the other side"):format(km)}
    add{claim = "PC1 of the last attention output separates identity facts", paper = "separated",
        source = M.SOURCE_NA, statistic = "best threshold accuracy on PC1",
        name = "PC1 separation", values = per(Es, function(E) return E.pc1 end), above = 0.9,
        learned = lid, pre = {pid},
        rule = ("learned: identity accuracy (k=%d) above the untrained model by the margin in every seed; premise: "
          .. "identity solved (>= 50%% in every seed); SUPPORTED if the separation lies above 0.90, NOT SUPPORTED if "
          .. "below"):format(km)}
  end
  -- closure / cancellation probes
  for _, pr in ipairs{{"in_group", "closure: query-group membership linearly decodable", "natural"},
                      {"answered", "cancellation: answered symbols linearly decodable", "cancel"}} do
    add{claim = pr[2], paper = "decodable", source = M.SOURCE_NA,
        statistic = "best layer's held-out balanced accuracy",
        name = "balanced accuracy", values = per(Es, function(E) return E.probes[pr[1]] end), above = 0.8,
        learned = learned_acc(P, km, pr[3]),
        rule = ("learned: %s accuracy (k=%d) above the untrained model by the margin in every seed (the skill the "
          .. "representation serves); SUPPORTED if the best layer's balanced accuracy lies above 0.80, NOT SUPPORTED "
          .. "if below"):format(pr[3], km)}
  end
  -- phases
  do
    local texts, out_of_order, crossed_all = {}, {}, {}
    for i, E in ipairs(Es) do
      local c = E.phases or {}
      local order = {}
      for j, s in ipairs(ga.PHASE_SKILLS) do order[j] = ("%s %s"):format(s, c[s] and tostring(c[s]) or "never") end
      local bad, all = 0, E.phases ~= nil
      for _, p in ipairs(M.PHASE_ORDER) do
        if c[p[1]] and c[p[2]] and c[p[1]] > c[p[2]] then bad = bad + 1 end
      end
      for _, s in ipairs(ga.PHASE_SKILLS) do if not c[s] then all = false end end
      out_of_order[i], crossed_all[i] = bad, all
      texts[i] = ("seed %s: %s"):format(E.seed, E.phases and table.concat(order, " ") or "no checkpoints")
    end
    local nl = failing(Es, crossed_all)
    add{claim = "phases: structure, closure, copy, then identity + cancel, associate last (first checkpoint at >= 90%)",
        paper = "that order", source = M.SOURCE_NA, statistic = "pairs of skills crossing 90% out of the paper's order",
        name = "pairs out of order", fmt = "%.2f", values = out_of_order, below = 0.5,
        learned = {ok = nl == nil, text = "every skill crosses 90% in every seed" .. (nl and ("; not in " .. nl) or "")},
        describe = table.concat(texts, "; "),
        rule = "learned: every skill reaches 90% at some checkpoint in every seed (a skill that never does has no step "
          .. "to order); per seed the number of the paper's ordered pairs (structure<=closure<=copy<=identity,cancel"
          .. "<=associate) crossed out of order; SUPPORTED if it lies below 0.5, NOT SUPPORTED if above"}
  end
  return rows
end

M.PHASE_ORDER = {{"structure", "closure"}, {"closure", "copy"}, {"copy", "identity"}, {"copy", "cancel"},
                 {"identity", "associate"}, {"cancel", "associate"}}

-- ---------------------------------------------------------------- the verdict section and files

M.WIDTHS = {1, 1, 1}   -- no padding
M.HEADER = "== verdicts (one value per seed; the mean and 95% t-interval over the seeds; rows C1, C2, ...)"

-- The report's verdict section: the header, then the engine's VERDICT, RULE
-- and DESCRIBE lines (V.replace_section splices them in again on --rejudge).
function M.section(rows)
  local lines = {M.HEADER}
  for _, l in ipairs(V.report_lines(rows, M.WIDTHS)) do lines[#lines + 1] = l end
  return lines
end

-- The run files of the run in dir: DIR/seed_S/group_arith.h5 for a run of
-- several seeds (pooled = dir/group_arith.h5 then holds /verdicts only), else
-- DIR/group_arith.h5 (one seed). Returns the paths, the seeds' folders order
-- (numeric), and whether the run is pooled.
function M.run_files(dir, seeds)
  if seeds then
    local paths = {}
    for i, s in ipairs(seeds) do paths[i] = ("%s/seed_%d/group_arith.h5"):format(dir, s) end
    return paths, true
  end
  local single = dir .. "/group_arith.h5"
  local fh = io.open(single, "rb")
  if fh then
    fh:close()
    local ok, f = pcall(mp.h5.open, single)
    if not ok then error(("%s: cannot read: %s"):format(single, tostring(f)), 0) end
    local a = f:attrs("/")
    f:close()
    if a.format == "mechprobe.group_arith" then return {single}, false end
    if a.format ~= "mechprobe.group_arith.verdicts" then
      error(("%s: neither a group_arith run file nor its pooled verdicts (format %s)"):format(single, tostring(a.format)), 0)
    end
    local listed = {}                          -- the seeds the pooled verdicts were made from: each must be there
    for sd in tostring(a.seeds or ""):gmatch("%d+") do listed[#listed + 1] = tonumber(sd) end
    if #listed > 0 then
      local paths = M.run_files(dir, listed)
      for _, path in ipairs(paths) do
        local g = io.open(path, "rb")
        if not g then error(("%s: no such run file (%s names seeds %s)"):format(path, single, a.seeds), 0) end
        g:close()
      end
      return paths, true
    end
  end
  local found = {}
  local p = io.popen(("ls -1 '%s' 2>/dev/null"):format(dir))
  for name in p:lines() do
    local s = name:match("^seed_(%d+)$")
    if s then
      local path = ("%s/%s/group_arith.h5"):format(dir, name)
      local g = io.open(path, "rb")
      if g then g:close(); found[#found + 1] = tonumber(s) end
    end
  end
  p:close()
  if #found == 0 then
    error(("%s: no group_arith run file (neither %s/group_arith.h5 nor %s/seed_S/group_arith.h5)"):format(dir, dir, dir), 0)
  end
  table.sort(found)
  local paths = {}
  for i, s in ipairs(found) do paths[i] = ("%s/seed_%d/group_arith.h5"):format(dir, s) end
  return paths, true
end

-- The rows of the run in dir, judged from its run files alone (M.load of
-- each, then M.judge): rows, the seeds, the paths, whether the run is pooled.
local function judged(dir, seeds)
  local paths, pooled = M.run_files(dir, seeds)
  local Es = {}
  for i, path in ipairs(paths) do
    Es[i] = M.load(path)
    if Es[i].control_missing then
      error(("%s: no /control/untrained (the untrained model's accuracy); compute it with `mechprobe group_arith "
        .. "--control --out %s` (reads %s/checkpoints/step_000000.h5)"):format(path, dir, run_dir(path)), 0)
    end
  end
  return M.judge(Es), per(Es, function(E) return E.seed end), paths, pooled
end

-- Outputs under temporary names (mp.output), committed by the caller when all are ready.
local function pending_text(path, text)
  local out = mp.output(path)
  local fh = io.open(out.tmp, "w")
  local ok, err = fh and fh:write(text)
  local closed, cerr = fh and fh:close()
  if not ok or not closed then out:abort(); error(("%s: cannot write: %s"):format(path, tostring(err or cerr)), 0) end
  return out
end

-- /verdicts: for several seeds a pooled file dir/group_arith.h5 of the
-- verdicts alone (written whole); for one seed its run file (a copy without
-- the old /verdicts, V.copy_run_file).
local function pending_h5(dir, rows, seeds, paths, pooled)
  local path = dir .. "/group_arith.h5"
  local out, f
  if pooled then
    out = mp.output(path)
    f = mp.h5.open(out.tmp, "w")
    f:set_attr("/", "format", "mechprobe.group_arith.verdicts")
    f:set_attr("/", "seeds", table.concat(seeds, ","))
    local rel = {}
    for i, p in ipairs(paths) do rel[i] = p:sub(#dir + 2) end
    f:set_attr("/", "run_files", table.concat(rel, ","))
  else
    out = V.copy_run_file(path)
    f = mp.h5.open(out.tmp, "r+")
  end
  local ok, err = pcall(function()
    f:set_attr("/", "learned_margin", M.MARGIN)
    V.write_h5(f, rows)
  end)
  f:close()
  if not ok then out:abort(); error(("%s: %s"):format(path, tostring(err)), 0) end
  return out
end

-- Judges the run in dir from its run files alone and writes dir/verdicts.tsv
-- (V.tsv) and /verdicts (V.write_h5), both committed together after
-- everything has been read and judged. Returns the rows and the report's
-- verdict section (lines). The run calls it once its files are written.
function M.judge_dir(dir, seeds)
  local rows, sseeds, paths, pooled = judged(dir, seeds)
  local h5 <close> = pending_h5(dir, rows, sseeds, paths, pooled)
  local tsv <close> = pending_text(dir .. "/verdicts.tsv", V.tsv(rows))
  h5:commit(); tsv:commit()
  return rows, M.section(rows)
end

-- A report written before issue 37 (its tables "VERDICTS" .. "END VERDICTS",
-- per seed and pooled, and "VERDICTS BY SEED", with the lines naming their
-- files): the tables removed and the section put where the last one was (the
-- end when none). Lines in, lines out.
function M.replace_old_tables(lines, section)
  local out, at, k = {}, nil, 1
  while k <= #lines do
    local l = lines[k]
    if l:match("^VERDICTS") then
      at = #out
      k = k + 1
      while k <= #lines and not lines[k]:match("^END VERDICTS") do k = k + 1 end
      k = k + 1
    elseif l:match("^verdicts: .*/seed_%d+/verdicts%.tsv$") or l:match("^verdicts by seed: ") then
      k = k + 1                            -- the per-seed tables' files, gone
    elseif l:match("^verdicts %(pooled%): ") then
      out[#out + 1] = "verdicts: " .. l:match("^verdicts %(pooled%): (.*)$")
      k = k + 1
    else
      out[#out + 1] = l
      k = k + 1
    end
  end
  at = at or #out
  local res = {}
  for i = 1, at do res[#res + 1] = out[i] end
  for _, l in ipairs(section) do res[#res + 1] = l end
  for i = at + 1, #out do res[#res + 1] = out[i] end
  return res
end

-- The report's text with its verdict section replaced: this format's (the
-- engine's splice after M.HEADER), else an older report's tables
-- (M.replace_old_tables); a report without either gets the section at its end.
function M.replace_section(text, rows)
  local new = V.replace_section(text, V.report_lines(rows, M.WIDTHS), "^== verdicts")
  if new then return new end
  local lines = {}
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do lines[#lines + 1] = line end
  if text == "" then lines = {} end
  return table.concat(M.replace_old_tables(lines, M.section(rows)), "\n") .. "\n"
end

-- mechprobe group_arith --rejudge --out DIR: the verdicts from the run files
-- alone; rewrites DIR/verdicts.tsv, /verdicts and DIR/report.txt's verdict
-- section (none: report.txt is written with the section alone), every output
-- under a temporary name first, all renamed once all are ready. A stale
-- DIR/verdicts_by_seed.tsv of an older run is removed. Returns the rows and
-- the section.
function M.rejudge(dir)
  local rows, sseeds, paths, pooled = judged(dir)
  local report_path, text = dir .. "/report.txt", ""
  local rf = io.open(report_path, "r")
  if rf then text = rf:read("a"); rf:close() end
  local h5 <close> = pending_h5(dir, rows, sseeds, paths, pooled)
  local tsv <close> = pending_text(dir .. "/verdicts.tsv", V.tsv(rows))
  local rep <close> = pending_text(report_path, M.replace_section(text, rows))
  h5:commit(); tsv:commit(); rep:commit()
  os.remove(dir .. "/verdicts_by_seed.tsv")
  return rows, M.section(rows)
end

return M
