# sae_view.cmake — the SAE feature view: top-n contexts per feature
# (analyze/feat_top.c) against a brute-force sort, a planted SAE feature and
# its figure (plots/feature_view.c), and mp.sae.top_contexts / feature_view
# on a tiny model (lua/lsae_view.c).
mp_c_test(test_sae_view "unit" test_sae_view.c)
mp_lua_test(test_lua_sae_view "lua" lua/test_sae_view.lua)
