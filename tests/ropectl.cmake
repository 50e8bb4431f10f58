# ropectl.cmake — the controls of the rope_id probe's learned claims: the
# untrained models (every scheme at its initialization, recomputed here from
# a model built at the same init seed on the same sequences), the rows that
# read them, a preset's seeds_max (a tiny quick run, --seeds-max 2) and
# --rejudge of it byte for byte (~1-2 min).
mp_lua_test(test_rope_id_controls "lua" lua/test_rope_id_controls.lua)
