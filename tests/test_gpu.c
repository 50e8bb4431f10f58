/* test_gpu.c — the CUDA forward against the CPU forward (label gpu; SKIP, exit
 * 77, where mp_cuda_available fails: this machine and CI). Random GQA models
 * (H = 4, K = 2) with every positional scheme (rope, half_rope, high_freq,
 * rope_id with and without its temperature, none, learned; rope with PI, NTK
 * and YaRN; the q/k norm per head and over the whole projection), both
 * norms, every MLP kind, biases: every hook point "*" fires
 * (the norms' scales, hook_pos_embed and hook_mlp_in included) and the logits,
 * for a batch of 2 x 37 tokens with the pattern in one block and in blocks of
 * 16 query rows; KV-cached decoding (with and without the pattern hooks); a
 * long cache (300 positions and more: the decode kernel's key slices) moved
 * between the device and the CPU, its host copy read back (mp_kvcache_sync);
 * greedy generation (equal tokens); each C intervention (the device runs
 * them as kernels: maps in blocks at row offsets, one head, positions, two at
 * one point in order, a fault's message); readers (captures
 * the device copies on its copy stream) alone, beside writers, and failing;
 * the shared llama2.c
 * model; a GPT-NeoX-like parallel block (parallel_attn, half_rope). fp32
 * tolerance: max |gpu - cpu| <= 1e-4 of the tensor's scale (its
 * largest finite |value|); -inf (masked scores) must match exactly. bf16
 * (bfloat16 operands of every product, fp32 accumulation and everything
 * else; the attention's score products in TF32, which the emulator rounds
 * as the tensor cores do): max error <= 4e-2 of each tensor's scale, against
 * the fp32 CPU (the pattern, the most sensitive, measured 0.032 on the
 * emulator with TF32 scores, 0.028 without).
 * `test_gpu --dry` runs every comparison with the CPU on both sides (no device
 * needed): a check of the test's own set-up, not of the backend. */
#include "formats.h"
#include "intervene.h"
#include "mp_cuda.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define TOL_FP32 1e-4
#define TOL_BF16 4e-2
static double TOL = TOL_FP32;
static mp_precision PREC = MP_PRECISION_FP32;
static int dry; /* --dry: "cuda" is the CPU */

static int near_scaled(const char *what, const float *ref, const float *got, size_t n) {
    double scale = 0.0, err = 0.0;
    size_t bad_inf = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > scale) scale = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(got[i])) {
            bad_inf += !(ref[i] == got[i]);
            continue;
        }
        double e = fabs((double)ref[i] - got[i]);
        if (e > err) err = e;
    }
    const int ok = bad_inf == 0 && err <= TOL * (scale > 0 ? scale : 1e-30);
    CHECK(ok, "%s: max error %.3g, scale %.3g (%.2g of it), %zu infinities differ", what, err, scale,
          scale > 0 ? err / scale : 0.0, bad_inf);
    return ok;
}

/* forward with every default hook point captured; logits ALL */
static int readers; /* run_all registers its captures as readers (mp_hooks_add_reader: the device's copy stream) */
static mp_status run_all(const mp_model *m, const int *tok, int B, int T, int q_block, const char *globs,
                         tu_capture *cap, float *logits) {
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    mp_status st = (readers ? mp_hooks_add_reader : mp_hooks_add)(hs, globs, tu_capture_cb, cap);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = q_block;
    if (!st) st = mp_model_forward(m, tok, B, T, &fp, logits);
    mp_hooks_free(hs);
    return st;
}

static void to(mp_model *m, mp_device d) {
    if (dry) return;
    mp_status st = mp_model_to_device(m, d, d == MP_DEVICE_CUDA ? PREC : MP_PRECISION_FP32);
    CHECK(st == MP_OK && m->device == d, "to %s: %s", mp_device_name(d), mp_last_error());
}

/* Every hook and the logits on both devices, for q_block 0 (one block: T < 64)
 * and 16; and for 16 again with the captures registered as readers (the
 * device hands them copies made on its copy stream while the forward goes on:
 * the same values, the same order). */
