/* algebra.h — in-context algebra ("mixrosette", after Todd et al., "In-Context
 * Algebra", ICLR 2026): sequences of products "a b = c" between variable
 * symbols whose meaning (which group element they stand for) is re-drawn for
 * every sequence, with the ground truth needed to test mechanisms: the groups,
 * the symbol assignment, and which in-context rules solve the final query.
 *
 * Vocabulary (19 tokens): symbols 0..15, '=' 16, '^' 17 (start / pad), ',' 18.
 *
 * Groups. Elements are 0..order-1 and element 0 is the identity in every family:
 *   C_n  (n = 3..10 in training)  x*y = (x + y) mod n
 *   D_n  (n = 2..5, order 2n)     element i + n*j stands for r^i s^j (i < n,
 *        j < 2); (r^i s^j)(r^k s^l) = r^(i + (-1)^j k) s^(j+l). D_2 is the Klein
 *        four-group.
 *   held-out test families (order 8):
 *   Q8        element 4*s + u stands for (-1)^s * {1, i, j, k}[u]
 *   C2xC4     element 4*a + b stands for (a, b), componentwise addition
 *   C2xC2xC2  element bits, x*y = x XOR y
 *
 * A sequence. Groups are drawn as in the reference "mixrosette" task: the first
 * group uniformly among the families that fit (C_3..C_M and D_2..D_{M/2} with
 * M = min(max_order, symbols left)); after each group another is added with
 * probability `mix` while one still fits in the 16 symbols. (test_groups: the
 * same, drawing from {Q8, C2xC4, C2xC2xC2}.) The elements of all chosen groups
 * get distinct symbols by a fresh uniformly random injection (gsl_ran_choose +
 * gsl_ran_shuffle), redrawn while any identity element would get symbol 0.
 * The facts are the union of the groups' Cayley tables (products only within a
 * group). The final query (a, b) is drawn uniformly from all facts; the k
 * context facts are drawn uniformly with replacement from the facts minus the
 * held-out ones (holdout: none / the query pair / the pair and its commuted
 * pair (b, a)). Layout of the full stream (length 5k + 6):
 *
 *     ^ , a1 b1 = c1 , a2 b2 = c2 ... , ak bk = ck , a b = c
 *
 * tokens[t] = stream[t] for t < T = 5(k+1) (the stream minus its last token),
 * targets[t] = stream[t+1] where the target mode keeps it, else -1:
 *   ALL     every position (next-token prediction, as the reference trains)
 *   ANSWERS the '=' positions 4 + 5i (i = 0..k) -> c_i
 *   LAST    only the final '=' (t = T-1) -> c, the held-out answer
 *
 * In-context rules for a query (a, b) given the context facts (each rule has a
 * solver, mp_algebra_solve, returning a symbol or -1 when it does not apply; a
 * sample's query satisfies a rule when its solver returns the true answer):
 *   COPY      the fact "a b = c" is in the context -> c.
 *   COMMUTE   "a b" is absent and "b a = c" is present -> c (a heuristic: right
 *             only when a and b commute, which the predicate requires).
 *   IDENTITY  some context fact "x y = x" (y is an identity) or "x y = y" (x is
 *             an identity) exposes an identity e, and e is a or b -> the other
 *             one (b if a = e, else a). Always right in a group.
 *   CANCEL    closure minus answers: C = the symbols connected to a in the
 *             context's co-occurrence graph (the three symbols of each fact are
 *             linked, and a is linked to b), i.e. the query group's symbols seen
 *             in context; A = the answers of context facts "a x = ." with x != b
 *             and of context facts "x b = ." with x != a, none of which can be a*b
 *             (cancellation law). If C \ A is a single symbol -> it. Always right
 *             when C is the whole group (every symbol of the group seen).
 *   ASSOCIATE a derivation from three context facts by associativity, as in the
 *             reference's associative triplets (facts using the pair "a b"
 *             itself are not used):
 *               form 1: a g = f, g d = b, f d = c  =>  a b = a(g d) = (a g)d = c
 *               form 2: g d = a, d b = f, g f = c  =>  a b = (g d)b = g(d b) = c
 *             the first derivation found (g, then d, ascending) -> c. Always right.
 * The generator can resample whole sequences until the final query satisfies
 * every rule in `require` and none in `exclude` (at most max_attempts draws,
 * then MP_ERR_ARG). COPY needs holdout NONE and COMMUTE holdout != PAIR_COMMUTED
 * (requesting them otherwise is an MP_ERR_ARG at init). */
