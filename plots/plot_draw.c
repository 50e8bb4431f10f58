/* plot_draw.c — figure layout and axes furniture: limits (with sharing), ticks
 * that do not collide, margins measured from the actual labels (aligned across
 * each grid row and column), frame, grid, tick labels, axis labels, titles,
 * colorbars and legends. Series themselves are drawn by plot_series.c. */
#include "plot_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INK 0.15    /* gray level of text */
#define SPINE 0.3   /* gray level of the frame and ticks */

static mp_fonts fonts_of(const mp_figure *f) {
    mp_fonts F = {f->font, 0.85 * f->font, f->font, 1.1 * f->font, 1.25 * f->font};
    return F;
}

static int has_kind(const mp_axes *ax, mp_series_kind k) {
    for (size_t i = 0; i < ax->ns; i++)
        if (ax->s[i].kind == k) return 1;
    return 0;
}

static mp_status user_lim(const mp_axes *ax, const double lim[2], int log, const char *which, double r[2]) {
    for (int i = 0; i < 2; i++) {
        if (isnan(lim[i])) continue;
        if (log && !(lim[i] > 0))
            return mp_error(MP_ERR_ARG, "axes (%d, %d): %s = %g must be > 0 on a log axis", ax->row + 1, ax->col + 1, which, lim[i]);
        r[i] = log ? log10(lim[i]) : lim[i];
    }
    if (!(r[0] < r[1]))
        return mp_error(MP_ERR_ARG, "axes (%d, %d): %s gives an empty range [%g, %g]", ax->row + 1, ax->col + 1, which,
                        log ? pow(10, r[0]) : r[0], log ? pow(10, r[1]) : r[1]);
    return MP_OK;
}

/* Pads [lo, hi] by 5% (only where there is data beyond zero for bars). */
static void pad_range(double r[2], int tight, int bars_base) {
    if (!(r[0] <= r[1])) { r[0] = 0; r[1] = 1; return; }
    if (r[0] == r[1]) {
        double d = fabs(r[0]) > 0 ? 0.1 * fabs(r[0]) : 0.5;
        r[0] -= d; r[1] += d;
        return;
    }
    if (tight) return;
    double span = r[1] - r[0];
    if (!(bars_base && r[0] == 0)) r[0] -= 0.05 * span;
    if (!(bars_base && r[1] == 0)) r[1] += 0.05 * span;
}

/* Labels of the x (y = 0) or y ticks: bar group names, or the last heatmap's tick
 * labels; NULL (and *n = 0) if none. */
static const char *const *tick_labels(const mp_axes *ax, int y, size_t *n) {
    for (size_t i = ax->ns; i-- > 0;) {
        const mp_series *s = &ax->s[i];
        if (!y && s->kind == MP_SERIES_BARS) { *n = s->rows; return (const char *const *)s->glabels; }
        if (s->kind == MP_SERIES_HEATMAP && (y ? s->ytl : s->xtl)) {
            *n = y ? s->rows : s->cols;
            return (const char *const *)(y ? s->ytl : s->xtl);
        }
    }
    *n = 0;
    return NULL;
}

static mp_status axes_limits(mp_layout *L) {
    mp_axes *ax = L->ax;
    int heat = has_kind(ax, MP_SERIES_HEATMAP), bars = has_kind(ax, MP_SERIES_BARS);
    memset(&L->X, 0, sizeof L->X);
    memset(&L->Y, 0, sizeof L->Y);
    L->X.log = ax->xlog && !heat && !bars;
    L->Y.log = ax->ylog && !heat;
    size_t nl;
    L->X.categorical = bars ? 1 : heat ? (tick_labels(ax, 0, &nl) ? 1 : 2) : 0;
    L->Y.categorical = heat ? (tick_labels(ax, 1, &nl) ? 1 : 2) : 0;
    L->Y.inverted = heat;
    L->X.tight = heat || bars;
    L->Y.tight = heat;
    double xr[2] = {INFINITY, -INFINITY}, yr[2] = {INFINITY, -INFINITY};
    for (size_t i = 0; i < ax->ns; i++) {
        double sx[2], sy[2];
        if (!mp_series_extent(&ax->s[i], L->X.log, L->Y.log, sx, sy)) continue;
        xr[0] = fmin(xr[0], sx[0]); xr[1] = fmax(xr[1], sx[1]);
        yr[0] = fmin(yr[0], sy[0]); yr[1] = fmax(yr[1], sy[1]);
    }
    pad_range(xr, L->X.tight, 0);
    pad_range(yr, L->Y.tight, bars && !L->Y.log);
    mp_status st;
    if ((st = user_lim(ax, ax->xlim, L->X.log, "xlim", xr)) != MP_OK) return st;
    if ((st = user_lim(ax, ax->ylim, L->Y.log, "ylim", yr)) != MP_OK) return st;
    L->X.lo = xr[0]; L->X.hi = xr[1];
    L->Y.lo = yr[0]; L->Y.hi = yr[1];
    return MP_OK;
}


