/* weights_process.c — TransformerLens's weight processing on an mp_model
 * (fold_ln, center_writing_weights, center_unembed, fold_value_biases; see
 * weights_process.h for what each does and why it is exact). Sums are taken
 * in double; every check is made before the first parameter changes. */
#include "weights_process.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mp_weights_step_name(mp_wp_step s) {
    switch (s) {
    case MP_WP_FOLD_LN: return "fold_ln";
    case MP_WP_CENTER_WRITING: return "center_writing_weights";
    case MP_WP_CENTER_UNEMBED: return "center_unembed";
    case MP_WP_FOLD_VALUE_BIASES: return "fold_value_biases";
    }
    return "?";
}

int mp_weights_step_applies(const mp_model *m, mp_wp_step s, char *why, size_t n) {
    const mp_config *c = &m->cfg;
    if (why && n) why[0] = '\0';
    if (mp_model_is_quantized(m)) {
        char t[64];
        mp_model_weight_types(m, t, sizeof t);
        if (why) snprintf(why, n, "%s keeps quantized weights (%s): call m:dequantize() first",
                          m->source[0] ? m->source : "the model", t);
        return 0;
    }
    if (s == MP_WP_CENTER_WRITING && c->norm != MP_NORM_LAYER) {
        if (why) snprintf(why, n, "the model uses RMSNorm (norm = \"%s\"), which does not remove the mean of the "
                                  "residual stream, so centering would change the outputs (TransformerLens skips it too)",
                          mp_norm_name(c->norm));
        return 0;
    }
    if (s == MP_WP_CENTER_UNEMBED && c->final_softcap > 0.0f) {
        if (why) snprintf(why, n, "the model soft-caps its logits (final_softcap = %g): cap tanh(logits / cap) is not "
                                  "shift-invariant, so centering W_U would change the outputs",
                          (double)c->final_softcap);
        return 0;
    }
    if (s == MP_WP_FOLD_VALUE_BIASES) {
        if (!m->p.bv) {
            if (why) snprintf(why, n, "the model has no value biases (qkv_bias = false): nothing to fold");
            return 0;
        }
        if (!m->p.bo) {
            if (why) snprintf(why, n, "the model has value biases but no attention-output bias b_O to fold them into "
                                      "(linear_bias = false, as Qwen2): b_V stays");
            return 0;
        }
    }
    return 1;
}

/* ---- fold_ln ---- */

/* One norm (weight w [D], bias b [D] or NULL) and the up to three matrices
 * W [OUT, D] it feeds, with their biases (all present or all NULL). */
typedef struct {
    float *w, *b;
    float *W[3], *c[3];
    int out[3], n;
    const char *name; /* for messages */
    int layer;
} norm_fold;

/* 1 when b can go into the consumers' biases; else it must become b / w. */
static int into_biases(const norm_fold *f) { return f->n > 0 && f->c[0] != NULL; }

static mp_status fold_check(const norm_fold *f, int D) {
    if (!f->b || into_biases(f)) return MP_OK;
    for (int d = 0; d < D; d++)
        if (f->w[d] == 0.0f && f->b[d] != 0.0f) {
            char nm[64];
            snprintf(nm, sizeof nm, f->name, f->layer);
            return mp_error(MP_ERR_ARG, "process_weights: fold_ln: %s.weight[%d] is 0 where its bias is not, and the "
                            "matrices it feeds have no bias to take it: it cannot be folded exactly", nm, d);
        }
    return MP_OK;
}

static void fold_apply(const norm_fold *f, int D) {
    for (int k = 0; k < f->n; k++) {
        float *W = f->W[k];
        for (int o = 0; o < f->out[k]; o++) {
            float *row = W + (size_t)o * D;
            if (f->b && into_biases(f)) {
                double s = f->c[k][o];
                for (int d = 0; d < D; d++) s += (double)row[d] * f->b[d];
                f->c[k][o] = (float)s;
            }
            for (int d = 0; d < D; d++) row[d] *= f->w[d];
        }
    }
    for (int d = 0; d < D; d++) {
        if (f->b) f->b[d] = into_biases(f) ? 0.0f : f->w[d] != 0.0f ? f->b[d] / f->w[d] : 0.0f;
        f->w[d] = 1.0f;
    }
}

