# pos.cmake — positional schemes (rope, half_rope, high_freq, rope_id, none) and
# inference-time RoPE scaling (PI, NTK, YaRN): closed forms, identities, KV
# cache, checkpoints, finite differences and golden logits / gradients against
# PyTorch (tests/data/pos_ref.h5 from tests/tools/make_pos_ref.py).
mp_c_test(test_pos "unit;golden;grad" test_pos.c)
mp_lua_test(test_lua_pos "lua" lua/test_pos.lua)
