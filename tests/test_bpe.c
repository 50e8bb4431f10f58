/* test_bpe.c — the mp_tok tokenizers (tokenizers/tok.c, tokenizers/pretok.c):
 *   - GPT-2 byte-level BPE with GPT-2's real vocabulary and merges against
 *     tests/data/bpe_gpt2_golden.tsv (ids from the npm packages gpt-3-encoder and
 *     gpt-tokenizer, which agree; see tests/tools/make_bpe_golden.js);
 *   - Llama 3 (llama-bpe pre-tokenizer, ignore_merges, special tokens) with a
 *     closed subset of its vocabulary against llama3-tokenizer-js's ids;
 *   - the gpt2 / llama3 / qwen2 / smollm / default pre-tokenizer splits against
 *     JavaScript's Unicode regex engine (bpe_pretok_golden.tsv), and a few splits
 *     worked out by hand from the regexes;
 *   - hand-built vocabularies whose merges are worked out by hand (rank order,
 *     leftmost ties, ignore_merges, add_prefix_space, added tokens);
 *   - decode(encode(x)) == x for every golden line and for random bytes
 *     (invalid UTF-8, NUL);
 *   - faults: invalid merges, unknown pre-tokenizers and models, bad regexes,
 *     ids out of range, missing byte tokens, unsupported SentencePiece layouts;
 *   - with argument "shared": SentencePiece from arrays (the pieces and scores of
 *     ../shared/models/aidreams260K.tok512.bin) against
 *     ../shared/golden/aidreams260K_tokenizer.tsv (SKIP when absent). */
#include "tok.h"
#include "pretok.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- small helpers ---- */

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(1); }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (fread(b, 1, (size_t)sz, f) != (size_t)sz) { fprintf(stderr, "read %s\n", path); exit(1); }
    fclose(f);
    b[sz] = 0;
    if (n) *n = (size_t)sz;
    return b;
}

/* Splits a buffer into lines in place (no '\n', no trailing '\r' removal:
 * the data files have none). */
static int split_lines(char *b, char ***lines) {
    int n = 0, cap = 1024;
    *lines = malloc((size_t)cap * sizeof **lines);
    for (char *s = b; *s;) {
        char *e = strchr(s, '\n');
        if (n == cap) *lines = realloc(*lines, (size_t)(cap *= 2) * sizeof **lines);
        (*lines)[n++] = s;
        if (!e) break;
        *e = 0;
        s = e + 1;
    }
    return n;
}

static void put_utf8(char *o, size_t *k, unsigned cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) { o[(*k)++] = (char)(0xC0 | cp >> 6); o[(*k)++] = (char)(0x80 | (cp & 63)); }
    else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | cp >> 12); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 63));
        o[(*k)++] = (char)(0x80 | (cp & 63));
    } else {
        o[(*k)++] = (char)(0xF0 | cp >> 18); o[(*k)++] = (char)(0x80 | ((cp >> 12) & 63));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 63)); o[(*k)++] = (char)(0x80 | (cp & 63));
    }
}

/* Parses the JSON string at *p (which points at '"'); returns malloc'ed bytes,
 * *len their count; advances *p past the closing quote. */
static char *json_string(const char **p, size_t *len) {
    const char *s = *p;
    if (*s != '"') { fprintf(stderr, "bad JSON string: %.20s\n", s); exit(1); }
    s++;
    char *o = malloc(strlen(s) * 4 + 1);
    size_t k = 0;
    while (*s && *s != '"') {
        if (*s != '\\') { o[k++] = *s++; continue; }
        s++;
        char c = *s++;
        switch (c) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            put_utf8(o, &k, cp);
            break;
        }
        default: o[k++] = c;
        }
    }
    *p = *s ? s + 1 : s;
    o[k] = 0;
    *len = k;
    return o;
}

