-- test_tasks.lua — the Lua bindings of the task generators (mp.tasks, lua/ltasks.c):
-- shapes, target masks, determinism by seed, and ground truth checked against
-- references computed here in plain Lua: MTD next-token distributions rebuilt
-- from pi() and lambda (float32 values, tolerance 1e-5 absolute), algebra facts
-- recomputed with C_n / D_n multiplication written out below (exact), text
-- windows compared byte by byte with a file written here (exact), retrieval
-- layouts compared token by token (exact). Then errors and handle life cycle.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near, expect_error = t.case, t.near, t.expect_error
local function same_tensor(a, b, what)
  local sa, sb = a:shape(), b:shape()
  assert(#sa == #sb, (what or "tensor") .. ": ranks differ")
  for i = 1, #sa do assert(sa[i] == sb[i], (what or "tensor") .. ": shapes differ") end
  local x, y = a:reshape(-1), b:reshape(-1)
  for i = 1, a:numel() do
    if x[i] ~= y[i] then return false end
  end
  return true
end

local function shape_is(t, want, what)
  local s = t:shape()
  local ok = #s == #want
  for i = 1, #want do ok = ok and s[i] == want[i] end
  assert(ok, ("%s: shape {%s}, expected {%s}"):format(what or "tensor", table.concat(s, ","), table.concat(want, ",")))
end

if type(mp.tasks) ~= "table" then
  io.stderr:write("FAIL mp.tasks is missing: lua/lmp.c must call mp_lua_open_tasks(L)\n")
  print("0 passed, 1 failed")
  os.exit(1)
end

-- every task feeds m:train{task = t}: tokens and targets Tensors [B,T] of ids
local function check_batch(t, B, T, what)
  local tok, tgt, truth = t:sample(B, T)
  shape_is(tok, {B, T}, what .. " tokens")
  shape_is(tgt, {B, T}, what .. " targets")
  assert(type(truth) == "table", what .. ": truth is a table")
  for b = 1, B do
    for i = 1, T do
      local x, y = tok[b][i], tgt[b][i]
      assert(x == math.floor(x) and x >= 0 and x < t.vocab, what .. ": token id out of range")
      assert(y == math.floor(y) and y >= -1 and y < t.vocab, what .. ": target out of range")
    end
  end
  return tok, tgt, truth
end

---------------------------------------------------------------- MTD

check("mtd shapes, targets and truth", function()
  local q, m, B, T = 6, 3, 4, 20
  local t = mp.tasks.mtd{q = q, m = m, concentration = 0.5, seed = 7}
  assert(t.vocab == q and t.q == q and t.m == m, "fields")
  assert(tostring(t) == "MTDTask(q=6, m=3, concentration=0.5, targets=all, seed=7)", tostring(t))
  local tok, tgt, truth = check_batch(t, B, T, "mtd")
  shape_is(truth.lambda, {B, m}, "lambda")
  shape_is(truth.next, {B, T, q}, "next")
  local pi = t:pi()
  shape_is(pi, {q, q}, "pi")
  for u = 1, q do near(pi[u]:sum(), 1, 1e-5, "pi row sum") end
  for b = 1, B do
    near(truth.lambda[b]:sum(), 1, 1e-5, "lambda sum")
    for i = 1, T do
      -- targets: -1 at positions whose next token is a uniform start token (i < m), else the next token
      if i < m then assert(tgt[b][i] == -1, "target before m must be -1")
      elseif i < T then assert(tgt[b][i] == tok[b][i + 1], "target is the next token") end
      local nx = truth.next[b][i]
      near(nx:sum(), 1, 1e-5, "next sums to 1")
      if i < m then
        for v = 1, q do near(nx[v], 1 / q, 1e-6, "uniform start") end
      else
        -- reference: sum_g lambda_g pi(y_{i-g}) with 1-based token index i-g+1
        for v = 1, q do
          local ref = 0
          for g = 1, m do ref = ref + truth.lambda[b][g] * pi[tok[b][i - g + 1] + 1][v] end
          near(nx[v], ref, 1e-5, "next vs mixture of pi rows")
        end
        if i == T - 2 then  -- t:mixture on the history up to position i
          local hist = {}
          for j = 1, i do hist[j] = tok[b][j] end
          local mix = t:mixture(truth.lambda[b], hist)
          shape_is(mix, {q}, "mixture")
          for v = 1, q do near(mix[v], nx[v], 1e-6, "mixture vs next") end
        end
      end
    end
  end
end)

check("mtd targets=last and truth=false", function()
  local t = mp.tasks.mtd{q = 3, m = 2, targets = "last"}
  local tok, tgt, truth = t:sample(3, 8, {truth = false})
  assert(truth.next == nil and truth.lambda == nil, "no truth asked for")
  for b = 1, 3 do
    for i = 1, 7 do assert(tgt[b][i] == -1, "only the last position has a target") end
    assert(tgt[b][8] >= 0 and tgt[b][8] < 3, "last target is a token")
  end
  assert(t.params.targets == "last", "params")
end)

check("mtd determinism by seed", function()
  local a, b = mp.tasks.mtd{q = 5, m = 2, seed = 11}, mp.tasks.mtd{q = 5, m = 2, seed = 11}
  local c = mp.tasks.mtd{q = 5, m = 2, seed = 12}
  assert(same_tensor(a:pi(), b:pi()), "same seed, same pi")
  assert(not same_tensor(a:pi(), c:pi()), "other seed, other pi")
  local ta = a:sample(3, 16)
  local tb = b:sample(3, 16)
  assert(same_tensor(ta, tb), "same seed, same batch")
  local ta2 = a:sample(3, 16)
  assert(not same_tensor(ta, ta2), "the stream moves on")
  a:seed(11)
  assert(same_tensor(a:sample(3, 16), ta), "t:seed restarts the stream")
  local d = mp.tasks.mtd(a.params)
  assert(same_tensor(d:pi(), a:pi()) and same_tensor(d:sample(3, 16), ta), "params rebuild the task")
end)

check("mtd errors", function()
  expect_error(function() mp.tasks.mtd{q = 1} end, "mp.tasks.mtd: option 'q' must be an integer in [2, 2147483647], got 1")
  expect_error(function() mp.tasks.mtd{q = 2.5} end, "option 'q' must be an integer in [2, 2147483647], got 2.5")
  expect_error(function() mp.tasks.mtd{m = 0} end, "option 'm' must be an integer in [1, 2147483647], got 0")
  expect_error(function() mp.tasks.mtd{q = 100000} end, "q = 100000")
  expect_error(function() mp.tasks.mtd{concentration = 0} end, "concentration must be finite and > 0")
  expect_error(function() mp.tasks.mtd{targets = "some"} end, 'targets must be one of "all", "last" (got "some")')
  expect_error(function() mp.tasks.mtd{qq = 3} end, "unknown option 'qq'")
  expect_error(function() mp.tasks.mtd(5) end, "options must be a table")
  expect_error(function() mp.tasks.mtd{seed = -1} end, "mp.tasks.mtd: option 'seed' must be an integer in [0, 9223372036854775807], got -1")
  local t = mp.tasks.mtd{q = 4, m = 3}
  expect_error(function() t:sample(0, 5) end, "MTDTask:sample: argument #1 (B) must be an integer in [1, 2147483647], got 0")
  expect_error(function() t:sample(2) end, "MTDTask:sample: argument #2 (T) must be an integer in [")
  expect_error(function() t:sample(2, 2) end, "T = 2 is shorter than m = 3")
  expect_error(function() t:sample(2, 5, {truth = "no"}) end, "MTDTask:sample: option 'truth' must be a boolean, got string")
  expect_error(function() t:mixture({0.5, 0.5}, {1, 2, 3}) end, "lambda has 2 entries, expected m = 3")
  expect_error(function() t:mixture({0.2, 0.3, 0.5}, {1, 2}) end, "history has 2 tokens")
  expect_error(function() t:mixture({0.2, 0.3, 0.5}, {1, 2, 4}) end, "history[3] = 4 is not a token id in 0..3")
end)

check("task handles close once, __close, closed errors", function()
  local t = mp.tasks.mtd{}
  t:close()
  t:close()
  assert(tostring(t) == "MTDTask(closed)", tostring(t))
  expect_error(function() t:sample(1, 4) end, "MTDTask is closed")
  expect_error(function() return t.vocab end, "MTDTask is closed")
  local r
  do
    local s <close> = mp.tasks.retrieval{}
    r = s
  end
  expect_error(function() r:sample(1, 40) end, "RetrievalTask is closed")
  local x = mp.tasks.algebra{k = 2}
  x = nil
  collectgarbage()
  collectgarbage()
end)

---------------------------------------------------------------- algebra

local EQ, BOS, SEP = 16, 17, 18

-- independent group multiplication (encodings documented in tasks/algebra.h)
local function group_mul(name, x, y)
  local fam, n = name:match("^([CD])(%d+)$")
  n = tonumber(n)
  if fam == "C" then return (x + y) % n end
  if fam == "D" then
    local i, j, k, l = x % n, x // n, y % n, y // n
    local r = j == 1 and (i - k) % n or (i + k) % n
    return r + n * ((j + l) % 2)
  end
  if name == "C2xC2xC2" then return x ~ y end
  if name == "C2xC4" then return 4 * (((x >> 2) + (y >> 2)) % 2) + (((x & 3) + (y & 3)) % 4) end
  return nil  -- Q8: not recomputed here
end

-- the context facts of row b: list of {a, b, c} (k of them)
local function facts(tok, b, k)
  local f = {}
  for i = 0, k - 1 do
    local p = 1 + 5 * i  -- 0-based index of ',' of fact i; 1-based is p + 1
    f[#f + 1] = {tok[b][p + 2], tok[b][p + 3], tok[b][p + 5]}
  end
  return f
end

local function check_algebra_batch(t, B, what)
  local k, T = t.k, t.seq_len
  assert(T == 5 * (k + 1), what .. ": seq_len")
  local tok, tgt, truth = check_batch(t, B, T, what)
  assert(#truth == B, what .. ": one truth per sample")
  for b = 1, B do
    local tr = truth[b]
    -- layout: ^ , a b = c , ... , a b =
    assert(tok[b][1] == BOS, "starts with ^")
    for i = 0, k do
      assert(tok[b][2 + 5 * i] == SEP and tok[b][5 + 5 * i] == EQ, "separators and '='")
    end
    -- assignment and symbols agree, identities are never symbol 0
    assert(#tr.groups == #tr.assignment, "one assignment per group")
    for g, name in ipairs(tr.groups) do
      for e1, s in ipairs(tr.assignment[g]) do
        assert(tr.symbols[s].group == g and tr.symbols[s].element == e1 - 1, "symbols inverts assignment")
      end
      assert(tr.assignment[g][1] ~= 0, "identity on symbol 0")
    end
    -- every context fact and the query are true in their group
    local f = facts(tok, b, k)
    f[#f + 1] = {tr.query.a, tr.query.b, tr.query.answer}
    for _, x in ipairs(f) do
      local sa, sb, sc = tr.symbols[x[1]], tr.symbols[x[2]], tr.symbols[x[3]]
      assert(sa and sb and sc and sa.group == sb.group and sb.group == sc.group, "fact within one group")
      local want = group_mul(tr.groups[sa.group], sa.element, sb.element)
      if want then assert(want == sc.element, ("%s: fact %d %d = %d is false"):format(what, x[1], x[2], x[3])) end
    end
    assert(tok[b][T - 2] == tr.query.a and tok[b][T - 1] == tr.query.b, "query tokens")
    assert(tr.symbols[tr.query.a].group == tr.query.group, "query group")
    -- solvers agree with the truth table and the helpers
    local rules = mp.tasks.algebra_rules(tok[b], tr.query.a, tr.query.b, tr.query.answer)
    for _, r in ipairs{"copy", "commute", "identity", "cancel", "associate"} do
      assert(mp.tasks.algebra_solve(r, tok[b], tr.query.a, tr.query.b) == tr.solved[r], "solve " .. r)
      assert(rules[r] == tr.rules[r], "rules " .. r)
      assert(tr.rules[r] == (tr.solved[r] == tr.query.answer), "rule holds iff its solver is right " .. r)
    end
  end
  return tok, tgt, truth
end

check("algebra layout, facts and truth", function()
  local t = mp.tasks.algebra{k = 12, seed = 5}
  assert(t.vocab == 19 and t.seq_len == 65 and t.k == 12, "fields")
  local tok, tgt, truth = check_algebra_batch(t, 16, "algebra")
  for b = 1, 16 do
    for i = 1, 64 do assert(tgt[b][i] == tok[b][i + 1], "targets=all is next-token") end
    assert(tgt[b][65] == truth[b].query.answer, "last target is the answer")
    -- hold_out="commuted" (default): neither a b nor b a in the context
    for _, x in ipairs(facts(tok, b, 12)) do
      local qa, qb = truth[b].query.a, truth[b].query.b
      assert(not ((x[1] == qa and x[2] == qb) or (x[1] == qb and x[2] == qa)), "held-out pair in context")
    end
    for _, name in ipairs(truth[b].groups) do assert(name:match("^[CD]%d+$"), "training family " .. name) end
  end
end)

check("algebra target modes, T argument", function()
  local ta = mp.tasks.algebra{k = 4, targets = "answers", seed = 2}
  local tok, tgt = ta:sample(3, 25)
  for b = 1, 3 do
    for i = 1, 25 do
      if tok[b][i] == EQ then assert(i == 25 or tgt[b][i] == tok[b][i + 1], "answer target")
      else assert(tgt[b][i] == -1, "non-answer masked") end
    end
  end
  local tl = mp.tasks.algebra{k = 4, targets = "last"}
  local _, tg2, tr2 = tl:sample(2)
  for b = 1, 2 do
    for i = 1, 24 do assert(tg2[b][i] == -1, "only the last") end
    assert(tg2[b][25] == tr2[b].query.answer, "last is the answer")
  end
  expect_error(function() tl:sample(2, 24) end, "T = 24 but k = 4 facts make sequences of T = 5*(k+1) = 25")
end)

check("algebra fixed groups, test groups", function()
  local t = mp.tasks.algebra{k = 30, groups = {"C5", "D3"}, mix = 0, seed = 9}
  local _, _, truth = check_algebra_batch(t, 6, "fixed")
  for b = 1, 6 do
    local g = {table.unpack(truth[b].groups)}
    table.sort(g)
    assert(#g == 2 and g[1] == "C5" and g[2] == "D3", "fixed groups " .. table.concat(g, ","))
  end
  assert(t.params.groups[1] == "C5" and t.params.groups[2] == "D3", "params.groups")
  local tt = mp.tasks.algebra{k = 10, test_groups = true, seed = 4}
  local _, _, tr = check_algebra_batch(tt, 6, "test groups")
  local ok = {Q8 = true, C2xC4 = true, C2xC2xC2 = true}
  for b = 1, 6 do for _, n in ipairs(tr[b].groups) do assert(ok[n], "test family " .. n) end end
end)

check("algebra require and exclude", function()
  -- require copy: the query pair is in the context with the answer (checked by scanning)
  local t = mp.tasks.algebra{k = 20, hold_out = "none", require = "copy", seed = 3}
  local tok, _, truth = check_algebra_batch(t, 5, "copy")
  for b = 1, 5 do
    local found = false
    for _, x in ipairs(facts(tok, b, 20)) do
      found = found or (x[1] == truth[b].query.a and x[2] == truth[b].query.b and x[3] == truth[b].query.answer)
    end
    assert(found and truth[b].rules.copy, "copy holds")
  end
  -- require identity, exclude cancel: an exposed identity is a or b (scanned here)
  local ti = mp.tasks.algebra{k = 20, require = {"identity"}, exclude = "cancel", seed = 8}
  local tk2, _, tr2 = check_algebra_batch(ti, 5, "identity")
  for b = 1, 5 do
    local ids = {}
    for _, x in ipairs(facts(tk2, b, 20)) do
      if x[3] == x[1] then ids[x[2]] = true end
      if x[3] == x[2] then ids[x[1]] = true end
    end
    assert(ids[tr2[b].query.a] or ids[tr2[b].query.b], "identity exposed")
    assert(tr2[b].rules.identity and not tr2[b].rules.cancel, "require/exclude honoured")
  end
  local p = ti.params
  assert(p.require[1] == "identity" and p.exclude[1] == "cancel" and p.hold_out == "commuted", "params")
  local again = mp.tasks.algebra(p)
  assert(same_tensor(again:sample(5), tk2), "params rebuild the task")
end)

check("algebra determinism", function()
  local a, b = mp.tasks.algebra{k = 8, seed = 21}, mp.tasks.algebra{k = 8, seed = 21}
  local c = mp.tasks.algebra{k = 8, seed = 22}
  local x = a:sample(4)
  assert(same_tensor(x, (b:sample(4))), "same seed")
  assert(not same_tensor(x, (c:sample(4))), "other seed")
  a:seed(21)
  assert(same_tensor(x, (a:sample(4))), "t:seed restarts")
end)

check("algebra errors", function()
  expect_error(function() mp.tasks.algebra{k = -1} end, "mp.tasks.algebra: option 'k' must be an integer in [0, 100000], got -1")
  expect_error(function() mp.tasks.algebra{hold_out = "both"} end, 'hold_out must be one of "none", "pair", "commuted"')
  expect_error(function() mp.tasks.algebra{require = "copy"} end, 'require=copy needs hold_out="none"')
  expect_error(function() mp.tasks.algebra{require = "commute"} end, "require=commute needs")
  expect_error(function() mp.tasks.algebra{require = "magic"} end, "require: unknown rule 'magic'")
  expect_error(function() mp.tasks.algebra{require = "identity", exclude = "identity"} end, "both required and excluded")
  expect_error(function() mp.tasks.algebra{groups = {"C17"}} end, "groups[1] = C17 is not a supported group")
  expect_error(function() mp.tasks.algebra{groups = {"D8", "C9"}} end, "25 elements")
  expect_error(function() mp.tasks.algebra{mix = 2} end, "mix must be a probability")
  expect_error(function() mp.tasks.algebra{max_order = 2} end, "option 'max_order' must be an integer in [3, ")
  expect_error(function() mp.tasks.algebra{test_groups = "yes"} end, "mp.tasks.algebra: option 'test_groups' must be a boolean, got string")
  local never = mp.tasks.algebra{k = 0, hold_out = "none", require = "copy", max_attempts = 3}
  expect_error(function() never:sample(2) end, "AlgebraTask:sample: no sequence with require=copy exclude=none in 3 attempts")
  expect_error(function() mp.tasks.algebra_solve("guess", {17}, 1, 2) end, "unknown rule 'guess'")
  expect_error(function() mp.tasks.algebra_solve("copy", {17, 18, 1, 2, 16, 3}, 1, 16) end, "argument #4 (b) must be an integer in [0, 15], got 16")
  expect_error(function() mp.tasks.algebra_solve("copy", {17, 18, 1, 2, 3, 3}, 1, 2) end, "is not")
  expect_error(function() mp.tasks.algebra_solve("copy", {17, 18, 1, 2, 16, 30}, 1, 2) end,
               "tokens[6] = 30 is not a token id in 0..18")
  -- a valid hand-written row: "^ , 1 2 = 3 , 1 2 =" -> copy answers 3, commute does not apply
  local row = {17, 18, 1, 2, 16, 3, 18, 1, 2, 16}
  assert(mp.tasks.algebra_solve("copy", row, 1, 2) == 3, "copy from a table row")
  assert(mp.tasks.algebra_solve("commute", row, 2, 1) == 3, "commute")
  assert(mp.tasks.algebra_solve("copy", row, 2, 1) == -1, "not applicable is -1")
  assert(mp.tasks.algebra_solve("copy", row, 1, 2, 0) == -1, "n_facts = 0 hides the fact")
end)

---------------------------------------------------------------- text

local tmpdir = os.tmpname()
os.remove(tmpdir)
assert(os.execute("mkdir -p " .. tmpdir))
local function spit(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end

local corpus = {}
for i = 1, 400 do corpus[#corpus + 1] = ("line %d: the quick brown fox %s\n"):format(i, ("#"):rep(i % 7)) end
corpus = table.concat(corpus)
local cpath = tmpdir .. "/corpus.txt"
spit(cpath, corpus)

check("text windows match the file", function()
  local t = mp.tasks.text{path = cpath, ctx = 24, val_fraction = 0.25, seed = 3}
  local n = #corpus
  local n_val = math.floor(n * 0.25)
  assert(t.vocab == 257 and t.bos_token == 256 and t.n_bytes == n, "fields")
  assert(t.train_bytes == n - n_val and t.val_bytes == n_val and t.ctx == 24 and t.path == cpath, "split sizes")
  local tok, tgt, truth = check_batch(t, 5, 24, "text")
  assert(truth.split == "train" and #truth.starts == 5, "truth")
  for b = 1, 5 do
    local s = truth.starts[b]   -- 0-based file offset: byte i of the window is corpus:byte(s + i)
    assert(s >= 0 and s + 24 <= t.train_bytes, "train window inside the train split")
    assert(tok[b][1] == 256, "BOS first")
    for i = 2, 24 do assert(tok[b][i] == corpus:byte(s + i - 1), "token byte") end
    for i = 1, 24 do assert(tgt[b][i] == corpus:byte(s + i), "target byte") end
  end
  local vt, _, vtruth = t:sample(4, nil, "val")
  shape_is(vt, {4, 24}, "val batch uses ctx")
  for b = 1, 4 do assert(vtruth.starts[b] >= t.train_bytes and vtruth.starts[b] + 24 <= n, "val window") end
  local nb = mp.tasks.text{path = cpath, bos = false, val_fraction = 0, seed = 4}
  local tk2, tg2, tr2 = nb:sample(3, 10)
  for b = 1, 3 do
    local s = tr2.starts[b]
    for i = 1, 10 do
      assert(tk2[b][i] == corpus:byte(s + i) and tg2[b][i] == corpus:byte(s + i + 1), "window without BOS")
    end
  end
end)

check("text determinism and independent splits", function()
  local a = mp.tasks.text{path = cpath, ctx = 16, seed = 9}
  local b = mp.tasks.text(cpath, {ctx = 16, seed = 9})
  local _, _, ta = a:sample(6)
  local _, _, tv = a:sample(3, "val")
  local _, _, tb = b:sample(6)
  local _, _, tv2 = b:sample(3, 16, "val")
  for i = 1, 6 do assert(ta.starts[i] == tb.starts[i], "same seed, same windows") end
  local c = mp.tasks.text{path = cpath, ctx = 16, seed = 9}
  c:sample(50)   -- more training draws must not move the validation stream
  local _, _, tv3 = c:sample(3, "val")
  for i = 1, 3 do assert(tv.starts[i] == tv2.starts[i] and tv.starts[i] == tv3.starts[i], "val stream") end
  a:seed(9)
  local _, _, ta2 = a:sample(6)
  for i = 1, 6 do assert(ta.starts[i] == ta2.starts[i], "t:seed restarts") end
  local d = mp.tasks.text(a.params)
  local _, _, td = d:sample(6)
  for i = 1, 6 do assert(td.starts[i] == ta.starts[i], "params rebuild the task") end
end)

check("text errors name the file", function()
  local missing = tmpdir .. "/no_such_file.txt"
  expect_error(function() mp.tasks.text{path = missing} end, missing)
  local empty = tmpdir .. "/empty.txt"
  spit(empty, "")
  expect_error(function() mp.tasks.text{path = empty} end, empty .. ": empty file")
  expect_error(function() mp.tasks.text{path = cpath, ctx = 100000} end, cpath .. ": the train split has")
  expect_error(function() mp.tasks.text{} end, "path (the text file) must be a string")
  expect_error(function() mp.tasks.text{path = cpath, val_fraction = 1} end, "val_fraction must be in [0, 1)")
  expect_error(function() mp.tasks.text(cpath, {path = cpath}) end, "unknown option 'path'")
  local t = mp.tasks.text{path = cpath, val_fraction = 0}
  expect_error(function() t:sample(2) end, "T expected")
  expect_error(function() t:sample(2, 8, "test") end, "invalid option 'test'")
  expect_error(function() t:sample(2, 8, "val") end, cpath .. ": the validation split has 0 bytes")
end)

---------------------------------------------------------------- retrieval

check("retrieval passkey layout and truth", function()
  local t = mp.tasks.retrieval{value_len = 5, n_filler = 20, seed = 2}
  assert(t.vocab == 38, "vocab 18 + n_filler")
  local T = 60
  local tok, tgt, truth = check_batch(t, 4, T, "passkey")
  for b = 1, 4 do
    local ap, np, vp = truth.answer_pos[b], truth.needle_pos[b], truth.value_pos[b]
    assert(ap == T - 5 + 1, "answer is the last value_len tokens")
    assert(tok[b][1] == 10, "BOS")
    assert(tok[b][np] == 11 and tok[b][np + 1] == 12 and tok[b][np + 2] == 13 and tok[b][np + 3] == 14,
           "needle 'the pass key is'")
    assert(vp == np + 4, "value after the needle")
    for d = 1, 5 do
      assert(truth.value[b][d] == tok[b][vp + d - 1] and truth.value[b][d] == tok[b][ap + d - 1], "value digits")
    end
    assert(tok[b][ap - 1] == 16, "'?' before the answer")
    for i = 1, T do
      if i >= ap - 1 and i < T then assert(tgt[b][i] == tok[b][i + 1], "answer targets")
      else assert(tgt[b][i] == -1, "masked") end
    end
    assert(truth.depth[b] >= 0 and truth.depth[b] <= 1, "depth")
  end
  assert(truth.key == nil, "no key in passkey mode")
  assert(t:token_name(10) == "<bos>" and t:token_name(7) == "7", "token names")
end)

check("retrieval depth, key-value, repeat filler", function()
  local t0 = mp.tasks.retrieval{depth = 0, filler = "repeat", n_filler = 4}
  local tok, _, tr = t0:sample(2, 50)
  assert(tr.needle_pos[1] == 2 and tr.depth[1] == 0, "depth 0: needle right after BOS")
  local ff = {}
  for i = tr.value_pos[1] + 5 + 1, tr.answer_pos[1] - 7 do ff[#ff + 1] = tok[1][i] end   -- after "." .. before "what is the pass key ?"
  for i = 1, #ff do assert(ff[i] == 18 + (i - 1) % 4, "repeated filler f0 f1 f2 f3") end
  local t1 = mp.tasks.retrieval{depth = 1}
  local _, _, tr1 = t1:sample(1, 50)
  assert(tr1.depth[1] == 1, "depth 1")
  local kv = mp.tasks.retrieval{n_keys = 4, key_len = 3, value_len = 2, seed = 6}
  local tk, _, trk = check_batch(kv, 3, kv.min_len + 10, "key-value")
  local T = kv.min_len + 10
  for b = 1, 3 do
    local np = trk.needle_pos[b]
    assert(tk[b][np] == 13, "needle starts with 'key'")
    for d = 1, 3 do
      assert(trk.key[b][d] == tk[b][np + d], "needle key digits")
      assert(trk.key[b][d] == tk[b][T - 2 - 1 - 3 + d], "query key digits")
    end
  end
  local a, b2 = mp.tasks.retrieval(kv.params), mp.tasks.retrieval{n_keys = 4, key_len = 3, value_len = 2, seed = 6}
  assert(same_tensor((a:sample(2, kv.min_len + 5)), (b2:sample(2, kv.min_len + 5))), "params rebuild, same seed same batch")
  -- n_queries: 2 earlier queries ("what is key k k k ? v v ." = 10 tokens each), 3 answers as targets
  local mq = mp.tasks.retrieval{n_keys = 4, key_len = 3, value_len = 2, seed = 6, n_queries = 3}
  assert(mq.params.n_queries == 3 and mq.min_len == kv.min_len + 2 * 10, "n_queries in params, min_len")
  assert(tostring(mq):find("n_queries=3", 1, true), "describe shows n_queries")
  local _, qtg = mq:sample(2, mq.min_len + 4)
  for b = 1, 2 do
    local n = 0
    for t = 1, mq.min_len + 4 do if qtg[b][t] >= 0 then n = n + 1 end end
    assert(n == 6, "three answers of two digits are targets")
  end
  -- key_symbols: keys of their own tokens (after the 16 filler words), named k0.., the answer unchanged
  local ks = mp.tasks.retrieval{n_keys = 4, key_len = 1, key_symbols = 6, value_len = 2, n_filler = 16, seed = 6}
  assert(ks.vocab == 18 + 16 + 6 and ks.params.key_symbols == 6, "vocab and params with key symbols")
  assert(ks:token_name(18 + 16) == "k0" and ks:token_name(18 + 16 + 5) == "k5" and ks:token_name(18 + 15) == "f15",
         "key symbol names")
  local kst, _, kstr = check_batch(ks, 3, ks.min_len + 10, "key symbols")
  for b = 1, 3 do
    local np, key = kstr.needle_pos[b], kstr.key[b][1]
    assert(key >= 34 and key < 40 and kst[b][np + 1] == key, "the needle's key is a key symbol")
    assert(kst[b][ks.min_len + 10 - 3] == key, "the query names it")
    assert(kst[b][np + 3] == kstr.value[b][1] and kstr.value[b][1] <= 9, "values stay digits")
  end
  local ok, err = pcall(mp.tasks.retrieval, {n_queries = 2})
  assert(not ok and tostring(err):find("needs keys", 1, true), "passkey with two queries refused: " .. tostring(err))
  -- variable tracking: 2 chains of 2 links; follow the queried key through
  -- the links written in the tokens to the answer (generator checks in test_tasks.c)
  local vt = mp.tasks.retrieval{n_keys = 2, hops = 2, key_len = 2, value_len = 1, seed = 3}
  assert(vt.params.hops == 2 and vt.min_len == 1 + 2 * (6 + 2 * 8) + 7, "hops in params, min_len")
  assert(tostring(vt):find("variable tracking", 1, true), "describe names the mode")
  local vtok, _, vtr = check_batch(vt, 4, vt.min_len + 20, "variable tracking")
  local VT = vt.min_len + 20
  for b = 1, 4 do
    local x, key, links = vtok[b], vtr.key[b], 0
    while true do
      local at
      for i = 1, vtr.answer_pos[b] - 7 do
        if x[i] == 13 and x[i + 1] == key[1] and x[i + 2] == key[2] and x[i + 3] == 14 and x[i - 1] ~= 14 then at = i end
      end
      assert(at, "every key in the chain is defined")
      if x[at + 4] ~= 13 then assert(x[at + 4] == vtr.value[b][1] and x[VT] == x[at + 4], "chain ends at the answer"); break end
      key, links = {x[at + 5], x[at + 6]}, links + 1
    end
    assert(links == 2, "two links followed")
  end
end)

check("retrieval errors", function()
  expect_error(function() mp.tasks.retrieval{n_keys = 0} end, "mp.tasks.retrieval: option 'n_keys' must be an integer in [1, 1024], got 0")
  expect_error(function() mp.tasks.retrieval{depth = 2} end, 'depth must be in [0, 1] or "random" (got 2')
  expect_error(function() mp.tasks.retrieval{filler = "zipf"} end, "filler must be one of")
  expect_error(function() mp.tasks.retrieval{n_keys = 20, key_len = 1} end, "20 distinct keys do not fit in 1 digits")
  expect_error(function() mp.tasks.retrieval{hops = 65} end, "option 'hops' must be an integer in [0, 64], got 65")
  expect_error(function() mp.tasks.retrieval{n_keys = 5, key_len = 1, key_symbols = 4} end,
               "5 distinct keys do not fit in 1 of 4 key symbols")
  expect_error(function() mp.tasks.retrieval{key_symbols = 8} end, "key_symbols = 8 needs keys")
  expect_error(function() mp.tasks.retrieval{hops = 1, depth = 0.5} end, "leave depth random")
  local t = mp.tasks.retrieval{}
  expect_error(function() t:sample(2, t.min_len - 1) end, "is shorter than the")
  expect_error(function() t:token_name(t.vocab) end, "RetrievalTask:token_name: argument #1 (id) must be an integer in [0, ")
end)

os.execute("rm -rf " .. tmpdir)
t.finish("test_tasks")
