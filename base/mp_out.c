/* mp_out.c — the one atomic-output facility of mechprobe (declared in
 * mp_common.h): every writer (run files, checkpoints, llama2.c .bin, GGUF,
 * safetensors and config.json, tokenizers, figures) writes a temporary
 * "<path>.tmp.<host>.<pid>.<n>" next to its destination and renames it over
 * the destination on success. This file also holds the destination checks (never
 * replace a device, FIFO, socket, directory or symbolic link), the signal
 * cleanup of registered temporaries, the removal of stale temporaries left by
 * dead processes of this host, and the regular-file check for inputs.
 *
 * The temporary is created exclusively (O_EXCL | O_NOFOLLOW) and its
 * descriptor is kept until the rename: every writer writes through it (stdio
 * through fdopen, HDF5 through mechprobe's driver given the descriptor), never
 * by reopening the name, and mp_out_commit checks that the name still is that
 * file (same device and inode, a regular file) before renaming it, so a
 * temporary swapped for a link by another user is refused. The writer holds
 * an open-file-description write lock (F_OFD_SETLK) on it for its whole life:
 * the stale cleanup removes a temporary only when nobody holds that lock (its
 * writer is dead, also in another PID namespace). Not flock(): libhdf5 takes
 * flock() on the files it opens (a run file's temporary reopened with
 * mp.h5.open, the file check's child), which our flock would make fail with
 * EWOULDBLOCK; the two kinds of lock do not interact. When "<path>.tmp.<host>.<pid>.<n>" would be longer
 * than NAME_MAX the temporary is ".mp<hash of the name>.tmp.<host>.<pid>.<n>"
 * in the same folder. */
#define _GNU_SOURCE
#include "mp_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- file kinds ---- */

const char *mp_file_kind(unsigned mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

mp_status mp_check_regular_file(const char *path) {
    struct stat sb;
    if (!path) return mp_error(MP_ERR_ARG, "no file name given");
    if (stat(path, &sb) != 0) return MP_OK; /* missing: the caller's open says so */
    if (!S_ISREG(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: is %s, not a regular file", path, mp_file_kind(sb.st_mode));
    return MP_OK;
}

/* MP_OK when path is missing or a regular file (not a link). */
static mp_status check_dest(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return MP_OK;
        return mp_error(MP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: is a symbolic link; mechprobe does not write through links "
                        "(give the link's target as the output, or remove the link)", path);
    if (!S_ISREG(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: is %s; mechprobe replaces only regular files", path,
                        mp_file_kind(sb.st_mode));
    return MP_OK;
}

/* ---- signal cleanup ----
 * A fixed table of temporary names the handler can read without allocating:
 * slot state 0 = free, 2 = being filled, 1 = live. The handler unlinks the live
 * ones, restores the default action and re-raises, so the process still dies
 * of the signal (its exit status says so). */
#define SLOTS 64
#define SLOT_LEN 4096
static char slot_name[SLOTS][SLOT_LEN];
static atomic_int slot_state[SLOTS];
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};

static void on_signal(int sig) {
    int saved = errno;
    for (int i = 0; i < SLOTS; i++)
        if (atomic_load(&slot_state[i]) == 1) unlink(slot_name[i]);
    signal(sig, SIG_DFL);
    raise(sig); /* delivered, with the default action, when the handler returns */
    errno = saved;
}

static void install_handlers(void) {
    static atomic_int done;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&done, &expected, 1)) return;
    for (size_t i = 0; i < sizeof cleanup_signals / sizeof *cleanup_signals; i++) {
        struct sigaction old, sa;
        if (sigaction(cleanup_signals[i], NULL, &old) != 0) continue;
        /* A signal the process ignores (nohup, a background job) or handles
         * itself is left alone. */
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigfillset(&sa.sa_mask);
        sigaction(cleanup_signals[i], &sa, NULL);
    }
}

static int slot_register(const char *name) {
    if (strlen(name) >= SLOT_LEN) return -1;
    for (int i = 0; i < SLOTS; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&slot_state[i], &expected, 2)) {
            memcpy(slot_name[i], name, strlen(name) + 1);
            atomic_store(&slot_state[i], 1);
            return i;
        }
    }
    return -1; /* table full: the stale-temporary cleanup still covers it */
}

static void slot_release(int slot) {
    if (slot >= 0 && slot < SLOTS) atomic_store(&slot_state[slot], 0);
}

