/* ragged.c — ragged batches (model.h, "attention mask"): the checks of an
 * attention mask [B, T] (1 real token, 0 pad), the per-row position ids it
 * implies (HF's position_ids = cumsum(mask) - 1: each row's first real token
 * is position 0, so left padding shifts positions and right padding keeps
 * them), the per-row positional tables gathered from the per-position ones,
 * the masking of a block of attention scores, the loss of a padded batch,
 * and the padding of token rows of different lengths into such a batch.
 * model.c calls these only when a mask is given, so its unmasked path is
 * unchanged. */
#include "model.h"
#include "ops.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mp_status mp_mask_check(const mp_config *c, const int *mask, int B, int T, int cache, int training) {
    if (cache)
        return mp_error(MP_ERR_ARG, "forward: an attention mask cannot be used with a KV cache (incremental "
                        "decoding); run the padded batch in one call");
    if (training)
        return mp_error(MP_ERR_ARG, "forward: training mode (an activation store) takes no attention mask");
    if (c->attn == MP_ATTN_SSMAX || c->attn == MP_ATTN_ASENTMAX)
        return mp_error(MP_ERR_ARG, "forward: an attention mask is not supported with attn = %s (its length "
                        "factor counts every key a query sees, pads included); use softmax, entmax15 or entmax",
                        c->attn == MP_ATTN_SSMAX ? "ssmax" : "asentmax");
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (mask[i] != 0 && mask[i] != 1)
            return mp_error(MP_ERR_ARG, "attention_mask[%zu][%zu] = %d: expected 1 (a real token) or 0 (a pad)",
                            i / (size_t)T + 1, i % (size_t)T + 1, mask[i]);
    return MP_OK;
}

void mp_mask_positions(const int *mask, int B, int T, int *pos) {
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)b * T + t;
            n += mask[i];
            pos[i] = mask[i] ? n - 1 : 0;
        }
    }
}

void mp_mask_gather_tables(const float *cos_t, const float *sin_t, const float *q_scale, int half, const int *pos,
                           size_t N, float *cos_g, float *sin_g, float *q_scale_g) {
    for (size_t i = 0; i < N; i++) {
        memcpy(cos_g + i * half, cos_t + (size_t)pos[i] * half, (size_t)half * sizeof(float));
        memcpy(sin_g + i * half, sin_t + (size_t)pos[i] * half, (size_t)half * sizeof(float));
        if (q_scale) q_scale_g[i] = q_scale[pos[i]];
    }
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
    /* TransformerLens's rule: a position counts when it and the next one are
     * real tokens (its target, the next token, is then no pad) */
    for (size_t n = 0; n < N; n++) {
        const int t = (int)(n % (size_t)T);
        tgt[n] = mask && (!mask[n] || (t + 1 < T && !mask[n + 1])) ? -1 : targets[n];
    }
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
