/* test_neox.c — the GPT-NeoX (Pythia) and Phi-3 families:
 *  - golden: small random models with every quirk on (tests/tools/make_arch_ref_neox.py,
 *    make_arch_ref_phi3.py: parallel residual, rotary_pct 0.25 of a 16-channel head,
 *    fused per-head query_key_value, biases and norm weights random, exact GELU; Phi-3's
 *    fused qkv_proj / gate_up_proj, GQA, partial rotary 0.5), as Hugging Face folders and
 *    GGUF files written by independent Python writers, against float64 PyTorch forwards
 *    written from the published modeling code: every hook point within TOL, the logits and
 *    every block's hook_resid_post within RTOL of the tensor's scale; the serial NeoX block
 *    (use_parallel_residual false) likewise;
 *  - each quirk switched off (parallel residual, partial rotation, rotary base, exact GELU,
 *    biases, gate/up order) moves the logits away from the golden ones;
 *  - a parallel block has no hook_resid_mid (TransformerLens's parallel_attn_mlp), its hook_mlp_in
 *    is hook_resid_pre and hook_resid_post = resid_pre + attn_out + mlp_out;
 *  - KV-cached decoding equals the prefill;
 *  - the parallel block's gradients: weights against finite differences of the loss, and
 *    the backward hooks' input gradients (hook_resid_pre, hook_mlp_in) against finite
 *    differences of a metric under a forward edit;
 *  - round trips through mechprobe's HF and GGUF writers (F32 exact; Q8_0 within TOL_Q8, read back as
 *    float32), the HDF5 checkpoint, llama2.c's refusal;
 *  - refusals by name of what is not implemented (Phi-3 LongRoPE, a sliding window below
 *    the context, other activations, an odd rotary count, GGUF sliding window). */
#include "formats.h"
#include "gguf.h"
#include "grad.h"
#include "h5io.h"
#include "model.h"
#include "model_io.h"
#include "testutil.h"
#include "tu_arch.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOL 1e-4  /* every hook point: max |diff| (values of order 1-10) */
#define RTOL 1e-5 /* logits and each hook_resid_post: max |diff| / max |ref| */
#define TOL_Q8 5e-1 /* a Q8_0 round trip, max |diff| over logits and hooks (test_models.c's bound) */

static const char *tmp_path(const char *name) { return tu_tmp_path("neox", name); }

/* ---- golden ---- */

/* Every hook point against the golden file (TOL), the logits and each block's resid_post (RTOL). */
static void golden(const mp_model *m, const char *golden_path, const char *label) {
    const tu_golden_opts o = {.tol_abs = TOL, .tol_rel = RTOL, .rel_only = "hook_resid_post", .logits_rel = RTOL,
                              .all_compared = 1};
    tu_golden(m, golden_path, label, &o, NULL);
}

/* max |logits - golden logits| / scale, without hooks */
static double logits_off(const mp_model *m, const tu_golden_ref *g) {
    float *l = tu_run_captured(m, (int *)g->toks, g->T, NULL);
    double d = tu_rel_diff(l, g->logits, g->n_logits, 0.0);
    free(l);
    return d;
}

/* A copy of arch_neox's weights with a config.json of our own. */
static const char *neox_dir(const char *name, const char *cfg_json) {
    return tu_model_dir(tmp_path(name), tu_data("arch_neox/model.safetensors"), cfg_json);
}

#define NEOX_CFG(extra)                                                                                             \
    "{\"model_type\": \"gpt_neox\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "    \
    "\"intermediate_size\": 96, \"vocab_size\": 64, \"max_position_embeddings\": 32, \"rotary_emb_base\": 500.0, "   \
    "\"layer_norm_eps\": 1e-05, \"tie_word_embeddings\": false" extra "}"

