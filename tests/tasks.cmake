# tests/tasks.cmake — tests of the synthetic task generators (tasks/).
mp_c_test(test_tasks "unit" test_tasks.c)
