// train_kernels_emu.cpp — the CUDA backend's training kernels
// (backends/cuda/cuda_train_kernels.cu) compiled as C++ for the tests' CPU
// emulation (cuda_emu.h), as kernels_emu.cpp does for the forward's.
#define MP_CUDA_EMU 1
#include "cuda_train_kernels.cu"
