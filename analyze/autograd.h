/* autograd.h — reverse-mode automatic differentiation over the C tensor core
 * (analyze/tensor.h), as torch.autograd: an op applied to tensors of which one
 * or more requires a gradient is recorded as a node (mp_ag_record: which op,
 * its arguments, the input nodes, the tensors its backward rule needs), and
 * mp_ag_backward walks the graph from a result back to the leaves in reverse
 * topological order, applying one backward rule per op (written once, here)
 * and accumulating into each leaf's `grad`. Untracked tensors have no node:
 * nothing is recorded and nothing costs extra.
 *
 * Saved tensors hold a reference on their storage; a version counter per
 * saved storage (mp_ag_bump, called by every in-place write) lets backward
 * refuse, as torch does, a gradient that would read a tensor modified in place
 * after the op used it. Backward frees the saved tensors unless asked to keep
 * them (retain): a second backward through a freed graph is an error.
 *
 * Not thread-safe (one global grad mode and version registry), as the Lua
 * binding that uses it (lua/lautograd.c). */
#ifndef MP_ANALYZE_AUTOGRAD_H
#define MP_ANALYZE_AUTOGRAD_H

#include "tensor.h"

typedef enum {
    MP_AG_LEAF,
    MP_AG_ADD, MP_AG_SUB, MP_AG_MUL, MP_AG_DIV, MP_AG_POW, /* 2 inputs, broadcast; a number is a 0-dim input */
    MP_AG_NEG, MP_AG_EXP, MP_AG_LOG, MP_AG_SQRT, MP_AG_ABS, MP_AG_TANH, MP_AG_RELU, MP_AG_SIGMOID,
    MP_AG_CLAMP,       /* lo, hi */
    MP_AG_SUM,         /* dims[ndims] (ndims 0: every dim), keepdim; mean: divided by the count */
    MP_AG_MEAN,
    MP_AG_AMAX,        /* max/min over dims[ndims] (0: all): the gradient is shared among ties */
    MP_AG_AMIN,
    MP_AG_EXT_DIM,     /* max/min over one dim d with its indices (idx, the reduced shape's numel) */
    MP_AG_SOFTMAX,     /* along d */
    MP_AG_LOG_SOFTMAX,
    MP_AG_MATMUL,      /* torch.matmul's broadcasting, 1-D sides */
    MP_AG_DOT,         /* two 1-D tensors -> 0-dim */
    MP_AG_VIEW,        /* same elements in a new shape (reshape, squeeze, flatten, clone, ...) */
    MP_AG_PERMUTE,     /* perm[ndim of the input] */
    MP_AG_SLICE,       /* d, first, count, step (select: count 1, the dim dropped) */
    MP_AG_INDEX_SELECT, /* d, idx[nidx] */
    MP_AG_GATHER,      /* d, idx (the output's numel of them, row-major) */
    MP_AG_CAT,         /* d; n inputs */
    MP_AG_STACK,       /* d; n inputs */
    MP_AG_WHERE,       /* inputs mask, a, b (no gradient to the mask) */
    MP_AG_MASKED_FILL, /* inputs t, mask */
    MP_AG_NORM,        /* p (finite, > 0), dims[ndims] (0: all), keepdim */
    MP_AG_N_OPS
} mp_ag_op;

/* The arguments of a recorded op (the fields its comment above names). */
typedef struct {
    mp_ag_op op;
    int d;
    int dims[MP_MAXDIM], ndims, keepdim;
    int perm[MP_MAXDIM];
    double p, lo, hi;
    int64_t first, count, step;
    const int64_t *idx; /* copied by mp_ag_record */
    size_t nidx;
} mp_ag_args;

typedef struct mp_ag_node mp_ag_node;

/* The op's name as torch spells its backward node's op ("mul", "log_softmax"). */
const char *mp_ag_op_name(mp_ag_op op);

/* Grad mode (torch.is_grad_enabled): on at start. set returns the old mode. */
int mp_ag_enabled(void);
int mp_ag_set_enabled(int on);

/* The number of nodes alive (0: no Tensor requires grad anywhere, nothing to record). */
size_t mp_ag_live(void);
/* A new leaf (requires grad) for a tensor of that shape; one reference, the caller's. */
mp_status mp_ag_leaf(mp_ag_node **out, int ndim, const int64_t *shape);
/* Records y = op(x[0..n)): in[i] the node of x[i] (NULL: a constant, no
 * gradient), x[i] the values (a 0-dim tensor without storage is a number,
 * copied), y the result. *out gets the new node (one reference, the caller's);
 * NULL (and MP_OK) when no in[i] is set. Errors: an op that has no gradient
 * rule for these arguments (pow with a tracked exponent and base <= 0 is
 * fine; norm with p = 0 or inf is not), out of memory. */
mp_status mp_ag_record(mp_ag_node **out, const mp_ag_args *a, int n, mp_ag_node *const *in,
                       const mp_tensor *const *x, const mp_tensor *y);
/* A new reference / dropping one (NULL: nothing). */
mp_ag_node *mp_ag_ref(mp_ag_node *nd);
void mp_ag_unref(mp_ag_node *nd);

int mp_ag_is_leaf(const mp_ag_node *nd);
mp_ag_op mp_ag_node_op(const mp_ag_node *nd);
/* A leaf's accumulated gradient (NULL when none: never reached, or cleared). */
mp_tensor *mp_ag_grad(mp_ag_node *leaf);
/* Replaces a leaf's gradient by g (a new reference on g's storage; NULL: cleared).
 * g must have the leaf's shape. */
mp_status mp_ag_set_grad(mp_ag_node *leaf, const mp_tensor *g);

/* Backward from root: grad (root's shape) or, NULL, 1 for a root with one
 * element. Leaves reached get their gradient added to `grad`. Checked before
 * anything is accumulated: the graph was not freed by an earlier backward,
 * and no tensor it saved was modified in place since. retain: keep the saved
 * tensors (a later backward may go through the graph again). */
mp_status mp_ag_backward(mp_ag_node *root, const mp_tensor *grad, int retain);

/* Every in-place write to a storage calls this: a storage saved for a
 * backward gets its version incremented (nothing to do otherwise). */
void mp_ag_bump(const mp_storage *st);
/* 1 when st is saved by a recorded op whose graph still holds it. */
int mp_ag_saved(const mp_storage *st);

#endif
