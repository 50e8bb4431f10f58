# test_faults.sh — one rank failing ends the job on every rank with a message
# naming the rank and the cause, a non-zero status and no file under the final
# name: a bad prompt on rank 1 (before the file exists), a hook error on rank 1
# while the file is written (the temporary is removed too), rank 1 killed
# during a capture, and rank 1 killed during training with checkpoints (the
# checkpoint on disk is a whole one: it loads, with the steps of one save).
source "$(dirname "$0")/lib.sh"
cd "$OUT"
"$MP" -e 'mp.model.new{d_model = 32, n_layer = 2, n_head = 4, d_mlp = 64, vocab = 257, ctx = 64, seed = 3,
                       tokenizer = "bytes"}:save("tiny.h5")' || fail "making the model"
no_output() { # no final file and (unless $2) no temporary
  [ -e "$1" ] && fail "$1 exists after a failed job"
  if [ -z "${2:-}" ] && ls "$1".tmp.* > /dev/null 2>&1; then fail "a temporary of $1 was left: $(ls "$1".tmp.*)"; fi
  return 0
}

# 1. a bad prompt: line 4 belongs to rank 1 (lines 3-4 of 4)
printf '1,2,3\n4,5\n6,7,8,9\n10,9999,11\n' > tokens.txt
if mpi 2 "$MP" capture --model tiny.h5 --tokens-file tokens.txt --out bad.h5 > bad.log 2>&1; then fail "bad prompt: exit 0"; fi
grep -q "rank 1 of 2: capture: tokens.txt:4: token id 9999 is outside the vocabulary (0..256)" bad.log ||
  { cat bad.log; fail "bad prompt: no message naming rank 1 and the cause"; }
no_output bad.h5

# 2. an error on rank 1 while the file is being written
if mpi 2 "$MP" "$HERE/fault_capture.lua" tiny.h5 err.h5 error > err.log 2>&1; then fail "hook error: exit 0"; fi
grep -q "rank 1 of 2: .*rank 1 gives up on its second prompt" err.log || { cat err.log; fail "hook error: no message from rank 1"; }
grep -q "rank 0 of 2: .*err.h5: not written: rank 1 of 2 failed" err.log || { cat err.log; fail "hook error: rank 0 did not say why it stopped"; }
grep -q "capture finished" err.log && fail "hook error: a rank carried on"
no_output err.h5

# 3. rank 1 killed during a capture
if mpi 2 "$MP" "$HERE/fault_capture.lua" tiny.h5 kill.h5 kill > kill.log 2>&1; then fail "killed rank: exit 0"; fi
grep -q "rank 1 .*signal 9" kill.log || { cat kill.log; fail "killed rank: no message naming rank 1 and the signal"; }
no_output kill.h5 may-leave-temporary

# 4. rank 1 killed during data-parallel training with a checkpoint each step
if mpi 2 "$MP" "$HERE/fault_train.lua" ck.h5 > train.log 2>&1; then fail "killed trainer: exit 0"; fi
grep -q "rank 1 .*signal 9" train.log || { cat train.log; fail "killed trainer: no message naming rank 1"; }
# rank 0 wrote step 2's checkpoint and may have been killed while writing step 3's:
# the file must be one of the two, whole (it loads; its optimizer step and loss
# curve agree)
"$MP" -e 'local m = mp.load("ck.h5"); local f <close> = mp.h5.open("ck.h5")
          local n, step = #f:read_int("train/step"), f:attrs("optim").step
          assert((n == 2 or n == 3) and step == n, ("checkpoint with %d logged steps, optimizer step %s"):format(n, step))
          print("checkpoint after the kill: whole, step " .. n)' || fail "the checkpoint left by the killed job is not a whole one"
echo "test_mpi_faults: passed"
