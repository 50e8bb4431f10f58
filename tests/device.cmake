# device.cmake — device selection (runtime/device.h, runtime/cuda/mp_cuda.h): host-side tests in the
# normal suite, and the `gpu` comparisons against the CPU (SKIP where no CUDA device exists).
mp_lua_test(test_device "lua;unit" lua/test_device.lua)
mp_c_test(test_device_c "unit" test_device.c)   # host side of device selection, the dispatch seam
