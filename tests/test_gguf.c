/* test_gguf.c — GGUF reader and writer (formats/gguf.c, gguf_write.c):
 * a writer -> reader round trip with every metadata type and tensors of every
 * type; tensors made by a row callback during the write (in order, across
 * blocks, a failing callback's message, the planned file size); the independent fixture tests/data/gguf_fixture.gguf (GGUF v2,
 * alignment 64, written by tests/data/gguf_fixture.py with numpy-dequantised
 * NAME.expected companions); and malformed files built byte by byte here —
 * every truncation of a valid file, bad magic/version, absurd counts and
 * lengths, offsets, alignment, types, dims, duplicates, overflow — each of
 * which must fail with MP_ERR_FORMAT and a message naming the problem. */
#include "gguf.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a byte builder for hand-made files ---- */

typedef struct { unsigned char *p; size_t n, cap; } buf;

static void b_put(buf *b, const void *d, size_t n) {
    if (!n) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t x) { b_put(b, &x, 4); }
static void b_u64(buf *b, uint64_t x) { b_put(b, &x, 8); }
static void b_str(buf *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_pad(buf *b, size_t align) { while (b->n % align) b_put(b, "", 1); }
static void b_zeros(buf *b, size_t n) { for (size_t i = 0; i < n; i++) b_put(b, "\x5a", 1); }

static void hdr(buf *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, nt);
    b_u64(b, nkv);
}
static void kv_u32(buf *b, const char *key, uint32_t v) { b_str(b, key); b_u32(b, MP_GGUF_UINT32); b_u32(b, v); }
static void tinfo(buf *b, const char *name, uint32_t nd, const uint64_t *dims, uint32_t type, uint64_t off) {
    b_str(b, name);
    b_u32(b, nd);
    for (uint32_t i = 0; i < nd; i++) b_u64(b, dims[i]);
    b_u32(b, type);
    b_u64(b, off);
}

/* Opens b from an exact-size heap copy (so ASan sees any overread). */
static mp_status open_buf(const buf *b, mp_gguf **g) {
    unsigned char *copy = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(copy, b->p, b->n);
    mp_status st = mp_gguf_open_memory(copy, b->n, "bad.gguf", g);
    if (st == MP_OK) {
        /* exercise every tensor read too */
        for (size_t i = 0; i < mp_gguf_n_tensors(*g); i++) {
            const mp_gguf_tensor *t = mp_gguf_tensor_at(*g, i);
            float *dst = malloc((size_t)t->n_elements * 4 + 4);
            mp_gguf_read_f32(*g, t, dst, t->n_elements);
            free(dst);
        }
        mp_gguf_close(*g);
        *g = NULL;
    }
    free(copy);
    return st;
}

