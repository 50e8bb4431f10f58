/* lcache.c — the cache m:run_with_cache returns: the plain table of cached
 * tensors (cache["blocks.0.attn.hook_pattern"], pairs(cache)) with a
 * metatable whose __index holds TransformerLens's ActivationCache helpers:
 * accumulated_resid, decompose_resid, stack_head_results, apply_ln_to_stack,
 * logit_attrs; a hook name the cache lacks raises an error naming it and
 * what was captured (rawget(cache, name) tests for a name without one). Stacks are Tensors [C, B, T, D] (C components), or [C, B, D]
 * with pos_slice (one position, 0-based, negative from the end). The
 * arithmetic is runtime/act_cache.c; this file gathers the cached tensors. */
#include "act_cache.h"
#include "lmodel.h"
#include "mp_hooks.h"
#include "mp_lua.h"

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#define CACHE_TYPE "mechprobe.ActivationCache"
static const char CTX_KEY = 0;     /* metatable[&CTX_KEY] = {model, B, T} */
static const char METHODS_KEY = 0; /* registry[&METHODS_KEY] = the methods table */

typedef struct {
    lmodel *lm;
    int B, T;
} cache_ctx;

/* The cache at idx 1 and its model (an error for anything else or a closed model). */
static cache_ctx self_ctx(lua_State *L, const char *fn) {
    cache_ctx c;
    if (!lua_istable(L, 1) || !lua_getmetatable(L, 1))
        luaL_error(L, "%s: call it as cache:%s(...) on a cache from m:run_with_cache", fn, fn);
    if (lua_rawgetp(L, -1, &CTX_KEY) != LUA_TTABLE)
        luaL_error(L, "%s: call it as cache:%s(...) on a cache from m:run_with_cache", fn, fn);
    lua_rawgeti(L, -1, 1);
    c.lm = mp_lua_model_check(L, -1);
    lua_rawgeti(L, -2, 2);
    lua_rawgeti(L, -3, 3);
    c.B = (int)lua_tointeger(L, -2);
    c.T = (int)lua_tointeger(L, -1);
    lua_pop(L, 5);
    return c;
}

/* The cached tensor `name` (raw lookup), or an error saying how to cache it. */
static const float *need(lua_State *L, const char *fn, const char *name, size_t numel) {
    lua_pushstring(L, name);
    lua_rawget(L, 1);
    mp_tensor *t = mp_lua_tensor_test(L, -1);
    if (!t || !t->data)
        luaL_error(L, "%s: the cache has no '%s' (run m:run_with_cache with names that include it)", fn, name);
    if (t->numel != numel)
        luaL_error(L, "%s: cache['%s'] has %d values, expected %d", fn, name, (int)t->numel, (int)numel);
    lua_pop(L, 1); /* the cache table keeps it */
    return t->data;
}

static int has(lua_State *L, const char *name) {
    lua_pushstring(L, name);
    lua_rawget(L, 1);
    int yes = mp_lua_tensor_test(L, -1) != NULL;
    lua_pop(L, 1);
    return yes;
}

/* layer argument: nil or -1 = n_layer (the final residual), else 0..n_layer */
static int layer_arg(lua_State *L, int idx, const char *fn, int nl) {
    if (lua_isnoneornil(L, idx)) return nl;
    int l = (int)mp_lua_arg_int(L, idx, fn, "layer", -1, nl);
    return l < 0 ? nl : l;
}

/* pos_slice option: -1 (every position) or one 0-based position (negative: from the end) */
static int pos_opt(lua_State *L, int opt, const char *fn, int T) {
    int p = (int)mp_lua_opt_int(L, opt, fn, "pos_slice", T, -T, T - 1);
    if (p == T) return -1;
    return p < 0 ? p + T : p;
}

/* The scale [B*T] of the norm that reads the input of block `layer` (ln1, or
 * ln2 with mlp_input; layer = n_layer: ln_final). */
static const float *scale_of(lua_State *L, const char *fn, const cache_ctx *c, int layer, int mlp_input) {
    char name[96];
    if (layer >= c->lm->m->cfg.n_layer) snprintf(name, sizeof name, "ln_final.hook_scale");
    else if (c->lm->m->cfg.no_pre_norms)
        luaL_error(L, "%s: the model's blocks have no pre-norms (pre_norms = false, OLMo 2): no norm reads block %d's "
                   "input; apply_ln works at the final layer only (ln_final)", fn, layer);
    else snprintf(name, sizeof name, "blocks.%d.%s.hook_scale", layer, mlp_input ? "ln2" : "ln1");
    return need(L, fn, name, (size_t)c->B * c->T);
}

