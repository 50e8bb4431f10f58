#!/bin/sh
# enospc.sh — a full disk and a file-size limit while writing HDF5 files
# (issue 17, item 3). A Lua script pcall()s a checkpoint save, a run-file
# capture, a dataset capture (m:capture_prompts, the writer of capture
# --text-file/--tokens-file) and an mp.h5 write + close that cannot fit (the mp.h5 file is then
# removed by the script, it is the user's), prints the errors and exits normally: mechprobe must
# exit 0 (never SIGSEGV at exit, status 139), the errors must say "no space
# left on device" / "file too large" in words (no raw HDF5 driver text), and
# no file (final or temporary) may be left behind.
#   enospc.sh MECHPROBE TESTDATA
# Case 1 mounts a 16 KiB tmpfs (skipped with a message where mounting is not
# allowed); case 2 sets a soft `ulimit -f` with SIGXFSZ ignored.
exe=$1
data=$2
work=$(mktemp -d /tmp/mp_enospc.XXXXXX) || exit 1
fail=0
ran=0
cleanup() { umount "$work/mnt" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

cat > "$work/full.lua" <<LUA
local out = arg[1]
local m = mp.load("$data/train_ref_a.h5")
local ok, err = pcall(function() m:save(out .. "/model.h5") end)
print("save:", ok, err)
ok, err = pcall(function()
  m:capture({{1, 2, 3, 4, 5, 6, 7, 8}}, {out = out .. "/run.h5", hooks = "*", logits = true})
end)
print("capture:", ok, err)
ok, err = pcall(function()
  m:capture_prompts({{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11}}, {out = out .. "/ds.h5", hooks = "*", logits = true})
end)
print("dscapture:", ok, err)
ok, err = pcall(function()
  local f = mp.h5.open(out .. "/plain.h5", "w")
  local wok, werr = pcall(function() f:write("big", mp.zeros{64, 1024}) end)
  local cok, cerr = pcall(function() f:close() end)
  error((not wok and werr) or (not cok and cerr) or "wrote 256 kB?", 0)
end)
print("h5:", ok, err)
os.remove(out .. "/plain.h5")
LUA

check() { # label, expected words, output dir
  label=$1; words=$2; dir=$3
  if [ "$status" -ne 0 ]; then echo "FAIL $label: exit status $status (expected 0)"; cat "$work/err.txt"; fail=1; fi
  for what in save capture dscapture h5; do
    if ! grep -q "^$what:	false	.*$words" "$work/out.txt"; then
      echo "FAIL $label: $what did not fail with '$words'"; fail=1
    fi
  done
  if grep -q "errno = \|HDF5-DIAG" "$work/out.txt" "$work/err.txt"; then
    echo "FAIL $label: raw HDF5 error text"; fail=1
  fi
  if [ -n "$(ls -A "$dir")" ]; then echo "FAIL $label: files left behind: $(ls -A "$dir")"; fail=1; fi
  echo "--- $label (exit status $status)"; cat "$work/out.txt"
}

# 1. a full tmpfs: ENOSPC
mkdir -p "$work/mnt"
if mount -t tmpfs -o size=16k tmpfs "$work/mnt" 2>/dev/null; then
  ran=1
  "$exe" "$work/full.lua" "$work/mnt" >"$work/out.txt" 2>"$work/err.txt"
  status=$?
  check "full tmpfs" "no space left on device" "$work/mnt"
  umount "$work/mnt"
else
  echo "SKIP full tmpfs: cannot mount a tmpfs here (not root?)"
fi

# 2. a soft file-size limit (SIGXFSZ ignored, so write() fails with EFBIG)
mkdir -p "$work/lim"
(trap '' XFSZ; ulimit -S -f 8 && exec "$exe" "$work/full.lua" "$work/lim") >"$work/out.txt" 2>"$work/err.txt"
status=$?
ran=1
check "ulimit -S -f 8" "file too large" "$work/lim"

[ "$ran" -eq 1 ] || exit 77
exit $fail
