/* mirror.c — estimators of MTD mixture weights in context (see mirror.h):
 * responsibilities, mirror descent, the Bayes posterior mean (Gibbs with R-hat,
 * quadrature for m = 2), the three-layer construction, predictors, KL, and
 * tuning on a grid. GSL provides the random numbers, the Dirichlet draws and the
 * integration. */
#include "mirror.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

/* ---- validation and small helpers ---- */

mp_status mp_mirror_check(const mp_mirror_data *d) {
    if (!d || !d->pi || !d->tokens) return mp_error(MP_ERR_ARG, "mirror: NULL data, pi or tokens");
    if (d->q < 2) return mp_error(MP_ERR_ARG, "mirror: q must be >= 2 (got %d)", d->q);
    if (d->m < 1) return mp_error(MP_ERR_ARG, "mirror: m must be >= 1 (got %d)", d->m);
    if (d->B < 1) return mp_error(MP_ERR_ARG, "mirror: need at least one sequence (B = %d)", d->B);
    if (d->T < d->m)
        return mp_error(MP_ERR_ARG, "mirror: sequences of T = %d tokens are shorter than m = %d lags", d->T, d->m);
    size_t qq, bt;
    if (mp_mul_size((size_t)d->q, (size_t)d->q, &qq) || mp_mul_size((size_t)d->B, (size_t)d->T, &bt))
        return mp_error(MP_ERR_NOMEM, "mirror: q*q or B*T overflows");
    for (int u = 0; u < d->q; u++) {
        double s = 0.0;
        for (int v = 0; v < d->q; v++) {
            double x = d->pi[(size_t)u * d->q + v];
            if (!isfinite(x) || x < 0.0)
                return mp_error(MP_ERR_ARG, "mirror: pi[%d][%d] = %g is not a probability", u, v, x);
            s += x;
        }
        if (fabs(s - 1.0) > 1e-4) return mp_error(MP_ERR_ARG, "mirror: row %d of pi sums to %.9g, not 1", u, s);
    }
    for (size_t i = 0; i < bt; i++)
        if (d->tokens[i] < 0 || d->tokens[i] >= d->q)
            return mp_error(MP_ERR_ARG, "mirror: token %d at [%zu][%zu] is outside 0..%d", (int)d->tokens[i],
                            i / (size_t)d->T, i % (size_t)d->T, d->q - 1);
    /* every observation must be possible under some lag */
    for (int b = 0; b < d->B; b++) {
        const int32_t *y = d->tokens + (size_t)b * d->T;
        for (int k = d->m; k < d->T; k++) {
            double s = 0.0;
            for (int g = 1; g <= d->m; g++) s += d->pi[(size_t)y[k - g] * d->q + y[k]];
            if (!(s > 0.0))
                return mp_error(MP_ERR_ARG, "mirror: sequence %d, position %d: token %d has probability 0 under "
                                "every lag", b, k, (int)y[k]);
        }
    }
    return MP_OK;
}

/* a_k(g) = pi*(y_{k-g}, y_k), g = 1..m (index g-1). */
static inline double evid(const mp_mirror_data *d, const int32_t *y, int k, int g) {
    return d->pi[(size_t)y[k - g] * d->q + y[k]];
}

/* In-place softmax of x[0..n) (x may hold -inf; not all of them). */
static void softmax(double *x, int n) {
    double mx = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) {
        x[i] = exp(x[i] - mx);
        s += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= s;
}

double mp_mirror_kl(const double *p, const double *r, int n) {
    double kl = 0.0;
    for (int i = 0; i < n; i++) {
        if (!(p[i] > 0.0)) continue;
        if (!(r[i] > 0.0)) return INFINITY;
        kl += p[i] * (log(p[i]) - log(r[i]));
    }
    return kl;
}

/* Predictor of sequence y into out[q]. */
static void predict_one(const mp_mirror_data *d, const int32_t *y, const double *lambda, double *out) {
    for (int v = 0; v < d->q; v++) out[v] = 0.0;
    for (int g = 1; g <= d->m; g++) {
        const double *row = d->pi + (size_t)y[d->T - g] * d->q;
        double w = lambda[g - 1];
        for (int v = 0; v < d->q; v++) out[v] += w * row[v];
    }
}

