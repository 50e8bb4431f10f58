/* plot_series.c — data extents, colour scaling and rendering of the four series
 * kinds (scatter, line with error band, heatmap, grouped bars) inside the
 * plotting area computed by plot_draw.c. */
#include "plot_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

double mp_axis_pos_t(const mp_axis *a, double vt, double start, double len, int vertical) {
    double t = (vt - a->lo) / (a->hi - a->lo);
    if (vertical != a->inverted) t = 1 - t;   /* screen y grows downward */
    return start + t * len;
}

double mp_axis_px(const mp_axis *a, double v, double start, double len, int vertical) {
    if (a->log) {
        if (!(v > 0)) return NAN;
        v = log10(v);
    }
    if (!isfinite(v)) return NAN;
    return mp_axis_pos_t(a, v, start, len, vertical);
}

static void widen(double r[2], double v) {
    if (v < r[0]) r[0] = v;
    if (v > r[1]) r[1] = v;
}

/* Transformed value or NaN when it cannot be shown on the scale. */
static double tr(double v, int log) {
    if (!isfinite(v)) return NAN;
    if (log) return v > 0 ? log10(v) : NAN;
    return v;
}

int mp_series_extent(const mp_series *s, int xlog, int ylog, double xr[2], double yr[2]) {
    xr[0] = yr[0] = INFINITY;
    xr[1] = yr[1] = -INFINITY;
    switch (s->kind) {
    case MP_SERIES_SCATTER:
    case MP_SERIES_LINE:
        for (size_t i = 0; i < s->n; i++) {
            double x = tr(s->x[i], xlog), y = tr(s->y[i], ylog);
            if (isnan(x)) continue;
            if (!isnan(y)) { widen(xr, x); widen(yr, y); }
            if (s->lo) {
                double a = tr(s->lo[i], ylog), b = tr(s->hi[i], ylog);
                if (!isnan(a)) { widen(xr, x); widen(yr, a); }
                if (!isnan(b)) { widen(xr, x); widen(yr, b); }
            }
        }
        break;
    case MP_SERIES_HEATMAP:
        xr[0] = -0.5; xr[1] = (double)s->cols - 0.5;
        yr[0] = -0.5; yr[1] = (double)s->rows - 0.5;
        break;
    case MP_SERIES_BARS:
        xr[0] = -0.5; xr[1] = (double)s->rows - 0.5;
        if (!ylog) widen(yr, 0);
        for (size_t i = 0; i < s->rows * s->cols; i++) {
            double v = s->z[i], e = s->err ? s->err[i] : 0;
            double a = tr(v - e, ylog), b = tr(v + e, ylog), c = tr(v, ylog);
            if (!isnan(c)) widen(yr, c);
            if (!isnan(a)) widen(yr, a);
            if (!isnan(b)) widen(yr, b);
        }
        break;
    }
    return xr[0] <= xr[1] && yr[0] <= yr[1];
}

void mp_series_color_range(const mp_series *s, double *lo, double *hi) {
    double r[2] = {INFINITY, -INFINITY};
    int log = s->kind == MP_SERIES_HEATMAP && s->log;
    if (s->kind == MP_SERIES_SCATTER && s->c) {
        for (size_t i = 0; i < s->n; i++)
            if (isfinite(s->c[i])) widen(r, s->c[i]);
    } else if (s->kind == MP_SERIES_HEATMAP) {
        for (size_t i = 0; i < s->rows; i++)
            for (size_t j = 0; j < s->cols; j++) {
                if (s->mask_upper && j > i) continue;
                double v = tr(s->z[i * s->cols + j], log);
                if (!isnan(v)) widen(r, v);
            }
    }
    if (!isnan(s->vmin)) r[0] = log ? log10(s->vmin) : s->vmin;
    if (!isnan(s->vmax)) r[1] = log ? log10(s->vmax) : s->vmax;
    if (!(r[0] <= r[1])) { r[0] = 0; r[1] = 1; }
    if (r[0] == r[1]) { r[0] -= 0.5; r[1] += 0.5; }
    *lo = r[0];
    *hi = r[1];
}

double mp_color_t(const mp_series *s, double v, double lo, double hi) {
    double vt = tr(v, s->kind == MP_SERIES_HEATMAP && s->log);
    return (vt - lo) / (hi - lo);
}

static void set_rgba(cairo_t *cr, mp_rgb c, double a) { cairo_set_source_rgba(cr, c.r, c.g, c.b, a); }

