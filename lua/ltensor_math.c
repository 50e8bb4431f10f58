/* ltensor_math.c — the numeric methods of the Lua Tensor (see lua/ltensor.h):
 * add/sub/mul/div/pow with torch's broadcasting (new tensors, operators and the
 * in-place `_` forms), elementwise functions (exp, log, sqrt, abs, tanh, relu,
 * sigmoid, clamp), softmax and log_softmax along a dim, reductions over all
 * elements or ANY dim with keepdim (sum, mean, max, min, argmax, argmin, var,
 * std, norm), topk, cosine similarity and allclose. Every sum accumulates in
 * double. Index results are 1-based, as nested Lua tables of integers. */
#include "ltensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- broadcasting ---- */

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_FIRST } binop;
static const char *const op_name[] = {"add", "sub", "mul", "div", "pow", "expand"};

/* Shape of a (op) b under torch's rules (dims aligned from the right, an extent
 * 1 or a missing dim stretches); raises naming fn and both shapes. */
static int broadcast_shape(lua_State *L, const char *fn, int na, const int64_t *sa, int nb, const int64_t *sb,
                           int64_t *out) {
    int nd = na > nb ? na : nb;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - na), ib = i - (nd - nb);
        int64_t ea = ia >= 0 ? sa[ia] : 1, eb = ib >= 0 ? sb[ib] : 1;
        if (ea != eb && ea != 1 && eb != 1) {
            char s1[128], s2[128];
            mp_lua_tensor_shape_str(na, sa, s1, sizeof s1);
            mp_lua_tensor_shape_str(nb, sb, s2, sizeof s2);
            luaL_error(L, "%s: shapes %s and %s differ and do not broadcast (dim %d of the result: %d vs %d)", fn, s1,
                       s2, i + 1, (int)ea, (int)eb);
        }
        out[i] = ea == 1 ? eb : ea;
    }
    return nd;
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

static inline float apply1(binop op, float x, float y) {
    switch (op) {
    case OP_ADD: return x + y;
    case OP_SUB: return x - y;
    case OP_MUL: return x * y;
    case OP_DIV: return x / y;
    case OP_POW: return (float)pow((double)x, (double)y);
    case OP_FIRST: break;
    }
    return x;
}

/* out[i] = a[i*sa] op b[i*sb] for n elements; the common cases as plain loops
 * the compiler vectorizes. out may be a (in-place: same element). */
static void kernel(binop op, float *out, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
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
    case OP_ADD: LOOP(x + y); break;
    case OP_SUB: LOOP(x - y); break;
    case OP_MUL: LOOP(x * y); break;
    case OP_DIV: LOOP(x / y); break;
    case OP_POW: LOOP((float)pow((double)x, (double)y)); break;
    case OP_FIRST: for (int64_t i = 0; i < n; i++) out[i] = a[i * sa]; break;
    }
#undef LOOP
}

/* out (contiguous, shape[nd]) = a op b read through broadcast strides. Dims of
 * extent 1 are dropped and neighbours that are contiguous in both merged, so
 * that the inner loop runs as long as it can. */