/* Normalizes stack t [C, B, Tn, D] with the scale of `layer` at position p
 * (Tn = 1) or every position (p = -1, Tn = T). */
static void apply_ln(lua_State *L, const char *fn, const cache_ctx *c, mp_tensor *t, int layer, int mlp_input, int p) {
    const float *sc = scale_of(L, fn, c, layer, mlp_input);
    const int Tn = p < 0 ? c->T : 1;
    float *s = lua_newuserdatauv(L, (size_t)c->B * Tn * sizeof(float), 0);
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < Tn; t++) s[b * Tn + t] = sc[(size_t)b * c->T + (p < 0 ? t : p)];
    const int C = (int)t->shape[0];
    mp_cache_apply_ln(t->data, C, (size_t)c->B * Tn, c->lm->m->cfg.d_model, s, c->lm->m->cfg.norm == MP_NORM_LAYER);
    lua_pop(L, 1);
}

/* A stack of components, each a cached [B, T, D] tensor (minus another, for
 * the token embedding = hook_embed - hook_pos_embed). */
#define MAX_COMP 4096
typedef struct {
    int n;
    const float *src[MAX_COMP], *minus[MAX_COMP];
    char label[MAX_COMP][24];
} comps;

static void add(lua_State *L, comps *cs, const float *src, const float *minus, const char *label) {
    if (cs->n == MAX_COMP) luaL_error(L, "too many components (%d)", MAX_COMP);
    cs->src[cs->n] = src;
    cs->minus[cs->n] = minus;
    snprintf(cs->label[cs->n], sizeof cs->label[0], "%s", label);
    cs->n++;
}

/* Pushes the stack tensor [C, B, T, D] (p < 0) or [C, B, D] of the components,
 * then (return_labels) the labels table; returns the number of results. */
