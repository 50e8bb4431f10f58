/* test_qwen3.c — the q/k norm (config qk_norm: RMSNorm of q and k after their
 * projections, before RoPE) and the Qwen3 family that uses it:
 *  - golden: a small random Qwen3 (head_dim 16 != d_model / heads, tied,
 *    random q/k norm weights) as a Hugging Face folder and as a GGUF file,
 *    both written by tests/tools/make_arch_ref_qwen3.py's independent
 *    writers, against its float64 PyTorch forward: logits and every block's
 *    hook_resid_post within 1e-5 of their scale (max |ref|), every hook point
 *    in the file (the new attn.q_norm / k_norm.hook_normalized included)
 *    within 1e-4 absolute;
 *  - the norm matters: the same weights with qk_norm none miss the golden
 *    logits by far more than the tolerance;
 *  - KV-cached decoding (prefill 5, then one token at a time) equals the
 *    prefill's logits (1e-5 of their scale);
 *  - gradients against central finite differences (relative error < 2e-2):
 *    the training step's q_norm / k_norm weight gradients (qk_norm head and
 *    full) and backward-hook gradients at an input hook (attn.hook_q, which
 *    reaches the metric only through the norm) and at the new points;
 *  - round trips: HDF5 checkpoint, GGUF (F32) and HF folder, each reloaded
 *    bit-exact (logits and every hook); GGUF Q8_0 (kept quantized: the
 *    loader's quantized path permutes the q/k rows) within TOL_Q8_REL;
 *    qk_norm full refuses the GGUF and HF writers by name and round-trips
 *    through the checkpoint;
 *  - TransformerLens's fold_ln stays exact with the q/k norm on (ln1's weight
 *    goes into W_Q / W_K ahead of it; the q/k norm weights stay): logits and
 *    the q/k norm points within 1e-5 of their scale;
 *  - config.json asking for what is not implemented (use_sliding_window,
 *    a sliding layer type, YaRN) is refused by name, as is a qwen3 GGUF
 *    without its attn_k_norm and a qwen2 GGUF that has attn_q_norm.
 * The CUDA backend's q/k norm is compared with the CPU in test_gpu.c (run on
 * the emulator as test_gpu_emu). */
#include "formats.h"
#include "gguf.h"
#include "grad.h"
#include "h5io.h"
#include "model_io.h"
#include "model.h"
#include "testutil.h"
#include "tu_arch.h"
#include "train.h"
#include "weights_process.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOL_ABS 1e-4 /* every hook point, absolute (values of order 1-10) */
#define TOL_REL 1e-5 /* logits and resid_post, of the tensor's largest |value| */
#define TOL_Q8_REL 5e-2 /* a Q8_0 round trip's logits, of their largest |value| (measured 0.0175; a
                          * mis-permuted q/k row or norm weight costs O(1), as qk_norm none does) */

/* ---- golden ---- */

static void golden(const char *model_path, const char *golden_path, const char *label, const char *want_format) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    CHECK(strcmp(m->format, want_format) == 0, "%s: format %s, expected %s", label, m->format, want_format);
    CHECK(m->cfg.qk_norm == MP_QK_NORM_HEAD && m->cfg.d_head == 16 && m->cfg.tied && !m->cfg.qkv_bias,
          "%s: config (qk_norm %d, d_head %d, tied %d, qkv_bias %d)", label, (int)m->cfg.qk_norm, m->cfg.d_head,
          m->cfg.tied, m->cfg.qkv_bias);
    /* every point within TOL_ABS; each resid_post and the logits within TOL_REL of their scale */
    const tu_golden_opts o = {.tol_abs = TOL_ABS, .tol_rel = TOL_REL, .rel_only = "hook_resid_post",
                              .logits_rel = TOL_REL, .all_compared = 1,
                              .count = {"_norm.hook_normalized", "hook_resid_post"}};
    tu_golden_result r = tu_golden(m, golden_path, label, &o, NULL);
    CHECK(r.counted[0] == 2 * m->cfg.n_layer && r.counted[1] == m->cfg.n_layer, "%s: %d q/k norm points, %d "
          "resid_post", label, r.counted[0], r.counted[1]);
    mp_model_free(m);
}

