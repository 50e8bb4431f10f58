/* probe.c — linear probes (probe.h): ridge least squares through GSL's QR and
 * SVD solvers and ridge logistic regression by IRLS (Newton steps solved by GSL
 * Cholesky, products by gsl_blas on top of OpenBLAS), both on centred /
 * standardized features, with the result mapped back to the raw units. */
#include "probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_vector.h>

mp_probe_params mp_analyze_probe_params_default(void) {
    mp_probe_params p = {MP_PROBE_LINEAR, 0.0, 1, 100, 1e-8};
    return p;
}

void mp_analyze_probe_free(mp_probe *pr) {
    if (!pr) return;
    free(pr->w);
    pr->w = NULL;
}

static double sigmoid(double z) {
    if (z >= 0) return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

/* log(1 + exp(z)) without overflow */
static double softplus(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }

double mp_analyze_probe_score(const mp_probe *pr, const float *x) {
    double s = pr->b;
    for (size_t j = 0; j < pr->d; j++) s += pr->w[j] * (double)x[j];
    return pr->kind == MP_PROBE_LOGISTIC ? sigmoid(s) : s;
}

void mp_analyze_probe_scores(const mp_probe *pr, const float *X, size_t n, double *out) {
    for (size_t i = 0; i < n; i++) out[i] = mp_analyze_probe_score(pr, X + i * pr->d);
}

double mp_analyze_probe_accuracy(const mp_probe *pr, const float *X, const double *y, size_t n) {
    if (n == 0) return NAN;
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) ok += (mp_analyze_probe_score(pr, X + i * pr->d) > 0.5) == (y[i] > 0.5);
    return (double)ok / (double)n;
}

/* Z [n, d] = (X - mu) / sd (sd = 1 without standardize or for constant columns). */
static void standardize(const float *X, size_t n, size_t d, int scale, double *mu, double *sd, gsl_matrix *Z,
                        size_t col0) {
    for (size_t j = 0; j < d; j++) {
        double m = 0.0, v = 0.0;
        for (size_t i = 0; i < n; i++) m += X[i * d + j];
        m /= (double)n;
        for (size_t i = 0; i < n; i++) {
            double e = X[i * d + j] - m;
            v += e * e;
        }
        double s = sqrt(v / (double)n);
        mu[j] = m;
        sd[j] = (scale && s > 1e-12 * (fabs(m) + 1.0)) ? s : 1.0;
        for (size_t i = 0; i < n; i++) gsl_matrix_set(Z, i, col0 + j, (X[i * d + j] - m) / sd[j]);
    }
}

