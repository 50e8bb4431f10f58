#!/usr/bin/env bash
# bench/peers_scale.sh — mechprobe against llama.cpp at the size of the models
# people study: random weights in the real configs of Llama 3.2 1B (and, opt-in,
# Llama 3 8B), in F32, BF16, Q8_0 and Q4_K. A sibling of peers.sh with its
# conventions: the same llama.cpp build ($PEERS_BUILD), the same loops on both
# sides (bench_gen.c / peer_llama.c), key=value results, interleaved rounds,
# medians, ratios, the CPU other processes used, peak RSS. See bench/README.md.
#
#   LLAMA_CPP_SRC=DIR bash bench/peers_scale.sh [--quick] [--checks] [--8b] [--long-decode] [--long] [BUILD_DIR]
#
# The model files are made once into SCALE_MODELS (default
# ${TMPDIR:-/tmp}/mechprobe-scale, kept and re-used: the 1B files take ~10 GB and
# minutes to make, the 8B ones ~21 GB). Rows: checks (greedy tokens and logits of
# a short decode, both sides), then prefill T 512 and T 4096 and decode of 128
# tokens at context 512 per 1B encoding, peak RSS; --8b: the 8B shape in BF16
# and Q4_K, prefill T 512, decode 32 at context 512; each decode row also
# shows the memory's read rate right before and after it (bench_gen --mode
# membw) and each side's rate of weights read; --long-decode: decode at
# context 8192 on 1B; --long: prefill T 16384 and 32768 on 1B (SCALE_LONG_TYPE)
# against llama.cpp with flash attention on, and ours again capturing the
# attention pattern of two layers to an HDF5 file. --quick: every selected
# section on the tiny shape (a minute or two). --checks: the files and the
# checks only, no timing. Environment: PEERS_BUILD,
# LLAMA_CPP_SRC, BENCH_THREADS (2), BENCH_ROUNDS (1), SCALE_REPS (timed
# repetitions per run, 1), SCALE_MODELS, SCALE_TYPES ("f32 bf16 q8_0 q4_k"),
# SCALE_8B_TYPES ("bf16 q4_k"), SCALE_LONG_TYPE (bf16), SCALE_LONG_TS (the lengths of --long, "16384 32768";
# --quick "2048 4096"), SCALE_LONG_HOOKS (the capture of --long), PEER_UBATCH
# (llama.cpp's physical batch in prefill, 512: its default), BENCH_TMP.
# Every BF16 row runs ours twice: at fp32 (exact products) and at precision bf16 (activations rounded to
# BF16 for AVX-512 BF16 products, as llama.cpp computes them), where this CPU has AVX-512 BF16.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0 EIGHT=0 LONGDEC=0 LONG=0 CHECKS=0
BUILD="$ROOT/build"
for a in "$@"; do
    case "$a" in
        --quick) QUICK=1 ;;
        --8b) EIGHT=1 ;;
        --long-decode) LONGDEC=1 ;;
        --long) LONG=1 ;;
        --checks) CHECKS=1 ;;
        -h|--help) sed -n '2,/^set -uo pipefail/{/^set/!p}' "$0"; exit 0 ;;
        -*) echo "peers_scale.sh: unknown option $a (see --help)" >&2; exit 2 ;;
        *) BUILD="$a" ;;
    esac
done
GEN="$BUILD/bench/bench_gen"
N="${BENCH_THREADS:-2}"
ROUNDS="${BENCH_ROUNDS:-1}"
REPS="${SCALE_REPS:-1}"
PEERS="${PEERS_BUILD:-${TMPDIR:-/tmp}/mechprobe-peers}"
MODELS="${SCALE_MODELS:-${TMPDIR:-/tmp}/mechprobe-scale}"
TYPES="${SCALE_TYPES:-f32 bf16 q8_0 q4_k}"
E8TYPES="${SCALE_8B_TYPES:-bf16 q4_k}"
LONG_TYPE="${SCALE_LONG_TYPE:-bf16}"
UB="${PEER_UBATCH:-512}"
SEED=1234
if [[ $QUICK == 1 ]]; then
    S1=tiny S8=tiny TP2=4096 LONG_TS="2048 4096" LONGDEC_CTX=2048 S8L="tiny (the --8b rows)"
