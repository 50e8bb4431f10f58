-- group_arith.lua (library) — the experiments behind `mechprobe group_arith`:
-- in-context algebra (Todd et al., ICLR 2026) on a small transformer trained
-- here. Each function is one experiment of the report and returns plain Lua
-- tables (numbers, per-item lists, Tensors); group_arith_report.lua writes them
-- to HDF5, draws the figures and judges the claims.
--
--   local ga = require "group_arith"
--   local m, train = ga.train(o)                 -- 1. training with checkpoints
--   local acc  = ga.accuracy(m, o)               -- 2. accuracy per population and distribution
--   local cov  = ga.coverage(m, o)               -- 3. solver coverage vs accuracy
--   local copy = ga.copying(m, o, acc)           -- 4. copying head (patching both ways, ablation)
--   local iden = ga.identity(m, o)               -- 5. identity recognition (DLA, PCA)
--   local prob = ga.probes(m, o)                 -- 6. closure / cancellation probes
--   local ph   = ga.phases(o, train.checkpoints) -- 7. phases over the checkpoints
--
-- Conventions: symbols are token ids 0..15 ('=' 16, '^' 17, ',' 18); layers,
-- heads and positions are 0-based (hook names); Tensor indices are 1-based.
-- Two populations: "training" (the training families C3..C10, D2..D5, the
-- paper's evaluation population) and "held-out" (Q8, C2xC4, C2xC2xC2, never
-- trained on). Accuracy is measured on both; the mechanism experiments (3-7)
-- use o.eval_groups (default "training").
local paper = require "group_arith_paper"
local M = {}

M.RULES = {"copy", "commute", "identity", "cancel", "associate"}
M.N_SYMBOLS = 16
M.POPULATIONS = {"training", "held-out"}

-- Evaluation distributions. copy, commute and identity are drawn as the paper
-- draws them (natural contexts, resampled until the query needs the rule);
-- cancel and associate are the paper's constructions (group_arith_paper:
-- contexts built from the query's row and column, or from one associative
-- triplet); cancel_natural and associate_natural are natural contexts filtered
-- by our solvers (our own design, kept as separate rows); natural is the
-- query drawn from all facts with nothing required.
M.DISTS = {"copy", "commute", "identity", "cancel", "associate", "cancel_natural", "associate_natural", "natural"}
M.CONSTRUCTED = {cancel = true, associate = true}

-- The targeted distributions: the final query is answerable by its rule and
-- by none of the rules listed before it (copy and commute are kept out by
-- holding the query pair, or the pair and its commuted pair, out of the context).
M.DIST = {
  copy              = {hold_out = "none",     require = "copy"},
  commute           = {hold_out = "pair",     require = "commute"},
  identity          = {hold_out = "commuted", require = "identity"},
  cancel_natural    = {hold_out = "commuted", require = "cancel",    exclude = "identity"},
  associate_natural = {hold_out = "commuted", require = "associate", exclude = "identity,cancel"},
  natural           = {hold_out = "none"},
  nocopy            = {hold_out = "commuted"},   -- the paper's "test": neither a b nor b a in the context
}

-- The copying curriculum (see M.train): the context shows only `pool` distinct
-- facts until that fraction of the steps (facts repeat, so copying pays off
-- early), 4 (30% of the steps), 8 and 16 (15% each), 32 (20%); the last fifth keeps a
-- quarter of its contexts at 16 distinct facts, draws the rest from the
-- natural distribution, and trains on sequences of 100 facts, so that the
-- k = 100 evaluation is inside the training length.
M.CURRICULUM = {{["until"] = 0.3, pool = 4}, {["until"] = 0.45, pool = 8}, {["until"] = 0.6, pool = 16},
                {["until"] = 0.8, pool = 32}, {["until"] = 1.0, pool = 16, share = 0.25, k = 100}}

-- The GPU preset's curriculum: shorter pooled stages, then the natural
-- distribution at k = 200 with a tenth of the contexts still pooled.
M.CURRICULUM_GPU = {{["until"] = 0.1, pool = 8}, {["until"] = 0.2, pool = 16}, {["until"] = 0.3, pool = 32},
                    {["until"] = 1.0, pool = 16, share = 0.1}}

-- Presets: model, training and evaluation sizes for --quick / --medium / full /
-- --preset gpu. The full preset trains on M.CURRICULUM (--no-curriculum drops
-- it); --curriculum gives it to the other sizes. k_list: accuracy at these k;
-- k_mech: ablation, identity, probes and phases (one of k_list); k_patch: the
-- paper-design patching (the paper uses k = 200). gpu: the paper's shape (4
-- layers, 8 heads, k = 200 facts, batch 128) at a width a GPU backend trains in
-- hours; on the CPU only with a small --steps (the test runs it so).
M.PRESETS = {
  quick  = {d_model = 32, n_layer = 2, n_head = 2, d_mlp = 96, train_k = 20, steps = 150, batch = 8, lr = 3e-3,
            warmup = 10, n_ckpt = 3, n_eval = 24, n_cov = 48, n_patch = 16, n_ident = 16, n_probe = 72,
            n_phase = 12, k_list = {50, 100}, k_mech = 50, k_patch = 50, boot = 200},
  medium = {d_model = 64, n_layer = 3, n_head = 4, d_mlp = 256, train_k = 50, steps = 900, batch = 16, lr = 2e-3,
            warmup = 50, n_ckpt = 8, n_eval = 128, n_cov = 256, n_patch = 48, n_ident = 64, n_probe = 384,
            n_phase = 48, k_list = {50, 100}, k_mech = 50, k_patch = 50, boot = 1000},
  full   = {d_model = 64, n_layer = 3, n_head = 4, d_mlp = 256, train_k = 50, steps = 9000, batch = 32, lr = 3e-3,
            warmup = 200, init_std = 0.1, curriculum = M.CURRICULUM,
            n_ckpt = 16, n_eval = 256, n_cov = 512, n_patch = 64, n_ident = 128, n_probe = 768,
            n_phase = 96, k_list = {50, 100}, k_mech = 50, k_patch = 50, boot = 2000},
  gpu    = {d_model = 512, n_layer = 4, n_head = 8, d_mlp = 2048, train_k = 200, steps = 20000, batch = 128, lr = 1e-3,
            warmup = 1000, init_std = 0.02, curriculum = M.CURRICULUM_GPU,
            n_ckpt = 16, n_eval = 512, n_cov = 1024, n_patch = 200, n_ident = 256, n_probe = 1536,
            n_phase = 128, k_list = {50, 100}, k_mech = 50, k_patch = 200, boot = 2000},
}

