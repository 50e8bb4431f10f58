#!/usr/bin/env bash
# bench/run.sh — the foundation benchmark: prefill throughput against the
# OpenBLAS sgemm ceiling and PyTorch eager CPU, capture overhead, hook dispatch
# cost, and a 16k-token prefill with a pattern capture. One process per
# measurement (each peak RSS is its own). See bench/README.md for what each
# number means.
#
#   bash bench/run.sh [BUILD_DIR]        (default: build/; needs bench_forward built)
#
# Environment: BENCH_THREADS (default nproc) sets OMP_NUM_THREADS for us and
# torch.set_num_threads for the peer; BENCH_RETRIES (default 2) reruns a
# measurement disturbed by other processes; BENCH_TMP (default $TMPDIR or /tmp) is
# where the model and run files go (removed at exit); BENCH_QUICK=1 skips the
# 16k-token section. Sections are independent: add new ones at the end.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
BIN="$BUILD/bench/bench_forward"
SHARED_MODELS="$ROOT/../shared/models"
AID="$SHARED_MODELS/aidreams260K.bin"
PY=/usr/bin/python3
N="${BENCH_THREADS:-$(nproc)}"
export OMP_NUM_THREADS="$N"
# The PyTorch peer runs on the same OpenBLAS build as we do (the OpenMP one, so
# its BLAS shares torch's OpenMP pool instead of adding a pthread pool that
# fights it for the cores).
TORCH_LIBS=/usr/lib/x86_64-linux-gnu/openblas-openmp

if [[ ! -x "$BIN" ]]; then
    echo "run.sh: $BIN not found; build it first:" >&2
    echo "  cmake -S $ROOT -B $BUILD && cmake --build $BUILD -j$N --target bench_forward" >&2
    exit 1
fi
TMP="$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/mpbench.XXXXXX")" || exit 1
trap 'rm -rf "$TMP"' EXIT
HAVE_AID=1
[[ -f "$AID" ]] || { HAVE_AID=0; echo "SKIP: $AID not found (../shared absent): aidreams260K rows and section 3 skipped"; }
HAVE_TORCH=1
$PY -c 'import torch, numpy' 2>/dev/null || { HAVE_TORCH=0; echo "SKIP: $PY cannot import torch/numpy: PyTorch rows skipped"; }

