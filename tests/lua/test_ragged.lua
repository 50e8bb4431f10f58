-- test_ragged.lua — ragged batches and prepend_space: every row of a padded
-- batch (left or right padding, built here by hand, independently of
-- to_tokens) gives at its real positions the logits of its prompt run alone
-- (1e-5 relative of the largest) for RoPE, learned positions, NoPE, a GQA
-- model with rope_id's per-position logit factor, and entmax15; pad rows stay
-- finite; hook_attn_scores / hook_pattern see the batch with -inf / 0 on pad
-- keys and pad queries attending to themselves; logits = "last" takes each
-- row's last real token; m:loss counts only real positions with a real next
-- token (equal to the single runs' losses weighted by their counts); capture
-- writes the masked forward; bad masks and unsupported variants are refused;
-- m:to_tokens pads a list of texts (bytes tokenizer: ids are the bytes);
-- prepend_space against golden ids (the llama2.c tokenizer's golden file in
-- ../shared, skipped when absent; the Llama 3 BPE golden file in tests/data).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local data = os.getenv("MP_TESTDATA") or "tests/data"
local shared = os.getenv("MP_SHARED_DIR") or "../shared"

local V = 20
local prompts = {{3, 5, 7}, {1, 2, 3, 4, 5, 6, 7}, {9, 8, 4, 2, 11}}

-- the padded batch and mask, by hand
local function pad(rows, left, pad_id)
  local T = 0
  for _, r in ipairs(rows) do T = math.max(T, #r) end
  local toks, mask, off = {}, {}, {}
  for b, r in ipairs(rows) do
    toks[b], mask[b] = {}, {}
    off[b] = left and T - #r or 0
    for i = 1, T do toks[b][i], mask[b][i] = pad_id, 0 end
    for i = 1, #r do toks[b][off[b] + i], mask[b][off[b] + i] = r[i], 1 end
  end
  return toks, mask, off
end

-- max |batch row b at real positions - single run| / max |single run|
local function row_err(lb, b, off, ls, n)
  local err, big = 0, 0
  for i = 1, n do
    for v = 1, V do
      local s = ls:get(1, i, v)
      big = math.max(big, math.abs(s))
      err = math.max(err, math.abs(lb:get(b, off + i, v) - s))
    end
  end
  return err / big
end

local function all_finite(x)
  if type(x) ~= "table" then return x == x and x ~= math.huge and x ~= -math.huge end
  for _, v in ipairs(x) do if not all_finite(v) then return false end end
  return true
end

local configs = {
  {name = "rope", cfg = {pos = "rope"}},
  {name = "learned", cfg = {pos = "learned", norm = "layer", mlp = "gelu"}},
  {name = "nope", cfg = {pos = "none"}},
  -- ctx 4 < T: rope_id's length temperature differs between positions
  {name = "rope_id+gqa", cfg = {pos = "rope_id", n_head = 4, n_kv_head = 2, ctx = 4}},
  {name = "entmax15", cfg = {pos = "rope", attn = "entmax15"}},
  {name = "entmax", cfg = {pos = "learned", attn = "entmax", alpha = 1.3}},
}
for _, c in ipairs(configs) do
  local spec = {d_model = 16, n_layer = 2, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, seed = 3, init_std = 0.5}
  for k, v in pairs(c.cfg) do spec[k] = v end
  local m = mp.model.new(spec)
  local single, rot = {}, {}
  local rq = "blocks.0.attn.hook_rot_q"
  for i, p in ipairs(prompts) do
    local c1
    single[i], c1 = m:run_with_cache(p, {names = rq})
    rot[i] = c1[rq]
  end
  for _, left in ipairs{false, true} do
    local what = c.name .. (left and " left" or " right")
    t.case(what .. ": rows equal the single runs", function()
      local toks, mask, off = pad(prompts, left, 0)
      local lb, cache = m:run_with_cache(toks, {attention_mask = mask, names = rq})
      for b, p in ipairs(prompts) do
        local e = row_err(lb, b, off[b], single[b], #p)
        assert(e <= 1e-5, ("row %d: relative error %g"):format(b, e))
        -- the rotation itself follows each row's positions (RoPE's scores alone
        -- would not see a shift)
        local q, q1 = cache[rq], rot[b]
        for i = 1, #p do
          for h = 1, q1:shape()[3] do
            for d = 1, q1:shape()[4] do t.near(q:get(b, off[b] + i, h, d), q1:get(1, i, h, d), 1e-5, "hook_rot_q") end
          end
        end
      end
      assert(all_finite(lb:totable()), "pad positions give finite logits")
      -- logits = "last": the last real token of every row
      local last = m:forward(toks, {attention_mask = mask, logits = "last"})
      for b, p in ipairs(prompts) do
        for v = 1, V do
          t.near(last:get(b, v), single[b]:get(1, #p, v), 1e-5 * 10, what .. " last logits")
        end
      end
    end)
  end
  m:close()
end

-- prompts longer than one attention block of query rows (64): the mask
-- follows the rows of later blocks; the mask given as a Tensor
t.case("long rows across attention blocks, mask as a Tensor", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 16, vocab = V, ctx = 160, seed = 7,
                         pos = "learned"}
  local long = {}
  for _, n in ipairs{70, 130} do
    local p = {}
    for i = 1, n do p[i] = (i * 7 + n) % V end
    long[#long + 1] = p
  end
  for _, left in ipairs{false, true} do
    local toks, mask, off = pad(long, left, 1)
    local lb = m:forward(mp.tensor(toks), {attention_mask = mp.tensor(mask)})
    for b, p in ipairs(long) do
      local e = row_err(lb, b, off[b], m:forward(p), #p)
      assert(e <= 1e-5, ("%s row %d: relative error %g"):format(left and "left" or "right", b, e))
    end
  end
  m:close()
end)

-- hooks see the batch: -inf scores and 0 pattern on pad keys; a pad query
-- attends to itself only; real rows sum to 1
t.case("hook_pattern and hook_attn_scores of a padded batch", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, seed = 4}
  for _, left in ipairs{false, true} do
    local toks, mask = pad(prompts, left, 0)
    local _, cache = m:run_with_cache(toks, {attention_mask = mask,
                                             names = {"blocks.0.attn.hook_pattern", "blocks.0.attn.hook_attn_scores"}})
    local pat, sc = cache["blocks.0.attn.hook_pattern"], cache["blocks.0.attn.hook_attn_scores"]
    local T = #toks[1]
    for b = 1, #prompts do
      for h = 1, 2 do
        for i = 1, T do
          local sum = 0
          for j = 1, T do
            local a, s = pat:get(b, h, i, j), sc:get(b, h, i, j)
            sum = sum + a
            if mask[b][i] == 0 then
              assert(a == (j == i and 1 or 0), ("pad query %d,%d attends to key %d: %g"):format(b, i, j, a))
            elseif mask[b][j] == 0 or j > i then
              assert(a == 0 and s == -math.huge, ("real query %d,%d sees pad/future key %d: %g %g"):format(b, i, j, a, s))
            end
          end
          t.near(sum, 1, 1e-5, "pattern row sum")
        end
      end
    end
  end
  m:close()
end)

-- m:loss: pad positions and pad targets are not counted
t.case("loss of a padded batch", function()
  local m = mp.model.new{d_model = 16, n_layer = 2, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, seed = 5}
  local want, count = 0, 0
  for _, p in ipairs(prompts) do
    local x, y = {}, {}
    for i = 1, #p - 1 do x[i], y[i] = p[i], p[i + 1] end
    want = want + m:loss({x}, {y}) * (#p - 1)
    count = count + #p - 1
  end
  want = want / count
  for _, left in ipairs{false, true} do
    local toks, mask = pad(prompts, left, 0)
    local tg = {}
    for b, r in ipairs(toks) do
      tg[b] = {}
      -- the next token, pad included; the last column has none (-1: ignored)
      for i = 1, #r do tg[b][i] = r[i + 1] or -1 end
    end
    local got = m:loss(toks, tg, {attention_mask = mask})
    t.near(got, want, 1e-5, (left and "left" or "right") .. " padded loss")
  end
  m:close()
end)

t.case("capture of a padded batch", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, seed = 6}
  local toks, mask = pad(prompts, true, 0)
  local path = os.tmpname() .. ".h5"
  m:capture(toks, {out = path, hooks = "blocks.0.attn.hook_pattern", logits = true, attention_mask = mask})
  local want = m:forward(toks, {attention_mask = mask}):totable()
  local f <close> = mp.h5.open(path, "r")
  local got = f:read("/logits"):totable()
  for b = 1, #toks do
    for i = 1, #toks[1] do
      for v = 1, V do t.near(got[b][i][v], want[b][i][v], 1e-6, "captured logits") end
    end
  end
  -- the mask is stored beside the tokens, so the file says which are pads
  local fm = f:read("/attention_mask"):totable()
  for b = 1, #toks do
    for i = 1, #toks[1] do assert(fm[b][i] == mask[b][i], ("stored attention_mask [%d][%d]"):format(b, i)) end
  end
  local pat = f:read("/acts/blocks.0.attn.hook_pattern")
  assert(pat:get(1, 1, 7, 1) == 0 and pat:get(1, 1, 7, 5) > 0, "captured pattern is masked")
  f:close()
  os.remove(path)
  m:close()
end)

t.case("bad masks and unsupported variants are refused", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = V, ctx = 16}
  local toks, mask = pad(prompts, false, 0)
  mask[2][3] = 2
  t.expect_error(function() m:forward(toks, {attention_mask = mask}) end,
                 "attention_mask[2][3] = 2: expected 1 (a real token) or 0 (a pad)", "mask value")
  t.expect_error(function() m:forward(toks, {attention_mask = {{1, 1}}}) end,
                 "forward: attention_mask has shape [1,2] but the tokens have [3,7]", "mask shape")
  t.expect_error(function() m:run_with_cache(toks, {attention_mask = "left"}) end,
                 "attention_mask: a table or Tensor of 0/1 expected, got string", "mask type")
  t.expect_error(function() m:forward({{1, 2}, {3}}) end, "pad them: m:to_tokens", "ragged table hint")
  m:close()
  local s = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = V, ctx = 16, attn = "ssmax"}
  local _, mk = pad(prompts, false, 0)
  t.expect_error(function() s:forward(toks, {attention_mask = mk}) end, "not supported with attn = ssmax", "ssmax")
  s:close()
end)

-- to_tokens on a list of texts (bytes: ids are the bytes, BOS 256 pads)
t.case("to_tokens pads a list of texts", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = 260, ctx = 16, tokenizer = "bytes"}
  local toks, mask = m:to_tokens({"ab", "hello"})
  t.deep_eq(toks, {{256, 97, 98, 256, 256, 256}, {256, 104, 101, 108, 108, 111}}, "right padding")
  t.deep_eq(mask, {{1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 1}}, "right mask")
  toks, mask = m:to_tokens({"ab", "hello"}, {padding_side = "left", prepend_bos = false})
  t.deep_eq(toks, {{256, 256, 256, 97, 98}, {104, 101, 108, 108, 111}}, "left padding, no BOS")
  t.deep_eq(mask, {{0, 0, 0, 1, 1}, {1, 1, 1, 1, 1}}, "left mask")
  -- the batch runs as the single prompts
  local lb = m:forward(toks, {attention_mask = mask, logits = "last"})
  local l1 = m:forward(m:to_tokens("ab", {bos = false}), {logits = "last"})
  for v = 1, 260 do t.near(lb:get(1, v), l1:get(1, v), 1e-4, "bytes batch row 1") end
  t.deep_eq(m:to_tokens("ab", {prepend_space = false}), {256, 97, 98}, "bytes: prepend_space = false is a no-op")
  t.expect_error(function() m:to_tokens("ab", {prepend_space = true}) end, "the bytes tokenizer has no dummy prefix",
                 "bytes: prepend_space = true")
  -- lists of ids (ragged) pad as the texts that encode to them: same ids, same mask, either side
  for _, side in ipairs{"right", "left"} do
    local tt, tm = m:to_tokens({"ab", "hello"}, {padding_side = side})
    local it, im = m:to_tokens({{256, 97, 98}, {256, 104, 101, 108, 108, 111}}, {padding_side = side})
    t.deep_eq(it, tt, "ids padded as texts (" .. side .. ")")
    t.deep_eq(im, tm, "the mask of ids as of texts (" .. side .. ")")
  end
  local mt, mm = m:to_tokens({"ab", {104, 105, 33, 63}}, {prepend_bos = false})
  t.deep_eq(mt, {{97, 98, 256, 256}, {104, 105, 33, 63}}, "texts and ids mixed (ids as given: no BOS added)")
  t.deep_eq(mm, {{1, 1, 0, 0}, {1, 1, 1, 1}}, "mixed mask")
  t.expect_error(function() m:to_tokens({{1, 2}, {}}) end, "texts[2] is an empty list of ids", "empty id row")
  t.expect_error(function() m:to_tokens({{1, 260}}) end, "texts[1][2] (a token id)", "id outside the vocabulary")
  t.expect_error(function() m:to_tokens({"ab", 3}) end, "texts[2] is a number, not a string or a list of token ids",
                 "a number in the list")
  t.expect_error(function() m:to_tokens({"ab"}, {padding_side = "top"}) end, "padding_side", "bad side")
  t.expect_error(function() m:to_tokens({"", "a"}, {bos = false}) end, "texts[1] encodes to no tokens", "empty row")
  t.expect_error(function() m:to_tokens("a", {bos = true, prepend_bos = true}) end, "not both", "bos twice")
  m:close()
end)

-- byte-level BPE (Llama 3, golden ids in tests/data): prepend_space = true
-- gives the ids of " " .. text; false leaves text alone
t.case("prepend_space on a byte-level BPE tokenizer", function()
  local m = mp.model.new{d_model = 8, n_layer = 1, n_head = 2, d_mlp = 8, vocab = 128256, ctx = 16}
  m:set_tokenizer(data .. "/bpe_llama3_tokenizer.json")
  t.deep_eq(m:to_tokens("leading space", {bos = false, prepend_space = true}), {6522, 3634}, "prepend_space = true")
  t.deep_eq(m:to_tokens(" leading space", {bos = false, prepend_space = true}), {6522, 3634}, "already a space")
  t.deep_eq(m:to_tokens(" leading space", {bos = false, prepend_space = false}), {6522, 3634}, "false: unchanged")
  m:close()
end)

-- the llama2.c tokenizer's dummy prefix (golden ids from llama2.c's encoder)
local f = io.open(shared .. "/golden/aidreams260K_tokenizer.tsv")
if not f then
  print("SKIP llama2.c prepend_space and the real model: " .. shared .. " is absent")