static int push_stack(lua_State *L, const char *fn, const cache_ctx *c, const comps *cs, int p, int ln_layer,
                      int mlp_input, int labels) {
    const int B = c->B, T = c->T, D = c->lm->m->cfg.d_model, Tn = p < 0 ? T : 1;
    int64_t shape[4] = {cs->n, B, T, D};
    if (p >= 0) shape[2] = D;
    mp_tensor *t = mp_lua_tensor_new(L, p < 0 ? 4 : 3, shape);
    for (int i = 0; i < cs->n; i++)
        for (int b = 0; b < B; b++)
            for (int tt = 0; tt < Tn; tt++) {
                const size_t from = ((size_t)b * T + (p < 0 ? tt : p)) * D;
                float *dst = t->data + (((size_t)i * B + b) * Tn + tt) * D;
                for (int d = 0; d < D; d++) dst[d] = cs->src[i][from + d] - (cs->minus[i] ? cs->minus[i][from + d] : 0.0f);
            }
    if (ln_layer >= 0) apply_ln(L, fn, c, t, ln_layer, mlp_input, p);
    if (!labels) return 1;
    lua_createtable(L, cs->n, 0);
    for (int i = 0; i < cs->n; i++) {
        lua_pushstring(L, cs->label[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 2;
}

static const float *hook(lua_State *L, const char *fn, const cache_ctx *c, const char *fmt, int l, size_t per_row) {
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    return need(L, fn, name, (size_t)c->B * c->T * per_row);
}

/* cache:accumulated_resid(layer, {incl_mid, apply_ln, pos_slice, return_labels, mlp_input}) */
static int cache_accumulated_resid(lua_State *L) {
    static const char *fn = "accumulated_resid";
    static const char *const known[] = {"incl_mid", "apply_ln", "pos_slice", "return_labels", "mlp_input", NULL};
    cache_ctx c = self_ctx(L, fn);
    const mp_config *cfg = &c.lm->m->cfg;
    const int nl = cfg->n_layer, D = cfg->d_model;
    int layer = layer_arg(L, 2, fn, nl);
    mp_lua_opt_check(L, 3, fn, known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    int incl_mid = mp_lua_opt_bool(L, opt, fn, "incl_mid", 0), ln = mp_lua_opt_bool(L, opt, fn, "apply_ln", 0);
    int labels = mp_lua_opt_bool(L, opt, fn, "return_labels", 0), mlp_input = mp_lua_opt_bool(L, opt, fn, "mlp_input", 0);
    int p = pos_opt(L, opt, fn, c.T);
    if (mlp_input && layer >= nl) return luaL_error(L, "%s: mlp_input needs a block's layer (0..%d)", fn, nl - 1);
    static comps cs;
    cs.n = 0;
    char lab[24];
    for (int l = 0; l <= layer; l++) {
        if (l == nl) {
            add(L, &cs, hook(L, fn, &c, "blocks.%d.hook_resid_post", nl - 1, D), NULL, "final_post");
            break;
        }
        snprintf(lab, sizeof lab, "%d_pre", l);
        add(L, &cs, hook(L, fn, &c, "blocks.%d.hook_resid_pre", l, D), NULL, lab);
        if ((incl_mid && l < layer) || (mlp_input && l == layer)) {
            snprintf(lab, sizeof lab, "%d_mid", l);
            add(L, &cs, hook(L, fn, &c, "blocks.%d.hook_resid_mid", l, D), NULL, lab);
        }
    }
    return push_stack(L, fn, &c, &cs, p, ln ? layer : -1, mlp_input, labels);
}

/* cache:decompose_resid(layer, {mode, incl_embeds, apply_ln, pos_slice, return_labels, mlp_input}) */
static int cache_decompose_resid(lua_State *L) {
    static const char *fn = "decompose_resid";
    static const char *const known[] = {"mode", "incl_embeds", "apply_ln", "pos_slice", "return_labels", "mlp_input",
                                        NULL};
    static const char *const modes[] = {"all", "mlp", "attn", NULL};
    cache_ctx c = self_ctx(L, fn);
    const mp_config *cfg = &c.lm->m->cfg;
    const int nl = cfg->n_layer, D = cfg->d_model;
    int layer = layer_arg(L, 2, fn, nl);
    mp_lua_opt_check(L, 3, fn, known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    int mode = mp_lua_opt_enum(L, opt, fn, "mode", 0, modes);
    int embeds = mp_lua_opt_bool(L, opt, fn, "incl_embeds", 1), ln = mp_lua_opt_bool(L, opt, fn, "apply_ln", 0);
    int labels = mp_lua_opt_bool(L, opt, fn, "return_labels", 0), mlp_input = mp_lua_opt_bool(L, opt, fn, "mlp_input", 0);
    int p = pos_opt(L, opt, fn, c.T);
    if (mlp_input && layer >= nl) return luaL_error(L, "%s: mlp_input needs a block's layer (0..%d)", fn, nl - 1);
    static comps cs;
    cs.n = 0;
    if (embeds) {
        const float *e = need(L, fn, "hook_embed", (size_t)c.B * c.T * D);
        if (cfg->pos == MP_POS_LEARNED) { /* hook_embed holds token + position embeddings */
            const float *pe = need(L, fn, "hook_pos_embed", (size_t)c.B * c.T * D);
            add(L, &cs, e, pe, "embed");
            add(L, &cs, pe, NULL, "pos_embed");
        } else {
            add(L, &cs, e, NULL, "embed");
        }
    }
    char lab[24];
    for (int l = 0; l < layer || (mlp_input && l == layer); l++) {
        if (mode != 1) {
            snprintf(lab, sizeof lab, "%d_attn_out", l);
            add(L, &cs, hook(L, fn, &c, "blocks.%d.hook_attn_out", l, D), NULL, lab);
        }
        if (mode != 2 && l < layer && cfg->mlp != MP_MLP_NONE) {
            snprintf(lab, sizeof lab, "%d_mlp_out", l);
            add(L, &cs, hook(L, fn, &c, "blocks.%d.hook_mlp_out", l, D), NULL, lab);
        }
    }
    if (!cs.n) return luaL_error(L, "%s: no components (layer %d, these options)", fn, layer);
    return push_stack(L, fn, &c, &cs, p, ln ? layer : -1, mlp_input, labels);
}

/* cache:stack_head_results(layer, {return_labels, apply_ln, pos_slice}):
 * heads of blocks 0..layer-1 (nil: all), from attn.hook_result if cached,
 * else from attn.hook_z and W_O; without b_O. */
static int cache_stack_head_results(lua_State *L) {
    static const char *fn = "stack_head_results";
    static const char *const known[] = {"return_labels", "apply_ln", "pos_slice", NULL};
    cache_ctx c = self_ctx(L, fn);
    const mp_config *cfg = &c.lm->m->cfg;
    const int nl = cfg->n_layer, D = cfg->d_model, H = cfg->n_head, B = c.B, T = c.T, N = B * T;
    int layer = layer_arg(L, 2, fn, nl);
    mp_lua_opt_check(L, 3, fn, known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    int labels = mp_lua_opt_bool(L, opt, fn, "return_labels", 0), ln = mp_lua_opt_bool(L, opt, fn, "apply_ln", 0);
    int p = pos_opt(L, opt, fn, T), Tn = p < 0 ? T : 1;
    if (layer == 0) return luaL_error(L, "%s: layer 0 has no heads before it (give 1..%d, or nil for all)", fn, nl);
    int64_t shape[4] = {(int64_t)layer * H, B, T, D};
    if (p >= 0) shape[2] = D;
    mp_tensor *out = mp_lua_tensor_new(L, p < 0 ? 4 : 3, shape);
    int oi = lua_gettop(L);
    float *tmp = lua_newuserdatauv(L, (size_t)N * H * D * sizeof(float), 0);
    for (int l = 0; l < layer; l++) {
        char name[96];
        snprintf(name, sizeof name, "blocks.%d.attn.hook_result", l);
        if (has(L, name)) { /* [B,T,H,D] */
            const float *r = need(L, fn, name, (size_t)N * H * D);
            for (int n = 0; n < N; n++)
                for (int h = 0; h < H; h++)
                    memcpy(tmp + ((size_t)h * N + n) * D, r + ((size_t)n * H + h) * D, (size_t)D * sizeof(float));
        } else {
            const float *z = hook(L, fn, &c, "blocks.%d.attn.hook_z", l, (size_t)H * cfg->d_head);
            mp_status st = mp_cache_head_results(c.lm->m, l, z, N, tmp);
            if (st) return mp_lua_fail(L, st);
        }
        for (int h = 0; h < H; h++)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tn; t++)
                    memcpy(out->data + ((((size_t)l * H + h) * B + b) * Tn + t) * D,
                           tmp + ((size_t)h * N + (size_t)b * T + (p < 0 ? t : p)) * D, (size_t)D * sizeof(float));
    }
    lua_settop(L, oi);
    if (ln) apply_ln(L, fn, &c, out, layer, 0, p);
    if (!labels) return 1;
    lua_createtable(L, layer * H, 0);
    for (int l = 0; l < layer; l++)
        for (int h = 0; h < H; h++) {
            lua_pushfstring(L, "L%dH%d", l, h);
            lua_rawseti(L, -2, (lua_Integer)l * H + h + 1);
        }
    return 2;
}

/* The stack argument at idx: [C, B, T, D] or [C, B, D] of this cache. */
static mp_tensor *stack_arg(lua_State *L, int idx, const char *fn, const cache_ctx *c) {
    mp_tensor *t = mp_lua_tensor_check(L, idx);
    const int D = c->lm->m->cfg.d_model;
    int ok = (t->ndim == 4 && t->shape[1] == c->B && t->shape[2] == c->T && t->shape[3] == D) ||
             (t->ndim == 3 && t->shape[1] == c->B && t->shape[2] == D);
    if (!ok)
        luaL_error(L, "%s: the stack must be [components, %d, %d, %d] or [components, %d, %d] (this cache's batch, "
                   "positions, d_model)", fn, c->B, c->T, D, c->B, D);
    return t;
}

/* cache:apply_ln_to_stack(stack, layer, {pos_slice, mlp_input}) -> a new stack */
static int cache_apply_ln_to_stack(lua_State *L) {
    static const char *fn = "apply_ln_to_stack";
    static const char *const known[] = {"pos_slice", "mlp_input", NULL};
    cache_ctx c = self_ctx(L, fn);
    mp_tensor *s = stack_arg(L, 2, fn, &c);
    int layer = layer_arg(L, 3, fn, c.lm->m->cfg.n_layer);
    mp_lua_opt_check(L, 4, fn, known);
    int opt = lua_istable(L, 4) ? 4 : 0;
    int mlp_input = mp_lua_opt_bool(L, opt, fn, "mlp_input", 0);
    int p = pos_opt(L, opt, fn, c.T);
    if (mlp_input && layer >= c.lm->m->cfg.n_layer) return luaL_error(L, "%s: mlp_input needs a block's layer", fn);
    if (s->ndim == 3 && p < 0) {
        if (c.T != 1)
            return luaL_error(L, "%s: a [components, batch, d_model] stack has no position axis: say which "
                              "position it holds with pos_slice", fn);
        p = 0;
    }
    int64_t shape[4];
    memcpy(shape, s->shape, sizeof shape);
    if (s->ndim == 4 && p >= 0) { /* select the position first */
        shape[2] = shape[3];
        mp_tensor *o = mp_lua_tensor_new(L, 3, shape);
        const int B = c.B, T = c.T, D = (int)s->shape[3];
        for (int64_t ci = 0; ci < s->shape[0]; ci++)
            for (int b = 0; b < B; b++)
                memcpy(o->data + ((size_t)ci * B + b) * D, s->data + (((size_t)ci * B + b) * T + p) * D,
                       (size_t)D * sizeof(float));
        apply_ln(L, fn, &c, o, layer, mlp_input, p);
        return 1;
    }
    mp_tensor *o = mp_lua_tensor_from(L, s->ndim, shape, s->data);
    apply_ln(L, fn, &c, o, layer, mlp_input, s->ndim == 3 ? p : -1);
    return 1;
}

/* tokens argument: one id for every batch row, or a list / 1-D Tensor of B
 * ids; what names it in messages ("argument #2 (tokens)", "option
 * 'incorrect_tokens'"), and its entries as what[b]. */
static int *tokens_arg(lua_State *L, int idx, const char *fn, const char *what, int B) {
    idx = lua_absindex(L, idx);
    int *v = lua_newuserdatauv(L, (size_t)B * sizeof(int), 0);
    lua_Integer big = 0x7fffffff;
    if (lua_type(L, idx) == LUA_TNUMBER) {
        int t = (int)mp_lua_int_at(L, idx, fn, what, 0, big);
        for (int b = 0; b < B; b++) v[b] = t;
        return v;
    }
    mp_tensor *t = mp_lua_tensor_test(L, idx);
    if (!t && !lua_istable(L, idx))
        luaL_error(L, "%s: %s must be a token id, a list of %d ids or a Tensor of %d ids, got %s", fn, what, B, B,
                   luaL_typename(L, idx));
    lua_Integer n = t ? (lua_Integer)t->numel : luaL_len(L, idx);
    if (n != B) luaL_error(L, "%s: %s: %d ids given for a batch of %d", fn, what, (int)n, B);
    for (int b = 0; b < B; b++) {
        if (t) lua_pushnumber(L, t->data[b]);
        else lua_rawgeti(L, idx, b + 1);
        const char *wb = lua_pushfstring(L, "%s[%d]", what, b + 1);
        v[b] = (int)mp_lua_int_at(L, -2, fn, wb, 0, big);
        lua_pop(L, 2);
    }
    return v;
}

/* cache:logit_attrs(stack, tokens, {incorrect_tokens, pos_slice}) -> attrs [C, B(, T)], bias [B] */
static int cache_logit_attrs(lua_State *L) {
    static const char *fn = "logit_attrs";
    static const char *const known[] = {"incorrect_tokens", "pos_slice", NULL};
    lua_settop(L, 4);
    cache_ctx c = self_ctx(L, fn);
    mp_tensor *s = stack_arg(L, 2, fn, &c);
    mp_lua_opt_check(L, 4, fn, known);
    int opt = lua_istable(L, 4) ? 4 : 0;
    int p = pos_opt(L, opt, fn, c.T);
    const int B = c.B, T = c.T, C = (int)s->shape[0], D = c.lm->m->cfg.d_model;
    if (s->ndim == 3 && p >= 0)
        return luaL_error(L, "%s: pos_slice selects a position of a [components, batch, positions, d_model] stack; "
                          "this one has none", fn);
    int *tok = tokens_arg(L, 3, fn, "argument #2 (tokens)", B), *inc = NULL;
    if (mp_lua_opt_get(L, opt, "incorrect_tokens") != LUA_TNIL)
        inc = tokens_arg(L, lua_gettop(L), fn, "option 'incorrect_tokens'", B);
    const float *x = s->data;
    int Tn = s->ndim == 4 ? T : 1;
    if (s->ndim == 4 && p >= 0) { /* gather the position */
        float *g = lua_newuserdatauv(L, (size_t)C * B * D * sizeof(float), 0);
        for (int ci = 0; ci < C; ci++)
            for (int b = 0; b < B; b++)
                memcpy(g + ((size_t)ci * B + b) * D, x + (((size_t)ci * B + b) * T + p) * D, (size_t)D * sizeof(float));
        x = g;
        Tn = 1;
    }
    int64_t shape[3] = {C, B, Tn};
    mp_tensor *out = mp_lua_tensor_new(L, (s->ndim == 4 && p < 0) ? 3 : 2, shape);
    int64_t bs[1] = {B};
    mp_tensor *bias = mp_lua_tensor_new(L, 1, bs);
    mp_status st = mp_cache_logit_attrs(c.lm->m, x, C, B, Tn, tok, inc, out->data, bias->data);
    if (st) return mp_lua_fail(L, st);
    return 2;
}

#define NEAREST 3
#define LIST_ALL 8 /* a cache of at most this many names lists them all */

/* Raises "cache: no 'key' (...)": what was captured (every name of a small
 * cache, else how many and the NEAREST nearest, mp_hook_nearest) and how to
 * capture it. */
static int missing_key(lua_State *L, const char *key) {
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        n += lua_type(L, -2) == LUA_TSTRING && mp_lua_tensor_test(L, -1);
        lua_pop(L, 1);
    }
    /* the names, in a userdata (freed by Lua when the error unwinds); the cache table keeps the strings */
    const char **names = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *names, 0);
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        if (lua_type(L, -2) == LUA_TSTRING && mp_lua_tensor_test(L, -1) && i < n) names[i++] = lua_tostring(L, -2);
        lua_pop(L, 1);
    }
    const char *how = strlen(key) > 5 && strcmp(key + strlen(key) - 5, "_grad") == 0
                          ? "run m:run_with_cache with incl_bwd = true, a loss, and names that include the point"
                          : "run m:run_with_cache with names that include it (m:hook_names() lists them)";
    if (n == 0) return luaL_error(L, "cache: no '%s': the cache is empty; %s", key, how);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    if (n <= LIST_ALL) {
        for (int j = 0; j < n; j++) {
            if (j) luaL_addstring(&b, ", ");
            luaL_addstring(&b, names[j]);
        }
        luaL_pushresult(&b);
        return luaL_error(L, "cache: no '%s': it captured %s; %s", key, lua_tostring(L, -1), how);
    }
    int near[NEAREST];
    const int k = mp_hook_nearest(key, names, n, NEAREST, near);
    for (int j = 0; j < k; j++) {
        if (j) luaL_addstring(&b, ", ");
        luaL_addstring(&b, names[near[j]]);
    }
    luaL_pushresult(&b);
    return luaL_error(L, "cache: no '%s': it captured %d names, the nearest %s; %s", key, n, lua_tostring(L, -1), how);
}

/* __index: the helpers; a missing hook name (a string with "hook_") raises
 * missing_key's error; anything else (cache.loss when no loss was asked) nil. */
static int cache_index(lua_State *L) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL || lua_type(L, 2) != LUA_TSTRING) return 1;
    const char *key = lua_tostring(L, 2);
    if (!strstr(key, "hook_")) return 1;
    return missing_key(L, key);
}

static const luaL_Reg methods[] = {
    {"accumulated_resid", cache_accumulated_resid},
    {"decompose_resid", cache_decompose_resid},
    {"stack_head_results", cache_stack_head_results},
    {"apply_ln_to_stack", cache_apply_ln_to_stack},
    {"logit_attrs", cache_logit_attrs},
    {NULL, NULL}};

void mp_lua_cache_attach(lua_State *L, int cache, int model, int B, int T) {
    cache = lua_absindex(L, cache);
    model = lua_absindex(L, model);
    lua_createtable(L, 0, 3); /* this cache's metatable */
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &METHODS_KEY) != LUA_TTABLE) {
        lua_pop(L, 1);
        luaL_newlib(L, methods);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &METHODS_KEY);
    }
    lua_pushcclosure(L, cache_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushstring(L, CACHE_TYPE);
    lua_setfield(L, -2, "__name");
    lua_createtable(L, 3, 0);
    lua_pushvalue(L, model);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, B);
    lua_rawseti(L, -2, 2);
    lua_pushinteger(L, T);
    lua_rawseti(L, -2, 3);
    lua_rawsetp(L, -2, &CTX_KEY);
    lua_setmetatable(L, cache);
}
