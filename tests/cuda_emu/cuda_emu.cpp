// cuda_emu.cpp — the CPU emulation of the CUDA runtime and cuBLAS calls the
// backend makes (runtime/cuda/), for tests without a GPU (see cuda_emu.h):
// device memory, copies, streams, error state, kernel launches (the grid run
// block by block, each block's threads as coroutines), and cuBLAS's sgemm and
// GemmEx through OpenBLAS (column-major, as cuBLAS). Linked instead of cudart
// and cuBLAS into the emulated test binaries only; never into mechprobe.
//
// Device memory is mmap'ed apart from the host's, PROT_NONE except while a
// kernel, a copy or a cuBLAS call runs, with a PROT_NONE page after each
// allocation: host code that reads device memory, or a kernel that runs off
// an allocation's end, stops with a message naming the allocation.
// Misuse the real runtime would also refuse (a copy whose direction does not
// match its pointers, a range past an allocation, a bad launch shape, a
// kernel given a host pointer) is reported on stderr; the call fails as the
// real one would, or, where the device would fault, the process aborts.
#include "cuda_emu.h"

#include <cblas.h>
#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {

uint3 g_threadIdx, g_blockIdx;
dim3 g_blockDim, g_gridDim;

static std::recursive_mutex mu;     // one host thread at a time inside the emulation
static cudaError_t last_error = cudaSuccess;
static const char *cur_kernel = "";

static void fail(cudaError_t e) {
    if (last_error == cudaSuccess) last_error = e;
}

// ---------------------------------------------------------------- device memory

struct allocation {
    char *map;       // the mapping: data pages, then one guard page
    size_t map_len;  // bytes, the guard page included
    char *p;         // the pointer handed out (ends 16-aligned at the guard page)
    size_t n;        // bytes asked for
};
static std::map<uintptr_t, allocation> dev; // by p
static std::map<void *, size_t> pinned; // cudaMallocHost's allocations and their sizes
static int open_depth;
static size_t page_size;
static struct sigaction old_segv;

static const allocation *find_dev(const void *q) {
    auto it = dev.upper_bound((uintptr_t)q);
    if (it == dev.begin()) return nullptr;
    --it;
    const allocation &a = it->second;
    return (const char *)q >= a.map && (const char *)q < a.map + a.map_len ? &a : nullptr;
}

static void protect_all(int prot) {
    for (auto &kv : dev) mprotect(kv.second.map, kv.second.map_len - page_size, prot);
}

struct dev_open {
    dev_open() {
        if (open_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
    }
    ~dev_open() {
        if (--open_depth == 0) protect_all(PROT_NONE);
    }
};

static void on_segv(int sig, siginfo_t *si, void *uc) {
    const allocation *a = find_dev(si->si_addr);
    if (a) {
        const char *where = (char *)si->si_addr >= a->map + a->map_len - page_size
                                ? "past the end of"
                                : (open_depth ? "outside" : "in (from host code, outside any kernel, copy or cuBLAS call)");
        fprintf(stderr, "cuda_emu: access to %p %s the device allocation %p of %zu bytes%s%s\n", si->si_addr, where,
                (void *)a->p, a->n, open_depth ? " by kernel " : "", open_depth ? cur_kernel : "");
        abort();
    }
    if (old_segv.sa_flags & SA_SIGINFO) {
        if (old_segv.sa_sigaction) return old_segv.sa_sigaction(sig, si, uc);
    } else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
        return old_segv.sa_handler(sig);
    }
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
}

static void init_once() {
    static bool done;
    if (done) return;
    done = true;
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
}

// [p, p + n) inside one device allocation
static bool dev_range(const void *p, size_t n) {
    const allocation *a = find_dev(p);
    return a && (const char *)p >= a->p && (size_t)((const char *)p - a->p) + n <= a->n;
}

void check_pointer(const char *kernel, int arg, const void *p) {
    if (!p) return;
    const allocation *a = find_dev(p);
    if (!a || (const char *)p < a->p || (const char *)p > a->p + a->n) {
        fprintf(stderr, "cuda_emu: kernel %s, argument %d: %p is not device memory%s\n", kernel, arg, p,
                pinned.count((void *)p) ? " (it is pinned host memory)" : "");
        abort();
    }
}

// ---------------------------------------------------------------- coroutines

