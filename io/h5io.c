/* h5io.c — the small HDF5 layer of mechprobe: files (plain and atomic), group
 * listing, numeric dataset reading as float32/int32, dataset writing
 * (attributes: h5attr.c). HDF5 failures become mp_status messages that name
 * the file and object and end with the innermost HDF5 error description.
 * Reading never leaves the file: external links, external storage and
 * virtual datasets are refused. */
#define _GNU_SOURCE /* memfd_create */
#include "h5io.h"
#include "h5stream.h"
#include "h5io_priv.h"
#include "h5guard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- errors ---- */

void mp_h5_init(void) {
    /* The automatic-printing setting belongs to the per-thread error stack in
     * thread-safe builds, so remember it per thread. */
    static _Thread_local int done = 0;
    if (done) return;
    done = 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void mp_io_init(void) {
    mp_init();
    mp_h5_init();
}

typedef struct {
    char desc[320];
    int err;       /* an errno named by some entry of the stack (the I/O drivers do), or 0 */
} walk_ctx;

/* The driver messages carry the system error as "errno = N, error message = ...". */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *u) {
    (void)n;
    walk_ctx *c = u;
    const char *en = e->desc ? strstr(e->desc, "errno = ") : NULL;
    if (en && !c->err) c->err = atoi(en + 8);
    if (c->desc[0]) return 0;
    if (e->desc && e->desc[0]) {
        snprintf(c->desc, sizeof c->desc, "%s", e->desc);
    } else {
        char msg[256];
        if (H5Eget_msg(e->min_num, NULL, msg, sizeof msg) > 0) snprintf(c->desc, sizeof c->desc, "%s", msg);
    }
    return 0;
}

const char *mp_h5_errno_words(int e) {
    switch (e) {
    case ENOSPC: return "no space left on device";
    case EDQUOT: return "disk quota exceeded";
    case EFBIG: return "file too large (over the file-size limit)";
    case EIO: return "input/output error";
    case EROFS: return "read-only file system";
    case EACCES: return "permission denied";
    default: return NULL;
    }
}

/* Innermost description on the current error stack (walked upward: the first
 * entry is where the error was detected), then clears the stack. A system
 * error reported by the I/O driver is said in words instead of the driver's
 * raw "file write failed: time = ..., errno = 28, ..." line. */
static void h5_innermost(char *buf, size_t n) {
    walk_ctx c;
    c.desc[0] = '\0';
    c.err = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &c);
    H5Eclear2(H5E_DEFAULT);
    const char *w = mp_h5_errno_words(c.err);
    if (c.err) snprintf(buf, n, "%s", w ? w : strerror(c.err));
    else snprintf(buf, n, "%s", c.desc);
}

mp_status mp_h5_error(mp_status s, const char *fmt, ...) {
    char desc[320], what[1024];
    h5_innermost(desc, sizeof desc);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (desc[0]) return mp_error(s, "%s: %s", what, desc);
    return mp_error(s, "%s", what);
}

const char *mp_h5_filename(hid_t loc, char *buf, size_t n) {
    if (n == 0) return buf;
    ssize_t r = loc >= 0 ? H5Fget_name(loc, buf, n) : -1;
    if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);
        snprintf(buf, n, "?");
    }
    return buf;
}

/* "<file>: <obj>: <what>[: <hdf5 description>]". with_desc: the failure came
 * from HDF5 (read the error stack before anything clears it). */
static mp_status vfail(mp_status s, int with_desc, hid_t loc, const char *obj, const char *fmt, va_list ap) {
    char desc[320], what[768], file[512];
    desc[0] = '\0';
    if (with_desc) h5_innermost(desc, sizeof desc);
    else H5Eclear2(H5E_DEFAULT);
    vsnprintf(what, sizeof what, fmt, ap);
    mp_h5_filename(loc, file, sizeof file);
    if (desc[0]) return mp_error(s, "%s: %s: %s: %s", file, obj, what, desc);
    return mp_error(s, "%s: %s: %s", file, obj, what);
}

mp_status mp_h5_fail(mp_status s, hid_t loc, const char *obj, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mp_status r = vfail(s, 1, loc, obj, fmt, ap);
    va_end(ap);
    return r;
}

mp_status mp_h5_fail_plain(mp_status s, hid_t loc, const char *obj, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mp_status r = vfail(s, 0, loc, obj, fmt, ap);
    va_end(ap);
    return r;
}


/* ---- background writer threads and fork ---- */

/* Writer-preferring: a fork waiting for the lock is not starved by a writer
 * thread that takes it again for its next view. */
static pthread_rwlock_t bg_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static pthread_once_t bg_once = PTHREAD_ONCE_INIT;

static void bg_prepare(void) { pthread_rwlock_wrlock(&bg_lock); }
static void bg_parent(void) { pthread_rwlock_unlock(&bg_lock); }
/* The child runs with another thread id than the one that write-locked the
 * lock (glibc's unlock would then take it for a reader's), and it is the only
 * thread there: the lock starts afresh. */
static void bg_child(void) { bg_lock = (pthread_rwlock_t)PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP; }
static void bg_register(void) { pthread_atfork(bg_prepare, bg_parent, bg_child); }

void mp_h5_bg_lock(void) {
    pthread_once(&bg_once, bg_register);
    pthread_rwlock_rdlock(&bg_lock);
}

void mp_h5_bg_unlock(void) { pthread_rwlock_unlock(&bg_lock); }

/* ---- files ---- */

/* File access properties: closing the file closes every object still open in
 * it, so close/commit/abort never leave a half-open file behind. */
static hid_t strong_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

/* The same for files we create: file-format objects of HDF5 1.8 and later,
 * whose superblock and object headers carry checksums, so a corrupted file is
 * refused on open instead of being decoded (h5py and HDF5 >= 1.8 read them). */
