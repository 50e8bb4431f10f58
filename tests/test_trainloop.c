/* test_trainloop.c — the C training loop (mpi/trainloop.h) without Lua: one
 * defaults function (the optimizer part equal to mp_adamw_params_default with
 * the cosine over the run), a run of mp_train_run equal bit for bit to the
 * same schedule of manual mp_train_step calls (losses, learning rates, eval
 * losses by mp_model_loss, final weights and moments), the loss going down on
 * a learnable task, on_step stopping the run, a failing data source ending
 * it with its status, a checkpoint that reloads to the same weights, and
 * bad parameters refused by name. */
#include "checkpoint.h"
#include "testutil.h"
#include "trainloop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { V = 16, B = 4, T = 12, STEPS = 14 };

/* Deterministic batches of a learnable task: x[t+1] = x[t] + 3 mod V from a
 * random start per row; train and eval draw from separate LCG streams. */
typedef struct {
    uint64_t train, eval;
    int tok[B * T], tgt[B * T];
    int calls, fail_at, stop_at, n_steps;
    float losses[64];
    int steps[64];
} source;

static uint32_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

static void fill(uint64_t *s, int *tok, int *tgt) {
    for (int b = 0; b < B; b++) {
        int x = (int)(lcg(s) % V);
        for (int t = 0; t < T; t++) {
            tok[b * T + t] = x;
            x = (x + 3) % V;
            tgt[b * T + t] = t == 0 && b == 1 ? -1 : x; /* one ignored target */
        }
    }
}

static mp_status src_sample(void *user, int eval, int Bq, int Tq, const int **tok, const int **tgt, int *b, int *t) {
    source *s = user;
    if (Bq != B || Tq != T) return mp_error(MP_ERR_ARG, "asked for [%d,%d]", Bq, Tq);
    if (++s->calls == s->fail_at) return mp_error(MP_ERR_IO, "the source gives up at call %d", s->calls);
    fill(eval ? &s->eval : &s->train, s->tok, s->tgt);
    *tok = s->tok, *tgt = s->tgt, *b = B, *t = T;
    return MP_OK;
}

static mp_status src_on_step(void *user, int step, float loss, int *stop) {
    source *s = user;
    if (s->n_steps < 64) s->steps[s->n_steps] = step, s->losses[s->n_steps] = loss;
    s->n_steps++;
    *stop = s->stop_at && s->n_steps == s->stop_at;
    return MP_OK;
}

static mp_config tiny(void) {
    mp_config c = mp_config_default();
    c.d_model = 16, c.n_layer = 2, c.ctx = T, c.n_head = 4, c.n_kv_head = 2, c.d_head = 4, c.d_mlp = 32, c.vocab = V;
    return c;
}

static void test_defaults(void) {
    mp_train_params p = mp_train_params_default(100);
    mp_adamw_params a = mp_adamw_params_default();
    CHECK(a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.95f && a.eps == 1e-8f && a.weight_decay == 0.1f &&
              a.grad_clip == 1.0f && a.min_lr < 0 && a.warmup == 0 && a.total_steps == 0,
          "mp_adamw_params_default: the training loop's values (wd %g, beta2 %g, clip %g)", a.weight_decay, a.beta2,
          a.grad_clip);
    a.total_steps = 100;
    CHECK(memcmp(&a, &p.opt, sizeof a) == 0, "the loop's optimizer defaults are mp_adamw_params_default over the run");
    CHECK(p.steps == 100 && p.batch == 8 && p.seq_len == 0 && p.accum == 1 && p.eval_every == 0 &&
              p.eval_batches == 4 && !p.checkpoint && p.checkpoint_every == 0 && p.data_parallel == 1 &&
              p.progress == 1 && p.log_every == 5 && !p.hooks,
          "run defaults");
    CHECK(mp_train_params_default(7).log_every == 1, "log_every of a short run");
    CHECK(mp_train_params_check(&p) == MP_OK, "defaults pass the check");
    p.eval_batches = 0;
    CHECK(mp_train_params_check(&p) == MP_ERR_ARG && strstr(mp_last_error(), "eval_batches"), "eval_batches 0: %s",
          mp_last_error());
    p = mp_train_params_default(0);
    CHECK(mp_train_params_check(&p) == MP_ERR_ARG && strstr(mp_last_error(), "steps"), "steps 0: %s", mp_last_error());
    p = mp_train_params_default(5);
    p.opt.beta2 = 1.5f;
    CHECK(mp_train_params_check(&p) == MP_ERR_ARG && strstr(mp_last_error(), "beta2"), "beta2: %s", mp_last_error());
}