mp_status mp_mirror_predict(const mp_mirror_data *d, const double *lambda, double *pred) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    for (size_t i = 0; i < (size_t)d->B * d->m; i++)
        if (!isfinite(lambda[i]) || lambda[i] < 0.0)
            return mp_error(MP_ERR_ARG, "mirror: lambda[%zu][%zu] = %g is not a nonnegative weight", i / d->m,
                            i % d->m, lambda[i]);
    for (int b = 0; b < d->B; b++)
        predict_one(d, d->tokens + (size_t)b * d->T, lambda + (size_t)b * d->m, pred + (size_t)b * d->q);
    return MP_OK;
}

mp_status mp_mirror_responsibilities(const mp_mirror_data *d, double *gamma) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    const int N = d->T - d->m, m = d->m;
    for (int b = 0; b < d->B; b++) {
        const int32_t *y = d->tokens + (size_t)b * d->T;
        for (int i = 0; i < N; i++) {
            double *row = gamma + ((size_t)b * N + i) * m, s = 0.0;
            for (int g = 1; g <= m; g++) s += row[g - 1] = evid(d, y, m + i, g);
            for (int g = 0; g < m; g++) row[g] /= s;
        }
    }
    return MP_OK;
}

/* ---- mirror descent ---- */

/* steps of MD on sequence y into lambda[m]; work[m] holds log lambda. */
static void md_one(const mp_mirror_data *d, const int32_t *y, double eta, int steps, double *lambda,
                   double *work) {
    const int m = d->m;
    for (int g = 0; g < m; g++) {
        lambda[g] = 1.0 / m;
        work[g] = 0.0;
    }
    for (int s = 0; s < steps; s++) {
        /* grad_g = sum_k a_k(g) / sum_h lambda_h a_k(h), accumulated into lambda's
         * slot only after the pass (lambda is read throughout) */
        double *grad = work + m;
        for (int g = 0; g < m; g++) grad[g] = 0.0;
        for (int k = m; k < d->T; k++) {
            double den = 0.0;
            for (int g = 1; g <= m; g++) den += lambda[g - 1] * evid(d, y, k, g);
            if (den < 1e-300) den = 1e-300;
            for (int g = 1; g <= m; g++) grad[g - 1] += evid(d, y, k, g) / den;
        }
        for (int g = 0; g < m; g++) {
            double u = eta * grad[g];
            if (!(u < 1e300)) u = 1e300;
            work[g] += u;
            lambda[g] = work[g];
        }
        softmax(lambda, m);
        /* keep log lambda bounded (shift by its max) */
        double mx = -INFINITY;
        for (int g = 0; g < m; g++)
            if (work[g] > mx) mx = work[g];
        for (int g = 0; g < m; g++) work[g] -= mx;
    }
}

static mp_status check_param(double x, const char *what) {
    if (!isfinite(x) || x < 0.0) return mp_error(MP_ERR_ARG, "mirror: %s must be finite and >= 0 (got %g)", what, x);
    return MP_OK;
}

mp_status mp_mirror_descent(const mp_mirror_data *d, double eta, int steps, double *lambda) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    if ((st = check_param(eta, "eta"))) return st;
    if (steps < 0) return mp_error(MP_ERR_ARG, "mirror: steps must be >= 0 (got %d)", steps);
    double *work = mp_malloc(2 * (size_t)d->m * sizeof *work, "mirror descent workspace");
    if (!work) return MP_ERR_NOMEM;
    for (int b = 0; b < d->B; b++) md_one(d, d->tokens + (size_t)b * d->T, eta, steps, lambda + (size_t)b * d->m, work);
    free(work);
    return MP_OK;
}

/* ---- the three-layer construction ---- */

/* work: 2m doubles. Layer 1 computes gamma_k by attention over the m previous
 * positions; layer 2 averages uniformly; layer 3 reads out with beta. */
