/* ltasks_algebra.c — Lua binding of the in-context algebra task
 * (mp.tasks.algebra, "mechprobe.AlgebraTask") and its solvers
 * (mp.tasks.algebra_solve / algebra_rules); the common plumbing is in ltasks.c. */
#include "ltasks.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algebra.h"

static const char *const alg_holdouts[] = {"none", "pair", "commuted", NULL};
static const char *const alg_targets[] = {"all", "answers", "last", NULL};

static void alg_free(void *h) { mp_algebra_free(h); }

/* "copy|identity" (or "none") into buf. */
static void rules_str(uint32_t mask, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        if (mask & MP_ALGEBRA_BIT(r))
            len += (size_t)snprintf(buf + len, n > len ? n - len : 0, "%s%s", len ? "|" : "",
                                    mp_algebra_rule_name((mp_algebra_rule)r));
    if (!len) snprintf(buf, n, "none");
}

static void push_rule_list(lua_State *L, uint32_t mask) {
    lua_newtable(L);
    int i = 0;
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        if (mask & MP_ALGEBRA_BIT(r)) {
            lua_pushstring(L, mp_algebra_rule_name((mp_algebra_rule)r));
            lua_rawseti(L, -2, ++i);
        }
}

static void alg_push_params(lua_State *L, const mp_algebra_params *p) {
    char b[16];
    lua_createtable(L, 0, 10);
    lt_set_int(L, "k", p->n_facts);
    lt_set_num(L, "mix", p->mix);
    lt_set_int(L, "max_order", p->max_order);
    lt_set_bool(L, "test_groups", p->test_groups);
    if (p->n_fixed > 0) {
        lua_createtable(L, p->n_fixed, 0);
        for (int i = 0; i < p->n_fixed; i++) {
            lua_pushstring(L, mp_algebra_group_name(p->fixed[i], b));
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "groups");
    }
    lt_set_str(L, "hold_out", alg_holdouts[p->holdout]);
    lt_set_str(L, "targets", alg_targets[p->target]);
    push_rule_list(L, p->require);
    lua_setfield(L, -2, "require");
    push_rule_list(L, p->exclude);
    lua_setfield(L, -2, "exclude");
    lt_set_int(L, "max_attempts", p->max_attempts);
    lt_set_int(L, "pool", p->pool);
    lua_pushnumber(L, p->pool_share);
    lua_setfield(L, -2, "pool_share");
    lt_set_int(L, "seed", (lua_Integer)p->seed);
}

static int alg_field(lua_State *L, void *h, const char *k) {
    const mp_algebra_params *p = mp_algebra_get_params(h);
    if (!strcmp(k, "vocab")) lua_pushinteger(L, MP_ALGEBRA_VOCAB);
    else if (!strcmp(k, "seq_len")) lua_pushinteger(L, mp_algebra_seq_len(p));
    else if (!strcmp(k, "k")) lua_pushinteger(L, p->n_facts);
    else if (!strcmp(k, "params")) alg_push_params(L, p);
    else return 0;
    return 1;
}

static void alg_describe(void *h, char *buf, size_t n) {
    const mp_algebra_params *p = mp_algebra_get_params(h);
    char groups[96], req[64], exc[64], b[16];
    if (p->n_fixed > 0) {
        size_t len = 0;
        groups[0] = 0;
        for (int i = 0; i < p->n_fixed; i++)
            len += (size_t)snprintf(groups + len, sizeof groups > len ? sizeof groups - len : 0, "%s%s",
                                    i ? "," : "", mp_algebra_group_name(p->fixed[i], b));
    } else {
        snprintf(groups, sizeof groups, "%s", p->test_groups ? "test" : "training");
    }
    rules_str(p->require, req, sizeof req);
    rules_str(p->exclude, exc, sizeof exc);
    snprintf(buf, n,
             "AlgebraTask(k=%d, seq_len=%d, groups=%s, mix=%g, max_order=%d, hold_out=%s, targets=%s, "
             "require=%s, exclude=%s, seed=%llu)",
             p->n_facts, mp_algebra_seq_len(p), groups, p->mix, p->max_order, alg_holdouts[p->holdout],
             alg_targets[p->target], req, exc, (unsigned long long)p->seed);
}