static void measure(cairo_t *cr, mp_axis *a, double size) {
    a->max_w = 0;
    int sup = 0;
    for (size_t i = 0; i < a->nt; i++) {
        double w = mp_label_width(cr, &a->lab[i], size);
        if (w > a->max_w) a->max_w = w;
        sup |= a->lab[i].sup[0] != 0;
    }
    a->max_h = (0.94 + (sup ? 0.3 : 0)) * size;
}

static size_t clampz(double v, size_t lo, size_t hi) {
    if (!(v > (double)lo)) return lo;
    if (v > (double)hi) return hi;
    return (size_t)v;
}

/* Ticks for x (no overlapping labels) and y (enough vertical room) given the
 * approximate plot size w x h. */
static void make_ticks(cairo_t *cr, mp_layout *L, const mp_fonts *F, double w, double h) {
    size_t ncat;
    const char *const *cat = tick_labels(L->ax, 0, &ncat);
    L->X.rot = 0;
    if (L->X.categorical == 1) {
        mp_axis_ticks(&L->X, MP_MAX_TICKS, cat, ncat);
        measure(cr, &L->X, F->tick);
        double sp = w / (L->X.hi - L->X.lo);
        if (L->X.max_w + 0.5 * F->base > sp * (double)(L->X.nt > 1 ? L->X.t[1] - L->X.t[0] : 1)) {
            L->X.rot = -M_PI / 4;                  /* long group names: 45-degree labels */
            if (sp < 1.4 * F->tick) {              /* and too dense: label every k-th group */
                mp_axis_ticks(&L->X, clampz(w / (1.4 * F->tick), 2, MP_MAX_TICKS), cat, ncat);
                measure(cr, &L->X, F->tick);
            }
        }
    } else {
        /* Fewer ticks until the labels stop colliding, but keep at least 3 if possible. */
        mp_axis *prev = malloc(sizeof *prev);
        for (size_t target = clampz(w / (5.0 * F->base), 2, 10);; target--) {
            if (prev) *prev = L->X;
            mp_axis_ticks(&L->X, target, NULL, 0);
            measure(cr, &L->X, F->tick);
            if (prev && target < clampz(w / (5.0 * F->base), 2, 10) && L->X.nt < 3 && prev->nt >= 3) {
                L->X = *prev;
                break;
            }
            double sp = L->X.nt > 1 ? w * fabs(L->X.t[1] - L->X.t[0]) / (L->X.hi - L->X.lo) : w;
            if (L->X.max_w + 0.9 * F->base <= sp || target <= 2) break;
        }
        free(prev);
    }
    if (L->Y.categorical == 1) {   /* labelled rows: every k-th when they would overlap */
        size_t nyl;
        const char *const *yl = tick_labels(L->ax, 1, &nyl);
        mp_axis_ticks(&L->Y, clampz(h / (1.25 * F->tick), 2, MP_MAX_TICKS), yl, nyl);
        measure(cr, &L->Y, F->tick);
    } else for (size_t target = clampz(h / (3.2 * F->base), 2, 8);; target--) {
        mp_axis_ticks(&L->Y, target, NULL, 0);
        measure(cr, &L->Y, F->tick);
        double sp = L->Y.nt > 1 ? h * fabs(L->Y.t[1] - L->Y.t[0]) / (L->Y.hi - L->Y.lo) : h;
        if (sp >= 2.0 * F->tick || target <= 2) break;
    }
    if (L->cbar) {
        mp_axis_ticks(&L->C, clampz(h / (3.2 * F->base), 2, 8), NULL, 0);
        measure(cr, &L->C, F->tick);
    }
}

static mp_series *colorbar_series(const mp_axes *ax) {
    mp_series *c = NULL;
    for (size_t i = 0; i < ax->ns; i++) {
        mp_series *s = &ax->s[i];
        if ((s->kind == MP_SERIES_SCATTER && s->c) || (s->kind == MP_SERIES_HEATMAP && s->colorbar)) c = s;
    }
    return c;
}

