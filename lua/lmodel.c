/* lmodel.c — Lua bindings of the model: mp.load / mp.model.*, tokenization,
 * forward passes with captures (run_with_cache) and interventions
 * (run_with_hooks: Lua functions or the C interventions of mp.ablate / mp.patch
 * / mp.steer), generation, streaming capture to an HDF5 run file, and
 * training (m:train_step, m:train with its progress bar, checkpoints through
 * m:save / mp.model.load; the optimizer type lives in ltrain.c).
 *
 * Numbering: layers, heads and token positions are 0-based, as in hook names
 * and TransformerLens; Tensor indices are 1-based, as everywhere in Lua. */
#include "mp_lua.h"
#include "model.h"
#include "tokenizer.h"
#include "h5run.h"
#include "checkpoint.h"
#include "train.h"

#include <stdio.h>

#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL_MT "mechprobe.Model"
#define IV_MT "mechprobe.Intervention"
#define GUARD_MT "mechprobe.Guard"

typedef struct {
    mp_model *m;
    mp_tokenizer *tok;
    char tok_path[1024];
    mp_train_ws ws;     /* training buffers (gradients, activations) */
    mp_train_log log;   /* loss curve, saved in the checkpoint's /train */
} lmodel;
/* The model userdata's user value 1 is its optimizer (the last one used by
 * train_step / train, or the one loaded from a checkpoint). */

static lmodel *check_model(lua_State *L, int idx) {
    lmodel *lm = luaL_checkudata(L, idx, MODEL_MT);
    if (!lm->m) luaL_error(L, "Model is closed");
    return lm;
}

static int model_gc(lua_State *L) {
    lmodel *lm = luaL_checkudata(L, 1, MODEL_MT);
    mp_model_free(lm->m);
    mp_tokenizer_free(lm->tok);
    mp_train_ws_free(&lm->ws);
    mp_train_log_free(&lm->log);
    lm->m = NULL;
    lm->tok = NULL;
    return 0;
}

static const char *norm_name(mp_norm_kind k) { return k == MP_NORM_LAYER ? "layer" : "rms"; }
static const char *mlp_name(mp_mlp_kind k) { return k == MP_MLP_GELU ? "gelu" : k == MP_MLP_NONE ? "none" : "swiglu"; }
static const char *pos_name(mp_pos_kind k) { return k == MP_POS_NONE ? "none" : k == MP_POS_LEARNED ? "learned" : "rope"; }

static int model_tostring(lua_State *L) {
    lmodel *lm = luaL_checkudata(L, 1, MODEL_MT);
    if (!lm->m) { lua_pushliteral(L, "Model(closed)"); return 1; }
    const mp_config *c = &lm->m->cfg;
    lua_pushfstring(L,
                    "Model(%s%s%s: d_model=%d n_layer=%d n_head=%d n_kv_head=%d d_head=%d d_mlp=%d vocab=%d ctx=%d "
                    "pos=%s rope_theta=%f norm=%s mlp=%s %s)",
                    lm->m->format, lm->m->source[0] ? " " : "", lm->m->source, c->d_model, c->n_layer, c->n_head,
                    c->n_kv_head, c->d_head, c->d_mlp, c->vocab, c->ctx, pos_name(c->pos), (double)c->rope_theta,
                    norm_name(c->norm), mlp_name(c->mlp), c->tied ? "tied" : "untied");
    return 1;
}

static void push_config(lua_State *L, const mp_model *m) {
    const mp_config *c = &m->cfg;
    lua_newtable(L);
#define SETI(k, v) (lua_pushinteger(L, (v)), lua_setfield(L, -2, k))
#define SETS(k, v) (lua_pushstring(L, (v)), lua_setfield(L, -2, k))
    SETI("d_model", c->d_model); SETI("n_layer", c->n_layer); SETI("n_head", c->n_head);
    SETI("n_kv_head", c->n_kv_head); SETI("d_head", c->d_head); SETI("d_mlp", c->d_mlp);
    SETI("vocab", c->vocab); SETI("ctx", c->ctx);
    lua_pushnumber(L, c->rope_theta); lua_setfield(L, -2, "rope_theta");
    lua_pushnumber(L, c->norm_eps); lua_setfield(L, -2, "norm_eps");
    lua_pushboolean(L, c->tied); lua_setfield(L, -2, "tied");
    SETS("norm", norm_name(c->norm)); SETS("mlp", mlp_name(c->mlp)); SETS("pos", pos_name(c->pos));
    SETS("format", m->format); SETS("source", m->source);
    SETI("n_params", (lua_Integer)mp_config_n_params(c));
#undef SETI
#undef SETS
}

/* ---- guards: userdata whose __gc frees C resources if a Lua error unwinds ---- */

typedef struct {
    mp_hooks *hooks;
    int *ints;
    mp_h5run *run;
} guard;

static int guard_gc(lua_State *L) {
    guard *g = luaL_checkudata(L, 1, GUARD_MT);
    mp_hooks_free(g->hooks);
    free(g->ints);
    if (g->run) mp_h5run_abort(g->run);
    memset(g, 0, sizeof *g);
    return 0;
}

static guard *push_guard(lua_State *L) {
    guard *g = lua_newuserdatauv(L, sizeof *g, 0);
    memset(g, 0, sizeof *g);
    luaL_setmetatable(L, GUARD_MT);
    return g;
}

/* ---- token arguments ---- */

static int tok_value(lua_State *L, int idx, const char *what) {
    int isnum;
    lua_Integer v = lua_tointegerx(L, idx, &isnum);
    if (!isnum) luaL_error(L, "%s: token ids must be integers (got %s)", what, luaL_typename(L, idx));
    return (int)v;
}

/* Reads tokens from a flat table (B = 1), a table of equal-length tables [B][T],
 * or a 1-D / 2-D Tensor, into g->ints. */
