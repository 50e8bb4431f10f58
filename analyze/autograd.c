/* autograd.c — reverse-mode autograd over the C tensor core (see autograd.h):
 * the nodes, the registry of saved storages and their versions, the backward
 * rule of every op (one function, `rule`, a case per op, built from the
 * tensor core's own functions and plain loops), and the backward walk. */
#include "autograd.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct mp_ag_node {
    int refs;
    mp_ag_args a;         /* a.idx points to idx */
    int64_t *idx;         /* owned copy of the op's indices */
    int n;                /* inputs */
    mp_ag_node **in;      /* n nodes, NULL for an input without gradient */
    int *indim;           /* the inputs' shapes */
    int64_t (*ishape)[MP_MAXDIM];
    mp_tensor *sv;        /* saved tensors: slots 0..n-1 the inputs, n the output (empty: not saved) */
    unsigned *sver;       /* the version of the slot's storage when saved */
    int *sreg;            /* slot registered in the version registry */
    int ndim;             /* the output's shape */
    int64_t shape[MP_MAXDIM];
    int freed;            /* saved tensors released by a backward */
    mp_tensor grad;       /* a leaf's accumulated gradient */
    mp_tensor g;          /* backward: the gradient flowing into this node */
    unsigned mark;
};

static const char *const op_names[MP_AG_N_OPS] = {
    "leaf", "add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "abs", "tanh", "relu", "sigmoid",
    "clamp", "sum", "mean", "amax", "amin", "max/min over a dim", "softmax", "log_softmax", "matmul", "dot", "view",
    "permute", "slice", "index_select", "gather", "cat", "stack", "where", "masked_fill", "norm",
};

const char *mp_ag_op_name(mp_ag_op op) { return op >= 0 && op < MP_AG_N_OPS ? op_names[op] : "?"; }

static int grad_on = 1;
int mp_ag_enabled(void) { return grad_on; }
int mp_ag_set_enabled(int on) {
    int old = grad_on;
    grad_on = on != 0;
    return old;
}

/* ---- the registry of saved storages: version and number of saves ---- */

typedef struct reg {
    const mp_storage *st;
    unsigned ver;
    int count;
    struct reg *next;
} reg;
#define NBUCKET 1024
static reg *buckets[NBUCKET];
static size_t reg_n;

static size_t hash_ptr(const void *p) {
    uintptr_t u = (uintptr_t)p;
    return (size_t)((u >> 4) ^ (u >> 14)) & (NBUCKET - 1);
}

static reg *reg_find(const mp_storage *st) {
    for (reg *r = buckets[hash_ptr(st)]; r; r = r->next)
        if (r->st == st) return r;
    return NULL;
}

/* One more save of st; its current version into *ver. */
static mp_status reg_add(const mp_storage *st, unsigned *ver) {
    reg *r = reg_find(st);
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return mp_error(MP_ERR_NOMEM, "out of memory recording an op for autograd");
        size_t h = hash_ptr(st);
        r->st = st;
        r->next = buckets[h];
        buckets[h] = r;
        reg_n++;
    }
    r->count++;
    *ver = r->ver;
    return MP_OK;
}

static void reg_del(const mp_storage *st) {
    reg **pp = &buckets[hash_ptr(st)];
    for (reg *r = *pp; r; pp = &r->next, r = r->next)
        if (r->st == st) {
            if (--r->count == 0) {
                *pp = r->next;
                free(r);
                reg_n--;
            }
            return;
        }
}

void mp_ag_bump(const mp_storage *st) {
    if (!reg_n || !st) return;
    reg *r = reg_find(st);
    if (r) r->ver++;
}

int mp_ag_saved(const mp_storage *st) { return reg_n && st && reg_find(st) != NULL; }

/* ---- nodes ---- */

static size_t n_live; /* nodes alive */
size_t mp_ag_live(void) { return n_live; }

static mp_ag_node *node_new(int n) {
    mp_ag_node *nd = calloc(1, sizeof *nd);
    if (!nd) return NULL;
    n_live++;
    nd->refs = 1;
    nd->n = n;
    if (n > 0) {
        nd->in = calloc((size_t)n, sizeof *nd->in);
        nd->indim = calloc((size_t)n, sizeof *nd->indim);
        nd->ishape = calloc((size_t)n, sizeof *nd->ishape);
    }
    nd->sv = calloc((size_t)n + 1, sizeof *nd->sv);
    nd->sver = calloc((size_t)n + 1, sizeof *nd->sver);
    nd->sreg = calloc((size_t)n + 1, sizeof *nd->sreg);
    if ((n > 0 && (!nd->in || !nd->indim || !nd->ishape)) || !nd->sv || !nd->sver || !nd->sreg) {
        free(nd->in), free(nd->indim), free(nd->ishape), free(nd->sv), free(nd->sver), free(nd->sreg), free(nd);
        n_live--;
        return NULL;
    }
    return nd;
}

