# ltasks.cmake — the Lua bindings of the task generators (mp.tasks), run through the mechprobe binary.
mp_lua_test(test_lua_tasks "lua" lua/test_tasks.lua)
