/* lgrad.c — Lua bindings of gradients (runtime/grad.h): the `loss`,
 * `targets`, `incl_bwd` and `bwd_hooks` options of m:forward /
 * m:run_with_hooks / m:run_with_cache (run_common in lmodel.c hands such calls
 * here), the loss specifications ("ce", {logit_diff = {correct, wrong}}, or a
 * Lua function of the logits returning either one scalar Tensor that requires
 * grad, whose gradient autograd takes (lua/lautograd.c: the function is given
 * the logits as a leaf that requires grad), or the value and its gradient
 * with respect to the logits, by hand), and mp.attribution_patch.
 * Bindings only: the backward and the attribution sums are C (runtime/grad.c). */
#include "lmodel.h"
#include "grad.h"
#include "sae_splice.h"
#include "lautograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRADWS_MT "mechprobe.GradWS"

/* ---- workspace: the activation store of one forward-backward, freed by
 * __gc / __close (idempotent) if a Lua error unwinds ---- */
typedef struct {
    mp_acts acts;
    float *dlogits; /* [B,T,V] */
    float *rows;    /* [B*T] per-row losses ("ce") */
} gradws;

static int gradws_gc(lua_State *L) {
    gradws *w = luaL_checkudata(L, 1, GRADWS_MT);
    mp_acts_free(&w->acts);
    free(w->dlogits);
    free(w->rows);
    w->dlogits = w->rows = NULL;
    return 0;
}

static gradws *gradws_push(lua_State *L, const mp_config *c, int B, int T) {
    gradws *w = lua_newuserdatauv(L, sizeof *w, 0);
    memset(w, 0, sizeof *w);
    luaL_setmetatable(L, GRADWS_MT);
    mp_status st = mp_acts_init(&w->acts, c, B, T);
    if (st) mp_lua_fail(L, st);
    const size_t n = (size_t)B * T;
    w->dlogits = mp_malloc(n * (size_t)c->vocab * sizeof(float), "the metric's gradient (dlogits)");
    w->rows = w->dlogits ? mp_malloc(n * sizeof(float), "per-row losses") : NULL;
    if (!w->rows) mp_lua_fail(L, MP_ERR_NOMEM);
    return w;
}

/* ---- loss specifications ---- */
enum { LOSS_CE, LOSS_LOGIT_DIFF, LOSS_FN };
typedef struct {
    int kind;
    int fn;              /* LOSS_FN: stack index of the function */
    const int *targets;  /* LOSS_CE: [B,T], -1 ignored */
    int *correct, *wrong; /* LOSS_LOGIT_DIFF: [B] each */
    const int *mask;     /* [B,T] a padded batch's attention mask, or NULL (set after read_loss) */
    int cache;           /* LOSS_FN under run_with_cache: the cache's stack index (fn's second argument), else 0 */
    struct cache_adder *adders; /* the cached points whose direct gradient joins the backward (cache_adders) */
    int n_adders;
} loss_spec;

/* ---- loss = function(logits, cache): a metric of cached activations too ----
 * With a gradient wanted, each cached point with a backward gets a callback,
 * registered before every other backward callback there, that adds the
 * metric's direct partial d value / d cache[name] (autograd's, filled by
 * loss_eval) to the gradient arriving from downstream: the sum is the total
 * derivative, which then flows upstream and is what bwd_hooks and incl_bwd
 * see. */
typedef struct cache_adder {
    const char *name; /* the cache key (kept alive by the cache table) */
    size_t numel;     /* the activation's whole size */
    float *grad;      /* d value / d cache[name], whole; NULL: no direct partial */
} cache_adder;

static int adder_cb(void *user, const mp_hook_info *info, float *data) {
    const cache_adder *a = user;
    if (!a->grad) return 0;
    if (info->numel == a->numel) {
        for (size_t i = 0; i < info->numel; i++) data[i] += a->grad[i];
        return 0;
    }
    float *tmp = malloc(info->numel * sizeof(float)); /* a block of the point (attention maps) */
    if (!tmp) {
        mp_error(MP_ERR_NOMEM, "loss function: out of memory adding its gradient at %s", a->name);
        return 1;
    }
    mp_hook_view_copy(info, a->grad, tmp, 0);
    for (size_t i = 0; i < info->numel; i++) data[i] += tmp[i];
    free(tmp);
    return 0;
}

