-- test_sae_io.lua — mp.sae.load / sae:save from Lua (lua/lsae_io.c): each
-- golden SAELens folder of tests/data/sae (tests/tools/make_sae_ref.py, float64
-- numpy from SAELens's definitions) loads, and encode / forward / decode on the
-- first two reference rows match to 1e-5 (|got - want| <= 1e-5 (|want| +
-- max|want|)); save -> load keeps every weight bit for bit and the cfg; errors
-- name the file and the key.
local mp = require("mechprobe")
local data = assert(os.getenv("MP_TESTDATA"), "MP_TESTDATA not set") .. "/sae"
local ref = dofile(data .. "/ref.lua")
local fails, checks = 0, 0
local function check(ok, msg)
  checks = checks + 1
  if not ok then fails = fails + 1; io.stderr:write("FAIL: " .. msg .. "\n") end
end

local function rel_err(got, want)
  local mx, worst = 0, 0
  for i = 1, #want do for j = 1, #want[i] do mx = math.max(mx, math.abs(want[i][j])) end end
  for i = 1, #want do
    for j = 1, #want[i] do
      worst = math.max(worst, math.abs(got[i][j] - want[i][j]) / (math.abs(want[i][j]) + mx))
    end
  end
  return worst
end

local tmp = os.tmpname(); os.remove(tmp); mp.mkdir(tmp)
local expect = {
  standard_cnr = {"standard", "constant_norm_rescale"}, topk_k5 = {"topk", "none", k = 5},
  jumprelu_ln = {"jumprelu", "layer_norm"}, legacy_topk = {"topk", "none", k = 6},
  standard_bf16 = {"standard", "none"},
}
for name, r in pairs(ref) do
  local sae = mp.sae.load(data .. "/" .. name)
  local cfg = sae.cfg
  check(cfg.architecture == expect[name][1] and cfg.normalize_activations == expect[name][2] and
        cfg.k == expect[name].k and cfg.d_in == 16 and cfg.d_sae == 48 and cfg.model_name == "tiny-ref",
        name .. ": cfg " .. tostring(cfg.architecture) .. " " .. tostring(cfg.normalize_activations))
  local x = mp.tensor(r.x)
  local acts = sae:encode(x)
  local e1 = rel_err(acts:totable(), r.feature_acts)
  check(e1 <= 1e-5, name .. ": encode rel err " .. e1)
  local out, a2 = sae:forward(x)
  local e2 = rel_err(out:totable(), r.sae_out)
  check(e2 <= 1e-5 and rel_err(a2:totable(), r.feature_acts) <= 1e-5, name .. ": forward rel err " .. e2)
  local e3 = rel_err(sae:decode(mp.tensor(r.feature_acts)):totable(), r.decode_raw)
  check(e3 <= 1e-5, name .. ": decode rel err " .. e3)
  print(string.format("%-14s encode %.2g forward %.2g decode %.2g", name, e1, e2, e3))
  -- save -> load: the same bits, the same cfg
  local dir = tmp .. "/" .. name
  check(sae:save(dir) == sae, name .. ": save returns the SAE")
  local back = mp.sae.load(dir .. "/sae_weights.safetensors")
  for _, w in ipairs({"W_enc", "b_enc", "W_dec", "b_dec", "threshold"}) do
    if sae[w] then
      local a, b = sae[w]:reshape(-1):totable(), back[w]:reshape(-1):totable()
      local same = #a == #b
      for i = 1, #a do same = same and string.pack("<f", a[i]) == string.pack("<f", b[i]) end
      check(same, name .. ": " .. w .. " differs after save -> load")
    else
      check(back[w] == nil, name .. ": " .. w .. " appeared")
    end
  end
  for k, v in pairs(sae.cfg) do check(back.cfg[k] == v, name .. ": cfg." .. k .. " after save -> load") end
  back:close(); sae:close()
  os.remove(dir .. "/cfg.json"); os.remove(dir .. "/sae_weights.safetensors"); os.remove(dir)
end

-- errors: a folder without cfg.json names it; a wrong shape names the tensor
local ok, err = pcall(mp.sae.load, tmp)
check(not ok and err:find(tmp .. "/cfg.json", 1, true), "missing cfg.json: " .. tostring(err))
local sae = mp.sae.new{architecture = "topk", d_in = 4, d_sae = 8, k = 2, hook_name = "blocks.0.hook_resid_pre"}
sae:save(tmp .. "/small")
local f = assert(io.open(tmp .. "/small/cfg.json")); local txt = f:read("a"); f:close()
f = assert(io.open(tmp .. "/small/cfg.json", "w")); f:write((txt:gsub('"d_sae": 8', '"d_sae": 9'))); f:close()
ok, err = pcall(mp.sae.load, tmp .. "/small")
check(not ok and err:find("sae_weights.safetensors", 1, true) and err:find('"W_enc" has shape [4, 8], expected [4, 9]', 1, true),
      "shape error: " .. tostring(err))
ok, err = pcall(sae.save, sae, tmp .. "/small/cfg.json")
check(not ok and err:find("not an SAE folder", 1, true), "save over a file: " .. tostring(err))
sae:close()
ok, err = pcall(function() return sae:save(tmp .. "/x") end)
check(not ok and err:find("closed"), "save of a closed SAE: " .. tostring(err))
os.remove(tmp .. "/small/cfg.json"); os.remove(tmp .. "/small/sae_weights.safetensors"); os.remove(tmp .. "/small")
check(os.remove(tmp), "temporary folder left non-empty")

print(string.format("test_sae_io.lua: %d checks, %d failures", checks, fails))
os.exit(fails == 0 and 0 or 1)