static int parse_ids(const char *s, int *ids, int max) {
    int n = 0;
    while (*s && n < max) {
        ids[n++] = (int)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static int same_ids(const int *a, int na, const int *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int *a, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", a[i]);
    fputc('\n', stderr);
}

/* encode -> decode must give the bytes back */
static int round_trip(const mp_tok *t, const char *text, size_t len, int flags) {
    int *ids = NULL, n = 0, ok = 0;
    char *dec = NULL;
    size_t dl = 0;
    if (mp_tok_encode(t, text, len, flags, &ids, &n) == MP_OK &&
        mp_tok_decode(t, ids, n, &dec, &dl) == MP_OK)
        ok = dl == len && memcmp(dec, text, len) == 0 && dec[dl] == 0;
    free(ids);
    free(dec);
    return ok;
}

/* ---- vocabularies from tests/data ---- */

typedef struct {
    char *vbuf, *mbuf;
    char **tok, **merge;
    int ntok, nmerge;
    int32_t *type;
    char **owned;   /* placeholder strings */
} vocab_data;

static void vocab_free(vocab_data *v) {
    if (v->owned) for (int i = 0; i < v->ntok; i++) free(v->owned[i]);
    free(v->owned);
    free(v->vbuf);
    free(v->mbuf);
    free(v->tok);
    free(v->merge);
    free(v->type);
}

/* Merges file: one "a b" per line after a first "#..." line. */
static void load_merges(vocab_data *v, const char *path) {
    v->mbuf = read_all(tu_data(path), NULL);
    v->nmerge = split_lines(v->mbuf, &v->merge);
    if (v->nmerge && v->merge[0][0] == '#') { memmove(v->merge, v->merge + 1, (size_t)--v->nmerge * sizeof *v->merge); }
    while (v->nmerge && !v->merge[v->nmerge - 1][0]) v->nmerge--;
}

static vocab_data load_gpt2(void) {
    vocab_data v = {0};
    v.vbuf = read_all(tu_data("bpe_gpt2_vocab.txt"), NULL);
    v.ntok = split_lines(v.vbuf, &v.tok);
    while (v.ntok && !v.tok[v.ntok - 1][0]) v.ntok--;
    load_merges(&v, "bpe_gpt2_merges.txt");
    v.type = calloc((size_t)v.ntok, sizeof *v.type);
    for (int i = 0; i < v.ntok; i++) v.type[i] = MP_TOK_TYPE_NORMAL;
    v.type[50256] = MP_TOK_TYPE_CONTROL;   /* <|endoftext|>, as GGUF marks it */
    return v;
}

/* "id TAB token" lines after "#... (n_vocab N)"; gaps get placeholders. */
static vocab_data load_llama3(void) {
    vocab_data v = {0};
    char **lines;
    v.vbuf = read_all(tu_data("bpe_llama3_vocab.tsv"), NULL);
    int nl = split_lines(v.vbuf, &lines);
    const char *nv = strstr(lines[0], "n_vocab ");
    v.ntok = nv ? atoi(nv + 8) : 0;
    CHECK(v.ntok == 128256, "llama3 n_vocab %d", v.ntok);
    v.tok = calloc((size_t)v.ntok, sizeof *v.tok);
    v.owned = calloc((size_t)v.ntok, sizeof *v.owned);
    v.type = calloc((size_t)v.ntok, sizeof *v.type);
    for (int i = 1; i < nl; i++) {
        if (!lines[i][0]) continue;
        char *tab = strchr(lines[i], '\t');
        int id = atoi(lines[i]);
        if (tab && id >= 0 && id < v.ntok) v.tok[id] = tab + 1;
    }
    for (int i = 0; i < v.ntok; i++) {
        if (!v.tok[i]) {
            char b[32];
            snprintf(b, sizeof b, "<mp_absent_%d>", i);
            v.tok[i] = v.owned[i] = strdup(b);
        }
        v.type[i] = i >= 128000 ? MP_TOK_TYPE_CONTROL : MP_TOK_TYPE_NORMAL;
    }
    free(lines);
    load_merges(&v, "bpe_llama3_merges.txt");
    return v;
}

static mp_tok *make_bpe(const vocab_data *v, const char *pre, int bos, int eos, const char *src) {
    mp_tok_params p = mp_tok_params_default();
    p.source = src;
    p.model = "gpt2";
    p.pre = pre;
    p.n_tokens = v->ntok;
    p.tokens = (const char *const *)v->tok;
    p.token_type = v->type;
    p.n_merges = v->nmerge;
    p.merges = (const char *const *)v->merge;
    p.bos = bos;
    p.eos = eos;
    mp_tok *t = NULL;
    CHECK(mp_tok_new(&t, &p) == MP_OK, "%s: %s", src, mp_last_error());
    return t;
}

/* Runs a golden TSV (JSON text TAB ids): every line must match, and round trip
 * unless its ids hold a special token (id >= special_min, when >= 0), which
 * decodes to nothing. */
static void run_golden(const mp_tok *t, const char *file, int flags, int special_min, int expect_lines) {
    char **lines;
    char *buf = read_all(tu_data(file), NULL);
    int nl = split_lines(buf, &lines), total = 0, good = 0, trips = 0, trip_ok = 0;
    for (int i = 0; i < nl; i++) {
        if (!lines[i][0]) continue;
        const char *p = lines[i];
        size_t len;
        char *text = json_string(&p, &len);
        int want[4096], nw = *p == '\t' ? parse_ids(p + 1, want, 4096) : 0;
        int *ids = NULL, n = 0;
        total++;
        CHECK(mp_tok_encode(t, text, len, flags, &ids, &n) == MP_OK, "%s line %d: %s", file, i + 1, mp_last_error());
        if (same_ids(ids, n, want, nw)) good++;
        else {
            CHECK(0, "%s line %d: %s", file, i + 1, lines[i]);
            print_ids("got ", ids, n);
            print_ids("want", want, nw);
        }
        int special = 0;
        for (int k = 0; k < nw; k++) special |= special_min >= 0 && want[k] >= special_min;
        if (!special) {
            trips++;
            if (round_trip(t, text, len, flags)) trip_ok++;
            else CHECK(0, "%s line %d: decode(encode(x)) != x", file, i + 1);
        }
        free(ids);
        free(text);
    }
    printf("%s: %d/%d golden lines equal, %d/%d round trips\n", file, good, total, trip_ok, trips);
    CHECK(total == expect_lines, "%s: %d lines (expected %d)", file, total, expect_lines);
    free(lines);
    free(buf);
}

/* Random byte strings (invalid UTF-8, NUL, stray continuation bytes) and
 * fragments of real text must round trip through byte-level BPE. */
static void random_round_trips(const mp_tok *t, const char *name, int count) {
    static const char *frag[] = {"a", " the", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\x80", "\xff",
                                 "\xc3", "\xe6\x97", "\xf0\x9f", "\xed\xa0\x80", "\xc0\xaf", "\0", "\n", "\r\n",
                                 "  ", "\t", "'s", "'LL", "123456", "!!", "\xe2\x80\x8d", "\xef\xbb\xbf"};
    uint32_t r = 12345;
    int bad = 0;
    for (int k = 0; k < count; k++) {
        char text[512];
        size_t len = 0;
        r = r * 1664525u + 1013904223u;
        int nf = 1 + (int)((r >> 8) % 24u);
        for (int j = 0; j < nf; j++) {
            r = r * 1664525u + 1013904223u;
            if ((r >> 28) < 3) {   /* a raw random byte */
                text[len++] = (char)(r >> 12);
            } else {
                const char *f = frag[(r >> 8) % (sizeof frag / sizeof *frag)];
                size_t fl = f[0] ? strlen(f) : 1;
                memcpy(text + len, f, fl);
                len += fl;
            }
        }
        if (!round_trip(t, text, len, 0) && bad++ < 3) CHECK(0, "%s: random text %d does not round trip", name, k);
    }
    CHECK(bad == 0, "%s: %d of %d random byte strings do not round trip", name, bad, count);
    printf("%s: %d/%d random byte strings round trip\n", name, count - bad, count);
}

static void test_gpt2(void) {
    vocab_data v = load_gpt2();
    CHECK(v.ntok == 50257 && v.nmerge == 50000, "gpt2 data: %d tokens, %d merges", v.ntok, v.nmerge);
    double t0 = mp_now();
    mp_tok *t = make_bpe(&v, "gpt2", 50256, 50256, "gpt2");
    printf("gpt2 tokenizer built in %.3f s\n", mp_now() - t0);
    if (!t) { vocab_free(&v); return; }
    CHECK(mp_tok_get_kind(t) == MP_TOK_KIND_BPE && mp_tok_vocab(t) == 50257, "kind/vocab");
    CHECK(strcmp(mp_tok_pre(t), "gpt2") == 0 && mp_tok_add_bos(t) == 0, "pre %s, add_bos %d", mp_tok_pre(t),
          mp_tok_add_bos(t));
    run_golden(t, "bpe_gpt2_golden.tsv", 0, -1, 85);

    /* pieces, lookups, BOS/EOS handling */
    CHECK(strcmp(mp_tok_piece(t, 995), "\xc4\xa0world") == 0, "piece 995 = 'Ġworld': %s", mp_tok_piece(t, 995));
    CHECK(mp_tok_find(t, "\xc4\xa0world") == 995 && mp_tok_find(t, "no such token") == -1, "find");
    CHECK(mp_tok_piece(t, 50257) == NULL && mp_tok_piece(t, -1) == NULL, "piece out of range");
    int *ids = NULL, n = 0;
    CHECK(mp_tok_encode_str(t, "Hello world", MP_TOK_BOS | MP_TOK_EOS, &ids, &n) == MP_OK, "encode");
    int want[] = {50256, 15496, 995, 50256};
    CHECK(same_ids(ids, n, want, 4), "BOS/EOS wrap (n %d)", n);
    char *s = NULL;
    size_t sl = 0;
    CHECK(mp_tok_decode(t, ids, n, &s, &sl) == MP_OK && sl == 11 && strcmp(s, "Hello world") == 0,
          "decode skips BOS/EOS: '%s'", s ? s : "");
    free(s);
    free(ids);
    CHECK(mp_tok_encode_str(t, "<|endoftext|>", MP_TOK_SPECIAL, &ids, &n) == MP_OK && n == 1 && ids[0] == 50256,
          "MP_TOK_SPECIAL: the control token's text becomes the token (n %d)", n);
    free(ids);
    CHECK(mp_tok_encode_str(t, "<|endoftext|>", 0, &ids, &n) == MP_OK && n == 7 && ids[0] == 27,
          "without MP_TOK_SPECIAL it is text (n %d)", n);
    free(ids);
    CHECK(mp_tok_encode(t, NULL, 0, 0, &ids, &n) == MP_OK && n == 0 && ids == NULL, "empty text");
    char buf[8];
    CHECK(mp_tok_token_bytes(t, -1, 995, buf, sizeof buf) == 6 && strcmp(buf, " world") == 0, "token bytes");
    CHECK(mp_tok_token_bytes(t, -1, 995, buf, 3) == 6 && strcmp(buf, " w") == 0, "token bytes truncated");
    CHECK(mp_tok_token_bytes(t, -1, 50256, buf, sizeof buf) == 0, "control token: no bytes");
    CHECK(mp_tok_token_bytes(t, -1, 50257, buf, sizeof buf) == -1, "out of range: -1");
    /* ids 188 = 'Ā' (byte 0x00) and 447 'âĢ' + 247 'Ļ' = U+2019 */
    int raw[] = {64, 188, 65};
    CHECK(mp_tok_decode(t, raw, 3, &s, &sl) == MP_OK && sl == 3 && memcmp(s, "a\0b", 3) == 0, "NUL decodes");
    free(s);
    int bad[] = {15496, 50257};
    s = (char *)1;
    CHECK(mp_tok_decode(t, bad, 2, &s, &sl) == MP_ERR_ARG && s == NULL, "decode rejects id 50257");
    CHECK(strstr(mp_last_error(), "50257") && strstr(mp_last_error(), "position 1"), "%s", mp_last_error());
    int neg[] = {-3};
    CHECK(mp_tok_decode(t, neg, 1, &s, &sl) == MP_ERR_ARG, "decode rejects -3");

    random_round_trips(t, "gpt2", 2000);

    /* a long text (about 200 KB) in well under a second (pre-token cache, heap merges) */
    size_t big_n = 200000;
    char *big = malloc(big_n + 1);
    const char *src = "The neural network dreams in vectors, weights, and gradients: 3.14159! \xc3\xa9\xf0\x9f\x98\x80\n";
    for (size_t i = 0; i < big_n; i++) big[i] = src[i % strlen(src)];
    big[big_n] = 0;
    t0 = mp_now();
    CHECK(mp_tok_encode(t, big, big_n, 0, &ids, &n) == MP_OK, "encode long text");
    double dt = mp_now() - t0;
    printf("gpt2: encoded %zu bytes into %d tokens in %.3f s\n", big_n, n, dt);
    CHECK(dt < 2.0, "long text took %.2f s", dt);
    CHECK(mp_tok_decode(t, ids, n, &s, &sl) == MP_OK && sl == big_n && memcmp(s, big, big_n) == 0, "long round trip");
    free(s);
    free(ids);
    /* one long word: merges within a single 20 KB pre-token */
    memset(big, 'a', 20000);
    t0 = mp_now();
    CHECK(round_trip(t, big, 20000, 0), "20 KB single pre-token");
    printf("gpt2: one 20000-byte pre-token in %.3f s\n", mp_now() - t0);
    free(big);

    mp_tok_free(t);
    vocab_free(&v);
}

static void test_llama3(void) {
    vocab_data v = load_llama3();
    mp_tok *t = make_bpe(&v, "llama-bpe", 128000, 128001, "llama3 subset");
    if (!t) { vocab_free(&v); return; }
    CHECK(strcmp(mp_tok_pre(t), "llama3") == 0 && mp_tok_add_bos(t) == 1, "llama-bpe -> llama3, add_bos");
    run_golden(t, "bpe_llama3_golden.tsv", MP_TOK_SPECIAL, 128000, 88);
    int *ids = NULL, n = 0;
    char *s = NULL;
    CHECK(mp_tok_encode_str(t, "<|begin_of_text|>Hello", MP_TOK_BOS | MP_TOK_SPECIAL, &ids, &n) == MP_OK && n == 3 &&
          ids[0] == 128000 && ids[1] == 128000 && ids[2] == 9906, "BOS + parsed special (n %d)", n);
    free(ids);
    CHECK(mp_tok_encode_str(t, "<|begin_of_text|>Hello", MP_TOK_BOS | MP_TOK_SPECIAL, &ids, &n) == MP_OK &&
          mp_tok_decode(t, ids, n, &s, NULL) == MP_OK && strcmp(s, "Hello") == 0, "control tokens decode to nothing");
    CHECK(strcmp(mp_tok_piece(t, 128009), "<|eot_id|>") == 0, "piece of a special token");
    free(s);
    free(ids);
    random_round_trips(t, "llama3", 1000);
    mp_tok_free(t);
    vocab_free(&v);
}

/* ---- pre-tokenizer splits ---- */

static void check_split(const char *preset, const char *text, const char *const *want, int nwant) {
    mp_pretok *p = NULL;
    mp_pretok_span *sp = NULL;
    size_t n = 0;
    CHECK(mp_pretok_new_named(&p, preset, NULL) == MP_OK, "%s", mp_last_error());
    if (!p) return;
    CHECK(mp_pretok_split(p, text, strlen(text), &sp, &n) == MP_OK, "split");
    int ok = n == (size_t)nwant;
    for (size_t i = 0; ok && i < n; i++)
        ok = sp[i].len == strlen(want[i]) && memcmp(text + sp[i].off, want[i], sp[i].len) == 0;
    CHECK(ok, "%s split of '%s': %zu pieces, expected %d", preset, text, n, nwant);
    if (!ok)
        for (size_t i = 0; i < n; i++) fprintf(stderr, "  [%.*s]\n", (int)sp[i].len, text + sp[i].off);
    free(sp);
    mp_pretok_free(p);
}

static void test_pretok(void) {
    /* the JavaScript reference splits */
    char **lines;
    char *buf = read_all(tu_data("bpe_pretok_golden.tsv"), NULL);
    int nl = split_lines(buf, &lines), total = 0, good = 0;
    for (int i = 0; i < nl; i++) {
        if (!lines[i][0]) continue;
        char *tab = strchr(lines[i], '\t');
        if (!tab) continue;
        *tab = 0;
        const char *p = tab + 1;
        size_t len;
        char *text = json_string(&p, &len);
        mp_pretok *pt = NULL;
        mp_pretok_span *sp = NULL;
        size_t n = 0;
        total++;
        CHECK(mp_pretok_new_named(&pt, lines[i], NULL) == MP_OK, "%s", mp_last_error());
        CHECK(pt && mp_pretok_split(pt, text, len, &sp, &n) == MP_OK, "split");
        /* p -> "\t[...]" */
        int ok = p[0] == '\t' && p[1] == '[';
        p += 2;
        size_t k = 0;
        while (ok && *p == '"') {
            size_t pl;
            char *piece = json_string(&p, &pl);
            ok = k < n && sp[k].len == pl && memcmp(text + sp[k].off, piece, pl) == 0;
            k++;
            free(piece);
            if (*p == ',') p++;
        }
        ok = ok && k == n && *p == ']';
        if (ok) good++;
        else {
            CHECK(0, "pre-tokenizer %s line %d: %s", lines[i], i + 1, tab + 1);
            for (size_t j = 0; j < n; j++) fprintf(stderr, "  [%.*s]\n", (int)sp[j].len, text + sp[j].off);
        }
        free(sp);
        mp_pretok_free(pt);
        free(text);
    }
    printf("bpe_pretok_golden.tsv: %d/%d pre-tokenizer splits equal\n", good, total);
    CHECK(total == 425, "pretok lines %d", total);
    free(lines);
    free(buf);

    /* worked out by hand from the regexes: gpt2 keeps " 12345" whole (" ?\p{N}+"),
     * llama3 takes digits three at a time without the space, qwen2 one at a time */
    check_split("gpt2", "abc 12345", (const char *[]){"abc", " 12345"}, 2);
    check_split("llama3", "abc 12345", (const char *[]){"abc", " ", "123", "45"}, 4);
    check_split("qwen2", "abc 12345", (const char *[]){"abc", " ", "1", "2", "3", "4", "5"}, 7);
    /* contractions: gpt2 is case-sensitive ('LL is not one), llama3/qwen2 are not */
    check_split("gpt2", "WE'LL we'll", (const char *[]){"WE", "'", "LL", " we", "'ll"}, 5);
    check_split("qwen2", "WE'LL we'll", (const char *[]){"WE", "'LL", " we", "'ll"}, 4);
    /* whitespace: "\s+(?!\S)" leaves the last space to the next word */
    check_split("gpt2", "a   b", (const char *[]){"a", "  ", " b"}, 3);
    /* llama3: punctuation takes trailing newlines; "\s*[\r\n]+" */
    check_split("llama3", "x.\n\n  \ny", (const char *[]){"x", ".\n\n", "  \n", "y"}, 4);
    /* a letter run may take one leading non-letter in llama3 ("[^\r\n\p{L}\p{N}]?\p{L}+") */
    check_split("llama3", "$abc", (const char *[]){"$abc"}, 1);
    check_split("gpt2", "$abc", (const char *[]){"$", "abc"}, 2);
    /* default: punctuation first, then gpt2's, digits, then runs of three ASCII digits */
    check_split("default", "a,b 12345", (const char *[]){"a", ",", "b", " ", "123", "45"}, 6);

    /* names and faults */
    CHECK(mp_pretok_preset("llama-bpe") && strcmp(mp_pretok_preset("llama-bpe"), "llama3") == 0, "alias");
    CHECK(strcmp(mp_pretok_preset(NULL), "default") == 0 && mp_pretok_preset("nonesuch") == NULL, "preset names");
    mp_pretok *p = (mp_pretok *)1;
    CHECK(mp_pretok_new_named(&p, "nonesuch", NULL) == MP_ERR_FORMAT && p == NULL, "unknown preset");
    CHECK(strstr(mp_last_error(), "nonesuch") && strstr(mp_last_error(), "qwen2"), "%s", mp_last_error());
    const char *badre[] = {"(unclosed"};
    CHECK(mp_pretok_new(&p, badre, 1) == MP_ERR_FORMAT && p == NULL, "bad regex");
    CHECK(strstr(mp_last_error(), "does not compile"), "%s", mp_last_error());
    /* invalid UTF-8 never matches: it stays in the gaps, and the pieces still tile */
    const char *emptyre[] = {"x*"};   /* matches empty everywhere */
    CHECK(mp_pretok_new(&p, emptyre, 1) == MP_OK, "%s", mp_last_error());
    mp_pretok_span *sp = NULL;
    size_t n = 0;
    const char *txt = "axx\xff\xc3\xa9xb";
    CHECK(mp_pretok_split(p, txt, strlen(txt), &sp, &n) == MP_OK, "split");
    size_t covered = 0;
    for (size_t i = 0; i < n; i++) covered += (sp[i].off == covered) ? sp[i].len : 0;
    CHECK(covered == strlen(txt) && n == 5, "pieces tile the text (%zu pieces)", n);
    free(sp);
    mp_pretok_free(p);
}

/* ---- hand-built byte-level vocabularies ---- */

/* All 256 byte characters (ids 0..255 in byte order), then extra tokens. */
typedef struct { char *tok[300]; int n; } hand_vocab;

static hand_vocab hand_bytes(void) {
    hand_vocab h = {{0}, 0};
    for (int b = 0; b < 256; b++) {
        char s[4] = {0};
        uint32_t cp = mp_bpe_byte_to_cp((unsigned char)b);
        size_t k = 0;
        put_utf8(s, &k, cp);
        h.tok[h.n++] = strdup(s);
    }
    return h;
}

static int hand_add(hand_vocab *h, const char *s) { h->tok[h->n] = strdup(s); return h->n++; }
static void hand_free(hand_vocab *h) { for (int i = 0; i < h->n; i++) free(h->tok[i]); }

static mp_status hand_make(mp_tok **t, hand_vocab *h, const char *const *merges, int nm, const char *pre,
                           int ignore, int prefix, const int32_t *types) {
    mp_tok_params p = mp_tok_params_default();
    p.source = "hand";
    p.model = "gpt2";
    p.pre = pre;
    p.n_tokens = h->n;
    p.tokens = (const char *const *)h->tok;
    p.token_type = types;
    p.merges = merges;
    p.n_merges = nm;
    p.ignore_merges = ignore;
    p.add_prefix_space = prefix;
    return mp_tok_new(t, &p);
}

static void expect_ids(const mp_tok *t, const char *text, int flags, const int *want, int nw) {
    int *ids = NULL, n = 0;
    CHECK(mp_tok_encode_str(t, text, flags, &ids, &n) == MP_OK, "encode '%s': %s", text, mp_last_error());
    CHECK(same_ids(ids, n, want, nw), "'%s': %d ids, expected %d", text, n, nw);
    if (!same_ids(ids, n, want, nw)) { print_ids("got ", ids, n); print_ids("want", want, nw); }
    free(ids);
}

static void test_hand(void) {
    hand_vocab h = hand_bytes();
    int ab = hand_add(&h, "ab"), bc = hand_add(&h, "bc"), abc = hand_add(&h, "abc");
    int aa = hand_add(&h, "aa"), aaa = hand_add(&h, "aaa"), ga = hand_add(&h, "\xc4\xa0" "a");
    int xyz = hand_add(&h, "xyz");   /* in the vocabulary, but no merge builds it */
    int user = hand_add(&h, "<tool>"), ctrl = hand_add(&h, "<|end|>");
    const char *merges[] = {"a b", "b c", "ab c", "a a", "aa a", "\xc4\xa0 a"};
    mp_tok *t = NULL;
    CHECK(hand_make(&t, &h, merges, 6, "gpt2", -1, 0, NULL) == MP_OK, "%s", mp_last_error());
    if (t) {
        /* a b c: "a b" (rank 0) before "b c" (1), then "ab c" (2) */
        expect_ids(t, "abc", 0, (int[]){abc}, 1);
        expect_ids(t, "bc", 0, (int[]){bc}, 1);
        expect_ids(t, "abab", 0, (int[]){ab, ab}, 2);
        /* a a a: both pairs are "a a"; the leftmost goes first, then "aa a".
         * (Rightmost first would leave a + aa, which no merge joins.) */
        expect_ids(t, "aaa", 0, (int[]){aaa}, 1);
        expect_ids(t, "aaaa", 0, (int[]){aa, aa}, 2);
        /* a a a a a: "a a" at 0 and then at 2 (rank 3) before "aa a" (rank 4) */
        expect_ids(t, "aaaaa", 0, (int[]){aa, aaa}, 2);
        /* gpt2 merges run even when the whole pre-token is a token */
        expect_ids(t, "xyz", 0, (int[]){'x', 'y', 'z'}, 3);
        expect_ids(t, " a", 0, (int[]){ga}, 1);
        mp_tok_free(t);
    }
    /* ignore_merges (the llama3 rule) takes "xyz" whole */
    t = NULL;
    CHECK(hand_make(&t, &h, merges, 6, "gpt2", 1, 0, NULL) == MP_OK, "%s", mp_last_error());
    if (t) { expect_ids(t, "xyz", 0, (int[]){xyz}, 1); mp_tok_free(t); }
    /* add_prefix_space: "a" -> " a" */
    t = NULL;
    CHECK(hand_make(&t, &h, merges, 6, "gpt2", -1, 1, NULL) == MP_OK, "%s", mp_last_error());
    if (t) {
        expect_ids(t, "a", 0, (int[]){ga}, 1);
        expect_ids(t, " a", 0, (int[]){ga}, 1);
        /* prepend_space = false turns add_prefix_space off */
        expect_ids(t, "a", MP_TOK_NO_PREFIX, (int[]){'a'}, 1);
        mp_tok_free(t);
    }
    /* prepend_space = true without add_prefix_space: as if it were set */
    t = NULL;
    CHECK(hand_make(&t, &h, merges, 6, "gpt2", -1, 0, NULL) == MP_OK, "%s", mp_last_error());
    if (t) {
        expect_ids(t, "a", MP_TOK_PREFIX, (int[]){ga}, 1);
        expect_ids(t, " a", MP_TOK_PREFIX, (int[]){ga}, 1);
        expect_ids(t, "a", MP_TOK_NO_PREFIX, (int[]){'a'}, 1);
        mp_tok_free(t);
    }
    /* added tokens: USER_DEFINED always split out (and decoded raw), CONTROL only
     * with MP_TOK_SPECIAL */
    int32_t types[300];
    for (int i = 0; i < h.n; i++) types[i] = MP_TOK_TYPE_NORMAL;
    types[user] = MP_TOK_TYPE_USER_DEFINED;
    types[ctrl] = MP_TOK_TYPE_CONTROL;
    t = NULL;
    CHECK(hand_make(&t, &h, merges, 6, "gpt2", -1, 0, types) == MP_OK, "%s", mp_last_error());
    if (t) {
        expect_ids(t, "ab<tool>c", 0, (int[]){ab, user, 'c'}, 3);
        expect_ids(t, "<|end|>", MP_TOK_SPECIAL, (int[]){ctrl}, 1);
        int *ids = NULL, n = 0;
        CHECK(mp_tok_encode_str(t, "<|end|>", 0, &ids, &n) == MP_OK && n > 1, "control as text");
        free(ids);
        CHECK(round_trip(t, "x<tool>y", 8, 0), "user-defined token round trips");
        CHECK(mp_tok_get_kind(t) == MP_TOK_KIND_BPE && mp_tok_bos(t) == -1, "no BOS");
        CHECK(mp_tok_encode_str(t, "a", MP_TOK_BOS, &ids, &n) == MP_ERR_ARG && ids == NULL, "BOS without id");
        mp_tok_free(t);
    }

    /* faults: merges */
    struct { const char *merge, *needle; } bad[] = {
        {"ab", "not two vocabulary tokens"},        /* no space */
        {"a zzz", "not two vocabulary tokens"},     /* unknown side */
        {"b a", "gives 'ba'"},                       /* result not in the vocabulary */
        {" a", "not two vocabulary tokens"},        /* empty side */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *m[] = {"a b", bad[i].merge};
        t = (mp_tok *)1;
        mp_status st = hand_make(&t, &h, m, 2, "gpt2", -1, 0, NULL);
        CHECK(st == MP_ERR_FORMAT && t == NULL, "bad merge '%s': %s", bad[i].merge, mp_status_name(st));
        CHECK(strstr(mp_last_error(), "hand") && strstr(mp_last_error(), "merge 1") &&
              strstr(mp_last_error(), bad[i].needle), "message: %s", mp_last_error());
    }
    const char *nullm[] = {"a b", NULL};
    CHECK(hand_make(&t, &h, nullm, 2, "gpt2", -1, 0, NULL) == MP_ERR_FORMAT, "NULL merge");
    CHECK(hand_make(&t, &h, merges, 6, "gpt-5-imaginary", -1, 0, NULL) == MP_ERR_FORMAT &&
          strstr(mp_last_error(), "gpt-5-imaginary"), "unknown pre-tokenizer: %s", mp_last_error());

    /* a vocabulary without some byte tokens fails at encode, naming the byte */
    free(h.tok['q']);
    h.tok['q'] = strdup("<not q>");
    t = NULL;
    CHECK(hand_make(&t, &h, merges, 6, "gpt2", -1, 0, NULL) == MP_OK, "%s", mp_last_error());
    if (t) {
        int *ids = (int *)1, n = 5;
        CHECK(mp_tok_encode_str(t, "aq", 0, &ids, &n) == MP_ERR_ARG && ids == NULL && n == 0, "missing byte");
        CHECK(strstr(mp_last_error(), "0x71"), "%s", mp_last_error());
        mp_tok_free(t);
    }

    /* params faults */
    mp_tok_params p = mp_tok_params_default();
    p.source = "params";
    p.model = "gpt2";
    p.tokens = (const char *const *)h.tok;
    p.n_tokens = 0;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT, "0 tokens");
    p.n_tokens = h.n;
    p.bos = h.n;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "BOS"), "BOS out of range");
    p.bos = -1;
    p.model = "wordpiece";
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "wordpiece"), "unknown model");
    p.model = NULL;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT, "no model");
    p.model = "gpt2";
    p.add_bos = 1;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "BOS"), "add_bos without BOS");
    p.add_bos = -1;
    char *saved = h.tok[5];
    h.tok[5] = NULL;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "token 5"), "NULL token");
    h.tok[5] = saved;
    const char *re[] = {"[a-"};
    p.pre_regex = re;
    p.n_pre_regex = 1;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "params"), "bad custom regex: %s",
          mp_last_error());
    const char *re2[] = {"\\p{L}+|\\p{N}|\\s+|[^\\s\\p{L}\\p{N}]+"};
    p.pre_regex = re2;
    t = NULL;
    CHECK(mp_tok_new(&t, &p) == MP_OK && t && strcmp(mp_tok_pre(t), "custom") == 0, "custom regex");
    if (t) CHECK(round_trip(t, "ab 12 \xff!", 8, 0), "custom round trip");
    mp_tok_free(t);
    hand_free(&h);
}

