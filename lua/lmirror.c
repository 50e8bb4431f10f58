/* lmirror.c — Lua bindings of analyze/mirror.h as the table `mp.mtd`: in-context
 * estimators of MTD mixture weights (the mirror-descent probe's analyses).
 *
 * The first argument `mtd` says which MTD: an MTD task (mp.tasks.mtd{...}: its m
 * and its pi()) or a table {pi = Tensor[q,q] or nested table, m = lags}. tokens:
 * a Tensor or table [B,T] (or one sequence [T]: the batch dim is then dropped
 * from the results) of token ids 0..q-1; observations are positions m..T-1.
 * lambda is indexed by lag g = 1..m (lambda[g] weighs pi*(y_{T-g}, .)).
 *
 *   mp.mtd.responsibilities(mtd, tokens)      -> gamma [B, T-m, m]
 *       row i: observation at position k = m + i - 1 (0-based k; i is 1-based)
 *   mp.mtd.mirror_descent(mtd, tokens, {eta =, steps = 1}) -> lambda [B, m]
 *   mp.mtd.bayes(mtd, tokens [, {chains = 4, burn = 200, samples = 1000, seed = 1,
 *                                exact = false}]) -> mean [B, m], rhat [B]
 *       Gibbs sampler (rhat: largest Gelman-Rubin R-hat over components);
 *       exact = true: quadrature (m = 2 only; rhat is then nil)
 *   mp.mtd.construction(mtd, tokens, {beta =}) -> lambda [B, m], pred [B, q]
 *   mp.mtd.predict(mtd, tokens, lambda [B, m]) -> pred [B, q]   (next token after each sequence)
 *   mp.mtd.kl(p, r) -> KL(p || r) over the last dim: a number for vectors, else a
 *       Tensor of the leading shape
 *   mp.mtd.tune(mtd, tokens, truth [B, q], {method = "md"|"construction", steps = 1,
 *               grid = {...} (increasing, > 0)})
 *       -> {best = refined value, index = 1-based grid index, best_kl =, kl = Tensor[n],
 *           grid = Tensor[n]}
 *   mp.mtd.fit_power(x, y) -> {slope =, intercept =, slope_se =, r2 =, n =}: least squares of
 *       log y on log x (y = exp(intercept) x^slope), e.g. the best step size against T
 * Computation is in double precision; Tensors are float32. */
#include "mp_lua.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mirror.h"

/* Arguments of one call, with their double/int32 copies in Lua userdata (so a
 * Lua error frees them). */
typedef struct {
    mp_mirror_data d;
    int batched;   /* tokens had a batch dim */
} margs;

static int fail(lua_State *L, const char *fn) { return luaL_error(L, "mp.mtd.%s: %s", fn, mp_last_error()); }

static void *scratch(lua_State *L, size_t n, size_t size, const char *fn) {
    size_t bytes;
    if (mp_mul_size(n ? n : 1, size, &bytes)) luaL_error(L, "mp.mtd.%s: size overflows", fn);
    return lua_newuserdatauv(L, bytes, 0);
}

