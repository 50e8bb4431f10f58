-- test_rope_id_rules.lua — the rope_id probe's verdict rules
-- (probes/lib/rope_id_rules.lua) on planted numbers: every rule says each of
-- its words (SUPPORTED, NOT SUPPORTED, INCONCLUSIVE: no sink head, no band, too
-- few seeds, a straddling interval), intervals over seeds when the values name
-- their seeds, and the band and t-interval helpers against closed forms. C1 and
-- C2 on planted key geometry are in test_rope_id.lua (unit), beside rope_id_geo.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local rules = require "rope_id_rules"

-- ---- every other rule says each of its words on planted numbers
local function word(r) return r.word end
local S, N, I = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
near(rules.band_octaves(64), 0, 1e-12, "no band at L = 64")
near(rules.band_octaves(128), 1, 1e-12, "one octave at L = 128")
near(rules.band_octaves(512), 3, 1e-12, "three octaves at L = 512")
local m_, lo_, hi_ = rules.mean_ci{1, 2, 3}
near(m_, 2, 1e-12, "mean"); near(hi_ - m_, 4.303 / math.sqrt(3), 1e-9, "95% t half-width, 3 values")
local cases = {
  {"C3", {pos_in = {}, pos_past = {}, seeds = 3}, I, "no sink head"},
  {"C3", {pos_in = {0.5, 0.52, 0.48}, pos_past = {0.7, 0.73, 0.69}, seeds = 1}, S, "q.k turn positive"},
  {"C3", {pos_in = {0.5, 0.52, 0.48}, pos_past = {0.5, 0.51, 0.49}, seeds = 1}, N, "no rise"},
  {"C3", {pos_in = {0.97, 0.98, 0.99}, pos_past = {1, 1, 1}, seeds = 1}, I, "saturated inside L"},
  {"C3", {pos_in = {0.5, 0.5, 0.5, 0.5}, pos_past = {0.5, 0.7, 0.5, 0.7}, seeds = 1}, I, "straddles 0.05"},
  {"C4", {retention = {}, seeds = 3, best = 0.1}, I, "no sink head"},
  {"C4", {retention = {0.3, 0.32, 0.28}, seeds = 1}, S, "sink collapses"},
  {"C4", {retention = {1.0, 1.02, 0.98}, seeds = 1}, N, "sink kept"},
  {"C4", {retention = {0.3, 1.0, 0.5, 0.9}, seeds = 1}, I, "straddles 0.67"},
  {"C5", {retention = {0.95, 0.97, 0.99}, srank_excess = {1, 1.01, 1.02}, seeds = 3, octaves = 0, L = 64}, I, "no band"},
  {"C5", {retention = {}, srank_excess = {1, 1.01, 1.02}, seeds = 3, octaves = 3, L = 512}, I, "no RoPE-ID sink"},
  {"C5", {retention = {0.95, 0.97, 0.99}, srank_excess = {1, 1.01, 1.02}, seeds = 3, octaves = 3, L = 512}, S, "kept"},
  {"C5", {retention = {0.3, 0.35, 0.32}, srank_excess = {1, 1.01, 1.02}, seeds = 3, octaves = 3, L = 512}, N, "sink lost"},
  {"C5", {retention = {0.95, 0.97, 0.99}, srank_excess = {1.4, 1.5, 1.45}, seeds = 3, octaves = 3, L = 512}, N, "smeared"},
  {"C5", {retention = {0.5, 1.0, 0.6, 1.0}, srank_excess = {1, 1.01, 1.02}, seeds = 3, octaves = 3, L = 512}, I, "straddles"},
  {"C6", {rope = {0.2, 0.25, 0.22}, id = {0.6, 0.65, 0.62}, task = "t", T = 1024, octaves = 3}, S, "RoPE-ID better"},
  {"C6", {rope = {0.6, 0.62, 0.61}, id = {0.6, 0.62, 0.61}, task = "t", T = 1024, octaves = 3}, N, "equal"},
  {"C6", {rope = {0.2, 0.25, 0.22}, id = {0.6, 0.65, 0.62}, task = "t", T = 1024, octaves = 1}, I, "no band"},
  {"C6", {rope = {0.2, 0.25}, id = {0.6, 0.65}, task = "t", T = 1024, octaves = 3}, I, "two seeds"},
  {"C6", {rope = {0.99, 1, 0.98}, id = {1, 1, 1}, task = "t", T = 1024, octaves = 3}, I, "ceiling"},
  {"C6", {rope = {0.2, 0.2, 0.2}, id = {0.2, 0.5, 0.25}, task = "t", T = 1024, octaves = 3}, I, "straddles"},
  {"C6", {rope = {0.2, 0.25, 0.22}, id = {0.6, 0.65, 0.62}, rope_L = {0.3, 0.3, 0.3}, id_L = {0.9, 0.9, 0.9},
          chance = 0.25, task = "t", T = 1024, octaves = 3}, I, "RoPE did not learn the task at L"},
  {"C6", {rope = {0.2, 0.25, 0.22}, id = {0.6, 0.65, 0.62}, rope_L = {0.9, 0.8, 0.9}, id_L = {0.9, 0.9, 0.9},
          chance = 0.25, task = "t", T = 1024, octaves = 3}, S, "both learned at L, RoPE-ID better at 2L"},
  {"C7", {rise_rope = {1, 1.1, 1.05}, rise_id = {0.2, 0.25, 0.22}, T = 4096, octaves = 3}, S, "RoPE-ID rises less"},
  {"C7", {rise_rope = {1, 1.1, 1.05}, rise_id = {1, 1.1, 1.05}, T = 4096, octaves = 3}, N, "same rise"},
  {"C7", {rise_rope = {1, 1.1, 1.05}, rise_id = {1, 0.8, 1.1}, T = 4096, octaves = 3}, I, "straddles"},
  {"C7", {rise_rope = {1, 1.1}, rise_id = {0.2, 0.25}, T = 4096, octaves = 3}, I, "two seeds"},
  -- the seed as the unit (seed_of): heads of one model are not replicates.
  -- The medium run's C5 in miniature: 14 heads whose pooled interval is below
  -- 0.8 (NOT SUPPORTED as units) but whose 3 seed means 0.55, 0.48, 0.75 straddle it
  {"C5", {retention = {0.5, 0.6, 0.55, 0.55, 0.4, 0.5, 0.45, 0.55, 0.5, 0.48, 0.7, 0.8, 0.75, 0.75},
          srank_excess = {1, 1.01, 1.02}, seeds = 3, octaves = 3, L = 512}, N, "14 heads as units"},
  {"C5", {retention = {0.5, 0.6, 0.55, 0.55, 0.4, 0.5, 0.45, 0.55, 0.5, 0.48, 0.7, 0.8, 0.75, 0.75},
          retention_seed = {1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3},
          srank_excess = {1, 1.01, 1.02}, excess_seed = {1, 2, 3}, seeds = 3, octaves = 3, L = 512}, I,
          "the same heads, interval over 3 seeds straddles 0.8"},
  {"C4", {retention = {0.01, 0.02, 0.03, 0.02, 0.04, 0.03}, seed_of = {1, 1, 1, 2, 3, 3}, seeds = 3}, S,
          "every seed's sink collapses"},
  {"C4", {retention = {0.01, 0.02, 0.03, 0.02}, seed_of = {1, 1, 1, 1}, seeds = 1}, I, "one seed: no interval"},
  {"C1", {ratio_rot = {1.4, 1.5, 1.45, 1.42, 1.38, 1.47}, ratio_pre = {1, 1, 1, 1, 1, 1},
          seed_of = {1, 1, 2, 2, 3, 3}, seeds = 3, T = 1024, L = 256}, S, "all seeds smear"},
  {"C3", {pos_in = {0.5, 0.52, 0.48, 0.5}, pos_past = {0.5, 0.51, 0.49, 0.5}, seed_of = {1, 2, 3, 3}, seeds = 3}, N,
          "no rise in any seed"},
}
for _, cs in ipairs(cases) do
  local r = rules[cs[1]](cs[2])
  check(word(r) == cs[3], ("%s, %s: %s, want %s (%s)"):format(cs[1], cs[4], r.word, cs[3], r.ours))
  check(r.claim ~= "" and r.paper ~= "" and r.rule ~= "" and r.ours:find("seed", 1, true), cs[1] .. " row complete")
end
t.finish("test_rope_id_rules")