/* The adders' block: a count, then the adders (their gradients freed by __gc). */
typedef struct {
    int n;
    cache_adder a[];
} adder_block;

static int adders_gc(lua_State *L) {
    adder_block *b = lua_touserdata(L, 1);
    for (int i = 0; i < b->n; i++) {
        free(b->a[i].grad);
        b->a[i].grad = NULL;
    }
    return 0;
}

/* Registers an adder on bh at every cached point (keys of the cache table at
 * ls->cache that are hook points with a gradient), before anything else is
 * registered there. The adders live in a userdata on the stack. */
static void cache_adders(lua_State *L, loss_spec *ls, mp_hooks *bh) {
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, ls->cache)) {
        lua_pop(L, 1);
        n += lua_type(L, -1) == LUA_TSTRING;
    }
    adder_block *blk = lua_newuserdatauv(L, sizeof *blk + (size_t)(n ? n : 1) * sizeof(cache_adder), 0);
    blk->n = 0;
    lua_newtable(L); /* a metatable freeing the gradients when the block goes */
    lua_pushcfunction(L, adders_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    ls->adders = blk->a;
    ls->n_adders = 0;
    lua_pushnil(L);
    while (lua_next(L, ls->cache)) {
        mp_tensor *t = mp_lua_tensor_test(L, -1);
        mp_hook_id id;
        int layer;
        if (t && lua_type(L, -2) == LUA_TSTRING && ls->n_adders < n &&
            mp_hooks_parse(bh, lua_tostring(L, -2), &id, &layer) == 0 && mp_hooks_has_grad(bh, id)) {
            cache_adder *a = &ls->adders[ls->n_adders++];
            *a = (cache_adder){lua_tostring(L, -2), t->numel, NULL};
            blk->n = ls->n_adders;
            mp_status st = mp_hooks_add_at(bh, id, layer, adder_cb, a);
            if (st) mp_lua_fail(L, st);
        }
        lua_pop(L, 1);
    }
}

#define LOSS_FORMS "\"ce\", {logit_diff = {correct, wrong}} or a function(logits) -> value, dlogits"

/* The ids of logit_diff's entry `which` (1: correct, 2: wrong) for B rows: one
 * integer for every row or a list of B. */
static void read_ids(lua_State *L, int spec, int which, int *out, int B, int V, const char *fn) {
    const char *what = which == 1 ? "correct" : "wrong";
    lua_geti(L, spec, which);
    int v = lua_gettop(L);
    if (lua_istable(L, v)) {
        if (luaL_len(L, v) != B)
            luaL_error(L, "%s: loss logit_diff: '%s' has %d ids for a batch of %d rows", fn, what,
                       (int)luaL_len(L, v), B);
        for (int b = 0; b < B; b++) {
            lua_geti(L, v, b + 1);
            const char *w = lua_pushfstring(L, "loss logit_diff: %s[%d]", what, b + 1);
            out[b] = (int)mp_lua_int_at(L, -2, fn, w, 0, V - 1);
            lua_pop(L, 2);
        }
    } else {
        if (lua_isnil(L, v))
            luaL_error(L, "%s: loss logit_diff needs {correct, wrong} (token ids, or lists of one per row)", fn);
        const char *w = lua_pushfstring(L, "loss logit_diff: %s", what);
        int id = (int)mp_lua_int_at(L, v, fn, w, 0, V - 1);
        lua_pop(L, 1);
        for (int b = 0; b < B; b++) out[b] = id;
    }
    lua_pop(L, 1);
}

/* Reads opts[key] (a loss spec) for B x T tokens; "ce" reads opts.targets.
 * Leaves what it needs alive on the stack. Returns 0 when the key is absent. */