static void bcast_apply(binop op, float *out, const float *a, const int64_t *sa_in, const float *b,
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

/* A number at idx as a 0-dim tensor on the C stack, else a Tensor or table. */
static const mp_tensor *operand(lua_State *L, int idx, mp_tensor *tmp, float *val) {
    if (lua_type(L, idx) == LUA_TNUMBER) {
        *val = (float)lua_tonumber(L, idx);
        memset(tmp, 0, sizeof *tmp);
        tmp->data = val;
        tmp->numel = 1;
        return tmp;
    }
    return mp_lua_tensor_arg(L, idx);
}

/* Pushes a new tensor a (op) b broadcast; a and b may be 0-dim temporaries. */
static mp_tensor *push_binop(lua_State *L, binop op, const char *fn, const mp_tensor *a, const mp_tensor *b) {
    int64_t shape[MP_MAXDIM], sa[MP_MAXDIM], sb[MP_MAXDIM];
    int nd = broadcast_shape(L, fn, a->ndim, a->shape, b->ndim, b->shape, shape);
    bcast_strides(a->ndim, a->shape, nd, shape, sa);
    bcast_strides(b->ndim, b->shape, nd, shape, sb);
    mp_tensor *r = mp_lua_tensor_new(L, nd, shape);
    bcast_apply(op, r->data, a->data, sa, b->data, sb, nd, shape);
    return r;
}

/* Pushes a copy of x broadcast to shape (raises naming fn when it does not). */
static mp_tensor *push_expand(lua_State *L, const char *fn, const mp_tensor *x, int nd, const int64_t *shape) {
    int64_t out[MP_MAXDIM], sx[MP_MAXDIM];
    int n2 = broadcast_shape(L, fn, x->ndim, x->shape, nd, shape, out);
    bcast_strides(x->ndim, x->shape, n2, out, sx);
    mp_tensor *r = mp_lua_tensor_new(L, n2, out);
    bcast_apply(OP_FIRST, r->data, x->data, sx, x->data, sx, n2, out);
    return r;
}

static int newop(lua_State *L, binop op) {
    mp_tensor ta, tb;
    float va, vb;
    if (lua_type(L, 1) == LUA_TNUMBER && lua_type(L, 2) == LUA_TNUMBER)
        return luaL_error(L, "Tensor arithmetic needs a Tensor operand");
    const mp_tensor *a = operand(L, 1, &ta, &va); /* a converted table stays on the stack */
    const mp_tensor *b = operand(L, 2, &tb, &vb);
    push_binop(L, op, op_name[op], a, b);
    return 1;
}

static int m_add(lua_State *L) { return newop(L, OP_ADD); }
static int m_sub(lua_State *L) { return newop(L, OP_SUB); }
static int m_mul(lua_State *L) { return newop(L, OP_MUL); }
static int m_div(lua_State *L) { return newop(L, OP_DIV); }
static int m_pow(lua_State *L) { return newop(L, OP_POW); }

/* In place on the tensor at 1 with the number or tensor/table at 2, which must
 * broadcast to t's shape. A right side that overlaps t's memory other than
 * element for element (a row of t, say) is copied first. */
static int inplace(lua_State *L, binop op, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_tensor tb;
    float vb;
    const mp_tensor *b = operand(L, 2, &tb, &vb);
    int64_t shape[MP_MAXDIM], st[MP_MAXDIM], sb[MP_MAXDIM];
    int nd = broadcast_shape(L, fn, t->ndim, t->shape, b->ndim, b->shape, shape);
    int same = nd == t->ndim;
    for (int i = 0; same && i < nd; i++) same = shape[i] == t->shape[i];
    if (!same) {
        char s1[128], s2[128];
        mp_lua_tensor_shape_str(t->ndim, t->shape, s1, sizeof s1);
        mp_lua_tensor_shape_str(b->ndim, b->shape, s2, sizeof s2);
        return luaL_error(L, "%s: the right side %s does not broadcast to the Tensor's shape %s (in place)", fn, s2, s1);
    }
    if (b != &tb && b->data != t->data && b->data < t->data + t->numel && t->data < b->data + b->numel)
        b = mp_lua_tensor_from(L, b->ndim, b->shape, b->data);
    else if (b != &tb && b->data == t->data && b->numel != t->numel)
        b = mp_lua_tensor_from(L, b->ndim, b->shape, b->data);
    bcast_strides(t->ndim, t->shape, nd, shape, st);
    bcast_strides(b->ndim, b->shape, nd, shape, sb);
    bcast_apply(op, t->data, t->data, st, b->data, sb, nd, shape);
    lua_settop(L, 1);
    return 1;
}

static int m_add_(lua_State *L) { return inplace(L, OP_ADD, "add_"); }
static int m_sub_(lua_State *L) { return inplace(L, OP_SUB, "sub_"); }
static int m_mul_(lua_State *L) { return inplace(L, OP_MUL, "mul_"); }
static int m_div_(lua_State *L) { return inplace(L, OP_DIV, "div_"); }

/* t:copy_(src): src broadcast into t (a copy first when they overlap). */
static int m_copy_(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    const mp_tensor *o = mp_lua_tensor_arg(L, 2);
    int64_t shape[MP_MAXDIM], so[MP_MAXDIM];
    int nd = broadcast_shape(L, "copy_", t->ndim, t->shape, o->ndim, o->shape, shape);
    int same = nd == t->ndim;
    for (int i = 0; same && i < nd; i++) same = shape[i] == t->shape[i];
    if (!same) {
        char s1[128], s2[128];
        mp_lua_tensor_shape_str(t->ndim, t->shape, s1, sizeof s1);
        mp_lua_tensor_shape_str(o->ndim, o->shape, s2, sizeof s2);
        return luaL_error(L, "copy_: shapes %s and %s differ (the source %s does not broadcast to %s)", s1, s2, s2, s1);
    }
    if (o->numel == t->numel) {
        if (t->numel) memmove(t->data, o->data, t->numel * sizeof(float));
    } else {
        if (o->data < t->data + t->numel && t->data < o->data + o->numel)
            o = mp_lua_tensor_from(L, o->ndim, o->shape, o->data);
        bcast_strides(o->ndim, o->shape, nd, shape, so);
        bcast_apply(OP_FIRST, t->data, o->data, so, o->data, so, nd, shape);
    }
    lua_settop(L, 1);
    return 1;
}

static int m_unm(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_tensor *r = mp_lua_tensor_new(L, t->ndim, t->shape);
    for (size_t i = 0; i < t->numel; i++) r->data[i] = -t->data[i];
    return 1;
}

/* ---- elementwise functions (computed in double, stored as float) ---- */

typedef enum { U_EXP, U_LOG, U_SQRT, U_ABS, U_TANH, U_RELU, U_SIGMOID } unop;

static double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static int unary(lua_State *L, unop k) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_tensor *r = mp_lua_tensor_new(L, t->ndim, t->shape);
    const float *x = t->data;
    float *y = r->data;
    size_t n = t->numel;
    switch (k) {
    case U_EXP: for (size_t i = 0; i < n; i++) y[i] = (float)exp(x[i]); break;
    case U_LOG: for (size_t i = 0; i < n; i++) y[i] = (float)log(x[i]); break;
    case U_SQRT: for (size_t i = 0; i < n; i++) y[i] = (float)sqrt(x[i]); break;
    case U_ABS: for (size_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case U_TANH: for (size_t i = 0; i < n; i++) y[i] = (float)tanh(x[i]); break;
    case U_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : (isnan(x[i]) ? x[i] : 0.0f); break;
    case U_SIGMOID: for (size_t i = 0; i < n; i++) y[i] = (float)sigmoid(x[i]); break;
    }
    return 1;
}

static int m_exp(lua_State *L) { return unary(L, U_EXP); }
static int m_log(lua_State *L) { return unary(L, U_LOG); }
static int m_sqrt(lua_State *L) { return unary(L, U_SQRT); }
static int m_abs(lua_State *L) { return unary(L, U_ABS); }
static int m_tanh(lua_State *L) { return unary(L, U_TANH); }
static int m_relu(lua_State *L) { return unary(L, U_RELU); }
static int m_sigmoid(lua_State *L) { return unary(L, U_SIGMOID); }

/* t:clamp(lo, hi): either bound may be nil (not both). */
static int m_clamp(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int has_lo = !lua_isnoneornil(L, 2), has_hi = !lua_isnoneornil(L, 3);
    if (!has_lo && !has_hi) return luaL_error(L, "clamp: give lo, hi or both (nil for no bound)");
    float lo = has_lo ? (float)luaL_checknumber(L, 2) : -INFINITY;
    float hi = has_hi ? (float)luaL_checknumber(L, 3) : INFINITY;
    if (lo > hi) return luaL_error(L, "clamp: lo = %f is above hi = %f", (double)lo, (double)hi);
    mp_tensor *r = mp_lua_tensor_new(L, t->ndim, t->shape);
    for (size_t i = 0; i < t->numel; i++) {
        float x = t->data[i];
        r->data[i] = x < lo ? lo : x > hi ? hi : x;
    }
    return 1;
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

/* The shape of t reduced over dim d (kept as 1 with keepdim). */
static int reduced_shape(const mp_tensor *t, int d, int keepdim, int64_t *shape) {
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i != d) shape[nd++] = t->shape[i];
        else if (keepdim) shape[nd++] = 1;
    }
    return nd;
}

