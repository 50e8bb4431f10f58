/* ltensor_math.c — the numeric methods of the Lua Tensor (see lua/ltensor.h):
 * add/sub/mul/div/pow with torch's broadcasting (new tensors, operators and the
 * in-place `_` forms), elementwise functions (exp, log, sqrt, abs, tanh, relu,
 * sigmoid, clamp), softmax and log_softmax along a dim, reductions over all
 * elements, ANY dim or (sum, mean, max, min) a list of dims, with keepdim
 * (sum, mean, max, min, argmax, argmin, var,
 * std, norm), topk, cosine similarity and allclose. Every sum accumulates in
 * double. Index results are 1-based, as nested Lua tables of integers. The
 * work is done by the C tensor core (analyze/tensor.h, analyze/tensor_math.c);
 * these functions check and convert the Lua arguments. */
#include "ltensor.h"
#include "lautograd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- broadcasting ---- */

typedef mp_tensor_binop binop;
static const char *const op_name[] = {"add", "sub", "mul", "div", "pow"};

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

static int newop(lua_State *L, binop op) {
    mp_tensor ta, tb;
    float va, vb;
    if (lua_type(L, 1) == LUA_TNUMBER && lua_type(L, 2) == LUA_TNUMBER)
        return luaL_error(L, "Tensor arithmetic needs a Tensor operand");
    const mp_tensor *a = operand(L, 1, &ta, &va); /* a converted table stays on the stack */
    const mp_tensor *b = operand(L, 2, &tb, &vb);
    mp_lua_tensor_try(L, mp_tensor_binary(mp_lua_tensor_push(L), op, a, b), op_name[op]);
    mp_lua_ag_record2(L, (mp_ag_op)(MP_AG_ADD + op), 1, a, 2, b, op_name[op]);
    return 1;
}

static int m_add(lua_State *L) { return newop(L, MP_TENSOR_ADD); }
static int m_sub(lua_State *L) { return newop(L, MP_TENSOR_SUB); }
static int m_mul(lua_State *L) { return newop(L, MP_TENSOR_MUL); }
static int m_div(lua_State *L) { return newop(L, MP_TENSOR_DIV); }
static int m_pow(lua_State *L) { return newop(L, MP_TENSOR_POW); }

/* In place on the tensor at 1 with the number or tensor/table at 2, which must
 * broadcast to t's shape. A right side that overlaps t's memory other than
 * element for element (a row of t, say) is copied first. */
static int inplace(lua_State *L, binop op, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_tensor tb;
    float vb;
    const mp_tensor *b = operand(L, 2, &tb, &vb);
    mp_lua_ag_inplace(L, 1, fn);
    mp_lua_tensor_try(L, mp_tensor_binary_(t, op, b), fn);
    lua_settop(L, 1);
    return 1;
}

static int m_add_(lua_State *L) { return inplace(L, MP_TENSOR_ADD, "add_"); }
static int m_sub_(lua_State *L) { return inplace(L, MP_TENSOR_SUB, "sub_"); }
static int m_mul_(lua_State *L) { return inplace(L, MP_TENSOR_MUL, "mul_"); }
static int m_div_(lua_State *L) { return inplace(L, MP_TENSOR_DIV, "div_"); }

/* t:copy_(src): src broadcast into t (a copy first when they overlap). */
static int m_copy_(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    const mp_tensor *o = mp_lua_tensor_arg(L, 2);
    mp_lua_ag_inplace(L, 1, "copy_");
    mp_lua_tensor_try(L, mp_tensor_copy_(t, o), "copy_");
    lua_settop(L, 1);
    return 1;
}

static int m_unm(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_tensor_try(L, mp_tensor_neg(mp_lua_tensor_push(L), t), NULL);
    mp_lua_ag_record2(L, MP_AG_NEG, 1, t, 0, NULL, "neg");
    return 1;
}

/* ---- elementwise functions (computed in double, stored as float) ---- */

typedef mp_tensor_unop unop;

static int unary(lua_State *L, unop k) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_tensor_try(L, mp_tensor_unary(mp_lua_tensor_push(L), k, t), NULL);
    mp_lua_ag_record2(L, (mp_ag_op)(MP_AG_EXP + k), 1, t, 0, NULL, mp_ag_op_name((mp_ag_op)(MP_AG_EXP + k)));
    return 1;
}

