/* tensor_math.c — the C tensor core (analyze/tensor.h), part 2: broadcasting
 * arithmetic and comparisons (new tensors and in place), elementwise functions, reductions
 * over all elements or one dim (sum, mean, max/min and their indices, var,
 * std, p-norms; every sum in double, in index order), softmax, topk, cosine
 * similarity, allclose, and the median through GSL. Storage, views, shape
 * copies and matmul are in analyze/tensor.c. */
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_statistics_double.h>
#include <gsl/gsl_statistics_float.h>

/* ---- broadcasting ---- */

#define OP_FIRST ((mp_tensor_binop)-1) /* the left operand, read through its broadcast strides */

mp_status mp_tensor_broadcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *ndp, int64_t *out) {
    int nd = na > nb ? na : nb;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - na), ib = i - (nd - nb);
        int64_t ea = ia >= 0 ? sa[ia] : 1, eb = ib >= 0 ? sb[ib] : 1;
        if (ea != eb && ea != 1 && eb != 1) {
            char s1[128], s2[128];
            mp_tensor_shape_str(na, sa, s1, sizeof s1);
            mp_tensor_shape_str(nb, sb, s2, sizeof s2);
            return mp_error(MP_ERR_ARG, "shapes %s and %s differ and do not broadcast (dim %d of the result: %d vs %d)",
                            s1, s2, i + 1, (int)ea, (int)eb);
        }
        out[i] = ea == 1 ? eb : ea;
    }
    *ndp = nd;
    return MP_OK;
}

/* Element strides of x (ndim nx, contiguous) read as the broadcast shape out. */
static void bcast_strides(int nx, const int64_t *sx, int nd, const int64_t *out, int64_t *st) {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int ix = i - (nd - nx);
        if (ix < 0) {
            st[i] = 0;
            continue;
        }
        st[i] = (sx[ix] == 1 && out[i] != 1) ? 0 : s;
        s *= sx[ix];
    }
}

static inline float apply1(mp_tensor_binop op, float x, float y) {
    switch (op) {
    case MP_TENSOR_ADD: return x + y;
    case MP_TENSOR_SUB: return x - y;
    case MP_TENSOR_MUL: return x * y;
    case MP_TENSOR_DIV: return x / y;
    case MP_TENSOR_POW: return (float)pow((double)x, (double)y);
    case MP_TENSOR_EQ: return (float)(x == y);
    case MP_TENSOR_NE: return (float)(x != y);
    case MP_TENSOR_LT: return (float)(x < y);
    case MP_TENSOR_LE: return (float)(x <= y);
    case MP_TENSOR_GT: return (float)(x > y);
    case MP_TENSOR_GE: return (float)(x >= y);
    }
    return x; /* OP_FIRST */
}

/* out[i] = a[i*sa] op b[i*sb] for n elements; the common cases as plain loops
 * the compiler vectorizes. out may be a (in-place: same element). */
static void kernel(mp_tensor_binop op, float *out, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
#define LOOP(EXPR)                                                                                                     \
    do {                                                                                                               \
        if (sa == 1 && sb == 1)                                                                                        \
            for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; out[i] = (EXPR); }                             \
        else if (sa == 1 && sb == 0) {                                                                                 \
            float y = b[0];                                                                                            \
            for (int64_t i = 0; i < n; i++) { float x = a[i]; out[i] = (EXPR); }                                       \
        } else                                                                                                         \
            for (int64_t i = 0; i < n; i++) { float x = a[i * sa], y = b[i * sb]; out[i] = (EXPR); }                   \
    } while (0)
    switch (op) {
    case MP_TENSOR_ADD: LOOP(x + y); return;
    case MP_TENSOR_SUB: LOOP(x - y); return;
    case MP_TENSOR_MUL: LOOP(x * y); return;
    case MP_TENSOR_DIV: LOOP(x / y); return;
    case MP_TENSOR_POW: LOOP((float)pow((double)x, (double)y)); return;
    case MP_TENSOR_EQ: LOOP((float)(x == y)); return;
    case MP_TENSOR_NE: LOOP((float)(x != y)); return;
    case MP_TENSOR_LT: LOOP((float)(x < y)); return;
    case MP_TENSOR_LE: LOOP((float)(x <= y)); return;
    case MP_TENSOR_GT: LOOP((float)(x > y)); return;
    case MP_TENSOR_GE: LOOP((float)(x >= y)); return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = a[i * sa]; /* OP_FIRST */
#undef LOOP
}

