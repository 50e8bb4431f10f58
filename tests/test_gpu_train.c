/* test_gpu_train.c — training steps on the CUDA device against the same steps
 * on the CPU (mp_train_step both times): random grouped-query models with
 * RMSNorm and SwiGLU (rope), LayerNorm, GELU, biases, learned positions and an
 * untied classifier (gpt2-like), rope_id (trained past ctx, where its logit
 * factor exceeds 1), half_rope, GPT-NeoX's parallel block (parallel_attn),
 * attention-only without positions, the q/k norm per head (Qwen3) and over the
 * whole projection (OLMo 2); 5 AdamW steps with warmup, weight decay
 * and clipping that bites, some targets ignored, one model with gradient
 * accumulation (accum 2), three with the device's classifier + loss in chunks
 * (7 rows: the last chunk partial; 19; 1), one with a forward hook that edits an activation
 * (the stored activation is the edited one on both), two with a hook that
 * edits the attention pattern (the device then stores the pattern and uses
 * the materialised attention backward in 64-row sub-blocks: T = 19, and T = 70
 * whose second sub-block starts at row 64; the others recompute it from each
 * row's log-sum-exp, in blocks of all T query rows or of 5, 7, 6 or 1 rows). After every step the
 * losses (relative 1e-5) and gradient norms (1e-4); after the last the
 * parameters (AdamW eps 1e-6: see compare; each tensor but the key bias,
 * whose exact gradient is 0: see compare_params: max error <= 1e-4 of each tensor's largest |value|, float32
 * sums in another order) and both AdamW moments (1e-3: see TOL_MOM), and the
 * optimiser's step.
 * The device keeps the updated state until mp_model_sync (the host weights
 * are unchanged after unhooked steps). A checkpoint saved from the device and
 * resumed on the device gives exactly the saver's next step, resumed on the
 * CPU the same within the tolerances. After moving the trained model back
 * (the move syncs), a step on the CPU continues from the same state as a
 * CPU-only run. bf16 mixed precision: 200 steps (40 emulated) stay within a
 * stated band of the fp32 CPU's curve (bf16_band). A CPU-only hook point is
 * refused by name.
 *
 * Built twice: test_gpu_train on the device (label gpu; SKIP, exit 77,
 * without one) and test_gpu_train_emu on the tests' CPU emulation
 * (tests/cuda_emu, label unit). */
#include "checkpoint.h"
#include "mp_cuda.h"
#include "testutil.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4
/* The moments hold (squared) gradients, sums over B x T rows that cancel: the
 * two summation orders differ there by about 1e-4 of a tensor's scale (1.03e-4
 * of the whole vector's, measured in a Debug build), so 1e-3. */
#define TOL_MOM 1e-3

static int near_scaled(const char *what, const float *ref, const float *got, size_t n, double tol) {
    double scale = 0.0, err = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)ref[i] - got[i]);
        if (!(e <= err)) err = e;
    }
    const int ok = err <= tol * (scale > 0 ? scale : 1.0);
    CHECK(ok, "%s: max error %.3g, scale %.3g", what, err, scale);
    return ok;
}

static int halve(void *user, const mp_hook_info *info, float *data) {
    (void)user;
    for (size_t i = 0; i < info->numel; i++) data[i] *= 0.5f;
    return 0;
}

/* Tensor by tensor, so that a failure names the parameter. The key bias is
 * left out: softmax ignores a shift of a query's scores, so its exact gradient
 * is 0 and what either device computes for it is rounding noise, which AdamW
 * (m / sqrt(v)) turns into steps of size lr in directions the two summation
 * orders choose differently (the CPU alone is no more right). */
static void compare_params(const char *label, const mp_model *mc, const float *ref, const float *got, double tol) {
    mp_param_desc pd[MP_PARAM_MAX];
    const int np = mp_params_describe(&mc->cfg, &mc->p, pd);
    char lab[160];
    for (int i = 0; i < np; i++) {
        if (strstr(pd[i].name, "attn.bk")) continue;
        const size_t off = (size_t)(pd[i].p - mc->owned);
        snprintf(lab, sizeof lab, "%s: %s", label, pd[i].name);
        near_scaled(lab, ref + off, got + off, pd[i].n, tol);
    }
}

/* a fresh optimiser with hyper-parameters hp and an empty workspace; and their release */
static void fresh(mp_adamw *o, mp_train_ws *w, const mp_adamw_params *hp) {
    memset(o, 0, sizeof *o);
    o->hp = *hp;
    memset(w, 0, sizeof *w);
}
static void release(mp_adamw *o, mp_train_ws *w) {
    mp_train_ws_free(w);
    mp_adamw_free(o);
}

