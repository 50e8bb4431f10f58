/* lmpi.c — mp.mpi: the MPI layer (mpi/mp_mpi.h) from Lua, for scripts that
 * spread work across the ranks of an mpirun / srun job.
 *
 *   mp.mpi.built() -> bool          built with MPI
 *   mp.mpi.rank(), mp.mpi.size()    this process in the current group (0 of 1
 *                                   without mpirun, and inside a sweep item)
 *   mp.mpi.world_rank(), world_size()  in the whole job (for logging)
 *   mp.mpi.barrier()
 *   mp.mpi.split(n) -> first, count this rank's contiguous share of 1..n
 *   mp.mpi.sum(x)                   a number, or a Tensor summed in place
 *   mp.mpi.gather(v [, root]) -> {v of rank 0, v of rank 1, ...} on root, nil elsewhere
 *   mp.mpi.bcast(v [, root]) -> root's v on every rank
 *   mp.mpi.sweep(items, fn) -> {fn(items[1], 1), ...} on rank 0, nil elsewhere:
 *                                   item i runs on rank (i-1) % size, alone
 *                                   (no data parallelism inside)
 *
 * Values travel as a small binary encoding of nil, booleans, numbers
 * (integers stay integers), strings, tables (nested, acyclic) and Tensors;
 * anything else (a Model, a function) is an error naming its type. os.exit is
 * wrapped so that a script that exits ends the MPI job properly. */
#include "mp_lua.h"
#include "mp_mpi.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoding ---- */

#define ENC_MAX_DEPTH 64
#define WBUF_MT "mechprobe.mpi.buffer"

/* A growable byte buffer owned by a userdata (freed by __gc even when the
 * encoding raises an error half-way; luaL_Buffer cannot be used because the
 * encoder walks tables on the stack). */
typedef struct {
    char *p;
    size_t n, cap;
    lua_State *L;
} wbuf;

static int wbuf_gc(lua_State *L) {
    wbuf *b = luaL_checkudata(L, 1, WBUF_MT);
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    return 0;
}

static wbuf *wbuf_push(lua_State *L) {
    wbuf *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    b->L = L;
    if (luaL_newmetatable(L, WBUF_MT)) {
        lua_pushcfunction(L, wbuf_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return b;
}

static void put(wbuf *b, const void *p, size_t n) {
    if (b->cap - b->n < n) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc - b->n < n) {
            if (nc > SIZE_MAX / 2) luaL_error(b->L, "mp.mpi: message too large");
            nc *= 2;
        }
        char *q = realloc(b->p, nc);
        if (!q) luaL_error(b->L, "mp.mpi: out of memory for a message of %zu bytes", nc);
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_char(wbuf *b, char c) { put(b, &c, 1); }

static void encode(lua_State *L, wbuf *b, int idx, int depth, const char *what) {
    idx = lua_absindex(L, idx);
    if (depth > ENC_MAX_DEPTH) luaL_error(L, "%s: the value is nested deeper than %d (a cycle?)", what, ENC_MAX_DEPTH);
    luaL_checkstack(L, 4, "mp.mpi encoding");
    switch (lua_type(L, idx)) {
    case LUA_TNIL: put_char(b, 'n'); break;
    case LUA_TBOOLEAN: put_char(b, lua_toboolean(L, idx) ? 't' : 'f'); break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            int64_t v = (int64_t)lua_tointeger(L, idx);
            put_char(b, 'i');
            put(b, &v, sizeof v);
        } else {
            double v = (double)lua_tonumber(L, idx);
            put_char(b, 'd');
            put(b, &v, sizeof v);
        }
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        uint64_t len = n;
        put_char(b, 's');
        put(b, &len, sizeof len);
        put(b, s, n);
        break;
    }
    case LUA_TTABLE: {
        uint64_t count = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) { count++; lua_pop(L, 1); }
        put_char(b, 'T');
        put(b, &count, sizeof count);
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            encode(L, b, -2, depth + 1, what);
            encode(L, b, -1, depth + 1, what);
            lua_pop(L, 1);
        }
        break;
    }
    case LUA_TUSERDATA: {
        mp_tensor *t = mp_lua_tensor_test(L, idx);
        if (t) {
            uint8_t nd = (uint8_t)t->ndim;
            put_char(b, 'X');
            put(b, &nd, 1);
            put(b, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
            put(b, t->data, t->numel * sizeof(float));
            break;
        }
        const char *tn = luaL_getmetafield(L, idx, "__name") == LUA_TSTRING ? lua_tostring(L, -1) : "userdata";
        luaL_error(L, "%s: cannot send a %s between ranks (send numbers, strings, tables and Tensors; save a "
                      "model to a file and send its path)", what, tn);
        break;
    }
    default:
        luaL_error(L, "%s: cannot send a %s between ranks (send numbers, strings, tables and Tensors)", what,
                   luaL_typename(L, idx));
    }
}

