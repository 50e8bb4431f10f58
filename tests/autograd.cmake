# autograd.cmake — reverse-mode autograd over the Tensor (analyze/autograd.c,
# lua/lautograd.c) and the optimizers over script Tensors (lua/ltrain.c):
# the C core against mp_grad_ce and finite differences in double, and the Lua
# API (every op's gradient against finite differences, loss = fn against the
# hand-written form, AdamW and SGD against least squares' closed form). <2 s.
mp_c_test(test_autograd "unit" test_autograd.c)
mp_lua_test(test_autograd_lua "lua;unit" lua/test_autograd.lua)
