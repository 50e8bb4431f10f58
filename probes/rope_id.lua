-- rope_id.lua — sinks and clusters past the training length: RoPE vs RoPE-ID
-- (Wertheimer et al., "Frayed RoPE and long inputs", ICLR 2026).
--
--   mechprobe rope_id [--quick | --medium | --preset NAME] [--seeds 1,2,3] [--seeds-max N] --out DIR
--   mechprobe rope_id --rejudge --out DIR          (the current rules on a finished run)
--   mechprobe rope_id --merge DIR2 --out DIR       (pool a run of more seeds into DIR)
--   mechprobe rope_id ... --resume --out DIR        (continue an interrupted run: reuse its trained models)
--
-- Trains small models at a training length L under rope, half_rope, high_freq,
-- rope_id and none on byte-level text and on passkey retrieval, adds PI / NTK /
-- YaRN scaling of the RoPE model, RoPE-ID without its temperature, and DroPE,
-- and evaluates them at 1x..8x L: text loss against position and length,
-- retrieval accuracy against length, per head the attention to the first
-- token, ||k_0|| over the mean key norm and the largest q.k per query inside
-- vs past L, and the prefix-frame key geometry (stable rank and first-singular-
-- value share of the keys [0, t) a query at t sees, the pre-rotation keys as
-- control, q/k centroid cosine) at t = L, 2L, 4L, 8L. Every seed is a full
-- set of models; the verdicts (probes/lib/rope_id_rules.lua, judged by the one
-- engine probes/lib/verdicts.lua) take one value per seed.
-- Writes DIR/rope_id.h5 (every number), the figures (first seed), the
-- checkpoints (DIR/models/seed<N>), DIR/report.txt, DIR/verdicts.tsv, and
-- prints the report with its verdict table. Presets: --quick about a minute
-- (one seed), --medium (L = 256, 3 seeds), the default full (L = 512, 3 seeds,
-- more up to 6 until 3 have sink heads in RoPE and RoPE-ID: hours on two
-- cores), --preset gpu (sized for the GPU backend; on the CPU
-- only with a small --steps).
local cli = require "cli"
local rid = require "rope_id"
local o = cli.parse(arg, {
  name = "rope_id",
  summary = "RoPE vs RoPE-ID (and half_rope, high_freq, NoPE, PI/NTK/YaRN, DroPE) past the training length.",
  {"quick", nil, "tiny run (about a minute): L = 64, lengths 1x-4x L, one seed"},
  {"medium", nil, "medium run: L = 256, lengths 1x-8x L, 3 seeds"},
  {"preset", "NAME", "quick, medium, full (the default) or gpu (sized for the GPU backend)"},
  {"out", "DIR", "output folder", required = true},
  {"seed", "N", "the one seed of the data and the models (default: the preset's seeds)", type = "int"},
  {"seeds", "LIST", "seeds, one full run each, pooled by the verdicts (e.g. 1,2,3; default: the preset's)"},
  {"seeds_max", "N", "run further seeds (one past the largest, ...) until 3 have sink heads in both RoPE and RoPE-ID, "
    .. "up to N seeds in all (default: the preset's: full 6, the others none; none with --seed/--seeds)", type = "int"},
  {"steps", "N", "training steps per model and task (default: the preset's)", type = "int"},
  {"text_steps", "N", "the text models' steps, after --steps (sinks need the high learning rate for long enough)", type = "int"},
  {"length", "N", "training length L (a multiple of 64; default: the preset's)", type = "int"},
  {"d_model", "N", "model width (the heads keep their count and size; default: the preset's)", type = "int"},
  {"sequences", "N", "retrieval sequences per length and task, and text windows (default: the preset's)", type = "int"},
  {"corpus", "FILE", "text file to train on (default: Debian's licence texts, plus fortunes if installed)"},
  {"format", "EXT", "figure format: png, svg or pdf", default = "png"},
  {"progress", nil, "show training progress on stderr (default except for --quick)"},
  cli.TRAIN_DEVICE_OPT,
  {"rejudge", nil, "apply the current verdict rules to the finished run in --out (its rope_id.h5; nothing is trained): "
    .. "rewrites the verdicts there, in verdicts.tsv and report.txt"},
  {"resume", nil, "continue an interrupted run in --out: reuse each model whose checkpoint there (models/seed<N>) was "
    .. "trained with the same settings, train the rest, then evaluate as usual; a checkpoint of other settings is an error"},
  {"merge", "DIR2", "pool the seeds of another finished run of the same design (DIR2/rope_id.h5) into the run in --out: "
    .. "copies them into its rope_id.h5 and rewrites the pooled numbers, the verdicts, verdicts.tsv and report.txt"},
})
local function fail(msg) cli.fail("rope_id", msg) end
if o.resume and (o.rejudge or o.merge) then fail("--resume trains: it goes with neither --rejudge nor --merge") end
if o.merge then
  if o.rejudge then fail("give at most one of --rejudge and --merge") end
  for _, d in ipairs({o.out, o.merge}) do
    local ok, err = pcall(mp.input_size, d .. "/rope_id.h5", {what = "--merge: run file", max_bytes = 1 << 40})
    if not ok and err:find("No such file", 1, true) then fail(("--merge: %s/rope_id.h5: no such run file"):format(d)) end
    if not ok then fail(err) end
  end
  local ok, V, seeds = pcall(rid.merge, o.out, o.merge)
  if not ok then fail(tostring(V)) end
  print(("merged: seeds %s in %s/rope_id.h5"):format(table.concat(seeds, ","), o.out))
  for _, line in ipairs(require("verdicts").report_lines(V, {58, 40, 62})) do print(line) end
  return