static int m_exp(lua_State *L) { return unary(L, MP_TENSOR_EXP); }
static int m_log(lua_State *L) { return unary(L, MP_TENSOR_LOG); }
static int m_sqrt(lua_State *L) { return unary(L, MP_TENSOR_SQRT); }
static int m_abs(lua_State *L) { return unary(L, MP_TENSOR_ABS); }
static int m_tanh(lua_State *L) { return unary(L, MP_TENSOR_TANH); }
static int m_relu(lua_State *L) { return unary(L, MP_TENSOR_RELU); }
static int m_sigmoid(lua_State *L) { return unary(L, MP_TENSOR_SIGMOID); }

/* t:clamp(lo, hi): either bound may be nil (not both). */
static int m_clamp(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int has_lo = !lua_isnoneornil(L, 2), has_hi = !lua_isnoneornil(L, 3);
    if (!has_lo && !has_hi) return luaL_error(L, "clamp: give lo, hi or both (nil for no bound)");
    float lo = has_lo ? (float)luaL_checknumber(L, 2) : -INFINITY;
    float hi = has_hi ? (float)luaL_checknumber(L, 3) : INFINITY;
    if (lo > hi) return luaL_error(L, "clamp: lo = %f is above hi = %f", (double)lo, (double)hi);
    mp_lua_tensor_try(L, mp_tensor_clamp(mp_lua_tensor_push(L), t, lo, hi), "clamp");
    if (mp_lua_ag_want(L, 1, 0)) {
        mp_ag_args a = {.op = MP_AG_CLAMP, .lo = lo, .hi = hi};
        int idx[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &a, 1, idx, x, "clamp");
    }
    return 1;
}

/* ---- reductions ---- */

/* keepdim at arg: none/nil = false, a boolean, or an options table {keepdim = b}. */
static int keepdim_arg(lua_State *L, int arg, const char *fn) {
    static const char *const known[] = {"keepdim", NULL};
    if (lua_isnoneornil(L, arg)) return 0;
    if (lua_istable(L, arg)) {
        mp_lua_opt_check(L, arg, fn, known);
        return mp_lua_opt_bool(L, arg, fn, "keepdim", 0);
    }
    if (!lua_isboolean(L, arg))
        luaL_error(L, "%s: keepdim must be a boolean, got %s (or an options table {keepdim = b})", fn,
                   luaL_typename(L, arg));
    return lua_toboolean(L, arg);
}

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN } reduce_kind;

/* The extent of dim d of t (the reduced one). */
static int64_t dim_extent(const mp_tensor *t, int d) { return t->shape[d]; }

static const mp_ag_op reduce_op[] = {MP_AG_SUM, MP_AG_MEAN, MP_AG_AMAX, MP_AG_AMIN};

/* Records the reduction k of the Tensor t at 1 over dims[n] (n 0: all) into
 * the result at the top. */
static void record_reduce(lua_State *L, mp_ag_op op, const mp_tensor *t, const int *dims, int n, int keep,
                          const char *fn) {
    mp_ag_args a = {.op = op, .ndims = n, .keepdim = keep};
    for (int i = 0; i < n; i++) a.dims[i] = dims[i];
    int idx[1] = {1};
    const mp_tensor *x[1] = {t};
    mp_lua_ag_record(L, &a, 1, idx, x, fn);
}

/* Pushes a 0-dim Tensor holding v. */
static void push_0dim(lua_State *L, double v) {
    float f = (float)v;
    mp_lua_tensor_from(L, 0, NULL, &f);
}

/* Replaces the Tensor at the top by its only element when it has no dims. */
static void number_if_0dim(lua_State *L) {
    const mp_tensor *r = lua_touserdata(L, -1);
    if (r->ndim == 0) lua_pushnumber(L, r->data[0]);
}

/* t:sum/mean/max/min(dims [, keepdim]) with dims a list: over those dims at
 * once (mp_tensor_reduce_dims); max/min give the values only (torch.amax). */
