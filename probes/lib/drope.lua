-- drope.lua — DroPE: take a model trained with a rotary scheme, drop the
-- rotation (the model becomes NoPE: pos "none", same weights), and recalibrate
-- it briefly at the training length with a fresh optimizer.
--
--   local drope = require "drope"
--   local res = drope.apply(m, {task = t, steps = 100, lr = 3e-4})
--
-- Options: task (required: anything m:train accepts), steps (default 100),
-- lr (3e-4), batch (8), seq_len (the model's ctx: the training length),
-- warmup (steps // 10), progress (false), eval ({tokens, targets}: the batch
-- for loss_dropped; default one task batch). Returns m:train's result table,
-- with loss_dropped: the loss right after dropping, before any recalibration. The model is changed in place (m.config.pos == "none").
local drope = {}

function drope.apply(m, o)
  assert(type(o) == "table" and o.task, "drope.apply: option 'task' is required")
  local pos = m.config.pos
  if pos == "learned" or pos == "none" then
    error(("drope.apply: the model has no rotary positions to drop (pos %s)"):format(pos), 2)
  end
  m:set_rope_scaling(nil)
  m:set_pos("none")
  local T = o.seq_len or m.config.ctx
  local toks, tgts
  if o.eval then toks, tgts = o.eval[1], o.eval[2] else toks, tgts = o.task:sample(o.batch or 8, T) end
  local dropped = m:loss(toks, tgts)
  local steps = o.steps or 100
  local res = m:train{task = o.task, steps = steps, lr = o.lr or 3e-4, batch = o.batch or 8, seq_len = T,
                      warmup = o.warmup or steps // 10, resume = false, progress = o.progress or false}
  res.loss_dropped = dropped
  return res
end

return drope