else
    S1=llama3.2-1b S8=llama3-8b TP2=4096 LONG_TS="16384 32768" LONGDEC_CTX=8192 S8L=llama3-8b
fi
LONG_TS="${SCALE_LONG_TS:-$LONG_TS}"
for T in $LONG_TS; do
    [[ "$T" =~ ^[1-9][0-9]*$ ]] || { echo "peers_scale.sh: SCALE_LONG_TS: '$T' is not a positive token count" >&2; exit 2; }
done
# d_model, d_mlp, layers, heads of each shape (bench/shape_gguf.c): the memory guard and the capture's size
shape_dims() { case "$1" in tiny) echo "256 512 2 8" ;; llama3.2-1b) echo "2048 8192 16 32" ;; llama3-8b) echo "4096 14336 32 32" ;; esac; }
read -r D1 M1 L1 H1 <<<"$(shape_dims "$S1")"
LONG_HOOKS="${SCALE_LONG_HOOKS:-blocks.0.attn.hook_pattern,blocks.$((L1 - 1)).attn.hook_pattern}"
for v in "$N" "$ROUNDS" "$REPS" "$UB"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "peers_scale.sh: BENCH_THREADS, BENCH_ROUNDS, SCALE_REPS, PEER_UBATCH must be positive integers (got '$v')" >&2; exit 2; }
done
for t in $TYPES $LONG_TYPE $E8TYPES; do
    case "$t" in f32|f16|bf16|q8_0|q4_k) ;; *) echo "peers_scale.sh: SCALE_TYPES / SCALE_LONG_TYPE: '$t' is not f32, f16, bf16, q8_0 or q4_k" >&2; exit 2 ;; esac
done
if [[ ! -x "$GEN" ]]; then
    echo "peers_scale.sh: $GEN not found; build it first:" >&2
    echo "  cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j$N --target bench_gen" >&2
    exit 1
fi
mkdir -p "$PEERS" "$MODELS" || exit 1
TMP="$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/mpscale.XXXXXX")" || exit 1
trap 'rm -rf "$TMP"' EXIT
START=$(date +%s)

source "$ROOT/bench/lib.sh"   # kv, ratio, median, maxof, build_llama_peer
mib() { awk -v b="$1" 'BEGIN { if (b == "-" || b == "") print "-"; else printf "%.0f\n", b / 1048576 }'; }
# met RATIO OP LIMIT: yes / NO / - (ratio "1.23x")
met() { awk -v r="${1%x}" -v op="$2" -v l="$3" 'BEGIN { if (r == "-" || r == "") { print "-"; exit }
        ok = op == ">=" ? r + 0 >= l + 0 : r + 0 <= l + 0; print ok ? "yes" : "NO" }'; }

echo "== mechprobe vs llama.cpp at real model shapes — $(date -u +%Y-%m-%dT%H:%MZ)"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo);" \
     "threads: $N; rounds: $ROUNDS; timed reps per run: $REPS$([[ $QUICK == 1 ]] && echo ' (--quick: tiny shape)');" \
     "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- llama.cpp: the library (as peers.sh builds it, sharing its build) and llama-quantize ----
LLAMA="" QUANT=""
if [[ -z "${LLAMA_CPP_SRC:-}" || ! -f "${LLAMA_CPP_SRC:-/nonexistent}/include/llama.h" ]]; then
    echo "SKIP llama.cpp columns and the Q4_K files: set LLAMA_CPP_SRC to a llama.cpp checkout (git clone https://github.com/ggml-org/llama.cpp)"
else
    LB="$PEERS/llama.cpp-build"
    echo "building llama.cpp (CPU, GGML_NATIVE, Release: llama and llama-quantize) from $LLAMA_CPP_SRC in $LB ..."
    if build_llama_peer "$LLAMA_CPP_SRC" "$PEERS" "$ROOT" "$N" llama llama-quantize; then
        LLAMA="$PEERS/peer_llama"
        QUANT="$LB/bin/llama-quantize"
        [[ -x "$QUANT" ]] || { echo "SKIP Q4_K files: $QUANT was not built"; QUANT=""; }
        echo "llama.cpp: $(git -C "$LLAMA_CPP_SRC" log -1 --format='%h %cs' 2>/dev/null || echo 'not a git checkout')"
    else
        echo "SKIP llama.cpp columns and the Q4_K files: its build failed (logs in $PEERS/llama-*.log)"
    fi
