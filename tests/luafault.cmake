# luafault.cmake — faults in the Lua bindings and the CLI's argument and loader
# messages (issue 17 part C): closing a model from its own callbacks, hook
# errors without leaks, integer arguments, hostile loader inputs.
mp_lua_test(test_lua_faults "fault;lua" lua/test_lua_faults.lua)
mp_c_test(test_h5filter "unit;fault" test_h5filter.c)
mp_lua_test(test_input_faults "fault;lua" lua/test_input_faults.lua)
