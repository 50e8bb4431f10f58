# tests/sae_train.cmake — SAE training (runtime/sae_train.c, io/sae_data.c,
# lua/lsae_train.c): gradients against finite differences, schedulers, a
# planted dictionary recovered, metrics by hand, CE loss recovered; the HDF5
# reader against h5py-written files; mp.sae.train / evaluate from Lua.
mp_c_test(test_sae_train "unit;grad" test_sae_train.c)
mp_c_test(test_sae_data "unit" test_sae_data.c)
set_tests_properties(test_sae_data PROPERTIES FIXTURES_REQUIRED sae_data)
add_test(NAME sae_data_gen COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sae_data_gen.py
         ${CMAKE_CURRENT_BINARY_DIR}/sae_data)
set_tests_properties(sae_data_gen PROPERTIES FIXTURES_SETUP sae_data LABELS "unit")
mp_lua_test(test_lua_sae_train "lua;unit" lua/test_sae_train.lua)
