# sae_splice.cmake — SAEs attached to a model (hooks/sae_splice.c, lua/lsae_splice.c): the error term's exact
# clean run, the hand-hook equivalence, interventions on features, gradients through the SAE against central
# differences for every normalization and architecture, attribution patching on features (~2 s).
mp_lua_test(test_sae_splice "lua;unit" lua/test_sae_splice.lua)
