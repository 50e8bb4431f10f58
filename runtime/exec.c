/* exec.c — the one forward walk (mp_block_forward): the transformer's steps
 * and every hook point, in order, over a device's op table (exec.h). The CPU
 * (model.c mp_model_forward) and CUDA (backends/cuda/cuda_model.c forward_dev)
 * both run it; nothing else encodes the order of the steps or the hooks. */
#include "exec.h"

#include <string.h>

mp_status mp_exec_fire(const mp_exec *e, mp_hook_id id, int l, float *data) {
    if (!mp_hooks_active(e->f.hs, id, l)) return MP_OK;
    mp_hook_info info;
    mp_fwd_whole_info(&e->f, id, l, &info);
    return e->ops->view(e, &info, data);
}

mp_status mp_exec_fire_block(const mp_exec *e, mp_hook_id id, int l, int q0, int rows, float *data) {
    if (!mp_hooks_active(e->f.hs, id, l)) return MP_OK;
    mp_hook_info info;
    mp_fwd_block_info(&e->f, id, l, q0, rows, &info);
    return e->ops->view(e, &info, data);
}

void mp_exec_weight_of(const mp_config *c, const mp_params *p, mp_exec_weight w, int l, const float **W,
                       const float **bias, int *in, int *out) {
    const int D = c->d_model, HD = c->n_head * c->d_head, KD = c->n_kv_head * c->d_head;
    const int M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp;
    if (w == MP_EXEC_UNEMBED) {
        *W = p->unembed, *bias = NULL, *in = D, *out = c->vocab;
        return;
    }
    const mp_layer_params lp = mp_params_layer(c, p, l);
    switch (w) {
    case MP_EXEC_WQ: *W = lp.wq, *bias = lp.bq, *in = D, *out = HD; break;
    case MP_EXEC_WK: *W = lp.wk, *bias = lp.bk, *in = D, *out = KD; break;
    case MP_EXEC_WV: *W = lp.wv, *bias = lp.bv, *in = D, *out = KD; break;
    case MP_EXEC_WO: *W = lp.wo, *bias = lp.bo, *in = HD, *out = D; break;
    case MP_EXEC_W1: *W = lp.w1, *bias = lp.b1, *in = D, *out = M; break;
    case MP_EXEC_W3: *W = lp.w3, *bias = lp.b3, *in = D, *out = M; break;
    default:         *W = lp.w2, *bias = lp.b2, *in = M, *out = D; break;
    }
}

void mp_exec_norm_of(const mp_config *c, const mp_params *p, mp_hook_id sid, int l, const float **w,
                     const float **bias) {
    if (sid == MP_HOOK_LNF_SCALE) {
        *w = p->lnf_w, *bias = p->lnf_b;
        return;
    }
    const mp_layer_params lp = mp_params_layer(c, p, l);
    if (sid == MP_HOOK_LN1_SCALE) *w = lp.ln1_w, *bias = lp.ln1_b;
    else if (sid == MP_HOOK_LN1_POST_SCALE) *w = lp.ln1p_w, *bias = NULL;
    else if (sid == MP_HOOK_LN2_POST_SCALE) *w = lp.ln2p_w, *bias = NULL;
    else *w = lp.ln2_w, *bias = lp.ln2_b;
}

void mp_exec_qk_norm_of(const mp_config *c, const mp_params *p, mp_hook_id id, int l, int N, const float **w,
                        int *rows, int *width) {
    const mp_layer_params lp = mp_params_layer(c, p, l);
    const int nh = id == MP_HOOK_Q_NORM ? c->n_head : c->n_kv_head;
    *w = id == MP_HOOK_Q_NORM ? lp.q_norm : lp.k_norm;
    if (c->qk_norm == MP_QK_NORM_FULL) *rows = N, *width = nh * c->d_head;
    else *rows = N * nh, *width = c->d_head;
}

/* An optional op the walk needs here but the device lacks (its cpu_reason
 * should have sent the call to the CPU). */
static mp_status missing(const mp_exec *e, mp_hook_id id) {
    return mp_error(MP_ERR_ARG, "forward: device \"%s\" has no path for hook point %s (run this call on the cpu)",
                    e->ops->name, mp_hook_suffix[id]);
}

