/* test_linprobe.c — the linear probes of analyze/probe.h against independent
 * references: least squares and ridge on planted data against the normal
 * equations solved here by Gaussian elimination (tolerance 1e-8 relative),
 * logistic regression against its optimality conditions (gradient of the
 * penalised log-likelihood below 1e-6 per sample) and the planted weights
 * (within 0.15 at n = 20000), both least-squares solver paths (QR first or
 * not) and a duplicated feature (rank d - 1, minimum-norm weights), plus the
 * argument checks. */
#include "probe.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* xorshift + Box-Muller: the test's own random numbers */
static unsigned long long rs = 88172645463325252ULL;
static double unif(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return ((rs >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }

/* Solves A x = r (q x q, row-major; A and r are destroyed) by elimination with partial pivoting. */
static void solve(double *A, double *r, double *x, int q) {
    for (int k = 0; k < q; k++) {
        int piv = k;
        for (int i = k + 1; i < q; i++)
            if (fabs(A[i * q + k]) > fabs(A[piv * q + k])) piv = i;
        for (int j = 0; j < q; j++) {
            double t = A[k * q + j];
            A[k * q + j] = A[piv * q + j];
            A[piv * q + j] = t;
        }
        double t = r[k];
        r[k] = r[piv];
        r[piv] = t;
        for (int i = k + 1; i < q; i++) {
            double f = A[i * q + k] / A[k * q + k];
            for (int j = k; j < q; j++) A[i * q + j] -= f * A[k * q + j];
            r[i] -= f * r[k];
        }
    }
    for (int k = q - 1; k >= 0; k--) {
        double s = r[k];
        for (int j = k + 1; j < q; j++) s -= A[k * q + j] * x[j];
        x[k] = s / A[k * q + k];
    }
}

/* Reference ridge solution with an unpenalised intercept: centre X and y,
 * solve (Xc'Xc + ridge I) w = Xc'yc, b = ybar - w.xbar. */
static void ref_ridge(const float *X, const double *y, int n, int d, double ridge, double *w, double *b) {
    double *mu = calloc(d, sizeof *mu), *A = calloc((size_t)d * d, sizeof *A), *r = calloc(d, sizeof *r), ybar = 0;
    for (int i = 0; i < n; i++) {
        ybar += y[i];
        for (int j = 0; j < d; j++) mu[j] += X[i * d + j];
    }
    ybar /= n;
    for (int j = 0; j < d; j++) mu[j] /= n;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d; j++) {
            double xj = X[i * d + j] - mu[j];
            r[j] += xj * (y[i] - ybar);
            for (int k = 0; k < d; k++) A[j * d + k] += xj * (X[i * d + k] - mu[k]);
        }
    for (int j = 0; j < d; j++) A[j * d + j] += ridge;
    solve(A, r, w, d);
    *b = ybar;
    for (int j = 0; j < d; j++) *b -= w[j] * mu[j];
    free(mu);
    free(A);
    free(r);
}

static void test_least_squares(void) {
    enum { N = 300, D = 4 };
    static float X[N * D];
    static double y[N];
    const double w_true[D] = {1.5, -2.0, 0.25, 3.0}, b_true = 0.7;
    for (int i = 0; i < N; i++) {
        y[i] = b_true;
        for (int j = 0; j < D; j++) {
            X[i * D + j] = (float)(gauss() * (j + 1) + j); /* different scales and offsets */
            y[i] += w_true[j] * X[i * D + j];
        }
        y[i] += 0.1 * gauss();
    }
    double w_ref[D], b_ref;
    for (int stdz = 0; stdz <= 1; stdz++) {
        ref_ridge(X, y, N, D, 0.0, w_ref, &b_ref);
        mp_probe_params p = mp_analyze_probe_params_default();
        p.standardize = stdz;
        mp_probe pr;
        CHECK(mp_analyze_probe_fit(X, y, N, D, &p, &pr) == MP_OK, "%s", mp_last_error());
        for (int j = 0; j < D; j++) CHECK_NEAR(pr.w[j], w_ref[j], 1e-8 * (1 + fabs(w_ref[j])), "OLS w[%d] stdz %d", j, stdz);
        CHECK_NEAR(pr.b, b_ref, 1e-8 * (1 + fabs(b_ref)), "OLS intercept stdz %d", stdz);
        for (int j = 0; j < D; j++) CHECK_NEAR(pr.w[j], w_true[j], 0.05, "planted w[%d]", j);
        CHECK(pr.r2 > 0.99, "r2 %g", pr.r2);
        CHECK((int)pr.rank == D, "rank %zu", pr.rank);
        CHECK_NEAR(mp_analyze_probe_score(&pr, X), y[0], 0.5, "score of row 1 near its target");
        mp_analyze_probe_free(&pr);
        mp_analyze_probe_free(&pr); /* idempotent */
    }
    /* ridge without standardization: the penalty acts on the raw weights */
    const double ridge = 50.0;
    ref_ridge(X, y, N, D, ridge, w_ref, &b_ref);
    mp_probe_params p = mp_analyze_probe_params_default();
    p.standardize = 0;
    p.ridge = ridge;
    mp_probe pr;
    CHECK(mp_analyze_probe_fit(X, y, N, D, &p, &pr) == MP_OK, "%s", mp_last_error());
    for (int j = 0; j < D; j++) CHECK_NEAR(pr.w[j], w_ref[j], 1e-8 * (1 + fabs(w_ref[j])), "ridge w[%d]", j);
    CHECK_NEAR(pr.b, b_ref, 1e-8 * (1 + fabs(b_ref)), "ridge intercept");
    mp_analyze_probe_free(&pr);
    /* 0/1 labels thresholded at 0.5: a clean linear boundary is read perfectly */
    static double lab[N];
    for (int i = 0; i < N; i++) lab[i] = X[i * D] - 0.0 > 0.3 ? 1.0 : 0.0;
    p = mp_analyze_probe_params_default();
    CHECK(mp_analyze_probe_fit(X, lab, N, D, &p, &pr) == MP_OK, "%s", mp_last_error());
    CHECK(pr.train_acc > 0.85, "least-squares classifier accuracy %g", pr.train_acc);
    mp_analyze_probe_free(&pr);
}

/* The two solver paths (n >= 2d: QR first, then the SVD of the d x d triangle;
 * fewer rows: the SVD of the rows themselves) against the normal equations, and
 * a duplicated feature: the truncated SVD drops the zero singular value (rank
 * d - 1) and returns the minimum-norm solution, the duplicate's weight split
 * evenly (the reference: the fit without the duplicate, halved). */
static void test_solver_paths(void) {
    enum { D = 6 };
    static float X[40 * D], X5[40 * (D - 1)];
    static double y[40];
    for (int n = 7; n <= 40; n += 33) { /* 7 rows: SVD of Z; 40: QR first */
        for (int i = 0; i < n; i++) {
            y[i] = 0.3;
            for (int j = 0; j < D; j++) {
                X[i * D + j] = (float)(gauss() + 0.5 * j);
                y[i] += (j - 2.5) * X[i * D + j];
            }
            y[i] += 0.2 * gauss();
        }
        for (int ridge = 0; ridge <= 1; ridge++) {
            double w_ref[D], b_ref;
            ref_ridge(X, y, n, D, ridge ? 3.0 : 0.0, w_ref, &b_ref);
            mp_probe_params p = mp_analyze_probe_params_default();
            p.standardize = 0;
            p.ridge = ridge ? 3.0 : 0.0;
            mp_probe pr;
            CHECK(mp_analyze_probe_fit(X, y, n, D, &p, &pr) == MP_OK, "%s", mp_last_error());
            for (int j = 0; j < D; j++)
                CHECK_NEAR(pr.w[j], w_ref[j], 1e-8 * (1 + fabs(w_ref[j])), "n %d ridge %d w[%d]", n, ridge, j);
            CHECK_NEAR(pr.b, b_ref, 1e-8 * (1 + fabs(b_ref)), "n %d ridge %d intercept", n, ridge);
            mp_analyze_probe_free(&pr);
        }
        /* column D-1 := column 0 */
        for (int i = 0; i < n; i++) {
            X[i * D + D - 1] = X[i * D];
            for (int j = 0; j < D - 1; j++) X5[i * (D - 1) + j] = X[i * D + j];
        }
        double w5[D - 1], b5;
        ref_ridge(X5, y, n, D - 1, 0.0, w5, &b5);
        for (int stdz = 0; stdz <= 1; stdz++) {
            mp_probe_params p = mp_analyze_probe_params_default();
            p.standardize = stdz;
            mp_probe pr;
            CHECK(mp_analyze_probe_fit(X, y, n, D, &p, &pr) == MP_OK, "%s", mp_last_error());
            CHECK((int)pr.rank == D - 1, "duplicated feature: rank %zu (n %d)", pr.rank, n);
            CHECK_NEAR(pr.w[0], 0.5 * w5[0], 1e-7 * (1 + fabs(w5[0])), "n %d stdz %d: duplicate's weight split", n, stdz);
            CHECK_NEAR(pr.w[D - 1], 0.5 * w5[0], 1e-7 * (1 + fabs(w5[0])), "n %d stdz %d: and its twin", n, stdz);
            for (int j = 1; j < D - 1; j++)
                CHECK_NEAR(pr.w[j], w5[j], 1e-7 * (1 + fabs(w5[j])), "n %d stdz %d: w[%d]", n, stdz, j);
            CHECK_NEAR(pr.b, b5, 1e-7 * (1 + fabs(b5)), "n %d stdz %d: intercept", n, stdz);
            mp_analyze_probe_free(&pr);
        }
    }
}

static void test_logistic(void) {
    enum { N = 20000, D = 3 };
    float *X = malloc(sizeof(float) * N * D);
    double *y = malloc(sizeof(double) * N);
    const double w_true[D] = {2.0, -1.0, 0.0}, b_true = 0.5;
    for (int i = 0; i < N; i++) {
        double z = b_true;
        for (int j = 0; j < D; j++) {
            X[i * D + j] = (float)(gauss() + (j == 2 ? 5.0 : 0.0));
            z += w_true[j] * X[i * D + j];
        }
        y[i] = unif() < 1.0 / (1.0 + exp(-z)) ? 1.0 : 0.0;
    }
    for (int stdz = 0; stdz <= 1; stdz++) {
        for (int rr = 0; rr <= 1; rr++) {
            const double ridge = rr ? 10.0 : 0.0;
            mp_probe_params p = mp_analyze_probe_params_default();
            p.kind = MP_PROBE_LOGISTIC;
            p.standardize = stdz;
            p.ridge = ridge;
            mp_probe pr;
            CHECK(mp_analyze_probe_fit(X, y, N, D, &p, &pr) == MP_OK, "%s", mp_last_error());
            CHECK(pr.converged, "IRLS converged (%d iterations)", pr.iterations);
            CHECK(pr.iterations < 30, "Newton converges fast: %d iterations", pr.iterations);
            if (ridge == 0.0)
                for (int j = 0; j < D; j++) CHECK_NEAR(pr.w[j], w_true[j], 0.15, "planted logistic w[%d]", j);
            /* stationarity of sum log-lik - ridge/2 |w_std|^2; in raw units the
             * standardized penalty on w_j sd_j gives ridge * w_j * sd_j^2 */
            double g[D + 1] = {0}, sd[D] = {1, 1, 1};
            if (stdz)
                for (int j = 0; j < D; j++) {
                    double m = 0, v = 0;
                    for (int i = 0; i < N; i++) m += X[i * D + j];
                    m /= N;
                    for (int i = 0; i < N; i++) v += (X[i * D + j] - m) * (X[i * D + j] - m);
                    sd[j] = sqrt(v / N);
                }
            for (int i = 0; i < N; i++) {
                double r = y[i] - mp_analyze_probe_score(&pr, X + i * D);
                g[0] += r;
                for (int j = 0; j < D; j++) g[j + 1] += r * X[i * D + j];
            }
            for (int j = 0; j < D; j++) g[j + 1] -= ridge * pr.w[j] * sd[j] * sd[j];
            for (int j = 0; j <= D; j++)
                CHECK(fabs(g[j]) / N < 1e-6, "gradient[%d] = %g at the optimum (stdz %d ridge %g)", j, g[j], stdz, ridge);
            CHECK(pr.train_acc > 0.75 && pr.train_acc < 0.95, "accuracy %g", pr.train_acc);
            CHECK(pr.loss > 0.2 && pr.loss < 0.6, "mean log-loss %g", pr.loss);
            mp_analyze_probe_free(&pr);
        }
    }
    /* separable classes: with a ridge it still converges and is exact */
    for (int i = 0; i < N; i++) y[i] = X[i * D] > 0 ? 1.0 : 0.0;
    mp_probe_params p = mp_analyze_probe_params_default();
    p.kind = MP_PROBE_LOGISTIC;
    p.ridge = 1.0;
    mp_probe pr;
    CHECK(mp_analyze_probe_fit(X, y, N, D, &p, &pr) == MP_OK, "%s", mp_last_error());
    CHECK(pr.train_acc > 0.995, "separable accuracy %g", pr.train_acc);
    CHECK_NEAR(mp_analyze_probe_accuracy(&pr, X, y, N), pr.train_acc, 1e-12, "accuracy helper");
    double s[2];
    mp_analyze_probe_scores(&pr, X, 2, s);
    CHECK(s[0] >= 0 && s[0] <= 1 && s[1] >= 0 && s[1] <= 1, "probabilities");
    mp_analyze_probe_free(&pr);
    free(X);
    free(y);
}

static void test_errors(void) {
    float X[6] = {1, 2, 3, 4, 5, 6};
    double y[3] = {0, 1, 2}, same[3] = {1, 1, 1}, bad[3] = {0, NAN, 1};
    mp_probe_params p = mp_analyze_probe_params_default();
    mp_probe pr;
    CHECK(mp_analyze_probe_fit(X, y, 1, 2, &p, &pr) == MP_ERR_ARG, "one sample");
    CHECK(strstr(mp_last_error(), "at least 2") != NULL, "%s", mp_last_error());
    CHECK(mp_analyze_probe_fit(X, bad, 3, 2, &p, &pr) == MP_ERR_ARG, "NaN label");
    CHECK(mp_analyze_probe_fit(X, y, 3, 0, &p, &pr) == MP_ERR_ARG, "d = 0");
    p.ridge = -1;
    CHECK(mp_analyze_probe_fit(X, y, 3, 2, &p, &pr) == MP_ERR_ARG, "negative ridge");
    p = mp_analyze_probe_params_default();
    p.kind = MP_PROBE_LOGISTIC;
    CHECK(mp_analyze_probe_fit(X, y, 3, 2, &p, &pr) == MP_ERR_ARG, "label 2 in a logistic probe");
    CHECK(strstr(mp_last_error(), "0 or 1") != NULL, "%s", mp_last_error());
    CHECK(mp_analyze_probe_fit(X, same, 3, 2, &p, &pr) == MP_ERR_ARG, "one class");
    CHECK(strstr(mp_last_error(), "both classes") != NULL, "%s", mp_last_error());
    CHECK(pr.w == NULL, "no allocation left after a failure");
}

int main(void) {
    mp_init();
    test_least_squares();
    test_solver_paths();
    test_logistic();
    test_errors();
    return tu_finish("test_linprobe");
}
