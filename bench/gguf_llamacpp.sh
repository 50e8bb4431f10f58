#!/usr/bin/env bash
# bench/gguf_llamacpp.sh — a by-hand check (not part of the test suite) that the
# GGUF files mechprobe's exporter writes for each family it can export load back
# equal in mechprobe and run in llama.cpp as they do in mechprobe. For each line
# of FAMILIES below: a small random model with the family's quirks switched on
# (mp.model.new), saved by m:save as F32, F16 and Q8_0 GGUF (bench/gguf_llamacpp.lua
# make; the F32 file loaded back: config and logits against the model's), then
# each file run by llama.cpp (bench/peer_llama.c: the logits of every position of a
# 32-token prefill in one batch, and a greedy decode of N tokens from BOS, KV cache
# in F32) and by mechprobe from the same file (gguf_llamacpp.lua compare). Prints a
# table: loaded, max |diff| of the logits / largest |logit|, the first position
# off (max |diff| > 1e-3 x largest), positions whose argmax agrees, greedy tokens
# equal for k/N steps, and llama.cpp's error text where it refuses a file.
#
#   LLAMA_CPP_SRC=DIR bash bench/gguf_llamacpp.sh [BUILD_DIR] [NAME...]
#
# DIR: a llama.cpp checkout (see bench/README.md for the snapshot tested), built
# here as bench/peers.sh builds it (CPU, GGML_NATIVE, Release) in
# LLAMA_CPP_BUILD (default $PEERS_BUILD/llama.cpp-build, PEERS_BUILD defaulting to
# $TMPDIR/mechprobe-peers as for peers.sh, so the two share the build).
# BUILD_DIR: mechprobe's build (default build/; needs the mechprobe CLI). NAMEs:
# run only those lines. Environment: BENCH_THREADS (default 2), GREEDY_N (16),
# BENCH_TMP (scratch, default $TMPDIR; KEEP=1 keeps it and prints where).
#
# Adding a family is one line of FAMILIES: a name, the general.architecture the
# exporter should write, and the mp.model.new fields beyond the defaults of
# gguf_llamacpp.lua (d_model 64, n_layer 4, n_head 4, vocab 320, ctx 64,
# init_std 0.1, seed 7, bytes tokenizer). A line whose fields this build does not
# know is reported "not in this build"; one whose model m:save refuses as GGUF,
# "exporter refuses" with its message.
set -uo pipefail

