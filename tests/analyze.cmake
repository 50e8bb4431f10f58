# analyze.cmake — tests of analyze/ (GSL geometry, sink statistics, bootstrap) and
# plots/ (cairo figures), and of their Lua bindings mp.analyze / mp.plot.
mp_c_test(test_analyze "unit" test_analyze.c)
mp_c_test(test_plots "unit" test_plots.c)
mp_lua_test(test_lua_plot "lua" lua/test_plot.lua)
