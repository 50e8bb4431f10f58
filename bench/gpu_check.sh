#!/usr/bin/env bash
# bench/gpu_check.sh — the prepared check of the CUDA backend (issues 19, 20) for a
# lent GPU machine (one H100 or H200, NVIDIA driver >= 580, CUDA 13, PyTorch with its
# CUDA libraries in pip wheels), which may have no package registry and may lack HDF5,
# GSL, cairo, Lua and OpenBLAS. Three modes:
#
#   bash bench/gpu_check.sh bundle     here: build build-gpu/ (no MPI, -march=x86-64-v3, CUDA
#                                      on, CUDA code with -lineinfo) and pack
#                                      build-gpu-bundle/gpu_bundle.tar.xz: the binaries
#                                      (mechprobe, test_gpu, test_cuda_train_ops, test_gpu_train,
#                                      bench_gpu), the shared libraries ldd lists for them less
#                                      the C library (glibc) and the CUDA driver, the
#                                      third-party headers a source build needs, and the shared
#                                      llama2.c model the gpu tests compare (../shared/models/
#                                      aidreams260K.bin and its tokenizer, into shared/); checks
#                                      the ldd closure and the size (<= 64 MiB, so it can be
#                                      carried to the device machine). build-gpu-bundle/ is
#                                      ignored by git: it is carried, never committed.
#   bash bench/gpu_check.sh run        there (repository root, build-gpu-bundle/ carried): the
#                                      versions first (driver, CUDA runtime, PyTorch, cuBLAS and
#                                      where it was found), then the bundle if its binaries
#                                      start, else a build of the C tests and bench_gpu from the
#                                      carried source with the bundle's headers and libraries
#                                      (gcc + nvcc needed there); then, one step each:
#                                      the gpu tests (test_gpu once, test_cuda_train_ops,
#                                      test_gpu_train, test_gpu.lua, the shared model included);
#                                      bench_gpu: the fp32/bf16 prefill at T = 2048 of a d768 L12
#                                      H12 Llama, the capture to an HDF5 file, the copy-stream
#                                      overlap of a capture to memory at T = 512 against the
#                                      plain forward and the bare device-to-host copies, fp32 and
#                                      bf16 training steps (B 4, T 1024) with their model FLOPs;
#                                      PyTorch eager on the same weights (SDPA, the cuBLAS GEMM
#                                      ceilings, its training steps) and the ratios and MFU;
#                                      sinks --preset gpu --device cuda for 30 steps, a
#                                      THROUGHPUT measurement (tokens/s), not a verdict run;
#                                      compute-sanitizer memcheck and racecheck on
#                                      test_cuda_train_ops (and memcheck on test_gpu when it is
#                                      quick) if the machine has compute-sanitizer (PATH,
#                                      /usr/local/cuda*/, the pip nvidia wheels).
#   bash bench/gpu_check.sh check      here: bundle, then `run --dry`: everything up to the
#   bash bench/gpu_check.sh run --dry  device runs (the closure, unpacking, starting the
#                                      binaries, the versions, test_gpu --dry and test_gpu.lua
#                                      --dry with the carried shared model), and each device
#                                      step prints the SKIP it reaches.
# Exit status of run: 0, 1 (a test, the bench, the peer or a sanitizer failed), 3 (without
# --dry: no step reached a device), 4 (nothing failed, but steps were not started for the
# budget).
#
# Every step runs under its own `timeout` (seconds: versions 10 + 20, unpacking 15 and
# starting 10, tests 30 + 15 + 25 + 30, bench 85, PyTorch 95, preset 55, sanitizers
# 30 + 25 + 20: 465 s in all, within 8 minutes), and no step starts past GPU_CHECK_BUDGET
# (470 s) after the start (a fallback source build, at most 120 s, takes its time from
# the last steps). Every log
# is written as it goes under $OUT when set (the device tool brings $OUT back, also from a
# call that was killed), else under out/gpu_check/: gpu_check.log (all this script
# prints), one STEP.log per step, and summary.txt (the versions, each step's verdict,
# exit status, seconds and timeout, and the key numbers). LD_LIBRARY_PATH (the bundle's
# Debian libraries, cuBLAS's folder) is set per command for our binaries only, never
# for python3 or the rest of the script.
#
# Environment: GPU_CHECK_T (2048), GPU_CHECK_REPS (3), GPU_CHECK_OVERLAP_T (512),
# GPU_CHECK_TRAIN_T (1024) and GPU_CHECK_TRAIN_B (4): the training steps' shape,
# GPU_CHECK_PRESET_STEPS (30), GPU_CHECK_TMP (a fresh folder under $TMPDIR or /tmp for
# the model file, 440 MB, and the capture file; removed at exit), GPU_CHECK_FORCE_SOURCE=1
# (skip the bundle, build from source), GPU_CHECK_BUDGET (470), GPU_CHECK_PYTHON
# (python3), GPU_CHECK_SHARED (../shared: where `bundle` takes the model from).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE="${1:-run}"
DRY=0
[ "${2:-}" = "--dry" ] && DRY=1
BDIR="$ROOT/build-gpu-bundle"
TAR="$BDIR/gpu_bundle.tar.xz"
INFO="$BDIR/gpu_bundle.info"
LIMIT=$((64 * 1024 * 1024))
JOBS=$(nproc 2>/dev/null || echo 2)
# the PyTorch peer's python: GPU_CHECK_PYTHON, else the first of python3 and /usr/bin/python3 that imports torch
PY="${GPU_CHECK_PYTHON:-}"
if [ -z "$PY" ]; then
  PY=python3
  for cand in python3 /usr/bin/python3; do
    if "$cand" -c 'import torch' > /dev/null 2>&1; then PY=$cand; break; fi
  done
