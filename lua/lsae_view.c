/* lsae_view.c — SAE feature views from Lua:
 *   mp.sae.top_contexts{sae=, model=, tokens= | text=, features= | n_features=,
 *                       top = 10, window = {12, 4}, batch_size =, hook =,
 *                       attention_mask =}
 * runs the model over the tokens in batches of rows, captures the SAE's hook
 * point (sae.cfg.hook_name, or hook=) with a C reader callback, encodes it
 * with the SAE (mp_sae_encode) and keeps each feature's top contexts and
 * density in one pass (analyze/feat_top.h); and
 *   mp.sae.feature_view(result, path [, {title=, width=, dpi=, font_size=,
 *                       color=, show_values=}])
 * draws them (plots/feature_view.h) as PNG, SVG or PDF. Features, sequences
 * and positions are 0-based, as SAELens / Neuronpedia number features and
 * TransformerLens positions; a context's `center` is the 1-based index of
 * its max token in its `tokens` list. */
#include "feat_top.h"
#include "feature_view.h"
#include "lmodel.h"
#include "mp_hooks.h"
#include "mp_lua.h"
#include "sae.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tracker as a userdata, so that an error frees it; its metatable
 * is kept in the registry under a private key (an internal object, not a
 * type of the API) ---- */
static const char FEAT_TOP_KEY = 0;

typedef struct {
    mp_feat_top *t;
} ltop;

static int ltop_gc(lua_State *L) {
    ltop *u = lua_touserdata(L, 1);
    if (u) {
        mp_feat_top_free(u->t);
        u->t = NULL;
    }
    return 0;
}

/* ---- the capture callback ---- */
typedef struct {
    float *x;        /* [rows, d_in] of the current batch */
    int B, T, d_in;
    int hits;
} capture;

static int capture_cb(void *user, const mp_hook_info *info, float *data) {
    capture *c = user;
    size_t per = 1;
    for (int i = 2; i < info->ndim; i++) per *= (size_t)info->full[i];
    if (info->full[0] != c->B || info->full[1] != c->T || per != (size_t)c->d_in || info->axis < 0) {
        mp_error(MP_ERR_ARG, "top_contexts: hook %s is [%lld, %lld, %zu per token], expected [%d, %d, %d]", info->name,
                 (long long)info->full[0], (long long)info->full[1], per, c->B, c->T, c->d_in);
        return 1;
    }
    mp_hook_view_copy(info, c->x, data, 1);
    c->hits++;
    return 0;
}

/* Reads opts.features (a list of 0-based indices) or opts.n_features (0..n-1)
 * into a new userdata of ints; returns their count. */
static int *read_features(lua_State *L, int opt, const char *fn, int d_sae, int *n) {
    int has_list = mp_lua_opt_get(L, opt, "features") != LUA_TNIL;
    int has_n = mp_lua_opt_get(L, opt, "n_features") != LUA_TNIL;
    lua_pop(L, 2);
    if (has_list == has_n)
        luaL_error(L, "%s: give either 'features' (a list of 0-based feature indices) or 'n_features' (the first n)",
                   fn);
    if (has_n) {
        *n = (int)mp_lua_opt_int(L, opt, fn, "n_features", 0, 1, d_sae);
        int *f = lua_newuserdatauv(L, (size_t)*n * sizeof(int), 0);
        for (int i = 0; i < *n; i++) f[i] = i;
        return f;
    }
    mp_lua_opt_type(L, opt, fn, "features", LUA_TTABLE);
    int li = lua_gettop(L);
    lua_Integer k = luaL_len(L, li);
    if (k < 1 || k > 65536)
        luaL_error(L, "%s: option 'features' must list 1..65536 feature indices, got %d", fn, (int)k);
    *n = (int)k;
    int *f = lua_newuserdatauv(L, (size_t)k * sizeof(int), 0);
    for (lua_Integer i = 1; i <= k; i++) {
        char what[48];
        snprintf(what, sizeof what, "option 'features'[%d]", (int)i);
        lua_rawgeti(L, li, i);
        f[i - 1] = (int)mp_lua_int_at(L, -1, fn, what, 0, d_sae - 1);
        lua_pop(L, 1);
    }
    lua_remove(L, li);
    return f;
}