static void read_tokens(lua_State *L, int idx, guard *g, int *B, int *T) {
    idx = lua_absindex(L, idx);
    mp_tensor *t = mp_lua_tensor_test(L, idx);
    if (t) {
        if (t->ndim != 1 && t->ndim != 2) luaL_argerror(L, idx, "tokens: a Tensor of shape [T] or [B,T] expected");
        *B = t->ndim == 2 ? (int)t->shape[0] : 1;
        *T = (int)t->shape[t->ndim - 1];
        if (*B <= 0 || *T <= 0) luaL_argerror(L, idx, "tokens: empty");
        g->ints = malloc(t->numel * sizeof(int));
        if (!g->ints) luaL_error(L, "out of memory reading tokens");
        for (size_t i = 0; i < t->numel; i++) g->ints[i] = (int)t->data[i];
        return;
    }
    luaL_argexpected(L, lua_istable(L, idx), idx, "token table or Tensor");
    lua_Integer n = luaL_len(L, idx);
    if (n <= 0) luaL_argerror(L, idx, "tokens: empty table");
    lua_geti(L, idx, 1);
    int nested = lua_istable(L, -1);
    lua_pop(L, 1);
    if (!nested) {
        *B = 1;
        *T = (int)n;
        g->ints = malloc((size_t)n * sizeof(int));
        if (!g->ints) luaL_error(L, "out of memory reading tokens");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, idx, i);
            g->ints[i - 1] = tok_value(L, -1, "tokens");
            lua_pop(L, 1);
        }
        return;
    }
    *B = (int)n;
    lua_geti(L, idx, 1);
    *T = (int)luaL_len(L, -1);
    lua_pop(L, 1);
    if (*T <= 0) luaL_argerror(L, idx, "tokens: empty sequence");
    g->ints = malloc((size_t)*B * (size_t)*T * sizeof(int));
    if (!g->ints) luaL_error(L, "out of memory reading tokens");
    for (int b = 1; b <= *B; b++) {
        lua_geti(L, idx, b);
        if (!lua_istable(L, -1) || luaL_len(L, -1) != *T)
            luaL_error(L, "tokens: sequence %d has a different length from sequence 1 (%d); batches must be rectangular",
                       b, *T);
        for (int t2 = 1; t2 <= *T; t2++) {
            lua_geti(L, -1, t2);
            g->ints[(size_t)(b - 1) * *T + t2 - 1] = tok_value(L, -1, "tokens");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}

/* ---- interventions (C hooks with their data) ---- */

typedef enum { IV_ZERO, IV_MEAN, IV_PATCH, IV_STEER, IV_SCALE } iv_kind;

typedef struct {
    iv_kind kind;
    int head;          /* -1: all heads */
    int npos;          /* 0: all positions */
    int pos[64];       /* absolute positions, 0-based */
    float scale;
    mp_tensor *data;   /* source (patch), reference run (mean), or steering vector; uservalue 1 */
    float *mean;       /* mean of the reference over batch and positions, computed at first use */
    size_t mean_n;
} lintervention;

static int iv_gc(lua_State *L) {
    lintervention *iv = luaL_checkudata(L, 1, IV_MT);
    free(iv->mean);
    iv->mean = NULL;
    return 0;
}

/* Mean of `ref` (the hook's full shape from another run, any batch/length)
 * over its batch axis and position axis pax: nfeat values. */
static int iv_compute_mean(lintervention *iv, const mp_hook_info *info, int pax, size_t nfeat) {
    const mp_tensor *ref = iv->data;
    if (ref->ndim != info->ndim)
        return mp_error(MP_ERR_ARG, "mean ablation at %s: the reference has %d dims, the activation %d", info->name,
                        ref->ndim, info->ndim), 1;
    size_t nf = 1, inner = 1;
    for (int i = 1; i < ref->ndim; i++)
        if (i != pax) nf *= (size_t)ref->shape[i];
    for (int i = pax + 1; i < ref->ndim; i++) inner *= (size_t)ref->shape[i];
    if (nf != nfeat)
        return mp_error(MP_ERR_ARG, "mean ablation at %s: the reference has %zu features per position, expected %zu",
                        info->name, nf, nfeat), 1;
    iv->mean = calloc(nf, sizeof(float));
    if (!iv->mean) return mp_error(MP_ERR_NOMEM, "out of memory for a mean ablation"), 1;
    iv->mean_n = nf;
    size_t count = (size_t)ref->shape[0] * (size_t)ref->shape[pax];
    for (size_t e = 0; e < ref->numel; e++) {
        size_t in = e % inner, rest = e / inner / (size_t)ref->shape[pax];
        iv->mean[(rest % (nf / inner)) * inner + in] += ref->data[e];
    }
    for (size_t i = 0; i < nf; i++) iv->mean[i] /= (float)count;
    return 0;
}

static const char *iv_names[] = {"zero ablation", "mean ablation", "patch", "steer", "scale"};

static int iv_tostring(lua_State *L) {
    lintervention *iv = luaL_checkudata(L, 1, IV_MT);
    lua_pushfstring(L, "Intervention(%s%s)", iv_names[iv->kind], iv->head >= 0 ? " of one head" : "");
    return 1;
}

/* Axis holding the head index / the query position for a hook's shape kind. */
static int head_axis(mp_shape_kind k) {
    return k == MP_SHAPE_BTHD || k == MP_SHAPE_BTKD ? 2 : k == MP_SHAPE_BHTS ? 1 : -1;
}

static int iv_apply(void *user, const mp_hook_info *info, float *data) {
    lintervention *iv = user;
    mp_shape_kind sk = mp_hook_shape_kind[info->id];
    int hax = head_axis(sk), pax = sk == MP_SHAPE_BHTS ? 2 : 1;
    int64_t s[4] = {1, 1, 1, 1}, f[4] = {1, 1, 1, 1};
    for (int i = 0; i < info->ndim; i++) { s[i] = info->shape[i]; f[i] = info->full[i]; }
    if (iv->head >= 0 && hax < 0)
        return mp_error(MP_ERR_ARG, "%s: head=%d given, but %s has no head axis", iv_names[iv->kind], iv->head,
                        info->name), 1;
    if (iv->head >= 0 && iv->head >= f[hax])
        return mp_error(MP_ERR_ARG, "%s: head=%d out of range (0..%d) at %s", iv_names[iv->kind], iv->head,
                        (int)f[hax] - 1, info->name), 1;
    /* feature size: everything but batch and position axes */
    size_t nfeat = 1, nwithin = 1;
    for (int i = 0; i < info->ndim; i++)
        if (i != 0 && i != pax) nfeat *= (size_t)f[i];
    for (int i = hax + 1; hax >= 0 && i < info->ndim; i++)
        if (i != pax) nwithin *= (size_t)f[i];
    size_t full_numel = (size_t)f[0] * f[1] * f[2] * f[3];
    const float *src = iv->data ? iv->data->data : NULL;
    size_t nsrc = iv->data ? iv->data->numel : 0;
    if (iv->kind == IV_PATCH && nsrc != full_numel)
        return mp_error(MP_ERR_ARG, "patch at %s: the source has %zu values but the activation has %zu "
                        "(patch from a run with the same batch and length)", info->name, nsrc, full_numel), 1;
    if (iv->kind == IV_MEAN) {
        if (!iv->mean && iv_compute_mean(iv, info, pax, nfeat)) return 1;
        if (iv->mean_n != nfeat)
            return mp_error(MP_ERR_ARG, "mean ablation at %s: the mean has %zu values, expected %zu", info->name,
                            iv->mean_n, nfeat), 1;
        src = iv->mean;
    }
    int use_within = iv->kind == IV_STEER && iv->head >= 0;
    if (iv->kind == IV_STEER && nsrc != (use_within ? nwithin : nfeat))
        return mp_error(MP_ERR_ARG, "steer at %s: the vector has %zu values, expected %zu", info->name, nsrc,
                        use_within ? nwithin : nfeat), 1;
    size_t e = 0;
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < s[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < s[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < s[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < s[3]; idx[3]++, e++) {
                    int64_t g[4] = {idx[0], idx[1], idx[2], idx[3]};
                    g[info->axis] += info->offset;
                    if (iv->head >= 0 && g[hax] != iv->head) continue;
                    if (iv->npos) {
                        int p = info->pos0 + (int)g[pax], hit = 0;
                        for (int k = 0; k < iv->npos && !hit; k++) hit = iv->pos[k] == p;
                        if (!hit) continue;
                    }
                    size_t feat = 0, within = 0;
                    for (int i = 1; i < info->ndim; i++) {
                        if (i == pax) continue;
                        feat = feat * (size_t)f[i] + (size_t)g[i];
                        if (hax >= 0 && i > hax) within = within * (size_t)f[i] + (size_t)g[i];
                    }
                    switch (iv->kind) {
                    case IV_ZERO: data[e] = 0.0f; break;
                    case IV_MEAN: data[e] = src[feat]; break;
                    case IV_PATCH:
                        data[e] = src[((size_t)g[0] * f[1] * f[2] + (size_t)g[1] * f[2] + (size_t)g[2]) * f[3] + g[3]];
                        break;
                    case IV_STEER: data[e] += iv->scale * src[use_within ? within : feat]; break;
                    case IV_SCALE: data[e] *= iv->scale; break;
                    }
                }
    return 0;
}

/* Options common to every intervention: head=, positions= (0-based). */
static lintervention *push_iv(lua_State *L, iv_kind kind, int opt) {
    lintervention *iv = lua_newuserdatauv(L, sizeof *iv, 1);
    memset(iv, 0, sizeof *iv);
    iv->kind = kind;
    iv->head = -1;
    iv->scale = 1.0f;
    luaL_setmetatable(L, IV_MT);
    if (opt && lua_istable(L, opt)) {
        if (lua_getfield(L, opt, "head") != LUA_TNIL) {
            iv->head = (int)luaL_checkinteger(L, -1);
            if (iv->head < 0) luaL_error(L, "head must be >= 0 (heads are numbered from 0, as in TransformerLens)");
        }
        lua_pop(L, 1);
        if (lua_getfield(L, opt, "positions") != LUA_TNIL) {
            int pi = lua_gettop(L);
            if (lua_isinteger(L, pi)) {
                iv->pos[iv->npos++] = (int)lua_tointeger(L, pi);
            } else {
                luaL_checktype(L, pi, LUA_TTABLE);
                lua_Integer n = luaL_len(L, pi);
                if (n > 64) luaL_error(L, "positions: at most 64 positions (got %d)", (int)n);
                for (lua_Integer i = 1; i <= n; i++) {
                    lua_geti(L, pi, i);
                    iv->pos[iv->npos++] = (int)luaL_checkinteger(L, -1);
                    lua_pop(L, 1);
                }
            }
        }
        lua_pop(L, 1);
        if (lua_getfield(L, opt, "scale") != LUA_TNIL) iv->scale = (float)luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    return iv;
}

/* mp.ablate.zero([{head=, positions=}]) */
static int l_ablate_zero(lua_State *L) {
    push_iv(L, IV_ZERO, lua_istable(L, 1) ? 1 : 0);
    return 1;
}

/* mp.ablate.mean(reference [, {head=, positions=}]): reference is the hook's
 * activation captured on other inputs ([B,T,...], or [B,H,T,S] for patterns);
 * its mean over batch and positions replaces the activation. */
static int l_ablate_mean(lua_State *L) {
    mp_tensor *ref = mp_lua_tensor_check(L, 1);
    if (ref->ndim < 3) luaL_argerror(L, 1, "a captured activation [B,T,...] or pattern [B,H,T,S] expected");
    lintervention *iv = push_iv(L, IV_MEAN, lua_istable(L, 2) ? 2 : 0);
    iv->data = ref;
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* mp.patch(source [, {head=, positions=}]): copy values from a cached run. */
static int l_patch(lua_State *L) {
    mp_lua_tensor_check(L, 1);
    lintervention *iv = push_iv(L, IV_PATCH, lua_istable(L, 2) ? 2 : 0);
    int ivi = lua_gettop(L);
    iv->data = mp_lua_tensor_check(L, 1);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, ivi, 1);
    return 1;
}

/* mp.steer(vector [, {scale=, head=, positions=}]): add scale * vector. */
static int l_steer(lua_State *L) {
    luaL_checkany(L, 1);
    lintervention *iv = push_iv(L, IV_STEER, lua_istable(L, 2) ? 2 : 0);
    int ivi = lua_gettop(L);
    iv->data = mp_lua_tensor_arg(L, 1);
    if (lua_gettop(L) == ivi) lua_pushvalue(L, 1); /* it was a Tensor already */
    lua_setiuservalue(L, ivi, 1);
    return 1;
}

/* mp.scale(factor [, {head=, positions=}]): multiply the activation. */
static int l_scale(lua_State *L) {
    float s = (float)luaL_checknumber(L, 1);
    lintervention *iv = push_iv(L, IV_SCALE, lua_istable(L, 2) ? 2 : 0);
    iv->scale = s;
    return 1;
}

/* ---- Lua function hooks ---- */

typedef struct {
    lua_State *L;
    int tbl;   /* absolute stack index of the table holding the functions */
    int key;
} lfnhook;

static int lua_hook_cb(void *user, const mp_hook_info *info, float *data) {
    lfnhook *h = user;
    lua_State *L = h->L;
    int top = lua_gettop(L);
    lua_rawgeti(L, h->tbl, h->key);
    mp_tensor *view = mp_lua_tensor_wrap(L, info->ndim, info->shape, data);
    lua_createtable(L, 0, 6);
    lua_pushstring(L, info->name); lua_setfield(L, -2, "name");
    lua_pushinteger(L, info->layer); lua_setfield(L, -2, "layer");
    lua_pushinteger(L, info->axis + 1); lua_setfield(L, -2, "axis");
    lua_pushinteger(L, info->offset); lua_setfield(L, -2, "offset");
    lua_pushinteger(L, info->pos0); lua_setfield(L, -2, "pos0");
    lua_createtable(L, info->ndim, 0);
    for (int i = 0; i < info->ndim; i++) { lua_pushinteger(L, info->full[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "full_shape");
    int rc = 0;
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
        mp_error(MP_ERR_HOOK, "%s", lua_tostring(L, -1));
        rc = 1;
    } else {
        mp_tensor *ret = mp_lua_tensor_test(L, -1);
        if (ret && ret != view) {
            if (ret->numel != info->numel) {
                mp_error(MP_ERR_HOOK, "the hook function returned a Tensor of %zu values for a view of %zu",
                         ret->numel, info->numel);
                rc = 1;
            } else {
                memmove(data, ret->data, info->numel * sizeof(float));
            }
        }
    }
    mp_lua_tensor_detach(view);
    lua_settop(L, top);
    return rc;
}

/* ---- in-memory capture ---- */

static int cache_cb(void *user, const mp_hook_info *info, float *data) {
    mp_tensor *t = user;
    mp_hook_view_copy(info, t->data, data, 1);
    return 0;
}

typedef struct {
    lua_State *L;
    int cache;      /* absolute index of the result table */
    mp_hooks *hooks;
    int B, T, pos0;
    const mp_config *cfg;
    mp_status st;
} cache_ctx;

static void cache_visit(void *u, mp_hook_id id, int layer, const char *name) {
    cache_ctx *c = u;
    if (c->st) return;
    int64_t shape[4];
    int nd = mp_hook_shape(c->cfg, id, c->B, c->T, c->pos0, shape);
    mp_tensor *t = mp_lua_tensor_new(c->L, nd, shape);
    lua_setfield(c->L, c->cache, name);
    c->st = mp_hooks_add_at(c->hooks, id, layer, cache_cb, t);
}

/* Reads opts.fwd_hooks = { {name_or_glob, function | Intervention}, ... } into
 * g->hooks; functions are stored in a table pushed on the stack. */
static void add_fwd_hooks(lua_State *L, int opt, guard *g, lmodel *lm) {
    lua_newtable(L); /* function table */
    int ftbl = lua_gettop(L);
    if (!opt || !lua_istable(L, opt)) return;
    if (lua_getfield(L, opt, "fwd_hooks") == LUA_TNIL) { lua_pop(L, 1); return; }
    int hl = lua_gettop(L);
    luaL_checktype(L, hl, LUA_TTABLE);
    lua_Integer n = luaL_len(L, hl);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, hl, i);
        int e = lua_gettop(L);
        if (!lua_istable(L, e)) luaL_error(L, "fwd_hooks[%d]: expected {name, function or intervention}", (int)i);
        lua_geti(L, e, 1);
        const char *name = lua_tostring(L, -1);
        if (!name) luaL_error(L, "fwd_hooks[%d][1]: hook name (string) expected", (int)i);
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
            st = mp_hooks_add(g->hooks, name, lua_hook_cb, h);
        } else if (luaL_testudata(L, -1, IV_MT)) {
            lintervention *iv = lua_touserdata(L, -1);
            lua_pushvalue(L, -1);
            lua_rawseti(L, ftbl, -(int)(1000000 + i)); /* keep it alive */
            st = mp_hooks_add(g->hooks, name, iv_apply, iv);
        } else {
            return (void)luaL_error(L, "fwd_hooks[%d][2]: a function or an intervention (mp.ablate.zero(), "
                                       "mp.patch(...), mp.steer(...)) expected, got %s", (int)i, luaL_typename(L, -1));
        }
        if (st) luaL_error(L, "fwd_hooks[%d]: %s", (int)i, mp_last_error());
        lua_settop(L, e - 1);
    }
    lua_settop(L, ftbl);
    (void)lm;
}

static int opt_bool(lua_State *L, int opt, const char *key, int def) {
    if (!opt || !lua_istable(L, opt)) return def;
    int t = lua_getfield(L, opt, key);
    int v = t == LUA_TNIL ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static lua_Number opt_num(lua_State *L, int opt, const char *key, lua_Number def) {
    if (!opt || !lua_istable(L, opt)) return def;
    int t = lua_getfield(L, opt, key);
    lua_Number v = def;
    if (t != LUA_TNIL) {
        int ok;
        v = lua_tonumberx(L, -1, &ok);
        if (!ok) luaL_error(L, "option '%s': number expected, got %s", key, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    return v;
}

/* Pushes the comma-joined globs of opts[key] (string or list of strings) or def. */
static const char *opt_globs(lua_State *L, int opt, const char *key, const char *def) {
    if (!opt || !lua_istable(L, opt) || lua_getfield(L, opt, key) == LUA_TNIL) {
        if (opt && lua_istable(L, opt)) lua_pop(L, 1);
        lua_pushstring(L, def);
        return lua_tostring(L, -1);
    }
    if (lua_isstring(L, -1)) return lua_tostring(L, -1);
    luaL_checktype(L, -1, LUA_TTABLE);
    luaL_Buffer b;
    int t = lua_gettop(L);
    luaL_buffinit(L, &b);
    lua_Integer n = luaL_len(L, t);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, t, i);
        if (!lua_isstring(L, -1)) luaL_error(L, "option '%s': list of hook names expected", key);
        if (i > 1) luaL_addchar(&b, ',');
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_remove(L, t);
    return lua_tostring(L, -1);
}

/* Shared body of forward / run_with_cache / run_with_hooks.
 * Returns logits (or nil) and, with want_cache, the cache table. */
static int run_common(lua_State *L, int want_cache) {
    lmodel *lm = check_model(L, 1);
    int opt = lua_istable(L, 3) ? 3 : 0;
    const mp_config *cfg = &lm->m->cfg;
    guard *g = push_guard(L);
    int B, T;
    read_tokens(L, 2, g, &B, &T);
    g->hooks = mp_hooks_new(cfg);
    if (!g->hooks) return luaL_error(L, "out of memory");
    add_fwd_hooks(L, opt, g, lm); /* leaves its function table on the stack */
    int cache_idx = 0;
    if (want_cache) {
        const char *globs = opt_globs(L, opt, "names", "*");
        char bad[256];
        mp_hook_select(cfg, globs, NULL, NULL, bad, sizeof bad);
        if (bad[0]) return luaL_error(L, "names: unknown hook name '%s' (see mp.hook_names(model))", bad);
        lua_newtable(L);
        cache_idx = lua_gettop(L);
        cache_ctx cc = {L, cache_idx, g->hooks, B, T, 0, cfg, MP_OK};
        mp_hook_select(cfg, globs, cache_visit, &cc, NULL, 0);
        if (cc.st) return mp_lua_fail(L, cc.st);
    }
    const char *lmode = "all";
    if (opt && lua_getfield(L, opt, "logits") != LUA_TNIL) {
        if (lua_isboolean(L, -1)) lmode = lua_toboolean(L, -1) ? "all" : "none";
        else lmode = luaL_checkstring(L, -1);
    }
    if (opt) lua_pop(L, 1);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = mp_hooks_count(g->hooks) ? g->hooks : NULL;
    mp_tensor *logits = NULL;
    if (strcmp(lmode, "all") == 0) {
        int64_t s[3] = {B, T, cfg->vocab};
        logits = mp_lua_tensor_new(L, 3, s);
        fp.logits = MP_LOGITS_ALL;
    } else if (strcmp(lmode, "last") == 0) {
        int64_t s[2] = {B, cfg->vocab};
        logits = mp_lua_tensor_new(L, 2, s);
        fp.logits = MP_LOGITS_LAST;
    } else if (strcmp(lmode, "none") == 0) {
        lua_pushnil(L);
        fp.logits = MP_LOGITS_NONE;
    } else {
        return luaL_error(L, "option 'logits': \"all\", \"last\", \"none\" or a boolean expected, got \"%s\"", lmode);
    }
    int li = lua_gettop(L);
    mp_status st = mp_model_forward(lm->m, g->ints, B, T, &fp, logits ? logits->data : NULL);
    if (st) return mp_lua_fail(L, st);
    lua_pushvalue(L, li);
    if (want_cache) {
        lua_pushvalue(L, cache_idx);
        return 2;
    }
    return 1;
}

static int model_forward(lua_State *L) { return run_common(L, 0); }
static int model_run_with_hooks(lua_State *L) { return run_common(L, 0); }
static int model_run_with_cache(lua_State *L) { return run_common(L, 1); }

/* ---- tokenization ---- */

static mp_tokenizer *need_tok(lua_State *L, lmodel *lm) {
    if (!lm->tok)
        luaL_error(L, "this model has no tokenizer: load it with mp.load(path, {tokenizer=\"tokenizer.bin\"})");
    return lm->tok;
}

static int model_to_tokens(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    const char *text = luaL_checkstring(L, 2);
    int opt = lua_istable(L, 3) ? 3 : 0;
    int bos = opt_bool(L, opt, "bos", 1), eos = opt_bool(L, opt, "eos", 0);
    int *ids, n;
    mp_status st = mp_tokenizer_encode(need_tok(L, lm), text, bos, eos, &ids, &n);
    if (st) return mp_lua_fail(L, st);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) { lua_pushinteger(L, ids[i]); lua_rawseti(L, -2, i + 1); }
    free(ids);
    return 1;
}

static int model_to_string(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    mp_tokenizer *tok = need_tok(L, lm);
    guard *g = push_guard(L);
    int B, T;
    read_tokens(L, 2, g, &B, &T);
    for (int i = 0; i < B * T; i++)
        if (g->ints[i] < 0 || g->ints[i] >= mp_tokenizer_vocab(tok))
            return luaL_error(L, "to_string: token id %d is outside the vocabulary (0..%d)", g->ints[i],
                              mp_tokenizer_vocab(tok) - 1);
    for (int b = 0; b < B; b++) {
        char *s;
        mp_status st = mp_tokenizer_decode(tok, g->ints + (size_t)b * T, T, &s);
        if (st) return mp_lua_fail(L, st);
        lua_pushstring(L, s);
        free(s);
    }
    return B;
}

static int model_to_str_tokens(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    mp_tokenizer *tok = need_tok(L, lm);
    if (lua_isstring(L, 2) && !lua_isnumber(L, 2)) {
        lua_pushcfunction(L, model_to_tokens);
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 2);
        lua_call(L, 2, 1);
        lua_replace(L, 2);
    }
    guard *g = push_guard(L);
    int B, T;
    read_tokens(L, 2, g, &B, &T);
    lua_createtable(L, T, 0);
    for (int i = 0; i < T; i++) {
        const char *p = mp_tokenizer_piece(tok, i ? g->ints[i - 1] : -1, g->ints[i]);
        if (!p) return luaL_error(L, "to_str_tokens: token id %d is outside the vocabulary", g->ints[i]);
        lua_pushstring(L, p);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---- generation ---- */

typedef struct {
    lua_State *L;
    int fn;              /* stack index of on_token callback or 0 */
    const mp_tokenizer *tok;
    int prev;
    int err;
} gen_ctx;

static int gen_on_token(void *user, int token) {
    gen_ctx *c = user;
    if (!c->fn) return 0;
    lua_pushvalue(c->L, c->fn);
    lua_pushinteger(c->L, token);
    const char *piece = c->tok ? mp_tokenizer_piece(c->tok, c->prev, token) : NULL;
    if (piece) lua_pushstring(c->L, piece);
    else lua_pushnil(c->L);
    c->prev = token;
    if (lua_pcall(c->L, 2, 1, 0) != LUA_OK) {
        c->err = 1;
        return 1; /* error message stays on the stack */
    }
    int stop = lua_toboolean(c->L, -1);
    lua_pop(c->L, 1);
    return stop;
}

/* m:generate(prompt, {max_new_tokens=64, temperature=1.0, top_p=0.9, seed=1234,
 *                     stop_at_eos=true, fwd_hooks=..., on_token=function(id, piece)})
 * -> text (prompt + continuation; nil without tokenizer), tokens table */
static int model_generate(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    int opt = lua_istable(L, 3) ? 3 : 0;
    guard *g = push_guard(L);
    int n, Bq;
    if (lua_type(L, 2) == LUA_TSTRING) {
        int *ids;
        mp_status st = mp_tokenizer_encode(need_tok(L, lm), lua_tostring(L, 2), 1, 0, &ids, &n);
        if (st) return mp_lua_fail(L, st);
        g->ints = ids;
    } else {
        read_tokens(L, 2, g, &Bq, &n);
        if (Bq != 1) return luaL_error(L, "generate: one prompt at a time (got a batch of %d)", Bq);
    }
    g->hooks = mp_hooks_new(&lm->m->cfg);
    if (!g->hooks) return luaL_error(L, "out of memory");
    add_fwd_hooks(L, opt, g, lm);
    int max_new = (int)opt_num(L, opt, "max_new_tokens", 64);
    mp_sampler_params sp = {(float)opt_num(L, opt, "temperature", 1.0), (float)opt_num(L, opt, "top_p", 0.9),
                            (uint64_t)opt_num(L, opt, "seed", 1234)};
    int stop = opt_bool(L, opt, "stop_at_eos", 1) && lm->tok ? mp_tokenizer_eos(lm->tok) : -1;
    gen_ctx gc = {L, 0, lm->tok, n ? g->ints[n - 1] : -1, 0};
    if (opt && lua_getfield(L, opt, "on_token") != LUA_TNIL) {
        luaL_checktype(L, -1, LUA_TFUNCTION);
        gc.fn = lua_gettop(L);
    } else if (opt) {
        lua_pop(L, 1);
    }
    if (max_new < 0) return luaL_error(L, "max_new_tokens must be >= 0");
    int *out = lua_newuserdatauv(L, ((size_t)n + (size_t)max_new) * sizeof(int), 0);
    int n_out = 0;
    mp_status st = mp_model_generate(lm->m, g->ints, n, max_new, &sp, mp_hooks_count(g->hooks) ? g->hooks : NULL,
                                     stop, gen_on_token, &gc, out, &n_out);
    if (gc.err) return lua_error(L);
    if (st) return mp_lua_fail(L, st);
    if (lm->tok) {
        char *s;
        if ((st = mp_tokenizer_decode(lm->tok, out, n_out, &s))) return mp_lua_fail(L, st);
        lua_pushstring(L, s);
        free(s);
    } else {
        lua_pushnil(L);
    }
    lua_createtable(L, n_out, 0);
    for (int i = 0; i < n_out; i++) { lua_pushinteger(L, out[i]); lua_rawseti(L, -2, i + 1); }
    return 2;
}

/* ---- streaming capture to an HDF5 run file ---- */

/* m:capture(tokens, {out=PATH, hooks="*", logits=false, compress=0, seed=})
 * Writes DESIGN.md's run file atomically; returns the number of datasets. */
static int model_capture(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    luaL_checktype(L, 3, LUA_TTABLE);
    const mp_config *cfg = &lm->m->cfg;
    guard *g = push_guard(L);
    int B, T;
    read_tokens(L, 2, g, &B, &T);
    lua_getfield(L, 3, "out");
    const char *out = lua_tostring(L, -1);
    if (!out) return luaL_error(L, "capture: option 'out' (output .h5 path) is required");
    const char *globs = opt_globs(L, 3, "hooks", "*");
    int want_logits = opt_bool(L, 3, "logits", 0);
    mp_h5run_params rp = mp_h5run_params_default();
    rp.compress = (int)opt_num(L, 3, "compress", 0);
    if (rp.compress < 0 || rp.compress > 9) return luaL_error(L, "capture: compress must be 0..9");
    g->hooks = mp_hooks_new(cfg);
    if (!g->hooks) return luaL_error(L, "out of memory");
    add_fwd_hooks(L, 3, g, lm); /* interventions apply before capture */
    mp_status st;
    for (int i = 0; i < B * T; i++)
        if (g->ints[i] < 0 || g->ints[i] >= cfg->vocab)
            return luaL_error(L, "capture: token id %d is outside the vocabulary (0..%d)", g->ints[i], cfg->vocab - 1);
    if ((st = mp_h5run_create(&g->run, out, &rp))) return mp_lua_fail(L, st);
    if ((st = mp_h5run_write_model(g->run, cfg, lm->m->source))) return mp_lua_fail(L, st);
    if ((st = mp_h5run_write_tokens(g->run, g->ints, B, T))) return mp_lua_fail(L, st);
    int n_ds = 0;
    if (strcmp(globs, "") != 0 && strcmp(globs, "none") != 0) {
        if ((st = mp_h5run_capture(g->run, g->hooks, cfg, globs, B, T))) return mp_lua_fail(L, st);
        n_ds = mp_hook_select(cfg, globs, NULL, NULL, NULL, 0);
    }
    float *logits = NULL;
    if (want_logits) {
        size_t nl = (size_t)B * T * cfg->vocab;
        logits = lua_newuserdatauv(L, nl * sizeof(float), 0);
    }
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = mp_hooks_count(g->hooks) ? g->hooks : NULL;
    fp.logits = want_logits ? MP_LOGITS_ALL : MP_LOGITS_NONE;
    if ((st = mp_model_forward(lm->m, g->ints, B, T, &fp, logits))) return mp_lua_fail(L, st);
    if (want_logits) {
        int64_t shape[3] = {B, T, cfg->vocab}, off[3] = {0, 0, 0};
        mp_h5ds *ds;
        if ((st = mp_h5run_dataset(g->run, "/logits", 3, shape, 1, &ds))) return mp_lua_fail(L, st);
        if ((st = mp_h5ds_write(ds, off, shape, logits))) return mp_lua_fail(L, st);
        n_ds++;
    }
    mp_h5run *run = g->run;
    g->run = NULL;
    if ((st = mp_h5run_commit(run))) return mp_lua_fail(L, st);
    lua_pushinteger(L, n_ds);
    return 1;
}

/* ---- construction ---- */

static lmodel *push_lmodel(lua_State *L) {
    lmodel *lm = lua_newuserdatauv(L, sizeof *lm, 1);
    memset(lm, 0, sizeof *lm);
    luaL_setmetatable(L, MODEL_MT);
    return lm;
}

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* Looks for a tokenizer next to the model: tokenizer.bin, or <stem>.tok*.bin. */
static int find_tokenizer(const char *model_path, char *out, size_t n) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", model_path);
    char *dir = dirname(tmp);
    snprintf(out, n, "%s/tokenizer.bin", dir);
    if (file_exists(out)) return 1;
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    char stem[512];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = '\0';
    static const char *suffixes[] = {".tok512.bin", ".tok.bin", ".tokenizer.bin", ".tok1024.bin", ".tok4096.bin",
                                     ".tok32000.bin"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        snprintf(out, n, "%s/%s%s", dir, stem, suffixes[i]);
        if (file_exists(out)) return 1;
    }
    return 0;
}

/* mp.load(path [, {tokenizer=path}]) */
static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int opt = lua_istable(L, 2) ? 2 : 0;
    lmodel *lm = push_lmodel(L);
    mp_status st;
    if (mp_file_is_hdf5(path)) { /* checkpoint: parameters, optimizer state, loss curve */
        mp_adamw o;
        if ((st = mp_checkpoint_load(path, &lm->m, &o, &lm->log))) return mp_lua_fail(L, st);
        if (o.n) {
            mp_lua_optim_push(L, &o);
            lua_setiuservalue(L, -2, 1);
        }
    } else if ((st = mp_model_load_llama2c(&lm->m, path))) {
        return mp_lua_fail(L, st);
    }
    const char *tp = NULL;
    if (opt && lua_getfield(L, opt, "tokenizer") != LUA_TNIL) tp = luaL_checkstring(L, -1);
    char found[1024];
    if (!tp && find_tokenizer(path, found, sizeof found)) tp = found;
    if (tp) {
        if ((st = mp_tokenizer_load(&lm->tok, tp, lm->m->cfg.vocab))) return mp_lua_fail(L, st);
        snprintf(lm->tok_path, sizeof lm->tok_path, "%s", tp);
    }
    lua_settop(L, 3);
    lua_pushvalue(L, opt ? 3 : 2);
    return 1;
}

static int cfg_int(lua_State *L, int t, const char *k, int def, int required) {
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        if (required) luaL_error(L, "mp.model.new: '%s' is required", k);
        return def;
    }
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "mp.model.new: '%s' must be an integer", k);
    lua_pop(L, 1);
    return (int)v;
}