static void compare_model(mp_model *m, const char *label, int B, int T) {
    const size_t nl = (size_t)B * T * m->cfg.vocab;
    int *tok = malloc((size_t)B * T * sizeof(int));
    float *lc = malloc(nl * sizeof(float)), *lg = malloc(nl * sizeof(float));
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % m->cfg.vocab;
    static tu_capture cc, cg;
    const int qbs[3] = {0, 16, 16};
    for (int qi = 0; qi < 3; qi++) {
        readers = qi == 2;
        memset(&cc, 0, sizeof cc);
        memset(&cg, 0, sizeof cg);
        to(m, MP_DEVICE_CPU);
        CHECK(run_all(m, tok, B, T, qbs[qi], "*", &cc, lc) == MP_OK, "%s cpu: %s", label, mp_last_error());
        to(m, MP_DEVICE_CUDA);
        CHECK(dry || mp_model_forward_device(m, NULL) == MP_DEVICE_CUDA, "%s: on the device", label);
        CHECK(run_all(m, tok, B, T, qbs[qi], "*", &cg, lg) == MP_OK, "%s cuda: %s", label, mp_last_error());
        char what[160];
        snprintf(what, sizeof what, "%s q_block %d%s: logits", label, qbs[qi], readers ? " (readers)" : "");
        near_scaled(what, lc, lg, nl);
        CHECK(cc.n == cg.n && cc.n > 10, "%s: %d vs %d points", label, cc.n, cg.n);
        for (int k = 0; k < cc.n && k < cg.n; k++) {
            CHECK(strcmp(cc.name[k], cg.name[k]) == 0 && cc.numel[k] == cg.numel[k], "%s: %s vs %s", label,
                  cc.name[k], cg.name[k]);
            snprintf(what, sizeof what, "%s q_block %d%s: %s", label, qbs[qi], readers ? " (readers)" : "", cc.name[k]);
            near_scaled(what, cc.buf[k], cg.buf[k], cc.numel[k]);
        }
        tu_capture_free(&cc);
        tu_capture_free(&cg);
    }
    readers = 0;
    to(m, MP_DEVICE_CPU);
    free(tok);
    free(lc);
    free(lg);
}

/* Prefill 20 tokens, then 6 single-token steps over a KV cache: the last
 * logits of each call, without hooks (the blocked attention for the prefill,
 * the online-softmax kernel for the steps), with the pattern captured (the
 * materialised path at pos0 > 0), and (variant 2) without hooks, the prefill
 * split into 4 + 16 tokens (the blocked attention at pos0 4) with the device's
 * attention in blocks of 5 query rows. */
static void compare_decode(mp_model *m, const char *label) {
    const int V = m->cfg.vocab, n0 = 20, steps = 6;
    int tok[26];
    for (int i = 0; i < n0 + steps; i++) tok[i] = (i * 5 + 1) % V;
    for (int hooked = 0; hooked < 3; hooked++) {
        float *out[2];
        for (int dev = 0; dev < 2; dev++) {
            to(m, dev ? MP_DEVICE_CUDA : MP_DEVICE_CPU);
            if (dev && !dry && hooked == 2)
                CHECK(mp_cuda_attn_rows(m, 5) == MP_OK, "%s: attention rows: %s", label, mp_last_error());
            out[dev] = malloc((size_t)(steps + 1) * V * sizeof(float));
            mp_kvcache kc;
            CHECK(mp_kvcache_init(&kc, &m->cfg, 1, 32) == MP_OK, "cache");
            static tu_capture cap;
            memset(&cap, 0, sizeof cap);
            mp_hooks *hs = mp_hooks_new(&m->cfg);
            if (hooked == 1) mp_hooks_add(hs, "blocks.*.attn.hook_pattern", tu_capture_cb, &cap);
            mp_forward_params fp = mp_forward_params_default();
            fp.cache = &kc;
            fp.logits = MP_LOGITS_LAST;
            fp.hooks = hooked == 1 ? hs : NULL;
            if (hooked == 2) /* the first 4 tokens, then 16 more over the cache */
                CHECK(mp_model_forward(m, tok, 1, 4, &fp, out[dev]) == MP_OK &&
                          mp_model_forward(m, tok + 4, 1, n0 - 4, &fp, out[dev]) == MP_OK,
                      "%s split prefill: %s", label, mp_last_error());
            else
                CHECK(mp_model_forward(m, tok, 1, n0, &fp, out[dev]) == MP_OK, "%s prefill: %s", label,
                      mp_last_error());
            for (int s = 0; s < steps; s++)
                CHECK(mp_model_forward(m, tok + n0 + s, 1, 1, &fp, out[dev] + (size_t)(s + 1) * V) == MP_OK,
                      "%s step %d: %s", label, s, mp_last_error());
            CHECK(kc.len == n0 + steps, "%s: cache length %d", label, kc.len);
            mp_hooks_free(hs);
            tu_capture_free(&cap);
            mp_kvcache_free(&kc);
        }
        if (!dry) CHECK(mp_cuda_attn_rows(m, 0) == MP_OK, "%s: attention rows back to automatic", label);
        char what[128];
        snprintf(what, sizeof what, "%s decode%s", label,
                 hooked == 1 ? " (pattern hooked)" : hooked == 2 ? " (split prefill, blocks of 5 rows)" : "");
        near_scaled(what, out[0], out[1], (size_t)(steps + 1) * V);
        free(out[0]);
        free(out[1]);
    }
    to(m, MP_DEVICE_CPU);
}

