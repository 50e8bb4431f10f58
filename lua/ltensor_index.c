/* ltensor_index.c — the mask, indexing, sorting and random methods of the
 * Lua Tensor (see lua/ltensor.h): comparisons eq/ne/lt/le/gt/ge (float 0/1
 * masks, broadcasting), mp.where, masked_fill, gather, diagonal, tril/triu,
 * sort/argsort, svd, eig/eigh, mp.einsum (one or two operands), and mp.randn/mp.rand/
 * mp.manual_seed on GSL's generators. Dims and indices are 1-based, negative
 * ones counting from the end; the work is done by the C tensor core (analyze/tensor.h,
 * analyze/tensor_index.c), these functions check and convert the Lua
 * arguments. */
#include "ltensor.h"
#include "lautograd.h"

#include <string.h>

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

/* ---- comparisons ---- */

static int compare(lua_State *L, mp_tensor_binop op, const char *fn) {
    lua_settop(L, 2);
    mp_tensor tb;
    float vb;
    const mp_tensor *a = mp_lua_tensor_check(L, 1);
    const mp_tensor *b = operand(L, 2, &tb, &vb); /* a converted table stays on the stack */
    mp_lua_tensor_try(L, mp_tensor_binary(mp_lua_tensor_push(L), op, a, b), fn);
    return 1;
}

static int m_eq(lua_State *L) { return compare(L, MP_TENSOR_EQ, "eq"); }
static int m_ne(lua_State *L) { return compare(L, MP_TENSOR_NE, "ne"); }
static int m_lt(lua_State *L) { return compare(L, MP_TENSOR_LT, "lt"); }
static int m_le(lua_State *L) { return compare(L, MP_TENSOR_LE, "le"); }
static int m_gt(lua_State *L) { return compare(L, MP_TENSOR_GT, "gt"); }
static int m_ge(lua_State *L) { return compare(L, MP_TENSOR_GE, "ge"); }

/* ---- masks ---- */

/* mp.where(mask, a, b): a where mask is non-zero, else b; numbers or Tensors
 * (or tables), the three shapes broadcasting. */
static int l_where(lua_State *L) {
    lua_settop(L, 3);
    mp_tensor tm, ta, tb;
    float vm, va, vb;
    const mp_tensor *m = operand(L, 1, &tm, &vm), *a = operand(L, 2, &ta, &va), *b = operand(L, 3, &tb, &vb);
    mp_lua_tensor_try(L, mp_tensor_where(mp_lua_tensor_push(L), m, a, b), "mp.where");
    if (mp_lua_ag_want(L, 2, 3)) { /* gradient to a and b, none to the mask */
        mp_ag_args ag = {.op = MP_AG_WHERE};
        int in[3] = {0, 2, 3};
        const mp_tensor *x[3] = {m, a, b};
        mp_lua_ag_record(L, &ag, 3, in, x, "mp.where");
    }
    return 1;
}

/* t:masked_fill(mask, value): a copy of t with value where mask (broadcast
 * to t's shape) is non-zero. */
static int m_masked_fill(lua_State *L) {
    lua_settop(L, 3);
    float v = (float)luaL_checknumber(L, 3);
    const mp_tensor *t = mp_lua_tensor_check(L, 1), *m = mp_lua_tensor_arg(L, 2);
    mp_lua_tensor_try(L, mp_tensor_masked_fill(mp_lua_tensor_push(L), t, m, v), "masked_fill");
    if (mp_lua_ag_want(L, 1, 0)) {
        mp_ag_args ag = {.op = MP_AG_MASKED_FILL};
        int in[2] = {1, 0};
        const mp_tensor *x[2] = {t, m};
        mp_lua_ag_record(L, &ag, 2, in, x, "masked_fill");
    }
    return 1;
}

/* ---- gather ---- */

