# relv.cmake — Shaw relative values (config rel_values, runtime/relv.h):
# hook_z against a reference computed from the pattern, values and rel_v rows,
# KV-cached decoding, padded batches, checkpoints, refused exports, training
# (Lua); finite differences of the loss against the backward for rel_v, wq and
# wv, the parameter's description and the CUDA backend's host-side routing (C).
mp_lua_test(test_lua_relv "lua" lua/test_relv.lua)
mp_c_test(test_relv "unit;grad" test_relv.c)
if(MP_HAVE_CUDA) # the CUDA backend on the emulated runtime (device.cmake's mp_cuda_emu): routing and refusal
  add_executable(test_relv_emu test_relv.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(test_relv_emu PRIVATE mp_testutil mechprobe_lua)
  target_compile_definitions(test_relv_emu PRIVATE MP_RELV_EMU=1)
  set_target_properties(test_relv_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_relv_emu COMMAND test_relv_emu)
  set_tests_properties(test_relv_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77)
endif()
