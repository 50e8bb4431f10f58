/* geometry.c — PCA, stable rank / first-singular-value share and two-cloud
 * separation (cosine of means, centroid distance over spread, Fisher LDA) over
 * row-major float point clouds. Sums of products go through BLAS (dsyrk/sgemm
 * on blocks converted to double), decompositions through GSL. */
#include "geometry.h"

#include <gsl/gsl_cblas.h> /* CBLAS prototypes; the symbols come from OpenBLAS (not gslcblas) */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_eigen.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_vector.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define BLOCK_ROWS 8192 /* rows converted to double per BLAS call (8192 x 64 doubles = 4 MiB) */

static mp_status check_shape(const char *what, const float *X, size_t n, size_t d, size_t min_n) {
    size_t nd;
    if (!X) return mp_error(MP_ERR_ARG, "%s: NULL data", what);
    if (n < min_n) return mp_error(MP_ERR_ARG, "%s: needs at least %zu points, got %zu", what, min_n, n);
    if (d < 1) return mp_error(MP_ERR_ARG, "%s: dimension must be >= 1", what);
    if (mp_mul_size(n, d, &nd)) return mp_error(MP_ERR_ARG, "%s: size %zu x %zu overflows", what, n, d);
    if (n > INT_MAX || d > INT_MAX)
        return mp_error(MP_ERR_ARG, "%s: %zu x %zu exceeds the BLAS index range", what, n, d);
    return MP_OK;
}

/* Finds the first non-finite entry (only called once a sum came out non-finite). */
static mp_status report_nonfinite(const char *what, const float *X, size_t n, size_t d) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            if (!isfinite(X[i * d + j]))
                return mp_error(MP_ERR_ARG, "%s: non-finite value %g at row %zu, column %zu",
                                what, (double)X[i * d + j], i, j);
    return mp_error(MP_ERR_ARG, "%s: values too large (sum overflows)", what);
}

/* mean[d] = column means of X, in double; fails on non-finite input. */
static mp_status column_mean(const char *what, const float *X, size_t n, size_t d, double *mean) {
    memset(mean, 0, d * sizeof *mean);
    #pragma omp parallel for reduction(+ : mean[:d]) schedule(static) if (n * d > 1000000)
    for (size_t i = 0; i < n; i++) {
        const float *x = X + i * d;
        for (size_t j = 0; j < d; j++) mean[j] += x[j];
    }
    for (size_t j = 0; j < d; j++) {
        if (!isfinite(mean[j])) return report_nonfinite(what, X, n, d);
        mean[j] /= (double)n;
    }
    return MP_OK;
}

/* G[d, d] (lower triangle) += sum_i (x_i - mean)(x_i - mean)^T (mean may be NULL). */
static mp_status scatter_accum(const float *X, size_t n, size_t d, const double *mean, double *G) {
    size_t blk = BLOCK_ROWS;
    if (blk > n) blk = n;
    double *buf = mp_malloc(blk * d * sizeof *buf, "scatter block");
    if (!buf) return MP_ERR_NOMEM;
    for (size_t r0 = 0; r0 < n; r0 += blk) {
        size_t rb = n - r0 < blk ? n - r0 : blk;
        #pragma omp parallel for schedule(static) if (rb * d > 100000)
        for (size_t i = 0; i < rb; i++) {
            const float *x = X + (r0 + i) * d;
            double *b = buf + i * d;
            if (mean) for (size_t j = 0; j < d; j++) b[j] = (double)x[j] - mean[j];
            else for (size_t j = 0; j < d; j++) b[j] = x[j];
        }
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)d, (int)rb, 1.0, buf, (int)d, 1.0, G, (int)d);
    }
    free(buf);
    return MP_OK;
}

