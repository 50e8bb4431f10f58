-- test_rope_id_controls.lua — the controls of the rope_id probe's learned
-- claims (probes/lib/rope_id.lua, "controls" section): the untrained models
-- (every scheme's text model at its initialization), the rotation-free sink
-- controls, the learned-clustering and sink-kind rows, and a preset's
-- seeds_max. One mode, `run`: a tiny quick run (3 steps, 2 sequences) with
-- --seeds-max 2, checked against computations written out here (~1-2 min):
--   * seed 1 cannot have sink heads in both RoPE and RoPE-ID in 3 of 1 seeds,
--     so seed 2 joins: the run file's seed list, the report's header and its
--     line saying why;
--   * the untrained controls in the file equal a model built here with the
--     trained model's shape and init seed (mp.model.new, not the library's
--     constructor), on the geometry's sequences drawn here the same way: the
--     pre-rotation key stable rank of the prefix [0, L) per head
--     (mp.analyze.spectrum of hook_k rows), and NoPE's rotated = pre-rotation;
--   * the schemes share their initial weights (layer 0's pre-rotation keys do
--     not see the position: equal across schemes at initialization);
--   * the rows read the file: C11's per-seed values and controls are the
--     head means of the trained and untrained srank at L, C1's second test
--     the trained minus untrained excess at 4L, each recomputed here;
--   * --rejudge reproduces verdicts.tsv and report.txt byte for byte;
--   * --seeds-max below the seed list is refused.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local rid = require "rope_id"

-- refused: fewer seeds allowed than given
do
  local out = os.tmpname(); os.remove(out)
  local p = io.popen(("%s rope_id --quick --seeds 1,2 --seeds-max 1 --out %s 2>&1"):format(arg[-1], out))
  local msg = p:read("a")
  check(not p:close() and msg:find("--seeds-max must be in 2..64", 1, true) ~= nil
        and not os.execute("test -e " .. out), "--seeds-max 1 with two seeds refused: " .. msg)
end

local report, ok, out, dir = t.run_probe("rope_id", "--quick --steps 3 --sequences 2 --seeds-max 2 --format svg")
check(ok, "rope_id (tiny, --seeds-max 2) exited non-zero:\n" .. report)
check(report:find("seeds with sink heads in both RoPE and RoPE%-ID: %d of 1 %(3 wanted%): adding seed 2 %(at most 2 "
                  .. "seeds%)") ~= nil, "the report says why seed 2 joins")
local rep = t.read_file(out .. "/report.txt") or ""
check(rep:find("== mechprobe rope_id (quick; seeds 1,2) ==", 1, true) ~= nil, "report.txt's header names both seeds")
check(rep:find("\n== seed 1 ==\n", 1, true) and rep:find("\n== seed 2 ==\n", 1, true), "a section per seed")
for _, s in ipairs{1, 2} do
  check(rep:find(("\nsink heads %%(seed %d; first%%-token attention > 0%%.30 inside L%%): RoPE %%d+, RoPE%%-ID %%d+, NoPE %%d+, "
                  .. "DroPE %%d+; untrained RoPE %%d+, RoPE%%-ID %%d+, NoPE %%d+\n"):format(s)) ~= nil,
        ("seed %d's sink-head counts logged"):format(s))
end

local f <close> = mp.h5.open(out .. "/rope_id.h5")
local A = f:attrs("/")
check(tostring(A.seeds) == "1,2", "the run file's seeds: " .. tostring(A.seeds))
local o = rid.preset("quick")
local L, Tmax = A.L, f:read("lengths"):get(f:read("lengths"):numel())
local NL, H = o.n_layer, o.n_head

-- the geometry's sequences of seed s, drawn here as the probe draws them
local function geo_tokens(s)
  local text = mp.tasks.text{path = out .. "/corpus.txt", ctx = L, seed = s}
  text:seed(s * 100 + 13)
  local gtok = text:sample(2, Tmax, "val")
  local toks = {}
  for b = 1, 2 do
    local row = {}
    for p = 1, Tmax do row[p] = math.tointeger(gtok:get(b, p)) end
    toks[b] = row
  end
  return toks
end
-- per head (layer-major) the pre-rotation key stable rank of the rows [0, L),
-- mean over the sequences, of a model built here with the trained shape and init seed
local function init_srank_pre(pos, s, toks)
  local m = mp.model.new{d_model = o.d_model, n_layer = NL, n_head = H, d_head = o.d_head, d_mlp = o.d_mlp, vocab = 257,
                         ctx = L, pos = pos, seed = s}
  local res = {}
  for _, tk in ipairs(toks) do
    local _, cache = m:run_with_cache({tk}, {names = "blocks.*.attn.hook_k", logits = "none"})
    for l = 0, NL - 1 do
      local k = cache[("blocks.%d.attn.hook_k"):format(l)][1]:permute{2, 1, 3}
      for h = 0, H - 1 do
        local i = l * H + h + 1
        res[i] = (res[i] or 0) + mp.analyze.spectrum(k[h + 1]:narrow(1, L)).stable_rank / #toks
      end
    end
  end
  m:close()
  return res
