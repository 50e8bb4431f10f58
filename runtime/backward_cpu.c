/* backward_cpu.c — the CPU's operations of the backward walk (backward.h
 * mp_bwd_ops_cpu): ops_backward.c's kernels, OpenBLAS products, the hooks
 * fired on host memory. backward.c's walk calls them in its order; each
 * computes one step exactly as the walk before the table did (the same
 * calls in the same order: the same bytes).
 *
 * Where the two callers of the walk have always computed a step with
 * different arithmetic, both forms are here and the walk picks one:
 *  - the attention: with weight gradients and neither attention map of the
 *    layer hooked, ops_backward.c's fused kernel (blocks of query rows, the
 *    1/sqrt(Dh) folded into d scores: attn); otherwise three stages with a
 *    hook point between them, dz -> d pattern -> d scores -> dq, dk
 *    (attn_dpattern, attn_dscores, attn_dqk);
 *  - a norm with its hook_scale point hooked: d scale, then the input
 *    gradient from the scale held fixed plus the scale's share
 *    (norm_dscale, norm_dx_scaled), which is norm's result when nothing is
 *    edited.
 * The linear layers' input gradients with beta 0 are the bytes of clearing
 * the buffer and accumulating (OpenBLAS starts both from zero). */
#include "backward.h"
#include "ops.h"
#include "relv.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static mp_status c_zero(void *ctx, float *x, size_t n) {
    (void)ctx;
    memset(x, 0, n * sizeof(float));
    return MP_OK;
}

static mp_status c_copy(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
    memcpy(dst, src, n * sizeof(float));
    return MP_OK;
}

static mp_status c_add(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
    return MP_OK;
}

static mp_status c_linear(void *ctx, float *din, float beta, float *dw, float *db, const float *dout, const float *in,
                          const float *w, int N, int IN, int OUT) {
    (void)ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN, beta, din, IN);
    if (dw) mp_matmul_backward(NULL, dw, db, dout, in, w, N, IN, OUT);
    return MP_OK;
}

static mp_status c_norm(void *ctx, const mp_config *c, float *dx, float *dw, float *db, const float *dout,
                        const float *x, const float *w, const float *mean, const float *rstd, int N) {
    (void)ctx;
    if (c->norm == MP_NORM_LAYER) mp_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, c->d_model);
    else mp_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, c->d_model);
    return MP_OK;
}

static mp_status c_norm_dscale(void *ctx, const mp_config *c, float *dsc, const float *dout, const float *x,
                               const float *w, const float *mean, const float *rstd, int N) {
    (void)ctx;
    const int D = c->d_model, ln = c->norm == MP_NORM_LAYER;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *gr = dout + (size_t)n * D;
        const double mu = ln ? mean[n] : 0.0;
        double sgx = 0;
        for (int d = 0; d < D; d++) sgx += (double)gr[d] * w[d] * (xr[d] - mu) * rstd[n];
        dsc[n] = (float)(-rstd[n] * sgx);
    }
    return MP_OK;
}

static mp_status c_norm_dx_scaled(void *ctx, const mp_config *c, float *dx, const float *dsc, const float *dout,
                                  const float *x, const float *w, const float *mean, const float *rstd, int N) {
    (void)ctx;
    const int D = c->d_model, ln = c->norm == MP_NORM_LAYER;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *gr = dout + (size_t)n * D;
        float *dr = dx + (size_t)n * D;
        const double mu = ln ? mean[n] : 0.0;
        double sg = 0;
        if (ln)
            for (int d = 0; d < D; d++) sg += (double)gr[d] * w[d];
        const double gm = sg / D;
        for (int d = 0; d < D; d++) {
            const double xh = (xr[d] - mu) * rstd[n];
            dr[d] += (float)(rstd[n] * ((double)gr[d] * w[d] - gm) + (double)dsc[n] * xh / D);
        }
    }
    return MP_OK;
}

