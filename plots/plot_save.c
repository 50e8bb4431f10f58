/* plot_save.c — writes a figure to PNG, SVG or PDF chosen by the file
 * extension, atomically: cairo streams into a temporary file in the target's
 * directory, which is renamed over the target only when everything succeeded. */
#include "plot_internal.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

/* Creates a fresh temporary file next to path; returns its FILE and name. */
static mp_status open_temp(const char *path, char **tmp_out, FILE **fp_out) {
    static atomic_uint counter;
    size_t n = strlen(path) + 48;
    char *tmp = mp_malloc(n, "temporary file name");
    if (!tmp) return MP_ERR_NOMEM;
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++) {
        snprintf(tmp, n, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        mp_status st = mp_error(MP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        mp_status st = mp_error(MP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    *tmp_out = tmp;
    *fp_out = fp;
    return MP_OK;
}

mp_status mp_figure_save(mp_figure *f, const char *path, double w, double h, double dpi) {
    mp_status st;
    fmt_t fmt = FMT_PNG;
    char *tmp = NULL;
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
    if ((st = open_temp(path, &tmp, &fp)) != MP_OK) return st;
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
    if ((st = mp_figure_draw(f, cr, w, h)) != MP_OK) { mp_error_prefix(st, "%s", path); goto cleanup; }
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
    int rc = fclose(fp);
    fp = NULL;
    if (rc != 0) { st = mp_error(MP_ERR_IO, "%s: writing failed: %s", path, strerror(errno)); goto cleanup; }
    if (rename(tmp, path) != 0) { st = mp_error(MP_ERR_IO, "%s: cannot rename the finished file: %s", path, strerror(errno)); goto cleanup; }
cleanup:
    if (cr) cairo_destroy(cr);
    if (sf) cairo_surface_destroy(sf);
    if (fp) fclose(fp);
    if (st != MP_OK && tmp) unlink(tmp);
    free(tmp);
    return st;
}
