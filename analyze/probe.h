/* probe.h — linear probes: read a property out of activations with a linear
 * map. Two fits over row-major float features X [n, d]:
 *
 *   linear    ridge least squares  min ||y - Xw - b||^2 + ridge ||w||^2
 *             (GSL: gsl_multifit_linear_tsvd when ridge = 0, else the SVD
 *             Tikhonov solution gsl_multifit_linear_solve); y any real target,
 *             accuracy = share of (score > 0.5) == (y > 0.5) for 0/1 labels.
 *   logistic  ridge logistic regression by IRLS (Newton steps with a GSL
 *             Cholesky solve), y in {0, 1}, P(y = 1 | x) = sigmoid(w.x + b);
 *             minimises the summed log-loss + ridge/2 ||w||^2.
 *
 * With `standardize` the features are z-scored before fitting (constant
 * features keep scale 1) and the ridge acts on the standardized weights; the
 * result is always returned in the original units (w, b apply to raw x). The
 * intercept is never penalised. */
#ifndef MP_PROBE_H
#define MP_PROBE_H

#include <stddef.h>

#include "mp_common.h"

typedef enum { MP_PROBE_LINEAR = 0, MP_PROBE_LOGISTIC } mp_probe_kind;

typedef struct {
    mp_probe_kind kind;
    double ridge;      /* L2 penalty on the (standardized) weights, >= 0 */
    int standardize;   /* z-score features first (default 1) */
    int max_iter;      /* IRLS iterations (logistic) */
    double tol;        /* IRLS stops when the largest Newton step is below tol */
} mp_probe_params;

typedef struct {
    mp_probe_kind kind;
    size_t d;
    double *w;         /* [d] weights in the original feature units */
    double b;          /* intercept */
    double loss;       /* linear: mean squared residual; logistic: mean log-loss */
    double train_acc;  /* accuracy on the training set (threshold 0.5) */
    double r2;         /* linear: coefficient of determination; logistic: NaN */
    int iterations;    /* IRLS iterations (0 for linear) */
    int converged;     /* 1 unless IRLS hit max_iter */
    size_t rank;       /* linear with ridge 0: effective rank of the SVD solve */
} mp_probe;

/* linear, ridge 0, standardize 1, max_iter 100, tol 1e-8. */
mp_probe_params mp_analyze_probe_params_default(void);

/* Fits a probe of kind p->kind on X [n, d] and y [n] (0/1 for logistic).
 * Needs n >= 2; a logistic fit needs both classes present. *out is
 * initialised by the call (free it with mp_analyze_probe_free). */
mp_status mp_analyze_probe_fit(const float *X, const double *y, size_t n, size_t d, const mp_probe_params *p,
                               mp_probe *out);

/* Score of one row x [d]: w.x + b (linear) or sigmoid(w.x + b) (logistic). */
double mp_analyze_probe_score(const mp_probe *pr, const float *x);

/* Scores of n rows into out [n]; and the accuracy (score > 0.5 against
 * y > 0.5) over n rows. */
void mp_analyze_probe_scores(const mp_probe *pr, const float *X, size_t n, double *out);
double mp_analyze_probe_accuracy(const mp_probe *pr, const float *X, const double *y, size_t n);

void mp_analyze_probe_free(mp_probe *pr);   /* NULL-safe, idempotent */

#endif