/* Margins around the plotting area needed by the labels of this axes. */
static void margins(cairo_t *cr, mp_layout *L, const mp_fonts *F) {
    mp_axes *ax = L->ax;
    double fs = F->base, tl = 0.35 * fs, gap = 0.3 * fs;
    L->ml = (L->show_yt ? tl + gap + L->Y.max_w : tl) + (ax->ylabel ? 2 * gap + F->label : 0) + 0.3 * fs;
    double xt = 0;
    if (L->show_xt) xt = L->X.rot != 0 ? L->X.max_w * 0.7071 + L->X.max_h * 0.7071 : L->X.max_h;
    int xrow = ax->xlabel || (L->show_xt && L->X.mexp);  /* the x label row also holds x10^e */
    L->mb = tl + gap + xt + (xrow ? 1.5 * gap + 1.15 * F->label : 0) + 0.2 * fs;
    L->mt = ax->title ? 1.6 * F->title : 0.6 * F->tick;
    if ((L->show_yt && L->Y.mexp && !ax->ylabel) || (L->cbar && L->C.mexp && !L->cbar->cbar_label))
        L->mt = fmax(L->mt, 1.5 * F->tick + (ax->title ? 1.6 * F->title : 0));
    L->cbar_w = 0;
    if (L->cbar) {
        L->cbar_w = 0.8 * fs + 0.9 * fs + tl + gap + L->C.max_w + (L->cbar->cbar_label ? 2 * gap + F->label : 0);
        L->mr = L->cbar_w + 0.3 * fs;
        if (L->C.mexp && !L->cbar->cbar_label)   /* "x10^e" above the bar */
            L->mr = fmax(L->mr, 0.8 * fs + 1.2 * mp_text_width(cr, "x10-00", F->tick, 0));
    } else {
        L->mr = 0.6 * fs;
        if (L->show_xt && L->X.rot == 0 && L->X.nt > 0)
            L->mr = fmax(L->mr, 0.5 * mp_label_width(cr, &L->X.lab[L->X.nt - 1], F->tick) + 0.2 * fs);
    }
    if (L->show_xt && L->X.rot == 0 && L->X.nt > 0)
        L->ml = fmax(L->ml, 0.5 * mp_label_width(cr, &L->X.lab[0], F->tick) + 0.2 * fs);
    if (L->show_xt && L->X.rot != 0) L->ml = fmax(L->ml, L->X.max_w * 0.7071 + 0.2 * fs);
}

static void line(cairo_t *cr, double x0, double y0, double x1, double y1) {
    cairo_move_to(cr, x0, y0);
    cairo_line_to(cr, x1, y1);
}