/* ---- Hugging Face tokenizer.json ---- */

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    fputs(s, f);
    fclose(f);
}

/* A GPT-2-style tokenizer.json: the 256 byte characters (ids 0..255 in byte
 * order), "ab" 256, "Ġa" 257, "12" 258, added tokens <|eot|> (special) 259 and
 * <x> 260; merges "a b" (string form) and ["Ġ", "a"] (pair form). */
static char *tiny_hf_json(const char *pre_tokenizer, const char *extra_model) {
    static char buf[16384];
    size_t k = 0;
    k += (size_t)snprintf(buf + k, sizeof buf - k, "{\"version\": \"1.0\", \"added_tokens\": ["
        "{\"id\": 259, \"content\": \"<|eot|>\", \"special\": true},"
        "{\"id\": 260, \"content\": \"<x>\", \"special\": false}],"
        "\"pre_tokenizer\": %s, \"post_processor\": {\"type\": \"ByteLevel\"},"
        "\"model\": {\"type\": \"BPE\"%s, \"vocab\": {", pre_tokenizer, extra_model);
    for (int b = 0; b < 256; b++) {
        char s[4] = {0};
        size_t n = 0;
        put_utf8(s, &n, mp_bpe_byte_to_cp((unsigned char)b));
        k += (size_t)snprintf(buf + k, sizeof buf - k, "\"%s%s\": %d, ", (b == '"' || b == '\\') ? "\\" : "", s, b);
    }
    k += (size_t)snprintf(buf + k, sizeof buf - k, "\"ab\": 256, \"\xc4\xa0" "a\": 257, \"12\": 258}, "
                          "\"merges\": [\"a b\", [\"\xc4\xa0\", \"a\"], \"1 2\"]}}");
    return buf;
}

