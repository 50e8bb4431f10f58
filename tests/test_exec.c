/* test_exec.c — the forward's op table and its one walk (runtime/exec.h): a
 * toy device whose ops only log their names runs mp_block_forward with every
 * non-opt-in hook point active, and the log (ops and hook points, in the
 * order they ran) must equal the order written out below by hand from
 * DESIGN.md's block (an independent reference: the walk, not this test,
 * encodes it); with a KV cache, kv_append between hook_rot_k and the
 * attention; GPT-NeoX's parallel block (parallel_attn: no hook_resid_mid, the
 * MLP reading resid_pre); an opt-in point whose op the device lacks fails with a message,
 * not a crash; and the registry (device.h): the CPU's table found by name and
 * device, bad tables refused naming what is wrong, a new one registered. */
#include "exec.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static char logbuf[8192];

static void put(const char *s) {
    size_t n = strlen(logbuf);
    snprintf(logbuf + n, sizeof logbuf - n, "%s%s", n ? " " : "", s);
}

static const char *const wname[] = {"wq", "wk", "wv", "wo", "w1", "w3", "w2", "unembed"};

static mp_status t_view(const mp_exec *e, mp_hook_info *info, float *data) {
    (void)e, (void)data;
    char name[96];
    mp_hook_name(info->id, info->layer, name, sizeof name);
    put(name);
    return MP_OK;
}
static mp_status t_embed(const mp_exec *e, float *x, const int *tokens) {
    (void)e, (void)x, (void)tokens;
    put("[embed]");
    return MP_OK;
}
static mp_status t_learned_pos(const mp_exec *e, float *x, int add) {
    (void)e, (void)x;
    put(add ? "[pos+]" : "[pos=]");
    return MP_OK;
}
static mp_status t_norm(const mp_exec *e, mp_hook_id sid, int l, float *out, float *mean, float *rstd,
                        const float *x) {
    (void)out, (void)mean, (void)rstd, (void)x;
    put("[norm]");
    static float scale[64];
    return mp_exec_fire(e, sid, l, scale); /* the scale point between the norm's two steps */
}
static mp_status t_linear(const mp_exec *e, mp_exec_weight w, int l, float *out, const float *in, int rows) {
    (void)e, (void)l, (void)out, (void)in, (void)rows;
    char s[32];
    snprintf(s, sizeof s, "[%s]", wname[w]);
    put(s);
    return MP_OK;
}
static mp_status t_linears(const mp_exec *e, int n, const mp_exec_weight *w, int l, float *const *out,
                           const float *in, int rows) {
    (void)e, (void)l, (void)out, (void)in, (void)rows;
    char s[64] = "[";
    for (int i = 0; i < n; i++) {
        strcat(s, wname[w[i]]);
        strcat(s, i + 1 < n ? "+" : "]");
    }
    put(s);
    return MP_OK;
}
static mp_status t_pos_apply(const mp_exec *e, int l, float *q, float *k) {
    (void)e, (void)l, (void)q, (void)k;
    put("[rope]");
    return MP_OK;
}
static mp_status t_qk_norm(const mp_exec *e, mp_hook_id id, int l, float *x, float *x_in, float *rstd) {
    (void)e, (void)l, (void)x, (void)x_in, (void)rstd;
    put(id == MP_HOOK_Q_NORM ? "[qnorm]" : "[knorm]");
    return MP_OK;
}
static mp_status t_kv_append(const mp_exec *e, int l, const float *k, const float *v, mp_kv_view *kv) {
    (void)e, (void)l;
    kv->k = k, kv->v = v;
    put("[kv]");
    return MP_OK;
}
static mp_status t_attention(const mp_exec *e, int l, const mp_layer_acts *a, const mp_kv_view *kv, int qb) {
    (void)kv;
    put("[attn]");
    mp_status st = MP_OK;
    for (int q0 = 0; q0 < e->f.T && !st; q0 += qb) {
        const int rows = e->f.T - q0 < qb ? e->f.T - q0 : qb;
        if (!(st = mp_exec_fire_block(e, MP_HOOK_ATTN_SCORES, l, q0, rows, a->att)))
            st = mp_exec_fire_block(e, MP_HOOK_PATTERN, l, q0, rows, a->att);
    }
    return st;
}
static mp_status t_act(const mp_exec *e, float *post, const float *pre, const float *up) {
    (void)e, (void)post, (void)pre, (void)up;
    put("[act]");
    return MP_OK;
}
static mp_status t_copy(const mp_exec *e, float *dst, const float *src, size_t n) {
    (void)e, (void)dst, (void)src, (void)n;
    put("[copy]");
    return MP_OK;
}
static mp_status t_add(const mp_exec *e, float *x, const float *y, size_t n) {
    (void)e, (void)x, (void)y, (void)n;
    put("[add]");
    return MP_OK;
}
static mp_status t_head(const mp_exec *e, const float *xn, mp_logits_mode mode, float *logits) {
    (void)e, (void)xn, (void)logits;
    put(mode == MP_LOGITS_LAST ? "[head last]" : "[head all]");
    return MP_OK;
}

