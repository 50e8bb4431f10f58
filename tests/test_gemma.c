/* test_gemma.c — the Gemma (1), Gemma 2 and Gemma 3 families (tests/gemma.cmake):
 *  - golden: tiny random gemma and gemma2 models (head_dim 16 with d_model 32
 *    and 4 heads; soft caps 5 and 3; query_pre_attn_scalar 24; random norm
 *    and post-norm weights) from Hugging Face folders and GGUF files written
 *    by an independent Python writer (tests/tools/make_arch_ref_gemma.py)
 *    against its float64 PyTorch forward: every hook point it holds (every
 *    block's resid_post among them) and the logits within TOL_REL of the
 *    tensor's largest magnitude;
 *  - each quirk switched off (the (1 + w) norm, the embedding scale, GeGLU,
 *    the post-norms, both soft caps, the query scale) moves the logits away
 *    from the golden ones (so each golden comparison can fail);
 *  - KV-cached decoding equals the prefill;
 *  - gradients: every parameter tensor against finite differences
 *    (tu_fd_model: the training backward through the caps and the post-norms),
 *    and the backward hooks' staged attention (input gradients only) at
 *    hook_embed and blocks.1.hook_resid_pre against a directional finite
 *    difference of a linear functional of the logits;
 *  - fold_ln keeps the logits; center_unembed is refused under a final cap;
 *  - round trips (HF folder, GGUF F32, HDF5 checkpoint) load back equal,
 *    config and logits bit for bit; a Q8_0 GGUF (kept quantized) within TOL_Q8;
 *  - refusals by name: llama2.c, an unsupported activation, a narrow sliding
 *    window, attention biases, another model_type, mixed Gemma fields.
 * Gemma 3 (tests/tools/make_arch_ref_gemma3.py: 4 layers sliding, sliding,
 * full, sliding; window 4 < 12 tokens; the sliding layers' base 100, the
 * global ones' 1e6 with linear factor 8; random q/k norms): the golden from
 * the gemma3_text folder, both gemma3 (multimodal) tensor layouts and GGUF;
 * each of its quirks off (the sliding layers' own base, the q/k norm, the
 * layer pattern, the global scaling, the window, ...); decode == prefill past
 * the window; a padded batch == its rows alone (the gathered tables of both
 * RoPEs); gradients, fold_ln, round trips; refusals of what config.json may
 * ask and mechprobe does not run (irregular layer_types, other RoPE scaling,
 * bidirectional attention, a gemma3 folder without text_config).
 * The CUDA forward against this CPU forward: test_gemma_gpu.c. */
#include "formats.h"
#include "grad.h"
#include "h5io.h"
#include "model.h"
#include "model_io.h"
#include "mp_cuda.h"
#include "quant.h"
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

/* float32 forward vs the float64 reference: |diff| <= TOL_REL * max(1, max |ref|) per tensor */
#define TOL_REL 1e-5
/* a quirk switched off must move some logit by more than this */
#define QUIRK_MIN 1e-2
/* Q8_0 GGUF round trip, logits max |diff| (measured maxima printed; about 3x headroom) */
#define TOL_Q8 1.0
/* KV-cached decoding vs the prefill, relative to max(1, max |logit|) */
#define TOL_DECODE 1e-5

/* ---- golden ---- */

static void golden(const char *model_path, const char *golden_path, const char *label, const char *want_format) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    CHECK(strcmp(m->format, want_format) == 0, "%s: format %s, expected %s", label, m->format, want_format);
    /* every point and the logits relative to max(1, max |ref|); every block's resid_post among them */
    const tu_golden_opts o = {.tol_rel = TOL_REL, .rel_floor = 1.0, .logits_rel = TOL_REL,
                              .count = {"hook_resid_post"}};
    tu_golden_result r = tu_golden(m, golden_path, label, &o, NULL);
    CHECK(r.counted[0] == m->cfg.n_layer, "%s: %d blocks' resid_post compared", label, r.counted[0]);
    mp_model_free(m);
}

/* ---- each quirk switched off changes the logits ---- */

