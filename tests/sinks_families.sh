#!/bin/sh
# tests/sinks_families.sh — the sinks probe runs on every model family mechprobe
# reads (the tiny reference models of tests/data, HF folders and GGUF files): each
# run exits 0 and writes its run file, whose /stats/alpha0 is [n_layer, n_head] and
# whose /acts hold every block's pattern (h5ls, from hdf5-tools).
# usage: sinks_families.sh MECHPROBE DATA_DIR OUT_DIR
set -u
exe=$1 data=$2 out=$3
rm -rf "$out" && mkdir -p "$out" || exit 2
fail=0
for m in arch_qwen2 arch_qwen3 arch_gemma arch_gemma2 arch_gemma3 arch_gemma3_mm arch_olmo2 arch_neox arch_phi3 arch_gpt2 \
         swa_mistral arch_qwen3.gguf arch_gemma2.gguf arch_gemma3.gguf arch_olmo2.gguf arch_neox.gguf arch_phi3.gguf \
         swa_pattern.gguf; do
  o="$out/$m"
  if ! "$exe" sinks --model "$data/$m" --tokens 1,5,9,3,7,2,8,4,6,10,11,12,13,14,15 --out "$o" > "$o.log" 2>&1; then
    echo "FAIL $m: sinks exited non-zero:"; tail -3 "$o.log"; fail=1; continue
  fi
  dims=$(h5ls "$o/sinks.h5/stats/alpha0" 2>/dev/null | sed -n 's/.*Dataset {\([0-9]*\), \([0-9]*\)}.*/\1 \2/p')
  layers=$(h5ls "$o/sinks.h5/acts" | grep -c 'attn.hook_pattern')
  set -- $dims
  if [ -z "$dims" ] || [ "$1" != "$layers" ] || [ "$layers" -lt 1 ]; then
    echo "FAIL $m: /stats/alpha0 is {$dims}, /acts has $layers patterns"; fail=1; continue
  fi
  echo "ok $m: alpha0 [$1, $2] over $layers layers"
done
exit $fail
