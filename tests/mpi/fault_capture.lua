-- fault_capture.lua MODEL OUT MODE (2 ranks) — a dataset capture in which rank 1
-- fails after the file was created: MODE "error" raises in a hook (the ranks
-- agree, the temporary is removed, each rank reports), "kill" kills rank 1
-- outright (mpirun ends the job).
local model_path, out, mode = arg[1], arg[2], arg[3]
local m = mp.load(model_path)
local prompts = {}
for i = 1, 6 do prompts[i] = m:to_tokens(("prompt number %d"):format(i)) end
local first, count = mp.mpi.split(#prompts)
local mine = {}
for i = first, first + count - 1 do mine[#mine + 1] = prompts[i] end
local calls = 0
m:capture_prompts(mine, {out = out, hooks = "*", fwd_hooks = {{"blocks.1.hook_resid_post", function()
  calls = calls + 1
  if mp.mpi.rank() == 1 and calls == 2 then
    if mode == "kill" then os.execute("kill -9 $PPID") end
    error("rank 1 gives up on its second prompt")
  end
end}}})
print("capture finished on rank " .. mp.mpi.rank())
