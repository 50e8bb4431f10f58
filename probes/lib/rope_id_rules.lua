-- rope_id_rules.lua — the verdict rules of the rope_id probe (issue 21) as pure
-- functions of the numbers each needs (per-head or per-seed values, the
-- preconditions), so that every rule can be unit-tested on planted inputs
-- (tests/lua/test_rope_id.lua, mode "unit"). Each rule returns one row
--   {id, claim, paper, ours, word, rule, n, seeds, lo, hi}
-- word: SUPPORTED, NOT SUPPORTED or INCONCLUSIVE; INCONCLUSIVE whenever the
-- claim's precondition is absent (no sink head, no RoPE-ID band, a saturated
-- quantity, too few seeds) or the 95% interval of the quantity the rule reads
-- straddles its threshold. [lo, hi] is that interval, n what it is over.
--
--   local rules = require "rope_id_rules"
--   local row = rules.C1{ratio_rot = {...}, ratio_pre = {...}, seeds = 3, T = 256, L = 64}
--   rules.band_octaves(L)     -- octaves of RoPE-ID's rotating band at training length L
local M = {}

local S, N, I = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
M.MIN_SEEDS = 3          -- loss and accuracy rows: fewer seeds -> INCONCLUSIVE
M.MIN_OCTAVES = 2        -- RoPE-ID's band must span at least this many octaves at L

-- 95% t-interval of a list (mirror_rules' Student quantiles): mean, lo, hi;
-- fewer than 2 values give an infinite interval.
M.mean_ci = require("mirror_rules").mean_ci

-- Octaves of RoPE-ID's (and high_freq's) rotating band at training length L:
-- its frequencies run from one turn per 32 tokens to two turns per L
-- (runtime/pos.c), periods 32 .. L/2, so log2(L/64) octaves (0 when L <= 64).
function M.band_octaves(L) return math.max(0, math.log(L / 64, 2)) end

-- The interval [lo, hi] against a threshold x: "above" (lo > x), "below" (hi < x) or nil (straddles).
local function side(lo, hi, x)
  if lo > x then return "above" end
  if hi < x then return "below" end
  return nil
end

local function row(id, claim, paper, ours, word, rule, n, seeds, lo, hi)
  return {id = id, claim = claim, paper = paper, ours = ours, word = word, rule = rule, n = n, seeds = seeds,
          lo = lo, hi = hi}
end

-- per-head (or per-seed) ratios a[i] / b[i]
function M.ratios(a, b)
  local r = {}
  for i = 1, #a do r[i] = a[i] / b[i] end
  return r
end

