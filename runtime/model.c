/* model.c — the instrumented forward pass on the CPU: batched prefill and
 * incremental decoding over a KV cache, with every DESIGN.md hook point fired
 * (readable and writable) and attention computed in blocks of query rows so
 * that no T x T matrix is ever held, whether or not the pattern is captured;
 * the KV cache; the activation store; and the training mode of the same
 * forward, which keeps every layer's activations (and the full pattern) in an
 * mp_acts store for the backward pass (runtime/train.c). The order of the
 * steps and of the hook points is the walk's (exec.c mp_block_forward); here
 * are the CPU's ops it walks (mp_exec_cpu: fused decode products, quantized
 * weights, the blocked attention) and mp_model_forward's set-up around it
 * (argument checks, the device choice, the scratch buffers, positional
 * tables). The positional scheme lives in pos.c (mp_pos_*), the attention
 * variants (how scores become the pattern) in attn_variants.c. (Random
 * initialisation lives in model_init.c: GSL's cblas header clashes with
 * OpenBLAS's, so no file includes both.) */
#include "attn_variants.h"
#include "backward.h"
#include "exec.h"
#include "model.h"
#include "ops.h"
#include "qdot.h"
#include "quant.h"
#include "relv.h"

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

mp_status mp_kvcache_sync(mp_kvcache *c) {
    return c && c->dev && c->dev_sync ? c->dev_sync(c) : MP_OK;
}

void mp_kvcache_free(mp_kvcache *c) {
    if (c->dev && c->dev_free) c->dev_free(c->dev);
    free(c->k);
    free(c->v);
    free(c->scratch);
    memset(c, 0, sizeof *c);
}

mp_forward_params mp_forward_params_default(void) {
    return (mp_forward_params){NULL, NULL, MP_LOGITS_ALL, 64, NULL, NULL};
}

mp_status mp_acts_layout(mp_acts *a, const mp_config *c, int B, int T, int logit_rows, int no_pattern, float *mem,
                         size_t *n_floats) {
    memset(a, 0, sizeof *a);
    if (B <= 0 || T <= 0) return mp_error(MP_ERR_ARG, "training buffers: batch (%d) and length (%d) must be positive", B, T);
    const size_t L = (size_t)c->n_layer, N = (size_t)B * T, D = (size_t)c->d_model;
    const size_t HD = (size_t)c->n_head * c->d_head, KD = (size_t)c->n_kv_head * c->d_head;
    const size_t M = c->mlp == MP_MLP_NONE ? 0 : (size_t)c->d_mlp, H = (size_t)c->n_head;
    const size_t up = c->mlp == MP_MLP_SWIGLU ? M : 0, K = (size_t)c->n_kv_head;
    const size_t qn = c->qk_norm != MP_QK_NORM_NONE; /* the q/k norm's inputs and statistics */
    const size_t R = logit_rows > 0 && (size_t)logit_rows < N ? (size_t)logit_rows : N;
    /* sizes in field order; an overflow anywhere fails the whole store */
    size_t att, tt;
    int bad = mp_mul_size((size_t)T, (size_t)T, &tt) || mp_mul_size(tt, (size_t)B * H, &att);
    if (no_pattern) att = 0;
    size_t sz[] = {
        (L + 1) * N * D, L * N * D, L * N * D, L * N, L * N,          /* resid, resid_mid, ln1, mean, rstd */
        L * N * HD, L * N * KD, L * N * KD, L * att, L * N * HD,        /* q, k, v, att, z */
        L * N * D, L * N, L * N, L * N * M, L * N * up, L * N * M,     /* ln2, mean, rstd, pre, up, post */
        N * D, N, N, R * (size_t)c->vocab,                             /* lnf, mean, rstd, logits */
        N * D, N * D, N * HD, N * KD, N * KD, N * HD, att, N * M, N * up, N * M,
        mp_pos_tables_floats(c, (size_t)T),                             /* pos_tab (mp_pos_tables_all) */
        (size_t)B * H * T,                                              /* dfac */
        no_pattern ? L * B * H * T : 0,                                 /* lse */
        L * N * HD * qn, L * N * KD * qn, L * N * H * qn, L * N * K * qn, /* q_in, k_in, q_rstd, k_rstd */
        c->post_norms ? L * N * D : 0, c->post_norms ? L * N : 0,       /* attn_raw, ln1p_rstd */
        c->post_norms && M ? L * N * D : 0, c->post_norms && M ? L * N : 0, /* mlp_raw, ln2p_rstd */
        c->post_norms ? N * D : 0,                                      /* dnr */
        c->final_softcap > 0.0f ? R * (size_t)c->vocab : 0,             /* logit_dcap */
        c->final_softcap > 0.0f ? R * (size_t)c->vocab : 0};            /* dlogits_raw */
    float **f[] = {&a->resid, &a->resid_mid, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->q, &a->k, &a->v, &a->att,
                   &a->z, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->pre, &a->up, &a->post, &a->lnf, &a->lnf_mean,
                   &a->lnf_rstd, &a->logits, &a->dresid, &a->dxn, &a->dq, &a->dk, &a->dv, &a->dz, &a->datt,
                   &a->dpre, &a->dup, &a->dpost, &a->pos_tab, &a->dfac, &a->lse, &a->q_in, &a->k_in,
                   &a->q_rstd, &a->k_rstd, &a->attn_raw, &a->ln1p_rstd, &a->mlp_raw, &a->ln2p_rstd, &a->dnr,
                   &a->logit_dcap, &a->dlogits_raw};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) bad |= mp_add_size(total, sz[i], &total);
    if (bad || mp_mul_size(total, sizeof(float), &tt))
        return mp_error(MP_ERR_NOMEM, "training buffers for batch %d x %d positions overflow", B, T);
    *n_floats = total;
    if (!mem) return MP_OK;
    float *cur = mem;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        *f[i] = sz[i] ? cur : NULL;
        cur += sz[i];
    }
    a->mem = mem;
    a->B = B;
    a->T = T;
    a->n_floats = total;
    a->logit_rows = (int)R;
    return MP_OK;
}