/* out (contiguous, shape[nd]) = a op b read through broadcast strides. Dims of
 * extent 1 are dropped and neighbours that are contiguous in both merged, so
 * that the inner loop runs as long as it can. */
static void bcast_apply(mp_tensor_binop op, float *out, const float *a, const int64_t *sa_in, const float *b,
                        const int64_t *sb_in, int nd_in, const int64_t *shape_in) {
    int64_t shape[MP_MAXDIM], sa[MP_MAXDIM], sb[MP_MAXDIM];
    int nd = 0;
    for (int i = 0; i < nd_in; i++) {
        if (shape_in[i] == 0) return;
        if (shape_in[i] == 1) continue;
        if (nd > 0 && sa[nd - 1] == sa_in[i] * shape_in[i] && sb[nd - 1] == sb_in[i] * shape_in[i]) {
            shape[nd - 1] *= shape_in[i];
            sa[nd - 1] = sa_in[i];
            sb[nd - 1] = sb_in[i];
            continue;
        }
        shape[nd] = shape_in[i];
        sa[nd] = sa_in[i];
        sb[nd] = sb_in[i];
        nd++;
    }
    if (nd == 0) {
        out[0] = apply1(op, a[0], b[0]);
        return;
    }
    int64_t n = shape[nd - 1], idx[MP_MAXDIM] = {0}, oa = 0, ob = 0;
    for (;;) {
        kernel(op, out, a + oa, sa[nd - 1], b + ob, sb[nd - 1], n);
        out += n;
        int i = nd - 2;
        for (; i >= 0; i--) { /* odometer over the outer dims */
            oa += sa[i];
            ob += sb[i];
            if (++idx[i] < shape[i]) break;
            oa -= sa[i] * shape[i];
            ob -= sb[i] * shape[i];
            idx[i] = 0;
        }
        if (i < 0) return;
    }
}

mp_status mp_tensor_binary(mp_tensor *out, mp_tensor_binop op, const mp_tensor *a, const mp_tensor *b) {
    int64_t shape[MP_MAXDIM], sa[MP_MAXDIM], sb[MP_MAXDIM];
    int nd;
    memset(out, 0, sizeof *out);
    if ((unsigned)op > MP_TENSOR_GE) return mp_error(MP_ERR_ARG, "unknown Tensor operation %d", (int)op);
    mp_status s = mp_tensor_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shape);
    if (s != MP_OK) return s;
    bcast_strides(a->ndim, a->shape, nd, shape, sa);
    bcast_strides(b->ndim, b->shape, nd, shape, sb);
    if ((s = mp_tensor_init(out, nd, shape)) != MP_OK) return s;
    bcast_apply(op, out->data, a->data, sa, b->data, sb, nd, shape);
    return MP_OK;
}

mp_status mp_tensor_expand(mp_tensor *out, const mp_tensor *x, int ndim, const int64_t *shape) {
    int64_t o[MP_MAXDIM], sx[MP_MAXDIM];
    int n2;
    memset(out, 0, sizeof *out);
    mp_status s = mp_tensor_broadcast_shape(x->ndim, x->shape, ndim, shape, &n2, o);
    if (s != MP_OK) return s;
    bcast_strides(x->ndim, x->shape, n2, o, sx);
    if ((s = mp_tensor_init(out, n2, o)) != MP_OK) return s;
    bcast_apply(OP_FIRST, out->data, x->data, sx, x->data, sx, n2, o);
    return MP_OK;
}

/* 1 when the memory of a and b overlaps. */
static int overlap(const mp_tensor *a, const mp_tensor *b) {
    return b->data < a->data + a->numel && a->data < b->data + b->numel;
}