static mp_status c_act(void *ctx, const mp_config *c, float *dpre, float *dup, const float *dpost, const float *pre,
                       const float *up, size_t n) {
    (void)ctx;
    if (c->mlp == MP_MLP_SWIGLU && c->gelu_tanh) mp_geglu_backward(dpre, dup, dpost, pre, up, n);
    else if (c->mlp == MP_MLP_SWIGLU) mp_swiglu_backward(dpre, dup, dpost, pre, up, n);
    else if (c->gelu_tanh) mp_gelu_tanh_backward(dpre, dpost, pre, n);
    else mp_gelu_backward(dpre, dpost, pre, n);
    return MP_OK;
}

static mp_status c_attn(void *ctx, const mp_config *c, const mp_acts *A, int l, const mp_layer_acts *a,
                        const mp_attn_layer *av, const float *dz, float *dq, float *dk, float *dv, float *datt,
                        float *dfac) {
    (void)ctx, (void)l;
    mp_attention_backward_scaled(dq, dk, dv, datt, dfac, dz, a->q, a->k, a->v, a->att, A->B, A->T, c->n_head,
                                 c->n_kv_head, c->d_head, av, mp_attn_scale(c), c->attn_softcap);
    return MP_OK;
}

/* dP = dz v^T on and below the diagonal (within the sliding window, av->window), 0 elsewhere; dv = sum over
 * the group of P^T dz */
static mp_status c_attn_dpattern(void *ctx, const mp_config *c, const mp_layer_acts *a, const mp_attn_layer *av, int B,
                                 int T, const float *dz, float *datt, float *dv) {
    (void)ctx;
    const int H = c->n_head, K = c->n_kv_head, Dh = c->d_head, HD = H * Dh, KD = K * Dh, group = H / K;
    const size_t TT = (size_t)T * T;
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < K; kh++) {
            const float *vp = a->v + (size_t)b * T * KD + (size_t)kh * Dh;
            float *dvp = dv + (size_t)b * T * KD + (size_t)kh * Dh;
            for (int i = 0; i < T; i++) memset(dvp + (size_t)i * KD, 0, (size_t)Dh * sizeof(float));
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                const float *P = a->att + ((size_t)b * H + h) * TT;
                const float *dzp = dz + (size_t)b * T * HD + (size_t)h * Dh;
                float *dP = datt + ((size_t)b * H + h) * TT;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, Dh, 1.0f, dzp, HD, vp, KD, 0.0f, dP, T);
                for (int i = 0; i < T; i++) {
                    for (int j = i + 1; j < T; j++) dP[(size_t)i * T + j] = 0.0f;
                    for (int j = 0; av->window > 0 && j <= i - av->window; j++) dP[(size_t)i * T + j] = 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, 1.0f, P, T, dzp, HD, 1.0f, dvp, KD);
            }
        }
    return MP_OK;
}

/* Shaw's relative values (relv.h): their share of d pattern, and rel_v's gradient */
static mp_status c_attn_relv(void *ctx, const mp_config *c, const mp_layer_acts *a, const mp_attn_layer *av,
                             const float *rel_v, float *drel_v, int B, int T, const float *dz, float *datt,
                             const int *mask) {
    (void)ctx;
    return mp_relv_backward(c, rel_v, drel_v, a->att, dz, datt, B, T, av->window, mask);
}

/* through the normalizer (and the variant's row factor) to the scores hook_attn_scores shows */
static mp_status c_attn_dscores(void *ctx, const mp_config *c, const mp_layer_acts *a, const mp_attn_layer *av,
                                int B, int T, float *datt, float *dfac) {
    (void)ctx;
    const int H = c->n_head, K = c->n_kv_head, Dh = c->d_head, HD = H * Dh, KD = K * Dh, group = H / K;
    const size_t TT = (size_t)T * T;
    const float scale = mp_attn_scale(c);
    const int factor = mp_attn_has_factor(av->kind);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int h = bh % H;
        const float *qp = a->q + (size_t)(bh / H) * T * HD + (size_t)h * Dh;
        const float *kp = a->k + (size_t)(bh / H) * T * KD + (size_t)(h / group) * Dh;
        for (int i = 0; i < T; i++) {
            float *dr = datt + (size_t)bh * TT + (size_t)i * T;
            const float *pr = a->att + (size_t)bh * TT + (size_t)i * T;
            mp_attn_normalize_backward(av, dr, pr, i + 1);
            if (factor) {
                if (dfac) /* as the fused kernel */
                    dfac[(size_t)bh * T + i] = (float)mp_attn_factor_grad_row(qp + (size_t)i * HD, kp, KD, dr, pr, i,
                                                                               Dh, scale);
                const float fac = (float)mp_attn_row_factor(av, h, i + 1);
                for (int j = 0; j <= i; j++) dr[j] *= fac;
            }
            for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
        }
    }
    return MP_OK;
}