mp_status mp_acts_init(mp_acts *a, const mp_config *c, int B, int T) {
    size_t total;
    mp_status st = mp_acts_layout(a, c, B, T, 0, 0, NULL, &total);
    if (st) return st;
    float *mem = mp_malloc(total * sizeof(float), "training activations");
    if (!mem) return MP_ERR_NOMEM;
    return mp_acts_layout(a, c, B, T, 0, 0, mem, &total);
}

void mp_acts_free(mp_acts *a) {
    free(a->mem);
    memset(a, 0, sizeof *a);
}

/* p + l*n, or NULL for an absent field */
static float *at(float *p, int l, size_t n) { return p ? p + (size_t)l * n : NULL; }

mp_layer_params mp_params_layer(const mp_config *c, const mp_params *p, int l) {
    const size_t D = (size_t)c->d_model, HD = (size_t)c->n_head * c->d_head, KD = (size_t)c->n_kv_head * c->d_head;
    const size_t M = c->mlp == MP_MLP_NONE ? 0 : (size_t)c->d_mlp, H = (size_t)c->n_head;
    return (mp_layer_params){
        .ln1_w = at(p->ln1_w, l, D), .ln1_b = at(p->ln1_b, l, D),
        .wq = at(p->wq, l, HD * D), .wk = at(p->wk, l, KD * D), .wv = at(p->wv, l, KD * D), .wo = at(p->wo, l, D * HD),
        .bq = at(p->bq, l, HD), .bk = at(p->bk, l, KD), .bv = at(p->bv, l, KD), .bo = at(p->bo, l, D),
        .ln2_w = at(p->ln2_w, l, D), .ln2_b = at(p->ln2_b, l, D),
        .w1 = at(p->w1, l, M * D), .w3 = at(p->w3, l, M * D), .w2 = at(p->w2, l, D * M),
        .b1 = at(p->b1, l, M), .b3 = at(p->b3, l, M), .b2 = at(p->b2, l, D),
        .ssmax_s = at(p->ssmax_s, l, H), .as_delta = at(p->as_delta, l, H), .as_beta = at(p->as_beta, l, H),
        .as_gamma = at(p->as_gamma, l, H),
        .q_norm = at(p->q_norm, l, c->qk_norm == MP_QK_NORM_FULL ? HD : (size_t)c->d_head),
        .k_norm = at(p->k_norm, l, c->qk_norm == MP_QK_NORM_FULL ? KD : (size_t)c->d_head),
        .ln1p_w = at(p->ln1p_w, l, D), .ln2p_w = at(p->ln2p_w, l, D),
        .rel_v = at(p->rel_v, l, ((size_t)c->rel_values + 1) * c->d_head)};
}

mp_layer_acts mp_acts_layer(const mp_config *c, const mp_acts *a, int l) {
    const size_t N = (size_t)a->B * a->T, T = (size_t)a->T, H = (size_t)c->n_head;
    const size_t nx = N * c->d_model, nq = N * H * c->d_head, nk = N * (size_t)c->n_kv_head * c->d_head;
    const size_t nh = N * (c->mlp == MP_MLP_NONE ? 0 : (size_t)c->d_mlp);
    return (mp_layer_acts){
        .resid_in = at(a->resid, l, nx), .resid_mid = at(a->resid_mid, l, nx), .resid_out = at(a->resid, l + 1, nx),
        .ln1 = at(a->ln1, l, nx), .ln1_mean = at(a->ln1_mean, l, N), .ln1_rstd = at(a->ln1_rstd, l, N),
        .q = at(a->q, l, nq), .k = at(a->k, l, nk), .v = at(a->v, l, nk), .z = at(a->z, l, nq),
        .att = at(a->att, l, (size_t)a->B * H * T * T),
        .ln2 = at(a->ln2, l, nx), .ln2_mean = at(a->ln2_mean, l, N), .ln2_rstd = at(a->ln2_rstd, l, N),
        .pre = at(a->pre, l, nh), .up = at(a->up, l, nh), .post = at(a->post, l, nh),
        .q_in = at(a->q_in, l, nq), .k_in = at(a->k_in, l, nk),
        .q_rstd = at(a->q_rstd, l, N * H), .k_rstd = at(a->k_rstd, l, N * (size_t)c->n_kv_head),
        .attn_raw = at(a->attn_raw, l, nx), .ln1p_rstd = at(a->ln1p_rstd, l, N),
        .mlp_raw = at(a->mlp_raw, l, nx), .ln2p_rstd = at(a->ln2p_rstd, l, N)};
}

/* ---- the forward pass on the CPU: the op table the walk runs (exec.h) ---- */

/* The forward's buffers besides the layer's activations: the attention or MLP
 * output and the positional tables. */
typedef struct {
    float *out;     /* [N, D]  attention / MLP output */
    float *cos_t;   /* [T, Dh/2] */
    float *sin_t;   /* [T, Dh/2] */
    float *q_scale; /* [T] per-query logit factor, or NULL */
    float *cos_l, *sin_l; /* [T, Dh/2] the windowed layers' own (rope_local_theta), or NULL */
} fwd_bufs;

