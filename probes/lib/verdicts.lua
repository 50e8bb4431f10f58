-- verdicts.lua — the one verdict engine of every probe (rope_id, mirror_descent,
-- group_arith, sinks): a row is judged from one value per seed (the seed is the
-- unit of replication), its 95% t-interval over the seeds, its preconditions
-- (the model learned the task; the claim's premise is there) and, for a claim
-- about what training or a scheme produces, a control measured by the same
-- code. The per-probe rule files compute the per-seed numbers and say what
-- their claims are; this file alone decides the word, and writes the rows the
-- same way everywhere (the report, verdicts.tsv, the run file's /verdicts).
--
--   local V = require "verdicts"
--   local row = V.judge{
--     id = "C1", claim = "...", paper = "1.00", source = "Todd et al. 2025, fig. 3c",
--     statistic = "copy accuracy at k = 50", seeds = {1, 2, 3},
--     values = {0.99, 0.97, 0.98},            -- one per seed, never per item
--     control = {name = "untrained", values = {0.04, 0.03, 0.05}},   -- optional: judged on the difference
--     above = 0.95,                            -- or below = x, or inside = {a, b}
--     learned = {ok = true, text = "..."},     -- required for trained-model rows
--     pre = {{ok = true, text = "..."}},       -- further preconditions (the premise)
--     scale = "our model ~1e-4 of the paper's compute",   -- printed when not learned
--     describe = "items pooled: 98.0% [97.1, 98.8]",     -- printed, never judged
--     rule = "the rule in words"}
--   -- several tests in one row: tests = {{name =, values =, above = ...}, ...}
--   -- (NOT SUPPORTED if one is on the wrong side, SUPPORTED if all on the right)
--   -- rows about estimators on one data draw (no trained model): trained = false,
--   -- unit = "sequences (bootstrap)", and each test gives est, lo, hi itself.
--   V.report_lines(rows, widths)   -- "VERDICT id | claim | paper | ours | word | reason" and "RULE id: rule"
--   V.tsv(rows)                    -- verdicts.tsv's text: the same columns for every probe
--   V.write_h5(f, rows [, group])  -- /verdicts/<id>: attributes and the seed values
--   V.parse(report_text), V.problems(rows)   -- read the printed rows back
local M = {}

M.S, M.N, M.I = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
M.words = {[M.S] = true, [M.N] = true, [M.I] = true}

-- The one minimum: every row about trained models needs this many seeds.
M.MIN_SEEDS = 3

-- Why a row is INCONCLUSIVE: one of these four.
M.PRECONDITION = "precondition absent"
M.NOT_LEARNED = "not learned at this scale"
M.STRADDLES = "interval straddles"
M.FEW_SEEDS = "too few seeds"
M.reasons = {[M.PRECONDITION] = true, [M.NOT_LEARNED] = true, [M.STRADDLES] = true, [M.FEW_SEEDS] = true}

-- ---------------------------------------------------------------- statistics

-- two-sided 97.5% quantile of Student's t with df degrees of freedom
local T975 = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
              2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
              2.045, 2.042}
function M.t975(df)
  if df < 1 then return math.huge end
  return T975[df] or (1.96 + 2.4 / df)   -- within 0.002 of the exact value for df > 30
end

-- Mean and 95% t-interval of a list; one value: an infinite interval; none: NaN.
function M.mean_ci(xs)
  local n, s = #xs, 0
  if n == 0 then return 0 / 0, 0 / 0, 0 / 0 end
  for _, x in ipairs(xs) do s = s + x end
  local mean = s / n
  if n < 2 then return mean, -math.huge, math.huge end
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - mean) ^ 2 end
  local h = M.t975(n - 1) * math.sqrt(v / (n - 1) / n)
  return mean, mean - h, mean + h
end

