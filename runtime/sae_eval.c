/* sae_eval.c — what an SAE is measured by (SAELens's evals: L0, explained
 * variance, MSE, dead features, CE loss recovered with the SAE spliced into
 * the model at its hook) and the live training source (a model's activations
 * at one hook point, taken by a reader callback); see sae_train.h. */
#include "sae_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

mp_status mp_sae_metrics_init(mp_sae_metrics_acc *a, int d_in, int d_sae) {
    memset(a, 0, sizeof *a);
    a->d_in = d_in;
    a->d_sae = d_sae;
    a->sum = mp_calloc((size_t)d_in, sizeof(double), "SAE metrics sums");
    a->sumsq = mp_calloc((size_t)d_in, sizeof(double), "SAE metrics sums");
    a->fired = mp_calloc((size_t)d_sae, 1, "SAE metrics fired features");
    if (!a->sum || !a->sumsq || !a->fired) {
        mp_sae_metrics_free(a);
        return MP_ERR_NOMEM;
    }
    return MP_OK;
}

void mp_sae_metrics_free(mp_sae_metrics_acc *a) {
    free(a->sum);
    free(a->sumsq);
    free(a->fired);
    a->sum = a->sumsq = NULL;
    a->fired = NULL;
}

void mp_sae_metrics_add(mp_sae_metrics_acc *a, const float *x, const float *xhat, const float *acts, int N) {
    const int D = a->d_in, F = a->d_sae;
    double sse = 0, l0 = 0;
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * D, *yr = xhat + (size_t)r * D, *ar = acts + (size_t)r * F;
        for (int i = 0; i < D; i++) {
            double t = (double)xr[i] - yr[i];
            sse += t * t;
            a->sum[i] += xr[i];
            a->sumsq[i] += (double)xr[i] * xr[i];
        }
        for (int j = 0; j < F; j++)
            if (ar[j] > 0) {
                l0 += 1;
                a->fired[j] = 1;
            }
    }
    a->sse += sse;
    a->l0_sum += l0;
    a->rows += N;
}

void mp_sae_metrics_get(const mp_sae_metrics_acc *a, mp_sae_metrics *out) {
    memset(out, 0, sizeof *out);
    out->rows = a->rows;
    out->ce_clean = out->ce_sae = out->ce_zero = out->ce_loss_recovered = NAN;
    if (a->rows == 0) {
        out->l0 = out->explained_variance = out->mse = out->dead_fraction = NAN;
        return;
    }
    double tv = 0, n = (double)a->rows;
    for (int i = 0; i < a->d_in; i++) tv += a->sumsq[i] - a->sum[i] * a->sum[i] / n;
    long dead = 0;
    for (int j = 0; j < a->d_sae; j++) dead += !a->fired[j];
    out->l0 = a->l0_sum / n;
    out->explained_variance = tv > 0 ? 1.0 - a->sse / tv : NAN;
    out->mse = a->sse / (n * a->d_in);
    out->dead_fraction = (double)dead / a->d_sae;
}

mp_status mp_sae_metrics_rows(const mp_sae *s, const float *x, int N, mp_sae_metrics *out) {
    mp_sae_metrics_acc a;
    mp_status st = mp_sae_metrics_init(&a, s->d_in, s->d_sae);
    if (st) return st;
    const int chunk = 1024;
    float *acts = mp_malloc((size_t)chunk * s->d_sae * sizeof(float), "SAE metrics features");
    float *rec = mp_malloc((size_t)chunk * s->d_in * sizeof(float), "SAE metrics reconstruction");
    if (!acts || !rec) st = MP_ERR_NOMEM;
    for (int r0 = 0; !st && r0 < N; r0 += chunk) {
        int n = N - r0 < chunk ? N - r0 : chunk;
        const float *xr = x + (size_t)r0 * s->d_in;
        if (!(st = mp_sae_forward(s, xr, n, rec, acts))) mp_sae_metrics_add(&a, xr, rec, acts, n);
    }
    if (!st) mp_sae_metrics_get(&a, out);
    free(acts);
    free(rec);
    mp_sae_metrics_free(&a);
    return st;
}

/* ---- the hook that splices the SAE in (or zeroes the activation) ---- */
typedef struct {
    const mp_sae *s;
    int zero;             /* 1: replace by zeros */
    mp_sae_metrics_acc *acc;
    float *acts, *rec;    /* grown on demand */
    size_t cap_rows;
} splice;

