/* fuzz_safetensors.c — fuzz target for the safetensors reader and the strict
 * JSON parser (formats/safetensors.c, base/json.c): the input is parsed as
 * a safetensors file (accepted tensors must lie inside the buffer and are
 * decoded) and, independently, as a JSON document whose whole tree is walked.
 * Built two ways:
 *   libFuzzer: clang -g -O1 -fsanitize=fuzzer,address,undefined -Ibase -Iruntime -Iformats \
 *              tests/fuzz_safetensors.c formats/safetensors.c base/json.c runtime/quant.c \
 *              base/mp_common.c base/mp_out.c -ljansson -lgsl -lm
 *   plain:     with tests/fuzz_driver.c (a bounded mutation loop, run by ctest). */
#include "json.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t walk(const mp_json *v, int depth) {
    if (depth > MP_JSON_MAX_DEPTH + 1) abort();
    uint64_t h = (uint64_t)mp_json_type_of(v);
    size_t len;
    int64_t iv;
    const char *s = mp_json_string(v, &len);
    if (s && s[len] != 0) abort();
    h += len * (s != NULL) + (uint64_t)mp_json_bool(v) + (uint64_t)(mp_json_int64(v, &iv) == 0);
    if (mp_json_type_of(v) == MP_JSON_OBJECT) {
        mp_json_member m;
        size_t n = 0;
        for (mp_json_first(v, &m); m.value; mp_json_next(&m), n++) {
            if (!m.key || m.key[m.key_len] != 0 || m.index != n) abort();
            if (strlen(m.key) == m.key_len && mp_json_get(v, m.key) != m.value) abort();   /* keys are unique */
            h += walk(m.value, depth + 1);
        }
        if (n != mp_json_len(v)) abort();
    } else
        for (size_t i = 0; i < mp_json_len(v); i++) h += walk(mp_json_at(v, i), depth + 1);
    return h;
}

long fuzz_accepted;   /* inputs the parser accepted (reported by fuzz_driver.c) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    volatile uint64_t sink = 0;
    mp_safetensors *st = NULL;
    if (mp_safetensors_open_memory(data, size, "fuzz.safetensors", &st) == MP_OK) {
        fuzz_accepted++;
        for (size_t i = 0; i < mp_safetensors_n_tensors(st); i++) {
            const mp_st_tensor *t = mp_safetensors_tensor_at(st, i);
            const uint8_t *p = t->data;
            if (p < data || p > data + size || t->n_bytes > (uint64_t)(data + size - p)) abort();
            if (mp_safetensors_find(st, t->name) != t) abort();
            if (t->n_elements > (1u << 22)) continue;
            float *dst = malloc((size_t)t->n_elements * sizeof(float) + 1);
            if (!dst) continue;
            if (mp_safetensors_read_f32(st, t, dst, t->n_elements) == MP_OK && t->n_elements) sink += dst[0] == dst[0];
            free(dst);
        }
        sink += mp_safetensors_f32_bytes(st) + (mp_safetensors_metadata(st, "format") != NULL);
        mp_safetensors_close(st);
    } else if (strncmp(mp_last_error(), "fuzz.safetensors", 16)) {
        abort();                                                      /* errors name the file */
    }
    mp_json_doc *doc = NULL;
    if (mp_json_parse((const char *)data, size, "fuzz.json", &doc) == MP_OK) {
        sink += walk(mp_json_root(doc), 0);
        mp_json_free(doc);
    }
    (void)sink;
    return 0;
}
