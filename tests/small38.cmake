# small38.cmake — issue 38's small items: /config and /model carry the same
# values (test_cfg_attrs.c).
mp_c_test(test_cfg_attrs "unit" test_cfg_attrs.c)
