-- test_verdicts.lua — the verdict engine (probes/lib/verdicts.lua) on planted
-- data: every word and every INCONCLUSIVE reason class, the multi-seed case the
-- item-pooled tables got wrong (identity at k = 50: seeds 95.7%, 44.5%, 60.5%),
-- item-pooled intervals refused, controls judged on the paired difference, the
-- t-interval against its closed form, and the same columns in the TSV, the
-- report and the run file.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local V = require "verdicts"
local S, N, I = V.S, V.N, V.I
local yes = {ok = true, text = "learned"}

local function row(over)
  local x = {id = "C1", claim = "a claim", rule = "a rule", seeds = {1, 2, 3}, learned = yes}
  for k, v in pairs(over) do x[k] = v end
  return V.judge(x)
end

t.case("t-interval: closed form", function()
  local m, lo, hi = V.mean_ci{1, 2, 3}
  t.near(m, 2, 1e-12, "mean")
  t.near(hi - m, 4.303 / math.sqrt(3), 1e-9, "half-width with 3 values (t 4.303, sd 1)")
  t.near(m - lo, hi - m, 1e-12, "symmetric")
  local m1, lo1, hi1 = V.mean_ci{5}
  assert(m1 == 5 and lo1 == -math.huge and hi1 == math.huge, "one value: no interval")
end)

