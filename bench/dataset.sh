#!/usr/bin/env bash
# bench/dataset.sh — activation datasets (issue 46): `mechprobe capture
# --tokens-file` of hook_resid_post at every layer into one HDF5 file, in tokens/s,
# against a PyTorch eager forward whose forward hooks write the same arrays with
# h5py (bench/peer_dataset.py, same weights, sequences and threads), and against
# the physical limits measured in the same run: mechprobe's forward alone over the
# same sequences, and the disk's write bandwidth (dd oflag=direct of the same byte
# count in the same folder). Also the capture under mpirun. Interleaved rounds;
# each cell is the median over rounds. See bench/README.md.
#
#   bash bench/dataset.sh [--model FILE.gguf] [--tokens N] [--seq T] [--threads N]
#                         [--ranks R] [--rounds K] [--dir DIR] [--build DIR] [--quick]
#
# --model   a llama GGUF (F32/F16/BF16: PyTorch reads the same weights; other types:
#           PyTorch runs random weights of the same shapes). Default: bench_gen's
#           random d 512, 8-layer Llama (vocab 512), written to DIR.
# --tokens  total tokens (default 1048576; --quick: 16 sequences); N / T sequences
# --seq     tokens per sequence (default 512)
# --threads OpenMP / torch threads (default 2)
# --ranks   ranks of the mpirun row, each with threads / ranks threads (default 2;
#           0 or 1: no mpirun row; skipped when mechprobe is built without MPI)
# --rounds  interleaved rounds (default 3; --quick: 1)
# --dir     where the files are written and the disk is measured (default
#           $BENCH_TMP, $TMPDIR or /tmp); needs about the dataset's size free
# --build   mechprobe's build (default build/): mechprobe, and bench/bench_gen
#           when no --model is given
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
MODEL=""
TOKENS=""
SEQ=512
THREADS=2
RANKS=2
ROUNDS=""
QUICK=0
DIR="${BENCH_TMP:-${TMPDIR:-/tmp}}"
PY=/usr/bin/python3
TORCH_LIBS=/usr/lib/x86_64-linux-gnu/openblas-openmp   # torch on the OpenMP OpenBLAS (see run.sh)
die() { echo "dataset.sh: $*" >&2; exit 2; }
posint() { [[ "$2" =~ ^[0-9]+$ && "$2" -ge "${3:-1}" ]] || die "$1 '$2': expected an integer >= ${3:-1}"; }
while (($#)); do
    case "$1" in
        --model|--tokens|--seq|--threads|--ranks|--rounds|--dir|--build)
            (($# >= 2)) || die "$1 needs a value"
            case "$1" in
                --model) MODEL="$2" ;; --tokens) TOKENS="$2"; posint "$1" "$2" ;; --seq) SEQ="$2"; posint "$1" "$2" ;;
                --threads) THREADS="$2"; posint "$1" "$2" ;; --ranks) RANKS="$2"; posint "$1" "$2" 0 ;;
                --rounds) ROUNDS="$2"; posint "$1" "$2" ;; --dir) DIR="$2" ;; --build) BUILD="$2" ;;
            esac
            shift 2 ;;
        --quick) QUICK=1; shift ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ -n "$ROUNDS" ]] || ROUNDS=$([[ $QUICK == 1 ]] && echo 1 || echo 3)
[[ -n "$TOKENS" ]] || TOKENS=$([[ $QUICK == 1 ]] && echo $((16 * SEQ)) || echo 1048576)
MP="$BUILD/mechprobe"
[[ -x "$MP" ]] || die "$MP not found; build it: cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j"
[[ -x /usr/bin/time ]] || die "/usr/bin/time (GNU time, Debian's package time) is needed to measure each row's CPU"
[[ -d "$DIR" && -w "$DIR" ]] || die "--dir $DIR is not a writable folder"
[[ -z "$MODEL" || -f "$MODEL" ]] || die "--model $MODEL: no such file"
TMP="$(mktemp -d "$DIR/mpdataset.XXXXXX")" || exit 1
trap 'rm -rf "$TMP"' EXIT
HZ=$(getconf CLK_TCK)
FAILED=0
START=$(date +%s)

source "$ROOT/bench/lib.sh"   # kv, median, maxof (its ratio is redefined below: no "x")
calc() { awk "BEGIN { $1 }" </dev/null; }    # calc 'printf ..., expr'
ratio() { calc "a = \"$1\"; b = \"$2\"; if (a == \"-\" || b == \"-\" || b + 0 == 0) print \"-\"; else printf \"%.2f\n\", a / b"; }
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }   # ticks of every core not idle

