# group_arith.cmake — the group-arithmetic probe (issue 7): the linear probes
# against closed forms, the probe's helpers and self-patching, and the --quick
# run end to end with its verdict table.
mp_c_test(test_linprobe "unit" test_linprobe.c)
mp_lua_test(test_group_arith "lua" lua/test_group_arith.lua unit)
mp_lua_test(test_group_arith_quick "lua" lua/test_group_arith.lua quick)
