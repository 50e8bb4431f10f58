-- dataset_mp.lua — mechprobe's side of bench/dataset.sh: one dataset capture,
-- timed inside the process so that loading the model is not counted.
--
--   mechprobe bench/dataset_mp.lua MODEL TOKENS_FILE HOOKS OUT.h5
--   [OMP_NUM_THREADS=1 mpirun -np R] mechprobe bench/dataset_mp.lua ...
--
-- It makes the call `mechprobe capture --model MODEL --tokens-file TOKENS_FILE
-- --hooks HOOKS --out OUT.h5` makes (probes/capture.lua: mp.capture, C's
-- mp_capture_run), between a barrier of every rank and its return (collective:
-- the file is committed, fsync included). HOOKS "none" captures no activation:
-- the same forwards over the same prompts with only /tokens and /lengths
-- written, the compute limit. Prints key=value lines on rank 0.
--
--   mechprobe bench/dataset_mp.lua --info MODEL      prints the model's shape
local function usage(msg)
  io.stderr:write("dataset_mp.lua: " .. msg .. "\nusage: mechprobe bench/dataset_mp.lua MODEL TOKENS_FILE HOOKS OUT.h5\n"
    .. "       mechprobe bench/dataset_mp.lua --info MODEL\n")
  os.exit(2)
end

if arg[1] == "--info" then
  if not arg[2] then usage("--info needs a model file") end
  local c = mp.load(arg[2]).config
  for _, k in ipairs {"vocab", "n_layer", "d_model", "n_head", "n_kv_head", "d_mlp", "ctx"} do
    print(("%s=%s"):format(k, tostring(c[k])))
  end
  return
end
if #arg ~= 4 then usage("expected 4 arguments, got " .. #arg) end
local model_path, tokens_file, hooks, out = arg[1], arg[2], arg[3], arg[4]

-- peak resident set of this process, MiB (/proc/self/status VmHWM)
local function maxrss_mib()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return (tonumber(s:match("VmHWM:%s*(%d+)")) or 0) / 1024
end

local t0 = mp.clock()
local m = mp.load(model_path)
local load_s = mp.clock() - t0
mp.mpi.barrier()
local t1 = mp.clock()
local n_ds, n_prompts, tmax = mp.capture{model = m, out = out, hooks = hooks, tokens_file = tokens_file,
                                         what = "tokens file"}
local capture_s = mp.clock() - t1
local rss = mp.mpi.gather(maxrss_mib())
if mp.mpi.rank() == 0 then
  local top = 0
  for _, r in ipairs(rss) do top = math.max(top, r) end
  print(("ranks=%d\nthreads=%s\ndatasets=%d\nsequences=%d\ntmax=%d"):format(mp.mpi.size(),
    os.getenv("OMP_NUM_THREADS") or "-", n_ds, n_prompts, tmax))
  print(("load_s=%.3f\ncapture_s=%.3f\nmaxrss_mib=%.1f"):format(load_s, capture_s, top))
end