/* ---- stale temporaries ---- */

/* Splits path into a directory (for opendir) and a base name. */
static int split_path(const char *path, char **dir, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *dir = strdup(".");
        *base = path;
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        *dir = strndup(path, n);
        *base = slash + 1;
    }
    return *dir ? 0 : -1;
}

/* This host's name as it appears in temporaries: gethostname() with every
 * character other than [A-Za-z0-9-] replaced by '_' (so no '.'), at most 64
 * characters; "localhost" when it has none. A pid names a process of one host
 * only: on a filesystem shared between hosts (or containers with their own
 * host names) a pid that this host cannot see may be another host's live
 * writer, so only temporaries carrying this name are judged by pid. */
#define HOST_LEN 64
static void host_token(char out[HOST_LEN + 1]) {
    char h[256];
    if (gethostname(h, sizeof h) != 0 || !h[0]) snprintf(h, sizeof h, "localhost");
    h[sizeof h - 1] = '\0';
    size_t i = 0;
    for (; h[i] && i < HOST_LEN; i++) {
        char c = h[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

/* Parses "<host>.<pid>.<n>" at s, with <host> this host's token, followed by
 * the end or by ".tmp." (a temporary of a temporary, e.g. a run file captured
 * into an output that is itself being written). Returns the pid, or -1 (not a
 * temporary of this host: another host's, or a foreign name). */
static long stale_pid(const char *s, const char *host) {
    char *end;
    size_t hl = strlen(host);
    if (strncmp(s, host, hl) != 0 || s[hl] != '.') return -1;
    s += hl + 1;
    if (*s < '0' || *s > '9') return -1;
    long pid = strtol(s, &end, 10);
    if (*end != '.' || pid <= 0) return -1;
    s = end + 1;
    if (*s < '0' || *s > '9') return -1;
    strtoul(s, &end, 10);
    if (*end != '\0' && strncmp(end, ".tmp.", 5) != 0) return -1;
    return pid;
}

/* The stem of the temporaries of base (a file name without folder): base
 * itself, or ".mp<16 hex digits of a hash of base>" when base + the longest
 * suffix ".tmp.<host>.<pid>.<n>" would not fit in NAME_MAX. */
#define SUFFIX_MAX (5 + HOST_LEN + 1 + 20 + 1 + 10)
static void tmp_stem(const char *base, char *out, size_t n) {
    if (strlen(base) + SUFFIX_MAX <= NAME_MAX) {
        snprintf(out, n, "%s", base);
        return;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)base; *p; p++) h = (h ^ *p) * 1099511628211ull;
    snprintf(out, n, ".mp%016llx", (unsigned long long)h);
}

/* The writer's lock on its temporary: a write lock on the whole file, held by
 * the open file description (fd must be open for writing). 0 or -1. */
static int hold_lock(int fd) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Whether nobody holds a lock on the file open at fd (any access mode). */
static int lock_free(int fd) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
}

/* Removes "<stem>.tmp.<host>.<pid>.<n>..." files of this host whose pid is
 * not a live process here and whose writer holds no lock on them (a writer in
 * another PID namespace of the same host name holds its lock on its
 * temporary while it lives): the file is opened without following links,
 * checked to be unlocked and to be the file under that name still, and only
 * then removed (a writer that locks it in between finds its name gone and
 * takes the next one). */
static void remove_stale(const char *path, const char *host) {
    char *dir;
    const char *base;
    char stem[NAME_MAX + 1];
    if (split_path(path, &dir, &base) != 0) return;
    tmp_stem(base, stem, sizeof stem);
    size_t bl = strlen(stem);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, stem, bl) != 0 || strncmp(e->d_name + bl, ".tmp.", 5) != 0) continue;
            long pid = stale_pid(e->d_name + bl + 5, host);
            if (pid < 0 || pid == (long)getpid()) continue;
            if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
            int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) continue;
            struct stat sb, nb;
            if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && lock_free(fd) &&
                fstatat(dirfd(d), e->d_name, &nb, AT_SYMLINK_NOFOLLOW) == 0 && nb.st_dev == sb.st_dev &&
                nb.st_ino == sb.st_ino)
                unlinkat(dirfd(d), e->d_name, 0);
            close(fd);
        }
        closedir(d);
    }
    free(dir);
}

