/* test_models.c — real-model formats and architectures:
 *  - golden: small random Qwen2 (q/k/v biases, half-split RoPE) and GPT-2
 *    (learned positions, fused Conv1D QKV, biases, LayerNorm, GELU-tanh)
 *    models, as Hugging Face folders and as GGUF files written by an
 *    independent Python writer (tests/tools/make_arch_ref.py), against PyTorch
 *    reference activations: every hook point and the logits within 1e-4;
 *  - round trips through mechprobe's own writers (GGUF F32 / F16 / Q8_0 and HF
 *    safetensors folders): F32 bit-exact; F16 / Q8_0 within measured tolerances
 *    (TOL_F16, TOL_Q8 below); on tests/data/ref_gqa_untied.bin always and on
 *    ../shared/models/aidreams260K.bin with the argument "shared";
 *  - tokenizers exported to GGUF (llama2.c tokenizer.bin -> "llama" vocabulary,
 *    byte-level "bytes" models -> a byte vocabulary) reproduce the ids;
 *  - training mode: finite-difference checks of the new parameters (biases,
 *    learned positions, GELU-tanh);
 *  - malformed files and folders give clear errors. */
#include "tok.h"
#include "checkpoint.h"
#include "gguf.h"
#include "h5io.h"
#include "formats.h"
#include "model.h"
#include "testutil.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOL 1e-4
/* Round-trip tolerances on logits and hooks (max |diff|, values of order 1-10):
 * measured maxima are printed; the bounds leave about 3x headroom. */
#define TOL_F16 8e-2
#define TOL_Q8 5e-1

static float *run_captured(const mp_model *m, const int *toks, int T, tu_capture *cap) {
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    float *logits = malloc((size_t)T * m->cfg.vocab * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    mp_status st = mp_model_forward(m, toks, 1, T, &fp, logits);
    CHECK(st == MP_OK, "forward: %s", mp_last_error());
    mp_hooks_free(hs);
    return logits;
}

/* ---- golden ---- */

static void golden(const char *model_path, const char *golden_path, const char *label, const char *want_format) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    CHECK(strcmp(m->format, want_format) == 0, "%s: format %s, expected %s", label, m->format, want_format);
    hid_t f;
    int32_t *toks = NULL;
    mp_h5_dsinfo info;
    if (mp_h5_open(&f, golden_path, MP_H5_READ) || mp_h5_read_i32(f, "/tokens", &toks, &info)) {
        CHECK(0, "%s", mp_last_error());
        mp_model_free(m);
        return;
    }
    int T = (int)info.shape[1];
    tu_capture cap = {0};
    float *logits = run_captured(m, (int *)toks, T, &cap);
    mp_h5_entry *e;
    int n;
    CHECK(mp_h5_list(f, "/acts", &e, &n) == MP_OK, "%s", mp_last_error());
    double worst = 0;
    int compared = 0;
    for (int i = 0; i < n; i++) {
        char path[256];
        float *ref;
        size_t got_n;
        snprintf(path, sizeof path, "/acts/%s", e[i].name);
        CHECK(mp_h5_read_f32(f, path, &ref, &info) == MP_OK, "%s", mp_last_error());
        const float *got = tu_capture_get(&cap, e[i].name, &got_n);
        CHECK(got && got_n == info.numel, "%s: hook %s missing or of the wrong size", label, e[i].name);
        if (got && got_n == info.numel) {
            double d = tu_max_abs_diff(got, ref, info.numel);
            CHECK(d <= TOL, "%s: %s max |diff| = %.3g", label, e[i].name, d);
            if (d > worst) worst = d;
            compared++;
        }
        free(ref);
    }
    int added = 0;
    for (int i = 0; i < cap.n; i++) added += tu_added_point(cap.name[i]);
    CHECK(compared + added == cap.n, "%s: %d hooks compared, %d fired (%d added since the golden files)", label,
          compared, cap.n, added);
    mp_h5_list_free(e, n);
    float *ref;
    CHECK(mp_h5_read_f32(f, "/logits", &ref, &info) == MP_OK, "%s", mp_last_error());
    double d = tu_max_abs_diff(logits, ref, info.numel);
    CHECK(d <= TOL, "%s: logits max |diff| = %.3g", label, d);
    if (d > worst) worst = d;
    printf("%s: %d hook points + logits, worst |diff| %.2e (tol %.0e)\n", label, compared, worst, TOL);
    free(ref);
    free(logits);
    free(toks);
    tu_capture_free(&cap);
    mp_h5_close(&f);
    mp_model_free(m);
}

