/* tensor_index.c — the C tensor core (analyze/tensor.h), part 3: where and
 * masked_fill on float 0/1 masks (the comparisons that make them are binary
 * ops in analyze/tensor_math.c), gather along a dim, diagonal, tril/triu,
 * sort, random tensors from GSL's generators (gsl_rng_mt19937,
 * gsl_ran_gaussian, gsl_rng_uniform), reductions over several dims at once,
 * and the thin SVD through GSL's gsl_linalg_SV_decomp. */
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_vector.h>

static mp_status check_dim(const mp_tensor *t, int d) {
    if (d < 0 || d >= t->ndim) {
        if (t->ndim == 0) return mp_error(MP_ERR_ARG, "dim %d of a 0-dim Tensor", d + 1);
        return mp_error(MP_ERR_ARG, "dim %d out of range 1..%d", d + 1, t->ndim);
    }
    return MP_OK;
}

/* ---- masks ---- */

mp_status mp_tensor_where(mp_tensor *out, const mp_tensor *mask, const mp_tensor *a, const mp_tensor *b) {
    int64_t s1[MP_MAXDIM], shape[MP_MAXDIM];
    int n1, nd;
    memset(out, 0, sizeof *out);
    mp_status st = mp_tensor_broadcast_shape(mask->ndim, mask->shape, a->ndim, a->shape, &n1, s1);
    if (st == MP_OK) st = mp_tensor_broadcast_shape(n1, s1, b->ndim, b->shape, &nd, shape);
    if (st != MP_OK) return st;
    mp_tensor m = {0}, x = {0}, y = {0};
    if ((st = mp_tensor_expand(&m, mask, nd, shape)) == MP_OK && (st = mp_tensor_expand(&x, a, nd, shape)) == MP_OK &&
        (st = mp_tensor_expand(&y, b, nd, shape)) == MP_OK && (st = mp_tensor_init(out, nd, shape)) == MP_OK)
        for (size_t i = 0; i < out->numel; i++) out->data[i] = m.data[i] != 0 ? x.data[i] : y.data[i];
    mp_tensor_free(&m);
    mp_tensor_free(&x);
    mp_tensor_free(&y);
    return st;
}

mp_status mp_tensor_masked_fill(mp_tensor *out, const mp_tensor *t, const mp_tensor *mask, float v) {
    int64_t shape[MP_MAXDIM];
    int nd;
    memset(out, 0, sizeof *out);
    mp_status st = mp_tensor_broadcast_shape(t->ndim, t->shape, mask->ndim, mask->shape, &nd, shape);
    if (st != MP_OK) return st;
    int same = nd == t->ndim;
    for (int i = 0; same && i < nd; i++) same = shape[i] == t->shape[i];
    if (!same) {
        char s1[128], s2[128];
        mp_tensor_shape_str(mask->ndim, mask->shape, s1, sizeof s1);
        mp_tensor_shape_str(t->ndim, t->shape, s2, sizeof s2);
        return mp_error(MP_ERR_ARG, "the mask %s does not broadcast to the Tensor's shape %s", s1, s2);
    }
    mp_tensor m = {0};
    if ((st = mp_tensor_expand(&m, mask, t->ndim, t->shape)) == MP_OK && (st = mp_tensor_clone(out, t)) == MP_OK)
        for (size_t i = 0; i < out->numel; i++)
            if (m.data[i] != 0) out->data[i] = v;
    mp_tensor_free(&m);
    return st;
}

/* ---- gather, diagonal, triangles ---- */

