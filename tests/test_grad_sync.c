/* test_grad_sync.c — the trainer's data-parallel protocol (mp_grad_sync,
 * runtime/train.h) without MPI, in every build: two "ranks" are simulated in
 * one process. Rank 1 runs its shard of the global batch on a copy of the
 * model and its sync keeps the gradient it would send; rank 0 runs its shard
 * and its sync adds rank 1's gradient and loss share (the sum MPI would
 * make). Three AdamW steps then equal three single-process steps on the whole
 * global batch: parameters within 1e-5 of their scale (eps = 1, an update
 * linear in the gradient), losses within 1e-6. Some targets are ignored on
 * rank 0 only, so each rank must weigh its gradient by its share of the global
 * count. Also checked: the buckets arrive in the order layer L-1 .. 0, then -1,
 * once per step, on the last micro-batch only (accum 2). */
#include "model.h"
#include "testutil.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, T = 8, ROWS = B / 2, STEPS = 3, ACCUM = 2 };

typedef struct {
    const int64_t *global;  /* the global counts per micro-batch */
    int order[64], n_order;
    float *other;           /* rank 1's gradient (rank 0 adds it), or where rank 1 keeps its own */
    double other_loss;
    int is_rank1;
} fake;

static mp_status f_counts(void *u, int64_t *counts, int n) {
    fake *f = u;
    for (int a = 0; a < n; a++) counts[a] = f->global[a];
    return MP_OK;
}

static mp_status f_ready(void *u, mp_grads *g, const mp_config *c, int layer) {
    (void)g;
    (void)c;
    fake *f = u;
    if (f->n_order < 64) f->order[f->n_order++] = layer;
    return MP_OK;
}

static mp_status f_finish(void *u, mp_grads *g, double *loss) {
    fake *f = u;
    if (f->is_rank1) {
        memcpy(f->other, g->mem, g->n * sizeof(float));
        f->other_loss = *loss;
    } else {
        for (size_t i = 0; i < g->n; i++) g->mem[i] += f->other[i];
        *loss += f->other_loss;
    }
    return MP_OK;
}

static double amax(const float *p, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(p[i]));
    return m;
}

int main(void) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.ctx = T; c.n_head = 4; c.n_kv_head = 2; c.d_head = 4; c.d_mlp = 32; c.vocab = 24;
    mp_model *ms = NULL, *m0 = NULL, *m1 = NULL;
    CHECK(mp_model_new_random(&ms, &c, 5, 0.1f) == MP_OK && mp_model_new_random(&m0, &c, 5, 0.1f) == MP_OK &&
          mp_model_new_random(&m1, &c, 5, 0.1f) == MP_OK, "models: %s", mp_last_error());
    if (!ms || !m0 || !m1) return tu_finish("test_grad_sync");
    const size_t n = mp_config_n_params(&c);
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 1.0f;
    hp.eps = 1.0f;
    hp.weight_decay = 0.1f;
    mp_adamw os = {0}, o0 = {0}, o1 = {0};
    os.hp = o0.hp = o1.hp = hp;
    mp_train_ws ws = {0}, w0 = {0}, w1 = {0};
    float *other = calloc(n, sizeof(float));
    int tok[B * T], tgt[B * T];
    double worst = 0;
    int order_ok = 1;
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < B * T; i++) {
            int b = i / T, t = i % T;
            tok[i] = (s * 11 + i * 7 + 3) % c.vocab;
            tgt[i] = (b < ROWS && t >= 5) || (i + s) % 7 == 0 ? -1 : (s * 5 + i * 3 + 1) % c.vocab;
        }
        /* the global count of each micro-batch a: rows [a*mb, (a+1)*mb) of both shards */
        int64_t global[ACCUM] = {0};
        const int mb = ROWS / ACCUM;
        for (int r = 0; r < 2; r++)
            for (int a = 0; a < ACCUM; a++)
                for (int k = 0; k < mb * T; k++) global[a] += tgt[(r * ROWS + a * mb) * T + k] >= 0;
        /* the single process, on the global batch: micro-batch a = the union of the ranks' a-th ones */
        int perm_tok[B * T], perm_tgt[B * T];
        for (int a = 0, row = 0; a < ACCUM; a++)
            for (int r = 0; r < 2; r++)
                for (int k = 0; k < mb; k++, row++) {
                    memcpy(perm_tok + row * T, tok + (r * ROWS + a * mb + k) * T, T * sizeof(int));
                    memcpy(perm_tgt + row * T, tgt + (r * ROWS + a * mb + k) * T, T * sizeof(int));
                }
        float ls, l0, l1;
        CHECK(mp_train_step(ms, &os, &ws, perm_tok, perm_tgt, B, T, ACCUM, NULL, &ls) == MP_OK, "serial: %s",
              mp_last_error());
        /* rank 1 on a copy of rank 0's model (its own update is discarded) */
        memcpy(m1->owned, m0->owned, n * sizeof(float));
        mp_adamw_free(&o1);
        o1 = (mp_adamw){0};
        o1.hp = hp;
        if (o0.n) {
            mp_adamw_init(&o1, &hp, n);
            memcpy(o1.m, o0.m, n * sizeof(float));
            memcpy(o1.v, o0.v, n * sizeof(float));
            o1.step = o0.step;
        }
        fake f1 = {global, {0}, 0, other, 0, 1}, f0 = {global, {0}, 0, other, 0, 0};
        mp_grad_sync s1 = {&f1, f_counts, f_ready, f_finish}, s0 = {&f0, f_counts, f_ready, f_finish};
        w1.sync = &s1;
        w0.sync = &s0;
        CHECK(mp_train_step(m1, &o1, &w1, tok + ROWS * T, tgt + ROWS * T, ROWS, T, ACCUM, NULL, &l1) == MP_OK,
              "rank 1: %s", mp_last_error());
        f0.other_loss = f1.other_loss; /* what rank 1 would send */
        CHECK(mp_train_step(m0, &o0, &w0, tok, tgt, ROWS, T, ACCUM, NULL, &l0) == MP_OK, "rank 0: %s",
              mp_last_error());
        CHECK_NEAR(l0, ls, 1e-6 * fabs(ls), "step %d: the global loss", s + 1);
        CHECK(f0.n_order == c.n_layer + 1 && f1.n_order == c.n_layer + 1, "step %d: one bucket per block and one more",
              s + 1);
        for (int k = 0; k < f0.n_order; k++) order_ok &= f0.order[k] == c.n_layer - 1 - k && f1.order[k] == f0.order[k];
        worst = fmax(worst, tu_max_abs_diff(m0->owned, ms->owned, n) / amax(ms->owned, n));
    }
    CHECK(order_ok, "buckets in the order L-1 .. 0, then -1");
    CHECK(worst <= 1e-5, "parameters after %d steps: max |diff| / max |p| = %.3g (tol 1e-5)", STEPS, worst);
    printf("  2 simulated ranks x %d rows (accum %d) vs 1 process x %d rows: max |diff| / max |p| = %.3g\n", ROWS,
           ACCUM, B, worst);
    free(other);
    mp_train_ws_free(&ws);
    mp_train_ws_free(&w0);
    mp_train_ws_free(&w1);
    mp_adamw_free(&os);
    mp_adamw_free(&o0);
    mp_adamw_free(&o1);
    mp_model_free(ms);
    mp_model_free(m0);
    mp_model_free(m1);
    return tu_finish("test_grad_sync");
}
