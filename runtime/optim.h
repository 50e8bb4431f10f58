/* optim.h — AdamW exactly as torch.optim.AdamW defines it (bias correction,
 * decoupled weight decay lr*wd*param applied to 2-D weights only: embed,
 * unembed and the linear weights, never norm weights or biases), the learning
 * rate schedule (linear warmup, then cosine decay to min_lr) and global-norm
 * gradient clipping (torch.nn.utils.clip_grad_norm_). The moments live in flat
 * buffers laid out like the model's parameters (mp_params_layout). */
#ifndef MP_OPTIM_H
#define MP_OPTIM_H

#include "model.h"

typedef struct {
    float lr;           /* peak learning rate */
    float beta1, beta2, eps;
    float weight_decay;
    float min_lr;       /* end of the cosine; < 0: 0.1 * lr */
    int warmup;         /* steps of linear warmup (lr * (s+1)/warmup) */
    int total_steps;    /* end of the cosine decay; 0: constant lr after warmup */
    float grad_clip;    /* max global gradient norm; 0: no clipping */
} mp_adamw_params;

/* mechprobe's one set of optimizer defaults, those of its training loop
 * (mpi/trainloop.h) and of every probe: lr 1e-3, betas (0.9, 0.95), eps 1e-8,
 * weight_decay 0.1, grad_clip 1.0; min_lr 0.1 lr; no warmup, no decay
 * (total_steps 0). torch.optim.AdamW's own defaults differ in betas (0.9,
 * 0.999), weight_decay 0.01 and no clipping: set them to compare with it. */
mp_adamw_params mp_adamw_params_default(void);
/* MP_ERR_ARG naming the first hyper-parameter out of range. */
mp_status mp_adamw_params_check(const mp_adamw_params *hp);

typedef struct mp_adamw {
    mp_adamw_params hp;
    size_t n;           /* floats in m and v (0 until sized) */
    float *m, *v;       /* first and second moments, parameter layout */
    long step;          /* updates taken so far */
} mp_adamw;

/* Sizes (allocates zeroed moments for) n floats, or re-zeroes; step = 0.
 * *o must be zeroed (or initialised) before its first use: old moments are freed. */
mp_status mp_adamw_init(mp_adamw *o, const mp_adamw_params *hp, size_t n);
void mp_adamw_free(mp_adamw *o);

/* Learning rate of update number `step` (0-based: the first update is 0):
 * warmup: lr * (step+1) / warmup while step < warmup; then cosine from lr to
 * min_lr over [warmup, total_steps), min_lr afterwards. */
double mp_lr_at(const mp_adamw_params *hp, long step);

/* Global L2 norm of the gradient (accumulated in double); when max_norm > 0
 * and the norm exceeds it, scales g by max_norm / (norm + 1e-6) as torch does.
 * Returns the norm before clipping. */
double mp_grad_clip(float *g, size_t n, float max_norm);

/* One AdamW update of n floats p in place from gradients g (each multiplied
 * by gscale: a clipping factor, 1 for none), with their moments m and v, as
 * update number `step` (1-based: the bias corrections use it) at learning
 * rate lr; decay: apply the decoupled weight decay hp->weight_decay. The
 * model's update below, the optimizers over script Tensors (lua/ltrain.c) and
 * SAE training (runtime/sae_train.c; weight_decay 0: torch.optim.Adam) all
 * step through this. */
void mp_adamw_step(const mp_adamw_params *hp, long step, double lr, float *p, float *m, float *v, const float *g,
                   float gscale, size_t n, int decay);

/* One AdamW update of the model's parameters from gradients g (same layout as
 * m->owned), at learning rate lr; increments o->step first (torch: step t
 * starts at 1). The model must own its parameters; o must be sized to
 * mp_config_n_params. */
void mp_adamw_update(mp_adamw *o, mp_model *m, const float *g, double lr);

#endif
