/* tensor.h — the C tensor core behind the Lua Tensor (mp.tensor, lua/ltensor*.c),
 * usable from C without Lua: float32, row-major and contiguous, up to
 * MP_MAXDIM dims, on a reference-counted storage shared by a tensor and every
 * view derived from it (however indirectly), so that invalidating the storage
 * (a model's parameters replaced, a hook's activation gone) invalidates all of
 * them at once. Creation, views (select, reshape, narrow along the first dim,
 * unsqueeze/squeeze/flatten), copies along any dim (permute, gather, cat,
 * stack), matmul through OpenBLAS's cblas_sgemm (torch.matmul's broadcasting),
 * broadcasting arithmetic, elementwise functions, reductions over all elements
 * or one dim (every sum accumulated in double), softmax, topk, cosine
 * similarity, and the median through GSL; comparisons (float 0/1 masks),
 * where/masked_fill, gather, diagonal, tril/triu, sort, seeded random tensors
 * (GSL's generators), reductions over several dims and the SVD (GSL);
 * eigenvalues (general and symmetric) and the SVD of a factored product.
 * analyze/tensor.c holds storage, creation, views, shape copies and matmul;
 * analyze/tensor_math.c arithmetic, functions and reductions;
 * analyze/tensor_index.c the masks, indexing, sorting, random and SVD;
 * analyze/tensor_linalg.c eig, eigh and the factored SVD.
 *
 * Ownership (mp_common.h's verbs): a function that makes a tensor fills a
 * caller-owned mp_tensor `out` (its content on entry is ignored) and, on
 * success, gives it one reference on a storage, released with mp_tensor_free.
 * On failure `out` is left empty ({0}: mp_tensor_free on it is a no-op) and an
 * mp_status comes back with the message in mp_last_error(). Dims are 0-based
 * here (the Lua binding turns its 1-based, negative-from-the-end dims into
 * these). Inputs must be valid (mp_tensor_valid); a function that only reads
 * its inputs may be given tensors that share storage with each other. */
#ifndef MP_ANALYZE_TENSOR_H
#define MP_ANALYZE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"

#define MP_MAXDIM 8
/* Largest element count: numel * sizeof(float) must fit a size_t. */
#define MP_TENSOR_NUMEL_MAX (SIZE_MAX / sizeof(float))

/* One storage per block of memory: the tensor that made it and every view
 * derived from it (directly or through other views) share it, each holding a
 * reference. Invalidating it (the model closed, its parameter memory replaced,
 * a hook returned) clears `data` once for all of them: every access checks
 * the storage first ("Tensor is no longer valid (<why>)"). The struct (and
 * owned data) is freed when the last reference goes. */
typedef struct mp_storage {
    float *data;     /* NULL once invalidated */
    size_t n;        /* floats */
    int refs;
    int external;    /* data not owned (never freed by the storage) */
    const char *why; /* once invalidated: why the data went (a static string), else NULL */
} mp_storage;

typedef struct {
    mp_storage *st; /* NULL once released (freed, closed or collected) */
    float *data;    /* st->data + offset, meaningful only while st->data is non-NULL */
    int ndim;
    int64_t shape[MP_MAXDIM];
    size_t numel;
} mp_tensor;

/* ---- storage ---- */

/* A storage over external memory (n floats, not owned), with one reference,
 * the caller's. Keep it while the memory lives, make tensors on it with
 * mp_tensor_on, and when the memory goes call mp_storage_invalidate then
 * mp_storage_release. */
mp_status mp_storage_external(mp_storage **out, float *data, size_t n);
/* Clears the storage's data for every tensor on it; why: a static string. Idempotent. */
void mp_storage_invalidate(mp_storage *st, const char *why);
/* Drops one reference (NULL: nothing); frees the storage (and owned data) after the last. */
void mp_storage_release(mp_storage *st);

/* ---- creation and lifetime ---- */

/* numel of a shape, checked: rank 0..MP_MAXDIM, no negative extent, and the
 * product of the non-zero extents within MP_TENSOR_NUMEL_MAX (so that a
 * tensor with no elements cannot carry extents whose products overflow). */
mp_status mp_tensor_numel(int ndim, const int64_t *shape, size_t *n);
/* A new zero-filled tensor (its own storage). */
mp_status mp_tensor_init(mp_tensor *out, int ndim, const int64_t *shape);
/* A new tensor copying numel floats from data. */
mp_status mp_tensor_init_from(mp_tensor *out, int ndim, const int64_t *shape, const float *data);
/* A new tensor with every element v. */
mp_status mp_tensor_init_full(mp_tensor *out, int ndim, const int64_t *shape, float v);
/* A tensor on st (a new reference): `off` floats in, with the given shape
 * (checked to fit; st must still hold its data). */
