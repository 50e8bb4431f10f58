/* lanalyze.c — Lua bindings of analyze/ as the table `mp.analyze`.
 *
 * Point clouds are Tensors (or nested tables) whose last dim is the dimension d
 * and whose leading dims are flattened into points ([n, d], [B, T, d], ...).
 * Results are tables of numbers and Tensors; positions and indices are 1-based.
 *
 *   mp.analyze.pca(X [, k [, {proj = true}]])
 *       -> {components = Tensor[k, d], explained = Tensor[k], ratio = Tensor[k],
 *           proj = Tensor[n, k], mean = Tensor[d], total_var, method = "svd"|"cov", n, d, k}
 *       k defaults to d (clamped to n). explained = variance along each component
 *       (denominator n - 1), ratio = explained / total variance.
 *   mp.analyze.stable_rank(X)   -> ||X||_F^2 / ||X||_2^2 (uncentred)
 *   mp.analyze.sigma1_share(X)  -> sigma_1^2 / sum sigma_i^2 (uncentred)
 *   mp.analyze.spectrum(X)      -> {fro2, sigma1, stable_rank, sigma1_share}
 *   mp.analyze.separation(Q, K [, {ridge = 1e-4}])
 *       -> {cos, centroid_dist, spread, dist_over_spread, fisher_j, fisher_acc, ridge}
 *       cos: cosine of the two means; spread: pooled RMS distance to own centroid;
 *       fisher_j: (w.dmu)^2 / w'Sw w with w = (Sw + ridge tr(Sw)/d I)^-1 dmu;
 *       fisher_acc: accuracy of the midpoint threshold along w.
 *   mp.analyze.sinks(pattern [, {eps = 0.3, bins = min(T, 32)}])
 *       pattern [..., T, T] (leading dims = (layer, head) pairs, e.g. [L, H, T, T])
 *       -> {alpha = Tensor[..., T], alpha0 = Tensor[...], sink_rate, sink_heads, pairs,
 *           first_by_pos = Tensor[bins], bin_start = Tensor[bins], bin_end = Tensor[bins],
 *           entropy = Tensor[..., T]}
 *       alpha_k = mean attention key k receives from the queries q >= k; a pair is a sink
 *       when alpha_1 (the first token) > eps; first_by_pos[b] = mean attention to the first
 *       token over the queries bin_start[b]..bin_end[b] (1-based, inclusive).
 *   mp.analyze.entropy(pattern)       -> Tensor[..., T] (nats; a uniform row q gives log q)
 *   mp.analyze.key_norm_ratio(k)      -> ||k_1|| / mean_t ||k_t|| for k [T, d]
 *   mp.analyze.max_qk(q, k [, {causal = true}]) -> Tensor[T] of max_s q_t.k_s, table of argmax s
 *   mp.analyze.massive(h [, {abs = 100, rel = 1000, max_hits = 100000}])
 *       h [L, T, D] (or [T, D]) -> {ratio = Tensor[L, T] (max|h| / median|h| per token),
 *       median = Tensor[L] (per-layer median |h|), hits = {{layer, pos, channel, value}, ...},
 *       n_hits_total}; a hit has |h| > abs and |h| >= rel x the layer median.
 *   mp.analyze.bootstrap(values [, {n = 1000, level = 0.95, seed = 1, stat = "mean"}])
 *       values: table or Tensor (flattened); stat: "mean", "median" or a function
 *       receiving a table of values -> {estimate, lo, hi, se, n} (percentile interval). */
#include "mp_lua.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "geometry.h"
#include "sinks.h"
#include "stats.h"
#include "tensor.h"

/* ---- helpers ---- */

/* A result whose C arrays are freed by __gc even if building the Lua answer raises. */
typedef struct {
    int kind;
    union { mp_pca pca; mp_sinks sinks; mp_massive massive; } u;
} guard;
enum { G_NONE, G_PCA, G_SINKS, G_MASSIVE };
#define GUARD_MT "mechprobe.AnalyzeResult"

static void guard_release(guard *g) {
    if (g->kind == G_PCA) mp_analyze_pca_free(&g->u.pca);
    else if (g->kind == G_SINKS) mp_analyze_sinks_free(&g->u.sinks);
    else if (g->kind == G_MASSIVE) mp_analyze_massive_free(&g->u.massive);
    g->kind = G_NONE;
}

static int guard_gc(lua_State *L) {
    guard_release(luaL_checkudata(L, 1, GUARD_MT));
    return 0;
}

