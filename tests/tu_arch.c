/* tu_arch.c — helpers shared by the model-family tests (see tu_arch.h): the
 * golden comparison, decode == prefill, round trips, config.json variants,
 * load refusals, the staged-gradient check and the CUDA-vs-CPU forward. */
#include "tu_arch.h"
#include "formats.h"
#include "grad.h"
#include "h5io.h"
#include "model_io.h"
#include "mp_cuda.h"
#include "optim.h"
#include "quant.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

float *tu_forward(const mp_model *m, const int *toks, int T, const mp_hooks *hs) {
    float *logits = malloc((size_t)T * m->cfg.vocab * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    CHECK(mp_model_forward(m, toks, 1, T, &fp, logits) == MP_OK, "forward: %s", mp_last_error());
    return logits;
}

float *tu_run_captured(const mp_model *m, const int *toks, int T, tu_capture *cap) {
    mp_hooks *hs = NULL;
    if (cap) {
        hs = mp_hooks_new(&m->cfg);
        CHECK(mp_hooks_add(hs, "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    }
    float *logits = tu_forward(m, toks, T, hs);
    mp_hooks_free(hs);
    return logits;
}

double tu_max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

double tu_rel_diff(const float *got, const float *ref, size_t n, double floor) {
    double scale = fmax(floor, tu_max_abs(ref, n));
    return tu_max_abs_diff(got, ref, n) / (scale > 0 ? scale : 1.0);
}

double tu_compare_models(const mp_model *a, const mp_model *b, const int *toks, int T, const char *label) {
    tu_capture *ca = calloc(1, sizeof *ca), *cb = calloc(1, sizeof *cb);
    float *la = tu_run_captured(a, toks, T, ca), *lb = tu_run_captured(b, toks, T, cb);
    double worst = tu_max_abs_diff(la, lb, (size_t)T * a->cfg.vocab);
    CHECK(ca->n == cb->n && ca->n > 0, "%s: %d vs %d hooks", label, ca->n, cb->n);
    for (int k = 0; k < ca->n && k < cb->n; k++) {
        size_t nb;
        const float *gb = tu_capture_get(cb, ca->name[k], &nb);
        CHECK(gb && nb == ca->numel[k], "%s: hook %s missing", label, ca->name[k]);
        if (gb && nb == ca->numel[k]) worst = fmax(worst, tu_max_abs_diff(ca->buf[k], gb, nb));
    }
    free(la);
    free(lb);
    tu_capture_free(ca);
    tu_capture_free(cb);
    free(ca);
    free(cb);
    return worst;
}

/* ---- golden ---- */

tu_golden_result tu_golden(const mp_model *m, const char *golden_path, const char *label, const tu_golden_opts *o,
                           tu_capture *cap) {
    tu_golden_result r = {0};
    hid_t f;
    int32_t *toks = NULL;
    mp_h5_dsinfo info;
    if (mp_h5_open(&f, golden_path, MP_H5_READ) || mp_h5_read_i32(f, "/tokens", &toks, &info)) {
        CHECK(0, "%s: %s: %s", label, golden_path, mp_last_error());
        return r;
    }
    const int T = (int)info.shape[1];
    tu_capture *own = cap ? NULL : calloc(1, sizeof *own);
    if (!cap) cap = own;
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, o->points ? o->points : "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    float *logits = tu_forward(m, (int *)toks, T, hs);
    mp_hooks_free(hs);
    mp_h5_entry *e = NULL;
    int n = 0;
    CHECK(mp_h5_list(f, "/acts", &e, &n) == MP_OK && (o->n_acts <= 0 || n == o->n_acts), "%s: %d golden tensors: %s",
          label, n, mp_last_error());
    for (int i = 0; i < n; i++) {
        char path[256];
        float *ref = NULL;
        size_t got_n;
        snprintf(path, sizeof path, "/acts/%s", e[i].name);
        CHECK(mp_h5_read_f32(f, path, &ref, &info) == MP_OK, "%s", mp_last_error());
        const float *got = tu_capture_get(cap, e[i].name, &got_n);
        CHECK(got && ref && got_n == info.numel, "%s: hook %s missing or of the wrong size", label, e[i].name);
        if (got && ref && got_n == info.numel) {
            if (o->tol_abs > 0) {
                const double d = tu_max_abs_diff(got, ref, info.numel);
                CHECK(d <= o->tol_abs, "%s: %s max |diff| = %.3g (tol %.0e)", label, e[i].name, d, o->tol_abs);
                r.worst_abs = fmax(r.worst_abs, d);
            }
            if (o->tol_rel > 0 && (!o->rel_only || strstr(e[i].name, o->rel_only))) {
                const double d = tu_rel_diff(got, ref, info.numel, o->rel_floor);
                CHECK(d <= o->tol_rel, "%s: %s relative max |diff| = %.3g (tol %.0e)", label, e[i].name, d,
                      o->tol_rel);
                r.worst_rel = fmax(r.worst_rel, d);
            }
            for (int c = 0; c < 2; c++) r.counted[c] += o->count[c] && strstr(e[i].name, o->count[c]) != NULL;
            r.compared++;
        }
        free(ref);
    }
    mp_h5_list_free(e, n);
    r.fired = cap->n;
    if (o->all_compared) {
        int added = 0;
        for (int i = 0; i < cap->n; i++) added += tu_added_point(cap->name[i]);
        CHECK(r.compared + added == cap->n, "%s: %d hooks compared, %d fired (%d not in the golden files)", label,
              r.compared, cap->n, added);
    }
    float *ref = NULL;
    CHECK(mp_h5_read_f32(f, "/logits", &ref, &info) == MP_OK, "%s", mp_last_error());
    CHECK(ref && logits && info.numel == (size_t)T * m->cfg.vocab, "%s: golden logits size", label);
    if (ref && logits && info.numel == (size_t)T * m->cfg.vocab) {
        if (o->logits_abs > 0) {
            const double d = tu_max_abs_diff(logits, ref, info.numel);
            CHECK(d <= o->logits_abs, "%s: logits max |diff| = %.3g (tol %.0e)", label, d, o->logits_abs);
            r.worst_abs = fmax(r.worst_abs, d);
        }
        if (o->logits_rel > 0) {
            const double d = tu_rel_diff(logits, ref, info.numel, o->rel_floor);
            CHECK(d <= o->logits_rel, "%s: logits relative max |diff| = %.3g (tol %.0e)", label, d, o->logits_rel);
            r.worst_rel = fmax(r.worst_rel, d);
        }
        r.ok = 1;
    }
    printf("%s: %d hook points + logits against %s", label, r.compared, strrchr(golden_path, '/') + 1);
    if (o->tol_abs > 0 || o->logits_abs > 0)
        printf(", worst |diff| %.2e (tol %.0e)", r.worst_abs, o->tol_abs > 0 ? o->tol_abs : o->logits_abs);
    if (o->tol_rel > 0 || o->logits_rel > 0)
        printf(", worst relative |diff| %.2e (tol %.0e)", r.worst_rel, o->tol_rel > 0 ? o->tol_rel : o->logits_rel);
    printf("; %d points fired\n", cap->n);
    free(ref);
    free(logits);
    free(toks);
    if (own) {
        tu_capture_free(own);
        free(own);
    }
    mp_h5_close(&f);
    return r;
}

int tu_read_golden(const char *path, tu_golden_ref *g) {
    hid_t f;
    mp_h5_dsinfo info;
    memset(g, 0, sizeof *g);
    if (mp_h5_open(&f, path, MP_H5_READ) || mp_h5_read_i32(f, "/tokens", &g->toks, &info)) {
        CHECK(0, "%s: %s", path, mp_last_error());
        return 0;
    }
    g->T = (int)info.shape[1];
    CHECK(mp_h5_read_f32(f, "/logits", &g->logits, &info) == MP_OK, "%s", mp_last_error());
    g->n_logits = g->logits ? info.numel : 0;
    mp_h5_close(&f);
    return g->logits != NULL;
}

void tu_golden_ref_free(tu_golden_ref *g) {
    free(g->toks);
    free(g->logits);
    memset(g, 0, sizeof *g);
}

/* ---- decoding ---- */

void tu_decode_vs_prefill(const mp_model *m, const int *toks, int T, int P, const float *ref, double tol,
                          double floor, int per_row, const char *label) {
    const int V = m->cfg.vocab;
    float *own = ref ? NULL : tu_forward(m, toks, T, NULL);
    if (!ref) ref = own;
    float *step = malloc((size_t)T * V * sizeof(float));
    mp_kvcache kc;
    CHECK(mp_kvcache_init(&kc, &m->cfg, 1, T) == MP_OK, "%s: %s", label, mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.cache = &kc;
    if (P > 0) CHECK(mp_model_forward(m, toks, 1, P, &fp, step) == MP_OK, "%s: prefill: %s", label, mp_last_error());
    fp.logits = MP_LOGITS_LAST;
    for (int t = P; t < T; t++)
        CHECK(mp_model_forward(m, toks + t, 1, 1, &fp, step + (size_t)t * V) == MP_OK, "%s step %d: %s", label, t,
              mp_last_error());
    double worst = 0;
    if (per_row)
        for (int t = 0; t < T; t++)
            worst = fmax(worst, tu_rel_diff(step + (size_t)t * V, ref + (size_t)t * V, (size_t)V, floor));
    else
        worst = tu_rel_diff(step, ref, (size_t)T * V, floor);
    CHECK(worst <= tol, "%s: decode vs prefill relative |diff| %.3g (tol %.0e)", label, worst, tol);
    printf("%s: decode (prefill %d + %d steps) vs prefill: relative |diff| %.2e (tol %.0e)\n", label, P, T - P, worst,
           tol);
    free(step);
    free(own);
    mp_kvcache_free(&kc);
}

/* ---- files ---- */

const char *tu_tmp_path(const char *test, const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "/tmp/mp_test_%s_%d_%s", test, (int)getpid(), name);
    return p;
}

void tu_rm_tree(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir); unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir); unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir); unlink(p);
    rmdir(dir);
}

void tu_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    CHECK(ok, "cannot write %s", path);
}

