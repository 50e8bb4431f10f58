/* lplot.c — Lua bindings of plots/ as the table `mp.plot` (types "mechprobe.Figure"
 * and "mechprobe.Axes"). Data arguments accept Lua tables or Tensors; rows and
 * columns are 1-based. Every axes method returns the axes, so calls chain.
 *
 *   local fig = mp.plot.figure{rows = 1, cols = 1, width = 432, height = 324,
 *                              title = nil, sharex = false, sharey = false,
 *                              font_size = 10, dpi = 150}
 *       width/height in points (1/72 in); dpi is the default for PNG files.
 *   local ax = fig:axes(r, c)                      -- default (1, 1)
 *   ax:scatter(x, y, {color = values | category = ids_or_names, size = 3, alpha = 0.8,
 *                     label = "...", cmap = "auto", vmin =, vmax =, colorbar_label = "..."})
 *       color = numbers: coloured through cmap with a colorbar;
 *       category = numbers or strings: one Okabe-Ito colour per distinct value,
 *       legend entries named by the values (strings in order of appearance,
 *       numbers ascending); size = marker diameter in points.
 *   ax:heatmap(z, {log = false, mask_upper = false, colorbar = true, cmap = "auto",
 *                  vmin =, vmax =, colorbar_label = "...", xticklabels = {...}, yticklabels = {...}})
 *       z: 2-D Tensor or table of rows; row 1 at the top (queries down, keys across);
 *       mask_upper blanks the cells above the diagonal (causal attention);
 *       x/yticklabels: one string per column / row (e.g. token pieces).
 *   ax:line(x, y, {label =, band_lo =, band_hi =, width = 1.5, dashed = false, marker = false})
 *       x may be nil (1, 2, ..., n); band_lo/band_hi draw a shaded error band.
 *   ax:bars(groups, series, {labels = {...}, err = {...}})
 *       groups: table of group names (x tick labels) or the number of groups;
 *       series: table of series, each a table with one value per group (or a Tensor
 *       [nseries, ngroups]); labels: series names for the legend; err: like series.
 *   ax:set{title =, xlabel =, ylabel =, xlog =, ylog =, xlim = {lo, hi}, ylim = {lo, hi},
 *          legend =}
 *   ax:legend([on = true])                         -- legend in the emptiest corner
 *   fig:set{title = "..."}
 *   fig:save(path [, {dpi =, width =, height =}])  -- .png, .svg or .pdf; returns path
 *   fig:close()                                    -- also on __gc / __close; idempotent
 * Colour maps: "auto" (default: "rdbu_r" centred on 0 for signed values, else
 * "viridis"), "viridis", "magma", "rdbu_r" (diverging), "gray". */
#include "mp_lua.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "figure.h"

#define FIGURE_MT "mechprobe.Figure"
#define AXES_MT "mechprobe.Axes"

typedef struct {
    mp_figure *fig;   /* NULL once closed */
    double width, height, dpi;
} lfigure;

typedef struct {
    int row, col;     /* 0-based; the figure is the userdata's user value 1 */
} laxes;

static lfigure *check_figure(lua_State *L, int idx) {
    lfigure *f = luaL_checkudata(L, idx, FIGURE_MT);
    if (!f->fig) luaL_error(L, "Figure is closed");
    return f;
}

/* The axes at idx and its (open) figure. */
static mp_axes *check_axes(lua_State *L, int idx) {
    laxes *a = luaL_checkudata(L, idx, AXES_MT);
    lua_getiuservalue(L, idx, 1);
    lfigure *f = lua_touserdata(L, -1);
    lua_pop(L, 1);   /* the axes userdata keeps the figure alive */
    if (!f || !f->fig) luaL_error(L, "Axes belongs to a closed Figure");
    return mp_figure_axes(f->fig, a->row, a->col);
}

static int fail(lua_State *L, const char *what) { return luaL_error(L, "%s: %s", what, mp_last_error()); }

