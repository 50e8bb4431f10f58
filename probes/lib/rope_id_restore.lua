-- rope_id_restore.lua — the rope_id probe's causal test of the sink mechanism
-- (row C10): past the training length L, give the RoPE text model's sink heads
-- back their inside-L view of the first key, and measure whether their
-- first-token attention and the loss past L recover, against the same restore
-- on as many random non-sink heads (the control).
--
-- The restore: RoPE rotates q_t by t w and k_0 by 0, so the score of key 0 for
-- the query at t is q_t^pre . R(-t w) k_0^pre: the relative offset t, unseen in
-- training once t >= L. For every query t >= L of a restored head the score of
-- key 0 (hook_attn_scores) is replaced by the one the same pre-rotation query
-- and key have at offset tau = L - 1, (R((tau - t) w) q_t^rot) . k_0^rot /
-- sqrt(Dh) (hook_rot_q, hook_rot_k of the same pass; the other keys' scores are
-- left as they are). tau = L - 1 (not t mod L): the largest offset of training,
-- where the query, like one past L, has the most keys to share its attention
-- with; t mod L would give the queries just past each multiple of L a near-zero
-- offset, a sink geometry (and key count) of the first tokens of a window.
-- Before replacing, each score is checked against q_t^rot . k_0^rot / sqrt(Dh)
-- (score_err: the largest relative difference; a scheme with other score
-- factors would show here, and the row says so).
--
-- Per seed, on B_text validation windows of Tmax tokens (one forward pass per
-- window and condition): (a) first-token attention of the sink heads, queries
-- [1, L) intact, queries [L, Tmax) intact and restored; (b) the loss of the
-- predictions at positions [L, Tmax): intact, sink heads restored, control
-- heads restored. Written under seeds/<seed>/restore/ of the run file; read
-- back by load (nil for a run file written before this test: the row is then
-- INCONCLUSIVE, never an error).
--
--   local restore = require "rope_id_restore"
--   local heads = restore.sink_heads(first_inside, eps)          -- {{l, h}, ...} 0-based
--   local R = restore.measure(m, toks, tgts, L, heads, ctrl)     -- the numbers of one seed
local band = require "rope_id_band"
local M = {}

M.CONTROL_SEED = 7919      -- the control heads' draw: o.seed * CONTROL_SEED

