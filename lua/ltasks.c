/* ltasks.c — Lua bindings of the synthetic task generators (tasks/): the table
 * mp.tasks with the constructors mtd, algebra, text and retrieval, each giving a
 * task object (metatables "mechprobe.MTDTask", "mechprobe.AlgebraTask",
 * "mechprobe.TextTask", "mechprobe.RetrievalTask") whose sample(B, T) returns
 *     tokens  : Tensor [B,T] of token ids (float32 holding integers)
 *     targets : Tensor [B,T], the next token or -1 where no loss is taken
 *     truth   : a table with the generator's ground truth
 * so that any task can feed m:train{task = t}. Conventions: token ids, symbols
 * and group elements are 0-based values as in C; positions reported in truth
 * tables are 1-based Lua indices; text file offsets are 0-based bytes. Every
 * task also has t.vocab, t.params (a table of the constructor's options that
 * rebuilds the same task), t:seed(s) (restart the sample stream) and t:close()
 * (also __close/__gc, idempotent). Bad options raise an error naming the
 * option, e.g. "mp.tasks.mtd: option 'q' must be an integer in [2, 2147483647], got 1". */
#include "ltasks.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mtd.h"
#include "retrieval.h"
#include "textcorpus.h"

/* ---- task types: one userdata layout (ltask), one metatable each ---- */

void *lt_check_task(lua_State *L, int idx, const task_type *tt) {
    ltask *u = luaL_checkudata(L, idx, tt->mt);
    if (!u->h) luaL_error(L, "%s is closed", tt->name);
    return u->h;
}

/* Pushes a new task userdata with h = NULL (the constructor fills it, so a
 * failed init leaves nothing to free). */
ltask *lt_push_task(lua_State *L, const task_type *tt) {
    ltask *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->h = NULL;
    luaL_setmetatable(L, tt->mt);
    return u;
}

const task_type *lt_upvalue_type(lua_State *L) {
    return lua_touserdata(L, lua_upvalueindex(1));
}

int lt_t_close(lua_State *L) {
    const task_type *tt = lt_upvalue_type(L);
    ltask *u = luaL_checkudata(L, 1, tt->mt);
    if (u->h) tt->free_fn(u->h);
    u->h = NULL;
    return 0;
}