static hid_t create_fapl(void) {
    hid_t fapl = strong_fapl();
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

/* The descriptor of open file f (sec2 or mechprobe's stream driver), or -1 (h5io_priv.h). */
int mp_h5_file_fd(hid_t f) {
    int fd = mp_h5_stream_fd(f);
    if (fd >= 0) return fd;
    hid_t fapl = H5Fget_access_plist(f);
    if (fapl >= 0) {
        int *fdp = NULL;
        if (H5Pget_driver(fapl) == H5FD_SEC2 && H5Fget_vfd_handle(f, fapl, (void **)&fdp) >= 0 && fdp) fd = *fdp;
        H5Pclose(fapl);
    }
    H5Eclear2(H5E_DEFAULT);
    return fd;
}

/* Closing a file whose remaining writes are to be thrown away, so that the
 * close cannot fail. HDF5 1.10 frees a file whose close failed (a write error
 * while flushing: a full disk) but keeps its id, and the library's exit handler
 * then closes it again: SIGSEGV at exit. So the file's descriptor is first
 * replaced by an anonymous in-memory file (the pending writes land there), and
 * a soft file-size limit is lifted to the hard one until the file is closed. */
static _Thread_local struct { int raised; struct rlimit old; } fsize_saved;

void mp_h5_discard_writes(hid_t f) {
    if (f < 0) return;
    mp_h5_init();
    int fd = mp_h5_file_fd(f);
    int nfd = fd >= 0 ? memfd_create("mechprobe-discard", MFD_CLOEXEC) : -1;
    if (nfd >= 0) {
        /* the stream driver drops its staged writes and a pending error too */
        if (mp_h5_stream_redirect(f, nfd) < 0 && dup2(nfd, fd) < 0) { /* keep the original: closing may fail as before */ }
        close(nfd);
    }
    struct rlimit up;
    if (!fsize_saved.raised && getrlimit(RLIMIT_FSIZE, &fsize_saved.old) == 0 &&
        fsize_saved.old.rlim_cur != fsize_saved.old.rlim_max) {
        up = fsize_saved.old;
        up.rlim_cur = up.rlim_max;
        fsize_saved.raised = setrlimit(RLIMIT_FSIZE, &up) == 0;
    }
}

void mp_h5_discard_close(hid_t f) {
    if (f < 0) return;
    mp_h5_discard_writes(f);
    H5Fclose(f);
    if (fsize_saved.raised) setrlimit(RLIMIT_FSIZE, &fsize_saved.old);
    fsize_saved.raised = 0;
    H5Eclear2(H5E_DEFAULT);
}

/* Closes file f whose contents must reach the disk. HDF5 1.10 cannot recover
 * from a failed metadata flush (even the discarding close then fails), so
 * the space the flush writes into (up to the end of allocated addresses) is
 * reserved first with fallocate: a full disk or a file-size limit is
 * met here, by us, and the file is discarded (discard_close). Returns MP_OK
 * or sets the error "<what>: <reason>". */
mp_status mp_h5_close_checked(hid_t f, const char *what) {
    int fd = mp_h5_file_fd(f);
    haddr_t eoa = 0;
    if (fd >= 0 && H5Fget_eoa(f, &eoa) >= 0 && eoa > 0) {
        /* fallocate, not posix_fallocate: no slow emulation where unsupported */
        int e = fallocate(fd, 0, 0, (off_t)eoa) == 0 ? 0 : errno;
        if (e != 0 && e != EOPNOTSUPP && e != ENOSYS && e != EINVAL && e != ENODEV) {
            const char *w = mp_h5_errno_words(e);
            mp_h5_discard_close(f);
            return mp_error(MP_ERR_IO, "%s: %s", what, w ? w : strerror(e));
        }
    }
    H5Eclear2(H5E_DEFAULT);
    if (H5Fflush(f, H5F_SCOPE_LOCAL) < 0) {
        mp_status st = mp_h5_error(MP_ERR_IO, "%s", what);
        mp_h5_discard_close(f);
        return st;
    }
    if (H5Fclose(f) < 0) return mp_h5_error(MP_ERR_HDF5, "%s", what);
    return MP_OK;
}

/* For writing a file in place ("w" and "a"/"r+" through mp_h5_open): opens
 * `path` without following a symbolic link (refused with a clear message,
 * as is anything but a regular file), read-write, created when `create`;
 * -1 with the error set. */
static int open_for_write(const char *path, int create) {
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        if (S_ISLNK(sb.st_mode))
            mp_error(MP_ERR_IO, "%s: is a symbolic link; mechprobe does not write through links "
                     "(give the link's target, or remove the link)", path);
        else
            mp_error(MP_ERR_IO, "%s: is %s, not a regular file", path, mp_file_kind(sb.st_mode));
        return -1;
    }
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (create ? O_CREAT : 0), 0666);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP) mp_error(MP_ERR_IO, "%s: is a symbolic link; mechprobe does not write through links", path);
        else mp_error(MP_ERR_IO, "%s: cannot %s: %s", path, create ? "create" : "open for writing", strerror(e));
        return -1;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        mp_error(MP_ERR_IO, "%s: is %s, not a regular file", path, mp_file_kind(sb.st_mode));
        close(fd);
        return -1;
    }
    return fd;
}

