/* lsae_splice.c — SAEs attached to a model from Lua (SAELens's
 * HookedSAETransformer): m:add_sae(sae [, {use_error_term = false}]),
 * m:reset_saes(), m:saes(), m:run_with_saes(tokens, {saes = ..., ...}) and
 * m:run_with_cache_with_saes(...), over hooks/sae_splice.h. The model keeps
 * the list (every run path sees it); this file keeps the SAE handles alive
 * while attached (a weak-keyed table model -> {sae, ...}) and refuses to
 * close an attached SAE. */
#include "lmodel.h"

#include <string.h>

#include "sae.h"
#include "sae_splice.h"

static const char REFS_KEY = 'r'; /* registry[&REFS_KEY]: weak-keyed {model userdata -> {sae userdata, ...}} */

/* Pushes the list of SAE handles attached to the model at idx (created when absent). */
static void push_refs(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &REFS_KEY);
    lua_pushvalue(L, idx);
    if (lua_rawget(L, -2) == LUA_TNIL) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, idx);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    lua_remove(L, -2);
}

/* Rebuilds the handle list of the model at idx from its C list (after a removal). */
static void sync_refs(lua_State *L, int idx, const mp_model *m) {
    idx = lua_absindex(L, idx);
    push_refs(L, idx);
    int old = lua_gettop(L);
    lua_newtable(L);
    int fresh = lua_gettop(L), k = 0;
    for (int i = 0; i < mp_model_n_saes(m); i++) {
        mp_sae *s = mp_model_sae(m, i, NULL);
        for (lua_Integer j = 1, n = luaL_len(L, old); j <= n; j++) {
            lua_rawgeti(L, old, j);
            if (mp_lua_sae_check(L, -1) == s) {
                lua_rawseti(L, fresh, ++k);
                break;
            }
            lua_pop(L, 1);
        }
    }
    lua_rawgetp(L, LUA_REGISTRYINDEX, &REFS_KEY);
    lua_pushvalue(L, idx);
    lua_pushvalue(L, fresh);
    lua_rawset(L, -3);
    lua_settop(L, old - 1);
}

static void attach(lua_State *L, lmodel *lm, int mi, int si, int use_err, const char *fn) {
    mp_sae *s = mp_lua_sae_check(L, si);
    if (mp_model_add_sae(lm->m, s, use_err)) luaL_error(L, "%s: %s", fn, mp_last_error());
    push_refs(L, mi);
    lua_pushvalue(L, si);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
}

/* m:add_sae(sae [, {use_error_term = false}]) -> m */
static int m_add_sae(lua_State *L) {
    static const char *const known[] = {"use_error_term", NULL};
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, "add_sae", 1);
    mp_lua_opt_check(L, 3, "add_sae", known);
    int use_err = mp_lua_opt_bool(L, lua_istable(L, 3) ? 3 : 0, "add_sae", "use_error_term", 0);
    attach(L, lm, 1, 2, use_err, "add_sae");
    lua_settop(L, 1);
    return 1;
}

/* m:reset_saes() -> m */
static int m_reset_saes(lua_State *L) {
    lua_settop(L, 1);
    lmodel *lm = mp_lua_model_busy(L, 1, "reset_saes", 1);
    mp_model_reset_saes(lm->m);
    sync_refs(L, 1, lm->m);
    lua_settop(L, 1);
    return 1;
}

/* m:saes() -> {sae, ...} in attachment order (a new table) */
static int m_saes(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    sync_refs(L, 1, lm->m); /* the C list decides (a method that replaced the model keeps none) */
    push_refs(L, 1);
    lua_Integer n = luaL_len(L, -1);
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -2, i);
        lua_rawseti(L, -2, i);
    }
    return 1;
}

/* m:run_with_saes(tokens, {saes = sae | {sae, ...}, use_error_term = nil, <forward's options>}) and
 * m:run_with_cache_with_saes(...): the SAEs attached for this one call (SAELens's), then detached. */
