/* figure.c — figure and axes objects: creation, decorations (titles, labels,
 * scales, limits, legend) and the series constructors, which validate and copy
 * the caller's data. Drawing lives in plot_draw.c / plot_series.c, files in
 * plot_save.c. */
#include "plot_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mp_figure_params mp_figure_params_default(void) {
    mp_figure_params p = {.title = NULL, .font_size = 10.0, .share_x = 0, .share_y = 0};
    return p;
}

mp_scatter_style mp_scatter_style_default(void) {
    mp_scatter_style s;
    memset(&s, 0, sizeof s);
    s.cmap = MP_CMAP_AUTO;
    s.vmin = s.vmax = NAN;
    s.size = 3.0;
    s.alpha = 0.8;
    return s;
}

mp_line_style mp_line_style_default(void) {
    mp_line_style s = {.label = NULL, .band_lo = NULL, .band_hi = NULL, .width = 1.5, .dashed = 0, .marker = 0};
    return s;
}

mp_heatmap_style mp_heatmap_style_default(void) {
    mp_heatmap_style s = {.log = 0, .mask_upper = 0, .colorbar = 1, .cmap = MP_CMAP_AUTO,
                          .vmin = NAN, .vmax = NAN, .colorbar_label = NULL, .xticklabels = NULL,
                          .yticklabels = NULL};
    return s;
}

static char *dup_str(const char *s, mp_status *st) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = mp_malloc(n, "figure text");
    if (!d) *st = MP_ERR_NOMEM;
    else memcpy(d, s, n);
    return d;
}

static mp_status set_str(char **dst, const char *s) {
    mp_status st = MP_OK;
    char *d = dup_str(s, &st);
    if (st != MP_OK) return st;
    free(*dst);
    *dst = d;
    return MP_OK;
}