/* Reads mtd (arg 1) and tokens (arg 2) into a; pushes scratch values. */
static void read_args(lua_State *L, margs *a, const char *fn) {
    memset(a, 0, sizeof *a);
    int ty = lua_type(L, 1);
    if (ty != LUA_TTABLE && ty != LUA_TUSERDATA)
        luaL_error(L, "mp.mtd.%s: argument 1 must be an MTD task or a table {pi =, m =} (got %s)", fn,
                   luaL_typename(L, 1));
    /* m */
    lua_getfield(L, 1, "m");
    const char *name = lua_pushfstring(L, "mp.mtd.%s", fn);
    lua_Integer m = mp_lua_int_at(L, -2, name, "argument #1's field m (the number of lags)", 1, 1024);
    lua_pop(L, 2);
    /* pi: a method (task:pi()) or a field */
    if (lua_getfield(L, 1, "pi") == LUA_TFUNCTION) {
        lua_pushvalue(L, 1);
        lua_call(L, 1, 1);
    }
    if (lua_isnil(L, -1)) luaL_error(L, "mp.mtd.%s: argument 1 has no pi (a [q,q] transition matrix)", fn);
    int pidx = lua_gettop(L);
    mp_tensor *pt = mp_lua_tensor_arg(L, pidx);
    if (pt->ndim != 2 || pt->shape[0] != pt->shape[1] || pt->shape[0] < 2 || pt->shape[0] > 4096)
        luaL_error(L, "mp.mtd.%s: pi must be a square [q,q] matrix with 2 <= q <= 4096", fn);
    int q = (int)pt->shape[0];
    double *pi = scratch(L, pt->numel, sizeof(double), fn);
    for (size_t i = 0; i < pt->numel; i++) pi[i] = pt->data[i];
    /* tokens */
    mp_tensor *tt = mp_lua_tensor_arg(L, 2);
    if (tt->ndim != 1 && tt->ndim != 2) luaL_error(L, "mp.mtd.%s: tokens must be [T] or [B,T] (got %d dims)", fn, tt->ndim);
    a->batched = tt->ndim == 2;
    int64_t B = a->batched ? tt->shape[0] : 1, T = tt->shape[tt->ndim - 1];
    if (B < 1 || T < 1 || B > INT_MAX || T > INT_MAX) luaL_error(L, "mp.mtd.%s: empty or oversized tokens", fn);
    if (T < m) luaL_error(L, "mp.mtd.%s: sequences of %I tokens are shorter than m = %I lags", fn, (lua_Integer)T, m);
    int32_t *tok = scratch(L, tt->numel, sizeof(int32_t), fn);
    for (size_t i = 0; i < tt->numel; i++) {
        float v = tt->data[i];
        if (!(v >= 0 && v < (float)q) || v != floorf(v))
            luaL_error(L, "mp.mtd.%s: tokens[%I] = %f is not a token id in 0..%d", fn, (lua_Integer)(i + 1),
                       (double)v, q - 1);
        tok[i] = (int32_t)v;
    }
    a->d.q = q;
    a->d.m = (int)m;
    a->d.pi = pi;
    a->d.B = (int)B;
    a->d.T = (int)T;
    a->d.tokens = tok;
}

/* Pushes a Tensor [B, n] (or [n] when not batched) from doubles. */
static void push_rows(lua_State *L, const margs *a, const double *x, int n) {
    int64_t sh[2] = {a->d.B, n};
    mp_tensor *t = a->batched ? mp_lua_tensor_new(L, 2, sh) : mp_lua_tensor_new(L, 1, sh + 1);
    for (size_t i = 0; i < t->numel; i++) t->data[i] = (float)x[i];
}

/* Options through the one reader (lua/lopt.c), named "mp.mtd.<fn>". */
static double opt_number(lua_State *L, int idx, const char *fn, const char *key, double def, int required) {
    const char *name = lua_pushfstring(L, "mp.mtd.%s", fn);
    int ty = mp_lua_opt_get(L, idx, key);
    lua_pop(L, 1);
    if (ty == LUA_TNIL && required) luaL_error(L, "%s: option '%s' is required", name, key);
    double v = mp_lua_opt_num(L, idx, name, key, def);
    lua_pop(L, 1);
    return v;
}

static int opt_int(lua_State *L, int idx, const char *fn, const char *key, int def, int lo, int hi) {
    const char *name = lua_pushfstring(L, "mp.mtd.%s", fn);
    int v = (int)mp_lua_opt_int(L, idx, name, key, def, lo, hi);
    lua_pop(L, 1);
    return v;
}

static void check_opts(lua_State *L, int idx, const char *fn, const char *const *known) {
    mp_lua_opt_check(L, idx, lua_pushfstring(L, "mp.mtd.%s", fn), known);
    lua_pop(L, 1);
}

static int l_responsibilities(lua_State *L) {
    margs a;
    lua_settop(L, 2);
    read_args(L, &a, "responsibilities");
    int N = a.d.T - a.d.m;
    double *g = scratch(L, (size_t)a.d.B * N * a.d.m, sizeof(double), "responsibilities");
    if (mp_mirror_responsibilities(&a.d, g)) return fail(L, "responsibilities");
    int64_t sh[3] = {a.d.B, N, a.d.m};
    mp_tensor *t = a.batched ? mp_lua_tensor_new(L, 3, sh) : mp_lua_tensor_new(L, 2, sh + 1);
    for (size_t i = 0; i < t->numel; i++) t->data[i] = (float)g[i];
    return 1;
}

static int l_mirror_descent(lua_State *L) {
    static const char *const known[] = {"eta", "steps", NULL};
    const char *fn = "mirror_descent";
    lua_settop(L, 3);
    check_opts(L, 3, fn, known);
    double eta = opt_number(L, 3, fn, "eta", 0, 1);
    int steps = opt_int(L, 3, fn, "steps", 1, 0, 1000000);
    margs a;
    read_args(L, &a, fn);
    double *lam = scratch(L, (size_t)a.d.B * a.d.m, sizeof(double), fn);
    if (mp_mirror_descent(&a.d, eta, steps, lam)) return fail(L, fn);
    push_rows(L, &a, lam, a.d.m);
    return 1;
}