static void expect_fail(buf *b, const char *needle, const char *label) {
    mp_gguf *g = NULL;
    mp_status st = open_buf(b, &g);
    CHECK(st == MP_ERR_FORMAT, "%s: expected a format error, got %s", label, mp_status_name(st));
    if (st == MP_ERR_FORMAT)
        CHECK(strstr(mp_last_error(), needle) != NULL, "%s: message lacks '%s': %s", label, needle, mp_last_error());
    if (st) printf("  %-28s -> %s\n", label, mp_last_error());
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* A small valid file: one kv, tensors 'a' F32 [8] and 'b' F32 [4,2]. */
static void valid_file(buf *b) {
    uint64_t d1[1] = {8}, d2[2] = {4, 2};
    hdr(b, 3, 2, 1);
    kv_u32(b, "general.alignment", 32);
    tinfo(b, "a", 1, d1, MP_GGML_F32, 0);
    tinfo(b, "b", 2, d2, MP_GGML_F32, 32);
    b_pad(b, 32);
    for (int i = 0; i < 16; i++) { float f = (float)i; b_put(b, &f, 4); }
}

static void test_malformed(void) {
    buf b = {0};
    uint64_t d1[1] = {8};
    printf("malformed files:\n");

    /* Every prefix of a valid file: an error until the last tensor's data is whole. */
    valid_file(&b);
    size_t full = b.n, need = full;   /* data of 'b' ends at the end of the file */
    int wrong = 0, ok = 0;
    for (size_t len = 0; len <= full; len++) {
        buf p = {0};
        b_put(&p, b.p, len);
        mp_gguf *g = NULL;
        mp_status st = open_buf(&p, &g);
        if (len < need ? st != MP_ERR_FORMAT : st != MP_OK) {
            if (wrong++ < 3) fprintf(stderr, "prefix %zu: %s %s\n", len, mp_status_name(st), mp_last_error());
        }
        if (len < need && st == MP_ERR_FORMAT && !strstr(mp_last_error(), "bad.gguf")) wrong++;
        ok += st == MP_OK;
        free(p.p);
    }
    CHECK(wrong == 0, "%d prefixes of a %zu-byte file misbehaved", wrong, full);
    CHECK(ok == 1, "only the whole file opens (%d did)", ok);
    free(b.p);
    b = (buf){0};

    b_put(&b, "GGUG", 4); b_u32(&b, 3); b_u64(&b, 0); b_u64(&b, 0);
    expect_fail(&b, "not a GGUF file", "wrong magic");
    hdr(&b, 1, 0, 0);
    expect_fail(&b, "version 1", "version 1");
    hdr(&b, 4, 0, 0);
    expect_fail(&b, "unsupported GGUF version 4", "version 4");
    hdr(&b, 0x03000000u, 0, 0);
    expect_fail(&b, "big-endian", "big-endian");
    hdr(&b, 3, 1ull << 62, 0);
    expect_fail(&b, "tensors but only", "2^62 tensors");
    hdr(&b, 3, 0, 1ull << 62);
    expect_fail(&b, "metadata entries but only", "2^62 kv");
    hdr(&b, 3, 0, 1); b_u64(&b, 1ull << 60); b_zeros(&b, 64);
    expect_fail(&b, "past the end of the file", "key of length 2^60");
    hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, MP_GGUF_STRING); b_u64(&b, 1ull << 60); b_zeros(&b, 64);
    expect_fail(&b, "past the end of the file", "string value of length 2^60");
    hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, MP_GGUF_ARRAY); b_u32(&b, MP_GGUF_UINT32); b_u64(&b, 1ull << 62);
    b_zeros(&b, 64);
    expect_fail(&b, "cannot fit", "array of 2^62 uint32");
    hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, MP_GGUF_ARRAY); b_u32(&b, MP_GGUF_STRING); b_u64(&b, 1ull << 62);
    b_zeros(&b, 64);
    expect_fail(&b, "cannot fit", "array of 2^62 strings");
    hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, 13); b_u32(&b, 0);
    expect_fail(&b, "unknown value type 13", "unknown value type");
    hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, MP_GGUF_ARRAY); b_u32(&b, 77); b_u64(&b, 1); b_zeros(&b, 8);
    expect_fail(&b, "unknown element type 77", "unknown array element type");
    hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, MP_GGUF_BOOL); b_put(&b, "\x02", 1);
    expect_fail(&b, "bool byte 2", "bool value 2");
    hdr(&b, 3, 0, 1); b_str(&b, "k");
    b_u32(&b, MP_GGUF_ARRAY);
    for (int i = 0; i < 10; i++) { b_u32(&b, MP_GGUF_ARRAY); b_u64(&b, 1); }
    b_u32(&b, MP_GGUF_UINT8); b_u64(&b, 0);
    expect_fail(&b, "nested deeper", "nested arrays");
    hdr(&b, 3, 0, 1); b_str(&b, ""); b_u32(&b, MP_GGUF_UINT8); b_put(&b, "\1", 1); b_zeros(&b, 8);
    expect_fail(&b, "is empty", "empty key");
    hdr(&b, 3, 0, 1); b_u64(&b, 3); b_put(&b, "a\0b", 3); b_u32(&b, MP_GGUF_UINT8); b_put(&b, "\1", 1);
    expect_fail(&b, "NUL byte", "key with NUL");
    hdr(&b, 3, 0, 2); kv_u32(&b, "x.y", 1); kv_u32(&b, "x.y", 2);
    expect_fail(&b, "duplicate metadata key 'x.y'", "duplicate key");
    hdr(&b, 3, 0, 1); b_str(&b, "general.alignment"); b_u32(&b, MP_GGUF_UINT64); b_u64(&b, 32);
    expect_fail(&b, "must be uint32", "alignment of type u64");
    hdr(&b, 3, 0, 1); kv_u32(&b, "general.alignment", 48);
    expect_fail(&b, "power of two", "alignment 48");
    hdr(&b, 3, 0, 1); kv_u32(&b, "general.alignment", 0);
    expect_fail(&b, "power of two", "alignment 0");

    /* tensor infos */
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, d1, MP_GGML_F32, 1ull << 40); b_pad(&b, 32); b_zeros(&b, 32);
    expect_fail(&b, "tensor 'w' data [offset", "offset past the end");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, (uint64_t[]){1024}, MP_GGML_F32, 0); b_pad(&b, 32); b_zeros(&b, 32);
    expect_fail(&b, "runs past the end of the file", "data past the end");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, d1, MP_GGML_F32, 16); b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "not a multiple of the alignment 32", "misaligned offset");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, d1, 99, 0); b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "unknown ggml type 99", "unknown ggml type");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, d1, 4, 0); b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "unknown ggml type 4", "removed ggml type 4");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 5, (uint64_t[]){1, 1, 1, 1, 1}, MP_GGML_F32, 0); b_pad(&b, 32); b_zeros(&b, 32);
    expect_fail(&b, "5 dimensions", "n_dims 5");
    hdr(&b, 3, 2, 0); tinfo(&b, "w", 1, d1, MP_GGML_F32, 0); tinfo(&b, "w", 1, d1, MP_GGML_F32, 32);
    b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "duplicate tensor name 'w'", "duplicate tensor");
    hdr(&b, 3, 2, 0); tinfo(&b, "u", 1, d1, MP_GGML_F32, 0); tinfo(&b, "v", 1, d1, MP_GGML_F32, 0);
    b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "overlap", "overlapping tensors");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 3, (uint64_t[]){1ull << 32, 1ull << 32, 4}, MP_GGML_F32, 0);
    b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "overflows", "shape overflow");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 2, (uint64_t[]){1ull << 31, 1ull << 31}, MP_GGML_F32, 0);
    b_pad(&b, 32); b_zeros(&b, 64);
    expect_fail(&b, "overflow a 64-bit byte count", "2^62 elements");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, (uint64_t[]){UINT64_MAX}, MP_GGML_F32, 0); b_pad(&b, 32);
    expect_fail(&b, "negative as int64", "dimension 2^64-1");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, (uint64_t[]){48}, MP_GGML_Q8_0, 0); b_pad(&b, 32); b_zeros(&b, 128);
    expect_fail(&b, "not a multiple of the Q8_0 block size 32", "partial Q8_0 row");
    hdr(&b, 3, 1, 0); tinfo(&b, "", 1, d1, MP_GGML_F32, 0); b_pad(&b, 32); b_zeros(&b, 32);
    expect_fail(&b, "name is empty", "empty tensor name");
    hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, d1, MP_GGML_F32, 0);   /* no padding, no data */
    expect_fail(&b, "truncated", "missing data section");

    /* Unsupported but well-formed types open; reading names tensor and type. */
    hdr(&b, 3, 2, 0);
    tinfo(&b, "blk.0.ffn_down.weight", 1, (uint64_t[]){256}, MP_GGML_Q5_K, 0);
    tinfo(&b, "blk.0.iq", 1, (uint64_t[]){256}, MP_GGML_IQ2_XXS, 192);
    b_pad(&b, 32);
    b_zeros(&b, 192 + 66);
    mp_gguf *g = NULL;
    CHECK(mp_gguf_open_memory(b.p, b.n, "q5k.gguf", &g) == MP_OK, "Q5_K file opens: %s", mp_last_error());
    if (g) {
        float dst[256];
        mp_status st = mp_gguf_read_tensor(g, "blk.0.ffn_down.weight", dst, 256);
        CHECK(st == MP_ERR_FORMAT && strstr(mp_last_error(), "'blk.0.ffn_down.weight'") &&
              strstr(mp_last_error(), "unsupported tensor type Q5_K"), "Q5_K read: %s", mp_last_error());
        printf("  %-28s -> %s\n", "read of a Q5_K tensor", mp_last_error());
        st = mp_gguf_read_tensor(g, "blk.0.iq", dst, 256);
        CHECK(st == MP_ERR_FORMAT && strstr(mp_last_error(), "IQ2_XXS"), "IQ2_XXS read: %s", mp_last_error());
        CHECK(mp_gguf_read_tensor(g, "nope", dst, 256) == MP_ERR_FORMAT && strstr(mp_last_error(), "no tensor 'nope'"),
              "missing tensor: %s", mp_last_error());
        CHECK(mp_gguf_read_tensor(g, "blk.0.iq", dst, 255) == MP_ERR_ARG, "size mismatch is MP_ERR_ARG");
        mp_gguf_close(g);
    }
    free(b.p);
}