typedef struct {
    const char *label;
    mp_pos_kind pos;
    mp_norm_kind norm;
    mp_mlp_kind mlp;
    int bias, accum, hook;
    int ce_rows;  /* rows per chunk of the classifier + loss on the device (0: automatic, here all rows) */
    int att_rows; /* query rows per block of the device's attention (0: automatic, here all T) */
    int T;        /* sequence length (0: 19); past 64 the stored-pattern backward runs its later 64-row sub-blocks */
    mp_qk_norm_kind qk; /* the q/k norm (none, head: Qwen3, full: OLMo 2) */
} variant;
static int parallel; /* the next variant has GPT-NeoX's parallel block (parallel_attn) */

static void compare(const variant *v, int seed) {
    mp_config c = mp_config_default();
    const int T = v->T ? v->T : 19, B = T > 19 ? 2 : 4, n_steps = 5;
    c.d_model = 32, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_head = 8, c.vocab = 29, c.ctx = T > 24 ? T : 24;
    c.d_mlp = v->mlp == MP_MLP_NONE ? 0 : 48;
    c.pos = v->pos, c.norm = v->norm, c.mlp = v->mlp;
    c.qkv_bias = c.linear_bias = v->bias;
    c.tied = !v->bias;
    c.qk_norm = v->qk;
    c.parallel_attn = parallel;
    if (v->pos == MP_POS_ROPE_ID) c.ctx = 12; /* its logit factor exceeds 1 from position ctx on: T = 19 reaches it */
    mp_model *mc = NULL, *mg = NULL;
    if (mp_model_new_random(&mc, &c, seed, 0.3f) || mp_model_new_random(&mg, &c, seed, 0.3f)) {
        CHECK(0, "%s: %s", v->label, mp_last_error());
        mp_model_free(mc);
        mp_model_free(mg);
        return;
    }
    CHECK(mp_model_to_device(mg, MP_DEVICE_CUDA, MP_PRECISION_FP32) == MP_OK &&
              mp_cuda_loss_chunk(mg, v->ce_rows) == MP_OK && mp_cuda_attn_rows(mg, v->att_rows) == MP_OK,
          "%s: to cuda: %s", v->label, mp_last_error());
    int *tok = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
    if (!tok || !tgt) {
        CHECK(0, "%s: out of memory", v->label);
        free(tok), free(tgt);
        mp_model_free(mc), mp_model_free(mg);
        return;
    }
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 2e-2f, hp.weight_decay = 0.1f, hp.warmup = 2, hp.total_steps = 6, hp.grad_clip = 0.5f;
    /* eps 1e-6, not torch's 1e-8: a gradient of rounding-noise size (5e-9 on
     * one mlp.w3 weight at the first step of the T = 70 stored-pattern variant,
     * CPU 5.01e-9 against 5.45e-9 here) meets sqrt(v) + eps of about 1e-8, so
     * AdamW turns the two summation orders' noise into steps differing by 1.9e-4
     * of the weights' scale; with 1e-6 such a gradient moves nothing, and a real
     * fault still moves the gradients themselves far past the tolerances */
    hp.eps = 1e-6f;
    mp_adamw oc, og;
    mp_train_ws wc, wg;
    fresh(&oc, &wc, &hp);
    fresh(&og, &wg, &hp);
    mp_hooks *hs = NULL;
    if (v->hook) {
        hs = mp_hooks_new(&c);
        const char *point = v->hook == 2 ? "blocks.1.attn.hook_pattern" : "blocks.0.hook_resid_mid";
        CHECK(mp_hooks_add(hs, point, halve, NULL) == MP_OK, "%s: hook", v->label);
    }
    const size_t np = mp_config_n_params(&c);
    float *init = malloc(np * sizeof(float));
    if (init) memcpy(init, mg->owned, np * sizeof(float));
    int clipped = 0;
    for (int step = 0; step < n_steps; step++) {
        for (int i = 0; i < B * T; i++) {
            tok[i] = (i * 7 + step * 3 + i / T) % c.vocab;
            tgt[i] = i % 11 == 5 ? -1 : (tok[i] * 5 + 1) % c.vocab;
        }
        float lc = 0, lg = 0;
        mp_status sc = mp_train_step(mc, &oc, &wc, tok, tgt, B, T, v->accum, hs, &lc);
        mp_status sg = mp_train_step(mg, &og, &wg, tok, tgt, B, T, v->accum, hs, &lg);
        CHECK(sc == MP_OK && sg == MP_OK, "%s step %d: %s", v->label, step, mp_last_error());
        CHECK(fabs(lc - lg) <= 1e-5 * fabs(lc), "%s step %d: loss cpu %.8g, cuda %.8g", v->label, step, lc, lg);
        CHECK(fabs(wc.grad_norm - wg.grad_norm) <= 1e-4 * wc.grad_norm, "%s step %d: gradient norm cpu %.8g, cuda %.8g",
              v->label, step, wc.grad_norm, wg.grad_norm);
        CHECK(wc.lr == wg.lr, "%s step %d: lr", v->label, step);
        clipped += wc.grad_norm > hp.grad_clip;
    }
    CHECK(clipped > 0, "%s: clipping bit at some step", v->label);
    CHECK(oc.step == n_steps && og.step == n_steps, "%s: optimiser steps %ld / %ld", v->label, oc.step, og.step);
    /* the updated state stays on the device until synced; a hooked step syncs itself */
    if (init && !v->hook)
        CHECK(memcmp(init, mg->owned, np * sizeof(float)) == 0, "%s: the host weights stay as they were until "
              "mp_model_sync (no copy per step)", v->label);
    CHECK(mp_model_sync(mg) == MP_OK, "%s: sync: %s", v->label, mp_last_error());
    char lab[128];
    snprintf(lab, sizeof lab, "%s, after %d steps", v->label, n_steps);
    compare_params(lab, mc, mc->owned, mg->owned, TOL);
    snprintf(lab, sizeof lab, "%s: first moments", v->label);
    compare_params(lab, mc, oc.m, og.m, TOL_MOM);
    snprintf(lab, sizeof lab, "%s: second moments", v->label);
    compare_params(lab, mc, oc.v, og.v, TOL_MOM);
    float lc = 0, lg = 0;
    /* a checkpoint saved on the device (no sync first: the save brings the
     * state back), resumed on the CPU and on the device: the next step of
     * either equals that of the model that saved it */
    CHECK(mp_train_step(mc, &oc, &wc, tok, tgt, B, T, 1, hs, &lc) == MP_OK &&
              mp_train_step(mg, &og, &wg, tok, tgt, B, T, 1, hs, &lg) == MP_OK,
          "%s: step before the save: %s", v->label, mp_last_error());
    char path[128];
    snprintf(path, sizeof path, "test_gpu_train_%d.h5", seed);
    mp_model *rc = NULL, *rg = NULL;
    mp_adamw orc, org;
    mp_train_ws wrc, wrg;
    fresh(&orc, &wrc, &hp);
    fresh(&org, &wrg, &hp);
    CHECK(mp_checkpoint_save(path, mg, &og, NULL) == MP_OK && mp_checkpoint_load(path, &rc, &orc, NULL) == MP_OK &&
              mp_checkpoint_load(path, &rg, &org, NULL) == MP_OK &&
              mp_model_to_device(rg, MP_DEVICE_CUDA, MP_PRECISION_FP32) == MP_OK &&
              mp_cuda_loss_chunk(rg, v->ce_rows) == MP_OK && mp_cuda_attn_rows(rg, v->att_rows) == MP_OK,
          "%s: save on the device, load twice: %s", v->label, mp_last_error());
    remove(path);
    if (rc && rg) {
        float l1 = 0, l2 = 0, l3 = 0;
        CHECK(mp_train_step(mg, &og, &wg, tok, tgt, B, T, 1, hs, &l1) == MP_OK &&
                  mp_train_step(rc, &orc, &wrc, tok, tgt, B, T, 1, hs, &l2) == MP_OK &&
                  mp_train_step(rg, &org, &wrg, tok, tgt, B, T, 1, hs, &l3) == MP_OK &&
                  mp_model_sync(mg) == MP_OK && mp_model_sync(rg) == MP_OK,
              "%s: the step after the resume: %s", v->label, mp_last_error());
        CHECK(l1 == l3 && tu_max_abs_diff(mg->owned, rg->owned, np) == 0.0 && org.step == og.step &&
                  tu_max_abs_diff(og.m, org.m, np) == 0.0 && tu_max_abs_diff(og.v, org.v, np) == 0.0,
              "%s: resumed on the device: the same step exactly (loss %.9g vs %.9g, weights %.3g)", v->label, l1, l3,
              tu_max_abs_diff(mg->owned, rg->owned, np));
        CHECK(fabs(l1 - l2) <= 1e-4 * fabs(l1) && orc.step == og.step, "%s: resumed on the CPU: loss %.8g vs %.8g",
              v->label, l1, l2);
        snprintf(lab, sizeof lab, "%s, resumed on the CPU", v->label);
        compare_params(lab, mc, mg->owned, rc->owned, TOL);
        /* the CPU model the comparison follows takes the same extra step */
        CHECK(mp_train_step(mc, &oc, &wc, tok, tgt, B, T, 1, hs, &lc) == MP_OK, "%s: cpu step", v->label);
    }
    release(&orc, &wrc);
    release(&org, &wrg);
    mp_model_free(rc);
    mp_model_free(rg);
    /* back on the CPU, one more step continues from the same state */
    CHECK(mp_train_step(mg, &og, &wg, tok, tgt, B, T, 1, hs, &lg) == MP_OK, "%s: step before the move", v->label);
    CHECK(mp_model_to_device(mg, MP_DEVICE_CPU, MP_PRECISION_FP32) == MP_OK, "%s: to cpu", v->label);
    CHECK(mp_train_step(mc, &oc, &wc, tok, tgt, B, T, 1, hs, &lc) == MP_OK, "%s: cpu step", v->label);
    CHECK(mp_train_step(mc, &oc, &wc, tok, tgt, B, T, 1, hs, &lc) == MP_OK &&
              mp_train_step(mg, &og, &wg, tok, tgt, B, T, 1, hs, &lg) == MP_OK,
          "%s: CPU step after the device: %s", v->label, mp_last_error());
    /* nine steps in (the 5 of the comparison, the save's, the resume's and the
     * move's): the parameters still agree within TOL of scale, and the loss
     * follows them (rope_id: 1.5e-5 relative measured), so 1e-4 here */
    CHECK(fabs(lc - lg) <= 1e-4 * fabs(lc), "%s: CPU step after the device: loss %.8g vs %.8g", v->label, lc, lg);
    snprintf(lab, sizeof lab, "%s, after a CPU step following the device's", v->label);
    compare_params(lab, mc, mc->owned, mg->owned, TOL);
    mp_hooks_free(hs);
    free(init);
    free(tok), free(tgt);
    release(&oc, &wc);
    release(&og, &wg);
    mp_model_free(mc);
    mp_model_free(mg);
}

