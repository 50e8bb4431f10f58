/* fuzz_sae_io.c — fuzz target for the SAELens folder loader (formats/sae_io.c:
 * cfg.json's keys and forms, then the weights' names, shapes and dtypes): the
 * input is a 4-byte little-endian length L, L bytes of cfg.json, and the
 * safetensors file. An accepted SAE must have weights of its declared shapes
 * (every float is read); a refusal must name the input. Built two ways:
 *   libFuzzer: clang -g -O1 -fsanitize=fuzzer,address,undefined -Ibase -Iruntime -Iformats \
 *              tests/fuzz_sae_io.c formats/sae_io.c formats/safetensors.c runtime/sae.c \
 *              base/json.c base/mp_common.c base/mp_out.c -ljansson -lopenblas -lgomp -lm
 *   plain:     with tests/fuzz_driver.c (a bounded mutation loop, run by ctest;
 *              the seed tests/data/sae/fuzz_seed.bin is the topk_k5 golden). */
#include "sae_io.h"

#include <stdlib.h>
#include <string.h>

long fuzz_accepted;   /* inputs the loader accepted (reported by fuzz_driver.c) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    size_t L = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    if (L > size - 4) L = size - 4;
    mp_sae *s = NULL;
    if (mp_sae_load_memory(&s, (const char *)data + 4, L, data + 4 + L, size - 4 - L, "fuzz") == MP_OK) {
        fuzz_accepted++;
        volatile double sink = 0;
        if (s->d_in < 1 || s->d_sae < 1 || (s->arch == MP_SAE_TOPK && (s->k < 1 || s->k > s->d_sae))) abort();
        if (s->n_floats != 2 * (size_t)s->d_in * s->d_sae + s->d_sae + s->d_in + (s->threshold ? s->d_sae : 0)) abort();
        for (size_t i = 0; i < s->n_floats; i++) sink += s->block[i];
        /* one row through the forward when small */
        if ((size_t)s->d_in * s->d_sae <= (1u << 20)) {
            float *x = calloc((size_t)s->d_in * 2 + s->d_sae, sizeof(float));
            if (x) {
                for (int i = 0; i < s->d_in; i++) x[i] = (float)(i % 7) - 3.0f;
                if (mp_sae_forward(s, x, 1, x + s->d_in, x + 2 * s->d_in) == MP_OK) sink += x[s->d_in];
                free(x);
            }
        }
        (void)sink;
        mp_sae_free(s);
    } else if (s) {
        abort();                                                      /* no SAE on failure */
    } else if (strncmp(mp_last_error(), "fuzz/", 5)) {
        abort();                                                      /* errors name the input */
    }
    return 0;
}
