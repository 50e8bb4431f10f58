/* lmodel.c — Lua bindings of the model (userdata "mechprobe.Model"):
 * mp.load / mp.model.*, tokenization, forward passes with captures
 * (run_with_cache) and interventions (run_with_hooks; the interventions
 * themselves live in lintervene.c), generation, and saving (llama2.c or
 * checkpoint). Training methods: ltrain.c; streaming capture to an HDF5 run
 * file (m:capture, m:capture_prompts): lcapture.c.
 *
 * Numbering: layers, heads and token positions are 0-based, as in hook names
 * and TransformerLens; Tensor indices are 1-based, as everywhere in Lua. */
#include "lmodel.h"
#include "checkpoint.h"
#include "model_io.h"
#include "quant.h"
#include "sae_splice.h"

#include <stdio.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

lmodel *mp_lua_model_check(lua_State *L, int idx) {
    lmodel *lm = luaL_checkudata(L, idx, MODEL_MT);
    if (!lm->m) luaL_error(L, "Model is closed");
    return lm;
}

/* __gc: frees everything (idempotent). A model cannot be collected while one
 * of its methods runs: the method's busy mark holds a reference to it. */
static int model_gc(lua_State *L) {
    lmodel *lm = luaL_checkudata(L, 1, MODEL_MT);
    mp_model_free(lm->m);
    mp_tok_free(lm->tok);
    mp_train_ws_free(&lm->ws);
    mp_train_log_free(&lm->log);
    lm->m = NULL;
    lm->tok = NULL;
    mp_lua_params_detach(L, 1, NULL);
    return 0;
}

/* m:close() and __close: as __gc, but refused while the model is in use (from
 * inside its own forward hook, on_token or on_step callback, or a task's
 * sample called by m:train): the running method still holds its weights. */
static int model_close(lua_State *L) {
    lmodel *lm = luaL_checkudata(L, 1, MODEL_MT);
    if (lm->busy > 0)
        return luaL_error(L, "mp.Model:close: the model is in use (called from inside its own forward/generate/train "
                             "callback)");
    return model_gc(L);
}

#define BUSY_MT "mechprobe.ModelBusy"

typedef struct {
    lmodel *lm; /* NULL once released */
} busy_mark;

static int busy_release(lua_State *L) {
    busy_mark *b = luaL_checkudata(L, 1, BUSY_MT);
    if (b->lm) {
        b->lm->busy--;
        /* training on a device leaves the newer weights and moments there: the
         * host copy (views, saves, the optimizer) is current between calls */
        if (b->lm->busy == 0 && b->lm->m && mp_model_sync(b->lm->m) != MP_OK) {
            b->lm = NULL;
            return luaL_error(L, "%s", mp_last_error());
        }
        lua_getiuservalue(L, 1, 1); /* the model: training may have replaced its memory */
        mp_lua_params_detach(L, -1, "training copied the parameters into new memory; call m:param again");
        lua_pop(L, 1);
    }
    b->lm = NULL;
    return 0;
}

/* Refuses a method that changes what a running forward reads (the
 * positional scheme, the weights) while the model is in use. */
static lmodel *model_idle(lua_State *L, const char *method) {
    lmodel *lm = mp_lua_model_check(L, 1);
    if (lm->busy > 0)
        luaL_error(L, "mp.Model:%s: the model is in use (called from inside its own forward/generate/train "
                      "callback)", method);
    return lm;
}

lmodel *mp_lua_model_busy(lua_State *L, int idx, const char *method, int exclusive) {
    idx = lua_absindex(L, idx);
    lmodel *lm = mp_lua_model_check(L, idx);
    if (exclusive && lm->busy > 0)
        luaL_error(L, "mp.Model:%s: the model is in use (called from inside its own forward/generate/train "
                      "callback); training reuses the model's buffers", method);
    busy_mark *b = lua_newuserdatauv(L, sizeof *b, 1);
    b->lm = NULL;
    luaL_setmetatable(L, BUSY_MT);
    lua_pushvalue(L, idx);
    lua_setiuservalue(L, -2, 1); /* keeps the model alive while marked */
    b->lm = lm;
    lm->busy++;
    lua_toclose(L, -1); /* released when the method returns or an error unwinds it */
    return lm;
}

static int model_tostring(lua_State *L) {
    lmodel *lm = luaL_checkudata(L, 1, MODEL_MT);
    if (!lm->m) { lua_pushliteral(L, "Model(closed)"); return 1; }
    const mp_config *c = &lm->m->cfg;
    lua_pushfstring(L,
                    "Model(%s%s%s: d_model=%d n_layer=%d n_head=%d n_kv_head=%d d_head=%d d_mlp=%d vocab=%d ctx=%d "
                    "pos=%s rope_theta=%f norm=%s mlp=%s %s)",
                    lm->m->format, lm->m->source[0] ? " " : "", lm->m->source, c->d_model, c->n_layer, c->n_head,
                    c->n_kv_head, c->d_head, c->d_mlp, c->vocab, c->ctx, mp_pos_name(c->pos), (double)c->rope_theta,
                    mp_norm_name(c->norm), mp_mlp_label(c), c->tied ? "tied" : "untied");
    return 1;
}

/* ---- guards: userdata whose __gc frees C resources if a Lua error unwinds ---- */


static int guard_gc(lua_State *L) {
    guard *g = luaL_checkudata(L, 1, GUARD_MT);
    mp_hooks_free(g->hooks);
    free(g->ints);
    if (g->run) mp_h5run_abort(g->run);
    memset(g, 0, sizeof *g);
    return 0;
}

guard *mp_lua_guard_push(lua_State *L) {
    guard *g = lua_newuserdatauv(L, sizeof *g, 0);
    memset(g, 0, sizeof *g);
    luaL_setmetatable(L, GUARD_MT);
    return g;
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
    int nd = mp_hooks_shape(c->hooks, id, c->B, c->T, c->pos0, shape);
    mp_tensor *t = mp_lua_tensor_new(c->L, nd, shape);
    lua_setfield(c->L, c->cache, name);
    c->st = mp_hooks_add_reader_at(c->hooks, id, layer, cache_cb, t);
}

static void name_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)id;
    (void)layer;
    lua_State *L = u;
    lua_pushstring(L, name);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

/* names = function(name) -> truthy: the hook names (in firing order) for which
 * the filter at index fi says yes, pushed as a comma-separated list (""
 * when none), which is returned; the filter's errors propagate. */
static const char *names_from_filter(lua_State *L, const mp_hooks *hs, int fi) {
    lua_newtable(L);
    int all = lua_gettop(L);
    mp_hooks_select(hs, "*", name_visit, L, NULL, 0); /* the attached SAEs' sub-points too */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int first = 1;
    lua_Integer n = luaL_len(L, all);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_pushvalue(L, fi);
        lua_rawgeti(L, all, i);
        lua_call(L, 1, 1);
        int yes = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!yes) continue;
        if (!first) luaL_addchar(&b, ',');
        lua_rawgeti(L, all, i);
        luaL_addvalue(&b);
        first = 0;
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* Shared body of forward / run_with_cache / run_with_hooks.
 * Returns logits (or nil) and, with want_cache, the cache table. */
