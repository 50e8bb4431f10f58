-- test_sinks_train.lua — `mechprobe sinks --preset` (training models and
-- watching sinks emerge over seeds) and `mechprobe sinks --rejudge`. Modes:
--   unit  the verdict rules C1, C2 and C3 on planted per-seed fractions: every word
--         and every INCONCLUSIVE reason that applies (C1 has no premise, so no
--         "precondition absent"), the interval against its closed form (t 4.303
--         with 3 seeds); sink_fraction on a planted table; the report's verdict
--         section replaced and nothing else; --rejudge on a planted run file
--         (hand-computed seed values, differences, intervals, words; the old
--         /verdicts layout dropped; the rest of the file kept), on a stored tiny
--         run (tests/data/rejudge/sinks: verdicts.tsv and report.txt byte for
--         byte as the run wrote them), and its errors (a missing, foreign or
--         non-HDF5 file, a report without a verdict section: a message naming
--         the file, nothing changed, nothing left behind); option errors (a
--         non-zero exit, a message naming the option, no output folder)
--   run   a tiny `--preset medium` (3 seeds, 40 steps at L = 32, d_model 32) end
--         to end: verdict rows well formed; the run file's numbers agree with
--         each other (the fraction = the count of stored alpha_0 > eps over the
--         heads; pooled = the mean of the seeds with a t-interval, df 2:
--         4.303; /verdicts/C1 = end minus step 0 per seed); at step 0 attention
--         is near uniform, so alpha_0 is near the closed form (H_T - 1)/(T - 1)
--         (tolerance 0.006 per head: scores of a fresh model are not exactly
--         0); its files; --rejudge on a copy of the output folder gives
--         verdicts.tsv and report.txt byte for byte; and `--preset gpu` at a
--         tiny size (8 layers x 8 heads of 64)
local mode = arg[1] or "unit"
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local st = require "sinks_train"
local V = require "verdicts"
local T975_2 = 4.303                 -- Student's t, 97.5%, 2 degrees of freedom

local slurp = t.read_file