static void construction_one(const mp_mirror_data *d, const int32_t *y, double beta, double *lambda, double *pred,
                             double *work) {
    const int m = d->m, N = d->T - d->m;
    double *gbar = work, *att = work + m;
    for (int g = 0; g < m; g++) gbar[g] = 0.0;
    for (int k = m; k < d->T; k++) {
        /* layer 1: query y_k, keys y_{k-g}: score log pi*(y_{k-g}, y_k); value one-hot(g) */
        for (int g = 1; g <= m; g++) {
            double a = evid(d, y, k, g);
            att[g - 1] = a > 0.0 ? log(a) : -INFINITY;
        }
        softmax(att, m);
        /* layer 2: uniform attention over the N observations */
        for (int g = 0; g < m; g++) gbar[g] += att[g] / N;
    }
    /* layer 3: query at T-1, keys at T-g with score beta * gbar(g) */
    for (int g = 0; g < m; g++) lambda[g] = beta * gbar[g];
    softmax(lambda, m);
    if (pred) predict_one(d, y, lambda, pred);
}

mp_status mp_mirror_construction(const mp_mirror_data *d, double beta, double *lambda, double *pred) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    if ((st = check_param(beta, "beta"))) return st;
    double *work = mp_malloc(2 * (size_t)d->m * sizeof *work, "construction workspace");
    if (!work) return MP_ERR_NOMEM;
    for (int b = 0; b < d->B; b++)
        construction_one(d, d->tokens + (size_t)b * d->T, beta, lambda + (size_t)b * d->m,
                         pred ? pred + (size_t)b * d->q : NULL, work);
    free(work);
    return MP_OK;
}

/* ---- tuning ---- */

mp_status mp_mirror_tune(const mp_mirror_data *d, const double *truth, mp_mirror_method method, int steps,
                         const double *grid, int n_grid, double *mean_kl, mp_mirror_tuned *out) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    if (method != MP_MIRROR_MD && method != MP_MIRROR_CONSTRUCTION)
        return mp_error(MP_ERR_ARG, "mirror: unknown tuning method %d", (int)method);
    if (method == MP_MIRROR_MD && steps < 1) return mp_error(MP_ERR_ARG, "mirror: steps must be >= 1 (got %d)", steps);
    if (n_grid < 1) return mp_error(MP_ERR_ARG, "mirror: empty grid");
    for (int j = 0; j < n_grid; j++) {
        if (!isfinite(grid[j]) || grid[j] <= 0.0)
            return mp_error(MP_ERR_ARG, "mirror: grid[%d] = %g must be finite and > 0", j, grid[j]);
        if (j && grid[j] <= grid[j - 1]) return mp_error(MP_ERR_ARG, "mirror: the grid must be increasing (at %d)", j);
    }
    for (size_t i = 0; i < (size_t)d->B * d->q; i++)
        if (!isfinite(truth[i]) || truth[i] < 0.0)
            return mp_error(MP_ERR_ARG, "mirror: truth[%zu][%zu] = %g is not a probability", i / d->q, i % d->q,
                            truth[i]);
    size_t nkl, nw;
    if (mp_mul_size((size_t)d->B, (size_t)n_grid, &nkl)) return mp_error(MP_ERR_NOMEM, "mirror: B*n_grid overflows");
    double *kl = mp_malloc(nkl * sizeof *kl, "tuning table");
    if (!kl) return MP_ERR_NOMEM;
    int fail = 0;
    nw = 3 * (size_t)d->m + (size_t)d->q;
#pragma omp parallel for schedule(dynamic)
    for (int b = 0; b < d->B; b++) {
        double *w = malloc(nw * sizeof *w);
        if (!w) {
#pragma omp atomic write
            fail = 1;
            continue;
        }
        double *lam = w, *work = w + d->m, *pred = w + 3 * (size_t)d->m;
        const int32_t *y = d->tokens + (size_t)b * d->T;
        for (int j = 0; j < n_grid; j++) {
            if (method == MP_MIRROR_MD) {
                md_one(d, y, grid[j], steps, lam, work);
                predict_one(d, y, lam, pred);
            } else {
                construction_one(d, y, grid[j], lam, pred, work);
            }
            kl[(size_t)b * n_grid + j] = mp_mirror_kl(truth + (size_t)b * d->q, pred, d->q);
        }
        free(w);
    }
    if (fail) {
        free(kl);
        return mp_error(MP_ERR_NOMEM, "mirror: out of memory in tuning");
    }
    int best = 0;
    for (int j = 0; j < n_grid; j++) {
        double s = 0.0;
        for (int b = 0; b < d->B; b++) s += kl[(size_t)b * n_grid + j];
        mean_kl[j] = s / d->B;
        if (mean_kl[j] < mean_kl[best]) best = j;
    }
    free(kl);
    if (out) {
        out->best = best;
        out->best_kl = mean_kl[best];
        out->value = grid[best];
        if (best > 0 && best < n_grid - 1 && isfinite(mean_kl[best - 1]) && isfinite(mean_kl[best + 1])) {
            /* parabola through (log x, KL) at best-1, best, best+1 */
            double x0 = log(grid[best - 1]), x1 = log(grid[best]), x2 = log(grid[best + 1]);
            double y0 = mean_kl[best - 1], y1 = mean_kl[best], y2 = mean_kl[best + 1];
            double d01 = (y1 - y0) / (x1 - x0), d12 = (y2 - y1) / (x2 - x1), c = (d12 - d01) / (x2 - x0);
            if (c > 0.0) {
                double xv = 0.5 * (x0 + x1) - d01 / (2.0 * c);
                if (xv > x0 && xv < x2) out->value = exp(xv);
            }
        }
    }
    return MP_OK;
}

