# lib.sh — what the MPI tests share (sourced by tests/mpi/test_*.sh, run by ctest
# with the mechprobe binary as $1): a scratch folder, the checks that SKIP
# (exit 77) when mechprobe is built without MPI or mpirun cannot start two
# ranks here, and `mpi N ARGS...`, the launcher line docs/mpi.md documents.
set -u
MP=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/mp_mpi.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
export MP_TEST_OUT=$OUT

# Open MPI on a 2-core machine, possibly as root in a container: allow root,
# allow more ranks than cores, shared memory between the ranks of one node
# (no single-copy mechanism: containers usually forbid ptrace-based CMA).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# a waiting rank yields its core instead of polling (ctest -j2 runs two jobs on 2 cores)
export OMPI_MCA_mpi_yield_when_idle=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mpi() {
  local n=$1; shift
  # a hang guard, not a speed check: ASan on a loaded machine takes 2 min for the probe sweep
  timeout ${MP_MPI_TIMEOUT:-280} mpirun --oversubscribe --mca btl self,vader -np "$n" "$@"
}

"$MP" -e 'os.exit(mp.mpi.built() and 0 or 77)' || { echo "SKIP: mechprobe is built without MPI (MP_MPI=OFF, or Open MPI / parallel HDF5 not found)"; exit 77; }
command -v mpirun > /dev/null || { echo "SKIP: mpirun not found"; exit 77; }
if ! mpi 2 true > "$OUT/start.log" 2>&1; then
  echo "SKIP: mpirun -np 2 cannot start here:"; cat "$OUT/start.log"; exit 77
fi
# Under AddressSanitizer: whole stacks, so that tests/lsan_openmpi.supp can
# recognise what Open MPI's plugins keep until exit.
export LSAN_OPTIONS="${LSAN_OPTIONS:-}${LSAN_OPTIONS:+:}fast_unwind_on_malloc=0"

fail() { echo "FAIL: $*"; exit 1; }