static void release_saved(mp_ag_node *nd) {
    for (int k = 0; k <= nd->n; k++) {
        if (nd->sreg[k] && nd->sv[k].st) reg_del(nd->sv[k].st);
        nd->sreg[k] = 0;
        mp_tensor_free(&nd->sv[k]);
    }
}

mp_ag_node *mp_ag_ref(mp_ag_node *nd) {
    if (nd) nd->refs++;
    return nd;
}

/* Iterative, so that a long chain of ops does not recurse once per node. */
void mp_ag_unref(mp_ag_node *nd) {
    mp_ag_node **work = NULL;
    size_t nw = 0, cap = 0;
    while (nd) {
        if (--nd->refs == 0) {
            release_saved(nd);
            mp_tensor_free(&nd->grad);
            mp_tensor_free(&nd->g);
            for (int i = 0; i < nd->n; i++) {
                if (!nd->in[i]) continue;
                if (nw == cap) {
                    size_t nc = cap ? 2 * cap : 16;
                    mp_ag_node **w = realloc(work, nc * sizeof *w);
                    if (!w) { /* no memory to walk: leak the rest rather than crash */
                        nw = 0;
                        break;
                    }
                    work = w;
                    cap = nc;
                }
                work[nw++] = nd->in[i];
            }
            free(nd->in), free(nd->indim), free(nd->ishape), free(nd->sv), free(nd->sver), free(nd->sreg);
            free(nd->idx);
            free(nd);
            n_live--;
        }
        nd = nw ? work[--nw] : NULL;
    }
    free(work);
}

mp_status mp_ag_leaf(mp_ag_node **out, int ndim, const int64_t *shape) {
    *out = NULL;
    mp_ag_node *nd = node_new(0);
    if (!nd) return mp_error(MP_ERR_NOMEM, "out of memory making a leaf for autograd");
    nd->a.op = MP_AG_LEAF;
    nd->ndim = ndim;
    if (ndim > 0) memcpy(nd->shape, shape, (size_t)ndim * sizeof *shape);
    *out = nd;
    return MP_OK;
}

int mp_ag_is_leaf(const mp_ag_node *nd) { return nd->a.op == MP_AG_LEAF; }
mp_ag_op mp_ag_node_op(const mp_ag_node *nd) { return nd->a.op; }
mp_tensor *mp_ag_grad(mp_ag_node *leaf) { return leaf->grad.st ? &leaf->grad : NULL; }

mp_status mp_ag_set_grad(mp_ag_node *leaf, const mp_tensor *g) {
    if (g && (g->ndim != leaf->ndim || memcmp(g->shape, leaf->shape, (size_t)g->ndim * sizeof *g->shape))) {
        char s1[128], s2[128];
        mp_tensor_shape_str(g->ndim, g->shape, s1, sizeof s1);
        mp_tensor_shape_str(leaf->ndim, leaf->shape, s2, sizeof s2);
        return mp_error(MP_ERR_ARG, "grad: a gradient %s for a Tensor %s", s1, s2);
    }
    mp_tensor t = {0};
    if (g) {
        mp_status s = mp_tensor_view(&t, g, 0, g->ndim, g->shape);
        if (s != MP_OK) return s;
    }
    mp_tensor_free(&leaf->grad);
    leaf->grad = t;
    return MP_OK;
}

