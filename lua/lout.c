/* lout.c — atomic outputs from Lua: mp.output(path) returns a
 * "mechprobe.Output" for results written in several steps (a run file that is
 * captured, then extended with /stats). Everything is written to out.tmp, a
 * temporary name next to `path` (mp_out: a non-regular or symbolic-link
 * destination is refused; the temporary is removed on SIGINT/SIGTERM/SIGHUP/
 * SIGXFSZ); out:commit() renames it over `path`; out:abort(), __close and
 * __gc remove it when it was not committed, so an error half way leaves
 * nothing under the final name. mp.check_output(out, input...) refuses an
 * output that is one of the inputs (capture --out equal to --model). */
#include "mp_lua.h"

#include <string.h>

#define OUT_MT "mechprobe.Output"

typedef struct {
    mp_out o;
    int open;   /* 1 until committed or aborted */
} lout;

static int l_output(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lout *x = lua_newuserdatauv(L, sizeof *x, 0);
    mp_out_init(&x->o);
    x->open = 0;
    luaL_setmetatable(L, OUT_MT);
    mp_status st = mp_out_begin(&x->o, path);
    if (st != MP_OK) return mp_lua_fail(L, st);
    /* The temporary is written by name from Lua (io.open(out.tmp), capture
     * replaces it): the descriptor stays open only to hold the lock that
     * keeps the stale cleanup away; commit syncs it by name and checks that
     * the name is still a regular file (not a link swapped in). */
    mp_out_close_fd(&x->o);
    x->open = 1;
    return 1;
}

static lout *check_open(lua_State *L) {
    lout *x = luaL_checkudata(L, 1, OUT_MT);
    if (!x->open) luaL_error(L, "output is already committed or aborted");
    return x;
}

/* out:commit() -> final path */
static int m_commit(lua_State *L) {
    lout *x = check_open(L);
    lua_pushstring(L, x->o.path);
    x->open = 0;
    mp_status st = mp_out_commit(&x->o, 1);
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 1;
}

static int mt_abort(lua_State *L) {
    lout *x = luaL_checkudata(L, 1, OUT_MT);
    if (x->open) mp_out_abort(&x->o);
    x->open = 0;
    return 0;
}

static int mt_index(lua_State *L) {
    lout *x = luaL_checkudata(L, 1, OUT_MT);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "commit")) lua_pushcfunction(L, m_commit);
    else if (!strcmp(k, "abort")) lua_pushcfunction(L, mt_abort);
    else if (!strcmp(k, "tmp") || !strcmp(k, "path")) {
        if (!x->open) return luaL_error(L, "output is already committed or aborted");
        lua_pushstring(L, !strcmp(k, "tmp") ? x->o.tmp : x->o.path);
    } else lua_pushnil(L);
    return 1;
}

static int mt_tostring(lua_State *L) {
    lout *x = luaL_checkudata(L, 1, OUT_MT);
    if (x->open) lua_pushfstring(L, "Output(%s, writing %s)", x->o.path, x->o.tmp);
    else lua_pushliteral(L, "Output(closed)");
    return 1;
}

/* mp.check_output(out, input...) — raises an error when `out` is the same
 * file as one of the inputs (nil inputs are skipped): writing it would
 * replace that input (mp_out_check_inputs). */
static int l_check_output(lua_State *L) {
    const char *out = luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    const char **in = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *in, 0);
    int k = 0;
    for (int i = 2; i <= n + 1; i++)
        if (!lua_isnil(L, i)) in[k++] = luaL_checkstring(L, i);
    mp_status st = mp_out_check_inputs(out, in, k);
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 0;
}

void mp_lua_open_output(lua_State *L) {
    static const luaL_Reg meta[] = {
        {"__index", mt_index}, {"__gc", mt_abort}, {"__close", mt_abort}, {"__tostring", mt_tostring}, {NULL, NULL},
    };
    if (luaL_newmetatable(L, OUT_MT)) luaL_setfuncs(L, meta, 0);
    lua_pop(L, 1);
    lua_pushcfunction(L, l_output);
    lua_setfield(L, -2, "output");
    lua_pushcfunction(L, l_check_output);
    lua_setfield(L, -2, "check_output");
}
