-- group_arith_paper.lua (library) — the evaluation data of Todd et al.'s
-- "In-Context Algebra" reimplemented from its description (public repository
-- ericwtodd/algebra, src/data_utils.py: construct_cancellation_sequence,
-- construct_associative_sequence, sample_copy_counterfactual_pair), so that
-- group_arith compares like with like:
--
--   local P = require "group_arith_paper"
--   P.group("D4")                      -- {name, order, mul[x][y]} (elements 0-based, 0 the identity)
--   P.FAMILIES.training / .held_out    -- group names of each population
--   local tokens, truth = P.construct(dist, population, k, n, seed)
--       -- dist "cancel" or "associate": the paper's targeted contexts, laid out
--       -- as mp.tasks.algebra lays out a sequence (k context facts, then the query)
--   local pairs = P.counterfactual_pairs(src_tokens, src_truth, base_tokens, base_truth)
--
-- The group tables here are written from the groups' definitions, not taken
-- from the C generator, so tests can check one against the other.
local M = {}

M.FAMILIES = {
  training = {"C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "D2", "D3", "D4", "D5"},
  held_out = {"Q8", "C2xC4", "C2xC2xC2"},
}
M.TOK_EQ, M.TOK_BOS, M.TOK_SEP, M.N_SYMBOLS = 16, 17, 18, 16

-- Quaternion units 1, i, j, k (u = 0..3): u*v = sign * unit.
local QMUL = {[0] = {[0] = {1, 0}, {1, 1}, {1, 2}, {1, 3}},
              {[0] = {1, 1}, {-1, 0}, {1, 3}, {-1, 2}},
              {[0] = {1, 2}, {-1, 3}, {-1, 0}, {1, 1}},
              {[0] = {1, 3}, {1, 2}, {-1, 1}, {-1, 0}}}

-- The multiplication table of a group by name: C_n (x+y mod n), D_n (element
-- i + n*j = r^i s^j, r^i s^j r^k s^l = r^(i + (-1)^j k) s^(j+l)), Q8 (element
-- 4*s + u = (-1)^s {1,i,j,k}[u]), C2xC4 (element 4a + b), C2xC2xC2 (xor).
function M.group(name)
  local n, mul = nil, nil
  local cn = name:match("^C(%d+)$")
  local dn = name:match("^D(%d+)$")
  if cn then
    n = tonumber(cn)
    mul = function(x, y) return (x + y) % n end
  elseif dn then
    local r = tonumber(dn)
    n = 2 * r
    mul = function(x, y)
      local i, j, k, l = x % r, x // r, y % r, y // r
      local rot = j == 0 and (i + k) % r or (i - k) % r
      return rot + r * ((j + l) % 2)
    end
  elseif name == "Q8" then
    n = 8
    mul = function(x, y)
      local s, u, t, v = x // 4, x % 4, y // 4, y % 4
      local q = QMUL[u][v]
      local sign = (s + t) % 2 == 0 and q[1] or -q[1]
      return (sign < 0 and 4 or 0) + q[2]
    end
  elseif name == "C2xC4" then
    n = 8
    mul = function(x, y) return 4 * ((x // 4 + y // 4) % 2) + (x % 4 + y % 4) % 4 end
  elseif name == "C2xC2xC2" then
    n = 8
    mul = function(x, y) return x ~ y end
  end
  if not n or n < 2 then error("group_arith_paper.group: unknown group '" .. tostring(name) .. "'", 2) end
  local t = {}
  for x = 0, n - 1 do
    t[x] = {}
    for y = 0, n - 1 do t[x][y] = mul(x, y) end
  end
  return {name = name, order = n, mul = t}
end

-- A small seeded generator (64-bit LCG, high bits), independent of math.random.
function M.rng(seed)
  local s = (seed or 1) * 2654435761 + 12345
  return function(n)
    s = s * 6364136223846793005 + 1442695040888963407
    return ((s >> 33) % n) + 1
  end
end

local function shuffle(list, rng)
  for i = #list, 2, -1 do
    local j = rng(i)
    list[i], list[j] = list[j], list[i]
  end
end

-- A fresh symbol for every element (a uniformly random injection into the 16
-- symbols), redrawn while the identity would get symbol 0, as the C generator does.
local function assign(order, rng)
  while true do
    local pool = {}
    for s = 0, M.N_SYMBOLS - 1 do pool[#pool + 1] = s end
    shuffle(pool, rng)
    if pool[1] ~= 0 then
      local sym = {}
      for e = 0, order - 1 do sym[e] = pool[e + 1] end
      return sym
    end
  end
end

-- The paper's cancellation context for query (a, b) (elements, neither the
-- identity): every fact sharing the left slot (a x, x ~= b) or the right slot
-- (x b, x ~= a), each at least once, the rest drawn from them; (a, b) and
-- (b, a) never appear. Returns the list of element pairs.
local function cancel_facts(G, a, b)
  local lr = {}
  for x = 0, G.order - 1 do
    if x ~= b then lr[#lr + 1] = {a, x} end
  end
  for x = 0, G.order - 1 do
    if x ~= a then lr[#lr + 1] = {x, b} end
  end
  return lr
end

-- The associative triplets of query (a, b) (elements), as in the paper:
--   form 1: a g = f, g d = b, f d = c   for every (f, d) with f d = c
--   form 2: d b = f, g d = a, g f = c   for every (g, f) with g f = c
-- without the triplets that use (a, b) or (b, a).
function M.triplets(G, a, b)
  local c, mul, n = G.mul[a][b], G.mul, G.order
  local function solve_right(x, target) for y = 0, n - 1 do if mul[x][y] == target then return y end end end
  local out = {}
  local function keep(t)
    for _, p in ipairs(t) do
      if (p[1] == a and p[2] == b) or (p[1] == b and p[2] == a) then return end
    end
    out[#out + 1] = t
  end
  for f = 0, n - 1 do
    for d = 0, n - 1 do
      if mul[f][d] == c then
        local g = solve_right(a, f)
        keep{{a, g}, {g, d}, {f, d}}
      end
    end
  end
  for g = 0, n - 1 do
    for f = 0, n - 1 do
      if mul[g][f] == c then
        local d = solve_right(g, a)
        keep{{d, b}, {g, d}, {g, f}}
      end
    end
  end
  return out
end

-- k context facts from `base` (element pairs): each once (a random subset of
-- k when there are more), the rest drawn uniformly from them; shuffled.
local function fill(base, k, rng)
  local facts = {}
  for i, p in ipairs(base) do facts[i] = p end
  shuffle(facts, rng)
  while #facts > k do facts[#facts] = nil end
  while #facts < k do facts[#facts + 1] = base[rng(#base)] end
  shuffle(facts, rng)
  return facts
end

-- One sequence as mp.tasks.algebra lays it out (T = 5(k+1) tokens: '^', then
-- ", a b = c" per fact, then ", a b =") and its truth table (the fields
-- group_arith reads: groups, assignment, symbols, query, rules).
local function layout(G, sym, facts, qa, qb)
  local row = {M.TOK_BOS}
  for _, p in ipairs(facts) do
    local x, y = p[1], p[2]
    row[#row + 1] = M.TOK_SEP; row[#row + 1] = sym[x]; row[#row + 1] = sym[y]
    row[#row + 1] = M.TOK_EQ; row[#row + 1] = sym[G.mul[x][y]]
  end
  row[#row + 1] = M.TOK_SEP; row[#row + 1] = sym[qa]; row[#row + 1] = sym[qb]; row[#row + 1] = M.TOK_EQ
  local assignment, symbols = {}, {}
  for e = 0, G.order - 1 do assignment[e + 1] = sym[e]; symbols[sym[e]] = {group = 1, element = e} end
  local answer = sym[G.mul[qa][qb]]
  return row, {groups = {G.name}, assignment = {assignment}, symbols = symbols,
               query = {a = sym[qa], b = sym[qb], answer = answer, group = 1}}
end

-- n sequences of the paper's targeted distribution `dist` ("cancel" or
-- "associate") over one group drawn uniformly from the population's families
-- ("training" or "held-out"), k context facts each. Returns the tokens
-- Tensor [n, 5(k+1)] and the truth list; truth.rules holds which of the C
-- solvers (mp.tasks.algebra_rules) answer each query.
function M.construct(dist, population, k, n, seed)
  if dist ~= "cancel" and dist ~= "associate" then
    error("group_arith_paper.construct: dist must be cancel or associate (got " .. tostring(dist) .. ")", 2)
  end
  local names = M.FAMILIES[population == "held-out" and "held_out" or population]
  if not names then error("group_arith_paper.construct: unknown population " .. tostring(population), 2) end
  if k < 3 then error("group_arith_paper.construct: k must be >= 3", 2) end
  local rng = M.rng(seed)
  local groups = {}
  for i, name in ipairs(names) do groups[i] = M.group(name) end
  local rows, truth = {}, {}
  for i = 1, n do
    local G = groups[rng(#groups)]
    local a, b, base
    repeat
      a, b = rng(G.order) - 1, rng(G.order) - 1
      if a ~= 0 and b ~= 0 then
        if dist == "cancel" then
          base = cancel_facts(G, a, b)
        else
          local ts = M.triplets(G, a, b)
          base = #ts > 0 and ts[rng(#ts)] or nil
        end
      end
    until a ~= 0 and b ~= 0 and base
    local sym = assign(G.order, rng)
    local row, tr = layout(G, sym, fill(base, k, rng), a, b)
    tr.rules = mp.tasks.algebra_rules(row, tr.query.a, tr.query.b, tr.query.answer, k)
    tr.construction = dist
    rows[i], truth[i] = row, tr
  end
  return mp.tensor(rows), truth
end

-- The paper's copy-patching pairs: each source (a copy or commuted-copy
-- sequence) gets a base sequence in which no copy is possible (query pair and
-- its commuted pair held out) with another answer and another query pair.
-- Returns a list of base indices, one per source, or nil and a message when
-- the bases run out (each base is used once).
function M.counterfactual_pairs(src_truth, base_truth)
  local used, idx = {}, {}
  for i, s in ipairs(src_truth) do
    for j, b in ipairs(base_truth) do
      if not used[j] and b.query.answer ~= s.query.answer and not (b.query.a == s.query.a and b.query.b == s.query.b) then
        used[j], idx[i] = true, j
        break
      end
    end
    if not idx[i] then return nil, ("no base sequence left for source %d"):format(i) end
  end
  return idx
end

return M