static mp_status fit_linear(const float *X, const double *y, size_t n, size_t d, const mp_probe_params *p,
                            mp_probe *out, double *mu, double *sd) {
    mp_status st = MP_OK;
    gsl_matrix *Z = gsl_matrix_alloc(n, d);
    gsl_vector *yc = gsl_vector_alloc(n), *c = gsl_vector_alloc(d);
    gsl_matrix *cov = gsl_matrix_alloc(d, d), *T = NULL, *R = NULL;
    gsl_vector *qwork = NULL;
    /* n >= 2d: QR first (below), the solvers then work on d x d */
    const int qr = n >= 2 * d;
    gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc(qr ? d : n, d);
    if (qr) {
        T = gsl_matrix_alloc(d, d);
        R = gsl_matrix_calloc(d, d);
        qwork = gsl_vector_alloc(d);
    }
    if (!Z || !yc || !c || !cov || !ws || (qr && (!T || !R || !qwork))) {
        st = mp_error(MP_ERR_NOMEM, "linear probe: out of memory for %zu x %zu features", n, d);
        goto cleanup;
    }
    standardize(X, n, d, p->standardize, mu, sd, Z, 0);
    double ybar = 0.0;
    for (size_t i = 0; i < n; i++) ybar += y[i];
    ybar /= (double)n;
    for (size_t i = 0; i < n; i++) gsl_vector_set(yc, i, y[i] - ybar);
    /* With n >= 2d rows, Z = Q R first (GSL's recursive, level-3 BLAS QR) and the
     * SVD solvers run on the d x d triangle R against the first d entries of Q'y:
     * R has Z's singular values and column norms, and ||Z c - y||^2 = ||R c - Q1'y||^2
     * + ||Q2'y||^2, so the truncated and the ridge solutions are Z's; the SVD of
     * the n x d matrix (one-sided Jacobi in GSL, unblocked) took seconds at
     * 4000 x 256. */
    gsl_matrix *A = Z;
    gsl_vector *rhs = yc;
    int rc = 0;
    gsl_vector_view y1;
    if (qr) {
        y1 = gsl_vector_subvector(yc, 0, d);
        rc = gsl_linalg_QR_decomp_r(Z, T);
        if (!rc) rc = gsl_linalg_QR_QTvec_r(Z, T, yc, qwork);
        if (!rc) {
            for (size_t i = 0; i < d; i++)
                for (size_t j = i; j < d; j++) gsl_matrix_set(R, i, j, gsl_matrix_get(Z, i, j));
            A = R;
            rhs = &y1.vector;
        }
    }
    if (!rc && p->ridge == 0.0) {
        double chisq;
        rc = gsl_multifit_linear_tsvd(A, rhs, 1e-12, c, cov, &chisq, &out->rank, ws);
    } else if (!rc) {
        double rnorm, snorm;
        rc = gsl_multifit_linear_svd(A, ws);
        if (!rc) rc = gsl_multifit_linear_solve(sqrt(p->ridge), A, rhs, c, &rnorm, &snorm, ws);
        out->rank = d;
    }
    if (rc) {
        st = mp_error(MP_ERR_GSL, "linear probe: GSL least squares failed: %s", gsl_strerror(rc));
        goto cleanup;
    }
    double b = ybar, sse = 0.0, sst = 0.0;
    for (size_t j = 0; j < d; j++) {
        out->w[j] = gsl_vector_get(c, j) / sd[j];
        b -= out->w[j] * mu[j];
    }
    out->b = b;
    for (size_t i = 0; i < n; i++) {
        double e = y[i] - mp_analyze_probe_score(out, X + i * d);
        sse += e * e;
        sst += (y[i] - ybar) * (y[i] - ybar);
    }
    out->loss = sse / (double)n;
    out->r2 = sst > 0 ? 1.0 - sse / sst : NAN;
    out->converged = 1;
cleanup:
    if (ws) gsl_multifit_linear_free(ws);
    gsl_vector_free(qwork);
    gsl_matrix_free(R);
    gsl_matrix_free(T);
    gsl_matrix_free(cov);
    gsl_vector_free(c);
    gsl_vector_free(yc);
    gsl_matrix_free(Z);
    return st;
}

/* Penalised log-loss sum_i [softplus(eta_i) - y_i eta_i] + ridge/2 |c_1..d|^2 at c. */
static double logistic_objective(const gsl_matrix *Z, const double *y, const gsl_vector *c, double ridge,
                                 gsl_vector *eta) {
    gsl_blas_dgemv(CblasNoTrans, 1.0, Z, c, 0.0, eta);
    double f = 0.0;
    for (size_t i = 0; i < Z->size1; i++) {
        double e = gsl_vector_get(eta, i);
        f += softplus(e) - y[i] * e;
    }
    for (size_t j = 1; j < c->size; j++) f += 0.5 * ridge * gsl_vector_get(c, j) * gsl_vector_get(c, j);
    return f;
}