fi

# ---- the model files, made once and kept in $MODELS ----
# mk SHAPE TYPE: echoes the file, making it when absent (FILE.info: bench_gen's make-shape output)
mk() {
    local shape="$1" type="$2" f="$MODELS/$1.$2.gguf"
    if [[ -s "$f" && -s "$f.info" ]]; then echo "$f"; return 0; fi
    if [[ $type == q4_k ]]; then
        [[ -n "$QUANT" ]] || return 1
        local src; src="$(mk "$shape" bf16)" || return 1
        echo "making $f (llama-quantize --pure Q4_K from $src) ..." >&2
        "$QUANT" --pure --output-tensor-type q4_k --token-embedding-type q4_k "$src" "$f.part" Q4_K "$N" \
            >"$f.quantize.log" 2>&1 || { echo "FAILED: llama-quantize (log: $f.quantize.log)" >&2; rm -f "$f.part"; return 1; }
        mv "$f.part" "$f" && { grep -v '^file_bytes=\|^type=\|^wrote=\|^seconds=' "$src.info"; echo "type=Q4_K"; echo "file_bytes=$(stat -c %s "$f")"; } >"$f.info"
    else
        echo "making $f (bench_gen --mode make-shape) ..." >&2
        "$GEN" --mode make-shape --shape "$shape" --type "$type" --seed "$SEED" --out "$f" >"$f.info.part" 2>"$TMP/mk.err" ||
            { echo "FAILED: bench_gen --mode make-shape --shape $shape --type $type"; cat "$TMP/mk.err"; rm -f "$f.info.part"; } >&2
        [[ -s "$f" ]] && mv "$f.info.part" "$f.info" || return 1
        echo "  $(kv "$f.info" params) parameters, $(mib "$(kv "$f.info" file_bytes)") MiB, $(kv "$f.info" seconds) s" >&2
    fi
    echo "$f"
}
declare -A F
for t in $TYPES; do F[1.$t]="$(mk "$S1" "$t")" || { F[1.$t]=""; echo "SKIP $S1 $t: no file"; }; done
[[ $LONG == 1 && -z "${F[1.$LONG_TYPE]:-}" ]] && { F[1.$LONG_TYPE]="$(mk "$S1" "$LONG_TYPE")" || F[1.$LONG_TYPE]=""; }
if [[ $EIGHT == 1 ]]; then
    for t in $E8TYPES; do F[8.$t]="$(mk "$S8" "$t")" || { F[8.$t]=""; echo "SKIP $S8 $t: no file"; }; done
fi
echo "models in $MODELS: $S1$([[ $EIGHT == 1 ]] && echo " and $S8"), random N(0, 0.02), seed $SEED, norms 1 (bench_gen --mode make-shape)"
export OMP_NUM_THREADS="$N"

ours() { local out="$1"; shift; "$GEN" "$@" >"$out" 2>"$out.err" || { echo "FAILED: bench_gen $*"; cat "$out.err"; }; }
theirs() { local out="$1"; shift; [[ -n "$LLAMA" ]] || { : >"$out"; return; }
           "$LLAMA" "$@" --threads "$N" >"$out" 2>"$out.err" || { echo "FAILED: peer_llama $*"; cat "$out.err"; }; }

