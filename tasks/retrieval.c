/* retrieval.c — passkey / key-value recall sequences: needles inserted into
 * filler at a chosen or random depth, the query at the end, answer targets and
 * the needle/answer positions (vocabulary and layout in retrieval.h). */
#include "retrieval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>

#include "task_rng.h"

struct mp_retrieval {
    mp_retrieval_params p;
    gsl_rng *rng;
    int32_t *keys;    /* [n_keys, key_len] */
    int32_t *values;  /* [n_keys, value_len] */
    int *offset;      /* [n_keys] filler offset of each needle */
    int *order;       /* [n_keys] needles in emission order */
};

mp_retrieval_params mp_retrieval_params_default(void) {
    mp_retrieval_params p;
    p.n_keys = 1;
    p.key_len = 2;
    p.value_len = 5;
    p.n_filler = 32;
    p.filler = MP_RETRIEVAL_FILLER_RANDOM;
    p.depth = -1;
    p.bos = 1;
    p.seed = 1;
    return p;
}

int mp_retrieval_vocab(const mp_retrieval_params *p) { return MP_RETRIEVAL_FILLER0 + p->n_filler; }

static int needle_len(const mp_retrieval_params *p) {
    return p->n_keys == 1 ? 4 + p->value_len + 1 : 1 + p->key_len + 1 + p->value_len + 1;
}
static int query_len(const mp_retrieval_params *p) {
    return p->n_keys == 1 ? 6 + p->value_len : 3 + p->key_len + 1 + p->value_len;
}

int mp_retrieval_min_len(const mp_retrieval_params *p) {
    return (p->bos ? 1 : 0) + p->n_keys * needle_len(p) + query_len(p);
}

const char *mp_retrieval_token_name(int id, char *buf) {
    static const char *words[] = {"<bos>", "the", "pass", "key", "is", "what", "?", "."};
    if (id >= 0 && id <= 9) snprintf(buf, 16, "%d", id);
    else if (id >= MP_RETRIEVAL_BOS && id < MP_RETRIEVAL_FILLER0) snprintf(buf, 16, "%s", words[id - MP_RETRIEVAL_BOS]);
    else if (id >= MP_RETRIEVAL_FILLER0) snprintf(buf, 16, "f%d", id - MP_RETRIEVAL_FILLER0);
    else snprintf(buf, 16, "<%d>", id);
    return buf;
}

void mp_retrieval_free(mp_retrieval *r) {
    if (!r) return;
    if (r->rng) gsl_rng_free(r->rng);
    free(r->keys);
    free(r->values);
    free(r->offset);
    free(r->order);
    free(r);
}

mp_status mp_retrieval_new(mp_retrieval **out, const mp_retrieval_params *p) {
    mp_status st = MP_OK;
    mp_retrieval *r = NULL;
    *out = NULL;
    mp_init();
    if (p->n_keys < 1 || p->n_keys > MP_RETRIEVAL_MAX_KEYS)
        return mp_error(MP_ERR_ARG, "retrieval: n_keys = %d is out of range (1..%d)", p->n_keys, MP_RETRIEVAL_MAX_KEYS);
    if (p->key_len < 1 || p->key_len > MP_RETRIEVAL_MAX_DIGITS)
        return mp_error(MP_ERR_ARG, "retrieval: key_len = %d is out of range (1..%d)", p->key_len, MP_RETRIEVAL_MAX_DIGITS);
    if (p->value_len < 1 || p->value_len > MP_RETRIEVAL_MAX_DIGITS)
        return mp_error(MP_ERR_ARG, "retrieval: value_len = %d is out of range (1..%d)", p->value_len, MP_RETRIEVAL_MAX_DIGITS);
    if (p->n_filler < 1 || p->n_filler > 65536)
        return mp_error(MP_ERR_ARG, "retrieval: n_filler = %d is out of range (1..65536)", p->n_filler);
    if (p->filler != MP_RETRIEVAL_FILLER_RANDOM && p->filler != MP_RETRIEVAL_FILLER_REPEAT)
        return mp_error(MP_ERR_ARG, "retrieval: unknown filler mode %d", (int)p->filler);
    if (isnan(p->depth) || p->depth > 1)
        return mp_error(MP_ERR_ARG, "retrieval: depth = %g must be in [0, 1] (or < 0 for random)", p->depth);
    if (p->n_keys > 1 && p->key_len < 4) {
        int distinct = 1;
        for (int i = 0; i < p->key_len; i++) distinct *= 10;
        if (p->n_keys > distinct)
            return mp_error(MP_ERR_ARG, "retrieval: %d distinct keys do not fit in %d digits", p->n_keys, p->key_len);
    }
    r = mp_calloc(1, sizeof *r, "retrieval task");
    if (!r) return MP_ERR_NOMEM;
    r->p = *p;
    r->p.bos = p->bos ? 1 : 0;
    r->keys = mp_calloc((size_t)p->n_keys * p->key_len, sizeof *r->keys, "retrieval keys");
    r->values = mp_calloc((size_t)p->n_keys * p->value_len, sizeof *r->values, "retrieval values");
    r->offset = mp_calloc((size_t)p->n_keys, sizeof *r->offset, "retrieval offsets");
    r->order = mp_calloc((size_t)p->n_keys, sizeof *r->order, "retrieval order");
    if (!r->keys || !r->values || !r->offset || !r->order) { st = MP_ERR_NOMEM; goto cleanup; }
    r->rng = mp_task_rng_new(p->seed, 1, "retrieval samples");
    if (!r->rng) { st = MP_ERR_NOMEM; goto cleanup; }
    *out = r;
    r = NULL;
cleanup:
    mp_retrieval_free(r);
    return st;
}

