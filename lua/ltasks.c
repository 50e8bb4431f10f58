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
 * option, e.g. "mp.tasks.mtd: q must be >= 2 (got 1)". */
#include "mp_lua.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algebra.h"
#include "mtd.h"
#include "retrieval.h"
#include "textcorpus.h"

/* ---- task types: one userdata layout, one metatable each ---- */

typedef struct task_type task_type;
struct task_type {
    const char *mt;                               /* metatable name */
    const char *name;                             /* "MTDTask" (in messages) */
    void (*free_fn)(void *h);
    int (*field)(lua_State *L, void *h, const char *key);   /* pushes a field: 1, or 0 */
    void (*describe)(void *h, char *buf, size_t n);         /* __tostring text */
};

typedef struct {
    void *h;   /* the C task; NULL once closed */
} ltask;

static void *check_task(lua_State *L, int idx, const task_type *tt) {
    ltask *u = luaL_checkudata(L, idx, tt->mt);
    if (!u->h) luaL_error(L, "%s is closed", tt->name);
    return u->h;
}

/* Pushes a new task userdata with h = NULL (the constructor fills it, so a
 * failed init leaves nothing to free). */
static ltask *push_task(lua_State *L, const task_type *tt) {
    ltask *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->h = NULL;
    luaL_setmetatable(L, tt->mt);
    return u;
}

static const task_type *upvalue_type(lua_State *L) {
    return lua_touserdata(L, lua_upvalueindex(1));
}

static int t_close(lua_State *L) {
    const task_type *tt = upvalue_type(L);
    ltask *u = luaL_checkudata(L, 1, tt->mt);
    if (u->h) tt->free_fn(u->h);
    u->h = NULL;
    return 0;
}

static int t_tostring(lua_State *L) {
    const task_type *tt = upvalue_type(L);
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
static int t_index(lua_State *L) {
    const task_type *tt = upvalue_type(L);
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(2));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (lua_type(L, 2) != LUA_TSTRING) return 0;
    void *h = check_task(L, 1, tt);
    return tt->field(L, h, lua_tostring(L, 2)) ? 1 : 0;
}

/* The type's metatable: __gc/__close (idempotent close), __tostring, and an
 * __index holding the methods plus close. Every closure gets tt as upvalue 1. */