/* mp.model.new{d_model=, n_layer=, n_head=, n_kv_head=, d_head=, d_mlp=, vocab=,
 *              ctx=, rope_theta=10000, norm_eps=1e-5, tied=true, seed=0, init_std=0.02,
 *              norm="rms"|"layer", mlp="swiglu"|"gelu"|"none", pos="rope"|"none"}
 * Weights ~ normal(0, init_std), wo/w2 scaled by 1/sqrt(2 n_layer). */
static int kind_opt(lua_State *L, const char *key, const char *const *names, int n, int def) {
    int v = def;
    if (lua_getfield(L, 1, key) != LUA_TNIL) {
        const char *s = luaL_checkstring(L, -1);
        v = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(s, names[i]) == 0) v = i;
        if (v < 0) {
            char all[128] = "";
            for (int i = 0; i < n; i++) {
                strcat(all, i ? ", \"" : "\"");
                strcat(all, names[i]);
                strcat(all, "\"");
            }
            luaL_error(L, "mp.model.new: %s must be one of %s (got \"%s\")", key, all, s);
        }
    }
    lua_pop(L, 1);
    return v;
}

static int l_model_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    static const char *norms[] = {"rms", "layer"}, *mlps[] = {"swiglu", "gelu", "none"}, *poss[] = {"rope", "none"};
    mp_config c = mp_config_default();
    c.norm = (mp_norm_kind)kind_opt(L, "norm", norms, 2, MP_NORM_RMS);
    c.mlp = (mp_mlp_kind)kind_opt(L, "mlp", mlps, 3, MP_MLP_SWIGLU);
    c.pos = (mp_pos_kind)kind_opt(L, "pos", poss, 2, MP_POS_ROPE);
    c.d_model = cfg_int(L, 1, "d_model", 0, 1);
    c.n_layer = cfg_int(L, 1, "n_layer", 0, 1);
    c.n_head = cfg_int(L, 1, "n_head", 0, 1);
    c.n_kv_head = cfg_int(L, 1, "n_kv_head", c.n_head, 0);
    c.d_head = cfg_int(L, 1, "d_head", c.n_head > 0 ? c.d_model / c.n_head : 0, 0);
    c.d_mlp = cfg_int(L, 1, "d_mlp", c.mlp == MP_MLP_NONE ? 0 : 4 * c.d_model, 0);
    c.vocab = cfg_int(L, 1, "vocab", 0, 1);
    c.ctx = cfg_int(L, 1, "ctx", 0, 1);
    c.rope_theta = (float)opt_num(L, 1, "rope_theta", 10000.0);
    c.norm_eps = (float)opt_num(L, 1, "norm_eps", 1e-5);
    c.tied = opt_bool(L, 1, "tied", 1);
    uint64_t seed = (uint64_t)opt_num(L, 1, "seed", 0);
    float std = (float)opt_num(L, 1, "init_std", 0.02);
    lmodel *lm = push_lmodel(L);
    mp_status st = mp_model_new_init(&lm->m, &c, seed, std);
    if (st) return luaL_error(L, "mp.model.new: %s", mp_last_error());
    return 1;
}

