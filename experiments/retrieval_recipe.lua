-- retrieval_recipe.lua — which training recipe makes a small rotary model on
-- this machine learn rope_id's keyed retrieval tasks (multi-key needle in a
-- haystack, variable tracking) at the training length (issue 21: C6 and C8
-- can only be judged on models that solve the task inside L).
--
--   mechprobe experiments/retrieval_recipe.lua --out DIR [--config NAME,...] [--steps N]
--
-- Trains one RoPE model per configuration and, at checkpoints along the
-- training, measures the exact-match accuracy on held-out single-query
-- sequences (the probe's evaluation) at L and 2L. Prints one line per
-- checkpoint and writes DIR/retrieval_recipe.tsv, each line as measured.
local cli = require "cli"
local rid = require "rope_id"
local o = cli.parse(arg, {
  name = "retrieval_recipe",
  summary = "Train small RoPE models on keyed retrieval under several recipes and measure their accuracy.",
  {"out", "DIR", "output folder", required = true},
  {"config", "LIST", "configurations to run (default: all)"},
  {"steps", "N", "steps of every configuration (default: each its own)", type = "int"},
  {"checkpoints", "N", "measurements along each training", default = 4, type = "int"},
  {"test", "N", "test sequences per length", default = 128, type = "int"},
})

-- Every configuration: rope_id --medium's retrieval model and multikey task
-- (d 64, 4 layers x 4 heads of 16, L 256, batch 16, 4 keys of 2 digits, values
-- of 2 digits, 16 filler words) unless it says otherwise. Fields: q = training
-- queries per sequence (n_queries; the test has one), sym = keys of their own
-- tokens (key_symbols = 10; digits otherwise), bytes = every token mapped to
-- one byte of the text models' vocabulary, pretrain = start from a byte-level
-- text model trained that many steps on rope_id's corpus (lr 1e-2, batch 16 at L).
local base = {d_model = 64, n_layer = 4, n_head = 4, d_head = 16, d_mlp = 128, L = 256, batch = 16,
              steps = 400, lr = 1e-2, wd = 0.1, pos = "rope",
              task = {n_keys = 4, key_len = 2, value_len = 2, n_filler = 16}}
local TEXT = {d_model = 128, n_layer = 4, n_head = 8, d_head = 16, d_mlp = 256}   -- rope_id's text model
local function with(c)
  local r = {}
  for k, v in pairs(base) do r[k] = v end
  if c.text_shape then for k, v in pairs(TEXT) do r[k] = v end end
  r.task = {}
  for k, v in pairs(base.task) do r.task[k] = v end
  for k, v in pairs(c) do if k ~= "task" then r[k] = v end end
  for k, v in pairs(c.task or {}) do r.task[k] = v end
  if c.q then r.task.n_queries = c.q end
  if c.sym then r.task.key_symbols = 10 end
  return r
end
local configs = {
  with{name = "base_1500", steps = 1500, lr = 3e-3},
  with{name = "q8_1500", steps = 1500, lr = 3e-3, q = 8},
  with{name = "q8_k1_1500", steps = 1500, lr = 3e-3, q = 8, task = {key_len = 1}},
  with{name = "q8_sym_1500", steps = 1500, lr = 3e-3, q = 8, sym = true},
  with{name = "q8_sym_k1_1500", steps = 1500, lr = 3e-3, q = 8, sym = true, task = {key_len = 1}},
  with{name = "q8_sym_k1_L128", steps = 1500, lr = 3e-3, L = 128, q = 8, sym = true, task = {key_len = 1}},
  with{name = "q8_sym_k1_v1", steps = 1500, lr = 3e-3, q = 8, sym = true, task = {key_len = 1, value_len = 1}},
  with{name = "q8_sym_k1_2l", steps = 1500, lr = 3e-3, n_layer = 2, q = 8, sym = true, task = {key_len = 1}},
  with{name = "q8_sym_k1_lr1e-2", steps = 1500, lr = 1e-2, q = 8, sym = true, task = {key_len = 1}},
  with{name = "q8_sym_k1_2l_6000", steps = 6000, lr = 3e-3, n_layer = 2, q = 8, sym = true, task = {key_len = 1}},
  with{name = "q8_sym_k1_2l_L128_6000", steps = 6000, lr = 3e-3, n_layer = 2, L = 128, q = 8, sym = true,
       task = {key_len = 1}},
  with{name = "bytes_scratch", text_shape = true, steps = 400, lr = 1e-2, bytes = true, q = 8, sym = true,
       task = {key_len = 1, value_len = 1}},
  with{name = "bytes_pretrained", text_shape = true, steps = 400, lr = 3e-3, bytes = true, pretrain = 1200, q = 8,
       sym = true, task = {key_len = 1, value_len = 1}},
}
local want
if o.config then
  want = {}
  for s in o.config:gmatch("[^,]+") do want[s] = true end
end

-- bytes: digits '0'-'9', BOS 256, the words T(he) P(ass) K(ey) = (is) W(hat)
-- ? ., filler words 'a', 'b', ..., key symbols 'A', 'B', ...
local function to_bytes(tok, p)
  local key0 = 18 + p.n_filler
  local tt = tok:totable()
  for _, row in ipairs(tt) do
    for t = 1, #row do
      local v = math.tointeger(row[t])
      if v <= 9 then row[t] = 48 + v
      elseif v == 10 then row[t] = 256
      elseif v < 18 then row[t] = ("TPK=W?."):byte(v - 10)
      elseif v < key0 then row[t] = 97 + v - 18
      else row[t] = 65 + v - key0 end
    end
  end
  return mp.tensor(tt)
end
local function byte_task(t)
  return {vocab = 257,
          sample = function(_, B, Tn)
            local tok, tgt, truth = t:sample(B, Tn)
            local g = tgt:totable()
            for _, row in ipairs(g) do
              for i = 1, #row do if row[i] >= 0 then row[i] = 48 + row[i] end end   -- answers are value digits
            end
            return to_bytes(tok, t.params), mp.tensor(g), truth
          end}
end

mp.mkdir(o.out)
local tsv = assert(io.open(o.out .. "/retrieval_recipe.tsv", "w"))
tsv:write("config\tstep\tloss\tacc_L\tacc_2L\tchance\tseconds\n")
for _, c in ipairs(configs) do
  if not want or want[c.name] then
    local steps = o.steps or c.steps
    local prm = {seed = 11}
    for k, v in pairs(c.task) do prm[k] = v end
    local tk = mp.tasks.retrieval(prm)
    local test = {}
    for k, v in pairs(c.task) do test[k] = v end
    test.n_queries, test.seed = 1, 12345
    local tt = mp.tasks.retrieval(test)
    local task, vocab = tk, tk.vocab
    if c.bytes then task, vocab = byte_task(tk), 257 end
    local sets = {}
    for i, T in ipairs{c.L, 2 * c.L} do
      local tok, _, truth = tt:sample(o.test, T)
      if c.bytes then
        tok = to_bytes(tok, tt.params)
        for _, v in ipairs(truth.value) do for j = 1, #v do v[j] = 48 + v[j] end end   -- the answer's bytes
      end
      sets[i] = {tok, truth}
    end
    local m
    if c.pretrain then
      local path = ("%s/text_%s_%d.h5"):format(o.out, c.pos, c.pretrain)
      local function exists(p) local fh = io.open(p, "rb"); if fh then fh:close() end; return fh ~= nil end
      if not exists(path) then
        local corpus = o.out .. "/corpus.txt"
        if not exists(corpus) then rid.build_corpus(corpus) end
        local text = mp.tasks.text{path = corpus, ctx = c.L, seed = 1}
        m = mp.model.new{d_model = c.d_model, n_layer = c.n_layer, n_head = c.n_head, d_head = c.d_head,
                         d_mlp = c.d_mlp, vocab = text.vocab, ctx = c.L, pos = c.pos, seed = 1}
        print(("pretraining %s (%d steps of text)"):format(path, c.pretrain))
        local t0 = os.time()
        local res = m:train{task = text, steps = c.pretrain, batch = 16, lr = 1e-2, warmup = c.pretrain // 10,
                            weight_decay = 0.1, progress = false}
        print(("pretrained %s: %d steps, loss %.4f, %d s"):format(path, c.pretrain, res.final_loss, os.time() - t0))
        m:save(path)
        m:close()
      end
      m = mp.load(path)
    else
      m = mp.model.new{d_model = c.d_model, n_layer = c.n_layer, n_head = c.n_head, d_head = c.d_head,
                       d_mlp = c.d_mlp, vocab = vocab, ctx = c.L, pos = c.pos, seed = 1}
    end
    local t0, done = os.time(), 0
    for k = 1, o.checkpoints do
      local n = steps * k // o.checkpoints - done
      local res = m:train{task = task, steps = n, total_steps = steps, batch = c.batch, lr = c.lr,
                          warmup = steps // 10, weight_decay = c.wd, progress = false,
                          resume = k > 1}   -- a pretrained model starts a fresh optimizer
      done = done + n
      local a1 = rid.retrieval_accuracy(m, sets[1][1], sets[1][2])
      local a2 = rid.retrieval_accuracy(m, sets[2][1], sets[2][2])
      local line = ("%s\t%d\t%.4f\t%.3f\t%.3f\t%.3f\t%d"):format(c.name, done, res.final_loss, a1, a2,
                                                              1 / c.task.n_keys, os.time() - t0)
      print(line); io.stdout:flush()
      tsv:write(line, "\n"); tsv:flush()
    end
    m:close()
  end
end
tsv:close()
