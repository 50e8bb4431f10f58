/* feature_view.c — draws the feature-view figure (feature_view.h): layout
 * (measured with pango, hinting off so that measuring and drawing agree on
 * any surface and scale), token boxes shaded white-to-colour, the max token
 * outlined, block titles with a colorbar, and saving through plot_save.c. */
#include "feature_view.h"
#include "plot_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pango/pangocairo.h>

#define MARGIN 10.0
#define BLOCK_GAP 12.0
#define PAD_X 1.6        /* text inset in a token box */
#define BOX_GAP 0.8      /* between neighbouring boxes */
#define LINE_GAP 2.2     /* between lines */
#define CBAR_W 56.0
#define MAX_FEATURES 4096
#define MAX_WIDTH 1024
#define MAX_LINES 100000

mp_fview_params mp_fview_params_default(void) {
    mp_fview_params p = {NULL, 9.0, 0.0, {0.835, 0.369, 0.0}, 1};
    return p;
}

/* ---- text ---- */

typedef struct {
    cairo_t *cr;
    PangoContext *pc;
    PangoFontDescription *fd;
} text_ctx;

static void text_begin(text_ctx *t, cairo_t *cr) {
    t->cr = cr;
    t->pc = pango_cairo_create_context(cr);
    cairo_font_options_t *fo = cairo_font_options_create();
    cairo_font_options_set_hint_metrics(fo, CAIRO_HINT_METRICS_OFF);
    cairo_font_options_set_hint_style(fo, CAIRO_HINT_STYLE_NONE);
    pango_cairo_context_set_font_options(t->pc, fo);
    cairo_font_options_destroy(fo);
    t->fd = pango_font_description_new();
    pango_font_description_set_family_static(t->fd, "sans-serif");
}

static void text_end(text_ctx *t) {
    if (t->fd) pango_font_description_free(t->fd);
    if (t->pc) g_object_unref(t->pc);
}

/* A layout of pango markup at size (pt). */
static PangoLayout *markup_layout(text_ctx *t, const char *markup, double size) {
    pango_cairo_update_context(t->cr, t->pc);
    PangoLayout *lay = pango_layout_new(t->pc);
    pango_font_description_set_absolute_size(t->fd, size * PANGO_SCALE);
    pango_layout_set_font_description(lay, t->fd);
    pango_layout_set_markup(lay, markup, -1);
    return lay;
}

static double markup_width(text_ctx *t, const char *markup, double size) {
    PangoLayout *lay = markup_layout(t, markup, size);
    PangoRectangle r;
    pango_layout_get_extents(lay, NULL, &r);
    g_object_unref(lay);
    return (double)r.width / PANGO_SCALE;
}

/* Draws markup with its baseline's left end at (x, y) in colour (r, g, b). */
static void markup_show(text_ctx *t, const char *markup, double x, double y, double size, double r, double g,
                        double b) {
    PangoLayout *lay = markup_layout(t, markup, size);
    cairo_set_source_rgb(t->cr, r, g, b);
    cairo_move_to(t->cr, x, y - (double)pango_layout_get_baseline(lay) / PANGO_SCALE);
    pango_cairo_show_layout(t->cr, lay);
    cairo_new_path(t->cr);
    g_object_unref(lay);
}

#define MARK_OPEN "<span fgalpha=\"29491\">" /* 45% of 65535 */
#define MARK_CLOSE "</span>"

/* The pango markup of a token: text escaped, whitespace and control
 * characters as faint marks (the text colour at 45% opacity), invalid UTF-8 as U+FFFD, empty as a grey "∅". */
static char *token_markup(const char *s) {
    gchar *valid = g_utf8_make_valid(s ? s : "", -1);
    GString *m = g_string_new(NULL);
    if (!*valid) g_string_append(m, MARK_OPEN "\xe2\x88\x85" MARK_CLOSE);
    for (const char *c = valid; *c; c = g_utf8_next_char(c)) {
        gunichar u = g_utf8_get_char(c);
        if (u == ' ') g_string_append(m, MARK_OPEN "\xc2\xb7" MARK_CLOSE);              /* · */
        else if (u == '\n') g_string_append(m, MARK_OPEN "\xe2\x86\xb5" MARK_CLOSE);    /* ↵ */
        else if (u == '\t') g_string_append(m, MARK_OPEN "\xe2\x87\xa5" MARK_CLOSE);    /* ⇥ */
        else if (u == '\r') g_string_append(m, MARK_OPEN "\\r" MARK_CLOSE);
        else if (u < 0x20 || u == 0x7f) g_string_append_printf(m, MARK_OPEN "\\x%02X" MARK_CLOSE, (unsigned)u);
        else if (u == 0xa0) g_string_append(m, MARK_OPEN "\xe2\x8d\xbd" MARK_CLOSE);    /* ⍽ no-break space */
        else {
            gchar *e = g_markup_escape_text(c, (gssize)(g_utf8_next_char(c) - c));
            g_string_append(m, e);
            g_free(e);
        }
    }
    g_free(valid);
    return g_string_free(m, FALSE);
}

