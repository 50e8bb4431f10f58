/* mp_lua.h — internal interface between the Lua binding files of module `mp`.
 * Each binding file registers one type (one metatable, namespaced
 * "mechprobe.<Type>") and its functions into the `mp` table.
 *
 * Tensor: float32, row-major, up to MP_MAXDIM dims, backed by a reference-counted
 * storage so that views (selecting or slicing along leading dimensions) share
 * memory with their parent. Indices are 1-based in Lua, like every Lua API. */
#ifndef MP_LUA_H
#define MP_LUA_H

#include <lua.h>
#include <lauxlib.h>
#include <stdint.h>

#include "mp_common.h"

#define MP_MAXDIM 8
#define MP_TENSOR_MT "mechprobe.Tensor"

/* One storage per block of memory: the Tensor that made it and every view
 * derived from it (directly or through other views) share it, each holding a
 * reference. Invalidating it (the model closed, its parameter memory replaced,
 * a hook returned) clears `data` once for all of them: every access checks
 * the storage first and raises "Tensor is no longer valid (<why>)". The
 * struct (and owned data) is freed when the last reference goes. */
typedef struct mp_storage {
    float *data;     /* NULL once invalidated */
    size_t n;        /* floats */
    int refs;
    int external;    /* data not owned (never freed by the storage) */
    const char *why; /* once invalidated: why the data went (a static string), else NULL */
} mp_storage;

typedef struct {
    mp_storage *st; /* NULL once released (closed or collected) */
    float *data;    /* st->data + offset, meaningful only while st->data is non-NULL */
    int ndim;
    int64_t shape[MP_MAXDIM];
    size_t numel;
} mp_tensor;

/* Pushes a new zero-filled tensor of the given shape (error on overflow/OOM). */
mp_tensor *mp_lua_tensor_new(lua_State *L, int ndim, const int64_t *shape);
/* Pushes a new tensor copying `data`. */
mp_tensor *mp_lua_tensor_from(lua_State *L, int ndim, const int64_t *shape, const float *data);
/* A storage over external memory (n floats; not freed by the storage), with
 * one reference, the caller's: raises on OOM. Keep it while the memory lives,
 * push Tensors on it with mp_lua_tensor_on, and when the memory goes call
 * mp_lua_storage_invalidate then mp_lua_storage_release. */
mp_storage *mp_lua_storage_external(lua_State *L, float *data, size_t n);
/* Clears the storage's data for every Tensor on it; why: a static string. Idempotent. */
void mp_lua_storage_invalidate(mp_storage *st, const char *why);
/* Drops one reference (NULL: nothing); frees the storage after the last. */
void mp_lua_storage_release(mp_storage *st);
/* Pushes a Tensor on st (a new reference): `off` floats in, with the given
 * shape (checked: it must fit in st). The Tensor's user value is nil. */
mp_tensor *mp_lua_tensor_on(lua_State *L, mp_storage *st, size_t off, int ndim, const int64_t *shape);
/* The reason given for hook views (invalidated when their callback returns). */
#define MP_TENSOR_WHY_HOOK "hook views live only during the callback; use :clone()"
/* luaL_checkudata with a clear error; also rejects a released/detached tensor. */
mp_tensor *mp_lua_tensor_check(lua_State *L, int idx);
mp_tensor *mp_lua_tensor_test(lua_State *L, int idx);
/* Accepts a Tensor or a (nested) Lua table of numbers at idx and returns a
 * tensor (pushing a new one onto the stack if it had to convert). */
mp_tensor *mp_lua_tensor_arg(lua_State *L, int idx);

/* The integer at idx, checked before any cast: a number (or numeric string)
 * with an integral value in lo..hi; otherwise an error naming `what` and the
 * value ("d_model = 1099511627776 is out of range (0..2147483647)", "tokens[2]
 * must be an integer (got 1.7)"). */
lua_Integer mp_lua_checkint(lua_State *L, int idx, const char *what, lua_Integer lo, lua_Integer hi);
/* ---- options tables (lua/lopt.c): the one reader for every function ----
 * idx is the stack index of the options table (0 or nil: no options); fn
 * names the function in messages. mp_lua_opt_check rejects a non-table and
 * every key not in `known` (NULL-terminated): "fn: unknown option 'key'".
 * The getters return def for an absent key and raise "fn: option 'key' must
 * be a number, got string" for a value of the wrong type; booleans are
 * true/false only (a number is an error). */
