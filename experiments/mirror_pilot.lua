-- mirror_pilot.lua — which positional scheme lets a small transformer's first
-- layer attend by lag like the responsibilities gamma (the pilot behind the
-- mirror_descent full preset's choice of scheme; docs/mirror_descent.md).
--
--   mechprobe experiments/mirror_pilot.lua --out DIR [--schemes rope,learned,rope_relv]
--                                          [--archs standard,attn-only] [--steps N] [--depth N]
--
-- For each scheme, runs the mirror_descent probe's full-preset data and models
-- at one depth and one seed (DIR/<scheme>/: its report, mirror.h5 and figures;
-- 128 evaluation sequences, 3 pi* draws), then prints one line per model:
-- its KL to the truth averaged over the T grid beside the uniform-lambda
-- predictor's and one MD step's (and the learned-task threshold halfway
-- between), and its best layer-0 head's KL(gamma || attention on lags 1..m)
-- beside uniform attention's (0.462 on the full preset's sequences) with that
-- head's attention mass on the lags. Writes DIR/pilot.tsv. Run it on one
-- thread (OMP_NUM_THREADS=1), two instances with different --schemes on two cores.
local cli = require "cli"
local mirror = require "mirror"
local rules = require "mirror_rules"
local o = cli.parse(arg, {
  name = "mirror_pilot",
  summary = "Train one mirror_descent model per positional scheme and report layer 0 against gamma.",
  {"out", "DIR", "output folder", required = true},
  {"schemes", "LIST", "positional schemes (rope, learned, rope_relv)", default = "rope,learned,rope_relv"},
  {"archs", "LIST", "architectures (standard, attn-only)", default = "standard,attn-only"},
  {"steps", "N", "training steps per model", default = 3000, type = "int"},
  {"depth", "N", "depth of the models", default = 3, type = "int"},
  {"d_model", "N", "width of the models (default: the full preset's)", type = "int"},
})
local function list(s)
  local t = {}
  for x in s:gmatch("[^,]+") do t[#t + 1] = x end
  return t
end
mp.mkdir(o.out)
local lines = {("%-10s %-10s %6s %8s %8s %8s %8s %9s %9s %8s %6s"):format("scheme", "arch", "steps", "KL", "uniform",
  "MD1", "learned", "L0 attn", "uniform", "ratio", "lags")}
local tsv = {"scheme\tarch\tdepth\tsteps\td_model\tkl_avg\tuniform_kl\tmd_kl\tlearn_threshold\tlearned\tbest_head\t"
  .. "attn_kl\tuniform_attn_kl\tratio\tlag_mass\tseconds"}
for _, scheme in ipairs(list(o.schemes)) do
  require("mirror_report").scheme_opts(scheme, 3)   -- an unknown scheme fails before anything trains
  local p = mirror.preset("full")
  p.out, p.format, p.seed, p.progress = o.out .. "/" .. scheme, "png", 1, false
  p.pos, p.archs, p.depths, p.last_depths, p.seeds, p.steps = scheme, list(o.archs), {o.depth}, {}, 1, o.steps
  p.B_eval, p.B_tune, p.B_mech = 128, 128, 64
  p.d_model = o.d_model or p.d_model
  p.asym = {T = p.asym.T, draws = 3, sequences = 128}
  local r = mirror.run(p)
  local f <close> = mp.h5.open(r.h5)
  local E = require("mirror_report").read_evidence(f, r.h5)
  local thr = rules.learn_threshold(E)
  for _, m in ipairs(r.models) do
    local h = m.attn.best
    local mass = m.attn.mass[h]
    local ratio = m.attn.kl[h] / m.attn.uniform_kl
    lines[#lines + 1] = ("%-10s %-10s %6d %8.4f %8.4f %8.4f %8s %9.3f %9.3f %8.3f %6.3f"):format(scheme, m.spec.arch,
      o.steps, m.kl_avg, E.uniform_kl, E.md_kl, m.kl_avg <= thr and "yes" or "no", m.attn.kl[h], m.attn.uniform_kl,
      ratio, mass)
    tsv[#tsv + 1] = table.concat({scheme, m.spec.arch, o.depth, o.steps, p.d_model, m.kl_avg, E.uniform_kl, E.md_kl,
      thr, m.kl_avg <= thr and 1 or 0, ("L0H%d"):format(h - 1), m.attn.kl[h], m.attn.uniform_kl, ratio, mass,
      m.seconds}, "\t")
  end
end
print("")
print("-- pilot: layer 0 against gamma (KL(gamma || best L0 head on lags 1..m); ratio < 1: closer than uniform)")
for _, l in ipairs(lines) do print(l) end
require("cli").write_text(o.out .. "/pilot.tsv", table.concat(tsv, "\n") .. "\n")
print(("pilot: %s/pilot.tsv"):format(o.out))