/* G[n, n] (lower) = X X^T, accumulated over blocks of columns (for n < d). */
static mp_status row_gram(const float *X, size_t n, size_t d, double *G) {
    size_t cb = BLOCK_ROWS * 64 / (n ? n : 1);
    if (cb < 1) cb = 1;
    if (cb > d) cb = d;
    double *buf = mp_malloc(n * cb * sizeof *buf, "gram block");
    if (!buf) return MP_ERR_NOMEM;
    for (size_t c0 = 0; c0 < d; c0 += cb) {
        size_t w = d - c0 < cb ? d - c0 : cb;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < w; j++) buf[i * w + j] = X[i * d + c0 + j];
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (int)n, (int)w, 1.0, buf, (int)w, 1.0, G, (int)n);
    }
    free(buf);
    return MP_OK;
}

static mp_status gsl_fail(const char *what, int rc) {
    return mp_error(MP_ERR_GSL, "%s: GSL error: %s", what, gsl_strerror(rc));
}

/* Flips each row so that its largest-magnitude entry is positive. */
static void fix_signs(float *C, size_t k, size_t d) {
    for (size_t c = 0; c < k; c++) {
        float *v = C + c * d;
        size_t arg = 0;
        for (size_t j = 1; j < d; j++)
            if (fabsf(v[j]) > fabsf(v[arg])) arg = j;
        if (v[arg] < 0)
            for (size_t j = 0; j < d; j++) v[j] = -v[j];
    }
}

void mp_analyze_pca_free(mp_pca *p) {
    if (!p) return;
    free(p->mean);
    free(p->components);
    free(p->explained);
    free(p->ratio);
    free(p->proj);
    memset(p, 0, sizeof *p);
}

/* GSL's eigen-solvers and SVD call level-1/2 BLAS (dsymv, dsyr2, ...) once per
 * column; OpenMP OpenBLAS threads each call (it follows omp_get_max_threads),
 * so a 64 x 64 problem wakes and parks the other threads thousands of times:
 * measured, rope_id's geometry on small models spent 70% of its time in the
 * scheduler and ran 3x slower on 2 threads than on 1. These steps run with one
 * BLAS thread; the products that build the matrices stay threaded. */
static int serial_blas_begin(void) {
#ifdef _OPENMP
    int n = omp_get_max_threads();
    omp_set_num_threads(1);
    return n;
#else
    return 1;
#endif
}
static void serial_blas_end(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* SVD path: Jacobi SVD of the centred cloud (or of its transpose when n < d). */
static mp_status pca_svd(const float *X, size_t n, size_t d, const double *mean, mp_pca *out) {
    mp_status st = MP_OK;
    int tr = n < d;                 /* decompose Xc^T (d x n) so that rows >= cols */
    size_t M = tr ? d : n, N = tr ? n : d;
    gsl_matrix *A = gsl_matrix_alloc(M, N), *V = gsl_matrix_alloc(N, N);
    gsl_vector *S = gsl_vector_alloc(N);
    if (!A || !V || !S) { st = mp_error(MP_ERR_NOMEM, "pca: out of memory for the SVD"); goto cleanup; }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++) {
            double v = (double)X[i * d + j] - mean[j];
            if (tr) gsl_matrix_set(A, j, i, v); else gsl_matrix_set(A, i, j, v);
        }
    int nt = serial_blas_begin();
    int rc = gsl_linalg_SV_decomp_jacobi(A, V, S);
    serial_blas_end(nt);
    if (rc) { st = gsl_fail("pca: SVD", rc); goto cleanup; }
    /* Principal directions in R^d: columns of V (n >= d) or of U (= A, n < d). */
    const gsl_matrix *dirs = tr ? A : V;
    double total = 0;
    for (size_t i = 0; i < N; i++) total += gsl_vector_get(S, i) * gsl_vector_get(S, i);
    out->total_var = total / (double)(n - 1);
    for (size_t c = 0; c < out->k; c++) {
        double s = gsl_vector_get(S, c);
        out->explained[c] = s * s / (double)(n - 1);
        for (size_t j = 0; j < d; j++) out->components[c * d + j] = (float)gsl_matrix_get(dirs, j, c);
    }
cleanup:
    gsl_matrix_free(A);
    gsl_matrix_free(V);
    gsl_vector_free(S);
    return st;
}

