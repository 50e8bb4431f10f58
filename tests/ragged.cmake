# ragged.cmake — padded batches with an attention mask (left / right padding,
# every positional scheme, hooks, loss, capture) against single-prompt runs, and
# to_tokens' list form and prepend_space against golden ids.
mp_lua_test(test_ragged "lua;golden" lua/test_ragged.lua)
mp_c_test(test_ragged_c "unit" test_ragged.c)
