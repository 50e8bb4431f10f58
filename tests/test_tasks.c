/* test_tasks.c — unit tests of the synthetic task generators (tasks/): MTD
 * statistics and ground truth, in-context algebra groups, sequences and rule
 * labels, text-corpus windows and errors, retrieval layouts; determinism by
 * seed for all of them. References are recomputed here independently of the
 * generators (brute-force searches, direct formulas). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algebra.h"
#include "mtd.h"
#include "retrieval.h"
#include "textcorpus.h"
#include "testutil.h"

/* ------------------------------------------------------------------ MTD */

static void test_mtd_pi_and_params(void) {
    mp_mtd_params p = mp_mtd_params_default();
    p.q = 6; p.c = 0.3; p.seed = 7;
    mp_mtd *t = NULL;
    CHECK(mp_mtd_new(&t, &p) == MP_OK, "%s", mp_last_error());
    if (!t) return;
    const double *pi = mp_mtd_pi(t);
    double worst = 0;
    int neg = 0;
    for (int u = 0; u < p.q; u++) {
        double s = 0;
        for (int v = 0; v < p.q; v++) { s += pi[u * p.q + v]; neg += pi[u * p.q + v] < 0; }
        if (fabs(s - 1) > worst) worst = fabs(s - 1);
    }
    CHECK(worst < 1e-12, "pi* rows sum to 1 (worst |sum-1| = %g)", worst);
    CHECK(neg == 0, "pi* has %d negative entries", neg);
    mp_mtd_free(t);

    /* bad params name the field */
    mp_mtd_params b = mp_mtd_params_default();
    b.q = 1;
    CHECK(mp_mtd_new(&t, &b) == MP_ERR_ARG && strstr(mp_last_error(), "q"), "q=1 rejected: %s", mp_last_error());
    b = mp_mtd_params_default(); b.c = 0;
    CHECK(mp_mtd_new(&t, &b) == MP_ERR_ARG && strstr(mp_last_error(), "c = 0"), "c=0 rejected: %s", mp_last_error());
    b = mp_mtd_params_default(); b.m = 0;
    CHECK(mp_mtd_new(&t, &b) == MP_ERR_ARG, "m=0 rejected");
    b = mp_mtd_params_default();
    CHECK(mp_mtd_new(&t, &b) == MP_OK, "default init");
    int32_t tok[4], tgt[4];
    CHECK(mp_mtd_sample(t, 1, 2, tok, tgt, NULL, NULL) == MP_ERR_ARG, "T < m rejected");
    mp_mtd_free(t);
}

/* m = 1: lambda = 1 and y_{t+1} ~ pi*(y_t, .) exactly, so the empirical
 * transition matrix converges to pi*. q = 4, 64 x 1024 tokens give ~16k
 * transitions per row: binomial std <= sqrt(0.25/16k) = 0.004; bound 0.025 (6 sd). */
static void test_mtd_m1_transitions(void) {
    mp_mtd_params p = mp_mtd_params_default();
    p.q = 4; p.m = 1; p.c = 1.0; p.seed = 11;
    mp_mtd *t = NULL;
    CHECK(mp_mtd_new(&t, &p) == MP_OK, "%s", mp_last_error());
    if (!t) return;
    enum { B = 64, T = 1024 };
    static int32_t tok[B * T], tgt[B * T];
    double lam[B];
    CHECK(mp_mtd_sample(t, B, T, tok, tgt, lam, NULL) == MP_OK, "%s", mp_last_error());
    double cnt[4][4] = {{0}}, row[4] = {0};
    for (int b = 0; b < B; b++) {
        CHECK_NEAR(lam[b], 1.0, 1e-15, "m=1 lambda is 1");
        for (int i = 0; i < T; i++) {  /* targets[i] = y_{i+1} for every i (m-1 = 0) */
            int u = tok[b * T + i], v = tgt[b * T + i];
            cnt[u][v]++; row[u]++;
        }
    }
    const double *pi = mp_mtd_pi(t);
    double worst = 0;
    for (int u = 0; u < 4; u++)
        for (int v = 0; v < 4; v++) {
            double d = fabs(cnt[u][v] / row[u] - pi[u * 4 + v]);
            if (d > worst) worst = d;
        }
    CHECK(worst < 0.025, "empirical transitions match pi* (max |diff| = %.4f)", worst);
    mp_mtd_free(t);
}

static void test_mtd_mixture(void) {
    mp_mtd_params p = mp_mtd_params_default();
    p.q = 5; p.m = 3; p.c = 0.5; p.seed = 3;
    mp_mtd *t = NULL;
    CHECK(mp_mtd_new(&t, &p) == MP_OK, "%s", mp_last_error());
    if (!t) return;
    enum { B = 48, T = 400, Q = 5, M = 3 };
    static int32_t tok[B * T], tgt[B * T];
    static double lam[B * M], nxt[B * T * Q];
    CHECK(mp_mtd_sample(t, B, T, tok, tgt, lam, nxt) == MP_OK, "%s", mp_last_error());
    const double *pi = mp_mtd_pi(t);
    double lam_err = 0, sum_err = 0, rec_err = 0;
    int bad_tgt = 0, bad_tok = 0;
    /* expected and observed counts of (y_t, y_{t+1}) for t >= m-1 */
    double E[Q][Q] = {{0}}, O[Q][Q] = {{0}};
    for (int b = 0; b < B; b++) {
        const double *l = lam + b * M;
        double s = l[0] + l[1] + l[2];
        if (fabs(s - 1) > lam_err) lam_err = fabs(s - 1);
        const int32_t *y = tok + b * T;
        for (int i = 0; i < T; i++) {
            if (y[i] < 0 || y[i] >= Q) bad_tok++;
            const double *pr = nxt + ((size_t)b * T + i) * Q;
            double ps = 0, ref[Q];
            for (int v = 0; v < Q; v++) ps += pr[v];
            if (fabs(ps - 1) > sum_err) sum_err = fabs(ps - 1);
            for (int v = 0; v < Q; v++) {
                if (i < M - 1) ref[v] = 1.0 / Q;
                else ref[v] = l[0] * pi[y[i] * Q + v] + l[1] * pi[y[i - 1] * Q + v] + l[2] * pi[y[i - 2] * Q + v];
                if (fabs(ref[v] - pr[v]) > rec_err) rec_err = fabs(ref[v] - pr[v]);
            }
            int want = i >= M - 1 ? (i + 1 < T ? y[i + 1] : tgt[b * T + i]) : -1;
            if (tgt[b * T + i] != want || (i >= M - 1 && (want < 0 || want >= Q))) bad_tgt++;
            if (i >= M - 1) {
                for (int v = 0; v < Q; v++) E[y[i]][v] += pr[v];
                O[y[i]][tgt[b * T + i]]++;
            }
        }
    }
    CHECK(lam_err < 1e-12, "lambda sums to 1 (worst %g)", lam_err);
    CHECK(sum_err < 1e-12, "next-token distributions sum to 1 (worst %g)", sum_err);
    CHECK(rec_err < 1e-12, "next-token distributions match recomputation (worst %g)", rec_err);
    CHECK(bad_tgt == 0, "%d targets differ from the next token / -1 convention", bad_tgt);
    CHECK(bad_tok == 0, "%d tokens out of range", bad_tok);
    /* The draws follow the mixture: chi-square of observed vs expected
     * (prev, next) counts, df ~ cells used; bound df + 6 sqrt(2 df). */
    double chi2 = 0;
    int df = 0;
    for (int u = 0; u < Q; u++)
        for (int v = 0; v < Q; v++)
            if (E[u][v] >= 5) { chi2 += (O[u][v] - E[u][v]) * (O[u][v] - E[u][v]) / E[u][v]; df++; }
    CHECK(df >= 20 && chi2 < df + 6 * sqrt(2.0 * df), "chi2 = %.1f over %d cells", chi2, df);

    /* the exposed mixture helper agrees */
    double out[Q];
    mp_mtd_mixture(t, lam, tok, 10, out);
    const double *pr = nxt + 9 * Q;
    double d = 0;
    for (int v = 0; v < Q; v++) d = fmax(d, fabs(out[v] - pr[v]));
    CHECK(d < 1e-15, "mp_mtd_mixture = next at t = 9 (%g)", d);

    /* LAST mode: only t = T-1 carries a target; the tokens are the same stream */
    mp_mtd_params pl = p;
    pl.target = MP_MTD_TARGET_LAST;
    mp_mtd *tl = NULL;
    CHECK(mp_mtd_new(&tl, &pl) == MP_OK, "%s", mp_last_error());
    static int32_t tok2[B * T], tgt2[B * T];
    CHECK(mp_mtd_sample(tl, B, T, tok2, tgt2, NULL, NULL) == MP_OK, "%s", mp_last_error());
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            bad += tgt2[b * T + i] != (i == T - 1 ? tgt[b * T + i] : -1);
    CHECK(bad == 0, "LAST targets (%d bad)", bad);
    CHECK(memcmp(tok, tok2, sizeof tok) == 0, "target mode does not change the tokens");
    mp_mtd_free(tl);
    mp_mtd_free(t);
}

