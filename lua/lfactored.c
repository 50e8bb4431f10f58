/* lfactored.c — mp.FactoredMatrix(A, B): TransformerLens's FactoredMatrix, a
 * matrix product A B kept as its two factors (A [..., m, k], B [..., k, n],
 * leading batch dims broadcast as torch does), for OV and QK circuits
 * (m:OV / m:QK in lua/lweights.c). Fields .A, .B, .AB (the product), .BA
 * (when m == n), .shape, .ndim, .ldim/.mdim/.rdim; methods :svd() (from the
 * factors: analyze/tensor_linalg.c's mp_tensor_factored_svd), :eigenvalues()
 * (of the small k x k BA, whose nonzero eigenvalues are AB's), :norm()
 * (Frobenius, from S), :T(), :matmul(x) (fm @ x), :rmatmul(x) (x @ fm),
 * :get_corner(n). The userdata holds nothing but its two user values, the
 * factor Tensors; the maths is the C tensor core's (analyze/tensor.h). */
#include "ltensor.h"
#include "lautograd.h"

#include <math.h>
#include <string.h>

#define MP_FACTORED_MT "mechprobe.FactoredMatrix"

/* ---- construction ---- */

/* Pushes a FactoredMatrix of the Tensors at absolute indices ia and ib
 * (broadcast copies when their leading dims differ). */
