// cuda_emu.cpp — the CPU emulation of the CUDA runtime and cuBLAS calls the
// backend makes (backends/cuda/), for tests without a GPU (see cuda_emu.h):
// device memory, copies, streams and events, error state, kernel launches
// (queued on their stream; the grid run block by block in a permuted order,
// each block's threads as coroutines), and cuBLAS's sgemm and GemmEx through
// OpenBLAS (column-major, as cuBLAS). Linked instead of cudart and cuBLAS into
// the emulated test binaries only; never into mechprobe.
//
// Device memory is mmap'ed apart from the host's, PROT_NONE except while a
// kernel, a copy or a cuBLAS call runs, with a PROT_NONE page after each
// allocation: host code that reads device memory, or a kernel that runs off
// an allocation's end, stops with a message naming the allocation.
// Misuse the real runtime would also refuse (a copy whose direction does not
// match its pointers, a range past an allocation, a bad launch shape, a
// kernel given a host pointer, an allocation past the device's memory) is
// reported on stderr; the call fails as the real one would, or, where the
// device would fault or the result would be undefined (memory freed under
// queued work, a divergent barrier, a shuffle from an exited lane), the
// process aborts with a message naming the kernel or the call.
#include "cuda_emu.h"

#include <cblas.h>
#include <cublas_v2.h>

#include <cmath>
#include <deque>
#include <map>
#include <string>
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
    const char *site; // where it waits (WAIT_BLOCK, WAIT_WARP): file:line of the barrier or shuffle
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

void sync_block(const char *site) {
    th[cur].state = WAIT_BLOCK;
    th[cur].site = site;
    to_scheduler(false);
}

void sync_warp(const char *site) {
    th[cur].state = WAIT_WARP;
    th[cur].site = site;
    to_scheduler(false);
}

uint64_t *exchange_slot(unsigned tid) { return &xch[tid]; }

// A shuffle reads lane src of the caller's warp: one that has returned (or is
// past the block's last thread) has no value to give (undefined on a device).
void check_shfl_source(unsigned tid, unsigned src, const char *site) {
    if (src < n_threads && th[src].state != DONE) return;
    fprintf(stderr,
            "cuda_emu: kernel %s, block (%u, %u, %u): thread %u's warp shuffle at %s reads lane %u, which %s\n",
            cur_kernel, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, tid, site, src & 31u,
            src < n_threads ? "has exited" : "does not exist (the block is not a whole number of warps)");
    abort();
}

// The threads [i0, i1) that wait in `state` all wait at one call site, or the process aborts.
static void check_sites(unsigned i0, unsigned i1, int state, const char *what) {
    const char *first = nullptr;
    unsigned fi = 0;
    for (unsigned i = i0; i < i1; i++) {
        if (th[i].state != state) continue;
        if (!first) {
            first = th[i].site, fi = i;
        } else if (strcmp(first, th[i].site) != 0) {
            fprintf(stderr,
                    "cuda_emu: kernel %s, block (%u, %u, %u): divergent %s: thread %u waits at %s, thread %u at %s\n",
                    cur_kernel, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, what, fi, first, i, th[i].site);
            abort();
        }
    }
}

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
                check_sites(w0, w1, WAIT_WARP, "warp shuffle");
                for (unsigned i = w0; i < w1; i++) // the warp's shuffle completes (its returned lanes stay so)
                    if (th[i].state == WAIT_WARP) th[i].state = READY;
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
            check_sites(0, n_threads, WAIT_BLOCK, "__syncthreads");
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

static uint64_t launches; // launches so far: each permutes its blocks differently

