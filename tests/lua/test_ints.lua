-- test_ints.lua — the one integer reader of the Lua API (lua/lopt.c, issue
-- #38): every integer argument or option, in every module, fails with one
-- message shape, "FN: WHAT must be an integer in [LO, HI], got X" (a dim or an
-- index: "... in [-n, -1] or [1, n], got X"), X as Lua prints the value or the
-- type of a non-number. For a sample of functions across modules, each bad
-- kind of value (a fraction, nan, out of range on either side, 1e300, a
-- string) is checked for the exact message, and values at the edges of each
-- range for being accepted with the right result.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

-- the exact message, with Lua's "file:line: " position prefix removed
local function exactly(fn, want, what)
  local ok, e = pcall(fn)
  local got = tostring(e):gsub("^[^:]*:%d+: ", "")
  assert(not ok and got == want, ("%s: got %q, want %q"):format(what or want, ok and "(no error)" or got, want))
end

local nan = 0 / 0
-- the bad values, each with X as the message shows it
local BAD = {{1.5, "1.5"}, {nan, tostring(nan)}, {1e300, "1e+300"}, {"2", "string"}, {false, "boolean"}}

-- call(v) must fail with prefix .. X for every bad value, and for each extra
-- {value, X} (the out-of-range ones of that range)
local function shape(label, prefix, call, extra)
  for _, b in ipairs(BAD) do exactly(function() call(b[1]) end, prefix .. b[2], label .. " " .. b[2]) end
  for _, v in ipairs(extra) do exactly(function() call(v) end, prefix .. tostring(v), label .. " " .. tostring(v)) end
end

t.case("tensor dims: [-n, -1] or [1, n]", function()
  local x = mp.zeros(2, 3, 4)
  shape("sum dim", "sum: argument #1 (dim) must be an integer in [-3, -1] or [1, 3], got ",
    function(v) return x:sum(v) end, {0, 4, -4})
  t.deep_eq(x:sum(-1):shape(), {2, 3}, "dim -1 is the last")
  t.deep_eq(x:sum(3.0):shape(), {2, 3}, "dim 3.0 is an integer")
  t.deep_eq(x:sum(-3):shape(), {3, 4}, "dim -3 is the first")
  shape("unsqueeze dim", "unsqueeze: argument #1 (dim) must be an integer in [-4, -1] or [1, 4], got ",
    function(v) return x:unsqueeze(v) end, {0, 5, -5})
  t.deep_eq(x:unsqueeze(-1):shape(), {2, 3, 4, 1}, "unsqueeze -1: a new last dim")
  shape("transpose 2nd dim", "transpose: argument #2 (dim) must be an integer in [-3, -1] or [1, 3], got ",
    function(v) return x:transpose(1, v) end, {0, 4})
  shape("size dim", "size: argument #1 (dim) must be an integer in [-3, -1] or [1, 3], got ",
    function(v) return x:size(v) end, {0, -4})
  assert(x:size(-2) == 3, "size(-2)")
  shape("permute entry", "permute: argument #1 (dims)[2] must be an integer in [-3, -1] or [1, 3], got ",
    function(v) return x:permute{1, v, 3} end, {0, 4})
  shape("cat dim (a function)", "cat: argument #2 (dim) must be an integer in [-2, -1] or [1, 2], got ",
    function(v) return mp.cat({mp.zeros(2, 2), mp.zeros(2, 2)}, v) end, {0, 3})
end)

t.case("tensor indices", function()
  local m = mp.tensor{{1, 2, 3}, {4, 5, 6}}
  shape("get row", "get: argument #1 (index into dim 1) must be an integer in [-2, -1] or [1, 2], got ",
    function(v) return m:get(v, 1) end, {0, 3, -3})
  shape("set column", "set: argument #3 (index into dim 2) must be an integer in [-3, -1] or [1, 3], got ",
    function(v) return m:set(9, 1, v) end, {0, 4})
  assert(m:get(-1, -1) == 6 and m:get(2.0, 1) == 4, "negative and float-integral indices")
  shape("select", "select: argument #1 (index into dim 1) must be an integer in [-2, -1] or [1, 2], got ",
    function(v) return m:select(v) end, {0, 3})
  exactly(function() return m[3] end, "t[i]: i must be an integer in [-2, -1] or [1, 2], got 3", "t[3]")
  exactly(function() m[-3] = 0 end, "t[i] = v: i must be an integer in [-2, -1] or [1, 2], got -3", "t[-3] = v")
  local y = mp.zeros(3, 4)
  shape("index_select entry", "index_select: argument #2 (indices)[2] must be an integer in [-4, -1] or [1, 4], got ",
    function(v) return y:index_select(2, {1, v}) end, {0, 5})
  exactly(function() return y:index_select(2, mp.tensor{1, 2.5}) end,
    "index_select: argument #2 (indices)[2] must be an integer in [-4, -1] or [1, 4], got 2.5", "Tensor of indices")
  t.deep_eq(mp.tensor{{1, 2, 3}}:index_select(2, {-1, 1}):totable(), {{3, 1}}, "index_select -1")
end)

t.case("narrow, slice: start may be just past the end", function()
  local y = mp.zeros(3, 4)
  shape("narrow start", "narrow: argument #2 (start) must be an integer in [-4, -1] or [1, 5], got ",
    function(v) return y:narrow(2, v, 0) end, {0, 6, -5})
  shape("narrow length", "narrow: argument #3 (length) must be an integer in [0, 2], got ",
    function(v) return y:narrow(2, 3, v) end, {-1, 3})
  exactly(function() return y:narrow(2, 5, 1) end, "narrow: argument #3 (length) must be an integer in [0, 0], got 1",
    "past the end: length 0 only")
  t.deep_eq(y:narrow(2, 5, 0):shape(), {3, 0}, "empty narrow just past the end")
  t.deep_eq(y:narrow(2, -2, 2):shape(), {3, 2}, "narrow from the end")
  shape("slice start", "slice: argument #2 (start) must be an integer in [-4, -1] or [1, 5], got ",
    function(v) return y:slice(2, v) end, {0, 6})
  -- stop from start - 1 (empty) to the last, or the same from the end
  shape("slice stop", "slice: argument #3 (stop) must be an integer in [-3, -1] or [2, 4], got ",
    function(v) return y:slice(2, 3, v) end, {1, 5, -4})
  t.deep_eq(y:slice(2, 3, 2):shape(), {3, 0}, "stop = start - 1: empty")
  t.deep_eq(y:slice(2, 3, -3):shape(), {3, 0}, "stop -3 = start - 1: empty")
  t.deep_eq(y:slice(2, 3, -2):shape(), {3, 1}, "stop -2: columns 3..3 of 4")
  shape("slice step", ("slice: argument #4 (step) must be an integer in [1, %d], got "):format(math.maxinteger),
    function(v) return y:slice(2, 1, 4, v) end, {0, -1})
  t.deep_eq(y:slice(2, 1, 4, 3):shape(), {3, 2}, "step 3 of 4")
end)

t.case("constructors and topk", function()
  local big = "4611686018427387903" -- MP_TENSOR_NUMEL_MAX on 64 bits
  shape("zeros extent", "mp.zeros: argument #2 (extent) must be an integer in [0, " .. big .. "], got ",
    function(v) return mp.zeros(2, v) end, {-1})
  shape("zeros shape entry", "mp.zeros: argument #1 (shape)[2] must be an integer in [0, " .. big .. "], got ",
    function(v) return mp.zeros{2, v} end, {-1})
  shape("reshape entry", "reshape: argument #1 (shape)[1] must be an integer in [-1, " .. big .. "], got ",
    function(v) return mp.zeros(2, 3):reshape{v, 2} end, {-2})
  t.deep_eq(mp.zeros(2, 3):reshape{-1, 2}:shape(), {3, 2}, "reshape -1 infers")
  shape("eye m", "mp.eye: argument #2 (m) must be an integer in [0, " .. big .. "], got ",
    function(v) return mp.eye(2, v) end, {-1})
  shape("linspace steps", "mp.linspace: argument #3 (steps) must be an integer in [0, " .. big .. "], got ",
    function(v) return mp.linspace(0, 1, v) end, {-1})
  local r = mp.tensor{{3, 1, 2}}
  shape("topk k", "topk: argument #1 (k) must be an integer in [0, 3], got ",
    function(v) return r:topk(v) end, {-1, 4})
  local v, i = r:topk(2.0)
  t.deep_eq(v:totable(), {{3, 2}}, "topk 2 values")
  t.deep_eq(i, {{1, 3}}, "topk 2 indices")
end)

local m = mp.model.new{d_model = 8, n_layer = 2, n_head = 2, vocab = 20, ctx = 8, seed = 1}

t.case("model, cache, train, analyze", function()
  shape("generate option", "generate: option 'max_new_tokens' must be an integer in [0, 2147483645], got ",
    function(v) return m:generate({1, 2}, {max_new_tokens = v}) end, {-1})
  shape("W_Q layer", "W_Q: argument #1 (layer) must be an integer in [0, 1], got ",
    function(v) return m:W_Q(v) end, {-1, 2})
  shape("tokens", "tokens[2] must be an integer in [0, 19], got ", function(v) return m:forward{1, v} end, {})
  local _, cache = m:run_with_cache{{1, 2, 3}}
  shape("cache layer", "accumulated_resid: argument #1 (layer) must be an integer in [-1, 2], got ",
    function(v) return cache:accumulated_resid(v) end, {-2, 3})
  local st = cache:accumulated_resid(nil, {pos_slice = -1})
  -- one id for every row (a number), or a list: a string is neither
  exactly(function() return cache:logit_attrs(st, 2.5) end,
    "logit_attrs: argument #2 (tokens) must be an integer in [0, 2147483647], got 2.5", "cache token")
  exactly(function() return cache:logit_attrs(st, -1) end,
    "logit_attrs: argument #2 (tokens) must be an integer in [0, 2147483647], got -1", "cache token -1")
  shape("cache tokens", "logit_attrs: argument #2 (tokens)[1] must be an integer in [0, 2147483647], got ",
    function(v) return cache:logit_attrs(st, {v}) end, {-1})
  shape("cache token list", "logit_attrs: option 'incorrect_tokens'[1] must be an integer in [0, 2147483647], got ",
    function(v) return cache:logit_attrs(st, 1, {incorrect_tokens = {v}}) end, {-1})
  local opt = mp.optim.adamw{lr = 1e-3, warmup = 10}
  shape("lr_at step", ("lr_at: argument #1 (step) must be an integer in [0, %d], got "):format(math.maxinteger),
    function(v) return opt:lr_at(v) end, {-1})
  t.near(opt:lr_at(4), 1e-3 * 5 / 10, 1e-9, "lr_at(4) in warmup: lr (4 + 1) / 10 (lr a float32)")
  local X = mp.tensor{{1, 0, 0}, {0, 2, 0}, {0, 0, 3}, {1, 1, 1}}
  shape("pca k", "mp.analyze.pca: argument #2 (k) must be an integer in [1, 3], got ",
    function(v) return mp.analyze.pca(X, v) end, {0, 4})
  shape("sinks bins", "mp.analyze.sinks: option 'bins' must be an integer in [0, 1000000000], got ",
    function(v) return mp.analyze.sinks(mp.ones(4, 4), {bins = v}) end, {-1})
end)

t.finish("test_ints")
