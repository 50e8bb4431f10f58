/* h5capture.h — the dataset capture: many prompts of ragged lengths into one
 * HDF5 run file, split across the ranks of the current group (mpi/mp_mpi.h)
 * and written with collective parallel HDF5 (one process: plain HDF5, the
 * same file).
 *
 *   /                 attrs format="mechprobe.run", version=1, mechprobe_version
 *   /model            attrs: the config (as io/h5run.h)
 *   /lengths          int32 [N]            tokens of each prompt
 *   /tokens           int32 [N, Tmax]      padded with -1
 *   /acts/<hook>      float32 [N, Tmax, ...] (hook shapes with B = N, T = Tmax);
 *                     padding 0 (-inf in hook_attn_scores, as masked cells)
 *   /logits           float32 [N, Tmax, V] when asked for
 *
 * Rows are the prompts of rank 0, then rank 1's, ... in order, so a split
 * run and a serial run over the same prompts write the same file. Every
 * collective step (creation, the final agreement, close) is taken by all
 * ranks; hook views and logits are written independently by the rank that
 * computed them. The file is written under "<out>.tmp.XXXXXX" and renamed by
 * rank 0 only when every rank succeeded: a failure on any rank leaves no file
 * under the final name (a rank killed outright may leave the temporary). */
#ifndef MP_H5CAPTURE_H
#define MP_H5CAPTURE_H

#include "mp_common.h"
#include "mp_hooks.h"

struct mp_config;

typedef struct {
    const char *out;     /* final file name */
    const char *globs;   /* hook globs; NULL or "" for none */
    int logits;          /* write /logits */
    int compress;        /* 0..9 (shuffle + deflate); one rank only: compression needs collective writes */
    const char *source;  /* /model attribute `source` (may be NULL) */
    const char *tokenizer; /* /model attribute `tokenizer` (NULL or "": none) */
    const char *device;    /* root attributes device / precision (NULL: not written) */
    const char *precision;
} mp_h5cap_params;

typedef struct mp_h5cap mp_h5cap;

/* Collective: every rank passes its own prompts' lengths (n_mine >= 0, every
 * length >= 1; some rank must have a prompt). Creates the temporary file and
 * every dataset and registers on `hooks` a callback per captured hook point
 * (register interventions before, so that they apply first). *n_total
 * receives N, *n_datasets the number of /acts and /logits datasets. */
mp_status mp_h5cap_create(mp_h5cap **out, const mp_h5cap_params *p, const struct mp_config *cfg,
                          const int32_t *lengths, int n_mine, mp_hooks *hooks, int64_t *n_total, int *n_datasets);
/* Before this rank's prompt i (0-based) runs: writes its /tokens row and
 * points the hook callbacks at its row. */
mp_status mp_h5cap_begin(mp_h5cap *c, int i, const int *tokens);
/* Tmax: the longest prompt over every rank (the files' second axis). */
int64_t mp_h5cap_tmax(const mp_h5cap *c);
/* Writes prompt i's logits [length, V]. */
mp_status mp_h5cap_write_logits(mp_h5cap *c, int i, const float *logits);
/* Collective: agrees on whether some rank failed (`failed`: this rank's
 * status so far, its message in mp_last_error()), closes the file, and renames
 * it to its final name when none did (else removes it). Returns MP_OK when
 * committed; this rank's own error when it failed; or an error naming the
 * first rank that failed. Frees c (NULL: no-op, MP_OK). */
mp_status mp_h5cap_finish(mp_h5cap *c, mp_status failed);

#endif
