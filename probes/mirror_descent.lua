-- mirror_descent.lua — does a transformer trained on Mixture-of-Transition-
-- Distribution sequences estimate the mixture weights in context like one step
-- of mirror descent (D'Angelo & Flammarion)?
--
--   mechprobe mirror_descent [--quick | --medium | --preset NAME] [--pos rope|learned|rope_relv] --out DIR
--   mechprobe mirror_descent --rejudge --out DIR    (the current rules on a finished run's mirror.h5)
--
-- Runs the estimators alone against the context length T (Bayes posterior mean
-- by Gibbs, mirror descent with tuned or fixed steps, the three-layer
-- construction), trains transformers (standard pre-norm and attention-only,
-- several depths, loss on all tokens or on the last token), compares their
-- predictions with the estimators, matches their first-layer attention with the
-- responsibilities and ablates the best-matching head. Writes DIR/mirror.h5
-- (every curve and estimate), the figures, DIR/report.txt, and prints the report
-- with its verdict table (also DIR/verdicts.tsv). Budgets: --quick about a
-- minute, --medium about ten minutes, the default (full) run 20-25 minutes
-- on two busy cores (3 seeds); --preset gpu is sized for the GPU backend (on the CPU, run
-- it with a small --steps).
local cli = require "cli"
local mirror = require "mirror"
local o = cli.parse(arg, {
  name = "mirror_descent",
  summary = "MTD in-context estimation: estimators, trained transformers, mechanism, construction, verdicts.",
  {"quick", nil, "tiny run (about a minute): few T values, one depth, a few hundred steps"},
  {"medium", nil, "medium run (about ten minutes): T up to 128, depths 2-4"},
  {"preset", "NAME", "quick, medium, full (the default) or gpu (sized for the GPU backend)"},
  {"seeds", "N", "model seeds per (architecture, depth) (default: the preset's; verdicts on models need >= 3)",
   type = "int"},
  {"out", "DIR", "output folder", required = true},
  {"seed", "N", "seed of pi*, the data sets and the models", default = 1, type = "int"},
  {"steps", "N", "training steps per model (default: the preset's)", type = "int"},
  {"sequences", "N", "evaluation and tuning sequences each, and each pi* draw's (default: the preset's)", type = "int"},
  {"draws", "N", "independent pi* draws for C1 and C2 (default: the preset's; the rows need >= 3)", type = "int"},
  {"depths", "LIST", "comma-separated depths (default: the preset's; 0 skips training)"},
  {"pos", "NAME", "positional scheme of the trained models: rope, learned or rope_relv (default: the preset's)"},
  {"archs", "LIST", "comma-separated architectures: standard, attn-only (default: both)"},
  {"format", "EXT", "figure format: png, svg or pdf", default = "png"},
  {"progress", nil, "show training progress on stderr (default for --medium and the full run)"},
  cli.TRAIN_DEVICE_OPT,
  {"rejudge", nil, "apply the current verdict rules to the finished run in --out (its mirror.h5 alone; nothing is "
    .. "trained): rewrites the verdicts there, in verdicts.tsv and in report.txt's verdict section"},
})
if o.rejudge then
  local ok, V, rewrote = pcall(mirror.rejudge, o.out)
  if not ok then cli.fail("mirror_descent", "--rejudge: " .. tostring(V)) end
  for _, line in ipairs(mirror.verdict_lines(V)) do print(line) end
  print(("rejudged from %s/mirror.h5: its /verdicts, %s/verdicts.tsv%s"):format(o.out, o.out,
    rewrote and (", the verdict section of " .. o.out .. "/report.txt") or " (no report.txt verdict section)"))
  return
end
if ((o.quick and 1 or 0) + (o.medium and 1 or 0) + (o.preset and 1 or 0)) > 1 then
  io.stderr:write("mechprobe mirror_descent: give at most one of --quick, --medium and --preset\n")
  os.exit(2)
end
local preset = o.quick and "quick" or o.medium and "medium" or o.preset or "full"
if not mirror.presets[preset] then
  io.stderr:write(("mechprobe mirror_descent: --preset must be quick, medium, full or gpu (got '%s')\n"):format(preset))
  os.exit(2)
end
if not ({png = true, svg = true, pdf = true})[o.format] then
  io.stderr:write(("mechprobe mirror_descent: --format must be png, svg or pdf (got '%s')\n"):format(o.format))
  os.exit(2)
end
local p = mirror.preset(preset)
p.out, p.format, p.seed = o.out, o.format, o.seed
p.device = cli.check_train_device("mirror_descent", o)
p.progress = o.progress or not o.quick
if o.steps then
  if o.steps < 1 then io.stderr:write("mechprobe mirror_descent: --steps must be >= 1\n"); os.exit(2) end
  p.steps = o.steps
end
if o.sequences then
  if o.sequences < 8 or o.sequences > 100000 then
    io.stderr:write("mechprobe mirror_descent: --sequences must be 8..100000\n"); os.exit(2)
  end
  p.B_eval, p.B_tune, p.B_mech = o.sequences, o.sequences, math.min(p.B_mech, o.sequences)
  p.asym = {T = p.asym.T, draws = p.asym.draws, sequences = o.sequences}
end
if o.draws then
  if o.draws < 1 or o.draws > 1000 then io.stderr:write("mechprobe mirror_descent: --draws must be 1..1000\n"); os.exit(2) end
  p.asym = {T = p.asym.T, draws = o.draws, sequences = p.asym.sequences}
end
if o.pos then
  local ok, err = pcall(require("mirror_report").scheme_opts, o.pos, 1)
  if not ok then io.stderr:write("mechprobe mirror_descent: --pos: " .. err .. "\n"); os.exit(2) end
  p.pos = o.pos
end
if o.archs then
  p.archs = {}
  for a in o.archs:gmatch("[^,]+") do
    if a ~= "standard" and a ~= "attn-only" then
      io.stderr:write(("mechprobe mirror_descent: --archs: standard or attn-only expected (got '%s')\n"):format(a))
      os.exit(2)
    end
    p.archs[#p.archs + 1] = a
  end
end
if o.seeds then
  if o.seeds < 1 or o.seeds > 100 then io.stderr:write("mechprobe mirror_descent: --seeds must be 1..100\n"); os.exit(2) end
  p.seeds = o.seeds
end
if o.depths then
  if o.depths == "0" then
    p.depths, p.last_depths = {}, {}
  else
    p.depths = cli.int_list(o.depths, "--depths")
    for _, d in ipairs(p.depths) do
      if d < 1 or d > 16 then io.stderr:write("mechprobe mirror_descent: --depths: 1..16 expected\n"); os.exit(2) end
    end
    if #p.last_depths > 0 then p.last_depths = p.depths end   -- last-token models only where the preset has them
  end
end
mirror.run(p)