static int l_bayes(lua_State *L) {
    static const char *const known[] = {"chains", "burn", "samples", "seed", "exact", NULL};
    const char *fn = "bayes";
    lua_settop(L, 3);
    check_opts(L, 3, fn, known);
    mp_mirror_gibbs_params p = mp_mirror_gibbs_params_default();
    p.chains = opt_int(L, 3, fn, "chains", p.chains, 2, 1000);
    p.burn = opt_int(L, 3, fn, "burn", p.burn, 0, INT_MAX);
    p.samples = opt_int(L, 3, fn, "samples", p.samples, 2, INT_MAX);
    p.seed = (unsigned long)opt_int(L, 3, fn, "seed", (int)p.seed, 0, INT_MAX);
    int exact = mp_lua_opt_bool(L, 3, "mp.mtd.bayes", "exact", 0);
    margs a;
    read_args(L, &a, fn);
    double *mean = scratch(L, (size_t)a.d.B * a.d.m, sizeof(double), fn);
    double *rhat = scratch(L, (size_t)a.d.B, sizeof(double), fn);
    if (exact) {
        if (mp_mirror_bayes_exact(&a.d, mean)) return fail(L, fn);
        push_rows(L, &a, mean, a.d.m);
        lua_pushnil(L);
        return 2;
    }
    if (mp_mirror_bayes(&a.d, &p, mean, rhat)) return fail(L, fn);
    push_rows(L, &a, mean, a.d.m);
    if (a.batched) {
        int64_t sh[1] = {a.d.B};
        mp_tensor *t = mp_lua_tensor_new(L, 1, sh);
        for (int b = 0; b < a.d.B; b++) t->data[b] = (float)rhat[b];
    } else {
        lua_pushnumber(L, rhat[0]);
    }
    return 2;
}

static int l_construction(lua_State *L) {
    static const char *const known[] = {"beta", NULL};
    const char *fn = "construction";
    lua_settop(L, 3);
    check_opts(L, 3, fn, known);
    double beta = opt_number(L, 3, fn, "beta", 0, 1);
    margs a;
    read_args(L, &a, fn);
    double *lam = scratch(L, (size_t)a.d.B * a.d.m, sizeof(double), fn);
    double *pred = scratch(L, (size_t)a.d.B * a.d.q, sizeof(double), fn);
    if (mp_mirror_construction(&a.d, beta, lam, pred)) return fail(L, fn);
    push_rows(L, &a, lam, a.d.m);
    push_rows(L, &a, pred, a.d.q);
    return 2;
}

/* Reads a [B, n] (or [n] when not batched) argument into doubles. */
static double *read_rows(lua_State *L, int idx, const margs *a, int n, const char *fn, const char *what) {
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    int ok = a->batched ? (t->ndim == 2 && t->shape[0] == a->d.B && t->shape[1] == n) : (t->ndim == 1 && t->shape[0] == n);
    if (!ok)
        luaL_error(L, "mp.mtd.%s: %s must be [%s%d] like the tokens' batch (got %d dims, %I values)", fn, what,
                   a->batched ? "B, " : "", n, t->ndim, (lua_Integer)t->numel);
    double *x = scratch(L, t->numel, sizeof(double), fn);
    for (size_t i = 0; i < t->numel; i++) x[i] = t->data[i];
    return x;
}

static int l_predict(lua_State *L) {
    const char *fn = "predict";
    lua_settop(L, 3);
    margs a;
    read_args(L, &a, fn);
    double *lam = read_rows(L, 3, &a, a.d.m, fn, "lambda");
    double *pred = scratch(L, (size_t)a.d.B * a.d.q, sizeof(double), fn);
    if (mp_mirror_predict(&a.d, lam, pred)) return fail(L, fn);
    push_rows(L, &a, pred, a.d.q);
    return 1;
}

static int l_kl(lua_State *L) {
    lua_settop(L, 2);
    mp_tensor *p = mp_lua_tensor_arg(L, 1);
    mp_tensor *r = mp_lua_tensor_arg(L, 2);
    if (p->ndim != r->ndim || memcmp(p->shape, r->shape, sizeof(int64_t) * (size_t)p->ndim) != 0)
        return luaL_error(L, "mp.mtd.kl: p and r must have the same shape");
    int64_t n = p->shape[p->ndim - 1];
    if (n < 1 || n > INT_MAX) return luaL_error(L, "mp.mtd.kl: empty distributions");
    size_t rows = p->numel / (size_t)n;
    double *pd = scratch(L, 2 * (size_t)n, sizeof(double), "kl"), *rd = pd + n;
    mp_tensor *out = NULL;
    if (p->ndim > 1) out = mp_lua_tensor_new(L, p->ndim - 1, p->shape);
    double last = 0;
    for (size_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < n; j++) {
            pd[j] = p->data[i * n + j];
            rd[j] = r->data[i * n + j];
        }
        last = mp_mirror_kl(pd, rd, (int)n);
        if (out) out->data[i] = (float)last;
    }
    if (!out) lua_pushnumber(L, last);
    return 1;
}

