/* tensor_linalg.c — the C tensor core (analyze/tensor.h), part 4: the
 * eigen-decompositions of square matrices through GSL (gsl_eigen_nonsymm for
 * general ones: eigenvalues; gsl_eigen_symmv for symmetric ones: values and
 * vectors), batched over leading dims, and the SVD of a product A B computed
 * from its factors (TransformerLens's FactoredMatrix.svd), which the Lua
 * FactoredMatrix (lua/lfactored.c) uses for OV/QK circuits. */
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_complex.h>
#include <gsl/gsl_complex_math.h>
#include <gsl/gsl_eigen.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_vector.h>

/* t must be [..., n, n] with finite elements; sets *n and the batch count. */
static mp_status check_square(const mp_tensor *t, int64_t *n, int64_t *batch) {
    char b[128];
    if (t->ndim < 2) {
        mp_tensor_shape_str(t->ndim, t->shape, b, sizeof b);
        return mp_error(MP_ERR_ARG, "needs a square matrix [..., n, n], got %s", b);
    }
    *n = t->shape[t->ndim - 1];
    if (t->shape[t->ndim - 2] != *n) {
        mp_tensor_shape_str(t->ndim, t->shape, b, sizeof b);
        return mp_error(MP_ERR_ARG, "needs a square matrix [..., n, n], got %s", b);
    }
    *batch = 1;
    for (int i = 0; i < t->ndim - 2; i++) *batch *= t->shape[i];
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(t->data[i])) return mp_error(MP_ERR_ARG, "element %zu is not finite (%g)", i + 1, (double)t->data[i]);
    return MP_OK;
}

/* ---- eig ---- */

typedef struct {
    double re, im;
} cval;

/* |lambda| descending, then real part descending, then imaginary part descending. */
static int cmp_eig(const void *pa, const void *pb) {
    const cval *a = pa, *b = pb;
    double ma = hypot(a->re, a->im), mb = hypot(b->re, b->im);
    if (ma != mb) return ma > mb ? -1 : 1;
    if (a->re != b->re) return a->re > b->re ? -1 : 1;
    if (a->im != b->im) return a->im > b->im ? -1 : 1;
    return 0;
}

mp_status mp_tensor_eig(mp_tensor *re, mp_tensor *im, const mp_tensor *t) {
    memset(re, 0, sizeof *re);
    memset(im, 0, sizeof *im);
    int64_t n, batch;
    mp_status st = check_square(t, &n, &batch);
    if (st != MP_OK) return st;
    int nd = t->ndim - 1;
    int64_t shape[MP_MAXDIM];
    memcpy(shape, t->shape, (size_t)nd * sizeof *shape);
    if ((st = mp_tensor_init(re, nd, shape)) != MP_OK || (st = mp_tensor_init(im, nd, shape)) != MP_OK) goto fail;
    if (n == 0 || batch == 0) return MP_OK;
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    gsl_matrix *A = gsl_matrix_alloc((size_t)n, (size_t)n);
    gsl_vector_complex *ev = gsl_vector_complex_alloc((size_t)n);
    gsl_eigen_nonsymm_workspace *ws = gsl_eigen_nonsymm_alloc((size_t)n);
    cval *vals = malloc((size_t)n * sizeof *vals);
    int rc = GSL_ENOMEM;
    int64_t bad = 0;
    if (A && ev && ws && vals) {
        gsl_eigen_nonsymm_params(0, 1, ws); /* no Schur form; balance first, as LAPACK's dgeev */
        rc = GSL_SUCCESS;
        for (int64_t b = 0; b < batch && rc == GSL_SUCCESS; b++) {
            const float *x = t->data + b * n * n;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) gsl_matrix_set(A, (size_t)i, (size_t)j, x[i * n + j]);
            rc = gsl_eigen_nonsymm(A, ev, ws);
            if (rc != GSL_SUCCESS) {
                bad = b;
                break;
            }
            for (int64_t i = 0; i < n; i++) {
                gsl_complex z = gsl_vector_complex_get(ev, (size_t)i);
                vals[i].re = GSL_REAL(z);
                vals[i].im = GSL_IMAG(z);
            }
            qsort(vals, (size_t)n, sizeof *vals, cmp_eig);
            for (int64_t i = 0; i < n; i++) {
                re->data[b * n + i] = (float)vals[i].re;
                im->data[b * n + i] = (float)vals[i].im;
            }
        }
    }
    gsl_set_error_handler(old);
    gsl_matrix_free(A);
    gsl_vector_complex_free(ev);
    if (ws) gsl_eigen_nonsymm_free(ws);
    free(vals);
    if (rc == GSL_SUCCESS) return MP_OK;
    st = rc == GSL_ENOMEM ? mp_error(MP_ERR_NOMEM, "out of memory for the eigenvalues")
                          : mp_error(MP_ERR_ARG, "gsl_eigen_nonsymm failed on matrix %lld: %s", (long long)bad + 1,
                                     gsl_strerror(rc));
