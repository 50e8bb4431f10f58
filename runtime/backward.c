/* backward.c — the one backward of the model (see backward.h): a single walk
 * in reverse over a training-mode forward's activations, over a backend's
 * table of operations (mp_bwd_ops: the CPU's in backward_cpu.c, the CUDA
 * backend's in backends/cuda/cuda_model.c). It serves the training step
 * (train.c and the CUDA step: weight gradients, no hooks) and the backward
 * hooks of interpretability (grad.c: input gradients only, a callback at
 * every hook point that may edit the gradient there, the edit propagating
 * upstream). The two switches are independent: weight gradients with hooks
 * fire the hooks and accumulate the weights' gradients from the edited
 * values.
 *
 * The walk owns the order of the steps, which buffer each reads and writes,
 * where the hook points fire and which form of a step a call takes; the ops
 * own how a step runs. Every step of the block is written once, here. Where
 * the two callers have always computed a step with different arithmetic,
 * both are kept, so that each keeps its bytes:
 *  - the attention: with weight gradients and neither attention map of the
 *    layer hooked, the fused step (ops->attn); otherwise three stages with a
 *    hook point between them, dz -> d pattern -> d scores -> dq, dk;
 *  - the SwiGLU MLP's input gradient sums its two products in the order each
 *    caller has always used (dxn_order below). */
#include "backward.h"
#include "exec.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const mp_bwd_ops *ops;
    void *ctx;
    const mp_config *c;
    const mp_hooks *hs;
    int B, T;
    int wgrad;   /* weight gradients on */
    float *dbr;  /* [N, D] a branch's own copy of a residual gradient (hooks only) */
    float *dsc;  /* [N] a hook_scale gradient (hooks only) */
    float *ndw;  /* [2 D] the norms' discarded weight gradients (no weight gradients) */
    float *spare; /* [N, D] a discarded input gradient (weight gradients and hooks) */
    float *dpar;  /* [N, D] a parallel block's MLP input gradient, added to resid_pre's after the attention */
} walk;

/* Fires the backward callbacks at (id, l) on the whole gradient view. */
static mp_status fire(const walk *f, mp_hook_id id, int l, float *grad) {
    if (!mp_hooks_active(f->hs, id, l)) return MP_OK;
    mp_hook_info info;
    memset(&info, 0, sizeof info);
    info.id = id;
    info.layer = l;
    info.ndim = mp_hook_shape(f->c, id, f->B, f->T, 0, info.shape);
    memcpy(info.full, info.shape, sizeof info.full);
    info.axis = 1;
    info.numel = 1;
    for (int i = 0; i < info.ndim; i++) info.numel *= (size_t)info.shape[i];
    return f->ops->fire(f->ctx, f->hs, &info, grad);
}

/* A norm's backward: dres += its input gradient from dout; dw, db (weight
 * gradients on) += its weights' gradients. With its hook_scale point sid
 * hooked, d scale [N] is fired (and may be edited), then dres += the input
 * gradient with the scale held fixed plus d scale * d scale/dx, which is the
 * unhooked step's result when nothing is edited. */
static mp_status norm_step(const walk *f, mp_hook_id sid, int l, float *dres, float *dw, float *db,
                           const float *dout, const float *x, const float *w, const float *mean, const float *rstd) {
    const mp_bwd_ops *o = f->ops;
    const mp_config *c = f->c;
    const int N = f->B * f->T, D = c->d_model;
    mp_status st;
    if (!f->wgrad) dw = f->ndw, db = f->ndw + D;
    if (!mp_hooks_active(f->hs, sid, l)) return o->norm(f->ctx, c, dres, dw, db, dout, x, w, mean, rstd, N);
    if (f->wgrad) { /* the weights' gradients as unhooked; its input gradient is discarded */
        if ((st = o->zero(f->ctx, f->spare, (size_t)N * D))) return st;
        if ((st = o->norm(f->ctx, c, f->spare, dw, db, dout, x, w, mean, rstd, N))) return st;
    }
    if ((st = o->norm_dscale(f->ctx, c, f->dsc, dout, x, w, mean, rstd, N))) return st;
    if ((st = fire(f, sid, l, f->dsc))) return st;
    return o->norm_dx_scaled(f->ctx, c, dres, f->dsc, dout, x, w, mean, rstd, N);
}

