/* mp_common.h — status codes, error reporting and small helpers shared by every
 * mechprobe layer (runtime, hooks, analyze, plots, lua).
 *
 * Runtime failures return an mp_status and leave a human-readable message in a
 * thread-local buffer (mp_last_error). The message names the file or argument
 * and what is wrong, e.g. "model.bin: truncated: header says 4 layers (1.2 MB)
 * but the file has 900 KB". Programmer errors assert. Library code never exits.
 *
 * Constructor verbs: one per kind of object, so a name says who owns what.
 *   mp_X_new(&out, ...)     a heap object built from values in memory, released
 *                           with mp_X_free (mp_model_new, mp_model_new_random,
 *                           mp_tok_new, mp_tokenizer_new, mp_pretok_new,
 *                           mp_sampler_new, mp_hooks_new, mp_gguf_writer_new,
 *                           the tasks mp_mtd_new, mp_algebra_new, mp_retrieval_new);
 *   mp_X_load(&out, path)   the same kind of object read from a file, which is
 *                           not kept open (mp_model_load, mp_tok_load_hf, mp_text_load);
 *   mp_X_open(&out, path)   a handle that keeps a file open or mapped
 *                           (mp_gguf_open, mp_safetensors_open, mp_h5_open);
 *   mp_X_create(...)        a new file or dataset on disk (mp_h5run_create,
 *                           mp_h5_create_dataset, mp_h5cap_create);
 *   mp_X_init(&x, ...)      fills a caller-owned struct (and allocates its
 *                           buffers, released with mp_X_free): mp_kvcache_init,
 *                           mp_acts_init, mp_grads_init, mp_adamw_init;
 *   mp_X_alloc(...)         raw storage, not an object (mp_qparams_alloc). */
#ifndef MP_COMMON_H
#define MP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define MP_VERSION "0.1.0"

typedef enum {
    MP_OK = 0,
    MP_ERR_IO,      /* open/read/write/rename failed */
    MP_ERR_FORMAT,  /* file content is malformed or inconsistent */
    MP_ERR_NOMEM,   /* allocation failed or a size overflows */
    MP_ERR_ARG,     /* bad argument from the caller (unknown hook, bad shape) */
    MP_ERR_HDF5,    /* HDF5 library error */
    MP_ERR_GSL,     /* GSL library error */
    MP_ERR_HOOK,    /* a hook callback asked to abort */
    MP_ERR_CUDA     /* CUDA backend error */
} mp_status;

/* Sets the thread-local message (printf-style) and returns s, so that
 * `return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));`
 * is the one idiom for failing. */
