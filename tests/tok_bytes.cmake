# tok_bytes.cmake — the raw-bytes tokenizer kind of runtime/ (mp_tok_create_bytes).
mp_c_test(test_tok_bytes "unit" test_tok_bytes.c)
