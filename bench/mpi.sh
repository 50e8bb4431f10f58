#!/usr/bin/env bash
# bench/mpi.sh — scale-out on MPI: data-parallel training tokens/s and a sweep's
# wall time at 1 and 2 ranks, one OpenMP thread per rank, and the efficiency
# (2-rank rate over twice the 1-rank rate). A few minutes on 2 cores.
#   bash bench/mpi.sh [BUILD_DIR]        (default build/, built with MPI)
# BENCH_STEPS (default 20) sets the training steps; BENCH_SWEEP_STEPS (60) the
# steps of each sweep model; BENCH_BIND (none) is mpirun's --bind-to (core pins
# each rank to a core: right on a dedicated node, but on a shared machine a
# pinned rank cannot leave a busy core). The analysis for clusters is in
# bench/README.md. BENCH_YIELD (1) sets Open MPI's mpi_yield_when_idle: a rank
# waiting in a reduction yields the core instead of busy-polling it (on a shared
# machine polling takes CPU from the other rank; 0 for a dedicated node).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
MP="$BUILD/mechprobe"
STEPS="${BENCH_STEPS:-20}"
BIND="${BENCH_BIND:-none}"
export OMPI_MCA_mpi_yield_when_idle="${BENCH_YIELD:-1}"
CORES=$(env -u OMP_NUM_THREADS nproc)
SWEEP_STEPS="${BENCH_SWEEP_STEPS:-60}"
[[ -x "$MP" ]] || { echo "mpi.sh: build $MP first" >&2; exit 1; }
"$MP" -e 'os.exit(mp.mpi.built() and 0 or 1)' || { echo "mpi.sh: $MP is built without MPI (MP_MPI)" >&2; exit 1; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# one thread per rank; --oversubscribe only matters with more ranks than cores
MPIRUN=(mpirun --oversubscribe --bind-to "$BIND" --mca btl self,vader)
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }
cd "$ROOT"

echo "mechprobe MPI benchmark: $CORES cores, load average $(cut -d' ' -f1-3 /proc/loadavg), OMP_NUM_THREADS=1 per rank, --bind-to $BIND, yield_when_idle $OMPI_MCA_mpi_yield_when_idle"
t1=$("$MP" bench/mpi_bench.lua train "$STEPS" | grep RESULT)
t2=$("${MPIRUN[@]}" -np 2 "$MP" bench/mpi_bench.lua train "$STEPS" | grep RESULT)
s1=$("$MP" bench/mpi_bench.lua sweep "$SWEEP_STEPS" | grep RESULT)
s2=$("${MPIRUN[@]}" -np 2 "$MP" bench/mpi_bench.lua sweep "$SWEEP_STEPS" | grep RESULT)
tps1=$(echo "$t1" | field tokens_per_s); tps2=$(echo "$t2" | field tokens_per_s)
w1=$(echo "$s1" | field wall_s); w2=$(echo "$s2" | field wall_s)
np=$(echo "$t1" | field n_params)
printf "%-46s %12s %12s %10s\n" "workload" "1 rank" "2 ranks" "efficiency"
printf "%-46s %12.0f %12.0f %9.0f%%\n" "training tokens/s (d128 L4, batch 16x128, $STEPS st)" "$tps1" "$tps2" \
  "$(echo "100 * $tps2 / (2 * $tps1)" | bc -l)"
printf "%-46s %12.2f %12.2f %9.0f%%\n" "sweep wall s (4 models x $SWEEP_STEPS steps)" "$w1" "$w2" \
  "$(echo "100 * $w1 / (2 * $w2)" | bc -l)"
printf "model: %d parameters; 1-rank compute ~ %.2f GFLOP/s (6 x params x tokens/s)\n" "$np" \
  "$(echo "6 * $np * $tps1 / 1000000000" | bc -l)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg) (above $CORES, the figures are disturbed by other processes)"
echo "final losses (the same at 1 and 2 ranks up to rounding): train $(echo "$t1" | field final_loss) / $(echo "$t2" | field final_loss); sweep $(echo "$s1" | field losses) / $(echo "$s2" | field losses)"
