# test_stopped_rank.sh — a rank that stops (SIGSTOP) no longer makes the others
# wait for ever: with MECHPROBE_MPI_TIMEOUT=3, rank 0's barrier gives up after
# 3 s with a message naming rank 1 as the one that did not answer, and the job
# ends with a non-zero status well before the hang guard. Then, a healthy
# barrier and sum under the same short limit still work.
source "$(dirname "$0")/lib.sh"
cd "$OUT"
cat > stop.lua <<'LUA'
-- rank 1 stops itself (its pid from /proc/self/stat), rank 0 waits at a barrier
mp.mpi.barrier()
if mp.mpi.rank() == 1 then
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("a"):match("^(%d+)")
  f:close()
  local p = assert(io.open("rank1.pid", "w")); p:write(pid); p:close()
  os.execute("kill -STOP " .. pid)
end
mp.mpi.barrier()
print("rank " .. mp.mpi.rank() .. " passed the barrier")
LUA
cleanup_stopped() { [ -f rank1.pid ] && kill -KILL "$(cat rank1.pid)" 2>/dev/null; return 0; }
start=$(date +%s)
MP_MPI_TIMEOUT=90 MECHPROBE_MPI_TIMEOUT=3 mpi 2 -x MECHPROBE_MPI_TIMEOUT "$MP" stop.lua > stop.log 2>&1
rc=$?
end=$(date +%s)
cleanup_stopped
[ $rc -eq 0 ] && { cat stop.log; fail "a stopped rank: exit 0"; }
[ $rc -eq 124 ] && { cat stop.log; fail "a stopped rank: the job hung (killed by the guard after $((end - start)) s)"; }
grep -q "rank 1 did not answer" stop.log || { cat stop.log; fail "a stopped rank: no message naming rank 1"; }
grep -q "MECHPROBE_MPI_TIMEOUT" stop.log || { cat stop.log; fail "a stopped rank: the message does not name the setting"; }
[ $((end - start)) -lt 60 ] || fail "a stopped rank: the job took $((end - start)) s"

cat > ok.lua <<'LUA'
for i = 1, 20 do mp.mpi.barrier() end
local s = mp.mpi.sum(mp.mpi.rank() + 1)
assert(s == 3, "sum " .. tostring(s))
print("ok " .. mp.mpi.rank())
LUA
MECHPROBE_MPI_TIMEOUT=3 mpi 2 -x MECHPROBE_MPI_TIMEOUT "$MP" ok.lua > ok.log 2>&1 || { cat ok.log; fail "healthy collectives under a 3 s limit"; }
[ "$(grep -c '^ok ' ok.log)" -eq 2 ] || { cat ok.log; fail "healthy collectives: not both ranks"; }
echo "test_mpi_stopped_rank: passed"
