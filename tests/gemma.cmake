# tests/gemma.cmake — the Gemma (1) and Gemma 2 families (config fields norm_offset,
# embed_scale, post_norms, attn_softcap, final_softcap, query_pre_attn_scalar; GeGLU
# = mlp swiglu + gelu_tanh): golden activations from HF folders and GGUF files
# against tests/tools/make_arch_ref_gemma.py's float64 PyTorch reference, each quirk
# switched off, decode vs prefill, gradients (finite differences through the caps and
# post-norms, training and backward-hook walks), fold_ln, round trips, refusals.
mp_c_test(test_gemma "unit;golden;fault" test_gemma.c)
# The CUDA backend's Gemma forward against the CPU's: on the emulation (tests/cuda_emu, built in
# device.cmake where the toolkit's headers are) and on a device (gpu label; SKIP 77 without one).
if(TARGET mp_cuda_emu)
  add_executable(test_gemma_gpu_emu test_gemma_gpu.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(test_gemma_gpu_emu PRIVATE mp_testutil mechprobe_lua)
  target_compile_definitions(test_gemma_gpu_emu PRIVATE MP_SHARED_DIR="${MP_SHARED_DIR}" MP_TESTDATA="${MP_TESTDATA}")
  set_target_properties(test_gemma_gpu_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_gemma_gpu_emu COMMAND test_gemma_gpu_emu)
  set_tests_properties(test_gemma_gpu_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77
                       WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endif()
mp_c_test(test_gemma_gpu "gpu" test_gemma_gpu.c)
