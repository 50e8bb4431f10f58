# test_dp.sh — data-parallel training: 2 ranks x batch B equal 1 process x
# batch 2B (test_dp.lua), for m:train_step and m:train.
source "$(dirname "$0")/lib.sh"
mpi 2 "$MP" "$HERE/test_dp.lua"