# What mechprobe keeps of a type's weights: probed on the tiny file of that type (the loader's weight-type
# summary: "F32" when it decodes them to float32); for the memory guard of the large files.
declare -A HELD
held() {
    local t="$1"
    if [[ -z "${HELD[$t]:-}" ]]; then
        local tf; tf="$(mk tiny "$t" 2>/dev/null)" && "$GEN" --mode prefill --model "$tf" -T 8 --reps 1 --warmup 0 >"$TMP/held_$t" 2>&1
        HELD[$t]="$(kv "$TMP/held_$t" weights)"
    fi
    echo "${HELD[$t]}"
}
# fits FILE T D M: 0 when mechprobe's estimated peak (weights as it holds them + ~T x (6 D + 3 M) floats of
# activations + 1 GiB) fits MemAvailable; else prints why and returns 1
fits() {
    local f="$1" T="$2" D="$3" M="$4" t; t="$(basename "$f" .gguf)"; t="${t##*.}"
    local w; w="$(held "$t")"
    local need; need="$(awk -v p="$(kv "$f.info" params)" -v fb="$(kv "$f.info" file_bytes)" -v w="$w" -v T="$T" -v D="$D" -v M="$M" \
        'BEGIN { wb = (w == "F32") ? 4 * p : fb; printf "%.0f\n", (wb + 4 * T * (6 * D + 3 * M)) / 1048576 + 1024 }')"
    local avail; avail="$(awk '/MemAvailable/ { printf "%.0f\n", $2 / 1024 }' /proc/meminfo)"
    if (( need > avail )); then
        echo "SKIP ours on $(basename "$f") at T $T: about $need MiB needed (this build holds these weights as '$w'), $avail MiB available"
        return 1
    fi
}

# Ours at precision bf16 (BF16 weights times activations rounded to BF16, AVX-512 BF16: as llama.cpp computes
# them) beside ours at fp32 (exact products) on every BF16 row, where this CPU has it (probed on the tiny file)
BF16P=0
if [[ " $TYPES " == *" bf16 "* || $EIGHT == 1 || ( $LONG == 1 && $LONG_TYPE == bf16 ) ]]; then
    tf="$(mk tiny bf16 2>/dev/null)" && "$GEN" --mode prefill --model "$tf" -T 8 --reps 1 --warmup 0 --precision bf16 \
        >"$TMP/bf16p_probe" 2>&1 && BF16P=1
    [[ $BF16P == 1 ]] || echo "(no rows at precision bf16: $(tail -n 1 "$TMP/bf16p_probe"))"
fi
isbf16() { [[ "$(basename "$1" .gguf)" == *.bf16 ]]; }

# ---- checks: both sides compute the same thing ----
VOCAB=$([[ $S1 == tiny ]] && echo 1024 || echo 128256)
echo
echo "== checks: greedy decode of 16 tokens from BOS on both sides ($S1; llama.cpp's KV cache in F32, flash attention off)"
for t in $TYPES; do
    f="${F[1.$t]:-}"; [[ -n "$f" ]] || continue
    fits "$f" 512 "$D1" "$M1" || continue
    ours "$TMP/chk_mp_$t" --mode decode --model "$f" -n 16 --reps 1 --warmup 0 --dump "$TMP/mp_$t.logits"
    w="$(kv "$TMP/chk_mp_$t" weights)"
    if [[ -z "$LLAMA" ]]; then echo "  $t: mechprobe's weights: $w (no llama.cpp)"; continue; fi
    theirs "$TMP/chk_ll_$t" --mode decode --model "$f" -n 16 --reps 1 --warmup 0 --dump "$TMP/ll_$t.logits" --kv-f32 1
    a="$(kv "$TMP/chk_mp_$t" tokens)"; b="$(kv "$TMP/chk_ll_$t" tokens)"
    same="$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "-" || b == "-") { print 0; exit } n = split(a, x, ","); split(b, y, ","); for (i = 1; i <= n && x[i] == y[i]; i++); print i - 1 }')"
    "$GEN" --mode compare --a "$TMP/mp_$t.logits" --b "$TMP/ll_$t.logits" --vocab "$VOCAB" -n "$(( same > 0 ? same : 1 ))" >"$TMP/cmp_$t" 2>&1
    "$GEN" --mode compare --a "$TMP/mp_$t.logits" --b "$TMP/ll_$t.logits" --vocab "$VOCAB" -n 1 >"$TMP/cmp1_$t" 2>&1
    note=""; [[ $t == q4_k && $w != Q4_K ]] && note=" WARNING: not every 2-D tensor is Q4_K"
    echo "  $t: greedy tokens equal for $same/16 steps; logits: max |diff| $(kv "$TMP/cmp1_$t" max_abs_diff) at the first" \
         "step, $(kv "$TMP/cmp_$t" max_abs_diff) over the $same fed the same tokens (largest |logit| $(kv "$TMP/cmp_$t" largest_abs));" \
         "mechprobe's weights: $w$note"
    if [[ $t == bf16 && $BF16P == 1 ]]; then
        ours "$TMP/chk_mpb" --mode decode --model "$f" -n 16 --reps 1 --warmup 0 --dump "$TMP/mpb.logits" --precision bf16
        a="$(kv "$TMP/chk_mpb" tokens)"
        same="$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "-" || b == "-") { print 0; exit } n = split(a, x, ","); split(b, y, ","); for (i = 1; i <= n && x[i] == y[i]; i++); print i - 1 }')"
        "$GEN" --mode compare --a "$TMP/mpb.logits" --b "$TMP/ll_$t.logits" --vocab "$VOCAB" -n 1 >"$TMP/cmpb1" 2>&1
        echo "  $t at precision bf16 (activations rounded to BF16 as llama.cpp's): greedy tokens equal for $same/16" \
             "steps; logits: max |diff| $(kv "$TMP/cmpb1" max_abs_diff) at the first step"
    fi
