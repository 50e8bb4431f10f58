/* intervene.h — interventions at hook points, as a C API: zero and mean
 * ablation, activation patching, steering and scaling, optionally restricted
 * to one head and to a set of positions. An mp_intervention is a descriptor;
 * mp_intervention_apply has the mp_hook_fn signature, so a C program (or a
 * binding) registers it like any hook:
 *
 *     mp_intervention iv = mp_intervention_zero();
 *     iv.head = 3;                                   // only head 3
 *     mp_hooks_add(hooks, "blocks.1.attn.hook_z", mp_intervention_apply, &iv);
 *     ... mp_model_forward(...) ...
 *     mp_intervention_free(&iv);                     // after the last forward
 *
 * Heads and positions are 0-based, as in hook names and TransformerLens;
 * positions are absolute (during incremental decoding a view covers positions
 * pos0.. of the sequence). Attention maps ([B,H,T,S]) are addressed by query
 * position. Data the descriptor points to (patch source, mean reference,
 * steering vector) is not copied: it must outlive every forward that fires
 * the intervention. Failures (a head out of range, a source of the wrong
 * size) set the message and make the forward fail with MP_ERR_HOOK. */
#ifndef MP_INTERVENE_H
#define MP_INTERVENE_H

#include "mp_hooks.h"

typedef enum {
    MP_INTERVENTION_ZERO = 0, /* activation := 0 */
    MP_INTERVENTION_MEAN,     /* activation := mean of a reference over its batch and positions */
    MP_INTERVENTION_PATCH,    /* activation := the same element of a source run (same B, T) */
    MP_INTERVENTION_STEER,    /* activation += scale * vector (per position) */
    MP_INTERVENTION_SCALE     /* activation *= scale */
} mp_intervention_kind;

#define MP_INTERVENTION_MAX_POS 64
#define MP_INTERVENTION_MAX_DIM 8

typedef struct {
    mp_intervention_kind kind;
    int head;          /* -1: all heads; else only this head (hooks with a head axis) */
    int npos;          /* 0: all positions */
    int pos[MP_INTERVENTION_MAX_POS]; /* absolute positions, 0-based */
    float scale;       /* steer: the vector's factor; scale: the factor (1 by default) */
    /* Data, not owned:
     *  patch: the hook's whole activation from another run, [full shape] of
     *         the forward it patches (n_data = its element count);
     *  mean:  a reference activation of the hook, any batch and length, shape
     *         data_shape[0..data_ndim) ([B,T,...], or [B,H,T,S] for maps);
     *  steer: one position's features (everything but batch and position:
     *         D, M, H*Dh or K*Dh), or with head >= 0 one head's Dh. */
    const float *data;
    size_t n_data;
    int data_ndim;
    int64_t data_shape[MP_INTERVENTION_MAX_DIM];
    /* private: the reference's mean, computed when the intervention first fires */
    float *mean;
    size_t mean_n;
} mp_intervention;

/* Descriptors of each kind (head -1, every position, scale 1 unless given). */
mp_intervention mp_intervention_zero(void);
mp_intervention mp_intervention_mean(const float *ref, int ndim, const int64_t *shape);
mp_intervention mp_intervention_patch(const float *src, size_t n);
mp_intervention mp_intervention_steer(const float *vec, size_t n, float scale);
mp_intervention mp_intervention_scale(float factor);

/* Restricts iv to positions pos[0..n): MP_ERR_ARG when n exceeds
 * MP_INTERVENTION_MAX_POS. n = 0: every position. A negative position counts
 * from the end of the sequence (Python-style: -1 the last), resolved by
 * mp_intervention_prepare for each forward (pos0 + T positions; a padded
 * batch's last column, not each row's last real token: the hook sees no mask),
 * which refuses one before the start. */
mp_status mp_intervention_set_positions(mp_intervention *iv, const int *pos, int n);

/* Frees what the descriptor computed (the mean); the descriptor can be used
 * again (the mean is recomputed). NULL-safe, idempotent. */
void mp_intervention_free(mp_intervention *iv);

/* "zero ablation", "mean ablation", "patch", "steer", "scale". */
const char *mp_intervention_name(mp_intervention_kind k);

/* What one firing of an intervention does, checked and resolved against the
 * view it fires on: for a backend that applies it to its own copy of the data
 * (the CUDA device runs this as a kernel). Element e of the view [s] is at
 * g = its index with g[axis] += offset in the full tensor [f]; it is touched
 * when head < 0 or g[hax] == head, and npos == 0 or pos0 + g[pax] is one of
 * pos; feat / within index src as in mp_intervention_apply. */
typedef struct {
    mp_intervention_kind kind;
    int head, hax, pax, ndim, axis, npos, pos0, use_within;
    int64_t offset;
    int64_t s[4], f[4];
    int pos[MP_INTERVENTION_MAX_POS];
    float scale;
    const float *src; /* host: patch source, mean, steering vector (NULL for zero and scale) */
    size_t nsrc;
} mp_intervention_plan;

/* Checks iv against the view info (info->name set) and fills *pl; computes
 * the mean of a mean ablation the first time. 0, or 1 with the message set
 * (the faults mp_intervention_apply reports). */
int mp_intervention_prepare(mp_intervention *iv, const mp_hook_info *info, mp_intervention_plan *pl);

/* The hook callback: user is an mp_intervention *. Returns 0, or 1 with the
 * message set (MP_ERR_ARG kinds of faults: head out of range or on a hook
 * without a head axis, source / vector / reference of the wrong size). */
int mp_intervention_apply(void *user, const mp_hook_info *info, float *data);

#endif
