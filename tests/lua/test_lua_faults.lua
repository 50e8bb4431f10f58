-- test_lua_faults.lua — faults in the Lua bindings (issue 17, items 2, 7, 8):
-- closing a model from inside its own callbacks, errors raised by hook
-- functions (no leak of the forward's workspace, the error object kept), and
-- integer arguments (token ids, model sizes, positions) checked before any
-- cast. Every case must end in a Lua error with the expected words, never a
-- crash; the model must still work afterwards.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local asan = (os.getenv("ASAN_OPTIONS") or "") ~= ""

local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, vocab = 20, ctx = 16, seed = 3}
local ref = m:forward({1, 2, 3})
local IN_USE = "mp.Model:close: the model is in use (called from inside its own forward/generate/train callback)"

local function still_works(label)
  local l = m:forward({1, 2, 3})
  local d = 0
  for i = 1, 3 do for v = 1, 20 do d = math.max(d, math.abs(l[1][i][v] - ref[1][i][v])) end end
  t.ok(d == 0, label .. ": the model still gives the same logits after the error (max diff " .. d .. ")")
end

local function batch(B, T)
  local x, y = {}, {}
  for b = 1, B do x[b], y[b] = {}, {} for i = 1, T do x[b][i] = (b + i) % 20; y[b][i] = (b + i + 1) % 20 end end
  return x, y
end
local task = {sample = function(_, B, T) return batch(B, T) end}
local train_opts = {steps = 3, batch = 1, seq_len = 4, progress = false, lr = 0}