/* ---- option helpers ---- */

/* Options go through the one reader (lua/lopt.c); `fn` is each function's
 * name for its messages. */
static mp_cmap opt_cmap(lua_State *L, int opts, const char *fn) {
    const char *s = mp_lua_opt_str(L, opts, fn, "cmap", NULL);
    mp_cmap m = MP_CMAP_AUTO;
    if (s && mp_cmap_parse(s, &m) != MP_OK) luaL_error(L, "%s", mp_last_error());
    return m;
}

/* Values at idx (Tensor or table, flattened); may push a converted Tensor. */
static const float *vec_arg(lua_State *L, int idx, size_t *n) {
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    *n = t->numel;
    return t->data;
}

/* Option `key` of opts as a float vector of length n (or NULL if absent); leaves
 * whatever it converted on the stack. */
static const float *opt_vec(lua_State *L, int opts, const char *key, size_t n, const char *what) {
    if (mp_lua_opt_get(L, opts, key) == LUA_TNIL) { lua_pop(L, 1); return NULL; }
    size_t m;
    const float *v = vec_arg(L, lua_gettop(L), &m);
    if (m != n) luaL_error(L, "%s: %s has %d values, expected %d", what, key, (int)m, (int)n);
    return v;
}

/* ---- figure ---- */

static int l_figure(lua_State *L) {
    static const char fn[] = "mp.plot.figure";
    static const char *const known[] = {"rows", "cols", "font_size", "sharex", "sharey", "title", "width", "height",
                                        "dpi", NULL};
    mp_lua_opt_check(L, 1, fn, known);
    mp_figure_params p = mp_figure_params_default();
    lua_Integer rows = mp_lua_opt_int(L, 1, fn, "rows", 1, 1, 16), cols = mp_lua_opt_int(L, 1, fn, "cols", 1, 1, 16);
    p.font_size = mp_lua_opt_num(L, 1, fn, "font_size", p.font_size);
    p.share_x = mp_lua_opt_bool(L, 1, fn, "sharex", 0);
    p.share_y = mp_lua_opt_bool(L, 1, fn, "sharey", 0);
    p.title = mp_lua_opt_str(L, 1, fn, "title", NULL);
    double w = mp_lua_opt_num(L, 1, fn, "width", 432), h = mp_lua_opt_num(L, 1, fn, "height", 324), dpi = mp_lua_opt_num(L, 1, fn, "dpi", 150);
    if (!(w >= 16 && w <= 1e5 && h >= 16 && h <= 1e5))
        return luaL_error(L, "mp.plot.figure: width and height must be in 16..100000 points");
    if (!(dpi > 0 && dpi <= 4800)) return luaL_error(L, "mp.plot.figure: dpi must be in (0, 4800]");
    lfigure *f = lua_newuserdatauv(L, sizeof *f, 0);
    f->fig = NULL;
    f->width = w; f->height = h; f->dpi = dpi;
    luaL_setmetatable(L, FIGURE_MT);
    if (mp_figure_new((int)rows, (int)cols, &p, &f->fig) != MP_OK) return fail(L, "mp.plot.figure");
    return 1;
}