local CHUNK = 64   -- sequences per forward pass in evaluations

-- Training compute as Kaplan et al. count it: 6 N + 6 n_layer T d FLOPs a token
-- (N = n_layer (4 d^2 + 2 d d_mlp), T the training sequence length). The paper's
-- setup (4 layers, d 1024, d_mlp 4096, T 1024, 25B tokens) gives 8.2e18.
function M.flops(cfg, T, tokens)
  local N = cfg.n_layer * (4 * cfg.d_model ^ 2 + 2 * cfg.d_model * cfg.d_mlp)
  return (6 * N + 6 * cfg.n_layer * T * cfg.d_model) * tokens
end
-- The paper's training setup (docs/group_arith.md "Setup against the paper"): 4 layers,
-- d_model 1024, d_mlp 4096, 200k steps of 128 sequences of 1024 tokens.
M.PAPER_SETUP = {n_layer = 4, d_model = 1024, d_mlp = 4096, steps = 200000, batch = 128, T = 1024}
M.PAPER_FLOPS = M.flops(M.PAPER_SETUP, M.PAPER_SETUP.T, M.PAPER_SETUP.steps * M.PAPER_SETUP.batch * M.PAPER_SETUP.T)

-- ---------------------------------------------------------------- helpers

local function log(o, fmt, ...)
  if not o.silent then io.stderr:write(("[group_arith s%d %5ds] " .. fmt .. "\n"):format(o.seed or 0, os.time() - (o.t0 or os.time()), ...)) end
end
M.log = log

-- An evaluation task of the C generator: k facts, the distribution `dist` of
-- M.DIST (or none), population o.eval_groups unless `population` is given.
function M.task(o, k, dist, seed, extra, population)
  local pop = population or o.eval_groups or "training"
  local spec = {k = k, targets = "last", seed = seed, max_attempts = 2000000, test_groups = pop == "held-out"}
  if dist then for key, v in pairs(M.DIST[dist]) do spec[key] = v end end
  for key, v in pairs(extra or {}) do spec[key] = v end
  return mp.tasks.algebra(spec)
end

-- Samples n sequences of a task: tokens Tensor [n,T] and the truth list.
function M.sample(t, n)
  local tokens, _, truth = t:sample(n)
  return tokens, truth
end

-- n sequences of distribution `dist` (M.DISTS) over `population` with k facts:
-- the paper's constructions for cancel / associate, the C generator otherwise.
function M.draw(o, population, k, dist, seed, n)
  if M.CONSTRUCTED[dist] then return paper.construct(dist, population, k, n, seed) end
  return M.sample(M.task(o, k, dist, seed, nil, population), n)
end

