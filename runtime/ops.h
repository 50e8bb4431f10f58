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

/* LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps) with the
 * biased variance (torch.nn.LayerNorm). mean, rstd [N] may be NULL. */
void mp_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                          int N, int D, float eps);

/* The norm in two steps, so that its scale can be read and written between
 * them (the ln*.hook_scale points): scale [N] = sqrt(mean(x^2) + eps) (RMS,
 * layer = 0) or sqrt(var + eps) with mean [N] the row means (LayerNorm,
 * layer != 0; mean unused for RMS, may be NULL); then out = (x - mean) /
 * scale * w (+ b for LayerNorm). With the scale unedited the result equals
 * mp_rmsnorm_forward / mp_layernorm_forward bit for bit. */
void mp_norm_scale(float *scale, float *mean, const float *x, int N, int D, float eps, int layer);
void mp_norm_apply(float *out, const float *x, const float *mean, const float *scale, const float *w,
                   const float *b, int N, int D, int layer);

/* out = in @ w^T (+ bias)   out [N,OUT], in [N,IN], w [OUT,IN] (nn.Linear), bias [OUT] or NULL.
 * N = 1: cblas_sgemv; N <= MP_MATMUL_FEW_ROWS: one pass over the weights (OpenMP
 * over output rows); larger N: cblas_sgemm (which re-packs w on every call). */
#define MP_MATMUL_FEW_ROWS 8
void mp_matmul_forward(float *out, const float *in, const float *w, const float *bias, int N, int IN, int OUT);
/* out[i][OUT[i]] = w[i][OUT[i], IN] x for i < n, one input row x (a decoding
 * step's q, k and v, or gate and up): the matrices' rows split evenly over
 * the threads in one parallel region, each thread's share by single-threaded
 * sgemv, instead of one threaded sgemv (one fork and join) per matrix. */
void mp_matvec_multi(int n, float *const *out, const float *const *w, const int *OUT, const float *x, int IN);

/* RoPE tables for positions pos0..pos0+T-1: cos/sin [T, Dh/2], angle
 * (pos) * theta^(-2i/Dh) computed in double precision. */
void mp_rope_table(float *cos_t, float *sin_t, int pos0, int T, int Dh, double theta);

/* The same with linear position scaling (angle uses pos * pos_scale; 1 = off)
 * and per-frequency divisors freq_div [Dh/2] (NULL = none; llama.cpp's
 * rope_freqs: frequency i is divided by freq_div[i]). */
void mp_rope_table_scaled(float *cos_t, float *sin_t, int pos0, int T, int Dh, double theta, double pos_scale,
                          const float *freq_div);

/* In-place rotation of adjacent channel pairs (2i, 2i+1) of x [B,T,nh,Dh] by
 * the table rows of each position t in [0,T). */
void mp_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int Dh);

/* out = silu(gate) * up   (elementwise, n values) */
void mp_swiglu_forward(float *out, const float *gate, const float *up, size_t n);

/* out = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), exact GELU (torch.nn.GELU()). */
void mp_gelu_forward(float *out, const float *x, size_t n);
/* GeGLU (Gemma): out = gelu_tanh(gate) * up */
void mp_geglu_forward(float *out, const float *gate, const float *up, size_t n);

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's gelu_new
 * (torch.nn.GELU(approximate="tanh")). */
void mp_gelu_tanh_forward(float *out, const float *x, size_t n);

/* Cross-entropy per row: probs [N,V] receives softmax(logits) (may alias
 * logits); losses [N] = -log probs[target] for target in [0,V), 0 where the
 * target is negative (ignored). Returns the number of counted rows. */
int mp_crossentropy_forward(float *losses, float *probs, const float *logits, const int *targets, int N, int V);

/* x += y (n values) */
void mp_residual_forward(float *x, const float *y, size_t n);

/* Row-wise softmax of a [rows, n] block with leading dimension ld, in place. */
void mp_softmax_rows(float *x, int rows, int n, int ld);

/* ---- backward kernels (ops_backward.c) ----
 * Each mirrors a forward kernel: d-prefixed arguments are gradients; every
 * gradient output is ACCUMULATED (+=), so callers zero them first; pure, no
 * allocation. */