const char *tu_model_dir(const char *dir, const char *weights, const char *config) {
    char p[600];
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *in = fopen(weights, "rb"), *out = fopen(p, "wb");
    int ok = in && out;
    char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (in) fclose(in);
    if (out) ok = fclose(out) == 0 && ok;
    CHECK(ok, "copy %s to %s", weights, p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    tu_write_file(p, config);
    return dir;
}

const char *tu_variant_of(const char *src, const char *dir, const char *from, const char *to) {
    char s[600];
    snprintf(s, sizeof s, "%s/config.json", src);
    FILE *f = fopen(tu_data(s), "rb");
    CHECK(f != NULL, "%s", tu_data(s));
    if (!f) return dir;
    char *text = calloc(1, 1 << 16), *out = calloc(1, (1 << 16) + 4096);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *at = strstr(text, from);
    CHECK(at != NULL, "%s not in %s/config.json", from, src);
    if (at) snprintf(out, (1 << 16) + 4096, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    snprintf(s, sizeof s, "%s/model.safetensors", src);
    tu_model_dir(dir, tu_data(s), at ? out : text);
    free(text);
    free(out);
    return dir;
}

void tu_expect_load_fail(const char *path, const char *label, const char *want1, const char *want2) {
    mp_model *m = NULL;
    mp_status st = mp_model_load(&m, path);
    CHECK(st != MP_OK && !m, "%s: loaded although it should be refused", label);
    CHECK(st == MP_OK || (strstr(mp_last_error(), want1) && (!want2 || strstr(mp_last_error(), want2))),
          "%s: expected an error naming %s%s%s, got \"%s\"", label, want1, want2 ? " and " : "", want2 ? want2 : "",
          mp_last_error());
    if (st) printf("refused, %s: \"%s\"\n", label, mp_last_error());
    mp_model_free(m);
}

int tu_config_equal(const mp_config *a, const mp_config *b, const char *label) {
    int same = 1;
    for (int i = 0; i < mp_config_n_fields; i++) {
        CHECK(mp_config_get(a, i) == mp_config_get(b, i), "%s: config field %s %g != %g", label,
              mp_config_fields[i].attr, mp_config_get(a, i), mp_config_get(b, i));
        same &= mp_config_get(a, i) == mp_config_get(b, i);
    }
    return same;
}

/* ---- round trips ---- */

void tu_round_trips(const mp_model *m, const char *test, const char *label, const int *toks, int T, double tol_q8) {
    const size_t nl = (size_t)T * m->cfg.vocab;
    float *ref = tu_forward(m, toks, T, NULL);
    const char *outs[3] = {tu_tmp_path(test, "hf"), tu_tmp_path(test, "f32.gguf"), tu_tmp_path(test, "ck.h5")};
    const char *kinds[3] = {"HF folder", "GGUF F32", "checkpoint"};
    for (int k = 0; k < 3; k++) {
        mp_status st = k == 0 ? mp_model_save_hf(m, outs[0])
                       : k == 1 ? mp_model_save_gguf(m, NULL, outs[1], MP_GGML_F32) : mp_model_save(m, outs[2]);
        CHECK(st == MP_OK, "%s: save %s: %s", label, kinds[k], mp_last_error());
        mp_model *b = st ? NULL : tu_load(outs[k]);
        if (b) {
            tu_config_equal(&m->cfg, &b->cfg, label);
            float *got = tu_forward(b, toks, T, NULL);
            const double d = tu_max_abs_diff(ref, got, nl);
            CHECK(d == 0.0, "%s: %s round trip: logits max |diff| %.3g", label, kinds[k], d);
            printf("%s: %s round trip: config equal, logits max |diff| %.2g\n", label, kinds[k], d);
            free(got);
            mp_model_free(b);
        }
    }
    /* Q8_0, kept quantized on load */
    const char *q8 = tu_tmp_path(test, "q8.gguf");
    CHECK(mp_model_save_gguf(m, NULL, q8, MP_GGML_Q8_0) == MP_OK, "%s: save Q8_0: %s", label, mp_last_error());
    mp_model *b = tu_load(q8);
    if (b) {
        CHECK(mp_model_is_quantized(b), "%s: Q8_0 GGUF loads quantized", label);
        tu_config_equal(&m->cfg, &b->cfg, label);
        float *got = tu_forward(b, toks, T, NULL);
        const double d = tu_max_abs_diff(ref, got, nl);
        CHECK(d <= tol_q8, "%s: Q8_0 round trip: logits max |diff| %.3g", label, d);
        printf("%s: Q8_0 GGUF round trip: logits max |diff| %.3g (tol %.2g)\n", label, d, tol_q8);
        free(got);
        mp_model_free(b);
    }
    unlink(q8);
    tu_rm_tree(outs[0]);
    unlink(outs[1]);
    unlink(outs[2]);
    free(ref);
}

/* ---- gradients at hook points ---- */

int tu_param_grads(mp_model *m, const int *toks, const int *tgt, int B, int T, mp_grads *G) {
    mp_acts A;
    const int a_ok = mp_acts_init(&A, &m->cfg, B, T) == MP_OK, ok = a_ok && mp_grads_init(G, &m->cfg) == MP_OK;
    CHECK(ok, "%s", mp_last_error());
    float loss;
    const int run = ok && mp_model_forward_backward(m, toks, tgt, B, T, NULL, &A, G, 1.0f, &loss, NULL) == MP_OK;
    CHECK(run, "forward-backward: %s", mp_last_error());
    if (a_ok) mp_acts_free(&A);
    if (ok && !run) mp_grads_free(G);
    return run;
}

double tu_fd_loss(mp_model *m, const int *toks, const int *tgt, int B, int T, float *p, float h) {
    const float save = *p;
    float lp, lm;
    *p = save + h;
    mp_model_loss(m, toks, tgt, B, T, NULL, &lp);
    *p = save - h;
    mp_model_loss(m, toks, tgt, B, T, NULL, &lm);
    *p = save;
    return ((double)lp - lm) / (2.0 * h);
}

double tu_fd_rel_err(double fd, double an) { return fabs(fd - an) / fmax(1e-2, fabs(fd) + fabs(an)); }

/* A forward hook adding eps * dir at one point; a backward hook keeping the gradient there. */
typedef struct {
    const float *dir;
    float eps;
    float *grad;
    size_t n;
} dir_nudge;

static int dir_nudge_cb(void *user, const mp_hook_info *info, float *data) {
    dir_nudge *u = user;
    for (size_t i = 0; i < info->numel; i++) data[i] += u->eps * u->dir[i];
    return 0;
}

static int keep_cb(void *user, const mp_hook_info *info, float *data) {
    dir_nudge *u = user;
    free(u->grad);
    u->grad = malloc(info->numel * sizeof(float));
    memcpy(u->grad, data, info->numel * sizeof(float));
    u->n = info->numel;
    return 0;
}

void tu_staged_grad(const mp_model *m, const int *toks, int T, const char *const *points, int n_points,
                    const char *label) {
    const int V = m->cfg.vocab, D = m->cfg.d_model, HD = m->cfg.n_head * m->cfg.d_head;
    const size_t nl = (size_t)T * V, nx = (size_t)T * (D > HD ? D : HD); /* the widest point: q's [T, H*Dh] */
    float *R = malloc(nl * sizeof(float)), *dir = malloc(nx * sizeof(float));
    unsigned s = 12345;
    for (size_t i = 0; i < nl; i++) s = s * 1103515245u + 12345u, R[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < nx; i++) s = s * 1103515245u + 12345u, dir[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
    for (int k = 0; k < n_points; k++) {
        /* analytic: the backward hooks' walk (no weight gradients: the staged attention) */
        mp_acts A;
        CHECK(mp_acts_init(&A, &m->cfg, 1, T) == MP_OK, "%s", mp_last_error());
        mp_forward_params fp = mp_forward_params_default();
        fp.acts = &A;
        CHECK(mp_model_forward(m, toks, 1, T, &fp, NULL) == MP_OK, "%s", mp_last_error());
        dir_nudge u = {dir, 0.0f, NULL, 0};
        mp_hooks *bwd = mp_hooks_new(&m->cfg);
        CHECK(mp_hooks_add(bwd, points[k], keep_cb, &u) == MP_OK, "%s", mp_last_error());
        CHECK(mp_model_backward_acts(m, &A, R, bwd) == MP_OK, "%s", mp_last_error());
        mp_hooks_free(bwd);
        mp_acts_free(&A);
        CHECK(u.grad && u.n <= nx, "%s: no gradient at %s", label, points[k]);
        if (!u.grad || u.n > nx) continue;
        double an = 0;
        for (size_t i = 0; i < u.n; i++) an += (double)u.grad[i] * dir[i];
        /* finite difference of the metric along dir at the point (central, eps 1e-3) */
        double f[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            u.eps = sgn ? -1e-3f : 1e-3f;
            mp_hooks *hs = mp_hooks_new(&m->cfg);
            CHECK(mp_hooks_add(hs, points[k], dir_nudge_cb, &u) == MP_OK, "%s", mp_last_error());
            float *logits = tu_forward(m, toks, T, hs);
            double sum = 0;
            for (size_t i = 0; i < nl; i++) sum += (double)R[i] * logits[i];
            f[sgn] = sum;
            free(logits);
            mp_hooks_free(hs);
        }
        const double fd = (f[0] - f[1]) / 2e-3;
        CHECK(fabs(an - fd) <= 2e-2 + 2e-2 * fabs(fd), "%s: d metric at %s: backward %.6g, finite difference %.6g",
              label, points[k], an, fd);
        printf("%s: staged backward at %s: %.6g vs finite difference %.6g\n", label, points[k], an, fd);
        free(u.grad);
    }
    free(R);
    free(dir);
}

typedef struct { size_t idx; float delta; } point_nudge;
static int point_nudge_cb(void *user, const mp_hook_info *info, float *data) {
    const point_nudge *u = user;
    if (u->idx < info->numel) data[u->idx] += u->delta;
    return 0;
}

double tu_nudged_metric(const mp_model *m, const int *toks, int B, int T, const float *R, const char *point,
                        size_t idx, float delta) {
    const size_t nl = (size_t)B * T * m->cfg.vocab;
    float *lg = malloc(nl * sizeof(float));
    point_nudge nu = {idx, delta};
    mp_hooks *hs = NULL;
    if (point) {
        hs = mp_hooks_new(&m->cfg);
        CHECK(mp_hooks_add(hs, point, point_nudge_cb, &nu) == MP_OK, "%s", mp_last_error());
    }
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    CHECK(mp_model_forward(m, toks, B, T, &fp, lg) == MP_OK, "%s", mp_last_error());
    double s = 0;
    for (size_t i = 0; i < nl; i++) s += (double)lg[i] * R[i];
    free(lg);
    mp_hooks_free(hs);
    return s;
}

/* ---- the CUDA forward against the CPU ---- */

static float *run_blocked(const mp_model *m, const int *toks, int T, int q_block, tu_capture *cap) {
    float *logits = malloc((size_t)T * m->cfg.vocab * sizeof(float));
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = q_block;
    CHECK(mp_model_forward(m, toks, 1, T, &fp, logits) == MP_OK, "forward: %s", mp_last_error());
    mp_hooks_free(hs);
    return logits;
}

tu_cuda_result tu_cuda_compare(const char *path, const char *label, const tu_cuda_opts *o) {
    tu_cuda_result res;
    memset(&res, 0, sizeof res);
    mp_model *m = NULL;
    if (mp_model_load(&m, path)) {
        CHECK(0, "load %s: %s", path, mp_last_error());
        return res;
    }
    res.cfg = m->cfg;
    const int T = 12, V = m->cfg.vocab;
    int toks[12] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33};
    tu_capture *cc = calloc(2, sizeof *cc), *cg = calloc(2, sizeof *cg);
    float *lc[2], *lg[2];
    const int qbs[2] = {0, 4};
    for (int k = 0; k < 2; k++) lc[k] = run_blocked(m, toks, T, qbs[k], &cc[k]);
    float *full = lc[0];
    mp_status st = mp_model_to_device(m, MP_DEVICE_CUDA, MP_PRECISION_FP32);
    CHECK(st == MP_OK, "%s: to cuda: %s", label, mp_last_error());
    if (st) goto done;
    res.ok = 1;
    {
        mp_hooks *hs = mp_hooks_new(&m->cfg);
        mp_hooks_add(hs, "*", tu_capture_cb, &cg[0]);
        mp_forward_params fp = mp_forward_params_default();
        fp.hooks = hs;
        CHECK(mp_model_forward_device(m, &fp) == MP_DEVICE_CUDA, "%s: a forward hooking \"*\" runs on the device",
              label);
        mp_hooks_free(hs);
        tu_capture_free(&cg[0]);
        memset(&cg[0], 0, sizeof cg[0]);
    }
    for (int k = 0; k < 2; k++) {
        lg[k] = run_blocked(m, toks, T, qbs[k], &cg[k]);
        CHECK(cc[k].n == cg[k].n, "%s: %d points on the CPU, %d on the device", label, cc[k].n, cg[k].n);
        double worst = 0;
        for (int i = 0; i < cc[k].n; i++) {
            size_t n;
            const float *g = tu_capture_get(&cg[k], cc[k].name[i], &n);
            CHECK(g && n == cc[k].numel[i], "%s: %s missing on the device", label, cc[k].name[i]);
            if (!g || n != cc[k].numel[i]) continue;
            const double d = tu_rel_diff(g, cc[k].buf[i], n, 1.0);
            CHECK(d <= o->tol_rel, "%s (q_block %d): %s relative |diff| %.3g", label, qbs[k], cc[k].name[i], d);
            if (d > worst) worst = d;
            for (int c = 0; c < 2; c++) res.counted[k][c] += o->count[c] && strstr(cc[k].name[i], o->count[c]) != NULL;
            if (o->absent[0])
                CHECK(!strstr(cc[k].name[i], o->absent[0]) && (!o->absent[1] || !strstr(cc[k].name[i], o->absent[1])),
                      "%s: %s fired", label, cc[k].name[i]);
        }
        const double d = tu_rel_diff(lg[k], lc[k], (size_t)T * V, 1.0);
        CHECK(d <= o->tol_rel, "%s (q_block %d): logits relative |diff| %.3g", label, qbs[k], d);
        if (d > worst) worst = d;
        printf("%s (q_block %d): %d hook points + logits, cuda vs cpu worst relative |diff| %.2e (tol %.0e)\n",
               label, qbs[k], cc[k].n, worst, o->tol_rel);
        free(lg[k]);
    }
    /* decoding on the device: prefill 5, then one token at a time (last logits) */
    tu_decode_vs_prefill(m, toks, T, 5, full, o->tol_rel, 1.0, 0, label);
    { /* the device's training step refuses the quirks by name */
        mp_adamw opt;
        mp_train_ws w;
        memset(&opt, 0, sizeof opt);
        memset(&w, 0, sizeof w);
        opt.hp = mp_adamw_params_default();
        int tgt[12];
        for (int i = 0; i < T; i++) tgt[i] = toks[(i + 1) % T];
        float loss = 0;
        st = mp_train_step(m, &opt, &w, toks, tgt, 1, T, 1, NULL, &loss);
        CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), o->train_refusal[0]) &&
                  (!o->train_refusal[1] || strstr(mp_last_error(), o->train_refusal[1])),
              "%s: device train step: %s", label, st ? mp_last_error() : "trained");
        mp_train_ws_free(&w);
        mp_adamw_free(&opt);
    }
done:
    for (int k = 0; k < 2; k++) {
        free(lc[k]);
        tu_capture_free(&cc[k]);
        tu_capture_free(&cg[k]);
    }
    free(cc);
    free(cg);
    mp_model_free(m);
    return res;
}