t.case("seed means: heads of one model are one unit", function()
  local means, seeds = V.seed_means({1, 3, 10, 20, 30}, {7, 7, 8, 8, 8})
  assert(#means == 2 and seeds[1] == 7 and seeds[2] == 8)
  t.near(means[1], 2, 1e-12, "seed 7"); t.near(means[2], 20, 1e-12, "seed 8")
end)

t.case("the identity case: three seeds far apart are INCONCLUSIVE, not NOT SUPPORTED", function()
  local r = row{values = {0.957, 0.445, 0.605}, above = 0.95}
  assert(r.word == I and r.reason == V.STRADDLES, r.word .. " / " .. r.reason)
  t.near(r.mean, (0.957 + 0.445 + 0.605) / 3, 1e-12, "mean of the seeds")
  assert(r.lo < 0.445 and r.hi > 0.957, "the interval over seeds contains every seed")
  assert(r.ours:find("0.957, 0.445, 0.605", 1, true), "every seed's value is shown: " .. r.ours)
  -- the item-pooled version (300 items a seed, bootstrapped) cannot be judged
  local items = {}
  for s, p in ipairs{0.957, 0.445, 0.605} do for i = 1, 300 do items[#items + 1] = (i <= p * 300) and 1 or 0 end end
  t.expect_error(function() row{values = items, above = 0.95} end, "one value per seed", "items as values")
  t.expect_error(function() row{est = 0.669, lo = 0.637, hi = 0.702, above = 0.95} end, "item-pooled",
    "an item-pooled interval")
  t.expect_error(function() row{unit = "item", values = {1, 1, 1}, above = 0.5} end, "unit of replication",
    "a trained row over items")
end)

t.case("SUPPORTED and NOT SUPPORTED on tight seeds", function()
  assert(row{values = {0.99, 0.985, 0.995}, above = 0.95}.word == S)
  assert(row{values = {0.20, 0.21, 0.19}, above = 0.95}.word == N)
  assert(row{values = {0.20, 0.21, 0.19}, below = 0.5}.word == S)
  assert(row{values = {0.50, 0.49, 0.51}, inside = {0.4, 0.6}}.word == S)
  assert(row{values = {0.90, 0.91, 0.89}, inside = {0.4, 0.6}}.word == N)
  local r = row{values = {0.20, 0.21, 0.19}, above = 0.95}
  assert(r.reason == "", "a decided row has no reason")
end)

t.case("reason: too few seeds", function()
  local r = V.judge{id = "C2", claim = "c", rule = "r", seeds = {1, 2}, learned = yes, values = {0.99, 0.99},
                    above = 0.5}
  assert(r.word == I and r.reason == V.FEW_SEEDS and r.why == "2 seeds, 3 needed", r.reason .. " " .. r.why)
  assert(V.report_lines({r})[1]:find("| INCONCLUSIVE | too few seeds", 1, true), "report lines without widths")
  t.expect_error(function() row{values = {1, 1, 1}, above = 0.5, min_seeds = 2} end, "at least 3 seeds",
    "a minimum below the one minimum")
end)

t.case("reason: not learned at this scale (with the compute ratio), never NOT SUPPORTED", function()
  local r = row{values = {0.05, 0.06, 0.05}, above = 0.9, learned = {ok = false, text = "cancel at the untrained floor"},
                scale = "about 1e-4 of the paper's compute"}
  assert(r.word == I and r.reason == V.NOT_LEARNED, r.word)
  assert(r.ours:find("1e-4 of the paper", 1, true) and r.ours:find("untrained floor", 1, true), r.ours)
  t.expect_error(function() V.judge{id = "C1", claim = "c", rule = "r", seeds = {1, 2, 3}, values = {1, 1, 1},
                                    above = 0.5} end, "learned-task test", "a trained row without its learned test")
end)

t.case("reason: precondition absent", function()
  local r = row{values = {0.2, 0.2, 0.2}, above = 0.9, pre = {{ok = true, text = "a"}, {ok = false, text = "no sink head"}}}
  assert(r.word == I and r.reason == V.PRECONDITION and r.why:find("no sink head", 1, true))
  -- the learned-task test is checked first
  r = row{values = {0.2, 0.2, 0.2}, above = 0.9, learned = {ok = false, text = "x"}, pre = {{ok = false, text = "y"}}}
  assert(r.reason == V.NOT_LEARNED)
end)

t.case("controls: judged on the paired difference, printed beside", function()
  -- trained 0.50 vs untrained 0.49: a tight difference of 0.013 is below the 0.05 the claim needs
  local r = row{values = {0.50, 0.52, 0.51}, control = {name = "untrained", values = {0.49, 0.50, 0.50}}, above = 0.05}
  assert(r.word == N, r.word)
  t.near(r.mean, (0.01 + 0.02 + 0.01) / 3, 1e-12, "mean difference")
  assert(r.ours:find("untrained 0.490, 0.500, 0.500", 1, true), r.ours)
  local r2 = row{values = {0.50, 0.52, 0.51}, above = 0.05}
  assert(r2.word == S, "without the control the same values pass")
  t.expect_error(function() row{values = {1, 1, 1}, control = {values = {1, 1}}, above = 0} end, "control",
    "a control short of a seed")
end)

t.case("several tests: one against -> NOT SUPPORTED, all for -> SUPPORTED", function()
  local tests = {{name = "a", values = {1, 1.01, 0.99}, above = 0.5}, {name = "b", values = {0.1, 0.11, 0.09}, below = 0.5}}
  assert(row{tests = tests}.word == S)
  tests[2].below = 0.05
  assert(row{tests = tests}.word == N)
  tests[2] = {name = "b", values = {0.0, 1.0, 0.5}, below = 0.5}
  assert(row{tests = tests}.reason == V.STRADDLES)
end)

t.case("estimator rows: an interval over their own unit, no seeds", function()
  local r = V.judge{id = "C3", claim = "c", rule = "r", trained = false, unit = "sequences (bootstrap)",
                    est = 0.25, lo = 0.22, hi = 0.27, inside = {0.1875, 0.3125}}
  assert(r.word == S and r.n_seeds == 0 and r.unit == "sequences (bootstrap)")
  t.expect_error(function() V.judge{id = "C3", claim = "c", rule = "r", trained = false, unit = "x", above = 1} end,
    "est, lo, hi", "an estimator row without its interval")
end)

t.case("the same columns everywhere: TSV, report, run file", function()
  local rows = {row{values = {0.957, 0.445, 0.605}, above = 0.95, describe = "items pooled 66.9% [63.7, 70.2]"},
                row{id = "C2", values = {0.99, 0.985, 0.995}, above = 0.9,
                    control = {name = "untrained", values = {0.03, 0.02, 0.04}}}}
  local tsv = V.tsv(rows)
  local lines = {}
  for l in tsv:gmatch("[^\n]+") do lines[#lines + 1] = l end
  assert(#lines == 3, "header and two rows")
  for _, l in ipairs(lines) do
    local n = select(2, l:gsub("\t", "")) + 1
    assert(n == #V.COLUMNS, ("%d cells, not %d: %s"):format(n, #V.COLUMNS, l))
  end
  assert(lines[2]:find("\t3\t1,2,3\t0.957,0.445,0.605\t", 1, true), "n seeds, seed labels, seed values: " .. lines[2])
  assert(lines[2]:find("\tINCONCLUSIVE\tinterval straddles\t", 1, true), "word and reason in the TSV")
  local rep = table.concat(V.report_lines(rows, {20, 10, 30}), "\n")
  local parsed = V.parse(rep)
  local bad = V.problems(parsed)
  assert(#parsed == 2 and #bad == 0, table.concat(bad, "; "))
  assert(parsed[1][6] == V.STRADDLES and parsed[2][6] == "-")
  assert(rep:find("DESCRIBE C1: items pooled", 1, true), "described, not judged")
  local bad2 = V.problems(V.parse("VERDICT C1 | a | b | c | INCONCLUSIVE | because\n"))
  assert(#bad2 == 1, "an INCONCLUSIVE row without a reason class is malformed")
  -- the run file
  mp.mkdir("out/test_verdicts")
  local path = "out/test_verdicts/v.h5"
  do
    local f <close> = mp.h5.open(path, "w")
    V.write_h5(f, rows)
  end
  local f <close> = mp.h5.open(path, "r")
  local a = f:attrs("verdicts/C1")
  assert(a.word == I and a.reason == V.STRADDLES and a.seed_values == "0.957,0.445,0.605" and a.n_seeds == "3", a.n_seeds)
  local iv = f:read("verdicts/C2/t1/interval"):tolist()
  t.near(iv[1], rows[2].mean, 1e-6, "interval mean in the file")
  t.near(f:read("verdicts/C2/t1/control"):tolist()[2], 0.02, 1e-7, "control values in the file")
end)

t.finish("test_verdicts")