static void draw_grid(cairo_t *cr, const mp_layout *L) {
    const mp_rect *p = &L->plot;
    cairo_save(cr);
    cairo_set_source_rgb(cr, 0.91, 0.91, 0.91);
    cairo_set_line_width(cr, 0.6);
    if (L->X.categorical == 0)
        for (size_t i = 0; i < L->X.nt; i++) {
            double x = mp_axis_pos_t(&L->X, L->X.t[i], p->x, p->w, 0);
            line(cr, x, p->y, x, p->y + p->h);
        }
    for (size_t i = 0; i < L->Y.nt; i++) {
        double y = mp_axis_pos_t(&L->Y, L->Y.t[i], p->y, p->h, 1);
        line(cr, p->x, y, p->x + p->w, y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

static void draw_axis_ticks(mp_figure *f, cairo_t *cr, const mp_layout *L, const mp_fonts *F) {
    const mp_rect *p = &L->plot;
    double fs = F->base, tl = 0.35 * fs, gap = 0.3 * fs, bottom = p->y + p->h;
    cairo_set_source_rgb(cr, SPINE, SPINE, SPINE);
    cairo_set_line_width(cr, 0.8);
    for (size_t i = 0; i < L->X.nt; i++) {
        double x = mp_axis_pos_t(&L->X, L->X.t[i], p->x, p->w, 0);
        line(cr, x, bottom, x, bottom + tl);
    }
    for (size_t i = 0; i < L->Y.nt; i++) {
        double y = mp_axis_pos_t(&L->Y, L->Y.t[i], p->y, p->h, 1);
        line(cr, p->x - tl, y, p->x, y);
    }
    cairo_stroke(cr);
    cairo_set_line_width(cr, 0.6);
    for (size_t i = 0; i < L->X.nminor; i++) {
        double x = mp_axis_pos_t(&L->X, L->X.minor[i], p->x, p->w, 0);
        line(cr, x, bottom, x, bottom + 0.55 * tl);
    }
    for (size_t i = 0; i < L->Y.nminor; i++) {
        double y = mp_axis_pos_t(&L->Y, L->Y.minor[i], p->y, p->h, 1);
        line(cr, p->x - 0.55 * tl, y, p->x, y);
    }
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, INK, INK, INK);
    if (L->show_xt)
        for (size_t i = 0; i < L->X.nt; i++) {
            double x = mp_axis_pos_t(&L->X, L->X.t[i], p->x, p->w, 0);
            if (L->X.rot != 0) mp_draw_label(f, cr, &L->X.lab[i], x + 0.2 * F->tick, bottom + tl + gap, F->tick, 1, 0.3, L->X.rot);
            else mp_draw_label(f, cr, &L->X.lab[i], x, bottom + tl + gap, F->tick, 0.5, 0, 0);
        }
    if (L->show_yt)
        for (size_t i = 0; i < L->Y.nt; i++) {
            double y = mp_axis_pos_t(&L->Y, L->Y.t[i], p->y, p->h, 1);
            mp_draw_label(f, cr, &L->Y.lab[i], p->x - tl - gap, y, F->tick, 1, 0.5, 0);
        }
}

static void draw_colorbar(mp_figure *f, cairo_t *cr, const mp_layout *L, const mp_fonts *F) {
    const mp_rect *p = &L->plot;
    const mp_series *s = L->cbar;
    double fs = F->base, tl = 0.35 * fs, gap = 0.3 * fs;
    double bx = p->x + p->w + 0.8 * fs, bw = 0.9 * fs;
    cairo_surface_t *g = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 256);
    if (cairo_surface_status(g) == CAIRO_STATUS_SUCCESS) {
        cairo_surface_flush(g);
        unsigned char *d = cairo_image_surface_get_data(g);
        int stride = cairo_image_surface_get_stride(g);
        for (int i = 0; i < 256; i++) {
            mp_rgb c = mp_cmap_color(s->cmap, (255 - i) / 255.0);
            *(uint32_t *)(d + (size_t)stride * i) =
                (uint32_t)lround(c.r * 255) << 16 | (uint32_t)lround(c.g * 255) << 8 | (uint32_t)lround(c.b * 255);
        }
        cairo_surface_mark_dirty(g);
        cairo_save(cr);
        cairo_translate(cr, bx, p->y);
        cairo_scale(cr, bw, p->h / 256.0);
        cairo_set_source_surface(cr, g, 0, 0);
        cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_BILINEAR);
        cairo_pattern_set_extend(cairo_get_source(cr), CAIRO_EXTEND_PAD);
        cairo_rectangle(cr, 0, 0, 1, 256);
        cairo_fill(cr);
        cairo_restore(cr);
    }
    cairo_surface_destroy(g);
    cairo_set_source_rgb(cr, SPINE, SPINE, SPINE);
    cairo_set_line_width(cr, 0.8);
    cairo_rectangle(cr, bx, p->y, bw, p->h);
    for (size_t i = 0; i < L->C.nt; i++) {
        double y = mp_axis_pos_t(&L->C, L->C.t[i], p->y, p->h, 1);
        line(cr, bx + bw, y, bx + bw + tl, y);
    }
    cairo_stroke(cr);
    cairo_set_line_width(cr, 0.6);
    for (size_t i = 0; i < L->C.nminor; i++) {
        double y = mp_axis_pos_t(&L->C, L->C.minor[i], p->y, p->h, 1);
        line(cr, bx + bw, y, bx + bw + 0.55 * tl, y);
    }
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, INK, INK, INK);
    for (size_t i = 0; i < L->C.nt; i++) {
        double y = mp_axis_pos_t(&L->C, L->C.t[i], p->y, p->h, 1);
        mp_draw_label(f, cr, &L->C.lab[i], bx + bw + tl + gap, y, F->tick, 0, 0.5, 0);
    }
    double lx = bx + bw + tl + 2 * gap + L->C.max_w;   /* label reads bottom to top, like the y label */
    if (L->C.mexp) {
        mp_label m;
        mp_mult_label(&m, s->cbar_label, L->C.mexp);
        if (s->cbar_label) mp_draw_label(f, cr, &m, lx, p->y + p->h / 2, F->label, 0.5, 0, -M_PI / 2);
        else mp_draw_label(f, cr, &m, bx, p->y - 0.4 * fs, F->tick, 0, 1, 0);
    } else if (s->cbar_label)
        mp_draw_text(f, cr, s->cbar_label, lx, p->y + p->h / 2, F->label, 0, 0.5, 0, -M_PI / 2);
}