# kv FILE KEY: the value of KEY=... in FILE ("-" when absent)
kv() { local v; v="$(sed -n "s/^$2=//p" "$1" 2>/dev/null | tail -1)"; echo "${v:--}"; }
# ratio A B [FORMAT]: A/B, or "-" when either is missing
ratio() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf f "\n", a / b }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.0f%%\n", 100 * a / b }'; }
ms() { awk -v s="$1" 'BEGIN { if (s == "-") print "-"; else printf "%.2f\n", s * 1000 }'; }
mib() { awk -v b="$1" 'BEGIN { if (b == "-") print "-"; else printf "%.1f\n", b / 1048576 }'; }
# run OUT CMD...: runs a measurement into OUT; when other processes used more than
# 0.1 core meanwhile, runs it again (up to BENCH_RETRIES more times, default 2)
# and keeps the least disturbed attempt.
run() {
    local out="$1" try best=""; shift
    for ((try = 0; try <= ${BENCH_RETRIES:-2}; try++)); do
        if ! "$@" >"$out.try" 2>"$out.err"; then echo "FAILED: $*"; cat "$out.err"; return 1; fi
        local o; o="$(kv "$out.try" other_cores)"
        if [[ -z "$best" ]] || awk -v a="$o" -v b="$best" 'BEGIN { exit !(a != "-" && a + 0 < b + 0) }'; then
            mv "$out.try" "$out"; best="$o"
        fi
        awk -v a="$best" 'BEGIN { exit !(a == "-" || a + 0 <= 0.1) }' && break
    done
    rm -f "$out.try"
}
peer() { local out="$1"; shift; LD_LIBRARY_PATH="$TORCH_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    run "$out" $PY "$ROOT/bench/peer_torch.py" "$@" --threads "$N"; }

echo "== mechprobe foundation benchmark — $(date -u +%Y-%m-%dT%H:%MZ)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; threads used: $N (OMP_NUM_THREADS)"

# ---- 0. peers: the sgemm ceiling, the shared model file ----
run "$TMP/sgemm" "$BIN" --mode sgemm --reps 7
echo "openblas: $(kv "$TMP/sgemm" openblas); kernel: $(kv "$TMP/sgemm" openblas_core) (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
CEIL="$(kv "$TMP/sgemm" sgemm_best_gflops)"
echo "sgemm ceiling (C = A W^T as our linear layers, median of 7, GFLOP/s):" \
     "$(sed -n 's/^sgemm_\([0-9x]*\)_gflops=/\1: /p' "$TMP/sgemm" | paste -sd ',' | sed 's/,/, /g')" \
     "-> best $CEIL"
BIG="$TMP/random512.bin"
run "$TMP/make" "$BIN" --mode make-random --out "$BIG" --seed 1234
echo

# ---- 1. prefill throughput ----
echo "== 1. prefill throughput (median of timed reps after 1 warm-up; logits for every position)"
echo "   a) aidreams260K (d 64, 4 layers, 4 heads, vocab 512), T = ctx = 128, batch 8 (so the run is not trivially small)"
echo "   b) random llama (d 512, 8 layers, 8 heads / 8 kv, d_head 64, d_mlp 1376, vocab 512, untied classifier, N(0,0.02)), T 1024, batch 1"
FMT1='%-13s %-7s %-11s %4s %10s %9s %8s %6s %9s %8s %7s\n'
printf "$FMT1" model BxT impl reps "median ms" "tok/s" "GFLOP/s" "%ceil" "torch/us" "RSS MiB" "others"
prefill_rows() { # label B T model reps
    local tag="$1" B="$2" T="$3" model="$4" reps="$5"
    run "$TMP/fwd_$tag" "$BIN" --mode forward --model "$model" -B "$B" -T "$T" --reps "$reps" --dump "$TMP/dump_$tag"
    if [[ $HAVE_TORCH == 1 ]]; then
        peer "$TMP/torch_$tag" "$model" "$TMP/dump_$tag" -B "$B" --reps "$reps"
    fi
    local f="$TMP/fwd_$tag" t="$TMP/torch_$tag"
    printf "$FMT1" "$tag" "${B}x$T" mechprobe "$reps" \
        "$(ms "$(kv "$f" median_s)")" "$(kv "$f" tok_s)" "$(kv "$f" gflops)" "$(pct "$(kv "$f" gflops)" "$CEIL")" \
        "$(ratio "$(kv "$t" median_s)" "$(kv "$f" median_s)" '%.2fx')" "$(kv "$f" maxrss_mib)" "$(kv "$f" other_cores)"
    [[ $HAVE_TORCH == 1 ]] || return 0
    printf "$FMT1" "$tag" "${B}x$T" "torch $(kv "$t" torch | cut -c1-4)" "$reps" \
        "$(ms "$(kv "$t" median_s)")" "$(kv "$t" tok_s)" "$(kv "$t" gflops)" "$(pct "$(kv "$t" gflops)" "$CEIL")" \
        "1.00x" "$(kv "$t" maxrss_mib)" "$(kv "$t" other_cores)"
}
[[ $HAVE_AID == 1 ]] && prefill_rows aidreams260K 8 128 "$AID" 101   # ~7 ms each: 101 reps last ~1 s
prefill_rows random512 1 1024 "$BIG" 7
echo "   (%ceil: GFLOP/s over the sgemm ceiling $CEIL; torch/us: torch's median time over ours, > 1 = we are faster;"
echo "    others: cores used by other processes meanwhile, from /proc/stat — above ~0.1 the numbers are disturbed)"
if [[ $HAVE_TORCH == 1 ]]; then
    for tag in aidreams260K random512; do
        [[ -f "$TMP/torch_$tag" ]] || continue
        echo "   torch on $tag: max |logit diff| vs mechprobe = $(kv "$TMP/torch_$tag" logits_maxdiff)" \
             "(largest |logit| $(kv "$TMP/torch_$tag" logits_maxabs); aim <= 1e-3); attention: $(kv "$TMP/torch_$tag" attention)"
    done
fi
echo "   aims: >= 50% of the sgemm ceiling on random512; faster than PyTorch on both"
echo

# ---- 2. capture overhead and hook dispatch ----
echo "== 2. capture of blocks.*.attn.hook_rot_q, hook_rot_k, hook_pattern (all 8 layers) to an HDF5 run file, random512, T 1024"
HOOKS='blocks.*.attn.hook_rot_q,blocks.*.attn.hook_rot_k,blocks.*.attn.hook_pattern'
run "$TMP/cap" "$BIN" --mode capture --model "$BIG" -B 1 -T 1024 --reps 7 --hooks "$HOOKS" --out "$TMP/cap.h5"
run "$TMP/cap256" "$BIN" --mode capture --model "$BIG" -B 1 -T 1024 --reps 7 --hooks "$HOOKS" --out "$TMP/cap256.h5" --chunk-kib 256
# the same through the page cache (the stream driver's O_DIRECT path off: HDF5 sec2's behaviour)
MECHPROBE_DIRECT_IO=0 run "$TMP/cappc" "$BIN" --mode capture --model "$BIG" -B 1 -T 1024 --reps 7 --hooks "$HOOKS" --out "$TMP/cappc.h5"
# disk_rate SRC OUT: the disk's own time for SRC's bytes (the capture file, whole MiB of it), written
# with O_DIRECT in 4 MiB blocks by dd into the same folder (write_s), then made durable with
# fdatasync (sync_s, as the capture's commit does); median of 3, into OUT as key=value lines
disk_rate() {
    local src="$1" out="$2" dst="$TMP/ddrate.bin" bytes mib w=() f=() i t0 t1 t2
    bytes="$(stat -c %s "$src" 2>/dev/null)" || return 1
    mib=$(( bytes >> 20 ))
    (( mib > 0 )) || return 1
    cat "$src" >/dev/null   # the source from the page cache: only the writes are timed
    for i in 1 2 3; do
        rm -f "$dst"; sync
        t0=$(date +%s%N)
        dd if="$src" of="$dst" bs=1M count="$mib" iflag=fullblock oflag=direct status=none || return 1
        t1=$(date +%s%N)
        sync -d "$dst" || return 1
        t2=$(date +%s%N)
        w+=("$(( t1 - t0 ))"); f+=("$(( t2 - t1 ))")
    done
    rm -f "$dst"
    med3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
    # scaled from the whole MiB written to the capture file's bytes
    awk -v w="$(med3 "${w[@]}")" -v f="$(med3 "${f[@]}")" -v b="$bytes" -v m="$mib" 'BEGIN {
        k = b / (m * 1048576); ws = w * 1e-9 * k; fs = f * 1e-9 * k
        printf "bytes=%d\nwrite_s=%.6f\nsync_s=%.6f\ndurable_s=%.6f\ngbps=%.3f\n", b, ws, fs, ws + fs, b / ws * 1e-9 }' >"$out"
}
disk_rate "$TMP/cap.h5" "$TMP/disk" || echo "   (disk rate not measured: dd failed in $TMP)"
DW="$(kv "$TMP/disk" durable_s)"
# the plain forward with the same bytes written beside it (O_DIRECT, 4 MiB writes, then fdatasync) by a
# thread of its own: a perfect overlap, what a capture would cost if its writes cost the forward nothing
[[ "$(kv "$TMP/cap" file_bytes)" != - ]] && run "$TMP/fwd_dd" "$BIN" --mode forward --model "$BIG" -B 1 -T 1024 --reps 7 \
    --write-bytes "$(kv "$TMP/cap" file_bytes)" --out "$TMP/fwd_dd.bin"
