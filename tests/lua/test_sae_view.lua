-- test_sae_view.lua — mp.sae.top_contexts and mp.sae.feature_view on a tiny
-- byte-level model: a planted SAE feature that fires on the byte "e" only
-- (read at hook_embed, the embedding set by hand) puts "e" at the max of
-- every context, with SAELens's density; a random SAE at
-- blocks.0.hook_resid_post against a brute-force sort of sae:encode over
-- m:run_with_cache (batches of 2 rows against one pass); the figure is
-- written and has the size it reports; bad arguments raise clear errors.
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")

local D = 16
local m <close> = mp.model.new{d_model = D, n_layer = 1, n_head = 2, d_mlp = 32, vocab = 257, ctx = 64,
                               tokenizer = "bytes", seed = 5}
-- the embedding: byte "e" (101) is 2 * e_1, every other token has coordinate 1 zero
local E = m:param("embed")
local seed = 12345
local function rnd() seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 - 0.5 end
for v = 1, 257 do
  for d = 1, D do E:set(d == 1 and 0 or rnd(), v, d) end
end
E:set(2, 102, 1)   -- token 101 ("e") is row 102 (1-based)

local planted <close> = mp.sae.new{d_in = D, d_sae = 4, hook_name = "hook_embed"}
planted.W_enc:set(1, 1, 1)                         -- feature 0 reads coordinate 1 only
for d = 2, D do planted.W_enc:set(rnd(), d, 4) end -- feature 3: a random direction

local texts = {"the quick brown fox jumps over the lazy dog",
               "sparse autoencoders\nfind features\tin the residual stream",
               "we see every e here", "no such letter: ok"}