end
if o.rejudge then
  local ok, err = pcall(mp.input_size, o.out .. "/rope_id.h5", {what = "--rejudge: run file", max_bytes = 1 << 40})
  if not ok and err:find("No such file", 1, true) then fail(("--rejudge: %s/rope_id.h5: no such run file"):format(o.out)) end
  if not ok then fail(err) end
  for _, line in ipairs(require("verdicts").report_lines(rid.rejudge(o.out), {58, 40, 62})) do print(line) end
  return
end
if ((o.quick and 1 or 0) + (o.medium and 1 or 0) + (o.preset and 1 or 0)) > 1 then
  fail("give at most one of --quick, --medium and --preset")
end
if o.seed and o.seeds then fail("give at most one of --seed and --seeds") end
local preset = o.quick and "quick" or o.medium and "medium" or o.preset or "full"
if not rid.presets[preset] then
  fail(("--preset must be quick, medium, full or gpu (got '%s')"):format(preset))
end
cli.check_format("rope_id", o.format)
local p = rid.preset(preset)
p.out, p.format, p.resume = o.out, o.format, o.resume or false
p.device = cli.check_train_device("rope_id", o)
p.progress = o.progress or preset ~= "quick"
if o.seed then p.seeds = {o.seed} end
if o.seeds then
  p.seeds = cli.seed_list("rope_id", o.seeds)
end
if o.seed or o.seeds then p.seeds_max = nil end      -- a seed list given runs as given, unless --seeds-max
if o.seeds_max then
  if o.seeds_max < #p.seeds or o.seeds_max > 64 then
    fail(("--seeds-max must be in %d..64 (at least the %d seed(s) to run; got %d)"):format(#p.seeds, #p.seeds,
      o.seeds_max))
  end
  p.seeds_max = o.seeds_max
end
if o.steps then
  if o.steps < 1 then fail("--steps must be >= 1") end
  p.text_steps, p.ret_steps = o.steps, o.steps
  p.drope_steps = math.max(1, math.min(p.drope_steps, o.steps))
end
if o.text_steps then
  if o.text_steps < 1 then fail(("--text-steps must be >= 1 (got %d)"):format(o.text_steps)) end
  p.text_steps = o.text_steps
end
if o.length then
  if o.length < 64 or o.length % 64 ~= 0 then fail(("--length must be a multiple of 64, >= 64 (got %d)"):format(o.length)) end
  p.L = o.length
  p.window = math.min(p.window, 64)
end
if o.d_model then
  if o.d_model < 8 or o.d_model > 4096 then fail(("--d-model must be in 8..4096 (got %d)"):format(o.d_model)) end
  p.d_model, p.d_mlp = o.d_model, math.min(p.d_mlp, 4 * o.d_model)
  if p.ret then                        -- the retrieval models' own shape, if the preset has one (a copy)
    local r = {}
    for k, v in pairs(p.ret) do r[k] = v end
    r.d_model, r.d_mlp = o.d_model, math.min(r.d_mlp or p.d_mlp, 4 * o.d_model)
    p.ret = r
  end
end
if o.sequences then
  if o.sequences < 1 or o.sequences > 100000 then fail(("--sequences must be in 1..100000 (got %d)"):format(o.sequences)) end
  p.B_ret, p.B_text, p.B_geo = o.sequences, o.sequences, math.min(p.B_geo, o.sequences)
end
if o.corpus then
  local ok, err = pcall(mp.input_size, o.corpus, {what = "--corpus", max_bytes = 1 << 32})
  if not ok then fail(err) end
  p.corpus = o.corpus
end
rid.run(p)