void mp_lua_factored_push(lua_State *L, int ia, int ib, const char *fn) {
    mp_tensor *a = mp_lua_tensor_check(L, ia), *b = mp_lua_tensor_check(L, ib);
    char sa[128], sb[128];
    mp_tensor_shape_str(a->ndim, a->shape, sa, sizeof sa);
    mp_tensor_shape_str(b->ndim, b->shape, sb, sizeof sb);
    if (a->ndim < 2 || b->ndim < 2)
        luaL_error(L, "%s: A and B must be at least 2-D ([..., m, k] and [..., k, n]), got %s and %s", fn, sa, sb);
    if (a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
        luaL_error(L, "%s: A's last dim must equal B's second-to-last (A [..., m, k], B [..., k, n]), got %s and %s", fn,
                   sa, sb);
    int na = a->ndim - 2, nb = b->ndim - 2, nd;
    int64_t bs[MP_MAXDIM];
    if (mp_tensor_broadcast_shape(na, a->shape, nb, b->shape, &nd, bs) != MP_OK)
        luaL_error(L, "%s: the leading dims of A %s and B %s do not broadcast", fn, sa, sb);
    if (nd + 2 > MP_MAXDIM) luaL_error(L, "%s: more than %d dims", fn, MP_MAXDIM);
    lua_pushvalue(L, ia);
    lua_pushvalue(L, ib);
    int top = lua_gettop(L);
    if (na != nd || memcmp(a->shape, bs, (size_t)nd * sizeof *bs) != 0) {
        int64_t s[MP_MAXDIM];
        memcpy(s, bs, (size_t)nd * sizeof *s);
        s[nd] = a->shape[na], s[nd + 1] = a->shape[na + 1];
        mp_lua_tensor_try(L, mp_tensor_expand(mp_lua_tensor_push(L), a, nd + 2, s), fn);
        lua_replace(L, top - 1);
    }
    if (nb != nd || memcmp(b->shape, bs, (size_t)nd * sizeof *bs) != 0) {
        int64_t s[MP_MAXDIM];
        memcpy(s, bs, (size_t)nd * sizeof *s);
        s[nd] = b->shape[nb], s[nd + 1] = b->shape[nb + 1];
        mp_lua_tensor_try(L, mp_tensor_expand(mp_lua_tensor_push(L), b, nd + 2, s), fn);
        lua_replace(L, top);
    }
    lua_newuserdatauv(L, 1, 2);
    luaL_setmetatable(L, MP_FACTORED_MT);
    lua_rotate(L, top - 1, 1); /* A, B, fm -> fm, A, B */
    lua_setiuservalue(L, top - 1, 2);
    lua_setiuservalue(L, top - 1, 1);
}

/* mp.FactoredMatrix(A, B): Tensors (or tables) A [..., m, k], B [..., k, n]. */
static int l_factored(lua_State *L) {
    lua_settop(L, 2);
    mp_lua_tensor_arg(L, 1);
    if (lua_gettop(L) > 2) lua_replace(L, 1);
    mp_lua_tensor_arg(L, 2);
    if (lua_gettop(L) > 2) lua_replace(L, 2);
    mp_lua_ag_refuse(L, 1, 2, "mp.FactoredMatrix");
    mp_lua_factored_push(L, 1, 2, "mp.FactoredMatrix");
    return 1;
}

/* Pushes A and B of the FactoredMatrix at idx; returns them through a and b. */
static void parts(lua_State *L, int idx, mp_tensor **a, mp_tensor **b) {
    luaL_checkudata(L, idx, MP_FACTORED_MT);
    lua_getiuservalue(L, idx, 1);
    lua_getiuservalue(L, idx, 2);
    *a = mp_lua_tensor_check(L, -2);
    *b = mp_lua_tensor_check(L, -1);
}

/* ---- fields ---- */

static void push_shape(lua_State *L, const mp_tensor *a, const mp_tensor *b) {
    lua_createtable(L, a->ndim, 0);
    for (int i = 0; i < a->ndim - 1; i++) {
        lua_pushinteger(L, a->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, b->shape[b->ndim - 1]);
    lua_rawseti(L, -2, a->ndim);
}

/* Pushes A @ B (ab) or B @ A (m == n only). */
static void push_product(lua_State *L, int idx, int ab, const char *fn) {
    mp_tensor *a, *b;
    parts(L, idx, &a, &b);
    if (!ab && a->shape[a->ndim - 2] != b->shape[b->ndim - 1])
        luaL_error(L, "%s: BA needs ldim == rdim, got %d and %d", fn, (int)a->shape[a->ndim - 2],
                   (int)b->shape[b->ndim - 1]);
    mp_lua_tensor_try(L, mp_tensor_matmul(mp_lua_tensor_push(L), ab ? a : b, ab ? b : a), fn);
}

static int fm_index(lua_State *L) {
    const char *k = lua_tostring(L, 2);
    if (k && lua_type(L, 2) == LUA_TSTRING) {
        mp_tensor *a, *b;
        if (strcmp(k, "A") == 0 || strcmp(k, "B") == 0) {
            parts(L, 1, &a, &b);
            if (k[0] == 'A') lua_pop(L, 1);
            return 1;
        }
        if (strcmp(k, "AB") == 0 || strcmp(k, "BA") == 0) {
            push_product(L, 1, k[0] == 'A', k);
            return 1;
        }
        int64_t v;
        if (strcmp(k, "shape") == 0 || strcmp(k, "ndim") == 0 || strcmp(k, "ldim") == 0 || strcmp(k, "mdim") == 0 ||
            strcmp(k, "rdim") == 0) {
            parts(L, 1, &a, &b);
            int nd = a->ndim;
            if (k[0] == 's') {
                push_shape(L, a, b);
                return 1;
            }
            if (k[0] == 'n') v = nd;
            else if (k[0] == 'l') v = a->shape[nd - 2];
            else if (k[0] == 'r') v = b->shape[nd - 1];
            else {
                v = a->shape[nd - 1] < a->shape[nd - 2] ? a->shape[nd - 1] : a->shape[nd - 2];
                if (b->shape[nd - 1] < v) v = b->shape[nd - 1];
            }
            lua_pushinteger(L, v);
            return 1;
        }
    }
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    return 1;
}

/* ---- methods ---- */

/* fm:svd() -> U [..., m, r], S [..., r], Vh [..., r, n]: AB = U diag(S) Vh, r = mdim. */
static int m_svd(lua_State *L) {
    mp_tensor *a, *b;
    parts(L, 1, &a, &b);
    mp_tensor *u = mp_lua_tensor_push(L), *s = mp_lua_tensor_push(L), *vh = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_factored_svd(u, s, vh, a, b), "svd");
    return 3;
}

/* fm:eigenvalues() -> re, im [..., k]: the eigenvalues of BA (AB's nonzero ones and k - rank zeros). */
static int m_eigenvalues(lua_State *L) {
    mp_tensor *a, *b;
    parts(L, 1, &a, &b);
    if (a->shape[a->ndim - 2] != b->shape[b->ndim - 1])
        luaL_error(L, "eigenvalues: needs a square product (ldim == rdim), got %d and %d", (int)a->shape[a->ndim - 2],
                   (int)b->shape[b->ndim - 1]);
    mp_tensor *ba = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_matmul(ba, b, a), "eigenvalues");
    mp_tensor *re = mp_lua_tensor_push(L), *im = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_eig(re, im, ba), "eigenvalues");
    return 2;
}