/* ---- legend ---- */
typedef struct { int kind; mp_rgb c; const char *text; int dashed; double width, alpha; } mp_entry;
enum { E_LINE, E_MARKER, E_PATCH };
#define MAX_ENTRIES 40

static size_t legend_entries(const mp_axes *ax, mp_entry *e) {
    size_t n = 0;
    for (size_t i = 0; i < ax->ns && n < MAX_ENTRIES; i++) {
        const mp_series *s = &ax->s[i];
        mp_rgb c = mp_palette_color(s->color_index);
        if (s->kind == MP_SERIES_LINE && s->label)
            e[n++] = (mp_entry){E_LINE, c, s->label, s->dashed, s->width, 1};
        else if (s->kind == MP_SERIES_SCATTER && s->cat) {
            for (size_t k = 0; k < s->n_names && n < MAX_ENTRIES; k++) {
                int used = 0;
                for (size_t j = 0; j < s->n && !used; j++) used = (size_t)s->cat[j] == k;
                if (used) e[n++] = (mp_entry){E_MARKER, mp_palette_color(k), s->names[k], 0, 0, s->alpha};
            }
        } else if (s->kind == MP_SERIES_SCATTER && !s->c && s->label)
            e[n++] = (mp_entry){E_MARKER, c, s->label, 0, 0, s->alpha};
        else if (s->kind == MP_SERIES_BARS && s->names)
            for (size_t k = 0; k < s->cols && n < MAX_ENTRIES; k++)
                e[n++] = (mp_entry){E_PATCH, mp_palette_color(s->color_index + k), s->names[k], 0, 0, 1};
    }
    return n;
}

/* How many data points of the axes fall inside r (to place the legend). */
static size_t crowding(const mp_layout *L, const mp_rect *r) {
    const mp_rect *p = &L->plot;
    size_t n = 0;
    for (size_t i = 0; i < L->ax->ns; i++) {
        const mp_series *s = &L->ax->s[i];
        if (s->kind == MP_SERIES_SCATTER || s->kind == MP_SERIES_LINE) {
            size_t stride = s->n > 20000 ? s->n / 20000 : 1;
            for (size_t j = 0; j < s->n; j += stride) {
                double X = mp_axis_px(&L->X, s->x[j], p->x, p->w, 0), Y = mp_axis_px(&L->Y, s->y[j], p->y, p->h, 1);
                n += X >= r->x && X <= r->x + r->w && Y >= r->y && Y <= r->y + r->h;
            }
        } else if (s->kind == MP_SERIES_BARS) {
            for (size_t g = 0; g < s->rows; g++)
                for (size_t k = 0; k < s->cols; k++) {
                    double X = mp_axis_pos_t(&L->X, (double)g - 0.4 + (k + 0.5) * 0.8 / s->cols, p->x, p->w, 0);
                    double Y = mp_axis_px(&L->Y, s->z[g * s->cols + k], p->y, p->h, 1);
                    double base = L->Y.log ? p->y + p->h : mp_axis_px(&L->Y, 0, p->y, p->h, 1);
                    n += 50 * (X >= r->x && X <= r->x + r->w && fmax(Y, base) >= r->y && fmin(Y, base) <= r->y + r->h);
                }
        }
    }
    return n;
}

/* Size of the legend box of n entries. */
static void legend_size(cairo_t *cr, const mp_entry *e, size_t n, const mp_fonts *F, double *w, double *h) {
    double fs = F->base, pad = 0.45 * fs, rh = 1.35 * F->tick, sw = 1.7 * fs, tw = 0;
    for (size_t i = 0; i < n; i++) tw = fmax(tw, mp_text_width(cr, e[i].text, F->tick, 0));
    *w = pad + sw + 0.5 * fs + tw + pad;
    *h = 2 * pad + n * rh - (rh - F->tick);
}

/* The least crowded inner corner for a w x h legend; *crowd gets its count. */
static mp_rect legend_corner(const mp_layout *L, const mp_fonts *F, double w, double h, size_t *crowd) {
    const mp_rect *p = &L->plot;
    double in = 0.4 * F->base;
    mp_rect cand[4] = {
        {p->x + p->w - in - w, p->y + in, w, h}, {p->x + in, p->y + in, w, h},
        {p->x + p->w - in - w, p->y + p->h - in - h, w, h}, {p->x + in, p->y + p->h - in - h, w, h},
    };
    size_t best = 0, bn = (size_t)-1;
    for (int k = 0; k < 4; k++) {
        size_t c = crowding(L, &cand[k]);
        if (c < bn) { bn = c; best = (size_t)k; }
    }
    *crowd = bn;
    return cand[best];
}