t.case("planted feature: 'e' at the max of every context", function()
  local res = mp.sae.top_contexts{sae = planted, model = m, text = texts, features = {0, 3}, top = 6,
                                  window = {12, 4}, batch_size = 3}
  assert(#res == 2 and res.hook == "hook_embed" and res.before == 12 and res.after == 4, "result header")
  local f0 = res[1]
  assert(f0.feature == 0, "feature index")
  -- reference: the e's in reading order (ties rank by sequence, then position), BOS at position 0
  local want, n_e, n_tok = {}, 0, 0
  for s, text in ipairs(texts) do
    n_tok = n_tok + #text + 1
    for p = 1, #text do
      if text:sub(p, p) == "e" then
        n_e = n_e + 1
        if #want < 6 then want[#want + 1] = {seq = s - 1, pos = p} end
      end
    end
  end
  t.near(f0.density, n_e / n_tok, 1e-12, "density")
  assert(f0.n_active == n_e and f0.n_tokens == n_tok,
         ("active %d/%d tokens %d/%d"):format(f0.n_active, n_e, f0.n_tokens, n_tok))
  t.near(f0.max, 2, 1e-6, "max")
  assert(#f0.contexts == 6, "6 contexts")
  for i, c in ipairs(f0.contexts) do
    assert(c.seq == want[i].seq and c.pos == want[i].pos,
           ("context %d at (%d, %d), expected (%d, %d)"):format(i, c.seq, c.pos, want[i].seq, want[i].pos))
    assert(c.tokens[c.center] == 101 and c.str_tokens[c.center] == "e", "the max token is 'e'")
    t.near(c.value, 2, 1e-6, "value")
    for k, a in ipairs(c.acts) do
      t.near(a, c.tokens[k] == 101 and 2 or 0, 1e-6, "window activation")
    end
    -- the window: up to 12 before and 4 after, clipped to the text (BOS included)
    local text = texts[c.seq + 1]
    assert(c.center == math.min(12, c.pos) + 1, "center index")
    assert(#c.tokens == c.center + math.min(4, #text - c.pos), "window length")
    if c.pos <= 12 then assert(c.str_tokens[1] == "<s>" or c.tokens[1] == 256, "BOS first") end
  end
  local title = "Planted \"e\" feature and a random one"
  local w, h = mp.sae.feature_view(res, "test_sae_view_lua.png", {title = title})
  assert(w > 100 and h > 50, "figure size")
  local w2, h2 = mp.sae.feature_view(res, "test_sae_view_lua.pdf", {width = 400, title = title})
  t.near(w2, 400, 1e-9, "width as asked")
  t.near(h2 / w2, h / w, 1e-9, "aspect kept")
  local f = assert(io.open("test_sae_view_lua.png", "rb"))
  local head = f:read(24)
  f:close()
  assert(head:sub(2, 4) == "PNG", "a PNG")
  local function be32(s, i) local a, b, c, d = s:byte(i, i + 3); return ((a * 256 + b) * 256 + c) * 256 + d end
  assert(be32(head, 17) == math.floor(w * 200 / 72 + 0.5) and be32(head, 21) == math.floor(h * 200 / 72 + 0.5),
         "PNG size at 200 dpi")
end)

t.case("random SAE at resid_post against a brute-force sort", function()
  local sae <close> = mp.sae.new{d_in = D, d_sae = 8}
  for i = 1, D do for j = 1, 8 do sae.W_enc:set(rnd(), i, j) end end
  for j = 1, 8 do sae.b_enc:set(0.1 * rnd(), j) end
  local B, T = 5, 11
  local toks = {}
  for b = 1, B do toks[b] = {}; for p = 1, T do toks[b][p] = math.floor((rnd() + 0.5) * 256) end end
  local hook = "blocks.0.hook_resid_post"
  local res = mp.sae.top_contexts{sae = sae, model = m, tokens = toks, hook = hook, n_features = 8, top = 4,
                                  window = {3, 2}, batch_size = 2}
  local _, cache = m:run_with_cache(toks, {names = hook})
  local acts = sae:encode(cache[hook])  -- [B, T, 8]
  for f = 0, 7 do
    local all, act, mx = {}, 0, -math.huge
    for b = 1, B do for p = 1, T do
      local v = acts:get(b, p, f + 1)
      if v > 0 then all[#all + 1] = {v = v, seq = b - 1, pos = p - 1}; act = act + 1 end
      if v > mx then mx = v end
    end end
    table.sort(all, function(x, y)
      if x.v ~= y.v then return x.v > y.v end
      if x.seq ~= y.seq then return x.seq < y.seq end
      return x.pos < y.pos
    end)
    local r = res[f + 1]
    assert(r.feature == f and r.n_active == act and r.n_tokens == B * T, "feature " .. f .. " counts")
    t.near(r.max, mx, 1e-5, "max of feature " .. f)
    assert(#r.contexts == math.min(4, #all), "contexts of feature " .. f)
    for i, c in ipairs(r.contexts) do
      assert(c.seq == all[i].seq and c.pos == all[i].pos, ("feature %d rank %d: (%d, %d) vs (%d, %d)"):format(
             f, i, c.seq, c.pos, all[i].seq, all[i].pos))
      t.near(c.value, all[i].v, 1e-5, "value")
      for k, a in ipairs(c.acts) do
        local p = c.pos - (c.center - 1) + (k - 1)
        t.near(a, acts:get(c.seq + 1, p + 1, f + 1), 1e-5, "window activation")
        assert(c.tokens[k] == toks[c.seq + 1][p + 1], "window token")
      end
    end
  end
end)

t.case("errors", function()
  local bare <close> = mp.sae.new{d_in = D, d_sae = 4}
  t.expect_error(function() mp.sae.top_contexts{sae = bare, model = m, tokens = {1, 2}, n_features = 1} end,
                 "no hook_name")
  t.expect_error(function() mp.sae.top_contexts{sae = bare, model = m, tokens = {1, 2}, n_features = 1,
                                                hook = "blocks.0.mlp.hook_post"} end, "32 values per token")
  t.expect_error(function() mp.sae.top_contexts{sae = bare, model = m, tokens = {1, 2}, n_features = 1,
                                                hook = "blocks.7.hook_resid_pre"} end, "unknown hook name")
  t.expect_error(function() mp.sae.top_contexts{sae = bare, model = m, tokens = {1, 2}, hook = "hook_embed"} end,
                 "either 'features'")
  t.expect_error(function() mp.sae.top_contexts{sae = bare, model = m, tokens = {1, 2}, hook = "hook_embed",
                                                features = {4}} end, "features'[1]")
  t.expect_error(function() mp.sae.top_contexts{sae = planted, model = m, text = "x", n_features = 1,
                                                window = {1}} end, "window")
  local res = mp.sae.top_contexts{sae = planted, model = m, text = "zzz", n_features = 1}
  assert(#res[1].contexts == 0 and res[1].n_active == 0, "no contexts when the feature never fires")
  local w = mp.sae.feature_view(res, "test_sae_view_empty.svg")
  assert(w > 0, "an empty block draws")
  t.expect_error(function() mp.sae.feature_view(res, "test_sae_view.txt") end, "unknown figure format")
end)

t.finish("test_sae_view")
