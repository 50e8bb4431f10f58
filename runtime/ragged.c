/* ragged.c — ragged batches (model.h, "attention mask"): the checks of an
 * attention mask [B, T] (1 real token, 0 pad), the per-row position ids it
 * implies (HF's position_ids = cumsum(mask) - 1: each row's first real token
 * is position 0, so left padding shifts positions and right padding keeps
 * them), the per-row positional tables gathered from the per-position ones,
 * the masking of a block of attention scores, the loss of a padded batch,
 * and the padding of token rows of different lengths into such a batch;
 * the per-token positional tables of a padded batch (also over a KV cache:
 * a mask of every key, cached and new, HF's convention for generation), the
 * zeroing of the pattern's gradient at the keys a query does not see, and
 * the targets a padded batch's loss counts. model.c calls these only when a
 * mask is given, so its unmasked path is unchanged. */
#include "model.h"
#include "ops.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mp_status mp_mask_check(const mp_config *c, const int *mask, int B, int W) {
    if (c->attn == MP_ATTN_SSMAX || c->attn == MP_ATTN_ASENTMAX)
        return mp_error(MP_ERR_ARG, "forward: an attention mask is not supported with attn = %s (its length "
                        "factor counts every key a query sees, pads included); use softmax, entmax15 or entmax",
                        c->attn == MP_ATTN_SSMAX ? "ssmax" : "asentmax");
    for (size_t i = 0; i < (size_t)B * W; i++)
        if (mask[i] != 0 && mask[i] != 1)
            return mp_error(MP_ERR_ARG, "attention_mask[%zu][%zu] = %d: expected 1 (a real token) or 0 (a pad)",
                            i / (size_t)W + 1, i % (size_t)W + 1, mask[i]);
    return MP_OK;
}

void mp_mask_positions(const int *mask, int B, int T, int *pos) { mp_mask_positions_at(mask, B, T, 0, T, pos); }

void mp_mask_positions_at(const int *mask, int B, int W, int pos0, int T, int *pos) {
    for (int b = 0; b < B; b++) {
        const int *mr = mask + (size_t)b * W;
        int n = 0;
        for (int t = 0; t < pos0; t++) n += mr[t];
        for (int t = 0; t < T; t++) {
            n += mr[pos0 + t];
            pos[(size_t)b * T + t] = mr[pos0 + t] ? n - 1 : 0;
        }
    }
}

mp_status mp_mask_pos_tables(const mp_config *c, const int *pos, size_t N, float *tab, int *has_scale) {
    const size_t half = (size_t)(c->d_head / 2), one = mp_pos_tables_floats(c, 1);
    *has_scale = 0;
    if (!mp_pos_rotates(c)) return MP_OK;
    float *row = mp_malloc(one * sizeof(float), "a positional table row");
    if (!row) return MP_ERR_NOMEM;
    float *cos_g = tab, *sin_g = tab + half * N, *qs_g = sin_g + half * N;
    float *cl_g = qs_g + N, *sl_g = cl_g + half * N;
    const int local = mp_pos_has_local(c);
    for (size_t i = 0; i < N; i++) {
        /* mp_pos_tables computes each position's row on its own: the same
         * values as row pos[i] of a table over positions 0.. */
        *has_scale = mp_pos_tables_all(c, row, pos[i], 1);
        memcpy(cos_g + i * half, row, half * sizeof(float));
        memcpy(sin_g + i * half, row + half, half * sizeof(float));
        qs_g[i] = row[2 * half];
        if (local) {
            memcpy(cl_g + i * half, row + 2 * half + 1, half * sizeof(float));
            memcpy(sl_g + i * half, row + 3 * half + 1, half * sizeof(float));
        }
    }
    free(row);
    return MP_OK;
}

void mp_mask_scores(const int *mask_row, float *a, int rows, int q0, size_t ld) {
    for (int i = 0; i < rows; i++) {
        const int q = q0 + i;
        float *r = a + (size_t)i * ld;
        if (!mask_row[q]) { /* a pad query sees only itself */
            for (int j = 0; j < q; j++) r[j] = -INFINITY;
            continue;
        }
        for (int j = 0; j < q; j++)
            if (!mask_row[j]) r[j] = -INFINITY;
    }
}

void mp_mask_grad_pattern(const int *mask, int B, int H, int T, float *d) {
    for (int b = 0; b < B; b++) {
        const int *mr = mask + (size_t)b * T;
        for (int h = 0; h < H; h++)
            for (int q = 0; q < T; q++) {
                float *r = d + (((size_t)b * H + h) * T + q) * T;
                for (int j = 0; j < T; j++)
                    if (!mr[q] || !mr[j]) r[j] = 0.0f;
            }
    }
}

void mp_mask_targets(const int *mask, const int *targets, int B, int T, int *out) {
    const size_t N = (size_t)B * T;
    /* TransformerLens's rule: a position counts when it and the next one are
     * real tokens (its target, the next token, is then no pad) */
    for (size_t n = 0; n < N; n++) {
        const int t = (int)(n % (size_t)T);
        out[n] = mask && (!mask[n] || (t + 1 < T && !mask[n + 1])) ? -1 : targets[n];
    }
}

int mp_mask_last_real(const int *mask_row, int T) {
    for (int t = T - 1; t >= 0; t--)
        if (mask_row[t]) return t;
    return T - 1;
}

mp_status mp_model_loss_masked(const mp_model *m, const int *tokens, const int *targets, const int *mask, int B,
                               int T, const mp_hooks *hooks, float *loss) {
    mp_status st;
    if ((st = mp_targets_check(&m->cfg, targets, B, T))) return st;
    size_t N = (size_t)B * T, V = (size_t)m->cfg.vocab;
    float *logits = mp_malloc((N * V + N) * sizeof(float), "logits for the loss");
    int *tgt = mp_malloc(N * sizeof(int), "targets of the loss");
    if (!logits || !tgt) {
        free(logits);
        free(tgt);
        return MP_ERR_NOMEM;
    }
    mp_mask_targets(mask, targets, B, T, tgt);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    fp.attn_mask = mask;
    if ((st = mp_model_forward(m, tokens, B, T, &fp, logits)) == MP_OK) {
        float *losses = logits + N * V;
        int count = mp_crossentropy_forward(losses, logits, logits, tgt, (int)N, (int)V);
        double sum = 0.0;
        for (size_t n = 0; n < N; n++) sum += losses[n];
        *loss = count ? (float)(sum / count) : 0.0f;
    }
    free(logits);
    free(tgt);
    return st;
}

int mp_pad_width(const int *n, int B) {
    int T = 0;
    for (int b = 0; b < B; b++) T = n[b] > T ? n[b] : T;
    return T;
}

void mp_pad_batch(const int *ids, const int *n, int B, int T, int pad, int left, int *tokens, int *mask) {
    for (int b = 0; b < B; b++) {
        const int off = left ? T - n[b] : 0;
        int *tr = tokens + (size_t)b * T, *mr = mask + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            const int real = t >= off && t < off + n[b];
            tr[t] = real ? ids[t - off] : pad;
            mr[t] = real;
        }
        ids += n[b];
    }
}
