# model_io.cmake — the one load/save dispatcher of io/model_io.h (every format
# written, detected and read back; tokenizer sources; refusals).
mp_c_test(test_model_io "unit" test_model_io.c)
mp_lua_test(test_save_format "lua" lua/test_save_format.lua)