#ifndef MP_ALGEBRA_H
#define MP_ALGEBRA_H

#include <stdint.h>

#include "mp_common.h"

#define MP_ALGEBRA_N_SYMBOLS 16
#define MP_ALGEBRA_TOK_EQ 16   /* '=' */
#define MP_ALGEBRA_TOK_BOS 17  /* '^' start of sequence, also padding */
#define MP_ALGEBRA_TOK_SEP 18  /* ',' */
#define MP_ALGEBRA_VOCAB 19
#define MP_ALGEBRA_MAX_GROUPS 5   /* 16 symbols, order >= 3 each */
#define MP_ALGEBRA_MAX_ORDER 16
#define MP_ALGEBRA_IDENTITY 0     /* element 0 is the identity of every group */

typedef enum {
    MP_ALGEBRA_CYCLIC = 0,   /* C_n, order n */
    MP_ALGEBRA_DIHEDRAL,     /* D_n, order 2n */
    MP_ALGEBRA_Q8,           /* quaternion group, order 8 */
    MP_ALGEBRA_C2XC4,        /* order 8 */
    MP_ALGEBRA_C2XC2XC2      /* order 8 */
} mp_algebra_family;

typedef struct {
    mp_algebra_family family;
    int n;                   /* C_n / D_n parameter; ignored by the order-8 families */
} mp_algebra_group;

/* Order of g, or 0 when g is not a supported group (C_n n=1..16, D_n n=1..8). */
int mp_algebra_group_order(mp_algebra_group g);
/* x*y for elements x, y in 0..order-1. */
int mp_algebra_group_mul(mp_algebra_group g, int x, int y);
/* "C5", "D4", "Q8", "C2xC4", "C2xC2xC2" into buf (>= 16 bytes); returns buf. */
const char *mp_algebra_group_name(mp_algebra_group g, char *buf);

typedef enum {
    MP_ALGEBRA_RULE_COPY = 0,
    MP_ALGEBRA_RULE_COMMUTE,
    MP_ALGEBRA_RULE_IDENTITY,
    MP_ALGEBRA_RULE_CANCEL,
    MP_ALGEBRA_RULE_ASSOCIATE,
    MP_ALGEBRA_N_RULES
} mp_algebra_rule;

#define MP_ALGEBRA_BIT(rule) (1u << (rule))

/* "copy", "commute", "identity", "cancel", "associate"; NULL if out of range. */
const char *mp_algebra_rule_name(mp_algebra_rule r);
/* The rule with that name, or -1. */
int mp_algebra_rule_parse(const char *name);

typedef enum {
    MP_ALGEBRA_HOLDOUT_NONE = 0,      /* the query pair may also appear in the context */
    MP_ALGEBRA_HOLDOUT_PAIR,          /* "a b" never appears in the context */
    MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED  /* neither "a b" nor "b a" appears */
} mp_algebra_holdout;

typedef enum {
    MP_ALGEBRA_TARGET_ALL = 0,
    MP_ALGEBRA_TARGET_ANSWERS,
    MP_ALGEBRA_TARGET_LAST
} mp_algebra_target;

