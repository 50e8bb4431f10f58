/* tensor.c — the C tensor core (analyze/tensor.h), part 1: reference-counted
 * storage, creation, views, copies along dims (permute, gather, cat, stack),
 * matmul through OpenBLAS's cblas_sgemm, the dot product, and the range
 * constructors. Arithmetic, reductions and statistics are in
 * analyze/tensor_math.c. The Lua Tensor (lua/ltensor*.c) is a binding of this. */
#include "tensor.h"

#include <gsl/gsl_cblas.h> /* CBLAS prototypes; the symbols come from OpenBLAS (not gslcblas) */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number as Lua's "%f" prints it ("%.14g", ".0" added to an integral
 * value), so that the messages are those of the Lua API. buf: 48 bytes. */
static const char *num_str(double v, char *buf) {
    int len = snprintf(buf, 40, "%.14g", v);
    if (buf[strspn(buf, "-0123456789")] == '\0') snprintf(buf + len, 8, ".0");
    return buf;
}

/* ---- storage ---- */

static mp_status storage_new(mp_storage **out, float *data, size_t n, int external) {
    mp_storage *st = malloc(sizeof *st);
    if (!st) {
        if (!external) free(data);
        return mp_error(MP_ERR_NOMEM, "out of memory allocating a Tensor");
    }
    st->data = data;
    st->n = n;
    st->refs = 1;
    st->external = external;
    st->why = NULL;
    *out = st;
    return MP_OK;
}

mp_status mp_storage_external(mp_storage **out, float *data, size_t n) { return storage_new(out, data, n, 1); }

void mp_storage_invalidate(mp_storage *st, const char *why) {
    if (!st || !st->data) return;
    if (!st->external) free(st->data);
    st->data = NULL;
    st->n = 0;
    st->why = why;
}

void mp_storage_release(mp_storage *st) {
    if (!st) return;
    if (--st->refs <= 0) {
        if (!st->external) free(st->data);
        free(st);
    }
}

/* ---- creation and lifetime ---- */

void mp_tensor_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

mp_status mp_tensor_numel(int ndim, const int64_t *shape, size_t *out) {
    size_t n = 1, nz = 1;
    if (ndim < 0 || ndim > MP_MAXDIM) return mp_error(MP_ERR_ARG, "Tensor rank %d outside 0..%d", ndim, MP_MAXDIM);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return mp_error(MP_ERR_ARG, "negative Tensor extent %lld in dim %d", (long long)shape[i], i + 1);
        if ((uint64_t)shape[i] > MP_TENSOR_NUMEL_MAX)
            return mp_error(MP_ERR_NOMEM, "Tensor size overflows (extent %lld in dim %d)", (long long)shape[i], i + 1);
        n *= (size_t)shape[i]; /* at most nz, checked below */
        if (shape[i] && (mp_mul_size(nz, (size_t)shape[i], &nz) || nz > MP_TENSOR_NUMEL_MAX)) {
            char s[160];
            mp_tensor_shape_str(ndim, shape, s, sizeof s);
            return mp_error(MP_ERR_NOMEM, "Tensor size overflows (shape %s)", s);
        }
    }
    *out = n;
    return MP_OK;
}

mp_status mp_tensor_init(mp_tensor *out, int ndim, const int64_t *shape) {
    size_t n = 0;
    memset(out, 0, sizeof *out);
    mp_status s = mp_tensor_numel(ndim, shape, &n);
    if (s != MP_OK) return s;
    float *data = calloc(n ? n : 1, sizeof(float));
    if (!data) {
        char b[32];
        return mp_error(MP_ERR_NOMEM, "out of memory allocating a Tensor of %s",
                        mp_fmt_bytes((double)n * sizeof(float), b));
    }
    mp_storage *st = NULL;
    if ((s = storage_new(&st, data, n, 0)) != MP_OK) return s;
    out->st = st;
    out->data = data;
    out->ndim = ndim;
    if (ndim > 0) memcpy(out->shape, shape, (size_t)ndim * sizeof *shape);
    out->numel = n;
    return MP_OK;
}

mp_status mp_tensor_init_from(mp_tensor *out, int ndim, const int64_t *shape, const float *data) {
    mp_status s = mp_tensor_init(out, ndim, shape);
    if (s == MP_OK && out->numel) memcpy(out->data, data, out->numel * sizeof(float));
    return s;
}

