# params.cmake — m:params() / m:param(name): writable parameter views (lua/lparams.c).
mp_lua_test(test_params "lua" lua/test_params.lua)
