# weights_tl.cmake — TransformerLens's weight names and shapes (runtime/weights_tl.c)
# against the raw parameter layout.
mp_c_test(test_weights_tl "unit" test_weights_tl.c)
# the tokenizer a model gets when none is named (formats/tok_find.c
# mp_tok_discover) and the padding of ragged token rows (runtime/ragged.c)
mp_c_test(test_tok_discover "unit" test_tok_discover.c)
