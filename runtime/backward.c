/* backward.c — the one CPU backward of the model (see backward.h): a single
 * walk in reverse over a training-mode forward's activations, serving both the
 * training step (train.c: weight gradients, no hooks) and the backward hooks
 * of interpretability (grad.c: input gradients only, a callback at every hook
 * point that may edit the gradient there, the edit propagating upstream).
 * The two switches are independent: weight gradients with hooks fire the
 * hooks and accumulate the weights' gradients from the edited values.
 *
 * Every step of the block is written once. Where the two callers have always
 * computed a step with different arithmetic, both are kept, so that each
 * keeps its bytes:
 *  - the attention: with weight gradients and neither attention map of the
 *    layer hooked, ops_backward.c's fused kernel (blocks of query rows, the
 *    1/sqrt(Dh) folded into d scores); otherwise three stages with a hook
 *    point between them, dz -> d pattern -> d scores -> dq, dk (attn_stages);
 *  - the SwiGLU MLP's input gradient sums its two products in the order each
 *    caller has always used (dxn_order below).
 * The linear layers' input gradients are written with beta 0, which is the
 * bytes of clearing the buffer and accumulating (OpenBLAS starts both from
 * zero). The layer kernels are ops_backward.c's. */
#include "backward.h"
#include "attn_variants.h"
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const mp_config *c;
    const mp_hooks *hs;
    int B, T;
    int wgrad;   /* weight gradients on */
    float *dbr;  /* [N, D] a branch's own copy of a residual gradient (hooks only) */
    float *dsc;  /* [N] a hook_scale gradient (hooks only) */
    float *ndw;  /* [2 D] the norms' discarded weight gradients (no weight gradients) */
    float *spare; /* [N, D] a discarded input gradient (weight gradients and hooks) */
} walk;

/* Fires the backward callbacks at (id, l) on the whole gradient view. */
static mp_status fire(const walk *f, mp_hook_id id, int l, float *grad) {
    if (!mp_hooks_active(f->hs, id, l)) return MP_OK;
    mp_hook_info info;
    memset(&info, 0, sizeof info);
    info.id = id;
    info.layer = l;
    info.ndim = mp_hook_shape(f->c, id, f->B, f->T, 0, info.shape);
    memcpy(info.full, info.shape, sizeof info.full);
    info.axis = 1;
    info.numel = 1;
    for (int i = 0; i < info.ndim; i++) info.numel *= (size_t)info.shape[i];
    return mp_hooks_fire(f->hs, &info, grad);
}

/* A linear layer out [N,OUT] = in [N,IN] @ w^T + b, backward:
 * din (beta 0: =, 1: +=) dout @ w; with dw, dw += dout^T in and db += column sums. */
static void lin(float *din, float beta, float *dw, float *db, const float *dout, const float *in, const float *w,
                int N, int IN, int OUT) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN, beta, din, IN);
    if (dw) mp_matmul_backward(NULL, dw, db, dout, in, w, N, IN, OUT);
}

static void norm_kernel(const mp_config *c, float *dx, float *dw, float *db, const float *dout, const float *x,
                        const float *w, const float *mean, const float *rstd, int N) {
    if (c->norm == MP_NORM_LAYER) mp_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, c->d_model);
    else mp_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, c->d_model);
}

/* A norm's backward: dres += its input gradient from dout; dw, db (weight
 * gradients on) += its weights' gradients. With its hook_scale point sid
 * hooked, d scale [N] (= -rstd * sum_d dout_d w_d xhat_d) is fired (and may
 * be edited), then dres += the input gradient with the scale held fixed plus
 * d scale * d scale/dx (= xhat / D for RMSNorm and LayerNorm alike), which is
 * the kernel's result when nothing is edited. */