/* ---- round trips ---- */

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "/tmp/mp_test_models_%d_%s", (int)getpid(), name);
    return p;
}

static void rm_tree(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir); unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir); unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir); unlink(p);
    rmdir(dir);
}

/* max |diff| over logits and every hook between two models on the same tokens */
static double compare_models(const mp_model *a, const mp_model *b, const int *toks, int T, const char *label) {
    tu_capture ca = {0}, cb = {0};
    float *la = run_captured(a, toks, T, &ca), *lb = run_captured(b, toks, T, &cb);
    double worst = tu_max_abs_diff(la, lb, (size_t)T * a->cfg.vocab);
    CHECK(ca.n == cb.n && ca.n > 0, "%s: %d vs %d hooks", label, ca.n, cb.n);
    for (int k = 0; k < ca.n && k < cb.n; k++) {
        size_t nb;
        const float *gb = tu_capture_get(&cb, ca.name[k], &nb);
        CHECK(gb && nb == ca.numel[k], "%s: hook %s missing", label, ca.name[k]);
        if (gb && nb == ca.numel[k]) {
            double d = tu_max_abs_diff(ca.buf[k], gb, nb);
            if (d > worst) worst = d;
        }
    }
    free(la);
    free(lb);
    tu_capture_free(&ca);
    tu_capture_free(&cb);
    return worst;
}

static void round_trip(const char *src, const char *tok_source, const char *label) {
    mp_model *m = tu_load(src);
    if (!m) return;
    int toks[24];
    int T = m->cfg.ctx < 24 ? m->cfg.ctx : 24;
    for (int i = 0; i < T; i++) toks[i] = (i * 37 + 5) % m->cfg.vocab;
    struct { uint32_t type; const char *name; double tol; } kinds[] = {
        {MP_GGML_F32, "f32.gguf", 0.0}, {MP_GGML_F16, "f16.gguf", TOL_F16}, {MP_GGML_Q8_0, "q8_0.gguf", TOL_Q8}};
    for (int k = 0; k < 3; k++) {
        const char *out = tmp_path(kinds[k].name);
        mp_status st = mp_model_save_gguf(m, tok_source, out, kinds[k].type);
        CHECK(st == MP_OK, "%s: save %s: %s", label, kinds[k].name, mp_last_error());
        mp_model *r = st ? NULL : tu_load(out);
        if (r) {
            double d = compare_models(m, r, toks, T, label);
            CHECK(d <= kinds[k].tol, "%s -> GGUF %s: max |diff| %.3g > %.3g", label, kinds[k].name, d, kinds[k].tol);
            printf("%s -> GGUF %s -> reload: logits and every hook max |diff| %.3g (tol %.3g)\n", label,
                   kinds[k].name, d, kinds[k].tol);
            if (tok_source && k == 0) { /* the tokenizer travelled: same ids */
                mp_tok *ta = NULL, *tb = NULL;
                mp_model_format f = mp_model_detect(tok_source);
                st = f == MP_FORMAT_GGUF ? mp_tok_load_gguf(&ta, tok_source)
                   : f == MP_FORMAT_HF ? mp_tok_load_hf_dir(&ta, tok_source)
                   : mp_tok_load_llama2c(&ta, tok_source, m->cfg.vocab);
                CHECK(st == MP_OK, "%s", mp_last_error());
                CHECK(mp_tok_load_gguf(&tb, out) == MP_OK, "%s: tokenizer from the GGUF: %s", label, mp_last_error());
                if (ta && tb) {
                    const char *texts[] = {"Once upon a time, there was a little girl.", "Hello  world\n\t42 é ✓", ""};
                    for (int i = 0; i < 3; i++) {
                        int *ia, *ib, na, nb;
                        CHECK(mp_tok_encode_str(ta, texts[i], MP_TOK_BOS, &ia, &na) == MP_OK, "%s", mp_last_error());
                        CHECK(mp_tok_encode_str(tb, texts[i], MP_TOK_BOS, &ib, &nb) == MP_OK, "%s", mp_last_error());
                        CHECK(na == nb && (na == 0 || memcmp(ia, ib, (size_t)na * sizeof(int)) == 0),
                              "%s: GGUF tokenizer ids differ on \"%s\" (%d vs %d tokens)", label, texts[i], na, nb);
                        free(ia);
                        free(ib);
                    }
                    CHECK(mp_tok_bos(ta) == mp_tok_bos(tb) && mp_tok_eos(ta) == mp_tok_eos(tb), "%s: BOS/EOS", label);
                    printf("%s: tokenizer exported to GGUF gives the same ids\n", label);
                }
                mp_tok_free(ta);
                mp_tok_free(tb);
            }
            mp_model_free(r);
        }
        unlink(out);
    }
    const char *dir = tmp_path("hf");
    mp_status st = mp_model_save_hf(m, dir);
    CHECK(st == MP_OK, "%s: save HF: %s", label, mp_last_error());
    mp_model *r = st ? NULL : tu_load(dir);
    if (r) {
        double d = compare_models(m, r, toks, T, label);
        CHECK(d == 0.0, "%s -> HF folder: max |diff| %.3g (must be exact)", label, d);
        printf("%s -> HF safetensors folder -> reload: max |diff| %.3g (exact)\n", label, d);
        mp_model_free(r);
    }
    rm_tree(dir);
    mp_model_free(m);
}