/* ---- Bayes: Gibbs sampler ---- */

mp_mirror_gibbs_params mp_mirror_gibbs_params_default(void) {
    mp_mirror_gibbs_params p = {4, 200, 1000, 1};
    return p;
}

/* A well-mixed seed for (base, sequence, chain) (splitmix64). */
static unsigned long mix_seed(unsigned long base, int b, int c) {
    uint64_t z = (uint64_t)base * 0x9E3779B97F4A7C15ull + (uint64_t)b * 0xBF58476D1CE4E5B9ull + (uint64_t)c + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (unsigned long)(z ^ (z >> 31));
}

/* One sequence. w: m*(5 + 2 chains) doubles then T flags. Returns 0 or -1 (RNG
 * allocation). */
static int gibbs_one(const mp_mirror_data *d, const int32_t *y, int b, const mp_mirror_gibbs_params *p, double *mean,
                     double *rhat, double *w) {
    const int m = d->m, N = d->T - d->m, C = p->chains, S = p->samples;
    if (N == 0) {
        for (int g = 0; g < m; g++) mean[g] = 1.0 / m;
        *rhat = 1.0;
        return 0;
    }
    double *lam = w, *alpha = w + m, *cnt = w + 2 * m, *pz = w + 3 * m, *rb = w + 4 * m;
    double *cmean = w + 5 * m, *cm2 = cmean + (size_t)C * m;   /* per chain Welford [C, m] */
    /* Observations with the same evidence on every lag (e.g. y_{k-1} = .. = y_{k-m})
     * multiply the likelihood by a constant: leaving them out is exact and makes
     * the data augmentation mix faster. */
    unsigned char *flat = (unsigned char *)(cm2 + (size_t)C * m);
    int n_inf = 0;
    for (int k = m; k < d->T; k++) {
        int same = 1;
        for (int g = 2; g <= m && same; g++) same = evid(d, y, k, g) == evid(d, y, k, 1);
        flat[k - m] = (unsigned char)same;
        n_inf += !same;
    }
    if (n_inf == 0) {
        for (int g = 0; g < m; g++) mean[g] = 1.0 / m;
        *rhat = 1.0;
        return 0;
    }
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) return -1;
    for (int g = 0; g < m; g++) rb[g] = 0.0;
    for (size_t i = 0; i < (size_t)C * m; i++) cmean[i] = cm2[i] = 0.0;
    for (int c = 0; c < C; c++) {
        gsl_rng_set(r, mix_seed(p->seed, b, c));
        for (int g = 0; g < m; g++) alpha[g] = 1.0;
        gsl_ran_dirichlet(r, (size_t)m, alpha, lam);   /* start from a prior draw */
        for (int it = 0; it < p->burn + S; it++) {
            for (int g = 0; g < m; g++) cnt[g] = 0.0;
            for (int k = m; k < d->T; k++) {
                if (flat[k - m]) continue;   /* the same evidence on every lag: a constant factor */
                double tot = 0.0;
                for (int g = 1; g <= m; g++) tot += pz[g - 1] = lam[g - 1] * evid(d, y, k, g);
                if (!(tot > 0.0)) { /* lambda underflowed on every possible lag: fall back to gamma */
                    tot = 0.0;
                    for (int g = 1; g <= m; g++) tot += pz[g - 1] = evid(d, y, k, g);
                }
                double u = gsl_rng_uniform(r) * tot;
                int z = m - 1;
                for (int g = 0; g < m; g++) {
                    if (u < pz[g]) { z = g; break; }
                    u -= pz[g];
                }
                while (z > 0 && pz[z] == 0.0) z--;   /* never a lag of zero weight (round-off) */
                cnt[z] += 1.0;
            }
            for (int g = 0; g < m; g++) alpha[g] = 1.0 + cnt[g];
            gsl_ran_dirichlet(r, (size_t)m, alpha, lam);
            if (it >= p->burn) {
                int n = it - p->burn + 1;
                for (int g = 0; g < m; g++) {
                    rb[g] += alpha[g] / (m + n_inf);
                    double *mu = cmean + (size_t)c * m + g, *m2 = cm2 + (size_t)c * m + g;
                    double dl = lam[g] - *mu;
                    *mu += dl / n;
                    *m2 += dl * (lam[g] - *mu);
                }
            }
        }
    }
    gsl_rng_free(r);
    for (int g = 0; g < m; g++) mean[g] = rb[g] / ((double)C * S);
    /* Gelman-Rubin: W = mean within-chain variance, Bv = S * variance of chain means */
    double worst = 1.0;
    for (int g = 0; g < m; g++) {
        double W = 0.0, gm = 0.0, Bv = 0.0;
        for (int c = 0; c < C; c++) {
            W += cm2[(size_t)c * m + g] / (S - 1);
            gm += cmean[(size_t)c * m + g];
        }
        W /= C;
        gm /= C;
        for (int c = 0; c < C; c++) {
            double dv = cmean[(size_t)c * m + g] - gm;
            Bv += dv * dv;
        }
        Bv *= (double)S / (C - 1);
        double R = W > 0.0 ? sqrt(((S - 1.0) / S * W + Bv / S) / W) : 1.0;
        if (R > worst) worst = R;
    }
    *rhat = worst;
    return 0;
}