/* 1 when t's shape is exactly shape[nd] (an in-place result must keep it). */
static int is_shape(const mp_tensor *t, int nd, const int64_t *shape) {
    if (nd != t->ndim) return 0;
    for (int i = 0; i < nd; i++)
        if (shape[i] != t->shape[i]) return 0;
    return 1;
}

mp_status mp_tensor_binary_(mp_tensor *t, mp_tensor_binop op, const mp_tensor *b) {
    int64_t shape[MP_MAXDIM], st[MP_MAXDIM], sb[MP_MAXDIM];
    int nd;
    if ((unsigned)op > MP_TENSOR_GE) return mp_error(MP_ERR_ARG, "unknown Tensor operation %d", (int)op);
    mp_status s = mp_tensor_broadcast_shape(t->ndim, t->shape, b->ndim, b->shape, &nd, shape);
    if (s != MP_OK) return s;
    if (!is_shape(t, nd, shape)) {
        char s1[128], s2[128];
        mp_tensor_shape_str(t->ndim, t->shape, s1, sizeof s1);
        mp_tensor_shape_str(b->ndim, b->shape, s2, sizeof s2);
        return mp_error(MP_ERR_ARG, "the right side %s does not broadcast to the Tensor's shape %s (in place)", s2, s1);
    }
    mp_tensor copy = {0};
    if (b->data != t->data ? overlap(t, b) : b->numel != t->numel) {
        if ((s = mp_tensor_clone(&copy, b)) != MP_OK) return s;
        b = &copy;
    }
    bcast_strides(t->ndim, t->shape, nd, shape, st);
    bcast_strides(b->ndim, b->shape, nd, shape, sb);
    bcast_apply(op, t->data, t->data, st, b->data, sb, nd, shape);
    mp_tensor_free(&copy);
    return MP_OK;
}

mp_status mp_tensor_copy_(mp_tensor *t, const mp_tensor *o) {
    int64_t shape[MP_MAXDIM], so[MP_MAXDIM];
    int nd;
    mp_status s = mp_tensor_broadcast_shape(t->ndim, t->shape, o->ndim, o->shape, &nd, shape);
    if (s != MP_OK) return s;
    if (!is_shape(t, nd, shape)) {
        char s1[128], s2[128];
        mp_tensor_shape_str(t->ndim, t->shape, s1, sizeof s1);
        mp_tensor_shape_str(o->ndim, o->shape, s2, sizeof s2);
        return mp_error(MP_ERR_ARG, "shapes %s and %s differ (the source %s does not broadcast to %s)", s1, s2, s2, s1);
    }
    if (o->numel == t->numel) {
        if (t->numel) memmove(t->data, o->data, t->numel * sizeof(float));
        return MP_OK;
    }
    mp_tensor copy = {0};
    if (overlap(t, o)) {
        if ((s = mp_tensor_clone(&copy, o)) != MP_OK) return s;
        o = &copy;
    }
    bcast_strides(o->ndim, o->shape, nd, shape, so);
    bcast_apply(OP_FIRST, t->data, o->data, so, o->data, so, nd, shape);
    mp_tensor_free(&copy);
    return MP_OK;
}

void mp_tensor_fill_(mp_tensor *t, float v) {
    for (size_t i = 0; i < t->numel; i++) t->data[i] = v;
}

mp_status mp_tensor_neg(mp_tensor *out, const mp_tensor *t) {
    mp_status s = mp_tensor_init(out, t->ndim, t->shape);
    if (s != MP_OK) return s;
    for (size_t i = 0; i < t->numel; i++) out->data[i] = -t->data[i];
    return MP_OK;
}

/* ---- elementwise functions (computed in double, stored as float) ---- */

static double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

