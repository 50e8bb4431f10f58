/* lparams.c — the Model's parameter methods: m:params() lists the parameter
 * names (DESIGN.md checkpoint names, one per layer: "blocks.0.attn.wq"), and
 * m:param(name) returns a writable Tensor that views the parameter in the
 * model's own memory (PyTorch nn.Linear layout [out, in]), so a script can set
 * weights by hand (a construction) or read them (analyses).
 *
 * Lifetime: the views of a model are keys of a weak table (one per model,
 * found in a registry table keyed weakly by the model), so views a script
 * drops are collected. The Model methods that free or replace the parameter
 * memory (close, __close, __gc, dequantize, train_step, train: training
 * dequantizes or copies the weights first, mp_model_make_owned) are wrapped:
 * after they run, or fail, the model's views are detached when the model was
 * closed or its mp_model.mem_gen changed, so a later use of a view raises an
 * error naming why instead of touching freed memory. A view keeps its model
 * alive (a second registry table, keyed weakly by the view, maps it to the
 * model). A model with quantized weights gives no views at all until
 * m:dequantize() (its float32 norms and biases would be replaced by training);
 * parameters memory-mapped read-only from a llama2.c file are refused too.
 * The registry stays here, wrapping the Model metatable's methods, rather
 * than in lmodel.c. */
#include <stdio.h>
#include <string.h>

#include "lmodel.h"

#define VIEWS_KEY "mechprobe.param_views"
#define OWNER_KEY "mechprobe.param_owner"

/* Pushes a new table whose keys are weak. */
static void push_weak_table(lua_State *L) {
    lua_newtable(L);
    lua_newtable(L);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
}

/* Pushes the registry's weak-keyed table under key, creating it the first time. */
static void push_weak_registry(lua_State *L, const char *key) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
    lua_pop(L, 1);
    push_weak_table(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

/* Pushes the list of views of the model at idx (creating it when `create`), or nil. */
static int push_view_list(lua_State *L, int idx, int create) {
    idx = lua_absindex(L, idx);
    push_weak_registry(L, VIEWS_KEY);
    lua_pushvalue(L, idx);
    if (lua_rawget(L, -2) != LUA_TTABLE && create) {
        lua_pop(L, 1);
        push_weak_table(L); /* the model's views, as weak keys */
        lua_pushvalue(L, idx);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    lua_remove(L, -2);
    return lua_type(L, -1) == LUA_TTABLE;
}

/* Detaches every view of the model at idx (idempotent), saying why. */
static void detach_views(lua_State *L, int idx, const char *why) {
    idx = lua_absindex(L, idx);
    if (!push_view_list(L, idx, 0)) { lua_pop(L, 1); return; }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1); /* the value (true) */
        mp_tensor *t = luaL_testudata(L, -1, MP_TENSOR_MT);
        if (t) mp_lua_tensor_detach(t, why);
    }
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, VIEWS_KEY);
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/* Finds `name` ("embed", "blocks.3.attn.wq", ...): its description and, for a
 * per-layer tensor, the layer; 0 when there is no such parameter. */
static int find_param(const mp_model *m, const char *name, mp_param_desc *out, int *layer) {
    mp_param_desc d[MP_PARAM_MAX];
    int n = mp_params_describe(&m->cfg, &m->p, d);
    for (int i = 0; i < n; i++) {
        if (!d[i].per_layer) {
            if (strcmp(d[i].name, name) == 0) { *out = d[i]; *layer = -1; return 1; }
            continue;
        }
        for (int l = 0; l < m->cfg.n_layer; l++) {
            char buf[96];
            snprintf(buf, sizeof buf, d[i].name, l);
            if (strcmp(buf, name) == 0) { *out = d[i]; *layer = l; return 1; }
        }
    }
    return 0;
}

/* m:params() -> {"embed", "blocks.0.ln1.weight", ...} in checkpoint order */
static int model_params(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    mp_param_desc d[MP_PARAM_MAX];
    int n = mp_params_describe(&lm->m->cfg, &lm->m->p, d);
    lua_newtable(L);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int layers = d[i].per_layer ? lm->m->cfg.n_layer : 1;
        for (int l = 0; l < layers; l++) {
            char buf[96];
            if (d[i].per_layer) snprintf(buf, sizeof buf, d[i].name, l);
            else snprintf(buf, sizeof buf, "%s", d[i].name);
            lua_pushstring(L, buf);
            lua_rawseti(L, -2, ++k);
        }
    }
    return 1;
}

