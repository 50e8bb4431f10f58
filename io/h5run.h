/* h5run.h — the HDF5 run-file writer (DESIGN.md "HDF5 run file") and the
 * capture adapter that streams hook views into it.
 *
 *   /             attrs format="mechprobe.run", version=1, mechprobe_version, seed
 *   /model        attrs: the config and its source path
 *   /tokens       int32 [B,T]
 *   /logits       float32 [B,T,V]           (when asked for)
 *   /acts/<hook>  float32, one per captured hook point
 *   /stats/...    analysis results
 *
 * The file is written under a temporary name in the same directory and renamed
 * by mp_h5run_commit, so a crash or an abort never leaves a file that looks
 * complete. Datasets are chunked along T (about 1 MiB per chunk), optionally
 * shuffle+deflate compressed, and written block by block as they are computed.
 *
 * Typical use:
 *   mp_h5run *run;  mp_h5run_create(&run, "out.h5", &params);
 *   mp_h5run_write_model(run, &model->cfg, model->source, model->tokenizer);
 *   mp_h5run_write_tokens(run, tokens, B, T);
 *   mp_h5run_capture(run, hooks, &model->cfg, "blocks.*.attn.hook_pattern", B, T);
 *   mp_model_forward(model, tokens, B, T, &fp, logits);
 *   mp_hooks_clear(hooks);          // the callbacks point into `run`
 *   mp_h5run_commit(run);           // or mp_h5run_abort(run) on any failure */
#ifndef MP_H5RUN_H
#define MP_H5RUN_H

#include <hdf5.h>

#include "mp_common.h"
#include "mp_hooks.h"

struct mp_config;

typedef struct {
    int compress;       /* 0: none; 1..9: shuffle + deflate at that level */
    int has_seed;       /* write the root attribute `seed` */
    int64_t seed;
    size_t chunk_bytes; /* target chunk size; 0: 1 MiB */
    int sync_writes;    /* 1: the capture writes on the forward's thread (no writer thread) */
    int writer_thread;  /* 1: a writer thread even when no core is spare (tests); see mp_h5run_capture */
    int no_lend;        /* 1: attention tiles are copied into the driver's staging, not packed into its
                           lent buffers (tests compare the two; see mp_h5run_capture) */
} mp_h5run_params;

mp_h5run_params mp_h5run_params_default(void);

typedef struct mp_h5run mp_h5run;
/* A dataset of the run, owned by the run (closed by commit/abort). */
typedef struct mp_h5ds mp_h5ds;

/* Creates the temporary file and writes the root attributes. p may be NULL
 * (defaults). A missing or unwritable directory is MP_ERR_IO naming `path`,
 * and nothing is left behind. */
mp_status mp_h5run_create(mp_h5run **out, const char *path, const mp_h5run_params *p);
/* Root attributes device ("cpu" / "cuda") and precision ("fp32" / "bf16"):
 * where the forward that produced the run ran. */
mp_status mp_h5run_write_device(mp_h5run *run, const char *device, const char *precision);
/* /model with the config as attributes: the fields and values of a
 * checkpoint's /config (MP_CONFIG_TABLE, io/h5config.h; mlp "gelu_tanh" for a
 * gelu_tanh model), `tokenizer` when non-empty (may be NULL) and
 * `source` (may be NULL: ""). */
mp_status mp_h5run_write_model(mp_h5run *run, const struct mp_config *cfg, const char *source,
                               const char *tokenizer);
/* The same /model group in any open file (`what` names it in messages): the
 * parallel capture writer (mpi/h5capture.c) shares it. */
mp_status mp_h5_write_model_attrs(hid_t f, const char *what, const struct mp_config *cfg, const char *source,
                                  const char *tokenizer);
/* /tokens int32 [B,T]. */
mp_status mp_h5run_write_tokens(mp_h5run *run, const int *tokens, int B, int T);
/* /attention_mask int32 [B,T] (1: a real token, 0: padding) of a capture run
 * with a ragged batch, beside /tokens. */