/* Which tensors op's rule reads: sx[i] the input i, *sy the output. */
static void needs(const mp_ag_args *a, int n, mp_ag_node *const *in, int *sx, int *sy) {
    for (int i = 0; i < n; i++) sx[i] = 0;
    *sy = 0;
    switch (a->op) {
    case MP_AG_MUL: case MP_AG_MATMUL: case MP_AG_DOT:
        sx[0] = in[1] != NULL;
        sx[1] = in[0] != NULL;
        break;
    case MP_AG_DIV: sx[1] = 1; *sy = in[1] != NULL; break;
    case MP_AG_POW: sx[0] = sx[1] = 1; *sy = in[1] != NULL; break;
    case MP_AG_EXP: case MP_AG_SQRT: case MP_AG_TANH: case MP_AG_SIGMOID: case MP_AG_SOFTMAX: case MP_AG_LOG_SOFTMAX:
        *sy = 1;
        break;
    case MP_AG_LOG: case MP_AG_ABS: case MP_AG_RELU: case MP_AG_CLAMP: sx[0] = 1; break;
    case MP_AG_AMAX: case MP_AG_AMIN: case MP_AG_NORM: sx[0] = 1; *sy = 1; break;
    case MP_AG_WHERE: sx[0] = 1; break;
    case MP_AG_MASKED_FILL: sx[1] = 1; break;
    default: break;
    }
}

static mp_status save(mp_ag_node *nd, int slot, const mp_tensor *x) {
    if (!x->st) return mp_tensor_clone(&nd->sv[slot], x); /* a number */
    mp_status s = mp_tensor_view(&nd->sv[slot], x, 0, x->ndim, x->shape);
    if (s != MP_OK) return s;
    if ((s = reg_add(x->st, &nd->sver[slot])) != MP_OK) {
        mp_tensor_free(&nd->sv[slot]);
        return s;
    }
    nd->sreg[slot] = 1;
    return MP_OK;
}

mp_status mp_ag_record(mp_ag_node **out, const mp_ag_args *a, int n, mp_ag_node *const *in,
                       const mp_tensor *const *x, const mp_tensor *y) {
    *out = NULL;
    int any = 0;
    for (int i = 0; i < n; i++) any |= in[i] != NULL;
    if (!any) return MP_OK;
    if (a->op == MP_AG_NORM && !(a->p > 0 && isfinite(a->p)))
        return mp_error(MP_ERR_ARG, "norm: no gradient for p = %g (only a finite p > 0)", a->p);
    mp_ag_node *nd = node_new(n);
    if (!nd) return mp_error(MP_ERR_NOMEM, "out of memory recording %s for autograd", mp_ag_op_name(a->op));
    nd->a = *a;
    nd->a.idx = NULL;
    if (a->idx && a->nidx) {
        if (!(nd->idx = malloc(a->nidx * sizeof *nd->idx))) {
            mp_ag_unref(nd);
            return mp_error(MP_ERR_NOMEM, "out of memory recording %s for autograd", mp_ag_op_name(a->op));
        }
        memcpy(nd->idx, a->idx, a->nidx * sizeof *nd->idx);
        nd->a.idx = nd->idx;
    }
    nd->ndim = y->ndim;
    memcpy(nd->shape, y->shape, sizeof nd->shape);
    int sx[n > 0 ? n : 1], sy;
    needs(a, n, in, sx, &sy);
    mp_status s = MP_OK;
    for (int i = 0; i < n; i++) {
        nd->in[i] = mp_ag_ref(in[i]);
        nd->indim[i] = x[i]->ndim;
        memcpy(nd->ishape[i], x[i]->shape, sizeof nd->ishape[i]);
        if (s == MP_OK && sx[i]) s = save(nd, i, x[i]);
    }
    if (s == MP_OK && sy) s = save(nd, n, y);
    if (s != MP_OK) {
        mp_ag_unref(nd);
        return s;
    }
    *out = nd;
    return MP_OK;
}

/* ---- helpers of the backward rules ---- */

#define TRY(e) do { if ((s = (e)) != MP_OK) goto done; } while (0)

static mp_tensor scalar(float *v) {
    mp_tensor t;
    memset(&t, 0, sizeof t);
    t.data = v;
    t.numel = 1;
    return t;
}

/* g summed down to shape (undoing a broadcast): over its extra leading dims
 * and over the dims where shape has extent 1 and g does not. */
static mp_status sum_to(mp_tensor *out, const mp_tensor *g, int nd, const int64_t *sh) {
    int dims[MP_MAXDIM], k = 0, lead = g->ndim - nd;
    for (int i = 0; i < g->ndim; i++)
        if (i < lead || (sh[i - lead] == 1 && g->shape[i] != 1)) dims[k++] = i;
    if (!k) return mp_tensor_reshape(out, g, nd, sh);
    mp_tensor t = {0};
    mp_status s = mp_tensor_reduce_dims(&t, g, dims, k, 1, MP_TENSOR_RSUM);
    if (s == MP_OK) s = mp_tensor_reshape(out, &t, nd, sh);
    mp_tensor_free(&t);
    return s;
}