mp_status mp_tensor_init_full(mp_tensor *out, int ndim, const int64_t *shape, float v) {
    mp_status s = mp_tensor_init(out, ndim, shape);
    if (s == MP_OK && v != 0) mp_tensor_fill_(out, v);
    return s;
}

mp_status mp_tensor_on(mp_tensor *out, mp_storage *st, size_t off, int ndim, const int64_t *shape) {
    size_t n = 0;
    memset(out, 0, sizeof *out);
    mp_status s = mp_tensor_numel(ndim, shape, &n);
    if (s != MP_OK) return s;
    if (!st->data) return mp_error(MP_ERR_ARG, "Tensor is no longer valid (%s)", st->why ? st->why : "it was closed");
    if (off > st->n || n > st->n - off) return mp_error(MP_ERR_ARG, "a Tensor view outside its storage");
    out->st = st;
    st->refs++;
    out->data = st->data + off;
    out->ndim = ndim;
    if (ndim > 0) memcpy(out->shape, shape, (size_t)ndim * sizeof *shape);
    out->numel = n;
    return MP_OK;
}

mp_status mp_tensor_view(mp_tensor *out, const mp_tensor *t, size_t off, int ndim, const int64_t *shape) {
    mp_status s = mp_tensor_check_valid(t);
    if (s != MP_OK) {
        memset(out, 0, sizeof *out);
        return s;
    }
    return mp_tensor_on(out, t->st, (size_t)(t->data - t->st->data) + off, ndim, shape);
}

mp_status mp_tensor_clone(mp_tensor *out, const mp_tensor *t) { return mp_tensor_init_from(out, t->ndim, t->shape, t->data); }

void mp_tensor_free(mp_tensor *t) {
    mp_storage_release(t->st);
    t->st = NULL;
    t->data = NULL;
}

int mp_tensor_valid(const mp_tensor *t) { return t->st && t->st->data; }

mp_status mp_tensor_check_valid(const mp_tensor *t) {
    if (mp_tensor_valid(t)) return MP_OK;
    const char *why = t->st && t->st->why ? t->st->why : "it was closed";
    return mp_error(MP_ERR_ARG, "Tensor is no longer valid (%s)", why);
}

void mp_tensor_strides(const mp_tensor *t, int64_t *strides) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= t->shape[i];
    }
}

int mp_tensor_same_shape(const mp_tensor *a, const mp_tensor *b) {
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    return same;
}

/* ---- views ---- */

mp_status mp_tensor_reshape(mp_tensor *out, const mp_tensor *t, int ndim, const int64_t *shape_in) {
    int64_t shape[MP_MAXDIM];
    int infer = -1;
    size_t known = 1;
    memset(out, 0, sizeof *out);
    if (ndim < 0 || ndim > MP_MAXDIM) return mp_error(MP_ERR_ARG, "Tensor rank %d outside 0..%d", ndim, MP_MAXDIM);
    if (ndim > 0) memcpy(shape, shape_in, (size_t)ndim * sizeof *shape);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return mp_error(MP_ERR_ARG, "at most one extent may be -1");
            infer = i;
        } else if (shape[i] < 0) {
            return mp_error(MP_ERR_ARG, "shape entry %d is not a valid extent", i + 1);
        } else if (mp_mul_size(known, (size_t)shape[i], &known)) {
            return mp_error(MP_ERR_ARG, "shape overflows");
        }
    }
    if (infer >= 0) {
        if (known == 0 || t->numel % known) return mp_error(MP_ERR_ARG, "cannot infer the -1 extent");
        shape[infer] = (int64_t)(t->numel / known);
        known = t->numel;
    }
    if (known != t->numel) {
        char s[128];
        mp_tensor_shape_str(t->ndim, t->shape, s, sizeof s);
        return mp_error(MP_ERR_ARG, "shape has %lld elements, the Tensor %s has %lld", (long long)known, s,
                        (long long)t->numel);
    }
    return mp_tensor_view(out, t, 0, ndim, shape);
}

mp_status mp_tensor_select(mp_tensor *out, const mp_tensor *t, int64_t i) {
    memset(out, 0, sizeof *out);
    if (t->ndim < 1) return mp_error(MP_ERR_ARG, "select on a 0-dim Tensor");
    if (i < 0 || i >= t->shape[0])
        return mp_error(MP_ERR_ARG, "index %lld out of range 0..%lld for dim 1", (long long)i, (long long)t->shape[0] - 1);
    size_t stride = t->numel / (size_t)t->shape[0];
    return mp_tensor_view(out, t, (size_t)i * stride, t->ndim - 1, t->shape + 1);
}

