-- test_rope_id.lua — the rope_id probe (issue 8). Modes:
--   unit   the library's helpers against independent computations: windowed
--          loss against m:loss, passkey accuracy on hand-made logits, and the
--          per-window head geometry (first-token attention, ||k_0|| ratio,
--          share of positive max q.k, stable rank, centroid cosine) against
--          sums written out here from the captured q, k and patterns (~1 s);
--   resume `--resume` on a tiny quick run: all models reused (same verdicts),
--          a missing / unrecorded / corrupt / stale model trained again to the
--          same loss, the record parser refusing partial records,
--          other settings refused;
--   quick  `mechprobe rope_id --quick` end to end (~40 s): it exits 0, its
--          verdict table parses (12 rows of the engine's 6 fields, a rule for
--          each), every figure, report.txt and the HDF5 file exist, and the
--          file's numbers agree with the printed tables and with each other;
--   rejudge `--rejudge` on the small stored run tests/data/rejudge/rope_id
--          (--quick, seeds 1-3; a copy in a temporary folder) reproduces its
--          verdicts.tsv and report.txt byte for byte (<1 s).
local mode = arg[1] or "unit"
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near

local src = os.getenv("MP_SRC")
if src then package.path = src .. "/probes/lib/?.lua;" .. package.path end
local rid = require "rope_id"

