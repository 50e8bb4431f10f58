/* ltensor_ops.c — the shape methods of the Lua Tensor (see lua/ltensor.h):
 * permute/transpose/t (contiguous copies), view/unsqueeze/squeeze/flatten
 * (views), narrow/slice/index_select along any dim (views along dim 1 where
 * the rows stay contiguous, copies otherwise), mp.cat/mp.stack, matmul and
 * batched matmul (mp_tensor_matmul, OpenBLAS's sgemm), item/contiguous,
 * and the constructors mp.arange/mp.linspace/mp.eye. Dims and indices are
 * 1-based, negative ones counting from the end; the work is done by the C
 * tensor core (analyze/tensor.h), these functions check and convert the Lua
 * arguments. */
#include "ltensor.h"
#include "lautograd.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static void shape_err(lua_State *L, const char *fn, const char *what, const mp_tensor *a, const mp_tensor *b) {
    char s1[128], s2[128];
    mp_lua_tensor_shape_str(a->ndim, a->shape, s1, sizeof s1);
    mp_lua_tensor_shape_str(b->ndim, b->shape, s2, sizeof s2);
    luaL_error(L, "%s: shapes %s and %s %s", fn, s1, s2, what);
}

/* ---- permutations (copies) ---- */

/* Pushes a contiguous copy of t with dim i of the result = dim perm[i] of t. */
static mp_tensor *push_permuted(lua_State *L, const mp_tensor *t, const int *perm) {
    mp_tensor *o = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_permute(o, t, perm), NULL);
    if (mp_lua_ag_want(L, 1, 0)) { /* t is the Tensor at 1 */
        mp_ag_args a = {.op = MP_AG_PERMUTE};
        for (int i = 0; i < t->ndim; i++) a.perm[i] = perm[i];
        int in[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &a, 1, in, x, "permute");
    }
    return o;
}

/* t:permute{d1, d2, ...} or t:permute(d1, d2, ...) */
static int m_permute(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int nd = t->ndim, perm[MP_MAXDIM], used[MP_MAXDIM] = {0};
    int from_table = lua_istable(L, 2);
    lua_Integer given = from_table ? (lua_Integer)lua_rawlen(L, 2) : lua_gettop(L) - 1; /* raw: no metamethod runs */
    if (given != nd)
        return luaL_error(L, "bad argument #1 to 'permute' (%I dims given for a %d-dim Tensor)", given, nd);
    for (int i = 0; i < nd; i++) {
        int d;
        if (from_table) {
            lua_rawgeti(L, 2, i + 1);
            const char *what = lua_pushfstring(L, "%s[%d]", mp_lua_argname(L, 2, "dims"), i + 1);
            d = (int)mp_lua_index_at(L, -3, "permute", what, nd, 0);
            lua_pop(L, 3);
        } else {
            d = (int)mp_lua_arg_index(L, i + 2, "permute", "dim", nd, 0);
        }
        if (used[d])
            return luaL_error(L, "bad argument #1 to 'permute' (not a permutation of 1..%d: dim %d twice)", nd, d + 1);
        used[d] = 1;
        perm[i] = d;
    }
    push_permuted(L, t, perm);
    return 1;
}

/* t:transpose(d1, d2): a contiguous copy with dims d1 and d2 swapped. */
static int m_transpose(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int a = mp_lua_tensor_dim(L, 2, t->ndim, 0, "transpose"), b = mp_lua_tensor_dim(L, 3, t->ndim, 0, "transpose");
    int perm[MP_MAXDIM];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    push_permuted(L, t, perm);
    return 1;
}

/* t:t(): the transpose of a 2-D Tensor (a copy); a copy of a 0-D or 1-D one. */
static int m_t(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (t->ndim > 2) {
        char s[128];
        mp_lua_tensor_shape_str(t->ndim, t->shape, s, sizeof s);
        return luaL_error(L, "t: needs a Tensor of at most 2 dims, got %s (use transpose(d1, d2))", s);
    }
    int perm[2] = {1, 0};
    if (t->ndim < 2) perm[0] = 0;
    push_permuted(L, t, perm);
    return 1;
}

/* ---- views that change the shape only ---- */

static int m_unsqueeze(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 1, "unsqueeze");
    mp_lua_tensor_try(L, mp_tensor_unsqueeze(mp_lua_tensor_push(L), t, d), "unsqueeze");
    mp_lua_tensor_keep(L, 1);
    mp_lua_ag_record2(L, MP_AG_VIEW, 1, t, 0, NULL, "unsqueeze");
    return 1;
}

