/* ops.c — forward layer kernels (see ops.h): embedding, RMSNorm, LayerNorm,
 * linear layers (sgemv for one row, a weight-streaming kernel for a few
 * rows, sgemm above), RoPE on adjacent pairs, SwiGLU, GELU, residual
 * add, softmax rows, cross-entropy; the norms in two steps around their
 * scale (mp_norm_scale / mp_norm_apply) for the hook_scale points. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* glibc's libmvec has vector versions of expf (_ZGVdN8v_expf for AVX2,
 * _ZGVeN16v_expf for AVX-512). Declaring expf a SIMD function lets GCC call
 * them in the `omp simd` loops below instead of the scalar expf, which was 18%
 * of a T = 1024 forward and 59% at T = 8k. libm.so pulls libmvec in as needed. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
extern float expf(float) __attribute__((simd("notinbranch")));
#endif

void mp_embed_forward(float *out, const int *tokens, const float *embed, int N, int D) {
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * D, embed + (size_t)tokens[n] * D, (size_t)D * sizeof(float));
}

void mp_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D, float eps) {
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D;
        float *o = out + (size_t)n * D;
        float ss = 0.0f;
        for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        if (rstd) rstd[n] = r;
        for (int i = 0; i < D; i++) o[i] = xr[i] * r * w[i];
    }
}

void mp_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                          int N, int D, float eps) {
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D;
        float *o = out + (size_t)n * D;
        float s = 0.0f;
        for (int i = 0; i < D; i++) s += xr[i];
        float mu = s / (float)D, v = 0.0f;
        for (int i = 0; i < D; i++) { float d = xr[i] - mu; v += d * d; }
        float r = 1.0f / sqrtf(v / (float)D + eps);
        if (mean) mean[n] = mu;
        if (rstd) rstd[n] = r;
        for (int i = 0; i < D; i++) o[i] = (xr[i] - mu) * r * w[i] + b[i];
    }
}

void mp_norm_scale(float *scale, float *mean, const float *x, int N, int D, float eps, int layer) {
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D;
        if (layer) { /* the same float operations as mp_layernorm_forward */
            float s = 0.0f;
            for (int i = 0; i < D; i++) s += xr[i];
            float mu = s / (float)D, v = 0.0f;
            for (int i = 0; i < D; i++) { float d = xr[i] - mu; v += d * d; }
            mean[n] = mu;
            scale[n] = sqrtf(v / (float)D + eps);
        } else {
            float ss = 0.0f;
            for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
            scale[n] = sqrtf(ss / (float)D + eps);
        }
    }
}

void mp_norm_apply(float *out, const float *x, const float *mean, const float *scale, const float *w,
                   const float *b, int N, int D, int layer) {
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D;
        float *o = out + (size_t)n * D;
        float r = 1.0f / scale[n];
        if (layer)
            for (int i = 0; i < D; i++) o[i] = (xr[i] - mean[n]) * r * w[i] + b[i];
        else
            for (int i = 0; i < D; i++) o[i] = xr[i] * r * w[i];
    }
}

/* Few-row product (decoding: N = the batch): sgemm re-packs the whole weight
 * matrix on every call, which for N of a few rows costs more than the product.
 * Here each thread streams its share of weight rows once, four at a time, and
 * dots them with every input row while they are in L1. */
static void matmul_few_rows(float *out, const float *in, const float *w, int N, int IN, int OUT) {
#pragma omp parallel for schedule(static) if ((size_t)OUT * IN > 32768)
    for (int o = 0; o < OUT; o += 4) {
        const int nr = OUT - o < 4 ? OUT - o : 4;
        const float *w0 = w + (size_t)o * IN;
        const float *w1 = nr > 1 ? w0 + IN : w0, *w2 = nr > 2 ? w0 + 2 * (size_t)IN : w0;
        const float *w3 = nr > 3 ? w0 + 3 * (size_t)IN : w0;
        for (int n = 0; n < N; n++) {
            const float *x = in + (size_t)n * IN;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int i = 0; i < IN; i++) {
                const float xv = x[i];
                s0 += w0[i] * xv;
                s1 += w1[i] * xv;
                s2 += w2[i] * xv;
                s3 += w3[i] * xv;
            }
            float *op = out + (size_t)n * OUT + o, s[4] = {s0, s1, s2, s3};
            for (int r = 0; r < nr; r++) op[r] = s[r];
        }
    }
}

void mp_matmul_forward(float *out, const float *in, const float *w, const float *bias, int N, int IN, int OUT) {
    if (N == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, OUT, IN, 1.0f, w, IN, in, 1, 0.0f, out, 1);
    else if (N <= MP_MATMUL_FEW_ROWS)
        matmul_few_rows(out, in, w, N, IN, OUT);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, in, IN, w, IN, 0.0f, out, OUT);
    if (bias) {
#pragma omp parallel for schedule(static) if (N > 64)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) out[(size_t)n * OUT + o] += bias[o];
    }
}

