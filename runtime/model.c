/* model.c — the instrumented forward pass: batched prefill and incremental
 * decoding over a KV cache, with every DESIGN.md hook point fired (readable and
 * writable) and attention computed in blocks of query rows so that no T x T
 * matrix is ever held, whether or not the pattern is captured; and the KV
 * cache. (Random initialisation lives in model_init.c: GSL's cblas header
 * clashes with OpenBLAS's, so no file includes both.) */
#include "model.h"
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

mp_status mp_kvcache_init(mp_kvcache *c, const mp_config *cfg, int B, int cap) {
    memset(c, 0, sizeof *c);
    size_t n;
    if (B <= 0 || cap <= 0) return mp_error(MP_ERR_ARG, "KV cache: batch (%d) and capacity (%d) must be positive", B, cap);
    if (mp_mul_size((size_t)cfg->n_layer * B, (size_t)cap, &n) ||
        mp_mul_size(n, (size_t)cfg->n_kv_head * cfg->d_head, &n))
        return mp_error(MP_ERR_NOMEM, "KV cache of %d x %d positions overflows", B, cap);
    c->k = mp_malloc(n * sizeof(float), "the KV cache (keys)");
    c->v = c->k ? mp_malloc(n * sizeof(float), "the KV cache (values)") : NULL;
    if (!c->k || !c->v) { mp_kvcache_free(c); return MP_ERR_NOMEM; }
    c->B = B;
    c->cap = cap;
    c->len = 0;
    return MP_OK;
}

void mp_kvcache_free(mp_kvcache *c) {
    free(c->k);
    free(c->v);
    memset(c, 0, sizeof *c);
}

mp_forward_params mp_forward_params_default(void) {
    return (mp_forward_params){NULL, NULL, MP_LOGITS_ALL, 64};
}

/* ---- the forward pass ---- */

/* One layer's working buffers, N = B*T rows; reused by every layer. */
typedef struct {
    float *x;     /* [N, D]  residual stream */
    float *xn;    /* [N, D]  normalised */
    float *q;     /* [N, H*Dh] */
    float *k;     /* [N, K*Dh] */
    float *v;     /* [N, K*Dh] */
    float *z;     /* [N, H*Dh] */
    float *out;   /* [N, D]  attention / MLP output */
    float *h1;    /* [N, M]  gate pre-activation, then activation */
    float *h3;    /* [N, M]  up projection */
    float *att;   /* [B, H, qb, S] one block of query rows */
    float *cos_t; /* [T, Dh/2] */
    float *sin_t; /* [T, Dh/2] */
} fwd_bufs;

typedef struct {
    const mp_config *c;
    const mp_hooks *hs;
    int B, T, pos0;
} fwd_ctx;

/* Fires hook (id, l) on a whole [B,T,...] view. */
static mp_status fire(const fwd_ctx *f, mp_hook_id id, int l, float *data) {
    if (!mp_hooks_active(f->hs, id, l)) return MP_OK;
    mp_hook_info info;
    memset(&info, 0, sizeof info);
    info.id = id;
    info.layer = l;
    info.ndim = mp_hook_shape(f->c, id, f->B, f->T, f->pos0, info.shape);
    memcpy(info.full, info.shape, sizeof info.full);
    info.axis = 1;
    info.pos0 = f->pos0;
    info.numel = 1;
    for (int i = 0; i < info.ndim; i++) info.numel *= (size_t)info.shape[i];
    return mp_hooks_fire(f->hs, &info, data);
}

