# test_capture.sh — a dataset capture split over 2 ranks equals the serial one
# dataset by dataset, and the serial one matches run_with_cache per prompt
# (capture_check.lua); --compress with 2 ranks is refused with no file left.
source "$(dirname "$0")/lib.sh"
cd "$OUT"
"$MP" -e 'mp.model.new{d_model = 32, n_layer = 2, n_head = 4, n_kv_head = 2, d_mlp = 64, vocab = 257, ctx = 64,
                       seed = 3, tokenizer = "bytes"}:save("tiny.h5")' || fail "making the model"
printf 'Hello world\nThe cat sat on the mat.\nA\nmechanistic interpretability of transformers\nx y z\nsplit across ranks\nend\n' > prompts.txt
HOOKS='hook_embed,blocks.*.attn.hook_pattern,blocks.*.attn.hook_attn_scores,blocks.1.hook_resid_post'
"$MP" capture --model tiny.h5 --text-file prompts.txt --hooks "$HOOKS" --logits --out serial.h5 || fail "serial capture"
mpi 2 "$MP" capture --model tiny.h5 --text-file prompts.txt --hooks "$HOOKS" --logits --out split.h5 || fail "2-rank capture"
"$MP" "$HERE/capture_check.lua" tiny.h5 prompts.txt serial.h5 split.h5 || fail "comparison"
if mpi 2 "$MP" capture --model tiny.h5 --text-file prompts.txt --compress 4 --out c.h5 2> c.err; then fail "--compress with 2 ranks was accepted"; fi
grep -q "h5repack" c.err || { cat c.err; fail "no clear message for --compress with 2 ranks"; }
ls c.h5* 2> /dev/null && fail "a file was left by the refused capture"
echo "test_mpi_capture: passed"
