# test_capture_serial.sh MECHPROBE — the dataset capture without mpirun (any
# build): capture --text-file against run_with_cache per prompt
# (capture_check.lua), and a bad line of --tokens-file: an error naming the file
# and line, exit non-zero, no output file.
set -u
MP=$1
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/mp_cap.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$OUT"
"$MP" -e 'mp.model.new{d_model = 32, n_layer = 2, n_head = 4, n_kv_head = 2, d_mlp = 64, vocab = 257, ctx = 64,
                       seed = 3, tokenizer = "bytes"}:save("tiny.h5")' || fail "making the model"
printf 'Hello world\nThe cat sat on the mat.\nA\nmechanistic interpretability of transformers\nx y z\n' > prompts.txt
"$MP" capture --model tiny.h5 --text-file prompts.txt --hooks 'hook_embed,blocks.*.attn.hook_pattern' --logits \
  --compress 4 --out serial.h5 || fail "serial capture"
"$MP" "$HERE/capture_check.lua" tiny.h5 prompts.txt serial.h5 || fail "check"
printf '1,2,3\n4,x,5\n' > bad.txt
if "$MP" capture --model tiny.h5 --tokens-file bad.txt --out bad.h5 2> bad.err; then fail "a bad line was accepted"; fi
grep -q "bad.txt:2: 'x' is not a token id" bad.err || { cat bad.err; fail "no message naming the line"; }
ls bad.h5* > /dev/null 2>&1 && fail "output left behind"
echo "test_capture_serial: passed"