const task_type MP_LT_ALGEBRA_TYPE = {"mechprobe.AlgebraTask", "AlgebraTask", alg_free, alg_field, alg_describe};

/* A group name: "C5", "D4", "Q8", "C2xC4", "C2xC2xC2"; order 0 when unknown. */
static mp_algebra_group parse_group(const char *s) {
    mp_algebra_group g = {MP_ALGEBRA_CYCLIC, 0};
    if (!strcasecmp(s, "Q8")) g.family = MP_ALGEBRA_Q8;
    else if (!strcasecmp(s, "C2xC4")) g.family = MP_ALGEBRA_C2XC4;
    else if (!strcasecmp(s, "C2xC2xC2")) g.family = MP_ALGEBRA_C2XC2XC2;
    else if ((s[0] == 'C' || s[0] == 'c' || s[0] == 'D' || s[0] == 'd') && s[1] >= '1' && s[1] <= '9') {
        char *end;
        long n = strtol(s + 1, &end, 10);
        if (*end || n > 16) return (mp_algebra_group){MP_ALGEBRA_CYCLIC, 0};
        g.family = (s[0] == 'C' || s[0] == 'c') ? MP_ALGEBRA_CYCLIC : MP_ALGEBRA_DIHEDRAL;
        g.n = (int)n;
    } else {
        return g;
    }
    if (mp_algebra_group_order(g) == 0) g.n = 0, g.family = MP_ALGEBRA_CYCLIC;
    return g;
}

