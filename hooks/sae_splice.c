/* sae_splice.c — SAEs attached to a model (sae_splice.h): the model's list,
 * the forward callback that runs runtime/sae.h's stages at the point and
 * fires the sub-points, and the backward callback (J^T g through the SAE). */
#include "sae_splice.h"
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mp_sae *sae;
    int use_err;
    mp_hook_id id;
    int layer;
} attached;

struct mp_splice {
    attached *a;
    int n, cap;
};

/* ---- the model's list ---- */

void mp_splice_free(struct mp_splice *sp) {
    if (!sp) return;
    free(sp->a);
    free(sp);
}

int mp_model_n_saes(const mp_model *m) { return m->splice ? m->splice->n : 0; }

mp_sae *mp_model_sae(const mp_model *m, int i, int *use_err) {
    if (i < 0 || i >= mp_model_n_saes(m)) return NULL;
    if (use_err) *use_err = m->splice->a[i].use_err;
    return m->splice->a[i].sae;
}

void mp_model_reset_saes(mp_model *m) {
    if (m->splice) m->splice->n = 0;
}

void mp_model_remove_sae(mp_model *m, int i) {
    struct mp_splice *sp = m->splice;
    if (!sp || i < 0 || i >= sp->n) return;
    memmove(sp->a + i, sp->a + i + 1, (size_t)(sp->n - i - 1) * sizeof *sp->a);
    sp->n--;
}

mp_status mp_model_add_sae(mp_model *m, mp_sae *sae, int use_error_term) {
    const mp_config *c = &m->cfg;
    const char *name = sae->hook_name;
    mp_hook_id id;
    int layer;
    char why[192];
    if (!name[0]) return mp_error(MP_ERR_ARG, "add_sae: the SAE has no hook_name (set sae.cfg.hook_name)");
    if (mp_hook_parse(c, name, &id, &layer) != 0)
        return mp_error(MP_ERR_ARG, "add_sae: hook_name '%s' is not a hook point of this model%s", name,
                        mp_hook_absent_why(c, name, why, sizeof why));
    if (mp_hook_shape_kind[id] == MP_SHAPE_BHTS)
        return mp_error(MP_ERR_ARG, "add_sae: %s is an attention map ([B,H,T,S]); an SAE reads a per-position "
                        "activation (hook_resid_*, hook_*_out, attn.hook_z, mlp.hook_post, ...)", name);
    int64_t s[4];
    int nd = mp_hook_shape(c, id, 1, 1, 0, s);
    int64_t width = 1;
    for (int i = 2; i < nd; i++) width *= s[i];
    if (width != sae->d_in)
        return mp_error(MP_ERR_ARG, "add_sae: the SAE's d_in is %d but %s has %lld values per position", sae->d_in,
                        name, (long long)width);
    if (!m->splice && !(m->splice = mp_calloc(1, sizeof *m->splice, "the attached SAEs"))) return MP_ERR_NOMEM;
    struct mp_splice *sp = m->splice;
    for (int i = 0; i < sp->n; i++)
        if (sp->a[i].id == id && sp->a[i].layer == layer)
            return mp_error(MP_ERR_ARG, "add_sae: an SAE is attached at %s already (reset_saes() first)", name);
    if (sp->n == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 4;
        attached *a = realloc(sp->a, (size_t)cap * sizeof *a);
        if (!a) return mp_error(MP_ERR_NOMEM, "out of memory attaching an SAE");
        sp->a = a;
        sp->cap = cap;
    }
    sp->a[sp->n++] = (attached){sae, use_error_term != 0, id, layer};
    return MP_OK;
}

/* ---- one splice's run state (owned by its forward registry) ---- */

enum { SUB_INPUT, SUB_PRE, SUB_POST, SUB_RECONS, SUB_ERROR, SUB_OUTPUT, SUB_COUNT };
static const char *const sub_names[SUB_COUNT] = {"hook_sae_input",  "hook_sae_acts_pre", "hook_sae_acts_post",
                                                 "hook_sae_recons", "hook_sae_error",    "hook_sae_output"};

typedef struct {
    const mp_sae *sae;
    int use_err;
    mp_hook_id id;
    int layer;
    const mp_hooks *hs;         /* the forward registry (fires the sub-points) */
    mp_hook_id sub[SUB_COUNT];  /* ids in hs; SUB_ERROR only with use_err */
    /* the last forward call's state */
    int N, B, T;
    size_t cap;                 /* rows the buffers hold */
    float *x, *xn, *pre, *acts, *rec, *out, *clean, *err, *tmp;
    unsigned char *mask;
    mp_sae_rownorm *rn, *rn_clean;
} splice_run;

