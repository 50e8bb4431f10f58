-- views_hooks.lua — a forward hook's view of the activation and every view a
-- hook makes of it share one storage, invalidated when the hook returns:
-- a sub-view kept past the callback raises "Tensor is no longer valid (hook
-- views live only during the callback ...)" on read and on write, also when the
-- hook closed (<close>) or dropped and collected its view first, or raised;
-- inside the callback, sub-views read and write the activation; and a hook
-- that closes an intervention's source Tensor does not free it under the
-- forward that patches from it.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local m <close> = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, vocab = 7, ctx = 8, seed = 3}
local toks = {1, 2, 3, 4}
local WHY = "hook views live only during the callback"

local function invalid(v, what)
  t.expect_error(function() return v:sum() end, WHY, what .. ": read")
  t.expect_error(function() return v:get(1) end, WHY, what .. ": get")
  t.expect_error(function() return v:totable() end, WHY, what .. ": totable")
  t.expect_error(function() v:fill_(1) end, WHY, what .. ": write")
  t.expect_error(function() v:set(1, 1) end, WHY, what .. ": set")
  t.expect_error(function() return v:narrow(1, 1, 1) end, WHY, what .. ": a view of it")
end

t.case("sub-views kept past the hook", function()
  local kept = {}
  m:forward(toks, {fwd_hooks = {{"hook_embed", function(x)
    kept.row = x[1][2]                      -- [D]: a view of a view
    kept.narrow = x[1]:narrow(2, 2)          -- positions 2..3 of batch row 1
    kept.flat = x:reshape(-1)
  end}}})
  for k, v in pairs(kept) do invalid(v, k) end
end)

t.case("sub-views kept past a hook that closed its view", function()
  local kept
  m:forward(toks, {fwd_hooks = {{"hook_embed", function(x)
    kept = x[1]:narrow(1, 2, 2)
    local _ <close> = x                     -- releases the view itself before the hook returns
  end}}})
  invalid(kept, "after <close>")
end)

t.case("sub-views kept past a hook whose view was collected", function()
  local kept
  m:forward(toks, {fwd_hooks = {{"hook_embed", function(x)
    kept = x[1][1]
    x = nil
    collectgarbage(); collectgarbage()      -- the hook's view is gone before the callback returns
  end}}})
  invalid(kept, "after collection")
end)

t.case("sub-views kept past a hook that raised", function()
  local kept
  local ok = pcall(m.forward, m, toks, {fwd_hooks = {{"hook_embed", function(x)
    kept = x:select(1)[2]
    error("boom")
  end}}})
  assert(not ok, "the forward fails with the hook")
  invalid(kept, "after an error")
end)

t.case("inside the hook, sub-views read and write the activation", function()
  -- zeroing the activation through sub-views == returning zeros (an
  -- independent route into the activation)
  local a = m:forward(toks, {fwd_hooks = {{"hook_embed", function(x)
    for p = 1, #toks do x[1][p]:fill_(0) end
  end}}})
  local b = m:forward(toks, {fwd_hooks = {{"hook_embed", function(x) return mp.zeros(x:shape()) end}}})
  local c = m:forward(toks)
  t.ok((a - b):abs():max() == 0, "writes through sub-views reach the forward")
  t.ok((a - c):abs():max() > 0, "and they change it")
  local seen
  m:forward(toks, {fwd_hooks = {{"hook_embed", function(x) seen = x[1][3]:sum() - x:select(1):select(3):sum() end}}})
  t.ok(seen == 0, "two routes to the same row read the same values")
end)

t.case("an intervention's source Tensor closed by a hook during the forward", function()
  -- the forward reads the source through a reference of its own: the result is
  -- the one of the same patch whose source stays open
  local _, c = m:run_with_cache(toks, {names = "blocks.0.hook_resid_pre"})
  local src = c["blocks.0.hook_resid_pre"]:clone():mul_(-1)
  local want = m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_pre", mp.patch(src)}}})
  local got = m:forward(toks, {fwd_hooks = {{"hook_embed", function() local _ <close> = src end},
                                            {"blocks.0.hook_resid_pre", mp.patch(src)}}})
  t.ok((got - want):abs():max() == 0, "the patch read the source it was given")
  t.expect_error(function() return src:sum() end, "Tensor is no longer valid (it was closed)", "the closed source")
end)

t.finish("views_hooks")
