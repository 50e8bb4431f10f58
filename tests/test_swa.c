/* test_swa.c — sliding-window attention (config sliding_window and
 * sliding_window_pattern, runtime/config.h mp_config_window):
 *  - golden: a small random Mistral (Hugging Face folder, sliding_window 5,
 *    T 16) and the same weights with the Gemma-2-style pattern (layer 0
 *    windowed, layer 1 global; a GGUF with llama.cpp's per-layer bools, and
 *    the HF folder with sliding_window_pattern set), against the float64
 *    PyTorch reference of tests/tools/make_arch_ref_swa.py: the logits, every
 *    block's hook_resid_post, hook_attn_scores (-inf exactly where masked) and
 *    hook_pattern within TOL_REL of each tensor's largest |value|;
 *  - the window changes the logits (the test can fail), a window of 0 or of
 *    at least T gives the unwindowed model's logits bit for bit;
 *  - KV-cached decoding (one token at a time, and in chunks, hooks on or off)
 *    and prefill in blocks of query rows give the one-call prefill's logits;
 *    the window's masked keys show -inf scores and 0 pattern in decoding too;
 *  - padded batches (left and right) give each row's logits of that row alone;
 *  - entmax15 and entmax give exact zeros outside the window; ssmax and
 *    asentmax are refused with it;
 *  - training: parameter gradients against finite differences with the window
 *    on (a pattern model, and entmax15); the staged backward (hooks on the
 *    maps) gives the fused one's gradients, and d pattern / d scores are 0 on
 *    the masked entries;
 *  - bad values and unsupported combinations refused by name; the window kept
 *    by HDF5 checkpoints, GGUF and HF folders (logits bit-exact), refused by
 *    llama2.c;
 *  - on a CUDA device (real, or the emulator of tests/cuda_emu in
 *    test_swa_emu): the device's forward (every attention path: materialised
 *    with hooks, blocked prefill, the decode kernel) and training steps
 *    against the CPU. */
#include "backward.h"
#include "checkpoint.h"
#include "formats.h"
#include "gguf.h"
#include "h5io.h"
#include "model.h"
#include "model_io.h"
#include "mp_cuda.h"
#include "testutil.h"
#include "tu_arch.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* float32 forward against the float64 reference: max |diff| <= TOL_REL of the
 * tensor's largest finite |value| (measured worst printed) */
#define TOL_REL 1e-5
/* two float32 computations of the same thing in another summation order */
#define TOL_SAME 1e-5

static const char *tmp_path(const char *name) { return tu_tmp_path("swa", name); }

/* max |got - ref| / max finite |ref|; infinities must match exactly (else INFINITY) */
static double rel_err(const float *ref, const float *got, size_t n) { return tu_rel_diff(got, ref, n, 0.0); }

