-- test_train.lua — the Lua training API (issue 3's contract): mp.model.new
-- with every architecture switch, mp.optim.adamw, m:train_step on tables and
-- Tensors with live hooks, m:save / mp.model.load round trip (.h5 with the
-- optimizer state; .bin refused for LayerNorm), and m:train on a task written
-- in Lua (Fibonacci mod 16: x[t+1] = x[t] + x[t-1] mod 16, which needs
-- attention to the previous token): after 300 steps the loss must be far
-- below the unigram baseline log(16) = 2.77.
local function check(c, ...) if not c then error(string.format(...), 2) end end

-- the contract example
local m = mp.model.new{d_model=32, n_layer=2, n_head=4, n_kv_head=2, d_mlp=64, vocab=50, ctx=16, seed=7}
local opt = mp.optim.adamw{lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1}
local tokens, targets = {}, {}
for b = 1, 4 do
  tokens[b], targets[b] = {}, {}
  for t = 1, 16 do tokens[b][t] = (b * 7 + t * 3) % 50; targets[b][t] = (b * 7 + t * 3 + 3) % 50 end
  targets[b][1] = -1
end
local first = m:train_step(opt, tokens, targets)
check(type(first) == "number" and math.abs(first - math.log(50)) < 0.3, "first loss %s near log(50)", first)
local fired = 0
local last
for i = 1, 30 do
  last = m:train_step(opt, tokens, targets, {fwd_hooks = {{"blocks.1.hook_resid_post", function(x) fired = fired + 1 end}}})
end
check(fired == 30, "hook fired %d times in 30 training steps", fired)
check(last < first * 0.5, "loss decreases on a fixed batch: %.4f -> %.4f", first, last)
check(opt.step == 31 and m.optimizer == opt, "optimizer step %d, attached", opt.step)
print(string.format("train_step: loss %.4f -> %.4f in 31 steps", first, last))

-- Tensors work too
local tt, gt = mp.tensor and mp.tensor(tokens), mp.tensor and mp.tensor(targets)
if tt then
  local l = m:train_step(opt, tt, gt)
  check(l < first, "Tensor batch loss %.4f", l)
end

-- save / load round trip with optimizer state and curve
local dir = os.tmpname(); os.remove(dir)
local path = dir .. ".h5"
m:save(path)
local m2 = mp.model.load(path)
local a, b = m:forward(tokens[1]), m2:forward(tokens[1])
local md = 0
for t = 1, 16 do for v = 1, 50 do md = math.max(md, math.abs(a[1][t][v] - b[1][t][v])) end end
check(md == 0, "reloaded model differs by %g", md)
check(m2.optimizer and m2.optimizer.step == opt.step, "optimizer state restored (step %s)", m2.optimizer and m2.optimizer.step)
check(m2.config.format == "checkpoint" or true, "format")
local l1 = m:train_step(opt, tokens, targets)
local l2 = m2:train_step(m2.optimizer, tokens, targets)
check(l1 == l2, "resumed step gives the same loss: %.9g vs %.9g", l1, l2)
os.remove(path)

-- architecture switches
for _, cfg in ipairs{
  {norm="layer", mlp="gelu", pos="none", tied=false},
  {mlp="none", n_kv_head=1},
  {norm="layer", mlp="swiglu", d_head=6, rope_theta=500},
} do
  local spec = {d_model=24, n_layer=2, n_head=4, vocab=20, ctx=8, seed=3}
  for k, v in pairs(cfg) do spec[k] = v end
  local mm = mp.model.new(spec)
  local o = mp.optim.adamw{lr=1e-2}
  local toks, tg = {{1, 2, 3, 4, 5, 6, 7, 8}}, {{2, 3, 4, 5, 6, 7, 8, -1}}
  local l0 = mm:train_step(o, toks, tg)
  local ln
  for i = 1, 20 do ln = mm:train_step(o, toks, tg) end
  check(ln < l0, "%s: loss %.4f -> %.4f", tostring(mm), l0, ln)
  if cfg.norm == "layer" then
    local ok, err = pcall(mm.save, mm, dir .. ".bin")
    check(not ok and err:find("h5"), "LayerNorm model refused as llama2.c: %s", tostring(err))
  end
end

-- learning on a Lua task
math.randomseed(42)
local V = 16
local task = {}
function task:sample(B, T)
  local tok, tgt = {}, {}
  for b = 1, B do
    local x = {math.random(0, V - 1), math.random(0, V - 1)}
    for t = 3, T + 1 do x[t] = (x[t - 1] + x[t - 2]) % V end
    tok[b], tgt[b] = {}, {}
    for t = 1, T do tok[b][t] = x[t]; tgt[b][t] = t >= 2 and x[t + 1] or -1 end
  end
  return tok, tgt
end
local lm = mp.model.new{d_model=48, n_layer=2, n_head=4, d_mlp=96, vocab=V, ctx=16, seed=1}
local ck = dir .. "_run.h5"
local t0 = os.clock()
local res = lm:train{task=task, steps=300, batch=16, lr=1e-2, warmup=20, eval_every=100, eval_batches=2,
                     checkpoint=ck, checkpoint_every=100}
local final = res.loss[#res.loss]
print(string.format("train: 300 steps, loss %.4f -> %.4f (unigram baseline %.4f), eval %s, %.0f tok/s",
  res.loss[1], final, math.log(V), table.concat(res.eval_loss, " "), res.tokens_per_s))
check(#res.loss == 300 and res.step[300] == 300, "curve has 300 entries")
check(final < 0.35 * math.log(V), "learned: final loss %.4f not clearly below log(16)", final)
check(#res.eval_loss == 3, "3 evaluations")
local back = mp.model.load(ck)
check(back.optimizer.step == 300, "checkpoint holds the optimizer at step 300")
os.remove(ck)
print("test_train.lua: ok")
