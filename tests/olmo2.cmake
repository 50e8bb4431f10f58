# tests/olmo2.cmake — the OLMo 2 family (config fields pre_norms = false, post_norms,
# qk_norm full): golden activations from an HF folder and a GGUF file against
# tests/tools/make_arch_ref_olmo2.py's float64 PyTorch reference, the absent ln1 / ln2
# points, each quirk switched off, decode vs prefill, gradients (finite differences,
# training and backward-hook walks), fold_ln, round trips, refusals.
mp_c_test(test_olmo2 "unit;golden;fault" test_olmo2.c)
# The CUDA backend's OLMo 2 forward against the CPU's: on the emulation (tests/cuda_emu) and on a
# device (gpu label; SKIP 77 without one).
if(TARGET mp_cuda_emu)
  add_executable(test_olmo2_gpu_emu test_olmo2_gpu.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(test_olmo2_gpu_emu PRIVATE mp_testutil mechprobe_lua)
  target_compile_definitions(test_olmo2_gpu_emu PRIVATE MP_SHARED_DIR="${MP_SHARED_DIR}" MP_TESTDATA="${MP_TESTDATA}")
  set_target_properties(test_olmo2_gpu_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_olmo2_gpu_emu COMMAND test_olmo2_gpu_emu)
  set_tests_properties(test_olmo2_gpu_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77
                       WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endif()
mp_c_test(test_olmo2_gpu "gpu" test_olmo2_gpu.c)
