/* testutil.c — helpers for mechprobe's C tests: shared-data paths with SKIP,
 * comparisons, hook captures, the whole-model finite-difference check, and the
 * closing summary line. */
#include "testutil.h"
#include "model_io.h"
#include "train.h"
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

tu_fd_result tu_fd_model(const char *label, mp_model *m, const int *tok, const int *tgt, int B, int T,
                         float eps, int per_tensor, int skip_kinks, unsigned seed) {
    tu_fd_result res = {0};
    const mp_config *c = &m->cfg;
    mp_acts A;
    mp_grads G;
    int ok = mp_acts_init(&A, c, B, T) == MP_OK;
    ok = ok && mp_grads_init(&G, c) == MP_OK;
    CHECK(ok, "%s: alloc: %s", label, mp_last_error());
    if (!ok) return res;
    mp_status st = mp_model_forward_backward(m, tok, tgt, B, T, NULL, &A, &G, 1.0f, &res.loss, NULL);
    CHECK(st == MP_OK, "%s: forward-backward: %s", label, mp_last_error());
    mp_param_desc d[MP_PARAM_MAX], gd[MP_PARAM_MAX];
    int nd = st == MP_OK ? mp_params_describe(c, &m->p, d) : 0;
    mp_params_describe(c, &G.g, gd);
    float l0 = 0;   /* the unperturbed loss, for the kink test (each entry is restored exactly) */
    if (skip_kinks && nd > 0) mp_model_loss(m, tok, tgt, B, T, NULL, &l0);
    unsigned r = seed;
    for (int k = 0; k < nd; k++)
        for (int s = 0; s < per_tensor; s++) {
            r = r * 1103515245u + 12345u;
            size_t i = (r >> 8) % d[k].n;
            float save = d[k].p[i], lp, lm;
            d[k].p[i] = save + eps;   /* the parameters are the model's own buffers */
            mp_model_loss(m, tok, tgt, B, T, NULL, &lp);
            d[k].p[i] = save - eps;
            mp_model_loss(m, tok, tgt, B, T, NULL, &lm);
            d[k].p[i] = save;
            double fd = ((double)lp - lm) / (2.0 * eps), an = gd[k].p[i], tol = 2e-3 + 5e-2 * fabs(fd);
            if (skip_kinks && fabs(((double)lp - l0) / eps - ((double)l0 - lm) / eps) > tol) {
                res.kinks++;
                continue;
            }
            res.checked++;
            if (fabs(an - fd) / tol > res.worst) res.worst = fabs(an - fd) / tol;
            CHECK(fabs(an - fd) <= tol, "%s: %s[%zu]: analytic %.6g vs fd %.6g", label, d[k].name, i, an, fd);
        }
    mp_acts_free(&A);
    mp_grads_free(&G);
    return res;
}

int tu_added_point(const char *name) {
    return strstr(name, "hook_scale") || strstr(name, "hook_mlp_in") || strstr(name, "hook_pos_embed");
}

mp_model *tu_load(const char *path) {
    mp_model *m = NULL;
    mp_status st = mp_model_load(&m, path);
    CHECK(st == MP_OK, "load %s: %s", path, mp_last_error());
    return st ? NULL : m;
}