mp_status mp_tensor_unsqueeze(mp_tensor *out, const mp_tensor *t, int d) {
    memset(out, 0, sizeof *out);
    if (t->ndim == MP_MAXDIM) return mp_error(MP_ERR_ARG, "a Tensor has at most %d dims", MP_MAXDIM);
    if (d < 0 || d > t->ndim) return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", d + 1, t->ndim + 1);
    int64_t shape[MP_MAXDIM];
    for (int i = 0, j = 0; i <= t->ndim; i++) shape[i] = i == d ? 1 : t->shape[j++];
    return mp_tensor_view(out, t, 0, t->ndim + 1, shape);
}

mp_status mp_tensor_squeeze(mp_tensor *out, const mp_tensor *t, int only) {
    int64_t shape[MP_MAXDIM];
    int nd = 0;
    memset(out, 0, sizeof *out);
    if (only >= t->ndim) return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", only + 1, t->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1 || (only >= 0 && i != only)) shape[nd++] = t->shape[i];
    return mp_tensor_view(out, t, 0, nd, shape);
}

mp_status mp_tensor_flatten(mp_tensor *out, const mp_tensor *t, int s, int e) {
    memset(out, 0, sizeof *out);
    if (t->ndim == 0) {
        int64_t one = 1;
        return mp_tensor_view(out, t, 0, 1, &one);
    }
    if (s < 0 || e >= t->ndim) return mp_error(MP_ERR_ARG, "dims %d..%d out of range 1..%d", s + 1, e + 1, t->ndim);
    if (e < s) return mp_error(MP_ERR_ARG, "end dim %d is before start dim %d", e + 1, s + 1);
    int64_t shape[MP_MAXDIM];
    int nd = 0;
    for (int i = 0; i < s; i++) shape[nd++] = t->shape[i];
    shape[nd] = 1;
    for (int i = s; i <= e; i++) shape[nd] *= t->shape[i];
    nd++;
    for (int i = e + 1; i < t->ndim; i++) shape[nd++] = t->shape[i];
    return mp_tensor_view(out, t, 0, nd, shape);
}

/* ---- permutations (copies) ---- */

mp_status mp_tensor_permute(mp_tensor *out, const mp_tensor *t, const int *perm) {
    int nd = t->ndim, used[MP_MAXDIM] = {0};
    int64_t shape[MP_MAXDIM], stride[MP_MAXDIM], ostride[MP_MAXDIM];
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || used[perm[i]])
            return mp_error(MP_ERR_ARG, "not a permutation of 1..%d", nd);
        used[perm[i]] = 1;
    }
    if (nd == 0) return mp_tensor_init_from(out, 0, t->shape, t->data);
    stride[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) stride[i] = stride[i + 1] * t->shape[i + 1];
    for (int i = 0; i < nd; i++) {
        shape[i] = t->shape[perm[i]];
        ostride[i] = stride[perm[i]];
    }
    mp_status s = mp_tensor_init(out, nd, shape);
    if (s != MP_OK) return s;
    int64_t idx[MP_MAXDIM] = {0}, src = 0;
    int64_t inner = shape[nd - 1], is = ostride[nd - 1];
    if (out->numel == 0) return MP_OK;
    float *o = out->data;
    const float *x = t->data;
    for (size_t e = 0; e < out->numel; e += (size_t)inner) {
        for (int64_t k = 0; k < inner; k++) o[e + (size_t)k] = x[src + k * is];
        for (int i = nd - 2; i >= 0; i--) { /* odometer over the outer output dims */
            src += ostride[i];
            if (++idx[i] < shape[i]) break;
            src -= ostride[i] * shape[i];
            idx[i] = 0;
        }
    }
    return MP_OK;
}

mp_status mp_tensor_transpose(mp_tensor *out, const mp_tensor *t, int a, int b) {
    int perm[MP_MAXDIM];
    if (a < 0 || a >= t->ndim || b < 0 || b >= t->ndim) {
        memset(out, 0, sizeof *out);
        return mp_error(MP_ERR_ARG, "dims %d and %d out of range 1..%d", a + 1, b + 1, t->ndim);
    }
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return mp_tensor_permute(out, t, perm);
}

/* ---- selecting along a dim ---- */