/* Covariance path: C = Xc^T Xc / (n-1) by blocked dsyrk, then gsl_eigen_symmv. */
static mp_status pca_cov(const float *X, size_t n, size_t d, const double *mean, mp_pca *out) {
    mp_status st = MP_OK;
    gsl_matrix *C = gsl_matrix_calloc(d, d), *E = gsl_matrix_alloc(d, d);
    gsl_vector *ev = gsl_vector_alloc(d);
    gsl_eigen_symmv_workspace *w = gsl_eigen_symmv_alloc(d);
    if (!C || !E || !ev || !w) { st = mp_error(MP_ERR_NOMEM, "pca: out of memory for the covariance"); goto cleanup; }
    if ((st = scatter_accum(X, n, d, mean, C->data)) != MP_OK) goto cleanup;
    gsl_matrix_scale(C, 1.0 / (double)(n - 1));
    double total = 0;
    for (size_t j = 0; j < d; j++) total += gsl_matrix_get(C, j, j);
    out->total_var = total;
    int nt = serial_blas_begin();
    int rc = gsl_eigen_symmv(C, ev, E, w);
    serial_blas_end(nt);
    if (!rc) rc = gsl_eigen_symmv_sort(ev, E, GSL_EIGEN_SORT_VAL_DESC);
    if (rc) { st = gsl_fail("pca: eigen-decomposition", rc); goto cleanup; }
    for (size_t c = 0; c < out->k; c++) {
        double l = gsl_vector_get(ev, c);
        out->explained[c] = l > 0 ? l : 0;
        for (size_t j = 0; j < d; j++) out->components[c * d + j] = (float)gsl_matrix_get(E, j, c);
    }
cleanup:
    gsl_matrix_free(C);
    gsl_matrix_free(E);
    gsl_vector_free(ev);
    if (w) gsl_eigen_symmv_free(w);
    return st;
}

/* proj[n, k] = (X - mean) C^T, centring blocks of rows in float before sgemm. */
static mp_status pca_project(const float *X, size_t n, size_t d, const double *mean, mp_pca *out) {
    size_t blk = BLOCK_ROWS < n ? BLOCK_ROWS : n;
    float *buf = mp_malloc(blk * d * sizeof *buf, "pca projection block");
    if (!buf) return MP_ERR_NOMEM;
    for (size_t r0 = 0; r0 < n; r0 += blk) {
        size_t rb = n - r0 < blk ? n - r0 : blk;
        for (size_t i = 0; i < rb; i++)
            for (size_t j = 0; j < d; j++) buf[i * d + j] = (float)((double)X[(r0 + i) * d + j] - mean[j]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rb, (int)out->k, (int)d, 1.0f, buf, (int)d,
                    out->components, (int)d, 0.0f, out->proj + r0 * out->k, (int)out->k);
    }
    free(buf);
    return MP_OK;
}

mp_status mp_analyze_pca(const float *X, size_t n, size_t d, size_t k, int want_proj, mp_pca *out) {
    mp_status st;
    double *mean = NULL;
    memset(out, 0, sizeof *out);
    if ((st = check_shape("pca", X, n, d, 2)) != MP_OK) return st;
    if (k < 1 || k > d) return mp_error(MP_ERR_ARG, "pca: k = %zu components must be in [1, d = %zu]", k, d);
    if (k > n) k = n;
    size_t nk;
    if (want_proj && mp_mul_size(n, k, &nk)) return mp_error(MP_ERR_ARG, "pca: projection size overflows");
    out->n = n; out->d = d; out->k = k;
    out->method = n <= MP_PCA_SVD_MAX_ROWS ? MP_PCA_SVD : MP_PCA_COV;
    mean = mp_malloc(d * sizeof *mean, "pca mean");
    out->mean = mp_malloc(d * sizeof *out->mean, "pca mean");
    out->components = mp_calloc(k * d, sizeof *out->components, "pca components");
    out->explained = mp_calloc(k, sizeof *out->explained, "pca variances");
    out->ratio = mp_calloc(k, sizeof *out->ratio, "pca ratios");
    if (want_proj) out->proj = mp_malloc(n * k * sizeof *out->proj, "pca projections");
    if (!mean || !out->mean || !out->components || !out->explained || !out->ratio || (want_proj && !out->proj)) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    if ((st = column_mean("pca", X, n, d, mean)) != MP_OK) goto cleanup;
    for (size_t j = 0; j < d; j++) out->mean[j] = (float)mean[j];
    st = out->method == MP_PCA_SVD ? pca_svd(X, n, d, mean, out) : pca_cov(X, n, d, mean, out);
    if (st != MP_OK) goto cleanup;
    fix_signs(out->components, k, d);
    for (size_t c = 0; c < k; c++) out->ratio[c] = out->total_var > 0 ? out->explained[c] / out->total_var : 0;
    if (want_proj) st = pca_project(X, n, d, mean, out);
cleanup:
    free(mean);
    if (st != MP_OK) mp_analyze_pca_free(out);
    return st;
}

