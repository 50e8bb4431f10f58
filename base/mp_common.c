/* mp_common.c — thread-local error messages, init of GSL/HDF5 error handling,
 * overflow-checked sizes and small utilities used across mechprobe. */
#include "mp_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gsl/gsl_errno.h>

static _Thread_local char err_buf[2048];

mp_status mp_error(mp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return s;
}

mp_status mp_error_prefix(mp_status s, const char *fmt, ...) {
    char prefix[1024], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    snprintf(err_buf, sizeof err_buf, "%.1000s: %.1000s", prefix, old);
    return s;
}

mp_status mp_error_name_path(mp_status s, const char *path) {
    if (s != MP_OK && path && path[0] && !strstr(err_buf, path)) mp_error_prefix(s, "%s", path);
    return s;
}

const char *mp_last_error(void) { return err_buf; }

const char *mp_status_name(mp_status s) {
    switch (s) {
    case MP_OK: return "ok";
    case MP_ERR_IO: return "I/O error";
    case MP_ERR_FORMAT: return "format error";
    case MP_ERR_NOMEM: return "out of memory";
    case MP_ERR_ARG: return "bad argument";
    case MP_ERR_HDF5: return "HDF5 error";
    case MP_ERR_GSL: return "GSL error";
    case MP_ERR_HOOK: return "hook aborted";
    case MP_ERR_CUDA: return "CUDA error";
    }
    return "unknown error";
}

void mp_init(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    gsl_set_error_handler_off();
}

int mp_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int mp_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}

void *mp_malloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        char b[32];
        mp_error(MP_ERR_NOMEM, "out of memory allocating %s for %s", mp_fmt_bytes((double)n, b), what);
    }
    return p;
}

void *mp_calloc(size_t n, size_t size, const char *what) {
    size_t total;
    if (mp_mul_size(n, size, &total)) {
        mp_error(MP_ERR_NOMEM, "size overflow allocating %s", what);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        char b[32];
        mp_error(MP_ERR_NOMEM, "out of memory allocating %s for %s", mp_fmt_bytes((double)total, b), what);
    }
    return p;
}

const char *mp_fmt_bytes(double bytes, char *buf) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; u++; }
    if (u == 0) snprintf(buf, 32, "%.0f B", bytes);
    else snprintf(buf, 32, "%.1f %s", bytes, unit[u]);
    return buf;
}

double mp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