if mode == "unit" then
  -- option errors: a non-zero exit, a message naming the option, no output folder
  for _, c in ipairs{{"--text-steps 0", "--text-steps must be >= 1"}, {"--steps 0", "--steps must be >= 1"},
                     {"--length 100", "--length must be a multiple of 64"}, {"--preset huge", "--preset must be"},
                     {"--seeds 2,3,2", "--seeds: seed 2 given twice"}} do
    local out = os.tmpname(); os.remove(out)
    local p = io.popen(("%s rope_id %s --out %s 2>&1"):format(arg[-1], c[1], out))
    local msg = p:read("a")
    local ok = p:close()
    check(not ok and msg:find(c[2], 1, true) ~= nil and not os.execute("test -e " .. out),
          ("rope_id %s: refused with '%s'"):format(c[1], c[2]))
    os.execute("rm -rf " .. out)
  end
  -- windowed loss: one window over everything is m:loss; a partition into equal
  -- windows averages back to it (every text position has a target)
  local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
  local bytes = rid.build_corpus(dir .. "/corpus.txt")
  local f = io.open(dir .. "/corpus.txt", "rb")
  check(f and #f:read("a") == bytes and bytes > 10000, "corpus written, " .. tostring(bytes) .. " bytes")
  if f then f:close() end
  local text = mp.tasks.text{path = dir .. "/corpus.txt", ctx = 16, seed = 3}
  local m = mp.model.new{d_model = 32, n_layer = 2, n_head = 4, d_head = 8, d_mlp = 64, vocab = 257, ctx = 16,
                         pos = "rope", seed = 5}
  local tok, tgt = text:sample(3, 32, "val")
  local full = m:loss(tok, tgt)
  near(rid.window_loss(m, tok, tgt, 0, 32), full, 1e-6, "window over all positions = m:loss")
  local s = 0
  for w = 0, 3 do s = s + rid.window_loss(m, tok, tgt, 8 * w, 8) / 4 end
  near(s, full, 1e-5, "mean of 4 equal windows = m:loss")
  -- all windows from one forward pass = one m:loss per window
  local wl = rid.window_losses(m, tok, tgt, 8, 4)
  local worst = 0
  for w = 0, 3 do worst = math.max(worst, math.abs(wl[w + 1] - rid.window_loss(m, tok, tgt, 8 * w, 8))) end
  near(worst, 0, 1e-4, "window_losses (one pass) = window_loss per window (worst difference)")

  -- passkey accuracy on a stub model whose logits are known: sequence 1 right,
  -- sequence 2 with its second digit wrong -> exact 0.5, digits 0.75
  local V = 12
  local logits = mp.zeros{2, 6, V}
  local function favour(b, p, id) logits:set(5, b, p, id + 1) end
  favour(1, 4, 3); favour(1, 5, 7)         -- digits at 1-based positions 5, 6 are predicted at 4, 5
  favour(2, 4, 1); favour(2, 5, 9)
  local stub = {forward = function() return logits end}
  local ex, dg = rid.retrieval_accuracy(stub, mp.zeros{2, 6}, {answer_pos = {5, 5}, value = {{3, 7}, {1, 2}}})
  near(ex, 0.5, 0, "exact-match accuracy")
  near(dg, 0.75, 0, "digit accuracy")

  -- geometry against sums written out from the cache
  local W, T = 8, 32
  local mm = mp.model.new{d_model = 32, n_layer = 2, n_head = 4, n_kv_head = 2, d_head = 8, d_mlp = 64, vocab = 257,
                          ctx = 16, pos = "rope_id", seed = 9}
  local toks = {}
  for b = 1, 2 do
    toks[b] = {256}
    for t = 2, T do toks[b][t] = (t * 37 + b * 11) % 256 end
  end
  local G = rid.geometry(mm, toks, W)
  local cfg = mm.config
  local worst = {first = 0, k0 = 0, pos = 0, srank = 0, cos = 0, s1 = 0}
  local acc = {}
  for b = 1, 2 do
    local _, cache = mm:run_with_cache({toks[b]}, {names = "blocks.*.attn.hook_rot_q,blocks.*.attn.hook_rot_k,"
                                                   .. "blocks.*.attn.hook_pattern"})
    for l = 0, cfg.n_layer - 1 do
      local q = cache[("blocks.%d.attn.hook_rot_q"):format(l)]
      local k = cache[("blocks.%d.attn.hook_rot_k"):format(l)]
      local pat = cache[("blocks.%d.attn.hook_pattern"):format(l)]
      for h = 0, cfg.n_head - 1 do
        local kv = h // (cfg.n_head // cfg.n_kv_head)
        local function dot(t, s)
          local d = 0
          for i = 1, cfg.d_head do d = d + q:get(1, t, h + 1, i) * k:get(1, s, kv + 1, i) end
          return d
        end
        local function knorm(t)
          local d = 0
          for i = 1, cfg.d_head do d = d + k:get(1, t, kv + 1, i) ^ 2 end
          return math.sqrt(d)
        end
        for w = 1, T // W do
          local a = w == 1 and 2 or (w - 1) * W + 1
          local first, pos, nsum, n = 0, 0, 0, 0
          for t = a, w * W do
            first = first + pat:get(1, h + 1, t, 1)
            local best = -math.huge
            for s2 = 2, t do best = math.max(best, dot(t, s2)) end
            if best > 0 then pos = pos + 1 end
            nsum = nsum + knorm(t)
            n = n + 1
          end
          local key = ("%d.%d.%d"):format(l, h, w)
          local e = acc[key] or {first = 0, pos = 0, k0 = 0}
          e.first = e.first + first / n / 2
          e.pos = e.pos + pos / n / 2
          e.k0 = e.k0 + knorm(1) / (nsum / n) / 2
          acc[key] = e
        end
      end
    end
  end
  for l = 0, cfg.n_layer - 1 do
    for h = 0, cfg.n_head - 1 do
      for w = 1, T // W do
        local e = acc[("%d.%d.%d"):format(l, h, w)]
        worst.first = math.max(worst.first, math.abs(e.first - G.first[l + 1][h + 1][w]))
        worst.pos = math.max(worst.pos, math.abs(e.pos - G.maxqk_pos[l + 1][h + 1][w]))
        worst.k0 = math.max(worst.k0, math.abs(e.k0 - G.k0_ratio[l + 1][h + 1][w]) / e.k0)
        check(G.srank_k[l + 1][h + 1][w] >= 1 - 1e-5 and G.srank_k[l + 1][h + 1][w] <= cfg.d_head + 1e-5,
              "stable rank in [1, d_head]")
        check(math.abs(G.cos_qk[l + 1][h + 1][w]) <= 1 + 1e-6, "cosine in [-1, 1]")
      end
    end
  end
  near(worst.first, 0, 1e-5, "first-token attention per window (worst difference)")
  near(worst.pos, 0, 1e-9, "share of positive max q.k over keys 1..t (worst difference)")
  near(worst.k0, 0, 1e-4, "||k_0|| / mean ||k|| per window (worst relative difference)")
  -- stable rank of the keys of one sequence's windows against ||X||_F^2 / sigma_1^2
  -- with sigma_1^2 by power iteration on X'X (written out here)
  local G1 = rid.geometry(mm, {toks[1]}, W)
  local _, cache = mm:run_with_cache({toks[1]}, {names = "blocks.*.attn.hook_rot_k"})
  local Dh = cfg.d_head
  for l = 0, cfg.n_layer - 1 do
    local k = cache[("blocks.%d.attn.hook_rot_k"):format(l)]
    for h = 0, cfg.n_head - 1 do
      local kv = h // (cfg.n_head // cfg.n_kv_head)
      for w = 1, T // W do
        local a = w == 1 and 2 or (w - 1) * W + 1
        local C, fro = {}, 0
        for i = 1, Dh do C[i] = {}; for j = 1, Dh do C[i][j] = 0 end end
        for t = a, w * W do
          for i = 1, Dh do
            local xi = k:get(1, t, kv + 1, i)
            fro = fro + xi * xi
            for j = 1, Dh do C[i][j] = C[i][j] + xi * k:get(1, t, kv + 1, j) end
          end
        end
        local v, lam = {}, 0
        for i = 1, Dh do v[i] = 1 + i / 10 end
        for _ = 1, 500 do
          local u, nu = {}, 0
          for i = 1, Dh do
            local x = 0
            for j = 1, Dh do x = x + C[i][j] * v[j] end
            u[i] = x
            nu = nu + x * x
          end
          nu = math.sqrt(nu)
          lam = nu
          for i = 1, Dh do v[i] = u[i] / nu end
        end
        worst.srank = math.max(worst.srank, math.abs(fro / lam - G1.srank_k[l + 1][h + 1][w]) / (fro / lam))
        worst.s1 = math.max(worst.s1, math.abs(lam / fro - G1.sigma1_k[l + 1][h + 1][w]))
      end
    end
  end
  near(worst.srank, 0, 1e-3, "stable rank of the keys per window (worst relative difference)")
  near(worst.s1, 0, 1e-3, "sigma1 share of the keys per window (worst difference)")
  check(#G.first == 2 and #G.first[1] == 4 and #G.first[1][1] == T // W, "geometry shape [layers][heads][windows]")

  -- ---- prefix-frame geometry (rope_id_geo) on planted keys
  local geo, rules = require "rope_id_geo", require "rope_id_rules"
  local Dh, LL, TT = 16, 64, 256
  local freq = {}                                   -- RoPE's frequencies, theta 10000, d_head 16
  for i = 0, Dh // 2 - 1 do freq[i + 1] = 10000 ^ (-2 * i / Dh) end
  -- keys k_s = c + noise (a "cluster"), pre-rotation, and R(s) k_s rotated by
  -- pair-wise angles s * freq (R(s) as RoPE: pair i = channels 2i+1, 2i+2)
  local function planted(c, noise, seed, shift)
    local pre, rot = mp.zeros{TT, Dh}, mp.zeros{TT, Dh}
    local x = seed
    local function rnd() x = (x * 1103515245 + 12345) % 2147483648; return x / 2147483648 - 0.5 end
    for s = 0, TT - 1 do
      local k = {}
      for j = 1, Dh do k[j] = c[j] + noise * rnd(); pre:set(k[j], s + 1, j) end
      for i = 1, Dh // 2 do
        local a = (s - (shift or 0)) * freq[i]
        local u, v = k[2 * i - 1], k[2 * i]
        rot:set(math.cos(a) * u - math.sin(a) * v, s + 1, 2 * i - 1)
        rot:set(math.sin(a) * u + math.cos(a) * v, s + 1, 2 * i)
      end
    end
    return pre, rot
  end
  local function unit(pair, amp)             -- a centre in one channel pair (0-based pair), amplitude amp
    local c = {}
    for j = 1, Dh do c[j] = 0 end
    c[2 * pair + 1] = amp
    return c
  end
  -- closed form: a constant key in one pair rotated at w: the rows are
  -- a (cos ws, sin ws), s < n; X'X has eigenvalues n a^2/2 +- (a^2/2)|sin(nw)/sin(w)|,
  -- so srank = 2n / (n + |sin(nw) / sin w|)
  for _, pair in ipairs{3, 4, 5} do
    local _, rot = planted(unit(pair, 2), 0, 1)
    local st = geo.prefix_stats(rot, {LL, TT}, rot)
    local w = freq[pair + 1]
    for i, n in ipairs{LL, TT} do
      local want = 2 * n / (n + math.abs(math.sin(n * w) / math.sin(w)))
      near(st.srank[i], want, 1e-4 * want, ("prefix srank of one pair rotating at %.4g over [0, %d)"):format(w, n))
      near(st.s1[i], 1 / want, 1e-4, "sigma1 share = 1 / stable rank")
      near(st.cos[i], 1, 1e-6, "centroid cosine of a cloud with itself")
    end
  end
  -- the query's frame: the prefix statistics of R(s - t) k_s (every key turned
  -- back by the query's R(t)) equal those of R(s) k_s
  do
    local c = unit(3, 1.5); c[9], c[3] = 0.7, -0.4
    local _, rot = planted(c, 0.3, 7)
    local _, rel = planted(c, 0.3, 7, 200)       -- R(s - 200) k_s
    local a, b = geo.prefix_stats(rot, {LL, TT}), geo.prefix_stats(rel, {LL, TT})
    for i = 1, 2 do near(a.srank[i], b.srank[i], 1e-4 * a.srank[i], "prefix srank is the same in the query's frame") end
    check(a.srank[2] > 1.2 * a.srank[1], ("prefix srank can change with t: %.3f -> %.3f"):format(a.srank[1], a.srank[2]))
  end
  -- C1 / C2 on planted heads: keys whose cluster lies in pairs that rotate by
  -- far more over [0, 4L) than over [0, L) (pairs 3, 4: 0.032, 0.01 rad/token)
  -- vs the same clusters unrotated vs a mixture with slow pairs (6, 7). C1 says
  -- RoPE's keys smear (SUPPORTED when they rotate); C2 says RoPE-ID's do NOT smear,
  -- on the same planted excess (SUPPORTED when they do not rotate), and needs a band.
  local function head_set(specs, rotate, octaves)
    local x = {rr = {}, rp = {}}
    for h, sp in ipairs(specs) do
      local c = {}
      for j = 1, Dh do c[j] = 0 end
      for pair, amp in pairs(sp) do c[2 * pair + 1] = amp end
      local pre, rot = planted(c, 0.05, h)
      local a, b = geo.prefix_stats(rotate and rot or pre, {LL, TT}), geo.prefix_stats(pre, {LL, TT})
      x.rr[h], x.rp[h] = a.srank[2] / a.srank[1], b.srank[2] / b.srank[1]
      near(a.s1[1] * a.srank[1], 1, 1e-4, "sigma1 share = 1 / stable rank (why C2 does not judge it)")
    end
    -- every planted head is its own draw of noise: here each stands for a seed
    local hs, good = {}, {loss_in = {}, untrained = {}}
    for h = 1, #specs do hs[h] = tostring(h); good.loss_in[h], good.untrained[h] = 2, 5.5 end
    -- the untrained control: the same clusters unrotated (no excess at initialization)
    local xx = {rot = x.rr, pre = x.rp, head_seed = hs, seeds = hs, text = {rope = good, rope_id = good}, T = TT, L = LL,
                u = {rot = x.rp, pre = x.rp, head_seed = hs},
                octaves = octaves or 3}
    return rules.C1(xx), rules.C2(xx)
  end
  local fast = {{[3] = 2}, {[4] = 2}, {[3] = 2, [4] = 1}, {[3] = 1, [4] = 2}, {[4] = 2, [5] = 0.5}}
  local mixed = {{[3] = 2}, {[7] = 2}, {[3] = 2, [4] = 1}, {[6] = 2}}
  local c1, c2 = head_set(fast, true)
  check(c1.word == "SUPPORTED" and c2.word == "NOT SUPPORTED",
        ("keys rotating into unseen angles: C1 %s [%.3f, %.3f], C2 %s"):format(c1.word, c1.lo, c1.hi, c2.word))
  c1, c2 = head_set(fast, false)
  check(c1.word == "NOT SUPPORTED" and c2.word == "SUPPORTED",
        ("unrotated clusters: C1 %s [%.3f, %.3f], C2 %s"):format(c1.word, c1.lo, c1.hi, c2.word))
  c1, c2 = head_set(mixed, true)
  check(c1.word == "INCONCLUSIVE" and c2.word == "INCONCLUSIVE",
        ("half the heads in slow pairs: C1 %s [%.3f, %.3f], C2 %s"):format(c1.word, c1.lo, c1.hi, c2.word))
  check(c1.n_seeds == 4 and c1.describe:find("4 heads", 1, true) and c1.rule:find("0.10", 1, true),
        "C1 row names its seeds, heads and rule")
  c1, c2 = head_set(fast, false, 1)
  check(c2.word == "INCONCLUSIVE" and c2.reason == "precondition absent" and c2.ours:find("1.0 octaves", 1, true) ~= nil,
        "C2 without a RoPE-ID band (1 octave) is INCONCLUSIVE: " .. c2.word)
  -- every other rule on planted numbers: test_rope_id_rules.lua
  os.execute("rm -rf " .. dir)
elseif mode == "resume" then
  -- ---- --resume: a tiny quick run, then runs that continue it
  local args = "--quick --steps 3 --sequences 2 --format svg"
  local report, ok, out, dir = t.run_probe("rope_id", args)
  check(ok, "rope_id (tiny) exited non-zero:\n" .. report)
  local mdir = out .. "/models/seed1"
  local function slurp(path) local f = io.open(path, "rb"); if not f then return nil end; local s = f:read("a"); f:close(); return s end
  local function rerun(extra)
    local p = io.popen(("%s rope_id %s %s --out %s 2>&1"):format(arg[-1], args, extra, out))
    local text = p:read("a")
    return text, p:close()
  end
  local function curves()                -- every model's final loss and record, as stored in rope_id.h5
    local f <close> = mp.h5.open(out .. "/rope_id.h5")
    local res = {}
    for _, task in ipairs(f:list("seeds/1/train")) do
      for _, name in ipairs(f:list("seeds/1/train/" .. task)) do
        local a = f:attrs(("seeds/1/train/%s/%s/loss_curve"):format(task, name))
        res[task .. "/" .. name] = {loss = a.final_loss, reused = a.reused,
                                    curve = f:read(("seeds/1/train/%s/%s/loss_curve"):format(task, name)):totable()}
      end
    end
    return res
  end
  local first, v0 = curves(), slurp(out .. "/verdicts.tsv")
  local n = 0
  for _, c in pairs(first) do n = n + 1; check(c.reused == 0, "first run: nothing reused") end
  check(n == 24, ("24 models (20 schemes x tasks, 4 DroPE): %d"):format(n))
  -- every checkpoint has its record: settings, final loss and curve = the run file's
  do
    local a = rid.record_parse(slurp(mdir .. "/text_rope.record") or "")
    check(a and a.settings:find("task=text;", 1, true) and a.settings:find("steps=3;", 1, true),
          "record settings: " .. tostring(a and a.settings))
    check(a and math.abs(a.loss - first["text/rope"].loss) <= 1e-6 * a.loss and #a.curve == 3,
          "record final loss = the run file's (float32), 3 curve points")
    local d = rid.record_parse(slurp(mdir .. "/text_drope.record") or "")
    check(d and d.loss_dropped and d.base == ("%.17g"):format(a.loss), "DroPE record: loss_dropped, base = RoPE's loss")
    -- the parser refuses what is not a whole record
    for _, bad in ipairs{"", "hello\n", rid.RECORD_MAGIC .. "\nsettings a=1\nfinal_loss 1\nseconds 2\ncurve 3 1 2\n",
                         rid.RECORD_MAGIC .. "\nsettings a=1\nfinal_loss x\nseconds 2\ncurve 1 1\n",
                         rid.RECORD_MAGIC .. "\nsettings a=1\nfinal_loss 1\nseconds 2\n"} do
      check(rid.record_parse(bad) == nil, ("record parser refuses %q"):format(bad:sub(1, 60)))
    end
  end
  -- 1. all reused: nothing trained, the same verdicts and curves, `reused` = 1
  local text, ok1 = rerun("--resume")
  local _, nre = text:gsub("reusing ", "")
  check(ok1 and nre == 24 and not text:find("training rope on", 1, true),
        ("--resume reuses all 24 models (%d):\n%s"):format(nre, text))
  check(text:find("resumed: 24 of 24 models reused", 1, true) ~= nil, "report says 24 of 24 reused")
  check(slurp(out .. "/verdicts.tsv") == v0, "resumed run: the same verdicts.tsv")
  local again = curves()
  for k, c in pairs(first) do
    check(again[k].reused == 1 and again[k].loss == c.loss and #again[k].curve == #c.curve
          and again[k].curve[#c.curve] == c.curve[#c.curve], k .. ": reused, same loss and curve")
  end
  -- 2. one checkpoint gone, one without its record (a run stopped between
  -- saving and recording), one record garbled, one checkpoint truncated (its
  -- record intact), a RoPE model's record changed (its DroPE model was made
  -- from another): those five are trained again, the rest reused; the
  -- retrained models reach the same final loss (same seed, same batches)
  os.remove(mdir .. "/ret_none.h5")
  os.remove(mdir .. "/multikey_half_rope.record")
  local function put(path, s) local f = assert(io.open(path, "wb")); f:write(s); f:close() end
  put(mdir .. "/text_high_freq.record", "\0\1garbage")
  put(mdir .. "/multikey_none.h5", slurp(mdir .. "/multikey_none.h5"):sub(1, 100))
  local vr = slurp(mdir .. "/vartrack_rope.record")
  put(mdir .. "/vartrack_rope.record", (vr:gsub("\nfinal_loss [^\n]+", "\nfinal_loss 123")))
  text, ok1 = rerun("--resume")
  _, nre = text:gsub("reusing ", "")
  check(ok1 and nre == 19, ("19 reused (%d):\n%s"):format(nre, text))
  for _, s in ipairs{"training none on ret", "training half_rope on multikey", "no training record",
                     "text_high_freq.record: not a rope_id training record", "training high_freq on text",
                     "multikey_none.h5: ", "training none on multikey", "DroPE on vartrack",
                     "made from an earlier RoPE model"} do
    check(text:find(s, 1, true) ~= nil, ("log says '%s'"):format(s))
  end
  again = curves()
  for _, k in ipairs{"retrieval/none", "multikey/half_rope", "text/high_freq", "multikey/none"} do
    check(again[k].reused == 0, k .. ": trained again")
    near(again[k].loss, first[k].loss, 1e-4 * math.abs(first[k].loss), k .. ": the same final loss when trained again")
  end
  check(again["vartrack/drope"].reused == 0 and again["vartrack/rope"].reused == 1, "vartrack: RoPE reused, DroPE retrained")
  -- 3. other settings: refused, naming the file and the difference; nothing rewritten
  local h5 = slurp(out .. "/rope_id.h5")
  text, ok1 = rerun("--resume --text-steps 4")
  check(not ok1 and text:find("text_rope.h5 was trained with other settings (steps 3 there, 4 here)", 1, true) ~= nil,
        "other settings refused, naming the file and setting:\n" .. text)
  check(slurp(out .. "/rope_id.h5") == h5 and not io.open(out .. "/rope_id.h5.tmp"), "refused run leaves the run file as it was")
  text, ok1 = rerun("--resume --rejudge")
  check(not ok1 and text:find("--resume trains", 1, true) ~= nil, "--resume with --rejudge refused")
  os.execute("rm -rf " .. dir)
elseif mode == "rejudge" then
  -- ---- --rejudge on a small stored run (tests/data/rejudge/rope_id: `mechprobe
  -- rope_id --quick --seeds 1,2,3 --format svg`, its run file, verdicts.tsv and
  -- report.txt kept): a copy in a temporary folder, re-judged from its run file
  -- alone, gives its verdicts.tsv and report.txt byte for byte, twice
  local data = os.getenv("MP_TESTDATA") or ((src or ".") .. "/tests/data")
  local stored = data .. "/rejudge/rope_id"
  local slurp = t.read_file
  local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
  local want = {}
  for _, name in ipairs{"rope_id.h5", "verdicts.tsv", "report.txt"} do
    want[name] = slurp(stored .. "/" .. name)
    check(want[name] ~= nil, "stored " .. name)
    local fo = io.open(dir .. "/" .. name, "wb"); fo:write(want[name] or ""); fo:close()
  end
  local verdicts = require "verdicts"
  local rows = verdicts.parse(want["report.txt"] or "")
  check(#rows == 12 and #verdicts.problems(rows) == 0, "the stored report: 12 well-formed verdict rows")
  -- the stored run predates the untrained controls: the rows that need them say so
  -- (C2 too, but at L = 64 its missing RoPE-ID band is the first premise to fail)
  for _, r in ipairs(rows) do
    if r[1] == "C2" then check(r[5] == "INCONCLUSIVE" and r[6] == "precondition absent", "C2: " .. r[4]) end
    if r[1] == "C1" or r[1] == "C11" then
      check(r[5] == "INCONCLUSIVE" and r[4]:find("no untrained control in this file", 1, true) ~= nil,
            r[1] .. " without the untrained control in the file: INCONCLUSIVE, says why: " .. r[4])
    end
  end
  local seeded = 0
  for _, r in ipairs(rows) do if r[4]:find("seeds ", 1, true) then seeded = seeded + 1 end end
  check(seeded == #rows, ("every stored row shows its per-seed values (%d of %d)"):format(seeded, #rows))
  for pass = 1, 2 do
    local ph = io.popen(("%s rope_id --rejudge --out %s 2>&1"):format(arg[-1], dir))
    local said = ph:read("a")
    check(ph:close() and said:find("VERDICT C1 |", 1, true) ~= nil, "rope_id --rejudge ran:\n" .. said)
    check(slurp(dir .. "/verdicts.tsv") == want["verdicts.tsv"], ("rejudge %d: verdicts.tsv byte for byte"):format(pass))
    check(slurp(dir .. "/report.txt") == want["report.txt"], ("rejudge %d: report.txt byte for byte"):format(pass))
  end
  do
    local f <close> = mp.h5.open(dir .. "/rope_id.h5", "r")
    local wrote = {}
    for _, id in ipairs(f:list("verdicts")) do wrote[#wrote + 1] = id end
    table.sort(wrote)
    check(table.concat(wrote, ",") == "C1,C10,C11,C12,C2,C3,C4,C5,C6,C7,C8,C9", "the run file's /verdicts: " .. table.concat(wrote, ","))
    check(f:attrs("verdicts/C1").seeds == "1,2,3" and f:read("verdicts/C1/t1/values"):numel() == 3,
          "/verdicts/C1: 3 seeds, one value each")
  end
  os.execute("rm -rf " .. dir)
elseif mode == "gpu" then
  -- ---- --preset gpu's shape at a tiny size, two seeds
  local report, ok, out, dir = t.run_probe("rope_id",
    "--preset gpu --steps 2 --length 64 --d-model 32 --sequences 1 --seeds 1,2 --format svg")
  check(ok, "rope_id --preset gpu (tiny) exited non-zero:\n" .. report)
  check(report:find("models: d_model 32, 8 layers x 8 heads (d_head 64)", 1, true) ~= nil, "gpu shape: 8 x 8 heads of 64")
  local verdicts = require "verdicts"
  local rows = verdicts.parse(report)
  local bad = verdicts.problems(rows)
  check(#rows == 12 and #bad == 0, ("12 well-formed verdict rows (%d, %s)"):format(#rows, table.concat(bad, "; ")))
  local f <close> = mp.h5.open(out .. "/rope_id.h5")
  local A = f:attrs("/")
  check(A.preset == "gpu" and A.L == 64 and tostring(A.seeds) == "1,2", "root attributes: gpu, L = 64, seeds 1,2")
  check(f:read("lengths"):numel() == 4 and f:read("lengths"):get(4) == 512, "lengths 1x..8x L")
  -- pooled = mean of the two seeds' numbers, with a t-interval (df 1: 12.706)
  local a, b = f:read("seeds/1/text/loss"), f:read("seeds/2/text/loss")
  local pl = f:read("pooled/loss/rope")
  local m, lo, hi = verdicts.mean_ci{a:get(1, 2), b:get(1, 2)}
  near(pl:get(1, 2), m, 1e-5, "pooled loss = mean of the seeds (stored as float)")
  near(pl:get(3, 2) - pl:get(1, 2), 12.706 * math.abs(a:get(1, 2) - b:get(1, 2)) / 2, 1e-4, "pooled interval half-width")
  check(f:read("seeds/2/variants/rope/prefix/srank_rot"):size(3) == 4, "seed 2 prefix geometry at 4 lengths")
  check(f:read("seeds/2/retrieval_tasks/vartrack/acc"):size(2) == 4, "seed 2 vartrack accuracy at 4 lengths")
  -- the C1 row: both seeds' heads (2 x 64), one value per seed, too few seeds
  local c1 = f:attrs("verdicts/C1")
  check(c1.n_seeds == "2" and c1.describe:find("128 heads in 2 seeds", 1, true) and c1.reason ~= "",
        ("C1 over 128 heads of 2 seeds (%s; %s)"):format(tostring(c1.n_seeds), tostring(c1.describe)))
  check(io.open(out .. "/models/seed2/vartrack_rope_id.h5") ~= nil, "seed 2's checkpoints")
  -- the keyed tasks: keys of one of 10 key symbols, trained on as many queries
  -- as fit in L = 64 (a query of a 1-symbol key and a 2-digit value is 8 tokens
  -- with its "."): multikey 1 + 4 x 6 + 7 = 32 tokens with one query, room for
  -- 4 more (5); vartrack 1 + 2 x (6 + 2 x 6) + 7 = 44, room for 2 more (3)
  check(report:find("keyed tasks: keys of 1 of 10 key symbols (not digits); trained on several queries a sequence "
                    .. "(multikey 5, vartrack 3; as many as fit in L, up to 8), evaluated on one", 1, true) ~= nil,
        "report states the keyed tasks' design")
  for name, q in pairs{multikey = 5, vartrack = 3} do
    local ta = f:attrs(("seeds/1/retrieval_tasks/%s/acc"):format(name))
    check(ta.key_symbols == 10 and ta.key_len == 1 and ta.train_queries == q,
          ("%s: key symbols 10, key_len 1, %d training queries (%s, %s, %s)"):format(name, q, tostring(ta.key_symbols),
            tostring(ta.key_len), tostring(ta.train_queries)))
  end
  os.execute("rm -rf " .. dir)
else
  -- ---- the quick probe end to end
  local report, ok, out, dir = t.run_probe("rope_id", "--quick --format svg")
  check(ok, "rope_id --quick exited non-zero:\n" .. report)

  -- verdict table: VERDICT id | claim | paper | ours | verdict | reason, and a RULE per row
  local verdicts = require "verdicts"
  local rows = verdicts.parse(report)
  local bad, ids = verdicts.problems(rows)
  check(#bad == 0, "verdict rows well formed:\n" .. table.concat(bad, "\n"))
  check(#rows == 12, ("12 verdict rows, got %d:\n%s"):format(#rows, report))
  for _, r in ipairs(rows) do check(#r == 6, r[1] .. ": the engine's 6 fields") end
  local function describe(id) return report:match("\nDESCRIBE " .. id .. ": ([^\n]*)") or "" end
  for id in pairs(ids) do check(report:find("\nRULE " .. id .. ": ", 1, true), "rule for " .. id) end

  for _, name in ipairs{"text_loss", "retrieval_accuracy", "retrieval_tasks", "geometry_schemes", "geometry_rope_variants",
                        "pca_sink_head"} do
    local fh = io.open(("%s/%s.svg"):format(out, name))
    check(fh ~= nil, "figure " .. name)
    if fh then check(fh:read("a"):find("<svg", 1, true), name .. " is SVG"); fh:close() end
  end
  local rf = io.open(out .. "/report.txt")
  check(rf ~= nil, "report.txt")
  if rf then
    local txt = rf:read("a")
    rf:close()
    check(txt:find("VERDICT C6", 1, true) and txt:find("ACC rope_id ", 1, true), "report.txt holds the tables")
  end
  check(io.open(out .. "/models/seed1/text_rope_id.h5") ~= nil, "checkpoint of the RoPE-ID text model")

  local f <close> = mp.h5.open(out .. "/rope_id.h5")
  local A = f:attrs("/")
  check(A.preset == "quick" and A.L == 64 and tostring(A.seeds) == "1" and A.band_octaves == 0, "root attributes")
  local variants = {}
  for v in tostring(A.variants):gmatch("[^,]+") do variants[#variants + 1] = v end
  check(#variants == 10, "10 variants, got " .. #variants)
  local lengths = f:read("lengths")
  check(lengths:numel() == 3 and lengths:get(1) == 64 and lengths:get(3) == 256, "lengths 64, 128, 256")
  local acc, loss = f:read("seeds/1/retrieval/acc"), f:read("seeds/1/text/loss")
  check(acc:size(1) == 10 and acc:size(2) == 3, "retrieval/acc [10, 3]")
  -- printed tables = file (to the printed precision)
  for i, v in ipairs(variants) do
    local row = report:match("\nACC " .. v:gsub("%p", "%%%0") .. "%s+([%d.%s]+)\n")
    local vals = {}
    for x in (row or ""):gmatch("[%d.]+") do vals[#vals + 1] = tonumber(x) end
    check(#vals == 3, "printed accuracy row of " .. v)
    -- printed with 3 decimals: off by at most half a unit (0.1875 prints as 0.188)
    for j = 1, #vals do near(vals[j], acc:get(i, j), 5e-4 + 1e-9, ("accuracy %s at %d"):format(v, lengths:get(j))) end
    local lrow = report:match("\n" .. v:gsub("%p", "%%%0") .. "%s+([%d.]+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+[%d.]+)\n")
    local lv = {}
    for x in (lrow or ""):gmatch("[%d.]+") do lv[#lv + 1] = tonumber(x) end
    check(#lv == 5, "printed loss row of " .. v)
    for j = 1, math.min(#lv, 3) do near(lv[j], loss:get(i, j), 5e-5 + 1e-7, ("text loss %s at %d"):format(v, lengths:get(j))) end
    -- consistency: per-variant datasets, and the loss at T = L is the mean of the windows inside L
    local g = "seeds/1/variants/" .. v
    near(f:read(g .. "/retrieval_acc"):get(2), acc:get(i, 2), 1e-7, v .. " retrieval_acc = table")
    local lw = f:attrs(g .. "/text_loss_window")
    if not ({rope_pi = true, rope_ntk = true, rope_yarn = true})[v] then   -- the scaled ones depend on T
      near(lw.inside, loss:get(i, 1), 1e-4, v .. ": loss at T = L = mean of the windows inside L")
    end
    if #lv == 5 then near(lv[5], lw.past, 5e-5, v .. ": printed loss past L") end
    local first = f:read(g .. "/geometry/first")
    check(first:dim() == 3 and first:size(1) == 2 and first:size(2) == 4 and first:size(3) == 16,
          v .. " geometry [layers, heads, windows]")
    check(first:min() >= 0 and first:max() <= 1 + 1e-6, v .. " first-token attention in [0, 1]")
    check(f:read(g .. "/pca_sink_head"):size(1) == 4, v .. " PCA projections")
    -- prefix geometry [layers, heads, lengths]; without rotation (none, DroPE)
    -- the post-rotation keys are the pre-rotation ones
    local pr, pp = f:read(g .. "/prefix/srank_rot"), f:read(g .. "/prefix/srank_pre")
    check(pr:dim() == 3 and pr:size(1) == 2 and pr:size(2) == 4 and pr:size(3) == 3, v .. " prefix [layers, heads, lengths]")
    local dmax = 0
    for l = 1, 2 do for h = 1, 4 do for j = 1, 3 do dmax = math.max(dmax, math.abs(pr:get(l, h, j) - pp:get(l, h, j))) end end end
    if v == "none" or v == "drope" then near(dmax, 0, 1e-4, v .. ": rotated = pre-rotation prefix srank") end
    if v == "rope" then check(dmax > 0.1, "rope: rotation changes the prefix srank") end
    -- the pooled row of one seed is the seed's value
    local prow = report:match("\nPOOLED loss%s+" .. v:gsub("%p", "%%%0") .. "%s+T=%d+ ([%d.]+)")
    near(tonumber(prow) or -1, loss:get(i, 1), 5e-4 + 1e-9, v .. ": pooled loss row at L")
  end
  -- verdicts in the file = printed
  for _, r in ipairs(rows) do
    local va = f:attrs("verdicts/" .. r[1])
    check(va.word == r[5] and va.reason == (r[6] == "-" and "" or r[6]), r[1] .. " verdict in the file: " .. tostring(va.word))
    check(va.claim == r[2], r[1] .. " claim in the file")
    -- the sink rows (C3-C5, C10) count only the seeds with sink heads: none where this
    -- build's rounding grew none (seen under ASan), then the premise is absent
    local seeds_ok = va.n_seeds == "1" or (va.n_seeds == "0" and (r[1]:match("^C[345]$") or r[1] == "C12")
                                           and r[6] == "precondition absent")
    check(seeds_ok and f:read("verdicts/" .. r[1] .. "/t1/interval"):numel() == 3,
      ("%s: one seed (%s), its interval"):format(r[1], tostring(va.n_seeds)))
  end
  -- C1 quotes RoPE's mean prefix srank ratio [0, 4L) / [0, L) of the file
  do
    local pr = f:read("seeds/1/variants/rope/prefix/srank_rot")
    local sum = 0
    for l = 1, 2 do for h = 1, 4 do sum = sum + pr:get(l, h, 3) / pr:get(l, h, 1) / 8 end end
    local q = tonumber(describe("C1"):match("rotated x([%d.]+)"))
    near(q or -1, sum, 5e-3 + 1e-9, "C1 quotes the file's prefix srank ratio")
    -- quick: one seed (the rules' intervals are over seeds: none with one) and
    -- L = 64 without a RoPE-ID band: no row can decide
    for _, r in ipairs(rows) do
      if r[1]:match("^C%d$") then check(r[5] == "INCONCLUSIVE", r[1] .. " inconclusive with one seed at L = 64") end
    end
    for _, id in ipairs{"C2", "C5", "C7"} do
      for _, r in ipairs(rows) do
        if r[1] == id then check(r[6] == "precondition absent" or r[6] == "not learned at this scale",
                                 id .. ": no RoPE-ID band at L = 64 (or not learned): " .. r[6]) end
      end
    end
  end
  -- verdicts.tsv = printed (the engine's columns)
  do
    local fh = io.open(out .. "/verdicts.tsv")
    check(fh ~= nil, "verdicts.tsv")
    local n, same, col = 0, 0, {}
    for line in (fh and fh:read("a") or ""):gmatch("[^\n]+") do
      local fld = {}
      for x in (line .. "\t"):gmatch("(.-)\t") do fld[#fld + 1] = x end
      if n == 0 then
        for i, name in ipairs(fld) do col[name] = i end
        check(#fld == #verdicts.COLUMNS, "verdicts.tsv has the engine's columns")
      end
      for _, r in ipairs(rows) do
        if r[1] == fld[1] and r[5] == fld[col.word] and r[6] == (fld[col.reason] or "") then same = same + 1 end
      end
      n = n + 1
    end
    if fh then fh:close() end
    check(n == 13 and same == 12, ("verdicts.tsv: header + 12 rows agreeing with the report (%d lines, %d agree)"):format(n, same))
  end
  -- the other retrieval tasks: printed TASKACC rows = file, chance stated; C6
  -- (multikey) and C8 (vartrack) quote the file's accuracies at 2L
  for _, task in ipairs{{"multikey", "C6", 0.25}, {"vartrack", "C8", 0.5}} do
    local ta = f:read(("seeds/1/retrieval_tasks/%s/acc"):format(task[1]))
    check(ta:size(1) == 10 and ta:size(2) == 3, task[1] .. " accuracy [10, 3]")
    near(f:attrs(("seeds/1/retrieval_tasks/%s/acc"):format(task[1])).chance, task[3], 1e-12, task[1] .. " chance")
    for i, v in ipairs(variants) do
      local row = report:match("\nTASKACC " .. task[1] .. "%s+" .. v:gsub("%p", "%%%0") .. "%s+([%d.%s]+)\n")
      local vals = {}
      for x in (row or ""):gmatch("[%d.]+") do vals[#vals + 1] = tonumber(x) end
      check(#vals == 3, ("printed %s row of %s"):format(task[1], v))
      for j = 1, #vals do near(vals[j], ta:get(i, j), 5e-4 + 1e-9, ("%s %s at %d"):format(task[1], v, lengths:get(j))) end
    end
    local ours = describe(task[2])
    local ar, ai = ours:match("; at 128: RoPE ([%d.]+), RoPE%-ID ([%d.]+)")
    local ir, ii
    for i, v in ipairs(variants) do if v == "rope" then ir = i elseif v == "rope_id" then ii = i end end
    check(ar and math.abs(tonumber(ar) - ta:get(ir, 2)) <= 5e-4 + 1e-9 and math.abs(tonumber(ai) - ta:get(ii, 2)) <= 5e-4 + 1e-9,
          task[2] .. " quotes the accuracies at 2L: " .. tostring(ours))
  end
  -- C9 (passkey) quotes the accuracies at 2L
  local c6 = describe("C9")
  local ar, ai = c6:match("; at 128: RoPE ([%d.]+), RoPE%-ID ([%d.]+)")
  local irope, iid
  for i, v in ipairs(variants) do if v == "rope" then irope = i elseif v == "rope_id" then iid = i end end
  check(ar and math.abs(tonumber(ar) - acc:get(irope, 2)) <= 5e-4 + 1e-9 and math.abs(tonumber(ai) - acc:get(iid, 2)) <= 5e-4 + 1e-9,
        "C9 quotes the passkey accuracies at 2L: " .. tostring(c6))
  -- --rejudge rebuilds every verdict from rope_id.h5 alone (no checkpoint, no
  -- training): the same rows, byte for byte, in verdicts.tsv and report.txt
  f:close()
  local slurp = t.read_file
  local tsv0, rep0 = slurp(out .. "/verdicts.tsv"), slurp(out .. "/report.txt")
  os.execute("rm -rf " .. out .. "/models")
  local ph = io.popen(("%s rope_id --rejudge --out %s 2>&1"):format(arg[-1], out))
  local said = ph:read("a")
  local ok2 = ph:close()
  check(ok2 and said:find("VERDICT C5 |", 1, true) ~= nil, "rope_id --rejudge ran:\n" .. said)
  check(tsv0 ~= nil and slurp(out .. "/verdicts.tsv") == tsv0, "rejudge: verdicts.tsv unchanged")
  check(rep0 ~= nil and slurp(out .. "/report.txt") == rep0, "rejudge: report.txt unchanged")
  ph = io.popen(("%s rope_id --rejudge --out %s/none 2>&1"):format(arg[-1], out))
  said = ph:read("a")
  check(not ph:close() and said:find("no such run file", 1, true) ~= nil, "rejudge of a folder without a run: " .. said)

  -- --merge pools another run's seeds into this one. The other run here is
  -- this run's seed 1 written again as seed 7 (a copy made below with mp.h5):
  -- two identical seeds, so every pooled mean equals seed 1's value and every
  -- interval has zero width (closed form); the verdict rows count 2 seeds; a
  -- --rejudge of the merged run reproduces its verdicts.tsv; bad merges fail
  -- and change nothing.
  local function copy_tree(src, dst, from, to)
    for _, name in ipairs(src:list(from)) do
      local _, kind = src:has(from .. "/" .. name)
      if kind == "group" then copy_tree(src, dst, from .. "/" .. name, to .. "/" .. name)
      else
        dst:write(to .. "/" .. name, src:read(from .. "/" .. name))
        for k, v in pairs(src:attrs(from .. "/" .. name)) do dst:set_attr(to .. "/" .. name, k, v) end
      end
    end
  end
  local o7, mg = out .. "/seed7", out .. "/merged"
  mp.mkdir(o7)
  mp.mkdir(mg)
  do
    local src <close> = mp.h5.open(out .. "/rope_id.h5", "r")
    local dst <close> = mp.h5.open(o7 .. "/rope_id.h5", "w")
    for _, name in ipairs({"lengths", "window_start", "loss_window_start"}) do dst:write(name, src:read(name)) end
    for k, v in pairs(src:attrs("/")) do dst:set_attr("/", k, v) end
    dst:set_attr("/", "seeds", "7")
    copy_tree(src, dst, "seeds/1", "seeds/7")
  end
  for _, name in ipairs({"rope_id.h5", "report.txt", "verdicts.tsv"}) do
    local fo = io.open(mg .. "/" .. name, "wb"); fo:write(slurp(out .. "/" .. name)); fo:close()
  end
  local fo = io.open(o7 .. "/report.txt", "wb"); fo:write(rep0); fo:close()
  ph = io.popen(("%s rope_id --merge %s --out %s 2>&1"):format(arg[-1], o7, mg))
  said = ph:read("a")
  check(ph:close() and said:find("merged: seeds 1,7", 1, true) ~= nil, "rope_id --merge ran:\n" .. said)
  do
    local fm <close> = mp.h5.open(mg .. "/rope_id.h5", "r")
    check(fm:attrs("/").seeds == "1,7", "merged seed list: " .. tostring(fm:attrs("/").seeds))
    check(fm:read("seeds/7/text/loss"):allclose(fm:read("seeds/1/text/loss"), 0, 0), "seed 7's numbers copied exactly")
    check(fm:has("seeds/7/variants/rope/prefix/srank_rot") and fm:has("seeds/7/retrieval_tasks/multikey/acc"),
          "seed 7's groups copied")
    for i, v in ipairs(variants) do
      local pl = fm:read("pooled/loss/" .. v)
      for j = 1, lengths:size(1) do
        local x = fm:read("seeds/1/text/loss"):get(i, j)
        near(pl:get(1, j), x, 1e-6 * math.abs(x) + 1e-9, ("pooled loss of %s at %d = the seed's"):format(v, j))
        near(pl:get(2, j), x, 1e-6 * math.abs(x) + 1e-9, "interval of two equal seeds: lo = mean")
        near(pl:get(3, j), x, 1e-6 * math.abs(x) + 1e-9, "interval of two equal seeds: hi = mean")
      end
      check(fm:attrs("pooled/loss/" .. v).n_seeds == 2, "pooled over 2 seeds")
    end
    check(fm:attrs("verdicts/C1").n_seeds == "2" and fm:attrs("verdicts/C7").seeds == "1,7"
          and fm:read("verdicts/C7/t1/values"):numel() == 2, "verdict rows count 2 seeds")
  end
  local rep2 = slurp(mg .. "/report.txt") or ""
  check(rep2:find("== mechprobe rope_id (quick; seeds 1,7) ==", 1, true) and rep2:find("\n== seed 1 ==\n", 1, true)
        and rep2:find("\n== seed 7 ==\n", 1, true) and rep2:find("Pooled over 2 seed(s) (1,7)", 1, true)
        and rep2:find("merged: seeds 7 from", 1, true), "merged report: header, both seeds, pooled, merge line")
  local tsv2 = slurp(mg .. "/verdicts.tsv")
  ph = io.popen(("%s rope_id --rejudge --out %s 2>&1"):format(arg[-1], mg))
  ph:read("a")
  check(ph:close() and slurp(mg .. "/verdicts.tsv") == tsv2, "rejudge of the merged run: the same verdicts.tsv")
  -- refused: a seed in both runs; another design; nothing changed, no temporary left
  ph = io.popen(("%s rope_id --merge %s --out %s 2>&1"):format(arg[-1], o7, mg))
  said = ph:read("a")
  check(not ph:close() and said:find("seed 7 is in both", 1, true) ~= nil, "merging seed 7 twice refused: " .. said)
  do
    local f7 <close> = mp.h5.open(o7 .. "/rope_id.h5", "r+")
    f7:set_attr("/", "seeds", "8")
    f7:set_attr("/", "L", 128)
  end
  ph = io.popen(("%s rope_id --merge %s --out %s 2>&1"):format(arg[-1], o7, mg))
  said = ph:read("a")
  check(not ph:close() and said:find("differ in L (64 vs 128)", 1, true) ~= nil, "merging another L refused: " .. said)
  check(slurp(mg .. "/verdicts.tsv") == tsv2 and slurp(mg .. "/report.txt") == rep2 and
        not io.open(mg .. "/rope_id.h5.merge.tmp"), "a refused merge changes nothing")
  os.execute("rm -rf " .. dir)
end

t.finish(("test_rope_id (%s)"):format(mode))