static float *forward(const mp_model *m, const int *tok, int B, int T, const mp_hooks *hs, int q_block) {
    float *lg = malloc((size_t)B * T * m->cfg.vocab * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = q_block;
    mp_status st = lg ? mp_model_forward(m, tok, B, T, &fp, lg) : MP_ERR_NOMEM;
    CHECK(st == MP_OK, "forward: %s", mp_last_error());
    if (st) { free(lg); return NULL; }
    return lg;
}

/* ---- golden ---- */

static void golden(mp_model *m, const char *golden_path, const char *label) {
    /* the logits and each block's resid_post, attention scores and pattern, relative to their scale */
    const tu_golden_opts o = {.points = "*hook_resid_post,*hook_attn_scores,*hook_pattern", .tol_rel = TOL_REL,
                              .logits_rel = TOL_REL, .n_acts = 3 * m->cfg.n_layer};
    tu_golden(m, golden_path, label, &o, NULL);
}

static const int TOK[16] = {5, 41, 17, 63, 2, 2, 30, 11, 58, 7, 0, 44, 23, 36, 9, 51};

/* ---- the window's effect, and its absence ---- */

static void window_sizes(mp_model *m) {
    const int T = 16;
    const size_t nl = (size_t)T * m->cfg.vocab;
    float *l5 = forward(m, TOK, 1, T, NULL, 0);
    m->cfg.sliding_window = 0;
    float *l0 = forward(m, TOK, 1, T, NULL, 0);
    m->cfg.sliding_window = T;
    float *l16 = forward(m, TOK, 1, T, NULL, 0);
    m->cfg.sliding_window = 1000;
    float *lbig = forward(m, TOK, 1, T, NULL, 0);
    m->cfg.sliding_window = 5;
    if (l5 && l0 && l16 && lbig) {
        const double d = tu_max_abs_diff(l5, l0, nl);
        /* rows 0..4 see at most 5 keys: identical; later rows differ */
        const double d_early = tu_max_abs_diff(l5, l0, (size_t)5 * m->cfg.vocab);
        CHECK(d > 1e-2, "window 5 vs none: logits differ by only %.3g", d);
        CHECK(d_early == 0.0, "window 5 vs none: the first 5 rows differ by %.3g", d_early);
        CHECK(memcmp(l0, l16, nl * sizeof(float)) == 0, "window T = 16 is not bit-identical to no window");
        CHECK(memcmp(l0, lbig, nl * sizeof(float)) == 0, "window 1000 is not bit-identical to no window");
        printf("window 5 vs none: max |diff| %.3g (rows 0-4: %.3g); window 16 and 1000: bit-identical to none\n", d,
               d_early);
    }
    free(l5), free(l0), free(l16), free(lbig);
}

/* ---- decoding and blocked prefill ---- */

/* KV-cached decoding in chunks (chunk[] sizes summing to T), with the maps
 * hooked or not, against the prefill logits ref */
static void decode(const mp_model *m, const float *ref, const int *chunks, int nchunks, int hooked, const char *label) {
    const int T = 16, V = m->cfg.vocab;
    mp_kvcache kc;
    CHECK(mp_kvcache_init(&kc, &m->cfg, 1, T) == MP_OK, "%s: cache: %s", label, mp_last_error());
    float *lg = malloc((size_t)T * V * sizeof(float));
    tu_capture cap = {0};
    mp_hooks *hs = NULL;
    if (hooked) {
        hs = mp_hooks_new(&m->cfg);
        CHECK(mp_hooks_add(hs, "*hook_attn_scores,*hook_pattern", tu_capture_cb, &cap) == MP_OK, "%s",
              mp_last_error());
    }
    int t = 0;
    double worst = 0.0;
    int masked_ok = 1;
    for (int c = 0; c < nchunks; c++) {
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &kc;
        fp.hooks = hs;
        CHECK(mp_model_forward(m, TOK + t, 1, chunks[c], &fp, lg + (size_t)t * V) == MP_OK, "%s: step: %s", label,
              mp_last_error());
        if (hooked) { /* the last row of this call: keys before its window -inf / 0 */
            for (int l = 0; l < m->cfg.n_layer; l++) {
                char nm[64];
                size_t ns, np;
                snprintf(nm, sizeof nm, "blocks.%d.attn.hook_attn_scores", l);
                const float *sc = tu_capture_get(&cap, nm, &ns);
                snprintf(nm, sizeof nm, "blocks.%d.attn.hook_pattern", l);
                const float *pa = tu_capture_get(&cap, nm, &np);
                const int W = mp_config_window(&m->cfg, l), S = t + chunks[c], p = S - 1, rows = chunks[c];
                if (!sc || !pa || ns != (size_t)m->cfg.n_head * rows * S) { masked_ok = 0; continue; }
                for (int h = 0; h < m->cfg.n_head; h++) {
                    const float *sr = sc + ((size_t)h * rows + rows - 1) * S, *pr = pa + ((size_t)h * rows + rows - 1) * S;
                    for (int j = 0; j < S; j++) {
                        const int seen = j <= p && (W == 0 || j > p - W);
                        if (seen ? !(isfinite(sr[j]) && pr[j] > 0.0f) : !(sr[j] == -INFINITY && pr[j] == 0.0f))
                            masked_ok = 0;
                    }
                }
            }
            tu_capture_free(&cap);
        }
        t += chunks[c];
    }
    const double r = rel_err(ref, lg, (size_t)T * V);
    CHECK(r <= TOL_SAME, "%s: decoding vs prefill relative error %.3g", label, r);
    if (hooked) CHECK(masked_ok, "%s: decoding's scores / pattern not masked to the window", label);
    if (r > worst) worst = r;
    printf("%s: decoding vs prefill, relative error %.2e\n", label, worst);
    mp_hooks_free(hs);
    free(lg);
    mp_kvcache_free(&kc);
}

static void decoding(const mp_model *m, const char *label) {
    const int T = 16;
    float *ref = forward(m, TOK, 1, T, NULL, 0);
    if (!ref) return;
    int ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1;
    const int chunks[] = {7, 3, 1, 5}, half[] = {8, 8};
    char lb[128];
    snprintf(lb, sizeof lb, "%s, one token at a time", label);
    decode(m, ref, ones, 16, 0, lb);
    snprintf(lb, sizeof lb, "%s, one token at a time, maps hooked", label);
    decode(m, ref, ones, 16, 1, lb);
    snprintf(lb, sizeof lb, "%s, chunks 7+3+1+5, maps hooked", label);
    decode(m, ref, chunks, 4, 1, lb);
    snprintf(lb, sizeof lb, "%s, chunks 8+8", label);
    decode(m, ref, half, 2, 0, lb);
    /* prefill in blocks of 3 query rows (hooked: the blocked path) */
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    tu_capture cap = {0};
    CHECK(mp_hooks_add(hs, "*hook_pattern", tu_capture_cb, &cap) == MP_OK, "%s", mp_last_error());
    float *lb3 = forward(m, TOK, 1, T, hs, 3);
    if (lb3) CHECK(rel_err(ref, lb3, (size_t)T * m->cfg.vocab) <= TOL_SAME, "%s: prefill in blocks of 3: %.3g", label,
                   rel_err(ref, lb3, (size_t)T * m->cfg.vocab));
    free(lb3);
    mp_hooks_free(hs);
    tu_capture_free(&cap);
    free(ref);
}

/* ---- padded batches ---- */

static void padded(const mp_model *m) {
    const int V = m->cfg.vocab, n[2] = {16, 11}, T = 16;
    int ids[27], tok[32], mask[32];
    memcpy(ids, TOK, sizeof TOK);
    for (int i = 0; i < 11; i++) ids[16 + i] = TOK[(i * 5 + 3) % 16];
    float *a0 = forward(m, ids, 1, 16, NULL, 0), *a1 = forward(m, ids + 16, 1, 11, NULL, 0);
    for (int left = 0; left <= 1; left++) {
        mp_pad_batch(ids, n, 2, T, 0, left, tok, mask);
        float *lg = malloc((size_t)2 * T * V * sizeof(float));
        mp_forward_params fp = mp_forward_params_default();
        fp.attn_mask = mask;
        CHECK(mp_model_forward(m, tok, 2, T, &fp, lg) == MP_OK, "padded: %s", mp_last_error());
        const int off = left ? T - 11 : 0;
        const double r0 = a0 ? rel_err(a0, lg, (size_t)16 * V) : 1e30;
        const double r1 = a1 ? rel_err(a1, lg + ((size_t)T + off) * V, (size_t)11 * V) : 1e30;
        CHECK(r0 <= TOL_SAME && r1 <= TOL_SAME, "padded (%s): rows vs alone: %.3g, %.3g", left ? "left" : "right",
              r0, r1);
        printf("padded batch (%s): each row vs alone, relative error %.2e, %.2e\n", left ? "left" : "right", r0, r1);
        free(lg);
    }
    free(a0), free(a1);
}

/* ---- attention variants ---- */

static void variants(void) {
    mp_config c = mp_config_default();
    c.d_model = 16, c.n_layer = 2, c.n_head = 2, c.n_kv_head = 1, c.d_head = 8, c.d_mlp = 24, c.vocab = 20,
    c.ctx = 16;
    c.sliding_window = 4;
    const mp_attn_kind kinds[] = {MP_ATTN_ENTMAX15, MP_ATTN_ENTMAX};
    for (int k = 0; k < 2; k++) {
        c.attn = kinds[k];
        c.attn_alpha = kinds[k] == MP_ATTN_ENTMAX ? 1.3f : 0.0f;
        mp_model *m = NULL;
        CHECK(mp_model_new_random(&m, &c, 3, 0.8f) == MP_OK, "%s", mp_last_error());
        if (!m) continue;
        tu_capture cap = {0};
        mp_hooks *hs = mp_hooks_new(&c);
        mp_hooks_add(hs, "*hook_pattern", tu_capture_cb, &cap);
        int tok[12];
        for (int i = 0; i < 12; i++) tok[i] = (i * 7 + 1) % 20;
        free(forward(m, tok, 1, 12, hs, 0));
        size_t np;
        const float *pa = tu_capture_get(&cap, "blocks.1.attn.hook_pattern", &np);
        int bad = !pa, seen_nonzero = 0;
        for (int h = 0; pa && h < 2; h++)
            for (int i = 0; i < 12; i++) {
                double s = 0;
                for (int j = 0; j < 12; j++) {
                    const float p = pa[((size_t)h * 12 + i) * 12 + j];
                    if ((j > i || j <= i - 4) && p != 0.0f) bad = 1;
                    if (j <= i - 2 && j > i - 4 && p > 0.0f) seen_nonzero = 1;
                    s += p;
                }
                if (fabs(s - 1.0) > 1e-5) bad = 1;
            }
        CHECK(!bad && seen_nonzero, "%s with window 4: pattern not confined to the window (or trivially)",
              mp_attn_name(kinds[k]));
        /* gradients against finite differences (entmax: kinks skipped) */
        int tgt[12];
        for (int i = 0; i < 12; i++) tgt[i] = (tok[i] * 3 + 2) % 20;
        tu_fd_result r = tu_fd_model(mp_attn_name(kinds[k]), m, tok, tgt, 1, 12, 1e-2f, 3, 1, 17);
        printf("%s, window 4: pattern confined to the window; gradients vs finite differences: %d checked, "
               "worst %.2f of tol\n", mp_attn_name(kinds[k]), r.checked, r.worst);
        mp_hooks_free(hs);
        tu_capture_free(&cap);
        mp_model_free(m);
    }
}

/* ---- training ---- */

static int noop_cb(void *u, const mp_hook_info *info, float *d) { (void)u, (void)info, (void)d; return 0; }

static void training(void) {
    mp_config c = mp_config_default();
    c.d_model = 16, c.n_layer = 3, c.n_head = 4, c.n_kv_head = 2, c.d_head = 4, c.d_mlp = 24, c.vocab = 23,
    c.ctx = 16;
    c.sliding_window = 3, c.sliding_window_pattern = 2; /* layers 0, 2 windowed; 1 global */
    mp_model *m = NULL;
    CHECK(mp_model_new_init(&m, &c, 99, 0.3f) == MP_OK, "%s", mp_last_error());
    if (!m) return;
    const int B = 2, T = 12, N = B * T;
    int tok[24], tgt[24];
    for (int i = 0; i < N; i++) tok[i] = (i * 11 + 5) % c.vocab, tgt[i] = (i * 7 + 2) % c.vocab;
    tu_fd_result r = tu_fd_model("window 3, pattern 2", m, tok, tgt, B, T, 1e-2f, 4, 0, 5);
    printf("window 3, pattern 2: gradients vs finite differences: %d checked, worst %.2f of tol\n", r.checked,
           r.worst);

    /* staged (hooks on the maps) vs fused backward, and zero gradients on masked entries */
    mp_acts A;
    memset(&A, 0, sizeof A);
    mp_grads G0, G;
    CHECK(mp_acts_init(&A, &c, B, T) == MP_OK && mp_grads_init(&G0, &c) == MP_OK && mp_grads_init(&G, &c) == MP_OK,
          "buffers");
    float *dl = malloc((size_t)N * c.vocab * sizeof(float));
    for (size_t i = 0; i < (size_t)N * c.vocab; i++) dl[i] = (float)sin(0.37 * (double)i);
    mp_forward_params fp = mp_forward_params_default();
    fp.acts = &A;
    CHECK(mp_model_forward(m, tok, B, T, &fp, NULL) == MP_OK, "training forward: %s", mp_last_error());
    mp_backward_params bp = {&G0, tok, NULL, NULL};
    CHECK(mp_backward(m, &A, dl, &bp) == MP_OK, "fused backward: %s", mp_last_error());
    tu_capture cap = {0};
    mp_hooks *hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "*attn.hook_pattern,*attn.hook_attn_scores", tu_capture_cb, &cap) == MP_OK, "%s",
          mp_last_error());
    bp.grads = &G;
    bp.hooks = hs;
    CHECK(mp_backward(m, &A, dl, &bp) == MP_OK, "staged backward: %s", mp_last_error());
    double scale = 0, err = 0;
    for (size_t i = 0; i < G.n; i++) {
        scale = fmax(scale, fabs(G0.mem[i]));
        err = fmax(err, fabs((double)G0.mem[i] - G.mem[i]));
    }
    CHECK(err <= 1e-4 * scale, "staged vs fused gradients: %.3g of %.3g", err, scale);
    int bad = 0, n_masked = 0;
    for (int l = 0; l < c.n_layer; l++) {
        const int W = mp_config_window(&c, l);
        for (int pt = 0; pt < 2; pt++) {
            char nm[64];
            size_t n;
            snprintf(nm, sizeof nm, pt ? "blocks.%d.attn.hook_attn_scores" : "blocks.%d.attn.hook_pattern", l);
            const float *g = tu_capture_get(&cap, nm, &n);
            if (!g || n != (size_t)B * c.n_head * T * T) { bad = 1; continue; }
            for (size_t bh = 0; bh < (size_t)B * c.n_head; bh++)
                for (int i = 0; i < T; i++)
                    for (int j = 0; j < T; j++)
                        if (j > i || (W && j <= i - W)) {
                            n_masked += j <= i;
                            if (g[(bh * T + i) * T + j] != 0.0f) bad = 1;
                        }
        }
    }
    CHECK(!bad && n_masked > 0, "d pattern / d scores not 0 on the window's masked entries");
    printf("staged vs fused backward: max |diff| %.2g of %.2g; d pattern, d scores 0 on %d masked entries\n", err,
           scale, n_masked);
    tu_capture_free(&cap);
    mp_hooks_free(hs);
    free(dl);
    mp_grads_free(&G0);
    mp_grads_free(&G);
    mp_acts_free(&A);
    mp_model_free(m);
}

