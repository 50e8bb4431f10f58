-- rope_id_geo.lua — prefix-frame key geometry for the rope_id probe (issue 21):
-- what a query at position t sees is the whole prefix of keys [0, t). Its
-- logits are q_t' R(t)' R(s) k_s = q_t' R(s - t) k_s, so in the query's frame
-- the keys are R(s - t) k_s = R(t)' (R(s) k_s): one orthogonal matrix R(t)'
-- times the post-rotation keys R(s) k_s (hook_rot_k). Singular values and
-- the cosine of two centroids are invariant under a common orthogonal map, so
-- the statistics of the prefix in the query's frame equal those of the rows
-- [0, t) of hook_rot_k. Unlike a fixed-size window, the prefix grows with t:
-- past L it takes in keys at angles R(s) never seen in training, which is
-- what can raise its stable rank. The pre-rotation keys (hook_k) are the
-- control: the same statistic without any rotation.
--
--   local geo = require "rope_id_geo"
--   local st = geo.prefix_stats(K, lengths [, Q])  -- K, Q: [T, Dh]; st.srank[i], st.s1[i], st.cos[i] over rows [0, lengths[i])
--   local P = geo.prefix_geometry(m, token_lists, lengths)
--       -- P[stat][l][h][i] (stat: srank_rot, s1_rot, srank_pre, s1_pre, cos_rot), means over sequences
local M = {}

M.stats = {"srank_rot", "s1_rot", "srank_pre", "s1_pre", "cos_rot"}

-- Stable rank and first-singular-value share of the rows [0, n) of K for every
-- n in lengths (mp.analyze.spectrum on a view of K), and with Q the cosine of
-- the centroids of Q's and K's rows [0, n) (mp.analyze.separation).
function M.prefix_stats(K, lengths, Q)
  local st = {srank = {}, s1 = {}, cos = {}}
  for i, n in ipairs(lengths) do
    if n > K:size(1) then error(("rope_id: prefix length %d exceeds the %d keys"):format(n, K:size(1)), 2) end
    local sp = mp.analyze.spectrum(K:narrow(1, n))
    st.srank[i], st.s1[i] = sp.stable_rank, sp.sigma1_share
    if Q then st.cos[i] = mp.analyze.separation(Q:narrow(1, n), K:narrow(1, n)).cos end
  end
  return st
end

-- Per head of model m, on the sequences toks (token lists of length >= max
-- lengths): prefix statistics of the rotated keys (with the rotated queries'
-- centroid cosine) and of the pre-rotation keys, at every prefix length.
function M.prefix_geometry(m, toks, lengths)
  local cfg = m.config
  local NL, H, K = cfg.n_layer, cfg.n_head, cfg.n_kv_head
  local group = H // K
  local P = {}
  for _, s in ipairs(M.stats) do
    P[s] = {}
    for l = 1, NL do
      P[s][l] = {}
      for h = 1, H do P[s][l][h] = {}; for i = 1, #lengths do P[s][l][h][i] = 0 end end
    end
  end
  local names = "blocks.*.attn.hook_rot_q,blocks.*.attn.hook_rot_k,blocks.*.attn.hook_k"
  for _, tk in ipairs(toks) do
    local _, cache = m:run_with_cache({tk}, {names = names, logits = "none"})
    for l = 0, NL - 1 do
      local q = cache[("blocks.%d.attn.hook_rot_q"):format(l)][1]:permute{2, 1, 3}   -- [H,T,Dh]
      local kr = cache[("blocks.%d.attn.hook_rot_k"):format(l)][1]:permute{2, 1, 3}  -- [K,T,Dh]
      local kp = cache[("blocks.%d.attn.hook_k"):format(l)][1]:permute{2, 1, 3}
      for h = 0, H - 1 do
        local rot = M.prefix_stats(kr[h // group + 1], lengths, q[h + 1])
        local pre = M.prefix_stats(kp[h // group + 1], lengths)
        for i = 1, #lengths do
          local a = {srank_rot = rot.srank[i], s1_rot = rot.s1[i], cos_rot = rot.cos[i], srank_pre = pre.srank[i],
                     s1_pre = pre.s1[i]}
          for s, v in pairs(a) do P[s][l + 1][h + 1][i] = P[s][l + 1][h + 1][i] + v / #toks end
        end
      end
    end
  end
  return P
end

-- Per-head values of P[stat] at prefix index j over index 1 (the prefix [0, L)),
-- flattened over layers and heads, appended to out (a list).
function M.head_ratios(P, stat, j, out)
  out = out or {}
  for _, hs in ipairs(P[stat]) do
    for _, v in ipairs(hs) do out[#out + 1] = v[j] / v[1] end
  end
  return out
end

return M
