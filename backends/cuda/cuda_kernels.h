/* cuda_kernels.h — internal to backends/cuda/: C-callable launchers of the
 * device kernels (cuda_kernels.cu). Each mirrors one CPU op of runtime/ops.c
 * or one step of model.c's attention on device pointers, enqueues on `s` and
 * returns cudaGetLastError() of the launch (cudaSuccess = 0). Shapes as in
 * model.h: N = B*T rows, row-major, float32 throughout (fp32 accumulation). */
#ifndef MP_CUDA_KERNELS_H
#define MP_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One intervention's firing on a view (hooks/intervene.h mp_intervention_plan,
 * its host pointers left out): kind 0 zero, 1 mean, 2 patch, 3 steer, 4 scale. */
typedef struct {
    int kind, head, hax, pax, ndim, axis, npos, pos0, use_within;
    long long offset;
    long long s[4], f[4];
    int pos[64];
    float scale;
} mp_cuk_iv;

/* The intervention p on the n elements of a view in place (intervene.c
 * mp_intervention_apply's loop, an element a thread); src on the device:
 * the patch source, the mean or the steering vector (NULL for zero / scale) */
cudaError_t mp_cuk_intervene(float *data, const float *src, const mp_cuk_iv *p, size_t n, cudaStream_t s);
/* out[i] = in[i] rounded to bfloat16 (round to nearest even; out holds n
 * 16-bit values): the bf16 path's weights and GEMM inputs */
cudaError_t mp_cuk_to_bf16(void *out, const float *in, size_t n, cudaStream_t s);
/* out[n, :] = embed[tokens[n], :] (tokens checked on the host) */
cudaError_t mp_cuk_embed(float *out, const int *tokens, const float *embed, int N, int D, cudaStream_t s);
/* x[b, t, :] += pos_embed[pos0 + t, :] (learned positions) */
cudaError_t mp_cuk_add_pos(float *x, const float *pos_embed, int B, int T, int D, int pos0, cudaStream_t s);
/* RMSNorm (b == NULL and layer == 0) or LayerNorm of N rows of D */
cudaError_t mp_cuk_norm(float *out, const float *x, const float *w, const float *b, int N, int D, float eps,
                        int layer, cudaStream_t s);
/* The norm in two steps around its hook_scale point (ops.c mp_norm_scale /
 * mp_norm_apply): scale[n] = sqrt(mean((x - mu)^2) + eps) (mu = 0 for RMSNorm;
 * mean[n] = mu, LayerNorm only), then out = (x - mean) / scale * w (+ b). */
cudaError_t mp_cuk_norm_scale(float *scale, float *mean, const float *x, int N, int D, float eps, int layer,
                              cudaStream_t s);
cudaError_t mp_cuk_norm_apply(float *out, const float *x, const float *mean, const float *scale, const float *w,
                              const float *b, int N, int D, int layer, cudaStream_t s);
/* out[n, o] += bias[o] over [N, OUT] */
cudaError_t mp_cuk_add_bias(float *out, const float *bias, int N, int OUT, cudaStream_t s);
/* x[i] += y[i] */
cudaError_t mp_cuk_add(float *x, const float *y, size_t n, cudaStream_t s);
/* out = silu(gate) * up; GELU (erf) and GELU (tanh) of x; out may alias the input */
cudaError_t mp_cuk_swiglu(float *out, const float *gate, const float *up, size_t n, cudaStream_t s);
cudaError_t mp_cuk_gelu(float *out, const float *x, size_t n, int tanh_approx, cudaStream_t s);
/* Gemma: out = gelu_tanh(gate) * up; x = cap tanh(x / cap) on x's finite entries (Gemma 2's soft caps) */
cudaError_t mp_cuk_geglu(float *out, const float *gate, const float *up, size_t n, cudaStream_t s);
cudaError_t mp_cuk_softcap(float *x, size_t n, float cap, cudaStream_t s);
/* x [B*T, nh, Dh] in place: pairs (2i, 2i+1) rotated by cos/sin [T, Dh/2] of
 * row t, then (q_scale non-NULL) every value times q_scale[t] where it is not 1 */
cudaError_t mp_cuk_rope(float *x, const float *cos_t, const float *sin_t, const float *q_scale, int B, int T, int nh,
                        int Dh, cudaStream_t s);
/* Causal attention without the pattern (online softmax, one block per query
 * row and head, its warps on slices of the keys, combined in shared memory:
 * flash-decoding): z [B,T,H,Dh] from q [B,T,H,Dh] (rotated, logit factor applied) and the
 * keys/values kc, vc of positions 0..pos0+T-1 (position j of kv head kh of
 * sequence b at b*bs + kh*hs + j*rs: exec.h's mp_kv_view); query t sees keys
 * 0..pos0+t (with a sliding window W > 0 the last W of them; 0: all). Dh <= 256. */
cudaError_t mp_cuk_attn_flash(float *z, const float *q, const float *kc, const float *vc, int B, int T, int H, int K,
                              int Dh, int pos0, size_t bs, size_t hs, size_t rs, float scale, int window,
                              cudaStream_t s);
/* k, v [B, T, K, Dh] into a KV cache layer's ck, cv [B, K, cap, Dh] at positions pos0..pos0+T-1. */
cudaError_t mp_cuk_kv_append(float *ck, float *cv, const float *k, const float *v, int B, int T, int K, int Dh, int cap,
                             int pos0, cudaStream_t s);
/* The materialised path's softmax for query rows q0..q0+rows-1 (att
 * [B,H,rows,S], S = pos0+T; the scores from cuBLAS, cuda_model.c): row i
 * over keys 0..pos0+q0+i, with a sliding window W > 0 only the last W of
 * them (a fully -inf row becomes 0; the rest 0; with lse non-NULL each row's
 * log-sum-exp to lse [B,H,T] at row q0+i). */
