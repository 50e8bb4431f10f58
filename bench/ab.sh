#!/usr/bin/env bash
# bench/ab.sh — old build against new build, interleaved: is a refactor no
# slower? Runs forward (prefill), capture, training steps and decoding with
# the benchmark programs of two build folders, alternating old and new ROUNDS
# times so that a change in the machine's load hits both alike, and prints
# each measurement's median per build and the ratio new/old (below 1: the new
# build is faster). It also checks that both builds compute the same bytes:
# the forward's logits (--dump) and the decode's logits must be identical.
#
#   bash bench/ab.sh OLD_BUILD NEW_BUILD [ROUNDS]     (default ROUNDS 5)
#
# Each build folder must hold bench/bench_forward, bench/bench_train and
# bench/bench_gen (cmake --build DIR --target bench_forward bench_train bench_gen).
# Models are random and made by the OLD build (llama2.c and GGUF files under
# $BENCH_TMP, removed at exit). BENCH_THREADS sets OMP_NUM_THREADS (default nproc).
set -euo pipefail
OLD=${1:?usage: bench/ab.sh OLD_BUILD NEW_BUILD [ROUNDS]}
NEW=${2:?usage: bench/ab.sh OLD_BUILD NEW_BUILD [ROUNDS]}
ROUNDS=${3:-5}
for d in "$OLD" "$NEW"; do
  for b in bench_forward bench_train bench_gen; do
    [[ -x "$d/bench/$b" ]] || { echo "ab.sh: $d/bench/$b is missing (cmake --build $d --target $b)" >&2; exit 2; }
  done
done
TMP=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/mp_ab.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=${BENCH_THREADS:-$(nproc)}

# the models: a random Llama (d 512, 8 layers) as llama2.c, and a small GGUF for decoding
"$OLD/bench/bench_forward" --mode make-random --out "$TMP/r512.bin" > /dev/null
"$OLD/bench/bench_gen" --mode make --out "$TMP/g" --d-model 256 --layers 4 --vocab 512 --seed 7 > /dev/null

# name | program | arguments | the key of its time (seconds or ms) in the output
CASES=(
  "forward|bench_forward|--mode forward --model $TMP/r512.bin -B 1 -T 512 --reps 5 --warmup 1|median_s"
  "capture|bench_forward|--mode capture --model $TMP/r512.bin -B 1 -T 512 --hooks * --out $TMP/cap.h5 --reps 3 --warmup 1|median_s"
  "train|bench_train|--d-model 128 --layers 4 --heads 4 --d-mlp 344 --vocab 512 --seq 256 --batch 8 --steps 6 --warmup-steps 2|step_ms"
  "decode|bench_gen|--mode decode --model $TMP/g.f32.gguf -n 64 --reps 5|median_s"
)

value() { # KEY FILE -> the number after KEY= (also inside a RESULT line)
  tr ' ' '\n' < "$2" | sed -n "s/^$1=//p" | head -1
}
declare -A T
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r name prog args key <<< "$c"
    for side in old new; do
      dir=$OLD; [[ $side == new ]] && dir=$NEW
      # shellcheck disable=SC2086
      set -f; "$dir/bench/$prog" $args > "$TMP/out" 2> "$TMP/err" || { echo "ab.sh: $side $name failed:"; cat "$TMP/err"; exit 1; }; set +f
      v=$(value "$key" "$TMP/out")
      [[ -n $v ]] || { echo "ab.sh: $side $name printed no $key" >&2; cat "$TMP/out" >&2; exit 1; }
      T[$name.$side]="${T[$name.$side]:-} $v"
    done
  done
  echo "round $r of $ROUNDS done" >&2
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-8s %12s %12s %10s   (%d rounds, interleaved, %s threads, load %s)\n' case old new new/old "$ROUNDS" \
  "$OMP_NUM_THREADS" "$(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${CASES[@]}"; do
  IFS='|' read -r name prog args key <<< "$c"
  o=$(median <<< "${T[$name.old]}"); n=$(median <<< "${T[$name.new]}")
  printf '%-8s %12s %12s %10.3f   (%s)\n' "$name" "$o" "$n" "$(awk -v a="$n" -v b="$o" 'BEGIN{print a/b}')" "$key"
done

# the same bytes: forward logits and decode logits of both builds
for side in old new; do
  dir=$OLD; [[ $side == new ]] && dir=$NEW
  "$dir/bench/bench_forward" --mode forward --model "$TMP/r512.bin" -B 2 -T 64 --reps 1 --warmup 0 \
    --dump "$TMP/fw.$side" > /dev/null
  "$dir/bench/bench_gen" --mode decode --model "$TMP/g.f32.gguf" -n 16 --reps 1 --dump "$TMP/dec.$side" > /dev/null
done
cmp -s "$TMP/fw.old.logits.f32" "$TMP/fw.new.logits.f32" && echo "forward logits: identical bytes" \
  || { echo "forward logits: DIFFER"; exit 1; }
cmp -s "$TMP/dec.old" "$TMP/dec.new" && echo "decode logits: identical bytes" || { echo "decode logits: DIFFER"; exit 1; }