static void test_hf(void) {
    /* the Llama 3 subset laid out as Llama 3's own tokenizer.json */
    mp_tok *t = NULL;
    double t0 = mp_now();
    CHECK(mp_tok_load_hf(&t, tu_data("bpe_llama3_tokenizer.json")) == MP_OK, "%s", mp_last_error());
    if (t) {
        printf("llama3 tokenizer.json read in %.3f s\n", mp_now() - t0);
        CHECK(mp_tok_vocab(t) == 128256 && mp_tok_bos(t) == 128000 && mp_tok_add_bos(t) == 1 &&
              mp_tok_eos(t) == -1 && strcmp(mp_tok_pre(t), "custom") == 0, "llama3 tokenizer.json: vocab %d bos %d",
              mp_tok_vocab(t), mp_tok_bos(t));
        run_golden(t, "bpe_llama3_golden.tsv", MP_TOK_SPECIAL, 128000, 88);
        CHECK(mp_tok_set_bos_eos(t, 128000, 128001) == MP_OK && mp_tok_eos(t) == 128001, "set EOS");
        CHECK(mp_tok_set_bos_eos(t, 128000, 128256) == MP_ERR_ARG, "EOS out of range");
        mp_tok_free(t);
    }

    char path[] = "/tmp/mp_test_bpe_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); exit(1); }
    close(fd);
    /* ByteLevel with its own regex and add_prefix_space, after Digits */
    write_text(path, tiny_hf_json("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\", "
                                  "\"add_prefix_space\": true, \"use_regex\": true}, {\"type\": \"Digits\", "
                                  "\"individual_digits\": false}]}", ""));
    t = NULL;
    CHECK(mp_tok_load_hf(&t, path) == MP_OK, "%s", mp_last_error());
    if (t) {
        CHECK(mp_tok_bos(t) == -1 && mp_tok_add_bos(t) == 0 && mp_tok_vocab(t) == 261, "tiny: no BOS");
        expect_ids(t, "a", 0, (int[]){257}, 1);   /* add_prefix_space: " a", "Ġ a" */
        /* each stretch between added tokens gets its space: " ab" -> Ġ + ab ("a b"
         * ranks before "Ġ a"), <x> (user-defined, always split), " 12" -> Digits
         * splits the space off -> Ġ, 12 */
        expect_ids(t, "ab<x>12", 0, (int[]){' ', 256, 260, ' ', 258}, 5);
        expect_ids(t, "<|eot|>", MP_TOK_SPECIAL, (int[]){259}, 1);
        expect_ids(t, " a", 0, (int[]){257}, 1);
        CHECK(round_trip(t, " x<x>", 5, 0), "round trip with a leading space");
        mp_tok_free(t);
    }
    write_text(path, tiny_hf_json("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, "
                                  "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}]}", ""));
    CHECK(mp_tok_load_hf(&t, path) == MP_ERR_FORMAT && strstr(mp_last_error(), "add_prefix_space"), "%s",
          mp_last_error());
    /* faults, each naming the file and the construct */
    struct { const char *json, *needle; } bad[] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {}, \"merges\": []}}", "byte_fallback"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", "no valid id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [3]}}", "merges[0]"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "used twice"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "no ByteLevel"},
        {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"Removed\"},"
         "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "Removed"},
        {"{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, "
         "\"merges\": []}}", "Metaspace"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a", "invalid JSON"},   /* truncated */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(path, bad[i].json);
        t = (mp_tok *)1;
        mp_status st = mp_tok_load_hf(&t, path);
        CHECK(st == MP_ERR_FORMAT && t == NULL, "bad tokenizer.json %zu: %s", i, mp_status_name(st));
        CHECK(strstr(mp_last_error(), path) && strstr(mp_last_error(), bad[i].needle), "message %zu: %s", i,
              mp_last_error());
    }
    /* a merge whose result is missing, through the real structure */
    write_text(path, tiny_hf_json("{\"type\": \"ByteLevel\"}", ""));
    char *j = read_all(path, NULL), *m = strstr(j, "\"1 2\"");
    memcpy(m, "\"2 1\"", 5);
    write_text(path, j);
    free(j);
    CHECK(mp_tok_load_hf(&t, path) == MP_ERR_FORMAT && strstr(mp_last_error(), "merge 2"), "%s", mp_last_error());
    unlink(path);
    CHECK(mp_tok_load_hf(&t, path) != MP_OK && t == NULL && strstr(mp_last_error(), path), "missing file");
}

