/* lintervene.c — interventions as hooks: mp.ablate / mp.patch / mp.steer /
 * mp.scale build the C descriptors of hooks/intervene.h (userdata
 * "mechprobe.Intervention" holding one, and the Tensor it points to), Lua
 * functions called at hook points with a view of the activation, and the
 * reading of a `fwd_hooks` list into a hook registry.
 * Heads and positions are 0-based, as in hook names and TransformerLens;
 * a negative position counts from the end of the sequence (-1 the last). */
#include "lmodel.h"
#include "intervene.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IV_MT "mechprobe.Intervention"

/* The userdata holds the C descriptor (hooks/intervene.h); its user value 1 is
 * the Tensor behind iv->data (patch source, mean reference, steering vector),
 * which keeps that memory alive. */
typedef mp_intervention lintervention;

static int iv_gc(lua_State *L) {
    lintervention *iv = luaL_checkudata(L, 1, IV_MT);
    mp_intervention_free(iv);
    return 0;
}

static int iv_tostring(lua_State *L) {
    lintervention *iv = luaL_checkudata(L, 1, IV_MT);
    lua_pushfstring(L, "Intervention(%s%s)", mp_intervention_name(iv->kind), iv->head >= 0 ? " of one head" : "");
    return 1;
}

/* Points the descriptor at the Tensor t (kept alive as user value 1 by the caller). */
static void iv_set_data(lintervention *iv, const mp_tensor *t) {
    iv->data = t->data;
    iv->n_data = t->numel;
    iv->data_ndim = t->ndim;
    for (int i = 0; i < t->ndim && i < MP_INTERVENTION_MAX_DIM; i++) iv->data_shape[i] = t->shape[i];
}

/* Options common to every intervention: head=, positions= (0-based); and
 * scale= (steer). opt is the options argument's index; fn names the function. */
static lintervention *push_iv(lua_State *L, mp_intervention_kind kind, int opt, const char *fn) {
    static const char *const known[] = {"head", "positions", NULL},
                             *known_steer[] = {"scale", "head", "positions", NULL};
    mp_lua_opt_check(L, opt, fn, kind == MP_INTERVENTION_STEER ? known_steer : known);
    lintervention *iv = lua_newuserdatauv(L, sizeof *iv, 1);
    memset(iv, 0, sizeof *iv);
    iv->kind = kind;
    iv->head = -1;
    iv->scale = 1.0f;
    luaL_setmetatable(L, IV_MT);
    if (opt && lua_istable(L, opt)) {
        iv->head = (int)mp_lua_opt_int(L, opt, fn, "head", -1, 0, INT_MAX);
        if (lua_getfield(L, opt, "positions") != LUA_TNIL) {
            int pi = lua_gettop(L);
            if (lua_type(L, pi) == LUA_TNUMBER) {
                iv->pos[iv->npos++] = (int)mp_lua_int_at(L, pi, fn, "option 'positions'", -INT_MAX, INT_MAX);
            } else {
                if (lua_type(L, pi) != LUA_TTABLE)
                    luaL_error(L, "%s: option 'positions' must be an integer or a list of integers, got %s", fn,
                               luaL_typename(L, pi));
                lua_Integer n = luaL_len(L, pi);
                if (n > 64) luaL_error(L, "%s: option 'positions' has %I entries (at most 64)", fn, n);
                for (lua_Integer i = 1; i <= n; i++) {
                    lua_geti(L, pi, i);
                    const char *what = lua_pushfstring(L, "option 'positions'[%I]", i);
                    iv->pos[iv->npos++] = (int)mp_lua_int_at(L, -2, fn, what, -INT_MAX, INT_MAX);
                    lua_pop(L, 2);
                }
            }
        }
        lua_pop(L, 1);
        iv->scale = (float)mp_lua_opt_num(L, opt, fn, "scale", iv->scale);
    }
    return iv;
}

/* mp.ablate.zero([{head=, positions=}]) */
static int l_ablate_zero(lua_State *L) {
    push_iv(L, MP_INTERVENTION_ZERO, 1, "mp.ablate.zero");
    return 1;
}