/* The norms of the model in order (ln1, ln2 of every layer, ln_final): at
 * most 2 L + 1. A block without pre-norms (no_pre_norms, OLMo 2) has none to
 * fold: its post-norms scale a branch's output after the normalization, which
 * no matrix can absorb (Gemma 2's stay too), so only ln_final folds. */
static int fold_list(mp_model *m, norm_fold *out) {
    const mp_config *c = &m->cfg;
    const int HD = c->n_head * c->d_head, KD = c->n_kv_head * c->d_head, M = c->d_mlp;
    int n = 0;
    for (int l = 0; l < c->n_layer && !c->no_pre_norms; l++) { /* OLMo 2: no ln1 / ln2 to fold */
        mp_layer_params w = mp_params_layer(c, &m->p, l);
        out[n++] = (norm_fold){w.ln1_w, w.ln1_b, {w.wq, w.wk, w.wv}, {w.bq, w.bk, w.bv}, {HD, KD, KD}, 3,
                               "blocks.%d.ln1", l};
        if (w.ln2_w)
            out[n++] = (norm_fold){w.ln2_w, w.ln2_b, {w.w1, w.w3, NULL}, {w.b1, w.b3, NULL}, {M, M, 0},
                                   w.w3 ? 2 : 1, "blocks.%d.ln2", l};
    }
    out[n++] = (norm_fold){m->p.lnf_w, m->p.lnf_b, {m->p.unembed, NULL, NULL}, {NULL, NULL, NULL}, {c->vocab, 0, 0}, 1,
                           "ln_final", -1};
    return n;
}

/* ---- centering ---- */

/* Subtracts from each of the `rows` rows of x [rows, cols] its mean. */
static void center_rows(float *x, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        float *p = x + r * cols;
        double s = 0.0;
        for (size_t j = 0; j < cols; j++) s += p[j];
        const float mean = (float)(s / (double)cols);
        for (size_t j = 0; j < cols; j++) p[j] -= mean;
    }
}

/* Subtracts from each column of x [rows, cols] its mean over the rows (s:
 * cols doubles of scratch). */
static void center_cols(float *x, size_t rows, size_t cols, double *s) {
    memset(s, 0, cols * sizeof *s);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) s[j] += x[r * cols + j];
    for (size_t j = 0; j < cols; j++) s[j] /= (double)rows;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) x[r * cols + j] -= (float)s[j];
}

static void center_writing(mp_model *m, double *scratch) {
    const mp_config *c = &m->cfg;
    const size_t D = (size_t)c->d_model, HD = (size_t)c->n_head * c->d_head;
    center_rows(m->p.embed, (size_t)c->vocab, D);
    if (m->p.pos_embed) center_rows(m->p.pos_embed, (size_t)c->ctx, D);
    for (int l = 0; l < c->n_layer; l++) {
        mp_layer_params w = mp_params_layer(c, &m->p, l);
        center_cols(w.wo, D, HD, scratch);
        if (w.w2) center_cols(w.w2, D, (size_t)c->d_mlp, scratch);
        if (w.bo) center_rows(w.bo, 1, D);
        if (w.b2) center_rows(w.b2, 1, D);
    }
}

/* ---- fold_value_biases ---- */

static void fold_value_biases(mp_model *m) {
    const mp_config *c = &m->cfg;
    const int D = c->d_model, H = c->n_head, Dh = c->d_head, HD = H * Dh, group = H / c->n_kv_head;
    for (int l = 0; l < c->n_layer; l++) {
        mp_layer_params w = mp_params_layer(c, &m->p, l);
        for (int d = 0; d < D; d++) {
            double s = w.bo[d];
            const float *row = w.wo + (size_t)d * HD;
            for (int h = 0; h < H; h++)
                for (int e = 0; e < Dh; e++) s += (double)row[h * Dh + e] * w.bv[(h / group) * Dh + e];
            w.bo[d] = (float)s;
        }
        memset(w.bv, 0, (size_t)c->n_kv_head * Dh * sizeof(float));
    }
}

/* ---- untying ---- */