static int read_loss(lua_State *L, int opt, const char *key, const char *fn, int B, int T, int V, loss_spec *ls) {
    memset(ls, 0, sizeof *ls);
    int t = mp_lua_opt_get(L, opt, key);
    int li = lua_gettop(L);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        if (mp_lua_opt_get(L, opt, "targets") != LUA_TNIL)
            luaL_error(L, "%s: option 'targets' is for loss = \"ce\", but no '%s' is given", fn, key);
        lua_pop(L, 1);
        return 0;
    }
    if (t == LUA_TFUNCTION) {
        ls->kind = LOSS_FN;
        ls->fn = li;
    } else if (t == LUA_TSTRING) {
        const char *s = lua_tostring(L, li);
        if (strcmp(s, "ce") != 0) luaL_error(L, "%s: unknown loss \"%s\" (%s)", fn, s, LOSS_FORMS);
        ls->kind = LOSS_CE;
        if (mp_lua_opt_get(L, opt, "targets") == LUA_TNIL)
            luaL_error(L, "%s: loss \"ce\" needs 'targets' (token ids [B,T], -1 where ignored, as m:loss)", fn);
        guard *g = mp_lua_guard_push(L);
        int B2, T2;
        mp_lua_read_tokens(L, lua_gettop(L) - 1, g, &B2, &T2, "targets", V, 1);
        if (B2 != B || T2 != T)
            luaL_error(L, "%s: targets: shape [%d,%d] differs from the tokens' [%d,%d]", fn, B2, T2, B, T);
        ls->targets = g->ints;
    } else if (t == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, li)) {
            lua_pop(L, 1);
            if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "logit_diff") != 0)
                luaL_error(L, "%s: unknown loss {%s = ...} (%s)", fn,
                           lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1), LOSS_FORMS);
        }
        if (lua_getfield(L, li, "logit_diff") != LUA_TTABLE)
            luaL_error(L, "%s: loss logit_diff needs {correct, wrong} (token ids, or lists of one per row)", fn);
        int spec = lua_gettop(L);
        ls->kind = LOSS_LOGIT_DIFF;
        ls->correct = lua_newuserdatauv(L, 2 * (size_t)B * sizeof(int), 0);
        ls->wrong = ls->correct + B;
        read_ids(L, spec, 1, ls->correct, B, V, fn);
        read_ids(L, spec, 2, ls->wrong, B, V, fn);
    } else {
        luaL_error(L, "%s: option '%s' must be %s; got %s", fn, key, LOSS_FORMS, luaL_typename(L, li));
    }
    return 1;
}

/* The metric's value on logits lt [B,T,V] and (dl non-NULL) its gradient into
 * dl [B,T,V]; rows: B*T floats of scratch. */
