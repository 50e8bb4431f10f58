// cuda_kernels.cu — the CUDA backend's device kernels (launchers declared in
// cuda_kernels.h). Written to be checked by eye against the CPU ops they
// mirror (runtime/ops.c, model.c's attention): one thread block per row (or
// per query row and head), grid-stride loops inside, float32 arithmetic and
// float32 accumulation throughout, the same formulas as the CPU (expf, erff,
// tanhf; no fast-math). Only the order of summation differs (tree
// reductions), which is what the gpu tests' tolerances allow for.
#include "cuda_kernels.h"

#include "cuda_common.cuh"

// ---- embedding, norms, elementwise ----

__global__ static void k_to_bf16(__nv_bfloat16 *out, const float *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}

__global__ static void k_intervene(float *data, const float *src, mp_cuk_iv p, size_t n) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        long long g[4];
        size_t r = e;
        for (int i = 3; i >= 0; i--) {
            g[i] = (long long)(r % (size_t)p.s[i]);
            r /= (size_t)p.s[i];
        }
        g[p.axis] += p.offset;
        if (p.head >= 0 && g[p.hax] != p.head) continue;
        if (p.npos) {
            const int q = p.pos0 + (int)g[p.pax];
            int hit = 0;
            for (int k = 0; k < p.npos && !hit; k++) hit = p.pos[k] == q;
            if (!hit) continue;
        }
        size_t feat = 0, within = 0;
        for (int i = 1; i < p.ndim; i++) {
            if (i == p.pax) continue;
            feat = feat * (size_t)p.f[i] + (size_t)g[i];
            if (p.hax >= 0 && i > p.hax) within = within * (size_t)p.f[i] + (size_t)g[i];
        }
        switch (p.kind) {
        case 0: data[e] = 0.0f; break;
        case 1: data[e] = src[feat]; break;
        case 2: data[e] = src[(((size_t)g[0] * p.f[1] + g[1]) * p.f[2] + g[2]) * p.f[3] + g[3]]; break;
        case 3: data[e] += p.scale * src[p.use_within ? within : feat]; break;
        default: data[e] *= p.scale; break;
        }
    }
}

__global__ static void k_embed(float *out, const int *tokens, const float *embed, int D) {
    const size_t n = blockIdx.x;
    const float *src = embed + (size_t)tokens[n] * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[n * D + i] = src[i];
}

__global__ static void k_add_pos(float *x, const float *pe, int T, int D, int pos0) {
    const size_t row = blockIdx.x;
    const int t = (int)(row % (size_t)T);
    const float *p = pe + (size_t)(pos0 + t) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) x[row * D + i] += p[i];
}

// One block per row: RMSNorm o = x / sqrt(mean(x^2) + eps) * w, or LayerNorm
// o = (x - mu) / sqrt(var + eps) * w + b with the two-pass variance (ops.c).
__global__ static void k_norm(float *out, const float *x, const float *w, const float *b, int D, float eps,
                              int layer) {
    __shared__ float sh[WARP];
    const size_t n = blockIdx.x;
    const float *xr = x + n * D;
    float *o = out + n * D;
    float mu = 0.0f;
    if (layer) {
        float s = 0.0f;
        for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
        mu = block_sum(s, sh) / (float)D;
    }
    float v = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float d = xr[i] - mu;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(block_sum(v, sh) / (float)D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        o[i] = layer ? (xr[i] - mu) * r * w[i] + b[i] : xr[i] * r * w[i];
}

// One block per row: the norm's scale (and LayerNorm's mean), as k_norm computes them.
__global__ static void k_norm_scale(float *scale, float *mean, const float *x, int D, float eps, int layer) {
    __shared__ float sh[WARP];
    const size_t n = blockIdx.x;
    const float *xr = x + n * D;
    float mu = 0.0f;
    if (layer) {
        float s = 0.0f;
        for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
        mu = block_sum(s, sh) / (float)D;
    }
    float v = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float d = xr[i] - mu;
        v += d * d;
    }
    const float sc = sqrtf(block_sum(v, sh) / (float)D + eps);
    if (threadIdx.x == 0) {
        scale[n] = sc;
        if (layer) mean[n] = mu;
    }
}

