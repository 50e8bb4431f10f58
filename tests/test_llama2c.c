/* test_llama2c.c — llama2.c checkpoint loading and saving (v0 and v1), config
 * validation and mp_model_new, and the fault cases: every malformed file must
 * fail with the right mp_status and a message naming the file, without a crash.
 * References: tests/data/ref_*.bin written by tests/tools/make_ref_models.py
 * (numpy, independent of this code) and ../shared/models/aidreams260K.bin. */
#include "formats.h"
#include "model.h"
#include "testutil.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* (name, pointer, size in floats) of each parameter array of a model */
static int param_list(const mp_model *m, const char *names[12], const float *ptr[12], size_t n[12]) {
    const mp_config *c = &m->cfg;
    size_t D = c->d_model, L = c->n_layer, M = c->d_mlp, V = c->vocab;
    size_t q = (size_t)c->n_head * c->d_head, kv = (size_t)c->n_kv_head * c->d_head;
    const char *nm[12] = {"embed", "ln1_w", "wq", "wk", "wv", "wo", "ln2_w", "w1", "w3", "w2", "lnf_w", "unembed"};
    const float *p[12] = {m->p.embed, m->p.ln1_w, m->p.wq, m->p.wk, m->p.wv, m->p.wo, m->p.ln2_w,
                          m->p.w1, m->p.w3, m->p.w2, m->p.lnf_w, m->p.unembed};
    size_t sz[12] = {V * D, L * D, L * q * D, L * kv * D, L * kv * D, L * D * q, L * D, L * M * D,
                     L * M * D, L * D * M, D, V * D};
    for (int i = 0; i < 12; i++) { names[i] = nm[i]; ptr[i] = p[i]; n[i] = sz[i]; }
    return 12;
}

static void check_same(const mp_model *a, const mp_model *b, const char *what) {
    CHECK(memcmp(&a->cfg, &b->cfg, sizeof a->cfg) == 0, "%s: configs differ", what);
    const char *na[12]; const float *pa[12], *pb[12]; size_t n[12], nb[12];
    param_list(a, na, pa, n);
    param_list(b, na, pb, nb);
    for (int i = 0; i < 12; i++) {
        CHECK(pa[i] && pb[i], "%s: %s is NULL", what, na[i]);
        if (pa[i] && pb[i] && n[i] == nb[i])
            CHECK(memcmp(pa[i], pb[i], n[i] * sizeof(float)) == 0, "%s: %s differs", what, na[i]);
    }
}

static char *tpath(const char *name) {
    static char buf[8][512];
    static int k = 0;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Expects load of `bytes` to fail with status `st` and a message containing
 * the file name and `needle`. */
static void expect_load_fail(const char *name, const void *bytes, size_t n, mp_status st, const char *needle) {
    const char *path = tpath(name);
    write_all(path, bytes, n);
    mp_model *m = (mp_model *)1;
    mp_status s = mp_model_load_llama2c(&m, path);
    CHECK(s == st, "%s: status %s, expected %s (%s)", name, mp_status_name(s), mp_status_name(st), mp_last_error());
    CHECK(m == NULL, "%s: *out not NULL on failure", name);
    CHECK(strstr(mp_last_error(), path) != NULL, "%s: message lacks the path: %s", name, mp_last_error());
    CHECK(!needle || strstr(mp_last_error(), needle), "%s: message lacks '%s': %s", name, needle, mp_last_error());
    if (s == MP_OK) mp_model_free(m);
    unlink(path);
}

/* the v0 header of `base` with field i replaced */
static void header_case(const unsigned char *base, size_t n, const char *name, int field, int32_t value,
                        const char *needle) {
    unsigned char *b = malloc(n);
    memcpy(b, base, n);
    memcpy(b + 4 * field, &value, 4);
    expect_load_fail(name, b, n, MP_ERR_FORMAT, needle);
    free(b);
}

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int k = 0;
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) k++;
    closedir(d);
    return k;
}

