-- views_attr.lua — mp.attribution_patch with a metric function that closes
-- (or keeps) its logits argument: each run gives the metric logits of its own,
-- so closing them in the clean run neither crashes the corrupted run (it
-- copied into the closed Tensor's freed memory) nor changes the result, which
-- must equal the one of the same metric that leaves its argument alone.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local T = 4
local m <close> = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, vocab = 7, ctx = 8, seed = 3}
local clean, corrupt = {{1, 2, 3, 4}}, {{1, 5, 3, 6}}
local name = "ln_final.hook_normalized"

-- logit 2 minus logit 1 at the last position, and its gradient
local function metric(close_it, keep)
  return function(logits)
    local v = logits:get(1, T, 3) - logits:get(1, T, 2)
    local d = mp.zeros(logits:shape())
    d:set(1, 1, T, 3)
    d:set(-1, 1, T, 2)
    if keep then keep[#keep + 1] = logits end
    if close_it then local _ <close> = logits end
    return v, d
  end
end

local want, wv = mp.attribution_patch(m, clean, corrupt, {names = name, metric = metric(false), per = "position"})

t.case("a metric that closes its logits", function()
  local got, gv = mp.attribution_patch(m, clean, corrupt, {names = name, metric = metric(true), per = "position"})
  t.ok(gv.clean == wv.clean and gv.corrupt == wv.corrupt, "the same metric values")
  t.ok((got[name] - want[name]):abs():max() == 0, "the same attributions")
end)

t.case("a metric that keeps its logits: each run's are its own", function()
  local kept = {}
  local _, gv = mp.attribution_patch(m, clean, corrupt, {names = name, metric = metric(false, kept), per = "position"})
  t.ok(#kept == 2 and kept[1] ~= kept[2], "two logits Tensors")
  t.near(kept[1]:get(1, T, 3) - kept[1]:get(1, T, 2), gv.clean, 1e-6, "the clean run's logits were not overwritten")
  t.near(kept[2]:get(1, T, 3) - kept[2]:get(1, T, 2), gv.corrupt, 1e-6, "the corrupted run's")
end)

t.finish("views_attr")
