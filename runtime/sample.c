/* sample.c — next-token sampling (greedy, temperature, nucleus/top-p) through a
 * seeded GSL generator, and text generation over the KV cache with hooks live
 * on every step: one prompt, or a batch of prompts of different lengths
 * decoded together (left padding, per-row positions and a mask over the
 * cached keys: ragged.c), each row with its own sampler. Decoding steps run
 * on the threads their work size calls for (omp_env.h). */
#define _GNU_SOURCE /* qsort_r */
#include "model.h"
#include "omp_env.h"

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

/* The floating-point work of one decoding step of B rows: a multiply-add per
 * weight (config.h's parameter count; the attention over the cache is small beside it). */
static double decode_flops(const mp_model *m, int B) {
    return 2.0 * (double)B * (double)mp_config_n_params(&m->cfg);
}

mp_status mp_model_generate(const mp_model *m, const int *prompt, int n, int max_new, const mp_sampler_params *sp,
                            const mp_hooks *hooks, int stop_token, mp_token_fn on_token, void *user, int *out,
                            int *n_out) {
    mp_status st;
    mp_sampler *s = NULL;
    mp_kvcache cache = {0};
    float *logits = NULL;
    int threads = 0;
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
    threads = mp_omp_decode_begin(decode_flops(m, 1)); /* a decoding step's work is small: maybe fewer threads */
    for (int i = 0; i < max_new; i++) {
        int tok = mp_sampler_sample(s, logits);
        out[(*n_out)++] = tok;
        if (on_token && on_token(user, tok)) break;
        if (tok == stop_token || i == max_new - 1) break;
        if ((st = mp_model_forward(m, &tok, 1, 1, &fp, logits))) goto cleanup;
    }
cleanup:
    mp_omp_decode_end(threads);
    mp_sampler_free(s);
    mp_kvcache_free(&cache);
    free(logits);
    return st;
}

mp_status mp_model_generate_batch(const mp_model *m, const int *prompts, const int *lens, int B, int max_new,
                                  const mp_sampler_params *sp, const uint64_t *seeds, const mp_hooks *hooks,
                                  int stop_token, int *out, int *n_out) {
    if (B <= 0) return mp_error(MP_ERR_ARG, "generate: the batch has no prompt");
    for (int b = 0; b < B; b++) {
        n_out[b] = 0;
        if (lens[b] <= 0)
            return mp_error(MP_ERR_ARG, "generate: prompt %d is empty (give at least the BOS token)", b + 1);
    }
    if (max_new < 0) return mp_error(MP_ERR_ARG, "generate: max_new_tokens must be >= 0 (got %d)", max_new);
    const int P = mp_pad_width(lens, B), W = P + max_new, V = m->cfg.vocab;
    for (int b = 0, off = 0; b < B; off += lens[b], b++)
        for (int t = 0; t < lens[b]; t++)
            if (prompts[off + t] < 0 || prompts[off + t] >= V)
                return mp_error(MP_ERR_ARG, "generate: prompt %d: token id %d at %d is outside the vocabulary "
                                "(0..%d)", b + 1, prompts[off + t], t + 1, V - 1);
    if (B == 1) { /* one prompt: the single path, unchanged */
        mp_sampler_params one = *sp;
        if (seeds) one.seed = seeds[0];
        return mp_model_generate(m, prompts, lens[0], max_new, &one, hooks, stop_token, NULL, NULL, out, n_out);
    }
    for (int b = 0, off = 0; b < B; off += lens[b], b++) {
        memcpy(out + (size_t)b * W, prompts + off, (size_t)lens[b] * sizeof(int));
        n_out[b] = lens[b];
    }
    if (max_new == 0) return MP_OK;
    mp_status st = MP_OK;
    mp_kvcache cache = {0};
    mp_sampler **s = mp_calloc((size_t)B, sizeof *s, "the samplers");
    /* keys [B, W]: 1 real, 0 pad (each row's prompt right-aligned at column P,
     * then one column per step); mask: the same [B, S] packed for a call
     * (its row stride is the S keys the call sees) */
    int *keys = mp_calloc((size_t)B * W, sizeof(int), "the generation mask");
    int *mask = mp_malloc((size_t)B * W * sizeof(int), "the generation mask");
    int *tok = mp_malloc((size_t)B * P * sizeof(int), "the padded prompts");
    int *done = mp_calloc((size_t)B, sizeof(int), "the generation state");
    float *logits = mp_malloc((size_t)B * V * sizeof(float), "logits");
    int threads = 0;
    if (!s || !keys || !mask || !tok || !done || !logits) { st = MP_ERR_NOMEM; goto cleanup; }
    for (int b = 0; b < B; b++) {
        mp_sampler_params one = *sp;
        if (seeds) one.seed = seeds[b];
        if ((st = mp_sampler_new(&s[b], &one, V))) goto cleanup;
    }
    if ((st = mp_kvcache_init(&cache, &m->cfg, B, W))) goto cleanup;
    /* left padding: every row's next token goes to the same cache column, so a
     * step is one [B, 1] call; the mask keeps the pads out of every row's keys
     * and gives each token the position it has in its prompt alone */
    mp_pad_batch(prompts, lens, B, P, 0, 1, tok, mask);
    for (int b = 0; b < B; b++) memcpy(keys + (size_t)b * W, mask + (size_t)b * P, (size_t)P * sizeof(int));
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    fp.cache = &cache;
    fp.logits = MP_LOGITS_LAST;
    fp.attn_mask = mask;
    if ((st = mp_model_forward(m, tok, B, P, &fp, logits))) goto cleanup;
    threads = mp_omp_decode_begin(decode_flops(m, B));
    for (int i = 0; i < max_new; i++) {
        int live = 0;
        for (int b = 0; b < B; b++) {
            if (done[b]) { tok[b] = 0; continue; } /* a stopped row: a pad, not sampled */
            int *row = out + (size_t)b * W;
            const int t = mp_sampler_sample(s[b], logits + (size_t)b * V);
            row[n_out[b]++] = t;
            tok[b] = t;
            if (t == stop_token) done[b] = 1;
            else live++;
            keys[(size_t)b * W + P + i] = !done[b];
        }
        if (!live || i == max_new - 1) break;
        const int S = P + i + 1;
        for (int b = 0; b < B; b++) memcpy(mask + (size_t)b * S, keys + (size_t)b * W, (size_t)S * sizeof(int));
        if ((st = mp_model_forward(m, tok, B, 1, &fp, logits))) goto cleanup;
    }
cleanup:
    mp_omp_decode_end(threads);
    if (s)
        for (int b = 0; b < B; b++) mp_sampler_free(s[b]);
    free(s);
    mp_kvcache_free(&cache);
    free(keys);
    free(mask);
    free(tok);
    free(done);
    free(logits);
    return st;
}