mp_status mp_analyze_spectrum(const float *X, size_t n, size_t d, mp_spectrum *out) {
    mp_status st;
    memset(out, 0, sizeof *out);
    if ((st = check_shape("stable rank", X, n, d, 1)) != MP_OK) return st;
    size_t m = n < d ? n : d;
    gsl_matrix *G = gsl_matrix_calloc(m, m);
    gsl_vector *ev = gsl_vector_alloc(m);
    gsl_eigen_symm_workspace *w = gsl_eigen_symm_alloc(m);
    if (!G || !ev || !w) { st = mp_error(MP_ERR_NOMEM, "stable rank: out of memory for a %zu x %zu Gram matrix", m, m); goto cleanup; }
    st = n >= d ? scatter_accum(X, n, d, NULL, G->data) : row_gram(X, n, d, G->data);
    if (st != MP_OK) goto cleanup;
    double fro2 = 0;
    for (size_t i = 0; i < m; i++) fro2 += gsl_matrix_get(G, i, i);
    if (!isfinite(fro2)) { st = report_nonfinite("stable rank", X, n, d); goto cleanup; }
    int nt = serial_blas_begin();
    int rc = gsl_eigen_symm(G, ev, w);
    serial_blas_end(nt);
    if (rc) { st = gsl_fail("stable rank: eigenvalues", rc); goto cleanup; }
    double l1 = 0;
    for (size_t i = 0; i < m; i++) if (gsl_vector_get(ev, i) > l1) l1 = gsl_vector_get(ev, i);
    out->fro2 = fro2;
    out->sigma1 = sqrt(l1);
    out->stable_rank = l1 > 0 ? fro2 / l1 : 0;
    out->sigma1_share = fro2 > 0 ? l1 / fro2 : 0;
cleanup:
    gsl_matrix_free(G);
    gsl_vector_free(ev);
    if (w) gsl_eigen_symm_free(w);
    return st;
}

mp_separation_params mp_analyze_separation_params_default(void) {
    mp_separation_params p = {.ridge_rel = 1e-4};
    return p;
}

/* Counts points on the expected side of thr along w (ties count half). */
static double side_count(const float *X, size_t n, size_t d, const double *w, double thr, int above) {
    double good = 0;
    #pragma omp parallel for reduction(+ : good) schedule(static) if (n * d > 1000000)
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (size_t j = 0; j < d; j++) s += w[j] * X[i * d + j];
        if (s == thr) good += 0.5;
        else if ((s > thr) == above) good += 1;
    }
    return good;
}