/* ---- layout ---- */

typedef struct {
    double scale;          /* colour scale top */
    size_t k;              /* n_lines * width */
    double *tw;            /* [k] box widths (0: no token) */
    char **mk;             /* [n_lines * width] token markup (NULL: no token) */
    char title[256];       /* markup */
    double title_w;
} block_lay;

typedef struct {
    double font, line_h, box_h, title_h;
    double val_w;          /* value column */
    double left_w;         /* widest run of tokens before the max token */
    double right_w;        /* widest run from the max token on */
    double content_w, w, h;
    double head_h;         /* figure title strip */
    block_lay *b;
    int n;
} layout;

static void format_value(char *buf, size_t n, double v) {
    if (!isfinite(v)) snprintf(buf, n, "\xe2\x80\x93");
    else if (fabs(v) >= 1000 || (fabs(v) < 0.01 && v != 0)) snprintf(buf, n, "%.2e", v);
    else snprintf(buf, n, "%.2f", v);
}

static void format_density(char *buf, size_t n, double d) {
    double pc = d * 100;
    if (pc == 0) snprintf(buf, n, "0%%");
    else if (pc >= 10) snprintf(buf, n, "%.1f%%", pc);
    else if (pc >= 0.01) snprintf(buf, n, "%.3g%%", pc);
    else snprintf(buf, n, "%.2e%%", pc);
}

static mp_status check(const mp_fview_feature *f, int n, const mp_fview_params *p) {
    if (!f || n < 1 || n > MAX_FEATURES)
        return mp_error(MP_ERR_ARG, "feature view: %d features (need 1..%d)", n, MAX_FEATURES);
    if (!(p->font_size >= 2 && p->font_size <= 72))
        return mp_error(MP_ERR_ARG, "feature view: font_size = %g must be in [2, 72] pt", p->font_size);
    if (!(p->width_pt == 0 || (p->width_pt >= 16 && p->width_pt <= 1e5)))
        return mp_error(MP_ERR_ARG, "feature view: width = %g pt must be 0 (natural) or in [16, 100000]", p->width_pt);
    for (int i = 0; i < n; i++) {
        const mp_fview_feature *b = &f[i];
        if (b->n_lines < 0 || b->n_lines > MAX_LINES)
            return mp_error(MP_ERR_ARG, "feature view: feature #%d has %d lines (0..%d)", i + 1, b->n_lines, MAX_LINES);
        if (b->n_lines > 0 && (b->width < 1 || b->width > MAX_WIDTH))
            return mp_error(MP_ERR_ARG, "feature view: feature #%d has %d tokens a line (1..%d)", i + 1, b->width,
                            MAX_WIDTH);
        if (b->n_lines > 0 && (b->center < 0 || b->center >= b->width))
            return mp_error(MP_ERR_ARG, "feature view: feature #%d: center %d outside its %d tokens", i + 1, b->center,
                            b->width);
        if (b->n_lines > 0 && (!b->tok || !b->act))
            return mp_error(MP_ERR_ARG, "feature view: feature #%d has lines but no tokens or activations", i + 1);
        if (!(isnan(b->density) || (b->density >= 0 && b->density <= 1)))
            return mp_error(MP_ERR_ARG, "feature view: feature #%d: density %g outside [0, 1]", i + 1, b->density);
    }
    return MP_OK;
}

static void layout_free(layout *L) {
    if (!L->b) return;
    for (int i = 0; i < L->n; i++) {
        if (L->b[i].mk)
            for (size_t j = 0; j < L->b[i].k; j++) g_free(L->b[i].mk[j]);
        free(L->b[i].mk);
        free(L->b[i].tw);
    }
    free(L->b);
    L->b = NULL;
}