void mp_lua_opt_check(lua_State *L, int idx, const char *fn, const char *const *known);
/* Pushes opts[key] (nil without options); returns its type. */
int mp_lua_opt_get(lua_State *L, int idx, const char *key);
/* Pushes opts[key] and returns 1 when present and of Lua type `type`; 0
 * (nothing pushed) when absent; error when of another type. */
int mp_lua_opt_type(lua_State *L, int idx, const char *fn, const char *key, int type);
/* An integer checked as mp_lua_checkint ("fn: key = 5 is out of range (0..4)";
 * fn NULL: "option 'key' = 5 is out of range (0..4)"). */
lua_Integer mp_lua_opt_int(lua_State *L, int idx, const char *fn, const char *key, lua_Integer def, lua_Integer lo,
                           lua_Integer hi);
lua_Number mp_lua_opt_num(lua_State *L, int idx, const char *fn, const char *key, lua_Number def);
int mp_lua_opt_bool(lua_State *L, int idx, const char *fn, const char *key, int def);
/* A string; pushes it (nil when absent), so that it stays alive while the
 * caller's frame does (a string made by an __index metamethod is in no table). */
const char *mp_lua_opt_str(lua_State *L, int idx, const char *fn, const char *key, const char *def);
/* One of names[] (NULL-terminated): its index; "fn: key must be one of "a", "b" (got "c")". */
int mp_lua_opt_enum(lua_State *L, int idx, const char *fn, const char *key, int def, const char *const *names);
/* Pushes the comma-joined globs of opts[key] (a string or a list of strings) or def. */
const char *mp_lua_opt_globs(lua_State *L, int idx, const char *fn, const char *key, const char *def);

/* Raises a Lua error carrying mp_last_error() (for a failed mp_status): a
 * string, also kept in the registry under MP_LUA_INPUT_ERROR so that the CLI
 * can tell a bad file or argument (printed without a traceback) from an error
 * in the script. */
#define MP_LUA_INPUT_ERROR "mechprobe.input_error"
int mp_lua_fail(lua_State *L, mp_status s);

/* Registration of each part of the module into the table at the stack top. */
void mp_lua_open_tensor(lua_State *L);
void mp_lua_open_h5(lua_State *L);
/* mp.output(path): atomic multi-step outputs (lua/lout.c). */
void mp_lua_open_output(lua_State *L);
void mp_lua_open_model(lua_State *L);
/* mp.tasks: the synthetic task generators (lua/ltasks.c). */
void mp_lua_open_tasks(lua_State *L);

/* mp.analyze (lua/lanalyze.c) and mp.plot (lua/lplot.c). */
void mp_lua_open_analyze(lua_State *L);
void mp_lua_open_plot(lua_State *L);
/* mp.analyze.probe: linear / logistic probes (lua/lprobe.c); after mp_lua_open_analyze. */
void mp_lua_open_probe(lua_State *L);
/* mp.mpi: ranks, collectives and sweeps under mpirun (lua/lmpi.c). */
void mp_lua_open_mpi(lua_State *L);
/* mp.mtd: in-context estimators of MTD mixture weights (lua/lmirror.c). */
void mp_lua_open_mirror(lua_State *L);
/* mp.view: interactive HTML pages of run files and results folders (lua/lview.c). */
void mp_lua_open_view(lua_State *L);

/* Training (lua/ltrain.c): mp.optim.adamw{...} -> Optimizer userdata
 * ("mechprobe.Optimizer") wrapping an mp_adamw; registered into the `mp`
 * table by mp_lua_open_model. */
#define MP_OPTIM_MT "mechprobe.Optimizer"
struct mp_adamw;
void mp_lua_open_train(lua_State *L);
struct mp_adamw *mp_lua_optim_check(lua_State *L, int idx);
/* Pushes a new Optimizer taking over *state (moments, step, hyper-parameters). */
struct mp_adamw *mp_lua_optim_push(lua_State *L, const struct mp_adamw *state);
/* Reads lr, beta1, beta2, eps, weight_decay, min_lr, grad_clip, warmup,
 * total_steps from the table at t over the values already in *hp. */
void mp_lua_adamw_params(lua_State *L, int t, void *hp /* mp_adamw_params * */);

/* luaopen for `require "mechprobe"` and the global `mp`. */
int luaopen_mechprobe(lua_State *L);

#endif
