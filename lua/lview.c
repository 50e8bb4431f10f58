/* lview.c — Lua bindings of webview/ as the table `mp.view`: interactive,
 * self-contained HTML pages (docs/VIEW.md). Layers, heads and the batch row
 * are 0-based, as in hook names and h5py.
 *
 *   mp.view.run(run_file, {out = "DIR/index.html", title =, batch = 0,
 *                          layers = {0, 2} | nil (all), attention = true | false | nil (when captured),
 *                          geometry = true | false | nil (when captured), acts = {...} | nil (defaults),
 *                          tokens = {"The", " cat", ...} | nil (ids shown), max_mb = 1024})
 *       -> {bytes, T, layers, heads, acts, geometry, seconds}
 *       acts: a list of series, each a string ("loss", "logit:ID", "norm:HOOK",
 *       "HOOK:UNIT", "HOOK:HEAD.UNIT", "defaults": the default series) or a table {hook = "blocks.3.hook_resid_post",
 *       direction = Tensor[d] or table, label = "..."} (the dot product per token);
 *       an empty list: no activations view. attention/geometry true: an error when
 *       the run lacks the datasets; false: left out.
 *   mp.view.report(results_dir, {out = "DIR/report.html", title =})
 *       -> {bytes, rows, figures, seconds}
 * Both write the page atomically; a bad input raises an input error naming the
 * file and what is missing, and leaves no page. */
#include "mp_lua.h"

#include <string.h>

#include "view.h"

static int tristate(lua_State *L, int o, const char *fn, const char *key) {
    if (mp_lua_opt_get(L, o, key) == LUA_TNIL) {
        lua_pop(L, 1);
        return -1;
    }
    lua_pop(L, 1);
    return mp_lua_opt_bool(L, o, fn, key, 0);
}

static void push_stats(lua_State *L, const mp_view_stats *s, int report) {
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)s->bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushnumber(L, s->seconds);
    lua_setfield(L, -2, "seconds");
    if (report) {
        lua_pushinteger(L, s->n_rows);
        lua_setfield(L, -2, "rows");
        lua_pushinteger(L, s->n_figures);
        lua_setfield(L, -2, "figures");
        return;
    }
    lua_pushinteger(L, s->T);
    lua_setfield(L, -2, "T");
    lua_pushinteger(L, s->n_layers);
    lua_setfield(L, -2, "layers");
    lua_pushinteger(L, s->n_heads);
    lua_setfield(L, -2, "heads");
    lua_pushinteger(L, s->n_acts);
    lua_setfield(L, -2, "acts");
    lua_pushinteger(L, s->n_geometry);
    lua_setfield(L, -2, "geometry");
}

/* series i of the list at t into a (a direction's Tensor stays on the stack) */
static void read_series(lua_State *L, int t, lua_Integer i, mp_view_act *a) {
    lua_geti(L, t, i);
    if (lua_type(L, -1) == LUA_TSTRING) {
        mp_status st = mp_view_act_parse(lua_tostring(L, -1), a);
        if (st) mp_lua_fail(L, st);
        lua_pop(L, 1);
        return;
    }
    if (!lua_istable(L, -1))
        luaL_error(L, "mp.view.run: acts[%I] must be a string or a table {hook =, direction =}", i);
    const int s = lua_gettop(L);
    memset(a, 0, sizeof *a);
    a->head = -1;
    a->kind = MP_VIEW_ACT_DIRECTION;
    if (lua_getfield(L, s, "hook") != LUA_TSTRING)
        luaL_error(L, "mp.view.run: acts[%I].hook must be a hook name (a string)", i);
    size_t n;
    const char *hook = lua_tolstring(L, -1, &n);
    if (n >= sizeof a->hook) luaL_error(L, "mp.view.run: acts[%I].hook is too long", i);
    memcpy(a->hook, hook, n + 1);
    lua_pop(L, 1);
    if (lua_getfield(L, s, "direction") == LUA_TNIL) luaL_error(L, "mp.view.run: acts[%I].direction is missing", i);
    mp_tensor *d = mp_lua_tensor_arg(L, lua_gettop(L));
    if (d->ndim != 1 || d->numel == 0)
        luaL_error(L, "mp.view.run: acts[%I].direction must be a vector (1-D, not empty)", i);
    a->dir = d->data;
    a->dir_n = d->numel;
    lua_insert(L, s); /* keep the Tensor below the series table, which goes */
    if (lua_getfield(L, s + 1, "label") == LUA_TSTRING) snprintf(a->label, sizeof a->label, "%s", lua_tostring(L, -1));
    else snprintf(a->label, sizeof a->label, "%s . direction", a->hook);
    lua_pop(L, 2);
}

