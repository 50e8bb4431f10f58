/* ops_backward.c — backward layer kernels (see ops.h): each mirrors a forward
 * kernel of ops.c, accumulates into its d-prefixed gradient outputs, and
 * allocates nothing. Products through sgemm; rows, heads and columns in
 * parallel with OpenMP (static schedules, so the same thread count gives the
 * same bytes). */
#include "attn_variants.h"
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* glibc's vector expf in `omp simd` loops (see ops.c). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
extern float expf(float) __attribute__((simd("notinbranch")));
#endif

/* Columns per pass of the norms' weight-gradient sums. */
#define NORM_COLS 64

void mp_embed_backward(float *dembed, const float *dout, const int *tokens, int N, int D) {
    /* rows of one token id collide: parallel over columns, serial over rows */
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int i = 0; i < D; i++)
        for (int n = 0; n < N; n++) dembed[(size_t)tokens[n] * D + i] += dout[(size_t)n * D + i];
}

void mp_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int N, int D) {
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *g = dout + (size_t)n * D;
        float *d = dx + (size_t)n * D, r = rstd[n];
        /* y = x r w;  dx = r (g w) - r^3 x mean(g w x) */
        float dot = 0.0f;
        for (int i = 0; i < D; i++) dot += g[i] * w[i] * xr[i];
        float c = dot * r * r / (float)D;
        for (int i = 0; i < D; i++) d[i] += r * (g[i] * w[i] - xr[i] * c);
    }
    /* dw: per column, the rows in order (as a column loop would), but a block of
     * NORM_COLS columns per pass, so every row is read contiguously */
    if (!dw) return;
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int i0 = 0; i0 < D; i0 += NORM_COLS) {
        const int ni = D - i0 < NORM_COLS ? D - i0 : NORM_COLS;
        float s[NORM_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *g = dout + (size_t)n * D + i0, *xr = x + (size_t)n * D + i0;
            const float r = rstd[n];
            for (int i = 0; i < ni; i++) s[i] += g[i] * xr[i] * r;
        }
        for (int i = 0; i < ni; i++) dw[i0 + i] += s[i];
    }
}

void mp_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                           const float *mean, const float *rstd, int N, int D) {
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *g = dout + (size_t)n * D;
        float *d = dx + (size_t)n * D, mu = mean[n], r = rstd[n];
        /* xhat = (x - mu) r; gh = g w; dx = r (gh - mean(gh) - xhat mean(gh xhat)) */
        float s1 = 0.0f, s2 = 0.0f;
        for (int i = 0; i < D; i++) {
            float gh = g[i] * w[i], xh = (xr[i] - mu) * r;
            s1 += gh;
            s2 += gh * xh;
        }
        s1 /= (float)D;
        s2 /= (float)D;
        for (int i = 0; i < D; i++) {
            float xh = (xr[i] - mu) * r;
            d[i] += r * (g[i] * w[i] - s1 - xh * s2);
        }
    }
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int i0 = 0; i0 < D; i0 += NORM_COLS) { /* as in mp_rmsnorm_backward */
        const int ni = D - i0 < NORM_COLS ? D - i0 : NORM_COLS;
        float sw[NORM_COLS] = {0}, sb[NORM_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *g = dout + (size_t)n * D + i0, *xr = x + (size_t)n * D + i0;
            const float mu = mean[n], r = rstd[n];
            for (int i = 0; i < ni; i++) {
                sw[i] += g[i] * (xr[i] - mu) * r;
                sb[i] += g[i];
            }
        }
        for (int i = 0; i < ni; i++) {
            dw[i0 + i] += sw[i];
            db[i0 + i] += sb[i];
        }
    }
}

