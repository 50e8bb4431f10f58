/* cuda_internal.h — internal to runtime/cuda/: what cuda_select.c (built
 * always) calls in cuda_model.c (built with CUDA only). */
#ifndef MP_CUDA_INTERNAL_H
#define MP_CUDA_INTERNAL_H

#include "mp_cuda.h"

/* cudaGetDeviceCount: MP_OK with at least one device, else the message above. */
mp_status mp_cuda_probe(void);
/* Uploads m's weights into a new device copy for precision prec and installs
 * it (m->dev, m->dev_ops), replacing any previous one. */
mp_status mp_cuda_attach(mp_model *m, mp_precision prec);
/* Rows per chunk of a device training step's classifier + loss (the chunk's
 * logits are rows x vocab floats); 0 (the default): as many as fit 128 MiB,
 * at least 64. For tests and memory tuning; m must be on the device. */
mp_status mp_cuda_loss_chunk(mp_model *m, int rows);
/* Query rows per block of a device training step's attention (its P and dP
 * are B x H x rows x T floats each); 0 (the default): as many as fit 256 MiB.
 * For tests and memory tuning; m must be on the device. */
mp_status mp_cuda_attn_rows(mp_model *m, int rows);

#endif