/* The cache's rows 0..len-1 of every layer, sequence and kv head, packed: [L, B, K, len, Dh] of k, then of v. */
static float *cache_rows(const mp_model *m, const mp_kvcache *kc) {
    const int L = m->cfg.n_layer, K = m->cfg.n_kv_head, Dh = m->cfg.d_head;
    const size_t run = (size_t)kc->len * Dh, nrun = (size_t)L * kc->B * K;
    float *out = malloc(2 * nrun * run * sizeof(float));
    size_t i = 0;
    for (int l = 0; l < L; l++)
        for (int b = 0; b < kc->B; b++)
            for (int kh = 0; kh < K; kh++, i++) {
                const size_t at = mp_kv_offset(kc->B, K, kc->cap, Dh, l, b, kh, 0);
                memcpy(out + i * run, kc->k + at, run * sizeof(float));
                memcpy(out + (nrun + i) * run, kc->v + at, run * sizeof(float));
            }
    return out;
}

/* A long cache: 2 sequences prefilled with 300 tokens on the device, then
 * steps of 1 token and a call of 5 (the decode kernel: a row's 301..313 keys
 * cut into slices of 38 to 40 per warp; several query rows per call); the host
 * copy, brought up to date by mp_kvcache_sync after those device calls, equals
 * the CPU's cache; 2 more device steps (the host copy lags again), then 2
 * steps on the CPU (the model moved there: its forward completes the host
 * copy first) and 2 on the device again (the host's new rows uploaded). Every
 * call's last logits and both caches' rows against the same calls all on the
 * CPU. */
static void compare_long_cache(mp_model *m, const char *label) {
    enum { B = 2, NCALL = 10, CAP = 320 };
    const int len[NCALL] = {300, 1, 1, 5, 1, 1, 1, 1, 1, 1}, on_dev[NCALL] = {1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
    const int V = m->cfg.vocab;
    float *lo[2], *mid[2] = {NULL, NULL}, *end[2] = {NULL, NULL};
    int *tok = malloc((size_t)B * CAP * sizeof(int));
    for (int run = 0; run < 2; run++) { /* 0: all on the CPU; 1: as on_dev says */
        lo[run] = malloc((size_t)NCALL * B * V * sizeof(float));
        mp_kvcache kc;
        CHECK(mp_kvcache_init(&kc, &m->cfg, B, CAP) == MP_OK, "%s: cache", label);
        const size_t ncache = (size_t)m->cfg.n_layer * B * CAP * m->cfg.n_kv_head * m->cfg.d_head;
        for (size_t j = 0; j < ncache; j++) kc.k[j] = kc.v[j] = NAN; /* a row read before it is written shows */
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &kc;
        fp.logits = MP_LOGITS_LAST;
        for (int i = 0; i < NCALL; i++) {
            const int T = len[i], p0 = kc.len;
            to(m, run && on_dev[i] ? MP_DEVICE_CUDA : MP_DEVICE_CPU);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) tok[b * T + t] = ((p0 + t) * 7 + 3 * b + 1) % V;
            CHECK(mp_model_forward(m, tok, B, T, &fp, lo[run] + (size_t)i * B * V) == MP_OK,
                  "%s long cache call %d: %s", label, i, mp_last_error());
            if (i == 3) { /* after the device's calls (307 positions): the host copy read back */
                CHECK(mp_kvcache_sync(&kc) == MP_OK, "%s: cache sync: %s", label, mp_last_error());
                mid[run] = cache_rows(m, &kc);
            }
        }
        CHECK(kc.len == 313, "%s: long cache length %d", label, kc.len);
        CHECK(mp_kvcache_sync(&kc) == MP_OK, "%s: cache sync: %s", label, mp_last_error());
        end[run] = cache_rows(m, &kc);
        mp_kvcache_free(&kc);
    }
    const size_t rows = (size_t)2 * m->cfg.n_layer * B * m->cfg.n_kv_head * m->cfg.d_head;
    char what[128];
    snprintf(what, sizeof what, "%s long cache: logits of every call", label);
    near_scaled(what, lo[0], lo[1], (size_t)NCALL * B * V);
    snprintf(what, sizeof what, "%s long cache: host copy after the device's calls", label);
    near_scaled(what, mid[0], mid[1], rows * 307);
    snprintf(what, sizeof what, "%s long cache: host copy at the end", label);
    near_scaled(what, end[0], end[1], rows * 313);
    for (int r = 0; r < 2; r++) free(lo[r]), free(mid[r]), free(end[r]);
    free(tok);
    to(m, MP_DEVICE_CPU);
}

