-- test_intervene.lua — the binding of the C interventions (hooks/intervene.h):
-- an intervention whose source Tensor is no longer valid (a hook view kept past
-- its callback) is refused with the Tensor's message when it is registered,
-- instead of being read after the forward pass that owned it freed it (this
-- crashed with a segmentation fault before); a valid source still patches.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local function maxdiff(a, b)
  local d = a:sub(b)
  return math.max(math.abs(d:max()), math.abs(d:min()))
end

local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 32, ctx = 16, seed = 1}
local toks, other = {1, 2, 3}, {7, 8, 9}
local stale, kept
m:forward(other, {fwd_hooks = {{"blocks.0.hook_resid_mid", function(v)
  stale = mp.patch(v)            -- a view: detached when this callback returns
  kept = mp.patch(v:clone())     -- a copy: stays valid
end}}})
local ok, err = pcall(m.forward, m, toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", stale}}})
t.ok(not ok and tostring(err):find("Tensor is no longer valid", 1, true),
     "a patch from a detached view is refused: " .. tostring(err))
-- the whole residual after attention from the other run: its logits exactly
local patched = m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", kept}}})
t.ok(maxdiff(patched, m:forward(other)) < 1e-5, "a patch from a cloned view gives the source run's logits")
t.ok(maxdiff(m:forward(toks), m:forward(other)) > 1e-3, "the two runs differ (control)")
t.finish("test_intervene_lua")