static int m_squeeze(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int only = lua_isnoneornil(L, 2) ? -1 : mp_lua_tensor_dim(L, 2, t->ndim, 0, "squeeze");
    mp_lua_tensor_try(L, mp_tensor_squeeze(mp_lua_tensor_push(L), t, only), "squeeze");
    mp_lua_tensor_keep(L, 1);
    mp_lua_ag_record2(L, MP_AG_VIEW, 1, t, 0, NULL, "squeeze");
    return 1;
}

/* t:flatten([start [, end]]): dims start..end merged into one (a view). */
static int m_flatten(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int s = 0, e = 0;
    if (t->ndim > 0) {
        s = lua_isnoneornil(L, 2) ? 0 : mp_lua_tensor_dim(L, 2, t->ndim, 0, "flatten");
        e = lua_isnoneornil(L, 3) ? t->ndim - 1 : mp_lua_tensor_dim(L, 3, t->ndim, 0, "flatten");
    }
    lua_settop(L, 1);
    mp_lua_tensor_try(L, mp_tensor_flatten(mp_lua_tensor_push(L), t, s, e), "flatten");
    mp_lua_tensor_keep(L, 1);
    mp_lua_ag_record2(L, MP_AG_VIEW, 1, t, 0, NULL, "flatten");
    return 1;
}

static int m_contiguous(lua_State *L) {
    mp_lua_tensor_check(L, 1);
    lua_settop(L, 1);
    return 1;
}

static int m_item(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (t->numel != 1) {
        char s[128];
        mp_lua_tensor_shape_str(t->ndim, t->shape, s, sizeof s);
        return luaL_error(L, "item: the Tensor %s has %I elements, not one", s, (lua_Integer)t->numel);
    }
    lua_pushnumber(L, t->data[0]);
    return 1;
}

/* ---- selecting along a dim ---- */

/* Pushes t's rows first, first+step, ... (count of them) along d: a view when
 * d is the first dim and step is 1, else a copy. t is the Tensor at 1. */
static void push_range(lua_State *L, const mp_tensor *t, int d, int64_t first, int64_t count, int64_t step) {
    mp_lua_tensor_try(L, mp_tensor_slice(mp_lua_tensor_push(L), t, d, first, count, step), NULL);
    mp_lua_tensor_keep(L, 1);
    if (mp_lua_ag_want(L, 1, 0)) {
        mp_ag_args a = {.op = MP_AG_SLICE, .d = d, .first = first, .count = count, .step = step};
        int in[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &a, 1, in, x, "slice");
    }
}

/* t:narrow(start, len) along dim 1, or t:narrow(dim, start, len) as torch. */
static int m_narrow(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int three = lua_gettop(L) >= 4, a = three ? 3 : 2;
    if (t->ndim < 1) return luaL_error(L, "narrow on a 0-dim Tensor");
    int d = three ? mp_lua_tensor_dim(L, 2, t->ndim, 0, "narrow") : 0;
    int64_t n = t->shape[d];
    /* start n + 1 (just past the end) takes length 0 only */
    int64_t j = mp_lua_arg_index(L, a, "narrow", "start", n, 1);
    lua_Integer len = mp_lua_arg_int(L, a + 1, "narrow", "length", 0, n - j);
    push_range(L, t, d, j, len, 1);
    return 1;
}

/* t:slice(dim, start [, stop [, step]]): rows start..stop (inclusive, 1-based,
 * negative from the end; stop defaults to the last) every step. */
static int m_slice(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, "slice");
    int64_t n = t->shape[d];
    /* start: a position, or n + 1 (an empty slice); stop: start - 1 (empty)
     * .. n, or the same counted from the end */
    int64_t j0 = mp_lua_arg_index(L, 3, "slice", "start", n, 1), j1 = n - 1;
    if (!lua_isnoneornil(L, 4)) {
        const char *what = mp_lua_argname(L, 4, "stop");
        lua_Integer e = mp_lua_int2_at(L, 4, "slice", what, j0 - 1 - n, -1, j0, n);
        lua_pop(L, 1);
        j1 = e < 0 ? n + e : e - 1;
    }
    lua_Integer step = mp_lua_arg_optint(L, 5, "slice", "step", 1, 1, LUA_MAXINTEGER);
    int64_t len = j1 - j0 + 1;
    push_range(L, t, d, j0, len ? 1 + (len - 1) / step : 0, step); /* step may be huge: no len + step */
    return 1;
}

