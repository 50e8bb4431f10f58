/* model_init.c — random initialisation of a model (seeded GSL generator):
 * normal(0, std) weights and unit norm weights. */
#include "model.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

mp_status mp_model_new_random(mp_model **out, const mp_config *cfg, uint64_t seed, float std) {
    mp_model *m = NULL;
    mp_status st = mp_model_alloc(&m, cfg);
    if (st) return st;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) { mp_model_free(m); return mp_error(MP_ERR_NOMEM, "out of memory for the random generator"); }
    gsl_rng_set(r, (unsigned long)seed);
    const mp_config *c = &m->cfg;
    size_t D = c->d_model, L = c->n_layer;
    /* norm weights = 1; everything else ~ N(0, std) */
    for (size_t i = 0; i < L * D; i++) { m->p.ln1_w[i] = 1.0f; m->p.ln2_w[i] = 1.0f; }
    for (size_t i = 0; i < D; i++) m->p.lnf_w[i] = 1.0f;
    struct { float *p; size_t n; } w[] = {
        {m->p.embed, (size_t)c->vocab * D},
        {m->p.wq, L * c->n_head * c->d_head * D},
        {m->p.wk, L * c->n_kv_head * c->d_head * D},
        {m->p.wv, L * c->n_kv_head * c->d_head * D},
        {m->p.wo, L * D * c->n_head * c->d_head},
        {m->p.w1, L * c->d_mlp * D},
        {m->p.w3, L * c->d_mlp * D},
        {m->p.w2, L * D * c->d_mlp},
        {c->tied ? NULL : m->p.unembed, (size_t)c->vocab * D},
    };
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
        if (w[k].p)
            for (size_t i = 0; i < w[k].n; i++) w[k].p[i] = (float)gsl_ran_gaussian_ziggurat(r, std);
    gsl_rng_free(r);
    m->format = "random";
    *out = m;
    return MP_OK;
}