# measure OUT CMD...: runs CMD (stdout to OUT, stderr to OUT.err) and appends to OUT
# wall_s (the whole process), cpu_s (its CPU and its children's) and others (cores
# that other processes used meanwhile: /proc/stat's busy time minus cpu_s, over
# wall_s). Returns CMD's status; on failure prints its output.
measure() {
    local out="$1" b0 b1 t0 t1 rc; shift
    b0=$(busy); t0=$(date +%s.%N)
    /usr/bin/time -f 'cpu_s=%U %S' -o "$out.time" "$@" >"$out" 2>"$out.err"; rc=$?
    t1=$(date +%s.%N); b1=$(busy)
    local cpu; cpu=$(awk '/^cpu_s=/ { sub("cpu_s=", ""); print $1 + $2 }' "$out.time")
    calc "w = $t1 - $t0; o = (($b1 - $b0) / $HZ - ${cpu:-0}) / w; printf \"wall_s=%.3f\ncpu_s=%.2f\nothers=%.2f\n\", w, ${cpu:-0}, o < 0 ? 0 : o" >>"$out"
    if ((rc)); then echo "FAILED ($rc): $*"; tail -20 "$out.err"; FAILED=1; fi
    return $rc
}

echo "== mechprobe activation dataset vs PyTorch + h5py — $(date -u +%Y-%m-%dT%H:%MZ)"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; threads: $THREADS;" \
     "rounds: $ROUNDS$([[ $QUICK == 1 ]] && echo ' (--quick)'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "folder: $DIR ($(df -PT "$DIR" | awk 'NR == 2 { printf "%s on %s, %.1f GiB free", $2, $1, $5 / 1048576 }'))"

# ---- the model ----
if [[ -z "$MODEL" ]]; then
    GEN="$BUILD/bench/bench_gen"
    [[ -x "$GEN" ]] || die "no --model and $GEN not found: build it (cmake --build $BUILD --target bench_gen) or give --model"
    "$GEN" --mode make --out "$TMP/r512" --d-model 512 --layers 8 --vocab 512 --seed 1234 >/dev/null || exit 1
    MODEL="$TMP/r512.f32.gguf"
    echo "model: bench_gen's random Llama (d 512, 8 layers, 8 heads, d_mlp 1376, vocab 512, N(0, 0.02), seed 1234)"
fi
"$MP" "$ROOT/bench/dataset_mp.lua" --info "$MODEL" >"$TMP/info" 2>&1 || { cat "$TMP/info"; die "--model $MODEL: mechprobe cannot load it"; }
V=$(kv "$TMP/info" vocab); L=$(kv "$TMP/info" n_layer); D=$(kv "$TMP/info" d_model)
echo "model: $MODEL ($(( $(stat -c %s "$MODEL") / 1048576 )) MiB): vocab $V, $L layers, d_model $D," \
     "$(kv "$TMP/info" n_head) heads ($(kv "$TMP/info" n_kv_head) kv), d_mlp $(kv "$TMP/info" d_mlp)"

# ---- the sequences: N / T lines of T random ids < vocab, made once ----
((TOKENS >= SEQ)) || SEQ=$TOKENS
NSEQ=$((TOKENS / SEQ)); NTOK=$((NSEQ * SEQ))
TOKF="$TMP/tokens.txt"
awk -v n="$NSEQ" -v t="$SEQ" -v v="$V" 'BEGIN { srand(1234); for (i = 0; i < n; i++) { s = int(rand() * v);
    for (j = 1; j < t; j++) s = s "," int(rand() * v); print s } }' >"$TOKF"
RAW=$(calc "printf \"%.0f\", $NTOK * $L * $D * 4")
echo "sequences: $NSEQ x $SEQ tokens = $NTOK tokens (random ids < $V); hooks blocks.*.hook_resid_post:" \
     "$(calc "printf \"%.2f\", $RAW / 2^30") GiB of float32 activations ($((L * D * 4)) bytes a token)"
FREE=$(df -Pk "$DIR" | awk 'NR == 2 { print $4 * 1024 }')
calc "exit !($FREE > 1.1 * $RAW + 2^30)" || die "$DIR has $((FREE >> 20)) MiB free; the dataset needs $((RAW >> 20)) MiB (and 1 GiB spare): give --dir or fewer --tokens"