/* The input shape sh with the reduced dims (ndims 0: all) as extent 1. */
static void kept_shape(const mp_ag_args *a, int nd, const int64_t *sh, int64_t *k) {
    memcpy(k, sh, (size_t)nd * sizeof *k);
    if (a->ndims == 0)
        for (int i = 0; i < nd; i++) k[i] = 1;
    for (int i = 0; i < a->ndims; i++) k[a->dims[i]] = 1;
}

/* t (a reduction's result, kept dims or not) broadcast back to sh. */
static mp_status expand_back(mp_tensor *out, const mp_tensor *t, const mp_ag_args *a, int nd, const int64_t *sh) {
    int64_t k[MP_MAXDIM];
    kept_shape(a, nd, sh, k);
    mp_tensor v = {0};
    mp_status s = mp_tensor_reshape(&v, t, nd, k);
    if (s == MP_OK) s = mp_tensor_expand(out, &v, nd, sh);
    mp_tensor_free(&v);
    return s;
}

/* outer, extent and inner of dim d of shape. */
static void split_dim(int nd, const int64_t *sh, int d, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= sh[i];
    for (int i = d + 1; i < nd; i++) *inner *= sh[i];
    *n = sh[d];
}

static mp_status mm_grad(mp_tensor *out, const mp_tensor *p, const mp_tensor *q, int tp, int tq) {
    /* out = (tp ? p^T : p) @ (tq ? q^T : q), transposes of the last two dims */
    mp_tensor pt = {0}, qt = {0};
    mp_status s = MP_OK;
    if (tp) TRY(mp_tensor_transpose(&pt, p, p->ndim - 2, p->ndim - 1));
    if (tq) TRY(mp_tensor_transpose(&qt, q, q->ndim - 2, q->ndim - 1));
    s = mp_tensor_matmul(out, tp ? &pt : p, tq ? &qt : q);
done:
    mp_tensor_free(&pt);
    mp_tensor_free(&qt);
    return s;
}

/* The matmul rule: a [..,n,k] @ b [..,k,m] (1-D sides promoted). */
static mp_status matmul_rule(mp_ag_node *nd, const mp_tensor *g, mp_tensor *gi) {
    const mp_tensor *A = &nd->sv[0], *B = &nd->sv[1];
    int na = nd->indim[0], nb = nd->indim[1];
    int64_t sa[MP_MAXDIM], sb[MP_MAXDIM], sg[MP_MAXDIM];
    int pa = na == 1 ? 2 : na, pb = nb == 1 ? 2 : nb, ng = g->ndim;
    memcpy(sa, nd->ishape[0], sizeof sa);
    memcpy(sb, nd->ishape[1], sizeof sb);
    if (na == 1) sa[1] = sa[0], sa[0] = 1;
    if (nb == 1) sb[1] = 1;
    /* g in the promoted result's shape: batch dims, n, m */
    memcpy(sg, g->shape, sizeof sg);
    if (na == 1 && nb == 1) return mp_error(MP_ERR_ARG, "matmul: two 1-D sides (use dot)");
    if (na == 1) { /* the n dim was dropped: before the last */
        for (int i = ng; i > ng - 1; i--) sg[i] = sg[i - 1];
        sg[ng - 1] = 1;
        ng++;
    }
    if (nb == 1) sg[ng++] = 1;
    mp_tensor G = {0}, Ap = {0}, Bp = {0}, t = {0}, r = {0};
    mp_status s = mp_tensor_reshape(&G, g, ng, sg);
    if (s != MP_OK) return s;
    if (nd->in[0]) {
        TRY(mp_tensor_reshape(&Bp, B, pb, sb));
        TRY(mm_grad(&t, &G, &Bp, 0, 1));
        TRY(sum_to(&r, &t, pa, sa));
        TRY(mp_tensor_reshape(&gi[0], &r, na, nd->ishape[0]));
        mp_tensor_free(&t);
        mp_tensor_free(&r);
    }
    if (nd->in[1]) {
        TRY(mp_tensor_reshape(&Ap, A, pa, sa));
        TRY(mm_grad(&t, &Ap, &G, 1, 0));
        TRY(sum_to(&r, &t, pb, sb));
        TRY(mp_tensor_reshape(&gi[1], &r, nb, nd->ishape[1]));
    }
done:
    mp_tensor_free(&G), mp_tensor_free(&Ap), mp_tensor_free(&Bp), mp_tensor_free(&t), mp_tensor_free(&r);
    return s;
}

