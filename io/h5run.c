/* h5run.c — the HDF5 run-file writer: atomic creation, root and /model
 * attributes, /tokens, float32 datasets chunked along T and written in blocks,
 * and the capture adapter that streams hook views into /acts/<hook name>
 * (packed straight into the O_DIRECT driver's staging buffers, or through a
 * writer thread where HDF5 is thread-safe and a core is spare, so the forward
 * computes while the disk writes), leaving unwritten the attention-map tiles
 * that hold only the fill value. */
#define _GNU_SOURCE /* sync_file_range */
#include "h5run.h"
#include "h5stream.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "h5config.h"
#include "h5io.h"
#include "config.h"

struct mp_h5ds {
    mp_h5run *run;
    hid_t id;
    hid_t fspace;  /* the dataset's file dataspace (selection reset per write) */
    char *path;
    int ndim;
    int64_t shape[MP_H5_MAXDIM];
    int t_axis;    /* axis chunked along / placed at pos0 by the capture */
    int tiled;     /* attention map [B,H,T,S] chunked in tiles: a block's key
                      columns past its last non-fill value are not written */
    uint32_t fill_bits; /* the fill value's bits (tiled datasets) */
    int64_t tile_cols;  /* chunk width along S (tiled datasets) */
    int64_t tile_rows;  /* chunk height along T (tiled datasets) */
    int direct;         /* tiled, unfiltered, POSIX driver: whole tiles go to the file
                           with H5Dwrite_chunk (no gather, no chunk cache) */
    int whole;          /* chunked, not tiled, unfiltered, POSIX driver: blocks made of whole chunks,
                           each contiguous in the block, go to the file with H5Dwrite_chunk */
    int64_t chunk[MP_H5_MAXDIM]; /* the chunk dimensions (whole) */
    mp_h5ds *next;
};

/* The capture's writer thread: a bounded queue of copied hook views. Every
 * HDF5 call of a write happens on that thread while it runs (the library is
 * thread-safe in Debian's build, which serialises it against any HDF5 call of
 * other threads; without that the writes stay on the caller's thread). */
#define WQ_SLOTS 4                       /* views queued or being written */
#define WQ_BYTES ((size_t)64 << 20)      /* their buffers together, unless one view is larger */
typedef struct {
    mp_h5ds *ds;
    int64_t off[MP_H5_MAXDIM], cnt[MP_H5_MAXDIM];
    int64_t tiles; /* > 0: data holds the block packed as this many tiles per
                      [b,h] (pack_tiles); 0: the block as the view laid it out */
    float *data;
    size_t cap;  /* floats allocated behind data */
    int busy;    /* queued or being written */
} wq_slot;

typedef struct {
    pthread_t thread;
    int started, stop;
    int drop;    /* the file is being thrown away: queued views are not written */
    pthread_mutex_t mu;
    pthread_cond_t job, freed;
    wq_slot slot[WQ_SLOTS];
    int order[WQ_SLOTS], head, n;  /* FIFO of queued slot indices */
    int busy;                      /* slots queued or being written */
    size_t cap_total;              /* floats allocated in all slots */
    mp_status err;                 /* the first failed write, kept for the caller */
    char msg[1024];
} wqueue;

struct mp_h5run {
    mp_h5_atomic at;
    mp_h5run_params p;
    mp_h5ds *ds;   /* every dataset created, newest first */
    wqueue *wq;    /* NULL: writes happen on the calling thread */
    float *tile;   /* one tile, packed for a direct write on the calling thread */
    size_t tile_cap;
    mp_h5_stream *stream; /* the file's O_DIRECT driver, which lends staging buffers (NULL: none) */
    size_t wb_since; /* bytes of dataset writes since the kernel's write-back was last started */
};

static mp_status ds_write(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data);
static void note_written(mp_h5run *run, size_t bytes);
static mp_status wq_drain(mp_h5run *run);
static void wq_stop(mp_h5run *run);

mp_h5run_params mp_h5run_params_default(void) {
    mp_h5run_params p;
    memset(&p, 0, sizeof p);
    p.chunk_bytes = (size_t)1 << 20;
    return p;
}

hid_t mp_h5run_file(mp_h5run *run) {
    if (!run) return H5I_INVALID_HID;
    wq_drain(run); /* the caller's writes follow every queued one (an error stays for commit) */
    return run->at.file;
}
const char *mp_h5run_path(const mp_h5run *run) { return run && run->at.path ? run->at.path : "?"; }

/* Closes every dataset; returns 0, or -1 when a close failed (closing
 * writes the chunks HDF5 still caches: a full disk shows up here). */
static int free_datasets(mp_h5run *run) {
    int bad = 0;
    for (mp_h5ds *d = run->ds, *next; d; d = next) {
        next = d->next;
        if (d->fspace >= 0) H5Sclose(d->fspace);
        if (d->id >= 0 && H5Dclose(d->id) < 0 && !bad) bad = -1;
        free(d->path);
        free(d);
    }
    run->ds = NULL;
    return bad;
}

void mp_h5run_abort(mp_h5run *run) {
    if (!run) return;
    if (run->wq && run->wq->started) { /* the queued views would go into a file about to be deleted (and past a
                                        * file-size limit, SIGXFSZ would kill the process): dropped */
        pthread_mutex_lock(&run->wq->mu);
        run->wq->drop = 1;
        pthread_mutex_unlock(&run->wq->mu);
    }
    wq_stop(run);
    /* closing a dataset writes its cached chunks: into memory from here on, so
     * no close fails (libhdf5 leaks the chunks of a close that failed) */
    mp_h5_discard_writes(run->at.file);
    free_datasets(run);
    mp_h5_atomic_abort(&run->at);
    free(run->tile);
    free(run);
}

