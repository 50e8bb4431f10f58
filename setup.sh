#!/usr/bin/env bash
# setup.sh — the two commands of the README:
#   ./setup.sh          install what is missing (Debian packages), build, run the quickstart
#   ./setup.sh test     install what is missing, build if needed, run the whole test suite (ctest)
# Also: ./setup.sh build | bench | asan (the suite under AddressSanitizer + UBSan)
#       | serial (the suite but its `slow` tests on a build without MPI: serial HDF5,
#         the capture writer thread).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
JOBS=$(nproc 2>/dev/null || echo 2)

# Debian packages the build and tests need (the benchmarks add PyTorch etc.);
# fortunes is text (2 MB) for the rope_id probe's byte-level corpus; Open MPI and
# the HDF5 built against it for scale-out (mpirun; CMake's MP_MPI=AUTO finds them).
# python3-dev and python3-numpy build the Python module (`import mechprobe`).
PKGS="build-essential cmake pkg-config libgsl-dev libhdf5-dev hdf5-tools libcairo2-dev libpango1.0-dev liblua5.4-dev libopenblas-openmp-dev libpcre2-dev libjansson-dev zlib1g-dev fortunes openmpi-bin libopenmpi-dev libhdf5-openmpi-dev python3-dev python3-numpy"
BENCH_PKGS="python3-torch python3-numpy python3-h5py python3-matplotlib bc"
# The test modes add a headless browser for the `mechprobe view` pages
# (tests/view.cmake: Debian's chromium, driven by a python3 script), and what the
# Python module's tests use (pytest; h5py and matplotlib in the examples).
TEST_PKGS="chromium python3 python3-pytest python3-h5py python3-matplotlib"

install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing Debian packages: ${missing[*]}"
  local SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Makes `import mechprobe` work for Debian's python3 (the one the module is
# built against): a .pth file naming DIR/python in its site directory
# (/usr/local/lib/python3.X/dist-packages as root, the user site otherwise).
install_python() { # install_python DIR
  local dir=$1 py=/usr/bin/python3
  ls "$dir"/python/mechprobe/_core*.so >/dev/null 2>&1 || return 0
  local site
  if [ "$(id -u)" -eq 0 ]; then
    site=$($py -c 'import sys; print("/usr/local/lib/python%d.%d/dist-packages" % sys.version_info[:2])')
  else
    site=$($py -m site --user-site)
  fi
  mkdir -p "$site"
  echo "$ROOT/$dir/python" > "$site/mechprobe.pth"
  $py -c 'import mechprobe' && echo "setup: $py can import mechprobe ($site/mechprobe.pth -> $ROOT/$dir/python)"
}

build() { # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" > "$dir.cmake.log" 2>&1 || { cat "$dir.cmake.log"; exit 1; }
  cmake --build "$dir" -j"$JOBS"
}

mode=${1:-run}
case "$mode" in
  run)
    install_missing $PKGS
    mkdir -p build && build build
    install_python build
    ./build/mechprobe quickstart --out out/quickstart
    ;;
  build)
    install_missing $PKGS
    mkdir -p build && build build
    install_python build
    ;;
  test)
    install_missing $PKGS $TEST_PKGS
    mkdir -p build && build build
    install_python build
    ctest --test-dir build --output-on-failure -j"$JOBS" "${@:2}"
    ;;
  asan)
    install_missing $PKGS $TEST_PKGS
    # -O1: the sanitizers' recommended level (checks unchanged; about 0.65x the -O0 suite's time here)
    mkdir -p build-asan && build build-asan -DCMAKE_BUILD_TYPE=Debug -DMP_SANITIZE=ON \
      -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j"$JOBS" "${@:2}"
    ;;
  serial)
    install_missing $PKGS $TEST_PKGS
    mkdir -p build-serial && build build-serial -DMP_MPI=OFF
    # the `slow` tests (probe presets on the CUDA emulator) touch neither MPI nor the
    # HDF5 build; they run in the other two modes (CI's time limit)
    ctest --test-dir build-serial --output-on-failure -j"$JOBS" -LE slow "${@:2}"
    ;;
  bench)
    install_missing $PKGS $BENCH_PKGS
    mkdir -p build && build build
    bash bench/run.sh build                                        # forward: sgemm ceiling, PyTorch, capture
    bash bench/train.sh build                                      # training: PyTorch
    /usr/bin/python3 bench/peer_analyze.py --bench build/bench/bench_analyze   # PCA/scatter: numpy, matplotlib
    ;;
  *)
    echo "usage: ./setup.sh [run|test|build|asan|serial|bench]" >&2
    exit 2
    ;;
esac