/* ---- the backward rules: gi[i] = d out / d input i, contracted with g,
 * for every input i that has a node ---- */

static mp_status rule(mp_ag_node *nd, const mp_tensor *g, mp_tensor *gi) {
    const mp_ag_args *a = &nd->a;
    const mp_tensor *x0 = &nd->sv[0], *x1 = nd->n > 1 ? &nd->sv[1] : NULL, *y = &nd->sv[nd->n];
    const int nd0 = nd->indim[0];
    const int64_t *sh0 = nd->ishape[0];
    mp_tensor t = {0}, u = {0}, w = {0};
    float one = 1.0f, zero = 0.0f;
    mp_tensor t1 = scalar(&one), t0 = scalar(&zero);
    mp_status s = MP_OK;
    switch (a->op) {
    case MP_AG_ADD: case MP_AG_SUB:
        if (nd->in[0]) TRY(sum_to(&gi[0], g, nd0, sh0));
        if (nd->in[1]) {
            if (a->op == MP_AG_SUB) TRY(mp_tensor_neg(&t, g));
            TRY(sum_to(&gi[1], a->op == MP_AG_SUB ? &t : g, nd->indim[1], nd->ishape[1]));
        }
        break;
    case MP_AG_MUL:
        for (int i = 0; i < 2; i++) {
            if (!nd->in[i]) continue;
            TRY(mp_tensor_binary(&t, MP_TENSOR_MUL, g, &nd->sv[1 - i]));
            TRY(sum_to(&gi[i], &t, nd->indim[i], nd->ishape[i]));
            mp_tensor_free(&t);
        }
        break;
    case MP_AG_DIV:
        if (nd->in[0]) {
            TRY(mp_tensor_binary(&t, MP_TENSOR_DIV, g, x1));
            TRY(sum_to(&gi[0], &t, nd0, sh0));
            mp_tensor_free(&t);
        }
        if (nd->in[1]) { /* -g y / b */
            TRY(mp_tensor_binary(&t, MP_TENSOR_MUL, g, y));
            TRY(mp_tensor_binary(&u, MP_TENSOR_DIV, &t, x1));
            mp_tensor_free(&t);
            TRY(mp_tensor_neg(&t, &u));
            TRY(sum_to(&gi[1], &t, nd->indim[1], nd->ishape[1]));
        }
        break;
    case MP_AG_POW:
        if (nd->in[0]) { /* g b a^(b-1) */
            TRY(mp_tensor_binary(&t, MP_TENSOR_SUB, x1, &t1));
            TRY(mp_tensor_binary(&u, MP_TENSOR_POW, x0, &t));
            mp_tensor_free(&t);
            TRY(mp_tensor_binary(&t, MP_TENSOR_MUL, &u, x1));
            mp_tensor_free(&u);
            TRY(mp_tensor_binary(&u, MP_TENSOR_MUL, &t, g));
            TRY(sum_to(&gi[0], &u, nd0, sh0));
            mp_tensor_free(&t);
            mp_tensor_free(&u);
        }
        if (nd->in[1]) { /* g y log(a) */
            TRY(mp_tensor_unary(&t, MP_TENSOR_LOG, x0));
            TRY(mp_tensor_binary(&u, MP_TENSOR_MUL, &t, y));
            TRY(mp_tensor_binary(&w, MP_TENSOR_MUL, &u, g));
            TRY(sum_to(&gi[1], &w, nd->indim[1], nd->ishape[1]));
        }
        break;
    case MP_AG_NEG: case MP_AG_EXP: case MP_AG_LOG: case MP_AG_SQRT: case MP_AG_ABS: case MP_AG_TANH:
    case MP_AG_RELU: case MP_AG_SIGMOID: case MP_AG_CLAMP: {
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        float *o = gi[0].data;
        const float *gg = g->data, *xv = x0->data, *yv = y->data;
        for (size_t e = 0; e < gi[0].numel; e++) {
            double gv = gg[e], r = 0;
            switch (a->op) {
            case MP_AG_NEG: r = -gv; break;
            case MP_AG_EXP: r = gv * yv[e]; break;
            case MP_AG_LOG: r = gv / xv[e]; break;
            case MP_AG_SQRT: r = gv / (2.0 * yv[e]); break;
            case MP_AG_ABS: r = xv[e] > 0 ? gv : xv[e] < 0 ? -gv : 0; break;
            case MP_AG_TANH: r = gv * (1.0 - (double)yv[e] * yv[e]); break;
            case MP_AG_RELU: r = xv[e] > 0 ? gv : 0; break;
            case MP_AG_SIGMOID: r = gv * yv[e] * (1.0 - yv[e]); break;
            default: r = xv[e] >= a->lo && xv[e] <= a->hi ? gv : 0; break; /* clamp */
            }
            o[e] = (float)r;
        }
        break;
    }
    case MP_AG_SUM: case MP_AG_MEAN:
        TRY(expand_back(&gi[0], g, a, nd0, sh0));
        if (a->op == MP_AG_MEAN && gi[0].numel) {
            double cnt = 1;
            if (a->ndims == 0) cnt = (double)gi[0].numel;
            for (int i = 0; i < a->ndims; i++) cnt *= (double)sh0[a->dims[i]];
            for (size_t e = 0; e < gi[0].numel; e++) gi[0].data[e] = (float)(gi[0].data[e] / cnt);
        }
        break;
    case MP_AG_AMAX: case MP_AG_AMIN: { /* g shared evenly among the elements equal to the result */
        int dims[MP_MAXDIM], k = a->ndims;
        for (int i = 0; i < k; i++) dims[i] = a->dims[i];
        if (!k)
            for (int i = 0; i < nd0; i++) dims[k++] = i;
        TRY(expand_back(&t, y, a, nd0, sh0));
        TRY(mp_tensor_binary(&u, MP_TENSOR_EQ, x0, &t));
        mp_tensor_free(&t);
        if (nd0) TRY(mp_tensor_reduce_dims(&t, &u, dims, k, 1, MP_TENSOR_RSUM));
        else TRY(mp_tensor_clone(&t, &u));
        TRY(mp_tensor_expand(&w, &t, nd0, sh0));
        mp_tensor_free(&t);
        TRY(expand_back(&t, g, a, nd0, sh0));
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        for (size_t e = 0; e < gi[0].numel; e++)
            gi[0].data[e] = u.data[e] != 0 ? (float)((double)t.data[e] / w.data[e]) : 0.0f;
        break;
    }
    case MP_AG_EXT_DIM: {
        int64_t outer, n, inner;
        split_dim(nd0, sh0, a->d, &outer, &n, &inner);
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t r = o * inner + i;
                gi[0].data[(o * n + a->idx[r]) * inner + i] += g->data[r];
            }
        break;
    }
    case MP_AG_SOFTMAX: case MP_AG_LOG_SOFTMAX: {
        int64_t outer, n, inner;
        split_dim(nd0, sh0, a->d, &outer, &n, &inner);
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        const float *gg = g->data, *yv = y->data;
        float *o = gi[0].data;
        for (int64_t p = 0; p < outer; p++)
            for (int64_t i = 0; i < inner; i++) {
                size_t b = (size_t)(p * n * inner + i);
                double sum = 0;
                for (int64_t j = 0; j < n; j++) {
                    size_t e = b + (size_t)(j * inner);
                    sum += a->op == MP_AG_SOFTMAX ? (double)gg[e] * yv[e] : (double)gg[e];
                }
                for (int64_t j = 0; j < n; j++) {
                    size_t e = b + (size_t)(j * inner);
                    o[e] = (float)(a->op == MP_AG_SOFTMAX ? yv[e] * (gg[e] - sum) : gg[e] - exp((double)yv[e]) * sum);
                }
            }
        break;
    }
    case MP_AG_MATMUL: s = matmul_rule(nd, g, gi); break;
    case MP_AG_DOT:
        for (int i = 0; i < 2; i++)
            if (nd->in[i]) TRY(mp_tensor_binary(&gi[i], MP_TENSOR_MUL, &nd->sv[1 - i], g));
        break;
    case MP_AG_VIEW: TRY(mp_tensor_reshape(&gi[0], g, nd0, sh0)); break;
    case MP_AG_PERMUTE: {
        int inv[MP_MAXDIM];
        for (int i = 0; i < nd0; i++) inv[a->perm[i]] = i;
        TRY(mp_tensor_permute(&gi[0], g, inv));
        break;
    }
    case MP_AG_SLICE: case MP_AG_INDEX_SELECT: {
        int64_t outer, n, inner, cnt = a->op == MP_AG_SLICE ? a->count : (int64_t)a->nidx;
        split_dim(nd0, sh0, a->d, &outer, &n, &inner);
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        const float *src = g->data;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < cnt; k++, src += inner) {
                int64_t row = a->op == MP_AG_SLICE ? a->first + k * a->step : a->idx[k];
                float *dst = gi[0].data + (o * n + row) * inner;
                for (int64_t i = 0; i < inner; i++) dst[i] += src[i];
            }
        break;
    }
    case MP_AG_GATHER: { /* scatter-add g (the index's shape) into t's shape */
        int64_t st0[MP_MAXDIM], pos[MP_MAXDIM] = {0};
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        int64_t stride = 1;
        for (int i = nd0 - 1; i >= 0; i--) st0[i] = stride, stride *= sh0[i];
        for (size_t e = 0; e < g->numel; e++) {
            int64_t off = 0;
            for (int i = 0; i < nd0; i++) off += (i == a->d ? a->idx[e] : pos[i]) * st0[i];
            gi[0].data[off] += g->data[e];
            for (int i = g->ndim - 1; i >= 0; i--) { /* odometer over the index's shape */
                if (++pos[i] < g->shape[i]) break;
                pos[i] = 0;
            }
        }
        break;
    }
    case MP_AG_CAT: {
        int64_t off = 0;
        for (int i = 0; i < nd->n; i++) {
            int64_t len = nd->ishape[i][a->d];
            if (nd->in[i]) TRY(mp_tensor_slice(&gi[i], g, a->d, off, len, 1));
            off += len;
        }
        break;
    }
    case MP_AG_STACK:
        for (int i = 0; i < nd->n; i++) {
            if (!nd->in[i]) continue;
            TRY(mp_tensor_slice(&t, g, a->d, i, 1, 1));
            TRY(mp_tensor_reshape(&gi[i], &t, nd->indim[i], nd->ishape[i]));
            mp_tensor_free(&t);
        }
        break;
    case MP_AG_WHERE:
        for (int i = 1; i < 3; i++) {
            if (!nd->in[i]) continue;
            TRY(mp_tensor_where(&t, x0, i == 1 ? g : &t0, i == 1 ? &t0 : g));
            TRY(sum_to(&gi[i], &t, nd->indim[i], nd->ishape[i]));
            mp_tensor_free(&t);
        }
        break;
    case MP_AG_MASKED_FILL: TRY(mp_tensor_masked_fill(&gi[0], g, x1, 0.0f)); break;
    case MP_AG_NORM: { /* g sign(x) |x|^(p-1) / |x|_p^(p-1) */
        TRY(expand_back(&t, y, a, nd0, sh0));
        TRY(expand_back(&u, g, a, nd0, sh0));
        TRY(mp_tensor_init(&gi[0], nd0, sh0));
        for (size_t e = 0; e < gi[0].numel; e++) {
            double xv = x0->data[e], nv = t.data[e], r = 0;
            if (xv != 0 && nv != 0) {
                double sg = xv > 0 ? 1 : -1;
                r = a->p == 1 ? sg : a->p == 2 ? xv / nv : sg * pow(fabs(xv) / nv, a->p - 1);
            }
            gi[0].data[e] = (float)(u.data[e] * r);
        }
        break;
    }
    default: s = mp_error(MP_ERR_ARG, "backward: no rule for op %d", (int)a->op); break;
    }
