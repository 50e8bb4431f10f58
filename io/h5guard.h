/* h5guard.h — the trust model for HDF5 files read in-process (mp.h5.open):
 * before an untrusted file is opened by this process, a guarded child process
 * (a fresh image of this program, like the checkpoint loader's reader, with a
 * time and an address-space limit and no HDF5 plugins) opens it and walks
 * everything a reader could reach: every group (listed), every object's
 * attributes (read), every dataset's header and storage checks, and its data
 * (read in blocks) or, for files over MP_H5_CHECK_FULL_MAX, its chunk index.
 * A file the HDF5 library crashes or loops on, or that breaks one of the
 * bounds below, is refused with an error naming the file; a file that passes
 * is remembered (device, inode, size, times) so that reopening it is free, and
 * so are the files this process wrote itself (mp_h5_trust_note). */
#ifndef MP_H5GUARD_H
#define MP_H5GUARD_H

#include <stdint.h>

#include "h5io.h"

/* Bounds every reader of an untrusted HDF5 file keeps (h5io, lh5, the walk). */
#define MP_H5_MAX_DEPTH 64            /* groups on a path (components) */
#define MP_H5_MAX_OBJECTS (1u << 18)  /* objects visited by a walk; links listed in one group */
#define MP_H5_MAX_ATTRS 65536         /* attributes of one object */
#define MP_H5_EMPTY_MAX (1u << 20)    /* product of the non-zero extents of an empty dataset */
#define MP_H5_CHECK_FULL_MAX ((uint64_t)256 << 20) /* files up to this size get their data read */

typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} mp_h5_fileid;

/* Identity of the regular file at path (MP_ERR_IO naming it when absent). */
mp_status mp_h5_fileid_of(const char *path, mp_h5_fileid *id);
/* 1 when both name the same, unchanged file. */
int mp_h5_fileid_same(const mp_h5_fileid *a, const mp_h5_fileid *b);

/* Whether open file f is the file with identity id, unchanged: 1 / 0, -1
 * when unknown (not an HDF5 POSIX-driver file). With id->size 0 and
 * id->mtime_ns -1, only the device and inode are compared. */
int mp_h5_file_is(hid_t f, const mp_h5_fileid *id);

/* This process wrote (or validated) the file now at path: opening it again
 * needs no child while it stays unchanged. Best effort; thread-safe. */
void mp_h5_trust_note(const char *path);
/* 1 when the file with that identity was noted. */
int mp_h5_trust_known(const mp_h5_fileid *id);

typedef struct {
    double timeout_s; /* 0: MECHPROBE_LOAD_TIMEOUT, else 30 s + 1 s per 32 MiB of file */
    int fork_only;    /* tests: the child is a fork of this process, not a fresh image */
} mp_h5_guard;

/* Validates path in the guarded child (g may be NULL). MP_OK: the walk found
 * nothing wrong (the file is then noted as trusted). Otherwise MP_ERR_FORMAT
 * "PATH: ..." saying what is wrong, that the HDF5 library crashed on it
 * (signal) or that the walk ran out of time. */
mp_status mp_h5_validate(const char *path, const mp_h5_guard *g);

/* The walk itself, in this process (the child runs it; also for tests):
 * full_read: read every dataset's data too (else its chunk index only). */
mp_status mp_h5_walk(const char *path, int full_read);

/* Components of an HDF5 path ("/a//b/" has 2). */
int mp_h5_path_depth(const char *path);

#endif
