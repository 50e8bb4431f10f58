-- sinks.lua — attention sinks and query/key clusters in every head.
--
--   mechprobe sinks --model FILE (--text STR | --text-file F | --tokens IDS) --out DIR
--   mechprobe sinks --preset quick|medium|full|deep|gpu [--seeds 1,2,3] [--steps N] [--device cuda] --out DIR
--   mechprobe sinks --rejudge --out DIR     (the current rules on a finished --preset run: DIR/sinks_train.h5)
--
-- With --preset it first trains models from scratch and watches sinks emerge
-- over seeds (probes/lib/sinks_train.lua: the sink fraction along training,
-- two verdicts built from DIR/sinks_train.h5), then analyses the first seed's
-- model as below (DIR/analysis). --rejudge rebuilds a finished run's verdicts
-- (the run file's /verdicts, DIR/verdicts.tsv, the report's verdict section)
-- from DIR/sinks_train.h5 alone, byte for byte as the run wrote them.
-- Captures q/k before and after the positional scheme, the attention patterns
-- and the residual stream to DIR/sinks.h5; computes for each (layer, head): the
-- attention each key receives (alpha_k, Gu et al.), whether the head sinks into
-- the first token (alpha_0 > eps, with a bootstrap interval over queries), how
-- separated its query and key clouds are (mean cosine, centroid distance over
-- spread, Fisher accuracy), the keys' stable rank and first-singular-value share
-- before and after RoPE, ||k_0|| over the mean key norm, the largest q.k per
-- query and the attention entropy; and massive activations per layer. Writes
-- every number under /stats in the run file, the figures, and a verdict table.
local cli = require "cli"
local sinks = require "sinks"
local o = cli.parse(arg, {
  name = "sinks",
  summary = "Attention sinks and Q/K point-cloud geometry of every head, with figures and a verdict table.",
  {"model", "FILE", "model checkpoint to analyse (or --preset)"},
  {"preset", "NAME", "train models from scratch and watch sinks emerge: quick (1 seed, about a minute), medium (3 seeds "
    .. "of quick's model), full (5 seeds of a larger model, about half an hour), deep (3 seeds of an 8-layer model without "
    .. "weight decay, the recipe that grows sink heads past layer 0: about 15 minutes) or gpu (sized for a GPU backend; "
    .. "on the CPU only with a small --steps, --length, --d-model)"},
  {"seeds", "LIST", "with --preset: seeds, one model each (default: the preset's)"},
  {"steps", "N", "with --preset: training steps (default: the preset's)", type = "int"},
  {"length", "N", "with --preset: context length L (default: the preset's)", type = "int"},
  {"d_model", "N", "with --preset: model width (heads keep their count and size; default: the preset's)", type = "int"},
  {"checkpoints", "N", "with --preset: measurements along the training (default: the preset's)", type = "int"},
  {"corpus", "FILE", "with --preset: text to train on (default: Debian's licence texts, plus fortunes if installed)"},
  {"tokenizer", "FILE", "tokenizer (default: found next to the model)"},
  {"device", "DEV", "where the forward runs (with --preset: where the models train): cpu, or cuda (an NVIDIA GPU)",
   default = "cpu"},
  cli.DEVICE_OPTS[2],
  {"text", "STR", "input text"},
  {"text_file", "FILE", "input text from a file"},
  {"tokens", "IDS", "comma-separated token ids"},
  {"max_tokens", "N", "truncate the input to N tokens", default = 256, type = "int", min = 4, max = 1 << 20},
  {"eps", "X", "a head sinks when alpha_0 > X", default = 0.3, type = "number", min = 0, max = 1},
  {"window", "N", "position window for the stable-rank curve", default = 32, type = "int"},
  {"boot", "N", "bootstrap resamples", default = 1000, type = "int", min = 1, max = 1000000},
  {"seed", "N", "bootstrap seed", default = 1, type = "int"},
  {"format", "EXT", "figure format: png, svg or pdf", default = "png"},
  {"out", "DIR", "output folder", required = true},
  {"rejudge", nil, "apply the current verdict rules to the finished --preset run in --out (its sinks_train.h5; nothing "
    .. "is trained): rewrites the verdicts there, in verdicts.tsv and report.txt"},
})
if o.rejudge then
  for _, k in ipairs{"preset", "model", "text", "text_file", "tokens", "seeds", "steps", "length", "d_model",
                     "checkpoints", "corpus", "tokenizer"} do
    if o[k] then
      cli.fail("sinks", ("--rejudge reads %s/sinks_train.h5 only: give no --%s with it"):format(o.out,
        (k:gsub("_", "-"))))
    end
  end
  local st = require "sinks_train"
  local ok, rows, rewrote = pcall(st.rejudge, o.out)
  if not ok then cli.fail("sinks", "--rejudge: " .. tostring(rows), 1) end
  for _, l in ipairs(st.verdict_lines(rows)) do print(l) end
  print(("rejudged from %s/sinks_train.h5: its /verdicts, %s/verdicts.tsv%s"):format(o.out, o.out,
    rewrote and (", the verdict section of " .. o.out .. "/report.txt") or " (no report.txt to rewrite)"))
  return
