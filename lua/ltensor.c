/* ltensor.c — the Lua Tensor type of module `mp` (metatable "mechprobe.Tensor"),
 * a binding of the C tensor core analyze/tensor.h: the userdata holds the
 * mp_tensor (float32, row-major, up to MP_MAXDIM dims, on a reference-counted
 * storage shared by a Tensor and every view derived from it, however
 * indirectly, invalidated once for all of them when the memory goes: a model's
 * parameters, a hook's activation); 1-based indices (negative ones count from
 * the end). Constructors mp.tensor/zeros/ones/full, element access, views, the
 * helpers the other Tensor files share (lua/ltensor.h), the metatable, and
 * t:save() through io/h5io. Shape ops, matmul and ranges are in
 * lua/ltensor_ops.c; arithmetic, elementwise functions and reductions in
 * lua/ltensor_math.c; masks, gather, sort, svd and random tensors in
 * lua/ltensor_index.c. Every tensor is contiguous: views only select or narrow
 * leading dims, or reshape. */
#include "ltensor.h"
#include "lautograd.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"

void mp_lua_tensor_try(lua_State *L, mp_status st, const char *fn) {
    if (st == MP_OK) return;
    if (fn) luaL_error(L, "%s: %s", fn, mp_last_error());
    luaL_error(L, "%s", mp_last_error());
}

/* Raises the error for a tensor that is not valid, with the reason its data went. */
static int invalid_error(lua_State *L, const mp_tensor *t) {
    mp_lua_tensor_try(L, mp_tensor_check_valid(t), NULL);
    return 0;
}

/* ---- storage and userdata ---- */

void mp_lua_storage_release(mp_storage *st) { mp_storage_release(st); }

void mp_lua_storage_invalidate(mp_storage *st, const char *why) { mp_storage_invalidate(st, why); }

static int valid(const mp_tensor *t) { return mp_tensor_valid(t); }

static void ensure_metatable(lua_State *L);

/* A new userdata with the Tensor metatable; its user value 1 is what keeps
 * the memory it views alive (the model of a parameter view), nil otherwise. */
static mp_tensor *push_raw(lua_State *L) {
    mp_lua_tensor_ud *u = lua_newuserdatauv(L, sizeof *u, 1); /* the tensor, then its autograd node */
    memset(u, 0, sizeof *u);
    mp_tensor *t = &u->t;
    ensure_metatable(L);
    lua_setmetatable(L, -2);
    return t;
}

mp_tensor *mp_lua_tensor_push(lua_State *L) { return push_raw(L); }

mp_storage *mp_lua_storage_external(lua_State *L, float *data, size_t n) {
    mp_storage *st;
    mp_lua_tensor_try(L, mp_storage_external(&st, data, n), NULL);
    return st;
}

mp_tensor *mp_lua_tensor_new(lua_State *L, int ndim, const int64_t *shape) {
    mp_tensor *t = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_init(t, ndim, shape), NULL);
    return t;
}

mp_tensor *mp_lua_tensor_from(lua_State *L, int ndim, const int64_t *shape, const float *data) {
    mp_tensor *t = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_init_from(t, ndim, shape, data), NULL);
    return t;
}

mp_tensor *mp_lua_tensor_on(lua_State *L, mp_storage *st, size_t off, int ndim, const int64_t *shape) {
    mp_tensor *t = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_on(t, st, off, ndim, shape), NULL);
    return t;
}

void mp_lua_tensor_keep(lua_State *L, int pidx) {
    pidx = lua_absindex(L, pidx);
    const mp_tensor *parent = lua_touserdata(L, pidx), *t = lua_touserdata(L, -1);
    if (t->st && t->st == parent->st) {
        lua_getiuservalue(L, pidx, 1);
        lua_setiuservalue(L, -2, 1);
    }
}

/* A view of the (valid) Tensor at pidx: `off` floats in, with the given shape;
 * it shares the parent's storage and keeps what the parent keeps alive. */
mp_tensor *mp_lua_tensor_view(lua_State *L, int pidx, size_t off, int ndim, const int64_t *shape) {
    pidx = lua_absindex(L, pidx);
    const mp_tensor *parent = mp_lua_tensor_check(L, pidx);
    mp_tensor *v = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_view(v, parent, off, ndim, shape), NULL);
    lua_getiuservalue(L, pidx, 1);
    lua_setiuservalue(L, -2, 1);
    return v;
}

