/* retrieval.c — passkey / key-value recall / variable-tracking sequences:
 * needles inserted into filler at a chosen or random depth, the query at the
 * end, answer targets and the needle/answer positions (vocabulary and layout
 * in retrieval.h). */
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
    int n_needles;    /* n_keys * (1 + hops); needle c * (1 + hops) + i is link i of chain c */
    int32_t *keys;    /* [n_needles, key_len] */
    int32_t *values;  /* [n_keys, value_len] */
    int *offset;      /* [n_needles] filler offset of each needle */
    int *order;       /* [n_needles] needles in emission order */
    int *label;       /* [n_needles] chain of each sorted offset slot (variable tracking) */
};

mp_retrieval_params mp_retrieval_params_default(void) {
    mp_retrieval_params p;
    p.n_keys = 1;
    p.hops = 0;
    p.key_len = 2;
    p.key_symbols = 0;
    p.value_len = 5;
    p.n_filler = 32;
    p.filler = MP_RETRIEVAL_FILLER_RANDOM;
    p.depth = -1;
    p.bos = 1;
    p.n_queries = 1;
    p.seed = 1;
    return p;
}

int mp_retrieval_vocab(const mp_retrieval_params *p) { return MP_RETRIEVAL_FILLER0 + p->n_filler + p->key_symbols; }

/* the first key symbol's token id (key_symbols > 0) */
static int key0(const mp_retrieval_params *p) { return MP_RETRIEVAL_FILLER0 + p->n_filler; }

/* key-value layout: several keys, or variable tracking */
static int keyed(const mp_retrieval_params *p) { return p->n_keys > 1 || p->hops > 0; }

static int needle_len(const mp_retrieval_params *p) {
    return !keyed(p) ? 4 + p->value_len + 1 : 1 + p->key_len + 1 + p->value_len + 1;
}
/* a link "key b is key a ." */
static int link_len(const mp_retrieval_params *p) { return 2 * p->key_len + 4; }
static int query_len(const mp_retrieval_params *p) {
    return !keyed(p) ? 6 + p->value_len : 3 + p->key_len + 1 + p->value_len;
}

/* an earlier query "what is key z ? v ." (n_queries > 1) */
static int extra_query_len(const mp_retrieval_params *p) { return query_len(p) + 1; }

int mp_retrieval_min_len(const mp_retrieval_params *p) {
    const int extra = p->n_queries > 1 ? (p->n_queries - 1) * extra_query_len(p) : 0;
    return (p->bos ? 1 : 0) + p->n_keys * (needle_len(p) + p->hops * link_len(p)) + extra + query_len(p);
}

const char *mp_retrieval_token_name(const mp_retrieval_params *p, int id, char *buf) {
    static const char *words[] = {"<bos>", "the", "pass", "key", "is", "what", "?", "."};
    if (id >= 0 && id <= 9) snprintf(buf, 16, "%d", id);
    else if (id >= MP_RETRIEVAL_BOS && id < MP_RETRIEVAL_FILLER0) snprintf(buf, 16, "%s", words[id - MP_RETRIEVAL_BOS]);
    else if (id >= key0(p) && id < mp_retrieval_vocab(p)) snprintf(buf, 16, "k%d", id - key0(p));
    else if (id >= MP_RETRIEVAL_FILLER0 && id < key0(p)) snprintf(buf, 16, "f%d", id - MP_RETRIEVAL_FILLER0);
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
    free(r->label);
    free(r);
}

