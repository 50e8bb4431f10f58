# fm.cmake — t:eig()/t:eigh() (analyze/tensor_linalg.c through GSL) and
# mp.FactoredMatrix with m:OV/m:QK (lua/lfactored.c, lua/lweights.c).
mp_lua_test(test_lua_factored "lua" lua/test_factored.lua)
