/* llama2c.c — Karpathy's llama2.c checkpoints: legacy v0 (7-int header, negative
 * vocab = untied classifier, freq_cis tables) and v1 ("ak42" magic, 256-byte
 * header, export.py's version1_export order). Loading memory-maps the file and
 * points mp_params into it after validating every header field and the exact
 * file size; saving writes either version atomically (mp_out: temp file + rename). */
#include "formats.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define L2C_MAGIC 0x616b3432u   /* "ak42" */
#define L2C_V0_HEADER 28        /* 7 x int32 */
#define L2C_V1_HEADER 256

/* One named array of the file, in file order. */
typedef struct { float **dst; size_t n; } l2c_array;

/* The arrays of version `v` in file order (freq_cis for v0 as a NULL
 * destination); returns their count. Sizes in floats, overflow-checked by
 * mp_config_validate (which bounds every product below). */
static int l2c_layout(const mp_config *c, mp_params *p, int v, l2c_array a[16]) {
    size_t D = (size_t)c->d_model, L = (size_t)c->n_layer, M = (size_t)c->d_mlp;
    size_t V = (size_t)c->vocab, q = (size_t)c->n_head * (size_t)c->d_head;
    size_t kv = (size_t)c->n_kv_head * (size_t)c->d_head;
    l2c_array embed = {&p->embed, V * D}, ln1 = {&p->ln1_w, L * D}, ln2 = {&p->ln2_w, L * D},
              lnf = {&p->lnf_w, D}, wq = {&p->wq, L * q * D}, wk = {&p->wk, L * kv * D},
              wv = {&p->wv, L * kv * D}, wo = {&p->wo, L * D * q}, w1 = {&p->w1, L * M * D},
              w2 = {&p->w2, L * D * M}, w3 = {&p->w3, L * M * D}, cls = {&p->unembed, V * D},
              freq = {NULL, (size_t)c->ctx * (size_t)c->d_head};   /* [ctx, Dh/2] x 2 */
    int k = 0;
    if (v == 0) {
        l2c_array order[] = {embed, ln1, wq, wk, wv, wo, ln2, w1, w2, w3, lnf, freq};
        for (size_t i = 0; i < sizeof order / sizeof *order; i++) a[k++] = order[i];
    } else {
        l2c_array order[] = {ln1, ln2, lnf, embed, wq, wk, wv, wo, w1, w2, w3};
        for (size_t i = 0; i < sizeof order / sizeof *order; i++) a[k++] = order[i];
    }
    if (!c->tied) a[k++] = cls;
    return k;
}

static int32_t rd_i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* What a file that failed as a llama2.c header looks like, when it plainly is
 * something else: text (a script, JSON, a tokenizer list), a safetensors file
 * given instead of its folder, or an HDF5 file without its signature at 0.
 * Fills `seen` and returns 1, or 0 when it may be a damaged llama2.c file. */
static int not_a_model(const unsigned char *h, size_t n, char *seen, size_t cap) {
    if (n >= 9 && h[8] == '{' && rd_u64le(h) > 1 && rd_u64le(h) < ((uint64_t)1 << 32)) {
        snprintf(seen, cap, "a safetensors file: pass the folder that holds it and its config.json");
        return 1;
    }
    size_t text = 0;
    for (size_t i = 0; i < n; i++)
        if ((h[i] >= 0x20 && h[i] < 0x7f) || h[i] == '\n' || h[i] == '\r' || h[i] == '\t' || h[i] >= 0x80) text++;
    if (n < 2 || text < n) return 0;
    char start[40];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 24; i++) start[k++] = h[i] >= 0x20 && h[i] < 0x7f ? (char)h[i] : ' ';
    start[k] = '\0';
    snprintf(seen, cap, "it is text, starting \"%s\"", start);
    return 1;
}

