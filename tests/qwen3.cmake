# tests/qwen3.cmake — the q/k norm (config qk_norm) and the Qwen3 family: golden
# activations from an HF folder and a GGUF (tests/tools/make_arch_ref_qwen3.py),
# the norm's effect, decode == prefill, gradients vs finite differences (the
# norm weights, input and new hook points; qk_norm head and full), round trips
# (HDF5 checkpoint, GGUF, HF folder) and refused config.json fields. The CUDA
# backend's q/k norm is compared with the CPU in test_gpu.c (test_gpu_emu).
mp_c_test(test_qwen3 "unit;golden" test_qwen3.c)
