/* lcapture.c — m:capture_prompts(prompts, {out=, hooks="*", logits=false,
 * compress=0, fwd_hooks=}) -> n_datasets, n_prompts: a dataset capture of
 * many prompts of ragged lengths into one run file (mpi/h5capture.h), each
 * prompt run alone (B = 1). Under mpirun every rank passes its own share of
 * the prompts (mp.mpi.split) and the rows land in rank order, so the file
 * equals the serial one; the call is collective, and a failure on any rank
 * leaves no file under the final name. */
#include "h5capture.h"
#include "lmodel.h"

#include <stdlib.h>
#include <string.h>

/* counts the points a glob list selects that the CUDA forward lacks (mp_hook_on_device) */
static void cpu_only_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)layer;
    (void)name;
    if (!mp_hook_on_device(id)) ++*(int *)u;
}

static int model_capture_prompts(lua_State *L) {
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, "capture_prompts", 0); /* hooks may call back into Lua */
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const known[] = {"out", "hooks", "logits", "compress", "fwd_hooks", NULL};
    mp_lua_opt_check(L, 3, "capture_prompts", known);
    const mp_config *cfg = &lm->m->cfg;
    const char *out = mp_lua_opt_str(L, 3, "capture_prompts", "out", NULL);
    if (!out) return luaL_error(L, "capture_prompts: option 'out' (output .h5 path) is required");
    mp_h5cap_params p = {out, mp_lua_opt_globs(L, 3, "capture_prompts", "hooks", "*"),
                         mp_lua_opt_bool(L, 3, "capture_prompts", "logits", 0),
                         (int)mp_lua_opt_int(L, 3, "capture_prompts", "compress", 0, 0, 9), lm->m->source,
                         lm->m->tokenizer, NULL, NULL};
    if (strcmp(p.globs, "none") == 0) p.globs = "";
    /* this rank's prompts: one token array, offsets and lengths */
    const lua_Integer n = luaL_len(L, 2);
    if (n > INT32_MAX / 2) return luaL_error(L, "capture_prompts: too many prompts (%I)", n);
    guard *all = mp_lua_guard_push(L);
    int32_t *len = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *len, 0);
    size_t *off = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *off, 0);
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
        off[i - 1] = total;
        len[i - 1] = T;
        total += (size_t)T;
        if (T > tmax) tmax = T;
        lua_pop(L, 3);
    }
    guard *g = mp_lua_guard_push(L);
    g->hooks = mp_hooks_new(cfg);
    if (!g->hooks) return luaL_error(L, "out of memory");
    const int ftbl = mp_lua_add_fwd_hooks(L, 3, g, tmax); /* interventions apply before capture */
    float *logits = p.logits ? lua_newuserdatauv(L, (size_t)tmax * (size_t)cfg->vocab * sizeof(float), 0) : NULL;
    /* collective from here: every failure becomes a status that finish shares */
    mp_h5cap *cap_w = NULL;
    int64_t n_total = 0;
    int n_ds = 0;
    /* where the forwards will run: points the device forward lacks (the
     * per-head ones) keep a cuda model's calls on the CPU (mp_cuda_cpu_reason) */
    mp_forward_params probe = mp_forward_params_default();
    probe.hooks = g->hooks;
    int cpu_only = 0;
    if (p.globs && p.globs[0]) mp_hook_select(cfg, p.globs, cpu_only_visit, &cpu_only, NULL, 0);
    const mp_device ran = cpu_only ? MP_DEVICE_CPU : mp_model_forward_device(lm->m, &probe);
    p.device = mp_device_name(ran);
    p.precision = mp_precision_name(ran == MP_DEVICE_CPU ? MP_PRECISION_FP32 : lm->m->precision);
    mp_status st = mp_h5cap_create(&cap_w, &p, cfg, len, (int)n, g->hooks, &n_total, &n_ds);
    if (st) return mp_lua_fail(L, st);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = g->hooks;
    fp.logits = p.logits ? MP_LOGITS_ALL : MP_LOGITS_NONE;
    for (lua_Integer i = 0; i < n && st == MP_OK; i++) {
        const int *tok = all->ints + off[i];
        if ((st = mp_h5cap_begin(cap_w, (int)i, tok))) break;
        if ((st = mp_model_forward(lm->m, tok, 1, len[i], &fp, logits))) break;
        if (p.logits) st = mp_h5cap_write_logits(cap_w, (int)i, logits);
    }
    mp_hooks_clear(g->hooks); /* the callbacks point into the writer */
    if ((st = mp_h5cap_finish(cap_w, st))) {
        mp_lua_hooks_rethrow(L, ftbl); /* a hook's own error, raised now that the forward has unwound */
        return mp_lua_fail(L, st);
    }
    lua_pushinteger(L, n_ds);
    lua_pushinteger(L, (lua_Integer)n_total);
    return 2;
}

const luaL_Reg mp_lua_capture_methods[] = {
    {"capture_prompts", model_capture_prompts},
    {NULL, NULL}};
