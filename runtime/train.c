/* train.c — the masked cross-entropy loss and its gradient through the model
 * (the backward walk is backward.c's, with weight gradients on), gradient
 * buffers, and the training step (accumulation, clipping, AdamW). See train.h. */
#include "train.h"
#include "backward.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

mp_status mp_grads_init(mp_grads *g, const mp_config *c) {
    memset(g, 0, sizeof *g);
    size_t n = mp_config_n_params(c);
    if (!n) return mp_error(MP_ERR_ARG, "gradients: invalid config");
    if (!(g->mem = mp_calloc(n, sizeof(float), "gradients"))) return MP_ERR_NOMEM;
    g->n = n;
    mp_params_layout(c, g->mem, &g->g);
    return MP_OK;
}

void mp_grads_zero(mp_grads *g) {
    if (g->mem) memset(g->mem, 0, g->n * sizeof(float));
}

void mp_grads_free(mp_grads *g) {
    free(g->mem);
    memset(g, 0, sizeof *g);
}

void mp_train_ws_free(mp_train_ws *ws) {
    mp_grads_free(&ws->grads);
    mp_acts_free(&ws->acts);
}

mp_status mp_targets_check(const mp_config *c, const int *targets, int B, int T) {
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (targets[i] < -1 || targets[i] >= c->vocab)
            return mp_error(MP_ERR_ARG, "target %d at [%zu,%zu] is neither -1 (ignored) nor a token id (0..%d)",
                            targets[i], i / (size_t)T + 1, i % (size_t)T + 1, c->vocab - 1);
    return MP_OK;
}

/* Hands every bucket to sync->ready unchanged (a rank with nothing counted
 * still takes part in the reduction). */
static mp_status sync_all(const mp_grad_sync *sync, mp_grads *g, const mp_config *c) {
    mp_status st = MP_OK;
    for (int l = c->n_layer - 1; l >= -1 && st == MP_OK; l--) st = sync->ready(sync->user, g, c, l);
    return st;
}

static mp_status forward_backward(const mp_model *m, const int *tokens, const int *targets, int B, int T,
                                  const mp_hooks *hooks, mp_acts *acts, mp_grads *g, float grad_scale, float *loss,
                                  int *n_counted, const mp_grad_sync *sync) {
    mp_status st;
    if ((st = mp_targets_check(&m->cfg, targets, B, T))) return st;
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    fp.acts = acts;
    if ((st = mp_model_forward(m, tokens, B, T, &fp, NULL))) return st;
    const int N = B * T, V = m->cfg.vocab;
    /* per-row losses in the dxn scratch ([N, D] >= N floats) */
    float *losses = acts->dxn;
    int count = mp_crossentropy_forward(losses, acts->logits, acts->logits, targets, N, V);
    double sum = 0.0;
    for (int n = 0; n < N; n++) sum += losses[n];
    *loss = count ? (float)(sum / count) : 0.0f;
    if (n_counted) *n_counted = count;
    if (!count || grad_scale == 0.0f) return sync ? sync_all(sync, g, &m->cfg) : MP_OK;
    mp_crossentropy_backward(acts->logits, acts->logits, targets, N, V, grad_scale / (float)count);
    const mp_backward_params bp = {g, tokens, sync, NULL};
    return mp_backward(m, acts, acts->logits, &bp);
}

mp_status mp_model_forward_backward(const mp_model *m, const int *tokens, const int *targets, int B, int T,
                                    const mp_hooks *hooks, mp_acts *acts, mp_grads *g, float grad_scale,
                                    float *loss, int *n_counted) {
    return forward_backward(m, tokens, targets, B, T, hooks, acts, g, grad_scale, loss, n_counted, NULL);
}

static int64_t count_targets(const int *targets, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += targets[i] >= 0;
    return k;
}

mp_status mp_model_loss(const mp_model *m, const int *tokens, const int *targets, int B, int T,
                        const mp_hooks *hooks, float *loss) {
    mp_status st;
    if ((st = mp_targets_check(&m->cfg, targets, B, T))) return st;
    size_t N = (size_t)B * T, V = (size_t)m->cfg.vocab;
    float *logits = mp_malloc((N * V + N) * sizeof(float), "logits for the loss");
    if (!logits) return MP_ERR_NOMEM;
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    if ((st = mp_model_forward(m, tokens, B, T, &fp, logits)) == MP_OK) {
        float *losses = logits + N * V;
        int count = mp_crossentropy_forward(losses, logits, logits, targets, (int)N, (int)V);
        double sum = 0.0;
        for (size_t n = 0; n < N; n++) sum += losses[n];
        *loss = count ? (float)(sum / count) : 0.0f;
    }
    free(logits);
    return st;
}