# name          | arch    | mp.model.new fields (a name ending -X: a variant that probes one quirk)
FAMILIES='
llama           | llama   | n_kv_head = 2, rope_theta = 50000, tied = false
mistral         | llama   | n_kv_head = 2, tied = false, sliding_window = 8
qwen2           | qwen2   | n_kv_head = 2, qkv_bias = true, rope_theta = 1000000
qwen3           | qwen3   | n_kv_head = 2, d_head = 32, qk_norm = "head", rope_theta = 1000000
gemma           | gemma   | n_kv_head = 1, d_head = 32, norm_offset = true, embed_scale = true, gelu_tanh = true
gemma2          | gemma2  | n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, attn_softcap = 10, final_softcap = 5, sliding_window = 8, sliding_window_pattern = 2
gemma2-qpas     | gemma2  | n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, attn_softcap = 10, final_softcap = 5, sliding_window = 8, sliding_window_pattern = 2, query_pre_attn_scalar = 64
gemma2-swa3     | gemma2  | n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, attn_softcap = 10, final_softcap = 5, sliding_window = 8, sliding_window_pattern = 3
gemma2-swaall   | gemma2  | n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, attn_softcap = 10, final_softcap = 5, sliding_window = 8
gemma2-noattncap| gemma2  | n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, final_softcap = 5
gemma2-nocaps   | gemma2  | n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true
gemma-untied    | gemma   | n_kv_head = 1, d_head = 32, norm_offset = true, embed_scale = true, gelu_tanh = true, tied = false
gpt2            | gpt2    | norm = "layer", mlp = "gelu_tanh", pos = "learned", qkv_bias = true, linear_bias = true
gptneox         | gptneox | norm = "layer", mlp = "gelu", pos = "half_rope", rope_dims = 8, qkv_bias = true, linear_bias = true, parallel_attn = true, tied = false
gptneox-serial  | gptneox | norm = "layer", mlp = "gelu", pos = "rope", qkv_bias = true, linear_bias = true, tied = false
gptneox-tied    | gptneox | norm = "layer", mlp = "gelu", pos = "half_rope", rope_dims = 8, qkv_bias = true, linear_bias = true, parallel_attn = true
phi3            | phi3    | pos = "half_rope", rope_dims = 8, tied = false
gemma3          | gemma3  | n_layer = 6, n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, qk_norm = "head", sliding_window = 8, sliding_window_pattern = 6, rope_theta = 1000000, rope_local_theta = 20000
gemma3-untied   | gemma3  | n_layer = 6, n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, qk_norm = "head", sliding_window = 8, sliding_window_pattern = 6, rope_theta = 1000000, rope_local_theta = 20000, tied = false
gemma3-linear8  | gemma3  | n_layer = 6, n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, qk_norm = "head", sliding_window = 8, sliding_window_pattern = 3, rope_theta = 1000000, rope_local_theta = 20000, rope_scale = 8
gemma3-fcap     | gemma3  | n_layer = 6, n_kv_head = 2, norm_offset = true, embed_scale = true, gelu_tanh = true, post_norms = true, qk_norm = "head", sliding_window = 8, sliding_window_pattern = 6, rope_theta = 1000000, rope_local_theta = 20000, final_softcap = 5
olmo2           | olmo2   | n_kv_head = 2, qk_norm = "full", pre_norms = false, post_norms = true, tied = false
'

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
ONLY=()
for a in "$@"; do
    case "$a" in
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        */*|.|..) BUILD="$a" ;;
        *) if [[ -d "$a" ]]; then BUILD="$a"; else ONLY+=("$a"); fi ;;
    esac
done
MP="$BUILD/mechprobe"
LUA="$ROOT/bench/gguf_llamacpp.lua"
N="${BENCH_THREADS:-2}"
GN="${GREEDY_N:-16}"
PEERS="${PEERS_BUILD:-${TMPDIR:-/tmp}/mechprobe-peers}"
LB="${LLAMA_CPP_BUILD:-$PEERS/llama.cpp-build}"
if [[ ! -x "$MP" ]]; then
    echo "gguf_llamacpp.sh: $MP not found; build it first (cmake --build $BUILD --target mechprobe)" >&2
    exit 1
fi
if [[ -z "${LLAMA_CPP_SRC:-}" || ! -f "${LLAMA_CPP_SRC:-/nonexistent}/include/llama.h" ]]; then
    echo "gguf_llamacpp.sh: set LLAMA_CPP_SRC to a llama.cpp checkout (its include/llama.h)" >&2
    exit 1
fi
mkdir -p "$PEERS" || exit 1
TMP="$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/mpgguf.XXXXXX")" || exit 1
if [[ "${KEEP:-0}" == 1 ]]; then echo "scratch: $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

echo "== mechprobe GGUF export vs llama.cpp — $(date -u +%Y-%m-%dT%H:%MZ)"
LREV="$(git -C "$LLAMA_CPP_SRC" log -1 --format='%h %cs' 2>/dev/null || echo '?')"
echo "llama.cpp: $LLAMA_CPP_SRC ($LREV); mechprobe: $(git -C "$ROOT" log -1 --format='%h' 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+changes')"
echo "building llama.cpp (CPU, GGML_NATIVE, Release) in $LB ..."
if ! { cmake -S "$LLAMA_CPP_SRC" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
             -DBUILD_SHARED_LIBS=OFF >"$PEERS/llama-cmake.log" 2>&1 &&
       cmake --build "$LB" -j"$N" --target llama >"$PEERS/llama-build.log" 2>&1 &&
       gcc -O2 -c "$ROOT/bench/peer_llama.c" -I"$LLAMA_CPP_SRC/include" -I"$LLAMA_CPP_SRC/ggml/include" \
           -I"$ROOT/bench" $(grep -q flash_attn_type "$LLAMA_CPP_SRC/include/llama.h" && echo -DPEER_HAS_FA_TYPE) \
           -o "$PEERS/peer_llama.o" &&
       g++ "$PEERS/peer_llama.o" "$LB/src/libllama.a" "$LB/ggml/src/libggml.a" "$LB/ggml/src/libggml-cpu.a" \
           "$LB/ggml/src/libggml-base.a" -fopenmp -lpthread -o "$PEERS/peer_llama"; }; then
    echo "gguf_llamacpp.sh: the llama.cpp build failed (logs in $PEERS/llama-*.log)" >&2
    exit 1
fi
PEER="$PEERS/peer_llama"

kv() { sed -n "s/^$2=//p" "$1" 2>/dev/null | tail -1; }
# llama.cpp's reason for a refusal: its error lines, the loader's first
errtext() { grep -v '^peer_llama: cannot load' "$1" | grep -iE 'error|failed|wrong|missing|not found|unknown' | head -2 | tr '\n' ' ' | cut -c1-240; }

ROWS="$TMP/rows"
: >"$ROWS"
row() { printf '%-17s %-5s %-8s %-6s %-10s %-9s %-8s %-8s %s\n' "$@" | tee -a "$ROWS"; }
echo
row family type arch loaded rel_diff first_off argmax greedy note
while IFS='|' read -r name arch fields; do
    name="$(echo "$name" | xargs)"; arch="$(echo "$arch" | xargs)"; fields="$(echo "$fields" | sed 's/^ *//; s/ *$//')"
    [[ -z "$name" || "$name" == \#* ]] && continue
    if [[ ${#ONLY[@]} -gt 0 && ! " ${ONLY[*]} " =~ " $name " ]]; then continue; fi
    D="$TMP/$name"
    mkdir -p "$D"
    "$MP" "$LUA" make "$D" "$name" "$fields" >"$D/make.out" 2>"$D/make.err"
    if [[ "$(kv "$D/make.out" status)" == not-in-build ]]; then
        row "$name" - "$arch" - - - - - "not in this build: $(kv "$D/make.out" error | cut -c1-200)"
        continue
    fi
    if [[ "$(kv "$D/make.out" status)" == refused ]]; then
        row "$name" - "$arch" - - - - - "exporter refuses: $(kv "$D/make.out" error | cut -c1-200)"
        continue
    fi
    got="$(kv "$D/make.out" arch)"
    if [[ -z "$got" ]]; then
        row "$name" - "$arch" - - - - - "mechprobe failed: $(tail -2 "$D/make.err" | tr '\n' ' ' | cut -c1-200)"
        continue
    fi
    lb="loadback F32: config $(kv "$D/make.out" loadback_config), max|diff| $(kv "$D/make.out" loadback_maxdiff)$(kv "$D/make.out" loadback_error)"
    [[ "$got" != "$arch" ]] && lb="written as $got, not $arch; $lb"
    IFS=',' read -r -a types <<<"$(kv "$D/make.out" types)"
    for ty in "${types[@]}"; do
        F="$D/$name.$ty.gguf"
        "$PEER" --mode logits --model "$F" --tokens "$D/tokens.i32" --dump "$D/$name.$ty.llama.logits" \
                --threads "$N" --kv-f32 1 >"$D/$ty.logits.out" 2>"$D/$ty.logits.err"
        lrc=$?
        if grep -q '^peer_llama: cannot load' "$D/$ty.logits.err"; then
            row "$name" "$ty" "$got" no - - - - "llama.cpp: $(errtext "$D/$ty.logits.err")"
            continue
        fi
        "$PEER" --mode decode --model "$F" -n $((GN + 1)) --reps 1 --threads "$N" --kv-f32 1 \
                >"$D/$ty.decode.out" 2>"$D/$ty.decode.err"
        kv "$D/$ty.decode.out" tokens >"$D/$name.$ty.llama.tokens"
        [[ -s "$D/$name.$ty.llama.tokens" ]] || rm -f "$D/$name.$ty.llama.tokens"
        "$MP" "$LUA" compare "$D" "$name" "$ty" "$GN" >"$D/$ty.cmp.out" 2>"$D/$ty.cmp.err"
        c="$D/$ty.cmp.out"
        note="$lb"
        [[ $lrc != 0 ]] && note="llama.cpp logits failed: $(errtext "$D/$ty.logits.err"); $note"
        # mechprobe's load message when it runs a quantized file as float32 (its fused gptneox / phi3 rows, F16)
        grep -q 'dequantised to' "$D/$ty.cmp.err" && note="mechprobe ran it dequantised to F32; $note"
        grep -v 'dequantised to' "$D/$ty.cmp.err" | grep -q . &&
            note="compare: $(grep -v 'dequantised to' "$D/$ty.cmp.err" | tail -1 | cut -c1-160); $note"
        row "$name" "$ty" "$got" yes "$(kv "$c" rel)" "$(kv "$c" first_off)" "$(kv "$c" argmax)" "$(kv "$c" greedy)" "$note"
        lb=""
    done
done <<<"$FAMILIES"