/* ---- refusals ---- */

static void expect_new_fail(mp_config c, const char *needle, const char *label) {
    mp_model *m = NULL;
    mp_status st = mp_model_new(&m, &c);
    CHECK(st != MP_OK && !m && strstr(mp_last_error(), needle), "%s: \"%s\" lacks \"%s\"", label,
          st ? mp_last_error() : "(accepted)", needle);
    if (st) printf("%s: \"%s\"\n", label, mp_last_error());
    mp_model_free(m);
}

/* an HF folder: the Mistral's weights with config.json's text */
static const char *hf_variant(const char *name, const char *config) {
    return tu_model_dir(tmp_path(name), tu_data("swa_mistral/model.safetensors"), config);
}

static void rm_dir(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

#define HF_HEAD                                                                                                   \
    "{\"model_type\": \"%s\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "       \
    "\"num_key_value_heads\": 2, \"head_dim\": 8, \"intermediate_size\": 48, \"vocab_size\": 64, "               \
    "\"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-5, %s}"

static void refusals(void) {
    mp_config c = mp_config_default();
    c.d_model = 16, c.n_layer = 2, c.n_head = 2, c.n_kv_head = 2, c.d_head = 8, c.d_mlp = 24, c.vocab = 20,
    c.ctx = 16;
    mp_config x = c;
    x.sliding_window = -1;
    expect_new_fail(x, "sliding_window (-1)", "negative window");
    x = c, x.sliding_window = 4, x.sliding_window_pattern = -2;
    expect_new_fail(x, "sliding_window_pattern (-2)", "negative pattern");
    x = c, x.sliding_window_pattern = 2;
    expect_new_fail(x, "sliding_window_pattern (2) applies to a sliding_window only", "pattern without a window");
    x = c, x.sliding_window = 4, x.attn = MP_ATTN_SSMAX;
    expect_new_fail(x, "attn = ssmax", "ssmax with a window");
    x = c, x.sliding_window = 4, x.attn = MP_ATTN_ASENTMAX;
    expect_new_fail(x, "attn = asentmax", "asentmax with a window");

    char cfg[1024];
    snprintf(cfg, sizeof cfg, HF_HEAD, "mistral", "\"sliding_window\": -3");
    const char *d = hf_variant("neg", cfg);
    tu_expect_load_fail(d, "config.json sliding_window -3", "\"sliding_window\"", NULL);
    rm_dir(d);
    snprintf(cfg, sizeof cfg, HF_HEAD, "qwen2", "\"use_sliding_window\": true, \"sliding_window\": 4, "
             "\"max_window_layers\": 1");
    d = hf_variant("qsplit", cfg);
    tu_expect_load_fail(d, "qwen2 window on some layers", "max_window_layers 1", NULL);
    rm_dir(d);

    /* savers that cannot hold it */
    x = c, x.sliding_window = 4, x.sliding_window_pattern = 2;
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &x, 1, 0.1f) == MP_OK, "%s", mp_last_error());
    if (m) {
        mp_model_save_params sp = mp_model_save_params_default();
        sp.format = MP_FORMAT_LLAMA2C;
        const char *p = tmp_path("m.bin");
        mp_status st = mp_model_save_with(m, p, &sp);
        CHECK(st != MP_OK && strstr(mp_last_error(), "sliding-window") && access(p, F_OK) != 0,
              "llama2.c save of a windowed model: %s", st ? mp_last_error() : "(written)");
        printf("llama2.c save: \"%s\"\n", mp_last_error());
        d = tmp_path("hfpat");
        st = mp_model_save_hf(m, d);
        CHECK(st != MP_OK && strstr(mp_last_error(), "sliding_window_pattern"), "HF save of a pattern model: %s",
              st ? mp_last_error() : "(written)");
        printf("HF save of a pattern: \"%s\"\n", mp_last_error());
        rm_dir(d);
        mp_model_free(m);
    }

    /* a GGUF whose per-layer bools are no period's pattern: [false, true] */
    mp_gguf *g;
    mp_gguf_writer *w;
    const char *bad = tmp_path("bad.gguf");
    CHECK(mp_gguf_open(tu_data("swa_pattern.gguf"), &g) == MP_OK && mp_gguf_writer_new(&w) == MP_OK, "%s",
          mp_last_error());
    for (size_t i = 0; i < mp_gguf_n_kv(g); i++) {
        const char *k = mp_gguf_kv_key(g, i);
        if (strcmp(k, "llama.attention.sliding_window_pattern") == 0) {
            const uint8_t b[2] = {0, 1};
            mp_gguf_writer_set_array(w, k, MP_GGUF_BOOL, b, 2);
        } else {
            mp_gguf_writer_set(w, k, mp_gguf_kv_value(g, i));
        }
    }
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        mp_gguf_writer_add_raw(w, t->name, t->type, t->n_dims, t->dims, t->data, t->n_bytes);
    }
    CHECK(mp_gguf_writer_write(w, bad) == MP_OK, "%s", mp_last_error());
    mp_gguf_writer_free(w);
    mp_gguf_close(g);
    tu_expect_load_fail(bad, "GGUF pattern [false, true]", "sliding_window_pattern", NULL);
    unlink(bad);
}

