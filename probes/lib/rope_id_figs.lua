-- rope_id_figs.lua — the figures of the rope_id probe (rope_id.lua's step 5):
-- text loss against position and length, passkey accuracy, the other
-- retrieval tasks against length (chance dotted), head geometry against
-- position, and the PCA of each model's top sink head. One seed's run state c
-- (rope_id.lua's pipeline table) in, one file per figure out, its path added
-- to c.figs.
--
--   require("rope_id_figs").figures(c, rid)   -- rid: the rope_id module (variants, tasks)
local F = {}
local M   -- the rope_id module, set by F.figures

-- Mean over heads per window: a list indexed by window.
local function window_curve(per)
  local c, n = {}, 0
  for _, hs in ipairs(per) do
    for _, ws in ipairs(hs) do
      n = n + 1
      for w, v in ipairs(ws) do c[w] = (c[w] or 0) + v end
    end
  end
  for w = 1, #c do c[w] = c[w] / n end
  return c
end


-- lo, hi over the non-NaN values of some lists, padded by 4 %
local function range_of(lists)
  local lo, hi = math.huge, -math.huge
  for _, t in ipairs(lists) do
    for _, x in ipairs(t) do if x == x then lo, hi = math.min(lo, x), math.max(hi, x) end end
  end
  if lo > hi then lo, hi = 0, 1 end
  if hi - lo < 1e-9 then lo, hi = lo - 0.5, hi + 0.5 end
  local pad = 0.04 * (hi - lo)
  return lo - pad, hi + pad
end

local function save_fig(c, fig, name)
  local path = ("%s/%s.%s"):format(c.o.out, name, c.o.format)
  fig:save(path)
  c.figs[#c.figs + 1] = path
  return path
end

-- the training length as a dashed vertical line from lo to hi
local function mark_L(c, ax, lo, hi)
  ax:line({c.L, c.L}, {lo, hi}, {dashed = true, width = 1, label = ("L = %d"):format(c.L)})
end

-- the two families of variants the figures compare side by side
local groups = {
  {title = "positional schemes", names = {"rope", "half_rope", "high_freq", "rope_id", "none"}},
  {title = "RoPE: scaling, DroPE; RoPE-ID", names = {"rope", "rope_pi", "rope_ntk", "rope_yarn", "drope", "rope_id",
                                                      "rope_id_notemp"}},
}

-- text loss by position and by length
local function fig_text_loss(c)
  local E, lengths, WL = c.E, c.lengths, c.WL
  local xl = {}
  for w = 1, c.nwl do xl[w] = (w - 0.5) * WL end
  local fig = mp.plot.figure{rows = 2, cols = 2, width = 900, height = 640,
    title = ("Byte-level text: loss against position (T = %d) and against length; training length dashed"):format(c.Tmax)}
  for gi, gr in ipairs(groups) do
    local ax = fig:axes(1, gi)
    local ys = {}
    for _, n in ipairs(gr.names) do ys[#ys + 1] = E[n].loss_win end
    local lo, hi = range_of(ys)
    for _, n in ipairs(gr.names) do ax:line(xl, E[n].loss_win, {label = n, marker = true}) end
    mark_L(c, ax, lo, hi)
    ax:set{title = gr.title .. ", by position", xlabel = "position (window centre)", ylabel = "loss (nats/byte)"}
    ax:legend()
    ax = fig:axes(2, gi)
    ys = {}
    for _, n in ipairs(gr.names) do ys[#ys + 1] = E[n].loss end
    lo, hi = range_of(ys)
    for _, n in ipairs(gr.names) do ax:line(lengths, E[n].loss, {label = n, marker = true}) end
    mark_L(c, ax, lo, hi)
    ax:set{title = gr.title .. ", by length", xlabel = "evaluation length T (mean over positions < T)",
           ylabel = "loss (nats/byte)", xlog = true}
  end
  save_fig(c, fig, "text_loss")
end

-- retrieval accuracy: curves and the table as bars
local function fig_retrieval(c)
  local E, lengths = c.E, c.lengths
  local fig = mp.plot.figure{rows = 2, cols = 2, width = 900, height = 640,
    title = "Passkey retrieval: exact-match accuracy against length; training length dashed"}
  for gi, gr in ipairs(groups) do
    local ax = fig:axes(1, gi)
    for _, n in ipairs(gr.names) do ax:line(lengths, E[n].acc, {label = n, marker = true}) end
    mark_L(c, ax, 0, 1)
    ax:set{title = gr.title, xlabel = "evaluation length T", ylabel = "accuracy", ylim = {0, 1.02}, xlog = true}
    ax:legend()
  end
  local names, series, labels = {}, {}, {}
  for i, v in ipairs(M.variants) do names[i] = v.name end
  for j, T in ipairs(lengths) do
    labels[j] = "T=" .. T
    series[j] = {}
    for i, v in ipairs(M.variants) do series[j][i] = E[v.name].acc[j] end
  end
  fig:axes(2, 1):bars(names, series, {labels = labels})
    :set{title = "accuracy table (variant x length)", ylabel = "exact match", ylim = {0, 1.05}}:legend()
  local dseries = {}
  for j = 1, #lengths do
    dseries[j] = {}
    for i, v in ipairs(M.variants) do dseries[j][i] = E[v.name].acc_digit[j] end
  end
  fig:axes(2, 2):bars(names, dseries, {labels = labels})
    :set{title = "per-digit accuracy (variant x length)", ylabel = "digits right", ylim = {0, 1.05}}
  save_fig(c, fig, "retrieval_accuracy")
end

-- the other retrieval tasks: accuracy against length, chance dotted
local function fig_tasks(c)
  local E, lengths, tasks = c.E, c.lengths, c.o.tasks
  if #tasks == 0 then return end
  local fig = mp.plot.figure{rows = #tasks, cols = 2, width = 900, height = 300 * #tasks + 40,
    title = "Retrieval that needs more than one needle: exact-match accuracy against length; L dashed, chance dotted"}
  for ti, name in ipairs(tasks) do
    local chance = M.ret_kinds[name].chance(c.o)
    for gi, gr in ipairs(groups) do
      local ax = fig:axes(ti, gi)
      for _, n in ipairs(gr.names) do ax:line(lengths, E[n].racc[name], {label = n, marker = true}) end
      mark_L(c, ax, 0, 1)
      ax:line({lengths[1], lengths[#lengths]}, {chance, chance}, {dashed = true, width = 1, label = "chance"})
      ax:set{title = name .. ": " .. gr.title, xlabel = "evaluation length T", ylabel = "accuracy", ylim = {0, 1.02},
             xlog = true}
      if ti == 1 then ax:legend() end
    end
  end
  save_fig(c, fig, "retrieval_tasks")
end

-- geometry against position, mean over heads
local function fig_geometry(c)
  local GEO, SINK, W = c.GEO, c.SINK, c.W
  local xw = {}
  for w = 1, c.nwin do xw[w] = (w - 0.5) * W end
  local stats = {{"first", "attention to the first token (each model's top head)"}, {"srank_k", "stable rank of keys"},
                 {"sigma1_k", "sigma1 share of keys"}, {"maxqk_pos", "share of queries with max_(s>=1) q.k_s > 0"},
                 {"cos_qk", "q/k centroid cosine"}, {"k0_ratio", "||k_0|| / mean ||k||"}}
  for gi, gr in ipairs(groups) do
    local fig = mp.plot.figure{rows = 2, cols = 3, width = 1200, height = 620,
      title = ("Text models against position (mean over heads; windows of %d): %s"):format(W, gr.title)}
    for si, st in ipairs(stats) do
      local ax = fig:axes((si - 1) // 3 + 1, (si - 1) % 3 + 1)
      local ys = {}
      for _, n in ipairs(gr.names) do
        local sk = SINK[n]
        ys[#ys + 1] = st[1] == "first" and GEO[n].first[sk.layer + 1][sk.head + 1] or window_curve(GEO[n][st[1]])
      end
      local lo, hi = range_of(ys)
      for i, n in ipairs(gr.names) do ax:line(xw, ys[i], {label = n}) end
      mark_L(c, ax, lo, hi)
      ax:set{title = st[2], xlabel = "position"}
      if si == 1 then ax:legend() end
    end
    save_fig(c, fig, gi == 1 and "geometry_schemes" or "geometry_rope_variants")
  end
end

-- PCA of q and k for the sink head, inside vs past L
local function fig_pca(c)
  local PCA, SINK, L, Tmax = c.PCA, c.SINK, c.L, c.Tmax
  local rows = {"rope", "rope_id", "half_rope", "high_freq", "none", "drope"}
  local fig = mp.plot.figure{rows = #rows, cols = 2, width = 600, height = 250 * #rows + 30,
    title = ("Top sink head's q and k (PCA): inside L = %d / past L"):format(L)}
  for ri, n in ipairs(rows) do
    local p, sk = PCA[n], SINK[n]
    local xlo, xhi = range_of{p.qx, p.kx}
    local ylo, yhi = range_of{p.qy, p.ky}
    for ci = 1, 2 do
      local a, b = ci == 1 and 2 or L + 1, ci == 1 and L or Tmax
      local qx, qy, kx, ky = {}, {}, {}, {}
      for t = a, b do
        qx[#qx + 1], qy[#qy + 1], kx[#kx + 1], ky[#ky + 1] = p.qx[t], p.qy[t], p.kx[t], p.ky[t]
      end
      local ax = fig:axes(ri, ci)
      ax:scatter(qx, qy, {label = "queries", size = 2.5, alpha = 0.6})
      ax:scatter(kx, ky, {label = "keys", size = 2.5, alpha = 0.6})
      ax:scatter({p.kx[1]}, {p.ky[1]}, {label = "first key", size = 7, alpha = 1})
      ax:set{title = ("%s L%dH%d, %s"):format(n, sk.layer, sk.head,
               ci == 1 and ("positions 1..%d"):format(L - 1) or ("positions %d..%d"):format(L, Tmax - 1)),
             xlim = {xlo, xhi}, ylim = {ylo, yhi}, xlabel = ("PC1 (%.0f%%)"):format(100 * p.ratio[1]),
             ylabel = ("PC2 (%.0f%%)"):format(100 * p.ratio[2])}
      if ri == 1 and ci == 2 then ax:legend() end
    end
  end
  save_fig(c, fig, "pca_sink_head")
end

function F.figures(c, rid)
  M = rid
  c.figs = {}
  fig_text_loss(c)
  fig_retrieval(c)
  fig_tasks(c)
  fig_geometry(c)
  fig_pca(c)
end

return F