// One block per row: out = (x - mean) * (1 / scale) * w (+ b), the scale as a hook left it.
__global__ static void k_norm_apply(float *out, const float *x, const float *mean, const float *scale, const float *w,
                                    const float *b, int D, int layer) {
    const size_t n = blockIdx.x;
    const float *xr = x + n * D;
    float *o = out + n * D;
    const float r = 1.0f / scale[n];
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        o[i] = layer ? (xr[i] - mean[n]) * r * w[i] + b[i] : xr[i] * r * w[i];
}

__global__ static void k_add_bias(float *out, const float *bias, size_t n, int OUT) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % (size_t)OUT];
}

__global__ static void k_add(float *x, const float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

__global__ static void k_swiglu(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// GeGLU (Gemma): gelu_tanh(gate) * up, as ops.c mp_geglu_forward
__global__ static void k_geglu(float *out, const float *gate, const float *up, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = gate[i];
        out[i] = 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v))) * up[i];
    }
}

// A call's keys and values k, v [B, T, K, Dh] into a KV cache layer's
// [B, K, cap, Dh] at positions pos0..pos0+T-1: a thread per float.
__global__ static void k_kv_append(float *ck, float *cv, const float *k, const float *v, int T, int K, int Dh, int cap,
                                   int pos0, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t d = i % Dh, kh = i / Dh % K, t = i / ((size_t)Dh * K) % T, b = i / ((size_t)Dh * K * T);
    const size_t at = ((b * K + kh) * cap + pos0 + t) * Dh + d;
    ck[at] = k[i];
    cv[at] = v[i];
}

// Gemma 2's soft cap on the finite entries (the mask's -inf stay), as config.c mp_softcap
__global__ static void k_softcap(float *x, size_t n, float cap) {
    const float inv = 1.0f / cap;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (fabsf(v) < INFINITY) x[i] = cap * tanhf(v * inv);
    }
}

__global__ static void k_gelu(float *out, const float *x, size_t n, int tanh_approx) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; // sqrt(2/pi)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        out[i] = tanh_approx ? 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)))
                             : 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// ---- positions ----

// One block per row (b, t): rotates pair i of every head by the angle of
// position t (tables from mp_pos_tables on the host), then applies the
// query's logit factor (ops.c mp_rope_forward, pos.c mp_pos_apply); with
// sgn = -1 by minus the angle: the backward (the transpose of the rotation,
// ops_backward.c mp_rope_backward, and the same factor).
__global__ static void k_rope(float *x, const float *cos_t, const float *sin_t, const float *q_scale, int T, int nh,
                              int Dh, float sgn) {
    const size_t row = blockIdx.x;
    const int t = (int)(row % (size_t)T), half = Dh / 2;
    float *xr = x + row * (size_t)nh * Dh;
    const float *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
    const float f = q_scale ? q_scale[t] : 1.0f;
    for (int idx = threadIdx.x; idx < nh * half; idx += blockDim.x) {
        float *v = xr + (size_t)(idx / half) * Dh;
        const int i = idx % half;
        const float x0 = v[2 * i], x1 = v[2 * i + 1], si = sgn * s[i];
        float y0 = x0 * c[i] - x1 * si, y1 = x0 * si + x1 * c[i];
        if (f != 1.0f) {
            y0 *= f;
            y1 *= f;
        }
        v[2 * i] = y0;
        v[2 * i + 1] = y1;
    }
    if ((Dh & 1) && f != 1.0f) // an odd last channel is not rotated, but scaled
        for (int h = threadIdx.x; h < nh; h += blockDim.x) xr[(size_t)h * Dh + Dh - 1] *= f;
}

// ---- attention ----