static mp_status norm_step(const walk *f, mp_hook_id sid, int l, float *dres, float *dw, float *db,
                           const float *dout, const float *x, const float *w, const float *mean, const float *rstd) {
    const mp_config *c = f->c;
    const int N = f->B * f->T, D = c->d_model, ln = c->norm == MP_NORM_LAYER;
    if (!f->wgrad) dw = f->ndw, db = f->ndw + D;
    if (!mp_hooks_active(f->hs, sid, l)) {
        norm_kernel(c, dres, dw, db, dout, x, w, mean, rstd, N);
        return MP_OK;
    }
    if (f->wgrad) { /* the weights' gradients as unhooked; its input gradient is discarded */
        memset(f->spare, 0, (size_t)N * D * sizeof(float));
        norm_kernel(c, f->spare, dw, db, dout, x, w, mean, rstd, N);
    }
    float *dsc = f->dsc;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *gr = dout + (size_t)n * D;
        const double mu = ln ? mean[n] : 0.0;
        double sgx = 0;
        for (int d = 0; d < D; d++) sgx += (double)gr[d] * w[d] * (xr[d] - mu) * rstd[n];
        dsc[n] = (float)(-rstd[n] * sgx);
    }
    mp_status st = fire(f, sid, l, dsc);
    if (st) return st;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *gr = dout + (size_t)n * D;
        float *dr = dres + (size_t)n * D;
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

/* The attention backward of one layer in the steps whose results are hook
 * points: dz -> dP (hook_pattern) -> d scores (hook_attn_scores) -> dq, dk
 * (before the positional scheme), and dv. dq, dk, dv are overwritten; dfac
 * (non-NULL with weight gradients) receives each query row's gradient of the
 * variant's factor, as the fused kernel's. */
static mp_status attn_stages(const walk *f, int l, const mp_layer_acts *a, const mp_attn_layer *av, float *datt,
                             float *dfac, const float *dz, float *dq, float *dk, float *dv) {
    const mp_config *c = f->c;
    const int B = f->B, T = f->T, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, HD = H * Dh, KD = K * Dh;
    const int group = H / K;
    const size_t TT = (size_t)T * T;
    const float scale = 1.0f / sqrtf((float)Dh);
    mp_status st;
    /* dP = dz v^T on and below the diagonal, 0 above; dv = sum over the group of P^T dz */
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
                for (int i = 0; i < T; i++)
                    for (int j = i + 1; j < T; j++) dP[(size_t)i * T + j] = 0.0f;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, 1.0f, P, T, dzp, HD, 1.0f, dvp, KD);
            }
        }
    if ((st = fire(f, MP_HOOK_PATTERN, l, datt))) return st;
    /* through the normalizer (and the variant's row factor) to the scores hook_attn_scores shows */
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
                if (dfac) { /* sum_j dU_ij S_ij over the support, S = scale q k^T (as the fused kernel) */
                    double g = 0.0;
                    const float *qi = qp + (size_t)i * HD;
                    for (int j = 0; j <= i; j++) {
                        if (!(pr[j] > 0.0f)) continue;
                        const float *kj = kp + (size_t)j * KD;
                        double dot = 0.0;
                        for (int e = 0; e < Dh; e++) dot += (double)qi[e] * kj[e];
                        g += (double)dr[j] * dot * scale;
                    }
                    dfac[(size_t)bh * T + i] = (float)g;
                }
                const float fac = (float)mp_attn_row_factor(av, h, i + 1);
                for (int j = 0; j <= i; j++) dr[j] *= fac;
            }
            for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
        }
    }
    if ((st = fire(f, MP_HOOK_ATTN_SCORES, l, datt))) return st;
    /* scores = scale q k^T: dq = scale dS k; dk = scale sum over the group of dS^T q */
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
    return MP_OK;
}

/* hook_result hooked: each head's share of attn_out gets dout, is fired as
 * [N,H,D], and dz_h [N,Dh] = d result_h [N,D] @ wo[:, h Dh .. (h+1) Dh]; with
 * weight gradients, wo's slice of head h from d result_h and bo from dout
 * (the bias is not part of any head's result). dres_h: N H D floats. */