/* m:param(name) -> Tensor viewing the parameter (writes change the model) */
static int model_param(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    const char *name = luaL_checkstring(L, 2);
    mp_param_desc d;
    int layer;
    if (!find_param(lm->m, name, &d, &layer))
        return luaL_error(L, "m:param: no parameter \"%s\" in this model (m:params() lists them)", name);
    if (mp_model_is_quantized(lm->m) || !d.p)
        return luaL_error(L, "m:param: the model has quantized weights: call m:dequantize() first (views of \"%s\" "
                             "would not survive training, which dequantizes)", name);
    size_t per = d.per_layer ? d.n / (size_t)lm->m->cfg.n_layer : d.n;
    float *p = d.p + (layer > 0 ? (size_t)layer * per : 0);
    size_t total = mp_config_n_params(&lm->m->cfg);
    if (!lm->m->owned || p < lm->m->owned || p + per > lm->m->owned + total)
        return luaL_error(L, "m:param: \"%s\" is read-only (memory-mapped from %s)", name,
                          lm->m->source[0] ? lm->m->source : "its file");
    int64_t shape[2] = {d.shape[0], d.shape[1]};
    mp_lua_tensor_wrap(L, d.ndim, shape, p);
    push_view_list(L, 1, 1);
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    push_weak_registry(L, OWNER_KEY);
    lua_pushvalue(L, -2);
    lua_pushvalue(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 1;
}

/* Wrapper of a method that can free or replace the parameters (upvalue 1:
 * the original; upvalue 2: why its views go when it replaces the memory):
 * runs it protected, then detaches the model's views if the model was closed
 * or its memory generation changed (a failed training step may have
 * dequantized already), then returns its results or raises its error. */
static int releasing(lua_State *L) {
    int n = lua_gettop(L);
    lmodel *lm = luaL_testudata(L, 1, MODEL_MT);
    unsigned long gen = lm && lm->m ? lm->m->mem_gen : 0;
    lua_pushvalue(L, 1);                 /* the model, kept below the call */
    lua_pushvalue(L, lua_upvalueindex(1));
    for (int i = 1; i <= n; i++) lua_pushvalue(L, i);
    int rc = lua_pcall(L, n, LUA_MULTRET, 0);
    if (lm && !lm->m) detach_views(L, n + 1, "the model was closed");
    else if (lm && lm->m->mem_gen != gen) detach_views(L, n + 1, lua_tostring(L, lua_upvalueindex(2)));
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L) - (n + 1);
}

static void wrap_field(lua_State *L, int tbl, const char *key, const char *why) {
    tbl = lua_absindex(L, tbl);
    lua_getfield(L, tbl, key);
    if (lua_isnil(L, -1)) { lua_pop(L, 1); return; }
    lua_pushstring(L, why);
    lua_pushcclosure(L, releasing, 2);
    lua_setfield(L, tbl, key);
}

void mp_lua_open_params(lua_State *L) {
    luaL_getmetatable(L, MODEL_MT);
    if (!lua_istable(L, -1)) luaL_error(L, "mp_lua_open_params: the Model metatable is not registered");
    static const char *const replaced = "the model's parameter memory was replaced; call m:param again";
    wrap_field(L, -1, "__gc", replaced);
    wrap_field(L, -1, "__close", replaced);
    if (lua_getfield(L, -1, "__methods") == LUA_TTABLE) {
        wrap_field(L, -1, "close", replaced);
        wrap_field(L, -1, "dequantize", "m:dequantize() replaced the parameter memory; call m:param again");
        wrap_field(L, -1, "train_step", "training copied the parameters into new memory; call m:param again");
        wrap_field(L, -1, "train", "training copied the parameters into new memory; call m:param again");
        lua_pushcfunction(L, model_params); lua_setfield(L, -2, "params");
        lua_pushcfunction(L, model_param); lua_setfield(L, -2, "param");
    }
    lua_pop(L, 2);
}
