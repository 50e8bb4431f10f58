# saeio.cmake — SAELens folders in and out (formats/sae_io.c): the C test
# against the goldens of tests/tools/make_sae_ref.py (tests/data/sae), the Lua
# binding's test, and a bounded fuzz session of the loader (cfg.json + the
# safetensors file from one buffer). The pytest file tests/python/test_sae_io.py
# is registered by python.cmake's glob.
mp_c_test(test_sae_io "unit;golden" test_sae_io.c)
mp_lua_test(test_lua_sae_io "lua;unit" lua/test_sae_io.lua)
add_executable(fuzz_sae_io fuzz_sae_io.c fuzz_driver.c)
target_link_libraries(fuzz_sae_io PRIVATE mechprobe_core)
add_test(NAME fuzz_sae_io COMMAND fuzz_sae_io -n 200000 -t 6 ${MP_TESTDATA}/sae/fuzz_seed.bin)
set_tests_properties(fuzz_sae_io PROPERTIES LABELS "fault" TIMEOUT 120)
