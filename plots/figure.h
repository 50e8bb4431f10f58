/* figure.h — paper-quality figures with cairo, in the style of kplot: a figure is
 * a grid of axes (rows x cols, optionally sharing x and/or y limits); each axes
 * holds series (scatter, heatmap, lines with error bands, grouped bars), a title,
 * axis labels, linear or log scales, and optionally a legend and a colorbar.
 *
 * The library draws into a caller's cairo_t (mp_figure_draw); mp_figure_save
 * picks PNG / SVG / PDF by the file extension and writes atomically. Sizes are in
 * points (1/72 in); a PNG is width_pt * dpi / 72 pixels wide. Series copy their
 * data, so the caller's arrays may be freed after each call. Indices are 0-based.
 * Knows nothing of Lua (lua/lplot.c binds it). */
#ifndef MP_PLOTS_FIGURE_H
#define MP_PLOTS_FIGURE_H

#include <stddef.h>
#include <stdint.h>
#include <cairo.h>

#include "mp_common.h"
#include "colormaps.h"

typedef struct mp_figure mp_figure;
typedef struct mp_axes mp_axes;

typedef struct {
    const char *title;  /* figure title (suptitle), or NULL */
    double font_size;   /* base font size in pt (default 10): ticks 0.85x, titles 1.1x */
    int share_x;        /* all axes share x limits; only the bottom row labels x ticks */
    int share_y;        /* all axes share y limits; only the left column labels y ticks */
} mp_figure_params;
mp_figure_params mp_figure_params_default(void);

/* A figure of rows x cols axes (1..16 each). On failure *out is NULL. */
mp_status mp_figure_new(int rows, int cols, const mp_figure_params *p, mp_figure **out);
void mp_figure_free(mp_figure *f);
/* The axes at (row, col), or NULL (with an MP_ERR_ARG message) if out of range. */
mp_axes *mp_figure_axes(mp_figure *f, int row, int col);
int mp_figure_rows(const mp_figure *f);
int mp_figure_cols(const mp_figure *f);
mp_status mp_figure_set_title(mp_figure *f, const char *title);

/* Draws the whole figure into cr over the rectangle (0, 0, width_pt, height_pt) of
 * cr's current user space (white background). Fails with MP_ERR_ARG on a bad size
 * and reports any cairo error as MP_ERR_IO. */
mp_status mp_figure_draw(mp_figure *f, cairo_t *cr, double width_pt, double height_pt);

/* Writes path as PNG, SVG or PDF by its extension (case-insensitive). Unknown
 * extension: MP_ERR_ARG; unwritable path: MP_ERR_IO; both name the path and write
 * nothing (the file is written under a temporary name and renamed). dpi applies to
 * PNG only (PNG size = round(pt * dpi / 72) pixels). */
mp_status mp_figure_save(mp_figure *f, const char *path, double width_pt, double height_pt, double dpi);

/* What the last mp_figure_draw drew (for tests and diagnostics). */
typedef struct {
    size_t n_texts;    /* text runs (one pango layout each) */
    size_t n_markers;  /* scatter markers */
    size_t n_series;
    size_t n_legends_outside;      /* legends drawn in the strip right of the grid */
    double plot_w_min, plot_w_max; /* narrowest and widest plotting area (pt) */
} mp_figure_stats;
mp_figure_stats mp_figure_last_stats(const mp_figure *f);

/* ---- axes decorations ---- */
mp_status mp_axes_set_title(mp_axes *ax, const char *s);
mp_status mp_axes_set_xlabel(mp_axes *ax, const char *s);
mp_status mp_axes_set_ylabel(mp_axes *ax, const char *s);
void mp_axes_set_xlog(mp_axes *ax, int on);
void mp_axes_set_ylog(mp_axes *ax, int on);
/* Axis limits in data units (NaN for automatic); lo < hi, and > 0 on a log axis
 * (checked when drawing). */
