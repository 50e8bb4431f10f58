#!/bin/sh
# enospc_outputs.sh — t:save and the dataset capture on a full disk, with the
# harness of enospc.sh (a small tmpfs, 64 KiB, skipped when it cannot
# be mounted, and a soft `ulimit -f` with SIGXFSZ ignored):
#  - t:save of a tensor that cannot fit into an existing HDF5 file fails with
#    the words of the error, and leaves that file byte for byte as it was;
#    into a new file it leaves nothing; never a temporary;
#  - a dataset capture that meets a full disk (tmpfs of 4 KiB to 128 KiB: a
#    chunk, a dataset's metadata or the final flush fails) fails with those
#    words, exits normally (no SIGSEGV at exit), leaves no file and, under
#    LeakSanitizer (liblsan preloaded where installed), leaks nothing.
#   enospc_outputs.sh MECHPROBE TESTDATA
exe=$1
data=$2
work=$(mktemp -d /tmp/mp_enospc2.XXXXXX) || exit 1
fail=0
ran=0
cleanup() { umount "$work/mnt" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

cat > "$work/save.lua" <<'LUA'
local out = arg[1]
local ok, err = pcall(function() mp.zeros{64, 1024}:save(out .. "/keep.h5", "big") end)
print("save_old:", ok, err)
ok, err = pcall(function() mp.zeros{64, 1024}:save(out .. "/new.h5", "big") end)
print("save_new:", ok, err)
LUA
cat > "$work/mk.lua" <<'LUA'
mp.tensor{1, 2, 3}:save(arg[1], "small")
LUA
cat > "$work/ds.lua" <<LUA
local out = arg[1]
local m = mp.load("$data/train_ref_a.h5")
local ok, err = pcall(function()
  m:capture_prompts({{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11}}, {out = out .. "/ds.h5", hooks = "*", logits = true})
end)
print("dscapture:", ok, err)
LUA

check() { # label, expected words, output dir
  label=$1; words=$2; d=$3
  if [ "$status" -ne 0 ]; then echo "FAIL $label: exit status $status (expected 0)"; cat "$work/err.txt"; fail=1; fi
  for what in save_old save_new; do
    if ! grep -q "^$what:	false	.*$words" "$work/out.txt"; then
      echo "FAIL $label: $what did not fail with '$words'"; fail=1
    fi
  done
  if ! cmp -s "$work/keep.h5" "$d/keep.h5"; then echo "FAIL $label: keep.h5 was changed by the failed save"; fail=1; fi
  if [ "$(ls -A "$d")" != "keep.h5" ]; then echo "FAIL $label: files left behind: $(ls -A "$d")"; fail=1; fi
  echo "--- $label (exit status $status)"; cat "$work/out.txt"
}

"$exe" "$work/mk.lua" "$work/keep.h5" || { echo "FAIL: cannot make keep.h5"; exit 1; }

# 1. a full tmpfs: ENOSPC
mkdir -p "$work/mnt"
if mount -t tmpfs -o size=64k tmpfs "$work/mnt" 2>/dev/null; then
  ran=1
  cp "$work/keep.h5" "$work/mnt/keep.h5"
  "$exe" "$work/save.lua" "$work/mnt" >"$work/out.txt" 2>"$work/err.txt"
  status=$?
  check "full tmpfs" "no space left on device" "$work/mnt"
  umount "$work/mnt"
  # the dataset capture on tmpfs of several sizes (the disk fills at
  # different steps: a chunk, a dataset's metadata, the final flush), under
  # LeakSanitizer where liblsan is installed: it used to die of SIGSEGV at
  # exit (status 139; a file whose close failed, freed by HDF5 but kept as an
  # id) and to leak libhdf5's chunk buffers
  # (an ASan build has LeakSanitizer built in: preloading liblsan there stops it at start)
  lsan=""
  if ldd "$exe" 2>/dev/null | grep -q libasan; then
    echo "note: an AddressSanitizer build: its own LeakSanitizer checks the capture"
  else
    lsan=$(ls /usr/lib/*/liblsan.so.0 /usr/lib/liblsan.so.0 2>/dev/null | head -n 1)
    [ -n "$lsan" ] || echo "note: no liblsan here: the capture runs without LeakSanitizer"
  fi
  for size in 4k 8k 12k 16k 32k 64k 128k; do
    mount -t tmpfs -o size=$size tmpfs "$work/mnt" || { echo "FAIL: cannot mount $size"; fail=1; continue; }
    LD_PRELOAD=$lsan LSAN_OPTIONS=exitcode=23:fast_unwind_on_malloc=0:max_leaks=20 \
      "$exe" "$work/ds.lua" "$work/mnt" >"$work/out.txt" 2>"$work/err.txt"
    status=$?
    echo "--- dataset capture, tmpfs $size (exit status $status)"; cat "$work/out.txt"
    if [ "$status" -ne 0 ]; then echo "FAIL dscapture $size: exit status $status (expected 0)"; head -40 "$work/err.txt"; fail=1; fi
    if ! grep -q "^dscapture:	false	.*no space left on device" "$work/out.txt"; then
      echo "FAIL dscapture $size: did not fail with 'no space left on device'"; fail=1
    fi
    if grep -q "errno = \|HDF5-DIAG" "$work/out.txt" "$work/err.txt"; then echo "FAIL dscapture $size: raw HDF5 error text"; fail=1; fi
    if [ -n "$(ls -A "$work/mnt")" ]; then echo "FAIL dscapture $size: files left behind: $(ls -A "$work/mnt")"; fail=1; fi
    umount "$work/mnt"
  done
else
  echo "SKIP full tmpfs: cannot mount a tmpfs here (not root?)"
fi

# 2. a soft file-size limit (SIGXFSZ ignored, so write() fails with EFBIG)
mkdir -p "$work/lim"
cp "$work/keep.h5" "$work/lim/keep.h5"
(trap '' XFSZ; ulimit -S -f 64 && exec "$exe" "$work/save.lua" "$work/lim") >"$work/out.txt" 2>"$work/err.txt"
status=$?
ran=1
check "ulimit -S -f 64" "file too large" "$work/lim"

[ "$ran" -eq 1 ] || exit 77
exit $fail
