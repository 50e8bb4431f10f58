/* test_tokenizer.c — the llama2.c tokenizer: a hand-built vocabulary whose merges
 * are worked out by hand, fault cases (truncated, wrong vocabulary size, bad
 * lengths, garbage), and the golden encodings of ../shared/golden/
 * aidreams260K_tokenizer.tsv (ids produced by llama2.c's own encoder), with
 * decode(encode(text)) == text for each line. */
#include "tok_llama2c.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];
static char path_buf[512];

static const char *tpath(const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", tmpdir, name);
    return path_buf;
}

/* A growing byte buffer for building tokenizer.bin files. */
typedef struct { unsigned char *b; size_t n, cap; } bytes;

static void put(bytes *o, const void *p, size_t n) {
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->b = realloc(o->b, o->cap);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put_i32(bytes *o, int32_t v) { put(o, &v, 4); }
static void put_piece(bytes *o, float score, const char *s) {
    put(o, &score, 4);
    put_i32(o, (int32_t)strlen(s));
    put(o, s, strlen(s));
}

/* <unk>, <s>, </s>, <0x00>..<0xFF>, then " ", "a", "b", "ab" (-1), " a" (-2),
 * "é" (one piece for a 2-byte code point), "ba" (-1, ties with "ab"),
 * "aba" (-3), " ab" (-9): 268 pieces, max length 6. */
static bytes small_vocab(void) {
    bytes o = {0};
    char s[16];
    put_i32(&o, 6);
    put_piece(&o, 0, "<unk>");
    put_piece(&o, 0, "\n<s>\n");
    put_piece(&o, 0, "\n</s>\n");
    for (int b = 0; b < 256; b++) {
        snprintf(s, sizeof s, "<0x%02X>", b);
        put_piece(&o, 0, s);
    }
    put_piece(&o, -5, " ");      /* 259 */
    put_piece(&o, -6, "a");      /* 260 */
    put_piece(&o, -7, "b");      /* 261 */
    put_piece(&o, -1, "ab");     /* 262 */
    put_piece(&o, -2, " a");     /* 263 */
    put_piece(&o, -8, "\xc3\xa9"); /* 264 é */
    put_piece(&o, -1, "ba");     /* 265 */
    put_piece(&o, -3, "aba");    /* 266 */
    put_piece(&o, -9, " ab");    /* 267 */
    return o;
}

static void write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static void expect_fail(const char *name, const void *b, size_t n, int vocab, const char *needle) {
    const char *p = tpath(name);
    write_file(p, b, n);
    mp_tokenizer *t = (mp_tokenizer *)1;
    mp_status s = mp_tokenizer_load(&t, p, vocab);
    CHECK(s == MP_ERR_FORMAT, "%s: status %s (%s)", name, mp_status_name(s), mp_last_error());
    CHECK(t == NULL, "%s: *out set on failure", name);
    CHECK(strstr(mp_last_error(), p) != NULL, "%s: message lacks the path: %s", name, mp_last_error());
    CHECK(!needle || strstr(mp_last_error(), needle), "%s: message lacks '%s': %s", name, needle, mp_last_error());
    if (s == MP_OK) mp_tokenizer_free(t);
    unlink(p);
}

static int same_ids(const int *a, int na, const int *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* ---- reference: llama2.c run.c's encode() transcribed plainly (linear piece
 * lookup, a full rescan of all pairs per merge), over pieces parsed here. ---- */
typedef struct { int n; char **piece; float *score; } ref_vocab;

static ref_vocab ref_parse(const unsigned char *b, int vocab) {   /* trusted input */
    ref_vocab v = {vocab, calloc((size_t)vocab, sizeof(char *)), calloc((size_t)vocab, sizeof(float))};
    size_t off = 4;
    for (int i = 0; i < vocab; i++) {
        int32_t len;
        memcpy(&v.score[i], b + off, 4);
        memcpy(&len, b + off + 4, 4);
        v.piece[i] = calloc((size_t)len + 1, 1);
        memcpy(v.piece[i], b + off + 8, (size_t)len);
        off += 8 + (size_t)len;
    }
    return v;
}

static void ref_free(ref_vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->piece[i]);
    free(v->piece);
    free(v->score);
}