mp_status mp_tensor_on(mp_tensor *out, mp_storage *st, size_t off, int ndim, const int64_t *shape);
/* A view of t: `off` floats past t->data, with the given shape (checked to fit
 * in t's storage). */
mp_status mp_tensor_view(mp_tensor *out, const mp_tensor *t, size_t off, int ndim, const int64_t *shape);
/* A contiguous copy of t (its own storage). */
mp_status mp_tensor_clone(mp_tensor *out, const mp_tensor *t);
/* Drops t's reference and empties it; idempotent, safe on {0}. */
void mp_tensor_free(mp_tensor *t);
/* 1 when t is on a storage that still holds its data. */
int mp_tensor_valid(const mp_tensor *t);
/* MP_OK, or MP_ERR_ARG "Tensor is no longer valid (<why>)". */
mp_status mp_tensor_check_valid(const mp_tensor *t);
/* Element strides of t (row-major, contiguous): strides[ndim-1] = 1. */
void mp_tensor_strides(const mp_tensor *t, int64_t *strides);
/* "[2,3]" into buf (at most n bytes). */
void mp_tensor_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* 1 when a and b have the same shape. */
int mp_tensor_same_shape(const mp_tensor *a, const mp_tensor *b);

/* ---- views (share t's storage) ---- */

/* t with a new shape of the same numel; at most one extent may be -1 (inferred). */
mp_status mp_tensor_reshape(mp_tensor *out, const mp_tensor *t, int ndim, const int64_t *shape);
/* Row i (0-based) of dim 0: a view of ndim - 1 dims. */
mp_status mp_tensor_select(mp_tensor *out, const mp_tensor *t, int64_t i);
/* A dim of extent 1 inserted before dim d (0..ndim). */
mp_status mp_tensor_unsqueeze(mp_tensor *out, const mp_tensor *t, int d);
/* Dims of extent 1 removed: all of them (d < 0), or only dim d if its extent is 1. */
mp_status mp_tensor_squeeze(mp_tensor *out, const mp_tensor *t, int d);
/* Dims s..e merged into one (a 0-dim tensor becomes [1]). */
mp_status mp_tensor_flatten(mp_tensor *out, const mp_tensor *t, int s, int e);

/* ---- copies along dims ---- */

/* Contiguous copy with dim i of the result = dim perm[i] of t. */
mp_status mp_tensor_permute(mp_tensor *out, const mp_tensor *t, const int *perm);
/* Contiguous copy with dims a and b swapped. */
mp_status mp_tensor_transpose(mp_tensor *out, const mp_tensor *t, int a, int b);
/* Rows idx[0..count) (0-based) of dim d, a copy. */
mp_status mp_tensor_index_select(mp_tensor *out, const mp_tensor *t, int d, const int64_t *idx, int64_t count);
/* Rows first, first + step, ... (count of them) of dim d: a view when d is 0
 * and step is 1 (narrow), else a copy. */
mp_status mp_tensor_slice(mp_tensor *out, const mp_tensor *t, int d, int64_t first, int64_t count, int64_t step);
/* The n tensors joined along dim d (they may differ only in that dim), a copy. */
mp_status mp_tensor_cat(mp_tensor *out, const mp_tensor *const *ts, int n, int d);
/* The n tensors (equal shapes) joined along a new dim d (0..ndim), a copy. */
mp_status mp_tensor_stack(mp_tensor *out, const mp_tensor *const *ts, int n, int d);

/* ---- products ---- */

/* a @ b with torch.matmul's rules, through cblas_sgemm: a 1-D left side is a
 * row [1, k], a 1-D right side a column [k, 1] (the added dim dropped from the
 * result); leading (batch) dims broadcast. Two 1-D tensors: use mp_tensor_dot. */
mp_status mp_tensor_matmul(mp_tensor *out, const mp_tensor *a, const mp_tensor *b);
/* Dot product of two 1-D tensors of equal length, accumulated in double in
 * index order (not cblas_dsdot, whose kernel loses about 5e-9 relative). */
mp_status mp_tensor_dot(const mp_tensor *a, const mp_tensor *b, double *out);

/* ---- constructors of ranges ---- */