/* ---- qk_norm none: the same weights, the norm left out, miss the golden logits ---- */

static void norm_matters(const char *model_path, const char *golden_path) {
    mp_model *m = tu_load(model_path), *off = NULL;
    if (!m) return;
    mp_config c = m->cfg;
    c.qk_norm = MP_QK_NORM_NONE;
    CHECK(mp_model_new(&off, &c) == MP_OK, "%s", mp_last_error());
    mp_param_desc a[MP_PARAM_MAX], b[MP_PARAM_MAX];
    int na = mp_params_describe(&m->cfg, &m->p, a), nb = mp_params_describe(&c, &off->p, b);
    CHECK(na == nb + 2, "qk_norm none has %d tensors, head %d (two norm weights more)", nb, na);
    for (int i = 0, j = 0; i < na && j < nb; i++) {
        if (strstr(a[i].name, "_norm.weight") && strstr(a[i].name, "attn.")) continue;
        CHECK(strcmp(a[i].name, b[j].name) == 0 && a[i].n == b[j].n, "tensor %s vs %s", a[i].name, b[j].name);
        memcpy(b[j].p, a[i].p, a[i].n * sizeof(float));
        j++;
    }
    tu_golden_ref g;
    tu_read_golden(golden_path, &g);
    const size_t nl = g.n_logits;
    float *lg = malloc(nl * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    CHECK(g.toks && mp_model_forward(off, (int *)g.toks, 1, g.T, &fp, lg) == MP_OK, "%s", mp_last_error());
    double r = tu_rel_diff(lg, g.logits, nl, 0.0);
    CHECK(r > 100 * TOL_REL, "qk_norm none matches the Qwen3 golden logits (relative diff %.3g)", r);
    printf("the same weights with qk_norm none: logits off by %.3g of their scale (the norm is not a no-op)\n", r);
    free(lg);
    tu_golden_ref_free(&g);
    mp_model_free(off);
    mp_model_free(m);
}

/* ---- decode == prefill ---- */

static void decode(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    const int T = 14, V = m->cfg.vocab, n0 = 5;
    int toks[14];
    for (int i = 0; i < T; i++) toks[i] = (i * 29 + 3) % V;
    tu_decode_vs_prefill(m, toks, T, n0, NULL, TOL_REL, 0.0, 0, label);
    mp_model_free(m);
}

/* ---- gradients ---- */

/* the training step's gradients of the q/k norm weights against central differences of the loss */
static void weight_grads(mp_qk_norm_kind kind) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.d_head = 6; c.d_mlp = 24;
    c.vocab = 20; c.ctx = 8; c.qk_norm = kind; c.qkv_bias = 1; c.tied = 0;
    mp_model *m;
    CHECK(mp_model_new_random(&m, &c, 17, 0.4f) == MP_OK, "%s", mp_last_error());
    const size_t nq = (size_t)c.n_layer * c.d_head * (kind == MP_QK_NORM_FULL ? c.n_head : 1);
    const size_t nk = (size_t)c.n_layer * c.d_head * (kind == MP_QK_NORM_FULL ? c.n_kv_head : 1);
    for (size_t i = 0; i < nq; i++) m->p.q_norm[i] = 0.6f + 0.05f * (float)(i % 17);
    for (size_t i = 0; i < nk; i++) m->p.k_norm[i] = 1.4f - 0.04f * (float)(i % 13);
    const int B = 2, T = 6;
    int toks[12], tg[12];
    for (int i = 0; i < B * T; i++) { toks[i] = (i * 7 + 3) % c.vocab; tg[i] = (i * 5 + 1) % c.vocab; }
    mp_grads G;
    if (!tu_param_grads(m, toks, tg, B, T, &G)) { mp_model_free(m); return; }
    struct { const char *name; float *p, *g; size_t n; } ps[] = {
        {"q_norm", m->p.q_norm, G.g.q_norm, nq}, {"k_norm", m->p.k_norm, G.g.k_norm, nk},
        {"wq", m->p.wq, G.g.wq, (size_t)c.n_layer * c.n_head * c.d_head * c.d_model},
        {"bk", m->p.bk, G.g.bk, (size_t)c.n_layer * c.n_kv_head * c.d_head}};
    double worst = 0;
    int probes = 0;
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++)
        for (size_t i = 0; i < ps[k].n; i += ps[k].n / 7 + 1) {
            const float h = 3e-3f;
            double fd = tu_fd_loss(m, toks, tg, B, T, &ps[k].p[i], h), an = ps[k].g[i];
            double err = tu_fd_rel_err(fd, an);
            CHECK(err < 2e-2, "qk_norm %s: grad %s[%zu]: analytic %.5g, finite difference %.5g",
                  mp_qk_norm_name(kind), ps[k].name, i, an, fd);
            CHECK(fabs(an) > 1e-6 || k >= 2, "qk_norm %s: grad %s[%zu] is 0", mp_qk_norm_name(kind), ps[k].name, i);
            if (err > worst) worst = err;
            probes++;
        }
    printf("qk_norm %s: training gradients of q_norm, k_norm, wq, bk vs finite differences: %d probes, worst "
           "relative error %.2e\n", mp_qk_norm_name(kind), probes, worst);
    mp_grads_free(&G);
    mp_model_free(m);
}