mp_status mp_axes_set_xlim(mp_axes *ax, double lo, double hi);
mp_status mp_axes_set_ylim(mp_axes *ax, double lo, double hi);
/* Legend of the labelled series, placed in the emptiest inner corner of the axes;
 * when every corner would hide data, outside the grid, in a strip at the right
 * edge of the figure beside the axes' row (all columns narrow alike). */
void mp_axes_set_legend(mp_axes *ax, int on);

/* ---- series ---- */
typedef struct {
    const float *color;        /* [n] values mapped through cmap, with a colorbar; or NULL */
    const int32_t *category;   /* [n] category ids >= 0 coloured by the Okabe-Ito palette; or NULL */
    const char *const *category_names; /* legend names of ids 0..n_category_names-1 (optional) */
    size_t n_category_names;
    const char *label;         /* legend label of a single-colour series */
    const char *colorbar_label;
    mp_cmap cmap;              /* default MP_CMAP_AUTO: rdbu_r centred on 0 for signed colours, else viridis */
    double vmin, vmax;         /* colour range, NaN: data range */
    double size;               /* marker diameter in pt (default 3) */
    double alpha;              /* opacity (default 0.8) */
} mp_scatter_style;
mp_scatter_style mp_scatter_style_default(void);
/* Points with non-finite x or y (or <= 0 on a log axis) are skipped. */
mp_status mp_axes_scatter(mp_axes *ax, const float *x, const float *y, size_t n, const mp_scatter_style *s);

typedef struct {
    const char *label;         /* legend label, or NULL */
    const float *band_lo;      /* [n] lower and upper edge of an error band, or NULL */
    const float *band_hi;
    double width;              /* line width in pt (default 1.5) */
    int dashed;
    int marker;                /* draw a dot at each point */
} mp_line_style;
mp_line_style mp_line_style_default(void);
/* x may be NULL (0, 1, ..., n-1); non-finite points break the line. */
mp_status mp_axes_line(mp_axes *ax, const float *x, const float *y, size_t n, const mp_line_style *s);

typedef struct {
    int log;                   /* log colour scale (non-positive cells are left blank) */
    int mask_upper;            /* blank the cells above the diagonal (causal attention maps) */
    int colorbar;              /* default 1 */
    mp_cmap cmap;              /* default MP_CMAP_AUTO: rdbu_r for signed data, else viridis */
    double vmin, vmax;         /* NaN: data range; a diverging map centres them on 0
                                * (vmin = -vmax = max |z| unless given; one given: mirrored) */
    const char *colorbar_label;
    const char *const *xticklabels;  /* [cols] labels of the columns (e.g. key tokens), or NULL */
    const char *const *yticklabels;  /* [rows] labels of the rows (e.g. query tokens), or NULL */
} mp_heatmap_style;
mp_heatmap_style mp_heatmap_style_default(void);
/* z [rows, cols] row-major; row 0 at the top (like an attention map: queries down,
 * keys across); axes are cell indices, or the given tick labels (any UTF-8, drawn
 * with pango; longer than 16 characters: elided with an ellipsis; x labels turn
 * 45 degrees when they do not fit, and only every k-th is shown when even that is
 * too dense). NaN cells are blank. */
mp_status mp_axes_heatmap(mp_axes *ax, const float *z, size_t rows, size_t cols, const mp_heatmap_style *s);

typedef struct {
    const char *const *group_labels;  /* [ngroups] x tick labels, or NULL (1..ngroups) */
    const char *const *series_labels; /* [nseries] legend labels, or NULL */
    const float *err;                 /* [ngroups, nseries] symmetric error bars, or NULL */
} mp_bars_style;
/* values [ngroups, nseries]: one cluster of nseries bars per group. */
mp_status mp_axes_bars(mp_axes *ax, const float *values, size_t ngroups, size_t nseries, const mp_bars_style *s);

/* ---- ticks (exposed for tests) ---- */
/* Tick values on [lo, hi] with a 1-2-5 x 10^k step giving about `target` ticks;
 * writes at most max values to ticks, returns how many; *step_out gets the step. */
size_t mp_plot_nice_ticks(double lo, double hi, size_t target, double *ticks, size_t max, double *step_out);

#endif