done
echo "  (F32: float32 rounding of other summation orders. BF16/F16: llama.cpp rounds the activations to the weights'"
echo "   type for its dot products, mechprobe at fp32 does not (at precision bf16 it does; other float32 rounding"
echo "   still differs): ~1e-2 relative on the 1B. Q8_0 / Q4_K: both quantize the"
echo "   activations to 8 bits per block of 32 (Q8_0) or 256 (Q4_K's Q8_K) values the same way, so they agree to"
echo "   ~1e-6 until one 8-bit code rounds the other way (float32 rounding upstream can flip one within the first"
echo "   step of 16 layers: Q4_K's first step differed by 0.036 on 2026-12-06); from there the logits differ by the"
echo "   quantization's own noise (~0.1 on the 1B, where Q8_0 moves them ~0.2 from F32's), and a near-tie of a"
echo "   random model may flip a token)"

if [[ $CHECKS == 1 ]]; then echo "total time: $(( $(date +%s) - START )) s (--checks: no timing)"; exit 0; fi

# ---- timed rounds, interleaved ----
echo
echo "== timing: $ROUNDS interleaved round(s); each cell is the median over rounds (per run: $REPS timed rep(s);"
echo "   one warm-up run before prefill T 512, none before the longer runs: see bench/README.md)"
declare -A V O
add() { V[$1]="${V[$1]:-} $(kv "$2" tok_s)"; O[$1]="${O[$1]:-} $(kv "$2" other_cores)"; }
# pair KEY FILE MODE T D M ARGS...: ours then theirs (prefill) or theirs then ours (decode), as peers.sh;
# T, D, M for the memory guard; LL_EXTRA: more arguments for llama.cpp's side only
LL_EXTRA=""
# membw KEY: the memory's read rate now (bench_gen --mode membw), kept beside decode row KEY
declare -A BW FB
membw() { "$GEN" --mode membw --mib 1024 --reps 3 >"$TMP/bw" 2>&1; BW[$1]="${BW[$1]:-} $(kv "$TMP/bw" read_gbs)"; }
pair() {
    local key="$1" f="$2" mode="$3" T="$4" D="$5" M="$6"; shift 6
    if [[ $mode == decode ]]; then
        membw "$key"; FB[$key]="$(stat -c %s "$f")"
        theirs "$TMP/t" --mode decode --model "$f" "$@" $LL_EXTRA; add "${key}_ll" "$TMP/t"; cp "$TMP/t" "$TMP/${key}_ll"
    fi
    if fits "$f" "$T" "$D" "$M" >"$TMP/fit"; then
        ours "$TMP/t" --mode "$mode" --model "$f" "$@"; add "${key}_mp" "$TMP/t"; cp "$TMP/t" "$TMP/${key}_mp"
        if [[ $BF16P == 1 ]] && isbf16 "$f"; then
            ours "$TMP/t" --mode "$mode" --model "$f" "$@" --precision bf16; add "${key}_mpb" "$TMP/t"; cp "$TMP/t" "$TMP/${key}_mpb"
        fi
    else
        sed 's/^/  /' "$TMP/fit"
    fi
    [[ $mode == decode ]] && membw "$key"
    if [[ $mode == prefill ]]; then
        theirs "$TMP/t" --mode prefill --model "$f" "$@" --ubatch "$UB" $LL_EXTRA; add "${key}_ll" "$TMP/t"; cp "$TMP/t" "$TMP/${key}_ll"
    fi
}
read -r D8 M8 L8 H8 <<<"$(shape_dims "$S8")"
for ((r = 1; r <= ROUNDS; r++)); do
    echo "  round $r: $(date -u +%H:%M:%S)"
    for t in $TYPES; do
        f="${F[1.$t]:-}"; [[ -n "$f" ]] || continue
        pair "pf512_$t" "$f" prefill 512 "$D1" "$M1" -T 512 --reps "$REPS" --warmup 1
        pair "pf${TP2}_$t" "$f" prefill "$TP2" "$D1" "$M1" -T "$TP2" --reps "$REPS" --warmup 0
        pair "dc512_$t" "$f" decode 640 "$D1" "$M1" -n 128 --ctx 512 --reps "$REPS" --warmup 0
    done
    if [[ $EIGHT == 1 ]]; then
        for t in $E8TYPES; do
            f="${F[8.$t]:-}"; [[ -n "$f" ]] || continue
            pair "e8pf512_$t" "$f" prefill 512 "$D8" "$M8" -T 512 --reps "$REPS" --warmup 0
            pair "e8dc512_$t" "$f" decode 544 "$D8" "$M8" -n 32 --ctx 512 --reps "$REPS" --warmup 0
        done
    fi
    if [[ $LONGDEC == 1 ]]; then
        for t in $TYPES; do
            f="${F[1.$t]:-}"; [[ -n "$f" ]] || continue
            pair "ldc_$t" "$f" decode "$LONGDEC_CTX" "$D1" "$M1" -n 64 --ctx "$LONGDEC_CTX" --reps "$REPS" --warmup 0
        done
    fi
    if [[ $LONG == 1 && -n "${F[1.$LONG_TYPE]:-}" ]]; then
        f="${F[1.$LONG_TYPE]}"
        for T in $LONG_TS; do
            LL_EXTRA="--fa on" pair "lpf${T}" "$f" prefill "$T" "$D1" "$M1" -T "$T" --reps "$REPS" --warmup 0
            # the capture: every pattern-sized point is ~H x 4 x T (T + 256) / 2 bytes on disk (the causal tiles)
            est="$(awk -v h="$LONG_HOOKS" -v H="$H1" -v T="$T" 'BEGIN { n = split(h, x, ","); b = 0
                   for (i = 1; i <= n; i++) if (x[i] ~ /hook_pattern|hook_attn_scores/) b += H * 4 * T * (T + 256) / 2
                   printf "%.0f\n", b / 1048576 }')"
            free_mib="$(df -Pm "$TMP" | awk 'NR == 2 { print $4 }')"
            if (( est + 2048 > free_mib )); then
                echo "  SKIP capture at T $T: about $est MiB of attention maps ($LONG_HOOKS), $free_mib MiB free in $TMP" \
                     "(set BENCH_TMP elsewhere or SCALE_LONG_HOOKS to fewer points)"
                continue
            fi
            if fits "$f" "$T" "$D1" "$M1" >"$TMP/fit"; then
                ours "$TMP/t" --mode prefill --model "$f" -T "$T" --reps "$REPS" --warmup 0 \
                    --capture "$LONG_HOOKS" --capture-out "$TMP/long.h5"
                add "lcap${T}_mp" "$TMP/t"; cp "$TMP/t" "$TMP/lcap${T}_mp"
                rm -f "$TMP/long.h5"
            else
                sed 's/^/  /' "$TMP/fit"
            fi
        done
    fi
