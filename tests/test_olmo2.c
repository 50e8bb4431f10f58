/* test_olmo2.c — the OLMo 2 family (tests/olmo2.cmake; config fields
 * pre_norms = false, post_norms, qk_norm full):
 *  - golden: a tiny random olmo2 model (d_model 32, 4 heads, 2 kv heads:
 *    q norm 32 wide, k norm 16; rope_theta 5e5; every norm weight random) from
 *    a Hugging Face folder and a GGUF file written by an independent Python
 *    writer (tests/tools/make_arch_ref_olmo2.py) against its float64 PyTorch
 *    forward: every hook point it holds and the logits within TOL_REL of the
 *    tensor's largest magnitude;
 *  - the block has no ln1 / ln2: those points are refused by name, "*" fires
 *    none of them, hook_mlp_in is hook_resid_mid;
 *  - each quirk switched off moves the logits: pre-norms (weights 1) put back,
 *    the post-norms' normalization undone (their hook_scale held at 1), the
 *    q/k norm over each head instead of the whole projection (weights 1 in
 *    both), no q/k norm;
 *  - KV-cached decoding equals the prefill;
 *  - gradients: every parameter tensor against finite differences
 *    (tu_fd_model: the training backward), and the backward hooks' walk
 *    (input gradients only) at the residual, hook_mlp_in, a post-norm's output
 *    and scale and the q norm's output against directional finite differences;
 *  - fold_ln keeps the logits (ln_final alone folds; the post-norm and q/k norm
 *    weights stay);
 *  - round trips (HF folder, GGUF F32, HDF5 checkpoint) load back equal,
 *    config and logits bit for bit; a Q8_0 GGUF (kept quantized) within TOL_Q8;
 *  - refusals by name: llama2.c, attention_bias, an unsupported rope_scaling,
 *    configs without pre-norms that make no sense, writers for a block without
 *    pre-norms that is not OLMo 2's, the CUDA training step.
 * The CUDA forward against this CPU forward: test_olmo2_gpu.c. */
#include "formats.h"
#include "grad.h"
#include "h5io.h"
#include "model.h"
#include "model_io.h"
#include "mp_cuda.h"
#include "quant.h"
#include "testutil.h"
#include "tu_arch.h"
#include "weights_process.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* float32 forward vs the float64 reference: |diff| <= TOL_REL * max(1, max |ref|) per tensor */
#define TOL_REL 1e-5
/* a quirk switched off must move some logit by more than this */
#define QUIRK_MIN 1e-2
/* Q8_0 GGUF round trip, logits max |diff| (measured maxima printed; about 3x headroom) */
#define TOL_Q8 0.3
/* KV-cached decoding vs the prefill, relative to max(1, max |logit|) */
#define TOL_DECODE 1e-5

static const int TOKS[12] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33};

/* ---- golden ---- */

static void golden(const char *model_path, const char *label, const char *want_format) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    CHECK(strcmp(m->format, want_format) == 0, "%s: format %s, expected %s", label, m->format, want_format);
    CHECK(m->cfg.no_pre_norms && m->cfg.post_norms && m->cfg.qk_norm == MP_QK_NORM_FULL && !m->cfg.tied &&
              m->cfg.rope_theta == 5e5f && m->cfg.norm_eps == 1e-6f && !m->p.ln1_w && !m->p.ln2_w,
          "%s: the config read (pre_norms %d, post_norms %d, qk_norm %d, tied %d, theta %g, eps %g)", label,
          !m->cfg.no_pre_norms, m->cfg.post_norms, (int)m->cfg.qk_norm, m->cfg.tied, (double)m->cfg.rope_theta,
          (double)m->cfg.norm_eps);
    /* every point and the logits relative to max(1, max |ref|); the post-norm and q/k norm points counted */
    const tu_golden_opts o = {.tol_rel = TOL_REL, .rel_floor = 1.0, .logits_rel = TOL_REL,
                              .count = {"_post.hook_", "_norm.hook_normalized"}};
    tu_capture cap = {0};
    tu_golden_result r = tu_golden(m, tu_data("arch_olmo2.h5"), label, &o, &cap);
    CHECK(r.counted[0] == 4 * m->cfg.n_layer && r.counted[1] == 2 * m->cfg.n_layer,
          "%s: %d post-norm and %d q/k norm points compared", label, r.counted[0], r.counted[1]);
    /* no ln1 / ln2 point fired */
    for (int i = 0; i < cap.n; i++)
        CHECK(!strstr(cap.name[i], ".ln1.") && !strstr(cap.name[i], ".ln2."), "%s: %s fired", label, cap.name[i]);
    tu_capture_free(&cap);
    mp_model_free(m);
}