mp_tensor *mp_lua_tensor_test(lua_State *L, int idx) {
    mp_tensor *t = luaL_testudata(L, idx, MP_TENSOR_MT);
    if (t && !valid(t)) invalid_error(L, t);
    return t;
}

mp_tensor *mp_lua_tensor_check(lua_State *L, int idx) {
    mp_tensor *t = luaL_testudata(L, idx, MP_TENSOR_MT);
    if (!t) luaL_typeerror(L, idx, "Tensor");
    if (!valid(t)) invalid_error(L, t);
    return t;
}

/* ---- nested tables ---- */

/* Shape of a nested table at idx, following first elements. */
static int table_shape(lua_State *L, int idx, int64_t *shape) {
    int ndim = 0;
    lua_pushvalue(L, idx);
    while (lua_type(L, -1) == LUA_TTABLE) {
        if (ndim == MP_MAXDIM) luaL_error(L, "nested table deeper than %d levels", MP_MAXDIM);
        shape[ndim++] = (int64_t)lua_rawlen(L, -1);
        if (lua_rawlen(L, -1) == 0) break;
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    return ndim;
}

static void fill_from_table(lua_State *L, int arg, int idx, int depth, int ndim, const int64_t *shape, float **p,
                            char *path, size_t plen) {
    size_t n = lua_rawlen(L, idx);
    if ((int64_t)n != shape[depth])
        luaL_argerror(L, arg, lua_pushfstring(L, "ragged table: %s has %d entries, expected %d", plen ? path : "the table",
                                              (int)n, (int)shape[depth]));
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i);
        char sub[128];
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        if (depth + 1 < ndim) {
            if (!lua_istable(L, -1))
                luaL_argerror(L, arg, lua_pushfstring(L, "ragged table: %s is a %s, expected a table", sub,
                                                      luaL_typename(L, -1)));
            fill_from_table(L, arg, lua_gettop(L), depth + 1, ndim, shape, p, sub, strlen(sub));
        } else {
            int ok;
            lua_Number v = lua_tonumberx(L, -1, &ok);
            if (!ok)
                luaL_argerror(L, arg, lua_pushfstring(L, "%s is a %s, expected a number", sub, luaL_typename(L, -1)));
            *(*p)++ = (float)v;
        }
        lua_pop(L, 1);
    }
}

/* Pushes a tensor built from the nested table at idx. */
static mp_tensor *tensor_from_table(lua_State *L, int idx, int arg) {
    int64_t shape[MP_MAXDIM];
    idx = lua_absindex(L, idx);
    int ndim = table_shape(L, idx, shape);
    mp_tensor *t = mp_lua_tensor_new(L, ndim, shape);
    float *p = t->data;
    char path[2] = "";
    if (ndim > 0) fill_from_table(L, arg, idx, 0, ndim, shape, &p, path, 0);
    return t;
}

mp_tensor *mp_lua_tensor_arg(lua_State *L, int idx) {
    mp_tensor *t = mp_lua_tensor_test(L, idx);
    if (t) return t;
    if (lua_istable(L, idx)) return tensor_from_table(L, idx, idx);
    luaL_typeerror(L, idx, "Tensor or table");
    return NULL;
}

/* Most empty tables a Tensor with no elements may become as nested tables
 * (t:totable(), topk's indices): {n, 0} is n empty tables, and n may be huge. */
#define EMPTY_TABLES_MAX ((size_t)1 << 24)

/* Raises unless a Tensor of that shape with no elements makes at most
 * EMPTY_TABLES_MAX tables (one per index of the dims before the first 0). */
static void check_empty_tables(lua_State *L, int ndim, const int64_t *shape, const char *fn) {
    size_t count = 0, level = 1;
    for (int i = 0; i < ndim && level; i++) {
        count += level; /* the tables at depth i */
        if (count > EMPTY_TABLES_MAX ||
            (shape[i] && (mp_mul_size(level, (size_t)shape[i], &level) || level > EMPTY_TABLES_MAX))) {
            char s[160];
            mp_lua_tensor_shape_str(ndim, shape, s, sizeof s);
            luaL_error(L, "%s: the Tensor %s has no elements, but as nested tables it would be more than %d "
                          "empty tables", fn, s, (int)EMPTY_TABLES_MAX);
        }
        if (!shape[i]) level = 0;
    }
}

