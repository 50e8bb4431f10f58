/* test_autograd.c — the autograd core (analyze/autograd.h) from C, without
 * Lua, against independent references:
 *  * cross-entropy built from recorded ops (log_softmax, gather, a weighted
 *    sum, neg) has the value and the gradient of the fused runtime/grad.h
 *    mp_grad_ce (mean over the rows whose target is not -1) to 1e-6;
 *  * matmul with broadcast batch dims against central differences evaluated
 *    in double (the forward re-done in double here, step 1e-3, tolerance 1e-4:
 *    the float32 gradient's rounding);
 *  * a chain of 100000 ops: backward and release walk it without recursion;
 *  * the errors: a saved tensor modified in place (its version bumped), a
 *    second backward through a freed graph, a non-scalar root without a
 *    gradient; retain keeps the graph. */
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "grad.h"
#include "testutil.h"

static unsigned lcg_state = 4242;
static float rnd(void) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* y = op(x...) recorded: returns y's node (the caller frees y and the node). */
static mp_ag_node *rec(mp_ag_op op, int n, mp_ag_node *const *in, const mp_tensor *const *x, const mp_tensor *y,
                       const mp_ag_args *extra) {
    mp_ag_args a;
    if (extra) a = *extra;
    else memset(&a, 0, sizeof a);
    a.op = op;
    mp_ag_node *nd = NULL;
    CHECK(mp_ag_record(&nd, &a, n, in, x, y) == MP_OK, "record %s: %s", mp_ag_op_name(op), mp_last_error());
    return nd;
}

static void test_ce(void) {
    enum { N = 6, V = 7 };
    const int targets[N] = {3, -1, 0, 6, 2, 2};
    mp_tensor lg, ls, pk, w, wp, s;
    CHECK(mp_tensor_init(&lg, 2, (int64_t[]){N, V}) == MP_OK, "init");
    for (size_t i = 0; i < lg.numel; i++) lg.data[i] = 3 * rnd();
    /* the fused reference */
    float dl[N * V], rows[N];
    double ref;
    CHECK(mp_grad_ce(lg.data, targets, N, V, dl, rows, &ref) == MP_OK, "mp_grad_ce");
    /* the same from recorded ops */
    mp_ag_node *leaf, *n1, *n2, *n3, *n4;
    CHECK(mp_ag_leaf(&leaf, 2, lg.shape) == MP_OK, "leaf");
    CHECK(mp_tensor_softmax(&ls, &lg, 1, 1) == MP_OK, "log_softmax");
    mp_ag_args a1 = {.d = 1};
    n1 = rec(MP_AG_LOG_SOFTMAX, 1, &leaf, (const mp_tensor *[]){&lg}, &ls, &a1);
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = targets[i] < 0 ? 0 : targets[i];
    CHECK(mp_tensor_gather(&pk, &ls, 1, 2, (int64_t[]){N, 1}, idx) == MP_OK, "gather");
    mp_ag_args a2 = {.d = 1, .idx = idx, .nidx = N};
    n2 = rec(MP_AG_GATHER, 1, &n1, (const mp_tensor *[]){&ls}, &pk, &a2);
    int valid = 0;
    for (int i = 0; i < N; i++) valid += targets[i] >= 0;
    CHECK(mp_tensor_init(&w, 2, (int64_t[]){N, 1}) == MP_OK, "w");
    for (int i = 0; i < N; i++) w.data[i] = targets[i] >= 0 ? -1.0f / (float)valid : 0.0f;
    CHECK(mp_tensor_binary(&wp, MP_TENSOR_MUL, &pk, &w) == MP_OK, "mul");
    n3 = rec(MP_AG_MUL, 2, (mp_ag_node *[]){n2, NULL}, (const mp_tensor *[]){&pk, &w}, &wp, NULL);
    double sum;
    CHECK(mp_tensor_sum_all(&wp, 0, &sum) == MP_OK, "sum");
    float sv = (float)sum;
    CHECK(mp_tensor_init_from(&s, 0, NULL, &sv) == MP_OK, "0-dim");
    n4 = rec(MP_AG_SUM, 1, &n3, (const mp_tensor *[]){&wp}, &s, NULL);
    CHECK_NEAR(sv, ref, 1e-6, "the CE value");
    CHECK(mp_ag_backward(n4, NULL, 0) == MP_OK, "backward: %s", mp_last_error());
    const mp_tensor *g = mp_ag_grad(leaf);
    CHECK(g && g->numel == (size_t)N * V, "the leaf has a gradient");
    if (g) CHECK(tu_max_abs_diff(g->data, dl, (size_t)N * V) <= 1e-6, "autograd CE gradient = mp_grad_ce's (max diff %g)",
                 tu_max_abs_diff(g->data, dl, (size_t)N * V));
    /* a second backward through the freed graph */
    CHECK(mp_ag_backward(n4, NULL, 0) == MP_ERR_ARG && strstr(mp_last_error(), "already freed"),
          "backward twice: %s", mp_last_error());
    mp_ag_unref(n4), mp_ag_unref(n3), mp_ag_unref(n2), mp_ag_unref(n1), mp_ag_unref(leaf);
    mp_tensor_free(&lg), mp_tensor_free(&ls), mp_tensor_free(&pk), mp_tensor_free(&w), mp_tensor_free(&wp);
    mp_tensor_free(&s);
}