/* fm:norm(): the Frobenius norm of AB, sqrt(sum S^2): a number (2-D), else a Tensor of the leading dims. */
static int m_norm(lua_State *L) {
    mp_tensor *a, *b;
    parts(L, 1, &a, &b);
    mp_tensor u = {0}, s = {0}, vh = {0};
    mp_status st = mp_tensor_factored_svd(&u, &s, &vh, a, b);
    mp_tensor_free(&u);
    mp_tensor_free(&vh);
    mp_lua_tensor_try(L, st, "norm");
    int nd = s.ndim - 1;
    int64_t r = s.shape[nd], batch = (int64_t)(r ? s.numel / (size_t)r : 1);
    if (r == 0) {
        batch = 1;
        for (int i = 0; i < nd; i++) batch *= s.shape[i];
    }
    mp_tensor *out = NULL;
    if (nd > 0) {
        out = mp_lua_tensor_push(L);
        st = mp_tensor_init(out, nd, s.shape);
        if (st != MP_OK) mp_tensor_free(&s);
        mp_lua_tensor_try(L, st, "norm");
    }
    for (int64_t i = 0; i < batch; i++) {
        double acc = 0;
        for (int64_t j = 0; j < r; j++) acc += (double)s.data[i * r + j] * s.data[i * r + j];
        if (out) out->data[i] = (float)sqrt(acc);
        else lua_pushnumber(L, sqrt(acc));
    }
    mp_tensor_free(&s);
    return 1;
}

/* fm:T(): the transpose, FactoredMatrix(B^T, A^T). */
static int m_T(lua_State *L) {
    mp_tensor *a, *b;
    parts(L, 1, &a, &b);
    int top = lua_gettop(L);
    mp_lua_tensor_try(L, mp_tensor_transpose(mp_lua_tensor_push(L), b, b->ndim - 2, b->ndim - 1), "T");
    mp_lua_tensor_try(L, mp_tensor_transpose(mp_lua_tensor_push(L), a, a->ndim - 2, a->ndim - 1), "T");
    mp_lua_factored_push(L, top + 1, top + 2, "T");
    return 1;
}

/* Pushes x @ y for the Tensors at absolute indices xi, yi. */
static mp_tensor *push_mm(lua_State *L, int xi, int yi, const char *fn) {
    mp_tensor *r = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_matmul(r, mp_lua_tensor_check(L, xi), mp_lua_tensor_check(L, yi)), fn);
    return r;
}

/* Pushes t with a dim of extent 1 inserted at d (negative: from the end) or removed (squeeze). */
static void push_unsq(lua_State *L, int ti, int d, int squeeze, const char *fn) {
    mp_tensor *t = mp_lua_tensor_check(L, ti);
    mp_tensor *r = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, squeeze ? mp_tensor_squeeze(r, t, t->ndim + d) : mp_tensor_unsqueeze(r, t, t->ndim + 1 + d), fn);
    mp_lua_tensor_keep(L, ti);
}

/* matmul / rmatmul's operand: the Tensor x at 2 (a table converted in
 * place), refused when it tracks gradients and when 0-dim; the product's ldim
 * (m), rdim (n) and mdim. A at 3, B at 4 stay where parts() put them. */
static mp_tensor *operand(lua_State *L, const mp_tensor *a, const mp_tensor *b, const char *fn, int64_t *m,
                          int64_t *n, int64_t *mdim) {
    mp_tensor *x = mp_lua_tensor_arg(L, 2);
    if (lua_gettop(L) > 4) lua_replace(L, 2);
    mp_lua_ag_refuse(L, 2, 0, fn);
    int nd = a->ndim;
    int64_t k = a->shape[nd - 1];
    *m = a->shape[nd - 2];
    *n = b->shape[nd - 1];
    *mdim = *m < k ? *m : k;
    if (*n < *mdim) *mdim = *n;
    if (x->ndim < 1) luaL_error(L, "%s: x must be at least 1-D, got a 0-dim Tensor", fn);
    return x;
}

/* fm:matmul(x) = fm @ x (TL's __matmul__): x a FactoredMatrix: (fm @ x.A) @ x.B;
 * a 1-D Tensor: the vector A (B x); a Tensor [..., n, p]: FactoredMatrix(A, B x)
 * when rdim > mdim, else FactoredMatrix(AB, x). */