static mp_status result_step(const walk *f, int l, const mp_layer_params *w, const mp_layer_params *dw,
                             const mp_layer_acts *a, const float *dout, float *dres_h, float *dz) {
    const mp_config *c = f->c;
    const int N = f->B * f->T, D = c->d_model, H = c->n_head, Dh = c->d_head, HD = H * Dh;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            memcpy(dres_h + ((size_t)n * H + h) * D, dout + (size_t)n * D, (size_t)D * sizeof(float));
    mp_status st = fire(f, MP_HOOK_RESULT, l, dres_h);
    if (st) return st;
    for (int h = 0; h < H; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, Dh, D, 1.0f, dres_h + (size_t)h * D, H * D,
                    w->wo + (size_t)h * Dh, HD, 0.0f, dz + (size_t)h * Dh, HD);
        if (f->wgrad) /* d wo[:, h Dh ..] [D, Dh] += d result_h^T [D, N] @ z_h [N, Dh] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, Dh, N, 1.0f, dres_h + (size_t)h * D, H * D,
                        a->z + (size_t)h * Dh, HD, 1.0f, dw->wo + (size_t)h * Dh, HD);
    }
    if (f->wgrad && dw->bo)
        for (int d = 0; d < D; d++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * D + d];
            dw->bo[d] += s;
        }
    return MP_OK;
}

mp_status mp_backward(const mp_model *m, mp_acts *A, const float *dlogits, const mp_backward_params *bp) {
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    const mp_hooks *hs = bp->hooks;
    mp_params *g = bp->grads ? &bp->grads->g : NULL;
    const int B = A->B, T = A->T, N = B * T, D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head;
    const int M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp, HD = H * Dh, KD = K * Dh, half = Dh / 2;
    const size_t nx = (size_t)N * D, nh = (size_t)N * M;
    walk f = {c, hs, B, T, g != NULL, NULL, NULL, NULL, NULL};
    float *dres = A->dresid, *dxn = A->dxn;
    /* the hooks' buffers, the norms' discarded weight gradients */
    const size_t nmem = (hs ? nx + (size_t)N : 0) + (g ? 0 : 2 * (size_t)D) + (hs && g ? nx : 0);
    float *mem = nmem ? mp_calloc(nmem, sizeof(float), "gradient buffers") : NULL;
    if (nmem && !mem) return MP_ERR_NOMEM;
    float *cur = mem;
    if (hs) f.dbr = cur, cur += nx, f.dsc = cur, cur += N;
    if (!g) f.ndw = cur, cur += 2 * (size_t)D;
    if (hs && g) f.spare = cur;
    float *dres_h = NULL; /* hook_result's gradient [N, H, D], only when it is hooked */
    mp_status st;
#define TRY(x) do { if ((st = (x))) goto cleanup; } while (0)
#define FIRE(id, l, ptr) TRY(fire(&f, id, l, ptr))
    /* classifier and final norm */
    lin(dxn, 0.0f, g ? g->unembed : NULL, NULL, dlogits, A->lnf, p->unembed, N, D, c->vocab);
    FIRE(MP_HOOK_LN_FINAL, -1, dxn);
    memset(dres, 0, nx * sizeof(float));
    TRY(norm_step(&f, MP_HOOK_LNF_SCALE, -1, dres, g ? g->lnf_w : NULL, g ? g->lnf_b : NULL, dxn,
                  A->resid + (size_t)c->n_layer * nx, p->lnf_w, A->lnf_mean, A->lnf_rstd));
    for (int l = c->n_layer - 1; l >= 0; l--) {
        /* this layer's weights, their gradients, and its stored activations */
        const mp_layer_params w = mp_params_layer(c, p, l);
        mp_layer_params dw;
        if (g) dw = mp_params_layer(c, g, l);
        else memset(&dw, 0, sizeof dw);
        const mp_layer_acts a = mp_acts_layer(c, A, l);
        FIRE(MP_HOOK_RESID_POST, l, dres);
        if (M) {
            const float *dout = dres;
            if (mp_hooks_active(hs, MP_HOOK_MLP_OUT, l)) { /* an edit reaches the MLP branch only */
                memcpy(f.dbr, dres, nx * sizeof(float));
                FIRE(MP_HOOK_MLP_OUT, l, f.dbr);
                dout = f.dbr;
            }
            lin(A->dpost, 0.0f, dw.w2, dw.b2, dout, a.post, w.w2, N, M, D);
            FIRE(MP_HOOK_MLP_POST, l, A->dpost);
            memset(A->dpre, 0, nh * sizeof(float));
            if (c->mlp == MP_MLP_SWIGLU) {
                memset(A->dup, 0, nh * sizeof(float));
                mp_swiglu_backward(A->dpre, A->dup, A->dpost, a.pre, a.up, nh);
                FIRE(MP_HOOK_MLP_PRE_LINEAR, l, A->dup);
            } else if (c->gelu_tanh) {
                mp_gelu_tanh_backward(A->dpre, A->dpost, a.pre, nh);
            } else {
                mp_gelu_backward(A->dpre, A->dpost, a.pre, nh);
            }
            FIRE(MP_HOOK_MLP_PRE, l, A->dpre);
            /* dxn_order: the training step has always summed the up (w3) product
             * first, the backward hooks the gate (w1) product first */
            if (c->mlp != MP_MLP_SWIGLU) {
                lin(dxn, 0.0f, dw.w1, dw.b1, A->dpre, a.ln2, w.w1, N, D, M);
            } else if (g) {
                lin(dxn, 0.0f, dw.w3, dw.b3, A->dup, a.ln2, w.w3, N, D, M);
                lin(dxn, 1.0f, dw.w1, dw.b1, A->dpre, a.ln2, w.w1, N, D, M);
            } else {
                lin(dxn, 0.0f, NULL, NULL, A->dpre, a.ln2, w.w1, N, D, M);
                lin(dxn, 1.0f, NULL, NULL, A->dup, a.ln2, w.w3, N, D, M);
            }
            FIRE(MP_HOOK_LN2, l, dxn);
            /* hook_mlp_in: the MLP branch's own input gradient, then added to the residual's */
            const int mi = mp_hooks_active(hs, MP_HOOK_MLP_IN, l);
            if (mi) memset(f.dbr, 0, nx * sizeof(float));
            TRY(norm_step(&f, MP_HOOK_LN2_SCALE, l, mi ? f.dbr : dres, dw.ln2_w, dw.ln2_b, dxn, a.resid_mid, w.ln2_w,
                          a.ln2_mean, a.ln2_rstd));
            if (mi) {
                FIRE(MP_HOOK_MLP_IN, l, f.dbr);
                for (size_t i = 0; i < nx; i++) dres[i] += f.dbr[i];
            }
        }
        /* attention */
        FIRE(MP_HOOK_RESID_MID, l, dres);
        const float *dout = dres;
        if (mp_hooks_active(hs, MP_HOOK_ATTN_OUT, l)) {
            memcpy(f.dbr, dres, nx * sizeof(float));
            FIRE(MP_HOOK_ATTN_OUT, l, f.dbr);
            dout = f.dbr;
        }
        if (mp_hooks_active(hs, MP_HOOK_RESULT, l)) {
            if (!dres_h && !(dres_h = mp_malloc((size_t)N * H * D * sizeof(float), "hook_result's gradient"))) {
                st = MP_ERR_NOMEM;
                goto cleanup;
            }
            TRY(result_step(&f, l, &w, &dw, &a, dout, dres_h, A->dz));
        } else {
            lin(A->dz, 0.0f, dw.wo, dw.bo, dout, a.z, w.wo, N, HD, D);
        }
        FIRE(MP_HOOK_Z, l, A->dz);
        const mp_attn_layer av = mp_attn_layer_of(c, p, l);
        if (g && !mp_hooks_active(hs, MP_HOOK_PATTERN, l) && !mp_hooks_active(hs, MP_HOOK_ATTN_SCORES, l)) {
            memset(A->dq, 0, (size_t)N * HD * sizeof(float));
            memset(A->dk, 0, (size_t)N * KD * sizeof(float));
            memset(A->dv, 0, (size_t)N * KD * sizeof(float));
            mp_attention_backward_variant(A->dq, A->dk, A->dv, A->datt, A->dfac, A->dz, a.q, a.k, a.v, a.att, B, T,
                                          H, K, Dh, &av);
        } else {
            TRY(attn_stages(&f, l, &a, &av, A->datt, g ? A->dfac : NULL, A->dz, A->dq, A->dk, A->dv));
        }
        /* the variant's per-head parameters (ssmax s; asentmax delta, beta, gamma) */
        if (g) mp_attn_factor_backward(&av, dw.ssmax_s, dw.as_delta, dw.as_beta, dw.as_gamma, A->dfac, B, H, T, 1);
        FIRE(MP_HOOK_ROT_K, l, A->dk);
        FIRE(MP_HOOK_ROT_Q, l, A->dq);
        if (mp_pos_rotates(c)) { /* the forward's tables (A->pos_tab) */
            const float *cos_t = A->pos_tab, *sin_t = cos_t + (size_t)T * half;
            const float *q_scale = mp_pos_has_logit_scale(c) ? sin_t + (size_t)T * half : NULL;
            mp_pos_apply(c, cos_t, sin_t, q_scale, A->dq, B, T, H, 1);
            mp_pos_apply(c, cos_t, sin_t, NULL, A->dk, B, T, K, 1);
        }
        FIRE(MP_HOOK_V, l, A->dv);
        FIRE(MP_HOOK_K, l, A->dk);
        FIRE(MP_HOOK_Q, l, A->dq);
        lin(dxn, 0.0f, dw.wq, dw.bq, A->dq, a.ln1, w.wq, N, D, HD);
        lin(dxn, 1.0f, dw.wk, dw.bk, A->dk, a.ln1, w.wk, N, D, KD);
        lin(dxn, 1.0f, dw.wv, dw.bv, A->dv, a.ln1, w.wv, N, D, KD);
        FIRE(MP_HOOK_LN1, l, dxn);
        TRY(norm_step(&f, MP_HOOK_LN1_SCALE, l, dres, dw.ln1_w, dw.ln1_b, dxn, a.resid_in, w.ln1_w, a.ln1_mean,
                      a.ln1_rstd));
        FIRE(MP_HOOK_RESID_PRE, l, dres);
        if (g && bp->sync) TRY(bp->sync->ready(bp->sync->user, bp->grads, c, l));
    }
    /* embeddings: hook_embed is token + position */
    FIRE(MP_HOOK_EMBED, -1, dres);
    const float *dpos = dres;
    if (c->pos == MP_POS_LEARNED && mp_hooks_active(hs, MP_HOOK_POS_EMBED, -1)) {
        memcpy(f.dbr, dres, nx * sizeof(float));
        FIRE(MP_HOOK_POS_EMBED, -1, f.dbr);
        dpos = f.dbr;
    }
    if (g) {
        mp_embed_backward(g->embed, dres, bp->tokens, N, D);
        if (g->pos_embed) /* learned positions: row t of every sequence */
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    float *dp = g->pos_embed + (size_t)t * D;
                    const float *dr = dpos + ((size_t)b * T + t) * D;
                    for (int i = 0; i < D; i++) dp[i] += dr[i];
                }
        if (bp->sync) TRY(bp->sync->ready(bp->sync->user, bp->grads, c, -1));
    }
#undef FIRE
#undef TRY
    st = MP_OK;
cleanup:
    free(dres_h);
    free(mem);
    return st;
}
