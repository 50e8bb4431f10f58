// cuda_emu.h — runs the CUDA backend's kernels on the CPU, for tests on machines
// without a GPU (this one, CI). runtime/cuda/cuda_kernels.cu includes it when
// compiled as C++ with MP_CUDA_EMU (tests/cuda_emu/kernels_emu.cpp): the
// kernel qualifiers become plain C++, threadIdx / blockIdx / blockDim /
// gridDim name the running emulated thread's, and MP_LAUNCH runs the grid in
// cuda_emu.cpp: the blocks one after another, the threads of a block as
// coroutines on one OS thread that switch at __syncthreads and at warp
// shuffles (a barrier waits for every thread of the block, or of the warp,
// that has not returned; one that can never be released aborts, naming the
// kernel). Every pointer a kernel receives must lie in memory from cudaMalloc.
//
// What it checks: the kernels' arithmetic and indexing, their barriers and
// shuffles (a thread runs until its next barrier, so a read of shared memory
// that another thread writes without a barrier between sees the old value),
// launch limits, and device memory kept apart from the host's (device memory
// is inaccessible outside kernels, copies and cuBLAS calls, with a guard page
// past each allocation's end), and the waits around a copy stream (the copies
// on a stream created with a priority run only when an event recorded after
// them is synchronized, waited on or queried twice, or the stream is
// synchronized, so reading a copy too early or reusing its source too soon
// gives wrong data; their host side must be pinned). What it cannot: real concurrency (races between
// blocks or between threads that the barriers do not order), timing, the
// device's memory model, and speed.
#ifndef MP_CUDA_EMU_H
#define MP_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __shared__
#define __shared__ static /* blocks run one after another: one copy serves every block */
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)

namespace emu {

// The running emulated thread's coordinates (set by the scheduler before each switch).
extern uint3 g_threadIdx, g_blockIdx;
extern dim3 g_blockDim, g_gridDim;

void sync_block();                 // __syncthreads
void sync_warp();                  // the barrier of a warp shuffle
uint64_t *exchange_slot(unsigned tid); // a thread's slot for shuffles
int thread_live(unsigned tid);     // whether thread tid of the block has not returned
void check_pointer(const char *kernel, int arg, const void *p);
// Runs body(ctx) on every thread of the grid; cudaGetLastError reports launch-limit errors.
void run_grid(const char *kernel, dim3 grid, dim3 block, void (*body)(void *), void *ctx);

template <class T> T shfl_from(T v, unsigned src_lane) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    const unsigned tid = g_threadIdx.x + g_threadIdx.y * g_blockDim.x + g_threadIdx.z * g_blockDim.x * g_blockDim.y;
    const unsigned warp0 = tid & ~31u, src = warp0 + (src_lane & 31u);
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    *exchange_slot(tid) = bits;
    sync_warp();
    T r = v;
    if (thread_live(src)) memcpy(&r, exchange_slot(src), sizeof r);
    sync_warp();
    return r;
}

template <class T> inline void check_arg(const char *, int, const T &) {}
template <class T> inline void check_arg(const char *k, int i, T *const &p) { check_pointer(k, i, (const void *)p); }

template <class F> struct launcher;
template <class... P> struct launcher<void (*)(P...)> {
    void (*k)(P...);
    dim3 grid, block;
    const char *name;
    template <class... A> void operator()(A &&...a) const {
        std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
        check_all(args, std::index_sequence_for<P...>{});
        struct call {
            void (*k)(P...);
            std::tuple<std::decay_t<P>...> *args;
        } c{k, &args};
        run_grid(name, grid, block, [](void *p) { auto *c = (call *)p; std::apply(c->k, *c->args); }, &c);
    }
    template <class Tu, size_t... I> void check_all(const Tu &t, std::index_sequence<I...>) const {
        (check_arg(name, (int)I, std::get<I>(t)), ...);
    }
};

} // namespace emu

#define threadIdx (emu::g_threadIdx)
#define blockIdx (emu::g_blockIdx)
#define blockDim (emu::g_blockDim)
#define gridDim (emu::g_gridDim)
#define __syncthreads() emu::sync_block()
#define __syncwarp(...) emu::sync_warp()
#define __shfl_xor_sync(mask, v, m) emu::shfl_from((v), (emu::g_threadIdx.x ^ (unsigned)(m)) & 31u)
#define __shfl_sync(mask, v, lane) emu::shfl_from((v), (unsigned)(lane))
#define __shfl_down_sync(mask, v, d)                                                                              \
    emu::shfl_from((v), ((emu::g_threadIdx.x & 31u) + (unsigned)(d)) < 32u ? (emu::g_threadIdx.x & 31u) + (unsigned)(d) \
                                                                            : (emu::g_threadIdx.x & 31u))
#define __ldg(p) (*(p))
#define __expf(x) expf(x)
#define rsqrtf(x) (1.0f / sqrtf(x))

// Threads of the emulation run one at a time: a plain update is atomic.
template <class T> inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}

// MP_LAUNCH(kernel, grid, block, stream)(arguments...): kernel<<<grid, block, 0, stream>>>(arguments...)
#define MP_LAUNCH(k, g, b, s) ((void)(s), emu::launcher<decltype(&k)>{&k, dim3(g), dim3(b), #k})

#endif
