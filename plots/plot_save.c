/* plot_save.c — writes a figure (or any drawing: mp_plot_save_cb, which the
 * feature view uses too) to PNG, SVG or PDF chosen by the file extension,
 * atomically (mp_out): cairo streams into a temporary file in the target's
 * directory, which is renamed over the target only when everything
 * succeeded; a target that is not a regular file is refused. */
#include "plot_internal.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { FMT_PNG, FMT_SVG, FMT_PDF } fmt_t;

static cairo_status_t write_fn(void *closure, const unsigned char *data, unsigned int len) {
    return fwrite(data, 1, len, (FILE *)closure) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static mp_status parse_ext(const char *path, fmt_t *fmt) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash) || dot == path || (slash && dot == slash + 1))
        return mp_error(MP_ERR_ARG, "%s: no file extension (use .png, .svg or .pdf)", path);
    if (strcasecmp(dot, ".png") == 0) *fmt = FMT_PNG;
    else if (strcasecmp(dot, ".svg") == 0) *fmt = FMT_SVG;
    else if (strcasecmp(dot, ".pdf") == 0) *fmt = FMT_PDF;
    else return mp_error(MP_ERR_ARG, "%s: unknown figure format '%s' (use .png, .svg or .pdf)", path, dot);
    return MP_OK;
}

mp_status mp_plot_save_cb(const char *path, double w, double h, double dpi, mp_plot_draw_cb draw, void *ctx) {
    mp_status st;
    fmt_t fmt = FMT_PNG;
    mp_out out;
    FILE *fp = NULL;
    cairo_surface_t *sf = NULL;
    cairo_t *cr = NULL;
    int px = 0, py = 0;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "figure: empty file name");
    if ((st = parse_ext(path, &fmt)) != MP_OK) return st;
    if (!(w >= 16 && h >= 16 && w <= 1e5 && h <= 1e5))
        return mp_error(MP_ERR_ARG, "%s: size %g x %g pt must be within [16, 100000] pt", path, w, h);
    if (fmt == FMT_PNG) {
        if (!(dpi > 0 && dpi <= 4800)) return mp_error(MP_ERR_ARG, "%s: dpi = %g must be in (0, 4800]", path, dpi);
        double fx = round(w * dpi / 72.0), fy = round(h * dpi / 72.0);
        if (fx < 1 || fy < 1 || fx > 32767 || fy > 32767)
            return mp_error(MP_ERR_ARG, "%s: %g x %g pixels is outside cairo's 1..32767 range", path, fx, fy);
        px = (int)fx; py = (int)fy;
    }
    if ((st = mp_out_begin(&out, path)) != MP_OK) return st;
    if (!(fp = mp_out_fdopen(&out))) { mp_out_abort(&out); return MP_ERR_IO; }
    switch (fmt) {
    case FMT_PNG: sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, px, py); break;
    case FMT_SVG: sf = cairo_svg_surface_create_for_stream(write_fn, fp, w, h); break;
    case FMT_PDF:
        sf = cairo_pdf_surface_create_for_stream(write_fn, fp, w, h);
        cairo_pdf_surface_set_metadata(sf, CAIRO_PDF_METADATA_CREATOR, "mechprobe " MP_VERSION);
        break;
    }
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        st = mp_error(MP_ERR_NOMEM, "%s: cannot create the drawing surface: %s", path,
                      cairo_status_to_string(cairo_surface_status(sf)));
        goto cleanup;
    }
    cr = cairo_create(sf);
    if (fmt == FMT_PNG) cairo_scale(cr, px / w, py / h);
    if ((st = draw(ctx, cr, w, h)) != MP_OK) { mp_error_prefix(st, "%s", path); goto cleanup; }
    cairo_destroy(cr);
    cr = NULL;
    cairo_status_t cs;
    if (fmt == FMT_PNG) cs = cairo_surface_write_to_png_stream(sf, write_fn, fp);
    else {
        cairo_surface_finish(sf);
        cs = cairo_surface_status(sf);
    }
    if (cs != CAIRO_STATUS_SUCCESS) {
        st = mp_error(MP_ERR_IO, "%s: writing failed: %s", path, cairo_status_to_string(cs));
        goto cleanup;
    }
    cairo_surface_destroy(sf);
    sf = NULL;
    st = mp_out_commit(&out, 0);   /* closes fp */
    fp = NULL;
cleanup:
    if (cr) cairo_destroy(cr);
    if (sf) cairo_surface_destroy(sf);
    if (fp) mp_out_abort(&out);
    return st;
}

static mp_status draw_figure(void *f, cairo_t *cr, double w, double h) { return mp_figure_draw(f, cr, w, h); }

mp_status mp_figure_save(mp_figure *f, const char *path, double w, double h, double dpi) {
    return mp_plot_save_cb(path, w, h, dpi, draw_figure, f);
}