static uint64_t mix(uint64_t x) { // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Runs the grid now: every block, in an order permuted by the launch's number
// (a device promises no order between blocks), its threads as coroutines.
static void run_grid(const char *kernel, dim3 grid, dim3 block, uint64_t launch_no, const std::function<void()> &body) {
    const unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    cur_kernel = kernel;
    cur_body = [](void *p) { (*(const std::function<void()> *)p)(); };
    cur_ctx = (void *)&body;
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
    const uint64_t nb = (uint64_t)grid.x * grid.y * grid.z;
    std::vector<uint64_t> order(nb);
    for (uint64_t i = 0; i < nb; i++) order[i] = i;
    uint64_t r = mix(launch_no ^ 0x6d70636575ull);
    for (uint64_t i = nb; i > 1; i--) { // Fisher-Yates
        r = mix(r);
        std::swap(order[i - 1], order[r % i]);
    }
    for (uint64_t k = 0; k < nb; k++) {
        const uint64_t b = order[k];
        g_blockIdx.x = (unsigned)(b % grid.x);
        g_blockIdx.y = (unsigned)(b / grid.x % grid.y);
        g_blockIdx.z = (unsigned)(b / ((uint64_t)grid.x * grid.y));
        run_block(k & 1);
    }
    cur_kernel = "";
}

// ---------------------------------------------------------------- streams
//
// Every kernel, copy, memset and cuBLAS call is an op queued on its stream and
// run when the stream is synchronized, an event recorded after it is
// synchronized or waited on by another stream or queried a second time (the
// first query of a pending event answers cudaErrorNotReady), or the device is
// synchronized. The legacy default stream (0) takes cudaMemcpy and cudaMemset;
// it waits for the blocking streams and they for it, but a stream created
// with cudaStreamNonBlocking never waits for it: a kernel there that reads
// what a cudaMemcpy wrote, with no synchronization between, sees the old data.
// Copies from pageable host memory read it when called (the runtime stages
// it); to pageable host memory they run the stream first and finish before
// returning (both as the runtime does). Copies from or to pinned memory
// (cudaMallocHost) touch it only when they run.

struct op {
    std::function<void()> run;
    std::vector<const void *> uses; // the device allocations and pinned blocks it reads or writes (their bases)
    std::string what;
};
struct stream_state {
    bool nonblocking = false;
    std::deque<op> q; // not yet run; q[i] is op number done + i
    uint64_t enq = 0, done = 0; // ops enqueued / run
};
static std::map<cudaStream_t, stream_state> streams; // the legacy stream under nullptr

static cudaStream_t canon(cudaStream_t s) { return s == cudaStreamLegacy || s == cudaStreamPerThread ? nullptr : s; }
static stream_state *find_stream(cudaStream_t s) {
    auto it = streams.find(canon(s));
    if (it != streams.end()) return &it->second;
    if (!canon(s)) return &streams[nullptr];
    return nullptr;
}

static void flush(stream_state &ss, uint64_t upto) {
    if (ss.done >= upto || ss.q.empty()) return;
    dev_open open; // once for the batch: opening and closing device memory is an mprotect of every allocation
    while (ss.done < upto && !ss.q.empty()) {
        op o = std::move(ss.q.front());
        ss.q.pop_front();
        ss.done++;
        o.run();
    }
}

// What a legacy-stream op (or a host-synchronous call on it) waits for: the legacy stream's own work and every
// blocking stream's.
static void flush_legacy() {
    for (auto &kv : streams)
        if (kv.first && !kv.second.nonblocking) flush(kv.second, kv.second.enq);
    stream_state &l = streams[nullptr];
    flush(l, l.enq);
}

// The base of the device allocation or pinned block holding p (nullptr: neither).
static const void *use_of(const void *p) {
    if (const allocation *a = find_dev(p)) return a->p;
    auto it = pinned.upper_bound((void *)p);
    if (it == pinned.begin()) return nullptr;
    --it;
    return (const char *)p >= (const char *)it->first && (const char *)p < (const char *)it->first + (it->second ? it->second : 1)
               ? it->first
               : nullptr;
}

static cudaError_t enqueue(cudaStream_t s, std::function<void()> run, std::vector<const void *> ptrs, std::string what) {
    stream_state *ss = find_stream(s);
    if (!ss) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    if (!canon(s)) { // the legacy stream waits for the blocking streams
        for (auto &kv : streams)
            if (kv.first && !kv.second.nonblocking) flush(kv.second, kv.second.enq);
    } else if (!ss->nonblocking) { // a blocking stream waits for the legacy stream
        stream_state &l = streams[nullptr];
        flush(l, l.enq);
    }
    op o{std::move(run), {}, std::move(what)};
    for (const void *p : ptrs)
        if (const void *u = use_of(p)) o.uses.push_back(u);
    ss = find_stream(s); // (streams[] above may have grown the map: find again)
    ss->q.push_back(std::move(o));
    ss->enq++;
    return cudaSuccess;
}

// Memory about to be freed (base, device or pinned) that a queued op uses: the process aborts.
static void check_unused(const void *base, const char *call) {
    for (auto &kv : streams)
        for (const op &o : kv.second.q)
            for (const void *u : o.uses)
                if (u == base) {
                    fprintf(stderr, "cuda_emu: %s(%p) while %s queued on %s %p still uses it: free it after "
                                    "synchronizing that stream\n",
                            call, base, o.what.c_str(), kv.first ? "stream" : "the legacy stream", (void *)kv.first);
                    abort();
                }
}

// What ptxas gave each kernel (tests/cuda_emu/resources.sh, run on the backend's
// sources at build time): registers per thread and static shared memory. The
// file is MP_CUDA_EMU_RESOURCES (environment), else the build's table.
#ifndef MP_CUDA_EMU_RESOURCES_FILE
#define MP_CUDA_EMU_RESOURCES_FILE ""
#endif
struct kernel_resources {
    unsigned regs, smem;
};
static std::map<std::string, kernel_resources> resources;
static void load_resources() {
    static bool done;
    if (done) return;
    done = true;
    const char *e = getenv("MP_CUDA_EMU_RESOURCES");
    const char *path = e && *e ? e : MP_CUDA_EMU_RESOURCES_FILE;
    FILE *f = *path ? fopen(path, "r") : nullptr;
    if (!f) return;
    char name[256];
    unsigned regs, smem;
    while (fscanf(f, "%255s %u %u", name, &regs, &smem) == 3) resources[name] = {regs, smem};
    fclose(f);
}

// A launch the device would refuse for its resources: a block's registers (per
// thread as ptxas allocated them, rounded to the 256 a warp is given at a time)
// past the 65536 of an SM, or its shared memory past the 48 KiB a block gets
// without opting in (MP_LAUNCH asks for no dynamic shared memory).
static bool resources_fit(const char *kernel, unsigned long long nt) {
    load_resources();
    auto it = resources.find(kernel);
    if (it == resources.end()) return true;
    const unsigned long long per_warp = (it->second.regs * 32ull + 255) / 256 * 256, warps = (nt + 31) / 32;
    if (warps * per_warp > 65536) {
        fprintf(stderr, "cuda_emu: kernel %s: %llu threads of %u registers (%llu per warp) need %llu registers, more "
                        "than a block's 65536\n",
                kernel, nt, it->second.regs, per_warp, warps * per_warp);
        fail(cudaErrorLaunchOutOfResources);
        return false;
    }
    if (it->second.smem > 48 * 1024) {
        fprintf(stderr, "cuda_emu: kernel %s: %u bytes of shared memory, more than a block's 49152\n", kernel,
                it->second.smem);
        fail(cudaErrorInvalidValue);
        return false;
    }
    return true;
}

void launch(const char *kernel, dim3 grid, dim3 block, cudaStream_t s, std::function<void()> body,
            std::vector<const void *> uses) {
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
    if (!resources_fit(kernel, nt)) return;
    const uint64_t no = launches++;
    auto b = std::make_shared<std::function<void()>>(std::move(body));
    enqueue(s, [kernel, grid, block, no, b]() { run_grid(kernel, grid, block, no, *b); }, std::move(uses),
            std::string("kernel ") + kernel);
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
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotReady: return "device not ready";
    default: return "cuda_emu: unknown error";
    }
}

