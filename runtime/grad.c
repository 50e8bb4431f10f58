/* grad.c — the backward from a caller's dlogits to every hook point's
 * activation, with backward hooks fired (and free to edit) at each point in
 * reverse firing order, over the activations of a training-mode forward; and
 * the sums of attribution patching. See grad.h. Only input gradients are
 * formed (no parameter gradients), so the training backward (train.c) and its
 * bytes are untouched; the layer kernels are ops_backward.c's. */
#include "grad.h"
#include "attn_variants.h"
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int mp_grad_has_hook(mp_hook_id id) {
    switch (id) {
    case MP_HOOK_EMBED: case MP_HOOK_RESID_PRE: case MP_HOOK_LN1: case MP_HOOK_Q: case MP_HOOK_K: case MP_HOOK_V:
    case MP_HOOK_ROT_Q: case MP_HOOK_ROT_K: case MP_HOOK_ATTN_SCORES: case MP_HOOK_PATTERN: case MP_HOOK_Z:
    case MP_HOOK_ATTN_OUT: case MP_HOOK_RESID_MID: case MP_HOOK_LN2: case MP_HOOK_MLP_PRE:
    case MP_HOOK_MLP_PRE_LINEAR: case MP_HOOK_MLP_POST: case MP_HOOK_MLP_OUT: case MP_HOOK_RESID_POST:
    case MP_HOOK_LN_FINAL: case MP_HOOK_POS_EMBED: case MP_HOOK_LN1_SCALE: case MP_HOOK_LN2_SCALE:
    case MP_HOOK_LNF_SCALE: case MP_HOOK_MLP_IN: case MP_HOOK_RESULT:
        return 1;
    default: /* a point added to the table without a backward here */
        return 0;
    }
}

typedef struct {
    const mp_config *c;
    const mp_hooks *hs;
    int B, T;
} bwd_ctx;

/* Fires the backward callbacks at (id, l) on the whole gradient view. */
static mp_status fire(const bwd_ctx *f, mp_hook_id id, int l, float *grad) {
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

/* din [N,IN] (+)= dout [N,OUT] @ w [OUT,IN] (beta 0: overwrite, 1: add) */
static void lin_bwd(float *din, const float *dout, const float *w, int N, int IN, int OUT, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dout, OUT, w, IN, beta, din, IN);
}

/* dres += the norm's input gradient from dout (dw: 2 D floats of scratch) */
static void norm_bwd(const mp_config *c, float *dres, float *dw, const float *dout, const float *x, const float *w,
                     const float *mean, const float *rstd, int N) {
    if (c->norm == MP_NORM_LAYER)
        mp_layernorm_backward(dres, dw, dw + c->d_model, dout, x, w, mean, rstd, N, c->d_model);
    else
        mp_rmsnorm_backward(dres, dw, dout, x, w, rstd, N, c->d_model);
}

/* The norm backward through its hook_scale point sid: with the point hooked,
 * d scale [N] (= -rstd * sum_d dout_d w_d xhat_d) is fired (and may be edited),
 * then dres += the input gradient with the scale held fixed plus d scale *
 * d scale/dx (= xhat / D for RMSNorm and LayerNorm alike), which is norm_bwd's
 * result when nothing is edited; not hooked: norm_bwd. dsc: N floats. */