static void register_type(lua_State *L, const task_type *tt, const luaL_Reg *methods) {
    static const char *const metas[] = {"__gc", "__close", "__tostring"};
    luaL_newmetatable(L, tt->mt);
    for (int i = 0; i < 3; i++) {
        lua_pushlightuserdata(L, (void *)tt);
        lua_pushcclosure(L, i < 2 ? t_close : t_tostring, 1);
        lua_setfield(L, -2, metas[i]);
    }
    lua_pushlightuserdata(L, (void *)tt);
    lua_newtable(L);
    lua_pushlightuserdata(L, (void *)tt);
    luaL_setfuncs(L, methods, 1);
    lua_pushlightuserdata(L, (void *)tt);
    lua_pushcclosure(L, t_close, 1);
    lua_setfield(L, -2, "close");
    lua_pushcclosure(L, t_index, 2);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

/* Raises "<where>: <message>", dropping the C layer's own "<cprefix>: ". */
static int fail(lua_State *L, const char *where, const char *cprefix) {
    const char *msg = mp_last_error();
    size_t n = cprefix ? strlen(cprefix) : 0;
    if (n && strncmp(msg, cprefix, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
    return luaL_error(L, "%s: %s", where, msg);
}

/* ---- options tables ---- */

/* Rejects a non-table (nil is an empty table) and unknown keys. */
static void opts_check(lua_State *L, int idx, const char *fn, const char *const *known) {
    if (lua_isnoneornil(L, idx)) return;
    if (!lua_istable(L, idx)) luaL_error(L, "%s: options must be a table (got %s)", fn, luaL_typename(L, idx));
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: option names must be strings (got %s)", fn, luaL_typename(L, -1));
        const char *k = lua_tostring(L, -1);
        int ok = 0;
        for (const char *const *p = known; *p && !ok; p++) ok = strcmp(*p, k) == 0;
        if (!ok) {
            luaL_Buffer b;
            luaL_buffinit(L, &b);
            for (const char *const *p = known; *p; p++) {
                if (p != known) luaL_addstring(&b, ", ");
                luaL_addstring(&b, *p);
            }
            luaL_pushresult(&b);
            luaL_error(L, "%s: unknown option '%s' (options: %s)", fn, k, lua_tostring(L, -1));
        }
    }
}

/* Pushes opts[key] (nil when opts is absent); returns its type. */
static int opt_get(lua_State *L, int idx, const char *key) {
    if (lua_isnoneornil(L, idx)) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    return lua_getfield(L, idx, key);
}

/* The integer at the stack top (popped), checked against lo..hi; `what` names it. */
static lua_Integer int_value(lua_State *L, const char *fn, const char *what, lua_Integer lo, lua_Integer hi) {
    int ok = 0;
    lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok) : 0;
    if (!ok) {
        const char *s = lua_type(L, -1) == LUA_TNUMBER ? luaL_tolstring(L, -1, NULL) : luaL_typename(L, -1);
        luaL_error(L, "%s: %s must be an integer (got %s)", fn, what, s);
    }
    if (v < lo) luaL_error(L, "%s: %s must be >= %I (got %I)", fn, what, lo, v);
    if (v > hi) luaL_error(L, "%s: %s must be <= %I (got %I)", fn, what, hi, v);
    lua_pop(L, 1);
    return v;
}

static int opt_int(lua_State *L, int idx, const char *fn, const char *key, int def, int lo, int hi) {
    if (opt_get(L, idx, key) == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    return (int)int_value(L, fn, key, lo, hi);
}

static double opt_num(lua_State *L, int idx, const char *fn, const char *key, double def) {
    if (opt_get(L, idx, key) == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "%s: %s must be a number (got %s)", fn, key, luaL_typename(L, -1));
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

/* A boolean (0 and 1 also accepted). */
static int opt_bool(lua_State *L, int idx, const char *fn, const char *key, int def) {
    int t = opt_get(L, idx, key), v = def;
    if (t == LUA_TBOOLEAN) {
        v = lua_toboolean(L, -1);
    } else if (t == LUA_TNUMBER && lua_isinteger(L, -1) && (lua_tointeger(L, -1) == 0 || lua_tointeger(L, -1) == 1)) {
        v = (int)lua_tointeger(L, -1);
    } else if (t != LUA_TNIL) {
        luaL_error(L, "%s: %s must be a boolean (got %s)", fn, key, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    return v;
}

/* One of names[] (index returned); def when absent. */
static int opt_enum(lua_State *L, int idx, const char *fn, const char *key, int def, const char *const *names) {
    int t = opt_get(L, idx, key);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    const char *s = t == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0) {
            lua_pop(L, 1);
            return i;
        }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; names[i]; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addchar(&b, '"');
        luaL_addstring(&b, names[i]);
        luaL_addchar(&b, '"');
    }
    luaL_pushresult(&b);
    const char *list = lua_tostring(L, -1);
    const char *got = s ? lua_pushfstring(L, "\"%s\"", s) : luaL_typename(L, -2);
    luaL_error(L, "%s: %s must be one of %s (got %s)", fn, key, list, got);
    return def;
}

static uint64_t opt_seed(lua_State *L, int idx, const char *fn) {
    if (opt_get(L, idx, "seed") == LUA_TNIL) {
        lua_pop(L, 1);
        return 1;
    }
    return (uint64_t)int_value(L, fn, "seed", 0, LUA_MAXINTEGER);
}

/* A positional count argument (B, T) >= lo. */
static int arg_count(lua_State *L, int arg, const char *fn, const char *what, int lo) {
    if (lua_isnoneornil(L, arg)) luaL_error(L, "%s: %s expected (an integer >= %d)", fn, what, lo);
    lua_pushvalue(L, arg);
    return (int)int_value(L, fn, what, lo, INT_MAX);
}

static int m_seed_common(lua_State *L, const char *fn, uint64_t *seed) {
    lua_pushvalue(L, 2);
    if (lua_isnil(L, -1)) luaL_error(L, "%s: seed expected (an integer >= 0)", fn);
    *seed = (uint64_t)int_value(L, fn, "seed", 0, LUA_MAXINTEGER);
    lua_settop(L, 1);
    return 1;
}

/* ---- batches shared by the samplers ---- */

/* The two output Tensors [B,T] and the buffers the C samplers fill: int32
 * tokens and targets, and up to two more. The buffers are malloc'd after every
 * Lua object of the call is made and freed before any Lua error. */
typedef struct {
    mp_tensor *tok, *tgt;
    void *p[4];
} batch;

static void batch_free(batch *bt) {
    for (int i = 0; i < 4; i++) {
        free(bt->p[i]);
        bt->p[i] = NULL;
    }
}

/* n * size bytes into slot i; on failure frees the batch and raises. */
static void *batch_alloc(lua_State *L, batch *bt, int i, size_t n, size_t size, const char *fn) {
    size_t bytes;
    if (mp_mul_size(n ? n : 1, size, &bytes) == 0) bt->p[i] = malloc(bytes);
    if (!bt->p[i]) {
        batch_free(bt);
        luaL_error(L, "%s: out of memory for a batch of %I values", fn, (lua_Integer)n);
    }
    return bt->p[i];
}

/* Pushes the tokens and targets Tensors [B,T]. */
static void batch_begin(lua_State *L, batch *bt, int B, int T) {
    int64_t sh[2] = {B, T};
    memset(bt, 0, sizeof *bt);
    bt->tok = mp_lua_tensor_new(L, 2, sh);
    bt->tgt = mp_lua_tensor_new(L, 2, sh);
}

/* The int32 buffers of tokens and targets (slots 0, 1). */
static void batch_ids(lua_State *L, batch *bt, const char *fn) {
    batch_alloc(L, bt, 0, bt->tok->numel, sizeof(int32_t), fn);
    batch_alloc(L, bt, 1, bt->tok->numel, sizeof(int32_t), fn);
}

/* Copies the ids into the Tensors when the sampler succeeded; frees the buffers. */
static void batch_end(batch *bt, mp_status st) {
    if (st == MP_OK)
        for (size_t i = 0; i < bt->tok->numel; i++) {
            bt->tok->data[i] = (float)((int32_t *)bt->p[0])[i];
            bt->tgt->data[i] = (float)((int32_t *)bt->p[1])[i];
        }
    batch_free(bt);
}

/* Token ids of a Tensor / table argument into int32 (each an integer in 0..hi-1). */
static int32_t *arg_ids(lua_State *L, int arg, const char *fn, const char *what, int hi, size_t *n) {
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

static void set_int(lua_State *L, const char *k, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}
static void set_num(lua_State *L, const char *k, lua_Number v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}
static void set_str(lua_State *L, const char *k, const char *v) {
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}
static void set_bool(lua_State *L, const char *k, int v) {
    lua_pushboolean(L, v);
    lua_setfield(L, -2, k);
}

/* ==== MTD ==== */

static const char *const mtd_targets[] = {"all", "last", NULL};

static void mtd_free(void *h) { mp_mtd_free(h); }

static void mtd_push_params(lua_State *L, const mp_mtd_params *p) {
    lua_createtable(L, 0, 5);
    set_int(L, "q", p->q);
    set_int(L, "m", p->m);
    set_num(L, "concentration", p->c);
    set_str(L, "targets", mtd_targets[p->target]);
    set_int(L, "seed", (lua_Integer)p->seed);
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
    opts_check(L, 1, fn, known);
    mp_mtd_params p = mp_mtd_params_default();
    p.q = opt_int(L, 1, fn, "q", p.q, 2, INT_MAX);
    p.m = opt_int(L, 1, fn, "m", p.m, 1, INT_MAX);
    p.c = opt_num(L, 1, fn, "concentration", p.c);
    if (!(p.c > 0) || !isfinite(p.c)) luaL_error(L, "%s: concentration must be finite and > 0 (got %f)", fn, p.c);
    p.target = (mp_mtd_target)opt_enum(L, 1, fn, "targets", (int)p.target, mtd_targets);
    p.seed = opt_seed(L, 1, fn);
    ltask *u = push_task(L, &MTD_TYPE);
    mp_mtd *t = NULL;
    if (mp_mtd_init(&t, &p) != MP_OK) return fail(L, fn, "mtd");
    u->h = t;
    return 1;
}

/* t:sample(B, T [, {truth = false}]) -> tokens, targets, {lambda = [B,m], next = [B,T,q]} */
static int mtd_sample(lua_State *L) {
    const char *fn = "MTDTask:sample";
    mp_mtd *t = check_task(L, 1, &MTD_TYPE);
    int B = arg_count(L, 2, fn, "B", 1), T = arg_count(L, 3, fn, "T", 1);
    static const char *const known[] = {"truth", NULL};
    opts_check(L, 4, fn, known);
    int want = opt_bool(L, 4, fn, "truth", 1);
    const mp_mtd_params *p = mp_mtd_get_params(t);
    if (T < p->m) luaL_error(L, "%s: T = %d is shorter than m = %d lags", fn, T, p->m);
    lua_settop(L, 3);
    batch bt;
    batch_begin(L, &bt, B, T);
    int64_t sh[3] = {B, T, p->q}, shl[2] = {B, p->m};
    mp_tensor *lam = want ? mp_lua_tensor_new(L, 2, shl) : NULL;
    mp_tensor *nxt = want ? mp_lua_tensor_new(L, 3, sh) : NULL;
    batch_ids(L, &bt, fn);
    double *dl = want ? batch_alloc(L, &bt, 2, lam->numel, sizeof(double), fn) : NULL;
    double *dn = want ? batch_alloc(L, &bt, 3, nxt->numel, sizeof(double), fn) : NULL;
    mp_status st = mp_mtd_sample(t, B, T, bt.p[0], bt.p[1], dl, dn);
    if (st == MP_OK && want) {
        for (size_t i = 0; i < lam->numel; i++) lam->data[i] = (float)dl[i];
        for (size_t i = 0; i < nxt->numel; i++) nxt->data[i] = (float)dn[i];
    }
    batch_end(&bt, st);
    if (st != MP_OK) return fail(L, fn, "mtd");
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
    mp_mtd *t = check_task(L, 1, &MTD_TYPE);
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
    mp_mtd *t = check_task(L, 1, &MTD_TYPE);
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
    int32_t *hist = arg_ids(L, 3, fn, "history", p->q, &len);
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
    mp_mtd *t = check_task(L, 1, &MTD_TYPE);
    uint64_t seed;
    m_seed_common(L, "MTDTask:seed", &seed);
    mp_mtd_seed(t, seed);
    return 1;
}

static const luaL_Reg mtd_methods[] = {
    {"sample", mtd_sample}, {"pi", mtd_pi}, {"mixture", mtd_mixture}, {"seed", mtd_seed}, {NULL, NULL},
};

/* ==== in-context algebra ==== */

static const char *const alg_holdouts[] = {"none", "pair", "commuted", NULL};
static const char *const alg_targets[] = {"all", "answers", "last", NULL};

static void alg_free(void *h) { mp_algebra_free(h); }

/* "copy|identity" (or "none") into buf. */
static void rules_str(uint32_t mask, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        if (mask & MP_ALGEBRA_BIT(r))
            len += (size_t)snprintf(buf + len, n > len ? n - len : 0, "%s%s", len ? "|" : "",
                                    mp_algebra_rule_name((mp_algebra_rule)r));
    if (!len) snprintf(buf, n, "none");
}

static void push_rule_list(lua_State *L, uint32_t mask) {
    lua_newtable(L);
    int i = 0;
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        if (mask & MP_ALGEBRA_BIT(r)) {
            lua_pushstring(L, mp_algebra_rule_name((mp_algebra_rule)r));
            lua_rawseti(L, -2, ++i);
        }
}

static void alg_push_params(lua_State *L, const mp_algebra_params *p) {
    char b[16];
    lua_createtable(L, 0, 10);
    set_int(L, "k", p->n_facts);
    set_num(L, "mix", p->mix);
    set_int(L, "max_order", p->max_order);
    set_bool(L, "test_groups", p->test_groups);
    if (p->n_fixed > 0) {
        lua_createtable(L, p->n_fixed, 0);
        for (int i = 0; i < p->n_fixed; i++) {
            lua_pushstring(L, mp_algebra_group_name(p->fixed[i], b));
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "groups");
    }
    set_str(L, "hold_out", alg_holdouts[p->holdout]);
    set_str(L, "targets", alg_targets[p->target]);
    push_rule_list(L, p->require);
    lua_setfield(L, -2, "require");
    push_rule_list(L, p->exclude);
    lua_setfield(L, -2, "exclude");
    set_int(L, "max_attempts", p->max_attempts);
    set_int(L, "seed", (lua_Integer)p->seed);
}

static int alg_field(lua_State *L, void *h, const char *k) {
    const mp_algebra_params *p = mp_algebra_get_params(h);
    if (!strcmp(k, "vocab")) lua_pushinteger(L, MP_ALGEBRA_VOCAB);
    else if (!strcmp(k, "seq_len")) lua_pushinteger(L, mp_algebra_seq_len(p));
    else if (!strcmp(k, "k")) lua_pushinteger(L, p->n_facts);
    else if (!strcmp(k, "params")) alg_push_params(L, p);
    else return 0;
    return 1;
}

static void alg_describe(void *h, char *buf, size_t n) {
    const mp_algebra_params *p = mp_algebra_get_params(h);
    char groups[96], req[64], exc[64], b[16];
    if (p->n_fixed > 0) {
        size_t len = 0;
        groups[0] = 0;
        for (int i = 0; i < p->n_fixed; i++)
            len += (size_t)snprintf(groups + len, sizeof groups > len ? sizeof groups - len : 0, "%s%s",
                                    i ? "," : "", mp_algebra_group_name(p->fixed[i], b));
    } else {
        snprintf(groups, sizeof groups, "%s", p->test_groups ? "test" : "training");
    }
    rules_str(p->require, req, sizeof req);
    rules_str(p->exclude, exc, sizeof exc);
    snprintf(buf, n,
             "AlgebraTask(k=%d, seq_len=%d, groups=%s, mix=%g, max_order=%d, hold_out=%s, targets=%s, "
             "require=%s, exclude=%s, seed=%llu)",
             p->n_facts, mp_algebra_seq_len(p), groups, p->mix, p->max_order, alg_holdouts[p->holdout],
             alg_targets[p->target], req, exc, (unsigned long long)p->seed);
}

static const task_type ALG_TYPE = {"mechprobe.AlgebraTask", "AlgebraTask", alg_free, alg_field, alg_describe};

/* A group name: "C5", "D4", "Q8", "C2xC4", "C2xC2xC2"; order 0 when unknown. */
static mp_algebra_group parse_group(const char *s) {
    mp_algebra_group g = {MP_ALGEBRA_CYCLIC, 0};
    if (!strcasecmp(s, "Q8")) g.family = MP_ALGEBRA_Q8;
    else if (!strcasecmp(s, "C2xC4")) g.family = MP_ALGEBRA_C2XC4;
    else if (!strcasecmp(s, "C2xC2xC2")) g.family = MP_ALGEBRA_C2XC2XC2;
    else if ((s[0] == 'C' || s[0] == 'c' || s[0] == 'D' || s[0] == 'd') && s[1] >= '1' && s[1] <= '9') {
        char *end;
        long n = strtol(s + 1, &end, 10);
        if (*end || n > 16) return (mp_algebra_group){MP_ALGEBRA_CYCLIC, 0};
        g.family = (s[0] == 'C' || s[0] == 'c') ? MP_ALGEBRA_CYCLIC : MP_ALGEBRA_DIHEDRAL;
        g.n = (int)n;
    } else {
        return g;
    }
    if (mp_algebra_group_order(g) == 0) g.n = 0, g.family = MP_ALGEBRA_CYCLIC;
    return g;
}

/* A rule set: one name, names separated by ',' or '|', or a list of names. */
static uint32_t opt_rules(lua_State *L, int idx, const char *fn, const char *key) {
    uint32_t mask = 0;
    int t = opt_get(L, idx, key);
    int top = lua_gettop(L);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        luaL_error(L, "%s: %s must be a rule name or a list of them (got %s)", fn, key, luaL_typename(L, -1));
    lua_Integer n = t == LUA_TTABLE ? (lua_Integer)lua_rawlen(L, top) : 1;
    for (lua_Integer i = 1; i <= n; i++) {
        if (t == LUA_TTABLE) {
            if (lua_rawgeti(L, top, i) != LUA_TSTRING)
                luaL_error(L, "%s: %s[%I] must be a rule name (got %s)", fn, key, i, luaL_typename(L, -1));
        } else {
            lua_pushvalue(L, top);
        }
        char buf[128];
        snprintf(buf, sizeof buf, "%s", lua_tostring(L, -1));
        for (char *save = NULL, *tok = strtok_r(buf, ",| ", &save); tok; tok = strtok_r(NULL, ",| ", &save)) {
            int r = mp_algebra_rule_parse(tok);
            if (r < 0)
                luaL_error(L, "%s: %s: unknown rule '%s' (rules: copy, commute, identity, cancel, associate)", fn,
                           key, tok);
            mask |= MP_ALGEBRA_BIT(r);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, top - 1);
    return mask;
}

/* mp.tasks.algebra{k=200, mix=0.7, max_order=10, test_groups=false, groups={"C5",...},
 *   hold_out="commuted", targets="all", require=..., exclude=..., max_attempts=10000, seed=1} */
static int l_algebra(lua_State *L) {
    static const char *const known[] = {"k", "mix", "max_order", "test_groups", "groups", "hold_out", "targets",
                                        "require", "exclude", "max_attempts", "seed", NULL};
    const char *fn = "mp.tasks.algebra";
    opts_check(L, 1, fn, known);
    mp_algebra_params p = mp_algebra_params_default();
    p.n_facts = opt_int(L, 1, fn, "k", p.n_facts, 0, 100000);
    p.mix = opt_num(L, 1, fn, "mix", p.mix);
    if (!(p.mix >= 0 && p.mix <= 1)) luaL_error(L, "%s: mix must be a probability in [0, 1] (got %f)", fn, p.mix);
    p.max_order = opt_int(L, 1, fn, "max_order", p.max_order, 3, MP_ALGEBRA_N_SYMBOLS);
    p.test_groups = opt_bool(L, 1, fn, "test_groups", p.test_groups);
    int t = opt_get(L, 1, "groups");
    if (t != LUA_TNIL) {
        int gi = lua_gettop(L), total = 0;
        if (t == LUA_TSTRING) {  /* one name */
            lua_createtable(L, 1, 0);
            lua_pushvalue(L, gi);
            lua_rawseti(L, -2, 1);
            lua_replace(L, gi);
        } else if (t != LUA_TTABLE) {
            luaL_error(L, "%s: groups must be a list of group names such as {\"C5\", \"D3\"} (got %s)", fn,
                       luaL_typename(L, gi));
        }
        lua_Integer n = (lua_Integer)lua_rawlen(L, gi);
        if (n < 1 || n > MP_ALGEBRA_MAX_GROUPS)
            luaL_error(L, "%s: groups must list 1..%d groups (got %I)", fn, MP_ALGEBRA_MAX_GROUPS, n);
        for (lua_Integer i = 1; i <= n; i++) {
            const char *s = lua_rawgeti(L, gi, i) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            mp_algebra_group g = s ? parse_group(s) : (mp_algebra_group){MP_ALGEBRA_CYCLIC, 0};
            int o = mp_algebra_group_order(g);
            if (o < 2)
                luaL_error(L, "%s: groups[%I] = %s is not a supported group (C1..C16, D1..D8, Q8, C2xC4, C2xC2xC2)",
                           fn, i, s ? s : luaL_typename(L, -1));
            total += o;
            p.fixed[i - 1] = g;
            lua_pop(L, 1);
        }
        if (total > MP_ALGEBRA_N_SYMBOLS)
            luaL_error(L, "%s: groups have %d elements in all, more than the %d symbols", fn, total,
                       MP_ALGEBRA_N_SYMBOLS);
        p.n_fixed = (int)n;
    }
    lua_pop(L, 1);
    p.holdout = (mp_algebra_holdout)opt_enum(L, 1, fn, "hold_out", (int)p.holdout, alg_holdouts);
    p.target = (mp_algebra_target)opt_enum(L, 1, fn, "targets", (int)p.target, alg_targets);
    p.require = opt_rules(L, 1, fn, "require");
    p.exclude = opt_rules(L, 1, fn, "exclude");
    p.max_attempts = opt_int(L, 1, fn, "max_attempts", p.max_attempts, 1, INT_MAX);
    p.seed = opt_seed(L, 1, fn);
    const uint32_t copy = MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY), commute = MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COMMUTE);
    if ((p.require & copy) && p.holdout != MP_ALGEBRA_HOLDOUT_NONE)
        luaL_error(L, "%s: require=copy needs hold_out=\"none\" (a held-out query pair is never in the context)", fn);
    if ((p.require & commute) && p.holdout == MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED)
        luaL_error(L, "%s: require=commute needs hold_out=\"none\" or \"pair\" (\"commuted\" holds \"b a\" out)", fn);
    ltask *u = push_task(L, &ALG_TYPE);
    mp_algebra *a = NULL;
    if (mp_algebra_init(&a, &p) != MP_OK) return fail(L, fn, "algebra");
    u->h = a;
    return 1;
}

static void push_rules_table(lua_State *L, uint32_t mask) {
    lua_createtable(L, 0, MP_ALGEBRA_N_RULES);
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        set_bool(L, mp_algebra_rule_name((mp_algebra_rule)r), (mask & MP_ALGEBRA_BIT(r)) != 0);
}

/* The truth table of one sample (layout in the README / test_tasks.lua). */
static void alg_push_truth(lua_State *L, const mp_algebra_truth *tr) {
    char b[16];
    lua_createtable(L, 0, 7);
    lua_createtable(L, tr->n_groups, 0);
    for (int g = 0; g < tr->n_groups; g++) {
        lua_pushstring(L, mp_algebra_group_name(tr->groups[g], b));
        lua_rawseti(L, -2, g + 1);
    }
    lua_setfield(L, -2, "groups");
    lua_createtable(L, tr->n_groups, 0);   /* assignment[g][e+1] = symbol of element e */
    for (int g = 0; g < tr->n_groups; g++) {
        int o = mp_algebra_group_order(tr->groups[g]);
        lua_createtable(L, o, 0);
        for (int e = 0; e < o; e++) {
            lua_pushinteger(L, tr->symbol[g][e]);
            lua_rawseti(L, -2, e + 1);
        }
        lua_rawseti(L, -2, g + 1);
    }
    lua_setfield(L, -2, "assignment");
    lua_createtable(L, 0, MP_ALGEBRA_N_SYMBOLS);   /* symbols[s] = {group = g, element = e} */
    for (int s = 0; s < MP_ALGEBRA_N_SYMBOLS; s++) {
        if (tr->sym_group[s] < 0) continue;
        lua_createtable(L, 0, 2);
        set_int(L, "group", tr->sym_group[s] + 1);
        set_int(L, "element", tr->sym_elem[s]);
        lua_rawseti(L, -2, s);
    }
    lua_setfield(L, -2, "symbols");
    lua_createtable(L, 0, 4);
    set_int(L, "a", tr->query_a);
    set_int(L, "b", tr->query_b);
    set_int(L, "answer", tr->answer);
    set_int(L, "group", tr->query_group + 1);
    lua_setfield(L, -2, "query");
    push_rules_table(L, tr->rules);
    lua_setfield(L, -2, "rules");
    lua_createtable(L, 0, MP_ALGEBRA_N_RULES);
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++) set_int(L, mp_algebra_rule_name((mp_algebra_rule)r), tr->solved[r]);
    lua_setfield(L, -2, "solved");
    set_int(L, "attempts", tr->attempts);
}

/* t:sample(B [, T]) -> tokens, targets, truth (a list of B per-sample tables) */
static int alg_sample(lua_State *L) {
    const char *fn = "AlgebraTask:sample";
    mp_algebra *a = check_task(L, 1, &ALG_TYPE);
    const mp_algebra_params *p = mp_algebra_get_params(a);
    int L0 = mp_algebra_seq_len(p);
    int B = arg_count(L, 2, fn, "B", 1);
    int T = lua_isnoneornil(L, 3) ? L0 : arg_count(L, 3, fn, "T", 1);
    if (T != L0) luaL_error(L, "%s: T = %d but k = %d facts make sequences of T = 5*(k+1) = %d", fn, T, p->n_facts, L0);
    lua_settop(L, 1);
    batch bt;
    batch_begin(L, &bt, B, T);
    mp_algebra_truth *tr = lua_newuserdatauv(L, (size_t)B * sizeof *tr, 0);
    batch_ids(L, &bt, fn);
    mp_status st = mp_algebra_sample(a, B, T, bt.p[0], bt.p[1], tr);
    batch_end(&bt, st);
    if (st != MP_OK) return fail(L, fn, "algebra");
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        alg_push_truth(L, &tr[b]);
        lua_rawseti(L, -2, b + 1);
    }
    lua_remove(L, 4);   /* the truth buffer */
    return 3;
}

static int alg_seed(lua_State *L) {
    mp_algebra *a = check_task(L, 1, &ALG_TYPE);
    uint64_t seed;
    m_seed_common(L, "AlgebraTask:seed", &seed);
    mp_algebra_seed(a, seed);
    return 1;
}

static const luaL_Reg alg_methods[] = {{"sample", alg_sample}, {"seed", alg_seed}, {NULL, NULL}};

/* The context of a token row at arg (facts before the query) for the helpers. */
static void row_context(lua_State *L, int arg, int nf_arg, const char *fn, mp_algebra_context *ctx) {
    size_t len;
    int32_t *row = arg_ids(L, arg, fn, "tokens", MP_ALGEBRA_VOCAB, &len);
    lua_Integer nf = len >= 1 ? (lua_Integer)((len - 1) / 5) : 0;
    if (!lua_isnoneornil(L, nf_arg)) {
        lua_pushvalue(L, nf_arg);
        nf = int_value(L, fn, "n_facts", 0, nf);
    }
    if (len == 0) luaL_error(L, "%s: tokens is empty", fn);
    if (mp_algebra_context_from_tokens(ctx, row, (int)nf) != MP_OK) fail(L, fn, "algebra");
}

static int arg_symbol(lua_State *L, int arg, const char *fn, const char *what) {
    lua_pushvalue(L, arg);
    return (int)int_value(L, fn, what, 0, MP_ALGEBRA_N_SYMBOLS - 1);
}

/* mp.tasks.algebra_solve(rule, tokens_row, a, b [, n_facts]) -> symbol, or -1 when
 * the rule does not apply. The context is the first n_facts facts of the row
 * (default: every complete fact, i.e. k for a sampled row of T = 5(k+1)). */
static int l_algebra_solve(lua_State *L) {
    const char *fn = "mp.tasks.algebra_solve";
    lua_settop(L, 5);
    const char *name = luaL_checkstring(L, 1);
    int rule = mp_algebra_rule_parse(name);
    if (rule < 0) luaL_error(L, "%s: unknown rule '%s' (rules: copy, commute, identity, cancel, associate)", fn, name);
    int a = arg_symbol(L, 3, fn, "a"), b = arg_symbol(L, 4, fn, "b");
    mp_algebra_context ctx;
    row_context(L, 2, 5, fn, &ctx);
    lua_pushinteger(L, mp_algebra_solve((mp_algebra_rule)rule, &ctx, a, b));
    return 1;
}

/* mp.tasks.algebra_rules(tokens_row, a, b, answer [, n_facts]) -> {copy = bool, ...} */
static int l_algebra_rules(lua_State *L) {
    const char *fn = "mp.tasks.algebra_rules";
    lua_settop(L, 5);
    int a = arg_symbol(L, 2, fn, "a"), b = arg_symbol(L, 3, fn, "b"), c = arg_symbol(L, 4, fn, "answer");
    mp_algebra_context ctx;
    row_context(L, 1, 5, fn, &ctx);
    push_rules_table(L, mp_algebra_rules(&ctx, a, b, c));
    return 1;
}

/* ==== text corpus ==== */

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
        set_str(L, "path", mp_text_path(x->t));
        if (x->ctx) set_int(L, "ctx", x->ctx);
        set_num(L, "val_fraction", x->val_fraction);
        set_bool(L, "bos", x->bos);
        set_int(L, "seed", (lua_Integer)x->seed);
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
        opts_check(L, oi, fn, known + 1);
        lua_pushvalue(L, 1);
    } else {
        opts_check(L, oi, fn, known);
        if (opt_get(L, oi, "path") != LUA_TSTRING)
            luaL_error(L, "%s: path (the text file) must be a string (got %s)", fn, luaL_typename(L, -1));
    }
    mp_text_params p = mp_text_params_default();
    p.path = lua_tostring(L, -1);   /* stays on the stack while used */
    int ctx = opt_int(L, oi, fn, "ctx", 0, 1, INT_MAX);
    p.val_fraction = opt_num(L, oi, fn, "val_fraction", p.val_fraction);
    if (!(p.val_fraction >= 0 && p.val_fraction < 1))
        luaL_error(L, "%s: val_fraction must be in [0, 1) (got %f)", fn, p.val_fraction);
    p.bos = opt_bool(L, oi, fn, "bos", p.bos);
    p.seed = opt_seed(L, oi, fn);
    ltask *u = push_task(L, &TEXT_TYPE);
    ltext *x = calloc(1, sizeof *x);
    if (!x) return luaL_error(L, "%s: out of memory", fn);
    x->ctx = ctx;
    x->val_fraction = p.val_fraction;
    x->bos = p.bos ? 1 : 0;
    x->seed = p.seed;
    if (mp_text_init(&x->t, &p) != MP_OK) {
        free(x);
        return fail(L, fn, NULL);
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
    ltext *x = check_task(L, 1, &TEXT_TYPE);
    int B = arg_count(L, 2, fn, "B", 1);
    if (lua_type(L, 3) == LUA_TSTRING && lua_isnone(L, 4)) {  /* sample(B, split) */
        lua_pushnil(L);
        lua_insert(L, 3);
    }
    int T = x->ctx;
    if (!lua_isnoneornil(L, 3)) T = arg_count(L, 3, fn, "T", 1);
    else if (!T) luaL_error(L, "%s: T expected (the task was made without ctx, the default window length)", fn);
    int split = luaL_checkoption(L, 4, "train", text_splits);
    lua_settop(L, 1);
    batch bt;
    batch_begin(L, &bt, B, T);
    int64_t *starts = lua_newuserdatauv(L, (size_t)B * sizeof *starts, 0);
    batch_ids(L, &bt, fn);
    mp_status st = mp_text_sample(x->t, (mp_text_split)split, B, T, bt.p[0], bt.p[1], starts);
    batch_end(&bt, st);
    if (st != MP_OK) return fail(L, fn, NULL);
    lua_createtable(L, 0, 2);
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        lua_pushinteger(L, starts[b]);
        lua_rawseti(L, -2, b + 1);
    }
    lua_setfield(L, -2, "starts");
    set_str(L, "split", text_splits[split]);
    lua_remove(L, 4);   /* the starts buffer */
    return 3;
}