static void add_to_norms(mp_model *m, float v) {
    const mp_config *c = &m->cfg;
    const size_t LD = (size_t)c->n_layer * c->d_model;
    float *ws[] = {m->p.ln1_w, m->p.ln2_w, m->p.ln1p_w, m->p.ln2p_w};
    for (int k = 0; k < 4; k++)
        if (ws[k])
            for (size_t i = 0; i < LD; i++) ws[k][i] += v;
    for (int i = 0; i < c->d_model; i++) m->p.lnf_w[i] += v;
}

static void quirks_off(const char *model_path, const char *golden_path, const char *label) {
    tu_golden_ref g;
    if (!tu_read_golden(golden_path, &g)) return;
    const char *names[] = {"norm_offset", "embed_scale", "geglu", "post_norms", "attn_softcap", "final_softcap",
                           "query_pre_attn_scalar"};
    int tried = 0;
    for (int q = 0; q < 7; q++) {
        mp_model *m = tu_load(model_path);
        if (!m) break;
        mp_config *c = &m->cfg;
        int applies = 1;
        switch (q) {
        case 0: add_to_norms(m, -1.0f); break; /* x * w instead of x * (1 + w) */
        case 1: c->embed_scale = 0; break;
        case 2: c->gelu_tanh = 0; break; /* SwiGLU */
        case 3: applies = c->post_norms; c->post_norms = 0; break;
        case 4: applies = c->attn_softcap > 0.0f; c->attn_softcap = 0.0f; break;
        case 5: applies = c->final_softcap > 0.0f; c->final_softcap = 0.0f; break;
        default: applies = c->query_pre_attn_scalar > 0.0f; c->query_pre_attn_scalar = 0.0f; break;
        }
        if (applies) {
            float *logits = tu_forward(m, g.toks, g.T, NULL);
            const double d = tu_max_abs_diff(logits, g.logits, (size_t)g.T * c->vocab);
            CHECK(d > QUIRK_MIN, "%s: %s off changes the logits by only %.3g", label, names[q], d);
            printf("%s: %s off: logits max |diff| %.3g\n", label, names[q], d);
            free(logits);
            tried++;
        }
        mp_model_free(m);
    }
    CHECK(tried >= 3, "%s: %d quirks tried", label, tried);
    tu_golden_ref_free(&g);
}

/* ---- decoding with the KV cache equals the prefill ---- */

static void decode_equals_prefill(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    int toks[12] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33};
    tu_decode_vs_prefill(m, toks, 12, 5, NULL, TOL_DECODE, 1.0, 0, label);
    mp_model_free(m);
}

/* ---- gradients ---- */

static void grad_fd(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    const int B = 1, T = 10;
    int tok[10] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50}, tgt[10] = {17, 42, 5, 5, 63, 0, 28, 11, 50, 7};
    tu_fd_result r = tu_fd_model(label, m, tok, tgt, B, T, 1e-2f, 6, 0, 4242);
    printf("%s: %d parameter entries vs finite differences, worst |err|/tol %.2f (loss %.4f)\n", label, r.checked,
           r.worst, (double)r.loss);
    CHECK(r.checked > 50, "%s: only %d entries checked", label, r.checked);
    mp_model_free(m);
}

static void staged_grad(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    int toks[10] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50};
    /* the residual at three depths; a post-norm's output (the tensor hook_attn_out shows) and scale (the
     * norm's hooked two-step path, both ways) */
    const char *points[] = {"hook_embed", "blocks.1.hook_resid_pre", "blocks.0.hook_resid_mid",
                            "blocks.0.ln1_post.hook_normalized", "blocks.1.ln2_post.hook_scale",
                            "blocks.2.attn.q_norm.hook_normalized", "blocks.1.attn.k_norm.hook_normalized"};
    const int n_points = m->cfg.qk_norm != MP_QK_NORM_NONE ? 7 : 5; /* Gemma 3: a global and a sliding layer's */
    tu_staged_grad(m, toks, 10, points, n_points, label);
    mp_model_free(m);
}

/* ---- weight processing ---- */