static int run_common(lua_State *L, int want_cache, const char *fn) {
    static const char *const known[] = {"fwd_hooks", "logits", "loss", "targets", "bwd_hooks", "attention_mask", NULL},
                             *known_cache[] = {"fwd_hooks", "logits", "names", "incl_bwd", "loss", "targets",
                                               "bwd_hooks", "attention_mask", NULL};
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, fn, 0);
    mp_lua_opt_check(L, 3, fn, want_cache ? known_cache : known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    const int grad = mp_lua_grad_wanted(L, opt); /* loss / incl_bwd / bwd_hooks: lgrad.c */
    const mp_config *cfg = &lm->m->cfg;
    guard *g = mp_lua_guard_push(L);
    int B, T;
    mp_lua_read_tokens(L, 2, g, &B, &T, "tokens", cfg->vocab, 0);
    /* a padded batch (ragged.c); with a gradient, lgrad.c reads it again */
    const int *mask = grad ? NULL : mp_lua_opt_mask(L, opt, fn, B, T);
    g->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs (sae_splice.h) */
    if (!g->hooks) return luaL_error(L, "out of memory");
    int ftbl = mp_lua_add_fwd_hooks(L, opt, g, T); /* leaves its function table on the stack */
    int cache_idx = 0;
    const char *globs = "";
    if (want_cache) {
        if (mp_lua_opt_get(L, opt, "names") == LUA_TFUNCTION) /* a filter, as TransformerLens's names_filter */
            globs = names_from_filter(L, g->hooks, lua_gettop(L));
        else {
            lua_pop(L, 1);
            globs = mp_lua_opt_globs(L, opt, fn, "names", "*");
        }
        char bad[256];
        bad[0] = '\0';
        if (globs[0]) mp_hooks_select(g->hooks, globs, NULL, NULL, bad, sizeof bad);
        char why[192];
        if (bad[0])
            return luaL_error(L, "names: unknown hook name '%s'%s (see mp.hook_names(model))", bad,
                              mp_hook_absent_why(cfg, bad, why, sizeof why));
        lua_newtable(L);
        cache_idx = lua_gettop(L);
        mp_lua_cache_attach(L, cache_idx, 1, B, T); /* cache:accumulated_resid(...) etc. (lcache.c), on both paths */
        cache_ctx cc = {L, cache_idx, g->hooks, B, T, 0, cfg, MP_OK};
        if (globs[0]) mp_hooks_select(g->hooks, globs, cache_visit, &cc, NULL, 0); /* a filter may pick none */
        if (cc.st) return mp_lua_fail(L, cc.st);
    }
    const char *lmode = "all"; /* a string option stays on the stack while used (GC) */
    int lt = mp_lua_opt_get(L, opt, "logits");
    if (lt == LUA_TBOOLEAN) lmode = lua_toboolean(L, -1) ? "all" : "none";
    else if (lt == LUA_TSTRING) lmode = lua_tostring(L, -1);
    else if (lt != LUA_TNIL)
        return luaL_error(L, "%s: option 'logits' must be a string or a boolean, got %s", fn, luaL_typename(L, -1));
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = mp_hooks_count(g->hooks) ? g->hooks : NULL;
    fp.attn_mask = mask;
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
        return luaL_error(L, "%s: option 'logits': \"all\", \"last\", \"none\" or a boolean expected, got \"%s\"", fn,
                          lmode);
    }
    int li = lua_gettop(L);
    if (grad) return mp_lua_run_grad(L, lm, g, B, T, opt, fn, ftbl, cache_idx, globs, logits, li);
    mp_status st = mp_model_forward(lm->m, g->ints, B, T, &fp, logits ? logits->data : NULL);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        return mp_lua_fail(L, st);
    }
    lua_pushvalue(L, li);
    if (want_cache) {
        lua_pushvalue(L, cache_idx);
        return 2;
    }
    return 1;
}

static int model_forward(lua_State *L) { return run_common(L, 0, "forward"); }
static int model_run_with_hooks(lua_State *L) { return run_common(L, 0, "run_with_hooks"); }
static int model_run_with_cache(lua_State *L) { return run_common(L, 1, "run_with_cache"); }

/* ---- tokenization: the model's mp_tok (a tokenizer file, or raw bytes) ----
 * Byte-level models (e.g. trained on mp.tasks.text) use the runtime's bytes
 * kind (ids 0..255 for the bytes and 256 for BOS, tok.h); the model's
 * `tokenizer` hint says so and travels in its checkpoint. */

static int is_bytes(const lmodel *lm) { return lm->tok && mp_tok_get_kind(lm->tok) == MP_TOK_KIND_BYTES; }

static void need_tok(lua_State *L, lmodel *lm) {
    if (!lm->tok)
        luaL_error(L, "this model has no tokenizer: load it with mp.load(path, {tokenizer=\"tokenizer.bin\"}), or "
                      "{tokenizer=\"bytes\"} for a byte-level model");
}

static int lm_vocab(const lmodel *lm) { return mp_tok_vocab(lm->tok); }
static int lm_eos(const lmodel *lm) { return mp_tok_eos(lm->tok); }
/* whether the model's tokenizer wants BOS prepended (llama2.c, SentencePiece, bytes: yes) */
static int lm_add_bos(const lmodel *lm) { return mp_tok_add_bos(lm->tok) && mp_tok_bos(lm->tok) >= 0; }

/* more: further MP_TOK_* flags (MP_TOK_PREFIX, MP_TOK_NO_PREFIX) */
static mp_status lm_encode_ex(const lmodel *lm, const char *text, size_t len, int bos, int eos, int more, int **ids,
                              int *n) {
    /* bytes have no EOS: asking for one has always appended nothing */
    int flags = (bos ? MP_TOK_BOS : 0) | (eos && !is_bytes(lm) ? MP_TOK_EOS : 0) | more;
    mp_status st = mp_tok_encode(lm->tok, text, len, flags, ids, n);
    if (!st && !*ids) *ids = mp_malloc(sizeof(int), "tokens"); /* empty text: callers free */
    return st || *ids ? st : MP_ERR_NOMEM;
}

static mp_status lm_encode(const lmodel *lm, const char *text, size_t len, int bos, int eos, int **ids, int *n) {
    return lm_encode_ex(lm, text, len, bos, eos, 0, ids, n);
}

static mp_status lm_decode(const lmodel *lm, const int *ids, int n, char **out, size_t *len) {
    return mp_tok_decode(lm->tok, ids, n, out, len);
}

/* The bytes of token `id` after `prev` into buf (truncated to cap - 1 bytes),
 * *len their count; NULL if out of range. */
