/* fwd_hooks.c — the forward pass's hook points that need a computation of
 * their own, done only when a hook is registered there (see fwd_hooks.h):
 * the norms' scale between its two steps, the per-head q/k/v input path and
 * the per-head attention results (the CPU's ops of exec.h call them), and the
 * views every device's hook points are handed. */
#include "fwd_hooks.h"
#include "ops.h"
#include "quant.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

void mp_fwd_whole_info(const mp_fwd_ctx *f, mp_hook_id id, int l, mp_hook_info *info) {
    memset(info, 0, sizeof *info);
    info->id = id;
    info->layer = l;
    info->ndim = mp_hook_shape(f->c, id, f->B, f->T, f->pos0, info->shape);
    memcpy(info->full, info->shape, sizeof info->full);
    info->axis = 1;
    info->pos0 = f->pos0;
    info->numel = 1;
    for (int i = 0; i < info->ndim; i++) info->numel *= (size_t)info->shape[i];
}

mp_status mp_fwd_fire(const mp_fwd_ctx *f, mp_hook_id id, int l, float *data) {
    if (!mp_hooks_active(f->hs, id, l)) return MP_OK;
    mp_hook_info info;
    mp_fwd_whole_info(f, id, l, &info);
    return mp_hooks_fire(f->hs, &info, data);
}

void mp_fwd_block_info(const mp_fwd_ctx *f, mp_hook_id id, int l, int q0, int rows, mp_hook_info *info) {
    memset(info, 0, sizeof *info);
    info->id = id;
    info->layer = l;
    info->ndim = mp_hook_shape(f->c, id, f->B, f->T, f->pos0, info->full);
    memcpy(info->shape, info->full, sizeof info->shape);
    info->shape[2] = rows;
    info->axis = 2;
    info->offset = q0;
    info->pos0 = f->pos0;
    info->numel = (size_t)info->shape[0] * info->shape[1] * info->shape[2] * info->shape[3];
}

mp_status mp_fwd_fire_block(const mp_fwd_ctx *f, mp_hook_id id, int l, int q0, int rows, float *data) {
    if (!mp_hooks_active(f->hs, id, l)) return MP_OK;
    mp_hook_info info;
    mp_fwd_block_info(f, id, l, q0, rows, &info);
    return mp_hooks_fire(f->hs, &info, data);
}

void mp_fwd_ws_free(mp_fwd_ws *ws) {
    free(ws->mem);
    ws->mem = NULL;
    ws->n = 0;
}

/* n floats of scratch (the previous contents are not kept), or NULL with the
 * message set. */
static float *ws_get(mp_fwd_ws *ws, size_t n) {
    if (ws->n >= n) return ws->mem;
    float *p = mp_malloc(n * sizeof(float), "hook-point buffers");
    if (!p) return NULL;
    free(ws->mem);
    ws->mem = p;
    ws->n = n;
    return p;
}

mp_status mp_fwd_norm(const mp_fwd_ctx *f, mp_hook_id sid, int l, float *out, float *mean, float *rstd,
                      const float *x, const float *w, const float *b, mp_fwd_ws *ws) {
    const mp_config *c = f->c;
    const int N = f->B * f->T, D = c->d_model, ln = c->norm == MP_NORM_LAYER;
    if (!mp_hooks_active(f->hs, sid, l)) {
        if (ln) mp_layernorm_forward(out, mean, rstd, x, w, b, N, D, c->norm_eps);
        else mp_rmsnorm_forward(out, rstd, x, w, N, D, c->norm_eps);
        return MP_OK;
    }
    float *sc = ws_get(ws, 2 * (size_t)N);
    if (!sc) return MP_ERR_NOMEM;
    float *mu = sc + N;
    mp_norm_scale(sc, mu, x, N, D, c->norm_eps, ln);
    mp_status st = mp_fwd_fire(f, sid, l, sc);
    if (st) return st;
    mp_norm_apply(out, x, mu, sc, w, b, N, D, ln);
    for (int n = 0; n < N; n++) {
        if (rstd) rstd[n] = 1.0f / sc[n];
        if (mean) mean[n] = ln ? mu[n] : 0.0f;
    }
    return MP_OK;
}

int mp_fwd_split_active(const mp_fwd_ctx *f, int l) {
    return mp_hooks_active(f->hs, MP_HOOK_ATTN_IN, l) || mp_hooks_active(f->hs, MP_HOOK_Q_INPUT, l) ||
           mp_hooks_active(f->hs, MP_HOOK_K_INPUT, l) || mp_hooks_active(f->hs, MP_HOOK_V_INPUT, l);
}

/* out[:, h*Dh..(h+1)*Dh) (row stride nh*Dh) = in[:, h, :] @ W[h rows]^T + bias[h]
 * for each of nh heads; in [N, nh, D]; w [nh*Dh, D] float32 or qm. tmp holds
 * N*D + N*Dh floats. */
static mp_status head_proj(float *out, const float *in, int N, int nh, int D, int Dh, const float *w,
                           const mp_qmat *qm, const float *bias, float *tmp) {
    float *gin = tmp, *gout = tmp + (size_t)N * D;
    for (int h = 0; h < nh; h++) {
        for (int n = 0; n < N; n++)
            memcpy(gin + (size_t)n * D, in + ((size_t)n * nh + h) * D, (size_t)D * sizeof(float));
        mp_qmat hq;
        if (qm) {
            hq = *qm;
            hq.data = qm->data + (size_t)h * Dh * qm->row_bytes;
        }
        mp_status st = mp_fwd_linear(gout, gin, w ? w + (size_t)h * Dh * D : NULL, qm ? &hq : NULL,
                                     bias ? bias + (size_t)h * Dh : NULL, N, D, Dh);
        if (st) return st;
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * nh * Dh + (size_t)h * Dh, gout + (size_t)n * Dh, (size_t)Dh * sizeof(float));
    }
    return MP_OK;
}

