/* test_tensor_core.c — the C tensor core (analyze/tensor.h) without Lua: it
 * links mechprobe_core only. Every result is checked against an independent
 * reference written here: closed forms and hand-computed values, and naive
 * loops (no BLAS) for matmul, broadcasting, reductions and permutations.
 * Covers storage sharing and invalidation of views, empty tensors, 0-dim
 * tensors, and error cases (status, message, `out` left empty). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"
#include "testutil.h"

/* Deterministic values in [-1, 1) (an LCG, no library). */
static unsigned lcg_state = 12345;
static float rnd(void) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void fill_rnd(mp_tensor *t) {
    for (size_t i = 0; i < t->numel; i++) t->data[i] = rnd();
}

static int is_empty(const mp_tensor *t) { return t->st == NULL && t->data == NULL && t->ndim == 0; }

static void test_create_and_views(void) {
    mp_tensor a, v, r, s;
    CHECK(mp_tensor_init(&a, 2, (int64_t[]){3, 4}) == MP_OK, "init");
    CHECK(a.numel == 12 && a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 4, "shape");
    int zeros = 1;
    for (size_t i = 0; i < a.numel; i++) zeros &= a.data[i] == 0.0f;
    CHECK(zeros, "zero-filled");
    int64_t st[2];
    mp_tensor_strides(&a, st);
    CHECK(st[0] == 4 && st[1] == 1, "strides %lld %lld", (long long)st[0], (long long)st[1]);
    for (size_t i = 0; i < a.numel; i++) a.data[i] = (float)i;

    /* select: row 1 is a view; a write through it shows in the parent */
    CHECK(mp_tensor_select(&v, &a, 1) == MP_OK, "select");
    CHECK(v.st == a.st && v.ndim == 1 && v.shape[0] == 4 && v.data[0] == 4.0f, "row view");
    CHECK(a.st->refs == 2, "two references, got %d", a.st->refs);
    v.data[2] = 100.0f;
    CHECK(a.data[6] == 100.0f, "write through the view");

    /* reshape with an inferred extent; the view outlives its parent */
    CHECK(mp_tensor_reshape(&r, &a, 3, (int64_t[]){2, -1, 3}) == MP_OK, "reshape");
    CHECK(r.shape[1] == 2 && r.numel == 12 && r.data == a.data, "reshape shape");
    mp_tensor_free(&a);
    mp_tensor_free(&a); /* idempotent */
    CHECK(mp_tensor_valid(&r) && r.data[6] == 100.0f && r.st->refs == 2, "view alive after its parent");

    /* narrow along dim 0: a view; along dim 1 (or a step): a copy */
    CHECK(mp_tensor_slice(&s, &v, 0, 1, 2, 1) == MP_OK, "narrow");
    CHECK(s.st == v.st && s.shape[0] == 2 && s.data[1] == 100.0f, "narrow is a view");
    mp_tensor_free(&s);
    mp_tensor m;
    CHECK(mp_tensor_view(&m, &r, 0, 2, (int64_t[]){3, 4}) == MP_OK, "view");
    CHECK(mp_tensor_slice(&s, &m, 1, 0, 2, 2) == MP_OK, "slice every 2nd column");
    CHECK(s.st != m.st && s.shape[0] == 3 && s.shape[1] == 2, "strided slice is a copy");
    float want_s[6] = {0, 2, 4, 100, 8, 10};
    CHECK(memcmp(s.data, want_s, sizeof want_s) == 0, "slice values");
    mp_tensor_free(&s);
    int64_t idx[3] = {3, 0, 3};
    CHECK(mp_tensor_index_select(&s, &m, 1, idx, 3) == MP_OK, "index_select");
    float want_i[9] = {3, 0, 3, 7, 4, 7, 11, 8, 11};
    CHECK(memcmp(s.data, want_i, sizeof want_i) == 0, "index_select values");
    mp_tensor_free(&s);

    /* unsqueeze / squeeze / flatten are views with the expected shapes */
    mp_tensor u, q, f;
    CHECK(mp_tensor_unsqueeze(&u, &m, 1) == MP_OK && u.ndim == 3 && u.shape[1] == 1 && u.st == m.st, "unsqueeze");
    CHECK(mp_tensor_squeeze(&q, &u, -1) == MP_OK && q.ndim == 2 && q.shape[0] == 3 && q.shape[1] == 4, "squeeze");
    CHECK(mp_tensor_flatten(&f, &u, 0, 1) == MP_OK && f.ndim == 2 && f.shape[0] == 3 && f.shape[1] == 4, "flatten");
    mp_tensor_free(&u);
    mp_tensor_free(&q);
    mp_tensor_free(&f);

    /* external storage: invalidating it invalidates every tensor on it */
    float ext[6] = {1, 2, 3, 4, 5, 6};
    mp_storage *es;
    mp_tensor e1, e2;
    CHECK(mp_storage_external(&es, ext, 6) == MP_OK, "external");
    CHECK(mp_tensor_on(&e1, es, 0, 2, (int64_t[]){2, 3}) == MP_OK, "on");
    CHECK(mp_tensor_select(&e2, &e1, 1) == MP_OK && e2.data[0] == 4.0f, "view of the external");
    CHECK(mp_tensor_on(&f, es, 4, 1, (int64_t[]){3}) == MP_ERR_ARG && is_empty(&f), "view outside its storage");
    CHECK(strstr(mp_last_error(), "a Tensor view outside its storage") != NULL, "message: %s", mp_last_error());
    mp_storage_invalidate(es, "the model was closed");
    CHECK(!mp_tensor_valid(&e1) && !mp_tensor_valid(&e2), "invalidated");
    CHECK(mp_tensor_check_valid(&e2) == MP_ERR_ARG, "invalid status");
    CHECK(strcmp(mp_last_error(), "Tensor is no longer valid (the model was closed)") == 0, "message: %s",
          mp_last_error());
    CHECK(mp_tensor_view(&f, &e1, 0, 1, (int64_t[]){1}) == MP_ERR_ARG && is_empty(&f), "no view of an invalid one");
    CHECK(ext[0] == 1.0f, "external memory untouched");
    mp_tensor_free(&e1);
    mp_tensor_free(&e2);
    mp_storage_release(es); /* the last reference */

    mp_tensor_free(&m);
    mp_tensor_free(&v);
    mp_tensor_free(&r);
}

