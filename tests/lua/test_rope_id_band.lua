-- test_rope_id_band.lua — RoPE-ID's rotating band (probes/lib/rope_id_band.lua)
-- and the sink restore (probes/lib/rope_id_restore.lua), against independent
-- computations:
--   band     the periods against their closed form 32 * (L/64)^(i/(n-1)); the
--            runtime's tables (a unit key through hook_k -> hook_rot_k) against
--            the formula, for rope_id, high_freq, rope and half_rope; the
--            nearest-recurrence distance by a direct double loop over (p, p')
--            in this file: the old full band (d_head 16, L 512) repeats exactly
--            (distance 0), the full preset's band (d_head 32) stays above 0.1
--            rad (and above 1 rad past the first 32 offsets), and the library
--            agrees with the loop.
--   restore  on a small RoPE model: the restored first-token attention equals a
--            softmax recomputed in this file from the cached rotated q / k with
--            key 0's score at offset tau; restoring with the runtime's own
--            offset (a model without rotation, or tau = t) changes nothing; the
--            control heads are non-sink heads, reproducible; the row reads back.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local band = require "rope_id_band"
local restore = require "rope_id_restore"
local rid = require "rope_id"

local TWO_PI = 2 * math.pi
local function wrap(a) return a - TWO_PI * math.floor((a + math.pi) / TWO_PI) end

-- ---- the closed form of RoPE-ID's band, written out here (not the library's)
local function closed_form(n, L)
  local w = {}
  for i = 0, n - 1 do w[i + 1] = TWO_PI / (32 * (L / 64) ^ (i / (n - 1))) end
  return w
end