static int m_fig_axes(lua_State *L) {
    lfigure *f = check_figure(L, 1);
    int R = mp_figure_rows(f->fig), C = mp_figure_cols(f->fig);
    lua_Integer r = mp_lua_arg_optint(L, 2, "fig:axes", "row", 1, 1, R), c = mp_lua_arg_optint(L, 3, "fig:axes", "col", 1, 1, C);
    laxes *a = lua_newuserdatauv(L, sizeof *a, 1);
    a->row = (int)r - 1;
    a->col = (int)c - 1;
    luaL_setmetatable(L, AXES_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static int m_fig_save(lua_State *L) {
    lfigure *f = check_figure(L, 1);
    const char *path = luaL_checkstring(L, 2);
    static const char fn[] = "fig:save";
    static const char *const known[] = {"dpi", "width", "height", NULL};
    mp_lua_opt_check(L, 3, fn, known);
    double dpi = mp_lua_opt_num(L, 3, fn, "dpi", f->dpi), w = mp_lua_opt_num(L, 3, fn, "width", f->width), h = mp_lua_opt_num(L, 3, fn, "height", f->height);
    if (mp_figure_save(f->fig, path, w, h, dpi) != MP_OK) return luaL_error(L, "fig:save: %s", mp_last_error());
    lua_pushvalue(L, 2);
    return 1;
}

static int m_fig_set(lua_State *L) {
    lfigure *f = check_figure(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char fn[] = "fig:set";
    static const char *const known[] = {"title", NULL};
    mp_lua_opt_check(L, 2, fn, known);
    const char *t = mp_lua_opt_str(L, 2, fn, "title", NULL);
    if (t && mp_figure_set_title(f->fig, t) != MP_OK) return fail(L, "fig:set");
    lua_pushvalue(L, 1);
    return 1;
}

static int m_fig_close(lua_State *L) {
    lfigure *f = luaL_checkudata(L, 1, FIGURE_MT);
    mp_figure_free(f->fig);
    f->fig = NULL;
    return 0;
}

static int m_fig_tostring(lua_State *L) {
    lfigure *f = luaL_checkudata(L, 1, FIGURE_MT);
    if (!f->fig) lua_pushstring(L, "Figure(closed)");
    else lua_pushfstring(L, "Figure(%d x %d axes, %f x %f pt)", mp_figure_rows(f->fig), mp_figure_cols(f->fig),
                         f->width, f->height);
    return 1;
}

/* ---- axes ---- */

static int ret_self(lua_State *L) {
    lua_pushvalue(L, 1);
    return 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Categories at idx (table of numbers/strings or Tensor) -> ids [n] in a scratch
 * userdata and names (strings kept alive by a table left on the stack). */
static const int32_t *categories(lua_State *L, int idx, size_t n, const char ***names_out, size_t *nn_out) {
    idx = lua_absindex(L, idx);
    int32_t *ids = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ids, 0);
    lua_newtable(L);                       /* value -> id */
    int map = lua_gettop(L);
    lua_newtable(L);                       /* id (1-based) -> name string */
    int names = lua_gettop(L);
    size_t k = 0;
    mp_tensor *t = mp_lua_tensor_test(L, idx);
    int strings = 0;
    if (!t) {
        luaL_checktype(L, idx, LUA_TTABLE);
        if ((size_t)luaL_len(L, idx) != n) luaL_error(L, "scatter: category has %d values, expected %d", (int)luaL_len(L, idx), (int)n);
        lua_rawgeti(L, idx, 1);
        strings = lua_type(L, -1) == LUA_TSTRING;
        lua_pop(L, 1);
    } else if (t->numel != n)
        luaL_error(L, "scatter: category has %d values, expected %d", (int)t->numel, (int)n);
    if (!strings) {   /* numbers: ids by ascending value */
        double *v = lua_newuserdatauv(L, (n ? n : 1) * sizeof *v, 0), *u = lua_newuserdatauv(L, (n ? n : 1) * sizeof *u, 0);
        for (size_t i = 0; i < n; i++) {
            if (t) v[i] = t->data[i];
            else {
                lua_rawgeti(L, idx, (lua_Integer)i + 1);
                int ok;
                v[i] = lua_tonumberx(L, -1, &ok);
                if (!ok) luaL_error(L, "scatter: category[%d] is neither a number nor a string", (int)i + 1);
                lua_pop(L, 1);
            }
            u[i] = v[i];
        }
        qsort(u, n, sizeof *u, cmp_double);
        for (size_t i = 0; i < n; i++)
            if (i == 0 || u[i] != u[i - 1]) {
                lua_pushnumber(L, u[i]);
                lua_pushinteger(L, (lua_Integer)k);
                lua_rawset(L, map);
                if (u[i] == floor(u[i]) && fabs(u[i]) < 1e15) lua_pushfstring(L, "%I", (lua_Integer)u[i]);
                else lua_pushfstring(L, "%f", u[i]);
                lua_rawseti(L, names, (lua_Integer)++k);
            }
        for (size_t i = 0; i < n; i++) {
            lua_pushnumber(L, v[i]);
            lua_rawget(L, map);
            ids[i] = (int32_t)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 2);
    } else {          /* strings: ids in order of first appearance */
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, idx, (lua_Integer)i + 1);
            if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "scatter: category[%d] is not a string", (int)i + 1);
            lua_pushvalue(L, -1);
            if (lua_rawget(L, map) == LUA_TNIL) {
                lua_pop(L, 1);
                lua_pushvalue(L, -1);
                lua_pushinteger(L, (lua_Integer)k);
                lua_rawset(L, map);
                lua_pushvalue(L, -1);
                lua_rawseti(L, names, (lua_Integer)++k);
                lua_pushinteger(L, (lua_Integer)k - 1);
            }
            ids[i] = (int32_t)lua_tointeger(L, -1);
            lua_pop(L, 2);
        }
    }
    const char **nm = lua_newuserdatauv(L, (k ? k : 1) * sizeof *nm, 0);
    for (size_t i = 0; i < k; i++) {
        lua_rawgeti(L, names, (lua_Integer)i + 1);
        nm[i] = lua_tostring(L, -1);   /* anchored in the names table, which stays on the stack */
        lua_pop(L, 1);
    }
    *names_out = nm;
    *nn_out = k;
    return ids;
}

