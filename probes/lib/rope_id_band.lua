-- rope_id_band.lua — the rotating band of a positional scheme, for the rope_id
-- probe: the angular frequency and period of every rotating channel pair (the
-- formula of runtime/pos.c, checked against the runtime's own tables by
-- rotating a unit key through hook_k -> hook_rot_k), and how near a position
-- past the training length L comes to repeating one seen in training: the
-- nearest-recurrence distance
--
--   d = min over p in [L, Tmax), p' in [0, L) of max over pairs i of |wrap((p - p') w_i)|
--
-- (radians; wrap to (-pi, pi]). A query at p >= L sees key 0 at offset p; the
-- joint rotation of that offset is within d of one seen in training. d = 0 is an
-- exact repeat (all periods divide a common offset below Tmax, e.g. periods 32,
-- 64, 128, 256 repeat every 256). d can be no larger than the fastest pair's
-- step w_max (p = L against p' = L - 1); the "far" distance restricts the
-- offsets to p - p' >= the fastest pair's period, past the trivial neighbours.
--
--   local band = require "rope_id_band"
--   local w = band.freqs{pos = "rope_id", d_head = 32, ctx = 512}   -- 8 frequencies
--   local d, off = band.recurrence(w, 512, 4096)                      -- min over offsets 1..4095
--   local err = band.runtime_error({pos = "rope_id", d_head = 32, ctx = 512}, 4096)  -- radians
--   local s = band.summary({pos = "rope_id", d_head = 32, ctx = 512}, 4096)        -- periods, distances
--   band.report(c, r, d_head); band.write_h5(c, f)    -- the probe's header lines; the run file
local M = {}

-- The angular frequencies (radians per token) of the rotating pairs of cfg =
-- {pos, d_head, ctx, rope_dims (0/nil: 2 floor(d_head/4)), rope_theta (10000)}
-- for pos "rope", "half_rope", "high_freq", "rope_id" ({} for "none" /
-- "learned"); as pos.c's pair_freq without inference-time scaling (a scaled
-- config is an error: the probe measures the bands as trained).
function M.freqs(cfg)
  local pos, Dh = cfg.pos or "rope", cfg.d_head
  if pos == "none" or pos == "learned" then return {} end
  if cfg.rope_scaling and cfg.rope_scaling ~= "none" then
    error("rope_id_band.freqs: a config with rope_scaling is not covered (the band as trained only)", 2)
  end
  if type(Dh) ~= "number" or Dh < 2 or Dh % 2 ~= 0 then
    error(("rope_id_band.freqs: d_head must be an even number >= 2 (got %s)"):format(tostring(Dh)), 2)
  end
  local d = Dh
  if pos == "half_rope" or pos == "rope_id" then
    d = (cfg.rope_dims and cfg.rope_dims > 0) and cfg.rope_dims or 2 * (Dh // 4)
  end
  local n, w = d // 2, {}
  if pos == "high_freq" or pos == "rope_id" then
    -- log-spaced from one turn per 32 tokens to two turns per ctx
    local hi, lo = 2 * math.pi / 32, 4 * math.pi / cfg.ctx
    for i = 0, n - 1 do w[i + 1] = n == 1 and hi or hi * (lo / hi) ^ (i / (n - 1)) end
  elseif pos == "rope" or pos == "half_rope" then
    local theta = cfg.rope_theta or 10000
    for i = 0, n - 1 do w[i + 1] = 1 / theta ^ (2 * i / d) end
  else
    error(("rope_id_band.freqs: unknown positional scheme '%s'"):format(tostring(pos)), 2)
  end
  return w
end

-- The periods (tokens) of frequencies w.
function M.periods(w)
  local p = {}
  for i, x in ipairs(w) do p[i] = 2 * math.pi / x end
  return p
end

local function wrap(a)   -- to (-pi, pi]
  a = math.fmod(a, 2 * math.pi)
  if a > math.pi then a = a - 2 * math.pi elseif a <= -math.pi then a = a + 2 * math.pi end
  return a
end
M.wrap = wrap

-- The nearest-recurrence distance of the band w between positions [L, Tmax)
-- and the training positions [0, L): min over offsets k = p - p' in
-- [min_offset (1), Tmax - 1] (every such k is some p - p') of max over pairs of
-- |wrap(k w_i)|. Returns the distance (radians) and the offset that attains it
-- (the first); an empty band: 0, min_offset (no rotation: every position repeats).
function M.recurrence(w, L, Tmax, min_offset)
  local k0 = min_offset or 1
  assert(L >= 1 and Tmax > L and k0 >= 1 and k0 <= Tmax - 1, "rope_id_band.recurrence: need 1 <= min_offset < Tmax, L < Tmax")
  if #w == 0 then return 0, k0 end
  local best, at = math.huge, k0
  for k = k0, Tmax - 1 do
    local m = 0
    for i = 1, #w do
      local a = math.abs(wrap(k * w[i]))
      if a > m then m = a; if m >= best then break end end
    end
    if m < best then best, at = m, k end
  end
  return best, at
end

-- The runtime's angles, read back: a one-layer model of cfg's scheme (d_head,
-- ctx, rope_dims; width 2 heads) runs T tokens with every key replaced at
-- hook_k by the unit vector (1, 0) in each channel pair, so hook_rot_k holds
-- (cos p w_i, sin p w_i) of the runtime's tables. Returns the largest
-- |wrap(angle read - p w_i)| over positions 0..T-1 and the rotating pairs
-- (radians), and the largest |rot_k| of the unrotated pairs minus (1, 0).
function M.runtime_error(cfg, T)
  local Dh = cfg.d_head
  local m = mp.model.new{d_model = 2 * Dh, n_layer = 1, n_head = 2, d_head = Dh, d_mlp = 8, vocab = 4, ctx = cfg.ctx,
                         pos = cfg.pos, rope_dims = cfg.rope_dims, rope_theta = cfg.rope_theta, seed = 1}
  local toks = {}
  for t = 1, T do toks[t] = (t - 1) % 4 end
  local pattern = {}                                          -- (1, 0) in every pair
  for j = 1, Dh do pattern[j] = j % 2 end
  local function unit(x) x:copy_(pattern) end
  local _, cache = m:run_with_cache({toks}, {names = "blocks.0.attn.hook_rot_k", logits = "none",
                                             fwd_hooks = {{"blocks.0.attn.hook_k", unit}}})
  local rk = cache["blocks.0.attn.hook_rot_k"][1]   -- [T, K, Dh]: the one sequence
  local w = M.freqs(cfg)
  local err, off = 0, 0
  for t = 1, T do
    local row = rk[t][1]
    for i = 1, Dh // 2 do
      local c, s = row:get(2 * i - 1), row:get(2 * i)
      if i <= #w then
        err = math.max(err, math.abs(wrap(math.atan(s, c) - (t - 1) * w[i])))
      else
        off = math.max(off, math.abs(c - 1), math.abs(s))
      end
    end
  end
  m:close()
  return err, off
end

-- Everything the report and the run file say of a band: {freqs, periods,
-- dist, offset (the nearest recurrence over offsets >= 1), far, far_offset
-- (over offsets >= the fastest period, rounded up), step (the fastest pair's
-- w: the largest dist can be)} for cfg and positions [L, Tmax), L = cfg.ctx.
function M.summary(cfg, Tmax)
  local w = M.freqs(cfg)
  local p = M.periods(w)
  local L = cfg.ctx
  local s = {freqs = w, periods = p}
  s.dist, s.offset = M.recurrence(w, L, Tmax)
  local pmin = math.huge
  for _, x in ipairs(p) do pmin = math.min(pmin, x) end
  local k0 = #w > 0 and math.min(Tmax - 1, math.ceil(pmin - 1e-9)) or 1
  s.far, s.far_offset = M.recurrence(w, L, Tmax, k0)
  s.far_from = k0
  s.step = #w > 0 and math.max(table.unpack(w)) or 0
  return s
end

local function list(xs, fmt)
  local t = {}
  for i, x in ipairs(xs) do t[i] = fmt:format(x) end
  return table.concat(t, ", ")
end

-- The probe's header lines on RoPE-ID's band of the text models (d_head,
-- default rope_dims, ctx = L; positions [L, Tmax)), with the runtime check;
-- leaves the summary in c.band (written by write_h5).
function M.report(c, r, d_head)
  local cfg = {pos = "rope_id", d_head = d_head, ctx = c.L}
  local s = M.summary(cfg, c.Tmax)
  s.runtime_err, s.runtime_off = M.runtime_error(cfg, c.Tmax)
  s.d_head, s.pairs = d_head, #s.freqs
  c.band = s
  r:out("  its %d rotating pairs (d_head %d, %d of %d pairs rotate): periods %s tokens (runtime tables: within %.1e rad)",
      #s.freqs, d_head, #s.freqs, d_head // 2, list(s.periods, "%.1f"), s.runtime_err)
  r:out("  nearest recurrence of a training position's joint angles in [L, %d): %.3f rad at offset %d (at most the "
      .. "one-token step %.3f); over offsets >= %d: %.3f rad at offset %d%s", c.Tmax, s.dist, s.offset, s.step, s.far_from,
      s.far, s.far_offset, s.far < 1e-6 and " (an exact repeat: every position past L repeats one seen in training)" or "")
end

-- The band into the run file's root attributes (band_periods, band_recurrence,
-- band_recurrence_offset, band_recurrence_far, band_recurrence_far_offset,
-- band_recurrence_far_from, band_runtime_err) and the dataset band/periods.
function M.write_h5(c, f)
  local s = c.band
  if not s then return end
  f:write("band/periods", #s.periods > 0 and s.periods or {0})
  f:set_attr("band/periods", "d_head", s.d_head)
  f:set_attr("/", "band_periods", #s.periods > 0 and s.periods or {0})
  f:set_attr("/", "band_recurrence", s.dist)
  f:set_attr("/", "band_recurrence_offset", s.offset)
  f:set_attr("/", "band_recurrence_far", s.far)
  f:set_attr("/", "band_recurrence_far_offset", s.far_offset)
  f:set_attr("/", "band_recurrence_far_from", s.far_from)
  f:set_attr("/", "band_runtime_err", s.runtime_err)
end

return M
