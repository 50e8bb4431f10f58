# lua.cmake — tests of the Lua API and the CLI, run through the mechprobe binary.
mp_lua_test(test_lua_model "lua;golden" lua/test_model.lua)
mp_lua_test(test_cli_faults "fault;lua" lua/test_faults.lua)
mp_lua_test(test_readme_examples "lua" lua/test_readme.lua)
mp_lua_test(test_sinks_probe "lua" lua/test_sinks.lua trained)
mp_lua_test(test_sinks_probe_shared "lua;golden" lua/test_sinks.lua shared)
mp_lua_test(test_mtd_learning "lua" lua/test_mtd_learning.lua)
mp_lua_test(test_lua_quant "lua;golden" lua/test_quant.lua)