/* ---- writer -> reader round trip ---- */

static void test_round_trip(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    mp_gguf_writer *w = NULL;
    CHECK(mp_gguf_writer_new(&w) == MP_OK, "writer init");
    mp_gguf_value v;
    /* every scalar type */
    v = (mp_gguf_value){.type = MP_GGUF_UINT8, .v.u = 250}; mp_gguf_writer_set(w, "t.u8", &v);
    v = (mp_gguf_value){.type = MP_GGUF_INT8, .v.i = -100}; mp_gguf_writer_set(w, "t.i8", &v);
    v = (mp_gguf_value){.type = MP_GGUF_UINT16, .v.u = 65000}; mp_gguf_writer_set(w, "t.u16", &v);
    v = (mp_gguf_value){.type = MP_GGUF_INT16, .v.i = -30000}; mp_gguf_writer_set(w, "t.i16", &v);
    mp_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    mp_gguf_writer_set_i32(w, "t.i32", -2000000000);
    mp_gguf_writer_set_u64(w, "t.u64", UINT64_MAX - 1);
    v = (mp_gguf_value){.type = MP_GGUF_INT64, .v.i = INT64_MIN + 3}; mp_gguf_writer_set(w, "t.i64", &v);
    mp_gguf_writer_set_f32(w, "t.f32", 1e-6f);
    v = (mp_gguf_value){.type = MP_GGUF_FLOAT64, .v.f = -2.718281828459045}; mp_gguf_writer_set(w, "t.f64", &v);
    mp_gguf_writer_set_bool(w, "t.bool", 1);
    mp_gguf_writer_set_str(w, "t.str", "caf\xc3\xa9 \xe2\x98\x83");
    mp_gguf_writer_set_str(w, "t.empty", "");
    mp_gguf_writer_set_str(w, "t.replaced", "old");
    mp_gguf_writer_set_str(w, "t.replaced", "new");
    /* arrays of every scalar type */
    uint8_t a_u8[3] = {1, 2, 255}; int8_t a_i8[2] = {-128, 127}; uint16_t a_u16[2] = {0, 65535};
    int16_t a_i16[2] = {-32768, 5}; uint32_t a_u32[2] = {7, 4294967295u}; int32_t a_i32[4] = {-1, 0, 1, 2147483647};
    uint64_t a_u64[1] = {1ull << 63}; int64_t a_i64[2] = {INT64_MIN, INT64_MAX}; float a_f32[3] = {0.5f, -1e30f, 3.25f};
    double a_f64[2] = {1e300, -1e-300}; uint8_t a_b[3] = {1, 0, 1};
    mp_gguf_writer_set_array(w, "a.u8", MP_GGUF_UINT8, a_u8, 3);
    mp_gguf_writer_set_array(w, "a.i8", MP_GGUF_INT8, a_i8, 2);
    mp_gguf_writer_set_array(w, "a.u16", MP_GGUF_UINT16, a_u16, 2);
    mp_gguf_writer_set_array(w, "a.i16", MP_GGUF_INT16, a_i16, 2);
    mp_gguf_writer_set_array(w, "a.u32", MP_GGUF_UINT32, a_u32, 2);
    mp_gguf_writer_set_array(w, "a.i32", MP_GGUF_INT32, a_i32, 4);
    mp_gguf_writer_set_array(w, "a.u64", MP_GGUF_UINT64, a_u64, 1);
    mp_gguf_writer_set_array(w, "a.i64", MP_GGUF_INT64, a_i64, 2);
    mp_gguf_writer_set_array(w, "a.f32", MP_GGUF_FLOAT32, a_f32, 3);
    mp_gguf_writer_set_array(w, "a.f64", MP_GGUF_FLOAT64, a_f64, 2);
    mp_gguf_writer_set_array(w, "a.bool", MP_GGUF_BOOL, a_b, 3);
    mp_gguf_writer_set_array(w, "a.none", MP_GGUF_UINT32, NULL, 0);
    const char *toks[4] = {"<s>", "</s>", "\xe2\x96\x81the", ""};
    mp_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, 4);
    /* nested: [[ "x", "yy" ], [ ]] of strings, and [[1,2],[3]] of int32 */
    mp_gguf_string s2[2] = {{"x", 1}, {"yy", 2}};
    mp_gguf_value inner[2] = {{.type = MP_GGUF_ARRAY}, {.type = MP_GGUF_ARRAY}};
    inner[0].v.arr.elem_type = MP_GGUF_STRING; inner[0].v.arr.n = 2; inner[0].v.arr.data = s2;
    inner[1].v.arr.elem_type = MP_GGUF_STRING; inner[1].v.arr.n = 0; inner[1].v.arr.data = NULL;
    v = (mp_gguf_value){.type = MP_GGUF_ARRAY};
    v.v.arr.elem_type = MP_GGUF_ARRAY; v.v.arr.n = 2; v.v.arr.data = inner;
    CHECK(mp_gguf_writer_set(w, "a.nested", &v) == MP_OK, "nested set: %s", mp_last_error());
    /* argument errors */
    CHECK(mp_gguf_writer_set_u32(w, "general.alignment", 64) == MP_ERR_ARG, "alignment 64 refused");
    CHECK(mp_gguf_writer_set_u32(w, "", 1) == MP_ERR_ARG, "empty key refused");
    v = (mp_gguf_value){.type = 13}; CHECK(mp_gguf_writer_set(w, "bad", &v) == MP_ERR_ARG, "type 13 refused");

    /* tensors */
    enum { R = 6, C = 64 };
    float *x = malloc(R * C * sizeof *x);
    for (int i = 0; i < R * C; i++) x[i] = sinf(0.37f * (float)i) * (1.0f + (float)(i % 7)) + (i == 5 ? 70000.0f : 0.0f);
    float x3[3 * 5], x4[2 * 3 * 1 * 2];
    for (int i = 0; i < 15; i++) x3[i] = (float)i - 7.5f;
    for (int i = 0; i < 12; i++) x4[i] = 1.0f / (float)(i + 1);
    uint64_t d_rc[2] = {C, R}, d35[2] = {5, 3}, d4[4] = {2, 1, 3, 2}, d1[1] = {3};
    CHECK(mp_gguf_writer_add_tensor(w, "f32", MP_GGML_F32, 2, d35, x3) == MP_OK, "add f32");
    CHECK(mp_gguf_writer_add_tensor(w, "f32.4d", MP_GGML_F32, 4, d4, x4) == MP_OK, "add 4d");
    CHECK(mp_gguf_writer_add_tensor(w, "f16", MP_GGML_F16, 2, d_rc, x) == MP_OK, "add f16");
    float *xq = malloc(R * C * sizeof *xq);
    memcpy(xq, x, R * C * sizeof *xq);
    xq[5] = 3.0f;
    CHECK(mp_gguf_writer_add_tensor(w, "q8_0", MP_GGML_Q8_0, 2, d_rc, xq) == MP_OK, "add q8_0");
    unsigned char q4[2 * 18];
    for (int i = 0; i < 36; i++) q4[i] = (unsigned char)(i * 37 + 11);
    q4[0] = 0x00; q4[1] = 0x38; q4[18] = 0x00; q4[19] = 0xb4;   /* d = 0.5, -0.25 */
    CHECK(mp_gguf_writer_add_raw(w, "q4_0", MP_GGML_Q4_0, 1, (uint64_t[]){64}, q4, 36) == MP_OK, "add raw");
    uint16_t bf[3] = {0x3f80, 0xc000, 0x7f80};
    CHECK(mp_gguf_writer_add_raw(w, "bf16", MP_GGML_BF16, 1, d1, bf, 6) == MP_OK, "add bf16 raw");
    CHECK(mp_gguf_writer_add_tensor(w, "f32", MP_GGML_F32, 1, d1, x3) == MP_ERR_ARG, "duplicate tensor refused");
    CHECK(mp_gguf_writer_add_tensor(w, "q", MP_GGML_Q8_0, 1, (uint64_t[]){48}, x) == MP_ERR_ARG, "partial Q8_0 refused");
    CHECK(mp_gguf_writer_add_tensor(w, "q", MP_GGML_Q4_K, 1, (uint64_t[]){256}, x) == MP_ERR_ARG, "Q4_K from f32 refused");
    CHECK(mp_gguf_writer_add_raw(w, "q", MP_GGML_Q4_0, 1, (uint64_t[]){64}, q4, 35) == MP_ERR_ARG, "raw size checked");
    CHECK(mp_gguf_writer_add_tensor(w, "q", MP_GGML_F32, 5, (uint64_t[]){1, 1, 1, 1, 1}, x) == MP_ERR_ARG, "5 dims refused");
    CHECK(mp_gguf_writer_write(w, path) == MP_OK, "write: %s", mp_last_error());
    mp_gguf_writer_free(w);

    char tmp_left[600];
    snprintf(tmp_left, sizeof tmp_left, "ls %s | grep -q tmp", dir);
    CHECK(system(tmp_left) != 0, "no temporary file left behind");

    mp_gguf *g = NULL;
    CHECK(mp_gguf_open(path, &g) == MP_OK, "open: %s", mp_last_error());
    if (!g) return;
    CHECK(mp_gguf_version(g) == 3 && mp_gguf_alignment(g) == 32, "v3, alignment 32");
    int64_t iv; double fv; int bv; const char *sv;
    CHECK(mp_gguf_get_int(g, "t.u8", &iv) == MP_GGUF_FOUND && iv == 250, "u8");
    CHECK(mp_gguf_get_int(g, "t.i8", &iv) == MP_GGUF_FOUND && iv == -100, "i8");
    CHECK(mp_gguf_get_int(g, "t.u16", &iv) == MP_GGUF_FOUND && iv == 65000, "u16");
    CHECK(mp_gguf_get_int(g, "t.i16", &iv) == MP_GGUF_FOUND && iv == -30000, "i16");
    CHECK(mp_gguf_get_int(g, "t.u32", &iv) == MP_GGUF_FOUND && iv == 4000000000LL, "u32");
    CHECK(mp_gguf_get_int(g, "t.i32", &iv) == MP_GGUF_FOUND && iv == -2000000000, "i32");
    CHECK(mp_gguf_get_int(g, "t.u64", &iv) == MP_GGUF_WRONG_TYPE, "u64 beyond int64 is wrong type");
    CHECK(mp_gguf_get(g, "t.u64")->type == MP_GGUF_UINT64 && mp_gguf_get(g, "t.u64")->v.u == UINT64_MAX - 1, "u64 value");
    CHECK(mp_gguf_get_int(g, "t.i64", &iv) == MP_GGUF_FOUND && iv == INT64_MIN + 3, "i64");
    CHECK(mp_gguf_get_float(g, "t.f32", &fv) == MP_GGUF_FOUND && fv == (double)1e-6f, "f32");
    CHECK(mp_gguf_get_float(g, "t.f64", &fv) == MP_GGUF_FOUND && fv == -2.718281828459045, "f64");
    CHECK(mp_gguf_get_bool(g, "t.bool", &bv) == MP_GGUF_FOUND && bv == 1, "bool");
    CHECK(mp_gguf_get_str(g, "t.str", &sv) == MP_GGUF_FOUND && !strcmp(sv, "caf\xc3\xa9 \xe2\x98\x83"), "string");
    CHECK(mp_gguf_get_str(g, "t.empty", &sv) == MP_GGUF_FOUND && !strcmp(sv, ""), "empty string");
    CHECK(mp_gguf_get_str(g, "t.replaced", &sv) == MP_GGUF_FOUND && !strcmp(sv, "new"), "replaced value");
    CHECK(mp_gguf_get_str(g, "t.u8", &sv) == MP_GGUF_WRONG_TYPE, "wrong type");
    CHECK(mp_gguf_get_float(g, "t.i32", &fv) == MP_GGUF_WRONG_TYPE, "int is not float");
    CHECK(mp_gguf_get_int(g, "absent", &iv) == MP_GGUF_MISSING, "missing");
    CHECK(mp_gguf_n_kv(g) == 28, "28 keys (%zu)", mp_gguf_n_kv(g));
    const mp_gguf_value *a;
