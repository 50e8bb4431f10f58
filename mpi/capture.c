/* capture.c — the capture workflow (see capture.h): inputs read, tokenized
 * and split here; one batch through io/h5run.h's writer, a dataset through
 * mpi/h5capture.h's. The steps, their order and their messages are those of
 * the Lua code it replaces (m:capture, m:capture_prompts, probes/capture.lua),
 * so the files are the same. */
#include "capture.h"

#include "h5capture.h"
#include "h5run.h"
#include "mp_input.h"
#include "mp_mpi.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mp_capture_params mp_capture_params_default(void) {
    mp_capture_params p;
    memset(&p, 0, sizeof p);
    p.hooks = "*";
    return p;
}

static int no_hooks(const char *globs) { return !globs || !*globs || strcmp(globs, "none") == 0; }

/* ---- one batch: io/h5run.h's run file ---- */

static mp_status capture_batch(const mp_capture_params *p, mp_hooks *hooks, const int *tok, int B, int T,
                               mp_capture_result *r) {
    mp_model *m = p->model;
    const mp_config *cfg = &m->cfg;
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (tok[i] < 0 || tok[i] >= cfg->vocab)
            return mp_error(MP_ERR_ARG, "capture: token id %d is outside the vocabulary (0..%d)", tok[i], cfg->vocab - 1);
    mp_h5run_params rp = mp_h5run_params_default();
    rp.compress = p->compress;
    mp_h5run *run = NULL;
    float *logits = NULL;
    int n_ds = 0;
    mp_status st = mp_h5run_create(&run, p->out, &rp);
    if (st) return st;
    if ((st = mp_h5run_write_model(run, cfg, m->source, m->tokenizer)) || (st = mp_h5run_write_tokens(run, tok, B, T)) ||
        (p->mask && (st = mp_h5run_write_mask(run, p->mask, B, T))))
        goto fail;
    if (!no_hooks(p->hooks)) {
        if ((st = mp_h5run_capture(run, hooks, cfg, p->hooks, B, T))) goto fail;
        n_ds = mp_hook_select(cfg, p->hooks, NULL, NULL, NULL, 0);
    }
    if (p->logits && !(logits = mp_malloc((size_t)B * T * cfg->vocab * sizeof(float), "logits"))) {
        st = MP_ERR_NOMEM;
        goto fail;
    }
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = mp_hooks_count(hooks) ? hooks : NULL;
    fp.logits = p->logits ? MP_LOGITS_ALL : MP_LOGITS_NONE;
    fp.attn_mask = p->mask;
    if ((st = mp_model_forward(m, tok, B, T, &fp, logits))) goto fail;
    { /* where this call ran: a cuda model's call the backend leaves to the CPU ran there */
        const mp_device ran = mp_model_forward_device(m, &fp);
        if ((st = mp_h5run_write_device(run, mp_device_name(ran),
                                        mp_precision_name(ran == MP_DEVICE_CPU ? MP_PRECISION_FP32 : m->precision))))
            goto fail;
    }
    if (p->logits) {
        int64_t shape[3] = {B, T, cfg->vocab}, off[3] = {0, 0, 0};
        mp_h5ds *ds;
        if ((st = mp_h5run_dataset(run, "/logits", 3, shape, 1, &ds)) || (st = mp_h5ds_write(ds, off, shape, logits)))
            goto fail;
        n_ds++;
    }
    free(logits);
    st = mp_h5run_commit(run); /* frees run, committed or not */
    mp_hooks_clear(hooks);     /* the capture's callbacks pointed into the run */
    if (st) return st;
    if (r) *r = (mp_capture_result){n_ds, B, T};
    return MP_OK;
fail:
    free(logits);
    mp_h5run_abort(run);
    mp_hooks_clear(hooks);
    return st;
}

/* ---- a dataset: mpi/h5capture.h's file ---- */

/* counts the points a glob list selects that the CUDA forward lacks (mp_hook_on_device) */
static void cpu_only_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)layer;
    (void)name;
    if (!mp_hook_on_device(id)) ++*(int *)u;
}

