-- test_sink_recipe.lua — experiments/sink_recipe.lua (issue 21's sink-recipe
-- search) at a tiny size: it exits 0, writes one TSV row and one HDF5 group
-- per checkpoint, and its first-token attention is right where the answer is
-- known in closed form: after 2 steps at a small learning rate the scores are
-- still near 0, so attention is near uniform and query t gives the first token
-- 1/(t+1); the mean over t = 1..T-1 is (H_T - 1)/(T - 1) (H_T the T-th
-- harmonic number), 0.03491 at T = 128. Tolerance 0.006 per head, 0.002 for
-- the mean over heads (the scores of a model 2 steps from its initialisation
-- are not exactly 0; a model that sinks has alpha_0 > 0.3).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local exe, src = arg[-1], os.getenv("MP_SRC")
if not src then print("SKIP: MP_SRC not set"); os.exit(77) end

local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
local cmd = ("%s %s/experiments/sink_recipe.lua --out %s --config quickstart --steps 2 --checkpoints 2 "
             .. "> %s/log.txt 2>&1"):format(exe, src, dir, dir)
check(os.execute(cmd), "sink_recipe exits 0")

local rows = {}
for line in io.lines(dir .. "/sink_recipe.tsv") do rows[#rows + 1] = line end
check(#rows == 3, "a header and one row per checkpoint")
local f = mp.h5.open(dir .. "/sink_recipe.h5")
check(f:has("quickstart/step000001/alpha0") and f:has("quickstart/step000002/alpha0"), "a group per checkpoint")
local A = f:read("quickstart/step000002/alpha0")
check(A:size(1) == 4 and A:size(2) == 4, "alpha0 [layers, heads] = [4, 4]")
local T, H = 128, 0
for k = 1, T do H = H + 1 / k end
local want = (H - 1) / (T - 1)
near(want, 0.03491, 1e-5, "closed form at T = 128")
for l = 1, 4 do
  for h = 1, 4 do near(A:get(l, h), want, 0.006, ("layer %d head %d: near-uniform attention's alpha_0"):format(l, h)) end
end
near(A:mean(), want, 0.002, "mean alpha_0 over heads")
local cols = {}
for v in rows[3]:gmatch("[^\t]+") do cols[#cols + 1] = v end
check(cols[1] == "quickstart" and tonumber(cols[2]) == 2 and tonumber(cols[3]) == 2 * 16 * 128,
      "row: config, step, tokens")
check(tonumber(cols[5]) == 0 and tonumber(cols[6]) == 16, "no sink head of 16 at near-uniform attention")
near(tonumber(cols[8]), A:mean(), 1e-3, "TSV mean = HDF5 mean")
check(f:attrs("quickstart").lr == 3e-3, "the configuration as attributes")
f:close()
os.execute("rm -rf " .. dir)
t.finish("test_sink_recipe")