/* Fires a scores/pattern hook on the block [B,H,rows,S] of query rows q0.. */
static mp_status fire_block(const fwd_ctx *f, mp_hook_id id, int l, int q0, int rows, float *data) {
    if (!mp_hooks_active(f->hs, id, l)) return MP_OK;
    mp_hook_info info;
    memset(&info, 0, sizeof info);
    info.id = id;
    info.layer = l;
    info.ndim = mp_hook_shape(f->c, id, f->B, f->T, f->pos0, info.full);
    memcpy(info.shape, info.full, sizeof info.shape);
    info.shape[2] = rows;
    info.axis = 2;
    info.offset = q0;
    info.pos0 = f->pos0;
    info.numel = (size_t)info.shape[0] * info.shape[1] * info.shape[2] * info.shape[3];
    return mp_hooks_fire(f->hs, &info, data);
}

/* Causal grouped-query attention of one layer, by blocks of qb query rows.
 * q [B,T,H,Dh] (rotated), keys/values kc/vc with batch stride bstride and row
 * stride KD covering positions 0..pos0+T-1; z [B,T,H,Dh]. */
static mp_status attention(const fwd_ctx *f, int l, fwd_bufs *b, const float *kc, const float *vc,
                           size_t bstride, int qb) {
    const mp_config *c = f->c;
    const int B = f->B, T = f->T, H = c->n_head, Dh = c->d_head, KD = c->n_kv_head * Dh;
    const int S = f->pos0 + T, HD = H * Dh, group = H / c->n_kv_head;
    const float scale = 1.0f / sqrtf((float)Dh);
    const int show = mp_hooks_active(f->hs, MP_HOOK_ATTN_SCORES, l) || mp_hooks_active(f->hs, MP_HOOK_PATTERN, l);
    mp_status st;
    for (int q0 = 0; q0 < T; q0 += qb) {
        const int rows = T - q0 < qb ? T - q0 : qb;
        const int kmax = f->pos0 + q0 + rows; /* keys visible to the last row */
        const size_t blk = (size_t)rows * S;  /* floats per (b, h) in att */
#pragma omp parallel for collapse(2) schedule(dynamic)
        for (int bb = 0; bb < B; bb++)
            for (int h = 0; h < H; h++) {
                float *a = b->att + ((size_t)bb * H + h) * blk;
                const float *qp = b->q + ((size_t)bb * T + q0) * HD + (size_t)h * Dh;
                const float *kp = kc + bb * bstride + (size_t)(h / group) * Dh;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kmax, Dh, scale, qp, HD, kp, KD,
                            0.0f, a, S);
                for (int i = 0; i < rows; i++) {
                    int first_masked = f->pos0 + q0 + i + 1;
                    int end = show ? S : kmax;
                    for (int j = first_masked; j < end; j++) a[(size_t)i * S + j] = -INFINITY;
                }
            }
        if ((st = fire_block(f, MP_HOOK_ATTN_SCORES, l, q0, rows, b->att))) return st;
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            float *a = b->att + (size_t)bh * blk;
            mp_softmax_rows(a, rows, kmax, S);
            if (show)
                for (int i = 0; i < rows; i++)
                    for (int j = kmax; j < S; j++) a[(size_t)i * S + j] = 0.0f;
        }
        if ((st = fire_block(f, MP_HOOK_PATTERN, l, q0, rows, b->att))) return st;
#pragma omp parallel for collapse(2) schedule(dynamic)
        for (int bb = 0; bb < B; bb++)
            for (int h = 0; h < H; h++) {
                const float *a = b->att + ((size_t)bb * H + h) * blk;
                const float *vp = vc + bb * bstride + (size_t)(h / group) * Dh;
                float *zp = b->z + ((size_t)bb * T + q0) * HD + (size_t)h * Dh;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, Dh, kmax, 1.0f, a, S, vp, KD,
                            0.0f, zp, HD);
            }
    }
    return MP_OK;
}

