-- test_rope_id_rules.lua — the rope_id probe's claims (probes/lib/rope_id_rules.lua)
-- as rows of the one verdict engine, on planted numbers: every rule says each
-- of its words (SUPPORTED, NOT SUPPORTED, INCONCLUSIVE) and each reason class
-- that applies to it (precondition absent: no sink head, no RoPE-ID band, a
-- saturated share, nothing to separate; not learned at this scale; too few
-- seeds, sink heads in 2 seeds included; interval straddles), heads averaged
-- per seed before the interval, a source on every row, the scale text on the
-- not-learned rows, and the helpers (band, parameter count, scale) against
-- closed forms. The controls: C1/C2 against the untrained models (a file
-- without them: INCONCLUSIVE, "no untrained control"), C4/C5 against the
-- rotation-free controls' sink keep (NoPE, DroPE), the learned-clustering row
-- (rules.cluster) and the sink-kind premise row (rules.sink_kind). C1 and C2
-- on planted key geometry are in test_rope_id.lua (unit).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local rules = require "rope_id_rules"
local V = require "verdicts"
local S, N, I = V.S, V.N, V.I
local PRE, NL, FEW, STR = V.PRECONDITION, V.NOT_LEARNED, V.FEW_SEEDS, V.STRADDLES

-- ---- helpers against closed forms
near(rules.band_octaves(64), 0, 1e-12, "no band at L = 64")
near(rules.band_octaves(128), 1, 1e-12, "one octave at L = 128")
near(rules.band_octaves(512), 3, 1e-12, "three octaves at L = 512")
for _, s in ipairs{{d_model = 128, n_layer = 4, n_head = 8, d_head = 16, d_mlp = 256},
                   {d_model = 64, n_layer = 2, n_head = 4, d_head = 16, d_mlp = 128}} do
  local m = mp.model.new{d_model = s.d_model, n_layer = s.n_layer, n_head = s.n_head, d_head = s.d_head, d_mlp = s.d_mlp,
                         vocab = 257, ctx = 16, pos = "rope", seed = 1}
  local n = 0
  for _, p in ipairs(m:params()) do n = n + m:param(p):numel() end
  check(rules.n_params(s, 257) == n, ("parameter count of d %d x %d layers: %d, the model has %d"):format(s.d_model,
    s.n_layer, rules.n_params(s, 257), n))
end
local sc = rules.scale_text{what = "text", params = 689408, steps = 600, batch = 16, L = 512}
check(sc:find("0.69M parameters", 1, true) and sc:find("4.9M training tokens (600 steps of 16 x 512)", 1, true)
      and sc:find("1B parameters (about 1500x ours", 1, true), "scale text: " .. sc)

-- ---- planted rows
local seeds3 = {"1", "2", "3"}
local good = {loss_in = {1.9, 2.0, 1.95}, untrained = {5.44, 5.44, 5.45}}
local flat = {loss_in = {5.2, 2.0, 1.95}, untrained = {5.44, 5.44, 5.45}}     -- seed 1 did not learn
local good2 = {loss_in = {1.9, 2.0}, untrained = {5.44, 5.44}}
local hs = {"1", "1", "2", "2", "3", "3"}                                       -- two heads a seed
local function x(over)
  local r = {seeds = seeds3, text = {rope = good, rope_id = good}, T = 256, L = 64, octaves = 3, scale = "SCALE TEXT"}
  for k, v in pairs(over) do r[k] = v end
  return r