typedef struct {
    splice_run *f;
    const mp_hooks *hs;         /* the backward registry */
    mp_hook_id sub[SUB_COUNT];
    size_t cap;
    float *g, *g_rec, *g_acts, *g_pre, *g_xn, *gx, *ge;
} splice_bwd;

static void run_free(void *p) {
    splice_run *r = p;
    free(r->x), free(r->xn), free(r->pre), free(r->acts), free(r->rec), free(r->out), free(r->clean);
    free(r->err), free(r->tmp), free(r->mask), free(r->rn), free(r->rn_clean);
    free(r);
}

static void bwd_free(void *p) {
    splice_bwd *b = p;
    free(b->g), free(b->g_rec), free(b->g_acts), free(b->g_pre), free(b->g_xn), free(b->gx), free(b->ge);
    free(b);
}

/* realloc of *p to n elements of size sz (0 on success). */
static int grow(void *pp, size_t n, size_t sz) {
    void **p = pp;
    void *q = realloc(*p, (n ? n : 1) * sz);
    if (!q) return 1;
    *p = q;
    return 0;
}

static mp_status run_reserve(splice_run *r, size_t N) {
    if (N <= r->cap) return MP_OK;
    const size_t D = (size_t)r->sae->d_in, F = (size_t)r->sae->d_sae;
    if (grow(&r->x, N * D, 4) || grow(&r->xn, N * D, 4) || grow(&r->pre, N * F, 4) || grow(&r->acts, N * F, 4) ||
        grow(&r->rec, N * D, 4) || grow(&r->out, N * D, 4) || grow(&r->clean, N * D, 4) || grow(&r->err, N * D, 4) ||
        grow(&r->tmp, N * (D > F ? D : F), 4) || grow(&r->mask, N * F, 1) || grow(&r->rn, N, sizeof *r->rn) ||
        grow(&r->rn_clean, N, sizeof *r->rn_clean))
        return mp_error(MP_ERR_NOMEM, "out of memory for the SAE at %s (%zu rows)", r->sae->hook_name, N);
    r->cap = N;
    return MP_OK;
}

/* The view of sub-point k for the forward of `parent`. */
static void sub_info(const mp_hooks *hs, mp_hook_id sid, int layer, const mp_hook_info *parent, int B, int T,
                     mp_hook_info *info) {
    memset(info, 0, sizeof *info);
    info->id = sid;
    info->layer = layer;
    info->ndim = mp_hooks_shape(hs, sid, B, T, parent ? parent->pos0 : 0, info->shape);
    memcpy(info->full, info->shape, sizeof info->full);
    info->axis = 1;
    info->pos0 = parent ? parent->pos0 : 0;
    info->numel = (size_t)B * T * (size_t)info->shape[2];
}

static mp_status fire_sub(const mp_hooks *hs, mp_hook_id sid, int layer, const mp_hook_info *parent, int B, int T,
                          float *data) {
    if (!mp_hooks_active(hs, sid, layer)) return MP_OK;
    mp_hook_info info;
    sub_info(hs, sid, layer, parent, B, T, &info);
    return mp_hooks_fire(hs, &info, data);
}

/* The SAE's forward stages on x into out (acts, rec, rn kept), firing the sub-points when fire. */
static mp_status stages(splice_run *r, const mp_hook_info *info, float *x, int N, int fire, float *acts, float *rec,
                        mp_sae_rownorm *rn, float *out) {
    const mp_sae *s = r->sae;
    const size_t F = (size_t)s->d_sae;
    const int B = r->B, T = r->T;
    mp_status st;
    if (fire && (st = fire_sub(r->hs, r->sub[SUB_INPUT], r->layer, info, B, T, x))) return st;
    mp_sae_norm_in(s, x, N, r->xn, rn);
    mp_sae_hidden_pre(s, r->xn, N, r->pre, r->tmp);
    if (fire && (st = fire_sub(r->hs, r->sub[SUB_PRE], r->layer, info, B, T, r->pre))) return st;
    if ((st = mp_sae_activate(s, r->pre, N, acts))) return st;
    if (fire)
        for (size_t i = 0; i < (size_t)N * F; i++) r->mask[i] = acts[i] != 0.0f;
    if (fire && (st = fire_sub(r->hs, r->sub[SUB_POST], r->layer, info, B, T, acts))) return st;
    mp_sae_decode_raw(s, acts, N, rec);
    if (fire && (st = fire_sub(r->hs, r->sub[SUB_RECONS], r->layer, info, B, T, rec))) return st;
    mp_sae_norm_out(s, rec, N, rn, out);
    return MP_OK;
}