/* Shape of the nested table at idx, following first elements. */
static int nested_shape(lua_State *L, int idx, int64_t *shape, const char *fn) {
    int nd = 0;
    lua_pushvalue(L, idx);
    while (lua_type(L, -1) == LUA_TTABLE) {
        if (nd == MP_MAXDIM) luaL_error(L, "%s: the index is nested deeper than %d levels", fn, MP_MAXDIM);
        shape[nd++] = (int64_t)lua_rawlen(L, -1);
        if (lua_rawlen(L, -1) == 0) break;
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    return nd;
}

/* Reads the nested table at idx (depth `depth` of shape) into *p as 0-based
 * indices into an extent n. path: "index[2][1]" so far. */
static void read_nested(lua_State *L, int idx, int depth, int nd, const int64_t *shape, int64_t n, int64_t **p,
                        const char *path, const char *fn) {
    if ((int64_t)lua_rawlen(L, idx) != shape[depth])
        luaL_error(L, "%s: ragged index: %s has %d entries, expected %d", fn, path, (int)lua_rawlen(L, idx),
                   (int)shape[depth]);
    luaL_checkstack(L, 4, "index nested too deep");
    for (int64_t i = 1; i <= shape[depth]; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i);
        const char *sub = lua_pushfstring(L, "%s[%I]", path, (lua_Integer)i);
        if (depth + 1 < nd) {
            if (!lua_istable(L, -2))
                luaL_error(L, "%s: ragged index: %s is a %s, expected a table", fn, sub, luaL_typename(L, -2));
            read_nested(L, lua_gettop(L) - 1, depth + 1, nd, shape, n, p, sub, fn);
        } else {
            *(*p)++ = mp_lua_index_at(L, -2, fn, sub, n, 0);
        }
        lua_pop(L, 2);
    }
}

/* t:gather(dim, index): index a Tensor or nested table of 1-based indices
 * (negative from the end) with t's number of dims; the result has its shape. */
static int m_gather(lua_State *L) {
    lua_settop(L, 3);
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    int d = mp_lua_tensor_dim(L, 2, t->ndim, 0, "gather");
    int64_t ishape[MP_MAXDIM], n = t->shape[d];
    int nd;
    size_t count = 1;
    mp_tensor *it = mp_lua_tensor_test(L, 3);
    if (it) {
        nd = it->ndim;
        memcpy(ishape, it->shape, sizeof ishape);
    } else {
        if (!lua_istable(L, 3)) luaL_typeerror(L, 3, "Tensor or table of indices");
        nd = nested_shape(L, 3, ishape, "gather");
    }
    if (nd != t->ndim) {
        char s1[128], s2[128];
        mp_lua_tensor_shape_str(nd, ishape, s1, sizeof s1);
        mp_lua_tensor_shape_str(t->ndim, t->shape, s2, sizeof s2);
        return luaL_error(L, "gather: the index %s has %d dims, the Tensor %s has %d", s1, nd, s2, t->ndim);
    }
    for (int k = 0; k < nd; k++) count *= (size_t)ishape[k]; /* the index exists: it fits */
    int64_t *idx = lua_newuserdatauv(L, (count ? count : 1) * sizeof(int64_t), 0), *p = idx;
    if (it) {
        for (size_t e = 0; e < count; e++) {
            lua_pushnumber(L, it->data[e]);
            const char *what = lua_pushfstring(L, "index element %I", (lua_Integer)e + 1);
            idx[e] = mp_lua_index_at(L, -2, "gather", what, n, 0);
            lua_pop(L, 2);
        }
    } else if (nd > 0 && count > 0) {
        read_nested(L, 3, 0, nd, ishape, n, &p, "index", "gather");
    }
    t = mp_lua_tensor_check(L, 1); /* reading the index ran no Lua, but stay safe */
    mp_lua_tensor_try(L, mp_tensor_gather(mp_lua_tensor_push(L), t, d, nd, ishape, idx), "gather");
    if (mp_lua_ag_want(L, 1, 0)) {
        mp_ag_args ag = {.op = MP_AG_GATHER, .d = d, .idx = idx, .nidx = count};
        int in[1] = {1};
        const mp_tensor *x[1] = {t};
        mp_lua_ag_record(L, &ag, 1, in, x, "gather");
    }
    return 1;
}

/* ---- diagonal, triangles ---- */

static lua_Integer offset_arg(lua_State *L, int arg, const char *fn, const char *name) {
    return mp_lua_arg_optint(L, arg, fn, name, 0, -(lua_Integer)MP_TENSOR_NUMEL_MAX, (lua_Integer)MP_TENSOR_NUMEL_MAX);
}

