/* tok_llama2c.c — llama2.c's tokenizer.bin: loading with every length validated,
 * BPE encoding and decoding that reproduce llama2.c run.c's encode()/decode()
 * (code points looked up as pieces, byte fallback to ids 3..258, greedy merges
 * of the best-scoring adjacent pair, dummy-prefix space, <0xXX> byte pieces). */
#include "tok_llama2c.h"
#include "merge_heap.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MP_TOK_MAX_PIECE (1 << 16)   /* sanity bound on max_token_length */
#define MP_TOK_MAX_VOCAB (1 << 24)

typedef struct { const char *str; int id; } tok_index;

struct mp_tokenizer {
    int vocab;
    int max_len;          /* max_token_length from the file */
    char **piece;         /* [vocab] NUL-terminated, pointing into blob */
    float *score;         /* [vocab] */
    char *blob;           /* all pieces, each followed by NUL */
    tok_index *sorted;    /* [vocab] sorted by (str, id) */
    int space_id;         /* id of " " (the dummy prefix), -1 if absent */
    unsigned char byte_piece[256][2];   /* {b, 0}: what <0xXX> decodes to */
};

static int cmp_index(const void *a, const void *b) {
    const tok_index *x = a, *y = b;
    int c = strcmp(x->str, y->str);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

static int cmp_key(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const tok_index *)elem)->str);
}

/* Id of the piece equal to s (the lowest id among duplicates), or -1. */
static int lookup(const mp_tokenizer *t, const char *s) {
    const tok_index *r = bsearch(s, t->sorted, (size_t)t->vocab, sizeof *t->sorted, cmp_key);
    if (!r) return -1;
    while (r > t->sorted && strcmp(r[-1].str, s) == 0) r--;
    return r->id;
}

void mp_tokenizer_free(mp_tokenizer *t) {
    if (!t) return;
    free(t->piece);
    free(t->score);
    free(t->blob);
    free(t->sorted);
    free(t);
}

static int32_t rd_i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* A tokenizer of vocab pieces with `text` bytes for them (NUL-terminated, in
 * t->blob), its byte pieces set; the caller fills piece/score and calls
 * tok_sort_index. NULL when out of memory. */
static mp_tokenizer *tok_alloc(int vocab, size_t text) {
    mp_tokenizer *t = mp_calloc(1, sizeof *t, "tokenizer");
    if (!t) return NULL;
    if (!(t->piece = mp_calloc((size_t)vocab, sizeof *t->piece, "tokenizer pieces")) ||
        !(t->score = mp_calloc((size_t)vocab, sizeof *t->score, "tokenizer scores")) ||
        !(t->sorted = mp_calloc((size_t)vocab, sizeof *t->sorted, "tokenizer index")) ||
        !(t->blob = mp_malloc(text, "tokenizer text"))) {
        mp_tokenizer_free(t);
        return NULL;
    }
    t->vocab = vocab;
    for (int b = 0; b < 256; b++) t->byte_piece[b][0] = (unsigned char)b;
    return t;
}

/* The sorted piece index lookup() searches, and the id of " ". */
static void tok_sort_index(mp_tokenizer *t) {
    for (int i = 0; i < t->vocab; i++) {
        t->sorted[i].str = t->piece[i];
        t->sorted[i].id = i;
    }
    qsort(t->sorted, (size_t)t->vocab, sizeof *t->sorted, cmp_index);
    t->space_id = lookup(t, " ");
}

