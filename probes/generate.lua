-- generate.lua — sample a continuation from a model, streaming it to stdout.
--
--   mechprobe generate --model FILE [--tokenizer FILE] [--prompt STR]
--                      [--steps N] [--temperature T] [--top-p P] [--seed S]
--                      [--device cpu|cuda] [--precision fp32|bf16]
local cli = require "cli"
local o = cli.parse(arg, {
  name = "generate",
  summary = "Generate text (greedy with --temperature 0; nucleus sampling otherwise).",
  {"model", "FILE", "model file (checkpoint .h5, llama2.c .bin, GGUF, HF folder)", required = true},
  {"tokenizer", "FILE", "tokenizer file (default: found next to the model)"},
  cli.DEVICE_OPTS[1], cli.DEVICE_OPTS[2],
  {"prompt", "STR", "prompt text (default: start from BOS)", default = ""},
  {"steps", "N", "new tokens at most", default = 64, type = "int"},
  {"temperature", "T", "0 = greedy", default = 1.0, type = "number", min = 0},
  {"top_p", "P", "nucleus sampling mass", default = 0.9, type = "number", min = 0, max = 1},
  {"seed", "S", "random seed", default = 1234, type = "int"},
})
local dev = cli.check_device("generate", o)
local model = mp.load(o.model, {tokenizer = o.tokenizer, device = dev.device, precision = dev.precision})
local t0, n = os.time(), 0
io.write(o.prompt)
local prompt = model:to_tokens(o.prompt)
local text, toks = model:generate(prompt, {
  max_new_tokens = o.steps, temperature = o.temperature, top_p = o.top_p, seed = o.seed,
  on_token = function(id, piece) n = n + 1; io.write(piece or ""); io.flush() end,
})
io.write("\n")
io.stderr:write(("[%d new tokens, seed %d]\n"):format(n, o.seed))