HAVE_TORCH=1
$PY -c 'import torch, h5py, numpy' 2>/dev/null || { HAVE_TORCH=0; echo "SKIP PyTorch row: $PY cannot import torch, h5py and numpy (Debian: python3-torch python3-h5py)"; }
$PY -c 'import h5py, numpy' 2>/dev/null || die "$PY cannot import h5py and numpy (the checks read the files with them)"
if ((RANKS > 1)); then
    if ! command -v mpirun >/dev/null; then echo "SKIP mpirun row: no mpirun"; RANKS=0
    elif [[ "$("$MP" -e 'print(mp.mpi.built())' 2>/dev/null)" != true ]]; then echo "SKIP mpirun row: $MP is built without MPI"; RANKS=0
    fi
fi
RTHREADS=$(( THREADS / (RANKS > 1 ? RANKS : 1) )); ((RTHREADS >= 1)) || RTHREADS=1
MPIRUN=(mpirun --allow-run-as-root -np "$RANKS")
((RANKS > $(nproc))) && MPIRUN+=(--oversubscribe)
HOOKS='blocks.*.hook_resid_post'
CHECK=("$PY" "$ROOT/bench/peer_dataset.py" check --n "$NSEQ" --tmax "$SEQ" --layers "$L" --d-model "$D")
export OMP_NUM_THREADS="$THREADS"

# ---- checks: the CLI's layout (the peer copies it) and its first rows, the reference ----
echo
echo "== checks"
head -n 2 "$TOKF" >"$TMP/chk.txt"
NCHK=$(wc -l <"$TMP/chk.txt")
"$MP" capture --model "$MODEL" --tokens-file "$TMP/chk.txt" --hooks "$HOOKS" --out "$TMP/layout.h5" >"$TMP/cli" 2>&1 ||
    { cat "$TMP/cli"; die "mechprobe capture failed on $TMP/chk.txt"; }
"$PY" "$ROOT/bench/peer_dataset.py" check "$TMP/layout.h5" --n "$NCHK" --tmax "$SEQ" --layers "$L" --d-model "$D" \
    --save "$TMP/ref_row0.npy" >"$TMP/chk_cli" || { cat "$TMP/chk_cli"; die "the CLI's capture has not the layout expected"; }
echo "  mechprobe capture --tokens-file ($NCHK sequences): /acts/blocks.{0..$((L - 1))}.hook_resid_post [N, $SEQ, $D]" \
     "float32, chunks $(kv "$TMP/chk_cli" chunks), finite; its row 0 at the last layer is the reference below"
[[ $HAVE_TORCH == 1 ]] && $PY "$ROOT/bench/peer_dataset.py" info "$MODEL" >"$TMP/pinfo" 2>&1 ||
    { [[ $HAVE_TORCH == 1 ]] && { echo "SKIP PyTorch row: $(tail -1 "$TMP/pinfo")"; HAVE_TORCH=0; }; }
[[ $HAVE_TORCH == 1 ]] && echo "  PyTorch reads the GGUF's tensors ($(kv "$TMP/pinfo" tensor_types)) with numpy:" \
    "$(grep -Eq '^tensor_types=(F32|F16|BF16|,)+$' "$TMP/pinfo" && echo 'the same weights' || echo 'types other than F32/F16/BF16: random weights of the same shapes')"

declare -A V_ O_ CHK
add() { V_[$1]="${V_[$1]:-} $2"; O_[$1]="${O_[$1]:-} $(kv "$3" others)"; }
# checked FILE KEY [nocompare]: shape/finiteness of a timed file and its row 0 against the reference
checked() {
    "${CHECK[@]}" "$1" --against "$TMP/ref_row0.npy" >"$TMP/chk_$2" 2>&1
    local rel; rel=$([[ -n "${3:-}" ]] && echo "$3" || kv "$TMP/chk_$2" rel_diff)
    CHK[$2]="${CHK[$2]:-} shape_ok=$(kv "$TMP/chk_$2" shape_ok),finite=$(kv "$TMP/chk_$2" finite),rel=$rel"
    grep '^error=' "$TMP/chk_$2" | sed 's/^/  CHECK FAILED: /'
}
tps() { local s; s=$(kv "$1" capture_s); [[ $s == - ]] && echo - || calc "printf \"%.1f\", $NTOK / $s"; }

