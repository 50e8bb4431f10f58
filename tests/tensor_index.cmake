# tensor_index.cmake — the Tensor's masks, indexing, sorting, random tensors,
# reductions over a list of dims and SVD (lua/ltensor_index.c over
# analyze/tensor_index.c; issue #44), each against plain-Lua loops, golden
# MT19937 values or closed forms, with their error messages.
mp_lua_test(test_tensor_index "unit;lua" lua/test_tensor_index.lua)
