/* test_safetensors.c — the strict JSON documents (base/json.c) and the
 * safetensors reader/writer (formats/safetensors.c): JSON accept/reject cases;
 * a file built byte by byte here (F32, F16, BF16, a scalar, an I64 tensor);
 * the independent fixture tests/data/gguf_fixture.safetensors (numpy-written,
 * with NAME.expected companions); writer round trips; Hugging Face folders
 * (single file, sharded with an index, shards without an index, config.json);
 * and malformed files — every truncation, bad header lengths, invalid JSON,
 * wrong or overlapping offsets, wrong sizes — failing with MP_ERR_FORMAT. */
#include "json.h"
#include "quant.h"
#include "safetensors.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- JSON ---- */

static void json_ok(const char *text, mp_json_doc **doc) {
    mp_status st = mp_json_parse(text, strlen(text), "t.json", doc);
    CHECK(st == MP_OK, "should parse: %s (%s)", text, mp_last_error());
}

static void json_bad(const char *text, size_t len, const char *needle) {
    mp_json_doc *doc = NULL;
    mp_status st = mp_json_parse(text, len, "t.json", &doc);
    CHECK(st == MP_ERR_FORMAT, "should be refused: %.40s", text);
    if (st == MP_ERR_FORMAT)
        CHECK(strstr(mp_last_error(), needle) && strstr(mp_last_error(), "t.json"), "'%s' lacks '%s'", mp_last_error(), needle);
    mp_json_free(doc);
}

static void test_json(void) {
    mp_json_doc *doc = NULL;
    json_ok(" {\"a\": [1, -2.5e3, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\\\"\"], \"b\": {\"c\": 9007199254740993},"
            " \"\": 0, \"z\": -0, \"big\": 1.23456789012345678901234567890e29} ", &doc);
    const mp_json *r = mp_json_root(doc), *a = mp_json_get(r, "a");
    CHECK(mp_json_type_of(r) == MP_JSON_OBJECT && mp_json_len(r) == 5, "root object of 5");
    CHECK(mp_json_len(a) == 6 && mp_json_number(mp_json_at(a, 1)) == -2500.0, "array and number");
    CHECK(mp_json_bool(mp_json_at(a, 2)) && !mp_json_bool(mp_json_at(a, 3)) &&
          mp_json_type_of(mp_json_at(a, 4)) == MP_JSON_NULL, "literals");
    size_t len;
    const char *s = mp_json_string(mp_json_at(a, 5), &len);
    CHECK(s && len == 9 && !memcmp(s, "x\n\xc3\xa9\xf0\x9f\x98\x80\"", 9), "escapes and surrogate pair");
    int64_t iv;
    CHECK(mp_json_int64(mp_json_get(mp_json_get(r, "b"), "c"), &iv) == 0 && iv == 9007199254740993LL, "exact int64");
    CHECK(mp_json_int64(mp_json_at(a, 1), &iv) == -1, "-2.5e3 is not an integer literal");
    CHECK(mp_json_int64(mp_json_get(r, "big"), &iv) == -1 && mp_json_number(mp_json_get(r, "big")) > 1.2e29, "huge int as double");
    CHECK(mp_json_get(r, "") != NULL && mp_json_get(r, "nope") == NULL, "empty key found, absent key not");
    {
        static const char *const order[] = {"a", "b", "", "z", "big"};
        mp_json_member m;
        size_t n = 0;
        for (mp_json_first(r, &m); m.value; mp_json_next(&m), n++)
            CHECK(n < 5 && m.index == n && !strcmp(m.key, order[n]) && m.key_len == strlen(order[n]) &&
                  m.value == mp_json_get(r, order[n]), "member %zu in document order", n);
        CHECK(n == 5, "5 members visited, not %zu", n);
        mp_json_first(a, &m);
        CHECK(m.value == NULL && mp_json_at(r, 0) == NULL, "arrays have no members, objects no elements");
    }
    CHECK(mp_json_get(NULL, "a") == NULL && mp_json_len(NULL) == 0 && mp_json_string(a, NULL) == NULL, "NULL-safe accessors");
    mp_json_free(doc);
    json_ok("\"\\u0000a\"", &doc);
    s = mp_json_string(mp_json_root(doc), &len);
    CHECK(len == 2 && s[0] == 0 && s[1] == 'a', "escaped NUL kept with its length");
    mp_json_free(doc);
    /* a big object: lookups of every key */
    char *big = malloc(40 * 5000 + 16);
    size_t o = 0;
    big[o++] = '{';
    for (int i = 0; i < 5000; i++) o += (size_t)sprintf(big + o, "%s\"k%d\":%d", i ? "," : "", (i * 7919) % 5000, i);
    big[o++] = '}';
    CHECK(mp_json_parse(big, o, "big.json", &doc) == MP_OK, "5000 keys");
    int bad = 0;
    for (int i = 0; i < 5000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", (i * 7919) % 5000);
        if (mp_json_int64(mp_json_get(mp_json_root(doc), k), &iv) || iv != i) bad++;
    }
    CHECK(bad == 0, "%d of 5000 lookups wrong", bad);
    mp_json_free(doc);
    free(big);

    json_bad("", 0, "near end of file");
    json_bad("{\"a\":1,}", 8, "string or '}' expected");
    json_bad("[1,]", 4, "unexpected token");
    json_bad("[01]", 4, "invalid token near '0'");
    json_bad("[+1]", 4, "invalid token");
    json_bad("[.5]", 4, "invalid token");
    json_bad("[1.]", 4, "invalid token near '1.'");
    json_bad("[1e]", 4, "invalid token near '1e'");
    json_bad("[NaN]", 5, "invalid token");
    json_bad("[Infinity]", 10, "invalid token");
    json_bad("[tru]", 5, "invalid token");
    json_bad("\"a\tb\"", 5, "control character");
    json_bad("\"\\x\"", 4, "invalid escape");
    json_bad("\"\\u12\"", 6, "invalid escape");
    json_bad("\"\\ud800\"", 8, "invalid Unicode");   /* lone high surrogate */
    json_bad("\"\\udc00\"", 8, "invalid Unicode");   /* lone low surrogate */
    json_bad("\"\xc3\x28\"", 4, "unable to decode byte 0xc3");
    json_bad("\"\xed\xa0\x80\"", 5, "unable to decode byte");   /* encoded surrogate */
    json_bad("\"\xc0\xaf\"", 4, "unable to decode byte");   /* overlong */
    json_bad("\"\xf4\x90\x80\x80\"", 6, "unable to decode byte");   /* > U+10FFFF */
    json_bad("\"abc", 4, "premature end of input");
    json_bad("{\"a\" 1}", 7, "':' expected");
    json_bad("{\"a\":1 \"b\":2}", 13, "'}' expected");
    json_bad("{\"a\":1,\"a\":2}", 13, "duplicate object key near '\"a\"'");
    json_bad("{} x", 4, "end of file expected");
    json_bad("{}\0", 3, "end of file expected");
    json_bad("\xef\xbb\xbf{}", 5, "invalid token");   /* BOM */
    json_bad("[123456789012345678901234567890]", 32, "too big integer");   /* an integer literal beyond int64 */
    json_bad("{\"a\\u0000b\": 1}", 15, "NUL byte in object key");
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    json_bad(deep, 400, "nesting deeper than 128");
    json_bad("{\"a\":\n [1,\n  x]}", 16, "line 3, column 3");
}

