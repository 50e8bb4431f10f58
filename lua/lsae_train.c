/* lsae_train.c — SAE training and metrics from Lua, over runtime/sae_train.h
 * and io/sae_data.h: mp.sae.train{...} -> sae, result; sae:evaluate{...} and
 * mp.sae.evaluate(sae, {...}) -> metrics. The data are one of: a model + hook
 * + tokens (a live forward), dataset = capture file(s) + hook (streamed), or
 * data = a Tensor of rows [N, d_in]. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lmodel.h"
#include "sae.h"
#include "sae_data.h"
#include "sae_io.h"
#include "sae_train.h"

#define RUN_MT "mechprobe.SAETrainRun"

/* What one call owns (freed by __gc if a Lua error unwinds). */
typedef struct {
    mp_sae_shuffler *sh;
    mp_sae_h5src *h5;
    mp_sae_live *live;
    mp_sae *own;          /* the SAE until it is pushed */
} run;

static int run_gc(lua_State *L) {
    run *r = luaL_checkudata(L, 1, RUN_MT);
    mp_sae_shuffler_free(r->sh);
    mp_sae_h5src_close(r->h5);
    mp_sae_live_free(r->live);
    mp_sae_free(r->own);
    memset(r, 0, sizeof *r);
    return 0;
}

/* The checkpoint callback: saves an SAELens folder <path>/<tokens> (as
 * SAELens names its checkpoints) when checkpoint_path is given, then calls
 * on_checkpoint(sae, step, tokens) when given. */
typedef struct {
    lua_State *L;
    int fn, sae;       /* stack indices (fn 0: none) */
    int err;           /* a Lua error object sits at err_idx */
    const char *path;  /* checkpoint_path, or NULL */
} ckpt_ctx;

static int sae_alive(lua_State *L) {
    mp_lua_sae_check(L, 1);
    return 0;
}

static mp_status lua_ckpt(void *user, const mp_sae *s, long step, long tokens) {
    ckpt_ctx *c = user;
    lua_State *L = c->L;
    if (c->path) {
        char dir[4096];
        if (snprintf(dir, sizeof dir, "%s/%ld", c->path, tokens) >= (int)sizeof dir)
            return mp_error(MP_ERR_ARG, "mp.sae.train: checkpoint_path is too long");
        mp_status st = mp_sae_save(s, dir);
        if (st) return st;
    }
    if (!c->fn) return MP_OK;
    lua_pushvalue(L, c->fn);
    lua_pushvalue(L, c->sae);
    lua_pushinteger(L, step);
    lua_pushinteger(L, tokens);
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
        c->err = 1; /* the error object stays on the stack */
        return mp_error(MP_ERR_ARG, "on_checkpoint: %s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
    }
    /* the callback may not close the SAE under training */
    lua_pushcfunction(L, sae_alive);
    lua_pushvalue(L, c->sae);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        lua_pop(L, 1);
        return mp_error(MP_ERR_ARG, "mp.sae.train: on_checkpoint closed the SAE being trained");
    }
    return MP_OK;
}