/* keepdim at arg: none/nil = false, else a boolean. */
static int keepdim_arg(lua_State *L, int arg, const char *fn) {
    if (lua_isnoneornil(L, arg)) return 0;
    if (!lua_isboolean(L, arg))
        luaL_error(L, "%s: keepdim must be a boolean, got %s", fn, luaL_typename(L, arg));
    return lua_toboolean(L, arg);
}

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN } reduce_kind;

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

/* t:sum/mean/max/min/argmax/argmin([dim [, keepdim]]). Without dim: a number
 * (argmax: the 1-based flat index). With dim: a Tensor (a number when the
 * result has no dims); max/min also return the indices, argmax/argmin only
 * them, as nested tables of 1-based integers. */
static int reduction(lua_State *L, reduce_kind k, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int is_arg = k == R_ARGMAX || k == R_ARGMIN, want_max = k == R_MAX || k == R_ARGMAX;
    if (lua_isnoneornil(L, 2)) {
        if (!lua_isnone(L, 3)) keepdim_arg(L, 3, fn); /* checked, but meaningless without a dim */
        if (t->numel == 0 && k != R_SUM) return luaL_error(L, "%s of an empty Tensor", fn);
        if (k == R_SUM || k == R_MEAN) {
            double s = sum_strided(t->data, (int64_t)t->numel, 1);
            lua_pushnumber(L, k == R_MEAN ? s / (double)t->numel : s);
        } else {
            int64_t i = arg_extreme(t->data, (int64_t)t->numel, 1, want_max);
            if (is_arg) lua_pushinteger(L, (lua_Integer)i + 1);
            else lua_pushnumber(L, t->data[i]);
        }
        return 1;
    }
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    int keep = keepdim_arg(L, 3, fn);
    split3 s = split_at(t, d);
    if (s.n == 0 && k != R_SUM) return luaL_error(L, "%s over dim %d, which is empty", fn, d + 1);
    int64_t shape[MP_MAXDIM];
    int nd = reduced_shape(t, d, keep, shape);
    size_t m = (size_t)(s.outer * s.inner);
    if (m == 0) s.outer = 0; /* no result: the loops below must not run over a huge outer extent */
    if (is_arg || k == R_MAX || k == R_MIN) {
        int64_t *idx = lua_newuserdatauv(L, (m ? m : 1) * sizeof(int64_t), 0);
        int ui = lua_gettop(L);
        mp_tensor *r = is_arg ? NULL : mp_lua_tensor_new(L, nd, shape);
        for (int64_t o = 0; o < s.outer; o++)
            for (int64_t i = 0; i < s.inner; i++) {
                const float *p = t->data + o * s.n * s.inner + i;
                int64_t j = arg_extreme(p, s.n, s.inner, want_max);
                idx[o * s.inner + i] = j;
                if (r) r->data[o * s.inner + i] = p[j * s.inner];
            }
        if (r && nd == 0) {
            lua_pushnumber(L, r->data[0]);
            lua_replace(L, -2);
        }
        mp_lua_tensor_push_indices(L, idx, nd, shape);
        if (is_arg) return 1;
        lua_remove(L, ui);
        return 2;
    }
    mp_tensor *r = mp_lua_tensor_new(L, nd, shape);
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            double v = sum_strided(t->data + o * s.n * s.inner + i, s.n, s.inner);
            r->data[o * s.inner + i] = (float)(k == R_MEAN ? v / (double)s.n : v);
        }
    if (nd == 0) lua_pushnumber(L, r->data[0]);
    return 1;
}