mp_status mp_tensor_gather(mp_tensor *out, const mp_tensor *t, int d, int ndim, const int64_t *ishape, const int64_t *idx) {
    memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK) return st;
    char s1[128], s2[128];
    mp_tensor_shape_str(ndim, ishape, s1, sizeof s1);
    mp_tensor_shape_str(t->ndim, t->shape, s2, sizeof s2);
    if (ndim != t->ndim)
        return mp_error(MP_ERR_ARG, "the index %s has %d dims, the Tensor %s has %d", s1, ndim, s2, t->ndim);
    for (int k = 0; k < ndim; k++)
        if (k != d && ishape[k] > t->shape[k])
            return mp_error(MP_ERR_ARG, "the index %s is larger than the Tensor %s in dim %d (only dim %d may be)", s1, s2,
                            k + 1, d + 1);
    if ((st = mp_tensor_init(out, ndim, ishape)) != MP_OK) return st;
    for (size_t e = 0; e < out->numel; e++)
        if (idx[e] < 0 || idx[e] >= t->shape[d]) {
            mp_tensor_free(out);
            return mp_error(MP_ERR_ARG, "index %lld (element %zu of the index) out of range 0..%lld for dim %d",
                            (long long)idx[e], e + 1, (long long)t->shape[d] - 1, d + 1);
        }
    int64_t ts[MP_MAXDIM], pos[MP_MAXDIM] = {0}, src = 0; /* src: the offset without dim d's term */
    mp_tensor_strides(t, ts);
    for (size_t e = 0; e < out->numel; e++) {
        out->data[e] = t->data[src + idx[e] * ts[d]];
        for (int k = ndim - 1; k >= 0; k--) { /* odometer over the index's shape */
            if (k != d) src += ts[k];
            if (++pos[k] < ishape[k]) break;
            if (k != d) src -= ts[k] * ishape[k];
            pos[k] = 0;
        }
    }
    return MP_OK;
}

mp_status mp_tensor_diagonal(mp_tensor *out, const mp_tensor *t, int64_t off) {
    memset(out, 0, sizeof *out);
    if (t->ndim != 2) {
        char s[128];
        mp_tensor_shape_str(t->ndim, t->shape, s, sizeof s);
        return mp_error(MP_ERR_ARG, "needs a 2-D Tensor, got %s", s);
    }
    int64_t n = t->shape[0], m = t->shape[1];
    int64_t r0 = off < 0 ? -off : 0, c0 = off > 0 ? off : 0; /* off may be huge: no n + off */
    int64_t len = (r0 >= n || c0 >= m) ? 0 : (n - r0 < m - c0 ? n - r0 : m - c0);
    mp_status st = mp_tensor_init(out, 1, &len);
    if (st != MP_OK) return st;
    for (int64_t i = 0; i < len; i++) out->data[i] = t->data[(r0 + i) * m + c0 + i];
    return MP_OK;
}

mp_status mp_tensor_tri(mp_tensor *out, const mp_tensor *t, int64_t k, int upper) {
    memset(out, 0, sizeof *out);
    if (t->ndim < 2) {
        char s[128];
        mp_tensor_shape_str(t->ndim, t->shape, s, sizeof s);
        return mp_error(MP_ERR_ARG, "needs a Tensor of at least 2 dims, got %s", s);
    }
    mp_status st = mp_tensor_clone(out, t);
    if (st != MP_OK || out->numel == 0) return st;
    int64_t n = t->shape[t->ndim - 2], m = t->shape[t->ndim - 1];
    size_t batch = out->numel / (size_t)(n * m);
    for (size_t b = 0; b < batch; b++) {
        float *x = out->data + b * (size_t)(n * m);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++)
                if (upper ? j - i < k : j - i > k) x[i * m + j] = 0.0f;
    }
    return MP_OK;
}

/* ---- sort ---- */

mp_status mp_tensor_sort(mp_tensor *out, int64_t *idx, const mp_tensor *t, int d, int descending) {
    memset(out, 0, sizeof *out);
    mp_status st = check_dim(t, d);
    if (st != MP_OK) return st;
    return mp_tensor_topk(out, idx, t, t->shape[d], d, descending);
}

/* ---- random tensors ---- */

struct mp_tensor_rng {
    gsl_rng *g;
};