/* The entries a call needs that a table may lack (backward.h). */
static mp_status check_ops(const mp_bwd_ops *o, const mp_config *c, int wgrad, int hooks) {
    const char *miss = NULL;
    if (!o->zero || !o->linear || !o->norm || !o->act || !o->pos || (wgrad && (!o->attn || !o->embed)))
        miss = "its core steps";
    else if (c->qk_norm != MP_QK_NORM_NONE && !o->qk_norm)
        miss = "the q/k norm";
    else if (wgrad && mp_attn_has_factor(c->attn) && !o->attn_factor)
        miss = "the attention variant's factor gradient";
    else if (c->rel_values > 0 && (!o->attn_relv || !o->attn_dpattern || !o->attn_dscores || !o->attn_dqk))
        miss = "Shaw's relative values (rel_values)";
    else if ((!wgrad || hooks) && (!o->attn_dpattern || !o->attn_dscores || !o->attn_dqk || !o->alloc || !o->release))
        miss = "the staged attention (input gradients only, or backward hooks)";
    else if (c->parallel_attn && (!o->add || !o->alloc || !o->release))
        miss = "the parallel block's residual sum";
    else if (c->no_pre_norms && (!o->add || (hooks && !o->copy)))
        miss = "the residual sums of a block without pre-norms (pre_norms = false)";
    else if (hooks && (!o->fire || !o->copy || !o->add || !o->norm_dscale || !o->norm_dx_scaled ||
                       !o->result_spread || !o->result_back))
        miss = "backward hooks";
    if (!miss) return MP_OK;
    return mp_error(MP_ERR_ARG, "backward: the %s backend's operations do not include %s", o->name, miss);
}