#define PIECE_CAP 512
static const char *lm_piece(const lmodel *lm, int prev, int id, char *buf, size_t *len) {
    int n = mp_tok_token_bytes(lm->tok, prev, id, buf, PIECE_CAP);
    if (n < 0) return NULL;
    *len = (size_t)n < PIECE_CAP ? (size_t)n : PIECE_CAP - 1;
    return buf;
}

static void attach_tok(lmodel *lm, mp_tok *t, const char *spec) {
    mp_tok_free(lm->tok);
    lm->tok = t;
    snprintf(lm->tok_path, sizeof lm->tok_path, "%s", spec);
    lm->m->tokenizer[0] = '\0';
}

/* Attaches the bytes kind; the model's hint says "bytes" (kept in checkpoints). */
static void attach_bytes(lua_State *L, lmodel *lm) {
    mp_tok *t;
    mp_status st = mp_tok_new_bytes(&t);
    if (st) mp_lua_fail(L, st);
    mp_tok_free(lm->tok);
    lm->tok = t;
    lm->tok_path[0] = '\0';
    snprintf(lm->m->tokenizer, sizeof lm->m->tokenizer, "bytes");
}

/* Attaches a tokenizer: "bytes", or a tokenizer source (mp_tok_load_for). */
static void set_tokenizer(lua_State *L, lmodel *lm, const char *spec) {
    if (strcmp(spec, "bytes") == 0) {
        if (lm->m->cfg.vocab < MP_TOK_BYTES_BOS + 1)
            luaL_error(L, "tokenizer \"bytes\" needs a vocabulary of at least 257 (ids 0..255 and BOS 256); "
                          "this model has %d", lm->m->cfg.vocab);
        attach_bytes(L, lm);
        return;
    }
    mp_tok *t;
    mp_status st = mp_tok_load_for(&t, spec, lm->m->cfg.vocab); /* by content; errors name spec */
    if (st) mp_lua_fail(L, st);
    attach_tok(lm, t, spec);
}

/* m:set_tokenizer("bytes" | path) */
static int model_set_tokenizer(lua_State *L) {
    set_tokenizer(L, mp_lua_model_check(L, 1), luaL_checkstring(L, 2));
    lua_settop(L, 1);
    return 1;
}

/* opts.prepend_space as MP_TOK_* flags: absent 0 (the tokenizer's own rule),
 * true MP_TOK_PREFIX, false MP_TOK_NO_PREFIX; true is an error for bytes,
 * which have no dummy prefix (false is then a no-op). */
static int lm_prefix_flags(lua_State *L, const lmodel *lm, int opt) {
    int t = mp_lua_opt_get(L, opt, "prepend_space");
    lua_pop(L, 1);
    if (t == LUA_TNIL) return 0;
    int on = mp_lua_opt_bool(L, opt, "to_tokens", "prepend_space", 0);
    if (on && is_bytes(lm))
        luaL_error(L, "to_tokens: prepend_space = true: the bytes tokenizer has no dummy prefix (put the space in "
                      "the text: \" \" .. text)");
    return on ? MP_TOK_PREFIX : MP_TOK_NO_PREFIX;
}

/* m:to_tokens(text | {texts...} [, {bos|prepend_bos=, eos=, padding_side=, prepend_space=}])
 * -> a flat table of ids; for a list of texts, a padded batch [B][T] and its
 * attention mask [B][T] (runtime/ragged.c mp_pad_batch via ltokarg.c; pad id
 * mp_tok_pad_id). An entry of the list may be a list of ids instead of a text:
 * taken as it is (bos / eos are the texts'), padded the same way. */
static int model_to_tokens(lua_State *L) {
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, "to_tokens", 0);
    static const char *const known[] = {"bos", "prepend_bos", "eos", "padding_side", "prepend_space", NULL};
    static const char *const sides[] = {"right", "left", NULL};
    const int batch = lua_type(L, 2) == LUA_TTABLE;
    if (!batch) luaL_checkstring(L, 2);
    mp_lua_opt_check(L, 3, "to_tokens", known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    need_tok(L, lm);
    int has_bos = mp_lua_opt_get(L, opt, "bos") != LUA_TNIL, has_pbos = mp_lua_opt_get(L, opt, "prepend_bos") != LUA_TNIL;
    lua_pop(L, 2);
    if (has_bos && has_pbos) return luaL_error(L, "to_tokens: give 'bos' or its alias 'prepend_bos', not both");
    int bos = mp_lua_opt_bool(L, opt, "to_tokens", has_pbos ? "prepend_bos" : "bos", lm_add_bos(lm)),
        eos = mp_lua_opt_bool(L, opt, "to_tokens", "eos", 0);
    int left = mp_lua_opt_enum(L, opt, "to_tokens", "padding_side", 0, sides);
    int more = lm_prefix_flags(L, lm, opt);
    if (!batch) {
        size_t len;
        const char *text = lua_tolstring(L, 2, &len);
        int *ids, n;
        mp_status st = lm_encode_ex(lm, text, len, bos, eos, more, &ids, &n);
        if (st) return mp_lua_fail(L, st);
        lua_createtable(L, n, 0);
        for (int i = 0; i < n; i++) { lua_pushinteger(L, ids[i]); lua_rawseti(L, -2, i + 1); }
        free(ids);
        return 1;
    }
    lua_Integer B = luaL_len(L, 2);
    if (B <= 0 || B > INT_MAX / 2) return luaL_error(L, "to_tokens: the list of texts is empty");
    guard *all = mp_lua_guard_push(L), *lens = mp_lua_guard_push(L);
    if (!(lens->ints = calloc((size_t)B, sizeof(int)))) return luaL_error(L, "out of memory");
    size_t total = 0;
    for (lua_Integer b = 1; b <= B; b++) {
        int ty = lua_geti(L, 2, b);
        if (ty == LUA_TTABLE) { /* a row of ids, taken as they are (no BOS / EOS added), padded as texts are */
            lua_Integer k = luaL_len(L, -1);
            if (k <= 0)
                return luaL_error(L, "to_tokens: texts[%I] is an empty list of ids: a row needs at least one real "
                                     "token", b);
            if ((size_t)k > (size_t)INT_MAX - total) return luaL_error(L, "to_tokens: too many ids");
            int *grown = realloc(all->ints, (total + (size_t)k) * sizeof(int));
            if (!grown) return luaL_error(L, "out of memory");
            all->ints = grown;
            for (lua_Integer i = 1; i <= k; i++) {
                lua_geti(L, -1, i);
                const char *what = lua_pushfstring(L, "texts[%I][%I] (a token id)", b, i);
                grown[total + (size_t)i - 1] =
                    (int)mp_lua_int_at(L, -2, "to_tokens", what, 0, lm->m->cfg.vocab - 1);
                lua_pop(L, 2);
            }
            total += (size_t)k;
            lens->ints[b - 1] = (int)k;
            lua_pop(L, 1);
            continue;
        }
        if (ty != LUA_TSTRING)
            return luaL_error(L, "to_tokens: texts[%I] is a %s, not a string or a list of token ids", b,
                              luaL_typename(L, -1));
        size_t len;
        const char *text = lua_tolstring(L, -1, &len);
        int *ids, n;
        mp_status st = lm_encode_ex(lm, text, len, bos, eos, more, &ids, &n);
        if (st) return mp_lua_fail(L, st);
        if (n == 0) {
            free(ids);
            return luaL_error(L, "to_tokens: texts[%I] encodes to no tokens (an empty text without BOS): a row "
                                 "needs at least one real token", b);
        }
        int *grown = realloc(all->ints, (total + (size_t)n) * sizeof(int));
        if (!grown) {
            free(ids);
            return luaL_error(L, "out of memory");
        }
        memcpy(grown + total, ids, (size_t)n * sizeof(int));
        free(ids);
        all->ints = grown;
        total += (size_t)n;
        lens->ints[b - 1] = n;
        lua_pop(L, 1);
    }
    mp_lua_push_padded(L, all->ints, lens->ints, (int)B, mp_tok_pad_id(lm->tok), left);
    return 2;
}

