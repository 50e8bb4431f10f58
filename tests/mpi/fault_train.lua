-- fault_train.lua CKPT (2 ranks) — data-parallel training that writes a
-- checkpoint every step (rank 0); rank 1 kills itself after step 3.
local m = mp.model.new{d_model = 32, n_layer = 2, n_head = 4, d_mlp = 64, vocab = 64, ctx = 16, seed = 5}
local task = mp.tasks.mtd{q = 64, m = 3, seed = 1}
m:train{task = task, steps = 50, batch = 4, seq_len = 16, progress = false, checkpoint = arg[1], checkpoint_every = 1,
        on_step = function(step)
          if mp.mpi.rank() == 1 and step == 3 then os.execute("kill -9 $PPID") end
        end}
print("training finished on rank " .. mp.mpi.rank())
