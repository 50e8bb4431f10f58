/* sae_io.h — SAELens folders in and out: a sparse autoencoder (runtime/sae.h)
 * read from a folder of cfg.json + sae_weights.safetensors as SAELens writes
 * them, and written back in SAELens v6's form (what SAE.load_from_disk reads).
 *
 * cfg.json forms read:
 *   v6: "architecture" (standard | topk | jumprelu), d_in, d_sae, k (topk),
 *       apply_b_dec_to_input, normalize_activations, reshape_activations, and
 *       the metadata (hook_name, hook_layer, model_name) in "metadata" (or the
 *       early v6 "meta");
 *   v5 and older (flat): hook_name (or hook_point), hook_layer (or
 *       hook_point_layer), model_name at the top level; "activation_fn_str"
 *       (or "activation_fn") "topk" with "activation_fn_kwargs": {"k": N} is a
 *       topk SAE; normalize_activations may be a bool (true: the dataset-wide
 *       "expected_average_only_in") or null; "finetuning_scaling_factor": true
 *       with a `scaling_factor` tensor [d_sae] (SAELens decodes
 *       (acts * scaling_factor) @ W_dec) is folded into W_dec's rows; an
 *       all-ones scaling_factor is dropped, as SAELens does.
 * hook_layer, when no form gives it, is read from a hook_name "blocks.N....".
 * Weights F32, F16 or BF16 (read as float32). Refused by name: gated,
 * batchtopk / matryoshka_batchtopk (training forms), transcoders, any other
 * architecture, an activation other than relu / topk, an unknown
 * normalize_activations or reshape_activations, topk's
 * rescale_acts_by_decoder_norm. Every tensor's shape is checked against d_in /
 * d_sae, every required key and tensor must be there and no other tensor may
 * be; errors are MP_ERR_FORMAT naming the file and the key or tensor. */
#ifndef MP_SAE_IO_H
#define MP_SAE_IO_H

#include <stddef.h>

#include "mp_common.h"
#include "sae.h"

/* path: a folder holding cfg.json and sae_weights.safetensors, or a
 * .safetensors file with cfg.json beside it. */
mp_status mp_sae_load(mp_sae **out, const char *path);
/* The same from memory: cfg.json's text and the safetensors bytes (`name`
 * names both in errors; for tests and fuzzing). */
mp_status mp_sae_load_memory(mp_sae **out, const char *cfg, size_t cfg_len, const void *weights, size_t size,
                             const char *name);
/* Writes dir/cfg.json (SAELens v6: architecture, d_in, d_sae, k, dtype
 * "float32", apply_b_dec_to_input, normalize_activations, reshape_activations,
 * metadata {sae_lens_version "6.0.0", hook_name, hook_layer, model_name}) and
 * dir/sae_weights.safetensors (F32), atomically: both are written into a new
 * temporary folder beside dir which is then renamed into place. An existing
 * dir is replaced only when it is a folder holding nothing but those two
 * files (MP_ERR_IO naming the other entry otherwise); nothing is left
 * half-written on failure. */
mp_status mp_sae_save(const mp_sae *s, const char *dir);

#endif