/* t:index_select(dim, idx): idx a 1-D Tensor or table of 1-based indices. */
static int m_index_select(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, "index_select");
    int64_t n = t->shape[d], count;
    mp_tensor *it = mp_lua_tensor_test(L, 3);
    if (it) {
        if (it->ndim != 1) return luaL_error(L, "index_select: the indices must be a 1-D Tensor or a list");
        count = (int64_t)it->numel;
    } else {
        luaL_checktype(L, 3, LUA_TTABLE);
        count = (int64_t)lua_rawlen(L, 3);
    }
    int64_t *idx = lua_newuserdatauv(L, (size_t)(count ? count : 1) * sizeof(int64_t), 0);
    const char *arg = mp_lua_argname(L, 3, "indices");
    for (int64_t k = 0; k < count; k++) {
        if (it) lua_pushnumber(L, it->data[k]);
        else lua_rawgeti(L, 3, (lua_Integer)k + 1);
        const char *what = lua_pushfstring(L, "%s[%I]", arg, (lua_Integer)k + 1);
        idx[k] = mp_lua_index_at(L, -2, "index_select", what, n, 0);
        lua_pop(L, 2);
    }
    mp_lua_tensor_try(L, mp_tensor_index_select(mp_lua_tensor_push(L), t, d, idx, count), "index_select");
    if (mp_lua_ag_want(L, 1, 0)) {
        mp_ag_args a = {.op = MP_AG_INDEX_SELECT, .d = d, .idx = idx, .nidx = (size_t)count};
        int in[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &a, 1, in, x, "index_select");
    }
    lua_remove(L, -2); /* the indices */
    return 1;
}

/* ---- cat and stack ---- */

/* Converts the list at arg into Tensors at consecutive stack slots; returns
 * their count and the first slot. */
static int list_arg(lua_State *L, int arg, const char *fn, int *first) {
    luaL_checktype(L, arg, LUA_TTABLE);
    int n = (int)lua_rawlen(L, arg);
    if (n == 0) luaL_error(L, "%s: the list of Tensors is empty", fn);
    luaL_checkstack(L, 2 * n + 4, "too many Tensors");
    *first = lua_gettop(L) + 1;
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, arg, i);
        int at = lua_gettop(L);
        if (!mp_lua_tensor_test(L, at) && !lua_istable(L, at))
            luaL_error(L, "%s: entry %d is a %s, expected a Tensor", fn, i, luaL_typename(L, at));
        mp_lua_tensor_arg(L, at); /* a table converts: the Tensor is pushed above it */
        if (lua_gettop(L) > at) lua_replace(L, at);
    }
    return n;
}

/* The n Tensors at stack slots first.. as an array of pointers (a userdata
 * pushed on the stack). */
static const mp_tensor **list_ptrs(lua_State *L, int first, int n) {
    const mp_tensor **ts = lua_newuserdatauv(L, (size_t)n * sizeof *ts, 0);
    for (int i = 0; i < n; i++) ts[i] = mp_lua_tensor_check(L, first + i);
    return ts;
}

/* Records cat/stack of the n Tensors at first.. into the result at the top. */
static void record_list(lua_State *L, mp_ag_op op, int first, int n, const mp_tensor **ts, int d, const char *fn) {
    int any = 0;
    for (int i = 0; i < n && !any; i++) any = mp_lua_ag_want(L, first + i, 0);
    if (!any) return;
    int *in = lua_newuserdatauv(L, (size_t)n * sizeof *in, 0);
    for (int i = 0; i < n; i++) in[i] = first + i;
    lua_insert(L, -2); /* the result back on top */
    mp_ag_args a = {.op = op, .d = d};
    mp_lua_ag_record(L, &a, n, in, ts, fn);
    lua_remove(L, -2);
}

/* mp.cat(list [, dim]): joined along dim (default 1), a copy. */
static int l_cat(lua_State *L) {
    lua_settop(L, 2);
    int first, n = list_arg(L, 1, "cat", &first);
    const mp_tensor *t0 = mp_lua_tensor_check(L, first);
    if (t0->ndim == 0) return luaL_error(L, "cat: entry 1 is a 0-dim Tensor");
    int d = lua_isnoneornil(L, 2) ? 0 : mp_lua_tensor_dim(L, 2, t0->ndim, 0, "cat");
    const mp_tensor **ts = list_ptrs(L, first, n);
    mp_lua_tensor_try(L, mp_tensor_cat(mp_lua_tensor_push(L), ts, n, d), "cat");
    record_list(L, MP_AG_CAT, first, n, ts, d, "cat");
    return 1;
}

/* mp.stack(list [, dim]): equal shapes joined along a new dim (default 1). */
static int l_stack(lua_State *L) {
    lua_settop(L, 2);
    int first, n = list_arg(L, 1, "stack", &first);
    const mp_tensor *t0 = mp_lua_tensor_check(L, first);
    if (t0->ndim == MP_MAXDIM) return luaL_error(L, "stack: a Tensor has at most %d dims", MP_MAXDIM);
    int d = lua_isnoneornil(L, 2) ? 0 : mp_lua_tensor_dim(L, 2, t0->ndim, 1, "stack");
    const mp_tensor **ts = list_ptrs(L, first, n);
    mp_lua_tensor_try(L, mp_tensor_stack(mp_lua_tensor_push(L), ts, n, d), "stack");
    record_list(L, MP_AG_STACK, first, n, ts, d, "stack");
    return 1;
}