/* ---- a "bytes" model's exported vocabulary ---- */

static void bytes_tokenizer(void) {
    mp_config c = mp_config_default();
    c.d_model = 32; c.n_layer = 1; c.n_head = 2; c.n_kv_head = 2; c.d_head = 16; c.d_mlp = 32;
    c.vocab = 260; c.ctx = 16;
    mp_model *m;
    CHECK(mp_model_new_random(&m, &c, 5, 0.1f) == MP_OK, "%s", mp_last_error());
    snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
    const char *out = tmp_path("bytes.gguf");
    CHECK(mp_model_save_gguf(m, NULL, out, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    mp_tok *t = NULL;
    CHECK(mp_tok_load_gguf(&t, out) == MP_OK, "bytes vocabulary: %s", mp_last_error());
    if (t) {
        const char s[] = "a\0b\xff\n \xe2\x9c\x93 z";
        int *ids, n;
        CHECK(mp_tok_encode(t, s, sizeof s - 1, MP_TOK_BOS, &ids, &n) == MP_OK, "%s", mp_last_error());
        int ok = n == (int)sizeof s && ids[0] == 256;
        for (int i = 1; ok && i < n; i++) ok = ids[i] == (unsigned char)s[i - 1];
        CHECK(ok, "bytes vocabulary: ids are not BOS + the bytes (%d tokens)", n);
        char *back;
        size_t len;
        CHECK(mp_tok_decode(t, ids, n, &back, &len) == MP_OK && len == sizeof s - 1 && memcmp(back, s, len) == 0,
              "bytes vocabulary: decode does not give the bytes back");
        free(back);
        free(ids);
        printf("bytes model -> GGUF: byte vocabulary maps ids 0..255 to the bytes, 256 = BOS\n");
    }
    mp_tok_free(t);
    unlink(out);
    mp_model_free(m);
}

/* ---- training mode: finite differences on the new parameters ---- */

static void grad_check(int gpt2) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = gpt2 ? 2 : 1; c.d_head = 8; c.d_mlp = 24;
    c.vocab = 20; c.ctx = 8; c.qkv_bias = 1;
    if (gpt2) {
        c.norm = MP_NORM_LAYER; c.mlp = MP_MLP_GELU; c.gelu_tanh = 1; c.pos = MP_POS_LEARNED; c.linear_bias = 1;
    } else {
        c.rope_scale = 2.0f;
    }
    mp_model *m;
    CHECK(mp_model_new_random(&m, &c, 3, 0.3f) == MP_OK, "%s", mp_last_error());
    const int B = 2, T = 6;
    int toks[12], tg[12];
    for (int i = 0; i < B * T; i++) { toks[i] = (i * 7 + 3) % c.vocab; tg[i] = (i * 5 + 1) % c.vocab; }
    mp_acts A;
    mp_grads G;
    CHECK(mp_acts_init(&A, &c, B, T) == MP_OK && mp_grads_init(&G, &c) == MP_OK, "%s", mp_last_error());
    float loss;
    CHECK(mp_model_forward_backward(m, toks, tg, B, T, NULL, &A, &G, 1.0f, &loss, NULL) == MP_OK, "%s", mp_last_error());
    struct { const char *name; float *p, *g; size_t n; } ps[] = {
        {"bq", m->p.bq, G.g.bq, (size_t)c.n_layer * c.n_head * c.d_head},
        {"bk", m->p.bk, G.g.bk, (size_t)c.n_layer * c.n_kv_head * c.d_head},
        {"bv", m->p.bv, G.g.bv, (size_t)c.n_layer * c.n_kv_head * c.d_head},
        {"bo", m->p.bo, G.g.bo, gpt2 ? (size_t)c.n_layer * c.d_model : 0},
        {"b1", m->p.b1, G.g.b1, gpt2 ? (size_t)c.n_layer * c.d_mlp : 0},
        {"b2", m->p.b2, G.g.b2, gpt2 ? (size_t)c.n_layer * c.d_model : 0},
        {"pos_embed", m->p.pos_embed, G.g.pos_embed, gpt2 ? (size_t)c.ctx * c.d_model : 0},
        {"w1", m->p.w1, G.g.w1, (size_t)c.n_layer * c.d_mlp * c.d_model}};
    double worst = 0;
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        for (size_t j = 0; j < ps[k].n; j += ps[k].n / 5 + 1) {
            /* positions >= T get no gradient; probe rows < T */
            size_t i = ps[k].p == m->p.pos_embed ? j % ((size_t)T * c.d_model) : j;
            float save = ps[k].p[i], h = 1e-2f, lp, lm;
            ps[k].p[i] = save + h;
            mp_model_loss(m, toks, tg, B, T, NULL, &lp);
            ps[k].p[i] = save - h;
            mp_model_loss(m, toks, tg, B, T, NULL, &lm);
            ps[k].p[i] = save;
            double fd = ((double)lp - lm) / (2.0 * h), an = ps[k].g[i];
            double err = fabs(fd - an) / fmax(1e-2, fabs(fd) + fabs(an));
            CHECK(err < 2e-2, "%s grad %s[%zu]: analytic %.5g, finite difference %.5g", gpt2 ? "gpt2" : "qwen2",
                  ps[k].name, i, an, fd);
            if (err > worst) worst = err;
        }
    }
    printf("%s-style training gradients (biases%s) vs finite differences: worst relative error %.2e\n",
           gpt2 ? "gpt2" : "qwen2", gpt2 ? ", learned positions, GELU-tanh" : ", linear RoPE scaling", worst);
    mp_acts_free(&A);
    mp_grads_free(&G);
    mp_model_free(m);
}

