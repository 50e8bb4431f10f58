/* model_init.c — random initialisation of a model (seeded GSL mt19937):
 * mp_model_new_random (normal(0, std) weights, unit norm weights, for tests and
 * benchmarks) and mp_model_new_init (the start of training: normal(0, std),
 * residual output projections wo/w2 scaled by 1/sqrt(2 n_layer)). Norm biases
 * are 0 in both. (GSL's cblas header clashes with OpenBLAS's: this file must
 * not include <cblas.h>.) */
#include "model.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <string.h>

static mp_status init_model(mp_model **out, const mp_config *cfg, uint64_t seed, float std, int scale_resid,
                            const char *format) {
    mp_model *m = NULL;
    mp_status st = mp_model_new(&m, cfg);
    if (st) return st;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) { mp_model_free(m); return mp_error(MP_ERR_NOMEM, "out of memory for the random generator"); }
    gsl_rng_set(r, (unsigned long)seed);
    const mp_config *c = &m->cfg;
    const double resid_std = scale_resid ? std / sqrt(2.0 * c->n_layer) : std;
    mp_param_desc d[MP_PARAM_MAX];
    int n = mp_params_describe(c, &m->p, d);
    /* mp_params order: embed, ln1, wq, wk, wv, wo, ln2, w1, w3, w2, lnf, unembed
     * (the order the generator is drawn in; biases stay 0) */
    for (int k = 0; k < n; k++) {
        const char *nm = d[k].name;
        if (strstr(nm, ".bias") || (d[k].ndim == 1 && !strstr(nm, ".weight"))) continue; /* biases (.bias, attn.bq, mlp.b1 ...) */
        if (d[k].ndim == 1) { /* norm weight */
            for (size_t i = 0; i < d[k].n; i++) d[k].p[i] = 1.0f;
            continue;
        }
        int resid = strstr(nm, "attn.wo") || strstr(nm, "mlp.w2");
        double s = resid ? resid_std : std;
        for (size_t i = 0; i < d[k].n; i++) d[k].p[i] = (float)gsl_ran_gaussian_ziggurat(r, s);
    }
    gsl_rng_free(r);
    m->format = format;
    *out = m;
    return MP_OK;
}

mp_status mp_model_new_random(mp_model **out, const mp_config *cfg, uint64_t seed, float std) {
    return init_model(out, cfg, seed, std, 0, "random");
}

mp_status mp_model_new_init(mp_model **out, const mp_config *cfg, uint64_t seed, float std) {
    return init_model(out, cfg, seed, std, 1, "init");
}
