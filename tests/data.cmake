# tests/data.cmake — the data plane: HDF5 run files (io/h5io.c, io/h5run.c)
# and the Lua Tensor / H5 bindings (lua/ltensor.c, lua/lh5.c); the capture's write path
# (tiles, writer thread, write errors).
mp_c_test(test_h5run "unit" test_h5run.c)
mp_lua_test(test_lua_tensor "lua" lua/test_tensor.lua)
mp_lua_test(test_lua_h5 "lua" lua/test_h5.lua)
mp_c_test(test_capture_io "unit;fault" test_capture_io.c)
mp_lua_test(test_tensor_ops "unit;lua" lua/test_tensor_ops.lua)
mp_c_test(test_h5stream "unit;fault" test_h5stream.c)