/* scores = scale q k^T: dq = scale dS k; dk = scale sum over the group of dS^T q (with attn_softcap, dS
 * through the cap first: d raw = d capped (1 - tanh^2), in a copy) */
static mp_status c_attn_dqk(void *ctx, const mp_config *c, const mp_layer_acts *a, int B, int T, const float *datt,
                            float *dq, float *dk) {
    (void)ctx;
    const int H = c->n_head, K = c->n_kv_head, Dh = c->d_head, HD = H * Dh, KD = K * Dh, group = H / K;
    const size_t TT = (size_t)T * T;
    const float scale = mp_attn_scale(c);
    float *capped = NULL;
    if (c->attn_softcap > 0.0f) {
        if (!(capped = mp_malloc((size_t)B * H * TT * sizeof(float), "the soft cap's score gradient")))
            return MP_ERR_NOMEM;
        memcpy(capped, datt, (size_t)B * H * TT * sizeof(float));
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            const int h = bh % H;
            const float *qp = a->q + (size_t)(bh / H) * T * HD + (size_t)h * Dh;
            const float *kp = a->k + (size_t)(bh / H) * T * KD + (size_t)(h / group) * Dh;
            for (int i = 0; i < T; i++)
                mp_softcap_dscores(capped + (size_t)bh * TT + (size_t)i * T, qp + (size_t)i * HD, kp, KD, i + 1, Dh,
                                   scale, c->attn_softcap);
        }
        datt = capped;
    }
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < K; kh++) {
            const float *kp = a->k + (size_t)b * T * KD + (size_t)kh * Dh;
            float *dkp = dk + (size_t)b * T * KD + (size_t)kh * Dh;
            for (int i = 0; i < T; i++) memset(dkp + (size_t)i * KD, 0, (size_t)Dh * sizeof(float));
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                const float *dS = datt + ((size_t)b * H + h) * TT;
                const float *qp = a->q + (size_t)b * T * HD + (size_t)h * Dh;
                float *dqp = dq + (size_t)b * T * HD + (size_t)h * Dh;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, Dh, T, scale, dS, T, kp, KD, 0.0f, dqp, HD);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, scale, dS, T, qp, HD, 1.0f, dkp, KD);
            }
        }
    free(capped);
    return MP_OK;
}

static mp_status c_attn_factor(void *ctx, const mp_attn_layer *av, float *ds, float *ddelta, float *dbeta,
                               float *dgamma, const float *dfac, int B, int H, int T) {
    (void)ctx;
    mp_attn_factor_backward(av, ds, ddelta, dbeta, dgamma, dfac, B, H, T, 1);
    return MP_OK;
}

static mp_status c_pos(void *ctx, const mp_config *c, const float *cos_t, const float *sin_t, const float *q_scale,
                       float *x, int B, int T, int nh) {
    (void)ctx;
    mp_pos_apply(c, cos_t, sin_t, q_scale, x, B, T, nh, 1);
    return MP_OK;
}

static mp_status c_result_spread(void *ctx, const mp_config *c, float *dres_h, const float *dout, int N) {
    (void)ctx;
    const int D = c->d_model, H = c->n_head;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            memcpy(dres_h + ((size_t)n * H + h) * D, dout + (size_t)n * D, (size_t)D * sizeof(float));
    return MP_OK;
}