/* Gives a tied model its own unembed (a copy of embed) and cfg.tied = 0. */
static mp_status untie(mp_model *m) {
    mp_config cfg = m->cfg;
    cfg.tied = 0;
    mp_model *fresh = NULL;
    mp_status st = mp_model_new(&fresh, &cfg);
    if (st) return mp_error_prefix(st, "process_weights: untying the embedding");
    mp_param_desc src[MP_PARAM_MAX], dst[MP_PARAM_MAX];
    int n = mp_params_describe(&m->cfg, &m->p, src), nd = mp_params_describe(&cfg, &fresh->p, dst);
    for (int i = 0; i < n; i++) /* the layouts differ only by unembed, which src lacks */
        for (int j = 0; j < nd; j++)
            if (strcmp(dst[j].name, src[i].name) == 0) {
                memcpy(dst[j].p, src[i].p, src[i].n * sizeof(float));
                break;
            }
    memcpy(fresh->p.unembed, m->p.embed, (size_t)cfg.vocab * cfg.d_model * sizeof(float));
    free(m->owned);
    m->owned = fresh->owned;
    m->p = fresh->p;
    m->cfg = cfg;
    fresh->owned = NULL;
    m->mem_gen++;
    mp_model_free(fresh);
    return MP_OK;
}

const mp_wp_step mp_wp_order[MP_WP_N_STEPS] = {MP_WP_FOLD_LN, MP_WP_CENTER_WRITING, MP_WP_CENTER_UNEMBED,
                                                MP_WP_FOLD_VALUE_BIASES};

unsigned mp_weights_process_plan(const mp_model *m, const int opt[MP_WP_N_STEPS], char why[MP_WP_N_STEPS][512]) {
    unsigned mask = 0;
    for (int i = 0; i < MP_WP_N_STEPS; i++) {
        why[i][0] = '\0';
        if (opt[i] == 0) continue;
        if (opt[i] < 0 && !mp_weights_step_applies(m, mp_wp_order[i], why[i], sizeof why[i])) {
            if (!why[i][0])
                snprintf(why[i], sizeof why[i], "%s does not apply to this model", mp_weights_step_name(mp_wp_order[i]));
            continue;
        }
        mask |= mp_wp_order[i];
    }
    return mask;
}

mp_status mp_weights_process(mp_model *m, unsigned steps) {
    static const mp_wp_step order[] = {MP_WP_FOLD_LN, MP_WP_CENTER_WRITING, MP_WP_CENTER_UNEMBED,
                                       MP_WP_FOLD_VALUE_BIASES};
    char why[512];
    if (!steps) return MP_OK;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if ((steps & order[i]) && !mp_weights_step_applies(m, order[i], why, sizeof why))
            return mp_error(MP_ERR_ARG, "process_weights: %s: %s", mp_weights_step_name(order[i]), why);
    const mp_config *c = &m->cfg;
    const int D = c->d_model;
    norm_fold *folds = NULL;
    /* scratch of the column means: the widest matrix writing to the residual, or the unembedding */
    size_t wide = (size_t)c->n_head * c->d_head;
    if ((size_t)c->d_mlp > wide) wide = (size_t)c->d_mlp;
    if ((size_t)D > wide) wide = (size_t)D;
    double *scratch = mp_malloc(wide * sizeof *scratch, "process_weights scratch");
    if (!scratch) return MP_ERR_NOMEM;
    mp_status st = MP_OK;
    if (steps & MP_WP_FOLD_LN) {
        if (!(folds = mp_malloc(((size_t)2 * c->n_layer + 1) * sizeof *folds, "process_weights"))) {
            st = MP_ERR_NOMEM;
            goto done;
        }
        int n = fold_list(m, folds);
        for (int i = 0; i < n; i++)
            if ((st = fold_check(&folds[i], D))) goto done;
    }
    /* the changes: first the memory they need (owned, untied), then the steps */
    if ((st = mp_model_make_owned(m))) goto done;
    if (c->tied && (steps & (MP_WP_FOLD_LN | MP_WP_CENTER_WRITING | MP_WP_CENTER_UNEMBED)) && (st = untie(m)))
        goto done;
    if (steps & MP_WP_FOLD_LN) {
        int n = fold_list(m, folds); /* again: untying moved the parameters */
        for (int i = 0; i < n; i++) fold_apply(&folds[i], D);
    }
    if (steps & MP_WP_CENTER_WRITING) center_writing(m, scratch);
    if (steps & MP_WP_CENTER_UNEMBED) center_cols(m->p.unembed, (size_t)c->vocab, (size_t)D, scratch);
    if (steps & MP_WP_FOLD_VALUE_BIASES) fold_value_biases(m);
done:
    free(folds);
    free(scratch);
    return st;
}
