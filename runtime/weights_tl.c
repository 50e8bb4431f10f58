/* weights_tl.c — TransformerLens's weight layout (weights_tl.h): one table of
 * TL names saying which parameter each reads, how its shape is made from the
 * config's dims, what the config must have for it to exist; and the copies
 * between the model's [out, in] layout and TL's shapes. */
#include "weights_tl.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The dims a table entry's shape is made of. */
enum { DIM_V, DIM_D, DIM_M, DIM_CTX };

/* Requirements and properties of a TL name, checked in this order. */
enum {
    NO_SUCH = 1,      /* b_U: there is none */
    NEED_POS = 2,     /* learned positions */
    NEED_MLP = 4,     /* an MLP */
    NEED_GATE = 8,    /* a SwiGLU MLP */
    NEED_QKV_B = 16,  /* qkv_bias */
    NEED_BO = 32,     /* linear_bias: the attention-output bias */
    NEED_B2 = 64,     /* linear_bias: the MLP's biases */
    KV = 128,         /* a key/value weight: n_kv_head source heads */
    UNDER = 256       /* "_W_K" etc.: the n_kv_head heads as stored, not repeated */
};

#define NONE ((size_t)-1)
#define G(f) offsetof(mp_params, f)
#define LY(f) offsetof(mp_layer_params, f)

typedef struct {
    const char *name;
    mp_tl_kind kind;
    size_t global;       /* offsetof(mp_params, f) of a global tensor, else NONE */
    size_t layer;        /* offsetof(mp_layer_params, f) of a per-layer one, else NONE */
    size_t layer_swiglu; /* the field read under SwiGLU instead (W_in, b_in: the up projection) */
    int rows, cols;      /* DIM_*: the source matrix (MP_TL_T) or the shape (MP_TL_PLAIN; cols -1: 1-D) */
    unsigned flags;
} tl_entry;

static const tl_entry table[] = {
    {"W_E", MP_TL_PLAIN, G(embed), NONE, NONE, DIM_V, DIM_D, 0},
    {"W_pos", MP_TL_PLAIN, G(pos_embed), NONE, NONE, DIM_CTX, DIM_D, NEED_POS},
    {"W_U", MP_TL_T, G(unembed), NONE, NONE, DIM_V, DIM_D, 0},
    {"b_U", MP_TL_PLAIN, NONE, NONE, NONE, DIM_V, -1, NO_SUCH},
    {"W_Q", MP_TL_HEADS_IN, NONE, LY(wq), NONE, 0, 0, 0},
    {"W_K", MP_TL_HEADS_IN, NONE, LY(wk), NONE, 0, 0, KV},
    {"W_V", MP_TL_HEADS_IN, NONE, LY(wv), NONE, 0, 0, KV},
    {"_W_K", MP_TL_HEADS_IN, NONE, LY(wk), NONE, 0, 0, KV | UNDER},
    {"_W_V", MP_TL_HEADS_IN, NONE, LY(wv), NONE, 0, 0, KV | UNDER},
    {"W_O", MP_TL_HEADS_OUT, NONE, LY(wo), NONE, 0, 0, 0},
    {"W_in", MP_TL_T, NONE, LY(w1), LY(w3), DIM_M, DIM_D, NEED_MLP},
    {"W_gate", MP_TL_T, NONE, LY(w1), NONE, DIM_M, DIM_D, NEED_MLP | NEED_GATE},
    {"W_out", MP_TL_T, NONE, LY(w2), NONE, DIM_D, DIM_M, NEED_MLP},
    {"b_Q", MP_TL_BIAS_HEADS, NONE, LY(bq), NONE, 0, 0, NEED_QKV_B},
    {"b_K", MP_TL_BIAS_HEADS, NONE, LY(bk), NONE, 0, 0, NEED_QKV_B | KV},
    {"b_V", MP_TL_BIAS_HEADS, NONE, LY(bv), NONE, 0, 0, NEED_QKV_B | KV},
    {"_b_K", MP_TL_BIAS_HEADS, NONE, LY(bk), NONE, 0, 0, NEED_QKV_B | KV | UNDER},
    {"_b_V", MP_TL_BIAS_HEADS, NONE, LY(bv), NONE, 0, 0, NEED_QKV_B | KV | UNDER},
    {"b_O", MP_TL_PLAIN, NONE, LY(bo), NONE, DIM_D, -1, NEED_BO},
    {"b_in", MP_TL_PLAIN, NONE, LY(b1), LY(b3), DIM_M, -1, NEED_MLP | NEED_B2},
    {"b_gate", MP_TL_PLAIN, NONE, LY(b1), NONE, DIM_M, -1, NEED_MLP | NEED_GATE | NEED_B2},
    {"b_out", MP_TL_PLAIN, NONE, LY(b2), NONE, DIM_D, -1, NEED_MLP | NEED_B2},
};
#define N_TABLE (sizeof table / sizeof table[0])