static void compare_generate(mp_model *m, const char *label) {
    const int prompt[4] = {1, 2, 3, 4};
    int out[2][40], n[2];
    mp_sampler_params sp = {0.0f, 1.0f, 1};
    for (int dev = 0; dev < 2; dev++) {
        to(m, dev ? MP_DEVICE_CUDA : MP_DEVICE_CPU);
        CHECK(mp_model_generate(m, prompt, 4, 24, &sp, NULL, -1, NULL, NULL, out[dev], &n[dev]) == MP_OK, "%s: %s",
              label, mp_last_error());
    }
    CHECK(n[0] == n[1] && memcmp(out[0], out[1], (size_t)n[0] * sizeof(int)) == 0, "%s: greedy tokens differ", label);
    to(m, MP_DEVICE_CPU);
}

/* Each C intervention at a hook point: the logits agree across devices. */
static void compare_interventions(mp_model *m) {
    const int B = 1, T = 12, V = m->cfg.vocab;
    int tok[12];
    for (int i = 0; i < T; i++) tok[i] = (3 * i + 2) % V;
    float src[12 * 64], vec[64];
    for (int i = 0; i < T * m->cfg.d_model && i < 12 * 64; i++) src[i] = 0.01f * (float)(i % 17) - 0.05f;
    for (int i = 0; i < 64; i++) vec[i] = 0.1f * (float)(i % 5) - 0.2f;
    struct { const char *where; mp_intervention iv; } cases[] = {
        {"blocks.0.attn.hook_z", mp_intervention_zero()},
        {"blocks.1.hook_resid_mid", mp_intervention_mean(src, 3, (const int64_t[]){1, T, m->cfg.d_model})},
        {"blocks.0.hook_resid_post", mp_intervention_patch(src, (size_t)T * m->cfg.d_model)},
        {"blocks.1.hook_resid_pre", mp_intervention_steer(vec, (size_t)m->cfg.d_model, 2.0f)},
        {"blocks.0.attn.hook_pattern", mp_intervention_scale(0.5f)},
        {"blocks.1.attn.hook_v", mp_intervention_steer(vec, (size_t)m->cfg.d_head, -1.0f)},
        {"blocks.1.attn.hook_pattern", mp_intervention_zero()},
    };
    cases[0].iv.head = 1;
    const int pos[2] = {3, 7}, pos2[3] = {2, 5, 11};
    mp_intervention_set_positions(&cases[3].iv, pos, 2);
    cases[5].iv.head = 1; /* one kv head's Dh values */
    cases[6].iv.head = 3;
    mp_intervention_set_positions(&cases[6].iv, pos2, 3); /* query rows in the first, second and third block of 5 */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float lo[2][12 * 64];
        for (int dev = 0; dev < 2; dev++) {
            to(m, dev ? MP_DEVICE_CUDA : MP_DEVICE_CPU);
            mp_hooks *hs = mp_hooks_new(&m->cfg);
            mp_hooks_add(hs, cases[c].where, mp_intervention_apply, &cases[c].iv);
            mp_forward_params fp = mp_forward_params_default();
            fp.hooks = hs;
            fp.q_block = 5; /* the maps arrive in blocks at row offsets 0, 5, 10 */
            CHECK(mp_model_forward(m, tok, B, T, &fp, lo[dev]) == MP_OK, "%s: %s",
                  mp_intervention_name(cases[c].iv.kind), mp_last_error());
            mp_hooks_free(hs);
        }
        char what[128];
        snprintf(what, sizeof what, "%s at %s", mp_intervention_name(cases[c].iv.kind), cases[c].where);
        near_scaled(what, lo[0], lo[1], (size_t)T * V);
        mp_intervention_free(&cases[c].iv);
    }
    /* two interventions at one point apply in order (scale, then steer: not
     * the same as the other order), and a fault gives the CPU's message */
    {
        float lo2[2][12 * 64], keep[2][12 * 64];
        char msg[2][512];
        for (int dev = 0; dev < 2; dev++) {
            to(m, dev ? MP_DEVICE_CUDA : MP_DEVICE_CPU);
            mp_intervention a = mp_intervention_scale(3.0f), b = mp_intervention_steer(vec, (size_t)m->cfg.d_model, 1.0f);
            mp_hooks *hs = mp_hooks_new(&m->cfg);
            mp_hooks_add(hs, "blocks.0.hook_resid_post", mp_intervention_apply, &a);
            mp_hooks_add(hs, "blocks.0.hook_resid_post", mp_intervention_apply, &b);
            mp_forward_params fp = mp_forward_params_default();
            fp.hooks = hs;
            CHECK(mp_model_forward(m, tok, B, T, &fp, lo2[dev]) == MP_OK, "two interventions: %s", mp_last_error());
            memcpy(keep[dev], lo2[dev], sizeof keep[dev]);
            mp_hooks_free(hs);
            mp_intervention bad = mp_intervention_zero();
            bad.head = 9; /* 4 heads */
            hs = mp_hooks_new(&m->cfg);
            mp_hooks_add(hs, "blocks.1.attn.hook_z", mp_intervention_apply, &bad);
            fp.hooks = hs;
            const mp_status st = mp_model_forward(m, tok, B, T, &fp, lo2[dev]);
            CHECK(st == MP_ERR_HOOK, "head 9 of 4: status %d", (int)st);
            snprintf(msg[dev], sizeof msg[dev], "%s", mp_last_error());
            mp_hooks_free(hs);
        }
        near_scaled("scale then steer at one point", keep[0], keep[1], (size_t)T * V);
        CHECK(strcmp(msg[0], msg[1]) == 0 && strstr(msg[0], "head=9 out of range"), "the fault: cpu '%s', cuda '%s'",
              msg[0], msg[1]);
    }
    to(m, MP_DEVICE_CPU);
}