static void test_config(void) {
    mp_config c = mp_config_default();
    CHECK(c.rope_theta == 10000.0f && c.norm_eps == 1e-5f && c.tied == 1 && c.norm == MP_NORM_RMS &&
          c.mlp == MP_MLP_SWIGLU && c.pos == MP_POS_ROPE, "defaults");
    CHECK(mp_config_validate(&c, "x") == MP_ERR_FORMAT, "zero dims must fail");
    c.d_model = 48; c.n_layer = 2; c.n_head = 6; c.n_kv_head = 4; c.d_head = 8; c.d_mlp = 96;
    c.vocab = 64; c.ctx = 32;
    CHECK(mp_config_validate(&c, "model.bin") == MP_ERR_FORMAT, "6 %% 4");
    CHECK(strcmp(mp_last_error(), "model.bin: n_head (6) is not divisible by n_kv_head (4)") == 0,
          "message: %s", mp_last_error());
    c.n_kv_head = 3;
    CHECK(mp_config_validate(&c, "model.bin") == MP_OK, "valid: %s", mp_last_error());
    c.d_head = 7;
    CHECK(mp_config_validate(&c, "m") == MP_ERR_FORMAT && strstr(mp_last_error(), "even"), "odd d_head with RoPE");
    c.pos = MP_POS_NONE;
    CHECK(mp_config_validate(&c, "m") == MP_OK, "odd d_head without RoPE: %s", mp_last_error());
    c.pos = MP_POS_ROPE; c.d_head = 8;
    c.n_layer = 5000;
    CHECK(mp_config_validate(&c, "m") == MP_ERR_FORMAT && strstr(mp_last_error(), "n_layer"), "n_layer bound");
    c.n_layer = 2; c.vocab = -1;
    CHECK(mp_config_validate(&c, "m") == MP_ERR_FORMAT && strstr(mp_last_error(), "vocab (-1)"), "negative vocab");
    c.vocab = 64; c.rope_theta = -1;
    CHECK(mp_config_validate(&c, "m") == MP_ERR_FORMAT, "negative theta");
    c.rope_theta = 10000; c.ctx = 1 << 24; c.n_head = 1 << 16; c.n_kv_head = 1;
    CHECK(mp_config_validate(&c, "m") == MP_ERR_FORMAT && strstr(mp_last_error(), "overflow"),
          "H*T*T overflow: %s", mp_last_error());

    /* parameter count against a hand count: D 48, L 2, H 6, K 3, Dh 8, M 96, V 64 */
    c = mp_config_default();
    c.d_model = 48; c.n_layer = 2; c.n_head = 6; c.n_kv_head = 3; c.d_head = 8; c.d_mlp = 96;
    c.vocab = 64; c.ctx = 32;
    size_t per_layer = 48 * 2 + 48 * 48 * 2 + 24 * 48 * 2 + 3 * 96 * 48;
    CHECK(mp_config_n_params(&c) == 64 * 48 + 2 * per_layer + 48, "n_params tied %zu", mp_config_n_params(&c));
    c.tied = 0;
    CHECK(mp_config_n_params(&c) == 2 * 64 * 48 + 2 * per_layer + 48, "n_params untied");

    mp_model *m = NULL;
    CHECK(mp_model_new(&m, &c) == MP_OK, "alloc: %s", mp_last_error());
    if (m) {
        const char *nm[12]; const float *p[12]; size_t n[12];
        param_list(m, nm, p, n);
        const float *at = m->owned;
        for (int i = 0; i < 12; i++) {
            CHECK(p[i] == at, "untied layout: %s at offset %td", nm[i], p[i] - m->owned);
            at += n[i];
        }
        double s = 0;
        for (size_t i = 0; i < mp_config_n_params(&c); i++) s += fabs(m->owned[i]);
        CHECK(s == 0, "alloc must zero the parameters");
        CHECK(m->map == NULL, "not mapped");
        mp_model_free(m);
    }
    c.tied = 1;
    m = NULL;
    CHECK(mp_model_new(&m, &c) == MP_OK, "alloc tied");
    if (m) CHECK(m->p.unembed == m->p.embed, "tied: unembed aliases embed");
    mp_model_free(m);
    c.n_kv_head = 4;
    m = (mp_model *)1;
    CHECK(mp_model_new(&m, &c) == MP_ERR_FORMAT && m == NULL, "alloc validates");
    mp_model_free(NULL);
}

