/* view.h — interactive views as one self-contained HTML page (docs/VIEW.md):
 * the writer reads an HDF5 run file (attention patterns, per-token
 * activations, rotated q/k for the Q/K geometry) or a probe's results folder
 * (verdicts.tsv, PNG figures, the evidence .h5, report.txt) and writes a
 * single HTML file whose script (webview/view.js), style (webview/view.css) and
 * data are all inlined: no network at view time.
 *
 * Data encoding (the page decodes only what it shows):
 *   attention  one blob per (layer, head): the causal lower triangle of row
 *              `batch` of /acts/blocks.L.attn.hook_pattern (T(T+1)/2 values,
 *              query-major), each value v in [0,1] stored as the byte
 *              round(255 sqrt(v)) (decoded (b/255)^2: absolute error at most
 *              sqrt(v)/255 + 1/(4*255^2)), deflated (zlib), base64;
 *   thumbnails every head's pattern averaged over blocks to S x S (S <= 32),
 *              same byte encoding, one deflated blob;
 *   per-token  float32 little-endian, base64 (exact);
 *   geometry   per (layer, head) the 2-component PCA projections of the
 *              pooled rotated q and k points (mp_analyze_pca), float32 [2T,2];
 *   figures    the PNG files' bytes, base64.
 * The file is written through mp_out (temporary name + rename): a failure
 * leaves no page and no temporary. */
#ifndef MP_VIEW_H
#define MP_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"

/* One per-token series of the activations view. */
typedef enum {
    MP_VIEW_ACT_NEURON = 0, /* /acts/HOOK[b, t, index] (rank 3) or [b, t, head, index] (rank 4) */
    MP_VIEW_ACT_NORM,       /* L2 norm of /acts/HOOK[b, t, ...] */
    MP_VIEW_ACT_DIRECTION,  /* dot product of /acts/HOOK[b, t, :] (rank 3) with `dir` */
    MP_VIEW_ACT_LOGIT,      /* /logits[b, t, index] */
    MP_VIEW_ACT_LOSS,       /* -log softmax(/logits[b, t])[tokens[b, t+1]] (nats); NaN at the last position */
    MP_VIEW_ACT_DEFAULTS    /* stands for the default series (mp_view_run_params.acts) */
} mp_view_act_kind;

typedef struct {
    mp_view_act_kind kind;
    char hook[128];    /* NEURON, NORM, DIRECTION: the hook name under /acts */
    int64_t head;      /* NEURON on a rank-4 hook: the head (axis 2); else -1 */
    int64_t index;     /* NEURON: the unit; LOGIT: the token id */
    const float *dir;  /* DIRECTION: the vector (not copied; lives through the call) */
    size_t dir_n;
    char label[160];   /* shown in the page; mp_view_act_parse fills it */
} mp_view_act;

/* Parses one series spec: "loss", "logit:ID", "norm:HOOK", "HOOK:N" (unit N
 * of a [B,T,X] hook), "HOOK:H.N" (head H, unit N of a [B,T,H,X] hook) or
 * "defaults" (the default series).
 * MP_ERR_ARG naming the spec when it is none of these. */
mp_status mp_view_act_parse(const char *spec, mp_view_act *out);

typedef struct {
    const char *title;              /* NULL: the run file's name */
    int batch;                      /* row of [B,T] shown (0-based) */
    const int *layers;              /* layers of the attention and geometry views; NULL: all */
    int n_layers;
    int attention;                  /* 1: required (error when no pattern is captured), 0: off, -1: when captured */
    int geometry;                   /* 1: required (needs hook_rot_q and hook_rot_k), 0: off, -1: when captured */
    const mp_view_act *acts;        /* NULL: the defaults (loss when /logits exists, the norm of each captured
                                     * hook_resid_post, else of every [B,T,X] hook) */
    int n_acts;                     /* n_acts = 0 with acts != NULL: no activations view */
    const char *const *token_str;   /* T strings (the tokens' text), or NULL: the ids are shown */
    int n_token_str;
    uint64_t max_bytes;             /* a page growing past this (0: 1 GiB) is abandoned: error, nothing written */
} mp_view_run_params;

mp_view_run_params mp_view_run_params_default(void);

/* What a page holds, for the caller's report. */
typedef struct {
    uint64_t bytes;                 /* the page's size */
    int T, n_layers, n_heads;       /* attention: layers and heads per layer shown (0 when none) */
    int n_acts, n_geometry;         /* series; (layer, head) clouds */
    int n_rows, n_figures;          /* report pages: verdict rows, figures */
    double seconds;                 /* wall time of the call */
} mp_view_stats;

/* Writes the page of run file `run_path` to `out_path`. Errors (nothing is
 * written): a missing or non-run file, a missing hook dataset a view needs, a
 * layer out of range, a batch row out of range, token strings of the wrong
 * count, a page over max_bytes; each message names the file and what is
 * missing. stats may be NULL. */
mp_status mp_view_run(const char *run_path, const char *out_path, const mp_view_run_params *p, mp_view_stats *stats);

/* Writes the report page of a probe's results folder `dir`: verdicts.tsv
 * (required, with the columns id, claim, paper, source, statistic, unit,
 * n_seeds, seeds, seed_values, mean, lo, hi, control, control_values, word,
 * reason, rule, ours, describe), the folder's *.png figures (and those of its
 * seed_N/ subfolders), report.txt and the datasets of its .h5 files (names,
 * shapes, and the values of those of at most 64 elements). Each row links to
 * the figures whose name's words all occur in its text (or those a file
 * DIR/figures.tsv "id<TAB>figure.png" names) and to its evidence. */
mp_status mp_view_report(const char *dir, const char *out_path, const char *title, mp_view_stats *stats);

#endif
