/* lweights.c — the Model's weights from Lua: m:params() lists the parameter
 * names (DESIGN.md checkpoint names, one per layer: "blocks.0.attn.wq") and
 * m:param(name) returns a writable Tensor that views the parameter in the
 * model's own memory (PyTorch nn.Linear layout [out, in]); TransformerLens's
 * weight shortcuts (m.W_E, m.W_pos, m.W_U, m:W_Q(l), ..., b_*) return copies
 * in TL's shapes ([d_model, d_head] per head where we keep [out, in]) and
 * m:set_weight(name, [l,] t) writes a TL-shaped tensor back (the names,
 * shapes and copies are runtime/weights_tl.h's; this file binds them);
 * m:OV([l]) / m:QK([l]) give them as mp.FactoredMatrix (lua/lfactored.c); and
 * m:process_weights{...} binds runtime/weights_process.h.
 *
 * Lifetime of views: every view of a model's parameters (m:param's Tensors
 * and every view derived from them: rows, narrows, reshapes, views of views)
 * shares one storage per parameter memory, lm->pst. lmodel.c calls
 * mp_lua_params_detach where the parameter memory goes (close, __close, __gc,
 * dequantize, and the release of every busy mark, which covers training: it
 * dequantizes or copies the weights first, mp_model_make_owned);
 * m:process_weights calls it too (it may copy or untie the parameters). When
 * the model was closed or its mp_model.mem_gen moved since the storage was
 * made, it invalidates that storage, so a later use of any view raises an
 * error naming why instead of touching freed memory; the next m:param makes a
 * new one. A view keeps its model alive (the model is the view's user value,
 * which views of it inherit). A model with quantized weights gives no views
 * at all until m:dequantize() (its float32 norms and biases would be replaced
 * by training). Parameters memory-mapped read-only from a llama2.c file
 * give a copy (writes to it do not reach the model; m:set_weight refuses
 * them, naming mp.load's copy = true). m:param also takes TransformerLens's
 * names of the norm weights ("blocks.0.ln1.w", "ln_final.b", ...:
 * mp_tl_norm_param), a view of the same parameter. */
#include <stdio.h>
#include <string.h>

#include "lmodel.h"
#include "weights_process.h"
#include "weights_tl.h"

#define WHY_CLOSED "the model was closed"
#define WHY_REPLACED "the model's parameter memory was replaced (training, m:dequantize() and m:process_weights copy " \
                     "or untie the parameters); call m:param again"

void mp_lua_params_detach(lua_State *L, int idx, const char *why) {
    lmodel *lm = luaL_testudata(L, idx, MODEL_MT);
    if (!lm || !lm->pst || (lm->m && lm->m->mem_gen == lm->views_gen)) return;
    why = !lm->m ? WHY_CLOSED : why ? why : WHY_REPLACED;
    mp_lua_storage_invalidate(lm->pst, why); /* every view of it, however derived */
    mp_lua_storage_release(lm->pst);
    lm->pst = NULL;
}

/* Finds `name` ("embed", "blocks.3.attn.wq", ...): its description and, for a
 * per-layer tensor, the layer; 0 when there is no such parameter. */
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

/* m:param(name) -> Tensor viewing the parameter (writes change the model);
 * a copy when the parameters are a file's read-only memory map */