mp_status mp_block_forward(const mp_exec *e, const mp_exec_bufs *b) {
    const mp_exec_ops *o = e->ops;
    const mp_fwd_ctx *f = &e->f;
    const mp_config *c = f->c;
    const mp_acts *A = b->A;
    const int N = f->B * f->T;
    const size_t n_x = (size_t)N * c->d_model;
    const int swiglu = c->mlp == MP_MLP_SWIGLU;
    mp_status st = MP_OK;
#define TRY(expr) do { if ((st = (expr)) != MP_OK) return st; } while (0)
#define FIRE(id, l, ptr) TRY(mp_exec_fire(e, id, l, ptr))

    /* hook_embed = token + position embedding (hook_pos_embed: the position rows, before they are added) */
    float *x = A ? A->resid : b->scratch.resid_in;
    TRY(o->embed(e, x, b->tokens));
    if (c->pos == MP_POS_LEARNED) {
        if (mp_hooks_active(f->hs, MP_HOOK_POS_EMBED, -1)) {
            TRY(o->learned_pos(e, b->buf, 0));
            FIRE(MP_HOOK_POS_EMBED, -1, b->buf);
            TRY(o->add(e, x, b->buf, n_x));
        } else {
            TRY(o->learned_pos(e, x, 1));
        }
    }
    FIRE(MP_HOOK_EMBED, -1, x);
    for (int l = 0; l < c->n_layer; l++) {
        const mp_layer_acts a = A ? mp_acts_layer(c, A, l) : b->scratch;
        /* attention */
        FIRE(MP_HOOK_RESID_PRE, l, a.resid_in);
        const float *attn_in = a.ln1;
        if (c->no_pre_norms) { /* OLMo 2: the projections read resid_pre (a store keeps it in ln1 for the backward) */
            if (A) TRY(o->copy(e, a.ln1, a.resid_in, n_x));
            else attn_in = a.resid_in;
        } else {
            TRY(o->norm(e, MP_HOOK_LN1_SCALE, l, a.ln1, a.ln1_mean, a.ln1_rstd, a.resid_in));
            FIRE(MP_HOOK_LN1, l, a.ln1);
        }
        if (mp_fwd_split_active(f, l)) { /* hook_attn_in / q,k,v_input: per-head inputs */
            if (!o->split_qkv) return missing(e, MP_HOOK_ATTN_IN);
            TRY(o->split_qkv(e, l, attn_in, a.q, a.k, a.v));
        } else {
            TRY(o->linears(e, 3, (const mp_exec_weight[]){MP_EXEC_WQ, MP_EXEC_WK, MP_EXEC_WV}, l,
                           (float *const[]){a.q, a.k, a.v}, attn_in, N));
        }
        FIRE(MP_HOOK_Q, l, a.q);
        FIRE(MP_HOOK_K, l, a.k);
        FIRE(MP_HOOK_V, l, a.v);
        if (c->qk_norm != MP_QK_NORM_NONE) { /* RMSNorm of q and k (Qwen3, OLMo 2), before the positions */
            TRY(o->qk_norm(e, MP_HOOK_Q_NORM, l, a.q, a.q_in, a.q_rstd));
            TRY(o->qk_norm(e, MP_HOOK_K_NORM, l, a.k, a.k_in, a.k_rstd));
            FIRE(MP_HOOK_Q_NORM, l, a.q);
            FIRE(MP_HOOK_K_NORM, l, a.k);
        }
        TRY(o->pos_apply(e, l, a.q, a.k));
        FIRE(MP_HOOK_ROT_Q, l, a.q);
        FIRE(MP_HOOK_ROT_K, l, a.k);
        mp_kv_view kv = mp_kv_view_rows(a.k, a.v, f->T, c->n_kv_head, c->d_head);
        if (b->cache) TRY(o->kv_append(e, l, a.k, a.v, &kv));
        TRY(o->attention(e, l, &a, &kv, b->qb)); /* hook_attn_scores, hook_pattern per block */
        FIRE(MP_HOOK_Z, l, a.z);
        /* post_norms (Gemma 2): W_O's product into attn_raw, its norm ln1_post into out */
        float *ao = c->post_norms ? a.attn_raw : b->out;
        TRY(o->linear(e, MP_EXEC_WO, l, ao, a.z, N));
        if (mp_hooks_active(f->hs, MP_HOOK_RESULT, l)) { /* attn.hook_result */
            if (!o->result) return missing(e, MP_HOOK_RESULT);
            TRY(o->result(e, l, a.z, ao));
        }
        if (c->post_norms) {
            TRY(o->norm(e, MP_HOOK_LN1_POST_SCALE, l, b->out, NULL, a.ln1p_rstd, ao));
            FIRE(MP_HOOK_LN1_POST, l, b->out);
        }
        FIRE(MP_HOOK_ATTN_OUT, l, b->out);
        /* a store keeps each residual: copy, then add in place. A parallel block (c->parallel_attn) keeps
         * resid_pre + attn_out in resid_mid, a buffer of its own (each device's set-up), while its MLP
         * reads resid_pre; it fires no hook_resid_mid (TransformerLens's parallel_attn_mlp) */
        const int par = c->parallel_attn;
        if (par && a.resid_mid == a.resid_in)
            return mp_error(MP_ERR_ARG, "forward: device \"%s\" gave the parallel block no resid_mid buffer", o->name);
        if (a.resid_mid != a.resid_in) TRY(o->copy(e, a.resid_mid, a.resid_in, n_x));
        TRY(o->add(e, a.resid_mid, b->out, n_x));
        if (!par) FIRE(MP_HOOK_RESID_MID, l, a.resid_mid);
        if (!par && a.resid_out != a.resid_mid) TRY(o->copy(e, a.resid_out, a.resid_mid, n_x));
        /* MLP */
        if (c->mlp != MP_MLP_NONE) {
            /* hook_mlp_in: the MLP norm's own copy of its input (resid_mid; a parallel block's resid_pre; without
             * pre-norms the MLP's input) */
            const float *mlp_in = par ? a.resid_in : a.resid_mid;
            if (mp_hooks_active(f->hs, MP_HOOK_MLP_IN, l)) {
                TRY(o->copy(e, b->buf, mlp_in, n_x));
                FIRE(MP_HOOK_MLP_IN, l, b->buf);
                mlp_in = b->buf;
            }
            const float *mlp_x = a.ln2; /* what the MLP's projections read */
            if (c->no_pre_norms) { /* OLMo 2: its input itself (a store keeps it in ln2 for the backward) */
                if (A) TRY(o->copy(e, a.ln2, mlp_in, n_x));
                else mlp_x = mlp_in;
            } else {
                TRY(o->norm(e, MP_HOOK_LN2_SCALE, l, a.ln2, a.ln2_mean, a.ln2_rstd, mlp_in));
                FIRE(MP_HOOK_LN2, l, a.ln2);
            }
            /* resid_pre is read: a parallel block's residual continues from resid_mid */
            if (par && a.resid_out != a.resid_mid) TRY(o->copy(e, a.resid_out, a.resid_mid, n_x));
            /* gate and up from one input: up does not read pre, so computing it before hook_mlp_pre fires
             * changes nothing */
            if (swiglu)
                TRY(o->linears(e, 2, (const mp_exec_weight[]){MP_EXEC_W1, MP_EXEC_W3}, l,
                               (float *const[]){a.pre, a.up}, mlp_x, N));
            else
                TRY(o->linear(e, MP_EXEC_W1, l, a.pre, mlp_x, N));
            FIRE(MP_HOOK_MLP_PRE, l, a.pre);
            if (swiglu) FIRE(MP_HOOK_MLP_PRE_LINEAR, l, a.up);
            TRY(o->act(e, a.post, a.pre, a.up));
            FIRE(MP_HOOK_MLP_POST, l, a.post);
            if (c->post_norms) { /* W_2's product into mlp_raw, its norm ln2_post into out */
                TRY(o->linear(e, MP_EXEC_W2, l, a.mlp_raw, a.post, N));
                TRY(o->norm(e, MP_HOOK_LN2_POST_SCALE, l, b->out, NULL, a.ln2p_rstd, a.mlp_raw));
                FIRE(MP_HOOK_LN2_POST, l, b->out);
            } else {
                TRY(o->linear(e, MP_EXEC_W2, l, b->out, a.post, N));
            }
            FIRE(MP_HOOK_MLP_OUT, l, b->out);
            TRY(o->add(e, a.resid_out, b->out, n_x));
        }
        FIRE(MP_HOOK_RESID_POST, l, a.resid_out);
        x = a.resid_out;
    }
    /* the final norm and the head */
    float *xn = A ? A->lnf : b->scratch.ln1;
    TRY(o->norm(e, MP_HOOK_LNF_SCALE, -1, xn, A ? A->lnf_mean : NULL, A ? A->lnf_rstd : NULL, x));
    FIRE(MP_HOOK_LN_FINAL, -1, xn);
    if (b->logits_mode != MP_LOGITS_NONE) {
        TRY(o->head(e, xn, b->logits_mode, b->logits)); /* with Gemma 2's final soft cap */
        if (A && c->final_softcap > 0.0f) { /* training (host logits): d capped / d raw, for the backward */
            if (!A->logit_dcap)
                return mp_error(MP_ERR_ARG, "forward: the activation store has no room for the final soft cap's "
                                "gradient (final_softcap)");
            const size_t n = (size_t)A->logit_rows * c->vocab;
            for (size_t i = 0; i < n; i++) {
                const float t = b->logits[i] / c->final_softcap;
                A->logit_dcap[i] = 1.0f - t * t;
            }
        }
    }
#undef FIRE
#undef TRY
    return MP_OK;
}