static void goldens(void) {
    mp_model *m;
    if ((m = tu_load(tu_data("arch_neox")))) {
        CHECK(!strcmp(m->format, "hf-gpt_neox") && m->cfg.parallel_attn && m->cfg.pos == MP_POS_HALF_ROPE &&
                  m->cfg.rope_dims == 4 && !m->cfg.gelu_tanh && m->cfg.norm == MP_NORM_LAYER && !m->cfg.tied,
              "neox config: format %s parallel %d pos %d rope_dims %d", m->format, m->cfg.parallel_attn, m->cfg.pos,
              m->cfg.rope_dims);
        golden(m, tu_data("arch_neox.h5"), "gpt_neox HF folder (parallel)");
        mp_model_free(m);
    }
    if ((m = tu_load(tu_data("arch_neox.gguf")))) {
        CHECK(!strcmp(m->format, "gguf-gptneox") && m->cfg.parallel_attn && m->cfg.rope_dims == 4, "gguf neox config");
        golden(m, tu_data("arch_neox.h5"), "gptneox GGUF (parallel)");
        mp_model_free(m);
    }
    const char *dir =
        neox_dir("serial", NEOX_CFG(", \"rotary_pct\": 0.25, \"use_parallel_residual\": false, \"hidden_act\": \"gelu\""));
    if ((m = tu_load(dir))) {
        CHECK(!m->cfg.parallel_attn, "use_parallel_residual false read");
        golden(m, tu_data("arch_neox_serial.h5"), "gpt_neox HF folder (serial)");
        mp_model_free(m);
    }
    tu_rm_tree(dir);
    if ((m = tu_load(tu_data("arch_phi3")))) {
        CHECK(!strcmp(m->format, "hf-phi3") && m->cfg.pos == MP_POS_HALF_ROPE && m->cfg.rope_dims == 4 &&
                  m->cfg.n_kv_head == 2 && !m->cfg.parallel_attn,
              "phi3 config");
        golden(m, tu_data("arch_phi3.h5"), "phi3 HF folder");
        mp_model_free(m);
    }
    if ((m = tu_load(tu_data("arch_phi3.gguf")))) {
        CHECK(!strcmp(m->format, "gguf-phi3"), "gguf phi3 format %s", m->format);
        golden(m, tu_data("arch_phi3.h5"), "phi3 GGUF");
        mp_model_free(m);
    }
}

/* ---- each quirk off changes the output ---- */

static void quirks_off(void) {
    tu_golden_ref g;
    mp_model *m = tu_load(tu_data("arch_neox"));
    if (!m || !tu_read_golden(tu_data("arch_neox.h5"), &g)) { mp_model_free(m); return; }
    const mp_config c0 = m->cfg;
    double base = logits_off(m, &g);
    CHECK(base <= RTOL, "neox baseline %.3g", base);
    struct { const char *what; double d; } r[8];
    int k = 0;
    m->cfg.parallel_attn = 0;
    r[k].what = "serial block instead of parallel", r[k++].d = logits_off(m, &g);
    m->cfg = c0;
    m->cfg.pos = MP_POS_ROPE, m->cfg.rope_dims = 0;
    r[k].what = "full rotation instead of rotary_pct 0.25", r[k++].d = logits_off(m, &g);
    m->cfg = c0;
    m->cfg.pos = MP_POS_NONE, m->cfg.rope_dims = 0;
    r[k].what = "no rotation", r[k++].d = logits_off(m, &g);
    m->cfg = c0;
    m->cfg.rope_theta = 10000.0f;
    r[k].what = "rotary_emb_base 10000 instead of 500", r[k++].d = logits_off(m, &g);
    m->cfg = c0;
    m->cfg.gelu_tanh = 1;
    r[k].what = "tanh GELU instead of exact", r[k++].d = logits_off(m, &g);
    m->cfg = c0;
    const size_t nb = (size_t)c0.n_layer * c0.d_model;
    float *save = malloc(nb * sizeof(float));
    memcpy(save, m->p.bq, nb * sizeof(float));
    memset(m->p.bq, 0, nb * sizeof(float));
    r[k].what = "no query bias", r[k++].d = logits_off(m, &g);
    memcpy(m->p.bq, save, nb * sizeof(float));
    memcpy(save, m->p.ln2_b, nb * sizeof(float));
    memset(m->p.ln2_b, 0, nb * sizeof(float));
    r[k].what = "no MLP LayerNorm bias", r[k++].d = logits_off(m, &g);
    memcpy(m->p.ln2_b, save, nb * sizeof(float));
    free(save);
    CHECK(logits_off(m, &g) == base, "restored");
    for (int i = 0; i < k; i++) {
        /* the smallest change, exact vs tanh GELU, is still 10x the tolerance */
        CHECK(r[i].d > 10 * RTOL, "neox, %s: logits moved only %.3g of scale", r[i].what, r[i].d);
        printf("neox, %s: logits move %.2e of scale\n", r[i].what, r[i].d);
    }
    tu_golden_ref_free(&g);
    mp_model_free(m);

    if (!(m = tu_load(tu_data("arch_phi3"))) || !tu_read_golden(tu_data("arch_phi3.h5"), &g)) {
        mp_model_free(m);
        return;
    }
    const mp_config c1 = m->cfg;
    m->cfg.pos = MP_POS_ROPE, m->cfg.rope_dims = 0;
    double d1 = logits_off(m, &g);
    m->cfg = c1;
    const size_t nm = (size_t)c1.n_layer * c1.d_mlp * c1.d_model;
    float *t = m->p.w1;
    m->p.w1 = m->p.w3, m->p.w3 = t;
    double d2 = logits_off(m, &g);
    m->p.w3 = m->p.w1, m->p.w1 = t;
    (void)nm;
    CHECK(d1 > 10 * RTOL && d2 > 10 * RTOL, "phi3: full rotation %.3g, gate/up swapped %.3g", d1, d2);
    printf("phi3, full rotation instead of partial_rotary_factor 0.5: %.2e; gate and up swapped: %.2e\n", d1, d2);
    tu_golden_ref_free(&g);
    mp_model_free(m);
}