/* sum(R * (A @ B)) in double, A [2,1,3,4], B [3,4,2] -> [2,3,3,2] */
static double mm_loss(const double *A, const double *B, const float *R) {
    double s = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 2; c++) {
                    double v = 0;
                    for (int k = 0; k < 4; k++) v += A[(i * 3 + r) * 4 + k] * B[(j * 4 + k) * 2 + c];
                    s += R[((i * 3 + j) * 3 + r) * 2 + c] * v;
                }
    return s;
}

static void test_matmul_fd(void) {
    mp_tensor A, B, Y, R;
    CHECK(mp_tensor_init(&A, 4, (int64_t[]){2, 1, 3, 4}) == MP_OK, "A");
    CHECK(mp_tensor_init(&B, 3, (int64_t[]){3, 4, 2}) == MP_OK, "B");
    for (size_t i = 0; i < A.numel; i++) A.data[i] = rnd();
    for (size_t i = 0; i < B.numel; i++) B.data[i] = rnd();
    CHECK(mp_tensor_matmul(&Y, &A, &B) == MP_OK, "matmul");
    CHECK(Y.ndim == 4 && Y.numel == 36, "the broadcast shape");
    CHECK(mp_tensor_init(&R, Y.ndim, Y.shape) == MP_OK, "R");
    for (size_t i = 0; i < R.numel; i++) R.data[i] = rnd();
    mp_ag_node *la, *lb, *nm;
    CHECK(mp_ag_leaf(&la, A.ndim, A.shape) == MP_OK && mp_ag_leaf(&lb, B.ndim, B.shape) == MP_OK, "leaves");
    nm = rec(MP_AG_MATMUL, 2, (mp_ag_node *[]){la, lb}, (const mp_tensor *[]){&A, &B}, &Y, NULL);
    CHECK(mp_ag_backward(nm, &R, 1) == MP_OK, "backward with a gradient: %s", mp_last_error());
    double a[24], b[24];
    for (int i = 0; i < 24; i++) a[i] = A.data[i], b[i] = B.data[i];
    const double h = 1e-3;
    for (int side = 0; side < 2; side++) {
        double *x = side ? b : a;
        const mp_tensor *g = mp_ag_grad(side ? lb : la);
        for (int i = 0; i < 24 && g; i++) {
            double x0 = x[i];
            x[i] = x0 + h;
            double fp = mm_loss(a, b, R.data);
            x[i] = x0 - h;
            double fm = mm_loss(a, b, R.data);
            x[i] = x0;
            CHECK_NEAR(g->data[i], (fp - fm) / (2 * h), 1e-4, "matmul d/d %s[%d]", side ? "B" : "A", i);
        }
    }
    /* retain = 1: a second backward accumulates (twice the gradient) */
    float g0 = mp_ag_grad(la)->data[5];
    CHECK(mp_ag_backward(nm, &R, 0) == MP_OK, "second backward after retain: %s", mp_last_error());
    CHECK_NEAR(mp_ag_grad(la)->data[5], 2 * g0, 1e-6, "accumulated");
    /* a non-scalar root needs a gradient */
    mp_ag_node *l2;
    CHECK(mp_ag_leaf(&l2, 2, (int64_t[]){2, 2}) == MP_OK, "leaf");
    CHECK(mp_ag_backward(l2, NULL, 0) == MP_ERR_ARG && strstr(mp_last_error(), "has 4 elements, not one"),
          "non-scalar: %s", mp_last_error());
    mp_ag_unref(l2);
    mp_ag_unref(nm), mp_ag_unref(la), mp_ag_unref(lb);
    mp_tensor_free(&A), mp_tensor_free(&B), mp_tensor_free(&Y), mp_tensor_free(&R);
}

