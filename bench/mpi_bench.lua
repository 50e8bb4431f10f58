-- mpi_bench.lua train|sweep [steps] — the workloads of bench/mpi.sh, run alone or
-- under mpirun; rank 0 prints one RESULT line.
--   train: data-parallel training of a byte-level Llama (d_model 128, 4 layers,
--          4 heads, d_mlp 344, ctx 128) on GPL-3 text, global batch 16 x 128
--          tokens, `steps` AdamW steps after 2 warm-up steps: tokens/s.
--   sweep: 4 independent models (d_model 64, 2 layers) of `steps` steps each,
--          spread over the ranks with mp.mpi.sweep: wall seconds.
local what, steps = arg[1], tonumber(arg[2] or "20")
local text = mp.tasks.text{path = "/usr/share/common-licenses/GPL-3", ctx = 128, seed = 1}
local function now() return tonumber(io.popen("date +%s.%N"):read("l")) end   -- wall clock
if what == "train" then
  local m = mp.model.new{d_model = 128, n_layer = 4, n_head = 4, d_mlp = 344, vocab = 257, ctx = 128, seed = 1,
                         tokenizer = "bytes"}
  m:train{task = text, steps = 2, batch = 16, progress = false}            -- warm-up: buffers, first touches
  mp.mpi.barrier()
  local r = m:train{task = text, steps = steps, batch = 16, progress = false}
  if mp.mpi.rank() == 0 then
    print(("RESULT train ranks=%d tokens_per_s=%.1f n_params=%d final_loss=%.4f"):format(mp.mpi.size(),
      r.tokens_per_s, m.config.n_params, r.final_loss))
  end
elseif what == "sweep" then
  mp.mpi.barrier()
  local t0 = now()
  local res = mp.mpi.sweep({1, 2, 3, 4}, function(seed)
    local m = mp.model.new{d_model = 64, n_layer = 2, n_head = 4, d_mlp = 172, vocab = 257, ctx = 128, seed = seed,
                           tokenizer = "bytes"}
    text:seed(seed)
    return m:train{task = text, steps = steps, batch = 8, progress = false}.final_loss
  end)
  if mp.mpi.rank() == 0 then
    local wall = now() - t0
    print(("RESULT sweep ranks=%d wall_s=%.2f losses=%.4f,%.4f,%.4f,%.4f"):format(mp.mpi.size(), wall,
      res[1], res[2], res[3], res[4]))
  end
else
  error("usage: mpi_bench.lua train|sweep [steps]")
end
