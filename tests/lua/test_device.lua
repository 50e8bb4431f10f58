-- test_device.lua — device selection as users meet it, in the normal suite:
-- option values (errors name the option), the no-device error of the Lua API
-- and of the CLI (capture, generate, sinks: non-zero exit, nothing written),
-- and the run file's device / precision attributes. On a machine with a CUDA
-- device the same checks take the device path instead (the comparisons
-- against the CPU are the `gpu` tests).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local exe = arg[-1]
local have, why = mp.cuda.available()

t.case("why", function()
  if have then assert(why == nil) return end
  if mp.cuda.built then
    assert(why:match("^no CUDA device: .+"), why)
  else
    assert(why == "this build has no CUDA support (configure with -DMP_CUDA=ON)", why)
  end
end)

local cfg = {d_model = 16, n_layer = 2, n_head = 4, n_kv_head = 2, vocab = 300, ctx = 16, seed = 3}
local function with(extra)
  local c = {}
  for k, v in pairs(cfg) do c[k] = v end
  for k, v in pairs(extra) do c[k] = v end
  return c
end
local m = mp.model.new(cfg)
local toks = {1, 5, 7, 2, 9}
local ref = m(toks)

t.case("defaults", function() assert(m.device == "cpu" and m.precision == "fp32", m.device .. m.precision) end)
t.case("bad values name the option", function()
  t.expect_error(function() mp.model.new(with{device = "gpu"}) end,
    [[mp.model.new: option 'device': device must be "cpu" or "cuda" (got "gpu")]])
  t.expect_error(function() mp.model.new(with{precision = "fp16"}) end,
    [[mp.model.new: option 'precision': precision must be "fp32" or "bf16" (got "fp16")]])
  t.expect_error(function() mp.model.new(with{precision = "bf16"}) end,
    [[mp.model.new: precision "bf16" on the CPU multiplies BF16 weights kept as stored (a BF16 GGUF or Hugging Face folder); this model's weights are F32: use device "cuda" or fp32]])
  t.expect_error(function() m:to("gpu") end, [[to: argument #1: device must be "cpu" or "cuda" (got "gpu")]])
  t.expect_error(function() m:to("cpu", {precision = "bf16"}) end, [[to: precision "bf16" on the CPU multiplies BF16 weights]])
  t.expect_error(function() m:to("cpu", {dtype = "bf16"}) end, "dtype")
  -- checked before the file is read: the option is named, not the missing file
  t.expect_error(function() mp.load("/nonexistent/model.h5", {device = "tpu"}) end, "mp.load: option 'device'")
end)

local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
local model = dir .. "/model.h5"
mp.model.new(with{tokenizer = "bytes"}):save(model) -- generate needs a tokenizer

if not have then
  t.case("no device: Lua", function()
    t.expect_error(function() mp.model.new(with{device = "cuda"}) end, "mp.model.new: " .. why)
    t.expect_error(function() mp.load("/nonexistent/model.h5", {device = "cuda"}) end, "mp.load: " .. why)
    t.expect_error(function() m:to("cuda") end, "to: " .. why)
    assert(m.device == "cpu" and m.precision == "fp32")
    local again = m(toks) -- the model is unchanged and still runs
    for i = 1, #toks do for v = 1, cfg.vocab do assert(again[{1, i, v}] == ref[{1, i, v}]) end end
  end)
else
  t.case("device: Lua", function()
    local g = mp.load(model, {device = "cuda"})
    assert(g.device == "cuda" and g.precision == "fp32")
    local out = g(toks)
    local err = 0
    for i = 1, #toks do for v = 1, cfg.vocab do err = math.max(err, math.abs(out[{1, i, v}] - ref[{1, i, v}])) end end
    assert(err < 1e-3, "cuda logits differ by " .. err)
    assert(g:to("cpu").device == "cpu")
  end)
end

-- (expect_error finds plain text.) The CLI: exit status, stderr, and what is left in dir.
local function run(args)
  local errf = dir .. "/stderr"
  local ok = os.execute(("%s %s >/dev/null 2>%s"):format(exe, args, errf))
  local f = io.open(errf); local err = f:read("a"); f:close(); os.remove(errf)
  return ok, err
end
local function exists(p) local f = io.open(p); if f then f:close() return true end return false end
local function listing()
  local p = io.popen("ls -A " .. dir); local s = p:read("a"); p:close(); return s
end

t.case("CLI --device cuda", function()
  for _, cmd in ipairs{
      {"capture", ("capture --model %s --tokens 1,2,3 --out %s/run.h5 --device cuda"):format(model, dir), dir .. "/run.h5"},
      {"generate", ("generate --model %s --steps 2 --temperature 0 --device cuda"):format(model), nil},
      {"sinks", ("sinks --model %s --tokens 1,2,3,4 --boot 10 --out %s/sinks --device cuda"):format(model, dir),
       dir .. "/sinks"}} do
    local ok, err = run(cmd[2])
    if not have then
      assert(not ok, cmd[1] .. " exited 0 without a device")
      assert(err == ("mechprobe %s: %s\n"):format(cmd[1], why), cmd[1] .. ": stderr " .. err)
      assert(listing() == "model.h5\n", cmd[1] .. " left: " .. listing())
    else
      assert(ok, cmd[1] .. " --device cuda failed: " .. err)
      if cmd[3] then assert(exists(cmd[3]), cmd[1] .. " wrote nothing") end
    end
  end
  if have then
    local f = mp.h5.open(dir .. "/run.h5")
    local a = f:attrs("/")
    f:close()
    assert(a.device == "cuda" and a.precision == "fp32", tostring(a.device))
  end
end)

t.case("CLI --device cpu", function() -- the same commands on the default device
  for _, cmd in ipairs{
      ("capture --model %s --tokens 1,2,3 --out %s/c.h5 --device cpu --precision fp32"):format(model, dir),
      ("generate --model %s --steps 2 --temperature 0 --device cpu"):format(model),
      ("sinks --model %s --tokens 1,2,3,4 --boot 10 --out %s/s --device cpu"):format(model, dir)} do
    local ok, err = run(cmd)
    assert(ok, cmd .. ": " .. err)
  end
  assert(exists(dir .. "/c.h5"))
  os.execute("rm -rf " .. dir .. "/c.h5 " .. dir .. "/s")
end)

t.case("CLI: the training probes' --device", function()
  for _, cmd in ipairs{
      {"rope_id", ("rope_id --quick --steps 1 --out %s/r"):format(dir)},
      {"mirror_descent", ("mirror_descent --quick --steps 1 --out %s/md"):format(dir)},
      {"group_arith", ("group_arith --quick --steps 1 --out %s/ga"):format(dir)},
      {"sinks", ("sinks --preset quick --steps 1 --out %s/sk"):format(dir)}} do
    local ok, err = run(cmd[2] .. " --device gpu")
    assert(not ok and err == ("mechprobe %s: --device must be cpu or cuda (got 'gpu')\n"):format(cmd[1]),
           cmd[1] .. ": " .. err)
    if not have then -- asked for a device that is not there: at once, nothing written
      ok, err = run(cmd[2] .. " --device cuda")
      assert(not ok and err == ("mechprobe %s: %s\n"):format(cmd[1], why), cmd[1] .. ": stderr " .. err)
    end
    assert(listing() == "model.h5\n", cmd[1] .. " left: " .. listing())
  end
  local ok, err = run(("sinks --preset quick --steps 1 --precision bf16 --out %s/sk"):format(dir))
  assert(not ok and err:match("^mechprobe sinks: %-%-precision bf16 with %-%-preset trains in mixed precision, on %-%-device cuda only"), err)
end)

t.case("CLI bad values", function()
  local ok, err = run(("capture --model %s --tokens 1,2 --out %s/x.h5 --device gpu"):format(model, dir))
  assert(not ok and err:match("^mechprobe capture: %-%-device must be cpu or cuda %(got 'gpu'%)"), err)
  ok, err = run(("capture --model %s --tokens 1,2 --out %s/x.h5 --precision bf16"):format(model, dir))
  -- on the CPU bf16 multiplies BF16 weights kept as stored: a float32 model is refused, nothing written
  assert(not ok and err:match('precision "bf16" on the CPU multiplies BF16 weights kept as stored') and
         err:match("weights are F32"), err)
  assert(not exists(dir .. "/x.h5"))
end)

t.case("run file records the device", function()
  local out = dir .. "/cpu.h5"
  local ok, err = run(("capture --model %s --tokens 1,2,3 --hooks blocks.0.hook_resid_pre --out %s"):format(model, out))
  assert(ok, err)
  local f = mp.h5.open(out)
  local a = f:attrs("/")
  f:close()
  assert(a.device == "cpu" and a.precision == "fp32", tostring(a.device) .. " " .. tostring(a.precision))
  -- the Lua method and the dataset capture too
  m:capture(toks, {out = dir .. "/lua.h5", hooks = "hook_embed"})
  m:capture_prompts({{1, 2, 3}, {4, 5}}, {out = dir .. "/ds.h5", hooks = "hook_embed"})
  for _, p in ipairs{dir .. "/lua.h5", dir .. "/ds.h5"} do
    local h = mp.h5.open(p)
    local at = h:attrs("/")
    h:close()
    assert(at.device == "cpu" and at.precision == "fp32", p)
  end
end)

os.execute("rm -rf " .. dir)
t.finish("test_device")