// Causal attention of one query row per block, without the pattern: the
// flash-decoding pattern (Dao et al. 2023). A decoding step has one query row
// per head and sequence, so a warp per row (this kernel's earlier shape)
// walked the whole cache alone on B x H warps; here the row's keys 0..n-1 (n
// = pos0 + t + 1) are cut into DECODE_WARPS consecutive slices, one per warp
// of the block, and each warp runs the online softmax of the flash-attention
// paper (Dao et al. 2022, algorithm 1, a tile of one key) over its slice:
// running maximum m, normaliser l and output acc; for each key j, m' = max(m,
// s_j), l = l e^(m - m') + e^(s_j - m'), acc = acc e^(m - m') + e^(s_j - m')
// v_j. The warps' (m, l, acc) then meet in shared memory: M = max_w m_w, z =
// sum_w e^(m_w - M) acc_w / sum_w e^(m_w - M) l_w, over the warps in order (a
// fixed order: the same bits every run). A warp whose slice is empty (n <
// DECODE_WARPS) keeps to the barriers and is left out of the sums. Lane `lane`
// holds channels lane, lane + 32, ... of q and acc. Every lane of a warp runs
// the same keys (the shuffles of warp_sum see all 32), and no thread returns
// before the barrier. With a sliding window W > 0 the row's keys are the last
// W of them, lo..n-1 (lo = n - W), cut the same way.
__global__ static void k_attn_flash(float *z, const float *q, const float *kc, const float *vc, int T, int H, int K,
                                    int Dh, int pos0, size_t bs, size_t hs, size_t rs, float scale, int window) {
    __shared__ float s_acc[DECODE_WARPS][MAX_DH];
    __shared__ float s_m[DECODE_WARPS], s_l[DECODE_WARPS];
    const int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int HD = H * Dh, group = H / K;
    const float *qp = q + ((size_t)b * T + t) * HD + (size_t)h * Dh;
    const float *kp = kc + (size_t)b * bs + (size_t)(h / group) * hs;
    const float *vp = vc + (size_t)b * bs + (size_t)(h / group) * hs;
    const int n = pos0 + t + 1; // keys 0 .. pos0 + t, or the window's lo .. pos0 + t
    const int lo = window > 0 && n > window ? n - window : 0, nk = n - lo, per = (nk + DECODE_WARPS - 1) / DECODE_WARPS;
    const int j0 = lo + wid * per, j1 = j0 + per < n ? j0 + per : n;
    float qr[DH_PER_LANE], acc[DH_PER_LANE];
#pragma unroll
    for (int i = 0; i < DH_PER_LANE; i++) {
        const int d = lane + WARP * i;
        qr[i] = d < Dh ? qp[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = j0; j < j1; j++) {
        const float *kr = kp + (size_t)j * rs, *vr = vp + (size_t)j * rs;
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < DH_PER_LANE; i++) {
            const int d = lane + WARP * i;
            if (d < Dh) part += qr[i] * kr[d];
        }
        const float sj = warp_sum(part) * scale;
        const float mn = fmaxf(m, sj);
        const float corr = expf(m - mn); // 0 for the slice's first key (m = -inf)
        const float p = expf(sj - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < DH_PER_LANE; i++) {
            const int d = lane + WARP * i;
            if (d < Dh) acc[i] = acc[i] * corr + p * vr[d];
        }
        m = mn;
    }
#pragma unroll
    for (int i = 0; i < DH_PER_LANE; i++) {
        const int d = lane + WARP * i;
        if (d < Dh) s_acc[wid][d] = acc[i];
    }
    if (lane == 0) {
        s_m[wid] = m;
        s_l[wid] = l;
    }
    __syncthreads();
    const int used = (nk + per - 1) / per; // warps 0 .. used-1 had keys
    float M = -INFINITY;
    for (int w = 0; w < used; w++) M = fmaxf(M, s_m[w]);
    float L = 0.0f;
    for (int w = 0; w < used; w++) L += s_l[w] * expf(s_m[w] - M);
    float *zp = z + ((size_t)b * T + t) * HD + (size_t)h * Dh;
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < used; w++) o += s_acc[w][d] * expf(s_m[w] - M);
        zp[d] = o / L;
    }
}

