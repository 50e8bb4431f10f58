# tok_bytes.cmake — the raw-bytes tokenizer kind of runtime/ (mp_tok_new_bytes).
mp_c_test(test_tok_bytes "unit" test_tok_bytes.c)
# which tokenizer goes with a model (formats/tok_find.c)
mp_c_test(test_tok_find "unit" test_tok_find.c)