# bound FWD: max(FWD, the durable direct write of the capture's bytes), the least a capture can cost
bound() { awk -v a="$1" -v b="$DW" 'BEGIN { if (a == "-") print "-"; else if (b == "-" || a + 0 > b + 0) print a; else print b }'; }
F="$TMP/fwd_random512"
echo "   disk ($(df -P "$TMP" | awk 'NR == 2 { print $1 }')), dd oflag=direct of the capture's $(mib "$(kv "$TMP/disk" bytes)") MiB in the same folder:" \
     "write $(ms "$(kv "$TMP/disk" write_s)") ms ($(kv "$TMP/disk" gbps) GB/s) + fdatasync $(ms "$(kv "$TMP/disk" sync_s)") ms" \
     "= $(ms "$DW") ms durable (median of 3)"
FMT2='%-50s %9s %7s %7s %6s %7s %7s %8s %7s %6s %5s %7s %6s\n'
printf "$FMT2" run "median ms" "x plain" "x bound" "x ovl" "fwd ms" "commit" "file MiB" "RSS MiB" "direct" "lent" "wait ms" "others"
printf "$FMT2" "plain forward (section 1b)" "$(ms "$(kv "$F" median_s)")" 1.00 - - "$(ms "$(kv "$F" median_s)")" - - \
    "$(kv "$F" maxrss_mib)" - - - "$(kv "$F" other_cores)"