/* The text of token ids[p] as decoded after ids[p - 1]; its vocabulary piece
 * when it decodes to nothing (BOS "<s>", a control token); pushed. */
static void push_token_str(lua_State *L, const mp_tok *tok, const int *ids, int p) {
    char buf[512];
    int n = mp_tok_token_bytes(tok, p > 0 ? ids[p - 1] : -1, ids[p], buf, sizeof buf);
    if (n == 0) {
        const char *piece = mp_tok_piece(tok, ids[p]);
        lua_pushstring(L, piece ? piece : "");
        return;
    }
    if (n < 0) n = 0;
    lua_pushlstring(L, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static int l_top_contexts(lua_State *L) {
    static const char *const known[] = {"sae",    "model",      "tokens", "text", "features",       "n_features",
                                        "top",    "window",     "hook",   "batch_size", "attention_mask", NULL};
    const char *fn = "mp.sae.top_contexts";
    lua_settop(L, 1);
    luaL_checktype(L, 1, LUA_TTABLE);
    mp_lua_opt_check(L, 1, fn, known);
    if (lua_getfield(L, 1, "model") == LUA_TNIL) return luaL_error(L, "%s: option 'model' is required", fn); /* 2 */
    if (lua_getfield(L, 1, "sae") == LUA_TNIL) return luaL_error(L, "%s: option 'sae' is required", fn);     /* 3 */
    lmodel *lm = mp_lua_model_busy(L, 2, "top_contexts", 0);                                              /* 4 */
    const mp_sae *s = mp_lua_sae_check(L, 3);
    const mp_config *cfg = &lm->m->cfg;

    /* the hook point */
    const char *hook = mp_lua_opt_str(L, 1, fn, "hook", s->hook_name);
    lua_pushstring(L, hook);
    hook = lua_tostring(L, -1);
    int hook_i = lua_gettop(L); /* keeps it alive, for the result */
    if (!*hook)
        return luaL_error(L, "%s: the SAE has no hook_name: say where to read its input with hook = "
                             "\"blocks.L.hook_...\"", fn);
    mp_hook_id hid;
    int hlayer;
    if (mp_hook_parse(cfg, hook, &hid, &hlayer) != 0) {
        char why[192];
        return luaL_error(L, "%s: unknown hook name '%s'%s (see mp.hook_names(model))", fn, hook,
                          mp_hook_absent_why(cfg, hook, why, sizeof why));
    }
    if (mp_hook_shape_kind[hid] == MP_SHAPE_BHTS)
        return luaL_error(L, "%s: hook '%s' is an attention map [B, H, T, S], not one vector per token", fn, hook);
    int64_t hs[4];
    int hnd = mp_hook_shape(cfg, hid, 1, 1, 0, hs);
    int64_t per = 1;
    for (int i = 2; i < hnd; i++) per *= hs[i];
    if (per != s->d_in)
        return luaL_error(L, "%s: hook '%s' has %d values per token, the SAE's d_in is %d", fn, hook, (int)per,
                          s->d_in);

    /* the tokens */
    int has_tok = lua_getfield(L, 1, "tokens") != LUA_TNIL, has_text = lua_getfield(L, 1, "text") != LUA_TNIL;
    lua_pop(L, 2);
    if (has_tok == has_text) return luaL_error(L, "%s: give either 'tokens' or 'text'", fn);
    guard *g = mp_lua_guard_push(L);
    int B, T;
    const int *mask = NULL;
    if (has_text) {
        if (mp_lua_opt_get(L, 1, "attention_mask") != LUA_TNIL)
            return luaL_error(L, "%s: 'attention_mask' goes with 'tokens' (a text's padding is made here)", fn);
        lua_pop(L, 1);
        lua_getfield(L, 2, "to_tokens");
        lua_pushvalue(L, 2);
        lua_getfield(L, 1, "text");
        if (!lua_isstring(L, -1) && !lua_istable(L, -1))
            return luaL_error(L, "%s: option 'text' must be a string or a list of strings, got %s", fn,
                              luaL_typename(L, -1));
        int batch = lua_istable(L, -1);
        lua_call(L, 2, 2); /* tokens [, mask] */
        mp_lua_read_tokens(L, -2, g, &B, &T, "text", cfg->vocab, 0);
        if (batch) {
            lua_newtable(L);
            lua_pushvalue(L, -2);
            lua_setfield(L, -2, "attention_mask");
            mask = mp_lua_opt_mask(L, lua_gettop(L), fn, B, T);
        }
    } else {
        lua_getfield(L, 1, "tokens");
        mp_lua_read_tokens(L, -1, g, &B, &T, "tokens", cfg->vocab, 0);
        mask = mp_lua_opt_mask(L, 1, fn, B, T);
    }

    /* what to keep */
    int nf;
    int *feats = read_features(L, 1, fn, s->d_sae, &nf);
    int top = (int)mp_lua_opt_int(L, 1, fn, "top", 10, 1, 100000);
    int before = 12, after = 4;
    if (mp_lua_opt_type(L, 1, fn, "window", LUA_TTABLE)) {
        if (luaL_len(L, -1) != 2)
            return luaL_error(L, "%s: option 'window' must be {before, after} (two counts of tokens)", fn);
        lua_rawgeti(L, -1, 1);
        before = (int)mp_lua_int_at(L, -1, fn, "option 'window'[1] (tokens before)", 0, 4096);
        lua_rawgeti(L, -2, 2);
        after = (int)mp_lua_int_at(L, -1, fn, "option 'window'[2] (tokens after)", 0, 4096);
        lua_pop(L, 3);
    }
    /* default batch: about 2^24 feature activations at a time */
    int64_t def_bs = ((int64_t)1 << 24) / ((int64_t)T * s->d_sae);
    if (def_bs < 1) def_bs = 1;
    if (def_bs > 64) def_bs = 64;
    int bs = (int)mp_lua_opt_int(L, 1, fn, "batch_size", def_bs, 1, 1 << 20);
    if (bs > B) bs = B;

    ltop *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = NULL;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &FEAT_TOP_KEY);
    lua_setmetatable(L, -2);
    mp_status st = mp_feat_top_new(&u->t, feats, nf, s->d_sae, top, before, after, 0.0f);
    if (st) return mp_lua_fail(L, st);

    /* buffers (userdata: freed by the collector even on an error) */
    size_t rows = (size_t)bs * (size_t)T;
    capture cap = {0};
    cap.x = lua_newuserdatauv(L, rows * (size_t)s->d_in * sizeof(float), 0);
    float *acts = lua_newuserdatauv(L, rows * (size_t)s->d_sae * sizeof(float), 0);
    unsigned char *valid = mask ? lua_newuserdatauv(L, rows, 0) : NULL;
    g->hooks = mp_hooks_new(cfg);
    if (!g->hooks) return luaL_error(L, "out of memory");
    if ((st = mp_hooks_add_reader_at(g->hooks, hid, hlayer, capture_cb, &cap))) return mp_lua_fail(L, st);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = g->hooks;
    fp.logits = MP_LOGITS_NONE;
    for (int b0 = 0; b0 < B; b0 += bs) {
        int nb = B - b0 < bs ? B - b0 : bs;
        cap.B = nb;
        cap.T = T;
        cap.d_in = s->d_in;
        cap.hits = 0;
        fp.attn_mask = mask ? mask + (size_t)b0 * T : NULL;
        st = mp_model_forward(lm->m, g->ints + (size_t)b0 * T, nb, T, &fp, NULL);
        if (st) return mp_lua_fail(L, st);
        if (cap.hits == 0) return luaL_error(L, "%s: hook '%s' did not fire", fn, hook);
        if ((st = mp_sae_encode(s, cap.x, nb * T, acts, NULL))) return mp_lua_fail(L, st);
        if (valid)
            for (size_t r = 0; r < (size_t)nb * T; r++) valid[r] = mask[(size_t)b0 * T + r] != 0;
        if ((st = mp_feat_top_add(u->t, acts, s->d_sae, nb, T, b0, valid))) return mp_lua_fail(L, st);
    }

    /* the result */
    const mp_tok *tok = lm->tok;
    mp_feat_ctx *ctx = lua_newuserdatauv(L, (size_t)top * sizeof *ctx, 0);
    lua_createtable(L, nf, 5);
    int res = lua_gettop(L);
    lua_pushvalue(L, hook_i);
    lua_setfield(L, res, "hook");
    lua_pushinteger(L, before);
    lua_setfield(L, res, "before");
    lua_pushinteger(L, after);
    lua_setfield(L, res, "after");
    for (int j = 0; j < nf; j++) {
        mp_feat_stats fs = mp_feat_top_stats(u->t, j);
        lua_createtable(L, 0, 8);
        lua_pushinteger(L, mp_feat_top_feature(u->t, j));
        lua_setfield(L, -2, "feature");
        lua_pushnumber(L, fs.n_tokens ? (double)fs.n_active / (double)fs.n_tokens : 0.0);
        lua_setfield(L, -2, "density");
        lua_pushnumber(L, fs.max);
        lua_setfield(L, -2, "max");
        lua_pushinteger(L, fs.n_active);
        lua_setfield(L, -2, "n_active");
        lua_pushinteger(L, fs.n_tokens);
        lua_setfield(L, -2, "n_tokens");
        int nc = mp_feat_top_sorted(u->t, j, ctx);
        lua_createtable(L, nc, 0);
        for (int c = 0; c < nc; c++) {
            const int *ids = g->ints + (size_t)ctx[c].seq * T;
            /* the window's tokens: the run around the max that is inside the sequence */
            int lo = 0, hi = before + after;
            for (int k = before; k >= 0 && !isnan(ctx[c].window[k]); k--) lo = k;
            for (int k = before; k <= before + after && !isnan(ctx[c].window[k]); k++) hi = k;
            int n = hi - lo + 1;
            lua_createtable(L, 0, 7);
            lua_pushnumber(L, ctx[c].value);
            lua_setfield(L, -2, "value");
            lua_pushinteger(L, ctx[c].seq);
            lua_setfield(L, -2, "seq");
            lua_pushinteger(L, ctx[c].pos);
            lua_setfield(L, -2, "pos");
            lua_pushinteger(L, before - lo + 1);
            lua_setfield(L, -2, "center");
            lua_createtable(L, n, 0);
            lua_createtable(L, n, 0);
            for (int k = 0; k < n; k++) {
                int p = ctx[c].pos - before + lo + k;
                lua_pushinteger(L, ids[p]);
                lua_rawseti(L, -3, k + 1);
                lua_pushnumber(L, ctx[c].window[lo + k]);
                lua_rawseti(L, -2, k + 1);
            }
            lua_setfield(L, -3, "acts");
            lua_setfield(L, -2, "tokens");
            if (tok) {
                lua_createtable(L, n, 0);
                for (int k = 0; k < n; k++) {
                    push_token_str(L, tok, ids, ctx[c].pos - before + lo + k);
                    lua_rawseti(L, -2, k + 1);
                }
                lua_setfield(L, -2, "str_tokens");
            }
            lua_rawseti(L, -2, c + 1);
        }
        lua_setfield(L, -2, "contexts");
        lua_rawseti(L, res, j + 1);
    }
    return 1;
}

/* ---- the figure ---- */

/* Reads a number field of the table at idx (NaN when absent). */
static double num_field(lua_State *L, int idx, const char *k, const char *fn, int j) {
    int ty = lua_getfield(L, idx, k);
    double v = NAN;
    if (ty == LUA_TNUMBER) v = lua_tonumber(L, -1);
    else if (ty != LUA_TNIL) luaL_error(L, "%s: result[%d].%s must be a number, got %s", fn, j, k, lua_typename(L, ty));
    lua_pop(L, 1);
    return v;
}

static int l_feature_view(lua_State *L) {
    static const char *const known[] = {"title", "width", "dpi", "font_size", "color", "show_values", NULL};
    const char *fn = "mp.sae.feature_view";
    lua_settop(L, 3);
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *path = luaL_checkstring(L, 2);
    mp_lua_opt_check(L, 3, fn, known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    mp_fview_params p = mp_fview_params_default();
    p.title = mp_lua_opt_str(L, opt, fn, "title", NULL);
    p.width_pt = mp_lua_opt_num(L, opt, fn, "width", 0);
    p.font_size = mp_lua_opt_num(L, opt, fn, "font_size", p.font_size);
    p.show_values = mp_lua_opt_bool(L, opt, fn, "show_values", 1);
    double dpi = mp_lua_opt_num(L, opt, fn, "dpi", 200);
    if (mp_lua_opt_type(L, opt, fn, "color", LUA_TTABLE)) {
        double c[3];
        if (luaL_len(L, -1) != 3) return luaL_error(L, "%s: option 'color' must be {r, g, b} in [0, 1]", fn);
        for (int i = 0; i < 3; i++) {
            lua_rawgeti(L, -1, i + 1);
            c[i] = lua_tonumber(L, -1);
            if (!lua_isnumber(L, -1) || !(c[i] >= 0 && c[i] <= 1))
                return luaL_error(L, "%s: option 'color' must be {r, g, b} in [0, 1]", fn);
            lua_pop(L, 1);
        }
        p.color = (mp_rgb){c[0], c[1], c[2]};
        lua_pop(L, 1);
    }
    lua_Integer n = luaL_len(L, 1);
    if (n < 1 || n > 4096) return luaL_error(L, "%s: the result lists %d features (need 1..4096)", fn, (int)n);
    mp_fview_feature *fv = lua_newuserdatauv(L, (size_t)n * sizeof *fv, 0);
    lua_createtable(L, 0, 0); /* keeps the token strings and the arrays alive */
    int keep = lua_gettop(L), nkeep = 0;
    for (int j = 1; j <= n; j++) {
        mp_fview_feature *b = &fv[j - 1];
        memset(b, 0, sizeof *b);
        if (lua_rawgeti(L, 1, j) != LUA_TTABLE)
            return luaL_error(L, "%s: result[%d] must be a feature's table (from mp.sae.top_contexts)", fn, j);
        int fi = lua_gettop(L);
        lua_getfield(L, fi, "feature");
        b->feature = (int)mp_lua_int_at(L, -1, fn, "result[].feature", 0, 1 << 30);
        lua_pop(L, 1);
        b->density = num_field(L, fi, "density", fn, j);
        b->max = num_field(L, fi, "max", fn, j);
        if (lua_getfield(L, fi, "contexts") != LUA_TTABLE)
            return luaL_error(L, "%s: result[%d].contexts must be a list of contexts", fn, j);
        int ci = lua_gettop(L);
        int nc = (int)luaL_len(L, ci);
        if (nc > 100000) return luaL_error(L, "%s: result[%d] has too many contexts (%d)", fn, j, nc);
        /* columns: the most tokens before / from the max over the lines */
        int bef = 0, aft = 0;
        for (int c = 1; c <= nc; c++) {
            if (lua_rawgeti(L, ci, c) != LUA_TTABLE)
                return luaL_error(L, "%s: result[%d].contexts[%d] must be a table", fn, j, c);
            lua_getfield(L, -1, "tokens");
            if (!lua_istable(L, -1)) return luaL_error(L, "%s: result[%d].contexts[%d].tokens missing", fn, j, c);
            int len = (int)luaL_len(L, -1);
            lua_getfield(L, -2, "center");
            int ctr = (int)mp_lua_int_at(L, -1, fn, "contexts[].center", 1, len < 1 ? 1 : len);
            if (len < 1 || len > 1024) return luaL_error(L, "%s: result[%d].contexts[%d] has %d tokens", fn, j, c, len);
            if (ctr - 1 > bef) bef = ctr - 1;
            if (len - ctr > aft) aft = len - ctr;
            lua_pop(L, 3);
        }
        b->n_lines = nc;
        b->width = bef + 1 + aft;
        b->center = bef;
        size_t cells = (size_t)nc * (size_t)b->width;
        const char **tok = lua_newuserdatauv(L, (cells ? cells : 1) * sizeof(char *), 0);
        lua_rawseti(L, keep, ++nkeep);
        float *act = lua_newuserdatauv(L, (cells ? cells : 1) * sizeof(float), 0);
        lua_rawseti(L, keep, ++nkeep);
        for (size_t k = 0; k < cells; k++) {
            tok[k] = NULL;
            act[k] = NAN;
        }
        for (int c = 1; c <= nc; c++) {
            lua_rawgeti(L, ci, c);
            int cx = lua_gettop(L);
            lua_getfield(L, cx, "tokens");
            lua_getfield(L, cx, "str_tokens");
            lua_getfield(L, cx, "acts");
            lua_getfield(L, cx, "center");
            int len = (int)luaL_len(L, cx + 1), ctr = (int)lua_tointeger(L, -1);
            int has_str = lua_istable(L, cx + 2), has_act = lua_istable(L, cx + 3);
            if (!has_act) return luaL_error(L, "%s: result[%d].contexts[%d].acts missing", fn, j, c);
            size_t r = (size_t)(c - 1) * b->width;
            for (int k = 1; k <= len; k++) {
                int col = bef - (ctr - 1) + (k - 1);
                const char *s = NULL;
                if (has_str) {
                    if (lua_rawgeti(L, cx + 2, k) == LUA_TSTRING) s = lua_tostring(L, -1);
                    else lua_pop(L, 1);
                }
                if (!s) { /* no string: the id as text */
                    lua_rawgeti(L, cx + 1, k);
                    s = luaL_tolstring(L, -1, NULL);
                    lua_remove(L, -2);
                }
                lua_rawseti(L, keep, ++nkeep); /* keeps s alive */
                tok[r + col] = s;
                lua_rawgeti(L, cx + 3, k);
                act[r + col] = (float)lua_tonumber(L, -1);
                if (!lua_isnumber(L, -1))
                    return luaL_error(L, "%s: result[%d].contexts[%d].acts[%d] must be a number", fn, j, c, k);
                lua_pop(L, 1);
            }
            lua_settop(L, cx - 1);
        }
        b->tok = tok;
        b->act = act;
        lua_settop(L, fi - 1);
    }
    double w, h;
    mp_status st = mp_fview_save(fv, (int)n, &p, path, dpi, &w, &h);
    if (st) return mp_lua_fail(L, st);
    lua_pushnumber(L, w);
    lua_pushnumber(L, h);
    return 2;
}

void mp_lua_open_sae_view(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, ltop_gc);
    lua_setfield(L, -2, "__gc");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &FEAT_TOP_KEY);
    lua_getfield(L, -1, "sae"); /* mp.sae */
    lua_pushcfunction(L, l_top_contexts);
    lua_setfield(L, -2, "top_contexts");
    lua_pushcfunction(L, l_feature_view);
    lua_setfield(L, -2, "feature_view");
    lua_pop(L, 1);
}
