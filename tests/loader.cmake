# tests/loader.cmake — llama2.c checkpoint loader/saver, config validation and
# the llama2.c tokenizer. Each executable also runs a second time with an
# argument for the part that needs ../shared (SKIP when it is absent), so the
# self-contained checks pass (not skip) on a fresh clone.
mp_c_test(test_llama2c "unit;fault" test_llama2c.c)
add_test(NAME test_llama2c_shared COMMAND test_llama2c shared)
set_tests_properties(test_llama2c_shared PROPERTIES LABELS "unit;golden" SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

mp_c_test(test_tokenizer "unit;fault" test_tokenizer.c)
add_test(NAME test_tokenizer_golden COMMAND test_tokenizer golden)
set_tests_properties(test_tokenizer_golden PROPERTIES LABELS "golden;unit" SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
