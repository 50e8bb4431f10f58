-- sinks.lua — attention sinks and query/key clusters in every head.
--
--   mechprobe sinks --model FILE (--text STR | --text-file F | --tokens IDS) --out DIR
--
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
  {"model", "FILE", "model checkpoint", required = true},
  {"tokenizer", "FILE", "tokenizer (default: found next to the model)"},
  cli.DEVICE_OPTS[1], cli.DEVICE_OPTS[2],
  {"text", "STR", "input text"},
  {"text_file", "FILE", "input text from a file"},
  {"tokens", "IDS", "comma-separated token ids"},
  {"max_tokens", "N", "truncate the input to N tokens", default = 256, type = "int"},
  {"eps", "X", "a head sinks when alpha_0 > X", default = 0.3, type = "number"},
  {"window", "N", "position window for the stable-rank curve", default = 32, type = "int"},
  {"boot", "N", "bootstrap resamples", default = 1000, type = "int"},
  {"seed", "N", "bootstrap seed", default = 1, type = "int"},
  {"format", "EXT", "figure format: png, svg or pdf", default = "png"},
  {"out", "DIR", "output folder", required = true},
})
cli.check_choice("sinks", o, {"text", "text_file", "tokens"}, "exactly")
if o.window < 1 then cli.fail("sinks", ("--window must be a positive number of positions (got %d)"):format(o.window)) end
cli.check_format("sinks", o.format)
local dev = cli.check_device("sinks", o)

local m = mp.load(o.model, {tokenizer = o.tokenizer, device = dev.device, precision = dev.precision})

-- tokens
local tokens
if o.tokens then
  tokens = cli.int_list(o.tokens, "--tokens")
else
  local text = o.text
  if o.text_file then
    local f = io.open(o.text_file, "rb")
    if not f then cli.fail("sinks", ("%s: cannot open"):format(o.text_file), 1) end
    text = f:read("a")
    f:close()
  end
  tokens = m:to_tokens(text)
end
while #tokens > o.max_tokens do table.remove(tokens) end
local T = #tokens
if T < 4 then cli.fail("sinks", ("need at least 4 tokens, got %d"):format(T)) end

o.label = o.model
sinks.run(m, tokens, o)