enum { READY, WAIT_BLOCK, WAIT_WARP, DONE };
struct thread_state {
    void *sp;
    char *stack;     // usable stack (a guard page below it)
    int state;
    uint3 tid;
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
};
static const size_t STACK = 128 * 1024;
static std::vector<thread_state> th;
static std::vector<uint64_t> xch;
static unsigned n_threads, cur;
static void (*cur_body)(void *);
static void *cur_ctx;
static void *sched_sp;
#if !defined(__x86_64__)
static ucontext_t sched_uc;
#endif
#ifdef EMU_ASAN
static const void *sched_bottom;
static size_t sched_size;
#endif

#if defined(__x86_64__)
// emu_switch(save, to): pushes the callee-saved registers and the SSE/x87
// control words, stores the stack pointer in *save, loads `to` and pops the
// same from there (System V AMD64: everything else is caller-saved).
extern "C" void emu_switch(void **save, void *to);
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".globl emu_switch\n"
        ".type emu_switch,@function\n"
        "emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_switch, .-emu_switch\n"
        ".popsection\n");
#endif

static void to_scheduler(bool finished) {
    thread_state &t = th[cur];
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake, sched_bottom, sched_size);
#else
    (void)finished;
#endif
#if defined(__x86_64__)
    emu_switch(&t.sp, sched_sp);
#else
    swapcontext(&t.uc, &sched_uc);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static void entry() {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    cur_body(cur_ctx);
    th[cur].state = DONE;
    to_scheduler(true);
    abort(); // never resumed
}

static void start(unsigned i) {
    thread_state &t = th[i];
    if (!t.stack) {
        char *m = (char *)mmap(nullptr, STACK + page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuda_emu: cannot map a thread stack\n");
            abort();
        }
        mprotect(m, page_size, PROT_NONE);
        t.stack = m + page_size;
    }
#ifdef EMU_ASAN
    __asan_unpoison_memory_region(t.stack, STACK);
#endif
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)t.stack + STACK) & ~(uintptr_t)15;
    char *sp = (char *)(top - 72); // sp = 8 (mod 16): entry starts as if called
    memset(sp, 0, 72);
    unsigned csr;
    __asm__ volatile("stmxcsr %0" : "=m"(csr));
    unsigned short cw = 0x037F;
    memcpy(sp, &csr, 4);
    memcpy(sp + 4, &cw, 2);
    void (*e)() = entry;
    memcpy(sp + 56, &e, sizeof e);
    t.sp = sp;
#else
    getcontext(&t.uc);
    t.uc.uc_stack.ss_sp = t.stack;
    t.uc.uc_stack.ss_size = STACK;
    t.uc.uc_link = nullptr;
    makecontext(&t.uc, entry, 0);
#endif
    t.state = READY;
}

static void resume(unsigned i) {
    cur = i;
    g_threadIdx = th[i].tid;
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, th[i].stack, STACK);
#endif
#if defined(__x86_64__)
    emu_switch(&sched_sp, th[i].sp);
#else
    swapcontext(&sched_uc, &th[i].uc);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void sync_block() {
    th[cur].state = WAIT_BLOCK;
    to_scheduler(false);
}

void sync_warp() {
    th[cur].state = WAIT_WARP;
    to_scheduler(false);
}

uint64_t *exchange_slot(unsigned tid) { return &xch[tid]; }
int thread_live(unsigned tid) { return tid < n_threads && th[tid].state != DONE; }

// One warp at a time, each as far as it can go (to __syncthreads or its
// end) before the next starts; the warps in ascending order in even blocks,
// descending in odd ones. A warp that runs ahead thus overwrites shared
// memory before the others have read it unless a barrier stands between:
// a missing __syncthreads shows as a wrong result.
static void run_block(bool reverse) {
    for (unsigned i = 0; i < n_threads; i++) start(i);
    const unsigned n_warps = (n_threads + 31) / 32;
    for (;;) {
        for (unsigned wi = 0; wi < n_warps; wi++) {
            const unsigned w0 = 32 * (reverse ? n_warps - 1 - wi : wi), w1 = w0 + 32 < n_threads ? w0 + 32 : n_threads;
            for (;;) {
                for (unsigned i = w0; i < w1; i++)
                    if (th[i].state == READY) resume(i);
                unsigned wl = 0, ww = 0;
                for (unsigned i = w0; i < w1; i++) {
                    wl += th[i].state != DONE;
                    ww += th[i].state == WAIT_WARP;
                }
                if (!ww || ww != wl) break;
                for (unsigned i = w0; i < w1; i++) th[i].state = READY; // the warp's shuffle completes
            }
        }
        // every thread has returned or waits at __syncthreads (or at a shuffle its warp cannot complete)
        unsigned live = 0, at_block = 0;
        for (unsigned i = 0; i < n_threads; i++) {
            live += th[i].state != DONE;
            at_block += th[i].state == WAIT_BLOCK;
        }
        if (!live) return;
        if (at_block == live) {
            for (unsigned i = 0; i < n_threads; i++)
                if (th[i].state == WAIT_BLOCK) th[i].state = READY;
            continue;
        }
        fprintf(stderr,
                "cuda_emu: kernel %s, block (%u, %u, %u): barrier never released (%u threads live, %u at "
                "__syncthreads, the rest at a warp shuffle whose warp has threads elsewhere)\n",
                cur_kernel, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, live, at_block);
        abort();
    }
}

