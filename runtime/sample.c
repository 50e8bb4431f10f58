/* sample.c — next-token sampling (greedy, temperature, nucleus/top-p) through a
 * seeded GSL generator, and text generation over the KV cache with hooks live
 * on every step. */
#define _GNU_SOURCE /* qsort_r */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>

struct mp_sampler {
    mp_sampler_params p;
    int vocab;
    gsl_rng *rng;
    int *idx; /* [V] candidate indices for top-p */
};

mp_status mp_sampler_new(mp_sampler **out, const mp_sampler_params *sp, int vocab) {
    if (sp->temperature < 0 || !isfinite(sp->temperature))
        return mp_error(MP_ERR_ARG, "temperature must be >= 0 (got %g)", sp->temperature);
    if (!(sp->top_p > 0 && sp->top_p <= 1))
        return mp_error(MP_ERR_ARG, "top_p must be in (0, 1] (got %g)", sp->top_p);
    mp_sampler *s = mp_calloc(1, sizeof *s, "the sampler");
    if (!s) return MP_ERR_NOMEM;
    s->p = *sp;
    s->vocab = vocab;
    s->rng = gsl_rng_alloc(gsl_rng_mt19937);
    s->idx = mp_malloc((size_t)vocab * sizeof(int), "the sampler");
    if (!s->rng || !s->idx) { mp_sampler_free(s); return mp_error(MP_ERR_NOMEM, "out of memory for the sampler"); }
    gsl_rng_set(s->rng, (unsigned long)sp->seed);
    *out = s;
    return MP_OK;
}

void mp_sampler_free(mp_sampler *s) {
    if (!s) return;
    if (s->rng) gsl_rng_free(s->rng);
    free(s->idx);
    free(s);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Token ids by descending probability; probs is qsort_r's context (no global
 * state, so samplers on different threads do not interfere). */
static int cmp_desc(const void *a, const void *b, void *probs) {
    const float *p = probs;
    float pa = p[*(const int *)a], pb = p[*(const int *)b];
    return (pa < pb) - (pa > pb);
}

int mp_sampler_sample(mp_sampler *s, float *logits) {
    const int V = s->vocab;
    if (s->p.temperature == 0.0f) return argmax(logits, V);
    float mx = logits[argmax(logits, V)], sum = 0.0f;
    for (int i = 0; i < V; i++) {
        logits[i] = expf((logits[i] - mx) / s->p.temperature);
        sum += logits[i];
    }
    for (int i = 0; i < V; i++) logits[i] /= sum;
    double u = gsl_rng_uniform(s->rng);
    if (s->p.top_p >= 1.0f) {
        double cdf = 0;
        for (int i = 0; i < V; i++) {
            cdf += logits[i];
            if (u < cdf) return i;
        }
        return V - 1;
    }
    /* nucleus: smallest prefix of tokens by descending probability whose mass
     * reaches top_p; tokens below (1 - p)/(V - 1) cannot be in it (llama2.c's cut). */
    int n = 0;
    const float cut = (1.0f - s->p.top_p) / (float)(V > 1 ? V - 1 : 1);
    for (int i = 0; i < V; i++)
        if (logits[i] >= cut) s->idx[n++] = i;
    qsort_r(s->idx, (size_t)n, sizeof(int), cmp_desc, logits);
    double mass = 0;
    int last = n - 1;
    for (int i = 0; i < n; i++) {
        mass += logits[s->idx[i]];
        if (mass >= s->p.top_p) { last = i; break; }
    }
    double r = u * mass, cdf = 0;
    for (int i = 0; i <= last; i++) {
        cdf += logits[s->idx[i]];
        if (r < cdf) return s->idx[i];
    }
    return s->idx[last];
}

mp_status mp_model_generate(const mp_model *m, const int *prompt, int n, int max_new, const mp_sampler_params *sp,
                            const mp_hooks *hooks, int stop_token, mp_token_fn on_token, void *user, int *out,
                            int *n_out) {
    mp_status st;
    mp_sampler *s = NULL;
    mp_kvcache cache = {0};
    float *logits = NULL;
    *n_out = 0;
    if (n <= 0) return mp_error(MP_ERR_ARG, "generate: the prompt is empty (give at least the BOS token)");
    if (max_new < 0) return mp_error(MP_ERR_ARG, "generate: max_new_tokens must be >= 0 (got %d)", max_new);
    memcpy(out, prompt, (size_t)n * sizeof(int));
    *n_out = n;
    if (max_new == 0) return MP_OK;
    if ((st = mp_sampler_new(&s, sp, m->cfg.vocab))) goto cleanup;
    if ((st = mp_kvcache_init(&cache, &m->cfg, 1, n + max_new))) goto cleanup;
    if (!(logits = mp_malloc((size_t)m->cfg.vocab * sizeof(float), "logits"))) { st = MP_ERR_NOMEM; goto cleanup; }
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    fp.cache = &cache;
    fp.logits = MP_LOGITS_LAST;
    if ((st = mp_model_forward(m, prompt, 1, n, &fp, logits))) goto cleanup;
    for (int i = 0; i < max_new; i++) {
        int tok = mp_sampler_sample(s, logits);
        out[(*n_out)++] = tok;
        if (on_token && on_token(user, tok)) break;
        if (tok == stop_token || i == max_new - 1) break;
        if ((st = mp_model_forward(m, &tok, 1, 1, &fp, logits))) goto cleanup;
    }
cleanup:
    mp_sampler_free(s);
    mp_kvcache_free(&cache);
    free(logits);
    return st;
}