/* m:save(path [, {version=0|1}]) — an HDF5 checkpoint (parameters, the
 * model's optimizer state and loss curve) for a path ending in ".h5", else a
 * llama2.c file (configs it can express only). */
static int model_save(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    const char *path = luaL_checkstring(L, 2);
    size_t n = strlen(path);
    mp_status st;
    if (n >= 3 && strcmp(path + n - 3, ".h5") == 0) {
        lua_getiuservalue(L, 1, 1);
        const mp_adamw *o = luaL_testudata(L, -1, MP_OPTIM_MT);
        st = mp_checkpoint_save(path, lm->m, o, lm->log.n ? &lm->log : NULL);
    } else {
        int version = (int)opt_num(L, lua_istable(L, 3) ? 3 : 0, "version", 0);
        const mp_config *c = &lm->m->cfg;
        if (c->norm != MP_NORM_RMS || c->mlp != MP_MLP_SWIGLU || c->pos != MP_POS_ROPE ||
            c->d_head * c->n_head != c->d_model || c->rope_theta != 10000.0f)
            return luaL_error(L, "%s: llama2.c files hold only RMSNorm/SwiGLU/RoPE (theta 10000) models with d_head = "
                              "d_model / n_head; save this model as a .h5 checkpoint", path);
        st = mp_model_save_llama2c(lm->m, path, version);
    }
    if (st) return mp_lua_fail(L, st);
    return 0;
}

