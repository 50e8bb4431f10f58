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

typedef struct mp_storage {
    float *data;
    size_t n;       /* floats */
    int refs;
    int external;   /* data not owned (never freed by the storage) */
    const char *why; /* once detached: why the data went (a static string), else NULL */
} mp_storage;

typedef struct {
    mp_storage *st; /* NULL once released */
    float *data;    /* st->data + offset */
    int ndim;
    int64_t shape[MP_MAXDIM];
    size_t numel;
    const char *why; /* once detached: why (a static string); NULL: closed or never detached */
} mp_tensor;

/* Pushes a new zero-filled tensor of the given shape (error on overflow/OOM). */
mp_tensor *mp_lua_tensor_new(lua_State *L, int ndim, const int64_t *shape);
/* Pushes a new tensor copying `data`. */
mp_tensor *mp_lua_tensor_from(lua_State *L, int ndim, const int64_t *shape, const float *data);
/* Pushes a tensor that views external memory (valid only while that memory
 * is: call mp_lua_tensor_detach when it goes so later use raises an error). */
mp_tensor *mp_lua_tensor_wrap(lua_State *L, int ndim, const int64_t *shape, float *data);
/* Detaches t and every view made of it; a later use raises "Tensor is no
 * longer valid (<why>)", why a static string ("the model was closed"). */
void mp_lua_tensor_detach(mp_tensor *t, const char *why);
/* The reason given for hook views (detached when their callback returns). */
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