printf "$FMT2" "plain forward || O_DIRECT write, same bytes" "$(ms "$(kv "$TMP/fwd_dd" median_s)")" \
    "$(ratio "$(kv "$TMP/fwd_dd" median_s)" "$(kv "$F" median_s)")" \
    "$(ratio "$(kv "$TMP/fwd_dd" median_s)" "$(bound "$(kv "$F" median_s)")")" 1.00 \
    "$(ms "$(kv "$TMP/fwd_dd" fwd_median_s)")" - "$(mib "$(kv "$TMP/fwd_dd" write_bytes)")" "$(kv "$TMP/fwd_dd" maxrss_mib)" \
    - - - "$(kv "$TMP/fwd_dd" other_cores)"
cap_row() { # label result plain-forward-result [perfect-overlap-result]
    local c="$2" f="$3" o="${4:-}"
    printf "$FMT2" "$1" "$(ms "$(kv "$c" median_s)")" "$(ratio "$(kv "$c" median_s)" "$(kv "$f" median_s)")" \
        "$(ratio "$(kv "$c" median_s)" "$(bound "$(kv "$f" median_s)")")" \
        "$([[ -n $o ]] && ratio "$(kv "$c" median_s)" "$(kv "$o" median_s)" || echo -)" "$(ms "$(kv "$c" fwd_median_s)")" \
        "$(ms "$(kv "$c" commit_median_s)")" "$(mib "$(kv "$c" file_bytes)")" "$(kv "$c" maxrss_mib)" \
        "$(kv "$c" direct_share)" "$(kv "$c" lent_share)" "$(ms "$(kv "$c" stage_wait_s)")" "$(kv "$c" other_cores)"
}
cap_row "capture, default chunks ($(kv "$TMP/cap" chunk_kib) KiB)" "$TMP/cap" "$F" "$TMP/fwd_dd"
cap_row "capture, 256 KiB chunks (= one 64-row block)" "$TMP/cap256" "$F" "$TMP/fwd_dd"
cap_row "capture, page cache (MECHPROBE_DIRECT_IO=0)" "$TMP/cappc" "$F" "$TMP/fwd_dd"
# with a core left over beside the forward's threads the writes move to a
# writer thread (serial HDF5 only: an MPI build keeps them on the forward's thread)
if (( N >= 2 )); then
    S=$((N - 1))
    OMP_NUM_THREADS=$S run "$TMP/fwd_spare" "$BIN" --mode forward --model "$BIG" -B 1 -T 1024 --reps 5
    OMP_NUM_THREADS=$S run "$TMP/cap_spare" "$BIN" --mode capture --model "$BIG" -B 1 -T 1024 --reps 5 --hooks "$HOOKS" \
        --out "$TMP/cap_spare.h5"
    printf "$FMT2" "plain forward, $S thread(s)" "$(ms "$(kv "$TMP/fwd_spare" median_s)")" 1.00 - - \
        "$(ms "$(kv "$TMP/fwd_spare" median_s)")" - - "$(kv "$TMP/fwd_spare" maxrss_mib)" - - - "$(kv "$TMP/fwd_spare" other_cores)"
    cap_row "capture, $S thread(s), a core spare" "$TMP/cap_spare" "$TMP/fwd_spare"