/* Test hook (a weak no-op the tests override): runs at fixed steps of an
 * output's life, "created" (the temporary exists, mp_out_begin is about to
 * return) and "commit" (content written, before the checks and the rename),
 * so that a test can swap the temporary at exactly those moments. */
__attribute__((weak)) void mp_out_test_hook(const char *step, const mp_out *o) {
    (void)step;
    (void)o;
}

/* ---- outputs that are inputs ---- */

/* "<realpath of the folder>/<base>" of path (the file itself need not
 * exist), or NULL. */
static char *canonical(const char *path) {
    char *dir, *rd, *r = NULL;
    const char *base;
    if (split_path(path, &dir, &base) != 0) return NULL;
    if ((rd = realpath(dir, NULL))) {
        size_t n = strlen(rd) + strlen(base) + 2;
        if ((r = malloc(n))) snprintf(r, n, "%s/%s", strcmp(rd, "/") ? rd : "", base);
        free(rd);
    }
    free(dir);
    return r;
}

mp_status mp_out_check_inputs(const char *out, const char *const *inputs, int n) {
    struct stat os, is;
    if (!out) return MP_OK;
    int out_exists = stat(out, &os) == 0;
    char *oc = NULL;
    for (int i = 0; i < n; i++) {
        const char *in = inputs[i];
        if (!in) continue;
        int same = 0;
        if (out_exists && stat(in, &is) == 0) {
            same = os.st_dev == is.st_dev && os.st_ino == is.st_ino;
        } else if (!out_exists) { /* not there yet: the same name is the same file */
            if (!oc) oc = canonical(out);
            char *ic = canonical(in);
            same = !strcmp(out, in) || (oc && ic && !strcmp(oc, ic));
            free(ic);
        }
        if (same) {
            free(oc);
            return mp_error(MP_ERR_ARG, "%s: the output is the same file as the input %s; refusing to replace an "
                            "input (choose another output name)", out, in);
        }
    }
    free(oc);
    return MP_OK;
}

/* ---- the writer's side ---- */

void mp_out_init(mp_out *o) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->slot = -1;
}

mp_status mp_out_begin(mp_out *o, const char *path) {
    static atomic_uint counter;
    mp_status st;
    mp_out_init(o);
    if (!path || !*path) return mp_error(MP_ERR_ARG, "output file name is empty");
    if ((st = check_dest(path)) != MP_OK) return st;
    char host[HOST_LEN + 1];
    host_token(host);
    remove_stale(path, host);
    install_handlers();
    char *dir = NULL, stem[NAME_MAX + 1];
    const char *base;
    if (split_path(path, &dir, &base) != 0) return mp_error(MP_ERR_NOMEM, "%s: out of memory for a file name", path);
    if (!*base) {
        free(dir);
        return mp_error(MP_ERR_ARG, "%s: is a directory name, not a file name", path);
    }
    tmp_stem(base, stem, sizeof stem);
    size_t n = strlen(dir) + strlen(stem) + strlen(host) + 48;
    o->path = strdup(path);
    o->tmp = malloc(n);
    if (!o->path || !o->tmp) {
        free(dir);
        mp_out_abort(o);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory for a file name", path);
    }
    /* the folder as given (so "out.bin" stays "out.bin.tmp...", not "./...") */
    const char *pre = strchr(path, '/') ? dir : NULL;
    int root = pre && !strcmp(dir, "/");
    int err = 0;
    for (int tries = 0; tries < 1000; tries++) {
        snprintf(o->tmp, n, "%s%s%s.tmp.%s.%ld.%u", pre ? pre : "", pre && !root ? "/" : "", stem, host,
                 (long)getpid(), atomic_fetch_add(&counter, 1u));
        /* register first, so that a signal arriving right after the create
         * still finds the name (unlinking a name not yet created is harmless) */
        o->slot = slot_register(o->tmp);
        o->fd = open(o->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd >= 0) {
            /* held until the rename: the stale cleanup of another process (PID
             * namespace) leaves a locked temporary alone. A cleaner that took
             * the lock first, or removed the name before we locked it, makes
             * us try the next name. */
            struct stat fb, nb;
            if (hold_lock(o->fd) == 0 && fstat(o->fd, &fb) == 0 && lstat(o->tmp, &nb) == 0 &&
                fb.st_dev == nb.st_dev && fb.st_ino == nb.st_ino) {
                o->dev = fb.st_dev;
                o->ino = fb.st_ino;
                break;
            }
            close(o->fd);
            o->fd = -1;
            err = EEXIST;
        } else {
            err = errno;
        }
        slot_release(o->slot);
        o->slot = -1;
        if (err != EEXIST) break;
    }
    free(dir);
    if (o->fd < 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot create (a temporary file in its directory): %s", path,
                      strerror(err ? err : EEXIST));
        free(o->tmp);
        o->tmp = NULL;
        mp_out_abort(o);
        return st;
    }
    mp_out_test_hook("created", o);
    return MP_OK;
}