/* mp_backward_walk with a padded batch's mask (NULL: none; mp_backward_masked). */
static mp_status walk_masked(const mp_bwd_ops *ops, void *ctx, const mp_config *c, const mp_params *p,
                             const mp_params *g, mp_acts *A, const float *dlogits, const mp_backward_params *bp,
                             const int *mask) {
    const mp_hooks *hs = bp->hooks;
    const int B = A->B, T = A->T, N = B * T, D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head;
    const int M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp, HD = H * Dh, KD = K * Dh, half = Dh / 2;
    const size_t nx = (size_t)N * D, nh = (size_t)N * M;
    mp_status st = check_ops(ops, c, g != NULL, hs != NULL);
    if (st) return st;
    if (mask && (g || ops != &mp_bwd_ops_cpu))
        return mp_error(MP_ERR_ARG, "backward: a padded batch (attention mask) has input gradients only, on the CPU");
    walk f = {ops, ctx, c, hs, B, T, g != NULL, NULL, NULL, NULL, NULL, NULL};
    /* a padded batch: each token's positional tables (ragged.c), as its forward used */
    int *pos_ids = NULL;
    float *pos_g = NULL;
    int pos_scale = 0;
    if (mask && mp_pos_rotates(c)) {
        pos_ids = mp_malloc((size_t)N * sizeof(int), "position ids of a padded batch");
        pos_g = pos_ids ? mp_malloc(mp_pos_tables_floats(c, (size_t)N) * sizeof(float),
                                    "positional tables of a padded batch") : NULL;
        if (!pos_g) { free(pos_ids); return MP_ERR_NOMEM; }
        mp_mask_positions(mask, B, T, pos_ids);
        if ((st = mp_mask_pos_tables(c, pos_ids, (size_t)N, pos_g, &pos_scale))) {
            free(pos_ids);
            free(pos_g);
            return st;
        }
    }
    const int par = c->parallel_attn;
    float *dres = A->dresid, *dxn = A->dxn;
    /* the hooks' buffers, the norms' discarded weight gradients */
    const size_t nmem = (hs ? nx + (size_t)N : 0) + (g ? 0 : 2 * (size_t)D) + (hs && g ? nx : 0) + (par ? nx : 0);
    float *mem = nmem ? ops->alloc(ctx, nmem, "gradient buffers") : NULL;
    if (nmem && !mem) {
        free(pos_ids);
        free(pos_g);
        return MP_ERR_NOMEM;
    }
    float *cur = mem;
    if (hs) f.dbr = cur, cur += nx, f.dsc = cur, cur += N;
    if (!g) f.ndw = cur, cur += 2 * (size_t)D;
    if (hs && g) f.spare = cur, cur += nx;
    if (par) f.dpar = cur;
    float *dres_h = NULL; /* hook_result's gradient [N, H, D], only when it is hooked */
#define TRY(x) do { if ((st = (x))) goto cleanup; } while (0)
#define FIRE(id, l, ptr) TRY(fire(&f, id, l, ptr))
#define LIN(din, beta, dw, db, dout, in, w, IN, OUT) TRY(ops->linear(ctx, din, beta, dw, db, dout, in, w, N, IN, OUT))
    /* the final soft cap (Gemma 2): d raw logits = d logits * (1 - (logit / cap)^2), the factor the forward kept */
    if (c->final_softcap > 0.0f) {
        if (!dlogits || !ops->mul || !A->logit_dcap) {
            st = mp_error(MP_ERR_ARG, "backward: the %s backend's operations do not include the final-logit soft cap "
                          "(final_softcap)", ops->name);
            goto cleanup;
        }
        TRY(ops->mul(ctx, A->dlogits_raw, dlogits, A->logit_dcap, (size_t)A->logit_rows * c->vocab));
        dlogits = A->dlogits_raw;
    }
    /* classifier (unless the caller ran it) and final norm */
    if (dlogits) LIN(dxn, 0.0f, g ? g->unembed : NULL, NULL, dlogits, A->lnf, p->unembed, D, c->vocab);
    FIRE(MP_HOOK_LN_FINAL, -1, dxn);
    TRY(ops->zero(ctx, dres, nx));
    TRY(norm_step(&f, MP_HOOK_LNF_SCALE, -1, dres, g ? g->lnf_w : NULL, g ? g->lnf_b : NULL, dxn,
                  A->resid + (size_t)c->n_layer * nx, p->lnf_w, A->lnf_mean, A->lnf_rstd));
    for (int l = c->n_layer - 1; l >= 0; l--) {
        /* this layer's weights, their gradients, and its stored activations */
        const mp_layer_params w = mp_params_layer(c, p, l);
        mp_layer_params dw;
        if (g) dw = mp_params_layer(c, g, l);
        else memset(&dw, 0, sizeof dw);
        const mp_layer_acts a = mp_acts_layer(c, A, l);
        FIRE(MP_HOOK_RESID_POST, l, dres);
        if (M) {
            const float *dout = dres;
            if (mp_hooks_active(hs, MP_HOOK_MLP_OUT, l)) { /* an edit reaches the MLP branch only */
                TRY(ops->copy(ctx, f.dbr, dres, nx));
                FIRE(MP_HOOK_MLP_OUT, l, f.dbr);
                dout = f.dbr;
            }
            if (c->post_norms) { /* ln2_post: hook_normalized is hook_mlp_out's tensor; then its input's gradient */
                if (dout == dres && mp_hooks_active(hs, MP_HOOK_LN2_POST, l)) {
                    TRY(ops->copy(ctx, f.dbr, dres, nx));
                    dout = f.dbr;
                }
                FIRE(MP_HOOK_LN2_POST, l, (float *)dout);
                TRY(ops->zero(ctx, A->dnr, nx));
                TRY(norm_step(&f, MP_HOOK_LN2_POST_SCALE, l, A->dnr, dw.ln2p_w, NULL, dout, a.mlp_raw, w.ln2p_w, NULL,
                              a.ln2p_rstd));
                dout = A->dnr;
            }
            LIN(A->dpost, 0.0f, dw.w2, dw.b2, dout, a.post, w.w2, M, D);
            FIRE(MP_HOOK_MLP_POST, l, A->dpost);
            TRY(ops->zero(ctx, A->dpre, nh));
            if (c->mlp == MP_MLP_SWIGLU) TRY(ops->zero(ctx, A->dup, nh));
            TRY(ops->act(ctx, c, A->dpre, A->dup, A->dpost, a.pre, a.up, nh));
            if (c->mlp == MP_MLP_SWIGLU) FIRE(MP_HOOK_MLP_PRE_LINEAR, l, A->dup);
            FIRE(MP_HOOK_MLP_PRE, l, A->dpre);
            /* dxn_order: the training step has always summed the up (w3) product
             * first, the backward hooks the gate (w1) product first */
            if (c->mlp != MP_MLP_SWIGLU) {
                LIN(dxn, 0.0f, dw.w1, dw.b1, A->dpre, a.ln2, w.w1, D, M);
            } else if (g) {
                LIN(dxn, 0.0f, dw.w3, dw.b3, A->dup, a.ln2, w.w3, D, M);
                LIN(dxn, 1.0f, dw.w1, dw.b1, A->dpre, a.ln2, w.w1, D, M);
            } else {
                LIN(dxn, 0.0f, NULL, NULL, A->dpre, a.ln2, w.w1, D, M);
                LIN(dxn, 1.0f, NULL, NULL, A->dup, a.ln2, w.w3, D, M);
            }
            /* hook_mlp_in: the MLP branch's own input gradient, then added to the residual's (a parallel
             * block's MLP reads resid_pre: its input gradient waits in dpar while the attention's
             * output gradient is still dres, and joins resid_pre's below) */
            const int mi = mp_hooks_active(hs, MP_HOOK_MLP_IN, l);
            float *dmi = par ? f.dpar : dres;
            if (par) TRY(ops->zero(ctx, f.dpar, nx));
            if (c->no_pre_norms) { /* OLMo 2: no ln2, the input's gradient is dxn's */
                if (mi) TRY(ops->copy(ctx, f.dbr, dxn, nx));
                else TRY(ops->add(ctx, dmi, dxn, nx));
            } else {
                FIRE(MP_HOOK_LN2, l, dxn);
                if (mi) TRY(ops->zero(ctx, f.dbr, nx));
                TRY(norm_step(&f, MP_HOOK_LN2_SCALE, l, mi ? f.dbr : dmi, dw.ln2_w, dw.ln2_b, dxn,
                              par ? a.resid_in : a.resid_mid, w.ln2_w, a.ln2_mean, a.ln2_rstd));
            }
            if (mi) {
                FIRE(MP_HOOK_MLP_IN, l, f.dbr);
                TRY(ops->add(ctx, dmi, f.dbr, nx));
            }
        }
        /* attention */
        if (!par) FIRE(MP_HOOK_RESID_MID, l, dres);
        const float *dout = dres;
        if (mp_hooks_active(hs, MP_HOOK_ATTN_OUT, l)) {
            TRY(ops->copy(ctx, f.dbr, dres, nx));
            FIRE(MP_HOOK_ATTN_OUT, l, f.dbr);
            dout = f.dbr;
        }
        if (c->post_norms) { /* ln1_post, as ln2_post above */
            if (dout == dres && mp_hooks_active(hs, MP_HOOK_LN1_POST, l)) {
                TRY(ops->copy(ctx, f.dbr, dres, nx));
                dout = f.dbr;
            }
            FIRE(MP_HOOK_LN1_POST, l, (float *)dout);
            TRY(ops->zero(ctx, A->dnr, nx));
            TRY(norm_step(&f, MP_HOOK_LN1_POST_SCALE, l, A->dnr, dw.ln1p_w, NULL, dout, a.attn_raw, w.ln1p_w, NULL,
                          a.ln1p_rstd));
            dout = A->dnr;
        }
        if (mp_hooks_active(hs, MP_HOOK_RESULT, l)) {
            /* each head's share of attn_out gets dout, fired as [N, H, D]; the bias is no head's */
            if (!dres_h && !(dres_h = ops->alloc(ctx, (size_t)N * H * D, "hook_result's gradient"))) {
                st = MP_ERR_NOMEM;
                goto cleanup;
            }
            TRY(ops->result_spread(ctx, c, dres_h, dout, N));
            FIRE(MP_HOOK_RESULT, l, dres_h);
            TRY(ops->result_back(ctx, c, A->dz, dw.wo, dw.bo, dres_h, dout, a.z, w.wo, N));
        } else {
            LIN(A->dz, 0.0f, dw.wo, dw.bo, dout, a.z, w.wo, HD, D);
        }
        FIRE(MP_HOOK_Z, l, A->dz);
        const mp_attn_layer av = mp_attn_layer_of(c, p, l);
        /* the fused step with weight gradients and neither map hooked; Shaw's relative values add to the
         * pattern's gradient between the stages, so such a model always takes the staged one */
        if (g && !c->rel_values && !mp_hooks_active(hs, MP_HOOK_PATTERN, l) &&
            !mp_hooks_active(hs, MP_HOOK_ATTN_SCORES, l)) {
            TRY(ops->zero(ctx, A->dq, (size_t)N * HD));
            TRY(ops->zero(ctx, A->dk, (size_t)N * KD));
            TRY(ops->zero(ctx, A->dv, (size_t)N * KD));
            TRY(ops->attn(ctx, c, A, l, &a, &av, A->dz, A->dq, A->dk, A->dv, A->datt, A->dfac));
        } else { /* dz -> d pattern (hook_pattern) -> d scores (hook_attn_scores) -> dq, dk; dv */
            TRY(ops->attn_dpattern(ctx, c, &a, &av, B, T, A->dz, A->datt, A->dv));
            if (c->rel_values > 0) /* z_i += sum_j a_ij rel_v[clip(i - j)]: its share of d pattern, and rel_v's */
                TRY(ops->attn_relv(ctx, c, &a, &av, w.rel_v, g ? dw.rel_v : NULL, B, T, A->dz, A->datt, mask));
            /* a padded batch: 0 at the keys a query does not see (their pattern is 0: nothing flows there) */
            if (mask) mp_mask_grad_pattern(mask, B, H, T, A->datt);
            FIRE(MP_HOOK_PATTERN, l, A->datt);
            TRY(ops->attn_dscores(ctx, c, &a, &av, B, T, A->datt, g ? A->dfac : NULL));
            FIRE(MP_HOOK_ATTN_SCORES, l, A->datt);
            TRY(ops->attn_dqk(ctx, c, &a, B, T, A->datt, A->dq, A->dk));
        }
        /* the variant's per-head parameters (ssmax s; asentmax delta, beta, gamma) */
        if (g && mp_attn_has_factor(av.kind))
            TRY(ops->attn_factor(ctx, &av, dw.ssmax_s, dw.as_delta, dw.as_beta, dw.as_gamma, A->dfac, B, H, T));
        FIRE(MP_HOOK_ROT_K, l, A->dk);
        FIRE(MP_HOOK_ROT_Q, l, A->dq);
        if (pos_g) { /* a padded batch: per-token tables, as the forward applied them (B = 1, T = N) */
            const float *cos_t, *sin_t;
            mp_pos_layer_tables(c, l, pos_g, (size_t)N, &cos_t, &sin_t);
            const float *q_scale = pos_scale ? pos_g + 2 * (size_t)N * half : NULL;
            TRY(ops->pos(ctx, c, cos_t, sin_t, q_scale, A->dq, 1, N, H));
            TRY(ops->pos(ctx, c, cos_t, sin_t, NULL, A->dk, 1, N, K));
        } else if (mp_pos_rotates(c)) { /* the forward's tables (A->pos_tab; a windowed layer's own) */
            const float *cos_t, *sin_t;
            mp_pos_layer_tables(c, l, A->pos_tab, (size_t)T, &cos_t, &sin_t);
            const float *q_scale = mp_pos_has_logit_scale(c) ? A->pos_tab + 2 * (size_t)T * half : NULL;
            TRY(ops->pos(ctx, c, cos_t, sin_t, q_scale, A->dq, B, T, H));
            TRY(ops->pos(ctx, c, cos_t, sin_t, NULL, A->dk, B, T, K));
        }
        if (c->qk_norm != MP_QK_NORM_NONE) { /* through the q/k norm to the projections (dz: scratch) */
            FIRE(MP_HOOK_K_NORM, l, A->dk);
            FIRE(MP_HOOK_Q_NORM, l, A->dq);
            const float *nw;
            int rows, width;
            mp_exec_qk_norm_of(c, p, MP_HOOK_K_NORM, l, N, &nw, &rows, &width);
            TRY(ops->qk_norm(ctx, c, A->dk, A->dz, g ? dw.k_norm : NULL, a.k_in, nw, a.k_rstd, rows, width));
            mp_exec_qk_norm_of(c, p, MP_HOOK_Q_NORM, l, N, &nw, &rows, &width);
            TRY(ops->qk_norm(ctx, c, A->dq, A->dz, g ? dw.q_norm : NULL, a.q_in, nw, a.q_rstd, rows, width));
        }
        FIRE(MP_HOOK_V, l, A->dv);
        FIRE(MP_HOOK_K, l, A->dk);
        FIRE(MP_HOOK_Q, l, A->dq);
        LIN(dxn, 0.0f, dw.wq, dw.bq, A->dq, a.ln1, w.wq, D, HD);
        LIN(dxn, 1.0f, dw.wk, dw.bk, A->dk, a.ln1, w.wk, D, KD);
        LIN(dxn, 1.0f, dw.wv, dw.bv, A->dv, a.ln1, w.wv, D, KD);
        if (c->no_pre_norms) { /* OLMo 2: no ln1, resid_pre's gradient takes dxn */
            TRY(ops->add(ctx, dres, dxn, nx));
        } else {
            FIRE(MP_HOOK_LN1, l, dxn);
            TRY(norm_step(&f, MP_HOOK_LN1_SCALE, l, dres, dw.ln1_w, dw.ln1_b, dxn, a.resid_in, w.ln1_w, a.ln1_mean,
                          a.ln1_rstd));
        }
        if (par) TRY(ops->add(ctx, dres, f.dpar, nx)); /* the parallel MLP's share of resid_pre's gradient */
        FIRE(MP_HOOK_RESID_PRE, l, dres);
        if (g && bp->sync) TRY(bp->sync->ready(bp->sync->user, bp->grads, c, l));
    }
    /* embeddings: hook_embed is token + position */
    FIRE(MP_HOOK_EMBED, -1, dres);
    const float *dpos = dres;
    if (c->pos == MP_POS_LEARNED && mp_hooks_active(hs, MP_HOOK_POS_EMBED, -1)) {
        TRY(ops->copy(ctx, f.dbr, dres, nx));
        FIRE(MP_HOOK_POS_EMBED, -1, f.dbr);
        dpos = f.dbr;
    }
    if (g) {
        TRY(ops->embed(ctx, c, g->embed, g->pos_embed, dres, dpos, bp->tokens, B, T));
        if (bp->sync) TRY(bp->sync->ready(bp->sync->user, bp->grads, c, -1));
    }
#undef LIN
#undef FIRE
#undef TRY
    st = MP_OK;
cleanup:
    if (dres_h) ops->release(ctx, dres_h);
    if (mem) ops->release(ctx, mem);
    free(pos_ids);
    free(pos_g);
    return st;
}

mp_status mp_backward_walk(const mp_bwd_ops *ops, void *ctx, const mp_config *c, const mp_params *p,
                           const mp_params *g, mp_acts *A, const float *dlogits, const mp_backward_params *bp) {
    return walk_masked(ops, ctx, c, p, g, A, dlogits, bp, NULL);
}

mp_status mp_backward_masked(const mp_model *m, mp_acts *A, const float *dlogits, const mp_backward_params *bp,
                             const int *mask) {
    return walk_masked(mp_exec_cpu.bwd, NULL, &m->cfg, &m->p, bp->grads ? &bp->grads->g : NULL, A, dlogits, bp,
                       mask);
}

mp_status mp_backward(const mp_model *m, mp_acts *A, const float *dlogits, const mp_backward_params *bp) {
    return mp_backward_walk(mp_exec_cpu.bwd, NULL, &m->cfg, &m->p, bp->grads ? &bp->grads->g : NULL, A, dlogits,
                            bp);
}