static void test_mtd_determinism(void) {
    enum { B = 4, T = 64 };
    static int32_t a[B * T], at[B * T], b[B * T], bt[B * T], c[B * T], ct[B * T];
    mp_mtd_params p = mp_mtd_params_default();
    mp_mtd *t1 = NULL, *t2 = NULL, *t3 = NULL;
    mp_mtd_new(&t1, &p);
    mp_mtd_new(&t2, &p);
    p.seed = 2;
    mp_mtd_new(&t3, &p);
    if (!t1 || !t2 || !t3) { CHECK(0, "init"); goto done; }
    size_t qq = (size_t)p.q * p.q * sizeof(double);
    CHECK(memcmp(mp_mtd_pi(t1), mp_mtd_pi(t2), qq) == 0, "same seed, same pi*");
    CHECK(memcmp(mp_mtd_pi(t1), mp_mtd_pi(t3), qq) != 0, "different seed, different pi*");
    mp_mtd_sample(t1, B, T, a, at, NULL, NULL);
    mp_mtd_sample(t2, B, T, b, bt, NULL, NULL);
    mp_mtd_sample(t3, B, T, c, ct, NULL, NULL);
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0, "same seed, same batch");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seed, different batch");
    mp_mtd_seed(t1, 99);
    mp_mtd_seed(t2, 99);
    mp_mtd_sample(t1, B, T, a, at, NULL, NULL);
    mp_mtd_sample(t2, B, T, b, bt, NULL, NULL);
    CHECK(memcmp(a, b, sizeof a) == 0, "re-seeded streams agree");
done:
    mp_mtd_free(t1); mp_mtd_free(t2); mp_mtd_free(t3);
}

/* -------------------------------------------------------------- algebra */

static int elem_order(mp_algebra_group g, int x) {
    int y = x, k = 1;
    while (y != 0 && k <= 64) { y = mp_algebra_group_mul(g, y, x); k++; }
    return k;
}

/* Checks the group axioms; fills n_ord[k] = number of elements of order k. */
static int check_group(mp_algebra_group g, int *abelian, int n_ord[17]) {
    char name[16];
    int n = mp_algebra_group_order(g), ok = 1;
    mp_algebra_group_name(g, name);
    *abelian = 1;
    memset(n_ord, 0, 17 * sizeof *n_ord);
    for (int x = 0; x < n; x++) {
        int has_inv = 0;
        for (int y = 0; y < n; y++) {
            int xy = mp_algebra_group_mul(g, x, y);
            if (xy < 0 || xy >= n) { ok = 0; continue; }
            if (xy == 0) has_inv = 1;
            if (xy != mp_algebra_group_mul(g, y, x)) *abelian = 0;
            for (int z = 0; z < n; z++)
                if (mp_algebra_group_mul(g, xy, z) != mp_algebra_group_mul(g, x, mp_algebra_group_mul(g, y, z))) ok = 0;
        }
        if (mp_algebra_group_mul(g, 0, x) != x || mp_algebra_group_mul(g, x, 0) != x) ok = 0;
        if (!has_inv) ok = 0;
        int k = elem_order(g, x);
        if (k <= 16) n_ord[k]++; else ok = 0;
    }
    CHECK(ok, "%s satisfies closure, identity 0, inverses, associativity", name);
    return ok;
}

static void test_algebra_groups(void) {
    int ab, ord[17];
    for (int n = 1; n <= 16; n++) {
        mp_algebra_group g = {MP_ALGEBRA_CYCLIC, n};
        CHECK(mp_algebra_group_order(g) == n, "|C%d|", n);
        check_group(g, &ab, ord);
        CHECK(ab, "C%d abelian", n);
        CHECK(ord[n] >= 1, "C%d has a generator", n);
    }
    for (int n = 1; n <= 8; n++) {
        mp_algebra_group g = {MP_ALGEBRA_DIHEDRAL, n};
        CHECK(mp_algebra_group_order(g) == 2 * n, "|D%d|", n);
        check_group(g, &ab, ord);
        CHECK(ab == (n <= 2), "D%d abelian iff n <= 2", n);
        /* D_n: n reflections of order 2, plus r^{n/2} when n is even */
        int inv = n == 1 ? 1 : n + (n % 2 == 0);
        CHECK(ord[2] == inv, "D%d has %d involutions (got %d)", n, inv, ord[2]);
    }
    mp_algebra_group q8 = {MP_ALGEBRA_Q8, 0}, c24 = {MP_ALGEBRA_C2XC4, 0}, c222 = {MP_ALGEBRA_C2XC2XC2, 0};
    check_group(q8, &ab, ord);
    CHECK(!ab && ord[1] == 1 && ord[2] == 1 && ord[4] == 6, "Q8: non-abelian, one involution, six of order 4");
    /* i j = k, j i = -k (element 4*s + u) */
    CHECK(mp_algebra_group_mul(q8, 1, 2) == 3 && mp_algebra_group_mul(q8, 2, 1) == 7, "Q8: ij = k, ji = -k");
    check_group(c24, &ab, ord);
    CHECK(ab && ord[2] == 3 && ord[4] == 4, "C2xC4: abelian, 3 involutions, 4 of order 4");
    check_group(c222, &ab, ord);
    CHECK(ab && ord[2] == 7, "C2xC2xC2: abelian, 7 involutions");
    char buf[16];
    CHECK(strcmp(mp_algebra_group_name((mp_algebra_group){MP_ALGEBRA_DIHEDRAL, 4}, buf), "D4") == 0, "name");
    CHECK(mp_algebra_rule_parse("cancel") == MP_ALGEBRA_RULE_CANCEL && mp_algebra_rule_parse("x") == -1, "rule names");
}

/* Independent brute-force versions of the rules over the list of context facts. */
typedef struct { int a, b, c; } tfact;

static int ref_copy(const tfact *f, int k, int a, int b) {
    for (int i = 0; i < k; i++) if (f[i].a == a && f[i].b == b) return f[i].c;
    return -1;
}

static int ref_identity(const tfact *f, int k, int a, int b) {
    for (int i = 0; i < k; i++) {
        int e1 = f[i].c == f[i].a ? f[i].b : -1, e2 = f[i].c == f[i].b ? f[i].a : -1;
        if (e1 == a || e2 == a) return b;
    }
    for (int i = 0; i < k; i++) {
        int e1 = f[i].c == f[i].a ? f[i].b : -1, e2 = f[i].c == f[i].b ? f[i].a : -1;
        if (e1 == b || e2 == b) return a;
    }
    return -1;
}