/* ---- hook_resid_mid: absent from a parallel block ---- */

static void resid_mid(void) {
    mp_model *m = tu_load(tu_data("arch_neox"));
    if (!m) return;
    tu_capture cap = {0};
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "blocks.0.hook_resid_mid", tu_capture_cb, &cap) != MP_OK,
          "a parallel block accepted hook_resid_mid");
    printf("parallel block, blocks.0.hook_resid_mid: \"%s\"\n", mp_last_error());
    mp_hooks_free(hs);
    /* its hook_mlp_in is the MLP norm's copy of hook_resid_pre; hook_resid_post = resid_pre + attn_out + mlp_out */
    static tu_capture all;
    memset(&all, 0, sizeof all);
    int toks[5] = {1, 9, 4, 33, 2};
    free(tu_run_captured(m, toks, 5, &all));
    for (int l = 0; l < m->cfg.n_layer; l++) {
        char a[64], b[64], o[64], p[64];
        size_t na, nb, no, np;
        snprintf(a, sizeof a, "blocks.%d.hook_resid_pre", l), snprintf(b, sizeof b, "blocks.%d.hook_mlp_in", l);
        snprintf(o, sizeof o, "blocks.%d.hook_attn_out", l), snprintf(p, sizeof p, "blocks.%d.hook_mlp_out", l);
        const float *pre = tu_capture_get(&all, a, &na), *in = tu_capture_get(&all, b, &nb);
        const float *ao = tu_capture_get(&all, o, &no), *mo = tu_capture_get(&all, p, &np);
        snprintf(a, sizeof a, "blocks.%d.hook_resid_post", l);
        const float *post = tu_capture_get(&all, a, &na);
        CHECK(pre && in && ao && mo && post && nb == na, "layer %d: points captured", l);
        if (!(pre && in && ao && mo && post && nb == na)) continue;
        CHECK(memcmp(pre, in, na * sizeof(float)) == 0, "layer %d: hook_mlp_in is not hook_resid_pre", l);
        double d = 0;
        for (size_t i = 0; i < na; i++) d = fmax(d, fabs((double)pre[i] + ao[i] + mo[i] - post[i]));
        CHECK(d < 1e-5, "layer %d: resid_post - (resid_pre + attn_out + mlp_out) = %.3g", l, d);
    }
    tu_capture_free(&all);
    m->cfg.parallel_attn = 0;
    hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "blocks.0.hook_resid_mid", tu_capture_cb, &cap) == MP_OK, "serial: %s", mp_last_error());
    mp_hooks_free(hs);
    mp_model_free(m);
}

/* ---- decoding over a KV cache equals the prefill ---- */

static void decode(const char *path, const char *label) {
    mp_model *m = tu_load(path);
    if (!m) return;
    const int V = m->cfg.vocab, T = 14;
    int toks[14];
    for (int i = 0; i < T; i++) toks[i] = (i * 13 + 5) % V;
    /* every token through the cache, each row within RTOL of its own scale */
    tu_decode_vs_prefill(m, toks, T, 0, NULL, RTOL, 0.0, 1, label);
    mp_model_free(m);
}

