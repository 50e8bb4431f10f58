/* config.c — the model config: defaults, validation (every field in range, every
 * buffer size free of size_t overflow), parameter counting, and allocation /
 * freeing of an mp_model whose parameters live in one zeroed float buffer. */
#include "attn_variants.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Upper bounds: far beyond any model we run, small enough that products of a
 * few of them stay meaningful. */
#define MP_MAX_DIM    (1 << 20)   /* d_model, d_head, d_mlp */
#define MP_MAX_HEADS  (1 << 16)   /* n_head, n_kv_head */
#define MP_MAX_LAYERS 4096
#define MP_MAX_VOCAB  (1 << 24)
#define MP_MAX_CTX    (1 << 24)

mp_config mp_config_default(void) {
    mp_config c;
    memset(&c, 0, sizeof c);   /* dims 0: the caller must set them */
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    c.tied = 1;
    c.norm = MP_NORM_RMS;
    c.mlp = MP_MLP_SWIGLU;
    c.pos = MP_POS_ROPE;
    return c;
}

/* Sizes (in floats) of the mp_params fields, in struct order. Returns -1 on
 * overflow. Assumes the fields are positive (checked by the caller). */
enum { P_EMBED, P_LN1, P_LN1B, P_WQ, P_WK, P_WV, P_WO, P_LN2, P_LN2B, P_W1, P_W3, P_W2, P_LNF, P_LNFB,
       P_UNEMBED, P_POS, P_BQ, P_BK, P_BV, P_BO, P_B1, P_B3, P_B2, P_SSMAX, P_ASD, P_ASB, P_ASG, P_COUNT };

static int param_sizes(const mp_config *c, size_t n[P_COUNT]) {
    size_t D = (size_t)c->d_model, L = (size_t)c->n_layer, V = (size_t)c->vocab;
    int has_mlp = c->mlp != MP_MLP_NONE, ln = c->norm == MP_NORM_LAYER;
    size_t q, kv, M = has_mlp ? (size_t)c->d_mlp : 0, LD;
    if (mp_mul_size((size_t)c->n_head, (size_t)c->d_head, &q) ||
        mp_mul_size((size_t)c->n_kv_head, (size_t)c->d_head, &kv) ||
        mp_mul_size(L, D, &LD)) return -1;
    if (mp_mul_size(V, D, &n[P_EMBED])) return -1;
    n[P_LN1] = LD;
    n[P_LN1B] = ln ? LD : 0;
    n[P_LN2] = has_mlp ? LD : 0;
    n[P_LN2B] = has_mlp && ln ? LD : 0;
    if (mp_mul_size(LD, q, &n[P_WQ]) || mp_mul_size(LD, kv, &n[P_WK])) return -1;
    n[P_WV] = n[P_WK];
    n[P_WO] = n[P_WQ];
    if (mp_mul_size(LD, M, &n[P_W1])) return -1;
    n[P_W2] = n[P_W1];
    n[P_W3] = c->mlp == MP_MLP_SWIGLU ? n[P_W1] : 0;   /* GELU: w1 in, w2 out */
    n[P_LNF] = D;
    n[P_LNFB] = ln ? D : 0;
    n[P_UNEMBED] = c->tied ? 0 : n[P_EMBED];
    /* parameters of real architectures (absent: size 0, so older models keep their layout) */
    if (c->pos == MP_POS_LEARNED) {
        if (mp_mul_size((size_t)c->ctx, D, &n[P_POS])) return -1;
    } else {
        n[P_POS] = 0;
    }
    if (mp_mul_size(L, q, &n[P_BQ]) || mp_mul_size(L, kv, &n[P_BK])) return -1;
    if (!c->qkv_bias) n[P_BQ] = n[P_BK] = 0;
    n[P_BV] = n[P_BK];
    n[P_BO] = c->linear_bias ? LD : 0;
    if (mp_mul_size(L, M, &n[P_B1])) return -1;
    if (!c->linear_bias) n[P_B1] = 0;
    n[P_B3] = c->mlp == MP_MLP_SWIGLU ? n[P_B1] : 0;
    n[P_B2] = c->linear_bias && has_mlp ? LD : 0;
    /* attention-variant parameters, [L, H] (absent for softmax and entmax) */
    size_t LH;
    if (mp_mul_size(L, (size_t)c->n_head, &LH)) return -1;
    n[P_SSMAX] = c->attn == MP_ATTN_SSMAX ? LH : 0;
    n[P_ASD] = n[P_ASB] = n[P_ASG] = c->attn == MP_ATTN_ASENTMAX ? LH : 0;
    return 0;
}

