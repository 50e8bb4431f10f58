# tests/ints.cmake — the one integer reader of the Lua API (lua/lopt.c,
# issue #38): one message shape for every integer argument and option.
mp_lua_test(test_lua_ints "lua;unit" lua/test_ints.lua)
