/* shape_gguf.h — random Llama models in the shapes of real ones (Llama 3.2
 * 1B, Llama 3 8B, and a tiny one for tests) written as GGUF files that
 * mechprobe and llama.cpp both load, without ever holding the model in memory:
 * the header and tensor infos go first, then each tensor is generated and
 * encoded in its target type a block of rows at a time (gguf.h's
 * mp_gguf_writer_add_rows), so an 8B model (32 GB in float32) is written on a
 * machine with 24 GB. Used by bench_gen --mode make-shape (bench/peers_scale.sh)
 * and tests/test_shape_gguf.c.
 *
 * The recipe (the test regenerates rows from it independently):
 *   tensors in file order: token_embd.weight [V, D]; per layer l attn_norm,
 *   attn_q [H*Dh, D], attn_k [K*Dh, D], attn_v [K*Dh, D], attn_output [D, H*Dh],
 *   ffn_norm, ffn_gate [M, D], ffn_up [M, D], ffn_down [D, M]; output_norm;
 *   output.weight [V, D] when untied. Tensor t (0-based in that order), row r:
 *   a gsl_rng_mt19937 seeded with sg_row_seed(S, t, r) gives the row's values
 *   in order, each gsl_ran_gaussian_ziggurat(rng, 0.02); norms are 1. The rows
 *   of a tensor are therefore independent of each other and of how many
 *   threads make them. 2-D weights (the embedding too) are stored in the
 *   requested type (F32, F16, BF16 or Q8_0, each value rounded from float32 by
 *   runtime/quant.h), norms in F32. Tokenizer: the "bytes" one of
 *   export_gguf.c (ids 0..255 the bytes, 256 the BOS "<s>", the rest
 *   "<unusedN>"), so any vocabulary size loads in both. No rope_freqs tensor:
 *   plain RoPE with the shape's theta on both sides. */
#ifndef MP_SHAPE_GGUF_H
#define MP_SHAPE_GGUF_H

#include "mp_common.h"

#include <stdint.h>

typedef struct {
    const char *name;
    int d_model, n_layer, n_head, n_kv_head, d_head, d_mlp, vocab, ctx, tied;
    float norm_eps, rope_theta;
} sg_shape;

/* The shape named `name`, or NULL. */
const sg_shape *sg_shape_find(const char *name);
/* The names, comma-separated, for messages. */
const char *sg_shape_names(void);
/* "f32", "f16", "bf16", "q8_0" -> the ggml type; -1 when not one of these. */
int sg_type_parse(const char *s, uint32_t *type);

/* The seed of row r of tensor t: distinct for every (t, r) with r < 2^17,
 * t < 2^15 (GSL's mt19937 keeps 32 bits of a seed). */
uint32_t sg_row_seed(uint64_t seed, int t, uint64_t r);

typedef struct {
    int n_tensors;
    uint64_t params, file_bytes;
} sg_plan;

/* Writes the model (atomically, see mp_gguf_writer_write). dry_run: plans
 * it only (every tensor and the metadata, no data made, nothing written).
 * plan (may be NULL) gets the tensor count, parameters and file size. */
mp_status sg_write(const sg_shape *s, uint32_t type, uint64_t seed, const char *path, int dry_run, sg_plan *plan);

/* Makes and encodes rows [row0, row0 + n) of weight tensor t (rows of `cols`
 * values) into dst in `type`, as sg_write does (OpenMP over the rows). */
mp_status sg_make_rows(uint32_t type, uint64_t seed, int t, uint64_t cols, uint64_t row0, uint64_t n, void *dst);

#endif