/* Could a callback at one of the sub-points before the output edit a value? */
static int edits_possible(const splice_run *r) {
    for (int k = 0; k < SUB_OUTPUT; k++)
        if (mp_hooks_active(r->hs, r->sub[k], r->layer) && !mp_hooks_readonly(r->hs, r->sub[k], r->layer)) return 1;
    return 0;
}

static int splice_fwd(void *user, const mp_hook_info *info, float *data) {
    splice_run *r = user;
    const mp_sae *s = r->sae;
    if (info->axis != 1 || info->offset != 0 || info->ndim < 3) {
        mp_error(MP_ERR_HOOK, "the SAE at %s needs the whole activation (got a block of it)", info->name);
        return 1;
    }
    const int B = (int)info->shape[0], T = (int)info->shape[1], N = B * T;
    const size_t D = (size_t)s->d_in, nd = (size_t)N * D;
    if (info->numel != nd) {
        mp_error(MP_ERR_HOOK, "the SAE at %s has d_in %d but the activation has %zu values per position",
                 info->name, s->d_in, N ? info->numel / (size_t)N : 0);
        return 1;
    }
    if (run_reserve(r, (size_t)N)) return 1;
    r->N = N, r->B = B, r->T = T;
    memcpy(r->x, data, nd * sizeof(float));
    if (stages(r, info, r->x, N, 1, r->acts, r->rec, r->rn, r->out)) return 1;
    if (!r->use_err) {
        memcpy(data, r->out, nd * sizeof(float));
    } else {
        const int err_on = mp_hooks_active(r->hs, r->sub[SUB_ERROR], r->layer);
        const int edits = edits_possible(r);
        if (edits || err_on) {
            /* the clean output: the same stages on the unhooked input, no sub-point fired */
            float *x0 = r->err; /* scratch for the input: norm_in reads it, nothing writes it */
            memcpy(x0, data, nd * sizeof(float));
            if (stages(r, info, x0, N, 0, r->tmp, r->clean, r->rn_clean, r->clean)) return 1;
            /* tmp held the clean acts: stages() wrote hidden_pre's scratch there first, fine */
        }
        if (!edits) { /* the activation is x, exactly; the error observed */
            if (err_on) {
                for (size_t i = 0; i < nd; i++) r->err[i] = data[i] - r->clean[i];
                memcpy(r->tmp, r->err, nd * sizeof(float));
                if (fire_sub(r->hs, r->sub[SUB_ERROR], r->layer, info, B, T, r->err)) return 1;
                for (size_t i = 0; i < nd; i++) data[i] += r->err[i] - r->tmp[i];
            }
        } else {
            for (size_t i = 0; i < nd; i++) r->err[i] = data[i] - r->clean[i];
            if (err_on) {
                memcpy(r->tmp, r->err, nd * sizeof(float));
                if (fire_sub(r->hs, r->sub[SUB_ERROR], r->layer, info, B, T, r->err)) return 1;
                for (size_t i = 0; i < nd; i++) data[i] += (r->out[i] - r->clean[i]) + (r->err[i] - r->tmp[i]);
            } else {
                for (size_t i = 0; i < nd; i++) data[i] += r->out[i] - r->clean[i];
            }
        }
    }
    return fire_sub(r->hs, r->sub[SUB_OUTPUT], r->layer, info, B, T, data) != MP_OK;
}

/* ---- the backward ---- */