static int model_param(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    const char *name = luaL_checkstring(L, 2);
    mp_param_desc d;
    int layer;
    const int found = mp_param_find(lm->m, name, &d, &layer); /* or TL's name of a norm weight ("blocks.0.ln1.w") */
    if (found < 0) return luaL_error(L, "m:param: %s", mp_last_error());
    if (!found) return luaL_error(L, "m:param: no parameter \"%s\" in this model (m:params() lists them)", name);
    if (mp_model_is_quantized(lm->m) || !d.p)
        return luaL_error(L, "m:param: the model has quantized weights: call m:dequantize() first (views of \"%s\" "
                             "would not survive training, which dequantizes)", name);
    size_t per = d.per_layer ? d.n / (size_t)lm->m->cfg.n_layer : d.n;
    float *p = d.p + (layer > 0 ? (size_t)layer * per : 0);
    size_t total = mp_config_n_params(&lm->m->cfg);
    int64_t shape[2] = {d.shape[0], d.shape[1]};
    if (!lm->m->owned || p < lm->m->owned || p + per > lm->m->owned + total) {
        /* the file's read-only memory map: a copy (m:set_weight refuses to write, naming copy = true) */
        mp_tensor *t = mp_lua_tensor_new(L, d.ndim, shape);
        memcpy(t->data, p, per * sizeof(float));
        return 1;
    }
    mp_lua_params_detach(L, 1, NULL); /* views of an older memory go first: the storage is for this one */
    if (lm->pst && (lm->pst->data != lm->m->owned || lm->pst->n != total)) { /* replaced without a mem_gen move */
        mp_lua_storage_invalidate(lm->pst, WHY_REPLACED);
        mp_lua_storage_release(lm->pst);
        lm->pst = NULL;
    }
    if (!lm->pst) {
        lm->pst = mp_lua_storage_external(L, lm->m->owned, total);
        lm->views_gen = lm->m->mem_gen;
    }
    mp_lua_tensor_on(L, lm->pst, (size_t)(p - lm->m->owned), d.ndim, shape);
    lua_pushvalue(L, 1); /* the view (and every view of it) keeps the model alive */
    lua_setiuservalue(L, -2, 1);
    return 1;
}


/* ---- TransformerLens's weight shortcuts: copies in TL's shapes (runtime/weights_tl.h) ---- */

/* Resolves `name` on the model or raises "fn: <why>" (mp_tl_weight_info's message). */
static mp_tl_weight resolve(lua_State *L, const mp_model *m, const char *name, const char *fn) {
    mp_tl_weight w;
    if (mp_tl_weight_info(m, name, &w)) luaL_error(L, "%s: %s", fn, mp_last_error());
    return w;
}

/* The layer argument at idx (0-based), or -1 when absent/nil (all layers). */
static int layer_arg(lua_State *L, int idx, const mp_model *m, const char *name) {
    if (lua_isnoneornil(L, idx)) return -1;
    return (int)mp_lua_arg_int(L, idx, name, "layer", 0, m->cfg.n_layer - 1);
}

/* Pushes a copy of `name` (layer l, or every layer stacked [n_layer, ...] when l < 0). */
static void push_shortcut(lua_State *L, const mp_model *m, const char *name, int l) {
    mp_tl_weight w = resolve(L, m, name, name);
    int64_t shape[4];
    int nd = mp_tl_weight_shape(m, &w, l, shape);
    mp_tensor *t = mp_lua_tensor_new(L, nd, shape);
    if (mp_tl_weight_get(m, &w, l, t->data)) luaL_error(L, "%s: %s", name, mp_last_error());
}

/* m:W_Q(l) etc.: a copy of layer l (0-based) in TL's shape; m:W_Q() stacks the layers. */
static int shortcut_method(lua_State *L, const char *name) {
    lmodel *lm = mp_lua_model_check(L, 1);
    int l = layer_arg(L, 2, lm->m, name);
    push_shortcut(L, lm->m, name, l);
    return 1;
}
#define SHORTCUT(N) static int get_##N(lua_State *L) { return shortcut_method(L, #N); }
SHORTCUT(W_Q) SHORTCUT(W_K) SHORTCUT(W_V) SHORTCUT(_W_K) SHORTCUT(_W_V) SHORTCUT(W_O) SHORTCUT(W_in)
SHORTCUT(W_gate) SHORTCUT(W_out) SHORTCUT(b_Q) SHORTCUT(b_K) SHORTCUT(b_V) SHORTCUT(_b_K) SHORTCUT(_b_V)
SHORTCUT(b_O) SHORTCUT(b_in) SHORTCUT(b_gate) SHORTCUT(b_out)
#undef SHORTCUT

/* m:OV([l]) = FactoredMatrix(W_V, W_O) [.., H, D, D] and m:QK([l]) =
 * FactoredMatrix(W_Q, W_K^T) (TL's model.OV / model.QK; all layers stacked
 * without l). W_K and W_V are TL's: a GQA model's K/V heads repeated per query head. */
