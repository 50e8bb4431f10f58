# test_create_fault.sh — review finding 2: a failure on one rank while the
# dataset capture creates its file (rank 0's write of /lengths, a dataset on
# rank 1) must end the job with an error naming the rank and the cause on every
# rank, no output and no temporary; it used to hang (the failed rank went into
# the collective close while the others went on). The failure is injected with
# the test hook MP_TEST_H5CAP_FAIL="<rank>:<step>" (built with MP_TEST_HOOKS).
source "$(dirname "$0")/lib.sh"
cd "$OUT"
"$MP" -e 'mp.model.new{d_model = 32, n_layer = 2, n_head = 4, d_mlp = 64, vocab = 257, ctx = 64, seed = 3,
                       tokenizer = "bytes"}:save("tiny.h5")' || fail "making the model"
printf '1,2,3\n4,5\n6,7,8,9\n10,11\n' > tokens.txt
n=0
for inj in "0:write:/lengths" "1:/tokens" "1:/acts/blocks.1.hook_resid_post"; do
  n=$((n + 1))
  rank=${inj%%:*}
  MP_TEST_H5CAP_FAIL=$inj timeout 60 mpirun --oversubscribe --mca btl self,vader -np 2 -x MP_TEST_H5CAP_FAIL \
    "$MP" capture --model tiny.h5 --tokens-file tokens.txt --hooks '*' --out o$n.h5 > o$n.log 2>&1
  rc=$?
  [ $rc -eq 124 ] && { cat o$n.log; fail "$inj: the job hung (killed by timeout after 60 s)"; }
  [ $rc -eq 0 ] && grep -q "wrote o$n.h5" o$n.log && ! grep -q injected o$n.log &&
    { echo "SKIP: mechprobe is built without MP_TEST_HOOKS"; exit 77; }
  [ $rc -ne 0 ] || { cat o$n.log; fail "$inj: exit 0"; }
  grep -q "rank $rank of 2: .*o$n.h5: .*injected failure" o$n.log || { cat o$n.log; fail "$inj: no message from rank $rank"; }
  other=$((1 - rank))
  grep -q "rank $other of 2: .*o$n.h5: not written: rank $rank of 2 failed" o$n.log ||
    { cat o$n.log; fail "$inj: rank $other did not say why it stopped"; }
  [ -e o$n.h5 ] && fail "$inj: o$n.h5 exists after a failed job"
  ls o$n.h5.tmp.* > /dev/null 2>&1 && fail "$inj: a temporary was left: $(ls o$n.h5.tmp.*)"
  echo "$inj: ended with status $rc, both ranks reporting, nothing left"
done
echo "test_mpi_create_fault: passed"
