/* mp_common.h — status codes, error reporting and small helpers shared by every
 * mechprobe layer (runtime, hooks, analyze, plots, lua).
 *
 * Runtime failures return an mp_status and leave a human-readable message in a
 * thread-local buffer (mp_last_error). The message names the file or argument
 * and what is wrong, e.g. "model.bin: truncated: header says 4 layers (1.2 MB)
 * but the file has 900 KB". Programmer errors assert. Library code never exits. */
#ifndef MP_COMMON_H
#define MP_COMMON_H

#include <stddef.h>
#include <stdint.h>

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

/* Library initialisation: turns off GSL's abort handler and HDF5's automatic
 * error printing so that their failures surface as mp_status. Idempotent. */
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

#endif