mp_status mp_tokenizer_load(mp_tokenizer **out, const char *path, int vocab) {
    mp_status st = MP_OK;
    FILE *f = NULL;
    unsigned char *buf = NULL;
    mp_tokenizer *t = NULL;
    struct stat sb;
    size_t size;
    *out = NULL;

    if (vocab <= 0 || vocab > MP_TOK_MAX_VOCAB)
        return mp_error(MP_ERR_ARG, "%s: vocabulary size %d is out of range", path, vocab);
    if ((st = mp_check_regular_file(path)) != MP_OK) return st; /* a FIFO would block the open */
    if (!(f = fopen(path, "rb")))
        return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = mp_error(MP_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    size = (size_t)sb.st_size;
    if (!(buf = mp_malloc(size, path))) { st = MP_ERR_NOMEM; goto cleanup; }
    if (size && fread(buf, 1, size, f) != size) {
        st = mp_error(MP_ERR_IO, "%s: read failed", path);
        goto cleanup;
    }
    if (size < 4) {
        st = mp_error(MP_ERR_FORMAT, "%s: truncated: %zu bytes, no max_token_length header", path, size);
        goto cleanup;
    }
    int32_t max_len = rd_i32(buf);
    if (max_len <= 0 || max_len > MP_TOK_MAX_PIECE) {
        st = mp_error(MP_ERR_FORMAT, "%s: max_token_length %d is out of range (1..%d); "
                      "not a llama2.c tokenizer.bin?", path, (int)max_len, MP_TOK_MAX_PIECE);
        goto cleanup;
    }

    /* First pass: validate every record and measure the piece bytes. */
    size_t off = 4, text = 0;
    for (int i = 0; i < vocab; i++) {
        if (size - off < 8) {
            st = mp_error(MP_ERR_FORMAT, "%s: truncated at piece %d of %d (offset %zu, file has %zu "
                          "bytes): is the vocabulary size right?", path, i, vocab, off, size);
            goto cleanup;
        }
        int32_t len = rd_i32(buf + off + 4);
        if (len < 0 || len > max_len) {
            st = mp_error(MP_ERR_FORMAT, "%s: piece %d has length %d (must be 0..max_token_length %d)",
                          path, i, (int)len, (int)max_len);
            goto cleanup;
        }
        off += 8;
        if (size - off < (size_t)len) {
            st = mp_error(MP_ERR_FORMAT, "%s: truncated in piece %d of %d (needs %d bytes at offset %zu, "
                          "file has %zu)", path, i, vocab, (int)len, off, size);
            goto cleanup;
        }
        off += (size_t)len;
        text += (size_t)len + 1;
    }
    if (off != size) {
        st = mp_error(MP_ERR_FORMAT, "%s: %zu trailing bytes after %d pieces: the file holds a "
                      "different vocabulary size or is not a tokenizer.bin", path, size - off, vocab);
        goto cleanup;
    }

    if (!(t = tok_alloc(vocab, text))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    t->max_len = max_len;
    off = 4;
    char *w = t->blob;
    for (int i = 0; i < vocab; i++) {
        int32_t len = rd_i32(buf + off + 4);
        memcpy(&t->score[i], buf + off, 4);
        off += 8;
        memcpy(w, buf + off, (size_t)len);
        w[len] = '\0';
        t->piece[i] = w;
        w += len + 1;
        off += (size_t)len;
    }
    tok_sort_index(t);
    *out = t;
    t = NULL;
cleanup:
    if (f) fclose(f);
    free(buf);
    mp_tokenizer_free(t);
    return st;
}

/* The same tokenizer built from in-memory pieces (e.g. GGUF metadata), with the
 * checks and layout of mp_tokenizer_load. */
mp_status mp_tokenizer_new(mp_tokenizer **out, int vocab, const char *const *pieces,
                                   const float *scores) {
    mp_status st = MP_OK;
    mp_tokenizer *t = NULL;
    size_t text = 0, max_len = 1;
    *out = NULL;
    if (vocab <= 0 || vocab > MP_TOK_MAX_VOCAB)
        return mp_error(MP_ERR_ARG, "tokenizer: vocabulary size %d is out of range", vocab);
    if (!pieces) return mp_error(MP_ERR_ARG, "tokenizer: pieces is NULL");
    for (int i = 0; i < vocab; i++) {
        if (!pieces[i]) return mp_error(MP_ERR_ARG, "tokenizer: piece %d is NULL", i);
        size_t l = strlen(pieces[i]);
        if (l > MP_TOK_MAX_PIECE)
            return mp_error(MP_ERR_FORMAT, "tokenizer: piece %d is %zu bytes long (at most %d)", i, l,
                            MP_TOK_MAX_PIECE);
        if (l > max_len) max_len = l;
        text += l + 1;
    }
    if (!(t = tok_alloc(vocab, text))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    t->max_len = (int)max_len;
    char *w = t->blob;
    for (int i = 0; i < vocab; i++) {
        size_t l = strlen(pieces[i]);
        memcpy(w, pieces[i], l + 1);
        t->piece[i] = w;
        w += l + 1;
        t->score[i] = scores ? scores[i] : 0.0f;
    }
    tok_sort_index(t);
    *out = t;
    t = NULL;
cleanup:
    mp_tokenizer_free(t);
    return st;
}

int mp_tokenizer_vocab(const mp_tokenizer *t) { return t->vocab; }
int mp_tokenizer_bos(const mp_tokenizer *t) { (void)t; return 1; }
int mp_tokenizer_eos(const mp_tokenizer *t) { (void)t; return 2; }

typedef struct {
    const mp_tokenizer *t;
    int *tok, *prev, *next;
    unsigned *ver;
    mp_merge_cand *heap;
    int nheap;
    char *buf;
} merge_state;

static void consider(merge_state *s, int l, int r) {
    if (l < 0 || r < 0) return;
    const char *a = s->t->piece[s->tok[l]], *b = s->t->piece[s->tok[r]];
    size_t la = strlen(a), lb = strlen(b);
    memcpy(s->buf, a, la);
    memcpy(s->buf + la, b, lb + 1);
    int id = lookup(s->t, s->buf);
    if (id >= 0 && s->t->score[id] > -1e10f) {   /* llama2.c's best_score floor */
        /* llama2.c merges the best-scoring pair, the leftmost among equal scores */
        mp_merge_cand c = {-(double)s->t->score[id], l, r, id, s->ver[l], s->ver[r]};
        mp_merge_push(s->heap, &s->nheap, c);
    }
}

/* llama2.c's merge loop (repeatedly merge the best-scoring adjacent pair whose
 * concatenation is a piece, leftmost on ties) in O(n log n): candidates sit in
 * a heap and go stale when either side changes. Rewrites tok[0..*n). */
static mp_status merge_pairs(const mp_tokenizer *t, int *tok, int *n, char *buf) {
    mp_status st = MP_OK;
    int nt = *n;
    size_t cap;
    merge_state s = {t, tok, NULL, NULL, NULL, NULL, 0, buf};
    if (nt < 2) return MP_OK;
    cap = (size_t)nt * 3;   /* nt-1 initial pairs, at most 2 new per merge */
    if (!(s.prev = mp_calloc((size_t)nt, sizeof *s.prev, "tokenizer merge")) ||
        !(s.next = mp_calloc((size_t)nt, sizeof *s.next, "tokenizer merge")) ||
        !(s.ver = mp_calloc((size_t)nt, sizeof *s.ver, "tokenizer merge")) ||
        !(s.heap = mp_calloc(cap, sizeof *s.heap, "tokenizer merge"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    for (int i = 0; i < nt; i++) {
        s.prev[i] = i - 1;
        s.next[i] = i + 1 < nt ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < nt; i++) consider(&s, i, i + 1);
    while (s.nheap > 0) {
        mp_merge_cand c = mp_merge_pop(s.heap, &s.nheap);
        if (s.ver[c.l] != c.vl || s.ver[c.r] != c.vr) continue;   /* stale */
        tok[c.l] = c.id;
        s.ver[c.l]++;
        s.ver[c.r]++;   /* r is gone */
        s.next[c.l] = s.next[c.r];
        if (s.next[c.r] >= 0) s.prev[s.next[c.r]] = c.l;
        consider(&s, s.prev[c.l], c.l);
        consider(&s, c.l, s.next[c.l]);
    }
    int k = 0;
    for (int i = 0; i >= 0; i = s.next[i]) tok[k++] = tok[i];   /* token 0 is never merged away */
    *n = k;
cleanup:
    free(s.prev);
    free(s.next);
    free(s.ver);
    free(s.heap);
    return st;
}

mp_status mp_tokenizer_encode(const mp_tokenizer *t, const char *text, int bos, int eos,
                              int **out, int *n) {
    return mp_tokenizer_encode_prefix(t, text, bos, eos, 1, out, n);
}

mp_status mp_tokenizer_encode_prefix(const mp_tokenizer *t, const char *text, int bos, int eos, int prefix,
                                     int **out, int *n) {
    mp_status st = MP_OK;
    int *tok = NULL, nt = 0;
    char *buf = NULL;
    size_t cap, tl;
    *out = NULL;
    *n = 0;
    if (!text) return mp_error(MP_ERR_ARG, "tokenizer encode: text is NULL");
    tl = strlen(text);
    /* at most one token per byte, plus BOS, dummy prefix, EOS; the merge heap
     * holds up to 3 entries per token */
    if (tl > (size_t)INT_MAX / 3 - 3)
        return mp_error(MP_ERR_ARG, "tokenizer encode: text too long (%zu bytes)", tl);
    cap = tl + 3;
    if (!(tok = mp_calloc(cap, sizeof *tok, "tokens")) ||
        !(buf = mp_malloc((size_t)t->max_len * 2 + 8, "tokenizer buffer"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    if (bos) tok[nt++] = 1;
    if (prefix && text[0] != '\0' && t->space_id >= 0) tok[nt++] = t->space_id;

    /* UTF-8 code points (at most 4 bytes) looked up as pieces; else bytes */
    size_t len = 0;
    for (const char *c = text; *c; c++) {
        if (((unsigned char)*c & 0xC0) != 0x80) len = 0;   /* start of a code point */
        buf[len++] = *c;
        buf[len] = '\0';
        if (((unsigned char)c[1] & 0xC0) == 0x80 && len < 4) continue;
        int id = lookup(t, buf);
        if (id >= 0) {
            tok[nt++] = id;
        } else {
            for (size_t i = 0; i < len; i++) {
                int b = (unsigned char)buf[i] + 3;
                if (b >= t->vocab) {
                    st = mp_error(MP_ERR_ARG, "tokenizer encode: byte 0x%02X needs byte-fallback id %d "
                                  "but the vocabulary has %d pieces", (unsigned char)buf[i], b, t->vocab);
                    goto cleanup;
                }
                tok[nt++] = b;
            }
        }
        len = 0;
    }

    if ((st = merge_pairs(t, tok, &nt, buf)) != MP_OK) goto cleanup;
    if (eos) tok[nt++] = 2;
    *out = tok;
    *n = nt;
    tok = NULL;
cleanup:
    free(tok);
    free(buf);
    return st;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

const char *mp_tokenizer_piece(const mp_tokenizer *t, int prev, int token) {
    if (token < 0 || token >= t->vocab) return NULL;
    const char *p = t->piece[token];
    if (prev == 1 && p[0] == ' ') p++;   /* SentencePiece strips the space after BOS */
    if (p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[3] && p[4] && p[5] == '>' && !p[6]) {
        int hi = hexval(p[3]), lo = hexval(p[4]);
        if (hi >= 0 && lo >= 0) return (const char *)t->byte_piece[hi * 16 + lo];
    }
    return p;
}

mp_status mp_tokenizer_decode(const mp_tokenizer *t, const int *tokens, int n, char **out) {
    size_t total = 1, used = 0;
    char *s;
    *out = NULL;
    if (n < 0) return mp_error(MP_ERR_ARG, "tokenizer decode: negative length %d", n);
    for (int i = 0; i < n; i++) {
        const char *p = mp_tokenizer_piece(t, i ? tokens[i - 1] : -1, tokens[i]);
        if (!p) return mp_error(MP_ERR_ARG, "tokenizer decode: token %d at position %d is out of "
                                "range [0, %d)", tokens[i], i, t->vocab);
        if (tokens[i] == 1 || tokens[i] == 2) continue;
        total += strlen(p);
    }
    if (!(s = mp_malloc(total, "decoded text"))) return MP_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        if (tokens[i] == 1 || tokens[i] == 2) continue;
        const char *p = mp_tokenizer_piece(t, i ? tokens[i - 1] : -1, tokens[i]);
        size_t l = strlen(p);
        memcpy(s + used, p, l);
        used += l;
    }
    s[used] = '\0';
    *out = s;
    return MP_OK;
}
