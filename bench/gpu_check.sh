#!/usr/bin/env bash
# bench/gpu_check.sh — the prepared check of the CUDA backend (issues 19, 20) for a
# lent GPU machine, which may have no package registry and may lack HDF5, GSL,
# cairo, Lua and OpenBLAS. Three modes:
#
#   bash bench/gpu_check.sh bundle   here: build build-gpu/ (no MPI, -march=x86-64-v3, CUDA
#                                    on) and pack build-gpu-bundle/gpu_bundle.tar.xz: the
#                                    binaries (mechprobe, test_gpu, test_cuda_train_ops,
#                                    test_gpu_train, bench_gpu), the shared
#                                    libraries ldd lists for them less the C library (glibc)
#                                    and the CUDA driver, and the third-party headers a
#                                    source build needs; checks the ldd closure and the size
#                                    (<= 64 MiB, so it can be carried to the device machine)
#   bash bench/gpu_check.sh run      there (repository root, bundle carried): use the bundle
#                                    if its binaries start, else build the C tests and bench_gpu
#                                    from the carried source with the bundle's headers and
#                                    libraries (gcc + nvcc needed there); then the gpu tests'
#                                    summary, the fp32/bf16 prefill at T = 2048 of a d768 L12
#                                    H12 Llama against PyTorch eager (SDPA) on the same weights,
#                                    the cuBLAS bf16 GEMM ceiling, the capture overhead, fp32
#                                    training steps (B 4, T 1024) against PyTorch's with MFU,
#                                    and sinks --preset gpu --device cuda with its verdicts
#   bash bench/gpu_check.sh check    here: bundle, then run: everything up to the device runs
#                                    (the bundle's closure, unpacking, the fallback build),
#                                    and each device step prints the SKIP it reaches
#
# Environment: GPU_CHECK_T (2048), GPU_CHECK_REPS (3), GPU_CHECK_TMP (a fresh folder
# under $TMPDIR or /tmp: the model file, 440 MB, and the capture file, removed at exit),
# GPU_CHECK_FORCE_SOURCE=1 (skip the bundle, build from source), GPU_CHECK_TRAIN_T (1024)
# and GPU_CHECK_TRAIN_B (4): the training steps' shape, GPU_CHECK_PRESET_STEPS (300): the
# sinks --preset gpu run's steps. Budget: about 8 min (the bench at most 200 s, the
# PyTorch peer 120 s, the preset 120 s, each under timeout).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE="${1:-run}"
BDIR="$ROOT/build-gpu-bundle"
TAR="$BDIR/gpu_bundle.tar.xz"
LIMIT=$((64 * 1024 * 1024))
JOBS=$(nproc 2>/dev/null || echo 2)
say() { printf 'gpu_check: %s\n' "$*"; }
die() { say "FAILED: $*"; exit 1; }

# glibc's own libraries and the CUDA driver are the machine's, never carried
skip_lib() {
  case "$(basename "$1")" in
    libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*|libutil.so.*|libcuda.so*|libnvidia*|linux-vdso*) return 0 ;;
  esac
  return 1
}