static int whole_view(const mp_hook_info *info) {
    for (int k = 0; k < info->ndim; k++)
        if (info->shape[k] != info->full[k]) return 0;
    return 1;
}

static int splice_fn(void *user, const mp_hook_info *info, float *data) {
    splice *sp = user;
    const mp_sae *s = sp->s;
    if (!whole_view(info) || info->numel % (size_t)s->d_in) {
        mp_error(MP_ERR_ARG, "SAE at %s: the point's values (%zu) are not rows of d_in = %d", info->name, info->numel,
                 s->d_in);
        return 1;
    }
    size_t rows = info->numel / (size_t)s->d_in;
    if (sp->zero) {
        memset(data, 0, info->numel * sizeof(float));
        return 0;
    }
    if (rows > sp->cap_rows) {
        free(sp->acts);
        free(sp->rec);
        sp->acts = mp_malloc(rows * s->d_sae * sizeof(float), "SAE splice features");
        sp->rec = mp_malloc(rows * s->d_in * sizeof(float), "SAE splice reconstruction");
        sp->cap_rows = sp->acts && sp->rec ? rows : 0;
        if (!sp->cap_rows) return 1;
    }
    if (mp_sae_forward(s, data, (int)rows, sp->rec, sp->acts)) return 1;
    if (sp->acc) mp_sae_metrics_add(sp->acc, data, sp->rec, sp->acts, (int)rows);
    memcpy(data, sp->rec, rows * s->d_in * sizeof(float));
    return 0;
}

static mp_status hook_point(const mp_model *m, const char *hook, mp_hook_id *id, int *layer) {
    if (!hook || !*hook) return mp_error(MP_ERR_ARG, "SAE: no hook point (the SAE has no hook_name; pass one)");
    if (mp_hook_parse(&m->cfg, hook, id, layer)) {
        char why[160];
        return mp_error(MP_ERR_ARG, "SAE: unknown hook point '%s'%s", hook, mp_hook_absent_why(&m->cfg, hook, why, sizeof why));
    }
    return MP_OK;
}

mp_status mp_sae_evaluate(const mp_sae *s, const mp_model *m, const char *hook, const int *tokens, int B, int T,
                          mp_sae_metrics *out) {
    if (!hook || !*hook) hook = s->hook_name;
    mp_hook_id id;
    int layer;
    mp_status st = hook_point(m, hook, &id, &layer);
    if (st) return st;
    if (B < 1 || T < 2) return mp_error(MP_ERR_ARG, "SAE evaluate: tokens must be [B >= 1, T >= 2], got [%d, %d]", B, T);
    int *targets = mp_malloc((size_t)B * T * sizeof(int), "SAE evaluate targets");
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    mp_sae_metrics_acc acc;
    memset(&acc, 0, sizeof acc);
    splice sp = {s, 0, &acc, NULL, NULL, 0};
    float ce_clean = 0, ce_sae = 0, ce_zero = 0;
    if (!targets || !hs) {
        st = targets ? mp_error(MP_ERR_NOMEM, "out of memory for hooks") : MP_ERR_NOMEM;
        goto done;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) targets[(size_t)b * T + t] = t + 1 < T ? tokens[(size_t)b * T + t + 1] : -1;
    if ((st = mp_sae_metrics_init(&acc, s->d_in, s->d_sae))) goto done;
    if ((st = mp_model_loss(m, tokens, targets, B, T, NULL, &ce_clean))) goto done;
    if ((st = mp_hooks_add_at(hs, id, layer, splice_fn, &sp))) goto done;
    if ((st = mp_model_loss(m, tokens, targets, B, T, hs, &ce_sae))) goto done;
    sp.zero = 1;
    if ((st = mp_model_loss(m, tokens, targets, B, T, hs, &ce_zero))) goto done;
    mp_sae_metrics_get(&acc, out);
    out->ce_clean = ce_clean;
    out->ce_sae = ce_sae;
    out->ce_zero = ce_zero;
    out->ce_loss_recovered = ce_zero != ce_clean ? ((double)ce_zero - ce_sae) / ((double)ce_zero - ce_clean) : NAN;
done:
    free(targets);
    mp_hooks_free(hs);
    mp_sae_metrics_free(&acc);
    free(sp.acts);
    free(sp.rec);
    return st;
}

/* ---- the live source ---- */
struct mp_sae_live {
    const mp_model *m;
    mp_hooks *hs;
    int d, S, T, B, epochs, epoch, next_seq;
    int *tokens;
    float *stage;     /* rows of the last forward */
    size_t n_stage, pos, cap;
    int bad;
};