end
local not_learned = {rope = flat, rope_id = flat}
local two = {seeds = {"1", "2"}, text = {rope = good2, rope_id = good2}}
local function with(a, b) local r = {}; for k, v in pairs(a) do r[k] = v end; for k, v in pairs(b) do r[k] = v end; return r end
local smear = {rot = {1.4, 1.5, 1.45, 1.42, 1.38, 1.47}, pre = {1, 1, 1.01, 0.99, 1, 1}, head_seed = hs}
local still = {rot = {1.0, 1.02, 1.01, 1.0, 0.99, 1.01}, pre = {1, 1, 1.01, 0.99, 1, 1}, head_seed = hs}
local mixed = {rot = {1.0, 1.0, 1.6, 1.6, 1.1, 1.1}, pre = {1, 1, 1, 1, 1, 1}, head_seed = hs}
-- the untrained controls: keys that do not smear at initialization (excess 0),
-- or smear as much as the trained ones (rotation alone explains the rise)
local u_flat = {u = {rot = {1, 1, 1, 1, 1, 1}, pre = {1, 1, 1, 1, 1, 1}, head_seed = hs}}
local u_smear = {u = smear}
local u_part = {u = {rot = {1, 1, 1, 1}, pre = {1, 1, 1, 1}, head_seed = {"1", "1", "2", "2"}}}   -- seed 3 lacks it
-- the rotation-free controls' sink keep (NoPE, DroPE), per head
-- (per head, with the heads' seeds: two heads a seed unless given)
local function ctl(nope, drope, nope_seeds, drope_seeds)
  return {controls = {{name = "NoPE", retention = nope, head_seed = nope_seeds or (#nope > 0 and hs or {})},
                      {name = "DroPE", retention = drope, head_seed = drope_seeds or (#drope > 0 and hs or {})}}}
end
local keep_ctl = ctl({0.9, 0.88, 0.92, 0.9, 0.85, 0.9}, {0.93, 0.95, 0.9, 0.94, 0.92, 0.93})
local drope_lost = ctl({0.9, 0.88, 0.92, 0.9, 0.85, 0.9}, {0.17, 0.2, 0.15, 0.18, 0.16, 0.19})   -- medium's DroPE
local no_ctl_sink = ctl({}, {})
local nope_two = ctl({0.9, 0.9, 0.9, 0.9}, {0.9, 0.9, 0.9, 0.9, 0.9, 0.9}, {"1", "1", "2", "2"})   -- NoPE: 2 seeds
local qk = {pos_in = {0.5, 0.52, 0.48, 0.5, 0.45, 0.5}, pos_past = {0.7, 0.73, 0.69, 0.7, 0.7, 0.68}, head_seed = hs}
local qk_flat = {pos_in = {0.5, 0.52, 0.48, 0.5, 0.45, 0.5}, pos_past = {0.5, 0.51, 0.49, 0.5, 0.46, 0.5}, head_seed = hs}
local qk_mixed = {pos_in = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, pos_past = {0.5, 0.5, 0.9, 0.9, 0.55, 0.55}, head_seed = hs}
local qk_sat = {pos_in = {0.97, 0.98, 0.99, 0.99, 0.98, 0.97}, pos_past = {1, 1, 1, 1, 1, 1}, head_seed = hs}
local none = {pos_in = {}, pos_past = {}, head_seed = {}, best = 0.1}
local kept = {retention = {0.95, 0.97, 0.99, 0.96, 0.98, 0.97}, ret_seed = hs}
local lost = {retention = {0.3, 0.35, 0.32, 0.31, 0.3, 0.33}, ret_seed = hs}
local ret_mixed = {retention = {0.5, 0.6, 1.0, 1.0, 0.9, 0.9}, ret_seed = hs}
local r_hi = {rope = {0.2, 0.25, 0.22}, id = {0.6, 0.65, 0.62}, rope_L = {0.9, 0.8, 0.9}, id_L = {0.9, 0.9, 0.9},
              chance = 0.25, task = "t", T = 128}
local two_u = {u = {rot = {1, 1, 1, 1}, pre = {1, 1, 1, 1}, head_seed = {"1", "1", "2", "2"}}}
local cases = {
  {"C1", x(with(smear, u_flat)), S, nil, "every seed's keys smear over the control and over the untrained model"},
  {"C1", x(with(still, u_flat)), N, nil, "rotated as the control"},
  {"C1", x(with(smear, u_smear)), N, nil, "the untrained model smears as much (rotation alone)"},
  {"C1", x(with(mixed, u_flat)), I, STR, "one seed smears, two do not"},
  {"C1", x(smear), I, PRE, "no untrained control in the file"},
  {"C1", x(with(smear, u_part)), I, PRE, "no untrained control for seed 3"},
  {"C1", x(with(smear, with(u_flat, {text = not_learned}))), I, NL, "RoPE text model not learned in seed 1"},
  {"C1", x(with(two, with(two_u, {rot = {1.4, 1.5, 1.45, 1.42}, pre = {1, 1, 1, 1}, head_seed = {"1", "1", "2", "2"}}))),
   I, FEW, "two seeds"},
  {"C2", x(with(still, u_flat)), S, nil, "RoPE-ID's keys as the control and as at initialization"},
  {"C2", x(with(smear, u_flat)), N, nil, "RoPE-ID's keys smear"},
  {"C2", x(with(mixed, u_flat)), I, STR, "straddles"},
  {"C2", x(with(still, with(u_flat, {octaves = 1}))), I, PRE, "no band (1 octave)"},
  {"C2", x(still), I, PRE, "no untrained control in the file"},
  {"C2", x(with(still, with(u_flat, {text = not_learned}))), I, NL, "RoPE-ID text model not learned"},
  {"C2", x(with(two, with(two_u, {rot = {1, 1, 1, 1}, pre = {1, 1, 1, 1}, head_seed = {"1", "1", "2", "2"}}))), I, FEW,
   "two seeds"},
  {"C3", x(qk), S, nil, "q.k turn positive"},
  {"C3", x(qk_flat), N, nil, "no rise"},
  {"C3", x(qk_mixed), I, STR, "straddles 0.05"},
  {"C3", x(none), I, PRE, "no sink head"},
  {"C3", x(qk_sat), I, PRE, "saturated inside L"},
  {"C3", x(with(qk, {text = not_learned})), I, NL, "not learned"},
  {"C3", x{pos_in = {0.5, 0.52, 0.48, 0.5}, pos_past = {0.7, 0.73, 0.69, 0.7}, head_seed = {"1", "1", "3", "3"}}, I, FEW,
   "sink heads in 2 of 3 seeds"},
  {"C4", x(with(keep_ctl, {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29}, head_seed = hs})), S, nil,
   "sink collapses, the rotation-free controls keep theirs"},
  {"C4", x(with(keep_ctl, {retention = {1.0, 1.02, 0.98, 1, 0.99, 1.01}, head_seed = hs})), N, nil, "sink kept"},
  -- the medium run's finding: DroPE's sinks collapse past L too, without any rotation
  {"C4", x(with(drope_lost, {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29}, head_seed = hs})), N, nil,
   "RoPE loses no more than DroPE"},
  {"C4", x(with(keep_ctl, {retention = {0.3, 0.3, 1.0, 1.0, 0.6, 0.6}, head_seed = hs})), I, STR, "straddles -0.15"},
  {"C4", x(with(keep_ctl, {retention = {}, head_seed = {}, best = 0.1})), I, PRE, "no sink head"},
  {"C4", x(with(no_ctl_sink, {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29}, head_seed = hs})), I, PRE,
   "no sink head in the rotation-free controls"},
  {"C4", x(with(keep_ctl, {retention = {0.3, 0.32, 0.28, 0.3, 0.3, 0.3}, head_seed = hs, text = not_learned})), I, NL,
   "not learned"},
  -- the full run's C4 before the engine: sink heads in seeds 1 and 3 only, SUPPORTED from 2 seeds; now too few
  {"C4", x(with(keep_ctl, {retention = {0.16, 0.17, 0.15, 0.12, 0.13, 0.11}, head_seed = {"1", "1", "1", "3", "3", "3"}})),
   I, FEW, "sink heads in 2 of 3 seeds"},
  {"C4", x(with(nope_two, {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29}, head_seed = hs})), S, nil,
   "NoPE's sink heads in 2 of the 3 seeds: DroPE alone compared"},
  {"C4", x(with(ctl({0.9, 0.9, 0.9, 0.9}, {0.9, 0.9}, {"1", "1", "2", "2"}, {"1", "2"}),
                {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29}, head_seed = hs})), I, FEW,
   "the controls' sink heads in 2 of the 3 seeds"},
  -- the medium run: NoPE without sink heads, DroPE's collapse past L as RoPE's
  {"C4", x(with(ctl({}, {0.17, 0.2, 0.15, 0.18, 0.16, 0.19}), {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29},
     head_seed = hs})), N, nil, "no NoPE sink; DroPE collapses as much"},
  {"C5", x(with(still, with(keep_ctl, kept))), S, nil, "kept, as the controls keep theirs"},
  {"C5", x(with(still, with(keep_ctl, lost))), N, nil, "sink lost, the controls keep theirs"},
  {"C5", x(with(smear, with(keep_ctl, kept))), N, nil, "smeared"},
  {"C5", x(with(still, with(keep_ctl, ret_mixed))), I, STR, "keep difference straddles -0.15"},
  {"C5", x(with(still, with(keep_ctl, with(kept, {octaves = 0})))), I, PRE, "no band"},
  {"C5", x(with(still, with(keep_ctl, {retention = {}, ret_seed = {}}))), I, PRE, "no RoPE-ID sink head"},
  {"C5", x(with(still, with(no_ctl_sink, kept))), I, PRE, "no sink head in the rotation-free controls"},
  {"C5", x(with(still, with(keep_ctl, with(kept, {text = not_learned})))), I, NL, "not learned"},
  {"C5", x(with(still, with(keep_ctl, {retention = {0.95, 0.97}, ret_seed = {"1", "1"}}))), I, FEW,
   "sink heads in 1 seed"},
  {"C6", x(r_hi), S, nil, "both learned at L, RoPE-ID better at 2L"},
  {"C6", x(with(r_hi, {id = {0.2, 0.25, 0.22}})), N, nil, "equal"},
  {"C6", x(with(r_hi, {id = {0.2, 0.5, 0.25}, rope = {0.2, 0.2, 0.2}})), I, STR, "straddles"},
  {"C6", x(with(r_hi, {octaves = 1})), I, PRE, "no band"},
  {"C6", x(with(r_hi, {rope = {0.99, 1, 0.98}, id = {1, 1, 1}})), I, PRE, "ceiling: nothing to separate"},
  {"C6", x(with(r_hi, {rope_L = {0.3, 0.3, 0.3}})), I, NL, "RoPE did not learn the task at L"},
  {"C6", x(with(r_hi, {seeds = {"1", "2"}, rope = {0.2, 0.25}, id = {0.6, 0.65}, rope_L = {0.9, 0.9},
                       id_L = {0.9, 0.9}})), I, FEW, "two seeds"},
  {"C7", x{rise_rope = {1, 1.1, 1.05}, rise_id = {0.2, 0.25, 0.22}}, S, nil, "RoPE-ID rises less"},
  {"C7", x{rise_rope = {1, 1.1, 1.05}, rise_id = {1, 1.1, 1.05}}, N, nil, "same rise"},
  {"C7", x{rise_rope = {1, 1.1, 1.05}, rise_id = {1, 0.8, 1.1}}, I, STR, "straddles"},
  {"C7", x{rise_rope = {1, 1.1, 1.05}, rise_id = {0.2, 0.25, 0.22}, octaves = 0}, I, PRE, "no band"},
  {"C7", x{rise_rope = {1, 1.1, 1.05}, rise_id = {0.2, 0.25, 0.22}, text = {rope = good, rope_id = flat}}, I, NL,
   "RoPE-ID's text model not learned"},
  {"C7", x(with(two, {rise_rope = {1, 1.1}, rise_id = {0.2, 0.25}})), I, FEW, "two seeds"},
}
-- the learned-clustering row: the pre-rotation key stable rank inside L of the
-- trained models against their initialization (the full shape: 3.5-4.2 at
-- init, 1.2-1.3 trained)
local tight = {rope = {pre = {1.25, 1.3, 1.2, 1.28, 1.3, 1.22}, head_seed = hs},
               rope_id = {pre = {1.2, 1.25, 1.3, 1.22, 1.24, 1.26}, head_seed = hs}}
local init = {rope = {pre = {3.6, 4.1, 3.8, 3.9, 4.2, 3.5}, head_seed = hs},
              rope_id = {pre = {3.7, 4.0, 3.9, 3.6, 4.1, 3.8}, head_seed = hs}}
local loose = {rope = {pre = {4.5, 4.4, 4.6, 4.5, 4.3, 4.7}, head_seed = hs}, rope_id = tight.rope_id}
local half = {rope = {pre = {1.2, 1.3, 4.5, 4.6, 3.0, 3.1}, head_seed = hs}, rope_id = tight.rope_id}
local cl2 = {rope = {pre = {1.2, 1.3, 1.2, 1.3}, head_seed = {"1", "1", "2", "2"}},
             rope_id = {pre = {1.2, 1.3, 1.2, 1.3}, head_seed = {"1", "1", "2", "2"}}}
-- the sink-kind row: per RoPE sink head ||k0|| / mean ||k||, mean best non-first q.k, layer
local paper_kind = {k0 = {0.3, 0.35, 0.5, 0.4, 0.6, 0.75}, qk = {-3, -2.5, -4, -3.2, -2, -2.8}, layers = {0, 0, 1, 0, 2, 0},
                    head_seed = hs}
local full_kind = {k0 = {1.54, 1.56, 1.58, 1.55, 1.57, 1.56}, qk = {50, 48, 52, 49, 51, 50}, layers = {0, 0, 0, 0, 0, 0},
                   head_seed = hs}                                             -- the full run's sinks
local k0_mixed = {k0 = {0.3, 0.3, 1.6, 1.6, 0.9, 0.9}, qk = {-3, -3, -3, -3, -3, -3}, layers = {0, 0, 0, 0, 0, 0},
                  head_seed = hs}
for _, c in ipairs{
  {"cluster", x{cl = tight, ucl = init}, S, nil, "training lowers the stable rank"},
  {"cluster", x{cl = loose, ucl = init}, N, nil, "RoPE's keys spread with training"},
  {"cluster", x{cl = half, ucl = init}, I, STR, "one seed tightens, one spreads"},
  {"cluster", x{cl = tight}, I, PRE, "no untrained control in the file"},
  {"cluster", x{cl = tight, ucl = init, text = {rope = good, rope_id = flat}}, I, NL, "RoPE-ID not learned"},
  {"cluster", x(with(two, {cl = cl2, ucl = cl2})), I, FEW, "two seeds"},
  {"sink_kind", x(paper_kind), S, nil, "near-zero first key, negative q.k"},
  {"sink_kind", x(full_kind), N, nil, "the full run's kind: large first key, q.k ~ +50"},
  {"sink_kind", x(with(paper_kind, {qk = {3, 2.5, 4, 3.2, 2, 2.8}})), N, nil, "small first key but q.k positive"},
  {"sink_kind", x(k0_mixed), I, STR, "norm ratio straddles 1"},
  {"sink_kind", x{k0 = {}, qk = {}, layers = {}, head_seed = {}, best = 0.1}, I, PRE, "no sink head"},
  {"sink_kind", x(with(paper_kind, {text = not_learned})), I, NL, "not learned"},
  {"sink_kind", x{k0 = {0.3, 0.4}, qk = {-3, -2}, layers = {0, 1}, head_seed = {"1", "3"}}, I, FEW, "sink heads in 2 seeds"},
} do cases[#cases + 1] = c end
local said = {}
for _, cs in ipairs(cases) do
  local r = rules[cs[1]](cs[2])
  local reason = cs[4] or ""
  check(r.word == cs[3] and r.reason == reason, ("%s, %s: %s (%s), want %s (%s): %s"):format(cs[1], cs[5], r.word,
    r.reason, cs[3], reason, r.ours))
  check(r.id == (rules.IDS[cs[1]] or cs[1]) and r.claim ~= "" and r.paper ~= "" and r.rule ~= "" and r.statistic ~= "-" and r.unit == "seed"
        and r.source:find("Wertheimer", 1, true), cs[1] .. " row complete, with its source")
  if r.reason == NL then check(r.ours:find("SCALE TEXT", 1, true), cs[1] .. " not learned: the scale is printed") end
  said[cs[1] .. " " .. r.word .. " " .. r.reason] = true
end
-- each rule: each word, and each reason class that applies to it
local applies = {C1 = {PRE, NL, FEW, STR}, C2 = {PRE, NL, FEW, STR}, C3 = {PRE, NL, FEW, STR}, C4 = {PRE, NL, FEW, STR},
                 C5 = {PRE, NL, FEW, STR}, C6 = {PRE, NL, FEW, STR}, C7 = {PRE, NL, FEW, STR},
                 cluster = {PRE, NL, FEW, STR}, sink_kind = {PRE, NL, FEW, STR}}
for id, reasons in pairs(applies) do
  check(said[id .. " " .. S .. " "] and said[id .. " " .. N .. " "], id .. " says SUPPORTED and NOT SUPPORTED")
  for _, why in ipairs(reasons) do check(said[id .. " " .. I .. " " .. why], ("%s says INCONCLUSIVE (%s)"):format(id, why)) end
end

-- ---- the seed is the unit: heads of one model are averaged per seed first.
-- The medium run's C5 in miniature: 14 heads whose pooled interval would be
-- below 0.8, but whose 3 seed means 0.55, 0.48, 0.75 straddle it
do
  -- (against a control keeping 0.7 in every seed: the differences -0.15, -0.22, +0.05 straddle -0.15)
  local r = rules.C5(x(with(still, with(ctl({0.7, 0.7, 0.7, 0.7, 0.7, 0.7}, {0.7, 0.7, 0.7, 0.7, 0.7, 0.7}),
                                    {retention = {0.5, 0.6, 0.55, 0.55, 0.4, 0.5, 0.45, 0.55, 0.5, 0.48, 0.7, 0.8, 0.75, 0.75},
                                     ret_seed = {"1", "1", "1", "1", "2", "2", "2", "2", "2", "2", "3", "3", "3", "3"}}))))
  check(r.word == I and r.reason == STR, "14 heads in 3 seeds: interval over the seed means straddles -0.15: " .. r.ours)
  check(r.n_seeds == 3, "3 seeds, not 14 heads")
  near(r.tests[1].values[2], (0.4 + 0.5 + 0.45 + 0.55 + 0.5 + 0.48) / 6, 1e-12, "seed 2's value: the mean of its 6 heads")
  near(r.tests[1].judged[2], r.tests[1].values[2] - 0.7, 1e-12, "seed 2's judged value: its keep minus NoPE's")
  check(r.tests[1].control_name == "NoPE keep" and r.tests[2].control_name == "DroPE keep", "C5: NoPE and DroPE controls")
  local r4 = rules.C4(x(with(nope_two, {retention = {0.3, 0.32, 0.28, 0.3, 0.31, 0.29}, head_seed = hs})))
  check(#r4.tests == 1 and r4.tests[1].control_name == "DroPE keep" and r4.describe:find("compared with DroPE", 1, true),
        "C4: NoPE without sinks in seed 3 is left out, DroPE compared: " .. r4.describe)
  local rows = r.tests[1].judged
  local m, lo, hi = V.mean_ci(rows)
  near(r.lo, lo, 1e-12, "the row's interval: over the seed means"); near(r.mean, m, 1e-12, "mean"); near(r.hi, hi, 1e-12, "hi")
end
-- C1's control: the pre-rotation keys, judged on the paired difference per seed
do
  local r = rules.C1(x(with(smear, u_flat)))
  check(r.tests[1].control_name == "pre-rotation" and #r.tests[1].control == 3, "C1's control: pre-rotation, per seed")
  near(r.tests[1].judged[1], (1.4 + 1.5) / 2 - 1, 1e-12, "seed 1: rotated minus pre-rotation")
  check(r.tests[2].control_name == "untrained" and r.ours:find("untrained 0.000, 0.000, 0.000", 1, true) ~= nil,
        "C1's second control: the untrained model, printed beside the trained excess: " .. r.ours)
  local ru = rules.C1(x(with(smear, u_smear)))
  near(ru.tests[2].judged[2], 0, 1e-12, "seed 2: trained excess minus the same untrained excess")
  local r0 = rules.C1(x(smear))
  check(r0.ours:find("no untrained control in this file", 1, true) ~= nil, "C1 without the control says why: " .. r0.ours)
  check(r.describe:find("6 heads in 3 seeds", 1, true) ~= nil, "C1 describes its heads: " .. r.describe)
end
-- the learned-task test reads every seed of every model it names
do
  local l = rules.text_learned({text = {rope = good, rope_id = flat}}, {"rope", "rope_id"})
  check(not l.ok and l.text:find("RoPE-ID's text loss", 1, true) and l.text:find("in 1 of 3 seeds", 1, true),
        "RoPE-ID not learned in seed 1: " .. l.text)
  check(rules.text_learned({text = {rope = good}}, {"rope"}).ok, "RoPE learned in every seed")
end
t.finish("test_rope_id_rules")
