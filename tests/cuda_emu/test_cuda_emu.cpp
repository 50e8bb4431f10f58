// test_cuda_emu.cpp — the CUDA emulator's strictness (cuda_emu.h), each shown
// on a planted defect: a small kernel or call sequence that is wrong on a
// device, and what the emulator does with it (a result that differs, a
// failed call, or an abort whose message names the defect), beside the
// correct version, which passes. Cases that abort run in a child process.
#include "cuda_emu.h"

#include <cublas_v2.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

static int failures, checks;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

// Runs fn in a child; whether it aborted, and its stderr.
static bool aborts(void (*fn)(), std::string &err) {
    int p[2];
    if (pipe(p) != 0) return false;
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        fn();
        _exit(0);
    }
    close(p[1]);
    char buf[4096];
    ssize_t n;
    err.clear();
    while ((n = read(p[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)n);
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

// ---- planted kernels

__global__ static void k_last_writer(int *out) {
    if (threadIdx.x == 0) *out = (int)blockIdx.x; // defect: which block writes last is not defined
}

__global__ static void k_atomic_sum(float *out, const float *v) {
    if (threadIdx.x == 0) atomicAdd(out, v[blockIdx.x]); // defect: a float sum in block order
}

__global__ static void k_copy(float *out, const float *in, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}

__global__ static void k_shfl_after_exit(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x == 31) return; // defect: lane 31 leaves, lane 30 then reads it
    v += __shfl_down_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

__global__ static void k_shfl_guarded(float *out) { // the correct version: every lane shuffles, the work is guarded
    float v = (float)threadIdx.x;
    v += __shfl_down_sync(0xffffffffu, v, 1);
    if (threadIdx.x != 31) out[threadIdx.x] = v;
}

__global__ static void k_shfl_partial_warp(float *out) {
    float v = (float)threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); // defect: a 48-thread block
    out[threadIdx.x] = v;
}

__global__ static void k_divergent_barrier(float *out) {
    __shared__ float sh[64];
    sh[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x < 16) __syncthreads(); // defect: two barriers, each reached by part of the block
    else __syncthreads();
    out[threadIdx.x] = sh[63 - threadIdx.x];
}

__global__ static void k_heavy(float *out) { out[threadIdx.x] = 1.0f; } // given 128 registers by a planted table
__global__ static void k_big_shared(float *out) { out[threadIdx.x] = 1.0f; } // given 64 KiB of shared memory

// ---- cases

static float *dev_alloc(size_t n) {
    float *p = nullptr;
    if (cudaMalloc((void **)&p, n * sizeof(float)) != cudaSuccess) abort();
    return p;
}

static void block_order() {
    int *d;
    cudaMalloc((void **)&d, sizeof(int));
    int seen[8], differ = 0, not_last = 0;
    for (int i = 0; i < 8; i++) {
        MP_LAUNCH(k_last_writer, 64, 32, nullptr)(d);
        cudaMemcpy(&seen[i], d, sizeof(int), cudaMemcpyDeviceToHost);
        differ += i > 0 && seen[i] != seen[0];
        not_last += seen[i] != 63;
    }
    CHECK(differ > 0 && not_last > 0, "the last writer of 64 blocks was block %d in all 8 launches", seen[0]);
    // a float sum whose rounding depends on the order: 1e8 and 1s
    float v[64], *dv = dev_alloc(64), *ds = dev_alloc(1);
    for (int i = 0; i < 64; i++) v[i] = i % 2 ? 1.0f : (i % 4 ? -1e8f : 1e8f);
    cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice);
    float sums[8];
    int sdiffer = 0;
    for (int i = 0; i < 8; i++) {
        cudaMemset(ds, 0, sizeof(float));
        MP_LAUNCH(k_atomic_sum, 64, 32, nullptr)(ds, dv);
        cudaMemcpy(&sums[i], ds, sizeof(float), cudaMemcpyDeviceToHost);
        sdiffer += sums[i] != sums[0];
    }
    CHECK(sdiffer > 0, "8 launches of an atomicAdd float sum gave the same %g", sums[0]);
    cudaFree(d), cudaFree(dv), cudaFree(ds);
}