const char *const mp_tl_weight_names[] = {"W_E", "W_pos", "W_U", "b_U", "W_Q", "W_K", "W_V", "_W_K", "_W_V",
                                          "W_O", "W_in", "W_gate", "W_out", "b_Q", "b_K", "b_V", "_b_K",
                                          "_b_V", "b_O", "b_in", "b_gate", "b_out", NULL};

static int dim_of(const mp_config *c, int d) {
    switch (d) {
    case DIM_V: return c->vocab;
    case DIM_D: return c->d_model;
    case DIM_M: return c->mlp == MP_MLP_NONE ? 0 : c->d_mlp;
    default: return c->ctx;
    }
}

static float *field(const void *base, size_t off) { return *(float *const *)((const char *)base + off); }

mp_status mp_tl_weight_info(const mp_model *m, const char *name, mp_tl_weight *out) {
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    memset(out, 0, sizeof *out);
    const tl_entry *e = NULL;
    for (size_t i = 0; i < N_TABLE && !e; i++)
        if (strcmp(table[i].name, name) == 0) e = &table[i];
    if (!e)
        return mp_error(MP_ERR_ARG, "unknown weight \"%s\" (W_E, W_pos, W_U, W_Q, W_K, W_V, _W_K, _W_V, W_O, W_in, "
                        "W_gate, W_out, b_Q, b_K, b_V, _b_K, _b_V, b_O, b_in, b_gate, b_out)", name);
    const int swiglu = c->mlp == MP_MLP_SWIGLU;
    if (e->flags & NO_SUCH)
        return mp_error(MP_ERR_ARG, "b_U: mechprobe models have no unembedding bias (logits = ln_final(x) W_U); "
                        "after fold_ln a LayerNorm model's ln_final.bias plays its part");
    if ((e->flags & NEED_POS) && !p->pos_embed)
        return mp_error(MP_ERR_ARG, "W_pos: the model has no learned positions (pos = \"%s\")", mp_pos_name(c->pos));
    if ((e->flags & NEED_MLP) && !dim_of(c, DIM_M))
        return mp_error(MP_ERR_ARG, "%s: the model has no MLP (mlp = \"none\")", name);
    if ((e->flags & NEED_GATE) && !swiglu)
        return mp_error(MP_ERR_ARG, "%s: the model's MLP (mlp = \"%s\") has no gate (SwiGLU only)", name,
                        mp_mlp_label(c));
    if ((e->flags & NEED_QKV_B) && !p->bq)
        return mp_error(MP_ERR_ARG, "%s: the model has no query/key/value biases (qkv_bias = false)", name);
    if (((e->flags & NEED_BO) && !p->bo) || ((e->flags & NEED_B2) && !p->b2))
        return mp_error(MP_ERR_ARG, "%s: the model has no linear-layer biases (linear_bias = false)", name);

    const int D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, L = c->n_layer;
    const int kv = (e->flags & KV) != 0, under = (e->flags & UNDER) != 0;
    const int nh = kv ? K : H, TH = under ? K : H; /* source heads, heads in the TL shape */
    out->name = e->name;
    out->kind = e->kind;
    out->rep = kv && !under ? H / K : 1;
    if (e->global != NONE) {
        out->p = field(p, e->global);
    } else {
        size_t off = swiglu && e->layer_swiglu != NONE ? e->layer_swiglu : e->layer;
        const mp_layer_params w0 = mp_params_layer(c, p, 0), w1 = mp_params_layer(c, p, L > 1 ? 1 : 0);
        float *a = field(&w0, off), *b = field(&w1, off);
        out->per_layer = 1;
        out->p = a;
        out->stride = a && L > 1 ? (size_t)(b - a) : 0;
    }
    switch (e->kind) {
    case MP_TL_PLAIN:
        out->ndim = e->cols < 0 ? 1 : 2;
        out->shape[0] = dim_of(c, e->rows);
        if (e->cols >= 0) out->shape[1] = dim_of(c, e->cols);
        break;
    case MP_TL_T:
        out->rows = dim_of(c, e->rows), out->cols = dim_of(c, e->cols);
        out->ndim = 2, out->shape[0] = out->cols, out->shape[1] = out->rows;
        break;
    case MP_TL_HEADS_IN:
        out->rows = nh * Dh, out->cols = D;
        out->ndim = 3, out->shape[0] = TH, out->shape[1] = D, out->shape[2] = Dh;
        break;
    case MP_TL_HEADS_OUT:
        out->rows = D, out->cols = H * Dh;
        out->ndim = 3, out->shape[0] = H, out->shape[1] = Dh, out->shape[2] = D;
        break;
    case MP_TL_BIAS_HEADS:
        out->ndim = 2, out->shape[0] = TH, out->shape[1] = Dh;
        break;
    }
    out->numel = 1;
    for (int i = 0; i < out->ndim; i++) out->numel *= (size_t)out->shape[i];
    if (!out->p)
        return mp_error(MP_ERR_ARG, "%s: the model has quantized weights (%s): call m:dequantize() first", name,
                        m->source[0] ? m->source : "GGUF");
    return MP_OK;
}

