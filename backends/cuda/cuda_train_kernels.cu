// cuda_train_kernels.cu — the CUDA backend's training kernels (launchers
// declared in cuda_kernels.h): the backward of each op the forward kernels
// compute, the cross-entropy, and AdamW with its gradient-norm clipping. Each
// mirrors one function of runtime/ops_backward.c or optim.c, with the same
// formulas, in float32 with float32 accumulation (tree reductions); gradient
// outputs accumulate (+=) as on the CPU. The attention's products run in
// cuBLAS (cuda_model.c); here are its row kernels: the pattern recomputed
// from each row's log-sum-exp (k_attn_recompute) and the softmax backward
// (k_attn_softmax_bwd), for the blocked attention and the stored pattern.
#include "cuda_kernels.h"
#include "cuda_common.cuh"

#include <stdlib.h>

// ---- embedding, norms, linear bias ----

// Block j: dembed[ids[j], :] += dout[rows[k], :] for k in starts[j] .. starts[j+1]-1, in that order (the
// rows of one id, ascending: mp_cuk_embed_groups). One block owns each id's row, so no two blocks add to the
// same row and the sum's rounding is the same whatever order the blocks run in: a resumed step matches an
// uninterrupted one bit for bit, which atomicAdd's block-order-dependent sums would not.
__global__ static void k_embed_bwd(float *dembed, const float *dout, const int *rows, const int *starts, const int *ids,
                                   int D) {
    const int j = blockIdx.x;
    float *dst = dembed + (size_t)ids[j] * D;
    const int k0 = starts[j], k1 = starts[j + 1];
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float acc = dst[i];
        for (int k = k0; k < k1; k++) acc += dout[(size_t)rows[k] * D + i];
        dst[i] = acc;
    }
}

// Block n: the norm's input gradient of row n, accumulated (ops_backward.c):
// RMSNorm dx += r (g w - x c), c = r^2 mean(g w x); LayerNorm dx += r (g w -
// mean(g w) - xhat mean(g w xhat)), xhat = (x - mu) r; r = 1 / scale[n] (the
// forward's k_norm_scale: scale = sqrt(mean((x - mu)^2) + eps)).
__global__ static void k_norm_bwd_dx(float *dx, const float *dout, const float *x, const float *w, const float *mean,
                                     const float *scale, int D, int layer) {
    __shared__ float sh[WARP];
    const size_t n = blockIdx.x;
    const float *xr = x + n * D, *g = dout + n * D;
    float *d = dx + n * D;
    const float r = 1.0f / scale[n], mu = layer ? mean[n] : 0.0f;
    float s1 = 0.0f, s2 = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float gw = g[i] * w[i];
        s1 += gw;
        s2 += layer ? gw * (xr[i] - mu) * r : gw * xr[i];
    }
    s2 = block_sum(s2, sh) / (float)D;
    if (layer) {
        s1 = block_sum(s1, sh) / (float)D;
        for (int i = threadIdx.x; i < D; i += blockDim.x) d[i] += r * (g[i] * w[i] - s1 - (xr[i] - mu) * r * s2);
    } else {
        const float c = s2 * r * r;
        for (int i = threadIdx.x; i < D; i += blockDim.x) d[i] += r * (g[i] * w[i] - xr[i] * c);
    }
}

// The norm's weight (and LayerNorm's bias) gradient, dw[i] += sum_n g x r
// (RMSNorm) or g (x - mu) r and db[i] += sum_n g (LayerNorm), in two
// deterministic stages. One thread per column walking all N rows gave D / 128
// blocks (4 for d 512): most of a large device idled while each thread summed
// N rows alone. Stage 1, k_norm_bwd_dw_part: block (tile, chunk) takes 32
// columns (a warp's lanes: each row's 32 floats are one coalesced read) by one
// chunk of rows; its NORM_DW_WARPS warps sum rows r0 + w, r0 + w + 8, ... of
// the chunk, then a tree in shared memory adds the warps' sums in a fixed
// order and the chunk's partial of each column goes to part (dw's [chunks, D],
// then db's). Stage 2, k_norm_bwd_dw_sum: a thread per column adds the chunks'
// partials in chunk order. No atomics and no order that depends on which
// block runs first: the same bits every run.
#define NORM_DW_WARPS 8
#define NORM_DW_ROWS 64    /* rows per chunk at least */
#define NORM_DW_CHUNKS 128 /* chunks at most (the workspace: 2 x 128 x D floats) */

static int norm_dw_chunks(int N) {
    const int c = (N + NORM_DW_ROWS - 1) / NORM_DW_ROWS;
    return c < 1 ? 1 : c > NORM_DW_CHUNKS ? NORM_DW_CHUNKS : c;
}