void run_grid(const char *kernel, dim3 grid, dim3 block, void (*body)(void *), void *ctx) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    init_once();
    const unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (!nt || nt > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "cuda_emu: kernel %s: launch grid (%u, %u, %u), block (%u, %u, %u) outside the device's limits\n",
                kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    dev_open open;
    cur_kernel = kernel;
    cur_body = body;
    cur_ctx = ctx;
    n_threads = (unsigned)nt;
    if (th.size() < nt) th.resize(nt);
    if (xch.size() < nt) xch.resize(nt);
    for (unsigned i = 0; i < nt; i++) {
        th[i].tid.x = i % block.x;
        th[i].tid.y = (i / block.x) % block.y;
        th[i].tid.z = i / (block.x * block.y);
    }
    g_blockDim = block;
    g_gridDim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                g_blockIdx.x = x;
                g_blockIdx.y = y;
                g_blockIdx.z = z;
                run_block((x + y + z) & 1);
            }
    cur_kernel = "";
}

} // namespace emu

using namespace emu;

// ---------------------------------------------------------------- runtime API

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    if (getenv("MP_CUDA_EMU_NO_DEVICE")) {
        *count = 0;
        return cudaErrorNoDevice;
    }
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (cuda_emu: MP_CUDA_EMU_NO_DEVICE)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "cuda_emu: unknown error";
    }
}

cudaError_t cudaMalloc(void **p, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    init_once();
    const size_t want = (n + 15) & ~(size_t)15;
    const size_t data = ((want ? want : 16) + page_size - 1) / page_size * page_size;
    char *m = (char *)mmap(nullptr, data + page_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        *p = nullptr;
        fail(cudaErrorMemoryAllocation);
        return cudaErrorMemoryAllocation;
    }
    allocation a{m, data + page_size, m + data - want, n};
    dev[(uintptr_t)a.p] = a;
    if (open_depth) mprotect(a.map, data, PROT_READ | PROT_WRITE);
    *p = a.p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!p) return cudaSuccess;
    auto it = dev.find((uintptr_t)p);
    if (it == dev.end()) {
        fprintf(stderr, "cuda_emu: cudaFree(%p): not a device allocation\n", p);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    munmap(it->second.map, it->second.map_len);
    dev.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    *p = malloc(n ? n : 1);
    if (!*p) return fail(cudaErrorMemoryAllocation), cudaErrorMemoryAllocation;
    pinned[*p] = n;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!p) return cudaSuccess;
    if (!pinned.erase(p)) {
        fprintf(stderr, "cuda_emu: cudaFreeHost(%p): not from cudaMallocHost\n", p);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!n) return cudaSuccess;
    const bool dd = find_dev(dst) != nullptr, sd = find_dev(src) != nullptr;
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = !sd && dd && dev_range(dst, n); break;
    case cudaMemcpyDeviceToHost: ok = sd && !dd && dev_range(src, n); break;
    case cudaMemcpyDeviceToDevice: ok = sd && dd && dev_range(src, n) && dev_range(dst, n); break;
    case cudaMemcpyHostToHost: ok = !sd && !dd; break;
    default: ok = (!sd || dev_range(src, n)) && (!dd || dev_range(dst, n)); break;
    }
    if (!ok) {
        fprintf(stderr, "cuda_emu: cudaMemcpy of %zu bytes, kind %d, from %p (%s) to %p (%s): the pointers do not "
                        "match the kind or run past an allocation\n",
                n, (int)kind, src, sd ? "device" : "host", dst, dd ? "device" : "host");
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    dev_open open;
    memmove(dst, src, n);
    return cudaSuccess;
}