mp_status mp_h5_open(hid_t *out, const char *path, mp_h5_mode mode) {
    mp_h5_init();
    *out = H5I_INVALID_HID;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "HDF5 file name is empty");
    mp_status st = MP_OK;
    int wfd = -1;
    hid_t fapl = strong_fapl();
    if (fapl < 0) return mp_h5_error(MP_ERR_HDF5, "%s: cannot open", path);
    struct stat lsb;
    int exists = lstat(path, &lsb) == 0;
    int err = errno;
    if (mode == MP_H5_TRUNC || (mode == MP_H5_APPEND && !exists)) {
        H5Pclose(fapl);
        if ((wfd = open_for_write(path, 1)) < 0) return MP_ERR_IO;
        fapl = create_fapl();
        /* large writes by O_DIRECT, as the run files'; the file opened above, never the name again */
        if (fapl < 0 || mp_h5_stream_set_fd(fapl, wfd) < 0) {
            if (fapl >= 0) H5Pclose(fapl);
            close(wfd);
            return mp_h5_error(MP_ERR_HDF5, "%s: cannot create", path);
        }
        *out = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
        if (*out < 0) st = mp_h5_error(MP_ERR_IO, "%s: cannot create", path);
        goto cleanup;
    }
    if (!exists) {
        st = mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        goto cleanup;
    }
    if (mode != MP_H5_READ) { /* in place: never through a link, never a non-regular file */
        if ((wfd = open_for_write(path, 0)) < 0) {
            st = MP_ERR_IO;
            goto cleanup;
        }
        if (mp_h5_stream_set_fd(fapl, wfd) < 0) {
            st = mp_h5_error(MP_ERR_HDF5, "%s: cannot open for writing", path);
            goto cleanup;
        }
    }
    htri_t is = H5Fis_hdf5(path);
    if (is == 0) {
        st = mp_error(MP_ERR_FORMAT, "%s: cannot open: not an HDF5 file", path);
        goto cleanup;
    }
    if (is < 0) {
        err = access(path, R_OK) == 0 ? 0 : errno;
        if (err) st = mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        else st = mp_h5_error(MP_ERR_IO, "%s: cannot open", path);
        goto cleanup;
    }
    *out = H5Fopen(path, mode == MP_H5_READ ? H5F_ACC_RDONLY : H5F_ACC_RDWR, fapl);
    if (*out < 0) st = mp_h5_error(MP_ERR_IO, "%s: cannot open%s", path, mode == MP_H5_READ ? "" : " for writing");
cleanup:
    H5Pclose(fapl);
    if (wfd >= 0) close(wfd); /* the driver holds its own duplicate */
    return st;
}

mp_status mp_h5_close(hid_t *f) {
    if (!f || *f < 0) return MP_OK;
    mp_h5_init();
    char file[512], what[600];
    mp_h5_filename(*f, file, sizeof file);
    unsigned intent = 0;
    int writable = H5Fget_intent(*f, &intent) >= 0 && (intent & H5F_ACC_RDWR);
    H5Eclear2(H5E_DEFAULT);
    hid_t id = *f;
    *f = H5I_INVALID_HID;
    if (!writable) {
        if (H5Fclose(id) < 0) return mp_h5_error(MP_ERR_HDF5, "%s: cannot close", file);
        return MP_OK;
    }
    snprintf(what, sizeof what, "%s: cannot close (data may be incomplete)", file);
    return mp_h5_close_checked(id, what);
}

/* Opens the temporary of a (begun) with HDF5 through its descriptor:
 * created (truncated) or, when `update`, opened as it is (a copy of the old
 * file). */
static mp_status atomic_open_tmp(mp_h5_atomic *a, const char *path, int update) {
    mp_status st = MP_OK;
    hid_t fapl = update ? strong_fapl() : create_fapl();
    /* HDF5 gets the descriptor of the exclusive create: the temporary's name
     * is never looked up again (a link swapped in meanwhile is not followed) */
    if (fapl < 0 || mp_h5_stream_set_fd(fapl, a->out.fd) < 0) {
        st = mp_h5_error(MP_ERR_HDF5, "%s: cannot create", path);
    } else {
        a->file = update ? H5Fopen(a->out.tmp, H5F_ACC_RDWR, fapl) : H5Fcreate(a->out.tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
        /* (HDF5 itself notices a temporary swapped for a link: say so in words) */
        if (a->file < 0 && (st = mp_out_verify(&a->out)) == MP_OK)
            st = mp_h5_error(MP_ERR_IO, "%s: cannot %s %s", path, update ? "open" : "create", a->out.tmp);
    }
    if (fapl >= 0) H5Pclose(fapl);
    return st;
}

mp_status mp_h5_atomic_create(mp_h5_atomic *a, const char *path) {
    mp_h5_init();
    mp_status st = MP_OK;
    memset(a, 0, sizeof *a);
    mp_out_init(&a->out);
    a->file = H5I_INVALID_HID;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "HDF5 file name is empty");
    /* checks the destination, creates the temporary (0666 & ~umask) and
     * registers it for removal on SIGINT/SIGTERM/SIGHUP/SIGXFSZ */
    if ((st = mp_out_begin(&a->out, path)) != MP_OK) return st;
    a->path = a->out.path;
    if ((st = atomic_open_tmp(a, path, 0)) != MP_OK) mp_h5_atomic_abort(a);
    return st;
}

/* Copies all of descriptor in to descriptor out (from offset 0): 0 or errno. */
static int copy_fd(int in, int out) {
    static const size_t N = (size_t)1 << 20;
    char *buf = malloc(N);
    if (!buf) return ENOMEM;
    int e = 0;
    off_t off = 0;
    for (;;) {
        ssize_t k = pread(in, buf, N, off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { e = errno; break; }
        if (k == 0) break;
        for (ssize_t w = 0; w < k;) {
            ssize_t r = pwrite(out, buf + w, (size_t)(k - w), off + w);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { e = r < 0 ? errno : EIO; break; }
            w += r;
        }
        if (e) break;
        off += k;
    }
    free(buf);
    return e;
}

/* 1 when the file open on fd has an HDF5 superblock signature where the
 * format puts it (offset 0, 512, 1024, 2048, ...). */
static int has_signature(int fd, off_t size) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char b[8];
    for (off_t off = 0; off + 8 <= size; off = off ? off * 2 : 512)
        if (pread(fd, b, 8, off) == 8 && !memcmp(b, sig, 8)) return 1;
    return 0;
}

