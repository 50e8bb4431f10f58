-- test_pos.lua — the positional schemes from Lua: mp.model.new{pos=...} for
-- every scheme with m.config fields, m:set_rope_scaling (PI / NTK / YaRN change
-- the loss past the training length and nothing when switched off again; bad
-- arguments are refused), m:set_pos, checkpoints keeping the scheme, and DroPE
-- (probes/lib/drope.lua) on a byte-level model of a GPL text: the model becomes
-- NoPE and a short recalibration at the training length lowers its val loss.
local function check(c, ...) if not c then error(string.format(...), 2) end end
package.path = (os.getenv("MP_SRC") or ".") .. "/probes/lib/?.lua;" .. package.path
local drope = require "drope"

for _, pos in ipairs{"rope", "none", "half_rope", "high_freq", "rope_id"} do
  local m = mp.model.new{d_model=16, n_layer=1, n_head=2, d_mlp=32, vocab=20, ctx=16, pos=pos, seed=1}
  check(m.config.pos == pos, "pos %s -> %s", pos, m.config.pos)
  if pos == "half_rope" or pos == "rope_id" then check(m.config.rope_dims == 4, "default rope_dims %s", m.config.rope_dims) end
  check(m.config.pos_temp == (pos == "rope_id"), "%s: pos_temp", pos)
end
local ok, err = pcall(mp.model.new, {d_model=16, n_layer=1, n_head=2, vocab=20, ctx=16, pos="drope"})
check(not ok and err:find("pos must be one of"), "unknown pos refused: %s", err)
ok, err = pcall(mp.model.new, {d_model=16, n_layer=1, n_head=2, vocab=20, ctx=16, pos="half_rope", rope_dims=3})
check(not ok and err:find("rope_dims"), "odd rope_dims refused: %s", err)
local m = mp.model.new{d_model=16, n_layer=1, n_head=2, vocab=20, ctx=16, pos="rope_id", pos_temp=false}
check(m.config.pos_temp == false, "pos_temp=false")

-- inference-time scaling
m = mp.model.new{d_model=32, n_layer=2, n_head=4, d_mlp=64, vocab=20, ctx=16, seed=3, init_std=0.2}
local toks, tgts = {{}}, {{}}
for t = 1, 48 do toks[1][t] = (t * 7) % 20; tgts[1][t] = (t * 7 + 3) % 20 end
local short_t, short_g = {{}}, {{}}
for t = 1, 16 do short_t[1][t] = toks[1][t]; short_g[1][t] = tgts[1][t] end
local base, base_short = m:loss(toks, tgts), m:loss(short_t, short_g)
for _, ty in ipairs{"pi", "ntk", "yarn"} do
  m:set_rope_scaling{type=ty, factor=4}
  check(m.config.rope_scaling == ty and m.config.rope_factor == 4, "%s set", ty)
  local l = m:loss(toks, tgts)
  check(math.abs(l - base) > 1e-5, "%s changes the loss (%.6f vs %.6f)", ty, l, base)
  print(string.format("set_rope_scaling %-4s factor 4: loss at 3x ctx %.5f (unscaled %.5f)", ty, l, base))
end
m:set_rope_scaling{type="yarn", factor=4, original_ctx=64, beta_fast=16, beta_slow=2}
check(m.config.rope_orig_ctx == 64, "original_ctx")
m:set_rope_scaling(nil)
check(m.config.rope_scaling == "none" and m:loss(toks, tgts) == base, "scaling off restores the model exactly")
ok, err = pcall(m.set_rope_scaling, m, {type="longrope", factor=2})
check(not ok and err:find("type must be"), "bad type refused: %s", err)
ok, err = pcall(m.set_rope_scaling, m, {type="ntk", factor=-2})
check(not ok and err:find("factor"), "bad factor refused: %s", err)

-- checkpoints keep the scheme
local path = os.tmpname() .. ".h5"
m:set_rope_scaling{type="yarn", factor=2, original_ctx=32}
m:save(path)
local m2 = mp.model.load(path)
check(m2.config.rope_scaling == "yarn" and m2.config.rope_factor == 2 and m2.config.rope_orig_ctx == 32, "yarn saved")
check(math.abs(m2:loss(toks, tgts) - m:loss(toks, tgts)) < 1e-6, "same loss after load")
m3 = mp.model.new{d_model=16, n_layer=1, n_head=2, vocab=20, ctx=16, pos="rope_id", pos_temp=false, rope_dims=6, d_head=8}
m3:save(path)
local m4 = mp.model.load(path)
check(m4.config.pos == "rope_id" and m4.config.pos_temp == false and m4.config.rope_dims == 6, "rope_id saved")
os.remove(path)

-- set_pos
ok, err = pcall(m.set_pos, m, "learned")
check(not ok and err:find("learned"), "to learned refused: %s", err)

-- DroPE on a byte-level text model
local text = "/usr/share/common-licenses/GPL-3"
local f = io.open(text)
if not f then print("SKIP: " .. text .. " is absent"); os.exit(77) end
f:close()
local task = mp.tasks.text{path=text, ctx=32, seed=5}
m = mp.model.new{d_model=32, n_layer=2, n_head=4, d_mlp=64, vocab=257, ctx=32, seed=11}
m:train{task=task, steps=150, lr=3e-3, batch=8, progress=false}
local vt, vg = task:sample(16, 32, "val")
local trained = m:loss(vt, vg)
local res = drope.apply(m, {task=task, steps=40, lr=1e-3, eval={vt, vg}})
local recal = m:loss(vt, vg)
check(m.config.pos == "none", "DroPE leaves a NoPE model")
-- (a briefly trained byte model leans little on positions: dropping them costs little)
check(res.loss_dropped > trained - 0.01, "dropping RoPE does not help: %.4f -> %.4f", trained, res.loss_dropped)
check(recal < res.loss_dropped, "recalibration recovers: %.4f -> %.4f", res.loss_dropped, recal)
print(string.format("DroPE: val loss trained %.4f, dropped %.4f, after 40 recalibration steps %.4f", trained,
                    res.loss_dropped, recal))
print("test_pos.lua: ok")