void mp_sae_bwd_step(const mp_sae *s, mp_sae_bwd_stage stage, int N, const float *g, const float *x,
                     const float *rec, const mp_sae_rownorm *rn, const unsigned char *mask, float *g_rec,
                     float *g_acts, float *g_pre, float *g_xn, float *gx) {
    const int D = s->d_in, F = s->d_sae;
    switch (stage) {
    case MP_SAE_BWD_RECONS:
        for (int r = 0; r < N; r++)
            for (int i = 0; i < D; i++) g_rec[(size_t)r * D + i] = g[(size_t)r * D + i] * rn[r].a;
        break;
    case MP_SAE_BWD_ACTS_POST: /* g_acts [N,F] = g_rec [N,D] W_dec^T (W_dec [F,D]) */
        if (N > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, F, D, 1.0f, g_rec, D, s->W_dec, D, 0.0f,
                               g_acts, F);
        break;
    case MP_SAE_BWD_ACTS_PRE:
        for (size_t i = 0; i < (size_t)N * F; i++) g_pre[i] = mask[i] ? g_acts[i] : 0.0f;
        break;
    case MP_SAE_BWD_INPUT: /* g_xn [N,D] = g_pre [N,F] W_enc^T (W_enc [D,F]), then the norms' transposes */
        if (N > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, D, F, 1.0f, g_pre, F, s->W_enc, F, 0.0f,
                               g_xn, D);
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
        for (int r = 0; r < N; r++) {
            const float *xr = x + (size_t)r * D, *gr = g + (size_t)r * D, *rr = rec + (size_t)r * D;
            const float *gn = g_xn + (size_t)r * D;
            float *o = gx + (size_t)r * D;
            if (s->normalize == MP_SAE_NORM_CONSTANT_NORM_RESCALE) {
                /* xn = x c, c = sqrt(D)/|x|; out = rec / c */
                double ss = 0, xg = 0, gr_rec = 0;
                for (int i = 0; i < D; i++) {
                    ss += (double)xr[i] * xr[i];
                    xg += (double)xr[i] * gn[i];
                    gr_rec += (double)gr[i] * rr[i];
                }
                const double nx = sqrt(ss), c = sqrt((double)D) / nx;
                for (int i = 0; i < D; i++)
                    o[i] = (float)(c * (gn[i] - xr[i] * xg / ss) + gr_rec * xr[i] / (nx * sqrt((double)D)));
            } else if (s->normalize == MP_SAE_NORM_LAYER_NORM) {
                /* xn = (x - mu) / (sd + eps), sd unbiased; out = rec sd + mu */
                double mu = 0, v = 0;
                for (int i = 0; i < D; i++) mu += xr[i];
                mu /= D;
                for (int i = 0; i < D; i++) v += ((double)xr[i] - mu) * ((double)xr[i] - mu);
                const double sd = sqrt(v / (D - 1)), inv = 1.0 / (sd + 1e-5);
                double mg = 0, ug = 0, gsum = 0, grec = 0;
                for (int i = 0; i < D; i++) {
                    mg += gn[i];
                    ug += gn[i] * ((double)xr[i] - mu);
                    gsum += gr[i];
                    grec += (double)gr[i] * rr[i];
                }
                mg /= D;
                const double gsd = -ug * inv * inv + grec;
                for (int i = 0; i < D; i++)
                    o[i] = (float)(inv * (gn[i] - mg) + gsd * ((double)xr[i] - mu) / ((D - 1) * sd) + gsum / D);
            } else {
                memcpy(o, gn, (size_t)D * sizeof(float));
            }
        }
        break;
    }
}

static mp_status bwd_reserve(splice_bwd *b, size_t N) {
    if (N <= b->cap) return MP_OK;
    const size_t D = (size_t)b->f->sae->d_in, F = (size_t)b->f->sae->d_sae;
    if (grow(&b->g, N * D, 4) || grow(&b->g_rec, N * D, 4) || grow(&b->g_acts, N * F, 4) ||
        grow(&b->g_pre, N * F, 4) || grow(&b->g_xn, N * D, 4) || grow(&b->gx, N * D, 4) || grow(&b->ge, N * D, 4))
        return mp_error(MP_ERR_NOMEM, "out of memory for the SAE's backward at %s", b->f->sae->hook_name);
    b->cap = N;
    return MP_OK;
}

