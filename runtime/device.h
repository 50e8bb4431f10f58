/* device.h — where a model's forward pass runs (mp_device) and in what
 * precision (mp_precision): the names and parsers every front end uses
 * (CLI --device / --precision, Lua device= / precision=), and the seam through
 * which a backend above runtime/ (runtime/cuda/, library mp_cuda) takes over
 * mp_model_forward for a model it holds a copy of. runtime/ itself knows no
 * CUDA: a backend installs m->dev_ops and m->dev (mp_model_to_device in
 * runtime/cuda/mp_cuda.h), and model.c calls through them. */
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

/* A backend's entry points (runtime/cuda/cuda_model.c). */
typedef struct mp_dev_ops {
    const char *name;
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

#endif
