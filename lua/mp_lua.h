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

#define MP_TENSOR_MT "mechprobe.Tensor"

/* The Tensor is the C tensor of analyze/tensor.h (mp_tensor, on a shared,
 * reference-counted mp_storage, MP_MAXDIM dims); its Lua userdata holds the
 * struct itself, and lua/ltensor*.c bind the mp_tensor_* functions. */
#include "tensor.h"

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

/* ---- integers (lua/lopt.c): the one reader of every integer from Lua ----
 * A value is accepted when it is a number with an integral value in
 * [lo, hi], checked before any cast; anything else raises one message shape:
 *   "FN: WHAT must be an integer in [LO, HI], got X"
 * WHAT names the value: "argument #N (name)" (mp_lua_arg_int; N as the caller
 * counts, self not counted in a method call), "option 'key'" (mp_lua_opt_int),
 * or the caller's description of an element ("tokens[2]", "option
 * 'positions'[2]"); X is the value as Lua prints it (-1, 1.5, 1e+300, nan) or
 * the type of a non-number (string, nil). fn NULL: no "FN: " prefix. */
lua_Integer mp_lua_int_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo, lua_Integer hi);
/* Pushes the name of argument `arg` (a stack index) of the running C
 * function: "argument #N (name)", N as luaL_argerror counts it (self not
 * counted in a method call m:f(x)); for naming an argument's entries
 * ("argument #1 (shape)[2]") to mp_lua_int_at. */
const char *mp_lua_argname(lua_State *L, int arg, const char *name);
/* Argument `arg` (a stack index) of function fn, called `name` in messages. */
lua_Integer mp_lua_arg_int(lua_State *L, int arg, const char *fn, const char *name, lua_Integer lo, lua_Integer hi);
/* The same, def when the argument is absent or nil. */
lua_Integer mp_lua_arg_optint(lua_State *L, int arg, const char *fn, const char *name, lua_Integer def, lua_Integer lo,
                              lua_Integer hi);
/* An integer in [lo1, hi1] or in [lo2, hi2], in the same shape:
 * "FN: WHAT must be an integer in [-3, -1] or [1, 3], got 0" (an empty range
 * is left out of the message; when both are, "... in [lo2, hi2], got X (the
 * range is empty)", e.g. a dim of a 0-dim Tensor). */
lua_Integer mp_lua_int2_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo1, lua_Integer hi1,
                           lua_Integer lo2, lua_Integer hi2);
/* A 1-based position among n (a dim of an n-dim Tensor, an index along a dim
 * of extent n), or negative counting from the end (-1 the last): an integer
 * in [-n, -1] or [1, n] (with past_end, also n + 1: the position just after
 * the last, e.g. where an empty slice starts); returns it 0-based (0..n-1,
 * or n). Every dim and index argument of the Lua API is read by it. */
lua_Integer mp_lua_index_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer n, int past_end);
/* mp_lua_index_at for argument `arg`, named "argument #N (name)". */
lua_Integer mp_lua_arg_index(lua_State *L, int arg, const char *fn, const char *name, lua_Integer n, int past_end);

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
/* An integer option read by mp_lua_int_at: "fn: option 'key' must be an
 * integer in [0, 4], got 5" (fn NULL: no prefix). */
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

/* ---- sparse autoencoders (lua/lsae.c over runtime/sae.h) ---- */
#define MP_SAE_MT "mechprobe.SAE"
struct mp_sae;
/* The open SAE at idx, or raises ("SAE is closed", or a type error). */
struct mp_sae *mp_lua_sae_check(lua_State *L, int idx);
/* The SAE of the handle at idx, or NULL once closed (a type error otherwise). */
struct mp_sae *mp_lua_sae_peek(lua_State *L, int idx);
/* Pushes a new SAE handle owning s (freed by close or collection). */
void mp_lua_sae_push(lua_State *L, struct mp_sae *s);
/* lsae_splice.c: m:add_sae, reset_saes, saes, run_with_saes (called by mp_lua_open_sae). */
void mp_lua_open_sae_splice(lua_State *L);

/* Registration of each part of the module into the table at the stack top. */
void mp_lua_open_tensor(lua_State *L);
void mp_lua_open_h5(lua_State *L);
/* mp.output(path): atomic multi-step outputs (lua/lout.c). */
void mp_lua_open_output(lua_State *L);
void mp_lua_open_model(lua_State *L);
/* mp.sae: sparse autoencoders (lua/lsae.c). */
void mp_lua_open_sae(lua_State *L);
/* mp.sae.top_contexts / feature_view (lua/lsae_view.c); mp on top, mp.sae in it. */
void mp_lua_open_sae_view(lua_State *L);
/* mp.sae.load and sae:save (lua/lsae_io.c), with mp on the stack's top. */
void mp_lua_open_sae_io(lua_State *L);
void mp_lua_open_sae_train(lua_State *L); /* lsae_train.c: adds to the mp.sae table on top */
/* mp.tasks: the synthetic task generators (lua/ltasks.c). */
void mp_lua_open_tasks(lua_State *L);

/* mp.FactoredMatrix (lua/lfactored.c): TransformerLens's FactoredMatrix. */
void mp_lua_open_factored(lua_State *L);
/* Pushes FactoredMatrix(A, B) of the Tensors at absolute stack indices ia, ib
 * (raises "fn: ..." on shapes that do not chain). */
void mp_lua_factored_push(lua_State *L, int ia, int ib, const char *fn);

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
/* mp.capture{...} (lua/lcapture.c): `mechprobe capture` in one call of
 * mp_capture_run (mpi/capture.h); into the mp table on top. */
void mp_lua_open_capture(lua_State *L);
struct mp_adamw *mp_lua_optim_check(lua_State *L, int idx);
/* Pushes a new Optimizer taking over *state (moments, step, hyper-parameters). */
struct mp_adamw *mp_lua_optim_push(lua_State *L, const struct mp_adamw *state);
/* Reads lr, beta1, beta2, eps, weight_decay, min_lr, grad_clip, warmup,
 * total_steps from the table at t over the values already in *hp. */
void mp_lua_adamw_params(lua_State *L, int t, void *hp /* mp_adamw_params * */);

/* luaopen for `require "mechprobe"` and the global `mp`. */
int luaopen_mechprobe(lua_State *L);

#endif
