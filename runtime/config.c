/* config.c — the model config: defaults, validation (every field in range, every
 * buffer size free of size_t overflow), parameter counting, and allocation /
 * freeing of an mp_model whose parameters live in one zeroed float buffer. */
#include "attn_variants.h"
#include "config.h"
#include "model.h"
#include "sae_splice.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
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

/* ---- the kind names, one table each ---- */
const char *const mp_norm_names[MP_NORM_COUNT] = {"rms", "layer"};
const char *const mp_mlp_names[MP_MLP_COUNT] = {"swiglu", "gelu", "none"};
const char *const mp_pos_names[MP_POS_COUNT] = {"rope", "none", "learned", "half_rope", "high_freq", "rope_id"};
const char *const mp_rope_scaling_names[MP_ROPE_SCALING_COUNT] = {"none", "pi", "ntk", "yarn"};
const char *const mp_attn_names[MP_ATTN_COUNT] = {"softmax", "ssmax", "entmax15", "entmax", "asentmax"};
const char *const mp_qk_norm_names[MP_QK_NORM_COUNT] = {"none", "head", "full"};

static const char *kind_name(const char *const *names, int n, int k) {
    return k >= 0 && k < n ? names[k] : "unknown";
}
static int kind_parse(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}
const char *mp_norm_name(mp_norm_kind k) { return kind_name(mp_norm_names, MP_NORM_COUNT, (int)k); }
const char *mp_mlp_name(mp_mlp_kind k) { return kind_name(mp_mlp_names, MP_MLP_COUNT, (int)k); }
const char *mp_mlp_label(const mp_config *c) {
    return c->mlp == MP_MLP_GELU && c->gelu_tanh ? "gelu_tanh" : mp_mlp_name(c->mlp);
}
const char *mp_pos_name(mp_pos_kind k) { return kind_name(mp_pos_names, MP_POS_COUNT, (int)k); }
int mp_pos_parse(const char *name) { return kind_parse(mp_pos_names, MP_POS_COUNT, name); }
const char *mp_rope_scaling_name(mp_rope_scaling k) {
    return kind_name(mp_rope_scaling_names, MP_ROPE_SCALING_COUNT, (int)k);
}
int mp_rope_scaling_parse(const char *name) { return kind_parse(mp_rope_scaling_names, MP_ROPE_SCALING_COUNT, name); }
const char *mp_attn_name(mp_attn_kind k) { return kind_name(mp_attn_names, MP_ATTN_COUNT, (int)k); }
int mp_attn_parse(const char *name) { return kind_parse(mp_attn_names, MP_ATTN_COUNT, name); }
const char *mp_qk_norm_name(mp_qk_norm_kind k) { return kind_name(mp_qk_norm_names, MP_QK_NORM_COUNT, (int)k); }
int mp_qk_norm_parse(const char *name) { return kind_parse(mp_qk_norm_names, MP_QK_NORM_COUNT, name); }

float mp_attn_scale(const mp_config *c) {
    return 1.0f / sqrtf(c->query_pre_attn_scalar > 0.0f ? c->query_pre_attn_scalar : (float)c->d_head);
}

