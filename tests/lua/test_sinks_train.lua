-- test_sinks_train.lua — `mechprobe sinks --preset` (training models and
-- watching sinks emerge over seeds). Modes:
--   unit  the verdict rules C1 and C2 on planted per-seed fractions, each of
--         its three words; sink_fraction on a planted table; option errors
--         (a non-zero exit, a message naming the option, no output folder)
--   run   a tiny `--preset medium` (3 seeds, 40 steps at L = 32, d_model 32) end
--         to end: verdict rows well formed; the run file's numbers agree with
--         each other (the fraction = the count of stored alpha_0 > eps over the
--         heads; pooled = the mean of the seeds with a t-interval, df 2:
--         4.303); at step 0 attention is near uniform, so alpha_0 is near the
--         closed form (H_T - 1)/(T - 1) (tolerance 0.006 per head: scores of a
--         fresh model are not exactly 0); its files; and `--preset gpu` at a
--         tiny size (8 layers x 8 heads of 64)
local mode = arg[1] or "unit"
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local st = require "sinks_train"

if mode == "unit" then
  local function word(rule, x) return st[rule](x).word end
  local yes = {final = {0.20, 0.25, 0.22}, init = {0, 0, 0}, learned = true}
  check(word("C1", yes) == "SUPPORTED" and word("C2", yes) == "SUPPORTED", "sinks at the end, none at init: SUPPORTED")
  local none = {final = {0, 0, 0}, init = {0, 0, 0}, learned = true}
  check(word("C1", none) == "NOT SUPPORTED", "no sink in any seed: C1 NOT SUPPORTED (zero-width interval below 0.01)")
  check(word("C2", none) == "INCONCLUSIVE", "no sink at the end: C2 INCONCLUSIVE (its precondition)")
  local already = {final = {0.25, 0.25, 0.25}, init = {0.25, 0.25, 0.25}, learned = true}
  check(word("C2", already) == "NOT SUPPORTED", "sinks already at initialization: C2 NOT SUPPORTED")
  local wide = {final = {0.0, 0.2, 0.0}, init = {0, 0, 0}, learned = true}
  check(word("C1", wide) == "INCONCLUSIVE" and word("C2", wide) == "INCONCLUSIVE", "interval straddling 0.01: INCONCLUSIVE")
  check(word("C1", {final = {0.25}, init = {0}, learned = true}) == "INCONCLUSIVE", "one seed: INCONCLUSIVE")
  check(word("C1", {final = {0.2, 0.25, 0.22}, init = {0, 0, 0}, learned = false}) == "INCONCLUSIVE",
        "a model that did not learn: INCONCLUSIVE")
  local r = st.C1(yes)
  local m, lo, hi = require("mirror_rules").mean_ci(yes.final)
  near(r.lo, lo, 1e-12, "C1 interval = mean_ci of the seeds")
  near(m, (0.20 + 0.25 + 0.22) / 3, 1e-12, "mean of the seeds")
  check(r.ours:find("3 seeds", 1, true) ~= nil and r.rule:find("0.01", 1, true) ~= nil, "row states seeds and threshold")
  local f, k, n = st.sink_fraction({{0.5, 0.1}, {0.31, 0.3}}, 0.3)
  check(f == 0.5 and k == 2 and n == 4, "sink_fraction: alpha_0 > eps strictly (0.3 is not a sink)")
  for _, c in ipairs{{"--preset huge", "--preset must be quick, medium, full or gpu"},
                     {"--preset quick --model x.h5", "give none of --model"},
                     {"--model x.h5 --steps 3 --text hi", "--steps goes with --preset"},
                     {"--preset quick --steps 0", "--steps must be >= 1"},
                     {"--preset quick --seeds 1,1", "seed 1 given twice"},
                     {"--text hi", "give --model FILE"}} do
    local out = os.tmpname(); os.remove(out)
    local p = io.popen(("%s sinks %s --out %s 2>&1"):format(arg[-1], c[1], out))
    local msg = p:read("a")
    local ok = p:close()
    check(not ok and msg:find(c[2], 1, true) ~= nil and not os.execute("test -e " .. out),
          ("sinks %s: refused with '%s' (%s)"):format(c[1], c[2], msg:gsub("\n", " ")))
  end
