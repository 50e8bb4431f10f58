/* cuda_select.c — the host side of the CUDA backend that every build has:
 * whether a device can be used, whether a model fits the backend, which
 * forward calls stay on the CPU, and moving a model between devices
 * (mp_cuda.h). The device work itself is in cuda_model.c and cuda_kernels.cu,
 * built only with CUDA (MP_HAVE_CUDA). */
#include "cuda_internal.h"

#include "attn_variants.h"

#include <string.h>

int mp_cuda_built(void) {
#ifdef MP_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

mp_status mp_cuda_available(void) {
#ifdef MP_HAVE_CUDA
    return mp_cuda_probe();
#else
    return mp_error(MP_ERR_ARG, "this build has no CUDA support (configure with -DMP_CUDA=ON)");
#endif
}

const char *mp_cuda_train_gemma(const mp_config *c) {
    return c->no_pre_norms ? "OLMo 2's block without pre-norms (pre_norms = false)"
           : c->embed_scale ? "Gemma's scaled embedding (embed_scale)" : c->post_norms ? "Gemma 2's post-norms (post_norms)"
           : c->attn_softcap > 0.0f ? "Gemma 2's attention soft cap (attn_softcap)"
           : c->final_softcap > 0.0f ? "Gemma 2's final soft cap (final_softcap)"
           : c->query_pre_attn_scalar > 0.0f ? "Gemma 2's query scale (query_pre_attn_scalar)"
           : c->mlp == MP_MLP_SWIGLU && c->gelu_tanh ? "Gemma's GeGLU (swiglu with gelu_tanh)" : NULL;
}

mp_status mp_cuda_check_model(const mp_config *c, mp_precision p) {
    if (c->attn != MP_ATTN_SOFTMAX)
        return mp_error(MP_ERR_ARG, "the CUDA backend runs softmax attention only; this model's attention variant "
                        "\"%s\" runs on the CPU (device \"cpu\")", mp_attn_name(c->attn));
    if (c->d_head > MP_CUDA_MAX_DHEAD)
        return mp_error(MP_ERR_ARG, "the CUDA backend takes d_head up to %d (this model: %d)", MP_CUDA_MAX_DHEAD,
                        c->d_head);
    if (p != MP_PRECISION_FP32 && p != MP_PRECISION_BF16) return mp_error(MP_ERR_ARG, "unknown precision (%d)", (int)p);
    return MP_OK;
}

const char *mp_cuda_cpu_reason(const mp_model *m, const mp_forward_params *fp) {
    if (!fp) return NULL;
    if (m->cfg.rel_values > 0) return MP_CUDA_RELV_CPU; /* the term is in the CPU's attention only */
    /* backward hooks' forward (grad.c); training steps go to the device whole (mp_train_step) */
    if (fp->acts) return "a training-mode forward (backward hooks, incl_bwd)";
    if (fp->attn_mask) return "a padded batch (attention_mask)";
    if (!fp->hooks) return NULL;
    /* the points whose path only the CPU forward has (the device column of MP_HOOK_TABLE) */
    for (int i = 0; i < MP_HOOK_COUNT; i++) {
        const mp_hook_id id = (mp_hook_id)i;
        if (mp_hook_on_device(id)) continue;
        if (mp_hooks_active(fp->hooks, id, -1)) return mp_hook_suffix[id];
        for (int l = 0; l < m->cfg.n_layer; l++)
            if (mp_hooks_active(fp->hooks, id, l)) return mp_hook_suffix[id];
    }
    return NULL;
}

mp_status mp_model_to_device(mp_model *m, mp_device d, mp_precision p) {
    mp_status st;
    if ((st = mp_model_sync(m))) return st; /* weights (and moments) a device's training steps left newer there */
    if (d == MP_DEVICE_CPU) {
        if (p != MP_PRECISION_FP32 && (st = mp_model_cpu_bf16_check(m))) return st;
        if (m->dev && m->dev_ops) m->dev_ops->release(m);
        m->dev = NULL;
        m->dev_ops = NULL;
        m->device = MP_DEVICE_CPU;
        m->precision = p;
        mp_model_set_bf16_products(m, p == MP_PRECISION_BF16);
        return MP_OK;
    }
    if (d != MP_DEVICE_CUDA) return mp_error(MP_ERR_ARG, "unknown device (%d)", (int)d);
    if ((st = mp_cuda_available())) return st;
    if ((st = mp_cuda_check_model(&m->cfg, p))) return st;
#ifdef MP_HAVE_CUDA
    if ((st = mp_cuda_attach(m, p))) return st;
    m->device = MP_DEVICE_CUDA;
    m->precision = p;
    mp_model_set_bf16_products(m, 0); /* the CPU's products stay float32 */
    return MP_OK;
#else
    return mp_error(MP_ERR_ARG, "this build has no CUDA support (configure with -DMP_CUDA=ON)");
#endif
}

/* the knobs: checked here, set in cuda_model.c (which: 0 loss chunk, 1 attention rows, 2 reader floats) */
static mp_status set_knob(mp_model *m, int which, int value) {
    static const char *const what[3] = {"loss chunk", "attention rows", "reader floats"};
    static const char *const unit[3] = {"rows", "rows", "floats"};
    if (!m || m->device != MP_DEVICE_CUDA || !m->dev)
        return mp_error(MP_ERR_ARG, "%s: the model is not on the cuda device", what[which]);
    if (value < 0)
        return mp_error(MP_ERR_ARG, "%s: %s must be >= 0 (0: automatic), got %d", what[which], unit[which], value);
#ifdef MP_HAVE_CUDA
    mp_cuda_set_knob_dev(m, which, value);
#endif
    return MP_OK;
}

mp_status mp_cuda_loss_chunk(mp_model *m, int rows) { return set_knob(m, 0, rows); }
mp_status mp_cuda_attn_rows(mp_model *m, int rows) { return set_knob(m, 1, rows); }
mp_status mp_cuda_reader_floats(mp_model *m, int floats) { return set_knob(m, 2, floats); }
