/* ops.h — pure layer kernels of the transformer (forward direction): outputs
 * first, no allocation, row-major float32. Matrix products go through OpenBLAS
 * sgemm; the row loops are OpenMP-parallel. The training code's backward
 * kernels (ops_backward) mirror these one for one. */
#ifndef MP_OPS_H
#define MP_OPS_H

#include <stddef.h>

/* out[n,:] = embed[tokens[n],:]   out [N,D], embed [V,D] */
void mp_embed_forward(float *out, const int *tokens, const float *embed, int N, int D);

/* out = x / sqrt(mean(x^2) + eps) * w   (per row)   out, x [N,D], w [D]
 * rstd [N] (may be NULL) receives 1/sqrt(mean(x^2)+eps) for the backward. */
void mp_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D, float eps);

/* out = in @ w^T (+ bias)   out [N,OUT], in [N,IN], w [OUT,IN] (nn.Linear), bias [OUT] or NULL */
void mp_matmul_forward(float *out, const float *in, const float *w, const float *bias, int N, int IN, int OUT);

/* RoPE tables for positions pos0..pos0+T-1: cos/sin [T, Dh/2], angle
 * (pos) * theta^(-2i/Dh) computed in double precision. */
void mp_rope_table(float *cos_t, float *sin_t, int pos0, int T, int Dh, double theta);

/* In-place rotation of adjacent channel pairs (2i, 2i+1) of x [B,T,nh,Dh] by
 * the table rows of each position t in [0,T). */
void mp_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int Dh);

/* out = silu(gate) * up   (elementwise, n values) */
void mp_swiglu_forward(float *out, const float *gate, const float *up, size_t n);

/* x += y (n values) */
void mp_residual_forward(float *x, const float *y, size_t n);

/* Row-wise softmax of a [rows, n] block with leading dimension ld, in place. */
void mp_softmax_rows(float *x, int rows, int n, int ld);

#endif
