# device.cmake — device selection (runtime/device.h, runtime/cuda/mp_cuda.h): host-side tests in the
# normal suite, and the `gpu` comparisons against the CPU (SKIP where no CUDA device exists).
mp_lua_test(test_device "lua;unit" lua/test_device.lua)
mp_c_test(test_device_c "unit" test_device.c)   # host side of device selection, the dispatch seam
mp_c_test(test_gpu "gpu" test_gpu.c)   # the CUDA forward against the CPU: SKIP (77) without a device
mp_lua_test(test_gpu_lua "gpu;lua" lua/test_gpu.lua)
# The same comparisons with the CPU on both sides: the gpu tests' own set-up, checked where no device is.
add_test(NAME test_gpu_dry COMMAND test_gpu --dry)
set_tests_properties(test_gpu_dry PROPERTIES LABELS "unit")
mp_lua_test(test_gpu_lua_dry "lua;unit" lua/test_gpu.lua --dry)