mp_status mp_retrieval_new(mp_retrieval **out, const mp_retrieval_params *p) {
    mp_status st = MP_OK;
    mp_retrieval *r = NULL;
    *out = NULL;
    mp_init();
    if (p->n_keys < 1 || p->n_keys > MP_RETRIEVAL_MAX_KEYS)
        return mp_error(MP_ERR_ARG, "retrieval: n_keys = %d is out of range (1..%d)", p->n_keys, MP_RETRIEVAL_MAX_KEYS);
    if (p->hops < 0 || p->hops > MP_RETRIEVAL_MAX_HOPS)
        return mp_error(MP_ERR_ARG, "retrieval: hops = %d is out of range (0..%d)", p->hops, MP_RETRIEVAL_MAX_HOPS);
    const int n_needles = p->n_keys * (1 + p->hops);
    if (n_needles > MP_RETRIEVAL_MAX_KEYS)
        return mp_error(MP_ERR_ARG, "retrieval: n_keys * (1 + hops) = %d needles exceed %d", n_needles,
                        MP_RETRIEVAL_MAX_KEYS);
    if (p->hops > 0 && p->depth >= 0)
        return mp_error(MP_ERR_ARG, "retrieval: depth = %g applies to passkey and key-value only (with hops = %d "
                        "the needles go at random offsets: leave depth random)", p->depth, p->hops);
    if (p->key_len < 1 || p->key_len > MP_RETRIEVAL_MAX_DIGITS)
        return mp_error(MP_ERR_ARG, "retrieval: key_len = %d is out of range (1..%d)", p->key_len, MP_RETRIEVAL_MAX_DIGITS);
    if (p->value_len < 1 || p->value_len > MP_RETRIEVAL_MAX_DIGITS)
        return mp_error(MP_ERR_ARG, "retrieval: value_len = %d is out of range (1..%d)", p->value_len, MP_RETRIEVAL_MAX_DIGITS);
    if (p->n_filler < 1 || p->n_filler > 65536)
        return mp_error(MP_ERR_ARG, "retrieval: n_filler = %d is out of range (1..65536)", p->n_filler);
    if (p->key_symbols < 0 || p->key_symbols > 65536)
        return mp_error(MP_ERR_ARG, "retrieval: key_symbols = %d is out of range (0: digit keys, or 1..65536)",
                        p->key_symbols);
    if (p->key_symbols > 0 && !keyed(p))
        return mp_error(MP_ERR_ARG, "retrieval: key_symbols = %d needs keys (n_keys > 1 or hops > 0)", p->key_symbols);
    if (p->filler != MP_RETRIEVAL_FILLER_RANDOM && p->filler != MP_RETRIEVAL_FILLER_REPEAT)
        return mp_error(MP_ERR_ARG, "retrieval: unknown filler mode %d", (int)p->filler);
    if (p->n_queries > 1 && !keyed(p))
        return mp_error(MP_ERR_ARG, "retrieval: n_queries = %d needs keys (n_keys > 1 or hops > 0)", p->n_queries);
    if (p->n_queries < 1 || p->n_queries > MP_RETRIEVAL_MAX_QUERIES)
        return mp_error(MP_ERR_ARG, "retrieval: n_queries = %d is out of range (1..%d)", p->n_queries,
                        MP_RETRIEVAL_MAX_QUERIES);
    if (isnan(p->depth) || p->depth > 1)
        return mp_error(MP_ERR_ARG, "retrieval: depth = %g must be in [0, 1] (or < 0 for random)", p->depth);
    if (keyed(p)) {
        const int alpha = p->key_symbols > 0 ? p->key_symbols : 10;
        double distinct = 1;
        for (int i = 0; i < p->key_len && distinct < n_needles; i++) distinct *= alpha;
        if (n_needles > distinct) {
            if (p->key_symbols > 0)
                return mp_error(MP_ERR_ARG, "retrieval: %d distinct keys do not fit in %d of %d key symbols", n_needles,
                                p->key_len, p->key_symbols);
            return mp_error(MP_ERR_ARG, "retrieval: %d distinct keys do not fit in %d digits", n_needles, p->key_len);
        }
    }
    r = mp_calloc(1, sizeof *r, "retrieval task");
    if (!r) return MP_ERR_NOMEM;
    r->p = *p;
    r->p.bos = p->bos ? 1 : 0;
    r->n_needles = n_needles;
    r->keys = mp_calloc((size_t)n_needles * p->key_len, sizeof *r->keys, "retrieval keys");
    r->values = mp_calloc((size_t)p->n_keys * p->value_len, sizeof *r->values, "retrieval values");
    r->offset = mp_calloc((size_t)n_needles, sizeof *r->offset, "retrieval offsets");
    r->order = mp_calloc((size_t)n_needles, sizeof *r->order, "retrieval order");
    r->label = mp_calloc((size_t)n_needles, sizeof *r->label, "retrieval chain labels");
    if (!r->keys || !r->values || !r->offset || !r->order || !r->label) { st = MP_ERR_NOMEM; goto cleanup; }
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

/* Keys as token ids: digits, or key symbols (key_symbols > 0), distinct. */
static void draw_keys(mp_retrieval *r) {
    const int K = r->p.key_len, n = r->n_needles, S = r->p.key_symbols;
    const int base = S > 0 ? key0(&r->p) : MP_RETRIEVAL_DIGIT0, alpha = S > 0 ? S : 10;
    for (int i = 0; i < n; i++) {
        int32_t *k = r->keys + (size_t)i * K;
        for (;;) {
            for (int d = 0; d < K; d++) k[d] = base + (int32_t)gsl_rng_uniform_int(r->rng, (unsigned long)alpha);
            int dup = 0;
            for (int j = 0; j < i && !dup; j++) dup = memcmp(k, r->keys + (size_t)j * K, K * sizeof *k) == 0;
            if (!dup) break;
        }
    }
}

/* Values: uniform digits; a distractor's value is redrawn while it equals the
 * queried one (value 0), so the answer is never the value of another needle. */
static void draw_values(mp_retrieval *r) {
    const int L = r->p.value_len;
    for (int c = 0; c < r->p.n_keys; c++) {
        int32_t *v = r->values + (size_t)c * L;
        do {
            for (int d = 0; d < L; d++) v[d] = (int32_t)gsl_rng_uniform_int(r->rng, 10);
        } while (c > 0 && memcmp(v, r->values, (size_t)L * sizeof *v) == 0);
    }
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Variable tracking: uniform offsets for all needles, sorted, dealt to the
 * chains in a random order (a shuffled list of chain labels, each chain's
 * needles taking its slots in link order), so every chain is in order. */
static void chain_offsets(mp_retrieval *r, int F) {
    const int n = r->n_needles, per = 1 + r->p.hops;
    int *slot = r->order;   /* scratch: sorted offsets (order is rebuilt by sort_needles) */
    for (int i = 0; i < n; i++) slot[i] = (int)gsl_rng_uniform_int(r->rng, (unsigned long)F + 1);
    qsort(slot, (size_t)n, sizeof *slot, cmp_int);
    for (int i = 0; i < n; i++) r->label[i] = i / per;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)gsl_rng_uniform_int(r->rng, (unsigned long)i + 1), t = r->label[i];
        r->label[i] = r->label[j];
        r->label[j] = t;
    }
    int next[MP_RETRIEVAL_MAX_KEYS];
    for (int c = 0; c < r->p.n_keys; c++) next[c] = 0;
    for (int i = 0; i < n; i++) {
        int c = r->label[i];
        r->offset[c * per + next[c]++] = slot[i];
    }
}

