// cuda_common.cuh — internal to backends/cuda/: what the kernel files
// (cuda_kernels.cu, cuda_train_kernels.cu) share: warp and block reductions
// and the grid size of grid-stride loops, and MP_LAUNCH, through which every
// kernel is launched (with MP_CUDA_EMU, the tests' CPU emulation runs it).
#ifndef MP_CUDA_COMMON_CUH
#define MP_CUDA_COMMON_CUH

#ifdef MP_CUDA_EMU
#include "cuda_emu.h" /* the tests' CPU emulation (tests/cuda_emu): MP_LAUNCH runs the grid there */
#else
#include <cuda_bf16.h>
#include <math.h>
/* MP_LAUNCH(kernel, grid, block, stream)(arguments...): a launch without dynamic shared memory */
#define MP_LAUNCH(k, g, b, s) k<<<(g), (b), 0, (s)>>>
#endif

#define WARP 32
#define DECODE_WARPS 8 /* key slices (warps) per query row of mp_cuk_attn_flash */
#define MAX_DH 256    /* MP_CUDA_MAX_DHEAD */
#define DH_PER_LANE (MAX_DH / WARP)

// The sum of v over the block, returned to every thread. blockDim.x must be a
// multiple of 32 (at most 1024); sh holds 32 floats. The leading
// __syncthreads keeps a second call from overwriting sh before every thread
// has read the first call's values.
__device__ static inline float block_sum(float v, float *sh) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (threadIdx.x % WARP == 0) sh[threadIdx.x / WARP] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < (int)(blockDim.x / WARP); i++) t += sh[i];
    return t;
}

// The maximum of v over the block (as block_sum).
__device__ static inline float block_max(float v, float *sh) {
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (threadIdx.x % WARP == 0) sh[threadIdx.x / WARP] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int i = 0; i < (int)(blockDim.x / WARP); i++) t = fmaxf(t, sh[i]);
    return t;
}

// The sum over the 32 lanes of a warp, returned to every lane.
__device__ static inline float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static inline unsigned grid_for(size_t n, unsigned threads) {
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g > 65535u * 8u ? 65535u * 8u : (g ? g : 1)); // grid-stride loops cover the rest
}

#endif