static void set_num(lua_State *L, const char *k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, long v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

/* Is opts[key] present (not nil)? Pushes nothing. */
static int has(lua_State *L, int idx, const char *key) {
    int t = lua_getfield(L, idx, key) != LUA_TNIL;
    lua_pop(L, 1);
    return t;
}

static const char *const sched_names[] = {"constant", "cosineannealing", NULL};
static const char *const arch_names[] = {"standard", "topk", NULL};

/* File names from opts.dataset: a string or a list of strings. */
static int dataset_paths(lua_State *L, int opt, const char *fn, const char ***paths) {
    lua_getfield(L, opt, "dataset");
    int n = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
        *paths = lua_newuserdatauv(L, sizeof(char *), 0);
        (*paths)[0] = lua_tostring(L, -2);
        n = 1;
    } else if (lua_istable(L, -1)) {
        n = (int)luaL_len(L, -1);
        if (n < 1) luaL_error(L, "%s: option 'dataset' is an empty list", fn);
        *paths = lua_newuserdatauv(L, (size_t)n * sizeof(char *), 0);
        for (int i = 1; i <= n; i++) {
            if (lua_geti(L, -2, i) != LUA_TSTRING) luaL_error(L, "%s: dataset[%d] must be a file name", fn, i);
            (*paths)[i - 1] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
    } else {
        luaL_error(L, "%s: option 'dataset' must be a file name or a list of them", fn);
    }
    /* leaves the dataset value and the array on the stack (they keep the strings) */
    return n;
}

/* mp.sae.train{...} -> sae, result */
static int l_train(lua_State *L) {
    static const char *const known[] = {
        "sae", "architecture", "d_sae", "k", "apply_b_dec_to_input", "model", "hook", "tokens", "seqs_per_forward",
        "dataset", "chunk_rows", "data", "epochs", "l1_coefficient", "l1_warm_up_steps", "lr", "lr_scheduler",
        "lr_warm_up_steps", "lr_decay_steps", "lr_end", "adam_beta1", "adam_beta2", "batch_size", "steps",
        "training_tokens", "dead_feature_window", "normalize_decoder", "decoder_init_norm", "seed", "grad_clip",
        "shuffle_buffer", "checkpoint_every", "on_checkpoint", "checkpoint_path", "progress", "init", NULL};
    const char *fn = "mp.sae.train";
    luaL_checktype(L, 1, LUA_TTABLE);
    mp_lua_opt_check(L, 1, fn, known);
    run *R = lua_newuserdatauv(L, sizeof *R, 0);
    memset(R, 0, sizeof *R);
    luaL_setmetatable(L, RUN_MT);
    int run_idx = lua_gettop(L);

    mp_sae_train_params p = mp_sae_train_params_default();
    p.lr = (float)mp_lua_opt_num(L, 1, fn, "lr", p.lr);
    p.adam_beta1 = (float)mp_lua_opt_num(L, 1, fn, "adam_beta1", p.adam_beta1);
    p.adam_beta2 = (float)mp_lua_opt_num(L, 1, fn, "adam_beta2", p.adam_beta2);
    p.lr_scheduler = mp_lua_opt_enum(L, 1, fn, "lr_scheduler", 0, sched_names);
    p.lr_warm_up_steps = (int)mp_lua_opt_int(L, 1, fn, "lr_warm_up_steps", 0, 0, 1 << 30);
    p.lr_decay_steps = (int)mp_lua_opt_int(L, 1, fn, "lr_decay_steps", 0, 0, 1 << 30);
    p.lr_end = (float)mp_lua_opt_num(L, 1, fn, "lr_end", -1.0);
    p.l1_coefficient = (float)mp_lua_opt_num(L, 1, fn, "l1_coefficient", p.l1_coefficient);
    p.l1_warm_up_steps = (int)mp_lua_opt_int(L, 1, fn, "l1_warm_up_steps", 0, 0, 1 << 30);
    p.batch_size = (int)mp_lua_opt_int(L, 1, fn, "batch_size", p.batch_size, 1, 1 << 24);
    p.dead_feature_window = (int)mp_lua_opt_int(L, 1, fn, "dead_feature_window", p.dead_feature_window, 1, 1 << 30);
    p.normalize_decoder = mp_lua_opt_bool(L, 1, fn, "normalize_decoder", 0);
    p.decoder_init_norm = (float)mp_lua_opt_num(L, 1, fn, "decoder_init_norm", p.decoder_init_norm);
    p.seed = (uint64_t)mp_lua_opt_int(L, 1, fn, "seed", 42, 0, LUA_MAXINTEGER);
    p.grad_clip = (float)mp_lua_opt_num(L, 1, fn, "grad_clip", p.grad_clip);
    p.checkpoint_every = (long)mp_lua_opt_int(L, 1, fn, "checkpoint_every", 0, 0, LUA_MAXINTEGER);
    p.progress = mp_lua_opt_bool(L, 1, fn, "progress", 0);
    int has_steps = has(L, 1, "steps"), has_tokens = has(L, 1, "training_tokens");
    if (has_steps == has_tokens) return luaL_error(L, "%s: give exactly one of 'steps' and 'training_tokens'", fn);
    if (has_steps) p.steps = (long)mp_lua_opt_int(L, 1, fn, "steps", 0, 1, LUA_MAXINTEGER);
    else p.steps = (long)(mp_lua_opt_int(L, 1, fn, "training_tokens", 0, 1, LUA_MAXINTEGER) / p.batch_size);
    if (p.steps < 1) return luaL_error(L, "%s: training_tokens is less than one batch (%d)", fn, p.batch_size);
    int epochs = (int)mp_lua_opt_int(L, 1, fn, "epochs", 0, 0, 1 << 30);
    int ckpt_fn = 0;
    if (has(L, 1, "on_checkpoint")) {
        lua_getfield(L, 1, "on_checkpoint");
        if (!lua_isfunction(L, -1)) return luaL_error(L, "%s: option 'on_checkpoint' must be a function", fn);
        ckpt_fn = lua_gettop(L);
    }
    const char *ckpt_path = NULL;
    if (has(L, 1, "checkpoint_path")) {
        ckpt_path = mp_lua_opt_str(L, 1, fn, "checkpoint_path", NULL);
        if (!p.checkpoint_every) return luaL_error(L, "%s: option 'checkpoint_path' needs 'checkpoint_every'", fn);
        if (mkdir(ckpt_path, 0777) && errno != EEXIST)
            return luaL_error(L, "%s: checkpoint_path %s: cannot create: %s", fn, ckpt_path, strerror(errno));
    }

    /* the data */
    int n_src = has(L, 1, "model") + has(L, 1, "dataset") + has(L, 1, "data");
    if (n_src != 1) return luaL_error(L, "%s: give exactly one data source: model (+ hook, tokens), dataset (+ hook) or data", fn);
    const char *hook = mp_lua_opt_str(L, 1, fn, "hook", "");
    int d = 0;
    mp_sae_produce_fn produce;
    void *puser;
    mp_sae_rows *mr = NULL;
    mp_status st;
    if (has(L, 1, "data")) {
        lua_getfield(L, 1, "data");
        mp_tensor *x = mp_lua_tensor_arg(L, -1);
        if (x->ndim != 2 || x->shape[0] < 1) return luaL_error(L, "%s: data must be a Tensor [N, d_in]", fn);
        mr = lua_newuserdatauv(L, sizeof *mr, 0);
        *mr = (mp_sae_rows){x->data, x->shape[0], 0, (int)x->shape[1]};
        d = (int)x->shape[1];
        produce = mp_sae_rows_produce;
        puser = mr;
    } else if (has(L, 1, "dataset")) {
        const char **paths = NULL;
        int n = dataset_paths(L, 1, fn, &paths);
        if (!*hook) return luaL_error(L, "%s: option 'dataset' needs option 'hook' (the /acts/<hook> to read)", fn);
        int chunk = (int)mp_lua_opt_int(L, 1, fn, "chunk_rows", 65536, 1, 1 << 24);
        if ((st = mp_sae_h5src_open(&R->h5, paths, n, hook, epochs, chunk, &d))) return mp_lua_fail(L, st);
        produce = mp_sae_h5src_produce;
        puser = R->h5;
    } else {
        lua_getfield(L, 1, "model");
        /* in use until the call returns: on_checkpoint cannot close it under the live source */
        lmodel *lm = mp_lua_model_busy(L, -1, "sae_train", 0);
        if (!*hook) return luaL_error(L, "%s: option 'model' needs option 'hook'", fn);
        if (!has(L, 1, "tokens")) return luaL_error(L, "%s: option 'model' needs option 'tokens'", fn);
        lua_getfield(L, 1, "tokens");
        int tok_idx = lua_gettop(L);
        guard *g = mp_lua_guard_push(L);
        int S, T;
        mp_lua_read_tokens(L, tok_idx, g, &S, &T, "tokens", lm->m->cfg.vocab, 0);
        int spf = (int)mp_lua_opt_int(L, 1, fn, "seqs_per_forward", 8, 1, 1 << 20);
        /* d: the point's trailing size, from a probe of its shape */
        mp_hook_id id;
        int layer;
        if (mp_hook_parse(&lm->m->cfg, hook, &id, &layer))
            return luaL_error(L, "%s: '%s' is not a hook point of this model", fn, hook);
        int64_t shape[4];
        int nd = mp_hook_shape(&lm->m->cfg, id, 1, T, 0, shape);
        if (nd < 3 || shape[0] != 1 || shape[1] != T)
            return luaL_error(L, "%s: '%s' is not a per-token hook point ([B, T, ...])", fn, hook);
        d = 1;
        for (int k = 2; k < nd; k++) d *= (int)shape[k];
        if ((st = mp_sae_live_new(&R->live, lm->m, hook, d, g->ints, S, T, spf, epochs))) return mp_lua_fail(L, st);
        produce = mp_sae_live_produce;
        puser = R->live;
    }

    /* the SAE: given, or new */
    int sae_idx;
    mp_sae *s;
    if (has(L, 1, "sae")) {
        lua_getfield(L, 1, "sae");
        s = mp_lua_sae_check(L, -1);
        sae_idx = lua_gettop(L);
        if (has(L, 1, "architecture") || has(L, 1, "d_sae") || has(L, 1, "k") || has(L, 1, "apply_b_dec_to_input"))
            return luaL_error(L, "%s: options 'architecture', 'd_sae', 'k' and 'apply_b_dec_to_input' are for a new "
                                 "SAE, not with 'sae'", fn);
        if (s->d_in != d) return luaL_error(L, "%s: the SAE's d_in (%d) differs from the data's (%d)", fn, s->d_in, d);
        p.init = mp_lua_opt_bool(L, 1, fn, "init", 0);
    } else {
        int arch = mp_lua_opt_enum(L, 1, fn, "architecture", MP_SAE_STANDARD, arch_names);
        int d_sae = (int)mp_lua_opt_int(L, 1, fn, "d_sae", 0, 1, 1 << 26);
        int k = arch == MP_SAE_TOPK ? (int)mp_lua_opt_int(L, 1, fn, "k", 0, 1, d_sae) : 0;
        if ((st = mp_sae_new(&R->own, (mp_sae_arch)arch, d, d_sae, k))) return mp_lua_fail(L, st);
        R->own->apply_b_dec_to_input = mp_lua_opt_bool(L, 1, fn, "apply_b_dec_to_input", 1);
        if (*hook && strlen(hook) < sizeof R->own->hook_name) {
            strcpy(R->own->hook_name, hook);
            if (!strncmp(hook, "blocks.", 7)) R->own->hook_layer = atoi(hook + 7);
        }
        s = R->own;
        R->own = NULL;
        mp_lua_sae_push(L, s);
        sae_idx = lua_gettop(L);
        p.init = 1;
    }
    int cap = (int)mp_lua_opt_int(L, 1, fn, "shuffle_buffer", 4L * p.batch_size, 1, 1 << 30);
    if ((st = mp_sae_shuffler_new(&R->sh, d, cap, p.seed + 1, produce, puser))) return mp_lua_fail(L, st);
    ckpt_ctx cc = {L, ckpt_fn, sae_idx, 0, ckpt_path};
    mp_sae_train_result res;
    st = mp_sae_train(s, &p, mp_sae_shuffle_next, R->sh, ckpt_fn || ckpt_path ? lua_ckpt : NULL, &cc, &res);
    if (st) {
        if (cc.err) return lua_error(L);
        return mp_lua_fail(L, st);
    }
    lua_pushvalue(L, sae_idx);
    lua_newtable(L);
    set_int(L, "steps", res.steps);
    set_int(L, "tokens", res.tokens);
    set_num(L, "mse_loss", res.mse);
    set_num(L, s->arch == MP_SAE_TOPK ? "auxiliary_reconstruction_loss" : "l1_loss", res.aux);
    set_num(L, "l0", res.l0);
    set_num(L, "explained_variance", res.explained_variance);
    set_int(L, "dead_features", res.n_dead);
    set_num(L, "seconds", res.seconds);
    set_num(L, "tokens_per_second", res.seconds > 0 ? res.tokens / res.seconds : 0);
    /* the steps after the first: the steady rate (the first pays every buffer's first touch) */
    set_num(L, "steady_tokens_per_second",
            res.steady_seconds > 0 ? (double)(res.tokens - p.batch_size) / res.steady_seconds : NAN);
    (void)run_idx;
    return 2;
}

static void push_metrics(lua_State *L, const mp_sae_metrics *m) {
    lua_newtable(L);
    set_int(L, "rows", m->rows);
    set_num(L, "l0", m->l0);
    set_num(L, "explained_variance", m->explained_variance);
    set_num(L, "mse", m->mse);
    set_num(L, "dead_fraction", m->dead_fraction);
    if (!isnan(m->ce_clean)) {
        set_num(L, "ce_loss_clean", m->ce_clean);
        set_num(L, "ce_loss_with_sae", m->ce_sae);
        set_num(L, "ce_loss_zero_ablation", m->ce_zero);
        set_num(L, "ce_loss_recovered", m->ce_loss_recovered);
    }
}

/* sae:evaluate{model=, tokens=[, hook=]} or sae:evaluate{data = Tensor [N, d_in]} -> metrics */
static int m_evaluate(lua_State *L) {
    static const char *const known[] = {"model", "tokens", "hook", "data", NULL};
    const char *fn = "SAE:evaluate";
    mp_sae *s = mp_lua_sae_check(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    mp_lua_opt_check(L, 2, fn, known);
    mp_sae_metrics m;
    mp_status st;
    if (has(L, 2, "data")) {
        lua_getfield(L, 2, "data");
        mp_tensor *x = mp_lua_tensor_arg(L, -1);
        if (x->ndim < 1 || x->shape[x->ndim - 1] != s->d_in)
            return luaL_error(L, "%s: data must have last dim d_in = %d", fn, s->d_in);
        size_t N = x->numel / (size_t)s->d_in;
        if (N < 1 || N > (size_t)1 << 30) return luaL_error(L, "%s: data has %zu rows", fn, N);
        if ((st = mp_sae_metrics_rows(s, x->data, (int)N, &m))) return mp_lua_fail(L, st);
        push_metrics(L, &m);
        return 1;
    }
    if (!has(L, 2, "model")) return luaL_error(L, "%s: give 'model' and 'tokens', or 'data'", fn);
    lua_getfield(L, 2, "model");
    lmodel *lm = mp_lua_model_check(L, -1);
    if (!has(L, 2, "tokens")) return luaL_error(L, "%s: option 'model' needs option 'tokens'", fn);
    lua_getfield(L, 2, "tokens");
    int tok_idx = lua_gettop(L);
    guard *g = mp_lua_guard_push(L);
    int B, T;
    mp_lua_read_tokens(L, tok_idx, g, &B, &T, "tokens", lm->m->cfg.vocab, 0);
    const char *hook = mp_lua_opt_str(L, 2, fn, "hook", "");
    if ((st = mp_sae_evaluate(s, lm->m, hook, g->ints, B, T, &m))) return mp_lua_fail(L, st);
    push_metrics(L, &m);
    return 1;
}

/* mp.sae.evaluate(sae, opts): the same as sae:evaluate(opts). */
static int l_evaluate(lua_State *L) { return m_evaluate(L); }

void mp_lua_open_sae_train(lua_State *L) {
    /* expects the mp.sae table on top */
    if (luaL_newmetatable(L, RUN_MT)) {
        lua_pushcfunction(L, run_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_train);
    lua_setfield(L, -2, "train");
    lua_pushcfunction(L, l_evaluate);
    lua_setfield(L, -2, "evaluate");
    luaL_getmetatable(L, MP_SAE_MT);
    lua_getfield(L, -1, "methods");
    lua_pushcfunction(L, m_evaluate);
    lua_setfield(L, -2, "evaluate");
    lua_pop(L, 2);
}