static void free_strs(char **v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void series_free(mp_series *s) {
    free(s->x); free(s->y); free(s->c); free(s->cat); free(s->lo); free(s->hi);
    free(s->z); free(s->err); free(s->label); free(s->cbar_label);
    free_strs(s->names, s->n_names);
    free_strs(s->glabels, s->glabels ? s->rows : 0);
    free_strs(s->xtl, s->xtl ? s->cols : 0);
    free_strs(s->ytl, s->ytl ? s->rows : 0);
    memset(s, 0, sizeof *s);
}

mp_status mp_figure_new(int rows, int cols, const mp_figure_params *p, mp_figure **out) {
    mp_figure_params def = mp_figure_params_default();
    mp_status st = MP_OK;
    *out = NULL;
    if (!p) p = &def;
    if (rows < 1 || rows > 16 || cols < 1 || cols > 16)
        return mp_error(MP_ERR_ARG, "figure: rows = %d and cols = %d must be in 1..16", rows, cols);
    if (!(p->font_size >= 2 && p->font_size <= 72))
        return mp_error(MP_ERR_ARG, "figure: font_size = %g pt must be in [2, 72]", p->font_size);
    mp_figure *f = mp_calloc(1, sizeof *f, "figure");
    if (!f) return MP_ERR_NOMEM;
    f->ax = mp_calloc((size_t)rows * (size_t)cols, sizeof *f->ax, "figure axes");
    if (!f->ax) { free(f); return MP_ERR_NOMEM; }
    f->rows = rows; f->cols = cols;
    f->font = p->font_size;
    f->share_x = p->share_x; f->share_y = p->share_y;
    for (int i = 0; i < rows * cols; i++) {
        mp_axes *a = &f->ax[i];
        a->fig = f; a->row = i / cols; a->col = i % cols;
        a->xlim[0] = a->xlim[1] = a->ylim[0] = a->ylim[1] = NAN;
    }
    f->title = dup_str(p->title, &st);
    if (st != MP_OK) { mp_figure_free(f); return st; }
    *out = f;
    return MP_OK;
}

void mp_figure_free(mp_figure *f) {
    if (!f) return;
    for (int i = 0; i < f->rows * f->cols; i++) {
        mp_axes *a = &f->ax[i];
        for (size_t k = 0; k < a->ns; k++) series_free(&a->s[k]);
        free(a->s); free(a->title); free(a->xlabel); free(a->ylabel);
    }
    free(f->ax);
    free(f->title);
    free(f);
}

mp_axes *mp_figure_axes(mp_figure *f, int row, int col) {
    if (row < 0 || row >= f->rows || col < 0 || col >= f->cols) {
        mp_error(MP_ERR_ARG, "figure: axes (%d, %d) is outside the %d x %d grid", row, col, f->rows, f->cols);
        return NULL;
    }
    return &f->ax[row * f->cols + col];
}

int mp_figure_rows(const mp_figure *f) { return f->rows; }
int mp_figure_cols(const mp_figure *f) { return f->cols; }
mp_figure_stats mp_figure_last_stats(const mp_figure *f) { return f->stats; }
mp_status mp_figure_set_title(mp_figure *f, const char *t) { return set_str(&f->title, t); }

mp_status mp_axes_set_title(mp_axes *ax, const char *s) { return set_str(&ax->title, s); }
mp_status mp_axes_set_xlabel(mp_axes *ax, const char *s) { return set_str(&ax->xlabel, s); }
mp_status mp_axes_set_ylabel(mp_axes *ax, const char *s) { return set_str(&ax->ylabel, s); }
void mp_axes_set_xlog(mp_axes *ax, int on) { ax->xlog = on != 0; }
void mp_axes_set_ylog(mp_axes *ax, int on) { ax->ylog = on != 0; }
void mp_axes_set_legend(mp_axes *ax, int on) { ax->legend = on != 0; }

static mp_status set_lim(double *lim, double lo, double hi, const char *which) {
    if (!isnan(lo) && !isnan(hi) && !(lo < hi))
        return mp_error(MP_ERR_ARG, "axes: %s = [%g, %g] must have lo < hi", which, lo, hi);
    if (isinf(lo) || isinf(hi)) return mp_error(MP_ERR_ARG, "axes: %s must be finite", which);
    lim[0] = lo; lim[1] = hi;
    return MP_OK;
}
mp_status mp_axes_set_xlim(mp_axes *ax, double lo, double hi) { return set_lim(ax->xlim, lo, hi, "xlim"); }
mp_status mp_axes_set_ylim(mp_axes *ax, double lo, double hi) { return set_lim(ax->ylim, lo, hi, "ylim"); }

/* Appends a zeroed series to ax (or NULL on OOM / too many series). */
static mp_series *new_series(mp_axes *ax, mp_series_kind kind) {
    if (ax->ns >= 4096) { mp_error(MP_ERR_ARG, "axes: too many series (4096)"); return NULL; }
    if (ax->ns == ax->cap) {
        size_t nc = ax->cap ? 2 * ax->cap : 4;
        mp_series *ns = realloc(ax->s, nc * sizeof *ns);
        if (!ns) { mp_error(MP_ERR_NOMEM, "axes: out of memory for a series"); return NULL; }
        ax->s = ns;
        ax->cap = nc;
    }
    mp_series *s = &ax->s[ax->ns];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->vmin = s->vmax = NAN;
    s->color_index = ax->next_color;
    return s;
}

/* Copies n floats (NULL src gives NULL). */
static float *dup_floats(const float *src, size_t n, const char *what, mp_status *st) {
    if (!src) return NULL;
    size_t bytes;
    if (mp_mul_size(n, sizeof(float), &bytes)) { *st = mp_error(MP_ERR_ARG, "%s: size overflows", what); return NULL; }
    float *d = mp_malloc(bytes, what);
    if (!d) { *st = MP_ERR_NOMEM; return NULL; }
    memcpy(d, src, bytes);
    return d;
}

static char **dup_strs(const char *const *v, size_t n, mp_status *st) {
    if (!v) return NULL;
    char **d = mp_calloc(n ? n : 1, sizeof *d, "figure labels");
    if (!d) { *st = MP_ERR_NOMEM; return NULL; }
    for (size_t i = 0; i < n && *st == MP_OK; i++) d[i] = dup_str(v[i] ? v[i] : "", st);
    return d;
}

/* The colour map and limits of values z [rows, cols] (cells above the diagonal
 * skipped when mask_upper, non-finite values ignored): MP_CMAP_AUTO becomes the
 * diverging rdbu_r for signed data (some value < 0 and some > 0) and viridis
 * otherwise; with a diverging map on a linear scale the limits are centred on 0:
 * a missing one mirrors the given one, and with neither vmin = -vmax = max |z|. */
static void resolve_colors(const float *z, size_t rows, size_t cols, int mask_upper, int log, mp_cmap want,
                           double *vmin, double *vmax, mp_cmap *out) {
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            double v = z[i * cols + j];
            if ((mask_upper && j > i) || !isfinite(v)) continue;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    mp_cmap m = want;
    if (m == MP_CMAP_AUTO) m = !log && lo < 0 && hi > 0 ? MP_CMAP_RDBU_R : MP_CMAP_VIRIDIS;
    *out = m;
    if (m != MP_CMAP_RDBU_R || log) return;
    if (isnan(*vmin) && isnan(*vmax)) {
        double a = fmax(fabs(lo), fabs(hi));
        if (!isfinite(a) || a == 0) return;   /* no data or all zero: the automatic range */
        *vmin = -a;
        *vmax = a;
    } else if (isnan(*vmin) && *vmax > 0) *vmin = -*vmax;
    else if (isnan(*vmax) && *vmin < 0) *vmax = -*vmin;
}

/* Finishes a series: on failure frees what was copied and drops it. */
static mp_status commit(mp_axes *ax, mp_series *s, mp_status st, size_t colors_used) {
    if (st != MP_OK) { series_free(s); return st; }
    ax->ns++;
    ax->next_color += colors_used;
    return MP_OK;
}

mp_status mp_axes_scatter(mp_axes *ax, const float *x, const float *y, size_t n, const mp_scatter_style *st_) {
    mp_scatter_style def = mp_scatter_style_default();
    const mp_scatter_style *p = st_ ? st_ : &def;
    mp_status st = MP_OK;
    if (!x || !y) return mp_error(MP_ERR_ARG, "scatter: x and y are required");
    if (p->color && p->category) return mp_error(MP_ERR_ARG, "scatter: give color values or categories, not both");
    if (!(p->size > 0 && p->size < 100)) return mp_error(MP_ERR_ARG, "scatter: size = %g pt must be in (0, 100)", p->size);
    if (!(p->alpha > 0 && p->alpha <= 1)) return mp_error(MP_ERR_ARG, "scatter: alpha = %g must be in (0, 1]", p->alpha);
    if ((int)p->cmap < (int)MP_CMAP_AUTO || p->cmap >= MP_CMAP_COUNT) return mp_error(MP_ERR_ARG, "scatter: bad colour map");
    if (p->category)
        for (size_t i = 0; i < n; i++)
            if (p->category[i] < 0) return mp_error(MP_ERR_ARG, "scatter: category[%zu] = %d is negative", i, (int)p->category[i]);
    mp_series *s = new_series(ax, MP_SERIES_SCATTER);
    if (!s) return mp_error_prefix(ax->ns >= 4096 ? MP_ERR_ARG : MP_ERR_NOMEM, "scatter");
    s->n = n;
    s->x = dup_floats(x, n, "scatter x", &st);
    if (st == MP_OK) s->y = dup_floats(y, n, "scatter y", &st);
    if (st == MP_OK) s->c = dup_floats(p->color, n, "scatter colours", &st);
    if (st == MP_OK && p->category) {
        s->cat = mp_malloc(n * sizeof *s->cat, "scatter categories");
        if (!s->cat) st = MP_ERR_NOMEM;
        else memcpy(s->cat, p->category, n * sizeof *s->cat);
    }
    if (st == MP_OK && p->category_names) {
        s->names = dup_strs(p->category_names, p->n_category_names, &st);
        s->n_names = p->n_category_names;
    }
    if (st == MP_OK) s->label = dup_str(p->label, &st);
    if (st == MP_OK) s->cbar_label = dup_str(p->colorbar_label, &st);
    s->vmin = p->vmin; s->vmax = p->vmax;
    s->cmap = MP_CMAP_VIRIDIS;
    if (p->color) resolve_colors(p->color, 1, n, 0, 0, p->cmap, &s->vmin, &s->vmax, &s->cmap);
    s->size = p->size; s->alpha = p->alpha;
    s->colorbar = p->color != NULL;
    /* Categories use palette colours by id; a plain series takes the next colour. */
    return commit(ax, s, st, p->color || p->category ? 0 : 1);
}

mp_status mp_axes_line(mp_axes *ax, const float *x, const float *y, size_t n, const mp_line_style *st_) {
    mp_line_style def = mp_line_style_default();
    const mp_line_style *p = st_ ? st_ : &def;
    mp_status st = MP_OK;
    if (!y) return mp_error(MP_ERR_ARG, "line: y is required");
    if ((p->band_lo == NULL) != (p->band_hi == NULL)) return mp_error(MP_ERR_ARG, "line: give both band_lo and band_hi");
    if (!(p->width > 0 && p->width < 50)) return mp_error(MP_ERR_ARG, "line: width = %g pt must be in (0, 50)", p->width);
    mp_series *s = new_series(ax, MP_SERIES_LINE);
    if (!s) return mp_error_prefix(ax->ns >= 4096 ? MP_ERR_ARG : MP_ERR_NOMEM, "line");
    s->n = n;
    if (x) s->x = dup_floats(x, n, "line x", &st);
    else if ((s->x = mp_malloc((n ? n : 1) * sizeof *s->x, "line x")) != NULL)
        for (size_t i = 0; i < n; i++) s->x[i] = (float)i;
    else st = MP_ERR_NOMEM;
    if (st == MP_OK) s->y = dup_floats(y, n, "line y", &st);
    if (st == MP_OK) s->lo = dup_floats(p->band_lo, n, "line band", &st);
    if (st == MP_OK) s->hi = dup_floats(p->band_hi, n, "line band", &st);
    if (st == MP_OK) s->label = dup_str(p->label, &st);
    s->width = p->width; s->dashed = p->dashed; s->marker = p->marker;
    s->alpha = 1.0;
    return commit(ax, s, st, 1);
}

mp_status mp_axes_heatmap(mp_axes *ax, const float *z, size_t rows, size_t cols, const mp_heatmap_style *st_) {
    mp_heatmap_style def = mp_heatmap_style_default();
    const mp_heatmap_style *p = st_ ? st_ : &def;
    mp_status st = MP_OK;
    size_t n;
    if (!z || rows < 1 || cols < 1) return mp_error(MP_ERR_ARG, "heatmap: needs a non-empty 2-D array");
    if (rows > 32767 || cols > 32767 || mp_mul_size(rows, cols, &n))
        return mp_error(MP_ERR_ARG, "heatmap: %zu x %zu cells exceed cairo's 32767-pixel image limit", rows, cols);
    if ((int)p->cmap < (int)MP_CMAP_AUTO || p->cmap >= MP_CMAP_COUNT) return mp_error(MP_ERR_ARG, "heatmap: bad colour map");
    if (!isnan(p->vmin) && !isnan(p->vmax) && !(p->vmin < p->vmax))
        return mp_error(MP_ERR_ARG, "heatmap: vmin = %g must be below vmax = %g", p->vmin, p->vmax);
    if (p->log && ((!isnan(p->vmin) && p->vmin <= 0) || (!isnan(p->vmax) && p->vmax <= 0)))
        return mp_error(MP_ERR_ARG, "heatmap: a log colour scale needs vmin, vmax > 0");
    mp_series *s = new_series(ax, MP_SERIES_HEATMAP);
    if (!s) return mp_error_prefix(ax->ns >= 4096 ? MP_ERR_ARG : MP_ERR_NOMEM, "heatmap");
    s->rows = rows; s->cols = cols;
    s->z = dup_floats(z, n, "heatmap cells", &st);
    if (st == MP_OK) s->cbar_label = dup_str(p->colorbar_label, &st);
    if (st == MP_OK) s->xtl = dup_strs(p->xticklabels, cols, &st);
    if (st == MP_OK) s->ytl = dup_strs(p->yticklabels, rows, &st);
    s->log = p->log; s->mask_upper = p->mask_upper; s->colorbar = p->colorbar;
    s->vmin = p->vmin; s->vmax = p->vmax;
    if (st == MP_OK) resolve_colors(z, rows, cols, p->mask_upper, p->log, p->cmap, &s->vmin, &s->vmax, &s->cmap);
    return commit(ax, s, st, 0);
}

mp_status mp_axes_bars(mp_axes *ax, const float *values, size_t ngroups, size_t nseries, const mp_bars_style *st_) {
    mp_bars_style def = {NULL, NULL, NULL};
    const mp_bars_style *p = st_ ? st_ : &def;
    mp_status st = MP_OK;
    size_t n;
    if (!values || ngroups < 1 || nseries < 1) return mp_error(MP_ERR_ARG, "bars: needs at least one group and one series");
    if (ngroups > 10000 || nseries > 64 || mp_mul_size(ngroups, nseries, &n))
        return mp_error(MP_ERR_ARG, "bars: %zu groups x %zu series is too many (max 10000 x 64)", ngroups, nseries);
    if (p->err)
        for (size_t i = 0; i < n; i++)
            if (p->err[i] < 0) return mp_error(MP_ERR_ARG, "bars: error bar %zu is negative", i);
    mp_series *s = new_series(ax, MP_SERIES_BARS);
    if (!s) return mp_error_prefix(ax->ns >= 4096 ? MP_ERR_ARG : MP_ERR_NOMEM, "bars");
    s->rows = ngroups; s->cols = nseries;
    s->z = dup_floats(values, n, "bar values", &st);
    if (st == MP_OK) s->err = dup_floats(p->err, n, "bar errors", &st);
    if (st == MP_OK) s->glabels = dup_strs(p->group_labels, ngroups, &st);
    if (st == MP_OK && p->series_labels) {
        s->names = dup_strs(p->series_labels, nseries, &st);
        s->n_names = nseries;
    }
    s->alpha = 1.0;
    return commit(ax, s, st, nseries);
}
