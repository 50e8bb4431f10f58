-- test_retrieval_recipe.lua — experiments/retrieval_recipe.lua (issue 21's
-- search for a recipe that teaches rope_id's keyed retrieval) at one step: it
-- exits 0, writes one TSV row per configuration and checkpoint with the
-- task's chance level, and its models see the vocabulary each configuration
-- names: before its first update a model's logits are near uniform, so the
-- first step's loss is near ln V (V = 18 + 16 filler words + 10 key symbols =
-- 44 for q8_sym_k1_2l; 257 bytes for bytes_scratch). Tolerance 0.15 nats (the
-- initial logits are small, not zero).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "testlib.lua")
local check, near = t.ok, t.ok_near
local exe, src = arg[-1], os.getenv("MP_SRC")
if not src then print("SKIP: MP_SRC not set"); os.exit(77) end

local dir = os.tmpname(); os.remove(dir); mp.mkdir(dir)
local cmd = ("%s %s/experiments/retrieval_recipe.lua --out %s --config q8_sym_k1_2l,bytes_scratch --steps 1 "
             .. "--checkpoints 1 --test 4 > %s/log.txt 2>&1"):format(exe, src, dir, dir)
check(os.execute(cmd), "retrieval_recipe exits 0")
local rows = {}
for line in io.lines(dir .. "/retrieval_recipe.tsv") do
  local c = {}
  for v in line:gmatch("[^\t]+") do c[#c + 1] = v end
  rows[#rows + 1] = c
end
check(#rows == 3 and rows[1][1] == "config" and rows[1][4] == "acc_L", "a header and one row per configuration")
local want = {q8_sym_k1_2l = math.log(44), bytes_scratch = math.log(257)}
for i = 2, #rows do
  local c = rows[i]
  check(want[c[1]] ~= nil and tonumber(c[2]) == 1, "row: config, step 1: " .. table.concat(c, " "))
  near(tonumber(c[3]), want[c[1]] or 0, 0.15, c[1] .. ": first loss near ln V")
  local a1, a2 = tonumber(c[4]), tonumber(c[5])
  check(a1 and a2 and a1 >= 0 and a1 <= 1 and a2 >= 0 and a2 <= 1 and (a1 * 4) % 1 == 0, "accuracies: shares of 4")
  near(tonumber(c[6]), 0.25, 1e-12, "chance 1 / n_keys")
end
os.execute("rm -rf " .. dir)
t.finish("test_retrieval_recipe")
