-- sinks_train.lua — `mechprobe sinks --preset NAME`: train byte-level rotary
-- models from scratch under the sink recipe and watch attention sinks emerge,
-- over seeds (Gu et al., "When Attention Sink Emerges in Language Models: An
-- Empirical View", ICLR 2025: sinks appear in every LM pre-trained on enough
-- data, after enough optimization; their metric Sink_eps, eps = 0.3, the share
-- of heads whose mean attention to the first token exceeds eps).
--
--   local st = require "sinks_train"
--   local p = st.preset("quick"); p.out = DIR
--   local res = st.run(p)    -- {verdicts, h5, seeds, frac[seed i] = {per checkpoint}}
--
-- For every seed: a model (RMSNorm, SwiGLU, RoPE, grouped KV heads) trained on
-- the rope_id corpus (Debian's licences and fortunes, or --corpus), each window
-- starting with a fixed BOS at position 0 (without it nothing sinks here:
-- experiments/sink_recipe.lua), at a high learning rate; at step 0 and at
-- `checkpoints` points along the training: every head's alpha_0 (the mean over
-- queries t >= 1 of pattern[t, 0] on held-out windows of the training length),
-- the sink heads (alpha_0 > eps), the training and held-out loss. Then the
-- fraction of sink heads pooled over the seeds (mean, 95% t-interval), the
-- verdicts (C1, C2 below), DIR/sinks_train.h5, DIR/report.txt,
-- DIR/verdicts.tsv, DIR/sink_fraction.<fmt>, the checkpoints
-- DIR/models/seed<N>.h5, and the per-head sinks analysis of the first seed's
-- model on held-out text in DIR/analysis/ (as `mechprobe sinks --model`).
local M = {}
local report = require "report"
local rules_ci = require("mirror_rules").mean_ci

local S, N, I = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
M.MIN_SEEDS = 3
M.FLOOR = 0.01     -- a sink fraction below 1% of heads counts as none (Gu et al.'s level before sinks emerge)

-- analysis_tokens, window, boot, boot_seed: the per-head analysis of the
-- first seed's model (sinks --max-tokens, --window, --boot, --seed)
local base = {eps = 0.3, pos = "rope", bos = true, wd = 0.1, val_windows = 4, analysis_tokens = 256, window = 32,
              boot = 1000, boot_seed = 1}

-- quick/medium: the quickstart's model and recipe (1.2M tokens; whether it
-- grows sink heads depends on the seed: 7, 3 and 0 of 32 at seeds 1-3 here);
-- full: the text model of `rope_id --medium` (4.9M tokens: its RoPE models
-- grew sink heads in 6 of 7 seeds), 5 seeds (3 gave 6, 1 and 2 sink
-- heads of 32: every seed some, but a t-interval with 2 degrees of freedom
-- that reaches below 0); gpu: toward Gu et al.'s
-- setup (a 60M LLaMA at context 2048 on the Pile) for a GPU backend: d_model
-- 512, 8 layers of 8 heads of 64 (25M parameters besides the byte
-- embeddings), context 2048, 65k tokens a step; on the CPU only with a small
-- --steps, --length and --d-model.
M.presets = {
  quick = {d_model = 64, n_layer = 4, n_head = 8, n_kv_head = 4, d_head = 16, d_mlp = 172, L = 128, batch = 16,
           steps = 600, lr = 1e-2, checkpoints = 4, seeds = {1}},
  medium = {d_model = 64, n_layer = 4, n_head = 8, n_kv_head = 4, d_head = 16, d_mlp = 172, L = 128, batch = 16,
            steps = 600, lr = 1e-2, checkpoints = 6, seeds = {1, 2, 3}},
  full = {d_model = 128, n_layer = 4, n_head = 8, n_kv_head = 8, d_head = 16, d_mlp = 256, L = 256, batch = 16,
          steps = 1200, lr = 1e-2, checkpoints = 6, seeds = {1, 2, 3, 4, 5}},
  gpu = {d_model = 512, n_layer = 8, n_head = 8, n_kv_head = 8, d_head = 64, d_mlp = 1376, L = 2048, batch = 32,
         steps = 1500, lr = 3e-3, checkpoints = 6, seeds = {1, 2, 3}},
}

function M.preset(name) return require("cli").preset(base, M.presets, name) end