bundle() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc not found: the bundle needs the CUDA build"
  say "building build-gpu/ (Release, -march=x86-64-v3, MP_MPI=OFF, MP_CUDA=ON)"
  cmake -S "$ROOT" -B "$ROOT/build-gpu" -DCMAKE_BUILD_TYPE=Release -DMP_MPI=OFF -DMP_CUDA=ON \
        -DCMAKE_C_FLAGS_RELEASE="-O3 -march=x86-64-v3 -DNDEBUG" > "$ROOT/build-gpu.cmake.log" 2>&1 \
    || { cat "$ROOT/build-gpu.cmake.log"; die "configure"; }
  cmake --build "$ROOT/build-gpu" -j"$JOBS" --target mechprobe test_gpu test_cuda_train_ops test_gpu_train bench_gpu > "$ROOT/build-gpu/gpu_check.build.log" 2>&1 \
    || { tail -30 "$ROOT/build-gpu/gpu_check.build.log"; die "build"; }
  rm -rf "$BDIR" && mkdir -p "$BDIR/gpu_bundle/bin" "$BDIR/gpu_bundle/lib" "$BDIR/gpu_bundle/include"
  local B="$BDIR/gpu_bundle"
  cp "$ROOT/build-gpu/mechprobe" "$ROOT/build-gpu/tests/test_gpu" "$ROOT/build-gpu/tests/test_cuda_train_ops" \
     "$ROOT/build-gpu/tests/test_gpu_train" "$ROOT/build-gpu/bench/bench_gpu" "$B/bin/"
  # the closure: every library ldd resolves for the binaries, less glibc and the driver
  local lib missing=0
  for bin in "$B"/bin/*; do
    while read -r name _ path _; do
      [ "$path" = "not" ] && { say "ldd: $bin: $name not found"; missing=1; continue; }
      [ -n "$path" ] && [ -f "$path" ] || continue
      skip_lib "$path" && continue
      cp -nL "$path" "$B/lib/$(basename "$path")"
    done < <(ldd "$bin" | grep '=>')
  done
  [ "$missing" = 0 ] || die "unresolved libraries"
  # closed: each carried library's own dependencies are carried (or glibc / the driver)
  for lib in "$B"/lib/*; do
    while read -r name _ path _; do
      skip_lib "$name" && continue
      [ -f "$B/lib/$name" ] || { say "closure: $(basename "$lib") needs $name, not carried"; missing=1; }
    done < <(ldd "$lib" | grep '=>')
  done
  [ "$missing" = 0 ] || die "the library closure is not closed"
  # headers for a source build there: GSL, OpenBLAS's cblas, PCRE2, jansson, serial HDF5, Lua-free
  cp -r /usr/include/gsl "$B/include/"
  cp /usr/include/x86_64-linux-gnu/cblas*.h /usr/include/x86_64-linux-gnu/openblas*config*.h "$B/include/" 2>/dev/null \
    || cp /usr/include/cblas.h "$B/include/"
  cp /usr/include/pcre2.h /usr/include/jansson.h /usr/include/jansson_config.h "$B/include/"
  mkdir -p "$B/include/hdf5" && cp /usr/include/hdf5/serial/*.h "$B/include/hdf5/"
  local need; need=$(objdump -T "$B"/bin/* "$B"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sort -Vu | tail -1)
  echo "${need:-unknown}" > "$B/GLIBC_NEEDED"
  (cd "$BDIR" && tar -cJf gpu_bundle.tar.xz gpu_bundle)
  local size; size=$(stat -c %s "$TAR")
  say "bundle: $(ls "$B/bin" | tr '\n' ' ')+ $(ls "$B/lib" | wc -l) libraries ($(du -sh "$B/lib" | cut -f1) unpacked), headers; needs glibc >= ${need#GLIBC_}"
  say "bundle: $TAR $((size / 1024)) KiB (limit 65536 KiB)"
  [ "$size" -le "$LIMIT" ] || die "the bundle is larger than 64 MiB"
  rm -rf "$B"
}

# builds the C gpu tests and bench_gpu from the source tree with the bundle's headers and
# libraries into $1 (gcc and nvcc of that machine)
build_from_source() {
  local out=$1 B=$2 NVCC
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$NVCC" ] || { say "source build: no nvcc on this machine"; return 1; }
  local CUDA_HOME; CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  mkdir -p "$out/obj"
  local inc=(-I"$ROOT/base" -I"$ROOT/runtime" -I"$ROOT/hooks" -I"$ROOT/io" -I"$ROOT/runtime/cuda" -I"$ROOT/tests"
             -I"$ROOT/bench" -I"$B/include" -I"$B/include/hdf5" -I"$CUDA_HOME/include")
  local defs=(-DMP_HAVE_CUDA=1 -DMP_SHARED_DIR=\"$ROOT/../shared\" -DMP_TESTDATA=\"$ROOT/tests/data\")
  say "source build: nvcc $("$NVCC" --version | tail -1)"
  for f in "$ROOT"/runtime/cuda/*.cu; do
    "$NVCC" -O3 -std=c++17 --generate-code=arch=compute_90,code=sm_90 -c "$f" \
      -o "$out/obj/$(basename "${f%.cu}").o" || return 1
  done
  local srcs=("$ROOT"/base/*.c "$ROOT"/runtime/*.c "$ROOT"/hooks/*.c "$ROOT"/runtime/cuda/*.c "$ROOT"/io/*.c
              "$ROOT/tests/testutil.c")
  local cflags=(-std=gnu11 -O2 -fopenmp "${inc[@]}" "${defs[@]}") pids=() fail=0 f o
  for f in "${srcs[@]}"; do # $JOBS compilers at a time
    o="$out/obj/$(realpath --relative-to="$ROOT" "$f" | tr / _).o"
    gcc "${cflags[@]}" -c "$f" -o "${o%.c.o}.o" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$JOBS" ]; then wait "${pids[0]}" || fail=1; pids=("${pids[@]:1}"); fi
  done
  for f in "${pids[@]}"; do wait "$f" || fail=1; done
  [ "$fail" = 0 ] || return 1
  local libs=(-L"$B/lib" -Wl,-rpath,"$B/lib" -l:libgsl.so.27 -l:libopenblas.so.0 -l:libpcre2-8.so.0 -l:libjansson.so.4
              -l:libhdf5_serial.so.103 -L"$CUDA_HOME/lib64" -lcudart_static -lgomp -lpthread -ldl -lrt -lm)
  local objs=("$out"/obj/*.o)
  local core=(); for o in "${objs[@]}"; do case "$o" in */tests_testutil.o) ;; *) core+=("$o") ;; esac; done
  for t in test_gpu test_cuda_train_ops test_gpu_train; do
    gcc "${cflags[@]}" "$ROOT/tests/$t.c" "${core[@]}" "$out/obj/tests_testutil.o" \
        -o "$out/$t" -lstdc++ "${libs[@]}" || return 1
  done
  gcc "${cflags[@]}" "$ROOT/bench/bench_gpu.c" "${core[@]}" \
      -o "$out/bench_gpu" -lstdc++ "${libs[@]}" || return 1
  say "source build: $out/test_gpu, test_cuda_train_ops, test_gpu_train, bench_gpu"
}

