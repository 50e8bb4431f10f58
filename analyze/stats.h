/* stats.h — resampling statistics: bootstrap confidence intervals (percentile
 * method) of the mean or of any statistic given as a callback. Deterministic:
 * every draw comes from a gsl_rng (MT19937) seeded by the caller. */
#ifndef MP_ANALYZE_STATS_H
#define MP_ANALYZE_STATS_H

#include <stddef.h>
#include "mp_common.h"

/* A statistic of a sample x[0..n). Returning NaN aborts the bootstrap with
 * MP_ERR_ARG (a callback that failed can set its own message first and return NaN). */
typedef double (*mp_statistic_fn)(const double *x, size_t n, void *ctx);

typedef struct {
    size_t n_resamples;   /* bootstrap resamples (default 1000) */
    double level;         /* confidence level in (0, 1) (default 0.95) */
    unsigned long seed;   /* gsl_rng_mt19937 seed (default 1) */
} mp_bootstrap_params;
mp_bootstrap_params mp_analyze_bootstrap_params_default(void);

typedef struct {
    double estimate;      /* statistic of the full sample */
    double lo, hi;        /* percentile interval: the (1-level)/2 and (1+level)/2 quantiles
                           * of the resampled statistics (gsl_stats_quantile_from_sorted_data) */
    double se;            /* standard deviation of the resampled statistics */
    size_t n_resamples;
} mp_ci;

/* Bootstrap CI of stat (NULL: the mean) over x[0..n), n >= 1. */
mp_status mp_analyze_bootstrap(const double *x, size_t n, mp_statistic_fn stat, void *ctx,
                               const mp_bootstrap_params *p, mp_ci *out);

/* The mean, as an mp_statistic_fn. */
double mp_analyze_stat_mean(const double *x, size_t n, void *ctx);

#endif