static int m_sum(lua_State *L) { return reduction(L, R_SUM, "sum"); }
static int m_mean(lua_State *L) { return reduction(L, R_MEAN, "mean"); }
static int m_max(lua_State *L) { return reduction(L, R_MAX, "max"); }
static int m_min(lua_State *L) { return reduction(L, R_MIN, "min"); }
static int m_argmax(lua_State *L) { return reduction(L, R_ARGMAX, "argmax"); }
static int m_argmin(lua_State *L) { return reduction(L, R_ARGMIN, "argmin"); }

/* Variance of n values at stride s (two passes in double); correction 1 or 0. */
static double var_strided(const float *d, int64_t n, int64_t s, int unbiased) {
    double mean = sum_strided(d, n, s) / (double)n, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = d[i * s] - mean;
        acc += e * e;
    }
    return acc / (double)(n - (unbiased ? 1 : 0));
}

/* t:var([dim [, opts]]) / t:std(...): opts already checked by the caller. */
static int var_std(lua_State *L, int is_std, const char *fn) {
    /* the options first: reading them may run Lua (an __index), which may close the Tensor */
    int unbiased = mp_lua_opt_bool(L, 3, fn, "unbiased", 1);
    int keep = mp_lua_opt_bool(L, 3, fn, "keepdim", 0);
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (lua_isnoneornil(L, 2)) {
        if (t->numel == 0) return luaL_error(L, "%s of an empty Tensor", fn);
        double v = var_strided(t->data, (int64_t)t->numel, 1, unbiased);
        lua_pushnumber(L, is_std ? sqrt(v) : v);
        return 1;
    }
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    split3 s = split_at(t, d);
    if (s.n == 0) return luaL_error(L, "%s over dim %d, which is empty", fn, d + 1);
    int64_t shape[MP_MAXDIM];
    int nd = reduced_shape(t, d, keep, shape);
    mp_tensor *r = mp_lua_tensor_new(L, nd, shape);
    if (r->numel == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            double v = var_strided(t->data + o * s.n * s.inner + i, s.n, s.inner, unbiased);
            r->data[o * s.inner + i] = (float)(is_std ? sqrt(v) : v);
        }
    if (nd == 0) lua_pushnumber(L, r->data[0]);
    return 1;
}

