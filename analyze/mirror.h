/* mirror.h — in-context estimators of the mixture weights of Mixture of
 * Transition Distributions (MTD) sequences (tasks/mtd.h), for the mirror-descent
 * probe: responsibilities, mirror descent (exponentiated gradient) from the
 * uniform start, the Bayes posterior mean under the Dirichlet(1) prior (Gibbs
 * sampler with several chains and R-hat; exact quadrature for m = 2), the
 * three-layer attention construction, next-token predictors and their KL to the
 * truth, and tuning of a step size / temperature on a grid.
 *
 * Setting. Tokens y_0..y_{T-1} in {0..q-1}, m lags, a fixed row-stochastic
 * pi*[q,q] (pi[u*q + v] = P(next = v | lagged token = u)). The observations are
 * the positions k = m..T-1 (N = T - m of them; T = m gives none); observation k
 * has the evidence a_k(g) = pi*(y_{k-g}, y_k), g = 1..m, and the likelihood
 * sum_g lambda_g a_k(g). Every estimator returns lambda_hat [m] (index g-1) for
 * predicting y_T, whose predictor is
 *     p_hat(v) = sum_g lambda_hat_g pi*(y_{T-g}, v)             (mp_mirror_predict)
 * (the true next-token distribution is the same sum with the true lambda, i.e.
 * MTD's next[T-1]).
 *
 *   responsibilities  gamma_k(g) = a_k(g) / sum_h a_k(h)
 *   mirror descent    grad_g(lambda) = sum_k a_k(g) / sum_h lambda_h a_k(h)
 *                     lambda <- lambda * exp(eta grad) / Z, from lambda = 1/m;
 *                     one step is softmax_g(eta m sum_k gamma_k(g))
 *   Bayes             E[lambda | y] under lambda ~ Dirichlet(1_m)
 *   construction      layer 1: the query at k attends to keys k-1..k-m with
 *                     scores log pi*(y_{k-g}, y_k) (value: one-hot lag g), giving
 *                     gamma_k; layer 2: uniform attention over the observations,
 *                     giving gbar = mean_k gamma_k; layer 3: the last query
 *                     attends to positions T-g with scores beta * gbar(g) (value:
 *                     pi*(y_{T-g}, .)). Its weights softmax(beta gbar) equal one
 *                     step of mirror descent with eta = beta / (m N).
 *
 * All functions take a batch of B sequences of the same length and work on each
 * independently (OpenMP over sequences; the Gibbs sampler seeds one generator
 * per sequence and chain, so results do not depend on the thread count).
 * Inputs are validated (pi finite, >= 0, rows summing to 1 within 1e-4; tokens
 * in range; T >= m; an observation impossible under every lag is an error). */
#ifndef MP_ANALYZE_MIRROR_H
#define MP_ANALYZE_MIRROR_H

#include <stdint.h>

#include "mp_common.h"

typedef struct {
    int q, m;               /* vocabulary size (>= 2), lags (>= 1) */
    const double *pi;       /* [q, q] row-stochastic transition matrix pi* */
    int B, T;               /* sequences, tokens per sequence (T >= m) */
    const int32_t *tokens;  /* [B, T] token ids in 0..q-1 */
} mp_mirror_data;

/* Validates d (see above); MP_ERR_ARG names what is wrong. Every function below
 * calls it first. */
mp_status mp_mirror_check(const mp_mirror_data *d);

/* gamma [B, T-m, m]: row i is observation k = m + i (0-based positions). */
mp_status mp_mirror_responsibilities(const mp_mirror_data *d, double *gamma);

/* `steps` (>= 0) steps of mirror descent with step eta (finite, >= 0) from the
 * uniform lambda, into lambda [B, m]. Computed in log space (no overflow for
 * large eta). */
mp_status mp_mirror_descent(const mp_mirror_data *d, double eta, int steps, double *lambda);