/* C[n,m] = A[n,k] B[k,m] at the given offsets, naive, in double. */
static void naive_mm(const float *A, const float *B, double *C, int64_t n, int64_t k, int64_t m) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) s += (double)A[i * k + p] * B[p * m + j];
            C[i * m + j] = s;
        }
}

static void test_matmul(void) {
    mp_tensor a, b, c;
    double ref[64 * 48];
    /* plain 2-D, large enough for OpenBLAS's blocked kernels */
    mp_tensor_init(&a, 2, (int64_t[]){64, 37});
    mp_tensor_init(&b, 2, (int64_t[]){37, 48});
    fill_rnd(&a);
    fill_rnd(&b);
    CHECK(mp_tensor_matmul(&c, &a, &b) == MP_OK && c.ndim == 2 && c.shape[0] == 64 && c.shape[1] == 48, "2-D");
    naive_mm(a.data, b.data, ref, 64, 37, 48);
    double worst = 0;
    for (size_t i = 0; i < c.numel; i++) worst = fmax(worst, fabs(c.data[i] - ref[i]));
    CHECK(worst < 1e-5, "2-D matmul off by %g", worst);
    mp_tensor_free(&c);
    mp_tensor_free(&a);
    mp_tensor_free(&b);

    /* batch broadcast [2,1,3,4] @ [5,4,2] -> [2,5,3,2] */
    mp_tensor_init(&a, 4, (int64_t[]){2, 1, 3, 4});
    mp_tensor_init(&b, 3, (int64_t[]){5, 4, 2});
    fill_rnd(&a);
    fill_rnd(&b);
    CHECK(mp_tensor_matmul(&c, &a, &b) == MP_OK, "batched");
    CHECK(c.ndim == 4 && c.shape[0] == 2 && c.shape[1] == 5 && c.shape[2] == 3 && c.shape[3] == 2, "batched shape");
    worst = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++) {
            naive_mm(a.data + i * 12, b.data + j * 8, ref, 3, 4, 2);
            for (int e = 0; e < 6; e++) worst = fmax(worst, fabs(c.data[(i * 5 + j) * 6 + e] - ref[e]));
        }
    CHECK(worst < 1e-6, "batched matmul off by %g", worst);
    mp_tensor_free(&c);

    /* a 1-D left side is a row, a 1-D right side a column; on views */
    mp_tensor row, col;
    mp_tensor_select(&row, &b, 3); /* [4,2] */
    mp_tensor_select(&col, &row, 1); /* [2] */
    CHECK(mp_tensor_matmul(&c, &row, &col) == MP_OK && c.ndim == 1 && c.shape[0] == 4, "matrix @ vector");
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(c.data[i], (double)row.data[2 * i] * col.data[0] + (double)row.data[2 * i + 1] * col.data[1], 1e-6,
                   "row %d", i);
    mp_tensor_free(&c);
    double dot;
    CHECK(mp_tensor_dot(&col, &col, &dot) == MP_OK, "dot");
    CHECK(dot == (double)col.data[0] * col.data[0] + (double)col.data[1] * col.data[1], "dot in double, exact");
    mp_tensor_free(&row);
    mp_tensor_free(&col);

    /* k = 0: zeros of [3, 2]; n = 0: an empty result */
    mp_tensor z1, z2;
    mp_tensor_init(&z1, 2, (int64_t[]){3, 0});
    mp_tensor_init(&z2, 2, (int64_t[]){0, 2});
    CHECK(mp_tensor_matmul(&c, &z1, &z2) == MP_OK && c.numel == 6 && c.data[5] == 0.0f, "k = 0");
    mp_tensor_free(&c);
    CHECK(mp_tensor_matmul(&c, &z2, &b) == MP_ERR_ARG, "[0,2] @ [5,4,2]: 2 against 4 rows");
    CHECK(mp_tensor_matmul(&c, &z2, &z1) == MP_ERR_ARG, "[0,2] @ [3,0]");
    mp_tensor_free(&z1);

    /* the error case: status, message, out left empty */
    CHECK(mp_tensor_matmul(&c, &a, &a) == MP_ERR_ARG, "[2,1,3,4] @ [2,1,3,4]");
    CHECK(strcmp(mp_last_error(), "shapes [2,1,3,4] and [2,1,3,4] do not multiply (4 columns against 3 rows)") == 0,
          "message: %s", mp_last_error());
    CHECK(is_empty(&c), "out left empty");
    mp_tensor_free(&c); /* a no-op */
    mp_tensor_free(&z2);
    mp_tensor_free(&a);
    mp_tensor_free(&b);
}

