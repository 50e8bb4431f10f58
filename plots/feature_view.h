/* feature_view.h — the "feature view" figure of SAE features (as SAE-vis and
 * Neuronpedia show them, drawn for a paper): one block per feature, titled
 * with its index, activation density and max, with a small white-to-colour
 * colorbar; under it the feature's top contexts, one line each: a window of
 * tokens drawn as text on boxes shaded by the feature's activation at each
 * token, the max token outlined. The lines are aligned on that token (a
 * keyword-in-context layout), with its value printed at the left. Spaces,
 * newlines, tabs and other control characters are shown as visible marks
 * (middle dot, return arrow, tab arrow, \xNN); bytes that are not UTF-8 as
 * U+FFFD. PNG, SVG or PDF by the file extension (plots/plot_save.c).
 * The contexts come from analyze/feat_top.h; Lua: mp.sae.feature_view. */
#ifndef MP_PLOTS_FEATURE_VIEW_H
#define MP_PLOTS_FEATURE_VIEW_H

#include <cairo.h>

#include "colormaps.h"
#include "mp_common.h"

typedef struct {
    int feature;              /* the index printed in the title */
    double density;           /* fraction of tokens where it fires, in [0, 1]; NaN: not printed */
    double max;               /* the top of the colour scale and the title's max; NaN or <= 0:
                               * the largest activation in the block's lines */
    int n_lines;              /* contexts (0: the block says there are none) */
    int width;                /* tokens per line */
    int center;               /* the column of each line's max token (outlined), 0..width-1 */
    const char *const *tok;   /* [n_lines * width] token text (any bytes; NUL-terminated);
                               * NULL: no token there (past the sequence's ends) */
    const float *act;         /* [n_lines * width] the feature's activation at each token */
} mp_fview_feature;

typedef struct {
    const char *title;        /* figure title above the blocks, or NULL */
    double font_size;         /* token text in pt (default 9) */
    double width_pt;          /* > 0: the figure is scaled to this width; 0: its natural width */
    mp_rgb color;             /* the shade at the max (default Okabe-Ito vermillion) */
    int show_values;          /* print each line's max value at its left (default 1) */
} mp_fview_params;
mp_fview_params mp_fview_params_default(void);

/* The figure's size in points (natural, or scaled to p->width_pt).
 * MP_ERR_ARG naming the bad feature / field. */
mp_status mp_fview_size(const mp_fview_feature *f, int n, const mp_fview_params *p, double *w_pt, double *h_pt);
/* Draws into cr over (0, 0, w_pt, h_pt) (white background), scaled to fit. */
mp_status mp_fview_draw(const mp_fview_feature *f, int n, const mp_fview_params *p, cairo_t *cr, double w_pt,
                        double h_pt);
/* Writes path (.png / .svg / .pdf; dpi for PNG) at mp_fview_size's size,
 * atomically; *w_pt / *h_pt (may be NULL) receive that size. */
mp_status mp_fview_save(const mp_fview_feature *f, int n, const mp_fview_params *p, const char *path, double dpi,
                        double *w_pt, double *h_pt);

#endif