static int text_seed(lua_State *L) {
    ltext *x = check_task(L, 1, &TEXT_TYPE);
    uint64_t seed;
    m_seed_common(L, "TextTask:seed", &seed);
    mp_text_seed(x->t, seed);
    return 1;
}

static const luaL_Reg text_methods[] = {{"sample", text_sample}, {"seed", text_seed}, {NULL, NULL}};

/* ==== retrieval ==== */

static const char *const ret_fillers[] = {"random", "repeat", NULL};

static void ret_free(void *h) { mp_retrieval_free(h); }

static void ret_push_params(lua_State *L, const mp_retrieval_params *p) {
    lua_createtable(L, 0, 8);
    set_int(L, "n_keys", p->n_keys);
    set_int(L, "key_len", p->key_len);
    set_int(L, "value_len", p->value_len);
    set_int(L, "n_filler", p->n_filler);
    set_str(L, "filler", ret_fillers[p->filler]);
    if (p->depth < 0) set_str(L, "depth", "random");
    else set_num(L, "depth", p->depth);
    set_bool(L, "bos", p->bos);
    set_int(L, "seed", (lua_Integer)p->seed);
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
             "RetrievalTask(%s, n_keys=%d, key_len=%d, value_len=%d, n_filler=%d, filler=%s, depth=%s, bos=%s, "
             "seed=%llu, vocab=%d, min_len=%d)",
             p->n_keys > 1 ? "key-value" : "passkey", p->n_keys, p->key_len, p->value_len, p->n_filler,
             ret_fillers[p->filler], depth, p->bos ? "true" : "false", (unsigned long long)p->seed,
             mp_retrieval_vocab(p), mp_retrieval_min_len(p));
}