/* mp.ablate.mean(reference [, {head=, positions=}]): reference is the hook's
 * activation captured on other inputs ([B,T,...], or [B,H,T,S] for patterns);
 * its mean over batch and positions replaces the activation. */
static int l_ablate_mean(lua_State *L) {
    mp_tensor *ref = mp_lua_tensor_check(L, 1);
    if (ref->ndim < 3) luaL_argerror(L, 1, "a captured activation [B,T,...] or pattern [B,H,T,S] expected");
    lintervention *iv = push_iv(L, MP_INTERVENTION_MEAN, 2, "mp.ablate.mean");
    iv_set_data(iv, ref);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* mp.patch(source [, {head=, positions=}]): copy values from a cached run. */
static int l_patch(lua_State *L) {
    mp_lua_tensor_check(L, 1);
    lintervention *iv = push_iv(L, MP_INTERVENTION_PATCH, 2, "mp.patch");
    int ivi = lua_gettop(L);
    iv_set_data(iv, mp_lua_tensor_check(L, 1));
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, ivi, 1);
    return 1;
}

/* mp.steer(vector [, {scale=, head=, positions=}]): add scale * vector. */
static int l_steer(lua_State *L) {
    luaL_checkany(L, 1);
    lintervention *iv = push_iv(L, MP_INTERVENTION_STEER, 2, "mp.steer");
    int ivi = lua_gettop(L);
    iv_set_data(iv, mp_lua_tensor_arg(L, 1));
    if (lua_gettop(L) == ivi) lua_pushvalue(L, 1); /* it was a Tensor already */
    lua_setiuservalue(L, ivi, 1);
    return 1;
}

/* mp.scale(factor [, {head=, positions=}]): multiply the activation. */
static int l_scale(lua_State *L) {
    float s = (float)luaL_checknumber(L, 1);
    lintervention *iv = push_iv(L, MP_INTERVENTION_SCALE, 2, "mp.scale");
    iv->scale = s;
    return 1;
}

/* ---- Lua function hooks ----
 * A Lua error must never longjmp through the C forward pass (it would skip the
 * forward's cleanup and leak its workspace): everything a hook does in Lua runs
 * under lua_pcall; a failure is recorded in the hook table (field "error") and
 * the C callback returns non-zero, which stops the forward through its normal
 * cleanup path; mp_lua_hooks_rethrow raises the recorded error afterwards. */

typedef struct {
    lua_State *L;
    int tbl;   /* absolute stack index of the table holding the functions */
    int key;
} lfnhook;

typedef struct {
    lfnhook *h;
    const mp_hook_info *info;
    float *data;
    mp_storage *st; /* the view's storage, one reference ours: invalidated whatever happens */
} hook_call;

/* Runs under lua_pcall with (call record, function): calls the Lua function
 * with a view of the activation and its info table, and copies a returned
 * Tensor into the activation. (Stack indices of the caller's frame, such as
 * the hook table's, are not valid here.) */