mp_status mp_tensor_rng_new(mp_tensor_rng **out, unsigned long seed) {
    *out = NULL;
    mp_tensor_rng *r = malloc(sizeof *r);
    gsl_error_handler_t *old = gsl_set_error_handler_off(); /* an allocation failure returns NULL */
    gsl_rng *g = r ? gsl_rng_alloc(gsl_rng_mt19937) : NULL;
    gsl_set_error_handler(old);
    if (!g) {
        free(r);
        return mp_error(MP_ERR_NOMEM, "out of memory allocating a random generator");
    }
    gsl_rng_set(g, seed);
    r->g = g;
    *out = r;
    return MP_OK;
}

void mp_tensor_rng_free(mp_tensor_rng *r) {
    if (!r) return;
    gsl_rng_free(r->g);
    free(r);
}

mp_status mp_tensor_random(mp_tensor *out, int ndim, const int64_t *shape, mp_tensor_rng *r, int normal) {
    mp_status st = mp_tensor_init(out, ndim, shape);
    if (st != MP_OK) return st;
    for (size_t i = 0; i < out->numel; i++)
        out->data[i] = (float)(normal ? gsl_ran_gaussian(r->g, 1.0) : gsl_rng_uniform(r->g));
    /* float rounding may lift a uniform just below 1 to 1: keep [0, 1) */
    if (!normal)
        for (size_t i = 0; i < out->numel; i++)
            if (out->data[i] >= 1.0f) out->data[i] = nextafterf(1.0f, 0.0f);
    return MP_OK;
}

/* ---- reductions over several dims ---- */

mp_status mp_tensor_reduce_dims(mp_tensor *out, const mp_tensor *t, const int *dims, int n, int keepdim,
                                mp_tensor_reduce kind) {
    static const char *const names[] = {"sum", "mean", "max", "min"};
    int red[MP_MAXDIM] = {0}, perm[MP_MAXDIM], np = 0;
    int64_t shape[MP_MAXDIM], len = 1;
    mp_status st;
    memset(out, 0, sizeof *out);
    if ((unsigned)kind > MP_TENSOR_RMIN) return mp_error(MP_ERR_ARG, "unknown reduction %d", (int)kind);
    if (n < 1) return mp_error(MP_ERR_ARG, "the list of dims is empty");
    if (n > t->ndim) return mp_error(MP_ERR_ARG, "%d dims listed for a %d-dim Tensor", n, t->ndim);
    for (int i = 0; i < n; i++) {
        if ((st = check_dim(t, dims[i])) != MP_OK) return st;
        if (red[dims[i]]) return mp_error(MP_ERR_ARG, "dim %d appears twice in the list of dims", dims[i] + 1);
        red[dims[i]] = 1;
    }
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) { /* kept dims first, then the reduced ones in order */
        if (!red[i]) perm[np++] = i;
        if (!red[i] || keepdim) shape[nd++] = red[i] ? 1 : t->shape[i];
    }
    for (int i = 0; i < t->ndim; i++)
        if (red[i]) {
            perm[np++] = i;
            len *= t->shape[i];
        }
    if (len == 0 && kind != MP_TENSOR_RSUM)
        return mp_error(MP_ERR_ARG, "%s over dims with no elements", names[kind]);
    if ((st = mp_tensor_init(out, nd, shape)) != MP_OK || out->numel == 0 || len == 0) return st;
    mp_tensor p = {0};
    if ((st = mp_tensor_permute(&p, t, perm)) != MP_OK) {
        mp_tensor_free(out);
        return st;
    }
    for (size_t o = 0; o < out->numel; o++) {
        const float *x = p.data + o * (size_t)len;
        if (kind == MP_TENSOR_RSUM || kind == MP_TENSOR_RMEAN) {
            double acc = 0;
            for (int64_t j = 0; j < len; j++) acc += x[j];
            out->data[o] = (float)(kind == MP_TENSOR_RMEAN ? acc / (double)len : acc);
        } else {
            float best = x[0];
            for (int64_t j = 1; j < len && !isnan(best); j++)
                if (isnan(x[j]) || (kind == MP_TENSOR_RMAX ? x[j] > best : x[j] < best)) best = x[j];
            out->data[o] = best;
        }
    }
    mp_tensor_free(&p);
    return MP_OK;
}

