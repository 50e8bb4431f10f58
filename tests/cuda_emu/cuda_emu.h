// cuda_emu.h — runs the CUDA backend's kernels on the CPU, for tests on machines
// without a GPU (this one, CI). backends/cuda/cuda_kernels.cu includes it when
// compiled as C++ with MP_CUDA_EMU (tests/cuda_emu/kernels_emu.cpp): the
// kernel qualifiers become plain C++, threadIdx / blockIdx / blockDim /
// gridDim name the running emulated thread's, and MP_LAUNCH queues the grid
// on its stream in cuda_emu.cpp, which runs it when the stream is synchronized:
// the blocks one after another in an order permuted anew for every launch, the
// threads of a block as coroutines on one OS thread that switch at
// __syncthreads and at warp shuffles. Every pointer a kernel receives must lie
// in memory from cudaMalloc.
//
// What it checks, each stricter than a device would show at once:
// - the kernels' arithmetic and indexing;
// - order between blocks: blocks run in a permuted order, so a result that
//   depends on block order (a float atomicAdd sum, a last-writer-wins store)
//   differs between two launches of the same grid;
// - barriers and shuffles: a thread runs until its next barrier, so a read of
//   shared memory that another thread writes without a barrier between sees the
//   old value; a __syncthreads (or warp shuffle) that threads reach at different
//   call sites aborts, as does one that can never be released, and a shuffle
//   that reads a lane that has exited (or does not exist) aborts;
// - streams: kernels, copies, memsets and cuBLAS calls run only when their
//   stream (or an event after them) is synchronized, waited on or queried twice;
//   cudaMemcpy (and cudaMemcpy2D) / cudaMemset go to the legacy default stream, which a
//   non-blocking stream never waits for: work on one stream that reads what
//   another wrote without an event or a synchronization between sees the old
//   data; cudaFree / cudaFreeHost of memory that queued work still uses aborts;
// - device memory kept apart from the host's (inaccessible outside kernels,
//   copies and cuBLAS calls, a guard page past each allocation's end), and a
//   finite device (80 GiB, MP_CUDA_EMU_MEM bytes, or cuda_emu_set_mem_limit);
// - cuBLAS's TF32 and fast-bf16 compute types round their fp32 inputs as the
//   tensor cores do (10 and 7 mantissa bits);
// - launch resources: each kernel's registers and shared memory as ptxas gave
//   them (tests/cuda_emu/resources.sh, at build time) against a block's limits,
//   so a launch the device would refuse for its size fails here too.
// What it cannot: real concurrency (races between threads that the barriers
// do not order), timing, the device's memory model, and speed.
#ifndef MP_CUDA_EMU_H
#define MP_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

void sync_block(const char *site); // __syncthreads at site (file:line)
void sync_warp(const char *site);  // the barrier of a warp shuffle at site
uint64_t *exchange_slot(unsigned tid); // a thread's slot for shuffles
void check_shfl_source(unsigned tid, unsigned src, const char *site); // aborts unless lane src is live
void check_pointer(const char *kernel, int arg, const void *p);
// Queues body (run by every thread of the grid) on stream s; uses: the pointers
// the kernel receives. cudaGetLastError reports launch-limit errors.
void launch(const char *kernel, dim3 grid, dim3 block, cudaStream_t s, std::function<void()> body,
            std::vector<const void *> uses);

template <class T> T shfl_from(T v, unsigned src_lane, const char *site) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    const unsigned tid = g_threadIdx.x + g_threadIdx.y * g_blockDim.x + g_threadIdx.z * g_blockDim.x * g_blockDim.y;
    const unsigned warp0 = tid & ~31u, src = warp0 + (src_lane & 31u);
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    *exchange_slot(tid) = bits;
    sync_warp(site);
    check_shfl_source(tid, src, site);
    T r;
    memcpy(&r, exchange_slot(src), sizeof r);
    sync_warp(site);
    return r;
}

template <class T> inline void check_arg(const char *, int, const T &, std::vector<const void *> &) {}
template <class T> inline void check_arg(const char *k, int i, T *const &p, std::vector<const void *> &uses) {
    check_pointer(k, i, (const void *)p);
    if (p) uses.push_back((const void *)p);
}

template <class F> struct launcher;
template <class... P> struct launcher<void (*)(P...)> {
    void (*k)(P...);
    dim3 grid, block;
    const char *name;
    cudaStream_t stream;
    template <class... A> void operator()(A &&...a) const {
        // the arguments are copied now, as a launch does; the grid runs when its stream is synchronized
        auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
        std::vector<const void *> uses;
        check_all(*args, uses, std::index_sequence_for<P...>{});
        void (*kf)(P...) = k;
        launch(name, grid, block, stream, [kf, args]() { std::apply(kf, *args); }, std::move(uses));
    }
    template <class Tu, size_t... I>
    void check_all(const Tu &t, std::vector<const void *> &uses, std::index_sequence<I...>) const {
        (check_arg(name, (int)I, std::get<I>(t), uses), ...);
    }
};

} // namespace emu

#define threadIdx (emu::g_threadIdx)
#define blockIdx (emu::g_blockIdx)
#define blockDim (emu::g_blockDim)
#define gridDim (emu::g_gridDim)
#define EMU_STR2(x) #x
#define EMU_STR(x) EMU_STR2(x)
#define EMU_SITE __FILE__ ":" EMU_STR(__LINE__)
#define __syncthreads() emu::sync_block(EMU_SITE)
#define __syncwarp(...) emu::sync_warp(EMU_SITE)
#define __shfl_xor_sync(mask, v, m) emu::shfl_from((v), (emu::g_threadIdx.x ^ (unsigned)(m)) & 31u, EMU_SITE)
#define __shfl_sync(mask, v, lane) emu::shfl_from((v), (unsigned)(lane), EMU_SITE)
#define __shfl_down_sync(mask, v, d)                                                                              \
    emu::shfl_from((v), ((emu::g_threadIdx.x & 31u) + (unsigned)(d)) < 32u ? (emu::g_threadIdx.x & 31u) + (unsigned)(d) \
                                                                            : (emu::g_threadIdx.x & 31u), EMU_SITE)
#define __ldg(p) (*(p))
#define __expf(x) expf(x)
#define rsqrtf(x) (1.0f / sqrtf(x))

// Threads of the emulation run one at a time: a plain update is atomic (the
// blocks' permuted order makes a float sum's rounding differ between launches).
template <class T> inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}

// MP_LAUNCH(kernel, grid, block, stream)(arguments...): kernel<<<grid, block, 0, stream>>>(arguments...)
#define MP_LAUNCH(k, g, b, s) (emu::launcher<decltype(&k)>{&k, dim3(g), dim3(b), #k, (s)})

// For tests: the emulated device's memory in bytes (0: the default, 80 GiB or MP_CUDA_EMU_MEM). Not CUDA's.
extern "C" void cuda_emu_set_mem_limit(size_t bytes);

#endif