#define ARR(key, et, n_, T, ref) do { a = mp_gguf_get(g, key); \
        CHECK(a && a->type == MP_GGUF_ARRAY && a->v.arr.elem_type == et && a->v.arr.n == n_ && \
              (n_ == 0 || !memcmp(a->v.arr.data, ref, n_ * sizeof(T))), "array %s", key); } while (0)
    ARR("a.u8", MP_GGUF_UINT8, 3, uint8_t, a_u8); ARR("a.i8", MP_GGUF_INT8, 2, int8_t, a_i8);
    ARR("a.u16", MP_GGUF_UINT16, 2, uint16_t, a_u16); ARR("a.i16", MP_GGUF_INT16, 2, int16_t, a_i16);
    ARR("a.u32", MP_GGUF_UINT32, 2, uint32_t, a_u32); ARR("a.i32", MP_GGUF_INT32, 4, int32_t, a_i32);
    ARR("a.u64", MP_GGUF_UINT64, 1, uint64_t, a_u64); ARR("a.i64", MP_GGUF_INT64, 2, int64_t, a_i64);
    ARR("a.f32", MP_GGUF_FLOAT32, 3, float, a_f32); ARR("a.f64", MP_GGUF_FLOAT64, 2, double, a_f64);
    ARR("a.bool", MP_GGUF_BOOL, 3, uint8_t, a_b); ARR("a.none", MP_GGUF_UINT32, 0, uint32_t, a_u32);
    const mp_gguf_string *ts; uint64_t nt; const float *fa; const int32_t *ia;
    CHECK(mp_gguf_get_str_array(g, "tokenizer.ggml.tokens", &ts, &nt) == MP_GGUF_FOUND && nt == 4 &&
          !strcmp(ts[2].str, toks[2]) && ts[3].len == 0, "string array");
    CHECK(mp_gguf_get_f32_array(g, "a.f32", &fa, &nt) == MP_GGUF_FOUND && nt == 3 && fa[1] == -1e30f, "f32 array");
    CHECK(mp_gguf_get_i32_array(g, "a.i32", &ia, &nt) == MP_GGUF_FOUND && nt == 4 && ia[3] == 2147483647, "i32 array");
    CHECK(mp_gguf_get_f32_array(g, "a.i32", &fa, &nt) == MP_GGUF_WRONG_TYPE, "i32 array is not f32");
    a = mp_gguf_get(g, "a.nested");
    CHECK(a && a->v.arr.elem_type == MP_GGUF_ARRAY && a->v.arr.n == 2, "nested outer");
    if (a && a->v.arr.n == 2) {
        const mp_gguf_value *in = a->v.arr.data;
        const mp_gguf_string *ss = in[0].v.arr.data;
        CHECK(in[0].v.arr.elem_type == MP_GGUF_STRING && in[0].v.arr.n == 2 && !strcmp(ss[1].str, "yy") &&
              in[1].v.arr.n == 0, "nested inner");
    }
    /* tensors */
    CHECK(mp_gguf_n_tensors(g) == 6, "6 tensors");
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        CHECK(t->offset % 32 == 0 && ((const unsigned char *)t->data - (const unsigned char *)mp_gguf_tensor_at(g, 0)->data) % 32 == 0,
              "tensor %s aligned", t->name);
    }
    const mp_gguf_tensor *t = mp_gguf_find_tensor(g, "f32");
    CHECK(t && t->n_dims == 2 && t->dims[0] == 5 && t->dims[1] == 3 && t->n_elements == 15 && t->type == MP_GGML_F32, "f32 info");
    float out[R * C];
    CHECK(mp_gguf_read_tensor(g, "f32", out, 15) == MP_OK && !memcmp(out, x3, sizeof x3), "f32 data exact");
    t = mp_gguf_find_tensor(g, "f32.4d");
    CHECK(t && t->n_dims == 4 && t->dims[2] == 3 && t->dims[3] == 2, "4d dims");
    CHECK(mp_gguf_read_tensor(g, "f32.4d", out, 12) == MP_OK && !memcmp(out, x4, sizeof x4), "4d data exact");
    CHECK(mp_gguf_read_tensor(g, "f16", out, R * C) == MP_OK, "f16 read");
    int bad = 0;
    for (int i = 0; i < R * C; i++) {
        double want = i == 5 ? INFINITY : (double)x[i];
        if (i == 5 ? !isinf(out[i]) : fabs(out[i] - want) > fabs(want) * 0x1p-11 + 0x1p-25) bad++;
#ifdef __FLT16_MAX__
        _Float16 h = (_Float16)x[i];
        if ((float)h != out[i]) bad++;
#endif
    }
    CHECK(bad == 0, "%d F16 values off by more than half an f16 ulp (or differ from _Float16)", bad);
    CHECK(mp_gguf_read_tensor(g, "q8_0", out, R * C) == MP_OK, "q8_0 read");
    bad = 0;
    for (int blk = 0; blk < R * C / 32; blk++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(xq[32 * blk + j]));
        double step = amax / 127;
        for (int j = 0; j < 32; j++)
            if (fabs(out[32 * blk + j] - xq[32 * blk + j]) > 0.5 * step + 127 * step * 0x1p-11) bad++;
    }
    CHECK(bad == 0, "%d Q8_0 values off by more than the quantisation step", bad);
    CHECK(mp_gguf_read_tensor(g, "q4_0", out, 64) == MP_OK, "q4_0 read");
    bad = 0;
    for (int j = 0; j < 16; j++) {
        if (out[j] != ((q4[2 + j] & 15) - 8) * 0.5f || out[16 + j] != ((q4[2 + j] >> 4) - 8) * 0.5f) bad++;
        if (out[32 + j] != ((q4[20 + j] & 15) - 8) * -0.25f || out[48 + j] != ((q4[20 + j] >> 4) - 8) * -0.25f) bad++;
    }
    CHECK(bad == 0, "raw Q4_0 decoded at the right place");
    CHECK(mp_gguf_read_tensor(g, "bf16", out, 3) == MP_OK && out[0] == 1.0f && out[1] == -2.0f && isinf(out[2]), "bf16");
    CHECK(mp_gguf_f32_bytes(g) == 4ull * (15 + 12 + 384 + 384 + 64 + 3), "f32 bytes");
    CHECK(mp_gguf_data_bytes(g) == 60 + 48 + 768 + 12 * 34 + 36 + 6, "data bytes %llu", (unsigned long long)mp_gguf_data_bytes(g));
    mp_gguf_close(g);

    /* The same file relabelled version 2 reads identically. */
    FILE *f = fopen(path, "r+b");
    uint32_t two = 2;
    fseek(f, 4, SEEK_SET);
    fwrite(&two, 4, 1, f);
    fclose(f);
    CHECK(mp_gguf_open(path, &g) == MP_OK && mp_gguf_version(g) == 2, "v2 opens");
    if (g) {
        CHECK(mp_gguf_read_tensor(g, "f32", out, 15) == MP_OK && !memcmp(out, x3, sizeof x3), "v2 data");
        mp_gguf_close(g);
    }
    CHECK(mp_gguf_open("/nonexistent/x.gguf", &g) == MP_ERR_IO && strstr(mp_last_error(), "/nonexistent/x.gguf"),
          "missing file: %s", mp_last_error());
    CHECK(mp_gguf_open(dir, &g) == MP_ERR_IO, "a folder is not a GGUF file");
    unlink(path);
    free(x);
    free(xq);
}