/* mp.tokenizer.save_bytelevel(path) -> vocab size (354) */
static int l_tok_save_bytelevel(lua_State *L) {
    mp_status st = mp_tokenizer_save_bytelevel(luaL_checkstring(L, 1));
    if (st) return mp_lua_fail(L, st);
    lua_pushinteger(L, mp_tokenizer_bytelevel_vocab());
    return 1;
}

/* mp.hook_names(model [, glob]) -> list of hook names in firing order */
static void names_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)id;
    (void)layer;
    lua_State *L = u;
    lua_pushstring(L, name);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

static int l_hook_names(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    const char *glob = luaL_optstring(L, 2, "*");
    lua_newtable(L);
    mp_hook_select(&lm->m->cfg, glob, names_visit, L, NULL, 0);
    return 1;
}

static int model_index(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "config") == 0 || strcmp(k, "cfg") == 0) { push_config(L, lm->m); return 1; }
    if (strcmp(k, "tokenizer_path") == 0) { lua_pushstring(L, lm->tok ? lm->tok_path : NULL); return 1; }
    if (strcmp(k, "has_tokenizer") == 0) { lua_pushboolean(L, lm->tok != NULL); return 1; }
    if (strcmp(k, "optimizer") == 0) { lua_getiuservalue(L, 1, 1); return 1; }
    luaL_getmetafield(L, 1, "__methods");
    lua_getfield(L, -1, k);
    return 1;
}