mp_status mp_h5_atomic_update(mp_h5_atomic *a, const char *path) {
    mp_h5_init();
    memset(a, 0, sizeof *a);
    mp_out_init(&a->out);
    a->file = H5I_INVALID_HID;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "HDF5 file name is empty");
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return mp_h5_atomic_create(a, path);
    mp_status st = mp_out_begin(&a->out, path); /* refuses links and non-regular files */
    if (st != MP_OK) return st;
    a->path = a->out.path;
    int in = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int e = in < 0 ? errno : 0;
    if (!e && (fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode))) e = EINVAL;
    if (!e) e = copy_fd(in, a->out.fd);
    if (in >= 0) close(in);
    if (e == EINVAL) st = mp_error(MP_ERR_IO, "%s: is not a regular file", path);
    else if (e) st = mp_error(MP_ERR_IO, "%s: cannot copy it for the update: %s", path,
                              mp_h5_errno_words(e) ? mp_h5_errno_words(e) : strerror(e));
    if (!st) {
        if (fchmod(a->out.fd, sb.st_mode & 07777) != 0) { /* keep 0666 & ~umask */ }
        if (!has_signature(a->out.fd, sb.st_size)) /* a non-HDF5 file would be replaced */
            st = mp_error(MP_ERR_FORMAT, "%s: cannot open: not an HDF5 file", path);
    }
    if (!st) st = atomic_open_tmp(a, path, 1);
    if (st) mp_h5_atomic_abort(a);
    return st;
}

mp_status mp_h5_atomic_commit(mp_h5_atomic *a) {
    mp_status st = MP_OK;
    mp_h5_init();
    if (!a->out.tmp || a->file < 0) {
        st = mp_error(MP_ERR_ARG, "%s: atomic commit of a file that is not open", a->path ? a->path : "?");
        goto cleanup;
    }
    char what[1024];
    snprintf(what, sizeof what, "%s: cannot write (closing %s)", a->path, a->out.tmp);
    hid_t f = a->file;
    a->file = H5I_INVALID_HID;
    if ((st = mp_h5_close_checked(f, what)) != MP_OK) goto cleanup;
    /* fsync, check the temporary is still ours, rename over the destination, sync the directory */
    char *done = strdup(a->path); /* mp_out_commit releases the name */
    st = mp_out_commit(&a->out, 1);
    if (st == MP_OK && done) mp_h5_trust_note(done); /* written by this process: reopening it needs no check */
    free(done);
cleanup:
    mp_h5_atomic_abort(a);
    return st;
}

void mp_h5_atomic_abort(mp_h5_atomic *a) {
    if (!a) return;
    if (a->file >= 0) {
        mp_h5_init();
        mp_h5_discard_close(a->file); /* the file is deleted: its pending writes do not matter */
    }
    a->file = H5I_INVALID_HID;
    mp_out_abort(&a->out);
    a->path = NULL;
}

/* ---- groups ---- */


/* Walks the links along `path` prefix by prefix (H5Lexists fails, rather
 * than answering 0, when an intermediate group is missing). 1: every link
 * exists and stays inside the file (hard links; soft links too unless
 * hard_only); 0: some link is missing; -1: a link leaves the file (external
 * or user-defined) or, with hard_only, is a soft link — never followed. */
static int link_walk(hid_t loc, const char *path, int hard_only) {
    if (mp_h5_is_self(path)) return 1;
    if (mp_h5_path_depth(path) > MP_H5_MAX_DEPTH) return 0; /* each prefix is walked: quadratic in the depth */
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (!buf) return 0;
    memcpy(buf, path, n + 1);
    int ok = 1;
    for (size_t i = 1; ok == 1 && i <= n; i++) {
        if (i < n && buf[i] != '/') continue;
        if (buf[i - 1] == '/') continue; /* "//" or leading "/" */
        char c = buf[i];
        buf[i] = '\0';
        ok = H5Lexists(loc, buf, H5P_DEFAULT) > 0;
        H5L_info_t li;
        if (ok && H5Lget_info(loc, buf, &li, H5P_DEFAULT) >= 0 && li.type != H5L_TYPE_HARD &&
            (hard_only || li.type != H5L_TYPE_SOFT))
            ok = -1;
        buf[i] = c;
    }
    free(buf);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

static int link_exists(hid_t loc, const char *path) { return link_walk(loc, path, 0) == 1; }

mp_status mp_h5_check_links(hid_t loc, const char *path) {
    mp_h5_init();
    int r = link_walk(loc, path, 1);
    if (r < 0)
        return mp_h5_fail_plain(MP_ERR_FORMAT, loc, mp_h5_objname(path),
                          "is reached through a soft, external or user-defined link (refused: only hard links "
                          "inside the file are followed)");
    if (r == 0) return mp_h5_fail_plain(MP_ERR_FORMAT, loc, mp_h5_objname(path), "no such object");
    return MP_OK;
}

static mp_h5_kind kind_of(hid_t obj) {
    switch (H5Iget_type(obj)) {
    case H5I_GROUP:
    case H5I_FILE: return MP_H5_GROUP;
    case H5I_DATASET: return MP_H5_DATASET;
    default: return MP_H5_OTHER;
    }
}

int mp_h5_exists(hid_t loc, const char *path, mp_h5_kind *kind) {
    mp_h5_init();
    if (!link_exists(loc, path)) return 0;
    hid_t o = H5Oopen(loc, mp_h5_is_self(path) ? "." : path, H5P_DEFAULT);
    if (o < 0) { H5Eclear2(H5E_DEFAULT); return 0; }
    if (kind) *kind = kind_of(o);
    H5Oclose(o);
    return 1;
}

mp_status mp_h5_delete(hid_t loc, const char *path) {
    mp_h5_init();
    if (!path || mp_h5_is_self(path)) return mp_h5_fail_plain(MP_ERR_ARG, loc, "/", "the root group cannot be deleted");
    if (!mp_h5_exists(loc, path, NULL)) return mp_h5_fail_plain(MP_ERR_ARG, loc, mp_h5_objname(path), "no such object");
    if (H5Ldelete(loc, path, H5P_DEFAULT) < 0) return mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot delete");
    return MP_OK;
}

void mp_h5_list_free(mp_h5_entry *e, int n) {
    if (!e) return;
    for (int i = 0; i < n; i++) free(e[i].name);
    free(e);
}

typedef struct {
    mp_h5_entry *e;
    int n, cap;
    mp_status st;
    hid_t loc;
    const char *gname;
} list_ctx;

static herr_t list_cb(hid_t g, const char *name, const H5L_info_t *li, void *u) {
    (void)li;
    list_ctx *c = u;
    if (c->n >= (int)MP_H5_MAX_OBJECTS) {
        c->st = mp_h5_fail_plain(MP_ERR_FORMAT, c->loc, c->gname, "more than %u links in one group (refused)",
                                 MP_H5_MAX_OBJECTS);
        return -1;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        mp_h5_entry *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e) { c->st = mp_error(MP_ERR_NOMEM, "out of memory listing a group"); return -1; }
        c->e = e;
        c->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) { c->st = mp_error(MP_ERR_NOMEM, "out of memory listing a group"); return -1; }
    c->e[c->n].name = copy;
    c->e[c->n].kind = MP_H5_OTHER;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o >= 0) { c->e[c->n].kind = kind_of(o); H5Oclose(o); }
    else H5Eclear2(H5E_DEFAULT); /* dangling soft/external link */
    c->n++;
    return 0;
}