/* Decides (on an estimate of the plotting area) whether the legend must go
 * outside the grid, because every inner corner would hide data; if so records
 * its size (mp_figure_draw reserves a strip at the figure's right edge, so no
 * single panel column is squeezed). Called after margins(). */
static void legend_placement(cairo_t *cr, mp_layout *L, const mp_fonts *F, double cw, double ch) {
    mp_entry e[MAX_ENTRIES];
    L->legend_out = 0;
    if (!L->ax->legend) return;
    size_t n = legend_entries(L->ax, e), crowd, points = 0;
    if (!n) return;
    double w, h;
    legend_size(cr, e, n, F, &w, &h);
    L->plot = (mp_rect){0, 0, fmax(cw - L->ml - L->mr, 4), fmax(ch - L->mt - L->mb, 4)};
    legend_corner(L, F, w, h, &crowd);
    for (size_t i = 0; i < L->ax->ns; i++) points += L->ax->s[i].n;
    if (crowd > 2 && (double)crowd > 0.004 * (double)points) {
        L->legend_out = 1;
        L->leg_w = w;
        L->leg_h = h;
    }
}

static void draw_legend(mp_figure *f, cairo_t *cr, const mp_layout *L, const mp_fonts *F) {
    mp_entry e[MAX_ENTRIES];
    size_t n = legend_entries(L->ax, e), crowd;
    if (!n) return;
    double fs = F->base, pad = 0.45 * fs, rh = 1.35 * F->tick, sw = 1.7 * fs, w, h;
    legend_size(cr, e, n, F, &w, &h);
    mp_rect r = L->legend_out ? (mp_rect){L->leg_x, L->leg_y, w, h}
                              : legend_corner(L, F, w, h, &crowd);
    cairo_save(cr);
    cairo_rectangle(cr, r.x, r.y, r.w, r.h);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
    cairo_set_line_width(cr, 0.6);
    cairo_stroke(cr);
    for (size_t i = 0; i < n; i++) {
        double cy = r.y + pad + i * rh + 0.5 * F->tick, x0 = r.x + pad;
        cairo_set_source_rgba(cr, e[i].c.r, e[i].c.g, e[i].c.b, e[i].alpha);
        if (e[i].kind == E_LINE) {
            cairo_set_line_width(cr, e[i].width);
            if (e[i].dashed) {
                double dash[2] = {3.5 * e[i].width, 2.0 * e[i].width};
                cairo_set_dash(cr, dash, 2, 0);
            }
            line(cr, x0, cy, x0 + sw, cy);
            cairo_stroke(cr);
            cairo_set_dash(cr, NULL, 0, 0);
        } else if (e[i].kind == E_MARKER) {
            cairo_arc(cr, x0 + sw / 2, cy, 0.3 * fs, 0, 2 * M_PI);
            cairo_fill(cr);
        } else {
            cairo_rectangle(cr, x0 + 0.2 * sw, cy - 0.35 * F->tick, 0.6 * sw, 0.7 * F->tick);
            cairo_fill(cr);
        }
        cairo_set_source_rgb(cr, INK, INK, INK);
        mp_draw_text(f, cr, e[i].text, x0 + sw + 0.5 * fs, cy, F->tick, 0, 0, 0.5, 0);
    }
    cairo_restore(cr);
}

/* Bars fill the plot up to their tallest value, so a legend would cover some: raise
 * the top limit so that the legend's height stays free above the data. */
static void legend_headroom(mp_layout *L, const mp_fonts *F, double h) {
    mp_entry e[MAX_ENTRIES];
    mp_axes *ax = L->ax;
    if (!ax->legend || !has_kind(ax, MP_SERIES_BARS) || !isnan(ax->ylim[1]) || L->Y.log) return;
    size_t n = legend_entries(ax, e);
    if (!n) return;
    double need = 0.9 * F->base + n * 1.35 * F->tick + 0.5 * F->base, frac = need / h;
    if (frac > 0.6) return;
    L->Y.hi = L->Y.lo + (L->Y.hi - L->Y.lo) / (1 - frac);
}

