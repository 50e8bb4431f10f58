# outputs.cmake — issue #17 (outputs): every writer refuses non-regular and
# symbolic-link destinations, creates with 0666 & ~umask, cleans temporaries on
# signals and stale ones of dead processes (C, incl. a capture by the mechprobe
# binary killed mid-write); the CLI/Lua cases (sinks kill-safety, --hooks '',
# --window 0, FIFO models, /dev/zero corpora, long hook globs) in Lua.
mp_c_test(test_outputs "unit;fault" test_outputs.c)
target_compile_definitions(test_outputs PRIVATE MP_EXE="$<TARGET_FILE:mechprobe>")
add_dependencies(test_outputs mechprobe)
set_tests_properties(test_outputs PROPERTIES TIMEOUT 120)
mp_lua_test(test_outputs_lua "fault;lua" lua/test_outputs.lua)