/* Rows idx[0..count) (0-based, already checked) of dim d of t, a copy. */
static mp_status gather(mp_tensor *out, const mp_tensor *t, int d, const int64_t *idx, int64_t count) {
    int64_t shape[MP_MAXDIM], outer = 1, inner = 1, n = t->shape[d];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = count;
    for (int i = 0; i < d; i++) outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++) inner *= t->shape[i];
    mp_status s = mp_tensor_init(out, t->ndim, shape);
    if (s != MP_OK || out->numel == 0) return s; /* outer may be huge with nothing to copy */
    float *dst = out->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < count; k++, dst += inner)
            memcpy(dst, t->data + (o * n + idx[k]) * inner, (size_t)inner * sizeof(float));
    return MP_OK;
}

static mp_status check_dim(const mp_tensor *t, int d) {
    if (d < 0 || d >= t->ndim) {
        if (t->ndim == 0) return mp_error(MP_ERR_ARG, "dim %d of a 0-dim Tensor", d + 1);
        return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", d + 1, t->ndim);
    }
    return MP_OK;
}

mp_status mp_tensor_index_select(mp_tensor *out, const mp_tensor *t, int d, const int64_t *idx, int64_t count) {
    memset(out, 0, sizeof *out);
    mp_status s = check_dim(t, d);
    if (s != MP_OK) return s;
    if (count < 0) return mp_error(MP_ERR_ARG, "index_select: count %lld < 0", (long long)count);
    for (int64_t k = 0; k < count; k++)
        if (idx[k] < 0 || idx[k] >= t->shape[d])
            return mp_error(MP_ERR_ARG, "index %lld (entry %lld) out of range 0..%lld for dim %d", (long long)idx[k],
                            (long long)k + 1, (long long)t->shape[d] - 1, d + 1);
    return gather(out, t, d, idx, count);
}

mp_status mp_tensor_slice(mp_tensor *out, const mp_tensor *t, int d, int64_t first, int64_t count, int64_t step) {
    memset(out, 0, sizeof *out);
    mp_status s = check_dim(t, d);
    if (s != MP_OK) return s;
    int64_t n = t->shape[d];
    if (step < 1) return mp_error(MP_ERR_ARG, "step = %lld must be >= 1", (long long)step);
    /* the last row first + (count - 1) step must be < n; no overflow: step may be huge */
    if (count < 0 || first < 0 || first > n || (count > 0 && (first >= n || (count - 1) > (n - 1 - first) / step)))
        return mp_error(MP_ERR_ARG, "%lld rows from %lld every %lld out of range for dim %d of extent %lld",
                        (long long)count, (long long)first, (long long)step, d + 1, (long long)n);
    if (d == 0 && step == 1) {
        int64_t shape[MP_MAXDIM];
        memcpy(shape, t->shape, sizeof shape);
        shape[0] = count;
        size_t stride = t->shape[0] ? t->numel / (size_t)t->shape[0] : 0;
        return mp_tensor_view(out, t, (size_t)first * stride, t->ndim, shape);
    }
    int64_t *idx = malloc((size_t)(count ? count : 1) * sizeof(int64_t));
    if (!idx) return mp_error(MP_ERR_NOMEM, "out of memory slicing a Tensor");
    for (int64_t k = 0; k < count; k++) idx[k] = first + k * step;
    s = gather(out, t, d, idx, count);
    free(idx);
    return s;
}

/* ---- cat and stack ---- */

mp_status mp_tensor_cat(mp_tensor *out, const mp_tensor *const *ts, int n, int d) {
    memset(out, 0, sizeof *out);
    if (n < 1) return mp_error(MP_ERR_ARG, "the list of Tensors is empty");
    const mp_tensor *t0 = ts[0];
    if (t0->ndim == 0) return mp_error(MP_ERR_ARG, "entry 1 is a 0-dim Tensor");
    mp_status s = check_dim(t0, d);
    if (s != MP_OK) return s;
    int64_t shape[MP_MAXDIM], outer = 1, inner = 1;
    memcpy(shape, t0->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const mp_tensor *ti = ts[i];
        int ok = ti->ndim == t0->ndim;
        for (int k = 0; ok && k < t0->ndim; k++) ok = k == d || ti->shape[k] == t0->shape[k];
        if (!ok) {
            char s1[128], s2[128];
            mp_tensor_shape_str(t0->ndim, t0->shape, s1, sizeof s1);
            mp_tensor_shape_str(ti->ndim, ti->shape, s2, sizeof s2);
            return mp_error(MP_ERR_ARG, "shapes %s and %s (entries 1 and %d) may differ only in dim %d", s1, s2, i + 1,
                            d + 1);
        }
        shape[d] += ti->shape[d];
    }
    for (int i = 0; i < d; i++) outer *= t0->shape[i];
    for (int i = d + 1; i < t0->ndim; i++) inner *= t0->shape[i];
    if ((s = mp_tensor_init(out, t0->ndim, shape)) != MP_OK || out->numel == 0) return s;
    float *dst = out->data;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n; i++) {
            size_t len = (size_t)(ts[i]->shape[d] * inner);
            if (len) memcpy(dst, ts[i]->data + (size_t)o * len, len * sizeof(float));
            dst += len;
        }
    return MP_OK;
}