/* Measures everything with t's cairo context. */
static mp_status layout_make(layout *L, const mp_fview_feature *f, int n, const mp_fview_params *p, text_ctx *t) {
    memset(L, 0, sizeof *L);
    L->n = n;
    L->font = p->font_size;
    L->box_h = 1.5 * L->font;
    L->line_h = L->box_h + LINE_GAP;
    L->title_h = 1.9 * L->font;
    L->b = calloc((size_t)n, sizeof *L->b);
    if (!L->b) return mp_error(MP_ERR_NOMEM, "feature view: out of memory");
    double small = 0.85 * L->font, title_max = 0;
    for (int i = 0; i < n; i++) {
        const mp_fview_feature *b = &f[i];
        block_lay *bl = &L->b[i];
        size_t k = (size_t)b->n_lines * (size_t)(b->n_lines ? b->width : 0);
        bl->k = k;
        bl->tw = calloc(k ? k : 1, sizeof(double));
        bl->mk = calloc(k ? k : 1, sizeof(char *));
        if (!bl->tw || !bl->mk) {
            layout_free(L);
            return mp_error(MP_ERR_NOMEM, "feature view: out of memory");
        }
        double top = 0;
        for (size_t j = 0; j < k; j++)
            if (b->tok[j] && isfinite(b->act[j]) && b->act[j] > top) top = b->act[j];
        bl->scale = isfinite(b->max) && b->max > 0 ? b->max : top;
        char dens[80] = "", mx[48];
        if (!isnan(b->density)) {
            char d[40];
            format_density(d, sizeof d, b->density);
            snprintf(dens, sizeof dens, "density %s \xc2\xb7 ", d);
        }
        format_value(mx, sizeof mx, isfinite(b->max) && b->max > 0 ? b->max : top);
        snprintf(bl->title, sizeof bl->title, "<b>Feature %d</b>   <span foreground=\"#555555\">%smax %s</span>",
                 b->feature, dens, mx);
        bl->title_w = markup_width(t, bl->title, 1.05 * L->font);
        if (bl->title_w > title_max) title_max = bl->title_w;
        for (int l = 0; l < b->n_lines; l++) {
            double left = 0, right = 0;
            char vb[48];
            format_value(vb, sizeof vb, b->act[(size_t)l * b->width + b->center]);
            double vw = markup_width(t, vb, small) + 8;
            if (p->show_values && vw > L->val_w) L->val_w = vw;
            for (int c = 0; c < b->width; c++) {
                size_t j = (size_t)l * b->width + c;
                if (!b->tok[j]) continue;
                bl->mk[j] = token_markup(b->tok[j]);
                bl->tw[j] = markup_width(t, bl->mk[j], L->font) + 2 * PAD_X;
                if (c < b->center) left += bl->tw[j] + BOX_GAP;
                else right += bl->tw[j] + BOX_GAP;
            }
            if (left > L->left_w) L->left_w = left;
            if (right > L->right_w) L->right_w = right;
        }
    }
    L->content_w = L->val_w + L->left_w + L->right_w;
    double head_w = 0;
    if (p->title && *p->title) {
        gchar *e = g_markup_escape_text(p->title, -1);
        char *m = g_strdup_printf("<b>%s</b>", e);
        head_w = markup_width(t, m, 1.25 * L->font);
        g_free(m);
        g_free(e);
        L->head_h = 2.2 * L->font;
    }
    double need = title_max + 16 + CBAR_W + 2 * markup_width(t, "0.00e+00", small);
    if (need < head_w) need = head_w;
    L->w = 2 * MARGIN + (L->content_w > need ? L->content_w : need);
    L->h = 2 * MARGIN + L->head_h;
    for (int i = 0; i < n; i++)
        L->h += L->title_h + (f[i].n_lines ? f[i].n_lines : 1) * L->line_h + (i + 1 < n ? BLOCK_GAP : 0);
    return MP_OK;
}

static mp_status measure(const mp_fview_feature *f, int n, const mp_fview_params *p, layout *L) {
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 4, 4);
    cairo_t *cr = cairo_create(sf);
    text_ctx t;
    text_begin(&t, cr);
    mp_status st = layout_make(L, f, n, p, &t);
    text_end(&t);
    cairo_destroy(cr);
    cairo_surface_destroy(sf);
    return st;
}

