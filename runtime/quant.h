/* quant.h — ggml tensor types: block geometry of every type ggml defines,
 * IEEE half / bfloat16 conversion, dequantisation to float32 of the types
 * mechprobe reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K)
 * and the round-to-nearest Q8_0 quantiser (ggml's quantize_row_q8_0_ref).
 *
 * Block layouts follow ggml-common.h (little-endian, packed):
 *   Q4_0  32 values, 18 B: f16 d, 16 B nibbles; v = (q - 8) * d
 *   Q4_1  32 values, 20 B: f16 d, f16 m, 16 B nibbles; v = q * d + m
 *   Q5_0  32 values, 22 B: f16 d, u32 high bits, 16 B nibbles; v = (q - 16) * d
 *   Q5_1  32 values, 24 B: f16 d, f16 m, u32 high bits, 16 B nibbles; v = q * d + m
 *   Q8_0  32 values, 34 B: f16 d, 32 x int8; v = q * d
 *   Q4_K  256 values, 144 B: f16 d, f16 dmin, 12 B of 6-bit scales/mins, 128 B nibbles
 *   Q6_K  256 values, 210 B: 128 B low nibbles, 64 B high 2-bit pairs, 16 x int8 scales, f16 d
 * Nibble order within a 32-value group: low nibbles give values 0..15, high
 * nibbles 16..31 (Q4_K: 64-value groups, low nibbles first). */
#ifndef MP_QUANT_H
#define MP_QUANT_H

#include "mp_common.h"

/* ggml_type ids (ggml.h). Ids absent here are unknown to mechprobe. */
typedef enum {
    MP_GGML_F32 = 0, MP_GGML_F16 = 1, MP_GGML_Q4_0 = 2, MP_GGML_Q4_1 = 3,
    MP_GGML_Q5_0 = 6, MP_GGML_Q5_1 = 7, MP_GGML_Q8_0 = 8, MP_GGML_Q8_1 = 9,
    MP_GGML_Q2_K = 10, MP_GGML_Q3_K = 11, MP_GGML_Q4_K = 12, MP_GGML_Q5_K = 13,
    MP_GGML_Q6_K = 14, MP_GGML_Q8_K = 15, MP_GGML_IQ2_XXS = 16, MP_GGML_IQ2_XS = 17,
    MP_GGML_IQ3_XXS = 18, MP_GGML_IQ1_S = 19, MP_GGML_IQ4_NL = 20, MP_GGML_IQ3_S = 21,
    MP_GGML_IQ2_S = 22, MP_GGML_IQ4_XS = 23, MP_GGML_I8 = 24, MP_GGML_I16 = 25,
    MP_GGML_I32 = 26, MP_GGML_I64 = 27, MP_GGML_F64 = 28, MP_GGML_IQ1_M = 29,
    MP_GGML_BF16 = 30, MP_GGML_TQ1_0 = 34, MP_GGML_TQ2_0 = 35, MP_GGML_MXFP4 = 39
} mp_ggml_type;

/* Name of a ggml type ("Q4_K"), or "unknown" for an id ggml does not define. */
const char *mp_quant_type_name(uint32_t type);
/* Block geometry: values per block and bytes per block. Returns 0 and sets
 * both for a known type, -1 for an unknown id. */
int mp_quant_block(uint32_t type, size_t *block_values, size_t *block_bytes);
/* 1 when mp_quant_dequantize can decode the type. */
int mp_quant_supported(uint32_t type);
/* Bytes taken by n values of the type: MP_ERR_FORMAT when the type is unknown
 * or n is not a multiple of the block size, MP_ERR_NOMEM on overflow. */
mp_status mp_quant_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

/* Decodes n values (a multiple of the block size; src holds mp_quant_bytes of
 * them, any alignment) into dst. The type must be supported (asserted).
 * Large tensors are decoded in parallel (OpenMP over blocks). */
void mp_quant_dequantize(uint32_t type, const void *src, float *dst, size_t n);

/* Quantises n values (a multiple of 32) to Q8_0 as ggml's reference does:
 * d = max|x| / 127 stored as f16, q = roundf(x / d). dst gets n/32*34 bytes. */
void mp_quant_quantize_q8_0(const float *src, void *dst, size_t n);

/* IEEE 754 binary16 <-> binary32: exact widening (subnormals, inf, NaN kept);
 * narrowing rounds to nearest even, overflows to inf, keeps NaN a NaN. */
float mp_quant_f16_to_f32(uint16_t h);
uint16_t mp_quant_f32_to_f16(float f);
/* bfloat16 <-> binary32: widening is exact; narrowing rounds to nearest even
 * and keeps NaN a (quiet) NaN. */
float mp_quant_bf16_to_f32(uint16_t h);
uint16_t mp_quant_f32_to_bf16(float f);

#endif
