-- test_group_arith_report.lua — the group-arithmetic probe's verdict rules
-- (probes/lib/group_arith_report.lua) on planted inputs: each of the three
-- outcomes of every rule, a missing precondition naming itself, and the verdict
-- table wiring each row to its own precondition (a planted model with every
-- skill, then without copying, then without identity).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check = t.ok
local ga = require "group_arith"
local report = require "group_arith_report"

-- (6) the rules on planted inputs: each outcome of each
local function rep(v, n) local l = {} for i = 1, n do l[i] = v end return l end
local function mix(p, n) local l = {} for i = 1, n do l[i] = (i <= math.floor(p * n + 0.5)) and 1 or 0 end return l end
local S, N, I = report.SUP, report.NOT, report.INC
-- a precondition that is absent gives INCONCLUSIVE and says which one
local function absent(what, v, t)
  return v == I and t:find("precondition not met", 1, true) ~= nil and t:find(what, 1, true) ~= nil
end
check(report.rule_at_least(mix(0.98, 200), 0.95) == S, "at_least: 98% of 200 against 95%")
check(report.rule_at_least(mix(0.70, 200), 0.95) == N, "at_least: 70% of 200 against 95%")
check(report.rule_at_least(mix(0.90, 20), 0.95) == I, "at_least: 90% of 20 against 95%")
-- held-out generalisation presupposes the training families are solved
local solved, unsolved = mix(0.95, 200), mix(0.2, 200)
check(report.rule_held_out(mix(0.98, 200), solved, 0.9) == S, "held-out: 98%, training solved")
check(report.rule_held_out(mix(0.3, 200), solved, 0.9) == N, "held-out: 30%, training solved")
check(report.rule_held_out(mix(0.9, 20), solved, 0.9) == I, "held-out: 90% of 20")
check(absent("does not solve the training families", report.rule_held_out(mix(0.12, 200), unsolved, 0.9)),
      "held-out: training families unsolved (20%) is INCONCLUSIVE, not NOT SUPPORTED")
check(absent("training families", report.rule_held_out(mix(0.12, 200), mix(0.55, 40), 0.9)),
      "held-out: training 55% of 40 (interval straddles 50%) is INCONCLUSIVE")
local function accs(c, co, id, ca, as, n)
  return {copy = mix(c, n), commute = mix(co, n), identity = mix(id, n), cancel = mix(ca, n), associate = mix(as, n)}
end
local chance = rep(0.125, 200)
check(report.rule_hardest(accs(1, 1, 1, 0.9, 0.5, 200), chance) == S, "hardest: the paper's pattern")
check(report.rule_hardest(accs(1, 1, 1, 0.9, 0.05, 200), chance) == N, "hardest: associate 5% at or below chance, others learned")
check(report.rule_hardest(accs(1, 1, 1, 0.3, 0.5, 200), chance) == N, "hardest: cancel below associate")
check(report.rule_hardest(accs(1, 1, 1, 0.55, 0.5, 40), rep(0.125, 40)) == I, "hardest: cancel 55% vs associate 50% on 40 items")
check(absent("cancel", report.rule_hardest(accs(0.7, 0.6, 0.15, 0.047, 0.031, 200), chance)),
      "hardest: cancel 4.7% (and identity 15%) not above chance 12.5%: INCONCLUSIVE, no order to test")
local function ie(mu, n) local l = {} for i = 1, n do l[i] = mu + 0.05 * ((i % 5) - 2) end return l end
check(report.rule_commuted(ie(0.91, 100), ie(0.48, 100)) == S, "commuted: 0.48 of 0.91 (the paper)")
check(report.rule_commuted(ie(0.9, 100), ie(0.2, 100)) == N, "commuted: 0.2 of 0.9")
check(absent("no copying head", report.rule_commuted(ie(0.05, 100), ie(0.05, 100))),
      "commuted: no copying head (exact 0.05) is INCONCLUSIVE")
local noisy = {}
for i = 1, 30 do noisy[i] = (i % 2 == 0) and 0.9 or 0.0 end
check(report.rule_commuted(ie(0.9, 30), noisy) == I, "commuted: 0.45 of 0.9 with a wide interval")
local function drops(c, o, n) return {copy = mix(c, n), commute = mix(0.8, n), identity = mix(o, n), cancel = mix(0, n),
                                      associate = mix(0, n)} end
local copies, head = mix(0.95, 200), ie(0.9, 100)
check(report.rule_ablation(drops(0.7, 0.0, 200), copies, head) == S, "ablation: copy -70, identity/cancel/associate 0, commute -80 not judged")
check(report.rule_ablation(drops(0.05, 0.0, 200), copies, head) == N, "ablation: copy only -5 (a copying model and head)")
check(report.rule_ablation(drops(0.7, 0.3, 200), copies, head) == N, "ablation: identity also -30")
check(report.rule_ablation(drops(0.25, 0.0, 30), copies, head) == I, "ablation: copy -25 on 30 items")
check(absent("the model does not copy", report.rule_ablation(drops(0.05, 0.0, 200), mix(0.22, 200), ie(0.02, 100))),
      "ablation: the model copies 22%: INCONCLUSIVE, not NOT SUPPORTED")