end
local function at(ds, j)            -- per head (layer-major) the value at prefix index j of [layers, heads, lengths]
  local r = {}
  for l = 1, ds:size(1) do for h = 1, ds:size(2) do r[#r + 1] = ds:get(l, h, j) end end
  return r
end
local function avg(xs) local s = 0; for _, x in ipairs(xs) do s = s + x end; return s / #xs end

local c11_tr, c11_un, c1_ex, c1_uex = {rope = {}, rope_id = {}}, {rope = {}, rope_id = {}}, {}, {}
for si, s in ipairs{1, 2} do
  local toks = geo_tokens(s)
  for _, pos in ipairs(rid.schemes) do
    local g = ("seeds/%d/untrained/%s/"):format(s, pos)
    check(f:has(g .. "prefix/srank_pre") and f:has(g .. "geometry/first_inside"), ("seed %d: %s's untrained control stored"):format(s, pos))
  end
  -- the untrained RoPE and RoPE-ID models = built here (same shape, init seed, sequences)
  local worst = 0
  for _, pos in ipairs{"rope", "rope_id"} do
    local want = init_srank_pre(pos, s, toks)
    local got = at(f:read(("seeds/%d/untrained/%s/prefix/srank_pre"):format(s, pos)), 1)
    check(#got == #want, pos .. ": one value per head")
    for i = 1, #want do worst = math.max(worst, math.abs(got[i] - want[i]) / want[i]) end
  end
  near(worst, 0, 1e-4, ("seed %d: the untrained controls' pre-rotation srank at L = a model built here at its init seed"):format(s))
  -- no rotation: NoPE's rotated keys are its pre-rotation keys
  local nr = f:read(("seeds/%d/untrained/none/prefix/srank_rot"):format(s))
  local np = f:read(("seeds/%d/untrained/none/prefix/srank_pre"):format(s))
  check(nr:allclose(np, 1e-5, 1e-6), ("seed %d: untrained NoPE rotated = pre-rotation"):format(s))
  -- the schemes share their initial weights: layer 0's pre-rotation keys agree
  local r0, n0 = f:read(("seeds/%d/untrained/rope/prefix/srank_pre"):format(s)), np
  local d0 = 0
  for h = 1, H do for j = 1, nr:size(3) do d0 = math.max(d0, math.abs(r0:get(1, h, j) - n0:get(1, h, j))) end end
  near(d0, 0, 1e-4, ("seed %d: layer 0's pre-rotation keys equal in RoPE and NoPE at initialization"):format(s))
  -- what the rows read, recomputed from the file
  for _, pos in ipairs{"rope", "rope_id"} do
    c11_tr[pos][si] = avg(at(f:read(("seeds/%d/variants/%s/prefix/srank_pre"):format(s, pos)), 1))
    c11_un[pos][si] = avg(at(f:read(("seeds/%d/untrained/%s/prefix/srank_pre"):format(s, pos)), 1))
  end
  local function excess(g)
    local rot, pre = f:read(g .. "srank_rot"), f:read(g .. "srank_pre")
    local j = rot:size(3)                                   -- quick: lengths L, 2L, 4L; C1 reads 4L
    local a, b = at(rot, j), at(rot, 1)
    local c, d = at(pre, j), at(pre, 1)
    local e = 0
    for i = 1, #a do e = e + (a[i] / b[i] - c[i] / d[i]) / #a end
    return e
  end
  c1_ex[si] = excess(("seeds/%d/variants/rope/prefix/"):format(s))
  c1_uex[si] = excess(("seeds/%d/untrained/rope/prefix/"):format(s))
end
do
  local v1, c1 = f:read("verdicts/C11/t1/values"), f:read("verdicts/C11/t1/control")
  local v2, c2 = f:read("verdicts/C11/t2/values"), f:read("verdicts/C11/t2/control")
  for si = 1, 2 do
    near(v1:get(si), c11_tr.rope[si], 1e-5, ("C11 seed %d: RoPE's trained srank at L, the file's head mean"):format(si))
    near(c1:get(si), c11_un.rope[si], 1e-5, ("C11 seed %d: RoPE's untrained srank at L"):format(si))
    near(v2:get(si), c11_tr.rope_id[si], 1e-5, ("C11 seed %d: RoPE-ID's trained srank at L"):format(si))
    near(c2:get(si), c11_un.rope_id[si], 1e-5, ("C11 seed %d: RoPE-ID's untrained srank at L"):format(si))
  end
  local e, u = f:read("verdicts/C1/t2/values"), f:read("verdicts/C1/t2/control")
  for si = 1, 2 do
    near(e:get(si), c1_ex[si], 1e-5, ("C1 seed %d: RoPE's trained excess at 4L"):format(si))
    near(u:get(si), c1_uex[si], 1e-5, ("C1 seed %d: the untrained excess beside it"):format(si))
  end
  local a = f:attrs("verdicts/C11")
  check(a.n_seeds == "2" and a.word == "INCONCLUSIVE" and a.reason ~= "", "C11: 2 seeds, INCONCLUSIVE (" .. tostring(a.reason) .. ")")
  check(f:attrs("verdicts/C12").claim:find("paper's kind", 1, true) ~= nil, "C12: the sink-kind premise row")
  check(f:attrs("verdicts/C4").statistic:find("rotation-free control", 1, true) ~= nil, "C4 judged against the controls")
end
f:close()
-- --rejudge: the same rows from the file alone
local tsv0, rep0 = t.read_file(out .. "/verdicts.tsv"), rep
local ph = io.popen(("%s rope_id --rejudge --out %s 2>&1"):format(arg[-1], out))
local said = ph:read("a")
check(ph:close() and said:find("VERDICT C12 |", 1, true) ~= nil, "rope_id --rejudge ran:\n" .. said)
check(t.read_file(out .. "/verdicts.tsv") == tsv0, "rejudge: verdicts.tsv unchanged")
check(t.read_file(out .. "/report.txt") == rep0, "rejudge: report.txt unchanged")
os.execute("rm -rf " .. dir)
t.finish("test_rope_id_controls")