int mp_tl_weight_shape(const mp_model *m, const mp_tl_weight *w, int layer, int64_t shape[4]) {
    int nd = 0;
    if (w->per_layer && layer < 0) shape[nd++] = m->cfg.n_layer;
    for (int i = 0; i < w->ndim; i++) shape[nd++] = w->shape[i];
    return nd;
}

/* Copies one layer between the model's layout (src) and TL's (tl): to_tl 1
 * reads the model, 0 writes it (only with rep 1: a one-to-one map). */
static void xfer(const mp_tl_weight *r, float *src, float *tl, int to_tl) {
#define MOVE(i, j) do { if (to_tl) tl[i] = src[j]; else src[j] = tl[i]; } while (0)
    switch (r->kind) {
    case MP_TL_PLAIN:
        for (size_t i = 0; i < r->numel; i++) MOVE(i, i);
        break;
    case MP_TL_T:
        for (size_t i = 0; i < (size_t)r->cols; i++)
            for (size_t j = 0; j < (size_t)r->rows; j++) MOVE(i * r->rows + j, j * r->cols + i);
        break;
    case MP_TL_HEADS_IN: { /* tl[h][d][e] = src[(h/rep) Dh + e][d] */
        const size_t TH = (size_t)r->shape[0], D = (size_t)r->shape[1], Dh = (size_t)r->shape[2];
        for (size_t h = 0; h < TH; h++)
            for (size_t d = 0; d < D; d++)
                for (size_t e = 0; e < Dh; e++) MOVE((h * D + d) * Dh + e, ((h / r->rep) * Dh + e) * D + d);
        break;
    }
    case MP_TL_HEADS_OUT: { /* tl[h][e][d] = src[d][h Dh + e] */
        const size_t H = (size_t)r->shape[0], Dh = (size_t)r->shape[1], D = (size_t)r->shape[2];
        for (size_t h = 0; h < H; h++)
            for (size_t e = 0; e < Dh; e++)
                for (size_t d = 0; d < D; d++) MOVE((h * Dh + e) * D + d, d * H * Dh + h * Dh + e);
        break;
    }
    case MP_TL_BIAS_HEADS: {
        const size_t TH = (size_t)r->shape[0], Dh = (size_t)r->shape[1];
        for (size_t h = 0; h < TH; h++)
            for (size_t e = 0; e < Dh; e++) MOVE(h * Dh + e, (h / r->rep) * Dh + e);
        break;
    }
    }
#undef MOVE
}