/* start, start + step, ... up to but excluding end (torch.arange). */
mp_status mp_tensor_arange(mp_tensor *out, double start, double end, double step);
/* n evenly spaced values from start to end, both included (exact ends). */
mp_status mp_tensor_linspace(mp_tensor *out, double start, double end, int64_t n);
/* The [n, m] identity. */
mp_status mp_tensor_eye(mp_tensor *out, int64_t n, int64_t m);

/* ---- elementwise (tensor_math.c) ---- */

/* The comparisons (EQ..GE) give a float32 mask: 1 where true, 0 where false
 * (the core has no bool dtype); a NaN compares false except for NE (IEEE, as torch). */
typedef enum {
    MP_TENSOR_ADD, MP_TENSOR_SUB, MP_TENSOR_MUL, MP_TENSOR_DIV, MP_TENSOR_POW,
    MP_TENSOR_EQ, MP_TENSOR_NE, MP_TENSOR_LT, MP_TENSOR_LE, MP_TENSOR_GT, MP_TENSOR_GE
} mp_tensor_binop;
typedef enum {
    MP_TENSOR_EXP, MP_TENSOR_LOG, MP_TENSOR_SQRT, MP_TENSOR_ABS, MP_TENSOR_TANH, MP_TENSOR_RELU, MP_TENSOR_SIGMOID
} mp_tensor_unop;

/* The broadcast shape of a and b (torch's rules: dims aligned from the right,
 * an extent 1 or a missing dim stretches) into out, its rank into *nd. */
mp_status mp_tensor_broadcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nd, int64_t *out);
/* a op b, broadcast (float arithmetic; pow through double). A 0-dim operand
 * is a scalar: {.data = &v, .numel = 1} (no storage) works as one. */
mp_status mp_tensor_binary(mp_tensor *out, mp_tensor_binop op, const mp_tensor *a, const mp_tensor *b);
/* t = t op b in place; b must broadcast to t's shape; a b that overlaps t's
 * memory other than element for element is copied first. */
mp_status mp_tensor_binary_(mp_tensor *t, mp_tensor_binop op, const mp_tensor *b);
/* src broadcast into t (a copy first when they overlap). */
mp_status mp_tensor_copy_(mp_tensor *t, const mp_tensor *src);
/* A copy of x broadcast to shape. */
mp_status mp_tensor_expand(mp_tensor *out, const mp_tensor *x, int ndim, const int64_t *shape);
/* Every element of t set to v. */
void mp_tensor_fill_(mp_tensor *t, float v);
/* -t */
mp_status mp_tensor_neg(mp_tensor *out, const mp_tensor *t);
/* f(t) elementwise, computed in double, stored as float (relu keeps NaN). */
mp_status mp_tensor_unary(mp_tensor *out, mp_tensor_unop op, const mp_tensor *t);
/* t clamped to [lo, hi] (-INFINITY / INFINITY for no bound); lo <= hi. */
mp_status mp_tensor_clamp(mp_tensor *out, const mp_tensor *t, float lo, float hi);

/* ---- reductions (tensor_math.c); sums in double, in index order ---- */

/* The shape of t reduced over dim d (kept as extent 1 with keepdim); returns its rank. */
int mp_tensor_reduced_shape(const mp_tensor *t, int d, int keepdim, int64_t *shape);
/* Sum (mean: / numel) of every element; mean of an empty tensor is an error. */
mp_status mp_tensor_sum_all(const mp_tensor *t, int mean, double *out);
/* Flat index of the max (want_max) or min element: the first NaN wins, else
 * the first of equal values; an empty tensor is an error. */
mp_status mp_tensor_argext_all(const mp_tensor *t, int want_max, size_t *out);
/* Sums (mean: means) over dim d; an empty dim gives 0 (mean: an error). */
mp_status mp_tensor_sum_dim(mp_tensor *out, const mp_tensor *t, int d, int keepdim, int mean);
/* Max (want_max) or min over dim d: values into out (NULL: not wanted) and the
 * 0-based indices along d into idx (the reduced shape's numel of them, row-major). */