mp_status mp_tensor_unary(mp_tensor *out, mp_tensor_unop k, const mp_tensor *t) {
    if ((unsigned)k > MP_TENSOR_SIGMOID) {
        memset(out, 0, sizeof *out);
        return mp_error(MP_ERR_ARG, "unknown Tensor function %d", (int)k);
    }
    mp_status s = mp_tensor_init(out, t->ndim, t->shape);
    if (s != MP_OK) return s;
    const float *x = t->data;
    float *y = out->data;
    size_t n = t->numel;
    switch (k) {
    case MP_TENSOR_EXP: for (size_t i = 0; i < n; i++) y[i] = (float)exp(x[i]); break;
    case MP_TENSOR_LOG: for (size_t i = 0; i < n; i++) y[i] = (float)log(x[i]); break;
    case MP_TENSOR_SQRT: for (size_t i = 0; i < n; i++) y[i] = (float)sqrt(x[i]); break;
    case MP_TENSOR_ABS: for (size_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case MP_TENSOR_TANH: for (size_t i = 0; i < n; i++) y[i] = (float)tanh(x[i]); break;
    case MP_TENSOR_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : (isnan(x[i]) ? x[i] : 0.0f); break;
    case MP_TENSOR_SIGMOID: for (size_t i = 0; i < n; i++) y[i] = (float)sigmoid(x[i]); break;
    }
    return MP_OK;
}

mp_status mp_tensor_clamp(mp_tensor *out, const mp_tensor *t, float lo, float hi) {
    memset(out, 0, sizeof *out);
    if (lo > hi) return mp_error(MP_ERR_ARG, "lo = %.14g is above hi = %.14g", (double)lo, (double)hi);
    mp_status s = mp_tensor_init(out, t->ndim, t->shape);
    if (s != MP_OK) return s;
    for (size_t i = 0; i < t->numel; i++) {
        float x = t->data[i];
        out->data[i] = x < lo ? lo : x > hi ? hi : x;
    }
    return MP_OK;
}

/* ---- reductions along one dim: [outer, n, inner] ---- */

typedef struct {
    int64_t outer, n, inner;
} split3;

static split3 split_at(const mp_tensor *t, int d) {
    split3 s = {1, t->shape[d], 1};
    for (int i = 0; i < d; i++) s.outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++) s.inner *= t->shape[i];
    return s;
}

static mp_status check_dim(const mp_tensor *t, int d) {
    if (d < 0 || d >= t->ndim) {
        if (t->ndim == 0) return mp_error(MP_ERR_ARG, "dim %d of a 0-dim Tensor", d + 1);
        return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", d + 1, t->ndim);
    }
    return MP_OK;
}

int mp_tensor_reduced_shape(const mp_tensor *t, int d, int keepdim, int64_t *shape) {
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i != d) shape[nd++] = t->shape[i];
        else if (keepdim) shape[nd++] = 1;
    }
    return nd;
}

/* Index of the max (or min) of n values at stride s; the first NaN wins (NaN
 * propagates, as torch), else the first of equal values. */
static int64_t arg_extreme(const float *d, int64_t n, int64_t s, int want_max) {
    int64_t best = 0;
    if (isnan(d[0])) return 0;
    for (int64_t i = 1; i < n; i++) {
        float v = d[i * s];
        if (isnan(v)) return i;
        if (want_max ? v > d[best * s] : v < d[best * s]) best = i;
    }
    return best;
}

static double sum_strided(const float *d, int64_t n, int64_t s) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += d[i * s];
    return acc;
}

mp_status mp_tensor_sum_all(const mp_tensor *t, int mean, double *out) {
    if (mean && t->numel == 0) return mp_error(MP_ERR_ARG, "mean of an empty Tensor");
    double s = sum_strided(t->data, (int64_t)t->numel, 1);
    *out = mean ? s / (double)t->numel : s;
    return MP_OK;
}

mp_status mp_tensor_argext_all(const mp_tensor *t, int want_max, size_t *out) {
    if (t->numel == 0) return mp_error(MP_ERR_ARG, "%s of an empty Tensor", want_max ? "max" : "min");
    *out = (size_t)arg_extreme(t->data, (int64_t)t->numel, 1, want_max);
    return MP_OK;
}

