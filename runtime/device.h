/* device.h — where a model's forward pass runs (mp_device) and in what
 * precision (mp_precision): the names and parsers every front end uses
 * (CLI --device / --precision, Lua device= / precision=), and the seam through
 * which a backend above runtime/ (backends/cuda/, library mp_cuda) takes over
 * mp_model_forward for a model it holds a copy of. runtime/ itself knows no
 * CUDA: a backend installs m->dev_ops and m->dev (mp_model_to_device in
 * backends/cuda/mp_cuda.h), and model.c calls through them. Two tables make a
 * device: mp_dev_ops (below: its memory, which calls it takes, the forward's
 * and the training step's shells) and mp_exec_ops (exec.h: the forward's
 * steps, walked by the one mp_block_forward), kept in the registry below. */
#ifndef MP_DEVICE_H
#define MP_DEVICE_H

#include "mp_common.h"

typedef enum { MP_DEVICE_CPU = 0, MP_DEVICE_CUDA } mp_device;
typedef enum { MP_PRECISION_FP32 = 0, MP_PRECISION_BF16 } mp_precision;

/* "cpu" / "cuda"; "fp32" / "bf16" */
const char *mp_device_name(mp_device d);
const char *mp_precision_name(mp_precision p);
/* Parses s (exact, lower case); MP_ERR_ARG naming `what` (the option: "--device",
 * "mp.load: device") and the accepted values otherwise. */
mp_status mp_device_parse(const char *s, const char *what, mp_device *out);
mp_status mp_precision_parse(const char *s, const char *what, mp_precision *out);

struct mp_model;
struct mp_kvcache_s;
struct mp_adamw;
struct mp_exec_ops;

/* The layout of mp_dev_ops model.c calls through; a model whose table has
 * another version is refused (MP_ERR_ARG) rather than called. */
#define MP_DEV_OPS_VERSION 1

/* A backend's entry points (backends/cuda/cuda_model.c). */
typedef struct mp_dev_ops {
    int version;      /* MP_DEV_OPS_VERSION */
    const char *name;
    /* The op table its forward walks (exec.h), registered with mp_exec_register. */
    const struct mp_exec_ops *exec;
    /* The reason this call cannot run on the device (it then runs on the CPU,
     * from the host copy of the weights, which stays authoritative), or NULL. */
    const char *(*cpu_reason)(const struct mp_model *m, const void *fp /* mp_forward_params */);
    /* mp_model_forward on the device: same arguments, same results, same hooks. */
    mp_status (*forward)(const struct mp_model *m, const int *tokens, int B, int T, const void *fp, float *logits);
    /* Frees the device copy (m->dev); NULL-safe on m->dev. */
    void (*release)(struct mp_model *m);
    /* mp_train_step on the device (train.h; ws is its mp_train_ws, hooks its
     * mp_hooks), called after mp_train_step's checks, with the model owning its
     * parameters and opt sized: the same step as the CPU's. The updated
     * weights and opt's moments may stay on the device (sync brings them back). */
    mp_status (*train_step)(struct mp_model *m, struct mp_adamw *opt, void *ws, const int *tokens, const int *targets,
                            int B, int T, int accum, const void *hooks, float *loss);
    /* Copies the weights and the last stepped optimiser's moments back to the
     * host where device training steps left them newer; MP_OK at once when the
     * host is current (mp_model_sync). */
    mp_status (*sync)(const struct mp_model *m);
} mp_dev_ops;

/* The registry of the forward's op tables (exec.h), like ggml's backend
 * registry: the CPU's is there from the start; a backend registers its own
 * when it first attaches a model. mp_exec_register: MP_OK, also for a table
 * already registered; MP_ERR_ARG naming what is wrong for a table of another
 * MP_EXEC_OPS_VERSION, without a name, lacking a required op, or whose name
 * another table has; MP_ERR_ARG when the registry (MP_EXEC_MAX tables) is
 * full. Thread-safe. */
#define MP_EXEC_MAX 8
mp_status mp_exec_register(const struct mp_exec_ops *ops);
/* The table registered under name / the first one for device d, or NULL. */
const struct mp_exec_ops *mp_exec_lookup(const char *name);
const struct mp_exec_ops *mp_exec_for_device(mp_device d);

#endif
