# pos_set.cmake — the runtime setters of the positional scheme and RoPE scaling
# (mp_model_set_pos, mp_model_set_rope_scaling) against closed forms.
mp_c_test(test_pos_set "unit" test_pos_set.c)
