#!/usr/bin/env bash
# bench/peers.sh — mechprobe against llama.cpp (prefill and decoding, F32 and
# Q8_0 GGUF) and llm.c (GPT-2 training on the CPU), both built here from source
# snapshots that you point to; nothing of theirs is in this repository. It
# writes the same model for both sides, checks that both compute the same thing
# (greedy tokens and logits for llama.cpp, the initial loss for llm.c), then
# times every row in interleaved rounds, logging the CPU other processes used,
# and prints the table with ratios. See bench/README.md.
#
#   LLAMA_CPP_SRC=DIR LLMC_SRC=DIR bash bench/peers.sh [--quick] [BUILD_DIR]
#
# DIR: a checkout of https://github.com/ggerganov/llama.cpp (tested with the
# Feb 2025 snapshot c392e50) and of https://github.com/karpathy/llm.c (May 2025,
# f1e2ace); either missing: its rows are skipped with a message. BUILD_DIR:
# mechprobe's build (default build/; needs bench_gen). Environment:
# PEERS_BUILD (where the peers are built, default $TMPDIR/mechprobe-peers; kept
# between runs so later runs skip the build), BENCH_THREADS (default 2),
# BENCH_ROUNDS (default 3; --quick: 1), BENCH_TMP (scratch, default $TMPDIR).
# OPENBLAS_CORETYPE is passed through as set; the F32 rows of mechprobe are
# also run with it unset, and the kernel that ran is printed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
BUILD="$ROOT/build"
for a in "$@"; do
    case "$a" in
        --quick) QUICK=1 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) BUILD="$a" ;;
    esac
done
GEN="$BUILD/bench/bench_gen"
N="${BENCH_THREADS:-2}"
ROUNDS="${BENCH_ROUNDS:-$([[ $QUICK == 1 ]] && echo 1 || echo 3)}"
TRAIN_STEPS=$([[ $QUICK == 1 ]] && echo 2 || echo 10)   # the median of 9 timed steps (4 swung 2.9-4.3x between days)
PEERS="${PEERS_BUILD:-${TMPDIR:-/tmp}/mechprobe-peers}"
if [[ ! -x "$GEN" ]]; then
    echo "peers.sh: $GEN not found; build it first:" >&2
    echo "  cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j$N --target bench_gen" >&2
    exit 1
fi
mkdir -p "$PEERS" || exit 1
TMP="$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/mppeers.XXXXXX")" || exit 1
trap 'rm -rf "$TMP"' EXIT
START=$(date +%s)

source "$ROOT/bench/lib.sh"   # kv, ratio, median, maxof, build_llama_peer