/* The CPU's state of one forward call, handed to its ops (mp_exec.dev). */
typedef struct {
    const mp_model *m;
    mp_kvcache *cache;  /* or NULL */
    fwd_bufs pos;       /* the positional tables pos_apply reads (gathered per token for a padded batch) */
    int pB, pT;         /* their batch and length (1 and B*T for a padded batch) */
    float *last;        /* [B, D] the last rows MP_LOGITS_LAST gathers */
    mp_fwd_ws hws;      /* the optional hook points' buffers (fwd_hooks.c) */
} cpu_fwd;

#define CPU(e) ((cpu_fwd *)(e)->dev)

/* Query rows per product inside an attention block: a block of more rows
 * (training keeps all T in one) is computed in sub-blocks this tall, each only
 * up to the last key its rows see. */
#define CAUSAL_SUB 64
/* Cached positions per chunk of a decoding step's grouped attention: 1024 keys
 * of 64 channels are 256 KiB, which stay in L2 while the group's query heads
 * read them. */
#define DECODE_CHUNK 1024

/* The calling thread's share of the per-thread scratch work (nwork floats each), or NULL. */
static float *thread_work(float *work, size_t nwork) {
#ifdef _OPENMP
    return work ? work + (size_t)omp_get_thread_num() * nwork : NULL;
#else
    (void)nwork;
    return work;
#endif
}

/* Causal grouped-query attention of one layer, by blocks of qb query rows:
 * a->q [B,T,H,Dh] (rotated) into a->z [B,T,H,Dh] through the pattern block
 * a->att [B,H,qb,S]; keys/values of kv (exec.h: mp_kv_view) covering
 * positions 0..pos0+T-1. The scores become
 * the pattern through the layer's attention variant av; with its sliding
 * window (av->window = W) a row at position p sees keys p-W+1..p only (-inf
 * scores, 0 pattern before them; a decoding step reads only those keys). */