/* ---- the absent points ---- */

static void absent_points(void) {
    mp_model *m = tu_load(tu_data("arch_olmo2"));
    if (!m) return;
    const char *names[] = {"blocks.0.ln1.hook_normalized", "blocks.1.ln1.hook_scale", "blocks.0.ln2.hook_normalized",
                           "blocks.1.ln2.hook_scale"};
    tu_capture cap = {0};
    for (int k = 0; k < 4; k++) {
        mp_hooks *hs = mp_hooks_new(&m->cfg);
        CHECK(mp_hooks_add(hs, names[k], tu_capture_cb, &cap) == MP_ERR_ARG && strstr(mp_last_error(), names[k]) &&
                  strstr(mp_last_error(), "pre_norms = false"),
              "%s accepted on a block without pre-norms: %s", names[k], mp_last_error());
        mp_hooks_free(hs);
    }
    printf("no pre-norms, %s: \"%s\"\n", names[3], mp_last_error());
    /* hook_mlp_in is the MLP's own input: hook_resid_mid */
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "blocks.*.hook_mlp_in,blocks.*.hook_resid_mid", tu_capture_cb, &cap) == MP_OK, "%s",
          mp_last_error());
    free(tu_forward(m, TOKS, 12, hs));
    mp_hooks_free(hs);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        char a[64], b[64];
        size_t na, nb;
        snprintf(a, sizeof a, "blocks.%d.hook_mlp_in", l), snprintf(b, sizeof b, "blocks.%d.hook_resid_mid", l);
        const float *x = tu_capture_get(&cap, a, &na), *y = tu_capture_get(&cap, b, &nb);
        CHECK(x && y && na == nb && memcmp(x, y, na * sizeof(float)) == 0, "layer %d: hook_mlp_in != resid_mid", l);
    }
    tu_capture_free(&cap);
    mp_model_free(m);
}

/* ---- each quirk switched off changes the logits ---- */

/* A model of config c with m's parameters, by name (the ones m lacks: norm weights 1, else 0; with
 * `unit_qk`, the q/k norm weights 1 too). */
static mp_model *recast(const mp_model *m, const mp_config *c, int unit_qk) {
    mp_model *b = NULL;
    if (mp_model_new(&b, c) != MP_OK) {
        CHECK(0, "recast: %s", mp_last_error());
        return NULL;
    }
    mp_param_desc src[MP_PARAM_MAX], dst[MP_PARAM_MAX];
    const int ns = mp_params_describe(&m->cfg, &m->p, src), nd = mp_params_describe(c, &b->p, dst);
    for (int j = 0; j < nd; j++) {
        const int qk = strstr(dst[j].name, "_norm.weight") != NULL;
        int found = 0;
        for (int i = 0; i < ns && !found && !(qk && unit_qk); i++)
            if (strcmp(src[i].name, dst[j].name) == 0 && src[i].n == dst[j].n) {
                memcpy(dst[j].p, src[i].p, src[i].n * sizeof(float));
                found = 1;
            }
        if (!found && strstr(dst[j].name, ".weight") && dst[j].ndim == 1)
            for (size_t i = 0; i < dst[j].n; i++) dst[j].p[i] = 1.0f;
    }
    return b;
}

