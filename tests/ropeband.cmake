# ropeband.cmake — RoPE-ID's rotating band (probes/lib/rope_id_band.lua: periods
# against their closed form and the runtime's tables, the nearest-recurrence
# distance against a direct loop: the old d_head 16 band repeats inside 8L, the
# full preset's does not) and the sink restore of row C10
# (probes/lib/rope_id_restore.lua: against a softmax recomputed from cached q/k) (~15 s)
mp_lua_test(test_rope_id_band "lua" lua/test_rope_id_band.lua)
# row C10 (rules.C10) on planted numbers: every word and reason class, and the
# rule's inputs from runs with and without restore numbers (<1 s)
mp_lua_test(test_rope_id_c10 "lua;unit" lua/test_rope_id_c10.lua)