/* A rule set: one name, names separated by ',' or '|', or a list of names. */
static uint32_t opt_rules(lua_State *L, int idx, const char *fn, const char *key) {
    uint32_t mask = 0;
    int t = mp_lua_opt_get(L, idx, key);
    int top = lua_gettop(L);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        luaL_error(L, "%s: %s must be a rule name or a list of them (got %s)", fn, key, luaL_typename(L, -1));
    lua_Integer n = t == LUA_TTABLE ? (lua_Integer)lua_rawlen(L, top) : 1;
    for (lua_Integer i = 1; i <= n; i++) {
        if (t == LUA_TTABLE) {
            if (lua_rawgeti(L, top, i) != LUA_TSTRING)
                luaL_error(L, "%s: %s[%I] must be a rule name (got %s)", fn, key, i, luaL_typename(L, -1));
        } else {
            lua_pushvalue(L, top);
        }
        char buf[128];
        snprintf(buf, sizeof buf, "%s", lua_tostring(L, -1));
        for (char *save = NULL, *tok = strtok_r(buf, ",| ", &save); tok; tok = strtok_r(NULL, ",| ", &save)) {
            int r = mp_algebra_rule_parse(tok);
            if (r < 0)
                luaL_error(L, "%s: %s: unknown rule '%s' (rules: copy, commute, identity, cancel, associate)", fn,
                           key, tok);
            mask |= MP_ALGEBRA_BIT(r);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, top - 1);
    return mask;
}

/* mp.tasks.algebra{k=200, mix=0.7, max_order=10, test_groups=false, groups={"C5",...},
 *   hold_out="commuted", targets="all", require=..., exclude=..., max_attempts=10000, pool=0, pool_share=1,
 *   seed=1} */
int mp_lt_l_algebra(lua_State *L) {
    static const char *const known[] = {"k", "mix", "max_order", "test_groups", "groups", "hold_out", "targets",
                                        "require", "exclude", "max_attempts", "pool", "pool_share", "seed", NULL};
    const char *fn = "mp.tasks.algebra";
    mp_lua_opt_check(L, 1, fn, known);
    mp_algebra_params p = mp_algebra_params_default();
    p.n_facts = lt_opt_int(L, 1, fn, "k", p.n_facts, 0, 100000);
    p.mix = mp_lua_opt_num(L, 1, fn, "mix", p.mix);
    if (!(p.mix >= 0 && p.mix <= 1)) luaL_error(L, "%s: mix must be a probability in [0, 1] (got %f)", fn, p.mix);
    p.max_order = lt_opt_int(L, 1, fn, "max_order", p.max_order, 3, MP_ALGEBRA_N_SYMBOLS);
    p.test_groups = mp_lua_opt_bool(L, 1, fn, "test_groups", p.test_groups);
    int t = mp_lua_opt_get(L, 1, "groups");
    if (t != LUA_TNIL) {
        int gi = lua_gettop(L), total = 0;
        if (t == LUA_TSTRING) {  /* one name */
            lua_createtable(L, 1, 0);
            lua_pushvalue(L, gi);
            lua_rawseti(L, -2, 1);
            lua_replace(L, gi);
        } else if (t != LUA_TTABLE) {
            luaL_error(L, "%s: groups must be a list of group names such as {\"C5\", \"D3\"} (got %s)", fn,
                       luaL_typename(L, gi));
        }
        lua_Integer n = (lua_Integer)lua_rawlen(L, gi);
        if (n < 1 || n > MP_ALGEBRA_MAX_GROUPS)
            luaL_error(L, "%s: groups must list 1..%d groups (got %I)", fn, MP_ALGEBRA_MAX_GROUPS, n);
        for (lua_Integer i = 1; i <= n; i++) {
            const char *s = lua_rawgeti(L, gi, i) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            mp_algebra_group g = s ? parse_group(s) : (mp_algebra_group){MP_ALGEBRA_CYCLIC, 0};
            int o = mp_algebra_group_order(g);
            if (o < 2)
                luaL_error(L, "%s: groups[%I] = %s is not a supported group (C1..C16, D1..D8, Q8, C2xC4, C2xC2xC2)",
                           fn, i, s ? s : luaL_typename(L, -1));
            total += o;
            p.fixed[i - 1] = g;
            lua_pop(L, 1);
        }
        if (total > MP_ALGEBRA_N_SYMBOLS)
            luaL_error(L, "%s: groups have %d elements in all, more than the %d symbols", fn, total,
                       MP_ALGEBRA_N_SYMBOLS);
        p.n_fixed = (int)n;
    }
    lua_pop(L, 1);
    p.holdout = (mp_algebra_holdout)mp_lua_opt_enum(L, 1, fn, "hold_out", (int)p.holdout, alg_holdouts);
    p.target = (mp_algebra_target)mp_lua_opt_enum(L, 1, fn, "targets", (int)p.target, alg_targets);
    p.require = opt_rules(L, 1, fn, "require");
    p.exclude = opt_rules(L, 1, fn, "exclude");
    p.max_attempts = lt_opt_int(L, 1, fn, "max_attempts", p.max_attempts, 1, INT_MAX);
    p.pool = lt_opt_int(L, 1, fn, "pool", p.pool, 0, 100000);
    p.pool_share = mp_lua_opt_num(L, 1, fn, "pool_share", p.pool_share);   /* range: mp_algebra_new */
    p.seed = lt_opt_seed(L, 1, fn);
    const uint32_t copy = MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COPY), commute = MP_ALGEBRA_BIT(MP_ALGEBRA_RULE_COMMUTE);
    if ((p.require & copy) && p.holdout != MP_ALGEBRA_HOLDOUT_NONE)
        luaL_error(L, "%s: require=copy needs hold_out=\"none\" (a held-out query pair is never in the context)", fn);
    if ((p.require & commute) && p.holdout == MP_ALGEBRA_HOLDOUT_PAIR_COMMUTED)
        luaL_error(L, "%s: require=commute needs hold_out=\"none\" or \"pair\" (\"commuted\" holds \"b a\" out)", fn);
    ltask *u = lt_push_task(L, &MP_LT_ALGEBRA_TYPE);
    mp_algebra *a = NULL;
    if (mp_algebra_new(&a, &p) != MP_OK) return lt_fail(L, fn, "algebra");
    u->h = a;
    return 1;
}