/* forward hook: a norm's scale held at 1 (the normalization undone, the weight kept) */
static int unit_scale(void *user, const mp_hook_info *info, float *data) {
    (void)user;
    for (size_t i = 0; i < info->numel; i++) data[i] = 1.0f;
    return 0;
}

static double logits_off(const mp_model *m, const float *ref, const mp_hooks *hs) {
    float *logits = tu_forward(m, TOKS, 12, hs);
    const double d = tu_max_abs_diff(logits, ref, (size_t)12 * m->cfg.vocab);
    free(logits);
    return d;
}

static void quirks_off(void) {
    mp_model *m = tu_load(tu_data("arch_olmo2"));
    if (!m) return;
    float *ref = tu_forward(m, TOKS, 12, NULL);
    /* pre-norms put back (RMSNorms of weight 1 before attention and MLP) */
    mp_config c = m->cfg;
    c.no_pre_norms = 0;
    mp_model *b = recast(m, &c, 0);
    const double d_pre = b ? logits_off(b, ref, NULL) : 0;
    mp_model_free(b);
    /* the post-norms' normalization undone: ln1_post / ln2_post scales held at 1 */
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "blocks.*.ln1_post.hook_scale,blocks.*.ln2_post.hook_scale", unit_scale, NULL) == MP_OK,
          "%s", mp_last_error());
    const double d_post = logits_off(m, ref, hs);
    mp_hooks_free(hs);
    /* the q/k norm per head instead of over the whole projection (weights 1 in both: the grouping alone) */
    mp_config cf = m->cfg, ch = m->cfg;
    ch.qk_norm = MP_QK_NORM_HEAD;
    mp_model *full = recast(m, &cf, 1), *head = recast(m, &ch, 1);
    float *lf = full ? tu_forward(full, TOKS, 12, NULL) : NULL;
    const double d_head = lf && head ? logits_off(head, lf, NULL) : 0;
    free(lf);
    mp_model_free(full);
    mp_model_free(head);
    /* no q/k norm */
    c = m->cfg;
    c.qk_norm = MP_QK_NORM_NONE;
    b = recast(m, &c, 0);
    const double d_qk = b ? logits_off(b, ref, NULL) : 0;
    mp_model_free(b);
    CHECK(d_pre > QUIRK_MIN && d_post > QUIRK_MIN && d_head > QUIRK_MIN && d_qk > QUIRK_MIN,
          "quirks off: pre-norms %.3g, post-norm scale 1 %.3g, q/k norm per head %.3g, no q/k norm %.3g", d_pre,
          d_post, d_head, d_qk);
    printf("olmo2 quirks off, logits max |diff|: pre-norms put back %.3g; post-norms' scale 1 %.3g; q/k norm per "
           "head (weights 1) %.3g; no q/k norm %.3g\n", d_pre, d_post, d_head, d_qk);
    free(ref);
    mp_model_free(m);
}

/* ---- decoding with the KV cache equals the prefill ---- */

static void decode_equals_prefill(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    tu_decode_vs_prefill(m, TOKS, 12, 5, NULL, TOL_DECODE, 1.0, 0, label);
    mp_model_free(m);
}

/* ---- gradients ---- */

static void grad_fd(void) {
    mp_model *m = tu_load(tu_data("arch_olmo2"));
    if (!m) return;
    int tgt[10] = {17, 42, 5, 5, 63, 0, 28, 11, 50, 7};
    tu_fd_result r = tu_fd_model("olmo2 fd", m, TOKS, tgt, 1, 10, 1e-2f, 6, 0, 4242);
    printf("olmo2: %d parameter entries vs finite differences, worst |err|/tol %.2f (loss %.4f)\n", r.checked,
           r.worst, (double)r.loss);
    CHECK(r.checked > 50, "olmo2: only %d entries checked", r.checked);
    mp_model_free(m);
}

