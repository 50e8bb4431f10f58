/* test_model_io.c — the one load/save dispatcher (io/model_io.h): each format
 * written by mp_model_save_with (checkpoint with optimizer state and loss
 * curve, GGUF, Hugging Face folder, llama2.c v1) is detected and read back by
 * mp_model_load_with with the same logits; the model's own tokenizer source
 * (GGUF file, HF folder with tokenizer.json or its tokenizer.bin); an explicit
 * format wins over the path's ending; the choice by path; the llama2.c refusal
 * (scaled RoPE included) leaving no file; and the errors for a missing path
 * and a folder without config.json. */
#include "model_io.h"
#include "quant.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char DIR_[256];

static const char *tmp(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", DIR_, name);
    return p;
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f) { fputs("x", f); fclose(f); }
}

enum { T = 6 };
static const int TOK[T] = {1, 7, 3, 0, 12, 5};

static double logit_diff(const mp_model *a, const mp_model *b) {
    int V = a->cfg.vocab;
    float *la = malloc(sizeof(float) * T * V), *lb = malloc(sizeof(float) * T * V);
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_ALL;
    double d = 1e30;
    if (mp_model_forward(a, TOK, 1, T, &fp, la) == MP_OK && mp_model_forward(b, TOK, 1, T, &fp, lb) == MP_OK)
        d = tu_max_abs_diff(la, lb, (size_t)T * V);
    free(la);
    free(lb);
    return d;
}

/* Loads path and checks its detected format, tokenizer source and logits. */
static void check_load(const mp_model *ref, const char *path, mp_model_format want, const char *want_tok,
                       const char *label) {
    mp_model *m = NULL;
    mp_model_load_params lp = mp_model_load_params_default();
    CHECK(mp_model_load_with(&m, path, &lp) == MP_OK, "%s: %s", label, mp_last_error());
    CHECK(lp.format == want, "%s: detected format %d, expected %d", label, (int)lp.format, (int)want);
    CHECK(strcmp(lp.tok_source, want_tok) == 0, "%s: tokenizer source '%s', expected '%s'", label, lp.tok_source,
          want_tok);
    if (m) CHECK(logit_diff(ref, m) <= 1e-5, "%s: logits differ by %.3g", label, logit_diff(ref, m));
    mp_model_free(m);
}