static int ref_lookup(const ref_vocab *v, const char *s) {
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->piece[i], s) == 0) return i;
    return -1;
}

static int ref_encode(const ref_vocab *v, const char *text, int *tok) {
    char buf[64], cat[256];
    int n = 0;
    size_t len = 0;
    tok[n++] = 1;
    if (text[0]) tok[n++] = ref_lookup(v, " ");
    for (const char *c = text; *c; c++) {
        if ((*c & 0xC0) != 0x80) len = 0;
        buf[len++] = *c;
        buf[len] = 0;
        if ((c[1] & 0xC0) == 0x80 && len < 4) continue;
        int id = ref_lookup(v, buf);
        if (id != -1) tok[n++] = id;
        else for (size_t i = 0; i < len; i++) tok[n++] = (unsigned char)buf[i] + 3;
        len = 0;
    }
    for (;;) {
        float best = -1e10f;
        int best_id = -1, best_i = -1;
        for (int i = 0; i < n - 1; i++) {
            snprintf(cat, sizeof cat, "%s%s", v->piece[tok[i]], v->piece[tok[i + 1]]);
            int id = ref_lookup(v, cat);
            if (id != -1 && v->score[id] > best) { best = v->score[id]; best_id = id; best_i = i; }
        }
        if (best_i == -1) break;
        tok[best_i] = best_id;
        for (int i = best_i + 1; i < n - 1; i++) tok[i] = tok[i + 1];
        n--;
    }
    return n;
}

/* Random texts from fragments that exercise merges, multi-byte code points,
 * byte fallback, stray continuation bytes and invalid UTF-8; each compared
 * with the reference encoder and decoded back. */
static void compare_random(const mp_tokenizer *t, const unsigned char *file, int vocab, int count, int maxfrag) {
    static const char *frag[] = {"a", "b", "ab", "ba", "e", "n", "in", "the", " ", "  ", "\n", "\t", ".", ",",
                                 "dream", "ing", " of", "vector", "Q", "1", "0", "!", "\xc3\xa9", "\xc3\xbc",
                                 "\xf0\x9f\xa4\x96", "\xe2\x80\x94", "\x80", "\xff", "\xc3", "Echoes"};
    ref_vocab v = ref_parse(file, vocab);
    uint32_t r = 2024;
    int bad = 0;
    for (int k = 0; k < count; k++) {
        char text[1024] = "";
        r = r * 1664525u + 1013904223u;
        int nf = 1 + (int)((r >> 8) % (uint32_t)maxfrag);
        for (int j = 0; j < nf; j++) {
            r = r * 1664525u + 1013904223u;
            strcat(text, frag[(r >> 8) % (sizeof frag / sizeof *frag)]);
        }
        int want[1024], nw = ref_encode(&v, text, want), *ids = NULL, n = 0;
        char *dec = NULL;
        CHECK(mp_tokenizer_encode(t, text, 1, 0, &ids, &n) == MP_OK, "encode: %s", mp_last_error());
        if (!same_ids(ids, n, want, nw) && bad++ < 3)
            CHECK(0, "random text %d ('%s'): %d ids, reference %d", k, text, n, nw);
        CHECK(mp_tokenizer_decode(t, ids, n, &dec) == MP_OK && strcmp(dec, text) == 0,
              "round trip of random text %d", k);
        free(ids);
        free(dec);
    }
    CHECK(bad == 0, "%d of %d random texts differ from the reference encoder", bad, count);
    ref_free(&v);
}

