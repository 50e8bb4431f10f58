# tests/bpe.cmake — tokenizers behind mp_tok (tokenizers/tok.c, tokenizers/pretok.c):
# byte-level BPE against GPT-2 / Llama 3 reference encodings and JavaScript's
# pre-tokenizer splits (golden data in tests/data/bpe_*, made by
# tests/tools/make_bpe_golden.sh), hand-built vocabularies and faults. The second
# run builds a SentencePiece tokenizer from the arrays of ../shared's
# aidreams260K tokenizer (SKIP when ../shared is absent).
mp_c_test(test_bpe "unit;golden;fault" test_bpe.c)
add_test(NAME test_bpe_shared COMMAND test_bpe shared)
set_tests_properties(test_bpe_shared PROPERTIES LABELS "unit;golden" SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