static int live_read(void *user, const mp_hook_info *info, float *data) {
    mp_sae_live *lv = user;
    if (!whole_view(info) || info->numel % (size_t)lv->d) {
        mp_error(MP_ERR_ARG, "SAE live source at %s: the point's values (%zu) are not rows of d_in = %d", info->name,
                 info->numel, lv->d);
        return 1;
    }
    if (info->numel > lv->cap) {
        free(lv->stage);
        lv->stage = mp_malloc(info->numel * sizeof(float), "SAE live source rows");
        lv->cap = lv->stage ? info->numel : 0;
        if (!lv->stage) return 1;
    }
    memcpy(lv->stage, data, info->numel * sizeof(float));
    lv->n_stage = info->numel / (size_t)lv->d;
    lv->pos = 0;
    return 0;
}

mp_status mp_sae_live_new(mp_sae_live **out, const mp_model *m, const char *hook, int d, const int *tokens, int S,
                          int T, int seqs_per_forward, int epochs) {
    *out = NULL;
    mp_hook_id id;
    int layer;
    mp_status st = hook_point(m, hook, &id, &layer);
    if (st) return st;
    if (S < 1 || T < 1) return mp_error(MP_ERR_ARG, "SAE live source: tokens must be [S >= 1, T >= 1], got [%d, %d]", S, T);
    if (seqs_per_forward < 1) return mp_error(MP_ERR_ARG, "SAE live source: seqs_per_forward must be >= 1");
    if (epochs < 0) return mp_error(MP_ERR_ARG, "SAE live source: epochs must be >= 0");
    for (size_t i = 0; i < (size_t)S * T; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)
            return mp_error(MP_ERR_ARG, "SAE live source: token id %d at [%zu, %zu] is outside the vocabulary (0..%d)",
                            tokens[i], i / T + 1, i % T + 1, m->cfg.vocab - 1);
    mp_sae_live *lv = mp_calloc(1, sizeof *lv, "SAE live source");
    if (!lv) return MP_ERR_NOMEM;
    lv->tokens = mp_malloc((size_t)S * T * sizeof(int), "SAE live source tokens");
    lv->hs = mp_hooks_new(&m->cfg);
    if (!lv->tokens || !lv->hs) {
        mp_sae_live_free(lv);
        return mp_error(MP_ERR_NOMEM, "out of memory for the SAE live source");
    }
    memcpy(lv->tokens, tokens, (size_t)S * T * sizeof(int));
    if ((st = mp_hooks_add_reader_at(lv->hs, id, layer, live_read, lv))) {
        mp_sae_live_free(lv);
        return st;
    }
    lv->m = m;
    lv->d = d;
    lv->S = S;
    lv->T = T;
    lv->B = seqs_per_forward < S ? seqs_per_forward : S;
    lv->epochs = epochs;
    *out = lv;
    return MP_OK;
}

void mp_sae_live_free(mp_sae_live *lv) {
    if (!lv) return;
    mp_hooks_free(lv->hs);
    free(lv->tokens);
    free(lv->stage);
    free(lv);
}

mp_status mp_sae_live_produce(void *live, float *dst, int max_rows, int *got) {
    mp_sae_live *lv = live;
    *got = 0;
    while (*got < max_rows) {
        if (lv->pos < lv->n_stage) {
            size_t n = lv->n_stage - lv->pos;
            if (n > (size_t)(max_rows - *got)) n = (size_t)(max_rows - *got);
            memcpy(dst + (size_t)*got * lv->d, lv->stage + lv->pos * lv->d, n * lv->d * sizeof(float));
            lv->pos += n;
            *got += (int)n;
            continue;
        }
        if (lv->next_seq >= lv->S) {
            lv->epoch++;
            lv->next_seq = 0;
        }
        if (lv->epochs > 0 && lv->epoch >= lv->epochs) break;
        int B = lv->S - lv->next_seq < lv->B ? lv->S - lv->next_seq : lv->B;
        mp_forward_params fp = mp_forward_params_default();
        fp.hooks = lv->hs;
        fp.logits = MP_LOGITS_NONE;
        lv->n_stage = lv->pos = 0;
        mp_status st = mp_model_forward(lv->m, lv->tokens + (size_t)lv->next_seq * lv->T, B, lv->T, &fp, NULL);
        if (st) return st;
        lv->next_seq += B;
        if (lv->n_stage == 0) return mp_error(MP_ERR_ARG, "SAE live source: the hook point never fired");
    }
    return MP_OK;
}
