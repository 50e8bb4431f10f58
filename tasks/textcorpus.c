/* textcorpus.c — reads a text file into memory, splits it into training and
 * validation bytes, and cuts (random or given) byte windows with next-byte
 * targets (conventions in textcorpus.h). */
#include "textcorpus.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gsl/gsl_rng.h>

#include "task_rng.h"

struct mp_text {
    mp_text_params p;
    char path[1024];
    uint8_t *data;
    size_t n;
    size_t off[2], len[2];  /* per split */
    gsl_rng *rng[2];        /* per split */
};

static const char *split_name(mp_text_split s) { return s == MP_TEXT_VAL ? "validation" : "training"; }

mp_text_params mp_text_params_default(void) {
    mp_text_params p;
    p.path = NULL;
    p.val_fraction = 0.1;
    p.bos = 1;
    p.seed = 1;
    return p;
}

void mp_text_free(mp_text *t) {
    if (!t) return;
    free(t->data);
    for (int i = 0; i < 2; i++)
        if (t->rng[i]) gsl_rng_free(t->rng[i]);
    free(t);
}

/* Reads the whole file into *out, *n bytes. Only a regular file of at most
 * MP_TEXT_MAX_BYTES: a device (/dev/zero) or a FIFO could be read until memory
 * runs out or block forever. The bound also holds while reading, for files
 * whose size stat does not tell (/proc) or that grow meanwhile. */