/* ---- round trips ---- */

static void same_logits(const mp_model *a, const mp_model *b, const char *label) {
    float *la = forward(a, TOK, 1, 16, NULL, 0), *lb = forward(b, TOK, 1, 16, NULL, 0);
    CHECK(la && lb && memcmp(la, lb, (size_t)16 * a->cfg.vocab * sizeof(float)) == 0, "%s: logits not bit-identical",
          label);
    free(la), free(lb);
}

static void round_trips(const mp_model *m, const char *label) {
    const int W = m->cfg.sliding_window, P = m->cfg.sliding_window_pattern;
    char lb[160];
    const char *h5 = tmp_path("ckpt.h5"), *gg = tmp_path("m.gguf"), *hf = tmp_path("hf");
    CHECK(mp_model_save(m, h5) == MP_OK, "%s: checkpoint: %s", label, mp_last_error());
    mp_model *r = tu_load(h5);
    if (r) {
        CHECK(r->cfg.sliding_window == W && r->cfg.sliding_window_pattern == P, "%s: checkpoint keeps %d/%d, got %d/%d",
              label, W, P, r->cfg.sliding_window, r->cfg.sliding_window_pattern);
        snprintf(lb, sizeof lb, "%s -> checkpoint", label);
        same_logits(m, r, lb);
        mp_model_free(r);
    }
    unlink(h5);
    CHECK(mp_model_save_gguf(m, NULL, gg, MP_GGML_F32) == MP_OK, "%s: GGUF: %s", label, mp_last_error());
    if (W > 0) { /* the pattern as its period, a u32: what llama.cpp's gemma2 / gemma3 / olmo2 read (not a bool array) */
        mp_gguf *g = NULL;
        const char *arch = NULL;
        char k[96];
        const mp_gguf_value *v = NULL;
        if (mp_gguf_open(gg, &g) == MP_OK && mp_gguf_get_str(g, "general.architecture", &arch) == MP_GGUF_FOUND) {
            snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", arch);
            v = mp_gguf_get(g, k);
        }
        CHECK(v && v->type == MP_GGUF_UINT32 && v->v.u == (uint64_t)P, "%s: GGUF pattern key: %s", label,
              !v ? "missing" : v->type != MP_GGUF_UINT32 ? "not a u32" : "wrong period");
        mp_gguf_close(g);
    }
    r = tu_load(gg);
    if (r) {
        CHECK(r->cfg.sliding_window == W && r->cfg.sliding_window_pattern == P, "%s: GGUF keeps %d/%d, got %d/%d",
              label, W, P, r->cfg.sliding_window, r->cfg.sliding_window_pattern);
        snprintf(lb, sizeof lb, "%s -> GGUF", label);
        same_logits(m, r, lb);
        mp_model_free(r);
    }
    unlink(gg);
    if (!P) {
        CHECK(mp_model_save_hf(m, hf) == MP_OK, "%s: HF: %s", label, mp_last_error());
        r = tu_load(hf);
        if (r) {
            CHECK(r->cfg.sliding_window == W, "%s: HF folder keeps %d, got %d", label, W, r->cfg.sliding_window);
            snprintf(lb, sizeof lb, "%s -> HF folder", label);
            same_logits(m, r, lb);
            mp_model_free(r);
        }
        rm_dir(hf);
    }
    printf("%s (window %d, pattern %d): checkpoint, GGUF%s round trips keep it, logits bit-identical\n", label, W, P,
           P ? "" : ", HF folder");
}