static void legacy_copy() {
    const int n = 64;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *buf = dev_alloc(n), *out = dev_alloc(n), host[64], got[64];
    cudaMemsetAsync(buf, 0, n * sizeof(float), s);
    cudaStreamSynchronize(s);
    for (int i = 0; i < n; i++) host[i] = 1.0f + (float)i;
    // defect: cudaMemcpy goes to the legacy stream, which a non-blocking stream does not wait for
    cudaMemcpy(buf, host, sizeof host, cudaMemcpyHostToDevice);
    MP_LAUNCH(k_copy, 1, 64, s)(out, buf, n);
    cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost, s); // pageable: finished on return
    CHECK(got[5] == 0.0f, "a kernel on a non-blocking stream saw a legacy-stream copy (%g)", got[5]);
    cudaDeviceSynchronize(); // now the legacy copy has run
    MP_LAUNCH(k_copy, 1, 64, s)(out, buf, n);
    cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost, s);
    CHECK(got[5] == 6.0f, "after a device synchronize: %g", got[5]);
    // the correct version: the copy on the kernel's stream
    for (int i = 0; i < n; i++) host[i] = 100.0f + (float)i;
    cudaMemcpyAsync(buf, host, sizeof host, cudaMemcpyHostToDevice, s);
    MP_LAUNCH(k_copy, 1, 64, s)(out, buf, n);
    cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost, s);
    CHECK(got[5] == 105.0f, "a copy on the kernel's stream: %g", got[5]);
    // a copy to pinned memory lands only when the stream is synchronized
    float *pin;
    cudaMallocHost((void **)&pin, sizeof got);
    pin[5] = -1.0f;
    cudaMemcpyAsync(pin, out, sizeof got, cudaMemcpyDeviceToHost, s);
    CHECK(pin[5] == -1.0f, "a pinned copy had run before its stream was synchronized (%g)", pin[5]);
    cudaStreamSynchronize(s);
    CHECK(pin[5] == 105.0f, "a pinned copy after its stream's synchronize: %g", pin[5]);
    cudaFreeHost(pin);
    cudaFree(buf), cudaFree(out);
    cudaStreamDestroy(s);
}

static void free_under_queued_work() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *a = dev_alloc(32), *b = dev_alloc(32);
    MP_LAUNCH(k_copy, 1, 32, s)(b, a, 32);
    cudaFree(a); // defect: the queued kernel still reads a
}

static void free_after_sync() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *a = dev_alloc(32), *b = dev_alloc(32);
    MP_LAUNCH(k_copy, 1, 32, s)(b, a, 32);
    cudaStreamSynchronize(s);
    cudaFree(a), cudaFree(b);
    cudaStreamDestroy(s);
}

static void shfl_after_exit() {
    float *o = dev_alloc(32);
    MP_LAUNCH(k_shfl_after_exit, 1, 32, nullptr)(o);
    cudaDeviceSynchronize();
}
static void shfl_guarded() {
    float *o = dev_alloc(32);
    MP_LAUNCH(k_shfl_guarded, 1, 32, nullptr)(o);
    cudaDeviceSynchronize();
}
static void shfl_partial_warp() {
    float *o = dev_alloc(48);
    MP_LAUNCH(k_shfl_partial_warp, 1, 48, nullptr)(o);
    cudaDeviceSynchronize();
}
static void divergent_barrier() {
    float *o = dev_alloc(64);
    MP_LAUNCH(k_divergent_barrier, 1, 64, nullptr)(o);
    cudaDeviceSynchronize();
}

static void tf32() {
    cublasHandle_t h;
    cublasCreate_v2(&h);
    float *a = dev_alloc(1), *b = dev_alloc(1), *c = dev_alloc(1);
    const float one = 1.0f, zero = 0.0f;
    const float cases[3][2] = {{1.0f + 0x1p-12f, 1.0f}, {1.0f + 3 * 0x1p-12f, 1.0f + 0x1p-10f}, {1.0f + 0x1p-11f, 1.0f + 0x1p-10f}};
    for (auto &cs : cases) { // TF32 keeps 10 mantissa bits, rounding to nearest (ties away from zero)
        float got = 0.0f;
        cudaMemcpy(a, &cs[0], 4, cudaMemcpyHostToDevice);
        cudaMemcpy(b, &one, 4, cudaMemcpyHostToDevice);
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, CUDA_R_32F, 1, b, CUDA_R_32F, 1, &zero, c,
                     CUDA_R_32F, 1, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(&got, c, 4, cudaMemcpyDeviceToHost);
        CHECK(got == cs[1], "TF32 product of %.9g: %.9g, %.9g expected", cs[0], got, cs[1]);
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, CUDA_R_32F, 1, b, CUDA_R_32F, 1, &zero, c,
                     CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(&got, c, 4, cudaMemcpyDeviceToHost);
        CHECK(got == cs[0], "fp32 product of %.9g: %.9g", cs[0], got);
    }
    cublasDestroy_v2(h);
    cudaFree(a), cudaFree(b), cudaFree(c);
}