static const mp_exec_ops toy = {
    .version = MP_EXEC_OPS_VERSION, .name = "toy", .device = MP_DEVICE_CUDA,
    .view = t_view, .embed = t_embed, .learned_pos = t_learned_pos, .norm = t_norm, .linear = t_linear,
    .linears = t_linears, .pos_apply = t_pos_apply, .kv_append = t_kv_append, .attention = t_attention,
    .act = t_act, .copy = t_copy, .add = t_add, .head = t_head, .qk_norm = t_qk_norm};

static mp_config toy_config(void) {
    mp_config c = mp_config_default();
    c.d_model = 8, c.n_layer = 1, c.n_head = 2, c.n_kv_head = 1, c.d_head = 4, c.d_mlp = 16, c.vocab = 11;
    c.ctx = 16;
    return c;
}

static int own_mid; /* the device gives resid_mid a buffer of its own (a parallel block needs one) */

/* runs the walk of a 1-layer model on the toy device; T = 3, blocks of 2 query rows */
static mp_status walk(const mp_config *c, const mp_hooks *hs, int cache, mp_logits_mode mode) {
    static float mem[4096];
    static int tokens[3];
    logbuf[0] = 0;
    mp_exec e = {&toy, NULL, {c, hs, 1, 3, 0, NULL, NULL}};
    mp_exec_bufs b = {.tokens = tokens, .out = mem, .buf = mem, .cache = cache, .qb = 2, .logits_mode = mode,
                      .logits = mem};
    mp_layer_acts *s = &b.scratch;
    s->resid_in = s->resid_mid = s->resid_out = mem + 100;
    s->ln1 = s->ln2 = mem + 200;
    s->q = mem + 300, s->k = mem + 400, s->v = mem + 500, s->z = mem + 600, s->att = mem + 700;
    s->pre = s->post = mem + 800, s->up = mem + 900;
    if (own_mid) s->resid_mid = mem + 1000;
    return mp_block_forward(&e, &b);
}

static int noop(void *user, const mp_hook_info *info, float *data) {
    (void)user, (void)info, (void)data;
    return 0;
}