mp_status mp_h5run_write_mask(mp_h5run *run, const int *mask, int B, int T);
/* Creates float32 dataset `path` (e.g. "/logits", "/stats/sink/frac") of the
 * given shape, chunked along t_axis (-1: along axis 0) and compressed as the
 * run's params say. An existing dataset of that name is replaced. */
mp_status mp_h5run_dataset(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                           mp_h5ds **ds);
/* Writes the block [offset, offset + count) (row-major `data`, prod(count)
 * floats) into the dataset. Blocks may come in any order. */
mp_status mp_h5ds_write(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data);
/* Creates a dataset and writes all of it. */
mp_status mp_h5run_write_f32(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                             const float *data);

/* Closes everything and renames the temporary file to its final name. Frees
 * the run whether or not it succeeds (on failure the temporary is removed). */
mp_status mp_h5run_commit(mp_h5run *run);
/* Closes and removes the temporary file and frees the run. NULL is a no-op;
 * safe after any partial failure. */
void mp_h5run_abort(mp_h5run *run);
/* The open file, for extra writes with h5io or HDF5 (do not close it). */
hid_t mp_h5run_file(mp_h5run *run);
/* The final path. */
const char *mp_h5run_path(const mp_h5run *run);

/* Capture adapter: for every hook point matching `globs` (comma-separated,
 * see mp_hook_select) creates /acts/<name> with the full shape of a forward
 * over B x T tokens and registers a callback on `hooks` that writes each view
 * it receives at its place: info->axis/offset locate blocks of query rows of
 * scores/patterns; info->pos0 places incremental-decoding steps along T.
 * A glob matching nothing is MP_ERR_ARG naming it. The callbacks point into
 * `run`: clear or free `hooks` before commit/abort.
 *
 * Attention maps ([B,H,T,S]) are chunked in tiles of 64 query rows x up to 256
 * keys, with fill value 0 (hook_pattern) or -inf (hook_attn_scores); a block's
 * tiles that hold nothing but the fill (the causal upper triangle) are not
 * written, and read back as the fill.
 *
 * Writer thread: when HDF5 is thread-safe (H5is_library_threadsafe),
 * params.sync_writes is 0 and a core is spare beside the forward's OpenMP
 * threads (the process's CPUs outnumber omp_get_max_threads(); or
 * params.writer_thread is 1), each callback copies its view into a bounded queue
 * (at most 4 views and 64 MiB of copies, or one view when a single view is
 * larger) and returns; one writer thread makes the HDF5 writes while the
 * forward computes. A failed write (ENOSPC, EFBIG...) fails the next callback
 * (the forward then returns MP_ERR_HOOK with the writer's message) and, in any
 * case, mp_h5run_flush and mp_h5run_commit (which then removes the temporary
 * file). Every other mp_h5run / mp_h5ds call waits for the queue first. With
 * every core computing there is nothing to overlap with: a writer thread
 * would only preempt one of the forward's threads (and stall the other at
 * the next barrier), so then the writes stay on the caller's thread (on 2
 * cores the two ways measured the same within noise). Blocks of whole
 * attention-map tiles are written with H5Dwrite_chunk (POSIX driver, no
 * compression): packed once, no gather, no chunk cache. On the caller's
 * thread, with the run file's O_DIRECT driver (h5stream.h) and tiles of 4 KiB
 * multiples, the tiles are packed by the forward's OpenMP threads (idle
 * while a hook runs) straight into staging buffers the driver lends, which
 * its I/O thread writes: one copy from the view to the disk (params.no_lend:
 * packed one by one and copied into the staging, as the writer thread does).
 * Blocks made of whole chunks, each contiguous in the view (the [B,T,...]
 * views chunked along T), are written with H5Dwrite_chunk too, from the view.
 * Every 16 MiB written starts the kernel's write-back (page-cache path) and
 * the driver's fdatasyncs (O_DIRECT path), so commit's fsync finds little
 * left. */
mp_status mp_h5run_capture(mp_h5run *run, mp_hooks *hooks, const struct mp_config *cfg, const char *globs,
                           int B, int T);
/* Waits until every captured view is written; returns the first write error
 * of the writer thread (it also stays for commit). */
mp_status mp_h5run_flush(mp_h5run *run);

#endif
