// kernels_emu.cpp — the CUDA backend's kernels (backends/cuda/cuda_kernels.cu)
// compiled as C++ for the CPU emulation of tests/cuda_emu (cuda_emu.h): the
// same source, launched through MP_LAUNCH into the emulator's scheduler.
#define MP_CUDA_EMU 1
#include "cuda_kernels.cu"
