/* tok_find.c — which tokenizer goes with a model: loading a tokenizer source by
 * its content (GGUF, Hugging Face folder or tokenizer.json, llama2.c
 * tokenizer.bin) and finding a llama2.c tokenizer next to a model file. The
 * Lua binding (mp.load, m:set_tokenizer) and C programs share these. */
#include "model.h"
#include "tok.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static mp_status load_any(mp_tok **out, const char *spec, int vocab) {
    size_t n = strlen(spec);
    switch (mp_model_detect(spec)) {
    case MP_FORMAT_GGUF: return mp_tok_load_gguf(out, spec);
    case MP_FORMAT_HF: return mp_tok_load_hf_dir(out, spec);
    default: break;
    }
    if (n >= 5 && strcmp(spec + n - 5, ".json") == 0) return mp_tok_load_hf(out, spec);
    return mp_tok_load_llama2c(out, spec, vocab);
}

mp_status mp_tok_load_any(mp_tok **out, const char *spec, int vocab) {
    return mp_error_name_path(load_any(out, spec, vocab), spec);
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