/* t:diagonal([offset]): a 1-D copy of t[i][i + offset] of a 2-D t. */
static int m_diagonal(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, "diagonal");
    lua_Integer off = offset_arg(L, 2, "diagonal", "offset");
    mp_lua_tensor_try(L, mp_tensor_diagonal(mp_lua_tensor_push(L), t, (int64_t)off), "diagonal");
    return 1;
}

static int tri(lua_State *L, int upper, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, fn);
    lua_Integer k = offset_arg(L, 2, fn, "diagonal");
    mp_lua_tensor_try(L, mp_tensor_tri(mp_lua_tensor_push(L), t, (int64_t)k, upper), fn);
    return 1;
}

static int m_tril(lua_State *L) { return tri(L, 0, "tril"); }
static int m_triu(lua_State *L) { return tri(L, 1, "triu"); }

/* ---- sort ---- */

/* t:sort([dim [, descending]]) -> values, indices; t:argsort(...) -> indices. */
static int sort(lua_State *L, int want_values, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    if (want_values) mp_lua_ag_refuse(L, 1, 0, fn);
    if (t->ndim == 0) return luaL_error(L, "%s: a 0-dim Tensor has no dim", fn);
    int d = lua_isnoneornil(L, 2) ? t->ndim - 1 : mp_lua_tensor_dim(L, 2, t->ndim, 0, fn);
    int desc = 0;
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_isboolean(L, 3)) return luaL_error(L, "%s: descending must be a boolean, got %s", fn, luaL_typename(L, 3));
        desc = lua_toboolean(L, 3);
    }
    lua_settop(L, 1);
    int64_t *idx = lua_newuserdatauv(L, (t->numel ? t->numel : 1) * sizeof(int64_t), 0);
    mp_lua_tensor_try(L, mp_tensor_sort(mp_lua_tensor_push(L), idx, t, d, desc), fn);
    mp_lua_tensor_push_indices(L, idx, t->ndim, t->shape);
    lua_remove(L, 2); /* the index buffer */
    if (want_values) return 2;
    return 1;
}

static int m_sort(lua_State *L) { return sort(L, 1, "sort"); }
static int m_argsort(lua_State *L) { return sort(L, 0, "argsort"); }

/* ---- SVD ---- */

/* t:svd() -> U, S, Vh: torch.linalg.svd(t, full_matrices=False). */
static int m_svd(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, "svd");
    mp_tensor *u = mp_lua_tensor_push(L), *s = mp_lua_tensor_push(L), *vh = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_svd(u, s, vh, t), "svd");
    return 3;
}

/* ---- eigen-decompositions ---- */

/* t:eig() -> re, im: the eigenvalues of a square t [..., n, n] (batched), real
 * and imaginary parts [..., n], |lambda| descending (analyze/tensor.h). */
static int m_eig(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, "eig");
    mp_tensor *re = mp_lua_tensor_push(L), *im = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_eig(re, im, t), "eig");
    return 2;
}

/* t:eigh() -> w, V: torch.linalg.eigh (values ascending, vectors as columns). */
static int m_eigh(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_ag_refuse(L, 1, 0, "eigh");
    mp_tensor *w = mp_lua_tensor_push(L), *v = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_eigh(w, v, t), "eigh");
    return 2;
}

/* ---- einsum ---- */

/* mp.einsum(eq, a [, b]): torch.einsum for one or two operands; a number
 * when the result has no dims. */
static int l_einsum(lua_State *L) {
    const char *eq = luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    if (n < 1 || n > 2) return luaL_error(L, "mp.einsum: %d operands given (1 or 2 are supported)", n);
    lua_settop(L, n + 1);
    mp_lua_ag_refuse(L, 2, n == 2 ? 3 : 0, "mp.einsum");
    const mp_tensor *ops[2];
    for (int k = 0; k < n; k++) ops[k] = mp_lua_tensor_arg(L, k + 2); /* converted tables stay on the stack */
    mp_tensor *r = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_einsum(r, eq, ops, n), "mp.einsum");
    if (r->ndim == 0) lua_pushnumber(L, r->data[0]);
    return 1;
}

/* ---- random tensors ---- */

/* The registry key of the module's generator (a table whose __gc frees it). */
static const char RNG_KEY = 0;