-- Logits of the final position [n, V] as a table of Lua rows, in chunks of CHUNK
-- sequences; hooks (a fwd_hooks list) apply to every chunk.
function M.final_logits(m, tokens, hooks)
  local n, rows = tokens:size(1), {}
  for s = 1, n, CHUNK do
    local len = math.min(CHUNK, n - s + 1)
    local lg = m:run_with_hooks(tokens:narrow(s, len), {fwd_hooks = hooks, logits = "last"})
    for _, row in ipairs(lg:totable()) do rows[#rows + 1] = row end
  end
  return rows
end

-- Softmax probability of token id c (0-based) in a row of logits.
function M.prob(row, c)
  local mx = -math.huge
  for _, v in ipairs(row) do if v > mx then mx = v end end
  local z = 0
  for _, v in ipairs(row) do z = z + math.exp(v - mx) end
  return math.exp(row[c + 1] - mx) / z
end

function M.argmax(row)
  local best, bi = -math.huge, 1
  for i, v in ipairs(row) do if v > best then best, bi = v, i end end
  return bi - 1
end

local function mean(t)
  if #t == 0 then return 0 / 0 end
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return s / #t
end
M.mean = mean

-- Accuracy on the final query with a bootstrap interval (and P(answer)); the
-- per-item lists: correct (0/1), predicted, chance (1 / order of the query's group).
function M.score(rows, truth, o)
  local correct, p, pred, chance = {}, {}, {}, {}
  for b, row in ipairs(rows) do
    local c = truth[b].query.answer
    pred[b] = M.argmax(row)
    correct[b] = pred[b] == c and 1 or 0
    p[b] = M.prob(row, c)
    chance[b] = 1 / #truth[b].assignment[truth[b].query.group]
  end
  local ci = mp.analyze.bootstrap(correct, {n = o.boot, seed = o.seed})
  return {acc = ci.estimate, lo = ci.lo, hi = ci.hi, p_answer = mean(p), n = #rows, correct = correct,
          predicted = pred, chance = chance}
end

-- Context facts of sample b of a token Tensor: list of {a, b, c, pos} (pos = 0-based
-- position of the answer c), k facts.
function M.facts(tokens, b, k)
  local row, out = tokens[b]:totable(), {}
  for i = 0, k - 1 do
    local at = 1 + 5 * i   -- ',' of fact i (0-based); a, b, '=', c follow
    out[#out + 1] = {a = row[at + 2], b = row[at + 3], c = row[at + 5], pos = at + 4}
  end
  return out
end

-- ---------------------------------------------------------------- 1. training

-- Steps at which checkpoints are saved: 0 and n points spaced as (i/n)^1.6
-- (denser early, where skills appear), always including the last step.
function M.checkpoint_steps(steps, n)
  local set, list = {[0] = true}, {0}
  for i = 1, n do
    local s = math.max(1, math.floor(steps * (i / n) ^ 1.6 + 0.5))
    if not set[s] then set[s] = true; list[#list + 1] = s end
  end
  if not set[steps] then list[#list + 1] = steps end
  table.sort(list)
  return list
end

function M.train(o)
  local kmax = math.max(o.train_k, o.k_patch or 0)
  for _, k in ipairs(o.k_list) do kmax = math.max(kmax, k) end
  for _, c in ipairs(o.curriculum or {}) do kmax = math.max(kmax, c.k or 0) end
  local m = mp.model.new{d_model = o.d_model, n_layer = o.n_layer, n_head = o.n_head, d_mlp = o.d_mlp,
                         vocab = 19, ctx = 5 * (kmax + 1), seed = o.seed,
                         init_std = o.init_std, device = o.device or "cpu"}
  local dir = o.out .. "/checkpoints"
  mp.mkdir(dir)
  local want, saved = {}, {}
  for _, s in ipairs(M.checkpoint_steps(o.steps, o.n_ckpt)) do want[s] = true end
  local function save(step)
    local path = ("%s/step_%06d.h5"):format(dir, step)
    m:save(path)
    saved[#saved + 1] = {step = step, path = path}
  end
  save(0)
  -- next-token prediction of every answer "c" of "a b = c" (the rest of the
  -- stream is random by construction); the context varies from 0 to k facts.
  -- Curriculum (o.curriculum = {{until = fraction of the steps, pool = P, share = S, k = K}, ...}):
  -- the context first shows only P distinct facts, so facts repeat and copying
  -- pays off early; then the natural distribution. share < 1 (default 1) pools
  -- only that share of a stage's sequences, the rest natural: a last stage that
  -- keeps some repeated contexts stops copying from eroding. k (default
  -- o.train_k) sets a stage's facts a sequence, with the batch scaled to keep
  -- the tokens a step: a last stage at the longest evaluated k puts that
  -- evaluation inside the training length. One optimizer (warmup + cosine over
  -- all the steps) runs through the stages.
  local stages, from = {}, 0
  for _, c in ipairs(o.curriculum or {}) do
    local to = math.min(o.steps, math.floor(c["until"] * o.steps + 0.5))
    if to > from then stages[#stages + 1] = {steps = to - from, pool = c.pool, share = c.share or 1, k = c.k}; from = to end
  end
  if from < o.steps then stages[#stages + 1] = {steps = o.steps - from, pool = 0, share = 0} end
  for _, st in ipairs(stages) do
    st.k = st.k or o.train_k
    st.batch = math.max(1, math.floor(o.batch * (o.train_k + 1) / (st.k + 1) + 0.5))
  end
  local seq_len = 5 * (o.train_k + 1)
  log(o, "training d_model=%d n_layer=%d n_head=%d for %d steps (batch %d, k = %d facts, %d tokens a sequence)",
      o.d_model, o.n_layer, o.n_head, o.steps, o.batch, o.train_k, seq_len)
  local opt = mp.optim.adamw{lr = o.lr, warmup = o.warmup, total_steps = o.steps, weight_decay = 0.1, beta2 = 0.95,
                             grad_clip = 1.0}
  local wall0 = os.time()
  local r = {loss = {}, step = {}, tokens = 0, seconds = 0, pool = {}, pool_share = {}, k = {}}
  for si, st in ipairs(stages) do
    local task = mp.tasks.algebra{k = st.k, targets = "answers", seed = o.seed + 1000 + si,
                                  pool = st.pool > 0 and st.pool or nil, pool_share = st.pool > 0 and st.share or nil}
    if #stages > 1 then
      local what = st.pool == 0 and "the natural distribution"
                   or st.share >= 1 and ("context from %d distinct facts"):format(st.pool)
                   or ("%.0f%% of the contexts from %d distinct facts, the rest natural"):format(100 * st.share, st.pool)
      if st.k ~= o.train_k then what = what .. (", %d facts a sequence, batch %d"):format(st.k, st.batch) end
      log(o, "stage %d: %d steps, %s", si, st.steps, what)
    end
    local ri = m:train{task = task, steps = st.steps, batch = st.batch, seq_len = task.seq_len, optimizer = opt,
                       progress = o.progress, log_every = math.max(1, st.steps // 10),
                       on_step = function(step)
                         if want[step] and step ~= o.steps then save(step) end
                       end}
    for i, l in ipairs(ri.loss) do r.loss[#r.loss + 1] = l; r.step[#r.step + 1] = ri.step[i]; r.pool[#r.pool + 1] = st.pool
                                    r.pool_share[#r.pool_share + 1] = st.share
                                    r.k[#r.k + 1] = st.k end
    r.seconds = ri.time[#ri.time] or r.seconds   -- the model's cumulative training time
    r.tokens = r.tokens + st.steps * st.batch * task.seq_len
    r.final_loss = ri.final_loss
  end
  r.tokens_per_s = r.seconds > 0 and r.tokens / r.seconds or 0
  save(o.steps)
  local model_path = o.out .. "/model.h5"
  m:save(model_path)
  log(o, "trained in %.0f s (%.0f tokens/s), final loss %.3f", r.seconds, r.tokens_per_s, r.final_loss)
  return m, {loss = r.loss, step = r.step, pool = r.pool, pool_share = r.pool_share, k = r.k, seconds = r.seconds, wall = os.time() - wall0, tokens = r.tokens, tokens_per_s = r.tokens_per_s,
             final_loss = r.final_loss, checkpoints = saved, model = model_path}
end

-- ---------------------------------------------------------------- 2. accuracy

-- Accuracy on the final query per population, k of o.k_list and distribution
-- (M.DISTS): res[pop][k][dist] = M.score(...) plus the evaluation items
-- (tokens, truth, predictions) for /eval in the HDF5 file. Keeps the k_mech
-- batches of population o.eval_groups for the ablation of experiment 4.
function M.accuracy(m, o)
  local res, batches = {}, {}
  for pi, pop in ipairs(M.POPULATIONS) do
    res[pop] = {}
    for ki, k in ipairs(o.k_list) do
      res[pop][k] = {}
      for di, d in ipairs(M.DISTS) do
        local tokens, truth = M.draw(o, pop, k, d, o.seed + 1000 * pi + 100 * ki + di, o.n_eval)
        local rows = M.final_logits(m, tokens)
        local s = M.score(rows, truth, o)
        s.tokens, s.truth = tokens, truth
        res[pop][k][d] = s
        if k == o.k_mech and pop == o.eval_groups then batches[d] = {tokens = tokens, truth = truth} end
        log(o, "accuracy %-8s k=%d %-17s %.3f [%.3f, %.3f]", pop, k, d, s.acc, s.lo, s.hi)
      end
    end
  end
  res.batches = batches
  return res
end

-- ---------------------------------------------------------------- 3. coverage

-- Queries drawn uniformly from the facts (hold_out none): the share each
-- solver answers, cumulative in the order copy, commute, identity, cancel,
-- associate, and the model's accuracy overall and on each solver's new share.
function M.coverage(m, o)
  local res = {}
  for ki, k in ipairs(o.k_list) do
    local tokens, truth = M.sample(M.task(o, k, nil, o.seed + 500 + ki, {hold_out = "none"}), o.n_cov)
    local rows = M.final_logits(m, tokens)
    local n = #truth
    local cum, new_ok, new_n = {}, {}, {}
    local first = {}
    for b = 1, n do
      for ri, r in ipairs(M.RULES) do
        if truth[b].rules[r] then first[b] = ri; break end
      end
    end
    for ri = 1, #M.RULES + 1 do new_ok[ri], new_n[ri] = 0, 0 end
    local ok, items_correct, items_cov4 = 0, {}, {}
    for b = 1, n do
      local right = M.argmax(rows[b]) == truth[b].query.answer and 1 or 0
      items_correct[b], items_cov4[b] = right, (first[b] and first[b] <= 4) and 1 or 0
      ok = ok + right
      local f = first[b] or (#M.RULES + 1)
      new_n[f], new_ok[f] = new_n[f] + 1, new_ok[f] + right
    end
    local c = 0
    for ri = 1, #M.RULES do
      c = c + new_n[ri]
      cum[ri] = c / n
    end
    local acc_by = {}
    for ri = 1, #M.RULES + 1 do acc_by[ri] = new_n[ri] > 0 and new_ok[ri] / new_n[ri] or 0 / 0 end
    res[k] = {cumulative = cum, accuracy = ok / n, accuracy_by_first_rule = acc_by, share_unsolved = new_n[#M.RULES + 1] / n,
              n = n, n_by_first_rule = new_n, items_correct = items_correct, items_cov4 = items_cov4}
    log(o, "coverage k=%d: cumulative %s; model %.3f", k,
        table.concat((function() local s = {} for i, v in ipairs(cum) do s[i] = ("%.2f"):format(v) end return s end)(), " "),
        ok / n)
  end
  return res
end

-- ---------------------------------------------------------------- 4. copying head

-- Corrupts the copied fact: every context fact "x y = c" with (x, y) = (a, b)
-- (exact) or (b, a) (commuted) gets another symbol c' of the query's group
-- as its answer. Returns the corrupted tokens (a copy).
function M.corrupt(tokens, truth, k, commuted, rng)
  local out = tokens:clone()
  for b, tr in ipairs(truth) do
    local qa, qb, c = tr.query.a, tr.query.b, tr.query.answer
    local fa, fb = qa, qb
    if commuted then fa, fb = qb, qa end
    local others = {}
    for _, s in ipairs(tr.assignment[tr.query.group]) do if s ~= c then others[#others + 1] = s end end
    local c2 = others[rng(#others)]
    for _, f in ipairs(M.facts(tokens, b, k)) do
      if f.a == fa and f.b == fb then out:set(c2, b, f.pos + 1) end
    end
  end
  return out
end

-- Patches each head's hook_z at the final position from a source run into a
-- base run (item b of one into item b of the other) and measures
-- IE_b(l,h) = P(answers[b] | patched base) - P(answers[b] | base). Returns the
-- mean IE [L, H], the per-item lists items[l][h] (0-based l, h), and the mean
-- P(answer) of the source and of the base.
function M.patch_heads(m, src, base, answers)
  local cfg = m.config
  local n, T = src:size(1), src:size(2)
  local items, p_src, p_base = {}, {}, {}
  for l = 0, cfg.n_layer - 1 do
    items[l] = {}
    for h = 0, cfg.n_head - 1 do items[l][h] = {} end
  end
  for s0 = 1, n, CHUNK do
    local len = math.min(CHUNK, n - s0 + 1)
    local sc, bc = src:narrow(s0, len), base:narrow(s0, len)
    local src_logits, cache = m:run_with_cache(sc, {names = "blocks.*.attn.hook_z", logits = "last"})
    local base_rows = m:forward(bc, {logits = "last"}):totable()
    local pb = {}
    for b, row in ipairs(src_logits:totable()) do p_src[s0 + b - 1] = M.prob(row, answers[s0 + b - 1]) end
    for b, row in ipairs(base_rows) do pb[b] = M.prob(row, answers[s0 + b - 1]); p_base[s0 + b - 1] = pb[b] end
    for l = 0, cfg.n_layer - 1 do
      local name = ("blocks.%d.attn.hook_z"):format(l)
      for h = 0, cfg.n_head - 1 do
        local lg = m:run_with_hooks(bc, {logits = "last",
          fwd_hooks = {{name, mp.patch(cache[name], {head = h, positions = T - 1})}}})
        for b, row in ipairs(lg:totable()) do
          local list = items[l][h]
          list[#list + 1] = M.prob(row, answers[s0 + b - 1]) - pb[b]
        end
      end
    end
  end
  local ie = mp.zeros{cfg.n_layer, cfg.n_head}
  for l = 0, cfg.n_layer - 1 do
    for h = 0, cfg.n_head - 1 do ie:set(mean(items[l][h]), l + 1, h + 1) end
  end
  return {ie = ie, items = items, p_clean = mean(p_src), p_corrupt = mean(p_base), n = n}
end

-- Our design: patches from the clean sequence into the same sequence with the
-- copied fact's answers corrupted (M.corrupt), P(clean answer).
function M.patching(m, o, kind)
  local k = o.k_mech
  local tokens, truth = M.sample(M.task(o, k, kind, o.seed + (kind == "copy" and 700 or 701)), o.n_patch)
  math.randomseed(o.seed)
  local corrupted = M.corrupt(tokens, truth, k, kind == "commute", math.random)
  local answers = {}
  for b, tr in ipairs(truth) do answers[b] = tr.query.answer end
  local r = M.patch_heads(m, tokens, corrupted, answers)
  r.k, r.design = k, "ours"
  log(o, "patching, ours (%s copies, k=%d): P(answer) clean %.3f, corrupted %.3f, max IE %.3f", kind, k, r.p_clean,
      r.p_corrupt, r.ie:max())
  return r
end

-- The paper's design (sample_copy_counterfactual_pair, its copy notebook):
-- a copy (or commuted-copy) sequence is the source, an unrelated sequence in
-- which no copy is possible (another query pair, another answer) the base;
-- P(the source's answer) in the patched base. k = o.k_patch facts.
function M.patching_paper(m, o, kind)
  local k = o.k_patch
  local src, src_truth = M.sample(M.task(o, k, kind, o.seed + (kind == "copy" and 710 or 711)), o.n_patch)
  local base_all, base_truth = M.sample(M.task(o, k, "nocopy", o.seed + 712), 2 * o.n_patch)
  local idx, err = paper.counterfactual_pairs(src_truth, base_truth)
  if not idx then error("group_arith: counterfactual pairs: " .. err) end
  local base = mp.zeros{src:size(1), src:size(2)}
  local answers = {}
  for i, j in ipairs(idx) do
    base[i]:copy_(base_all[j])
    answers[i] = src_truth[i].query.answer
  end
  local r = M.patch_heads(m, src, base, answers)
  r.k, r.design = k, "paper"
  log(o, "patching, paper (%s copies, k=%d): P(answer) source %.3f, unrelated base %.3f, max IE %.3f", kind, k,
      r.p_clean, r.p_corrupt, r.ie:max())
  return r
end

-- Largest and second-largest entries of an [L,H] Tensor: {l, h, value} (0-based).
function M.top2(t)
  local best, second = {value = -math.huge}, {value = -math.huge}
  for l = 1, t:size(1) do
    for h = 1, t:size(2) do
      local v = t:get(l, h)
      if v > best.value then second = best; best = {l = l - 1, h = h - 1, value = v}
      elseif v > second.value then second = {l = l - 1, h = h - 1, value = v} end
    end
  end
  return best, second
end

-- Patching a head's output with its own clean value must change nothing:
-- the largest |logit change| over the batch (expected exactly 0).
function M.self_patch_check(m, tokens, l, h)
  local name = ("blocks.%d.attn.hook_z"):format(l)
  local clean, cache = m:run_with_cache(tokens, {names = name})
  local patched = m:run_with_hooks(tokens, {fwd_hooks = {{name, mp.patch(cache[name], {head = h})}}})
  return patched:sub(clean):norm(), clean:norm()
end

-- Copying heads by both designs; our design's top exact-copy head is then
-- mean-ablated (its hook_z replaced by its mean over a reference batch) on the
-- k_mech accuracy batches: per-item paired drops (clean - ablated). Ours, not
-- the paper's: in the paper's design (a head's output patched into an
-- unrelated sequence) no head of our models carries the copy alone, so its top
-- head is not a copying head and the ablation row could only say INCONCLUSIVE;
-- our design finds the head that copying leans on in its own context.
function M.copying(m, o, acc)
  local res = {paper = {exact = M.patching_paper(m, o, "copy"), commuted = M.patching_paper(m, o, "commute")},
               ours = {exact = M.patching(m, o, "copy"), commuted = M.patching(m, o, "commute")}}
  for _, design in ipairs{"paper", "ours"} do
    local d = res[design]
    d.top, d.second = M.top2(d.exact.ie)
    d.top_commuted_ie = d.commuted.ie:get(d.top.l + 1, d.top.h + 1)
  end
  local top = res.ours.top
  local name = ("blocks.%d.attn.hook_z"):format(top.l)
  local ref_tokens = M.sample(M.task(o, o.k_mech, nil, o.seed + 800), math.min(o.n_eval, 64))
  local _, ref = m:run_with_cache(ref_tokens, {names = name, logits = false})
  local hooks = {{name, mp.ablate.mean(ref[name], {head = top.h})}}
  local drop, ablated, drop_items = {}, {}, {}
  local A = acc[o.eval_groups][o.k_mech]
  for _, d in ipairs(M.RULES) do
    local bt = acc.batches[d]
    local s = M.score(M.final_logits(m, bt.tokens, hooks), bt.truth, o)
    ablated[d] = s.acc
    drop[d] = A[d].acc - s.acc
    drop_items[d] = {}
    for b, c in ipairs(A[d].correct) do drop_items[d][b] = c - s.correct[b] end
    log(o, "ablate L%dH%d: %-9s %.3f -> %.3f", top.l, top.h, d, A[d].acc, s.acc)
  end
  local diff, scale = M.self_patch_check(m, acc.batches.copy.tokens:narrow(1, math.min(8, o.n_eval)), top.l, top.h)
  res.top, res.ablated, res.drop, res.drop_items = top, ablated, drop, drop_items
  res.self_patch_diff, res.self_patch_scale = diff, scale
  return res
end

-- ---------------------------------------------------------------- 5. identity

-- The model's weights for direct logit attribution, read from its checkpoint:
-- U_h[t] = W_O,h^T (g (.) u_t) for every symbol t, so that head h's direct
-- effect on logit t is U_h[t] . z_h / rms(final residual).
function M.dla_weights(path, cfg)
  local f <close> = mp.h5.open(path)
  local g = f:read("params/ln_final.weight"):totable()
  local U = (f:has("params/unembed") and f:read("params/unembed") or f:read("params/embed")):totable()
  local D, Dh = cfg.d_model, cfg.d_head
  local W = {}
  for l = 0, cfg.n_layer - 1 do
    local wo = f:read(("params/blocks.%d.attn.wo"):format(l)):totable()   -- [D, H*Dh]
    W[l] = {}
    for h = 0, cfg.n_head - 1 do
      W[l][h] = {}
      for t = 0, M.N_SYMBOLS - 1 do
        local v = {}
        for j = 1, Dh do
          local s = 0
          for d = 1, D do s = s + wo[d][h * Dh + j] * g[d] * U[t + 1][d] end
          v[j] = s
        end
        W[l][h][t] = v
      end
    end
  end
  return W
end

-- Best accuracy of a threshold on one coordinate separating two classes.
function M.threshold_accuracy(x, y)
  local idx = {}
  for i = 1, #x do idx[i] = i end
  table.sort(idx, function(p, q) return x[p] < x[q] end)
  local n, n1 = #x, 0
  for i = 1, n do n1 = n1 + y[i] end
  local best, left1 = math.max(n1, n - n1), 0
  for r = 1, n do
    left1 = left1 + y[idx[r]]
    local left0 = r - left1
    -- class 0 on the left, class 1 on the right, or the reverse
    local a = left0 + (n1 - left1)
    best = math.max(best, a, n - a)
  end
  return best / n
end

function M.identity(m, o, model_path)
  local cfg = m.config
  local L, H, Dh = cfg.n_layer, cfg.n_head, cfg.d_head
  local W = M.dla_weights(model_path, cfg)
  local eps = cfg.norm_eps or 1e-5
  local k = o.k_mech
  local tokens, truth = M.sample(M.task(o, k, "identity", o.seed + 900), o.n_ident)
  local last = ("blocks.%d"):format(L - 1)
  local _, cache = m:run_with_cache(tokens, {logits = false,
    names = "blocks.*.attn.hook_z," .. last .. ".hook_resid_post," .. last .. ".hook_attn_out"})
  local T = tokens:size(2)
  local dla_q, dla_e, dla_x = mp.zeros{L, H}, mp.zeros{L, H}, mp.zeros{L, H}
  local q_items, e_items = {}, {}   -- per-item values [l][h][b] (0-based l, h)
  for l = 0, L - 1 do
    q_items[l], e_items[l] = {}, {}
    for h = 0, H - 1 do q_items[l][h], e_items[l][h] = {}, {} end
  end
  local z = {}
  for l = 0, L - 1 do z[l] = cache[("blocks.%d.attn.hook_z"):format(l)] end
  local resid = cache[last .. ".hook_resid_post"]
  local n = #truth
  for b = 1, n do
    local tr = truth[b]
    local qa, qb = tr.query.a, tr.query.b
    local e = tr.symbols[qa].element == 0 and qa or qb
    local x = e == qa and qb or qa
    local r = resid[b][T]:totable()
    local ss = 0
    for d = 1, #r do ss = ss + r[d] * r[d] end
    local rms = math.sqrt(ss / #r + eps)
    for l = 0, L - 1 do
      local zt = z[l][b][T]:totable()   -- [H][Dh]
      for h = 0, H - 1 do
        local zh, logit, avg = zt[h + 1], {}, 0
        for t = 0, M.N_SYMBOLS - 1 do
          local s, w = 0, W[l][h][t]
          for j = 1, Dh do s = s + w[j] * zh[j] end
          logit[t] = s / rms
          avg = avg + logit[t] / M.N_SYMBOLS
        end
        -- centred on the mean over symbols: only what changes the choice counts
        local q = ((logit[qa] - avg) + (logit[qb] - avg)) / 2
        q_items[l][h][b], e_items[l][h][b] = q, logit[e] - avg
        dla_q:set(dla_q:get(l + 1, h + 1) + q / n, l + 1, h + 1)
        dla_e:set(dla_e:get(l + 1, h + 1) + (logit[e] - avg) / n, l + 1, h + 1)
        dla_x:set(dla_x:get(l + 1, h + 1) + (logit[x] - avg) / n, l + 1, h + 1)
      end
    end
  end
  local promote = M.top2(dla_q)
  local sup = M.top2(dla_e:mul(-1))
  sup.value = -sup.value
  log(o, "identity DLA: L%dH%d promotes the query variables (%.3f), L%dH%d lowers the identity (%.3f)",
      promote.l, promote.h, promote.value, sup.l, sup.h, sup.value)
  -- PCA of the last layer's attention output at the final position: identity
  -- queries against queries without an identity
  local other, other_truth = M.sample(M.task(o, k, nil, o.seed + 901, {exclude = "identity"}), o.n_ident)
  local _, cache2 = m:run_with_cache(other, {logits = false, names = last .. ".hook_attn_out"})
  local D = cfg.d_model
  local X = mp.zeros{2 * n, D}
  local labels = {}
  for b = 1, n do
    X[b]:copy_(cache[last .. ".hook_attn_out"][b][T])
    X[n + b]:copy_(cache2[last .. ".hook_attn_out"][b][T])
    labels[b], labels[n + b] = 1, 0
  end
  local pca = mp.analyze.pca(X, 2)
  local pc1, pc2 = {}, {}
  for i = 1, 2 * n do pc1[i], pc2[i] = pca.proj:get(i, 1), pca.proj:get(i, 2) end
  local sep = M.threshold_accuracy(pc1, labels)
  log(o, "identity PCA: PC1 (%.0f%% of the variance) separates identity facts with accuracy %.3f",
      100 * pca.ratio:get(1), sep)
  return {dla_query = dla_q, dla_identity = dla_e, dla_other = dla_x, promote = promote, suppress = sup,
          items = {promote_q = q_items[promote.l][promote.h], promote_e = e_items[promote.l][promote.h],
                   suppress_q = q_items[sup.l][sup.h], suppress_e = e_items[sup.l][sup.h]},
          pc1 = pc1, pc2 = pc2, labels = labels, pc1_separation = sep, pc_ratio = pca.ratio, n = n,
          n_other = #other_truth}
end

-- ---------------------------------------------------------------- 6. probes

-- Per-symbol labels of a sample: in_group[s] (s is a symbol of the query's
-- group) and answered[s] (s is the answer of a context fact "a x = s" with
-- x ~= b or "x b = s" with x ~= a: by cancellation it cannot be a*b).
function M.probe_labels(tokens, b, tr, k)
  local in_group, answered = {}, {}
  for s = 0, M.N_SYMBOLS - 1 do
    in_group[s] = (tr.symbols[s] and tr.symbols[s].group == tr.query.group) and 1 or 0
    answered[s] = 0
  end
  local qa, qb = tr.query.a, tr.query.b
  for _, f in ipairs(M.facts(tokens, b, k)) do
    if (f.a == qa and f.b ~= qb) or (f.b == qb and f.a ~= qa) then answered[f.c] = 1 end
  end
  return in_group, answered
end

-- Balanced accuracy (mean of the two class recalls) of scores > 0.5.
local function balanced_accuracy(scores, y)
  local tp, p, tn, nn = 0, 0, 0, 0
  for i = 1, #y do
    local hat = scores:get(i) > 0.5 and 1 or 0
    if y[i] == 1 then p = p + 1; tp = tp + hat else nn = nn + 1; tn = tn + (1 - hat) end
  end
  if p == 0 or nn == 0 then return nil end
  return 0.5 * (tp / p + tn / nn)
end

-- Logistic probes on the residual stream at the final '=' (hook_embed, then
-- each block's hook_resid_post), one per symbol and property; held-out
-- balanced accuracy averaged over the symbols, by layer.
function M.probes(m, o)
  local cfg = m.config
  local L, D, k = cfg.n_layer, cfg.d_model, o.k_mech
  local tokens, truth = M.sample(M.task(o, k, nil, o.seed + 1100), o.n_probe)
  local n, T = #truth, tokens:size(2)
  local feats = {}
  for l = 0, L do feats[l] = mp.zeros{n, D} end
  local names = {[0] = "hook_embed"}
  for l = 1, L do names[l] = ("blocks.%d.hook_resid_post"):format(l - 1) end
  local glob = table.concat(names, ",", 0, L)
  for s = 1, n, CHUNK do
    local len = math.min(CHUNK, n - s + 1)
    local _, cache = m:run_with_cache(tokens:narrow(s, len), {names = glob, logits = false})
    for l = 0, L do
      for b = 1, len do feats[l][s + b - 1]:copy_(cache[names[l]][b][T]) end
    end
  end
  local labels = {in_group = {}, answered = {}}
  for b = 1, n do
    local g, a = M.probe_labels(tokens, b, truth[b], k)
    for s = 0, M.N_SYMBOLS - 1 do
      labels.in_group[s] = labels.in_group[s] or {}
      labels.answered[s] = labels.answered[s] or {}
      labels.in_group[s][b], labels.answered[s][b] = g[s], a[s]
    end
  end
  local n_train = math.floor(n * 2 / 3)
  local res = {layers = L + 1, n_train = n_train, n_test = n - n_train}
  for _, prop in ipairs{"in_group", "answered"} do
    local acc, base, used = mp.zeros{L + 1}, mp.zeros{L + 1}, 0
    for l = 0, L do
      local Xtr, Xte = feats[l]:narrow(1, n_train), feats[l]:narrow(n_train + 1, n - n_train)
      local sum, cnt, bsum = 0, 0, 0
      for s = 0, M.N_SYMBOLS - 1 do
        local y = labels[prop][s]
        local ytr, yte, ntr1, nte1 = {}, {}, 0, 0
        for i = 1, n_train do ytr[i] = y[i]; ntr1 = ntr1 + y[i] end
        for i = n_train + 1, n do yte[i - n_train] = y[i]; nte1 = nte1 + y[i] end
        if ntr1 > 0 and ntr1 < n_train and nte1 > 0 and nte1 < #yte then
          local p = mp.analyze.probe(Xtr, ytr, {kind = "logistic", ridge = o.ridge or 1.0})
          local ba = balanced_accuracy(p:predict(Xte), yte)
          if ba then sum, cnt = sum + ba, cnt + 1 end
          bsum = bsum + math.max(nte1, #yte - nte1) / #yte
        end
      end
      acc:set(cnt > 0 and sum / cnt or 0 / 0, l + 1)
      base:set(cnt > 0 and bsum / cnt or 0 / 0, l + 1)
      used = math.max(used, cnt)
    end
    res[prop] = {balanced_accuracy = acc, majority = base, symbols = used}
    local best = -math.huge
    for l = 1, L + 1 do if acc:get(l) == acc:get(l) and acc:get(l) > best then best = acc:get(l) end end
    res[prop].best = best
    log(o, "probe %-8s: balanced accuracy by layer %s", prop,
        table.concat((function() local s = {} for l = 1, L + 1 do s[l] = ("%.2f"):format(acc:get(l)) end return s end)(), " "))
  end
  return res
end

-- ---------------------------------------------------------------- 7. phases

-- Accuracy per distribution at each saved checkpoint (fixed evaluation
-- batches), plus two format skills on the natural distribution: "structure"
-- (the prediction is a symbol) and "closure" (it is a symbol of the query's group).
M.PHASE_SKILLS = {"structure", "closure", "copy", "commute", "identity", "cancel", "associate"}

function M.phases(o, checkpoints, threshold)
  threshold = threshold or 0.9
  local k = o.k_mech
  local batches = {}
  for di, d in ipairs(M.RULES) do
    batches[d] = {M.draw(o, o.eval_groups, k, d, o.seed + 1300 + di, o.n_phase)}
  end
  batches.natural = {M.sample(M.task(o, k, nil, o.seed + 1399), o.n_phase)}
  local steps, curves = {}, {}
  for _, s in ipairs(M.PHASE_SKILLS) do curves[s] = {} end
  for ci, ck in ipairs(checkpoints) do
    local m = mp.load(ck.path, {device = o.device or "cpu"})
    steps[ci] = ck.step
    for _, d in ipairs(M.RULES) do
      local tokens, truth = table.unpack(batches[d])
      local rows, ok = M.final_logits(m, tokens), 0
      for b, row in ipairs(rows) do if M.argmax(row) == truth[b].query.answer then ok = ok + 1 end end
      curves[d][ci] = ok / #rows
    end
    local tokens, truth = table.unpack(batches.natural)
    local rows, sym, grp = M.final_logits(m, tokens), 0, 0
    for b, row in ipairs(rows) do
      local p = M.argmax(row)
      if p < M.N_SYMBOLS then
        sym = sym + 1
        if truth[b].symbols[p] and truth[b].symbols[p].group == truth[b].query.group then grp = grp + 1 end
      end
    end
    curves.structure[ci], curves.closure[ci] = sym / #rows, grp / #rows
    m:close()
    log(o, "phases: step %d: %s", ck.step, table.concat((function()
      local s = {} for i, sk in ipairs(M.PHASE_SKILLS) do s[i] = ("%s %.2f"):format(sk, curves[sk][ci]) end return s end)(), " "))
  end
  local crossing = {}
  for _, s in ipairs(M.PHASE_SKILLS) do
    for ci, v in ipairs(curves[s]) do
      if v >= threshold then crossing[s] = steps[ci]; break end
    end
  end
  return {steps = steps, curves = curves, crossing = crossing, threshold = threshold}
end

return M