mp_status mp_mirror_bayes(const mp_mirror_data *d, const mp_mirror_gibbs_params *p, double *mean, double *rhat) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    mp_mirror_gibbs_params def = mp_mirror_gibbs_params_default();
    if (!p) p = &def;
    if (p->chains < 2 || p->chains > 1000)
        return mp_error(MP_ERR_ARG, "mirror: Gibbs needs 2..1000 chains (got %d)", p->chains);
    if (p->samples < 2 || p->burn < 0)
        return mp_error(MP_ERR_ARG, "mirror: Gibbs needs samples >= 2 and burn >= 0 (got %d, %d)", p->samples, p->burn);
    size_t nw;
    if (mp_mul_size((size_t)d->m, 5 + 2 * (size_t)p->chains, &nw) || mp_add_size(nw, (size_t)d->T, &nw) ||
        nw > SIZE_MAX / sizeof(double))
        return mp_error(MP_ERR_NOMEM, "mirror: Gibbs workspace overflows");
    int fail = 0;
#pragma omp parallel for schedule(dynamic)
    for (int b = 0; b < d->B; b++) {
        double *w = malloc(nw * sizeof *w), rh;
        if (!w || gibbs_one(d, d->tokens + (size_t)b * d->T, b, p, mean + (size_t)b * d->m, &rh, w)) {
#pragma omp atomic write
            fail = 1;
        } else if (rhat) {
            rhat[b] = rh;
        }
        free(w);
    }
    if (fail) return mp_error(MP_ERR_NOMEM, "mirror: out of memory in the Gibbs sampler");
    return MP_OK;
}

/* ---- Bayes for m = 2 by quadrature ---- */

typedef struct {
    const mp_mirror_data *d;
    const int32_t *y;
    double logmax;
    int moment;   /* 0: density, 1: x * density */
} post2;

static double log_post2(const post2 *c, double x) {
    double s = 0.0;
    for (int k = 2; k < c->d->T; k++) {
        double a1 = evid(c->d, c->y, k, 1), a2 = evid(c->d, c->y, k, 2);
        s += log(x * a1 + (1.0 - x) * a2);
    }
    return s;
}

static double dlog_post2(const post2 *c, double x) {
    double s = 0.0;
    for (int k = 2; k < c->d->T; k++) {
        double a1 = evid(c->d, c->y, k, 1), a2 = evid(c->d, c->y, k, 2);
        if (a1 != a2) s += (a1 - a2) / (x * a1 + (1.0 - x) * a2);
    }
    return s;
}