static mp_status fit_logistic(const float *X, const double *y, size_t n, size_t d, const mp_probe_params *p,
                              mp_probe *out, double *mu, double *sd) {
    mp_status st = MP_OK;
    const size_t q = d + 1; /* column 0 is the intercept */
    gsl_matrix *Z = gsl_matrix_alloc(n, q), *ZW = gsl_matrix_alloc(n, q), *Hm = gsl_matrix_alloc(q, q);
    gsl_vector *c = gsl_vector_calloc(q), *c_new = gsl_vector_alloc(q), *g = gsl_vector_alloc(q);
    gsl_vector *step = gsl_vector_alloc(q), *eta = gsl_vector_alloc(n), *r = gsl_vector_alloc(n);
    if (!Z || !ZW || !Hm || !c || !c_new || !g || !step || !eta || !r) {
        st = mp_error(MP_ERR_NOMEM, "logistic probe: out of memory for %zu x %zu features", n, d);
        goto cleanup;
    }
    size_t n1 = 0;
    for (size_t i = 0; i < n; i++) {
        if (y[i] != 0.0 && y[i] != 1.0) {
            st = mp_error(MP_ERR_ARG, "logistic probe: label %zu is %g; labels must be 0 or 1", i + 1, y[i]);
            goto cleanup;
        }
        n1 += y[i] == 1.0;
    }
    if (n1 == 0 || n1 == n) {
        st = mp_error(MP_ERR_ARG, "logistic probe: all %zu labels are %d; both classes are needed", n, n1 ? 1 : 0);
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) gsl_matrix_set(Z, i, 0, 1.0);
    standardize(X, n, d, p->standardize, mu, sd, Z, 1);
    /* start at the intercept-only solution */
    gsl_vector_set(c, 0, log((double)n1 / (double)(n - n1)));
    double f = logistic_objective(Z, y, c, p->ridge, eta);
    out->converged = 0;
    int it;
    for (it = 1; it <= p->max_iter; it++) {
        /* gradient g = Z'(y - mu) - ridge c (no penalty on the intercept); ZW = sqrt(W) Z */
        for (size_t i = 0; i < n; i++) {
            double m = sigmoid(gsl_vector_get(eta, i)), w = m * (1.0 - m);
            gsl_vector_set(r, i, y[i] - m);
            double sw = sqrt(w > 1e-300 ? w : 1e-300);
            for (size_t j = 0; j < q; j++) gsl_matrix_set(ZW, i, j, sw * gsl_matrix_get(Z, i, j));
        }
        gsl_blas_dgemv(CblasTrans, 1.0, Z, r, 0.0, g);
        gsl_blas_dsyrk(CblasLower, CblasTrans, 1.0, ZW, 0.0, Hm); /* Z'WZ, lower triangle */
        for (size_t j = 1; j < q; j++) {
            gsl_vector_set(g, j, gsl_vector_get(g, j) - p->ridge * gsl_vector_get(c, j));
            gsl_matrix_set(Hm, j, j, gsl_matrix_get(Hm, j, j) + p->ridge);
        }
        int rc = gsl_linalg_cholesky_decomp1(Hm);
        if (!rc) rc = gsl_linalg_cholesky_solve(Hm, g, step);
        if (rc) {
            st = mp_error(MP_ERR_GSL,
                          "logistic probe: the Hessian is singular at iteration %d (separable classes or collinear "
                          "features?); use a ridge > 0",
                          it);
            goto cleanup;
        }
        /* Newton step with backtracking so the objective never increases */
        double t = 1.0, f_new = f;
        for (int half = 0; half < 30; half++) {
            gsl_vector_memcpy(c_new, c);
            gsl_blas_daxpy(t, step, c_new);
            f_new = logistic_objective(Z, y, c_new, p->ridge, eta);
            if (f_new <= f + 1e-12 * fabs(f)) break;
            t *= 0.5;
        }
        gsl_vector_memcpy(c, c_new);
        f = f_new;
        double big = 0.0;
        for (size_t j = 0; j < q; j++) big = fmax(big, fabs(t * gsl_vector_get(step, j)));
        if (!isfinite(f)) {
            st = mp_error(MP_ERR_GSL, "logistic probe: the objective diverged at iteration %d", it);
            goto cleanup;
        }
        if (big < p->tol) {
            out->converged = 1;
            break;
        }
    }
    out->iterations = it > p->max_iter ? p->max_iter : it;
    double b = gsl_vector_get(c, 0);
    for (size_t j = 0; j < d; j++) {
        out->w[j] = gsl_vector_get(c, j + 1) / sd[j];
        b -= out->w[j] * mu[j];
    }
    out->b = b;
    double ll = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = gsl_vector_get(eta, i);
        ll += softplus(e) - y[i] * e;
    }
    out->loss = ll / (double)n;
    out->r2 = NAN;