static int model_hook_names(lua_State *L) { return l_hook_names(L); }

/* ---- training ---- */

/* Reads tokens and targets (tables or Tensors of the same [B,T] shape) into
 * the guards' buffers. */
static void read_batch(lua_State *L, int ti, int gi, guard *gt, guard *gg, int *B, int *T) {
    int B2, T2;
    free(gt->ints);
    free(gg->ints);
    gt->ints = gg->ints = NULL;
    read_tokens(L, ti, gt, B, T);
    read_tokens(L, gi, gg, &B2, &T2);
    if (B2 != *B || T2 != *T)
        luaL_error(L, "targets: shape [%d,%d] differs from the tokens' [%d,%d]", B2, T2, *B, *T);
}

/* One step with the model's buffers; appends to the loss curve. */
static mp_status lm_step(lmodel *lm, mp_adamw *o, const int *tok, const int *tgt, int B, int T, int accum,
                         const mp_hooks *hooks, float *loss) {
    double t0 = mp_now();
    mp_status st = mp_train_step(lm->m, o, &lm->ws, tok, tgt, B, T, accum, hooks, loss);
    if (st) return st;
    double wall = (lm->log.n ? lm->log.wall[lm->log.n - 1] : 0.0) + (mp_now() - t0);
    double tokens = (lm->log.n ? lm->log.tokens[lm->log.n - 1] : 0.0) + (double)B * T;
    return mp_train_log_add(&lm->log, (int32_t)o->step, *loss, (float)lm->ws.lr, tokens, wall);
}