static void fold_ln(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    int toks[8] = {3, 17, 42, 5, 5, 63, 0, 28};
    float *before = tu_forward(m, toks, 8, NULL);
    CHECK(mp_weights_process(m, MP_WP_FOLD_LN) == MP_OK, "%s: fold_ln: %s", label, mp_last_error());
    float *after = tu_forward(m, toks, 8, NULL);
    const double d = tu_max_abs_diff(before, after, (size_t)8 * m->cfg.vocab);
    CHECK(d <= 1e-4, "%s: fold_ln changes the logits by %.3g", label, d);
    printf("%s: fold_ln: logits max |diff| %.2e\n", label, d);
    if (m->cfg.final_softcap > 0.0f) {
        CHECK(mp_weights_process(m, MP_WP_CENTER_UNEMBED) == MP_ERR_ARG && strstr(mp_last_error(), "final_softcap"),
              "%s: center_unembed under a final cap: %s", label, mp_last_error());
    }
    free(before);
    free(after);
    mp_model_free(m);
}

/* ---- round trips ---- */

static const char *tmp_path(const char *name) { return tu_tmp_path("gemma", name); }

static void round_trip(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    /* Q8_0 kept quantized on load: the embedding rows decoded, then scaled */
    int toks[8] = {3, 17, 42, 5, 5, 63, 0, 28};
    tu_round_trips(m, "gemma", label, toks, 8, TOL_Q8);
    mp_model_free(m);
}

/* ---- refusals ---- */

/* A folder with gemma2's weights and config.json with `from` replaced by `to`. */
static const char *variant_folder(const char *name, const char *from, const char *to) {
    return tu_variant_of("arch_gemma2", tmp_path(name), from, to);
}

/* A folder with `src`'s weights and its config.json with `from` replaced by `to`. */
static const char *variant_of(const char *src, const char *name, const char *from, const char *to) {
    return tu_variant_of(src, tmp_path(name), from, to);
}

static void refusals(void) {
    mp_model *m = tu_load(tu_data("arch_gemma2"));
    if (!m) return;
    /* llama2.c has no Gemma form */
    const char *l2c = tmp_path("x.bin");
    CHECK(mp_model_save_llama2c(m, l2c, 1) == MP_ERR_ARG && strstr(mp_last_error(), "Gemma"),
          "llama2.c save: %s", mp_last_error());
    CHECK(access(l2c, F_OK) != 0, "llama2.c refusal left %s", l2c);
    /* the CUDA backend runs the forward (test_gemma_gpu_emu); its training step names what it lacks */
    CHECK(mp_cuda_check_model(&m->cfg, MP_PRECISION_FP32) == MP_OK, "cuda check: %s", mp_last_error());
    CHECK(mp_cuda_train_gemma(&m->cfg) != NULL, "cuda training: a Gemma quirk named");
    /* what llama.cpp's gemma / gemma2 cannot run has no GGUF form (bench/gguf_llamacpp.sh): an untied
     * unembedding (they take no output.weight: "wrong number of tensors"), a soft cap of 0 (gemma2 applies
     * both always: NaN logits) */
    const char *gu = tmp_path("llamacpp.gguf");
    const mp_config keep = m->cfg;
    for (int k = 0; k < 3; k++) {
        if (k == 0) m->cfg.tied = 0;
        else if (k == 1) m->cfg.attn_softcap = 0.0f;
        else m->cfg.final_softcap = 0.0f;
        CHECK(mp_model_save_gguf(m, NULL, gu, MP_GGML_F32) == MP_ERR_ARG &&
                  strstr(mp_last_error(), k == 0 ? "untied" : "soft caps"),
              "GGUF %s: %s", k == 0 ? "untied" : "cap 0", mp_last_error());
        CHECK(access(gu, F_OK) != 0, "GGUF refusal left %s", gu);
        m->cfg = keep;
    }
    /* a config mixing one Gemma field into a Llama has no HF / GGUF form */
    m->cfg.post_norms = 0;
    m->cfg.embed_scale = 0;
    const char *hf = tmp_path("mixed"), *gg = tmp_path("mixed.gguf");
    CHECK(mp_model_save_hf(m, hf) == MP_ERR_ARG && strstr(mp_last_error(), "Gemma fields"), "HF mixed: %s",
          mp_last_error());
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_ERR_ARG && strstr(mp_last_error(), "Gemma fields"),
          "GGUF mixed: %s", mp_last_error());
    CHECK(access(gg, F_OK) != 0, "GGUF refusal left %s", gg);
    mp_model_free(m);
    /* config.json asking for what is not implemented */
    const char *d1 = variant_folder("act", "\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"hidden_activation\": \"gelu\"");
    tu_expect_load_fail(d1, "hidden_activation gelu", "config.json", "hidden_activation \"gelu\"");
    tu_rm_tree(d1);
    const char *d2 = variant_folder("sw", "\"sliding_window\": 32", "\"sliding_window\": 16");
    { /* Gemma 2's window on every other layer (test_swa checks the masking) */
        mp_model *w = NULL;
        CHECK(mp_model_load(&w, d2) == MP_OK && w->cfg.sliding_window == 16 && w->cfg.sliding_window_pattern == 2,
              "gemma2 sliding_window 16: %s", w ? "wrong window or pattern" : mp_last_error());
        mp_model_free(w);
    }
    tu_rm_tree(d2);
    /* gemma3 (multimodal) without a text_config */
    const char *d3 = variant_folder("g3", "\"model_type\": \"gemma2\"", "\"model_type\": \"gemma3\"");
    tu_expect_load_fail(d3, "gemma3", "config.json", "text_config");
    tu_rm_tree(d3);
    const char *d4 = variant_folder("ab", "\"attention_bias\": false", "\"attention_bias\": true");
    tu_expect_load_fail(d4, "attention_bias", "config.json", "attention_bias");
    tu_rm_tree(d4);
}

