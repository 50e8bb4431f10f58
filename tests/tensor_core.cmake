# tensor_core.cmake — the C tensor core analyze/tensor.h, without Lua: the test
# links mechprobe_core only (through mp_testutil), not mechprobe_lua; and the
# Lua layer stays a binding: no BLAS or GSL call in lua/ (the tensor's sgemm
# and the median's GSL live in analyze/tensor*.c).
add_executable(test_tensor_core test_tensor_core.c)
target_link_libraries(test_tensor_core PRIVATE mp_testutil)
add_test(NAME test_tensor_core COMMAND test_tensor_core)
set_tests_properties(test_tensor_core PROPERTIES LABELS "unit" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME lua_no_blas_gsl COMMAND sh -c "if grep -n 'cblas\\|gsl_' \"$0\"/*.c \"$0\"/*.h; then echo 'lua/ calls BLAS or GSL directly (use analyze/)'; exit 1; fi"
         ${CMAKE_SOURCE_DIR}/lua)
set_tests_properties(lua_no_blas_gsl PROPERTIES LABELS "unit")