static double loss_eval(lua_State *L, const loss_spec *ls, mp_tensor *lt, int li, float *dl, float *rows,
                        const char *fn) {
    const int B = (int)lt->shape[0], T = (int)lt->shape[1], V = (int)lt->shape[2], N = B * T;
    const size_t n = lt->numel;
    switch (ls->kind) {
    case LOSS_CE: {
        double v;
        mp_status st = mp_grad_ce(lt->data, ls->targets, N, V, dl, rows, &v);
        if (st == MP_ERR_ARG) luaL_error(L, "%s: %s", fn, mp_last_error());
        if (st) mp_lua_fail(L, st);
        return v;
    }
    case LOSS_LOGIT_DIFF: {
        double v;
        mp_grad_logit_diff_masked(lt->data, B, T, V, ls->correct, ls->wrong, ls->mask, dl, &v);
        return v;
    }
    default: {
        lua_pushvalue(L, ls->fn);
        lua_pushvalue(L, li);
        if (ls->cache) lua_pushvalue(L, ls->cache);
        lua_call(L, ls->cache ? 2 : 1, 2);
        mp_lua_tensor_ud *r = luaL_testudata(L, -2, MP_TENSOR_MT);
        if (lua_isnil(L, -1) && (r || lua_isnumber(L, -2))) {
            /* one result: a scalar metric (a Tensor, or a number when the
             * untracked logits made its sum one), its gradient by autograd */
            char sh[128] = "";
            if (r) {
                mp_lua_tensor_check(L, -2);
                mp_tensor_shape_str(r->t.ndim, r->t.shape, sh, sizeof sh);
                if (r->t.numel != 1)
                    luaL_error(L, "%s: the loss function returned a Tensor %s; a metric is one number (a Tensor of "
                                  "one element, or value, dlogits)", fn, sh);
            }
            double v = r ? r->t.data[0] : lua_tonumber(L, -2);
            lua_pop(L, 2);
            if (!dl) return v;
            /* again, on a view of the logits that requires grad (a leaf of its
             * own: lt stays untracked, and the first call saw the logits
             * exactly as the value, dlogits form does) */
            lt = mp_lua_tensor_check(L, li);
            mp_lua_tensor_on(L, lt->st, (size_t)(lt->data - lt->st->data), lt->ndim, lt->shape);
            int leaf = lua_gettop(L);
            mp_lua_ag_leaf(L, leaf);
            int gcache = 0; /* the cache again, its points with a gradient as leaves that require grad */
            if (ls->cache) {
                lua_newtable(L);
                gcache = lua_gettop(L);
                if (lua_getmetatable(L, ls->cache)) lua_setmetatable(L, gcache); /* the cache's helpers */
                lua_pushnil(L);
                while (lua_next(L, ls->cache)) {
                    lua_pushvalue(L, -2);
                    lua_insert(L, -2);
                    lua_rawset(L, gcache);
                }
                for (int i = 0; i < ls->n_adders; i++) {
                    lua_getfield(L, ls->cache, ls->adders[i].name);
                    const mp_tensor *ct = mp_lua_tensor_check(L, -1);
                    mp_lua_tensor_on(L, ct->st, (size_t)(ct->data - ct->st->data), ct->ndim, ct->shape);
                    mp_lua_ag_leaf(L, -1);
                    lua_setfield(L, gcache, ls->adders[i].name);
                    lua_pop(L, 1);
                }
            }
            lua_pushvalue(L, ls->fn);
            lua_pushvalue(L, leaf);
            if (gcache) lua_pushvalue(L, gcache);
            lua_call(L, gcache ? 2 : 1, 1);
            r = luaL_testudata(L, -1, MP_TENSOR_MT);
            if (!r || !r->ag || r->t.numel != 1)
                luaL_error(L, "%s: the loss function must return value, dlogits, or one scalar Tensor computed from "
                              "the logits it is given (they require grad: autograd takes the gradient); it returned "
                              "a %s%s", fn, r ? "Tensor" : luaL_typename(L, -1), r && r->ag ? " of more than one element"
                              : r ? " that does not require grad" : "");
            v = r->t.data[0];
            mp_status st = mp_ag_backward(r->ag, NULL, 0);
            if (st != MP_OK) luaL_error(L, "%s: the loss function's backward: %s", fn, mp_last_error());
            mp_lua_tensor_ud *lu = lua_touserdata(L, leaf);
            const mp_tensor *g = mp_ag_grad(lu->ag);
            if (g) memcpy(dl, g->data, n * sizeof(float));
            else memset(dl, 0, n * sizeof(float)); /* the metric does not depend on the logits */
            mp_lua_ag_gc(lu);
            for (int i = 0; gcache && i < ls->n_adders; i++) { /* the direct partials, for the adders */
                cache_adder *a = &ls->adders[i];
                lua_getfield(L, gcache, a->name);
                mp_lua_tensor_ud *cu = luaL_testudata(L, -1, MP_TENSOR_MT);
                const mp_tensor *cg = cu && cu->ag ? mp_ag_grad(cu->ag) : NULL;
                if (cg && cg->numel == a->numel) {
                    if (!a->grad && !(a->grad = malloc(a->numel * sizeof(float))))
                        luaL_error(L, "%s: out of memory for the loss function's gradient at %s", fn, a->name);
                    memcpy(a->grad, cg->data, a->numel * sizeof(float));
                }
                if (cu && cu->ag) mp_lua_ag_gc(cu);
                lua_pop(L, 1);
            }
            lua_settop(L, leaf - 1);
            return v;
        }
        double v = 0;
        if (r && r->t.numel == 1) v = mp_lua_tensor_check(L, -2)->data[0];
        else if (lua_isnumber(L, -2)) v = lua_tonumber(L, -2);
        else
            luaL_error(L, "%s: the loss function must return a scalar Tensor (from the logits, which require grad) "
                          "or value, dlogits (a number and a Tensor [%d,%d,%d]); its first result is a %s", fn, B, T, V,
                       luaL_typename(L, -2));
        if (dl) {
            mp_tensor *g = mp_lua_tensor_test(L, -1);
            if (!g)
                luaL_error(L, "%s: the loss function must return value, dlogits: dlogits (d value / d logits, a "
                              "Tensor [%d,%d,%d]; or return one scalar Tensor computed from the logits, and autograd "
                              "takes the gradient) is a %s", fn, B, T, V, luaL_typename(L, -1));
            if (g->ndim != 3 || g->shape[0] != B || g->shape[1] != T || g->shape[2] != V) {
                char sh[96];
                int o = 0;
                for (int i = 0; i < g->ndim && o < 80; i++)
                    o += snprintf(sh + o, sizeof sh - (size_t)o, "%s%lld", i ? "," : "", (long long)g->shape[i]);
                sh[o] = '\0';
                luaL_error(L, "%s: the loss function's dlogits has shape [%s]; the logits' is [%d,%d,%d]", fn, sh, B,
                           T, V);
            }
            memcpy(dl, g->data, n * sizeof(float));
        }
        lua_pop(L, 2);
        return v;
    }
    }
}