static void hook_grads(const char *model_path) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    const int B = 1, T = 7, V = m->cfg.vocab;
    int toks[7];
    for (int i = 0; i < T; i++) toks[i] = (i * 13 + 4) % V;
    float *R = malloc((size_t)B * T * V * sizeof(float));
    for (int i = 0; i < B * T * V; i++) R[i] = (float)sin(0.37 * i + 1.0);
    mp_acts A;
    CHECK(mp_acts_init(&A, &m->cfg, B, T) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.acts = &A;
    CHECK(mp_model_forward(m, toks, B, T, &fp, NULL) == MP_OK, "%s", mp_last_error());
    const char *pts[] = {"blocks.0.attn.hook_q", "blocks.0.attn.q_norm.hook_normalized",
                         "blocks.1.attn.k_norm.hook_normalized", "blocks.0.attn.hook_k"};
    const int npts = 4;
    tu_capture g = {0};
    mp_hooks *bwd = mp_hooks_new(&m->cfg);
    for (int k = 0; k < npts; k++) CHECK(mp_hooks_add(bwd, pts[k], tu_capture_cb, &g) == MP_OK, "%s", mp_last_error());
    CHECK(mp_model_backward_acts(m, &A, R, bwd) == MP_OK, "%s", mp_last_error());
    double worst = 0;
    int probes = 0;
    for (int k = 0; k < npts; k++) {
        size_t n;
        const float *gr = tu_capture_get(&g, pts[k], &n);
        CHECK(gr != NULL, "no gradient at %s", pts[k]);
        if (!gr) continue;
        for (size_t i = 3; i < n; i += n / 6 + 1) {
            const float h = 1e-2f;
            double fd = (tu_nudged_metric(m, toks, B, T, R, pts[k], i, h) -
                         tu_nudged_metric(m, toks, B, T, R, pts[k], i, -h)) / (2.0 * h);
            double err = tu_fd_rel_err(fd, gr[i]);
            CHECK(err < 2e-2, "gradient at %s[%zu]: backward %.5g, finite difference %.5g", pts[k], i, gr[i], fd);
            if (err > worst) worst = err;
            probes++;
        }
    }
    printf("backward hooks at hook_q / hook_k (through the q/k norm) and the q/k norm points vs finite differences: "
           "%d probes, worst relative error %.2e\n", probes, worst);
    /* attribution patching at the new point: per head, the sum of (clean - corrupt) * grad over the head's values */
    size_t n;
    const float *gq = tu_capture_get(&g, pts[1], &n);
    const int H = m->cfg.n_head, Dh = m->cfg.d_head;
    int64_t shape[2];
    CHECK(mp_grad_has_hook(MP_HOOK_Q_NORM) && mp_grad_has_hook(MP_HOOK_K_NORM), "the q/k norm points have gradients");
    CHECK(mp_grad_attr_shape(&m->cfg, MP_HOOK_Q_NORM, T, MP_ATTR_HEAD, shape) == 1 && shape[0] == H &&
              mp_grad_attr_shape(&m->cfg, MP_HOOK_K_NORM, T, MP_ATTR_HEAD, shape) == 1 &&
              shape[0] == m->cfg.n_kv_head, "attribution shapes of the q/k norm points");
    if (gq && n == (size_t)T * H * Dh) {
        float *clean = malloc(n * sizeof(float)), *corrupt = calloc(n, sizeof(float)), out[64];
        for (size_t i = 0; i < n; i++) clean[i] = (float)cos(0.11 * i);
        CHECK(mp_grad_attribution(&m->cfg, MP_HOOK_Q_NORM, B, T, clean, corrupt, gq, MP_ATTR_HEAD, out) == MP_OK, "%s",
              mp_last_error());
        double bad = 0;
        for (int h = 0; h < H; h++) {
            double s = 0;
            for (int t = 0; t < T; t++)
                for (int d = 0; d < Dh; d++) {
                    const size_t i = ((size_t)t * H + h) * Dh + d;
                    s += (double)clean[i] * gq[i];
                }
            bad = fmax(bad, fabs(s - out[h]) / fmax(1e-6, fabs(s)));
        }
        CHECK(bad < 1e-5, "attribution per head at q_norm.hook_normalized: relative error %.3g", bad);
        free(clean);
        free(corrupt);
    }
    tu_capture_free(&g);
    mp_hooks_free(bwd);
    mp_acts_free(&A);
    free(R);
    mp_model_free(m);
}

