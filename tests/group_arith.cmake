# group_arith.cmake — the group-arithmetic probe (issues 7, 16, 37): the linear
# probes against closed forms; the probe's helpers, self-patching, the paper's
# constructions; every verdict rule on planted per-seed numbers (the verdict
# engine's words and reasons); the stored three-seed --quick run re-judged
# byte for byte (tests/data/rejudge/group_arith); the --quick run end to end
# with its verdicts, --rejudge, --control and the /eval items re-checked from
# the file; the --preset gpu shape at a tiny size.
mp_c_test(test_linprobe "unit" test_linprobe.c)
mp_lua_test(test_group_arith "lua" lua/test_group_arith.lua unit)
mp_lua_test(test_group_arith_report "lua;unit" lua/test_group_arith_report.lua unit)
mp_lua_test(test_group_arith_rejudge "lua;unit" lua/test_group_arith_report.lua rejudge)
mp_lua_test(test_group_arith_quick "lua" lua/test_group_arith.lua quick)
mp_lua_test(test_group_arith_gpu "lua;slow" lua/test_group_arith.lua gpu)