/* ---- hand-built safetensors ---- */

typedef struct { unsigned char *p; size_t n; } blob;

/* header JSON (padded with spaces to hpad bytes when larger) + data */
static blob make_st(const char *json, const void *data, size_t dn) {
    blob b;
    uint64_t hl = strlen(json);
    b.n = 8 + hl + dn;
    b.p = malloc(b.n ? b.n : 1);
    memcpy(b.p, &hl, 8);
    memcpy(b.p + 8, json, hl);
    if (dn) memcpy(b.p + 8 + hl, data, dn);
    return b;
}

static mp_status open_blob(const blob *b, mp_safetensors **st) {
    unsigned char *copy = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(copy, b->p, b->n);
    mp_status rc = mp_safetensors_open_memory(copy, b->n, "bad.safetensors", st);
    if (rc == MP_OK) {
        for (size_t i = 0; i < mp_safetensors_n_tensors(*st); i++) {
            const mp_st_tensor *t = mp_safetensors_tensor_at(*st, i);
            float *dst = malloc((size_t)t->n_elements * 4 + 4);
            mp_safetensors_read_f32(*st, t, dst, t->n_elements);
            free(dst);
        }
        mp_safetensors_close(*st);
        *st = NULL;
    }
    free(copy);
    return rc;
}

static void st_bad(const char *json, size_t dn, const char *needle, const char *label) {
    unsigned char data[256] = {0};
    blob b = make_st(json, data, dn);
    mp_safetensors *st = NULL;
    mp_status rc = open_blob(&b, &st);
    CHECK(rc == MP_ERR_FORMAT, "%s: expected a format error, got %s", label, mp_status_name(rc));
    if (rc == MP_ERR_FORMAT)
        CHECK(strstr(mp_last_error(), needle) && strstr(mp_last_error(), "bad.safetensors"), "%s: '%s' lacks '%s'",
              label, mp_last_error(), needle);
    if (rc) printf("  %-26s -> %s\n", label, mp_last_error());
    free(b.p);
}