// Block (i, h, b): -inf past row i's last key (pos0 + q0 + i) and, with a
// sliding window W, before its first (pos0 + q0 + i + 1 - W), as the scores
// model.c shows; the keys between are left as the product wrote them.
__global__ static void k_attn_mask(float *att, int H, int S, int pos0, int q0, int rows, int window) {
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    float *a = att + (((size_t)b * H + h) * rows + i) * S;
    const int n = pos0 + q0 + i + 1, lo = window > 0 && n > window ? n - window : 0;
    for (int j = n + threadIdx.x; j < S; j += blockDim.x) a[j] = -INFINITY;
    for (int j = threadIdx.x; j < lo; j += blockDim.x) a[j] = -INFINITY; // before the sliding window
}

// Block (i, h, b): softmax of row i over keys 0 .. pos0 + q0 + i, or with a
// sliding window W the last W of them (attn_variants.c; ops.c
// mp_softmax_rows: max-subtracted exponentials times 1/sum; a row that is
// -inf throughout, which only a hook can make, becomes 0); later keys 0.
// With lse (training, pos0 0): the row's log-sum-exp to lse[(b H + h) T + q0 + i].
__global__ static void k_attn_softmax(float *att, float *lse, int H, int S, int T, int pos0, int q0, int rows,
                                      int window) {
    __shared__ float sh[WARP];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    float *a = att + (((size_t)b * H + h) * rows + i) * S;
    const int n = pos0 + q0 + i + 1, lo = window > 0 && n > window ? n - window : 0;
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, a[j]);
    mx = block_max(mx, sh);
    if (mx == -INFINITY) {
        for (int j = threadIdx.x; j < S; j += blockDim.x) a[j] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int j = lo + threadIdx.x; j < n; j += blockDim.x) {
        const float e = expf(a[j] - mx);
        a[j] = e;
        sum += e;
    }
    const float tot = block_sum(sum, sh), inv = 1.0f / tot;
    for (int j = threadIdx.x; j < S; j += blockDim.x) a[j] = j >= lo && j < n ? a[j] * inv : 0.0f;
    if (lse && threadIdx.x == 0) lse[((size_t)b * H + h) * T + q0 + i] = mx + logf(tot);
}

// ---- launchers ----

