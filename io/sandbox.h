/* sandbox.h — the guarded child process of the readers of untrusted HDF5
 * files (checkpoint.c's loader, h5guard.c's file check): libhdf5 can crash or
 * loop on a corrupt file, which nothing in this process can bound, so the
 * library reads the file in a child that streams its answer through a pipe.
 *
 * The parent (mp_sandbox_start .. mp_sandbox_end) starts the child as a fresh
 * image of this program (guard_spawn.h: the task in an environment variable,
 * checked with a per-spawn token), or as a fork where the image cannot be
 * started; reads the answer before a deadline; kills and reaps a child that
 * did not answer in full; and words the error for one that timed out,
 * crashed, was killed or stopped (mp_sandbox_failure).
 *
 * The child (mp_sandbox_child_begin, then its work) runs with the default
 * signal dispositions, an alarm that ends it even when the parent is gone, an
 * address-space limit (what it maps + the bytes it announces + 512 MiB for the
 * library; none in a sanitizer build) and no HDF5 plugins. */
#ifndef MP_SANDBOX_H
#define MP_SANDBOX_H

#include <stddef.h>
#include <sys/types.h>

#include "mp_common.h"

typedef struct {
    const char *env;    /* the variable the spawned image finds its task in (MECHPROBE_...) */
    const void *entry;  /* the image's constructor that reads it (guard_spawn.h) */
    const char *task;   /* the task; NULL: fork (e.g. out of memory building it) */
    const char *argv0;  /* names the child process */
    int fork_only;      /* tests: the fork fallback only */
    /* the fork fallback: the child's work, answering on fd; must not return */
    void (*run)(int fd, void *arg);
    void *arg;
    /* the wording of the errors, e.g. for the checkpoint loader:
     *   "%s: cannot <doing> (pipe: ...)", "%s: <reading> timed out after %g s (...)",
     *   "%s: corrupt <kind>: the HDF5 library crashed reading it (signal ...)",
     *   "%s: corrupt <kind>: the <who> was killed (...)" / "... stopped without an answer (...)" */
    const char *doing, *reading, *kind, *who;
} mp_sandbox_spec;

typedef struct {
    const mp_sandbox_spec *spec;
    const char *path;
    double timeout, deadline;
    pid_t pid;
    int fd;            /* the read end of the answer's pipe */
    int timed_out, eof; /* why mp_sandbox_read failed */
    int status;        /* the wait status (mp_sandbox_end) */
} mp_sandbox;

/* Starts the child for the file `path` (named in messages); the answer must
 * arrive within `timeout` seconds. MP_OK, or an error naming path (no child). */
mp_status mp_sandbox_start(mp_sandbox *sb, const mp_sandbox_spec *spec, const char *path, double timeout);
/* Reads exactly n bytes of the answer before the deadline: 0, or -1 with
 * timed_out or eof set. */
int mp_sandbox_read(mp_sandbox *sb, void *buf, size_t n);
/* Ends the child: kills it first unless `answered` (the whole answer was
 * read), closes the pipe, reaps it. 1 when it exited with status 0. */
int mp_sandbox_end(mp_sandbox *sb, int answered);
/* The error (MP_ERR_FORMAT naming the file) for a child that gave no full
 * answer: timed out, crashed, killed, or stopped. After mp_sandbox_end. */
mp_status mp_sandbox_failure(const mp_sandbox *sb);

/* ---- in the child ---- */
/* Before its work: signals, alarm(timeout + 5), the address-space limit,
 * mp_io_init, no HDF5 plugins. */
void mp_sandbox_child_begin(unsigned timeout);
/* Sets the address-space limit to what the child maps now + bytes + 512 MiB,
 * never above the soft limit it started with. */
void mp_sandbox_limit(size_t bytes);
/* Writes all n bytes to fd, or ends the child (_exit(3)). */
void mp_sandbox_write(int fd, const void *buf, size_t n);

#endif
