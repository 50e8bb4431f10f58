# test_sweep.sh — mp.mpi.sweep and the collectives of mp.mpi (test_sweep.lua).
source "$(dirname "$0")/lib.sh"
mpi 2 "$MP" "$HERE/test_sweep.lua"