extern "C" {

cudaError_t mp_cuk_to_bf16(void *out, const float *in, size_t n, cudaStream_t s) {
    MP_LAUNCH(k_to_bf16, grid_for(n, 256), 256, s)((__nv_bfloat16 *)out, in, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_embed(float *out, const int *tokens, const float *embed, int N, int D, cudaStream_t s) {
    MP_LAUNCH(k_embed, N, 256, s)(out, tokens, embed, D);
    return cudaGetLastError();
}

cudaError_t mp_cuk_add_pos(float *x, const float *pos_embed, int B, int T, int D, int pos0, cudaStream_t s) {
    MP_LAUNCH(k_add_pos, B * T, 256, s)(x, pos_embed, T, D, pos0);
    return cudaGetLastError();
}

cudaError_t mp_cuk_norm(float *out, const float *x, const float *w, const float *b, int N, int D, float eps,
                        int layer, cudaStream_t s) {
    MP_LAUNCH(k_norm, N, 256, s)(out, x, w, b, D, eps, layer);
    return cudaGetLastError();
}

cudaError_t mp_cuk_norm_scale(float *scale, float *mean, const float *x, int N, int D, float eps, int layer,
                              cudaStream_t s) {
    MP_LAUNCH(k_norm_scale, N, 256, s)(scale, mean, x, D, eps, layer);
    return cudaGetLastError();
}

cudaError_t mp_cuk_norm_apply(float *out, const float *x, const float *mean, const float *scale, const float *w,
                              const float *b, int N, int D, int layer, cudaStream_t s) {
    MP_LAUNCH(k_norm_apply, N, 256, s)(out, x, mean, scale, w, b, D, layer);
    return cudaGetLastError();
}

cudaError_t mp_cuk_add_bias(float *out, const float *bias, int N, int OUT, cudaStream_t s) {
    const size_t n = (size_t)N * OUT;
    MP_LAUNCH(k_add_bias, grid_for(n, 256), 256, s)(out, bias, n, OUT);
    return cudaGetLastError();
}

cudaError_t mp_cuk_add(float *x, const float *y, size_t n, cudaStream_t s) {
    MP_LAUNCH(k_add, grid_for(n, 256), 256, s)(x, y, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_swiglu(float *out, const float *gate, const float *up, size_t n, cudaStream_t s) {
    MP_LAUNCH(k_swiglu, grid_for(n, 256), 256, s)(out, gate, up, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_geglu(float *out, const float *gate, const float *up, size_t n, cudaStream_t s) {
    MP_LAUNCH(k_geglu, grid_for(n, 256), 256, s)(out, gate, up, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_softcap(float *x, size_t n, float cap, cudaStream_t s) {
    MP_LAUNCH(k_softcap, grid_for(n, 256), 256, s)(x, n, cap);
    return cudaGetLastError();
}

cudaError_t mp_cuk_gelu(float *out, const float *x, size_t n, int tanh_approx, cudaStream_t s) {
    MP_LAUNCH(k_gelu, grid_for(n, 256), 256, s)(out, x, n, tanh_approx);
    return cudaGetLastError();
}

cudaError_t mp_cuk_rope(float *x, const float *cos_t, const float *sin_t, const float *q_scale, int B, int T, int nh,
                        int Dh, cudaStream_t s) {
    MP_LAUNCH(k_rope, B * T, 128, s)(x, cos_t, sin_t, q_scale, T, nh, Dh, 1.0f);
    return cudaGetLastError();
}

cudaError_t mp_cuk_rope_backward(float *dx, const float *cos_t, const float *sin_t, const float *q_scale, int B, int T,
                                 int nh, int Dh, cudaStream_t s) {
    MP_LAUNCH(k_rope, B * T, 128, s)(dx, cos_t, sin_t, q_scale, T, nh, Dh, -1.0f);
    return cudaGetLastError();
}

cudaError_t mp_cuk_attn_flash(float *z, const float *q, const float *kc, const float *vc, int B, int T, int H, int K,
                              int Dh, int pos0, size_t bs, size_t hs, size_t rs, float scale, int window,
                              cudaStream_t s) {
    if (Dh > MAX_DH) return cudaErrorInvalidValue;
    dim3 grid((unsigned)T, (unsigned)H, (unsigned)B);
    MP_LAUNCH(k_attn_flash, grid, DECODE_WARPS * WARP, s)(z, q, kc, vc, T, H, K, Dh, pos0, bs, hs, rs, scale, window);
    return cudaGetLastError();
}

cudaError_t mp_cuk_kv_append(float *ck, float *cv, const float *k, const float *v, int B, int T, int K, int Dh, int cap,
                             int pos0, cudaStream_t s) {
    const size_t n = (size_t)B * T * K * Dh;
    MP_LAUNCH(k_kv_append, grid_for(n, 256), 256, s)(ck, cv, k, v, T, K, Dh, cap, pos0, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_intervene(float *data, const float *src, const mp_cuk_iv *p, size_t n, cudaStream_t s) {
    MP_LAUNCH(k_intervene, grid_for(n, 256), 256, s)(data, src, *p, n);
    return cudaGetLastError();
}

cudaError_t mp_cuk_attn_mask(float *att, int B, int H, int S, int pos0, int q0, int rows, int window,
                             cudaStream_t s) {
    MP_LAUNCH(k_attn_mask, dim3((unsigned)rows, (unsigned)H, (unsigned)B), 128, s)(att, H, S, pos0, q0, rows, window);
    return cudaGetLastError();
}

cudaError_t mp_cuk_attn_softmax(float *att, float *lse, int B, int H, int S, int T, int pos0, int q0, int rows,
                                int window, cudaStream_t s) {
    MP_LAUNCH(k_attn_softmax, dim3((unsigned)rows, (unsigned)H, (unsigned)B), 256, s)(att, lse, H, S, T, pos0, q0,
                                                                                    rows, window);
    return cudaGetLastError();
}

} // extern "C"
