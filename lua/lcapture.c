/* lcapture.c — the capture bindings, each a call of the C capture workflow
 * (mpi/capture.h, mp_capture_run) after reading its Lua arguments:
 *
 * m:capture(tokens, {out=, hooks="*", logits=false, compress=0, fwd_hooks=,
 * attention_mask=}) -> n_datasets: one batch [B, T] into a run file (io/h5run.h).
 *
 * m:capture_prompts(prompts, {out=, hooks="*", logits=false, compress=0,
 * fwd_hooks=}) -> n_datasets, n_prompts: a dataset capture of many prompts of
 * ragged lengths into one run file (mpi/h5capture.h), each prompt run alone
 * (B = 1). Under mpirun every rank passes its own share of the prompts
 * (mp.mpi.split) and the rows land in rank order, so the file equals the
 * serial one; the call is collective, and a failure on any rank leaves no
 * file under the final name.
 *
 * mp.capture{model=, out=, text= | tokens= | text_file= | tokens_file=,
 * hooks="*", logits=false, compress=0, fwd_hooks=, what=} -> n_datasets,
 * n_prompts, T: `mechprobe capture` (probes/capture.lua) in one call; a file
 * is read, tokenized and split across the ranks in C (collective), text and
 * tokens are one prompt (call it on one rank). `what` names the file in
 * errors (default "text_file" / "tokens_file").
 *
 * m:capture here replaces the method of the same name in lmodel.c (this
 * table is set after that one). */
#include "capture.h"
#include "lmodel.h"
#include "sae_splice.h"

#include <stdlib.h>
#include <string.h>

/* Runs p (its fwd_hooks from the guard g, their Lua functions in ftbl);
 * raises a Lua hook's own error first, else the status. */
static mp_capture_result run_capture(lua_State *L, mp_capture_params *p, guard *g, int ftbl) {
    mp_capture_result r;
    p->fwd_hooks = g->hooks;
    mp_status st = mp_capture_run(p, &r);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl); /* a hook's own error, raised now that the forward has unwound */
        mp_lua_fail(L, st);
    }
    return r;
}

/* m:capture(tokens, {out=PATH, hooks="*", logits=false, compress=0, fwd_hooks=, attention_mask=}) */
static int model_capture(lua_State *L) {
    lua_settop(L, 3);
    static const char *const known[] = {"out", "hooks", "logits", "compress", "fwd_hooks", "attention_mask", NULL};
    lmodel *lm = mp_lua_model_busy(L, 1, "capture", 0);
    luaL_checktype(L, 3, LUA_TTABLE);
    mp_lua_opt_check(L, 3, "capture", known);
    const mp_config *cfg = &lm->m->cfg;
    guard *g = mp_lua_guard_push(L);
    mp_capture_params p = mp_capture_params_default();
    p.model = lm->m;
    mp_lua_read_tokens(L, 2, g, &p.B, &p.T, "tokens", cfg->vocab, 0);
    p.tokens = g->ints;
    p.mask = mp_lua_opt_mask(L, 3, "capture", p.B, p.T);
    p.out = mp_lua_opt_str(L, 3, "capture", "out", NULL);
    if (!p.out) return luaL_error(L, "capture: option 'out' (output .h5 path) is required");
    p.hooks = mp_lua_opt_globs(L, 3, "capture", "hooks", "*");
    p.logits = mp_lua_opt_bool(L, 3, "capture", "logits", 0);
    p.compress = (int)mp_lua_opt_int(L, 3, "capture", "compress", 0, 0, 9);
    g->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs (sae_splice.h) */
    if (!g->hooks) return luaL_error(L, "out of memory");
    int ftbl = mp_lua_add_fwd_hooks(L, 3, g, p.T); /* interventions apply before capture */
    mp_capture_result r = run_capture(L, &p, g, ftbl);
    lua_pushinteger(L, r.n_datasets);
    return 1;
}

