# lua.cmake — tests of the Lua API and the CLI, run through the mechprobe binary.
mp_lua_test(test_lua_model "lua;golden" lua/test_model.lua)
mp_lua_test(test_cli_faults "fault;lua" lua/test_faults.lua)
mp_lua_test(test_readme_examples "lua" lua/test_readme.lua)
mp_lua_test(test_sinks_probe "lua" lua/test_sinks.lua trained)
mp_lua_test(test_sinks_probe_shared "lua;golden" lua/test_sinks.lua shared)
mp_lua_test(test_mtd_learning "lua" lua/test_mtd_learning.lua)
mp_lua_test(test_lua_quant "lua;golden" lua/test_quant.lua)
mp_lua_test(test_lua_config "lua" lua/test_config.lua)
mp_lua_test(test_lua_options "lua" lua/test_options.lua)
mp_lua_test(test_api_doc "unit;lua" lua/test_api_doc.lua)
# the verdict engine of every probe on planted data (<1 s)
mp_lua_test(test_verdicts "lua;unit" lua/test_verdicts.lua)
mp_lua_test(test_hook_points "lua;unit" lua/test_hook_points.lua)
# `mechprobe sinks --preset`: the verdict rules on planted fractions, --rejudge
# on a planted and on the stored tiny run (tests/data/rejudge/sinks), option
# errors (~2 s); a tiny 3-seed run end to end, --rejudge on a copy of its folder
# byte for byte, and the gpu shape (~15 s)
mp_lua_test(test_sinks_train "lua;unit" lua/test_sinks_train.lua unit)
mp_lua_test(test_sinks_train_run "lua" lua/test_sinks_train.lua run)