mp_status mp_h5run_commit(mp_h5run *run) {
    if (!run) return mp_error(MP_ERR_ARG, "mp_h5run_commit: no run");
    mp_status st = wq_drain(run);
    wq_stop(run);
    if (st != MP_OK) { /* a captured view was not written: no final file */
        mp_h5run_abort(run);
        return st;
    }
    /* write the cached chunks while a failure (full disk) can still be undone */
    for (mp_h5ds *d = run->ds; d; d = d->next) {
        if (d->id >= 0 && H5Dflush(d->id) < 0) {
            st = mp_h5_error(MP_ERR_IO, "%s: cannot write (%s)", mp_h5run_path(run), d->path);
            mp_h5run_abort(run);
            return st;
        }
    }
    if (free_datasets(run) < 0) {
        st = mp_h5_error(MP_ERR_IO, "%s: cannot write (closing its datasets)", mp_h5run_path(run));
        mp_h5run_abort(run);
        return st;
    }
    st = mp_h5_atomic_commit(&run->at);
    free(run->tile);
    free(run);
    return st;
}

mp_status mp_h5run_create(mp_h5run **out, const char *path, const mp_h5run_params *p) {
    mp_status st;
    *out = NULL;
    mp_h5run_params def = mp_h5run_params_default();
    if (!p) p = &def;
    if (p->compress < 0 || p->compress > 9)
        return mp_error(MP_ERR_ARG, "%s: compression level %d outside 0..9", path ? path : "?", p->compress);
    mp_h5run *run = mp_calloc(1, sizeof *run, "a run file");
    if (!run) return MP_ERR_NOMEM;
    run->p = *p;
    if (!run->p.chunk_bytes) run->p.chunk_bytes = def.chunk_bytes;
    if ((st = mp_h5_atomic_create(&run->at, path)) != MP_OK) goto cleanup;
    hid_t f = run->at.file;
    run->stream = mp_h5_stream_of(f);
    if ((st = mp_h5_attr_set_string(f, "/", "format", "mechprobe.run")) != MP_OK) goto cleanup;
    if ((st = mp_h5_attr_set_int(f, "/", "version", 1)) != MP_OK) goto cleanup;
    if ((st = mp_h5_attr_set_string(f, "/", "mechprobe_version", MP_VERSION)) != MP_OK) goto cleanup;
    if (p->has_seed && (st = mp_h5_attr_set_int(f, "/", "seed", p->seed)) != MP_OK) goto cleanup;
cleanup:
    if (st != MP_OK) {
        mp_h5run_abort(run);
        return st;
    }
    *out = run;
    return MP_OK;
}

mp_status mp_h5run_write_model(mp_h5run *run, const mp_config *c, const char *source, const char *tokenizer) {
    mp_status st = wq_drain(run);
    if (st != MP_OK) return st;
    return mp_h5_write_model_attrs(run->at.file, run->at.path, c, source, tokenizer);
}

mp_status mp_h5run_write_device(mp_h5run *run, const char *device, const char *precision) {
    mp_status st = wq_drain(run);
    if (st == MP_OK) st = mp_h5_attr_set_string(run->at.file, "/", "device", device);
    if (st == MP_OK) st = mp_h5_attr_set_string(run->at.file, "/", "precision", precision);
    return st;
}

mp_status mp_h5_write_model_attrs(hid_t f, const char *what, const mp_config *c, const char *source,
                                  const char *tokenizer) {
    mp_status st = MP_OK;
    if (!mp_h5_exists(f, "/model", NULL)) {
        hid_t g = H5Gcreate2(f, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) return mp_h5_error(MP_ERR_HDF5, "%s: /model: cannot create group", what);
        H5Gclose(g);
    }
    /* the same fields and values as a checkpoint's /config (one loop over MP_CONFIG_TABLE) */
    st = mp_h5_config_write(f, "/model", c, tokenizer);
    if (st == MP_OK) st = mp_h5_attr_set_string(f, "/model", "source", source ? source : "");
    return st;
}