static void test_load_save(void) {
    mp_model *v0 = NULL, *v1 = NULL, *r = NULL;
    CHECK(mp_model_load_llama2c(&v0, tu_data("ref_gqa_untied.bin")) == MP_OK, "%s", mp_last_error());
    CHECK(mp_model_load_llama2c(&v1, tu_data("ref_gqa_untied_v1.bin")) == MP_OK, "%s", mp_last_error());
    if (!v0 || !v1) goto done;
    const mp_config *c = &v0->cfg;
    CHECK(c->d_model == 48 && c->n_layer == 2 && c->n_head == 4 && c->n_kv_head == 2 && c->d_head == 12 &&
          c->d_mlp == 96 && c->vocab == 64 && c->ctx == 32 && c->tied == 0, "gqa config");
    CHECK(c->rope_theta == 10000.0f && c->norm_eps == 1e-5f && c->norm == MP_NORM_RMS &&
          c->mlp == MP_MLP_SWIGLU && c->pos == MP_POS_ROPE, "llama2.c fixed settings");
    CHECK(strcmp(v0->format, "llama2c-v0") == 0 && strcmp(v1->format, "llama2c-v1") == 0, "formats");
    CHECK(strcmp(v0->source, tu_data("ref_gqa_untied.bin")) == 0, "source %s", v0->source);
    CHECK(v0->p.unembed != v0->p.embed, "untied classifier is its own array");
    /* the numpy generator draws norms as 1 + N(0, 0.1) and the rest N(0, 0.2) */
    CHECK_NEAR(v0->p.lnf_w[0], 1.0, 0.5, "lnf_w is a norm weight");
    check_same(v0, v1, "v0 vs v1");

    /* save -> reload -> identical; and the files equal the numpy-written ones */
    CHECK(mp_model_save_llama2c(v0, tpath("s0.bin"), 0) == MP_OK, "save v0: %s", mp_last_error());
    CHECK(mp_model_save_llama2c(v0, tpath("s1.bin"), 1) == MP_OK, "save v1: %s", mp_last_error());
    CHECK(same_file(tpath("s1.bin"), tu_data("ref_gqa_untied_v1.bin")), "v1 bytes equal export layout");
    CHECK(same_file(tpath("s0.bin"), tu_data("ref_gqa_untied.bin")), "v0 bytes (with freq_cis) equal");
    CHECK(mp_model_load_llama2c(&r, tpath("s0.bin")) == MP_OK, "%s", mp_last_error());
    if (r) check_same(v0, r, "save v0 + reload");
    mp_model_free(r);
    r = NULL;
    CHECK(mp_model_load_llama2c(&r, tpath("s1.bin")) == MP_OK, "%s", mp_last_error());
    if (r) check_same(v0, r, "save v1 + reload");
    mp_model_free(r);
    r = NULL;
    struct stat sb;
    CHECK(stat(tpath("s0.bin"), &sb) == 0 && (sb.st_mode & 0777) == 0644, "saved mode 0644");
    unlink(tpath("s0.bin"));
    unlink(tpath("s1.bin"));

    /* tied model: v0 -> v1 -> reload */
    CHECK(mp_model_load_llama2c(&r, tu_data("ref_tied.bin")) == MP_OK, "%s", mp_last_error());
    if (r) {
        CHECK(r->cfg.tied == 1 && r->p.unembed == r->p.embed && r->cfg.d_model == 32 && r->cfg.vocab == 40 &&
              r->cfg.ctx == 24 && r->cfg.d_head == 16, "tied config");
        CHECK(mp_model_save_llama2c(r, tpath("t1.bin"), 1) == MP_OK, "save tied v1: %s", mp_last_error());
        mp_model *t1 = NULL;
        CHECK(mp_model_load_llama2c(&t1, tpath("t1.bin")) == MP_OK, "%s", mp_last_error());
        if (t1) check_same(r, t1, "tied v1 round trip");
        mp_model_free(t1);
        CHECK(mp_model_save_llama2c(r, tpath("t0.bin"), 0) == MP_OK, "save tied v0");
        CHECK(same_file(tpath("t0.bin"), tu_data("ref_tied.bin")), "tied v0 bytes equal");
        unlink(tpath("t1.bin"));
        unlink(tpath("t0.bin"));
    }
    mp_model_free(r);

    /* an allocated model saves too */
    mp_model *a = NULL;
    mp_config ac = v0->cfg;
    CHECK(mp_model_new(&a, &ac) == MP_OK, "alloc");
    if (a) {
        memcpy(a->owned, v0->p.embed, 100 * sizeof(float));
        CHECK(mp_model_save_llama2c(a, tpath("a.bin"), 1) == MP_OK, "save alloc'ed: %s", mp_last_error());
        mp_model *b = NULL;
        CHECK(mp_model_load_llama2c(&b, tpath("a.bin")) == MP_OK, "%s", mp_last_error());
        if (b) check_same(a, b, "alloc'ed round trip");
        mp_model_free(b);
        unlink(tpath("a.bin"));
        /* configs llama2.c cannot express are refused */
        a->cfg.rope_theta = 500000.0f;
        CHECK(mp_model_save_llama2c(a, tpath("a.bin"), 1) == MP_ERR_ARG && access(tpath("a.bin"), F_OK) != 0,
              "theta != 10000 refused");
        a->cfg.rope_theta = 10000.0f;
        CHECK(mp_model_save_llama2c(a, tpath("a.bin"), 7) == MP_ERR_ARG, "version 7 refused");
    }
    mp_model_free(a);

    /* save failures: nonexistent directory, non-writable directory, a write
     * that fails midway (file size limit): MP_ERR_IO, nothing left behind */
    const char *nodir = tpath("no/such/dir/m.bin");
    CHECK(mp_model_save_llama2c(v0, nodir, 0) == MP_ERR_IO, "nonexistent dir: %s", mp_last_error());
    CHECK(strstr(mp_last_error(), nodir) != NULL, "message names the path: %s", mp_last_error());
    mkdir(tpath("ro"), 0555);
    if (access(tpath("ro"), W_OK) != 0) {   /* root can write anyway */
        CHECK(mp_model_save_llama2c(v0, tpath("ro/m.bin"), 1) == MP_ERR_IO, "read-only dir");
        CHECK(dir_entries(tpath("ro")) == 0, "read-only dir stays empty");
    }
    rmdir(tpath("ro"));
    int before = dir_entries(tmpdir);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        mp_status s = mp_model_save_llama2c(v0, tpath("big.bin"), 0);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(s == MP_ERR_IO, "write beyond RLIMIT_FSIZE: %s", mp_status_name(s));
        CHECK(strstr(mp_last_error(), tpath("big.bin")) != NULL, "names the file: %s", mp_last_error());
        CHECK(dir_entries(tmpdir) == before, "temp file removed after a failed write");
    }