mp_status mp_tensor_sum_dim(mp_tensor *out, const mp_tensor *t, int d, int keepdim, int mean) {
    int64_t shape[MP_MAXDIM];
    memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK) return st;
    split3 s = split_at(t, d);
    if (mean && s.n == 0) return mp_error(MP_ERR_ARG, "mean over dim %d, which is empty", d + 1);
    int nd = mp_tensor_reduced_shape(t, d, keepdim, shape);
    if ((st = mp_tensor_init(out, nd, shape)) != MP_OK) return st;
    if (out->numel == 0) s.outer = 0; /* no result: the loops must not run over a huge outer extent */
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            double v = sum_strided(t->data + o * s.n * s.inner + i, s.n, s.inner);
            out->data[o * s.inner + i] = (float)(mean ? v / (double)s.n : v);
        }
    return MP_OK;
}

mp_status mp_tensor_ext_dim(mp_tensor *out, int64_t *idx, const mp_tensor *t, int d, int keepdim, int want_max) {
    int64_t shape[MP_MAXDIM];
    if (out) memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK) return st;
    split3 s = split_at(t, d);
    if (s.n == 0) return mp_error(MP_ERR_ARG, "%s over dim %d, which is empty", want_max ? "max" : "min", d + 1);
    int nd = mp_tensor_reduced_shape(t, d, keepdim, shape);
    if (out && (st = mp_tensor_init(out, nd, shape)) != MP_OK) return st;
    if (s.outer * s.inner == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *p = t->data + o * s.n * s.inner + i;
            int64_t j = arg_extreme(p, s.n, s.inner, want_max);
            idx[o * s.inner + i] = j;
            if (out) out->data[o * s.inner + i] = p[j * s.inner];
        }
    return MP_OK;
}

/* Variance of n values at stride s (two passes in double); correction 1 or 0. */
static double var_strided(const float *d, int64_t n, int64_t s, int unbiased) {
    double mean = sum_strided(d, n, s) / (double)n, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = d[i * s] - mean;
        acc += e * e;
    }
    return acc / (double)(n - (unbiased ? 1 : 0));
}

mp_status mp_tensor_var_all(const mp_tensor *t, int unbiased, int is_std, double *out) {
    if (t->numel == 0) return mp_error(MP_ERR_ARG, "%s of an empty Tensor", is_std ? "std" : "var");
    double v = var_strided(t->data, (int64_t)t->numel, 1, unbiased);
    *out = is_std ? sqrt(v) : v;
    return MP_OK;
}

mp_status mp_tensor_var_dim(mp_tensor *out, const mp_tensor *t, int d, int keepdim, int unbiased, int is_std) {
    int64_t shape[MP_MAXDIM];
    memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK) return st;
    split3 s = split_at(t, d);
    if (s.n == 0) return mp_error(MP_ERR_ARG, "%s over dim %d, which is empty", is_std ? "std" : "var", d + 1);
    int nd = mp_tensor_reduced_shape(t, d, keepdim, shape);
    if ((st = mp_tensor_init(out, nd, shape)) != MP_OK) return st;
    if (out->numel == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            double v = var_strided(t->data + o * s.n * s.inner + i, s.n, s.inner, unbiased);
            out->data[o * s.inner + i] = (float)(is_std ? sqrt(v) : v);
        }
    return MP_OK;
}

/* The p-norm of n values at stride s, in double: p = inf / -inf the max / min
 * of |x|, p = 0 the count of non-zeros. */
static double pnorm_strided(const float *d, int64_t n, int64_t s, double p) {
    double acc = 0;
    if (isinf(p)) {
        acc = n ? fabs(d[0]) : 0;
        for (int64_t i = 1; i < n; i++) {
            double a = fabs(d[i * s]);
            if (isnan(a)) return a;
            if (p > 0 ? a > acc : a < acc) acc = a;
        }
        return acc;
    }
    if (p == 0) {
        for (int64_t i = 0; i < n; i++) acc += d[i * s] != 0;
        return acc;
    }
    if (p == 2) {
        for (int64_t i = 0; i < n; i++) acc += (double)d[i * s] * d[i * s];
        return sqrt(acc);
    }
    if (p == 1) {
        for (int64_t i = 0; i < n; i++) acc += fabs(d[i * s]);
        return acc;
    }
    for (int64_t i = 0; i < n; i++) acc += pow(fabs(d[i * s]), p);
    return pow(acc, 1.0 / p);
}