/* One pass of H5Literate (in name order): listing by index would cost a
 * lookup per link, quadratic in a large group. */
mp_status mp_h5_list(hid_t loc, const char *group, mp_h5_entry **out, int *n) {
    mp_h5_init();
    hid_t g = H5I_INVALID_HID;
    const char *gname = mp_h5_is_self(group) ? "." : group;
    mp_h5_kind kind;
    *out = NULL;
    *n = 0;
    if (!mp_h5_is_self(group) && mp_h5_path_depth(group) > MP_H5_MAX_DEPTH)
        return mp_h5_fail_plain(MP_ERR_ARG, loc, group, "path deeper than %d groups (refused)", MP_H5_MAX_DEPTH);
    if (!mp_h5_exists(loc, gname, &kind)) return mp_h5_fail_plain(MP_ERR_ARG, loc, mp_h5_objname(group), "no such group");
    if (kind != MP_H5_GROUP) return mp_h5_fail_plain(MP_ERR_ARG, loc, mp_h5_objname(group), "not a group");
    list_ctx c = {NULL, 0, 0, MP_OK, loc, gname};
    g = H5Oopen(loc, gname, H5P_DEFAULT);
    H5G_info_t gi;
    if (g < 0 || H5Gget_info(g, &gi) < 0) { c.st = mp_h5_fail(MP_ERR_HDF5, loc, gname, "cannot open group"); goto cleanup; }
    if (gi.nlinks > (hsize_t)MP_H5_MAX_OBJECTS) {
        c.st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, gname, "%llu links in one group, more than %u (refused)",
                                (unsigned long long)gi.nlinks, MP_H5_MAX_OBJECTS);
        goto cleanup;
    }
    hsize_t idx = 0;
    if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, list_cb, &c) < 0 && c.st == MP_OK)
        c.st = mp_h5_fail(MP_ERR_HDF5, loc, gname, "cannot list the group");
cleanup:
    if (g >= 0) H5Oclose(g);
    if (c.st != MP_OK) { mp_h5_list_free(c.e, c.n); return c.st; }
    *out = c.e;
    *n = c.n;
    return MP_OK;
}

/* ---- datasets ---- */