__global__ static void k_norm_bwd_dw_part(float *part, const float *dout, const float *x, const float *mean,
                                          const float *scale, int N, int D, int rows, int layer) {
    __shared__ float shw[NORM_DW_WARPS][WARP], shb[NORM_DW_WARPS][WARP];
    const int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    const int i = blockIdx.x * WARP + lane, chunk = blockIdx.y, chunks = gridDim.y;
    const int r0 = chunk * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float sw = 0.0f, sb = 0.0f;
    if (i < D) // columns past D: no work, but every thread reaches the barriers below
        for (int n = r0 + wid; n < r1; n += NORM_DW_WARPS) {
            const float g = dout[(size_t)n * D + i];
            sw += g * (x[(size_t)n * D + i] - (layer ? mean[n] : 0.0f)) / scale[n];
            sb += g;
        }
    shw[wid][lane] = sw;
    shb[wid][lane] = sb;
    __syncthreads();
    for (int h = NORM_DW_WARPS / 2; h > 0; h /= 2) { // warp w adds warp w + h's sums: a fixed tree
        if (wid < h) {
            shw[wid][lane] += shw[wid + h][lane];
            shb[wid][lane] += shb[wid + h][lane];
        }
        __syncthreads();
    }
    if (wid == 0 && i < D) {
        part[(size_t)chunk * D + i] = shw[0][lane];
        if (layer) part[((size_t)chunks + chunk) * D + i] = shb[0][lane];
    }
}

__global__ static void k_norm_bwd_dw_sum(float *dw, float *db, const float *part, int D, int chunks, int layer) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < D; i += gridDim.x * blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        for (int c = 0; c < chunks; c++) {
            sw += part[(size_t)c * D + i];
            if (layer) sb += part[((size_t)chunks + c) * D + i];
        }
        dw[i] += sw;
        if (layer) db[i] += sb;
    }
}

// A linear layer's bias gradient, dbias[o] += sum_n dout[n, o], in the same
// two deterministic stages as the norm's (and for the same reason): block
// (tile, chunk) sums 32 columns over one chunk of rows, its warps' sums added
// by a fixed tree into part [chunks, OUT]; k_norm_bwd_dw_sum then adds the
// chunks in order.
__global__ static void k_bias_bwd_part(float *part, const float *dout, int N, int OUT, int rows) {
    __shared__ float sh[NORM_DW_WARPS][WARP];
    const int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    const int o = blockIdx.x * WARP + lane, chunk = blockIdx.y;
    const int r0 = chunk * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float sb = 0.0f;
    if (o < OUT) // columns past OUT: no work, but every thread reaches the barriers below
        for (int n = r0 + wid; n < r1; n += NORM_DW_WARPS) sb += dout[(size_t)n * OUT + o];
    sh[wid][lane] = sb;
    __syncthreads();
    for (int h = NORM_DW_WARPS / 2; h > 0; h /= 2) {
        if (wid < h) sh[wid][lane] += sh[wid + h][lane];
        __syncthreads();
    }
    if (wid == 0 && o < OUT) part[(size_t)chunk * OUT + o] = sh[0][lane];
}

// ---- MLP activations ----

__global__ static void k_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                    size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), silu = g * sg;
        dgate[i] += dout[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
        dup[i] += dout[i] * silu;
    }
}

__global__ static void k_gelu_bwd(float *dx, const float *dout, const float *x, size_t n, int tanh_approx) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f, inv_sqrt_2pi = 0.39894228040143267794f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (tanh_approx) {
            const float th = tanhf(k0 * (v + k1 * v * v * v));
            const float dth = (1.0f - th * th) * k0 * (1.0f + 3.0f * k1 * v * v);
            dx[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * v * dth);
        } else {
            const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
            const float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
            dx[i] += dout[i] * (cdf + v * pdf);
        }
    }
}

// ---- cross-entropy ----