-- min over p in [L, Tmax), p' in [0, L) of max_i |wrap((p - p') w_i)|: the direct
-- double loop (each offset p - p' is met many times; every pair is visited)
local function loop_distance(w, L, Tmax, min_offset)
  local best = math.huge
  for p = L, Tmax - 1 do
    for q = 0, L - 1 do
      if p - q >= (min_offset or 1) then
        local m = 0
        for i = 1, #w do m = math.max(m, math.abs(wrap(p * w[i] - q * w[i]))) end
        if m < best then best = m end
      end
    end
  end
  return best
end

-- 1. periods: library = closed form
for _, case in ipairs{{16, 512}, {32, 512}, {16, 256}, {64, 512}} do
  local Dh, L = case[1], case[2]
  local w = band.freqs{pos = "rope_id", d_head = Dh, ctx = L}
  local want = closed_form(Dh // 4, L)
  check(#w == Dh // 4, ("d_head %d: %d rotating pairs"):format(Dh, #w))
  local e = 0
  for i = 1, #want do e = math.max(e, math.abs(w[i] - want[i]) / want[i]) end
  near(e, 0, 1e-12, ("d_head %d, L %d: frequencies = 2 pi / (32 (L/64)^(i/(n-1)))"):format(Dh, L))
end
do
  local p = band.periods(band.freqs{pos = "rope_id", d_head = 16, ctx = 512})
  near(p[1], 32, 1e-9, "old band period 1"); near(p[2], 64, 1e-9, "old band period 2")
  near(p[3], 128, 1e-9, "old band period 3"); near(p[4], 256, 1e-9, "old band period 4")
  local r = band.freqs{pos = "rope", d_head = 16, ctx = 512}
  check(#r == 8, "rope: every pair rotates")
  near(r[2], 10000 ^ (-2 / 16), 1e-15, "rope: theta^(-2i/d)")
  check(#band.freqs{pos = "none", d_head = 16, ctx = 512} == 0, "none: no band")
  check(#band.freqs{pos = "half_rope", d_head = 32, ctx = 512, rope_dims = 8} == 4, "half_rope rope_dims 8: 4 pairs")
end

-- 2. the runtime's tables = the formula (angles within float rounding)
for _, cfg in ipairs{{pos = "rope_id", d_head = 32, ctx = 512}, {pos = "rope_id", d_head = 16, ctx = 512},
                     {pos = "high_freq", d_head = 16, ctx = 256}, {pos = "rope", d_head = 16, ctx = 64},
                     {pos = "half_rope", d_head = 16, ctx = 64, rope_dims = 6}} do
  local err, off = band.runtime_error(cfg, 2048)
  check(err < 1e-5, ("%s d_head %d ctx %d: runtime angles = formula over 2048 positions (%.2g rad)"):format(cfg.pos,
    cfg.d_head, cfg.ctx, err))
  check(off < 1e-6, ("%s: the unrotated pairs stay (1, 0) (%.2g)"):format(cfg.pos, off))
end

-- 3. nearest recurrence over [L, 8L): the old band repeats, the preset's does not
local TOL = 0.1            -- radians: the stated tolerance
do
  local L, Tmax = 512, 4096
  local old = closed_form(4, L)
  local d_old = loop_distance(old, L, Tmax)
  near(d_old, 0, 1e-9, "old band (d_head 16, L 512): an exact repeat, by the direct loop")
  local lib_old, off_old = band.recurrence(band.freqs{pos = "rope_id", d_head = 16, ctx = L}, L, Tmax)
  near(lib_old, 0, 1e-9, "old band: library distance 0")
  check(off_old == 256, "old band: first exact repeat at offset 256, got " .. tostring(off_old))
  local p = rid.preset("full")
  check(p.d_head == 32 and p.L == L and p.mults[#p.mults] == 8, "full preset: d_head 32, L 512, up to 8L")
  local new = closed_form(p.d_head // 4, L)
  local d_new = loop_distance(new, L, Tmax)
  check(d_new > TOL, ("full preset's band: nearest recurrence %.4f rad > %.1f (direct loop)"):format(d_new, TOL))
  near(d_new, TWO_PI / 32, 1e-9, "full preset's band: the nearest is the one-token step 2 pi / 32")
  local s = band.summary({pos = "rope_id", d_head = p.d_head, ctx = L}, Tmax)
  near(s.dist, d_new, 1e-12, "library distance = direct loop")
  check(s.offset == 1, "nearest at offset 1 (position L against L - 1)")
  local far = loop_distance(new, L, Tmax, 32)
  check(far > 1.0, ("full preset's band past the first 32 offsets: %.4f rad > 1"):format(far))
  near(s.far, far, 1e-12, "library far distance = direct loop")
  check(s.far_from == 32, "far distance from offset 32 (the fastest period)")
  check(loop_distance(old, L, Tmax, 32) < 1e-9, "old band past 32 offsets: still an exact repeat")
end

-- 4. the restore on a small RoPE model (1 layer: the restored pattern is the
-- softmax of the scores recomputed here from the cached rotated q and k)
do
  local L, T, Dh, H = 16, 100, 8, 2      -- T > 64: the score and pattern hooks see blocks of 64 queries
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = H, d_head = Dh, d_mlp = 32, vocab = 11, ctx = L,
                         pos = "rope", seed = 3}
  -- sharper scores than at initialisation (where every score is near 0 and
  -- attention near uniform whatever the rotation): W_Q and W_K times 20
  m:set_weight("W_Q", 0, m:W_Q(0) * 20)
  m:set_weight("W_K", 0, m:W_K(0) * 20)
  mp.manual_seed(5)
  local toks = (mp.rand{2, T} * 11):clamp(0, 10.5)
  local tk, tg = {}, {}
  for b = 1, 2 do
    tk[b], tg[b] = {}, {}
    for j = 1, T do tk[b][j] = math.floor(toks:get(b, j)); tg[b][j] = math.floor(toks:get(b, (j % T) + 1)) end
  end
  local TK, TG = mp.tensor(tk), mp.tensor(tg)
  local sinks, ctrl = {{0, 1}}, {{0, 0}}
  local R = restore.measure(m, TK, TG, L, sinks, ctrl)
  check(R.score_err < 1e-5, ("intact scores = q.k/sqrt(Dh) (%.2g)"):format(R.score_err))
  -- the reference: rotated q, k cached; score of key 0 at offset L - 1 recomputed here
  local w = band.freqs{pos = "rope", d_head = Dh, ctx = L}
  local sum_in, sum_past, sum_rest = 0, 0, 0
  for b = 1, 2 do
    local _, cache = m:run_with_cache({tk[b]}, {names = "blocks.0.attn.hook_*", logits = "none"})
    local q = cache["blocks.0.attn.hook_rot_q"][1]:permute{2, 1, 3}[2]   -- head 1: [T, Dh]
    local k = cache["blocks.0.attn.hook_rot_k"][1]:permute{2, 1, 3}[2]
    local sc = cache["blocks.0.attn.hook_attn_scores"][1][2]
    local pat = cache["blocks.0.attn.hook_pattern"][1][2]
    for t0 = 1, L - 1 do sum_in = sum_in + pat:get(t0 + 1, 1) / (L - 1) end
    for t0 = L, T - 1 do
      sum_past = sum_past + pat:get(t0 + 1, 1) / (T - L)
      -- R((L-1) - t0) applied to q_t's pairs, dotted with k_0
      local s0 = 0
      for i = 1, Dh // 2 do
        local a = (L - 1 - t0) * w[i]
        local x0, x1 = q:get(t0 + 1, 2 * i - 1), q:get(t0 + 1, 2 * i)
        s0 = s0 + (x0 * math.cos(a) - x1 * math.sin(a)) * k:get(1, 2 * i - 1)
               + (x0 * math.sin(a) + x1 * math.cos(a)) * k:get(1, 2 * i)
      end
      s0 = s0 / math.sqrt(Dh)
      local mx, z = s0, 0
      for j = 2, t0 + 1 do mx = math.max(mx, sc:get(t0 + 1, j)) end
      z = math.exp(s0 - mx)
      for j = 2, t0 + 1 do z = z + math.exp(sc:get(t0 + 1, j) - mx) end
      sum_rest = sum_rest + math.exp(s0 - mx) / z / (T - L)
    end
  end
  near(R.first[1][1], sum_in / 2, 1e-5, "first-token attention inside L (intact) = the cached pattern")
  near(R.first[1][2], sum_past / 2, 1e-5, "first-token attention past L (intact) = the cached pattern")
  near(R.first[1][3], sum_rest / 2, 1e-5, "restored first-token attention = softmax recomputed with key 0 at offset L-1")
  check(math.abs(R.first[1][3] - R.first[1][2]) > 1e-3, ("the restore changes the sink head's attention (%.4f -> %.4f)")
        :format(R.first[1][2], R.first[1][3]))
  near(R.loss[1], m:loss(TK, (function()
    local g = mp.full({2, T}, -1)
    for b = 1, 2 do g[b]:narrow(L + 1, T - L):copy_(TG[b]:narrow(L + 1, T - L)) end
    return g end)()), 1e-5, "intact loss past L = m:loss on the targets past L")
  check(R.loss[2] == R.loss[2] and math.abs(R.loss[2] - R.loss[1]) > 1e-6, "the restore changes the loss")
  -- the restore at the runtime's own geometry changes nothing: a model without
  -- rotation (no band: R(anything) = 1)
  local m0 = mp.model.new{d_model = 16, n_layer = 1, n_head = H, d_head = Dh, d_mlp = 32, vocab = 11, ctx = L,
                          pos = "none", seed = 3}
  m0:set_weight("W_Q", 0, m0:W_Q(0) * 20)
  m0:set_weight("W_K", 0, m0:W_K(0) * 20)
  local R0 = restore.measure(m0, TK, TG, L, sinks, ctrl)
  near(R0.loss[2], R0.loss[1], 1e-6, "no rotation: restored loss = intact")
  near(R0.first[1][3], R0.first[1][2], 1e-6, "no rotation: restored attention = intact")
  m0:close()
  -- no sink heads: the intact loss only, NaN for the others
  local Rn = restore.measure(m, TK, TG, L, {}, {})
  check(Rn.loss[2] ~= Rn.loss[2] and Rn.loss[3] ~= Rn.loss[3] and #Rn.first == 0, "no sink heads: NaN gains")
  near(Rn.loss[1], R.loss[1], 1e-6, "no sink heads: the same intact loss")
  m:close()
end

-- 5. sink and control heads
do
  local first = {{0.9, 0.05, 0.1, 0.02}, {0.01, 0.5, 0.03, 0.04}}
  local s = restore.sink_heads(first, 0.3)
  check(restore.head_names(s) == "L0H0,L1H1", "sink heads above eps: " .. restore.head_names(s))
  local c1 = restore.control_heads(first, 0.3, 2, 7)
  local c2 = restore.control_heads(first, 0.3, 2, 7)
  check(#c1 == 2 and restore.head_names(c1) == restore.head_names(c2), "control heads: 2, reproducible")
  for _, lh in ipairs(c1) do check(first[lh[1] + 1][lh[2] + 1] <= 0.3, "control head is not a sink") end
  local seen = {}
  for seed = 1, 40 do seen[restore.head_names(restore.control_heads(first, 0.3, 1, seed))] = true end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  check(n == 6, ("one control head over 40 seeds: all 6 non-sink heads drawn (%d)"):format(n))
  check(#restore.control_heads(first, 0.3, 9, 1) == 6, "no more control heads than non-sink heads")
end

t.finish("test_rope_id_band")
