/* train.h — the training step: the training-mode forward (mp_model_forward
 * with an mp_acts store, hooks live), masked cross-entropy, the backward pass
 * through every op, gradient accumulation, clipping and the AdamW update.
 *
 * Loss: mean of -log p(target) over the positions whose target is >= 0
 * (target -1 is ignored). With gradient accumulation over `accum`
 * micro-batches the step's loss and gradient are the mean of the micro-batch
 * ones. Hook edits made during training are part of the forward (the stored
 * activations are the edited ones); the backward treats each edit as the
 * identity (straight-through). */
#ifndef MP_TRAIN_H
#define MP_TRAIN_H

#include "model.h"
#include "optim.h"

/* Gradients: the parameter layout (mp_params_layout) over one allocation. */
typedef struct {
    mp_params g;
    float *mem;
    size_t n;
} mp_grads;

mp_status mp_grads_init(mp_grads *g, const mp_config *c);
void mp_grads_zero(mp_grads *g);
void mp_grads_free(mp_grads *g);

/* Validates targets [B*T] (each -1 or in [0, vocab)); MP_ERR_ARG naming the
 * first bad one. */
mp_status mp_targets_check(const mp_config *c, const int *targets, int B, int T);

/* Forward in training mode into acts (sized B x T), loss into *loss, then the
 * backward: gradients ACCUMULATED into g, scaled by grad_scale (the gradient
 * of grad_scale * loss). *n_counted (may be NULL) receives the number of
 * counted targets; with none, loss is 0 and nothing is accumulated. */
mp_status mp_model_forward_backward(const mp_model *m, const int *tokens, const int *targets, int B, int T,
                                    const mp_hooks *hooks, mp_acts *acts, mp_grads *g, float grad_scale,
                                    float *loss, int *n_counted);

/* Loss only (no gradient), through the inference forward; logits scratch is
 * allocated internally. */
mp_status mp_model_loss(const mp_model *m, const int *tokens, const int *targets, int B, int T,
                        const mp_hooks *hooks, float *loss);

/* Data-parallel gradient reduction, implemented outside the runtime (mpi/):
 * every rank runs mp_train_step on its shard of the global batch with the
 * same sync. Before the forward, `counts` sums the per-micro-batch target
 * counts over the ranks (in place), so each rank scales its gradient by its
 * share of the global count. On the last micro-batch `ready` is called as the
 * backward finishes each block's gradients (layer n_layer-1 .. 0), then with
 * layer -1 when the rest (embeddings, final norm, unembed) is final, so the
 * reduction of a block can overlap the backward of the blocks below it.
 * `finish` completes the reduction: g holds the sum over the ranks and *loss
 * (this rank's share of the step loss on entry) the global step loss. Every
 * rank then clips and updates identically. */
typedef struct mp_grad_sync {
    void *user;
    mp_status (*counts)(void *user, int64_t *counts, int n);
    mp_status (*ready)(void *user, mp_grads *g, const mp_config *c, int layer);
    mp_status (*finish)(void *user, mp_grads *g, double *loss);
} mp_grad_sync;

/* Workspace of mp_train_step, reusable across steps (resized as needed). */
typedef struct {
    mp_grads grads;
    mp_acts acts;
    double grad_norm;   /* last step, before clipping */
    double lr;          /* last step */
    const mp_grad_sync *sync; /* NULL: one process; set by the caller per step */
} mp_train_ws;

void mp_train_ws_free(mp_train_ws *ws);

/* One optimizer step on tokens/targets [B, T]: the batch is split into
 * `accum` micro-batches (B % accum == 0), gradients averaged, clipped to
 * opt->hp.grad_clip, and AdamW applied at mp_lr_at(&opt->hp, opt->step).
 * Copies mapped parameters first (mp_model_make_owned) and sizes the
 * optimizer's moments on first use. *loss: the step's mean loss.
 * With ws->sync, tokens/targets are this rank's shard and the step is the
 * global one: micro-batch a is the union of every rank's a-th micro-batch, its
 * loss the mean over all of its counted targets (with accum 1 exactly the
 * single-process step on the whole global batch). A model on a device steps
 * there and may keep the updated weights and opt's moments there: call
 * mp_model_sync (model.h) before reading either on the host, and before
 * freeing opt while the model lives on. */
mp_status mp_train_step(mp_model *m, mp_adamw *opt, mp_train_ws *ws, const int *tokens, const int *targets,
                        int B, int T, int accum, const mp_hooks *hooks, float *loss);

/* Loss curve of a training run (stored in a checkpoint's /train group). */
typedef struct {
    size_t n, cap;
    int32_t *step;      /* optimizer step after the update (1-based) */
    float *loss;        /* training loss of that step */
    float *lr;          /* learning rate used */
    double *tokens;     /* tokens seen so far */
    double *wall;       /* seconds since the run began (cumulative over resumes) */
    size_t n_eval, cap_eval;
    int32_t *eval_step; /* evaluation points */
    float *eval_loss;
} mp_train_log;

mp_status mp_train_log_add(mp_train_log *log, int32_t step, float loss, float lr, double tokens, double wall);
mp_status mp_train_log_add_eval(mp_train_log *log, int32_t step, float loss);
void mp_train_log_free(mp_train_log *log);

#endif