cudaError_t mp_cuk_attn_softmax(float *att, float *lse, int B, int H, int S, int T, int pos0, int q0, int rows,
                                int window, cudaStream_t s);
/* -inf past each row's last key (pos0+q0+i) of att [B,H,rows,S], and with a
 * sliding window W > 0 before its first (pos0+q0+i+1-W): the scores' mask after
 * a product (cuda_model.c pattern_scores) wrote keys 0..pos0+q0+rows-1 */
cudaError_t mp_cuk_attn_mask(float *att, int B, int H, int S, int pos0, int q0, int rows, int window,
                             cudaStream_t s);
/* The backward of mp_cuk_rope: dx <- q_scale[t] R(-angle) dx (ops_backward.c
 * mp_rope_backward, then the factor as pos.c mp_pos_apply) */
cudaError_t mp_cuk_rope_backward(float *dx, const float *cos_t, const float *sin_t, const float *q_scale, int B, int T,
                                 int nh, int Dh, cudaStream_t s);

/* ---- training (cuda_train_kernels.cu): as ops_backward.c, gradients ACCUMULATED ---- */

/* The rows of N ids grouped by id for mp_cuk_embed_backward (host code): groups (at least 3 N + 1 ints) gets
 * rows [N] (sorted by id, ascending within an id), starts [ng + 1] and ids [ng] of the ng distinct ids;
 * returns ng, or -1 when out of memory. */
int mp_cuk_embed_groups(const int *ids, int N, int *groups);
/* dembed[id, :] += dout[n, :] for every row n of each id (groups from mp_cuk_embed_groups, on the device),
 * the rows of one id added in ascending order by one block: deterministic, no atomics. */
cudaError_t mp_cuk_embed_backward(float *dembed, const float *dout, const int *groups, int N, int ngroups, int D,
                                  cudaStream_t s);
/* RMSNorm (layer 0; mean unused) or LayerNorm: dx += the input gradient; with
 * dw non-NULL also dw += sum_n dout xhat and (LayerNorm) db += sum_n dout.
 * mean and scale as mp_cuk_norm_scale wrote them (scale = 1 / rstd). work:
 * device scratch of mp_cuk_norm_dw_floats(N, D) floats (with dw; the column
 * sums' partials by chunks of rows, added in a fixed order: the same bits
 * every run). */
cudaError_t mp_cuk_norm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                                 const float *mean, const float *scale, int N, int D, int layer, float *work,
                                 cudaStream_t s);
size_t mp_cuk_norm_dw_floats(int N, int D);
/* dbias[o] += sum_n dout[n, o] over [N, OUT], deterministic (chunks of rows summed in order); work: device
 * scratch of mp_cuk_bias_bwd_floats(N, OUT) floats */
cudaError_t mp_cuk_bias_backward(float *dbias, const float *dout, int N, int OUT, float *work, cudaStream_t s);
/* floats of the device scratch mp_cuk_bias_backward's work needs */
size_t mp_cuk_bias_bwd_floats(int N, int OUT);
/* SwiGLU: dgate, dup += ...; GELU (erf, or tanh): dx += ... */
cudaError_t mp_cuk_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                   size_t n, cudaStream_t s);
cudaError_t mp_cuk_gelu_backward(float *dx, const float *dout, const float *x, size_t n, int tanh_approx,
                                 cudaStream_t s);
/* The attention backward's row kernels (its products run in cuBLAS,
 * cuda_model.c). mp_cuk_attn_recompute, for the blocked attention (query rows
 * q0..q0+rows-1 over keys 0..Tk-1, Tk = q0+rows; P [B,H,rows,Tk]): P =
 * exp(P - lse) of each row (lse [B,H,T] from mp_cuk_attn_softmax) on its keys
 * j <= q0+i (with a sliding window W > 0, also j > q0+i-W), 0 elsewhere
 * (training: the window's keys). mp_cuk_attn_softmax_bwd: rows i < rows of each
 * (b, h) (bh floats apart, rows ld apart, positions t0+i): dP <- scale P (dP -
 * sum_j P dP) on keys j <= t0+i, 0 on the later keys up to width. */
cudaError_t mp_cuk_attn_recompute(float *P, const float *lse, int B, int H, int T, int Tk, int q0, int rows,
                                  int window, cudaStream_t s);
cudaError_t mp_cuk_attn_softmax_bwd(float *dP, const float *P, int B, int H, size_t bh, int ld, int width, int t0,
                                    int rows, float scale, cudaStream_t s);
/* Cross-entropy of N rows of V logits: loss[n] = -log softmax(logits[n])[t]
 * and dlogits[n] = scale (softmax - onehot(t)); both 0 where targets[n] < 0.
 * dlogits may alias logits (ops_backward.c mp_crossentropy_backward). */
cudaError_t mp_cuk_xent(float *dlogits, float *loss, const float *logits, const int *targets, int N, int V,
                        float scale, cudaStream_t s);
/* Sum of g^2 in mp_cuk_sumsq_blocks(n) double partial sums (part holds that many) */
unsigned mp_cuk_sumsq_blocks(size_t n);
cudaError_t mp_cuk_sumsq(double *part, const float *g, size_t n, cudaStream_t s);
/* x *= a */
cudaError_t mp_cuk_scale(float *x, size_t n, float a, cudaStream_t s);
/* AdamW on one tensor of n (optim.c mp_adamw_update, its step_size = lr / bc1,
 * bc2_sqrt, decay = 1 - lr wd applied where `decayed`) */
cudaError_t mp_cuk_adamw(float *p, float *m, float *v, const float *g, size_t n, float beta1, float beta2, float eps,
                         float step_size, float bc2_sqrt, float decay, int decayed, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
