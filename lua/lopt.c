/* lopt.c — the one reader of options tables for every Lua function, and of
 * every integer argument (see mp_lua.h): unknown keys are errors
 * ("mp.model.new: unknown option 'rope_thetaa'"), every value's type is
 * checked ("mp.plot.figure: option 'width' must be a number, got string"),
 * booleans are true/false only, and every integer, argument or option, is
 * checked by mp_lua_int_at with one message shape ("generate: option
 * 'max_new_tokens' must be an integer in [0, 2147483646], got 2.5"); a dim
 * or an index (1..n, or -n..-1 from the end) by mp_lua_index_at, in the same
 * shape with two ranges ("sum: argument #1 (dim) must be an integer in
 * [-2, -1] or [1, 2], got 0"). */
#include "mp_lua.h"

#include <string.h>

void mp_lua_opt_check(lua_State *L, int idx, const char *fn, const char *const *known) {
    if (!idx || lua_isnoneornil(L, idx)) return;
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx)) luaL_error(L, "%s: options must be a table, got %s", fn, luaL_typename(L, idx));
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) {
            const char *k = luaL_tolstring(L, -1, NULL);
            luaL_error(L, "%s: unknown option %s (option names are strings)", fn, k);
        }
        const char *k = lua_tostring(L, -1);
        int ok = 0;
        for (const char *const *p = known; p && *p && !ok; p++) ok = strcmp(*p, k) == 0;
        if (!ok) luaL_error(L, "%s: unknown option '%s'", fn, k);
    }
}

int mp_lua_opt_get(lua_State *L, int idx, const char *key) {
    if (!idx || !lua_istable(L, idx)) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    return lua_getfield(L, idx, key);
}

int mp_lua_opt_type(lua_State *L, int idx, const char *fn, const char *key, int type) {
    int t = mp_lua_opt_get(L, idx, key);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    if (t != type)
        luaL_error(L, "%s: option '%s' must be a %s, got %s", fn, key, lua_typename(L, type), luaL_typename(L, -1));
    return 1;
}

/* Pushes the value at idx as the messages show it: as Lua prints a number
 * (-1, 1.7, 1e+300, nan, inf), the type name of anything else. */
static const char *push_got(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TNUMBER) {
        lua_pushvalue(L, idx);
        return luaL_tolstring(L, -1, NULL);
    }
    return lua_pushstring(L, luaL_typename(L, idx));
}

/* The integral value at idx in *v (checked before any cast), or 0. */
static int int_value(lua_State *L, int idx, lua_Integer *v) {
    int isint = 0;
    *v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &isint) : 0;
    return isint;
}

lua_Integer mp_lua_int_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo, lua_Integer hi) {
    idx = lua_absindex(L, idx);
    lua_Integer v;
    if (int_value(L, idx, &v) && v >= lo && v <= hi) return v;
    const char *got = push_got(L, idx);
    return luaL_error(L, "%s%s%s must be an integer in [%I, %I], got %s", fn ? fn : "", fn ? ": " : "", what, lo, hi,
                      got);
}

lua_Integer mp_lua_int2_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo1, lua_Integer hi1,
                           lua_Integer lo2, lua_Integer hi2) {
    idx = lua_absindex(L, idx);
    lua_Integer v;
    if (int_value(L, idx, &v) && ((v >= lo1 && v <= hi1) || (v >= lo2 && v <= hi2))) return v;
    const char *got = push_got(L, idx), *pre = fn ? fn : "", *sep = fn ? ": " : "";
    if (lo1 > hi1 && lo2 > hi2) /* nothing is valid: say so with the range that is empty */
        return luaL_error(L, "%s%s%s must be an integer in [%I, %I], got %s (the range is empty)", pre, sep, what, lo2,
                          hi2, got);
    if (lo1 > hi1 || lo2 > hi2) {
        lua_Integer lo = lo1 > hi1 ? lo2 : lo1, hi = lo1 > hi1 ? hi2 : hi1;
        return luaL_error(L, "%s%s%s must be an integer in [%I, %I], got %s", pre, sep, what, lo, hi, got);
    }
    return luaL_error(L, "%s%s%s must be an integer in [%I, %I] or [%I, %I], got %s", pre, sep, what, lo1, hi1, lo2,
                      hi2, got);
}

lua_Integer mp_lua_index_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer n, int past_end) {
    lua_Integer v = mp_lua_int2_at(L, idx, fn, what, -n, -1, 1, n + (past_end ? 1 : 0));
    return v < 0 ? n + v : v - 1;
}

