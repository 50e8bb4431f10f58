# rope_id.cmake — the RoPE vs RoPE-ID length-generalisation probe (issue 8):
# its helpers against independent computations (~1 s), and
# `mechprobe rope_id --quick` end to end with its verdict table (~40 s).
mp_lua_test(test_rope_id "lua" lua/test_rope_id.lua unit)
# every claim's row on planted numbers: each of its words and reasons (<1 s)
mp_lua_test(test_rope_id_rules "lua;unit" lua/test_rope_id_rules.lua)
mp_lua_test(test_rope_id_quick "lua" lua/test_rope_id.lua quick)
# --rejudge on the small stored run tests/data/rejudge/rope_id (--quick, seeds
# 1-3): its verdicts.tsv and report.txt byte for byte (<1 s)
mp_lua_test(test_rope_id_rejudge "lua;unit" lua/test_rope_id.lua rejudge)
# --resume: a tiny quick run (3 steps) continued: every model reused, missing or
# stale ones trained again to the same loss, other settings refused (~20 s)
mp_lua_test(test_rope_id_resume "lua" lua/test_rope_id.lua resume)
# --preset gpu's shape (8 layers x 8 heads of 64, lengths 1x-8x L, all tasks) at
# a tiny size, two seeds pooled (--steps 2 --length 64 --d-model 32 --sequences 1)
mp_lua_test(test_rope_id_gpu "lua;slow" lua/test_rope_id.lua gpu)
# experiments/sink_recipe.lua at 2 steps: its files, and alpha_0 of near-uniform
# attention against the closed form (H_T - 1)/(T - 1) (~5 s)
mp_lua_test(test_sink_recipe "lua" lua/test_sink_recipe.lua)
# experiments/retrieval_recipe.lua at one step: its TSV, and the first loss of
# each configuration's model near ln(vocabulary) (~5 s)
mp_lua_test(test_retrieval_recipe "lua" lua/test_retrieval_recipe.lua)