/* Collective: this rank's n prompts (all, one after the other; len[i] each). */
static mp_status capture_dataset(const mp_capture_params *p, mp_hooks *hooks, const int *all, const int32_t *len,
                                 int n, mp_capture_result *r) {
    mp_model *m = p->model;
    const mp_config *cfg = &m->cfg;
    mp_h5cap_params hp = {p->out, no_hooks(p->hooks) ? "" : p->hooks, p->logits, p->compress, m->source, m->tokenizer,
                          NULL, NULL};
    int tmax = 1;
    for (int i = 0; i < n; i++)
        if (len[i] > tmax) tmax = len[i];
    float *logits = NULL;
    if (p->logits && !(logits = mp_malloc((size_t)tmax * (size_t)cfg->vocab * sizeof(float), "logits")))
        return MP_ERR_NOMEM; /* before anything collective, as the Lua allocation it replaces */
    /* where the forwards will run: points the device forward lacks (the
     * per-head ones) keep a cuda model's calls on the CPU (mp_cuda_cpu_reason) */
    mp_forward_params probe = mp_forward_params_default();
    probe.hooks = hooks;
    int cpu_only = 0;
    if (hp.globs[0]) mp_hook_select(cfg, hp.globs, cpu_only_visit, &cpu_only, NULL, 0);
    const mp_device ran = cpu_only ? MP_DEVICE_CPU : mp_model_forward_device(m, &probe);
    hp.device = mp_device_name(ran);
    /* a cuda model's forward kept on the CPU computes in fp32; a CPU model at bf16 multiplies its BF16 weights so */
    hp.precision = mp_precision_name(ran == MP_DEVICE_CPU && m->device != MP_DEVICE_CPU ? MP_PRECISION_FP32 : m->precision);
    /* collective from here: every failure becomes a status that finish shares */
    mp_h5cap *cw = NULL;
    int64_t n_total = 0;
    int n_ds = 0;
    mp_status st = mp_h5cap_create(&cw, &hp, cfg, len, n, hooks, &n_total, &n_ds);
    if (st) {
        free(logits);
        mp_hooks_clear(hooks);
        return st;
    }
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    fp.logits = p->logits ? MP_LOGITS_ALL : MP_LOGITS_NONE;
    size_t off = 0;
    for (int i = 0; i < n && st == MP_OK; i++) {
        const int *tok = all + off;
        off += (size_t)len[i];
        if ((st = mp_h5cap_begin(cw, i, tok))) break;
        if ((st = mp_model_forward(m, tok, 1, len[i], &fp, logits))) break;
        if (p->logits) st = mp_h5cap_write_logits(cw, i, logits);
    }
    mp_hooks_clear(hooks); /* the callbacks point into the writer */
    free(logits);
    const int64_t t_all = mp_h5cap_tmax(cw);
    if ((st = mp_h5cap_finish(cw, st))) return st;
    if (r) *r = (mp_capture_result){n_ds, n_total, (int)t_all};
    return MP_OK;
}

/* ---- prompts from a file, one a line ---- */

typedef struct {
    int *ids;
    int32_t *len;
    size_t n_ids, cap_ids;
    int n;
} prompts;

static mp_status push_ids(prompts *ps, const int *ids, int n) {
    if (ps->n_ids + (size_t)n > ps->cap_ids) {
        size_t nc = ps->cap_ids ? 2 * ps->cap_ids : 1024;
        while (nc < ps->n_ids + (size_t)n) nc *= 2;
        int *q = realloc(ps->ids, nc * sizeof *q);
        if (!q) return mp_error(MP_ERR_NOMEM, "capture: out of memory for %zu tokens", nc);
        ps->ids = q;
        ps->cap_ids = nc;
    }
    memcpy(ps->ids + ps->n_ids, ids, (size_t)n * sizeof(int));
    ps->n_ids += (size_t)n;
    ps->len[ps->n++] = n;
    return MP_OK;
}

/* A field of a --tokens-file line as Lua's tonumber reads it (decimal or hex
 * integer, or a float, spaces around): 1 and *v, or 0. */
static int field_number(const char *s, size_t n, double *v) {
    char buf[128];
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (!n || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    const char *d = buf + (buf[0] == '-' || buf[0] == '+');
    errno = 0;
    if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X') && !strpbrk(buf, ".pP")) { /* a hex integer */
        long long x = (long long)strtoull(d, &end, 16);
        if (*end || end == d + 2) return 0;
        *v = buf[0] == '-' ? -(double)x : (double)x;
        return 1;
    }
    if (strpbrk(buf, "nN")) return 0; /* no inf or nan, as Lua */
    *v = strtod(buf, &end);
    return *end == '\0' && end != buf;
}

