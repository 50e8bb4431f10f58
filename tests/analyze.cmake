# analyze.cmake — tests of analyze/ (GSL geometry, sink statistics, bootstrap) and
# plots/ (cairo figures), and of their Lua bindings mp.analyze / mp.plot.
mp_c_test(test_analyze "unit" test_analyze.c)
mp_c_test(test_plots "unit" test_plots.c)
mp_lua_test(test_lua_plot "lua" lua/test_plot.lua)
# fontconfig (behind cairo's toy text API) keeps a few hundred bytes until exit;
# under MP_SANITIZE that is not our leak.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/lsan_fontconfig.supp "leak:libfontconfig\n")
set_property(TEST test_plots test_lua_plot APPEND PROPERTY ENVIRONMENT
             "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_BINARY_DIR}/lsan_fontconfig.supp")
