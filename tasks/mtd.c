/* mtd.c — Mixture of Transition Distributions generator: fixed pi* from the task
 * seed, per-sequence Dirichlet mixture weights, sequences, targets and the true
 * next-token distributions (conventions in mtd.h). */
#include "mtd.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "task_rng.h"

#define MTD_MAX_Q 4096
#define MTD_MAX_M 1024

struct mp_mtd {
    mp_mtd_params p;
    double *pi;                /* [q, q] */
    gsl_ran_discrete_t **row;  /* q sampling tables, one per row of pi */
    gsl_rng *rng;              /* batch stream */
    double *ones;              /* [m] Dirichlet parameter of lambda */
};

mp_mtd_params mp_mtd_params_default(void) {
    mp_mtd_params p;
    p.q = 8;
    p.m = 3;
    p.c = 1.0;
    p.target = MP_MTD_TARGET_ALL;
    p.seed = 1;
    return p;
}

void mp_mtd_free(mp_mtd *t) {
    if (!t) return;
    if (t->row)
        for (int i = 0; i < t->p.q; i++)
            if (t->row[i]) gsl_ran_discrete_free(t->row[i]);
    free(t->row);
    free(t->pi);
    free(t->ones);
    if (t->rng) gsl_rng_free(t->rng);
    free(t);
}

mp_status mp_mtd_new(mp_mtd **out, const mp_mtd_params *p) {
    mp_status st = MP_OK;
    mp_mtd *t = NULL;
    gsl_rng *r0 = NULL;
    double *alpha = NULL;
    *out = NULL;
    mp_init();
    if (p->q < 2 || p->q > MTD_MAX_Q)
        return mp_error(MP_ERR_ARG, "mtd: q = %d is out of range (2..%d)", p->q, MTD_MAX_Q);
    if (p->m < 1 || p->m > MTD_MAX_M)
        return mp_error(MP_ERR_ARG, "mtd: m = %d lags is out of range (1..%d)", p->m, MTD_MAX_M);
    if (!(p->c > 0) || !isfinite(p->c))
        return mp_error(MP_ERR_ARG, "mtd: Dirichlet concentration c = %g must be finite and > 0", p->c);
    if (p->target != MP_MTD_TARGET_ALL && p->target != MP_MTD_TARGET_LAST)
        return mp_error(MP_ERR_ARG, "mtd: unknown target mode %d", (int)p->target);

    size_t qq = (size_t)p->q * (size_t)p->q;
    t = mp_calloc(1, sizeof *t, "mtd task");
    if (!t) return MP_ERR_NOMEM;
    t->p = *p;
    t->pi = mp_calloc(qq, sizeof(double), "mtd pi*");
    t->row = mp_calloc((size_t)p->q, sizeof *t->row, "mtd sampling tables");
    t->ones = mp_calloc((size_t)p->m, sizeof(double), "mtd lambda prior");
    alpha = mp_calloc((size_t)p->q, sizeof(double), "mtd Dirichlet parameter");
    if (!t->pi || !t->row || !t->ones || !alpha) { st = MP_ERR_NOMEM; goto cleanup; }
    r0 = mp_task_rng_new(p->seed, 0, "mtd pi*");
    t->rng = mp_task_rng_new(p->seed, 1, "mtd batches");
    if (!r0 || !t->rng) { st = MP_ERR_NOMEM; goto cleanup; }

    for (int i = 0; i < p->m; i++) t->ones[i] = 1.0;
    for (int i = 0; i < p->q; i++) alpha[i] = p->c;
    for (int u = 0; u < p->q; u++) {
        double *row = t->pi + (size_t)u * p->q;
        gsl_ran_dirichlet(r0, (size_t)p->q, alpha, row);
        double s = 0;
        for (int v = 0; v < p->q; v++) s += row[v];
        if (!(s > 0) || !isfinite(s)) {
            st = mp_error(MP_ERR_GSL, "mtd: Dirichlet(c=%g) draw of row %d of pi* is degenerate", p->c, u);
            goto cleanup;
        }
        for (int v = 0; v < p->q; v++) row[v] /= s;  /* exact renormalisation */
        t->row[u] = gsl_ran_discrete_preproc((size_t)p->q, row);
        if (!t->row[u]) {
            st = mp_error(MP_ERR_GSL, "mtd: cannot build the sampling table of row %d of pi*", u);
            goto cleanup;
        }
    }
    *out = t;
    t = NULL;
cleanup:
    mp_mtd_free(t);
    if (r0) gsl_rng_free(r0);
    free(alpha);
    return st;
}