static float **param_field(mp_params *p, int i) {
    float **f[P_COUNT] = {&p->embed, &p->ln1_w, &p->ln1_b, &p->wq, &p->wk, &p->wv, &p->wo, &p->ln2_w,
                          &p->ln2_b, &p->w1, &p->w3, &p->w2, &p->lnf_w, &p->lnf_b, &p->unembed,
                          &p->pos_embed, &p->bq, &p->bk, &p->bv, &p->bo, &p->b1, &p->b3, &p->b2,
                          &p->ssmax_s, &p->as_delta, &p->as_beta, &p->as_gamma};
    return f[i];
}

void mp_params_layout(const mp_config *c, float *base, mp_params *p) {
    size_t n[P_COUNT];
    memset(p, 0, sizeof *p);
    if (param_sizes(c, n)) return;
    for (int i = 0; i < P_COUNT; i++) {
        *param_field(p, i) = n[i] ? base : NULL;
        base += n[i];
    }
    if (c->tied) p->unembed = p->embed;
}

int mp_params_describe(const mp_config *c, const mp_params *p, mp_param_desc out[MP_PARAM_MAX]) {
    static const char *names[P_COUNT] = {
        "embed", "blocks.%d.ln1.weight", "blocks.%d.ln1.bias", "blocks.%d.attn.wq", "blocks.%d.attn.wk",
        "blocks.%d.attn.wv", "blocks.%d.attn.wo", "blocks.%d.ln2.weight", "blocks.%d.ln2.bias",
        "blocks.%d.mlp.w1", "blocks.%d.mlp.w3", "blocks.%d.mlp.w2", "ln_final.weight", "ln_final.bias",
        "unembed", "pos_embed", "blocks.%d.attn.bq", "blocks.%d.attn.bk", "blocks.%d.attn.bv",
        "blocks.%d.attn.bo", "blocks.%d.mlp.b1", "blocks.%d.mlp.b3", "blocks.%d.mlp.b2",
        "blocks.%d.attn.ssmax_s", "blocks.%d.attn.as_delta", "blocks.%d.attn.as_beta", "blocks.%d.attn.as_gamma"};
    int64_t D = c->d_model, V = c->vocab, M = c->d_mlp, HD = (int64_t)c->n_head * c->d_head,
            KD = (int64_t)c->n_kv_head * c->d_head;
    int64_t shapes[P_COUNT][2] = {{V, D}, {D, 0}, {D, 0}, {HD, D}, {KD, D}, {KD, D}, {D, HD}, {D, 0}, {D, 0},
                                  {M, D}, {M, D}, {D, M}, {D, 0}, {D, 0}, {V, D},
                                  {c->ctx, D}, {HD, 0}, {KD, 0}, {KD, 0}, {D, 0}, {M, 0}, {M, 0}, {D, 0},
                                  {c->n_head, 0}, {c->n_head, 0}, {c->n_head, 0}, {c->n_head, 0}};
    size_t n[P_COUNT];
    int k = 0;
    if (param_sizes(c, n)) return 0;
    mp_params tmp = *p;
    for (int i = 0; i < P_COUNT; i++) {
        if (!n[i]) continue;
        mp_param_desc *d = &out[k++];
        d->name = names[i];
        d->p = *param_field(&tmp, i);
        d->n = n[i];
        d->per_layer = strstr(names[i], "%d") != NULL;
        d->ndim = shapes[i][1] ? 2 : 1;
        d->shape[0] = shapes[i][0];
        d->shape[1] = shapes[i][1];
        d->decay = d->ndim == 2;
    }
    return k;
}

static int sum_sizes(const size_t n[P_COUNT], size_t *total) {
    size_t t = 0;
    for (int i = 0; i < P_COUNT; i++)
        if (mp_add_size(t, n[i], &t)) return -1;
    *total = t;
    return 0;
}

size_t mp_config_n_params(const mp_config *c) {
    size_t n[P_COUNT], total;
    if (c->d_model <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_kv_head <= 0 ||
        c->d_head <= 0 || c->vocab <= 0 || (c->mlp != MP_MLP_NONE && c->d_mlp <= 0))
        return 0;
    if (param_sizes(c, n) || sum_sizes(n, &total)) return 0;
    return total;
}