typedef struct {
    const char *p, *end;
    const char *what;
} reader;

static const void *take(lua_State *L, reader *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) luaL_error(L, "%s: truncated message from another rank", r->what);
    const void *p = r->p;
    r->p += n;
    return p;
}

static void decode(lua_State *L, reader *r, int depth) {
    if (depth > ENC_MAX_DEPTH + 1) luaL_error(L, "%s: message nested too deep", r->what);
    luaL_checkstack(L, 4, "mp.mpi decoding");
    char tag = *(const char *)take(L, r, 1);
    switch (tag) {
    case 'n': lua_pushnil(L); break;
    case 't': lua_pushboolean(L, 1); break;
    case 'f': lua_pushboolean(L, 0); break;
    case 'i': { int64_t v; memcpy(&v, take(L, r, sizeof v), sizeof v); lua_pushinteger(L, (lua_Integer)v); break; }
    case 'd': { double v; memcpy(&v, take(L, r, sizeof v), sizeof v); lua_pushnumber(L, (lua_Number)v); break; }
    case 's': {
        uint64_t n;
        memcpy(&n, take(L, r, sizeof n), sizeof n);
        if (n > (uint64_t)(r->end - r->p)) luaL_error(L, "%s: truncated message from another rank", r->what);
        lua_pushlstring(L, take(L, r, (size_t)n), (size_t)n);
        break;
    }
    case 'T': {
        uint64_t n;
        memcpy(&n, take(L, r, sizeof n), sizeof n);
        lua_createtable(L, 0, 0);
        for (uint64_t i = 0; i < n; i++) {
            decode(L, r, depth + 1);
            decode(L, r, depth + 1);
            if (lua_isnil(L, -2)) luaL_error(L, "%s: a table key is nil in a message", r->what);
            lua_rawset(L, -3);
        }
        break;
    }
    case 'X': {
        uint8_t nd = *(const uint8_t *)take(L, r, 1);
        int64_t shape[MP_MAXDIM];
        if (nd > MP_MAXDIM) {
            luaL_error(L, "%s: a Tensor of rank %d in a message", r->what, (int)nd);
            return;
        }
        memcpy(shape, take(L, r, nd * sizeof shape[0]), nd * sizeof shape[0]);
        size_t numel = 1;
        for (int i = 0; i < nd; i++) {
            if (shape[i] < 0 || mp_mul_size(numel, (size_t)shape[i], &numel))
                luaL_error(L, "%s: bad Tensor shape in a message", r->what);
        }
        if (numel > (size_t)(r->end - r->p) / sizeof(float)) luaL_error(L, "%s: truncated Tensor in a message", r->what);
        mp_tensor *t = mp_lua_tensor_new(L, nd, shape);
        memcpy(t->data, take(L, r, numel * sizeof(float)), numel * sizeof(float));
        break;
    }
    default: luaL_error(L, "%s: corrupt message from another rank (tag %d)", r->what, (int)(unsigned char)tag);
    }
}

