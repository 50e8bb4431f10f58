/* pretok.c — regex pre-tokenizers for byte-level BPE (see pretok.h): PCRE2
 * patterns compiled in UTF + UCP mode with PCRE2_MATCH_INVALID_UTF (and JIT when
 * available), applied in sequence, each splitting the pieces of the previous one
 * into matches and gaps. Empty matches produce no piece and advance the search
 * by one character, as JavaScript's matchAll does. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

struct mp_pretok {
    int n;
    pcre2_code **re;   /* [n] */
};

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* llama.cpp's form, without the final \s+ (a gap keeps what it would match) */
#define RE_GPT2_CPP "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const P_GPT2[] = {RE_GPT2};
static const char *const P_LLAMA3[] = {RE_LLAMA3};
static const char *const P_QWEN2[] = {RE_QWEN2};
static const char *const P_SMOLLM[] = {"\\p{N}", RE_GPT2_CPP};
static const char *const P_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2_CPP, "\\p{N}+", "[0-9][0-9][0-9]"};

typedef struct {
    const char *preset;
    const char *const *pat;
    int n, ignore_merges;
    const char *names;   /* tokenizer.ggml.pre values, space-separated */
} preset;

static const preset PRESETS[] = {
    {"gpt2", P_GPT2, 1, 0, "gpt2 gpt-2 phi-2 mpt olmo jais trillion jina-es jina-de jina-v1-en jina-v2-es "
                           "jina-v2-de jina-v2-code roberta-bpe gigachat exaone4"},
    {"llama3", P_LLAMA3, 1, 1, "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2"},
    {"dbrx", P_LLAMA3, 1, 0, "dbrx smaug-bpe"},   /* llama3's regex, merges always run */
    {"qwen2", P_QWEN2, 1, 0, "qwen2 deepseek-r1-qwen stablelm2 megrez kormo"},
    {"smollm", P_SMOLLM, 2, 0, "smollm starcoder refact command-r codeshell exaone minerva-7b"},
    {"default", P_DEFAULT, 4, 0, "default"},
};

static int word_in(const char *name, const char *list) {
    size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ' ');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == n && memcmp(s, name, n) == 0) return 1;
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

static const preset *find_preset(const char *name) {
    if (!name || !*name) name = "default";
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if (strcmp(name, PRESETS[i].preset) == 0 || word_in(name, PRESETS[i].names)) return &PRESETS[i];
    return NULL;
}

const char *mp_pretok_preset(const char *name) {
    const preset *p = find_preset(name);
    return p ? p->preset : NULL;
}

int mp_pretok_preset_patterns(const char *name, const char *const **patterns) {
    const preset *p = find_preset(name);
    if (!p) return -1;
    *patterns = p->pat;
    return p->n;
}

void mp_pretok_free(mp_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p->re);
    free(p);
}

mp_status mp_pretok_new(mp_pretok **out, const char *const *patterns, int n) {
    mp_status st = MP_OK;
    mp_pretok *p = NULL;
    *out = NULL;
    if (n < 0 || (n > 0 && !patterns))
        return mp_error(MP_ERR_ARG, "pre-tokenizer: %d patterns", n);
    if (!(p = mp_calloc(1, sizeof *p, "pre-tokenizer")) ||
        (n > 0 && !(p->re = mp_calloc((size_t)n, sizeof *p->re, "pre-tokenizer")))) {
        st = MP_ERR_NOMEM;
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        int err = 0;
        PCRE2_SIZE at = 0;
        if (!patterns[i]) {
            st = mp_error(MP_ERR_ARG, "pre-tokenizer: pattern %d is NULL", i);
            goto cleanup;
        }
        p->re[i] = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            st = mp_error(MP_ERR_FORMAT, "pre-tokenizer pattern %d does not compile at offset %zu: %s "
                          "(pattern: %.200s)", i, (size_t)at, (const char *)msg, patterns[i]);
            goto cleanup;
        }
        p->n = i + 1;
        pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE);   /* optional: falls back to the interpreter */
    }
    *out = p;
    p = NULL;