# ---- timed rounds, interleaved ----
echo
echo "== timing: $ROUNDS round(s) (each cell: the median over rounds; others: the most over rounds)"
for ((r = 1; r <= ROUNDS; r++)); do
    # (1) mechprobe's dataset capture
    if measure "$TMP/cap" "$MP" "$ROOT/bench/dataset_mp.lua" "$MODEL" "$TOKF" "$HOOKS" "$TMP/cap.h5"; then
        BYTES=$(stat -c %s "$TMP/cap.h5"); add cap "$(tps "$TMP/cap")" "$TMP/cap"
        V_[cap_b]="${V_[cap_b]:-} $BYTES"; V_[cap_rss]="${V_[cap_rss]:-} $(kv "$TMP/cap" maxrss_mib)"
        V_[cap_w]="${V_[cap_w]:-} $(kv "$TMP/cap" wall_s)"
        checked "$TMP/cap.h5" cap
    fi
    rm -f "$TMP"/cap.h5*
    # (2) the compute limit: the same forwards, no activation written
    if measure "$TMP/fwd" "$MP" "$ROOT/bench/dataset_mp.lua" "$MODEL" "$TOKF" none "$TMP/fwd.h5"; then
        add fwd "$(tps "$TMP/fwd")" "$TMP/fwd"; V_[fwd_b]="${V_[fwd_b]:-} $(stat -c %s "$TMP/fwd.h5")"
        V_[fwd_rss]="${V_[fwd_rss]:-} $(kv "$TMP/fwd" maxrss_mib)"; V_[fwd_w]="${V_[fwd_w]:-} $(kv "$TMP/fwd" wall_s)"
    fi
    rm -f "$TMP"/fwd.h5*
    # (3) the disk's limit: the capture's byte count with O_DIRECT, fsync'ed, in the same folder
    B="${BYTES:-$RAW}"; CNT=$(( (B + 4194303) / 4194304 ))
    if measure "$TMP/dd" env LC_ALL=C dd if=/dev/zero of="$TMP/dd.bin" bs=4M count="$CNT" oflag=direct conv=fsync; then
        S=$(sed -n 's/.* copied, \([0-9.e+-]*\) s,.*/\1/p' "$TMP/dd.err" | tail -1)
        # tokens/s the disk takes at the capture's bytes per token
        add dd "$(calc "printf \"%.1f\", $CNT * 4194304 / $S / ($B / $NTOK)")" "$TMP/dd"
        V_[dd_b]="${V_[dd_b]:-} $((CNT * 4194304))"; V_[dd_w]="${V_[dd_w]:-} $(calc "printf \"%.3f\", $S")"
        V_[dd_gbs]="${V_[dd_gbs]:-} $(calc "printf \"%.3f\", $CNT * 4194304 / $S / 1e9")"
    fi
    rm -f "$TMP/dd.bin"
    # (4) PyTorch eager + forward hooks writing with h5py
    if [[ $HAVE_TORCH == 1 ]] && measure "$TMP/pt" env LD_LIBRARY_PATH="$TORCH_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            "$PY" "$ROOT/bench/peer_dataset.py" run "$MODEL" "$TOKF" "$TMP/pt.h5" --layout "$TMP/layout.h5" --threads "$THREADS"; then
        add pt "$(kv "$TMP/pt" tok_s)" "$TMP/pt"; V_[pt_b]="${V_[pt_b]:-} $(kv "$TMP/pt" bytes)"
        V_[pt_rss]="${V_[pt_rss]:-} $(kv "$TMP/pt" maxrss_mib)"; V_[pt_w]="${V_[pt_w]:-} $(kv "$TMP/pt" wall_s)"
        checked "$TMP/pt.h5" pt "$([[ $(kv "$TMP/pt" weights) == file ]] || echo 'n/a(random_weights)')"
    fi
    rm -f "$TMP"/pt.h5*
    # (5) the capture under mpirun
    if ((RANKS > 1)) && measure "$TMP/mpi" env OMP_NUM_THREADS="$RTHREADS" "${MPIRUN[@]}" "$MP" \
            "$ROOT/bench/dataset_mp.lua" "$MODEL" "$TOKF" "$HOOKS" "$TMP/mpi.h5"; then
        add mpi "$(tps "$TMP/mpi")" "$TMP/mpi"; V_[mpi_b]="${V_[mpi_b]:-} $(stat -c %s "$TMP/mpi.h5")"
        V_[mpi_rss]="${V_[mpi_rss]:-} $(kv "$TMP/mpi" maxrss_mib)"; V_[mpi_w]="${V_[mpi_w]:-} $(kv "$TMP/mpi" wall_s)"
        checked "$TMP/mpi.h5" mpi
    fi
    rm -f "$TMP"/mpi.h5*
    echo "  round $r done after $(( $(date +%s) - START )) s"
