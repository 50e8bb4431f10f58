-- mirror_construct.lua — the three-layer mechanism of D'Angelo & Flammarion as
-- actual weights of a runtime model (set through m:param), run by the ordinary
-- forward pass: one step of mirror descent from the uniform start on an MTD
-- sequence.
--
--   local C = require "mirror_construct"
--   local model = C.build(task:pi(), {m = 3, ctx = 192, beta = function(T) return ... end})
--   local logits = model:forward(tokens)     -- row T: the predictor of y_T after y_0..y_{T-1}
--
-- The residual stream is a set of named channel blocks (one-hot tokens and
-- positions, then the values each layer writes); a constant channel of size
-- `big` dominates every RMSNorm, so each norm is (to float precision) a fixed
-- scale that its gain undoes.
--   block 0 attention: the query at position k attends to keys k-1..k-m with
--     scores log pi*(y_{k-g}, y_k) (a positional mask of -mask elsewhere), so its
--     pattern on the lags IS the responsibilities gamma_k(g); the values are the
--     keys' one-hot positions, so it writes sum_g gamma_k(g) e(k-g).
--   block 0 MLP (SwiGLU as a gated product): reads that mixture back with the
--     query's own one-hot position into gamma_k(1..m).
--   block 1 attention: uniform over the positions k >= m (a mask on k < m):
--     mean_k gamma_k, the gradient of the log-likelihood at the uniform start.
--   block 1 MLP: writes beta(T) * mean gamma_g onto the key slot of lag g
--     (position k+1-g), beta chosen per query position (a weight per neuron).
--   block 2 attention: the query attends to its last m positions with those
--     scores, so the weights are lambda = softmax(beta mean gamma) (one MD step
--     with eta = beta / (m N)); the values are the rows pi*(y_j, .), so it
--     writes the predictor sum_g lambda_g pi*(y_{T-g}, .).
--   block 2 MLP: log of each probability (a piecewise-linear interpolant on
--     geometric knots, from softened ReLUs anchored at the right so that no
--     large terms cancel), which the unembedding reads out as logits.
-- Not exact because: the masks are finite (-mask, exp(-1e4) = 0 in float32), the
-- norms vary by |rest|^2 / big^2, the gated products leave silu(-c/2) ~ c e^(-c/2)
-- off their position, and the log interpolant is off by up to (r-1)^2/8 plus
-- the softening (0.28 log r / kappa per knot) and is floored below x_min.
local M = {}

M.defaults = {big = 1e4, mask = 1e4, gate = 60, x_min = 1e-5, ratio = 1.04, kappa = 100}

-- channel layout: returns the offsets (0-based) and the width D
local function layout(q, m, P)
  local L, off = {}, 0
  local function take(name, n) L[name] = off; off = off + n end
  take("one", 1); take("tok", q); take("pos", P); take("rel", P); take("gam", m); take("lam", m)
  take("qry", P); take("out", q); take("logp", q)
  return L, off
end

local function silu(x) return x / (1 + math.exp(-x)) end

