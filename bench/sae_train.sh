#!/usr/bin/env bash
# bench/sae_train.sh — SAE training throughput, mechprobe (C, mp.sae.train
# streaming an HDF5 capture) against a plain PyTorch loop (Debian's torch),
# same architectures (standard, topk), data, batch and threads, side by side.
#   bash bench/sae_train.sh [BUILD_DIR] [bench/sae_train.py options...]
# Defaults: d_in 512, d_sae 4096, batch 4096, k 32, 6 timed steps, 2 threads
# (BENCH_THREADS). --stream-gb G (opt-in) also streams a G GB dataset once.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"; shift || true
export OMP_NUM_THREADS="${BENCH_THREADS:-2}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
[[ -x "$BUILD/mechprobe" ]] || { echo "sae_train.sh: build $BUILD/mechprobe first" >&2; exit 1; }
exec /usr/bin/python3 "$ROOT/bench/sae_train.py" --mechprobe "$BUILD/mechprobe" "$@"