/* ---- a CUDA device (real or emulated) against the CPU ---- */

static void cuda(const mp_model *src) {
    if (!mp_cuda_built() || mp_cuda_available() != MP_OK) {
        printf("cuda: no device (%s): skipped\n", mp_cuda_built() ? "none found" : "not built");
        return;
    }
    mp_model *g = NULL;
    CHECK(mp_model_new(&g, &src->cfg) == MP_OK, "%s", mp_last_error());
    if (!g) return;
    mp_param_desc a[MP_PARAM_MAX], b[MP_PARAM_MAX];
    const int np = mp_params_describe(&src->cfg, &src->p, a);
    mp_params_describe(&g->cfg, &g->p, b);
    for (int i = 0; i < np; i++) memcpy(b[i].p, a[i].p, a[i].n * sizeof(float));
    CHECK(mp_model_to_device(g, MP_DEVICE_CUDA, MP_PRECISION_FP32) == MP_OK, "to cuda: %s", mp_last_error());
    const int T = 16, V = src->cfg.vocab;
    const size_t nl = (size_t)T * V;
    /* blocked prefill (T >= 16), hooked maps (materialised), the decode kernel (T 1) */
    float *lc = forward(src, TOK, 1, T, NULL, 0), *lg = forward(g, TOK, 1, T, NULL, 0);
    if (lc && lg) CHECK(rel_err(lc, lg, nl) <= 1e-4, "cuda prefill: %.3g", rel_err(lc, lg, nl));
    printf("cuda blocked prefill vs cpu: relative error %.2e\n", lc && lg ? rel_err(lc, lg, nl) : -1.0);
    tu_capture cc = {0}, cg = {0};
    mp_hooks *hc = mp_hooks_new(&src->cfg), *hg = mp_hooks_new(&src->cfg);
    mp_hooks_add(hc, "*hook_attn_scores,*hook_pattern,*hook_resid_post", tu_capture_cb, &cc);
    mp_hooks_add(hg, "*hook_attn_scores,*hook_pattern,*hook_resid_post", tu_capture_cb, &cg);
    float *l1 = forward(src, TOK, 1, T, hc, 5), *l2 = forward(g, TOK, 1, T, hg, 5);
    double worst = l1 && l2 ? rel_err(l1, l2, nl) : 1e30;
    for (int k = 0; k < cc.n; k++) {
        size_t n;
        const float *x = tu_capture_get(&cg, cc.name[k], &n);
        const double r = x && n == cc.numel[k] ? rel_err(cc.buf[k], x, n) : 1e30;
        CHECK(r <= 1e-4, "cuda hooked %s: %.3g", cc.name[k], r);
        worst = fmax(worst, r);
    }
    CHECK(worst <= 1e-4 && cc.n == 3 * src->cfg.n_layer, "cuda hooked forward: %.3g (%d maps)", worst, cc.n);
    printf("cuda hooked forward (blocks of 5 rows) vs cpu: logits + %d tensors, relative error %.2e\n", cc.n, worst);
    /* decoding on the device: the decode kernel (one row), then chunks */
    mp_kvcache kg;
    CHECK(mp_kvcache_init(&kg, &g->cfg, 1, T) == MP_OK, "%s", mp_last_error());
    float *ld = malloc(nl * sizeof(float));
    for (int t = 0; t < T; t++) {
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &kg;
        CHECK(mp_model_forward(g, TOK + t, 1, 1, &fp, ld + (size_t)t * V) == MP_OK, "cuda decode: %s", mp_last_error());
    }
    if (lc) CHECK(rel_err(lc, ld, nl) <= 1e-4, "cuda decoding vs cpu prefill: %.3g", rel_err(lc, ld, nl));
    printf("cuda decoding (one token at a time) vs cpu prefill: relative error %.2e\n", lc ? rel_err(lc, ld, nl) : -1.0);
    mp_kvcache_free(&kg);
    /* chunks of 7 and 9 rows after a cache (the decode kernel with several rows at pos0 > 0) */
    CHECK(mp_kvcache_init(&kg, &g->cfg, 1, T) == MP_OK, "%s", mp_last_error());
    for (int t = 0; t < T; t += t ? 9 : 7) {
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &kg;
        CHECK(mp_model_forward(g, TOK + t, 1, t ? 9 : 7, &fp, ld + (size_t)t * V) == MP_OK, "cuda chunks: %s",
              mp_last_error());
    }
    if (lc) CHECK(rel_err(lc, ld, nl) <= 1e-4, "cuda chunked decoding vs cpu prefill: %.3g", rel_err(lc, ld, nl));
    printf("cuda decoding in chunks 7+9 vs cpu prefill: relative error %.2e\n", lc ? rel_err(lc, ld, nl) : -1.0);
    mp_kvcache_free(&kg);
    free(ld), free(lc), free(lg), free(l1), free(l2);
    mp_hooks_free(hc), mp_hooks_free(hg);
    tu_capture_free(&cc), tu_capture_free(&cg);

    /* training steps: the recomputed pattern, and the stored one (a pattern hook) */
    for (int hooked = 0; hooked <= 1; hooked++) {
        mp_model *mc = NULL, *mg = NULL;
        mp_config c = src->cfg;
        mp_model_new_random(&mc, &c, 41, 0.3f);
        mp_model_new_random(&mg, &c, 41, 0.3f);
        if (!mc || !mg || mp_model_to_device(mg, MP_DEVICE_CUDA, MP_PRECISION_FP32) != MP_OK) {
            CHECK(0, "cuda training set-up: %s", mp_last_error());
            mp_model_free(mc), mp_model_free(mg);
            continue;
        }
        mp_adamw_params hp = mp_adamw_params_default();
        hp.lr = 1e-2f, hp.eps = 1e-6f;
        mp_adamw oc, og;
        mp_train_ws wc, wg;
        memset(&oc, 0, sizeof oc), memset(&og, 0, sizeof og), memset(&wc, 0, sizeof wc), memset(&wg, 0, sizeof wg);
        oc.hp = og.hp = hp;
        mp_hooks *hs = NULL;
        if (hooked) {
            hs = mp_hooks_new(&c);
            mp_hooks_add(hs, "blocks.0.attn.hook_pattern", noop_cb, NULL);
        }
        const int B = 2;
        int tok[32], tgt[32];
        double wl = 0, wn = 0;
        for (int step = 0; step < 3; step++) {
            for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + step * 3) % V, tgt[i] = (tok[i] * 5 + 1) % V;
            float l_c = 0, l_g = 0;
            CHECK(mp_train_step(mc, &oc, &wc, tok, tgt, B, T, 1, hs, &l_c) == MP_OK &&
                      mp_train_step(mg, &og, &wg, tok, tgt, B, T, 1, hs, &l_g) == MP_OK,
                  "cuda train step: %s", mp_last_error());
            wl = fmax(wl, fabs((double)l_c - l_g) / fabs((double)l_c));
            wn = fmax(wn, fabs(wc.grad_norm - wg.grad_norm) / wc.grad_norm);
        }
        CHECK(wl <= 1e-5 && wn <= 1e-4, "cuda training (%s): loss %.3g, gradient norm %.3g relative",
              hooked ? "stored pattern" : "recomputed pattern", wl, wn);
        printf("cuda training, 3 steps (%s pattern): loss %.2e, gradient norm %.2e relative to the cpu\n",
               hooked ? "stored" : "recomputed", wl, wn);
        mp_hooks_free(hs);
        mp_model_sync(mg);
        mp_train_ws_free(&wc), mp_train_ws_free(&wg);
        mp_adamw_free(&oc), mp_adamw_free(&og);
        mp_model_free(mc), mp_model_free(mg);
    }
    mp_model_free(g);
}

