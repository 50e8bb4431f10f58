/* algebra.c — the in-context algebra sequence generator: group mixtures, random
 * symbol assignments, facts with held-out queries, targets, and per-sample ground
 * truth including which in-context rules solve the final query (see algebra.h). */
#include "algebra.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "task_rng.h"

#define NS MP_ALGEBRA_N_SYMBOLS
#define MAX_FACTS 100000
#define MAX_FACT_TABLE 256   /* sum of order^2 over groups with sum of orders <= 16 */

struct mp_algebra {
    mp_algebra_params p;
    gsl_rng *rng;
};

typedef struct { int8_t g, x, y; } fact;

mp_algebra_params mp_algebra_params_default(void) {
    mp_algebra_params p;
    memset(&p, 0, sizeof p);
    p.n_facts = 200;
    p.mix = 0.7;
    p.max_order = 10;
    p.pool_share = 1.0;
    p.test_groups = 0;
    p.n_fixed = 0;
    p.holdout = MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED;
    p.target = MP_ALGEBRA_TARGET_ALL;
    p.require = p.exclude = 0;
    p.max_attempts = 10000;
    p.seed = 1;
    return p;
}

int mp_algebra_seq_len(const mp_algebra_params *p) { return 5 * (p->n_facts + 1); }

static void rules_str(uint32_t mask, char *buf, size_t n) {
    buf[0] = 0;
    size_t len = 0;
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        if (mask & MP_ALGEBRA_BIT(r))
            len += (size_t)snprintf(buf + len, n > len ? n - len : 0, "%s%s", len ? "|" : "",
                                    mp_algebra_rule_name((mp_algebra_rule)r));
    if (!len) snprintf(buf, n, "none");
}

static mp_status validate(const mp_algebra_params *p) {
    const uint32_t all = (1u << MP_ALGEBRA_N_RULES) - 1;
    char b1[64];
    if (p->n_facts < 0 || p->n_facts > MAX_FACTS)
        return mp_error(MP_ERR_ARG, "algebra: n_facts = %d is out of range (0..%d)", p->n_facts, MAX_FACTS);
    if (p->pool < 0)
        return mp_error(MP_ERR_ARG, "algebra: pool = %d must be >= 0 (0: no pool)", p->pool);
    if (!(p->pool_share >= 0 && p->pool_share <= 1))
        return mp_error(MP_ERR_ARG, "algebra: pool_share = %g is not a probability", p->pool_share);
    if (!(p->mix >= 0 && p->mix <= 1))
        return mp_error(MP_ERR_ARG, "algebra: mix = %g is not a probability", p->mix);
    if (p->max_order < 3 || p->max_order > NS)
        return mp_error(MP_ERR_ARG, "algebra: max_order = %d is out of range (3..%d)", p->max_order, NS);
    if (p->n_fixed < 0 || p->n_fixed > MP_ALGEBRA_MAX_GROUPS)
        return mp_error(MP_ERR_ARG, "algebra: n_fixed = %d is out of range (0..%d)", p->n_fixed,
                        MP_ALGEBRA_MAX_GROUPS);
    int total = 0;
    for (int i = 0; i < p->n_fixed; i++) {
        int o = mp_algebra_group_order(p->fixed[i]);
        if (o < 2)
            return mp_error(MP_ERR_ARG, "algebra: fixed group %d (family %d, n %d) is not supported",
                            i, (int)p->fixed[i].family, p->fixed[i].n);
        total += o;
    }
    if (total > NS)
        return mp_error(MP_ERR_ARG, "algebra: the fixed groups have %d elements, more than the %d symbols",
                        total, NS);
    if ((int)p->holdout < 0 || p->holdout > MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED)
        return mp_error(MP_ERR_ARG, "algebra: unknown holdout mode %d", (int)p->holdout);
    if ((int)p->target < 0 || p->target > MP_ALGEBRA_TARGET_LAST)
        return mp_error(MP_ERR_ARG, "algebra: unknown target mode %d", (int)p->target);
    if ((p->require | p->exclude) & ~all)
        return mp_error(MP_ERR_ARG, "algebra: require/exclude name unknown rules (mask 0x%x)",
                        (unsigned)((p->require | p->exclude) & ~all));
    if (p->require & p->exclude) {
        rules_str(p->require & p->exclude, b1, sizeof b1);
        return mp_error(MP_ERR_ARG, "algebra: rules %s are both required and excluded", b1);
    }
    if ((p->require & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY)) && p->holdout != MP_ALGEBRA_HOLDOUT_NONE)
        return mp_error(MP_ERR_ARG, "algebra: require=copy needs holdout none (a held-out pair is never in context)");
    if ((p->require & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COMMUTE)) &&
        p->holdout == MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED)
        return mp_error(MP_ERR_ARG, "algebra: require=commute needs holdout none or pair (the commuted pair is held out)");
    if ((p->require & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COMMUTE)) &&
        (p->require & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY)))
        return mp_error(MP_ERR_ARG, "algebra: copy and commute exclude each other (commute means \"a b\" is absent)");
    if (p->require && p->max_attempts < 1)
        return mp_error(MP_ERR_ARG, "algebra: max_attempts = %d must be >= 1", p->max_attempts);
    return MP_OK;
}

