-- fuzz_tensor.lua — a seeded random fuzzer of the Tensor API: it builds random
-- Tensors (shapes with 0 and 1 extents, views of them: select, narrow,
-- transpose, reshape, index; views of a model's parameters, hook views kept
-- past their callback, closed Tensors) and calls random Tensor methods,
-- metamethods and mp functions with random arguments (often invalid: wrong
-- types, negative, huge, NaN, nil, tables whose __index closes a Tensor) under
-- pcall. A call may fail, but only with a Lua error carrying a message; a
-- crash (or an ASan report) fails the process. It also closes, reprocesses and
-- replaces the model under its views now and then.
--   mechprobe fuzz_tensor.lua [--seed N] [--calls N] [--seconds S]   (the suite: a short run)
--   mechprobe fuzz_tensor.lua --long SECONDS [--seed N]               (by hand: many seeds, SECONDS in all)
-- Prints the seed and the number of calls, so a failure can be replayed.
local opts = {seed = os.time(), calls = 3000, seconds = 3}
local i = 1
while arg[i] do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or not arg[i + 1] then error("usage: fuzz_tensor.lua [--seed N] [--calls N] [--seconds S] [--long S]") end
  opts[k] = tonumber(arg[i + 1]) or error("--" .. k .. " needs a number")
  i = i + 2
end
if opts.long then opts.seconds = opts.long end -- seeds seed, seed + 1, ... of `calls` calls each