mp_status mp_tensor_ext_dim(mp_tensor *out, int64_t *idx, const mp_tensor *t, int d, int keepdim, int want_max);
/* Variance (two passes in double; unbiased: / (n - 1)), or the standard deviation. */
mp_status mp_tensor_var_all(const mp_tensor *t, int unbiased, int is_std, double *out);
mp_status mp_tensor_var_dim(mp_tensor *out, const mp_tensor *t, int d, int keepdim, int unbiased, int is_std);
/* p-norm (p = 2, 1, +-INFINITY: max/min |x|, 0: count of non-zeros, any p > 0). */
mp_status mp_tensor_norm_all(const mp_tensor *t, double p, double *out);
mp_status mp_tensor_norm_dim(mp_tensor *out, const mp_tensor *t, double p, int d, int keepdim);
/* softmax (log_softmax with logsm) along dim d: exp(x - max) / sum, sum in double. */
mp_status mp_tensor_softmax(mp_tensor *out, const mp_tensor *t, int d, int logsm);
/* The k largest (smallest without largest) along dim d, sorted (NaN above
 * every number; ties by lower index): values into out (t's shape, extent k
 * along d) and their 0-based indices along d into idx (out's numel of them). */
mp_status mp_tensor_topk(mp_tensor *out, int64_t *idx, const mp_tensor *t, int64_t k, int d, int largest);
/* Cosine similarity of a and b (broadcast) along dim d of the broadcast shape:
 * a.b / (max(|a|, 1e-8) max(|b|, 1e-8)), in double; d reduced away. */
mp_status mp_tensor_cos_sim(mp_tensor *out, const mp_tensor *a, const mp_tensor *b, int d);
/* *ok = |a - b| <= atol + rtol |b| everywhere (broadcast; a NaN is never close). */
mp_status mp_tensor_allclose(const mp_tensor *a, const mp_tensor *b, double rtol, double atol, int *ok);

/* ---- statistics through GSL (tensor_math.c) ---- */

/* The median of every element (gsl_stats_float_median on a copy: the mean
 * of the middle two for an even count); an empty tensor is an error. */
mp_status mp_tensor_median(const mp_tensor *t, double *out);
/* The median of x[0..n) (gsl_stats_median), as an mp_statistic_fn
 * (analyze/stats.h): scratch is n doubles the caller provides (x is not
 * changed). */
double mp_tensor_stat_median(const double *x, size_t n, void *scratch);

/* ---- masks, indexing along a dim, triangles, sorting, random tensors, reductions
 * over several dims, SVD (analyze/tensor_index.c) ---- */

/* mask != 0 ? a : b elementwise, the three shapes broadcast together (a NaN
 * in mask counts as non-zero); a 0-dim operand is a scalar (see mp_tensor_binary). */
mp_status mp_tensor_where(mp_tensor *out, const mp_tensor *mask, const mp_tensor *a, const mp_tensor *b);
/* A copy of t with v wherever mask (broadcast to t's shape, which it may not
 * change) is non-zero. */
mp_status mp_tensor_masked_fill(mp_tensor *out, const mp_tensor *t, const mp_tensor *mask, float v);
/* torch.gather: out has the index's shape ishape[ndim] (ndim = t's rank;
 * ishape[k] <= t's extent for k != d) and out[i..] = t[i.. with dim d replaced
 * by idx[i..]]; idx row-major, 0-based, each within t's extent along d. */
mp_status mp_tensor_gather(mp_tensor *out, const mp_tensor *t, int d, int ndim, const int64_t *ishape, const int64_t *idx);
/* The diagonal of a 2-D t as a 1-D copy: t[i][i + offset] (offset > 0 above
 * the main diagonal, < 0 below); empty when the offset is past an edge. */
mp_status mp_tensor_diagonal(mp_tensor *out, const mp_tensor *t, int64_t offset);
/* A copy of t (at least 2-D; batched over the leading dims) with the elements
 * of its last two dims [i, j] zeroed where j - i > k (lower: tril) or
 * j - i < k (upper: triu). */
mp_status mp_tensor_tri(mp_tensor *out, const mp_tensor *t, int64_t k, int upper);
/* Sorted copy of t along dim d (ascending, or descending): values into out
 * and their 0-based indices along d into idx (t's numel of them). Stable: a
 * total order, NaN above every number and equal values by lower index
 * (qsort with topk's comparators; mp_tensor_topk with k = the extent). */
mp_status mp_tensor_sort(mp_tensor *out, int64_t *idx, const mp_tensor *t, int d, int descending);

/* A random generator: GSL's gsl_rng of type gsl_rng_mt19937 seeded with
 * gsl_rng_set(seed) (seed 0: GSL's default seed, 4357, as gsl_rng_set). */