int main(void) {
    mp_model *m = tu_load(tu_data("swa_mistral"));
    if (m) {
        CHECK(m->cfg.sliding_window == 5 && m->cfg.sliding_window_pattern == 0, "mistral: window %d, pattern %d",
              m->cfg.sliding_window, m->cfg.sliding_window_pattern);
        golden(m, tu_data("swa_mistral.h5"), "mistral HF folder, window 5");
        window_sizes(m);
        decoding(m, "mistral window 5");
        padded(m);
        round_trips(m, "mistral");
        m->cfg.sliding_window_pattern = 2;
        golden(m, tu_data("swa_pattern.h5"), "mistral HF folder with pattern 2");
        m->cfg.sliding_window_pattern = 0;
        cuda(m);
    }
    mp_model *p = tu_load(tu_data("swa_pattern.gguf"));
    if (p) {
        CHECK(p->cfg.sliding_window == 5 && p->cfg.sliding_window_pattern == 2, "pattern GGUF: window %d, pattern %d",
              p->cfg.sliding_window, p->cfg.sliding_window_pattern);
        golden(p, tu_data("swa_pattern.h5"), "pattern GGUF (per-layer bools)");
        decoding(p, "pattern 2");
        round_trips(p, "pattern");
        cuda(p);
    }
    mp_model_free(m);
    mp_model_free(p);
    variants();
    training();
    refusals();
    /* a qwen2-style (q/k/v biases) windowed model through its HF form */
    mp_config c = mp_config_default();
    c.d_model = 16, c.n_layer = 2, c.n_head = 2, c.n_kv_head = 1, c.d_head = 8, c.d_mlp = 24, c.vocab = 64,
    c.ctx = 32, c.qkv_bias = 1, c.tied = 0, c.sliding_window = 6;
    mp_model *q = NULL;
    CHECK(mp_model_new_random(&q, &c, 8, 0.3f) == MP_OK, "%s", mp_last_error());
    if (q) round_trips(q, "qwen2-style");
    mp_model_free(q);
    return tu_finish("test_swa");
}