/* An int32 [B,T] dataset written whole (unchunked). */
static mp_status write_int_bt(mp_h5run *run, const char *path, const int *data, int B, int T) {
    if (B < 0 || T < 0) return mp_error(MP_ERR_ARG, "%s: %s: bad shape [%d,%d]", run->at.path, path, B, T);
    int64_t shape[2] = {B, T};
    hid_t ds;
    mp_status st = wq_drain(run);
    if (st != MP_OK) return st;
    st = mp_h5_create_dataset(run->at.file, path, H5T_NATIVE_INT, 2, shape, NULL, 0, NULL, &ds);
    if (st != MP_OK) return st;
    if ((int64_t)B * T > 0 && H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", run->at.path, path);
    if (H5Dclose(ds) < 0 && st == MP_OK) st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", run->at.path, path);
    return st;
}

mp_status mp_h5run_write_tokens(mp_h5run *run, const int *tokens, int B, int T) {
    return write_int_bt(run, "/tokens", tokens, B, T);
}

mp_status mp_h5run_write_mask(mp_h5run *run, const int *mask, int B, int T) {
    return write_int_bt(run, "/attention_mask", mask, B, T);
}

/* Tiles of an attention map [B,H,T,S]: 64 query rows (the forward's default
 * block, so a block fills whole tiles) by at most 256 key columns (64 KiB),
 * the columns split evenly (S = 300: two tiles of 150, not 256 + 44 stored
 * as 256), so that the masked upper triangle falls into tiles never written.
 * A smaller chunk target narrows the tiles (tests use a few bytes). */
#define TILE_ROWS 64
#define TILE_COLS 256

/* Whether the file goes through a POSIX driver (HDF5's sec2 or mechprobe's
 * stream driver, h5stream.h): direct chunk writes and the early write-back
 * need it (not MPI-IO). */
static int file_is_posix(hid_t file) {
    hid_t fapl = H5Fget_access_plist(file);
    hid_t drv = fapl >= 0 ? H5Pget_driver(fapl) : H5I_INVALID_HID;
    int sec2 = drv >= 0 && (drv == H5FD_SEC2 || drv == mp_h5_stream_driver());
    if (fapl >= 0) H5Pclose(fapl);
    H5Eclear2(H5E_DEFAULT);
    return sec2;
}
static void tile_dims(const int64_t *shape, size_t target, int64_t *chunk) {
    int64_t rows = shape[2] < TILE_ROWS ? shape[2] : TILE_ROWS;
    int64_t most = (int64_t)(target / sizeof(float)) / (rows > 0 ? rows : 1);
    if (most > TILE_COLS) most = TILE_COLS;
    if (most < 1) most = 1;
    int64_t n = (shape[3] + most - 1) / most; /* tiles per row */
    int64_t cols = n > 0 ? (shape[3] + n - 1) / n : 1;
    chunk[0] = chunk[1] = 1;
    chunk[2] = rows;
    chunk[3] = cols > 0 ? cols : 1;
}

/* mp_h5run_dataset with an optional fill value for never-written elements;
 * tiled: an attention map chunked by tile_dims, blocks written up to their
 * last non-fill column (needs fill). */
static mp_status run_dataset(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                             const float *fill, int tiled, mp_h5ds **out) {
    mp_status st = MP_OK;
    int64_t chunk[MP_H5_MAXDIM];
    *out = NULL;
    if (ndim < 0 || ndim > MP_H5_MAXDIM || t_axis < -1 || t_axis >= (ndim ? ndim : 1))
        return mp_error(MP_ERR_ARG, "%s: %s: bad rank %d or T axis %d", run->at.path, path, ndim, t_axis);
    if ((st = wq_drain(run)) != MP_OK) return st; /* queued writes may still use a dataset replaced here */
    tiled = tiled && fill && ndim == 4 && t_axis == 2;
    int chunked = ndim > 0 &&
                  mp_h5_chunk_dims(ndim, shape, t_axis, sizeof(float), run->p.chunk_bytes, chunk) == 0;
    if (chunked && tiled) tile_dims(shape, run->p.chunk_bytes, chunk);
    tiled = tiled && chunked;
    mp_h5ds *d = mp_calloc(1, sizeof *d, "a run dataset");
    if (!d) return MP_ERR_NOMEM;
    d->id = d->fspace = H5I_INVALID_HID;
    d->run = run;
    d->ndim = ndim;
    d->t_axis = t_axis < 0 ? 0 : t_axis;
    memcpy(d->shape, shape, (size_t)ndim * sizeof *shape);
    if (tiled) {
        d->tiled = 1;
        memcpy(&d->fill_bits, fill, sizeof d->fill_bits);
        d->tile_cols = chunk[3];
        d->tile_rows = chunk[2];
        d->direct = run->p.compress == 0 && file_is_posix(run->at.file);
    } else if (chunked && run->p.compress == 0 && file_is_posix(run->at.file)) {
        d->whole = 1;
        memcpy(d->chunk, chunk, (size_t)ndim * sizeof *chunk);
    }
    d->path = strdup(path);
    if (!d->path) { st = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
    /* Replacing a dataset this run created: drop our handle on the old one. */
    for (mp_h5ds **pp = &run->ds; *pp;) {
        mp_h5ds *o = *pp;
        if (strcmp(o->path, path) == 0) {
            *pp = o->next;
            if (o->fspace >= 0) H5Sclose(o->fspace);
            if (o->id >= 0) H5Dclose(o->id);
            free(o->path);
            free(o);
        } else {
            pp = &o->next;
        }
    }
    st = mp_h5_create_dataset(run->at.file, path, H5T_NATIVE_FLOAT, ndim, shape, chunked ? chunk : NULL,
                              chunked ? run->p.compress : 0, fill, &d->id);
    if (st != MP_OK) goto cleanup;
    d->fspace = H5Dget_space(d->id);
    if (d->fspace < 0) { st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot get dataspace", run->at.path, path); goto cleanup; }
cleanup:
    if (st != MP_OK) {
        if (d->fspace >= 0) H5Sclose(d->fspace);
        if (d->id >= 0) H5Dclose(d->id);
        free(d->path);
        free(d);
        return st;
    }
    d->next = run->ds;
    run->ds = d;
    *out = d;
    return MP_OK;
}

mp_status mp_h5run_dataset(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                           mp_h5ds **ds) {
    return run_dataset(run, path, ndim, shape, t_axis, NULL, 0, ds);
}

static void fmt_block(char *buf, size_t n, int ndim, const int64_t *off, const int64_t *cnt) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld:%lld", i ? "," : "", (long long)off[i],
                              (long long)(off[i] + cnt[i]));
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* The bounds check of a block against the dataset: MP_OK or MP_ERR_ARG. */
static mp_status check_block(const mp_h5ds *ds, const int64_t *offset, const int64_t *count) {
    for (int i = 0; i < ds->ndim; i++) {
        if (offset[i] < 0 || count[i] < 0 || offset[i] > ds->shape[i] || count[i] > ds->shape[i] - offset[i]) {
            char blk[256], shp[160];
            int64_t zero[MP_H5_MAXDIM] = {0};
            fmt_block(blk, sizeof blk, ds->ndim, offset, count);
            fmt_block(shp, sizeof shp, ds->ndim, zero, ds->shape);
            return mp_error(MP_ERR_ARG, "%s: %s: block %s lies outside the dataset %s", ds->run->at.path, ds->path,
                            blk, shp);
        }
    }
    return MP_OK;
}

/* Key columns [0, n) of a tiled block [.., rows, S] that must be written:
 * every tile (of any row) that holds a value whose bits differ from the fill,
 * i.e. up to the last such tile. Tiles past it hold only the fill, which HDF5
 * returns for chunks never written: the file reads back the same values
 * either way. Tiles are compared with memcmp against a row of fill values
 * (vectorised in glibc; this runs on the writer thread, beside the forward). */
static int64_t tiled_cols(const mp_h5ds *ds, const int64_t *count, const float *data) {
    enum { FILL_N = 1024 };
    uint32_t fillrow[FILL_N];
    for (int i = 0; i < FILL_N; i++) fillrow[i] = ds->fill_bits;
    const int64_t S = count[3], rows = count[0] * count[1] * count[2], tc = ds->tile_cols;
    const int64_t ntiles = (S + tc - 1) / tc;
    int64_t need = 0; /* tiles needed so far (by any row) */
    for (int64_t r = 0; r < rows && need < ntiles; r++) {
        const float *row = data + r * S;
        for (int64_t t = ntiles - 1; t >= need; t--) {
            int64_t c0 = t * tc, c1 = c0 + tc < S ? c0 + tc : S, differs = 0;
            for (int64_t c = c0; c < c1 && !differs; c += FILL_N) {
                int64_t len = c1 - c < FILL_N ? c1 - c : FILL_N;
                differs = memcmp(row + c, fillrow, (size_t)len * sizeof(float)) != 0;
            }
            if (differs) {
                need = t + 1;
                break;
            }
        }
    }
    return need * tc < S ? need * tc : S;
}

/* ---- whole tiles of an attention map ---- */

/* Whether block (offset, count) of a tiled dataset goes to the file as whole
 * tiles (H5Dwrite_chunk): a direct dataset, every key column, query rows that
 * start on a tile boundary and fill the tile or end the dataset. The
 * forward's 64-row attention blocks are such blocks; others take H5Dwrite. */
static int block_is_tiles(const mp_h5ds *ds, const int64_t *offset, const int64_t *count) {
    return ds->direct && offset[3] == 0 && count[3] == ds->shape[3] && count[2] > 0 &&
           offset[2] % ds->tile_rows == 0 &&
           (count[2] == ds->tile_rows || (count[2] < ds->tile_rows && offset[2] + count[2] == ds->shape[2]));
}

/* Packs tile t of one [b,h] slab ([rows, S] floats) into dst [tile_rows,
 * tile_cols]: the slab's columns of that tile, then the fill past the last
 * column and below the last row (outside the dataset; HDF5 never returns it). */
static void pack_tile(const mp_h5ds *ds, const float *slab, int64_t rows, int64_t S, int64_t t, float *dst) {
    const int64_t R = ds->tile_rows, C = ds->tile_cols, c0 = t * C, n = S - c0 < C ? S - c0 : C;
    for (int64_t r = 0; r < R; r++) {
        float *d = dst + r * C;
        int64_t k = 0;
        if (r < rows) {
            memcpy(d, slab + r * S + c0, (size_t)n * sizeof(float));
            k = n;
        }
        for (; k < C; k++) memcpy(d + k, &ds->fill_bits, sizeof(float));
    }
}

/* Writes one packed tile whose first element is (b, h, q0, t * tile_cols). */
static mp_status write_tile(mp_h5ds *ds, int64_t b, int64_t h, int64_t q0, int64_t t, const float *tile) {
    hsize_t off[4] = {(hsize_t)b, (hsize_t)h, (hsize_t)q0, (hsize_t)(t * ds->tile_cols)};
    size_t bytes = (size_t)(ds->tile_rows * ds->tile_cols) * sizeof(float);
    if (H5Dwrite_chunk(ds->id, H5P_DEFAULT, 0, off, bytes, tile) < 0)
        return mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", ds->run->at.path, ds->path);
    note_written(ds->run, bytes);
    return MP_OK;
}

/* Tiles per [b,h] slab of a block that must be written (tiled_cols). */
static int64_t block_tiles(const mp_h5ds *ds, const int64_t *count, const float *data) {
    int64_t cols = tiled_cols(ds, count, data);
    return (cols + ds->tile_cols - 1) / ds->tile_cols;
}

/* write_tiles from a block as the view laid it out, through buffers lent by
 * the file's driver (h5stream.h): the tiles are packed straight into them,
 * by the forward's OpenMP threads (idle while a hook runs), and HDF5 hands
 * the driver pointers into them, so the bytes are copied once on their way
 * to the disk. -1: no buffer could be lent, nothing written; else the status. */
static int write_tiles_lent(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data,
                            int64_t tiles, mp_status *out) {
    mp_h5run *run = ds->run;
    const size_t tile_n = (size_t)(ds->tile_rows * ds->tile_cols), tile_b = tile_n * sizeof(float);
    const int64_t slab = count[2] * count[3], total = count[0] * count[1] * tiles;
    const int64_t per = (int64_t)(mp_h5_stream_lend_max() / tile_b);
    mp_status st = MP_OK;
    for (int64_t k0 = 0; k0 < total && st == MP_OK; k0 += per) {
        const int64_t n = total - k0 < per ? total - k0 : per;
        char *buf = mp_h5_stream_lend(run->stream, (size_t)n * tile_b);
        if (!buf) {
            if (k0 == 0) return -1;
            /* the rest tile by tile through the run's tile buffer */
            for (int64_t k = k0; k < total && st == MP_OK; k++) {
                pack_tile(ds, data + (k / tiles) * slab, count[2], count[3], k % tiles, run->tile);
                st = write_tile(ds, offset[0] + (k / tiles) / count[1], offset[1] + (k / tiles) % count[1], offset[2],
                                k % tiles, run->tile);
            }
            break;
        }
#pragma omp parallel for schedule(static) if (n > 1)
        for (int64_t k = k0; k < k0 + n; k++)
            pack_tile(ds, data + (k / tiles) * slab, count[2], count[3], k % tiles,
                      (float *)(buf + (size_t)(k - k0) * tile_b));
        for (int64_t k = k0; k < k0 + n && st == MP_OK; k++)
            st = write_tile(ds, offset[0] + (k / tiles) / count[1], offset[1] + (k / tiles) % count[1], offset[2],
                            k % tiles, (const float *)(buf + (size_t)(k - k0) * tile_b));
        mp_h5_stream_hand_back(run->stream, buf);
    }
    *out = st;
    return 0;
}

/* Writes the first `tiles` tiles of every [b,h] slab of a block: packed in
 * `packed` (tiles in slab order) or, when NULL, packed from the block as the
 * view laid it out: into buffers lent by the driver (write_tiles_lent) or
 * one by one into the run's tile buffer. */
static mp_status write_tiles(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data,
                             const float *packed, int64_t tiles) {
    mp_h5run *run = ds->run;
    const size_t tile_n = (size_t)(ds->tile_rows * ds->tile_cols);
    if (!packed && run->tile_cap < tile_n) {
        float *p = realloc(run->tile, tile_n * sizeof(float));
        if (!p) return mp_error(MP_ERR_NOMEM, "%s: out of memory for a tile of %s", run->at.path, ds->path);
        run->tile = p;
        run->tile_cap = tile_n;
    }
    mp_status st;
    if (!packed && run->stream && !run->p.no_lend && tile_n * sizeof(float) % 4096 == 0 &&
        tile_n * sizeof(float) <= mp_h5_stream_lend_max() && write_tiles_lent(ds, offset, count, data, tiles, &st) == 0)
        return st;
    const int64_t slab = count[2] * count[3];
    for (int64_t i = 0; i < count[0] * count[1]; i++)
        for (int64_t t = 0; t < tiles; t++) {
            const float *tile = packed ? packed + ((size_t)i * tiles + t) * tile_n : run->tile;
            if (!packed) pack_tile(ds, data + i * slab, count[2], count[3], t, run->tile);
            st = write_tile(ds, offset[0] + i / count[1], offset[1] + i % count[1], offset[2], t, tile);
            if (st != MP_OK) return st;
        }
    return MP_OK;
}

/* A block made of whole chunks of a `whole` dataset, each contiguous in the
 * block (chunk extent 1 on the axes before some axis k, the block's extent on
 * those after it; the capture's [B,T,...] views chunked along T are such
 * blocks), written chunk by chunk with H5Dwrite_chunk straight from the
 * block: no gather into HDF5's chunk cache, and each chunk goes to the
 * driver's staging when written instead of when evicted (at commit, for the
 * last chunks). -1: not such a block, nothing written; else 0 with the
 * status in *out. */
static int write_whole_chunks(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data,
                              mp_status *out) {
    const int n = ds->ndim;
    int k = 0;
    while (k < n && ds->chunk[k] == 1) k++;
    if (k == n) k = n - 1;
    size_t chunk_n = 1;
    for (int i = 0; i < n; i++) {
        if (offset[i] % ds->chunk[i] || count[i] % ds->chunk[i] || count[i] == 0) return -1;
        if (i > k && count[i] != ds->chunk[i]) return -1;
        chunk_n *= (size_t)ds->chunk[i];
    }
    /* chunks: along the axes before k one per index, along k count[k] / chunk[k] */
    int64_t nchunks = count[k] / ds->chunk[k];
    for (int i = 0; i < k; i++) nchunks *= count[i];
    hsize_t off[MP_H5_MAXDIM];
    mp_status st = MP_OK;
    for (int64_t c = 0; c < nchunks && st == MP_OK; c++) {
        /* chunk c's first element: its index along k and the axes before, row-major */
        int64_t rest = c;
        off[k] = (hsize_t)(offset[k] + rest % (count[k] / ds->chunk[k]) * ds->chunk[k]);
        rest /= count[k] / ds->chunk[k];
        for (int i = k - 1; i >= 0; i--) {
            off[i] = (hsize_t)(offset[i] + rest % count[i]);
            rest /= count[i];
        }
        for (int i = k + 1; i < n; i++) off[i] = (hsize_t)offset[i];
        /* the chunks are consecutive in the block: chunk c starts c chunks in */
        if (H5Dwrite_chunk(ds->id, H5P_DEFAULT, 0, off, chunk_n * sizeof(float), data + (size_t)c * chunk_n) < 0)
            st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", ds->run->at.path, ds->path);
        else
            note_written(ds->run, chunk_n * sizeof(float));
    }
    *out = st;
    return 0;
}

/* Writes a checked block (on the writer thread while one runs). */
static mp_status ds_write(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data) {
    hsize_t start[MP_H5_MAXDIM], cnt[MP_H5_MAXDIM], fcnt[MP_H5_MAXDIM], zero[MP_H5_MAXDIM] = {0};
    int64_t numel = 1;
    mp_h5_init();
    for (int i = 0; i < ds->ndim; i++) {
        start[i] = (hsize_t)offset[i];
        fcnt[i] = cnt[i] = (hsize_t)count[i];
        numel *= count[i];
    }
    if (numel == 0) return MP_OK;
    if (block_is_tiles(ds, offset, count)) return write_tiles(ds, offset, count, data, NULL, block_tiles(ds, count, data));
    mp_status whole_st;
    if (ds->whole && write_whole_chunks(ds, offset, count, data, &whole_st) == 0) return whole_st;
    if (ds->tiled && offset[3] == 0) {
        int64_t cols = tiled_cols(ds, count, data);
        if (cols == 0) return MP_OK;
        fcnt[3] = (hsize_t)cols;
    }
    mp_status st = MP_OK;
    hid_t mspace = ds->ndim ? H5Screate_simple(ds->ndim, cnt, NULL) : H5Screate(H5S_SCALAR);
    if (mspace < 0 || (ds->ndim && H5Sselect_hyperslab(ds->fspace, H5S_SELECT_SET, start, NULL, fcnt, NULL) < 0) ||
        (ds->ndim && fcnt[ds->ndim - 1] != cnt[ds->ndim - 1] &&
         H5Sselect_hyperslab(mspace, H5S_SELECT_SET, zero, NULL, fcnt, NULL) < 0) ||
        (!ds->ndim && H5Sselect_all(ds->fspace) < 0) ||
        H5Dwrite(ds->id, H5T_NATIVE_FLOAT, mspace, ds->fspace, H5P_DEFAULT, data) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", ds->run->at.path, ds->path);
    if (mspace >= 0) H5Sclose(mspace);
    if (st == MP_OK) {
        size_t bytes = sizeof(float);
        for (int i = 0; i < ds->ndim; i++) bytes *= (size_t)fcnt[i];
        note_written(ds->run, bytes);
    }
    return st;
}

mp_status mp_h5ds_write(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data) {
    mp_status st = check_block(ds, offset, count);
    if (st == MP_OK) st = wq_drain(ds->run); /* keep the order of writes the caller sees */
    if (st == MP_OK) st = ds_write(ds, offset, count, data);
    return st;
}

mp_status mp_h5run_write_f32(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                             const float *data) {
    mp_h5ds *ds;
    int64_t zero[MP_H5_MAXDIM] = {0};
    mp_status st = mp_h5run_dataset(run, path, ndim, shape, t_axis, &ds);
    if (st != MP_OK) return st;
    return mp_h5ds_write(ds, zero, shape, data);
}

/* ---- the writer thread ---- */

/* Starts the kernel's write-back of what the file has so far (not waiting for
 * it), so that commit's fsync finds little left to write: the disk works
 * while the forward computes. Only for HDF5's POSIX driver; best effort. */
static void start_writeback(hid_t file) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    void *h = NULL;
    if (file_is_posix(file) && H5Fget_vfd_handle(file, H5P_DEFAULT, &h) >= 0 && h) sync_file_range(*(int *)h, 0, 0, SYNC_FILE_RANGE_WRITE);
    H5Eclear2(H5E_DEFAULT);
#else
    (void)file;
#endif
}

#define WQ_WRITEBACK ((size_t)16 << 20) /* bytes written between two write-back starts */

/* Counts bytes written to datasets (on whichever thread makes the HDF5
 * writes) and starts the write-back every WQ_WRITEBACK of them. */
static void note_written(mp_h5run *run, size_t bytes) {
    if ((run->wb_since += bytes) >= WQ_WRITEBACK) {
        start_writeback(run->at.file);
        run->wb_since = 0;
    }
}

static void *wq_main(void *u) {
    mp_h5run *run = u;
    wqueue *w = run->wq;
    mp_h5_bg_lock(); /* every HDF5 call of this thread holds it (a fork waits for it) */
    mp_h5_init();
    mp_h5_bg_unlock();
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->n == 0 && !w->stop) pthread_cond_wait(&w->job, &w->mu);
        if (w->n == 0) break;
        wq_slot *s = &w->slot[w->order[w->head]];
        w->head = (w->head + 1) % WQ_SLOTS;
        w->n--;
        int failed = w->err != MP_OK || w->drop; /* after a failure or an abort the rest is dropped */
        pthread_mutex_unlock(&w->mu);
        mp_status st = MP_OK;
        if (!failed) {
            mp_h5_bg_lock();
            /* both start the write-back as they go */
            st = s->tiles ? write_tiles(s->ds, s->off, s->cnt, NULL, s->data, s->tiles)
                          : ds_write(s->ds, s->off, s->cnt, s->data);
            mp_h5_bg_unlock();
        }
        char msg[sizeof w->msg];
        if (st != MP_OK) snprintf(msg, sizeof msg, "%s", mp_last_error());
        pthread_mutex_lock(&w->mu);
        if (st != MP_OK && w->err == MP_OK) {
            w->err = st;
            memcpy(w->msg, msg, sizeof msg);
        }
        s->busy = 0;
        w->busy--;
        pthread_cond_broadcast(&w->freed);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Sets the writer's first error as the calling thread's message. */
static mp_status wq_error(wqueue *w) { return mp_error(w->err, "%s", w->msg); }

/* Waits until every queued view is written; returns the writer's error, if
 * any (it stays, so that commit fails too). */
static mp_status wq_drain(mp_h5run *run) {
    wqueue *w = run->wq;
    if (!w || !w->started) return w && w->err ? wq_error(w) : MP_OK;
    pthread_mutex_lock(&w->mu);
    while (w->busy > 0) pthread_cond_wait(&w->freed, &w->mu);
    mp_status st = w->err;
    pthread_mutex_unlock(&w->mu);
    return st != MP_OK ? wq_error(w) : MP_OK;
}

/* Drains, joins and frees the writer (its error is dropped: drain first). */
static void wq_stop(mp_h5run *run) {
    wqueue *w = run->wq;
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_broadcast(&w->job);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->job);
    pthread_cond_destroy(&w->freed);
    for (int i = 0; i < WQ_SLOTS; i++) free(w->slot[i].data);
    free(w);
    run->wq = NULL;
}

/* A free slot with room for n floats into *out (waits while the queue is full
 * or the buffers would pass WQ_BYTES); the writer's error when it failed. */
static mp_status wq_acquire(mp_h5run *run, size_t n, wq_slot **out) {
    wqueue *w = run->wq;
    wq_slot *s = NULL;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (w->err != MP_OK) break;
        for (int i = 0; i < WQ_SLOTS && !s; i++) /* a free slot whose buffer fits */
            if (!w->slot[i].busy && w->slot[i].cap >= n) s = &w->slot[i];
        for (int i = 0; i < WQ_SLOTS && !s; i++)
            if (!w->slot[i].busy) s = &w->slot[i];
        if (s) {
            size_t grow = s->cap < n ? n - s->cap : 0;
            if (grow == 0 || (w->cap_total + grow) * sizeof(float) <= WQ_BYTES) break;
            if (w->busy == 0) { /* one view larger than the budget: it alone */
                for (int i = 0; i < WQ_SLOTS; i++)
                    if (&w->slot[i] != s) {
                        w->cap_total -= w->slot[i].cap;
                        free(w->slot[i].data);
                        w->slot[i].data = NULL;
                        w->slot[i].cap = 0;
                    }
                break;
            }
            s = NULL;
        }
        pthread_cond_wait(&w->freed, &w->mu);
    }
    if (s) {
        s->busy = 1;
        w->busy++;
    }
    pthread_mutex_unlock(&w->mu);
    if (!s) return wq_error(w);
    if (s->cap < n) {
        float *p = realloc(s->data, n * sizeof(float));
        pthread_mutex_lock(&w->mu);
        if (p) {
            w->cap_total += n - s->cap;
            s->data = p;
            s->cap = n;
        } else {
            s->busy = 0;
            w->busy--;
            pthread_cond_broadcast(&w->freed);
        }
        pthread_mutex_unlock(&w->mu);
        if (!p)
            return mp_error(MP_ERR_NOMEM, "%s: out of memory for the capture's write queue (%zu MiB)", run->at.path,
                            n * sizeof(float) >> 20);
    }
    *out = s;
    return MP_OK;
}