-- A huge allocation must fail at once rather than page for minutes: the suite
-- runs this under a cap (ulimit -v, or ASan's max_allocation_size_mb); by hand,
-- without one (FUZZ_TENSOR_CAPPED unset, no ASAN_OPTIONS), it runs itself again
-- under ulimit -v 1500000 (KiB).
if not os.getenv("FUZZ_TENSOR_CAPPED") and not os.getenv("ASAN_OPTIONS") then
  local q = function(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end
  local cmd = {"ulimit -v 1500000 && FUZZ_TENSOR_CAPPED=1 exec", q(arg[-1] or "mechprobe"), q(arg[0])}
  for k = 1, #arg do cmd[#cmd + 1] = q(arg[k]) end
  local ok, how, code = os.execute(table.concat(cmd, " "))
  os.exit(ok and 0 or (how == "exit" and code or 1))
end

local R = math.random
local function pick(list) return list[R(#list)] end

local NUMS = {0, 1, 2, 3, -1, -2, 1.5, -0.5, 0 / 0, 1 / 0, -1 / 0, -0.0, 1e300, 2 ^ 31, 2 ^ 32, 2 ^ 53, 2 ^ 62,
              math.maxinteger, math.mininteger, math.maxinteger // 2, 4, 5, 7, 1e-40}
local SMALL = {0, 1, 1, 2, 2, 3, 3, 4, -1, -2}
local HUGE_EXT = {1 << 31, 1 << 40, 1 << 50, 1 << 52, (1 << 62) - 1}

local pool = {}          -- Tensors (valid or not)
local function add(x) if mp.is_tensor(x) then pool[#pool + 1] = x end end
local function tensor() return #pool > 0 and pool[R(#pool)] or mp.zeros{1} end

local function rand_shape()
  local nd = R(0, 4)
  local s = {}
  for d = 1, nd do s[d] = R(0, 3) end
  if nd >= 2 and R(20) == 1 then -- no elements, one huge extent
    s[R(nd)] = 0
    local j = R(nd)
    if s[j] ~= 0 then s[j] = pick(HUGE_EXT) end
  end
  return s
end

local function new_tensor()
  local s = rand_shape()
  local ok, x = pcall(mp.zeros, s)
  if not ok then return mp.zeros{1} end
  local n = x:numel()
  if n > 0 and n < 1000 then
    local f = x:reshape(-1)
    for k = 1, n do f[k] = pick{R() * 4 - 2, R(-3, 3), 0, 0 / 0, 1 / 0} end
  end
  return x
end

-- an arbitrary argument
local model
local function arg_value(receiver)
  local r = R(22)
  if r <= 5 then return tensor()
  elseif r <= 11 then return pick(SMALL)
  elseif r <= 14 then return pick(NUMS)
  elseif r == 15 then return nil
  elseif r == 16 then return pick{"1", "x", "", "-1", "2.5", "inf"}
  elseif r == 17 then return R(2) == 1
  elseif r == 18 then return rand_shape()
  elseif r == 19 then local x = tensor(); return {x, tensor()} -- a list of Tensors
  elseif r == 20 then return {{1, 2}, {3}}                      -- ragged
  elseif r == 21 then
    local victim = receiver and R(2) == 1 and receiver or tensor() -- often the Tensor being called
    return setmetatable({}, {__index = function() local _ <close> = victim end,
                             __len = function() local _ <close> = victim; return 2 end})
  else return function() end end
end

local METHODS = {"shape", "dim", "numel", "size", "get", "set", "select", "reshape", "view", "totable", "tolist",
                 "clone", "fill_", "dot", "permute", "transpose", "t", "unsqueeze", "squeeze", "flatten",
                 "contiguous", "item", "narrow", "slice", "index_select", "matmul", "mm", "add", "sub", "mul",
                 "div", "pow", "add_", "sub_", "mul_", "div_", "copy_", "exp", "log", "sqrt", "abs", "tanh",
                 "relu", "sigmoid", "clamp", "sum", "mean", "max", "min", "argmax", "argmin", "var", "std",
                 "norm", "softmax", "log_softmax", "topk", "cos_sim", "allclose", "eq", "ne", "lt", "le", "gt",
                 "ge", "masked_fill", "gather", "diagonal", "tril", "triu", "sort", "argsort", "svd"}
local FUNCS = {"tensor", "zeros", "ones", "full", "is_tensor", "matmul", "cat", "stack", "arange", "linspace",
               "eye", "cosine_similarity", "where", "einsum", "randn", "rand", "manual_seed"}
local OPS = {
  function(a, b) return a + b end, function(a, b) return a - b end, function(a, b) return a * b end,
  function(a, b) return a / b end, function(a, b) return a ^ b end, function(a) return -a end,
  function(a) return #a end, function(a, b) return a[b] end, function(a, b, c) a[b] = c end,
  function(a) return tostring(a) end, function(a) local _ <close> = a end,
}

local function new_model()
  if model then pcall(function() model:close() end) end
  model = mp.model.new{d_model = 4, n_layer = 1, n_head = 1, vocab = 5, ctx = 4, seed = R(100)}
end

-- the model's views and the hook's, and what invalidates them (a closed
-- model raises on any method: each step runs under pcall)
local function model_step()
  local r = R(8)
  if not model or r == 1 then new_model() end
  if r == 2 then pcall(function() model:close() end)
  elseif r == 3 then pcall(function() model:process_weights() end)
  elseif r == 4 then pcall(function() model:dequantize() end)
  elseif r == 5 then
    pcall(function() model:forward({1, 2}, {fwd_hooks = {{"hook_embed", function(x)
      add(x[1]); add(x[1]:narrow(1, 1)); add(x)
      if R(2) == 1 then local _ <close> = x end
      if R(4) == 1 then return tensor() end
    end}}}) end)
  else
    pcall(function()
      local p = model:param(pick(model:params()))
      add(p)
      if p:dim() == 2 then add(p[1]); add(p:narrow(1, 1):reshape(-1)) end
    end)
  end
end

local calls, errors, bad = 0, 0, 0
local function check(ok, err, what)
  calls = calls + 1
  if ok then return end
  errors = errors + 1
  if type(err) ~= "string" or #err == 0 then
    bad = bad + 1
    io.stderr:write(("FAIL: %s raised a %s, not an error message\n"):format(what, type(err)))
  end
end

local function one_call()
  local r = R(100)
  if r <= 3 then model_step(); return end
  if r <= 12 then add(new_tensor()); return end
  if r <= 14 then collectgarbage(R(2) == 1 and "collect" or "step"); return end
  local nargs = R(0, 4)
  local args = {}
  local x = tensor()
  for k = 1, nargs do args[k] = arg_value(x) end
  if r <= 70 then
    local name = pick(METHODS)
    local ok, res = pcall(function() return x[name](x, table.unpack(args, 1, nargs)) end)
    check(ok, res, "Tensor:" .. name)
    if ok then add(res) end
  elseif r <= 85 then
    local name = pick(FUNCS)
    local ok, res = pcall(mp[name], table.unpack(args, 1, nargs))
    check(ok, res, "mp." .. name)
    if ok then add(res) end
  else
    local ok, res = pcall(pick(OPS), x, args[1], args[2])
    check(ok, res, "an operator")
    if ok then add(res) end
  end
  if #pool > 200 then table.remove(pool, R(#pool)) end
end

-- the budget: CPU seconds of this process (os.clock) for a run, wall-clock
-- seconds (os.time) for --long, whatever else the machine runs
local c0, w0 = os.clock(), os.time()
local function spent() return opts.long and os.time() - w0 or os.clock() - c0 end
local seed = opts.seed
local runs = 0
repeat
  math.randomseed(seed)
  pool = {}
  new_model()
  local n0 = calls
  while calls - n0 < opts.calls and spent() < opts.seconds do one_call() end
  runs = runs + 1
  seed = seed + 1
until not opts.long or spent() >= opts.seconds
if model then pcall(function() model:close() end) end
pool = nil
collectgarbage()
print(("fuzz_tensor: seed %d%s, %d calls (%d raised an error), %.1f s of CPU in %d s, %d bad"):format(
  opts.seed, runs > 1 and (" .. " .. (seed - 1)) or "", calls, errors, os.clock() - c0, os.time() - w0, bad))
if bad > 0 then os.exit(1) end