/* ---- the parallel block's gradients ---- */

static mp_config neox_config(void) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = 2; c.d_head = 8; c.d_mlp = 24;
    c.vocab = 20; c.ctx = 8; c.tied = 0;
    c.norm = MP_NORM_LAYER; c.mlp = MP_MLP_GELU; c.pos = MP_POS_HALF_ROPE; c.rope_dims = 4;
    c.qkv_bias = c.linear_bias = 1; c.parallel_attn = 1;
    return c;
}

static void weight_grads(void) {
    mp_config c = neox_config();
    mp_model *m;
    CHECK(mp_model_new_random(&m, &c, 5, 0.3f) == MP_OK, "%s", mp_last_error());
    /* random norm weights and biases: a wrong branch cannot hide behind ones and zeros */
    for (int i = 0; i < c.n_layer * c.d_model; i++) {
        m->p.ln1_w[i] = 1.0f + 0.3f * sinf(1.7f * i), m->p.ln2_w[i] = 1.0f + 0.3f * cosf(2.3f * i);
        m->p.ln1_b[i] = 0.2f * sinf(0.9f * i), m->p.ln2_b[i] = 0.2f * cosf(1.3f * i);
    }
    const int B = 2, T = 6;
    int toks[12], tg[12];
    for (int i = 0; i < B * T; i++) { toks[i] = (i * 7 + 3) % c.vocab; tg[i] = (i * 5 + 1) % c.vocab; }
    mp_grads G;
    if (!tu_param_grads(m, toks, tg, B, T, &G)) { mp_model_free(m); return; }
    const size_t LD = (size_t)c.n_layer * c.d_model, LHD = LD * c.d_model;
    struct { const char *name; float *p, *g; size_t n; } ps[] = {
        {"ln1_w", m->p.ln1_w, G.g.ln1_w, LD}, {"ln1_b", m->p.ln1_b, G.g.ln1_b, LD},
        {"ln2_w", m->p.ln2_w, G.g.ln2_w, LD}, {"ln2_b", m->p.ln2_b, G.g.ln2_b, LD},
        {"wq", m->p.wq, G.g.wq, LHD},         {"bk", m->p.bk, G.g.bk, LD},
        {"bo", m->p.bo, G.g.bo, LD},          {"w1", m->p.w1, G.g.w1, (size_t)c.n_layer * c.d_mlp * c.d_model},
        {"b2", m->p.b2, G.g.b2, LD},          {"embed", m->p.embed, G.g.embed, (size_t)c.vocab * c.d_model}};
    double worst = 0;
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++)
        for (size_t i = 0; i < ps[k].n; i += ps[k].n / 7 + 1) {
            const float h = 1e-2f;
            double fd = tu_fd_loss(m, toks, tg, B, T, &ps[k].p[i], h), an = ps[k].g[i];
            double err = tu_fd_rel_err(fd, an);
            CHECK(err < 2e-2, "parallel grad %s[%zu]: analytic %.5g, finite difference %.5g", ps[k].name, i, an, fd);
            worst = fmax(worst, err);
        }
    printf("parallel block, weight gradients vs finite differences: worst relative error %.2e\n", worst);
    mp_grads_free(&G);
    mp_model_free(m);
}

/* Backward hooks: d metric / d (hook_resid_pre of block 0, hook_mlp_in of block 1) against finite
 * differences, the metric sum(logits * W), the activation edited by a forward hook. */