/* Queues a copy of a checked block for the writer thread (started on the
 * first one); writes it here when the run has no writer. */
static mp_status wq_write(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data) {
    mp_h5run *run = ds->run;
    wqueue *w = run->wq;
    if (!w) return ds_write(ds, offset, count, data);
    size_t n = 1;
    for (int i = 0; i < ds->ndim; i++) n *= (size_t)count[i];
    if (n == 0) return MP_OK;
    if (!w->started) {
        if (pthread_create(&w->thread, NULL, wq_main, run) != 0) { /* no thread: write here */
            wq_stop(run);
            return ds_write(ds, offset, count, data);
        }
        w->started = 1;
    }
    /* a block of whole tiles is queued packed (the tiles to write, each
     * contiguous as the file stores it): the copy skips the fill-only tiles
     * and the writer makes no gather */
    int64_t tiles = 0;
    if (block_is_tiles(ds, offset, count)) {
        if ((tiles = block_tiles(ds, count, data)) == 0) return MP_OK;
        n = (size_t)(count[0] * count[1] * tiles) * (size_t)(ds->tile_rows * ds->tile_cols);
    }
    wq_slot *s = NULL;
    mp_status st = wq_acquire(run, n, &s);
    if (st != MP_OK) return st;
    if (tiles) {
        const size_t tile_n = (size_t)(ds->tile_rows * ds->tile_cols);
        for (int64_t i = 0; i < count[0] * count[1]; i++)
            for (int64_t t = 0; t < tiles; t++)
                pack_tile(ds, data + i * count[2] * count[3], count[2], count[3], t,
                          s->data + ((size_t)i * tiles + t) * tile_n);
    } else {
        memcpy(s->data, data, n * sizeof(float));
    }
    s->tiles = tiles;
    s->ds = ds;
    memcpy(s->off, offset, (size_t)ds->ndim * sizeof *offset);
    memcpy(s->cnt, count, (size_t)ds->ndim * sizeof *count);
    pthread_mutex_lock(&w->mu);
    w->order[(w->head + w->n) % WQ_SLOTS] = (int)(s - w->slot);
    w->n++;
    pthread_cond_signal(&w->job);
    pthread_mutex_unlock(&w->mu);
    return MP_OK;
}

