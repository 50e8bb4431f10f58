/* lconfig.c — the model config in Lua, generated from MP_CONFIG_TABLE
 * (runtime/config.h): the m.config table, the config options of
 * mp.model.new, and mp.model.config_fields() (the table itself). */
#include "lmodel.h"

#include <limits.h>
#include <string.h>

void mp_lua_config_push(lua_State *L, const mp_model *m) {
    const mp_config *c = &m->cfg;
    lua_newtable(L);
    for (int i = 0; i < mp_config_n_fields; i++) {
        const mp_config_field *f = &mp_config_fields[i];
        if (!mp_config_shown(c, i)) continue;
        double v = mp_config_value(c, i);
        switch (f->type) {
        case MP_CF_INT: lua_pushinteger(L, (lua_Integer)v); break;
        case MP_CF_FLOAT: lua_pushnumber(L, v); break;
        case MP_CF_BOOL:
        case MP_CF_NOTBOOL: lua_pushboolean(L, v != 0.0); break;
        case MP_CF_KIND: lua_pushstring(L, mp_config_kind_name(c, i, 1)); break;
        case MP_CF_FLOATS: {
            int n;
            const float *x = mp_config_floats(c, i, &n);
            lua_createtable(L, n, 0);
            for (int k = 0; k < n; k++) {
                lua_pushnumber(L, x[k]);
                lua_rawseti(L, -2, k + 1);
            }
            break;
        }
        }
        lua_setfield(L, -2, f->lua);
    }
    /* what is not config: the count of rope_freqs, the vocabulary hint, the file, sizes */
    lua_pushinteger(L, c->n_rope_freqs); lua_setfield(L, -2, "n_rope_freqs");
    if (m->tokenizer[0]) { lua_pushstring(L, m->tokenizer); lua_setfield(L, -2, "tokenizer"); }
    lua_pushstring(L, m->format); lua_setfield(L, -2, "format");
    lua_pushstring(L, m->source); lua_setfield(L, -2, "source");
    lua_pushinteger(L, (lua_Integer)mp_config_n_params(c)); lua_setfield(L, -2, "n_params");
    lua_pushinteger(L, (lua_Integer)mp_model_param_bytes(m)); lua_setfield(L, -2, "memory"); /* bytes as held */
}

/* Field i of *c from opts[its Lua key] (absent: left as it is); returns 1
 * when the option was given. */
static int read_field(lua_State *L, int idx, const char *fn, mp_config *c, int i) {
    const mp_config_field *f = &mp_config_fields[i];
    int t = mp_lua_opt_get(L, idx, f->lua);
    lua_pop(L, 1);
    if (t == LUA_TNIL) return 0;
    switch (f->type) {
    case MP_CF_INT: mp_config_set(c, i, (double)mp_lua_opt_int(L, idx, fn, f->lua, 0, 0, INT_MAX)); break;
    case MP_CF_FLOAT: mp_config_set(c, i, mp_lua_opt_num(L, idx, fn, f->lua, 0.0)); break;
    case MP_CF_BOOL:
    case MP_CF_NOTBOOL: mp_config_set(c, i, mp_lua_opt_bool(L, idx, fn, f->lua, 0)); break;
    case MP_CF_KIND: {
        const char *names[MP_POS_COUNT + 2]; /* the longest kind table, "gelu_tanh" and NULL */
        int n = f->n_names;
        for (int k = 0; k < n; k++) names[k] = f->names[k];
        if (!strcmp(f->attr, "mlp")) names[n++] = "gelu_tanh"; /* the mlp label */
        names[n] = NULL;
        mp_config_set_kind(c, i, names[mp_lua_opt_enum(L, idx, fn, f->lua, 0, names)], 1);
        break;
    }
    case MP_CF_FLOATS: {
        double v[MP_ROPE_FREQS_MAX];
        mp_lua_opt_type(L, idx, fn, f->lua, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        if (n > MP_ROPE_FREQS_MAX)
            luaL_error(L, "%s: option '%s' has %I values (at most %d)", fn, f->lua, n, MP_ROPE_FREQS_MAX);
        for (lua_Integer k = 1; k <= n; k++) {
            if (lua_geti(L, -1, k) != LUA_TNUMBER)
                luaL_error(L, "%s: option '%s' must be a list of numbers, got %s at %I", fn, f->lua,
                           luaL_typename(L, -1), k);
            v[k - 1] = lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        if (mp_config_set_floats(c, i, v, (size_t)n)) luaL_error(L, "%s: %s", fn, mp_last_error());
        break;
    }
    }
    return 1;
}

#define MAX_KEYS 64

void mp_lua_config_read(lua_State *L, int idx, const char *fn, const char *const *extra, mp_config *c) {
    const char *known[MAX_KEYS];
    int nk = 0, given[MAX_KEYS] = {0};
    for (int i = 0; i < mp_config_n_fields && nk < MAX_KEYS - 1; i++) known[nk++] = mp_config_fields[i].lua;
    for (int i = 0; extra && extra[i] && nk < MAX_KEYS - 1; i++) known[nk++] = extra[i];
    known[nk] = NULL;
    mp_lua_opt_check(L, idx, fn, known);
    *c = mp_config_default();
    for (int i = 0; i < mp_config_n_fields && i < MAX_KEYS; i++) {
        given[i] = read_field(L, idx, fn, c, i);
        if (!given[i] && (mp_config_fields[i].flags & MP_CF_REQ))
            luaL_error(L, "%s: '%s' is required", fn, mp_config_fields[i].lua);
    }
    /* the mlp label "gelu_tanh" sets gelu_tanh: an explicit false contradicts it */
    if (given[mp_config_field_find("gelu_tanh")] && !c->gelu_tanh) {
        if (mp_lua_opt_get(L, idx, "mlp") == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "gelu_tanh"))
            luaL_error(L, "%s: mlp = \"gelu_tanh\" contradicts gelu_tanh = false (use mlp = \"gelu\" for plain GELU)",
                       fn);
        lua_pop(L, 1);
    }
    /* defaults derived from other fields */
    mp_config_derive(c, given[mp_config_field_find("n_kv_head")], given[mp_config_field_find("d_head")],
                     given[mp_config_field_find("d_mlp")]);
}

int mp_lua_config_fields(lua_State *L) {
    static const char *const types[] = {"int", "float", "bool", "notbool", "kind", "floats"};
    lua_createtable(L, mp_config_n_fields, 0);
    for (int i = 0; i < mp_config_n_fields; i++) {
        const mp_config_field *f = &mp_config_fields[i];
        lua_createtable(L, 0, 4);
        lua_pushstring(L, f->lua); lua_setfield(L, -2, "key");
        lua_pushstring(L, f->attr); lua_setfield(L, -2, "attr");
        lua_pushstring(L, types[f->type]); lua_setfield(L, -2, "type");
        if (f->type == MP_CF_KIND) {
            lua_createtable(L, f->n_names, 0);
            for (int k = 0; k < f->n_names; k++) {
                lua_pushstring(L, f->names[k]);
                lua_rawseti(L, -2, k + 1);
            }
            lua_setfield(L, -2, "names");
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}