/* ---- gradient captures ---- */
static int copy_cb(void *user, const mp_hook_info *info, float *data) {
    mp_tensor *t = user;
    mp_hook_view_copy(info, t->data, data, 1);
    return 0;
}

typedef struct {
    lua_State *L;
    int tbl;            /* table receiving the Tensors */
    const char *suffix; /* appended to the hook name for the key */
    mp_hooks *hooks;
    int B, T;
    const mp_config *cfg;
    int explicit_names; /* no wildcard in the selection: a point without a gradient is an error */
    int need_grad;
    const char *fn;
    char nograd[96];    /* the first selected point without a gradient */
    mp_status st;
} capture_ctx;

static int no_grad(mp_hook_id id) { return !mp_hook_has_grad(id); }

static void capture_visit(void *u, mp_hook_id id, int layer, const char *name) {
    capture_ctx *c = u;
    if (c->st || c->nograd[0]) return;
    if (c->need_grad && !mp_hooks_has_grad(c->hooks, id)) {
        if (c->explicit_names) snprintf(c->nograd, sizeof c->nograd, "%s", name);
        return;
    }
    int64_t shape[4];
    int nd = mp_hooks_shape(c->hooks, id, c->B, c->T, 0, shape); /* an SAE's sub-points too */
    mp_tensor *t = mp_lua_tensor_new(c->L, nd, shape);
    lua_pushfstring(c->L, "%s%s", name, c->suffix);
    lua_pushvalue(c->L, -2);
    lua_rawset(c->L, c->tbl);
    c->st = mp_hooks_add_reader_at(c->hooks, id, layer, copy_cb, t);
    lua_pop(c->L, 1); /* the table keeps it */
}

/* Registers copies of the points `globs` selects into tbl[name .. suffix].
 * With need_grad, a point without a gradient is skipped when a glob or a
 * names filter function (filtered: globs is the list it picked) selected it,
 * and an error when it was named. */
static void capture(lua_State *L, int tbl, const char *globs, const char *suffix, mp_hooks *hooks, int B, int T,
                    const mp_config *cfg, int need_grad, int filtered, const char *fn) {
    const int named = !filtered && strpbrk(globs, "*?[") == NULL;
    capture_ctx cc = {L, tbl, suffix, hooks, B, T, cfg, named, need_grad, fn, "", MP_OK};
    mp_hooks_select(hooks, globs, capture_visit, &cc, NULL, 0);
    if (cc.nograd[0]) luaL_error(L, "%s: no gradient at hook %s yet", fn, cc.nograd);
    if (cc.st) mp_lua_fail(L, cc.st);
}

/* Training-mode forward of tokens (fwd hooks: registry fh, Lua functions in
 * ftbl), logits copied into lt (at li), the metric evaluated; then, with
 * bh non-NULL, the backward with its hooks (Lua functions in btbl). Returns
 * the metric's value. */
static double run_fwd_bwd(lua_State *L, const mp_model *m, const int *tokens, int B, int T, const mp_hooks *fh,
                          int ftbl, const mp_hooks *bh, int btbl, const loss_spec *ls, mp_tensor *lt, int li,
                          const char *fn) {
    const int *mask = ls->mask; /* a padded batch (ragged.c) */
    if (m->q)
        luaL_error(L, "%s: gradients need float32 weights; %s keeps them quantized (m:dequantize() first)", fn,
                   m->source[0] ? m->source : "this model");
    gradws *w = gradws_push(L, &m->cfg, B, T);
    int wi = lua_gettop(L);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = fh && mp_hooks_count(fh) ? fh : NULL;
    fp.acts = &w->acts;
    fp.attn_mask = mask;
    mp_status st = mp_model_forward(m, tokens, B, T, &fp, NULL);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        mp_lua_fail(L, st);
    }
    lt = mp_lua_tensor_check(L, li); /* Lua ran since the caller checked it (hooks): still valid? */
    memcpy(lt->data, w->acts.logits, lt->numel * sizeof(float));
    double v = loss_eval(L, ls, lt, li, bh ? w->dlogits : NULL, w->rows, fn);
    if (bh && (st = mp_model_backward_acts_masked(m, &w->acts, w->dlogits, mp_hooks_count(bh) ? bh : NULL,
                                                  mask))) {
        mp_lua_hooks_rethrow(L, btbl);
        mp_lua_fail(L, st);
    }
    lua_pushcfunction(L, gradws_gc); /* free the store now rather than at the next collection */
    lua_pushvalue(L, wi);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
    return v;
}