/* dembed[tokens[n],:] += dout[n,:] */
void mp_embed_backward(float *dembed, const float *dout, const int *tokens, int N, int D);
/* RMSNorm: dx += ..., dw += sum_n dout * x * rstd (dw NULL: skipped).  rstd from the forward. */
void mp_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int N, int D);
/* LayerNorm: dx, dw, db accumulated. mean, rstd from the forward. */
void mp_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                           const float *mean, const float *rstd, int N, int D);
/* out = in @ w^T (+ b): din += dout @ w, dw += dout^T @ in, dbias += sum_n dout
 * (din, dbias may be NULL). */
void mp_matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in, const float *w,
                        int N, int IN, int OUT);
/* RoPE: in place, dx <- R(-angle) dx (the transpose of the rotation). */
void mp_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int nh, int Dh);
/* Permutes the rows of a q or k projection w [n_heads*Dh, cols] (or a bias,
 * cols = 1) within each head between the half-split layout (Hugging Face /
 * NeoX RoPE: channel i pairs with i + Dh/2) and adjacent pairs (2i, 2i+1:
 * llama2.c, llama.cpp "normal" RoPE, mechprobe): to_adjacent != 0 maps row
 * i -> 2i and i + Dh/2 -> 2i+1 (llama.cpp convert_hf_to_gguf's permute), 0 the
 * inverse. tmp holds Dh*cols floats. */
void mp_rope_permute_rows(float *w, float *tmp, int n_heads, int Dh, size_t cols, int to_adjacent);

/* out = silu(gate) * up: dgate += ..., dup += ... */
void mp_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
/* exact GELU: dx += dout * (Phi(x) + x phi(x)) */
void mp_gelu_backward(float *dx, const float *dout, const float *x, size_t n);
/* tanh-approximate GELU: dx += dout * d/dx gelu_tanh(x) */
void mp_gelu_tanh_backward(float *dx, const float *dout, const float *x, size_t n);
/* GeGLU: dgate += dout * up * gelu_tanh'(gate); dup += dout * gelu_tanh(gate) */
void mp_geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
/* mp_attention_backward_variant with the logit scale `scale` and Gemma 2's soft cap `cap` (> 0: scores =
 * cap tanh(scale q.k / cap); 0: off; softmax only). */
struct mp_attn_layer;
void mp_attention_backward_scaled(float *dq, float *dk, float *dv, float *datt, float *dfac, const float *dz,
                                  const float *q, const float *k, const float *v, const float *att, int B, int T,
                                  int H, int K, int Dh, const struct mp_attn_layer *av, float scale, float cap);
/* Through the soft cap: dr[j] *= 1 - tanh(scale qi.k_j / cap)^2 for keys j < n (k_j KD floats apart). */
void mp_softcap_dscores(float *dr, const float *qi, const float *kp, int KD, int n, int Dh, float scale, float cap);

/* Causal grouped-query attention with pattern att [B,H,T,T] (softmax of
 * q k^T * scale, zero above the diagonal), q/z [B,T,H,Dh], k/v [B,T,K,Dh]:
 * dq, dk, dv accumulated; datt [B,H,T,T] is scratch. */
void mp_attention_backward(float *dq, float *dk, float *dv, float *datt, const float *dz, const float *q,
                           const float *k, const float *v, const float *att, int B, int T, int H, int K, int Dh);
/* The same for any attention variant (attn_variants.h; NULL: softmax, exactly
 * the function above): the pattern's backward through the variant's
 * normalizer, and with a row factor f (ssmax, asentmax) dS = f dU and
 * dfac [B,H,T] (written, not accumulated) = sum_j dU_ij * scores_ij, the
 * gradient of each query row's factor (scores recomputed from q and k; dfac
 * may be NULL for kinds without a factor). */
struct mp_attn_layer;
/* sum_j dU_ij S_ij over row i's support (P_ij > 0), S = scale q_i . k_j: the
 * attention variant's row-factor gradient, in double (ops_backward.c). */
double mp_attn_factor_grad_row(const float *qi, const float *kp, int KD, const float *dr, const float *pr, int i, int Dh,
                               float scale);
void mp_attention_backward_variant(float *dq, float *dk, float *dv, float *datt, float *dfac, const float *dz,
                                   const float *q, const float *k, const float *v, const float *att, int B, int T,
                                   int H, int K, int Dh, const struct mp_attn_layer *av);
/* Cross-entropy: dlogits = scale * (probs - onehot(target)) on counted rows,
 * 0 on ignored rows (target < 0). Overwrites (may alias probs). */
void mp_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int N, int V, float scale);

#endif