fi
SHARED_SRC="${GPU_CHECK_SHARED:-$ROOT/../shared}"
SHARED_FILES=(models/aidreams260K.bin models/aidreams260K.tok512.bin) # what test_gpu and test_gpu.lua read
say() { printf 'gpu_check: %s\n' "$*"; }
die() { say "FAILED: $*"; exit 1; }

# glibc's own libraries and the CUDA driver are the machine's, never carried
skip_lib() {
  case "$(basename "$1")" in
    libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*|libutil.so.*|libcuda.so*|libnvidia*|linux-vdso*) return 0 ;;
  esac
  return 1
}

# ---------------------------------------------------------------- bundle (here)

bundle() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc not found: the bundle needs the CUDA build"
  local f
  for f in "${SHARED_FILES[@]}"; do [ -f "$SHARED_SRC/$f" ] || die "the shared model $SHARED_SRC/$f is absent"; done
  # MP_SHARED_DIR: the tests open shared/models/... relative to their working folder, the unpacked bundle there
  say "building build-gpu/ (Release, -march=x86-64-v3, MP_MPI=OFF, MP_CUDA=ON, CUDA -lineinfo, MP_SHARED_DIR=shared)"
  cmake -S "$ROOT" -B "$ROOT/build-gpu" -DCMAKE_BUILD_TYPE=Release -DMP_MPI=OFF -DMP_CUDA=ON \
        -DCMAKE_C_FLAGS_RELEASE="-O3 -march=x86-64-v3 -DNDEBUG" -DCMAKE_CUDA_FLAGS="-lineinfo" \
        -DMP_SHARED_DIR:STRING=shared > "$ROOT/build-gpu.cmake.log" 2>&1 \
    || { cat "$ROOT/build-gpu.cmake.log"; die "configure"; }
  cmake --build "$ROOT/build-gpu" -j"$JOBS" --target mechprobe test_gpu test_cuda_train_ops test_gpu_train bench_gpu > "$ROOT/build-gpu/gpu_check.build.log" 2>&1 \
    || { tail -30 "$ROOT/build-gpu/gpu_check.build.log"; die "build"; }
  rm -rf "$BDIR" && mkdir -p "$BDIR/gpu_bundle/bin" "$BDIR/gpu_bundle/lib" "$BDIR/gpu_bundle/include" "$BDIR/gpu_bundle/shared/models"
  local B="$BDIR/gpu_bundle"
  cp "$ROOT/build-gpu/mechprobe" "$ROOT/build-gpu/tests/test_gpu" "$ROOT/build-gpu/tests/test_cuda_train_ops" \
     "$ROOT/build-gpu/tests/test_gpu_train" "$ROOT/build-gpu/bench/bench_gpu" "$B/bin/"
  for f in "${SHARED_FILES[@]}"; do cp "$SHARED_SRC/$f" "$B/shared/$f"; done
  # the closure: every library ldd resolves for the binaries, less glibc and the driver
  local lib missing=0 name path bin
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
  local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  { echo "cuda_build=$("$nvcc" --version | grep -o 'release [0-9.]*, V[0-9.]*' | head -1) (cudart linked statically)"
    echo "glibc_needed=${need:-unknown}"
    echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+changes')"
    echo "built=$(date -u +%Y-%m-%dT%H:%MZ)"; } > "$INFO"
  cp "$INFO" "$B/"
  (cd "$BDIR" && tar -cJf gpu_bundle.tar.xz gpu_bundle)
  local size; size=$(stat -c %s "$TAR")
  say "bundle: $(ls "$B/bin" | tr '\n' ' ')+ $(ls "$B/lib" | wc -l) libraries ($(du -sh "$B/lib" | cut -f1) unpacked), headers, shared/${SHARED_FILES[*]}; needs glibc >= ${need#GLIBC_}"
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
  local inc=(-I"$ROOT/base" -I"$ROOT/runtime" -I"$ROOT/hooks" -I"$ROOT/tokenizers" -I"$ROOT/formats" -I"$ROOT/io"
             -I"$ROOT/backends/cuda" -I"$ROOT/tests"
             -I"$ROOT/bench" -I"$B/include" -I"$B/include/hdf5" -I"$CUDA_HOME/include")
  local defs=(-DMP_HAVE_CUDA=1 "-DMP_SHARED_DIR=\"$B/shared\"" "-DMP_TESTDATA=\"$ROOT/tests/data\"")
  say "source build: nvcc $("$NVCC" --version | tail -1)"
  local f
  for f in "$ROOT"/backends/cuda/*.cu; do
    "$NVCC" -O3 -lineinfo -std=c++17 --generate-code=arch=compute_90,code=sm_90 -c "$f" \
      -o "$out/obj/$(basename "${f%.cu}").o" || return 1
  done
  local srcs=("$ROOT"/base/*.c "$ROOT"/runtime/*.c "$ROOT"/hooks/*.c "$ROOT"/tokenizers/*.c "$ROOT"/formats/*.c
              "$ROOT"/backends/cuda/*.c "$ROOT"/io/*.c
              "$ROOT/tests/testutil.c")
  local cflags=(-std=gnu11 -O2 -fopenmp "${inc[@]}" "${defs[@]}") pids=() fail=0 o
  for f in "${srcs[@]}"; do # $JOBS compilers at a time
    o="$out/obj/$(realpath --relative-to="$ROOT" "$f" | tr / _).o"
    gcc "${cflags[@]}" -c "$f" -o "${o%.c.o}.o" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$JOBS" ]; then wait "${pids[0]}" || fail=1; pids=("${pids[@]:1}"); fi
  done
  for f in "${pids[@]}"; do wait "$f" || fail=1; done
  [ "$fail" = 0 ] || return 1
  # shellcheck disable=SC2054 # -Wl,-rpath,DIR is one argument
  local libs=(-L"$B/lib" -Wl,-rpath,"$B/lib" -l:libgsl.so.27 -l:libopenblas.so.0 -l:libpcre2-8.so.0 -l:libjansson.so.4
              -l:libhdf5_serial.so.103 -L"$CUDA_HOME/lib64" -lcudart_static -lgomp -lpthread -ldl -lrt -lm)
  local objs=("$out"/obj/*.o)
  local core=() t; for o in "${objs[@]}"; do case "$o" in */tests_testutil.o) ;; *) core+=("$o") ;; esac; done
  for t in test_gpu test_cuda_train_ops test_gpu_train; do
    gcc "${cflags[@]}" "$ROOT/tests/$t.c" "${core[@]}" "$out/obj/tests_testutil.o" \
        -o "$out/$t" -lstdc++ "${libs[@]}" || return 1
  done
  gcc "${cflags[@]}" -DMP_BENCH_CUDART=1 "$ROOT/bench/bench_gpu.c" "${core[@]}" \
      -o "$out/bench_gpu" -lstdc++ "${libs[@]}" || return 1
  say "source build: $out/test_gpu, test_cuda_train_ops, test_gpu_train, bench_gpu"
}

