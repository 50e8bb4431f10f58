-- test_options.lua — the one option rule of the Lua API (lua/lopt.c): an
-- unknown key is an error naming the function and the key, a value of the
-- wrong type is an error naming both types, booleans are true/false only.
-- The exact message for the cases of issue 13 and a sample of every family
-- of functions that take an options table.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)

-- the exact message, with Lua's "file:line: " position prefix removed
local function exactly(fn, want, what)
  local ok, e = pcall(fn)
  local got = tostring(e):gsub("^[^:]*:%d+: ", "")
  t.ok(not ok and got == want, ("%s: got %q, want %q"):format(what or want, ok and "(no error)" or got, want))
end

local base = {d_model = 8, n_layer = 1, n_head = 2, vocab = 260, ctx = 8}
local function with(k, v)
  local o = {}
  for key, val in pairs(base) do o[key] = val end
  o[k] = v
  return o
end
local m = mp.model.new(with("tokenizer", "bytes"))
local toks = {{1, 2, 3}}

t.case("the cases of issue 13", function()
  exactly(function() mp.model.new(with("rope_thetaa", 5e5)) end, "mp.model.new: unknown option 'rope_thetaa'")
  exactly(function() mp.plot.figure{bogus = 1} end, "mp.plot.figure: unknown option 'bogus'")
  exactly(function() m:forward(toks, {fwd_hook = function() end}) end, "forward: unknown option 'fwd_hook'")
  exactly(function() m:run_with_cache(toks, {incl_bwd = true}) end,
    "run_with_cache: incl_bwd = true needs a 'loss' (\"ce\", {logit_diff = {correct, wrong}} or a "
    .. "function(logits) -> value, dlogits): the gradients are those of that metric")
  exactly(function() m:run_with_cache(toks, {incl_bwd = 1, loss = "ce"}) end,
    "run_with_cache: option 'incl_bwd' must be a boolean, got number")
end)

t.case("types and booleans", function()
  exactly(function() mp.plot.figure{width = "wide"} end, "mp.plot.figure: option 'width' must be a number, got string")
  exactly(function() mp.model.new(with("tied", 1)) end, "mp.model.new: option 'tied' must be a boolean, got number")
  exactly(function() mp.model.new(with("qkv_bias", 0)) end, "mp.model.new: option 'qkv_bias' must be a boolean, got number")
  exactly(function() mp.model.new(with("rope_theta", "1e4")) end,
    "mp.model.new: option 'rope_theta' must be a number, got string")
  exactly(function() m:generate({1}, {stop_at_eos = 0}) end, "generate: option 'stop_at_eos' must be a boolean, got number")
  exactly(function() m:forward(toks, 5) end, "forward: options must be a table, got number")
  exactly(function() m:capture(toks, {out = 5}) end, "capture: option 'out' must be a string, got number")
  exactly(function() mp.tasks.mtd{q = 3, m = 2, concentration = "x"} end,
    "mp.tasks.mtd: option 'concentration' must be a number, got string")
  -- integers keep their range message
  exactly(function() mp.model.new(with("d_model", 1.5)) end, "mp.model.new: option 'd_model' must be an integer in [0, 2147483647], got 1.5")
  -- a valid call still works
  t.ok(m:forward(toks, {logits = "last"}):size(1) == 1, "a known option is accepted")
end)