/* product of k sizes times sizeof(float), overflow-checked */
static int buf_bytes(size_t a, size_t b, size_t c, size_t d) {
    size_t x;
    return mp_mul_size(a, b, &x) || mp_mul_size(x, c, &x) || mp_mul_size(x, d, &x) ||
           mp_mul_size(x, sizeof(float), &x);
}

mp_status mp_config_validate(const mp_config *c, const char *what) {
    if (!what) what = "config";
    struct { const char *name; int v, max; } f[] = {
        {"d_model", c->d_model, MP_MAX_DIM},   {"n_layer", c->n_layer, MP_MAX_LAYERS},
        {"n_head", c->n_head, MP_MAX_HEADS},   {"n_kv_head", c->n_kv_head, MP_MAX_HEADS},
        {"d_head", c->d_head, MP_MAX_DIM},     {"d_mlp", c->d_mlp, MP_MAX_DIM},
        {"vocab", c->vocab, MP_MAX_VOCAB},     {"ctx", c->ctx, MP_MAX_CTX},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (c->mlp == MP_MLP_NONE && !strcmp(f[i].name, "d_mlp") && f[i].v == 0) continue;
        if (f[i].v <= 0)
            return mp_error(MP_ERR_FORMAT, "%s: %s (%d) must be positive", what, f[i].name, f[i].v);
        if (f[i].v > f[i].max)
            return mp_error(MP_ERR_FORMAT, "%s: %s (%d) is too large (limit %d)", what,
                            f[i].name, f[i].v, f[i].max);
    }
    if (c->n_head % c->n_kv_head != 0)
        return mp_error(MP_ERR_FORMAT, "%s: n_head (%d) is not divisible by n_kv_head (%d)",
                        what, c->n_head, c->n_kv_head);
    if ((unsigned)c->norm > MP_NORM_LAYER || (unsigned)c->mlp > MP_MLP_NONE ||
        (unsigned)c->pos >= MP_POS_COUNT)
        return mp_error(MP_ERR_FORMAT, "%s: unknown norm/mlp/pos kind (%d/%d/%d)", what,
                        (int)c->norm, (int)c->mlp, (int)c->pos);
    if (mp_pos_rotates(c) && c->d_head % 2 != 0)
        return mp_error(MP_ERR_FORMAT, "%s: d_head (%d) must be even for pos %s", what, c->d_head,
                        mp_pos_name(c->pos));
    if ((c->pos == MP_POS_ROPE || c->pos == MP_POS_HALF_ROPE) &&
        (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta)))
        return mp_error(MP_ERR_FORMAT, "%s: rope_theta (%g) must be positive and finite",
                        what, (double)c->rope_theta);
    if (c->rope_dims != 0) {
        if (c->pos != MP_POS_HALF_ROPE && c->pos != MP_POS_ROPE_ID)
            return mp_error(MP_ERR_FORMAT, "%s: rope_dims (%d) applies to pos half_rope and rope_id only (pos %s)",
                            what, c->rope_dims, mp_pos_name(c->pos));
        if (c->rope_dims < 2 || c->rope_dims % 2 || c->rope_dims > c->d_head)
            return mp_error(MP_ERR_FORMAT, "%s: rope_dims (%d) must be even and in 2..d_head (%d)", what,
                            c->rope_dims, c->d_head);
    } else if ((c->pos == MP_POS_HALF_ROPE || c->pos == MP_POS_ROPE_ID) && c->d_head < 4) {
        return mp_error(MP_ERR_FORMAT, "%s: pos %s rotates half of d_head (%d): d_head must be at least 4", what,
                        mp_pos_name(c->pos), c->d_head);
    }
    if (c->pos_no_temp != 0 && c->pos_no_temp != 1)
        return mp_error(MP_ERR_FORMAT, "%s: pos_no_temp (%d) must be 0 or 1", what, c->pos_no_temp);
    if ((unsigned)c->rope_scaling > MP_ROPE_SCALING_YARN)
        return mp_error(MP_ERR_FORMAT, "%s: unknown RoPE scaling kind (%d)", what, (int)c->rope_scaling);
    if (c->rope_scaling != MP_ROPE_SCALING_NONE) {
        if (c->pos != MP_POS_ROPE && c->pos != MP_POS_HALF_ROPE)
            return mp_error(MP_ERR_FORMAT, "%s: RoPE scaling %s applies to pos rope and half_rope only (pos %s)", what,
                            mp_rope_scaling_name(c->rope_scaling), mp_pos_name(c->pos));
        if (!(c->rope_factor > 0.0f) || !isfinite(c->rope_factor))
            return mp_error(MP_ERR_FORMAT, "%s: RoPE scaling factor (%g) must be positive and finite", what,
                            (double)c->rope_factor);
    }
    if (c->rope_orig_ctx < 0 || c->rope_orig_ctx > MP_MAX_CTX)
        return mp_error(MP_ERR_FORMAT, "%s: rope_orig_ctx (%d) must be in 0..%d", what, c->rope_orig_ctx, MP_MAX_CTX);
    if (!(c->yarn_beta_fast >= 0.0f) || !isfinite(c->yarn_beta_fast) || !(c->yarn_beta_slow >= 0.0f) ||
        !isfinite(c->yarn_beta_slow) ||
        (c->yarn_beta_fast > 0.0f ? c->yarn_beta_fast : 32.0f) <= (c->yarn_beta_slow > 0.0f ? c->yarn_beta_slow : 1.0f))
        return mp_error(MP_ERR_FORMAT, "%s: YaRN beta_fast (%g) must exceed beta_slow (%g), both >= 0", what,
                        (double)c->yarn_beta_fast, (double)c->yarn_beta_slow);
    if ((unsigned)c->attn >= MP_ATTN_COUNT)
        return mp_error(MP_ERR_FORMAT, "%s: unknown attention variant (%d)", what, (int)c->attn);
    if (c->attn == MP_ATTN_ENTMAX || c->attn == MP_ATTN_ASENTMAX) {
        if (c->attn_alpha != 0.0f && !(c->attn_alpha > 1.0f && c->attn_alpha <= 8.0f))
            return mp_error(MP_ERR_FORMAT, "%s: attention alpha (%g) must be in (1, 8] (0: 1.5)", what,
                            (double)c->attn_alpha);
    } else if (c->attn_alpha != 0.0f && !(c->attn == MP_ATTN_ENTMAX15 && c->attn_alpha == 1.5f)) {
        return mp_error(MP_ERR_FORMAT, "%s: attention alpha (%g) applies to attn entmax and asentmax only (attn %s)",
                        what, (double)c->attn_alpha, mp_attn_name(c->attn));
    }
    if (!(c->norm_eps >= 0.0f) || !isfinite(c->norm_eps))
        return mp_error(MP_ERR_FORMAT, "%s: norm_eps (%g) must be non-negative and finite",
                        what, (double)c->norm_eps);
    if (c->tied != 0 && c->tied != 1)
        return mp_error(MP_ERR_FORMAT, "%s: tied (%d) must be 0 or 1", what, c->tied);
    if ((c->qkv_bias | c->linear_bias | c->gelu_tanh) & ~1)
        return mp_error(MP_ERR_FORMAT, "%s: qkv_bias/linear_bias/gelu_tanh (%d/%d/%d) must be 0 or 1", what,
                        c->qkv_bias, c->linear_bias, c->gelu_tanh);
    if (!(c->rope_scale >= 0.0f) || !isfinite(c->rope_scale))
        return mp_error(MP_ERR_FORMAT, "%s: rope_scale (%g) must be non-negative and finite", what,
                        (double)c->rope_scale);
    if (c->n_rope_freqs != 0) {
        if (c->pos != MP_POS_ROPE || c->n_rope_freqs != c->d_head / 2 || c->n_rope_freqs > MP_ROPE_FREQS_MAX)
            return mp_error(MP_ERR_FORMAT, "%s: %d RoPE frequency divisors for d_head %d (need d_head/2 <= %d, "
                            "RoPE only)", what, c->n_rope_freqs, c->d_head, MP_ROPE_FREQS_MAX);
        for (int i = 0; i < c->n_rope_freqs; i++)
            if (!(c->rope_freqs[i] > 0.0f) || !isfinite(c->rope_freqs[i]))
                return mp_error(MP_ERR_FORMAT, "%s: RoPE frequency divisor %d (%g) must be positive and finite",
                                what, i, (double)c->rope_freqs[i]);
    }

    size_t n[P_COUNT], total;
    if (param_sizes(c, n) || sum_sizes(n, &total) || mp_mul_size(total, sizeof(float), &total))
        return mp_error(MP_ERR_FORMAT, "%s: the parameter count overflows size_t "
                        "(d_model %d, n_layer %d, d_mlp %d, vocab %d)",
                        what, c->d_model, c->n_layer, c->d_mlp, c->vocab);
    /* The biggest buffers of one forward over the whole context (B = 1):
     * attention scores [H,T,T], logits [T,V], MLP activations [T,M], residual
     * [T,D], per-head q/k/v [T,H*Dh], KV cache [L,T,K*Dh]. */
    size_t T = (size_t)c->ctx, H = (size_t)c->n_head, Dh = (size_t)c->d_head;
    if (buf_bytes(H, T, T, 1) || buf_bytes(T, (size_t)c->vocab, 1, 1) ||
        buf_bytes(T, (size_t)c->d_mlp, 1, 1) || buf_bytes(T, (size_t)c->d_model, 1, 1) ||
        buf_bytes(T, H, Dh, 1) || buf_bytes((size_t)c->n_layer, T, (size_t)c->n_kv_head, Dh))
        return mp_error(MP_ERR_FORMAT, "%s: a forward buffer over ctx (%d) positions "
                        "overflows size_t (n_head %d, d_head %d, vocab %d)",
                        what, c->ctx, c->n_head, c->d_head, c->vocab);
    return MP_OK;
}