static int circuit(lua_State *L, const char *fn, const char *left, const char *right, int transpose) {
    lmodel *lm = mp_lua_model_check(L, 1);
    int l = layer_arg(L, 2, lm->m, fn);
    lua_settop(L, 2);
    push_shortcut(L, lm->m, left, l);
    push_shortcut(L, lm->m, right, l);
    if (transpose) { /* W_K [.., D, Dh] -> [.., Dh, D] */
        mp_tensor *k = mp_lua_tensor_check(L, 4), kt = {0};
        int64_t shape[MP_MAXDIM];
        memcpy(shape, k->shape, (size_t)k->ndim * sizeof *shape);
        shape[k->ndim - 2] = k->shape[k->ndim - 1];
        shape[k->ndim - 1] = k->shape[k->ndim - 2];
        mp_tensor *c = mp_lua_tensor_new(L, k->ndim, shape); /* may raise: before kt holds memory */
        mp_status st = mp_tensor_transpose(&kt, k, k->ndim - 2, k->ndim - 1);
        if (st != MP_OK) mp_lua_fail(L, mp_error_prefix(st, "%s", fn));
        memcpy(c->data, kt.data, kt.numel * sizeof(float));
        mp_tensor_free(&kt);
        lua_replace(L, 4);
    }
    mp_lua_factored_push(L, 3, 4, fn);
    return 1;
}
static int get_OV(lua_State *L) { return circuit(L, "OV", "W_V", "W_O", 0); }
static int get_QK(lua_State *L) { return circuit(L, "QK", "W_Q", "W_K", 1); }

int mp_lua_weights_index(lua_State *L, int idx, const char *k) {
    if (strcmp(k, "W_E") != 0 && strcmp(k, "W_pos") != 0 && strcmp(k, "W_U") != 0 && strcmp(k, "b_U") != 0) return 0;
    push_shortcut(L, mp_lua_model_check(L, idx)->m, k, -1);
    return 1;
}

static const char *shape_str(char *buf, size_t n, int nd, const int64_t *s) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && at < n; i++) at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)s[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

/* m:set_weight(name, t) (W_E, W_pos, W_U; or a per-layer name, t stacked
 * [n_layer, ...]) or m:set_weight(name, l, t): writes a TL-shaped tensor into
 * the model. Returns m. */
static int model_set_weight(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    if (lm->busy > 0)
        return luaL_error(L, "mp.Model:set_weight: the model is in use (called from inside its own "
                             "forward/generate/train callback)");
    const char *name = luaL_checkstring(L, 2);
    mp_tl_weight w = resolve(L, lm->m, name, "set_weight");
    int l = -1, ti = 3;
    if (!lua_isnoneornil(L, 4)) {
        l = layer_arg(L, 3, lm->m, name);
        ti = 4;
        if (!w.per_layer || l < 0) return luaL_error(L, "set_weight: %s has no layers: m:set_weight(\"%s\", t)", name, name);
    }
    if (mp_tl_weight_settable(lm->m, &w)) return luaL_error(L, "set_weight: %s", mp_last_error());
    mp_tensor *t = mp_lua_tensor_arg(L, ti);
    int64_t want[4];
    int nd = mp_tl_weight_shape(lm->m, &w, l, want);
    int same = t->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = t->shape[i] == want[i];
    if (!same) {
        char a[96], b[96];
        return luaL_error(L, "set_weight: %s%s must be %s (TransformerLens's shape), got %s", name,
                          w.per_layer && l < 0 ? " (all layers)" : "", shape_str(a, sizeof a, nd, want),
                          shape_str(b, sizeof b, t->ndim, t->shape));
    }
    if (mp_tl_weight_set(lm->m, &w, l, t->data)) return luaL_error(L, "set_weight: %s", mp_last_error());
    lua_settop(L, 1);
    return 1;
}

/* ---- weight processing ---- */

/* After mp_weights_process on the model at idx (n: its parameter count
 * before): its views of replaced memory go, and an optimizer state sized for
 * the tied layout (untying adds the unembedding) is dropped, so that m:save
 * and m:train do not meet moments that no longer match. */
static void after_process(lua_State *L, int idx, size_t n) {
    lmodel *lm = mp_lua_model_check(L, idx);
    mp_lua_params_detach(L, idx, NULL);
    if (mp_config_n_params(&lm->m->cfg) != n) {
        lua_pushnil(L);
        lua_setiuservalue(L, idx, 1);
    }
}

/* m:process_weights([{fold_ln=, center_writing_weights=, center_unembed=,
 * fold_value_biases=}]) -> {applied = {names}, skipped = {name = why}}.
 * An option not given defaults to TL's true and is skipped (with the reason)
 * where it does not apply; an explicit true that does not apply is an error. */
static int model_process_weights(lua_State *L) {
    static const char *const known[] = {"fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases",
                                        NULL};
    lua_settop(L, 2);
    lmodel *lm = mp_lua_model_check(L, 1);
    if (lm->busy > 0)
        return luaL_error(L, "mp.Model:process_weights: the model is in use (called from inside its own "
                             "forward/generate/train callback)");
    mp_lua_opt_check(L, 2, "process_weights", known);
    int opt = lua_istable(L, 2) ? 2 : 0;
    if (mp_model_is_quantized(lm->m)) { /* refused whatever the options: no step applies */
        char why[512];
        mp_weights_step_applies(lm->m, MP_WP_FOLD_LN, why, sizeof why);
        return luaL_error(L, "process_weights: %s", why);
    }
    int o[MP_WP_N_STEPS];
    for (int i = 0; i < MP_WP_N_STEPS; i++) {
        int given = mp_lua_opt_get(L, opt, known[i]) != LUA_TNIL;
        lua_pop(L, 1);
        o[i] = given ? mp_lua_opt_bool(L, opt, "process_weights", known[i], 1) : -1;
    }
    char why[MP_WP_N_STEPS][512];
    unsigned mask = mp_weights_process_plan(lm->m, o, why); /* the defaults, shared with the Python binding */
    lua_newtable(L); /* applied */
    lua_newtable(L); /* skipped */
    int applied = lua_gettop(L) - 1, skipped = applied + 1, n = 0;
    for (int i = 0; i < MP_WP_N_STEPS; i++) {
        if (why[i][0]) {
            lua_pushstring(L, why[i]);
            lua_setfield(L, skipped, known[i]);
        } else if (mask & mp_wp_order[i]) {
            lua_pushstring(L, known[i]);
            lua_rawseti(L, applied, ++n);
        }
    }
    size_t n_before = mp_config_n_params(&lm->m->cfg);
    mp_status st = mp_weights_process(lm->m, mask);
    after_process(L, 1, n_before); /* the memory may have been copied or untied, even on failure */
    if (st) return mp_lua_fail(L, st);
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, applied);
    lua_setfield(L, -2, "applied");
    lua_pushvalue(L, skipped);
    lua_setfield(L, -2, "skipped");
    return 1;
}

