-- test_mirror_rules.lua — the mirror_descent verdict rules (probes/lib/mirror_rules.lua)
-- on planted inputs: each rule reaches SUPPORTED, NOT SUPPORTED and INCONCLUSIVE
-- where its words say, the t-interval and the a/(T+b) fit against closed forms,
-- and the rows carry n, seeds, an interval and the rule in words.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
package.path = (os.getenv("MP_SRC") or ".") .. "/probes/lib/?.lua;" .. package.path
local R = require "mirror_rules"
local S, N, I = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"

t.case("t-interval", function()
  local m, lo, hi = R.mean_ci({1, 2, 3})
  -- mean 2, sd 1, n 3: 2 +- 4.303 / sqrt(3)
  t.near(m, 2, 1e-12, "mean"); t.near(hi - m, 4.303 / math.sqrt(3), 1e-9, "half width")
  t.near(lo, 2 - 4.303 / math.sqrt(3), 1e-9, "lo")
  local _, l1, h1 = R.mean_ci({5})
  assert(l1 == -math.huge and h1 == math.huge, "one value: infinite interval")
  t.near(R.t975(60), 2.000, 0.002, "t(60)")
end)

t.case("a/(T+b) fit recovers a planted curve", function()
  local T, eta = {24, 32, 48, 64, 96, 128, 192}, {}
  for i, x in ipairs(T) do eta[i] = 3 / (x + 10) end
  local a, b, rms = R.fit_offset(T, eta)
  t.near(a, 3, 1e-3, "a"); t.near(b, 10, 1e-2, "b"); assert(rms < 1e-5, "rms " .. rms)
end)

local function word(r) return r.word end

t.case("C1", function()
  assert(word(R.C1{eta = 0.24, lo = 0.22, hi = 0.27, eta0 = 0.25, n = 256}) == S, "inside the band")
  assert(word(R.C1{eta = 0.5, lo = 0.45, hi = 0.55, eta0 = 0.25, n = 256}) == N, "outside the band")
  assert(word(R.C1{eta = 0.3, lo = 0.2, hi = 0.4, eta0 = 0.25, n = 256}) == I, "straddles")
end)

t.case("C2", function()
  local T = {24, 32, 48, 64, 96, 128, 192}
  local function pts(f)
    local e = {}
    for i, x in ipairs(T) do e[i] = f(x) end
    return e
  end
  -- slope -0.91 +- 0.01: the old rule passed it; a pure power law does not level off
  local pw = pts(function(x) return 2 * x ^ -0.91 end)
  local r = R.C2{slope = -0.91, se = 0.005, n = 7, rms_power = 0.001, T = T, eta = pw, Tmax = 192}
  assert(r.word == N, "slope -0.91 with a tight interval and no plateau: " .. r.ours)
  -- the interval contains -1
  r = R.C2{slope = -0.97, se = 0.02, n = 7, rms_power = 0.001, T = T, eta = pts(function(x) return x ^ -0.97 end),
           Tmax = 192}
  assert(r.word == S, "interval contains -1: " .. r.ours)
  r = R.C2{slope = -0.9, se = 0.2, n = 7, rms_power = 0.001, T = T, eta = pts(function(x) return x ^ -0.9 end),
           Tmax = 192}
  assert(r.word == I, "contains -1 but +-0.5 wide: " .. r.ours)
  -- levels off: eta = 2/(T + 8) fits better than the power law, b small
  r = R.C2{slope = -0.91, se = 0.005, n = 7, rms_power = 0.02, T = T, eta = pts(function(x) return 2 / (x + 8) end),
           Tmax = 192}
  assert(r.word == S, "eta*T levels off: " .. r.ours)
  assert(R.C2{slope = -1, se = 0.1, n = 2, rms_power = 0, T = {24, 32}, eta = {0.1, 0.08}, Tmax = 32}.word == I,
         "two points")
  assert(r.n == 7 and r.seeds == 1 and r.lo < r.hi and r.rule:find("contains %-1"), "row fields")
end)

local function group(name, depth, seeds) return {name = name, depth = depth, seeds = seeds} end
local function seeds(fn, n)
  local s = {}
  for i = 1, n or 3 do s[i] = fn(i) end
  return s
end

t.case("C3", function()
  local close = group("a", 3, seeds(function(i) return {attn_kl = 0.05 + 0.01 * i, uniform_kl = 0.46} end))
  local far = group("b", 3, seeds(function(i) return {attn_kl = 1 + 0.1 * i, uniform_kl = 0.46} end))
  local noisy = group("c", 3, seeds(function(i) return {attn_kl = ({0.1, 0.9, 0.3})[i], uniform_kl = 0.46} end))
  assert(R.C3{close, close, far}.word == S, "most groups closer")
  assert(R.C3{far, far, close}.word == N, "most groups not closer")
  assert(R.C3{noisy, noisy}.word == I, "intervals straddle 0.9 and 1")
  local unif = group("e", 3, seeds(function(i) return {attn_kl = 0.4618 + 1e-4 * i, uniform_kl = 0.4618} end))
  assert(R.C3{unif, unif, close}.word == N, "heads collapsed to uniform attention are not gamma")
  local two = group("d", 3, seeds(function() return {attn_kl = 0.01, uniform_kl = 0.46} end, 2))
  local r = R.C3{two}
  assert(r.word == I and r.seeds == 2, "fewer than 3 seeds")
end)