static int reduce_list(lua_State *L, reduce_kind k, const char *fn) {
    static const mp_tensor_reduce kinds[] = {MP_TENSOR_RSUM, MP_TENSOR_RMEAN, MP_TENSOR_RMAX, MP_TENSOR_RMIN};
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int nd = t->ndim, dims[MP_MAXDIM];
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2); /* raw: no metamethod runs */
    if (n == 0) return luaL_error(L, "%s: the list of dims is empty", fn);
    if (n > nd) return luaL_error(L, "%s: %I dims listed for a %d-dim Tensor", fn, n, nd);
    for (int i = 0; i < (int)n; i++) {
        lua_rawgeti(L, 2, i + 1);
        const char *what = lua_pushfstring(L, "%s[%d]", mp_lua_argname(L, 2, "dims"), i + 1);
        dims[i] = (int)mp_lua_index_at(L, -3, fn, what, nd, 0);
        lua_pop(L, 3);
    }
    int keep = keepdim_arg(L, 3, fn);
    t = mp_lua_tensor_check(L, 1); /* reading the options may run Lua that closed it */
    mp_lua_tensor_try(L, mp_tensor_reduce_dims(mp_lua_tensor_push(L), t, dims, (int)n, keep, kinds[k]), fn);
    if (mp_lua_ag_want(L, 1, 0)) { /* stays a Tensor (0-dim too), to backward through */
        record_reduce(L, reduce_op[k], t, dims, (int)n, keep, fn);
        return 1;
    }
    number_if_0dim(L);
    return 1;
}

/* t:sum/mean/max/min/argmax/argmin([dim [, keepdim]]). Without dim: a number
 * (argmax: the 1-based flat index). With dim: a Tensor (a number when the
 * result has no dims); max/min also return the indices, argmax/argmin only
 * them, as nested tables of 1-based integers. */
static int reduction(lua_State *L, reduce_kind k, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int is_arg = k == R_ARGMAX || k == R_ARGMIN, want_max = k == R_MAX || k == R_ARGMAX;
    if (!is_arg && lua_istable(L, 2)) return reduce_list(L, k, fn);
    if (lua_isnoneornil(L, 2)) {
        if (!lua_isnone(L, 3)) keepdim_arg(L, 3, fn); /* checked, but meaningless without a dim */
        t = mp_lua_tensor_check(L, 1);                  /* reading the options may run Lua that closed it */
        if (t->numel == 0 && k != R_SUM) return luaL_error(L, "%s of an empty Tensor", fn);
        if (!is_arg && mp_lua_ag_want(L, 1, 0)) { /* a 0-dim Tensor, to backward through */
            double s;
            size_t i;
            if (k == R_SUM || k == R_MEAN) mp_lua_tensor_try(L, mp_tensor_sum_all(t, k == R_MEAN, &s), NULL);
            else mp_lua_tensor_try(L, mp_tensor_argext_all(t, want_max, &i), NULL);
            push_0dim(L, k == R_SUM || k == R_MEAN ? s : t->data[i]);
            record_reduce(L, reduce_op[k], t, NULL, 0, 0, fn);
            return 1;
        }
        if (k == R_SUM || k == R_MEAN) {
            double s;
            mp_lua_tensor_try(L, mp_tensor_sum_all(t, k == R_MEAN, &s), NULL);
            lua_pushnumber(L, s);
        } else {
            size_t i;
            mp_lua_tensor_try(L, mp_tensor_argext_all(t, want_max, &i), NULL);
            if (is_arg) lua_pushinteger(L, (lua_Integer)i + 1);
            else lua_pushnumber(L, t->data[i]);
        }
        return 1;
    }
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    int keep = keepdim_arg(L, 3, fn);
    t = mp_lua_tensor_check(L, 1); /* reading the options may run Lua that closed it */
    if (dim_extent(t, d) == 0 && k != R_SUM) return luaL_error(L, "%s over dim %d, which is empty", fn, d + 1);
    int64_t shape[MP_MAXDIM];
    int nd = mp_tensor_reduced_shape(t, d, keep, shape);
    if (is_arg || k == R_MAX || k == R_MIN) {
        size_t m = 1;
        for (int i = 0; i < nd; i++) m *= (size_t)shape[i]; /* fits: at most t's numel */
        int64_t *idx = lua_newuserdatauv(L, (m ? m : 1) * sizeof(int64_t), 0);
        int ui = lua_gettop(L);
        mp_tensor *r = is_arg ? NULL : mp_lua_tensor_push(L);
        mp_lua_tensor_try(L, mp_tensor_ext_dim(r, idx, t, d, keep, want_max), NULL);
        if (r && mp_lua_ag_want(L, 1, 0)) { /* the values stay a Tensor (0-dim too) */
            mp_ag_args a = {.op = MP_AG_EXT_DIM, .d = d, .idx = idx, .nidx = m};
            int in[1] = {1};
            const mp_tensor *x[1] = {t};
            mp_lua_ag_record(L, &a, 1, in, x, fn);
        } else if (r && nd == 0) {
            lua_pushnumber(L, r->data[0]);
            lua_replace(L, -2);
        }
        mp_lua_tensor_push_indices(L, idx, nd, shape);
        if (is_arg) return 1;
        lua_remove(L, ui);
        return 2;
    }
    mp_lua_tensor_try(L, mp_tensor_sum_dim(mp_lua_tensor_push(L), t, d, keep, k == R_MEAN), NULL);
    if (mp_lua_ag_want(L, 1, 0)) {
        record_reduce(L, reduce_op[k], t, &d, 1, keep, fn);
        return 1;
    }
    number_if_0dim(L);
    return 1;
}