mp_status mp_fview_size(const mp_fview_feature *f, int n, const mp_fview_params *p, double *w_pt, double *h_pt) {
    mp_fview_params dp = mp_fview_params_default();
    if (!p) p = &dp;
    mp_status st = check(f, n, p);
    if (st) return st;
    layout L;
    if ((st = measure(f, n, p, &L))) return st;
    double s = p->width_pt > 0 ? p->width_pt / L.w : 1;
    *w_pt = L.w * s;
    *h_pt = L.h * s;
    layout_free(&L);
    return MP_OK;
}

/* ---- drawing ---- */

static mp_rgb shade(const mp_fview_params *p, double a, double scale) {
    double t = scale > 0 && isfinite(a) ? a / scale : 0;
    if (!(t > 0)) t = 0;
    if (t > 1) t = 1;
    mp_rgb c = {1 + (p->color.r - 1) * t, 1 + (p->color.g - 1) * t, 1 + (p->color.b - 1) * t};
    return c;
}

static void box(cairo_t *cr, double x, double y, double w, double h) { cairo_rectangle(cr, x, y, w, h); }

static void draw_block(const layout *L, const block_lay *bl, const mp_fview_feature *b, const mp_fview_params *p,
                       text_ctx *t, double y) {
    cairo_t *cr = t->cr;
    double small = 0.85 * L->font, x0 = MARGIN;
    /* title, with a thin rule under it */
    markup_show(t, bl->title, x0, y + 1.25 * L->font, 1.05 * L->font, 0.1, 0.1, 0.1);
    double right = L->w - MARGIN;
    /* colorbar: "0 [white -> colour] max" at the right of the title row */
    char mx[48];
    format_value(mx, sizeof mx, bl->scale);
    double mw = markup_width(t, mx, small), zw = markup_width(t, "0", small);
    double cb_x = right - mw - 3 - CBAR_W, cb_y = y + 0.55 * L->font, cb_h = 0.75 * L->font;
    cairo_pattern_t *g = cairo_pattern_create_linear(cb_x, 0, cb_x + CBAR_W, 0);
    cairo_pattern_add_color_stop_rgb(g, 0, 1, 1, 1);
    cairo_pattern_add_color_stop_rgb(g, 1, p->color.r, p->color.g, p->color.b);
    box(cr, cb_x, cb_y, CBAR_W, cb_h);
    cairo_set_source(cr, g);
    cairo_fill_preserve(cr);
    cairo_pattern_destroy(g);
    cairo_set_source_rgb(cr, 0.55, 0.55, 0.55);
    cairo_set_line_width(cr, 0.5);
    cairo_stroke(cr);
    double base = cb_y + cb_h / 2 + 0.36 * small;
    markup_show(t, "0", cb_x - 3 - zw, base, small, 0.3, 0.3, 0.3);
    markup_show(t, mx, cb_x + CBAR_W + 3, base, small, 0.3, 0.3, 0.3);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 0.5);
    cairo_move_to(cr, x0, y + L->title_h - 2.5);
    cairo_line_to(cr, right, y + L->title_h - 2.5);
    cairo_stroke(cr);
    y += L->title_h;
    if (b->n_lines == 0) {
        markup_show(t, "<i>no activating contexts</i>", x0 + L->val_w, y + 0.5 * L->box_h + 0.36 * L->font,
                    L->font, 0.45, 0.45, 0.45);
        return;
    }
    double xc = x0 + L->val_w + L->left_w; /* left edge of every line's max token */
    for (int l = 0; l < b->n_lines; l++, y += L->line_h) {
        const size_t r = (size_t)l * b->width;
        double text_y = y + 0.5 * L->box_h + 0.36 * L->font;
        if (p->show_values) {
            char vb[48];
            format_value(vb, sizeof vb, b->act[r + b->center]);
            double vw = markup_width(t, vb, small);
            markup_show(t, vb, x0 + L->val_w - 8 - vw, text_y, small, 0.4, 0.4, 0.4);
        }
        double xs[MAX_WIDTH];
        double x = xc;
        for (int c = b->center - 1; c >= 0; c--) {
            if (!bl->mk[r + c]) { xs[c] = NAN; continue; }
            x -= bl->tw[r + c] + BOX_GAP;
            xs[c] = x;
        }
        x = xc;
        for (int c = b->center; c < b->width; c++) {
            if (!bl->mk[r + c]) { xs[c] = NAN; continue; }
            xs[c] = x;
            x += bl->tw[r + c] + BOX_GAP;
        }
        for (int c = 0; c < b->width; c++) {
            if (isnan(xs[c])) continue;
            double a = b->act[r + c], w = bl->tw[r + c];
            mp_rgb bg = shade(p, a, bl->scale);
            box(cr, xs[c], y, w, L->box_h);
            cairo_set_source_rgb(cr, bg.r, bg.g, bg.b);
            cairo_fill_preserve(cr);
            cairo_set_source_rgb(cr, 0.86, 0.86, 0.86);
            cairo_set_line_width(cr, 0.35);
            cairo_stroke(cr);
            double lum = 0.2126 * bg.r + 0.7152 * bg.g + 0.0722 * bg.b, fg = lum < 0.45 ? 1.0 : 0.0;
            markup_show(t, bl->mk[r + c], xs[c] + PAD_X, text_y, L->font, fg, fg, fg);
        }
        if (!isnan(xs[b->center])) { /* the max token */
            box(cr, xs[b->center] - 0.3, y - 0.3, bl->tw[r + b->center] + 0.6, L->box_h + 0.6);
            cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
            cairo_set_line_width(cr, 1.1);
            cairo_stroke(cr);
        }
    }
}

