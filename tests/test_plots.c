/* test_plots.c — unit tests of plots/: 1-2-5 ticks and tick labels, colour maps
 * against matplotlib's values, each series kind written as PNG (size read back
 * with cairo), SVG (markers and text runs counted in the XML) and PDF (header,
 * page size), drawing into a caller's context, and clean failures for bad
 * extensions, unwritable paths and bad arguments (nothing left behind); the
 * default diverging map centred on 0 (pixel colours), Unicode token labels drawn
 * inside the figure (ink extents), label elision, and a crowded legend placed
 * outside the grid without narrowing one column.
 * Set MP_KEEP_FIGURES=1 to keep the files (their folder is printed). */
#define _GNU_SOURCE   /* memmem */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cairo.h>

#include "figure.h"
#include "plot_internal.h"
#include "testutil.h"

static char dir[64];

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static size_t count(const char *hay, const char *needle) {
    size_t c = 0, k = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + k, needle)) c++;
    return c;
}

static const char *path_of(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static size_t dir_entries(void) {
    DIR *d = opendir(dir);
    size_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void test_ticks(void) {
    double t[64], step;
    size_t n = mp_plot_nice_ticks(0, 10, 5, t, 64, &step);
    CHECK(n == 6 && step == 2 && t[0] == 0 && t[5] == 10, "[0,10] by 2: n=%zu step=%g", n, step);
    /* Property sweep: step is 1, 2 or 5 x 10^k; ticks inside the range, evenly spaced, about `target` of them. */
    const double ranges[][2] = {{-0.37, 1.2}, {3e-5, 7e-5}, {-1234, 98765}, {0.999, 1.001}, {-5, -4.2}, {1, 1e6}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (size_t target = 2; target <= 10; target += 4) {
            n = mp_plot_nice_ticks(ranges[r][0], ranges[r][1], target, t, 64, &step);
            double m = step / pow(10, floor(log10(step))) ;
            CHECK(fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 || fabs(m - 5) < 1e-9, "range %zu step %g is 1-2-5", r, step);
            CHECK(n >= (target + 1) / 2 && n <= 2 * target + 1, "range %zu target %zu gives %zu ticks", r, target, n);
            for (size_t i = 0; i < n; i++) {
                CHECK(t[i] >= ranges[r][0] - 1e-9 * step && t[i] <= ranges[r][1] + 1e-9 * step, "tick inside");
                if (i) CHECK_NEAR(t[i] - t[i - 1], step, 1e-9 * step, "even spacing");
            }
        }
    CHECK(mp_plot_nice_ticks(1, 1, 5, t, 64, &step) == 0, "empty range gives no ticks");

    /* A log axis within one decade boundary: ticks at 1-2-5 x 10^k, not 100
     * apart (which crowd at the top: 800 900 1000 1100 ran into each other). */
    mp_axis ax;
    memset(&ax, 0, sizeof ax);
    ax.log = 1; ax.lo = log10(120.0); ax.hi = log10(1100.0);
    mp_axis_ticks(&ax, 6, NULL, 0);
    const char *want[] = {"200", "500", "1000"};
    int same = ax.nt == 3;
    for (size_t i = 0; same && i < 3; i++)
        same = strcmp(ax.lab[i].base, want[i]) == 0 && fabs(pow(10, ax.t[i]) - atof(want[i])) < 1e-6;
    CHECK(same, "log axis 120..1100: %zu ticks, first '%s'", ax.nt, ax.nt ? ax.lab[0].base : "");
    /* a narrow log range falls back to evenly spaced values */
    ax.lo = log10(100.0); ax.hi = log10(180.0);
    mp_axis_ticks(&ax, 6, NULL, 0);
    CHECK(ax.nt >= 3 && strcmp(ax.lab[0].base, "100") == 0, "log axis 100..180: %zu ticks from '%s'", ax.nt,
          ax.nt ? ax.lab[0].base : "");
}

static void test_colormaps(void) {
    /* matplotlib: viridis(0) = (0.267004, 0.004874, 0.329415), viridis(1) = (0.993248, 0.906157, 0.143936). */
    mp_rgb a = mp_cmap_color(MP_CMAP_VIRIDIS, 0), b = mp_cmap_color(MP_CMAP_VIRIDIS, 1);
    CHECK_NEAR(a.r, 0.267004, 1e-6, "viridis(0).r");
    CHECK_NEAR(a.b, 0.329415, 1e-6, "viridis(0).b");
    CHECK_NEAR(b.g, 0.906157, 1e-6, "viridis(1).g");
    mp_rgb c = mp_cmap_color(MP_CMAP_VIRIDIS, 2), d = mp_cmap_color(MP_CMAP_VIRIDIS, -1);
    CHECK(c.r == b.r && d.r == a.r, "clamped");
    mp_cmap m;
    CHECK(mp_cmap_parse("Magma", &m) == MP_OK && m == MP_CMAP_MAGMA, "parse magma");
    CHECK(mp_cmap_parse("jet", &m) == MP_ERR_ARG && strstr(mp_last_error(), "jet"), "unknown map named");
    mp_rgb o = mp_palette_color(1);
    CHECK_NEAR(o.r, 0xE6 / 255.0, 1e-12, "Okabe-Ito orange");
    CHECK(mp_palette_color(MP_PALETTE_SIZE).r == mp_palette_color(0).r, "palette cycles");
}

/* A 1x1 figure with one series of each kind in turn; returns it (caller frees). */
static mp_figure *one(int kind, const char *title, int labels) {
    mp_figure *f;
    if (mp_figure_new(1, 1, NULL, &f) != MP_OK) return NULL;
    mp_axes *ax = mp_figure_axes(f, 0, 0);
    float x[37], y[37], v[37], z[12 * 12], lo[37], hi[37];
    int32_t cat[37];
    for (int i = 0; i < 37; i++) {
        x[i] = (float)i / 4; y[i] = (float)sin(i / 5.0); v[i] = (float)i; cat[i] = i % 3;
        lo[i] = y[i] - 0.2f; hi[i] = y[i] + 0.2f;
    }
    for (int i = 0; i < 144; i++) z[i] = (float)(i % 12 <= i / 12 ? 1.0 / (1 + i / 12) : 0);
    mp_status st = MP_OK;
    if (kind == 0) {
        mp_scatter_style s = mp_scatter_style_default();
        const char *names[] = {"a", "b", "c"};
        s.category = cat; s.category_names = names; s.n_category_names = 3;
        st = mp_axes_scatter(ax, x, y, 37, &s);
    } else if (kind == 1) {
        mp_scatter_style s = mp_scatter_style_default();
        s.color = v; s.colorbar_label = "position";
        st = mp_axes_scatter(ax, x, y, 37, &s);
    } else if (kind == 2) {
        mp_line_style s = mp_line_style_default();
        s.label = "mean"; s.band_lo = lo; s.band_hi = hi;
        st = mp_axes_line(ax, x, y, 37, &s);
        mp_axes_set_legend(ax, 1);
    } else if (kind == 3) {
        mp_heatmap_style s = mp_heatmap_style_default();
        s.log = 1; s.mask_upper = 1; s.colorbar_label = "attention";
        st = mp_axes_heatmap(ax, z, 12, 12, &s);
    } else {
        float vals[4 * 2] = {1, 2, 3, 4, 2, 1, 0.5f, 3}, err[8] = {0.1f, 0.2f, 0.1f, 0.3f, 0.2f, 0.1f, 0.1f, 0.2f};
        const char *g[] = {"copy", "identity", "closure", "other"}, *s[] = {"L0", "L1"};
        mp_bars_style bs = {g, s, err};
        st = mp_axes_bars(ax, vals, 4, 2, &bs);
        mp_axes_set_legend(ax, 1);
    }
    CHECK(st == MP_OK, "series %d: %s", kind, mp_last_error());
    if (labels) {
        mp_figure_set_title(f, title);
        mp_axes_set_xlabel(ax, "xlab");
        mp_axes_set_ylabel(ax, "ylab");
    }
    return f;
}

static void test_formats(void) {
    const char *kinds[] = {"scatter_cat", "scatter_val", "line", "heatmap", "bars"};
    for (int k = 0; k < 5; k++) {
        mp_figure *f = one(k, "Title", 1);
        if (!f) { CHECK(0, "figure"); continue; }
        char name[64];
        /* PNG: 360 x 270 pt at 100 dpi -> 500 x 375 pixels. */
        snprintf(name, sizeof name, "%s.png", kinds[k]);
        CHECK(mp_figure_save(f, path_of(name), 360, 270, 100) == MP_OK, "%s", mp_last_error());
        cairo_surface_t *img = cairo_image_surface_create_from_png(path_of(name));
        CHECK(cairo_surface_status(img) == CAIRO_STATUS_SUCCESS, "%s reads back", name);
        CHECK(cairo_image_surface_get_width(img) == 500 && cairo_image_surface_get_height(img) == 375,
              "%s is %dx%d", name, cairo_image_surface_get_width(img), cairo_image_surface_get_height(img));
        cairo_surface_destroy(img);
        /* PDF: header and page size. */
        snprintf(name, sizeof name, "%s.pdf", kinds[k]);
        CHECK(mp_figure_save(f, path_of(name), 360, 270, 100) == MP_OK, "%s", mp_last_error());
        size_t n;
        char *b = slurp(path_of(name), &n);
        CHECK(b && n > 100 && memcmp(b, "%PDF", 4) == 0, "%s starts with %%PDF", name);
        CHECK(b && memmem(b, n, "/MediaBox [ 0 0 360 270 ]", 25), "%s page is 360 x 270 pt", name);  /* binary: memmem */
        free(b);
        /* SVG: size, and as many text groups as text runs drawn. */
        snprintf(name, sizeof name, "%s.svg", kinds[k]);
        CHECK(mp_figure_save(f, path_of(name), 360, 270, 100) == MP_OK, "%s", mp_last_error());
        b = slurp(path_of(name), &n);
        mp_figure_stats st = mp_figure_last_stats(f);
        CHECK(b && strstr(b, "width=\"360pt\" height=\"270pt\""), "%s size", name);
        const char *body = b ? strstr(b, "</defs>") : NULL;
        CHECK(body && count(body, "<g style=\"fill:") == st.n_texts, "%s: %zu text groups, drew %zu", name,
              body ? count(body, "<g style=\"fill:") : 0, st.n_texts);
        if (k <= 1) CHECK(body && count(body, "fill-opacity:0.8;") == 37 && st.n_markers == 37,
                          "%s: 37 markers (%zu in the SVG)", name, body ? count(body, "fill-opacity:0.8;") : 0);
        free(b);
        mp_figure_free(f);
    }
}

/* Axis labels in the SVG: the same figure with and without title/xlabel/ylabel
 * (tick counts pinned by a large size) differs by exactly 3 text runs whose glyphs
 * ("Title ABC" + "xlab" + "ylab" = 17 glyphs, spaces included) appear as <use>. */
static void test_svg_labels(void) {
    size_t runs[2], glyphs[2];
    for (int lab = 0; lab < 2; lab++) {
        mp_figure *f = one(0, "Title ABC", lab);
        mp_axes *ax = mp_figure_axes(f, 0, 0);
        mp_axes_set_xlim(ax, 0, 10);
        mp_axes_set_ylim(ax, -1, 1);
        CHECK(mp_figure_save(f, path_of("labels.svg"), 640, 400, 72) == MP_OK, "%s", mp_last_error());
        size_t n;
        char *b = slurp(path_of("labels.svg"), &n);
        const char *body = b ? strstr(b, "</defs>") : "";
        runs[lab] = count(body, "<g style=\"fill:");
        glyphs[lab] = count(body, "<use xlink:href=\"#glyph");
        free(b);
        mp_figure_free(f);
    }
    CHECK(runs[1] - runs[0] == 3, "3 label text runs: %zu vs %zu", runs[1], runs[0]);
    CHECK(glyphs[1] - glyphs[0] == 17, "17 label glyphs: %zu vs %zu", glyphs[1], glyphs[0]);
    CHECK(runs[0] >= 14, "tick labels drawn: %zu runs", runs[0]);
}

/* Masked cells do not take part in the colour range: the upper triangle holds 100,
 * the lower triangle [0, 1]; the brightest viridis colour (value 1) must appear and
 * no upper-triangle value may stretch the scale. Drawn into our own surface. */
static void test_heatmap_pixels(void) {
    mp_figure *f;
    CHECK(mp_figure_new(1, 1, NULL, &f) == MP_OK, "figure");
    float z[9] = {0, 100, 100, 0.5f, 1, 100, 0.25f, 0.75f, 0};
    mp_heatmap_style s = mp_heatmap_style_default();
    s.mask_upper = 1;
    CHECK(mp_axes_heatmap(mp_figure_axes(f, 0, 0), z, 3, 3, &s) == MP_OK, "%s", mp_last_error());
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 300, 300);
    cairo_t *cr = cairo_create(img);
    CHECK(mp_figure_draw(f, cr, 300, 300) == MP_OK, "%s", mp_last_error());
    CHECK(mp_figure_draw(f, cr, 0, 300) == MP_ERR_ARG, "zero width rejected");
    cairo_destroy(cr);
    cairo_surface_flush(img);
    mp_rgb top = mp_cmap_color(MP_CMAP_VIRIDIS, 1), bottom = mp_cmap_color(MP_CMAP_VIRIDIS, 0);
    uint32_t want_top = (uint32_t)lround(top.r * 255) << 16 | (uint32_t)lround(top.g * 255) << 8 | (uint32_t)lround(top.b * 255);
    uint32_t want_bot = (uint32_t)lround(bottom.r * 255) << 16 | (uint32_t)lround(bottom.g * 255) << 8 | (uint32_t)lround(bottom.b * 255);
    unsigned char *d = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    size_t ntop = 0, nbot = 0;
    for (int y = 0; y < 300; y++)
        for (int x = 0; x < 300; x++) {
            uint32_t p = *(uint32_t *)(d + (size_t)y * stride + 4 * x) & 0xffffff;
            ntop += p == want_top;
            nbot += p == want_bot;
        }
    /* One cell each of value 1 and 0 (twice) visible, each ~60 x 60 pixels plus the colorbar ends. */
    CHECK(ntop > 1000, "value 1 shows as the top colour (%zu pixels)", ntop);
    CHECK(nbot > 2000, "value 0 shows as the bottom colour (%zu pixels)", nbot);
    cairo_surface_destroy(img);
    mp_figure_free(f);
}

static uint32_t rgb24(mp_rgb c) {
    return (uint32_t)lround(c.r * 255) << 16 | (uint32_t)lround(c.g * 255) << 8 | (uint32_t)lround(c.b * 255);
}

/* Pixels of colour want in a W x H RGB24 image. */
static size_t count_color(cairo_surface_t *img, int W, int H, uint32_t want) {
    unsigned char *d = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    size_t n = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) n += (*(uint32_t *)(d + (size_t)y * stride + 4 * x) & 0xffffff) == want;
    return n;
}

/* Signed data gets the diverging map centred on 0 by default: the cell of value 0
 * shows the map's midpoint colour (t = 0.5), -2 its low end and 2 its high end
 * (vmin = -vmax = max |z| = 2); given vmax alone, vmin mirrors it; non-negative
 * data keeps viridis (test_heatmap_pixels); an explicit map is kept. */
static void test_diverging_default(void) {
    float z[4] = {-2, 0, 1, 2};
    mp_figure *f;
    CHECK(mp_figure_new(1, 1, NULL, &f) == MP_OK, "figure");
    mp_heatmap_style s = mp_heatmap_style_default();
    CHECK(s.cmap == MP_CMAP_AUTO, "heatmaps default to the automatic map");
    CHECK(mp_axes_heatmap(mp_figure_axes(f, 0, 0), z, 2, 2, &s) == MP_OK, "%s", mp_last_error());
    mp_series *se = &mp_figure_axes(f, 0, 0)->s[0];
    CHECK(se->cmap == MP_CMAP_RDBU_R && se->vmin == -2 && se->vmax == 2, "signed data: rdbu_r on [-2, 2], got %s on [%g, %g]",
          mp_cmap_name(se->cmap), se->vmin, se->vmax);
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 300, 300);
    cairo_t *cr = cairo_create(img);
    CHECK(mp_figure_draw(f, cr, 300, 300) == MP_OK, "%s", mp_last_error());
    cairo_destroy(cr);
    cairo_surface_flush(img);
    /* Each cell is about 100 x 110 pixels; the colorbar adds a few rows of each colour. */
    size_t mid = count_color(img, 300, 300, rgb24(mp_cmap_color(MP_CMAP_RDBU_R, 0.5)));
    size_t lo = count_color(img, 300, 300, rgb24(mp_cmap_color(MP_CMAP_RDBU_R, 0)));
    size_t hi = count_color(img, 300, 300, rgb24(mp_cmap_color(MP_CMAP_RDBU_R, 1)));
    size_t q3 = count_color(img, 300, 300, rgb24(mp_cmap_color(MP_CMAP_RDBU_R, 0.75)));
    CHECK(mid > 5000 && lo > 5000 && hi > 5000 && q3 > 5000,
          "0 at the midpoint, -2 / 2 at the ends, 1 at 3/4: %zu %zu %zu %zu pixels", mid, lo, hi, q3);
    cairo_surface_destroy(img);

    float w[3] = {-0.5f, 0.25f, 3};
    s.vmax = 1;   /* only vmax given: vmin = -1 */
    CHECK(mp_axes_heatmap(mp_figure_axes(f, 0, 0), w, 1, 3, &s) == MP_OK, "%s", mp_last_error());
    se = &mp_figure_axes(f, 0, 0)->s[1];
    CHECK(se->vmin == -1 && se->vmax == 1, "vmax = 1 alone mirrors to [-1, 1], got [%g, %g]", se->vmin, se->vmax);
    s.vmax = NAN;
    s.cmap = MP_CMAP_MAGMA;   /* an explicit sequential map keeps the data range */
    CHECK(mp_axes_heatmap(mp_figure_axes(f, 0, 0), w, 1, 3, &s) == MP_OK, "%s", mp_last_error());
    se = &mp_figure_axes(f, 0, 0)->s[2];
    CHECK(se->cmap == MP_CMAP_MAGMA && isnan(se->vmin) && isnan(se->vmax), "magma kept, limits automatic");
    mp_scatter_style ss = mp_scatter_style_default();
    float x[3] = {0, 1, 2};
    ss.color = w;
    CHECK(mp_axes_scatter(mp_figure_axes(f, 0, 0), x, x, 3, &ss) == MP_OK, "%s", mp_last_error());
    se = &mp_figure_axes(f, 0, 0)->s[3];
    CHECK(se->cmap == MP_CMAP_RDBU_R && se->vmin == -3 && se->vmax == 3, "signed scatter colours: rdbu_r on [-3, 3], got [%g, %g]",
          se->vmin, se->vmax);
    mp_figure_free(f);
    mp_cmap m;
    CHECK(mp_cmap_parse("AUTO", &m) == MP_OK && m == MP_CMAP_AUTO, "'auto' parses");
}

