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
    int mask; /* an attention mask: 0 or 1 */
} tok_range;

static void tok_range_check(lua_State *L, const tok_range *r, const char *where, lua_Integer v) {
    if (r->mask) {
        if (v != 0 && v != 1) luaL_error(L, "%s = %I: expected 1 (a real token) or 0 (a pad)", where, v);
        return;
    }
    if (!r->vocab || (v >= 0 && v < r->vocab) || (r->ignore && v == -1)) return;
    if (r->ignore)
        luaL_error(L, "%s = %I is neither -1 (ignored) nor a token id (0..%d; the vocabulary has %d tokens)", where, v,
                   r->vocab - 1, r->vocab);
    luaL_error(L, "%s = %I is outside the vocabulary (0..%d; the vocabulary has %d tokens)", where, v, r->vocab - 1,
               r->vocab);
}

static int tok_value(lua_State *L, int idx, const tok_range *r, lua_Integer b, lua_Integer t, int nested) {
    idx = lua_absindex(L, idx);
    const char *where = nested ? lua_pushfstring(L, "%s[%I][%I]", r->what, b, t) : lua_pushfstring(L, "%s[%I]", r->what, t);
    int isint = 0;
    lua_Integer i = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &isint) : 0;
    if (isint) tok_range_check(L, r, where, i); /* an integer outside the vocabulary: the vocabulary's message */
    /* anything else (a fraction, nan, 1e300, a string): the integer reader's,
     * with the values the argument takes; checked before any cast */
    const lua_Integer lo = r->mask ? 0 : r->vocab ? (r->ignore ? -1 : 0) : INT_MIN,
                      hi = r->mask ? 1 : r->vocab ? r->vocab - 1 : INT_MAX;
    int v = (int)mp_lua_int_at(L, idx, NULL, where, lo, hi);
    lua_pop(L, 1);
    return v;
}

/* Reads tokens from a flat table (B = 1), a table of equal-length tables [B][T],
 * or a 1-D / 2-D Tensor, into g->ints. */
static void read_ints(lua_State *L, int idx, guard *g, int *B, int *T, const tok_range r);

/* A shape error: an argument error for tokens (as before), a plain one naming
 * the option for a mask (which is no argument of its own). */
static void shape_error(lua_State *L, int idx, const tok_range *r, const char *msg) {
    if (r->mask) luaL_error(L, "%s: %s", r->what, msg);
    luaL_argerror(L, idx, lua_pushfstring(L, "tokens: %s", msg));
}

void mp_lua_read_tokens(lua_State *L, int idx, guard *g, int *B, int *T, const char *what, int vocab, int ignore) {
    const tok_range r = {what, vocab, ignore, 0};
    read_ints(L, idx, g, B, T, r);
}

int *mp_lua_opt_mask(lua_State *L, int opt, const char *fn, int B, int T) {
    if (mp_lua_opt_get(L, opt, "attention_mask") == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    int idx = lua_gettop(L), mB, mT;
    guard *g = mp_lua_guard_push(L);
    const tok_range r = {"attention_mask", 0, 0, 1};
    read_ints(L, idx, g, &mB, &mT, r);
    if (mB != B || mT != T)
        luaL_error(L, "%s: attention_mask has shape [%d,%d] but the tokens have [%d,%d]", fn, mB, mT, B, T);
    lua_remove(L, idx); /* the guard stays on the stack, owning the mask */
    return g->ints;
}

void mp_lua_push_padded(lua_State *L, const int *ids, const int *n, int B, int pad, int left) {
    const int T = mp_pad_width(n, B);
    guard *g = mp_lua_guard_push(L);
    if (!(g->ints = malloc(2 * (size_t)B * T * sizeof(int)))) luaL_error(L, "out of memory padding a batch");
    int *tokens = g->ints, *mask = g->ints + (size_t)B * T;
    mp_pad_batch(ids, n, B, T, pad, left, tokens, mask); /* runtime/ragged.c */
    luaL_checkstack(L, 8, "padded batch");
    lua_createtable(L, B, 0);
    lua_createtable(L, B, 0);
    for (int b = 0; b < B; b++) {
        lua_createtable(L, T, 0);
        lua_createtable(L, T, 0);
        for (int t = 0; t < T; t++) {
            lua_pushinteger(L, tokens[(size_t)b * T + t]);
            lua_rawseti(L, -3, t + 1);
            lua_pushinteger(L, mask[(size_t)b * T + t]);
            lua_rawseti(L, -2, t + 1);
        }
        lua_rawseti(L, -3, b + 1);
        lua_rawseti(L, -3, b + 1);
    }
    lua_remove(L, -3); /* the guard (its __gc frees the ints) */
}

static void read_ints(lua_State *L, int idx, guard *g, int *B, int *T, const tok_range r) {
    idx = lua_absindex(L, idx);
    const char *what = r.what;
    mp_tensor *t = mp_lua_tensor_test(L, idx);
    if (t) {
        if (t->ndim != 1 && t->ndim != 2) shape_error(L, idx, &r, "a Tensor of shape [T] or [B,T] expected");
        if (t->shape[0] > INT_MAX || t->shape[t->ndim - 1] > INT_MAX)
            shape_error(L, idx, &r, "more than 2^31 - 1 tokens per axis");
        *B = t->ndim == 2 ? (int)t->shape[0] : 1;
        *T = (int)t->shape[t->ndim - 1];
        if (*B <= 0 || *T <= 0) shape_error(L, idx, &r, "empty");
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
    if (r.mask && !lua_istable(L, idx))
        luaL_error(L, "%s: a table or Tensor of 0/1 expected, got %s", what, luaL_typename(L, idx));
    luaL_argexpected(L, lua_istable(L, idx), idx, "token table or Tensor");
    lua_Integer n = luaL_len(L, idx);
    if (n <= 0) shape_error(L, idx, &r, "empty table");
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
    if (*T <= 0) shape_error(L, idx, &r, "empty sequence");
    g->ints = malloc((size_t)*B * (size_t)*T * sizeof(int));
    if (!g->ints) luaL_error(L, "out of memory reading tokens");
    for (int b = 1; b <= *B; b++) {
        lua_geti(L, idx, b);
        if (!lua_istable(L, -1) || luaL_len(L, -1) != *T)
            luaL_error(L, "%s: sequence %d has a different length from sequence 1 (%d); batches must be rectangular "
                          "(pad them: m:to_tokens({...}) returns a padded batch and its attention_mask)", what, b, *T);
        for (int t2 = 1; t2 <= *T; t2++) {
            lua_geti(L, -1, t2);
            g->ints[(size_t)(b - 1) * *T + t2 - 1] = tok_value(L, -1, &r, b, t2, 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}