mp_status mp_analyze_separation(const float *A, size_t na, const float *B, size_t nb, size_t d,
                                const mp_separation_params *p, mp_separation *out) {
    mp_status st;
    mp_separation_params def = mp_analyze_separation_params_default();
    if (!p) p = &def;
    memset(out, 0, sizeof *out);
    if ((st = check_shape("separation: first cloud", A, na, d, 2)) != MP_OK) return st;
    if ((st = check_shape("separation: second cloud", B, nb, d, 2)) != MP_OK) return st;
    if (!(p->ridge_rel >= 0)) return mp_error(MP_ERR_ARG, "separation: ridge_rel = %g must be >= 0", p->ridge_rel);
    double *mA = mp_malloc(3 * d * sizeof *mA, "separation means");
    gsl_matrix *Sw = gsl_matrix_calloc(d, d);
    gsl_vector *dmu = gsl_vector_alloc(d), *w = gsl_vector_alloc(d);
    if (!mA || !Sw || !dmu || !w) { st = mp_error(MP_ERR_NOMEM, "separation: out of memory (d = %zu)", d); goto cleanup; }
    double *mB = mA + d, *mid = mB + d;
    if ((st = column_mean("separation: first cloud", A, na, d, mA)) != MP_OK) goto cleanup;
    if ((st = column_mean("separation: second cloud", B, nb, d, mB)) != MP_OK) goto cleanup;
    double dot = 0, nA2 = 0, nB2 = 0, dist2 = 0;
    for (size_t j = 0; j < d; j++) {
        dot += mA[j] * mB[j];
        nA2 += mA[j] * mA[j];
        nB2 += mB[j] * mB[j];
        double dj = mA[j] - mB[j];
        dist2 += dj * dj;
        gsl_vector_set(dmu, j, dj);
        mid[j] = 0.5 * (mA[j] + mB[j]);
    }
    out->cos_means = nA2 > 0 && nB2 > 0 ? dot / sqrt(nA2 * nB2) : 0;
    out->centroid_dist = sqrt(dist2);
    /* Sw = (S_A + S_B) / (na + nb - 2), lower triangle, then symmetrised. */
    if ((st = scatter_accum(A, na, d, mA, Sw->data)) != MP_OK) goto cleanup;
    if ((st = scatter_accum(B, nb, d, mB, Sw->data)) != MP_OK) goto cleanup;
    double tr = 0;
    for (size_t j = 0; j < d; j++) tr += gsl_matrix_get(Sw, j, j);
    out->spread = sqrt(tr / (double)(na + nb));
    out->dist_over_spread = out->spread > 0 ? out->centroid_dist / out->spread
                                            : (out->centroid_dist > 0 ? INFINITY : 0);
    gsl_matrix_scale(Sw, 1.0 / (double)(na + nb - 2));
    for (size_t i = 0; i < d; i++)
        for (size_t j = i + 1; j < d; j++) gsl_matrix_set(Sw, i, j, gsl_matrix_get(Sw, j, i));
    double ridge = p->ridge_rel * tr / (double)(na + nb - 2) / (double)d;
    if (!(ridge > 0)) ridge = 1e-12 * (1.0 + dist2);  /* degenerate clouds: keep Sw + ridge I definite */
    out->ridge = ridge;
    /* w = (Sw + ridge I)^-1 dmu by Cholesky, on a copy so Sw stays for w^T Sw w. */
    gsl_matrix *L = gsl_matrix_alloc(d, d);
    if (!L) { st = mp_error(MP_ERR_NOMEM, "separation: out of memory (d = %zu)", d); goto cleanup; }
    gsl_matrix_memcpy(L, Sw);
    for (size_t j = 0; j < d; j++) gsl_matrix_set(L, j, j, gsl_matrix_get(L, j, j) + ridge);
    int rc = gsl_linalg_cholesky_decomp1(L);
    if (!rc) rc = gsl_linalg_cholesky_solve(L, dmu, w);
    gsl_matrix_free(L);
    if (rc) { st = gsl_fail("separation: Cholesky of the within-class covariance", rc); goto cleanup; }
    double wd = 0, wsw = 0, thr = 0;
    for (size_t i = 0; i < d; i++) {
        double wi = gsl_vector_get(w, i), row = 0;
        wd += wi * gsl_vector_get(dmu, i);
        thr += wi * mid[i];
        for (size_t j = 0; j < d; j++) row += gsl_matrix_get(Sw, i, j) * gsl_vector_get(w, j);
        wsw += wi * row;
    }
    out->fisher_j = wd == 0 ? 0 : (wsw > 0 ? wd * wd / wsw : INFINITY);
    double good = side_count(A, na, d, w->data, thr, 1) + side_count(B, nb, d, w->data, thr, 0);
    out->fisher_acc = good / (double)(na + nb);
cleanup:
    free(mA);
    gsl_matrix_free(Sw);
    gsl_vector_free(dmu);
    gsl_vector_free(w);
    return st;
}