static void test_small(void) {
    bytes o = small_vocab();
    const char *p = tpath("small.bin");
    write_file(p, o.b, o.n);
    mp_tokenizer *t = NULL;
    CHECK(mp_tokenizer_load(&t, p, 268) == MP_OK, "%s", mp_last_error());
    unlink(p);
    if (t) {
        int *ids = NULL, n = 0;
        char *s = NULL;
        CHECK(mp_tokenizer_vocab(t) == 268 && mp_tokenizer_bos(t) == 1 && mp_tokenizer_eos(t) == 2, "ids");
        /* " " a b -> candidates " a" (-2) and "ab" (-1): "ab" wins, then " ab" */
        CHECK(mp_tokenizer_encode(t, "ab", 1, 1, &ids, &n) == MP_OK, "encode");
        int want1[] = {1, 267, 2};
        CHECK(same_ids(ids, n, want1, 3), "ab -> 1 267 2 (n %d)", n);
        free(ids);
        /* " " a b a: "ab" and "ba" tie at -1, the leftmost wins; then "aba" (-3)
         * beats " ab" (-9). (Rightmost first would give " a" "ba".) */
        CHECK(mp_tokenizer_encode(t, "aba", 0, 0, &ids, &n) == MP_OK, "encode");
        int want_tie[] = {259, 266};
        CHECK(same_ids(ids, n, want_tie, 2), "aba -> 259 266 (n %d: %d %d)", n, ids[0], n > 1 ? ids[1] : -1);
        free(ids);
        /* " " a a: only " a" merges; then " a" a has no piece */
        CHECK(mp_tokenizer_encode(t, "aa", 0, 0, &ids, &n) == MP_OK, "encode");
        int want2[] = {263, 260};
        CHECK(same_ids(ids, n, want2, 2), "aa -> 263 260 (n %d)", n);
        CHECK(mp_tokenizer_decode(t, ids, n, &s) == MP_OK && strcmp(s, " aa") == 0,
              "without BOS the dummy space stays: '%s'", s);
        free(s);
        free(ids);
        /* é is a piece; ü (c3 bc) falls back to bytes 0xC3+3, 0xBC+3; 'x' too */
        CHECK(mp_tokenizer_encode(t, "\xc3\xa9\xc3\xbcx", 1, 0, &ids, &n) == MP_OK, "encode");
        int want3[] = {1, 259, 264, 0xC3 + 3, 0xBC + 3, 'x' + 3};
        CHECK(same_ids(ids, n, want3, 6), "byte fallback (n %d)", n);
        CHECK(mp_tokenizer_decode(t, ids, n, &s) == MP_OK && strcmp(s, "\xc3\xa9\xc3\xbcx") == 0,
              "decode byte pieces: '%s'", s);
        free(s);
        free(ids);
        CHECK(mp_tokenizer_encode(t, "", 1, 1, &ids, &n) == MP_OK && n == 2 && ids[0] == 1 && ids[1] == 2,
              "empty text: BOS EOS only, no dummy prefix");
        free(ids);
        /* the dummy prefix off (prepend_space = false): "ab" is the piece "ab",
         * not " ab"; " ab" without it is what "ab" gives with it */
        CHECK(mp_tokenizer_encode_prefix(t, "ab", 1, 0, 0, &ids, &n) == MP_OK, "encode without prefix");
        int want_np[] = {1, 262};
        CHECK(same_ids(ids, n, want_np, 2), "ab without the dummy prefix -> 1 262 (n %d)", n);
        free(ids);
        CHECK(mp_tokenizer_encode_prefix(t, " ab", 1, 1, 0, &ids, &n) == MP_OK, "encode without prefix");
        CHECK(same_ids(ids, n, want1, 3), "' ab' without the dummy prefix == 'ab' with it (n %d)", n);
        free(ids);
        CHECK(strcmp(mp_tokenizer_piece(t, 1, 263), "a") == 0, "space stripped after BOS");
        CHECK(strcmp(mp_tokenizer_piece(t, 5, 263), " a") == 0, "kept otherwise");
        CHECK(strcmp(mp_tokenizer_piece(t, 0, 3 + 'A'), "A") == 0, "<0x41> -> A");
        CHECK(mp_tokenizer_piece(t, 0, 268) == NULL && mp_tokenizer_piece(t, 0, -1) == NULL, "out of range");
        int bad[] = {1, 300};
        s = (char *)1;
        CHECK(mp_tokenizer_decode(t, bad, 2, &s) == MP_ERR_ARG && s == NULL, "decode rejects bad ids");
        mp_tokenizer_free(t);
    }

    t = NULL;
    CHECK(mp_tokenizer_load(&t, (write_file(tpath("small.bin"), o.b, o.n), tpath("small.bin")), 268) == MP_OK, "reload");
    unlink(tpath("small.bin"));
    if (t) compare_random(t, o.b, 268, 400, 12);
    mp_tokenizer_free(t);

    /* faults */
    expect_fail("empty.bin", o.b, 0, 268, "truncated");
    expect_fail("short.bin", o.b, o.n - 1, 268, "truncated in piece 267");
    expect_fail("short_rec.bin", o.b, o.n - 9, 268, "truncated at piece 267");
    expect_fail("vocab_big.bin", o.b, o.n, 1000, "truncated at piece 268 of 1000");
    expect_fail("vocab_small.bin", o.b, o.n, 267, "trailing bytes");
    bytes x = {0};
    put(&x, o.b, o.n);
    put(&x, "zz", 2);
    expect_fail("trailing.bin", x.b, x.n, 268, "2 trailing bytes");
    free(x.b);
    int32_t v = -1;
    memcpy(o.b, &v, 4);
    expect_fail("maxlen.bin", o.b, o.n, 268, "max_token_length");
    v = 6;
    memcpy(o.b, &v, 4);
    size_t len_at = 4 + 4;   /* the length of piece 0 */
    v = -5;
    memcpy(o.b + len_at, &v, 4);
    expect_fail("neglen.bin", o.b, o.n, 268, "piece 0 has length -5");
    v = 1 << 30;
    memcpy(o.b + len_at, &v, 4);
    expect_fail("hugelen.bin", o.b, o.n, 268, "piece 0 has length");
    v = 5;
    memcpy(o.b + len_at, &v, 4);
    v = 3;   /* max_token_length 3 < "<unk>" */
    memcpy(o.b, &v, 4);
    expect_fail("longpiece.bin", o.b, o.n, 268, "max_token_length 3");
    free(o.b);
    unsigned char g[2048];
    uint32_t r = 7;
    for (size_t i = 0; i < sizeof g; i++) { r = r * 1664525u + 1013904223u; g[i] = (unsigned char)(r >> 24); }
    g[0] = 8; g[1] = g[2] = g[3] = 0;   /* plausible header, garbage records */
    expect_fail("garbage.bin", g, sizeof g, 512, NULL);

    mp_tokenizer *t2 = (mp_tokenizer *)1;
    CHECK(mp_tokenizer_load(&t2, tpath("missing.bin"), 10) == MP_ERR_IO && t2 == NULL, "missing file");
    CHECK(strstr(mp_last_error(), "missing.bin") != NULL, "names it: %s", mp_last_error());
    /* vocabulary too small for byte fallback: encode fails cleanly */
    bytes tiny = {0};
    put_i32(&tiny, 5);
    put_piece(&tiny, 0, "<unk>");
    put_piece(&tiny, 0, "<s>");
    put_piece(&tiny, 0, "</s>");
    put_piece(&tiny, 0, " ");
    write_file(tpath("tiny.bin"), tiny.b, tiny.n);
    free(tiny.b);
    mp_tokenizer *tt = NULL;
    CHECK(mp_tokenizer_load(&tt, tpath("tiny.bin"), 4) == MP_OK, "%s", mp_last_error());
    unlink(tpath("tiny.bin"));
    if (tt) {
        int *ids = (int *)1, n = 0;
        CHECK(mp_tokenizer_encode(tt, "q", 1, 0, &ids, &n) == MP_ERR_ARG && ids == NULL, "no byte fallback");
        mp_tokenizer_free(tt);
    }
}