static const char *GOOD = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                          "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                          "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[22,26]},"
                          "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[26,30]},"
                          "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[30,38]},"
                          "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[38,38]},"
                          "\"__metadata__\":{\"format\":\"pt\"}}";

static void good_data(unsigned char *d) {
    float w[4] = {1.5f, -2.0f, 0.25f, 1e-3f}, s = 42.0f;
    uint16_t h[3] = {0x3c00, 0x0001, 0xfc00}, bf[2] = {0x4049, 0x8000};
    int64_t i = -7;
    memcpy(d, w, 16);
    memcpy(d + 16, h, 6);
    memcpy(d + 22, bf, 4);
    memcpy(d + 26, &s, 4);
    memcpy(d + 30, &i, 8);
}

static void test_hand_built(void) {
    unsigned char d[38];
    good_data(d);
    blob b = make_st(GOOD, d, 38);
    mp_safetensors *st = NULL;
    CHECK(mp_safetensors_open_memory(b.p, b.n, "good.safetensors", &st) == MP_OK, "open: %s", mp_last_error());
    if (st) {
        CHECK(mp_safetensors_n_tensors(st) == 6, "6 tensors");
        float out[4];
        const mp_st_tensor *t = mp_safetensors_find(st, "w");
        CHECK(t && t->n_dims == 2 && t->shape[0] == 2 && t->dtype == MP_ST_F32, "w info");
        CHECK(mp_safetensors_read_tensor(st, "w", out, 4) == MP_OK && out[1] == -2.0f && out[3] == 1e-3f, "w data");
        CHECK(mp_safetensors_read_tensor(st, "h", out, 3) == MP_OK && out[0] == 1.0f && out[1] == 0x1p-24f && isinf(out[2]) &&
              out[2] < 0, "f16 data incl. subnormal and -inf");
        CHECK(mp_safetensors_read_tensor(st, "b", out, 2) == MP_OK && out[0] == 3.140625f && out[1] == 0.0f && signbit(out[1]),
              "bf16 data incl. -0");
        t = mp_safetensors_find(st, "s");
        CHECK(t && t->n_dims == 0 && t->n_elements == 1, "scalar");
        CHECK(mp_safetensors_read_tensor(st, "s", out, 1) == MP_OK && out[0] == 42.0f, "scalar data");
        CHECK(mp_safetensors_read_tensor(st, "e", out, 0) == MP_OK, "empty tensor");
        CHECK(mp_safetensors_read_tensor(st, "i", out, 1) == MP_ERR_FORMAT && strstr(mp_last_error(), "'i' has dtype I64"),
              "I64 refused: %s", mp_last_error());
        printf("  %-26s -> %s\n", "read of an I64 tensor", mp_last_error());
        CHECK(mp_safetensors_read_tensor(st, "w", out, 3) == MP_ERR_ARG, "size mismatch");
        CHECK(mp_safetensors_read_tensor(st, "zz", out, 1) == MP_ERR_FORMAT && strstr(mp_last_error(), "no tensor 'zz'"),
              "missing tensor");
        CHECK(mp_safetensors_metadata(st, "format") && !strcmp(mp_safetensors_metadata(st, "format"), "pt"), "metadata");
        CHECK(mp_safetensors_config(st) == NULL, "no config for a single file");
        mp_safetensors_close(st);
    }
    /* every prefix fails except the whole */
    int wrong = 0;
    for (size_t len = 0; len < b.n; len++) {
        blob p = {b.p, len};
        mp_status rc = open_blob(&p, &st);
        if (rc != MP_ERR_FORMAT) wrong++;
    }
    CHECK(wrong == 0, "%d of %zu truncations were not format errors", wrong, b.n);
    free(b.p);

    printf("malformed safetensors:\n");
    {   /* header length past the end, and 2^63 */
        blob x = make_st("{}", NULL, 0);
        uint64_t hl = 3;
        memcpy(x.p, &hl, 8);
        mp_status rc = open_blob(&x, &st);
        CHECK(rc == MP_ERR_FORMAT && strstr(mp_last_error(), "header length 3 runs past"), "hlen: %s", mp_last_error());
        hl = 1ull << 63;
        memcpy(x.p, &hl, 8);
        rc = open_blob(&x, &st);
        CHECK(rc == MP_ERR_FORMAT && strstr(mp_last_error(), "runs past the end"), "hlen 2^63: %s", mp_last_error());
        printf("  %-26s -> %s\n", "header length 2^63", mp_last_error());
        free(x.p);
    }
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "invalid JSON", "trailing comma");
    st_bad("[1,2]", 0, "not a JSON object", "array header");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "'}' expected near end of file", "unterminated");
    st_bad("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\"dtype\"", "missing dtype");
    st_bad("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'F33'", "unknown dtype");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "\"shape\"", "shape not an array");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]", "negative dim");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "shape[0]", "fractional dim");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "9 dimensions", "9 dims");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,8]}}", 8, "overflows",
           "shape overflow");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "two non-negative", "one offset");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "end before they begin", "begin > end");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "run past the end of the data",
           "offsets past the end");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551615]}}", 8, "too big integer",
           "offset 2^64-1");   /* JSON integers stop at int64 */
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", 8, "data_offsets", "negative offset");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, "take 12 bytes", "wrong size");
    st_bad("{\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, "overlap", "overlapping");
    st_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate object key", "duplicate name");
    st_bad("{\"__metadata__\":{\"a\":1}}", 0, "not a string", "metadata not string");
    st_bad("{\"w\":[1]}", 0, "not an object", "entry not object");
}