static mp_status check_forward_args(const mp_model *m, const int *tokens, int B, int T,
                                    const mp_forward_params *fp) {
    const mp_config *c = &m->cfg;
    if (B <= 0 || T <= 0) return mp_error(MP_ERR_ARG, "forward: batch (%d) and length (%d) must be positive", B, T);
    if (c->norm != MP_NORM_RMS || c->mlp != MP_MLP_SWIGLU || (c->pos != MP_POS_ROPE && c->pos != MP_POS_NONE))
        return mp_error(MP_ERR_ARG, "forward: this build runs Llama-style models (RMSNorm, SwiGLU, RoPE or no positions)");
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return mp_error(MP_ERR_ARG, "token id %d at [%zu,%zu] is outside the vocabulary (0..%d)", tokens[i],
                            i / (size_t)T + 1, i % (size_t)T + 1, c->vocab - 1);
    if (fp->cache) {
        if (fp->cache->B != B)
            return mp_error(MP_ERR_ARG, "forward: batch %d does not match the KV cache's batch %d", B, fp->cache->B);
        if (fp->cache->len + T > fp->cache->cap)
            return mp_error(MP_ERR_ARG, "forward: KV cache full (%d + %d positions > capacity %d)", fp->cache->len, T,
                            fp->cache->cap);
    }
    return MP_OK;
}