# ---------------------------------------------------------------- run (there)

# set by run(): where the logs go, the budget, the binaries and their environment
OUTDIR="" SUMMARY="" T0=0 BUDGET=470 TMP="" B="" BIN="" MP_LDP="" CUBLAS_DIRS="" SAN="" TEE_PID=""
MPX=()         # the prefix that runs one of our binaries: its LD_LIBRARY_PATH and variables, line-buffered
RC=0 STEP_S=0  # the last step's exit status and seconds
FAILED=() NOT_STARTED=() DEVICE_RAN=0

# a line to the console, the log and summary.txt
note() { say "$*"; printf '%s\n' "$*" >> "$SUMMARY"; }

# step NAME SECONDS CMD...: CMD under `timeout SECONDS` (cut to what is left of the budget), in
# $STEP_CWD (default: the repository root), its output written as it goes to $OUTDIR/NAME.log;
# sets RC (125: not started, out of budget) and STEP_S, and records the step in summary.txt
step() {
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))) secs=$cap
  [ "$left" -lt "$secs" ] && secs=$left
  if [ "$secs" -lt 5 ]; then
    RC=125 STEP_S=0 NOT_STARTED+=("$name")
    note "step $name: NOT STARTED (${left} s left of the ${BUDGET} s budget)"
    return
  fi
  local t=$SECONDS
  ( cd "${STEP_CWD:-$ROOT}" && exec timeout -k 5 "$secs" "$@" ) > "$OUTDIR/$name.log" 2>&1
  RC=$? STEP_S=$((SECONDS - t))
  local v
  case $RC in 0) v=ok ;; 77) v=SKIP ;; 124|137) v=TIMEOUT ;; *) v=nonzero ;; esac # the next lines judge it
  printf 'step %-26s %-7s exit %3d  %4d s of %4d s\n' "$name" "$v" "$RC" "$STEP_S" "$secs" >> "$SUMMARY"
  [ "$v" = TIMEOUT ] && say "$name: TIMEOUT after $secs s (its log so far: $OUTDIR/$name.log)"
  return 0
}

# the last line of a step's log that is not empty
last_line() { grep -v '^[[:space:]]*$' "$OUTDIR/$1.log" 2>/dev/null | tail -1; }