static int m_var(lua_State *L) {
    static const char *const known[] = {"unbiased", "keepdim", NULL};
    mp_lua_opt_check(L, 3, "Tensor:var", known);
    return var_std(L, 0, "Tensor:var");
}

static int m_std(lua_State *L) {
    static const char *const known[] = {"unbiased", "keepdim", NULL};
    mp_lua_opt_check(L, 3, "Tensor:std", known);
    return var_std(L, 1, "Tensor:std");
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

/* t:norm([p [, dim [, keepdim]]]): p = 2 (default), 1, math.huge, any p > 0, 0. */
static int m_norm(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    double p = luaL_optnumber(L, 2, 2.0);
    if (isnan(p) || (p < 0 && !isinf(p))) return luaL_error(L, "norm: p = %f is not a norm (0, p > 0 or +-inf)", p);
    if (lua_isnoneornil(L, 3)) {
        lua_pushnumber(L, pnorm_strided(t->data, (int64_t)t->numel, 1, p));
        return 1;
    }
    int d = mp_lua_tensor_dim(L, 3, t->ndim, 0, "norm");
    int keep = keepdim_arg(L, 4, "norm");
    split3 s = split_at(t, d);
    int64_t shape[MP_MAXDIM];
    int nd = reduced_shape(t, d, keep, shape);
    mp_tensor *r = mp_lua_tensor_new(L, nd, shape);
    if (r->numel == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++)
            r->data[o * s.inner + i] = (float)pnorm_strided(t->data + o * s.n * s.inner + i, s.n, s.inner, p);
    if (nd == 0) lua_pushnumber(L, r->data[0]);
    return 1;
}

/* ---- softmax ---- */

/* t:softmax(dim) / t:log_softmax(dim): exp(x - max) / sum, the sum in double. */
static int softmax(lua_State *L, int logsm, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "%s: give the dim (-1: the last)", fn);
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    split3 s = split_at(t, d);
    mp_tensor *r = mp_lua_tensor_new(L, t->ndim, t->shape);
    if (r->numel == 0) return 1; /* outer may be huge with nothing to compute */
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *x = t->data + o * s.n * s.inner + i;
            float *y = r->data + o * s.n * s.inner + i;
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
    return 1;
}

