-- test_rope_id_c10.lua — row C10 of the rope_id probe (rules.C10: restoring the
-- RoPE sink heads' first key past L) on planted numbers: each word (SUPPORTED,
-- NOT SUPPORTED, INCONCLUSIVE) and each reason class (precondition absent: a
-- run file without the restore numbers, no sink head, a score check off, sinks
-- that did not fail, a restore that did not bring the attention back; not
-- learned; too few seeds; straddles), the paired difference against the
-- control per seed, and rope_id_restore.rule_input on runs with and without
-- the numbers (an old run file: INCONCLUSIVE, never an error).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local rules = require "rope_id_rules"
local restore = require "rope_id_restore"
local V = require "verdicts"
local S, N, I = V.S, V.N, V.I
local PRE, NL, FEW, STR = V.PRECONDITION, V.NOT_LEARNED, V.FEW_SEEDS, V.STRADDLES

local seeds3 = {"1", "2", "3"}
local good = {loss_in = {1.9, 2.0, 1.95}, untrained = {5.44, 5.44, 5.45}}
local flat = {loss_in = {5.2, 2.0, 1.95}, untrained = {5.44, 5.44, 5.45}}
local function with(a, b) local r = {}; for k, v in pairs(a) do r[k] = v end; for k, v in pairs(b) do r[k] = v end; return r end
-- a planted C10 input: the sinks failed (0.2 of inside L), the restore brings them back (0.9)
local base = {seeds = seeds3, text = {rope = good}, scale = "SCALE TEXT", L = 64, T = 256, octaves = 0,
              restore_seeds = seeds3, gain = {0.10, 0.12, 0.11}, gain_ctrl = {0.00, 0.01, -0.01},
              first_in = {0.8, 0.7, 0.9}, first_past = {0.16, 0.14, 0.18}, first_restored = {0.72, 0.66, 0.8},
              score_err = 1e-7, missing = 0, heads = {"L0H1", "L1H2", "L0H1"}, best = 0.9}
local function x(over) return with(base, over or {}) end
local cases = {
  {x(), S, nil, "the restore gains more than the control in every seed"},
  {x{gain = {0.0, 0.01, -0.01}, gain_ctrl = {0.02, 0.03, 0.01}}, N, nil, "the control gains as much or more"},
  {x{gain = {0.10, 0.0, 0.05}, gain_ctrl = {0.0, 0.08, 0.0}}, I, STR, "one seed against"},
  {x{missing = 3, restore_seeds = {}, gain = {}, gain_ctrl = {}, first_in = {}, first_past = {}, first_restored = {}},
   I, PRE, "an old run file without the numbers"},
  {x{restore_seeds = {}, gain = {}, gain_ctrl = {}, first_in = {}, first_past = {}, first_restored = {}}, I, PRE,
   "no sink head in any seed"},
  {x{score_err = 0.05}, I, PRE, "the intact scores are not q.k/sqrt(Dh)"},
  {x{first_past = {0.75, 0.7, 0.85}}, I, PRE, "the sinks did not fail (retention 0.95)"},
  {x{first_restored = {0.3, 0.3, 0.3}}, I, PRE, "the restore did not bring the attention back"},
  {x{text = {rope = flat}}, I, NL, "RoPE text model not learned in seed 1"},
  {x{restore_seeds = {"1", "3"}, gain = {0.1, 0.11}, gain_ctrl = {0, 0}, first_in = {0.8, 0.9},
     first_past = {0.16, 0.18}, first_restored = {0.72, 0.8}}, I, FEW, "sink heads in 2 of 3 seeds"},
}
local said = {}
for _, cs in ipairs(cases) do
  local r = rules.C10(cs[1])
  local reason = cs[3] or ""
  check(r.word == cs[2] and r.reason == reason, ("C10, %s: %s (%s), want %s (%s): %s"):format(cs[4], r.word, r.reason,
    cs[2], reason, r.ours))
  check(r.id == "C10" and r.claim ~= "" and r.rule ~= "" and r.unit == "seed" and r.source:find("Wertheimer", 1, true),
        "C10 row complete: " .. cs[4])
  if r.reason == NL then check(r.ours:find("SCALE TEXT", 1, true), "not learned: the scale is printed") end
  said[r.word .. " " .. r.reason] = true
end
for _, k in ipairs{S .. " ", N .. " ", I .. " " .. PRE, I .. " " .. NL, I .. " " .. FEW, I .. " " .. STR} do
  check(said[k], "C10 says " .. k)
end
-- the reasons name what is missing
do
  local r = rules.C10(x{missing = 2, restore_seeds = {}, gain = {}, gain_ctrl = {}, first_in = {}, first_past = {},
                        first_restored = {}})
  check(r.ours:find("no restore numbers for 2 seed(s)", 1, true) ~= nil, "old file: says so: " .. r.ours)
  r = rules.C10(x{first_past = {0.75, 0.7, 0.85}})
  check(r.ours:find("did not fail", 1, true) ~= nil, "sinks kept: says so: " .. r.ours)
end
-- judged on the paired difference per seed: gain minus the control's gain
do
  local r = rules.C10(x())
  near(r.tests[1].judged[2], 0.12 - 0.01, 1e-12, "seed 2: sink gain minus control gain")
  local m, lo, hi = V.mean_ci{0.10, 0.11, 0.12}
  near(r.mean, m, 1e-12, "mean of the differences"); near(r.lo, lo, 1e-12, "lo"); near(r.hi, hi, 1e-12, "hi")
  check(r.tests[1].control_name == "control gain", "the control is named")
end
-- rule_input: per seed with sink heads; seeds without them left out; missing counted
do
  local runs = {
    {RESTORE = {loss = {2.5, 2.3, 2.45}, n_sink = 2, score_err = 1e-7, sink_heads = "L0H1,L1H0",
                first = {{0.8, 0.2, 0.7}, {0.6, 0.1, 0.5}}}},
    {RESTORE = {loss = {2.4, 0 / 0, 0 / 0}, n_sink = 0, score_err = 0, first = {}}},
    {RESTORE = {loss = {2.6, 2.5, 2.58}, n_sink = 1, score_err = 2e-7, sink_heads = "L0H0", first = {{0.9, 0.3, 0.85}}}},
  }
  local xi = restore.rule_input(runs, seeds3, 0.9)
  check(#xi.restore_seeds == 2 and xi.restore_seeds[1] == "1" and xi.restore_seeds[2] == "3", "seeds with sink heads: 1, 3")
  near(xi.gain[1], 0.2, 1e-12, "seed 1 gain"); near(xi.gain_ctrl[1], 0.05, 1e-12, "seed 1 control gain")
  near(xi.first_in[1], 0.7, 1e-12, "seed 1: mean over its 2 sink heads inside L")
  near(xi.first_restored[1], 0.6, 1e-12, "seed 1: mean restored")
  near(xi.score_err, 2e-7, 1e-15, "largest score check")
  check(xi.missing == 0, "none missing")
  local old = restore.rule_input({{}, {}, {}}, seeds3, 0.5)
  check(old.missing == 3 and #old.restore_seeds == 0, "old run file: 3 seeds missing")
  local r = rules.C10(with(base, old))
  check(r.word == I and r.reason == PRE and r.n_seeds == 0, "old run file: INCONCLUSIVE, precondition absent: " .. r.ours)
end
t.finish("test_rope_id_c10")