-- The heads (0-based {l, h}) whose first-token attention inside L
-- (first_inside[l][h], 1-based tables) is above eps, in layer-head order.
function M.sink_heads(first_inside, eps)
  local out = {}
  for l, hs in ipairs(first_inside) do
    for h, a in ipairs(hs) do if a > eps then out[#out + 1] = {l - 1, h - 1} end end
  end
  return out
end

-- n heads drawn without replacement from the non-sink heads (first-token
-- attention inside L at most eps), by a 64-bit LCG seeded with `seed` (the same
-- heads on every platform), in layer-head order.
function M.control_heads(first_inside, eps, n, seed)
  local pool = {}
  for l, hs in ipairs(first_inside) do
    for h, a in ipairs(hs) do if not (a > eps) then pool[#pool + 1] = {l - 1, h - 1} end end
  end
  local x = math.tointeger(seed) or 1
  local function nxt(k)
    x = x * 6364136223846793005 + 1442695040888963407
    return ((x >> 33) % k) + 1
  end
  for i = #pool, 2, -1 do          -- Fisher-Yates
    local j = nxt(i)
    pool[i], pool[j] = pool[j], pool[i]
  end
  local out = {}
  for i = 1, math.min(n, #pool) do out[i] = pool[i] end
  table.sort(out, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  return out
end

function M.head_names(heads)
  local t = {}
  for i, lh in ipairs(heads) do t[i] = ("L%dH%d"):format(lh[1], lh[2]) end
  return table.concat(t, ",")
end

-- The forward hooks that restore key 0's score for the queries t >= L of
-- `heads` (0-based {l, h}; nil or {}: none) and read every listed head's
-- first-token attention (`read`, a list of {l, h}) into acc: acc.in_[k] (queries
-- 1..L-1) and acc.past[k] (queries L..T-1) summed over sequences, per head k of
-- `read`; acc.err: the largest relative difference of an intact score from
-- q.k/sqrt(Dh). w: the rotating pairs' frequencies; tau the offset.
local function hooks(m, L, heads, read, w, tau, acc)
  local cfg = m.config
  local Dh, group = cfg.d_head, cfg.n_head // cfg.n_kv_head
  local scale = 1 / math.sqrt(Dh)
  local by_layer, read_layer = {}, {}
  for _, lh in ipairs(heads or {}) do
    by_layer[lh[1]] = by_layer[lh[1]] or {}
    table.insert(by_layer[lh[1]], lh[2])
  end
  for k, lh in ipairs(read) do
    read_layer[lh[1]] = read_layer[lh[1]] or {}
    table.insert(read_layer[lh[1]], {h = lh[2], k = k})
  end
  -- the hooks see slices of the activation (hook.axis, hook.offset: the score
  -- and pattern rows come in blocks of queries): every index below is absolute
  local function off(hook, axis)
    if hook.axis == axis then return hook.offset end
    if hook.full_shape[hook.axis] ~= 1 then       -- a batch of one: any other slicing is of the batch
      error(("rope_id_restore: %s sliced along dim %d"):format(hook.name, hook.axis), 0)
    end
    return 0
  end
  local out, store = {}, {}
  for l, hs in pairs(by_layer) do
    local pre = ("blocks.%d.attn."):format(l)
    store[l] = {q = {}}
    for _, h in ipairs(hs) do store[l].q[h] = {} end
    out[#out + 1] = {pre .. "hook_rot_q", function(x, hook)  -- [1, T, H, Dh] (rows from o)
      local o = off(hook, 2)
      local q = x[1]:permute{2, 1, 3}                          -- [H, n, Dh]
      for _, h in ipairs(hs) do
        local rows, dst = q[h + 1]:totable(), store[l].q[h]
        for r, v in ipairs(rows) do dst[o + r] = v end
      end
    end}
    out[#out + 1] = {pre .. "hook_rot_k", function(x, hook)  -- [1, T, K, Dh]: key 0's rows
      if off(hook, 2) == 0 then store[l].k0 = x[1][1]:totable() end
    end}
    out[#out + 1] = {pre .. "hook_attn_scores", function(x, hook)  -- [1, H, n, T]: queries o .. o + n - 1
      local o, n = off(hook, 3), x:size(3)
      local cs, sn = {}, {}
      for t = math.max(L, o), o + n - 1 do                     -- 0-based query positions past L
        cs[t], sn[t] = {}, {}
        for i = 1, #w do
          local a = (tau - t) * w[i]
          cs[t][i], sn[t][i] = math.cos(a), math.sin(a)
        end
      end
      for _, h in ipairs(hs) do
        local q, k0 = store[l].q[h], store[l].k0[h // group + 1]
        local sc = x[1][h + 1]                                 -- [n, T]
        for t = math.max(L, o), o + n - 1 do
          local qt, c, s = q[t + 1], cs[t], sn[t]
          local dot0, dot = 0, 0
          for i = 1, Dh // 2 do
            local x0, x1 = qt[2 * i - 1], qt[2 * i]
            dot0 = dot0 + x0 * k0[2 * i - 1] + x1 * k0[2 * i]
            if i <= #w then x0, x1 = x0 * c[i] - x1 * s[i], x0 * s[i] + x1 * c[i] end
            dot = dot + x0 * k0[2 * i - 1] + x1 * k0[2 * i]
          end
          local have = sc:get(t - o + 1, 1)
          local e = math.abs(have - dot0 * scale) / (1 + math.abs(have))
          if e > acc.err then acc.err = e end
          sc:set(dot * scale, t - o + 1, 1)
        end
      end
    end}
  end
  for l, hs in pairs(read_layer) do
    out[#out + 1] = {("blocks.%d.attn.hook_pattern"):format(l), function(x, hook)   -- [1, H, n, T]
      local o, n = off(hook, 3), x:size(3)
      local T = hook.full_shape[3]
      for _, e in ipairs(hs) do
        local p = x[1][e.h + 1]
        local a, b = 0, 0
        for t = math.max(1, o), math.min(L - 1, o + n - 1) do a = a + p:get(t - o + 1, 1) end
        for t = math.max(L, o), o + n - 1 do b = b + p:get(t - o + 1, 1) end
        acc.in_[e.k] = acc.in_[e.k] + a / (L - 1)
        acc.past[e.k] = acc.past[e.k] + b / (T - L)
      end
    end}
  end
  return out
end

local function zeros(n) local t = {}; for i = 1, n do t[i] = 0 end; return t end

-- The numbers of one seed: model m (RoPE), the windows toks / tgts ([B, T]
-- tensors, T > L), the sink heads and the control heads (0-based {l, h}).
-- Returns {loss = {intact, restored, control}, first = {per sink head {inside,
-- past intact, past restored}}, first_control = {per control head {past
-- intact, past restored}}, score_err, tau, T, n_seq}. With no sink heads the
-- restored and control losses are NaN.
function M.measure(m, toks, tgts, L, sinks, ctrl, opts)
  opts = opts or {}
  local cfg = m.config
  local w = band.freqs{pos = cfg.pos, d_head = cfg.d_head, rope_dims = cfg.rope_dims, ctx = cfg.ctx,
                       rope_theta = cfg.rope_theta}
  local tau = opts.tau or (L - 1)
  local B, T = toks:size(1), toks:size(2)
  assert(T > L, "rope_id_restore.measure: the windows must be longer than L")
  local all = {}
  for _, lh in ipairs(sinks) do all[#all + 1] = lh end
  for _, lh in ipairs(ctrl) do all[#all + 1] = lh end
  local acc = {}
  for _, cond in ipairs{"intact", "restored", "control"} do
    acc[cond] = {in_ = zeros(#all), past = zeros(#all), err = 0, loss = 0}
  end
  local conds = {{"intact", nil}}
  if #sinks > 0 then conds[2], conds[3] = {"restored", sinks}, {"control", ctrl} end
  for b = 1, B do
    local tok = toks:narrow(b, 1)
    local tgt = mp.full({1, T}, -1)
    tgt[1]:narrow(L + 1, T - L):copy_(tgts[b]:narrow(L + 1, T - L))    -- the predictions at positions [L, T)
    for _, cd in ipairs(conds) do
      local a = acc[cd[1]]
      local hk = hooks(m, L, cd[2], all, w, tau, a)
      a.loss = a.loss + m:loss(tok, tgt, {fwd_hooks = hk}) / B
    end
    collectgarbage()
  end
  local nan = 0 / 0
  local R = {tau = tau, T = T, n_seq = B, score_err = math.max(acc.restored.err, acc.control.err),
             loss = {acc.intact.loss, #sinks > 0 and acc.restored.loss or nan, #sinks > 0 and acc.control.loss or nan},
             first = {}, first_control = {}}
  for k = 1, #all do
    local ins, past = acc.intact.in_[k] / B, acc.intact.past[k] / B
    if k <= #sinks then
      R.first[k] = {ins, past, acc.restored.past[k] / B}
    else
      R.first_control[k - #sinks] = {past, acc.control.past[k] / B}
    end
  end
  return R
end

-- The probe's stage (after the geometry): the RoPE text model's sink heads
-- (first-token attention inside L above eps, from the geometry's window
-- statistics), as many control heads, measure, and the report's lines.
-- Leaves c.RESTORE (the numbers as written by write_h5).
function M.run(c, r)
  local o, L, Tmax = c.o, c.L, c.Tmax
  local t0 = os.time()
  local first_in = c.SPLIT.rope.first.inside
  local sinks = M.sink_heads(first_in, o.eps)
  local ctrl = M.control_heads(first_in, o.eps, #sinks, o.seed * M.CONTROL_SEED)
  c.text:seed(o.seed * 100 + 14)
  local toks, tgts = c.text:sample(o.B_text, Tmax, "val")
  local R = M.measure(c.models.text.rope, toks, tgts, L, sinks, ctrl)
  R.sinks, R.ctrl, R.eps = sinks, ctrl, o.eps
  c.RESTORE, c.s4 = R, os.time() - t0
  r:out("")
  r:out("-- 3d. Restoring the RoPE sink heads' first key past L (C10): for queries t >= L the score of key 0 is the one")
  r:out("   of the same pre-rotation q and k at offset tau = L - 1 = %d; %d windows of %d; loss of the predictions at", R.tau,
      R.n_seq, Tmax)
  r:out("   [L, %d); control: as many random non-sink heads restored the same way", Tmax)
  if #sinks == 0 then
    r:out("no RoPE sink head (first-token attention > %.2f inside L): nothing to restore; loss past L %.4f", o.eps,
        R.loss[1])
    return
  end
  r:out("sink heads %s; control heads %s; score check %.1e (intact score vs q.k/sqrt(Dh), relative)",
      M.head_names(sinks), #ctrl > 0 and M.head_names(ctrl) or "none", R.score_err)
  for k, lh in ipairs(sinks) do
    local f = R.first[k]
    r:out("  L%dH%d first-token attention: inside L %.3f; past L intact %.3f, restored %.3f", lh[1], lh[2], f[1], f[2],
        f[3])
  end
  for k, lh in ipairs(ctrl) do
    local f = R.first_control[k]
    r:out("  control L%dH%d first-token attention past L: intact %.3f, restored %.3f", lh[1], lh[2], f[1], f[2])
  end
  r:out("loss past L: intact %.4f, sink heads restored %.4f (gain %+.4f), control restored %.4f (gain %+.4f)", R.loss[1],
      R.loss[2], R.loss[1] - R.loss[2], R.loss[3], R.loss[1] - R.loss[3])
end

-- One seed's numbers into the run file f under seeds/<seed>/restore/.
function M.write_h5(c, f)
  local R = c.RESTORE
  local g = ("seeds/%d/restore/"):format(c.o.seed)
  f:write(g .. "loss", R.loss)                                   -- intact, restored, control (past L)
  local A = {n_sink = #R.sinks, n_control = #R.ctrl, sink_heads = M.head_names(R.sinks),
             control_heads = M.head_names(R.ctrl), tau = R.tau, T = R.T, L = c.L, n_sequences = R.n_seq,
             score_err = R.score_err, eps = R.eps, rows = "intact,restored,control"}
  for k, v in pairs(A) do f:set_attr(g .. "loss", k, v) end
  if #R.first > 0 then
    f:write(g .. "first", R.first)                               -- [sink heads, 3]: inside, past intact, past restored
    f:set_attr(g .. "first", "columns", "inside,past_intact,past_restored")
  end
  if #R.first_control > 0 then
    f:write(g .. "first_control", R.first_control)               -- [control heads, 2]: past intact, past restored
    f:set_attr(g .. "first_control", "columns", "past_intact,past_restored")
  end
end

-- One seed's numbers from the run file f, or nil when it has none (a run file
-- written before this test).
function M.load(f, seed)
  local g = ("seeds/%d/restore/"):format(seed)
  if not f:has(g .. "loss") then return nil end
  local a = f:attrs(g .. "loss")
  local R = {loss = f:read(g .. "loss"):totable(), n_sink = a.n_sink, n_ctrl = a.n_control, score_err = a.score_err,
             tau = a.tau, sink_heads = a.sink_heads, first = {}, first_control = {}}
  if (a.n_sink or 0) > 0 then R.first = f:read(g .. "first"):totable() end
  if (a.n_control or 0) > 0 then R.first_control = f:read(g .. "first_control"):totable() end
  return R
end

-- The inputs of rules.C10 from the runs (load_runs: c.RESTORE per seed, nil
-- when absent) and the seeds as text: per seed with sink heads the gains
-- (intact minus restored loss past L; intact minus control), the sink heads'
-- mean first-token attention inside L, past L intact and restored; best: the
-- best first-token attention of any RoPE head (described when none is a sink).
function M.rule_input(runs, seeds, best)
  local x = {gain = {}, gain_ctrl = {}, first_in = {}, first_past = {}, first_restored = {}, restore_seeds = {},
             score_err = 0, missing = 0, n_heads = {}, heads = {}, best = best}
  for s, c in ipairs(runs) do
    local R = c.RESTORE
    if not R then
      x.missing = x.missing + 1
    elseif (R.n_sink or 0) > 0 then
      local k = #x.restore_seeds + 1
      x.restore_seeds[k] = seeds[s]
      x.gain[k], x.gain_ctrl[k] = R.loss[1] - R.loss[2], R.loss[1] - R.loss[3]
      local a, b, d = 0, 0, 0
      for _, f in ipairs(R.first) do a, b, d = a + f[1] / #R.first, b + f[2] / #R.first, d + f[3] / #R.first end
      x.first_in[k], x.first_past[k], x.first_restored[k] = a, b, d
      x.n_heads[k], x.heads[k] = R.n_sink, R.sink_heads
      x.score_err = math.max(x.score_err, R.score_err or 0)
    end
  end
  return x
end

return M