/* m:to_single_token(text) -> the id of the one token text encodes to (no BOS /
 * EOS), as TransformerLens's to_single_token; an error when it is not one. */
static int model_to_single_token(lua_State *L) {
    lmodel *lm = mp_lua_model_busy(L, 1, "to_single_token", 0);
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    need_tok(L, lm);
    int *ids, n;
    mp_status st = lm_encode(lm, text, len, 0, 0, &ids, &n);
    if (st) return mp_lua_fail(L, st);
    if (n != 1) {
        free(ids);
        return luaL_error(L, "to_single_token: \"%s\" is %d tokens, not one (see m:to_str_tokens)", text, n);
    }
    lua_pushinteger(L, ids[0]);
    free(ids);
    return 1;
}

static int model_to_string(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    need_tok(L, lm);
    guard *g = mp_lua_guard_push(L);
    int B, T;
    mp_lua_read_tokens(L, 2, g, &B, &T, "tokens", 0, 0);
    for (int i = 0; i < B * T; i++)
        if (g->ints[i] < 0 || g->ints[i] >= lm_vocab(lm))
            return luaL_error(L, "to_string: token id %d is outside the vocabulary (0..%d)", g->ints[i],
                              lm_vocab(lm) - 1);
    for (int b = 0; b < B; b++) {
        char *s;
        size_t len;
        mp_status st = lm_decode(lm, g->ints + (size_t)b * T, T, &s, &len);
        if (st) return mp_lua_fail(L, st);
        lua_pushlstring(L, s, len);
        free(s);
    }
    return B;
}