static mp_status c_result_back(void *ctx, const mp_config *c, float *dz, float *dwo, float *dbo, const float *dres_h,
                               const float *dout, const float *z, const float *wo, int N) {
    (void)ctx;
    const int D = c->d_model, H = c->n_head, Dh = c->d_head, HD = H * Dh;
    for (int h = 0; h < H; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, Dh, D, 1.0f, dres_h + (size_t)h * D, H * D,
                    wo + (size_t)h * Dh, HD, 0.0f, dz + (size_t)h * Dh, HD);
        if (dwo) /* d wo[:, h Dh ..] [D, Dh] += d result_h^T [D, N] @ z_h [N, Dh] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, Dh, N, 1.0f, dres_h + (size_t)h * D, H * D,
                        z + (size_t)h * Dh, HD, 1.0f, dwo + (size_t)h * Dh, HD);
    }
    if (dwo && dbo)
        for (int d = 0; d < D; d++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * D + d];
            dbo[d] += s;
        }
    return MP_OK;
}

static mp_status c_embed(void *ctx, const mp_config *c, float *dembed, float *dpos_embed, const float *dres,
                         const float *dpos, const int *tokens, int B, int T) {
    (void)ctx;
    const int D = c->d_model;
    if (c->embed_scale) { /* hook_embed = sqrt(D) embed[token]: dembed [token] += sqrt(D) dres */
        const float s = sqrtf((float)D);
        for (int n = 0; n < B * T; n++) {
            float *de = dembed + (size_t)tokens[n] * D;
            const float *dr = dres + (size_t)n * D;
            for (int i = 0; i < D; i++) de[i] += s * dr[i];
        }
    } else {
        mp_embed_backward(dembed, dres, tokens, B * T, D);
    }
    if (dpos_embed) /* learned positions: row t of every sequence */
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                float *dp = dpos_embed + (size_t)t * D;
                const float *dr = dpos + ((size_t)b * T + t) * D;
                for (int i = 0; i < D; i++) dp[i] += dr[i];
            }
    return MP_OK;
}

static mp_status c_mul(void *ctx, float *dst, const float *a, const float *b, size_t n) {
    (void)ctx;
    for (size_t i = 0; i < n; i++) dst[i] = a[i] * b[i];
    return MP_OK;
}

static mp_status c_fire(void *ctx, const mp_hooks *hs, mp_hook_info *info, float *grad) {
    (void)ctx;
    return mp_hooks_fire(hs, info, grad);
}

static mp_status c_qk_norm(void *ctx, const mp_config *c, float *d, float *tmp, float *dw, const float *x,
                           const float *w, const float *rstd, int rows, int width) {
    (void)ctx;
    (void)c;
    const size_t n = (size_t)rows * width;
    memset(tmp, 0, n * sizeof(float));
    mp_rmsnorm_backward(tmp, dw, d, x, w, rstd, rows, width);
    memcpy(d, tmp, n * sizeof(float));
    return MP_OK;
}

static float *c_alloc(void *ctx, size_t n, const char *what) {
    (void)ctx;
    return mp_calloc(n, sizeof(float), what);
}

static void c_release(void *ctx, float *p) {
    (void)ctx;
    free(p);
}

const mp_bwd_ops mp_bwd_ops_cpu = {
    .name = "cpu",
    .zero = c_zero,
    .copy = c_copy,
    .add = c_add,
    .linear = c_linear,
    .norm = c_norm,
    .norm_dscale = c_norm_dscale,
    .norm_dx_scaled = c_norm_dx_scaled,
    .qk_norm = c_qk_norm,
    .act = c_act,
    .attn = c_attn,
    .attn_dpattern = c_attn_dpattern,
    .attn_relv = c_attn_relv,
    .attn_dscores = c_attn_dscores,
    .attn_dqk = c_attn_dqk,
    .attn_factor = c_attn_factor,
    .pos = c_pos,
    .result_spread = c_result_spread,
    .result_back = c_result_back,
    .embed = c_embed,
    .mul = c_mul,
    .fire = c_fire,
    .alloc = c_alloc,
    .release = c_release,
};
