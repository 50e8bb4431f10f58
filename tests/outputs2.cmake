# outputs2.cmake — the output race and writes (reliability issue): a
# temporary swapped for a link or another file at fixed moments (the
# mp_out_test_hook) is refused for every kind of writer, a locked temporary of
# a writer in another PID namespace survives the stale cleanup, 250-byte
# output names, mp_h5_open refusing links and outputs that are inputs (C);
# mp.h5.open / t:save refusing links and being atomic, capture --out equal to
# --model (Lua, CLI); t:save on a full disk and a LeakSanitizer run of a
# dataset capture on a full disk (enospc_outputs.sh, the enospc.sh harness).
mp_c_test(test_outputs2 "unit;fault" test_outputs2.c)
set_tests_properties(test_outputs2 PROPERTIES TIMEOUT 120)
mp_lua_test(test_outputs2_lua "fault;lua" lua/test_outputs2.lua)
add_test(NAME test_enospc_outputs COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/enospc_outputs.sh $<TARGET_FILE:mechprobe> ${MP_TESTDATA})
set_tests_properties(test_enospc_outputs PROPERTIES LABELS "fault" SKIP_RETURN_CODE 77 TIMEOUT 120)