check(absent("no copying head", report.rule_ablation(drops(0.05, 0.0, 200), copies, ie(0.02, 100))),
      "ablation: the model copies but the ablated head's IE is 0.02: INCONCLUSIVE")
check(report.rule_dedicated(ie(0.91, 100), ie(0.05, 100), copies) == S, "dedicated: 0.91, next 0.05")
check(report.rule_dedicated(ie(0.2, 100), ie(0.13, 100), copies) == N, "dedicated: 0.2, next 0.13 in a model that copies")
check(report.rule_dedicated(ie(0.5, 100), ie(0.05, 100), copies) == I, "dedicated: 0.5 on the line")
check(absent("no copying head to test", report.rule_dedicated(ie(0.02, 100), ie(0.01, 100), mix(0.22, 200))),
      "dedicated: copy accuracy 22%: INCONCLUSIVE")
local function ident(pq, pe, sq, se, same, n)
  return {promote_q = ie(pq, n), promote_e = ie(pe, n), suppress_q = ie(sq, n), suppress_e = ie(se, n), same_head = same}
end
local idok = mix(0.97, 200)
check(report.rule_identity(ident(0.3, 0.1, -0.05, -0.2, false, 100), idok) == S, "identity: selective, two heads")
check(report.rule_identity(ident(0.3, 0.1, -0.05, -0.2, true, 100), idok) == N, "identity: one head does both")
check(report.rule_identity(ident(0.3, 0.4, -0.05, -0.2, false, 100), idok) == N, "identity: the promoter raises e more")
local barely = ident(0.3, 0.29, -0.05, -0.2, false, 100)
for i = 1, 100 do barely.promote_e[i] = 0.29 + ((i % 2 == 0) and 0.4 or -0.4) end   -- mean 0.29, noisy
check(report.rule_identity(barely, idok) == I, "identity: promoter barely selective (a - e = 0.01, noisy)")
check(absent("does not solve identity", report.rule_identity(ident(0.3, 0.4, -0.05, -0.2, true, 100), mix(0.39, 200))),
      "identity: identity accuracy 39%: INCONCLUSIVE even though one head does both")
check(report.rule_prop(0.97, 400, 0.9) == S and report.rule_prop(0.6, 400, 0.9) == N and report.rule_prop(0.9, 50, 0.9) == I,
      "proportion rule: three outcomes")
check(report.rule_pc1(0.97, 400, 0.9, idok) == S and report.rule_pc1(0.6, 400, 0.9, idok) == N
      and report.rule_pc1(0.9, 50, 0.9, idok) == I, "PC1 rule: three outcomes when identity is solved")
check(absent("does not solve identity", report.rule_pc1(0.6, 400, 0.9, mix(0.39, 200))),
      "PC1 rule: identity accuracy 39%: INCONCLUSIVE")
local function kd(d, n) local l = {} for i = 1, n do l[i] = d + ((i % 2 == 0) and 0.02 or -0.02) end return l end
check(report.rule_keeps_up(kd(0.0, 200), mix(0.9, 200), mix(0.9, 200)) == S
      and report.rule_keeps_up(kd(-0.75, 200), mix(0.17, 200), mix(0.92, 200)) == N
      and report.rule_keeps_up({0, 0, -1, 0, 0, 1, -1, 0}, rep(0, 8), rep(0, 8)) == I, "keeps-up rule: three outcomes")
check(report.rule_phases{structure = 1, closure = 2, copy = 3, commute = 3, identity = 4, cancel = 5, associate = 6} == S,
      "phases: all in order")
check(report.rule_phases{structure = 1, closure = 2, copy = 5, commute = 5, identity = 4, cancel = 5, associate = 6} == N,
      "phases: identity before copy")