# the versions: driver, CUDA runtime, PyTorch, cuBLAS (where found: CUDA 13 wheels keep it in
# nvidia/cu13/lib, CUDA 12 wheels in nvidia/cublas/lib, else torch/lib or the toolkit);
# sets CUBLAS_DIRS. python3 runs with the machine's own environment.
versions() {
  say "== versions"
  note "machine: $(uname -m), glibc $(ldd --version | head -1 | grep -o '[0-9.]*$'), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if command -v nvidia-smi >/dev/null; then
    step nvidia_smi 10 sh -c 'nvidia-smi; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sed "s/^/gpu: /"'
    note "driver: $(grep -o 'Driver Version: [0-9.]*' "$OUTDIR/nvidia_smi.log" | head -1 | cut -d' ' -f3) (its CUDA API: $(grep -o 'CUDA Version: [0-9.]*' "$OUTDIR/nvidia_smi.log" | head -1 | cut -d' ' -f3); this build needs CUDA 13, a driver >= 580)"
    grep '^gpu: ' "$OUTDIR/nvidia_smi.log" | while read -r l; do note "$l"; done
  else
    note "driver: none (no nvidia-smi: no NVIDIA driver here)"
  fi
  local nv mnvcc=none
  nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nv" ] && mnvcc=$(timeout 10 "$nv" --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)
  note "CUDA runtime: mechprobe's $(grep -o 'release [0-9.]*, V[0-9.]*' "$INFO" 2>/dev/null || echo '(no bundle info)') (cudart linked statically); this machine's nvcc: ${mnvcc:-none}"
  step versions_python 20 "$PY" - <<'EOF'
import importlib.util, os, sys, ctypes
def ver(*names):
    try:
        import importlib.metadata as md
    except ImportError:
        return None
    for n in names:
        try:
            return f'{n} {md.version(n)}'
        except Exception:
            pass
    return None
dirs = []
try:
    import nvidia
    for p in nvidia.__path__:
        print(f'nvidia_path={p}')
        dirs += [(os.path.join(p, 'cu13', 'lib'), 'CUDA 13 wheel layout, nvidia/cu13/lib'),
                 (os.path.join(p, 'cublas', 'lib'), 'CUDA 12 wheel layout, nvidia/cublas/lib')]
except Exception as e:
    print(f'nvidia_path=none ({type(e).__name__})')
spec = importlib.util.find_spec('torch')
for p in (spec.submodule_search_locations or []) if spec else []:
    dirs.append((os.path.join(p, 'lib'), 'torch/lib'))
first = None
for d, what in dirs:
    for so in ('libcublas.so.13', 'libcublas.so.12'):
        if os.path.exists(os.path.join(d, so)):
            print(f'cublas_dir={d}|{so}|{what}')
            first = first or os.path.join(d, so)
if first:
    try:
        lt = first.replace('libcublas.so', 'libcublasLt.so')
        if os.path.exists(lt):  # its dependency, in the same folder (in case the wheel has no RPATH)
            ctypes.CDLL(lt, mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(first)
        v = [ctypes.c_int() for _ in range(3)]
        ok = all(lib.cublasGetProperty(i, ctypes.byref(v[i])) == 0 for i in range(3))
        print(f'cublas_version={".".join(str(x.value) for x in v) if ok else "?"} (cublasGetProperty of {first})')
    except Exception as e:
        print(f'cublas_version=unknown: {type(e).__name__}: {e}')
print(f'cublas_wheel={ver("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12") or "none"}')
if spec:
    try:
        import torch
        print(f'torch={torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, at {os.path.dirname(torch.__file__)})')
    except Exception as e:
        print(f'torch=not importable: {type(e).__name__}: {e}')
else:
    print('torch=absent')
EOF
  local lg="$OUTDIR/versions_python.log" l d so what
  note "python: $(timeout 5 "$PY" --version 2>&1) ($(command -v "$PY"))"
  local tv; tv=$(grep -m1 '^torch=' "$lg" | cut -d= -f2-)
  note "PyTorch: ${tv:-unknown (the probe exited $RC: $(last_line versions_python))}"
  CUBLAS_DIRS=""
  while IFS='|' read -r d so what; do
    note "cuBLAS: $so found in $d ($what)"
    CUBLAS_DIRS="$CUBLAS_DIRS:$d"
  done < <(grep '^cublas_dir=' "$lg" | cut -d= -f2-)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    for so in libcublas.so.13 libcublas.so.12; do
      [ -e "$d/$so" ] && { note "cuBLAS: $so found in $d (the CUDA toolkit: $(basename "$(readlink -f "$d/$so")"))"
                           CUBLAS_DIRS="$CUBLAS_DIRS:$d"; break; }
    done
  done
  if [ -n "$CUBLAS_DIRS" ]; then
    local cv; cv=$(grep -m1 '^cublas_version=' "$lg" | cut -d= -f2-)
    note "cuBLAS version of the wheels: ${cv:-no wheel has it}; wheel package: $(grep -m1 '^cublas_wheel=' "$lg" | cut -d= -f2-)"
  else
    note "cuBLAS: no libcublas.so.13 or .so.12 in nvidia/cu13/lib, nvidia/cublas/lib, torch/lib or /usr/local/cuda (the device path will say it cannot load cuBLAS)"
  fi
}

# the binaries: the bundle if they start here, else a source build; sets B, BIN, MP_LDP, MPX
binaries() {
  say "== binaries"
  B="$TMP/gpu_bundle" BIN=""
  if [ "${GPU_CHECK_FORCE_SOURCE:-0}" != 1 ] && [ -f "$TAR" ]; then
    step unpack 15 tar -xJf "$TAR" -C "$TMP" || true
    [ "$RC" = 0 ] || die "unpacking $TAR (exit $RC)"
    MP_LDP="$B/lib$CUBLAS_DIRS"
    step start 10 env LD_LIBRARY_PATH="$MP_LDP" "$B/bin/mechprobe" --version
    if [ "$RC" != 0 ]; then # an older glibc: the machine's own C++ runtime (we need only CXXABI_1.3) may do
      say "the bundle does not start: $(head -2 "$OUTDIR/start.log" | tr '\n' ' '); retrying with this machine's libstdc++"
      mkdir -p "$TMP/aside" && mv "$B"/lib/libstdc++.so.* "$B"/lib/libgcc_s.so.* "$TMP/aside/" 2>/dev/null
      step start_again 10 env LD_LIBRARY_PATH="$MP_LDP" "$B/bin/mechprobe" --version
    fi
    if [ "$RC" = 0 ]; then
      BIN="$B/bin"
      note "binaries: the bundle ($(du -sh "$B" | cut -f1) unpacked; $(tr '\n' ' ' < "$B/gpu_bundle.info" 2>/dev/null))"
    else
      say "the bundle does not start here: $(head -3 "$OUTDIR/start_again.log" 2>/dev/null | tr '\n' ' ')"
    fi
  elif [ ! -f "$TAR" ]; then
    say "no bundle at $TAR"
  fi
  if [ -z "$BIN" ]; then
    [ -d "$B/lib" ] || { tar -xJf "$TAR" -C "$TMP" 2>/dev/null || die "no bundle to take headers and libraries from"; }
    MP_LDP="$B/lib$CUBLAS_DIRS"
    step source_build 120 bash "$ROOT/bench/gpu_check.sh" source-build "$TMP/src_build" "$B"
    [ "$RC" = 0 ] || { tail -20 "$OUTDIR/source_build.log"; die "neither the bundle nor a source build runs here"; }
    BIN="$TMP/src_build"
    note "binaries: a source build ($STEP_S s)"
  fi
  # our binaries only: the bundle's libraries and cuBLAS's folder, the probes and the carried shared model
  MPX=(env LD_LIBRARY_PATH="$MP_LDP" MECHPROBE_PROBES="$ROOT/probes" MP_SHARED_DIR="$B/shared" MP_SRC="$ROOT"
       MP_TESTDATA="$ROOT/tests/data" OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}")
  command -v stdbuf >/dev/null && MPX=(stdbuf -oL -eL "${MPX[@]}") # lines reach the logs as they are printed
  if [ -f "$B/shared/models/aidreams260K.bin" ]; then
    note "shared model: $B/shared/models/aidreams260K.bin (carried in the bundle; MP_SHARED_DIR=$B/shared)"
  else
    note "shared model: absent from the bundle (the tests will not compare it)"
  fi
}

# a test step's verdict into the counts (77: SKIP, no device)
TESTS_RAN=0 TESTS_FAILED=0 TESTS_SKIPPED=0
count_test() {
  local name=$1
  case $RC in
    0) TESTS_RAN=$((TESTS_RAN + 1)); DEVICE_RAN=1 ;;
    77) TESTS_SKIPPED=$((TESTS_SKIPPED + 1)) ;;
    125) return ;; # not started: out of budget (step said so)
    *) TESTS_RAN=$((TESTS_RAN + 1)); TESTS_FAILED=$((TESTS_FAILED + 1)); FAILED+=("$name")
       grep -iE 'fail|error|mismatch' "$OUTDIR/$name.log" | head -20 ;;
  esac
  local v; case $RC in 0) v=ok ;; 77) v=SKIP ;; 124|137) v=TIMEOUT ;; *) v=FAILED ;; esac
  note "$name: $v (exit $RC, $STEP_S s): $(last_line "$name")"
}

