/* plot_internal.h — private structures shared by the files of plots/: the figure,
 * axes and series objects (figure.c), the per-draw layout of each axes
 * (plot_draw.c), series rendering (plot_series.c) and text/tick helpers
 * (plot_text.c). Not installed; only the files of plots/ include it. */
#ifndef MP_PLOT_INTERNAL_H
#define MP_PLOT_INTERNAL_H

#include "figure.h"

typedef enum { MP_SERIES_SCATTER, MP_SERIES_LINE, MP_SERIES_HEATMAP, MP_SERIES_BARS } mp_series_kind;

typedef struct {
    mp_series_kind kind;
    size_t n;                 /* scatter/line points */
    float *x, *y;             /* [n] (line x is filled with 0..n-1 when not given) */
    float *c;                 /* scatter colour values [n] or NULL */
    int32_t *cat;             /* scatter categories [n] or NULL */
    char **names;             /* category names (scatter) or series labels (bars) */
    size_t n_names;
    float *lo, *hi;           /* line error band [n] or NULL */
    float *z;                 /* heatmap [rows, cols]; bars values [rows = groups, cols = series] */
    size_t rows, cols;
    float *err;               /* bars error bars [rows, cols] or NULL */
    char **glabels;           /* bars group labels [rows] or NULL */
    char **xtl, **ytl;        /* heatmap tick labels [cols] / [rows], or NULL */
    char *label, *cbar_label;
    size_t color_index;       /* palette index of the series' (first) colour */
    mp_cmap cmap;
    double vmin, vmax;        /* colour limits (given or centred on 0 for a diverging map; NaN: automatic) */
    int log, mask_upper, colorbar;
    double size, alpha, width;
    int dashed, marker;
} mp_series;

struct mp_axes {
    mp_figure *fig;
    int row, col;
    char *title, *xlabel, *ylabel;
    int xlog, ylog, legend;
    double xlim[2], ylim[2];  /* NaN: automatic */
    mp_series *s;
    size_t ns, cap;
    size_t next_color;
};

struct mp_figure {
    int rows, cols;
    mp_axes *ax;              /* [rows * cols], row-major */
    char *title;
    double font;
    int share_x, share_y;
    mp_figure_stats stats;
};

/* ---- per-draw layout ---- */
#define MP_MAX_TICKS 64

/* A label drawn as base text, a raised superscript (for 10^k) and a tail. */
typedef struct {
    char base[160];
    char sup[16];
    char tail[8];
} mp_label;

typedef struct {
    int log;                  /* coordinates are log10 of the data */
    int inverted;             /* values grow toward the top (x: left) edge, as image rows */
    int categorical;          /* 0 numeric; 1 one tick per bar group or labelled heatmap cell, with its label;
                               * 2 integer cell indices (heatmap) */
    int tight;                /* no margin around the data */
    double lo, hi;            /* limits in transformed (log10 if log) units */
    size_t nt, nminor;
    double t[MP_MAX_TICKS];   /* major tick positions (transformed units) */
    mp_label lab[MP_MAX_TICKS];
    double minor[2 * MP_MAX_TICKS];
    int mexp;                 /* tick labels are multiples of 10^mexp (0: plain values) */
    double rot;               /* tick-label rotation in radians (x axis only: 0 or pi/4) */
    double max_w, max_h;      /* extent of the widest tick label (unrotated) */
} mp_axis;

typedef struct { double x, y, w, h; } mp_rect;

typedef struct {
    mp_axes *ax;
    mp_axis X, Y;
    mp_rect plot;             /* plotting area in user units (points) */
    mp_series *cbar;          /* series that owns the colorbar, or NULL */
    mp_axis C;                /* colorbar scale */
    int show_xt, show_yt;     /* tick labels shown (hidden on inner shared axes) */
    double ml, mr, mt, mb;    /* margins wanted around the plotting area */
    double cbar_w;            /* width of the colorbar with its labels (0: none) */
    int legend_out;           /* legend outside the grid, in the figure's right strip
                               * (every inner corner crowded) */
    double leg_x, leg_y;      /* its top-left corner there */
    double leg_w, leg_h;      /* its size */
} mp_layout;

/* Font sizes derived from the figure's base size. */
typedef struct { double base, tick, label, title, suptitle; } mp_fonts;

/* plot_save.c: mp_figure_save's writer for any drawing: draw(ctx, cr, w, h)
 * paints the rectangle (0, 0, w, h) in points; same formats, checks and
 * atomic write as mp_figure_save (which calls it). */
typedef mp_status (*mp_plot_draw_cb)(void *ctx, cairo_t *cr, double w, double h);
mp_status mp_plot_save_cb(const char *path, double w, double h, double dpi, mp_plot_draw_cb draw, void *ctx);

/* plot_text.c */
double mp_text_width(cairo_t *cr, const char *s, double size, int bold);
double mp_label_width(cairo_t *cr, const mp_label *l, double size);
/* Draws s with its anchor (ha: 0 left .. 1 right; va: 0 top of capitals, 0.5 their
 * middle, 1 bottom of descenders) at (x, y), rotated by angle about the anchor. */
void mp_draw_text(mp_figure *f, cairo_t *cr, const char *s, double x, double y, double size, int bold,
                  double ha, double va, double angle);
void mp_draw_label(mp_figure *f, cairo_t *cr, const mp_label *l, double x, double y, double size,
                   double ha, double va, double angle);
/* Formats tick value v (step between ticks, maxabs = largest |tick|). */
void mp_format_tick(double v, double step, double maxabs, mp_label *out);
/* "text (x10^e)" or, without text, "x10^e": the multiplier of an axis's tick labels. */
void mp_mult_label(mp_label *out, const char *text, int e);
/* Copies the UTF-8 label src into dst[size], keeping at most max_chars characters:
 * a longer one keeps max_chars - 1 and ends with an ellipsis (U+2026). */
#define MP_LABEL_MAX_CHARS 16
void mp_elide_label(char *dst, size_t size, const char *src, size_t max_chars);
/* Ticks for an axis whose limits are set: fills t/lab/minor; target = wanted count. */
void mp_axis_ticks(mp_axis *a, size_t target, const char *const *cat_labels, size_t ncat);

/* plot_series.c */
/* Colour limits of a colour-mapped series in transformed units (log10 if log). */
void mp_series_color_range(const mp_series *s, double *lo, double *hi);
double mp_color_t(const mp_series *s, double v, double lo, double hi);
/* Data extent of a series, in transformed units of the axes' scales; returns 0 if none. */
int mp_series_extent(const mp_series *s, int xlog, int ylog, double xr[2], double yr[2]);
mp_status mp_series_draw(mp_figure *f, cairo_t *cr, const mp_layout *L, const mp_series *s);
/* Screen position of a data value along an axis (NaN if not representable). */
double mp_axis_px(const mp_axis *a, double v, double start, double len, int vertical);
double mp_axis_pos_t(const mp_axis *a, double vt, double start, double len, int vertical);

#endif