static mp_status attention(const mp_exec *e, int l, const mp_layer_acts *b, const mp_kv_view *kv, int qb,
                           const mp_attn_layer *av) {
    const mp_fwd_ctx *f = &e->f;
    const mp_config *c = f->c;
    const int B = f->B, T = f->T, H = c->n_head, Dh = c->d_head, RS = (int)kv->rs;
    const int S = f->pos0 + T, HD = H * Dh, group = H / c->n_kv_head;
    const float scale = mp_attn_scale(c), cap = c->attn_softcap;
    /* a hooked block shows all S keys: scores -inf and pattern 0 past the keys
     * its rows see (only the hooked one of the two is filled there) */
    const int show_scores = mp_hooks_active(f->hs, MP_HOOK_ATTN_SCORES, l);
    const int show = show_scores || mp_hooks_active(f->hs, MP_HOOK_PATTERN, l);
    mp_status st = MP_OK;
    /* the normalizer's scratch (entmax15's sort): S floats per thread */
    const size_t nwork = mp_attn_work_floats(av, S);
    int nthr = 1;
#ifdef _OPENMP
    nthr = omp_get_max_threads();
#endif
    float *work = NULL;
    if (nwork && !(work = mp_malloc((size_t)nthr * nwork * sizeof(float), "attention-variant scratch")))
        return MP_ERR_NOMEM;
    /* Shaw's relative values (relv.h): the layer's rows, and a padded batch's positions of the S key columns */
    const int R = c->rel_values;
    const float *rel_v = R > 0 ? mp_params_layer(c, &CPU(e)->m->p, l).rel_v : NULL;
    int *kpos = NULL;
    if (rel_v && f->mask) {
        if (!(kpos = mp_malloc((size_t)B * S * sizeof(int), "key positions of a padded batch"))) {
            free(work);
            return MP_ERR_NOMEM;
        }
        mp_mask_positions(f->mask, B, S, kpos);
    }
    if (T == 1 && !show && !f->mask) {
        /* a decoding step with neither map hooked: each KV head's scores, weights and
         * output in one parallel region instead of three of tiny work. The query heads
         * that share a KV head (grouped-query attention) go together: the head's cached
         * keys and values (one contiguous run in a KV cache) are read by chunks of
         * DECODE_CHUNK positions, each chunk by the group's query heads in turn while it
         * is in cache, so the group costs one pass over the cache, not one per query
         * head (at context 8192 the cache, not the weights, is most of a step's memory
         * traffic). sgemv reads the rows in place; sgemm would copy (pack) them first.
         * One query head at a time where the groups are fewer than the threads (MQA,
         * one sequence). */
        const int G = B * c->n_kv_head >= nthr ? group : 1, U = H / G;
#pragma omp parallel for schedule(static)
        for (int u = 0; u < B * U; u++) {
            const int bb = u / U, h0 = (u % U) * G;
            float *a = b->att + ((size_t)bb * H + h0) * S, *w = thread_work(work, nwork);
            const float *qp = b->q + (size_t)bb * HD + (size_t)h0 * Dh;
            const float *kp = kv->k + bb * kv->bs + (size_t)(h0 / group) * kv->hs;
            const float *vp = kv->v + bb * kv->bs + (size_t)(h0 / group) * kv->hs;
            float *zp = b->z + (size_t)bb * HD + (size_t)h0 * Dh;
            /* a sliding window: only the last W keys (lo..S-1; the cache keeps them all) */
            const int lo = av->window > 0 && S > av->window ? S - av->window : 0;
            for (int j0 = lo; j0 < S; j0 += DECODE_CHUNK) {
                const int n = S - j0 < DECODE_CHUNK ? S - j0 : DECODE_CHUNK;
                for (int g = 0; g < G; g++)
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, Dh, scale, kp + (size_t)j0 * RS, RS,
                                qp + (size_t)g * Dh, 1, 0.0f, a + (size_t)g * S + j0, 1);
            }
            for (int g = 0; g < G; g++) {
                if (cap > 0.0f) mp_softcap(a + (size_t)g * S + lo, (size_t)(S - lo), cap);
                mp_attn_normalize_rows(av, h0 + g, a + (size_t)g * S, 1, S, S, f->pos0 + 1, w);
            }
            for (int j0 = lo; j0 < S; j0 += DECODE_CHUNK) {
                const int n = S - j0 < DECODE_CHUNK ? S - j0 : DECODE_CHUNK;
                for (int g = 0; g < G; g++)
                    cblas_sgemv(CblasRowMajor, CblasTrans, n, Dh, 1.0f, vp + (size_t)j0 * RS, RS,
                                a + (size_t)g * S + j0, 1, j0 == lo ? 0.0f : 1.0f, zp + (size_t)g * Dh, 1);
            }
            for (int g = 0; rel_v && g < G; g++)
                mp_relv_row(rel_v, R, Dh, a + (size_t)g * S, lo, S - 1, NULL, zp + (size_t)g * Dh);
        }
        free(work);
        return MP_OK;
    }
    for (int q0 = 0; q0 < T; q0 += qb) {
        const int rows = T - q0 < qb ? T - q0 : qb;
        const int kmax = f->pos0 + q0 + rows; /* keys visible to the last row */
        const size_t blk = (size_t)rows * S;  /* floats per (b, h) in att */
#pragma omp parallel for collapse(2) schedule(dynamic)
        for (int bb = 0; bb < B; bb++)
            for (int h = 0; h < H; h++) {
                float *a = b->att + ((size_t)bb * H + h) * blk;
                const float *qp = b->q + ((size_t)bb * T + q0) * HD + (size_t)h * Dh;
                const float *kp = kv->k + bb * kv->bs + (size_t)(h / group) * kv->hs;
                if (rows == 1) /* a decoding step: sgemm would re-pack the keys for one row */
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, kmax, Dh, scale, kp, RS, qp, 1, 0.0f, a, 1);
                else /* in sub-blocks of CAUSAL_SUB rows, each up to the keys its last row sees:
                      * a block of all T rows (training) skips the masked upper triangle */
                    for (int r0 = 0; r0 < rows; r0 += CAUSAL_SUB) {
                        const int rr = rows - r0 < CAUSAL_SUB ? rows - r0 : CAUSAL_SUB, kk = f->pos0 + q0 + r0 + rr;
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rr, kk, Dh, scale, qp + (size_t)r0 * HD,
                                    HD, kp, RS, 0.0f, a + (size_t)r0 * S, S);
                    }
                for (int i = 0; i < rows; i++) {
                    int first_masked = f->pos0 + q0 + i + 1;
                    int end = show_scores ? S : kmax;
                    if (cap > 0.0f) mp_softcap(a + (size_t)i * S, (size_t)first_masked, cap); /* before the mask */
                    for (int j = first_masked; j < end; j++) a[(size_t)i * S + j] = -INFINITY;
                    /* a sliding window: keys j <= pos - W are masked too (the normalizer zeroes them anyway) */
                    for (int j = 0; av->window > 0 && j < first_masked - av->window; j++)
                        a[(size_t)i * S + j] = -INFINITY;
                }
                /* pads (the mask covers the S keys, cached ones included) */
                if (f->mask) mp_mask_scores(f->mask + (size_t)bb * S, a, rows, f->pos0 + q0, (size_t)S);
            }
        if ((st = mp_exec_fire_block(e, MP_HOOK_ATTN_SCORES, l, q0, rows, b->att))) goto cleanup;
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            float *a = b->att + (size_t)bh * blk, *w = thread_work(work, nwork);
            /* row i sees keys 0 .. pos0+q0+i */
            mp_attn_normalize_rows(av, bh % H, a, rows, kmax, S, f->pos0 + q0 + 1, w);
            if (show)
                for (int i = 0; i < rows; i++)
                    for (int j = kmax; j < S; j++) a[(size_t)i * S + j] = 0.0f;
        }
        if ((st = mp_exec_fire_block(e, MP_HOOK_PATTERN, l, q0, rows, b->att))) goto cleanup;
#pragma omp parallel for collapse(2) schedule(dynamic)
        for (int bb = 0; bb < B; bb++)
            for (int h = 0; h < H; h++) {
                const float *a = b->att + ((size_t)bb * H + h) * blk;
                const float *vp = kv->v + bb * kv->bs + (size_t)(h / group) * kv->hs;
                float *zp = b->z + ((size_t)bb * T + q0) * HD + (size_t)h * Dh;
                if (rows == 1)
                    cblas_sgemv(CblasRowMajor, CblasTrans, kmax, Dh, 1.0f, vp, RS, a, 1, 0.0f, zp, 1);
                else /* masked weights are 0: skipped */
                    for (int r0 = 0; r0 < rows; r0 += CAUSAL_SUB) {
                        const int rr = rows - r0 < CAUSAL_SUB ? rows - r0 : CAUSAL_SUB, kk = f->pos0 + q0 + r0 + rr;
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rr, Dh, kk, 1.0f, a + (size_t)r0 * S,
                                    S, vp, RS, 0.0f, zp + (size_t)r0 * HD, HD);
                    }
                if (rel_v) /* row i's pattern (after any hook_pattern edit) over its keys 0..pos0+q0+i */
                    for (int i = 0; i < rows; i++)
                        mp_relv_row(rel_v, R, Dh, a + (size_t)i * S, 0, f->pos0 + q0 + i,
                                    kpos ? kpos + (size_t)bb * S : NULL, zp + (size_t)i * HD);
            }
    }
