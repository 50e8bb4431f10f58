/* test_device.c — the host side of device selection, on any machine (unit):
 * names and parsers (errors name the option), the no-device / no-build
 * message, the backend's host checks (variants, d_head, precision), which
 * calls stay on the CPU (mp_cuda_cpu_reason), a refused move leaving the model
 * unchanged, and runtime/'s dispatch seam (m->dev_ops) exercised with a
 * stand-in backend whose forward is recognisable, so mp_model_forward's
 * routing, mp_model_forward_device, mp_train_step's hand-over (after its
 * checks; data parallelism refused), mp_model_sync before the CPU reads the
 * host weights and the release on a move are checked without a GPU. */
#include "mp_cuda.h"
#include "testutil.h"
#include "train.h"

#include <string.h>

static mp_model *small_model(mp_attn_kind attn, int d_head) {
    mp_config c = mp_config_default();
    c.d_model = 32;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.d_head = d_head;
    c.d_mlp = 64;
    c.vocab = 40;
    c.ctx = 32;
    c.attn = attn;
    mp_model *m = NULL;
    if (mp_model_new_random(&m, &c, 7, 0.1f) != MP_OK) fprintf(stderr, "model: %s\n", mp_last_error());
    return m;
}

/* ---- a stand-in backend: logits = 1000 + call number; cpu_reason when the call has hooks ---- */
static int fake_calls, fake_released;
static const char *fake_reason(const mp_model *m, const void *fp) {
    (void)m;
    return ((const mp_forward_params *)fp)->hooks ? "hooks" : NULL;
}
static mp_status fake_forward(const mp_model *m, const int *tokens, int B, int T, const void *fp, float *logits) {
    (void)tokens;
    (void)fp;
    fake_calls++;
    for (size_t i = 0; i < (size_t)B * T * m->cfg.vocab; i++) logits[i] = 1000.0f + (float)fake_calls;
    return MP_OK;
}
static void fake_release(mp_model *m) {
    fake_released++;
    m->dev = NULL;
    m->dev_ops = NULL;
}
static int fake_steps, fake_stale, fake_synced;
static mp_status fake_train_step(mp_model *m, mp_adamw *opt, void *ws, const int *tokens, const int *targets, int B,
                                 int T, int accum, const void *hooks, float *loss) {
    (void)m, (void)ws, (void)tokens, (void)targets, (void)B, (void)T, (void)accum, (void)hooks;
    fake_steps++;
    fake_stale = 1; /* as a backend that keeps the updated weights on its device */
    opt->step++;
    *loss = 42.0f;
    return MP_OK;
}
static mp_status fake_sync(const mp_model *m) {
    (void)m;
    fake_synced += fake_stale;
    fake_stale = 0;
    return MP_OK;
}
static const mp_dev_ops fake_ops = {MP_DEV_OPS_VERSION, "fake", NULL, fake_reason, fake_forward, fake_release,
                                    fake_train_step, fake_sync};
/* the same backend built against another version of the interface: refused, not called */
static const mp_dev_ops fake_ops_v0 = {0, "fake", NULL, fake_reason, fake_forward, fake_release, fake_train_step,
                                       fake_sync};
static int noop_hook(void *u, const mp_hook_info *info, float *data) {
    (void)u;
    (void)info;
    (void)data;
    return 0;
}