static int rng_gc(lua_State *L) {
    lua_getfield(L, 1, "rng");
    mp_tensor_rng **r = lua_touserdata(L, -1);
    if (r && *r) {
        mp_tensor_rng_free(*r);
        *r = NULL;
    }
    return 0;
}

/* Replaces the module's generator by a new one seeded with seed. */
static mp_tensor_rng *set_global(lua_State *L, unsigned long seed) {
    lua_newtable(L);
    mp_tensor_rng **slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = NULL;
    lua_setfield(L, -2, "rng");
    lua_newtable(L);
    lua_pushcfunction(L, rng_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    mp_lua_tensor_try(L, mp_tensor_rng_new(slot, seed), NULL);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &RNG_KEY); /* the old one is collected */
    return *slot;
}

static mp_tensor_rng *global_rng(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &RNG_KEY);
    mp_tensor_rng *r = NULL;
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "rng");
        mp_tensor_rng **slot = lua_touserdata(L, -1);
        r = slot ? *slot : NULL;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return r ? r : set_global(L, 0);
}

#define SEED_MAX 4294967295 /* mt19937 takes 32 bits of the seed */

/* mp.randn(shape [, opts]) / mp.randn(d1, d2, ... [, opts]); mp.rand the same. */
static int random_tensor(lua_State *L, int normal, const char *fn) {
    static const char *const known[] = {"seed", NULL};
    int top = lua_gettop(L), opts = 0;
    if (top >= 1 && lua_istable(L, 1)) {
        if (top > 2) return luaL_error(L, "%s: the shape table takes at most an options table after it", fn);
        opts = top == 2 ? 2 : 0;
    } else if (top >= 1 && !lua_isnumber(L, top) && !lua_isnil(L, top)) {
        opts = top;
    }
    if (top == 0) return luaL_argerror(L, 1, "shape expected (a table or dims)");
    mp_lua_opt_check(L, opts, fn, known);
    int has_seed = mp_lua_opt_get(L, opts, "seed") != LUA_TNIL;
    lua_pop(L, 1);
    lua_Integer seed = mp_lua_opt_int(L, opts, fn, "seed", 0, 0, SEED_MAX);
    if (opts) lua_settop(L, opts - 1);
    int64_t shape[MP_MAXDIM];
    int nd = mp_lua_tensor_shape_args(L, 1, shape, fn);
    mp_tensor_rng *r = NULL;
    mp_tensor *t = mp_lua_tensor_push(L); /* first: nothing to free if Lua runs out of memory */
    if (has_seed) mp_lua_tensor_try(L, mp_tensor_rng_new(&r, (unsigned long)seed), fn);
    else r = global_rng(L);
    mp_status st = mp_tensor_random(t, nd, shape, r, normal);
    if (has_seed) mp_tensor_rng_free(r);
    mp_lua_tensor_try(L, st, fn);
    return 1;
}

static int l_randn(lua_State *L) { return random_tensor(L, 1, "mp.randn"); }
static int l_rand(lua_State *L) { return random_tensor(L, 0, "mp.rand"); }

/* mp.manual_seed(seed): reseeds the generator mp.randn/mp.rand use without a seed. */
static int l_manual_seed(lua_State *L) {
    lua_Integer seed = mp_lua_arg_int(L, 1, "mp.manual_seed", "seed", 0, SEED_MAX);
    set_global(L, (unsigned long)seed);
    return 0;
}

static const luaL_Reg index_methods[] = {
    {"eq", m_eq},         {"ne", m_ne},         {"lt", m_lt},           {"le", m_le},
    {"gt", m_gt},         {"ge", m_ge},         {"masked_fill", m_masked_fill}, {"gather", m_gather},
    {"diagonal", m_diagonal}, {"tril", m_tril}, {"triu", m_triu},       {"sort", m_sort},
    {"argsort", m_argsort}, {"svd", m_svd},     {"eig", m_eig},         {"eigh", m_eigh},
    {NULL, NULL},
};

void mp_lua_tensor_index_methods(lua_State *L) { luaL_setfuncs(L, index_methods, 0); }

void mp_lua_tensor_index_functions(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"where", l_where}, {"einsum", l_einsum}, {"randn", l_randn}, {"rand", l_rand}, {"manual_seed", l_manual_seed}, {NULL, NULL},
    };
    luaL_setfuncs(L, fns, 0);
}
