# params.cmake — m:params() / m:param(name): writable parameter views (lua/lweights.c).
mp_lua_test(test_params "lua" lua/test_params.lua)
# TransformerLens's weight shortcuts, m:set_weight, m:process_weights (runtime/weights_process.c).
mp_lua_test(test_weights "lua" lua/test_weights.lua)
