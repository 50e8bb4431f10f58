-- test_gpu.lua — the CUDA device through the Lua API against the CPU (label
-- gpu; exit 77, ctest SKIP, where mp.cuda.available() is false): run files of
-- m:capture and m:capture_prompts with the same datasets and values (and
-- device "cuda" recorded), run_with_cache's every entry, Lua hooks that edit
-- (run_with_hooks) and Lua interventions, mp.load(..., {device = "cuda"}) of
-- the shared model. Tolerance: max |gpu - cpu| <= 1e-4 of each tensor's scale
-- (its largest finite |value|), bf16 3e-2; infinities equal. `--dry` runs the CPU on both
-- sides (a check of the test itself, no device needed).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local dry = arg[1] == "--dry"
if not dry and not mp.cuda.available() then
  print("SKIP: " .. select(2, mp.cuda.available()))
  os.exit(77)
end
local TOL = 1e-4
local function to(m, dev) if not dry then m:to(dev) end return m end

local function close(a, b, what)
  local sa, sb = a:shape(), b:shape()
  assert(#sa == #sb, what .. ": ranks differ")
  for i = 1, #sa do assert(sa[i] == sb[i], what .. ": shapes differ") end
  local x, y = a:flatten():tolist(), b:flatten():tolist()
  local scale, err = 0, 0
  for i = 1, #x do
    if x[i] == x[i] and math.abs(x[i]) ~= math.huge then scale = math.max(scale, math.abs(x[i])) end
  end
  for i = 1, #x do
    if math.abs(x[i]) == math.huge or math.abs(y[i]) == math.huge then
      assert(x[i] == y[i], ("%s: element %d: %s vs %s"):format(what, i, x[i], y[i]))
    else
      err = math.max(err, math.abs(x[i] - y[i]))
    end
  end
  assert(err <= TOL * math.max(scale, 1e-30), ("%s: max error %.3g of scale %.3g"):format(what, err, scale))
end

local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
local m = mp.model.new{d_model = 64, n_layer = 2, n_head = 4, n_kv_head = 2, vocab = 60, ctx = 64, seed = 5,
                       init_std = 0.2, pos = "rope"}
local toks = {}
for i = 1, 40 do toks[i] = (i * 7) % 60 end

local function files_equal(pa, pb, what)
  local fa, fb = mp.h5.open(pa), mp.h5.open(pb)
  local la, lb = fa:list("/acts"), fb:list("/acts")
  assert(#la == #lb and #la > 10, what .. ": dataset lists differ")
  for i, name in ipairs(la) do
    assert(lb[i] == name, what .. ": " .. name .. " vs " .. tostring(lb[i]))
    close(fa:read("/acts/" .. name), fb:read("/acts/" .. name), what .. " " .. name)
  end
  if fa:has("/logits") then close(fa:read("/logits"), fb:read("/logits"), what .. " logits") end
  local ta, tb = fa:read_int("/tokens"), fb:read_int("/tokens")
  t.deep_eq(ta, tb)
  local at = fb:attrs("/")
  fa:close(); fb:close()
  return at
end

t.case("capture files", function()
  to(m, "cpu"):capture(toks, {out = dir .. "/cpu.h5", hooks = "*", logits = true})
  to(m, "cuda"):capture(toks, {out = dir .. "/cuda.h5", hooks = "*", logits = true})
  local at = files_equal(dir .. "/cpu.h5", dir .. "/cuda.h5", "capture")
  assert(dry or (at.device == "cuda" and at.precision == "fp32"), "device attribute " .. tostring(at.device))
  local prompts = {{1, 2, 3, 4, 5}, {7, 8, 9}, toks}
  to(m, "cpu"):capture_prompts(prompts, {out = dir .. "/pc.h5", hooks = "*", logits = true})
  to(m, "cuda"):capture_prompts(prompts, {out = dir .. "/pg.h5", hooks = "*", logits = true})
  files_equal(dir .. "/pc.h5", dir .. "/pg.h5", "capture_prompts")
end)

t.case("bf16 capture (3e-2 of each tensor's scale)", function()
  TOL = 3e-2
  to(m, "cpu"):capture(toks, {out = dir .. "/cpu16.h5", hooks = "*", logits = true})
  if dry then m:capture(toks, {out = dir .. "/cuda16.h5", hooks = "*", logits = true})
  else m:to("cuda", {precision = "bf16"}):capture(toks, {out = dir .. "/cuda16.h5", hooks = "*", logits = true}) end
  local at = files_equal(dir .. "/cpu16.h5", dir .. "/cuda16.h5", "bf16 capture")
  assert(dry or (at.device == "cuda" and at.precision == "bf16"), "precision attribute " .. tostring(at.precision))
  assert(dry or m.precision == "bf16")
  TOL = 1e-4
end)

t.case("run_with_cache", function()
  local lc, cc = to(m, "cpu"):run_with_cache(toks)
  local lg, cg = to(m, "cuda"):run_with_cache(toks)
  close(lc, lg, "logits")
  local n = 0
  for name, v in pairs(cc) do close(v, cg[name], name); n = n + 1 end
  assert(n > 10, "cached " .. n)
end)

t.case("Lua hooks and interventions", function()
  local hooks = {
    {"blocks.0.attn.hook_z", mp.ablate.zero{head = 1}},
    {"blocks.1.hook_resid_pre", function(x) x:mul_(0.5) end},
    {"blocks.0.attn.hook_pattern", function(x) x:mul_(0.9) end},
    {"blocks.1.attn.hook_attn_scores", function(x) x:mul_(1.5) end},
    {"blocks.1.mlp.hook_post", mp.steer(mp.ones(m.config.d_mlp), {scale = 0.1})},
  }
  local a = to(m, "cpu"):run_with_hooks(toks, {fwd_hooks = hooks})
  local b = to(m, "cuda"):run_with_hooks(toks, {fwd_hooks = hooks})
  close(a, b, "edited logits")
  local clean = m:forward(toks)
  assert(b:sub(clean):norm() > 1e-3, "the edits changed nothing")
end)

t.case("generate", function()
  local a = to(m, "cpu"):generate({1, 2, 3}, {max_new_tokens = 20, temperature = 0})
  local b = to(m, "cuda"):generate({1, 2, 3}, {max_new_tokens = 20, temperature = 0})
  t.deep_eq(a, b)
end)

t.case("shared model", function()
  local path = (os.getenv("MP_SHARED_DIR") or "") .. "/models/aidreams260K.bin"
  local f = io.open(path)
  if not f then print("note: " .. path .. " absent"); return end
  f:close()
  local c = mp.load(path)
  local g = dry and mp.load(path) or mp.load(path, {device = "cuda"})
  local tk = {1, 50, 60, 70, 80, 90, 100, 3, 4, 5}
  local lc, cc = c:run_with_cache(tk)
  local lg, cg = g:run_with_cache(tk)
  close(lc, lg, "aidreams logits")
  for name, v in pairs(cc) do close(v, cg[name], "aidreams " .. name) end
end)

t.case("backward hooks on a cuda model run on the CPU, with the same gradients", function()
  local tg = {}
  for i = 1, 40 do tg[i] = (toks[i] * 3 + 1) % 60 end
  local _, ca = to(m, "cpu"):run_with_cache(toks, {incl_bwd = true, loss = "ce", targets = tg, names = "blocks.1.hook_resid_pre"})
  local _, cb = to(m, "cuda"):run_with_cache(toks, {incl_bwd = true, loss = "ce", targets = tg, names = "blocks.1.hook_resid_pre"})
  close(ca["blocks.1.hook_resid_pre_grad"], cb["blocks.1.hook_resid_pre_grad"], "resid_pre gradient")
end)

t.case("m:train on the device (fp32) equals the CPU's, and the checkpoint resumes on either", function()
  local function run(dev)
    local mm = mp.model.new{d_model = 32, n_layer = 2, n_head = 4, n_kv_head = 2, vocab = 16, ctx = 24, seed = 9,
                            init_std = 0.2, pos = "rope"}
    to(mm, dev)
    local rec = mm:train{task = mp.tasks.mtd{q = 16, m = 2}, steps = 4, batch = 4, seq_len = 24, lr = 1e-2,
                         progress = false, checkpoint = dir .. "/train_" .. dev .. ".h5"}
    return mm, rec
  end
  local mc, rc = run("cpu")
  local mg, rg = run("cuda")
  for i = 1, 4 do
    assert(math.abs(rc.loss[i] - rg.loss[i]) <= 1e-5 * rc.loss[i],
           ("step %d: loss cpu %.8g, cuda %.8g"):format(i, rc.loss[i], rg.loss[i]))
  end
  close(mc:param("blocks.0.attn.wq"), to(mg, "cpu"):param("blocks.0.attn.wq"), "trained wq")
  close(mc:param("blocks.1.mlp.w2"), mg:param("blocks.1.mlp.w2"), "trained w2")
  close(mc:param("embed"), mg:param("embed"), "trained embed")
  -- the device's checkpoint continues on the CPU as the CPU's own does
  local a, b = mp.load(dir .. "/train_cpu.h5"), mp.load(dir .. "/train_cuda.h5")
  local ra = a:train{task = mp.tasks.mtd{q = 16, m = 2}, steps = 2, batch = 4, seq_len = 24, progress = false}
  local rb = b:train{task = mp.tasks.mtd{q = 16, m = 2}, steps = 2, batch = 4, seq_len = 24, progress = false}
  assert(math.abs(ra.final_loss - rb.final_loss) <= 1e-5 * ra.final_loss, "resumed: " .. ra.final_loss .. " vs " .. rb.final_loss)
end)

os.execute("rm -rf " .. dir)
t.finish("test_gpu_lua")
