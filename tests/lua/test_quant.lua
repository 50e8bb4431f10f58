-- test_quant.lua — quantized GGUF models through the Lua API: a model saved as
-- Q8_0 loads with its weights quantized (m.weights, m.config.memory about a
-- quarter of float32's), computes logits within the 8-bit error of the float32
-- model (8-bit activations, a few percent; on a CPU without AVX-512 VNNI a
-- prefill of > 32 tokens goes through dequantized panels), generates, saves a float32
-- copy on demand, trains after dequantizing itself, and m:dequantize() turns it
-- into float32 in place.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local tmp = os.tmpname()
os.remove(tmp)

local f = mp.model.new{d_model = 64, n_layer = 2, n_head = 2, vocab = 300, ctx = 64, tokenizer = "bytes",
                       seed = 5, tied = false}
f:save(tmp .. ".q8.gguf", {type = "q8_0"})
f:save(tmp .. ".f32.gguf")
local q = mp.load(tmp .. ".q8.gguf")
local r = mp.load(tmp .. ".f32.gguf")   -- the float32 model the Q8_0 file came from (as llama.cpp reads it)
t.ok(q.weights == "Q8_0" and r.weights == "F32", "weights: " .. q.weights .. ", " .. r.weights)
t.ok(q.config.memory < r.config.memory * 0.4, ("memory as held: Q8_0 %d B vs float32 %d B"):format(
  q.config.memory, r.config.memory))

local toks = {}
for i = 1, 40 do toks[i] = (i * 37) % 256 end
local function maxdiff(a, b)
  local ta, tb = a:totable(), b:totable()
  local d, big = 0, 0
  local function walk(x, y)
    if type(x) == "table" then for i = 1, #x do walk(x[i], y[i]) end
    else d = math.max(d, math.abs(x - y)); big = math.max(big, math.abs(y)) end
  end
  walk(ta, tb)
  return d, big
end
-- 40 tokens: on a CPU with the 8-bit tiles (AVX-512 VNNI) as in decoding, else the
-- weights decoded panel by panel and multiplied in float32; either way within the
-- 8-bit error of the Q8_0 file's weights decoded (not the original float32 ones)
local qd = mp.load(tmp .. ".q8.gguf"):dequantize()
t.ok(qd.weights == "F32", "dequantize() returns the model, now float32")
local d, big = maxdiff(q:forward({toks}), qd:forward({toks}))
t.ok(d <= 0.1 * big, ("prefill of 40: Q8_0 vs its dequantized copy %.3g (largest %.3g; within 10%%)"):format(d, big))
-- 8 tokens: the quantized kernels with 8-bit activations
local short = {table.unpack(toks, 1, 8)}
d, big = maxdiff(q:forward({short}), qd:forward({short}))
t.ok(d <= 0.1 * big and d > 0, ("8 tokens, 8-bit activations: %.3g (largest %.3g; within 10%%, not exact)"):format(d, big))

local text = q:generate("ab", {max_new_tokens = 5, temperature = 0})
t.ok(type(text) == "string", "a quantized model generates")

q:save(tmp .. ".h5")                          -- a float32 copy, the model stays quantized
t.ok(q.weights == "Q8_0", "saving keeps the model quantized")
local back = mp.load(tmp .. ".h5")
d = maxdiff(back:forward({toks}), qd:forward({toks}))
t.ok(d == 0, ("the saved copy is the dequantized model (max diff %.3g)"):format(d))

local loss = q:train_step(mp.optim.adamw{lr = 1e-3}, {toks}, {toks})
t.ok(q.weights == "F32" and loss > 0, "training dequantizes first (loss " .. tostring(loss) .. ")")

for _, s in ipairs({".q8.gguf", ".f32.gguf", ".h5"}) do os.remove(tmp .. s) end
t.finish("test_quant")
