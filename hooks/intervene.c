/* intervene.c — the interventions of intervene.h: descriptors of each kind and
 * the hook callback that applies one to a view of an activation (a block of
 * query rows for attention maps, positions pos0.. during decoding). */
#include "intervene.h"

#include <stdlib.h>
#include <string.h>

static const char *const iv_names[] = {"zero ablation", "mean ablation", "patch", "steer", "scale"};

const char *mp_intervention_name(mp_intervention_kind k) {
    return (unsigned)k < sizeof iv_names / sizeof *iv_names ? iv_names[k] : "intervention";
}

static mp_intervention iv_new(mp_intervention_kind kind) {
    mp_intervention iv;
    memset(&iv, 0, sizeof iv);
    iv.kind = kind;
    iv.head = -1;
    iv.scale = 1.0f;
    return iv;
}

mp_intervention mp_intervention_zero(void) { return iv_new(MP_INTERVENTION_ZERO); }

mp_intervention mp_intervention_mean(const float *ref, int ndim, const int64_t *shape) {
    mp_intervention iv = iv_new(MP_INTERVENTION_MEAN);
    size_t n = 1;
    iv.data = ref;
    iv.data_ndim = ndim;
    for (int i = 0; i < ndim && i < MP_INTERVENTION_MAX_DIM; i++) {
        iv.data_shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    iv.n_data = n;
    return iv;
}

mp_intervention mp_intervention_patch(const float *src, size_t n) {
    mp_intervention iv = iv_new(MP_INTERVENTION_PATCH);
    iv.data = src;
    iv.n_data = n;
    return iv;
}

mp_intervention mp_intervention_steer(const float *vec, size_t n, float scale) {
    mp_intervention iv = iv_new(MP_INTERVENTION_STEER);
    iv.data = vec;
    iv.n_data = n;
    iv.scale = scale;
    return iv;
}

mp_intervention mp_intervention_scale(float factor) {
    mp_intervention iv = iv_new(MP_INTERVENTION_SCALE);
    iv.scale = factor;
    return iv;
}

mp_status mp_intervention_set_positions(mp_intervention *iv, const int *pos, int n) {
    if (n < 0 || n > MP_INTERVENTION_MAX_POS)
        return mp_error(MP_ERR_ARG, "%s: at most %d positions (got %d)", mp_intervention_name(iv->kind),
                        MP_INTERVENTION_MAX_POS, n);
    for (int k = 0; k < n; k++) iv->pos[k] = pos[k]; /* negative: from the end, resolved per forward */
    iv->npos = n;
    return MP_OK;
}

void mp_intervention_free(mp_intervention *iv) {
    if (!iv) return;
    free(iv->mean);
    iv->mean = NULL;
    iv->mean_n = 0;
}

/* Mean of the reference (the hook's full shape from another run, any
 * batch/length) over its batch axis and position axis pax: nfeat values. */
static int iv_compute_mean(mp_intervention *iv, const mp_hook_info *info, int pax, size_t nfeat) {
    if (iv->data_ndim != info->ndim)
        return mp_error(MP_ERR_ARG, "mean ablation at %s: the reference has %d dims, the activation %d", info->name,
                        iv->data_ndim, info->ndim), 1;
    const int64_t *shape = iv->data_shape;
    size_t nf = 1, inner = 1, numel = 1;
    for (int i = 0; i < iv->data_ndim; i++) numel *= (size_t)shape[i];
    for (int i = 1; i < iv->data_ndim; i++)
        if (i != pax) nf *= (size_t)shape[i];
    for (int i = pax + 1; i < iv->data_ndim; i++) inner *= (size_t)shape[i];
    if (nf != nfeat)
        return mp_error(MP_ERR_ARG, "mean ablation at %s: the reference has %zu features per position, expected %zu",
                        info->name, nf, nfeat), 1;
    if (numel != iv->n_data || (numel && !iv->data))
        return mp_error(MP_ERR_ARG, "mean ablation at %s: the reference holds %zu values, its shape says %zu",
                        info->name, iv->n_data, numel), 1;
    iv->mean = calloc(nf, sizeof(float));
    if (!iv->mean) return mp_error(MP_ERR_NOMEM, "out of memory for a mean ablation"), 1;
    iv->mean_n = nf;
    size_t count = (size_t)shape[0] * (size_t)shape[pax];
    for (size_t e = 0; e < numel; e++) {
        size_t in = e % inner, rest = e / inner / (size_t)shape[pax];
        iv->mean[(rest % (nf / inner)) * inner + in] += iv->data[e];
    }
    for (size_t i = 0; i < nf; i++) iv->mean[i] /= (float)count;
    return 0;
}

/* Axis holding the head index for a hook's shape kind (-1: none). */
static int head_axis(mp_shape_kind k) {
    return k == MP_SHAPE_BTHD || k == MP_SHAPE_BTKD || k == MP_SHAPE_BTHX || k == MP_SHAPE_BTKX ? 2
           : k == MP_SHAPE_BHTS                                                              ? 1
                                                                                             : -1;
}

int mp_intervention_prepare(mp_intervention *iv, const mp_hook_info *info, mp_intervention_plan *pl) {
    const char *what = mp_intervention_name(iv->kind);
    mp_shape_kind sk = mp_hook_kind(info->id); /* a registry's own point: [B,T,width] */
    memset(pl, 0, sizeof *pl);
    pl->kind = iv->kind;
    pl->head = iv->head;
    pl->hax = head_axis(sk);
    pl->pax = sk == MP_SHAPE_BHTS ? 2 : 1;
    pl->ndim = info->ndim;
    pl->axis = info->axis;
    pl->offset = info->offset;
    pl->pos0 = info->pos0;
    pl->npos = iv->npos;
    memcpy(pl->pos, iv->pos, sizeof pl->pos);
    /* a negative position counts from the end of the sequence this forward
     * runs over (Python-style, -1 the last: pos0 + T - 1; with a padded batch,
     * the last column, as the cache helpers' pos_slice) */
    const int seq_len = info->pos0 + (int)info->full[sk == MP_SHAPE_BHTS ? 2 : 1];
    for (int k = 0; k < pl->npos; k++)
        if (pl->pos[k] < 0) {
            if (pl->pos[k] < -seq_len)
                return mp_error(MP_ERR_ARG, "%s: position %d at %s is out of range for a sequence of %d positions "
                                "(-%d..%d)", what, pl->pos[k], info->name, seq_len, seq_len, seq_len - 1), 1;
            pl->pos[k] += seq_len;
        }
    pl->scale = iv->scale;
    const int hax = pl->hax, pax = pl->pax;
    int64_t *s = pl->s, *f = pl->f;
    for (int i = 0; i < 4; i++) s[i] = f[i] = 1;
    for (int i = 0; i < info->ndim; i++) { s[i] = info->shape[i]; f[i] = info->full[i]; }
    if (iv->head >= 0 && hax < 0)
        return mp_error(MP_ERR_ARG, "%s: head=%d given, but %s has no head axis", what, iv->head, info->name), 1;
    if (iv->head >= 0 && iv->head >= f[hax])
        return mp_error(MP_ERR_ARG, "%s: head=%d out of range (0..%d) at %s", what, iv->head, (int)f[hax] - 1,
                        info->name), 1;
    /* feature size: everything but batch and position axes */
    size_t nfeat = 1, nwithin = 1;
    for (int i = 0; i < info->ndim; i++)
        if (i != 0 && i != pax) nfeat *= (size_t)f[i];
    for (int i = hax + 1; hax >= 0 && i < info->ndim; i++)
        if (i != pax) nwithin *= (size_t)f[i];
    size_t full_numel = (size_t)f[0] * f[1] * f[2] * f[3];
    pl->src = iv->data;
    pl->nsrc = iv->data ? iv->n_data : 0;
    if (iv->kind == MP_INTERVENTION_PATCH && pl->nsrc != full_numel)
        return mp_error(MP_ERR_ARG, "patch at %s: the source has %zu values but the activation has %zu "
                        "(patch from a run with the same batch and length)", info->name, pl->nsrc, full_numel), 1;
    if (iv->kind == MP_INTERVENTION_MEAN) {
        if (!iv->mean && iv_compute_mean(iv, info, pax, nfeat)) return 1;
        if (iv->mean_n != nfeat)
            return mp_error(MP_ERR_ARG, "mean ablation at %s: the mean has %zu values, expected %zu", info->name,
                            iv->mean_n, nfeat), 1;
        pl->src = iv->mean;
        pl->nsrc = iv->mean_n;
    }
    pl->use_within = iv->kind == MP_INTERVENTION_STEER && iv->head >= 0;
    if (iv->kind == MP_INTERVENTION_STEER && pl->nsrc != (pl->use_within ? nwithin : nfeat))
        return mp_error(MP_ERR_ARG, "steer at %s: the vector has %zu values, expected %zu", info->name, pl->nsrc,
                        pl->use_within ? nwithin : nfeat), 1;
    if (iv->kind == MP_INTERVENTION_ZERO || iv->kind == MP_INTERVENTION_SCALE) pl->src = NULL, pl->nsrc = 0;
    return 0;
}

int mp_intervention_apply(void *user, const mp_hook_info *info, float *data) {
    mp_intervention_plan pl;
    if (mp_intervention_prepare(user, info, &pl)) return 1;
    const int64_t *s = pl.s, *f = pl.f;
    const int hax = pl.hax, pax = pl.pax;
    const float *src = pl.src;
    size_t e = 0;
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < s[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < s[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < s[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < s[3]; idx[3]++, e++) {
                    int64_t g[4] = {idx[0], idx[1], idx[2], idx[3]};
                    g[pl.axis] += pl.offset;
                    if (pl.head >= 0 && g[hax] != pl.head) continue;
                    if (pl.npos) {
                        int p = pl.pos0 + (int)g[pax], hit = 0;
                        for (int k = 0; k < pl.npos && !hit; k++) hit = pl.pos[k] == p;
                        if (!hit) continue;
                    }
                    size_t feat = 0, within = 0;
                    for (int i = 1; i < pl.ndim; i++) {
                        if (i == pax) continue;
                        feat = feat * (size_t)f[i] + (size_t)g[i];
                        if (hax >= 0 && i > hax) within = within * (size_t)f[i] + (size_t)g[i];
                    }
                    switch (pl.kind) {
                    case MP_INTERVENTION_ZERO: data[e] = 0.0f; break;
                    case MP_INTERVENTION_MEAN: data[e] = src[feat]; break;
                    case MP_INTERVENTION_PATCH:
                        data[e] = src[((size_t)g[0] * f[1] * f[2] + (size_t)g[1] * f[2] + (size_t)g[2]) * f[3] + g[3]];
                        break;
                    case MP_INTERVENTION_STEER: data[e] += pl.scale * src[pl.use_within ? within : feat]; break;
                    case MP_INTERVENTION_SCALE: data[e] *= pl.scale; break;
                    }
                }
    return 0;
}