/* Needles sorted by (offset, index): insertion sort, the needles are few. */
static void sort_needles(mp_retrieval *r) {
    for (int i = 0; i < r->n_needles; i++) {
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
    const int L = p->value_len, K = p->key_len, kv = keyed(p), per = 1 + p->hops, last = p->hops;
    int min_len = mp_retrieval_min_len(p);
    if (B < 1) return mp_error(MP_ERR_ARG, "retrieval: batch size B = %d must be >= 1", B);
    if (T < min_len)
        return mp_error(MP_ERR_ARG, "retrieval: T = %d is shorter than the %d tokens of BOS, %d needle%s "
                        "and the query", T, min_len, r->n_needles, r->n_needles > 1 ? "s" : "");
    const int F = T - min_len;

    for (int b = 0; b < B; b++) {
        int32_t *tk = tokens + (size_t)b * T, *tg = targets + (size_t)b * T;
        mp_retrieval_truth tr;
        memset(&tr, 0, sizeof tr);
        if (kv) draw_keys(r);
        draw_values(r);
        if (p->hops > 0) {
            chain_offsets(r, F);
        } else {
            r->offset[0] = p->depth < 0 ? (int)gsl_rng_uniform_int(r->rng, (unsigned long)F + 1)
                                        : (int)lround(p->depth * F);
            for (int i = 1; i < p->n_keys; i++)
                r->offset[i] = (int)gsl_rng_uniform_int(r->rng, (unsigned long)F + 1);
        }
        sort_needles(r);

        int pos = 0, fi = 0;
        if (p->bos) tk[pos++] = MP_RETRIEVAL_BOS;
        for (int oi = 0; oi <= r->n_needles; oi++) {
            int until = oi < r->n_needles ? r->offset[r->order[oi]] : F;
            for (; fi < until; fi++)
                tk[pos++] = MP_RETRIEVAL_FILLER0 + (p->filler == MP_RETRIEVAL_FILLER_REPEAT
                    ? fi % p->n_filler : (int)gsl_rng_uniform_int(r->rng, (unsigned long)p->n_filler));
            if (oi == r->n_needles) break;
            int n = r->order[oi], chain = n / per, link = n % per;
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
            if (link > 0) {   /* "key b is key a ." : a is the chain's previous key */
                tk[pos++] = MP_RETRIEVAL_KEY;
                for (int d = 0; d < K; d++) tk[pos++] = r->keys[(size_t)(n - 1) * K + d];
            } else {
                if (n == 0) tr.value_pos = pos;
                for (int d = 0; d < L; d++) tk[pos++] = r->values[(size_t)chain * L + d];
            }
            tk[pos++] = MP_RETRIEVAL_DOT;
        }
        for (int t = 0; t < T; t++) tg[t] = -1;
        /* earlier queries: chains drawn uniformly, with repetition and chain 0
         * included, so that their answers say nothing about the last one (asking
         * each other chain once would let a model answer the last query by
         * elimination, without matching its key) */
        for (int q = 0; q < p->n_queries - 1; q++) {
            const int c = (int)gsl_rng_uniform_int(r->rng, (unsigned long)p->n_keys);
            tk[pos++] = MP_RETRIEVAL_WHAT;
            tk[pos++] = MP_RETRIEVAL_IS;
            tk[pos++] = MP_RETRIEVAL_KEY;
            for (int d = 0; d < K; d++) tk[pos++] = r->keys[(size_t)(c * per + last) * K + d];
            tk[pos++] = MP_RETRIEVAL_QMARK;
            for (int d = 0; d < L; d++) {
                tg[pos - 1] = r->values[(size_t)c * L + d];
                tk[pos++] = r->values[(size_t)c * L + d];
            }
            tk[pos++] = MP_RETRIEVAL_DOT;
        }
        tk[pos++] = MP_RETRIEVAL_WHAT;
        tk[pos++] = MP_RETRIEVAL_IS;
        if (kv) {
            tk[pos++] = MP_RETRIEVAL_KEY;
            for (int d = 0; d < K; d++) tk[pos++] = r->keys[(size_t)last * K + d];
        } else {
            tk[pos++] = MP_RETRIEVAL_THE;
            tk[pos++] = MP_RETRIEVAL_PASS;
            tk[pos++] = MP_RETRIEVAL_KEY;
        }
        tk[pos++] = MP_RETRIEVAL_QMARK;
        tr.answer_pos = pos;
        for (int d = 0; d < L; d++) tk[pos++] = r->values[d];
        /* pos == T by construction (min_len + F filler tokens) */

        for (int t = tr.answer_pos - 1; t < T - 1; t++) tg[t] = tk[t + 1];
        memcpy(tr.value, r->values, (size_t)L * sizeof *tr.value);
        if (kv) memcpy(tr.key, r->keys + (size_t)last * K, (size_t)K * sizeof *tr.key);
        tr.depth = F > 0 ? (double)r->offset[0] / F : 0.0;
        if (truth) truth[b] = tr;
    }
    return MP_OK;
}