static void hook_grads(void) {
    mp_config c = neox_config();
    mp_model *m;
    CHECK(mp_model_new_random(&m, &c, 8, 0.3f) == MP_OK, "%s", mp_last_error());
    const int T = 6;
    int toks[6];
    for (int i = 0; i < T; i++) toks[i] = (i * 3 + 2) % c.vocab;
    const size_t nl = (size_t)T * c.vocab;
    float *W = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++) W[i] = sinf(0.37f * (float)i);
    mp_acts A;
    CHECK(mp_acts_init(&A, &c, 1, T) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.acts = &A;
    float *logits = malloc(nl * sizeof(float));
    CHECK(mp_model_forward(m, toks, 1, T, &fp, logits) == MP_OK, "%s", mp_last_error());
    static tu_capture cap;
    memset(&cap, 0, sizeof cap);
    mp_hooks *bwd = mp_hooks_new(&c);
    CHECK(mp_hooks_add(bwd, "blocks.0.hook_resid_pre", tu_capture_cb, &cap) == MP_OK &&
              mp_hooks_add(bwd, "blocks.1.hook_mlp_in", tu_capture_cb, &cap) == MP_OK,
          "%s", mp_last_error());
    CHECK(mp_model_backward_acts(m, &A, W, bwd) == MP_OK, "%s", mp_last_error());
    const char *pts[2] = {"blocks.0.hook_resid_pre", "blocks.1.hook_mlp_in"};
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        size_t n;
        const float *gr = tu_capture_get(&cap, pts[k], &n);
        CHECK(gr && n == (size_t)T * c.d_model, "gradient at %s", pts[k]);
        if (!gr) continue;
        for (size_t i = 0; i < n; i += n / 9 + 1) {
            double fd = (tu_nudged_metric(m, toks, 1, T, W, pts[k], i, 1e-2f) -
                         tu_nudged_metric(m, toks, 1, T, W, pts[k], i, -1e-2f)) / 2e-2;
            double err = tu_fd_rel_err(fd, gr[i]);
            CHECK(err < 2e-2, "parallel %s grad[%zu]: backward %.5g, finite difference %.5g", pts[k], i, gr[i], fd);
            worst = fmax(worst, err);
        }
    }
    printf("parallel block, backward hooks (hook_resid_pre, hook_mlp_in) vs finite differences: worst %.2e\n", worst);
    mp_hooks_free(bwd);
    tu_capture_free(&cap);
    mp_acts_free(&A);
    free(logits);
    free(W);
    mp_model_free(m);
}

/* ---- round trips through mechprobe's writers ---- */

static void round_trip(const char *src, const char *hf_type, const char *arch) {
    mp_model *m = tu_load(src);
    if (!m) return;
    int toks[16];
    for (int i = 0; i < 16; i++) toks[i] = (i * 37 + 5) % m->cfg.vocab;
    const char *dir = tmp_path("rt_hf"), *gg = tmp_path("rt.gguf");
    CHECK(mp_model_save_hf(m, dir) == MP_OK, "%s -> HF: %s", src, mp_last_error());
    char p[600], want[64];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "r");
    char text[4096] = "";
    if (f) { text[fread(text, 1, sizeof text - 1, f)] = '\0'; fclose(f); }
    snprintf(want, sizeof want, "\"model_type\": \"%s\"", hf_type);
    CHECK(strstr(text, want) != NULL, "%s -> HF: config.json lacks %s", src, want);
    mp_model *r = tu_load(dir);
    if (r) {
        double d = tu_compare_models(m, r, toks, 16, src);
        CHECK(d == 0.0 && r->cfg.parallel_attn == m->cfg.parallel_attn && r->cfg.rope_dims == m->cfg.rope_dims &&
                  r->cfg.pos == m->cfg.pos,
              "%s -> HF -> reload: diff %.3g or config changed", src, d);
        printf("%s -> HF folder (%s) -> reload: exact\n", m->format, hf_type);
        mp_model_free(r);
    }
    tu_rm_tree(dir);
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_OK, "%s -> GGUF: %s", src, mp_last_error());
    mp_gguf *g = NULL;
    const char *a = NULL;
    CHECK(mp_gguf_open(gg, &g) == MP_OK && mp_gguf_get_str(g, "general.architecture", &a) == MP_GGUF_FOUND &&
              a && !strcmp(a, arch),
          "%s -> GGUF: architecture %s, expected %s", src, a ? a : "?", arch);
    mp_gguf_close(g);
    if ((r = tu_load(gg))) {
        double d = tu_compare_models(m, r, toks, 16, src);
        CHECK(d == 0.0 && r->cfg.parallel_attn == m->cfg.parallel_attn && r->cfg.rope_dims == m->cfg.rope_dims,
              "%s -> GGUF -> reload: diff %.3g or config changed", src, d);
        printf("%s -> GGUF (%s) -> reload: exact\n", m->format, arch);
        mp_model_free(r);
    }
    /* quantized files of these architectures are read as float32 (their fused rows dequantised) */
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_Q8_0) == MP_OK, "%s -> Q8_0 GGUF: %s", src, mp_last_error());
    if ((r = tu_load(gg))) {
        double d = tu_compare_models(m, r, toks, 16, src);
        CHECK(!r->q && d <= TOL_Q8, "%s -> Q8_0 GGUF -> reload: quantized %d, diff %.3g", src, r->q != NULL, d);
        printf("%s -> Q8_0 GGUF (%s) -> reload as float32: max |diff| %.3g (tol %.1g)\n", m->format, arch, d, TOL_Q8);
        mp_model_free(r);
    }
    unlink(gg);
    /* HDF5 checkpoints keep parallel_attn through the config table */
    const char *ck = tmp_path("rt.h5");
    CHECK(mp_model_save(m, ck) == MP_OK, "%s", mp_last_error());
    if ((r = tu_load(ck))) {
        CHECK(tu_compare_models(m, r, toks, 16, src) == 0.0 && r->cfg.parallel_attn == m->cfg.parallel_attn,
              "%s -> checkpoint", src);
        mp_model_free(r);
    }
    unlink(ck);
    /* llama2.c cannot hold these blocks */
    const char *l2 = tmp_path("rt.bin");
    CHECK(mp_model_save_llama2c(m, l2, 1) != MP_OK, "%s written as llama2.c", src);
    printf("%s -> llama2.c: \"%s\"\n", m->format, mp_last_error());
    unlink(l2);
    mp_model_free(m);
}