/* An out-of-memory failure is reported once. The runtime keeps a failed
 * cudaMalloc's error as its last error, which every kernel launcher returns:
 * a backend that did not clear it where it was reported failed the next
 * forward, at its first kernel, with the same "out of memory". On the
 * emulator only (cuda_emu_set_mem_limit, weak: absent from a device build),
 * which can cap the device's memory. */
void cuda_emu_set_mem_limit(size_t bytes) __attribute__((weak));
static void compare_oom(mp_model *m) {
    if (dry || !cuda_emu_set_mem_limit) return;
    const int B = 2, T0 = 8, T = 40, V = m->cfg.vocab;
    int tok[2 * 40];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5 + 1) % V;
    float *lc = malloc((size_t)B * T * V * sizeof(float)), *lg = malloc((size_t)B * T * V * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    to(m, MP_DEVICE_CPU);
    CHECK(mp_model_forward(m, tok, B, T, &fp, lc) == MP_OK, "oom: cpu: %s", mp_last_error());
    to(m, MP_DEVICE_CUDA);
    CHECK(mp_model_forward(m, tok, B, T0, &fp, lg) == MP_OK, "oom: the first forward: %s", mp_last_error());
    cuda_emu_set_mem_limit(1); /* nothing more fits: the larger forward's workspace cannot grow */
    const mp_status st = mp_model_forward(m, tok, B, T, &fp, lg);
    CHECK(st != MP_OK && strstr(mp_last_error(), "out of memory"), "oom: the forward past the memory: %s",
          st == MP_OK ? "succeeded" : mp_last_error());
    cuda_emu_set_mem_limit(0);
    CHECK(mp_model_forward(m, tok, B, T, &fp, lg) == MP_OK, "oom: the same forward with memory again: %s",
          mp_last_error());
    near_scaled("oom: the forward after an out-of-memory failure: logits", lc, lg, (size_t)B * T * V);
    to(m, MP_DEVICE_CPU);
    free(lc);
    free(lg);
}