mp_status mp_algebra_new(mp_algebra **out, const mp_algebra_params *p) {
    mp_status st;
    *out = NULL;
    mp_init();
    if ((st = validate(p)) != MP_OK) return st;
    mp_algebra *a = mp_calloc(1, sizeof *a, "algebra task");
    if (!a) return MP_ERR_NOMEM;
    a->p = *p;
    a->rng = mp_task_rng_new(p->seed, 1, "algebra samples");
    if (!a->rng) { free(a); return MP_ERR_NOMEM; }
    *out = a;
    return MP_OK;
}

void mp_algebra_free(mp_algebra *a) {
    if (!a) return;
    if (a->rng) gsl_rng_free(a->rng);
    free(a);
}

void mp_algebra_seed(mp_algebra *a, uint64_t seed) { mp_task_rng_seed(a->rng, seed, 1); }

const mp_algebra_params *mp_algebra_get_params(const mp_algebra *a) { return &a->p; }

/* One group that fits in `room` symbols, or order 0 when none fits. */
static mp_algebra_group draw_group(const mp_algebra_params *p, gsl_rng *r, int room) {
    mp_algebra_group g = {MP_ALGEBRA_CYCLIC, 0};
    if (p->test_groups) {
        static const mp_algebra_family fam[3] = {MP_ALGEBRA_Q8, MP_ALGEBRA_C2XC4, MP_ALGEBRA_C2XC2XC2};
        if (room < 8) return g;
        g.family = fam[gsl_rng_uniform_int(r, 3)];
        g.n = 8;
        return g;
    }
    int M = p->max_order < room ? p->max_order : room;
    int n_cyc = M >= 3 ? M - 2 : 0;          /* C_3 .. C_M */
    int n_dih = M / 2 >= 2 ? M / 2 - 1 : 0;  /* D_2 .. D_{M/2} */
    if (n_cyc + n_dih < 1) return g;
    int w = (int)gsl_rng_uniform_int(r, (unsigned long)(n_cyc + n_dih));
    if (w < n_cyc) { g.family = MP_ALGEBRA_CYCLIC; g.n = w + 3; }
    else { g.family = MP_ALGEBRA_DIHEDRAL; g.n = w - n_cyc + 2; }
    return g;
}