# the gpu tests, test_gpu once (the CPU is the reference; fp32 within 1e-4 of each tensor's scale)
tests() {
  say "== gpu tests (the CPU is the reference; fp32 within 1e-4 of each tensor's scale)"
  # the working folder holds shared/ (the bundle's tests open shared/models/... relative to it)
  STEP_CWD="$B" step test_gpu 30 "${MPX[@]}" "$BIN/test_gpu"; count_test test_gpu
  TEST_GPU_RC=$RC TEST_GPU_S=$STEP_S
  grep -q 'aidreams260K.bin absent' "$OUTDIR/test_gpu.log" && note "test_gpu: the shared model was NOT compared (absent)"
  STEP_CWD="$B" step test_cuda_train_ops 15 "${MPX[@]}" "$BIN/test_cuda_train_ops"; count_test test_cuda_train_ops
  STEP_CWD="$B" step test_gpu_train 25 "${MPX[@]}" "$BIN/test_gpu_train"; count_test test_gpu_train
  if [ -x "$BIN/mechprobe" ]; then
    STEP_CWD="$B" step test_gpu_lua 30 "${MPX[@]}" "$BIN/mechprobe" "$ROOT/tests/lua/test_gpu.lua"; count_test test_gpu_lua
  else
    note "test_gpu_lua: not run (a source build has no mechprobe: its Lua needs the libraries the bundle carries)"
  fi
  note "gpu tests: $TESTS_RAN ran, $TESTS_FAILED failed, $TESTS_SKIPPED skipped (no device)"
  if [ "$TEST_GPU_RC" = 77 ]; then # no device: the same binaries with the CPU on both sides show they run here
    STEP_CWD="$B" step test_gpu_dry 60 "${MPX[@]}" "$BIN/test_gpu" --dry
    note "test_gpu --dry (CPU against CPU, no device): $(last_line test_gpu_dry) (exit $RC)"
    case $RC in 0|125) ;; *) FAILED+=(test_gpu_dry) ;; esac
    if [ -x "$BIN/mechprobe" ]; then
      STEP_CWD="$B" step test_gpu_lua_dry 60 "${MPX[@]}" "$BIN/mechprobe" "$ROOT/tests/lua/test_gpu.lua" --dry
      note "test_gpu.lua --dry (CPU against CPU, no device): $(last_line test_gpu_lua_dry) (exit $RC)"
      case $RC in 0|125) ;; *) FAILED+=(test_gpu_lua_dry) ;; esac
    fi
  fi
}

