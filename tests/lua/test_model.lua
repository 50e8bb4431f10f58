-- test_model.lua — the model half of the Lua API, on the committed reference
-- model (GQA, untied) and its PyTorch golden run file: run_with_cache against
-- the golden activations, streaming capture against run_with_cache, every
-- intervention kind against its definition, Lua function hooks, generation
-- determinism, and clear errors for misuse.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check = t.ok
local data = os.getenv("MP_TESTDATA") or "tests/data"
local function maxdiff(a, b)
  local d = a:sub(b)
  return math.max(math.abs(d:max()), math.abs(d:min()))
end

local m = mp.load(data .. "/ref_gqa_untied.bin")
local cfg = m.config
check(cfg.d_model == 48 and cfg.n_layer == 2 and cfg.n_head == 4 and cfg.n_kv_head == 2 and not cfg.tied,
  "config: " .. tostring(m))
check(tostring(m):find("d_model=48", 1, true), "tostring names the config")

-- golden run (PyTorch): tokens and every hook point
local g <close> = mp.h5.open(data .. "/ref_gqa_untied_a.h5")
local toks = g:read_int("tokens")        -- {{...}}
local logits, cache = m:run_with_cache(toks)
check(maxdiff(logits, g:read("logits")) < 1e-4, "logits vs golden")
local n = 0
for _, name in ipairs(g:list("acts")) do
  local ref = g:read("acts/" .. name)
  local got = cache[name]
  check(got ~= nil, "cache has " .. name)
  if got then
    -- masked scores are -inf in both: compare finite entries through the pattern instead
    if not name:find("attn_scores") then
      check(maxdiff(got, ref) < 1e-4, name .. " vs golden")
    end
    n = n + 1
  end
end
check(n == 2 + 18 * cfg.n_layer, "every hook point cached (" .. n .. ")")

