/* plot_text.c — text for figures (pango through pangocairo, "sans-serif", so any
 * Unicode a token piece holds is shaped with font fallback): measuring and
 * anchored/rotated drawing, elision of long tick labels, labels with a superscript (10^k), tick values on
 * 1-2-5 steps, log-decade ticks and tick-label formatting. */
#include "plot_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <pango/pangocairo.h>

#define MINUS "\xe2\x88\x92"   /* U+2212, the typographic minus */
#define TIMES "\xc3\x97"       /* U+00D7 */
#define ELLIPSIS "\xe2\x80\xa6"  /* U+2026 */

/* One pango layout of s at size (user units, i.e. points) in the "sans-serif"
 * family; text that is not valid UTF-8 (a byte-level token piece) is drawn with
 * U+FFFD for the bad bytes instead of being refused. NULL if pango fails. */
static PangoLayout *layout_of(cairo_t *cr, const char *s, double size, int bold) {
    PangoLayout *lay = pango_cairo_create_layout(cr);
    if (!lay) return NULL;
    PangoFontDescription *d = pango_font_description_new();
    pango_font_description_set_family_static(d, "sans-serif");
    pango_font_description_set_weight(d, bold ? PANGO_WEIGHT_BOLD : PANGO_WEIGHT_NORMAL);
    pango_font_description_set_absolute_size(d, size * PANGO_SCALE);
    pango_layout_set_font_description(lay, d);
    pango_font_description_free(d);
    if (g_utf8_validate(s, -1, NULL)) pango_layout_set_text(lay, s, -1);
    else {
        gchar *v = g_utf8_make_valid(s, -1);
        pango_layout_set_text(lay, v, -1);
        g_free(v);
    }
    return lay;
}

double mp_text_width(cairo_t *cr, const char *s, double size, int bold) {
    if (!s || !*s) return 0;
    PangoLayout *lay = layout_of(cr, s, size, bold);
    if (!lay) return 0;
    PangoRectangle logical;
    pango_layout_get_extents(lay, NULL, &logical);
    g_object_unref(lay);
    return (double)logical.width / PANGO_SCALE;
}

#define SUP_SCALE 0.7
#define SUP_RAISE 0.42

double mp_label_width(cairo_t *cr, const mp_label *l, double size) {
    return mp_text_width(cr, l->base, size, 0) + mp_text_width(cr, l->sup, size * SUP_SCALE, 0) +
           mp_text_width(cr, l->tail, size, 0);
}

/* Baseline offset below the anchor for vertical anchor va (see plot_internal.h). */
static double baseline(double size, double va) {
    double cap = 0.72 * size, desc = 0.22 * size;
    return va <= 0.5 ? cap * (1 - va) : cap / 2 - (va - 0.5) * 2 * (cap / 2 + desc);
}

/* Draws s with its baseline's left end at (x, y). */
static void show(mp_figure *f, cairo_t *cr, const char *s, double x, double y, double size, int bold) {
    if (!s || !*s) return;
    PangoLayout *lay = layout_of(cr, s, size, bold);
    if (!lay) return;
    cairo_move_to(cr, x, y - (double)pango_layout_get_baseline(lay) / PANGO_SCALE);
    pango_cairo_show_layout(cr, lay);
    g_object_unref(lay);
    cairo_new_path(cr);
    f->stats.n_texts++;
}

void mp_draw_text(mp_figure *f, cairo_t *cr, const char *s, double x, double y, double size, int bold,
                  double ha, double va, double angle) {
    if (!s || !*s) return;
    double w = mp_text_width(cr, s, size, bold);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (angle != 0) cairo_rotate(cr, angle);
    show(f, cr, s, -ha * w, baseline(size, va), size, bold);
    cairo_restore(cr);
}

void mp_draw_label(mp_figure *f, cairo_t *cr, const mp_label *l, double x, double y, double size,
                   double ha, double va, double angle) {
    double wb = mp_text_width(cr, l->base, size, 0), ws = mp_text_width(cr, l->sup, size * SUP_SCALE, 0);
    double w = wb + ws + mp_text_width(cr, l->tail, size, 0), by = baseline(size, va);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (angle != 0) cairo_rotate(cr, angle);
    show(f, cr, l->base, -ha * w, by, size, 0);
    show(f, cr, l->sup, -ha * w + wb, by - SUP_RAISE * size, size * SUP_SCALE, 0);
    show(f, cr, l->tail, -ha * w + wb + ws, by, size, 0);
    cairo_restore(cr);
}