# bench_gpu: prefill, capture to a file, copy-stream overlap, training steps
BENCH_RC=77
bench() {
  local T="${GPU_CHECK_T:-2048}" REPS="${GPU_CHECK_REPS:-3}" TT="${GPU_CHECK_TRAIN_T:-1024}" TB="${GPU_CHECK_TRAIN_B:-4}"
  say "== bench_gpu: prefill T=$T, the capture (a file; and to memory at T=${GPU_CHECK_OVERLAP_T:-512}), training B=$TB T=$TT; d768 L12 H12 Llama"
  step bench_gpu 85 "${MPX[@]}" "$BIN/bench_gpu" --save "$TMP/model.bin" --T "$T" --reps "$REPS" --capture-dir "$TMP" \
    --dump "$TMP/ref" --overlap-T "${GPU_CHECK_OVERLAP_T:-512}" --train-T "$TT" --train-B "$TB"
  BENCH_RC=$RC
  sed 's/^/gpu_check: mechprobe: /' "$OUTDIR/bench_gpu.log"
  case $RC in
    77) note "bench_gpu: SKIP ($(grep -m1 '^skip=' "$OUTDIR/bench_gpu.log" | cut -d= -f2-))" ;;
    0) DEVICE_RAN=1; note "bench_gpu: ok ($STEP_S s)" ;;
    125) ;;
    *) DEVICE_RAN=1; FAILED+=(bench_gpu); note "bench_gpu: FAILED or cut (exit $RC, $STEP_S s)" ;;
  esac
  grep -E '^(fp32_tok_s|bf16_tok_s|capture_over_plain|overlap_[a-zA-Z_]*|train_(fp32|bf16)_tok_s|train_flops_per_token)=' \
    "$OUTDIR/bench_gpu.log" >> "$SUMMARY"
}