/* ---- round trips ---- */

static const char *tmp_path(const char *name) { return tu_tmp_path("qwen3", name); }

/* max |diff| over logits and every hook ("*") of two models on the same tokens */
static double compare_models(const mp_model *a, const mp_model *b, const char *label) {
    int toks[16];
    for (int i = 0; i < 16; i++) toks[i] = (i * 37 + 5) % a->cfg.vocab;
    return tu_compare_models(a, b, toks, 16, label);
}

static void round_trips(const char *src) {
    mp_model *m = tu_load(src);
    if (!m) return;
    const char *ck = tmp_path("ckpt.h5"), *gg = tmp_path("f32.gguf"), *hf = tmp_path("hf");
    struct { const char *what, *path, *format; } outs[] = {
        {"HDF5 checkpoint", ck, NULL}, {"GGUF", gg, "gguf-qwen3"}, {"HF folder", hf, "hf-qwen3"}};
    CHECK(mp_model_save(m, ck) == MP_OK, "%s", mp_last_error());
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    CHECK(mp_model_save_hf(m, hf) == MP_OK, "%s", mp_last_error());
    for (int i = 0; i < 3; i++) {
        mp_model *r = tu_load(outs[i].path);
        if (!r) continue;
        CHECK(r->cfg.qk_norm == MP_QK_NORM_HEAD, "%s: qk_norm lost", outs[i].what);
        CHECK(!outs[i].format || strcmp(r->format, outs[i].format) == 0, "%s: format %s", outs[i].what, r->format);
        double d = compare_models(m, r, outs[i].what);
        CHECK(d == 0.0, "%s of %s: max |diff| %.3g (must be exact)", outs[i].what, src, d);
        printf("%s -> %s -> reload: logits and every hook exact\n", m->format, outs[i].what);
        mp_model_free(r);
    }
    /* Q8_0: the weights stay quantized, q/k rows permuted as they are copied (load_gguf.c's quantized path) */
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_Q8_0) == MP_OK, "%s", mp_last_error());
    mp_model *q8 = tu_load(gg);
    if (q8) {
        int toks[16];
        for (int i = 0; i < 16; i++) toks[i] = (i * 37 + 5) % m->cfg.vocab;
        const size_t nl = (size_t)16 * m->cfg.vocab;
        float *la = malloc(nl * sizeof(float)), *lb = malloc(nl * sizeof(float));
        mp_forward_params fp = mp_forward_params_default();
        CHECK(mp_model_forward(m, toks, 1, 16, &fp, la) == MP_OK && mp_model_forward(q8, toks, 1, 16, &fp, lb) == MP_OK,
              "%s", mp_last_error());
        const double r = tu_rel_diff(lb, la, nl, 0.0);
        CHECK(mp_model_is_quantized(q8) && r < TOL_Q8_REL, "Q8_0 GGUF: quantized %d, logits relative diff %.3g",
              mp_model_is_quantized(q8), r);
        printf("%s -> GGUF Q8_0 -> reload (weights kept quantized): logits within %.2e of their scale (tol %.0e)\n",
               m->format, r, TOL_Q8_REL);
        free(la);
        free(lb);
        mp_model_free(q8);
    }
    unlink(ck);
    unlink(gg);
    tu_rm_tree(hf);
    mp_model_free(m);

    /* attention_bias true, untied: q/k biases permuted with the rows, through both writers */
    mp_config c = mp_config_default();
    c.d_model = 32; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.d_head = 16; c.d_mlp = 40;
    c.vocab = 48; c.ctx = 32; c.qk_norm = MP_QK_NORM_HEAD; c.qkv_bias = 1; c.tied = 0; c.rope_theta = 1e6f;
    CHECK(mp_model_new_random(&m, &c, 8, 0.3f) == MP_OK, "%s", mp_last_error());
    for (int i = 0; i < c.n_layer * c.d_head; i++) {
        m->p.q_norm[i] = 0.4f + 0.05f * (float)i;
        m->p.k_norm[i] = 1.8f - 0.03f * (float)i;
    }
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_OK && mp_model_save_hf(m, hf) == MP_OK, "%s",
          mp_last_error());
    for (int i = 1; i < 3; i++) {
        mp_model *r = tu_load(outs[i].path);
        if (!r) continue;
        double d = compare_models(m, r, outs[i].what);
        CHECK(d == 0.0 && r->cfg.qkv_bias && !r->cfg.tied && r->cfg.qk_norm == MP_QK_NORM_HEAD,
              "qwen3 with attention_bias, untied -> %s: |diff| %.3g, qkv_bias %d, tied %d", outs[i].what, d,
              r->cfg.qkv_bias, r->cfg.tied);
        mp_model_free(r);
    }
    printf("qwen3 with attention_bias, untied -> GGUF and HF folder -> reload: exact\n");
    mp_model_free(m);
    unlink(gg);
    tu_rm_tree(hf);

    /* qk_norm full (OLMo 2's form): the checkpoint keeps it; GGUF and HF refuse by name */
    c = mp_config_default();
    c.d_model = 32; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.d_head = 8; c.d_mlp = 40;
    c.vocab = 48; c.ctx = 32; c.qk_norm = MP_QK_NORM_FULL;
    CHECK(mp_model_new_random(&m, &c, 5, 0.3f) == MP_OK, "%s", mp_last_error());
    for (size_t i = 0; i < (size_t)c.n_layer * c.n_head * c.d_head; i++) m->p.q_norm[i] = 0.5f + 0.01f * (float)i;
    CHECK(mp_model_save(m, ck) == MP_OK, "%s", mp_last_error());
    mp_model *r = tu_load(ck);
    if (r) {
        double d = compare_models(m, r, "full checkpoint");
        CHECK(d == 0.0 && r->cfg.qk_norm == MP_QK_NORM_FULL, "qk_norm full checkpoint: |diff| %.3g", d);
        mp_model_free(r);
    }
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) != MP_OK && strstr(mp_last_error(), "qk_norm full"),
          "GGUF of qk_norm full: \"%s\"", mp_last_error());
    CHECK(mp_model_save_hf(m, hf) != MP_OK && strstr(mp_last_error(), "qk_norm full"), "HF of qk_norm full: \"%s\"",
          mp_last_error());
    CHECK(mp_model_save_llama2c(m, gg, 1) != MP_OK && strstr(mp_last_error(), "q/k norm"),
          "llama2.c of a q/k norm model: \"%s\"", mp_last_error());
    printf("qk_norm full: checkpoint round trip exact; GGUF and HF writers refuse it by name, llama2.c any q/k norm\n");
    unlink(ck);
    unlink(gg);
    rmdir(hf);
    mp_model_free(m);
}