/* ---- tensors made by a row callback during the write ---- */

typedef struct { int calls, fail_at; uint64_t next; } rows_state;

/* rows of 64 float32: element c of row r is r + c / 64; checks the rows come in order */
static mp_status rows_cb(void *user, uint64_t row0, uint64_t n, void *dst) {
    rows_state *s = user;
    if (s->calls++ == s->fail_at) return mp_error(MP_ERR_ARG, "row callback refused rows from %llu", (unsigned long long)row0);
    if (row0 != s->next) return mp_error(MP_ERR_ARG, "rows out of order: %llu after %llu", (unsigned long long)row0,
                                         (unsigned long long)s->next);
    s->next = row0 + n;
    for (uint64_t r = 0; r < n; r++)
        for (int c = 0; c < 64; c++) ((float *)dst)[r * 64 + c] = (float)(row0 + r) + (float)c / 64.0f;
    return MP_OK;
}

static void test_rows(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/rows.gguf", dir);
    /* 100000 rows of 256 bytes: 24.4 MiB, so more than one block of about 16 MiB */
    enum { ROWS = 100000 };
    for (int fail = 0; fail < 2; fail++) {
        mp_gguf_writer *w = NULL;
        rows_state st = {0, fail ? 1 : -1, 0};
        CHECK(mp_gguf_writer_new(&w) == MP_OK, "writer");
        mp_gguf_writer_set_str(w, "general.architecture", "test");
        float small[3] = {1, 2, 3};
        CHECK(mp_gguf_writer_add_tensor(w, "before", MP_GGML_F32, 1, (uint64_t[]){3}, small) == MP_OK, "add");
        CHECK(mp_gguf_writer_add_rows(w, "rows", MP_GGML_F32, 2, (uint64_t[]){64, ROWS}, rows_cb, &st) == MP_OK,
              "add_rows: %s", mp_last_error());
        CHECK(mp_gguf_writer_add_rows(w, "none", MP_GGML_F32, 1, (uint64_t[]){64}, NULL, NULL) == MP_ERR_ARG,
              "NULL row function refused");
        CHECK(mp_gguf_writer_add_tensor(w, "after", MP_GGML_F32, 1, (uint64_t[]){3}, small) == MP_OK, "add");
        const uint64_t planned = mp_gguf_writer_file_bytes(w);
        mp_status rc = mp_gguf_writer_write(w, path);
        mp_gguf_writer_free(w);
        struct stat sb;
        if (fail) {
            CHECK(rc == MP_ERR_ARG && strstr(mp_last_error(), "refused rows from"), "a failing callback fails the "
                  "write with its message: %s", mp_last_error());
            CHECK(stat(path, &sb) != 0, "no file left after a failed callback");
            char tmp_left[600];
            snprintf(tmp_left, sizeof tmp_left, "ls %s | grep -q tmp", dir);
            CHECK(system(tmp_left) != 0, "no temporary file left behind");
            continue;
        }
        CHECK(rc == MP_OK && st.calls == 2 && st.next == ROWS, "write: %s (%d calls)", mp_last_error(), st.calls);
        CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == planned, "file %lld bytes, planned %llu",
              (long long)sb.st_size, (unsigned long long)planned);
        mp_gguf *g = NULL;
        CHECK(mp_gguf_open(path, &g) == MP_OK, "open: %s", mp_last_error());
        if (!g) continue;
        const mp_gguf_tensor *t = mp_gguf_find_tensor(g, "rows");
        CHECK(t && t->dims[0] == 64 && t->dims[1] == ROWS && t->type == MP_GGML_F32, "rows info");
        const float *d = t ? (const float *)t->data : NULL;
        int bad = 0;
        for (uint64_t r = 0; d && r < ROWS; r += 997)
            for (int c = 0; c < 64; c++) bad += d[r * 64 + c] != (float)r + (float)c / 64.0f;
        CHECK(d && bad == 0, "rows at their place");
        float out[3];
        CHECK(mp_gguf_read_tensor(g, "after", out, 3) == MP_OK && out[2] == 3.0f, "tensor after the rows");
        mp_gguf_close(g);
        unlink(path);
    }
}