const char *mp_lua_argname(lua_State *L, int arg, const char *name) {
    int n = lua_absindex(L, arg);
    lua_Debug ar;
    if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.namewhat && strcmp(ar.namewhat, "method") == 0)
        n--; /* m:f(x): x is argument #1 to the caller */
    return lua_pushfstring(L, "argument #%d (%s)", n, name);
}

lua_Integer mp_lua_arg_int(lua_State *L, int arg, const char *fn, const char *name, lua_Integer lo, lua_Integer hi) {
    int idx = lua_absindex(L, arg);
    const char *what = mp_lua_argname(L, idx, name);
    lua_Integer v = mp_lua_int_at(L, idx, fn, what, lo, hi);
    lua_pop(L, 1);
    return v;
}

lua_Integer mp_lua_arg_optint(lua_State *L, int arg, const char *fn, const char *name, lua_Integer def, lua_Integer lo,
                              lua_Integer hi) {
    return lua_isnoneornil(L, arg) ? def : mp_lua_arg_int(L, arg, fn, name, lo, hi);
}

lua_Integer mp_lua_arg_index(lua_State *L, int arg, const char *fn, const char *name, lua_Integer n, int past_end) {
    int idx = lua_absindex(L, arg);
    const char *what = mp_lua_argname(L, idx, name);
    lua_Integer j = mp_lua_index_at(L, idx, fn, what, n, past_end);
    lua_pop(L, 1);
    return j;
}

lua_Integer mp_lua_opt_int(lua_State *L, int idx, const char *fn, const char *key, lua_Integer def, lua_Integer lo,
                           lua_Integer hi) {
    int t = mp_lua_opt_get(L, idx, key);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    const char *what = lua_pushfstring(L, "option '%s'", key);
    lua_Integer v = mp_lua_int_at(L, -2, fn, what, lo, hi);
    lua_pop(L, 2);
    return v;
}

lua_Number mp_lua_opt_num(lua_State *L, int idx, const char *fn, const char *key, lua_Number def) {
    if (!mp_lua_opt_type(L, idx, fn, key, LUA_TNUMBER)) return def;
    lua_Number v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

int mp_lua_opt_bool(lua_State *L, int idx, const char *fn, const char *key, int def) {
    if (!mp_lua_opt_type(L, idx, fn, key, LUA_TBOOLEAN)) return def;
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

const char *mp_lua_opt_str(lua_State *L, int idx, const char *fn, const char *key, const char *def) {
    if (!mp_lua_opt_type(L, idx, fn, key, LUA_TSTRING)) {
        lua_pushnil(L);
        return def;
    }
    return lua_tostring(L, -1); /* stays on the stack: a string made by __index would else be garbage */
}

int mp_lua_opt_enum(lua_State *L, int idx, const char *fn, const char *key, int def, const char *const *names) {
    int t = mp_lua_opt_get(L, idx, key);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    const char *s = t == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0) {
            lua_pop(L, 1);
            return i;
        }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; names[i]; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addchar(&b, '"');
        luaL_addstring(&b, names[i]);
        luaL_addchar(&b, '"');
    }
    luaL_pushresult(&b);
    const char *list = lua_tostring(L, -1);
    const char *got = s ? lua_pushfstring(L, "\"%s\"", s) : luaL_typename(L, -2);
    luaL_error(L, "%s: %s must be one of %s (got %s)", fn, key, list, got);
    return def;
}

const char *mp_lua_opt_globs(lua_State *L, int idx, const char *fn, const char *key, const char *def) {
    int t = mp_lua_opt_get(L, idx, key);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        lua_pushstring(L, def);
        return lua_tostring(L, -1);
    }
    if (t == LUA_TSTRING) return lua_tostring(L, -1);
    if (t != LUA_TTABLE)
        luaL_error(L, "%s: option '%s' must be a string or a list of strings, got %s", fn, key, luaL_typename(L, -1));
    luaL_Buffer b;
    int tb = lua_gettop(L);
    luaL_buffinit(L, &b);
    lua_Integer n = luaL_len(L, tb);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, tb, i);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: option '%s' must be a string or a list of strings, got %s in the list", fn, key,
                       luaL_typename(L, -1));
        if (i > 1) luaL_addchar(&b, ',');
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_remove(L, tb);
    return lua_tostring(L, -1);
}
