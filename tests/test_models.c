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
#include "tu_arch.h"
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

/* ---- golden ---- */

static void golden(const char *model_path, const char *golden_path, const char *label, const char *want_format) {
    mp_model *m = tu_load(model_path);
    if (!m) return;
    CHECK(strcmp(m->format, want_format) == 0, "%s: format %s, expected %s", label, m->format, want_format);
    /* every point and the logits within TOL; every point fired is in the file (but those added since) */
    const tu_golden_opts o = {.tol_abs = TOL, .logits_abs = TOL, .all_compared = 1};
    tu_golden(m, golden_path, label, &o, NULL);
    mp_model_free(m);
}

/* ---- round trips ---- */

static const char *tmp_path(const char *name) { return tu_tmp_path("models", name); }

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
            double d = tu_compare_models(m, r, toks, T, label);
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
        double d = tu_compare_models(m, r, toks, T, label);
        CHECK(d == 0.0, "%s -> HF folder: max |diff| %.3g (must be exact)", label, d);
        printf("%s -> HF safetensors folder -> reload: max |diff| %.3g (exact)\n", label, d);
        mp_model_free(r);
    }
    tu_rm_tree(dir);
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
    mp_grads G;
    if (!tu_param_grads(m, toks, tg, B, T, &G)) { mp_model_free(m); return; }
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
            const float h = 1e-2f;
            double fd = tu_fd_loss(m, toks, tg, B, T, &ps[k].p[i], h), an = ps[k].g[i];
            double err = tu_fd_rel_err(fd, an);
            CHECK(err < 2e-2, "%s grad %s[%zu]: analytic %.5g, finite difference %.5g", gpt2 ? "gpt2" : "qwen2",
                  ps[k].name, i, an, fd);
            if (err > worst) worst = err;
        }
    }
    printf("%s-style training gradients (biases%s) vs finite differences: worst relative error %.2e\n",
           gpt2 ? "gpt2" : "qwen2", gpt2 ? ", learned positions, GELU-tanh" : ", linear RoPE scaling", worst);
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
        double d = tu_compare_models(m, r, toks, 8, "checkpoint");
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
    double d = tu_compare_models(ma, mb, toks, 20, "rope scaling");
    CHECK(d < 1e-5, "linear scale 4 vs frequency divisors 4: |diff| %.3g", d);
    double d0 = tu_compare_models(ma, mc, toks, 20, "rope scaling");
    CHECK(d0 > 1e-3, "rope scaling changes nothing (|diff| %.3g)", d0);
    const char *out = tmp_path("rope.gguf");
    CHECK(mp_model_save_gguf(mb, NULL, out, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    mp_model *r = tu_load(out);
    if (r) {
        CHECK(r->cfg.n_rope_freqs == 4 && tu_compare_models(mb, r, toks, 20, "rope_freqs") == 0.0,
              "rope_freqs.weight round trip");
        mp_model_free(r);
    }
    CHECK(mp_model_save_gguf(ma, NULL, out, MP_GGML_F32) == MP_OK, "%s", mp_last_error());
    if ((r = tu_load(out))) {
        CHECK(r->cfg.rope_scale == 4.0f && tu_compare_models(ma, r, toks, 20, "rope_scale") == 0.0,
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
    tu_expect_load_fail(bad, "GGUF missing tensor", "blk.1.ffn_down.weight is missing", NULL);
    gguf_variant(src, bad, NULL, "blk.0.attn_k.weight", NULL);
    tu_expect_load_fail(bad, "GGUF shape mismatch", "blk.0.attn_k.weight has dims", NULL);
    gguf_variant(src, bad, NULL, NULL, "mamba");
    tu_expect_load_fail(bad, "GGUF unknown architecture", "unknown architecture \"mamba\"", NULL);
    unlink(bad);

    /* HF folders: config.json variants next to a copy of the qwen2 weights */
    const char *dir = tmp_path("badhf");
    char p[600];
    tu_model_dir(dir, tu_data("arch_qwen2/model.safetensors"), "{\"model_type\": \"qwen2\", \"hidden_size\": 32,");
    snprintf(p, sizeof p, "%s/config.json", dir);
    tu_expect_load_fail(dir, "HF bad JSON", "config.json", NULL);
    tu_write_file(p, "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2}");
    tu_expect_load_fail(dir, "HF missing hidden_size", "\"hidden_size\" is missing", NULL);
    tu_write_file(p, "{\"model_type\": \"bert\"}");
    tu_expect_load_fail(dir, "HF unknown model_type", "unknown model_type \"bert\"", NULL);
    tu_write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_hidden_layers\": 3, "
                     "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 48, "
                     "\"vocab_size\": 64}");
    tu_expect_load_fail(dir, "HF missing tensor (3 layers declared)",
                        "model.layers.2.input_layernorm.weight is missing", NULL);
    tu_write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                     "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 40, "
                     "\"vocab_size\": 64}");
    tu_expect_load_fail(dir, "HF shape mismatch", "mlp.gate_proj.weight has shape [48, 32]", NULL);
    tu_write_file(p, "{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                     "\"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"intermediate_size\": 48, "
                     "\"vocab_size\": 64}");
    tu_expect_load_fail(dir, "HF bad head counts", "not divisible by n_kv_head", NULL);
    tu_rm_tree(dir);
    mkdir(dir, 0777);
    tu_expect_load_fail(dir, "folder without config.json", "without config.json", NULL);
    rmdir(dir);
    tu_expect_load_fail(tmp_path("does-not-exist"), "missing path", "cannot open", NULL);
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