/* Header -> config, with the checks that must precede any division. */
static mp_status parse_header(const unsigned char *h, size_t size, const char *path,
                              mp_config *c, int *version, size_t *header) {
    const char *fields[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                             "vocab_size", "seq_len"};
    int64_t v[7];
    int tied;
    uint32_t magic;
    if (size < L2C_V0_HEADER)
        return mp_error(MP_ERR_FORMAT, "%s: truncated header: file has %zu bytes, a llama2.c "
                        "header needs at least %d", path, size, L2C_V0_HEADER);
    memcpy(&magic, h, 4);
    if (magic == L2C_MAGIC) {
        if (size < L2C_V1_HEADER)
            return mp_error(MP_ERR_FORMAT, "%s: truncated header: file has %zu bytes, the v1 "
                            "header needs %d", path, size, L2C_V1_HEADER);
        int32_t ver = rd_i32(h + 4);
        if (ver != 1)
            return mp_error(MP_ERR_FORMAT, "%s: unsupported llama2.c version %d (only 0 and 1 "
                            "hold float32 weights)", path, (int)ver);
        for (int i = 0; i < 7; i++) v[i] = rd_i32(h + 8 + 4 * i);
        if (h[36] > 1)
            return mp_error(MP_ERR_FORMAT, "%s: shared_classifier flag is %d (must be 0 or 1)",
                            path, h[36]);
        tied = h[36];
        *version = 1;
        *header = L2C_V1_HEADER;
    } else {
        for (int i = 0; i < 7; i++) v[i] = rd_i32(h + 4 * i);
        tied = v[5] > 0;
        v[5] = v[5] < 0 ? -v[5] : v[5];   /* negative vocab: untied classifier */
        *version = 0;
        *header = L2C_V0_HEADER;
    }
    for (int i = 0; i < 7; i++)
        if (v[i] <= 0)
            return mp_error(MP_ERR_FORMAT, "%s: %s (%lld) must be positive%s", path, fields[i],
                            (long long)v[i], *version == 0 ? " (or not a llama2.c checkpoint)" : "");
    if (v[5] > INT32_MAX)
        return mp_error(MP_ERR_FORMAT, "%s: vocab_size (%lld) is out of range", path, (long long)v[5]);
    if (v[0] % v[3] != 0)
        return mp_error(MP_ERR_FORMAT, "%s: dim (%lld) is not divisible by n_heads (%lld)",
                        path, (long long)v[0], (long long)v[3]);
    *c = mp_config_default();
    c->d_model = (int)v[0];
    c->d_mlp = (int)v[1];
    c->n_layer = (int)v[2];
    c->n_head = (int)v[3];
    c->n_kv_head = (int)v[4];
    c->vocab = (int)v[5];
    c->ctx = (int)v[6];
    c->d_head = (int)(v[0] / v[3]);
    c->tied = tied;
    return mp_config_validate(c, path);
}

/* llama2.c files below this size are read into memory, larger ones mapped. */
#define L2C_COPY_BELOW ((size_t)64 << 20)