mp_status mp_model_new(mp_model **out, const mp_config *cfg) {
    mp_status st;
    mp_model *m = NULL;
    size_t n[P_COUNT], total = 0;
    *out = NULL;
    if ((st = mp_config_validate(cfg, "mp_model_new")) != MP_OK) return st;
    param_sizes(cfg, n);   /* cannot fail after validation */
    sum_sizes(n, &total);
    if (!(m = mp_calloc(1, sizeof *m, "model"))) { st = MP_ERR_NOMEM; goto cleanup; }
    m->cfg = *cfg;
    m->format = "alloc";
    if (!(m->owned = mp_calloc(total, sizeof(float), "model parameters"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    mp_params_layout(cfg, m->owned, &m->p);
    mp_attn_params_init(cfg, &m->p);
    *out = m;
    return MP_OK;
cleanup:
    mp_model_free(m);
    return st;
}

mp_status mp_model_new_unweighted(mp_model **out, const mp_config *cfg) {
    mp_status st;
    mp_model *m = NULL;
    size_t n[P_COUNT], total = 0;
    *out = NULL;
    if ((st = mp_config_validate(cfg, "mp_model_new_unweighted")) != MP_OK) return st;
    param_sizes(cfg, n);
    const int linear[] = {P_EMBED, P_WQ, P_WK, P_WV, P_WO, P_W1, P_W3, P_W2, P_UNEMBED};
    for (size_t i = 0; i < sizeof linear / sizeof linear[0]; i++) n[linear[i]] = 0;
    sum_sizes(n, &total);
    if (!(m = mp_calloc(1, sizeof *m, "model"))) return MP_ERR_NOMEM;
    m->cfg = *cfg;
    m->format = "alloc";
    if (!(m->owned = mp_calloc(total ? total : 1, sizeof(float), "model parameters"))) {
        mp_model_free(m);
        return MP_ERR_NOMEM;
    }
    float *base = m->owned;
    for (int i = 0; i < P_COUNT; i++) {
        *param_field(&m->p, i) = n[i] ? base : NULL;
        base += n[i];
    }
    mp_attn_params_init(cfg, &m->p);
    *out = m;
    return MP_OK;
}

void mp_model_free(mp_model *m) {
    if (!m) return;
    if (m->map) munmap(m->map, m->map_len);
    mp_qparams_free(m->q);
    free(m->owned);
    free(m);
}

mp_status mp_model_make_owned(mp_model *m) {
    if (m->q) return mp_model_dequantize(m); /* training reads and writes float32 weights */
    if (m->owned && !m->map) return MP_OK;
    mp_model *fresh = NULL;
    mp_status st = mp_model_new(&fresh, &m->cfg);
    if (st) return mp_error_prefix(st, "copying the parameters for training");
    mp_param_desc src[MP_PARAM_MAX], dst[MP_PARAM_MAX];
    int n = mp_params_describe(&m->cfg, &m->p, src);
    mp_params_describe(&m->cfg, &fresh->p, dst);
    for (int i = 0; i < n; i++) memcpy(dst[i].p, src[i].p, src[i].n * sizeof(float));
    if (m->map) munmap(m->map, m->map_len);
    free(m->owned);
    m->map = NULL;
    m->map_len = 0;
    m->owned = fresh->owned;
    m->p = fresh->p;
    fresh->owned = NULL;
    mp_model_free(fresh);
    return MP_OK;
}