/* ---- weight processing ---- */

static void processing(const char *src) {
    mp_model *m = tu_load(src), *f = tu_load(src);
    if (!m || !f) { mp_model_free(m); mp_model_free(f); return; }
    CHECK(mp_weights_process(f, MP_WP_FOLD_LN) == MP_OK, "fold_ln: %s", mp_last_error());
    int toks[16];
    for (int i = 0; i < 16; i++) toks[i] = (i * 37 + 5) % m->cfg.vocab;
    tu_capture ca = {0}, cb = {0};
    float *la = tu_run_captured(m, toks, 16, &ca), *lb = tu_run_captured(f, toks, 16, &cb);
    double worst = tu_rel_diff(lb, la, (size_t)16 * m->cfg.vocab, 0.0);
    int seen = 0;
    for (int k = 0; k < ca.n; k++) {
        if (!strstr(ca.name[k], "_norm.hook_normalized")) continue;
        size_t nb;
        const float *gb = tu_capture_get(&cb, ca.name[k], &nb);
        CHECK(gb && nb == ca.numel[k], "fold_ln: %s missing", ca.name[k]);
        if (gb && nb == ca.numel[k]) {
            double r = tu_rel_diff(gb, ca.buf[k], nb, 0.0);
            if (r > worst) worst = r;
            seen++;
        }
    }
    CHECK(seen == 2 * m->cfg.n_layer && worst <= TOL_REL, "fold_ln with the q/k norm: relative diff %.3g (%d points)",
          worst, seen);
    CHECK(f->p.ln1_w[0] == 1.0f && f->p.q_norm[0] == m->p.q_norm[0], "fold_ln: ln1 folded, the q/k norm kept");
    printf("fold_ln on qwen3: logits and q/k norm points within %.2e of their scale (the q/k norm weights kept)\n",
           worst);
    free(la);
    free(lb);
    tu_capture_free(&ca);
    tu_capture_free(&cb);
    mp_model_free(m);
    mp_model_free(f);
}