/* ---- the independent fixture ---- */

static void test_fixture(void) {
    mp_safetensors *st = NULL;
    CHECK(mp_safetensors_open(tu_data("gguf_fixture.safetensors"), &st) == MP_OK, "fixture: %s", mp_last_error());
    if (!st) return;
    int checked = 0;
    for (size_t i = 0; i < mp_safetensors_n_tensors(st); i++) {
        const mp_st_tensor *t = mp_safetensors_tensor_at(st, i);
        char en[128];
        snprintf(en, sizeof en, "%s.expected", t->name);
        const mp_st_tensor *e = mp_safetensors_find(st, en);
        if (!e) continue;
        float *got = malloc(t->n_elements * 4 + 4), *want = malloc(e->n_elements * 4 + 4);
        CHECK(t->n_dims == e->n_dims && t->n_elements == e->n_elements, "%s shape", t->name);
        CHECK(mp_safetensors_read_f32(st, t, got, t->n_elements) == MP_OK, "%s", mp_last_error());
        CHECK(mp_safetensors_read_f32(st, e, want, e->n_elements) == MP_OK, "%s", mp_last_error());
        CHECK(!memcmp(got, want, t->n_elements * 4), "%s equals numpy's decoding exactly", t->name);
        checked++;
        free(got);
        free(want);
    }
    CHECK(checked == 4, "4 fixture tensors (%d)", checked);
    CHECK(mp_safetensors_metadata(st, "source") && !strcmp(mp_safetensors_metadata(st, "source"), "gguf_fixture.py"),
          "fixture metadata");
    mp_safetensors_close(st);
}