static int splice_bwd_cb(void *user, const mp_hook_info *info, float *data) {
    splice_bwd *b = user;
    const splice_run *r = b->f;
    const mp_sae *s = r->sae;
    const int B = (int)info->shape[0], T = (int)info->shape[1], N = B * T;
    const size_t nd = (size_t)N * s->d_in;
    if (N != r->N || info->numel != nd) {
        mp_error(MP_ERR_HOOK, "the SAE's backward at %s found no forward of the same shape to go back through",
                 info->name);
        return 1;
    }
    if (bwd_reserve(b, (size_t)N)) return 1;
    const mp_hooks *hs = b->hs;
    const int l = r->layer;
    mp_status st;
    if ((st = fire_sub(hs, b->sub[SUB_OUTPUT], l, info, B, T, data))) return 1;
    if (r->use_err && mp_hooks_active(hs, b->sub[SUB_ERROR], l)) { /* the error node's gradient is g (detached) */
        memcpy(b->ge, data, nd * sizeof(float));
        if ((st = fire_sub(hs, b->sub[SUB_ERROR], l, info, B, T, b->ge))) return 1;
    }
    mp_sae_bwd_step(s, MP_SAE_BWD_RECONS, N, data, r->x, r->rec, r->rn, r->mask, b->g_rec, b->g_acts, b->g_pre,
                    b->g_xn, b->gx);
    if ((st = fire_sub(hs, b->sub[SUB_RECONS], l, info, B, T, b->g_rec))) return 1;
    mp_sae_bwd_step(s, MP_SAE_BWD_ACTS_POST, N, data, r->x, r->rec, r->rn, r->mask, b->g_rec, b->g_acts, b->g_pre,
                    b->g_xn, b->gx);
    if ((st = fire_sub(hs, b->sub[SUB_POST], l, info, B, T, b->g_acts))) return 1;
    mp_sae_bwd_step(s, MP_SAE_BWD_ACTS_PRE, N, data, r->x, r->rec, r->rn, r->mask, b->g_rec, b->g_acts, b->g_pre,
                    b->g_xn, b->gx);
    if ((st = fire_sub(hs, b->sub[SUB_PRE], l, info, B, T, b->g_pre))) return 1;
    mp_sae_bwd_step(s, MP_SAE_BWD_INPUT, N, data, r->x, r->rec, r->rn, r->mask, b->g_rec, b->g_acts, b->g_pre,
                    b->g_xn, b->gx);
    if ((st = fire_sub(hs, b->sub[SUB_INPUT], l, info, B, T, b->gx))) return 1;
    memcpy(data, b->gx, nd * sizeof(float));
    return 0;
}

/* ---- registries ---- */

/* Declares the sub-points of SAE a on hs into sub[]. */
static mp_status declare_subs(mp_hooks *hs, const attached *a, mp_hook_id *sub) {
    char name[192], parent[96];
    mp_hook_name(a->id, a->layer, parent, sizeof parent);
    for (int k = 0; k < SUB_COUNT; k++) {
        sub[k] = (mp_hook_id)-1;
        if (k == SUB_ERROR && !a->use_err) continue;
        const int w = k == SUB_PRE || k == SUB_POST ? a->sae->d_sae : a->sae->d_in;
        snprintf(name, sizeof name, "%s.%s", parent, sub_names[k]);
        mp_status st = mp_hooks_declare(hs, name, a->id, a->layer, w, 1, &sub[k]);
        if (st) return st;
    }
    return MP_OK;
}

mp_hooks *mp_hooks_new_model(const mp_model *m) {
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    if (!hs) {
        mp_error(MP_ERR_NOMEM, "out of memory for a hook registry");
        return NULL;
    }
    for (int i = 0; i < mp_model_n_saes(m); i++) {
        const attached *a = &m->splice->a[i];
        splice_run *r = mp_calloc(1, sizeof *r, "an SAE splice");
        if (!r || mp_hooks_own(hs, r, run_free)) goto fail;
        r->sae = a->sae;
        r->use_err = a->use_err;
        r->id = a->id;
        r->layer = a->layer;
        r->hs = hs;
        if (declare_subs(hs, a, r->sub) || mp_hooks_add_at(hs, a->id, a->layer, splice_fwd, r)) goto fail;
    }
    return hs;
fail:
    mp_hooks_free(hs);
    return NULL;
}

mp_hooks *mp_hooks_new_bwd(const mp_model *m, const mp_hooks *fwd) {
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    if (!hs) {
        mp_error(MP_ERR_NOMEM, "out of memory for a hook registry");
        return NULL;
    }
    for (int i = 0; fwd && i < mp_model_n_saes(m); i++) {
        const attached *a = &m->splice->a[i];
        mp_hook_fn fns[16];
        void *users[16];
        int n = mp_hooks_at(fwd, a->id, a->layer, fns, users, 16);
        splice_run *r = NULL;
        for (int k = 0; k < n && k < 16 && !r; k++)
            if (fns[k] == splice_fwd && ((splice_run *)users[k])->sae == a->sae) r = users[k];
        if (!r) continue; /* the forward registry was made before this SAE was attached */
        splice_bwd *b = mp_calloc(1, sizeof *b, "an SAE splice's backward");
        if (!b || mp_hooks_own(hs, b, bwd_free)) goto fail;
        b->f = r;
        b->hs = hs;
        if (declare_subs(hs, a, b->sub) || mp_hooks_add_late_at(hs, a->id, a->layer, splice_bwd_cb, b)) goto fail;
    }
    return hs;
fail:
    mp_hooks_free(hs);
    return NULL;
}