static void test_order(void) {
    mp_config c = toy_config();
    mp_hooks *hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "*", noop, NULL) == MP_OK, "hooks: %s", mp_last_error());
    CHECK(walk(&c, hs, 0, MP_LOGITS_ALL) == MP_OK, "walk: %s", mp_last_error());
    const char *want =
        "[embed] hook_embed blocks.0.hook_resid_pre [norm] blocks.0.ln1.hook_scale blocks.0.ln1.hook_normalized "
        "[wq+wk+wv] blocks.0.attn.hook_q blocks.0.attn.hook_k blocks.0.attn.hook_v [rope] blocks.0.attn.hook_rot_q "
        "blocks.0.attn.hook_rot_k [attn] blocks.0.attn.hook_attn_scores blocks.0.attn.hook_pattern "
        "blocks.0.attn.hook_attn_scores blocks.0.attn.hook_pattern blocks.0.attn.hook_z [wo] blocks.0.hook_attn_out "
        "[add] blocks.0.hook_resid_mid [copy] blocks.0.hook_mlp_in [norm] blocks.0.ln2.hook_scale "
        "blocks.0.ln2.hook_normalized [w1+w3] blocks.0.mlp.hook_pre blocks.0.mlp.hook_pre_linear [act] "
        "blocks.0.mlp.hook_post [w2] blocks.0.hook_mlp_out [add] blocks.0.hook_resid_post [norm] "
        "ln_final.hook_scale ln_final.hook_normalized [head all]";
    CHECK(strcmp(logbuf, want) == 0, "all points, in order:\n got: %s\nwant: %s", logbuf, want);
    /* the q/k norm (Qwen3): after the projections and their points, before the positions */
    mp_hooks_free(hs);
    c.qk_norm = MP_QK_NORM_HEAD;
    hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "blocks.0.attn.hook_[qkv],*_norm.hook_normalized,*hook_rot_?", noop, NULL) == MP_OK,
          "hooks: %s", mp_last_error());
    CHECK(walk(&c, hs, 0, MP_LOGITS_NONE) == MP_OK, "walk: %s", mp_last_error());
    const char *qkn = "[wq+wk+wv] blocks.0.attn.hook_q blocks.0.attn.hook_k blocks.0.attn.hook_v [qnorm] [knorm] "
                      "blocks.0.attn.q_norm.hook_normalized blocks.0.attn.k_norm.hook_normalized [rope] "
                      "blocks.0.attn.hook_rot_q blocks.0.attn.hook_rot_k [attn]";
    CHECK(strstr(logbuf, qkn) != NULL, "qk_norm, in order:\n got: %s\nwant: ...%s...", logbuf, qkn);
    CHECK(strstr(logbuf, "ln1.hook_normalized") == NULL && strstr(logbuf, "ln_final") == NULL,
          "the glob selects the q/k norm points, not the others: %s", logbuf);
    c.qk_norm = MP_QK_NORM_NONE;
    /* nothing hooked, a KV cache, the last row's logits, GELU and learned positions */
    c.mlp = MP_MLP_GELU;
    c.pos = MP_POS_LEARNED;
    CHECK(walk(&c, NULL, 1, MP_LOGITS_LAST) == MP_OK, "walk: %s", mp_last_error());
    want = "[embed] [pos+] [norm] [wq+wk+wv] [rope] [kv] [attn] [wo] [add] [norm] [w1] [act] [w2] [add] [norm] "
           "[head last]";
    CHECK(strcmp(logbuf, want) == 0, "no hooks, cached:\n got: %s\nwant: %s", logbuf, want);
    mp_hooks_free(hs);
    hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "hook_pos_embed,hook_embed", noop, NULL) == MP_OK, "hooks: %s", mp_last_error());
    CHECK(walk(&c, hs, 0, MP_LOGITS_NONE) == MP_OK, "walk: %s", mp_last_error());
    const char *pre = "[embed] [pos=] hook_pos_embed [add] hook_embed [norm]";
    CHECK(strncmp(logbuf, pre, strlen(pre)) == 0,
          "hook_pos_embed: the rows fired, then added: %s", logbuf);
    CHECK(strstr(logbuf, "[head") == NULL, "MP_LOGITS_NONE: no head: %s", logbuf);
    mp_hooks_free(hs);
    /* GPT-NeoX's parallel block: resid_mid (resid_pre + attn_out, a buffer of its own) fires no hook; the
     * MLP's norm reads resid_pre (hook_mlp_in its copy); the residual continues from resid_mid after it */
    c = toy_config();
    c.parallel_attn = 1;
    hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "*", noop, NULL) == MP_OK, "hooks: %s", mp_last_error());
    own_mid = 1;
    CHECK(walk(&c, hs, 0, MP_LOGITS_ALL) == MP_OK, "walk: %s", mp_last_error());
    want = "[embed] hook_embed blocks.0.hook_resid_pre [norm] blocks.0.ln1.hook_scale blocks.0.ln1.hook_normalized "
           "[wq+wk+wv] blocks.0.attn.hook_q blocks.0.attn.hook_k blocks.0.attn.hook_v [rope] blocks.0.attn.hook_rot_q "
           "blocks.0.attn.hook_rot_k [attn] blocks.0.attn.hook_attn_scores blocks.0.attn.hook_pattern "
           "blocks.0.attn.hook_attn_scores blocks.0.attn.hook_pattern blocks.0.attn.hook_z [wo] blocks.0.hook_attn_out "
           "[copy] [add] [copy] blocks.0.hook_mlp_in [norm] blocks.0.ln2.hook_scale blocks.0.ln2.hook_normalized "
           "[copy] [w1+w3] blocks.0.mlp.hook_pre blocks.0.mlp.hook_pre_linear [act] blocks.0.mlp.hook_post [w2] "
           "blocks.0.hook_mlp_out [add] blocks.0.hook_resid_post [norm] ln_final.hook_scale ln_final.hook_normalized "
           "[head all]";
    CHECK(strcmp(logbuf, want) == 0, "parallel block, in order:\n got: %s\nwant: %s", logbuf, want);
    own_mid = 0; /* a device that aliases resid_mid with resid_pre: refused, not a silent wrong sum */
    CHECK(walk(&c, hs, 0, MP_LOGITS_ALL) == MP_ERR_ARG && strstr(mp_last_error(), "resid_mid"),
          "parallel block without its buffer: %s", mp_last_error());
    mp_hooks_free(hs);
    /* an opt-in point this device has no op for: an error naming it */
    c = toy_config();
    hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "blocks.0.attn.hook_result", noop, NULL) == MP_OK, "hooks: %s", mp_last_error());
    CHECK(walk(&c, hs, 0, MP_LOGITS_ALL) == MP_ERR_ARG && strstr(mp_last_error(), "hook_result") &&
              strstr(mp_last_error(), "\"toy\""), "no result op: %s", mp_last_error());
    mp_hooks_free(hs);
    hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, "blocks.0.attn.hook_q_input", noop, NULL) == MP_OK, "hooks: %s", mp_last_error());
    CHECK(walk(&c, hs, 0, MP_LOGITS_ALL) == MP_ERR_ARG && strstr(mp_last_error(), "hook_attn_in"),
          "no split op: %s", mp_last_error());
    mp_hooks_free(hs);
}

