# forward.cmake — golden tests of the forward pass and hook points.
mp_c_test(test_forward "golden;unit" test_forward.c)
add_test(NAME test_forward_shared COMMAND test_forward shared)
set_tests_properties(test_forward_shared PROPERTIES LABELS "golden" SKIP_RETURN_CODE 77)
mp_c_test(test_hooks "unit" test_hooks.c)
mp_c_test(test_sample "unit" test_sample.c)   # nucleus sampling, and samplers on several threads at once