/* m:train_step(opt, tokens, targets [, {fwd_hooks=, accum=1}]) -> loss, grad_norm */
static int model_train_step(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    mp_adamw *o = mp_lua_optim_check(L, 2);
    int opt = lua_istable(L, 5) ? 5 : 0;
    guard *gt = push_guard(L), *gg = push_guard(L);
    int B, T;
    read_batch(L, 3, 4, gt, gg, &B, &T);
    gt->hooks = mp_hooks_new(&lm->m->cfg);
    if (!gt->hooks) return luaL_error(L, "out of memory");
    add_fwd_hooks(L, opt, gt, lm);
    int accum = (int)opt_num(L, opt, "accum", 1);
    float loss;
    mp_status st = lm_step(lm, o, gt->ints, gg->ints, B, T, accum, mp_hooks_count(gt->hooks) ? gt->hooks : NULL,
                           &loss);
    if (st) return mp_lua_fail(L, st);
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, 1, 1);
    lua_pushnumber(L, loss);
    lua_pushnumber(L, lm->ws.grad_norm);
    return 2;
}

static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) { snprintf(buf, n, "--:--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* The progress line: step, bar, loss, tokens/s, ETA. */
static void progress(int tty, int step, int total, float loss, double tps, double eta, double elapsed, int done) {
    char e[32], el[32];
    fmt_time(e, sizeof e, eta);
    fmt_time(el, sizeof el, elapsed);
    if (tty) {
        char bar[31];
        int fill = total ? (int)(30.0 * step / total) : 30;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[30] = '\0';
        fprintf(stderr, "\r%*d/%d [%s] loss %.4f | %.3g tok/s | %s %s\033[K", (int)snprintf(NULL, 0, "%d", total),
                step, total, bar, (double)loss, tps, done ? "took" : "ETA", done ? el : e);
        if (done) fputc('\n', stderr);
    } else {
        fprintf(stderr, "step %d/%d  loss %.4f  %.3g tok/s  %s %s\n", step, total, (double)loss, tps,
                done ? "took" : "ETA", done ? el : e);
    }
    fflush(stderr);
}

/* Calls task:sample(B, T) (or task:eval_sample when eval and present),
 * leaving tokens and targets on the stack. */
static void sample_task(lua_State *L, int task, int B, int T, int eval) {
    if (!eval || lua_getfield(L, task, "eval_sample") == LUA_TNIL) {
        if (eval) lua_pop(L, 1);
        if (lua_getfield(L, task, "sample") == LUA_TNIL) luaL_error(L, "train: the task has no sample(B, T) method");
    }
    lua_pushvalue(L, task);
    lua_pushinteger(L, B);
    lua_pushinteger(L, T);
    lua_call(L, 3, 2);
    if (lua_isnil(L, -1)) luaL_error(L, "train: task:sample(B, T) must return tokens and targets");
}

/* m:train{task=, steps=, batch=8, seq_len=ctx, lr=1e-3, warmup=0, min_lr=0.1 lr,
 *         weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0,
 *         accum=1, optimizer=, eval_every=0, eval_batches=4, checkpoint=PATH,
 *         checkpoint_every=0, progress=true, log_every=, fwd_hooks=, on_step=fn}
 * -> {step=, loss=, lr=, tokens=, time=, eval_step=, eval_loss=, final_loss=, tokens_per_s=}
 * Continues the model's optimizer (from a loaded checkpoint or an earlier
 * train) unless optimizer= or resume=false is given. */
static int model_train(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "task") == LUA_TNIL) return luaL_error(L, "train: option 'task' is required");
    int task = lua_gettop(L);
    const int steps = (int)opt_num(L, 2, "steps", 0);
    if (steps <= 0) return luaL_error(L, "train: option 'steps' (a positive integer) is required");
    const int B = (int)opt_num(L, 2, "batch", 8), T = (int)opt_num(L, 2, "seq_len", lm->m->cfg.ctx);
    const int accum = (int)opt_num(L, 2, "accum", 1), eval_every = (int)opt_num(L, 2, "eval_every", 0);
    const int eval_batches = (int)opt_num(L, 2, "eval_batches", 4);
    const int ck_every = (int)opt_num(L, 2, "checkpoint_every", 0);
    const int show = opt_bool(L, 2, "progress", 1), tty = isatty(2);
    const int log_every = (int)opt_num(L, 2, "log_every", steps >= 20 ? steps / 20 : 1);
    if (B <= 0 || T <= 0) return luaL_error(L, "train: batch (%d) and seq_len (%d) must be positive", B, T);
    lua_getfield(L, 2, "checkpoint");
    const char *ckpt = lua_tostring(L, -1); /* stays on the stack */
    /* the optimizer */
    mp_adamw *o = NULL;
    if (lua_getfield(L, 2, "optimizer") != LUA_TNIL) {
        o = mp_lua_optim_check(L, -1);
    } else {
        lua_pop(L, 1);
        lua_getiuservalue(L, 1, 1);
        o = opt_bool(L, 2, "resume", 1) ? luaL_testudata(L, -1, MP_OPTIM_MT) : NULL;
        if (!o) {
            lua_pop(L, 1);
            mp_adamw fresh;
            memset(&fresh, 0, sizeof fresh);
            fresh.hp = mp_adamw_params_default();
            fresh.hp.weight_decay = 0.1f;
            fresh.hp.beta2 = 0.95f;
            fresh.hp.grad_clip = 1.0f;
            fresh.hp.total_steps = steps;
            mp_lua_adamw_params(L, 2, &fresh.hp);
            if (mp_adamw_params_check(&fresh.hp)) return luaL_error(L, "train: %s", mp_last_error());
            o = mp_lua_optim_push(L, &fresh);
        }
    }
    int oi = lua_gettop(L);
    lua_pushvalue(L, oi);
    lua_setiuservalue(L, 1, 1);
    lua_getfield(L, 2, "on_step");
    int on_step = lua_isfunction(L, -1) ? lua_gettop(L) : 0;
    guard *gt = push_guard(L), *gg = push_guard(L);
    gt->hooks = mp_hooks_new(&lm->m->cfg);
    if (!gt->hooks) return luaL_error(L, "out of memory");
    add_fwd_hooks(L, 2, gt, lm);
    const mp_hooks *hooks = mp_hooks_count(gt->hooks) ? gt->hooks : NULL;
    const size_t first = lm->log.n, first_eval = lm->log.n_eval;
    const double t_start = mp_now();
    const int top = lua_gettop(L);
    float loss = 0.0f;
    mp_status st;
    for (int i = 1; i <= steps; i++) {
        int b, t;
        sample_task(L, task, B, T, 0);
        read_batch(L, top + 1, top + 2, gt, gg, &b, &t);
        lua_settop(L, top);
        if ((st = lm_step(lm, o, gt->ints, gg->ints, b, t, accum, hooks, &loss))) return mp_lua_fail(L, st);
        const int gstep = (int)o->step;
        if (eval_every > 0 && (i % eval_every == 0 || i == steps)) {
            double sum = 0.0;
            for (int e = 0; e < eval_batches; e++) {
                float el;
                sample_task(L, task, B, T, 1);
                read_batch(L, top + 1, top + 2, gt, gg, &b, &t);
                lua_settop(L, top);
                if ((st = mp_model_loss(lm->m, gt->ints, gg->ints, b, t, hooks, &el))) return mp_lua_fail(L, st);
                sum += el;
            }
            if ((st = mp_train_log_add_eval(&lm->log, gstep, (float)(sum / (eval_batches > 0 ? eval_batches : 1)))))
                return mp_lua_fail(L, st);
        }
        if (ckpt && ck_every > 0 && i % ck_every == 0 && i != steps &&
            (st = mp_checkpoint_save(ckpt, lm->m, o, &lm->log)))
            return mp_lua_fail(L, st);
        if (on_step) {
            lua_pushvalue(L, on_step);
            lua_pushinteger(L, gstep);
            lua_pushnumber(L, loss);
            lua_call(L, 2, 1);
            int stop = lua_toboolean(L, -1);
            lua_settop(L, top);
            if (stop) break;
        }
        if (show && (tty || i % log_every == 0 || i == steps)) {
            double el = mp_now() - t_start;
            double tps = el > 0 ? (double)i * B * T / el : 0.0;
            progress(tty, i, steps, loss, tps, el / i * (steps - i), el, 0);
        }
    }
    double took = mp_now() - t_start;
    size_t n_run = lm->log.n - first;
    if (show && tty) progress(tty, (int)n_run, steps, loss, took > 0 ? (double)n_run * B * T / took : 0, 0, took, 1);
    if (ckpt && (st = mp_checkpoint_save(ckpt, lm->m, o, &lm->log))) return mp_lua_fail(L, st);
    /* result: this run's part of the curve */
    lua_createtable(L, 0, 9);
    const char *keys[] = {"step", "loss", "lr", "tokens", "time"};
    for (int k = 0; k < 5; k++) {
        lua_createtable(L, (int)n_run, 0);
        for (size_t j = 0; j < n_run; j++) {
            size_t at = first + j;
            switch (k) {
            case 0: lua_pushinteger(L, lm->log.step[at]); break;
            case 1: lua_pushnumber(L, lm->log.loss[at]); break;
            case 2: lua_pushnumber(L, lm->log.lr[at]); break;
            case 3: lua_pushnumber(L, lm->log.tokens[at]); break;
            default: lua_pushnumber(L, lm->log.wall[at]); break;
            }
            lua_rawseti(L, -2, (lua_Integer)j + 1);
        }
        lua_setfield(L, -2, keys[k]);
    }
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 0);
    for (size_t j = first_eval; j < lm->log.n_eval; j++) {
        lua_pushinteger(L, lm->log.eval_step[j]);
        lua_rawseti(L, -3, (lua_Integer)(j - first_eval) + 1);
        lua_pushnumber(L, lm->log.eval_loss[j]);
        lua_rawseti(L, -2, (lua_Integer)(j - first_eval) + 1);
    }
    lua_setfield(L, -3, "eval_loss");
    lua_setfield(L, -2, "eval_step");
    lua_pushnumber(L, loss);
    lua_setfield(L, -2, "final_loss");
    lua_pushnumber(L, took > 0 ? (double)n_run * B * T / took : 0.0);
    lua_setfield(L, -2, "tokens_per_s");
    return 1;
}