static void draw_scatter(mp_figure *f, cairo_t *cr, const mp_layout *L, const mp_series *s) {
    const mp_rect *p = &L->plot;
    double r = s->size / 2, clo = 0, chi = 1;
    if (s->c) mp_series_color_range(s, &clo, &chi);
    mp_rgb plain = mp_palette_color(s->color_index);
    set_rgba(cr, plain, s->alpha);
    for (size_t i = 0; i < s->n; i++) {
        double X = mp_axis_px(&L->X, s->x[i], p->x, p->w, 0), Y = mp_axis_px(&L->Y, s->y[i], p->y, p->h, 1);
        if (isnan(X) || isnan(Y) || X < p->x - r || X > p->x + p->w + r || Y < p->y - r || Y > p->y + p->h + r)
            continue;
        if (s->c) set_rgba(cr, mp_cmap_color(s->cmap, mp_color_t(s, s->c[i], clo, chi)), s->alpha);
        else if (s->cat) set_rgba(cr, mp_palette_color((size_t)s->cat[i]), s->alpha);
        cairo_new_sub_path(cr);
        cairo_arc(cr, X, Y, r, 0, 2 * M_PI);
        cairo_fill(cr);
        f->stats.n_markers++;
    }
}

static void draw_line(cairo_t *cr, const mp_layout *L, const mp_series *s) {
    const mp_rect *p = &L->plot;
    mp_rgb col = mp_palette_color(s->color_index);
    if (s->lo) {  /* band: one polygon per run of points where both edges are finite */
        set_rgba(cr, col, 0.22);
        size_t i = 0;
        while (i < s->n) {
            size_t j = i;
            while (j < s->n && !isnan(mp_axis_px(&L->X, s->x[j], p->x, p->w, 0)) &&
                   !isnan(mp_axis_px(&L->Y, s->lo[j], p->y, p->h, 1)) &&
                   !isnan(mp_axis_px(&L->Y, s->hi[j], p->y, p->h, 1))) j++;
            if (j > i + 1) {
                for (size_t k = i; k < j; k++)
                    cairo_line_to(cr, mp_axis_px(&L->X, s->x[k], p->x, p->w, 0), mp_axis_px(&L->Y, s->hi[k], p->y, p->h, 1));
                for (size_t k = j; k-- > i;)
                    cairo_line_to(cr, mp_axis_px(&L->X, s->x[k], p->x, p->w, 0), mp_axis_px(&L->Y, s->lo[k], p->y, p->h, 1));
                cairo_close_path(cr);
                cairo_fill(cr);
            }
            i = j + 1;
        }
    }
    set_rgba(cr, col, s->alpha);
    cairo_set_line_width(cr, s->width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, s->dashed ? CAIRO_LINE_CAP_BUTT : CAIRO_LINE_CAP_ROUND);
    if (s->dashed) {
        double dash[2] = {3.5 * s->width, 2.0 * s->width};
        cairo_set_dash(cr, dash, 2, 0);
    }
    int pen = 0;
    for (size_t i = 0; i < s->n; i++) {
        double X = mp_axis_px(&L->X, s->x[i], p->x, p->w, 0), Y = mp_axis_px(&L->Y, s->y[i], p->y, p->h, 1);
        if (isnan(X) || isnan(Y)) { pen = 0; continue; }
        if (pen) cairo_line_to(cr, X, Y);
        else cairo_move_to(cr, X, Y);
        pen = 1;
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    if (s->marker) {
        double r = fmax(1.6 * s->width, 2.0);
        for (size_t i = 0; i < s->n; i++) {
            double X = mp_axis_px(&L->X, s->x[i], p->x, p->w, 0), Y = mp_axis_px(&L->Y, s->y[i], p->y, p->h, 1);
            if (isnan(X) || isnan(Y)) continue;
            cairo_new_sub_path(cr);
            cairo_arc(cr, X, Y, r, 0, 2 * M_PI);
        }
        cairo_fill(cr);
    }
}

static mp_status draw_heatmap(cairo_t *cr, const mp_layout *L, const mp_series *s) {
    const mp_rect *p = &L->plot;
    double lo, hi;
    mp_series_color_range(s, &lo, &hi);
    /* Raster backends sample the cell image with NEAREST exactly; vector viewers may
     * smooth embedded images, so there each cell is replicated into an f x f block. */
    int vector = cairo_surface_get_type(cairo_get_target(cr)) != CAIRO_SURFACE_TYPE_IMAGE;
    size_t big = s->rows > s->cols ? s->rows : s->cols, f = 1;
    if (vector) { f = 1024 / big; if (f < 1) f = 1; if (f > 16) f = 16; }
    int w = (int)(s->cols * f), h = (int)(s->rows * f);
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return mp_error(MP_ERR_NOMEM, "heatmap: cannot create a %d x %d image", w, h);
    }
    cairo_surface_flush(img);
    unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (size_t i = 0; i < s->rows; i++)
        for (size_t j = 0; j < s->cols; j++) {
            uint32_t px = 0;   /* transparent: masked, NaN or not on a log scale */
            double t = mp_color_t(s, s->z[i * s->cols + j], lo, hi);
            if (!(s->mask_upper && j > i) && !isnan(t)) {
                mp_rgb c = mp_cmap_color(s->cmap, t);
                px = 0xff000000u | (uint32_t)lround(c.r * 255) << 16 | (uint32_t)lround(c.g * 255) << 8 |
                     (uint32_t)lround(c.b * 255);
            }
            for (size_t a = 0; a < f; a++) {
                uint32_t *row = (uint32_t *)(data + (size_t)stride * (i * f + a));
                for (size_t b = 0; b < f; b++) row[j * f + b] = px;
            }
        }
    cairo_surface_mark_dirty(img);
    double x0 = mp_axis_pos_t(&L->X, -0.5, p->x, p->w, 0), x1 = mp_axis_pos_t(&L->X, (double)s->cols - 0.5, p->x, p->w, 0);
    double y0 = mp_axis_pos_t(&L->Y, -0.5, p->y, p->h, 1), y1 = mp_axis_pos_t(&L->Y, (double)s->rows - 0.5, p->y, p->h, 1);
    cairo_save(cr);
    cairo_translate(cr, x0, y0);
    cairo_scale(cr, (x1 - x0) / w, (y1 - y0) / h);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(cr, 0, 0, w, h);
    cairo_fill(cr);
    cairo_restore(cr);
    cairo_surface_destroy(img);
    return MP_OK;
}