void mp_matvec_multi(int n, float *const *out, const float *const *w, const int *OUT, const float *x, int IN) {
    long total = 0;
    for (int i = 0; i < n; i++) total += OUT[i];
#pragma omp parallel if (total * IN > 65536)
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        /* shares of whole 16-row groups */
        long per = (total + nt - 1) / nt;
        per = (per + 15) / 16 * 16;
        long lo = (long)t * per, hi = lo + per < total ? lo + per : total, base = 0;
        for (int i = 0; i < n && lo < hi; i++) {
            long a = lo > base ? lo : base, b = hi < base + OUT[i] ? hi : base + OUT[i];
            if (a < b) /* inside a parallel region OpenBLAS runs single-threaded */
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(b - a), IN, 1.0f, w[i] + (size_t)(a - base) * IN, IN,
                            x, 1, 0.0f, out[i] + (a - base), 1);
            base += OUT[i];
        }
    }
}

void mp_rope_table(float *cos_t, float *sin_t, int pos0, int T, int Dh, double theta) {
    mp_rope_table_scaled(cos_t, sin_t, pos0, T, Dh, theta, 1.0, NULL);
}

void mp_rope_table_scaled(float *cos_t, float *sin_t, int pos0, int T, int Dh, double theta, double pos_scale,
                          const float *freq_div) {
    int half = Dh / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double freq = 1.0 / pow(theta, (double)(2 * i) / (double)Dh);
            if (freq_div) freq /= (double)freq_div[i];
            double ang = pos_scale == 1.0 ? (double)(pos0 + t) * freq : (double)(pos0 + t) * pos_scale * freq;
            cos_t[(size_t)t * half + i] = (float)cos(ang);
            sin_t[(size_t)t * half + i] = (float)sin(ang);
        }
}

void mp_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int Dh) {
    int half = Dh / 2;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T > 64)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
            float *row = x + ((size_t)b * T + t) * (size_t)nh * Dh;
            for (int h = 0; h < nh; h++) {
                float *v = row + (size_t)h * Dh;
                for (int i = 0; i < half; i++) {
                    float x0 = v[2 * i], x1 = v[2 * i + 1];
                    v[2 * i] = x0 * c[i] - x1 * s[i];
                    v[2 * i + 1] = x0 * s[i] + x1 * c[i];
                }
            }
        }
}

void mp_rope_permute_rows(float *w, float *tmp, int n_heads, int Dh, size_t cols, int to_adjacent) {
    const int half = Dh / 2;
    for (int h = 0; h < n_heads; h++) {
        float *head = w + (size_t)h * Dh * cols;
        memcpy(tmp, head, (size_t)Dh * cols * sizeof(float));
        for (int i = 0; i < half; i++)
            for (int j = 0; j < 2; j++) {
                size_t adj = (size_t)(2 * i + j), hs = (size_t)(j * half + i);
                const float *src = tmp + (to_adjacent ? hs : adj) * cols;
                float *dst = head + (to_adjacent ? adj : hs) * cols;
                memcpy(dst, src, cols * sizeof(float));
            }
    }
}

void mp_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void mp_gelu_forward(float *out, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
    }
}

void mp_gelu_tanh_forward(float *out, const float *x, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;   /* sqrt(2/pi) */
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
    }
}

void mp_geglu_forward(float *out, const float *gate, const float *up, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = gate[i];
        out[i] = 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v))) * up[i];
    }
}

int mp_crossentropy_forward(float *losses, float *probs, const float *logits, const int *targets, int N, int V) {
    int count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count) if (N > 16)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        int t = targets[n];
        float lt = t >= 0 ? l[t] : 0.0f; /* read before p (which may alias l) is written */
        double sum = 0.0;
        for (int i = 0; i < V; i++) { p[i] = expf(l[i] - mx); sum += p[i]; }
        float inv = (float)(1.0 / sum);
        /* -log p[t] = log(sum) - (l[t] - mx) */
        losses[n] = t >= 0 ? (float)(log(sum) - (double)(lt - mx)) : 0.0f;
        count += t >= 0;
        for (int i = 0; i < V; i++) p[i] *= inv;
    }
    return count;
}

void mp_residual_forward(float *x, const float *y, size_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

void mp_softmax_rows(float *x, int rows, int n, int ld) {
    for (int r = 0; r < rows; r++) {
        float *row = x + (size_t)r * ld;
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = row[i] > mx ? row[i] : mx;
        if (mx == -INFINITY) { /* fully masked row (only if a hook made it so) */
            for (int i = 0; i < n; i++) row[i] = 0.0f;
            continue;
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < n; i++) { row[i] = expf(row[i] - mx); sum += row[i]; }
        float inv = 1.0f / sum;
        for (int i = 0; i < n; i++) row[i] *= inv;
    }
}
