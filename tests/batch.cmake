# batch.cmake — issue #44: batched generate (a list of prompts of different
# lengths decoded in one batch, each row as its prompt alone with the same seed:
# runtime/sample.c mp_model_generate_batch over a masked KV cache) and the
# gradients of a padded batch (loss / incl_bwd / bwd_hooks / attribution with an
# attention_mask: runtime/backward.c's masked walk), each row against that row
# run alone. The Python side, tests/python/test_batch.py, is registered by
# tests/python.cmake's glob (test_python_batch).
mp_lua_test(test_batch_generate "lua;golden" lua/test_batch_generate.lua)
mp_lua_test(test_batch_grad "lua" lua/test_batch_grad.lua)
# The thread count of decoding steps by their work (runtime/omp_env.h).
mp_c_test(test_batch_threads "unit" test_batch_threads.c)
