/* lprobe.c — Lua bindings of the linear probes (analyze/probe.h), added to
 * the table `mp.analyze` (type "mechprobe.Probe"):
 *
 *   local p = mp.analyze.probe(X, y [, {kind = "logistic" | "linear", ridge = 0,
 *                                       standardize = true, max_iter = 100, tol = 1e-8}])
 *       X: features [n, d] (a Tensor whose last dim is d, leading dims flattened,
 *       or a nested table); y: n labels (table or Tensor; 0/1 for "logistic",
 *       any numbers for "linear" — the default kind).
 *   p.kind, p.d, p.w (Tensor[d], raw units), p.b, p.loss, p.train_acc, p.r2,
 *   p.iterations, p.converged
 *   p:predict(X)     -> Tensor[n] of scores (w.x + b, or the probability for logistic)
 *   p:accuracy(X, y) -> share of (score > 0.5) == (y > 0.5)
 * The default ridge is 0 (plain least squares / maximum likelihood); give a
 * ridge for separable classes or more features than samples. */
#include "mp_lua.h"

#include <limits.h>
#include <string.h>

#include "probe.h"

#define PROBE_MT "mechprobe.Probe"

static mp_probe *check_probe(lua_State *L, int idx) {
    mp_probe *p = luaL_checkudata(L, idx, PROBE_MT);
    if (!p->w) luaL_error(L, "Probe is empty");
    return p;
}

static int probe_gc(lua_State *L) {
    mp_analyze_probe_free(luaL_checkudata(L, 1, PROBE_MT));
    return 0;
}

/* Features at idx as [n, d]; may push a converted tensor. */
static const float *features(lua_State *L, int idx, const char *fn, size_t *n, size_t *d) {
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    if (t->ndim < 2 || t->shape[t->ndim - 1] < 1)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s: features must be [n, d] (2 or more dims), got %d dim(s)", fn,
                                              t->ndim));
    *d = (size_t)t->shape[t->ndim - 1];
    *n = t->numel / *d;
    return t->data;
}

/* Labels at idx as n doubles in a userdata buffer pushed on the stack. */
static double *labels(lua_State *L, int idx, const char *fn, size_t n) {
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    if (t->numel != n)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s: %d labels for %d samples", fn, (int)t->numel, (int)n));
    double *y = lua_newuserdatauv(L, (n ? n : 1) * sizeof *y, 0);
    for (size_t i = 0; i < n; i++) y[i] = t->data[i];
    return y;
}

static int l_probe(lua_State *L) {
    const char *fn = "mp.analyze.probe";
    lua_settop(L, 3);
    size_t n, d;
    const float *X = features(L, 1, fn, &n, &d);
    double *y = labels(L, 2, fn, n);
    mp_probe_params p = mp_analyze_probe_params_default();
    static const char *const known[] = {"kind", "ridge", "standardize", "max_iter", "tol", NULL},
                             *kinds[] = {"linear", "logistic", NULL};
    mp_lua_opt_check(L, 3, fn, known);
    int logistic = mp_lua_opt_enum(L, 3, fn, "kind", p.kind == MP_PROBE_LOGISTIC, kinds) == 1;
    p.kind = logistic ? MP_PROBE_LOGISTIC : MP_PROBE_LINEAR;
    p.ridge = mp_lua_opt_num(L, 3, fn, "ridge", p.ridge);
    p.standardize = mp_lua_opt_bool(L, 3, fn, "standardize", p.standardize);
    p.max_iter = (int)mp_lua_opt_int(L, 3, fn, "max_iter", p.max_iter, INT_MIN, INT_MAX);
    p.tol = mp_lua_opt_num(L, 3, fn, "tol", p.tol);
    mp_probe *pr = lua_newuserdatauv(L, sizeof *pr, 0);
    memset(pr, 0, sizeof *pr);
    luaL_setmetatable(L, PROBE_MT);
    if (mp_analyze_probe_fit(X, y, n, d, &p, pr) != MP_OK) return luaL_error(L, "%s: %s", fn, mp_last_error());
    return 1;
}

