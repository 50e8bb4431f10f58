# i14_mix.cmake — issue 14's parts together: ragged batches with the new hook
# points, the gradient options' refusals, fold_ln then the cache helpers, Tensor
# operations on cache entries and gradients (lua/test_i14_mix.lua).
mp_lua_test(test_i14_mix "lua;unit" lua/test_i14_mix.lua)