static int m_scatter(lua_State *L) {
    mp_axes *ax = check_axes(L, 1);
    static const char fn[] = "ax:scatter";
    static const char *const known[] = {"size", "alpha", "vmin", "vmax", "label", "colorbar_label", "cmap", "color",
                                        "category", NULL};
    mp_lua_opt_check(L, 4, fn, known);
    size_t n, ny;
    const float *x = vec_arg(L, 2, &n), *y = vec_arg(L, 3, &ny);
    if (n != ny) return luaL_error(L, "ax:scatter: x has %d values but y has %d", (int)n, (int)ny);
    mp_scatter_style s = mp_scatter_style_default();
    s.size = mp_lua_opt_num(L, 4, fn, "size", s.size);
    s.alpha = mp_lua_opt_num(L, 4, fn, "alpha", s.alpha);
    s.vmin = mp_lua_opt_num(L, 4, fn, "vmin", NAN);
    s.vmax = mp_lua_opt_num(L, 4, fn, "vmax", NAN);
    s.label = mp_lua_opt_str(L, 4, fn, "label", NULL);
    s.colorbar_label = mp_lua_opt_str(L, 4, fn, "colorbar_label", NULL);
    s.cmap = opt_cmap(L, 4, fn);
    s.color = opt_vec(L, 4, "color", n, "ax:scatter");
    if (mp_lua_opt_get(L, 4, "category") != LUA_TNIL) {
        const char **names;
        s.category = categories(L, -1, n, &names, &s.n_category_names);
        s.category_names = names;
    } else lua_pop(L, 1);
    if (mp_axes_scatter(ax, x, y, n, &s) != MP_OK) return fail(L, "ax:scatter");
    return ret_self(L);
}