/* 1 when some triple of context facts derives a b by associativity (either form,
 * not using the fact "a b" itself). */
static int ref_associate(const tfact *f, int k, int a, int b, int answer) {
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
            for (int l = 0; l < k; l++) {
                const tfact *x = f + i, *y = f + j, *z = f + l;
                int uses = (x->a == a && x->b == b) || (y->a == a && y->b == b) || (z->a == a && z->b == b);
                if (uses) continue;
                /* form 1: a g = f, g d = b, f d = c */
                if (x->a == a && y->a == x->b && y->c == b && z->a == x->c && z->b == y->b) {
                    if (z->c != answer) return -1;  /* would be a false derivation */
                    return 1;
                }
                /* form 2: g d = a, d b = f, g f = c */
                if (x->c == a && y->a == x->b && y->b == b && z->a == x->a && z->b == y->c) {
                    if (z->c != answer) return -1;
                    return 1;
                }
            }
    return 0;
}

typedef struct {
    int n, copy, commute, identity, cancel, associate, multi, none;
} rule_stats;

/* Checks every invariant of a batch; returns 0 on the first failure class. */
static void check_algebra_batch(const mp_algebra_params *p, int B, const int32_t *tok, const int32_t *tgt,
                                const mp_algebra_truth *tr, rule_stats *rs) {
    const int k = p->n_facts, T = mp_algebra_seq_len(p);
    int bad_layout = 0, bad_fact = 0, bad_assign = 0, bad_id0 = 0, bad_hold = 0, bad_tgt = 0;
    int bad_label = 0, unsound = 0, bad_assoc = 0, bad_groups = 0;
    tfact *f = malloc(sizeof *f * (k > 0 ? k : 1));
    for (int s = 0; s < B; s++) {
        const int32_t *x = tok + (size_t)s * T, *y = tgt + (size_t)s * T;
        const mp_algebra_truth *t = tr + s;
        /* groups and assignment */
        int total = 0, used[16] = {0};
        for (int g = 0; g < t->n_groups; g++) {
            int o = mp_algebra_group_order(t->groups[g]);
            total += o;
            if (p->n_fixed == 0 && p->test_groups && !(t->groups[g].family >= MP_ALGEBRA_Q8)) bad_groups++;
            if (p->n_fixed == 0 && !p->test_groups && (t->groups[g].family > MP_ALGEBRA_DIHEDRAL || o > p->max_order ||
                (t->groups[g].family == MP_ALGEBRA_CYCLIC && o < 3) || (t->groups[g].family == MP_ALGEBRA_DIHEDRAL && o < 4)))
                bad_groups++;
            for (int e = 0; e < o; e++) {
                int sy = t->symbol[g][e];
                if (sy < 0 || sy >= 16 || used[sy]++ || t->sym_group[sy] != g || t->sym_elem[sy] != e) bad_assign++;
                if (e == 0 && sy == 0) bad_id0++;
            }
        }
        if (total > 16 || t->n_groups < 1) bad_groups++;
        for (int sy = 0; sy < 16; sy++) if (!used[sy] && t->sym_group[sy] != -1) bad_assign++;
        /* layout and facts */
        if (x[0] != MP_ALGEBRA_TOK_BOS) bad_layout++;
        for (int i = 0; i <= k; i++) {
            const int32_t *q = x + 1 + 5 * i;
            int a = q[1], b = q[2], c = i < k ? q[4] : y[T - 1];
            if (q[0] != MP_ALGEBRA_TOK_SEP || q[3] != MP_ALGEBRA_TOK_EQ || a < 0 || a >= 16 || b < 0 || b >= 16 ||
                c < 0 || c >= 16) { bad_layout++; continue; }
            int g = t->sym_group[a];
            if (g < 0 || t->sym_group[b] != g || t->sym_group[c] != g ||
                mp_algebra_group_mul(t->groups[g], t->sym_elem[a], t->sym_elem[b]) != t->sym_elem[c]) bad_fact++;
            if (i < k) f[i] = (tfact){a, b, c};
            else if (a != t->query_a || b != t->query_b || c != t->answer || g != t->query_group) bad_layout++;
        }
        /* held-out pair(s) absent */
        int qa = t->query_a, qb = t->query_b;
        for (int i = 0; i < k; i++) {
            if (p->holdout >= MP_ALGEBRA_HOLDOUT_PAIR && f[i].a == qa && f[i].b == qb) bad_hold++;
            if (p->holdout == MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED && f[i].a == qb && f[i].b == qa) bad_hold++;
        }
        /* targets */
        for (int i = 0; i < T; i++) {
            int nxt = i + 1 < T ? x[i + 1] : t->answer;
            int want = p->target == MP_ALGEBRA_TARGET_ALL ? nxt
                     : p->target == MP_ALGEBRA_TARGET_ANSWERS ? (i % 5 == 4 ? nxt : -1)
                     : (i == T - 1 ? nxt : -1);
            if (y[i] != want) bad_tgt++;
        }
        /* labels against the brute-force references */
        int ans = t->answer;
        int r_copy = ref_copy(f, k, qa, qb);
        int copy = r_copy == ans;
        int commute = r_copy < 0 && ref_copy(f, k, qb, qa) == ans;
        int ident = ref_identity(f, k, qa, qb) == ans;
        int assoc = ref_associate(f, k, qa, qb, ans);
        if (assoc < 0) bad_assoc++;
        if (copy != !!(t->rules & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY))) bad_label++;
        if (commute != !!(t->rules & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COMMUTE))) bad_label++;
        if (ident != !!(t->rules & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_IDENTITY))) bad_label++;
        if ((assoc == 1) != !!(t->rules & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_ASSOCIATE))) bad_label++;
        /* cancel: the group's symbols minus the answers of "a x" (x != b) and "x b"
         * (x != a) facts; when every group symbol is seen in context this set is
         * {answer} exactly when the solver's in-context closure says so */
        {
            int g = t->query_group, o = mp_algebra_group_order(t->groups[g]);
            unsigned grp = 0, seen = 0, ctx_syms = 0;
            for (int e = 0; e < o; e++) grp |= 1u << t->symbol[g][e];
            for (int i = 0; i < k; i++) {
                if (f[i].a == qa && f[i].b != qb) seen |= 1u << f[i].c;
                if (f[i].b == qb && f[i].a != qa) seen |= 1u << f[i].c;
                ctx_syms |= 1u << f[i].a | 1u << f[i].b | 1u << f[i].c;
            }
            unsigned left = grp & ~seen;
            int ref_cancel = left && !(left & (left - 1)) ? __builtin_ctz(left) : -1;
            int lab = !!(t->rules & MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_CANCEL));
            if (ref_cancel >= 0 && ref_cancel != ans) unsound++;   /* cancellation law */
            if ((grp & ctx_syms) == grp && (grp & ~ctx_syms) == 0) {
                mp_algebra_context cx;
                mp_algebra_context_from_tokens(&cx, x, k);
                if (mp_algebra_closure(&cx, qa, qb) == grp && lab != (ref_cancel == ans)) bad_label++;
            }
            if (lab && t->solved[MP_ALGEBRA_RULE_CANCEL] != ans) bad_label++;
            rs->cancel += lab;
        }
        /* sound solvers: whenever they answer, they are right */
        int sound[] = {MP_ALGEBRA_RULE_COPY, MP_ALGEBRA_RULE_IDENTITY, MP_ALGEBRA_RULE_ASSOCIATE};
        for (int i = 0; i < 3; i++)
            if (t->solved[sound[i]] >= 0 && t->solved[sound[i]] != ans) unsound++;
        for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
            if (!!(t->rules & MP_ALGEBRA_BIT(r)) != (t->solved[r] == ans)) bad_label++;
        if ((t->rules & p->require) != p->require || (t->rules & p->exclude)) bad_label++;
        rs->n++;
        rs->copy += copy; rs->commute += commute; rs->identity += ident; rs->associate += assoc == 1;
        rs->multi += __builtin_popcount(t->rules) > 1;
        rs->none += t->rules == 0;
    }
    free(f);
    CHECK(bad_layout == 0, "%d layout errors", bad_layout);
    CHECK(bad_fact == 0, "%d false facts", bad_fact);
    CHECK(bad_assign == 0, "%d assignment errors (not injective / inconsistent)", bad_assign);
    CHECK(bad_id0 == 0, "%d identities on symbol 0", bad_id0);
    CHECK(bad_hold == 0, "%d held-out pairs in context", bad_hold);
    CHECK(bad_tgt == 0, "%d target errors", bad_tgt);
    CHECK(bad_label == 0, "%d rule labels disagree with the references", bad_label);
    CHECK(unsound == 0, "%d sound-solver answers are wrong", unsound);
    CHECK(bad_assoc == 0, "%d associativity derivations give a wrong answer", bad_assoc);
    CHECK(bad_groups == 0, "%d group draws outside the families", bad_groups);
}