cleanup:
    mp_pretok_free(p);
    return st;
}

mp_status mp_pretok_new_named(mp_pretok **out, const char *name, int *ignore_merges) {
    const preset *ps = find_preset(name);
    *out = NULL;
    if (!ps) {
        char known[1024] = "";
        for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++) {
            strncat(known, PRESETS[i].names, sizeof known - strlen(known) - 1);
            strncat(known, i + 1 < sizeof PRESETS / sizeof *PRESETS ? " " : "", sizeof known - strlen(known) - 1);
        }
        return mp_error(MP_ERR_FORMAT, "pre-tokenizer '%s' is not supported (known: %s)", name, known);
    }
    if (ignore_merges) *ignore_merges = ps->ignore_merges;
    return mp_pretok_new(out, ps->pat, ps->n);
}

/* A growing span array. */
typedef struct { mp_pretok_span *s; size_t n, cap; } spans;

static int push(spans *a, size_t off, size_t len) {
    if (!len) return 0;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64, bytes;
        mp_pretok_span *s;
        if (mp_mul_size(cap, sizeof *s, &bytes) || !(s = realloc(a->s, bytes))) {
            mp_error(MP_ERR_NOMEM, "pre-tokenizer: out of memory (%zu pieces)", a->n);
            return -1;
        }
        a->s = s;
        a->cap = cap;
    }
    a->s[a->n].off = off;
    a->s[a->n].len = len;
    a->n++;
    return 0;
}

/* Splits text[off, off + len) with one regex, appending matches and gaps. */
static mp_status split_one(const pcre2_code *re, pcre2_match_data *md, const char *text, size_t off,
                           size_t len, spans *out) {
    const PCRE2_SPTR sub = (PCRE2_SPTR)(text + off);
    size_t pos = 0, prev = 0;
    while (pos <= len) {
        int rc = pcre2_match(re, sub, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mp_error(MP_ERR_ARG, "pre-tokenizer: regex match failed at byte %zu: %s", off + pos,
                            (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e > s) {
            if (push(out, off + prev, s - prev) || push(out, off + s, e - s)) return MP_ERR_NOMEM;
            prev = e;
            pos = e;
        } else {   /* empty match: no piece; step over one character */
            pos = s + 1;
            while (pos < len && (sub[pos] & 0xC0) == 0x80) pos++;
        }
    }
    if (push(out, off + prev, len - prev)) return MP_ERR_NOMEM;
    return MP_OK;
}

mp_status mp_pretok_split(const mp_pretok *p, const char *text, size_t len,
                          mp_pretok_span **out, size_t *nout) {
    mp_status st = MP_OK;
    spans cur = {0}, next = {0};
    pcre2_match_data *md = NULL;
    *out = NULL;
    *nout = 0;
    if (len == 0) return MP_OK;
    if (!text) return mp_error(MP_ERR_ARG, "pre-tokenizer: text is NULL");
    if (push(&cur, 0, len)) return MP_ERR_NOMEM;
    for (int i = 0; i < p->n; i++) {
        if (!(md = pcre2_match_data_create_from_pattern(p->re[i], NULL))) {
            st = mp_error(MP_ERR_NOMEM, "pre-tokenizer: out of memory (match data)");
            goto cleanup;
        }
        next.n = 0;
        for (size_t k = 0; k < cur.n; k++)
            if ((st = split_one(p->re[i], md, text, cur.s[k].off, cur.s[k].len, &next)) != MP_OK) goto cleanup;
        pcre2_match_data_free(md);
        md = NULL;
        spans t = cur;
        cur = next;
        next = t;
    }
    *out = cur.s;
    *nout = cur.n;
    cur.s = NULL;
cleanup:
    pcre2_match_data_free(md);
    free(cur.s);
    free(next.s);
    return st;
}