static int fail_cb(void *user, const mp_hook_info *info, float *data) {
    (void)user, (void)info, (void)data;
    mp_error(MP_ERR_HOOK, "reader refuses");
    return 1;
}

/* Readers at every point beside a writer (a pattern scale in layer 0, a steer
 * at blocks.1.hook_resid_pre, where a reader sits too): every reader sees what
 * the writers made, in the CPU's order, and the logits agree. Then a reader
 * that fails after others are in flight: the forward fails naming its point,
 * and the next forward on the same model is whole. */
static void compare_readers(mp_model *m) {
    const int B = 2, T = 21, V = m->cfg.vocab;
    int tok[42];
    for (int i = 0; i < B * T; i++) tok[i] = (5 * i + 1) % V;
    float vec[64], lo[2][42 * 64];
    for (int i = 0; i < 64; i++) vec[i] = 0.05f * (float)(i % 7) - 0.15f;
    static tu_capture cap[2];
    /* with the automatic bound, and with 1500 floats in flight: the [2, 21, 64]
     * points (2688) go the synchronous way, and a second pattern block
     * (2 x 4 x 8 x 21 = 1344) empties the queue and frees the idle buffers */
    for (int bound = 0; bound <= 1500; bound += 1500) {
        for (int dev = 0; dev < 2; dev++) {
            memset(&cap[dev], 0, sizeof cap[dev]);
            mp_intervention sc = mp_intervention_scale(0.5f);
            mp_intervention st = mp_intervention_steer(vec, (size_t)m->cfg.d_model, 1.5f);
            to(m, dev ? MP_DEVICE_CUDA : MP_DEVICE_CPU);
            if (dev && !dry) CHECK(mp_cuda_reader_floats(m, bound) == MP_OK, "reader floats: %s", mp_last_error());
            mp_hooks *hs = mp_hooks_new(&m->cfg);
            CHECK(mp_hooks_add(hs, "blocks.0.attn.hook_pattern", mp_intervention_apply, &sc) == MP_OK &&
                      mp_hooks_add_reader(hs, "*", tu_capture_cb, &cap[dev]) == MP_OK &&
                      mp_hooks_add(hs, "blocks.1.hook_resid_pre", mp_intervention_apply, &st) == MP_OK,
                  "readers: %s", mp_last_error());
            mp_forward_params fp = mp_forward_params_default();
            fp.hooks = hs;
            fp.q_block = 8;
            CHECK(mp_model_forward(m, tok, B, T, &fp, lo[dev]) == MP_OK, "readers beside writers: %s", mp_last_error());
            mp_hooks_free(hs);
            mp_intervention_free(&sc);
            mp_intervention_free(&st);
        }
        near_scaled(bound ? "readers beside writers, 1500 floats in flight: logits" : "readers beside writers: logits",
                    lo[0], lo[1], (size_t)B * T * V);
        CHECK(cap[0].n == cap[1].n && cap[0].n > 10, "readers: %d vs %d deliveries", cap[0].n, cap[1].n);
        for (int k = 0; k < cap[0].n && k < cap[1].n; k++) {
            char what[160];
            CHECK(strcmp(cap[0].name[k], cap[1].name[k]) == 0 && cap[0].numel[k] == cap[1].numel[k],
                  "readers: delivery %d: %s vs %s", k, cap[0].name[k], cap[1].name[k]);
            snprintf(what, sizeof what, "readers beside writers (bound %d): %s", bound, cap[0].name[k]);
            near_scaled(what, cap[0].buf[k], cap[1].buf[k], cap[0].numel[k]);
        }
        tu_capture_free(&cap[0]);
        tu_capture_free(&cap[1]);
    }
    if (!dry) CHECK(mp_cuda_reader_floats(m, 0) == MP_OK, "reader floats: %s", mp_last_error());
    /* a failing reader: blocks.1.hook_resid_post, with the earlier points' readers in flight */
    static tu_capture c2;
    memset(&c2, 0, sizeof c2);
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    mp_hooks_add_reader(hs, "*", tu_capture_cb, &c2);
    mp_hooks_add_reader(hs, "blocks.1.hook_resid_post", fail_cb, NULL);
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    const mp_status st = mp_model_forward(m, tok, B, T, &fp, lo[1]);
    CHECK(st == MP_ERR_HOOK && strstr(mp_last_error(), "blocks.1.hook_resid_post") &&
              strstr(mp_last_error(), "reader refuses"),
          "a failing reader: status %d, %s", (int)st, mp_last_error());
    mp_hooks_free(hs);
    tu_capture_free(&c2);
    fp.hooks = NULL;
    float l3[42 * 64];
    CHECK(mp_model_forward(m, tok, B, T, &fp, l3) == MP_OK, "after the failing reader: %s", mp_last_error());
    to(m, MP_DEVICE_CPU);
    CHECK(mp_model_forward(m, tok, B, T, &fp, lo[0]) == MP_OK, "cpu: %s", mp_last_error());
    near_scaled("the forward after a failing reader: logits", lo[0], l3, (size_t)B * T * V);
}

