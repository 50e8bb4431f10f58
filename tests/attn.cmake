# attn.cmake — attention variants (softmax, ssmax, entmax15, alpha-entmax,
# asentmax): closed forms, finite differences of each row map and of whole
# models, golden logits / gradients against PyTorch (tests/data/attn_ref.h5
# from tests/tools/make_attn_ref.py), hooks / KV cache, checkpoints and exports.
mp_c_test(test_attn_variants "unit;golden;grad" test_attn_variants.c)
mp_lua_test(test_lua_attn "lua" lua/test_attn.lua)