/* Long labels keep 15 characters and an ellipsis, counting UTF-8 characters. */
static void test_elide(void) {
    char b[160];
    mp_elide_label(b, sizeof b, "short", 16);
    CHECK(strcmp(b, "short") == 0, "short label kept: %s", b);
    mp_elide_label(b, sizeof b, "abcdefghijklmnop", 16);
    CHECK(strcmp(b, "abcdefghijklmnop") == 0, "16 characters kept: %s", b);
    mp_elide_label(b, sizeof b, "abcdefghijklmnopq", 16);
    CHECK(strcmp(b, "abcdefghijklmno\xe2\x80\xa6") == 0, "17 characters elided: %s", b);
    /* 20 CJK characters (3 bytes each): 15 kept, cut on a character boundary. */
    char cjk[64] = "";
    for (int i = 0; i < 20; i++) strcat(cjk, "\xe6\x97\xa5");
    mp_elide_label(b, sizeof b, cjk, 16);
    CHECK(strlen(b) == 15 * 3 + 3 && strcmp(b + 45, "\xe2\x80\xa6") == 0, "CJK elided at 15 characters: %zu bytes", strlen(b));
    char small[8];
    mp_elide_label(small, sizeof small, cjk, 16);
    CHECK(strlen(small) == 6 && strcmp(small + 3, "\xe2\x80\xa6") == 0, "a small buffer cuts on a boundary: %zu bytes", strlen(small));
}