static int l_run(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const known[] = {"out", "title", "batch", "layers", "attention", "geometry", "acts", "tokens",
                                        "max_mb", NULL};
    mp_lua_opt_check(L, 2, "mp.view.run", known);
    mp_view_run_params p = mp_view_run_params_default();
    const char *out = mp_lua_opt_str(L, 2, "mp.view.run", "out", NULL);
    if (!out) return luaL_error(L, "mp.view.run: option 'out' (the page's .html path) is required");
    p.title = mp_lua_opt_str(L, 2, "mp.view.run", "title", NULL);
    p.batch = (int)mp_lua_opt_int(L, 2, "mp.view.run", "batch", 0, 0, INT32_MAX);
    p.attention = tristate(L, 2, "mp.view.run", "attention");
    p.geometry = tristate(L, 2, "mp.view.run", "geometry");
    p.max_bytes = (uint64_t)mp_lua_opt_int(L, 2, "mp.view.run", "max_mb", 1024, 1, 1 << 20) << 20;
    if (mp_lua_opt_type(L, 2, "mp.view.run", "layers", LUA_TTABLE)) {
        const int t = lua_gettop(L);
        const lua_Integer n = luaL_len(L, t);
        if (n < 1 || n > 1 << 16) return luaL_error(L, "mp.view.run: layers must list 1 to 65536 layers");
        int *layers = lua_newuserdatauv(L, (size_t)n * sizeof *layers, 0);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, t, i);
            lua_pushfstring(L, "option 'layers'[%I]", i);
            layers[i - 1] = (int)mp_lua_int_at(L, -2, "mp.view.run", lua_tostring(L, -1), 0, INT32_MAX);
            lua_pop(L, 1);
            lua_pop(L, 1);
        }
        p.layers = layers;
        p.n_layers = (int)n;
    }
    if (mp_lua_opt_type(L, 2, "mp.view.run", "acts", LUA_TTABLE)) {
        const int t = lua_gettop(L);
        const lua_Integer n = luaL_len(L, t);
        if (n > 4096) return luaL_error(L, "mp.view.run: at most 4096 activation series");
        mp_view_act *acts = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *acts, 0);
        for (lua_Integer i = 1; i <= n; i++) read_series(L, t, i, &acts[i - 1]);
        p.acts = acts;
        p.n_acts = (int)n;
    }
    if (mp_lua_opt_type(L, 2, "mp.view.run", "tokens", LUA_TTABLE)) {
        const int t = lua_gettop(L);
        const lua_Integer n = luaL_len(L, t);
        if (n > INT32_MAX / 2) return luaL_error(L, "mp.view.run: too many token strings");
        const char **s = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *s, 0);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_geti(L, t, i) != LUA_TSTRING)
                return luaL_error(L, "mp.view.run: tokens[%I] must be a string (the token's text)", i);
            s[i - 1] = lua_tostring(L, -1); /* held by the table, which stays on the stack */
            lua_pop(L, 1);
        }
        p.token_str = s;
        p.n_token_str = (int)n;
    }
    mp_view_stats stats;
    mp_status st = mp_view_run(path, out, &p, &stats);
    if (st) return mp_lua_fail(L, st);
    push_stats(L, &stats, 0);
    return 1;
}

static int l_report(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const known[] = {"out", "title", NULL};
    mp_lua_opt_check(L, 2, "mp.view.report", known);
    const char *out = mp_lua_opt_str(L, 2, "mp.view.report", "out", NULL);
    if (!out) return luaL_error(L, "mp.view.report: option 'out' (the page's .html path) is required");
    const char *title = mp_lua_opt_str(L, 2, "mp.view.report", "title", NULL);
    mp_view_stats stats;
    mp_status st = mp_view_report(dir, out, title, &stats);
    if (st) return mp_lua_fail(L, st);
    push_stats(L, &stats, 1);
    return 1;
}

void mp_lua_open_view(lua_State *L) {
    static const luaL_Reg fns[] = {{"run", l_run}, {"report", l_report}, {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "view");
}