done

med() { echo "${V_[$1]:-}" | median; }
oth() { echo "${O_[$1]:-}" | maxof; }
LIM=$(calc "a = \"$(med fwd)\"; b = \"$(med dd)\"; if (a == \"-\") print b; else if (b == \"-\") print a; else print (a + 0 < b + 0 ? a : b)")
PT=$(med pt)
gib() { calc "b = \"$1\"; if (b == \"-\") print \"-\"; else printf \"%.2f\", b / 2^30"; }
echo
FMT='| %-52s | %10s | %8s | %8s | %9s | %8s | %8s | %6s |\n'
printf "$FMT" row "tok/s" "/ torch" "/ limit" "GiB out" "wall s" "RSS MiB" others
printf "$FMT" "$(printf '%.0s-' {1..52})" ---------- -------- -------- --------- -------- -------- ------
row() { printf "$FMT" "$1" "$(med "$2")" "$(ratio "$(med "$2")" "$PT")" "$(ratio "$(med "$2")" "$LIM")" \
               "$(gib "$(med "$2"_b)")" "$(med "$2"_w)" "$(med "$2"_rss)" "$(oth "$2")"; }
row "(1) mechprobe capture, $THREADS threads" cap
row "(2) mechprobe forward alone (no activation written)" fwd
row "(3) disk: dd bs=4M oflag=direct, $(med dd_gbs) GB/s" dd
printf "$FMT" "    lower limit = min((2), (3))" "$LIM" "$(ratio "$LIM" "$PT")" "1.00" "" "" "" ""
[[ $HAVE_TORCH == 1 ]] && row "(4) PyTorch eager + hooks -> h5py, $THREADS threads" pt
((RANKS > 1)) && row "(5) mechprobe capture, mpirun -np $RANKS x $RTHREADS thread(s)" mpi
echo "(tok/s: tokens over the capture's own time, loading excluded, file committed (fsync) included, dd: over its"
echo " bytes at the capture's bytes a token; wall s: the whole process, loading included (dd: its own seconds);"
echo " RSS: peak of the process (mpirun: of the largest rank); others: CPU, in cores, that other processes used"
echo " while the row ran (/proc/stat minus its own CPU): above ~0.1 the row is disturbed; kernel writeback of our"
echo " own files counts there too)"
aim() { calc "a = \"$1\"; if (a == \"-\") print \"-\"; else if (a + 0 >= $2) print \"met\"; else print \"NOT met\""; }
C=$(med cap)
echo "aims: mechprobe / PyTorch $(ratio "$C" "$PT") (>= 2: $(aim "$(ratio "$C" "$PT")" 2));" \
     "mechprobe / lower limit $(ratio "$C" "$LIM") (>= 0.8: $(aim "$(ratio "$C" "$LIM")" 0.8))"
((RANKS > 1)) && echo "      mpirun: / PyTorch $(ratio "$(med mpi)" "$PT"), / lower limit $(ratio "$(med mpi)" "$LIM")"
echo "checks (each round: shape_ok = [$NSEQ, $SEQ, $D] float32 for each of the $L layers and /lengths; finite in"
echo " rows 0, N/2, N-1; rel = max |row 0, last layer - the CLI's| / max |the CLI's|, tolerance 1e-3):"
echo "  (1) capture:${CHK[cap]:- -}"
[[ $HAVE_TORCH == 1 ]] && echo "  (4) PyTorch (weights: $(kv "$TMP/pt" weights); $(kv "$TMP/pt" attention)):${CHK[pt]:- -}"
((RANKS > 1)) && echo "  (5) mpirun:${CHK[mpi]:- -}"
BAD=0
for k in "${!CHK[@]}"; do
    for c in ${CHK[$k]}; do
        [[ $c == shape_ok=1,finite=1,rel=* ]] || BAD=1
        rel=${c##*rel=}
        [[ $rel == n/a* ]] && continue
        calc "exit !(\"$rel\" != \"-\" && \"$rel\" != \"nan\" && $rel + 0 <= 1e-3)" || BAD=1
    done
done
((BAD)) && echo "CHECKS FAILED (above)" || echo "checks passed"
((FAILED)) && echo "SOME RUNS FAILED (their output is above the table)"
echo "total time: $(( $(date +%s) - START )) s"
exit $(( BAD || FAILED ))
