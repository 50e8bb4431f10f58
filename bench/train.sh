#!/usr/bin/env bash
# bench/train.sh — training throughput against PyTorch eager CPU: the same
# Llama-style model (initial weights shared through an HDF5 checkpoint), the
# same batch and thread count, full AdamW steps (forward, backward, clipping,
# update); one process per measurement so each peak RSS is its own.
#   bash bench/train.sh [BUILD_DIR]      (default build/; needs bench_train built)
# Configurations (issue 3): (a) 4 layers, d_model 128, T 256, batch 16;
# (b) 8 layers, d_model 512, T 512, batch 4. Vocabulary 512, d_mlp = 8/3 d_model.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
BIN="$BUILD/bench/bench_train"
PY=/usr/bin/python3
N="${BENCH_THREADS:-$(nproc)}"
export OMP_NUM_THREADS="$N"
# passive waiting for both sides, the same for both (mechprobe alone would spin
# briefly, GOMP_SPINCOUNT=1000: docs/mpi.md "Idle OpenMP threads"; spinning threads
# collapse when anything else shares the cores)
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
[[ -x "$BIN" ]] || { echo "train.sh: build $BIN first (cmake --build $BUILD --target bench_train)" >&2; exit 1; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/mptrain.XXXXXX")"; trap 'rm -rf "$TMP"' EXIT
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }

# the ceiling: OpenBLAS sgemm on the large config's shapes, same kernel and threads (bench_forward)
CEIL=""
if [[ -x "$BUILD/bench/bench_forward" ]]; then
    CEIL=$("$BUILD/bench/bench_forward" --mode sgemm --reps 7 --shapes 2048x1376x512,2048x512x1376,2048x512x512,1024x1024x1024 |
           sed -n 's/^sgemm_best_gflops=//p')
    echo "sgemm ceiling (OpenBLAS, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, best of 2048x1376x512, 2048x512x1376, 2048x512x512, 1024^3): $CEIL GFLOP/s"
fi
printf "%-34s %12s %12s %8s %10s %10s %9s %8s %8s %7s\n" "config" "mp tok/s" "torch tok/s" "ratio" "mp MB" "torch MB" "loss0 d" \
    "mp GF/s" "torch GF" "mp %ceil"
run() { # name d layers heads mlp seq batch steps
    local name=$1 d=$2 l=$3 h=$4 mlp=$5 T=$6 B=$7 S=$8
    local ours theirs
    ours=$("$BIN" --d-model "$d" --layers "$l" --heads "$h" --d-mlp "$mlp" --vocab 512 --seq "$T" --batch "$B" \
           --steps "$S" --warmup-steps 1 --init "$TMP/$name.h5" --tokens "$TMP/$name.i32" | grep RESULT)
    theirs=$(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp $PY "$ROOT/bench/peer_torch_train.py" \
           "$TMP/$name.h5" "$TMP/$name.i32" --batch "$B" --seq "$T" --steps "$S" --warmup-steps 1 --threads "$N" | grep RESULT)
    local a b ra rb l0a l0b
    [[ -n $ours && -n $theirs ]] || { echo "train.sh: $name: no RESULT line from $([[ -z $ours ]] && echo bench_train || echo the PyTorch peer)" >&2; exit 1; }
    a=$(echo "$ours" | field tokens_per_s); b=$(echo "$theirs" | field tokens_per_s)
    ra=$(echo "$ours" | field peak_rss_mb); rb=$(echo "$theirs" | field peak_rss_mb)
    l0a=$(echo "$ours" | field loss0); l0b=$(echo "$theirs" | field loss0)
    local fl gfa gfb pc="-"
    fl=$(echo "$ours" | field flops_per_token)
    gfa=$(awk -v t="$a" -v f="$fl" 'BEGIN { printf "%.1f", t * f / 1e9 }')
    gfb=$(awk -v t="$b" -v f="$fl" 'BEGIN { printf "%.1f", t * f / 1e9 }')
    [[ -n $CEIL ]] && pc=$(awk -v g="$gfa" -v c="$CEIL" 'BEGIN { printf "%.0f%%", 100 * g / c }')
    printf "%-34s %12s %12s %8.2f %10s %10s %9.1e %8s %8s %7s\n" "$name" "$a" "$b" "$(echo "$a / $b" | bc -l)" "$ra" "$rb" \
        "$(echo "$l0a - $l0b" | bc -l | tr -d -)" "$gfa" "$gfb" "$pc"
}
echo "threads: $N (OMP_NUM_THREADS for us, torch.set_num_threads for the peer); median of timed steps after 1 warm-up"
run "(a) L4 d128 T256 B16" 128 4 4 344 256 16 30
run "(b) L8 d512 T512 B4" 512 8 8 1376 512 4 20
echo "ratio = mechprobe / PyTorch tokens per second (> 1: faster); loss0 d = |initial loss difference| (same model)"
echo "GF/s = tokens/s x the step's matmul FLOPs per token (6 x the linear weights + causal attention; counted, the same"
echo "count for both); %ceil = ours over the sgemm ceiling: no implementation on this BLAS runs above ~100%"