static const task_type RET_TYPE = {"mechprobe.RetrievalTask", "RetrievalTask", ret_free, ret_field, ret_describe};

/* mp.tasks.retrieval{n_keys=1, key_len=2, value_len=5, n_filler=32, filler="random"|"repeat",
 *   depth="random"|0..1, bos=true, seed=1} */
static int l_retrieval(lua_State *L) {
    static const char *const known[] = {"n_keys", "key_len", "value_len", "n_filler", "filler",
                                        "depth", "bos", "seed", NULL};
    const char *fn = "mp.tasks.retrieval";
    opts_check(L, 1, fn, known);
    mp_retrieval_params p = mp_retrieval_params_default();
    p.n_keys = opt_int(L, 1, fn, "n_keys", p.n_keys, 1, MP_RETRIEVAL_MAX_KEYS);
    p.key_len = opt_int(L, 1, fn, "key_len", p.key_len, 1, MP_RETRIEVAL_MAX_DIGITS);
    p.value_len = opt_int(L, 1, fn, "value_len", p.value_len, 1, MP_RETRIEVAL_MAX_DIGITS);
    p.n_filler = opt_int(L, 1, fn, "n_filler", p.n_filler, 1, 65536);
    p.filler = (mp_retrieval_filler)opt_enum(L, 1, fn, "filler", (int)p.filler, ret_fillers);
    int t = opt_get(L, 1, "depth");
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
    p.bos = opt_bool(L, 1, fn, "bos", p.bos);
    p.seed = opt_seed(L, 1, fn);
    ltask *u = push_task(L, &RET_TYPE);
    mp_retrieval *r = NULL;
    if (mp_retrieval_init(&r, &p) != MP_OK) return fail(L, fn, "retrieval");
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
    mp_retrieval *r = check_task(L, 1, &RET_TYPE);
    const mp_retrieval_params *p = mp_retrieval_get_params(r);
    int B = arg_count(L, 2, fn, "B", 1), T = arg_count(L, 3, fn, "T", 1);
    int min_len = mp_retrieval_min_len(p);
    if (T < min_len)
        luaL_error(L, "%s: T = %d is shorter than the %d tokens of BOS, needles and query (t.min_len)", fn, T,
                   min_len);
    lua_settop(L, 1);
    batch bt;
    batch_begin(L, &bt, B, T);
    mp_retrieval_truth *tr = lua_newuserdatauv(L, (size_t)B * sizeof *tr, 0);
    batch_ids(L, &bt, fn);
    mp_status st = mp_retrieval_sample(r, B, T, bt.p[0], bt.p[1], tr);
    batch_end(&bt, st);
    if (st != MP_OK) return fail(L, fn, "retrieval");
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
    if (p->n_keys > 1) {
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
    mp_retrieval *r = check_task(L, 1, &RET_TYPE);
    uint64_t seed;
    m_seed_common(L, "RetrievalTask:seed", &seed);
    mp_retrieval_seed(r, seed);
    return 1;
}

/* t:token_name(id) -> "7", "<bos>", "the", "f12" */
static int ret_token_name(lua_State *L) {
    mp_retrieval *r = check_task(L, 1, &RET_TYPE);
    int vocab = mp_retrieval_vocab(mp_retrieval_get_params(r));
    lua_pushvalue(L, 2);
    int id = (int)int_value(L, "RetrievalTask:token_name", "id", 0, vocab - 1);
    char buf[32];
    lua_pushstring(L, mp_retrieval_token_name(id, buf));
    return 1;
}

static const luaL_Reg ret_methods[] = {
    {"sample", ret_sample}, {"seed", ret_seed}, {"token_name", ret_token_name}, {NULL, NULL},
};

/* ==== registration ==== */

void mp_lua_open_tasks(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"mtd", l_mtd},
        {"algebra", l_algebra},
        {"algebra_solve", l_algebra_solve},
        {"algebra_rules", l_algebra_rules},
        {"text", l_text},
        {"retrieval", l_retrieval},
        {NULL, NULL},
    };
    register_type(L, &MTD_TYPE, mtd_methods);
    register_type(L, &ALG_TYPE, alg_methods);
    register_type(L, &TEXT_TYPE, text_methods);
    register_type(L, &RET_TYPE, ret_methods);
    lua_newtable(L);
    luaL_setfuncs(L, fns, 0);
    lua_setfield(L, -2, "tasks");
}