cleanup:
    free(kpos);
    free(work);
    return st;
}

static mp_status check_forward_args(const mp_model *m, const int *tokens, int B, int T,
                                    const mp_forward_params *fp) {
    const mp_config *c = &m->cfg;
    if (B <= 0 || T <= 0) return mp_error(MP_ERR_ARG, "forward: batch (%d) and length (%d) must be positive", B, T);
    if (c->pos == MP_POS_LEARNED) {
        int pos0 = fp->cache ? fp->cache->len : 0;
        if (T > c->ctx - pos0)
            return mp_error(MP_ERR_ARG, "forward: positions %d..%d exceed the learned position table (ctx %d)", pos0,
                            pos0 + T - 1, c->ctx);
    }
    if (fp->attn_mask) {
        /* with a KV cache the mask covers the cached keys too */
        mp_status st = mp_mask_check(c, fp->attn_mask, B, (fp->cache ? fp->cache->len : 0) + T);
        if (st) return st;
    }
    if (fp->acts) {
        if (m->q)
            return mp_error(MP_ERR_ARG, "forward: training mode needs float32 weights; %s keeps them quantized "
                            "(dequantize it first: mp_model_make_owned, or model:dequantize() in Lua)",
                            m->source[0] ? m->source : "this model");
        if (fp->cache) return mp_error(MP_ERR_ARG, "forward: training mode (an activation store) takes no KV cache");
        if (fp->acts->B != B || fp->acts->T != T)
            return mp_error(MP_ERR_ARG, "forward: batch %d x %d does not match the activation store's %d x %d", B, T,
                            fp->acts->B, fp->acts->T);
    }
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

/* A linear layer out = in @ W^T + bias with W float32 (w) or quantized (qm, non-NULL). */
static mp_status linear(float *out, const float *in, const float *w, const mp_qmat *qm, const float *bias, int N,
                        int IN, int OUT) {
    if (!qm) {
        mp_matmul_forward(out, in, w, bias, N, IN, OUT);
        return MP_OK;
    }
    if (qm->type == MP_GGML_F32) {
        mp_matmul_forward(out, in, (const float *)(const void *)qm->data, bias, N, IN, OUT);
        return MP_OK;
    }
    if (qm->bf16_products) return mp_qdot_matmul_bf16(out, in, qm->data, qm->row_bytes, bias, N, IN, OUT);
    return mp_qdot_matmul(out, in, qm->type, qm->data, qm->row_bytes, bias, N, IN, OUT);
}
/* out[n] += bias[n] (one row; bias may be NULL) */
static void add_bias(float *out, const float *bias, int n) {
    if (bias)
        for (int i = 0; i < n; i++) out[i] += bias[i];
}
/* The quantized matrix of weight w of layer l, or NULL (float32 weights) */
static const mp_qmat *qmat_of(const mp_qparams *Q, mp_exec_weight w, int l) {
    if (!Q) return NULL;
    switch (w) {
    case MP_EXEC_WQ: return &Q->wq[l];
    case MP_EXEC_WK: return &Q->wk[l];
    case MP_EXEC_WV: return &Q->wv[l];
    case MP_EXEC_WO: return &Q->wo[l];
    case MP_EXEC_W1: return &Q->w1[l];
    case MP_EXEC_W3: return &Q->w3[l];
    case MP_EXEC_W2: return &Q->w2[l];
    default: return &Q->unembed;
    }
}

static mp_status cpu_view(const mp_exec *e, mp_hook_info *info, float *data) {
    return mp_hooks_fire(e->f.hs, info, data);
}

static mp_status cpu_embed(const mp_exec *e, float *x, const int *tokens) {
    const mp_config *c = e->f.c;
    const size_t n = (size_t)e->f.B * e->f.T * c->d_model;
    mp_model_embed_rows(CPU(e)->m, x, tokens, e->f.B * e->f.T);
    if (c->embed_scale) { /* Gemma: sqrt(d_model) in float32, as HF's normalizer in a float32 model */
        const float s = sqrtf((float)c->d_model);
        for (size_t i = 0; i < n; i++) x[i] *= s;
    }
    return MP_OK;
}

static mp_status cpu_learned_pos(const mp_exec *e, float *x, int add) {
    const mp_fwd_ctx *f = &e->f;
    const size_t D = (size_t)f->c->d_model;
    const float *pos_embed = CPU(e)->m->p.pos_embed;
    for (int bb = 0; bb < f->B; bb++)
        for (int t = 0; t < f->T; t++) {
            const size_t row = ((size_t)bb * f->T + t) * D;
            const float *pe = pos_embed + (size_t)(f->pos_ids ? f->pos_ids[(size_t)bb * f->T + t] : f->pos0 + t) * D;
            if (add) mp_residual_forward(x + row, pe, D);
            else memcpy(x + row, pe, D * sizeof(float));
        }
    return MP_OK;
}

static mp_status cpu_norm(const mp_exec *e, mp_hook_id sid, int l, float *out, float *mean, float *rstd,
                          const float *x) {
    const float *w, *bias;
    mp_exec_norm_of(e->f.c, &CPU(e)->m->p, sid, l, &w, &bias);
    return mp_fwd_norm(&e->f, sid, l, out, mean, rstd, x, w, bias, &CPU(e)->hws);
}

static mp_status cpu_linear(const mp_exec *e, mp_exec_weight w, int l, float *out, const float *in, int rows) {
    const mp_model *m = CPU(e)->m;
    const float *W, *bias;
    int IN, OUT;
    mp_exec_weight_of(&m->cfg, &m->p, w, l, &W, &bias, &IN, &OUT);
    return linear(out, in, W, qmat_of(m->q, w, l), bias, rows, IN, OUT);
}

/* A decoding step (one row) with float32 weights: the n products in one
 * parallel region; else one after another. */
static mp_status cpu_linears(const mp_exec *e, int n, const mp_exec_weight *w, int l, float *const *out,
                             const float *in, int rows) {
    const mp_model *m = CPU(e)->m;
    mp_status st;
    if (n > 1 && n <= 3 && rows == 1 && !m->q) {
        const float *W[3], *bias[3];
        int IN = 0, OUT[3];
        for (int i = 0; i < n; i++) mp_exec_weight_of(&m->cfg, &m->p, w[i], l, &W[i], &bias[i], &IN, &OUT[i]);
        mp_matvec_multi(n, out, W, OUT, in, IN);
        for (int i = 0; i < n; i++) add_bias(out[i], bias[i], OUT[i]);
        return MP_OK;
    }
    for (int i = 0; i < n; i++)
        if ((st = cpu_linear(e, w[i], l, out[i], in, rows))) return st;
    return MP_OK;
}

static mp_status cpu_pos_apply(const mp_exec *e, int l, float *q, float *k) {
    const cpu_fwd *u = CPU(e);
    const mp_config *c = e->f.c;
    const int loc = mp_pos_local(c, l); /* a windowed layer with its own base */
    const float *cs = loc ? u->pos.cos_l : u->pos.cos_t, *sn = loc ? u->pos.sin_l : u->pos.sin_t;
    mp_pos_apply(c, cs, sn, u->pos.q_scale, q, u->pB, u->pT, c->n_head, 0);
    mp_pos_apply(c, cs, sn, NULL, k, u->pB, u->pT, c->n_kv_head, 0);
    return MP_OK;
}

/* k, v [B, T, K*Dh] into the cache's [B, K, cap, Dh] of layer l at positions pos0.. */
static mp_status cpu_kv_append(const mp_exec *e, int l, const float *k, const float *v, mp_kv_view *kv) {
    mp_kvcache *cache = CPU(e)->cache;
    const int B = e->f.B, T = e->f.T, pos0 = e->f.pos0, K = e->f.c->n_kv_head, Dh = e->f.c->d_head;
    const size_t KD = (size_t)K * Dh;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * KD > 65536)
    for (int bb = 0; bb < B; bb++)
        for (int kh = 0; kh < K; kh++) {
            const size_t at = mp_kv_offset(B, K, cache->cap, Dh, l, bb, kh, pos0);
            const float *ks = k + (size_t)bb * T * KD + (size_t)kh * Dh, *vs = v + (size_t)bb * T * KD + (size_t)kh * Dh;
            for (int t = 0; t < T; t++) {
                memcpy(cache->k + at + (size_t)t * Dh, ks + (size_t)t * KD, (size_t)Dh * sizeof(float));
                memcpy(cache->v + at + (size_t)t * Dh, vs + (size_t)t * KD, (size_t)Dh * sizeof(float));
            }
        }
    *kv = mp_kv_view_cache(cache->k, cache->v, l, B, K, cache->cap, Dh);
    return MP_OK;
}