static int model_to_str_tokens(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    need_tok(L, lm);
    if (lua_isstring(L, 2) && !lua_isnumber(L, 2)) {
        lua_pushcfunction(L, model_to_tokens);
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 2);
        lua_call(L, 2, 1);
        lua_replace(L, 2);
    }
    guard *g = mp_lua_guard_push(L);
    int B, T;
    mp_lua_read_tokens(L, 2, g, &B, &T, "tokens", 0, 0);
    lua_createtable(L, T, 0);
    for (int i = 0; i < T; i++) {
        char buf[PIECE_CAP];
        size_t len;
        const char *p = lm_piece(lm, i ? g->ints[i - 1] : -1, g->ints[i], buf, &len);
        if (!p) return luaL_error(L, "to_str_tokens: token id %d is outside the vocabulary", g->ints[i]);
        lua_pushlstring(L, p, len);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---- generation ---- */

typedef struct {
    lua_State *L;
    int fn;              /* stack index of on_token callback or 0 */
    const lmodel *lm;    /* for pieces, when it has a tokenizer */
    int prev;
    int err;
} gen_ctx;

/* Runs under lua_pcall with (context, on_token function, token): the piece's
 * string allocates, so it is made inside the protected call too. */
static int gen_call_body(lua_State *L) {
    gen_ctx *c = lua_touserdata(L, 1);
    int token = (int)lua_tointeger(L, 3);
    char buf[PIECE_CAP];
    size_t len;
    const char *piece = c->lm ? lm_piece(c->lm, c->prev, token, buf, &len) : NULL;
    if (piece) lua_pushlstring(L, piece, len);
    else lua_pushnil(L);
    c->prev = token;
    lua_call(L, 2, 1);
    return 1;
}

/* A Lua error never longjmps through the C generation loop: err = 1 with the
 * error object left on the stack, 2 with only mp_last_error. */
static int gen_on_token(void *user, int token) {
    gen_ctx *c = user;
    if (!c->fn) return 0;
    if (!lua_checkstack(c->L, 4)) {
        mp_error(MP_ERR_NOMEM, "generate: out of memory for the Lua stack");
        c->err = 2;
        return 1;
    }
    lua_pushcfunction(c->L, gen_call_body);
    lua_pushlightuserdata(c->L, c);
    lua_pushvalue(c->L, c->fn);
    lua_pushinteger(c->L, token);
    if (lua_pcall(c->L, 3, 1, 0) != LUA_OK) {
        c->err = 1;
        return 1; /* error message stays on the stack */
    }
    int stop = lua_toboolean(c->L, -1);
    lua_pop(c->L, 1);
    return stop;
}

/* The rows of a batched prompt (m:generate): a list of strings (encoded as
 * one prompt each), a list of token lists of any lengths, or tokens [B, T]
 * (a table of tables or a Tensor) with opts.attention_mask (each row's real
 * tokens, in order). Fills *ids (all rows, concatenated) and *lens [*B], in
 * userdata left on the stack; returns 0 (nothing pushed) for one prompt
 * (a string, a flat list, [1, T] without a mask). */
static int gen_batch_rows(lua_State *L, lmodel *lm, int opt, int **ids, int **lens, int *B) {
    const int V = lm->m->cfg.vocab;
    if (lua_type(L, 2) != LUA_TTABLE && !mp_lua_tensor_test(L, 2)) return 0;
    const int first = lua_type(L, 2) == LUA_TTABLE ? lua_rawgeti(L, 2, 1) : LUA_TNIL;
    lua_pop(L, 1);
    const int have_mask = mp_lua_opt_get(L, opt, "attention_mask") != LUA_TNIL;
    lua_pop(L, 1);
    if (first == LUA_TSTRING) { /* texts */
        need_tok(L, lm);
        const int n = (int)luaL_len(L, 2);
        size_t total = 0;
        int **rows = lua_newuserdatauv(L, (size_t)n * sizeof(int *), 0);
        int *ln = lua_newuserdatauv(L, (size_t)n * sizeof(int), 0);
        memset(rows, 0, (size_t)n * sizeof(int *));
        mp_status st = MP_OK;
        for (int b = 0; b < n && !st; b++) {
            size_t len;
            if (lua_rawgeti(L, 2, b + 1) != LUA_TSTRING) {
                for (int k = 0; k < b; k++) free(rows[k]);
                return luaL_error(L, "generate: prompt[%d] is a %s (a list of strings expected)", b + 1,
                                  luaL_typename(L, -1));
            }
            const char *text = lua_tolstring(L, -1, &len);
            st = lm_encode(lm, text, len, lm_add_bos(lm), 0, &rows[b], &ln[b]);
            lua_pop(L, 1);
            total += st ? 0 : (size_t)ln[b];
        }
        int *all = st ? NULL : lua_newuserdatauv(L, total ? total * sizeof(int) : 1, 0);
        for (int b = 0, off = 0; b < n; b++) {
            if (all) memcpy(all + off, rows[b], (size_t)ln[b] * sizeof(int)), off += ln[b];
            free(rows[b]);
        }
        if (st) return mp_lua_fail(L, st);
        *ids = all, *lens = ln, *B = n;
        return 1;
    }
    if (first == LUA_TTABLE && !have_mask) { /* token lists, lengths free */
        const int n = (int)luaL_len(L, 2);
        size_t total = 0;
        lua_Integer len0 = -1;
        int ragged = 0;
        for (int b = 0; b < n; b++) {
            if (lua_rawgeti(L, 2, b + 1) != LUA_TTABLE)
                return luaL_error(L, "generate: prompt[%d] is a %s (a list of token lists expected)", b + 1,
                                  luaL_typename(L, -1));
            const lua_Integer len = luaL_len(L, -1);
            ragged |= len0 >= 0 && len != len0;
            len0 = len;
            total += (size_t)len;
            lua_pop(L, 1);
        }
        if (n == 1) return 0; /* {{...}}: one prompt */
        if (!ragged) goto padded; /* equal lengths: tokens [B, T] (ltokarg.c's checks and messages) */
        int *ln = lua_newuserdatauv(L, (size_t)n * sizeof(int), 0);
        int *all = lua_newuserdatauv(L, total ? total * sizeof(int) : 1, 0);
        for (int b = 0, off = 0; b < n; b++) {
            lua_rawgeti(L, 2, b + 1);
            ln[b] = (int)luaL_len(L, -1);
            for (int t = 0; t < ln[b]; t++) {
                lua_rawgeti(L, -1, t + 1);
                int ok;
                lua_Integer v = lua_tointegerx(L, -1, &ok);
                const char *where = lua_pushfstring(L, "prompt[%d][%d]", b + 1, t + 1);
                if (ok && (v < 0 || v >= V)) /* as ltokarg.c words it */
                    return luaL_error(L, "%s = %I is outside the vocabulary (0..%d; the vocabulary has %d tokens)",
                                      where, v, V - 1, V);
                all[off++] = (int)mp_lua_int_at(L, -2, NULL, where, 0, V - 1);
                lua_pop(L, 2);
            }
            lua_pop(L, 1);
        }
        *ids = all, *lens = ln, *B = n;
        return 1;
    }
padded:; /* tokens [B, T] (and a mask) */
    guard *g = mp_lua_guard_push(L);
    int Bt, T;
    mp_lua_read_tokens(L, 2, g, &Bt, &T, "prompt", V, 0);
    if (Bt == 1 && !have_mask) {
        lua_pop(L, 1);
        return 0;
    }
    const int *mask = mp_lua_opt_mask(L, opt, "generate", Bt, T);
    int *ln = lua_newuserdatauv(L, (size_t)Bt * sizeof(int), 0);
    int *all = lua_newuserdatauv(L, (size_t)Bt * T * sizeof(int), 0);
    int off = 0;
    for (int b = 0; b < Bt; b++) {
        ln[b] = 0;
        for (int t = 0; t < T; t++)
            if (!mask || mask[(size_t)b * T + t]) all[off++] = g->ints[(size_t)b * T + t], ln[b]++;
    }
    *ids = all, *lens = ln, *B = Bt;
    return 1;
}

/* m:generate(prompts, opts) for a batch: mp_model_generate_batch; returns
 * {texts} (nil without tokenizer), {token lists}. */
static int generate_batch(lua_State *L, lmodel *lm, int opt, const int *ids, const int *lens, int B) {
    if (mp_lua_opt_get(L, opt, "on_token") != LUA_TNIL)
        return luaL_error(L, "generate: on_token streams one prompt; a batch of %d returns its rows", B);
    lua_pop(L, 1);
    const int P = mp_pad_width(lens, B);
    int max_new = (int)mp_lua_opt_int(L, opt, "generate", "max_new_tokens", 64, 0, INT_MAX / 2 - P);
    guard *g = mp_lua_guard_push(L);
    g->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs */
    if (!g->hooks) return luaL_error(L, "out of memory");
    int ftbl = mp_lua_add_fwd_hooks(L, opt, g, P + max_new);
    mp_sampler_params sp = {(float)mp_lua_opt_num(L, opt, "generate", "temperature", 1.0),
                            (float)mp_lua_opt_num(L, opt, "generate", "top_p", 0.9), 1234};
    uint64_t *seeds = lua_newuserdatauv(L, (size_t)B * sizeof(uint64_t), 0);
    if (mp_lua_opt_get(L, opt, "seed") == LUA_TTABLE) { /* one per row */
        if (luaL_len(L, -1) != B)
            return luaL_error(L, "generate: seed: %d seeds for %d prompts", (int)luaL_len(L, -1), B);
        for (int b = 0; b < B; b++) {
            lua_rawgeti(L, -1, b + 1);
            int ok;
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            if (!ok || v < 0) return luaL_error(L, "generate: seed[%d] must be an integer >= 0", b + 1);
            seeds[b] = (uint64_t)v;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    } else {
        lua_pop(L, 1);
        uint64_t one = (uint64_t)mp_lua_opt_int(L, opt, "generate", "seed", 1234, 0, LUA_MAXINTEGER);
        for (int b = 0; b < B; b++) seeds[b] = one; /* each row as its prompt alone with this seed */
    }
    const int has_tok = lm->tok != NULL;
    int stop = mp_lua_opt_bool(L, opt, "generate", "stop_at_eos", 1) && has_tok ? lm_eos(lm) : -1;
    const int W = P + max_new;
    int *out = lua_newuserdatauv(L, (size_t)B * W * sizeof(int), 0);
    int *n_out = lua_newuserdatauv(L, (size_t)B * sizeof(int), 0);
    mp_status st = mp_model_generate_batch(lm->m, ids, lens, B, max_new, &sp, seeds,
                                           mp_hooks_count(g->hooks) ? g->hooks : NULL, stop, out, n_out);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        return mp_lua_fail(L, st);
    }
    if (has_tok) {
        lua_createtable(L, B, 0);
        for (int b = 0; b < B; b++) {
            char *s;
            size_t len;
            if ((st = lm_decode(lm, out + (size_t)b * W, n_out[b], &s, &len))) return mp_lua_fail(L, st);
            lua_pushlstring(L, s, len);
            free(s);
            lua_rawseti(L, -2, b + 1);
        }
    } else {
        lua_pushnil(L);
    }
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        lua_createtable(L, n_out[b], 0);
        for (int i = 0; i < n_out[b]; i++) { lua_pushinteger(L, out[(size_t)b * W + i]); lua_rawseti(L, -2, i + 1); }
        lua_rawseti(L, -2, b + 1);
    }
    return 2;
}