-- names selection
local _, c2 = m:run_with_cache(toks, {names = {"blocks.*.attn.hook_rot_k", "hook_embed"}})
local k = 0
for _ in pairs(c2) do k = k + 1 end
check(k == cfg.n_layer + 1, "names selects " .. k)
-- names as a filter function (TransformerLens's names_filter): the same hooks as
-- the glob "*.attn.hook_q", in the same firing order, with the same values
local asked = {}
local _, c3 = m:run_with_cache(toks, {names = function(name) asked[#asked + 1] = name
                                                  return name:sub(-12) == ".attn.hook_q" end})
local want = mp.hook_names(m, "*.attn.hook_q")
-- the points "*" selects: the golden file's and the norms' hook_scale and
-- hook_mlp_in (not the opt-in per-head copies and results)
local nstar = #mp.hook_names(m, "*")
check(nstar == 3 + 21 * cfg.n_layer, "'*' names " .. nstar .. " points")
check(#asked == nstar, "the filter sees every hook name once (" .. #asked .. " of " .. nstar .. ")")
local k3 = 0
for _ in pairs(c3) do k3 = k3 + 1 end
check(k3 == #want and #want == cfg.n_layer, "the filter selects " .. k3 .. " hooks")
for _, name in ipairs(want) do
  check(c3[name] and c3[name]:sub(cache[name]):norm() == 0, "filter cache equals the full cache at " .. name)
end
local _, c4 = m:run_with_cache(toks, {names = function() return false end})
check(next(c4) == nil, "a filter that selects nothing gives an empty cache")
check(not pcall(m.run_with_cache, m, toks, {names = function() error("filter boom") end}), "a filter's error propagates")

-- streaming capture writes the same values as run_with_cache
local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
local out = dir .. "/run.h5"
local nds = m:capture(toks, {out = out, hooks = "blocks.1.*", logits = true, compress = 4})
check(nds == 22, "capture dataset count " .. nds)
do
  local f <close> = mp.h5.open(out)
  check(maxdiff(f:read("acts/blocks.1.attn.hook_pattern"), cache["blocks.1.attn.hook_pattern"]) == 0,
    "captured pattern == cached pattern")
  check(maxdiff(f:read("acts/blocks.1.hook_resid_post"), cache["blocks.1.hook_resid_post"]) == 0,
    "captured resid_post == cached")
  check(maxdiff(f:read("logits"), logits) == 0, "captured logits")
  check(f:attrs("/").format == "mechprobe.run", "run file format attr")
  check(f:attrs("model").n_kv_head == 2, "model attrs")
end

-- zero ablation of one head: that head's slice of hook_z is zero downstream
local _, c3 = m:run_with_cache(toks, {names = "blocks.0.attn.hook_z",
  fwd_hooks = {{"blocks.0.attn.hook_z", mp.ablate.zero{head = 2}}}})
local z = c3["blocks.0.attn.hook_z"]   -- [1,T,H,Dh], cached after the hook
local zs, others = 0, 0
for t = 1, z:size(2) do
  for d = 1, cfg.d_head do
    zs = zs + math.abs(z:get(1, t, 3, d))
    others = others + math.abs(z:get(1, t, 1, d))
  end
end
check(zs == 0 and others > 0, "zero ablation of head 2 only")

-- patching every position of a hook from a cached run reproduces that run
local toks_b = mp.h5.open(data .. "/ref_gqa_untied_b.h5"):read_int("tokens")
local logits_b, cache_b = m:run_with_cache(toks_b, {names = "blocks.1.hook_resid_pre"})
local patched = m:run_with_hooks(toks, {fwd_hooks = {
  {"blocks.1.hook_resid_pre", mp.patch(cache_b["blocks.1.hook_resid_pre"])}}})
check(maxdiff(patched, logits_b) < 1e-5, "patching resid_pre from run b gives run b's logits")
-- patching a single position changes only that position and later ones
local p3 = m:run_with_hooks(toks, {fwd_hooks = {
  {"blocks.1.hook_resid_pre", mp.patch(cache_b["blocks.1.hook_resid_pre"], {positions = 5})}}})
check(maxdiff(p3[1]:narrow(1, 5), logits[1]:narrow(1, 5)) == 0, "positions before 5 untouched")
check(maxdiff(p3[1]:narrow(6, 1), logits[1]:narrow(6, 1)) > 1e-3, "position 5 changed")

-- steering adds the vector: resid_post seen by a later hook equals base + 2 v
local v = {}
for i = 1, cfg.d_model do v[i] = (i % 3) - 1 end
local _, c4 = m:run_with_cache(toks, {names = "blocks.0.hook_resid_post",
  fwd_hooks = {{"blocks.0.hook_resid_post", mp.steer(v, {scale = 2})}}})
local base = cache["blocks.0.hook_resid_post"]
local got = c4["blocks.0.hook_resid_post"]
check(math.abs(got:get(1, 4, 2) - base:get(1, 4, 2) - 2 * v[2]) < 1e-5, "steer adds scale * v")

-- mean ablation: every position gets the reference mean
local ref = cache_b["blocks.1.hook_resid_pre"]
local _, c5 = m:run_with_cache(toks, {names = "blocks.1.hook_resid_pre",
  fwd_hooks = {{"blocks.1.hook_resid_pre", mp.ablate.mean(ref)}}})
local mean2 = 0
for t = 1, ref:size(2) do mean2 = mean2 + ref:get(1, t, 2) end
mean2 = mean2 / ref:size(2)
check(math.abs(c5["blocks.1.hook_resid_pre"]:get(1, 7, 2) - mean2) < 1e-5, "mean ablation uses the mean")

-- Lua function hooks: edit in place, or return a replacement; hook info
local seen = {}
local l2 = m:run_with_hooks(toks, {fwd_hooks = {
  {"blocks.*.attn.hook_pattern", function(t, hook)
    seen[#seen + 1] = hook.name .. "@" .. hook.offset
  end}}})
check(maxdiff(l2, logits) == 0, "a read-only Lua hook changes nothing")
check(#seen == cfg.n_layer and seen[1] == "blocks.0.attn.hook_pattern@0", "hook info: " .. table.concat(seen, ","))
local l3 = m:run_with_hooks(toks, {fwd_hooks = {
  {"blocks.0.hook_mlp_out", function(t) t:mul_(0) end}}})
local l4 = m:run_with_hooks(toks, {fwd_hooks = {
  {"blocks.0.hook_mlp_out", function(t) return mp.zeros(t:shape()) end}}})
check(maxdiff(l3, l4) == 0 and maxdiff(l3, logits) > 1e-3, "in-place edit == returned replacement")
local kept
m:run_with_hooks(toks, {fwd_hooks = {{"hook_embed", function(t) kept = t end}}})
check(not pcall(function() return kept:sum() end), "a hook view is invalid after the callback")
local ok, err = pcall(m.run_with_hooks, m, toks, {fwd_hooks = {{"hook_embed", function() error("inside hook") end}}})
check(not ok and err:find("inside hook", 1, true) and err:find("hook_embed", 1, true), "hook errors propagate: " .. tostring(err))

-- forward(): logits only, and "last"
check(maxdiff(m:forward(toks), logits) == 0, "forward == run_with_cache logits")
local last = m:forward(toks, {logits = "last"})
check(maxdiff(last[1], logits[1][#toks[1]]) < 1e-5, "logits='last' (one-row sgemm rounds differently)")

-- batches: a table of two sequences
local lb = m:forward({toks[1], toks_b[1]})
check(maxdiff(lb[1], logits[1]) < 1e-5 and maxdiff(lb[2], logits_b[1]) < 1e-5, "batch of two")

-- generation is deterministic by seed, and greedy agrees with argmax of forward
local _, g1 = m:generate({1, 5, 9}, {max_new_tokens = 8, temperature = 0.8, seed = 3})
local _, g2 = m:generate({1, 5, 9}, {max_new_tokens = 8, temperature = 0.8, seed = 3})
check(table.concat(g1, ",") == table.concat(g2, ","), "same seed, same tokens")
local _, gg = m:generate({1, 5, 9}, {max_new_tokens = 1, temperature = 0})
local fl = m:forward({1, 5, 9}, {logits = "last"})
check(gg[4] == fl[1]:argmax() - 1, "greedy = argmax (ids are 0-based, argmax 1-based)")
-- steering hooks are live during generation
local _, gs = m:generate({1, 5, 9}, {max_new_tokens = 8, temperature = 0,
  fwd_hooks = {{"blocks.0.hook_resid_post", mp.steer(v, {scale = 50})}}})
local _, g0 = m:generate({1, 5, 9}, {max_new_tokens = 8, temperature = 0})
check(table.concat(gs, ",") ~= table.concat(g0, ","), "steering changes generation")

-- misuse names the argument
ok, err = pcall(m.run_with_cache, m, toks, {names = "blocks.0.hook_nope"})
check(not ok and err:find("blocks.0.hook_nope", 1, true), "unknown name: " .. tostring(err))
ok, err = pcall(m.forward, m, {{1, 2}, {3}})
check(not ok and err:find("rectangular", 1, true), "ragged batch: " .. tostring(err))
ok, err = pcall(m.run_with_hooks, m, toks, {fwd_hooks = {{"blocks.0.hook_resid_pre", mp.ablate.zero{head = 1}}}})
check(not ok and err:find("no head axis", 1, true), "head on a residual hook: " .. tostring(err))
ok, err = pcall(m.to_tokens, m, "hi")
check(not ok and err:find("no tokenizer", 1, true), "no tokenizer: " .. tostring(err))
ok, err = pcall(mp.load, data .. "/nope.bin")
check(not ok and err:find("nope.bin", 1, true), "missing file: " .. tostring(err))

-- an explicit nil for the options is the same as none
local mn = mp.load(data .. "/ref_gqa_untied.bin", nil)
check(mn ~= nil and mn.config.d_model == m.config.d_model, "mp.load(path, nil) returns the model: " .. tostring(mn))
mn:close()

-- m:to_single_token (TransformerLens's to_single_token): the one id, checked
-- against the byte values and against to_tokens without BOS; more or fewer
-- tokens than one is an error naming the count
local bm = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 16, vocab = 260, ctx = 16, tokenizer = "bytes"}
check(bm:to_single_token("a") == 97 and bm:to_single_token("\255") == 255, "bytes: to_single_token is the byte value")
local ok2, e2 = pcall(bm.to_single_token, bm, "ab")
check(not ok2 and tostring(e2):find('"ab" is 2 tokens', 1, true), "two tokens refused: " .. tostring(e2))
local ok0, e0 = pcall(bm.to_single_token, bm, "")
check(not ok0 and tostring(e0):find("is 0 tokens", 1, true), "no token refused: " .. tostring(e0))
bm:close()
local lm3 = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, d_mlp = 8, vocab = 128256, ctx = 16}
lm3:set_tokenizer(data .. "/bpe_llama3_tokenizer.json")
local ids = lm3:to_tokens(" the", {bos = false})
check(#ids == 1 and lm3:to_single_token(" the") == ids[1], "BPE: to_single_token equals to_tokens without BOS")
lm3:close()

os.execute("rm -rf " .. dir)
t.finish("test_model")