static mp_status algebra_run(const mp_algebra_params *p, int B, rule_stats *rs) {
    mp_algebra *a = NULL;
    mp_status st = mp_algebra_new(&a, p);
    if (st != MP_OK) return st;
    int T = mp_algebra_seq_len(p);
    int32_t *tok = malloc(sizeof *tok * B * T), *tgt = malloc(sizeof *tgt * B * T);
    mp_algebra_truth *tr = malloc(sizeof *tr * B);
    st = mp_algebra_sample(a, B, T, tok, tgt, tr);
    if (st == MP_OK) check_algebra_batch(p, B, tok, tgt, tr, rs);
    free(tok); free(tgt); free(tr);
    mp_algebra_free(a);
    return st;
}

static void test_algebra_sequences(void) {
    mp_algebra_params p = mp_algebra_params_default();
    p.n_facts = 40;
    p.seed = 5;
    rule_stats rs = {0};
    CHECK(algebra_run(&p, 400, &rs) == MP_OK, "%s", mp_last_error());
    printf("algebra default (k=40, holdout pair+commuted): identity %d cancel %d associate %d none %d of %d\n",
           rs.identity, rs.cancel, rs.associate, rs.none, rs.n);
    CHECK(rs.copy == 0 && rs.commute == 0, "held-out pairs: no copy/commute");
    CHECK(rs.identity > 0 && rs.cancel > 0 && rs.associate > 0, "identity/cancel/associate all occur");

    /* no hold-out, answers targets: copy and commute occur */
    rule_stats r2 = {0};
    p.holdout = MP_ALGEBRA_HOLDOUT_NONE;
    p.target = MP_ALGEBRA_TARGET_ANSWERS;
    p.seed = 6;
    CHECK(algebra_run(&p, 300, &r2) == MP_OK, "%s", mp_last_error());
    CHECK(r2.copy > 0 && r2.commute > 0, "copy %d commute %d occur without hold-out", r2.copy, r2.commute);

    /* held-out test families, LAST target */
    rule_stats r3 = {0};
    p = mp_algebra_params_default();
    p.n_facts = 30; p.test_groups = 1; p.target = MP_ALGEBRA_TARGET_LAST; p.seed = 8;
    CHECK(algebra_run(&p, 200, &r3) == MP_OK, "%s", mp_last_error());

    /* fixed groups */
    rule_stats r4 = {0};
    p = mp_algebra_params_default();
    p.n_facts = 30; p.n_fixed = 2; p.seed = 9;
    p.fixed[0] = (mp_algebra_group){MP_ALGEBRA_Q8, 0};
    p.fixed[1] = (mp_algebra_group){MP_ALGEBRA_DIHEDRAL, 4};
    CHECK(algebra_run(&p, 100, &r4) == MP_OK, "%s", mp_last_error());
}

/* Group mixing statistics: the first group is always there; a second comes with
 * probability ~mix (when one fits); never more than 16 symbols; symbol 0 is used
 * (by non-identities) sometimes. */
static void test_algebra_mix(void) {
    mp_algebra_params p = mp_algebra_params_default();
    p.n_facts = 2; p.seed = 12;
    mp_algebra *a = NULL;
    CHECK(mp_algebra_new(&a, &p) == MP_OK, "%s", mp_last_error());
    enum { B = 2000 };
    int T = mp_algebra_seq_len(&p);
    int32_t *tok = malloc(sizeof *tok * B * T), *tgt = malloc(sizeof *tgt * B * T);
    mp_algebra_truth *tr = malloc(sizeof *tr * B);
    CHECK(mp_algebra_sample(a, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
    int multi = 0, sym0 = 0, fam[2] = {0};
    for (int i = 0; i < B; i++) {
        multi += tr[i].n_groups > 1;
        sym0 += tr[i].sym_group[0] >= 0;
        fam[tr[i].groups[0].family == MP_ALGEBRA_DIHEDRAL]++;
    }
    /* P(second group) = mix = 0.7 (a second group always fits after a first of
     * order <= 10 with 16 symbols); binomial sd = sqrt(.21/2000) = 0.01. */
    CHECK(fabs(multi / (double)B - 0.7) < 0.05, "second group with p ~ 0.7 (%.3f)", multi / (double)B);
    /* first group: 8 cyclic (C3..C10) vs 4 dihedral (D2..D5) families */
    CHECK(fabs(fam[1] / (double)B - 4.0 / 12) < 0.05, "dihedral share ~ 1/3 (%.3f)", fam[1] / (double)B);
    CHECK(sym0 > 0, "symbol 0 is used");
    free(tok); free(tgt); free(tr);
    mp_algebra_free(a);
}

/* pool = P: every sequence's context shows at most P distinct facts, and with
 * k >> P all P (coupon collector: P = 4, k = 40 leaves one unseen with
 * probability < 4 (3/4)^40 = 4e-5); the facts are still true products and the
 * rule labels still hold (check_algebra_batch). Without a pool, k = 40 facts of
 * groups with at least 9 facts show more than 4 distinct ones. With
 * pool_share = 0.3 the count of pooled sequences among B = 200 is
 * Binomial(200, 0.3): mean 60, sd 6.5; [30, 90] is about +-4.6 sd. */
static void test_algebra_pool(void) {
    mp_algebra_params p = mp_algebra_params_default();
    p.n_facts = 40; p.pool = 4; p.holdout = MP_ALGEBRA_HOLDOUT_NONE; p.target = MP_ALGEBRA_TARGET_ANSWERS; p.seed = 31;
    enum { B = 200 };
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) p.pool = 0;
        if (pass == 2) { p.pool = 4; p.pool_share = 0.3; }
        mp_algebra *a = NULL;
        CHECK(mp_algebra_new(&a, &p) == MP_OK, "%s", mp_last_error());
        if (!a) return;
        int T = mp_algebra_seq_len(&p);
        int32_t *tok = malloc(sizeof *tok * B * T), *tgt = malloc(sizeof *tgt * B * T);
        mp_algebra_truth *tr = malloc(sizeof *tr * B);
        CHECK(mp_algebra_sample(a, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
        rule_stats rs = {0};
        check_algebra_batch(&p, B, tok, tgt, tr, &rs);
        int exact = 0, over = 0;
        for (int s = 0; s < B; s++) {
            uint8_t seen[MP_ALGEBRA_N_SYMBOLS][MP_ALGEBRA_N_SYMBOLS] = {{0}};
            int distinct = 0;
            for (int i = 0; i < p.n_facts; i++) {
                const int32_t *f = tok + (size_t)s * T + 1 + 5 * i;
                if (!seen[f[1]][f[2]]) { seen[f[1]][f[2]] = 1; distinct++; }
            }
            exact += distinct == 4;
            over += distinct > 4;
        }
        if (pass == 0) CHECK(exact == B && over == 0, "pool 4: %d of %d sequences show exactly 4 distinct facts", exact, B);
        else if (pass == 1) CHECK(over == B, "no pool: %d of %d sequences show more than 4 distinct facts", over, B);
        else CHECK(exact >= 30 && exact <= 90 && exact + over == B,
                   "pool_share 0.3: %d of %d sequences pooled (expect 60 +- 30), %d not", exact, B, over);
        free(tok); free(tgt); free(tr);
        mp_algebra_free(a);
    }
    mp_algebra *a = NULL;
    p.pool_share = 1.5;
    CHECK(mp_algebra_new(&a, &p) == MP_ERR_ARG && strstr(mp_last_error(), "pool_share"),
          "pool_share > 1 rejected: %s", mp_last_error());
    p.pool_share = 1;
    p.pool = -1;
    CHECK(mp_algebra_new(&a, &p) == MP_ERR_ARG && strstr(mp_last_error(), "pool"), "pool < 0 rejected: %s",
          mp_last_error());
}

static void test_algebra_targeted(void) {
    struct { mp_algebra_holdout h; uint32_t req, exc; } cases[] = {
        {MP_ALGEBRA_HOLDOUT_NONE, MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY), 0},
        {MP_ALGEBRA_HOLDOUT_PAIR, MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COMMUTE), 0},
        {MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED, MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_IDENTITY), 0},
        {MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED, MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_CANCEL),
         MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_IDENTITY) | MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_ASSOCIATE)},
        {MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED, MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_ASSOCIATE),
         MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_IDENTITY) | MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_CANCEL)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mp_algebra_params p = mp_algebra_params_default();
        p.n_facts = 40; p.holdout = cases[i].h; p.require = cases[i].req; p.exclude = cases[i].exc;
        p.seed = 20 + i;
        rule_stats rs = {0};
        CHECK(algebra_run(&p, 40, &rs) == MP_OK, "targeted case %zu: %s", i, mp_last_error());
    }
    /* impossible requests */
    mp_algebra_params p = mp_algebra_params_default();
    mp_algebra *a = NULL;
    p.require = MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY);
    CHECK(mp_algebra_new(&a, &p) == MP_ERR_ARG && strstr(mp_last_error(), "holdout"),
          "copy with hold-out rejected: %s", mp_last_error());
    p.holdout = MP_ALGEBRA_HOLDOUT_NONE;
    p.exclude = p.require;
    CHECK(mp_algebra_new(&a, &p) == MP_ERR_ARG, "require & exclude overlap rejected");
    p = mp_algebra_params_default();
    p.n_facts = 0; p.require = MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_ASSOCIATE); p.max_attempts = 50;
    CHECK(mp_algebra_new(&a, &p) == MP_OK, "%s", mp_last_error());
    int32_t tok[5], tgt[5];
    CHECK(mp_algebra_sample(a, 1, 5, tok, tgt, NULL) == MP_ERR_ARG && strstr(mp_last_error(), "50 attempts"),
          "bounded attempts: %s", mp_last_error());
    CHECK(mp_algebra_sample(a, 1, 6, tok, tgt, NULL) == MP_ERR_ARG, "wrong T rejected");
    mp_algebra_free(a);
}