/* m:generate(prompt, {max_new_tokens=64, temperature=1.0, top_p=0.9, seed=1234,
 *                     stop_at_eos=true, fwd_hooks=..., on_token=function(id, piece)})
 * -> text (prompt + continuation; nil without tokenizer), tokens table.
 * A batch (a list of strings or of token lists, or tokens [B, T] with
 * attention_mask): -> {texts} (nil without tokenizer), {token lists}; seed
 * may then be a list of one per row. */
static int model_generate(lua_State *L) {
    lua_settop(L, 3);
    static const char *const known[] = {"max_new_tokens", "temperature", "top_p", "seed", "stop_at_eos",
                                        "fwd_hooks", "on_token", "attention_mask", NULL};
    lmodel *lm = mp_lua_model_busy(L, 1, "generate", 0);
    mp_lua_opt_check(L, 3, "generate", known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    int *bids = NULL, *blens = NULL, Bb = 0;
    if (gen_batch_rows(L, lm, opt, &bids, &blens, &Bb)) return generate_batch(L, lm, opt, bids, blens, Bb);
    guard *g = mp_lua_guard_push(L);
    int n, Bq;
    int has_tok = lm->tok != NULL;
    if (lua_type(L, 2) == LUA_TSTRING) {
        int *ids;
        need_tok(L, lm);
        size_t len;
        const char *text = lua_tolstring(L, 2, &len);
        mp_status st = lm_encode(lm, text, len, lm_add_bos(lm), 0, &ids, &n);
        if (st) return mp_lua_fail(L, st);
        g->ints = ids;
    } else {
        mp_lua_read_tokens(L, 2, g, &Bq, &n, "prompt", lm->m->cfg.vocab, 0); /* one row: gen_batch_rows took the rest */
    }
    int max_new = (int)mp_lua_opt_int(L, opt, "generate", "max_new_tokens", 64, 0, INT_MAX - n);
    g->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs */
    if (!g->hooks) return luaL_error(L, "out of memory");
    int ftbl = mp_lua_add_fwd_hooks(L, opt, g, n + max_new);
    mp_sampler_params sp = {(float)mp_lua_opt_num(L, opt, "generate", "temperature", 1.0),
                            (float)mp_lua_opt_num(L, opt, "generate", "top_p", 0.9),
                            (uint64_t)mp_lua_opt_int(L, opt, "generate", "seed", 1234, 0, LUA_MAXINTEGER)};
    int stop = mp_lua_opt_bool(L, opt, "generate", "stop_at_eos", 1) && has_tok ? lm_eos(lm) : -1;
    gen_ctx gc = {L, 0, has_tok ? lm : NULL, n ? g->ints[n - 1] : -1, 0};
    if (mp_lua_opt_type(L, opt, "generate", "on_token", LUA_TFUNCTION)) gc.fn = lua_gettop(L);
    int *out = lua_newuserdatauv(L, ((size_t)n + (size_t)max_new) * sizeof(int), 0);
    int n_out = 0;
    mp_status st = mp_model_generate(lm->m, g->ints, n, max_new, &sp, mp_hooks_count(g->hooks) ? g->hooks : NULL,
                                     stop, gen_on_token, &gc, out, &n_out);
    if (gc.err == 2) return luaL_error(L, "%s", mp_last_error());
    if (gc.err) return lua_error(L);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        return mp_lua_fail(L, st);
    }
    if (has_tok) {
        char *s;
        size_t len;
        if ((st = lm_decode(lm, out, n_out, &s, &len))) return mp_lua_fail(L, st);
        lua_pushlstring(L, s, len);
        free(s);
    } else {
        lua_pushnil(L);
    }
    lua_createtable(L, n_out, 0);
    for (int i = 0; i < n_out; i++) { lua_pushinteger(L, out[i]); lua_rawseti(L, -2, i + 1); }
    return 2;
}

/* ---- construction ---- */

static lmodel *push_lmodel(lua_State *L) {
    lmodel *lm = lua_newuserdatauv(L, sizeof *lm, 1);
    memset(lm, 0, sizeof *lm);
    luaL_setmetatable(L, MODEL_MT);
    return lm;
}

/* mp.load(path [, {tokenizer=path | "bytes", copy=false, ...}]); copy = true
 * copies a llama2.c file's memory-mapped weights into the model's own memory
 * (m:param views, m:set_weight), as training does on its first step */
static int l_load(lua_State *L) {
    static const char *const known[] = {"tokenizer", "device", "precision", "copy", MP_LUA_LOAD_PROCESS_KEYS, NULL};
    const char *path = luaL_checkstring(L, 1);
    lua_settop(L, 2); /* the model goes to index 3, with or without options (mp.load(path, nil) too) */
    mp_lua_opt_check(L, 2, "mp.load", known);
    int opt = lua_istable(L, 2) ? 2 : 0;
    lmodel *lm = push_lmodel(L);
    mp_device dev;
    mp_precision prec;
    mp_lua_device_read(L, opt, "mp.load", &dev, &prec); /* before the file is read: no device fails at once */
    mp_status st;
    mp_adamw o; /* a checkpoint's optimizer state, its loss curve into lm->log */
    mp_model_load_params lp = mp_model_load_params_default();
    lp.opt = &o;
    lp.log = &lm->log;
    if ((st = mp_model_load_with(&lm->m, path, &lp))) return mp_lua_fail(L, st);
    /* copy = true: the parameters in the model's own memory, not the file's read-only map (writable) */
    if (mp_lua_opt_bool(L, opt, "mp.load", "copy", 0) && (st = mp_model_make_owned(lm->m)))
        return mp_lua_fail(L, mp_error_prefix(st, "mp.load: %s", path));
    if (o.n) {
        mp_lua_optim_push(L, &o);
        lua_setiuservalue(L, -2, 1);
    }
    const char *tp = mp_lua_opt_str(L, opt, "mp.load", "tokenizer", NULL);
    if (tp) set_tokenizer(L, lm, tp);
    else { /* the model's own, one beside it, or the bytes hint: formats/tok_find.c decides */
        mp_tok_found f;
        st = mp_tok_discover(path, lp.tok_source, lm->m->tokenizer, lm->m->cfg.vocab, &f);
        if (f.own_failed) fprintf(stderr, "mechprobe: warning: %s: tokenizer not loaded: %s\n", path, f.why);
        if (st) return mp_lua_fail(L, st);
        if (f.tok) attach_tok(lm, f.tok, f.source);
        else if (f.origin == MP_TOK_FROM_BYTES) attach_bytes(L, lm);
    }
    mp_lua_load_process(L, opt, 3); /* fold_ln= etc.: TL's weight processing */
    mp_lua_device_move(L, lm, "mp.load", dev, prec); /* the processed weights */
    lua_settop(L, 3);
    return 1;
}

