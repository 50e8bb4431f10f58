# train.cmake — the training engine: per-op and whole-model gradients against
# finite differences, training steps / golden inference against PyTorch
# (tests/data/train_ref_*.h5 from tests/tools/make_train_ref.py), checkpoints
# and resume, the Lua training API with a learning check, and the data-parallel
# gradient protocol with two simulated ranks (test_grad_sync, every build).
mp_c_test(test_grad "grad;unit" test_grad.c)
mp_c_test(test_train "unit;golden" test_train.c)
mp_lua_test(test_lua_train "lua" lua/test_train.lua)
mp_c_test(test_grad_sync "unit;grad" test_grad_sync.c)