static int model_capture_prompts(lua_State *L) {
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, "capture_prompts", 0); /* hooks may call back into Lua */
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const known[] = {"out", "hooks", "logits", "compress", "fwd_hooks", NULL};
    mp_lua_opt_check(L, 3, "capture_prompts", known);
    const mp_config *cfg = &lm->m->cfg;
    mp_capture_params p = mp_capture_params_default();
    p.model = lm->m;
    p.out = mp_lua_opt_str(L, 3, "capture_prompts", "out", NULL);
    if (!p.out) return luaL_error(L, "capture_prompts: option 'out' (output .h5 path) is required");
    p.hooks = mp_lua_opt_globs(L, 3, "capture_prompts", "hooks", "*");
    p.logits = mp_lua_opt_bool(L, 3, "capture_prompts", "logits", 0);
    p.compress = (int)mp_lua_opt_int(L, 3, "capture_prompts", "compress", 0, 0, 9);
    /* this rank's prompts: one token array and the lengths */
    const lua_Integer n = luaL_len(L, 2);
    if (n > INT32_MAX / 2) return luaL_error(L, "capture_prompts: too many prompts (%I)", n);
    guard *all = mp_lua_guard_push(L);
    int32_t *len = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *len, 0);
    size_t total = 0, cap = 0;
    int tmax = 1;
    for (lua_Integer i = 1; i <= n; i++) {
        guard *g = mp_lua_guard_push(L);
        int B, T;
        lua_geti(L, 2, i);
        const char *what = lua_pushfstring(L, "capture_prompts: prompt %I", i);
        lua_insert(L, -2); /* keep the name below the prompt */
        mp_lua_read_tokens(L, -1, g, &B, &T, what, cfg->vocab, 0); /* integers inside the vocabulary */
        if (B != 1) return luaL_error(L, "capture_prompts: prompt %I is a batch [%d,%d]; give one sequence per prompt",
                                      i, B, T);
        if (total + (size_t)T > cap) {
            size_t nc = cap ? 2 * cap : 1024;
            while (nc < total + (size_t)T) nc *= 2;
            int *q = realloc(all->ints, nc * sizeof *q);
            if (!q) return luaL_error(L, "capture_prompts: out of memory for %zu tokens", nc);
            all->ints = q;
            cap = nc;
        }
        memcpy(all->ints + total, g->ints, (size_t)T * sizeof(int));
        len[i - 1] = T;
        total += (size_t)T;
        if (T > tmax) tmax = T;
        lua_pop(L, 3);
    }
    p.prompts = all->ints;
    p.lengths = len;
    p.n_prompts = (int)n;
    guard *g = mp_lua_guard_push(L);
    g->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs (sae_splice.h) */
    if (!g->hooks) return luaL_error(L, "out of memory");
    const int ftbl = mp_lua_add_fwd_hooks(L, 3, g, tmax); /* interventions apply before capture */
    mp_capture_result r = run_capture(L, &p, g, ftbl); /* collective */
    lua_pushinteger(L, r.n_datasets);
    lua_pushinteger(L, (lua_Integer)r.n_prompts);
    return 2;
}

/* mp.capture{model=, out=, text= | tokens= | text_file= | tokens_file=, hooks=, logits=, compress=, fwd_hooks=,
 * what=} -> n_datasets, n_prompts, T */
static int l_capture(lua_State *L) {
    static const char *const known[] = {"model", "out", "text", "tokens", "text_file", "tokens_file", "hooks",
                                        "logits", "compress", "fwd_hooks", "what", NULL};
    lua_settop(L, 1);
    luaL_checktype(L, 1, LUA_TTABLE);
    mp_lua_opt_check(L, 1, "mp.capture", known);
    if (lua_getfield(L, 1, "model") == LUA_TNIL) return luaL_error(L, "mp.capture: option 'model' (a Model) is required");
    lmodel *lm = mp_lua_model_busy(L, 2, "capture", 0); /* hooks may call back into Lua */
    const mp_config *cfg = &lm->m->cfg;
    mp_capture_params p = mp_capture_params_default();
    p.model = lm->m;
    p.tok = lm->tok;
    p.out = mp_lua_opt_str(L, 1, "mp.capture", "out", NULL);
    if (!p.out) return luaL_error(L, "mp.capture: option 'out' (output .h5 path) is required");
    p.hooks = mp_lua_opt_globs(L, 1, "mp.capture", "hooks", "*");
    p.logits = mp_lua_opt_bool(L, 1, "mp.capture", "logits", 0);
    p.compress = (int)mp_lua_opt_int(L, 1, "mp.capture", "compress", 0, 0, 9);
    p.text = mp_lua_opt_str(L, 1, "mp.capture", "text", NULL);
    p.text_file = mp_lua_opt_str(L, 1, "mp.capture", "text_file", NULL);
    p.tokens_file = mp_lua_opt_str(L, 1, "mp.capture", "tokens_file", NULL);
    p.file_what = mp_lua_opt_str(L, 1, "mp.capture", "what", p.text_file ? "text_file" : "tokens_file");
    guard *g = mp_lua_guard_push(L);
    const int top = lua_gettop(L);
    if (mp_lua_opt_get(L, 1, "tokens") != LUA_TNIL) {
        mp_lua_read_tokens(L, top + 1, g, &p.B, &p.T, "tokens", cfg->vocab, 0);
        p.tokens = g->ints;
    }
    lua_settop(L, top);
    if ((p.text != NULL) + (p.tokens != NULL) + (p.text_file != NULL) + (p.tokens_file != NULL) != 1)
        return luaL_error(L, "mp.capture: give exactly one of text, tokens, text_file and tokens_file");
    g->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs (sae_splice.h) */
    if (!g->hooks) return luaL_error(L, "out of memory");
    const int ftbl = mp_lua_add_fwd_hooks(L, 1, g, p.tokens ? p.T : 0); /* interventions apply before capture */
    mp_capture_result r = run_capture(L, &p, g, ftbl);
    lua_pushinteger(L, r.n_datasets);
    lua_pushinteger(L, (lua_Integer)r.n_prompts);
    lua_pushinteger(L, r.T);
    return 3;
}

const luaL_Reg mp_lua_capture_methods[] = {
    {"capture", model_capture},
    {"capture_prompts", model_capture_prompts},
    {NULL, NULL}};

void mp_lua_open_capture(lua_State *L) {
    lua_pushcfunction(L, l_capture);
    lua_setfield(L, -2, "capture");
}
