/* cuda_internal.h — internal to backends/cuda/: what cuda_select.c (built
 * always) calls in cuda_model.c (built with CUDA only). */
#ifndef MP_CUDA_INTERNAL_H
#define MP_CUDA_INTERNAL_H

#include "mp_cuda.h"

/* cudaGetDeviceCount: MP_OK with at least one device, else the message above. */
mp_status mp_cuda_probe(void);
/* Uploads m's weights into a new device copy for precision prec and installs
 * it (m->dev, m->dev_ops), replacing any previous one. */
mp_status mp_cuda_attach(mp_model *m, mp_precision prec);
/* mp_cuda_loss_chunk (which 0), mp_cuda_attn_rows (1) or mp_cuda_reader_floats
 * (2) (mp_cuda.h) on a model already checked to be on the device. */
void mp_cuda_set_knob_dev(mp_model *m, int which, int value);

#endif