else
  local report, ok, out, dir = t.run_probe("sinks",
    "--preset medium --steps 40 --checkpoints 2 --length 32 --d-model 32 --seeds 1,2,3 --format svg")
  check(ok, "sinks --preset medium (tiny) exited non-zero:\n" .. report)
  local verdicts = require "verdicts"
  local rows = verdicts.parse(report)
  local bad = verdicts.problems(rows)
  check(#rows == 2 and #bad == 0, ("2 well-formed verdict rows (%d; %s)"):format(#rows, table.concat(bad, "; ")))
  local f <close> = mp.h5.open(out .. "/sinks_train.h5")
  local A = f:attrs("/")
  check(A.format == "mechprobe.sinks_train" and A.preset == "medium" and A.seeds == "1,2,3" and A.L == 32
        and A.d_model == 32, "root attributes")
  local eps, T = A.eps, A.L
  local Hn = 0
  for k = 1, T do Hn = Hn + 1 / k end
  local uniform = (Hn - 1) / (T - 1)
  local fr = {}
  for s = 1, 3 do
    local g = ("seeds/%d/"):format(s)
    local a0 = f:read(g .. "alpha0")                           -- [checkpoint, layer, head]
    check(a0:size(1) == 3 and a0:size(2) == 4 and a0:size(3) == 8, "alpha0 [3 checkpoints, 4 layers, 8 heads]")
    local frac, cnt = f:read(g .. "sink_fraction"), f:read(g .. "sink_heads")
    for c = 1, 3 do
      local k = 0
      for l = 1, 4 do for h = 1, 8 do if a0:get(c, l, h) > eps then k = k + 1 end end end
      check(cnt:get(c) == k and math.abs(frac:get(c) - k / 32) < 1e-6,
            ("seed %d checkpoint %d: %d sink heads recounted from alpha0"):format(s, c, k))
    end
    for l = 1, 4 do
      for h = 1, 8 do near(a0:get(1, l, h), uniform, 0.006, ("seed %d L%d H%d at step 0: near-uniform"):format(s, l, h)) end
    end
    local steps = f:read(g .. "step")
    check(steps:get(1) == 0 and steps:get(2) == 20 and steps:get(3) == 40, "checkpoints at steps 0, 20, 40")
    check(f:read(g .. "tokens"):get(3) == 40 * 16 * 32, "tokens at the end")
    fr[s] = frac:get(3)
    check(io.open(("%s/models/seed%d.h5"):format(out, s)) ~= nil, ("seed %d's checkpoint"):format(s))
  end
  local P = f:read("pooled/sink_fraction")
  local m = (fr[1] + fr[2] + fr[3]) / 3
  local sd = math.sqrt(((fr[1] - m) ^ 2 + (fr[2] - m) ^ 2 + (fr[3] - m) ^ 2) / 2)
  near(P:get(1, 3), m, 1e-6, "pooled mean at the end = the seeds' mean")
  near(P:get(3, 3) - P:get(1, 3), 4.303 * sd / math.sqrt(3), 1e-5, "pooled half-width = t(0.975, 2) sd / sqrt 3")
  local v1 = f:attrs("verdicts/C1")
  check(v1.word == rows[1][5] and v1.seeds == 3, "verdict C1 stored as printed")
  near(f:read("verdicts/C1/interval"):get(1), P:get(2, 3), 1e-6, "C1 interval = the pooled interval at the end")
  for _, p in ipairs{"report.txt", "verdicts.tsv", "sink_fraction.svg", "analysis/sinks.h5", "analysis/alpha0.svg"} do
    check(io.open(out .. "/" .. p) ~= nil, p .. " written")
  end
  os.execute("rm -rf " .. dir)
  -- --preset gpu's shape at a tiny size
  local rep2, ok2, out2, dir2 = t.run_probe("sinks", "--preset gpu --steps 2 --checkpoints 1 --length 32 --d-model 32 "
    .. "--seeds 1 --format svg")
  check(ok2, "sinks --preset gpu (tiny) exited non-zero:\n" .. rep2)
  check(rep2:find("d_model 32, 8 layers x 8 heads (8 KV heads) of 64", 1, true) ~= nil, "gpu shape: 8 x 8 heads of 64")
  check(io.open(out2 .. "/sinks_train.h5") ~= nil, "gpu run file written")
  os.execute("rm -rf " .. dir2)
end
t.finish(("test_sinks_train (%s)"):format(mode))
