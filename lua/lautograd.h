/* lautograd.h — the hooks between the Lua Tensor (lua/ltensor*.c) and the
 * autograd core (analyze/autograd.h), implemented in lua/lautograd.c: a
 * Tensor's userdata is an mp_tensor followed by its autograd node (NULL:
 * untracked), and the binding of each differentiable op, after it pushed its
 * result, records the op when one of its Tensor inputs is tracked (a pointer
 * test: untracked Tensors cost nothing more). In-place writes go through
 * mp_lua_ag_inplace. Also used by lua/lgrad.c (loss = fn by autograd) and
 * lua/ltrain.c (optimizers over script Tensors). */
#ifndef MP_LAUTOGRAD_H
#define MP_LAUTOGRAD_H

#include "mp_lua.h"
#include "autograd.h"

/* The userdata of every Lua Tensor. */
typedef struct {
    mp_tensor t;
    mp_ag_node *ag; /* NULL: no gradient tracked */
} mp_lua_tensor_ud;

/* The node of the Tensor at idx when grad mode is on (NULL: not a Tensor,
 * untracked, or grad mode off). */
mp_ag_node *mp_lua_ag_node(lua_State *L, int idx);
/* 1 when grad mode is on and the Tensor at i1 or i2 (0: none) is tracked. */
int mp_lua_ag_want(lua_State *L, int i1, int i2);
/* The result at the top (a Tensor) = op(inputs at stack indices idx[0..n),
 * with values x[0..n)): recorded when one of them is tracked; fn names the op
 * in errors. */
void mp_lua_ag_record(lua_State *L, const mp_ag_args *a, int n, const int *idx, const mp_tensor *const *x,
                      const char *fn);
/* Shorthand for one or two inputs (i2 0: one). */
void mp_lua_ag_record2(lua_State *L, mp_ag_op op, int i1, const mp_tensor *x1, int i2, const mp_tensor *x2,
                       const char *fn);
/* For an op without a gradient rule: raises when grad mode is on and the
 * Tensor at i1 or i2 (0: none) is tracked (rather than a silently wrong gradient). */
void mp_lua_ag_refuse(lua_State *L, int i1, int i2, const char *fn);
/* Before an in-place write to the Tensor at idx: raises when it requires a
 * gradient under grad mode (torch's rule), else bumps its storage's version
 * (so that a backward that saved it refuses). */
void mp_lua_ag_inplace(lua_State *L, int idx, const char *fn);
/* The leaf node of the Tensor at idx, made when missing (requires_grad_). */
mp_ag_node *mp_lua_ag_leaf(lua_State *L, int idx);
/* t.grad, t.requires_grad, t.is_leaf, t.grad_fn for mt_index: pushes the field and returns 1, or 0. */
int mp_lua_ag_field(lua_State *L, int idx, const char *k);
/* t.grad = g (nil or a Tensor of t's shape). */
void mp_lua_ag_set_grad(lua_State *L, int idx, int vidx);
/* Releases the node of a Tensor being collected (idempotent). */
void mp_lua_ag_gc(mp_lua_tensor_ud *u);
/* Adds requires_grad_, backward, detach, zero_grad to the methods table at
 * the top, and wraps every method without a gradient rule so that it refuses
 * a tracked Tensor (no silently wrong gradient). */
void mp_lua_ag_methods(lua_State *L);
/* mp.no_grad, mp.is_grad_enabled into the module table at the top. */
void mp_lua_ag_functions(lua_State *L);

#endif
