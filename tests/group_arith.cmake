# group_arith.cmake — the group-arithmetic probe (issues 7, 16): the linear
# probes against closed forms; the probe's helpers, self-patching, the paper's
# constructions and every verdict rule on planted inputs; the --quick run end to
# end with its verdict table and the /eval items re-checked from the file; the
# --preset gpu shape at a tiny size.
mp_c_test(test_linprobe "unit" test_linprobe.c)
mp_lua_test(test_group_arith "lua" lua/test_group_arith.lua unit)
mp_lua_test(test_group_arith_report "lua;unit" lua/test_group_arith_report.lua)
mp_lua_test(test_group_arith_quick "lua" lua/test_group_arith.lua quick)
mp_lua_test(test_group_arith_gpu "lua;slow" lua/test_group_arith.lua gpu)