static mp_status norm_bwd_scale(const bwd_ctx *f, mp_hook_id sid, int l, float *dres, float *dw, float *dsc,
                                const float *dout, const float *x, const float *w, const float *mean,
                                const float *rstd, int N) {
    const mp_config *c = f->c;
    if (!mp_hooks_active(f->hs, sid, l)) {
        norm_bwd(c, dres, dw, dout, x, w, mean, rstd, N);
        return MP_OK;
    }
    const int D = c->d_model, ln = c->norm == MP_NORM_LAYER;
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

/* The attention backward of one layer, in the steps whose results are hook
 * points: dz -> dP (hook_pattern) -> d scores (hook_attn_scores) -> dq, dk
 * (after the positional scheme), and dv. dq, dk, dv are overwritten. */
static mp_status attn_bwd(const bwd_ctx *f, int l, const mp_layer_acts *a, const mp_attn_layer *av, float *datt,
                          const float *dz, float *dq, float *dk, float *dv) {
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
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int h = bh % H;
        for (int i = 0; i < T; i++) {
            float *dr = datt + (size_t)bh * TT + (size_t)i * T;
            mp_attn_normalize_backward(av, dr, a->att + (size_t)bh * TT + (size_t)i * T, i + 1);
            if (mp_attn_has_factor(av->kind)) {
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

mp_status mp_model_backward_acts(const mp_model *m, mp_acts *A, const float *dlogits, const mp_hooks *hs) {
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    const int B = A->B, T = A->T, N = B * T, D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head;
    const int M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp, HD = H * Dh, KD = K * Dh, half = Dh / 2;
    const size_t nx = (size_t)N * D, nh = (size_t)N * M;
    bwd_ctx f = {c, hs, B, T};
    float *dres = A->dresid, *dxn = A->dxn;
    /* a branch's own copy of the residual gradient (hook_attn_out / hook_mlp_out
     * edits reach that branch only), and the norms' discarded weight gradients */
    float *mem = mp_calloc(nx + 2 * (size_t)D + (size_t)N, sizeof(float), "gradient buffers");
    if (!mem) return MP_ERR_NOMEM;
    float *dbr = mem, *dw = mem + nx, *dsc = dw + 2 * (size_t)D; /* dsc: a hook_scale gradient [N] */
    float *dres_h = NULL; /* hook_result's gradient [N, H, D], only when it is hooked */
    mp_status st;
#define FIRE(id, l, ptr) do { if ((st = fire(&f, id, l, ptr))) goto cleanup; } while (0)
    lin_bwd(dxn, dlogits, p->unembed, N, D, c->vocab, 0.0f);
    FIRE(MP_HOOK_LN_FINAL, -1, dxn);
    memset(dres, 0, nx * sizeof(float));
    if ((st = norm_bwd_scale(&f, MP_HOOK_LNF_SCALE, -1, dres, dw, dsc, dxn, A->resid + (size_t)c->n_layer * nx,
                             p->lnf_w, A->lnf_mean, A->lnf_rstd, N)))
        goto cleanup;
    for (int l = c->n_layer - 1; l >= 0; l--) {
        const mp_layer_params w = mp_params_layer(c, p, l);
        const mp_layer_acts a = mp_acts_layer(c, A, l);
        FIRE(MP_HOOK_RESID_POST, l, dres);
        if (M) {
            const float *dout = dres;
            if (mp_hooks_active(hs, MP_HOOK_MLP_OUT, l)) {
                memcpy(dbr, dres, nx * sizeof(float));
                FIRE(MP_HOOK_MLP_OUT, l, dbr);
                dout = dbr;
            }
            lin_bwd(A->dpost, dout, w.w2, N, M, D, 0.0f);
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
            lin_bwd(dxn, A->dpre, w.w1, N, D, M, 0.0f);
            if (c->mlp == MP_MLP_SWIGLU) lin_bwd(dxn, A->dup, w.w3, N, D, M, 1.0f);
            FIRE(MP_HOOK_LN2, l, dxn);
            /* hook_mlp_in: the MLP branch's own input gradient, then added to the residual's */
            const int mi = mp_hooks_active(hs, MP_HOOK_MLP_IN, l);
            if (mi) memset(dbr, 0, nx * sizeof(float));
            if ((st = norm_bwd_scale(&f, MP_HOOK_LN2_SCALE, l, mi ? dbr : dres, dw, dsc, dxn, a.resid_mid, w.ln2_w,
                                     a.ln2_mean, a.ln2_rstd, N)))
                goto cleanup;
            if (mi) {
                FIRE(MP_HOOK_MLP_IN, l, dbr);
                for (size_t i = 0; i < nx; i++) dres[i] += dbr[i];
            }
        }
        FIRE(MP_HOOK_RESID_MID, l, dres);
        const float *dout = dres;
        if (mp_hooks_active(hs, MP_HOOK_ATTN_OUT, l)) {
            memcpy(dbr, dres, nx * sizeof(float));
            FIRE(MP_HOOK_ATTN_OUT, l, dbr);
            dout = dbr;
        }
        if (mp_hooks_active(hs, MP_HOOK_RESULT, l)) { /* each head's share of attn_out: dout per head */
            if (!dres_h && !(dres_h = mp_malloc((size_t)N * H * D * sizeof(float), "hook_result's gradient"))) {
                st = MP_ERR_NOMEM;
                goto cleanup;
            }
            for (int n = 0; n < N; n++)
                for (int h = 0; h < H; h++)
                    memcpy(dres_h + ((size_t)n * H + h) * D, dout + (size_t)n * D, (size_t)D * sizeof(float));
            FIRE(MP_HOOK_RESULT, l, dres_h);
            for (int h = 0; h < H; h++) /* dz_h [N, Dh] = d result_h [N, D] @ wo[:, h Dh .. (h+1) Dh] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, Dh, D, 1.0f, dres_h + (size_t)h * D, H * D,
                            w.wo + (size_t)h * Dh, HD, 0.0f, A->dz + (size_t)h * Dh, HD);
        } else {
            lin_bwd(A->dz, dout, w.wo, N, HD, D, 0.0f);
        }
        FIRE(MP_HOOK_Z, l, A->dz);
        const mp_attn_layer av = mp_attn_layer_of(c, p, l);
        if ((st = attn_bwd(&f, l, &a, &av, A->datt, A->dz, A->dq, A->dk, A->dv))) goto cleanup;
        FIRE(MP_HOOK_ROT_K, l, A->dk);
        FIRE(MP_HOOK_ROT_Q, l, A->dq);
        if (mp_pos_rotates(c)) { /* the forward's tables (A->pos_tab), as train.c's backward */
            const float *cos_t = A->pos_tab, *sin_t = cos_t + (size_t)T * half;
            const float *q_scale = mp_pos_has_logit_scale(c) ? sin_t + (size_t)T * half : NULL;
            mp_pos_apply(c, cos_t, sin_t, q_scale, A->dq, B, T, H, 1);
            mp_pos_apply(c, cos_t, sin_t, NULL, A->dk, B, T, K, 1);
        }
        FIRE(MP_HOOK_V, l, A->dv);
        FIRE(MP_HOOK_K, l, A->dk);
        FIRE(MP_HOOK_Q, l, A->dq);
        lin_bwd(dxn, A->dq, w.wq, N, D, HD, 0.0f);
        lin_bwd(dxn, A->dk, w.wk, N, D, KD, 1.0f);
        lin_bwd(dxn, A->dv, w.wv, N, D, KD, 1.0f);
        FIRE(MP_HOOK_LN1, l, dxn);
        if ((st = norm_bwd_scale(&f, MP_HOOK_LN1_SCALE, l, dres, dw, dsc, dxn, a.resid_in, w.ln1_w, a.ln1_mean,
                                 a.ln1_rstd, N)))
            goto cleanup;
        FIRE(MP_HOOK_RESID_PRE, l, dres);
    }
    FIRE(MP_HOOK_EMBED, -1, dres);
    if (c->pos == MP_POS_LEARNED && mp_hooks_active(hs, MP_HOOK_POS_EMBED, -1)) { /* embed = token + position */
        memcpy(dbr, dres, nx * sizeof(float));
        FIRE(MP_HOOK_POS_EMBED, -1, dbr);
    }
#undef FIRE
    st = MP_OK;
cleanup:
    free(dres_h);
    free(mem);
    return st;
}

/* ---- attribution patching ---- */

int mp_grad_attr_shape(const mp_config *c, mp_hook_id id, int T, mp_attr_per per, int64_t shape[2]) {
    const mp_shape_kind k = mp_hook_shape_kind[id];
    const int heads = k == MP_SHAPE_BTHD || k == MP_SHAPE_BTKD || k == MP_SHAPE_BHTS;
    const int nh = k == MP_SHAPE_BTKD ? c->n_kv_head : c->n_head;
    switch (per) {
    case MP_ATTR_ALL: shape[0] = 1; return 1;
    case MP_ATTR_POSITION: shape[0] = T; return 1;
    case MP_ATTR_HEAD:
        if (!heads) return 0;
        shape[0] = nh;
        return 1;
    case MP_ATTR_HEAD_POSITION:
        if (!heads) return 0;
        shape[0] = nh;
        shape[1] = T;
        return 2;
    case MP_ATTR_NEURON:
        if (heads) return 0;
        shape[0] = k == MP_SHAPE_BTM ? c->d_mlp : c->d_model;
        return 1;
    }
    return 0;
}

mp_status mp_grad_attribution(const mp_config *c, mp_hook_id id, int B, int T, const float *clean,
                              const float *corrupt, const float *grad, mp_attr_per per, float *out) {
    int64_t s[4], os[2];
    mp_hook_shape(c, id, B, T, 0, s);
    const int ond = mp_grad_attr_shape(c, id, T, per, os);
    const size_t nout = ond == 2 ? (size_t)(os[0] * os[1]) : ond == 1 ? (size_t)os[0] : 0;
    if (!nout) return mp_error(MP_ERR_ARG, "attribution: this grouping does not apply to hook %s", mp_hook_suffix[id]);
    double *acc = mp_calloc(nout, sizeof(double), "attribution sums");
    if (!acc) return MP_ERR_NOMEM;
    const mp_shape_kind k = mp_hook_shape_kind[id];
    const int bhts = k == MP_SHAPE_BHTS, nd = k == MP_SHAPE_BTD || k == MP_SHAPE_BTM ? 3 : 4;
    const size_t n = (size_t)s[0] * s[1] * s[2] * (nd == 4 ? (size_t)s[3] : 1);
    /* the index of element e along each axis: i0..i3 of the hook's shape */
    const size_t inner = nd == 4 ? (size_t)s[3] : 1;
    for (size_t e = 0; e < n; e++) {
        const double v = ((double)clean[e] - (double)corrupt[e]) * (double)grad[e];
        size_t r = e / inner;
        const size_t i3 = e % inner, i2 = r % (size_t)s[2];
        r /= (size_t)s[2];
        const size_t i1 = r % (size_t)s[1];
        /* position (query) and head of this element */
        const size_t pos = bhts ? i2 : i1, head = bhts ? i1 : i2;
        size_t o = 0;
        switch (per) {
        case MP_ATTR_ALL: o = 0; break;
        case MP_ATTR_POSITION: o = pos; break;
        case MP_ATTR_HEAD: o = head; break;
        case MP_ATTR_HEAD_POSITION: o = head * (size_t)T + pos; break;
        case MP_ATTR_NEURON: o = nd == 4 ? i3 : i2; break;
        }
        acc[o] += v;
    }
    for (size_t i = 0; i < nout; i++) out[i] = (float)acc[i];
    free(acc);
    return MP_OK;
}
