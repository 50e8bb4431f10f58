/* test_train.c — the training engine against PyTorch and its checkpoints.
 *
 * tests/data/train_ref_{a,b,c}.h5 (tests/tools/make_train_ref.py, float64
 * PyTorch) hold an init checkpoint, fixed batches, every hook point of the
 * init model on batch 0, the losses of 10 AdamW steps (warmup + cosine,
 * clipping at 1.0, weight decay 0.1 on 2-D weights, accumulation over 2
 * micro-batches for config a) and the final parameters, for
 *   a: rms, swiglu, rope, GQA 4/2, tied      b: layer, gelu, no positions, untied
 *   c: attention-only (mlp none), rope, MQA 4/1, untied.
 * Checks: every hook point and the logits in inference and training mode
 * (1e-4 absolute); each step's loss (1e-5 relative); every final parameter
 * tensor: max |C - torch| <= 1e-5 * max |torch| (relative to the tensor's
 * scale: float32 vs float64 rounding, amplified by Adam's normalisation).
 * Then: saving mid-training and resuming gives bit-identical parameters and
 * moments; checkpoint round trip; a llama2.c model loads and trains
 * (copy-on-train, the file untouched); format detection; save refusals.
 *
 * `test_train --write-init DIR` writes the init checkpoints the script reads. */
#include "checkpoint.h"
#include "h5io.h"
#include "model.h"
#include "train.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mp_config cfg_of(char which) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.ctx = 8;
    if (which == 'a') { c.n_head = 4; c.n_kv_head = 2; c.d_head = 4; c.d_mlp = 32; c.vocab = 24; }
    if (which == 'b') {
        c.n_head = 2; c.n_kv_head = 2; c.d_head = 6; c.d_mlp = 40; c.vocab = 20;
        c.norm = MP_NORM_LAYER; c.mlp = MP_MLP_GELU; c.pos = MP_POS_NONE; c.tied = 0;
    }
    if (which == 'c') {
        c.n_head = 4; c.n_kv_head = 1; c.d_head = 4; c.d_mlp = 0; c.vocab = 16;
        c.mlp = MP_MLP_NONE; c.tied = 0; c.rope_theta = 500.0f;
    }
    return c;
}

static int write_init(const char *dir) {
    for (char w = 'a'; w <= 'c'; w++) {
        mp_config c = cfg_of(w);
        mp_model *m;
        if (mp_model_new_init(&m, &c, 1000 + w, 0.2f)) { fprintf(stderr, "%s\n", mp_last_error()); return 1; }
        /* non-trivial norm weights and biases */
        mp_param_desc d[MP_PARAM_MAX];
        int nd = mp_params_describe(&c, &m->p, d);
        for (int k = 0; k < nd; k++)
            if (d[k].ndim == 1)
                for (size_t i = 0; i < d[k].n; i++) d[k].p[i] += 0.1f * (float)((i * 7919 + k * 31) % 13) / 13.0f - 0.05f;
        char path[512];
        snprintf(path, sizeof path, "%s/train_init_%c.h5", dir, w);
        if (mp_checkpoint_save(path, m, NULL, NULL)) { fprintf(stderr, "%s\n", mp_last_error()); return 1; }
        printf("wrote %s\n", path);
        mp_model_free(m);
    }
    return 0;
}