mp_status mp_train_step(mp_model *m, mp_adamw *opt, mp_train_ws *ws, const int *tokens, const int *targets,
                        int B, int T, int accum, const mp_hooks *hooks, float *loss) {
    mp_status st;
    if (accum <= 0 || B % accum != 0)
        return mp_error(MP_ERR_ARG, "train step: the batch (%d) must split into accum (%d) equal micro-batches", B,
                        accum);
    if ((st = mp_targets_check(&m->cfg, targets, B, T))) return st;
    if ((st = mp_model_make_owned(m))) return st;
    size_t n = mp_config_n_params(&m->cfg);
    if (opt->n != n) {
        if (opt->n != 0)
            return mp_error(MP_ERR_ARG, "train step: this optimizer holds state for %zu parameters, the model has "
                            "%zu (use a fresh optimizer per model)", opt->n, n);
        mp_adamw_params hp = opt->hp;
        if ((st = mp_adamw_init(opt, &hp, n))) return st;
    }
    if (m->dev_ops && m->dev_ops->train_step) { /* the model is on a device: the step runs there */
        if (ws->sync)
            return mp_error(MP_ERR_ARG, "train step: data-parallel training (MPI) runs on the CPU; move the model "
                            "there first (m:to(\"cpu\"))");
        return m->dev_ops->train_step(m, opt, ws, tokens, targets, B, T, accum, hooks, loss);
    }
    if (ws->grads.n != n) {
        mp_grads_free(&ws->grads);
        if ((st = mp_grads_init(&ws->grads, &m->cfg))) return st;
    }
    const int mb = B / accum;
    if (ws->acts.B != mb || ws->acts.T != T) {
        mp_acts_free(&ws->acts);
        if ((st = mp_acts_init(&ws->acts, &m->cfg, mb, T))) return st;
    }
    mp_grads_zero(&ws->grads);
    const mp_grad_sync *sync = ws->sync;
    /* data parallel: this rank's share of each micro-batch's global count */
    enum { MAX_ACCUM_SYNC = 64 };
    int64_t local[MAX_ACCUM_SYNC], global[MAX_ACCUM_SYNC];
    if (sync) {
        if (accum > MAX_ACCUM_SYNC)
            return mp_error(MP_ERR_ARG, "train step: accum %d is above %d with data parallelism", accum,
                            MAX_ACCUM_SYNC);
        for (int a = 0; a < accum; a++)
            local[a] = global[a] = count_targets(targets + (size_t)a * mb * T, (size_t)mb * T);
        if ((st = sync->counts(sync->user, global, accum))) return st;
    }
    double total = 0.0;
    for (int a = 0; a < accum; a++) {
        float l;
        const size_t off = (size_t)a * mb * T;
        const double share = !sync ? 1.0 : global[a] ? (double)local[a] / (double)global[a] : 0.0;
        if ((st = forward_backward(m, tokens + off, targets + off, mb, T, hooks, &ws->acts, &ws->grads,
                                   sync ? (float)(share / accum) : 1.0f / (float)accum, &l, NULL,
                                   sync && a == accum - 1 ? sync : NULL)))
            return st;
        total += share * l;
    }
    total /= accum;
    if (sync && (st = sync->finish(sync->user, &ws->grads, &total))) return st;
    *loss = (float)total;
    ws->grad_norm = mp_grad_clip(ws->grads.mem, n, opt->hp.grad_clip);
    ws->lr = mp_lr_at(&opt->hp, opt->step);
    mp_adamw_update(opt, m, ws->grads.mem, ws->lr);
    return MP_OK;
}

/* ---- loss curve ---- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q;
    return 0;
}

mp_status mp_train_log_add(mp_train_log *log, int32_t step, float loss, float lr, double tokens, double wall) {
    size_t need = log->n + 1, cap = log->cap;
    size_t c1 = cap, c2 = cap, c3 = cap, c4 = cap, c5 = cap;
    if (grow((void **)&log->step, &c1, need, sizeof(int32_t)) || grow((void **)&log->loss, &c2, need, sizeof(float)) ||
        grow((void **)&log->lr, &c3, need, sizeof(float)) || grow((void **)&log->tokens, &c4, need, sizeof(double)) ||
        grow((void **)&log->wall, &c5, need, sizeof(double)))
        return mp_error(MP_ERR_NOMEM, "out of memory for the loss curve");
    log->cap = c1;
    log->step[log->n] = step;
    log->loss[log->n] = loss;
    log->lr[log->n] = lr;
    log->tokens[log->n] = tokens;
    log->wall[log->n] = wall;
    log->n++;
    return MP_OK;
}

mp_status mp_train_log_add_eval(mp_train_log *log, int32_t step, float loss) {
    size_t need = log->n_eval + 1, c1 = log->cap_eval, c2 = log->cap_eval;
    if (grow((void **)&log->eval_step, &c1, need, sizeof(int32_t)) ||
        grow((void **)&log->eval_loss, &c2, need, sizeof(float)))
        return mp_error(MP_ERR_NOMEM, "out of memory for the eval curve");
    log->cap_eval = c1;
    log->eval_step[log->n_eval] = step;
    log->eval_loss[log->n_eval] = loss;
    log->n_eval++;
    return MP_OK;
}

void mp_train_log_free(mp_train_log *log) {
    free(log->step);
    free(log->loss);
    free(log->lr);
    free(log->tokens);
    free(log->wall);
    free(log->eval_step);
    free(log->eval_loss);
    memset(log, 0, sizeof *log);
}
