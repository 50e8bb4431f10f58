-- group_arith.lua — in-context group arithmetic (Todd et al., ICLR 2026,
-- "In-Context Algebra"): which heads copy, recognise identities and cancel by
-- closure when a transformer does arithmetic over variable symbols.
--
--   mechprobe group_arith [--quick | --medium | --preset P] --out DIR   (train, then test)
--   mechprobe group_arith --seeds 1,2,3 --out DIR                      (one run per seed, verdicts over the seeds)
--   mechprobe group_arith --model DIR/model.h5 --out DIR2              (test a trained model)
--   mechprobe group_arith --control --out DIR     (the untrained control of a run made before it existed)
--   mechprobe group_arith --rejudge --out DIR     (the current rules on a finished run, from its run files)
--
-- Trains a small transformer on sequences of facts "a b = c" whose symbols
-- are re-assigned to group elements in every sequence (checkpoints along the
-- way), then tests it like the paper, on the training families (C3..C10,
-- D2..D5), and on held-out groups of order 8 (Q8, C2xC4, C2xC2xC2) as a row
-- of its own:
--   2. accuracy on the final query per distribution at k = 50, 100 (cancel and
--      associate as the paper constructs them; our natural-context versions too)
--   3. the share of queries each in-context solver answers, against the model
--   4. the copying head: activation patching of hook_z per head, the paper's
--      design (into an unrelated sequence) and ours (corrupted copy); ablation
--   5. identity recognition: direct logit attribution per head; PCA of the
--      last layer's attention output
--   6. closure and cancellation: linear probes on the residual stream by layer
--   7. phases: accuracy per skill at each checkpoint, and the order of crossing 90%
-- Writes DIR/group_arith.h5 (every number, every evaluation item, and the
-- untrained step-0 model's answers to the same items under /control/untrained),
-- figures, DIR/verdicts.tsv and DIR/report.txt, and prints the report. The
-- verdicts are built from the run files alone (group_arith_report.judge_dir,
-- the same function --rejudge calls): one value per seed, a 95% t-interval over
-- the seeds (verdicts.lua); a one-seed run's rows say "too few seeds". With
-- --seeds, DIR/seed_S/group_arith.h5 per seed and DIR/group_arith.h5 holds the
-- pooled /verdicts only.
-- Sizes: --quick about a minute (a tiny model that does not learn the task:
-- the pipeline), --medium about 10 minutes, the default (full) the recipe sized
-- for copying (73M tokens a seed, about 25-30 minutes a seed on a quiet 2-core
-- machine), --preset gpu the paper's shape for a GPU backend.
local cli = require "cli"
local ga = require "group_arith"
local report = require "group_arith_report"
local textreport = require "report"

local o = cli.parse(arg, {
  name = "group_arith",
  summary = "In-context group arithmetic: train, then copying head, identity, closure/cancellation, phases.",
  {"quick", nil, "a tiny run (about a minute): checks the pipeline, the model does not learn"},
  {"medium", nil, "a medium run (about 10 minutes)"},
  {"preset", "NAME", "sizes by name: quick, medium, full (the default) or gpu (4 layers x 8 heads, d_model 512, k = 200, batch 128: for a GPU backend; on the CPU only with a small --steps)"},
  {"model", "FILE", "test this trained model (.h5) instead of training (phases use DIR/checkpoints if present); with --seeds, \"%d\" in FILE stands for the seed"},
  {"steps", "N", "training steps (default: by size)", type = "int"},
  {"layers", "N", "layers (default: by size)", type = "int"},
  {"d_model", "N", "model width; heads of 16 channels unless --heads (default: by size)", type = "int"},
  {"heads", "N", "attention heads a layer; must divide the width (default: by size)", type = "int"},
  {"batch", "N", "sequences per step (default: by size)", type = "int"},
  {"lr", "X", "peak learning rate (default: by size)", type = "number"},
  {"init_std", "X", "standard deviation of the initial weights (default 0.02)", type = "number"},
  {"curriculum", nil, "train on contexts of 4, 8, 16, 32 distinct facts (to 30/45/60/80% of the steps), then a quarter at 16, k = 100"},
  {"no_curriculum", nil, "train on the natural distribution from the start (the full preset has a curriculum)"},
  {"pools", "SPEC", "a curriculum of your own: P:F[:S[:K]],... = contexts of P distinct facts until fraction F of the steps, in a share S of the sequences (default 1), K facts a sequence (default --train-k)"},
  {"train_k", "N", "facts in a training sequence (default: by size; evaluation at k past it is a length test)", type = "int"},
  {"n_eval", "N", "sequences per accuracy cell (default: by size); the other experiments' samples scale with it", type = "int"},
  {"seed", "N", "seed of the model, the data and the bootstrap", default = 1, type = "int"},
  {"seeds", "LIST", "several runs, one per seed (e.g. 1,2,3) into DIR/seed_S, spread over the ranks under mpirun; then the verdicts over the seeds (one value per seed)"},
  {"eval_groups", "WHICH", "groups of the mechanism experiments (patching, ablation, identity, probes, phases): training (the paper's) or held-out; accuracy is always measured on both", default = "training"},
  {"format", "EXT", "figure format: png, svg or pdf", default = "png"},
  cli.TRAIN_DEVICE_OPT,
  {"control", nil, "compute the untrained control of the finished run in --out (each seed's checkpoints/step_000000.h5 "
    .. "on its run file's /eval items, into /control/untrained) where a run file lacks it; nothing is trained"},
  {"rejudge", nil, "apply the current verdict rules to the finished run in --out from its run files alone "
    .. "(DIR/seed_S/group_arith.h5, or DIR/group_arith.h5 for one seed): rewrites verdicts.tsv, /verdicts and "
    .. "report.txt's verdict section"},
  {"out", "DIR", "output folder", required = true},
})
if o.control or o.rejudge then
  for _, key in ipairs{"quick", "medium", "preset", "model", "seeds", "steps"} do
    if o[key] then cli.fail("group_arith", ("--%s trains or tests a model: it goes with neither --control nor --rejudge")
      :format(key)) end
  end
  local fh = io.open(o.out, "r")
  if not fh then cli.fail("group_arith", ("--out %s: no such folder"):format(o.out)) end
  fh:close()
  if o.control then
    local ok, msgs = pcall(report.control_dir, o.out, o)
    if not ok then cli.fail("group_arith", "--control: " .. tostring(msgs)) end
    for _, m in ipairs(msgs) do print(m) end
  end
  if o.rejudge then
    local ok, rows, section = pcall(report.rejudge, o.out)
    if not ok then cli.fail("group_arith", "--rejudge: " .. tostring(rows)) end
    print(table.concat(section, "\n"))
    print(("verdicts: %s/verdicts.tsv, %s/group_arith.h5 /verdicts, %s/report.txt"):format(o.out, o.out, o.out))
  end
  return
end
if (o.quick and 1 or 0) + (o.medium and 1 or 0) + (o.preset and 1 or 0) > 1 then
  io.stderr:write("mechprobe group_arith: give at most one of --quick, --medium and --preset\n")
  os.exit(2)
end
if o.preset and not ga.PRESETS[o.preset] then
  io.stderr:write(("mechprobe group_arith: --preset must be quick, medium, full or gpu (got '%s')\n"):format(o.preset))
  os.exit(2)
end
if not ({png = true, svg = true, pdf = true})[o.format] then
  io.stderr:write(("mechprobe group_arith: --format must be png, svg or pdf (got '%s')\n"):format(o.format))
  os.exit(2)
end
if o.eval_groups ~= "held-out" and o.eval_groups ~= "training" then
  io.stderr:write("mechprobe group_arith: --eval-groups must be held-out or training\n")
  os.exit(2)
end

cli.check_train_device("group_arith", o)
o.mode = o.preset or o.quick and "quick" or o.medium and "medium" or "full"
if o.no_curriculum and (o.curriculum or o.pools) then
  io.stderr:write("mechprobe group_arith: --no-curriculum cannot go with --curriculum or --pools\n")
  os.exit(2)
end
o.n_layer = o.layers
if o.d_model then o.n_head, o.d_mlp = math.max(1, o.d_model // 16), 4 * o.d_model end
if o.heads then o.n_head = o.heads end
for key, v in pairs(ga.PRESETS[o.mode]) do if o[key] == nil then o[key] = v end end
if o.n_eval < 4 then io.stderr:write("mechprobe group_arith: --n-eval must be >= 4\n"); os.exit(2) end
if o.n_eval ~= ga.PRESETS[o.mode].n_eval then   -- --n-eval: the other samples in proportion
  local scale = o.n_eval / ga.PRESETS[o.mode].n_eval
  for _, key in ipairs{"n_cov", "n_patch", "n_ident", "n_phase"} do o[key] = math.max(4, math.floor(o[key] * scale + 0.5)) end
  o.n_probe = math.max(24, math.floor(o.n_probe * scale + 0.5))
end
for _, key in ipairs{"n_layer", "d_model", "n_head", "batch", "steps", "train_k"} do
  local flag = ({n_layer = "layers", n_head = "heads"})[key] or key:gsub("_", "-")
  if o[key] < 1 then io.stderr:write(("mechprobe group_arith: --%s must be >= 1\n"):format(flag)); os.exit(2) end
end
if o.d_model % o.n_head ~= 0 then
  io.stderr:write(("mechprobe group_arith: --heads %d does not divide d_model %d\n"):format(o.n_head, o.d_model)); os.exit(2)
end
if not (o.lr > 0) or (o.init_std and not (o.init_std > 0)) then
  io.stderr:write("mechprobe group_arith: --lr and --init-std must be > 0\n")
  os.exit(2)
end
o.progress = not o.quick
if o.pools then
  local c, last = {}, 0
  for item in o.pools:gmatch("[^,]+") do
    local f = {}
    for v in (item .. ":"):gmatch("%s*([^:]-)%s*:") do f[#f + 1] = tonumber(v) or false end
    local pool, frac, share, k = f[1], f[2], f[3] == nil and 1 or f[3], f[4]
    if #f < 2 or #f > 4 or not pool or not frac or not share or k == false or pool < 1 or pool % 1 ~= 0
       or frac <= last or frac > 1 or not (share > 0 and share <= 1) or (k and (k < 1 or k % 1 ~= 0)) then
      io.stderr:write(("mechprobe group_arith: --pools: bad stage '%s' (want P:F[:S[:K]] with P >= 1, F rising in (0, 1], S in (0, 1], K >= 1 facts)\n"):format(item))
      os.exit(2)
    end
    c[#c + 1] = {["until"] = frac, pool = pool, share = share, k = k and math.tointeger(k)}
    last = frac
  end
  if #c == 0 then io.stderr:write("mechprobe group_arith: --pools: no stages\n"); os.exit(2) end
  o.curriculum = c
elseif o.no_curriculum then
  o.curriculum = nil
elseif o.curriculum == true then
  o.curriculum = ga.CURRICULUM
end
o.t0 = os.time()
-- A given model must fit the task: an unrelated one would run to a report of zeros.
-- Checked before the output folder is made. With --seeds, --model names one
-- model per seed: "%d" in it stands for the seed (e.g. DIR/seed_%d/model.h5).
local function model_path_of(seed)
  return o.seeds and (o.model:gsub("%%d", tostring(seed))) or o.model
end
local function load_model(path)
  local ok, err = pcall(mp.input_size, path, {what = "--model", max_bytes = 1 << 40})
  if not ok then
    io.stderr:write(("mechprobe group_arith: %s\n"):format(err)); os.exit(2)
  end
  local m = mp.load(path, {device = o.device})
  local cfg = m.config
  local kmax = math.max(o.train_k, o.k_patch)
  for _, k in ipairs(o.k_list) do kmax = math.max(kmax, k) end
  local V, need_ctx = mp.tasks.algebra{k = 1}.vocab, 5 * (kmax + 1)
  if cfg.vocab ~= V then
    io.stderr:write(("mechprobe group_arith: --model %s has a vocabulary of %d tokens; the algebra task's models have %d "
                     .. "(train one with this probe)\n"):format(path, cfg.vocab, V))
    os.exit(2)
  end
  if cfg.pos == "learned" and cfg.ctx < need_ctx then
    io.stderr:write(("mechprobe group_arith: --model %s has learned positions for %d tokens; evaluating k = %d facts "
                     .. "needs %d\n"):format(path, cfg.ctx, kmax, need_ctx))
    os.exit(2)
  end
  return m
end
local seed_list = o.seeds and cli.seed_list("group_arith", o.seeds)   -- checked before anything is written
local given_model
if o.model and o.seeds and not o.model:find("%d", 1, true) then
  io.stderr:write("mechprobe group_arith: --model with --seeds needs \"%d\" in the path for the seed (e.g. DIR/seed_%d/model.h5)\n")
  os.exit(2)
end
if o.model then
  if o.seeds then
    for _, seed in ipairs(seed_list) do load_model(model_path_of(seed)):close() end
  else
    given_model = load_model(o.model)
  end
end
mp.mkdir(o.out)

-- The whole pipeline for o.seed into o.out; the report's lines go to say().
local function run_one(o, say)
  local R = {}
  local m, model_path
  if o.model then                                  -- 1. (given) a trained model
    model_path = model_path_of(o.seed)
    m = given_model or load_model(model_path)
    local cfg = m.config
    o.d_model, o.n_layer, o.n_head, o.d_mlp = cfg.d_model, cfg.n_layer, cfg.n_head, cfg.d_mlp
    o.steps = 0
    -- checkpoints saved next to the model by an earlier run (DIR/checkpoints); a
    -- model that is itself a checkpoint (DIR/checkpoints/step_N.h5): those up to N
    local dir = model_path:match("^(.*)/[^/]*$") or "."
    local upto = math.huge
    local cdir = dir .. "/checkpoints"
    if dir:match("checkpoints$") and model_path:match("step_(%d+)%.h5$") then
      cdir, upto = dir, tonumber(model_path:match("step_(%d+)%.h5$"))
      o.steps = upto
    end
    local cks = {}
    local p = io.popen(("ls '%s' 2>/dev/null"):format(cdir))
    for name in p:lines() do
      local s = name:match("^step_(%d+)%.h5$")
      if s and tonumber(s) <= upto then cks[#cks + 1] = {step = tonumber(s), path = cdir .. "/" .. name} end
    end
    p:close()
    table.sort(cks, function(a, b) return a.step < b.step end)
    R.train = {checkpoints = cks}
  else                                             -- 1. training with checkpoints
    m, R.train = ga.train(o)
    model_path = R.train.model
  end
  R.accuracy = ga.accuracy(m, o)                   -- 2. accuracy per distribution
  R.coverage = ga.coverage(m, o)                   -- 3. coverage of the solvers
  R.copying = ga.copying(m, o, R.accuracy)         -- 4. copying head
  R.identity = ga.identity(m, o, model_path)       -- 5. identity recognition
  R.probes = ga.probes(m, o)                       -- 6. closure / cancellation probes
  if #R.train.checkpoints > 1 then                 -- 7. phases
    R.phases = ga.phases(o, R.train.checkpoints)
  end

  local h5 = o.out .. "/group_arith.h5"
  report.write_h5(h5, o, R)
  local step0                                      -- the untrained control: the same seed's step-0 checkpoint
  for _, c in ipairs(R.train.checkpoints or {}) do if c.step == 0 then step0 = c.path end end
  report.untrained_control(h5, step0, o, "no step-0 checkpoint next to the given model")
  local figs = report.figures(o, R)

  say(("group_arith (%s): d_model=%d n_layer=%d n_head=%d, %d training steps%s; mechanism experiments on %s groups"):format(
    o.mode, o.d_model, o.n_layer, o.n_head, o.steps,
    R.train.seconds and (" in %.0f s"):format(R.train.seconds) or "", o.eval_groups))
  if R.train.tokens and R.train.tokens > 0 then
    local fl = ga.flops(o, 5 * (o.train_k + 1), R.train.tokens)
    say(("compute: %.3g training tokens, about %.2g FLOPs (6N + 6 n_layer T d a token); the paper's setup (4 layers, "
         .. "d_model 1024, 200k steps of 128 x 1024 tokens) %.2g FLOPs: %.2g times this run"):format(
         R.train.tokens, fl, ga.PAPER_FLOPS, ga.PAPER_FLOPS / fl))
  end
  say(("self-patching check (a head patched with its own clean output): max |logit change| = %g"):format(
    R.copying.self_patch_diff))
  say("results: " .. h5)
  for _, p in ipairs(figs) do say("figure: " .. p) end
  say(("took %d s"):format(os.time() - o.t0))
end

-- The verdict section, judged from the run files in o.out alone (as --rejudge
-- does), into the report r; then r is saved as DIR/report.txt.
local function finish(r, seeds)
  local _, section = report.judge_dir(o.out, seeds)
  for _, line in ipairs(section) do r:out(line) end
  r:out("verdicts: " .. o.out .. "/verdicts.tsv")
  r:out(("verdicts in HDF5: %s/group_arith.h5 (/verdicts)"):format(o.out))
  r:save(o.out .. "/report.txt")
end

if not o.seeds then   -- under mpirun: one run, on rank 0 alone
  mp.mpi.sweep({o.seed}, function()
    local r = textreport.new()
    run_one(o, function(line) r:out(line) end)
    finish(r)
  end)
  return
end
-- several seeds: independent runs, spread over the ranks (mp.mpi.sweep); rank 0
-- prints each run's report in seed order, then the verdicts over the seeds,
-- judged from DIR/seed_S/group_arith.h5
local seeds = seed_list
local runs = mp.mpi.sweep(seeds, function(seed)
  local oo = {}
  for k, v in pairs(o) do oo[k] = v end
  oo.seed, oo.out, oo.t0 = seed, ("%s/seed_%d"):format(o.out, seed), os.time()
  mp.mkdir(oo.out)
  local lines = {}
  run_one(oo, function(line) lines[#lines + 1] = line end)
  return {lines = lines}
end)
if not runs then return end
local r = textreport.new()
for i, seed in ipairs(seeds) do
  r:out(("== seed %d (%s/seed_%d)"):format(seed, o.out, seed))
  for _, line in ipairs(runs[i].lines) do r:out(line) end
end
finish(r, seeds)
