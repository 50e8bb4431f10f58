-- sae_splice_ref.lua — the Lua binding's results with SAEs attached (lua/lsae_splice.c)
-- that tests/python/test_sae_splice.py compares the Python module with, bit for bit:
--   mechprobe sae_splice_ref.lua DIR
-- Makes a tiny random model (DIR/model.h5) and two random SAEs saved as SAELens
-- folders (DIR/sae_resid: standard at blocks.0.hook_resid_post; DIR/sae_z: topk
-- at blocks.1.attn.hook_z), loads all three back (as Python does), and writes
-- the arrays into DIR/ref.h5 and the values (%.17g) as "key value" lines into DIR/ref.txt.
local dir = arg[1]
local H, Z = "blocks.0.hook_resid_post", "blocks.1.attn.hook_z"
local P = H .. ".hook_sae_acts_post"
mp.model.new{d_model = 8, n_layer = 2, n_head = 2, vocab = 13, ctx = 8, seed = 5}:save(dir .. "/model.h5")
local m = mp.load(dir .. "/model.h5")
local function random_sae(o, seed, path)
  local s = mp.sae.new(o)
  s.W_enc:copy_(mp.randn({o.d_in, o.d_sae}, {seed = seed}):mul(0.5))
  s.b_enc:copy_(mp.randn({o.d_sae}, {seed = seed + 1}):mul(0.1))
  s.W_dec:copy_(mp.randn({o.d_sae, o.d_in}, {seed = seed + 2}):mul(0.3))
  s.b_dec:copy_(mp.randn({o.d_in}, {seed = seed + 3}):mul(0.1))
  s:save(path)
  s:close()
  return mp.sae.load(path)
end
local s1 = random_sae({d_in = 8, d_sae = 16, hook_name = H}, 11, dir .. "/sae_resid")
local s2 = random_sae({architecture = "topk", k = 3, d_in = 8, d_sae = 12, hook_name = Z}, 21, dir .. "/sae_z")
local toks = {{1, 4, 2, 7, 3, 9}, {5, 2, 8, 1, 11, 6}}
local f <close> = mp.h5.open(dir .. "/ref.h5", "w")
local txt <close> = assert(io.open(dir .. "/ref.txt", "w"))
local function num(k, v) txt:write(string.format("%s %.17g\n", k, v)) end

m:add_sae(s1)
m:add_sae(s2, {use_error_term = true})
num("n_names", #mp.hook_names(m))
f:write("fwd", m:forward(toks))
local _, cache = m:run_with_cache(toks, {names = {P, H .. ".hook_sae_recons", Z .. ".hook_sae_error", Z}})
for k, v in pairs(cache) do if type(k) == "string" and type(v) ~= "number" then f:write("cache/" .. k, v) end end
local vec = mp.zeros{16}
vec:set(2, 4)
f:write("steer", m:forward(toks, {fwd_hooks = {{P, mp.steer(vec)}}}))
local spec = {logit_diff = {{3, 4}, {2, 10}}}
local _, g = m:run_with_cache(toks, {names = P .. "," .. H .. ".hook_sae_input," .. Z .. ".hook_sae_acts_pre",
                                     incl_bwd = true, loss = spec})
for k, v in pairs(g) do
  if type(k) == "string" and k:sub(-5) == "_grad" then f:write("grad/" .. k, v) end
end
num("ld", g.loss)
num("loss", m:loss({1, 4, 2, 7, 3}, {4, 2, 7, 3, 9}))
local attr, vals = mp.attribution_patch(m, {{1, 4, 2, 7, 3, 9}}, {{1, 4, 2, 5, 3, 9}},
                                        {names = P, metric = {logit_diff = {3, 2}}, per = "neuron"})
f:write("attr", attr[P])
num("attr_clean", vals.clean)
num("attr_corrupt", vals.corrupt)
m:reset_saes()
f:write("clean", m:forward(toks))
f:write("rws", m:run_with_saes(toks, {saes = {s1, s2}}))
num("n_after", #m:saes())