static int run_with(lua_State *L, const char *method, const char *fn) {
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_check(L, 1);
    int use_err = 0;
    lua_newtable(L); /* the options passed on */
    int pass = lua_gettop(L);
    lua_newtable(L); /* the SAEs */
    int list = lua_gettop(L);
    if (lua_istable(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
            if (k && !strcmp(k, "saes")) {
                if (lua_istable(L, -1)) {
                    for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
                        lua_rawgeti(L, -1, i);
                        lua_rawseti(L, list, i);
                    }
                } else {
                    lua_pushvalue(L, -1);
                    lua_rawseti(L, list, 1);
                }
            } else if (k && !strcmp(k, "use_error_term")) {
                use_err = lua_toboolean(L, -1);
            } else {
                lua_pushvalue(L, -2);
                lua_pushvalue(L, -2);
                lua_rawset(L, pass);
            }
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, 3)) {
        return luaL_error(L, "%s: options table expected, got %s", fn, luaL_typename(L, 3));
    }
    lua_Integer n = luaL_len(L, list);
    if (n == 0) return luaL_error(L, "%s: option 'saes' (an SAE or a list of SAEs) is required", fn);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, list, i);
        mp_lua_sae_check(L, -1);
        lua_pop(L, 1);
    }
    const int before = mp_model_n_saes(lm->m);
    /* the call, protected, so that the SAEs are detached whatever happens */
    lua_getfield(L, 1, method);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, pass);
    int top = lua_gettop(L) - 4, rc = LUA_OK;
    for (lua_Integer i = 1; i <= n && rc == LUA_OK; i++) {
        lua_rawgeti(L, list, i);
        mp_sae *s = mp_lua_sae_check(L, -1);
        lua_pop(L, 1);
        if (mp_model_add_sae(lm->m, s, use_err)) {
            lua_pushfstring(L, "%s: %s", fn, mp_last_error());
            rc = LUA_ERRRUN;
        }
    }
    if (rc == LUA_OK) {
        for (lua_Integer i = 1; i <= n; i++) { /* keep the temporary ones alive too */
            push_refs(L, 1);
            lua_rawgeti(L, list, i);
            lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
            lua_pop(L, 1);
        }
        rc = lua_pcall(L, 3, LUA_MULTRET, 0);
    }
    while (mp_model_n_saes(lm->m) > before) mp_model_remove_sae(lm->m, mp_model_n_saes(lm->m) - 1);
    sync_refs(L, 1, lm->m);
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L) - top;
}

static int m_run_with_saes(lua_State *L) { return run_with(L, "forward", "run_with_saes"); }
static int m_run_with_cache_with_saes(lua_State *L) {
    return run_with(L, "run_with_cache", "run_with_cache_with_saes");
}

/* sae:close() / __close on an attached SAE would free memory the model reads: refused. */
static int attached_anywhere(lua_State *L, const mp_sae *s) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &REFS_KEY);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lmodel *lm = luaL_testudata(L, -2, MODEL_MT);
        for (int i = 0; lm && lm->m && i < mp_model_n_saes(lm->m); i++)
            if (mp_model_sae(lm->m, i, NULL) == s) {
                lua_pop(L, 3);
                return 1;
            }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

static int sae_close_checked(lua_State *L) {
    if (lua_type(L, 1) == LUA_TUSERDATA) {
        const mp_sae *s = mp_lua_sae_peek(L, 1);
        if (s && attached_anywhere(L, s))
            return luaL_error(L, "SAE at %s is attached to a model: m:reset_saes() before closing it", s->hook_name);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

void mp_lua_open_sae_splice(lua_State *L) {
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushstring(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &REFS_KEY);
    static const luaL_Reg mm[] = {{"add_sae", m_add_sae},
                                  {"reset_saes", m_reset_saes},
                                  {"saes", m_saes},
                                  {"run_with_saes", m_run_with_saes},
                                  {"run_with_cache_with_saes", m_run_with_cache_with_saes},
                                  {NULL, NULL}};
    luaL_getmetatable(L, MODEL_MT);
    lua_getfield(L, -1, "__methods");
    luaL_setfuncs(L, mm, 0);
    lua_pop(L, 2);
    /* close and __close of an SAE: refused while attached */
    luaL_getmetatable(L, MP_SAE_MT);
    lua_getfield(L, -1, "methods");
    lua_getfield(L, -1, "close");
    lua_pushcclosure(L, sae_close_checked, 1);
    lua_setfield(L, -2, "close");
    lua_pop(L, 1);
    lua_getfield(L, -1, "__close");
    lua_pushcclosure(L, sae_close_checked, 1);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
}