/* Pushes the encoding of the value at idx as a string. */
static void push_encoded(lua_State *L, int idx, const char *what) {
    idx = lua_absindex(L, idx);
    wbuf *b = wbuf_push(L);
    encode(L, b, idx, 0, what);
    lua_pushlstring(L, b->p ? b->p : "", b->n);
    lua_replace(L, -2); /* the buffer is freed by its __gc */
}

/* Gathers the value at idx on root: pushes {v0, v1, ...} there, nil elsewhere. */
static void gather_value(lua_State *L, int idx, int root, const char *what) {
    push_encoded(L, idx, what);
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    int size = mp_mpi_size();
    size_t *lens = lua_newuserdatauv(L, (size_t)size * sizeof *lens, 0);
    char *all = NULL;
    mp_status st = mp_mpi_gather_bytes(s, n, root, &all, lens);
    if (st) luaL_error(L, "%s: %s", what, mp_last_error());
    if (mp_mpi_rank() != root) {
        lua_pop(L, 2);
        lua_pushnil(L);
        return;
    }
    /* the bytes go into a Lua string first so that a decoding error frees them */
    size_t total = 0;
    for (int r = 0; r < size; r++) total += lens[r];
    lua_pushlstring(L, all, total);
    free(all);
    const char *base = lua_tostring(L, -1);
    lua_createtable(L, size, 0);
    size_t off = 0;
    for (int r = 0; r < size; r++) {
        reader rd = {base + off, base + off + lens[r], what};
        decode(L, &rd, 0);
        if (rd.p != rd.end) luaL_error(L, "%s: %zu stray bytes in the message of rank %d", what,
                                       (size_t)(rd.end - rd.p), r);
        lua_rawseti(L, -2, r + 1);
        off += lens[r];
    }
    lua_replace(L, -4); /* over the encoded string */
    lua_pop(L, 2);
}

static int check_root(lua_State *L, int idx, const char *fn) {
    return (int)mp_lua_arg_optint(L, idx, fn, "root", 0, 0, mp_mpi_size() - 1);
}

/* ---- functions ---- */

static int l_built(lua_State *L) { lua_pushboolean(L, mp_mpi_built()); return 1; }
static int l_rank(lua_State *L) { lua_pushinteger(L, mp_mpi_rank()); return 1; }
static int l_size(lua_State *L) { lua_pushinteger(L, mp_mpi_size()); return 1; }
static int l_world_rank(lua_State *L) { lua_pushinteger(L, mp_mpi_world_rank()); return 1; }
static int l_world_size(lua_State *L) { lua_pushinteger(L, mp_mpi_world_size()); return 1; }

static int l_barrier(lua_State *L) {
    if (mp_mpi_barrier()) return luaL_error(L, "mp.mpi.barrier: %s", mp_last_error());
    return 0;
}

static int l_split(lua_State *L) {
    lua_Integer n = mp_lua_arg_int(L, 1, "mp.mpi.split", "n", 0, LUA_MAXINTEGER / mp_mpi_size()); /* n * rank fits */
    lua_Integer size = mp_mpi_size(), r = mp_mpi_rank();
    lua_Integer lo = n * r / size, hi = n * (r + 1) / size;
    lua_pushinteger(L, lo + 1);
    lua_pushinteger(L, hi - lo);
    return 2;
}

static int l_sum(lua_State *L) {
    mp_tensor *t = mp_lua_tensor_test(L, 1);
    if (t) {
        if (mp_mpi_sum_f32(t->data, t->numel)) return luaL_error(L, "mp.mpi.sum: %s", mp_last_error());
        lua_settop(L, 1);
        return 1;
    }
    double v = luaL_checknumber(L, 1);
    if (mp_mpi_sum_f64(&v, 1)) return luaL_error(L, "mp.mpi.sum: %s", mp_last_error());
    lua_pushnumber(L, v);
    return 1;
}

static int l_gather(lua_State *L) {
    luaL_checkany(L, 1);
    int root = check_root(L, 2, "mp.mpi.gather");
    gather_value(L, 1, root, "mp.mpi.gather");
    return 1;
}