done
med() { echo "${V[$1]:-}" | median; }
oth() { echo "${O[$1]:-} ${O[$2]:-}" | maxof; }

echo
FMT='| %-56s | %11s | %10s | %7s | %8s | %4s | %6s |\n'
printf "$FMT" workload "llama tok/s" "ours tok/s" ratio aim met others
printf "$FMT" "$(printf '%.0s-' {1..56})" "-----------" "----------" "-------" "--------" "----" "------"
# row LABEL KEY AIM_OP AIM_LIMIT
row() {
    local l m r; l="$(med "${2}_ll")"; m="$(med "${2}_mp")"; r="$(ratio "$m" "$l")"
    printf "$FMT" "$1" "$l" "$m" "$r" "$3 ${4}x" "$(met "$r" "$3" "$4")" "$(oth "${2}_ll" "${2}_mp")"
    if [[ -n "${V[${2}_mpb]:-}" ]]; then   # the same row, ours at precision bf16
        m="$(med "${2}_mpb")"; r="$(ratio "$m" "$l")"
        printf "$FMT" "  ours at precision bf16" "$l" "$m" "$r" "$3 ${4}x" "$(met "$r" "$3" "$4")" "$(oth "${2}_ll" "${2}_mpb")"
    fi
}
enc() { case "$1" in f32) echo F32 ;; f16) echo F16 ;; bf16) echo BF16 ;; q8_0) echo Q8_0 ;; q4_k) echo Q4_K ;; esac; }
for t in $TYPES; do
    [[ -n "${F[1.$t]:-}" ]] || continue
    row "$S1 $(enc "$t"), prefill T 512" "pf512_$t" ">=" 1.2
    row "$S1 $(enc "$t"), prefill T $TP2" "pf${TP2}_$t" ">=" 1.2
    row "$S1 $(enc "$t"), decode 128 at context 512" "dc512_$t" ">=" 1.0