/* ---- SVD ---- */

mp_status mp_tensor_svd(mp_tensor *u, mp_tensor *s, mp_tensor *vh, const mp_tensor *t) {
    memset(u, 0, sizeof *u);
    memset(s, 0, sizeof *s);
    memset(vh, 0, sizeof *vh);
    if (t->ndim != 2) {
        char b[128];
        mp_tensor_shape_str(t->ndim, t->shape, b, sizeof b);
        return mp_error(MP_ERR_ARG, "needs a 2-D Tensor, got %s", b);
    }
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(t->data[i])) return mp_error(MP_ERR_ARG, "element %zu is not finite (%g)", i + 1, (double)t->data[i]);
    int64_t m = t->shape[0], n = t->shape[1], k = m < n ? m : n;
    int tr = m < n;                      /* GSL needs rows >= columns: decompose the transpose */
    int64_t rows = tr ? n : m, cols = k; /* A' [rows, cols] = U' diag(S) V'^T */
    int64_t su[2] = {m, k}, ss[1] = {k}, sv[2] = {k, n};
    mp_status st;
    if ((st = mp_tensor_init(u, 2, su)) != MP_OK || (st = mp_tensor_init(s, 1, ss)) != MP_OK ||
        (st = mp_tensor_init(vh, 2, sv)) != MP_OK)
        goto fail;
    if (k == 0) return MP_OK;
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    gsl_matrix *A = gsl_matrix_alloc((size_t)rows, (size_t)cols), *V = gsl_matrix_alloc((size_t)cols, (size_t)cols);
    gsl_vector *S = gsl_vector_alloc((size_t)cols), *w = gsl_vector_alloc((size_t)cols);
    int rc = GSL_ENOMEM;
    if (A && V && S && w) {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                gsl_matrix_set(A, (size_t)i, (size_t)j, tr ? t->data[j * n + i] : t->data[i * n + j]);
        rc = gsl_linalg_SV_decomp(A, V, S, w);
    }
    gsl_set_error_handler(old);
    if (rc == GSL_SUCCESS) {
        for (int64_t i = 0; i < k; i++) s->data[i] = (float)gsl_vector_get(S, (size_t)i);
        /* not transposed: U = A' [m, k], Vh = V'^T; transposed: U = V' [m, m], Vh = A'^T [m, n] */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < k; j++)
                u->data[i * k + j] = (float)(tr ? gsl_matrix_get(V, (size_t)i, (size_t)j) : gsl_matrix_get(A, (size_t)i, (size_t)j));
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < n; j++)
                vh->data[i * n + j] = (float)(tr ? gsl_matrix_get(A, (size_t)j, (size_t)i) : gsl_matrix_get(V, (size_t)j, (size_t)i));
    }
    gsl_matrix_free(A);
    gsl_matrix_free(V);
    gsl_vector_free(S);
    gsl_vector_free(w);
    if (rc == GSL_SUCCESS) return MP_OK;
    st = rc == GSL_ENOMEM ? mp_error(MP_ERR_NOMEM, "out of memory for the SVD")
                          : mp_error(MP_ERR_ARG, "gsl_linalg_SV_decomp failed: %s", gsl_strerror(rc));
fail:
    mp_tensor_free(u);
    mp_tensor_free(s);
    mp_tensor_free(vh);
    return st;
}

/* ---- einsum (one or two operands) ---- */

/* A parsed einsum term: its letters in order. */
typedef struct {
    char l[MP_MAXDIM + 1];
    int n;
} term;

static mp_status parse_term(const char **p, term *t, const char *what) {
    t->n = 0;
    for (; **p && **p != ',' && **p != '-'; (*p)++) {
        char c = **p;
        if (c == ' ') continue;
        if (c == '.') return mp_error(MP_ERR_ARG, "\"...\" is not supported (name every dim with a letter)");
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return mp_error(MP_ERR_ARG, "'%c' in %s is not a letter", c, what);
        for (int i = 0; i < t->n; i++)
            if (t->l[i] == c)
                return mp_error(MP_ERR_ARG, "letter '%c' repeated in %s (diagonals and traces are not supported)", c,
                                what);
        if (t->n == MP_MAXDIM) return mp_error(MP_ERR_ARG, "%s has more than %d letters", what, MP_MAXDIM);
        t->l[t->n++] = c;
    }
    t->l[t->n] = '\0';
    return MP_OK;
}

