-- sinks.lua (library) — the analysis behind `mechprobe sinks` and the
-- quickstart: capture q/k/patterns/residuals of a model on some tokens to
-- DIR/sinks.h5, compute the sink and Q/K-geometry statistics of every head,
-- write them under /stats, render the figures and print the verdict table.
--
--   local sinks = require "sinks"
--   local summary = sinks.run(model, tokens, {out = DIR, eps = 0.3, window = 32,
--                                             boot = 1000, seed = 1, format = "png", label = "name"})
local M = {}

M.defaults = {eps = 0.3, window = 32, boot = 1000, seed = 1, format = "png"}

function M.run(m, tokens, o)
  for k, v in pairs(M.defaults) do if o[k] == nil then o[k] = v end end
  if math.type(o.window) ~= "integer" or o.window < 1 then
    error(("sinks: window must be a positive integer number of positions (got %s)"):format(tostring(o.window)), 2)
  end
  mp.mkdir(o.out)
  local cfg = m.config
  local L, H, K, Dh = cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.d_head
  local group = H // K
  local T = #tokens
  assert(T >= 4, ("sinks: need at least 4 tokens, got %d"):format(T))
  -- 1. capture to the run file, then read back from it (the file is the record).
  -- The whole file (captures and /stats) is written under a temporary name and
  -- renamed to DIR/sinks.h5 only once complete: an error or a signal on the way
  -- leaves no sinks.h5 without /stats.
  local run = o.out .. "/sinks.h5"
  local out <close> = mp.output(run)
  m:capture(tokens, {out = out.tmp, compress = 4, hooks = "blocks.*.attn.hook_q,blocks.*.attn.hook_k,"
    .. "blocks.*.attn.hook_rot_q,blocks.*.attn.hook_rot_k,blocks.*.attn.hook_pattern,blocks.*.hook_resid_post"})
  local f <close> = mp.h5.open(out.tmp, "r+")
  local function act(l, name) return f:read(("acts/blocks.%d.%s"):format(l, name)) end

  -- per-head clouds: [1,T,n,Dh] -> [n,T,Dh] so that [h] is head h's [T,Dh] cloud
  local function heads(t) return t[1]:permute{2, 1, 3} end

  local function stat(name) return mp.zeros{L, H}, name end
  local S = {}
  for _, k in ipairs{"alpha0", "alpha0_lo", "alpha0_hi", "k0_norm_ratio", "cos_qk", "dist_over_spread", "fisher_acc",
    "srank_k", "srank_k_pre", "srank_q", "sigma1_share_k", "sigma1_ratio_k", "max_qk_mean", "max_qk_positive",
    "entropy_mean"} do
    S[k] = mp.zeros{L, H}
  end
  local nwin = (T - 1) // o.window          -- windows after the first token
  local srank_win = mp.zeros{L, H, math.max(nwin, 1)}
  local patterns = mp.zeros{L, H, T, T}
  local resid = mp.zeros{L, T, cfg.d_model}
  local pca_of = {}                          -- [l][h] = {q = {x, y}, k = {x, y}}

  for l = 0, L - 1 do
    local q, k = heads(act(l, "attn.hook_rot_q")), heads(act(l, "attn.hook_rot_k"))
    local kp = heads(act(l, "attn.hook_k"))
    local pat = act(l, "attn.hook_pattern")[1]            -- [H,T,T]
    patterns[l + 1]:copy_(pat)
    resid[l + 1]:copy_(act(l, "hook_resid_post")[1])
    pca_of[l] = {}
    for h = 0, H - 1 do
      local qh, kh, kph = q[h + 1], k[h // group + 1], kp[h // group + 1]
      local spec_k, spec_kp = mp.analyze.spectrum(kh), mp.analyze.spectrum(kph)
      S.srank_k:set(spec_k.stable_rank, l + 1, h + 1)
      S.srank_k_pre:set(spec_kp.stable_rank, l + 1, h + 1)
      S.srank_q:set(mp.analyze.stable_rank(qh), l + 1, h + 1)
      S.sigma1_share_k:set(spec_k.sigma1_share, l + 1, h + 1)
      S.sigma1_ratio_k:set(spec_k.sigma1 / spec_kp.sigma1, l + 1, h + 1)
      local sep = mp.analyze.separation(qh, kh)
      S.cos_qk:set(sep.cos, l + 1, h + 1)
      S.dist_over_spread:set(sep.dist_over_spread, l + 1, h + 1)
      S.fisher_acc:set(sep.fisher_acc, l + 1, h + 1)
      S.k0_norm_ratio:set(mp.analyze.key_norm_ratio(kh), l + 1, h + 1)
      local mx = mp.analyze.max_qk(qh, kh)
      local pos = 0
      for t = 1, T do if mx:get(t) > 0 then pos = pos + 1 end end
      S.max_qk_mean:set(mx:mean(), l + 1, h + 1)
      S.max_qk_positive:set(pos / T, l + 1, h + 1)
      -- alpha_0 with a bootstrap interval over the queries' attention to token 0
      local to0 = {}
      for t = 1, T do to0[t] = pat:get(h + 1, t, 1) end
      local ci = mp.analyze.bootstrap(to0, {n = o.boot, seed = o.seed})
      S.alpha0:set(ci.estimate, l + 1, h + 1)
      S.alpha0_lo:set(ci.lo, l + 1, h + 1)
      S.alpha0_hi:set(ci.hi, l + 1, h + 1)
      -- stable rank of the keys in windows of positions (after the first token)
      for w = 1, nwin do
        srank_win:set(mp.analyze.stable_rank(kh:narrow(2 + (w - 1) * o.window, o.window)), l + 1, h + 1, w)
      end
      -- PCA of the pooled q and k cloud (2 components) for the scatter grid
      local pooled = mp.zeros{2 * T, Dh}
      pooled:narrow(1, T):copy_(qh)
      pooled:narrow(T + 1, T):copy_(kh)
      local pca = mp.analyze.pca(pooled, 2)
      local p = pca.proj                                  -- [2T,2]
      local qx, qy, kx, ky = {}, {}, {}, {}
      for t = 1, T do
        qx[t], qy[t] = p:get(t, 1), p:get(t, 2)
        kx[t], ky[t] = p:get(T + t, 1), p:get(T + t, 2)
      end
      pca_of[l][h] = {qx = qx, qy = qy, kx = kx, ky = ky, ratio = {pca.ratio:get(1), pca.ratio:get(2)}}
    end
  end
  local sinks = mp.analyze.sinks(patterns, {eps = o.eps})
  for l = 1, L do
    for h = 1, H do S.entropy_mean:set(sinks.entropy[l][h]:mean(), l, h) end
  end
  local massive = mp.analyze.massive(resid)

  -- 2. every number into /stats of the run file
  for k, v in pairs(S) do f:write("stats/" .. k, v) end
  f:write("stats/alpha", sinks.alpha)                 -- [L,H,T]
  f:write("stats/first_by_pos", sinks.first_by_pos)
  f:write("stats/first_by_pos_bin_start", sinks.bin_start)
  f:write("stats/srank_k_window", srank_win)
  f:write("stats/massive_ratio", massive.ratio)
  f:set_attr("stats", "sink_rate", sinks.sink_rate)
  f:set_attr("stats", "eps", o.eps)
  f:set_attr("stats", "window", o.window)
  f:set_attr("stats", "massive_hits", massive.n_hits_total)
  f:close()
  out:commit()

  -- 3. figures
  local function save(fig, name)
    local path = ("%s/%s.%s"):format(o.out, name, o.format)
    fig:save(path)
    return path
  end
  local cell = 150
  local figs = {}
  do -- PCA of q and k per head
    local fig = mp.plot.figure{rows = L, cols = H, width = cell * H, height = cell * L + 30,
      title = "Queries and keys per head (PCA of the pooled cloud, after RoPE)"}
    for l = 0, L - 1 do
      for h = 0, H - 1 do
        local c = pca_of[l][h]
        local ax = fig:axes(l + 1, h + 1)
        ax:scatter(c.qx, c.qy, {label = "queries", size = 2.5, alpha = 0.6})
        ax:scatter(c.kx, c.ky, {label = "keys", size = 2.5, alpha = 0.6})
        ax:scatter({c.kx[1]}, {c.ky[1]}, {label = "first key", size = 7, alpha = 1})
        -- axes named by component and its share of the pooled cloud's variance
        ax:set{title = ("L%d H%d"):format(l, h), xlabel = ("PC1 (%.0f%%)"):format(100 * c.ratio[1]),
               ylabel = ("PC2 (%.0f%%)"):format(100 * c.ratio[2])}
        if l == 0 and h == H - 1 then ax:legend() end
      end
    end
    figs[#figs + 1] = save(fig, "qk_pca")
  end
  do -- attention maps
    local fig = mp.plot.figure{rows = L, cols = H, width = cell * H + 40, height = cell * L + 30,
      title = "Attention patterns (query rows, key columns)"}
    for l = 1, L do
      for h = 1, H do
        fig:axes(l, h):heatmap(patterns[l][h], {mask_upper = true, colorbar = (h == H), vmin = 0, vmax = 1})
          :set{title = ("L%d H%d"):format(l - 1, h - 1)}
      end
    end
    figs[#figs + 1] = save(fig, "attention")
  end
  do -- alpha_0 per head
    local fig = mp.plot.figure{width = 80 + 40 * H, height = 80 + 36 * L}
    fig:axes(1, 1):heatmap(S.alpha0, {vmin = 0, vmax = 1, colorbar_label = "alpha_0"})
      :set{title = "Attention received by the first token", xlabel = "head (from 1)", ylabel = "layer (from 1)"}
    figs[#figs + 1] = save(fig, "alpha0")
  end
  do -- attention to the first token against query position, per layer
    local fig = mp.plot.figure{width = 420, height = 300}
    local ax = fig:axes(1, 1)
    for l = 1, L do
      local per = mp.analyze.sinks(patterns[l], {eps = o.eps})
      local x = {}
      for b = 1, per.first_by_pos:numel() do x[b] = (per.bin_start:get(b) + per.bin_end:get(b)) / 2 - 1 end  -- 0-based
      ax:line(x, per.first_by_pos, {label = ("layer %d"):format(l - 1), marker = true})
    end
    ax:set{title = "Attention to the first token (mean over heads)", xlabel = "query position", ylabel = "attention",
      ylim = {0, 1}}
    ax:legend()
    figs[#figs + 1] = save(fig, "first_token_by_position")
  end
  if nwin >= 2 then -- stable rank of keys against position window
    local fig = mp.plot.figure{width = 420, height = 300}
    local ax = fig:axes(1, 1)
    for l = 1, L do
      local x, y = {}, {}
      for w = 1, nwin do
        local s = 0
        for h = 1, H do s = s + srank_win:get(l, h, w) end
        x[w], y[w] = 1 + (w - 0.5) * o.window, s / H
      end
      ax:line(x, y, {label = ("layer %d"):format(l - 1), marker = true})
    end
    ax:set{title = ("Stable rank of keys in windows of %d positions"):format(o.window), xlabel = "position",
      ylabel = "stable rank (mean over heads)"}
    ax:legend()
    figs[#figs + 1] = save(fig, "key_stable_rank")
  end

  -- 4. verdict table
  local r = require("report").new()
  r:out(("%s: %d tokens, %d layers x %d heads, eps = %.2f, %d bootstrap resamples"):format(
    o.label or "model", T, L, H, o.eps, o.boot))
  r:out(("%-6s %-18s %-5s %8s %7s %9s %8s %7s %7s"):format(
    "head", "alpha_0 [95% CI]", "sink", "|k0|/|k|", "cos q,k", "dist/sprd", "fisher", "srank k", "srk pre"))
  local n_sink = 0
  for l = 1, L do
    for h = 1, H do
      local a = S.alpha0:get(l, h)
      local sink = S.alpha0_lo:get(l, h) > o.eps
      if a > o.eps then n_sink = n_sink + 1 end
      r:out(("L%-2dH%-2d %.3f [%.3f,%.3f] %-5s %8.3f %7.3f %9.2f %8.3f %7.2f %7.2f"):format(
        l - 1, h - 1, a, S.alpha0_lo:get(l, h), S.alpha0_hi:get(l, h),
        sink and "yes" or (a > o.eps and "weak" or "no"), S.k0_norm_ratio:get(l, h), S.cos_qk:get(l, h),
        S.dist_over_spread:get(l, h), S.fisher_acc:get(l, h), S.srank_k:get(l, h), S.srank_k_pre:get(l, h)))
    end
  end
  r:out(("sink rate (alpha_0 > %.2f): %d of %d heads (%.0f%%); 'yes' = the whole 95%% interval is above eps"):format(
    o.eps, n_sink, L * H, 100 * sinks.sink_rate))
  r:out(("massive activations (|h| > 100 and >= 1000x the layer median): %d"):format(massive.n_hits_total))
  r:out("run file: " .. run .. " (/acts, /stats)")
  for _, p in ipairs(figs) do r:out("figure: " .. p) end
  return {run = run, figures = figs, sink_rate = sinks.sink_rate, n_sink = n_sink, alpha0 = S.alpha0,
          fisher_acc = S.fisher_acc, cos_qk = S.cos_qk, massive_hits = massive.n_hits_total}

end

return M