/* ---- SentencePiece from arrays ---- */

/* test_tokenizer.c's small vocabulary, spelt as GGUF does (U+2581 for spaces,
 * <s> / </s> / <unk> with token types). */
static void test_spm_small(void) {
    const char *sp = "\xe2\x96\x81";
    char *tok[268];
    float score[268] = {0};
    int32_t type[268];
    char s[32];
    tok[0] = strdup("<unk>"); type[0] = MP_TOK_TYPE_UNKNOWN;
    tok[1] = strdup("<s>"); type[1] = MP_TOK_TYPE_CONTROL;
    tok[2] = strdup("</s>"); type[2] = MP_TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(s, sizeof s, "<0x%02X>", b);
        tok[3 + b] = strdup(s);
        type[3 + b] = MP_TOK_TYPE_BYTE;
    }
    struct { const char *p; float sc; } extra[] = {{"_", -5}, {"a", -6}, {"b", -7}, {"ab", -1}, {"_a", -2},
                                                   {"\xc3\xa9", -8}, {"ba", -1}, {"aba", -3}, {"_ab", -9}};
    for (int i = 0; i < 9; i++) {
        char q[32] = "";
        for (const char *c = extra[i].p; *c; c++) strcat(q, *c == '_' ? sp : (char[2]){*c, 0});
        tok[259 + i] = strdup(q);
        score[259 + i] = extra[i].sc;
        type[259 + i] = MP_TOK_TYPE_NORMAL;
    }
    mp_tok_params p = mp_tok_params_default();
    p.source = "spm";
    p.model = "llama";
    p.n_tokens = 268;
    p.tokens = (const char *const *)tok;
    p.scores = score;
    p.token_type = type;
    p.bos = 1;
    p.eos = 2;
    mp_tok *t = NULL;
    CHECK(mp_tok_new(&t, &p) == MP_OK, "%s", mp_last_error());
    if (t) {
        CHECK(mp_tok_get_kind(t) == MP_TOK_KIND_SPM && mp_tok_add_bos(t) == 1 && mp_tok_pre(t) == NULL, "spm");
        expect_ids(t, "ab", MP_TOK_BOS | MP_TOK_EOS, (int[]){1, 267, 2}, 3);
        expect_ids(t, "aba", 0, (int[]){259, 266}, 2);
        expect_ids(t, "\xc3\xa9\xc3\xbcx", MP_TOK_BOS, (int[]){1, 259, 264, 0xC3 + 3, 0xBC + 3, 'x' + 3}, 6);
        /* control pieces are blanked for matching: "<s>" is text, never token 1 */
        int *ids = NULL, n = 0;
        CHECK(mp_tok_encode_str(t, "<s>", 0, &ids, &n) == MP_OK && n == 4 && ids[1] == '<' + 3, "<s> as text");
        free(ids);
        char *dec = NULL;
        CHECK(mp_tok_encode_str(t, "aa b", MP_TOK_BOS, &ids, &n) == MP_OK &&
              mp_tok_decode(t, ids, n, &dec, NULL) == MP_OK && strcmp(dec, "aa b") == 0,
              "space after BOS stripped: '%s'", dec ? dec : "");
        free(dec);
        free(ids);
        CHECK(strcmp(mp_tok_piece(t, 263), "\xe2\x96\x81" "a") == 0, "piece keeps U+2581");
        CHECK(mp_tok_find(t, "\xe2\x96\x81" "ab") == 267, "find");
        char b[8];
        CHECK(mp_tok_token_bytes(t, 1, 263, b, sizeof b) == 1 && strcmp(b, "a") == 0, "token after BOS");
        CHECK(mp_tok_token_bytes(t, 5, 263, b, sizeof b) == 2 && strcmp(b, " a") == 0, "token elsewhere");
        CHECK(mp_tok_encode(t, "a\0b", 3, 0, &ids, &n) == MP_ERR_ARG && strstr(mp_last_error(), "NUL"), "NUL");
        mp_tok_free(t);
    }
    /* unsupported layouts */
    p.add_space_prefix = 0;
    t = (mp_tok *)1;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && t == NULL && strstr(mp_last_error(), "add_space_prefix"),
          "add_space_prefix=false: %s", mp_last_error());
    p.add_space_prefix = -1;
    char *swap = tok[3];
    tok[3] = tok[4];
    tok[4] = swap;
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "<0x00>"), "byte layout: %s",
          mp_last_error());
    tok[4] = tok[3];
    tok[3] = swap;
    free(tok[4]);
    tok[4] = strdup("q");
    CHECK(mp_tok_new(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), "byte pieces"), "missing byte: %s",
          mp_last_error());
    for (int i = 0; i < 268; i++) free(tok[i]);
}