static void test_algebra_solvers(void) {
    /* a hand-made context in C4 with symbols e=1, r=2, r2=3, r3=4 */
    mp_algebra_context c;
    mp_algebra_context_clear(&c);
    c.table[2][1] = 2;      /* r e = r   -> e is an identity */
    c.table[2][2] = 3;      /* r r = r2 */
    c.table[3][2] = 4;      /* r2 r = r3 */
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_COPY, &c, 2, 2) == 3, "copy");
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_COMMUTE, &c, 2, 3) == 4, "commute");
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_COMMUTE, &c, 2, 2) == -1, "commute needs 'a b' absent");
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_IDENTITY, &c, 1, 4) == 4, "identity");
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_IDENTITY, &c, 3, 4) == -1, "identity n/a");
    /* r (r r) = (r r) r: form 1 with a=r, g=r, f=r2, d=r, query (r, r2) -> r3 */
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_ASSOCIATE, &c, 2, 3) == 4, "associate");
    /* cancel: closure {1,2,3,4}; query (r, r3): answers of "r x" (x != r3) = {r, r2} ... */
    c.table[2][3] = 4;      /* r r2 = r3 */
    c.table[4][4] = 3;      /* r3 r3 = r2 */
    /* query (r, r3): "r x" answers {2,3,4}; closure {1,2,3,4} -> 1 (= e: r r3 = e) */
    CHECK(mp_algebra_closure(&c, 2, 4) == 0x1e, "closure mask 0x%x", mp_algebra_closure(&c, 2, 4));
    CHECK(mp_algebra_solve(MP_ALGEBRA_RULE_CANCEL, &c, 2, 4) == 1, "cancel");
    int32_t bad[6] = {MP_ALGEBRA_TOK_BOS, MP_ALGEBRA_TOK_SEP, 1, 2, 7, 3};
    CHECK(mp_algebra_context_from_tokens(&c, bad, 1) == MP_ERR_ARG, "malformed fact rejected");
}

static void test_algebra_determinism(void) {
    mp_algebra_params p = mp_algebra_params_default();
    p.n_facts = 20;
    int T = mp_algebra_seq_len(&p);
    enum { B = 8 };
    int32_t *x[3], *y[3];
    mp_algebra_truth tr[3][B];
    for (int i = 0; i < 3; i++) {
        mp_algebra *a = NULL;
        p.seed = i == 2 ? 77 : 76;
        x[i] = malloc(sizeof(int32_t) * B * T);
        y[i] = malloc(sizeof(int32_t) * B * T);
        mp_algebra_new(&a, &p);
        CHECK(a && mp_algebra_sample(a, B, T, x[i], y[i], tr[i]) == MP_OK, "%s", mp_last_error());
        mp_algebra_free(a);
    }
    CHECK(memcmp(x[0], x[1], sizeof(int32_t) * B * T) == 0 && memcmp(y[0], y[1], sizeof(int32_t) * B * T) == 0 &&
          memcmp(tr[0], tr[1], sizeof tr[0]) == 0, "same seed, same bytes");
    CHECK(memcmp(x[0], x[2], sizeof(int32_t) * B * T) != 0, "different seed, different bytes");
    for (int i = 0; i < 3; i++) { free(x[i]); free(y[i]); }
}

/* ---------------------------------------------------------- text corpus */

static char tmpdir[64];