end
if o.window < 1 then cli.fail("sinks", ("--window must be a positive number of positions (got %d)"):format(o.window)) end
cli.check_format("sinks", o.format)
if o.preset then
  if o.model or o.text or o.text_file or o.tokens then
    cli.fail("sinks", "--preset trains its own models and analyses held-out text: give none of --model, --text, "
      .. "--text-file, --tokens with it")
  end
  cli.check_device("sinks", o)
  if o.device == "cpu" and o.precision ~= "fp32" then   -- bf16 here is mixed-precision training: cuda only
    cli.fail("sinks", ("--precision %s with --preset trains in mixed precision, on --device cuda only"):format(o.precision))
  end
  local st = require "sinks_train"
  if not st.presets[o.preset] then cli.fail("sinks", ("--preset must be quick, medium, full, deep or gpu (got '%s')"):format(o.preset)) end
  local p = st.preset(o.preset)
  p.out, p.format, p.eps = o.out, o.format, o.eps
  -- the per-head analysis of the first seed's model takes the analysis options
  if o.max_tokens < 4 then cli.fail("sinks", ("--max-tokens must be >= 4 (got %d)"):format(o.max_tokens)) end
  p.window, p.boot, p.boot_seed, p.analysis_tokens = o.window, o.boot, o.seed, o.max_tokens
  p.device, p.precision = o.device, o.precision
  if o.seeds then
    p.seeds = cli.seed_list("sinks", o.seeds)
  end
  if o.steps then
    if o.steps < 1 then cli.fail("sinks", ("--steps must be >= 1 (got %d)"):format(o.steps)) end
    p.steps = o.steps
  end
  if o.checkpoints then
    if o.checkpoints < 1 then cli.fail("sinks", ("--checkpoints must be >= 1 (got %d)"):format(o.checkpoints)) end
    p.checkpoints = o.checkpoints
  end
  if p.checkpoints > p.steps then p.checkpoints = p.steps end
  if o.length then
    if o.length < 8 or o.length > 65536 then cli.fail("sinks", ("--length must be in 8..65536 (got %d)"):format(o.length)) end
    p.L = o.length
  end
  if o.d_model then
    if o.d_model < 8 or o.d_model > 4096 then cli.fail("sinks", ("--d-model must be in 8..4096 (got %d)"):format(o.d_model)) end
    p.d_model, p.d_mlp = o.d_model, math.min(p.d_mlp, 4 * o.d_model)
  end
  if o.corpus then
    local ok, err = pcall(mp.input_size, o.corpus, {what = "--corpus", max_bytes = 1 << 32})
    if not ok then cli.fail("sinks", err) end
    p.corpus = o.corpus
  end
  p.progress = o.preset ~= "quick"
  local ok, err = pcall(st.run, p)
  if not ok then cli.fail("sinks", tostring(err), 1) end
  return
end
for _, k in ipairs{"seeds", "steps", "length", "d_model", "checkpoints", "corpus"} do
  if o[k] then cli.fail("sinks", ("--%s goes with --preset (training), not with --model"):format(k:gsub("_", "-"))) end
end
if not o.model then cli.fail("sinks", "give --model FILE (analyse a model) or --preset NAME (train models first)") end
cli.check_choice("sinks", o, {"text", "text_file", "tokens"}, "exactly")
local dev = cli.check_device("sinks", o)

local m = mp.load(o.model, {tokenizer = o.tokenizer, device = dev.device, precision = dev.precision})

-- tokens
local tokens
if o.tokens then
  tokens = cli.int_list(o.tokens, "--tokens")
else
  local text = o.text
  if o.text_file then
    local ok, t = pcall(mp.read_file, o.text_file, {what = "--text-file", max_bytes = 1 << 30})
    if not ok then cli.fail("sinks", t, 1) end
    text = t
  end
  tokens = m:to_tokens(text)
end
while #tokens > o.max_tokens do table.remove(tokens) end
local T = #tokens
if T < 4 then cli.fail("sinks", ("need at least 4 tokens, got %d"):format(T)) end

o.label = o.model
sinks.run(m, tokens, o)