static int pos_of(const term *t, char c) {
    for (int i = 0; i < t->n; i++)
        if (t->l[i] == c) return i;
    return -1;
}

/* x (letters tx) with the letters not in keep_a / keep_b / out summed away: into *r, letters into *tr. */
static mp_status sum_unused(mp_tensor *r, term *tr, const mp_tensor *x, const term *tx, const term *other,
                            const term *out) {
    int dims[MP_MAXDIM], nd = 0;
    *tr = (term){.n = 0};
    for (int i = 0; i < tx->n; i++) {
        if (pos_of(out, tx->l[i]) < 0 && (!other || pos_of(other, tx->l[i]) < 0)) dims[nd++] = i;
        else tr->l[tr->n++] = tx->l[i];
    }
    tr->l[tr->n] = '\0';
    if (nd == 0) return mp_tensor_view(r, x, 0, x->ndim, x->shape);
    return mp_tensor_reduce_dims(r, x, dims, nd, 0, MP_TENSOR_RSUM);
}

/* r = x (letters tx) permuted to the letter order want (tx's letters exactly). */
static mp_status permute_to(mp_tensor *r, const mp_tensor *x, const term *tx, const term *want) {
    int perm[MP_MAXDIM];
    for (int i = 0; i < want->n; i++) perm[i] = pos_of(tx, want->l[i]);
    return mp_tensor_permute(r, x, perm);
}