mp_status mp_tensor_stack(mp_tensor *out, const mp_tensor *const *ts, int n, int d) {
    memset(out, 0, sizeof *out);
    if (n < 1) return mp_error(MP_ERR_ARG, "the list of Tensors is empty");
    const mp_tensor *t0 = ts[0];
    if (t0->ndim == MP_MAXDIM) return mp_error(MP_ERR_ARG, "a Tensor has at most %d dims", MP_MAXDIM);
    if (d < 0 || d > t0->ndim) return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", d + 1, t0->ndim + 1);
    for (int i = 1; i < n; i++) {
        if (!mp_tensor_same_shape(ts[i], t0)) {
            char s1[128], s2[128];
            mp_tensor_shape_str(t0->ndim, t0->shape, s1, sizeof s1);
            mp_tensor_shape_str(ts[i]->ndim, ts[i]->shape, s2, sizeof s2);
            return mp_error(MP_ERR_ARG, "shapes %s and %s (entries 1 and %d) differ", s1, s2, i + 1);
        }
    }
    int64_t shape[MP_MAXDIM], outer = 1, inner = 1;
    for (int i = 0, j = 0; i <= t0->ndim; i++) shape[i] = i == d ? n : t0->shape[j++];
    for (int i = 0; i < d; i++) outer *= t0->shape[i];
    for (int i = d; i < t0->ndim; i++) inner *= t0->shape[i];
    mp_status s = mp_tensor_init(out, t0->ndim + 1, shape);
    if (s != MP_OK || out->numel == 0) return s;
    float *dst = out->data;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n; i++, dst += inner) memcpy(dst, ts[i]->data + o * inner, (size_t)inner * sizeof(float));
    return MP_OK;
}

/* ---- products ---- */

static mp_status shape_err(const char *what, const mp_tensor *a, const mp_tensor *b) {
    char s1[128], s2[128];
    mp_tensor_shape_str(a->ndim, a->shape, s1, sizeof s1);
    mp_tensor_shape_str(b->ndim, b->shape, s2, sizeof s2);
    return mp_error(MP_ERR_ARG, "shapes %s and %s %s", s1, s2, what);
}

mp_status mp_tensor_dot(const mp_tensor *a, const mp_tensor *b, double *out) {
    if (a->ndim != 1) return mp_error(MP_ERR_ARG, "dot needs 1-D Tensors");
    if (!mp_tensor_same_shape(a, b)) return shape_err("differ", a, b);
    double s = 0;
    for (size_t i = 0; i < a->numel; i++) s += (double)a->data[i] * (double)b->data[i];
    *out = s;
    return MP_OK;
}

