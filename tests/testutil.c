/* testutil.c — helpers for mechprobe's C tests: shared-data paths with SKIP,
 * comparisons, and the closing summary line. */
#include "testutil.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tu_failures = 0, tu_checks = 0;

const char *tu_shared(const char *rel) {
    static char buf[8][4096];
    static int k = 0;
    char *p = buf[k++ & 7];
    const char *root = getenv("MP_SHARED_DIR");
#ifdef MP_SHARED_DIR
    if (!root) root = MP_SHARED_DIR;
#endif
    if (!root) root = "../shared";
    snprintf(p, 4096, "%s/%s", root, rel);
    if (access(p, R_OK) != 0) {
        printf("SKIP: %s is absent (tests that need ../shared skip without it)\n", p);
        exit(77);
    }
    return p;
}

const char *tu_data(const char *rel) {
    static char buf[8][4096];
    static int k = 0;
    char *p = buf[k++ & 7];
#ifdef MP_TESTDATA
    snprintf(p, 4096, "%s/%s", MP_TESTDATA, rel);
#else
    snprintf(p, 4096, "tests/data/%s", rel);
#endif
    return p;
}

double tu_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue; /* also equal infinities (masked scores) */
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

int tu_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}

int tu_capture_cb(void *user, const mp_hook_info *info, float *data) {
    tu_capture *c = user;
    int k;
    for (k = 0; k < c->n; k++)
        if (strcmp(c->name[k], info->name) == 0) break;
    if (k == c->n) {
        if (c->n == 512) return mp_error(MP_ERR_ARG, "tu_capture: more than 512 hook points"), 1;
        size_t n = 1;
        for (int i = 0; i < info->ndim; i++) n *= (size_t)info->full[i];
        snprintf(c->name[k], sizeof c->name[k], "%s", info->name);
        c->buf[k] = calloc(n, sizeof(float));
        if (!c->buf[k]) return mp_error(MP_ERR_NOMEM, "tu_capture: out of memory"), 1;
        c->numel[k] = n;
        c->n++;
    }
    mp_hook_view_copy(info, c->buf[k], data, 1);
    return 0;
}

const float *tu_capture_get(const tu_capture *c, const char *name, size_t *n) {
    for (int k = 0; k < c->n; k++)
        if (strcmp(c->name[k], name) == 0) { *n = c->numel[k]; return c->buf[k]; }
    return NULL;
}

void tu_capture_free(tu_capture *c) {
    for (int k = 0; k < c->n; k++) free(c->buf[k]);
    c->n = 0;
}