/* ---- Gemma 3 ---- */

static void gemma3_quirks_off(const char *model_path, const char *golden_path, const char *label) {
    tu_golden_ref g;
    if (!tu_read_golden(golden_path, &g)) return;
    const char *names[] = {"rope_local_theta (the sliding layers' own base)", "qk_norm", "sliding_window_pattern",
                           "rope_scale (the global layers' linear factor)", "sliding_window", "post_norms",
                           "query_pre_attn_scalar", "embed_scale", "the q/k norms' (1 + w)"};
    const int n = (int)(sizeof names / sizeof names[0]);
    for (int q = 0; q < n; q++) {
        mp_model *m = tu_load(model_path);
        if (!m) break;
        mp_config *c = &m->cfg;
        const size_t LDh = (size_t)c->n_layer * c->d_head;
        switch (q) {
        case 0: c->rope_local_theta = 0.0f; break; /* the sliding layers rotate as the global ones */
        case 1: c->qk_norm = MP_QK_NORM_NONE; break;
        case 2: c->sliding_window_pattern = 0; break; /* every layer sliding: layer 2 too */
        case 3: c->rope_scale = 0.0f; break;
        case 4: c->sliding_window = 1000; break; /* wider than the tokens: the layers differ only in RoPE */
        case 5: c->post_norms = 0; break;
        case 6: c->query_pre_attn_scalar = 0.0f; break;
        case 7: c->embed_scale = 0; break;
        default:
            for (size_t i = 0; i < LDh; i++) m->p.q_norm[i] -= 1.0f, m->p.k_norm[i] -= 1.0f; /* x * w */
            break;
        }
        CHECK(mp_config_validate(c, label) == MP_OK, "%s: %s off: %s", label, names[q], mp_last_error());
        float *logits = tu_forward(m, g.toks, g.T, NULL);
        const double d = tu_max_abs_diff(logits, g.logits, (size_t)g.T * c->vocab);
        CHECK(d > QUIRK_MIN, "%s: %s off changes the logits by only %.3g", label, names[q], d);
        printf("%s: %s off: logits max |diff| %.3g\n", label, names[q], d);
        free(logits);
        mp_model_free(m);
    }
    tu_golden_ref_free(&g);
}

/* A left- and a right-padded row of a batch give the logits of each prompt run alone (the per-token tables of
 * both RoPEs gathered, ragged.c) */