static void draw_bars(cairo_t *cr, const mp_layout *L, const mp_series *s) {
    const mp_rect *p = &L->plot;
    double bw = 0.8 / (double)s->cols;
    double base = L->Y.log ? p->y + p->h : mp_axis_px(&L->Y, 0, p->y, p->h, 1);
    for (size_t g = 0; g < s->rows; g++)
        for (size_t j = 0; j < s->cols; j++) {
            double v = s->z[g * s->cols + j];
            double xl = (double)g - 0.4 + (double)j * bw;
            double X0 = mp_axis_pos_t(&L->X, xl + 0.03 * bw, p->x, p->w, 0);
            double X1 = mp_axis_pos_t(&L->X, xl + 0.97 * bw, p->x, p->w, 0);
            double Y = mp_axis_px(&L->Y, v, p->y, p->h, 1);
            if (isnan(Y)) continue;
            set_rgba(cr, mp_palette_color(s->color_index + j), 1.0);
            cairo_rectangle(cr, X0, fmin(Y, base), X1 - X0, fabs(base - Y));
            cairo_fill(cr);
            if (s->err && s->err[g * s->cols + j] > 0) {
                double e = s->err[g * s->cols + j], Xc = 0.5 * (X0 + X1), cap = 0.2 * (X1 - X0);
                double Ya = mp_axis_px(&L->Y, v - e, p->y, p->h, 1), Yb = mp_axis_px(&L->Y, v + e, p->y, p->h, 1);
                if (isnan(Ya)) Ya = p->y + p->h;
                cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
                cairo_set_line_width(cr, 0.9);
                cairo_move_to(cr, Xc, Ya); cairo_line_to(cr, Xc, Yb);
                cairo_move_to(cr, Xc - cap, Ya); cairo_line_to(cr, Xc + cap, Ya);
                cairo_move_to(cr, Xc - cap, Yb); cairo_line_to(cr, Xc + cap, Yb);
                cairo_stroke(cr);
            }
        }
}

mp_status mp_series_draw(mp_figure *f, cairo_t *cr, const mp_layout *L, const mp_series *s) {
    mp_status st = MP_OK;
    cairo_save(cr);
    switch (s->kind) {
    case MP_SERIES_SCATTER: draw_scatter(f, cr, L, s); break;
    case MP_SERIES_LINE: draw_line(cr, L, s); break;
    case MP_SERIES_HEATMAP: st = draw_heatmap(cr, L, s); break;
    case MP_SERIES_BARS: draw_bars(cr, L, s); break;
    }
    cairo_restore(cr);
    f->stats.n_series++;
    return st;
}