static mp_status draw_axes(mp_figure *f, cairo_t *cr, mp_layout *L, const mp_fonts *F) {
    mp_axes *ax = L->ax;
    const mp_rect *p = &L->plot;
    double fs = F->base, tl = 0.35 * fs, gap = 0.3 * fs;
    mp_status st = MP_OK;
    if (!has_kind(ax, MP_SERIES_HEATMAP)) draw_grid(cr, L);
    cairo_save(cr);
    cairo_rectangle(cr, p->x, p->y, p->w, p->h);
    cairo_clip(cr);
    for (size_t i = 0; i < ax->ns && st == MP_OK; i++) st = mp_series_draw(f, cr, L, &ax->s[i]);
    cairo_restore(cr);
    if (st != MP_OK) return mp_error_prefix(st, "axes (%d, %d)", ax->row + 1, ax->col + 1);
    cairo_set_source_rgb(cr, SPINE, SPINE, SPINE);
    cairo_set_line_width(cr, 0.8);
    cairo_rectangle(cr, p->x, p->y, p->w, p->h);
    cairo_stroke(cr);
    draw_axis_ticks(f, cr, L, F);
    cairo_set_source_rgb(cr, INK, INK, INK);
    double xt = L->show_xt ? (L->X.rot != 0 ? L->X.max_w * 0.7071 + L->X.max_h * 0.7071 : L->X.max_h) : 0;
    double xrow = p->y + p->h + tl + gap + xt + 1.5 * gap, ycol = p->x - tl - gap - (L->show_yt ? L->Y.max_w : 0) - 2 * gap;
    mp_label m;
    if (L->show_xt && L->X.mexp) {   /* tick labels are multiples of 10^mexp: say so once */
        mp_mult_label(&m, ax->xlabel, L->X.mexp);
        if (ax->xlabel) mp_draw_label(f, cr, &m, p->x + p->w / 2, xrow, F->label, 0.5, 0, 0);
        else mp_draw_label(f, cr, &m, p->x + p->w, xrow, F->tick, 1, 0, 0);
    } else if (ax->xlabel)
        mp_draw_text(f, cr, ax->xlabel, p->x + p->w / 2, xrow, F->label, 0, 0.5, 0, 0);
    if (L->show_yt && L->Y.mexp) {
        mp_mult_label(&m, ax->ylabel, L->Y.mexp);
        if (ax->ylabel) mp_draw_label(f, cr, &m, ycol, p->y + p->h / 2, F->label, 0.5, 1, -M_PI / 2);
        else mp_draw_label(f, cr, &m, p->x, p->y - 0.4 * fs, F->tick, 0, 1, 0);
    } else if (ax->ylabel)
        mp_draw_text(f, cr, ax->ylabel, ycol, p->y + p->h / 2, F->label, 0, 0.5, 1, -M_PI / 2);
    if (ax->title) {
        int mrow = (L->show_yt && L->Y.mexp && !ax->ylabel) || (L->cbar && L->C.mexp && !L->cbar->cbar_label);
        mp_draw_text(f, cr, ax->title, p->x + p->w / 2, p->y - 0.55 * F->title - (mrow ? 1.5 * F->tick : 0),
                     F->title, 0, 0.5, 1, 0);
    }
    if (L->cbar) draw_colorbar(f, cr, L, F);
    if (ax->legend) draw_legend(f, cr, L, F);
    return MP_OK;
}

