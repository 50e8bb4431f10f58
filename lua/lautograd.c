/* lautograd.c — the Lua binding of the autograd core (analyze/autograd.h):
 * t:requires_grad_(), t:backward([grad] [, {retain_graph=}]), t:detach(),
 * t:zero_grad(), the fields t.grad / t.requires_grad / t.is_leaf / t.grad_fn
 * (served by ltensor.c's __index through mp_lua_ag_field), mp.no_grad(fn, ...)
 * and mp.is_grad_enabled(); and the hooks (lua/lautograd.h) through which
 * the Tensor's op bindings record their ops. Every backward rule is C. */
#include "lautograd.h"
#include "ltensor.h"

#include <string.h>

static mp_lua_tensor_ud *ud_test(lua_State *L, int idx) { return luaL_testudata(L, idx, MP_TENSOR_MT); }

mp_ag_node *mp_lua_ag_node(lua_State *L, int idx) {
    if (!idx || !mp_ag_live() || !mp_ag_enabled()) return NULL; /* untracked: no userdata lookup */
    mp_lua_tensor_ud *u = ud_test(L, idx);
    return u ? u->ag : NULL;
}

int mp_lua_ag_want(lua_State *L, int i1, int i2) {
    return mp_ag_live() && mp_ag_enabled() && (mp_lua_ag_node(L, i1) || mp_lua_ag_node(L, i2));
}

void mp_lua_ag_record(lua_State *L, const mp_ag_args *a, int n, const int *idx, const mp_tensor *const *x,
                      const char *fn) {
    if (!mp_ag_live() || !mp_ag_enabled()) return;
    mp_ag_node *one[3], **in = n <= 3 ? one : lua_newuserdatauv(L, (size_t)n * sizeof *in, 0);
    int any = 0;
    for (int i = 0; i < n; i++) any |= (in[i] = mp_lua_ag_node(L, idx[i])) != NULL;
    mp_lua_tensor_ud *r = lua_touserdata(L, n <= 3 ? -1 : -2);
    if (any) {
        mp_ag_node *nd;
        mp_status st = mp_ag_record(&nd, a, n, in, x, &r->t);
        if (st != MP_OK) luaL_error(L, "%s: %s", fn, mp_last_error());
        mp_ag_unref(r->ag);
        r->ag = nd;
    }
    if (n > 3) lua_pop(L, 1);
}

void mp_lua_ag_record2(lua_State *L, mp_ag_op op, int i1, const mp_tensor *x1, int i2, const mp_tensor *x2,
                       const char *fn) {
    mp_ag_args a;
    memset(&a, 0, sizeof a);
    a.op = op;
    int idx[2] = {i1, i2};
    const mp_tensor *x[2] = {x1, x2};
    mp_lua_ag_record(L, &a, i2 ? 2 : 1, idx, x, fn);
}

void mp_lua_ag_refuse(lua_State *L, int i1, int i2, const char *fn) {
    if (mp_lua_ag_want(L, i1, i2))
        luaL_error(L, "%s: no gradient rule for this op, and an input requires grad: call it on t:detach(), or "
                      "inside mp.no_grad(fn)", fn);
}

void mp_lua_ag_inplace(lua_State *L, int idx, const char *fn) {
    if (!mp_ag_live()) return; /* no node: nothing saved, nothing requires grad */
    mp_lua_tensor_ud *u = ud_test(L, idx);
    if (!u) return;
    if (u->ag && mp_ag_enabled()) {
        char s[128];
        mp_tensor_shape_str(u->t.ndim, u->t.shape, s, sizeof s);
        luaL_error(L, "%s: in-place op on a Tensor %s that requires grad: use the out-of-place op, or "
                      "mp.no_grad(function() ... end) to update a parameter", fn, s);
    }
    mp_ag_bump(u->t.st);
}

mp_ag_node *mp_lua_ag_leaf(lua_State *L, int idx) {
    mp_lua_tensor_ud *u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, idx);
    if (u->ag) return u->ag;
    mp_lua_tensor_try(L, mp_ag_leaf(&u->ag, u->t.ndim, u->t.shape), "requires_grad_");
    return u->ag;
}

void mp_lua_ag_gc(mp_lua_tensor_ud *u) {
    mp_ag_unref(u->ag);
    u->ag = NULL;
}

/* Pushes a Tensor on g's storage (the same memory: later accumulations show). */
static void push_on(lua_State *L, const mp_tensor *g) {
    mp_tensor *t = mp_lua_tensor_push(L);
    mp_lua_tensor_try(L, mp_tensor_view(t, g, 0, g->ndim, g->shape), NULL);
}