# PyTorch eager on the same weights and tokens, the GEMM ceilings; then the ratios and MFU
peer() {
  say "== PyTorch eager (peer_torch_gpu.py) on the same weights and tokens"
  if [ "$BENCH_RC" != 0 ] && [ "$BENCH_RC" != 124 ] && [ "$BENCH_RC" != 137 ] || [ ! -s "$TMP/ref.logits.f32" ]; then
    note "pytorch: SKIP (bench_gpu wrote no model and logits: exit $BENCH_RC)"
    return
  fi
  local TT="${GPU_CHECK_TRAIN_T:-1024}" TB="${GPU_CHECK_TRAIN_B:-4}"
  step pytorch 95 "$PY" -u "$ROOT/bench/peer_torch_gpu.py" "$TMP/model.bin" "$TMP/ref" --reps "${GPU_CHECK_REPS:-3}" \
    --train-T "$TT" --train-B "$TB" --budget 80
  sed 's/^/gpu_check: pytorch: /' "$OUTDIR/pytorch.log"
  case $RC in 0|125) ;; 77) note "pytorch: SKIP ($(last_line pytorch))" ;; *) FAILED+=(pytorch); note "pytorch: FAILED or cut (exit $RC)" ;; esac
  grep -E '^(torch=|torch_[a-z0-9_]*tok_s=|fp32_logits_maxdiff=|cublas_[a-z0-9_]*=|torch_compile=)' "$OUTDIR/pytorch.log" >> "$SUMMARY"
  # ratios, and MFU: model FLOPs per second over the GEMM ceiling measured in this run
  awk -F'[= ]' '{v[$1] = $2} END {
    if (v["bf16_tok_s"] && v["torch_bf16_tok_s"]) printf "prefill bf16 mechprobe / torch eager = %.2f\n", v["bf16_tok_s"] / v["torch_bf16_tok_s"]
    if (v["fp32_tok_s"] && v["torch_fp32_tok_s"]) printf "prefill fp32 mechprobe / torch eager = %.2f\n", v["fp32_tok_s"] / v["torch_fp32_tok_s"]
    if (v["train_fp32_tok_s"] && v["torch_train_fp32_tok_s"]) printf "training fp32 mechprobe / torch eager fp32 = %.2f\n", v["train_fp32_tok_s"] / v["torch_train_fp32_tok_s"]
    if (v["train_bf16_tok_s"] && v["torch_train_bf16_autocast_tok_s"]) printf "training bf16 mechprobe / torch eager bf16 autocast = %.2f\n", v["train_bf16_tok_s"] / v["torch_train_bf16_autocast_tok_s"]
    if (v["train_bf16_tok_s"] && v["torch_train_bf16_autocast_compiled_tok_s"]) printf "training bf16 mechprobe / torch.compile bf16 autocast = %.2f\n", v["train_bf16_tok_s"] / v["torch_train_bf16_autocast_compiled_tok_s"]
    if (v["train_fp32_tok_s"] && v["train_flops_per_token"] && v["cublas_fp32_gemm_tflops"]) printf "training MFU fp32 = %.1f%% of the fp32 GEMM ceiling (%s TFLOP/s; 6N + 12LHQT FLOPs a token)\n", 100 * v["train_fp32_tok_s"] * v["train_flops_per_token"] / (v["cublas_fp32_gemm_tflops"] * 1e12), v["cublas_fp32_gemm_tflops"]
    if (v["train_bf16_tok_s"] && v["train_flops_per_token"] && v["cublas_bf16_gemm_tflops"]) printf "training MFU bf16 = %.1f%% of the bf16 GEMM ceiling (%s TFLOP/s; aim 35%%)\n", 100 * v["train_bf16_tok_s"] * v["train_flops_per_token"] / (v["cublas_bf16_gemm_tflops"] * 1e12), v["cublas_bf16_gemm_tflops"]
  }' "$OUTDIR/bench_gpu.log" "$OUTDIR/pytorch.log" | while read -r l; do note "$l"; done
}

# sinks --preset gpu for a few dozen steps: tokens/s of its training (a throughput measurement;
# its verdicts after so few steps mean nothing)
preset() {
  local steps="${GPU_CHECK_PRESET_STEPS:-30}" bt=$((32 * 2048)) # the preset's batch 32 x L 2048
  say "== sinks --preset gpu --device cuda: THROUGHPUT only ($steps steps of 32 x 2048 tokens, fp32, d512 L8; not a verdict run)"
  if [ ! -x "$BIN/mechprobe" ]; then note "preset throughput: not run (a source build has no mechprobe)"; return; fi
  step preset_throughput 55 "${MPX[@]}" "$BIN/mechprobe" sinks --preset gpu --device cuda --seeds 1 --steps "$steps" \
    --checkpoints 1 --boot 20 --corpus "$ROOT/docs/API.md" --out "$TMP/sinks_gpu"
  [ "$RC" = 125 ] && return
  grep -E '^step [0-9]+/' "$OUTDIR/preset_throughput.log" | tail -3 | sed 's/^/gpu_check: preset: /'
  if grep -q 'no CUDA device' "$OUTDIR/preset_throughput.log"; then
    note "preset throughput: SKIP ($(grep -m1 'no CUDA device' "$OUTDIR/preset_throughput.log"))"
    return
  fi
  # "step i/N  loss x  R tok/s": R is over steps 1..i, so step i ended at i*bt/R s; the steady rate leaves step 1 out
  local r
  r=$(awk -v bt="$bt" '/^step [0-9]+\/[0-9]+ .* tok\/s/ { split($2, a, "/"); i = a[1] + 0
        for (k = 1; k < NF; k++) if ($(k + 1) == "tok/s") r = $k + 0
        if (r > 0) { t = i * bt / r; if (!n++) { i1 = i; t1 = t }; i2 = i; t2 = t; r2 = r } }
      END { if (!n) exit 1
            printf "%d steps in %.1f s, %.0f tok/s over all of them", i2, t2, r2
            if (i2 > i1 && t2 > t1) printf ", %.0f tok/s over steps %d-%d (after the first)", (i2 - i1) * bt / (t2 - t1), i1 + 1, i2 }' \
      "$OUTDIR/preset_throughput.log") && DEVICE_RAN=1
  if [ -n "$r" ]; then
    note "preset throughput (sinks --preset gpu training, fp32, 65536 tokens a step): $r; exit $RC (throughput only, no verdicts)"
  else
    FAILED+=(preset_throughput)
    note "preset throughput: no training step logged (exit $RC): $(last_line preset_throughput)"
  fi
}