/* ---- matmul ---- */

/* a @ b with torch.matmul's rules (mp_tensor_matmul); 1-D . 1-D a number
 * (mp_tensor_dot). */
static int matmul(lua_State *L, const char *fn) {
    const mp_tensor *a = mp_lua_tensor_arg(L, 1), *b = mp_lua_tensor_arg(L, 2);
    if (a->ndim == 1 && b->ndim == 1) {
        if (a->shape[0] != b->shape[0]) shape_err(L, fn, "differ (1-D matmul is a dot product)", a, b);
        double s;
        mp_lua_tensor_try(L, mp_tensor_dot(a, b, &s), fn);
        if (mp_lua_ag_want(L, 1, 2)) { /* a 0-dim Tensor, to backward through */
            float f = (float)s;
            mp_lua_tensor_from(L, 0, NULL, &f);
            mp_lua_ag_record2(L, MP_AG_DOT, 1, a, 2, b, fn);
            return 1;
        }
        lua_pushnumber(L, s);
        return 1;
    }
    mp_lua_tensor_try(L, mp_tensor_matmul(mp_lua_tensor_push(L), a, b), fn);
    mp_lua_ag_record2(L, MP_AG_MATMUL, 1, a, 2, b, fn);
    return 1;
}

static int m_matmul(lua_State *L) { return matmul(L, "matmul"); }
static int l_matmul(lua_State *L) { return matmul(L, "mp.matmul"); }

/* a:mm(b): torch.mm, 2-D × 2-D only. */
static int m_mm(lua_State *L) {
    const mp_tensor *a = mp_lua_tensor_check(L, 1), *b = mp_lua_tensor_arg(L, 2);
    if (a->ndim != 2 || b->ndim != 2) shape_err(L, "mm", "are not both 2-D (use matmul)", a, b);
    return matmul(L, "mm");
}

/* ---- ranges ---- */

/* mp.arange(end) or mp.arange(start, end [, step]): start, start + step, ...
 * up to but excluding end, as torch.arange (values, not indices). */
static int l_arange(lua_State *L) {
    lua_Number s = 0, e, step = 1;
    if (lua_isnoneornil(L, 2)) {
        e = luaL_checknumber(L, 1);
    } else {
        s = luaL_checknumber(L, 1);
        e = luaL_checknumber(L, 2);
        step = luaL_optnumber(L, 3, 1);
    }
    mp_lua_tensor_try(L, mp_tensor_arange(mp_lua_tensor_push(L), s, e, step), "mp.arange");
    return 1;
}

/* mp.linspace(start, end, steps): steps evenly spaced values, both ends included. */
static int l_linspace(lua_State *L) {
    lua_Number s = luaL_checknumber(L, 1), e = luaL_checknumber(L, 2);
    lua_Integer n = mp_lua_arg_int(L, 3, "mp.linspace", "steps", 0, (lua_Integer)MP_TENSOR_NUMEL_MAX);
    mp_lua_tensor_try(L, mp_tensor_linspace(mp_lua_tensor_push(L), s, e, (int64_t)n), "mp.linspace");
    return 1;
}

/* mp.eye(n [, m]) */
static int l_eye(lua_State *L) {
    const lua_Integer max = (lua_Integer)MP_TENSOR_NUMEL_MAX;
    lua_Integer n = mp_lua_arg_int(L, 1, "mp.eye", "n", 0, max), m = mp_lua_arg_optint(L, 2, "mp.eye", "m", n, 0, max);
    mp_lua_tensor_try(L, mp_tensor_eye(mp_lua_tensor_push(L), (int64_t)n, (int64_t)m), "mp.eye");
    return 1;
}

static const luaL_Reg ops_methods[] = {
    {"permute", m_permute},       {"transpose", m_transpose}, {"t", m_t},
    {"unsqueeze", m_unsqueeze},   {"squeeze", m_squeeze},     {"flatten", m_flatten},
    {"contiguous", m_contiguous}, {"item", m_item},           {"narrow", m_narrow},
    {"slice", m_slice},           {"index_select", m_index_select}, {"matmul", m_matmul},
    {"mm", m_mm},                 {NULL, NULL},
};

void mp_lua_tensor_ops_methods(lua_State *L) { luaL_setfuncs(L, ops_methods, 0); }

void mp_lua_tensor_ops_functions(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"matmul", l_matmul}, {"cat", l_cat}, {"stack", l_stack}, {"arange", l_arange},
        {"linspace", l_linspace}, {"eye", l_eye}, {NULL, NULL},
    };
    luaL_setfuncs(L, fns, 0);
}
