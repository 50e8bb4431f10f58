/* model_io.c — the one place that decides a model file's format (model_io.h):
 * detection and dispatch on load (checkpoint, GGUF, Hugging Face folder,
 * llama2.c) with the model's own tokenizer source, and the choice of writer on
 * save with the llama2.c expressibility check. */
#include "model_io.h"
#include "checkpoint.h"
#include "quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

mp_model_load_params mp_model_load_params_default(void) {
    mp_model_load_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

mp_status mp_model_load_with(mp_model **out, const char *path, mp_model_load_params *p) {
    mp_model_format f = mp_model_detect(path);
    *out = NULL;
    if (p) {
        p->format = f;
        p->tok_source[0] = '\0';
        if (p->opt) memset(p->opt, 0, sizeof *p->opt);
    }
    switch (f) {
    case MP_FORMAT_CHECKPOINT: return mp_checkpoint_load(path, out, p ? p->opt : NULL, p ? p->log : NULL);
    case MP_FORMAT_GGUF: {
        mp_status st = mp_model_load_gguf(out, path);
        if (!st && p) snprintf(p->tok_source, sizeof p->tok_source, "%s", path);
        return st;
    }
    case MP_FORMAT_HF: {
        mp_status st = mp_model_load_hf(out, path);
        if (st || !p) return st;
        char t[sizeof p->tok_source];
        snprintf(t, sizeof t, "%s/tokenizer.json", path);
        if (readable(t)) snprintf(p->tok_source, sizeof p->tok_source, "%s", path);
        else if (snprintf(t, sizeof t, "%s/tokenizer.bin", path), readable(t))
            snprintf(p->tok_source, sizeof p->tok_source, "%s", t);
        return MP_OK;
    }
    case MP_FORMAT_LLAMA2C: return mp_model_load_llama2c(out, path);
    default: break;
    }
    struct stat sb;
    /* missing (or not even stat-able): the llama2.c loader's open names the reason */
    if (stat(path, &sb) != 0) return mp_model_load_llama2c(out, path);
    /* a file or folder we may not read is not "no model": say why (permission denied) */
    if (S_ISREG(sb.st_mode) && access(path, R_OK) != 0)
        return mp_error(MP_ERR_IO, "%s: cannot open the model file: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: is %s, not a model file or folder", path, mp_file_kind(sb.st_mode));
    if (access(path, R_OK | X_OK) != 0)
        return mp_error(MP_ERR_IO, "%s: is a directory that cannot be read: %s", path, strerror(errno));
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (stat(cfg, &sb) == 0 && !S_ISREG(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: is %s, not a regular file", cfg, mp_file_kind(sb.st_mode));
    if (stat(cfg, &sb) != 0 && errno != ENOENT)
        return mp_error(MP_ERR_IO, "%s: cannot open: %s", cfg, strerror(errno));
    return mp_error(MP_ERR_FORMAT, "%s: is a directory, a folder without config.json (not a Hugging Face model folder)", path);
}

mp_status mp_model_load(mp_model **out, const char *path) { return mp_model_load_with(out, path, NULL); }

mp_model_save_params mp_model_save_params_default(void) {
    mp_model_save_params p;
    memset(&p, 0, sizeof p);
    p.format = MP_FORMAT_UNKNOWN;
    p.gguf_type = MP_GGML_F32;
    return p;
}

mp_model_format mp_model_save_format(const char *path, mp_model_format requested) {
    if (requested != MP_FORMAT_UNKNOWN) return requested;
    if (ends_with(path, ".h5")) return MP_FORMAT_CHECKPOINT;
    if (ends_with(path, ".gguf")) return MP_FORMAT_GGUF;
    return MP_FORMAT_LLAMA2C;
}

mp_model_format mp_model_format_named(const char *name) {
    return !strcmp(name, "hf") ? MP_FORMAT_HF : !strcmp(name, "gguf") ? MP_FORMAT_GGUF
         : !strcmp(name, "h5") ? MP_FORMAT_CHECKPOINT : !strcmp(name, "llama2c") ? MP_FORMAT_LLAMA2C
         : MP_FORMAT_UNKNOWN;
}

long mp_gguf_type_named(const char *name) {
    return !strcmp(name, "f32") ? MP_GGML_F32 : !strcmp(name, "f16") ? MP_GGML_F16
         : !strcmp(name, "q8_0") ? MP_GGML_Q8_0 : -1;
}

/* Copies the regular file src to dst through an atomic output (the whole file
 * is read first, so src may be dst). Files over 1 GiB are refused. */
static mp_status copy_file(const char *src, const char *dst) {
    struct stat sb;
    if (stat(src, &sb) != 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", src, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return mp_error(MP_ERR_ARG, "%s: not a regular file", src);
    if (sb.st_size > (off_t)1 << 30) return mp_error(MP_ERR_ARG, "%s: larger than 1 GiB", src);
    mp_status st = MP_OK;
    mp_out o;
    mp_out_init(&o);
    size_t n = (size_t)sb.st_size;
    char *buf = mp_malloc(n ? n : 1, "tokenizer copy");
    FILE *in = fopen(src, "rb");
    if (!buf) { st = MP_ERR_NOMEM; goto cleanup; }
    if (!in) { st = mp_error(MP_ERR_IO, "%s: cannot open: %s", src, strerror(errno)); goto cleanup; }
    if (fread(buf, 1, n, in) != n) { st = mp_error(MP_ERR_IO, "%s: read failed", src); goto cleanup; }
    if ((st = mp_out_begin(&o, dst)) != MP_OK) goto cleanup;
    FILE *f = mp_out_fdopen(&o);
    if (!f || fwrite(buf, 1, n, f) != n) { st = mp_error(MP_ERR_IO, "%s: write failed: %s", dst, strerror(errno)); goto cleanup; }
    st = mp_out_commit(&o, 0);
cleanup:
    if (st) mp_out_abort(&o);
    if (in) fclose(in);
    free(buf);
    return st;
}

/* Writes the model's tokenizer into a Hugging Face folder, so that the folder
 * reloads with it: a tokenizer.json (the source file, or a folder's) as
 * dir/tokenizer.json, a llama2.c tokenizer.bin as dir/tokenizer.bin. A GGUF
 * file's tokenizer is not converted (nothing is written for it). */
static mp_status save_hf_tokenizer(const char *src, const char *dir) {
    char from[1200], to[1200];
    struct stat sb;
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(from, sizeof from, "%s/tokenizer.json", src);
        if (access(from, R_OK) != 0) {
            snprintf(from, sizeof from, "%s/tokenizer.bin", src);
            if (access(from, R_OK) != 0) return MP_OK; /* a folder without a tokenizer file */
            snprintf(to, sizeof to, "%s/tokenizer.bin", dir);
            return copy_file(from, to);
        }
        snprintf(to, sizeof to, "%s/tokenizer.json", dir);
        return copy_file(from, to);
    }
    if (mp_model_detect(src) == MP_FORMAT_GGUF) return MP_OK;
    snprintf(to, sizeof to, "%s/%s", dir, ends_with(src, ".json") ? "tokenizer.json" : "tokenizer.bin");
    return copy_file(src, to);
}

mp_status mp_model_save_with(const mp_model *m, const char *path, const mp_model_save_params *p) {
    mp_model_save_params d = mp_model_save_params_default();
    if (!p) p = &d;
    if (!path) return mp_error(MP_ERR_ARG, "save: no path given");
    mp_status ss = mp_model_sync(m); /* a model trained on a device: its newer weights */
    if (ss) return ss;
    switch (mp_model_save_format(path, p->format)) {
    case MP_FORMAT_HF: {
        mp_status st = mp_model_save_hf(m, path);
        if (st == MP_OK && p->tok_source && p->tok_source[0]) st = save_hf_tokenizer(p->tok_source, path);
        return st;
    }
    case MP_FORMAT_GGUF: return mp_model_save_gguf(m, p->tok_source, path, p->gguf_type);
    case MP_FORMAT_CHECKPOINT: return mp_checkpoint_save(path, m, p->opt, p->log);
    case MP_FORMAT_LLAMA2C: {
        const mp_config *c = &m->cfg;
        if (c->norm != MP_NORM_RMS || c->mlp != MP_MLP_SWIGLU || c->pos != MP_POS_ROPE ||
            c->d_head * c->n_head != c->d_model || c->rope_theta != 10000.0f || c->rope_scaling ||
            c->attn != MP_ATTN_SOFTMAX)
            return mp_error(MP_ERR_ARG, "%s: llama2.c files hold only RMSNorm/SwiGLU/RoPE (theta 10000, unscaled) "
                            "softmax-attention models with d_head = d_model / n_head; save this model as a .h5 "
                            "checkpoint", path);
        return mp_model_save_llama2c(m, path, p->llama2c_version);
    }
    default: return mp_error(MP_ERR_ARG, "%s: cannot save in format %d", path, (int)p->format);
    }
}

mp_status mp_model_save(const mp_model *m, const char *path) { return mp_model_save_with(m, path, NULL); }