mp_status mp_model_load_llama2c(mp_model **out, const char *path) {
    mp_status st = MP_OK;
    mp_model *m = NULL;
    int fd = -1, version = 0;
    struct stat sb;
    size_t size, header = 0, expect;
    mp_config cfg;
    l2c_array arr[16];
    *out = NULL;

    if ((st = mp_check_regular_file(path)) != MP_OK) return st; /* a FIFO would block the open */
    if ((fd = open(path, O_RDONLY)) < 0)
        return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = mp_error(MP_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    size = (size_t)sb.st_size;
    unsigned char h[L2C_V1_HEADER];
    size_t hn = size < sizeof h ? size : sizeof h;
    if (pread(fd, h, hn, 0) != (ssize_t)hn) {
        st = mp_error(MP_ERR_IO, "%s: cannot read the header: %s", path, strerror(errno));
        goto cleanup;
    }
    if ((st = parse_header(h, size, path, &cfg, &version, &header)) != MP_OK) {
        char seen[128];
        if (not_a_model(h, hn, seen, sizeof seen))
            st = mp_error(MP_ERR_FORMAT, "%s: not a model file: not HDF5, GGUF, safetensors or llama2.c (%s)", path,
                          seen);
        goto cleanup;
    }

    if (!(m = mp_calloc(1, sizeof *m, "model"))) { st = MP_ERR_NOMEM; goto cleanup; }
    m->cfg = cfg;
    int na = l2c_layout(&cfg, &m->p, version, arr);
    expect = header;
    for (int i = 0; i < na; i++) {
        size_t bytes;
        if (mp_mul_size(arr[i].n, sizeof(float), &bytes) || mp_add_size(expect, bytes, &expect)) {
            st = mp_error(MP_ERR_FORMAT, "%s: the checkpoint size overflows size_t", path);
            goto cleanup;
        }
    }
    if (size < expect) {
        st = mp_error(MP_ERR_FORMAT, "%s: truncated: expected %zu bytes, file has %zu", path, expect, size);
        goto cleanup;
    }
    if (size > expect) {
        st = mp_error(MP_ERR_FORMAT, "%s: %zu trailing bytes (expected %zu bytes, file has %zu)",
                      path, size - expect, expect, size);
        goto cleanup;
    }
    if (size < L2C_COPY_BELOW) {
        /* Small files are copied into (anonymous, then read-only) memory: a file
         * mapped from disk that is truncated in place while in use (rewritten by
         * another program) ends the process with SIGBUS on the next access. */
        m->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            st = mp_error(MP_ERR_NOMEM, "%s: out of memory for %zu bytes of parameters", path, size);
            goto cleanup;
        }
        m->map_len = size;
        for (size_t done = 0; done < size;) {
            ssize_t k = pread(fd, (char *)m->map + done, size - done, (off_t)done);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                st = mp_error(MP_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path, done, size,
                              k < 0 ? strerror(errno) : "the file shrank while read");
                goto cleanup;
            }
            done += (size_t)k;
        }
        mprotect(m->map, size, PROT_READ);
    } else {
        /* Larger files are mapped: truncating one in place while mechprobe uses it
         * ends the process with SIGBUS (documented in docs/trust.md). */
        m->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            st = mp_error(MP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
            goto cleanup;
        }
        m->map_len = size;
    }
    float *p = (float *)((char *)m->map + header);   /* header is a multiple of 4 */
    for (int i = 0; i < na; i++) {
        if (arr[i].dst) *arr[i].dst = p;
        p += arr[i].n;
    }
    if (cfg.tied) m->p.unembed = m->p.embed;
    snprintf(m->source, sizeof m->source, "%s", path);
    m->format = version == 0 ? "llama2c-v0" : "llama2c-v1";
    *out = m;
    m = NULL;
cleanup:
    if (fd >= 0) close(fd);
    mp_model_free(m);
    return mp_error_name_path(st, path); /* e.g. out of memory for the parameters */
}

/* llama2.c's freq_cis tables: cos / sin of pos * theta^(-2i/Dh), [ctx, Dh/2] each. */
static mp_status write_freq_cis(FILE *f, const mp_config *c) {
    int half = c->d_head / 2;
    for (int part = 0; part < 2; part++)
        for (int t = 0; t < c->ctx; t++)
            for (int i = 0; i < half; i++) {
                double freq = 1.0 / pow((double)c->rope_theta, (2.0 * i) / c->d_head);
                float v = (float)(part == 0 ? cos(t * freq) : sin(t * freq));
                if (fwrite(&v, sizeof v, 1, f) != 1) return MP_ERR_IO;
            }
    return MP_OK;
}