static int m_softmax(lua_State *L) { return softmax(L, 0, "softmax"); }
static int m_log_softmax(lua_State *L) { return softmax(L, 1, "log_softmax"); }

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

/* t:topk(k [, dim [, largest]]) -> values (Tensor, dim of extent k, sorted),
 * indices (nested tables of 1-based integers). */
static int m_topk(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    lua_Integer k = luaL_checkinteger(L, 2);
    int d = lua_isnoneornil(L, 3) ? t->ndim - 1 : mp_lua_tensor_dim(L, 3, t->ndim, 0, "topk");
    if (t->ndim == 0) return luaL_error(L, "topk: a 0-dim Tensor has no dim");
    int largest = 1;
    if (!lua_isnoneornil(L, 4)) {
        if (!lua_isboolean(L, 4)) return luaL_error(L, "topk: largest must be a boolean, got %s", luaL_typename(L, 4));
        largest = lua_toboolean(L, 4);
    }
    split3 s = split_at(t, d);
    if (k < 0 || k > s.n)
        return luaL_error(L, "topk: k = %I is out of range (0..%I) for dim %d", k, (lua_Integer)s.n, d + 1);
    int64_t shape[MP_MAXDIM];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = k;
    size_t m = (size_t)(s.outer * k * s.inner);
    vi *buf = lua_newuserdatauv(L, (size_t)(s.n && m ? s.n : 1) * sizeof(vi), 0);
    int64_t *idx = lua_newuserdatauv(L, (m ? m : 1) * sizeof(int64_t), 0);
    int ub = lua_gettop(L) - 1;
    mp_tensor *r = mp_lua_tensor_new(L, t->ndim, shape);
    if (r->numel == 0) s.outer = 0; /* nothing to select: no loop over a huge outer extent */
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *x = t->data + o * s.n * s.inner + i;
            for (int64_t j = 0; j < s.n; j++) buf[j] = (vi){x[j * s.inner], j};
            qsort(buf, (size_t)s.n, sizeof *buf, largest ? cmp_desc : cmp_asc);
            for (int64_t j = 0; j < k; j++) {
                size_t at = (size_t)((o * k + j) * s.inner + i);
                r->data[at] = buf[j].v;
                idx[at] = buf[j].i;
            }
        }
    mp_lua_tensor_push_indices(L, idx, t->ndim, shape);
    lua_remove(L, ub);
    lua_remove(L, ub);
    return 2;
}

/* ---- comparisons of two tensors ---- */

/* Cosine similarity of a and b (broadcast) along dim d: a.b / (max(|a|, eps)
 * max(|b|, eps)), eps = 1e-8, in double. */
static int cos_sim(lua_State *L, int ia, int ib, int idim, const char *fn) {
    lua_settop(L, idim); /* converted tables are pushed above the arguments */
    const mp_tensor *a0 = mp_lua_tensor_arg(L, ia), *b0 = mp_lua_tensor_arg(L, ib);
    int64_t shape[MP_MAXDIM];
    int nd = broadcast_shape(L, fn, a0->ndim, a0->shape, b0->ndim, b0->shape, shape);
    if (nd == 0) return luaL_error(L, "%s: needs Tensors of at least 1 dim", fn);
    int d = lua_isnoneornil(L, idim) ? nd - 1 : mp_lua_tensor_dim(L, idim, nd, 0, fn);
    const mp_tensor *a = push_expand(L, fn, a0, nd, shape), *b = push_expand(L, fn, b0, nd, shape);
    split3 s = split_at(a, d);
    int64_t rs[MP_MAXDIM];
    int rn = reduced_shape(a, d, 0, rs);
    mp_tensor *r = mp_lua_tensor_new(L, rn, rs);
    if (r->numel == 0) s.outer = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *x = a->data + o * s.n * s.inner + i, *y = b->data + o * s.n * s.inner + i;
            double xy = 0, xx = 0, yy = 0;
            for (int64_t j = 0; j < s.n; j++) {
                double u = x[j * s.inner], v = y[j * s.inner];
                xy += u * v;
                xx += u * u;
                yy += v * v;
            }
            r->data[o * s.inner + i] = (float)(xy / (fmax(sqrt(xx), 1e-8) * fmax(sqrt(yy), 1e-8)));
        }
    if (rn == 0) lua_pushnumber(L, r->data[0]);
    return 1;
}