typedef struct mp_tensor_rng mp_tensor_rng;
mp_status mp_tensor_rng_new(mp_tensor_rng **out, unsigned long seed);
void mp_tensor_rng_free(mp_tensor_rng *r); /* NULL: nothing */
/* A new tensor of shape drawn from r in row-major order: normal, N(0, 1)
 * through gsl_ran_gaussian (GSL's polar Box-Muller: pairs of
 * gsl_rng_uniform_pos, one value per accepted pair), else uniform on [0, 1)
 * through gsl_rng_uniform (k / 2^32); rounded to float32 (a uniform that
 * rounds up to 1 is stored as the float just below 1). */
mp_status mp_tensor_random(mp_tensor *out, int ndim, const int64_t *shape, mp_tensor_rng *r, int normal);

typedef enum { MP_TENSOR_RSUM, MP_TENSOR_RMEAN, MP_TENSOR_RMAX, MP_TENSOR_RMIN } mp_tensor_reduce;
/* Sum, mean, max or min over the n dims dims[] (distinct, 0-based, in any
 * order) at once, kept as extent 1 with keepdim: the reduced elements of each
 * result are visited in row-major order (sums in double); max/min propagate a
 * NaN. Over no elements: sum 0, the others an error. */
mp_status mp_tensor_reduce_dims(mp_tensor *out, const mp_tensor *t, const int *dims, int n, int keepdim,
                                mp_tensor_reduce kind);
/* The thin SVD of a 2-D t [m, n] (torch.linalg.svd with full_matrices=False):
 * t = U diag(S) Vh with U [m, k], S [k] descending, Vh [k, n], k = min(m, n);
 * computed in double by GSL's gsl_linalg_SV_decomp (Golub-Reinsch), on the
 * transpose when m < n. The signs of a singular
 * pair are GSL's. Non-finite elements are an error. */
mp_status mp_tensor_svd(mp_tensor *u, mp_tensor *s, mp_tensor *vh, const mp_tensor *t);
/* torch.einsum for one or two operands (n = 1 or 2): eq as "bij,bjk->bik"
 * (letters a-z, A-Z; spaces ignored; without "->" the output is the letters
 * that appear once, in alphabetical order, as torch). A letter only in one
 * operand and not in the output is summed there first (in double); two
 * operands are then one batched matmul (cblas_sgemm, float32 accumulation)
 * over [shared output letters, one side's letters, contracted letters] and
 * permuted to the output. Not supported (an error): "...", a letter repeated
 * within one operand (diagonals, traces), extents that differ (no
 * broadcasting of extent 1). */
mp_status mp_tensor_einsum(mp_tensor *out, const char *eq, const mp_tensor *const *ops, int n);

/* ---- eigen-decompositions and factored products (analyze/tensor_linalg.c) ---- */

/* Eigenvalues of general real square matrices t [..., n, n] (batched over
 * the leading dims): real parts into re, imaginary parts into im, both
 * [..., n]; computed in double by GSL's gsl_eigen_nonsymm (balancing, then
 * Francis double-shift QR). Order (torch.linalg.eigvals leaves it
 * unspecified): |lambda| descending, ties by real part descending, then
 * imaginary part descending (a conjugate pair: + before -). Non-finite
 * elements, or QR failing to converge, are an error. */
mp_status mp_tensor_eig(mp_tensor *re, mp_tensor *im, const mp_tensor *t);
/* Eigen-decomposition of real symmetric matrices t [..., n, n]
 * (torch.linalg.eigh, UPLO = "L": only the lower triangle and the diagonal
 * are read): eigenvalues ascending into w [..., n], unit eigenvectors as the
 * columns of v [..., n, n] (t = v diag(w) v^T; each vector's sign is
 * GSL's); in double by gsl_eigen_symmv, sorted by gsl_eigen_symmv_sort. */
mp_status mp_tensor_eigh(mp_tensor *w, mp_tensor *v, const mp_tensor *t);
/* The thin SVD of the product A B without forming it (TransformerLens's
 * FactoredMatrix.svd): A [..., m, k], B [..., k, n] with the same leading
 * dims; A = Ua Sa Vha, B = Ub Sb Vhb (mp_tensor_svd), then the small
 * middle = diag(Sa) Vha Ub diag(Sb) = Um S Vhm, so that A B = (Ua Um) diag(S)
 * (Vhm Vhb): U [..., m, r], S [..., r] descending, Vh [..., r, n] with
 * r = min(m, k, n) (torch.linalg.svd's convention: A B = U diag(S) Vh). */
mp_status mp_tensor_factored_svd(mp_tensor *u, mp_tensor *s, mp_tensor *vh, const mp_tensor *a, const mp_tensor *b);

#endif