/* ---- writer and folders ---- */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_writer_and_folders(const char *dir) {
    char p[512], q[512];
    float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {-1, 0.5f, 1e-30f, 3e30f}, c[1] = {7};
    uint64_t sa[2] = {2, 3}, sb[1] = {4};
    mp_st_entry e1[2] = {{"model.a", 2, sa, a}, {"model.b\"q", 1, sb, b}};
    mp_st_entry e2[2] = {{"model.c", 0, NULL, c}, {"lm_head.weight", 2, sa, a}};
    const char *meta[] = {"format", "pt", "note", "line\nbreak", NULL};
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/one.safetensors", dir);
    CHECK(mp_safetensors_write(p, e1, 2, meta) == MP_OK, "write: %s", mp_last_error());
    mp_safetensors *st = NULL;
    CHECK(mp_safetensors_open(p, &st) == MP_OK, "reopen: %s", mp_last_error());
    if (st) {
        float out[6];
        CHECK(mp_safetensors_read_tensor(st, "model.a", out, 6) == MP_OK && !memcmp(out, a, sizeof a), "a round trip");
        CHECK(mp_safetensors_read_tensor(st, "model.b\"q", out, 4) == MP_OK && !memcmp(out, b, sizeof b), "b round trip");
        CHECK(!strcmp(mp_safetensors_metadata(st, "note"), "line\nbreak"), "metadata round trip");
        const mp_st_tensor *t = mp_safetensors_find(st, "model.a");
        CHECK(t && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->dtype == MP_ST_F32, "shape round trip");
        mp_safetensors_close(st);
    }
    mp_st_entry dup[2] = {{"x", 1, sb, b}, {"x", 1, sb, b}};
    CHECK(mp_safetensors_write(p, dup, 2, NULL) == MP_ERR_ARG, "duplicate names refused by the writer");

    /* Sharded folder with an index and config.json. */
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    CHECK(mp_safetensors_write(p, e1, 2, NULL) == MP_OK, "shard 1");
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(mp_safetensors_write(p, e2, 2, NULL) == MP_OK, "shard 2");
    snprintf(p, sizeof p, "%s/one.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\": \"llama\", \"rope_theta\": 500000.0, \"num_key_value_heads\": 2,"
                  " \"tie_word_embeddings\": false}");
    snprintf(q, sizeof q, "%s/model.safetensors.index.json", dir);
    write_text(q, "{\"metadata\": {\"total_size\": 60}, \"weight_map\": {"
                  "\"model.a\": \"model-00001-of-00002.safetensors\", \"model.b\\\"q\": \"model-00001-of-00002.safetensors\","
                  "\"model.c\": \"model-00002-of-00002.safetensors\", \"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    CHECK(mp_safetensors_open(dir, &st) == MP_OK, "sharded folder: %s", mp_last_error());
    if (st) {
        float out[6];
        CHECK(mp_safetensors_n_tensors(st) == 4, "4 tensors across shards");
        CHECK(mp_safetensors_read_tensor(st, "model.c", out, 1) == MP_OK && out[0] == 7.0f, "tensor of shard 2");
        CHECK(mp_safetensors_read_tensor(st, "model.b\"q", out, 4) == MP_OK && out[3] == 3e30f, "tensor of shard 1");
        const mp_json *cfg = mp_safetensors_config(st);
        int64_t kv;
        CHECK(mp_json_number(mp_json_get(cfg, "rope_theta")) == 500000.0 &&
              mp_json_int64(mp_json_get(cfg, "num_key_value_heads"), &kv) == 0 && kv == 2 &&
              mp_json_type_of(mp_json_get(cfg, "tie_word_embeddings")) == MP_JSON_BOOL, "config.json values");
        mp_safetensors_close(st);
    }
    /* index faults */
    write_text(q, "{\"weight_map\": {\"model.a\": \"model-00002-of-00002.safetensors\"}}");
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_FORMAT && strstr(mp_last_error(), "does not hold it"),
          "tensor in the wrong shard: %s", mp_last_error());
    printf("  %-26s -> %s\n", "index names wrong shard", mp_last_error());
    write_text(q, "{\"weight_map\": {\"model.a\": \"../etc/passwd\"}}");
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_FORMAT && strstr(mp_last_error(), "not a file name"),
          "path traversal refused: %s", mp_last_error());
    write_text(q, "{\"weight_map\": {\"model.a\": \"missing.safetensors\"}}");
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_IO && strstr(mp_last_error(), "missing.safetensors"),
          "missing shard: %s", mp_last_error());
    write_text(q, "{\"weight_map\": [1]}");
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_FORMAT && strstr(mp_last_error(), "weight_map"), "bad index");
    unlink(q);
    /* no index: every *.safetensors in the folder */
    CHECK(mp_safetensors_open(dir, &st) == MP_OK && mp_safetensors_n_tensors(st) == 4, "folder listing: %s", mp_last_error());
    mp_safetensors_close(st);
    /* a duplicate across shards */
    snprintf(p, sizeof p, "%s/model-00003-of-00003.safetensors", dir);
    CHECK(mp_safetensors_write(p, e2, 1, NULL) == MP_OK, "shard 3");
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_FORMAT && strstr(mp_last_error(), "duplicate tensor 'model.c'"),
          "duplicate across shards: %s", mp_last_error());
    unlink(p);
    /* bad config.json */
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"a\": 1,}");
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_FORMAT && strstr(mp_last_error(), "config.json"), "bad config: %s",
          mp_last_error());
    unlink(p);
    /* model.safetensors wins over a listing */
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(mp_safetensors_write(p, e2, 1, NULL) == MP_OK, "model.safetensors");
    CHECK(mp_safetensors_open(dir, &st) == MP_OK && mp_safetensors_n_tensors(st) == 1, "model.safetensors preferred");
    mp_safetensors_close(st);
    unlink(p);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    unlink(p);
    CHECK(mp_safetensors_open(dir, &st) == MP_ERR_FORMAT && strstr(mp_last_error(), "no .safetensors"), "empty folder");
    CHECK(mp_safetensors_open("/nonexistent/m.safetensors", &st) == MP_ERR_IO, "missing file");
    rmdir(dir);
}

int main(void) {
    char dir[] = "test_st_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_json();
    test_hand_built();
    test_fixture();
    test_writer_and_folders(dir);
    return tu_finish("test_safetensors");
}