/* bf16 mixed precision: BF16_STEPS steps of a model in bf16 on the device
 * beside the same model in fp32 on the CPU, same data. The band: at every step
 * |loss_bf16 - loss_fp32| <= BF16_BAND times the first step's fp32 loss (a
 * fixed scale: relative to a loss near 0 the difference is ill-conditioned),
 * and both curves fall (the last loss below half the first). bf16 operands
 * carry 8 mantissa bits (relative error about 2^-9 a product); the test prints
 * the worst difference it saw. 200 steps on a device; the emulated build
 * (test_gpu_train_emu) runs 40 to keep the suite's time. */
#ifndef BF16_STEPS
#define BF16_STEPS 200
#endif
#define BF16_BAND 0.02
static void bf16_band(void) {
    mp_config c = mp_config_default();
    c.d_model = 32, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_head = 8, c.d_mlp = 48, c.vocab = 23, c.ctx = 16;
    mp_model *mc = NULL, *mg = NULL;
    if (mp_model_new_random(&mc, &c, 41, 0.2f) || mp_model_new_random(&mg, &c, 41, 0.2f)) {
        CHECK(0, "bf16: %s", mp_last_error());
        mp_model_free(mc);
        mp_model_free(mg);
        return;
    }
    CHECK(mp_model_to_device(mg, MP_DEVICE_CUDA, MP_PRECISION_BF16) == MP_OK, "bf16: to cuda: %s", mp_last_error());
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 1e-2f, hp.warmup = 5, hp.total_steps = BF16_STEPS, hp.grad_clip = 1.0f;
    mp_adamw oc, og;
    mp_train_ws wc, wg;
    fresh(&oc, &wc, &hp);
    fresh(&og, &wg, &hp);
    enum { B = 4, T = 16 };
    int tok[B * T], tgt[B * T];
    double worst = 0.0;
    float first_c = 0, first_g = 0, lc = 0, lg = 0;
    for (int step = 0; step < BF16_STEPS; step++) {
        for (int i = 0; i < B * T; i++) { /* a periodic sequence with a per-row offset: learnable */
            tok[i] = (i % T + 3 * (i / T) + step % 5) % c.vocab;
            tgt[i] = (tok[i] + 1) % c.vocab;
        }
        if (mp_train_step(mc, &oc, &wc, tok, tgt, B, T, 1, NULL, &lc) ||
            mp_train_step(mg, &og, &wg, tok, tgt, B, T, 1, NULL, &lg)) {
            CHECK(0, "bf16 step %d: %s", step, mp_last_error());
            break;
        }
        if (!step) first_c = lc, first_g = lg;
        const double rel = fabs((double)lg - lc) / first_c;
        if (rel > worst) worst = rel;
    }
    CHECK(worst <= BF16_BAND, "bf16: loss within %.0f%% of the first loss of fp32's at every step (worst %.3g)",
          100 * BF16_BAND, worst);
    CHECK(lc < 0.5f * first_c && lg < 0.5f * first_g, "bf16: both curves fall: fp32 %.4g -> %.4g, bf16 %.4g -> %.4g",
          first_c, lc, first_g, lg);
    CHECK(mg->precision == MP_PRECISION_BF16, "bf16: still bf16 after training");
    printf("bf16 band: %d steps, worst |loss difference| / first loss %.3g (band %.2g), final loss fp32 %.4f, bf16 %.4f\n",
           BF16_STEPS, worst, BF16_BAND, lc, lg);
    release(&oc, &wc);
    release(&og, &wg);
    mp_model_free(mc);
    mp_model_free(mg);
}