static int hook_call_body(lua_State *L) {
    hook_call *c = lua_touserdata(L, 1);
    const mp_hook_info *info = c->info;
    lua_settop(L, 2);
    c->st = mp_lua_storage_external(L, c->data, info->numel);
    mp_lua_tensor_on(L, c->st, 0, info->ndim, info->shape);
    lua_createtable(L, 0, 6);
    lua_pushstring(L, info->name); lua_setfield(L, -2, "name");
    lua_pushinteger(L, info->layer); lua_setfield(L, -2, "layer");
    lua_pushinteger(L, info->axis + 1); lua_setfield(L, -2, "axis");
    lua_pushinteger(L, info->offset); lua_setfield(L, -2, "offset");
    lua_pushinteger(L, info->pos0); lua_setfield(L, -2, "pos0");
    lua_createtable(L, info->ndim, 0);
    for (int i = 0; i < info->ndim; i++) { lua_pushinteger(L, info->full[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "full_shape");
    lua_Debug ar;
    lua_pushvalue(L, 2);
    lua_getinfo(L, ">S", &ar); /* where the function is defined, for a wrong return */
    char where[LUA_IDSIZE + 32];
    if (ar.linedefined > 0) snprintf(where, sizeof where, "%s:%d", ar.short_src, ar.linedefined);
    else snprintf(where, sizeof where, "%s", ar.short_src); /* a C function: "[C]" */
    lua_call(L, 2, 1);
    mp_tensor *ret = mp_lua_tensor_test(L, -1); /* raises for a released or detached Tensor */
    if (ret) {
        int same = ret->ndim == info->ndim;
        for (int i = 0; same && i < info->ndim; i++) same = ret->shape[i] == info->shape[i];
        if (!same) { /* hook_record_error puts "hook at <name>: " in front */
            char want[96], got[96];
            mp_tensor_shape_str(info->ndim, info->shape, want, sizeof want);
            mp_tensor_shape_str(ret->ndim, ret->shape, got, sizeof got);
            return luaL_error(L, "the hook function (defined at %s) returned a Tensor of shape %s; the activation "
                                 "it was given is %s (return that shape, or nothing to keep in-place edits)",
                              where, got, want);
        }
        if (ret->data != c->data) memmove(c->data, ret->data, info->numel * sizeof(float)); /* else: the view */
    }
    return 0;
}

/* Runs under lua_pcall with (error object, hook table, hook name as a light
 * userdata): records the first error of a forward in the table's "error"
 * field, a string with the hook's name in front. It allocates, so a memory
 * error here must not escape into the C forward pass either. */
static int hook_record_error(lua_State *L) {
    if (lua_type(L, 1) == LUA_TSTRING) {
        lua_pushfstring(L, "hook at %s: %s", (const char *)lua_touserdata(L, 3), lua_tostring(L, 1));
        lua_replace(L, 1);
    }
    if (lua_getfield(L, 2, "error") == LUA_TNIL) {
        lua_pushvalue(L, 1);
        lua_setfield(L, 2, "error");
    }
    return 0;
}

static int lua_hook_cb(void *user, const mp_hook_info *info, float *data) {
    lfnhook *h = user;
    lua_State *L = h->L;
    int top = lua_gettop(L);
    /* nothing below may raise outside a protected call: not even the pushes */
    if (!lua_checkstack(L, 8)) {
        mp_error(MP_ERR_NOMEM, "hook at %s: out of memory for the Lua stack", info->name);
        return 1;
    }
    hook_call c = {h, info, data, NULL};
    lua_pushcfunction(L, hook_call_body);
    lua_pushlightuserdata(L, &c);
    lua_rawgeti(L, h->tbl, h->key);
    int rc = 0;
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
        /* the status carries the message; the error object itself (the first
         * one, a string with the hook's name in front, any other object as it
         * is) is raised by mp_lua_hooks_rethrow when it could be recorded */
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        mp_error(MP_ERR_HOOK, "%s", msg ? msg : "the Lua hook function raised an error"); /* mp_hooks adds the name */
        int e = lua_gettop(L);
        lua_pushcfunction(L, hook_record_error);
        lua_pushvalue(L, e);
        lua_pushvalue(L, h->tbl);
        lua_pushlightuserdata(L, (void *)info->name);
        lua_pcall(L, 3, 0, 0); /* a failure (out of memory) leaves the status alone to report it */
        rc = 1;
    }
    /* the view and every view made of it in the callback (kept, or closed) */
    mp_lua_storage_invalidate(c.st, MP_TENSOR_WHY_HOOK);
    mp_lua_storage_release(c.st);
    lua_settop(L, top);
    return rc;
}

void mp_lua_hooks_rethrow(lua_State *L, int ftbl) {
    if (!ftbl) return;
    if (lua_getfield(L, ftbl, "error") != LUA_TNIL) {
        lua_pushnil(L);
        lua_setfield(L, ftbl, "error");
        lua_error(L);
    }
    lua_pop(L, 1);
}

int mp_lua_add_fwd_hooks(lua_State *L, int opt, guard *g, int n_pos) {
    return mp_lua_add_hooks_opt(L, opt, g->hooks, n_pos, "fwd_hooks");
}

int mp_lua_add_hooks_opt(lua_State *L, int opt, mp_hooks *hooks, int n_pos, const char *field) {
    lua_newtable(L); /* function table */
    int ftbl = lua_gettop(L);
    if (!opt || !lua_istable(L, opt)) return ftbl;
    if (lua_getfield(L, opt, field) == LUA_TNIL) { lua_pop(L, 1); return ftbl; }
    int hl = lua_gettop(L);
    if (!lua_istable(L, hl))
        luaL_error(L, "%s: a list of {name, function or intervention} expected, got %s", field, luaL_typename(L, hl));
    lua_Integer n = luaL_len(L, hl);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, hl, i);
        int e = lua_gettop(L);
        if (!lua_istable(L, e)) luaL_error(L, "%s[%d]: expected {name, function or intervention}", field, (int)i);
        lua_geti(L, e, 1);
        const char *name = lua_tostring(L, -1);
        if (!name) luaL_error(L, "%s[%d][1]: hook name (string) expected", field, (int)i);
        lua_geti(L, e, 2);
        mp_status st;
        if (lua_isfunction(L, -1)) {
            lua_pushvalue(L, -1);
            int key = (int)luaL_len(L, ftbl) + 1;
            lua_rawseti(L, ftbl, key);
            lfnhook *h = lua_newuserdatauv(L, sizeof *h, 0);
            h->L = L;
            h->tbl = ftbl;
            h->key = key;
            lua_rawseti(L, ftbl, -key); /* keep the hook record alive beside its function */
            st = mp_hooks_add(hooks, name, lua_hook_cb, h);
        } else if (luaL_testudata(L, -1, IV_MT)) {
            lintervention *iv = lua_touserdata(L, -1);
            for (int k = 0; n_pos > 0 && k < iv->npos; k++)
                if (iv->pos[k] >= n_pos || iv->pos[k] < -n_pos)
                    return luaL_error(L, "%s[%d]: %s at position %d, but the input has T = %d positions "
                                         "(0..%d, or -%d..-1 from the end)", field, (int)i, mp_intervention_name(iv->kind),
                                      iv->pos[k], n_pos, n_pos - 1, n_pos);
            /* its Tensor must still be valid (a hook view made into a source is
             * invalidated when its callback returns): raises if it is not. The
             * forward reads it through a private view, a reference to its
             * storage of our own: a hook that closes the script's Tensor
             * (a <close> variable) cannot free the memory under the forward. */
            if (lua_getiuservalue(L, -1, 1) != LUA_TNIL) {
                const mp_tensor *src = mp_lua_tensor_test(L, -1);
                if (src) {
                    mp_tensor *own = mp_lua_tensor_on(L, src->st, (size_t)(src->data - src->st->data), src->ndim,
                                                      src->shape);
                    iv_set_data(iv, own);
                    lua_rawseti(L, ftbl, -(int)(2000000 + i)); /* alive for the whole call */
                }
            }
            lua_pop(L, 1);
            lua_pushvalue(L, -1);
            lua_rawseti(L, ftbl, -(int)(1000000 + i)); /* keep it alive */
            st = mp_hooks_add(hooks, name, mp_intervention_apply, iv);
        } else {
            return luaL_error(L, "%s[%d][2]: a function or an intervention (mp.ablate.zero(), "
                                       "mp.patch(...), mp.steer(...)) expected, got %s", field, (int)i, luaL_typename(L, -1));
        }
        if (st) luaL_error(L, "%s[%d]: %s", field, (int)i, mp_last_error());
        lua_settop(L, e - 1);
    }
    lua_settop(L, ftbl);
    return ftbl;
}

void mp_lua_open_interventions(lua_State *L) {
    luaL_newmetatable(L, IV_MT);
    lua_pushcfunction(L, iv_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, iv_gc); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_ablate_zero); lua_setfield(L, -2, "zero");
    lua_pushcfunction(L, l_ablate_mean); lua_setfield(L, -2, "mean");
    lua_setfield(L, -2, "ablate");
    lua_pushcfunction(L, l_patch); lua_setfield(L, -2, "patch");
    lua_pushcfunction(L, l_steer); lua_setfield(L, -2, "steer");
    lua_pushcfunction(L, l_scale); lua_setfield(L, -2, "scale");
}