mp_status mp_error(mp_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with "prefix: " (to add context on the way up). */
mp_status mp_error_prefix(mp_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* For a failed s whose message does not name `path` yet (an out-of-memory
 * report from a shared allocator, say), puts "path: " in front; returns s. */
mp_status mp_error_name_path(mp_status s, const char *path);

const char *mp_last_error(void);
const char *mp_status_name(mp_status s);

/* Library initialisation: turns off GSL's abort handler so that its failures
 * surface as mp_status. Idempotent. Programs that use the io layer call
 * mp_io_init (io/h5io.h) instead, which also silences HDF5. */
void mp_init(void);

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
int mp_mul_size(size_t a, size_t b, size_t *out);
int mp_add_size(size_t a, size_t b, size_t *out);

/* malloc/calloc that set an MP_ERR_NOMEM message naming `what` on failure. */
void *mp_malloc(size_t n, const char *what);
void *mp_calloc(size_t n, size_t size, const char *what);

/* Formats a byte count as "1.2 MiB" into buf (at least 32 bytes); returns buf. */
const char *mp_fmt_bytes(double bytes, char *buf);

/* Wall-clock seconds (monotonic), for progress reports and benchmarks. */
double mp_now(void);
/* The progress line of a long loop on stderr (base/mp_progress.c): on a
 * terminal (tty) a redrawn "step/total [====>   ] <metrics> | N tok/s | ETA m:ss",
 * ended by a newline when done; otherwise one line per call, "step S/T
 * <metrics>  N tok/s  ETA m:ss". metrics is preformatted ("loss 2.3456"). */
void mp_progress_line(int tty, long step, long total, const char *metrics, double tps, double eta, double elapsed,
                      int done);

/* ---- atomic outputs (base/mp_out.c) ----
 * Every file mechprobe writes goes through this: the content is written to a
 * temporary "<path>.tmp.<host>.<pid>.<n>" in the destination's directory and renamed
 * over `path` only by mp_out_commit, so a reader sees the old file or the new
 * one, never a partial one.
 *
 * mp_out_begin refuses a destination that exists and is not a regular file
 * ("is a character device", "is a FIFO", "is a directory", "is a socket"), and
 * a symbolic link (it never writes through a link, nor replaces one). It first
 * removes stale temporaries of the same destination left by processes of this
 * host that no longer exist (the host name and pid in the name; kill(pid, 0)
 * says ESRCH; another host's temporaries are never removed), creates the
 * temporary with the permissions of a plain create (0666 & ~umask) and
 * registers it so that SIGINT, SIGTERM, SIGHUP and SIGXFSZ remove it before
 * the process dies of the signal (handlers are installed only for signals
 * whose disposition is the default). The temporary is written through the
 * descriptor of its exclusive create, never reopened by name, and locked
 * (flock) while it lives: a stale temporary is removed only when its lock is
 * free. A destination name too long for the suffix gets a temporary
 * ".mp<hash>.tmp.<host>.<pid>.<n>" in the same folder. */
typedef struct {
    char *path;   /* destination */
    char *tmp;    /* temporary name; NULL once renamed or removed */
    int fd;       /* the temporary, open read-write from its exclusive create
                     until commit/abort, holding flock(LOCK_EX): writers use it
                     (or a dup: fdopen, the HDF5 driver), never the name */
    FILE *fp;     /* set by mp_out_fdopen (on a dup of fd) */
    int slot;     /* signal-cleanup slot, -1 when none */
    int by_name;  /* mp_out_close_fd: the caller writes through the name */
    dev_t dev;    /* the temporary's identity, checked before the rename */
    ino_t ino;
} mp_out;

mp_status mp_out_begin(mp_out *o, const char *path);
/* A stdio stream on the temporary file ("wb", a dup of o->fd), owned by o
 * (commit/abort close it). */
FILE *mp_out_fdopen(mp_out *o);
/* Only for a caller that must write through the temporary's name (Lua's
 * out.tmp): closes the stdio stream if any, keeps o->fd (the lock), and makes
 * commit check only that the name is still a regular file (the caller may
 * replace it, e.g. by an atomic write of its own). */
void mp_out_close_fd(mp_out *o);
/* Flushes and closes the stream, fsyncs the file when `sync`, checks that
 * the temporary's name is still the file created (same device and inode,
 * a regular file: refused otherwise) and that the destination is still a
 * regular file or missing, renames the temporary over it and syncs the
 * directory (best effort). On failure the temporary is removed. Always
 * releases o. */
mp_status mp_out_commit(mp_out *o, int sync);
/* MP_OK when the temporary's name is still the file mp_out_begin created
 * (same device and inode, a regular file; by name: a regular file), else
 * MP_ERR_IO "path: the temporary file T was replaced by a symbolic link ...".
 * mp_out_commit checks this; a writer may too, to explain a failure. */
mp_status mp_out_verify(const mp_out *o);
/* Closes and removes the temporary; safe on a zeroed struct and after commit. */
void mp_out_abort(mp_out *o);
/* Zeroes o so that mp_out_abort on it is a no-op (for cleanup paths that run
 * before mp_out_begin). */
void mp_out_init(mp_out *o);
/* MP_ERR_ARG "out: the output is the same file as the input IN; ..." when
 * `out` names one of the n inputs (same device and inode when both exist;
 * the same resolved name when the output does not exist yet); NULL inputs
 * are skipped. For commands whose output could replace their input. */
mp_status mp_out_check_inputs(const char *out, const char *const *inputs, int n);
/* Test hook, a weak no-op in mp_out.c that a test may define: called with
 * "created" when mp_out_begin has made the temporary and with "commit" before
 * mp_out_commit checks and renames it. */
void mp_out_test_hook(const char *step, const mp_out *o);

/* Inputs: MP_OK when `path` is a regular file (symbolic links followed) or does
 * not exist (the caller's open reports that); otherwise MP_ERR_IO "path: is a
 * FIFO, not a regular file" etc. Call before opening a file whose open could
 * block (a FIFO) or never end (a device). */
mp_status mp_check_regular_file(const char *path);
/* "a FIFO", "a directory", ... for a stat mode (for messages). */
const char *mp_file_kind(unsigned mode);

#endif