static mp_status check_p(double p) {
    if (isnan(p) || (p < 0 && !isinf(p))) return mp_error(MP_ERR_ARG, "p = %.14g is not a norm (0, p > 0 or +-inf)", p);
    return MP_OK;
}

mp_status mp_tensor_norm_all(const mp_tensor *t, double p, double *out) {
    mp_status st = check_p(p);
    if (st == MP_OK) *out = pnorm_strided(t->data, (int64_t)t->numel, 1, p);
    return st;
}

mp_status mp_tensor_norm_dim(mp_tensor *out, const mp_tensor *t, double p, int d, int keepdim) {
    int64_t shape[MP_MAXDIM];
    memset(out, 0, sizeof *out);
    mp_status st = check_p(p);
    if (st == MP_OK) st = check_dim(t, d);
    if (st != MP_OK) return st;
    split3 s = split_at(t, d);
    int nd = mp_tensor_reduced_shape(t, d, keepdim, shape);
    if ((st = mp_tensor_init(out, nd, shape)) != MP_OK) return st;
    if (out->numel == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++)
            out->data[o * s.inner + i] = (float)pnorm_strided(t->data + o * s.n * s.inner + i, s.n, s.inner, p);
    return MP_OK;
}

/* ---- softmax ---- */

mp_status mp_tensor_softmax(mp_tensor *out, const mp_tensor *t, int d, int logsm) {
    memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK || (st = mp_tensor_init(out, t->ndim, t->shape)) != MP_OK) return st;
    if (out->numel == 0) return MP_OK; /* outer may be huge with nothing to compute */
    split3 s = split_at(t, d);
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *x = t->data + o * s.n * s.inner + i;
            float *y = out->data + o * s.n * s.inner + i;
            if (s.n == 0) continue;
            double mx = x[arg_extreme(x, s.n, s.inner, 1)], z = 0;
            if (isinf(mx) && mx < 0) mx = 0; /* all -inf: 0/0 gives NaN, as torch */
            for (int64_t j = 0; j < s.n; j++) z += exp((double)x[j * s.inner] - mx);
            double lz = log(z);
            for (int64_t j = 0; j < s.n; j++) {
                double e = (double)x[j * s.inner] - mx;
                y[j * s.inner] = (float)(logsm ? e - lz : exp(e) / z);
            }
        }
    return MP_OK;
}

/* ---- topk ---- */

typedef struct {
    float v;
    int64_t i;
} vi;

/* Order for topk: NaN above every number; equal values by lower index first. */
static int cmp_desc(const void *pa, const void *pb) {
    const vi *a = pa, *b = pb;
    int na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? -1 : 1;
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int cmp_asc(const void *pa, const void *pb) {
    const vi *a = pa, *b = pb;
    int na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

mp_status mp_tensor_topk(mp_tensor *out, int64_t *idx, const mp_tensor *t, int64_t k, int d, int largest) {
    memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK) return st;
    split3 s = split_at(t, d);
    if (k < 0 || k > s.n)
        return mp_error(MP_ERR_ARG, "k = %lld is out of range (0..%lld) for dim %d", (long long)k, (long long)s.n, d + 1);
    int64_t shape[MP_MAXDIM];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = k;
    if ((st = mp_tensor_init(out, t->ndim, shape)) != MP_OK) return st;
    if (out->numel == 0) return MP_OK; /* nothing to select: no loop over a huge outer extent */
    vi *buf = malloc((size_t)s.n * sizeof *buf);
    if (!buf) {
        mp_tensor_free(out);
        return mp_error(MP_ERR_NOMEM, "out of memory sorting for topk");
    }
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *x = t->data + o * s.n * s.inner + i;
            for (int64_t j = 0; j < s.n; j++) buf[j] = (vi){x[j * s.inner], j};
            qsort(buf, (size_t)s.n, sizeof *buf, largest ? cmp_desc : cmp_asc);
            for (int64_t j = 0; j < k; j++) {
                size_t at = (size_t)((o * k + j) * s.inner + i);
                out->data[at] = buf[j].v;
                idx[at] = buf[j].i;
            }
        }
    free(buf);
    return MP_OK;
}