static int l_tune(lua_State *L) {
    static const char *const known[] = {"method", "steps", "grid", NULL};
    static const char *const methods[] = {"md", "construction", NULL};
    const char *fn = "tune";
    lua_settop(L, 4);
    check_opts(L, 4, fn, known);
    int method = 0;
    if (lua_istable(L, 4)) {
        lua_getfield(L, 4, "method");
        if (!lua_isnil(L, -1)) method = luaL_checkoption(L, -1, NULL, methods);
        lua_pop(L, 1);
    }
    int steps = opt_int(L, 4, fn, "steps", 1, 1, 1000000);
    if (!lua_istable(L, 4) || lua_getfield(L, 4, "grid") == LUA_TNIL)
        return luaL_error(L, "mp.mtd.tune: option 'grid' (increasing values > 0) is required");
    mp_tensor *gt = mp_lua_tensor_arg(L, lua_gettop(L));
    if (gt->numel < 1 || gt->numel > INT_MAX) return luaL_error(L, "mp.mtd.tune: empty grid");
    int n = (int)gt->numel;
    double *grid = scratch(L, (size_t)n, sizeof(double), fn);
    for (int j = 0; j < n; j++) grid[j] = gt->data[j];
    margs a;
    read_args(L, &a, fn);
    double *truth = read_rows(L, 3, &a, a.d.q, fn, "truth");
    double *kl = scratch(L, (size_t)n, sizeof(double), fn);
    mp_mirror_tuned res;
    if (mp_mirror_tune(&a.d, truth, method ? MP_MIRROR_CONSTRUCTION : MP_MIRROR_MD, steps, grid, n, kl, &res))
        return fail(L, fn);
    lua_createtable(L, 0, 5);
    lua_pushnumber(L, res.value);
    lua_setfield(L, -2, "best");
    lua_pushinteger(L, res.best + 1);
    lua_setfield(L, -2, "index");
    lua_pushnumber(L, res.best_kl);
    lua_setfield(L, -2, "best_kl");
    int64_t sh[1] = {n};
    mp_tensor *k = mp_lua_tensor_new(L, 1, sh);
    for (int j = 0; j < n; j++) k->data[j] = (float)kl[j];
    lua_setfield(L, -2, "kl");
    mp_tensor *g = mp_lua_tensor_new(L, 1, sh);
    for (int j = 0; j < n; j++) g->data[j] = (float)grid[j];
    lua_setfield(L, -2, "grid");
    return 1;
}

static int l_fit_power(lua_State *L) {
    lua_settop(L, 2);
    mp_tensor *x = mp_lua_tensor_arg(L, 1), *y = mp_lua_tensor_arg(L, 2);
    if (x->numel != y->numel || x->numel > INT_MAX)
        return luaL_error(L, "mp.mtd.fit_power: x and y must have the same number of values");
    double *xd = scratch(L, 2 * x->numel, sizeof(double), "fit_power"), *yd = xd + x->numel;
    for (size_t i = 0; i < x->numel; i++) {
        xd[i] = x->data[i];
        yd[i] = y->data[i];
    }
    mp_mirror_fit fit;
    if (mp_mirror_fit_loglog(xd, yd, (int)x->numel, &fit)) return fail(L, "fit_power");
    lua_createtable(L, 0, 5);
    lua_pushnumber(L, fit.slope);
    lua_setfield(L, -2, "slope");
    lua_pushnumber(L, fit.intercept);
    lua_setfield(L, -2, "intercept");
    lua_pushnumber(L, fit.slope_se);
    lua_setfield(L, -2, "slope_se");
    lua_pushnumber(L, fit.r2);
    lua_setfield(L, -2, "r2");
    lua_pushinteger(L, fit.n);
    lua_setfield(L, -2, "n");
    return 1;
}

void mp_lua_open_mirror(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"responsibilities", l_responsibilities},
        {"mirror_descent", l_mirror_descent},
        {"bayes", l_bayes},
        {"construction", l_construction},
        {"predict", l_predict},
        {"kl", l_kl},
        {"tune", l_tune},
        {"fit_power", l_fit_power},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "mtd");
}
