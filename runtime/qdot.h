/* qdot.h — products with weights kept in their file's encoding in memory (GGUF
 * Q8_0, Q4_0, Q4_K, Q6_K as llama.cpp computes them; F16 and BF16). Quantized
 * weights: the activations are quantized per block to 8 bits (Q8_0 blocks of 32
 * for Q8_0 / Q4_0 weights, Q8_K blocks of 256 for the K-quants), and each
 * output is a sum of integer block dot products times the block scales. Half
 * weights (F16, BF16): the activations stay float32 and each weight is widened
 * exactly to float32 (F16C, or a 16-bit shift for BF16) before a float32 FMA,
 * so a half model computes what its float32 decoding computes, up to the order
 * of float32 sums. Kernels: a scalar reference and AVX2 and
 * AVX-512 (BW/VL) paths, compiled with target attributes and chosen at run time
 * (__builtin_cpu_supports), so one binary runs on any x86-64. The environment
 * variable MP_QDOT_ISA=scalar|avx2|avx512 caps the choice (benchmarks, tests).
 *
 * Q8_K block (ggml's block_q8_K, 292 bytes): float d, int8 qs[256], int16
 * bsums[16] (sums of 16 consecutive qs); values x = d * qs, d = -max/127 with
 * max the value of largest magnitude (quantize_row_q8_K_ref). Q8_0 activations
 * as mp_quant_quantize_q8_0 but rounded to nearest even (as ggml's SIMD
 * quantizers round; the reference rounds halves away from zero). */
#ifndef MP_QDOT_H
#define MP_QDOT_H

#include "mp_common.h"

typedef enum { MP_QDOT_SCALAR = 0, MP_QDOT_AVX2, MP_QDOT_AVX512 } mp_qdot_isa;

#define MP_Q8K_BYTES 292

/* 1 when weights of this ggml type can be kept as stored (Q8_0, Q4_0, Q4_K, Q6_K, F16, BF16). */
int mp_qdot_supported(uint32_t wtype);
/* 1 for the half types (F16, BF16), whose products take float32 activations. */
int mp_qdot_is_half(uint32_t wtype);
/* The activation type of a weight type (MP_GGML_Q8_0, MP_GGML_Q8_K, or
 * MP_GGML_F32 for half weights), and the bytes that n activations take (n a
 * multiple of its block). */
uint32_t mp_qdot_act_type(uint32_t wtype);
size_t mp_qdot_act_bytes(uint32_t wtype, size_t n);
/* Quantizes n activations (a multiple of the weight type's block: 32 or 256)
 * for products with weights of type wtype (half weights: a copy); dst holds
 * mp_qdot_act_bytes. */
void mp_qdot_quantize_act(uint32_t wtype, const float *x, void *dst, size_t n);
/* Quantizes to Q8_K as ggml's quantize_row_q8_K_ref (n a multiple of 256). */
void mp_qdot_quantize_q8_k(const float *x, void *dst, size_t n);

/* One dot product: a weight row of n values (type wtype) with activations
 * quantized by mp_qdot_quantize_act. */
typedef float (*mp_qdot_fn)(const void *w, const void *xq, size_t n);
/* The kernel of (wtype, isa), or NULL when the machine (or this build) lacks
 * the ISA or the type is not supported. */
mp_qdot_fn mp_qdot_kernel(uint32_t wtype, mp_qdot_isa isa);
/* The ISA the products use on this machine (the best available, capped by
 * MP_QDOT_ISA), and its name ("scalar", "avx2", "avx512"). */
mp_qdot_isa mp_qdot_isa_active(void);
const char *mp_qdot_isa_name(mp_qdot_isa isa);

/* 1 when products with weights of this type run on this machine through tiles
 * (one weight row against 4 activation rows: the quantized types, AVX-512 VNNI), whose
 * outputs equal the dot kernel's bit for bit, for any number of rows. */
int mp_qdot_tiles(uint32_t wtype);

/* out[N,OUT] = in[N,IN] @ W^T (+ bias), W [OUT,IN] stored as rows of type
 * wtype (row_bytes apart). The inputs are quantized once (half weights:
 * copied) and every weight row is streamed through the quantized dot kernel,
 * OpenMP over output rows: for few rows (N <= 32) with every type, and for any
 * N with the types that have tiles (mp_qdot_tiles: 4 input rows per weight
 * row, in passes of 64 input rows; on this CPU they beat the panels below at
 * every N, bench/bench_qdot.c; Q8_0 from 5 rows in blocks of 4 weight rows by
 * 4 input rows, about 1.8x the one-row tiles at 512 rows, the same bits). Otherwise (prefill of the other types) row
 * panels of W are dequantized to float32 and multiplied with sgemm. Allocates
 * only scratch (freed before return); MP_ERR_NOMEM when that fails. */
mp_status mp_qdot_matmul(float *out, const float *in, uint32_t wtype, const void *w, size_t row_bytes,
                         const float *bias, int N, int IN, int OUT);

/* BF16 products (a model at precision "bf16" on the CPU): BF16 weights times
 * activations rounded to BF16 (round to nearest even), float32 accumulation,
 * with AVX-512 BF16 (vdpbf16ps), as llama.cpp's BF16 path and a PyTorch bf16
 * matmul round their inputs; about 2x the float32 products' rate. Each
 * output's sum runs in the same order whatever N, so a prefill's outputs equal
 * a token-by-token decode's bit for bit. mp_qdot_has_bf16: 1 when this CPU
 * has AVX-512 BF16 (and MP_QDOT_ISA does not cap below avx512).
 * mp_qdot_bf16_kernel: the one-row kernel (BF16 weights, float32 activations
 * rounded inside), NULL without. mp_qdot_matmul_bf16: as mp_qdot_matmul for
 * BF16 weights (blocks of 4 weight rows by 4 activation rows, OpenMP over
 * 256 KiB panels of weight rows); MP_ERR_ARG without AVX-512 BF16, MP_ERR_NOMEM. */
int mp_qdot_has_bf16(void);
/* x rounded to BF16 (nearest even) as the BF16 products round their activations (OpenMP over pieces;
 * with AVX-512 BF16 a subnormal x becomes 0, as in the products; else mp_quant_f32_to_bf16). */
void mp_qdot_round_bf16(const float *x, uint16_t *dst, size_t n);
mp_qdot_fn mp_qdot_bf16_kernel(void);
mp_status mp_qdot_matmul_bf16(float *out, const float *in, const void *w, size_t row_bytes, const float *bias, int N,
                              int IN, int OUT);

#endif