mp_status mp_h5run_flush(mp_h5run *run) {
    if (!run) return mp_error(MP_ERR_ARG, "mp_h5run_flush: no run");
    return wq_drain(run);
}

/* ---- capture adapter ---- */

/* Whether the process has a CPU beside the forward's OpenMP threads, on
 * which a writer thread overlaps HDF5 and the kernel's page-cache copy with
 * the forward instead of taking time from it. */
static int spare_core(void) {
    int threads = 1, cores = 0;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
#endif
    if (cores <= 0) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return cores > threads;
}

/* Writes one hook view at its place in /acts/<name>. */
static int capture_cb(void *user, const mp_hook_info *info, float *data) {
    mp_h5ds *ds = user;
    int64_t off[MP_H5_MAXDIM] = {0};
    if (info->ndim != ds->ndim) {
        mp_error(MP_ERR_ARG, "%s: %s: view of rank %d for a dataset of rank %d", ds->run->at.path, ds->path,
                 info->ndim, ds->ndim);
        return 1;
    }
    off[ds->t_axis] = info->pos0;
    if (info->axis >= 0 && info->axis < ds->ndim) off[info->axis] += info->offset;
    if (check_block(ds, off, info->shape) != MP_OK) return 1;
    return wq_write(ds, off, info->shape, data) != MP_OK;
}