static mp_status cpu_attention(const mp_exec *e, int l, const mp_layer_acts *a, const mp_kv_view *kv, int qb) {
    const mp_attn_layer av = mp_attn_layer_of(e->f.c, &CPU(e)->m->p, l);
    return attention(e, l, a, kv, qb, &av);
}

static mp_status cpu_act(const mp_exec *e, float *post, const float *pre, const float *up) {
    const mp_config *c = e->f.c;
    const size_t n = (size_t)e->f.B * e->f.T * c->d_mlp;
    if (c->mlp == MP_MLP_SWIGLU && c->gelu_tanh) mp_geglu_forward(post, pre, up, n);
    else if (c->mlp == MP_MLP_SWIGLU) mp_swiglu_forward(post, pre, up, n);
    else if (c->gelu_tanh) mp_gelu_tanh_forward(post, pre, n);
    else mp_gelu_forward(post, pre, n);
    return MP_OK;
}

static mp_status cpu_copy(const mp_exec *e, float *dst, const float *src, size_t n) {
    (void)e;
    memcpy(dst, src, n * sizeof(float));
    return MP_OK;
}

static mp_status cpu_add(const mp_exec *e, float *x, const float *y, size_t n) {
    (void)e;
    mp_residual_forward(x, y, n);
    return MP_OK;
}

