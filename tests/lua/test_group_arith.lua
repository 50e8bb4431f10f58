-- test_group_arith.lua — the group-arithmetic probe: (1) patching a head's
-- hook_z with its own clean value changes nothing (bit-exact), while patching
-- it from another run does change the logits; (2) the corruption used for the
-- copying-head experiment changes exactly the copied fact's answers; (3) the
-- probe labels obey the group laws (the query's symbols are in its group, the
-- true answer is never "already answered": cancellation); (4) helpers against
-- hand-computed values; (5) `mechprobe group_arith --quick` runs end to end,
-- its verdict table parses and agrees with verdicts.tsv, and the HDF5 file
-- and the figures exist. Argument "quick" runs only (5), "unit" all but (5).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check = t.ok
local which = arg[1] or "all"
local exe = arg[-1]
local ga = require "group_arith"
local report = require "group_arith_report"

if which ~= "quick" then
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
  check(math.abs(ga.prob({0, 0}, 1) - 0.5) < 1e-12, "softmax of equal logits")
  check(math.abs(ga.prob({math.log(3), 0}, 0) - 0.75) < 1e-12, "softmax 3:1")
  check(ga.threshold_accuracy({1, 2, 3, 4}, {0, 0, 1, 1}) == 1, "separable along the axis")
  check(ga.threshold_accuracy({1, 2, 3, 4}, {1, 1, 0, 0}) == 1, "separable, reversed")
  check(ga.threshold_accuracy({1, 2, 3, 4}, {0, 1, 0, 1}) == 0.75, "one mistake")
  local steps = ga.checkpoint_steps(1000, 8)
  check(steps[1] == 0 and steps[#steps] == 1000 and #steps == 9, "checkpoint schedule " .. table.concat(steps, ","))
  local best, second = ga.top2(mp.tensor{{0.1, 0.9}, {0.3, -1}})
  check(best.l == 0 and best.h == 1 and second.l == 1 and second.h == 0, "top2 (0-based)")
  local parsed = report.parse_verdicts("x\nVERDICTS\n" .. report.HEADER .. "\na | b | c | yes\nEND VERDICTS\n")
  check(parsed and #parsed == 1 and parsed[1].supported == "yes", "parse_verdicts on a hand-made table")
  check(report.parse_verdicts("VERDICTS\nbad\nEND VERDICTS") == nil, "parse_verdicts rejects a bad header")
  -- identity verdict: L0H0 raises a,b by 0.3 and e by 0.1, L1H1 lowers e by 0.2 and a,b by 0.05: selective;
  -- raising e by 0.4 at L0H0 (more than a,b) or choosing one head for both is not
  local function ident(e00, sl, sh)
    return {dla_query = mp.tensor{{0.3, 0}, {0, -0.05}}, dla_identity = mp.tensor{{e00, 0}, {0, -0.2}},
            promote = {l = 0, h = 0}, suppress = {l = sl, h = sh}}
  end
  local okv, text = report.identity_verdict(ident(0.1, 1, 1))
  check(okv and text == "promote L0H0 a,b +0.30 (e +0.10), lower L1H1 e -0.20 (a,b -0.05)", "selective heads: " .. text)
  check(not report.identity_verdict(ident(0.4, 1, 1)), "a promoter that raises the identity more is not selective")
  check(not report.identity_verdict(ident(0.1, 0, 0)), "one head for both is not two heads")
end

if which ~= "unit" then
  -- bad sizes: exit 2, a message naming the option, no output folder
  for _, c in ipairs{{"--layers 0", "--layers"}, {"--d-model 0", "--d-model"}, {"--lr -1", "--lr"},
                     {"--init-std 0", "--init-std"}, {"--batch 0", "--batch"}, {"--pools 4:0.5,8:0.4", "--pools"},
                     {"--pools 0:0.5", "--pools"}, {"--pools 4:1.5", "--pools"}, {"--pools 4:0.5:0", "--pools"},
                     {"--pools 4:0.5:1.2", "--pools"}, {"--train-k 0", "--train-k"},
                     {"--heads 0", "--heads"}, {"--heads 3", "--heads"}, {"--pools 4:0.5:1:0", "--pools"}, {"--pools 4:0.5:1:2.5", "--pools"},
                     {"--no-curriculum --curriculum", "--no-curriculum"}} do
    local bad = os.tmpname(); os.remove(bad)
    local p = io.popen(("%s group_arith --quick %s --out %s 2>&1"):format(exe, c[1], bad))
    local out = p:read("a")
    local _, _, code = p:close()
    check(code == 2 and out:find(c[2], 1, true) ~= nil, ("%s: exit %s, message %q"):format(c[1], tostring(code), out))
    check(io.open(bad) == nil, c[1] .. ": no output folder")
  end
  -- (5) the quick probe end to end
  local out, ok, dir, root = t.run_probe("group_arith", "--quick --curriculum")
  check(ok, "group_arith --quick exited non-zero:\n" .. out)
  local rows, err = report.parse_verdicts(out)
  check(rows ~= nil, "verdict table parses: " .. tostring(err) .. "\n" .. out)
  rows = rows or {}
  check(#rows >= 14, ("%d verdict rows"):format(#rows))
  local f = io.open(dir .. "/verdicts.tsv")
  check(f ~= nil, "verdicts.tsv written")
  if f then
    local lines = {}
    for line in f:lines() do lines[#lines + 1] = line end
    f:close()
    check(lines[1] == "claim\tpaper\tours\tsupported" and #lines == #rows + 1, "verdicts.tsv has the same rows")
    for i, r in ipairs(rows) do
      check(lines[i + 1] == table.concat({r.claim, r.paper, r.ours, r.supported}, "\t"), "tsv row " .. i)
    end
  end
  check(out:find("max |logit change| = 0\n", 1, true), "the probe's own self-patching check is exact")
  local h5 = mp.h5.open(dir .. "/group_arith.h5")
  for _, name in ipairs{"accuracy/acc", "accuracy/lo", "accuracy/hi", "coverage/cumulative", "copying/ie_exact",
                        "copying/ie_commuted", "copying/ablation_drop", "identity/dla_query", "identity/pc1",
                        "probes/in_group_balanced_accuracy", "probes/answered_balanced_accuracy", "phases/accuracy",
                        "train/loss"} do
    check(h5:has(name), "HDF5 has " .. name)
  end
  -- --curriculum on the quick preset (150 steps, k = 20): 4 distinct facts to step 45 (30%), 8 to 68 (45%,
  -- rounded), 16 to 90, 32 to 120, then a quarter of the contexts from 16 on sequences of 100 facts
  local pool, step = h5:read("train/pool"):totable(), h5:read("train/step"):totable()
  local share, tk = h5:read("train/pool_share"):totable(), h5:read("train/k"):totable()
  local stages_ok = #pool == #step and #pool == 150 and #share == 150 and #tk == 150
  for i = 1, #pool do
    local s = step[i]
    local want = s <= 45 and 4 or s <= 68 and 8 or s <= 90 and 16 or s <= 120 and 32 or 16
    if pool[i] ~= want or math.abs(share[i] - (s <= 120 and 1 or 0.25)) > 1e-6 or tk[i] ~= (s <= 120 and 20 or 100) then
      stages_ok = false
    end
  end
  check(stages_ok, "train/pool, pool_share, k: 4, 8, 16, 32 distinct facts to steps 45, 68, 90, 120, then 16 in a quarter of the contexts at k = 100")
  local acc = h5:read("accuracy/acc")
  check(acc:size(1) == 2 and acc:size(2) == 5, "accuracy is [k, rule]")
  local lo, hi = h5:read("accuracy/lo"), h5:read("accuracy/hi")
  local inside = true
  for i = 1, 2 do for j = 1, 5 do
    local a = acc:get(i, j)
    if not (lo:get(i, j) <= a + 1e-6 and a <= hi:get(i, j) + 1e-6 and a >= 0 and a <= 1) then inside = false end
  end end
  check(inside, "accuracies lie in their bootstrap intervals")
  local cum = h5:read("coverage/cumulative")
  local mono = true
  for i = 1, 2 do for j = 2, 5 do if cum:get(i, j) < cum:get(i, j - 1) then mono = false end end end
  check(mono, "cumulative coverage never decreases")
  h5:close()
  for _, fig in ipairs{"accuracy", "coverage", "patching", "identity_dla", "identity_pca", "probes", "phases"} do
    local g = io.open(("%s/%s.png"):format(dir, fig), "rb")
    check(g ~= nil and g:read(8) == "\137PNG\r\n\26\n", "figure " .. fig .. ".png")
    if g then g:close() end
  end
  os.execute(("rm -rf '%s'"):format(root))
end

t.finish("test_group_arith")