/* Opens dataset `name` and fills info; *ds stays open for the caller. */
static mp_status open_dataset(hid_t loc, const char *name, mp_h5_dsinfo *info, hid_t *ds) {
    mp_status st = MP_OK;
    hid_t space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    mp_h5_kind kind;
    *ds = H5I_INVALID_HID;
    memset(info, 0, sizeof *info);
    if (!name || !*name) return mp_h5_fail_plain(MP_ERR_ARG, loc, "?", "empty dataset name");
    if (link_walk(loc, name, 0) < 0)
        return mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "is reached through an external link (refused: only objects "
                          "inside the file are read)");
    if (!mp_h5_exists(loc, name, &kind)) return mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "no such dataset");
    if (kind != MP_H5_DATASET) return mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "is a group, not a dataset");
    *ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (*ds < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot open dataset"); goto cleanup; }
    {   /* data stored outside the file is never read */
        hid_t dcpl = H5Dget_create_plist(*ds);
        if (dcpl < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read the dataset's storage properties"); goto cleanup; }
        H5D_layout_t layout = H5Pget_layout(dcpl);
        int n_ext = H5Pget_external_count(dcpl);
        int n_filt = H5Pget_nfilters(dcpl);
        H5Pclose(dcpl);
        if (layout == H5D_VIRTUAL) {
            st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "is a virtual dataset (its data lives in other files; refused)");
            goto cleanup;
        }
        if (layout < 0 || n_ext != 0 || n_filt < 0) {
            st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "%s", n_ext > 0 ? "stores its data in external files (refused: "
                            "only data inside the file is read)" : "unreadable storage layout");
            goto cleanup;
        }
        info->filtered = n_filt > 0;
        H5D_space_status_t ss;
        info->allocated = H5Dget_space_status(*ds, &ss) >= 0 && ss == H5D_SPACE_STATUS_ALLOCATED;
        info->storage = H5Dget_storage_size(*ds);
        H5Eclear2(H5E_DEFAULT);
    }
    type = H5Dget_type(*ds);
    space = H5Dget_space(*ds);
    if (type < 0 || space < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read dataset header"); goto cleanup; }
    H5T_class_t cls = H5Tget_class(type);
    info->elem_size = H5Tget_size(type);
    info->is_int = cls == H5T_INTEGER;
    info->is_float = cls == H5T_FLOAT;
    if (!info->is_int && !info->is_float) {
        st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "not a numeric dataset (HDF5 type class %d)", (int)cls);
        goto cleanup;
    }
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    if (sc == H5S_NULL) { st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "dataset has no data (null dataspace)"); goto cleanup; }
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read dataset shape"); goto cleanup; }
    if (nd > MP_H5_MAXDIM) {
        st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "rank %d exceeds the maximum of %d", nd, MP_H5_MAXDIM);
        goto cleanup;
    }
    hsize_t dims[MP_H5_MAXDIM];
    if (H5Sget_simple_extent_dims(space, dims, NULL) < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read dataset shape"); goto cleanup; }
    size_t numel = 1;
    info->ndim = nd;
    for (int i = 0; i < nd; i++) {
        if (dims[i] > (hsize_t)INT64_MAX || mp_mul_size(numel, (size_t)dims[i], &numel) ||
            mp_mul_size(numel, sizeof(double), &(size_t){0})) {
            st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "dataset size overflows");
            goto cleanup;
        }
        info->shape[i] = (int64_t)dims[i];
    }
    info->numel = numel;
    if (info->elem_size == 0) {
        st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "element type of size 0");
        goto cleanup;
    }
    if (numel == 0) { /* nothing to read, but a reader may still walk the extents (read_int's tables) */
        double extent = 1;
        for (int i = 0; i < nd; i++) extent *= dims[i] ? (double)dims[i] : 1.0;
        if (extent > (double)MP_H5_EMPTY_MAX) {
            st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "empty dataset (a zero extent) whose other extents multiply "
                                  "to %.0f, more than %u (refused)", extent, MP_H5_EMPTY_MAX);
            goto cleanup;
        }
    }
cleanup:
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (st != MP_OK && *ds >= 0) { H5Dclose(*ds); *ds = H5I_INVALID_HID; }
    return st;
}

mp_status mp_h5_dataset_info(hid_t loc, const char *name, mp_h5_dsinfo *info) {
    mp_h5_init();
    hid_t ds;
    mp_status st = open_dataset(loc, name, info, &ds);
    if (st == MP_OK) H5Dclose(ds);
    return st;
}

/* The first filter in ds's pipeline that this libhdf5 cannot apply (h5py's
 * LZF, say) as "HDF5 filter LZF (id 32000) is not available ..." in what;
 * returns 0 when every filter is there. Without this a read of such a
 * dataset fails with a plugin loader's "can't open directory". */
static int missing_filter(hid_t ds, char *what, size_t n) {
    hid_t dcpl = H5Dget_create_plist(ds);
    int found = 0;
    int nf = dcpl < 0 ? 0 : H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf && !found; i++) {
        unsigned flags = 0;
        size_t nel = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nel, NULL, sizeof fname, fname, NULL);
        if (id < 0 || H5Zfilter_avail(id) > 0) continue;
        const char *label = id == 32000 ? "LZF" : id == 32001 ? "BLOSC" : id == 32004 ? "LZ4" : id == 307 ? "BZIP2"
                          : id == 32015 ? "Zstandard" : fname[0] ? fname : "unknown";
        snprintf(what, n, "HDF5 filter %s (id %d) is not available in this libhdf5, so the dataset cannot be read "
                 "(re-save it uncompressed or with gzip)", label, (int)id);
        found = 1;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    return found;
}

mp_status mp_h5_check_held(hid_t loc, const char *name, const mp_h5_dsinfo *info) {
    /* allocate by the data present, not by a declared size: beyond 64 MiB,
     * the file must hold the data (compressed at most 1100:1) */
    double want = (double)info->numel * (double)info->elem_size;
    double held = (double)info->storage * (info->filtered ? 1100.0 : 1.0);
    if (want > (double)(64u << 20) && want > held * 1.01 + 65536.0)
        return mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "declares %zu values (%.0f bytes) but the file holds only "
                                "%llu bytes of them (refused: not allocating what the file does not contain)",
                                info->numel, want, (unsigned long long)info->storage);
    return MP_OK;
}

/* int32 reads: a value outside int32's range aborts the conversion (HDF5
 * would saturate it); the value is then looked up to be named. */
typedef struct {
    int hit;
} range_ctx;

static H5T_conv_ret_t range_cb(H5T_conv_except_t ex, hid_t src, hid_t dst, void *sbuf, void *dbuf, void *u) {
    (void)src; (void)dst; (void)sbuf; (void)dbuf;
    range_ctx *c = u;
    if (ex == H5T_CONV_EXCEPT_RANGE_HI || ex == H5T_CONV_EXCEPT_RANGE_LOW || ex == H5T_CONV_EXCEPT_PINF ||
        ex == H5T_CONV_EXCEPT_NINF || ex == H5T_CONV_EXCEPT_NAN) {
        c->hit = 1;
        return H5T_CONV_ABORT;
    }
    return H5T_CONV_UNHANDLED; /* truncation of a fraction: as before */
}

/* Finds the first element of ds outside int32's range (read row block by
 * row block as int64 or double) and reports it. */