mp_status mp_tensor_einsum(mp_tensor *out, const char *eq, const mp_tensor *const *ops, int n) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > 2) return mp_error(MP_ERR_ARG, "%d operands (1 or 2 are supported)", n);
    term in[2], o;
    const char *p = eq;
    mp_status st;
    int terms = 1;
    for (const char *q = eq; *q && *q != '-'; q++) terms += *q == ',';
    if (terms != n)
        return mp_error(MP_ERR_ARG, "the equation names %d operand%s, %d given", terms, terms > 1 ? "s" : "", n);
    for (int k = 0; k < n; k++) {
        char what[32];
        snprintf(what, sizeof what, "operand %d", k + 1);
        if ((st = parse_term(&p, &in[k], what)) != MP_OK) return st;
        if (k + 1 < n) p++; /* the ',' counted above */
    }
    int explicit_out = 0;
    if (*p == '-') {
        if (p[1] != '>') return mp_error(MP_ERR_ARG, "'-' not followed by '>'");
        p += 2;
        explicit_out = 1;
        if ((st = parse_term(&p, &o, "the output")) != MP_OK) return st;
        if (*p) return mp_error(MP_ERR_ARG, "'%c' after the output", *p);
    } else if (*p) {
        return mp_error(MP_ERR_ARG, "'%c' is not a letter", *p);
    }
    int64_t ext[128];
    int seen[128] = {0};
    for (int k = 0; k < n; k++) {
        if (in[k].n != ops[k]->ndim)
            return mp_error(MP_ERR_ARG, "operand %d has %d dims, its term \"%s\" %d letters", k + 1, ops[k]->ndim,
                            in[k].l, in[k].n);
        for (int i = 0; i < in[k].n; i++) {
            int c = (unsigned char)in[k].l[i];
            if (seen[c] && ext[c] != ops[k]->shape[i])
                return mp_error(MP_ERR_ARG, "letter '%c' has extent %lld and %lld", c, (long long)ext[c],
                                (long long)ops[k]->shape[i]);
            ext[c] = ops[k]->shape[i];
            seen[c]++;
        }
    }
    if (!explicit_out) { /* the letters that appear once, alphabetically */
        o.n = 0;
        for (int c = 'A'; c <= 'z'; c++)
            if (seen[c] == 1) {
                if (o.n == MP_MAXDIM) return mp_error(MP_ERR_ARG, "the output has more than %d letters", MP_MAXDIM);
                o.l[o.n++] = (char)c;
            }
        o.l[o.n] = '\0';
    }
    for (int i = 0; i < o.n; i++)
        if (!seen[(unsigned char)o.l[i]]) return mp_error(MP_ERR_ARG, "output letter '%c' is in no operand", o.l[i]);
    mp_tensor a = {0}, b = {0}, pa = {0}, pb = {0}, prod = {0}, v = {0};
    term ta, tb;
    if ((st = sum_unused(&a, &ta, ops[0], &in[0], n == 2 ? &in[1] : NULL, &o)) != MP_OK) goto done;
    if (n == 1) {
        st = permute_to(out, &a, &ta, &o);
        goto done;
    }
    if ((st = sum_unused(&b, &tb, ops[1], &in[1], &in[0], &o)) != MP_OK) goto done;
    term la = {.n = 0}, lb = {.n = 0}, mid = {.n = 0}; /* A: batch, fa, contr; B: batch, contr, fb */
    int64_t bt = 1, m = 1, kk = 1, nn = 1, shp[MP_MAXDIM];
    int nb = 0, nfa = 0;
    for (int i = 0; i < o.n; i++) /* batch letters, in output order */
        if (pos_of(&ta, o.l[i]) >= 0 && pos_of(&tb, o.l[i]) >= 0) {
            la.l[la.n++] = lb.l[lb.n++] = mid.l[mid.n++] = o.l[i];
            bt *= ext[(unsigned char)o.l[i]];
            nb++;
        }
    for (int i = 0; i < ta.n; i++)
        if (pos_of(&tb, ta.l[i]) < 0) {
            la.l[la.n++] = mid.l[mid.n++] = ta.l[i];
            m *= ext[(unsigned char)ta.l[i]];
            nfa++;
        }
    for (int i = 0; i < ta.n; i++)
        if (pos_of(&tb, ta.l[i]) >= 0 && pos_of(&o, ta.l[i]) < 0) {
            la.l[la.n++] = lb.l[lb.n++] = ta.l[i];
            kk *= ext[(unsigned char)ta.l[i]];
        }
    for (int i = 0; i < tb.n; i++)
        if (pos_of(&ta, tb.l[i]) < 0) {
            lb.l[lb.n++] = mid.l[mid.n++] = tb.l[i];
            nn *= ext[(unsigned char)tb.l[i]];
        }
    la.l[la.n] = lb.l[lb.n] = mid.l[mid.n] = '\0';
    (void)nb;
    (void)nfa;
    int64_t s3a[3] = {bt, m, kk}, s3b[3] = {bt, kk, nn};
    mp_tensor ra = {0}, rb = {0};
    if ((st = permute_to(&pa, &a, &ta, &la)) != MP_OK || (st = permute_to(&pb, &b, &tb, &lb)) != MP_OK ||
        (st = mp_tensor_reshape(&ra, &pa, 3, s3a)) != MP_OK || (st = mp_tensor_reshape(&rb, &pb, 3, s3b)) != MP_OK ||
        (st = mp_tensor_matmul(&prod, &ra, &rb)) != MP_OK) {
        mp_tensor_free(&ra);
        mp_tensor_free(&rb);
        goto done;
    }
    mp_tensor_free(&ra);
    mp_tensor_free(&rb);
    for (int i = 0; i < mid.n; i++) shp[i] = ext[(unsigned char)mid.l[i]];
    if ((st = mp_tensor_reshape(&v, &prod, mid.n, shp)) == MP_OK) st = permute_to(out, &v, &mid, &o);
done:
    mp_tensor_free(&a);
    mp_tensor_free(&b);
    mp_tensor_free(&pa);
    mp_tensor_free(&pb);
    mp_tensor_free(&prod);
    mp_tensor_free(&v);
    return st;
}