static void draw_groups(const mp_algebra_params *p, gsl_rng *r, mp_algebra_truth *tr) {
    tr->n_groups = 0;
    if (p->n_fixed > 0) {
        for (int i = 0; i < p->n_fixed; i++) tr->groups[tr->n_groups++] = p->fixed[i];
        return;
    }
    int used = 0;
    while (tr->n_groups < MP_ALGEBRA_MAX_GROUPS) {
        mp_algebra_group g = draw_group(p, r, NS - used);
        int o = mp_algebra_group_order(g);
        if (!o) break;
        tr->groups[tr->n_groups++] = g;
        used += o;
        if (gsl_rng_uniform(r) > p->mix) break;
    }
}

/* Random injective symbol assignment with no identity on symbol 0. */
static mp_status assign_symbols(gsl_rng *r, mp_algebra_truth *tr) {
    int total = 0, all[NS], pick[NS];
    for (int i = 0; i < tr->n_groups; i++) total += mp_algebra_group_order(tr->groups[i]);
    for (int s = 0; s < NS; s++) all[s] = s;
    for (int tries = 0; tries < 1000; tries++) {
        gsl_ran_choose(r, pick, (size_t)total, all, NS, sizeof(int));
        gsl_ran_shuffle(r, pick, (size_t)total, sizeof(int));
        int k = 0, bad = 0;
        memset(tr->symbol, -1, sizeof tr->symbol);
        memset(tr->sym_group, -1, sizeof tr->sym_group);
        memset(tr->sym_elem, -1, sizeof tr->sym_elem);
        for (int gi = 0; gi < tr->n_groups; gi++) {
            int o = mp_algebra_group_order(tr->groups[gi]);
            for (int x = 0; x < o; x++, k++) {
                int s = pick[k];
                tr->symbol[gi][x] = (int8_t)s;
                tr->sym_group[s] = (int8_t)gi;
                tr->sym_elem[s] = (int8_t)x;
                if (x == MP_ALGEBRA_IDENTITY && s == 0) bad = 1;
            }
        }
        if (!bad) return MP_OK;
    }
    return mp_error(MP_ERR_ARG, "algebra: no symbol assignment keeps identities off symbol 0");
}

static int fact_answer(const mp_algebra_truth *tr, fact f) {
    return tr->symbol[f.g][mp_algebra_group_mul(tr->groups[f.g], f.x, f.y)];
}

/* Draws one sequence into tok (the full stream, 5k + 6 tokens) and tr. */
static mp_status draw_sequence(const mp_algebra_params *p, gsl_rng *r, int32_t *tok,
                               mp_algebra_truth *tr) {
    mp_status st;
    fact all[MAX_FACT_TABLE];
    int n_all = 0, k = p->n_facts;
    draw_groups(p, r, tr);
    if ((st = assign_symbols(r, tr)) != MP_OK) return st;
    for (int gi = 0; gi < tr->n_groups; gi++) {
        int o = mp_algebra_group_order(tr->groups[gi]);
        for (int x = 0; x < o; x++)
            for (int y = 0; y < o; y++) all[n_all++] = (fact){(int8_t)gi, (int8_t)x, (int8_t)y};
    }
    fact q = all[gsl_rng_uniform_int(r, (unsigned long)n_all)];
    /* The context's facts: everything minus the held-out pairs, kept in place. */
    int n_ctx = 0;
    for (int i = 0; i < n_all; i++) {
        fact f = all[i];
        int same = f.g == q.g && f.x == q.x && f.y == q.y;
        int comm = f.g == q.g && f.x == q.y && f.y == q.x;
        if (p->holdout >= MP_ALGEBRA_HOLDOUT_PAIR && same) continue;
        if (p->holdout == MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED && comm) continue;
        all[n_ctx++] = f;
    }
    assert(n_ctx > 0);
    /* with pool_share < 1 a uniform draw decides (no draw at 1: the stream stays as before) */
    int use_pool = p->pool > 0 && (p->pool_share >= 1 || gsl_rng_uniform(r) < p->pool_share);
    if (use_pool && p->pool < n_ctx) {
        /* a random subset of `pool` distinct facts, kept in table order */
        fact chosen[MAX_FACT_TABLE];
        gsl_ran_choose(r, chosen, (size_t)p->pool, all, (size_t)n_ctx, sizeof(fact));
        memcpy(all, chosen, sizeof(fact) * (size_t)p->pool);
        n_ctx = p->pool;
    }
    tok[0] = MP_ALGEBRA_TOK_BOS;
    for (int i = 0; i <= k; i++) {
        fact f = i < k ? all[gsl_rng_uniform_int(r, (unsigned long)n_ctx)] : q;
        int32_t *o = tok + 1 + 5 * (size_t)i;
        o[0] = MP_ALGEBRA_TOK_SEP;
        o[1] = tr->symbol[f.g][f.x];
        o[2] = tr->symbol[f.g][f.y];
        o[3] = MP_ALGEBRA_TOK_EQ;
        o[4] = fact_answer(tr, f);
    }
    tr->query_group = q.g;
    tr->query_a = tr->symbol[q.g][q.x];
    tr->query_b = tr->symbol[q.g][q.y];
    tr->answer = fact_answer(tr, q);

    mp_algebra_context ctx;
    if ((st = mp_algebra_context_from_tokens(&ctx, tok, k)) != MP_OK) return st;
    tr->rules = 0;
    for (int rr = 0; rr < MP_ALGEBRA_N_RULES; rr++) {
        int s = mp_algebra_solve((mp_algebra_rule)rr, &ctx, tr->query_a, tr->query_b);
        tr->solved[rr] = (int8_t)s;
        if (s >= 0 && s == tr->answer) tr->rules |= MP_ALGEBRA_BIT(rr);
    }
    return MP_OK;
}

