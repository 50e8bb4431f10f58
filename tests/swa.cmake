# tests/swa.cmake — sliding-window attention (config sliding_window, sliding_window_pattern): a Mistral HF
# folder and a Gemma-2-style pattern GGUF against the PyTorch reference of tests/tools/make_arch_ref_swa.py,
# decoding, padded batches, gradients, refusals and round trips (test_swa); the same test built against the
# CUDA emulator (tests/cuda_emu) compares the CUDA backend's forward and training steps with the CPU.
mp_c_test(test_swa "unit;golden" test_swa.c)
if(MP_HAVE_CUDA)
  add_executable(test_swa_emu test_swa.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(test_swa_emu PRIVATE mp_testutil mechprobe_lua)
  target_compile_definitions(test_swa_emu PRIVATE MP_SHARED_DIR="${MP_SHARED_DIR}" MP_TESTDATA="${MP_TESTDATA}")
  set_target_properties(test_swa_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_swa_emu COMMAND test_swa_emu)
  set_tests_properties(test_swa_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77
                       WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endif()