static void test_elementwise(void) {
    mp_tensor a, b, c;
    mp_tensor_init(&a, 2, (int64_t[]){3, 4});
    mp_tensor_init(&b, 1, (int64_t[]){4});
    fill_rnd(&a);
    fill_rnd(&b);
    /* broadcasting: the same float operations as a naive loop, so equal exactly */
    CHECK(mp_tensor_binary(&c, MP_TENSOR_SUB, &a, &b) == MP_OK && c.ndim == 2 && c.shape[1] == 4, "sub");
    int same = 1;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) same &= c.data[i * 4 + j] == a.data[i * 4 + j] - b.data[j];
    CHECK(same, "a - b broadcast");
    mp_tensor_free(&c);
    float two = 2.0f;
    mp_tensor scalar = {.data = &two, .numel = 1};
    CHECK(mp_tensor_binary(&c, MP_TENSOR_POW, &a, &scalar) == MP_OK, "pow");
    same = 1;
    for (size_t i = 0; i < a.numel; i++) same &= c.data[i] == (float)((double)a.data[i] * a.data[i]);
    CHECK(same, "a ^ 2");
    mp_tensor_free(&c);

    /* in place with a right side that is a row of t itself: copied first */
    mp_tensor row;
    float want[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = a.data[i * 4 + j] + a.data[4 + j];
    mp_tensor_select(&row, &a, 1);
    CHECK(mp_tensor_binary_(&a, MP_TENSOR_ADD, &row) == MP_OK, "add_ of its own row");
    CHECK(memcmp(a.data, want, sizeof want) == 0, "add_ used the row before it changed");
    mp_tensor_free(&row);
    CHECK(mp_tensor_binary_(&b, MP_TENSOR_ADD, &a) == MP_ERR_ARG, "[4] += [3,4]");
    CHECK(strcmp(mp_last_error(), "the right side [3,4] does not broadcast to the Tensor's shape [4] (in place)") == 0,
          "message: %s", mp_last_error());
    mp_tensor bad;
    mp_tensor_init(&bad, 1, (int64_t[]){3});
    CHECK(mp_tensor_binary(&c, MP_TENSOR_ADD, &a, &bad) == MP_ERR_ARG && is_empty(&c), "[3,4] + [3]");
    CHECK(strcmp(mp_last_error(), "shapes [3,4] and [3] differ and do not broadcast (dim 2 of the result: 4 vs 3)") == 0,
          "message: %s", mp_last_error());
    mp_tensor_free(&bad);

    /* copy_ broadcasts; expand */
    CHECK(mp_tensor_copy_(&a, &b) == MP_OK, "copy_");
    CHECK(memcmp(a.data + 8, b.data, 4 * sizeof(float)) == 0, "copy_ row 3");
    CHECK(mp_tensor_expand(&c, &b, 2, (int64_t[]){2, 4}) == MP_OK && c.numel == 8 && c.data[7] == b.data[3], "expand");
    mp_tensor_free(&c);

    /* unary and clamp against the C library */
    float xs[5] = {-2.0f, -0.5f, 0.0f, 0.5f, NAN};
    mp_tensor x, y;
    mp_tensor_init_from(&x, 1, (int64_t[]){5}, xs);
    CHECK(mp_tensor_unary(&y, MP_TENSOR_SIGMOID, &x) == MP_OK, "sigmoid");
    CHECK_NEAR(y.data[0], 1.0 / (1.0 + exp(2.0)), 1e-7, "sigmoid(-2)");
    CHECK_NEAR(y.data[3], 1.0 / (1.0 + exp(-0.5)), 1e-7, "sigmoid(0.5)");
    mp_tensor_free(&y);
    CHECK(mp_tensor_unary(&y, MP_TENSOR_RELU, &x) == MP_OK, "relu");
    CHECK(y.data[0] == 0.0f && y.data[3] == 0.5f && isnan(y.data[4]), "relu keeps NaN");
    mp_tensor_free(&y);
    CHECK(mp_tensor_clamp(&y, &x, -1.0f, 0.25f) == MP_OK, "clamp");
    CHECK(y.data[0] == -1.0f && y.data[1] == -0.5f && y.data[3] == 0.25f, "clamp values");
    mp_tensor_free(&y);
    CHECK(mp_tensor_clamp(&y, &x, 1.0f, 0.0f) == MP_ERR_ARG && is_empty(&y), "lo above hi");
    mp_tensor_free(&x);
    mp_tensor_free(&a);
    mp_tensor_free(&b);
}

