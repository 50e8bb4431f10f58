-- sinks_train.lua — `mechprobe sinks --preset NAME`: train byte-level rotary
-- models from scratch under the sink recipe and watch attention sinks emerge,
-- over seeds (Gu et al., "When Attention Sink Emerges in Language Models: An
-- Empirical View", ICLR 2025: sinks appear in every LM pre-trained on enough
-- data, after enough optimization; their metric Sink_eps, eps = 0.3, the share
-- of heads whose mean attention to the first token exceeds eps); and
-- `mechprobe sinks --rejudge --out DIR`: the current rules on a finished run.
--
--   local st = require "sinks_train"
--   local p = st.preset("quick"); p.out = DIR
--   local res = st.run(p)    -- {verdicts, h5, seeds, frac[seed i] = {per checkpoint}}
--   local rows = st.rejudge(DIR)   -- from DIR/sinks_train.h5 alone
--
-- For every seed: a model (RMSNorm, SwiGLU, RoPE, grouped KV heads) trained on
-- the rope_id corpus (Debian's licences and fortunes, or --corpus), each window
-- starting with a fixed BOS at position 0 (without it nothing sinks here:
-- experiments/sink_recipe.lua), at a high learning rate; at step 0 and at
-- `checkpoints` points along the training: every head's alpha_0 (the mean over
-- queries t >= 1 of pattern[t, 0] on held-out windows of the training length),
-- the sink heads (alpha_0 > eps), the training and held-out loss. Every number
-- goes into DIR/sinks_train.h5 first; the verdicts (C1-C3 below, judged by
-- the one verdict engine, verdicts.lua) are then built from that file by the
-- function --rejudge uses (M.judge_file), so a run and its rejudge agree byte
-- for byte. Also DIR/report.txt, DIR/verdicts.tsv, DIR/sink_fraction.<fmt>,
-- the checkpoints DIR/models/seed<N>.h5, and the per-head sinks analysis of
-- the first seed's model on held-out text in DIR/analysis/ (as `mechprobe
-- sinks --model`).
local M = {}
local report = require "report"
local V = require "verdicts"

M.FLOOR = 0.01     -- a sink fraction below 1% of heads counts as none (Gu et al.'s level before sinks emerge)
M.FILE = "sinks_train.h5"
M.FORMAT = "mechprobe.sinks_train"

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
-- --steps, --length and --d-model. deep: the recipe that grew sink heads past
-- layer 0 on the CPU (experiments/sink_recipe.lua's deep8_wd0: the quickstart's
-- width, 8 layers of 8 heads of 16 sharing 4 KV heads, no weight decay, 2.5M
-- tokens; one seed there), over 3 seeds, for C3.
M.presets = {
  quick = {d_model = 64, n_layer = 4, n_head = 8, n_kv_head = 4, d_head = 16, d_mlp = 172, L = 128, batch = 16,
           steps = 600, lr = 1e-2, checkpoints = 4, seeds = {1}},
  medium = {d_model = 64, n_layer = 4, n_head = 8, n_kv_head = 4, d_head = 16, d_mlp = 172, L = 128, batch = 16,
            steps = 600, lr = 1e-2, checkpoints = 6, seeds = {1, 2, 3}},
  full = {d_model = 128, n_layer = 4, n_head = 8, n_kv_head = 8, d_head = 16, d_mlp = 256, L = 256, batch = 16,
          steps = 1200, lr = 1e-2, checkpoints = 6, seeds = {1, 2, 3, 4, 5}},
  deep = {d_model = 64, n_layer = 8, n_head = 8, n_kv_head = 4, d_head = 16, d_mlp = 172, L = 128, batch = 16,
          steps = 1200, lr = 1e-2, wd = 0, checkpoints = 4, seeds = {1, 2, 3}},
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
-- Pure functions of per-seed numbers (the verdict engine, verdicts.lua, gives
-- the word), unit-tested on planted inputs (tests/lua/test_sinks_train.lua).
-- x: seeds = {N, ...}; per seed i: init[i] (the sink fraction at step 0),
-- first[i] (at the first checkpoint after step 0; nil with none between step 0
-- and the end), final[i] (at the end), val_loss[i] (held-out loss at the end);
-- H (the corpus's byte unigram entropy, nats/byte); scale (our compute against
-- the paper's, printed when a model did not learn); describe = {C1 =, C2 =}
-- (descriptive text, never judged); init_deep[i], final_deep[i] (the sink
-- fraction among the heads of layers 1.., at step 0 and at the end), n_layer.
-- M.rules(x) gives the rows {C1, C2, C3}.

M.SOURCE = "Gu et al., When Attention Sink Emerges in Language Models: An Empirical View, ICLR 2025: Sink_0.3 "
  .. "along the pre-training of a 60M LLaMA on 5B tokens of the Pile (figure no. unverified)"
M.PAPER = "Gu et al. (60M LLaMA, context 2048, the Pile): sink heads (Sink_0.3) under 1% after 50M tokens, "
  .. "about 4% after 0.5B, 18% after 5B"
M.WIDTHS = {52, 60, 52}   -- claim, paper, ours in the report's VERDICT rows

-- The learned-task test: every seed's held-out loss at the end below the
-- unigram entropy (the model uses context); names the seeds that fail.
function M.learned(x)
  local bad, vals = {}, {}
  for i, s in ipairs(x.seeds) do
    local v = x.val_loss[i]
    vals[i] = V.num(v, "%.3f")
    if not (v < x.H) then bad[#bad + 1] = ("seed %s (%s)"):format(s, V.num(v, "%.3f")) end
  end
  if #bad == 0 then
    return {ok = true, text = ("held-out loss at the end below the unigram entropy %.3f nats/byte in every seed "
      .. "(%s)"):format(x.H, table.concat(vals, ", "))}
  end
  return {ok = false, text = ("held-out loss at the end not below the unigram entropy %.3f nats/byte: %s")
    :format(x.H, table.concat(bad, ", "))}
end

-- The seeds as the rows carry them: their labels ("4", not 4.000, which is
-- how verdicts.cells prints a number in the seeds column).
local function labels(seeds)
  local t = {}
  for i, s in ipairs(seeds) do t[i] = tostring(s) end
  return t
end

local function stat(x, what)
  return ("fraction of heads with alpha_0 > %g on held-out windows: %s"):format(x.eps or 0.3, what)
end

-- C1: training grows sink heads (against the untrained model, same code).
function M.C1(x)
  return V.judge{
    id = "C1", claim = "training grows attention-sink heads", paper = M.PAPER, source = M.SOURCE,
    statistic = stat(x, "at the end of training minus at step 0"), seeds = labels(x.seeds),
    name = "sink fraction at the end", values = x.final,
    control = {name = "untrained model (step 0)", values = x.init}, above = M.FLOOR,
    learned = M.learned(x), scale = x.scale, describe = x.describe and x.describe.C1,
    rule = ("per seed the sink fraction at the end of training minus that of the untrained model (step 0), both "
      .. "measured by the same code on the same held-out windows; mean and 95%% t-interval over the seeds: "
      .. "SUPPORTED if the interval lies above %.2f, NOT SUPPORTED if below, else INCONCLUSIVE; INCONCLUSIVE "
      .. "first when a seed's held-out loss at the end is not below the corpus's unigram entropy (not learned) "
      .. "or with fewer than %d seeds"):format(M.FLOOR, V.MIN_SEEDS)}
end

-- C2: sinks emerge only after enough training: at the first checkpoint after
-- step 0 the fraction is below the end's. Premise: sink heads at the end (no
-- sinks at all refute nothing about when they appear), and a checkpoint
-- between step 0 and the end.
function M.C2(x)
  local m, lo, hi = V.mean_ci(x.final)
  local few = #x.seeds < V.MIN_SEEDS       -- then the engine says "too few seeds", not "precondition absent"
  local pre = {
    {ok = few or lo > M.FLOOR, text = ("sink heads at the end: fraction %s over the seeds, %s %.2f"):format(
      V.ci_text(m, lo, hi), lo > M.FLOOR and "above" or "not above", M.FLOOR)},
    {ok = x.first ~= nil, text = x.first and "a checkpoint between step 0 and the end"
      or "no checkpoint between step 0 and the end (--checkpoints 1)"},
  }
  local first = x.first
  if not first then first = {}; for i = 1, #x.seeds do first[i] = x.final[i] end end
  return V.judge{
    id = "C2", claim = "sinks emerge only after enough training (fewer at the first checkpoint than at the end)",
    paper = "Gu et al.: sinks emerge after effective optimization on sufficient data; under 1% of heads after 50M "
      .. "tokens, 18% after 5B", source = M.SOURCE,
    statistic = stat(x, "at the end minus at the first checkpoint after step 0"), seeds = labels(x.seeds),
    name = "sink fraction at the end", values = x.final,
    control = {name = "first checkpoint after step 0", values = first}, above = M.FLOOR,
    learned = M.learned(x), pre = pre, scale = x.scale, describe = x.describe and x.describe.C2,
    rule = ("premise: the sink fraction at the end, mean and 95%% t-interval over the seeds, above %.2f, and a "
      .. "checkpoint between step 0 and the end, else INCONCLUSIVE; per seed the sink fraction at the end minus "
      .. "at the first checkpoint after step 0, mean and 95%% t-interval over the seeds: SUPPORTED if above "
      .. "%.2f, NOT SUPPORTED if below (the sinks were all there early), else INCONCLUSIVE; learned-task test "
      .. "and seeds as C1"):format(M.FLOOR, M.FLOOR)}
end

-- C3: training grows sink heads past layer 0, where the LLMs these papers
-- study have theirs (a layer-0 sink is a fixed function of BOS's embedding).
-- The sink fraction among the heads of layers 1.. at the end against the
-- untrained model's, as C1. Premise: the model has a layer past 0.
M.XIAO = "Xiao et al., Efficient Streaming Language Models with Attention Sinks, ICLR 2024, Figure 2 (Llama-2-7B " ..
  "attention maps; figure no. unverified)"
function M.C3(x)
  local L = x.n_layer or 0
  local pre = {{ok = L >= 2, text = L >= 2 and ("%d layers: %d past layer 0"):format(L, L - 1)
    or ("%s layer(s): no layer past 0"):format(L > 0 and tostring(L) or "unknown number of")}}
  return V.judge{
    id = "C3", claim = "training grows attention-sink heads past layer 0",
    paper = "Xiao et al. (Llama-2-7B): beyond the bottom two layers most heads attend mostly to the first token; "
      .. "Gu et al.: sink heads across the layers of the LLMs they pre-train", source = M.XIAO,
    statistic = stat(x, "among the heads of layers 1 and up, at the end of training minus at step 0"),
    seeds = labels(x.seeds), name = "sink fraction past layer 0 at the end", values = x.final_deep or {},
    control = {name = "untrained model (step 0)", values = x.init_deep or {}}, above = M.FLOOR,
    learned = M.learned(x), pre = pre, scale = x.scale, describe = x.describe and x.describe.C3,
    rule = ("premise: a layer past 0, else INCONCLUSIVE; per seed the sink fraction among the heads of layers 1 "
      .. "and up at the end of training minus that of the untrained model (step 0); mean and 95%% t-interval "
      .. "over the seeds: SUPPORTED if the interval lies above %.2f, NOT SUPPORTED if below, else INCONCLUSIVE; "
      .. "learned-task test and seeds as C1"):format(M.FLOOR)}
end

function M.rules(x) return {M.C1(x), M.C2(x), M.C3(x)} end

-- Sink heads per layer in the table A[layer][head] (alpha_0 > eps): a list,
-- and the share of heads past layer 0 that are sinks.
function M.sinks_by_layer(A, eps)
  local by, k, n = {}, 0, 0
  for l, row in ipairs(A) do
    by[l] = 0
    for _, a in ipairs(row) do
      if a > eps then by[l] = by[l] + 1 end
      if l > 1 then n = n + 1; if a > eps then k = k + 1 end end
    end
  end
  return by, n > 0 and k / n or 0 / 0
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

-- Writes every number of the run into the run file at `path` (the verdicts
-- are added by M.judge_file).
local function write_data(o, runs, pooled, H, path)
  local f <close> = mp.h5.open(path, "w")
  f:set_attr("/", "format", M.FORMAT)
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
  f:close()
end

-- ---------------------------------------------------------------- from the run file

-- Reads what the verdicts need from the open run file f (path: its name in
-- errors): the seeds and, per seed, the sink fraction, sink heads, tokens and
-- held-out loss at each measurement (the first at step 0); the unigram entropy
-- and eps (root attributes). Returns the rules' input (M.rules). Errors name
-- the file: another format, a missing dataset or attribute, seeds that
-- disagree in their checkpoints.
function M.read(f, path)
  local A = f:attrs("/")
  if A.format ~= M.FORMAT then
    error(("%s: not a sinks_train run file (format %s)"):format(path, tostring(A.format)), 0)
  end
  if type(A.unigram_entropy) ~= "number" then error(("%s: no unigram_entropy attribute"):format(path), 0) end
  local seeds = {}
  for item in tostring(A.seeds or ""):gmatch("[^,]+") do
    local s = math.tointeger(tonumber(item))
    if not s then error(("%s: seeds attribute '%s' is not a list of integers"):format(path, tostring(A.seeds)), 0) end
    seeds[#seeds + 1] = s
  end
  if #seeds == 0 then error(("%s: no seeds (root attribute seeds)"):format(path), 0) end
  local function need(name)
    local ok, kind = f:has(name)
    if not ok or kind ~= "dataset" then error(("%s: no dataset %s"):format(path, name), 0) end
    return f:read(name)
  end
  local x = {seeds = seeds, init = {}, first = {}, final = {}, val_loss = {}, H = A.unigram_entropy, eps = A.eps,
             init_deep = {}, final_deep = {}}
  local n, tokens, heads, cnt0, cnt1, means = nil, nil, nil, 0, 0, {}
  local by_end, per_seed = {}, {}
  for i, s in ipairs(seeds) do
    local g = ("seeds/%d/"):format(s)
    local frac, step = need(g .. "sink_fraction"):totable(), need(g .. "step"):totable()
    local vl, count = need(g .. "val_loss"):totable(), need(g .. "sink_heads"):totable()
    local shape = f:shape(g .. "alpha0")
    n = n or #frac
    if #frac ~= n or #step ~= n or #vl ~= n or #count ~= n or shape[1] ~= n then
      error(("%s: seed %d has not the %d measurements of seed %d in every dataset"):format(path, s, n, seeds[1]), 0)
    end
    if n < 2 or step[1] ~= 0 then
      error(("%s: seed %d: no step-0 measurement followed by a later one"):format(path, s), 0)
    end
    x.init[i], x.final[i], x.val_loss[i] = frac[1], frac[n], vl[n]
    x.first[i] = frac[2]
    local a0 = need(g .. "alpha0"):totable()                       -- [measurement][layer][head]
    local _, d0 = M.sinks_by_layer(a0[1], A.eps or 0.3)
    local by1, d1 = M.sinks_by_layer(a0[n], A.eps or 0.3)
    x.init_deep[i], x.final_deep[i], x.n_layer = d0, d1, #by1
    for l, k in ipairs(by1) do by_end[l] = (by_end[l] or 0) + k end
    per_seed[i] = ("seed %d %s"):format(s, table.concat(by1, "/"))
    tokens = tokens or need(g .. "tokens"):totable()
    heads = shape[2] * shape[3]
    cnt0, cnt1 = cnt0 + count[1], cnt1 + count[n]
    for k = 1, n do means[k] = (means[k] or 0) + frac[k] / #seeds end
  end
  if n < 3 then x.first = nil end      -- step 0 and the end only: nothing between
  -- our compute against the paper's (6ND; Gu et al.: 60M parameters, 5B tokens)
  if A.n_layer and A.d_model and A.n_head and A.n_kv_head and A.d_head and A.d_mlp then
    local P = A.n_layer * (A.d_model * A.d_head * 2 * (A.n_head + A.n_kv_head) + 3 * A.d_model * A.d_mlp)
    local D = tokens[n]
    x.scale = ("our models: %.2gM parameters besides the byte embeddings, %.2gM training tokens: about %.0e of "
      .. "the paper's compute (60M parameters, 5B tokens)"):format(P / 1e6, D / 1e6, P * D / (60e6 * 5e9))
  end
  local curve = {}
  for k = 1, n do curve[k] = ("%.2fM %.3f"):format(tokens[k] / 1e6, means[k]) end
  x.describe = {
    C1 = ("sink heads, all seeds' heads together: %d of %d at the end, %d of %d at step 0"):format(cnt1,
      heads * #seeds, cnt0, heads * #seeds),
    C2 = "mean sink fraction over the seeds by training tokens: " .. table.concat(curve, ", "),
    C3 = ("sink heads by layer 0..%d at the end, all seeds: %s (%s)"):format(#by_end - 1, table.concat(by_end, "/"),
      table.concat(per_seed, ", ")),
  }
  return x
end

-- Judges the run file at `path` (open read-write; label: its name in errors
-- and messages) and writes its /verdicts (verdicts.write_h5). The one place
-- the verdicts come from: the run and --rejudge both call it. Returns the rows.
function M.judge_file(path, label)
  local f <close> = mp.h5.open(path, "r+")
  local rows = M.rules(M.read(f, label or path))
  V.write_h5(f, rows)
  f:close()
  return rows
end

-- The report's verdict section: its header and the engine's lines.
function M.verdict_lines(rows)
  local lines = {"-- verdicts"}
  for _, l in ipairs(V.report_lines(rows, M.WIDTHS)) do lines[#lines + 1] = l end
  return lines
end

-- The report's text with its verdict section (after the line "-- verdicts")
-- replaced by the rows; nil when it has none.
function M.replace_verdicts(text, rows)
  return V.replace_section(text, V.report_lines(rows, M.WIDTHS), "^%-%- verdicts$")
end

-- Re-judges the finished run in DIR from DIR/sinks_train.h5 alone: rewrites
-- the file's /verdicts, DIR/verdicts.tsv and the verdict section of
-- DIR/report.txt (when there is a report.txt; one without a verdict section is
-- an error). Everything is computed and checked before anything is replaced;
-- the run file is copied (without its old /verdicts) under a temporary name
-- and renamed over the old one, the texts are written the same way. Returns
-- the rows and whether the report was rewritten.
function M.rejudge(dir)
  local path = dir .. "/" .. M.FILE
  local fh = io.open(path, "rb")
  if not fh then error(("%s: no such run file"):format(path), 0) end
  fh:close()
  local ok, src = pcall(mp.h5.open, path, "r")
  if not ok then error(("%s: cannot be read as a run file: %s"):format(path, tostring(src)), 0) end
  M.read(src, path)                                  -- a foreign or incomplete file fails here
  local rpath = dir .. "/report.txt"
  local text
  fh = io.open(rpath, "rb")
  if fh then text = fh:read("a"); fh:close() end
  if text and not M.replace_verdicts(text, {}) then
    src:close()
    error(("%s: no '-- verdicts' section to rewrite"):format(rpath), 0)
  end
  src:close()
  local out <close> = V.copy_run_file(path)          -- without /verdicts; removed unless committed
  local rows = M.judge_file(out.tmp, path)
  local tsv, report_text = V.tsv(rows), text and M.replace_verdicts(text, rows)
  out:commit()
  local cli = require "cli"
  cli.write_text(dir .. "/verdicts.tsv", tsv)
  if report_text then cli.write_text(rpath, report_text) end
  return rows, report_text ~= nil
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
    H = M.unigram_entropy(mp.read_file(corpus, {what = "--corpus", max_bytes = 1 << 32}))
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
    r:out("sink heads by layer 0..%d at the end: %s", #A - 1, table.concat((M.sinks_by_layer(A, o.eps)), "/"))
  end
  -- pooled over the seeds, per checkpoint
  local pooled = {mean = {}, lo = {}, hi = {}}
  for i = 1, #runs[1].frac do
    local v = {}
    for k, run in ipairs(runs) do v[k] = run.frac[i] end
    pooled.mean[i], pooled.lo[i], pooled.hi[i] = V.mean_ci(v)
  end
  r:out("")
  r:out("-- sink fraction over the seeds (mean [95% t-interval])")
  for i = 1, #runs[1].step do
    r:out("%8d steps %10.2fM tokens  %s", runs[1].step[i], runs[1].tokens[i] / 1e6,
        V.ci_text(pooled.mean[i], pooled.lo[i], pooled.hi[i]))
  end
  -- the evidence first: every number into the run file, then the verdicts from it
  local h5 = o.out .. "/" .. M.FILE
  local rows
  do
    local out <close> = mp.output(h5)           -- written under a temporary name, renamed when complete
    write_data(o, runs, pooled, H, out.tmp)
    rows = M.judge_file(out.tmp, h5)
    out:commit()
  end
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
  r:engine_verdicts(rows, M.WIDTHS)
  r:out("")
  r:out("files: %s, %s, %s/verdicts.tsv, %s/models/seed<N>.h5", h5, fig, o.out, o.out)
  r:out("time: total %ds", os.time() - t_start)
  require("cli").write_text(o.out .. "/verdicts.tsv", V.tsv(rows))
  r:save(o.out .. "/report.txt")
  local frac = {}
  for i, run in ipairs(runs) do frac[i] = run.frac end
  return {verdicts = rows, h5 = h5, seeds = o.seeds, frac = frac, pooled = pooled, figure = fig}
end

return M