/* mp.model.new{d_model=, n_layer=, n_head=, vocab=, ctx= (required), and any
 * other field of MP_CONFIG_TABLE under its Lua key (n_kv_head=n_head,
 * d_head=d_model/n_head, d_mlp=4*d_model or 0 without MLP, rope_theta=10000,
 * norm_eps=1e-5, tied=true, norm="rms"|"layer", mlp="swiglu"|"gelu"|
 * "gelu_tanh"|"none", pos="rope"|"none"|"learned"|"half_rope"|"high_freq"|
 * "rope_id", rope_dims= (half_rope/rope_id: rotated channels, default half of
 * d_head), pos_temp=true (rope_id's length temperature), qkv_bias=false,
 * linear_bias=false, attn="softmax"|"ssmax"|"entmax15"|"entmax"|"asentmax",
 * alpha= (entmax/asentmax: in (1, 8], default 1.5), rope_scale, rope_freqs,
 * rope_scaling, rope_factor, rope_orig_ctx, yarn_beta_fast, yarn_beta_slow),
 * seed=0, init_std=0.02, tokenizer=}
 * Weights ~ normal(0, init_std), wo/w2 scaled by 1/sqrt(2 n_layer); attention-
 * variant parameters at their initial values (runtime/attn_variants.h). */
static int l_model_new(lua_State *L) {
    static const char *const extra[] = {"seed", "init_std", "tokenizer", "device", "precision", NULL};
    const char *fn = "mp.model.new";
    luaL_checktype(L, 1, LUA_TTABLE);
    mp_config c;
    mp_lua_config_read(L, 1, fn, extra, &c);
    uint64_t seed = (uint64_t)mp_lua_opt_int(L, 1, fn, "seed", 0, 0, LUA_MAXINTEGER);
    float std = (float)mp_lua_opt_num(L, 1, fn, "init_std", 0.02);
    const char *tok = mp_lua_opt_str(L, 1, fn, "tokenizer", NULL);
    mp_device dev;
    mp_precision prec;
    mp_lua_device_read(L, 1, fn, &dev, &prec);
    lmodel *lm = push_lmodel(L);
    mp_status st = mp_model_new_init(&lm->m, &c, seed, std);
    if (st) return luaL_error(L, "%s: %s", fn, mp_last_error());
    if (tok) set_tokenizer(L, lm, tok);
    mp_lua_device_move(L, lm, fn, dev, prec);
    return 1;
}

/* m:save(path [, {version=0|1, type="f32"|"f16"|"q8_0", format="hf"}]) — an
 * HDF5 checkpoint (parameters, the model's optimizer state and loss curve) for
 * a path ending in ".h5"; a GGUF file with the tokenizer for ".gguf"; a Hugging
 * Face folder (config.json + model.safetensors) with format="hf"; else a
 * llama2.c file (configs it can express only). An explicit format= ("hf",
 * "gguf", "h5", "llama2c") wins over the path; io/model_io.c decides. */
static int model_save(lua_State *L) {
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, "save", 0); /* option tables may run metamethods */
    const char *path = luaL_checkstring(L, 2);
    static const char *const known[] = {"format", "type", "version", NULL};
    mp_lua_opt_check(L, 3, "save", known);
    int opt = lua_istable(L, 3) ? 3 : 0;
    const char *format = mp_lua_opt_str(L, opt, "save", "format", NULL);
    mp_model_save_params sp = mp_model_save_params_default();
    if (format) {
        sp.format = mp_model_format_named(format);
        if (sp.format == MP_FORMAT_UNKNOWN)
            return luaL_error(L, "save: format must be \"hf\", \"gguf\", \"h5\" or \"llama2c\" (got \"%s\")", format);
    }
    sp.format = mp_model_save_format(path, sp.format);
    if (sp.format == MP_FORMAT_GGUF) {
        const char *type = "f32";
        type = mp_lua_opt_str(L, opt, "save", "type", type);
        long t = mp_gguf_type_named(type);
        if (t < 0) return luaL_error(L, "save: type must be \"f32\", \"f16\" or \"q8_0\" (got \"%s\")", type);
        sp.gguf_type = (uint32_t)t;
        sp.tok_source = lm->tok && !is_bytes(lm) ? lm->tok_path : NULL;
    } else if (sp.format == MP_FORMAT_HF) {
        sp.tok_source = lm->tok && !is_bytes(lm) ? lm->tok_path : NULL; /* the folder gets its tokenizer */
    } else if (sp.format == MP_FORMAT_CHECKPOINT) {
        lua_getiuservalue(L, 1, 1);
        sp.opt = luaL_testudata(L, -1, MP_OPTIM_MT);
        sp.log = lm->log.n ? &lm->log : NULL;
    } else if (sp.format == MP_FORMAT_LLAMA2C) {
        sp.llama2c_version = (int)mp_lua_opt_int(L, opt, "save", "version", 0, 0, 1);
    }
    mp_status st = mp_model_save_with(lm->m, path, &sp);
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
    lmodel *lm = mp_lua_model_check(L, 1);
    const char *glob = luaL_optstring(L, 2, MP_HOOK_GLOB_ALL); /* every point, the opt-in ones too */
    if (mp_model_n_saes(lm->m)) { /* the attached SAEs' sub-points too, each after its point */
        guard *g = mp_lua_guard_push(L);
        if (!(g->hooks = mp_hooks_new_model(lm->m))) return mp_lua_fail(L, MP_ERR_NOMEM);
        lua_newtable(L);
        mp_hooks_select(g->hooks, glob, names_visit, L, NULL, 0);
        return 1;
    }
    lua_newtable(L);
    mp_hook_select(&lm->m->cfg, glob, names_visit, L, NULL, 0);
    return 1;
}

static int model_index(lua_State *L) {
    lmodel *lm = mp_lua_model_check(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "config") == 0 || strcmp(k, "cfg") == 0) { mp_lua_config_push(L, lm->m); return 1; }
    if (strcmp(k, "tokenizer") == 0) {
        lua_pushstring(L, is_bytes(lm) ? "bytes" : lm->tok ? lm->tok_path : NULL);
        return 1;
    }
    if (strcmp(k, "tokenizer_path") == 0) { lua_pushstring(L, lm->tok && !is_bytes(lm) ? lm->tok_path : NULL); return 1; }
    if (strcmp(k, "has_tokenizer") == 0) { lua_pushboolean(L, lm->tok != NULL); return 1; }
    if (strcmp(k, "optimizer") == 0) { lua_getiuservalue(L, 1, 1); return 1; }
    if (mp_lua_weights_index(L, 1, k)) return 1; /* W_E, W_pos, W_U */
    if (mp_lua_device_index(L, lm, k)) return 1;  /* device, precision */
    if (strcmp(k, "weights") == 0) { /* "F32", "Q8_0", "Q4_K+Q6_K", ... */
        char t[64];
        mp_model_weight_types(lm->m, t, sizeof t);
        lua_pushstring(L, t);
        return 1;
    }
    luaL_getmetafield(L, 1, "__methods");
    lua_getfield(L, -1, k);
    return 1;
}