-- knots t_0 < ... < t_K = 1 (t_i = ratio^(i-K)) and the coefficients d_i of
-- F(x) = sum_i d_i relu(t_i - x), the chord interpolant of log on the knots
-- (F(1) = 0, linear with the first chord's slope below t_0)
local function log_knots(x_min, r)
  local K = math.ceil(math.log(1 / x_min) / math.log(r))
  local t = {}
  for i = 0, K do t[i] = r ^ (i - K) end
  local c = {}
  for i = 0, K - 1 do c[i] = (math.log(t[i + 1]) - math.log(t[i])) / (t[i + 1] - t[i]) end
  local d = {}
  for i = 1, K - 1 do d[i] = c[i] - c[i - 1] end
  d[K] = -c[K - 1]
  return t, d, K
end

-- o: m (lags), ctx (positions P), beta(T) -> the readout scale for the
-- prediction after T tokens (query position T-1), and the optional scales above.
-- Returns the model (vocab q = pi's size, 3 layers, learned positions).
function M.build(pi, o)
  local q, m, P = pi:size(1), o.m, o.ctx
  local big, mask, cg = o.big or M.defaults.big, o.mask or M.defaults.mask, o.gate or M.defaults.gate
  local x_min, ratio, kappa = o.x_min or M.defaults.x_min, o.ratio or M.defaults.ratio, o.kappa or M.defaults.kappa
  local L, D = layout(q, m, P)
  local t, d, K = log_knots(x_min, ratio)
  local Dh = P + q
  local n_mlp = math.max(m * P, q * K)
  local model = mp.model.new{d_model = D, n_layer = 3, n_head = 1, d_head = Dh, d_mlp = n_mlp, vocab = q, ctx = P,
                             pos = "learned", norm = "rms", mlp = "swiglu", tied = false, norm_eps = 1e-12, seed = 1}
  for _, name in ipairs(model:params()) do model:param(name):fill_(0) end
  local gain = math.sqrt(big * big / D + 1e-12)   -- RMS of a residual that is all `big` channel
  local s = math.sqrt(Dh)                         -- undoes the 1/sqrt(d_head) of the scores
  local on = silu(cg / 2)                         -- a gate at its own position
  local view = {}   -- one view per parameter (each m:param call makes a new one)
  local function set(name, v, i, j)
    local t = view[name]
    if not t then t = model:param(name); view[name] = t end
    t:set(v, i + 1, j + 1)
  end
  -- embeddings: the constant channel and one-hot tokens; one-hot positions
  for v = 0, q - 1 do set("embed", big, v, L.one); set("embed", 1, v, L.tok + v) end
  for p = 0, P - 1 do set("pos_embed", 1, p, L.pos + p) end
  for l = 0, 2 do
    model:param(("blocks.%d.ln1.weight"):format(l)):fill_(gain)
    model:param(("blocks.%d.ln2.weight"):format(l)):fill_(gain)
  end
  model:param("ln_final.weight"):fill_(gain)
  local function logpi(b, a) return math.log(math.max(pi:get(b + 1, a + 1), 1e-30)) end
  -- a gated unit that is on at query position p: silu(cg (pos_p - 1/2))
  local function gate_at(l, n, p)
    set(("blocks.%d.mlp.w1"):format(l), cg, n, L.pos + p)
    set(("blocks.%d.mlp.w1"):format(l), -cg / 2 / big, n, L.one)
  end

  -- block 0: responsibilities
  for p = 0, P - 1 do
    for j = 0, P - 1 do
      local lag = p - j
      if lag < 1 or lag > m then set("blocks.0.attn.wq", -mask * s, j, L.pos + p) end
    end
    set("blocks.0.attn.wk", 1, p, L.pos + p)
    set("blocks.0.attn.wv", 1, p, L.pos + p)
    set("blocks.0.attn.wo", 1, L.rel + p, p)
  end
  for a = 0, q - 1 do
    for b = 0, q - 1 do set("blocks.0.attn.wq", logpi(b, a) * s, P + b, L.tok + a) end
    set("blocks.0.attn.wk", 1, P + a, L.tok + a)
  end
  local n = 0
  for g = 1, m do
    for p = g, P - 1 do      -- unit (g, p): gamma_k(g) = rel[k - g] at k = p
      gate_at(0, n, p)
      set("blocks.0.mlp.w3", 1, n, L.rel + p - g)
      set("blocks.0.mlp.w2", 1 / on, L.gam + g - 1, n)
      n = n + 1
    end
  end

  -- block 1: the uniform average over positions >= m, then beta(T) onto the lag slots
  set("blocks.1.attn.wq", s / big, 0, L.one)
  for p = 0, m - 1 do set("blocks.1.attn.wk", -mask, 0, L.pos + p) end
  for g = 1, m do
    set("blocks.1.attn.wv", 1, g - 1, L.gam + g - 1)
    set("blocks.1.attn.wo", 1, L.lam + g - 1, g - 1)
  end
  n = 0
  for g = 1, m do
    for p = g - 1, P - 1 do  -- query position p predicts y_{p+1}; lag g sits at p + 1 - g
      local beta = o.beta(p + 1)
      if beta and beta ~= 0 then
        gate_at(1, n, p)
        set("blocks.1.mlp.w3", 1, n, L.lam + g - 1)
        set("blocks.1.mlp.w2", beta / on, L.qry + p + 1 - g, n)
        n = n + 1
      end
    end
  end

  -- block 2: the readout attention over the last m positions, values pi*(y_j, .)
  for p = 0, P - 1 do
    set("blocks.2.attn.wq", s, p, L.qry + p)
    for j = 0, P - 1 do
      local back = p - j
      if back < 0 or back > m - 1 then set("blocks.2.attn.wq", -mask * s, j, L.pos + p) end
    end
    set("blocks.2.attn.wk", 1, p, L.pos + p)
  end
  for b = 0, q - 1 do
    for c = 0, q - 1 do set("blocks.2.attn.wv", pi:get(b + 1, c + 1), c, L.tok + b) end
  end
  for c = 0, q - 1 do set("blocks.2.attn.wo", 1, L.out + c, c) end
  -- block 2 MLP: logp[c] = sum_i d_i relu(t_i - out[c]), relu(z) ~ silu(C z) / C with C = kappa / t_i
  n = 0
  for c = 0, q - 1 do
    for i = 1, K do
      local C = kappa / t[i]
      set("blocks.2.mlp.w1", -C, n, L.out + c)
      set("blocks.2.mlp.w1", kappa / big, n, L.one)
      set("blocks.2.mlp.w3", d[i] / C / big, n, L.one)
      set("blocks.2.mlp.w2", 1, L.logp + c, n)
      n = n + 1
    end
  end
  for v = 0, q - 1 do set("unembed", 1, v, L.logp + v) end
  return model, {layout = L, d_model = D, d_mlp = n_mlp, knots = K}
end

return M
