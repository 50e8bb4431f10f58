/* ltensor.h — internal interface between the files of the Lua Tensor type, a
 * binding of the C tensor core analyze/tensor.h (the userdata holds an
 * mp_tensor; the numeric work is mp_tensor_*): lua/ltensor.c (userdata,
 * constructors, element access, views, the metatable), lua/ltensor_ops.c
 * (shape ops, slicing, cat/stack, matmul, ranges) and lua/ltensor_math.c
 * (broadcasting arithmetic, elementwise functions, softmax, reductions over
 * any dim or a list of dims, topk, cosine similarity) and lua/ltensor_index.c
 * (comparisons, where/masked_fill, gather, diagonal, tril/triu, sort, svd, eig/eigh,
 * random tensors). Not part of mp_lua.h: nothing outside
 * these files needs it. */
#ifndef MP_LTENSOR_H
#define MP_LTENSOR_H

#include "mp_lua.h"

/* "[2,3]" into buf (at most n bytes). */
#define mp_lua_tensor_shape_str mp_tensor_shape_str
/* Pushes a new, empty ({0}) Tensor userdata for an mp_tensor_* call to fill. */
mp_tensor *mp_lua_tensor_push(lua_State *L);
/* Raises the core's message (mp_last_error) for a failed st, prefixed with
 * "fn: " when fn is not NULL; nothing for MP_OK. */
void mp_lua_tensor_try(lua_State *L, mp_status st, const char *fn);
/* The Tensor at the top, when it shares the storage of the Tensor at pidx (a
 * view), gets pidx's user value (what keeps the viewed memory alive). */
void mp_lua_tensor_keep(lua_State *L, int pidx);
/* A dim argument at arg: 1..ndim, or negative counting from the end (-1 the
 * last), read by mp_lua_arg_index; returns it 0-based, or raises "fn:
 * argument #1 (dim) must be an integer in [-3, -1] or [1, 3], got 4".
 * ndim_extra widens the range for functions that insert a dim (unsqueeze,
 * stack: 1..ndim+1, -1 meaning a new last dim). */
int mp_lua_tensor_dim(lua_State *L, int arg, int ndim, int ndim_extra, const char *fn);
/* Pushes a view of the Tensor at stack index pidx: `off` floats in, with the
 * given shape (checked to fit). It shares the parent's storage, so it stays
 * valid exactly as long as every other Tensor on that storage, and it keeps
 * the parent's user value (a parameter view's model) alive. */
mp_tensor *mp_lua_tensor_view(lua_State *L, int pidx, size_t off, int ndim, const int64_t *shape);
/* Pushes nested tables of the 0-based indices idx (row-major, of that shape) as
 * 1-based integers; a plain integer for a 0-dim shape. */
void mp_lua_tensor_push_indices(lua_State *L, const int64_t *idx, int ndim, const int64_t *shape);

/* Reads a shape from a table at `arg` or from integers arg..top (extents of
 * at least 0), as mp.zeros does; returns its rank. */
int mp_lua_tensor_shape_args(lua_State *L, int arg, int64_t *shape, const char *fn);

/* Add the methods of ltensor_ops.c / ltensor_math.c / ltensor_index.c to the
 * methods table at the stack top; the metamethods (__add, __pow, ...) to the
 * metatable at the top. */
void mp_lua_tensor_ops_methods(lua_State *L);
void mp_lua_tensor_index_methods(lua_State *L);
void mp_lua_tensor_math_methods(lua_State *L);
void mp_lua_tensor_math_metamethods(lua_State *L);
/* Add mp.matmul, mp.cat, ... to the module table at the stack top. */
void mp_lua_tensor_ops_functions(lua_State *L);
void mp_lua_tensor_math_functions(lua_State *L);
void mp_lua_tensor_index_functions(lua_State *L);

#endif
