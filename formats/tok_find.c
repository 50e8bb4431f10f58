/* tok_find.c — which tokenizer goes with a model: loading a tokenizer source by
 * its content (GGUF, Hugging Face folder or tokenizer.json, llama2.c
 * tokenizer.bin), finding a llama2.c tokenizer next to a model file, and the
 * whole discovery for a model loaded without a tokenizer named (its own, one
 * beside it, or the bytes hint). The Lua binding (mp.load, m:set_tokenizer)
 * and C programs share these. */
#include "formats.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static mp_status load_any(mp_tok **out, const char *spec, int vocab, int *absent) {
    size_t n = strlen(spec);
    *absent = 0;
    switch (mp_model_detect(spec)) {
    case MP_FORMAT_GGUF: return mp_tok_load_gguf_ex(out, spec, absent);
    case MP_FORMAT_HF: return mp_tok_load_hf_dir(out, spec);
    default: break;
    }
    if (n >= 5 && strcmp(spec + n - 5, ".json") == 0) return mp_tok_load_hf(out, spec);
    return mp_tok_load_llama2c(out, spec, vocab);
}

mp_status mp_tok_load_any(mp_tok **out, const char *spec, int vocab) {
    int absent;
    return mp_error_name_path(load_any(out, spec, vocab, &absent), spec);
}

mp_status mp_tok_load_for(mp_tok **out, const char *spec, int vocab) {
    mp_status st = mp_tok_load_any(out, spec, vocab);
    if (st) return st;
    int tv = mp_tok_vocab(*out);
    if (tv <= vocab) return MP_OK;
    mp_tok_free(*out);
    *out = NULL;
    return mp_error(MP_ERR_ARG, "%s: the tokenizer has %d tokens, more than the model's vocabulary (%d)", spec, tv,
                    vocab);
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

int mp_tok_find_beside(const char *model_path, char *out, size_t n) {
    static const char *const suffixes[] = {".tok512.bin", ".tok.bin", ".tokenizer.bin", ".tok1024.bin",
                                           ".tok4096.bin", ".tok32000.bin"};
    char tmp[1024], stem[512];
    if (!model_path || !out || n == 0) return 0;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s", model_path) >= sizeof tmp) return 0;
    const char *dir = dirname(tmp);
    if ((size_t)snprintf(out, n, "%s/tokenizer.bin", dir) < n && readable(out)) return 1;
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = '\0';
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++)
        if ((size_t)snprintf(out, n, "%s/%s%s", dir, stem, suffixes[i]) < n && readable(out)) return 1;
    out[0] = '\0';
    return 0;
}

mp_status mp_tok_discover(const char *model_path, const char *own_source, const char *hint, int vocab,
                          mp_tok_found *out) {
    memset(out, 0, sizeof *out);
    if (own_source && own_source[0]) { /* 1. the model file's own: a failure leaves the model without one */
        int absent = 0;
        mp_status st = mp_error_name_path(load_any(&out->tok, own_source, vocab, &absent), own_source);
        if (!st) {
            out->origin = MP_TOK_FROM_OWN;
            snprintf(out->source, sizeof out->source, "%s", own_source);
            return MP_OK;
        }
        out->tok = NULL;
        if (!absent) {
            out->own_failed = 1;
            snprintf(out->why, sizeof out->why, "%s", mp_last_error());
        }
    } else if (!hint || !hint[0]) { /* 2. a tokenizer file beside the model (not with a checkpoint's own hint) */
        char found[1024];
        if (mp_tok_find_beside(model_path, found, sizeof found)) {
            mp_status st = mp_tok_load_for(&out->tok, found, vocab);
            if (st) return st;
            out->origin = MP_TOK_FROM_BESIDE;
            snprintf(out->source, sizeof out->source, "%s", found);
            return MP_OK;
        }
    }
    if (hint && strcmp(hint, "bytes") == 0) out->origin = MP_TOK_FROM_BYTES; /* 3. a byte-level checkpoint */
    return MP_OK;
}