static void gemma3_padded(const char *model_path, const char *label) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    const int T = 12, V = m->cfg.vocab, n1 = 9;
    int toks[24] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33, /* row 1: 3 pads, then 9 tokens */ 0, 0, 0,
                    42, 5, 5, 63, 0, 28, 11, 50, 7};
    int mask[24];
    for (int i = 0; i < 24; i++) mask[i] = i < 12 || i >= 15;
    float *batch = malloc((size_t)2 * T * V * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    fp.attn_mask = mask;
    CHECK(mp_model_forward(m, toks, 2, T, &fp, batch) == MP_OK, "%s: padded forward: %s", label, mp_last_error());
    float *row0 = tu_forward(m, toks, T, NULL), *row1 = tu_forward(m, toks + 15, n1, NULL);
    const double scale = fmax(1.0, tu_max_abs(row0, (size_t)T * V));
    double d0 = tu_max_abs_diff(batch, row0, (size_t)T * V) / scale;
    double d1 = tu_max_abs_diff(batch + (size_t)(T + 3) * V, row1, (size_t)n1 * V) / scale;
    CHECK(d0 <= 1e-5 && d1 <= 1e-5, "%s: padded batch vs alone: rows %.3g, %.3g", label, d0, d1);
    printf("%s: padded batch (left pad 3) vs each row alone: relative |diff| %.2e, %.2e\n", label, d0, d1);
    free(batch);
    free(row0);
    free(row1);
    mp_model_free(m);
}

static void gemma3_refusals(void) {
    mp_model *m = tu_load(tu_data("arch_gemma3"));
    if (m) {
        CHECK(m->cfg.rope_local_theta == 100.0f && m->cfg.rope_theta == 1e6f && m->cfg.rope_scale == 8.0f &&
                  m->cfg.sliding_window == 4 && m->cfg.sliding_window_pattern == 3 && m->cfg.qk_norm == MP_QK_NORM_HEAD,
              "gemma3 config: local %g, theta %g, scale %g, window %d, pattern %d", (double)m->cfg.rope_local_theta,
              (double)m->cfg.rope_theta, (double)m->cfg.rope_scale, m->cfg.sliding_window,
              m->cfg.sliding_window_pattern);
        CHECK(mp_cuda_train_gemma(&m->cfg) != NULL, "cuda training of gemma3: a Gemma quirk named");
        const char *l2c = tmp_path("g3.bin");
        CHECK(mp_model_save_llama2c(m, l2c, 1) == MP_ERR_ARG && strstr(mp_last_error(), "Gemma"),
              "gemma3 llama2.c save: %s", mp_last_error());
        CHECK(access(l2c, F_OK) != 0, "llama2.c refusal left %s", l2c);
        mp_model_free(m);
    }
    /* the soft caps, when a config has them (Gemma 2's; null in Gemma 3) */
    const char *d0 = variant_of("arch_gemma3", "caps", "\"attn_logit_softcapping\": null",
                                "\"attn_logit_softcapping\": 50.0");
    mp_model *w = NULL;
    CHECK(mp_model_load(&w, d0) == MP_OK && w->cfg.attn_softcap == 50.0f && w->cfg.final_softcap == 0.0f,
          "gemma3 attn_logit_softcapping 50: %s", w ? "wrong caps" : mp_last_error());
    mp_model_free(w);
    tu_rm_tree(d0);
    struct { const char *from, *to, *want; } v[] = {
        {"\"sliding_attention\",\n    \"full_attention\"", "\"full_attention\",\n    \"sliding_attention\"",
         "layer_types is not a regular pattern"},
        {"\"rope_type\": \"linear\"", "\"rope_type\": \"yarn\"", "rope_scaling type \"yarn\""},
        {"\"attention_bias\": false", "\"use_bidirectional_attention\": true", "use_bidirectional_attention"},
        {"\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"hidden_activation\": \"silu\"",
         "hidden_activation \"silu\""},
        {"\"model_type\": \"gemma3_text\"", "\"model_type\": \"gemma3\"", "text_config"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        const char *d = variant_of("arch_gemma3", "bad", v[i].from, v[i].to);
        tu_expect_load_fail(d, "gemma3 config", "config.json", v[i].want);
        tu_rm_tree(d);
    }
    const char *d1 = variant_of("arch_gemma3_mm", "mm", "\"model_type\": \"gemma3_text\"",
                                "\"model_type\": \"gemma2\"");
    tu_expect_load_fail(d1, "gemma3 text_config of another type", "config.json", "text_config");
    tu_rm_tree(d1);
    /* HF / GGUF writers: a model scaling its sliding layers too (rope_scale, no local base) has no gemma3 form */
    m = tu_load(tu_data("arch_gemma3"));
    if (m) {
        m->cfg.rope_local_theta = 0.0f;
        const char *hf = tmp_path("g3scaled"), *gg = tmp_path("g3scaled.gguf");
        CHECK(mp_model_save_hf(m, hf) == MP_ERR_ARG && strstr(mp_last_error(), "rope_local_theta"),
              "HF gemma3 scaled sliding layers: %s", mp_last_error());
        CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_ERR_ARG && strstr(mp_last_error(), "rope_local_theta"),
              "GGUF gemma3 scaled sliding layers: %s", mp_last_error());
        CHECK(access(gg, F_OK) != 0, "GGUF refusal left %s", gg);
        /* llama.cpp's gemma3 applies no attention soft cap (src/models/gemma3.cpp): refused */
        m->cfg.rope_local_theta = 100.0f;
        m->cfg.attn_softcap = 5.0f;
        CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_ERR_ARG && strstr(mp_last_error(), "attention soft cap"),
              "GGUF gemma3 attention cap: %s", mp_last_error());
        CHECK(access(gg, F_OK) != 0, "GGUF refusal left %s", gg);
        mp_model_free(m);
    }
}