static double cmp_inf(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static void check_golden(hid_t f, const mp_model *m, const int *tok, int B, int T, int training, const char *label) {
    tu_capture *cap = calloc(1, sizeof *cap);
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = 3; /* inference: several attention blocks */
    float *logits = malloc((size_t)B * T * m->cfg.vocab * sizeof(float));
    mp_acts A;
    memset(&A, 0, sizeof A);
    if (training) {
        CHECK(mp_acts_init(&A, &m->cfg, B, T) == MP_OK, "acts");
        fp.acts = &A;
    }
    CHECK(mp_model_forward(m, tok, B, T, &fp, logits) == MP_OK, "%s: forward: %s", label, mp_last_error());
    const float *lg = training ? A.logits : logits;
    mp_h5_entry *e;
    int ne;
    CHECK(mp_h5_list(f, "/ref/acts", &e, &ne) == MP_OK, "list acts");
    double worst = 0;
    int found = 0;
    for (int i = 0; i < ne; i++) {
        char p[256];
        snprintf(p, sizeof p, "/ref/acts/%s", e[i].name);
        float *ref;
        mp_h5_dsinfo info;
        CHECK(mp_h5_read_f32(f, p, &ref, &info) == MP_OK, "%s", p);
        int k;
        for (k = 0; k < cap->n; k++)
            if (strcmp(cap->name[k], e[i].name) == 0) break;
        CHECK(k < cap->n, "%s: hook %s did not fire", label, e[i].name);
        if (k < cap->n) {
            found++;
            CHECK(cap->numel[k] == info.numel, "%s: %s size", label, e[i].name);
            double d = cap->numel[k] == info.numel ? cmp_inf(cap->buf[k], ref, info.numel) : INFINITY;
            CHECK(d <= 1e-4, "%s: %s differs by %g", label, e[i].name, d);
            if (d > worst) worst = d;
        }
        free(ref);
    }
    int added = 0;
    for (int i = 0; i < cap->n; i++) added += tu_added_point(cap->name[i]);
    CHECK(found + added == cap->n, "%s: %d hooks fired, %d in the reference (%d added since)", label, cap->n, found,
          added);
    float *rl;
    mp_h5_dsinfo li;
    CHECK(mp_h5_read_f32(f, "/ref/logits0", &rl, &li) == MP_OK, "logits0");
    double dl = cmp_inf(lg, rl, li.numel);
    CHECK(dl <= 1e-4, "%s: logits differ by %g", label, dl);
    printf("  %s golden %s: %d hook points, max |diff| %.2e, logits %.2e\n", label,
           training ? "training-mode forward" : "inference forward", found, worst, dl);
    free(rl);
    mp_h5_list_free(e, ne);
    tu_capture_free(cap);
    free(cap);
    free(logits);
    mp_acts_free(&A);
    mp_hooks_free(hs);
}

static mp_adamw_params ref_hp(hid_t f) {
    mp_adamw_params hp = mp_adamw_params_default();
    const char *k[] = {"lr", "beta1", "beta2", "eps", "weight_decay", "min_lr", "grad_clip"};
    float *v[] = {&hp.lr, &hp.beta1, &hp.beta2, &hp.eps, &hp.weight_decay, &hp.min_lr, &hp.grad_clip};
    mp_h5_attr a;
    for (int i = 0; i < 7; i++) {
        if (mp_h5_attr_get(f, "/ref", k[i], &a) == MP_OK) { *v[i] = (float)a.f; mp_h5_attr_clear(&a); }
    }
    if (mp_h5_attr_get(f, "/ref", "warmup", &a) == MP_OK) { hp.warmup = (int)a.i; mp_h5_attr_clear(&a); }
    if (mp_h5_attr_get(f, "/ref", "total_steps", &a) == MP_OK) { hp.total_steps = (int)a.i; mp_h5_attr_clear(&a); }
    return hp;
}

static int ref_int(hid_t f, const char *key) {
    mp_h5_attr a;
    int v = -1;
    if (mp_h5_attr_get(f, "/ref", key, &a) == MP_OK) { v = (int)a.i; mp_h5_attr_clear(&a); }
    return v;
}

/* Trains `steps` steps from step `from` of the reference batches. */
static mp_status run_steps(mp_model *m, mp_adamw *opt, mp_train_ws *ws, const int *tok, const int *tgt, int from,
                           int steps, int B, int T, int accum, float *losses) {
    for (int s = from; s < from + steps; s++) {
        float l;
        mp_status st = mp_train_step(m, opt, ws, tok + (size_t)s * B * T, tgt + (size_t)s * B * T, B, T, accum, NULL, &l);
        if (st) return st;
        if (losses) losses[s] = l;
    }
    return MP_OK;
}

static void test_ref(char which) {
    char name[64], label[32];
    snprintf(name, sizeof name, "train_ref_%c.h5", which);
    snprintf(label, sizeof label, "config %c", which);
    const char *path = tu_data(name);
    mp_model *m = NULL;
    mp_status st = mp_checkpoint_load(path, &m, NULL, NULL);
    CHECK(st == MP_OK, "%s: %s", path, mp_last_error());
    if (st) return;
    mp_config want = cfg_of(which);
    CHECK(memcmp(&want, &m->cfg, sizeof want) == 0, "%s: config read back differs", label);
    hid_t f;
    CHECK(mp_h5_open(&f, path, MP_H5_READ) == MP_OK, "open");
    int *tok, *tgt;
    mp_h5_dsinfo ti;
    CHECK(mp_h5_read_i32(f, "/ref/tokens", (int32_t **)&tok, &ti) == MP_OK, "tokens");
    CHECK(mp_h5_read_i32(f, "/ref/targets", (int32_t **)&tgt, &ti) == MP_OK, "targets");
    const int S = (int)ti.shape[0], B = (int)ti.shape[1], T = (int)ti.shape[2];
    check_golden(f, m, tok, B, T, 0, label);
    check_golden(f, m, tok, B, T, 1, label);

    mp_adamw_params hp = ref_hp(f);
    int accum = ref_int(f, "accum");
    mp_adamw opt;
    memset(&opt, 0, sizeof opt);
    opt.hp = hp;
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    float losses[64];
    st = run_steps(m, &opt, &ws, tok, tgt, 0, S, B, T, accum, losses);
    CHECK(st == MP_OK, "%s: train: %s", label, mp_last_error());
    float *rloss;
    mp_h5_dsinfo li;
    CHECK(mp_h5_read_f32(f, "/ref/loss", &rloss, &li) == MP_OK, "loss");
    double wl = 0;
    for (int s = 0; s < S; s++) {
        double r = fabs(losses[s] - rloss[s]) / fabs(rloss[s]);
        if (r > wl) wl = r;
        CHECK(r <= 1e-5, "%s: step %d loss %.8f vs torch %.8f", label, s + 1, losses[s], rloss[s]);
    }
    double wp = 0;
    mp_param_desc d[MP_PARAM_MAX];
    int nd = mp_params_describe(&m->cfg, &m->p, d);
    int ntensors = 0;
    for (int k = 0; k < nd; k++) {
        int nl = d[k].per_layer ? m->cfg.n_layer : 1;
        size_t per = d[k].n / (size_t)nl;
        for (int l = 0; l < nl; l++) {
            char nm[160], p[200];
            snprintf(nm, sizeof nm, d[k].name, l);
            snprintf(p, sizeof p, "/ref/final/%s", nm);
            float *ref;
            mp_h5_dsinfo info;
            CHECK(mp_h5_read_f32(f, p, &ref, &info) == MP_OK && info.numel == per, "%s", p);
            double scale = 0, diff = 0;
            for (size_t i = 0; i < per; i++) {
                scale = fmax(scale, fabs(ref[i]));
                diff = fmax(diff, fabs((double)d[k].p[(size_t)l * per + i] - ref[i]));
            }
            double r = diff / scale;
            CHECK(r <= 1e-5, "%s: %s after %d steps: max diff %.3g (scale %.3g)", label, nm, S, diff, scale);
            if (r > wp) wp = r;
            ntensors++;
            free(ref);
        }
    }
    printf("  %s vs PyTorch, %d AdamW steps (accum %d): worst loss rel. diff %.2e, worst param rel. diff %.2e "
           "over %d tensors (last grad norm %.3f)\n", label, S, accum, wl, wp, ntensors, ws.grad_norm);

    /* resume: straight through vs half, checkpoint, load, rest */
    if (which != 'c') {
        mp_model *m1 = NULL, *m2 = NULL, *m3 = NULL;
        mp_adamw o1 = {0}, o2 = {0}, o3 = {0};
        mp_train_ws w1 = {0}, w2 = {0}, w3 = {0};
        mp_train_log log = {0}, log3 = {0};
        o1.hp = o2.hp = hp;
        CHECK(mp_checkpoint_load(path, &m1, NULL, NULL) == MP_OK && mp_checkpoint_load(path, &m2, NULL, NULL) == MP_OK,
              "reload");
        CHECK(run_steps(m1, &o1, &w1, tok, tgt, 0, S, B, T, accum, NULL) == MP_OK, "straight");
        CHECK(run_steps(m2, &o2, &w2, tok, tgt, 0, 4, B, T, accum, losses) == MP_OK, "first half");
        for (int s = 0; s < 4; s++) mp_train_log_add(&log, s + 1, losses[s], 0.01f, (s + 1) * B * T, s);
        char tmp[] = "/tmp/mp_test_train_XXXXXX";
        CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
        char ck[300];
        snprintf(ck, sizeof ck, "%s/mid.h5", tmp);
        CHECK(mp_checkpoint_save(ck, m2, &o2, &log) == MP_OK, "save: %s", mp_last_error());
        st = mp_checkpoint_load(ck, &m3, &o3, &log3);
        CHECK(st == MP_OK, "load mid: %s", mp_last_error());
        if (!st) {
            CHECK(o3.step == 4 && o3.n == o2.n && memcmp(o3.m, o2.m, o2.n * 4) == 0 && memcmp(o3.v, o2.v, o2.n * 4) == 0,
                  "optimizer state round trip");
            CHECK(memcmp(&o3.hp, &o2.hp, sizeof o3.hp) == 0, "hyper-parameters round trip");
            CHECK(memcmp(m3->owned, m2->owned, o2.n * 4) == 0, "params round trip");
            CHECK(log3.n == 4 && log3.step[3] == 4 && log3.loss[2] == log.loss[2] && log3.tokens[3] == log.tokens[3],
                  "loss curve round trip");
            CHECK(run_steps(m3, &o3, &w3, tok, tgt, 4, S - 4, B, T, accum, NULL) == MP_OK, "second half");
            CHECK(memcmp(m3->owned, m1->owned, o1.n * sizeof(float)) == 0, "%s: resumed params are not bit-identical",
                  label);
            CHECK(memcmp(o3.m, o1.m, o1.n * 4) == 0 && memcmp(o3.v, o1.v, o1.n * 4) == 0 && o3.step == o1.step,
                  "%s: resumed moments are not bit-identical", label);
            printf("  %s resume after 4 of %d steps: bit-identical params and moments\n", label, S);
        }
        unlink(ck);
        rmdir(tmp);
        mp_model_free(m1); mp_model_free(m2); mp_model_free(m3);
        mp_adamw_free(&o1); mp_adamw_free(&o2); mp_adamw_free(&o3);
        mp_train_ws_free(&w1); mp_train_ws_free(&w2); mp_train_ws_free(&w3);
        mp_train_log_free(&log); mp_train_log_free(&log3);
    }
    free(rloss);
    free(tok);
    free(tgt);
    mp_h5_close(&f);
    mp_adamw_free(&opt);
    mp_train_ws_free(&ws);
    mp_model_free(m);
}

static void test_llama2c_train(void) {
    const char *path = tu_data("ref_tied.bin");
    mp_model *m = NULL;
    CHECK(mp_model_load(&m, path) == MP_OK, "load llama2.c through mp_model_load: %s", mp_last_error());
    if (!m) return;
    CHECK(m->map != NULL, "llama2.c weights are mapped");
    float before = m->p.wq[3];
    enum { B = 2, T = 12 };
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) { tok[i] = (i * 7 + 3) % m->cfg.vocab; tgt[i] = (i * 7 + 10) % m->cfg.vocab; }
    mp_adamw opt = {0};
    opt.hp = mp_adamw_params_default();
    opt.hp.lr = 3e-3f;
    mp_train_ws ws = {0};
    float l0 = 0, l = 0;
    for (int s = 0; s < 8; s++) {
        CHECK(mp_train_step(m, &opt, &ws, tok, tgt, B, T, 1, NULL, &l) == MP_OK, "llama2.c train: %s", mp_last_error());
        if (s == 0) l0 = l;
    }
    CHECK(m->map == NULL && m->owned != NULL, "copy-on-train: parameters are owned now");
    CHECK(m->p.wq[3] != before, "parameters changed");
    CHECK(l < l0, "loss decreases on a fixed batch (%.4f -> %.4f)", l0, l);
    mp_model *again = NULL;
    CHECK(mp_model_load(&again, path) == MP_OK && again->p.wq[3] == before, "the file is untouched");
    printf("  llama2.c model trains (copy-on-train): loss %.4f -> %.4f over 8 steps\n", l0, l);
    /* save .h5 and .bin; reload each */
    char tmp[] = "/tmp/mp_test_train_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    char h5[300], bin[300];
    snprintf(h5, sizeof h5, "%s/m.h5", tmp);
    snprintf(bin, sizeof bin, "%s/m.bin", tmp);
    CHECK(mp_model_save(m, h5) == MP_OK && mp_model_save(m, bin) == MP_OK, "save: %s", mp_last_error());
    mp_model *a = NULL, *b = NULL;
    CHECK(mp_file_is_hdf5(h5) && !mp_file_is_hdf5(bin), "format detection");
    CHECK(mp_model_load(&a, h5) == MP_OK && mp_model_load(&b, bin) == MP_OK, "reload: %s", mp_last_error());
    if (a && b) {
        size_t n = mp_config_n_params(&m->cfg);
        CHECK(memcmp(a->owned, m->owned, n * 4) == 0, ".h5 round trip bit for bit");
        CHECK(memcmp(b->p.wq, m->p.wq, 4 * (size_t)m->cfg.n_layer * m->cfg.d_model * m->cfg.d_model) == 0,
              ".bin round trip");
    }
    mp_model_free(a); mp_model_free(b); mp_model_free(again);
    /* llama2.c cannot express LayerNorm */
    mp_config c = cfg_of('b');
    mp_model *ln;
    CHECK(mp_model_new_init(&ln, &c, 1, 0.02f) == MP_OK, "init");
    CHECK(mp_model_save(ln, bin) == MP_ERR_ARG, "LayerNorm model refused as llama2.c");
    CHECK(strstr(mp_last_error(), "h5") != NULL, "message suggests .h5: %s", mp_last_error());
    /* a truncated / wrong-shape checkpoint is refused */
    CHECK(mp_checkpoint_save(h5, ln, NULL, NULL) == MP_OK, "save b");
    hid_t f;
    CHECK(mp_h5_open(&f, h5, MP_H5_RDWR) == MP_OK, "reopen");
    CHECK(mp_h5_attr_set_int(f, "/config", "d_mlp", 41) == MP_OK, "tamper");
    mp_h5_close(&f);
    mp_model *bad = NULL;
    CHECK(mp_checkpoint_load(h5, &bad, NULL, NULL) == MP_ERR_FORMAT && !bad, "wrong shapes refused");
    CHECK(strstr(mp_last_error(), "blocks.0.mlp.w1") != NULL, "message names the dataset: %s", mp_last_error());
    mp_model_free(ln);
    unlink(h5);
    unlink(bin);
    rmdir(tmp);
    /* init: residual projections scaled */
    mp_config c2 = cfg_of('a');
    c2.n_layer = 8; c2.d_model = 64; c2.d_head = 16; c2.d_mlp = 128;
    CHECK(mp_model_new_init(&ln, &c2, 3, 0.02f) == MP_OK, "init");
    double s1 = 0, s2 = 0;
    size_t nq = (size_t)8 * 64 * 64, no = nq;
    for (size_t i = 0; i < nq; i++) s1 += ln->p.wq[i] * ln->p.wq[i];
    for (size_t i = 0; i < no; i++) s2 += ln->p.wo[i] * ln->p.wo[i];
    CHECK_NEAR(sqrt(s1 / nq), 0.02, 0.0005, "wq std");
    CHECK_NEAR(sqrt(s2 / no), 0.02 / 4.0, 0.0002, "wo std = 0.02 / sqrt(2 * 8)");
    CHECK(ln->p.ln1_w[5] == 1.0f, "norm weights 1");
    mp_model_free(ln);
    mp_adamw_free(&opt);
    mp_train_ws_free(&ws);
    mp_model_free(m);
}

int main(int argc, char **argv) {
    mp_io_init();
    if (argc == 3 && strcmp(argv[1], "--write-init") == 0) return write_init(argv[2]);
    test_ref('a');
    test_ref('b');
    test_ref('c');
    test_llama2c_train();
    return tu_finish("test_train");
}