/* ---- refusals by name ---- */

#define PHI3_CFG(extra)                                                                                            \
    "{\"model_type\": \"phi3\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "       \
    "\"num_key_value_heads\": 2, \"intermediate_size\": 48, \"vocab_size\": 64, \"max_position_embeddings\": 32, " \
    "\"partial_rotary_factor\": 0.5" extra "}"

static void refusals(void) {
    const char *dir = neox_dir("refuse", NEOX_CFG(", \"rotary_pct\": 0.25, \"hidden_act\": \"relu\""));
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    tu_expect_load_fail(dir, "gpt_neox hidden_act relu", "hidden_act \"relu\"", NULL);
    tu_write_file(p, NEOX_CFG(", \"rotary_pct\": 0.3")); /* int(16 * 0.3) = 4, Python's truncation */
    mp_model *m = tu_load(dir);
    CHECK(m && m->cfg.rope_dims == 4, "rotary_pct 0.3 of 16 channels: %d rotate", m ? m->cfg.rope_dims : -1);
    mp_model_free(m);
    tu_write_file(p, NEOX_CFG(", \"rotary_pct\": 0.35"));
    tu_expect_load_fail(dir, "gpt_neox rotary_pct odd", "\"rotary_pct\" 0.35 gives 5 rotary channels", NULL);
    tu_write_file(p, NEOX_CFG(", \"rotary_pct\": 0.25, \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}"));
    tu_expect_load_fail(dir, "gpt_neox rope_scaling dynamic", "rope_scaling type \"dynamic\"", NULL);
    /* Phi-3 configs next to the Phi-3 weights */
    tu_model_dir(dir, tu_data("arch_phi3/model.safetensors"),
                 PHI3_CFG(", \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1, 1], "
                          "\"short_factor\": [1, 1]}"));
    tu_expect_load_fail(dir, "phi3 LongRoPE", "rope_scaling \"longrope\"", NULL);
    tu_write_file(p, PHI3_CFG(", \"rope_scaling\": {\"type\": \"su\"}"));
    tu_expect_load_fail(dir, "phi3 su", "rope_scaling \"su\"", NULL);
    tu_write_file(p, PHI3_CFG(", \"sliding_window\": 16"));
    m = tu_load(dir); /* Phi-3's window, as Mistral's (test_swa checks the masking) */
    CHECK(m && m->cfg.sliding_window == 16, "phi3 sliding_window 16: read as %d", m ? m->cfg.sliding_window : -1);
    if (m) { /* and written back */
        const char *again = tmp_path("phi3_win");
        CHECK(mp_model_save_hf(m, again) == MP_OK, "%s", mp_last_error());
        mp_model *r = tu_load(again);
        CHECK(r && r->cfg.sliding_window == 16 && strcmp(r->format, "hf-phi3") == 0, "phi3 window round trip: %d %s",
              r ? r->cfg.sliding_window : -1, r ? r->format : "(not loaded)");
        mp_model_free(r);
        tu_rm_tree(again);
    }
    mp_model_free(m);
    tu_write_file(p, PHI3_CFG(", \"hidden_act\": \"gelu\""));
    tu_expect_load_fail(dir, "phi3 hidden_act", "hidden_act \"gelu\"", NULL);
    tu_write_file(p, PHI3_CFG(", \"sliding_window\": 32"));
    m = tu_load(dir); /* a window covering the whole context: no window in effect */
    mp_model_free(m);
    tu_rm_tree(dir);
    /* GGUF phi3 with a sliding window below the context: read */
    mp_gguf *g;
    mp_gguf_writer *w;
    const char *bad = tmp_path("bad.gguf");
    CHECK(mp_gguf_open(tu_data("arch_phi3.gguf"), &g) == MP_OK && mp_gguf_writer_new(&w) == MP_OK, "%s",
          mp_last_error());
    for (size_t i = 0; i < mp_gguf_n_kv(g); i++) {
        const char *k = mp_gguf_kv_key(g, i);
        if (!strcmp(k, "phi3.attention.sliding_window")) mp_gguf_writer_set_u32(w, k, 16);
        else mp_gguf_writer_set(w, k, mp_gguf_kv_value(g, i));
    }
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        uint64_t dims[4] = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
        mp_gguf_writer_add_raw(w, t->name, t->type, t->n_dims, dims, t->data, t->n_bytes);
    }
    CHECK(mp_gguf_writer_write(w, bad) == MP_OK, "%s", mp_last_error());
    mp_gguf_writer_free(w);
    mp_gguf_close(g);
    m = tu_load(bad);
    CHECK(m && m->cfg.sliding_window == 16, "phi3 GGUF sliding_window 16: read as %d", m ? m->cfg.sliding_window : -1);
    mp_model_free(m);
    unlink(bad);
    /* parallel_attn needs an MLP */
    mp_config c = neox_config();
    c.mlp = MP_MLP_NONE, c.d_mlp = 0;
    CHECK(mp_config_validate(&c, "cfg") != MP_OK && strstr(mp_last_error(), "parallel_attn"),
          "parallel_attn without an MLP: %s", mp_last_error());
}