FILE *mp_out_fdopen(mp_out *o) {
    if (o->fp) return o->fp;
    if (o->fd < 0) {
        mp_error(MP_ERR_ARG, "%s: output is not open", o->path ? o->path : "?");
        return NULL;
    }
    /* a second descriptor of the same open file: o->fd (and its lock) stays */
    int fd = fcntl(o->fd, F_DUPFD_CLOEXEC, 0);
    o->fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!o->fp) {
        int e = errno;
        if (fd >= 0) close(fd);
        mp_error(MP_ERR_IO, "%s: cannot write: %s", o->path, strerror(e));
        return NULL;
    }
    return o->fp;
}

void mp_out_close_fd(mp_out *o) {
    if (o->fp) fclose(o->fp);
    o->fp = NULL;
    o->by_name = 1; /* o->fd stays open: it holds the lock */
}

static int sync_name(const char *p, int dir) {
    int fd = open(p, dir ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd < 0) return errno;
    int r = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return r;
}

/* MP_OK when the temporary's name still is the file this output created (by
 * name: still a regular file), else the error: renaming would publish
 * another file (a link swapped in by another user) under the destination. */
mp_status mp_out_verify(const mp_out *o) {
    struct stat nb;
    if (lstat(o->tmp, &nb) != 0)
        return mp_error(MP_ERR_IO, "%s: the temporary file %s disappeared while it was written: %s", o->path, o->tmp,
                        strerror(errno));
    if (!S_ISREG(nb.st_mode))
        return mp_error(MP_ERR_IO, "%s: the temporary file %s was replaced by %s while it was written; refused",
                        o->path, o->tmp, mp_file_kind(nb.st_mode));
    if (!o->by_name && (nb.st_dev != o->dev || nb.st_ino != o->ino))
        return mp_error(MP_ERR_IO, "%s: the temporary file %s was replaced by another file while it was written; "
                        "refused", o->path, o->tmp);
    return MP_OK;
}

mp_status mp_out_commit(mp_out *o, int sync) {
    mp_status st = MP_OK;
    int e = 0;
    if (!o->tmp) {
        st = mp_error(MP_ERR_ARG, "%s: commit of an output that is not open", o->path ? o->path : "?");
        goto cleanup;
    }
    if (o->fp) {
        if (fflush(o->fp) != 0 || (sync && fsync(fileno(o->fp)) != 0)) e = errno;
        if (fclose(o->fp) != 0 && !e) e = errno;
        o->fp = NULL;
    } else if (sync) {
        if (o->by_name) e = sync_name(o->tmp, 0);
        else if (o->fd >= 0 && fsync(o->fd) != 0) e = errno;
    }
    if (e) {
        st = mp_error(MP_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
        goto cleanup;
    }
    mp_out_test_hook("commit", o);
    if ((st = mp_out_verify(o)) != MP_OK) goto cleanup;
    /* The destination may have changed since begin (a FIFO put there meanwhile). */
    if ((st = check_dest(o->path)) != MP_OK) goto cleanup;
    if (rename(o->tmp, o->path) != 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot rename the finished file %s to it: %s", o->path, o->tmp,
                      strerror(errno));
        goto cleanup;
    }
    free(o->tmp);
    o->tmp = NULL;
    if (sync) { /* make the rename itself durable (best effort: some filesystems refuse) */
        char *dir;
        const char *base;
        if (split_path(o->path, &dir, &base) == 0) {
            sync_name(dir, 1);
            free(dir);
        }
    }
cleanup:
    mp_out_abort(o);
    return st;
}

void mp_out_abort(mp_out *o) {
    if (!o) return;
    if (o->fp) fclose(o->fp);
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    slot_release(o->slot);
    free(o->tmp);
    free(o->path);
    mp_out_init(o);
}