mp_status mp_fwd_split_qkv(const mp_fwd_ctx *f, int l, const mp_model *m, const float *ln1, float *q, float *k,
                           float *v, mp_fwd_ws *ws) {
    const mp_config *c = f->c;
    const int N = f->B * f->T, D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, group = H / K;
    const size_t nh = (size_t)N * H * D, nk = (size_t)N * K * D;
    const int own_q = mp_hooks_active(f->hs, MP_HOOK_Q_INPUT, l);
    float *ai = ws_get(ws, nh + (own_q ? nh : 0) + 2 * nk + (size_t)N * D + (size_t)N * Dh);
    if (!ai) return MP_ERR_NOMEM;
    float *qin = own_q ? ai + nh : ai, *kin = ai + nh + (own_q ? nh : 0), *vin = kin + nk, *tmp = vin + nk;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) memcpy(ai + ((size_t)n * H + h) * D, ln1 + (size_t)n * D, (size_t)D * sizeof(float));
    mp_status st = mp_fwd_fire(f, MP_HOOK_ATTN_IN, l, ai);
    if (st) return st;
    if (own_q) {
        memcpy(qin, ai, nh * sizeof(float));
        if ((st = mp_fwd_fire(f, MP_HOOK_Q_INPUT, l, qin))) return st;
    }
    for (int n = 0; n < N; n++)
        for (int g = 0; g < K; g++) {
            const float *src = ai + ((size_t)n * H + (size_t)g * group) * D;
            memcpy(kin + ((size_t)n * K + g) * D, src, (size_t)D * sizeof(float));
            memcpy(vin + ((size_t)n * K + g) * D, src, (size_t)D * sizeof(float));
        }
    if ((st = mp_fwd_fire(f, MP_HOOK_K_INPUT, l, kin)) || (st = mp_fwd_fire(f, MP_HOOK_V_INPUT, l, vin))) return st;
    const mp_layer_params w = mp_params_layer(c, &m->p, l);
    const mp_qparams *Q = m->q;
    if ((st = head_proj(q, qin, N, H, D, Dh, w.wq, Q ? &Q->wq[l] : NULL, w.bq, tmp)) ||
        (st = head_proj(k, kin, N, K, D, Dh, w.wk, Q ? &Q->wk[l] : NULL, w.bk, tmp)) ||
        (st = head_proj(v, vin, N, K, D, Dh, w.wv, Q ? &Q->wv[l] : NULL, w.bv, tmp)))
        return st;
    return MP_OK;
}

mp_status mp_fwd_result(const mp_fwd_ctx *f, int l, const mp_model *m, const float *z, float *out, mp_fwd_ws *ws) {
    if (!mp_hooks_active(f->hs, MP_HOOK_RESULT, l)) return MP_OK;
    const mp_config *c = f->c;
    const int N = f->B * f->T, D = c->d_model, H = c->n_head, Dh = c->d_head, HD = H * Dh;
    const size_t nr = (size_t)N * H * D;
    const mp_qmat *qm = m->q ? &m->q->wo[l] : NULL;
    const float *wo = qm ? (qm->type == MP_GGML_F32 ? (const float *)(const void *)qm->data : NULL)
                         : mp_params_layer(c, &m->p, l).wo;
    float *res = ws_get(ws, 2 * nr + (wo ? 0 : (size_t)N * HD + (size_t)N * D));
    if (!res) return MP_ERR_NOMEM;
    float *orig = res + nr;
    for (int h = 0; h < H; h++) {
        if (wo) { /* result[:, h, :] = z[:, h, :] @ W_O[:, h*Dh..(h+1)*Dh)^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, D, Dh, 1.0f, z + (size_t)h * Dh, HD,
                        wo + (size_t)h * Dh, HD, 0.0f, res + (size_t)h * D, H * D);
            continue;
        }
        /* quantized rows: W_O times z with every other head zeroed */
        float *zt = orig + nr, *tmp = zt + (size_t)N * HD;
        memset(zt, 0, (size_t)N * HD * sizeof(float));
        for (int n = 0; n < N; n++)
            memcpy(zt + (size_t)n * HD + (size_t)h * Dh, z + (size_t)n * HD + (size_t)h * Dh, (size_t)Dh * sizeof(float));
        mp_status st = mp_fwd_linear(tmp, zt, NULL, qm, NULL, N, HD, D);
        if (st) return st;
        for (int n = 0; n < N; n++)
            memcpy(res + ((size_t)n * H + h) * D, tmp + (size_t)n * D, (size_t)D * sizeof(float));
    }
    memcpy(orig, res, nr * sizeof(float));
    mp_status st = mp_fwd_fire(f, MP_HOOK_RESULT, l, res);
    if (st) return st;
    /* out = fused product + sum over heads of (written - computed) */
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *r = res + ((size_t)n * H + h) * D, *o = orig + ((size_t)n * H + h) * D;
            if (memcmp(r, o, (size_t)D * sizeof(float)) == 0) continue;
            for (int d = 0; d < D; d++) out[(size_t)n * D + d] += r[d] - o[d];
        }
    return MP_OK;
}