t.case("every family", function()
  -- Model methods (lua/lmodel.c)
  exactly(function() m:run_with_hooks(toks, {fwd_hoks = {}}) end, "run_with_hooks: unknown option 'fwd_hoks'")
  exactly(function() m:run_with_cache(toks, {name = "*"}) end, "run_with_cache: unknown option 'name'")
  exactly(function() m:generate({1}, {max_new = 2}) end, "generate: unknown option 'max_new'")
  exactly(function() m:to_tokens("ab", {boss = true}) end, "to_tokens: unknown option 'boss'")
  exactly(function() m:capture(toks, {out = dir .. "/c.h5", hook = "*"}) end, "capture: unknown option 'hook'")
  exactly(function() m:save(dir .. "/m.h5", {fmt = "h5"}) end, "save: unknown option 'fmt'")
  exactly(function() mp.load(dir .. "/none.bin", {tok = "bytes"}) end, "mp.load: unknown option 'tok'")
  exactly(function() m:set_pos("rope", {dims = 4}) end, "set_pos: unknown option 'dims'")
  exactly(function() m:set_rope_scaling{type = "pi", factr = 2} end, "set_rope_scaling: unknown option 'factr'")
  -- capture of many prompts (lua/lcapture.c)
  exactly(function() m:capture_prompts(toks, {out = dir .. "/p.h5", logit = true}) end,
    "capture_prompts: unknown option 'logit'")
  -- training (lua/ltrain.c)
  local task = mp.tasks.mtd{q = 3, m = 2, seed = 1}
  exactly(function() mp.optim.adamw{lrr = 1} end, "mp.optim.adamw: unknown option 'lrr'")
  exactly(function() m:train{task = task, steps = 1, stepz = 2} end, "train: unknown option 'stepz'")
  exactly(function() m:loss(toks, toks, {fwd = {}}) end, "loss: unknown option 'fwd'")
  exactly(function() m:train_step(mp.optim.adamw(), toks, toks, {acum = 2}) end, "train_step: unknown option 'acum'")
  -- tasks (lua/ltasks.c, lua/ltasks_algebra.c)
  exactly(function() mp.tasks.mtd{qq = 3} end, "mp.tasks.mtd: unknown option 'qq'")
  exactly(function() mp.tasks.algebra{bogus = 1} end, "mp.tasks.algebra: unknown option 'bogus'")
  -- analyses and probes (lua/lanalyze.c, lua/lprobe.c)
  local X = mp.tensor{{1, 0}, {0, 1}, {1, 1}, {2, 1}}
  exactly(function() mp.analyze.pca(X, 1, {projj = true}) end, "mp.analyze.pca: unknown option 'projj'")
  exactly(function() mp.analyze.pca(X, 1, {proj = 1}) end, "mp.analyze.pca: option 'proj' must be a boolean, got number")
  exactly(function() mp.analyze.bootstrap({1, 2, 3}, {levl = 0.9}) end, "mp.analyze.bootstrap: unknown option 'levl'")
  exactly(function() mp.analyze.probe(X, {0, 0, 1, 1}, {kindd = "linear"}) end,
    "mp.analyze.probe: unknown option 'kindd'")
  -- interventions (lua/lintervene.c)
  exactly(function() mp.ablate.zero{heads = 1} end, "mp.ablate.zero: unknown option 'heads'")
  exactly(function() mp.steer({1, 2}, {scale = "x"}) end, "mp.steer: option 'scale' must be a number, got string")
  exactly(function() mp.scale(2, {scale = 3}) end, "mp.scale: unknown option 'scale'")
  -- MTD estimators (lua/lmirror.c)
  exactly(function() mp.mtd.mirror_descent({pi = {{0.9, 0.1}, {0.2, 0.8}}, m = 2}, {0, 1, 1, 0}, {eta = 1, step = 2}) end,
    "mp.mtd.mirror_descent: unknown option 'step'")
  -- figures (lua/lplot.c)
  local fig = mp.plot.figure()
  local ax = fig:axes(1, 1)
  exactly(function() ax:line(nil, {1, 2}, {dashes = true}) end, "ax:line: unknown option 'dashes'")
  exactly(function() ax:set{xlog = 1} end, "ax:set: option 'xlog' must be a boolean, got number")
  exactly(function() fig:save(dir .. "/f.png", {dpii = 10}) end, "fig:save: unknown option 'dpii'")
  fig:close()
  -- HDF5 files and tensors (lua/lh5.c, lua/ltensor.c)
  local f <close> = mp.h5.open(dir .. "/x.h5", "w")
  exactly(function() f:write("x", {1, 2}, {compres = 1}) end, "h5:write: unknown option 'compres'")
  exactly(function() mp.tensor{1, 2}:save(dir .. "/y.h5", "y", {level = 1}) end, "Tensor:save: unknown option 'level'")
end)

t.case("intervention options follow the rule", function()
  -- type errors: "fn: option 'k' ..."; integers: "fn: option 'k' must be an integer in [lo, hi], got v" (lopt.c)
  exactly(function() mp.ablate.zero{head = "x"} end, "mp.ablate.zero: option 'head' must be an integer in [0, 2147483647], got string")
  exactly(function() mp.ablate.zero{head = 1.5} end, "mp.ablate.zero: option 'head' must be an integer in [0, 2147483647], got 1.5")
  exactly(function() mp.ablate.zero{positions = "x"} end,
    "mp.ablate.zero: option 'positions' must be an integer or a list of integers, got string")
  exactly(function() mp.ablate.zero{positions = {1, "a"}} end,
    "mp.ablate.zero: option 'positions'[2] must be an integer in [-2147483647, 2147483647], got string")
  exactly(function() mp.steer({1, 2}, {positions = 1.5}) end,
    "mp.steer: option 'positions' must be an integer in [-2147483647, 2147483647], got 1.5")
  -- negative positions count from the end (-1: the last); below the int range is refused
  exactly(function() mp.ablate.zero{positions = -2147483648} end,
    "mp.ablate.zero: option 'positions' must be an integer in [-2147483647, 2147483647], got -2147483648")
  local many = {}
  for i = 1, 65 do many[i] = i end
  exactly(function() mp.ablate.zero{positions = many} end,
    "mp.ablate.zero: option 'positions' has 65 entries (at most 64)")
  t.ok(mp.ablate.zero{head = 1, positions = {0, 2}} ~= nil, "valid options still accepted")
end)

t.case("set_rope_scaling checks every option, also for type none", function()
  local r <close> = mp.model.new(base)
  exactly(function() r:set_rope_scaling{type = "none", factor = "big"} end,
    "set_rope_scaling: option 'factor' must be a number, got string")
  exactly(function() r:set_rope_scaling{type = "none", original_ctx = 1.5} end,
    "set_rope_scaling: option 'original_ctx' must be an integer in [0, 2147483647], got 1.5")
  exactly(function() r:set_rope_scaling{type = "none", factor = 2} end,
    "set_rope_scaling: option 'factor' applies to type \"pi\", \"ntk\" and \"yarn\" only " ..
    "(type \"none\" switches scaling off)")
  exactly(function() r:set_rope_scaling{beta_fast = 16} end,
    "set_rope_scaling: option 'beta_fast' applies to type \"pi\", \"ntk\" and \"yarn\" only " ..
    "(type \"none\" switches scaling off)")
  r:set_rope_scaling{type = "pi", factor = 2}
  t.ok(r.config.rope_scaling == "pi", "pi set")
  r:set_rope_scaling{type = "none", factor = 1}   -- the default value is accepted
  t.ok(r.config.rope_scaling == "none" and r.config.rope_factor == 1, "none with factor 1 switches scaling off")
end)

os.execute("rm -rf '" .. dir .. "'")
t.finish("test_options")