done:
    mp_model_free(v0);
    mp_model_free(v1);
}

static void test_faults(void) {
    size_t n;
    unsigned char *base = read_all(tu_data("ref_tied.bin"), &n);
    CHECK(base && n > 256, "read ref_tied.bin");
    if (!base) return;
    expect_load_fail("empty.bin", base, 0, MP_ERR_FORMAT, "truncated header");
    expect_load_fail("hdr.bin", base, 20, MP_ERR_FORMAT, "truncated header");
    expect_load_fail("short1.bin", base, n - 1, MP_ERR_FORMAT, "truncated: expected");
    expect_load_fail("half.bin", base, n / 2, MP_ERR_FORMAT, "truncated");
    unsigned char *big = calloc(n + 8, 1);
    memcpy(big, base, n);
    expect_load_fail("trailing.bin", big, n + 8, MP_ERR_FORMAT, "8 trailing bytes");
    expect_load_fail("trailing1.bin", big, n + 1, MP_ERR_FORMAT, "1 trailing bytes");
    free(big);

    header_case(base, n, "zero_dim.bin", 0, 0, "dim (0) must be positive");
    header_case(base, n, "neg_layers.bin", 2, -3, "n_layers (-3)");
    header_case(base, n, "zero_hidden.bin", 1, 0, "hidden_dim (0)");
    header_case(base, n, "zero_seq.bin", 6, 0, "seq_len (0)");
    header_case(base, n, "zero_vocab.bin", 5, 0, "vocab_size (0)");
    header_case(base, n, "min_vocab.bin", 5, INT32_MIN, "vocab_size");
    header_case(base, n, "huge_dim.bin", 0, 1 << 30, "too large");
    header_case(base, n, "huge_layers.bin", 2, 1 << 30, "too large");
    header_case(base, n, "huge_vocab.bin", 5, 1 << 30, "too large");
    header_case(base, n, "heads_dim.bin", 3, 5, "not divisible by n_heads");
    header_case(base, n, "kv.bin", 4, 3, "n_head (2) is not divisible by n_kv_head (3)");
    header_case(base, n, "kv_big.bin", 4, 4, "not divisible");
    header_case(base, n, "odd_dh.bin", 3, 32, "even");   /* d_head 1 */
    header_case(base, n, "bigger.bin", 1, 65, "truncated: expected");
    {   /* every dim at its bound: the attention buffer H*T*T overflows size_t */
        unsigned char *b = malloc(n);
        memcpy(b, base, n);
        int32_t h[7] = {1 << 20, 1 << 20, 4096, 1 << 16, 1 << 16, 1 << 24, 1 << 24};
        memcpy(b, h, sizeof h);
        expect_load_fail("overflow.bin", b, n, MP_ERR_FORMAT, "overflow");
        free(b);
    }

    /* v1: magic + version; header of ref_gqa_untied_v1.bin */
    size_t n1;
    unsigned char *v1 = read_all(tu_data("ref_gqa_untied_v1.bin"), &n1);
    CHECK(v1 && n1 > 256, "read v1");
    if (v1) {
        expect_load_fail("v1_hdr.bin", v1, 100, MP_ERR_FORMAT, "truncated header");
        expect_load_fail("v1_short.bin", v1, n1 - 1, MP_ERR_FORMAT, "truncated: expected");
        int32_t seven = 7;
        memcpy(v1 + 4, &seven, 4);
        expect_load_fail("v1_ver7.bin", v1, n1, MP_ERR_FORMAT, "version 7");
        int32_t one = 1;
        memcpy(v1 + 4, &one, 4);
        v1[36] = 2;
        expect_load_fail("v1_flag.bin", v1, n1, MP_ERR_FORMAT, "shared_classifier");
        v1[36] = 0;
        v1[0] ^= 0x01;   /* "ak43": not the magic, read as a v0 header with an absurd dim */
        expect_load_fail("v1_magic.bin", v1, n1, MP_ERR_FORMAT, "dim");
        v1[0] ^= 0x01;
        int32_t neg = -64;
        memcpy(v1 + 8 + 4 * 5, &neg, 4);
        expect_load_fail("v1_negvocab.bin", v1, n1, MP_ERR_FORMAT, "vocab_size (-64)");
    }
    free(v1);
    {   /* garbage */
        unsigned char g[4096];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof g; i++) { x = x * 1103515245u + 12345u; g[i] = (unsigned char)(x >> 16); }
        expect_load_fail("garbage.bin", g, sizeof g, MP_ERR_FORMAT, NULL);
    }

    mp_model *m = (mp_model *)1;
    const char *missing = tpath("missing.bin");
    CHECK(mp_model_load_llama2c(&m, missing) == MP_ERR_IO && m == NULL, "missing file");
    CHECK(strstr(mp_last_error(), missing) != NULL, "message names it: %s", mp_last_error());
    m = (mp_model *)1;
    CHECK(mp_model_load_llama2c(&m, tmpdir) == MP_ERR_IO && m == NULL, "a directory");
    CHECK(strstr(mp_last_error(), tmpdir) != NULL, "message names it: %s", mp_last_error());
    free(base);
}