static mp_status range_error(hid_t loc, const char *name, hid_t ds, const mp_h5_dsinfo *info) {
    int isint = info->is_int;
    hid_t ftype = H5Dget_type(ds);
    int uns = ftype >= 0 && isint && H5Tget_sign(ftype) == H5T_SGN_NONE;
    if (ftype >= 0) H5Tclose(ftype);
    hid_t mtype = !isint ? H5T_NATIVE_DOUBLE : uns ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
    size_t per = 1; /* elements per index of axis 0 */
    for (int i = 1; i < info->ndim; i++) per *= (size_t)info->shape[i];
    size_t rows = info->ndim ? (size_t)info->shape[0] : 1, step = per ? ((size_t)1 << 20) / per : rows;
    if (step < 1) step = 1;
    void *buf = mp_malloc((step < rows ? step : rows) * (per ? per : 1) * 8, name);
    if (!buf) return MP_ERR_NOMEM;
    hid_t fs = H5Dget_space(ds);
    mp_status st = MP_OK;
    for (size_t r0 = 0; r0 < rows && st == MP_OK; r0 += step) {
        size_t nr = rows - r0 < step ? rows - r0 : step;
        hsize_t start[MP_H5_MAXDIM] = {0}, count[MP_H5_MAXDIM], m = (hsize_t)(nr * per);
        for (int i = 0; i < info->ndim; i++) count[i] = (hsize_t)info->shape[i];
        if (info->ndim) { start[0] = r0; count[0] = nr; }
        hid_t ms = H5Screate_simple(1, &m, NULL);
        int bad = ms < 0 || fs < 0 || (info->ndim && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0) ||
                  H5Dread(ds, mtype, info->ndim ? ms : H5S_ALL, info->ndim ? fs : H5S_ALL, H5P_DEFAULT, buf) < 0;
        if (ms >= 0) H5Sclose(ms);
        if (bad) { st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read"); break; }
        for (size_t i = 0; i < nr * per; i++) {
            char v[64] = "";
            if (!isint) {
                double d = ((double *)buf)[i];
                if (!(d > -2147483649.0 && d < 2147483648.0)) snprintf(v, sizeof v, "%g", d);
            } else if (uns) {
                uint64_t x = ((uint64_t *)buf)[i];
                if (x > (uint64_t)INT32_MAX) snprintf(v, sizeof v, "%llu", (unsigned long long)x);
            } else {
                int64_t x = ((int64_t *)buf)[i];
                if (x > INT32_MAX || x < INT32_MIN) snprintf(v, sizeof v, "%lld", (long long)x);
            }
            if (v[0]) {
                st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "value %s (element %zu) is outside int32's range "
                                      "(refused rather than clamped)", v, r0 * per + i);
                break;
            }
        }
    }
    if (fs >= 0) H5Sclose(fs);
    free(buf);
    if (st == MP_OK) st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "a value is outside int32's range (refused rather than clamped)");
    return st;
}

static mp_status read_into(hid_t loc, const char *name, hid_t mtype, void *buf, size_t cap, mp_h5_dsinfo *out) {
    mp_h5_init();
    mp_h5_dsinfo info;
    hid_t ds, dxpl = H5P_DEFAULT;
    range_ctx rc = {0};
    mp_status st = open_dataset(loc, name, &info, &ds);
    if (st != MP_OK) return st;
    if (info.numel != cap) {
        st = mp_h5_fail_plain(MP_ERR_ARG, loc, name, "dataset has %zu elements, the buffer %zu", info.numel, cap);
        goto cleanup;
    }
    if (H5Tequal(mtype, H5T_NATIVE_INT32) > 0) {
        dxpl = H5Pcreate(H5P_DATASET_XFER);
        if (dxpl < 0 || H5Pset_type_conv_cb(dxpl, range_cb, &rc) < 0) {
            st = mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read");
            goto cleanup;
        }
    }
    char nofilter[256];
    int lacks = info.numel > 0 && missing_filter(ds, nofilter, sizeof nofilter); /* before the read's error stack */
    if (info.numel > 0 && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, dxpl, buf) < 0)
        st = rc.hit ? range_error(loc, name, ds, &info)
           : lacks ? mp_h5_fail_plain(MP_ERR_FORMAT, loc, name, "%s", nofilter) : mp_h5_fail(MP_ERR_HDF5, loc, name, "cannot read");
cleanup:
    if (dxpl >= 0 && dxpl != H5P_DEFAULT) H5Pclose(dxpl);
    H5Dclose(ds);
    if (st == MP_OK && out) *out = info;
    return st;
}

mp_status mp_h5_read_f32_into(hid_t loc, const char *name, float *buf, size_t cap) {
    return read_into(loc, name, H5T_NATIVE_FLOAT, buf, cap, NULL);
}

mp_status mp_h5_read_i32_into(hid_t loc, const char *name, int32_t *buf, size_t cap) {
    return read_into(loc, name, H5T_NATIVE_INT32, buf, cap, NULL);
}

static mp_status read_alloc(hid_t loc, const char *name, hid_t mtype, size_t elem, void **data, mp_h5_dsinfo *info) {
    mp_h5_dsinfo tmp;
    mp_h5_dsinfo *in = info ? info : &tmp;
    *data = NULL;
    mp_status st = mp_h5_dataset_info(loc, name, in);
    if (st != MP_OK) return st;
    if ((st = mp_h5_check_held(loc, name, in)) != MP_OK) return st;
    void *buf = mp_calloc(in->numel, elem, name);
    if (!buf) return MP_ERR_NOMEM;
    st = read_into(loc, name, mtype, buf, in->numel, in);
    if (st != MP_OK) { free(buf); return st; }
    *data = buf;
    return MP_OK;
}

mp_status mp_h5_read_f32(hid_t loc, const char *name, float **data, mp_h5_dsinfo *info) {
    return read_alloc(loc, name, H5T_NATIVE_FLOAT, sizeof(float), (void **)data, info);
}

mp_status mp_h5_read_i32(hid_t loc, const char *name, int32_t **data, mp_h5_dsinfo *info) {
    return read_alloc(loc, name, H5T_NATIVE_INT32, sizeof(int32_t), (void **)data, info);
}

