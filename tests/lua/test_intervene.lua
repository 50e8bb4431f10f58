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

-- A hook function returning a Tensor of the wrong shape: the error names the
-- hook point, both shapes and where the function is defined (file:line), also
-- when the element count matches (a transposed [d, T] for a [1, T, d] view).
local function bad(v) return v:select(1, 1) end            -- [3, 16] for [1, 3, 16]
local line = debug.getinfo(bad, "S").linedefined
local ok2, err2 = pcall(m.forward, m, toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", bad}}})
err2 = tostring(err2)
t.ok(not ok2 and err2:find("hook at blocks.0.hook_resid_mid", 1, true) and err2:find("shape [3,16]", 1, true)
     and err2:find("is [1,3,16]", 1, true) and err2:find("test_intervene.lua:" .. line, 1, true),
     "wrong shape: point, shapes, file:line: " .. err2)
local ok3, err3 = pcall(m.forward, m, toks, {fwd_hooks = {{"blocks.0.hook_resid_mid",
  function(v) return mp.zeros{16, 3} end}}})
t.ok(not ok3 and tostring(err3):find("shape [16,3]", 1, true), "same count, wrong shape: " .. tostring(err3))
t.ok(maxdiff(m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", function(v) return v:clone() end}}}),
             m:forward(toks)) == 0, "the right shape is taken (control)")

-- positions counted from the end (Python-style): -1 is the last of T = 3, the
-- same edit as positions = 2, bit for bit; -4 is before the start: refused
local z_last = m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", mp.ablate.zero{positions = 2}}}})
local z_neg = m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", mp.ablate.zero{positions = -1}}}})
t.ok(maxdiff(z_last, z_neg) == 0 and maxdiff(z_last, m:forward(toks)) > 1e-4, "positions = -1 is the last position")
local z_two = m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", mp.scale(0, {positions = {0, -2}})}}})
local z_ref = m:forward(toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", mp.scale(0, {positions = {0, 1}})}}})
t.ok(maxdiff(z_two, z_ref) == 0, "a list with a negative entry")
local ok4, err4 = pcall(m.forward, m, toks, {fwd_hooks = {{"blocks.0.hook_resid_mid", mp.ablate.zero{positions = -4}}}})
t.ok(not ok4 and tostring(err4):find("at position -4, but the input has T = 3 positions (0..2, or -3..-1 from the end)",
                                     1, true), "before the start: " .. tostring(err4))
t.finish("test_intervene_lua")