/* A padded batch: the mask into ls, and "ce"'s targets at pads (or before
 * one) -1, as m:loss counts them (mp_mask_targets; a copy on the stack). */
static void loss_mask(lua_State *L, loss_spec *ls, const int *mask, int B, int T) {
    if (!(ls->mask = mask) || ls->kind != LOSS_CE) return;
    int *t = lua_newuserdatauv(L, (size_t)B * T * sizeof(int), 0);
    mp_mask_targets(mask, ls->targets, B, T, t);
    ls->targets = t;
}

/* A bwd_hooks entry naming (without a wildcard) a hook point that has no
 * backward is an error; a glob simply never fires there. */
static void check_bwd_names(lua_State *L, int opt, const mp_config *cfg, const char *fn) {
    if (mp_lua_opt_get(L, opt, "bwd_hooks") == LUA_TTABLE)
        for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
            lua_geti(L, -1, i);
            lua_geti(L, -1, 1);
            const char *s = lua_tostring(L, -1);
            char one[128];
            while (s && *s) { /* each comma-separated name */
                size_t k = strcspn(s, ",");
                snprintf(one, sizeof one, "%.*s", (int)(k < sizeof one - 1 ? k : sizeof one - 1), s);
                mp_hook_id id;
                int layer;
                if (!strpbrk(one, "*?[") && mp_hook_parse(cfg, one, &id, &layer) == 0 && !mp_grad_has_hook(id))
                    luaL_error(L, "%s: bwd_hooks[%d]: no gradient at hook %s yet", fn, (int)i, one);
                s += k + (s[k] == ',');
            }
            lua_pop(L, 2);
        }
    lua_pop(L, 1);
}

int mp_lua_grad_wanted(lua_State *L, int opt) {
    if (!opt) return 0;
    int want = 0;
    const char *const keys[] = {"loss", "targets", "bwd_hooks"};
    for (int i = 0; i < 3; i++) {
        want |= mp_lua_opt_get(L, opt, keys[i]) != LUA_TNIL;
        lua_pop(L, 1);
    }
    int t = mp_lua_opt_get(L, opt, "incl_bwd");
    want |= t != LUA_TNIL && (t != LUA_TBOOLEAN || lua_toboolean(L, -1));
    lua_pop(L, 1);
    return want;
}

int mp_lua_run_grad(lua_State *L, lmodel *lm, guard *g, int B, int T, int opt, const char *fn, int ftbl,
                    int cache_idx, const char *globs, mp_tensor *logits, int li) {
    const mp_config *cfg = &lm->m->cfg;
    const int incl_bwd = cache_idx ? mp_lua_opt_bool(L, opt, fn, "incl_bwd", 0) : 0;
    if (!logits || logits->ndim != 3)
        luaL_error(L, "%s: option 'logits' must be \"all\" with a loss (the metric reads the logits)", fn);
    loss_spec ls;
    int have_loss = read_loss(L, opt, "loss", fn, B, T, cfg->vocab, &ls);
    if (have_loss) loss_mask(L, &ls, mp_lua_opt_mask(L, opt, fn, B, T), B, T);
    int bt = mp_lua_opt_get(L, opt, "bwd_hooks");
    lua_pop(L, 1);
    if (!have_loss && (incl_bwd || bt != LUA_TNIL))
        luaL_error(L, "%s: %s needs a 'loss' (%s): the gradients are those of that metric", fn,
                   incl_bwd ? "incl_bwd = true" : "bwd_hooks", LOSS_FORMS);
    guard *gb = mp_lua_guard_push(L);
    gb->hooks = mp_hooks_new_bwd(lm->m, g->hooks); /* the attached SAEs' backward (sae_splice.h) */
    if (!gb->hooks) mp_lua_fail(L, MP_ERR_NOMEM);
    if (have_loss && ls.kind == LOSS_FN && cache_idx) {
        ls.cache = cache_idx; /* loss = function(logits, cache) */
        if (incl_bwd || bt != LUA_TNIL) cache_adders(L, &ls, gb->hooks);
    }
    const int nsplice = mp_hooks_count(gb->hooks);
    int btbl = mp_lua_add_hooks_opt(L, opt, gb->hooks, T, "bwd_hooks");
    check_bwd_names(L, opt, cfg, fn);
    if (incl_bwd && globs[0]) {
        /* names = function: a filter (as a glob), not a list of names */
        const int filtered = mp_lua_opt_get(L, opt, "names") == LUA_TFUNCTION;
        lua_pop(L, 1);
        capture(L, cache_idx, globs, "_grad", gb->hooks, B, T, cfg, 1, filtered, fn);
    }
    const int backward = incl_bwd || mp_hooks_count(gb->hooks) > nsplice;
    double v = run_fwd_bwd(L, lm->m, g->ints, B, T, mp_hooks_count(g->hooks) ? g->hooks : NULL, ftbl,
                           backward ? gb->hooks : NULL, btbl, &ls, logits, li, fn);
    lua_pushvalue(L, li);
    if (cache_idx) {
        lua_pushnumber(L, v);
        lua_setfield(L, cache_idx, "loss");
        lua_pushvalue(L, cache_idx);
    } else {
        lua_pushnumber(L, v);
    }
    return 2;
}