/* ---- ../shared: SentencePiece from the arrays of aidreams260K's tokenizer ---- */

static void test_shared(void) {
    const char *tsv = tu_shared("golden/aidreams260K_tokenizer.tsv");   /* SKIP when absent */
    const char *bin = tu_shared("models/aidreams260K.tok512.bin");
    size_t nb;
    unsigned char *f = (unsigned char *)read_all(bin, &nb);
    char *tok[512];
    float score[512];
    size_t off = 4;
    int ok = 1;
    for (int i = 0; i < 512 && ok; i++) {   /* trusted file, but stay in bounds */
        int32_t len;
        ok = off + 8 <= nb;
        if (!ok) break;
        memcpy(&score[i], f + off, 4);
        memcpy(&len, f + off + 4, 4);
        ok = len >= 0 && off + 8 + (size_t)len <= nb;
        if (!ok) break;
        tok[i] = calloc((size_t)len + 1, 1);
        memcpy(tok[i], f + off + 8, (size_t)len);
        off += 8 + (size_t)len;
    }
    CHECK(ok && off == nb, "parse %s", bin);
    free(f);
    if (!ok) return;
    mp_tok_params p = mp_tok_params_default();
    p.source = "aidreams260K arrays";
    p.model = "llama";
    p.n_tokens = 512;
    p.tokens = (const char *const *)tok;
    p.scores = score;
    p.bos = 1;
    p.eos = 2;
    mp_tok *t = NULL, *ref = NULL;
    CHECK(mp_tok_new(&t, &p) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tok_load_llama2c(&ref, bin, 512) == MP_OK, "%s", mp_last_error());
    if (!t || !ref) goto done;
    CHECK(mp_tok_get_kind(ref) == MP_TOK_KIND_LLAMA2C && mp_tok_bos(ref) == 1 && mp_tok_eos(ref) == 2, "wrap");

    char *buf = read_all(tsv, NULL), **lines;
    int nl = split_lines(buf, &lines), total = 0, good = 0;
    for (int i = 0; i < nl; i++) {
        if (!lines[i][0]) continue;
        char *tab = strrchr(lines[i], '\t');
        if (!tab) continue;
        *tab = 0;
        char text[8192];
        size_t k = 0;
        for (const char *c = lines[i]; *c && k < sizeof text - 1; c++) {
            if (c[0] == '\\' && c[1] == 'n') { text[k++] = '\n'; c++; }
            else text[k++] = *c;
        }
        text[k] = 0;
        int want[1024], nw = parse_ids(tab + 1, want, 1024);
        int *ids = NULL, n = 0, *rids = NULL, rn = 0;
        total++;
        CHECK(mp_tok_encode_str(t, text, MP_TOK_BOS, &ids, &n) == MP_OK, "%s", mp_last_error());
        CHECK(mp_tok_encode_str(ref, text, MP_TOK_BOS, &rids, &rn) == MP_OK, "%s", mp_last_error());
        if (same_ids(ids, n, want, nw)) good++;
        else CHECK(0, "aidreams golden line %d ('%s')", i + 1, lines[i]);
        CHECK(same_ids(rids, rn, want, nw), "llama2c wrapper, line %d", i + 1);
        CHECK(round_trip(t, text, strlen(text), MP_TOK_BOS), "round trip line %d", i + 1);
        CHECK(round_trip(ref, text, strlen(text), MP_TOK_BOS), "wrapper round trip line %d", i + 1);
        free(ids);
        free(rids);
    }
    printf("aidreams260K_tokenizer.tsv (SentencePiece from arrays): %d/%d golden lines equal\n", good, total);
    CHECK(total == 10, "golden lines: %d", total);
    free(lines);
    free(buf);
done:
    mp_tok_free(t);
    mp_tok_free(ref);
    for (int i = 0; i < 512; i++) free(tok[i]);
}

/* No argument: the self-contained checks; "shared": the ../shared golden data
 * (SKIP, exit 77, when absent), registered as a separate ctest test. */
int main(int argc, char **argv) {
    mp_init();
    if (argc > 1 && strcmp(argv[1], "shared") == 0) {
        test_shared();
        return tu_finish("test_bpe shared");
    }
    test_pretok();
    test_hand();
    test_spm_small();
    test_hf();
    test_gpt2();
    test_llama3();
    return tu_finish("test_bpe");
}