typedef struct {
    mp_h5run *run;
    mp_hooks *hooks;
    const mp_config *cfg;
    int B, T;
    mp_status st;
} capture_ctx;

static void capture_visit(void *u, mp_hook_id id, int layer, const char *name) {
    capture_ctx *c = u;
    if (c->st != MP_OK) return;
    char path[192];
    int64_t shape[4];
    mp_h5ds *ds;
    static const float neg_inf = -INFINITY, zero = 0.0f;
    snprintf(path, sizeof path, "/acts/%s", name);
    int ndim = mp_hook_shape(c->cfg, id, c->B, c->T, 0, shape);
    int bhts = mp_hook_shape_kind[id] == MP_SHAPE_BHTS;
    int t_axis = bhts ? 2 : 1;
    /* Masked cells: scores -inf, pattern 0. Unwritten cells (tiles past the
     * causal diagonal, decode-time cells) read back alike. */
    const float *fill = id == MP_HOOK_ATTN_SCORES ? &neg_inf : id == MP_HOOK_PATTERN ? &zero : NULL;
    c->st = run_dataset(c->run, path, ndim, shape, t_axis, fill, bhts, &ds);
    if (c->st == MP_OK) c->st = mp_hooks_add_reader_at(c->hooks, id, layer, capture_cb, ds);
}