static void staged_grad(void) {
    mp_model *m = tu_load(tu_data("arch_olmo2"));
    if (!m) return;
    /* the residual at three depths (the projections read it unnormed), the MLP's own input, a post-norm's
     * output and scale (the norm's hooked two-step path), the q norm's output (D = H*Dh wide) */
    const char *points[] = {"hook_embed", "blocks.1.hook_resid_pre", "blocks.0.hook_resid_mid",
                            "blocks.1.hook_mlp_in", "blocks.0.ln1_post.hook_normalized",
                            "blocks.1.ln2_post.hook_scale", "blocks.0.attn.q_norm.hook_normalized"};
    tu_staged_grad(m, TOKS, 10, points, 7, "olmo2");
    mp_model_free(m);
}

/* ---- weight processing ---- */

static void fold_ln(void) {
    mp_model *m = tu_load(tu_data("arch_olmo2"));
    if (!m) return;
    const mp_config *c = &m->cfg;
    const size_t LD = (size_t)c->n_layer * c->d_model, LQ = (size_t)c->n_layer * c->n_head * c->d_head;
    float *before = tu_forward(m, TOKS, 8, NULL);
    float *p1 = malloc(LD * sizeof(float)), *q1 = malloc(LQ * sizeof(float));
    memcpy(p1, m->p.ln1p_w, LD * sizeof(float));
    memcpy(q1, m->p.q_norm, LQ * sizeof(float));
    CHECK(mp_weights_process(m, MP_WP_FOLD_LN) == MP_OK, "olmo2: fold_ln: %s", mp_last_error());
    float *after = tu_forward(m, TOKS, 8, NULL);
    const double d = tu_max_abs_diff(before, after, (size_t)8 * m->cfg.vocab);
    CHECK(d <= 1e-4, "olmo2: fold_ln changes the logits by %.3g", d);
    int unit = 1;
    for (int i = 0; i < c->d_model; i++) unit &= m->p.lnf_w[i] == 1.0f;
    CHECK(unit, "olmo2: fold_ln left ln_final's weight");
    CHECK(memcmp(p1, m->p.ln1p_w, LD * sizeof(float)) == 0 && memcmp(q1, m->p.q_norm, LQ * sizeof(float)) == 0,
          "olmo2: fold_ln changed a post-norm or q norm weight");
    CHECK(mp_weights_process(m, MP_WP_CENTER_WRITING) == MP_ERR_ARG && strstr(mp_last_error(), "RMSNorm"),
          "olmo2: center_writing_weights: %s", mp_last_error());
    printf("olmo2: fold_ln (ln_final alone): logits max |diff| %.2e\n", d);
    free(p1);
    free(q1);
    free(before);
    free(after);
    mp_model_free(m);
}

/* ---- round trips ---- */

static void round_trip(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    tu_round_trips(m, "olmo2", label, TOKS, 8, TOL_Q8);
    mp_model_free(m);
}

static const char *tmp_path(const char *name) { return tu_tmp_path("olmo2", name); }

/* A folder with olmo2's weights and config.json with `from` replaced by `to`. */
static const char *variant_folder(const char *name, const char *from, const char *to) {
    return tu_variant_of("arch_olmo2", tmp_path(name), from, to);
}

/* ---- refusals ---- */