/* Ink extents of everything f draws at W x H (recording surface, unbounded). */
static void ink_of(mp_figure *f, double W, double H, double e[4]) {
    cairo_surface_t *rec = cairo_recording_surface_create(CAIRO_CONTENT_COLOR_ALPHA, NULL);
    cairo_t *cr = cairo_create(rec);
    CHECK(mp_figure_draw(f, cr, W, H) == MP_OK, "%s", mp_last_error());
    cairo_destroy(cr);
    cairo_recording_surface_ink_extents(rec, &e[0], &e[1], &e[2], &e[3]);
    cairo_surface_destroy(rec);
}

/* Token labels: Unicode pieces (U+2581, umlaut, CJK, invalid UTF-8 bytes, a long
 * one) on both heatmap axes draw without error, every one of them (few columns),
 * and nothing is drawn outside the figure, also when the x labels must turn 45
 * degrees and be thinned (many columns in a narrow figure). */
static void test_token_labels(void) {
    const char *tok[6] = {"\xe2\x96\x81the", "\xc3\xb6", "\xe6\x97\xa5\xe6\x9c\xac", "\xff\xfe", "<b>&",
                          "a very long token piece indeed"};
    float z[36];
    for (int i = 0; i < 36; i++) z[i] = (float)(i % 7) / 7;
    mp_figure *f;
    CHECK(mp_figure_new(1, 1, NULL, &f) == MP_OK, "figure");
    mp_heatmap_style s = mp_heatmap_style_default();
    s.xticklabels = tok;
    s.yticklabels = tok;
    s.mask_upper = 1;
    CHECK(mp_axes_heatmap(mp_figure_axes(f, 0, 0), z, 6, 6, &s) == MP_OK, "%s", mp_last_error());
    mp_axes_set_xlabel(mp_figure_axes(f, 0, 0), "key");
    double e[4];
    ink_of(f, 400, 360, e);
    CHECK(e[0] >= -0.01 && e[1] >= -0.01 && e[0] + e[2] <= 400.01 && e[1] + e[3] <= 360.01,
          "labels inside the 400 x 360 figure: ink at (%g, %g) size %g x %g", e[0], e[1], e[2], e[3]);
    /* 6 + 6 labels, the 6 colorbar ticks at most, and the x label. */
    CHECK(mp_figure_last_stats(f).n_texts >= 13, "every token label drawn: %zu texts", mp_figure_last_stats(f).n_texts);
    CHECK(mp_figure_save(f, path_of("tokens.png"), 400, 360, 100) == MP_OK, "%s", mp_last_error());
    CHECK(mp_figure_save(f, path_of("tokens.pdf"), 400, 360, 100) == MP_OK, "%s", mp_last_error());
    mp_figure_free(f);

    enum { N = 48 };
    const char *many[N];
    char buf[N][32];
    float w[N * N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof buf[i], "tok\xc3\xa9n_%d_piece", i);
        many[i] = buf[i];
    }
    for (int i = 0; i < N * N; i++) w[i] = (float)((i * 37) % 11) - 5;
    CHECK(mp_figure_new(1, 1, NULL, &f) == MP_OK, "figure");
    s = mp_heatmap_style_default();
    s.xticklabels = many;
    s.yticklabels = many;
    CHECK(mp_axes_heatmap(mp_figure_axes(f, 0, 0), w, N, N, &s) == MP_OK, "%s", mp_last_error());
    ink_of(f, 300, 300, e);
    CHECK(e[0] >= -0.01 && e[1] >= -0.01 && e[0] + e[2] <= 300.01 && e[1] + e[3] <= 300.01,
          "rotated, thinned labels inside the 300 x 300 figure: ink at (%g, %g) size %g x %g", e[0], e[1], e[2], e[3]);
    size_t nt = mp_figure_last_stats(f).n_texts;
    CHECK(nt > 10 && nt < 2 * N, "labels thinned when dense: %zu texts for %d + %d cells", nt, N, N);
    mp_figure_free(f);
}