static int m_line(lua_State *L) {
    mp_axes *ax = check_axes(L, 1);
    static const char fn[] = "ax:line";
    static const char *const known[] = {"label", "width", "dashed", "marker", "band_lo", "band_hi", NULL};
    mp_lua_opt_check(L, 4, fn, known);
    size_t n, nx = 0;
    const float *x = lua_isnil(L, 2) ? NULL : vec_arg(L, 2, &nx);
    const float *y = vec_arg(L, 3, &n);
    if (x && nx != n) return luaL_error(L, "ax:line: x has %d values but y has %d", (int)nx, (int)n);
    mp_line_style s = mp_line_style_default();
    s.label = mp_lua_opt_str(L, 4, fn, "label", NULL);
    s.width = mp_lua_opt_num(L, 4, fn, "width", s.width);
    s.dashed = mp_lua_opt_bool(L, 4, fn, "dashed", 0);
    s.marker = mp_lua_opt_bool(L, 4, fn, "marker", 0);
    s.band_lo = opt_vec(L, 4, "band_lo", n, "ax:line");
    s.band_hi = opt_vec(L, 4, "band_hi", n, "ax:line");
    float *xs = NULL;
    if (!x) {   /* 1-based positions, like Lua indices */
        xs = lua_newuserdatauv(L, (n ? n : 1) * sizeof *xs, 0);
        for (size_t i = 0; i < n; i++) xs[i] = (float)(i + 1);
    }
    if (mp_axes_line(ax, x ? x : xs, y, n, &s) != MP_OK) return fail(L, "ax:line");
    return ret_self(L);
}

/* Option `key` of opts as n strings (a table of n strings, or of numbers, which
 * are converted), anchored in that table left on the stack; NULL if absent. */
