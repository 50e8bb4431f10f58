/* fuzz_gguf.c — fuzz target for the GGUF reader (formats/gguf.c): parses the
 * input, and when it is accepted walks every metadata value, checks the
 * invariants the reader promises (every tensor inside the buffer, lookups
 * consistent) and dequantises every tensor. Built two ways:
 *   libFuzzer: clang -g -O1 -fsanitize=fuzzer,address,undefined \
 *              -Ibase -Iruntime -Iformats tests/fuzz_gguf.c formats/gguf.c runtime/quant.c base/mp_common.c -lgsl -lm
 *   plain:     with tests/fuzz_driver.c (a bounded mutation loop, run by ctest). */
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t walk(const mp_gguf_value *v, int depth) {
    uint64_t h = (uint64_t)v->type;
    if (depth > 16) abort();
    if (v->type == MP_GGUF_STRING) return h + v->v.s.len + (v->v.s.str[v->v.s.len] == 0);
    if (v->type != MP_GGUF_ARRAY) return h + v->v.u;
    const void *d = v->v.arr.data;
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        switch (v->v.arr.elem_type) {
        case MP_GGUF_STRING: h += ((const mp_gguf_string *)d)[i].len; break;
        case MP_GGUF_ARRAY: h += walk(&((const mp_gguf_value *)d)[i], depth + 1); break;
        case MP_GGUF_UINT8: case MP_GGUF_INT8: case MP_GGUF_BOOL: h += ((const uint8_t *)d)[i]; break;
        case MP_GGUF_FLOAT64: case MP_GGUF_UINT64: case MP_GGUF_INT64: h += ((const uint64_t *)d)[i]; break;
        case MP_GGUF_UINT16: case MP_GGUF_INT16: h += ((const uint16_t *)d)[i]; break;
        default: h += ((const uint32_t *)d)[i]; break;
        }
    }
    return h;
}

long fuzz_accepted;   /* inputs the parser accepted (reported by fuzz_driver.c) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mp_gguf *g = NULL;
    if (mp_gguf_open_memory(data, size, "fuzz.gguf", &g) != MP_OK) {
        if (strncmp(mp_last_error(), "fuzz.gguf", 9)) abort();     /* errors name the file */
        return 0;
    }
    volatile uint64_t sink = 0;
    fuzz_accepted++;
    for (size_t i = 0; i < mp_gguf_n_kv(g); i++) {
        const char *key = mp_gguf_kv_key(g, i);
        if (mp_gguf_get(g, key) != mp_gguf_kv_value(g, i)) abort();
        sink += walk(mp_gguf_kv_value(g, i), 0);
        int64_t iv; double fv; int bv; const char *sv; const mp_gguf_string *ss; const float *fa; uint64_t n;
        mp_gguf_get_int(g, key, &iv);
        mp_gguf_get_float(g, key, &fv);
        mp_gguf_get_bool(g, key, &bv);
        mp_gguf_get_str(g, key, &sv);
        if (mp_gguf_get_str_array(g, key, &ss, &n) == MP_GGUF_FOUND && n) sink += ss[n - 1].len;
        if (mp_gguf_get_f32_array(g, key, &fa, &n) == MP_GGUF_FOUND && n) sink += fa[n - 1] == fa[n - 1];
    }
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        if (p < data || p > data + size || t->n_bytes > (uint64_t)(data + size - p)) abort();
        if (mp_gguf_find_tensor(g, t->name) != t) abort();
        if (t->n_elements > (1u << 22)) continue;                     /* keep iterations fast */
        float *dst = malloc((size_t)t->n_elements * sizeof(float) + 1);
        if (!dst) continue;
        if (mp_gguf_read_f32(g, t, dst, t->n_elements) == MP_OK && t->n_elements) sink += (uint64_t)(dst[0] == dst[0]);
        free(dst);
    }
    sink += mp_gguf_f32_bytes(g) + mp_gguf_data_bytes(g);
    (void)sink;
    mp_gguf_close(g);
    return 0;
}