static double integrand2(double x, void *vp) {
    const post2 *c = vp;
    double f = exp(log_post2(c, x) - c->logmax);
    return c->moment ? x * f : f;
}

mp_status mp_mirror_bayes_exact(const mp_mirror_data *d, double *mean) {
    mp_status st = mp_mirror_check(d);
    if (st) return st;
    if (d->m != 2) return mp_error(MP_ERR_ARG, "mirror: the exact posterior mean needs m = 2 (got m = %d)", d->m);
    gsl_integration_workspace *ws = gsl_integration_workspace_alloc(2000);
    if (!ws) return mp_error(MP_ERR_NOMEM, "mirror: cannot allocate the integration workspace");
    st = MP_OK;
    for (int b = 0; b < d->B && !st; b++) {
        post2 c = {d, d->tokens + (size_t)b * d->T, 0.0, 0};
        /* the log-posterior is concave: its mode by bisection on the derivative */
        double mode;
        if (dlog_post2(&c, 0.0) <= 0.0) {
            mode = 0.0;
        } else if (dlog_post2(&c, 1.0) >= 0.0) {
            mode = 1.0;
        } else {
            double lo = 0.0, hi = 1.0;
            for (int it = 0; it < 200 && hi - lo > 1e-15; it++) {
                double mid = 0.5 * (lo + hi);
                if (dlog_post2(&c, mid) > 0.0) lo = mid;
                else hi = mid;
            }
            mode = 0.5 * (lo + hi);
        }
        c.logmax = log_post2(&c, mode);
        double pts[3] = {0.0, mode, 1.0}, I[2], err;
        size_t npts = (mode > 0.0 && mode < 1.0) ? 3 : 2;
        if (npts == 2) pts[1] = 1.0;
        gsl_function F = {integrand2, &c};
        for (int mom = 0; mom < 2 && !st; mom++) {
            c.moment = mom;
            int rc = gsl_integration_qagp(&F, pts, npts, 1e-14, 1e-11, 2000, ws, &I[mom], &err);
            if (rc && rc != GSL_EROUND)
                st = mp_error(MP_ERR_GSL, "mirror: sequence %d: quadrature of the posterior failed: %s", b,
                              gsl_strerror(rc));
        }
        if (!st) {
            mean[(size_t)b * 2] = I[1] / I[0];
            mean[(size_t)b * 2 + 1] = 1.0 - I[1] / I[0];
        }
    }
    gsl_integration_workspace_free(ws);
    return st;
}

/* ---- power-law fit ---- */

mp_status mp_mirror_fit_loglog(const double *x, const double *y, int n, mp_mirror_fit *out) {
    if (n < 3) return mp_error(MP_ERR_ARG, "mirror: a log-log fit needs at least 3 points (got %d)", n);
    double *lx = mp_malloc(2 * (size_t)n * sizeof *lx, "log-log fit"), *ly = lx ? lx + n : NULL;
    if (!lx) return MP_ERR_NOMEM;
    mp_status st = MP_OK;
    for (int i = 0; i < n && !st; i++) {
        if (!(x[i] > 0.0) || !(y[i] > 0.0) || !isfinite(x[i]) || !isfinite(y[i]))
            st = mp_error(MP_ERR_ARG, "mirror: log-log fit: point %d (%g, %g) is not positive and finite", i, x[i], y[i]);
        else {
            lx[i] = log(x[i]);
            ly[i] = log(y[i]);
        }
    }
    double c0, c1, cov00, cov01, cov11, sumsq;
    if (!st) {
        int rc = gsl_fit_linear(lx, 1, ly, 1, (size_t)n, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
        if (rc) st = mp_error(MP_ERR_GSL, "mirror: log-log fit failed: %s", gsl_strerror(rc));
    }
    if (!st) {
        double mean = 0.0, tss = 0.0;
        for (int i = 0; i < n; i++) mean += ly[i] / n;
        for (int i = 0; i < n; i++) tss += (ly[i] - mean) * (ly[i] - mean);
        out->slope = c1;
        out->intercept = c0;
        out->slope_se = sqrt(cov11);
        out->r2 = tss > 0.0 ? 1.0 - sumsq / tss : 1.0;
        out->n = n;
    }
    free(lx);
    return st;
}
