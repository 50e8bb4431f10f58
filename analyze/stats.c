/* stats.c — bootstrap confidence intervals (percentile method) with a seeded
 * GSL generator, for the mean or any statistic supplied as a callback. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

mp_bootstrap_params mp_analyze_bootstrap_params_default(void) {
    mp_bootstrap_params p = {.n_resamples = 1000, .level = 0.95, .seed = 1};
    return p;
}

double mp_analyze_stat_mean(const double *x, size_t n, void *ctx) {
    (void)ctx;
    return gsl_stats_mean(x, 1, n);
}

mp_status mp_analyze_bootstrap(const double *x, size_t n, mp_statistic_fn stat, void *ctx,
                               const mp_bootstrap_params *p, mp_ci *out) {
    mp_status st = MP_OK;
    mp_bootstrap_params def = mp_analyze_bootstrap_params_default();
    double *sample = NULL, *reps = NULL;
    gsl_rng *rng = NULL;
    if (!p) p = &def;
    if (!stat) stat = mp_analyze_stat_mean;
    memset(out, 0, sizeof *out);
    if (!x || n < 1) return mp_error(MP_ERR_ARG, "bootstrap: empty sample");
    if (p->n_resamples < 2) return mp_error(MP_ERR_ARG, "bootstrap: n = %zu resamples must be >= 2", p->n_resamples);
    if (!(p->level > 0 && p->level < 1)) return mp_error(MP_ERR_ARG, "bootstrap: level = %g must be in (0, 1)", p->level);
    if (n > 0xffffffffUL) return mp_error(MP_ERR_ARG, "bootstrap: sample of %zu values is too large", n);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return mp_error(MP_ERR_ARG, "bootstrap: value %zu (%g) is not finite", i + 1, x[i]);
    sample = mp_malloc(n * sizeof *sample, "bootstrap resample");
    reps = mp_malloc(p->n_resamples * sizeof *reps, "bootstrap replicates");
    rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!sample || !reps || !rng) { st = mp_error(MP_ERR_NOMEM, "bootstrap: out of memory"); goto cleanup; }
    gsl_rng_set(rng, p->seed);
    mp_error(MP_OK, "bootstrap: the statistic returned NaN");
    out->estimate = stat(x, n, ctx);
    if (isnan(out->estimate)) { st = MP_ERR_ARG; goto cleanup; }
    for (size_t r = 0; r < p->n_resamples; r++) {
        for (size_t i = 0; i < n; i++) sample[i] = x[gsl_rng_uniform_int(rng, n)];
        reps[r] = stat(sample, n, ctx);
        if (isnan(reps[r])) { st = MP_ERR_ARG; goto cleanup; }
    }
    gsl_sort(reps, 1, p->n_resamples);
    double a = (1.0 - p->level) / 2.0;
    out->lo = gsl_stats_quantile_from_sorted_data(reps, 1, p->n_resamples, a);
    out->hi = gsl_stats_quantile_from_sorted_data(reps, 1, p->n_resamples, 1.0 - a);
    out->se = gsl_stats_sd(reps, 1, p->n_resamples);
    out->n_resamples = p->n_resamples;
cleanup:
    free(sample);
    free(reps);
    if (rng) gsl_rng_free(rng);
    return st;
}