mp_status mp_h5run_capture(mp_h5run *run, mp_hooks *hooks, const mp_config *cfg, const char *globs, int B, int T) {
    char bad[256];
    if (!globs || !*globs) return mp_error(MP_ERR_ARG, "capture: no hook names given");
    if (B < 1 || T < 1) return mp_error(MP_ERR_ARG, "capture: bad batch shape B=%d T=%d", B, T);
    int n = mp_hook_select(cfg, globs, NULL, NULL, bad, sizeof bad);
    if (bad[0]) return mp_error(MP_ERR_ARG, "capture: hook name '%s' matches no hook point of this model", bad);
    if (n == 0) return mp_error(MP_ERR_ARG, "capture: hook names '%s' match no hook point", globs);
    capture_ctx c = {run, hooks, cfg, B, T, MP_OK};
    mp_hook_select(cfg, globs, capture_visit, &c, NULL, 0);
    if (c.st == MP_OK && !run->wq && !run->p.sync_writes && (run->p.writer_thread || spare_core())) {
        hbool_t ts = 0;
        /* HDF5 calls may move to another thread only when the library serialises them */
        if (H5is_library_threadsafe(&ts) >= 0 && ts) {
            wqueue *w = calloc(1, sizeof *w);
            if (w && pthread_mutex_init(&w->mu, NULL) == 0) {
                if (pthread_cond_init(&w->job, NULL) == 0) {
                    if (pthread_cond_init(&w->freed, NULL) == 0) {
                        run->wq = w;
                        w = NULL;
                    } else {
                        pthread_cond_destroy(&w->job);
                        pthread_mutex_destroy(&w->mu);
                    }
                } else {
                    pthread_mutex_destroy(&w->mu);
                }
            }
            free(w); /* none: the writes stay on this thread */
        }
    }
    return c.st;
}