done:
    mp_tensor_free(&t);
    mp_tensor_free(&u);
    mp_tensor_free(&w);
    return s;
}

/* ---- backward ---- */

/* *dst += src (a copy of src when dst is empty: gradients never alias). */
static mp_status accumulate(mp_tensor *dst, const mp_tensor *src) {
    if (!dst->st) return mp_tensor_clone(dst, src);
    if (dst->numel != src->numel) return mp_error(MP_ERR_ARG, "backward: internal error (gradient shapes differ)");
    for (size_t e = 0; e < dst->numel; e++) dst->data[e] += src->data[e];
    return MP_OK;
}

mp_status mp_ag_backward(mp_ag_node *root, const mp_tensor *grad, int retain) {
    static unsigned epoch;
    char s1[128], s2[128];
    mp_tensor_shape_str(root->ndim, root->shape, s1, sizeof s1);
    if (!grad) {
        size_t n = 1;
        for (int i = 0; i < root->ndim; i++) n *= (size_t)root->shape[i];
        if (n != 1)
            return mp_error(MP_ERR_ARG, "backward: the output %s has %zu elements, not one: give a gradient of its "
                                        "shape (backward(g))", s1, n);
    } else if (grad->ndim != root->ndim || memcmp(grad->shape, root->shape, (size_t)grad->ndim * sizeof *grad->shape)) {
        mp_tensor_shape_str(grad->ndim, grad->shape, s2, sizeof s2);
        return mp_error(MP_ERR_ARG, "backward: the gradient %s differs from the output's shape %s", s2, s1);
    }
    /* the nodes in post-order (inputs before the ops that use them), by an iterative DFS */
    typedef struct { mp_ag_node *nd; int i; } frame;
    size_t cap = 64, nst = 0, nord = 0;
    frame *stk = malloc(cap * sizeof *stk);
    mp_ag_node **ord = malloc(cap * sizeof *ord);
    size_t ocap = cap;
    mp_status s = MP_OK;
    if (!stk || !ord) {
        s = mp_error(MP_ERR_NOMEM, "out of memory in backward");
        goto out;
    }
    epoch++;
    root->mark = epoch;
    stk[nst++] = (frame){root, 0};
    while (nst) {
        frame *f = &stk[nst - 1];
        if (f->i < f->nd->n) {
            mp_ag_node *c = f->nd->in[f->i++];
            if (!c || c->mark == epoch) continue;
            c->mark = epoch;
            if (nst == cap) {
                frame *ns = realloc(stk, 2 * cap * sizeof *stk);
                if (!ns) { s = mp_error(MP_ERR_NOMEM, "out of memory in backward"); goto out; }
                stk = ns, cap *= 2;
            }
            stk[nst++] = (frame){c, 0};
        } else {
            if (nord == ocap) {
                mp_ag_node **no = realloc(ord, 2 * ocap * sizeof *ord);
                if (!no) { s = mp_error(MP_ERR_NOMEM, "out of memory in backward"); goto out; }
                ord = no, ocap *= 2;
            }
            ord[nord++] = f->nd;
            nst--;
        }
    }
    /* the checks, before anything is accumulated */
    for (size_t k = 0; k < nord; k++) {
        mp_ag_node *nd = ord[k];
        if (nd->a.op == MP_AG_LEAF) continue;
        if (nd->freed) {
            mp_tensor_shape_str(nd->ndim, nd->shape, s2, sizeof s2);
            s = mp_error(MP_ERR_ARG, "backward: the graph was already freed by an earlier backward (op %s, output %s): "
                                     "pass {retain_graph = true} to the first backward to go through it twice",
                         mp_ag_op_name(nd->a.op), s2);
            goto out;
        }
        for (int j = 0; j <= nd->n; j++) {
            if (!nd->sreg[j]) continue;
            reg *r = reg_find(nd->sv[j].st);
            if (r && r->ver != nd->sver[j]) {
                mp_tensor_shape_str(nd->sv[j].ndim, nd->sv[j].shape, s2, sizeof s2);
                s = mp_error(MP_ERR_ARG, "backward: a Tensor %s that %s saved for its gradient (its %s) was modified "
                                         "by an in-place op after %s used it; modify a clone, or recompute",
                             s2, mp_ag_op_name(nd->a.op), j == nd->n ? "output" : "input", mp_ag_op_name(nd->a.op));
                goto out;
            }
        }
    }
    if (grad) s = mp_tensor_clone(&root->g, grad);
    else s = mp_tensor_init_full(&root->g, root->ndim, root->shape, 1.0f);
    for (size_t k = nord; s == MP_OK && k-- > 0;) {
        mp_ag_node *nd = ord[k];
        if (!nd->g.st) continue;
        if (nd->a.op == MP_AG_LEAF) {
            s = accumulate(&nd->grad, &nd->g);
        } else {
            mp_tensor *gi = calloc((size_t)nd->n, sizeof *gi);
            if (!gi) s = mp_error(MP_ERR_NOMEM, "out of memory in backward");
            if (s == MP_OK) s = rule(nd, &nd->g, gi);
            for (int i = 0; gi && i < nd->n; i++) {
                if (s == MP_OK && nd->in[i] && gi[i].st) s = accumulate(&nd->in[i]->g, &gi[i]);
                mp_tensor_free(&gi[i]);
            }
            free(gi);
        }
        mp_tensor_free(&nd->g);
    }
    for (size_t k = 0; k < nord; k++) {
        mp_tensor_free(&ord[k]->g);
        if (s == MP_OK && !retain && ord[k]->a.op != MP_AG_LEAF) {
            release_saved(ord[k]);
            ord[k]->freed = 1;
        }
    }
out:
    free(stk);
    free(ord);
    return s;
}