cudaError_t cudaMemset(void *dst, int v, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!n) return cudaSuccess;
    if (!dev_range(dst, n)) {
        fprintf(stderr, "cuda_emu: cudaMemset of %zu bytes at %p: not inside a device allocation\n", n, dst);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    dev_open open;
    memset(dst, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t) { return cudaMemset(dst, v, n); }

// Streams. Kernels, cuBLAS calls and copies run at once on every stream (the
// order of one host thread's calls is a valid order for all of them), except
// the copies on a stream created with a priority (cudaStreamCreateWithPriority,
// priority != 0: the runtime's copy stream): they wait in a queue until the
// stream or an event recorded after them is synchronized, waited on by
// another stream, or queried a second time (the first query of such an event
// answers cudaErrorNotReady). So a host read of a copy's destination before
// its event completed, or a reuse of its source before then, shows as wrong
// data. Such a copy's host side must be pinned (cudaMallocHost).
struct pending_copy {
    void *dst;
    const void *src;
    size_t n;
};
struct stream_state {
    bool deferred = false;
    std::vector<pending_copy> q; // not yet run; q[i] is op number done + i
    uint64_t enq = 0, done = 0;  // ops enqueued / run
};
static std::map<cudaStream_t, stream_state> streams;

static void flush(stream_state &ss, uint64_t upto) {
    dev_open open;
    size_t k = 0;
    while (ss.done < upto && k < ss.q.size()) {
        memmove(ss.q[k].dst, ss.q[k].src, ss.q[k].n);
        k++, ss.done++;
    }
    ss.q.erase(ss.q.begin(), ss.q.begin() + (long)k);
}

static bool pinned_range(const void *p, size_t n) {
    auto it = pinned.upper_bound((void *)p);
    if (it == pinned.begin()) return false;
    --it;
    return (const char *)p >= (const char *)it->first && (const char *)p + n <= (const char *)it->first + it->second;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = s ? streams.find(s) : streams.end();
    if (s && it == streams.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    if (it == streams.end() || !it->second.deferred || !n) return cudaMemcpy(dst, src, n, kind);
    const bool dd = find_dev(dst) != nullptr, sd = find_dev(src) != nullptr;
    const bool ok = kind == cudaMemcpyDeviceToHost ? sd && !dd && dev_range(src, n) && pinned_range(dst, n)
                  : kind == cudaMemcpyHostToDevice ? !sd && dd && dev_range(dst, n) && pinned_range(src, n)
                  : kind == cudaMemcpyDeviceToDevice && sd && dd && dev_range(src, n) && dev_range(dst, n);
    if (!ok) {
        fprintf(stderr, "cuda_emu: cudaMemcpyAsync on a copy stream of %zu bytes, kind %d, from %p to %p: the pointers "
                        "do not match the kind, run past an allocation, or the host side is not pinned\n",
                n, (int)kind, src, dst);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    it->second.q.push_back({dst, src, n});
    it->second.enq++;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    *s = (cudaStream_t)malloc(1);
    streams[*s] = stream_state();
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    cudaStreamCreateWithFlags(s, flags);
    streams[*s].deferred = priority != 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = streams.find(s);
    if (it == streams.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    flush(it->second, it->second.enq);
    streams.erase(it);
    free((void *)s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!s) return cudaSuccess;
    auto it = streams.find(s);
    if (it == streams.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    flush(it->second, it->second.enq);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    for (auto &kv : streams) flush(kv.second, kv.second.enq);
    return cudaSuccess;
}

struct event_state {
    cudaStream_t stream = nullptr; // where it was last recorded (nullptr: never)
    uint64_t seq = 0;              // the ops of that stream before it
    bool queried = false;          // its first query since the record answered "not ready"
};
static std::map<cudaEvent_t, event_state> events;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    *e = (cudaEvent_t)malloc(1);
    events[*e] = event_state();
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!events.erase(e)) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    free((void *)e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto ev = events.find(e);
    auto st = s ? streams.find(s) : streams.end();
    if (ev == events.end() || (s && st == streams.end()))
        return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    ev->second.stream = s;
    ev->second.seq = s ? st->second.enq : 0;
    ev->second.queried = false;
    return cudaSuccess;
}

// runs what event e waits for; whether anything was left to run
static bool complete(event_state &es) {
    if (!es.stream) return false;
    auto st = streams.find(es.stream);
    if (st == streams.end() || st->second.done >= es.seq) return false;
    flush(st->second, es.seq);
    return true;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto ev = events.find(e);
    if (ev == events.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    event_state &es = ev->second;
    auto st = es.stream ? streams.find(es.stream) : streams.end();
    if (st != streams.end() && st->second.done < es.seq && !es.queried) {
        es.queried = true;
        return cudaErrorNotReady;
    }
    complete(es);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto ev = events.find(e);
    if (ev == events.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    complete(ev->second);
    return cudaSuccess;
}

// A stream waits for an event: what the event waits for runs now, so the waiting stream's later ops come after it.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto ev = events.find(e);
    if (ev == events.end() || (s && !streams.count(s)))
        return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    complete(ev->second);
    return cudaSuccess;
}

// ---------------------------------------------------------------- cuBLAS

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t mode;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    h->mode = m;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    default: return "cuda_emu: unknown cuBLAS status";
    }
}

// The shape checks cuBLAS makes, and every operand inside device memory
// (column-major: op(A) m x k, op(B) k x n, C m x n).
static cublasStatus_t gemm_check(const char *fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 const void *A, size_t ea, int lda, const void *B, size_t eb, int ldb, const void *C,
                                 size_t ec, int ldc) {
    const int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    const int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1) ||
        (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) {
        fprintf(stderr, "cuda_emu: %s: invalid shape m %d n %d k %d lda %d ldb %d ldc %d\n", fn, m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    struct {
        const void *p;
        size_t bytes;
        const char *name;
    } ops[] = {{A, ca ? ((size_t)lda * (ca - 1) + ra) * ea : 0, "A"},
               {B, cb ? ((size_t)ldb * (cb - 1) + rb) * eb : 0, "B"},
               {C, n ? ((size_t)ldc * (n - 1) + m) * ec : 0, "C"}};
    for (auto &o : ops)
        if (o.bytes && !dev_range(o.p, o.bytes)) {
            fprintf(stderr, "cuda_emu: %s: operand %s (%p, %zu bytes) is not inside a device allocation\n", fn, o.name,
                    o.p, o.bytes);
            abort();
        }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    cublasStatus_t s = gemm_check("cublasSgemm", ta, tb, m, n, k, A, 4, lda, B, 4, ldb, C, 4, ldc);
    if (s != CUBLAS_STATUS_SUCCESS || !m || !n) return s;
    dev_open open;
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

// A column-major rows x cols operand (leading dimension ld) of type t as float32.
static std::vector<float> widen(const void *p, cudaDataType t, int rows, int cols, int ld) {
    std::vector<float> out((size_t)ld * (cols > 0 ? cols : 0));
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            const size_t i = (size_t)c * ld + r;
            if (t == CUDA_R_32F) {
                out[i] = ((const float *)p)[i];
            } else {
                const uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
                memcpy(&out[i], &bits, 4);
            }
        }
    return out;
}

cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t ct, cublasGemmAlgo_t) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto ok_type = [](cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; };
    if (!ok_type(Atype) || !ok_type(Btype) || Ctype != CUDA_R_32F ||
        (ct != CUBLAS_COMPUTE_32F && ct != CUBLAS_COMPUTE_32F_FAST_16BF && ct != CUBLAS_COMPUTE_32F_FAST_TF32)) {
        fprintf(stderr, "cuda_emu: cublasGemmEx: types A %d B %d C %d compute %d not emulated\n", (int)Atype,
                (int)Btype, (int)Ctype, (int)ct);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const size_t ea = Atype == CUDA_R_32F ? 4 : 2, eb = Btype == CUDA_R_32F ? 4 : 2;
    cublasStatus_t s = gemm_check("cublasGemmEx", ta, tb, m, n, k, A, ea, lda, B, eb, ldb, C, 4, ldc);
    if (s != CUBLAS_STATUS_SUCCESS || !m || !n) return s;
    dev_open open;
    const int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    const int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    std::vector<float> a = widen(A, Atype, ra, ca, lda), b = widen(B, Btype, rb, cb, ldb);
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                m, n, k, *(const float *)alpha, a.data(), lda, b.data(), ldb, *(const float *)beta, (float *)C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                                          long long sa, const void *B, cudaDataType Btype, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc, long long sc,
                                          int batch, cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (batch < 0) {
        fprintf(stderr, "cuda_emu: cublasGemmStridedBatchedEx: batch count %d\n", batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const size_t ea = Atype == CUDA_R_32F ? 4 : 2, eb = Btype == CUDA_R_32F ? 4 : 2;
    for (int i = 0; i < batch; i++) { /* one product after another, as the device's result defines them */
        cublasStatus_t s = cublasGemmEx(h, ta, tb, m, n, k, alpha, (const char *)A + (size_t)(sa * i) * ea, Atype, lda,
                                        (const char *)B + (size_t)(sb * i) * eb, Btype, ldb, beta,
                                        (char *)C + (size_t)(sc * i) * 4, Ctype, ldc, ct, algo);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