static const char *write_tmp(const char *name, const void *data, size_t n) {
    static char path[8][128];
    static int k = 0;
    char *p = path[k++ & 7];
    snprintf(p, 128, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    return p;
}

static void test_text(void) {
    enum { N = 3000 };
    static uint8_t buf[N];
    for (int i = 0; i < N; i++) buf[i] = (uint8_t)((i * 131 + i / 7) & 0xff);  /* every byte value */
    const char *path = write_tmp("corpus.txt", buf, N);
    for (int bos = 0; bos <= 1; bos++) {
        mp_text_params p = mp_text_params_default();
        p.path = path; p.val_fraction = 0.1; p.bos = bos; p.seed = 4;
        mp_text *t = NULL;
        CHECK(mp_text_load(&t, &p) == MP_OK, "%s", mp_last_error());
        if (!t) continue;
        CHECK(mp_text_split_len(t, MP_TEXT_VAL) == 300 && mp_text_split_len(t, MP_TEXT_TRAIN) == 2700 &&
              mp_text_split_offset(t, MP_TEXT_VAL) == 2700, "split sizes");
        enum { B = 32, T = 64 };
        int32_t tok[B * T], tgt[B * T];
        int64_t st[B];
        int bad = 0, outside = 0;
        for (int s = 0; s < 2; s++) {
            mp_text_split sp = s ? MP_TEXT_VAL : MP_TEXT_TRAIN;
            size_t lo = mp_text_split_offset(t, sp), hi = lo + mp_text_split_len(t, sp);
            CHECK(mp_text_sample(t, sp, B, T, tok, tgt, st) == MP_OK, "%s", mp_last_error());
            for (int b = 0; b < B; b++) {
                size_t need = T + (bos ? 0 : 1);
                if (st[b] < (int64_t)lo || (size_t)st[b] + need > hi) outside++;
                for (int i = 0; i < T; i++) {
                    int want_tok = bos ? (i == 0 ? MP_TEXT_BOS : buf[st[b] + i - 1]) : buf[st[b] + i];
                    int want_tgt = bos ? buf[st[b] + i] : buf[st[b] + i + 1];
                    if (tok[b * T + i] != want_tok || tgt[b * T + i] != want_tgt) bad++;
                }
            }
        }
        CHECK(bad == 0, "windows (bos=%d) come from the file (%d mismatches)", bos, bad);
        CHECK(outside == 0, "windows stay inside their split (%d outside)", outside);
        int32_t wt[8], wg[8];
        CHECK(mp_text_window(t, MP_TEXT_VAL, 0, 8, wt, wg) == MP_OK && wg[0] == buf[bos ? 2700 : 2701] &&
              wt[0] == (bos ? MP_TEXT_BOS : buf[2700]), "fixed window");
        CHECK(mp_text_window(t, MP_TEXT_VAL, 295, 8, wt, wg) == MP_ERR_ARG, "window past the end rejected");
        /* a window longer than the validation split: error names the file */
        CHECK(mp_text_sample(t, MP_TEXT_VAL, 1, 400, tok, tgt, NULL) == MP_ERR_ARG &&
              strstr(mp_last_error(), path) && strstr(mp_last_error(), "shorter"), "short split: %s", mp_last_error());
        mp_text_free(t);
    }
    /* determinism */
    mp_text_params p = mp_text_params_default();
    p.path = path;
    mp_text *a = NULL, *b = NULL, *c = NULL;
    mp_text_load(&a, &p); mp_text_load(&b, &p);
    p.seed = 2;
    mp_text_load(&c, &p);
    int64_t sa[16], sb[16], sc[16];
    int32_t tk[16 * 8], tg[16 * 8];
    mp_text_sample(a, MP_TEXT_TRAIN, 16, 8, tk, tg, sa);
    mp_text_sample(b, MP_TEXT_TRAIN, 16, 8, tk, tg, sb);
    mp_text_sample(c, MP_TEXT_TRAIN, 16, 8, tk, tg, sc);
    CHECK(memcmp(sa, sb, sizeof sa) == 0, "same seed, same windows");
    CHECK(memcmp(sa, sc, sizeof sa) != 0, "different seed, different windows");
    mp_text_free(a); mp_text_free(b); mp_text_free(c);
    /* errors name the file */
    mp_text *t = NULL;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no_such_file.txt", tmpdir);
    p = mp_text_params_default();
    p.path = missing;
    CHECK(mp_text_load(&t, &p) == MP_ERR_IO && strstr(mp_last_error(), missing), "missing: %s", mp_last_error());
    p.path = write_tmp("empty.txt", "", 0);
    CHECK(mp_text_load(&t, &p) == MP_ERR_FORMAT && strstr(mp_last_error(), p.path) && strstr(mp_last_error(), "empty"),
          "empty: %s", mp_last_error());
    p.path = write_tmp("short.txt", "hello", 5);
    CHECK(mp_text_load(&t, &p) == MP_OK, "%s", mp_last_error());
    int32_t x[16], y[16];
    CHECK(mp_text_sample(t, MP_TEXT_TRAIN, 1, 16, x, y, NULL) == MP_ERR_ARG && strstr(mp_last_error(), p.path),
          "too short: %s", mp_last_error());
    CHECK(mp_text_sample(t, MP_TEXT_VAL, 1, 1, x, y, NULL) == MP_ERR_ARG, "empty validation split rejected");
    mp_text_free(t);
}

/* ------------------------------------------------------------ retrieval */

/* The answer of a key-value / variable-tracking sequence, read off its tokens
 * alone: parse every needle "key k is v ." / "key k is key k' ." before the
 * query, look up the queried key, follow its links to a value. Returns the
 * number of links followed (-1: a key defined twice, a dangling link or a
 * cycle), the value in v; *n_needles, *bad_distractors (value needles other
 * than the answer's holding the answer's value), *dup_keys. */
static int resolve_answer(const int32_t *x, int qstart, int K, int L, const int32_t *qkey, int32_t *v,
                          int *n_needles, int *bad_distractors, int *dup_keys) {
    enum { MAXN = 4096 };
    static int at[MAXN];
    int n = 0;
    for (int i = 0; i + K + 2 < qstart && n < MAXN; i++)
        if (x[i] == MP_RETRIEVAL_KEY && x[i + 1 + K] == MP_RETRIEVAL_IS && (i == 0 || x[i - 1] != MP_RETRIEVAL_IS))
            at[n++] = i;
    *n_needles = n;
    *dup_keys = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (!memcmp(x + at[a] + 1, x + at[b] + 1, K * sizeof *x)) (*dup_keys)++;
    const int32_t *key = qkey;
    int hops = 0, found = -1;
    for (int step = 0; step <= n; step++) {
        found = -1;
        for (int a = 0; a < n; a++)
            if (!memcmp(x + at[a] + 1, key, K * sizeof *x)) { if (found >= 0) return -1; found = a; }
        if (found < 0) return -1;
        const int32_t *rhs = x + at[found] + K + 2;
        if (rhs[0] != MP_RETRIEVAL_KEY) break;
        key = rhs + 1;
        hops++;
    }
    if (found < 0 || x[at[found] + K + 2] == MP_RETRIEVAL_KEY) return -1;
    memcpy(v, x + at[found] + K + 2, (size_t)L * sizeof *v);
    *bad_distractors = 0;
    for (int a = 0; a < n; a++)
        if (a != found && x[at[a] + K + 2] != MP_RETRIEVAL_KEY && !memcmp(x + at[a] + K + 2, v, (size_t)L * sizeof *v))
            (*bad_distractors)++;
    return hops;
}

static void check_retrieval(const mp_retrieval_params *p, int B, int T, int32_t *tok, int32_t *tgt,
                            const mp_retrieval_truth *tr) {
    int V = mp_retrieval_vocab(p), L = p->value_len, K = p->key_len, kv = p->n_keys > 1 || p->hops > 0;
    int badanswer = 0, baddistract = 0, badneedles = 0;
    int bad = 0, badtgt = 0, badrange = 0, baddepth = 0, badkeys = 0;
    int F = T - mp_retrieval_min_len(p);
    for (int b = 0; b < B; b++) {
        const int32_t *x = tok + (size_t)b * T, *y = tgt + (size_t)b * T;
        const mp_retrieval_truth *t = tr + b;
        for (int i = 0; i < T; i++) if (x[i] < 0 || x[i] >= V) badrange++;
        if (p->bos && x[0] != MP_RETRIEVAL_BOS) bad++;
        if (t->answer_pos != T - L) bad++;
        for (int d = 0; d < L; d++) {
            if (x[t->answer_pos + d] != t->value[d] || x[t->value_pos + d] != t->value[d]) bad++;
            if (t->value[d] < 0 || t->value[d] > 9) bad++;
        }
        if (x[t->answer_pos - 1] != MP_RETRIEVAL_QMARK || x[t->value_pos - 1] != MP_RETRIEVAL_IS ||
            x[t->value_pos + L] != MP_RETRIEVAL_DOT) bad++;
        if (kv) {
            /* the answer is determined by the tokens: the queried key's chain of
             * hops links ends at the value; no other needle holds that value */
            int32_t v[MP_RETRIEVAL_MAX_DIGITS];
            int nn = 0, nd = 0, dk = 0;
            int h = resolve_answer(x, t->answer_pos - K - 4, K, L, t->key, v, &nn, &nd, &dk);
            if (h != p->hops || memcmp(v, t->value, (size_t)L * sizeof *v)) badanswer++;
            if (nd) baddistract++;
            if (nn != p->n_keys * (1 + p->hops) || dk) badneedles++;
            if (x[t->needle_pos] != MP_RETRIEVAL_KEY) bad++;
            for (int d = 0; d < K; d++)
                if ((p->hops == 0 && x[t->needle_pos + 1 + d] != t->key[d]) || x[t->answer_pos - 1 - K + d] != t->key[d])
                    bad++;
            /* each key appears in exactly one needle: count "key k1..kK is" matches of the query key */
            int matches = 0;
            for (int i = 0; i + K + 1 < t->answer_pos - K - 4; i++)
                if (x[i] == MP_RETRIEVAL_KEY && !memcmp(x + i + 1, t->key, K * sizeof *x) && x[i + 1 + K] == MP_RETRIEVAL_IS)
                    matches++;
            if (matches != 1) badkeys++;
        } else if (x[t->needle_pos] != MP_RETRIEVAL_THE || x[t->needle_pos + 1] != MP_RETRIEVAL_PASS ||
                   x[t->needle_pos + 2] != MP_RETRIEVAL_KEY) bad++;
        for (int i = 0; i < T; i++) {
            int want = i + 1 >= t->answer_pos && i + 1 < T ? x[i + 1] : -1;
            if (y[i] != want) badtgt++;
        }
        if (p->depth >= 0 && fabs(t->depth - p->depth) > 0.5 / (F > 0 ? F : 1) + 1e-12) baddepth++;
        if (!kv && t->needle_pos != p->bos + (int)lround(t->depth * F)) baddepth++;
    }
    CHECK(bad == 0, "%d layout errors (answer/needle positions hold the value)", bad);
    CHECK(badtgt == 0, "%d target errors", badtgt);
    CHECK(badrange == 0, "%d tokens outside the vocabulary", badrange);
    CHECK(baddepth == 0, "%d depth errors", baddepth);
    CHECK(badkeys == 0, "%d queried keys not found exactly once", badkeys);
    CHECK(badanswer == 0, "%d answers not determined by the needles (hops %d)", badanswer, p->hops);
    CHECK(baddistract == 0, "%d sequences with a distractor holding the answer", baddistract);
    CHECK(badneedles == 0, "%d sequences with a wrong needle count or repeated keys", badneedles);
}

static void test_retrieval(void) {
    enum { B = 16, T = 300 };
    static int32_t tok[B * T], tgt[B * T], tok2[B * T], tgt2[B * T];
    mp_retrieval_truth tr[B], tr2[B];
    mp_retrieval_params p = mp_retrieval_params_default();
    mp_retrieval *r = NULL;
    CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
    CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
    check_retrieval(&p, B, T, tok, tgt, tr);
    int min = mp_retrieval_min_len(&p);
    CHECK(min == 1 + 10 + 11, "passkey min length %d", min);
    CHECK(mp_retrieval_sample(r, 1, min - 1, tok, tgt, tr) == MP_ERR_ARG, "too short rejected");
    CHECK(mp_retrieval_sample(r, 2, min, tok, tgt, tr) == MP_OK, "min length ok");
    check_retrieval(&p, 2, min, tok, tgt, tr);
    mp_retrieval_free(r);

    /* determinism */
    mp_retrieval *r1 = NULL, *r2 = NULL;
    mp_retrieval_new(&r1, &p); mp_retrieval_new(&r2, &p);
    mp_retrieval_sample(r1, B, T, tok, tgt, tr);
    mp_retrieval_sample(r2, B, T, tok2, tgt2, tr2);
    CHECK(memcmp(tok, tok2, sizeof tok) == 0 && memcmp(tr, tr2, sizeof tr) == 0, "same seed, same bytes");
    mp_retrieval_seed(r2, 1234);
    mp_retrieval_sample(r2, B, T, tok2, tgt2, tr2);
    CHECK(memcmp(tok, tok2, sizeof tok) != 0, "different seed, different bytes");
    mp_retrieval_free(r1); mp_retrieval_free(r2);

    /* fixed depths, repeated filler */
    double depths[] = {0.0, 0.25, 0.5, 1.0};
    for (int i = 0; i < 4; i++) {
        p = mp_retrieval_params_default();
        p.depth = depths[i]; p.filler = MP_RETRIEVAL_FILLER_REPEAT; p.bos = i & 1;
        CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
        CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
        check_retrieval(&p, B, T, tok, tgt, tr);
        mp_retrieval_free(r);
    }
    /* key-value mode */
    p = mp_retrieval_params_default();
    p.n_keys = 8; p.key_len = 2; p.value_len = 3; p.depth = 0.3;
    CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
    CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
    check_retrieval(&p, B, T, tok, tgt, tr);
    mp_retrieval_free(r);
    /* distractor values never equal the answer: 1-digit values, 8 needles
     * (uniform values would collide in most sequences) */
    p.value_len = 1;
    CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
    CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
    check_retrieval(&p, B, T, tok, tgt, tr);
    mp_retrieval_free(r);
    /* variable tracking: chains of 1..3 links, distractor chains, in order */
    for (int h = 1; h <= 3; h++) {
        p = mp_retrieval_params_default();
        p.n_keys = 3; p.hops = h; p.key_len = 2; p.value_len = 1 + h % 2;
        CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
        CHECK(mp_retrieval_min_len(&p) == 1 + 3 * ((2 + p.value_len + 3) + h * 8) + (3 + 2 + 1 + p.value_len),
              "variable tracking min length %d", mp_retrieval_min_len(&p));
        CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
        check_retrieval(&p, B, T, tok, tgt, tr);
        /* the queried chain in order: each link after the key it names */
        int badorder = 0;
        for (int b = 0; b < B; b++) {
            const int32_t *x = tok + (size_t)b * T;
            const int32_t *key = tr[b].key;
            int prev_pos = T;
            for (int step = 0; step <= h; step++) {
                int at = -1;
                for (int i = 0; i + 3 < tr[b].answer_pos - 6; i++)
                    if (x[i] == MP_RETRIEVAL_KEY && x[i + 3] == MP_RETRIEVAL_IS && x[i + 1] == key[0] && x[i + 2] == key[1] &&
                        (i == 0 || x[i - 1] != MP_RETRIEVAL_IS)) at = i;
                if (at < 0 || at >= prev_pos) badorder++;
                prev_pos = at < 0 ? 0 : at;
                key = x + at + 5;
            }
            if (prev_pos != tr[b].needle_pos) badorder++;
        }
        CHECK(badorder == 0, "hops %d: %d chain order errors", h, badorder);
        mp_retrieval_free(r);
    }
    p = mp_retrieval_params_default();
    p.hops = 2; p.depth = 0.5;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "depth"), "hops with a fixed depth rejected");
    p.depth = -1; p.hops = 65;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "hops"), "hops 65 rejected");
    p.hops = 9; p.n_keys = 10; p.key_len = 2;
    CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());   /* 100 needles, 100 2-digit keys */
    mp_retrieval_free(r);
    p.n_keys = 11;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG, "110 distinct 2-digit keys rejected");
    p = mp_retrieval_params_default();
    p.n_keys = 200; p.key_len = 2;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG, "200 distinct 2-digit keys rejected");
    char nb[16];
    CHECK(strcmp(mp_retrieval_token_name(&p, MP_RETRIEVAL_QMARK, nb), "?") == 0 &&
          strcmp(mp_retrieval_token_name(&p, MP_RETRIEVAL_FILLER0 + 3, nb), "f3") == 0, "token names");

    /* key symbols: the keys are made of their own tokens after the filler
     * words (never digits), the layout and answers as with digit keys, in
     * key-value and variable-tracking mode */
    for (int h = 0; h <= 2; h += 2) {
        p = mp_retrieval_params_default();
        p.n_keys = 4; p.hops = h; p.key_len = 1 + h / 2; p.key_symbols = 12; p.value_len = 2; p.n_filler = 16;
        CHECK(mp_retrieval_vocab(&p) == 18 + 16 + 12, "vocab with key symbols %d", mp_retrieval_vocab(&p));
        CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
        CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
        check_retrieval(&p, B, T, tok, tgt, tr);
        int badsym = 0, nkeytok = 0;
        for (int b = 0; b < B; b++) {
            const int32_t *x = tok + (size_t)b * T;
            for (int d = 0; d < p.key_len; d++)
                if (tr[b].key[d] < 18 + 16 || tr[b].key[d] >= 18 + 16 + 12) badsym++;
            for (int i = 0; i + 1 < T; i++) {
                if (x[i] != MP_RETRIEVAL_KEY) continue;
                for (int d = 0; d < p.key_len; d++) {
                    nkeytok++;
                    if (x[i + 1 + d] < 18 + 16) badsym++;
                }
            }
            for (int i = 0; i < T; i++)   /* key symbols only right after "key" */
                if (x[i] >= 18 + 16 && !(i >= 1 && x[i - 1] == MP_RETRIEVAL_KEY) &&
                    !(i >= 2 && x[i - 2] == MP_RETRIEVAL_KEY && p.key_len == 2)) badsym++;
        }
        CHECK(badsym == 0 && nkeytok > 0, "hops %d: %d key tokens outside the key symbols (%d seen)", h, badsym, nkeytok);
        mp_retrieval_free(r);
    }
    CHECK(strcmp(mp_retrieval_token_name(&p, 18 + 16 + 3, nb), "k3") == 0 &&
          strcmp(mp_retrieval_token_name(&p, 18 + 15, nb), "f15") == 0, "key symbol names");
    p.n_keys = 5; p.hops = 0; p.key_len = 1; p.key_symbols = 4;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "4 key symbols"),
          "5 keys of 1 of 4 symbols rejected: %s", mp_last_error());
    p.key_symbols = 5;
    CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
    mp_retrieval_free(r);
    p.n_keys = 1;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "key_symbols"), "passkey with key symbols");
    p.n_keys = 2; p.key_symbols = -1;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "key_symbols"), "negative key symbols");
}