static void test_reductions(void) {
    enum { N = 1000 };
    mp_tensor t, r;
    mp_tensor_init(&t, 1, (int64_t[]){N});
    for (int i = 0; i < N; i++) t.data[i] = (float)(i + 1);
    double s;
    CHECK(mp_tensor_sum_all(&t, 0, &s) == MP_OK && s == N * (N + 1) / 2.0, "sum 1..N = %g", s);
    CHECK(mp_tensor_sum_all(&t, 1, &s) == MP_OK && s == (N + 1) / 2.0, "mean");
    /* variance of 1..N: N(N+1)/12 unbiased; (N^2-1)/12 biased */
    CHECK(mp_tensor_var_all(&t, 1, 0, &s) == MP_OK, "var");
    CHECK_NEAR(s, N * (N + 1) / 12.0, 1e-9 * s, "unbiased var of 1..N");
    CHECK(mp_tensor_var_all(&t, 0, 1, &s) == MP_OK, "std");
    CHECK_NEAR(s, sqrt((N * (double)N - 1) / 12.0), 1e-9 * s, "biased std of 1..N");
    /* p-norms of (3, 4, 0) */
    mp_tensor v;
    mp_tensor_init_from(&v, 1, (int64_t[]){3}, (float[]){3, -4, 0});
    CHECK(mp_tensor_norm_all(&v, 2, &s) == MP_OK && s == 5.0, "2-norm");
    CHECK(mp_tensor_norm_all(&v, 1, &s) == MP_OK && s == 7.0, "1-norm");
    CHECK(mp_tensor_norm_all(&v, INFINITY, &s) == MP_OK && s == 4.0, "inf-norm");
    CHECK(mp_tensor_norm_all(&v, 0, &s) == MP_OK && s == 2.0, "0-norm");
    CHECK(mp_tensor_norm_all(&v, 3, &s) == MP_OK, "3-norm");
    CHECK_NEAR(s, cbrt(27.0 + 64.0), 1e-12, "3-norm value");
    CHECK(mp_tensor_norm_all(&v, -1, &s) == MP_ERR_ARG, "p = -1");
    mp_tensor_free(&v);
    mp_tensor_free(&t);

    /* along each dim of a [2,3,4]: naive loops */
    mp_tensor_init(&t, 3, (int64_t[]){2, 3, 4});
    fill_rnd(&t);
    t.data[5] = NAN; /* [0,1,1]: max over dim 1 at (0, 1) is NaN, index 1 */
    for (int d = 0; d < 3; d++) {
        int64_t shape[MP_MAXDIM], idx[24];
        CHECK(mp_tensor_sum_dim(&r, &t, d, 1, 0) == MP_OK && r.ndim == 3 && r.shape[d] == 1, "sum over dim %d", d);
        int nd = mp_tensor_reduced_shape(&t, d, 0, shape);
        CHECK(nd == 2, "reduced rank");
        mp_tensor mx;
        CHECK(mp_tensor_ext_dim(&mx, idx, &t, d, 0, 1) == MP_OK && mx.ndim == 2, "max over dim %d", d);
        int ok_sum = 1, ok_max = 1, k = 0;
        for (int i0 = 0; i0 < (d == 0 ? 1 : 2); i0++)
            for (int i1 = 0; i1 < (d == 1 ? 1 : 3); i1++)
                for (int i2 = 0; i2 < (d == 2 ? 1 : 4); i2++, k++) {
                    double acc = 0;
                    int n = (int)t.shape[d], best = -1;
                    for (int j = 0; j < n; j++) {
                        int at = (d == 0 ? j : i0) * 12 + (d == 1 ? j : i1) * 4 + (d == 2 ? j : i2);
                        float x = t.data[at];
                        acc += x;
                        if (best >= 0 && isnan(t.data[best])) continue;
                        if (best < 0 || isnan(x) || x > t.data[best]) best = at;
                    }
                    ok_sum &= isnan(acc) ? isnan(r.data[k]) : r.data[k] == (float)acc;
                    ok_max &= isnan(t.data[best]) ? isnan(mx.data[k]) : mx.data[k] == t.data[best];
                    int jbest = d == 0 ? best / 12 : d == 1 ? best / 4 % 3 : best % 4;
                    ok_max &= idx[k] == jbest;
                }
        CHECK(ok_sum, "sums over dim %d", d);
        CHECK(ok_max, "max and its index over dim %d", d);
        mp_tensor_free(&r);
        mp_tensor_free(&mx);
    }
    size_t at;
    CHECK(mp_tensor_argext_all(&t, 0, &at) == MP_OK && at == 5, "argmin: the NaN wins");
    mp_tensor_free(&t);

    /* softmax of (0, ln 2, ln 3, -inf) = (1, 2, 3, 0) / 6 */
    mp_tensor_init_from(&t, 2, (int64_t[]){1, 4}, (float[]){0, (float)log(2.0), (float)log(3.0), -INFINITY});
    CHECK(mp_tensor_softmax(&r, &t, 1, 0) == MP_OK, "softmax");
    CHECK_NEAR(r.data[0], 1 / 6.0, 1e-7, "p0");
    CHECK_NEAR(r.data[1], 2 / 6.0, 1e-7, "p1");
    CHECK_NEAR(r.data[2], 3 / 6.0, 1e-7, "p2");
    CHECK(r.data[3] == 0.0f, "p3");
    mp_tensor_free(&r);
    CHECK(mp_tensor_softmax(&r, &t, 1, 1) == MP_OK, "log_softmax");
    CHECK_NEAR(r.data[2], log(0.5), 1e-6, "log p2");
    mp_tensor_free(&r);

    /* topk of (5, 1, 5, 3): largest 2 = 5 (index 0), 5 (index 2); smallest 1 = 1 (index 1) */
    mp_tensor_free(&t);
    mp_tensor_init_from(&t, 1, (int64_t[]){4}, (float[]){5, 1, 5, 3});
    int64_t ti[2];
    CHECK(mp_tensor_topk(&r, ti, &t, 2, 0, 1) == MP_OK && r.data[0] == 5 && r.data[1] == 5, "topk values");
    CHECK(ti[0] == 0 && ti[1] == 2, "topk ties by index");
    mp_tensor_free(&r);
    CHECK(mp_tensor_topk(&r, ti, &t, 1, 0, 0) == MP_OK && r.data[0] == 1 && ti[0] == 1, "smallest");
    mp_tensor_free(&r);
    CHECK(mp_tensor_topk(&r, ti, &t, 5, 0, 1) == MP_ERR_ARG && is_empty(&r), "k too large");

    /* median through GSL: (5, 1, 5, 3) -> 4; odd count -> the middle */
    CHECK(mp_tensor_median(&t, &s) == MP_OK && s == 4.0, "even median %g", s);
    CHECK(memcmp(t.data, (float[]){5, 1, 5, 3}, 4 * sizeof(float)) == 0, "median leaves the tensor");
    double xs[5] = {9, -1, 4, 2, 7}, scratch[5];
    CHECK(mp_tensor_stat_median(xs, 5, scratch) == 4.0 && xs[0] == 9, "odd median, x unchanged");
    mp_tensor_free(&t);

    /* cosine similarity: parallel 1, orthogonal 0; allclose */
    mp_tensor a, b;
    mp_tensor_init_from(&a, 2, (int64_t[]){2, 2}, (float[]){1, 0, 2, 2});
    mp_tensor_init_from(&b, 1, (int64_t[]){2}, (float[]){0, 3});
    CHECK(mp_tensor_cos_sim(&r, &a, &b, 1) == MP_OK && r.ndim == 1 && r.shape[0] == 2, "cos_sim");
    CHECK_NEAR(r.data[0], 0.0, 1e-7, "orthogonal");
    CHECK_NEAR(r.data[1], sqrt(0.5), 1e-7, "45 degrees");
    mp_tensor_free(&r);
    int ok;
    CHECK(mp_tensor_allclose(&a, &a, 0, 0, &ok) == MP_OK && ok, "allclose to itself");
    CHECK(mp_tensor_allclose(&a, &b, 1e-5, 1e-8, &ok) == MP_OK && !ok, "not close");
    mp_tensor_free(&a);
    mp_tensor_free(&b);
}