/* The run through mp_train_run against the same schedule by hand. */
static void test_equals_manual(int accum) {
    mp_config c = tiny();
    mp_model *ma = NULL, *mb = NULL;
    CHECK(mp_model_new_random(&ma, &c, 11, 0.1f) == MP_OK && mp_model_new_random(&mb, &c, 11, 0.1f) == MP_OK,
          "models: %s", mp_last_error());
    if (!ma || !mb) return;
    mp_train_params p = mp_train_params_default(STEPS);
    p.batch = B, p.seq_len = T, p.accum = accum, p.eval_every = 5, p.eval_batches = 2, p.progress = 0;
    p.opt.lr = 1e-2f, p.opt.warmup = 3;
    source s = {.train = 1, .eval = 2};
    mp_adamw oa = {0}, ob = {0};
    mp_train_ws wa = {0}, wb = {0};
    mp_train_log log = {0};
    CHECK(mp_train_optim_init(&oa, &p) == MP_OK, "optimizer: %s", mp_last_error());
    mp_train_data d = {&s, src_sample, src_on_step};
    mp_train_result r;
    mp_status st = mp_train_run(ma, &oa, &wa, &log, &p, &d, &r);
    CHECK(st == MP_OK, "accum %d: mp_train_run: %s", accum, mp_last_error());
    CHECK(r.first == 0 && r.n == STEPS && log.n == STEPS && r.first_eval == 0 && r.n_eval == 3 && oa.step == STEPS,
          "accum %d: %zu steps logged, %zu evaluations (steps 5, 10, 14), optimizer step %ld", accum, r.n, r.n_eval,
          oa.step);
    /* by hand: the same batches, the same schedule */
    uint64_t tr = 1, ev = 2;
    int tok[B * T], tgt[B * T];
    float manual[STEPS], eval_manual[3];
    int n_eval = 0, same_lr = 1, same_step = 1;
    ob.hp = p.opt;
    for (int i = 1; i <= STEPS; i++) {
        fill(&tr, tok, tgt);
        if (mp_train_step(mb, &ob, &wb, tok, tgt, B, T, accum, NULL, &manual[i - 1])) break;
        same_lr &= log.lr[i - 1] == (float)mp_lr_at(&p.opt, i - 1) && log.lr[i - 1] == (float)wb.lr;
        same_step &= log.step[i - 1] == i && s.steps[i - 1] == i;
        if (i % 5 == 0 || i == STEPS) {
            double sum = 0;
            for (int e = 0; e < 2; e++) {
                float el = 0;
                fill(&ev, tok, tgt);
                mp_model_loss(mb, tok, tgt, B, T, NULL, &el);
                sum += el;
            }
            eval_manual[n_eval++] = (float)(sum / 2);
        }
    }
    CHECK(memcmp(manual, log.loss, sizeof manual) == 0 && memcmp(manual, s.losses, sizeof manual) == 0,
          "accum %d: the loop's losses equal manual mp_train_step calls bit for bit (last %.9g vs %.9g)", accum,
          (double)log.loss[STEPS - 1], (double)manual[STEPS - 1]);
    CHECK(same_lr && same_step, "accum %d: logged steps and learning rates follow mp_lr_at", accum);
    CHECK(n_eval == 3 && memcmp(eval_manual, log.eval_loss, sizeof eval_manual) == 0 && log.eval_step[0] == 5 &&
              log.eval_step[1] == 10 && log.eval_step[2] == STEPS,
          "accum %d: eval losses equal mp_model_loss means (%.9g vs %.9g)", accum, (double)log.eval_loss[2],
          (double)eval_manual[2]);
    const size_t n = mp_config_n_params(&c);
    CHECK(ma->owned && mb->owned && memcmp(ma->owned, mb->owned, n * sizeof(float)) == 0 &&
              memcmp(oa.m, ob.m, n * sizeof(float)) == 0 && memcmp(oa.v, ob.v, n * sizeof(float)) == 0,
          "accum %d: final weights and moments equal byte for byte", accum);
    CHECK(r.final_loss == manual[STEPS - 1] && r.tokens_per_s > 0 && log.tokens[STEPS - 1] == (double)STEPS * B * T,
          "accum %d: result (final loss, tokens %g)", accum, log.tokens[STEPS - 1]);
    float mean0 = (manual[0] + manual[1]) / 2, mean1 = (manual[STEPS - 2] + manual[STEPS - 1]) / 2;
    CHECK(mean1 < 0.75f * mean0 && mean0 > 2.0f, "accum %d: the loss goes down (%.4f -> %.4f, log V = %.4f)", accum,
          (double)mean0, (double)mean1, (double)logf((float)V));
    /* a second run continues the optimizer and the curve */
    p.steps = 2, p.eval_every = 0;
    s.n_steps = 0;
    CHECK(mp_train_run(ma, &oa, &wa, &log, &p, &d, &r) == MP_OK && r.first == STEPS && r.n == 2 && oa.step == STEPS + 2 &&
              log.step[STEPS + 1] == STEPS + 2 && log.wall[STEPS + 1] >= log.wall[STEPS - 1],
          "accum %d: a second run continues (first %zu, step %ld)", accum, r.first, oa.step);
    mp_adamw_free(&oa), mp_adamw_free(&ob);
    mp_train_ws_free(&wa), mp_train_ws_free(&wb);
    mp_train_log_free(&log);
    mp_model_free(ma), mp_model_free(mb);
}

