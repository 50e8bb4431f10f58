# rope_id.cmake — the RoPE vs RoPE-ID length-generalisation probe (issue 8):
# its helpers against independent computations (~1 s), and
# `mechprobe rope_id --quick` end to end with its verdict table (~40 s).
mp_lua_test(test_rope_id "lua" lua/test_rope_id.lua unit)
mp_lua_test(test_rope_id_quick "lua" lua/test_rope_id.lua quick)