static int l_bcast(lua_State *L) {
    int root = check_root(L, 2, "mp.mpi.bcast");
    lua_settop(L, 1);
    uint64_t n = 0;
    if (mp_mpi_rank() == root) {
        push_encoded(L, 1, "mp.mpi.bcast");
        n = (uint64_t)lua_rawlen(L, -1);
    }
    if (mp_mpi_bcast(&n, sizeof n, root)) return luaL_error(L, "mp.mpi.bcast: %s", mp_last_error());
    char *buf = lua_newuserdatauv(L, n ? (size_t)n : 1, 0);
    if (mp_mpi_rank() == root) memcpy(buf, lua_tostring(L, 2), (size_t)n);
    if (mp_mpi_bcast(buf, (size_t)n, root)) return luaL_error(L, "mp.mpi.bcast: %s", mp_last_error());
    reader rd = {buf, buf + n, "mp.mpi.bcast"};
    decode(L, &rd, 0);
    return 1;
}

/* Runs this rank's items alone, restoring the group even when fn fails. */
static int sweep_items(lua_State *L) {
    /* 1 items, 2 fn, 3 results table */
    lua_Integer n = luaL_len(L, 1);
    int size = mp_mpi_size(), rank = mp_mpi_rank();
    int prev = mp_mpi_set_alone(1);
    for (lua_Integer i = 1; i <= n; i++) {
        if ((i - 1) % size != rank) continue;
        lua_pushvalue(L, 2);
        lua_geti(L, 1, i);
        lua_pushinteger(L, i);
        int st = lua_pcall(L, 2, 1, 0);
        if (st != LUA_OK) {
            mp_mpi_set_alone(prev);
            return lua_error(L);
        }
        lua_pushinteger(L, i);
        lua_insert(L, -2);
        lua_rawset(L, 3);
    }
    mp_mpi_set_alone(prev);
    return 0;
}

static int l_sweep(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    lua_newtable(L); /* 3: this rank's results, by item index */
    lua_pushcfunction(L, sweep_items);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_call(L, 3, 0);
    if (mp_mpi_size() == 1) return 1;
    gather_value(L, 3, 0, "mp.mpi.sweep");
    if (lua_isnil(L, -1)) return 1;
    /* merge the ranks' tables (disjoint indices) into one */
    lua_newtable(L);
    int all = lua_gettop(L) - 1, out = lua_gettop(L);
    for (int r = 1; r <= mp_mpi_size(); r++) {
        lua_rawgeti(L, all, r);
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, out);
        }
        lua_pop(L, 1);
    }
    return 1;
}

/* os.exit under MPI: success waits for the other ranks (MPI_Finalize), a
 * failure ends the job (MPI_Abort); then the usual os.exit. */
static int l_exit(lua_State *L) {
    int code;
    if (lua_isboolean(L, 1)) code = lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE;
    else code = (int)mp_lua_arg_optint(L, 1, "os.exit", "code", EXIT_SUCCESS, INT_MIN, INT_MAX);
    fflush(NULL);
    if (code != 0) mp_mpi_abort(code);
    mp_mpi_finalize();
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 0);
    return 0;
}

void mp_lua_open_mpi(lua_State *L) {
    static const luaL_Reg fns[] = {{"built", l_built},   {"rank", l_rank},     {"size", l_size},
                                   {"world_rank", l_world_rank}, {"world_size", l_world_size},
                                   {"barrier", l_barrier}, {"split", l_split}, {"sum", l_sum},
                                   {"gather", l_gather}, {"bcast", l_bcast},   {"sweep", l_sweep},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "mpi");
    if (!mp_mpi_built()) return;
    if (lua_getglobal(L, "os") == LUA_TTABLE) {
        if (lua_getfield(L, -1, "exit") == LUA_TFUNCTION) {
            lua_pushcclosure(L, l_exit, 1);
            lua_setfield(L, -2, "exit");
        } else {
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}