/* ---- comparisons of two tensors ---- */

mp_status mp_tensor_cos_sim(mp_tensor *out, const mp_tensor *a0, const mp_tensor *b0, int d) {
    int64_t shape[MP_MAXDIM];
    int nd;
    memset(out, 0, sizeof *out);
    mp_status st = mp_tensor_broadcast_shape(a0->ndim, a0->shape, b0->ndim, b0->shape, &nd, shape);
    if (st != MP_OK) return st;
    if (nd == 0) return mp_error(MP_ERR_ARG, "needs Tensors of at least 1 dim");
    if (d < 0 || d >= nd) return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", d + 1, nd);
    mp_tensor a = {0}, b = {0};
    if ((st = mp_tensor_expand(&a, a0, nd, shape)) != MP_OK || (st = mp_tensor_expand(&b, b0, nd, shape)) != MP_OK)
        goto done;
    split3 s = split_at(&a, d);
    int64_t rs[MP_MAXDIM];
    int rn = mp_tensor_reduced_shape(&a, d, 0, rs);
    if ((st = mp_tensor_init(out, rn, rs)) != MP_OK) goto done;
    if (out->numel == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *x = a.data + o * s.n * s.inner + i, *y = b.data + o * s.n * s.inner + i;
            double xy = 0, xx = 0, yy = 0;
            for (int64_t j = 0; j < s.n; j++) {
                double u = x[j * s.inner], v = y[j * s.inner];
                xy += u * v;
                xx += u * u;
                yy += v * v;
            }
            out->data[o * s.inner + i] = (float)(xy / (fmax(sqrt(xx), 1e-8) * fmax(sqrt(yy), 1e-8)));
        }
done:
    mp_tensor_free(&a);
    mp_tensor_free(&b);
    return st;
}

mp_status mp_tensor_allclose(const mp_tensor *a0, const mp_tensor *b0, double rtol, double atol, int *okp) {
    int64_t shape[MP_MAXDIM];
    int nd;
    if (!(rtol >= 0) || !(atol >= 0)) return mp_error(MP_ERR_ARG, "rtol and atol must be >= 0");
    mp_status st = mp_tensor_broadcast_shape(a0->ndim, a0->shape, b0->ndim, b0->shape, &nd, shape);
    if (st != MP_OK) return st;
    mp_tensor a = {0}, b = {0};
    if ((st = mp_tensor_expand(&a, a0, nd, shape)) == MP_OK && (st = mp_tensor_expand(&b, b0, nd, shape)) == MP_OK) {
        int ok = 1;
        for (size_t i = 0; ok && i < a.numel; i++) {
            double x = a.data[i], y = b.data[i];
            ok = x == y || fabs(x - y) <= atol + rtol * fabs(y);
        }
        *okp = ok;
    }
    mp_tensor_free(&a);
    mp_tensor_free(&b);
    return st;
}

/* ---- statistics through GSL ---- */

mp_status mp_tensor_median(const mp_tensor *t, double *out) {
    if (t->numel == 0) return mp_error(MP_ERR_ARG, "median of an empty Tensor");
    float *buf = malloc(t->numel * sizeof *buf);
    if (!buf) return mp_error(MP_ERR_NOMEM, "out of memory copying a Tensor for its median");
    memcpy(buf, t->data, t->numel * sizeof *buf);
    *out = gsl_stats_float_median(buf, 1, t->numel);
    free(buf);
    return MP_OK;
}

double mp_tensor_stat_median(const double *x, size_t n, void *scratch) {
    double *buf = scratch;
    memcpy(buf, x, n * sizeof *buf);
    return gsl_stats_median(buf, 1, n);
}