static void refusals(void) {
    mp_model *m = tu_load(tu_data("arch_olmo2"));
    if (!m) return;
    const char *l2c = tmp_path("x.bin");
    CHECK(mp_model_save_llama2c(m, l2c, 1) == MP_ERR_ARG && strstr(mp_last_error(), "pre_norms"),
          "llama2.c save: %s", mp_last_error());
    CHECK(access(l2c, F_OK) != 0, "llama2.c refusal left %s", l2c);
    /* the CUDA backend runs the forward (test_olmo2_gpu_emu); its training step names what it lacks */
    CHECK(mp_cuda_check_model(&m->cfg, MP_PRECISION_FP32) == MP_OK, "cuda check: %s", mp_last_error());
    const char *why = mp_cuda_train_gemma(&m->cfg);
    CHECK(why && strstr(why, "OLMo 2") && strstr(why, "pre_norms"), "cuda training: %s", why ? why : "(none)");
    /* configs without pre-norms that make no sense */
    mp_config c = m->cfg;
    c.post_norms = 0;
    CHECK(mp_config_validate(&c, "cfg") == MP_ERR_FORMAT && strstr(mp_last_error(), "pre_norms = false") &&
              strstr(mp_last_error(), "post_norms"), "no norm at all: %s", mp_last_error());
    c = m->cfg;
    c.parallel_attn = 1;
    CHECK(mp_config_validate(&c, "cfg") == MP_ERR_FORMAT && strstr(mp_last_error(), "parallel_attn"),
          "parallel block without pre-norms: %s", mp_last_error());
    /* a block without pre-norms that is not OLMo 2's (here with Gemma's (1 + w) norms) has no HF / GGUF form */
    m->cfg.norm_offset = 1;
    const char *hf = tmp_path("mixed"), *gg = tmp_path("mixed.gguf");
    CHECK(mp_model_save_hf(m, hf) == MP_ERR_ARG && strstr(mp_last_error(), "pre_norms = false"), "HF mixed: %s",
          mp_last_error());
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_ERR_ARG && strstr(mp_last_error(), "pre_norms = false"),
          "GGUF mixed: %s", mp_last_error());
    CHECK(access(gg, F_OK) != 0, "GGUF refusal left %s", gg);
    rmdir(hf);
    mp_model_free(m);
    /* config.json asking for what is not implemented */
    const char *d1 = variant_folder("ab", "\"attention_bias\": false", "\"attention_bias\": true");
    tu_expect_load_fail(d1, "attention_bias", "config.json", "attention_bias is not supported for olmo2");
    tu_rm_tree(d1);
    const char *d2 = variant_folder("rs", "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", "
                                    "\"factor\": 2.0}");
    tu_expect_load_fail(d2, "rope_scaling yarn", "config.json", "rope_scaling type \"yarn\"");
    tu_rm_tree(d2);
    const char *d3 = variant_folder("act", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"");
    tu_expect_load_fail(d3, "hidden_act gelu", "config.json", "hidden_act \"gelu\"");
    tu_rm_tree(d3);
    /* linear rope_scaling is read (as llama's) */
    const char *d4 = variant_folder("rl", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\", "
                                    "\"factor\": 2.0}");
    mp_model *w = NULL;
    CHECK(mp_model_load(&w, d4) == MP_OK && w->cfg.rope_scale == 2.0f, "olmo2 linear rope_scaling: %s",
          w ? "wrong rope_scale" : mp_last_error());
    mp_model_free(w);
    tu_rm_tree(d4);
    /* transformers v5's rope_parameters in place of rope_theta / rope_scaling: its theta and its scaling are read
     * (before, a config of that form ran with the default theta 10000) */
    const char *d5 = variant_folder("rp", "\"rope_theta\": 500000.0,", "\"rope_parameters\": {\"rope_type\": "
                                    "\"linear\", \"factor\": 3.0, \"rope_theta\": 500000.0},");
    w = NULL;
    CHECK(mp_model_load(&w, d5) == MP_OK && w->cfg.rope_theta == 5e5f && w->cfg.rope_scale == 3.0f,
          "olmo2 rope_parameters: %s", w ? "wrong rope_theta / rope_scale" : mp_last_error());
    mp_model_free(w);
    tu_rm_tree(d5);
}

int main(void) {
    golden(tu_data("arch_olmo2"), "olmo2 HF", "hf-olmo2");
    golden(tu_data("arch_olmo2.gguf"), "olmo2 GGUF", "gguf-olmo2");
    absent_points();
    quirks_off();
    decode_equals_prefill(tu_data("arch_olmo2"), "olmo2");
    decode_equals_prefill(tu_data("arch_olmo2.gguf"), "olmo2 GGUF");
    grad_fd();
    staged_grad();
    fold_ln();
    round_trip(tu_data("arch_olmo2"), "olmo2");
    round_trip(tu_data("arch_olmo2.gguf"), "olmo2 (from GGUF)");
    refusals();
    return tu_finish("test_olmo2");
}