fail:
    mp_tensor_free(re);
    mp_tensor_free(im);
    return st;
}

/* ---- eigh ---- */

mp_status mp_tensor_eigh(mp_tensor *w, mp_tensor *v, const mp_tensor *t) {
    memset(w, 0, sizeof *w);
    memset(v, 0, sizeof *v);
    int64_t n, batch;
    mp_status st = check_square(t, &n, &batch);
    if (st != MP_OK) return st;
    if ((st = mp_tensor_init(w, t->ndim - 1, t->shape)) != MP_OK || (st = mp_tensor_init(v, t->ndim, t->shape)) != MP_OK)
        goto fail;
    if (n == 0 || batch == 0) return MP_OK;
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    gsl_matrix *A = gsl_matrix_alloc((size_t)n, (size_t)n), *V = gsl_matrix_alloc((size_t)n, (size_t)n);
    gsl_vector *ev = gsl_vector_alloc((size_t)n);
    gsl_eigen_symmv_workspace *ws = gsl_eigen_symmv_alloc((size_t)n);
    int rc = GSL_ENOMEM;
    if (A && V && ev && ws) {
        rc = GSL_SUCCESS;
        for (int64_t b = 0; b < batch && rc == GSL_SUCCESS; b++) {
            const float *x = t->data + b * n * n;
            /* the lower triangle mirrored (GSL reads only it, as LAPACK with UPLO = "L") */
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j <= i; j++) {
                    gsl_matrix_set(A, (size_t)i, (size_t)j, x[i * n + j]);
                    gsl_matrix_set(A, (size_t)j, (size_t)i, x[i * n + j]);
                }
            rc = gsl_eigen_symmv(A, ev, V, ws);
            if (rc == GSL_SUCCESS) rc = gsl_eigen_symmv_sort(ev, V, GSL_EIGEN_SORT_VAL_ASC);
            if (rc != GSL_SUCCESS) break;
            for (int64_t i = 0; i < n; i++) {
                w->data[b * n + i] = (float)gsl_vector_get(ev, (size_t)i);
                for (int64_t j = 0; j < n; j++) v->data[b * n * n + i * n + j] = (float)gsl_matrix_get(V, (size_t)i, (size_t)j);
            }
        }
    }
    gsl_set_error_handler(old);
    gsl_matrix_free(A);
    gsl_matrix_free(V);
    gsl_vector_free(ev);
    if (ws) gsl_eigen_symmv_free(ws);
    if (rc == GSL_SUCCESS) return MP_OK;
    st = rc == GSL_ENOMEM ? mp_error(MP_ERR_NOMEM, "out of memory for the eigen-decomposition")
                          : mp_error(MP_ERR_ARG, "gsl_eigen_symmv failed: %s", gsl_strerror(rc));
fail:
    mp_tensor_free(w);
    mp_tensor_free(v);
    return st;
}

/* ---- the SVD of a factored product ---- */