mp_status mp_figure_draw(mp_figure *f, cairo_t *cr, double W, double H) {
    mp_status st = MP_OK;
    int n = f->rows * f->cols;
    if (!(W >= 16 && H >= 16 && W <= 1e5 && H <= 1e5))
        return mp_error(MP_ERR_ARG, "figure: size %g x %g pt must be within [16, 100000] pt", W, H);
    mp_layout *L = mp_calloc((size_t)n, sizeof *L, "figure layout");
    double *colw = mp_calloc(2 * (size_t)(f->rows + f->cols), sizeof *colw, "figure layout");
    if (!L || !colw) { st = MP_ERR_NOMEM; goto cleanup; }
    memset(&f->stats, 0, sizeof f->stats);
    mp_fonts F = fonts_of(f);
    double fs = F.base, pad = 0.5 * fs;
    double top = pad + (f->title ? 1.5 * F.suptitle : 0);
    double cw = (W - 2 * pad) / f->cols, ch = (H - top - pad) / f->rows;

    for (int i = 0; i < n; i++) {
        L[i].ax = &f->ax[i];
        if ((st = axes_limits(&L[i])) != MP_OK) goto cleanup;
        L[i].show_xt = !(f->share_x && f->ax[i].row < f->rows - 1);
        L[i].show_yt = !(f->share_y && f->ax[i].col > 0);
        legend_headroom(&L[i], &F, fmax(ch - 4 * fs, 20));
        L[i].cbar = colorbar_series(&f->ax[i]);
        if (L[i].cbar) {
            memset(&L[i].C, 0, sizeof L[i].C);
            L[i].C.log = L[i].cbar->kind == MP_SERIES_HEATMAP && L[i].cbar->log;
            mp_series_color_range(L[i].cbar, &L[i].C.lo, &L[i].C.hi);
        }
    }
    for (int axis = 0; axis < 2; axis++) {   /* shared limits: the union over all axes */
        if (!(axis ? f->share_y : f->share_x)) continue;
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n; i++) {
            mp_axis *a = axis ? &L[i].Y : &L[i].X;
            lo = fmin(lo, a->lo); hi = fmax(hi, a->hi);
        }
        for (int i = 0; i < n; i++) {
            mp_axis *a = axis ? &L[i].Y : &L[i].X;
            a->lo = lo; a->hi = hi;
        }
    }
    cairo_save(cr);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_rectangle(cr, 0, 0, W, H);
    cairo_fill(cr);
    for (int i = 0; i < n; i++) {
        make_ticks(cr, &L[i], &F, fmax(cw - 6 * fs, 20), fmax(ch - 4 * fs, 20));
        margins(cr, &L[i], &F);
        legend_placement(cr, &L[i], &F, cw, ch);
    }
    /* Legends that must go outside: a strip at the right edge of the figure, as
     * wide as the widest of them; every column narrows alike (redo their ticks).
     * If the strip would take more than 40% of the width, they stay inside. */
    double strip = 0;
    for (int i = 0; i < n; i++)
        if (L[i].legend_out) strip = fmax(strip, L[i].leg_w + 0.8 * fs);
    if (strip > 0.4 * (W - 2 * pad)) {
        for (int i = 0; i < n; i++) L[i].legend_out = 0;
        strip = 0;
    }
    if (strip > 0) {
        cw = (W - 2 * pad - strip) / f->cols;
        for (int i = 0; i < n; i++) {
            make_ticks(cr, &L[i], &F, fmax(cw - 6 * fs, 20), fmax(ch - 4 * fs, 20));
            margins(cr, &L[i], &F);
        }
    }
    /* Align: per column the widest left/right margins, per row the tallest top/bottom. */
    double *ml = colw, *mr = ml + f->cols, *mt = mr + f->cols, *mb = mt + f->rows;
    for (int i = 0; i < n; i++) {
        int r = f->ax[i].row, c = f->ax[i].col;
        ml[c] = fmax(ml[c], L[i].ml); mr[c] = fmax(mr[c], L[i].mr);
        mt[r] = fmax(mt[r], L[i].mt); mb[r] = fmax(mb[r], L[i].mb);
    }
    for (int i = 0; i < n; i++) {
        int r = f->ax[i].row, c = f->ax[i].col;
        mp_rect *p = &L[i].plot;
        p->x = pad + c * cw + ml[c];
        p->y = top + r * ch + mt[r];
        p->w = fmax(cw - ml[c] - mr[c], 4);
        p->h = fmax(ch - mt[r] - mb[r], 4);
        if (L[i].legend_out) {   /* beside its row, below the legends of earlier columns */
            L[i].leg_x = W - pad - strip + 0.6 * fs;
            L[i].leg_y = p->y;
            for (int j = 0; j < i; j++)
                if (L[j].legend_out && f->ax[j].row == r) L[i].leg_y += L[j].leg_h + 0.4 * fs;
        }
        f->stats.plot_w_min = i == 0 ? p->w : fmin(f->stats.plot_w_min, p->w);
        f->stats.plot_w_max = fmax(f->stats.plot_w_max, p->w);
        f->stats.n_legends_outside += L[i].legend_out && L[i].ax->legend;
        if ((st = draw_axes(f, cr, &L[i], &F)) != MP_OK) break;
    }
    if (st == MP_OK && f->title) {
        cairo_set_source_rgb(cr, INK, INK, INK);
        mp_draw_text(f, cr, f->title, W / 2, pad + 0.1 * fs, F.suptitle, 1, 0.5, 0, 0);
    }
    cairo_restore(cr);
    if (st == MP_OK && cairo_status(cr) != CAIRO_STATUS_SUCCESS)
        st = mp_error(MP_ERR_IO, "figure: cairo error: %s", cairo_status_to_string(cairo_status(cr)));
cleanup:
    free(L);
    free(colw);
    return st;
}