/* This rank's share of the lines of p->text_file / p->tokens_file. */
static mp_status read_prompts(const mp_capture_params *p, prompts *ps) {
    const int vocab = p->model->cfg.vocab, is_tok = p->tokens_file != NULL;
    const char *path = is_tok ? p->tokens_file : p->text_file;
    char *text = NULL;
    size_t len = 0;
    /* the file's own faults (a FIFO, a folder, too large) first, as the CLI reported them */
    mp_status st = mp_read_input(path, p->file_what, (uint64_t)1 << 30, &text, &len);
    if (st) return st;
    if (!is_tok && !p->tok) {
        free(text);
        return mp_error(MP_ERR_ARG, "this model has no tokenizer: load it with mp.load(path, {tokenizer=\"tokenizer.bin\"}), "
                        "or {tokenizer=\"bytes\"} for a byte-level model");
    }
    /* the lines: split at \n (a final \n ends the last line), each without a final \r */
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    if (len && text[len - 1] != '\n') n_lines++;
    if (n_lines == 0) {
        free(text);
        return mp_error(MP_ERR_ARG, "capture: %s: no prompts (the file is empty)", path);
    }
    const int64_t size = mp_mpi_size(), rank = mp_mpi_rank();
    const int64_t lo = (int64_t)n_lines * rank / size, hi = (int64_t)n_lines * (rank + 1) / size;
    if (!(ps->len = mp_malloc((size_t)(hi - lo > 0 ? hi - lo : 1) * sizeof *ps->len, "prompt lengths"))) {
        free(text);
        return MP_ERR_NOMEM;
    }
    const int bos = !is_tok && mp_tok_add_bos(p->tok) && mp_tok_bos(p->tok) >= 0;
    const char *s = text, *end = text + len;
    int *row = NULL;
    size_t row_cap = 0;
    for (int64_t line = 0; line < hi && !st; line++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        size_t n = (size_t)(e - s);
        if (n && s[n - 1] == '\r') n--;
        if (line >= lo) {
            const long ln = (long)line + 1;
            int *ids = NULL, k = 0;
            if (is_tok) { /* comma-separated ids: each must be an integer inside the vocabulary */
                for (const char *f = s;;) {
                    const char *c = memchr(f, ',', (size_t)(s + n - f));
                    const size_t fl = (size_t)((c ? c : s + n) - f);
                    double v;
                    if (!field_number(f, fl, &v) || v != floor(v)) {
                        st = mp_error(MP_ERR_ARG, "capture: %s:%ld: '%.*s' is not a token id", path, ln, (int)fl, f);
                        break;
                    }
                    if (v < 0 || v >= vocab) {
                        st = mp_error(MP_ERR_ARG, "capture: %s:%ld: token id %.0f is outside the vocabulary (0..%d)",
                                      path, ln, v, vocab - 1);
                        break;
                    }
                    if ((size_t)k == row_cap) {
                        size_t nc = row_cap ? 2 * row_cap : 256;
                        int *q = realloc(row, nc * sizeof *q);
                        if (!q) { st = mp_error(MP_ERR_NOMEM, "capture: out of memory"); break; }
                        row = q;
                        row_cap = nc;
                    }
                    row[k++] = (int)v;
                    if (!c) break;
                    f = c + 1;
                }
                ids = row;
            } else {
                st = mp_tok_encode(p->tok, s, n, bos ? MP_TOK_BOS : 0, &ids, &k);
            }
            if (!st && k == 0) st = mp_error(MP_ERR_ARG, "capture: %s:%ld: the prompt is empty (no tokens)", path, ln);
            if (!st) st = push_ids(ps, ids, k);
            if (!is_tok) free(ids);
        }
        s = nl ? nl + 1 : end;
    }
    free(row);
    free(text);
    return st;
}

/* ---- the entry ---- */

mp_status mp_capture_run(const mp_capture_params *p, mp_capture_result *r) {
    if (!p->model) return mp_error(MP_ERR_ARG, "capture: no model");
    if (!p->out || !*p->out) return mp_error(MP_ERR_ARG, "capture: option 'out' (output .h5 path) is required");
    const int given = (p->tokens != NULL) + (p->text != NULL) + (p->lengths != NULL) +
                      (p->text_file != NULL) + (p->tokens_file != NULL);
    if (given != 1)
        return mp_error(MP_ERR_ARG, "capture: give exactly one input: tokens, text, lengths (with prompts), text_file or tokens_file "
                        "(%d given)", given);
    if (p->compress < 0 || p->compress > 9)
        return mp_error(MP_ERR_ARG, "%s: compression level %d outside 0..9", p->out, p->compress);
    mp_hooks *hooks = p->fwd_hooks ? p->fwd_hooks : mp_hooks_new(&p->model->cfg);
    if (!hooks) return MP_ERR_NOMEM;
    mp_status st = MP_OK;
    if (p->tokens) {
        if (p->B < 1 || p->T < 1) st = mp_error(MP_ERR_ARG, "capture: an empty batch [%d,%d]", p->B, p->T);
        else st = capture_batch(p, hooks, p->tokens, p->B, p->T, r);
    } else if (p->text) {
        int *ids = NULL, n = 0;
        if (!p->tok)
            st = mp_error(MP_ERR_ARG, "this model has no tokenizer: load it with mp.load(path, {tokenizer=\"tokenizer.bin\"}), "
                          "or {tokenizer=\"bytes\"} for a byte-level model");
        else if (!(st = mp_tok_encode(p->tok, p->text, strlen(p->text),
                                      mp_tok_add_bos(p->tok) && mp_tok_bos(p->tok) >= 0 ? MP_TOK_BOS : 0, &ids, &n)))
            st = n < 1 ? mp_error(MP_ERR_ARG, "capture: the text encodes to no tokens") : capture_batch(p, hooks, ids, 1, n, r);
        free(ids);
    } else if (p->lengths) {
        if (p->n_prompts < 0 || (p->n_prompts && !p->prompts))
            st = mp_error(MP_ERR_ARG, "capture: prompts and lengths go together (n_prompts %d)", p->n_prompts);
        else st = capture_dataset(p, hooks, p->prompts, p->lengths, p->n_prompts, r);
    } else {
        prompts ps = {0};
        if (!(st = read_prompts(p, &ps))) st = capture_dataset(p, hooks, ps.ids, ps.len, ps.n, r);
        free(ps.ids);
        free(ps.len);
    }
    if (hooks != p->fwd_hooks) mp_hooks_free(hooks);
    else mp_hooks_clear(hooks);
    return st;
}