typedef struct {
    int n_facts;                  /* k context facts; T = 5 * (k + 1) */
    double mix;                   /* probability of adding another group */
    int max_order;                /* largest group order drawn (3..16) */
    int test_groups;              /* 1: draw from Q8, C2xC4, C2xC2xC2 instead */
    int n_fixed;                  /* > 0: always use fixed[0..n_fixed-1] */
    mp_algebra_group fixed[MP_ALGEBRA_MAX_GROUPS];
    mp_algebra_holdout holdout;
    mp_algebra_target target;
    uint32_t require, exclude;    /* MP_ALGEBRA_BIT masks of the final query's rules */
    int max_attempts;             /* bound on resampling for require/exclude */
    int pool;                     /* > 0: the context facts are drawn from `pool` distinct
                                   * facts (a random subset), so that facts repeat often;
                                   * 0: from all of them. A training curriculum for copying. */
    double pool_share;            /* share of the sequences that use the pool (default 1);
                                   * the others draw from all facts, so a last stage can keep
                                   * some repeated contexts next to the natural ones */
    uint64_t seed;
} mp_algebra_params;

/* Ground truth of one sample. */
typedef struct {
    int n_groups;
    mp_algebra_group groups[MP_ALGEBRA_MAX_GROUPS];
    int8_t symbol[MP_ALGEBRA_MAX_GROUPS][MP_ALGEBRA_MAX_ORDER]; /* element -> symbol, -1 past order */
    int8_t sym_group[MP_ALGEBRA_N_SYMBOLS];  /* symbol -> group index, -1 if unused */
    int8_t sym_elem[MP_ALGEBRA_N_SYMBOLS];   /* symbol -> element, -1 if unused */
    int query_group;                         /* group index of the final query */
    int query_a, query_b, answer;            /* symbols of the final query */
    uint32_t rules;                          /* MP_ALGEBRA_BIT(rule) for each rule satisfied */
    int8_t solved[MP_ALGEBRA_N_RULES];       /* each solver's output (-1: not applicable) */
    int attempts;                            /* sequences drawn to satisfy require/exclude */
} mp_algebra_truth;

/* What the context says: table[a][b] = c for every context fact "a b = c",
 * -1 where the pair was not shown. */
typedef struct {
    int8_t table[MP_ALGEBRA_N_SYMBOLS][MP_ALGEBRA_N_SYMBOLS];
} mp_algebra_context;

typedef struct mp_algebra mp_algebra;

/* k = 200 (the reference's k_shots), mix 0.7, max_order 10, training families,
 * holdout PAIR_COMMUTED, target ALL, no require/exclude, 10000 attempts, seed 1. */
mp_algebra_params mp_algebra_params_default(void);
/* Token count T = 5 * (n_facts + 1) of a sample. */
int mp_algebra_seq_len(const mp_algebra_params *p);

mp_status mp_algebra_new(mp_algebra **out, const mp_algebra_params *p);
void mp_algebra_free(mp_algebra *a);  /* NULL-safe */
void mp_algebra_seed(mp_algebra *a, uint64_t seed);  /* restart the sample stream */
const mp_algebra_params *mp_algebra_get_params(const mp_algebra *a);

/* Samples B sequences: tokens, targets int32 [B, T] with T == mp_algebra_seq_len;
 * truth [B] or NULL. MP_ERR_ARG on a wrong T or when require/exclude cannot be met
 * within max_attempts draws. */
mp_status mp_algebra_sample(mp_algebra *a, int B, int T, int32_t *tokens, int32_t *targets,
                            mp_algebra_truth *truth);

/* ---- in-context rules ---- */
void mp_algebra_context_clear(mp_algebra_context *ctx);
/* Reads the first n_facts facts of a sequence laid out as above (tokens[0] = '^',
 * fact i at 1 + 5i); MP_ERR_ARG when the layout is wrong or two facts disagree. */
mp_status mp_algebra_context_from_tokens(mp_algebra_context *ctx, const int32_t *tokens,
                                         int n_facts);
/* The rule's answer for the query (a, b), or -1 when it does not apply. */
int mp_algebra_solve(mp_algebra_rule rule, const mp_algebra_context *ctx, int a, int b);
/* Bitmask of the rules whose solver returns `answer` for (a, b). */
uint32_t mp_algebra_rules(const mp_algebra_context *ctx, int a, int b, int answer);
/* The closure C of the CANCEL rule as a bitmask of symbols. */
uint32_t mp_algebra_closure(const mp_algebra_context *ctx, int a, int b);

#endif