int main(void) {
    mp_init();
    snprintf(DIR_, sizeof DIR_, "/tmp/mp_test_model_io_%d", (int)getpid());
    mkdir(DIR_, 0777);
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = 1; c.d_head = 8; c.d_mlp = 32;
    c.vocab = 20; c.ctx = 16;
    mp_model *m = NULL;
    if (mp_model_new_random(&m, &c, 3, 0.2f) != MP_OK) { CHECK(0, "%s", mp_last_error()); return tu_finish("test_model_io"); }

    /* the choice by path */
    CHECK(mp_model_save_format("a/b.h5", MP_FORMAT_UNKNOWN) == MP_FORMAT_CHECKPOINT &&
              mp_model_save_format("b.gguf", MP_FORMAT_UNKNOWN) == MP_FORMAT_GGUF &&
              mp_model_save_format("b.bin", MP_FORMAT_UNKNOWN) == MP_FORMAT_LLAMA2C &&
              mp_model_save_format("b", MP_FORMAT_UNKNOWN) == MP_FORMAT_LLAMA2C &&
              mp_model_save_format("b.h5", MP_FORMAT_LLAMA2C) == MP_FORMAT_LLAMA2C, "format by path");

    /* checkpoint: optimizer state and loss curve travel */
    mp_adamw o;
    memset(&o, 0, sizeof o);
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 0.005f;
    CHECK(mp_adamw_init(&o, &hp, mp_config_n_params(&c)) == MP_OK, "%s", mp_last_error());
    o.step = 7;
    if (o.m) o.m[3] = 0.25f;
    mp_train_log log;
    memset(&log, 0, sizeof log);
    mp_train_log_add(&log, 1, 3.5f, 0.001f, 64, 0.1);
    mp_train_log_add(&log, 2, 3.25f, 0.002f, 128, 0.2);
    mp_model_save_params sp = mp_model_save_params_default();
    sp.opt = &o;
    sp.log = &log;
    CHECK(mp_model_save_with(m, tmp("m.h5"), &sp) == MP_OK, "%s", mp_last_error());
    {
        mp_model *r = NULL;
        mp_adamw ro;
        mp_train_log rl;
        memset(&rl, 0, sizeof rl);
        mp_model_load_params lp = mp_model_load_params_default();
        lp.opt = &ro;
        lp.log = &rl;
        CHECK(mp_model_load_with(&r, tmp("m.h5"), &lp) == MP_OK, "%s", mp_last_error());
        CHECK(lp.format == MP_FORMAT_CHECKPOINT && lp.tok_source[0] == '\0', "checkpoint detected, no tokenizer");
        CHECK(ro.n == o.n && ro.step == 7 && ro.m && ro.m[3] == 0.25f && fabsf(ro.hp.lr - 0.005f) < 1e-9f,
              "optimizer state read back (n %zu step %ld)", ro.n, ro.step);
        CHECK(rl.n == 2 && rl.loss[1] == 3.25f && rl.step[1] == 2, "loss curve read back (n %zu)", rl.n);
        if (r) CHECK(logit_diff(m, r) == 0.0, "checkpoint logits exact");
        mp_adamw_free(&ro);
        mp_train_log_free(&rl);
        mp_model_free(r);
    }
    mp_adamw_free(&o);
    mp_train_log_free(&log);

    /* GGUF (its own tokenizer source is itself), llama2.c v1, HF folder */
    CHECK(mp_model_save(m, tmp("m.gguf")) == MP_OK, "%s", mp_last_error());
    check_load(m, tmp("m.gguf"), MP_FORMAT_GGUF, tmp("m.gguf"), "gguf");
    sp = mp_model_save_params_default();
    sp.llama2c_version = 1;
    CHECK(mp_model_save_with(m, tmp("m.bin"), &sp) == MP_OK, "%s", mp_last_error());
    check_load(m, tmp("m.bin"), MP_FORMAT_LLAMA2C, "", "llama2c v1");
    sp = mp_model_save_params_default();
    sp.format = MP_FORMAT_HF;
    CHECK(mp_model_save_with(m, tmp("hf"), &sp) == MP_OK, "%s", mp_last_error());
    check_load(m, tmp("hf"), MP_FORMAT_HF, "", "hf without tokenizer");
    touch(tmp("hf/tokenizer.bin"));
    check_load(m, tmp("hf"), MP_FORMAT_HF, tmp("hf/tokenizer.bin"), "hf with tokenizer.bin");
    touch(tmp("hf/tokenizer.json"));
    check_load(m, tmp("hf"), MP_FORMAT_HF, tmp("hf"), "hf with tokenizer.json (preferred)");

    /* an explicit format wins over the path's ending */
    sp = mp_model_save_params_default();
    sp.format = MP_FORMAT_CHECKPOINT;
    CHECK(mp_model_save_with(m, tmp("ckpt.bin"), &sp) == MP_OK, "%s", mp_last_error());
    check_load(m, tmp("ckpt.bin"), MP_FORMAT_CHECKPOINT, "", "checkpoint named .bin");
    sp.format = MP_FORMAT_GGUF;
    sp.gguf_type = MP_GGML_F16;
    CHECK(mp_model_save_with(m, tmp("g.h5"), &sp) == MP_OK, "%s", mp_last_error());
    CHECK(mp_model_detect(tmp("g.h5")) == MP_FORMAT_GGUF, "GGUF named .h5");

    /* llama2.c refuses what it cannot hold, and writes nothing */
    mp_rope_scaling_params rs = mp_rope_scaling_params_default();
    rs.type = MP_ROPE_SCALING_PI;
    rs.factor = 2.0f;
    CHECK(mp_model_set_rope_scaling(m, &rs) == MP_OK, "%s", mp_last_error());
    mp_status st = mp_model_save(m, tmp("scaled.bin"));
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "scaled.bin: llama2.c files hold only") &&
              strstr(mp_last_error(), "unscaled") && access(tmp("scaled.bin"), F_OK) != 0,
          "scaled RoPE refused as llama2.c: %s", mp_last_error());
    mp_model_free(m);
    c.norm = MP_NORM_LAYER;
    CHECK(mp_model_new_random(&m, &c, 3, 0.2f) == MP_OK, "%s", mp_last_error());
    st = mp_model_save(m, tmp("ln.bin"));
    CHECK(st == MP_ERR_ARG && access(tmp("ln.bin"), F_OK) != 0, "LayerNorm refused as llama2.c");

    /* errors name the path */
    mp_model *x = NULL;
    mp_model_load_params lp = mp_model_load_params_default();
    st = mp_model_load_with(&x, tmp("missing.bin"), &lp);
    CHECK(st == MP_ERR_IO && strstr(mp_last_error(), "missing.bin: cannot open") && !x &&
              lp.format == MP_FORMAT_UNKNOWN, "missing: %s", mp_last_error());
    mkdir(tmp("empty"), 0777);
    st = mp_model_load(&x, tmp("empty"));
    CHECK(st == MP_ERR_FORMAT && strstr(mp_last_error(), "a folder without config.json") && !x, "folder: %s",
          mp_last_error());
    mp_model_free(m);

    const char *files[] = {"m.h5", "m.gguf", "m.bin", "hf/config.json", "hf/model.safetensors", "hf/tokenizer.bin",
                           "hf/tokenizer.json", "ckpt.bin", "g.h5"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(tmp(files[i]));
    rmdir(tmp("hf"));
    rmdir(tmp("empty"));
    rmdir(DIR_);
    return tu_finish("test_model_io");
}
