# test_probe_sweep.sh — mirror_descent --quick under mpirun -np 2 spreads its
# models over the ranks (mp.mpi.sweep) and prints one report and writes one
# HDF5 file equal to the serial run's (one thread per process, same seeds),
# apart from wall-clock seconds and the output paths.
source "$(dirname "$0")/lib.sh"
cd "$OUT"
"$MP" mirror_descent --quick --out serial > serial.log 2>&1 || { cat serial.log; fail "serial run"; }
mpi 2 "$MP" mirror_descent --quick --out split > split.log 2>&1 || { cat split.log; fail "2-rank run"; }
norm() { # the report without paths, timings and the models' "train s" column
  grep -v -E '^(HDF5|figure|time|verdicts):' "$1" | awk '/^(standard|attn-only)-L[0-9]+-/ { $5 = "-" } { print }'
}
[ "$(grep -c '^VERDICT' split/report.txt)" -ge 5 ] || fail "the 2-rank report has no verdicts"
[ "$(grep -c '^== mechprobe mirror_descent' split.log)" -eq 1 ] || fail "the report was not printed exactly once"
diff <(norm serial/report.txt) <(norm split/report.txt) || fail "reports differ"
"$MP" "$HERE/h5same.lua" serial/mirror.h5 split/mirror.h5 seconds || fail "HDF5 files differ"
echo "test_mpi_probe_sweep: passed"
