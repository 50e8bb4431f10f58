/* colormaps.h — colour scales for figures: perceptually uniform sequential maps
 * (viridis, magma), a diverging map (RdBu_r, for signed values), gray, and the
 * Okabe-Ito qualitative palette (colour-blind safe) for categories and series. */
#ifndef MP_PLOTS_COLORMAPS_H
#define MP_PLOTS_COLORMAPS_H

#include <stddef.h>
#include "mp_common.h"

/* MP_CMAP_AUTO (the default of heatmaps and colour-valued scatters): rdbu_r centred
 * on 0 for signed data, viridis otherwise; resolved when the series is added. */
typedef enum { MP_CMAP_AUTO = -1, MP_CMAP_VIRIDIS = 0, MP_CMAP_MAGMA, MP_CMAP_RDBU_R, MP_CMAP_GRAY, MP_CMAP_COUNT } mp_cmap;

typedef struct { double r, g, b; } mp_rgb;

/* Parses "auto", "viridis", "magma", "rdbu_r" (or "rdbu", "coolwarm": the same diverging map),
 * "gray"/"grey", case-insensitive; MP_ERR_ARG naming the valid names otherwise. */
mp_status mp_cmap_parse(const char *name, mp_cmap *out);
const char *mp_cmap_name(mp_cmap m);

/* Colour at t in [0, 1] (clamped; NaN gives light gray), nearest of 256 entries. */
mp_rgb mp_cmap_color(mp_cmap m, double t);

/* Okabe-Ito palette, cycled: blue, orange, green, vermillion, reddish purple,
 * sky blue, yellow, black. */
#define MP_PALETTE_SIZE 8
mp_rgb mp_palette_color(size_t i);

#endif