void mp_lua_load_process(lua_State *L, int opt, int model) {
    static const char *const keys[] = {MP_LUA_LOAD_PROCESS_KEYS};
    static const mp_wp_step steps[] = {MP_WP_FOLD_LN, MP_WP_CENTER_WRITING, MP_WP_CENTER_UNEMBED,
                                       MP_WP_FOLD_VALUE_BIASES};
    unsigned mask = 0;
    for (int i = 0; i < 4; i++)
        if (mp_lua_opt_bool(L, opt, "mp.load", keys[i], 0)) mask |= steps[i];
    mp_model *m = mp_lua_model_check(L, model)->m;
    size_t n_before = mp_config_n_params(&m->cfg);
    mp_status st = mask ? mp_weights_process(m, mask) : MP_OK;
    after_process(L, model, n_before);
    if (st) mp_lua_fail(L, mp_error_prefix(st, "mp.load: %s", m->source));
}

const luaL_Reg mp_lua_weight_methods[] = {
    {"params", model_params}, {"param", model_param}, {"set_weight", model_set_weight},
    {"process_weights", model_process_weights},
    {"W_Q", get_W_Q}, {"W_K", get_W_K}, {"W_V", get_W_V}, {"_W_K", get__W_K}, {"_W_V", get__W_V},
    {"W_O", get_W_O}, {"W_in", get_W_in}, {"W_gate", get_W_gate}, {"W_out", get_W_out},
    {"b_Q", get_b_Q}, {"b_K", get_b_K}, {"b_V", get_b_V}, {"_b_K", get__b_K}, {"_b_V", get__b_V},
    {"b_O", get_b_O}, {"b_in", get_b_in}, {"b_gate", get_b_gate}, {"b_out", get_b_out},
    {"OV", get_OV}, {"QK", get_QK},
    {NULL, NULL}};
