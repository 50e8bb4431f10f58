# h5trust.cmake — mp.h5.open and untrusted HDF5 files (issue: "mp.h5.open trusts
# sizes"): h5trust_gen writes the hostile files into h5trust/ (a fixture), the
# Lua tests open them: a corrupted set (no crash, no hang, errors naming the
# file), declared sizes the file does not hold, an empty dataset of extent
# 2^52, 2000-deep groups, a group of 2^18+1 links, integers outside int32;
# test_h5trust_unit checks the trust registry and the spawned and forked
# checkers in C. MECHPROBE_LOAD_TIMEOUT=2: a file libhdf5 loops on costs 2 s.
mp_c_test(h5trust_gen "fault" h5trust_gen.c)
set_tests_properties(h5trust_gen PROPERTIES FIXTURES_SETUP h5trust TIMEOUT 120)
foreach(t hostile sizes empty deep links int32)
  mp_lua_test(h5trust_${t} "fault;lua" lua/h5trust_${t}.lua)
  set_tests_properties(h5trust_${t} PROPERTIES FIXTURES_REQUIRED h5trust TIMEOUT 60)
  set_property(TEST h5trust_${t} APPEND PROPERTY ENVIRONMENT "MECHPROBE_LOAD_TIMEOUT=2")
endforeach()
set_tests_properties(h5trust_hostile PROPERTIES TIMEOUT 120)
mp_c_test(test_h5trust_unit "unit;fault" test_h5trust_unit.c)
set_tests_properties(test_h5trust_unit PROPERTIES FIXTURES_REQUIRED h5trust TIMEOUT 60)
