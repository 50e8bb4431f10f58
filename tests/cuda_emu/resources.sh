#!/usr/bin/env bash
# resources.sh — what ptxas gives each CUDA kernel of the backend (registers per
# thread, static shared memory), for the emulator's launch checks (cuda_emu.cpp):
#   resources.sh NVCC ARCH OUT FILE.cu...
# writes OUT with one line per kernel, "name registers smem_bytes" (name
# demangled to the function's own name, as MP_LAUNCH's #k spells it), and fails
# when a __global__ function of the sources has no line.
set -euo pipefail
nvcc=$1 arch=$2 out=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$@"; do
  "$nvcc" -O3 -std=c++17 --generate-code=arch=compute_"$arch",code=sm_"$arch" --resource-usage \
    -c "$f" -o "$tmp/o.o" 2> "$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
  # "Compiling entry function '_Z11k_embed_bwdPf...' for 'sm_90'" ... "Used 23 registers, used 1 barriers, 128 bytes smem"
  awk '
    /Compiling entry function/ {
      m = $0; sub(/.*function .\_Z(L)?/, "", m); n = m + 0; sub(/^[0-9]+/, "", m); name = substr(m, 1, n)
    }
    /Used [0-9]+ registers/ && name != "" {
      regs = $0; sub(/.*Used /, "", regs); regs += 0
      smem = 0; if ($0 ~ /bytes smem/) { smem = $0; sub(/ bytes smem.*/, "", smem); sub(/.*, /, "", smem); smem += 0 }
      print name, regs, smem; name = ""
    }' "$tmp/log" >> "$tmp/table"
done
missing=0
for k in $(grep -ho '__global__[^(]*(' "$@" | sed 's/($//; s/.* //'); do
  grep -q "^$k " "$tmp/table" || { echo "resources.sh: no ptxas line for kernel $k" >&2; missing=1; }
done
[ "$missing" = 0 ]
sort -u "$tmp/table" > "$out"