mp_status mp_tensor_matmul(mp_tensor *out, const mp_tensor *a, const mp_tensor *b) {
    memset(out, 0, sizeof *out);
    if (a->ndim == 0 || b->ndim == 0) return shape_err("cannot multiply (a 0-dim Tensor)", a, b);
    if (a->ndim == 1 && b->ndim == 1) return shape_err("are both 1-D: their product is a number (mp_tensor_dot)", a, b);
    int64_t n = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t k2 = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2], m = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    if (k != k2) {
        char what[96];
        snprintf(what, sizeof what, "do not multiply (%lld columns against %lld rows)", (long long)k, (long long)k2);
        return shape_err(what, a, b);
    }
    int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
    int nb = nba > nbb ? nba : nbb;
    int64_t bs[MP_MAXDIM], sa[MP_MAXDIM], sb[MP_MAXDIM], batch = 1, sta = 1, stb = 1;
    for (int i = nb - 1; i >= 0; i--) { /* batch shape and strides, in matrices */
        int ia = i - (nb - nba), ib = i - (nb - nbb);
        int64_t ea = ia >= 0 ? a->shape[ia] : 1, eb = ib >= 0 ? b->shape[ib] : 1;
        if (ea != eb && ea != 1 && eb != 1) return shape_err("have batch dims that do not broadcast", a, b);
        bs[i] = ea == 1 ? eb : ea;
        sa[i] = ea == 1 ? 0 : sta;
        sb[i] = eb == 1 ? 0 : stb;
        sta *= ea;
        stb *= eb;
        batch *= bs[i];
    }
    int64_t shape[MP_MAXDIM + 2];
    int nd = 0;
    for (int i = 0; i < nb; i++) shape[nd++] = bs[i];
    if (a->ndim > 1) shape[nd++] = n;
    if (b->ndim > 1) shape[nd++] = m;
    if (nd > MP_MAXDIM) return shape_err("give a result of too many dims", a, b);
    mp_status s = mp_tensor_init(out, nd, shape);
    if (s != MP_OK || out->numel == 0 || k == 0) return s;
    if (n > INT_MAX || k > INT_MAX || m > INT_MAX) {
        mp_tensor_free(out);
        return mp_error(MP_ERR_ARG, "a matrix extent exceeds %d", INT_MAX);
    }
    const float *A = a->data, *B = b->data;
    float *C = out->data;
    if (stb == 1 && sta == batch && batch * n <= INT_MAX) { /* one right matrix: stack the left ones */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(batch * n), (int)m, (int)k, 1.0f, A, (int)k, B,
                    (int)m, 0.0f, C, (int)m);
        return MP_OK;
    }
    int64_t idx[MP_MAXDIM] = {0}, oa = 0, ob = 0;
    for (int64_t e = 0; e < batch; e++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)m, (int)k, 1.0f, A + oa * n * k, (int)k,
                    B + ob * k * m, (int)m, 0.0f, C + e * n * m, (int)m);
        for (int i = nb - 1; i >= 0; i--) { /* odometer over the batch */
            oa += sa[i];
            ob += sb[i];
            if (++idx[i] < bs[i]) break;
            oa -= sa[i] * bs[i];
            ob -= sb[i] * bs[i];
            idx[i] = 0;
        }
    }
    return MP_OK;
}

/* ---- ranges ---- */

static mp_status init_1d(mp_tensor *out, double count) {
    char b[48];
    if (!(count >= 0) || count > (double)(INT64_MAX / 8))
        return mp_error(MP_ERR_ARG, "%s elements is not a valid size", num_str(count, b));
    int64_t n = (int64_t)count;
    return mp_tensor_init(out, 1, &n);
}

mp_status mp_tensor_arange(mp_tensor *out, double s, double e, double step) {
    memset(out, 0, sizeof *out);
    if (step == 0 || isnan(step) || !isfinite(s) || !isfinite(e))
        return mp_error(MP_ERR_ARG, "start and end must be finite and step non-zero");
    if ((e - s) * step < 0) {
        char b1[48], b2[48], b3[48];
        return mp_error(MP_ERR_ARG, "step %s goes away from end (start %s, end %s)", num_str(step, b1), num_str(s, b2),
                        num_str(e, b3));
    }
    mp_status st = init_1d(out, ceil((e - s) / step));
    if (st != MP_OK) return st;
    for (size_t i = 0; i < out->numel; i++) out->data[i] = (float)(s + (double)i * step);
    return MP_OK;
}

mp_status mp_tensor_linspace(mp_tensor *out, double s, double e, int64_t n) {
    memset(out, 0, sizeof *out);
    if (n < 0) return mp_error(MP_ERR_ARG, "steps = %lld must be >= 0", (long long)n);
    mp_status st = init_1d(out, (double)n);
    if (st != MP_OK) return st;
    double h = n > 1 ? (e - s) / (double)(n - 1) : 0;
    for (int64_t i = 0; i < n; i++) /* from the nearer end, so that both ends are exact */
        out->data[i] = (float)(n == 1 || i < n / 2 ? s + (double)i * h : e - (double)(n - 1 - i) * h);
    return MP_OK;
}

mp_status mp_tensor_eye(mp_tensor *out, int64_t n, int64_t m) {
    memset(out, 0, sizeof *out);
    if (n < 0 || m < 0) return mp_error(MP_ERR_ARG, "extents %lld, %lld must be >= 0", (long long)n, (long long)m);
    int64_t shape[2] = {n, m};
    mp_status st = mp_tensor_init(out, 2, shape);
    if (st != MP_OK) return st;
    for (int64_t i = 0; i < n && i < m; i++) out->data[i * m + i] = 1.0f;
    return MP_OK;
}