int main(void) {
    mp_device d;
    mp_precision p;
    /* parsers */
    CHECK(mp_device_parse("cuda", "--device", &d) == MP_OK && d == MP_DEVICE_CUDA, "cuda");
    CHECK(mp_device_parse("cpu", "--device", &d) == MP_OK && d == MP_DEVICE_CPU, "cpu");
    CHECK(mp_device_parse("GPU", "--device", &d) == MP_ERR_ARG, "GPU");
    CHECK(strcmp(mp_last_error(), "--device: device must be \"cpu\" or \"cuda\" (got \"GPU\")") == 0, "%s",
          mp_last_error());
    CHECK(mp_precision_parse("bf16", "--precision", &p) == MP_OK && p == MP_PRECISION_BF16, "bf16");
    CHECK(mp_precision_parse("fp16", "--precision", &p) == MP_ERR_ARG &&
              strstr(mp_last_error(), "--precision: precision must be \"fp32\" or \"bf16\" (got \"fp16\")"),
          "%s", mp_last_error());
    CHECK(strcmp(mp_device_name(MP_DEVICE_CUDA), "cuda") == 0 && strcmp(mp_precision_name(MP_PRECISION_FP32), "fp32") == 0,
          "names");

    /* availability: this machine and CI have no device; a GPU machine takes the other branch */
    mp_status av = mp_cuda_available();
    char why[512];
    snprintf(why, sizeof why, "%s", av ? mp_last_error() : "");
    if (!mp_cuda_built())
        CHECK(av == MP_ERR_ARG && strcmp(why, "this build has no CUDA support (configure with -DMP_CUDA=ON)") == 0, "%s",
              why);
    else if (av != MP_OK)
        CHECK(av == MP_ERR_CUDA && strncmp(why, "no CUDA device: ", 16) == 0 && strlen(why) > 16, "%s", why);

    /* the backend's host checks */
    mp_model *m = small_model(MP_ATTN_SOFTMAX, 8);
    CHECK(m != NULL, "model");
    if (!m) return tu_finish("test_device");
    CHECK(mp_cuda_check_model(&m->cfg, MP_PRECISION_FP32) == MP_OK, "%s", mp_last_error());
    CHECK(mp_cuda_check_model(&m->cfg, MP_PRECISION_BF16) == MP_OK, "%s", mp_last_error());
    CHECK(mp_cuda_check_model(&m->cfg, (mp_precision)7) == MP_ERR_ARG, "unknown precision");
    mp_model *e = small_model(MP_ATTN_ENTMAX15, 8);
    CHECK(e && mp_cuda_check_model(&e->cfg, MP_PRECISION_FP32) == MP_ERR_ARG && strstr(mp_last_error(), "\"entmax15\""),
          "%s", mp_last_error());
    mp_model *wide = small_model(MP_ATTN_SOFTMAX, 512);
    CHECK(wide && mp_cuda_check_model(&wide->cfg, MP_PRECISION_FP32) == MP_ERR_ARG &&
              strstr(mp_last_error(), "d_head up to 256 (this model: 512)"),
          "%s", mp_last_error());
    mp_model_free(e);
    mp_model_free(wide);

    /* which calls stay on the CPU */
    mp_forward_params fp = mp_forward_params_default();
    CHECK(mp_cuda_cpu_reason(m, &fp) == NULL, "plain call");
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    mp_hooks_add(hs, "*", noop_hook, NULL); /* every default point, the norms' scales included */
    fp.hooks = hs;
    CHECK(mp_cuda_cpu_reason(m, &fp) == NULL, "'*' runs on the device: %s", mp_cuda_cpu_reason(m, &fp));
    mp_hooks_add(hs, "blocks.1.attn.hook_result", noop_hook, NULL);
    const char *r = mp_cuda_cpu_reason(m, &fp);
    CHECK(r && strcmp(r, "attn.hook_result") == 0, "%s", r ? r : "NULL");
    int mask[6] = {1, 1, 1, 0, 1, 1};
    mp_forward_params fm = mp_forward_params_default();
    fm.attn_mask = mask;
    r = mp_cuda_cpu_reason(m, &fm);
    CHECK(r && strstr(r, "attention_mask"), "%s", r ? r : "NULL");
    mp_acts acts;
    memset(&acts, 0, sizeof acts);
    fm.attn_mask = NULL;
    fm.acts = &acts; /* backward hooks' training-mode forward: the CPU's (training steps go to the device whole) */
    fm.hooks = hs;
    r = mp_cuda_cpu_reason(m, &fm);
    CHECK(r && strstr(r, "training-mode"), "%s", r ? r : "NULL");

    /* a refused move leaves the model as it was */
    const int toks[5] = {1, 4, 9, 16, 25};
    const size_t nl = 5 * (size_t)m->cfg.vocab;
    float ref[5 * 40], out[5 * 40];
    CHECK(mp_model_forward(m, toks, 1, 5, NULL, ref) == MP_OK, "%s", mp_last_error());
    if (av != MP_OK) {
        CHECK(mp_model_to_device(m, MP_DEVICE_CUDA, MP_PRECISION_FP32) == av && strcmp(mp_last_error(), why) == 0,
              "%s", mp_last_error());
        CHECK(m->device == MP_DEVICE_CPU && m->dev == NULL && m->dev_ops == NULL, "unchanged");
        CHECK(mp_model_forward(m, toks, 1, 5, NULL, out) == MP_OK && tu_max_abs_diff(ref, out, nl) == 0.0, "same");
    }
    CHECK(mp_model_to_device(m, MP_DEVICE_CPU, MP_PRECISION_BF16) == MP_ERR_ARG &&
              strstr(mp_last_error(), "BF16 weights kept as stored") && m->precision == MP_PRECISION_FP32,
          "%s", mp_last_error());
    CHECK(mp_model_forward_device(m, NULL) == MP_DEVICE_CPU, "cpu model");

    /* the dispatch seam, with the stand-in backend */
    m->dev = &fake_calls; /* any non-NULL state */
    m->dev_ops = &fake_ops;
    m->device = MP_DEVICE_CUDA;
    CHECK(mp_model_forward_device(m, NULL) == MP_DEVICE_CUDA, "routed");
    CHECK(mp_model_forward(m, toks, 1, 5, NULL, out) == MP_OK && fake_calls == 1 && out[0] == 1001.0f &&
              out[nl - 1] == 1001.0f,
          "backend forward: calls %d, %g", fake_calls, out[0]);
    int bad[5] = {1, 4, 99, 16, 25};
    CHECK(mp_model_forward(m, bad, 1, 5, NULL, out) == MP_ERR_ARG && fake_calls == 1, "arguments checked first");
    m->dev_ops = &fake_ops_v0;
    CHECK(mp_model_forward(m, toks, 1, 5, NULL, out) == MP_ERR_ARG && fake_calls == 1 &&
              strstr(mp_last_error(), "interface version 0"), "another interface version refused: %s", mp_last_error());
    m->dev_ops = &fake_ops;
    mp_forward_params fh = mp_forward_params_default();
    fh.hooks = hs;
    CHECK(mp_model_forward_device(m, &fh) == MP_DEVICE_CPU, "cpu reason");
    CHECK(mp_model_forward(m, toks, 1, 5, &fh, out) == MP_OK && fake_calls == 1 && tu_max_abs_diff(ref, out, nl) == 0.0,
          "a call with a CPU reason runs on the CPU: calls %d", fake_calls);
    /* mp_train_step: checked on the host, then the backend's step (the optimiser sized first) */
    int tgt[5] = {4, 16, 25, 2, -1};
    mp_adamw opt;
    memset(&opt, 0, sizeof opt);
    opt.hp = mp_adamw_params_default();
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    float loss = 0;
    CHECK(mp_train_step(m, &opt, &ws, toks, tgt, 1, 5, 1, NULL, &loss) == MP_OK && fake_steps == 1 && loss == 42.0f &&
              opt.n == mp_config_n_params(&m->cfg) && ws.grads.n == 0,
          "backend train step: steps %d, loss %g, moments %zu, host gradients %zu", fake_steps, loss, opt.n,
          ws.grads.n);
    int bad_tgt[5] = {4, 16, 99, 2, -1};
    CHECK(mp_train_step(m, &opt, &ws, toks, bad_tgt, 1, 5, 1, NULL, &loss) == MP_ERR_ARG && fake_steps == 1,
          "targets checked first");
    mp_grad_sync sync = {0};
    ws.sync = &sync;
    CHECK(mp_train_step(m, &opt, &ws, toks, tgt, 1, 5, 1, NULL, &loss) == MP_ERR_ARG && fake_steps == 1 &&
              strstr(mp_last_error(), "data-parallel") != NULL,
          "data parallelism stays on the CPU: %s", mp_last_error());
    /* the backend's newer weights: brought back before the CPU reads the host copy */
    ws.sync = NULL;
    CHECK(fake_stale == 1 && fake_synced == 0, "a step leaves the state on the device");
    CHECK(mp_model_forward(m, toks, 1, 5, NULL, out) == MP_OK && fake_synced == 0, "a device forward needs no sync");
    CHECK(mp_model_forward(m, toks, 1, 5, &fh, out) == MP_OK && fake_synced == 1 && fake_stale == 0,
          "a CPU fallback syncs first: %d", fake_synced);
    CHECK(mp_model_sync(m) == MP_OK && fake_synced == 1, "sync of a current host does nothing");
    CHECK(mp_train_step(m, &opt, &ws, toks, tgt, 1, 5, 1, NULL, &loss) == MP_OK && fake_stale == 1, "second step");
    CHECK(mp_model_sync(m) == MP_OK && fake_synced == 2 && fake_stale == 0, "explicit sync: %d", fake_synced);
    CHECK(mp_train_step(m, &opt, &ws, toks, tgt, 1, 5, 1, NULL, &loss) == MP_OK && fake_stale == 1, "third step");
    CHECK(mp_model_to_device(m, MP_DEVICE_CPU, MP_PRECISION_FP32) == MP_OK && fake_synced == 3 && fake_released == 1 &&
              !m->dev && m->device == MP_DEVICE_CPU,
          "a move to the CPU syncs, then releases: synced %d, released %d", fake_synced, fake_released);
    CHECK(mp_model_sync(m) == MP_OK, "sync on the CPU");
    mp_train_ws_free(&ws);
    mp_adamw_free(&opt);
    mp_hooks_free(hs);
    mp_model_free(m); /* the backend's state went with the move */
    CHECK(fake_released == 1, "released %d", fake_released);
    return tu_finish("test_device");
}
