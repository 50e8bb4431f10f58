/* ltokarg.c — arguments of the Model's methods (lmodel.c, ltrain.c): token
 * arguments (a flat table, a table of equal-length tables or a 1-D / 2-D
 * Tensor read into a guard's int buffer, every value checked before any cast
 * (integer-ness, range, the vocabulary) with a message naming the argument,
 * the position and the value), and the readers of option-table fields. */
#include "lmodel.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Token range for mp_lua_read_tokens: what the values are called, the
 * vocabulary size (0: any int) and whether -1 (an ignored target) is allowed. */
typedef struct {
    const char *what;
    int vocab;
    int ignore;
} tok_range;

static void tok_range_check(lua_State *L, const tok_range *r, const char *where, lua_Integer v) {
    if (!r->vocab || (v >= 0 && v < r->vocab) || (r->ignore && v == -1)) return;
    if (r->ignore)
        luaL_error(L, "%s = %I is neither -1 (ignored) nor a token id (0..%d; the vocabulary has %d tokens)", where, v,
                   r->vocab - 1, r->vocab);
    luaL_error(L, "%s = %I is outside the vocabulary (0..%d; the vocabulary has %d tokens)", where, v, r->vocab - 1,
               r->vocab);
}

static int tok_value(lua_State *L, int idx, const tok_range *r, lua_Integer b, lua_Integer t, int nested) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TNUMBER)
        return luaL_error(L, "%s: token ids must be integers (got %s)", r->what, luaL_typename(L, idx));
    const char *where = nested ? lua_pushfstring(L, "%s[%I][%I]", r->what, b, t) : lua_pushfstring(L, "%s[%I]", r->what, t);
    lua_Integer v = mp_lua_checkint(L, idx, where, LUA_MININTEGER, LUA_MAXINTEGER); /* integer-ness, before any cast */
    tok_range_check(L, r, where, v);
    if (v < INT_MIN || v > INT_MAX) luaL_error(L, "%s = %I is out of range (not an int)", where, v);
    lua_pop(L, 1);
    return (int)v;
}

/* Reads tokens from a flat table (B = 1), a table of equal-length tables [B][T],
 * or a 1-D / 2-D Tensor, into g->ints. */
void mp_lua_read_tokens(lua_State *L, int idx, guard *g, int *B, int *T, const char *what, int vocab, int ignore) {
    idx = lua_absindex(L, idx);
    const tok_range r = {what, vocab, ignore};
    mp_tensor *t = mp_lua_tensor_test(L, idx);
    if (t) {
        if (t->ndim != 1 && t->ndim != 2) luaL_argerror(L, idx, "tokens: a Tensor of shape [T] or [B,T] expected");
        if (t->shape[0] > INT_MAX || t->shape[t->ndim - 1] > INT_MAX)
            luaL_argerror(L, idx, "tokens: more than 2^31 - 1 tokens per axis");
        *B = t->ndim == 2 ? (int)t->shape[0] : 1;
        *T = (int)t->shape[t->ndim - 1];
        if (*B <= 0 || *T <= 0) luaL_argerror(L, idx, "tokens: empty");
        g->ints = malloc(t->numel * sizeof(int));
        if (!g->ints) luaL_error(L, "out of memory reading tokens");
        for (size_t i = 0; i < t->numel; i++) {
            float v = t->data[i];
            /* checked before the cast: NaN, inf, fractions and values beyond
             * int are undefined or wrong as an int */
            if (!(v == floorf(v) && v >= (float)INT_MIN && v < 2147483648.0f))
                luaL_error(L, "%s: element %d of the Tensor is %f, not an integer token id", what, (int)i + 1,
                           (lua_Number)v);
            char where[64];
            snprintf(where, sizeof where, "%s: element %zu of the Tensor", what, i + 1);
            tok_range_check(L, &r, where, (lua_Integer)v);
            g->ints[i] = (int)v;
        }
        return;
    }
    luaL_argexpected(L, lua_istable(L, idx), idx, "token table or Tensor");
    lua_Integer n = luaL_len(L, idx);
    if (n <= 0) luaL_argerror(L, idx, "tokens: empty table");
    lua_geti(L, idx, 1);
    int nested = lua_istable(L, -1);
    lua_pop(L, 1);
    if (!nested) {
        *B = 1;
        *T = (int)n;
        g->ints = malloc((size_t)n * sizeof(int));
        if (!g->ints) luaL_error(L, "out of memory reading tokens");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, idx, i);
            g->ints[i - 1] = tok_value(L, -1, &r, 1, i, 0);
            lua_pop(L, 1);
        }
        return;
    }
    *B = (int)n;
    lua_geti(L, idx, 1);
    *T = (int)luaL_len(L, -1);
    lua_pop(L, 1);
    if (*T <= 0) luaL_argerror(L, idx, "tokens: empty sequence");
    g->ints = malloc((size_t)*B * (size_t)*T * sizeof(int));
    if (!g->ints) luaL_error(L, "out of memory reading tokens");
    for (int b = 1; b <= *B; b++) {
        lua_geti(L, idx, b);
        if (!lua_istable(L, -1) || luaL_len(L, -1) != *T)
            luaL_error(L, "tokens: sequence %d has a different length from sequence 1 (%d); batches must be rectangular",
                       b, *T);
        for (int t2 = 1; t2 <= *T; t2++) {
            lua_geti(L, -1, t2);
            g->ints[(size_t)(b - 1) * *T + t2 - 1] = tok_value(L, -1, &r, b, t2, 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}
