-- rope_id.lua — sinks and clusters past the training length: RoPE vs RoPE-ID
-- (Wertheimer et al., "Frayed RoPE and long inputs", ICLR 2026).
--
--   mechprobe rope_id [--quick | --medium] --out DIR
--
-- Trains small models at a training length L under rope, half_rope, high_freq,
-- rope_id and none on byte-level text and on passkey retrieval, adds PI / NTK /
-- YaRN scaling of the RoPE model, RoPE-ID without its temperature, and DroPE,
-- and evaluates them at 1x..8x L: text loss against position and length,
-- retrieval accuracy against length, and per head the attention to the first
-- token, ||k_0|| over the mean key norm, the largest q.k per query, the stable
-- rank and first-singular-value share of the keys and the q/k centroid cosine,
-- inside vs past L. Writes DIR/rope_id.h5 (every number), the figures, the
-- checkpoints (DIR/models), DIR/report.txt, and prints the report with its
-- verdict table. Budgets: --quick about a minute, --medium about ten minutes,
-- the default (full) run about an hour on two cores.
local cli = require "cli"
local rid = require "rope_id"
local o = cli.parse(arg, {
  name = "rope_id",
  summary = "RoPE vs RoPE-ID (and half_rope, high_freq, NoPE, PI/NTK/YaRN, DroPE) past the training length.",
  {"quick", nil, "tiny run (about a minute): L = 64, lengths 1x-4x L, a few hundred steps"},
  {"medium", nil, "medium run (about ten minutes): L = 128, lengths 1x-8x L"},
  {"out", "DIR", "output folder", required = true},
  {"seed", "N", "seed of the data and the models", default = 1, type = "int"},
  {"steps", "N", "training steps per model and task (default: the preset's)", type = "int"},
  {"corpus", "FILE", "text file to train on (default: Debian's licence texts, plus fortunes if installed)"},
  {"format", "EXT", "figure format: png, svg or pdf", default = "png"},
  {"progress", nil, "show training progress on stderr (default for --medium and the full run)"},
})
local function fail(msg) cli.fail("rope_id", msg) end
local budget = cli.budget("rope_id", o)
cli.check_format("rope_id", o.format)
local p = rid.preset(budget)
p.out, p.format, p.seed = o.out, o.format, o.seed
p.progress = o.progress or not o.quick
if o.steps then
  if o.steps < 1 then fail("--steps must be >= 1") end
  p.text_steps, p.ret_steps = o.steps, o.steps
end
if o.corpus then
  local f = io.open(o.corpus, "rb")
  if not f then fail(("--corpus %s: cannot open"):format(o.corpus)) end
  f:close()
  p.corpus = o.corpus
end
rid.run(p)
