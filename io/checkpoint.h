/* checkpoint.h — HDF5 training checkpoints in DESIGN.md's schema:
 *   /         attrs format="mechprobe.checkpoint", version=1
 *   /config   attrs: the model config (d_model, n_layer, n_head, n_kv_head,
 *             d_head, d_mlp, vocab, ctx, tied, rope_theta, norm_eps, norm, mlp, pos)
 *   /params/<name>   float32, DESIGN.md names, PyTorch [out,in] layout
 *   /optim    attrs: step and the AdamW hyper-parameters (lr, beta1, beta2, eps,
 *             weight_decay, min_lr, warmup, total_steps, grad_clip);
 *             /optim/m/<name>, /optim/v/<name> float32, the parameter's shape
 *   /train    datasets step (int32), loss, lr (float32), tokens, wall_s
 *             (float64), eval_step, eval_loss; attrs n_steps, tokens
 * Written atomically (temporary name, renamed on success); loading validates
 * every shape against /config and every size against the data in the file,
 * in a child process (untrusted input). */
#ifndef MP_CHECKPOINT_H
#define MP_CHECKPOINT_H

#include "model.h"
#include "optim.h"
#include "train.h"

/* opt and log may be NULL (or an optimizer with n == 0: no /optim). */
mp_status mp_checkpoint_save(const char *path, const mp_model *m, const mp_adamw *opt, const mp_train_log *log);

/* Loads a checkpoint into a new owned model. With opt non-NULL, the optimizer
 * state is loaded when /optim exists (*opt zeroed otherwise; free it with
 * mp_adamw_free); with log non-NULL, the /train curve (empty when absent). */
mp_status mp_checkpoint_load(const char *path, mp_model **out, mp_adamw *opt, mp_train_log *log);

/* Limits of the child process a checkpoint is parsed in (see the README's
 * "Trust" section): the file is read by a separate process, a fresh image of
 * this program (a forked copy where it cannot be started), its address space
 * limited to what the declared, verified sizes need plus 512 MiB, no HDF5
 * plugins; it streams the result back. A child that crashes, or outlives the
 * time limit, becomes MP_ERR_FORMAT "PATH: corrupt HDF5 checkpoint: ...". */
enum { MP_CKPT_FAULT_NONE = 0, MP_CKPT_FAULT_CRASH, MP_CKPT_FAULT_HANG };
typedef struct {
    double timeout_s; /* 0: MECHPROBE_LOAD_TIMEOUT, else 5 s + 1 s per 16 MiB of file (x4 under a sanitizer) */
    int child_fault;  /* tests: MP_CKPT_FAULT_CRASH / _HANG: the reader faults before it parses */
    int fork_only;    /* tests: the reader is a forked copy of this process (the fallback) */
} mp_checkpoint_guard;

/* mp_checkpoint_load with explicit limits (g may be NULL). */
mp_status mp_checkpoint_load_guarded(const char *path, mp_model **out, mp_adamw *opt, mp_train_log *log,
                                     const mp_checkpoint_guard *g);

/* 1 when the file starts with the HDF5 signature, 0 otherwise (or unreadable). */
int mp_file_is_hdf5(const char *path);

/* mp_model_load / mp_model_save and their options: model_io.h. */
#include "model_io.h"

#endif