mp_status mp_fview_draw(const mp_fview_feature *f, int n, const mp_fview_params *p, cairo_t *cr, double w_pt,
                        double h_pt) {
    mp_fview_params dp = mp_fview_params_default();
    if (!p) p = &dp;
    mp_status st = check(f, n, p);
    if (st) return st;
    if (!(w_pt > 0 && h_pt > 0)) return mp_error(MP_ERR_ARG, "feature view: size %g x %g pt", w_pt, h_pt);
    cairo_save(cr);
    cairo_rectangle(cr, 0, 0, w_pt, h_pt);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill(cr);
    text_ctx t;
    text_begin(&t, cr);
    layout L;
    if ((st = layout_make(&L, f, n, p, &t))) {
        text_end(&t);
        cairo_restore(cr);
        return st;
    }
    double s = fmin(w_pt / L.w, h_pt / L.h);
    cairo_scale(cr, s, s);
    double y = MARGIN;
    if (p->title && *p->title) {
        gchar *e = g_markup_escape_text(p->title, -1);
        char *m = g_strdup_printf("<b>%s</b>", e);
        markup_show(&t, m, MARGIN, y + 1.3 * L.font, 1.25 * L.font, 0, 0, 0);
        g_free(m);
        g_free(e);
        y += L.head_h;
    }
    for (int i = 0; i < n; i++) {
        draw_block(&L, &L.b[i], &f[i], p, &t, y);
        y += L.title_h + (f[i].n_lines ? f[i].n_lines : 1) * L.line_h + BLOCK_GAP;
    }
    layout_free(&L);
    text_end(&t);
    cairo_status_t cs = cairo_status(cr);
    cairo_restore(cr);
    if (cs != CAIRO_STATUS_SUCCESS) return mp_error(MP_ERR_IO, "feature view: cairo: %s", cairo_status_to_string(cs));
    return MP_OK;
}

typedef struct {
    const mp_fview_feature *f;
    int n;
    const mp_fview_params *p;
} save_ctx;

static mp_status draw_cb(void *c, cairo_t *cr, double w, double h) {
    save_ctx *s = c;
    return mp_fview_draw(s->f, s->n, s->p, cr, w, h);
}

mp_status mp_fview_save(const mp_fview_feature *f, int n, const mp_fview_params *p, const char *path, double dpi,
                        double *w_pt, double *h_pt) {
    mp_fview_params dp = mp_fview_params_default();
    if (!p) p = &dp;
    double w, h;
    mp_status st = mp_fview_size(f, n, p, &w, &h);
    if (st) return mp_error_prefix(st, "%s", path ? path : "(no path)");
    save_ctx c = {f, n, p};
    if ((st = mp_plot_save_cb(path, w, h, dpi, draw_cb, &c))) return st;
    if (w_pt) *w_pt = w;
    if (h_pt) *h_pt = h;
    return MP_OK;
}