-- alpha_0 per [layer][head] (1-based tables), averaged over the windows `toks`
-- (a list of token lists, each starting at position 0). mp.analyze.sinks gives
-- the mean over queries t >= 0, whose first row is the first token attending to
-- itself (1); leaving it out: (T alpha_0 - 1) / (T - 1).
function M.alpha0(m, toks)
  local cfg = m.config
  local names = {}
  for l = 0, cfg.n_layer - 1 do names[#names + 1] = ("blocks.%d.attn.hook_pattern"):format(l) end
  local _, cache = m:run_with_cache(toks, {names = table.concat(names, ","), logits = "none"})
  local B, T, A = #toks, #toks[1], {}
  for l = 0, cfg.n_layer - 1 do
    local a0 = mp.analyze.sinks(cache[("blocks.%d.attn.hook_pattern"):format(l)]).alpha0   -- [B, H]
    A[l + 1] = {}
    for h = 1, cfg.n_head do
      local s = 0
      for b = 1, B do s = s + (T * a0:get(b, h) - 1) / (T - 1) end
      A[l + 1][h] = s / B
    end
  end
  return A
end

-- The share of heads with alpha_0 > eps, and their count.
function M.sink_fraction(A, eps)
  local n, k = 0, 0
  for _, row in ipairs(A) do for _, a in ipairs(row) do n = n + 1; if a > eps then k = k + 1 end end end
  return k / n, k, n
end

-- ---------------------------------------------------------------- rules
-- Pure functions of per-seed numbers, unit-tested on planted inputs
-- (tests/lua/test_sinks_train.lua). x.final[i], x.init[i]: seed i's sink
-- fraction at the end and at step 0; x.learned: every model's held-out loss is
-- below the corpus's unigram entropy (it uses context). Each returns
-- {id, claim, paper, ours, word, rule, lo, hi, seeds}.

local ci_text = require("rope_id_rules").ci_text

local function nseeds(n) return n == 1 and "1 seed" or ("%d seeds"):format(n) end

local PAPER = "Gu et al. (60M LLaMA, context 2048, the Pile): sink heads (Sink_0.3) under 1% after 50M tokens, "
  .. "about 4% after 0.5B, 18% after 5B"

-- C1: the recipe grows sink heads.
function M.C1(x)
  local m, lo, hi = rules_ci(x.final)
  local ours = ("sink fraction at the end %s (%s)"):format(ci_text(m, lo, hi), nseeds(#x.final))
  local word
  if not x.learned then word = I; ours = ours .. "; a model did not learn the text (held-out loss >= unigram entropy)"
  elseif #x.final < M.MIN_SEEDS then word = I; ours = ours .. ("; %d seeds needed"):format(M.MIN_SEEDS)
  elseif lo > M.FLOOR then word = S
  elseif hi < M.FLOOR then word = N
  else word = I end
  return {id = "C1", claim = "the models grow attention-sink heads", paper = PAPER, ours = ours, word = word,
          lo = lo, hi = hi, seeds = #x.final,
          rule = ("precondition: every model's held-out loss below the unigram entropy and >= %d seeds, else "
            .. "INCONCLUSIVE; the fraction of heads with alpha_0 > eps at the end of training, mean and 95%% "
            .. "t-interval over the seeds: SUPPORTED if the interval is above %.2f, NOT SUPPORTED if below, else "
            .. "INCONCLUSIVE"):format(M.MIN_SEEDS, M.FLOOR)}
end

-- C2: the sinks emerge in training (absent at initialization).
function M.C2(x)
  local d = {}
  for i = 1, #x.final do d[i] = x.final[i] - x.init[i] end
  local m, lo, hi = rules_ci(d)
  local fm, flo = rules_ci(x.final)
  local ours = ("sink fraction gained in training %s (%s)"):format(ci_text(m, lo, hi), nseeds(#d))
  local word
  if not x.learned then word = I; ours = ours .. "; a model did not learn the text"
  elseif #d < M.MIN_SEEDS then word = I; ours = ours .. ("; %d seeds needed"):format(M.MIN_SEEDS)
  elseif lo > M.FLOOR then word = S
  elseif hi < M.FLOOR and flo > M.FLOOR then word = N   -- sink heads at the end, but already there at step 0
  else
    word = I
    if not (flo > M.FLOOR) then
      ours = ours .. ("; sink heads at the end not established (%.3f, interval not above %.2f)"):format(fm, M.FLOOR)
    end
  end
  return {id = "C2", claim = "sink heads emerge in training (none at initialization)",
          paper = "Gu et al.: sinks emerge after effective optimization on enough data", ours = ours, word = word,
          lo = lo, hi = hi, seeds = #d,
          rule = ("precondition as C1; per seed the sink fraction at the end minus at step 0, mean and 95%% "
            .. "t-interval over the seeds: SUPPORTED if above %.2f; NOT SUPPORTED if below %.2f while the end's "
            .. "fraction is above it (sinks present at initialization); else INCONCLUSIVE (also when no sink "
            .. "heads are there at the end)"):format(M.FLOOR, M.FLOOR)}
end

-- ---------------------------------------------------------------- the run

local function log(fmt, ...)
  io.stderr:write(("[sinks %s] " .. fmt .. "\n"):format(os.date("%H:%M:%S"), ...)); io.stderr:flush()
end

-- The byte unigram entropy of `text` (nats/byte): what a model that ignores
-- context reaches.
function M.unigram_entropy(text)
  local counts, H = {}, 0
  for i = 1, #text do local b = text:byte(i); counts[b] = (counts[b] or 0) + 1 end
  for _, c in pairs(counts) do local p = c / #text; H = H - p * math.log(p) end
  return H
end

-- One seed: train with measurements at step 0 and at each checkpoint.
local function train_seed(o, corpus, seed)
  local task = mp.tasks.text{path = corpus, ctx = o.L, seed = seed, bos = o.bos}
  local vt, vg = task:sample(o.val_windows, o.L, "val")
  local vtoks = vt:tolist()
  local m = mp.model.new{d_model = o.d_model, n_layer = o.n_layer, n_head = o.n_head, n_kv_head = o.n_kv_head,
                         d_head = o.d_head, d_mlp = o.d_mlp, vocab = task.vocab, ctx = o.L, pos = o.pos, seed = seed,
                         tokenizer = "bytes", device = o.device or "cpu", precision = o.precision or "fp32"}
  task:seed(seed * 100 + 7)
  local r = {step = {0}, tokens = {0}, A = {M.alpha0(m, vtoks)}, train_loss = {0 / 0}, val_loss = {m:loss(vt, vg)},
             frac = {}, count = {}}
  local t0 = os.time()
  local done = 0
  for k = 1, o.checkpoints do
    local seg = (o.steps * k) // o.checkpoints - done
    local rec = m:train{task = task, steps = seg, batch = o.batch, lr = o.lr, warmup = o.steps // 10,
                        total_steps = o.steps, weight_decay = o.wd, progress = o.progress or false}
    done = done + seg
    r.step[#r.step + 1], r.tokens[#r.tokens + 1] = done, done * o.batch * o.L
    r.A[#r.A + 1] = M.alpha0(m, vtoks)
    r.train_loss[#r.train_loss + 1] = rec.final_loss
    r.val_loss[#r.val_loss + 1] = m:loss(vt, vg)
  end
  for i, A in ipairs(r.A) do r.frac[i], r.count[i], r.heads = M.sink_fraction(A, o.eps) end
  r.seconds = os.time() - t0
  r.path = ("%s/models/seed%d.h5"):format(o.out, seed)
  m:save(r.path)
  r.model, r.task = m, task
  return r
end

local function write_h5(o, runs, pooled, V, H)
  local path = o.out .. "/sinks_train.h5"
  local out <close> = mp.output(path)           -- written under a temporary name, renamed when complete
  local f <close> = mp.h5.open(out.tmp, "w")
  f:set_attr("/", "format", "mechprobe.sinks_train")
  f:set_attr("/", "preset", o.preset)
  f:set_attr("/", "device", o.device or "cpu")
  f:set_attr("/", "precision", o.precision or "fp32")
  f:set_attr("/", "seeds", table.concat(o.seeds, ","))
  f:set_attr("/", "eps", o.eps)
  f:set_attr("/", "unigram_entropy", H)
  for _, k in ipairs{"d_model", "n_layer", "n_head", "n_kv_head", "d_head", "d_mlp", "L", "batch", "steps", "lr", "wd",
                     "checkpoints", "val_windows"} do
    f:set_attr("/", k, o[k])
  end
  f:set_attr("/", "pos", o.pos)
  for i, r in ipairs(runs) do
    local g = ("seeds/%d/"):format(o.seeds[i])
    f:write(g .. "alpha0", r.A)                                    -- [checkpoint, layer, head]
    f:write(g .. "step", r.step, {int32 = true})
    f:write(g .. "tokens", r.tokens)
    f:write(g .. "sink_fraction", r.frac)
    f:write(g .. "sink_heads", r.count, {int32 = true})
    f:write(g .. "train_loss", r.train_loss)                       -- NaN at step 0
    f:write(g .. "val_loss", r.val_loss)
    f:set_attr(g .. "alpha0", "checkpoint", r.path)
    f:set_attr(g .. "alpha0", "seconds", r.seconds)
  end
  f:write("pooled/sink_fraction", {pooled.mean, pooled.lo, pooled.hi})   -- [mean, lo, hi][checkpoint]
  f:set_attr("pooled/sink_fraction", "rows", "mean,lo,hi (95% t-interval over the seeds; -inf/inf with one seed)")
  for _, v in ipairs(V) do
    local g = "verdicts/" .. v.id
    f:write(g .. "/interval", {v.lo, v.hi})
    for _, k in ipairs{"claim", "paper", "ours", "word", "rule"} do f:set_attr(g, k, v[k]) end
    f:set_attr(g, "seeds", v.seeds)
  end
  f:close()
  out:commit()
  return path
end

-- The sink fraction against training tokens: each seed (runs[i].tokens,
-- runs[i].frac) and the mean with its band (pooled.mean/lo/hi); o: seeds, eps,
-- out, format. Returns the path.
function M.figure(o, runs, pooled)
  local fig <close> = mp.plot.figure{width = 640, height = 400,
    title = ("Sink heads (alpha_0 > %.1f) during training: %d seed%s, mean and 95%% interval"):format(o.eps, #runs,
      #runs == 1 and "" or "s")}
  local ax = fig:axes()
  local x = runs[1].tokens
  local xm = {}
  for i, t in ipairs(x) do xm[i] = t / 1e6 end
  for i, r in ipairs(runs) do ax:line(xm, r.frac, {label = ("seed %d"):format(o.seeds[i]), width = 1, dashed = true}) end
  local lo, hi = {}, {}
  for i = 1, #xm do
    lo[i] = pooled.lo[i] == -math.huge and pooled.mean[i] or pooled.lo[i]
    hi[i] = pooled.hi[i] == math.huge and pooled.mean[i] or pooled.hi[i]
  end
  ax:line(xm, pooled.mean, {label = "mean", width = 2.5, marker = true, band_lo = lo, band_hi = hi})
  local top = 0.25                                -- the y axis: at least 0..0.25, up to 0..1
  for i = 1, #xm do top = math.max(top, hi[i] * 1.1) end
  for _, r in ipairs(runs) do for _, v in ipairs(r.frac) do top = math.max(top, v * 1.1) end end
  ax:set{xlabel = "training tokens (millions)", ylabel = "fraction of heads that sink", ylim = {0, math.min(1, top)}}
  ax:legend()
  local path = ("%s/sink_fraction.%s"):format(o.out, o.format or "png")
  fig:save(path)
  return path
end

function M.run(o)
  mp.mkdir(o.out)
  mp.mkdir(o.out .. "/models")
  local corpus = o.corpus
  if not corpus then
    corpus = o.out .. "/corpus.txt"
    require("rope_id").build_corpus(corpus)
  end
  local H
  do
    local fh = assert(io.open(corpus, "rb"))
    H = M.unigram_entropy(fh:read("a"))
    fh:close()
  end
  local r = report.new()
  local t_start = os.time()
  r:out("== mechprobe sinks --preset %s (seeds %s) ==", o.preset, table.concat(o.seeds, ","))
  r:out("model: d_model %d, %d layers x %d heads (%d KV heads) of %d, d_mlp %d, %s, RMSNorm, SwiGLU; byte-level, "
      .. "context %d", o.d_model, o.n_layer, o.n_head, o.n_kv_head, o.d_head, o.d_mlp, o.pos, o.L)
  r:out("training: %s, %d steps of %d x %d tokens (%.2fM tokens), lr %g (warmup 10%%, cosine), weight decay %g, "
      .. "%s", corpus, o.steps, o.batch, o.L, o.steps * o.batch * o.L / 1e6, o.lr, o.wd,
      o.bos and "BOS at position 0 of every window" or "no BOS")
  r:out("measured at step 0 and %d checkpoints: alpha_0 of every head on %d held-out windows of %d; a sink head has "
      .. "alpha_0 > %.2f; unigram entropy of the corpus %.3f nats/byte", o.checkpoints, o.val_windows, o.L, o.eps, H)
  local runs = {}
  for _, seed in ipairs(o.seeds) do
    log("seed %d: training %d steps", seed, o.steps)
    local run = train_seed(o, corpus, seed)
    runs[#runs + 1] = run
    r:out("")
    r:out("-- seed %d (%d s; checkpoint %s)", seed, run.seconds, run.path)
    r:out("%8s %10s %10s %10s %12s", "step", "tokens", "train", "held-out", "sink heads")
    for i = 1, #run.step do
      local tl = run.train_loss[i] == run.train_loss[i] and ("%10.4f"):format(run.train_loss[i]) or ("%10s"):format("-")
      r:out("%8d %10d %s %10.4f %6d / %d", run.step[i], run.tokens[i], tl, run.val_loss[i], run.count[i], run.heads)
    end
    local A, cells = run.A[#run.A], {}
    for l, row in ipairs(A) do
      for h, a in ipairs(row) do if a > o.eps then cells[#cells + 1] = ("L%d H%d %.2f"):format(l - 1, h - 1, a) end end
    end
    r:out("sink heads at the end (alpha_0): %s", #cells > 0 and table.concat(cells, ", ") or "none")
  end
  -- pooled over the seeds, per checkpoint
  local pooled = {mean = {}, lo = {}, hi = {}}
  for i = 1, #runs[1].frac do
    local v = {}
    for k, run in ipairs(runs) do v[k] = run.frac[i] end
    pooled.mean[i], pooled.lo[i], pooled.hi[i] = rules_ci(v)
  end
  r:out("")
  r:out("-- sink fraction over the seeds (mean [95% t-interval])")
  for i = 1, #runs[1].step do
    r:out("%8d steps %10.2fM tokens  %s", runs[1].step[i], runs[1].tokens[i] / 1e6,
        ci_text(pooled.mean[i], pooled.lo[i], pooled.hi[i]))
  end
  local final, init, learned = {}, {}, true
  for k, run in ipairs(runs) do
    final[k], init[k] = run.frac[#run.frac], run.frac[1]
    if not (run.val_loss[#run.val_loss] < H) then learned = false end
  end
  local V = {M.C1{final = final, init = init, learned = learned}, M.C2{final = final, init = init, learned = learned}}
  local h5 = write_h5(o, runs, pooled, V, H)
  local fig = M.figure(o, runs, pooled)
  -- the first seed's model, head by head, on held-out text (as `sinks --model`)
  local sinks = require "sinks"
  local text = runs[1].task
  local toks = text:sample(1, o.L, "val"):tolist()[1]
  while #toks > math.min(o.analysis_tokens, o.L) do table.remove(toks) end
  r:out("")
  r:out("-- per-head analysis of seed %d's model on %d held-out tokens: %s/analysis (run file, figures, table)",
      o.seeds[1], #toks, o.out)
  sinks.run(runs[1].model, toks, {out = o.out .. "/analysis", label = runs[1].path, boot = o.boot, eps = o.eps,
                                  window = o.window, seed = o.boot_seed, format = o.format})
  for _, run in ipairs(runs) do run.model:close(); run.task:close() end
  r:out("")
  r:out("-- verdicts")
  r:verdicts(V, {52, 60, 52})
  r:rules(V)
  r:out("")
  r:out("files: %s, %s, %s/verdicts.tsv, %s/models/seed<N>.h5", h5, fig, o.out, o.out)
  r:out("time: total %ds", os.time() - t_start)
  local tsv = {"id\tclaim\tours\tlo\thi\tseeds\tverdict"}
  for _, v in ipairs(V) do
    tsv[#tsv + 1] = ("%s\t%s\t%s\t%.6g\t%.6g\t%d\t%s"):format(v.id, v.claim, v.ours, v.lo, v.hi, v.seeds, v.word)
  end
  require("cli").write_text(o.out .. "/verdicts.tsv", table.concat(tsv, "\n") .. "\n")
  r:save(o.out .. "/report.txt")
  local frac = {}
  for i, run in ipairs(runs) do frac[i] = run.frac end
  return {verdicts = V, h5 = h5, seeds = o.seeds, frac = frac, pooled = pooled, figure = fig}
end

return M