static void test_empty_and_copies(void) {
    mp_tensor e, r, t, u;
    /* [0, 3]: sums are 0, mean/max are errors, reductions keep the other dims */
    CHECK(mp_tensor_init(&e, 2, (int64_t[]){0, 3}) == MP_OK && e.numel == 0 && e.data != NULL, "empty");
    double s = -1;
    CHECK(mp_tensor_sum_all(&e, 0, &s) == MP_OK && s == 0, "sum of nothing");
    CHECK(mp_tensor_sum_all(&e, 1, &s) == MP_ERR_ARG, "mean of nothing");
    CHECK(strcmp(mp_last_error(), "mean of an empty Tensor") == 0, "message: %s", mp_last_error());
    CHECK(mp_tensor_sum_dim(&r, &e, 0, 0, 0) == MP_OK && r.ndim == 1 && r.shape[0] == 3 && r.data[2] == 0, "sum dim 0");
    mp_tensor_free(&r);
    CHECK(mp_tensor_sum_dim(&r, &e, 1, 1, 0) == MP_OK && r.numel == 0 && r.shape[1] == 1, "sum dim 1");
    mp_tensor_free(&r);
    int64_t idx[3];
    CHECK(mp_tensor_ext_dim(&r, idx, &e, 0, 0, 1) == MP_ERR_ARG && is_empty(&r), "max over an empty dim");
    CHECK(strcmp(mp_last_error(), "max over dim 1, which is empty") == 0, "message: %s", mp_last_error());
    CHECK(mp_tensor_softmax(&r, &e, 1, 0) == MP_OK && r.numel == 0, "softmax of nothing");
    mp_tensor_free(&r);
    CHECK(mp_tensor_permute(&r, &e, (int[]){1, 0}) == MP_OK && r.shape[0] == 3 && r.shape[1] == 0, "permute empty");
    mp_tensor_free(&r);

    /* cat [0,3] with [2,3] along dim 0; stack along a new last dim */
    mp_tensor_init_from(&t, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    const mp_tensor *two[2] = {&e, &t};
    CHECK(mp_tensor_cat(&r, two, 2, 0) == MP_OK && r.shape[0] == 2 && memcmp(r.data, t.data, 6 * 4) == 0, "cat");
    mp_tensor_free(&r);
    const mp_tensor *tt[2] = {&t, &t};
    CHECK(mp_tensor_cat(&r, tt, 2, 1) == MP_OK && r.shape[1] == 6, "cat dim 1");
    CHECK(memcmp(r.data, (float[]){1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}, 12 * 4) == 0, "cat dim 1 values");
    mp_tensor_free(&r);
    CHECK(mp_tensor_stack(&r, tt, 2, 2) == MP_OK && r.ndim == 3 && r.shape[2] == 2, "stack");
    CHECK(r.data[0] == 1 && r.data[1] == 1 && r.data[11] == 6, "stack values");
    mp_tensor_free(&r);
    CHECK(mp_tensor_stack(&r, two, 2, 0) == MP_ERR_ARG && is_empty(&r), "stack of different shapes");
    CHECK(strcmp(mp_last_error(), "shapes [0,3] and [2,3] (entries 1 and 2) differ") == 0, "message: %s",
          mp_last_error());

    /* permute [2,3,4] -> (2,0,1) against naive indexing */
    mp_tensor_init(&u, 3, (int64_t[]){2, 3, 4});
    fill_rnd(&u);
    CHECK(mp_tensor_permute(&r, &u, (int[]){2, 0, 1}) == MP_OK && r.shape[0] == 4 && r.shape[1] == 2, "permute");
    int same = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++) same &= r.data[(i * 2 + j) * 3 + k] == u.data[(j * 3 + k) * 4 + i];
    CHECK(same, "permuted values");
    mp_tensor_free(&r);
    CHECK(mp_tensor_permute(&r, &u, (int[]){0, 0, 1}) == MP_ERR_ARG, "not a permutation");
    mp_tensor_free(&u);

    /* ranges */
    CHECK(mp_tensor_arange(&r, 1, 2, 0.25) == MP_OK && r.numel == 4 && r.data[3] == 1.75f, "arange");
    mp_tensor_free(&r);
    CHECK(mp_tensor_arange(&r, 0, 5, -1) == MP_ERR_ARG, "arange the wrong way");
    CHECK(strcmp(mp_last_error(), "step -1.0 goes away from end (start 0.0, end 5.0)") == 0, "message: %s",
          mp_last_error());
    CHECK(mp_tensor_linspace(&r, -1, 1, 5) == MP_OK && r.data[0] == -1 && r.data[2] == 0 && r.data[4] == 1, "linspace");
    mp_tensor_free(&r);
    CHECK(mp_tensor_eye(&r, 2, 3) == MP_OK && memcmp(r.data, (float[]){1, 0, 0, 0, 1, 0}, 6 * 4) == 0, "eye");
    mp_tensor_free(&r);

    /* bad shapes */
    CHECK(mp_tensor_init(&r, 2, (int64_t[]){2, -3}) == MP_ERR_ARG && is_empty(&r), "negative extent");
    CHECK(strcmp(mp_last_error(), "negative Tensor extent -3 in dim 2") == 0, "message: %s", mp_last_error());
    CHECK(mp_tensor_init(&r, 2, (int64_t[]){INT64_C(1) << 40, INT64_C(1) << 40}) == MP_ERR_NOMEM, "overflow");
    CHECK(strstr(mp_last_error(), "Tensor size overflows") != NULL, "message: %s", mp_last_error());
    CHECK(mp_tensor_reshape(&r, &t, 1, (int64_t[]){5}) == MP_ERR_ARG, "reshape to another numel");
    CHECK(strcmp(mp_last_error(), "shape has 5 elements, the Tensor [2,3] has 6") == 0, "message: %s",
          mp_last_error());

    /* 0-dim: one element */
    mp_tensor z;
    CHECK(mp_tensor_init_full(&z, 0, (int64_t[]){0}, 2.5f) == MP_OK && z.numel == 1 && z.data[0] == 2.5f, "0-dim");
    CHECK(mp_tensor_binary(&r, MP_TENSOR_MUL, &t, &z) == MP_OK && r.ndim == 2 && r.data[5] == 15.0f, "0-dim operand");
    mp_tensor_free(&r);
    CHECK(mp_tensor_select(&r, &z, 0) == MP_ERR_ARG && is_empty(&r), "select on a 0-dim Tensor");
    mp_tensor_free(&z);
    mp_tensor_free(&t);
    mp_tensor_free(&e);
}

int main(void) {
    mp_init();
    test_create_and_views();
    test_matmul();
    test_elementwise();
    test_reductions();
    test_empty_and_copies();
    return tu_finish("test_tensor_core");
}