local function spit(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function tmpdir()
  local d = os.tmpname(); os.remove(d); mp.mkdir(d)
  return d
end

-- `mechprobe sinks ARGS`: its output and whether it exited 0
local function sinks_cli(args)
  local p = io.popen(("%s sinks %s 2>&1"):format(arg[-1], args))
  local msg = p:read("a")
  return msg, p:close()
end

-- mean and 95% half-width of three values, by hand
local function ci3(a, b, c)
  local m = (a + b + c) / 3
  local sd = math.sqrt(((a - m) ^ 2 + (b - m) ^ 2 + (c - m) ^ 2) / 2)
  return m, T975_2 * sd / math.sqrt(3)
end

-- the rows of a verdicts.tsv as {column = cell}
local function tsv_rows(text)
  local lines = {}
  for line in text:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local cols, rows = {}, {}
  for c in (lines[1] .. "\t"):gmatch("([^\t]*)\t") do cols[#cols + 1] = c end
  for i = 2, #lines do
    local r, k = {}, 0
    for c in (lines[i] .. "\t"):gmatch("([^\t]*)\t") do k = k + 1; r[cols[k]] = c end
    rows[#rows + 1] = r
  end
  return rows, cols
end

if mode == "unit" then
  -- planted per-seed inputs: 3 seeds that learned (held-out loss 1.5 < H 3)
  local function x(over)
    local r = {seeds = {1, 2, 3}, init = {0, 0, 0}, first = {0, 0, 0}, final = {0.20, 0.25, 0.22},
               val_loss = {1.5, 1.5, 1.5}, H = 3, eps = 0.3, scale = "planted scale",
               n_layer = 8, init_deep = {0, 0, 0}, final_deep = {0.05, 0.0625, 0.04}}
    for k, v in pairs(over) do r[k] = v end
    if over.first == false then r.first = nil end
    return r
  end
  local function wr(rule, over) local r = st[rule](x(over)); return r.word, r.reason, r end

  t.case("C1: SUPPORTED, with the interval of end minus step 0 against its closed form", function()
    local w, why, r = wr("C1", {init = {0, 0.03125, 0}})
    assert(w == V.S and why == "", w .. " / " .. why)
    local m, h = ci3(0.20, 0.25 - 0.03125, 0.22)
    t.near(r.mean, m, 1e-12, "mean of the differences")
    t.near(r.hi - r.mean, h, 1e-3 * h, "half-width t(0.975, 2) sd / sqrt 3")
    assert(r.tests[1].control_name == "untrained model (step 0)", "the control is named")
    assert(r.ours:find("0.031", 1, true) and r.ours:find("0.250", 1, true), "seed and control values shown: " .. r.ours)
    assert(r.rule:find("0.01", 1, true) and r.n_seeds == 3, "rule states its threshold; 3 seeds")
  end)
  t.case("C1: NOT SUPPORTED when training adds no sink head", function()
    assert(wr("C1", {final = {0, 0, 0}}) == V.N, "no sinks anywhere: zero-width interval below 0.01")
    assert(wr("C1", {init = {0.25, 0.25, 0.25}, final = {0.25, 0.25, 0.25}}) == V.N,
           "sinks already in the untrained model: difference 0")
  end)
  t.case("C1: INCONCLUSIVE, each reason that applies", function()
    local w, why = wr("C1", {final = {0, 0.2, 0}})
    assert(w == V.I and why == V.STRADDLES, "straddles: " .. why)
    local w2, why2, r2 = wr("C1", {val_loss = {1.5, 3.5, 0 / 0}})
    assert(w2 == V.I and why2 == V.NOT_LEARNED, "not learned: " .. why2)
    assert(r2.ours:find("seed 2 (3.500), seed 3 (nan)", 1, true), "names the seeds that did not learn: " .. r2.ours)
    assert(r2.ours:find("planted scale", 1, true), "the scale is printed when not learned")
    local w3, why3 = wr("C1", {seeds = {1, 2}, init = {0, 0}, final = {0.2, 0.25}, val_loss = {1.5, 1.5}})
    assert(w3 == V.I and why3 == V.FEW_SEEDS, "two seeds: " .. why3)
    -- not learned outranks a decided interval; NOT SUPPORTED needs a model that learned
    assert(wr("C1", {final = {0, 0, 0}, val_loss = {3, 3, 3}}) == V.I, "loss equal to the entropy is not learned")
  end)
  t.case("C3: sink heads past layer 0, each word", function()
    local w, why, r = wr("C3", {init_deep = {0, 0.0178, 0}})
    assert(w == V.S and why == "", w .. " / " .. why)
    local m, h = ci3(0.05, 0.0625 - 0.0178, 0.04)
    t.near(r.mean, m, 1e-12, "mean of end minus step 0 past layer 0")
    t.near(r.hi - r.mean, h, 1e-3 * h, "half-width")
    assert(r.tests[1].control_name == "untrained model (step 0)", "the control is named")
    assert(wr("C3", {final_deep = {0, 0, 0}}) == V.N, "every sink in layer 0: NOT SUPPORTED")
    assert(wr("C3", {init_deep = {0.1, 0.1, 0.1}, final_deep = {0.1, 0.1, 0.1}}) == V.N,
           "sinks past layer 0 already at initialization: difference 0")
    local w1, why1 = wr("C3", {final_deep = {0, 0.2, 0}})
    assert(w1 == V.I and why1 ~= "", "an interval across the threshold: " .. w1)
    local w2, why2, r2 = wr("C3", {n_layer = 1, final_deep = {0 / 0, 0 / 0, 0 / 0}, init_deep = {0 / 0, 0 / 0, 0 / 0}})
    assert(w2 == V.I and why2 == V.PRECONDITION and r2.ours:find("no layer past 0", 1, true),
           "premise: " .. w2 .. " / " .. why2 .. " / " .. r2.ours)
    local w3, why3 = wr("C3", {val_loss = {1.5, 3.5, 1.5}, final_deep = {0, 0, 0}})
    assert(w3 == V.I and why3 ~= "", "not learned: INCONCLUSIVE, not NOT SUPPORTED: " .. w3)
  end)
  t.case("sinks_by_layer on a planted table", function()
    local by, deep = st.sinks_by_layer({{0.5, 0.1, 0.4}, {0.1, 0.1, 0.1}, {0.31, 0.3, 0.9}}, 0.3)
    assert(table.concat(by, "/") == "2/0/2", table.concat(by, "/"))
    t.near(deep, 2 / 6, 1e-15, "2 of the 6 heads past layer 0")
  end)
  t.case("C2: SUPPORTED and NOT SUPPORTED", function()
    local w, _, r = wr("C2", {first = {0.03125, 0, 0}})
    assert(w == V.S, w)
    local m, h = ci3(0.20 - 0.03125, 0.25, 0.22)
    t.near(r.mean, m, 1e-12, "mean of end minus first checkpoint")
    t.near(r.hi - r.mean, h, 1e-3 * h, "half-width")
    assert(r.tests[1].control_name == "first checkpoint after step 0", "the control is named")
    assert(wr("C2", {first = {0.20, 0.25, 0.22}}) == V.N, "every sink already at the first checkpoint: refuted")
  end)
  t.case("C2: INCONCLUSIVE, each reason that applies", function()
    local w, why = wr("C2", {first = {0.2, 0, 0.2}, final = {0.2, 0.25, 0.2}})
    assert(w == V.I and why == V.STRADDLES, "straddles: " .. why)
    local w1, why1, r1 = wr("C2", {final = {0, 0, 0}})
    assert(w1 == V.I and why1 == V.PRECONDITION, "no sinks at the end: " .. why1)
    assert(r1.ours:find("not above 0.01", 1, true), r1.ours)
    local w2, why2 = wr("C2", {final = {0, 0.2, 0}})
    assert(w2 == V.I and why2 == V.PRECONDITION, "sinks at the end not established over the seeds: " .. why2)
    local w3, why3, r3 = wr("C2", {first = false})
    assert(w3 == V.I and why3 == V.PRECONDITION and r3.ours:find("no checkpoint between", 1, true),
           "no checkpoint between step 0 and the end: " .. why3)
    local w4, why4 = wr("C2", {val_loss = {1.5, 1.5, 3.5}})
    assert(w4 == V.I and why4 == V.NOT_LEARNED, "not learned: " .. why4)
    local w5, why5 = wr("C2", {seeds = {1, 2}, init = {0, 0}, first = {0, 0}, final = {0.2, 0.25},
                               val_loss = {1.5, 1.5}})
    assert(w5 == V.I and why5 == V.FEW_SEEDS, "two seeds: too few seeds, not a missing premise: " .. why5)
  end)
  t.case("sink_fraction: alpha_0 > eps strictly", function()
    local f, k, n = st.sink_fraction({{0.5, 0.1}, {0.31, 0.3}}, 0.3)
    assert(f == 0.5 and k == 2 and n == 4, "0.3 is not a sink")
  end)
  t.case("the report's verdict section is replaced, nothing else", function()
    local rows = st.rules(x{})
    local sec = table.concat(st.verdict_lines(rows), "\n")
    local a = "head\n\n-- verdicts\nVERDICT C1 | old\nRULE C1: old\n\nfiles: x\ntime: 1s\n"
    assert(st.replace_verdicts(a, rows) == "head\n\n" .. sec .. "\n\nfiles: x\ntime: 1s\n", "up to the blank line")
    local b = "head\n-- verdicts\nVERDICT C1 | old\nfiles: x\n"
    assert(st.replace_verdicts(b, rows) == "head\n" .. sec .. "\nfiles: x\n", "up to the files: line")
    assert(st.replace_verdicts("head\nno section\n", rows) == nil, "no section: nil")
    local lines = st.verdict_lines(rows)
    assert(lines[1] == "-- verdicts" and lines[2]:sub(1, 11) == "VERDICT C1 " and lines[3]:sub(1, 11) == "VERDICT C2 ",
           "header, then the engine's rows")
  end)

  -- a planted run file: 3 seeds, 4 measurements (step 0, 100, 200, 300) of 2 x 4 heads
  local planted = {[4] = {0, 0, 2, 3}, [5] = {0, 1, 1, 4}, [7] = {0, 0, 0, 2}}   -- sink heads per measurement
  local vloss = {[4] = 2.5, [5] = 2.75, [7] = 2.0}                                   -- held-out loss at the end
  local function plant(dir, opts)
    opts = opts or {}
    local f <close> = mp.h5.open(dir .. "/sinks_train.h5", "w")
    f:set_attr("/", "format", opts.format or "mechprobe.sinks_train")
    f:set_attr("/", "seeds", "4,5,7")
    f:set_attr("/", "eps", 0.3)
    f:set_attr("/", "unigram_entropy", 3.0)
    for k, v in pairs{n_layer = 2, n_head = 4, n_kv_head = 4, d_head = 8, d_model = 32, d_mlp = 64} do
      f:set_attr("/", k, v)
    end
    for _, s in ipairs{4, 5, 7} do
      local g = ("seeds/%d/"):format(s)
      local A, frac = {}, {}
      for c, k in ipairs(planted[s]) do
        A[c] = {{}, {}}
        for i = 1, 8 do A[c][(i - 1) // 4 + 1][(i - 1) % 4 + 1] = i <= k and 0.5 or 0.1 end
        frac[c] = k / 8
      end
      f:write(g .. "alpha0", A)
      f:write(g .. "step", {0, 100, 200, 300}, {int32 = true})
      f:write(g .. "tokens", {0, 1600, 3200, 4800})
      f:write(g .. "sink_fraction", frac)
      f:write(g .. "sink_heads", planted[s], {int32 = true})
      f:write(g .. "train_loss", {0 / 0, 3, 2.8, 2.6})
      f:write(g .. "val_loss", {5.5, 3.5, 3.0, vloss[s]})
      f:set_attr(g .. "alpha0", "checkpoint", "DIR/models/seed.h5")
    end
    f:write("pooled/sink_fraction", {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}})
    f:write("verdicts/C1/interval", {0.1, 0.2})                                  -- the old layout
    f:set_attr("verdicts/C1", "word", "SUPPORTED")
    f:close()
    spit(dir .. "/report.txt", "== planted ==\n\n-- verdicts\nVERDICT C1 | old | p | o | SUPPORTED\nRULE C1: old\n\n"
      .. "files: DIR/sinks_train.h5\ntime: total 1s\n")
    spit(dir .. "/verdicts.tsv", "old\n")
  end

  t.case("--rejudge on a planted run file: the rows by hand", function()
    local dir = tmpdir()
    plant(dir)
    local msg, ok = sinks_cli("--rejudge --out " .. dir)
    assert(ok, "exit 0: " .. msg)
    local tsv = slurp(dir .. "/verdicts.tsv")
    local rows, cols = tsv_rows(tsv)
    assert(table.concat(cols, ",") == table.concat(V.COLUMNS, ","), "the engine's columns")
    assert(#rows == 3 and rows[1].id == "C1" and rows[2].id == "C2" and rows[3].id == "C3", "rows C1, C2, C3")
    -- C1: end minus step 0 = 3/8, 4/8, 2/8
    local m, h = ci3(3 / 8, 4 / 8, 2 / 8)
    local c1 = rows[1]
    assert(c1.seeds == "4,5,7" and c1.n_seeds == "3", "seeds 4,5,7")
    assert(c1.seed_values == "0.375,0.5,0.25" and c1.control_values == "0,0,0", c1.seed_values .. " / " .. c1.control_values)
    t.near(tonumber(c1.mean), m, 1e-5, "C1 mean"); t.near(tonumber(c1.lo), m - h, 1e-4, "C1 lo")
    assert(c1.word == V.S and c1.reason == "", "C1 SUPPORTED: " .. c1.word)
    -- C2: end minus the first checkpoint (step 100) = 3/8, 3/8, 2/8
    local m2, h2 = ci3(3 / 8, 3 / 8, 2 / 8)
    local c2 = rows[2]
    assert(c2.control_values == "0,0.125,0", c2.control_values)
    t.near(tonumber(c2.mean), m2, 1e-5, "C2 mean"); t.near(tonumber(c2.hi), m2 + h2, 1e-4, "C2 hi")
    assert(c2.word == V.S, "C2 SUPPORTED: " .. c2.word)
    assert(c1.describe:find("9 of 24 at the end, 0 of 24 at step 0", 1, true), c1.describe)
    -- C3: the planted sink heads all sit in layer 0 (heads 1-4): none past it, at the end or at step 0
    local c3 = rows[3]
    assert(c3.seed_values == "0,0,0" and c3.control_values == "0,0,0", c3.seed_values .. " / " .. c3.control_values)
    assert(c3.word == V.N, "C3 NOT SUPPORTED: " .. c3.word .. " " .. c3.reason)
    assert(c3.describe:find("by layer 0..1 at the end, all seeds: 9/0 (seed 4 3/0, seed 5 4/0, seed 7 2/0)", 1, true),
           c3.describe)
    -- the report: only the verdict section changed
    local rep = slurp(dir .. "/report.txt")
    assert(rep:sub(1, 29) == "== planted ==\n\n-- verdicts\nVE" and not rep:find("| old |", 1, true), "section replaced")
    assert(rep:find("\n\nfiles: DIR/sinks_train.h5\ntime: total 1s\n$"), "lines after the section kept")
    assert(rep:find("VERDICT C1 | training grows attention-sink heads", 1, true), "new C1 row")
    -- the run file: new /verdicts, the old layout gone, the data kept
    local f <close> = mp.h5.open(dir .. "/sinks_train.h5")
    assert(f:attrs("verdicts/C1").word == V.S and f:attrs("verdicts/C2").word == V.S, "/verdicts words")
    assert(not f:has("verdicts/C1/interval"), "the old /verdicts/C1/interval is gone")
    t.near(f:read("verdicts/C1/t1/interval"):get(1), m, 1e-6, "/verdicts/C1/t1/interval")
    assert(f:read_int("seeds/5/sink_heads")[4] == 4 and f:read("seeds/7/val_loss"):get(4) == 2.0, "data kept")
    assert(f:attrs("seeds/4/alpha0").checkpoint == "DIR/models/seed.h5" and f:attrs("/").unigram_entropy == 3.0,
           "attributes kept")
    assert(f:read("seeds/4/train_loss"):get(1) ~= f:read("seeds/4/train_loss"):get(1), "NaN kept")
    f:close()
    -- rejudging again changes nothing
    local rep1, tsv1 = slurp(dir .. "/report.txt"), slurp(dir .. "/verdicts.tsv")
    assert(select(2, sinks_cli("--rejudge --out " .. dir)), "second rejudge")
    assert(slurp(dir .. "/report.txt") == rep1 and slurp(dir .. "/verdicts.tsv") == tsv1, "idempotent")
    local ls = io.popen("ls -A " .. dir):read("a")
    assert(ls == "report.txt\nsinks_train.h5\nverdicts.tsv\n", "no temporaries left: " .. ls)
    os.execute("rm -rf " .. dir)
  end)

  t.case("--rejudge on a planted run whose models did not learn: INCONCLUSIVE, naming the seed", function()
    local dir = tmpdir()
    vloss[5] = 3.25
    plant(dir)
    vloss[5] = 2.75
    local msg, ok = sinks_cli("--rejudge --out " .. dir)
    assert(ok, msg)
    local rows = tsv_rows(slurp(dir .. "/verdicts.tsv"))
    assert(rows[1].word == V.I and rows[1].reason == V.NOT_LEARNED and rows[1].ours:find("seed 5 (3.250)", 1, true),
           rows[1].ours)
    os.execute("rm -rf " .. dir)
  end)

  t.case("--rejudge errors: the file named, nothing changed, nothing left behind", function()
    local dir = tmpdir()
    local msg, ok = sinks_cli("--rejudge --out " .. dir)
    assert(not ok and msg:find(dir .. "/sinks_train.h5: no such run file", 1, true), "missing: " .. msg)
    plant(dir, {format = "mechprobe.rope_id"})
    local before = slurp(dir .. "/sinks_train.h5")
    msg, ok = sinks_cli("--rejudge --out " .. dir)
    assert(not ok and msg:find(dir .. "/sinks_train.h5: not a sinks_train run file", 1, true), "foreign: " .. msg)
    assert(slurp(dir .. "/sinks_train.h5") == before and slurp(dir .. "/verdicts.tsv") == "old\n", "unchanged")
    spit(dir .. "/sinks_train.h5", "not hdf5\n")
    msg, ok = sinks_cli("--rejudge --out " .. dir)
    assert(not ok and msg:find(dir .. "/sinks_train.h5", 1, true), "not HDF5: " .. msg)
    plant(dir)
    spit(dir .. "/report.txt", "a report without its verdicts\n")
    before = slurp(dir .. "/sinks_train.h5")
    msg, ok = sinks_cli("--rejudge --out " .. dir)
    assert(not ok and msg:find(dir .. "/report.txt: no '-- verdicts' section", 1, true), "no section: " .. msg)
    assert(slurp(dir .. "/sinks_train.h5") == before and slurp(dir .. "/verdicts.tsv") == "old\n", "unchanged")
    local ls = io.popen("ls -A " .. dir):read("a")
    assert(ls == "report.txt\nsinks_train.h5\nverdicts.tsv\n", "no temporaries left: " .. ls)
    msg, ok = sinks_cli("--rejudge --preset quick --out " .. dir)
    assert(not ok and msg:find("give no --preset with it", 1, true), "--rejudge with --preset: " .. msg)
    os.execute("rm -rf " .. dir)
  end)

  do   -- --rejudge on the stored tiny run: verdicts.tsv and report.txt byte for byte
    local dir = t.rejudge_stored("sinks", "sinks")
    os.execute("rm -rf " .. dir:match("^(.*)/run$"))
  end

  for _, c in ipairs{{"--preset huge", "--preset must be quick, medium, full, deep or gpu"},
                     {"--preset quick --model x.h5", "give none of --model"},
                     {"--model x.h5 --steps 3 --text hi", "--steps goes with --preset"},
                     {"--preset quick --steps 0", "--steps must be >= 1"},
                     {"--preset quick --seeds 1,1", "seed 1 given twice"},
                     {"--text hi", "give --model FILE"}} do
    local out = os.tmpname(); os.remove(out)
    local msg, ok = sinks_cli(("%s --out %s"):format(c[1], out))
    check(not ok and msg:find(c[2], 1, true) ~= nil and not os.execute("test -e " .. out),
          ("sinks %s: refused with '%s' (%s)"):format(c[1], c[2], msg:gsub("\n", " ")))
  end
else
  local report, ok, out, dir = t.run_probe("sinks",
    "--preset medium --steps 40 --checkpoints 2 --length 32 --d-model 32 --seeds 1,2,3 --format svg")
  check(ok, "sinks --preset medium (tiny) exited non-zero:\n" .. report)
  local rows = V.parse(report)
  local bad = V.problems(rows)
  check(#rows == 3 and #bad == 0, ("3 well-formed verdict rows (%d; %s)"):format(#rows, table.concat(bad, "; ")))
  check(report:find("sink heads by layer 0..3 at the end: %d+/%d+/%d+/%d+") ~= nil, "sink heads per layer, per seed")
  local f <close> = mp.h5.open(out .. "/sinks_train.h5")
  local A = f:attrs("/")
  check(A.format == "mechprobe.sinks_train" and A.preset == "medium" and A.seeds == "1,2,3" and A.L == 32
        and A.d_model == 32, "root attributes")
  local eps, T = A.eps, A.L
  local Hn = 0
  for k = 1, T do Hn = Hn + 1 / k end
  local uniform = (Hn - 1) / (T - 1)
  local fr, diff = {}, {}
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
    fr[s], diff[s] = frac:get(3), frac:get(3) - frac:get(1)
    check(io.open(("%s/models/seed%d.h5"):format(out, s)) ~= nil, ("seed %d's checkpoint"):format(s))
  end
  local P = f:read("pooled/sink_fraction")
  local m, h = ci3(fr[1], fr[2], fr[3])
  near(P:get(1, 3), m, 1e-6, "pooled mean at the end = the seeds' mean")
  near(P:get(3, 3) - P:get(1, 3), h, 1e-5, "pooled half-width = t(0.975, 2) sd / sqrt 3")
  local v1 = f:attrs("verdicts/C1")
  check(v1.word == rows[1][5] and v1.n_seeds == "3" and v1.seeds == "1,2,3", "verdict C1 stored as printed")
  local md = ci3(diff[1], diff[2], diff[3])
  near(f:read("verdicts/C1/t1/interval"):get(1), md, 1e-6, "C1: mean of end minus step 0 over the seeds")
  f:close()
  for _, p in ipairs{"report.txt", "verdicts.tsv", "sink_fraction.svg", "analysis/sinks.h5", "analysis/alpha0.svg"} do
    check(io.open(out .. "/" .. p) ~= nil, p .. " written")
  end
  -- --rejudge on a copy of the output folder: the same verdicts, byte for byte
  local copy = dir .. "/copy"
  os.execute(("cp -r %s %s"):format(out, copy))
  local msg, rok = sinks_cli("--rejudge --out " .. copy)
  check(rok, "--rejudge on the copy: " .. msg)
  check(slurp(copy .. "/verdicts.tsv") == slurp(out .. "/verdicts.tsv"), "rejudge: verdicts.tsv byte for byte")
  local function vlines(text)
    local l = {}
    for line in text:gmatch("[^\n]+") do
      if line:match("^VERDICT ") or line:match("^RULE ") or line:match("^DESCRIBE ") then l[#l + 1] = line end
    end
    return table.concat(l, "\n")
  end
  local r0, r1 = slurp(out .. "/report.txt"), slurp(copy .. "/report.txt")
  check(#vlines(r0) > 0 and vlines(r1) == vlines(r0), "rejudge: the report's verdict lines byte for byte")
  check(r1 == r0, "rejudge: report.txt byte for byte")
  os.execute("rm -rf " .. dir)
  -- --preset gpu's shape at a tiny size
  local rep2, ok2, out2, dir2 = t.run_probe("sinks", "--preset gpu --steps 2 --checkpoints 1 --length 32 --d-model 32 "
    .. "--seeds 1 --format svg")
  check(ok2, "sinks --preset gpu (tiny) exited non-zero:\n" .. rep2)
  check(rep2:find("d_model 32, 8 layers x 8 heads (8 KV heads) of 64", 1, true) ~= nil, "gpu shape: 8 x 8 heads of 64")
  check(io.open(out2 .. "/sinks_train.h5") ~= nil, "gpu run file written")
  check(select(2, rep2:gsub("| INCONCLUSIVE | ", "")) == 3, "one seed, two steps: every row INCONCLUSIVE")
  os.execute("rm -rf " .. dir2)
end
t.finish(("test_sinks_train (%s)"):format(mode))