void mp_retrieval_seed(mp_retrieval *r, uint64_t seed) { mp_task_rng_seed(r->rng, seed, 1); }

const mp_retrieval_params *mp_retrieval_get_params(const mp_retrieval *r) { return &r->p; }

static void draw_keys(mp_retrieval *r) {
    const int K = r->p.key_len, n = r->p.n_keys;
    for (int i = 0; i < n; i++) {
        int32_t *k = r->keys + (size_t)i * K;
        for (;;) {
            for (int d = 0; d < K; d++) k[d] = (int32_t)gsl_rng_uniform_int(r->rng, 10);
            int dup = 0;
            for (int j = 0; j < i && !dup; j++) dup = memcmp(k, r->keys + (size_t)j * K, K * sizeof *k) == 0;
            if (!dup) break;
        }
    }
}

/* Needles sorted by (offset, index): insertion sort, n_keys is small. */
static void sort_needles(mp_retrieval *r) {
    for (int i = 0; i < r->p.n_keys; i++) {
        int j = i;
        r->order[i] = i;
        while (j > 0 && r->offset[r->order[j - 1]] > r->offset[i]) {
            r->order[j] = r->order[j - 1];
            j--;
        }
        r->order[j] = i;
    }
}

mp_status mp_retrieval_sample(mp_retrieval *r, int B, int T, int32_t *tokens, int32_t *targets,
                              mp_retrieval_truth *truth) {
    const mp_retrieval_params *p = &r->p;
    const int L = p->value_len, K = p->key_len, kv = p->n_keys > 1;
    int min_len = mp_retrieval_min_len(p);
    if (B < 1) return mp_error(MP_ERR_ARG, "retrieval: batch size B = %d must be >= 1", B);
    if (T < min_len)
        return mp_error(MP_ERR_ARG, "retrieval: T = %d is shorter than the %d tokens of BOS, %d needle%s "
                        "and the query", T, min_len, p->n_keys, p->n_keys > 1 ? "s" : "");
    const int F = T - min_len;

    for (int b = 0; b < B; b++) {
        int32_t *tk = tokens + (size_t)b * T, *tg = targets + (size_t)b * T;
        mp_retrieval_truth tr;
        memset(&tr, 0, sizeof tr);
        if (kv) draw_keys(r);
        for (size_t i = 0; i < (size_t)p->n_keys * L; i++)
            r->values[i] = (int32_t)gsl_rng_uniform_int(r->rng, 10);
        r->offset[0] = p->depth < 0 ? (int)gsl_rng_uniform_int(r->rng, (unsigned long)F + 1)
                                    : (int)lround(p->depth * F);
        for (int i = 1; i < p->n_keys; i++)
            r->offset[i] = (int)gsl_rng_uniform_int(r->rng, (unsigned long)F + 1);
        sort_needles(r);

        int pos = 0, fi = 0;
        if (p->bos) tk[pos++] = MP_RETRIEVAL_BOS;
        for (int oi = 0; oi <= p->n_keys; oi++) {
            int until = oi < p->n_keys ? r->offset[r->order[oi]] : F;
            for (; fi < until; fi++)
                tk[pos++] = MP_RETRIEVAL_FILLER0 + (p->filler == MP_RETRIEVAL_FILLER_REPEAT
                    ? fi % p->n_filler : (int)gsl_rng_uniform_int(r->rng, (unsigned long)p->n_filler));
            if (oi == p->n_keys) break;
            int n = r->order[oi];
            if (n == 0) tr.needle_pos = pos;
            if (kv) {
                tk[pos++] = MP_RETRIEVAL_KEY;
                for (int d = 0; d < K; d++) tk[pos++] = r->keys[(size_t)n * K + d];
            } else {
                tk[pos++] = MP_RETRIEVAL_THE;
                tk[pos++] = MP_RETRIEVAL_PASS;
                tk[pos++] = MP_RETRIEVAL_KEY;
            }
            tk[pos++] = MP_RETRIEVAL_IS;
            if (n == 0) tr.value_pos = pos;
            for (int d = 0; d < L; d++) tk[pos++] = r->values[(size_t)n * L + d];
            tk[pos++] = MP_RETRIEVAL_DOT;
        }
        tk[pos++] = MP_RETRIEVAL_WHAT;
        tk[pos++] = MP_RETRIEVAL_IS;
        if (kv) {
            tk[pos++] = MP_RETRIEVAL_KEY;
            for (int d = 0; d < K; d++) tk[pos++] = r->keys[d];
        } else {
            tk[pos++] = MP_RETRIEVAL_THE;
            tk[pos++] = MP_RETRIEVAL_PASS;
            tk[pos++] = MP_RETRIEVAL_KEY;
        }
        tk[pos++] = MP_RETRIEVAL_QMARK;
        tr.answer_pos = pos;
        for (int d = 0; d < L; d++) tk[pos++] = r->values[d];
        /* pos == T by construction (min_len + F filler tokens) */

        for (int t = 0; t < T; t++) tg[t] = t + 1 >= tr.answer_pos && t + 1 < T ? tk[t + 1] : -1;
        memcpy(tr.value, r->values, (size_t)L * sizeof *tr.value);
        if (kv) memcpy(tr.key, r->keys, (size_t)K * sizeof *tr.key);
        tr.depth = F > 0 ? (double)r->offset[0] / F : 0.0;
        if (truth) truth[b] = tr;
    }
    return MP_OK;
}