mp_status mp_model_save_llama2c(const mp_model *m, const char *path, int version) {
    if (m->q) { /* quantized weights: save a float32 copy (decoded on demand) */
        mp_model *f32 = NULL;
        mp_status qs = mp_model_dequantized_copy(m, &f32);
        if (!qs) qs = mp_model_save_llama2c(f32, path, version);
        mp_model_free(f32);
        return qs;
    }
    const mp_config *c = &m->cfg;
    mp_status st = MP_OK;
    mp_out out;
    FILE *f = NULL;
    l2c_array arr[16];
    mp_params p = m->p;

    if (version != 0 && version != 1)
        return mp_error(MP_ERR_ARG, "%s: llama2.c version %d cannot be written (0 or 1)", path, version);
    if ((st = mp_config_validate(c, path)) != MP_OK) return st;
    if (c->rel_values > 0)
        return mp_error(MP_ERR_ARG, "%s: rel_values (Shaw relative values, R = %d) has no llama2.c form; save as .h5",
                        path, c->rel_values);
    if (c->no_pre_norms)
        return mp_error(MP_ERR_ARG, "%s: llama2.c has no form for a block without pre-norms (pre_norms = false, OLMo "
                        "2); save as .gguf, a Hugging Face folder or .h5", path);
    if (c->norm_offset || c->embed_scale || c->post_norms || c->attn_softcap != 0.0f || c->final_softcap != 0.0f ||
        c->query_pre_attn_scalar != 0.0f || (c->gelu_tanh && c->mlp == MP_MLP_SWIGLU))
        return mp_error(MP_ERR_ARG, "%s: llama2.c has no form for Gemma's %s; save as .gguf, a Hugging Face folder "
                        "or .h5", path, c->post_norms ? "post-norms (Gemma 2)" : c->gelu_tanh ? "GeGLU" :
                        c->embed_scale ? "scaled embedding" : c->norm_offset ? "(1 + w) norms" : "soft caps / query scale");
    if (c->sliding_window > 0)
        return mp_error(MP_ERR_ARG, "%s: this model has sliding-window attention (sliding_window %d), which llama2.c "
                        "cannot hold; save as .h5, GGUF or a Hugging Face folder", path, c->sliding_window);
    if (c->norm != MP_NORM_RMS || c->mlp != MP_MLP_SWIGLU || c->pos != MP_POS_ROPE ||
        (long long)c->n_head * c->d_head != c->d_model || c->rope_theta != 10000.0f ||
        c->norm_eps != 1e-5f || c->attn != MP_ATTN_SOFTMAX || c->qkv_bias || c->linear_bias ||
        c->rope_scaling != MP_ROPE_SCALING_NONE || c->n_rope_freqs || (c->rope_scale > 0 && c->rope_scale != 1.0f) ||
        c->qk_norm != MP_QK_NORM_NONE || c->parallel_attn)
        return mp_error(MP_ERR_ARG, "%s: this model cannot be written as llama2.c (which fixes RMSNorm eps 1e-5, "
                        "SwiGLU, unscaled RoPE theta 10000, softmax attention, no biases, no q/k norm, "
                        "n_head*d_head == d_model, serial blocks: no parallel_attn)", path);
    if ((st = mp_out_begin(&out, path)) != MP_OK) return st;
    if (!(f = mp_out_fdopen(&out))) { st = MP_ERR_IO; goto cleanup; }

    unsigned char h[L2C_V1_HEADER] = {0};
    int32_t fields[7] = {c->d_model, c->d_mlp, c->n_layer, c->n_head, c->n_kv_head,
                         c->vocab, c->ctx};
    size_t hn;
    if (version == 0) {
        if (!c->tied) fields[5] = -fields[5];
        memcpy(h, fields, sizeof fields);
        hn = L2C_V0_HEADER;
    } else {
        uint32_t magic = L2C_MAGIC;
        int32_t ver = 1;
        memcpy(h, &magic, 4);
        memcpy(h + 4, &ver, 4);
        memcpy(h + 8, fields, sizeof fields);
        h[36] = (unsigned char)(c->tied ? 1 : 0);
        hn = L2C_V1_HEADER;
    }
    if (fwrite(h, 1, hn, f) != hn) goto write_error;
    int na = l2c_layout(c, &p, version, arr);
    for (int i = 0; i < na; i++) {
        if (!arr[i].dst) {
            if (write_freq_cis(f, c) != MP_OK) goto write_error;
        } else if (fwrite(*arr[i].dst, sizeof(float), arr[i].n, f) != arr[i].n) {
            goto write_error;
        }
    }
    return mp_out_commit(&out, 1);   /* fflush, fsync, close, rename */

write_error:
    st = mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
cleanup:
    mp_out_abort(&out);
    return st;
}