static mp_status cpu_head(const mp_exec *e, const float *xn, mp_logits_mode mode, float *logits) {
    const mp_fwd_ctx *f = &e->f;
    const int B = f->B, T = f->T, D = f->c->d_model;
    const float cap = f->c->final_softcap;
    mp_status st;
    if (mode == MP_LOGITS_ALL) {
        if ((st = cpu_linear(e, MP_EXEC_UNEMBED, -1, logits, xn, B * T))) return st;
        if (cap > 0.0f) mp_softcap(logits, (size_t)B * T * f->c->vocab, cap); /* Gemma 2 */
        return MP_OK;
    }
    float *last = CPU(e)->last;
    for (int bb = 0; bb < B; bb++) { /* gather the last (real) row of each sequence */
        const int tl = f->mask ? mp_mask_last_real(f->mask + (size_t)bb * (f->pos0 + T) + f->pos0, T) : T - 1;
        memmove(last + (size_t)bb * D, xn + ((size_t)bb * T + tl) * D, (size_t)D * sizeof(float));
    }
    if ((st = cpu_linear(e, MP_EXEC_UNEMBED, -1, logits, last, B))) return st;
    if (cap > 0.0f) mp_softcap(logits, (size_t)B * f->c->vocab, cap);
    return MP_OK;
}

static mp_status cpu_qk_norm(const mp_exec *e, mp_hook_id id, int l, float *x, float *x_in, float *rstd) {
    const mp_config *c = e->f.c;
    const float *w;
    int rows, width;
    mp_exec_qk_norm_of(c, &CPU(e)->m->p, id, l, e->f.B * e->f.T, &w, &rows, &width);
    if (x_in) memcpy(x_in, x, (size_t)rows * width * sizeof(float));
    mp_rmsnorm_forward(x, rstd, x, w, rows, width, c->norm_eps); /* row by row: in place is safe */
    return MP_OK;
}

static mp_status cpu_split_qkv(const mp_exec *e, int l, const float *in, float *q, float *k, float *v) {
    return mp_fwd_split_qkv(&e->f, l, CPU(e)->m, in, q, k, v, &CPU(e)->hws);
}

static mp_status cpu_result(const mp_exec *e, int l, const float *z, float *out) {
    return mp_fwd_result(&e->f, l, CPU(e)->m, z, out, &CPU(e)->hws);
}

/* The CPU's op table (registered statically: device.c). */
const mp_exec_ops mp_exec_cpu = {
    .version = MP_EXEC_OPS_VERSION, .name = "cpu", .device = MP_DEVICE_CPU,
    .view = cpu_view, .embed = cpu_embed, .learned_pos = cpu_learned_pos, .norm = cpu_norm,
    .linear = cpu_linear, .linears = cpu_linears, .pos_apply = cpu_pos_apply, .kv_append = cpu_kv_append,
    .attention = cpu_attention, .act = cpu_act, .copy = cpu_copy, .add = cpu_add, .head = cpu_head,
    .qk_norm = cpu_qk_norm,
    .split_qkv = cpu_split_qkv, .result = cpu_result, .bwd = &mp_bwd_ops_cpu};

mp_device mp_model_forward_device(const mp_model *m, const mp_forward_params *fp) {
    mp_forward_params def = mp_forward_params_default();
    if (!m->dev || !m->dev_ops) return MP_DEVICE_CPU;
    return m->dev_ops->cpu_reason(m, fp ? fp : &def) ? MP_DEVICE_CPU : m->device;
}

mp_status mp_model_sync(const mp_model *m) {
    return m && m->dev && m->dev_ops && m->dev_ops->sync ? m->dev_ops->sync(m) : MP_OK;
}