void mp_matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in, const float *w,
                        int N, int IN, int OUT) {
    /* din [N,IN] += dout [N,OUT] @ w [OUT,IN] */
    if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN, 1.0f, din, IN);
    /* dw [OUT,IN] += dout^T [OUT,N] @ in [N,IN] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dout, OUT, in, IN, 1.0f, dw, IN);
    if (dbias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OUT > 65536)
        for (int o = 0; o < OUT; o++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OUT + o];
            dbias[o] += s;
        }
    }
}

void mp_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int nh, int Dh) {
    int half = Dh / 2;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T > 64)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
            float *row = dx + ((size_t)b * T + t) * (size_t)nh * Dh;
            for (int h = 0; h < nh; h++) {
                float *v = row + (size_t)h * Dh;
                for (int i = 0; i < half; i++) {
                    float g0 = v[2 * i], g1 = v[2 * i + 1];
                    v[2 * i] = g0 * c[i] + g1 * s[i];
                    v[2 * i + 1] = -g0 * s[i] + g1 * c[i];
                }
            }
        }
}

void mp_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), silu = g * sg;
        dgate[i] += dout[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
        dup[i] += dout[i] * silu;
    }
}

void mp_gelu_backward(float *dx, const float *dout, const float *x, size_t n) {
    const float inv_sqrt_2pi = 0.39894228040143267794f;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * (float)M_SQRT1_2));
        float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
        dx[i] += dout[i] * (cdf + v * pdf);
    }
}

void mp_gelu_tanh_backward(float *dx, const float *dout, const float *x, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float th = tanhf(k0 * (v + k1 * v * v * v));
        float dth = (1.0f - th * th) * k0 * (1.0f + 3.0f * k1 * v * v);
        dx[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * v * dth);
    }
}

void mp_geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = gate[i];
        float th = tanhf(k0 * (v + k1 * v * v * v));
        float dth = (1.0f - th * th) * k0 * (1.0f + 3.0f * k1 * v * v);
        dgate[i] += dout[i] * up[i] * (0.5f * (1.0f + th) + 0.5f * v * dth);
        dup[i] += dout[i] * 0.5f * v * (1.0f + th);
    }
}

void mp_attention_backward(float *dq, float *dk, float *dv, float *datt, const float *dz, const float *q,
                           const float *k, const float *v, const float *att, int B, int T, int H, int K, int Dh) {
    mp_attention_backward_variant(dq, dk, dv, datt, NULL, dz, q, k, v, att, B, T, H, K, Dh, NULL);
}

/* Query rows per block of the attention backward (see below). */
#define ATT_SUB 64

/* The attention variant's row-factor gradient of query row i: sum over the
 * row's support (P_ij > 0, j <= i) of dU_ij S_ij, S_ij = scale q_i . k_j (k_j
 * KD floats apart), summed in double; the fused and the staged backward both
 * take it from here. */
double mp_attn_factor_grad_row(const float *qi, const float *kp, int KD, const float *dr, const float *pr, int i, int Dh,
                               float scale) {
    double g = 0.0;
    for (int j = 0; j <= i; j++) {
        if (!(pr[j] > 0.0f)) continue;
        const float *kj = kp + (size_t)j * KD;
        double dot = 0.0;
        for (int e = 0; e < Dh; e++) dot += (double)qi[e] * kj[e];
        g += (double)dr[j] * dot * scale;
    }
    return g;
}

/* The fused backward with the logit scale and the soft cap (cap > 0; softmax only). */
static void attn_backward(float *dq, float *dk, float *dv, float *datt, float *dfac, const float *dz, const float *q,
                          const float *k, const float *v, const float *att, int B, int T, int H, int K, int Dh,
                          const struct mp_attn_layer *av, float scale, float cap);

void mp_attention_backward_variant(float *dq, float *dk, float *dv, float *datt, float *dfac, const float *dz,
                                   const float *q, const float *k, const float *v, const float *att, int B, int T,
                                   int H, int K, int Dh, const struct mp_attn_layer *av) {
    attn_backward(dq, dk, dv, datt, dfac, dz, q, k, v, att, B, T, H, K, Dh, av, 1.0f / sqrtf((float)Dh), 0.0f);
}

void mp_attention_backward_scaled(float *dq, float *dk, float *dv, float *datt, float *dfac, const float *dz,
                                  const float *q, const float *k, const float *v, const float *att, int B, int T,
                                  int H, int K, int Dh, const struct mp_attn_layer *av, float scale, float cap) {
    attn_backward(dq, dk, dv, datt, dfac, dz, q, k, v, att, B, T, H, K, Dh, av, scale, cap);
}

void mp_softcap_dscores(float *dr, const float *qi, const float *kp, int KD, int n, int Dh, float scale, float cap) {
    for (int j = 0; j < n; j++) {
        const float t = tanhf(scale * cblas_sdot(Dh, qi, 1, kp + (size_t)j * KD, 1) / cap);
        dr[j] *= 1.0f - t * t;
    }
}