static void refusals(void) {
    mp_config c = mp_config_default();
    c.d_model = 16, c.n_layer = 1, c.n_head = 2, c.vocab = 11, c.ctx = 8;
    mp_model *m = NULL;
    if (mp_model_new_random(&m, &c, 3, 0.2f)) return;
    int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tgt[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    mp_adamw o;
    memset(&o, 0, sizeof o);
    o.hp = mp_adamw_params_default();
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    float loss;
    CHECK(mp_model_to_device(m, MP_DEVICE_CUDA, MP_PRECISION_FP32) == MP_OK, "fp32: %s", mp_last_error());
    mp_hooks *hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "blocks.0.attn.hook_result", halve, NULL) == MP_OK, "hook_result");
    CHECK(mp_train_step(m, &o, &ws, tok, tgt, 1, 8, 1, hs, &loss) != MP_OK &&
              strstr(mp_last_error(), "hook_result") != NULL,
          "a CPU-only hook point is refused by name: %s", mp_last_error());
    mp_hooks_free(hs);
    mp_train_ws_free(&ws);
    mp_adamw_free(&o);
    mp_model_free(m);
}

int main(void) {
    if (mp_cuda_available() != MP_OK) {
        printf("SKIP: %s\n", mp_last_error());
        return 77;
    }
    const variant vs[] = {
        {"rope swiglu rms", MP_POS_ROPE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1, 0, 0, 0, 0, MP_QK_NORM_NONE},
        {"learned gelu layer bias untied, loss in chunks of 7 rows, attention in blocks of 5", MP_POS_LEARNED,
         MP_NORM_LAYER, MP_MLP_GELU, 1, 1, 0, 7, 5, 0, MP_QK_NORM_NONE},
        {"rope_id, attention in blocks of 7", MP_POS_ROPE_ID, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1, 0, 0, 7, 0,
         MP_QK_NORM_NONE},
        {"half_rope accum 2, loss in chunks of 19 rows", MP_POS_HALF_ROPE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 2, 0, 19,
         0, 0, MP_QK_NORM_NONE},
        {"none attention-only, loss in chunks of 1 row, attention rows 1 by 1", MP_POS_NONE, MP_NORM_RMS, MP_MLP_NONE,
         0, 1, 0, 1, 1, 0, MP_QK_NORM_NONE},
        {"rope with a hook that edits resid_mid", MP_POS_ROPE, MP_NORM_LAYER, MP_MLP_GELU, 0, 1, 1, 0, 6, 0,
         MP_QK_NORM_NONE},
        {"half_rope with a hook that edits the pattern (stored)", MP_POS_HALF_ROPE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1, 2,
         0, 0, 0, MP_QK_NORM_NONE},
        {"rope with a hook that edits the pattern (stored), T = 70: the backward's second 64-row sub-block",
         MP_POS_ROPE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1, 2, 0, 0, 70, MP_QK_NORM_NONE},
        {"rope qk_norm head (Qwen3)", MP_POS_ROPE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1, 0, 0, 0, 0,
         MP_QK_NORM_HEAD},
        {"rope qk_norm full (OLMo 2), attention in blocks of 6", MP_POS_ROPE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1, 0, 0,
         6, 0, MP_QK_NORM_FULL},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) compare(&vs[i], 21 + (int)i);
    const variant par = {"half_rope gelu layer bias, parallel attention and MLP (GPT-NeoX)", MP_POS_HALF_ROPE,
                         MP_NORM_LAYER, MP_MLP_GELU, 1, 1, 0, 0, 0, 0, MP_QK_NORM_NONE};
    parallel = 1;
    compare(&par, 40);
    parallel = 0;
    bf16_band();
    refusals();
    return tu_finish("test_gpu_train");
}
