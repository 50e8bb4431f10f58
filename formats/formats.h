/* formats.h — the model file formats (formats/): reading and writing
 * llama2.c checkpoints, GGUF files and Hugging Face folders, telling them
 * apart by content, and finding the tokenizer that goes with a model file.
 * The layer above runtime/ (models) and tokenizers/; io/model_io.h's
 * mp_model_load dispatches here (HDF5 checkpoints are io/'s own). */
#ifndef MP_FORMATS_H
#define MP_FORMATS_H

#include "model.h"
#include "tok.h"

#include <stdint.h>

/* Loads a llama2.c checkpoint (legacy v0 or v1 "ak42"), memory-mapped, after
 * validating every header field, size and offset against the file. */
mp_status mp_model_load_llama2c(mp_model **out, const char *path);
/* Writes a llama2.c checkpoint: version 0 (legacy) or 1 ("ak42"). Atomic. */
mp_status mp_model_save_llama2c(const mp_model *m, const char *path, int version);
/* ---- real-model formats (load_gguf.c, load_hf.c, export_gguf.c) ---- */
typedef enum {
    MP_FORMAT_UNKNOWN = 0, MP_FORMAT_LLAMA2C, MP_FORMAT_CHECKPOINT, MP_FORMAT_GGUF, MP_FORMAT_HF
} mp_model_format;
/* By content: a folder with config.json (HF), the HDF5 signature (checkpoint),
 * the "GGUF" magic, else llama2.c; UNKNOWN when unreadable or a folder without
 * config.json. (mp_model_load in io/model_io.h dispatches on it.) */
mp_model_format mp_model_detect(const char *path);
/* A GGUF file of architecture llama, qwen2 or gpt2 (tensors F32, F16, BF16,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K; when some 2-D weight is Q8_0,
 * Q4_0, Q4_K or Q6_K the linear weights stay quantized (m->q, views of the
 * file's mapping), else everything is dequantised to float32). llama:
 * adjacent-pair q/k rows as llama.cpp's converter writes them; qwen2: half-split
 * rows (llama.cpp's NeoX RoPE), permuted here. Hyper-parameters from
 * <arch>.* metadata; rope_freqs.weight and rope.scaling.type "linear" honoured. */
mp_status mp_model_load_gguf(mp_model **out, const char *path);
/* The tokenizer of a GGUF file (tokenizer.ggml.*: model "llama" or "gpt2"). */
mp_status mp_tok_load_gguf(mp_tok **out, const char *path);
/* The same; *absent (when not NULL) is set to 1 when the file has no
 * tokenizer at all (no tokenizer.ggml.model: MP_ERR_FORMAT), 0 otherwise. */
mp_status mp_tok_load_gguf_ex(mp_tok **out, const char *path, int *absent);
/* A Hugging Face folder (config.json + *.safetensors, sharded or not):
 * model_type llama, mistral, qwen2 or gpt2. */
mp_status mp_model_load_hf(mp_model **out, const char *dir);
/* The folder's tokenizer.json (mp_tok_load_hf), BOS/EOS overridden by
 * config.json's bos_token_id / eos_token_id when present. */
mp_status mp_tok_load_hf_dir(mp_tok **out, const char *dir);
/* The tokenizer at spec, by content: a GGUF file (tokenizer.ggml.*), a Hugging
 * Face folder or a tokenizer.json, else a llama2.c tokenizer.bin for a model
 * of `vocab` tokens. Every error names spec. (formats/tok_find.c) */
mp_status mp_tok_load_any(mp_tok **out, const char *spec, int vocab);
/* Looks for a llama2.c tokenizer next to a model file: <dir>/tokenizer.bin,
 * else <dir>/<stem>.tok512.bin, .tok.bin, .tokenizer.bin, .tok1024.bin,
 * .tok4096.bin or .tok32000.bin. 1 with the path in out[0, n) when a readable
 * one exists, else 0. */
int mp_tok_find_beside(const char *model_path, char *out, size_t n);
/* mp_tok_load_any for a model of `vocab` tokens: MP_ERR_ARG ("spec: the
 * tokenizer has N tokens, more than the model's vocabulary (V)") when the
 * tokenizer has more tokens than the model. */
mp_status mp_tok_load_for(mp_tok **out, const char *spec, int vocab);

/* Which tokenizer goes with a model just loaded from model_path when the
 * caller names none (mp.load without tokenizer=), in this order:
 *   1. the model file's own tokenizer (own_source: mp_model_load_params.
 *      tok_source, a GGUF's metadata or a Hugging Face folder): loaded; when
 *      it is there but fails to load, no tokenizer and own_failed = 1 with
 *      the reason in why (a warning, not an error); a GGUF file without
 *      tokenizer.ggml.model simply has none (own_failed 0);
 *   2. with no own source and no tokenizer hint in the model (mp_model.
 *      tokenizer empty), a llama2.c tokenizer next to the model file
 *      (mp_tok_find_beside), loaded by mp_tok_load_for: a failure is an error;
 *   3. the hint "bytes" (a byte-level checkpoint): origin MP_TOK_FROM_BYTES
 *      (the caller attaches mp_tok_new_bytes) when nothing was loaded.
 * Returns MP_OK except for a failed tokenizer found next to the model. */
typedef enum {
    MP_TOK_FROM_NONE,   /* no tokenizer */
    MP_TOK_FROM_OWN,    /* tok: the model file's own */
    MP_TOK_FROM_BESIDE, /* tok: a tokenizer file next to the model */
    MP_TOK_FROM_BYTES   /* the model's hint says "bytes" */
} mp_tok_origin;
typedef struct {
    mp_tok *tok;          /* the tokenizer loaded (the caller owns it), or NULL */
    mp_tok_origin origin;
    char source[1024];    /* where tok came from */
    int own_failed;       /* the model's own tokenizer is there but did not load */
    char why[1024];       /* ... and why (mp_last_error's text) */
} mp_tok_found;
mp_status mp_tok_discover(const char *model_path, const char *own_source, const char *hint, int vocab,
                          mp_tok_found *out);
/* Writes a Hugging Face folder: config.json and model.safetensors (F32, q/k rows
 * permuted to the half-split HF layout; GPT-2 as Conv1D weights). Creates dir. */
mp_status mp_model_save_hf(const mp_model *m, const char *dir);
/* Writes a GGUF readable by llama.cpp: general.architecture llama (RMSNorm/
 * SwiGLU/RoPE models without biases: q/k rows in adjacent pairs, llama.cpp's
 * "normal" RoPE), qwen2 (with q/k/v biases: rows permuted back to half-split,
 * llama.cpp's NeoX RoPE) or gpt2 (LayerNorm, GELU-tanh, learned positions,
 * biases: fused attn_qkv); the hyper-parameters; llama.cpp tensor names; and
 * the tokenizer read from tok_source: a llama2.c tokenizer.bin (model "llama"),
 * a GGUF file (its tokenizer.ggml.* copied) or a Hugging Face tokenizer.json or
 * folder (model "gpt2"); with tok_source NULL, a "bytes" model (m->tokenizer)
 * gets a byte-level vocabulary (ids 0..255 the bytes, 256 BOS, no merges), any
 * other none. type: MP_GGML_F32, F16 or Q8_0 for 2-D weights (Q8_0 falls back to
 * F16 for a tensor whose rows are not a multiple of 32); norms, biases and
 * rope_freqs stay F32. MP_ERR_ARG for configs llama.cpp has no architecture for. */
mp_status mp_model_save_gguf(const mp_model *m, const char *tok_source, const char *path, uint32_t type);

#endif