t.case("C4", function()
  local md = 0.04
  local function g(name, depth, kls) return group(name, depth, seeds(function(i) return {kl_avg = kls[i]} end)) end
  local good = g("standard-L3", 3, {0.041, 0.043, 0.039})
  local bad = g("standard-L4", 4, {0.09, 0.095, 0.1})
  local wide = g("attn-only-L3", 3, {0.03, 0.08, 0.05})
  local shallow = g("standard-L2", 2, {0.2, 0.2, 0.2})        -- below the construction's depth: not judged
  assert(R.C4({good, good, shallow}, md).word == S, "every judged group within 50%")
  assert(R.C4({good, bad}, md).word == N, "one group outside")
  assert(R.C4({good, wide}, md).word == I, "one interval straddles the band")
  local r = R.C4({good, shallow}, md)
  assert(r.n == 1 and r.ours:find("standard-L2", 1, true), "depth 2 listed, not judged: " .. r.ours)
end)

t.case("C5", function()
  local est = {{key = "md1", steps = 1, kl_avg = 0.040}, {key = "md2", steps = 2, kl_avg = 0.030},
               {key = "md3", steps = 3, kl_avg = 0.025}, {key = "bayes", steps = math.huge, kl_avg = 0.020}}
  local function g(depth, kl, dist)
    return group("L" .. depth, depth, seeds(function(i) return {kl_avg = kl + 0.0005 * (i - 2), dist = dist} end))
  end
  assert(R.C5({g(2, 0.040, 0.001), g(3, 0.030, 0.001), g(4, 0.025, 0.001)}, est, 0.004).word == S, "steps grow")
  assert(R.C5({g(2, 0.025, 0.001), g(3, 0.030, 0.001), g(4, 0.040, 0.001)}, est, 0.004).word == N, "steps shrink")
  local r = R.C5({g(2, 0.040, 0.02), g(3, 0.030, 0.02), g(4, 0.025, 0.02)}, est, 0.004)
  assert(r.word == I and r.ours:find("0.0200", 1, true), "distance above the spread: " .. r.ours)
  local wide = group("L3", 3, seeds(function(i) return {kl_avg = ({0.02, 0.045, 0.03})[i], dist = 0.001} end))
  assert(R.C5({g(2, 0.040, 0.001), wide, g(4, 0.025, 0.001)}, est, 0.004).word == I, "several estimators inside")
end)

t.case("C6", function()
  local function diffs(mu, sd, n)
    local d = {}
    for i = 1, n do d[i] = mu + sd * ((i % 2 == 0) and 1 or -1) end
    return d
  end
  assert(R.C6{diff = diffs(1e-7, 1e-6, 200), md = 0.02, n = 200}.word == S, "agrees to 1e-7")
  assert(R.C6{diff = diffs(0.01, 1e-4, 200), md = 0.02, n = 200}.word == N, "off by half")
  assert(R.C6{diff = diffs(0.0002, 0.002, 20), md = 0.02, n = 20}.word == I, "noisy around the band edge")
end)

t.case("C7", function()
  local function g(attn, abl, ctl)
    return group("x", 3, seeds(function(i)
      return {attn_kl = attn, uniform_kl = 0.46, kl_avg = 0.05, ablate_best = abl + 0.001 * i, ablate_control = ctl}
    end))
  end
  assert(R.C7{g(0.05, 0.10, 0.05)}.word == S, "gamma head, ablation hurts twice")
  assert(R.C7{g(0.05, 0.05, 0.05)}.word == N, "gamma head, ablation harmless")
  local r = R.C7{g(0.9, 0.10, 0.05)}
  assert(r.word == I and r.ours:find("no group", 1, true), "no gamma-like head: " .. r.ours)
end)

t.case("report lines and TSV", function()
  local rows = {R.C1{eta = 0.24, lo = 0.22, hi = 0.27, eta0 = 0.25, n = 256}}
  local lines = R.lines(rows)
  local verdicts = require "verdicts"
  local parsed = verdicts.parse(table.concat(lines, "\n"))
  assert(#parsed == 1 and #verdicts.problems(parsed) == 0, "a well-formed VERDICT row")
  assert(lines[2]:find("n 256, seeds 1, 95% interval", 1, true), "n, seeds, interval: " .. lines[2])
  local tsv = R.tsv(rows)
  assert(select(2, tsv:gsub("\n", "")) == 2 and tsv:find("^id\tclaim"), "TSV header and one row")
end)

t.finish("test_mirror_rules")