// The emulated device's memory: 80 GiB (an H100's), MP_CUDA_EMU_MEM bytes, or what a test sets.
static size_t dev_used, dev_limit;
static size_t mem_limit() {
    if (!dev_limit) {
        const char *e = getenv("MP_CUDA_EMU_MEM");
        dev_limit = e && *e ? (size_t)strtoull(e, nullptr, 10) : (size_t)80 << 30;
    }
    return dev_limit;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    init_once();
    *p = nullptr;
    if (dev_used > mem_limit() || n > mem_limit() - dev_used) {
        fail(cudaErrorMemoryAllocation);
        return cudaErrorMemoryAllocation;
    }
    const size_t want = (n + 15) & ~(size_t)15;
    const size_t data = ((want ? want : 16) + page_size - 1) / page_size * page_size;
    char *m = (char *)mmap(nullptr, data + page_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fail(cudaErrorMemoryAllocation);
        return cudaErrorMemoryAllocation;
    }
    allocation a{m, data + page_size, m + data - want, n};
    dev[(uintptr_t)a.p] = a;
    dev_used += n;
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
    check_unused(p, "cudaFree");
    dev_used -= it->second.n;
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
    if (!pinned.count(p)) {
        fprintf(stderr, "cuda_emu: cudaFreeHost(%p): not from cudaMallocHost\n", p);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    check_unused(p, "cudaFreeHost");
    pinned.erase(p);
    free(p);
    return cudaSuccess;
}

} // extern "C"