/* ---- config.json asking for what is not implemented ---- */

static void refusals(const char *src) {
    const char *dir = tmp_path("bad");
    mkdir(dir, 0777);
    char cmd[2048], path[600];
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/model.safetensors", src, dir);
    CHECK(system(cmd) == 0, "cp");
    const char *variants[][2] = {
        /* a window on layers 1.. only (the window on every layer loads: test_swa's rule, checked below) */
        {"\"use_sliding_window\": true, \"sliding_window\": 4, \"max_window_layers\": 1", "max_window_layers 1"},
        {"\"layer_types\": [\"full_attention\", \"sliding_attention\"]", "layer_types[1]"},
        {"\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", "yarn"}};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"model_type\": \"qwen3\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                   "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
                   "\"intermediate_size\": 48, \"vocab_size\": 64, \"max_position_embeddings\": 32, "
                   "\"tie_word_embeddings\": true, %s}\n", variants[i][0]);
        fclose(f);
        mp_model *m = NULL;
        mp_status st = mp_model_load(&m, dir);
        CHECK(st != MP_OK && !m && strstr(mp_last_error(), variants[i][1]), "config %s: loaded or message \"%s\"",
              variants[i][0], st ? mp_last_error() : "(loaded)");
        if (st) printf("refused: \"%s\"\n", mp_last_error());
        mp_model_free(m);
    }
    { /* qwen3's window on every layer (use_sliding_window, max_window_layers 0) is read as qwen2's */
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"model_type\": \"qwen3\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                   "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
                   "\"intermediate_size\": 48, \"vocab_size\": 64, \"max_position_embeddings\": 32, "
                   "\"tie_word_embeddings\": true, \"use_sliding_window\": true, \"sliding_window\": 4, "
                   "\"max_window_layers\": 0}\n");
        fclose(f);
        mp_model *m = NULL;
        mp_status st = mp_model_load(&m, dir);
        CHECK(st == MP_OK && m && m->cfg.sliding_window == 4 && m->cfg.qk_norm == MP_QK_NORM_HEAD,
              "qwen3 with a window on every layer: %s", st ? mp_last_error() : "wrong config");
        mp_model_free(m);
    }
    snprintf(path, sizeof path, "%s/config.json", dir); unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir); unlink(path);
    rmdir(dir);
    /* GGUF: qwen3 without a norm weight; the norm in an architecture that has none */
    const char *src_gguf = tu_data("arch_qwen3.gguf"), *out = tmp_path("bad.gguf");
    for (int v = 0; v < 2; v++) {
        mp_gguf *g;
        mp_gguf_writer *w;
        CHECK(mp_gguf_open(src_gguf, &g) == MP_OK && mp_gguf_writer_new(&w) == MP_OK, "%s", mp_last_error());
        for (size_t i = 0; i < mp_gguf_n_kv(g); i++) {
            const char *k = mp_gguf_kv_key(g, i);
            if (v == 1 && strcmp(k, "general.architecture") == 0) mp_gguf_writer_set_str(w, k, "qwen2");
            else if (v == 1 && strncmp(k, "qwen3.", 6) == 0) {
                char k2[128];
                snprintf(k2, sizeof k2, "qwen2.%s", k + 6);
                mp_gguf_writer_set(w, k2, mp_gguf_kv_value(g, i));
            } else mp_gguf_writer_set(w, k, mp_gguf_kv_value(g, i));
        }
        for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
            const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
            if (v == 0 && strcmp(t->name, "blk.1.attn_k_norm.weight") == 0) continue;
            mp_gguf_writer_add_raw(w, t->name, t->type, t->n_dims, t->dims, t->data, t->n_bytes);
        }
        CHECK(mp_gguf_writer_write(w, out) == MP_OK, "%s", mp_last_error());
        mp_gguf_writer_free(w);
        mp_gguf_close(g);
        mp_model *m = NULL;
        mp_status st = mp_model_load(&m, out);
        const char *want = v == 0 ? "blk.1.attn_k_norm.weight" : "attn_q_norm";
        CHECK(st != MP_OK && !m && strstr(mp_last_error(), want), "GGUF variant %d: loaded or message \"%s\"", v,
              st ? mp_last_error() : "(loaded)");
        if (st) printf("refused: \"%s\"\n", mp_last_error());
        mp_model_free(m);
        unlink(out);
    }
}

int main(void) {
    char hf[512];
    snprintf(hf, sizeof hf, "%s", tu_data("arch_qwen3"));
    const char *gguf = tu_data("arch_qwen3.gguf"), *gold = tu_data("arch_qwen3.h5");
    golden(hf, gold, "qwen3 HF folder", "hf-qwen3");
    golden(gguf, gold, "qwen3 GGUF", "gguf-qwen3");
    norm_matters(hf, gold);
    decode(hf, "qwen3 HF folder");
    weight_grads(MP_QK_NORM_HEAD);
    weight_grads(MP_QK_NORM_FULL);
    hook_grads(hf);
    round_trips(hf);
    processing(hf);
    refusals(hf);
    return tu_finish("test_qwen3");
}