# compute-sanitizer: where it is (PATH, the CUDA toolkit, the pip nvidia wheels), or nothing
find_sanitizer() {
  local c p
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda*/bin/compute-sanitizer \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  for p in $(grep '^nvidia_path=/' "$OUTDIR/versions_python.log" 2>/dev/null | cut -d= -f2-); do
    c=$(find "$p" -maxdepth 4 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1)
    [ -n "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

# sanitize_one NAME SECONDS TOOL TEST: TEST under `compute-sanitizer --tool TOOL` (our binary gets its
# environment through env; the sanitizer itself keeps the machine's), in the unpacked bundle
sanitize_one() {
  STEP_CWD="$B" step "$1" "$2" "$SAN" --target-processes all --error-exitcode 3 --tool "$3" \
    env LD_LIBRARY_PATH="$MP_LDP" MP_SHARED_DIR="$B/shared" OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" "$BIN/$4"
  local what; what=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$OUTDIR/$1.log" | tail -1)
  case $RC in
    125) ;;
    0) DEVICE_RAN=1; note "$1: clean (${what:-no summary line}; $STEP_S s)" ;;
    77) note "$1: SKIP (no device: $(grep -m1 '^SKIP' "$OUTDIR/$1.log" || last_line "$1"))" ;;
    124|137) note "$1: TIMEOUT after $STEP_S s (the sanitizer's slowdown; not a finding): ${what:-}" ;;
    3) DEVICE_RAN=1; FAILED+=("$1"); note "$1: ERRORS (${what:-}): see $1.log"
       grep -m5 -E '^=+ +(Invalid|Race|Error|Program hit|.*hazard)' "$OUTDIR/$1.log" ;;
    *) DEVICE_RAN=1; FAILED+=("$1"); note "$1: the test failed under the sanitizer (exit $RC; ${what:-})" ;;
  esac
}

# memcheck and racecheck on the training kernels' test, memcheck on test_gpu when it was quick
sanitizers() {
  say "== compute-sanitizer (the CUDA code is built with -lineinfo)"
  if ! SAN=$(find_sanitizer); then
    note "compute-sanitizer: SKIP (not on PATH, in /usr/local/cuda*/ or in the pip nvidia wheels)"
    return
  fi
  note "compute-sanitizer: $SAN ($(timeout 10 "$SAN" --version 2>/dev/null | grep -o 'Version [0-9.]*' | head -1))"
  sanitize_one memcheck_cuda_train_ops 30 memcheck test_cuda_train_ops
  sanitize_one racecheck_cuda_train_ops 25 racecheck test_cuda_train_ops
  if [ "${TEST_GPU_RC:-1}" = 0 ] && [ "${TEST_GPU_S:-99}" -le 10 ]; then
    sanitize_one memcheck_test_gpu 20 memcheck test_gpu
  else
    note "memcheck_test_gpu: not run (test_gpu exit ${TEST_GPU_RC:-?} in ${TEST_GPU_S:-?} s: run only when it passed within 10 s)"
  fi
}

finish() {
  note "done in $((SECONDS - T0)) s (budget $BUDGET s); failed: ${FAILED[*]:-none}; not started: ${NOT_STARTED[*]:-none}; a device step ran: $([ "$DEVICE_RAN" = 1 ] && echo yes || echo no)"
  say "logs: $OUTDIR (summary.txt, gpu_check.log, one .log per step)"
}

run() {
  T0=$SECONDS BUDGET="${GPU_CHECK_BUDGET:-470}"
  OUTDIR="${OUT:-$ROOT/out/gpu_check}"
  [ -n "${OUT:-}" ] || rm -rf "$OUTDIR"
  mkdir -p "$OUTDIR" || die "cannot make $OUTDIR"
  SUMMARY="$OUTDIR/summary.txt"
  : > "$SUMMARY"
  exec > >(tee -a "$OUTDIR/gpu_check.log") 2>&1
  TEE_PID=$!
  TMP="${GPU_CHECK_TMP:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}"
  mkdir -p "$TMP"
  trap 'rm -rf "$TMP"' EXIT
  say "gpu_check run$([ "$DRY" = 1 ] && echo ' --dry'): logs to $OUTDIR as they are written"
  versions
  binaries
  tests
  bench
  peer
  preset
  sanitizers
  finish
  local rc=0
  [ ${#FAILED[@]} = 0 ] || rc=1
  if [ "$rc" = 0 ] && [ ${#NOT_STARTED[@]} != 0 ]; then
    say "steps not started (out of the ${BUDGET} s budget): ${NOT_STARTED[*]}: exit 4"
    rc=4
  fi
  if [ "$rc" = 0 ] && [ "$DEVICE_RAN" = 0 ] && [ "$DRY" = 0 ]; then
    say "no step reached a device (every device step SKIPped): exit 3 (--dry expects this)"
    rc=3
  fi
  exec >&- 2>&-
  wait "$TEE_PID" 2>/dev/null
  return $rc
}

case "$MODE" in
  bundle) bundle ;;
  run) run ;;
  check)
    bundle
    say "== check: run --dry, up to the device on this machine"
    DRY=1 run
    ;;
  source-build) build_from_source "$2" "$3" ;; # internal: the fallback build as one timed step of run
  *) echo "usage: bash bench/gpu_check.sh bundle|run [--dry]|check" >&2; exit 2 ;;
esac