/* A legend that would hide data in every corner goes to the strip right of the
 * grid: both columns keep the same width, and nothing leaves the figure. */
static void test_legend_outside(void) {
    enum { N = 400 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {   /* points spread over the whole panel, corners included */
        x[i] = (float)(i % 20);
        y[i] = (float)(i / 20);
    }
    mp_figure *f;
    CHECK(mp_figure_new(1, 2, NULL, &f) == MP_OK, "figure");
    mp_scatter_style s = mp_scatter_style_default();
    s.label = "queries";
    for (int c = 0; c < 2; c++) CHECK(mp_axes_scatter(mp_figure_axes(f, 0, c), x, y, N, &s) == MP_OK, "%s", mp_last_error());
    mp_axes_set_legend(mp_figure_axes(f, 0, 1), 1);
    double e[4];
    ink_of(f, 500, 250, e);
    mp_figure_stats st = mp_figure_last_stats(f);
    CHECK(st.n_legends_outside == 1, "the crowded legend went outside (%zu)", st.n_legends_outside);
    CHECK(fabs(st.plot_w_max - st.plot_w_min) < 1e-6, "columns equally wide: %g vs %g", st.plot_w_min, st.plot_w_max);
    CHECK(e[0] >= -0.01 && e[1] >= -0.01 && e[0] + e[2] <= 500.01 && e[1] + e[3] <= 250.01,
          "legend inside the figure: ink at (%g, %g) size %g x %g", e[0], e[1], e[2], e[3]);
    mp_figure_free(f);
}

static void test_failures(void) {
    mp_figure *f = one(0, "t", 1);
    size_t before = dir_entries();
    const char *bad = path_of("figure.bmp");
    CHECK(mp_figure_save(f, bad, 300, 200, 100) == MP_ERR_ARG && strstr(mp_last_error(), bad) &&
          strstr(mp_last_error(), ".bmp"), "unknown extension named: %s", mp_last_error());
    CHECK(mp_figure_save(f, path_of("noext"), 300, 200, 100) == MP_ERR_ARG, "no extension");
    const char *nodir = "/nonexistent-mechprobe-dir/fig.png";
    CHECK(mp_figure_save(f, nodir, 300, 200, 100) == MP_ERR_IO && strstr(mp_last_error(), nodir),
          "unwritable path named: %s", mp_last_error());
    CHECK(mp_figure_save(f, path_of("huge.png"), 30000, 200, 300) == MP_ERR_ARG, "too many pixels: %s", mp_last_error());
    CHECK(mp_figure_save(f, path_of("tiny.pdf"), 1, 200, 100) == MP_ERR_ARG, "too small");
    /* A log axis cannot show a limit <= 0: drawing fails, and the file is not written. */
    mp_axes *ax = mp_figure_axes(f, 0, 0);
    mp_axes_set_xlog(ax, 1);
    mp_axes_set_xlim(ax, -1, 10);
    CHECK(mp_figure_save(f, path_of("log.svg"), 300, 200, 100) == MP_ERR_ARG && strstr(mp_last_error(), "log"),
          "log axis with xlim <= 0: %s", mp_last_error());
    CHECK(dir_entries() == before, "nothing written (no temporary files left): %zu vs %zu", dir_entries(), before);
    mp_figure_free(f);

    mp_figure *g = NULL;
    CHECK(mp_figure_new(0, 1, NULL, &g) == MP_ERR_ARG && g == NULL, "0 rows rejected");
    CHECK(mp_figure_new(2, 3, NULL, &g) == MP_OK, "2x3");
    CHECK(mp_figure_axes(g, 2, 0) == NULL && strstr(mp_last_error(), "outside"), "axes out of range");
    ax = mp_figure_axes(g, 1, 2);
    float x[3] = {1, 2, 3};
    int32_t c[3] = {0, 1, -1};
    mp_scatter_style s = mp_scatter_style_default();
    s.color = x; s.category = c;
    CHECK(mp_axes_scatter(ax, x, x, 3, &s) == MP_ERR_ARG, "color and category together");
    s.color = NULL;
    CHECK(mp_axes_scatter(ax, x, x, 3, &s) == MP_ERR_ARG && strstr(mp_last_error(), "negative"), "negative category");
    CHECK(mp_axes_set_xlim(ax, 2, 1) == MP_ERR_ARG, "xlim lo >= hi");
    mp_heatmap_style h = mp_heatmap_style_default();
    h.log = 1; h.vmin = -1;
    CHECK(mp_axes_heatmap(ax, x, 1, 3, &h) == MP_ERR_ARG, "log heatmap with vmin <= 0");
    /* Shared axes on a grid, empty axes included, draw fine. */
    mp_figure_free(g);
    mp_figure_params p = mp_figure_params_default();
    p.share_x = p.share_y = 1;
    p.title = "shared";
    CHECK(mp_figure_new(2, 2, &p, &g) == MP_OK, "shared");
    float y[3] = {10, 20, 30};
    mp_axes_line(mp_figure_axes(g, 0, 0), x, y, 3, NULL);
    mp_axes_line(mp_figure_axes(g, 1, 1), y, x, 3, NULL);
    CHECK(mp_figure_save(g, path_of("shared.png"), 400, 300, 72) == MP_OK, "%s", mp_last_error());
    mp_figure_free(g);
}

int main(void) {
    mp_init();
    snprintf(dir, sizeof dir, "/tmp/mp_test_plots.XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_ticks();
    test_colormaps();
    test_formats();
    test_svg_labels();
    test_heatmap_pixels();
    test_diverging_default();
    test_elide();
    test_token_labels();
    test_legend_outside();
    test_failures();
    if (getenv("MP_KEEP_FIGURES")) printf("figures kept in %s\n", dir);
    else {
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));)
            if (e->d_name[0] != '.') unlink(path_of(e->d_name));
        if (d) closedir(d);
        rmdir(dir);
    }
    /* No cairo_debug_reset_static_data(): pango's font map (initialised by a
     * fontconfig thread of its own) may still hold cairo fonts, and cairo asserts. */
    return tu_finish("test_plots");
}