cleanup:
    gsl_vector_free(r);
    gsl_vector_free(eta);
    gsl_vector_free(step);
    gsl_vector_free(g);
    gsl_vector_free(c_new);
    gsl_vector_free(c);
    gsl_matrix_free(Hm);
    gsl_matrix_free(ZW);
    gsl_matrix_free(Z);
    return st;
}

mp_status mp_analyze_probe_fit(const float *X, const double *y, size_t n, size_t d, const mp_probe_params *p_in,
                               mp_probe *out) {
    mp_probe_params p = p_in ? *p_in : mp_analyze_probe_params_default();
    mp_status st = MP_OK;
    double *mu = NULL, *sd = NULL;
    size_t nd;
    memset(out, 0, sizeof *out);
    out->kind = p.kind;
    out->d = d;
    if (!X || !y) return mp_error(MP_ERR_ARG, "probe: NULL features or labels");
    if (p.kind != MP_PROBE_LINEAR && p.kind != MP_PROBE_LOGISTIC)
        return mp_error(MP_ERR_ARG, "probe: unknown kind %d", (int)p.kind);
    if (d < 1) return mp_error(MP_ERR_ARG, "probe: the feature dimension must be >= 1");
    if (n < 2) return mp_error(MP_ERR_ARG, "probe: needs at least 2 samples, got %zu", n);
    if (mp_mul_size(n, d + 1, &nd)) return mp_error(MP_ERR_ARG, "probe: %zu x %zu features overflow", n, d);
    if (!(p.ridge >= 0.0) || !isfinite(p.ridge)) return mp_error(MP_ERR_ARG, "probe: ridge = %g must be >= 0", p.ridge);
    if (p.kind == MP_PROBE_LINEAR && p.ridge == 0.0 && n < d)
        return mp_error(MP_ERR_ARG, "probe: %zu samples for %zu features; least squares needs n >= d (or a ridge > 0)",
                        n, d);
    if (p.kind == MP_PROBE_LOGISTIC && (p.max_iter < 1 || !(p.tol > 0)))
        return mp_error(MP_ERR_ARG, "probe: max_iter (%d) must be >= 1 and tol (%g) > 0", p.max_iter, p.tol);
    for (size_t i = 0; i < n * d; i++)
        if (!isfinite(X[i])) return mp_error(MP_ERR_ARG, "probe: feature %zu of sample %zu is not finite", i % d + 1, i / d + 1);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(y[i])) return mp_error(MP_ERR_ARG, "probe: label %zu is not finite", i + 1);
    out->w = mp_calloc(d, sizeof *out->w, "probe weights");
    mu = mp_calloc(d, sizeof *mu, "probe feature means");
    sd = mp_calloc(d, sizeof *sd, "probe feature scales");
    if (!out->w || !mu || !sd) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    if (p.kind == MP_PROBE_LINEAR) st = fit_linear(X, y, n, d, &p, out, mu, sd);
    else st = fit_logistic(X, y, n, d, &p, out, mu, sd);
    if (st) goto cleanup;
    out->train_acc = mp_analyze_probe_accuracy(out, X, y, n);
cleanup:
    free(mu);
    free(sd);
    if (st) mp_analyze_probe_free(out);
    return st;
}