/* ---- the independent fixture (GGUF v2, alignment 64, numpy expectations) ---- */

static void test_fixture(void) {
    mp_gguf *g = NULL;
    const char *path = tu_data("gguf_fixture.gguf");
    CHECK(mp_gguf_open(path, &g) == MP_OK, "fixture opens: %s", mp_last_error());
    if (!g) return;
    CHECK(mp_gguf_version(g) == 2 && mp_gguf_alignment(g) == 64, "fixture is v2 with alignment 64");
    int64_t iv; double fv; int bv; const char *sv;
    CHECK(mp_gguf_get_str(g, "general.architecture", &sv) == MP_GGUF_FOUND && !strcmp(sv, "llama"), "arch");
    CHECK(mp_gguf_get_int(g, "test.u8", &iv) == MP_GGUF_FOUND && iv == 200, "u8");
    CHECK(mp_gguf_get_int(g, "test.i16", &iv) == MP_GGUF_FOUND && iv == -12345, "i16");
    CHECK(mp_gguf_get(g, "test.u64") && mp_gguf_get(g, "test.u64")->v.u == (1ull << 63) + 7, "u64");
    CHECK(mp_gguf_get_float(g, "test.f64", &fv) == MP_GGUF_FOUND && fv == 3.141592653589793, "f64");
    CHECK(mp_gguf_get_float(g, "test.f32", &fv) == MP_GGUF_FOUND && fv == (double)0.1f, "f32");
    CHECK(mp_gguf_get_bool(g, "test.bool", &bv) == MP_GGUF_FOUND && bv == 1, "bool");
    CHECK(mp_gguf_get_str(g, "test.str", &sv) == MP_GGUF_FOUND && !strcmp(sv, "h\xc3\xa9llo \xe2\x98\x83"), "utf-8 string");
    const mp_gguf_string *ts; const float *sc; uint64_t n;
    CHECK(mp_gguf_get_str_array(g, "tokenizer.ggml.tokens", &ts, &n) == MP_GGUF_FOUND && n == 4 &&
          !strcmp(ts[2].str, "\xc4\xa0" "b") && ts[3].len == 0, "tokens");
    CHECK(mp_gguf_get_f32_array(g, "tokenizer.ggml.scores", &sc, &n) == MP_GGUF_FOUND && n == 4 && sc[2] == -2.25f, "scores");
    const mp_gguf_value *nest = mp_gguf_get(g, "test.nested");
    CHECK(nest && nest->v.arr.n == 2 && ((const mp_gguf_value *)nest->v.arr.data)[0].v.arr.elem_type == MP_GGUF_INT32,
          "nested mixed array");
    int checked = 0;
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        CHECK(t->offset % 64 == 0, "fixture offset aligned to 64");
        char ename[128];
        snprintf(ename, sizeof ename, "%s.expected", t->name);
        const mp_gguf_tensor *e = mp_gguf_find_tensor(g, ename);
        if (!e) continue;
        CHECK(e->n_elements == t->n_elements && e->dims[0] == t->dims[0], "%s shape", t->name);
        float *got = malloc(t->n_elements * 4), *want = malloc(e->n_elements * 4);
        CHECK(mp_gguf_read_f32(g, t, got, t->n_elements) == MP_OK, "%s read: %s", t->name, mp_last_error());
        CHECK(mp_gguf_read_f32(g, e, want, e->n_elements) == MP_OK, "%s.expected read", t->name);
        double worst = 0;
        int bad = 0;
        for (uint64_t k = 0; k < t->n_elements; k++) {
            double err = fabs((double)got[k] - want[k]);
            if (!(err <= 1e-6 * fmax(1.0, fabs(want[k])))) bad++;
            if (err > worst) worst = err;
        }
        CHECK(bad == 0, "%s: %d of %llu values differ from numpy (worst %.3g)", t->name, bad,
              (unsigned long long)t->n_elements, worst);
        printf("fixture %-8s %4llu values, max |diff| vs numpy %.3g\n", mp_quant_type_name(t->type),
               (unsigned long long)t->n_elements, worst);
        checked++;
        free(got);
        free(want);
    }
    CHECK(checked == 10, "10 fixture tensors checked (%d)", checked);
    char b1[32], b2[32];
    printf("fixture: %s on disk, %s as float32\n", mp_fmt_bytes((double)mp_gguf_data_bytes(g), b1),
           mp_fmt_bytes((double)mp_gguf_f32_bytes(g), b2));
    mp_gguf_close(g);
}

int main(void) {
    char dir[] = "test_gguf_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_round_trip(dir);
    test_rows(dir);
    test_fixture();
    test_malformed();
    rmdir(dir);
    return tu_finish("test_gguf");
}