mp_status mp_model_forward(const mp_model *m, const int *tokens, int B, int T, const mp_forward_params *fp_in,
                           float *logits) {
    mp_forward_params fp = fp_in ? *fp_in : mp_forward_params_default();
    mp_status st = check_forward_args(m, tokens, B, T, &fp);
    if (st) return st;
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    const int D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, M = c->d_mlp;
    const int HD = H * Dh, KD = K * Dh, N = B * T;
    const int pos0 = fp.cache ? fp.cache->len : 0, S = pos0 + T;
    const int qb = fp.q_block > 0 ? (fp.q_block < T ? fp.q_block : T) : (T < 64 ? T : 64);
    fwd_ctx f = {c, fp.hooks, B, T, pos0};

    /* one allocation for every buffer of one layer */
    size_t n_x = (size_t)N * D, n_q = (size_t)N * HD, n_k = (size_t)N * KD, n_h = (size_t)N * M;
    size_t n_att = (size_t)B * H * qb * S, n_rope = (size_t)T * (Dh / 2);
    size_t total = 3 * n_x + 2 * n_q + 2 * n_k + 2 * n_h + n_att + 2 * n_rope;
    float *mem = mp_malloc(total * sizeof(float), "forward-pass buffers");
    if (!mem) return MP_ERR_NOMEM;
    fwd_bufs b;
    float *cur = mem;
    b.x = cur; cur += n_x;
    b.xn = cur; cur += n_x;
    b.out = cur; cur += n_x;
    b.q = cur; cur += n_q;
    b.z = cur; cur += n_q;
    b.k = cur; cur += n_k;
    b.v = cur; cur += n_k;
    b.h1 = cur; cur += n_h;
    b.h3 = cur; cur += n_h;
    b.att = cur; cur += n_att;
    b.cos_t = cur; cur += n_rope;
    b.sin_t = cur;
    if (c->pos == MP_POS_ROPE) mp_rope_table(b.cos_t, b.sin_t, pos0, T, Dh, c->rope_theta);

#define FIRE(id, l, ptr) do { if ((st = fire(&f, id, l, ptr))) goto cleanup; } while (0)
    mp_embed_forward(b.x, tokens, p->embed, N, D);
    FIRE(MP_HOOK_EMBED, -1, b.x);
    for (int l = 0; l < c->n_layer; l++) {
        FIRE(MP_HOOK_RESID_PRE, l, b.x);
        mp_rmsnorm_forward(b.xn, NULL, b.x, p->ln1_w + (size_t)l * D, N, D, c->norm_eps);
        FIRE(MP_HOOK_LN1, l, b.xn);
        mp_matmul_forward(b.q, b.xn, p->wq + (size_t)l * HD * D, NULL, N, D, HD);
        mp_matmul_forward(b.k, b.xn, p->wk + (size_t)l * KD * D, NULL, N, D, KD);
        mp_matmul_forward(b.v, b.xn, p->wv + (size_t)l * KD * D, NULL, N, D, KD);
        FIRE(MP_HOOK_Q, l, b.q);
        FIRE(MP_HOOK_K, l, b.k);
        FIRE(MP_HOOK_V, l, b.v);
        if (c->pos == MP_POS_ROPE) {
            mp_rope_forward(b.q, b.cos_t, b.sin_t, B, T, H, Dh);
            mp_rope_forward(b.k, b.cos_t, b.sin_t, B, T, K, Dh);
        }
        FIRE(MP_HOOK_ROT_Q, l, b.q);
        FIRE(MP_HOOK_ROT_K, l, b.k);
        const float *kc = b.k, *vc = b.v;
        size_t bstride = (size_t)T * KD;
        if (fp.cache) {
            mp_kvcache *cache = fp.cache;
            bstride = (size_t)cache->cap * KD;
            float *ck = cache->k + (size_t)l * B * bstride, *cv = cache->v + (size_t)l * B * bstride;
            for (int bb = 0; bb < B; bb++) {
                memcpy(ck + bb * bstride + (size_t)pos0 * KD, b.k + (size_t)bb * T * KD, (size_t)T * KD * sizeof(float));
                memcpy(cv + bb * bstride + (size_t)pos0 * KD, b.v + (size_t)bb * T * KD, (size_t)T * KD * sizeof(float));
            }
            kc = ck;
            vc = cv;
        }
        if ((st = attention(&f, l, &b, kc, vc, bstride, qb))) goto cleanup;
        FIRE(MP_HOOK_Z, l, b.z);
        mp_matmul_forward(b.out, b.z, p->wo + (size_t)l * D * HD, NULL, N, HD, D);
        FIRE(MP_HOOK_ATTN_OUT, l, b.out);
        mp_residual_forward(b.x, b.out, n_x);
        FIRE(MP_HOOK_RESID_MID, l, b.x);
        mp_rmsnorm_forward(b.xn, NULL, b.x, p->ln2_w + (size_t)l * D, N, D, c->norm_eps);
        FIRE(MP_HOOK_LN2, l, b.xn);
        mp_matmul_forward(b.h1, b.xn, p->w1 + (size_t)l * M * D, NULL, N, D, M);
        mp_matmul_forward(b.h3, b.xn, p->w3 + (size_t)l * M * D, NULL, N, D, M);
        FIRE(MP_HOOK_MLP_PRE, l, b.h1);
        FIRE(MP_HOOK_MLP_PRE_LINEAR, l, b.h3);
        mp_swiglu_forward(b.h1, b.h1, b.h3, n_h);
        FIRE(MP_HOOK_MLP_POST, l, b.h1);
        mp_matmul_forward(b.out, b.h1, p->w2 + (size_t)l * D * M, NULL, N, M, D);
        FIRE(MP_HOOK_MLP_OUT, l, b.out);
        mp_residual_forward(b.x, b.out, n_x);
        FIRE(MP_HOOK_RESID_POST, l, b.x);
    }
    mp_rmsnorm_forward(b.xn, NULL, b.x, p->lnf_w, N, D, c->norm_eps);
    FIRE(MP_HOOK_LN_FINAL, -1, b.xn);
#undef FIRE
    if (fp.logits == MP_LOGITS_ALL) {
        mp_matmul_forward(logits, b.xn, p->unembed, NULL, N, D, c->vocab);
    } else if (fp.logits == MP_LOGITS_LAST) {
        for (int bb = 0; bb < B; bb++) /* gather the last row of each sequence */
            memmove(b.out + (size_t)bb * D, b.xn + ((size_t)bb * T + T - 1) * D, (size_t)D * sizeof(float));
        mp_matmul_forward(logits, b.out, p->unembed, NULL, B, D, c->vocab);
    }
    if (fp.cache) fp.cache->len += T;
cleanup:
    free(mem);
    return st;
}
