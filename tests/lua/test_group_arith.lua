-- test_group_arith.lua — the group-arithmetic probe: (1) patching a head's
-- hook_z with its own clean value changes nothing (bit-exact), while patching
-- it from another run does change the logits; (2) the corruption used for our
-- copying-head design changes exactly the copied fact's answers; (3) the
-- probe labels obey the group laws (the query's symbols are in its group, the
-- true answer is never "already answered": cancellation); (4) helpers against
-- hand-computed values; (5) the paper's constructions: the Lua group tables
-- against the C generator's facts, cancel contexts made of the query's row and
-- column only, associate contexts of one triplet that derives the answer, the
-- counterfactual pairs; (6) every verdict rule on planted inputs, each of its
-- three outcomes (in test_group_arith_report.lua); (7) `mechprobe group_arith --quick` end to end: its verdict
-- rows (one seed: INCONCLUSIVE with a reason) parse and agree with
-- verdicts.tsv and report.txt, --rejudge rewrites them byte for byte, the
-- untrained control is in the file (re-checked against the step-0
-- checkpoint), the HDF5 file and the figures exist, and every stored evaluation
-- item re-checks (target from the stored group table and assignment, predicted
-- from the saved model); (8) --preset gpu at a tiny size runs end to end. Argument "quick" runs (7), "gpu" (8),
-- "unit" (1)-(6).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check = t.ok
local which = arg[1] or "all"
local exe = arg[-1]
local ga = require "group_arith"
local report = require "group_arith_report"
local paper = require "group_arith_paper"
local V = require "verdicts"