static void push_totable(lua_State *L, const float *d, int ndim, const int64_t *shape) {
    lua_createtable(L, shape[0] > INT_MAX ? 0 : (int)shape[0], 0);
    if (ndim == 1) {
        for (int64_t i = 0; i < shape[0]; i++) {
            lua_pushnumber(L, d[i]);
            lua_rawseti(L, -2, i + 1);
        }
        return;
    }
    size_t stride = 1;
    for (int i = 1; i < ndim; i++) stride *= (size_t)shape[i];
    for (int64_t i = 0; i < shape[0]; i++) {
        push_totable(L, d + (size_t)i * stride, ndim - 1, shape + 1);
        lua_rawseti(L, -2, i + 1);
    }
}

/* ---- helpers ---- */

static void shape_str(const mp_tensor *t, char *buf, size_t n) { mp_lua_tensor_shape_str(t->ndim, t->shape, buf, n); }

int mp_lua_tensor_dim(lua_State *L, int arg, int ndim, int ndim_extra, const char *fn) {
    return (int)mp_lua_arg_index(L, arg, fn, "dim", ndim + ndim_extra, 0);
}

static void push_indices(lua_State *L, const int64_t **p, int ndim, const int64_t *shape) {
    if (ndim == 0) {
        lua_pushinteger(L, (lua_Integer)*(*p)++ + 1);
        return;
    }
    lua_createtable(L, shape[0] > INT_MAX ? 0 : (int)shape[0], 0);
    for (int64_t i = 0; i < shape[0]; i++) {
        push_indices(L, p, ndim - 1, shape + 1);
        lua_rawseti(L, -2, i + 1);
    }
}

void mp_lua_tensor_push_indices(lua_State *L, const int64_t *idx, int ndim, const int64_t *shape) {
    luaL_checkstack(L, ndim + 4, "index tables nested too deep");
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i]; /* fits: a Tensor's shape */
    if (n == 0) check_empty_tables(L, ndim, shape, "indices");
    push_indices(L, &idx, ndim, shape);
}

/* 1-based (or negative, from the end) index at arg along dim `dim` (1-based)
 * of extent n, into 0-based, or raises "fn: argument #2 (index into dim 2)
 * must be an integer in [-3, -1] or [1, 3], got 4". */
static int64_t index_arg(lua_State *L, int arg, int64_t n, int dim, const char *fn) {
    char name[40];
    snprintf(name, sizeof name, "index into dim %d", dim);
    return mp_lua_arg_index(L, arg, fn, name, n, 0);
}

/* Reads a shape from a table at `arg` or from integers arg..top: extents of
 * at least 0 (-1 too, one inferred extent, when allow_infer). */
static int shape_args(lua_State *L, int arg, int64_t *shape, int allow_infer, const char *fn) {
    int ndim = 0, top = lua_gettop(L);
    const lua_Integer lo = allow_infer ? -1 : 0, hi = (lua_Integer)MP_TENSOR_NUMEL_MAX;
    if (lua_istable(L, arg)) {
        lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
        if (n > MP_MAXDIM) luaL_argerror(L, arg, "too many dims");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, arg, i);
            const char *what = lua_pushfstring(L, "%s[%I]", mp_lua_argname(L, arg, "shape"), i);
            shape[ndim++] = mp_lua_int_at(L, -3, fn, what, lo, hi);
            lua_pop(L, 3);
        }
    } else {
        for (int a = arg; a <= top; a++) {
            if (ndim == MP_MAXDIM) luaL_argerror(L, a, "too many dims");
            shape[ndim++] = mp_lua_arg_int(L, a, fn, "extent", lo, hi);
        }
    }
    return ndim;
}

int mp_lua_tensor_shape_args(lua_State *L, int arg, int64_t *shape, const char *fn) {
    return shape_args(L, arg, shape, 0, fn);
}

static void same_shape(lua_State *L, const mp_tensor *a, const mp_tensor *b, int arg) {
    if (!mp_tensor_same_shape(a, b)) {
        char sa[128], sb[128];
        shape_str(a, sa, sizeof sa);
        shape_str(b, sb, sizeof sb);
        luaL_argerror(L, arg, lua_pushfstring(L, "shapes %s and %s differ", sa, sb));
    }
}

/* ---- constructors ---- */