else
  f:close()
  local m = mp.load(shared .. "/models/aidreams260K.bin")
  -- golden: "Once upon a time" -> 1,429,491,...: BOS, the dummy prefix " " (429), the text
  local golden = {1, 429, 491, 433, 295, 429, 444, 445, 265, 262, 263, 342, 430}
  t.case("llama2.c prepend_space", function()
    t.deep_eq(m:to_tokens("Once upon a time"), golden, "default: the dummy prefix")
    t.deep_eq(m:to_tokens("Once upon a time", {prepend_space = true}), golden, "true: as the default")
    local nopre = {1}
    for i = 3, #golden do nopre[#nopre + 1] = golden[i] end
    t.deep_eq(m:to_tokens("Once upon a time", {prepend_space = false}), nopre, "false: no dummy prefix")
    t.deep_eq(m:to_tokens(" Once upon a time", {prepend_space = false}), golden, "' ' .. text without the prefix")
  end)
  t.case("the real model runs a left-padded batch as single prompts", function()
    local texts = {"Once upon a time", "I dream of electric sheep. The end"}
    local toks, mask = m:to_tokens(texts, {padding_side = "left"})
    local last = m:forward(toks, {attention_mask = mask, logits = "last"})
    for b, s in ipairs(texts) do
      local one = m:forward(m:to_tokens(s), {logits = "last"})
      local err, big = 0, 0
      for v = 1, m.config.vocab do
        big = math.max(big, math.abs(one:get(1, v)))
        err = math.max(err, math.abs(last:get(b, v) - one:get(1, v)))
      end
      assert(err <= 1e-5 * big, ("row %d: %g of %g"):format(b, err, big))
    end
  end)
  m:close()
end

t.finish("test_ragged")