void mp_mtd_seed(mp_mtd *t, uint64_t seed) { mp_task_rng_seed(t->rng, seed, 1); }

const mp_mtd_params *mp_mtd_get_params(const mp_mtd *t) { return &t->p; }

const double *mp_mtd_pi(const mp_mtd *t) { return t->pi; }

void mp_mtd_mixture(const mp_mtd *t, const double *lambda, const int32_t *hist, int len,
                    double *out) {
    int q = t->p.q, m = t->p.m;
    assert(len >= m);
    for (int v = 0; v < q; v++) out[v] = 0;
    for (int g = 1; g <= m; g++) {
        const double *row = t->pi + (size_t)hist[len - g] * q;
        double w = lambda[g - 1];
        for (int v = 0; v < q; v++) out[v] += w * row[v];
    }
}

mp_status mp_mtd_sample(mp_mtd *t, int B, int T, int32_t *tokens, int32_t *targets,
                        double *lambda, double *next) {
    mp_status st = MP_OK;
    const int q = t->p.q, m = t->p.m;
    gsl_ran_discrete_t *lag = NULL;
    double lam_local[MTD_MAX_M];
    size_t bt, btq;
    if (B < 1) return mp_error(MP_ERR_ARG, "mtd: batch size B = %d must be >= 1", B);
    if (T < m)
        return mp_error(MP_ERR_ARG, "mtd: sequence length T = %d is shorter than m = %d lags", T, m);
    if (mp_mul_size((size_t)B, (size_t)T, &bt) || mp_mul_size(bt, (size_t)q, &btq))
        return mp_error(MP_ERR_NOMEM, "mtd: batch [%d, %d, %d] overflows", B, T, q);
    assert(tokens && targets);

    for (int b = 0; b < B; b++) {
        int32_t *y = tokens + (size_t)b * T;
        int32_t *tg = targets + (size_t)b * T;
        double *lam = lambda ? lambda + (size_t)b * m : lam_local;
        gsl_ran_dirichlet(t->rng, (size_t)m, t->ones, lam);
        if (m > 1) {
            lag = gsl_ran_discrete_preproc((size_t)m, lam);
            if (!lag) { st = mp_error(MP_ERR_GSL, "mtd: cannot build the lag sampling table"); goto cleanup; }
        }
        for (int i = 0; i < m; i++) y[i] = (int32_t)gsl_rng_uniform_int(t->rng, (unsigned long)q);
        int32_t last = 0; /* y_T */
        for (int i = m; i <= T; i++) {
            int g = lag ? 1 + (int)gsl_ran_discrete(t->rng, lag) : 1;
            int32_t prev = y[i - g];
            int32_t v = (int32_t)gsl_ran_discrete(t->rng, t->row[prev]);
            if (i < T) y[i] = v; else last = v;
        }
        if (lag) { gsl_ran_discrete_free(lag); lag = NULL; }

        for (int i = 0; i < T; i++) {
            int32_t nx = i + 1 < T ? y[i + 1] : last;
            int on = t->p.target == MP_MTD_TARGET_ALL ? i >= m - 1 : i == T - 1;
            tg[i] = on ? nx : -1;
        }
        if (next) {
            double *nb = next + (size_t)b * T * q;
            for (int i = 0; i < T; i++) {
                double *o = nb + (size_t)i * q;
                if (i < m - 1) {
                    for (int v = 0; v < q; v++) o[v] = 1.0 / q;
                } else {
                    mp_mtd_mixture(t, lam, y, i + 1, o);
                }
            }
        }
    }
cleanup:
    if (lag) gsl_ran_discrete_free(lag);
    return st;
}
