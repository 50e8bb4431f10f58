-- sink_recipe.lua — which training recipe makes a small rotary model on this
-- machine grow attention-sink heads (issue 21's search; the evidence behind the
-- docs/rope_id.md's "Sink recipe" paragraph).
--
--   mechprobe experiments/sink_recipe.lua --out DIR [--config NAME,...] [--corpus FILE]
--
-- Trains one byte-level RoPE model per configuration on the rope_id corpus
-- (the project's own sources, or --corpus) and, at checkpoints along the
-- training, measures every head's attention to the first token (alpha_0: the
-- mean over queries t >= 1 of pattern[t, 0], over validation windows of the
-- training length, as Gu et al.'s Sink metric with eps = 0.3). Prints one line
-- per checkpoint and writes DIR/sink_recipe.tsv and DIR/sink_recipe.h5
-- (/<config>/step<NNNNNN>/alpha0 [layers, heads] with step, tokens and loss as
-- attributes; the configuration as attributes of /<config>), each checkpoint
-- written as it is measured.
local cli = require "cli"
local rid = require "rope_id"
local o = cli.parse(arg, {
  name = "sink_recipe",
  summary = "Train small RoPE models under several recipes and count the heads that sink into the first token.",
  {"out", "DIR", "output folder", required = true},
  {"config", "LIST", "configurations to run (default: all)"},
  {"corpus", "FILE", "text corpus (default: the project's sources, as rope_id)"},
  {"steps", "N", "steps of every configuration (default: each its own)", type = "int"},
  {"checkpoints", "N", "measurements along each training", default = 4, type = "int"},
})

-- Every configuration: the rope_id full preset's model and optimiser unless
-- it says otherwise.
local base = {d_model = 128, n_layer = 4, n_head = 8, d_head = 16, d_mlp = 256, L = 256, batch = 16,
              steps = 1200, lr = 2e-3, wd = 0.1, bos = true, pos = "rope"}
-- the quickstart-sized model: d 64, 4 layers, 4 heads of 16 sharing 2 KV heads, L 128
local function qs(c)
  for k, v in pairs{d_model = 64, n_layer = 4, n_head = 4, n_kv_head = 2, d_head = 16, d_mlp = 172, L = 128} do
    if c[k] == nil then c[k] = v end
  end
  return c
end
local configs = {
  {name = "base"},
  {name = "no_bos", bos = false},
  {name = "lr_hi", lr = 1e-2},
  {name = "wd_hi", wd = 1.0},
  {name = "lr_hi_wd_hi", lr = 1e-2, wd = 1.0},
  {name = "long", steps = 3600},
  -- lr_hi on rope_id --medium's schedule: 600 steps in all (the cosine ends at 600)
  {name = "lr_hi_600", lr = 1e-2, steps = 600},
  {name = "wide", d_model = 256, n_head = 8, d_head = 32, d_mlp = 512},
  {name = "L512", L = 512, batch = 8},
  {name = "none", pos = "none"},
  {name = "L512_lr_hi", L = 512, batch = 8, lr = 1e-2},
  {name = "small_lr_hi", d_model = 64, n_layer = 2, n_head = 4, d_mlp = 128, L = 512, batch = 8, lr = 1e-2},
  -- candidates for rope_id's full preset: its model at L = 512, batch 8, 600 steps (2.5M tokens)
  {name = "full_lr_hi", L = 512, batch = 8, steps = 600, lr = 1e-2},
  {name = "full_lr_hi_wd_hi", L = 512, batch = 8, steps = 600, lr = 1e-2, wd = 1.0},
  {name = "full_lr_hi_b16", L = 512, batch = 16, steps = 600, lr = 1e-2},
  {name = "small4_lr_hi", d_model = 64, n_layer = 4, n_head = 4, d_mlp = 128, L = 512, batch = 8, lr = 1e-2},
  -- the quickstart's old model (4 heads sharing 2 KV heads) and corpus (GPL-3, 600
  -- steps of 16 x 128) at its lr and at 1e-2; then on the larger corpus; then with
  -- 8 heads (the quickstart's model now)
  qs{name = "quickstart", steps = 600, lr = 3e-3, corpus = "/usr/share/common-licenses/GPL-3"},
  qs{name = "quickstart_lr_hi", steps = 600, lr = 1e-2, corpus = "/usr/share/common-licenses/GPL-3"},
  qs{name = "quickstart_big_lr_hi", steps = 1200, lr = 1e-2},
  qs{name = "quickstart_big_lr_2e-2", steps = 600, lr = 2e-2},
  qs{name = "quickstart_big_8heads", n_head = 8, n_kv_head = 4, steps = 600, lr = 1e-2},
  -- issue 40: every sink head of the runs above sits in layer 0 (a fixed function
  -- of BOS's embedding). Deeper models of the quickstart's width, longer training,
  -- no BOS, no weight decay: does any grow sink heads past layer 0?
  qs{name = "deep8", n_layer = 8, n_head = 8, n_kv_head = 4, steps = 1200, lr = 1e-2},
  qs{name = "deep8_long", n_layer = 8, n_head = 8, n_kv_head = 4, steps = 3600, lr = 1e-2},
  qs{name = "deep8_no_bos", n_layer = 8, n_head = 8, n_kv_head = 4, steps = 1200, lr = 1e-2, bos = false},
  qs{name = "deep8_wd0", n_layer = 8, n_head = 8, n_kv_head = 4, steps = 1200, lr = 1e-2, wd = 0},
}
local want
if o.config then
  want = {}
  for s in o.config:gmatch("[^,]+") do want[s] = true end
end

mp.mkdir(o.out)
local corpus = o.corpus
if not corpus then
  corpus = o.out .. "/corpus.txt"
  rid.build_corpus(corpus)
end
local tsv = assert(io.open(o.out .. "/sink_recipe.tsv", "w"))
tsv:write("config\tstep\ttokens\tloss\tsink_heads\theads\tmax_alpha0\tmean_alpha0\tseconds\tsink_heads_by_layer\n")
local h5path = o.out .. "/sink_recipe.h5"
mp.h5.open(h5path, "w"):close()

-- alpha_0 per [layer][head], averaged over the windows (the sinks probe's
-- measurement: probes/lib/sinks_train.lua).
local alpha0 = require("sinks_train").alpha0

for _, over in ipairs(configs) do
  if not want or want[over.name] then
    local c = {}
    for k, v in pairs(base) do c[k] = v end
    for k, v in pairs(over) do c[k] = v end
    if o.steps then c.steps = o.steps end
    local text = mp.tasks.text{path = c.corpus or corpus, ctx = c.L, seed = 1, bos = c.bos}
    local val = text:sample(4, c.L, "val")
    local vtoks = val:tolist()
    local m = mp.model.new{d_model = c.d_model, n_layer = c.n_layer, n_head = c.n_head, n_kv_head = c.n_kv_head,
                           d_head = c.d_head,
                           d_mlp = c.d_mlp, vocab = text.vocab, ctx = c.L, pos = c.pos, seed = 1}
    text:seed(107)
    local seg = c.steps // o.checkpoints
    local t0, done = os.time(), 0
    for k = 1, o.checkpoints do
      local rec = m:train{task = text, steps = seg, batch = c.batch, lr = c.lr, warmup = c.steps // 10,
                          total_steps = c.steps, weight_decay = c.wd, progress = false}
      done = done + seg
      local A = alpha0(m, vtoks)
      local nsink, mx, sum, n, by_layer = 0, 0, 0, 0, {}
      for l = 1, #A do
        by_layer[l] = 0
        for h = 1, #A[l] do
          local a = A[l][h]
          if a > 0.3 then nsink, by_layer[l] = nsink + 1, by_layer[l] + 1 end
          mx, sum, n = math.max(mx, a), sum + a, n + 1
        end
      end
      local line = ("%s\t%d\t%d\t%.4f\t%d\t%d\t%.3f\t%.3f\t%d\t%s"):format(over.name, done,
          done * c.batch * c.L, rec.final_loss, nsink, n, mx, sum / n, os.time() - t0, table.concat(by_layer, "/"))
      print(line)
      io.stdout:flush()
      tsv:write(line, "\n")
      tsv:flush()
      -- each checkpoint's numbers are on disk at once (a stopped search keeps them)
      local f <close> = mp.h5.open(h5path, "a")
      local g = ("%s/step%06d"):format(over.name, done)
      f:write(g .. "/alpha0", A)
      f:set_attr(g, "step", done)
      f:set_attr(g, "tokens", done * c.batch * c.L)
      f:set_attr(g, "loss", rec.final_loss)
      if k == 1 then for key, v in pairs(c) do f:set_attr(over.name, key, v) end end
    end
    m:close()
  end
end
tsv:close()