// Block n: p = softmax(logits[n]); loss[n] = -log p[t] (0 where t < 0);
// dlogits[n] = scale (p - onehot(t)), 0 where t < 0. dlogits may alias logits.
__global__ static void k_xent(float *dlogits, float *loss, const float *logits, const int *targets, int V,
                              float scale) {
    __shared__ float sh[WARP];
    const size_t n = blockIdx.x;
    const float *l = logits + n * V;
    float *d = dlogits + n * V;
    const int t = targets[n];
    if (t < 0) {
        for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = 0.0f;
        if (threadIdx.x == 0) loss[n] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, l[i]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(l[i] - mx);
    s = block_sum(s, sh);
    const float lt = l[t]; // every thread reads the target's logit before any writes
    __syncthreads();
    if (threadIdx.x == 0) loss[n] = logf(s) + mx - lt;
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = scale * (expf(l[i] - mx) * inv - (i == t ? 1.0f : 0.0f));
}

// ---- optimiser ----

// Block partial sums of g^2 (double), one per block of 256 threads, into part.
__global__ static void k_sumsq(double *part, const float *g, size_t n) {
    __shared__ double sh[256];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += (double)g[i] * g[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (unsigned i = 0; i < blockDim.x; i++) t += sh[i];
        part[blockIdx.x] = t;
    }
}

__global__ static void k_scale(float *x, size_t n, float a) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

// AdamW on one tensor (optim.c mp_adamw_update): p *= decay (where decayed),
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p -= step_size m / (sqrt(v) / bc2_sqrt + eps).
__global__ static void k_adamw(float *p, float *m, float *v, const float *g, size_t n, float b1, float b2, float eps,
                               float step_size, float bc2_sqrt, float decay, int dec) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float pi = p[i];
        if (dec) pi *= decay;
        const float gi = g[i];
        const float mi = m[i] * b1 + (1.0f - b1) * gi;
        const float vi = v[i] * b2 + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
}

// ---- launchers ----

// ---- the attention's row kernels (cuda_model.c attn_blocked, attn_stored_bwd) ----

// Block (i, h, b): row i of a block of query rows (t = q0 + i): the scores
// turned back into the pattern, exp(s - lse_t) on keys 0..t, 0 past them.
__global__ static void k_attn_recompute(float *P, const float *lse, int H, int T, int Tk, int q0, int rows,
                                        int window) {
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = q0 + i;
    float *a = P + (((size_t)b * H + h) * rows + i) * Tk;
    const float L = lse[((size_t)b * H + h) * T + t];
    const int lo = window > 0 && t + 1 > window ? t + 1 - window : 0; // the sliding window's first key
    for (int j = threadIdx.x; j < Tk; j += blockDim.x) a[j] = j >= lo && j <= t ? expf(a[j] - L) : 0.0f;
}

// Block (i, h, b): row i (position t0 + i) of (b, h)'s rows (bh floats
// apart, rows ld apart): on its keys j <= t0 + i, dS = scale P (dP - sum_j P
// dP), in place in dP; 0 on the later keys up to width (ops_backward.c's
// softmax backward, the scores' scale folded in).
__global__ static void k_attn_softmax_bwd(float *dP, const float *P, int H, size_t bh, int ld, int width, int t0,
                                          float scale) {
    __shared__ float sh[WARP];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const size_t o = ((size_t)b * H + h) * bh + (size_t)i * ld;
    const int lim = t0 + i + 1 < width ? t0 + i + 1 : width;
    float part = 0.0f;
    for (int j = threadIdx.x; j < lim; j += blockDim.x) part += P[o + j] * dP[o + j];
    const float D = block_sum(part, sh);
    for (int j = threadIdx.x; j < width; j += blockDim.x) dP[o + j] = j < lim ? scale * P[o + j] * (dP[o + j] - D) : 0.0f;
}

extern "C" {

static int cmp_i64(const void *a, const void *b) {
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int mp_cuk_embed_groups(const int *ids, int N, int *groups) {
    if (N <= 0) {
        groups[0] = 0;
        return 0;
    }
    long long *key = (long long *)malloc((size_t)N * sizeof *key);
    if (!key) return -1;
    for (int n = 0; n < N; n++) key[n] = (long long)ids[n] << 32 | (unsigned)n; /* by id, then row */
    qsort(key, (size_t)N, sizeof *key, cmp_i64);
    int *rows = groups, *starts = groups + N, ng = 0;
    for (int k = 0; k < N; k++) {
        rows[k] = (int)(key[k] & 0xffffffffll);
        if (k == 0 || key[k] >> 32 != key[k - 1] >> 32) starts[ng++] = k;
    }
    starts[ng] = N;
    int *gid = starts + ng + 1;
    for (int j = 0; j < ng; j++) gid[j] = (int)(key[starts[j]] >> 32);
    free(key);
    return ng;
}

cudaError_t mp_cuk_embed_backward(float *dembed, const float *dout, const int *groups, int N, int ngroups, int D,
                                  cudaStream_t s) {
    if (ngroups <= 0) return cudaSuccess;
    MP_LAUNCH(k_embed_bwd, ngroups, 256, s)(dembed, dout, groups, groups + N, groups + N + ngroups + 1, D);
    return cudaGetLastError();
}

cudaError_t mp_cuk_norm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                                 const float *mean, const float *scale, int N, int D, int layer, float *work,
                                 cudaStream_t s) {
    MP_LAUNCH(k_norm_bwd_dx, N, 256, s)(dx, dout, x, w, mean, scale, D, layer);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !dw) return e;
    if (!work) return cudaErrorInvalidValue;
    const int rows = (N + norm_dw_chunks(N) - 1) / norm_dw_chunks(N), chunks = (N + rows - 1) / rows; // none empty
    const dim3 grid((unsigned)((D + WARP - 1) / WARP), (unsigned)chunks);
    MP_LAUNCH(k_norm_bwd_dw_part, grid, NORM_DW_WARPS * WARP, s)(work, dout, x, mean, scale, N, D, rows, layer);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    MP_LAUNCH(k_norm_bwd_dw_sum, grid_for((size_t)D, 128), 128, s)(dw, db, work, D, chunks, layer);
    return cudaGetLastError();
}