static void out_of_memory() {
    (void)cudaGetLastError();
    cuda_emu_set_mem_limit(1 << 20);
    void *p = nullptr, *q = nullptr;
    CHECK(cudaMalloc(&p, 512 << 10) == cudaSuccess, "half the capped memory");
    CHECK(cudaMalloc(&q, 768 << 10) == cudaErrorMemoryAllocation && !q, "past the capped memory");
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "the failed allocation is the last error");
    CHECK(cudaGetLastError() == cudaSuccess, "cleared once read");
    cudaFree(p);
    CHECK(cudaMalloc(&q, 768 << 10) == cudaSuccess, "after the free");
    cudaFree(q);
    cuda_emu_set_mem_limit(0);
}

// run with MP_CUDA_EMU_RESOURCES pointing at a planted table (main re-executes itself)
static void launch_resources() {
    float *o = dev_alloc(1024);
    (void)cudaGetLastError();
    MP_LAUNCH(k_heavy, 1, 512, nullptr)(o); // 16 warps x 4096 = 65536 registers: fits
    CHECK(cudaGetLastError() == cudaSuccess, "512 threads of 128 registers refused");
    MP_LAUNCH(k_heavy, 1, 1024, nullptr)(o); // defect: 131072 registers
    CHECK(cudaGetLastError() == cudaErrorLaunchOutOfResources, "1024 threads of 128 registers accepted");
    MP_LAUNCH(k_big_shared, 1, 32, nullptr)(o); // defect: 64 KiB of static shared memory
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB of shared memory accepted");
    cudaDeviceSynchronize();
    cudaFree(o);
}

static void expect_abort(void (*fn)(), const char *label, const char *message) {
    std::string err;
    const bool ab = aborts(fn, err);
    CHECK(ab && err.find(message) != std::string::npos, "%s: %s, stderr: %s", label, ab ? "aborted" : "did not abort",
          err.c_str());
}

static void expect_clean(void (*fn)(), const char *label) {
    std::string err;
    const bool ab = aborts(fn, err);
    CHECK(!ab && err.empty(), "%s: %s, stderr: %s", label, ab ? "aborted" : "ran", err.c_str());
}

int main(int argc, char **argv) {
    if (argc > 1 && std::string(argv[1]) == "--resources") { // the planted table's run
        launch_resources();
        printf("test_cuda_emu --resources: %d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
    }
    block_order();
    legacy_copy();
    tf32();
    out_of_memory();
    expect_abort(free_under_queued_work, "cudaFree under a queued kernel", "still uses it");
    expect_clean(free_after_sync, "cudaFree after the stream's synchronize");
    expect_abort(shfl_after_exit, "a shuffle from an exited lane", "which has exited");
    expect_clean(shfl_guarded, "a shuffle with every lane, the work guarded");
    expect_abort(shfl_partial_warp, "a shuffle in a 48-thread block", "does not exist");
    expect_abort(divergent_barrier, "__syncthreads at two call sites", "divergent __syncthreads");
    // the launch-resource checks on a planted table, in a fresh process (the table is read once)
    char table[] = "/tmp/test_cuda_emu_res.XXXXXX";
    const int fd = mkstemp(table);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        const char rows[] = "k_heavy 128 0\nk_big_shared 16 65536\n";
        CHECK(write(fd, rows, sizeof rows - 1) == (ssize_t)(sizeof rows - 1), "write the table");
        close(fd);
        std::string cmd = std::string("MP_CUDA_EMU_RESOURCES=") + table + " '" + argv[0] + "' --resources";
        const int rc = system(cmd.c_str());
        CHECK(rc == 0, "the planted resource table's run: status %d", rc);
        unlink(table);
    }
    printf("test_cuda_emu: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
