# grad_hooks.cmake — gradients at hook points, backward hooks and attribution
# patching (runtime/grad.c, lua/lgrad.c) against finite differences, closed
# forms and real activation patching.
mp_lua_test(test_grad_hooks "grad;lua" lua/test_grad_hooks.lua)