static mp_status layers(const mp_model *m, const mp_tl_weight *w, int layer, int *l0, int *l1) {
    if (!w->per_layer || layer < 0) {
        *l0 = 0, *l1 = w->per_layer ? m->cfg.n_layer : 1;
        return MP_OK;
    }
    if (layer >= m->cfg.n_layer)
        return mp_error(MP_ERR_ARG, "%s: layer %d is out of range (the model has %d layers)", w->name, layer,
                        m->cfg.n_layer);
    *l0 = layer, *l1 = layer + 1;
    return MP_OK;
}

mp_status mp_tl_weight_get(const mp_model *m, const mp_tl_weight *w, int layer, float *dst) {
    int l0, l1;
    mp_status st = layers(m, w, layer, &l0, &l1);
    if (st) return st;
    for (int k = l0; k < l1; k++) xfer(w, w->p + (size_t)k * w->stride, dst + (size_t)(k - l0) * w->numel, 1);
    return MP_OK;
}

mp_status mp_tl_weight_settable(const mp_model *m, const mp_tl_weight *w) {
    if (w->rep > 1)
        return mp_error(MP_ERR_ARG, "%s is repeated over the %d query heads of each key/value head (n_kv_head = %d): "
                        "write the key/value heads with \"_%s\" [n_kv_head, ...]", w->name, w->rep,
                        m->cfg.n_kv_head, w->name);
    if (mp_model_is_quantized(m))
        return mp_error(MP_ERR_ARG, "the model has quantized weights: call m:dequantize() first");
    size_t total = mp_config_n_params(&m->cfg);
    if (!m->owned || w->p < m->owned || w->p >= m->owned + total)
        return mp_error(MP_ERR_ARG, "%s is read-only: the weights are the read-only memory map of %s; "
                        MP_TL_COPY_HINT, w->name, m->source[0] ? m->source : "its file");
    return MP_OK;
}

mp_status mp_tl_weight_set(mp_model *m, const mp_tl_weight *w, int layer, const float *src) {
    int l0, l1;
    mp_status st = mp_tl_weight_settable(m, w);
    if (!st) st = layers(m, w, layer, &l0, &l1);
    if (st) return st;
    for (int k = l0; k < l1; k++)
        xfer(w, w->p + (size_t)k * w->stride, (float *)(src + (size_t)(k - l0) * w->numel), 0);
    return MP_OK;
}

/* ---- TransformerLens's state_dict names of the norm weights ---- */

/* TL's suffix (after "blocks.L.", or the whole name for ln_final) and the
 * checkpoint's, and why a model may lack it. */
enum { WHY_PRE = 1, WHY_BIAS = 2, WHY_MLP = 4, WHY_POST = 8, WHY_QK = 16 };
static const struct {
    const char *tl, *ckpt;
    unsigned why;
} norm_names[] = {
    {"ln1.w", "ln1.weight", WHY_PRE},
    {"ln1.b", "ln1.bias", WHY_PRE | WHY_BIAS},
    {"ln2.w", "ln2.weight", WHY_PRE | WHY_MLP},
    {"ln2.b", "ln2.bias", WHY_PRE | WHY_MLP | WHY_BIAS},
    {"ln1_post.w", "ln1_post.weight", WHY_POST},
    {"ln2_post.w", "ln2_post.weight", WHY_POST | WHY_MLP},
    {"attn.q_norm.w", "attn.q_norm.weight", WHY_QK},
    {"attn.k_norm.w", "attn.k_norm.weight", WHY_QK},
    {"ln_final.w", "ln_final.weight", 0},
    {"ln_final.b", "ln_final.bias", WHY_BIAS},
};