size_t mp_cuk_norm_dw_floats(int N, int D) { return 2 * (size_t)norm_dw_chunks(N) * (size_t)D; }

size_t mp_cuk_bias_bwd_floats(int N, int OUT) { return (size_t)norm_dw_chunks(N) * (size_t)OUT; }

cudaError_t mp_cuk_bias_backward(float *dbias, const float *dout, int N, int OUT, float *work, cudaStream_t s) {
    if (!work) return cudaErrorInvalidValue;
    const int rows = (N + norm_dw_chunks(N) - 1) / norm_dw_chunks(N), chunks = (N + rows - 1) / rows; // none empty
    const dim3 grid((unsigned)((OUT + WARP - 1) / WARP), (unsigned)chunks);
    MP_LAUNCH(k_bias_bwd_part, grid, NORM_DW_WARPS * WARP, s)(work, dout, N, OUT, rows);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    MP_LAUNCH(k_norm_bwd_dw_sum, grid_for((size_t)OUT, 128), 128, s)(dbias, (float *)NULL, work, OUT, chunks, 0);
    return cudaGetLastError();
}

cudaError_t mp_cuk_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                   size_t n, cudaStream_t s) {
    MP_LAUNCH(k_swiglu_bwd, grid_for(n, 256), 256, s)(dgate, dup, dout, gate, up, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_gelu_backward(float *dx, const float *dout, const float *x, size_t n, int tanh_approx,
                                 cudaStream_t s) {
    MP_LAUNCH(k_gelu_bwd, grid_for(n, 256), 256, s)(dx, dout, x, n, tanh_approx);
    return cudaGetLastError();
}

cudaError_t mp_cuk_attn_recompute(float *P, const float *lse, int B, int H, int T, int Tk, int q0, int rows,
                                  int window, cudaStream_t s) {
    MP_LAUNCH(k_attn_recompute, dim3((unsigned)rows, (unsigned)H, (unsigned)B), 256, s)(P, lse, H, T, Tk, q0, rows,
                                                                                      window);
    return cudaGetLastError();
}

cudaError_t mp_cuk_attn_softmax_bwd(float *dP, const float *P, int B, int H, size_t bh, int ld, int width, int t0,
                                    int rows, float scale, cudaStream_t s) {
    MP_LAUNCH(k_attn_softmax_bwd, dim3((unsigned)rows, (unsigned)H, (unsigned)B), 256, s)(dP, P, H, bh, ld, width, t0,
                                                                                        scale);
    return cudaGetLastError();
}

cudaError_t mp_cuk_xent(float *dlogits, float *loss, const float *logits, const int *targets, int N, int V,
                        float scale, cudaStream_t s) {
    MP_LAUNCH(k_xent, N, 256, s)(dlogits, loss, logits, targets, V, scale);
    return cudaGetLastError();
}

unsigned mp_cuk_sumsq_blocks(size_t n) { return grid_for(n, 256) < 1024 ? grid_for(n, 256) : 1024; }

cudaError_t mp_cuk_sumsq(double *part, const float *g, size_t n, cudaStream_t s) {
    MP_LAUNCH(k_sumsq, mp_cuk_sumsq_blocks(n), 256, s)(part, g, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_scale(float *x, size_t n, float a, cudaStream_t s) {
    MP_LAUNCH(k_scale, grid_for(n, 256), 256, s)(x, n, a);
    return cudaGetLastError();
}

cudaError_t mp_cuk_adamw(float *p, float *m, float *v, const float *g, size_t n, float beta1, float beta2, float eps,
                         float step_size, float bc2_sqrt, float decay, int decayed, cudaStream_t s) {
    MP_LAUNCH(k_adamw, grid_for(n, 256), 256, s)(p, m, v, g, n, beta1, beta2, eps, step_size, bc2_sqrt, decay, decayed);
    return cudaGetLastError();
}

} // extern "C"
