# tests/neox.cmake — the GPT-NeoX (Pythia) and Phi-3 families (formats/load_hf.c, load_gguf.c,
# export_gguf.c; runtime parallel_attn in exec.c / backward.c): golden activations of HF folders and
# GGUF files from tests/tools/make_arch_ref_neox.py and make_arch_ref_phi3.py, each quirk switched
# off, decoding, the parallel block's gradients (weights and backward hooks) against finite
# differences, round trips through the writers, refusals by name.
mp_c_test(test_neox "unit;golden;fault" test_neox.c)