static int m_sum(lua_State *L) { return reduction(L, R_SUM, "sum"); }
static int m_mean(lua_State *L) { return reduction(L, R_MEAN, "mean"); }
static int m_max(lua_State *L) { return reduction(L, R_MAX, "max"); }
static int m_min(lua_State *L) { return reduction(L, R_MIN, "min"); }
static int m_argmax(lua_State *L) { return reduction(L, R_ARGMAX, "argmax"); }
static int m_argmin(lua_State *L) { return reduction(L, R_ARGMIN, "argmin"); }

/* t:var([dim [, opts]]) / t:std(...): opts already checked by the caller. */
static int var_std(lua_State *L, int is_std, const char *fn) {
    /* the options first: reading them may run Lua (an __index), which may close the Tensor */
    int unbiased = mp_lua_opt_bool(L, 3, fn, "unbiased", 1);
    int keep = mp_lua_opt_bool(L, 3, fn, "keepdim", 0);
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, fn);
    if (lua_isnoneornil(L, 2)) {
        if (t->numel == 0) return luaL_error(L, "%s of an empty Tensor", fn);
        double v;
        mp_lua_tensor_try(L, mp_tensor_var_all(t, unbiased, is_std, &v), NULL);
        lua_pushnumber(L, v);
        return 1;
    }
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    if (dim_extent(t, d) == 0) return luaL_error(L, "%s over dim %d, which is empty", fn, d + 1);
    mp_lua_tensor_try(L, mp_tensor_var_dim(mp_lua_tensor_push(L), t, d, keep, unbiased, is_std), NULL);
    number_if_0dim(L);
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

/* t:norm([p [, dim [, keepdim]]]): p = 2 (default), 1, math.huge, any p > 0, 0. */
static int m_norm(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    double p = luaL_optnumber(L, 2, 2.0);
    if (isnan(p) || (p < 0 && !isinf(p))) return luaL_error(L, "norm: p = %f is not a norm (0, p > 0 or +-inf)", p);
    int track = mp_lua_ag_want(L, 1, 0);
    mp_ag_args a = {.op = MP_AG_NORM, .p = p};
    int in[1] = {1};
    const mp_tensor *x[1] = {t};
    if (lua_isnoneornil(L, 3)) {
        double v;
        mp_lua_tensor_try(L, mp_tensor_norm_all(t, p, &v), "norm");
        if (track) {
            push_0dim(L, v);
            mp_lua_ag_record(L, &a, 1, in, x, "norm");
            return 1;
        }
        lua_pushnumber(L, v);
        return 1;
    }
    int d = mp_lua_tensor_dim(L, 3, t->ndim, 0, "norm");
    int keep = keepdim_arg(L, 4, "norm");
    t = mp_lua_tensor_check(L, 1); /* reading the options may run Lua that closed it */
    mp_lua_tensor_try(L, mp_tensor_norm_dim(mp_lua_tensor_push(L), t, p, d, keep), "norm");
    if (track) {
        a.ndims = 1, a.dims[0] = d, a.keepdim = keep;
        x[0] = t = mp_lua_tensor_check(L, 1);
        mp_lua_ag_record(L, &a, 1, in, x, "norm");
        return 1;
    }
    number_if_0dim(L);
    return 1;
}

/* ---- softmax ---- */