static bool pinned_range(const void *p, size_t n) {
    auto it = pinned.upper_bound((void *)p);
    if (it == pinned.begin()) return false;
    --it;
    return (const char *)p >= (const char *)it->first && (const char *)p + n <= (const char *)it->first + it->second;
}

// The kind a copy's pointers say (cudaMemcpyDefault), and whether they fit it: device sides inside one allocation.
static bool copy_ok(void *dst, const void *src, size_t n, cudaMemcpyKind &kind) {
    const bool dd = find_dev(dst) != nullptr, sd = find_dev(src) != nullptr;
    if (kind == cudaMemcpyDefault)
        kind = sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost) : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    switch (kind) {
    case cudaMemcpyHostToDevice: return !sd && dd && dev_range(dst, n);
    case cudaMemcpyDeviceToHost: return sd && !dd && dev_range(src, n);
    case cudaMemcpyDeviceToDevice: return sd && dd && dev_range(src, n) && dev_range(dst, n);
    case cudaMemcpyHostToHost: return !sd && !dd;
    default: return false;
    }
}

// A copy on stream s (legacy: nullptr). Pageable sources are read now; a copy to pageable memory runs its stream
// first and finishes now; everything else runs in stream order.
static cudaError_t copy_on(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s, const char *call) {
    if (!n) return cudaSuccess;
    if (!copy_ok(dst, src, n, kind)) {
        fprintf(stderr, "cuda_emu: %s of %zu bytes, kind %d, from %p to %p: the pointers do not match the kind or run "
                        "past an allocation\n",
                call, n, (int)kind, src, dst);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    stream_state *ss = find_stream(s);
    if (!ss) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) && !pinned_range(dst, n)) {
        if (canon(s)) flush(*ss, ss->enq);
        else flush_legacy();
        dev_open open;
        memmove(dst, src, n);
        return cudaSuccess;
    }
    if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) && !pinned_range(src, n)) {
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        return enqueue(s, [dst, staged]() { memcpy(dst, staged->data(), staged->size()); }, {dst}, call);
    }
    return enqueue(s, [dst, src, n]() { memmove(dst, src, n); }, {dst, src}, call);
}

static cudaError_t memset_on(void *dst, int v, size_t n, cudaStream_t s, const char *call) {
    if (!n) return cudaSuccess;
    if (!dev_range(dst, n)) {
        fprintf(stderr, "cuda_emu: %s of %zu bytes at %p: not inside a device allocation\n", call, n, dst);
        fail(cudaErrorInvalidValue);
        return cudaErrorInvalidValue;
    }
    return enqueue(s, [dst, v, n]() { memset(dst, v, n); }, {dst}, call);
}

extern "C" {

// cudaMemcpy: on the legacy stream, after its work; from pageable memory it returns once the source is staged
// (the device copy may still be queued), to the host once done.
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    flush_legacy();
    return copy_on(dst, src, n, kind, nullptr, "cudaMemcpy");
}