fi
echo "   (median: create + capture + forward + commit incl. fsync; x plain: over the plain forward (aim <= 1.3x);"
echo "    x bound: over max(plain forward, the durable direct write of the same bytes above) - aim <= 1.2x;"
echo "    x ovl: over the plain forward with those bytes written beside it by a thread of its own (||: until both"
echo "    are done; its fwd ms is the forward's own time, slowed by the disk's work on this machine);"
echo "    fwd: the mp_model_forward call alone; commit: mp_h5run_commit (staged writes left, metadata, fsync, rename);"
echo "    direct: share of the bytes written with O_DIRECT by the run file's I/O thread, the rest through the page cache;"
echo "    lent: share packed straight into the driver's staging buffers (one copy); wait: per capture, writes waiting"
echo "    for a free staging buffer (the disk behind); the last rows against the plain forward at the same thread count)"
echo
echo "== 2b. hook dispatch cost: forward with hooks = NULL / empty registry / one no-op hook (blocks.0.hook_resid_pre)"
if [[ $HAVE_AID == 1 ]]; then DM="$AID"; DB=8; DT=128; DTAG="aidreams260K 8x128"; else DM="$BIG"; DB=1; DT=1024; DTAG="random512 1x1024"; fi
run "$TMP/disp" "$BIN" --mode dispatch --model "$DM" -B $DB -T $DT --reps 41 --warmup 3
echo "   $DTAG, 41 interleaved reps each: NULL $(ms "$(kv "$TMP/disp" null_median_s)") ms," \
     "empty $(ms "$(kv "$TMP/disp" empty_median_s)") ms ($(kv "$TMP/disp" empty_vs_null_pct)%)," \
     "one no-op hook $(ms "$(kv "$TMP/disp" one_median_s)") ms ($(kv "$TMP/disp" one_vs_null_pct)%); aim: |diff| < 1%;" \
     "others $(kv "$TMP/disp" other_cores)"
echo

# ---- 3. long prefill with a pattern capture ----
if [[ $HAVE_AID == 1 && "${BENCH_QUICK:-0}" != 1 ]]; then
    echo "== 3. 16384-token prefill of aidreams260K (ctx 128: RoPE extrapolates), batch 1, one run each"
    run "$TMP/long_fwd" "$BIN" --mode forward --model "$AID" -B 1 -T 16384 --reps 1 --warmup 0
    BENCH_RETRIES=0 run "$TMP/long_cap" "$BIN" --mode capture --model "$AID" -B 1 -T 16384 --reps 1 --warmup 0 \
        --hooks blocks.0.attn.hook_pattern --out "$TMP/long.h5"
    FMT3='%-50s %7s %7s %8s %9s %8s %7s\n'
    printf "$FMT3" run "time s" "fwd s" "GFLOP/s" "file MiB" "RSS MiB" "others"
    printf "$FMT3" "plain forward" "$(kv "$TMP/long_fwd" median_s)" "$(kv "$TMP/long_fwd" median_s)" \
        "$(kv "$TMP/long_fwd" gflops)" - "$(kv "$TMP/long_fwd" maxrss_mib)" "$(kv "$TMP/long_fwd" other_cores)"
    printf "$FMT3" "capture blocks.0.attn.hook_pattern [1,4,16k,16k]" "$(kv "$TMP/long_cap" median_s)" \
        "$(kv "$TMP/long_cap" fwd_median_s)" "$(kv "$TMP/long_cap" gflops)" "$(mib "$(kv "$TMP/long_cap" file_bytes)")" \
        "$(kv "$TMP/long_cap" maxrss_mib)" "$(kv "$TMP/long_cap" other_cores)"
    echo "   (time: create + forward + commit incl. fsync; fwd: the forward call, writes included; GFLOP/s over time."
    echo "    One head's 16k x 16k map alone is 1024 MiB; blocked attention streams 64-row blocks, so RSS stays flat)"
    rm -f "$TMP/long.h5"
    echo
fi

# ---- keep last: were the measurements disturbed by other processes? ----
disturbed="$(for f in "$TMP"/*; do
    n="$(basename "$f")"; [[ $n == *.* ]] && continue   # results have no dot; data files do
    awk -F= -v n="$n" '$1 == "other_cores" && $2 > 0.1 { print n " (" $2 ")" }' "$f"; done | paste -sd ' ')"
if [[ -n "$disturbed" ]]; then
    echo "WARNING: other processes used CPU during: $disturbed — rerun on a quiet machine for clean numbers"
else
    echo "no measurement was disturbed by other processes (others <= 0.1 cores throughout)"
fi