check(report.rule_phases{structure = 1, closure = 2, copy = 3} == I, "phases: the rest never crossed")
-- the verdict table wires each row to its own precondition: planted statistics
-- of a model that has every skill and the paper's mechanisms, then the same
-- with copying absent (only the copying-head rows turn INCONCLUSIVE) and with
-- identity absent (only the identity-mechanism rows do)
local function planted(copy, idacc)
  local n = 200
  local acc = {}
  for _, pop in ipairs(ga.POPULATIONS) do
    acc[pop] = {}
    for _, k in ipairs{50, 100} do
      local pa = report.PAPER_ACC[k]
      acc[pop][k] = {copy = mix(copy, n), commute = mix(1, n), identity = mix(idacc, n), cancel = mix(pa.cancel, n),
                     associate = mix(pa.associate, n), cancel_natural = mix(pa.cancel, n),
                     associate_natural = mix(pa.associate, n), natural = mix(0.97, n)}
    end
  end
  local ch = {}
  for _, pop in ipairs(ga.POPULATIONS) do
    ch[pop] = {}
    for _, k in ipairs{50, 100} do
      ch[pop][k] = {}
      for _, d in ipairs(ga.DISTS) do ch[pop][k][d] = rep(0.125, n) end
    end
  end
  local top = copy > 0.5 and ie(0.91, 100) or ie(0.02, 100)
  local patch = {top = top, second = ie(0.05, 100), commuted = copy > 0.5 and ie(0.48, 100) or ie(0.01, 100),
                 heads = {"L1H2"}, k = 50}
  local dr = copy > 0.5 and drops(0.7, 0.0, n) or drops(0.02, 0.0, n)
  return {seeds = {1}, k_list = {50, 100}, k_mech = 50, k_patch = 50, pop = "training", acc = acc, chance = ch,
          cov = {[100] = {diff = kd(0, n), model = mix(0.9, n), cov4 = mix(0.9, n)},
                 [50] = {diff = kd(0, n), model = mix(0.9, n), cov4 = mix(0.9, n)}},
          patch = {paper = patch, ours = patch}, drops = dr, ablated_head = {"L1H2"},
          ident = idacc > 0.5 and ident(0.3, 0.1, -0.05, -0.2, false, 100) or ident(0.3, 0.4, -0.05, -0.2, true, 100),
          pc1 = {{v = idacc > 0.5 and 0.97 or 0.6, n = 400}},
          probes = {in_group = {{v = 0.95, n = 400}}, answered = {{v = 0.95, n = 400}}},
          phases = {{structure = 1, closure = 2, copy = 3, commute = 3, identity = 4, cancel = 5, associate = 6}}}
end
local function verdict_of(rows, claim)
  for _, r in ipairs(rows) do if r.claim:find(claim, 1, true) then return r.verdict, r.ours, r.rule end end
end
local COPY_ROWS = {"one dedicated copying head (the paper's", "one dedicated copying head (our",
                   "also serves commuted copies (the paper's", "also serves commuted copies (our", "mean-ablating"}
local IDENT_ROWS = {"identity: one head promotes", "PC1 of the last attention output"}
local all = report.verdicts(planted(1, 1), 200)
local every_rule_states = true
for _, r in ipairs(all) do every_rule_states = every_rule_states and r.rule:find("^precondition: ") ~= nil end
check(#all == 27 and every_rule_states, ("planted paper-like model: %d rows, each rule starts with its precondition"):format(#all))
local sup = true
for _, c in ipairs(COPY_ROWS) do sup = sup and verdict_of(all, c) == S end
for _, c in ipairs(IDENT_ROWS) do sup = sup and verdict_of(all, c) == S end
check(sup and verdict_of(all, "associativity is the hardest") == S and verdict_of(all, "generalises to held-out") == S,
      "planted paper-like model: the copying-head, identity, hardest and held-out rows are SUPPORTED")
local nocopy = report.verdicts(planted(0.22, 1), 200)
local inc = true
for _, c in ipairs(COPY_ROWS) do
  local v, ours = verdict_of(nocopy, c)
  inc = inc and v == I and ours:find("precondition not met", 1, true) ~= nil
end
check(inc, "planted model copying 22%: every copying-head row INCONCLUSIVE by its precondition")
check(verdict_of(nocopy, IDENT_ROWS[1]) == S and verdict_of(nocopy, IDENT_ROWS[2]) == S,
      "planted model copying 22%: the identity rows are still judged (SUPPORTED)")
-- the full run's case: a copying model whose copying head shows in our design
-- only (the paper's design's top head IE 0.02): the ablation row judges our
-- design's head (SUPPORTED here), the paper design's own rows say NOT SUPPORTED /
-- INCONCLUSIVE
local split = planted(1, 1)
split.patch = {paper = {top = ie(0.02, 100), second = ie(0.01, 100), commuted = ie(0.01, 100), heads = {"L0H1"},
                        k = 50},
               ours = split.patch.ours}
local sv = report.verdicts(split, 200)
check(verdict_of(sv, "mean-ablating") == S and verdict_of(sv, COPY_ROWS[1]) == N
      and verdict_of(sv, COPY_ROWS[3]) == I,
      "copying head in our design only: the ablation row judges it (SUPPORTED), the paper design's rows NS / INCONCLUSIVE")
local noident = report.verdicts(planted(1, 0.39), 200)
inc = true
for _, c in ipairs(IDENT_ROWS) do
  local v, ours = verdict_of(noident, c)
  inc = inc and v == I and ours:find("does not solve identity", 1, true) ~= nil
end
check(inc and verdict_of(noident, COPY_ROWS[1]) == S,
      "planted model solving identity 39%: the identity rows INCONCLUSIVE by their precondition, the copying rows judged")
t.finish("test_group_arith_report")