static void push_rules_table(lua_State *L, uint32_t mask) {
    lua_createtable(L, 0, MP_ALGEBRA_N_RULES);
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++)
        lt_set_bool(L, mp_algebra_rule_name((mp_algebra_rule)r), (mask & MP_ALGEBRA_BIT(r)) != 0);
}

/* The truth table of one sample (layout in the README / test_tasks.lua). */
static void alg_push_truth(lua_State *L, const mp_algebra_truth *tr) {
    char b[16];
    lua_createtable(L, 0, 7);
    lua_createtable(L, tr->n_groups, 0);
    for (int g = 0; g < tr->n_groups; g++) {
        lua_pushstring(L, mp_algebra_group_name(tr->groups[g], b));
        lua_rawseti(L, -2, g + 1);
    }
    lua_setfield(L, -2, "groups");
    lua_createtable(L, tr->n_groups, 0);   /* assignment[g][e+1] = symbol of element e */
    for (int g = 0; g < tr->n_groups; g++) {
        int o = mp_algebra_group_order(tr->groups[g]);
        lua_createtable(L, o, 0);
        for (int e = 0; e < o; e++) {
            lua_pushinteger(L, tr->symbol[g][e]);
            lua_rawseti(L, -2, e + 1);
        }
        lua_rawseti(L, -2, g + 1);
    }
    lua_setfield(L, -2, "assignment");
    lua_createtable(L, 0, MP_ALGEBRA_N_SYMBOLS);   /* symbols[s] = {group = g, element = e} */
    for (int s = 0; s < MP_ALGEBRA_N_SYMBOLS; s++) {
        if (tr->sym_group[s] < 0) continue;
        lua_createtable(L, 0, 2);
        lt_set_int(L, "group", tr->sym_group[s] + 1);
        lt_set_int(L, "element", tr->sym_elem[s]);
        lua_rawseti(L, -2, s);
    }
    lua_setfield(L, -2, "symbols");
    lua_createtable(L, 0, 4);
    lt_set_int(L, "a", tr->query_a);
    lt_set_int(L, "b", tr->query_b);
    lt_set_int(L, "answer", tr->answer);
    lt_set_int(L, "group", tr->query_group + 1);
    lua_setfield(L, -2, "query");
    push_rules_table(L, tr->rules);
    lua_setfield(L, -2, "rules");
    lua_createtable(L, 0, MP_ALGEBRA_N_RULES);
    for (int r = 0; r < MP_ALGEBRA_N_RULES; r++) lt_set_int(L, mp_algebra_rule_name((mp_algebra_rule)r), tr->solved[r]);
    lua_setfield(L, -2, "solved");
    lt_set_int(L, "attempts", tr->attempts);
}