/* A tied gptneox: llama.cpp's gptneox requires output.weight (check_tensor_dims: tensor 'output.weight'
 * not found, bench/gguf_llamacpp.sh), so the export writes the embedding there; it loads back untied with
 * the same logits. */
static void tied_gguf(void) {
    mp_config c = neox_config();
    c.tied = 1;
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 9, 0.3f) == MP_OK, "%s", mp_last_error());
    if (!m) return;
    const char *gg = tmp_path("tied.gguf");
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_OK, "tied gptneox -> GGUF: %s", mp_last_error());
    mp_gguf *g = NULL;
    const mp_gguf_tensor *t = NULL;
    CHECK(mp_gguf_open(gg, &g) == MP_OK && (t = mp_gguf_find_tensor(g, "output.weight")) != NULL,
          "tied gptneox GGUF has no output.weight");
    if (t) {
        float *u = malloc((size_t)c.vocab * c.d_model * sizeof(float));
        CHECK(u && mp_gguf_read_f32(g, t, u, (uint64_t)c.vocab * c.d_model) == MP_OK &&
                  memcmp(u, m->p.embed, (size_t)c.vocab * c.d_model * sizeof(float)) == 0,
              "tied gptneox GGUF: output.weight is not the embedding");
        free(u);
    }
    mp_gguf_close(g);
    mp_model *r = tu_load(gg);
    if (r) {
        int toks[8] = {1, 7, 3, 19, 0, 5, 11, 2};
        const double d = tu_compare_models(m, r, toks, 8, "tied gptneox");
        CHECK(d == 0.0 && !r->cfg.tied, "tied gptneox -> GGUF -> reload: diff %.3g, tied %d", d, r->cfg.tied);
        printf("tied gptneox -> GGUF (output.weight = embedding) -> reload: exact\n");
        mp_model_free(r);
    }
    unlink(gg);
    mp_model_free(m);
}

int main(void) {
    goldens();
    quirks_off();
    resid_mid();
    decode(tu_data("arch_neox"), "gpt_neox (parallel)");
    decode(tu_data("arch_phi3"), "phi3");
    weight_grads();
    hook_grads();
    round_trip(tu_data("arch_neox"), "gpt_neox", "gptneox");
    round_trip(tu_data("arch_phi3.gguf"), "phi3", "phi3");
    tied_gguf();
    refusals();
    return tu_finish("test_neox");
}