int mp_h5_chunk_dims(int ndim, const int64_t *shape, int axis, size_t elem, size_t target, int64_t *chunk) {
    if (axis < 0) axis = 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) return -1;
    double row = (double)elem;
    for (int i = 0; i < ndim; i++) {
        if (i < axis) chunk[i] = 1;
        else if (i > axis) { chunk[i] = shape[i]; row *= (double)shape[i]; }
    }
    if (axis < ndim) {
        double c = (double)target / row;
        int64_t tc = c < 1 ? 1 : (c > (double)shape[axis] ? shape[axis] : (int64_t)c);
        chunk[axis] = tc;
    }
    return 0;
}

static hid_t file_type_for(hid_t mtype) {
    if (H5Tequal(mtype, H5T_NATIVE_FLOAT) > 0) return H5T_IEEE_F32LE;
    if (H5Tequal(mtype, H5T_NATIVE_INT32) > 0) return H5T_STD_I32LE;
    if (H5Tequal(mtype, H5T_NATIVE_DOUBLE) > 0) return H5T_IEEE_F64LE;
    if (H5Tequal(mtype, H5T_NATIVE_INT64) > 0) return H5T_STD_I64LE;
    return mtype;
}

mp_status mp_h5_create_dataset(hid_t loc, const char *path, hid_t type, int ndim, const int64_t *shape,
                               const int64_t *chunk, int compress, const void *fill, hid_t *ds) {
    mp_h5_init();
    mp_status st = MP_OK;
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, lcpl = H5I_INVALID_HID;
    hsize_t dims[MP_H5_MAXDIM], cdims[MP_H5_MAXDIM];
    *ds = H5I_INVALID_HID;
    if (!path || !*path || mp_h5_is_self(path)) return mp_h5_fail_plain(MP_ERR_ARG, loc, mp_h5_objname(path), "bad dataset name");
    if (ndim < 0 || ndim > MP_H5_MAXDIM)
        return mp_h5_fail_plain(MP_ERR_ARG, loc, path, "rank %d outside 0..%d", ndim, MP_H5_MAXDIM);
    if (compress < 0 || compress > 9)
        return mp_h5_fail_plain(MP_ERR_ARG, loc, path, "compression level %d outside 0..9", compress);
    size_t esize = H5Tget_size(type), cbytes = esize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return mp_h5_fail_plain(MP_ERR_ARG, loc, path, "negative extent %lld in dim %d", (long long)shape[i], i + 1);
        dims[i] = (hsize_t)shape[i];
        if (chunk) {
            if (chunk[i] < 1 || chunk[i] > shape[i])
                return mp_h5_fail_plain(MP_ERR_ARG, loc, path, "chunk extent %lld outside 1..%lld in dim %d",
                                  (long long)chunk[i], (long long)shape[i], i + 1);
            cdims[i] = (hsize_t)chunk[i];
            if (mp_mul_size(cbytes, (size_t)chunk[i], &cbytes)) cbytes = SIZE_MAX;
        }
    }
    if (chunk && (ndim == 0 || cbytes >= ((size_t)1 << 32)))
        return mp_h5_fail_plain(MP_ERR_ARG, loc, path, "cannot chunk this dataset (chunks must be non-scalar and under 4 GiB)");

    /* Replace: unlink an existing object of that name first (HDF5 does not
     * reclaim its space; files are written once in practice). */
    if (link_exists(loc, path) && H5Ldelete(loc, path, H5P_DEFAULT) < 0) {
        st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot replace the existing object");
        goto cleanup;
    }
    lcpl = H5Pcreate(H5P_LINK_CREATE);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    space = ndim ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    if (lcpl < 0 || dcpl < 0 || space < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) {
        st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot create dataset");
        goto cleanup;
    }
    if (chunk) {
        if (H5Pset_chunk(dcpl, ndim, cdims) < 0 ||
            (compress > 0 && (H5Pset_shuffle(dcpl) < 0 || H5Pset_deflate(dcpl, (unsigned)compress) < 0))) {
            st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot set chunking/compression");
            goto cleanup;
        }
    }
    if (fill && H5Pset_fill_value(dcpl, type, fill) < 0) {
        st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot set the fill value");
        goto cleanup;
    }
    *ds = H5Dcreate2(loc, path, file_type_for(type), space, lcpl, dcpl, H5P_DEFAULT);
    if (*ds < 0) st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot create dataset");
cleanup:
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (lcpl >= 0) H5Pclose(lcpl);
    return st;
}

static mp_status write_whole(hid_t loc, const char *path, hid_t type, size_t elem, int ndim,
                             const int64_t *shape, const void *data, int compress) {
    int64_t chunk[MP_H5_MAXDIM];
    int chunked = compress > 0 && ndim > 0 &&
                  mp_h5_chunk_dims(ndim, shape, 0, elem, (size_t)1 << 20, chunk) == 0;
    hid_t ds;
    mp_status st = mp_h5_create_dataset(loc, path, type, ndim, shape, chunked ? chunk : NULL, compress, NULL, &ds);
    if (st != MP_OK) return st;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (numel > 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot write");
    /* closing writes what HDF5 still buffers: its failure is a write failure */
    if (H5Dclose(ds) < 0 && st == MP_OK) st = mp_h5_fail(MP_ERR_HDF5, loc, path, "cannot write");
    return st;
}

mp_status mp_h5_write_f32(hid_t loc, const char *path, int ndim, const int64_t *shape, const float *data, int compress) {
    return write_whole(loc, path, H5T_NATIVE_FLOAT, sizeof(float), ndim, shape, data, compress);
}

mp_status mp_h5_write_i32(hid_t loc, const char *path, int ndim, const int64_t *shape, const int32_t *data, int compress) {
    return write_whole(loc, path, H5T_NATIVE_INT32, sizeof(int32_t), ndim, shape, data, compress);
}