int main(void) {
    golden(tu_data("arch_gemma"), tu_data("arch_gemma.h5"), "gemma HF", "hf-gemma");
    golden(tu_data("arch_gemma.gguf"), tu_data("arch_gemma.h5"), "gemma GGUF", "gguf-gemma");
    golden(tu_data("arch_gemma2"), tu_data("arch_gemma2.h5"), "gemma2 HF", "hf-gemma2");
    golden(tu_data("arch_gemma2.gguf"), tu_data("arch_gemma2.h5"), "gemma2 GGUF", "gguf-gemma2");
    quirks_off(tu_data("arch_gemma"), tu_data("arch_gemma.h5"), "gemma");
    quirks_off(tu_data("arch_gemma2"), tu_data("arch_gemma2.h5"), "gemma2");
    decode_equals_prefill(tu_data("arch_gemma"), "gemma");
    decode_equals_prefill(tu_data("arch_gemma2.gguf"), "gemma2");
    grad_fd(tu_data("arch_gemma"), "gemma fd");
    grad_fd(tu_data("arch_gemma2"), "gemma2 fd");
    staged_grad(tu_data("arch_gemma2"), "gemma2");
    fold_ln(tu_data("arch_gemma"), "gemma");
    fold_ln(tu_data("arch_gemma2"), "gemma2");
    round_trip(tu_data("arch_gemma"), "gemma");
    round_trip(tu_data("arch_gemma2"), "gemma2");
    round_trip(tu_data("arch_gemma2.gguf"), "gemma2 (from GGUF)");
    refusals();
    golden(tu_data("arch_gemma3"), tu_data("arch_gemma3.h5"), "gemma3 HF", "hf-gemma3");
    golden(tu_data("arch_gemma3_mm"), tu_data("arch_gemma3.h5"), "gemma3 HF multimodal", "hf-gemma3");
    golden(tu_data("arch_gemma3_mm2"), tu_data("arch_gemma3.h5"), "gemma3 HF multimodal (newer layout)",
           "hf-gemma3");
    golden(tu_data("arch_gemma3.gguf"), tu_data("arch_gemma3.h5"), "gemma3 GGUF", "gguf-gemma3");
    gemma3_quirks_off(tu_data("arch_gemma3"), tu_data("arch_gemma3.h5"), "gemma3");
    decode_equals_prefill(tu_data("arch_gemma3"), "gemma3");
    decode_equals_prefill(tu_data("arch_gemma3.gguf"), "gemma3 (GGUF)");
    gemma3_padded(tu_data("arch_gemma3"), "gemma3");
    grad_fd(tu_data("arch_gemma3"), "gemma3 fd");
    staged_grad(tu_data("arch_gemma3"), "gemma3");
    fold_ln(tu_data("arch_gemma3"), "gemma3");
    round_trip(tu_data("arch_gemma3"), "gemma3");
    round_trip(tu_data("arch_gemma3.gguf"), "gemma3 (from GGUF)");
    gemma3_refusals();
    return tu_finish("test_gemma");
}