// cudaMemcpy2D: height rows of width bytes, dpitch and spitch bytes apart, each as cudaMemcpy copies it.
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (width > dpitch || width > spitch) {
        fprintf(stderr, "cuda_emu: cudaMemcpy2D: width %zu bytes exceeds a pitch (%zu, %zu)\n", width, dpitch, spitch);
        fail(cudaErrorInvalidPitchValue);
        return cudaErrorInvalidPitchValue;
    }
    flush_legacy();
    for (size_t r = 0; r < height; r++) {
        const cudaError_t e =
            copy_on((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind, nullptr, "cudaMemcpy2D");
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    return copy_on(dst, src, n, kind, s, "cudaMemcpyAsync");
}

cudaError_t cudaMemset(void *dst, int v, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    return memset_on(dst, v, n, nullptr, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    return memset_on(dst, v, n, s, "cudaMemsetAsync");
}

void cuda_emu_set_mem_limit(size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    dev_limit = bytes;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    *s = (cudaStream_t)malloc(1);
    streams[*s].nonblocking = (flags & cudaStreamNonBlocking) != 0;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int) {
    return cudaStreamCreateWithFlags(s, flags);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}

// The stream's work still completes (run now); the handle is gone.
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = canon(s) ? streams.find(s) : streams.end();
    if (it == streams.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    flush(it->second, it->second.enq);
    streams.erase(it);
    free((void *)s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!canon(s)) return flush_legacy(), cudaSuccess;
    stream_state *ss = find_stream(s);
    if (!ss) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    flush(*ss, ss->enq);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    for (bool more = true; more;) { // (an op never queues another, but stay safe)
        more = false;
        for (auto &kv : streams) {
            more |= kv.second.done < kv.second.enq;
            flush(kv.second, kv.second.enq);
        }
    }
    return cudaSuccess;
}

struct event_state {
    bool recorded = false;
    cudaStream_t stream = nullptr; // where it was last recorded (canonical: nullptr is the legacy stream)
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
    stream_state *ss = find_stream(s);
    if (ev == events.end() || !ss) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    if (!canon(s)) flush_legacy(); // (the legacy stream's record waits for the blocking streams: run them now)
    ev->second.recorded = true;
    ev->second.stream = canon(s);
    ev->second.seq = ss->enq;
    ev->second.queried = false;
    return cudaSuccess;
}

static stream_state *event_stream(const event_state &es) {
    if (!es.recorded) return nullptr;
    auto st = streams.find(es.stream);
    return st == streams.end() ? nullptr : &st->second;
}

// runs what event e waits for
static void complete(event_state &es) {
    if (stream_state *ss = event_stream(es)) flush(*ss, es.seq);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto ev = events.find(e);
    if (ev == events.end()) return fail(cudaErrorInvalidResourceHandle), cudaErrorInvalidResourceHandle;
    event_state &es = ev->second;
    stream_state *ss = event_stream(es);
    if (ss && ss->done < es.seq && !es.queried) {
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
    if (ev == events.end() || !find_stream(s))
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

// fp32 inputs of a tensor-core compute type as the tensor cores read them: TF32 keeps 10 mantissa bits, fast
// bf16 7 (rounded to nearest, ties away from zero, as cvt.rna does).
static float round_mantissa(float x, int keep) {
    if (!std::isfinite(x)) return x;
    uint32_t b;
    memcpy(&b, &x, 4);
    const int drop = 23 - keep;
    b += 1u << (drop - 1);
    b &= ~((1u << drop) - 1);
    memcpy(&x, &b, 4);
    return x;
}
static int kept_bits(cublasComputeType_t ct) {
    return ct == CUBLAS_COMPUTE_32F_FAST_TF32 ? 10 : ct == CUBLAS_COMPUTE_32F_FAST_16BF ? 7 : 23;
}

// A column-major rows x cols operand (leading dimension ld) of type t as float32, fp32 values rounded to `keep`
// mantissa bits (23: as they are).
static std::vector<float> widen(const void *p, cudaDataType t, int rows, int cols, int ld, int keep) {
    std::vector<float> out((size_t)ld * (cols > 0 ? cols : 0));
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            const size_t i = (size_t)c * ld + r;
            if (t == CUDA_R_32F) {
                out[i] = keep < 23 ? round_mantissa(((const float *)p)[i], keep) : ((const float *)p)[i];
            } else {
                const uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
                memcpy(&out[i], &bits, 4);
            }
        }
    return out;
}

// Queues C = alpha op(A) op(B) + beta C on the handle's stream (alpha and beta read now: host pointer mode).
static void gemm_queue(cublasHandle_t h, const char *fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, float alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                       int ldb, float beta, float *C, int ldc, int keep) {
    enqueue(h->stream,
            [=]() {
                const int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
                const int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
                const CBLAS_TRANSPOSE oa = ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
                const CBLAS_TRANSPOSE ob = tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
                if (at == CUDA_R_32F && bt == CUDA_R_32F && keep == 23) {
                    cblas_sgemm(CblasColMajor, oa, ob, m, n, k, alpha, (const float *)A, lda, (const float *)B, ldb,
                                beta, C, ldc);
                    return;
                }
                std::vector<float> a = widen(A, at, ra, ca, lda, keep), b = widen(B, bt, rb, cb, ldb, keep);
                cblas_sgemm(CblasColMajor, oa, ob, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
            },
            {A, B, C}, fn);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    cublasStatus_t s = gemm_check("cublasSgemm", ta, tb, m, n, k, A, 4, lda, B, 4, ldb, C, 4, ldc);
    if (s != CUBLAS_STATUS_SUCCESS || !m || !n) return s;
    const int keep = (h->mode & CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_TF32_TENSOR_OP_MATH ? 10 : 23;
    gemm_queue(h, "cublasSgemm", ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *beta, C, ldc, keep);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
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
    gemm_queue(h, "cublasGemmEx", ta, tb, m, n, k, *(const float *)alpha, A, Atype, lda, B, Btype, ldb,
               *(const float *)beta, (float *)C, ldc, kept_bits(ct));
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