static guard *push_guard(lua_State *L) {
    guard *g = lua_newuserdatauv(L, sizeof *g, 0);
    memset(g, 0, sizeof *g);
    if (luaL_newmetatable(L, GUARD_MT)) {
        lua_pushcfunction(L, guard_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return g;
}

/* Raises "mp.analyze.NAME: message" for a failed status. */
static int fail(lua_State *L, const char *name, mp_status s) {
    (void)s;
    return luaL_error(L, "mp.analyze.%s: %s", name, mp_last_error());
}

/* Tensor (or table) at idx viewed as points [n, d] (d = last dim). May push. */
static const float *cloud_arg(lua_State *L, int idx, const char *name, size_t *n, size_t *d) {
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    if (t->ndim < 2 || t->shape[t->ndim - 1] < 1)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s: expected points [n, d] (a Tensor of 2 or more dims), got %d dim(s)",
                                              name, t->ndim));
    *d = (size_t)t->shape[t->ndim - 1];
    *n = t->numel / *d;
    return t->data;
}

static void set_num(lua_State *L, const char *k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

/* Pushes a float Tensor copied from doubles. */
static void push_doubles(lua_State *L, int ndim, const int64_t *shape, const double *v) {
    mp_tensor *t = mp_lua_tensor_new(L, ndim, shape);
    for (size_t i = 0; i < t->numel; i++) t->data[i] = (float)v[i];
}

/* ---- geometry ---- */

static int l_pca(lua_State *L) {
    size_t n, d;
    const float *X = cloud_arg(L, 1, "pca", &n, &d);
    lua_Integer k = mp_lua_arg_optint(L, 2, "mp.analyze.pca", "k", (lua_Integer)d, 1, (lua_Integer)d);
    static const char *const known[] = {"proj", NULL};
    mp_lua_opt_check(L, 3, "mp.analyze.pca", known);
    int want_proj = mp_lua_opt_bool(L, 3, "mp.analyze.pca", "proj", 1);
    guard *g = push_guard(L);
    mp_status st = mp_analyze_pca(X, n, d, (size_t)k, want_proj, &g->u.pca);
    if (st != MP_OK) return fail(L, "pca", st);
    g->kind = G_PCA;
    mp_pca *p = &g->u.pca;
    lua_createtable(L, 0, 10);
    mp_lua_tensor_from(L, 2, (int64_t[]){(int64_t)p->k, (int64_t)d}, p->components);
    lua_setfield(L, -2, "components");
    push_doubles(L, 1, (int64_t[]){(int64_t)p->k}, p->explained);
    lua_setfield(L, -2, "explained");
    push_doubles(L, 1, (int64_t[]){(int64_t)p->k}, p->ratio);
    lua_setfield(L, -2, "ratio");
    mp_lua_tensor_from(L, 1, (int64_t[]){(int64_t)d}, p->mean);
    lua_setfield(L, -2, "mean");
    if (p->proj) {
        mp_lua_tensor_from(L, 2, (int64_t[]){(int64_t)n, (int64_t)p->k}, p->proj);
        lua_setfield(L, -2, "proj");
    }
    set_num(L, "total_var", p->total_var);
    lua_pushstring(L, p->method == MP_PCA_SVD ? "svd" : "cov");
    lua_setfield(L, -2, "method");
    set_num(L, "n", (double)n);
    set_num(L, "d", (double)d);
    set_num(L, "k", (double)p->k);
    guard_release(g);
    return 1;
}

static void spectrum_of(lua_State *L, const char *name, mp_spectrum *s) {
    size_t n, d;
    const float *X = cloud_arg(L, 1, name, &n, &d);
    mp_status st = mp_analyze_spectrum(X, n, d, s);
    if (st != MP_OK) fail(L, name, st);
}

static int l_stable_rank(lua_State *L) {
    mp_spectrum s;
    spectrum_of(L, "stable_rank", &s);
    lua_pushnumber(L, s.stable_rank);
    return 1;
}

static int l_sigma1_share(lua_State *L) {
    mp_spectrum s;
    spectrum_of(L, "sigma1_share", &s);
    lua_pushnumber(L, s.sigma1_share);
    return 1;
}

static int l_spectrum(lua_State *L) {
    mp_spectrum s;
    spectrum_of(L, "spectrum", &s);
    lua_createtable(L, 0, 4);
    set_num(L, "fro2", s.fro2);
    set_num(L, "sigma1", s.sigma1);
    set_num(L, "stable_rank", s.stable_rank);
    set_num(L, "sigma1_share", s.sigma1_share);
    return 1;
}

static int l_separation(lua_State *L) {
    size_t na, da, nb, db;
    static const char *const known[] = {"ridge", NULL};
    mp_lua_opt_check(L, 3, "mp.analyze.separation", known);
    mp_separation_params p = mp_analyze_separation_params_default();
    p.ridge_rel = mp_lua_opt_num(L, 3, "mp.analyze.separation", "ridge", p.ridge_rel);
    const float *A = cloud_arg(L, 1, "separation", &na, &da);
    const float *B = cloud_arg(L, 2, "separation", &nb, &db);
    if (da != db) return luaL_error(L, "mp.analyze.separation: the clouds have dimensions %d and %d", (int)da, (int)db);
    mp_separation s;
    mp_status st = mp_analyze_separation(A, na, B, nb, da, &p, &s);
    if (st != MP_OK) return fail(L, "separation", st);
    lua_createtable(L, 0, 7);
    set_num(L, "cos", s.cos_means);
    set_num(L, "centroid_dist", s.centroid_dist);
    set_num(L, "spread", s.spread);
    set_num(L, "dist_over_spread", s.dist_over_spread);
    set_num(L, "fisher_j", s.fisher_j);
    set_num(L, "fisher_acc", s.fisher_acc);
    set_num(L, "ridge", s.ridge);
    return 1;
}

/* ---- sinks ---- */

/* pattern [..., T, T]: returns data, P (product of the leading dims) and T. May push. */
static const float *pattern_arg(lua_State *L, int idx, const char *name, mp_tensor **tp, size_t *P, size_t *T) {
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    if (t->ndim < 2 || t->shape[t->ndim - 1] != t->shape[t->ndim - 2] || t->shape[t->ndim - 1] < 1)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s: expected an attention pattern [..., T, T]", name));
    *T = (size_t)t->shape[t->ndim - 1];
    *P = t->numel / (*T * *T);
    *tp = t;
    return t->data;
}

static int l_sinks(lua_State *L) {
    mp_tensor *t;
    size_t P, T;
    static const char *const known[] = {"eps", "bins", NULL};
    mp_lua_opt_check(L, 2, "mp.analyze.sinks", known);
    mp_sink_params p = mp_analyze_sink_params_default();
    p.eps = mp_lua_opt_num(L, 2, "mp.analyze.sinks", "eps", p.eps);
    p.bins = (size_t)mp_lua_opt_int(L, 2, "mp.analyze.sinks", "bins", 0, 0, 1000000000);
    const float *A = pattern_arg(L, 1, "sinks", &t, &P, &T);
    guard *g = push_guard(L);
    mp_status st = mp_analyze_sinks(A, P, T, &p, &g->u.sinks);
    if (st != MP_OK) return fail(L, "sinks", st);
    g->kind = G_SINKS;
    mp_sinks *s = &g->u.sinks;
    int lead = t->ndim - 2;
    int64_t shape[MP_MAXDIM];
    for (int i = 0; i < lead; i++) shape[i] = t->shape[i];
    shape[lead] = (int64_t)T;
    lua_createtable(L, 0, 10);
    push_doubles(L, lead + 1, shape, s->alpha);
    lua_setfield(L, -2, "alpha");
    push_doubles(L, lead + 1, shape, s->entropy);
    lua_setfield(L, -2, "entropy");
    int64_t one = 1;
    mp_tensor *a0 = mp_lua_tensor_new(L, lead ? lead : 1, lead ? shape : &one);
    for (size_t i = 0; i < P; i++) a0->data[i] = (float)s->alpha[i * T];
    lua_setfield(L, -2, "alpha0");
    set_num(L, "sink_rate", s->sink_rate);
    set_num(L, "sink_heads", (double)s->sink_heads);
    set_num(L, "pairs", (double)P);
    set_num(L, "eps", p.eps);
    int64_t nb = (int64_t)s->bins;
    push_doubles(L, 1, &nb, s->first_by_pos);
    lua_setfield(L, -2, "first_by_pos");
    mp_tensor *b0 = mp_lua_tensor_new(L, 1, &nb);
    mp_tensor *b1 = mp_lua_tensor_new(L, 1, &nb);
    for (size_t b = 0; b < s->bins; b++) {
        b0->data[b] = (float)(s->bin_lo[b] + 1);
        b1->data[b] = (float)s->bin_lo[b + 1];
    }
    lua_setfield(L, -3, "bin_end");
    lua_setfield(L, -2, "bin_start");
    guard_release(g);
    return 1;
}

static int l_entropy(lua_State *L) {
    mp_tensor *t;
    size_t P, T;
    const float *A = pattern_arg(L, 1, "entropy", &t, &P, &T);
    double *H = lua_newuserdatauv(L, P * T * sizeof *H, 0);
    mp_status st = mp_analyze_attn_entropy(A, P, T, H);
    if (st != MP_OK) return fail(L, "entropy", st);
    int64_t shape[MP_MAXDIM];
    for (int i = 0; i < t->ndim - 1; i++) shape[i] = t->shape[i];
    push_doubles(L, t->ndim - 1, shape, H);
    return 1;
}

static int l_key_norm_ratio(lua_State *L) {
    size_t T, d;
    const float *k = cloud_arg(L, 1, "key_norm_ratio", &T, &d);
    double r;
    mp_status st = mp_analyze_key_norm_ratio(k, T, d, &r);
    if (st != MP_OK) return fail(L, "key_norm_ratio", st);
    lua_pushnumber(L, r);
    return 1;
}

static int l_max_qk(lua_State *L) {
    size_t tq, dq, tk, dk;
    static const char *const known[] = {"causal", NULL};
    mp_lua_opt_check(L, 3, "mp.analyze.max_qk", known);
    int causal = mp_lua_opt_bool(L, 3, "mp.analyze.max_qk", "causal", 1);
    const float *q = cloud_arg(L, 1, "max_qk", &tq, &dq);
    const float *k = cloud_arg(L, 2, "max_qk", &tk, &dk);
    if (tq != tk || dq != dk)
        return luaL_error(L, "mp.analyze.max_qk: q is [%d, %d] but k is [%d, %d]", (int)tq, (int)dq, (int)tk, (int)dk);
    int64_t T = (int64_t)tq;
    int64_t *am = lua_newuserdatauv(L, tq * sizeof *am, 0);
    mp_tensor *mx = mp_lua_tensor_new(L, 1, &T);
    mp_status st = mp_analyze_max_qk(q, k, tq, dq, causal, mx->data, am);
    if (st != MP_OK) return fail(L, "max_qk", st);
    lua_createtable(L, (int)tq, 0);
    for (size_t i = 0; i < tq; i++) {
        lua_pushinteger(L, am[i] + 1);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

static int l_massive(lua_State *L) {
    static const char *const known[] = {"abs", "rel", "max_hits", NULL};
    mp_lua_opt_check(L, 2, "mp.analyze.massive", known);
    mp_massive_params p = mp_analyze_massive_params_default();
    p.abs_min = mp_lua_opt_num(L, 2, "mp.analyze.massive", "abs", p.abs_min);
    p.rel_min = mp_lua_opt_num(L, 2, "mp.analyze.massive", "rel", p.rel_min);
    double mh = mp_lua_opt_num(L, 2, "mp.analyze.massive", "max_hits", (double)p.max_hits);
    if (!(mh >= 0 && mh <= 1e9)) return luaL_error(L, "mp.analyze.massive: max_hits must be in 0..1e9");
    p.max_hits = (size_t)mh;
    mp_tensor *t = mp_lua_tensor_arg(L, 1);
    if (t->ndim != 2 && t->ndim != 3)
        return luaL_argerror(L, 1, "massive: expected hidden states [L, T, D] or [T, D]");
    size_t Ln = t->ndim == 3 ? (size_t)t->shape[0] : 1;
    size_t T = (size_t)t->shape[t->ndim - 2], D = (size_t)t->shape[t->ndim - 1];
    guard *g = push_guard(L);
    mp_status st = mp_analyze_massive(t->data, Ln, T, D, &p, &g->u.massive);
    if (st != MP_OK) return fail(L, "massive", st);
    g->kind = G_MASSIVE;
    mp_massive *m = &g->u.massive;
    lua_createtable(L, 0, 4);
    push_doubles(L, 2, (int64_t[]){(int64_t)Ln, (int64_t)T}, m->ratio);
    lua_setfield(L, -2, "ratio");
    push_doubles(L, 1, (int64_t[]){(int64_t)Ln}, m->layer_median);
    lua_setfield(L, -2, "median");
    lua_createtable(L, (int)m->n_hits, 0);
    for (size_t i = 0; i < m->n_hits; i++) {
        lua_createtable(L, 0, 4);
        set_num(L, "layer", (double)m->hits[i].layer + 1);
        set_num(L, "pos", (double)m->hits[i].pos + 1);
        set_num(L, "channel", (double)m->hits[i].channel + 1);
        set_num(L, "value", m->hits[i].value);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "hits");
    set_num(L, "n_hits_total", (double)m->n_hits_total);
    guard_release(g);
    return 1;
}

/* ---- bootstrap ---- */

typedef struct {
    lua_State *L;
    int fn;          /* stack index of the Lua statistic */
    int failed;
} lua_stat_ctx;

/* Calls the Lua statistic with a table of the resample; errors become NaN + message. */
static double lua_stat(const double *x, size_t n, void *vctx) {
    lua_stat_ctx *c = vctx;
    lua_State *L = c->L;
    lua_pushvalue(L, c->fn);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushnumber(L, x[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        mp_error(MP_ERR_ARG, "statistic failed: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        c->failed = 1;
        return NAN;
    }
    int isnum;
    double v = lua_tonumberx(L, -1, &isnum);
    lua_pop(L, 1);
    if (!isnum) {
        mp_error(MP_ERR_ARG, "the statistic must return a number");
        return NAN;
    }
    return v;
}

static int l_bootstrap(lua_State *L) {
    static const char *const known[] = {"n", "level", "seed", "stat", NULL};
    mp_lua_opt_check(L, 2, "mp.analyze.bootstrap", known);
    mp_bootstrap_params p = mp_analyze_bootstrap_params_default();
    double nr = mp_lua_opt_num(L, 2, "mp.analyze.bootstrap", "n", (double)p.n_resamples);
    if (!(nr >= 2 && nr <= 1e8)) return luaL_error(L, "mp.analyze.bootstrap: n = %f resamples must be in 2..1e8", nr);
    p.n_resamples = (size_t)nr;
    p.level = mp_lua_opt_num(L, 2, "mp.analyze.bootstrap", "level", p.level);
    double seed = mp_lua_opt_num(L, 2, "mp.analyze.bootstrap", "seed", (double)p.seed);
    if (!(seed >= 0 && seed <= 4294967295.0)) return luaL_error(L, "mp.analyze.bootstrap: seed must be in 0..2^32-1");
    p.seed = (unsigned long)seed;
    mp_tensor *t = mp_lua_tensor_arg(L, 1);
    size_t n = t->numel;
    if (n < 1) return luaL_argerror(L, 1, "bootstrap: no values");
    double *x = lua_newuserdatauv(L, n * sizeof *x, 0);
    for (size_t i = 0; i < n; i++) x[i] = t->data[i];
    mp_statistic_fn fn = NULL;
    void *ctx = NULL;
    lua_stat_ctx lc = {L, 0, 0};
    if (!lua_isnoneornil(L, 2)) {
        lua_getfield(L, 2, "stat");
        if (lua_isfunction(L, -1)) {
            lc.fn = lua_gettop(L);
            fn = lua_stat;
            ctx = &lc;
        } else if (lua_isstring(L, -1)) {
            const char *s = lua_tostring(L, -1);
            if (strcmp(s, "median") == 0) {
                fn = mp_tensor_stat_median; /* ctx: its scratch of n doubles */
                ctx = lua_newuserdatauv(L, n * sizeof(double), 0);
            } else if (strcmp(s, "mean") != 0)
                return luaL_error(L, "mp.analyze.bootstrap: stat '%s' unknown (use \"mean\", \"median\" or a function)", s);
        } else if (!lua_isnil(L, -1))
            return luaL_error(L, "mp.analyze.bootstrap: stat must be \"mean\", \"median\" or a function");
    }
    mp_ci ci;
    mp_status st = mp_analyze_bootstrap(x, n, fn, ctx, &p, &ci);
    if (st != MP_OK) return fail(L, "bootstrap", st);
    lua_createtable(L, 0, 5);
    set_num(L, "estimate", ci.estimate);
    set_num(L, "lo", ci.lo);
    set_num(L, "hi", ci.hi);
    set_num(L, "se", ci.se);
    set_num(L, "n", (double)ci.n_resamples);
    return 1;
}

void mp_lua_open_analyze(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"pca", l_pca},
        {"stable_rank", l_stable_rank},
        {"sigma1_share", l_sigma1_share},
        {"spectrum", l_spectrum},
        {"separation", l_separation},
        {"sinks", l_sinks},
        {"entropy", l_entropy},
        {"key_norm_ratio", l_key_norm_ratio},
        {"max_qk", l_max_qk},
        {"massive", l_massive},
        {"bootstrap", l_bootstrap},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "analyze");
}
