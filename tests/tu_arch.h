/* tu_arch.h — helpers shared by the model-family tests (test_olmo2, test_gemma,
 * test_qwen3, test_neox, test_swa, test_models and the CUDA comparisons
 * test_olmo2_gpu / test_gemma_gpu): the golden comparison against a reference
 * .h5 written by tests/tools/make_arch_ref*.py, decode == prefill, save /
 * reload round trips, model folders with one config.json string replaced,
 * load refusals, the staged-gradient check, the CUDA forward against the CPU.
 * Every tolerance is the calling test's own (passed in); each helper's checks
 * are CHECKs of testutil.h, counted in the test's "N checks" line. */
#ifndef MP_TU_ARCH_H
#define MP_TU_ARCH_H
#include "model.h"
#include "testutil.h"
#include "train.h"
#include <stdint.h>

/* Logits [T, vocab] of a forward of m on toks (batch 1) with hooks hs (may be NULL); CHECKs the forward. */
float *tu_forward(const mp_model *m, const int *toks, int T, const mp_hooks *hs);
/* The same, every hook point ("*") captured into cap; cap NULL: no hooks. */
float *tu_run_captured(const mp_model *m, const int *toks, int T, tu_capture *cap);
/* Largest finite |x|. */
double tu_max_abs(const float *x, size_t n);
/* max |got - ref| / scale, scale = max(floor, largest finite |ref|) (1 when that is 0); a non-finite entry
 * that differs between the two gives INFINITY. */
double tu_rel_diff(const float *got, const float *ref, size_t n, double floor);
/* max |diff| over the logits and every hook point ("*") of a and b on toks (CHECKs: the same points fired). */
double tu_compare_models(const mp_model *a, const mp_model *b, const int *toks, int T, const char *label);

/* ---- the golden comparison ---- */
typedef struct {
    const char *points;     /* the hook points captured ("*" when NULL) */
    double tol_abs;         /* > 0: every point in the file within this max |diff| */
    double tol_rel;         /* > 0: the points named by rel_only (all when NULL) within this of their scale */
    const char *rel_only;   /* a substring picking the points checked relatively */
    double rel_floor;       /* the relative scale's floor (tu_rel_diff) */
    double logits_abs;      /* > 0: the logits within this max |diff| */
    double logits_rel;      /* > 0: the logits within this of their scale (floor rel_floor) */
    int all_compared;       /* every point fired is in the file, but those of tu_added_point */
    int n_acts;             /* > 0: the file holds exactly this many activations */
    const char *count[2];   /* substrings counted among the compared points (tu_golden_result.counted) */
} tu_golden_opts;
typedef struct {
    int ok;                 /* the file was read and the forward ran */
    int compared, fired, counted[2];
    double worst_abs, worst_rel;
} tu_golden_result;
/* m's activations and logits on the tokens of golden_path (/tokens, /acts/<point>, /logits) against the file;
 * cap (may be NULL) receives the captured points (the caller frees it). */
tu_golden_result tu_golden(const mp_model *m, const char *golden_path, const char *label, const tu_golden_opts *o,
                           tu_capture *cap);

/* A golden file's tokens [1, T] and logits [T, vocab] (CHECKed; 0 when unread). */
typedef struct {
    int32_t *toks;
    int T;
    float *logits;
    size_t n_logits;
} tu_golden_ref;
int tu_read_golden(const char *path, tu_golden_ref *g);
void tu_golden_ref_free(tu_golden_ref *g);

/* KV-cached decoding (a prefill of P tokens, 0 for none, then one token at a time, last logits) against ref
 * (NULL: m's own one-call forward): relative |diff| within tol, the scale taken with floor `floor` over all
 * of ref's logits, or over each row with per_row. */
void tu_decode_vs_prefill(const mp_model *m, const int *toks, int T, int P, const float *ref, double tol,
                          double floor, int per_row, const char *label);

/* ---- files ---- */
/* /tmp/mp_test_<test>_<pid>_<name> (8 rotating buffers). */
const char *tu_tmp_path(const char *test, const char *name);
/* Removes an HF folder written by the tests (model.safetensors, config.json, tokenizer.json, the folder). */
void tu_rm_tree(const char *dir);
/* Writes text to path (CHECKed). */
void tu_write_file(const char *path, const char *text);
/* A folder dir holding a copy of the weights file `weights` as model.safetensors and config.json = config. */
const char *tu_model_dir(const char *dir, const char *weights, const char *config);
/* A folder dir holding tests/data/<src>'s weights and its config.json with `from` replaced by `to`. */
const char *tu_variant_of(const char *src, const char *dir, const char *from, const char *to);
/* Loading path fails, with an error naming want1 and (when not NULL) want2. */
void tu_expect_load_fail(const char *path, const char *label, const char *want1, const char *want2);
/* Every config field equal (one CHECK each); returns whether all were. */
int tu_config_equal(const mp_config *a, const mp_config *b, const char *label);

/* Saves m as an HF folder, a GGUF F32 file and an HDF5 checkpoint (files named after `test`), reloads each:
 * the config equal and the logits on toks[0..T) bit for bit; then a Q8_0 GGUF, loaded quantized, its logits
 * within tol_q8 (max |diff|). */
void tu_round_trips(const mp_model *m, const char *test, const char *label, const int *toks, int T, double tol_q8);

/* The training backward's parameter gradients of m on toks / tgt [B, T] into G (initialized here: the
 * caller frees it); 0 after a failed CHECK. */
int tu_param_grads(mp_model *m, const int *toks, const int *tgt, int B, int T, mp_grads *G);
/* The central difference (step h) of mp_model_loss on toks / tgt [B, T] in the parameter entry *p (restored). */
double tu_fd_loss(mp_model *m, const int *toks, const int *tgt, int B, int T, float *p, float h);
/* |fd - an| / max(1e-2, |fd| + |an|): the relative error the parameter-gradient probes bound. */
double tu_fd_rel_err(double fd, double an);

/* The backward hooks' walk (input gradients only) at each of points against a central finite difference
 * (eps 1e-3) of sum(R * logits) along a fixed direction, R and the direction from an LCG: within
 * 2e-2 + 2e-2 |fd|. */
void tu_staged_grad(const mp_model *m, const int *toks, int T, const char *const *points, int n_points,
                    const char *label);
/* sum(R * logits) of a forward on toks [B, T], `delta` added at element idx of `point` by a forward hook
 * (point NULL: none). */
double tu_nudged_metric(const mp_model *m, const int *toks, int B, int T, const float *R, const char *point,
                        size_t idx, float delta);

/* ---- the CUDA forward against the CPU ---- */
typedef struct {
    double tol_rel;              /* every point and the logits, of max(1, largest |value|) */
    const char *count[2];        /* substrings counted among the compared points, per query block */
    const char *absent[2];       /* substrings no fired point may hold (one CHECK per point) */
    const char *train_refusal[2];/* the device training step fails naming these (second may be NULL) */
} tu_cuda_opts;
typedef struct {
    int ok;                      /* loaded, and moved to the device */
    mp_config cfg;
    int counted[2][2];           /* [query block 0 / 4][count] */
} tu_cuda_result;
/* The model at path on the CPU and then on the device (fp32): every hook point ("*") and the logits for one
 * query block and blocks of 4 rows, the device's KV-cached decode against the CPU prefill, the training
 * step's refusal. */
tu_cuda_result tu_cuda_compare(const char *path, const char *label, const tu_cuda_opts *o);
#endif