void mp_softcap(float *x, size_t n, float cap) {
    const float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

/* ---- MP_CONFIG_TABLE as data and accessors ---- */
enum {
#define CF_ID(m, ty, a, l, nm, nn, d, fl, val, wr, sh) CF_##m,
    MP_CONFIG_TABLE(CF_ID)
#undef CF_ID
    CF_COUNT
};

const mp_config_field mp_config_fields[] = {
#define CF_ROW(m, ty, a, l, nm, nn, d, fl, val, wr, sh) {a, l, ty, nm, nn, fl},
    MP_CONFIG_TABLE(CF_ROW)
#undef CF_ROW
};
const int mp_config_n_fields = CF_COUNT;

/* One switch over the table answers the four questions about field i. */
enum { Q_GET, Q_VALUE, Q_WRITTEN, Q_SHOWN };
static double field_query(const mp_config *c, int i, int q) {
    switch (i) {
#define CF_Q(m, ty, a, l, nm, nn, d, fl, val, wr, sh)                                                      \
    case CF_##m:                                                                                           \
        return q == Q_GET ? (ty == MP_CF_NOTBOOL ? (double)!c->m : (double)c->m)                           \
             : q == Q_VALUE ? (double)(val) : q == Q_WRITTEN ? (double)((wr) != 0) : (double)((sh) != 0);
        MP_CONFIG_TABLE(CF_Q)
#undef CF_Q
    }
    return 0.0;
}

double mp_config_get(const mp_config *c, int i) { return field_query(c, i, Q_GET); }
double mp_config_value(const mp_config *c, int i) { return field_query(c, i, Q_VALUE); }
int mp_config_written(const mp_config *c, int i) { return field_query(c, i, Q_WRITTEN) != 0.0; }
int mp_config_shown(const mp_config *c, int i) { return field_query(c, i, Q_SHOWN) != 0.0; }

void mp_config_set(mp_config *c, int i, double v) {
    if (i >= 0 && i < CF_COUNT && mp_config_fields[i].type != MP_CF_FLOAT) { /* integer members: no UB on a bad value */
        v = isnan(v) ? 0.0 : v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : v;
        v = (double)(int)v;
    }
    switch (i) {
#define CF_SET(m, ty, a, l, nm, nn, d, fl, val, wr, sh) \
    case CF_##m: c->m = ty == MP_CF_NOTBOOL ? (v == 0.0) : v; break;
        MP_CONFIG_TABLE(CF_SET)
#undef CF_SET
    }
}

const float *mp_config_floats(const mp_config *c, int i, int *n) {
    (void)i;
    *n = c->n_rope_freqs;
    return c->rope_freqs;
}

mp_status mp_config_set_floats(mp_config *c, int i, const double *v, size_t n) {
    if (i < 0 || i >= CF_COUNT || mp_config_fields[i].type != MP_CF_FLOATS)
        return mp_error(MP_ERR_ARG, "config field %d is not a list", i);
    if (n > MP_ROPE_FREQS_MAX)
        return mp_error(MP_ERR_ARG, "%s: %zu values (at most %d)", mp_config_fields[i].attr, n, MP_ROPE_FREQS_MAX);
    c->n_rope_freqs = (int)n;
    for (size_t k = 0; k < n; k++) c->rope_freqs[k] = (float)v[k];
    return MP_OK;
}

const char *mp_config_kind_name(const mp_config *c, int i, int label) {
    const mp_config_field *f = &mp_config_fields[i];
    if (label && i == CF_mlp) return mp_mlp_label(c);
    return kind_name(f->names, f->n_names, (int)mp_config_get(c, i));
}

int mp_config_set_kind(mp_config *c, int i, const char *name, int label) {
    const mp_config_field *f = &mp_config_fields[i];
    if (f->type != MP_CF_KIND) return -1;
    int k = kind_parse(f->names, f->n_names, name);
    if (k < 0 && label && i == CF_mlp && name && strcmp(name, "gelu_tanh") == 0) {
        c->mlp = MP_MLP_GELU;
        c->gelu_tanh = 1;
        return MP_MLP_GELU;
    }
    if (k >= 0) mp_config_set(c, i, k);
    return k;
}

int mp_config_field_find(const char *key) {
    for (int i = 0; key && i < CF_COUNT; i++)
        if (!strcmp(key, mp_config_fields[i].attr) || !strcmp(key, mp_config_fields[i].lua)) return i;
    return -1;
}

int mp_config_window(const mp_config *c, int l) {
    if (c->sliding_window <= 0) return 0;
    if (c->sliding_window_pattern > 0 && (l + 1) % c->sliding_window_pattern == 0) return 0; /* a global layer */
    return c->sliding_window;
}

mp_config mp_config_default(void) {
    mp_config c;
    memset(&c, 0, sizeof c);   /* dims 0: the caller must set them */
#define CF_DEF(m, ty, a, l, nm, nn, d, fl, val, wr, sh) c.m = d;
    MP_CONFIG_TABLE(CF_DEF)
#undef CF_DEF
    return c;
}

/* ---- the parameter tensors: one table ----
 * X(id, member, name, rows, cols, present): one layer's shape [rows, cols]
 * (cols 0: 1-D); per-layer tensors have "%d" in their name (DESIGN.md
 * checkpoint names); absent tensors have size 0, so older models keep their
 * layout. Order = mp_params order = the layout in memory. Expressions of
 * D, V, M, HD, KD, H, ctx, has_mlp, ln, c; QN, KN: the q/k norm weights'
 * widths (Dh for qk_norm head, HD / KD for full); pre: the block has ln1 / ln2
 * (not no_pre_norms); RV, Dh: Shaw's relative values, R + 1 rows (rel_values R)
 * of d_head. */
#define MP_PARAM_TABLE(X)                                                                         \
    X(EMBED, embed, "embed", V, D, 1)                                                             \
    X(LN1, ln1_w, "blocks.%d.ln1.weight", D, 0, pre)                                              \
    X(LN1B, ln1_b, "blocks.%d.ln1.bias", D, 0, pre && ln)                                         \
    X(WQ, wq, "blocks.%d.attn.wq", HD, D, 1)                                                      \
    X(WK, wk, "blocks.%d.attn.wk", KD, D, 1)                                                      \
    X(WV, wv, "blocks.%d.attn.wv", KD, D, 1)                                                      \
    X(WO, wo, "blocks.%d.attn.wo", D, HD, 1)                                                      \
    X(LN2, ln2_w, "blocks.%d.ln2.weight", D, 0, pre && has_mlp)                                   \
    X(LN2B, ln2_b, "blocks.%d.ln2.bias", D, 0, pre && has_mlp && ln)                              \
    X(W1, w1, "blocks.%d.mlp.w1", M, D, has_mlp)                                                  \
    X(W3, w3, "blocks.%d.mlp.w3", M, D, c->mlp == MP_MLP_SWIGLU) /* GELU: w1 in, w2 out */       \
    X(W2, w2, "blocks.%d.mlp.w2", D, M, has_mlp)                                                  \
    X(LNF, lnf_w, "ln_final.weight", D, 0, 1)                                                     \
    X(LNFB, lnf_b, "ln_final.bias", D, 0, ln)                                                     \
    X(UNEMBED, unembed, "unembed", V, D, !c->tied)                                                \
    X(POS, pos_embed, "pos_embed", ctx, D, c->pos == MP_POS_LEARNED)                              \
    X(BQ, bq, "blocks.%d.attn.bq", HD, 0, c->qkv_bias)                                            \
    X(BK, bk, "blocks.%d.attn.bk", KD, 0, c->qkv_bias)                                            \
    X(BV, bv, "blocks.%d.attn.bv", KD, 0, c->qkv_bias)                                            \
    X(BO, bo, "blocks.%d.attn.bo", D, 0, c->linear_bias)                                          \
    X(B1, b1, "blocks.%d.mlp.b1", M, 0, c->linear_bias && has_mlp)                                \
    X(B3, b3, "blocks.%d.mlp.b3", M, 0, c->linear_bias && c->mlp == MP_MLP_SWIGLU)                \
    X(B2, b2, "blocks.%d.mlp.b2", D, 0, c->linear_bias && has_mlp)                                \
    X(SSMAX, ssmax_s, "blocks.%d.attn.ssmax_s", H, 0, c->attn == MP_ATTN_SSMAX)                   \
    X(ASD, as_delta, "blocks.%d.attn.as_delta", H, 0, c->attn == MP_ATTN_ASENTMAX)                \
    X(ASB, as_beta, "blocks.%d.attn.as_beta", H, 0, c->attn == MP_ATTN_ASENTMAX)                  \
    X(ASG, as_gamma, "blocks.%d.attn.as_gamma", H, 0, c->attn == MP_ATTN_ASENTMAX)                \
    X(QNORM, q_norm, "blocks.%d.attn.q_norm.weight", QN, 0, c->qk_norm != MP_QK_NORM_NONE)        \
    X(KNORM, k_norm, "blocks.%d.attn.k_norm.weight", KN, 0, c->qk_norm != MP_QK_NORM_NONE)        \
    X(LN1P, ln1p_w, "blocks.%d.ln1_post.weight", D, 0, c->post_norms)                             \
    X(LN2P, ln2p_w, "blocks.%d.ln2_post.weight", D, 0, c->post_norms && has_mlp)                  \
    X(RELV, rel_v, "blocks.%d.attn.rel_v", RV, Dh, c->rel_values > 0)

enum {
#define P_ID(id, f, name, r, k, present) P_##id,
    MP_PARAM_TABLE(P_ID)
#undef P_ID
    P_COUNT
};
_Static_assert(P_COUNT == MP_PARAM_MAX, "MP_PARAM_MAX must count the rows of MP_PARAM_TABLE");

static const char *const param_names[P_COUNT] = {
#define P_NAME(id, f, name, r, k, present) name,
    MP_PARAM_TABLE(P_NAME)
#undef P_NAME
};

/* The config's dimensions under the names the table uses. */
#define PARAM_DIMS(c)                                                                                \
    int64_t D = (c)->d_model, V = (c)->vocab, H = (c)->n_head, ctx = (c)->ctx;                       \
    int has_mlp = (c)->mlp != MP_MLP_NONE, ln = (c)->norm == MP_NORM_LAYER, pre = !(c)->no_pre_norms;  \
    int64_t M = has_mlp ? (c)->d_mlp : 0, HD = (int64_t)(c)->n_head * (c)->d_head,                   \
            KD = (int64_t)(c)->n_kv_head * (c)->d_head;                                              \
    int64_t QN = (c)->qk_norm == MP_QK_NORM_FULL ? HD : (c)->d_head,                                 \
            KN = (c)->qk_norm == MP_QK_NORM_FULL ? KD : (c)->d_head;                                 \
    int64_t RV = (int64_t)(c)->rel_values + 1, Dh = (c)->d_head;                                     \
    (void)D; (void)V; (void)H; (void)ctx; (void)M; (void)HD; (void)KD; (void)has_mlp; (void)ln;      \
    (void)QN; (void)KN; (void)pre; (void)RV; (void)Dh

/* One layer's shape of each tensor (present or not). */
static void param_shapes(const mp_config *c, int64_t s[P_COUNT][2]) {
    PARAM_DIMS(c);
#define P_SHAPE(id, f, name, r, k, present) s[P_##id][0] = (r); s[P_##id][1] = (k);
    MP_PARAM_TABLE(P_SHAPE)
#undef P_SHAPE
}

/* Sizes (in floats) of the mp_params fields, in struct order: layers x rows x
 * cols of present tensors, 0 for absent ones. Returns -1 on overflow (or a
 * negative dimension). Assumes the fields are positive (checked by the caller). */
static int param_sizes(const mp_config *c, size_t n[P_COUNT]) {
    int64_t s[P_COUNT][2];
    int present[P_COUNT];
    PARAM_DIMS(c);
#define P_PRESENT(id, f, name, r, k, pr) present[P_##id] = (pr) != 0;
    MP_PARAM_TABLE(P_PRESENT)
#undef P_PRESENT
    param_shapes(c, s);
    for (int i = 0; i < P_COUNT; i++) {
        size_t x = 0;
        int64_t layers = strstr(param_names[i], "%d") ? c->n_layer : 1, cols = s[i][1] ? s[i][1] : 1;
        if (layers < 0 || s[i][0] < 0 || cols < 0) return -1;
        if (present[i] && (mp_mul_size((size_t)layers, (size_t)s[i][0], &x) || mp_mul_size(x, (size_t)cols, &x)))
            return -1;
        n[i] = present[i] ? x : 0;
    }
    return 0;
}

static float **param_field(mp_params *p, int i) {
    float **f[P_COUNT] = {
#define P_FIELD(id, f, name, r, k, present) &p->f,
        MP_PARAM_TABLE(P_FIELD)
#undef P_FIELD
    };
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
    int64_t shapes[P_COUNT][2];
    size_t n[P_COUNT];
    int k = 0;
    if (param_sizes(c, n)) return 0;
    param_shapes(c, shapes);
    mp_params tmp = *p;
    for (int i = 0; i < P_COUNT; i++) {
        if (!n[i]) continue;
        mp_param_desc *d = &out[k++];
        d->name = param_names[i];
        d->p = *param_field(&tmp, i);
        d->n = n[i];
        d->per_layer = strstr(param_names[i], "%d") != NULL;
        d->ndim = shapes[i][1] ? 2 : 1;
        d->shape[0] = shapes[i][0];
        d->shape[1] = shapes[i][1];
        d->decay = d->ndim == 2 && i != P_RELV; /* rel_v: an embedding table (one row per distance), no decay */
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

void mp_config_derive(mp_config *c, int kv_given, int dh_given, int mlp_given) {
    if (!kv_given) c->n_kv_head = c->n_head;
    if (!dh_given) c->d_head = c->n_head > 0 ? c->d_model / c->n_head : 0;
    if (!mlp_given) c->d_mlp = c->mlp == MP_MLP_NONE ? 0 : 4 * c->d_model;
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
    /* every kind names one of its values, every flag is 0 or 1 (from the table) */
#define CF_CHECK(m, ty, a, l, nm, nn, d, fl, val, wr, sh)                                                      \
    if (ty == MP_CF_KIND && ((int)c->m < 0 || (int)c->m >= nn))                                                \
        return mp_error(MP_ERR_FORMAT, "%s: unknown %s kind (%d)", what, a, (int)c->m);                        \
    if ((ty == MP_CF_BOOL || ty == MP_CF_NOTBOOL) && (int)c->m != 0 && (int)c->m != 1)                         \
        return mp_error(MP_ERR_FORMAT, "%s: %s (%d) must be 0 or 1", what, #m, (int)c->m);
    MP_CONFIG_TABLE(CF_CHECK)
#undef CF_CHECK
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
    if (c->rope_scaling != MP_ROPE_SCALING_NONE) {
        if (c->pos != MP_POS_ROPE && c->pos != MP_POS_HALF_ROPE)
            return mp_error(MP_ERR_FORMAT, "%s: RoPE scaling %s applies to pos rope and half_rope only (pos %s)", what,
                            mp_rope_scaling_name(c->rope_scaling), mp_pos_name(c->pos));
        if (!(c->rope_factor > 0.0f) || !isfinite(c->rope_factor))
            return mp_error(MP_ERR_FORMAT, "%s: RoPE scaling factor (%g) must be positive and finite", what,
                            (double)c->rope_factor);
    } else {
        /* fields of RoPE scaling without scaling: refused unless they hold the
         * values in force (0 or what m.config shows), since files would drop them */
        if (c->rope_factor != 0.0f && c->rope_factor != 1.0f)
            return mp_error(MP_ERR_FORMAT, "%s: rope_factor (%g) applies to RoPE scaling only (rope_scaling none)", what,
                            (double)c->rope_factor);
        if (c->rope_orig_ctx != 0 && c->rope_orig_ctx != c->ctx)
            return mp_error(MP_ERR_FORMAT, "%s: rope_orig_ctx (%d) applies to RoPE scaling only (rope_scaling none)",
                            what, c->rope_orig_ctx);
        if (c->yarn_beta_fast != 0.0f && c->yarn_beta_fast != 32.0f)
            return mp_error(MP_ERR_FORMAT, "%s: yarn_beta_fast (%g) applies to RoPE scaling only (rope_scaling none)",
                            what, (double)c->yarn_beta_fast);
        if (c->yarn_beta_slow != 0.0f && c->yarn_beta_slow != 1.0f)
            return mp_error(MP_ERR_FORMAT, "%s: yarn_beta_slow (%g) applies to RoPE scaling only (rope_scaling none)",
                            what, (double)c->yarn_beta_slow);
    }
    if (c->parallel_attn && c->mlp == MP_MLP_NONE)
        return mp_error(MP_ERR_FORMAT, "%s: parallel_attn (attention and MLP reading one residual) needs an MLP "
                        "(mlp none)", what);
    if (c->gelu_tanh && c->mlp != MP_MLP_GELU && c->mlp != MP_MLP_SWIGLU)
        return mp_error(MP_ERR_FORMAT, "%s: gelu_tanh applies to mlp gelu and swiglu (GeGLU) only (mlp %s)", what,
                        mp_mlp_name(c->mlp));
    if ((c->norm_offset || c->post_norms) && c->norm != MP_NORM_RMS)
        return mp_error(MP_ERR_FORMAT, "%s: %s applies to norm rms only (norm %s)", what,
                        c->norm_offset ? "norm_offset" : "post_norms", mp_norm_name(c->norm));
    if (c->no_pre_norms && !c->post_norms)
        return mp_error(MP_ERR_FORMAT, "%s: pre_norms = false (a block without ln1 / ln2, OLMo 2) needs post_norms "
                        "(the norms of the attention and MLP outputs): a block with no norm at all is not supported",
                        what);
    if (c->no_pre_norms && c->parallel_attn)
        return mp_error(MP_ERR_FORMAT, "%s: pre_norms = false (OLMo 2's block) is not supported with parallel_attn",
                        what);
    if (!(c->attn_softcap >= 0.0f) || !isfinite(c->attn_softcap) || !(c->final_softcap >= 0.0f) ||
        !isfinite(c->final_softcap))
        return mp_error(MP_ERR_FORMAT, "%s: attn_softcap (%g) and final_softcap (%g) must be non-negative and finite "
                        "(0: off)", what, (double)c->attn_softcap, (double)c->final_softcap);
    if (c->attn_softcap > 0.0f && c->attn != MP_ATTN_SOFTMAX)
        return mp_error(MP_ERR_FORMAT, "%s: attn_softcap applies to softmax attention only (attn %s)", what,
                        mp_attn_name(c->attn));
    if (!(c->query_pre_attn_scalar >= 0.0f) || !isfinite(c->query_pre_attn_scalar))
        return mp_error(MP_ERR_FORMAT, "%s: query_pre_attn_scalar (%g) must be non-negative and finite (0: d_head)",
                        what, (double)c->query_pre_attn_scalar);
    if (!(c->rope_local_theta >= 0.0f) || !isfinite(c->rope_local_theta))
        return mp_error(MP_ERR_FORMAT, "%s: rope_local_theta (%g) must be non-negative and finite (0: off)", what,
                        (double)c->rope_local_theta);
    if (c->rope_local_theta > 0.0f && (c->pos != MP_POS_ROPE || c->sliding_window == 0 ||
                                       c->rope_scaling == MP_ROPE_SCALING_YARN))
        return mp_error(MP_ERR_FORMAT, "%s: rope_local_theta (the windowed layers' RoPE base) needs pos rope (pos %s), "
                        "a sliding_window (%d) and rope_scaling none, pi or ntk (%s)", what, mp_pos_name(c->pos),
                        c->sliding_window, mp_rope_scaling_names[c->rope_scaling]);
    if (c->pos_no_temp && c->pos != MP_POS_ROPE_ID)
        return mp_error(MP_ERR_FORMAT, "%s: pos_temp = false applies to pos rope_id only (pos %s)", what,
                        mp_pos_name(c->pos));
    if (c->rope_orig_ctx < 0 || c->rope_orig_ctx > MP_MAX_CTX)
        return mp_error(MP_ERR_FORMAT, "%s: rope_orig_ctx (%d) must be in 0..%d", what, c->rope_orig_ctx, MP_MAX_CTX);
    if (!(c->yarn_beta_fast >= 0.0f) || !isfinite(c->yarn_beta_fast) || !(c->yarn_beta_slow >= 0.0f) ||
        !isfinite(c->yarn_beta_slow) ||
        (c->yarn_beta_fast > 0.0f ? c->yarn_beta_fast : 32.0f) <= (c->yarn_beta_slow > 0.0f ? c->yarn_beta_slow : 1.0f))
        return mp_error(MP_ERR_FORMAT, "%s: YaRN beta_fast (%g) must exceed beta_slow (%g), both >= 0", what,
                        (double)c->yarn_beta_fast, (double)c->yarn_beta_slow);
    if (c->attn == MP_ATTN_ENTMAX || c->attn == MP_ATTN_ASENTMAX) {
        if (c->attn_alpha != 0.0f && !(c->attn_alpha > 1.0f && c->attn_alpha <= 8.0f))
            return mp_error(MP_ERR_FORMAT, "%s: attention alpha (%g) must be in (1, 8] (0: 1.5)", what,
                            (double)c->attn_alpha);
    } else if (c->attn_alpha != 0.0f && !(c->attn == MP_ATTN_ENTMAX15 && c->attn_alpha == 1.5f)) {
        return mp_error(MP_ERR_FORMAT, "%s: attention alpha (%g) applies to attn entmax and asentmax only (attn %s)",
                        what, (double)c->attn_alpha, mp_attn_name(c->attn));
    }
    if (c->rel_values < 0 || c->rel_values > MP_REL_VALUES_MAX)
        return mp_error(MP_ERR_FORMAT, "%s: rel_values (%d) must be in 0..%d (0: off; R: Shaw relative values for "
                        "distances 0..R-1 and one shared by every distance >= R)", what, c->rel_values,
                        MP_REL_VALUES_MAX);
    if (c->sliding_window < 0)
        return mp_error(MP_ERR_FORMAT, "%s: sliding_window (%d) must be >= 0 (0: no window)", what, c->sliding_window);
    if (c->sliding_window_pattern < 0)
        return mp_error(MP_ERR_FORMAT, "%s: sliding_window_pattern (%d) must be >= 0 (0: every layer windowed)", what,
                        c->sliding_window_pattern);
    if (c->sliding_window_pattern != 0 && c->sliding_window == 0)
        return mp_error(MP_ERR_FORMAT, "%s: sliding_window_pattern (%d) applies to a sliding_window only "
                        "(sliding_window 0)", what, c->sliding_window_pattern);
    if (c->sliding_window != 0 && mp_attn_has_factor(c->attn))
        return mp_error(MP_ERR_FORMAT, "%s: sliding_window (%d) is not supported with attn = %s (its length factor "
                        "counts the keys a query sees); use softmax, entmax15 or entmax", what, c->sliding_window,
                        mp_attn_name(c->attn));
    if (!(c->norm_eps >= 0.0f) || !isfinite(c->norm_eps))
        return mp_error(MP_ERR_FORMAT, "%s: norm_eps (%g) must be non-negative and finite",
                        what, (double)c->norm_eps);
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

/* The q/k norm weights start at 1 (the identity scale), as the other norms' in a
 * fresh model; loaders overwrite them. */
static void qk_norm_init(const mp_config *c, mp_params *p) {
    if (c->qk_norm == MP_QK_NORM_NONE || !p->q_norm) return;
    const size_t L = (size_t)c->n_layer, full = c->qk_norm == MP_QK_NORM_FULL;
    const size_t nq = L * (size_t)c->d_head * (full ? (size_t)c->n_head : 1);
    const size_t nk = L * (size_t)c->d_head * (full ? (size_t)c->n_kv_head : 1);
    for (size_t i = 0; i < nq; i++) p->q_norm[i] = 1.0f;
    for (size_t i = 0; i < nk; i++) p->k_norm[i] = 1.0f;
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
    qk_norm_init(cfg, &m->p);
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
    qk_norm_init(cfg, &m->p);
    *out = m;
    return MP_OK;
}

void mp_model_free(mp_model *m) {
    if (!m) return;
    if (m->dev && m->dev_ops) m->dev_ops->release(m); /* a backend's device copy (backends/cuda) */
    if (m->map) munmap(m->map, m->map_len);
    mp_qparams_free(m->q);
    mp_splice_free(m->splice);
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
    m->mem_gen++;
    mp_model_free(fresh);
    return MP_OK;
}