/* mp.tensor(data [, {requires_grad = false}]) */
static int l_tensor(lua_State *L) {
    static const char *const known[] = {"requires_grad", NULL};
    lua_settop(L, 2);
    mp_lua_opt_check(L, 2, "mp.tensor", known);
    int rg = mp_lua_opt_bool(L, 2, "mp.tensor", "requires_grad", 0);
    mp_tensor *t = mp_lua_tensor_test(L, 1);
    if (t) {
        mp_lua_tensor_from(L, t->ndim, t->shape, t->data);
    } else {
        luaL_checktype(L, 1, LUA_TTABLE);
        tensor_from_table(L, 1, 1);
    }
    if (rg) mp_lua_ag_leaf(L, -1);
    return 1;
}

static int filled(lua_State *L, int arg, float v, int vtop, const char *fn) {
    int64_t shape[MP_MAXDIM];
    if (lua_gettop(L) < arg) luaL_argerror(L, arg, "shape expected (a table or dims)");
    if (vtop) lua_settop(L, arg); /* value already read; keep the shape only */
    int ndim = shape_args(L, arg, shape, 0, fn);
    mp_tensor *t = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_init_full(t, ndim, shape, v), NULL);
    return 1;
}

static int l_zeros(lua_State *L) { return filled(L, 1, 0.0f, 0, "mp.zeros"); }
static int l_ones(lua_State *L) { return filled(L, 1, 1.0f, 0, "mp.ones"); }
static int l_full(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    float v = (float)luaL_checknumber(L, 2);
    return filled(L, 1, v, 1, "mp.full");
}
static int l_is_tensor(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, MP_TENSOR_MT) != NULL);
    return 1;
}

/* ---- shape and access ---- */

static int m_shape(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int m_dim(lua_State *L) {
    lua_pushinteger(L, mp_lua_tensor_check(L, 1)->ndim);
    return 1;
}

static int m_numel(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)mp_lua_tensor_check(L, 1)->numel);
    return 1;
}

static int m_size(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (lua_isnoneornil(L, 2)) return m_shape(L);
    lua_pushinteger(L, t->shape[mp_lua_tensor_dim(L, 2, t->ndim, 0, "size")]);
    return 1;
}

/* Flat offset of the indices at args first..first+ndim-1. */
static size_t flat_index(lua_State *L, const mp_tensor *t, int first, const char *fn) {
    int given = lua_gettop(L) - first + 1;
    if (given != t->ndim)
        luaL_error(L, "bad arguments to '%s' (a %d-dim Tensor needs %d indices, got %d)", fn, t->ndim, t->ndim,
                   given < 0 ? 0 : given);
    size_t off = 0;
    for (int i = 0; i < t->ndim; i++) off = off * (size_t)t->shape[i] + (size_t)index_arg(L, first + i, t->shape[i], i + 1, fn);
    return off;
}

static int m_get(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    lua_pushnumber(L, t->data[flat_index(L, t, 2, "get")]);
    return 1;
}

static int m_set(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    float v = (float)luaL_checknumber(L, 2);
    size_t off = flat_index(L, t, 3, "set");
    mp_lua_ag_inplace(L, 1, "set");
    t->data[off] = v;
    lua_settop(L, 1);
    return 1;
}

/* Pushes t[i] (0-based j): a number for 1-D (a 0-dim Tensor when t is
 * tracked by autograd), else a view. t is the Tensor at 1. */
static void push_select(lua_State *L, mp_tensor *t, int64_t j) {
    int track = mp_lua_ag_want(L, 1, 0);
    if (t->ndim == 1 && !track) {
        lua_pushnumber(L, t->data[j]);
        return;
    }
    mp_tensor *v = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_select(v, t, j), NULL);
    mp_lua_tensor_keep(L, 1);
    if (track) {
        mp_ag_args a = {.op = MP_AG_SLICE, .d = 0, .first = j, .count = 1, .step = 1};
        int idx[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &a, 1, idx, x, "select");
    }
}

static int m_select(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (t->ndim < 1) luaL_error(L, "select on a 0-dim Tensor");
    push_select(L, t, index_arg(L, 2, t->shape[0], 1, "select"));
    return 1;
}