static void test_aidreams(void) {
    const char *path = tu_shared("models/aidreams260K.bin");   /* exits 77 (SKIP) when absent */
    mp_model *m = NULL;
    CHECK(mp_model_load_llama2c(&m, path) == MP_OK, "%s", mp_last_error());
    if (!m) return;
    const mp_config *c = &m->cfg;
    CHECK(c->d_model == 64 && c->n_layer == 4 && c->n_head == 4 && c->n_kv_head == 4 && c->d_head == 16 &&
          c->d_mlp == 172 && c->vocab == 512 && c->ctx == 128 && c->tied == 1, "aidreams config");
    CHECK(m->p.unembed == m->p.embed && strcmp(m->format, "llama2c-v0") == 0, "tied, v0");
    CHECK(m->map_len == 932124, "map_len %zu", m->map_len);
    /* round trip through v1 */
    CHECK(mp_model_save_llama2c(m, tpath("aid1.bin"), 1) == MP_OK, "%s", mp_last_error());
    mp_model *r = NULL;
    CHECK(mp_model_load_llama2c(&r, tpath("aid1.bin")) == MP_OK, "%s", mp_last_error());
    if (r) check_same(m, r, "aidreams v1 round trip");
    mp_model_free(r);
    unlink(tpath("aid1.bin"));
    mp_model_free(m);
}

static void remove_tmpdir(void) { rmdir(tmpdir); }   /* also on a SKIP exit */

/* No argument: the self-contained checks. "shared": the real checkpoint in
 * ../shared (SKIP, exit 77, when absent), registered as a separate ctest test. */
int main(int argc, char **argv) {
    mp_init();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_llama2c_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    atexit(remove_tmpdir);
    if (argc > 1 && strcmp(argv[1], "shared") == 0) {
        test_aidreams();
    } else {
        test_config();
        test_load_save();
        test_faults();
    }
    CHECK(dir_entries(tmpdir) == 0, "temp dir left clean");
    return tu_finish(argc > 1 ? "test_llama2c shared" : "test_llama2c");
}