if which == "unit" or which == "all" then
  -- (1) self-patching on a random model and real algebra sequences
  local m = mp.model.new{d_model = 32, n_layer = 2, n_head = 4, n_kv_head = 2, d_mlp = 64, vocab = 19, ctx = 64, seed = 5}
  local t = mp.tasks.algebra{k = 8, seed = 2, targets = "last"}
  local tokens, _, truth = t:sample(4)
  local other = t:sample(4)
  for l = 0, 1 do
    for h = 0, 3 do
      local diff, scale = ga.self_patch_check(m, tokens, l, h)
      check(diff == 0 and scale > 0, ("self-patch L%dH%d changes the logits by %g"):format(l, h, diff))
    end
  end
  local name = "blocks.0.attn.hook_z"
  local clean = m:forward(tokens)
  local _, oc = m:run_with_cache(other, {names = name})
  local patched = m:run_with_hooks(tokens, {fwd_hooks = {{name, mp.patch(oc[name], {head = 1})}}})
  check(patched:sub(clean):norm() > 1e-4, "patching from another run changes the logits")

  -- (2) corruption of the copied fact (exact and commuted)
  local k = 30
  for _, kind in ipairs{"copy", "commute"} do
    local tk = ga.task({eval_groups = "training"}, k, kind, 7)
    local tok, tr = ga.sample(tk, 6)
    math.randomseed(3)
    local bad = ga.corrupt(tok, tr, k, kind == "commute", math.random)
    for b = 1, 6 do
      local q = tr[b].query
      local fa, fb = q.a, q.b
      if kind == "commute" then fa, fb = q.b, q.a end
      local changed, hits, others_ok = 0, 0, true
      local row, brow = tok[b]:totable(), bad[b]:totable()
      for _, f in ipairs(ga.facts(tok, b, k)) do
        if f.a == fa and f.b == fb then
          hits = hits + 1
          if brow[f.pos + 1] ~= q.answer and brow[f.pos + 1] ~= row[f.pos + 1] then changed = changed + 1 end
        end
      end
      for i = 1, #row do
        local is_copied = false
        for _, f in ipairs(ga.facts(tok, b, k)) do if f.pos + 1 == i and f.a == fa and f.b == fb then is_copied = true end end
        if not is_copied and row[i] ~= brow[i] then others_ok = false end
      end
      check(hits >= 1 and changed == hits, ("%s sample %d: %d copied facts, %d corrupted"):format(kind, b, hits, changed))
      check(others_ok, ("%s sample %d: only the copied answers change"):format(kind, b))
      local same = mp.tasks.algebra_solve(kind, bad[b]:totable(), q.a, q.b)
      check(same ~= q.answer and same >= 0, ("%s sample %d: the corrupted context answers %d, not %d"):format(kind, b, same, q.answer))
    end
  end

  -- (3) probe labels against the group laws and the cancel solver
  local tk = mp.tasks.algebra{k = 60, seed = 9, targets = "last", test_groups = true, require = "cancel"}
  local tok, _, tr = tk:sample(32)
  local cancel_agree = 0
  for b = 1, 32 do
    local q = tr[b].query
    local g, a = ga.probe_labels(tok, b, tr[b], 60)
    check(g[q.a] == 1 and g[q.b] == 1 and g[q.answer] == 1, "query symbols are in the query's group")
    check(a[q.answer] == 0, "cancellation: the answer is never already answered in a shared-slot fact")
    -- with the whole group seen, the cancel solver's answer is the one group symbol not answered
    local left = {}
    for s = 0, 15 do if g[s] == 1 and a[s] == 0 then left[#left + 1] = s end end
    local solved = mp.tasks.algebra_solve("cancel", tok[b]:totable(), q.a, q.b)
    local found = false
    for _, s in ipairs(left) do found = found or s == solved end
    check(solved == q.answer and found, "the cancel solver's answer is an unanswered symbol of the group")
    if #left == 1 then
      check(solved == left[1], ("cancel solver %d vs labels %d"):format(solved, left[1]))
      cancel_agree = cancel_agree + 1
    end
  end
  check(cancel_agree > 0, "some samples have a single uncancelled symbol")

  -- (4) helpers
  check(ga.argmax{0.1, 3, 2} == 1, "argmax is 0-based")
  -- compute: 6 N + 6 n_layer T d a token; N = 1 * (4*2^2 + 2*2*4) = 32 -> (192 + 36) * 10 tokens
  check(ga.flops({n_layer = 1, d_model = 2, d_mlp = 4}, 3, 10) == 2280, "flops by hand")
  check(math.abs(ga.PAPER_FLOPS / 8.576e18 - 1) < 1e-3, "the paper's setup: 50M parameters x 25B tokens, 8.6e18 FLOPs")
  check(math.abs(ga.prob({0, 0}, 1) - 0.5) < 1e-12, "softmax of equal logits")
  check(math.abs(ga.prob({math.log(3), 0}, 0) - 0.75) < 1e-12, "softmax 3:1")
  check(ga.threshold_accuracy({1, 2, 3, 4}, {0, 0, 1, 1}) == 1, "separable along the axis")
  check(ga.threshold_accuracy({1, 2, 3, 4}, {1, 1, 0, 0}) == 1, "separable, reversed")
  check(ga.threshold_accuracy({1, 2, 3, 4}, {0, 1, 0, 1}) == 0.75, "one mistake")
  local steps = ga.checkpoint_steps(1000, 8)
  check(steps[1] == 0 and steps[#steps] == 1000 and #steps == 9, "checkpoint schedule " .. table.concat(steps, ","))
  local best, second = ga.top2(mp.tensor{{0.1, 0.9}, {0.3, -1}})
  check(best.l == 0 and best.h == 1 and second.l == 1 and second.h == 0, "top2 (0-based)")
  -- f:write(..., {int32 = true}) (the /eval datasets): int32 on disk, values kept, a fraction refused
  do
    local path = os.tmpname()
    local f = mp.h5.open(path, "w")
    f:write("ids", mp.tensor{{1, -2, 18}, {2147483520, 0, 5}}, {int32 = true})
    local okw, errw = pcall(f.write, f, "bad", mp.tensor{1, 2.5}, {int32 = true})
    check(not okw and tostring(errw):find("not an int32 integer", 1, true), "int32 write refuses 2.5: " .. tostring(errw))
    check(not f:has("bad"), "nothing written for the refused dataset")
    f:close()
    f = mp.h5.open(path)
    local back = f:read_int("ids")
    check(back[1][2] == -2 and back[1][3] == 18 and back[2][1] == 2147483520, "int32 values read back")
    f:close()
    local p = io.popen(("h5dump -H -d ids '%s' 2>&1"):format(path))
    local hdr = p:read("a"); p:close()
    check(hdr:find("H5T_STD_I32LE", 1, true) ~= nil, "ids is int32 on disk (h5dump -H): " .. hdr)
    os.remove(path)
  end

  -- (5) the paper's constructions
  -- the Lua tables against the C generator: every fact of sequences drawn over one group
  for _, name in ipairs{"C3", "C7", "C10", "D2", "D3", "D5", "Q8", "C2xC4", "C2xC2xC2"} do
    local G = paper.group(name)
    local tk = mp.tasks.algebra{k = 200, groups = {name}, hold_out = "none", seed = 11}
    local tok, _, tr = tk:sample(4)
    local bad = 0
    for b = 1, 4 do
      for _, f in ipairs(ga.facts(tok, b, 200)) do
        local ea, eb, ec = tr[b].symbols[f.a].element, tr[b].symbols[f.b].element, tr[b].symbols[f.c].element
        if G.mul[ea][eb] ~= ec then bad = bad + 1 end
      end
    end
    check(bad == 0 and G.order == #tr[1].assignment[1], ("group %s: the Lua table agrees with the generator's 800 facts (%d differ)"):format(name, bad))
  end
  local k = 40
  for _, pop in ipairs{"training", "held-out"} do
    local tok, tr = paper.construct("cancel", pop, k, 40, 5)
    check(tok:size(1) == 40 and tok:size(2) == 5 * (k + 1), "cancel construction: [n, 5(k+1)] tokens")
    local ok_all, fams = true, {}
    for b = 1, 40 do
      local q, row = tr[b].query, tok[b]:totable()
      local G = paper.group(tr[b].groups[1])
      fams[G.name] = true
      local e0 = tr[b].assignment[1][1]
      local seen, n_lr = {}, 0
      for _, f in ipairs(ga.facts(tok, b, k)) do
        if not ((f.a == q.a and f.b ~= q.b) or (f.b == q.b and f.a ~= q.a)) then ok_all = false end   -- row or column only
        if f.a == q.b and f.b == q.a then ok_all = false end                                          -- never b a
        if not seen[f.a * 16 + f.b] then seen[f.a * 16 + f.b] = true; n_lr = n_lr + 1 end
      end
      if n_lr ~= 2 * (G.order - 1) then ok_all = false end                  -- every row/column fact present
      if q.a == e0 or q.b == e0 then ok_all = false end                     -- no identity in the query
      if row[#row] ~= 16 or row[#row - 2] ~= q.a or row[#row - 1] ~= q.b then ok_all = false end
      if mp.tasks.algebra_solve("cancel", row, q.a, q.b) ~= q.answer then ok_all = false end
    end
    check(ok_all, pop .. " cancel contexts: the query's row and column only, all of them, no identity, the cancel solver answers")
    local n_fam = 0
    for _ in pairs(fams) do n_fam = n_fam + 1 end
    check(n_fam >= (pop == "training" and 6 or 2), pop .. ": several families drawn")
    tok, tr = paper.construct("associate", pop, k, 40, 6)
    ok_all = true
    for b = 1, 40 do
      local q, row = tr[b].query, tok[b]:totable()
      local distinct = {}
      local nd = 0
      for _, f in ipairs(ga.facts(tok, b, k)) do
        if (f.a == q.a and f.b == q.b) or (f.a == q.b and f.b == q.a) then ok_all = false end
        if not distinct[f.a * 16 + f.b] then distinct[f.a * 16 + f.b] = true; nd = nd + 1 end
      end
      if nd > 3 then ok_all = false end
      if mp.tasks.algebra_solve("associate", row, q.a, q.b) ~= q.answer then ok_all = false end
      if not tr[b].rules.associate then ok_all = false end
    end
    check(ok_all, pop .. " associate contexts: one triplet (<= 3 distinct facts, not a b / b a), the associate solver derives the answer")
  end
  -- triplets of C5 for (1, 2): every triplet derives 1*2 = 3 by form 1 or 2
  local G5 = paper.group("C5")
  local trip = paper.triplets(G5, 1, 2)
  local tri_ok = #trip > 0
  for _, t3 in ipairs(trip) do
    local p1, p2, p3 = t3[1], t3[2], t3[3]
    local m = G5.mul
    local f1 = p1[1] == 1 and m[p1[2]][p2[2]] == 2 and p2[1] == p1[2] and m[m[1][p1[2]]][p2[2]] == 3
    local f2 = m[p2[1]][p2[2]] == 1 and p1[2] == 2 and m[p3[1]][m[p1[1]][2]] == 3
    if not (f1 or f2) then tri_ok = false end
  end
  check(tri_ok, ("%d associative triplets of 1*2 in C5, each a derivation"):format(#trip))
  -- counterfactual pairs: other answer and other query pair, each base once
  local src = {{query = {a = 1, b = 2, answer = 3}}, {query = {a = 4, b = 5, answer = 6}}}
  local base = {{query = {a = 1, b = 2, answer = 7}}, {query = {a = 8, b = 9, answer = 3}}, {query = {a = 8, b = 9, answer = 1}}}
  local idx = paper.counterfactual_pairs(src, base)
  check(idx and idx[1] == 3 and idx[2] == 1, "counterfactual pairs skip same query / same answer and use each base once")
  check(paper.counterfactual_pairs(src, {base[1]}) == nil, "counterfactual pairs: too few bases is an error")
  -- (6) every verdict rule on planted inputs: test_group_arith_report.lua
end

if which == "quick" or which == "all" then
  -- bad sizes: exit 2, a message naming the option, no output folder
  for _, c in ipairs{{"--layers 0", "--layers"}, {"--d-model 0", "--d-model"}, {"--lr -1", "--lr"},
                     {"--init-std 0", "--init-std"}, {"--batch 0", "--batch"}, {"--pools 4:0.5,8:0.4", "--pools"},
                     {"--pools 0:0.5", "--pools"}, {"--pools 4:1.5", "--pools"}, {"--pools 4:0.5:0", "--pools"},
                     {"--pools 4:0.5:1.2", "--pools"}, {"--train-k 0", "--train-k"},
                     {"--heads 0", "--heads"}, {"--heads 3", "--heads"}, {"--pools 4:0.5:1:0", "--pools"}, {"--pools 4:0.5:1:2.5", "--pools"},
                     {"--no-curriculum --curriculum", "--no-curriculum"}, {"--n-eval 2", "--n-eval"},
                     {"--preset tpu", "--preset"}, {"--preset gpu", "--preset"},
                     {"--seeds 1,2,1", "--seeds: seed 1 given twice"}} do
    local bad = os.tmpname(); os.remove(bad)
    local p = io.popen(("%s group_arith --quick %s --out %s 2>&1"):format(exe, c[1], bad))
    local out = p:read("a")
    local _, _, code = p:close()
    check(code == 2 and out:find(c[2], 1, true) ~= nil, ("%s: exit %s, message %q"):format(c[1], tostring(code), out))
    check(io.open(bad) == nil, c[1] .. ": no output folder")
  end
  -- (7) the quick probe end to end
  local out, ok, dir, root = t.run_probe("group_arith", "--quick --curriculum")
  check(ok, "group_arith --quick exited non-zero:\n" .. out)
  local rows = V.parse(out)
  check(#rows == 23 and #V.problems(rows) == 0, ("%d verdict rows in the engine's form: %s"):format(#rows,
    table.concat(V.problems(rows), "; ")))
  for _, r in ipairs(rows) do
    check(r[5] == V.I and V.reasons[r[6]], ("%s: one seed is INCONCLUSIVE with a reason (%s, %s)"):format(r[1],
      tostring(r[5]), tostring(r[6])))
  end
  local read = t.read_file
  local tsv, rep = read(dir .. "/verdicts.tsv"), read(dir .. "/report.txt")
  check(tsv ~= nil and rep ~= nil, "verdicts.tsv and report.txt written")
  if tsv and rep then
    local lines = {}
    for line in tsv:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
    check(lines[1] == table.concat(V.COLUMNS, "\t") and #lines == #rows + 1, "verdicts.tsv: the engine's columns, the same rows")
    for i, r in ipairs(rows) do
      local c = {}
      for col in (lines[i + 1] .. "\t"):gmatch("([^\t]*)\t") do c[#c + 1] = col end
      check(c[1] == r[1] and c[8] == "1" and c[15] == r[5], "tsv row " .. i .. ": id, the seed, the word")
    end
    local rrows, same = V.parse(rep), 0
    for i, r in ipairs(rrows) do if rows[i] and r.line == rows[i].line then same = same + 1 end end
    check(#rrows == #rows and same == #rows, "report.txt holds the printed verdict rows")
    -- --rejudge: the same verdicts from the file alone, byte for byte
    local p = io.popen(("%s group_arith --rejudge --out %s 2>&1"):format(exe, dir))
    local rj = p:read("a")
    check(p:close(), "--rejudge exited 0:\n" .. rj)
    check(read(dir .. "/verdicts.tsv") == tsv and read(dir .. "/report.txt") == rep,
      "--rejudge rewrites verdicts.tsv and report.txt byte for byte")
    -- a run file made before the control existed (every group but /control and
    -- /verdicts, copied with h5copy): --rejudge refuses it by name, --control
    -- computes the control from the step-0 checkpoint, the same as the run's
    local old = root .. "/old"
    mp.mkdir(old .. "/checkpoints")
    os.execute(("cp '%s/checkpoints/step_000000.h5' '%s/checkpoints/'"):format(dir, old))
    local src = mp.h5.open(dir .. "/group_arith.h5")
    local groups = src:list("/")
    src:close()
    local copied = true
    for _, g in ipairs(groups) do
      if g ~= "control" and g ~= "verdicts" then
        copied = os.execute(("h5copy -i '%s/group_arith.h5' -o '%s/group_arith.h5' -s '/%s' -d '/%s' 2>&1"):format(
          dir, old, g, g)) and copied
      end
    end
    if copied then
      local of = mp.h5.open(old .. "/group_arith.h5", "r+")
      of:set_attr("/", "format", "mechprobe.group_arith")
      of:close()
      local p2 = io.popen(("%s group_arith --rejudge --out %s 2>&1"):format(exe, old))
      local msg = p2:read("a")
      check(not p2:close() and msg:find(old .. "/group_arith.h5: no /control/untrained", 1, true)
        and msg:find("--control", 1, true), "--rejudge without the control names the file and --control:\n" .. msg)
      check(read(old .. "/verdicts.tsv") == nil, "nothing written without the control")
      p2 = io.popen(("%s group_arith --control --out %s 2>&1"):format(exe, old))
      msg = p2:read("a")
      check(p2:close() and msg:find("/control/untrained from", 1, true), "--control computes it:\n" .. msg)
      local a, b = mp.h5.open(dir .. "/group_arith.h5"), mp.h5.open(old .. "/group_arith.h5")
      local same = true
      for _, pop in ipairs(ga.POPULATIONS) do
        for _, d in ipairs(ga.DISTS) do
          local n = ("control/untrained/%s/%s_k100/predicted"):format(pop, d)
          if table.concat(a:read_int(n), ",") ~= table.concat(b:read_int(n), ",") then same = false end
        end
      end
      a:close(); b:close()
      check(same, "--control's untrained predictions equal the run's own")
      p2 = io.popen(("%s group_arith --rejudge --out %s 2>&1"):format(exe, old))
      msg = p2:read("a")
      check(p2:close() and read(old .. "/verdicts.tsv") == tsv, "then --rejudge gives the run's verdicts.tsv:\n" .. msg)
    else
      io.write("h5copy failed: the --control case is skipped\n")
    end
  end
  check(out:find("max |logit change| = 0\n", 1, true), "the probe's own self-patching check is exact")
  -- quick --curriculum: 120 steps of 8 sequences of 105 tokens, then 30 steps of 2 of 505 (k = 100): 131,100 tokens
  check(out:find("compute: 1.31e+05 training tokens", 1, true) ~= nil, "the compute line counts the training tokens")
  local h5 = mp.h5.open(dir .. "/group_arith.h5")
  for _, name in ipairs{"accuracy/training/acc", "accuracy/held-out/acc", "accuracy/training/lo", "coverage/cumulative",
                        "copying/paper/ie_exact", "copying/paper/ie_commuted", "copying/ours/ie_exact",
                        "copying/ablation_drop", "identity/dla_query", "identity/pc1",
                        "probes/in_group_balanced_accuracy", "probes/answered_balanced_accuracy", "phases/accuracy",
                        "train/loss", "eval/training/groups", "eval/held-out/groups"} do
    check(h5:has(name), "HDF5 has " .. name)
  end
  -- --curriculum on the quick preset (150 steps, k = 20): 4 distinct facts to step 45 (30%), 8 to 68 (45%,
  -- rounded), 16 to 90, 32 to 120, then a quarter of the contexts from 16 on sequences of 100 facts
  local pool, step = h5:read("train/pool"):totable(), h5:read("train/step"):totable()
  local share, tk = h5:read("train/pool_share"):totable(), h5:read("train/k"):totable()
  local stages_ok = #pool == #step and #pool == 150 and #share == 150 and #tk == 150
  for i = 1, #pool do
    local st = step[i]
    local want = st <= 45 and 4 or st <= 68 and 8 or st <= 90 and 16 or st <= 120 and 32 or 16
    if pool[i] ~= want or math.abs(share[i] - (st <= 120 and 1 or 0.25)) > 1e-6 or tk[i] ~= (st <= 120 and 20 or 100) then
      stages_ok = false
    end
  end
  check(stages_ok, "train/pool, pool_share, k: 4, 8, 16, 32 distinct facts to steps 45, 68, 90, 120, then 16 in a quarter of the contexts at k = 100")
  local acc = h5:read("accuracy/training/acc")
  check(acc:size(1) == 2 and acc:size(2) == #ga.DISTS, "accuracy is [k, distribution]")
  local lo, hi = h5:read("accuracy/training/lo"), h5:read("accuracy/training/hi")
  local inside = true
  for i = 1, 2 do for j = 1, #ga.DISTS do
    local a = acc:get(i, j)
    if not (lo:get(i, j) <= a + 1e-6 and a <= hi:get(i, j) + 1e-6 and a >= 0 and a <= 1) then inside = false end
  end end
  check(inside, "accuracies lie in their bootstrap intervals")
  local cum = h5:read("coverage/cumulative")
  local mono = true
  for i = 1, 2 do for j = 2, 5 do if cum:get(i, j) < cum:get(i, j - 1) then mono = false end end end
  check(mono, "cumulative coverage never decreases")
  -- /eval re-checked from the file alone: the target from the stored group table
  -- and assignment (tokens -> elements -> product -> token), the prediction by
  -- running the saved model on the stored tokens; the accuracy from both
  local model = mp.load(dir .. "/model.h5")
  local cells = 0
  for pi, pop in ipairs{"training", "held-out"} do
    local names = {}
    for nm in h5:attrs("eval/" .. pop .. "/groups").names:gmatch("[^,]+") do names[#names + 1] = nm end
    local tables = h5:read_int("eval/" .. pop .. "/groups")
    for ki, kk in ipairs{50, 100} do
      for di, d in ipairs(ga.DISTS) do
        local base = ("eval/%s/%s_k%d/"):format(pop, d, kk)
        local tokens = h5:read_int(base .. "tokens")
        local qpos, target = h5:read_int(base .. "query_pos"), h5:read_int(base .. "target")
        local pred, grp, asg = h5:read_int(base .. "predicted"), h5:read_int(base .. "group"), h5:read_int(base .. "assignment")
        local bad_t, right = 0, 0
        for b = 1, #tokens do
          local row, qp = tokens[b], qpos[b]
          local a, bb = row[qp - 1], row[qp]        -- 1-based: the '=' is row[qp + 1]
          local elem = {}
          for e, sym in ipairs(asg[b]) do if sym >= 0 then elem[sym] = e - 1 end end
          local tbl = tables[grp[b] + 1]
          local want = (row[qp + 1] == 16 and elem[a] and elem[bb]) and asg[b][tbl[elem[a] + 1][elem[bb] + 1] + 1] or -1
          if want ~= target[b] then bad_t = bad_t + 1 end
          if pred[b] == target[b] then right = right + 1 end
        end
        check(#tokens == 24 and bad_t == 0, ("%s: %d of %d targets differ from table[elem(a)][elem(b)]"):format(base, bad_t, #tokens))
        local stored = h5:read("accuracy/" .. pop .. "/acc"):get(ki, di)
        check(math.abs(right / #tokens - stored) < 1e-6, base .. ": predicted == target gives the stored accuracy")
        if di <= 2 then   -- the model's argmax on the stored tokens, a few cells
          local tt = mp.tensor(tokens)
          local lg = model:forward(tt, {logits = "last"}):totable()
          local same = 0
          for b, row in ipairs(lg) do if ga.argmax(row) == pred[b] then same = same + 1 end end
          check(same == #lg, ("%s: the saved model's argmax equals predicted on %d of %d"):format(base, same, #lg))
        end
        cells = cells + 1
      end
    end
  end
  check(cells == 2 * 2 * #ga.DISTS, "every population x k x distribution stored under /eval")
  model:close()
  -- the untrained control: the step-0 checkpoint's argmax on the same stored tokens
  check(h5:attrs("control/untrained").checkpoint == "checkpoints/step_000000.h5", "the control names its checkpoint")
  local m0 = mp.load(dir .. "/checkpoints/step_000000.h5")
  local base = "eval/training/copy_k50/"
  local lg = m0:forward(mp.tensor(h5:read_int(base .. "tokens")), {logits = "last"}):totable()
  local up, same = h5:read_int("control/untrained/training/copy_k50/predicted"), 0
  for b, row in ipairs(lg) do if ga.argmax(row) == up[b] then same = same + 1 end end
  check(same == #lg and #lg == 24, ("the untrained control's predictions re-check on %d of %d"):format(same, #lg))
  m0:close()
  local vf = h5:attrs("verdicts/C2")
  check(vf.word == V.I and vf.seeds == "1", "/verdicts/C2 in the one seed's run file")
  h5:close()
  for _, fig in ipairs{"accuracy", "coverage", "patching", "identity_dla", "identity_pca", "probes", "phases"} do
    local g = io.open(("%s/%s.png"):format(dir, fig), "rb")
    check(g ~= nil and g:read(8) == "\137PNG\r\n\26\n", "figure " .. fig .. ".png")
    if g then g:close() end
  end
  os.execute(("rm -rf '%s'"):format(root))
end

if which == "gpu" or which == "all" then
  -- (8) the GPU preset's shape (4 layers x 8 heads, k = 200 for the paper-design patching,
  -- positions for 1005 tokens) at a tiny width and step count, end to end
  local out, ok, dir, root = t.run_probe("group_arith", "--preset gpu --steps 2 --batch 2 --d-model 32 --heads 8 --n-eval 4")
  check(ok, "group_arith --preset gpu (tiny) exited non-zero:\n" .. out)
  local rows = V.parse(out)
  check(#rows == 23 and #V.problems(rows) == 0, ("gpu preset: %d verdict rows"):format(#rows))
  check(out:find("group_arith (gpu): d_model=32 n_layer=4 n_head=8", 1, true) ~= nil, "gpu preset: 4 layers x 8 heads")
  local h5 = mp.h5.open(dir .. "/group_arith.h5")
  check(h5:attrs("copying/paper").k == 200 and h5:read("copying/paper/ie_exact"):size(2) == 8, "gpu preset: paper-design patching at k = 200 over 8 heads")
  h5:close()
  local m = mp.load(dir .. "/model.h5")
  check(m.config.ctx >= 1005, "gpu preset: positions for k = 200 facts")
  m:close()
  os.execute(("rm -rf '%s'"):format(root))
end

t.finish("test_group_arith")