static int m_reshape(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int64_t shape[MP_MAXDIM];
    if (lua_gettop(L) < 2) luaL_argerror(L, 2, "shape expected (a table or dims)");
    int ndim = shape_args(L, 2, shape, 1, "reshape");
    mp_tensor *v = push_raw(L);
    if (mp_tensor_reshape(v, t, ndim, shape) != MP_OK) luaL_argerror(L, 2, mp_last_error());
    mp_lua_tensor_keep(L, 1);
    mp_lua_ag_record2(L, MP_AG_VIEW, 1, t, 0, NULL, "reshape");
    return 1;
}

static int m_totable(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (t->ndim == 0) {
        lua_pushnumber(L, t->data[0]);
        return 1;
    }
    if (t->numel == 0) check_empty_tables(L, t->ndim, t->shape, "totable");
    luaL_checkstack(L, t->ndim + 4, "Tensor nested too deep");
    push_totable(L, t->data, t->ndim, t->shape);
    return 1;
}

static int m_clone(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_tensor *r = push_raw(L);
    mp_lua_tensor_try(L, mp_tensor_clone(r, t), NULL);
    mp_lua_ag_record2(L, MP_AG_VIEW, 1, t, 0, NULL, "clone");
    return 1;
}

static int m_fill_(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    float v = (float)luaL_checknumber(L, 2);
    mp_lua_ag_inplace(L, 1, "fill_");
    mp_tensor_fill_(t, v);
    lua_settop(L, 1);
    return 1;
}

static int m_dot(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_tensor *o = mp_lua_tensor_arg(L, 2);
    if (t->ndim != 1) luaL_argerror(L, 1, "dot needs 1-D Tensors");
    double d;
    if (mp_tensor_dot(t, o, &d) != MP_OK) luaL_argerror(L, 2, mp_last_error());
    if (mp_lua_ag_want(L, 1, 2)) { /* a 0-dim Tensor, to backward through */
        float f = (float)d;
        mp_lua_tensor_from(L, 0, NULL, &f);
        mp_lua_ag_record2(L, MP_AG_DOT, 1, t, 2, o, "dot");
        return 1;
    }
    lua_pushnumber(L, d);
    return 1;
}

/* t:save(path, name [, {compress = N}]) */
static int m_save(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    const char *path = luaL_checkstring(L, 2);
    const char *name = luaL_checkstring(L, 3);
    static const char *const known[] = {"compress", NULL};
    mp_lua_opt_check(L, 4, "Tensor:save", known);
    int compress = (int)mp_lua_opt_int(L, 4, "Tensor:save", "compress", 0, 0, 9);
    t = mp_lua_tensor_check(L, 1); /* reading the options may run Lua (an __index) that closed it */
    mp_h5_atomic a; /* atomic: a copy of the file gets the dataset, then replaces it */
    mp_status st = mp_h5_atomic_update(&a, path);
    if (st == MP_OK && (st = mp_h5_write_f32(a.file, name, t->ndim, t->shape, t->data, compress)) != MP_OK)
        mp_h5_atomic_abort(&a);
    if (st == MP_OK) st = mp_h5_atomic_commit(&a);
    if (st != MP_OK) return mp_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}

/* ---- metamethods ---- */

static int mt_gc(lua_State *L) {
    mp_lua_tensor_ud *u = luaL_checkudata(L, 1, MP_TENSOR_MT);
    mp_tensor_free(&u->t);
    mp_lua_ag_gc(u);
    return 0;
}

static int mt_tostring(lua_State *L) {
    mp_tensor *t = luaL_checkudata(L, 1, MP_TENSOR_MT);
    if (!valid(t)) {
        lua_pushliteral(L, "Tensor(invalid)");
        return 1;
    }
    char s[160];
    shape_str(t, s, sizeof s);
    lua_pushfstring(L, "Tensor%s float32", s);
    return 1;
}

static int mt_len(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    lua_pushinteger(L, t->ndim ? t->shape[0] : 0);
    return 1;
}

/* Integer key of the value at idx (also 2.0), or 0 with *ok = 0. */
static lua_Integer int_key(lua_State *L, int idx, int *ok) {
    *ok = 0;
    if (lua_type(L, idx) != LUA_TNUMBER) return 0;
    return lua_tointegerx(L, idx, ok);
}