static int m_cos_sim(lua_State *L) { return cos_sim(L, 1, 2, 3, "cos_sim"); }
static int l_cosine_similarity(lua_State *L) { return cos_sim(L, 1, 2, 3, "mp.cosine_similarity"); }

/* t:allclose(u [, rtol [, atol]]): |t - u| <= atol + rtol |u| everywhere
 * (broadcast; rtol 1e-5, atol 1e-8 as torch; a NaN is never close). */
static int m_allclose(lua_State *L) {
    lua_settop(L, 4);
    const mp_tensor *a0 = mp_lua_tensor_check(L, 1), *b0 = mp_lua_tensor_arg(L, 2);
    double rtol = luaL_optnumber(L, 3, 1e-5), atol = luaL_optnumber(L, 4, 1e-8);
    if (!(rtol >= 0) || !(atol >= 0)) return luaL_error(L, "allclose: rtol and atol must be >= 0");
    int64_t shape[MP_MAXDIM];
    int nd = broadcast_shape(L, "allclose", a0->ndim, a0->shape, b0->ndim, b0->shape, shape);
    const mp_tensor *a = push_expand(L, "allclose", a0, nd, shape), *b = push_expand(L, "allclose", b0, nd, shape);
    int ok = 1;
    for (size_t i = 0; ok && i < a->numel; i++) {
        double x = a->data[i], y = b->data[i];
        ok = x == y || fabs(x - y) <= atol + rtol * fabs(y);
    }
    lua_pushboolean(L, ok);
    return 1;
}

static const luaL_Reg math_methods[] = {
    {"add", m_add},         {"sub", m_sub},       {"mul", m_mul},         {"div", m_div},
    {"pow", m_pow},         {"add_", m_add_},     {"sub_", m_sub_},       {"mul_", m_mul_},
    {"div_", m_div_},       {"copy_", m_copy_},   {"exp", m_exp},         {"log", m_log},
    {"sqrt", m_sqrt},       {"abs", m_abs},       {"tanh", m_tanh},       {"relu", m_relu},
    {"sigmoid", m_sigmoid}, {"clamp", m_clamp},   {"sum", m_sum},         {"mean", m_mean},
    {"max", m_max},         {"min", m_min},       {"argmax", m_argmax},   {"argmin", m_argmin},
    {"var", m_var},         {"std", m_std},       {"norm", m_norm},       {"softmax", m_softmax},
    {"log_softmax", m_log_softmax}, {"topk", m_topk}, {"cos_sim", m_cos_sim}, {"allclose", m_allclose},
    {NULL, NULL},
};

static const luaL_Reg math_metamethods[] = {
    {"__add", m_add}, {"__sub", m_sub}, {"__mul", m_mul}, {"__div", m_div}, {"__pow", m_pow}, {"__unm", m_unm},
    {NULL, NULL},
};

void mp_lua_tensor_math_methods(lua_State *L) { luaL_setfuncs(L, math_methods, 0); }
void mp_lua_tensor_math_metamethods(lua_State *L) { luaL_setfuncs(L, math_metamethods, 0); }

void mp_lua_tensor_math_functions(lua_State *L) {
    lua_pushcfunction(L, l_cosine_similarity);
    lua_setfield(L, -2, "cosine_similarity");
}