mp_status mp_model_forward(const mp_model *m, const int *tokens, int B, int T, const mp_forward_params *fp_in,
                           float *logits) {
    mp_forward_params fp = fp_in ? *fp_in : mp_forward_params_default();
    mp_status st = check_forward_args(m, tokens, B, T, &fp);
    if (st) return st;
    if (fp.logits != MP_LOGITS_NONE && !logits && !fp.acts)
        return mp_error(MP_ERR_ARG, "forward: logits requested (params.logits) but the logits buffer is NULL");
    if (m->dev_ops && m->dev_ops->version != MP_DEV_OPS_VERSION)
        return mp_error(MP_ERR_ARG, "forward: the model's device backend \"%s\" has interface version %d; this "
                        "runtime calls version %d", m->dev_ops->name, m->dev_ops->version, MP_DEV_OPS_VERSION);
    /* a model on a device (backends/cuda): the backend runs the call, unless it
     * needs a path only the CPU has (then the host weights serve, as always);
     * on the CPU, the walk (exec.c) over the CPU's op table */
    if (mp_model_forward_device(m, &fp) != MP_DEVICE_CPU) return m->dev_ops->forward(m, tokens, B, T, &fp, logits);
    if ((st = mp_model_sync(m))) return st; /* the CPU path reads the host weights */
    if ((st = mp_kvcache_sync(fp.cache))) return st; /* and the host cache, whose rows a device may hold newer */
    const mp_config *c = &m->cfg;
    mp_acts *A = fp.acts;
    const int D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head;
    const int M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp;
    const int HD = H * Dh, KD = K * Dh, N = B * T;
    const int pos0 = fp.cache ? fp.cache->len : 0, S = pos0 + T;
    /* training mode: one block of all T query rows, the full pattern kept */
    const int qb = A ? T : fp.q_block > 0 ? (fp.q_block < T ? fp.q_block : T) : (T < 64 ? T : 64);
    mp_fwd_ctx f = {c, fp.hooks, B, T, pos0, fp.attn_mask, NULL};

    /* one allocation for the buffers of one layer (training mode: only the
     * scratch output; the activations and positional tables are in A) */
    size_t n_x = (size_t)N * D, n_q = (size_t)N * HD, n_k = (size_t)N * KD, n_h = (size_t)N * M;
    size_t n_att = (size_t)B * H * qb * S, n_rope = (size_t)T * (Dh / 2);
    /* positional tables: cos, sin [T, Dh/2], q scale [T] (+ the windowed layers' cos, sin: mp_pos_tables_all) */
    size_t n_pos = mp_pos_tables_floats(c, (size_t)T);
    /* a parallel block (parallel_attn) keeps resid_pre + attn_out apart from resid_pre: one more [N, D] */
    const size_t n_par = c->parallel_attn ? n_x : 0;
    const size_t n_raw = c->post_norms ? n_x : 0; /* post_norms: the attention / MLP output before its norm */
    size_t total = A ? n_x : 3 * n_x + 2 * n_q + 2 * n_k + 2 * n_h + n_att + n_pos + n_par + n_raw;
    float *mem = NULL, *own = NULL;
    if (fp.cache && fp.cache->scratch_n >= total) { /* decoding: the cache's buffers, no allocation per token */
        mem = fp.cache->scratch;
    } else if (fp.cache && total <= MP_KV_SCRATCH_KEEP) {
        float *grown = realloc(fp.cache->scratch, total * sizeof(float));
        if (!grown) return mp_error(MP_ERR_NOMEM, "out of memory for the forward-pass buffers (%zu floats)", total);
        fp.cache->scratch = mem = grown;
        fp.cache->scratch_n = total;
    } else {
        mem = own = mp_malloc((total ? total : 1) * sizeof(float), "forward-pass buffers");
        if (!mem) return MP_ERR_NOMEM;
    }
    /* inference: every layer runs in the same scratch (the residual updated in
     * place, one norm output, the activation written over the gate) */
    float *cur = mem;
    fwd_bufs b = {.out = cur};
    cur += n_x;
    mp_layer_acts scratch;
    memset(&scratch, 0, sizeof scratch);
    if (A) {
        b.cos_t = A->pos_tab;
    } else {
        b.cos_t = cur; cur += n_pos;
        scratch.resid_in = scratch.resid_mid = scratch.resid_out = cur; cur += n_x;
        scratch.ln1 = scratch.ln2 = cur; cur += n_x;
        scratch.q = cur; cur += n_q;
        scratch.z = cur; cur += n_q;
        scratch.k = cur; cur += n_k;
        scratch.v = cur; cur += n_k;
        scratch.pre = scratch.post = cur; cur += n_h;
        scratch.up = cur; cur += n_h;
        if (n_par) scratch.resid_mid = cur, cur += n_par;
        if (n_raw) scratch.attn_raw = scratch.mlp_raw = cur, cur += n_raw;
        scratch.att = cur;
    }
    b.sin_t = b.cos_t + n_rope;
    b.q_scale = b.sin_t + n_rope;
    if (mp_pos_has_local(c)) {
        b.cos_l = b.q_scale + T;
        b.sin_l = b.cos_l + n_rope;
    }
    if (!mp_pos_tables_all(c, b.cos_t, pos0, T)) b.q_scale = NULL;
    /* a padded batch (ragged.c): per-token position ids and the tables of
     * their positions ([N, Dh/2] twice, [N]), used with B = 1, T = N */
    int *pos_ids = NULL;
    float *pos_g = NULL;
    fwd_bufs bp = b;
    int pB = B, pT = T;
    if (fp.attn_mask) {
        const size_t half = (size_t)(Dh / 2);
        pos_ids = mp_malloc((size_t)N * sizeof(int), "position ids of a padded batch");
        pos_g = pos_ids ? mp_malloc(mp_pos_tables_floats(c, (size_t)N) * sizeof(float),
                                    "positional tables of a padded batch")
                        : NULL;
        if (!pos_g) { st = MP_ERR_NOMEM; goto cleanup; }
        mp_mask_positions_at(fp.attn_mask, B, S, pos0, T, pos_ids);
        f.pos_ids = pos_ids; /* learned positions (fwd_hooks.c) */
        int has_scale = 0;
        if ((st = mp_mask_pos_tables(c, pos_ids, (size_t)N, pos_g, &has_scale))) goto cleanup;
        bp.cos_t = pos_g;
        bp.sin_t = pos_g + half * N;
        bp.q_scale = b.q_scale ? bp.sin_t + half * N : NULL;
        if (b.cos_l) { /* the windowed layers' tables after the q scale's slot, as mp_pos_tables_floats counts */
            bp.cos_l = bp.sin_t + half * N + N;
            bp.sin_l = bp.cos_l + half * N;
        }
        pB = 1;
        pT = N;
    }

    {
        cpu_fwd u = {m, fp.cache, bp, pB, pT, b.out, {NULL, 0}};
        const mp_exec e = {&mp_exec_cpu, &u, f};
        mp_exec_bufs eb = {.tokens = tokens, .A = A, .scratch = scratch, .out = b.out, .buf = b.out,
                           .cache = fp.cache != NULL, .qb = qb,
                           /* training: all logits into the store */
                           .logits_mode = A ? MP_LOGITS_ALL : fp.logits, .logits = A ? A->logits : logits};
        st = mp_block_forward(&e, &eb);
        mp_fwd_ws_free(&u.hws);
    }
    if (st == MP_OK && fp.cache) fp.cache->len += T;
cleanup:
    free(pos_g);
    free(pos_ids);
    free(own);
    return st;
}

mp_status mp_fwd_linear(float *out, const float *in, const float *w, const mp_qmat *qm, const float *bias, int N,
                        int IN, int OUT) {
    return linear(out, in, w, qm, bias, N, IN, OUT);
}