mp_status mp_algebra_sample(mp_algebra *a, int B, int T, int32_t *tokens, int32_t *targets,
                            mp_algebra_truth *truth) {
    mp_status st = MP_OK;
    const mp_algebra_params *p = &a->p;
    int L = mp_algebra_seq_len(p);
    int32_t *stream = NULL;
    size_t bt;
    if (B < 1) return mp_error(MP_ERR_ARG, "algebra: batch size B = %d must be >= 1", B);
    if (T != L)
        return mp_error(MP_ERR_ARG, "algebra: T = %d but %d facts need T = 5*(k+1) = %d",
                        T, p->n_facts, L);
    if (mp_mul_size((size_t)B, (size_t)T, &bt))
        return mp_error(MP_ERR_NOMEM, "algebra: batch [%d, %d] overflows", B, T);
    stream = mp_malloc(((size_t)L + 1) * sizeof *stream, "algebra sequence");
    if (!stream) return MP_ERR_NOMEM;

    for (int b = 0; b < B; b++) {
        mp_algebra_truth tr;
        memset(&tr, 0, sizeof tr); /* unused group slots and padding: the same bytes for the same seed */
        int attempt = 0;
        for (;;) {
            attempt++;
            if ((st = draw_sequence(p, a->rng, stream, &tr)) != MP_OK) goto cleanup;
            if ((tr.rules & p->require) == p->require && !(tr.rules & p->exclude)) break;
            if (attempt >= p->max_attempts) {
                char r1[64], r2[64];
                rules_str(p->require, r1, sizeof r1);
                rules_str(p->exclude, r2, sizeof r2);
                st = mp_error(MP_ERR_ARG, "algebra: no sequence with require=%s exclude=%s in %d attempts "
                              "(raise max_attempts or relax the rules)", r1, r2, attempt);
                goto cleanup;
            }
        }
        tr.attempts = attempt;
        int32_t *tk = tokens + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            tk[t] = stream[t];
            int keep = p->target == MP_ALGEBRA_TARGET_ALL ? 1
                     : p->target == MP_ALGEBRA_TARGET_ANSWERS ? t % 5 == 4
                     : t == T - 1;
            tg[t] = keep ? stream[t + 1] : -1;
        }
        if (truth) truth[b] = tr;
    }
cleanup:
    free(stream);
    return st;
}