done
if [[ $EIGHT == 1 ]]; then
    for t in $E8TYPES; do
        [[ -n "${F[8.$t]:-}" ]] || continue
        row "$S8L $(enc "$t"), prefill T 512" "e8pf512_$t" ">=" 1.2
        row "$S8L $(enc "$t"), decode 32 at context 512" "e8dc512_$t" ">=" 1.0
    done
fi
if [[ $LONGDEC == 1 ]]; then
    for t in $TYPES; do
        [[ -n "${F[1.$t]:-}" ]] && row "$S1 $(enc "$t"), decode 64 at context $LONGDEC_CTX" "ldc_$t" ">=" 1.0
    done
fi
if [[ $LONG == 1 ]]; then
    for T in $LONG_TS; do
        row "$S1 $(enc "$LONG_TYPE"), prefill T $T (llama.cpp flash attn on)" "lpf$T" ">=" 1.2
        c="$TMP/lcap${T}_mp"
        npts="$(awk -v h="$LONG_HOOKS" 'BEGIN { print split(h, x, ",") }')"
        [[ -f "$c" ]] && printf "$FMT" "  ours capturing $npts point(s) ($(mib "$(kv "$c" file_bytes)") MiB)" \
            "$(med "lpf${T}_ll")" "$(med "lcap${T}_mp")" "$(ratio "$(med "lcap${T}_mp")" "$(med "lpf${T}_ll")")" "-" "-" \
            "$(oth "lcap${T}_mp" "lcap${T}_mp")"
    done