typedef struct {
    int chains;           /* independent chains (>= 2 for R-hat; default 4) */
    int burn;             /* burn-in sweeps per chain (default 200) */
    int samples;          /* kept sweeps per chain (>= 2; default 1000) */
    unsigned long seed;   /* base seed (default 1) */
} mp_mirror_gibbs_params;
mp_mirror_gibbs_params mp_mirror_gibbs_params_default(void);

/* Posterior mean of lambda under the Dirichlet(1) prior by Gibbs sampling:
 * Z_k | lambda ~ Categorical(lambda_g a_k(g) / sum), lambda | Z ~
 * Dirichlet(1 + counts) (gsl_ran_dirichlet). Chains start from prior draws.
 * Observations whose evidence is the same on every lag (a constant likelihood
 * factor) are left out, which is exact and speeds up mixing. mean [B, m] is the
 * Rao-Blackwellised average of E[lambda | Z] = (1 + counts) / (m + N') (N' the
 * informative observations) over the kept sweeps of all chains; rhat [B] (or
 * NULL) the largest Gelman-Rubin potential scale reduction factor over the m
 * components of the lambda draws (1 when N' = 0: the posterior is the prior,
 * returned exactly). */
mp_status mp_mirror_bayes(const mp_mirror_data *d, const mp_mirror_gibbs_params *p, double *mean, double *rhat);

/* The same posterior mean for m = 2 by quadrature (gsl_integration_qagp over
 * lambda_1 in [0, 1], the log-concave posterior scaled by its mode), into mean
 * [B, 2]; relative accuracy ~1e-10. MP_ERR_ARG when m != 2, MP_ERR_GSL when the
 * integration fails. */
mp_status mp_mirror_bayes_exact(const mp_mirror_data *d, double *mean);

/* The three-layer construction with readout temperature beta (finite, >= 0):
 * lambda [B, m] (the third layer's attention weights) and, when pred is not
 * NULL, its output pred [B, q] (the predictor). */
mp_status mp_mirror_construction(const mp_mirror_data *d, double beta, double *lambda, double *pred);

/* Predictors pred [B, q] from lambda [B, m] (any nonnegative weights). */
mp_status mp_mirror_predict(const mp_mirror_data *d, const double *lambda, double *pred);

/* KL(p || r) = sum_{p_i > 0} p_i log(p_i / r_i) in nats; +inf when some r_i <= 0
 * has p_i > 0. */
double mp_mirror_kl(const double *p, const double *r, int n);

typedef enum {
    MP_MIRROR_MD = 0,          /* mirror descent; the grid holds step sizes eta */
    MP_MIRROR_CONSTRUCTION     /* the construction; the grid holds beta (steps unused) */
} mp_mirror_method;

typedef struct {
    int best;          /* grid index with the smallest mean KL */
    double value;      /* refined optimum: vertex of the parabola through the best
                        * grid point and its neighbours in log(value) (the grid
                        * value itself at an edge or where the fit is not convex) */
    double best_kl;    /* mean KL at grid[best] */
} mp_mirror_tuned;

/* Mean over the batch of KL(truth_b || predictor_b) for each grid value
 * (grid: n_grid >= 1 values > 0, increasing), into mean_kl [n_grid]; truth
 * [B, q] are the true next-token distributions. */
mp_status mp_mirror_tune(const mp_mirror_data *d, const double *truth, mp_mirror_method method, int steps,
                         const double *grid, int n_grid, double *mean_kl, mp_mirror_tuned *out);

/* Least-squares fit of log y = intercept + slope log x over the n points with
 * x, y > 0 (gsl_fit_linear), e.g. best step size against T; at least 3 points.
 * slope_se is the standard error of the slope, r2 the coefficient of
 * determination. */
typedef struct {
    double slope, intercept, slope_se, r2;
    int n;
} mp_mirror_fit;
mp_status mp_mirror_fit_loglog(const double *x, const double *y, int n, mp_mirror_fit *out);

#endif