-- The mean and 95% t-interval with the seed as the unit: values[i] belongs to
-- seed seed_of[i]; each seed's mean over its entries (heads) is one value, the
-- mean and interval are over those (the heads of one model are not independent
-- replicates: pooled as units they give intervals far too narrow — on the
-- medium run, C5's retention 0.578 [0.497, 0.660] over 14 heads against
-- 0.594 [0.244, 0.945] over 3 seeds). One seed: no interval. Without seed_of
-- every value is its own unit (planted unit inputs). Returns mean, lo, hi, seeds.
function M.seed_ci(values, seed_of)
  if not seed_of then
    local m, lo, hi = M.mean_ci(values)
    return m, lo, hi, #values
  end
  local sum, cnt, order = {}, {}, {}
  for i, v in ipairs(values) do
    local s = seed_of[i]
    if not sum[s] then sum[s], cnt[s], order[#order + 1] = 0, 0, s end
    sum[s], cnt[s] = sum[s] + v, cnt[s] + 1
  end
  local means = {}
  for k, s in ipairs(order) do means[k] = sum[s] / cnt[s] end
  local m, lo, hi = M.mean_ci(means)
  return m, lo, hi, #order
end

-- "n = 12 heads in 3 seeds, interval over seed means" / "n = 12 heads"
local function units(n, x, ns)
  if x then return ("n = %d heads in %d seeds, interval over the seed means"):format(n, ns) end
  return ("n = %d heads"):format(n)
end

local function ci_text(m, lo, hi)
  if lo == -math.huge then return ("%.3f [no interval]"):format(m) end
  return ("%.3f [%.3f, %.3f]"):format(m, lo, hi)
end
M.ci_text = ci_text

-- C1: past L, the keys a RoPE query sees rotate into angles unseen in training,
-- so the stable rank of the prefix keys (in the query's frame) rises.
-- x.ratio_rot[i]: per head (and seed) srank(keys of [0, T)) / srank(keys of [0, L)),
-- rotated keys (hook_rot_k); x.ratio_pre[i]: the same for the pre-rotation keys
-- (hook_k, the control). The rule reads the excess ratio_rot / ratio_pre.
function M.C1(x)
  local e = M.ratios(x.ratio_rot, x.ratio_pre)
  local m, lo, hi, ns = M.seed_ci(e, x.seed_of)
  local mr = M.mean_ci(x.ratio_rot)
  local mp_ = M.mean_ci(x.ratio_pre)
  local word = ({above = S, below = N})[side(lo, hi, 1.10) or ""] or I
  return row("C1", "past L, the keys a RoPE query sees smear: prefix key stable rank rises",
    "paper: key clusters smear past L (RoPE; figure no. unverified)",
    ("RoPE prefix srank [0,%d)/[0,%d): rotated x%.2f, pre-rotation x%.2f; excess %s (%s; %d seeds)")
      :format(x.T, x.L, mr, mp_, ci_text(m, lo, hi), units(#e, x.seed_of, ns), x.seeds),
    word, ("RoPE's stable rank of the prefix keys [0, T) over [0, L) (query frame, T = %d), divided by the same ratio "
      .. "of the pre-rotation keys, per head, averaged per seed: SUPPORTED if the 95%% interval over the seeds is "
      .. "above 1.10, NOT SUPPORTED if below, else INCONCLUSIVE (one seed: no interval)"):format(x.T),
    #e, x.seeds, lo, hi)
end

-- C2: RoPE-ID's prefix keys do NOT smear past L (the other half of the paper's
-- claim; C1 is RoPE's half). The sigma1 share of the keys is exactly 1 / stable
-- rank, so judging it beside C1 would repeat C1; C2 reads RoPE-ID's excess instead.
-- x.ratio_rot / x.ratio_pre: per RoPE-ID head (and seed) srank([0, T)) / srank([0, L))
-- of the rotated / pre-rotation keys; x.octaves: RoPE-ID's band at L (precondition:
-- >= MIN_OCTAVES, else RoPE-ID is mostly NoPE and the row cannot test it);
-- x.cos_L, x.cos_T (optional): RoPE's mean q/k centroid cosine of the prefix at L and T (reported).
function M.C2(x)
  local e = M.ratios(x.ratio_rot, x.ratio_pre)
  local m, lo, hi, ns = M.seed_ci(e, x.seed_of)
  local cos = x.cos_L and ("; RoPE q/k centroid cos %.2f -> %.2f"):format(x.cos_L, x.cos_T) or ""
  local rule = ("precondition: RoPE-ID's band spans >= %d octaves at L, else INCONCLUSIVE; RoPE-ID's stable rank of "
    .. "the prefix keys [0, T) over [0, L) (query frame, T = %d), divided by the same ratio of its pre-rotation keys, "
    .. "per head, averaged per seed: SUPPORTED if the 95%% interval over the seeds is below 1.10, NOT SUPPORTED if "
    .. "above, else INCONCLUSIVE") :format(M.MIN_OCTAVES, x.T)
  local ours = ("RoPE-ID prefix srank [0,%d)/[0,%d) over control: %s (%s; %d seeds)%s")
    :format(x.T, x.L, ci_text(m, lo, hi), units(#e, x.seed_of, ns), x.seeds, cos)
  local word
  if (x.octaves or 0) < M.MIN_OCTAVES then
    word = I
    ours = ("no RoPE-ID band: %.1f octaves at L = %d; "):format(x.octaves or 0, x.L) .. ours
  else
    word = ({below = S, above = N})[side(lo, hi, 1.10) or ""] or I
  end
  return row("C2", "past L, RoPE-ID's prefix keys keep their geometry (no smear)",
    "paper: RoPE-ID keeps the key clusters past L", ours, word, rule, #e, x.seeds, lo, hi)
end

-- C3: past L, some q.k turn positive under RoPE (sink heads only).
-- x.pos_in[i], x.pos_past[i]: per RoPE sink head (and seed) the share of queries whose
-- largest q.k over keys 1..t is positive, inside / past L. No sink head: INCONCLUSIVE;
-- inside share already >= 0.95 (no room for the rise): INCONCLUSIVE.
function M.C3(x)
  local n = #x.pos_in
  local rule = "RoPE sink heads (1st-token attention > eps inside L) only: the share of queries whose largest "
    .. "q.k (keys after the first) is positive, past L minus inside L, per head, averaged per seed: SUPPORTED if "
    .. "the 95% interval over the seeds is above 0.05, NOT SUPPORTED if below; INCONCLUSIVE without sink heads, "
    .. "with the share inside L >= 0.95 (saturated), or when the interval straddles 0.05 (one seed: no interval)"
  local claim, paper = "past L, some q.k turn positive under RoPE (sink heads)",
    "paper: sink heads' q.k < 0 inside L, > 0 past"
  if n == 0 then
    return row("C3", claim, paper, ("no RoPE sink head (%d seeds)"):format(x.seeds), I, rule, 0, x.seeds, 0 / 0, 0 / 0)
  end
  local d = {}
  for i = 1, n do d[i] = x.pos_past[i] - x.pos_in[i] end
  local m, lo, hi, ns = M.seed_ci(d, x.seed_of)
  local min = M.mean_ci(x.pos_in)
  local word = ({above = S, below = N})[side(lo, hi, 0.05) or ""] or I
  if min >= 0.95 then word = I end
  return row("C3", claim, paper,
    ("%d sink heads: q.k>0 share inside %.2f; past - inside %s (%s; %d seeds)"):format(n, min, ci_text(m, lo, hi),
      units(n, x.seed_of, ns), x.seeds),
    word, rule, n, x.seeds, lo, hi)
end

-- C4: the sink fails past L under RoPE. x.retention[i]: per RoPE sink head (and
-- seed) first-token attention past L / inside L.
function M.C4(x)
  local n = #x.retention
  local rule = "RoPE sink heads: first-token attention past L over inside L, per head, averaged per seed: "
    .. "SUPPORTED if the 95% interval over the seeds is below 0.67, NOT SUPPORTED if above; INCONCLUSIVE without "
    .. "sink heads or when it straddles 0.67 (one seed: no interval)"
  local claim, paper = "the sink fails past L under RoPE", "paper: sink attention collapses past L"
  if n == 0 then
    return row("C4", claim, paper, ("no RoPE sink head (best 1st-token attention %.2f; %d seeds)"):format(x.best or 0 / 0, x.seeds), I,
      rule, 0, x.seeds, 0 / 0, 0 / 0)
  end
  local m, lo, hi, ns = M.seed_ci(x.retention, x.seed_of)
  return row("C4", claim, paper, ("%d sink heads keep %s (%s; %d seeds)"):format(n, ci_text(m, lo, hi),
      units(n, x.seed_of, ns), x.seeds),
    ({below = S, above = N})[side(lo, hi, 0.67) or ""] or I, rule, n, x.seeds, lo, hi)
end

-- C5: RoPE-ID keeps the clusters and the sink past L. x.octaves: its band at L;
-- x.retention[i]: per RoPE-ID sink head first-token retention; x.srank_excess[i]:
-- per RoPE-ID head its C1 excess ratio (prefix srank rise over the control).
function M.C5(x)
  local rule = ("precondition: RoPE-ID's band spans >= %d octaves at L and RoPE-ID has sink heads, else "
    .. "INCONCLUSIVE; per head, averaged per seed, 95%% intervals over the seeds: SUPPORTED if the sink heads' "
    .. "retention interval is above 0.8 and the prefix stable rank excess interval (as C1) below 1.10; NOT "
    .. "SUPPORTED if retention is below 0.8 or the excess above 1.10; else INCONCLUSIVE"):format(M.MIN_OCTAVES)
  local claim, paper = "RoPE-ID keeps the clusters and the sink past L",
    "paper: RoPE-ID keeps clusters and sink"
  local me, elo, ehi = M.seed_ci(x.srank_excess, x.excess_seed)
  local stext = ("srank excess %s (%d seeds)"):format(ci_text(me, elo, ehi), x.seeds)
  if x.octaves < M.MIN_OCTAVES then
    return row("C5", claim, paper, ("no RoPE-ID band: %.1f octaves at L = %d; %s"):format(x.octaves, x.L, stext), I,
      rule, #x.srank_excess, x.seeds, elo, ehi)
  end
  local n = #x.retention
  if n == 0 then
    return row("C5", claim, paper, ("no RoPE-ID sink head; %s"):format(stext), I, rule, 0, x.seeds, elo, ehi)
  end
  local mr, rlo, rhi, ns = M.seed_ci(x.retention, x.retention_seed)
  local rs, es = side(rlo, rhi, 0.8), side(elo, ehi, 1.10)
  local word = I
  if rs == "below" or es == "above" then word = N elseif rs == "above" and es == "below" then word = S end
  return row("C5", claim, paper,
    ("%d sink heads keep %s (%s); %s"):format(n, ci_text(mr, rlo, rhi), units(n, x.retention_seed, ns), stext),
    word, rule, n,
    x.seeds, rlo, rhi)
end

-- C6 (and further rows, one per retrieval task): RoPE-ID generalises better
-- than RoPE on retrieval at 2L. x.rope[s], x.id[s]: per-seed accuracy at 2L;
-- x.rope_L[s], x.id_L[s] (optional): at L; x.chance (default 0): the task's
-- chance level; x.task names it; x.octaves the band; x.row the id (default C6).
function M.C6(x)
  local ns = #x.rope
  local chance = x.chance or 0
  local d, ra, ia, rl, il = {}, 0, 0, 0, 0
  for s = 1, ns do
    d[s] = x.id[s] - x.rope[s]; ra = ra + x.rope[s] / ns; ia = ia + x.id[s] / ns
    rl = rl + (x.rope_L and x.rope_L[s] or 1) / ns; il = il + (x.id_L and x.id_L[s] or 1) / ns
  end
  local m, lo, hi = M.mean_ci(d)
  local rule = ("%s, chance %.3f. Precondition: >= %d seeds, RoPE-ID's band >= %d octaves at L, both models learned "
    .. "the task at L (mean accuracy at L >= chance + 0.1) and not both >= 0.95 at 2L (nothing to separate), else "
    .. "INCONCLUSIVE; RoPE-ID minus RoPE accuracy at 2L per seed: SUPPORTED if its 95%% interval is above 0.05, NOT "
    .. "SUPPORTED if below, else INCONCLUSIVE"):format(x.task, chance, M.MIN_SEEDS, M.MIN_OCTAVES)
  local word = ({above = S, below = N})[side(lo, hi, 0.05) or ""] or I
  local learned = rl >= chance + 0.1 and il >= chance + 0.1
  if ns < M.MIN_SEEDS or x.octaves < M.MIN_OCTAVES or not learned or (ra >= 0.95 and ia >= 0.95) then word = I end
  return row(x.row or "C6", ("RoPE-ID generalises better than RoPE on retrieval at 2x L (%s)"):format(x.task),
    "1B RULER at 2x: RoPE 0.01, RoPE-ID 35.64",
    ("%s at %d: RoPE %.3f, RoPE-ID %.3f (at L: %.2f, %.2f); difference %s (%d seeds, band %.1f oct.)"):format(x.task,
      x.T, ra, ia, rl, il, ci_text(m, lo, hi), ns, x.octaves),
    word, rule, ns, ns, lo, hi)
end

-- C7: RoPE-ID's text loss past L degrades less than RoPE's. x.rise_rope[s],
-- x.rise_id[s]: per seed the loss past L minus inside L.
function M.C7(x)
  local ns = #x.rise_rope
  local d, rr, ri = {}, 0, 0
  for s = 1, ns do d[s] = x.rise_rope[s] - x.rise_id[s]; rr = rr + x.rise_rope[s] / ns; ri = ri + x.rise_id[s] / ns end
  local m, lo, hi = M.mean_ci(d)
  local rule = ("precondition: >= %d seeds and RoPE-ID's band >= %d octaves at L, else INCONCLUSIVE; RoPE's rise of "
    .. "the loss past L (windows past L minus inside L) minus RoPE-ID's, per seed: SUPPORTED if its 95%% interval "
    .. "is above 0.02 nats, NOT SUPPORTED if below, else INCONCLUSIVE"):format(M.MIN_SEEDS, M.MIN_OCTAVES)
  local word = ({above = S, below = N})[side(lo, hi, 0.02) or ""] or I
  if ns < M.MIN_SEEDS or x.octaves < M.MIN_OCTAVES then word = I end
  return row("C7", "RoPE-ID's text loss past L degrades less than RoPE's", "(implied: RoPE-ID extrapolates)",
    ("rise past L: RoPE %+.3f, RoPE-ID %+.3f; RoPE - RoPE-ID %s (T = %d, %d seeds)"):format(rr, ri, ci_text(m, lo, hi),
      x.T, ns),
    word, rule, ns, ns, lo, hi)
end

return M