/* n_queries > 1: the earlier queries ask random chains (the queried one
 * included, with repetition), their answers (read off the needles alone) are
 * targets, and the last answer is not given away: over many sequences an
 * earlier query asks the last query's chain about 1 time in n_keys; the rest
 * of the sequence is a valid q = 1 sequence (check_retrieval, with those
 * targets masked). */
static void test_retrieval_queries(void) {
    enum { B = 16, T = 220 };
    int32_t tok[B * T], tgt[B * T];
    mp_retrieval_truth tr[B];
    for (int kind = 0; kind < 2; kind++) {
        mp_retrieval_params p = mp_retrieval_params_default();
        p.n_keys = 4;
        p.key_len = 2;
        p.value_len = 2;
        p.hops = kind ? 2 : 0;
        const int base = mp_retrieval_min_len(&p), K = p.key_len, L = p.value_len;
        p.n_queries = 3;
        CHECK(mp_retrieval_min_len(&p) == base + 2 * (K + 5 + L), "%s: min length %d with 3 queries (base %d)",
              kind ? "vartrack" : "multikey", mp_retrieval_min_len(&p), base);
        mp_retrieval *r = NULL;
        CHECK(mp_retrieval_new(&r, &p) == MP_OK, "%s", mp_last_error());
        CHECK(mp_retrieval_sample(r, B, T, tok, tgt, tr) == MP_OK, "%s", mp_last_error());
        int badq = 0, badans = 0, badtgt = 0, n_tgt = 0, same = 0;
        for (int b = 0; b < B; b++) {
            const int32_t *x = tok + (size_t)b * T;
            int32_t *y = tgt + (size_t)b * T;
            const int qfinal = tr[b].answer_pos - K - 4;
            int w[8], nw = 0;
            for (int i = 0; i < qfinal; i++)
                if (x[i] == MP_RETRIEVAL_WHAT && nw < 8) w[nw++] = i;
            if (nw != 2) { badq++; continue; }
            for (int i = 0; i < T; i++) n_tgt += y[i] >= 0;
            for (int q = 0; q < nw; q++) {
                const int32_t *z = x + w[q] + 3, *v = x + w[q] + K + 4;
                if (x[w[q] + 1] != MP_RETRIEVAL_IS || x[w[q] + 2] != MP_RETRIEVAL_KEY || x[w[q] + K + 3] != MP_RETRIEVAL_QMARK ||
                    x[w[q] + K + 4 + L] != MP_RETRIEVAL_DOT) badq++;
                same += !memcmp(z, tr[b].key, K * sizeof *z);
                int32_t got[MP_RETRIEVAL_MAX_DIGITS];
                int nn = 0, nd = 0, dk = 0;
                if (resolve_answer(x, w[0], K, L, z, got, &nn, &nd, &dk) != p.hops || memcmp(got, v, (size_t)L * sizeof *v))
                    badans++;
                for (int d = 0; d < L; d++) {
                    if (y[w[q] + K + 3 + d] != v[d]) badtgt++;
                    y[w[q] + K + 3 + d] = -1; /* masked: the rest is checked as a one-query sequence */
                }
            }
        }
        CHECK(badq == 0, "%d malformed or repeated earlier queries", badq);
        CHECK(badans == 0, "%d earlier answers not the value their key's chain ends at", badans);
        CHECK(badtgt == 0, "%d earlier answers not targets", badtgt);
        CHECK(n_tgt == B * 3 * L, "%d targets, want %d (3 answers of %d digits a sequence)", n_tgt, B * 3 * L, L);
        /* 32 earlier queries; each asks the last query's chain with probability
         * 1/4: 8 expected, 1..18 holds with probability > 0.999 */
        CHECK(same >= 1 && same <= 18, "%d of %d earlier queries ask the last query's key (expected about 8)", same, 2 * B);
        check_retrieval(&p, B, T, tok, tgt, tr);
        mp_retrieval_free(r);
    }
    mp_retrieval_params p = mp_retrieval_params_default();
    mp_retrieval *r = NULL;
    p.n_queries = 2;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "needs keys"), "passkey with 2 queries: %s",
          mp_last_error());
    p.n_keys = 4;
    p.n_queries = 65;
    CHECK(mp_retrieval_new(&r, &p) == MP_ERR_ARG && strstr(mp_last_error(), "n_queries"), "65 queries: %s",
          mp_last_error());
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_tasks_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_mtd_pi_and_params();
    test_mtd_m1_transitions();
    test_mtd_mixture();
    test_mtd_determinism();
    test_algebra_groups();
    test_algebra_solvers();
    test_algebra_sequences();
    test_algebra_mix();
    test_algebra_targeted();
    test_algebra_pool();
    test_algebra_determinism();
    test_text();
    test_retrieval();
    test_retrieval_queries();
    const char *names[] = {"corpus.txt", "empty.txt", "short.txt"};
    for (int i = 0; i < 3; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    return tu_finish("test_tasks");
}