static int m_matmul(lua_State *L) {
    const char *fn = "matmul";
    lua_settop(L, 2);
    mp_tensor *a, *b;
    parts(L, 1, &a, &b); /* 3: A, 4: B */
    if (luaL_testudata(L, 2, MP_FACTORED_MT)) {
        lua_getiuservalue(L, 2, 1); /* 5: x.A */
        lua_pushcfunction(L, m_matmul);
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 5);
        lua_call(L, 2, 1); /* 6: fm @ x.A */
        lua_pushcfunction(L, m_matmul);
        lua_insert(L, 6);
        lua_getiuservalue(L, 2, 2);
        lua_call(L, 2, 1);
        return 1;
    }
    int64_t m, n, mdim;
    mp_tensor *x = operand(L, a, b, fn, &m, &n, &mdim);
    if (x->shape[x->ndim - (x->ndim < 2 ? 1 : 2)] != n)
        luaL_error(L, "%s: x's %s dim must equal rdim %d, got %d", fn, x->ndim < 2 ? "only" : "second-to-last", (int)n,
                   (int)x->shape[x->ndim - (x->ndim < 2 ? 1 : 2)]);
    if (x->ndim < 2) {
        push_mm(L, 4, 2, fn);           /* 5: B x [..., k] */
        push_unsq(L, 5, -1, 0, fn);     /* 6: [..., k, 1] */
        push_mm(L, 3, 6, fn);           /* 7: [..., m, 1] */
        push_unsq(L, 7, -1, 1, fn);     /* 8: [..., m] */
        return 1;
    }
    if (n > mdim) {
        push_mm(L, 4, 2, fn);
        mp_lua_factored_push(L, 3, 5, fn);
    } else {
        push_mm(L, 3, 4, fn);
        mp_lua_factored_push(L, 5, 2, fn);
    }
    return 1;
}

/* fm:rmatmul(x) = x @ fm (TL's __rmatmul__): x a 1-D Tensor: the vector (x A) B;
 * a Tensor [..., p, m]: FactoredMatrix(x A, B) when ldim > mdim, else
 * FactoredMatrix(x, AB). */
static int m_rmatmul(lua_State *L) {
    const char *fn = "rmatmul";
    lua_settop(L, 2);
    mp_tensor *a, *b;
    parts(L, 1, &a, &b); /* 3: A, 4: B */
    int64_t m, n, mdim;
    mp_tensor *x = operand(L, a, b, fn, &m, &n, &mdim);
    if (x->shape[x->ndim - 1] != m)
        luaL_error(L, "%s: x's last dim must equal ldim %d, got %d", fn, (int)m, (int)x->shape[x->ndim - 1]);
    if (x->ndim < 2) {
        push_unsq(L, 2, -2, 0, fn); /* 5: [1, m] */
        push_mm(L, 5, 3, fn);       /* 6: [..., 1, k] */
        push_mm(L, 6, 4, fn);       /* 7: [..., 1, n] */
        push_unsq(L, 7, -2, 1, fn); /* 8: [..., n] */
        return 1;
    }
    if (m > mdim) {
        push_mm(L, 2, 3, fn);
        mp_lua_factored_push(L, 5, 4, fn);
    } else {
        push_mm(L, 3, 4, fn);
        mp_lua_factored_push(L, 2, 5, fn);
    }
    return 1;
}

/* fm:get_corner([n = 3]): AB[..., :n, :n] from A[..., :n, :] @ B[..., :, :n]. */
static int m_get_corner(lua_State *L) {
    lua_Integer c = mp_lua_arg_optint(L, 2, "get_corner", "n", 3, 0, INT32_MAX);
    lua_settop(L, 1);
    mp_tensor *a, *b;
    parts(L, 1, &a, &b); /* 2: A, 3: B */
    int nd = a->ndim;
    int64_t m = a->shape[nd - 2], n = b->shape[nd - 1];
    mp_lua_tensor_try(L, mp_tensor_slice(mp_lua_tensor_push(L), a, nd - 2, 0, c < m ? c : m, 1), "get_corner");
    mp_lua_tensor_try(L, mp_tensor_slice(mp_lua_tensor_push(L), b, nd - 1, 0, c < n ? c : n, 1), "get_corner");
    push_mm(L, 4, 5, "get_corner");
    return 1;
}

static int fm_tostring(lua_State *L) {
    mp_tensor *a, *b;
    parts(L, 1, &a, &b);
    char sa[128], sb[128];
    mp_tensor_shape_str(a->ndim, a->shape, sa, sizeof sa);
    mp_tensor_shape_str(b->ndim, b->shape, sb, sizeof sb);
    lua_pushfstring(L, "FactoredMatrix(A %s, B %s)", sa, sb);
    return 1;
}

static const luaL_Reg methods[] = {
    {"svd", m_svd},         {"eigenvalues", m_eigenvalues}, {"norm", m_norm},          {"T", m_T},
    {"matmul", m_matmul},   {"rmatmul", m_rmatmul},         {"get_corner", m_get_corner}, {NULL, NULL},
};

static const luaL_Reg meta[] = {
    {"__index", NULL}, /* fm_index with the methods table as its upvalue */
    {"__tostring", fm_tostring},
    {NULL, NULL},
};

/* Creates the FactoredMatrix metatable and adds mp.FactoredMatrix to the module table at the top. */
void mp_lua_open_factored(lua_State *L) {
    luaL_newmetatable(L, MP_FACTORED_MT);
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);
    lua_pushcclosure(L, fm_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_factored);
    lua_setfield(L, -2, "FactoredMatrix");
}