/* t:sample(B [, T]) -> tokens, targets, truth (a list of B per-sample tables) */
static int alg_sample(lua_State *L) {
    const char *fn = "AlgebraTask:sample";
    mp_algebra *a = lt_check_task(L, 1, &MP_LT_ALGEBRA_TYPE);
    const mp_algebra_params *p = mp_algebra_get_params(a);
    int L0 = mp_algebra_seq_len(p);
    int B = lt_arg_count(L, 2, fn, "B", 1);
    int T = lua_isnoneornil(L, 3) ? L0 : lt_arg_count(L, 3, fn, "T", 1);
    if (T != L0) luaL_error(L, "%s: T = %d but k = %d facts make sequences of T = 5*(k+1) = %d", fn, T, p->n_facts, L0);
    lua_settop(L, 1);
    batch bt;
    lt_batch_begin(L, &bt, B, T);
    mp_algebra_truth *tr = lua_newuserdatauv(L, (size_t)B * sizeof *tr, 0);
    lt_batch_ids(L, &bt, fn);
    mp_status st = mp_algebra_sample(a, B, T, bt.p[0], bt.p[1], tr);
    lt_batch_end(&bt, st);
    if (st != MP_OK) return lt_fail(L, fn, "algebra");
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        alg_push_truth(L, &tr[b]);
        lua_rawseti(L, -2, b + 1);
    }
    lua_remove(L, 4);   /* the truth buffer */
    return 3;
}

static int alg_seed(lua_State *L) {
    mp_algebra *a = lt_check_task(L, 1, &MP_LT_ALGEBRA_TYPE);
    uint64_t seed;
    lt_m_seed_common(L, "AlgebraTask:seed", &seed);
    mp_algebra_seed(a, seed);
    return 1;
}

const luaL_Reg mp_lt_algebra_methods[] = {{"sample", alg_sample}, {"seed", alg_seed}, {NULL, NULL}};

/* The context of a token row at arg (facts before the query) for the helpers. */
static void row_context(lua_State *L, int arg, int nf_arg, const char *fn, mp_algebra_context *ctx) {
    size_t len;
    int32_t *row = lt_arg_ids(L, arg, fn, "tokens", MP_ALGEBRA_VOCAB, &len);
    lua_Integer nf = len >= 1 ? (lua_Integer)((len - 1) / 5) : 0;
    nf = mp_lua_arg_optint(L, nf_arg, fn, "n_facts", nf, 0, nf);
    if (len == 0) luaL_error(L, "%s: tokens is empty", fn);
    if (mp_algebra_context_from_tokens(ctx, row, (int)nf) != MP_OK) lt_fail(L, fn, "algebra");
}

static int arg_symbol(lua_State *L, int arg, const char *fn, const char *what) {
    return (int)mp_lua_arg_int(L, arg, fn, what, 0, MP_ALGEBRA_N_SYMBOLS - 1);
}

/* mp.tasks.algebra_solve(rule, tokens_row, a, b [, n_facts]) -> symbol, or -1 when
 * the rule does not apply. The context is the first n_facts facts of the row
 * (default: every complete fact, i.e. k for a sampled row of T = 5(k+1)). */
int mp_lt_l_algebra_solve(lua_State *L) {
    const char *fn = "mp.tasks.algebra_solve";
    lua_settop(L, 5);
    const char *name = luaL_checkstring(L, 1);
    int rule = mp_algebra_rule_parse(name);
    if (rule < 0) luaL_error(L, "%s: unknown rule '%s' (rules: copy, commute, identity, cancel, associate)", fn, name);
    int a = arg_symbol(L, 3, fn, "a"), b = arg_symbol(L, 4, fn, "b");
    mp_algebra_context ctx;
    row_context(L, 2, 5, fn, &ctx);
    lua_pushinteger(L, mp_algebra_solve((mp_algebra_rule)rule, &ctx, a, b));
    return 1;
}

/* mp.tasks.algebra_rules(tokens_row, a, b, answer [, n_facts]) -> {copy = bool, ...} */
int mp_lt_l_algebra_rules(lua_State *L) {
    const char *fn = "mp.tasks.algebra_rules";
    lua_settop(L, 5);
    int a = arg_symbol(L, 2, fn, "a"), b = arg_symbol(L, 3, fn, "b"), c = arg_symbol(L, 4, fn, "answer");
    mp_algebra_context ctx;
    row_context(L, 1, 5, fn, &ctx);
    push_rules_table(L, mp_algebra_rules(&ctx, a, b, c));
    return 1;
}

/* ==== text corpus ==== */
