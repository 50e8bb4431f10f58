-- test_sweep.lua (2 ranks) — mp.mpi.sweep gives rank 0 exactly the results of
-- the serial loop (same seeds: training losses and logits bit for bit, at one
-- thread per process), with items spread over both ranks and nil on rank 1;
-- and the collectives: split, sum (number and Tensor), gather, bcast, and the
-- clear error for a value that cannot travel (a Model).
local t = dofile(arg[0]:match("^(.-)[^/]*$") .. "../lua/testlib.lua")
assert(mp.mpi.size() == 2, "run with mpirun -np 2")
local rank = mp.mpi.rank()

local probe = {{1, 5, 9, 13, 2, 7, 3, 11}}
local function job(seed, i)
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = 16, ctx = 16, seed = seed}
  local r = m:train{task = mp.tasks.mtd{q = 16, m = 3, seed = seed}, steps = 6, batch = 4, seq_len = 16,
                    progress = false}
  return {seed = seed, i = i, loss = r.loss, logits = m:forward(probe), tag = "model-" .. seed,
          nested = {flag = true, half = 0.5}, world = mp.mpi.world_rank(), alone = mp.mpi.size()}
end
local items = {101, 102, 103, 104, 105}
local res = mp.mpi.sweep(items, job)
-- the serial reference: rank 0 alone (a one-item sweep)
local ref = mp.mpi.sweep({1}, function()
  local out = {}
  for i, s in ipairs(items) do out[i] = job(s, i) end
  return out
end)

if rank == 0 then
  ref = ref[1]
  t.ok(#res == #items, "one result per item")
  local ranks = {}
  for i = 1, #items do
    local a, b = res[i], ref[i]
    t.ok(a.seed == items[i] and a.i == i and a.tag == b.tag, ("item %d: its own result"):format(i))
    t.case("item " .. i .. " losses", function() t.deep_eq(a.loss, b.loss) end)
    t.ok(a.logits:sub(b.logits):norm() == 0, ("item %d: logits equal the serial run's"):format(i))
    t.ok(a.nested.flag == true and a.nested.half == 0.5 and math.type(a.i) == "integer", "values keep their types")
    t.ok(a.alone == 1, "inside an item the group is the process alone")
    ranks[a.world] = (ranks[a.world] or 0) + 1
  end
  t.ok(ranks[0] == 3 and ranks[1] == 2, "items 1,3,5 on rank 0 and 2,4 on rank 1")
else
  t.ok(res == nil, "rank 1 gets nil")
end

-- collectives
local first, count = mp.mpi.split(5)
t.ok((rank == 0 and first == 1 and count == 2) or (rank == 1 and first == 3 and count == 3), "split(5)")
t.ok(mp.mpi.sum(rank + 1) == 3, "sum of numbers")
local v = mp.tensor{rank, 10 * rank}
mp.mpi.sum(v)
t.ok(v:get(1) == 1 and v:get(2) == 10, "sum of a Tensor, in place")
local g = mp.mpi.gather({r = rank, s = "x" .. rank})
if rank == 0 then t.ok(g[1].r == 0 and g[2].r == 1 and g[2].s == "x1", "gather") else t.ok(g == nil, "gather: nil off root") end
local b = mp.mpi.bcast(rank == 0 and {answer = 42, t = mp.tensor{1, 2, 3}} or nil)
t.ok(b.answer == 42 and b.t:get(3) == 3, "bcast")
t.case("a Model cannot travel", function()
  local m = mp.model.new{d_model = 16, n_layer = 1, n_head = 2, d_mlp = 32, vocab = 16, ctx = 16}
  t.expect_error(function() mp.mpi.gather({model = m}) end, "cannot send a mechprobe.Model between ranks")
end)
t.finish("test_mpi_sweep (rank " .. rank .. ")")