static void test_golden(void) {
    const char *tsv = tu_shared("golden/aidreams260K_tokenizer.tsv");   /* SKIP when absent */
    const char *bin = tu_shared("models/aidreams260K.tok512.bin");
    mp_tokenizer *t = NULL;
    CHECK(mp_tokenizer_load(&t, bin, 512) == MP_OK, "%s", mp_last_error());
    if (!t) return;
    /* a tokenizer built for 512 must not load as 1000 (too short) or 500 (trailing) */
    mp_tokenizer *bad = (mp_tokenizer *)1;
    CHECK(mp_tokenizer_load(&bad, bin, 1000) == MP_ERR_FORMAT && bad == NULL, "vocab 1000");
    CHECK(strstr(mp_last_error(), bin) && strstr(mp_last_error(), "truncated"), "%s", mp_last_error());
    CHECK(mp_tokenizer_load(&bad, bin, 500) == MP_ERR_FORMAT, "vocab 500");

    FILE *f = fopen(tsv, "r");
    CHECK(f != NULL, "open %s", tsv);
    if (!f) { mp_tokenizer_free(t); return; }
    char line[8192];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = '\0';
        if (!l) continue;
        char *tab = strrchr(line, '\t');   /* the text itself may hold tabs */
        CHECK(tab != NULL, "line without a tab: %s", line);
        if (!tab) continue;
        *tab = '\0';
        /* unescape \n in the text column */
        char text[8192];
        size_t k = 0;
        for (const char *c = line; *c; c++) {
            if (c[0] == '\\' && c[1] == 'n') { text[k++] = '\n'; c++; }
            else text[k++] = *c;
        }
        text[k] = '\0';
        int want[1024], nw = 0;
        for (char *s = tab + 1; *s && nw < 1024;) {
            want[nw++] = (int)strtol(s, &s, 10);
            if (*s == ',') s++;
        }
        int *ids = NULL, n = 0;
        char *dec = NULL;
        CHECK(mp_tokenizer_encode(t, text, 1, 0, &ids, &n) == MP_OK, "encode: %s", mp_last_error());
        int ok = same_ids(ids, n, want, nw);
        CHECK(ok, "encode mismatch for '%s' (%d ids, golden %d)", line, n, nw);
        if (!ok)
            for (int i = 0; i < (n > nw ? n : nw); i++)
                fprintf(stderr, "  %d: %d vs %d\n", i, i < n ? ids[i] : -1, i < nw ? want[i] : -1);
        CHECK(mp_tokenizer_decode(t, ids, n, &dec) == MP_OK, "decode");
        CHECK(dec && strcmp(dec, text) == 0, "round trip '%s' -> '%s'", line, dec ? dec : "(null)");
        free(ids);
        free(dec);
        lines++;
    }
    fclose(f);
    CHECK(lines == 10, "golden lines: %d", lines);

    /* random texts against the reference encoder, with the real vocabulary */
    FILE *fb = fopen(bin, "rb");
    unsigned char *file = malloc(1 << 16);
    size_t nb = fb ? fread(file, 1, 1 << 16, fb) : 0;
    if (fb) fclose(fb);
    CHECK(nb == 6290, "read %s", bin);
    if (nb == 6290) compare_random(t, file, 512, 150, 10);
    free(file);

    /* a long text (about 200 KB) encodes in well under a second, not hours as a
     * rescan of every pair per merge would take */
    size_t big_n = 200000;
    char *big = malloc(big_n + 1);
    const char *src = "The neural network dreams in vectors, weights, and gradients.\n";
    for (size_t i = 0; i < big_n; i++) big[i] = src[i % strlen(src)];
    big[big_n] = 0;
    int *ids = NULL, n = 0;
    char *dec = NULL;
    double t0 = mp_now();
    CHECK(mp_tokenizer_encode(t, big, 1, 0, &ids, &n) == MP_OK, "encode long text");
    double dt = mp_now() - t0;
    printf("encoded %zu bytes into %d tokens in %.3f s\n", big_n, n, dt);
    CHECK(mp_tokenizer_decode(t, ids, n, &dec) == MP_OK && strcmp(dec, big) == 0, "long round trip");
    free(ids);
    free(dec);
    free(big);
    mp_tokenizer_free(t);
}

static void remove_tmpdir(void) { rmdir(tmpdir); }

/* No argument: the self-contained checks. "golden": the ../shared golden data
 * (SKIP, exit 77, when absent), registered as a separate ctest test. */
int main(int argc, char **argv) {
    mp_init();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_tokenizer_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    atexit(remove_tmpdir);
    if (argc > 1 && strcmp(argv[1], "golden") == 0) test_golden();
    else test_small();
    return tu_finish(argc > 1 ? "test_tokenizer golden" : "test_tokenizer");
}
