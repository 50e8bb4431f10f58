/* algebra_rules.c — the in-context rules of the algebra task (copy, commute,
 * identity, cancel, associate): what a context of facts says, and a solver per
 * rule that answers a query from the context alone (definitions in algebra.h). */
#include "algebra.h"

#include <string.h>

#define NS MP_ALGEBRA_N_SYMBOLS

static const char *rule_names[MP_ALGEBRA_N_RULES] = {
    "copy", "commute", "identity", "cancel", "associate"};

const char *mp_algebra_rule_name(mp_algebra_rule r) {
    return (int)r >= 0 && r < MP_ALGEBRA_N_RULES ? rule_names[r] : NULL;
}

int mp_algebra_rule_parse(const char *name) {
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        if (name && strcmp(name, rule_names[r]) == 0) return r;
    return -1;
}

void mp_algebra_context_clear(mp_algebra_context *ctx) {
    memset(ctx->table, -1, sizeof ctx->table);
}

static int is_sym(int32_t t) { return t >= 0 && t < NS; }

mp_status mp_algebra_context_from_tokens(mp_algebra_context *ctx, const int32_t *tokens,
                                         int n_facts) {
    mp_algebra_context_clear(ctx);
    if (n_facts < 0) return mp_error(MP_ERR_ARG, "algebra: negative fact count %d", n_facts);
    if (tokens[0] != MP_ALGEBRA_TOK_BOS)
        return mp_error(MP_ERR_ARG, "algebra: sequence does not start with '^' (token %d)", (int)tokens[0]);
    for (int i = 0; i < n_facts; i++) {
        const int32_t *f = tokens + 1 + 5 * (size_t)i;
        if (f[0] != MP_ALGEBRA_TOK_SEP || !is_sym(f[1]) || !is_sym(f[2]) ||
            f[3] != MP_ALGEBRA_TOK_EQ || !is_sym(f[4]))
            return mp_error(MP_ERR_ARG, "algebra: fact %d (tokens %d..%d) is not \", a b = c\"",
                            i, 1 + 5 * i, 5 + 5 * i);
        int8_t *cell = &ctx->table[f[1]][f[2]];
        if (*cell >= 0 && *cell != f[4])
            return mp_error(MP_ERR_ARG, "algebra: fact %d says %d %d = %d but an earlier fact says %d",
                            i, (int)f[1], (int)f[2], (int)f[4], (int)*cell);
        *cell = (int8_t)f[4];
    }
    return MP_OK;
}

/* Union-find over the 16 symbols. */
static int uf_find(int *p, int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
}
static void uf_union(int *p, int x, int y) { p[uf_find(p, x)] = uf_find(p, y); }

uint32_t mp_algebra_closure(const mp_algebra_context *ctx, int a, int b) {
    int p[NS];
    for (int i = 0; i < NS; i++) p[i] = i;
    uf_union(p, a, b);
    for (int x = 0; x < NS; x++)
        for (int y = 0; y < NS; y++) {
            int c = ctx->table[x][y];
            if (c < 0) continue;
            uf_union(p, x, y);
            uf_union(p, x, c);
        }
    uint32_t mask = 0;
    int ra = uf_find(p, a);
    for (int s = 0; s < NS; s++)
        if (uf_find(p, s) == ra) mask |= 1u << s;
    return mask;
}

static int solve_identity(const mp_algebra_context *ctx, int a, int b) {
    uint32_t ids = 0;
    for (int x = 0; x < NS; x++)
        for (int y = 0; y < NS; y++) {
            int c = ctx->table[x][y];
            if (c < 0) continue;
            if (c == x) ids |= 1u << y;   /* x y = x: y is an identity */
            if (c == y) ids |= 1u << x;   /* x y = y: x is an identity */
        }
    if (ids & (1u << a)) return b;
    if (ids & (1u << b)) return a;
    return -1;
}

static int solve_cancel(const mp_algebra_context *ctx, int a, int b) {
    uint32_t closure = mp_algebra_closure(ctx, a, b), seen = 0;
    for (int x = 0; x < NS; x++) {
        if (x != b && ctx->table[a][x] >= 0) seen |= 1u << ctx->table[a][x];
        if (x != a && ctx->table[x][b] >= 0) seen |= 1u << ctx->table[x][b];
    }
    uint32_t left = closure & ~seen;
    if (left == 0 || (left & (left - 1))) return -1;  /* not exactly one */
    return __builtin_ctz(left);
}

static int is_pair(int x, int y, int a, int b) { return x == a && y == b; }

static int solve_associate(const mp_algebra_context *ctx, int a, int b) {
    const int8_t (*T)[NS] = ctx->table;
    /* form 1: a g = f, g d = b, f d = c */
    for (int g = 0; g < NS; g++) {
        int f = T[a][g];
        if (f < 0 || g == b) continue;
        for (int d = 0; d < NS; d++) {
            if (T[g][d] != b || is_pair(g, d, a, b)) continue;
            int c = T[f][d];
            if (c >= 0 && !is_pair(f, d, a, b)) return c;
        }
    }
    /* form 2: g d = a, d b = f, g f = c */
    for (int g = 0; g < NS; g++)
        for (int d = 0; d < NS; d++) {
            if (T[g][d] != a || is_pair(g, d, a, b) || d == a) continue;
            int f = T[d][b];
            if (f < 0) continue;
            int c = T[g][f];
            if (c >= 0 && !is_pair(g, f, a, b)) return c;
        }
    return -1;
}

int mp_algebra_solve(mp_algebra_rule rule, const mp_algebra_context *ctx, int a, int b) {
    if (!is_sym(a) || !is_sym(b)) return -1;
    switch (rule) {
    case MP_ALGEBRA_RULE_COPY: return ctx->table[a][b];
    case MP_ALGEBRA_RULE_COMMUTE: return ctx->table[a][b] < 0 ? ctx->table[b][a] : -1;
    case MP_ALGEBRA_RULE_IDENTITY: return solve_identity(ctx, a, b);
    case MP_ALGEBRA_RULE_CANCEL: return solve_cancel(ctx, a, b);
    case MP_ALGEBRA_RULE_ASSOCIATE: return solve_associate(ctx, a, b);
    default: return -1;
    }
}

uint32_t mp_algebra_rules(const mp_algebra_context *ctx, int a, int b, int answer) {
    uint32_t mask = 0;
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++) {
        int s = mp_algebra_solve((mp_algebra_rule)r, ctx, a, b);
        if (s >= 0 && s == answer) mask |= MP_ALGEBRA_BIT(r);
    }
    return mask;
}
