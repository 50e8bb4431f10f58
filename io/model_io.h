/* model_io.h — loading and saving a model in any format mechprobe reads and
 * writes, decided in one place: the format is detected by content on load
 * (mp_model_detect: HDF5 checkpoint, GGUF, Hugging Face folder with
 * safetensors, else llama2.c) and chosen by the caller or the path's ending on
 * save. The Lua binding (mp.load, m:save) and C programs call these. */
#ifndef MP_MODEL_IO_H
#define MP_MODEL_IO_H

#include "formats.h"
#include "model.h"
#include "optim.h"
#include "train.h"

typedef struct {
    /* in: where a checkpoint's extra state goes (both may be NULL) */
    mp_adamw *opt;          /* the optimizer state when /optim exists; zeroed otherwise and for other formats */
    mp_train_log *log;      /* the /train loss curve (empty when absent); untouched for other formats */
    /* out */
    mp_model_format format; /* what the file is */
    char tok_source[1024];  /* the model's own tokenizer, for mp_tok loaders: the GGUF file itself, the HF
                               folder (it has tokenizer.json) or the folder's tokenizer.bin; "" when none */
} mp_model_load_params;

mp_model_load_params mp_model_load_params_default(void);

/* Loads the model at path, format detected by content: checkpoint (with p->opt
 * / p->log), GGUF, Hugging Face folder, else llama2.c. A folder without
 * config.json, a FIFO or device, and a missing path are errors naming it.
 * p may be NULL. */
mp_status mp_model_load_with(mp_model **out, const char *path, mp_model_load_params *p);
/* mp_model_load_with(out, path, NULL). */
mp_status mp_model_load(mp_model **out, const char *path);

typedef struct {
    mp_model_format format;     /* MP_FORMAT_UNKNOWN: by the path (mp_model_save_format) */
    uint32_t gguf_type;         /* GGUF: MP_GGML_F32 (default), MP_GGML_F16 or MP_GGML_Q8_0 for 2-D weights */
    const char *tok_source;     /* GGUF: the tokenizer to embed (NULL: a byte vocabulary for "bytes" models, else none);
                                   HF: copied into the folder (a tokenizer.json, or a folder's, as tokenizer.json;
                                   a llama2.c tokenizer.bin as tokenizer.bin; a GGUF file's is not converted) */
    const mp_adamw *opt;        /* checkpoint: optimizer state to keep (NULL or n == 0: none) */
    const mp_train_log *log;    /* checkpoint: loss curve (NULL: none) */
    int llama2c_version;        /* llama2.c: 0 (legacy) or 1 ("ak42") */
} mp_model_save_params;

mp_model_save_params mp_model_save_params_default(void);

/* The format a save to path writes: `requested` when it is not
 * MP_FORMAT_UNKNOWN, else a checkpoint for a path ending in ".h5", GGUF for
 * ".gguf", llama2.c otherwise. */
mp_model_format mp_model_save_format(const char *path, mp_model_format requested);

/* The save format a binding's format= names: "hf", "gguf", "h5" (checkpoint)
 * or "llama2c"; MP_FORMAT_UNKNOWN for any other name. */
mp_model_format mp_model_format_named(const char *name);
/* The GGUF type of 2-D weights a binding's type= names: "f32" (MP_GGML_F32),
 * "f16" or "q8_0"; -1 for any other name. */
long mp_gguf_type_named(const char *name);

/* Saves m (atomically) as mp_model_save_format(path, p->format) says: an HDF5
 * checkpoint (parameters, p->opt, p->log), GGUF (mp_model_save_gguf), a Hugging
 * Face folder (config.json + model.safetensors), or llama2.c — only for the
 * configs llama2.c can express (RMSNorm, SwiGLU, unscaled RoPE theta 10000,
 * softmax attention, d_head = d_model / n_head): MP_ERR_ARG naming the path
 * otherwise. p may be NULL (defaults). */
mp_status mp_model_save_with(const mp_model *m, const char *path, const mp_model_save_params *p);
/* mp_model_save_with(m, path, NULL). */
mp_status mp_model_save(const mp_model *m, const char *path);

#endif