static mp_status read_all(const char *path, uint8_t **out, size_t *n) {
    mp_status st = MP_OK;
    struct stat sb;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    char b1[32], b2[32];
    *out = NULL;
    *n = 0;
    if ((st = mp_check_regular_file(path)) != MP_OK) return st;
    FILE *f = fopen(path, "rb");
    if (!f) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = mp_error(MP_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    if ((uint64_t)sb.st_size > MP_TEXT_MAX_BYTES) {
        st = mp_error(MP_ERR_ARG, "%s: %s is larger than the %s a text corpus may have (it is held in memory)", path,
                      mp_fmt_bytes((double)sb.st_size, b1), mp_fmt_bytes((double)MP_TEXT_MAX_BYTES, b2));
        goto cleanup;
    }
    for (;;) {
        if (len > MP_TEXT_MAX_BYTES) {
            st = mp_error(MP_ERR_ARG, "%s: more than the %s a text corpus may have (it is held in memory)", path,
                          mp_fmt_bytes((double)MP_TEXT_MAX_BYTES, b2));
            goto cleanup;
        }
        if (len == cap) {
            size_t nc = cap ? cap : 1 << 16;
            if (cap && mp_mul_size(cap, 2, &nc)) {
                st = mp_error(MP_ERR_NOMEM, "%s: file too large", path);
                goto cleanup;
            }
            if (nc > MP_TEXT_MAX_BYTES + 1) nc = MP_TEXT_MAX_BYTES + 1; /* one byte past tells "too large" */
            uint8_t *nb = realloc(buf, nc);
            if (!nb) {
                char b[32];
                st = mp_error(MP_ERR_NOMEM, "%s: out of memory reading %s", path, mp_fmt_bytes((double)nc, b));
                goto cleanup;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                st = mp_error(MP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
                goto cleanup;
            }
            break;
        }
    }
    *out = buf;
    *n = len;
    buf = NULL;
cleanup:
    free(buf);
    fclose(f);
    return st;
}

mp_status mp_text_load(mp_text **out, const mp_text_params *p) {
    mp_status st = MP_OK;
    mp_text *t = NULL;
    *out = NULL;
    mp_init();
    if (!p->path || !p->path[0]) return mp_error(MP_ERR_ARG, "text corpus: no file path given");
    if (!(p->val_fraction >= 0 && p->val_fraction < 1))
        return mp_error(MP_ERR_ARG, "%s: val_fraction = %g must be in [0, 1)", p->path, p->val_fraction);
    t = mp_calloc(1, sizeof *t, "text corpus");
    if (!t) return MP_ERR_NOMEM;
    t->p = *p;
    snprintf(t->path, sizeof t->path, "%s", p->path);
    t->p.path = t->path;
    t->p.bos = p->bos ? 1 : 0;
    if ((st = read_all(p->path, &t->data, &t->n)) != MP_OK) goto cleanup;
    if (t->n == 0) {
        st = mp_error(MP_ERR_FORMAT, "%s: empty file (a text corpus needs bytes to cut windows from)", p->path);
        goto cleanup;
    }
    size_t n_val = (size_t)floor((double)t->n * p->val_fraction);
    if (n_val > t->n) n_val = t->n;
    t->off[MP_TEXT_TRAIN] = 0;
    t->len[MP_TEXT_TRAIN] = t->n - n_val;
    t->off[MP_TEXT_VAL] = t->n - n_val;
    t->len[MP_TEXT_VAL] = n_val;
    for (int i = 0; i < 2; i++) {
        t->rng[i] = mp_task_rng_new(p->seed, 1 + (uint64_t)i, "text corpus windows");
        if (!t->rng[i]) { st = MP_ERR_NOMEM; goto cleanup; }
    }
    *out = t;
    t = NULL;
cleanup:
    mp_text_free(t);
    return st;
}

void mp_text_seed(mp_text *t, uint64_t seed) {
    for (int i = 0; i < 2; i++) mp_task_rng_seed(t->rng[i], seed, 1 + (uint64_t)i);
}

const uint8_t *mp_text_bytes(const mp_text *t, size_t *n) {
    if (n) *n = t->n;
    return t->data;
}
size_t mp_text_split_offset(const mp_text *t, mp_text_split s) { return t->off[s == MP_TEXT_VAL]; }
size_t mp_text_split_len(const mp_text *t, mp_text_split s) { return t->len[s == MP_TEXT_VAL]; }
const char *mp_text_path(const mp_text *t) { return t->path; }

/* Bytes a window of T positions needs, and a check that the split has them. */
static mp_status window_fits(const mp_text *t, mp_text_split s, int T, size_t *need) {
    if (s != MP_TEXT_TRAIN && s != MP_TEXT_VAL)
        return mp_error(MP_ERR_ARG, "%s: unknown split %d", t->path, (int)s);
    if (T < 1) return mp_error(MP_ERR_ARG, "%s: window length T = %d must be >= 1", t->path, T);
    *need = (size_t)T + (t->p.bos ? 0 : 1);
    size_t have = t->len[s];
    if (have < *need)
        return mp_error(MP_ERR_ARG, "%s: the %s split has %zu bytes, shorter than one window of %zu bytes "
                        "(T = %d%s; file %zu bytes, val_fraction %g)", t->path, split_name(s), have, *need,
                        T, t->p.bos ? " with BOS" : " plus the next byte", t->n, t->p.val_fraction);
    return MP_OK;
}

static void cut(const mp_text *t, mp_text_split s, size_t start, int T, int32_t *tok, int32_t *tgt) {
    const uint8_t *x = t->data + t->off[s] + start;
    if (t->p.bos) {
        tok[0] = MP_TEXT_BOS;
        for (int i = 1; i < T; i++) tok[i] = x[i - 1];
        for (int i = 0; i < T; i++) tgt[i] = x[i];
    } else {
        for (int i = 0; i < T; i++) { tok[i] = x[i]; tgt[i] = x[i + 1]; }
    }
}

mp_status mp_text_window(const mp_text *t, mp_text_split s, size_t start, int T,
                         int32_t *tokens, int32_t *targets) {
    size_t need = 0;
    mp_status st = window_fits(t, s, T, &need);
    if (st != MP_OK) return st;
    if (start > t->len[s] - need)
        return mp_error(MP_ERR_ARG, "%s: window at %zu of the %s split (%zu bytes) needs %zu bytes and "
                        "runs past its end", t->path, start, split_name(s), t->len[s], need);
    cut(t, s, start, T, tokens, targets);
    return MP_OK;
}

mp_status mp_text_sample(mp_text *t, mp_text_split s, int B, int T, int32_t *tokens,
                         int32_t *targets, int64_t *starts) {
    size_t need = 0, bt;
    mp_status st = window_fits(t, s, T, &need);
    if (st != MP_OK) return st;
    if (B < 1) return mp_error(MP_ERR_ARG, "%s: batch size B = %d must be >= 1", t->path, B);
    if (mp_mul_size((size_t)B, (size_t)T, &bt))
        return mp_error(MP_ERR_NOMEM, "%s: batch [%d, %d] overflows", t->path, B, T);
    size_t n_starts = t->len[s] - need + 1;
    gsl_rng *r = t->rng[s];
    for (int b = 0; b < B; b++) {
        size_t start;
        if (n_starts - 1 <= gsl_rng_max(r) - gsl_rng_min(r)) {
            start = (size_t)gsl_rng_uniform_int(r, (unsigned long)n_starts);
        } else {  /* more starts than MT19937's 2^32 values: combine two draws */
            uint64_t hi = gsl_rng_get(r), lo = gsl_rng_get(r);
            start = (size_t)(((hi << 32) | lo) % n_starts);
        }
        cut(t, s, start, T, tokens + (size_t)b * T, targets + (size_t)b * T);
        if (starts) starts[b] = (int64_t)(t->off[s] + start);
    }
    return MP_OK;
}
