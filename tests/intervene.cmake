# intervene.cmake — the C interventions of hooks/intervene.h (zero, mean, patch,
# steer, scale) against their closed forms on a tiny random model.
mp_c_test(test_intervene "unit" test_intervene.c)
mp_lua_test(test_intervene_lua "lua" lua/test_intervene.lua)
