# exec.cmake — the forward's op table and its one walk (runtime/exec.h), and the op tables' registry (device.h).
mp_c_test(test_exec "unit" test_exec.c)