typedef struct {
    const char *label;
    mp_pos_kind pos;
    int pos_no_temp;
    mp_rope_scaling scaling;
    mp_norm_kind norm;
    mp_mlp_kind mlp;
    int gelu_tanh, bias;
} variant;

/* the tests' model shape: d 64, 2 layers of 4 query and 2 kv heads of 16, d_mlp 96, vocab 50, ctx positions */
static mp_config small_config(int ctx) {
    mp_config c = mp_config_default();
    c.d_model = 64;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.d_head = 16;
    c.d_mlp = 96;
    c.vocab = 50;
    c.ctx = ctx;
    return c;
}

int main(int argc, char **argv) {
    dry = argc > 1 && strcmp(argv[1], "--dry") == 0;
    if (!dry && mp_cuda_available() != MP_OK) {
        printf("SKIP: %s\n", mp_last_error());
        return 77;
    }
    const variant vs[] = {
        {"rope swiglu rms", MP_POS_ROPE, 0, MP_ROPE_SCALING_NONE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 0},
        {"half_rope gelu layer", MP_POS_HALF_ROPE, 0, MP_ROPE_SCALING_NONE, MP_NORM_LAYER, MP_MLP_GELU, 0, 1},
        {"high_freq gelu_tanh", MP_POS_HIGH_FREQ, 0, MP_ROPE_SCALING_NONE, MP_NORM_RMS, MP_MLP_GELU, 1, 0},
        {"rope_id temperature", MP_POS_ROPE_ID, 0, MP_ROPE_SCALING_NONE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 0},
        {"rope_id no temperature", MP_POS_ROPE_ID, 1, MP_ROPE_SCALING_NONE, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 0},
        {"none attention-only", MP_POS_NONE, 0, MP_ROPE_SCALING_NONE, MP_NORM_RMS, MP_MLP_NONE, 0, 0},
        {"learned gpt2-like", MP_POS_LEARNED, 0, MP_ROPE_SCALING_NONE, MP_NORM_LAYER, MP_MLP_GELU, 1, 1},
        {"rope PI", MP_POS_ROPE, 0, MP_ROPE_SCALING_PI, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 0},
        {"rope NTK", MP_POS_ROPE, 0, MP_ROPE_SCALING_NTK, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 0},
        {"rope YaRN", MP_POS_ROPE, 0, MP_ROPE_SCALING_YARN, MP_NORM_RMS, MP_MLP_SWIGLU, 0, 1},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        mp_config c = small_config(48);
        c.d_mlp = vs[i].mlp == MP_MLP_NONE ? 0 : 96;
        c.pos = vs[i].pos;
        c.pos_no_temp = vs[i].pos_no_temp;
        c.norm = vs[i].norm;
        c.mlp = vs[i].mlp;
        c.gelu_tanh = vs[i].gelu_tanh;
        c.qkv_bias = c.linear_bias = vs[i].bias;
        c.tied = !vs[i].bias;
        mp_model *m = NULL;
        if (mp_model_new_random(&m, &c, 11 + i, 0.2f) != MP_OK) {
            CHECK(0, "%s: %s", vs[i].label, mp_last_error());
            continue;
        }
        if (vs[i].scaling != MP_ROPE_SCALING_NONE) {
            mp_rope_scaling_params rs = mp_rope_scaling_params_default();
            rs.type = vs[i].scaling;
            rs.factor = 4.0f;
            rs.original_ctx = 16;
            CHECK(mp_model_set_rope_scaling(m, &rs) == MP_OK, "%s: %s", vs[i].label, mp_last_error());
        }
        compare_model(m, vs[i].label, 2, 37);
        compare_decode(m, vs[i].label);
        if (i == 0 || i == 6) { /* bf16: a llama-like and a gpt2-like model */
            char lab[96];
            snprintf(lab, sizeof lab, "%s bf16", vs[i].label);
            TOL = TOL_BF16;
            PREC = MP_PRECISION_BF16;
            compare_model(m, lab, 2, 37);
            compare_decode(m, lab);
            TOL = TOL_FP32;
            PREC = MP_PRECISION_FP32;
        }
        if (i == 0) {
            compare_generate(m, vs[i].label);
            compare_interventions(m);
            compare_readers(m);
            compare_oom(m);
        }
        mp_model_free(m);
    }
    /* the q/k norm: per head with q/k/v biases (Qwen3), over the whole projection (OLMo 2); random norm weights */
    for (int i = 0; i < 2; i++) {
        mp_config c = small_config(48);
        c.qk_norm = i == 0 ? MP_QK_NORM_HEAD : MP_QK_NORM_FULL;
        c.qkv_bias = i == 0;
        mp_model *m = NULL;
        if (mp_model_new_random(&m, &c, 71 + i, 0.2f) != MP_OK) {
            CHECK(0, "qk_norm: %s", mp_last_error());
            continue;
        }
        const size_t nq = (size_t)c.n_layer * c.d_head * (i ? c.n_head : 1);
        const size_t nk = (size_t)c.n_layer * c.d_head * (i ? c.n_kv_head : 1);
        for (size_t j = 0; j < nq; j++) m->p.q_norm[j] = 0.5f + 0.07f * (float)(j % 19);
        for (size_t j = 0; j < nk; j++) m->p.k_norm[j] = 1.6f - 0.05f * (float)(j % 23);
        char lab[64];
        snprintf(lab, sizeof lab, "qk_norm %s", mp_qk_norm_name(c.qk_norm));
        compare_model(m, lab, 2, 37);
        compare_decode(m, lab);
        if (i == 0) {
            snprintf(lab, sizeof lab, "qk_norm %s bf16", mp_qk_norm_name(c.qk_norm));
            TOL = TOL_BF16;
            PREC = MP_PRECISION_BF16;
            compare_model(m, lab, 2, 37);
            TOL = TOL_FP32;
            PREC = MP_PRECISION_FP32;
        }
        mp_model_free(m);
    }
    { /* GPT-NeoX's parallel block (parallel_attn: attention and MLP from one residual), partial RoPE */
        mp_config c = small_config(48);
        c.pos = MP_POS_HALF_ROPE;
        c.rope_dims = 4;
        c.norm = MP_NORM_LAYER;
        c.mlp = MP_MLP_GELU;
        c.qkv_bias = c.linear_bias = 1;
        c.tied = 0;
        c.parallel_attn = 1;
        mp_model *m = NULL;
        CHECK(mp_model_new_random(&m, &c, 77, 0.2f) == MP_OK, "parallel model: %s", mp_last_error());
        if (m) {
            compare_model(m, "parallel neox-like", 2, 37);
            compare_decode(m, "parallel neox-like");
        }
        mp_model_free(m);
    }
    { /* a long KV cache (rope, swiglu, RMSNorm) */
        mp_config c = small_config(320);
        c.pos = MP_POS_ROPE;
        c.norm = MP_NORM_RMS;
        c.mlp = MP_MLP_SWIGLU;
        c.tied = 1;
        mp_model *m = NULL;
        CHECK(mp_model_new_random(&m, &c, 99, 0.2f) == MP_OK, "long cache model: %s", mp_last_error());
        if (m) compare_long_cache(m, "rope swiglu rms");
        mp_model_free(m);
    }
    /* the shared llama2.c model (present in the project's checkout) */
    FILE *f = fopen(MP_SHARED_DIR "/models/aidreams260K.bin", "rb");
    if (f) {
        fclose(f);
        mp_model *m = NULL;
        CHECK(mp_model_load_llama2c(&m, MP_SHARED_DIR "/models/aidreams260K.bin") == MP_OK, "%s", mp_last_error());
        if (m) {
            compare_model(m, "aidreams260K", 1, 48);
            compare_decode(m, "aidreams260K");
            compare_generate(m, "aidreams260K");
            mp_model_free(m);
        }
    } else {
        printf("note: %s/models/aidreams260K.bin absent: shared model not compared\n", MP_SHARED_DIR);
    }
    return tu_finish("test_gpu");
}