int mp_lua_ag_field(lua_State *L, int idx, const char *key) {
    mp_lua_tensor_ud *u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, idx);
    if (strcmp(key, "grad") == 0) {
        mp_tensor *g = u->ag && mp_ag_is_leaf(u->ag) ? mp_ag_grad(u->ag) : NULL;
        if (g) push_on(L, g);
        else lua_pushnil(L);
    } else if (strcmp(key, "requires_grad") == 0) {
        lua_pushboolean(L, u->ag != NULL);
    } else if (strcmp(key, "is_leaf") == 0) {
        lua_pushboolean(L, !u->ag || mp_ag_is_leaf(u->ag));
    } else if (strcmp(key, "grad_fn") == 0) {
        if (u->ag && !mp_ag_is_leaf(u->ag)) lua_pushstring(L, mp_ag_op_name(mp_ag_node_op(u->ag)));
        else lua_pushnil(L);
    } else {
        return 0;
    }
    return 1;
}

void mp_lua_ag_set_grad(lua_State *L, int idx, int vidx) {
    mp_lua_tensor_ud *u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, idx);
    const mp_tensor *g = lua_isnil(L, vidx) ? NULL : mp_lua_tensor_check(L, vidx);
    if (!u->ag || !mp_ag_is_leaf(u->ag)) {
        if (!g) return; /* nothing to clear */
        luaL_error(L, "grad: only a Tensor that requires grad and is a leaf (t:requires_grad_()) has a grad");
    }
    mp_lua_tensor_try(L, mp_ag_set_grad(u->ag, g), NULL);
}

/* ---- methods ---- */

/* t:requires_grad_([b]): t becomes a leaf whose gradient backward accumulates
 * in t.grad (b false: stops tracking it). */
static int m_requires_grad_(lua_State *L) {
    mp_lua_tensor_ud *u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, 1);
    int on = lua_isnone(L, 2) ? 1 : lua_toboolean(L, 2);
    if (u->ag && !mp_ag_is_leaf(u->ag))
        return luaL_error(L, "requires_grad_: the Tensor is the result of %s, not a leaf: use t:detach():requires_grad_()",
                          mp_ag_op_name(mp_ag_node_op(u->ag)));
    if (on) mp_lua_ag_leaf(L, 1);
    else mp_lua_ag_gc(u);
    lua_settop(L, 1);
    return 1;
}

/* t:detach(): the same memory, without gradient tracking. */
static int m_detach(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_check(L, 1);
    mp_lua_tensor_view(L, 1, 0, t->ndim, t->shape);
    return 1;
}

/* t:zero_grad(): clears t.grad (as torch's set_to_none). */
static int m_zero_grad(lua_State *L) {
    mp_lua_tensor_ud *u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, 1);
    if (u->ag && mp_ag_is_leaf(u->ag)) mp_ag_set_grad(u->ag, NULL);
    lua_settop(L, 1);
    return 1;
}

/* t:backward([gradient] [, {retain_graph = false}]) */
static int m_backward(lua_State *L) {
    lua_settop(L, 3);
    mp_lua_tensor_ud *u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, 1);
    int opt = 3;
    /* backward{retain_graph = true}: an options table in place of the gradient */
    if (lua_istable(L, 2) && !ud_test(L, 2) && lua_rawlen(L, 2) == 0 && lua_isnil(L, 3)) {
        lua_pushvalue(L, 2);
        lua_replace(L, 3);
        lua_pushnil(L);
        lua_replace(L, 2);
    }
    static const char *const known[] = {"retain_graph", NULL};
    mp_lua_opt_check(L, opt, "backward", known);
    int retain = mp_lua_opt_bool(L, opt, "backward", "retain_graph", 0);
    const mp_tensor *g = lua_isnil(L, 2) ? NULL : mp_lua_tensor_arg(L, 2);
    u = (mp_lua_tensor_ud *)mp_lua_tensor_check(L, 1); /* the options may have run Lua */
    if (!u->ag) {
        char s[128];
        mp_tensor_shape_str(u->t.ndim, u->t.shape, s, sizeof s);
        return luaL_error(L, "backward: the Tensor %s does not require grad (no input of the ops that made it "
                             "had t:requires_grad_())", s);
    }
    mp_lua_tensor_try(L, mp_ag_backward(u->ag, g, retain), NULL);
    return 0;
}

/* ---- module functions ---- */

/* mp.no_grad(fn, ...): fn(...) with grad mode off (nothing recorded); its results. */
static int l_no_grad(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int old = mp_ag_set_enabled(0);
    int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    mp_ag_set_enabled(old);
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

static int l_is_grad_enabled(lua_State *L) {
    lua_pushboolean(L, mp_ag_enabled());
    return 1;
}

void mp_lua_ag_methods(lua_State *L) {
    static const luaL_Reg m[] = {
        {"requires_grad_", m_requires_grad_}, {"detach", m_detach}, {"zero_grad", m_zero_grad},
        {"backward", m_backward}, {NULL, NULL},
    };
    luaL_setfuncs(L, m, 0);
}

void mp_lua_ag_functions(lua_State *L) {
    static const luaL_Reg f[] = {{"no_grad", l_no_grad}, {"is_grad_enabled", l_is_grad_enabled}, {NULL, NULL}};
    luaL_setfuncs(L, f, 0);
}