/* m:loss(tokens, targets [, {fwd_hooks=}]) -> mean masked cross-entropy (no update) */
static int model_loss(lua_State *L) {
    lmodel *lm = check_model(L, 1);
    int opt = lua_istable(L, 4) ? 4 : 0;
    guard *gt = push_guard(L), *gg = push_guard(L);
    int B, T;
    read_batch(L, 2, 3, gt, gg, &B, &T);
    gt->hooks = mp_hooks_new(&lm->m->cfg);
    if (!gt->hooks) return luaL_error(L, "out of memory");
    add_fwd_hooks(L, opt, gt, lm);
    float loss;
    mp_status st = mp_model_loss(lm->m, gt->ints, gg->ints, B, T, mp_hooks_count(gt->hooks) ? gt->hooks : NULL, &loss);
    if (st) return mp_lua_fail(L, st);
    lua_pushnumber(L, loss);
    return 1;
}

static const luaL_Reg model_methods[] = {
    {"forward", model_forward},
    {"run_with_cache", model_run_with_cache},
    {"run_with_hooks", model_run_with_hooks},
    {"generate", model_generate},
    {"capture", model_capture},
    {"to_tokens", model_to_tokens},
    {"to_string", model_to_string},
    {"to_str_tokens", model_to_str_tokens},
    {"hook_names", model_hook_names},
    {"save", model_save},
    {"train_step", model_train_step},
    {"train", model_train},
    {"loss", model_loss},
    {"close", model_gc},
    {NULL, NULL}};

static int model_call(lua_State *L) { return run_common(L, 0); }

void mp_lua_open_model(lua_State *L) {
    luaL_newmetatable(L, MODEL_MT);
    lua_pushcfunction(L, model_gc); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, model_gc); lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, model_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, model_index); lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, model_call); lua_setfield(L, -2, "__call");
    luaL_newlib(L, model_methods);
    lua_setfield(L, -2, "__methods");
    lua_pop(L, 1);

    luaL_newmetatable(L, IV_MT);
    lua_pushcfunction(L, iv_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, iv_gc); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, GUARD_MT);
    lua_pushcfunction(L, guard_gc); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, guard_gc); lua_setfield(L, -2, "__close");
    lua_pop(L, 1);

    lua_pushcfunction(L, l_load); lua_setfield(L, -2, "load");
    lua_pushcfunction(L, l_hook_names); lua_setfield(L, -2, "hook_names");
    lua_newtable(L);
    lua_pushcfunction(L, l_load); lua_setfield(L, -2, "load");
    lua_pushcfunction(L, l_model_new); lua_setfield(L, -2, "new");
    lua_setfield(L, -2, "model");
    lua_newtable(L);
    lua_pushcfunction(L, l_ablate_zero); lua_setfield(L, -2, "zero");
    lua_pushcfunction(L, l_ablate_mean); lua_setfield(L, -2, "mean");
    lua_setfield(L, -2, "ablate");
    lua_newtable(L);
    lua_pushcfunction(L, l_tok_save_bytelevel); lua_setfield(L, -2, "save_bytelevel");
    lua_setfield(L, -2, "tokenizer");
    lua_pushcfunction(L, l_patch); lua_setfield(L, -2, "patch");
    mp_lua_open_train(L);
    lua_pushcfunction(L, l_steer); lua_setfield(L, -2, "steer");
    lua_pushcfunction(L, l_scale); lua_setfield(L, -2, "scale");
}