static void test_stop_fail_checkpoint(void) {
    mp_config c = tiny();
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 3, 0.1f) == MP_OK, "model");
    if (!m) return;
    mp_train_params p = mp_train_params_default(10);
    p.batch = B, p.seq_len = T, p.progress = 0;
    mp_adamw o = {0};
    mp_train_ws ws = {0};
    mp_train_log log = {0};
    mp_train_optim_init(&o, &p);
    source s = {.train = 5, .eval = 6, .stop_at = 3};
    mp_train_data d = {&s, src_sample, src_on_step};
    mp_train_result r;
    CHECK(mp_train_run(m, &o, &ws, &log, &p, &d, &r) == MP_OK && r.n == 3 && o.step == 3 && s.n_steps == 3,
          "on_step stops the run after its third step (%zu steps)", r.n);
    /* the source fails at its 2nd call: the first step stays, the status comes back */
    source f = {.train = 5, .eval = 6, .fail_at = 2};
    mp_train_data df = {&f, src_sample, NULL};
    mp_status st = mp_train_run(m, &o, &ws, &log, &p, &df, &r);
    CHECK(st == MP_ERR_IO && strstr(mp_last_error(), "gives up at call 2") && r.n == 1 && o.step == 4 && log.n == 4,
          "a failing source ends the run with its status: %s (%zu steps)", mp_last_error(), r.n);
    /* a checkpoint at the end reloads to the same weights, optimizer and curve */
    char path[] = "/tmp/mp_trainloop_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    char ck[64];
    snprintf(ck, sizeof ck, "%s.h5", path);
    p.steps = 2, p.checkpoint = ck;
    source s2 = {.train = 9, .eval = 10};
    d.user = &s2;
    CHECK(mp_train_run(m, &o, &ws, &log, &p, &d, &r) == MP_OK, "run with a checkpoint: %s", mp_last_error());
    mp_model *back = NULL;
    mp_adamw ob = {0};
    mp_train_log lb = {0};
    st = mp_checkpoint_load(ck, &back, &ob, &lb);
    CHECK(st == MP_OK, "checkpoint loads: %s", mp_last_error());
    if (!st) {
        const size_t n = mp_config_n_params(&c);
        CHECK(back->owned && memcmp(back->owned, m->owned, n * sizeof(float)) == 0 && ob.step == o.step &&
                  lb.n == log.n && memcmp(lb.loss, log.loss, log.n * sizeof(float)) == 0 && ob.hp.beta2 == 0.95f,
              "checkpoint: weights, optimizer step %ld, %zu curve entries", ob.step, lb.n);
        mp_model_free(back);
    }
    mp_adamw_free(&ob);
    mp_train_log_free(&lb);
    unlink(ck);
    unlink(path);
    /* bad parameters: refused before anything runs */
    p.batch = 0;
    long before = o.step;
    CHECK(mp_train_run(m, &o, &ws, &log, &p, &d, &r) == MP_ERR_ARG && strstr(mp_last_error(), "batch") && o.step == before,
          "batch 0 refused: %s", mp_last_error());
    mp_adamw_free(&o);
    mp_train_ws_free(&ws);
    mp_train_log_free(&log);
    mp_model_free(m);
}

int main(void) {
    test_defaults();
    test_equals_manual(1);
    test_equals_manual(2);
    test_stop_fail_checkpoint();
    return tu_finish("test_trainloop");
}