echo "== mechprobe vs llama.cpp and llm.c — $(date -u +%Y-%m-%dT%H:%MZ)"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; threads: $N;" \
     "rounds: $ROUNDS$([[ $QUICK == 1 ]] && echo ' (--quick)'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- peers: build from the snapshots ----
LLAMA=""
if [[ -z "${LLAMA_CPP_SRC:-}" || ! -f "${LLAMA_CPP_SRC:-/nonexistent}/include/llama.h" ]]; then
    echo "SKIP llama.cpp rows: set LLAMA_CPP_SRC to a llama.cpp checkout (git clone https://github.com/ggerganov/llama.cpp)"
else
    LB="$PEERS/llama.cpp-build"
    echo "building llama.cpp (CPU, GGML_NATIVE, Release) from $LLAMA_CPP_SRC in $LB ..."
    if build_llama_peer "$LLAMA_CPP_SRC" "$PEERS" "$ROOT" "$N" llama; then
        LLAMA="$PEERS/peer_llama"
    else
        echo "SKIP llama.cpp rows: its build failed (logs in $PEERS/llama-*.log)"
    fi
fi
LLMC=""
if [[ -z "${LLMC_SRC:-}" || ! -f "${LLMC_SRC:-/nonexistent}/train_gpt2.c" ]]; then
    echo "SKIP llm.c row: set LLMC_SRC to an llm.c checkout (git clone https://github.com/karpathy/llm.c)"
elif gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$LLMC_SRC" -I"$ROOT/bench" \
         "$ROOT/bench/peer_llmc.c" -lm -o "$PEERS/peer_llmc" 2>"$PEERS/llmc-build.log"; then
    LLMC="$PEERS/peer_llmc"   # llm.c's Makefile flags for train_gpt2 on the CPU: -Ofast -march=native -fopenmp -DOMP
else
    echo "SKIP llm.c row: its build failed (log in $PEERS/llmc-build.log)"
fi
echo "peers ready after $(( $(date +%s) - START )) s"

# ---- the model, written once for both sides ----
M="$TMP/r512"
"$GEN" --mode make --out "$M" --d-model 512 --layers 8 --vocab 512 --seed 1234 >/dev/null || exit 1
echo "model: random Llama, d 512, 8 layers, 8 heads, d_mlp 1376, vocab 512 (byte-level tokenizer), N(0, 0.02);" \
     "$M.f32.gguf $(( $(stat -c %s "$M.f32.gguf") / 1048576 )) MiB, $M.q8_0.gguf $(( $(stat -c %s "$M.q8_0.gguf") / 1048576 )) MiB"
export OMP_NUM_THREADS="$N"

# ours / theirs with a given thread count; output file first
ours() { local out="$1" th="$2"; shift 2; OMP_NUM_THREADS="$th" "$GEN" "$@" >"$out" 2>"$out.err" || { echo "FAILED: bench_gen $*"; cat "$out.err"; }; }
ours_unpinned() { local out="$1" th="$2"; shift 2; env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$th" "$GEN" "$@" >"$out" 2>"$out.err" || { echo "FAILED: bench_gen $*"; cat "$out.err"; }; }
theirs() { local out="$1" th="$2"; shift 2; "$LLAMA" "$@" --threads "$th" >"$out" 2>"$out.err" || { echo "FAILED: peer_llama $*"; cat "$out.err"; }; }

# ---- checks: both sides compute the same thing ----
echo
echo "== checks"
if [[ -n "$LLAMA" ]]; then
    for q in f32 q8_0; do
        ours "$TMP/chk_mp_$q" "$N" --mode decode --model "$M.$q.gguf" -n 128 --reps 1 --dump "$TMP/mp_$q.logits"
        theirs "$TMP/chk_ll_$q" "$N" --mode decode --model "$M.$q.gguf" -n 128 --reps 1 --dump "$TMP/ll_$q.logits" --kv-f32 1
        a="$(kv "$TMP/chk_mp_$q" tokens)"; b="$(kv "$TMP/chk_ll_$q" tokens)"
        same="$(awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, ","); split(b, y, ","); for (i = 1; i <= n && x[i] == y[i]; i++); print i - 1 }')"
        # logits compared while both were fed the same tokens (step i's logits depend on tokens 1..i)
        "$GEN" --mode compare --a "$TMP/mp_$q.logits" --b "$TMP/ll_$q.logits" --vocab 512 -n "$(( same > 0 ? same : 1 ))" >"$TMP/cmp_$q"
        "$GEN" --mode compare --a "$TMP/mp_$q.logits" --b "$TMP/ll_$q.logits" --vocab 512 -n 8 >"$TMP/cmp8_$q"
        echo "  $q: greedy tokens equal for $same/128 steps; logits: max |diff| $(kv "$TMP/cmp8_$q" max_abs_diff) over" \
             "the first 8 steps, $(kv "$TMP/cmp_$q" max_abs_diff) over the $same equal ones (largest |logit| $(kv "$TMP/cmp_$q" largest_abs))"
    done
    echo "  (llama.cpp's KV cache in F32 for this check, F16 as by default when timed. F32: float32 rounding of"
    echo "   other summation orders, ~1e-6. Q8_0: both quantize activations to 8 bits per 32-value block the same"
    echo "   way, so logits agree to ~1e-6 until some value lies on a rounding boundary and one 8-bit code differs;"
    echo "   from there they differ by the 8-bit rounding, ~1e-2, and a near-tie of this random model may flip a token)"
fi
[[ -n "$LLMC" ]] && echo "  llm.c: the initial loss of both trainers is printed with the training row below"

# ---- timed rounds, interleaved ----
echo
echo "== timing: $ROUNDS interleaved round(s); each cell is the median over rounds (per run: median of 3 reps after 1 warm-up)"
declare -A V O
add() { V[$1]="${V[$1]:-} $(kv "$2" tok_s)"; O[$1]="${O[$1]:-} $(kv "$2" other_cores)"; }
for ((r = 1; r <= ROUNDS; r++)); do
    ours "$TMP/t" "$N" --mode prefill --model "$M.f32.gguf" -T 1024 --reps 3; add pf_mp "$TMP/t"; cp "$TMP/t" "$TMP/pf_mp"
    ours_unpinned "$TMP/t" "$N" --mode prefill --model "$M.f32.gguf" -T 1024 --reps 3; add pf_mpu "$TMP/t"; cp "$TMP/t" "$TMP/pf_mpu"
    [[ -n "$LLAMA" ]] && { theirs "$TMP/t" "$N" --mode prefill --model "$M.f32.gguf" -T 1024 --reps 3; add pf_ll "$TMP/t"; }
    for q in f32 q8_0; do
        for th in "$N" 1; do
            [[ $q == f32 && $th == 1 && $N != 1 ]] && continue
            [[ -n "$LLAMA" ]] && { theirs "$TMP/t" "$th" --mode decode --model "$M.$q.gguf" -n 128 --reps 3; add "dc_ll_${q}_$th" "$TMP/t"; }
            ours "$TMP/t" "$th" --mode decode --model "$M.$q.gguf" -n 128 --reps 3; add "dc_mp_${q}_$th" "$TMP/t"
            cp "$TMP/t" "$TMP/dc_mp_${q}_$th"
            if [[ $q == f32 ]]; then ours_unpinned "$TMP/t" "$th" --mode decode --model "$M.$q.gguf" -n 128 --reps 3; add "dc_mpu_${q}_$th" "$TMP/t"; fi
        done
    done
done
# training: one round (an llm.c step of this size takes seconds); ours writes the checkpoint llm.c reads
"$GEN" --mode train-gpt2 --out "$TMP/gpt2" --d-model 512 --layers 8 --vocab 512 -B 4 -T 512 --steps "$TRAIN_STEPS" \
    >"$TMP/tr_mp" 2>&1 || { echo "FAILED: bench_gen --mode train-gpt2"; cat "$TMP/tr_mp"; }
add tr_mp "$TMP/tr_mp"
if [[ -n "$LLMC" ]]; then
    "$LLMC" "$TMP/gpt2.llmc.bin" "$TMP/gpt2.tokens.i32" 4 512 "$TRAIN_STEPS" >"$TMP/tr_llmc" 2>&1; add tr_llmc "$TMP/tr_llmc"
fi
med() { echo "${V[$1]:-}" | median; }
oth() { echo "${O[$1]:-} ${O[$2]:-}" | maxof; }

echo
FMT='| %-58s | %-18s | %10s | %10s | %6s | %6s |\n'
printf "$FMT" workload peer "peer tok/s" "ours tok/s" ratio others
printf "$FMT" "$(printf '%.0s-' {1..58})" "------------------" "----------" "----------" "------" "------"
row() { printf "$FMT" "$1" "$2" "$(med "$3")" "$(med "$4")" "$(ratio "$(med "$4")" "$(med "$3")")" "$(oth "$3" "$4")"; }
PIN="${OPENBLAS_CORETYPE:-unset}"
row "prefill, T 1024, F32, $N threads (OpenBLAS $(kv "$TMP/pf_mp" openblas_core))" "llama.cpp" pf_ll pf_mp
row "  same, OPENBLAS_CORETYPE unset (OpenBLAS $(kv "$TMP/pf_mpu" openblas_core))" "llama.cpp" pf_ll pf_mpu
row "decode 128 tokens, F32, $N threads" "llama.cpp" "dc_ll_f32_$N" "dc_mp_f32_$N"
row "  same, OPENBLAS_CORETYPE unset" "llama.cpp" "dc_ll_f32_$N" "dc_mpu_f32_$N"
row "decode 128 tokens, Q8_0, $N threads ($(kv "$TMP/dc_mp_q8_0_$N" qdot_isa) kernels)" "llama.cpp" "dc_ll_q8_0_$N" "dc_mp_q8_0_$N"
[[ $N != 1 ]] && row "decode 128 tokens, Q8_0, 1 thread" "llama.cpp" dc_ll_q8_0_1 dc_mp_q8_0_1
row "GPT-2 training, d 512, 8 layers, T 512, B 4 ($TRAIN_STEPS steps)" "llm.c" tr_llmc tr_mp
echo "(tok/s: median over rounds; ratio: ours / peer, > 1 = mechprobe faster; others: the most CPU, in cores, that"
echo " other processes used during any run of the row (/proc/stat minus the run's own CPU): above ~0.1 the row is disturbed."
echo " OPENBLAS_CORETYPE was $PIN for the pinned rows; llama.cpp does not use OpenBLAS (its own kernels, GGML_NATIVE).)"
[[ -n "$LLMC" ]] && echo "training check: same weights and batch, initial loss mechprobe $(kv "$TMP/tr_mp" loss0)," \
    "llm.c $(kv "$TMP/tr_llmc" loss0); last step $(kv "$TMP/tr_mp" loss_last) vs $(kv "$TMP/tr_llmc" loss_last)"
QB=$(stat -c %s "$M.q8_0.gguf")
Q="$TMP/dc_mp_q8_0_$N"
echo "peak RSS, Q8_0 decode ($N threads): mechprobe $(kv "$Q" maxrss_mib) MiB, of which $(kv "$Q" base_rss_mib) MiB before" \
     "loading (code, libraries), so $(awk -v a="$(kv "$Q" maxrss_mib)" -v b="$(kv "$Q" base_rss_mib)" 'BEGIN { printf "%.1f", a - b }') MiB for" \
     "the model; aim <= 1.2 x the $(awk -v b="$QB" 'BEGIN { printf "%.1f", b / 1048576 }') MiB file + the 4.0 MiB KV cache" \
     "= $(awk -v b="$QB" 'BEGIN { printf "%.1f", 1.2 * b / 1048576 + 4 }') MiB (llama.cpp: $(kv "$TMP/chk_ll_q8_0" maxrss_mib) MiB peak)"
echo "total time: $(( $(date +%s) - START )) s"