/* A parameter by its checkpoint name ("blocks.L.ln1.weight", mp_params_describe's names with the layer). */
static int find_ckpt(const mp_model *m, const char *name, mp_param_desc *out, int *layer) {
    mp_param_desc d[MP_PARAM_MAX];
    const int n = mp_params_describe(&m->cfg, &m->p, d);
    for (int i = 0; i < n; i++) {
        if (!d[i].per_layer) {
            if (strcmp(d[i].name, name) == 0) return *out = d[i], *layer = -1, 1;
            continue;
        }
        for (int l = 0; l < m->cfg.n_layer; l++) {
            char buf[96];
            snprintf(buf, sizeof buf, d[i].name, l);
            if (strcmp(buf, name) == 0) return *out = d[i], *layer = l, 1;
        }
    }
    return 0;
}

int mp_tl_norm_param(const mp_model *m, const char *tl, char *ckpt, size_t n) {
    const mp_config *c = &m->cfg;
    const char *suffix = tl;
    long layer = -1;
    if (strncmp(tl, "blocks.", 7) == 0) {
        char *end;
        layer = strtol(tl + 7, &end, 10);
        if (end == tl + 7 || *end != '.' || layer < 0) return 0;
        suffix = end + 1;
    }
    size_t k = 0, nn = sizeof norm_names / sizeof norm_names[0];
    while (k < nn && strcmp(norm_names[k].tl, suffix) != 0) k++;
    if (k == nn || (layer < 0) != (strncmp(suffix, "ln_final", 8) == 0)) return 0;
    if (layer >= c->n_layer) {
        mp_error(MP_ERR_ARG, "%s: layer %ld out of range: the model has %d layers (0..%d)", tl, layer, c->n_layer,
                 c->n_layer - 1);
        return -1;
    }
    if (layer >= 0) snprintf(ckpt, n, "blocks.%ld.%s", layer, norm_names[k].ckpt);
    else snprintf(ckpt, n, "%s", norm_names[k].ckpt);
    mp_param_desc d;
    int l;
    if (find_ckpt(m, ckpt, &d, &l)) return 1;
    unsigned why = norm_names[k].why;
    if ((why & WHY_PRE) && c->no_pre_norms)
        mp_error(MP_ERR_ARG, "%s: the model's blocks have no pre-norms (pre_norms = false, OLMo 2: its norms are "
                 "ln1_post.w / ln2_post.w)", tl);
    else if ((why & WHY_MLP) && c->mlp == MP_MLP_NONE)
        mp_error(MP_ERR_ARG, "%s: the model has no MLP (mlp = \"none\"), so no norm before or after it", tl);
    else if ((why & WHY_BIAS) && c->norm != MP_NORM_LAYER)
        mp_error(MP_ERR_ARG, "%s: the model's norms are RMSNorm (norm = \"%s\"): they have no bias", tl,
                 mp_norm_name(c->norm));
    else if (why & WHY_POST)
        mp_error(MP_ERR_ARG, "%s: the model has no post-norms (post_norms = false; Gemma 2/3 and OLMo 2 have them)",
                 tl);
    else if (why & WHY_QK)
        mp_error(MP_ERR_ARG, "%s: the model has no q/k norms (qk_norm = \"none\")", tl);
    else
        mp_error(MP_ERR_ARG, "%s: the model has no such parameter (m:params() lists them)", tl);
    return -1;
}

int mp_param_find(const mp_model *m, const char *name, mp_param_desc *out, int *layer) {
    if (find_ckpt(m, name, out, layer)) return 1;
    char ck[96];
    const int a = mp_tl_norm_param(m, name, ck, sizeof ck);
    return a <= 0 ? a : find_ckpt(m, ck, out, layer);
}