static int mt_index(lua_State *L) {
    int ok;
    int_key(L, 2, &ok);
    if (ok) {
        mp_tensor *t = mp_lua_tensor_check(L, 1);
        if (t->ndim < 1) luaL_error(L, "cannot index a 0-dim Tensor");
        push_select(L, t, mp_lua_index_at(L, 2, "t[i]", "i", t->shape[0], 0));
        return 1;
    }
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *k = lua_tostring(L, 2);
        if (strcmp(k, "ndim") == 0) {
            lua_pushinteger(L, mp_lua_tensor_check(L, 1)->ndim);
            return 1;
        }
        /* autograd (lua/lautograd.c) */
        if (strcmp(k, "grad") == 0 || strcmp(k, "requires_grad") == 0 || strcmp(k, "is_leaf") == 0 ||
            strcmp(k, "grad_fn") == 0)
            return mp_lua_ag_field(L, 1, k);
        lua_pushvalue(L, 2);
        lua_rawget(L, lua_upvalueindex(1));
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static int mt_newindex(lua_State *L) {
    int ok;
    int_key(L, 2, &ok);
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (!ok && lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "grad") == 0) {
        mp_lua_ag_set_grad(L, 1, 3); /* t.grad = nil (or a Tensor of t's shape) */
        return 0;
    }
    if (!ok) return luaL_error(L, "cannot set field '%s' of a Tensor", luaL_tolstring(L, 2, NULL));
    if (t->ndim < 1) luaL_error(L, "cannot index a 0-dim Tensor");
    int64_t j = mp_lua_index_at(L, 2, "t[i] = v", "i", t->shape[0], 0);
    mp_lua_ag_inplace(L, 1, "t[i] = v");
    if (t->ndim == 1) {
        t->data[j] = (float)luaL_checknumber(L, 3);
        return 0;
    }
    size_t stride = t->numel / (size_t)t->shape[0];
    float *dst = t->data + (size_t)j * stride;
    if (lua_type(L, 3) == LUA_TNUMBER) {
        float v = (float)lua_tonumber(L, 3);
        for (size_t k = 0; k < stride; k++) dst[k] = v;
        return 0;
    }
    mp_tensor *src = mp_lua_tensor_arg(L, 3);
    mp_tensor sub = {0};
    sub.ndim = t->ndim - 1;
    memcpy(sub.shape, t->shape + 1, (size_t)sub.ndim * sizeof *sub.shape);
    same_shape(L, &sub, src, 3);
    sub.data = dst;
    sub.numel = stride;
    mp_tensor_copy_(&sub, src); /* same shape: a memmove */
    return 0;
}

/* The methods of this file; lua/ltensor_ops.c and lua/ltensor_math.c add theirs. */
static const luaL_Reg methods[] = {
    {"shape", m_shape},     {"dim", m_dim},       {"numel", m_numel},   {"size", m_size},
    {"get", m_get},         {"set", m_set},       {"select", m_select}, {"reshape", m_reshape},
    {"view", m_reshape},    {"totable", m_totable}, {"tolist", m_totable}, {"clone", m_clone},
    {"fill_", m_fill_},     {"dot", m_dot},       {"save", m_save},     {NULL, NULL},
};

static const luaL_Reg metamethods[] = {
    {"__gc", mt_gc}, {"__close", mt_gc}, {"__tostring", mt_tostring}, {"__len", mt_len},
    {"__newindex", mt_newindex}, {NULL, NULL},
};

/* Creates the metatable on first use and leaves it on the stack. */
static void ensure_metatable(lua_State *L) {
    if (!luaL_newmetatable(L, MP_TENSOR_MT)) return;
    luaL_setfuncs(L, metamethods, 0);
    mp_lua_tensor_math_metamethods(L);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    mp_lua_tensor_ops_methods(L);
    mp_lua_tensor_math_methods(L);
    mp_lua_tensor_index_methods(L);
    mp_lua_ag_methods(L);
    lua_pushcclosure(L, mt_index, 1);
    lua_setfield(L, -2, "__index");
}

void mp_lua_open_tensor(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"tensor", l_tensor}, {"zeros", l_zeros}, {"ones", l_ones},
        {"full", l_full},     {"is_tensor", l_is_tensor}, {NULL, NULL},
    };
    ensure_metatable(L);
    lua_pop(L, 1);
    luaL_setfuncs(L, fns, 0);
    mp_lua_tensor_ops_functions(L);
    mp_lua_tensor_math_functions(L);
    mp_lua_tensor_index_functions(L);
    mp_lua_ag_functions(L);
}