static int probe_predict(lua_State *L) {
    mp_probe *pr = check_probe(L, 1);
    size_t n, d;
    const float *X = features(L, 2, "Probe:predict", &n, &d);
    if (d != pr->d)
        luaL_argerror(L, 2, lua_pushfstring(L, "Probe:predict: %d features, the probe has %d", (int)d, (int)pr->d));
    mp_tensor *out = mp_lua_tensor_new(L, 1, (int64_t[]){(int64_t)n});
    for (size_t i = 0; i < n; i++) out->data[i] = (float)mp_analyze_probe_score(pr, X + i * d);
    return 1;
}

static int probe_accuracy(lua_State *L) {
    mp_probe *pr = check_probe(L, 1);
    size_t n, d;
    const float *X = features(L, 2, "Probe:accuracy", &n, &d);
    if (d != pr->d)
        luaL_argerror(L, 2, lua_pushfstring(L, "Probe:accuracy: %d features, the probe has %d", (int)d, (int)pr->d));
    double *y = labels(L, 3, "Probe:accuracy", n);
    lua_pushnumber(L, mp_analyze_probe_accuracy(pr, X, y, n));
    return 1;
}

static int probe_index(lua_State *L) {
    mp_probe *pr = check_probe(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "kind")) lua_pushstring(L, pr->kind == MP_PROBE_LOGISTIC ? "logistic" : "linear");
    else if (!strcmp(k, "d")) lua_pushinteger(L, (lua_Integer)pr->d);
    else if (!strcmp(k, "w")) {
        mp_tensor *t = mp_lua_tensor_new(L, 1, (int64_t[]){(int64_t)pr->d});
        for (size_t j = 0; j < pr->d; j++) t->data[j] = (float)pr->w[j];
    } else if (!strcmp(k, "b")) lua_pushnumber(L, pr->b);
    else if (!strcmp(k, "loss")) lua_pushnumber(L, pr->loss);
    else if (!strcmp(k, "train_acc")) lua_pushnumber(L, pr->train_acc);
    else if (!strcmp(k, "r2")) lua_pushnumber(L, pr->r2);
    else if (!strcmp(k, "rank")) { /* linear probes: the rank the solve kept */
        if (pr->kind == MP_PROBE_LINEAR) lua_pushinteger(L, (lua_Integer)pr->rank);
        else lua_pushnil(L);
    }
    else if (!strcmp(k, "iterations")) lua_pushinteger(L, pr->iterations);
    else if (!strcmp(k, "converged")) lua_pushboolean(L, pr->converged);
    else if (!strcmp(k, "predict")) lua_pushcfunction(L, probe_predict);
    else if (!strcmp(k, "accuracy")) lua_pushcfunction(L, probe_accuracy);
    else lua_pushnil(L);
    return 1;
}

static int probe_tostring(lua_State *L) {
    mp_probe *pr = luaL_checkudata(L, 1, PROBE_MT);
    if (!pr->w) lua_pushliteral(L, "Probe(empty)");
    else
        lua_pushfstring(L, "Probe(%s, d=%d, train_acc=%f, loss=%f)", pr->kind == MP_PROBE_LOGISTIC ? "logistic" : "linear",
                        (int)pr->d, pr->train_acc, pr->loss);
    return 1;
}

void mp_lua_open_probe(lua_State *L) {
    if (luaL_newmetatable(L, PROBE_MT)) {
        lua_pushcfunction(L, probe_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, probe_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, probe_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "analyze") != LUA_TTABLE) { /* mp.analyze, created if absent */
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "analyze");
    }
    lua_pushcfunction(L, l_probe);
    lua_setfield(L, -2, "probe");
    lua_pop(L, 1);
}