run() {
  local dry=${1:-0} T="${GPU_CHECK_T:-2048}" REPS="${GPU_CHECK_REPS:-3}" t0=$SECONDS
  TMP="${GPU_CHECK_TMP:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}"
  mkdir -p "$TMP"
  trap 'rm -rf "$TMP"' EXIT
  say "machine: $(uname -m), glibc $(ldd --version | head -1 | grep -o '[0-9.]*$'), $(nproc) cores"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu_check: gpu: /'
    say "driver's CUDA: $(nvidia-smi | grep -o 'CUDA Version: [0-9.]*')  (this build: CUDA 13, needs a driver >= 580)"
  else
    say "no nvidia-smi: no NVIDIA driver here"
  fi
  # cuBLAS is dlopen'ed (libcublas.so.13); offer PyTorch's copy when the system has none
  local extra=""
  for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cublas", "lib") for p in nvidia.__path__))' 2>/dev/null) \
           /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    { [ -e "$d/libcublas.so.13" ] || [ -e "$d/libcublas.so.12" ]; } && extra="$extra:$d"
  done
  [ -n "$extra" ] && say "cuBLAS found in ${extra#:}" || say "no libcublas.so.13 or .so.12 found (the device path will say it cannot load cuBLAS)"
  local B="$TMP/gpu_bundle" BIN=""
  if [ "${GPU_CHECK_FORCE_SOURCE:-0}" != 1 ] && [ -f "$TAR" ]; then
    tar -xJf "$TAR" -C "$TMP" || die "unpacking $TAR"
    starts() { LD_LIBRARY_PATH="$B/lib$extra" "$B/bin/mechprobe" --version > /dev/null 2>"$TMP/start.err"; }
    if ! starts; then # an older glibc: the machine's own C++ runtime (we need only CXXABI_1.3) may do
      say "the bundle does not start: $(head -2 "$TMP/start.err" | tr '\n' ' '); retrying with this machine's libstdc++"
      mkdir -p "$TMP/aside" && mv "$B"/lib/libstdc++.so.* "$B"/lib/libgcc_s.so.* "$TMP/aside/" 2>/dev/null
    fi
    if starts; then
      BIN="$B/bin"
      say "using the bundle ($(du -sh "$B" | cut -f1) unpacked; built with $(cat "$B/GLIBC_NEEDED"))"
    else
      say "the bundle does not start here: $(head -3 "$TMP/start.err" | tr '\n' ' ')"
    fi
  elif [ ! -f "$TAR" ]; then
    say "no bundle at $TAR"
  fi
  if [ -z "$BIN" ]; then
    [ -d "$B/lib" ] || { tar -xJf "$TAR" -C "$TMP" 2>/dev/null || die "no bundle to take headers and libraries from"; }
    build_from_source "$TMP/src_build" "$B" || die "neither the bundle nor a source build runs here"
    BIN="$TMP/src_build"
  fi
  export LD_LIBRARY_PATH="$B/lib$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

  say "== gpu tests (the CPU is the reference; fp32 within 1e-4 of each tensor's scale)"
  local failed=0 ran=0 skipped=0 line rc
  local t
  for t in test_gpu test_cuda_train_ops test_gpu_train; do # the forward, the training kernels, training steps
    "$BIN/$t" > "$TMP/$t.out" 2>"$TMP/$t.err"; rc=$?
    line=$(tail -1 "$TMP/$t.out")
    case $rc in 0) ran=$((ran + 1)) ;; 77) skipped=$((skipped + 1)) ;; *) ran=$((ran + 1)); failed=$((failed + 1)); head -40 "$TMP/$t.err" ;; esac
    say "$t: $line (exit $rc)"
  done
  "$BIN/test_gpu" > /dev/null 2>&1; rc=$?
  if [ $rc = 77 ]; then # no device: the same binary with the CPU on both sides shows it runs here
    "$BIN/test_gpu" --dry > "$TMP/dry.out" 2>&1
    say "test_gpu --dry (CPU against CPU, no device): $(tail -1 "$TMP/dry.out")"
  fi
  if [ -x "$BIN/mechprobe" ]; then
    MP_SHARED_DIR="$ROOT/../shared" "$BIN/mechprobe" "$ROOT/tests/lua/test_gpu.lua" > "$TMP/lua.out" 2>"$TMP/lua.err"; rc=$?
    line=$(tail -1 "$TMP/lua.out")
    case $rc in 0) ran=$((ran + 1)) ;; 77) skipped=$((skipped + 1)) ;; *) ran=$((ran + 1)); failed=$((failed + 1)); head -40 "$TMP/lua.err" ;; esac
    say "test_gpu_lua: $line (exit $rc)"
  else
    say "test_gpu_lua: not run (a source build has no mechprobe: its Lua needs the libraries the bundle carries)"
  fi
  say "gpu tests: $ran ran, $failed failed, $skipped skipped (no device)"

  local TT="${GPU_CHECK_TRAIN_T:-1024}" TB="${GPU_CHECK_TRAIN_B:-4}"
  say "== prefill T=$T and training steps B=$TB T=$TT, d768 L12 H12 Llama, same weights and tokens as PyTorch"
  timeout 200 "$BIN/bench_gpu" --save "$TMP/model.bin" --T "$T" --reps "$REPS" --capture-dir "$TMP" --dump "$TMP/ref" \
    --train-T "$TT" --train-B "$TB" > "$TMP/bench.out" 2>&1; rc=$?
  sed 's/^/gpu_check: mechprobe: /' "$TMP/bench.out"
  if [ $rc = 0 ] || [ $rc = 124 ]; then
    if python3 -c 'import torch' 2>/dev/null; then
      timeout 120 python3 "$ROOT/bench/peer_torch_gpu.py" "$TMP/model.bin" "$TMP/ref" --reps "$REPS" \
        --train-T "$TT" --train-B "$TB" --budget 110 > "$TMP/peer.out" 2>&1
      sed 's/^/gpu_check: pytorch: /' "$TMP/peer.out"
      # ratios, and MFU: model FLOPs per second over the GEMM ceiling measured in this run
      awk -F'[= ]' '{v[$1] = $2} END {
        if (v["bf16_tok_s"] && v["torch_bf16_tok_s"]) printf "gpu_check: prefill bf16 mechprobe / torch eager = %.2f\n", v["bf16_tok_s"] / v["torch_bf16_tok_s"]
        if (v["fp32_tok_s"] && v["torch_fp32_tok_s"]) printf "gpu_check: prefill fp32 mechprobe / torch eager = %.2f\n", v["fp32_tok_s"] / v["torch_fp32_tok_s"]
        if (v["train_fp32_tok_s"] && v["torch_train_fp32_tok_s"]) printf "gpu_check: training fp32 mechprobe / torch eager fp32 = %.2f\n", v["train_fp32_tok_s"] / v["torch_train_fp32_tok_s"]
        if (v["train_bf16_tok_s"] && v["torch_train_bf16_autocast_tok_s"]) printf "gpu_check: training bf16 mechprobe / torch eager bf16 autocast = %.2f\n", v["train_bf16_tok_s"] / v["torch_train_bf16_autocast_tok_s"]
        if (v["train_bf16_tok_s"] && v["torch_train_bf16_autocast_compiled_tok_s"]) printf "gpu_check: training bf16 mechprobe / torch.compile bf16 autocast = %.2f\n", v["train_bf16_tok_s"] / v["torch_train_bf16_autocast_compiled_tok_s"]
        if (v["train_fp32_tok_s"] && v["train_flops_per_token"] && v["cublas_fp32_gemm_tflops"]) printf "gpu_check: training MFU fp32 = %.1f%% of the fp32 GEMM ceiling (%s TFLOP/s)\n", 100 * v["train_fp32_tok_s"] * v["train_flops_per_token"] / (v["cublas_fp32_gemm_tflops"] * 1e12), v["cublas_fp32_gemm_tflops"]
        if (v["train_bf16_tok_s"] && v["train_flops_per_token"] && v["cublas_bf16_gemm_tflops"]) printf "gpu_check: training MFU bf16 = %.1f%% of the bf16 GEMM ceiling (%s TFLOP/s; aim 35%%)\n", 100 * v["train_bf16_tok_s"] * v["train_flops_per_token"] / (v["cublas_bf16_gemm_tflops"] * 1e12), v["cublas_bf16_gemm_tflops"]
      }' "$TMP/bench.out" "$TMP/peer.out"
    else
      say "pytorch: not importable here"
    fi
  fi
  if [ -x "$BIN/mechprobe" ] && [ $rc != 77 ]; then # one GPU preset end to end, bounded
    say "== sinks --preset gpu --device cuda (1 seed, ${GPU_CHECK_PRESET_STEPS:-300} steps, at most 120 s)"
    timeout 120 "$BIN/mechprobe" sinks --preset gpu --device cuda --seeds 1 --steps "${GPU_CHECK_PRESET_STEPS:-300}" \
      --checkpoints 2 --out "$TMP/sinks_gpu" > "$TMP/preset.out" 2>&1; rc=$?
    grep -E '^(VERDICT|RULE|seed|time)|sink' "$TMP/preset.out" | head -30 | sed 's/^/gpu_check: preset: /'
    say "sinks --preset gpu: exit $rc"
  fi
  say "done in $((SECONDS - t0)) s"
  [ "$failed" = 0 ]
}

case "$MODE" in
  bundle) bundle ;;
  run) run ;;
  check)
    bundle
    say "== check: run up to the device on this machine"
    GPU_CHECK_FORCE_SOURCE=${GPU_CHECK_FORCE_SOURCE:-0} run
    ;;
  *) echo "usage: bash bench/gpu_check.sh bundle|run|check" >&2; exit 2 ;;
esac