/* Replaces a leading '-' by the typographic minus. */
static void set_signed(mp_label *out, const char *num) {
    if (num[0] == '-') snprintf(out->base, sizeof out->base, MINUS "%s", num + 1);
    else snprintf(out->base, sizeof out->base, "%s", num);
}

void mp_format_tick(double v, double step, double maxabs, mp_label *out) {
    char num[40];
    out->base[0] = out->sup[0] = out->tail[0] = 0;
    if (!(step > 0)) step = fabs(v) > 0 ? fabs(v) : 1;
    if (fabs(v) < step * 1e-6) v = 0;
    if (v == 0) { snprintf(out->base, sizeof out->base, "0"); return; }
    if (maxabs >= 1e5 || maxabs < 1e-3) {
        /* m x 10^e with just enough mantissa digits to tell neighbouring ticks apart. */
        int e = (int)floor(log10(fabs(v)) + 1e-9);
        int dec = e - (int)floor(log10(step) + 1e-9);
        if (dec < 0) dec = 0;
        if (dec > 6) dec = 6;
        double m = v / pow(10.0, e);
        snprintf(num, sizeof num, "%.*f", dec, m);
        if (strcmp(num, "1") == 0) snprintf(out->base, sizeof out->base, "10");
        else if (strcmp(num, "-1") == 0) snprintf(out->base, sizeof out->base, MINUS "10");
        else {
            char tmp[48];
            snprintf(tmp, sizeof tmp, "%s" TIMES "10", num);
            set_signed(out, tmp);
        }
        if (e < 0) snprintf(out->sup, sizeof out->sup, MINUS "%d", -e);
        else snprintf(out->sup, sizeof out->sup, "%d", e);
        return;
    }
    int dec = (int)-floor(log10(step) + 1e-9);
    if (dec < 0) dec = 0;
    if (dec > 9) dec = 9;
    snprintf(num, sizeof num, "%.*f", dec, v);
    set_signed(out, num);
}

size_t mp_plot_nice_ticks(double lo, double hi, size_t target, double *ticks, size_t max, double *step_out) {
    if (step_out) *step_out = NAN;
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi) || target < 1) return 0;
    double raw = (hi - lo) / (double)target, mag = pow(10.0, floor(log10(raw))), norm = raw / mag;
    double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    double k0 = ceil(lo / step - 1e-9), k1 = floor(hi / step + 1e-9);
    size_t n = 0;
    for (double k = k0; k <= k1 && n < max; k += 1) {
        double v = k * step;
        ticks[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    }
    if (step_out) *step_out = step;
    return n;
}

void mp_mult_label(mp_label *out, const char *text, int e) {
    if (text) snprintf(out->base, sizeof out->base, "%s (" TIMES "10", text);
    else snprintf(out->base, sizeof out->base, TIMES "10");
    if (e < 0) snprintf(out->sup, sizeof out->sup, MINUS "%d", -e);
    else snprintf(out->sup, sizeof out->sup, "%d", e);
    snprintf(out->tail, sizeof out->tail, "%s", text ? ")" : "");
}

/* 1-2-5 ticks on [lo, hi]; very large or small values are labelled as multiples of
 * 10^mexp (shown once by the axis), except on a log axis (to_log), where each
 * label carries its own power of ten. */
static void linear_ticks(mp_axis *a, size_t target, double lo, double hi, int to_log) {
    double v[MP_MAX_TICKS], step, maxabs = 0;
    size_t n = mp_plot_nice_ticks(lo, hi, target, v, MP_MAX_TICKS, &step);
    if (a->categorical == 2 && step < 1) n = mp_plot_nice_ticks(lo, hi, (size_t)(hi - lo) > 0 ? (size_t)(hi - lo) : 1, v, MP_MAX_TICKS, &step);
    for (size_t i = 0; i < n; i++) if (fabs(v[i]) > maxabs) maxabs = fabs(v[i]);
    double scale = 1;
    a->nt = 0;
    a->mexp = 0;
    if (!to_log && maxabs > 0 && (maxabs >= 1e5 || maxabs < 1e-3)) {
        a->mexp = (int)floor(log10(maxabs) + 1e-9);
        scale = pow(10.0, -a->mexp);
    }
    for (size_t i = 0; i < n; i++) {
        if (to_log && v[i] <= 0) continue;
        a->t[a->nt] = to_log ? log10(v[i]) : v[i];
        mp_format_tick(v[i] * scale, step * scale, maxabs * scale, &a->lab[a->nt]);
        a->nt++;
    }
}