int lt_t_tostring(lua_State *L) {
    const task_type *tt = lt_upvalue_type(L);
    ltask *u = luaL_checkudata(L, 1, tt->mt);
    if (!u->h) {
        lua_pushfstring(L, "%s(closed)", tt->name);
        return 1;
    }
    char buf[4608];
    tt->describe(u->h, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

/* __index: methods (upvalue 2) first, then the type's fields. */
int lt_t_index(lua_State *L) {
    const task_type *tt = lt_upvalue_type(L);
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(2));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (lua_type(L, 2) != LUA_TSTRING) return 0;
    void *h = lt_check_task(L, 1, tt);
    return tt->field(L, h, lua_tostring(L, 2)) ? 1 : 0;
}

/* The type's metatable: __gc/__close (idempotent close), __tostring, and an
 * __index holding the methods plus close. Every closure gets tt as upvalue 1. */
void lt_register_type(lua_State *L, const task_type *tt, const luaL_Reg *methods) {
    static const char *const metas[] = {"__gc", "__close", "__tostring"};
    luaL_newmetatable(L, tt->mt);
    for (int i = 0; i < 3; i++) {
        lua_pushlightuserdata(L, (void *)tt);
        lua_pushcclosure(L, i < 2 ? lt_t_close : lt_t_tostring, 1);
        lua_setfield(L, -2, metas[i]);
    }
    lua_pushlightuserdata(L, (void *)tt);
    lua_newtable(L);
    lua_pushlightuserdata(L, (void *)tt);
    luaL_setfuncs(L, methods, 1);
    lua_pushlightuserdata(L, (void *)tt);
    lua_pushcclosure(L, lt_t_close, 1);
    lua_setfield(L, -2, "close");
    lua_pushcclosure(L, lt_t_index, 2);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

/* Raises "<where>: <message>", dropping the C layer's own "<cprefix>: ". */
int lt_fail(lua_State *L, const char *where, const char *cprefix) {
    const char *msg = mp_last_error();
    size_t n = cprefix ? strlen(cprefix) : 0;
    if (n && strncmp(msg, cprefix, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
    return luaL_error(L, "%s: %s", where, msg);
}

/* ---- options tables ---- */

/* Integer options and arguments: mp_lua_opt_int / mp_lua_arg_int (lua/lopt.c),
 * "fn: option 'q' must be an integer in [2, 2147483647], got 1". */
int lt_opt_int(lua_State *L, int idx, const char *fn, const char *key, int def, int lo, int hi) {
    return (int)mp_lua_opt_int(L, idx, fn, key, def, lo, hi);
}

uint64_t lt_opt_seed(lua_State *L, int idx, const char *fn) {
    return (uint64_t)mp_lua_opt_int(L, idx, fn, "seed", 1, 0, LUA_MAXINTEGER);
}

/* A positional count argument (B, T) >= lo. */
int lt_arg_count(lua_State *L, int arg, const char *fn, const char *what, int lo) {
    return (int)mp_lua_arg_int(L, arg, fn, what, lo, INT_MAX);
}

int lt_m_seed_common(lua_State *L, const char *fn, uint64_t *seed) {
    *seed = (uint64_t)mp_lua_arg_int(L, 2, fn, "seed", 0, LUA_MAXINTEGER);
    lua_settop(L, 1);
    return 1;
}

/* ---- batches shared by the samplers ---- */

/* The two output Tensors [B,T] and the buffers the C samplers fill: int32
 * tokens and targets, and up to two more. The buffers are malloc'd after every
 * Lua object of the call is made and freed before any Lua error. */

void lt_batch_free(batch *bt) {
    for (int i = 0; i < 4; i++) {
        free(bt->p[i]);
        bt->p[i] = NULL;
    }
}

/* n * size bytes into slot i; on failure frees the batch and raises. */
void *lt_batch_alloc(lua_State *L, batch *bt, int i, size_t n, size_t size, const char *fn) {
    size_t bytes;
    if (mp_mul_size(n ? n : 1, size, &bytes) == 0) bt->p[i] = malloc(bytes);
    if (!bt->p[i]) {
        lt_batch_free(bt);
        luaL_error(L, "%s: out of memory for a batch of %I values", fn, (lua_Integer)n);
    }
    return bt->p[i];
}

/* Pushes the tokens and targets Tensors [B,T]. */
void lt_batch_begin(lua_State *L, batch *bt, int B, int T) {
    int64_t sh[2] = {B, T};
    memset(bt, 0, sizeof *bt);
    bt->tok = mp_lua_tensor_new(L, 2, sh);
    bt->tgt = mp_lua_tensor_new(L, 2, sh);
}

/* The int32 buffers of tokens and targets (slots 0, 1). */
void lt_batch_ids(lua_State *L, batch *bt, const char *fn) {
    lt_batch_alloc(L, bt, 0, bt->tok->numel, sizeof(int32_t), fn);
    lt_batch_alloc(L, bt, 1, bt->tok->numel, sizeof(int32_t), fn);
}

/* Copies the ids into the Tensors when the sampler succeeded; frees the buffers. */
void lt_batch_end(batch *bt, mp_status st) {
    if (st == MP_OK)
        for (size_t i = 0; i < bt->tok->numel; i++) {
            bt->tok->data[i] = (float)((int32_t *)bt->p[0])[i];
            bt->tgt->data[i] = (float)((int32_t *)bt->p[1])[i];
        }
    lt_batch_free(bt);
}

/* Token ids of a Tensor / table argument into int32 (each an integer in 0..hi-1). */
int32_t *lt_arg_ids(lua_State *L, int arg, const char *fn, const char *what, int hi, size_t *n) {
    mp_tensor *t = mp_lua_tensor_arg(L, arg);
    *n = t->numel;
    int32_t *ids = lua_newuserdatauv(L, (t->numel ? t->numel : 1) * sizeof *ids, 0);
    for (size_t i = 0; i < t->numel; i++) {
        float v = t->data[i];
        if (!(v >= 0 && v < (float)hi) || v != floorf(v)) {
            char b[32];
            snprintf(b, sizeof b, "%g", (double)v);
            luaL_error(L, "%s: %s[%I] = %s is not a token id in 0..%d", fn, what, (lua_Integer)(i + 1), b, hi - 1);
        }
        ids[i] = (int32_t)v;
    }
    return ids;
}

void lt_set_int(lua_State *L, const char *k, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}
void lt_set_num(lua_State *L, const char *k, lua_Number v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}
void lt_set_str(lua_State *L, const char *k, const char *v) {
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}
void lt_set_bool(lua_State *L, const char *k, int v) {
    lua_pushboolean(L, v);
    lua_setfield(L, -2, k);
}

/* ==== MTD ==== */

static const char *const mtd_targets[] = {"all", "last", NULL};

static void mtd_free(void *h) { mp_mtd_free(h); }

static void mtd_push_params(lua_State *L, const mp_mtd_params *p) {
    lua_createtable(L, 0, 5);
    lt_set_int(L, "q", p->q);
    lt_set_int(L, "m", p->m);
    lt_set_num(L, "concentration", p->c);
    lt_set_str(L, "targets", mtd_targets[p->target]);
    lt_set_int(L, "seed", (lua_Integer)p->seed);
}

static int mtd_field(lua_State *L, void *h, const char *k) {
    const mp_mtd_params *p = mp_mtd_get_params(h);
    if (!strcmp(k, "vocab") || !strcmp(k, "q")) lua_pushinteger(L, p->q);
    else if (!strcmp(k, "m")) lua_pushinteger(L, p->m);
    else if (!strcmp(k, "params")) mtd_push_params(L, p);
    else return 0;
    return 1;
}

static void mtd_describe(void *h, char *buf, size_t n) {
    const mp_mtd_params *p = mp_mtd_get_params(h);
    snprintf(buf, n, "MTDTask(q=%d, m=%d, concentration=%g, targets=%s, seed=%llu)", p->q, p->m, p->c,
             mtd_targets[p->target], (unsigned long long)p->seed);
}

static const task_type MTD_TYPE = {"mechprobe.MTDTask", "MTDTask", mtd_free, mtd_field, mtd_describe};

/* mp.tasks.mtd{q=8, m=3, concentration=1, targets="all"|"last", seed=1} */
static int l_mtd(lua_State *L) {
    static const char *const known[] = {"q", "m", "concentration", "targets", "seed", NULL};
    const char *fn = "mp.tasks.mtd";
    mp_lua_opt_check(L, 1, fn, known);
    mp_mtd_params p = mp_mtd_params_default();
    p.q = lt_opt_int(L, 1, fn, "q", p.q, 2, INT_MAX);
    p.m = lt_opt_int(L, 1, fn, "m", p.m, 1, INT_MAX);
    p.c = mp_lua_opt_num(L, 1, fn, "concentration", p.c);
    if (!(p.c > 0) || !isfinite(p.c)) luaL_error(L, "%s: concentration must be finite and > 0 (got %f)", fn, p.c);
    p.target = (mp_mtd_target)mp_lua_opt_enum(L, 1, fn, "targets", (int)p.target, mtd_targets);
    p.seed = lt_opt_seed(L, 1, fn);
    ltask *u = lt_push_task(L, &MTD_TYPE);
    mp_mtd *t = NULL;
    if (mp_mtd_new(&t, &p) != MP_OK) return lt_fail(L, fn, "mtd");
    u->h = t;
    return 1;
}

/* t:sample(B, T [, {truth = false}]) -> tokens, targets, {lambda = [B,m], next = [B,T,q]} */
static int mtd_sample(lua_State *L) {
    const char *fn = "MTDTask:sample";
    mp_mtd *t = lt_check_task(L, 1, &MTD_TYPE);
    int B = lt_arg_count(L, 2, fn, "B", 1), T = lt_arg_count(L, 3, fn, "T", 1);
    static const char *const known[] = {"truth", NULL};
    mp_lua_opt_check(L, 4, fn, known);
    int want = mp_lua_opt_bool(L, 4, fn, "truth", 1);
    const mp_mtd_params *p = mp_mtd_get_params(t);
    if (T < p->m) luaL_error(L, "%s: T = %d is shorter than m = %d lags", fn, T, p->m);
    lua_settop(L, 3);
    batch bt;
    lt_batch_begin(L, &bt, B, T);
    int64_t sh[3] = {B, T, p->q}, shl[2] = {B, p->m};
    mp_tensor *lam = want ? mp_lua_tensor_new(L, 2, shl) : NULL;
    mp_tensor *nxt = want ? mp_lua_tensor_new(L, 3, sh) : NULL;
    lt_batch_ids(L, &bt, fn);
    double *dl = want ? lt_batch_alloc(L, &bt, 2, lam->numel, sizeof(double), fn) : NULL;
    double *dn = want ? lt_batch_alloc(L, &bt, 3, nxt->numel, sizeof(double), fn) : NULL;
    mp_status st = mp_mtd_sample(t, B, T, bt.p[0], bt.p[1], dl, dn);
    if (st == MP_OK && want) {
        for (size_t i = 0; i < lam->numel; i++) lam->data[i] = (float)dl[i];
        for (size_t i = 0; i < nxt->numel; i++) nxt->data[i] = (float)dn[i];
    }
    lt_batch_end(&bt, st);
    if (st != MP_OK) return lt_fail(L, fn, "mtd");
    lua_createtable(L, 0, 2);
    if (want) {
        lua_pushvalue(L, 6);
        lua_setfield(L, -2, "lambda");
        lua_pushvalue(L, 7);
        lua_setfield(L, -2, "next");
    }
    lua_pushvalue(L, 4);
    lua_pushvalue(L, 5);
    lua_rotate(L, -3, 2);
    return 3;
}

/* t:pi() -> Tensor [q,q], pi[u][v] = P(next = v | lagged token = u) */
static int mtd_pi(lua_State *L) {
    mp_mtd *t = lt_check_task(L, 1, &MTD_TYPE);
    int q = mp_mtd_get_params(t)->q;
    int64_t sh[2] = {q, q};
    mp_tensor *r = mp_lua_tensor_new(L, 2, sh);
    const double *pi = mp_mtd_pi(t);
    for (size_t i = 0; i < r->numel; i++) r->data[i] = (float)pi[i];
    return 1;
}

/* t:mixture(lambda [m], history [len >= m]) -> Tensor [q]: the distribution of
 * the token after history under mixture weights lambda. */
static int mtd_mixture(lua_State *L) {
    const char *fn = "MTDTask:mixture";
    mp_mtd *t = lt_check_task(L, 1, &MTD_TYPE);
    const mp_mtd_params *p = mp_mtd_get_params(t);
    lua_settop(L, 3);
    mp_tensor *lam = mp_lua_tensor_arg(L, 2);
    if (lam->numel != (size_t)p->m)
        luaL_error(L, "%s: lambda has %I entries, expected m = %d", fn, (lua_Integer)lam->numel, p->m);
    double *dl = lua_newuserdatauv(L, (size_t)p->m * sizeof(double), 0);
    for (int g = 0; g < p->m; g++) {
        if (!isfinite(lam->data[g])) luaL_error(L, "%s: lambda[%d] is not finite", fn, g + 1);
        dl[g] = lam->data[g];
    }
    size_t len;
    int32_t *hist = lt_arg_ids(L, 3, fn, "history", p->q, &len);
    if (len < (size_t)p->m || len > INT_MAX)
        luaL_error(L, "%s: history has %I tokens, needs at least m = %d", fn, (lua_Integer)len, p->m);
    double *out = lua_newuserdatauv(L, (size_t)p->q * sizeof(double), 0);
    mp_mtd_mixture(t, dl, hist, (int)len, out);
    int64_t sh[1] = {p->q};
    mp_tensor *r = mp_lua_tensor_new(L, 1, sh);
    for (int v = 0; v < p->q; v++) r->data[v] = (float)out[v];
    return 1;
}

static int mtd_seed(lua_State *L) {
    mp_mtd *t = lt_check_task(L, 1, &MTD_TYPE);
    uint64_t seed;
    lt_m_seed_common(L, "MTDTask:seed", &seed);
    mp_mtd_seed(t, seed);
    return 1;
}

static const luaL_Reg mtd_methods[] = {
    {"sample", mtd_sample}, {"pi", mtd_pi}, {"mixture", mtd_mixture}, {"seed", mtd_seed}, {NULL, NULL},
};

/* ==== in-context algebra ==== */

static const char *const text_splits[] = {"train", "val", NULL};

/* The C corpus keeps only the path of its params; the rest is kept here. */
typedef struct {
    mp_text *t;
    int ctx;   /* default window length; 0 when not given */
    double val_fraction;
    int bos;
    uint64_t seed;
} ltext;

static void text_free(void *h) {
    ltext *x = h;
    mp_text_free(x->t);
    free(x);
}

static int text_field(lua_State *L, void *h, const char *k) {
    ltext *x = h;
    size_t n;
    mp_text_bytes(x->t, &n);
    if (!strcmp(k, "vocab")) lua_pushinteger(L, MP_TEXT_VOCAB);
    else if (!strcmp(k, "bos_token")) lua_pushinteger(L, MP_TEXT_BOS);
    else if (!strcmp(k, "path")) lua_pushstring(L, mp_text_path(x->t));
    else if (!strcmp(k, "ctx")) {
        if (x->ctx) lua_pushinteger(L, x->ctx);
        else lua_pushnil(L);
    } else if (!strcmp(k, "n_bytes")) lua_pushinteger(L, (lua_Integer)n);
    else if (!strcmp(k, "train_bytes")) lua_pushinteger(L, (lua_Integer)mp_text_split_len(x->t, MP_TEXT_TRAIN));
    else if (!strcmp(k, "val_bytes")) lua_pushinteger(L, (lua_Integer)mp_text_split_len(x->t, MP_TEXT_VAL));
    else if (!strcmp(k, "params")) {
        lua_createtable(L, 0, 5);
        lt_set_str(L, "path", mp_text_path(x->t));
        if (x->ctx) lt_set_int(L, "ctx", x->ctx);
        lt_set_num(L, "val_fraction", x->val_fraction);
        lt_set_bool(L, "bos", x->bos);
        lt_set_int(L, "seed", (lua_Integer)x->seed);
    } else return 0;
    return 1;
}

static void text_describe(void *h, char *buf, size_t n) {
    ltext *x = h;
    size_t nb;
    mp_text_bytes(x->t, &nb);
    char ctx[32] = "";
    if (x->ctx) snprintf(ctx, sizeof ctx, "ctx=%d, ", x->ctx);
    snprintf(buf, n, "TextTask(path=%s, bytes=%zu (train %zu, val %zu), %sval_fraction=%g, bos=%s, seed=%llu)",
             mp_text_path(x->t), nb, mp_text_split_len(x->t, MP_TEXT_TRAIN), mp_text_split_len(x->t, MP_TEXT_VAL),
             ctx, x->val_fraction, x->bos ? "true" : "false", (unsigned long long)x->seed);
}

static const task_type TEXT_TYPE = {"mechprobe.TextTask", "TextTask", text_free, text_field, text_describe};

/* mp.tasks.text{path=, ctx=, val_fraction=0.1, bos=true, seed=1}, or
 * mp.tasks.text(path [, {ctx=, ...}]) */
static int l_text(lua_State *L) {
    static const char *const known[] = {"path", "ctx", "val_fraction", "bos", "seed", NULL};
    const char *fn = "mp.tasks.text";
    int oi = 1;   /* the options table */
    if (lua_type(L, 1) == LUA_TSTRING) {
        oi = 2;
        lua_settop(L, 2);
        mp_lua_opt_check(L, oi, fn, known + 1);
        lua_pushvalue(L, 1);
    } else {
        mp_lua_opt_check(L, oi, fn, known);
        if (mp_lua_opt_get(L, oi, "path") != LUA_TSTRING)
            luaL_error(L, "%s: path (the text file) must be a string (got %s)", fn, luaL_typename(L, -1));
    }
    mp_text_params p = mp_text_params_default();
    p.path = lua_tostring(L, -1);   /* stays on the stack while used */
    int ctx = lt_opt_int(L, oi, fn, "ctx", 0, 1, INT_MAX);
    p.val_fraction = mp_lua_opt_num(L, oi, fn, "val_fraction", p.val_fraction);
    if (!(p.val_fraction >= 0 && p.val_fraction < 1))
        luaL_error(L, "%s: val_fraction must be in [0, 1) (got %f)", fn, p.val_fraction);
    p.bos = mp_lua_opt_bool(L, oi, fn, "bos", p.bos);
    p.seed = lt_opt_seed(L, oi, fn);
    ltask *u = lt_push_task(L, &TEXT_TYPE);
    ltext *x = calloc(1, sizeof *x);
    if (!x) return luaL_error(L, "%s: out of memory", fn);
    x->ctx = ctx;
    x->val_fraction = p.val_fraction;
    x->bos = p.bos ? 1 : 0;
    x->seed = p.seed;
    if (mp_text_load(&x->t, &p) != MP_OK) {
        free(x);
        return lt_fail(L, fn, NULL);
    }
    u->h = x;
    if (ctx) {  /* fail now, naming the file, when no training window of ctx fits */
        size_t need = (size_t)ctx + (p.bos ? 0 : 1), have = mp_text_split_len(x->t, MP_TEXT_TRAIN);
        if (have < need)
            return luaL_error(L, "%s: %s: the train split has %I bytes, fewer than the %I a window of ctx = %d needs",
                              fn, p.path, (lua_Integer)have, (lua_Integer)need, ctx);
    }
    return 1;
}

/* t:sample(B [, T] [, "train"|"val"]) -> tokens, targets,
 * {starts = {0-based file offset of each window's first byte}, split = ...} */
static int text_sample(lua_State *L) {
    const char *fn = "TextTask:sample";
    ltext *x = lt_check_task(L, 1, &TEXT_TYPE);
    int B = lt_arg_count(L, 2, fn, "B", 1);
    if (lua_type(L, 3) == LUA_TSTRING && lua_isnone(L, 4)) {  /* sample(B, split) */
        lua_pushnil(L);
        lua_insert(L, 3);
    }
    int T = x->ctx;
    if (!lua_isnoneornil(L, 3)) T = lt_arg_count(L, 3, fn, "T", 1);
    else if (!T) luaL_error(L, "%s: T expected (the task was made without ctx, the default window length)", fn);
    int split = luaL_checkoption(L, 4, "train", text_splits);
    lua_settop(L, 1);
    batch bt;
    lt_batch_begin(L, &bt, B, T);
    int64_t *starts = lua_newuserdatauv(L, (size_t)B * sizeof *starts, 0);
    lt_batch_ids(L, &bt, fn);
    mp_status st = mp_text_sample(x->t, (mp_text_split)split, B, T, bt.p[0], bt.p[1], starts);
    lt_batch_end(&bt, st);
    if (st != MP_OK) return lt_fail(L, fn, NULL);
    lua_createtable(L, 0, 2);
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        lua_pushinteger(L, starts[b]);
        lua_rawseti(L, -2, b + 1);
    }
    lua_setfield(L, -2, "starts");
    lt_set_str(L, "split", text_splits[split]);
    lua_remove(L, 4);   /* the starts buffer */
    return 3;
}

static int text_seed(lua_State *L) {
    ltext *x = lt_check_task(L, 1, &TEXT_TYPE);
    uint64_t seed;
    lt_m_seed_common(L, "TextTask:seed", &seed);
    mp_text_seed(x->t, seed);
    return 1;
}

static const luaL_Reg text_methods[] = {{"sample", text_sample}, {"seed", text_seed}, {NULL, NULL}};

/* ==== retrieval ==== */

static const char *const ret_fillers[] = {"random", "repeat", NULL};

static void ret_free(void *h) { mp_retrieval_free(h); }

static void ret_push_params(lua_State *L, const mp_retrieval_params *p) {
    lua_createtable(L, 0, 10);
    lt_set_int(L, "n_keys", p->n_keys);
    lt_set_int(L, "hops", p->hops);
    lt_set_int(L, "key_len", p->key_len);
    lt_set_int(L, "key_symbols", p->key_symbols);
    lt_set_int(L, "value_len", p->value_len);
    lt_set_int(L, "n_filler", p->n_filler);
    lt_set_str(L, "filler", ret_fillers[p->filler]);
    if (p->depth < 0) lt_set_str(L, "depth", "random");
    else lt_set_num(L, "depth", p->depth);
    lt_set_bool(L, "bos", p->bos);
    lt_set_int(L, "n_queries", p->n_queries);
    lt_set_int(L, "seed", (lua_Integer)p->seed);
}

static int ret_field(lua_State *L, void *h, const char *k) {
    const mp_retrieval_params *p = mp_retrieval_get_params(h);
    if (!strcmp(k, "vocab")) lua_pushinteger(L, mp_retrieval_vocab(p));
    else if (!strcmp(k, "min_len")) lua_pushinteger(L, mp_retrieval_min_len(p));
    else if (!strcmp(k, "params")) ret_push_params(L, p);
    else return 0;
    return 1;
}

static void ret_describe(void *h, char *buf, size_t n) {
    const mp_retrieval_params *p = mp_retrieval_get_params(h);
    char depth[32];
    if (p->depth < 0) snprintf(depth, sizeof depth, "random");
    else snprintf(depth, sizeof depth, "%g", p->depth);
    snprintf(buf, n,
             "RetrievalTask(%s, n_keys=%d, hops=%d, key_len=%d, key_symbols=%d, value_len=%d, n_filler=%d, filler=%s, "
             "depth=%s, bos=%s, n_queries=%d, seed=%llu, vocab=%d, min_len=%d)",
             p->hops > 0 ? "variable tracking" : p->n_keys > 1 ? "key-value" : "passkey", p->n_keys, p->hops,
             p->key_len, p->key_symbols, p->value_len, p->n_filler,
             ret_fillers[p->filler], depth, p->bos ? "true" : "false", p->n_queries, (unsigned long long)p->seed,
             mp_retrieval_vocab(p), mp_retrieval_min_len(p));
}

static const task_type RET_TYPE = {"mechprobe.RetrievalTask", "RetrievalTask", ret_free, ret_field, ret_describe};

/* mp.tasks.retrieval{n_keys=1, hops=0, key_len=2, key_symbols=0, value_len=5, n_filler=32, filler="random"|"repeat",
 *   depth="random"|0..1, bos=true, n_queries=1, seed=1} */
static int l_retrieval(lua_State *L) {
    static const char *const known[] = {"n_keys", "hops", "key_len", "key_symbols", "value_len", "n_filler", "filler",
                                        "depth", "bos", "n_queries", "seed", NULL};
    const char *fn = "mp.tasks.retrieval";
    mp_lua_opt_check(L, 1, fn, known);
    mp_retrieval_params p = mp_retrieval_params_default();
    p.n_keys = lt_opt_int(L, 1, fn, "n_keys", p.n_keys, 1, MP_RETRIEVAL_MAX_KEYS);
    p.hops = lt_opt_int(L, 1, fn, "hops", p.hops, 0, MP_RETRIEVAL_MAX_HOPS);
    p.key_len = lt_opt_int(L, 1, fn, "key_len", p.key_len, 1, MP_RETRIEVAL_MAX_DIGITS);
    p.key_symbols = lt_opt_int(L, 1, fn, "key_symbols", p.key_symbols, 0, 65536);
    p.value_len = lt_opt_int(L, 1, fn, "value_len", p.value_len, 1, MP_RETRIEVAL_MAX_DIGITS);
    p.n_filler = lt_opt_int(L, 1, fn, "n_filler", p.n_filler, 1, 65536);
    p.filler = (mp_retrieval_filler)mp_lua_opt_enum(L, 1, fn, "filler", (int)p.filler, ret_fillers);
    int t = mp_lua_opt_get(L, 1, "depth");
    if (t == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "random")) {
        p.depth = -1;
    } else if (t == LUA_TNUMBER) {
        p.depth = lua_tonumber(L, -1);
        if (!(p.depth >= 0 && p.depth <= 1))
            luaL_error(L, "%s: depth must be in [0, 1] or \"random\" (got %f)", fn, p.depth);
    } else if (t != LUA_TNIL) {
        luaL_error(L, "%s: depth must be a number in [0, 1] or \"random\" (got %s)", fn, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    p.bos = mp_lua_opt_bool(L, 1, fn, "bos", p.bos);
    p.n_queries = lt_opt_int(L, 1, fn, "n_queries", p.n_queries, 1, MP_RETRIEVAL_MAX_QUERIES);
    p.seed = lt_opt_seed(L, 1, fn);
    ltask *u = lt_push_task(L, &RET_TYPE);
    mp_retrieval *r = NULL;
    if (mp_retrieval_new(&r, &p) != MP_OK) return lt_fail(L, fn, "retrieval");
    u->h = r;
    return 1;
}

static void push_digits(lua_State *L, const int32_t *d, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, d[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* t:sample(B, T) -> tokens, targets, truth: per-sample lists answer_pos, needle_pos,
 * value_pos (1-based positions), depth, value (digit lists), key (key-value mode). */
static int ret_sample(lua_State *L) {
    const char *fn = "RetrievalTask:sample";
    mp_retrieval *r = lt_check_task(L, 1, &RET_TYPE);
    const mp_retrieval_params *p = mp_retrieval_get_params(r);
    int B = lt_arg_count(L, 2, fn, "B", 1), T = lt_arg_count(L, 3, fn, "T", 1);
    int min_len = mp_retrieval_min_len(p);
    if (T < min_len)
        luaL_error(L, "%s: T = %d is shorter than the %d tokens of BOS, needles and query (t.min_len)", fn, T,
                   min_len);
    lua_settop(L, 1);
    batch bt;
    lt_batch_begin(L, &bt, B, T);
    mp_retrieval_truth *tr = lua_newuserdatauv(L, (size_t)B * sizeof *tr, 0);
    lt_batch_ids(L, &bt, fn);
    mp_status st = mp_retrieval_sample(r, B, T, bt.p[0], bt.p[1], tr);
    lt_batch_end(&bt, st);
    if (st != MP_OK) return lt_fail(L, fn, "retrieval");
    static const char *const pos_names[] = {"answer_pos", "needle_pos", "value_pos"};
    lua_createtable(L, 0, 6);
    for (int k = 0; k < 3; k++) {
        lua_createtable(L, B, 0);
        for (int b = 0; b < B; b++) {
            int v = k == 0 ? tr[b].answer_pos : k == 1 ? tr[b].needle_pos : tr[b].value_pos;
            lua_pushinteger(L, v + 1);
            lua_rawseti(L, -2, b + 1);
        }
        lua_setfield(L, -2, pos_names[k]);
    }
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        lua_pushnumber(L, tr[b].depth);
        lua_rawseti(L, -2, b + 1);
    }
    lua_setfield(L, -2, "depth");
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        push_digits(L, tr[b].value, p->value_len);
        lua_rawseti(L, -2, b + 1);
    }
    lua_setfield(L, -2, "value");
    if (p->n_keys > 1 || p->hops > 0) {
        lua_createtable(L, B, 0);
        for (int b = 0; b < B; b++) {
            push_digits(L, tr[b].key, p->key_len);
            lua_rawseti(L, -2, b + 1);
        }
        lua_setfield(L, -2, "key");
    }
    lua_remove(L, 4);
    return 3;
}

static int ret_seed(lua_State *L) {
    mp_retrieval *r = lt_check_task(L, 1, &RET_TYPE);
    uint64_t seed;
    lt_m_seed_common(L, "RetrievalTask:seed", &seed);
    mp_retrieval_seed(r, seed);
    return 1;
}

/* t:token_name(id) -> "7", "<bos>", "the", "f12", "k3" */
static int ret_token_name(lua_State *L) {
    mp_retrieval *r = lt_check_task(L, 1, &RET_TYPE);
    const mp_retrieval_params *p = mp_retrieval_get_params(r);
    int id = (int)mp_lua_arg_int(L, 2, "RetrievalTask:token_name", "id", 0, mp_retrieval_vocab(p) - 1);
    char buf[32];
    lua_pushstring(L, mp_retrieval_token_name(p, id, buf));
    return 1;
}

static const luaL_Reg ret_methods[] = {
    {"sample", ret_sample}, {"seed", ret_seed}, {"token_name", ret_token_name}, {NULL, NULL},
};

/* ==== registration ==== */

void mp_lua_open_tasks(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"mtd", l_mtd},
        {"algebra", mp_lt_l_algebra},
        {"algebra_solve", mp_lt_l_algebra_solve},
        {"algebra_rules", mp_lt_l_algebra_rules},
        {"text", l_text},
        {"retrieval", l_retrieval},
        {NULL, NULL},
    };
    lt_register_type(L, &MTD_TYPE, mtd_methods);
    lt_register_type(L, &MP_LT_ALGEBRA_TYPE, mp_lt_algebra_methods);
    lt_register_type(L, &TEXT_TYPE, text_methods);
    lt_register_type(L, &RET_TYPE, ret_methods);
    lua_newtable(L);
    luaL_setfuncs(L, fns, 0);
    lua_setfield(L, -2, "tasks");
}