static void test_inplace_version(void) {
    mp_tensor x, c, y, s;
    CHECK(mp_tensor_init_full(&x, 1, (int64_t[]){3}, 2.0f) == MP_OK && mp_tensor_init_full(&c, 1, (int64_t[]){3}, 3.0f) == MP_OK,
          "init");
    CHECK(mp_tensor_binary(&y, MP_TENSOR_MUL, &x, &c) == MP_OK, "mul");
    mp_ag_node *lx, *n1, *n2;
    CHECK(mp_ag_leaf(&lx, 1, x.shape) == MP_OK, "leaf");
    n1 = rec(MP_AG_MUL, 2, (mp_ag_node *[]){lx, NULL}, (const mp_tensor *[]){&x, &c}, &y, NULL);
    CHECK(mp_ag_saved(c.st) && !mp_ag_saved(x.st), "mul saved the constant side only (x's gradient needs c)");
    float v = 18;
    CHECK(mp_tensor_init_from(&s, 0, NULL, &v) == MP_OK, "s");
    n2 = rec(MP_AG_SUM, 1, &n1, (const mp_tensor *[]){&y}, &s, NULL);
    mp_tensor_fill_(&c, 5.0f);
    mp_ag_bump(c.st);
    CHECK(mp_ag_backward(n2, NULL, 0) == MP_ERR_ARG && strstr(mp_last_error(), "modified by an in-place op"),
          "in-place on a saved tensor: %s", mp_last_error());
    CHECK(mp_ag_grad(lx) == NULL, "nothing accumulated after the refused backward");
    mp_ag_unref(n2), mp_ag_unref(n1);
    CHECK(!mp_ag_saved(c.st), "released graph: c no longer registered");
    mp_ag_unref(lx);
    mp_tensor_free(&x), mp_tensor_free(&c), mp_tensor_free(&y), mp_tensor_free(&s);
}

static void test_long_chain(void) {
    enum { LEN = 100000 };
    mp_tensor x, y;
    float one = 1.0f;
    CHECK(mp_tensor_init_from(&x, 0, NULL, &one) == MP_OK, "x");
    mp_ag_node *leaf, *cur;
    CHECK(mp_ag_leaf(&leaf, 0, NULL) == MP_OK, "leaf");
    cur = mp_ag_ref(leaf);
    for (int i = 0; i < LEN; i++) {
        CHECK(mp_tensor_neg(&y, &x) == MP_OK, "neg");
        mp_ag_node *nx = rec(MP_AG_NEG, 1, &cur, (const mp_tensor *[]){&x}, &y, NULL);
        mp_ag_unref(cur);
        cur = nx;
        mp_tensor_free(&x);
        x = y;
    }
    CHECK(mp_ag_backward(cur, NULL, 0) == MP_OK, "backward through %d ops: %s", LEN, mp_last_error());
    CHECK(mp_ag_grad(leaf) && mp_ag_grad(leaf)->data[0] == 1.0f, "(-1)^%d = 1", LEN);
    mp_ag_unref(cur); /* releases the chain iteratively */
    mp_ag_unref(leaf);
    mp_tensor_free(&x);
    CHECK(mp_ag_live() == 0, "every node released (%zu alive)", mp_ag_live());
}

int main(void) {
    test_ce();
    test_matmul_fd();
    test_inplace_version();
    test_long_chain();
    return tu_finish("test_autograd");
}
