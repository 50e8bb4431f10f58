/* backward.h — internal to runtime/: the one CPU backward of the model, a walk
 * in reverse over the activations a training-mode forward stored (mp_acts),
 * from a gradient at the logits down to the embeddings. Two switches: weight
 * gradients (accumulated into a mp_grads, as mp_train_step needs) and backward
 * hooks (fired, and free to edit, at every hook point in reverse firing order,
 * as mp_model_backward_acts needs). train.c and grad.c both call it. */
#ifndef MP_BACKWARD_H
#define MP_BACKWARD_H

#include "train.h"

typedef struct {
    mp_grads *grads;            /* weight gradients accumulate here; NULL: input gradients only */
    const int *tokens;          /* [B*T] the forward's tokens (token embedding gradient; with grads) */
    const mp_grad_sync *sync;   /* with grads: each block's gradients handed to sync->ready once final */
    const mp_hooks *hooks;      /* backward hooks; NULL: none */
} mp_backward_params;

/* Backward from dlogits [B,T,V] (read only; may be A->logits) through the
 * store A of a forward with fp.acts = A on the same model (its scratch buffers
 * are overwritten). MP_ERR_HOOK when a callback aborts, MP_ERR_NOMEM, or what
 * sync->ready returns. */
mp_status mp_backward(const mp_model *m, mp_acts *A, const float *dlogits, const mp_backward_params *bp);

#endif