static void attn_backward(float *dq, float *dk, float *dv, float *datt, float *dfac, const float *dz, const float *q,
                          const float *k, const float *v, const float *att, int B, int T, int H, int K, int Dh,
                          const struct mp_attn_layer *av, float scale, float cap) {
    const int HD = H * Dh, KD = K * Dh, group = H / K;
    const int variant = av && av->kind != MP_ATTN_SOFTMAX, factor = av && mp_attn_has_factor(av->kind);
    const size_t TT = (size_t)T * T;
    /* one (batch, kv head) per task: the heads of a group write the same dk/dv */
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < K; kh++) {
            const float *kp = k + (size_t)b * T * KD + (size_t)kh * Dh;
            const float *vp = v + (size_t)b * T * KD + (size_t)kh * Dh;
            float *dkp = dk + (size_t)b * T * KD + (size_t)kh * Dh;
            float *dvp = dv + (size_t)b * T * KD + (size_t)kh * Dh;
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                const float *P = att + ((size_t)b * H + h) * TT;
                float *dS = datt + ((size_t)b * H + h) * TT;
                const float *dzp = dz + (size_t)b * T * HD + (size_t)h * Dh;
                const float *qp = q + (size_t)b * T * HD + (size_t)h * Dh;
                float *dqp = dq + (size_t)b * T * HD + (size_t)h * Dh;
                /* Causal: P is 0 above the diagonal, so rows r0..r0+rr-1 need keys 0..r0+rr-1
                 * only (kk); the products below skip the upper triangle. */
                for (int r0 = 0; r0 < T; r0 += ATT_SUB) {
                    const int rr = T - r0 < ATT_SUB ? T - r0 : ATT_SUB, kk = r0 + rr;
                    const float *Pb = P + (size_t)r0 * T, *dzb = dzp + (size_t)r0 * HD;
                    float *dSb = dS + (size_t)r0 * T;
                    /* dP = dz v^T;  dv += P^T dz */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rr, kk, Dh, 1.0f, dzb, HD, vp, KD, 0.0f, dSb,
                                T);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk, Dh, rr, 1.0f, Pb, T, dzb, HD, 1.0f, dvp,
                                KD);
                    for (int i = r0; i < r0 + rr; i++) {
                        const float *pr = P + (size_t)i * T;
                        float *dr = dS + (size_t)i * T;
                        if (!variant) {
                            /* dS = P * (dP - rowsum(dP * P)) * scale (zero where P is) */
                            float s = 0.0f;
                            for (int j = 0; j <= i; j++) s += dr[j] * pr[j];
                            if (cap > 0.0f) { /* through the soft cap: d raw = d capped (1 - tanh^2) */
                                for (int j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - s);
                                mp_softcap_dscores(dr, qp + (size_t)i * HD, kp, KD, i + 1, Dh, scale, cap);
                                for (int j = 0; j <= i; j++) dr[j] *= scale;
                            } else {
                                for (int j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - s) * scale;
                            }
                        } else {
                            /* variants: dU through the normalizer; dS = f dU scale; the
                             * factor's gradient sum_j dU_ij S_ij over the support */
                            mp_attn_normalize_backward(av, dr, pr, i + 1);
                            double f = 1.0;
                            if (factor) {
                                const double g = mp_attn_factor_grad_row(qp + (size_t)i * HD, kp, KD, dr, pr, i, Dh,
                                                                         scale);
                                if (dfac) dfac[((size_t)b * H + h) * T + i] = (float)g;
                                f = mp_attn_row_factor(av, h, i + 1);
                            }
                            const float fs = (float)(f * scale);
                            for (int j = 0; j <= i; j++) dr[j] *= fs;
                        }
                        for (int j = i + 1; j < kk; j++) dr[j] = 0.0f;
                    }
                    /* dq += dS k;  dk += dS^T q */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rr, Dh, kk, 1.0f, dSb, T, kp, KD, 1.0f,
                                dqp + (size_t)r0 * HD, HD);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk, Dh, rr, 1.0f, dSb, T, qp + (size_t)r0 * HD,
                                HD, 1.0f, dkp, KD);
                }
            }
        }
}

void mp_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int N, int V, float scale) {
#pragma omp parallel for schedule(static) if ((size_t)N * V > 65536)
    for (int n = 0; n < N; n++) {
        float *d = dlogits + (size_t)n * V;
        const float *p = probs + (size_t)n * V;
        int t = targets[n];
        if (t < 0) {
            memset(d, 0, (size_t)V * sizeof(float));
            continue;
        }
        for (int i = 0; i < V; i++) d[i] = scale * p[i];
        d[t] -= scale;
    }
}
