#!/bin/sh
# bench/view_bench.sh — size and speed of `mechprobe view` pages on a large
# capture (docs/VIEW.md "Limits"): writes a synthetic run file of L layers x H
# heads x T tokens (bench/bench_view_gen.c), makes its page, and loads it in
# headless Chromium with #bench=N: the page switches through N heads and
# writes its times (performance.now()) into the DOM, which this script prints
# (read over the DevTools protocol by bench/view_cdp.py).
#
#   bash bench/view_bench.sh [BUILD_DIR] [L] [H] [T] [Dh] [mixed|uniform]
#   (default: build 16 32 1024 64 mixed; needs chromium and ~2.5 GB in $TMPDIR)
set -eu
build=${1:-build}; L=${2:-16}; H=${3:-32}; T=${4:-1024}; DH=${5:-64}; KIND=${6:-mixed}
mp=$build/mechprobe; gen=$build/bench/bench_view_gen
[ -x "$mp" ] && [ -x "$gen" ] || { echo "view_bench: build first (cmake --build $build)" >&2; exit 2; }
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "view_bench: no chromium (apt-get install chromium)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
secs() { echo "$1 $2" | awk '{printf "%.1f", $2 - $1}'; }

t0=$(now); "$gen" "$work/run.h5" "$L" "$H" "$T" "$DH" "$KIND" 2>/dev/null; t1=$(now)
echo "run file: ${L} layers x ${H} heads x ${T} tokens ($KIND rows), $(du -h "$work/run.h5" | cut -f1), written in $(secs "$t0" "$t1") s"
for geo in "" --no-geometry; do
  t0=$(now); "$mp" view "$work/run.h5" --out "$work/page$geo.html" --ids $geo > /dev/null; t1=$(now)
  echo "page ${geo:-(with Q/K geometry)}: $(du -h "$work/page$geo.html" | cut -f1) ($(stat -c %s "$work/page$geo.html") bytes), written in $(secs "$t0" "$t1") s"
done

# The page is driven over the DevTools protocol by bench/view_cdp.py: opened,
# waited for until its script has finished, its #perf times printed.
here=$(dirname "$0")
load() { rm -rf "$work/prof"; /usr/bin/python3 "$here/view_cdp.py" "$chrome" "file://$work/page.html#$1" "$work/prof"; }
echo "open the attention view, then switch through 32 heads (ms; readyMs: from navigation start, parsing included;"
echo "scriptMs: the page's script until the first head is drawn; benchMedianMs/benchMaxMs: one head switch):"
load "view=attn&bench=32"
echo "open the Q/K geometry view of the last layer's last head:"
load "view=geom&glayer=$((L - 1))&ghead=$((H - 1))"