static int model_hook_names(lua_State *L) { return l_hook_names(L); }

/* m:set_rope_scaling{type="pi"|"ntk"|"yarn"|"none", factor=, original_ctx=ctx,
 * beta_fast=32, beta_slow=1} — inference-time scaling of a rope / half_rope
 * model's frequencies (and YaRN's attention temperature); "none" (or nil)
 * switches it off. Returns the model. */
static int model_set_rope_scaling(lua_State *L) {
    lua_settop(L, 2);
    model_idle(L, "set_rope_scaling"); /* the running pass and its KV cache read m->cfg */
    lmodel *lm = mp_lua_model_busy(L, 1, "set_rope_scaling", 0);
    const char *type = "none";
    static const char *const known[] = {"type", "factor", "original_ctx", "beta_fast", "beta_slow", NULL};
    if (!lua_istable(L, 2) && !lua_isnoneornil(L, 2))
        return luaL_argerror(L, 2, "expected a table {type=, factor=, original_ctx=}");
    mp_lua_opt_check(L, 2, "set_rope_scaling", known);
    type = mp_lua_opt_str(L, 2, "set_rope_scaling", "type", type);
    int k = mp_rope_scaling_parse(type);
    if (k < 0) return luaL_error(L, "set_rope_scaling: type must be \"pi\", \"ntk\", \"yarn\" or \"none\" (got \"%s\")", type);
    mp_rope_scaling_params p = mp_rope_scaling_params_default();
    p.type = (mp_rope_scaling)k;
    /* every option is read and type-checked whatever the type; "none" refuses
     * values other than the defaults (they would be silently dropped) */
    double factor = mp_lua_opt_num(L, 2, "set_rope_scaling", "factor", 1.0);
    lua_Integer orig = mp_lua_opt_int(L, 2, "set_rope_scaling", "original_ctx", 0, 0, INT_MAX);
    double beta_fast = mp_lua_opt_num(L, 2, "set_rope_scaling", "beta_fast", 0);
    double beta_slow = mp_lua_opt_num(L, 2, "set_rope_scaling", "beta_slow", 0);
    if (!k) {
        const char *bad = factor != 1.0 ? "factor" : orig != 0 ? "original_ctx" : beta_fast != 0 ? "beta_fast"
                        : beta_slow != 0 ? "beta_slow" : NULL;
        if (bad)
            return luaL_error(L, "set_rope_scaling: option '%s' applies to type \"pi\", \"ntk\" and \"yarn\" only "
                              "(type \"none\" switches scaling off)", bad);
    }
    p.factor = k ? (float)factor : 0.0f;
    p.original_ctx = k ? (int)orig : 0;
    p.beta_fast = k ? (float)beta_fast : 0.0f;
    p.beta_slow = k ? (float)beta_slow : 0.0f;
    if (mp_model_set_rope_scaling(lm->m, &p)) return luaL_error(L, "%s", mp_last_error());
    lua_settop(L, 1);
    return 1;
}

/* m:set_pos(name [, {rope_dims=, pos_temp=}]) — changes the positional scheme
 * in place (schemes with the same parameters: not to or from "learned"); DroPE
 * is m:set_pos("none") followed by a short recalibration. Returns the model. */
static int model_set_pos(lua_State *L) {
    lua_settop(L, 3);
    model_idle(L, "set_pos"); /* the running pass and its KV cache read m->cfg */
    static const char *const known[] = {"rope_dims", "pos_temp", NULL};
    lmodel *lm = mp_lua_model_busy(L, 1, "set_pos", 0);
    const char *name = luaL_checkstring(L, 2);
    mp_lua_opt_check(L, 3, "set_pos", known);
    int k = mp_pos_parse(name);
    if (k < 0) return luaL_error(L, "set_pos: unknown positional scheme \"%s\"", name);
    int rope_dims = (int)mp_lua_opt_int(L, 3, "set_pos", "rope_dims", 0, 0, INT_MAX);
    int pos_temp = mp_lua_opt_bool(L, 3, "set_pos", "pos_temp", 1);
    if (mp_model_set_pos(lm->m, (mp_pos_kind)k, rope_dims, pos_temp)) return luaL_error(L, "%s", mp_last_error());
    lua_settop(L, 1);
    return 1;
}
/* m:dequantize(): quantized GGUF weights -> float32 in place; returns m */
static int model_dequantize(lua_State *L) {
    lmodel *lm = model_idle(L, "dequantize"); /* the running method reads the weights this replaces */
    mp_status st = mp_model_dequantize(lm->m);
    mp_lua_params_detach(L, 1, "m:dequantize() replaced the parameter memory; call m:param again");
    if (st) return mp_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}
static const luaL_Reg model_methods[] = {
    {"forward", model_forward},
    {"run_with_cache", model_run_with_cache},
    {"run_with_hooks", model_run_with_hooks},
    {"generate", model_generate},
    {"to_tokens", model_to_tokens},
    {"to_string", model_to_string},
    {"to_str_tokens", model_to_str_tokens},
    {"to_single_token", model_to_single_token},
    {"set_tokenizer", model_set_tokenizer},
    {"hook_names", model_hook_names},
    {"set_rope_scaling", model_set_rope_scaling},
    {"set_pos", model_set_pos},
    {"save", model_save},
    {"dequantize", model_dequantize},
    {"close", model_close},
    {NULL, NULL}};

static int model_call(lua_State *L) { return run_common(L, 0, "forward"); }

void mp_lua_open_model(lua_State *L) {
    luaL_newmetatable(L, MODEL_MT);
    lua_pushcfunction(L, model_gc); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, model_close); lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, model_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, model_index); lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, model_call); lua_setfield(L, -2, "__call");
    luaL_newlib(L, model_methods);
    luaL_setfuncs(L, mp_lua_train_methods, 0);
    luaL_setfuncs(L, mp_lua_capture_methods, 0);
    luaL_setfuncs(L, mp_lua_weight_methods, 0);
    luaL_setfuncs(L, mp_lua_device_methods, 0);
    lua_setfield(L, -2, "__methods");
    lua_pop(L, 1);

    luaL_newmetatable(L, BUSY_MT);
    lua_pushcfunction(L, busy_release); lua_setfield(L, -2, "__close");
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
    lua_pushcfunction(L, mp_lua_config_fields); lua_setfield(L, -2, "config_fields");
    lua_setfield(L, -2, "model");
    lua_newtable(L);
    lua_pushcfunction(L, l_tok_save_bytelevel); lua_setfield(L, -2, "save_bytelevel");
    lua_setfield(L, -2, "tokenizer");
    mp_lua_open_train(L);
    mp_lua_open_interventions(L);
    mp_lua_open_grad(L);
    mp_lua_open_device(L);
}