static void test_registry(void) {
    const mp_exec_ops *cpu = mp_exec_lookup("cpu");
    CHECK(cpu && cpu == mp_exec_for_device(MP_DEVICE_CPU), "the CPU's table by name and by device");
    CHECK(cpu && cpu->version == MP_EXEC_OPS_VERSION && cpu->device == MP_DEVICE_CPU && cpu->split_qkv &&
              cpu->result, "the CPU's table: its version and every optional op");
    CHECK(mp_exec_lookup("toy") == NULL && mp_exec_lookup(NULL) == NULL, "not registered: NULL");
    mp_exec_ops bad = toy;
    bad.version = MP_EXEC_OPS_VERSION + 1;
    CHECK(mp_exec_register(&bad) == MP_ERR_ARG && strstr(mp_last_error(), "version"), "version: %s",
          mp_last_error());
    bad = toy;
    bad.attention = NULL;
    CHECK(mp_exec_register(&bad) == MP_ERR_ARG && strstr(mp_last_error(), "attention"), "required op: %s",
          mp_last_error());
    bad = toy;
    bad.name = "cpu";
    CHECK(mp_exec_register(&bad) == MP_ERR_ARG && strstr(mp_last_error(), "\"cpu\""), "a taken name: %s",
          mp_last_error());
    CHECK(mp_exec_register(NULL) == MP_ERR_ARG, "NULL refused");
    CHECK(mp_exec_register(&toy) == MP_OK && mp_exec_register(&toy) == MP_OK, "registered, again a no-op");
    CHECK(mp_exec_lookup("toy") == &toy && mp_exec_for_device(MP_DEVICE_CUDA) == &toy, "found by name and device");
    CHECK(mp_exec_lookup("cpu") == cpu, "the CPU's still there");
}

int main(void) {
    test_order();
    test_registry();
    return tu_finish("test_exec");
}
