-- capture_check.lua MODEL PROMPTS SERIAL.h5 [SPLIT.h5] — checks a dataset
-- capture (run serially): the serial file against an independent reference
-- (each prompt's run_with_cache and logits, the prompt's length in /lengths,
-- the padding), then, when given, the split file against the serial one
-- dataset by dataset (same names, shapes and values within 1e-6, same /model
-- attributes).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "../lua/testlib.lua")
local model_path, prompts_path, serial, split = arg[1], arg[2], arg[3], arg[4]
local m = mp.load(model_path)
local prompts = {}
for line in io.lines(prompts_path) do prompts[#prompts + 1] = m:to_tokens(line) end
local N, Tmax = #prompts, 0
for _, p in ipairs(prompts) do Tmax = math.max(Tmax, #p) end

local function amax(x) return math.max(math.abs(x:max()), math.abs(x:min())) end

do -- the serial file against run_with_cache
  local f <close> = mp.h5.open(serial)
  t.ok(f:attrs("/").format == "mechprobe.run", "format attribute")
  t.ok(f:attrs("model").d_model == m.config.d_model, "/model attributes")
  local lengths = f:read_int("lengths")
  local tokens = f:read_int("tokens")
  t.ok(#lengths == N and #tokens == N and #tokens[1] == Tmax, ("shapes: %d prompts, Tmax %d"):format(N, Tmax))
  local embed, pat, logits = f:read("acts/hook_embed"), f:read("acts/blocks.1.attn.hook_pattern"), f:read("logits")
  t.ok(embed:size(1) == N and embed:size(2) == Tmax, "hook_embed is [N, Tmax, D]")
  for i, p in ipairs(prompts) do
    local T = #p
    t.ok(lengths[i] == T, ("prompt %d: length %d"):format(i, T))
    local same = true
    for k = 1, Tmax do same = same and tokens[i][k] == (k <= T and p[k] or -1) end
    t.ok(same, ("prompt %d: tokens, padded with -1"):format(i))
    local lg, cache = m:run_with_cache(p, {names = "hook_embed,blocks.1.attn.hook_pattern"})
    local e = embed[i]:narrow(1, T):clone():reshape{1, T, m.config.d_model}
    t.ok(amax(e:sub(cache["hook_embed"])) <= 1e-6, ("prompt %d: hook_embed row"):format(i))
    local diff = 0
    for h = 1, m.config.n_head do
      for q = 1, T do
        for k = 1, T do diff = math.max(diff, math.abs(pat:get(i, h, q, k) - cache["blocks.1.attn.hook_pattern"]:get(1, h, q, k))) end
      end
    end
    t.ok(diff <= 1e-6, ("prompt %d: hook_pattern (max diff %.2g)"):format(i, diff))
    t.ok(amax(logits[i]:narrow(1, T):clone():reshape{1, T, m.config.vocab}:sub(lg)) <= 1e-5, ("prompt %d: logits"):format(i))
    if T < Tmax then
      t.ok(amax(embed[i]:narrow(T + 1, Tmax - T)) == 0, ("prompt %d: padding is 0"):format(i))
    end
  end
end

if split then -- split against serial, dataset by dataset
  local a <close> = mp.h5.open(serial)
  local b <close> = mp.h5.open(split)
  local function walk(group, fn)
    for _, name in ipairs(a:list(group)) do
      local path = group == "/" and name or group .. "/" .. name
      local ok = pcall(a.list, a, path)
      if ok then walk(path, fn) else fn(path) end
    end
  end
  local n = 0
  walk("/", function(path)
    n = n + 1
    if not t.ok(b:has(path), path .. " is in the split file") then return end
    local x, y = a:read(path), b:read(path)
    local sx, sy = table.concat(x:shape(), ","), table.concat(y:shape(), ",")
    if t.ok(sx == sy, ("%s: shape [%s] vs [%s]"):format(path, sx, sy)) then
      -- -inf padding of the scores: compare where finite
      local d = 0
      local xd, yd = x:reshape{x:numel()}, y:reshape{y:numel()}
      for k = 1, x:numel() do
        local u, v = xd:get(k), yd:get(k)
        if u ~= v then d = math.max(d, math.abs(u - v)) end
      end
      t.ok(d <= 1e-6, ("%s: max |diff| %.3g"):format(path, d))
    end
  end)
  t.ok(n == 2 + 7, "datasets compared: " .. n)
  local ma, mb = a:attrs("model"), b:attrs("model")
  for k, v in pairs(ma) do t.ok(mb[k] == v, "/model attribute " .. k) end
end
t.finish("capture_check")