-- item 2: close from inside each kind of callback
t.case("close in a forward hook", function()
  t.expect_error(function()
    m:forward({1, 2, 3}, {fwd_hooks = {{"blocks.0.hook_resid_pre", function() m:close() end}}})
  end, IN_USE, "close in hook")
end)
still_works("close in a forward hook")
t.case("close in a run_with_cache hook (to-be-closed variable)", function()
  t.expect_error(function()
    m:run_with_cache({1, 2}, {names = "hook_embed", fwd_hooks = {{"hook_embed", function() local _ <close> = m end}}})
  end, IN_USE, "<close> in hook")
end)
t.case("close in generate's on_token", function()
  t.expect_error(function() m:generate({1, 2}, {max_new_tokens = 3, on_token = function() m:close() end}) end,
    IN_USE, "close in on_token")
end)
t.case("close in a hook during generate", function()
  t.expect_error(function()
    m:generate({1, 2}, {max_new_tokens = 3, fwd_hooks = {{"hook_embed", function() m:close() end}}})
  end, IN_USE, "close in generate hook")
end)
t.case("close in train's on_step", function()
  local o = {task = task, on_step = function() m:close() end}
  for k, v in pairs(train_opts) do o[k] = v end
  t.expect_error(function() m:train(o) end, IN_USE, "close in on_step")
end)
t.case("close in the task's sample during train", function()
  local o = {task = {sample = function(_, B, T) m:close(); return batch(B, T) end}}
  for k, v in pairs(train_opts) do o[k] = v end
  t.expect_error(function() m:train(o) end, IN_USE, "close in sample")
end)
t.case("close in a hook during train_step and loss", function()
  local x, y = batch(1, 4)
  local hooks = {fwd_hooks = {{"hook_embed", function() m:close() end}}}
  t.expect_error(function() m:train_step(mp.optim.adamw{lr = 0}, x, y, hooks) end, IN_USE, "close in train_step hook")
  t.expect_error(function() m:loss(x, y, hooks) end, IN_USE, "close in loss hook")
end)
t.case("close in a hook during capture", function()
  local out = os.tmpname()
  os.remove(out)
  t.expect_error(function()
    m:capture({1, 2}, {out = out, hooks = "hook_embed", fwd_hooks = {{"hook_embed", function() m:close() end}}})
  end, IN_USE, "close in capture hook")
  t.ok(io.open(out) == nil, "no run file left after the failed capture")
end)
t.case("training from inside the model's own hook is refused", function()
  local x, y = batch(1, 2)
  t.expect_error(function()
    m:forward({1, 2}, {fwd_hooks = {{"hook_embed", function() m:train_step(mp.optim.adamw{}, x, y) end}}})
  end, "mp.Model:train_step: the model is in use", "train_step in hook")
end)
-- review finding 5: set_pos / set_rope_scaling rewrite the config the running
-- pass (and generate's KV cache) reads: refused inside the model's callbacks
for _, c in ipairs{
  {"set_pos", function() m:set_pos("none") end},
  {"set_rope_scaling", function() m:set_rope_scaling{type = "pi", factor = 2} end},
} do
  local name, change = c[1], c[2]
  t.case(name .. " inside the model's own callbacks is refused", function()
    local msg = "mp.Model:" .. name .. ": the model is in use"
    t.expect_error(function() m:forward({1, 2, 3}, {fwd_hooks = {{"blocks.0.hook_resid_pre", change}}}) end,
      msg, name .. " in a forward hook")
    t.expect_error(function() m:generate({1, 2}, {max_new_tokens = 3, on_token = change}) end,
      msg, name .. " in on_token")
    t.expect_error(function()
      m:generate({1, 2}, {max_new_tokens = 3, fwd_hooks = {{"hook_embed", change}}})
    end, msg, name .. " in a hook during generate")
  end)
  still_works(name .. " refused in callbacks")
end

t.case("a forward inside another model's hook, and the other model closed there", function()
  local m2 = mp.model.new{d_model = 8, n_layer = 1, n_head = 1, vocab = 20, ctx = 8}
  m:forward({1, 2}, {fwd_hooks = {{"hook_embed", function() m2:forward({3}); m2:close() end}}})
  t.expect_error(function() m2:forward({1}) end, "Model is closed", "m2 closed")
end)
t.case("close from an option table's metamethod during save", function()
  local path = os.tmpname()
  local opts = setmetatable({}, {__index = function() m:close() end})
  t.expect_error(function() m:save(path .. ".h5", opts) end, IN_USE, "close in save's options")
  os.remove(path)
end)
still_works("after the close attempts")

-- item 7: errors from hook functions stop the forward without leaking
local saved
m:forward({1, 2}, {fwd_hooks = {{"hook_embed", function(x) saved = x end}}})
t.case("returning a stale hook view is an error naming the hook", function()
  t.expect_error(function() m:forward({1, 2}, {fwd_hooks = {{"hook_embed", function() return saved end}}}) end,
    "hook at hook_embed: Tensor is no longer valid", "stale view")
end)
t.case("an error object that is not a string arrives unchanged", function()
  local obj = {code = 7}
  local ok, e = pcall(m.forward, m, {1, 2}, {fwd_hooks = {{"hook_embed", function() error(obj) end}}})
  t.ok(not ok and e == obj, "the table raised in the hook is the error of forward")
  ok, e = pcall(m.generate, m, {1}, {max_new_tokens = 2, on_token = function() error(obj) end})
  t.ok(not ok and e == obj, "the table raised in on_token is the error of generate")
end)
t.case("on_token runs in a protected call: its arguments and a string error arrive unchanged", function()
  local seen = {}
  local _, ids = m:generate({1, 2}, {max_new_tokens = 3, on_token = function(id, piece) seen[#seen + 1] = {id, piece} end})
  t.ok(#seen == 3 and seen[3][1] == ids[5] and seen[3][2] == nil, "on_token(id, nil) for each new token")
  local ok, e = pcall(m.generate, m, {1}, {max_new_tokens = 2, on_token = function() error("stop here", 0) end})
  t.ok(not ok and e == "stop here", "the string raised in on_token is the error of generate: " .. tostring(e))
end)
t.case("a view kept by a failing hook is invalid afterwards", function()
  local kept
  pcall(m.forward, m, {1, 2}, {fwd_hooks = {{"hook_embed", function(x) kept = x; error("boom") end}}})
  t.expect_error(function() return kept:sum() end, "no longer valid", "kept view")
end)
still_works("after hook errors")

-- 200 failing forwards on a model whose forward buffers are ~0.6 MB: before
-- the fix each one leaked them (~125 MB). The address-space size must stay
-- flat (ASan's allocator keeps a quarantine, so there LSan checks instead).
local function vm_kb()
  local f = io.open("/proc/self/statm")
  if not f then return nil end
  local pages = f:read("n"); f:close()
  return pages * 4
end
local big = mp.model.new{d_model = 64, n_layer = 1, n_head = 4, vocab = 64, ctx = 128, seed = 1}
local toks = {}
for i = 1, 128 do toks[i] = i % 64 end
local stale
big:forward({1}, {logits = false, fwd_hooks = {{"hook_embed", function(x) stale = x end}}})
local kinds = {
  function() return stale end,                         -- a stale view: raised after the call
  function() error("hook failed") end,                 -- a plain error in the function
  function(x) return mp.zeros(3) end,                  -- a Tensor of the wrong size
}
local function failing(n)
  for i = 1, n do
    local ok = pcall(big.forward, big, toks, {logits = false, fwd_hooks = {{"hook_embed", kinds[i % 3 + 1]}}})
    assert(not ok, "the forward should fail")
  end
end
failing(20)
collectgarbage(); collectgarbage()
local before = vm_kb()
failing(200)
collectgarbage(); collectgarbage()
local after = vm_kb()
if before and not asan then
  print(("200 failing forwards: address space %d -> %d kB"):format(before, after))
  t.ok(after - before < 16 * 1024, ("address space grew by %d kB over 200 failing forwards"):format(after - before))
end

-- item 8: token ids and sizes are checked before any cast
local bad_tokens = {
  {{4294967297}, "tokens[1] = 4294967297 is outside the vocabulary (0..19; the vocabulary has 20 tokens)"},
  {{1, 1.7}, "tokens[2] must be an integer in [0, 19], got 1.7"},
  {{1e10}, "tokens[1] = 10000000000 is outside the vocabulary"},
  {{0 / 0}, "tokens[1] must be an integer in [0, 19], got "},
  {{-1}, "tokens[1] = -1 is outside the vocabulary (0..19"},
  {{20}, "tokens[1] = 20 is outside the vocabulary (0..19; the vocabulary has 20 tokens)"},
  {{{1, 2}, {3, 2^53}}, "tokens[2][2] = 9007199254740992 is outside the vocabulary"},
  {{1e300}, "tokens[1] must be an integer in [0, 19], got 1e+300"},
}
for _, c in ipairs(bad_tokens) do
  t.case("tokens " .. c[2], function()
    t.expect_error(function() m:forward(c[1]) end, c[2], "forward")
    t.expect_error(function() m:generate(c[1], {max_new_tokens = 1}) end, c[2]:gsub("^tokens", "prompt"), "generate")
  end)
end
t.case("token Tensors", function()
  t.expect_error(function() m:forward(mp.tensor{1, 1.5}) end, "element 2 of the Tensor is 1.5", "1.5")
  t.expect_error(function() m:forward(mp.tensor{0 / 0}) end, "element 1 of the Tensor is ", "nan")
  t.expect_error(function() m:forward(mp.tensor{1e10}) end, "element 1 of the Tensor is 1", "1e10")
  t.expect_error(function() m:forward(mp.tensor{20}) end, "element 1 of the Tensor = 20 is outside the vocabulary", "20")
end)
t.case("targets may be -1, nothing else outside the vocabulary", function()
  local x = {{1, 2, 3}}
  t.ok(m:loss(x, {{-1, 2, -1}}) > 0, "-1 targets are ignored")
  t.expect_error(function() m:loss(x, {{-2, 2, 3}}) end, "targets[1][1] = -2 is neither -1 (ignored) nor a token id", "-2")
  t.expect_error(function() m:loss(x, {{4294967298, 2, 3}}) end, "targets[1][1] = 4294967298 is neither", "2^32+2")
end)
local cfg = {n_layer = 1, n_head = 1, vocab = 4, ctx = 4}
local function new_with(k, v)
  local c = {d_model = 4}
  for a, b in pairs(cfg) do c[a] = b end
  c[k] = v
  return function() mp.model.new(c) end
end
t.case("model sizes", function()
  t.expect_error(new_with("d_model", 2^40), "mp.model.new: option 'd_model' must be an integer in [0, 2147483647], got 1099511627776.0", "2^40")
  t.expect_error(new_with("d_model", 1.5), "mp.model.new: option 'd_model' must be an integer in [0, 2147483647], got 1.5", "1.5")
  t.expect_error(new_with("vocab", 4294967300), "mp.model.new: option 'vocab' must be an integer in [0, 2147483647], got 4294967300", "vocab")
  t.expect_error(new_with("ctx", 0 / 0), "mp.model.new: option 'ctx' must be an integer in [0, 2147483647], got ", "nan")
  t.expect_error(new_with("seed", -1), "mp.model.new: option 'seed' must be an integer in [0, 9223372036854775807], got -1", "seed")
end)
t.case("integer options", function()
  t.expect_error(function() m:generate({1}, {max_new_tokens = 2.5}) end, "generate: option 'max_new_tokens' must be an integer in [0, 2147483646], got 2.5", "max_new")
  t.expect_error(function() m:generate({1}, {max_new_tokens = -1}) end, "generate: option 'max_new_tokens' must be an integer in [0, 2147483646], got -1", "max_new<0")
  local o = {task = task, steps = 2^32}
  t.expect_error(function() m:train(o) end, "train: option 'steps' must be an integer in [0, ", "steps")
  t.expect_error(function() m:train{task = task, steps = 2, batch = 0.5} end, "train: option 'batch' must be an integer in [1, ", "batch")
  t.expect_error(function() mp.ablate.zero{head = 2^31} end, "mp.ablate.zero: option 'head' must be an integer in [0, 2147483647], got 2147483648", "head")
  t.expect_error(function() mp.ablate.zero{positions = {1, 2.5}} end, "mp.ablate.zero: option 'positions'[2] must be an integer in [-2147483647, 2147483647], got 2.5", "positions")
  -- negative positions count from the end (-1 the last); only INT_MIN, with no position of its own, is refused
  t.expect_error(function() mp.ablate.zero{positions = -2^31} end, "mp.ablate.zero: option 'positions' must be an integer in [-2147483647, 2147483647], got -2147483648", "positions<-INT_MAX")
end)
-- item 11: an ablation position beyond the input is an error naming it and T
t.case("ablation positions beyond T", function()
  t.expect_error(function() m:forward({1, 2}, {fwd_hooks = {{"hook_embed", mp.ablate.zero{positions = {1, 5}}}}}) end,
    "fwd_hooks[1]: zero ablation at position 5, but the input has T = 2 positions", "forward")
  local x, y = batch(1, 4)
  t.expect_error(function() m:loss(x, y, {fwd_hooks = {{"hook_embed", mp.scale(0, {positions = 4})}}}) end,
    "scale at position 4, but the input has T = 4", "loss")
  -- generate: positions up to the prompt plus the new tokens are fine
  local _, ids = m:generate({1, 2}, {max_new_tokens = 3, fwd_hooks = {{"hook_embed", mp.ablate.zero{positions = 4}}}})
  t.ok(#ids == 5, "generate with an ablation at the last generated position")
  t.expect_error(function() m:generate({1, 2}, {max_new_tokens = 3, fwd_hooks = {{"hook_embed", mp.ablate.zero{positions = 5}}}}) end,
    "at position 5, but the input has T = 5", "generate")
end)
-- review finding 6a: a string option read through a C pointer must stay
-- anchored while C uses it. An options table whose __index returns a fresh
-- long string (never interned) and runs a full collection when a later option
-- is read: a string popped too early is freed there, and ASan reports its use.
local function gc_opts(strings, gc_key)
  local n = 0
  return setmetatable({}, {__index = function(_, k)
    if k == gc_key then collectgarbage("collect") end
    if strings[k] then n = n + 1; return strings[k] .. string.rep(" ", 48 - #strings[k]) .. n end
  end})
end
t.case("option strings stay valid while used (fresh strings from __index, collections between)", function()
  for _ = 1, 10 do
    local f = mp.plot.figure(gc_opts({title = "title"}, "width"))
    local ax = f:axes()
    ax:line(nil, {1, 2, 3}, gc_opts({label = "label"}, "width"))
    ax:scatter({1, 2}, {3, 4}, gc_opts({label = "a", colorbar_label = "b"}, "colorbar_label"))
    f:close()
  end
  -- lmodel.c: the logits mode and set_rope_scaling's type (no collection can
  -- run in their windows today; kept on the stack all the same)
  local lopt = setmetatable({}, {__index = function(_, k) if k == "logits" then return ("lAst"):lower() end end})
  for _ = 1, 10 do
    collectgarbage("collect")
    t.ok(#m:forward({1, 2}, lopt)[1] == 20, "logits = \"last\" from __index")
  end
  t.expect_error(function() m:set_rope_scaling(gc_opts({type = "bogus"}, "factor")) end,
    "set_rope_scaling: type must be", "a bad fresh type")
  m:set_rope_scaling(nil)
end)
still_works("after option strings from __index")

still_works("at the end")
m:close()
t.ok(tostring(m) == "Model(closed)", "closed")
t.finish("test_lua_faults")