/* ---- checkpoints keep the new parameters ---- */

static void checkpoint_round_trip(const char *src) {
    mp_model *m = tu_load(src);
    if (!m) return;
    const char *out = tmp_path("ckpt.h5");
    CHECK(mp_model_save(m, out) == MP_OK, "%s", mp_last_error());
    mp_model *r = tu_load(out);
    if (r) {
        int toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        double d = compare_models(m, r, toks, 8, "checkpoint");
        CHECK(d == 0.0 && r->cfg.qkv_bias == m->cfg.qkv_bias && r->cfg.linear_bias == m->cfg.linear_bias &&
              r->cfg.gelu_tanh == m->cfg.gelu_tanh && r->cfg.pos == m->cfg.pos,
              "%s -> checkpoint: diff %.3g or config changed", src, d);
        printf("%s -> HDF5 checkpoint -> reload: exact\n", m->format);
        mp_model_free(r);
    }
    unlink(out);
    mp_model_free(m);
}

/* ---- RoPE scaling: per-frequency divisors all equal to f are linear scaling by f ---- */

static void rope_scaling(void) {
    mp_config c = mp_config_default();
    c.d_model = 32; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.d_head = 8; c.d_mlp = 32;
    c.vocab = 40; c.ctx = 32; c.rope_theta = 500.0f;
    mp_config a = c, b = c;
    a.rope_scale = 4.0f;
    b.n_rope_freqs = c.d_head / 2;
    for (int i = 0; i < b.n_rope_freqs; i++) b.rope_freqs[i] = 4.0f;
    mp_model *ma, *mb, *mc;
    CHECK(mp_model_new_random(&ma, &a, 9, 0.3f) == MP_OK && mp_model_new_random(&mb, &b, 9, 0.3f) == MP_OK &&
          mp_model_new_random(&mc, &c, 9, 0.3f) == MP_OK, "%s", mp_last_error());
    int toks[20];
    for (int i = 0; i < 20; i++) toks[i] = (i * 11 + 2) % c.vocab;
    double d = compare_models(ma, mb, toks, 20, "rope scaling");
    CHECK(d < 1e-5, "linear scale 4 vs frequency divisors 4: |diff| %.3g", d);
    double d0 = compare_models(ma, mc, toks, 20, "rope scaling");
    CHECK(d0 > 1e-3, "rope scaling changes nothing (|diff| %.3g)", d0);
    const char *out = tmp_path("rope.gguf");
    CHECK(mp_model_save_gguf(mb, NULL, out, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    mp_model *r = tu_load(out);
    if (r) {
        CHECK(r->cfg.n_rope_freqs == 4 && compare_models(mb, r, toks, 20, "rope_freqs") == 0.0,
              "rope_freqs.weight round trip");
        mp_model_free(r);
    }
    CHECK(mp_model_save_gguf(ma, NULL, out, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    if ((r = tu_load(out))) {
        CHECK(r->cfg.rope_scale == 4.0f && compare_models(ma, r, toks, 20, "rope_scale") == 0.0,
              "rope.scaling linear round trip");
        mp_model_free(r);
    }
    unlink(out);
    printf("RoPE: linear scaling 4 == frequency divisors 4 (|diff| %.2e; unscaled differs by %.2f); both survive GGUF\n",
           d, d0);
    mp_model_free(ma);
    mp_model_free(mb);
    mp_model_free(mc);
}

/* ---- malformed inputs ---- */

static void expect_fail(const char *path, const char *needle, const char *label) {
    mp_model *m = NULL;
    mp_status st = mp_model_load(&m, path);
    CHECK(st != MP_OK && !m, "%s: loaded although malformed", label);
    CHECK(st == MP_OK || strstr(mp_last_error(), needle) != NULL, "%s: message \"%s\" lacks \"%s\"", label,
          mp_last_error(), needle);
    if (st) printf("%s: \"%s\"\n", label, mp_last_error());
    mp_model_free(m);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

/* Rewrites the qwen2 GGUF with one change: drop a tensor, change a shape,
 * or the architecture. */
static void gguf_variant(const char *src, const char *out, const char *drop, const char *reshape, const char *arch) {
    mp_gguf *g;
    mp_gguf_writer *w;
    CHECK(mp_gguf_open(src, &g) == MP_OK && mp_gguf_writer_new(&w) == MP_OK, "%s", mp_last_error());
    for (size_t i = 0; i < mp_gguf_n_kv(g); i++) {
        const char *k = mp_gguf_kv_key(g, i);
        if (arch && strcmp(k, "general.architecture") == 0) mp_gguf_writer_set_str(w, k, arch);
        else mp_gguf_writer_set(w, k, mp_gguf_kv_value(g, i));
    }
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        uint64_t dims[4] = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
        if (reshape && strcmp(t->name, reshape) == 0) { dims[0] = t->dims[1]; dims[1] = t->dims[0]; }
        mp_gguf_writer_add_raw(w, t->name, t->type, t->n_dims, dims, t->data, t->n_bytes);
    }
    CHECK(mp_gguf_writer_write(w, out) == MP_OK, "%s", mp_last_error());
    mp_gguf_writer_free(w);
    mp_gguf_close(g);
}

static void malformed(void) {
    const char *src = tu_data("arch_qwen2.gguf"), *bad = tmp_path("bad.gguf");
    gguf_variant(src, bad, "blk.1.ffn_down.weight", NULL, NULL);
    expect_fail(bad, "blk.1.ffn_down.weight is missing", "GGUF missing tensor");
    gguf_variant(src, bad, NULL, "blk.0.attn_k.weight", NULL);
    expect_fail(bad, "blk.0.attn_k.weight has dims", "GGUF shape mismatch");
    gguf_variant(src, bad, NULL, NULL, "mamba");
    expect_fail(bad, "unknown architecture \"mamba\"", "GGUF unknown architecture");
    unlink(bad);

    /* HF folders: config.json variants next to a copy of the qwen2 weights */
    const char *dir = tmp_path("badhf");
    char p[600], cmd[1400];
    mkdir(dir, 0777);
    snprintf(cmd, sizeof cmd, "cp %s %s/model.safetensors", tu_data("arch_qwen2/model.safetensors"), dir);
    CHECK(system(cmd) == 0, "cp");
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32,");
    expect_fail(dir, "config.json", "HF bad JSON");
    write_file(p, "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2}");
    expect_fail(dir, "\"hidden_size\" is missing", "HF missing hidden_size");
    write_file(p, "{\"model_type\": \"bert\"}");
    expect_fail(dir, "unknown model_type \"bert\"", "HF unknown model_type");
    write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
                  " \"num_key_value_heads\": 2, \"intermediate_size\": 48, \"vocab_size\": 64}");
    expect_fail(dir, "model.layers.2.input_layernorm.weight is missing", "HF missing tensor (3 layers declared)");
    write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                  " \"num_key_value_heads\": 2, \"intermediate_size\": 40, \"vocab_size\": 64}");
    expect_fail(dir, "mlp.gate_proj.weight has shape [48, 32]", "HF shape mismatch");
    write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                  " \"num_key_value_heads\": 3, \"intermediate_size\": 48, \"vocab_size\": 64}");
    expect_fail(dir, "not divisible by n_kv_head", "HF bad head counts");
    rm_tree(dir);
    mkdir(dir, 0777);
    expect_fail(dir, "without config.json", "folder without config.json");
    rmdir(dir);
    expect_fail(tmp_path("does-not-exist"), "cannot open", "missing path");
}

int main(int argc, char **argv) {
    mp_io_init();
    if (argc > 1 && strcmp(argv[1], "shared") == 0) {
        const char *model = tu_shared("models/aidreams260K.bin"), *tok = tu_shared("models/aidreams260K.tok512.bin");
        round_trip(model, tok, "aidreams260K");
        return tu_finish("test_models shared");
    }
    golden(tu_data("arch_qwen2"), tu_data("arch_qwen2.h5"), "qwen2 HF folder", "hf-qwen2");
    golden(tu_data("arch_qwen2.gguf"), tu_data("arch_qwen2.h5"), "qwen2 GGUF", "gguf-qwen2");
    golden(tu_data("arch_gpt2"), tu_data("arch_gpt2.h5"), "gpt2 HF folder", "hf-gpt2");
    golden(tu_data("arch_gpt2.gguf"), tu_data("arch_gpt2.h5"), "gpt2 GGUF", "gguf-gpt2");
    round_trip(tu_data("ref_gqa_untied.bin"), NULL, "ref_gqa_untied");
    round_trip(tu_data("arch_qwen2"), NULL, "qwen2");
    round_trip(tu_data("arch_gpt2.gguf"), NULL, "gpt2");
    checkpoint_round_trip(tu_data("arch_gpt2"));
    checkpoint_round_trip(tu_data("arch_qwen2.gguf"));
    bytes_tokenizer();
    grad_check(0);
    grad_check(1);
    rope_scaling();
    malformed();
    return tu_finish("test_models");
}