/* mp.attribution_patch(m, clean, corrupt, {names=, metric=, per=, targets=})
 * -> {name = Tensor, ...}, {clean = metric, corrupt = metric} */
static int l_attribution_patch(lua_State *L) {
    static const char *const fn = "mp.attribution_patch";
    static const char *const known[] = {"names", "metric", "per", "targets", "attention_mask", NULL};
    static const char *const pers[] = {"position", "head", "head_position", "neuron", "all", NULL};
    lua_settop(L, 4);
    lmodel *lm = mp_lua_model_busy(L, 1, "attribution_patch", 0);
    const mp_model *m = lm->m;
    const mp_config *cfg = &m->cfg;
    mp_lua_opt_check(L, 4, fn, known);
    if (!lua_istable(L, 4)) luaL_error(L, "%s: options {names = ..., metric = ...} expected", fn);
    guard *gc = mp_lua_guard_push(L), *gx = mp_lua_guard_push(L);
    int B, T, B2, T2;
    mp_lua_read_tokens(L, 2, gc, &B, &T, "clean tokens", cfg->vocab, 0);
    mp_lua_read_tokens(L, 3, gx, &B2, &T2, "corrupt tokens", cfg->vocab, 0);
    if (B != B2 || T != T2)
        luaL_error(L, "%s: the clean tokens are [%d,%d] but the corrupt tokens [%d,%d] (they must match)", fn, B, T,
                   B2, T2);
    loss_spec ls;
    if (!read_loss(L, 4, "metric", fn, B, T, cfg->vocab, &ls))
        luaL_error(L, "%s: option 'metric' is required (%s)", fn, LOSS_FORMS);
    loss_mask(L, &ls, mp_lua_opt_mask(L, 4, fn, B, T), B, T); /* both runs padded alike */
    mp_attr_per per = (mp_attr_per)mp_lua_opt_enum(L, 4, fn, "per", MP_ATTR_POSITION, pers);
    if (mp_lua_opt_get(L, 4, "names") == LUA_TNIL) luaL_error(L, "%s: option 'names' is required", fn);
    lua_pop(L, 1);
    const char *globs = mp_lua_opt_globs(L, 4, fn, "names", "");
    char bad[256];
    bad[0] = '\0';
    char why[192];
    guard *hc = mp_lua_guard_push(L), *hx = mp_lua_guard_push(L), *hb = mp_lua_guard_push(L);
    /* with the attached SAEs: their sub-points are names too (sae_splice.h) */
    if (!(hc->hooks = mp_hooks_new_model(m)) || !(hx->hooks = mp_hooks_new_model(m)) ||
        !(hb->hooks = mp_hooks_new_bwd(m, hx->hooks)))
        mp_lua_fail(L, MP_ERR_NOMEM);
    if (!mp_hooks_select(hc->hooks, globs, NULL, NULL, bad, sizeof bad) || bad[0])
        luaL_error(L, "%s: names: unknown hook name '%s'%s (see mp.hook_names(model))", fn, bad[0] ? bad : globs,
                   mp_hook_absent_why(cfg, bad[0] ? bad : globs, why, sizeof why));
    lua_newtable(L);
    int acts = lua_gettop(L);
    capture(L, acts, globs, "|clean", hc->hooks, B, T, cfg, 1, 0, fn);
    lua_pushnil(L);
    if (!lua_next(L, acts)) { /* a glob skipped every point it matched: an empty result would say nothing */
        char none[256];
        luaL_error(L, "%s: names '%s' selects no hook point with a gradient (%s have none yet)", fn, globs,
                   mp_hook_suffixes(no_grad, none, sizeof none));
    }
    lua_pop(L, 2);
    capture(L, acts, globs, "|corrupt", hx->hooks, B, T, cfg, 1, 0, fn);
    capture(L, acts, globs, "|grad", hb->hooks, B, T, cfg, 1, 0, fn);
    /* each run gives the metric logits of its own: the metric may keep its
     * argument, or close it, without touching the other run's */
    int64_t ls3[3] = {B, T, cfg->vocab};
    mp_tensor *lt = mp_lua_tensor_new(L, 3, ls3);
    int li = lua_gettop(L);
    /* the clean run: activations and the metric's value */
    double vc = run_fwd_bwd(L, m, gc->ints, B, T, hc->hooks, 0, NULL, 0, &ls, lt, li, fn);
    lt = mp_lua_tensor_new(L, 3, ls3);
    li = lua_gettop(L);
    /* the corrupted run: activations and gradients */
    double vx = run_fwd_bwd(L, m, gx->ints, B, T, hx->hooks, 0, hb->hooks, 0, &ls, lt, li, fn);
    lua_newtable(L);
    int res = lua_gettop(L);
    /* one estimate per selected point, in firing order */
    lua_newtable(L);
    int names = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, acts)) {
        const char *k = lua_tostring(L, -2);
        size_t kl = strlen(k);
        if (kl > 6 && strcmp(k + kl - 6, "|clean") == 0) {
            lua_pushlstring(L, k, kl - 6);
            lua_rawseti(L, names, (lua_Integer)luaL_len(L, names) + 1);
        }
        lua_pop(L, 1);
    }
    for (lua_Integer i = 1, n = luaL_len(L, names); i <= n; i++) {
        lua_rawgeti(L, names, i);
        const char *name = lua_tostring(L, -1);
        mp_hook_id id;
        int layer;
        mp_hooks_parse(hc->hooks, name, &id, &layer);
        int64_t os[2];
        int ond = mp_grad_attr_shape_hs(hc->hooks, cfg, id, T, per, os);
        if (!ond)
            luaL_error(L, "%s: per = \"%s\" does not apply to %s (%s)", fn, pers[per], name,
                       per == MP_ATTR_NEURON ? "it has a head axis: use \"head\", \"head_position\" or \"position\""
                                             : "it has no head axis: use \"position\", \"neuron\" or \"all\"");
        lua_pushfstring(L, "%s|clean", name);
        lua_rawget(L, acts);
        lua_pushfstring(L, "%s|corrupt", name);
        lua_rawget(L, acts);
        lua_pushfstring(L, "%s|grad", name);
        lua_rawget(L, acts);
        const mp_tensor *tc = mp_lua_tensor_check(L, -3), *tx = mp_lua_tensor_check(L, -2),
                        *tg = mp_lua_tensor_check(L, -1);
        mp_tensor *out = mp_lua_tensor_new(L, ond, os);
        mp_status st = mp_grad_attribution_hs(hc->hooks, cfg, id, B, T, tc->data, tx->data, tg->data, per, out->data);
        if (st) mp_lua_fail(L, st);
        lua_setfield(L, res, name);
        lua_pop(L, 4);
    }
    lua_pushvalue(L, res);
    lua_createtable(L, 0, 2);
    lua_pushnumber(L, vc);
    lua_setfield(L, -2, "clean");
    lua_pushnumber(L, vx);
    lua_setfield(L, -2, "corrupt");
    return 2;
}

void mp_lua_open_grad(lua_State *L) {
    luaL_newmetatable(L, GRADWS_MT);
    lua_pushcfunction(L, gradws_gc); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, gradws_gc); lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_attribution_patch);
    lua_setfield(L, -2, "attribution_patch");
}