fi
echo "(tok/s: median over rounds; ratio: ours / llama.cpp, > 1 = mechprobe faster; aim and met: issue 46's aims;"
echo " others: the most CPU, in cores, that other processes used during any run of the row: above ~0.1 the row is"
echo " disturbed. llama.cpp: default KV cache (F16) and flash attention (auto), prefill in one llama_decode with"
echo " physical batches of $UB (PEER_UBATCH); ours: one mp_model_forward over all T. OpenBLAS kernel of our F32 rows:"
echo " $(kv "$TMP/pf512_f32_mp" openblas_core) (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}); our quantized kernels: $(kv "$TMP/pf512_${TYPES##* }_mp" qdot_isa)."
echo " BF16 rows: ours at fp32 multiplies float32 activations with each weight widened exactly; 'at precision bf16'"
echo " rounds the activations to BF16 for vdpbf16ps, as llama.cpp does.)"
[[ $LONG == 1 ]] && echo "(capture: $LONG_HOOKS to an HDF5 run file; its time includes create and commit with fsync.)"

echo
echo "== decoding against the memory: each token reads every weight, so a decode row's rate follows the memory's,"
echo "   which moves within minutes on a shared machine. Memory: bench_gen --mode membw (2 threads summing 1 GiB)"
echo "   right before llama.cpp's run and right after ours; weights: the file's bytes x tok/s (the KV cache not counted)"
FMT3='| %-56s | %14s | %14s | %14s | %14s |\n'
printf "$FMT3" "decode row" "memory GB/s" "llama weights" "ours weights" "ours, bf16"
printf "$FMT3" "$(printf '%.0s-' {1..56})" "--------------" "--------------" "--------------" "--------------"
gbs() { awk -v b="$1" -v r="$2" 'BEGIN { if (r == "" || r == "-") print "-"; else printf "%.1f GB/s\n", b * r / 1e9 }'; }
bw_row() {
    [[ -n "${BW[$2]:-}" ]] || return 0
    local m; m="$(echo "${BW[$2]}" | awk '{ printf "%s", $1; for (i = 2; i <= NF; i++) printf " / %s", $i }')"
    printf "$FMT3" "$1" "$m" "$(gbs "${FB[$2]}" "$(med "${2}_ll")")" "$(gbs "${FB[$2]}" "$(med "${2}_mp")")" \
        "$([[ -n "${V[${2}_mpb]:-}" ]] && gbs "${FB[$2]}" "$(med "${2}_mpb")" || echo -)"
}
for t in $TYPES; do [[ -n "${F[1.$t]:-}" ]] && bw_row "$S1 $(enc "$t"), decode 128 at context 512" "dc512_$t"; done
if [[ $EIGHT == 1 ]]; then
    for t in $E8TYPES; do [[ -n "${F[8.$t]:-}" ]] && bw_row "$S8L $(enc "$t"), decode 32 at context 512" "e8dc512_$t"; done
fi
if [[ $LONGDEC == 1 ]]; then
    for t in $TYPES; do [[ -n "${F[1.$t]:-}" ]] && bw_row "$S1 $(enc "$t"), decode 64 at context $LONGDEC_CTX" "ldc_$t"; done
fi
echo "(memory: each round's before / after, in order; weights: the median tok/s of the rows above.)"

echo
echo "== peak RSS (the decode-at-context-512 processes: model, KV cache, a 512-token prefill) against the file"
FMT2='| %-34s | %9s | %9s | %9s | %6s | %9s | %4s |\n'
printf "$FMT2" model "file MiB" "ours MiB" "llama MiB" ratio aim met
printf "$FMT2" "$(printf '%.0s-' {1..34})" "---------" "---------" "---------" "------" "---------" "----"
rss_row() {
    local a b r; a="$(kv "$TMP/$2_mp" maxrss_mib)"; b="$(kv "$TMP/$2_ll" maxrss_mib)"; r="$(ratio "$a" "$b")"
    printf "$FMT2" "$1" "$(mib "$(stat -c %s "$3")")" "$a" "$b" "$r" "<= 1.10x" "$(met "$r" "<=" 1.10)"
}
for t in $TYPES; do [[ -n "${F[1.$t]:-}" ]] && rss_row "$S1 $(enc "$t")" "dc512_$t" "${F[1.$t]}"; done
if [[ $EIGHT == 1 ]]; then
    for t in $E8TYPES; do [[ -n "${F[8.$t]:-}" ]] && rss_row "$S8L $(enc "$t")" "e8dc512_$t" "${F[8.$t]}"; done
fi
echo "(ru_maxrss of each process; llama.cpp maps the file, so its pages of the model count once touched. Ours"
echo " holds BF16/F16 weights as this build's loader keeps them: $(held bf16) for BF16 files)"

disturbed="$(for k in "${!O[@]}"; do echo "${O[$k]}" | tr ' ' '\n' | awk -v k="$k" 'NF && $1 != "-" && $1 > 0.1 { print k " (" $1 ")"; exit }'; done | sort | paste -sd ' ')"
[[ -n "$disturbed" ]] && echo "WARNING: other processes used CPU during: $disturbed — rerun on a quiet machine" \
    || echo "no run was disturbed by other processes (others <= 0.1 cores throughout)"
echo "total time: $(( $(date +%s) - START )) s"