/* One matrix of the batch: A [m, k] and B [k, n] -> U [m, r], S [r], Vh [r, n] into the outputs' rows. */
static mp_status factored_one(const mp_tensor *a, const mp_tensor *b, float *u, float *s, float *vh, int64_t r) {
    mp_tensor ua = {0}, sa = {0}, vha = {0}, ub = {0}, sb = {0}, vhb = {0}, mid = {0}, um = {0}, sm = {0}, vhm = {0},
              uo = {0}, vo = {0};
    mp_status st;
    if ((st = mp_tensor_svd(&ua, &sa, &vha, a)) != MP_OK || (st = mp_tensor_svd(&ub, &sb, &vhb, b)) != MP_OK ||
        (st = mp_tensor_matmul(&mid, &vha, &ub)) != MP_OK)
        goto done;
    int64_t ra = mid.shape[0], rb = mid.shape[1];
    for (int64_t i = 0; i < ra; i++)
        for (int64_t j = 0; j < rb; j++) mid.data[i * rb + j] *= sa.data[i] * sb.data[j];
    if ((st = mp_tensor_svd(&um, &sm, &vhm, &mid)) != MP_OK || (st = mp_tensor_matmul(&uo, &ua, &um)) != MP_OK ||
        (st = mp_tensor_matmul(&vo, &vhm, &vhb)) != MP_OK)
        goto done;
    memcpy(u, uo.data, uo.numel * sizeof(float));
    memcpy(s, sm.data, (size_t)r * sizeof(float));
    memcpy(vh, vo.data, vo.numel * sizeof(float));
done:
    mp_tensor_free(&ua), mp_tensor_free(&sa), mp_tensor_free(&vha), mp_tensor_free(&ub), mp_tensor_free(&sb);
    mp_tensor_free(&vhb), mp_tensor_free(&mid), mp_tensor_free(&um), mp_tensor_free(&sm), mp_tensor_free(&vhm);
    mp_tensor_free(&uo), mp_tensor_free(&vo);
    return st;
}

mp_status mp_tensor_factored_svd(mp_tensor *u, mp_tensor *s, mp_tensor *vh, const mp_tensor *a, const mp_tensor *b) {
    memset(u, 0, sizeof *u);
    memset(s, 0, sizeof *s);
    memset(vh, 0, sizeof *vh);
    char sa[128], sb[128];
    mp_tensor_shape_str(a->ndim, a->shape, sa, sizeof sa);
    mp_tensor_shape_str(b->ndim, b->shape, sb, sizeof sb);
    int nd = a->ndim;
    if (nd < 2 || b->ndim != nd || a->shape[nd - 1] != b->shape[nd - 2] ||
        memcmp(a->shape, b->shape, (size_t)(nd - 2) * sizeof *a->shape) != 0)
        return mp_error(MP_ERR_ARG, "needs A [..., m, k] and B [..., k, n] with the same leading dims, got %s and %s", sa,
                        sb);
    int64_t m = a->shape[nd - 2], k = a->shape[nd - 1], n = b->shape[nd - 1], batch = 1;
    for (int i = 0; i < nd - 2; i++) batch *= a->shape[i];
    int64_t r = m < k ? m : k;
    if (n < r) r = n;
    int64_t shu[MP_MAXDIM], shs[MP_MAXDIM], shv[MP_MAXDIM];
    memcpy(shu, a->shape, (size_t)nd * sizeof *shu);
    memcpy(shs, a->shape, (size_t)nd * sizeof *shs);
    memcpy(shv, b->shape, (size_t)nd * sizeof *shv);
    shu[nd - 1] = r;
    shs[nd - 2] = r;
    shv[nd - 2] = r;
    mp_status st;
    if ((st = mp_tensor_init(u, nd, shu)) != MP_OK || (st = mp_tensor_init(s, nd - 1, shs)) != MP_OK ||
        (st = mp_tensor_init(vh, nd, shv)) != MP_OK)
        goto fail;
    if (r == 0) return MP_OK;
    for (int64_t i = 0; i < batch; i++) {
        mp_tensor ai = {0}, bi = {0};
        int64_t s2a[2] = {m, k}, s2b[2] = {k, n};
        if ((st = mp_tensor_view(&ai, a, (size_t)(i * m * k), 2, s2a)) == MP_OK &&
            (st = mp_tensor_view(&bi, b, (size_t)(i * k * n), 2, s2b)) == MP_OK)
            st = factored_one(&ai, &bi, u->data + i * m * r, s->data + i * r, vh->data + i * r * n, r);
        mp_tensor_free(&ai);
        mp_tensor_free(&bi);
        if (st != MP_OK) goto fail;
    }
    return MP_OK;
fail:
    mp_tensor_free(u);
    mp_tensor_free(s);
    mp_tensor_free(vh);
    return st;
}