-- Per-seed means of values that name their seed (values[i] belongs to
-- seed_of[i]; e.g. several heads of one model): the seeds in order of first
-- appearance and each one's mean. Heads of one model are not replicates.
function M.seed_means(values, seed_of)
  local sum, cnt, order = {}, {}, {}
  for i, v in ipairs(values) do
    local s = seed_of[i]
    if s == nil then error("verdicts.seed_means: value " .. i .. " names no seed", 2) end
    if not sum[s] then sum[s], cnt[s], order[#order + 1] = 0, 0, s end
    sum[s], cnt[s] = sum[s] + v, cnt[s] + 1
  end
  local means = {}
  for k, s in ipairs(order) do means[k] = sum[s] / cnt[s] end
  return means, order
end

-- ---------------------------------------------------------------- formatting

local function num(x, fmt)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  return (fmt or "%.3f"):format(x)
end
M.num = num

-- "0.669 [0.021, 1.317]", "0.952 [no interval]" (one seed)
function M.ci_text(m, lo, hi, fmt)
  if lo == -math.huge or lo ~= lo then return num(m, fmt) .. " [no interval]" end
  return ("%s [%s, %s]"):format(num(m, fmt), num(lo, fmt), num(hi, fmt))
end

local function list(xs, fmt, sep)
  local t = {}
  for i, x in ipairs(xs) do t[i] = type(x) == "number" and num(x, fmt) or tostring(x) end
  return table.concat(t, sep or ", ")
end

local function clean(x) return (tostring(x or ""):gsub("[|\t\n]", "/")) end

-- ---------------------------------------------------------------- judging

-- Which side of the test the interval [lo, hi] lies on: "for" (the claim's
-- side), "against", or nil (it straddles the threshold, or it is NaN).
local function side(t, lo, hi)
  if lo ~= lo or hi ~= hi then return nil end
  if t.above then
    if lo > t.above then return "for" elseif hi < t.above then return "against" end
  elseif t.below then
    if hi < t.below then return "for" elseif lo > t.below then return "against" end
  else
    local a, b = t.inside[1], t.inside[2]
    if lo >= a and hi <= b then return "for" elseif hi < a or lo > b then return "against" end
  end
  return nil
end

local function threshold_text(t, fmt)
  if t.above then return "> " .. num(t.above, fmt) end
  if t.below then return "< " .. num(t.below, fmt) end
  return ("in [%s, %s]"):format(num(t.inside[1], fmt), num(t.inside[2], fmt))
end

local function check_test(t, x, where)
  local n = (t.above and 1 or 0) + (t.below and 1 or 0) + (t.inside and 1 or 0)
  if n ~= 1 then error(("verdicts.judge %s: %s needs exactly one of above, below, inside"):format(x.id, where), 3) end
  if t.inside and not (type(t.inside) == "table" and #t.inside == 2) then
    error(("verdicts.judge %s: %s: inside is {a, b}"):format(x.id, where), 3)
  end
end

-- Judges one row (see the header); returns it with the word, the reason
-- (INCONCLUSIVE only), each test's seed values, mean and interval, and the
-- text of our numbers. Misuse is an error: a trained-model row whose values
-- are not one per seed, a trained-model row without its learned-task test, an
-- interval handed in for a trained-model row (item-pooled intervals cannot be
-- judged on).
function M.judge(x)
  assert(type(x) == "table" and x.id and x.claim and x.rule, "verdicts.judge: a row needs id, claim and rule")
  local trained = x.trained ~= false
  local unit = x.unit or (trained and "seed" or nil)
  if trained and unit ~= "seed" then
    error(("verdicts.judge %s: a trained-model row's unit of replication is the seed (got %s)"):format(x.id,
      tostring(unit)), 2)
  end
  if not trained and not unit then error(("verdicts.judge %s: give the unit of the interval"):format(x.id), 2) end
  local tests = x.tests
  if not tests then
    tests = {{name = x.name, values = x.values, control = x.control, above = x.above, below = x.below,
              inside = x.inside, fmt = x.fmt, est = x.est, lo = x.lo, hi = x.hi}}
  end
  local seeds = x.seeds or {}
  if trained then
    if not x.learned then
      error(("verdicts.judge %s: a trained-model row needs its learned-task test (learned = {ok =, text =})")
        :format(x.id), 2)
    end
    for i, s in ipairs(seeds) do
      for j = 1, i - 1 do if seeds[j] == s then error(("verdicts.judge %s: seed %s twice"):format(x.id, s), 2) end end
    end
  end
  local out = {id = x.id, claim = clean(x.claim), paper = clean(x.paper or "-"), source = clean(x.source or "-"),
               statistic = clean(x.statistic or (tests[1].name or "-")), unit = unit, seeds = seeds,
               n_seeds = trained and #seeds or 0, rule = clean(x.rule), describe = clean(x.describe or ""),
               tests = {}}
  local parts, sides = {}, {}   -- sides[i]: nil where test i straddles (so never ipairs over it)
  for i, t in ipairs(tests) do
    check_test(t, x, ("test %d"):format(i))
    local r = {name = t.name, fmt = t.fmt, above = t.above, below = t.below, inside = t.inside}
    if trained then
      if t.est or t.lo or t.hi then
        error(("verdicts.judge %s: a trained-model row is judged on its seed values, not on a given interval (an "
          .. "item-pooled interval describes, it never decides)"):format(x.id), 2)
      end
      if type(t.values) ~= "table" or #t.values ~= #seeds then
        error(("verdicts.judge %s: test %d has %d values for %d seeds: one value per seed"):format(x.id, i,
          type(t.values) == "table" and #t.values or 0, #seeds), 2)
      end
      r.values = t.values
      local judged = t.values
      if t.control then
        local cv = t.control.values
        if type(cv) ~= "table" or #cv ~= #seeds then
          error(("verdicts.judge %s: test %d's control has %d values for %d seeds"):format(x.id, i,
            type(cv) == "table" and #cv or 0, #seeds), 2)
        end
        judged = {}
        for k = 1, #seeds do judged[k] = t.values[k] - cv[k] end
        r.control, r.control_name = cv, t.control.name or "control"
        r.control_mean = M.mean_ci(cv)
      end
      r.judged = judged
      r.mean, r.lo, r.hi = M.mean_ci(judged)
      local text = (t.name and (t.name .. " ") or "") .. ("seeds %s"):format(list(t.values, t.fmt))
      if t.control then
        text = text .. ("; %s %s; difference %s"):format(r.control_name, list(r.control, t.fmt),
          M.ci_text(r.mean, r.lo, r.hi, t.fmt))
      else
        text = text .. " -> " .. M.ci_text(r.mean, r.lo, r.hi, t.fmt)
      end
      parts[#parts + 1] = text .. " (" .. threshold_text(t, t.fmt) .. ")"
    else
      if not (t.est and t.lo and t.hi) then
        error(("verdicts.judge %s: test %d of a row without trained models gives est, lo, hi"):format(x.id, i), 2)
      end
      r.mean, r.lo, r.hi = t.est, t.lo, t.hi
      parts[#parts + 1] = (t.name and (t.name .. " ") or "") .. M.ci_text(r.mean, r.lo, r.hi, t.fmt) .. " ("
        .. threshold_text(t, t.fmt) .. ")"
    end
    r.side = side(t, r.lo, r.hi)
    sides[i] = r.side
    out.tests[i] = r
  end
  local first = out.tests[1]
  out.mean, out.lo, out.hi = first.mean, first.lo, first.hi
  -- the word: preconditions first (the learned-task test, then the premise),
  -- then the seeds, then the intervals
  local pre = {}
  if x.learned then pre[1] = {ok = x.learned.ok, text = x.learned.text, reason = M.NOT_LEARNED} end
  for _, p in ipairs(x.pre or {}) do pre[#pre + 1] = {ok = p.ok, text = p.text, reason = p.reason or M.PRECONDITION} end
  local word, reason, why
  for _, p in ipairs(pre) do
    if not M.reasons[p.reason] then error(("verdicts.judge %s: unknown reason '%s'"):format(x.id, tostring(p.reason)), 2) end
    if not p.ok then
      word, reason, why = M.I, p.reason, p.text
      if p.reason == M.NOT_LEARNED and x.scale then why = (why and (why .. "; ") or "") .. x.scale end
      break
    end
  end
  local min = x.min_seeds or (trained and M.MIN_SEEDS or 0)
  if trained and min < M.MIN_SEEDS then
    error(("verdicts.judge %s: a trained-model row needs at least %d seeds, not %d"):format(x.id, M.MIN_SEEDS, min), 2)
  end
  if not word and trained and #seeds < min then
    word, reason, why = M.I, M.FEW_SEEDS, ("%d seed%s, %d needed"):format(#seeds, #seeds == 1 and "" or "s", min)
  end
  if not word then
    local any_against, all_for = false, true
    for i = 1, #out.tests do
      local s = sides[i]
      if s == "against" then any_against = true end
      if s ~= "for" then all_for = false end
    end
    if any_against then word = M.N elseif all_for then word = M.S else word, reason = M.I, M.STRADDLES end
  end
  out.word, out.reason = word, reason or ""
  local ours = table.concat(parts, "; ")
  if x.extra then ours = ours .. "; " .. x.extra end
  if reason and why then ours = ours .. " -- " .. why end
  out.ours = clean(ours)
  out.why = clean(why or "")
  return out
end

-- ---------------------------------------------------------------- output

-- The report's rows: "VERDICT id | claim | paper | ours | word | reason" with
-- claim/paper/ours padded to widths (default none), then "RULE id: rule",
-- "SOURCE id: ..." and "DESCRIBE id: ..." (item-pooled numbers, not judged).
function M.report_lines(rows, widths)
  widths = widths or {1, 1, 1}
  local fmt = ("VERDICT %%s | %%-%ds | %%-%ds | %%-%ds | %%s | %%s"):format(widths[1], widths[2], widths[3])
  local lines = {}
  for _, v in ipairs(rows) do
    lines[#lines + 1] = fmt:format(v.id, v.claim, v.paper, v.ours, v.word, v.reason ~= "" and v.reason or "-")
  end
  for _, v in ipairs(rows) do
    lines[#lines + 1] = ("RULE %s: %s (unit: %s; statistic: %s; source: %s)"):format(v.id, v.rule, v.unit,
      v.statistic, v.source)
    if v.describe ~= "" then lines[#lines + 1] = ("DESCRIBE %s: %s (described, not judged)"):format(v.id, v.describe) end
  end
  return lines
end

M.COLUMNS = {"id", "claim", "paper", "source", "statistic", "unit", "n_seeds", "seeds", "seed_values", "mean", "lo",
             "hi", "control", "control_values", "word", "reason", "rule", "ours", "describe"}

local function g6(x) return num(x, "%.6g") end

-- The cells of one row, in M.COLUMNS order. A row of several tests lists
-- each test's seed values as "name=v1,v2,v3" separated by "; ".
function M.cells(v)
  local sv, cv, cn = {}, {}, {}
  for _, t in ipairs(v.tests) do
    local prefix = #v.tests > 1 and ((t.name or "?") .. "=") or ""
    if t.values then sv[#sv + 1] = prefix .. list(t.values, "%.6g", ",") end
    if t.control then cv[#cv + 1] = prefix .. list(t.control, "%.6g", ","); cn[#cn + 1] = t.control_name end
  end
  return {v.id, v.claim, v.paper, v.source, v.statistic, v.unit, tostring(v.n_seeds), list(v.seeds, "%d", ","),
          table.concat(sv, "; "), g6(v.mean), g6(v.lo), g6(v.hi), table.concat(cn, "; "), table.concat(cv, "; "),
          v.word, v.reason, v.rule, v.ours, v.describe}
end

function M.tsv(rows)
  local out = {table.concat(M.COLUMNS, "\t")}
  for _, v in ipairs(rows) do out[#out + 1] = table.concat(M.cells(v), "\t") end
  return table.concat(out, "\n") .. "\n"
end

-- /<group>/<id> (group default "verdicts"): every column as an attribute, and
-- per test t (1, 2, ...) the datasets t<i>/values (per seed), t<i>/control,
-- t<i>/interval ({mean, lo, hi} of what is judged).
function M.write_h5(f, rows, group)
  group = group or "verdicts"
  for _, v in ipairs(rows) do
    local g = group .. "/" .. v.id
    for i, t in ipairs(v.tests) do
      local tg = ("%s/t%d"):format(g, i)
      f:write(tg .. "/interval", {t.mean, t.lo, t.hi})
      if t.values and #t.values > 0 then f:write(tg .. "/values", t.values) end
      if t.control and #t.control > 0 then f:write(tg .. "/control", t.control) end
      f:set_attr(tg, "name", t.name or "")
    end
    local c = M.cells(v)
    for k, col in ipairs(M.COLUMNS) do f:set_attr(g, col, c[k]) end
  end
end

-- ---------------------------------------------------------------- re-judging

-- An Output (mp.output) holding a byte copy of the run file at path with its
-- /<group> (default "verdicts") removed, ready for the new rows: the caller
-- judges from out.tmp, writes the rows (M.write_h5) and commits; an error
-- before the commit leaves the run file as it was. Errors name the file.
function M.copy_run_file(path, group)
  group = group or "verdicts"
  local fi = io.open(path, "rb")
  if not fi then error(("%s: no such run file"):format(path), 0) end
  local data = fi:read("a")
  fi:close()
  local out = mp.output(path)
  local fo = io.open(out.tmp, "wb")
  if not (fo and fo:write(data) and fo:close()) then
    out:abort()
    error(("%s: cannot write a copy of the run file"):format(out.tmp), 0)
  end
  local ok, err = pcall(function()
    local f <close> = mp.h5.open(out.tmp, "r+")
    if f:has(group) then f:delete(group) end
  end)
  if not ok then
    out:abort()
    error(("%s: %s"):format(path, tostring(err)), 0)
  end
  return out
end

-- The text with its verdict section replaced by lines: the lines from the
-- first one that matches `first` (a Lua pattern) through the last line of
-- the VERDICT/RULE/DESCRIBE block after it (and lines indented by three
-- spaces, as older reports continued a row); nil when there is no such section.
-- Lines between the header and the first VERDICT line are kept.
function M.replace_section(text, lines, first)
  local all = {}
  for l in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do all[#all + 1] = l end
  local k
  for i, l in ipairs(all) do if l:match(first) then k = i; break end end
  if not k then return nil end
  local a = k + 1
  while a <= #all and not all[a]:match("^VERDICT ") do a = a + 1 end
  if a > #all then return nil end
  local b = a
  while b + 1 <= #all and (all[b + 1]:match("^VERDICT ") or all[b + 1]:match("^RULE ")
                          or all[b + 1]:match("^DESCRIBE ") or all[b + 1]:match("^   %S")) do b = b + 1 end
  local out = {}
  for i = 1, a - 1 do out[#out + 1] = all[i] end
  for _, l in ipairs(lines) do out[#out + 1] = l end
  for i = b + 1, #all do out[#out + 1] = all[i] end
  return table.concat(out, "\n") .. "\n"
end

-- ---------------------------------------------------------------- reading back

-- The VERDICT rows of a printed report: {id, claim, paper, ours, word[, reason], line =}.
function M.parse(text)
  local rows = {}
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 8) == "VERDICT " then
      local fields = {line = line}
      for f in (line:sub(9) .. " |"):gmatch("%s*(.-)%s+|") do fields[#fields + 1] = f end
      rows[#rows + 1] = fields
    end
  end
  return rows
end

-- What is wrong with parsed rows: a row without 5 or 6 fields, a verdict word
-- outside M.words, a reason outside the four classes (INCONCLUSIVE rows) or
-- one on a decided row, a claim id that is not "C<digits>" or repeats.
-- Returns the messages (empty when the table is well formed) and the set of ids.
function M.problems(rows)
  local bad, ids = {}, {}
  for _, f in ipairs(rows) do
    if #f ~= 5 and #f ~= 6 then bad[#bad + 1] = "verdict row has 5 or 6 fields: " .. f.line end
    if not M.words[f[5] or ""] then bad[#bad + 1] = "verdict word: " .. tostring(f[5]) end
    if #f == 6 then
      if f[5] == M.I and not M.reasons[f[6]] then bad[#bad + 1] = "INCONCLUSIVE without a reason class: " .. f.line end
      if f[5] ~= M.I and f[6] ~= "-" then bad[#bad + 1] = "a decided row with a reason: " .. f.line end
    end
    if not (f[1] and f[1]:match("^C%d+$")) or ids[f[1]] then bad[#bad + 1] = "claim id: " .. tostring(f[1]) end
    ids[f[1] or ""] = true
  end
  return bad, ids
end

return M