static const char **opt_labels(lua_State *L, int opts, const char *fn, const char *key, size_t n, const char *what) {
    if (mp_lua_opt_get(L, opts, key) == LUA_TNIL) { lua_pop(L, 1); return NULL; }
    int li = lua_gettop(L);
    if (!lua_istable(L, li)) { luaL_error(L, "%s: %s must be a table of strings (one per %s)", fn, key, what); return NULL; }
    if ((size_t)luaL_len(L, li) != n)
        luaL_error(L, "%s: %s has %d labels but there are %d %ss", fn, key, (int)luaL_len(L, li), (int)n, what);
    const char **v = lua_newuserdatauv(L, (n ? n : 1) * sizeof *v, 0);
    for (size_t i = 0; i < n; i++) {
        int t = lua_rawgeti(L, li, (lua_Integer)i + 1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER) luaL_error(L, "%s: %s[%d] is not a string", fn, key, (int)i + 1);
        if (t == LUA_TNUMBER) {   /* keep the string form anchored in the table */
            lua_tostring(L, -1);
            lua_pushvalue(L, -1);
            lua_rawseti(L, li, (lua_Integer)i + 1);
        }
        v[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    return v;
}

static int m_heatmap(lua_State *L) {
    mp_axes *ax = check_axes(L, 1);
    static const char fn[] = "ax:heatmap";
    static const char *const known[] = {"log", "mask_upper", "colorbar", "cmap", "vmin", "vmax", "colorbar_label",
                                        "xticklabels", "yticklabels", NULL};
    mp_lua_opt_check(L, 3, fn, known);
    mp_tensor *t = mp_lua_tensor_arg(L, 2);
    if (t->ndim != 2) return luaL_argerror(L, 2, "ax:heatmap: expected a 2-D Tensor or table of rows");
    mp_heatmap_style s = mp_heatmap_style_default();
    s.log = mp_lua_opt_bool(L, 3, fn, "log", 0);
    s.mask_upper = mp_lua_opt_bool(L, 3, fn, "mask_upper", 0);
    s.colorbar = mp_lua_opt_bool(L, 3, fn, "colorbar", 1);
    s.cmap = opt_cmap(L, 3, fn);
    s.vmin = mp_lua_opt_num(L, 3, fn, "vmin", NAN);
    s.vmax = mp_lua_opt_num(L, 3, fn, "vmax", NAN);
    s.colorbar_label = mp_lua_opt_str(L, 3, fn, "colorbar_label", NULL);
    s.xticklabels = opt_labels(L, 3, fn, "xticklabels", (size_t)t->shape[1], "column");
    s.yticklabels = opt_labels(L, 3, fn, "yticklabels", (size_t)t->shape[0], "row");
    if (mp_axes_heatmap(ax, t->data, (size_t)t->shape[0], (size_t)t->shape[1], &s) != MP_OK) return fail(L, "ax:heatmap");
    return ret_self(L);
}

/* series [nseries, ngroups] (table of tables or Tensor) -> values [ngroups, nseries]. */
static float *bar_matrix(lua_State *L, int idx, size_t ngroups, size_t *nseries, const char *what) {
    idx = lua_absindex(L, idx);
    mp_tensor *t = mp_lua_tensor_arg(L, idx);
    size_t ns, ng;
    if (t->ndim == 1) { ns = 1; ng = (size_t)t->shape[0]; }
    else if (t->ndim == 2) { ns = (size_t)t->shape[0]; ng = (size_t)t->shape[1]; }
    else { luaL_error(L, "ax:bars: %s must be a table of series (one value per group)", what); return NULL; }
    if (ng != ngroups) luaL_error(L, "ax:bars: %s has %d values per series but there are %d groups", what, (int)ng, (int)ngroups);
    if (*nseries && ns != *nseries) luaL_error(L, "ax:bars: %s has %d series, expected %d", what, (int)ns, (int)*nseries);
    float *v = lua_newuserdatauv(L, (ns * ng > 0 ? ns * ng : 1) * sizeof *v, 0);
    for (size_t s = 0; s < ns; s++)
        for (size_t g = 0; g < ng; g++) v[g * ns + s] = t->data[s * ng + g];
    *nseries = ns;
    return v;
}

static int m_bars(lua_State *L) {
    mp_axes *ax = check_axes(L, 1);
    static const char fn[] = "ax:bars";
    static const char *const known[] = {"err", "labels", NULL};
    mp_lua_opt_check(L, 4, fn, known);
    size_t ngroups;
    const char **glabels = NULL;
    if (lua_type(L, 2) == LUA_TNUMBER) {
        lua_Integer g = mp_lua_arg_int(L, 2, fn, "number of groups", 1, 10000);
        ngroups = (size_t)g;
    } else {
        luaL_checktype(L, 2, LUA_TTABLE);
        ngroups = (size_t)luaL_len(L, 2);
        if (ngroups < 1 || ngroups > 10000) return luaL_argerror(L, 2, "ax:bars: 1..10000 group names expected");
        glabels = lua_newuserdatauv(L, ngroups * sizeof *glabels, 0);
        for (size_t g = 0; g < ngroups; g++) {
            lua_rawgeti(L, 2, (lua_Integer)g + 1);
            glabels[g] = lua_tostring(L, -1);   /* strings stay anchored in the groups table */
            if (!glabels[g]) return luaL_error(L, "ax:bars: group name %d is not a string", (int)g + 1);
            lua_pop(L, 1);
        }
    }
    size_t ns = 0;
    float *v = bar_matrix(L, 3, ngroups, &ns, "series");
    float *err = NULL;
    if (mp_lua_opt_get(L, 4, "err") != LUA_TNIL) err = bar_matrix(L, -1, ngroups, &ns, "err");
    else lua_pop(L, 1);
    const char **slabels = NULL;
    if (mp_lua_opt_get(L, 4, "labels") != LUA_TNIL) {
        int li = lua_gettop(L);
        luaL_checktype(L, li, LUA_TTABLE);
        if ((size_t)luaL_len(L, li) != ns) return luaL_error(L, "ax:bars: %d labels for %d series", (int)luaL_len(L, li), (int)ns);
        slabels = lua_newuserdatauv(L, ns * sizeof *slabels, 0);
        for (size_t s = 0; s < ns; s++) {
            lua_rawgeti(L, li, (lua_Integer)s + 1);
            slabels[s] = lua_tostring(L, -1);
            if (!slabels[s]) return luaL_error(L, "ax:bars: label %d is not a string", (int)s + 1);
            lua_pop(L, 1);
        }
    } else lua_pop(L, 1);
    mp_bars_style bs = {glabels, slabels, err};
    if (mp_axes_bars(ax, v, ngroups, ns, &bs) != MP_OK) return fail(L, "ax:bars");
    return ret_self(L);
}

static void lim_opt(lua_State *L, mp_axes *ax, const char *key, int y) {
    if (mp_lua_opt_get(L, 2, key) != LUA_TNIL) {
        int li = lua_gettop(L);
        if (!lua_istable(L, li)) luaL_error(L, "ax:set: %s must be {lo, hi}", key);
        lua_rawgeti(L, li, 1);
        lua_rawgeti(L, li, 2);
        double lo = lua_isnil(L, -2) ? NAN : luaL_checknumber(L, -2), hi = lua_isnil(L, -1) ? NAN : luaL_checknumber(L, -1);
        lua_pop(L, 2);
        if ((y ? mp_axes_set_ylim(ax, lo, hi) : mp_axes_set_xlim(ax, lo, hi)) != MP_OK) fail(L, "ax:set");
    }
    lua_pop(L, 1);
}

static int m_set(lua_State *L) {
    mp_axes *ax = check_axes(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char fn[] = "ax:set";
    static const char *const known[] = {"title", "xlabel", "ylabel", "xlog", "ylog", "legend", "xlim", "ylim", NULL};
    mp_lua_opt_check(L, 2, fn, known);
    const char *s;
    if ((s = mp_lua_opt_str(L, 2, fn, "title", NULL)) && mp_axes_set_title(ax, s) != MP_OK) return fail(L, "ax:set");
    if ((s = mp_lua_opt_str(L, 2, fn, "xlabel", NULL)) && mp_axes_set_xlabel(ax, s) != MP_OK) return fail(L, "ax:set");
    if ((s = mp_lua_opt_str(L, 2, fn, "ylabel", NULL)) && mp_axes_set_ylabel(ax, s) != MP_OK) return fail(L, "ax:set");
    int b;
    if ((b = mp_lua_opt_bool(L, 2, fn, "xlog", -1)) >= 0) mp_axes_set_xlog(ax, b);
    if ((b = mp_lua_opt_bool(L, 2, fn, "ylog", -1)) >= 0) mp_axes_set_ylog(ax, b);
    if ((b = mp_lua_opt_bool(L, 2, fn, "legend", -1)) >= 0) mp_axes_set_legend(ax, b);
    lim_opt(L, ax, "xlim", 0);
    lim_opt(L, ax, "ylim", 1);
    return ret_self(L);
}

static int m_legend(lua_State *L) {
    mp_axes *ax = check_axes(L, 1);
    mp_axes_set_legend(ax, lua_isnone(L, 2) ? 1 : lua_toboolean(L, 2));
    return ret_self(L);
}

static int m_axes_tostring(lua_State *L) {
    laxes *a = luaL_checkudata(L, 1, AXES_MT);
    lua_pushfstring(L, "Axes(%d, %d)", a->row + 1, a->col + 1);
    return 1;
}

void mp_lua_open_plot(lua_State *L) {
    static const luaL_Reg fig_methods[] = {
        {"axes", m_fig_axes}, {"save", m_fig_save}, {"set", m_fig_set}, {"close", m_fig_close}, {NULL, NULL},
    };
    static const luaL_Reg ax_methods[] = {
        {"scatter", m_scatter}, {"line", m_line}, {"heatmap", m_heatmap}, {"bars", m_bars},
        {"set", m_set},         {"legend", m_legend}, {NULL, NULL},
    };
    if (luaL_newmetatable(L, FIGURE_MT)) {
        lua_pushcfunction(L, m_fig_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, m_fig_close);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, m_fig_tostring);
        lua_setfield(L, -2, "__tostring");
        luaL_newlib(L, fig_methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, AXES_MT)) {
        lua_pushcfunction(L, m_axes_tostring);
        lua_setfield(L, -2, "__tostring");
        luaL_newlib(L, ax_methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"figure", l_figure}, {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "plot");
}
