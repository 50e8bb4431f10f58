# mirror.cmake — the MTD in-context estimators (analyze/mirror) and the
# mirror-descent probe (mechprobe mirror_descent --quick, end to end, ~5-10 s; its rules on
# planted inputs; --rejudge on the stored run tests/data/rejudge/mirror).
mp_c_test(test_mirror "unit" test_mirror.c)
mp_lua_test(test_mirror_probe "lua" lua/test_mirror_probe.lua)
mp_lua_test(test_mirror_rules "unit;lua" lua/test_mirror_rules.lua)
mp_lua_test(test_mirror_construct "unit;lua" lua/test_mirror_construct.lua)
mp_lua_test(test_mirror_rejudge "lua;unit" lua/test_mirror_rejudge.lua)
