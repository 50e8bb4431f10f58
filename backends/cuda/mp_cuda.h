/* mp_cuda.h — the CUDA backend (library mp_cuda, backends/cuda/): moving a model
 * to the GPU and back, and the host-side checks that decide what may run
 * there. Once a model is on the device, mp_model_forward (and everything built
 * on it: generation, capture, Lua hooks, interventions) runs there through
 * m->dev_ops (runtime/device.h), firing the same hooks (the C interventions as
 * device kernels, readers from a copy stream, other hooks on host copies of
 * the active points); a call that needs a path only the CPU has runs on the CPU
 * from the host weights (mp_cuda_cpu_reason). mp_train_step of a model on the
 * device runs there too (fp32 or bf16 mixed precision): forward, backward,
 * clipping and AdamW, the weights and the optimiser's moments kept on the
 * device until mp_model_sync brings them back.
 *
 * Built in every configuration: without CUDA (MP_CUDA=OFF or no nvcc) asking
 * for the device fails with "this build has no CUDA support (configure with
 * -DMP_CUDA=ON)". */
#ifndef MP_CUDA_H
#define MP_CUDA_H

#include "model.h"

/* 1 when this build has the CUDA backend. */
int mp_cuda_built(void);
/* MP_OK when a CUDA device can be used. Else MP_ERR_CUDA "no CUDA device:
 * <cudaGetErrorString of cudaGetDeviceCount's result, or 'cudaGetDeviceCount
 * found 0 devices'>", or (no backend built) MP_ERR_ARG "this build has no CUDA
 * support (configure with -DMP_CUDA=ON)". */
mp_status mp_cuda_available(void);
/* Whether the backend can hold this model at this precision (host-only, no
 * device needed): softmax attention only (the entmax / ssmax / asentmax
 * variants are refused, naming the variant), d_head <= MP_CUDA_MAX_DHEAD,
 * precision fp32 or bf16. MP_ERR_ARG with the reason. */
#define MP_CUDA_MAX_DHEAD 256
mp_status mp_cuda_check_model(const mp_config *c, mp_precision p);
/* The Gemma / OLMo 2 quirk of c the device's training step lacks, named with its family (its forward runs them
 * all), or NULL. */
const char *mp_cuda_train_gemma(const mp_config *c);
/* Why this forward call of a model on the device must run on the CPU, or NULL:
 * a padded batch (attention_mask), or an active hook at one of the opt-in
 * per-head points, whose path the device does not have yet (hook_attn_in,
 * attn.hook_q_input / k_input / v_input, attn.hook_result), or a training-mode
 * forward (an activation store: backward hooks), or any call of a model with
 * rel_values > 0 (MP_CUDA_RELV_CPU). Training steps do not come
 * here: mp_train_step hands the whole step to the device (train.h, device.h). */
const char *mp_cuda_cpu_reason(const mp_model *m, const mp_forward_params *fp);
/* The reason for every forward call of a model with Shaw's relative values
 * (rel_values > 0, runtime/relv.h), which the device has no path for; its
 * training step on the device is refused with this text. */
#define MP_CUDA_RELV_CPU "rel_values (Shaw relative values) runs on the CPU only"
/* Moves m: to MP_DEVICE_CUDA (checks: mp_cuda_available, then
 * mp_cuda_check_model; then uploads a float32 copy of the weights, a
 * quantized model's dequantized, plus a bfloat16 copy for bf16 (the linear
 * layers' operands; everything else stays fp32); the host weights stay), or back to
 * MP_DEVICE_CPU (frees the device copy; precision must be fp32). Moving to
 * the device again re-uploads the weights (after editing them in place).
 * Either way it first syncs (mp_model_sync) what device training steps left
 * newer on the device. On failure the model is unchanged. */
mp_status mp_model_to_device(mp_model *m, mp_device d, mp_precision p);

/* Memory knobs of a model on the cuda device (for tests and tuning; rows 0,
 * the default, is automatic). mp_cuda_loss_chunk: rows per chunk of a
 * training step's classifier + cross-entropy (the chunk's logits are rows x
 * vocab floats; automatic: as many as fit 128 MiB, at least 64).
 * mp_cuda_attn_rows: query rows per block of the attention without a stored
 * pattern (training, and prefill of 16 rows or more; a block's scores are
 * B x n_head x rows x keys floats; automatic: as many as fit 256 MiB).
 * mp_cuda_reader_floats: the floats that hook points whose callbacks only read
 * may hold in flight (on the device and as many pinned; automatic: 2^26, 256
 * MiB; a larger point's tensor goes the synchronous way).
 * MP_ERR_ARG when m is not on the device or the value is < 0. */
mp_status mp_cuda_loss_chunk(mp_model *m, int rows);
mp_status mp_cuda_attn_rows(mp_model *m, int rows);
mp_status mp_cuda_reader_floats(mp_model *m, int floats);

#endif