void mp_elide_label(char *dst, size_t size, const char *src, size_t max_chars) {
    size_t i = 0, nchar = 0, cut = 0;
    if (size == 0) return;
    for (; src[i]; i++) {
        if (((unsigned char)src[i] & 0xC0) == 0x80) continue;   /* UTF-8 continuation byte */
        if (nchar == max_chars - 1) cut = i;                     /* where the ellipsis would go */
        nchar++;
    }
    int elide = max_chars >= 2 && nchar > max_chars;
    size_t keep = elide ? cut : i;
    if (keep + 4 > size) {   /* no room: fall back to a shorter cut at a character boundary */
        keep = size > 4 ? size - 4 : 0;
        while (keep > 0 && ((unsigned char)src[keep] & 0xC0) == 0x80) keep--;
        elide = 1;
    }
    memcpy(dst, src, keep);
    if (elide) memcpy(dst + keep, ELLIPSIS, 4);   /* 3 bytes and the terminator */
    else dst[keep] = 0;
}

void mp_axis_ticks(mp_axis *a, size_t target, const char *const *cat, size_t ncat) {
    a->nt = a->nminor = 0;
    a->mexp = 0;
    memset(a->lab, 0, sizeof a->lab);
    if (target < 2) target = 2;
    if (a->categorical == 1) {
        size_t every = (ncat + target - 1) / target;
        if (every < 1) every = 1;
        for (size_t g = 0; g < ncat && a->nt < MP_MAX_TICKS; g += every) {
            if (g < a->lo || g > a->hi) continue;
            a->t[a->nt] = (double)g;
            a->lab[a->nt].sup[0] = 0;
            if (cat && cat[g]) mp_elide_label(a->lab[a->nt].base, sizeof a->lab[0].base, cat[g], MP_LABEL_MAX_CHARS);
            else snprintf(a->lab[a->nt].base, sizeof a->lab[0].base, "%zu", g + 1);
            a->nt++;
        }
        return;
    }
    if (!a->log) { linear_ticks(a, target, a->lo, a->hi, 0); return; }
    double e0 = ceil(a->lo - 1e-9), e1 = floor(a->hi + 1e-9);
    if (e1 - e0 + 1 >= 2) {
        double ndec = e1 - e0 + 1, step = ceil(ndec / (double)target);
        for (double e = e0; e <= e1 && a->nt < MP_MAX_TICKS; e += 1) {
            if (fmod(e, step) != 0) {
                if (a->nminor < 2 * MP_MAX_TICKS) a->minor[a->nminor++] = e;
                continue;
            }
            a->t[a->nt] = e;
            snprintf(a->lab[a->nt].base, sizeof a->lab[0].base, "10");
            if (e < 0) snprintf(a->lab[a->nt].sup, sizeof a->lab[0].sup, MINUS "%d", (int)-e);
            else snprintf(a->lab[a->nt].sup, sizeof a->lab[0].sup, "%d", (int)e);
            a->nt++;
        }
        if (step == 1 && ndec <= 12)
            for (double e = floor(a->lo); e <= e1; e += 1)
                for (int m = 2; m <= 9; m++) {
                    double p = e + log10((double)m);
                    if (p >= a->lo && p <= a->hi && a->nminor < 2 * MP_MAX_TICKS) a->minor[a->nminor++] = p;
                }
        return;
    }
    /* Less than two decades in view: ticks at 1, 2, 5 x 10^e (then 1..9 x 10^e)
     * when at least three fall inside, since evenly spaced values crowd at the
     * top of a log axis; else plain 1-2-5 ticks on the values. */
    static const int sets[2][9] = {{1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    static const int nset[2] = {3, 9};
    for (int si = 0; si < 2; si++) {
        double v[MP_MAX_TICKS];
        size_t n = 0;
        for (double e = floor(a->lo) - 1; e <= ceil(a->hi) && n < MP_MAX_TICKS; e += 1)
            for (int j = 0; j < nset[si] && n < MP_MAX_TICKS; j++) {
                double p = e + log10((double)sets[si][j]);
                if (p >= a->lo - 1e-9 && p <= a->hi + 1e-9) v[n++] = p;
            }
        if (n < 3 || n > target + 2) continue;
        for (size_t i = 0; i < n; i++) {
            double val = pow(10.0, v[i]), q = pow(10.0, floor(v[0] + 1e-9));
            a->t[a->nt] = v[i];
            mp_format_tick(val, q, pow(10.0, a->hi), &a->lab[a->nt]);
            a->nt++;
        }
        return;
    }
    linear_ticks(a, target, pow(10.0, a->lo), pow(10.0, a->hi), 1);
}