/* t:softmax(dim) / t:log_softmax(dim): exp(x - max) / sum, the sum in double. */
static int softmax(lua_State *L, int logsm, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "%s: give the dim (-1: the last)", fn);
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    mp_lua_tensor_try(L, mp_tensor_softmax(mp_lua_tensor_push(L), t, d, logsm), fn);
    if (mp_lua_ag_want(L, 1, 0)) {
        mp_ag_args a = {.op = logsm ? MP_AG_LOG_SOFTMAX : MP_AG_SOFTMAX, .d = d};
        int in[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &a, 1, in, x, fn);
    }
    return 1;
}

static int m_softmax(lua_State *L) { return softmax(L, 0, "softmax"); }
static int m_log_softmax(lua_State *L) { return softmax(L, 1, "log_softmax"); }

/* ---- topk ---- */

/* t:topk(k [, dim [, largest]]) -> values (Tensor, dim of extent k, sorted),
 * indices (nested tables of 1-based integers). */
static int m_topk(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, "topk");
    if (t->ndim == 0) return luaL_error(L, "topk: a 0-dim Tensor has no dim");
    int d = lua_isnoneornil(L, 3) ? t->ndim - 1 : mp_lua_tensor_dim(L, 3, t->ndim, 0, "topk");
    lua_Integer k = mp_lua_arg_int(L, 2, "topk", "k", 0, dim_extent(t, d));
    int largest = 1;
    if (!lua_isnoneornil(L, 4)) {
        if (!lua_isboolean(L, 4)) return luaL_error(L, "topk: largest must be a boolean, got %s", luaL_typename(L, 4));
        largest = lua_toboolean(L, 4);
    }
    int64_t shape[MP_MAXDIM];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = k;
    size_t m = (size_t)k;
    for (int i = 0; i < t->ndim; i++)
        if (i != d) m *= (size_t)t->shape[i]; /* fits: at most t's numel */
    int64_t *idx = lua_newuserdatauv(L, (m ? m : 1) * sizeof(int64_t), 0);
    int ub = lua_gettop(L);
    mp_lua_tensor_try(L, mp_tensor_topk(mp_lua_tensor_push(L), idx, t, k, d, largest), "topk");
    mp_lua_tensor_push_indices(L, idx, t->ndim, shape);
    lua_remove(L, ub);
    return 2;
}

/* ---- comparisons of two tensors ---- */

/* Cosine similarity of a and b (broadcast) along dim d: a.b / (max(|a|, eps)
 * max(|b|, eps)), eps = 1e-8, in double. */
static int cos_sim(lua_State *L, int ia, int ib, int idim, const char *fn) {
    lua_settop(L, idim); /* converted tables are pushed above the arguments */
    mp_lua_ag_refuse(L, ia, ib, fn);
    const mp_tensor *a = mp_lua_tensor_arg(L, ia), *b = mp_lua_tensor_arg(L, ib);
    int64_t shape[MP_MAXDIM];
    int nd;
    mp_lua_tensor_try(L, mp_tensor_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shape), fn);
    if (nd == 0) return luaL_error(L, "%s: needs Tensors of at least 1 dim", fn);
    int d = lua_isnoneornil(L, idim) ? nd - 1 : mp_lua_tensor_dim(L, idim, nd, 0, fn);
    mp_tensor *r = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_cos_sim(r, a, b, d), fn);
    if (r->ndim == 0) lua_pushnumber(L, r->data[0]);
    return 1;
}

static int m_cos_sim(lua_State *L) { return cos_sim(L, 1, 2, 3, "cos_sim"); }
static int l_cosine_similarity(lua_State *L) { return cos_sim(L, 1, 2, 3, "mp.cosine_similarity"); }

/* t:allclose(u [, rtol [, atol]]): |t - u| <= atol + rtol |u| everywhere
 * (broadcast; rtol 1e-5, atol 1e-8 as torch; a NaN is never close). */
static int m_allclose(lua_State *L) {
    lua_settop(L, 4);
    const mp_tensor *a = mp_lua_tensor_check(L, 1), *b = mp_lua_tensor_arg(L, 2);
    double rtol = luaL_optnumber(L, 3, 1e-5), atol = luaL_optnumber(L, 4, 1e-8);
    if (!(rtol >= 0) || !(atol >= 0)) return luaL_error(L, "allclose: rtol and atol must be >= 0");
    int ok;
    mp_lua_tensor_try(L, mp_tensor_allclose(a, b, rtol, atol, &ok), "allclose");
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
