/* tok.c — the mp_tok tokenizer interface (tok.h): construction from arrays with
 * every count, id and merge validated; SentencePiece-style vocabularies through
 * the llama2.c algorithm of tok_llama2c.c; byte-level BPE (GPT-2's byte map,
 * ranked merges run with a heap per pre-token, a per-call pre-token cache,
 * special/added tokens split out first); the raw-bytes vocabulary (one token
 * per byte, BOS 256); decoding back to bytes. The tokenizer.json reader is in
 * tok_hf.c. */
#include "tok.h"
#include "merge_heap.h"
#include "pretok.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- GPT-2's byte-to-unicode map ----
 * Printable bytes (!..~, ¡..¬, ®..ÿ) stand for themselves; the other 68 bytes,
 * in increasing order, take the code points 256, 257, ... (0..32 -> 256..288,
 * 127..160 -> 289..322, 173 -> 323). */
uint32_t mp_bpe_byte_to_cp(unsigned char b) {
    if (b <= 32) return 256u + b;
    if (b >= 127 && b <= 160) return 289u + (b - 127u);
    if (b == 173) return 323u;
    return b;
}

int mp_bpe_cp_to_byte(uint32_t cp) {
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    return -1;
}

/* UTF-8 of code point cp (< 0x800 here) into s; returns the byte count. */
static int put_cp(char *s, uint32_t cp) {
    if (cp < 0x80) { s[0] = (char)cp; return 1; }
    s[0] = (char)(0xC0 | (cp >> 6));
    s[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Decodes one UTF-8 character at s[0, n): *cp and the length, or 0 if invalid. */
static int get_cp(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    int len;
    uint32_t v;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* ---- hash tables ---- */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* piece string -> id (open addressing; slots hold ids, -1 empty) */
typedef struct { int *slot; size_t mask; } strtab;

/* ---- the tokenizer ---- */
typedef struct { uint64_t key; int rank, id; } merge_slot;   /* key UINT64_MAX: empty */

struct mp_tok {
    mp_tok_kind kind;
    int n_vocab, bos, eos, add_bos, add_eos;
    char **piece;        /* [n_vocab] the source's strings (NULL for llama2.c) */
    size_t *plen;        /* [n_vocab] */
    char *blob;
    unsigned char *type; /* [n_vocab] MP_TOK_TYPE_* or NULL */
    strtab tab;          /* over piece */
    mp_tokenizer *spm;   /* LLAMA2C and SPM */
    /* byte-level BPE */
    mp_pretok *pre;
    const char *pre_name;
    int ignore_merges, add_prefix_space;
    merge_slot *merge;
    size_t merge_mask;
    int byte_tok[256];   /* id of the token for byte b, -1 if none */
    int *special;        /* ids of CONTROL / USER_DEFINED tokens, longest first */
    unsigned char special_first[256];   /* 1 for a byte that starts a special token */
    int n_special, n_user;
};

static int tab_find(const mp_tok *t, const char *s, size_t n) {
    if (!t->tab.slot) return -1;
    for (size_t i = hash_bytes(s, n) & t->tab.mask;; i = (i + 1) & t->tab.mask) {
        int id = t->tab.slot[i];
        if (id < 0) return -1;
        if (t->plen[id] == n && memcmp(t->piece[id], s, n) == 0) return id;
    }
}

static mp_status tab_build(mp_tok *t) {
    size_t cap = pow2_at_least((size_t)t->n_vocab * 2);
    if (!(t->tab.slot = mp_malloc(cap * sizeof *t->tab.slot, "tokenizer index"))) return MP_ERR_NOMEM;
    memset(t->tab.slot, 0xFF, cap * sizeof *t->tab.slot);
    t->tab.mask = cap - 1;
    for (int id = 0; id < t->n_vocab; id++) {   /* in id order: the lowest id wins duplicates */
        size_t i = hash_bytes(t->piece[id], t->plen[id]) & t->tab.mask;
        for (;; i = (i + 1) & t->tab.mask) {
            int o = t->tab.slot[i];
            if (o < 0) { t->tab.slot[i] = id; break; }
            if (t->plen[o] == t->plen[id] && memcmp(t->piece[o], t->piece[id], t->plen[id]) == 0) break;
        }
    }
    return MP_OK;
}

static const merge_slot *merge_find(const mp_tok *t, int a, int b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *m = &t->merge[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

mp_tok_params mp_tok_params_default(void) {
    mp_tok_params p;
    memset(&p, 0, sizeof p);
    p.bos = p.eos = -1;
    p.add_bos = p.add_eos = -1;
    p.ignore_merges = -1;
    p.add_space_prefix = -1;
    return p;
}

void mp_tok_free(mp_tok *t) {
    if (!t) return;
    free(t->piece);
    free(t->plen);
    free(t->blob);
    free(t->type);
    free(t->tab.slot);
    mp_tokenizer_free(t->spm);
    mp_pretok_free(t->pre);
    free(t->merge);
    free(t->special);
    free(t);
}

/* Copies the source's strings (and types). */
static mp_status copy_vocab(mp_tok *t, const mp_tok_params *p, const char *src) {
    size_t text = 0;
    for (int i = 0; i < p->n_tokens; i++) {
        if (!p->tokens[i]) return mp_error(MP_ERR_FORMAT, "%s: token %d is NULL", src, i);
        if (mp_add_size(text, strlen(p->tokens[i]) + 1, &text))
            return mp_error(MP_ERR_NOMEM, "%s: vocabulary text too large", src);
    }
    if (!(t->piece = mp_calloc((size_t)p->n_tokens, sizeof *t->piece, "tokenizer pieces")) ||
        !(t->plen = mp_calloc((size_t)p->n_tokens, sizeof *t->plen, "tokenizer pieces")) ||
        !(t->blob = mp_malloc(text, "tokenizer text")))
        return MP_ERR_NOMEM;
    char *w = t->blob;
    for (int i = 0; i < p->n_tokens; i++) {
        size_t l = strlen(p->tokens[i]);
        memcpy(w, p->tokens[i], l + 1);
        t->piece[i] = w;
        t->plen[i] = l;
        w += l + 1;
    }
    if (p->token_type) {
        if (!(t->type = mp_malloc((size_t)p->n_tokens, "token types"))) return MP_ERR_NOMEM;
        for (int i = 0; i < p->n_tokens; i++) {
            int32_t ty = p->token_type[i];
            t->type[i] = (unsigned char)(ty >= 0 && ty <= MP_TOK_TYPE_BYTE ? ty : MP_TOK_TYPE_UNDEFINED);
        }
    }
    return tab_build(t);
}

static int type_of(const mp_tok *t, int id) { return t->type ? t->type[id] : MP_TOK_TYPE_NORMAL; }

/* SentencePiece from arrays: llama2.c's pieces (U+2581 -> ' '; CONTROL and
 * UNKNOWN pieces blanked so that text never merges into them, as SentencePiece
 * never produces them), then tok_llama2c.c's algorithm. */
static mp_status build_spm(mp_tok *t, const mp_tok_params *p, const char *src) {
    mp_status st = MP_OK;
    char **conv = NULL, *cblob = NULL;
    size_t total = 0;
    if (p->add_space_prefix == 0)
        return mp_error(MP_ERR_FORMAT, "%s: SentencePiece vocabulary with add_space_prefix = false is not "
                        "supported (the llama2.c algorithm always adds the dummy prefix)", src);
    int nbyte = 0;
    for (int b = 0; b < 256; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        int id = tab_find(t, want, 6);
        if (id >= 0) nbyte++;
        if (id >= 0 && id != 3 + b)
            return mp_error(MP_ERR_FORMAT, "%s: byte piece %s is token %d, not %d: only the llama2.c layout "
                            "(<0x00>..<0xFF> at ids 3..258) is supported", src, want, id, 3 + b);
    }
    if (nbyte != 256 || t->n_vocab < 259)
        return mp_error(MP_ERR_FORMAT, "%s: SentencePiece vocabulary has %d of the 256 byte pieces <0xXX> at "
                        "ids 3..258: byte fallback needs all of them", src, nbyte);
    for (int i = 0; i < t->n_vocab; i++) total += t->plen[i] + 1;
    if (!(conv = mp_calloc((size_t)t->n_vocab, sizeof *conv, "tokenizer pieces")) ||
        !(cblob = mp_malloc(total, "tokenizer pieces"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    char *w = cblob;
    for (int i = 0; i < t->n_vocab; i++) {
        conv[i] = w;
        int ty = type_of(t, i);
        if (ty == MP_TOK_TYPE_CONTROL || ty == MP_TOK_TYPE_UNKNOWN) { *w++ = '\0'; continue; }
        for (const char *s = t->piece[i]; *s;) {
            if ((unsigned char)s[0] == 0xE2 && (unsigned char)s[1] == 0x96 && (unsigned char)s[2] == 0x81) {
                *w++ = ' ';
                s += 3;
            } else {
                *w++ = *s++;
            }
        }
        *w++ = '\0';
    }
    if ((st = mp_tokenizer_new(&t->spm, t->n_vocab, (const char *const *)conv, p->scores)) != MP_OK)
        mp_error_prefix(st, "%s", src);
cleanup:
    free(conv);
    free(cblob);
    return st;
}

typedef struct { size_t len; int id; } len_id;

static int cmp_special(const void *a, const void *b) {   /* longest first, then by id */
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static mp_status build_bpe(mp_tok *t, const mp_tok_params *p, const char *src) {
    mp_status st;
    int preset_ignore = 0;
    if (p->n_pre_regex > 0) {
        if ((st = mp_pretok_new(&t->pre, p->pre_regex, p->n_pre_regex)) != MP_OK)
            return mp_error_prefix(st, "%s", src);
        t->pre_name = "custom";
    } else {
        if ((st = mp_pretok_new_named(&t->pre, p->pre, &preset_ignore)) != MP_OK)
            return mp_error_prefix(st, "%s", src);
        t->pre_name = mp_pretok_preset(p->pre);
    }
    t->ignore_merges = p->ignore_merges >= 0 ? !!p->ignore_merges : preset_ignore;
    t->add_prefix_space = p->add_prefix_space > 0;
    if (p->add_bos < 0) t->add_bos = strcmp(t->pre_name, "llama3") == 0;

    for (int b = 0; b < 256; b++) {
        char s[4];
        t->byte_tok[b] = tab_find(t, s, (size_t)put_cp(s, mp_bpe_byte_to_cp((unsigned char)b)));
    }

    if (p->n_merges < 0 || (p->n_merges > 0 && !p->merges))
        return mp_error(MP_ERR_FORMAT, "%s: %d merges", src, p->n_merges);
    size_t cap = pow2_at_least((size_t)p->n_merges * 2 + 1);
    if (!(t->merge = mp_malloc(cap * sizeof *t->merge, "tokenizer merges"))) return MP_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) t->merge[i].key = UINT64_MAX;
    t->merge_mask = cap - 1;
    char *buf = NULL;
    size_t bufcap = 0;
    st = MP_OK;
    for (int r = 0; r < p->n_merges; r++) {
        const char *m = p->merges[r];
        if (!m) { st = mp_error(MP_ERR_FORMAT, "%s: merge %d is NULL", src, r); break; }
        size_t ml = strlen(m);
        int a = -1, b = -1;
        /* "a b": split at the first space whose two sides are both tokens */
        for (const char *sp = strchr(m, ' '); sp; sp = strchr(sp + 1, ' ')) {
            a = tab_find(t, m, (size_t)(sp - m));
            b = tab_find(t, sp + 1, ml - (size_t)(sp - m) - 1);
            if (a >= 0 && b >= 0 && sp > m && sp[1]) break;
            a = b = -1;
        }
        if (a < 0) {
            st = mp_error(MP_ERR_FORMAT, "%s: merge %d '%.100s' is not two vocabulary tokens separated by a "
                          "space", src, r, m);
            break;
        }
        if (ml > bufcap) {
            char *nb = realloc(buf, ml);
            if (!nb) { st = mp_error(MP_ERR_NOMEM, "%s: out of memory", src); break; }
            buf = nb;
            bufcap = ml;
        }
        size_t la = t->plen[a];
        memcpy(buf, t->piece[a], la);
        memcpy(buf + la, t->piece[b], t->plen[b]);
        int id = tab_find(t, buf, la + t->plen[b]);
        if (id < 0) {
            st = mp_error(MP_ERR_FORMAT, "%s: merge %d '%.100s' gives '%.*s', which is not in the vocabulary",
                          src, r, m, (int)(la + t->plen[b] > 100 ? 100 : la + t->plen[b]), buf);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        for (size_t i = hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
            if (t->merge[i].key == key) break;   /* duplicate: the lower rank stays */
            if (t->merge[i].key == UINT64_MAX) {
                t->merge[i].key = key;
                t->merge[i].rank = r;
                t->merge[i].id = id;
                break;
            }
        }
    }
    free(buf);
    if (st != MP_OK) return st;

    if (t->type) {
        int n = 0;
        for (int i = 0; i < t->n_vocab; i++)
            if ((t->type[i] == MP_TOK_TYPE_CONTROL || t->type[i] == MP_TOK_TYPE_USER_DEFINED) && t->plen[i]) {
                n++;
                t->n_user += t->type[i] == MP_TOK_TYPE_USER_DEFINED;
            }
        if (n) {
            len_id *li = mp_calloc((size_t)n, sizeof *li, "special tokens");
            if (!li || !(t->special = mp_calloc((size_t)n, sizeof *t->special, "special tokens"))) {
                free(li);
                return MP_ERR_NOMEM;
            }
            for (int i = 0, k = 0; i < t->n_vocab; i++)
                if ((t->type[i] == MP_TOK_TYPE_CONTROL || t->type[i] == MP_TOK_TYPE_USER_DEFINED) && t->plen[i])
                    li[k++] = (len_id){t->plen[i], i};
            qsort(li, (size_t)n, sizeof *li, cmp_special);
            for (int k = 0; k < n; k++) {
                t->special[k] = li[k].id;
                t->special_first[(unsigned char)t->piece[li[k].id][0]] = 1;
            }
            t->n_special = n;
            free(li);
        }
    }
    return MP_OK;
}

mp_status mp_tok_new(mp_tok **out, const mp_tok_params *p) {
    mp_status st = MP_OK;
    mp_tok *t = NULL;
    const char *src;
    *out = NULL;
    if (!p) return mp_error(MP_ERR_ARG, "tokenizer: params is NULL");
    src = p->source ? p->source : "tokenizer";
    if (!p->model) return mp_error(MP_ERR_FORMAT, "%s: no tokenizer model (tokenizer.ggml.model)", src);
    int spm = strcmp(p->model, "llama") == 0, bpe = strcmp(p->model, "gpt2") == 0;
    if (!spm && !bpe)
        return mp_error(MP_ERR_FORMAT, "%s: tokenizer model '%s' is not supported (llama, gpt2)", src, p->model);
    if (p->n_tokens <= 0 || p->n_tokens > (1 << 24) || !p->tokens)
        return mp_error(MP_ERR_FORMAT, "%s: vocabulary of %d tokens (1..%d expected)", src, p->n_tokens, 1 << 24);
    if (p->bos < -1 || p->bos >= p->n_tokens || p->eos < -1 || p->eos >= p->n_tokens)
        return mp_error(MP_ERR_FORMAT, "%s: BOS id %d / EOS id %d outside the vocabulary of %d tokens", src,
                        p->bos, p->eos, p->n_tokens);
    if (!(t = mp_calloc(1, sizeof *t, "tokenizer"))) return MP_ERR_NOMEM;
    t->kind = spm ? MP_TOK_KIND_SPM : MP_TOK_KIND_BPE;
    t->n_vocab = p->n_tokens;
    t->bos = p->bos;
    t->eos = p->eos;
    t->add_bos = p->add_bos >= 0 ? !!p->add_bos : spm;
    t->add_eos = p->add_eos > 0;
    if ((st = copy_vocab(t, p, src)) != MP_OK) goto cleanup;
    st = spm ? build_spm(t, p, src) : build_bpe(t, p, src);
    if (st != MP_OK) goto cleanup;
    if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0)) {
        st = mp_error(MP_ERR_FORMAT, "%s: the tokenizer adds %s but has no %s id", src,
                      t->add_bos && t->bos < 0 ? "BOS" : "EOS", t->add_bos && t->bos < 0 ? "BOS" : "EOS");
        goto cleanup;
    }
    *out = t;
    t = NULL;
cleanup:
    mp_tok_free(t);
    return st;
}

mp_status mp_tok_from_llama2c(mp_tok **out, mp_tokenizer *spm) {
    mp_tok *t;
    *out = NULL;
    if (!spm) return mp_error(MP_ERR_ARG, "tokenizer: NULL llama2.c tokenizer");
    if (!(t = mp_calloc(1, sizeof *t, "tokenizer"))) {
        mp_tokenizer_free(spm);
        return MP_ERR_NOMEM;
    }
    t->kind = MP_TOK_KIND_LLAMA2C;
    t->spm = spm;
    t->n_vocab = mp_tokenizer_vocab(spm);
    t->bos = mp_tokenizer_bos(spm);
    t->eos = mp_tokenizer_eos(spm);
    t->add_bos = 1;
    *out = t;
    return MP_OK;
}

mp_status mp_tok_load_llama2c(mp_tok **out, const char *path, int vocab) {
    mp_tokenizer *spm = NULL;
    mp_status st = mp_tokenizer_load(&spm, path, vocab);
    *out = NULL;
    if (st != MP_OK) return st;
    return mp_tok_from_llama2c(out, spm);
}

/* The byte-level vocabulary of models trained on raw bytes: ids 0..255 the
 * bytes (spelled as GPT-2's byte-to-unicode map, as the GGUF writer spells
 * them), 256 BOS ("<s>", CONTROL), no EOS. */
mp_status mp_tok_new_bytes(mp_tok **out) {
    mp_tok *t;
    mp_status st = MP_OK;
    *out = NULL;
    if (!(t = mp_calloc(1, sizeof *t, "tokenizer"))) return MP_ERR_NOMEM;
    t->kind = MP_TOK_KIND_BYTES;
    t->n_vocab = MP_TOK_BYTES_BOS + 1;
    t->bos = MP_TOK_BYTES_BOS;
    t->eos = -1;
    t->add_bos = 1;
    if (!(t->piece = mp_calloc((size_t)t->n_vocab, sizeof *t->piece, "tokenizer pieces")) ||
        !(t->plen = mp_calloc((size_t)t->n_vocab, sizeof *t->plen, "tokenizer pieces")) ||
        !(t->blob = mp_malloc(256 * 3 + 4, "tokenizer text")) ||
        !(t->type = mp_calloc((size_t)t->n_vocab, 1, "token types"))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    char *w = t->blob;
    for (int b = 0; b < 256; b++) {
        t->piece[b] = w;
        t->plen[b] = (size_t)put_cp(w, mp_bpe_byte_to_cp((unsigned char)b));
        w += t->plen[b];
        *w++ = '\0';
        t->type[b] = MP_TOK_TYPE_NORMAL;
        t->byte_tok[b] = b;
    }
    t->piece[MP_TOK_BYTES_BOS] = w;
    t->plen[MP_TOK_BYTES_BOS] = 3;
    memcpy(w, "<s>", 4);
    t->type[MP_TOK_BYTES_BOS] = MP_TOK_TYPE_CONTROL;
    if ((st = tab_build(t)) != MP_OK) goto cleanup;
    *out = t;
    t = NULL;
cleanup:
    mp_tok_free(t);
    return st;
}

mp_tok_kind mp_tok_get_kind(const mp_tok *t) { return t->kind; }
int mp_tok_vocab(const mp_tok *t) { return t->n_vocab; }
int mp_tok_bos(const mp_tok *t) { return t->bos; }
int mp_tok_eos(const mp_tok *t) { return t->eos; }
int mp_tok_pad_id(const mp_tok *t) { return t->eos >= 0 ? t->eos : t->bos >= 0 ? t->bos : 0; }
int mp_tok_add_bos(const mp_tok *t) { return t->add_bos; }
int mp_tok_add_eos(const mp_tok *t) { return t->add_eos; }
const char *mp_tok_pre(const mp_tok *t) { return t->kind == MP_TOK_KIND_BPE ? t->pre_name : NULL; }

const char *mp_tok_piece(const mp_tok *t, int id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (t->piece) return t->piece[id];
    return mp_tokenizer_piece(t->spm, -1, id);
}

int mp_tok_find(const mp_tok *t, const char *piece) {
    if (!piece) return -1;
    if (t->piece) return tab_find(t, piece, strlen(piece));
    for (int i = 0; i < t->n_vocab; i++) {
        const char *p = mp_tokenizer_piece(t->spm, -1, i);
        if (p && strcmp(p, piece) == 0) return i;
    }
    return -1;
}

/* ---- encoding ---- */

/* Per-call state: output, scratch sized for the longest pre-token, cache. */
typedef struct {
    const mp_tok *t;
    const char *text;    /* the (possibly space-prefixed) text the cache keys point into */
    int *out;
    int n, cap;
    size_t scap;         /* scratch capacity in symbols */
    int *sym, *prev, *next;
    unsigned *ver;
    mp_merge_cand *heap;
    char *word;          /* [2 * scap] the mapped pre-token */
    struct cache_slot { size_t off, len; int start, count; } *cache;
    size_t cache_mask, cache_used;
    int nheap;
} enc;

static void enc_free(enc *e) {
    free(e->sym);
    free(e->prev);
    free(e->next);
    free(e->ver);
    free(e->heap);
    free(e->word);
    free(e->cache);
}

static mp_status enc_scratch(enc *e, size_t n) {
    if (n <= e->scap) return MP_OK;
    size_t cap = n < 64 ? 64 : n;
    free(e->sym); free(e->prev); free(e->next); free(e->ver); free(e->heap); free(e->word);
    e->sym = NULL; e->prev = NULL; e->next = NULL; e->ver = NULL; e->heap = NULL; e->word = NULL;
    e->scap = 0;
    if (cap > (size_t)INT_MAX / 4 ||
        !(e->sym = mp_calloc(cap, sizeof *e->sym, "tokenizer scratch")) ||
        !(e->prev = mp_calloc(cap, sizeof *e->prev, "tokenizer scratch")) ||
        !(e->next = mp_calloc(cap, sizeof *e->next, "tokenizer scratch")) ||
        !(e->ver = mp_calloc(cap, sizeof *e->ver, "tokenizer scratch")) ||
        !(e->heap = mp_calloc(cap * 3, sizeof *e->heap, "tokenizer scratch")) ||
        !(e->word = mp_malloc(cap * 2, "tokenizer scratch")))
        return mp_error(MP_ERR_NOMEM, "tokenizer: out of memory for a pre-token of %zu bytes", n);
    e->scap = cap;
    return MP_OK;
}

static struct cache_slot *cache_find(enc *e, const char *s, size_t n, int *found) {
    for (size_t i = hash_bytes(s, n) & e->cache_mask;; i = (i + 1) & e->cache_mask) {
        struct cache_slot *c = &e->cache[i];
        if (c->count < 0) { *found = 0; return c; }
        if (c->len == n && memcmp(e->text + c->off, s, n) == 0) { *found = 1; return c; }
    }
}

static mp_status cache_grow(enc *e) {
    size_t cap = e->cache ? (e->cache_mask + 1) * 2 : 256;
    struct cache_slot *old = e->cache;
    size_t oldcap = old ? e->cache_mask + 1 : 0;
    if (!(e->cache = mp_malloc(cap * sizeof *e->cache, "tokenizer cache"))) { e->cache = old; return MP_ERR_NOMEM; }
    for (size_t i = 0; i < cap; i++) e->cache[i].count = -1;
    e->cache_mask = cap - 1;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].count >= 0) {
            int f;
            *cache_find(e, e->text + old[i].off, old[i].len, &f) = old[i];
        }
    free(old);
    return MP_OK;
}

static void consider(enc *e, int l, int r) {
    if (l < 0 || r < 0) return;
    const merge_slot *m = merge_find(e->t, e->sym[l], e->sym[r]);
    if (m) {
        mp_merge_cand c = {(double)m->rank, l, r, m->id, e->ver[l], e->ver[r]};   /* lowest rank first */
        mp_merge_push(e->heap, &e->nheap, c);
    }
}

static mp_status push_id(enc *e, int id) {
    if (e->n >= e->cap)   /* cannot happen: at most one token per byte */
        return mp_error(MP_ERR_ARG, "tokenizer: internal error: output overflow");
    e->out[e->n++] = id;
    return MP_OK;
}

/* Byte-level BPE of one pre-token s[0, n) (n >= 1), appended to the output. */
static mp_status bpe_word(enc *e, const unsigned char *s, size_t n) {
    const mp_tok *t = e->t;
    mp_status st;
    if ((st = enc_scratch(e, n)) != MP_OK) return st;
    if (t->ignore_merges && n > 1) {   /* a whole pre-token in the vocabulary skips the merges */
        size_t w = 0;
        for (size_t i = 0; i < n; i++) w += (size_t)put_cp(e->word + w, mp_bpe_byte_to_cp(s[i]));
        int id = tab_find(t, e->word, w);
        if (id >= 0) return push_id(e, id);
    }
    for (size_t i = 0; i < n; i++) {
        e->sym[i] = t->byte_tok[s[i]];
        if (e->sym[i] < 0)
            return mp_error(MP_ERR_ARG, "tokenizer: byte 0x%02X has no token in the vocabulary", s[i]);
        e->prev[i] = (int)i - 1;
        e->next[i] = i + 1 < n ? (int)i + 1 : -1;
        e->ver[i] = 0;
    }
    e->nheap = 0;
    for (size_t i = 0; i + 1 < n; i++) consider(e, (int)i, (int)i + 1);
    while (e->nheap > 0) {
        mp_merge_cand c = mp_merge_pop(e->heap, &e->nheap);
        if (e->ver[c.l] != c.vl || e->ver[c.r] != c.vr) continue;   /* stale */
        e->sym[c.l] = c.id;
        e->ver[c.l]++;
        e->ver[c.r]++;
        e->next[c.l] = e->next[c.r];
        if (e->next[c.r] >= 0) e->prev[e->next[c.r]] = c.l;
        consider(e, e->prev[c.l], c.l);
        consider(e, c.l, e->next[c.l]);
    }
    for (int i = 0; i >= 0; i = e->next[i])   /* symbol 0 is never merged away */
        if ((st = push_id(e, e->sym[i])) != MP_OK) return st;
    return MP_OK;
}

/* Pre-tokenizes e->text[off, off + len) and encodes each piece (cached). */
static mp_status bpe_segment(enc *e, size_t off, size_t len) {
    mp_pretok_span *sp = NULL;
    size_t ns = 0;
    mp_status st = mp_pretok_split(e->t->pre, e->text + off, len, &sp, &ns);
    for (size_t k = 0; st == MP_OK && k < ns; k++) {
        const char *w = e->text + off + sp[k].off;
        size_t wl = sp[k].len;
        int found;
        if ((e->cache_used + 1) * 2 > e->cache_mask + 1 || !e->cache)
            if ((st = cache_grow(e)) != MP_OK) break;
        struct cache_slot *c = cache_find(e, w, wl, &found);
        if (found) {
            for (int i = 0; i < c->count && st == MP_OK; i++) st = push_id(e, e->out[c->start + i]);
            continue;
        }
        int start = e->n;
        if ((st = bpe_word(e, (const unsigned char *)w, wl)) != MP_OK) break;
        c->off = (size_t)(w - e->text);
        c->len = wl;
        c->start = start;
        c->count = e->n - start;
        e->cache_used++;
    }
    free(sp);
    return st;
}

/* The special token matching at s[0, n), or -1 (longest first). */
static int special_at(const mp_tok *t, const char *s, size_t n, int control) {
    for (int k = 0; k < t->n_special; k++) {
        int id = t->special[k];
        if (t->plen[id] > n || (!control && t->type[id] == MP_TOK_TYPE_CONTROL)) continue;
        if (memcmp(s, t->piece[id], t->plen[id]) == 0) return id;
    }
    return -1;
}

/* Splits the text into raw segments and special tokens, gives each raw
 * segment its prefix space when asked (Hugging Face's ByteLevel prepends one to
 * every segment between added tokens that does not start with a space), then
 * encodes the segments. */
static mp_status encode_bpe(const mp_tok *t, const char *text, size_t len, int flags, enc *e) {
    mp_status st = MP_OK;
    typedef struct { size_t off, len; int id; } item;   /* id >= 0: a special token */
    item *it = NULL;
    char *buf = NULL;
    size_t ni = 0, start = 0;
    int control = (flags & MP_TOK_SPECIAL) != 0;
    if (len == 0) return MP_OK;
    if (!(it = mp_calloc(len + 1, sizeof *it, "tokenizer segments"))) return MP_ERR_NOMEM;
    if (t->n_special && (control || t->n_user)) {
        for (size_t i = 0; i < len;) {
            int id = t->special_first[(unsigned char)text[i]] ? special_at(t, text + i, len - i, control) : -1;
            if (id < 0) { i++; continue; }
            if (i > start) it[ni++] = (item){start, i - start, -1};
            it[ni++] = (item){i, t->plen[id], id};
            i += t->plen[id];
            start = i;
        }
    }
    if (len > start) it[ni++] = (item){start, len - start, -1};
    e->text = text;
    if ((flags & MP_TOK_PREFIX) || (t->add_prefix_space && !(flags & MP_TOK_NO_PREFIX))) {
        size_t extra = 0, w = 0;
        for (size_t k = 0; k < ni; k++) extra += it[k].id < 0 && text[it[k].off] != ' ';
        if (!(buf = mp_malloc(len + extra, "tokenizer text"))) { st = MP_ERR_NOMEM; goto cleanup; }
        for (size_t k = 0; k < ni; k++) {
            size_t off = w;
            if (it[k].id < 0 && text[it[k].off] != ' ') buf[w++] = ' ';
            memcpy(buf + w, text + it[k].off, it[k].len);
            w += it[k].len;
            it[k].len = w - off;
            it[k].off = off;
        }
        e->text = buf;
    }
    for (size_t k = 0; k < ni && st == MP_OK; k++)
        st = it[k].id >= 0 ? push_id(e, it[k].id) : bpe_segment(e, it[k].off, it[k].len);
cleanup:
    free(it);
    free(buf);
    return st;
}

mp_status mp_tok_encode(const mp_tok *t, const char *text, size_t len, int flags, int **ids, int *n) {
    mp_status st = MP_OK;
    enc e;
    memset(&e, 0, sizeof e);
    e.t = t;
    *ids = NULL;
    *n = 0;
    if (!text && len) return mp_error(MP_ERR_ARG, "tokenizer encode: text is NULL");
    if (!text) text = "";
    if ((flags & MP_TOK_BOS) && t->bos < 0) return mp_error(MP_ERR_ARG, "tokenizer encode: BOS asked for, but the vocabulary has no BOS token");
    if ((flags & MP_TOK_EOS) && t->eos < 0) return mp_error(MP_ERR_ARG, "tokenizer encode: EOS asked for, but the vocabulary has no EOS token");
    if (len > (size_t)INT_MAX / 4 - 8)
        return mp_error(MP_ERR_ARG, "tokenizer encode: text too long (%zu bytes)", len);

    if (t->kind == MP_TOK_KIND_BYTES) {   /* one token per byte */
        e.cap = (int)len + 2;
        if (!(e.out = mp_calloc((size_t)e.cap, sizeof *e.out, "tokens"))) return MP_ERR_NOMEM;
        if (flags & MP_TOK_BOS) e.out[e.n++] = t->bos;
        for (size_t i = 0; i < len; i++) e.out[e.n++] = (unsigned char)text[i];
        if (flags & MP_TOK_EOS) e.out[e.n++] = t->eos;
    } else if (t->kind != MP_TOK_KIND_BPE) {   /* llama2.c's algorithm: NUL-terminated text, own BOS/EOS */
        char *z = NULL;
        int *body = NULL, nb = 0;
        if (memchr(text, 0, len))
            return mp_error(MP_ERR_ARG, "tokenizer encode: the text holds a NUL byte at offset %zu, which a "
                            "SentencePiece vocabulary cannot encode", (size_t)((const char *)memchr(text, 0, len) - text));
        if (!(z = mp_malloc(len + 1, "tokenizer text"))) return MP_ERR_NOMEM;
        memcpy(z, text, len);
        z[len] = '\0';
        st = mp_tokenizer_encode_prefix(t->spm, z, 0, 0, !(flags & MP_TOK_NO_PREFIX) || (flags & MP_TOK_PREFIX),
                                        &body, &nb);
        free(z);
        if (st != MP_OK) return st;
        e.cap = nb + 2;
        if (!(e.out = mp_calloc((size_t)e.cap, sizeof *e.out, "tokens"))) { free(body); return MP_ERR_NOMEM; }
        if (flags & MP_TOK_BOS) e.out[e.n++] = t->bos;
        if (nb) memcpy(e.out + e.n, body, (size_t)nb * sizeof *body);
        e.n += nb;
        if (flags & MP_TOK_EOS) e.out[e.n++] = t->eos;
        free(body);
    } else {
        e.cap = (int)(t->add_prefix_space || (flags & MP_TOK_PREFIX) ? 2 * len : len) + 3;   /* a prefix space per segment */
        if (!(e.out = mp_calloc((size_t)e.cap, sizeof *e.out, "tokens"))) return MP_ERR_NOMEM;
        if (flags & MP_TOK_BOS) e.out[e.n++] = t->bos;
        if ((st = encode_bpe(t, text, len, flags, &e)) != MP_OK) goto cleanup;
        if (flags & MP_TOK_EOS) e.out[e.n++] = t->eos;
    }
    if (e.n == 0) { free(e.out); e.out = NULL; }
    *ids = e.out;
    *n = e.n;
    e.out = NULL;
cleanup:
    free(e.out);
    enc_free(&e);
    return st;
}

mp_status mp_tok_encode_str(const mp_tok *t, const char *text, int flags, int **ids, int *n) {
    if (!text) { *ids = NULL; *n = 0; return mp_error(MP_ERR_ARG, "tokenizer encode: text is NULL"); }
    return mp_tok_encode(t, text, strlen(text), flags, ids, n);
}

/* ---- decoding ---- */

/* Writes up to cap bytes of what id decodes to after prev; returns the count. */
static size_t tok_bytes(const mp_tok *t, int prev, int id, char *dst, size_t cap) {
    size_t k = 0;
    if (id == t->bos || id == t->eos || (t->type && t->type[id] == MP_TOK_TYPE_CONTROL)) return 0;
    if (t->kind == MP_TOK_KIND_BYTES) {   /* ids 0..255: that byte */
        if (cap) dst[0] = (char)id;
        return 1;
    }
    if (t->kind != MP_TOK_KIND_BPE) {
        /* tok_llama2c.c strips the space after its BOS id 1: map our BOS onto it */
        int p = prev >= 0 && prev == t->bos ? 1 : (prev == 1 ? -1 : prev);
        const char *s = mp_tokenizer_piece(t->spm, p, id);
        size_t l = strlen(s);
        if (cap) memcpy(dst, s, l < cap ? l : cap);
        return l;
    }
    const unsigned char *s = (const unsigned char *)t->piece[id];
    size_t n = t->plen[id];
    if (t->type && t->type[id] == MP_TOK_TYPE_USER_DEFINED) {   /* added tokens are raw text */
        if (cap) memcpy(dst, s, n < cap ? n : cap);
        return n;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = get_cp(s + i, n - i, &cp), b = l ? mp_bpe_cp_to_byte(cp) : -1;
        if (b >= 0) {
            if (k < cap) dst[k] = (char)b;
            k++;
            i += (size_t)l;
        } else {   /* not a byte character: its bytes as they are */
            size_t m = l ? (size_t)l : 1;
            for (size_t j = 0; j < m; j++, k++)
                if (k < cap) dst[k] = (char)s[i + j];
            i += m;
        }
    }
    return k;
}

int mp_tok_token_bytes(const mp_tok *t, int prev, int id, char *buf, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return -1;
    size_t n = tok_bytes(t, prev, id, buf, cap ? cap - 1 : 0);
    if (cap) buf[n < cap - 1 ? n : cap - 1] = '\0';
    return n > INT_MAX ? INT_MAX : (int)n;
}

mp_status mp_tok_decode(const mp_tok *t, const int *ids, int n, char **out, size_t *len) {
    size_t total = 0, used = 0;
    char *s;
    *out = NULL;
    if (len) *len = 0;
    if (n < 0 || (n > 0 && !ids)) return mp_error(MP_ERR_ARG, "tokenizer decode: %d ids", n);
    /* the bytes kind decodes any other id to nothing (a byte-level model's
     * vocabulary may extend past BOS with ids no text maps to) */
    int skip = t->kind == MP_TOK_KIND_BYTES;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            if (skip) continue;
            return mp_error(MP_ERR_ARG, "tokenizer decode: token %d at position %d is out of range [0, %d)",
                            ids[i], i, t->n_vocab);
        }
        if (mp_add_size(total, tok_bytes(t, i ? ids[i - 1] : -1, ids[i], NULL, 0), &total))
            return mp_error(MP_ERR_NOMEM, "tokenizer decode: output too large");
    }
    if (!(s = mp_malloc(total + 1, "decoded text"))) return MP_ERR_NOMEM;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_vocab) used += tok_bytes(t, i ? ids[i - 1] : -1, ids[i], s + used, total - used);
    s[used] = '\0';
    *out = s;
    if (len) *len = used;
    return MP_OK;
}

mp_status mp_tok_set_bos_eos(mp_tok *t, int bos, int eos) {
    if (bos < -1 || bos >= t->n_vocab || eos < -1 || eos >= t->n_vocab)
        return mp_error(MP_ERR_ARG, "tokenizer: BOS %d / EOS %d outside the vocabulary of %d tokens", bos, eos,
                        t->n_vocab);
    t->bos = bos;
    t->eos = eos;
    if (bos < 0) t->add_bos = 0;
    if (eos < 0) t->add_eos = 0;
    return MP_OK;
}
