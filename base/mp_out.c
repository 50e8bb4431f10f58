/* mp_out.c — the one atomic-output facility of mechprobe (declared in
 * mp_common.h): every writer (run files, checkpoints, llama2.c .bin, GGUF,
 * safetensors and config.json, tokenizers, figures) writes a temporary
 * "<path>.tmp.<host>.<pid>.<n>" next to its destination and renames it over
 * the destination on success. This file also holds the destination checks (never
 * replace a device, FIFO, socket, directory or symbolic link), the signal
 * cleanup of registered temporaries, the removal of stale temporaries left by
 * dead processes of this host, and the regular-file check for inputs. */
#define _GNU_SOURCE
#include "mp_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Removes "<path>.tmp.<host>.<pid>.<n>..." files of this host whose pid is
 * not a live process. */
static void remove_stale(const char *path, const char *host) {
    char *dir;
    const char *base;
    if (split_path(path, &dir, &base) != 0) return;
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, base, bl) != 0 || strncmp(e->d_name + bl, ".tmp.", 5) != 0) continue;
            long pid = stale_pid(e->d_name + bl + 5, host);
            if (pid < 0 || pid == (long)getpid()) continue;
            if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
            struct stat sb;
            if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
                unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    }
    free(dir);
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
    size_t n = strlen(path) + strlen(host) + 48;
    o->path = strdup(path);
    o->tmp = malloc(n);
    if (!o->path || !o->tmp) {
        mp_out_abort(o);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory for a file name", path);
    }
    int err = 0;
    for (int tries = 0; tries < 1000; tries++) {
        snprintf(o->tmp, n, "%s.tmp.%s.%ld.%u", path, host, (long)getpid(), atomic_fetch_add(&counter, 1u));
        /* register first, so that a signal arriving right after the create
         * still finds the name (unlinking a name not yet created is harmless) */
        o->slot = slot_register(o->tmp);
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (o->fd >= 0) break;
        err = errno;
        slot_release(o->slot);
        o->slot = -1;
        if (err != EEXIST) break;
    }
    if (o->fd < 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot create (a temporary file in its directory): %s", path,
                      strerror(err ? err : EEXIST));
        free(o->tmp);
        o->tmp = NULL;
        mp_out_abort(o);
        return st;
    }
    return MP_OK;
}

FILE *mp_out_fdopen(mp_out *o) {
    if (o->fp) return o->fp;
    if (o->fd < 0) {
        mp_error(MP_ERR_ARG, "%s: output is not open", o->path ? o->path : "?");
        return NULL;
    }
    o->fp = fdopen(o->fd, "wb");
    if (!o->fp) {
        mp_error(MP_ERR_IO, "%s: cannot write: %s", o->path, strerror(errno));
        return NULL;
    }
    o->fd = -1;
    return o->fp;
}

void mp_out_close_fd(mp_out *o) {
    if (o->fp) fclose(o->fp);
    if (o->fd >= 0) close(o->fd);
    o->fp = NULL;
    o->fd = -1;
}

static int sync_name(const char *p, int dir) {
    int fd = open(p, dir ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC));
    if (fd < 0) return errno;
    int r = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return r;
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
    } else if (o->fd >= 0) {
        if (sync && fsync(o->fd) != 0) e = errno;
        if (close(o->fd) != 0 && !e) e = errno;
        o->fd = -1;
    } else if (sync) {
        e = sync_name(o->tmp, 0);
    }
    if (e) {
        st = mp_error(MP_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
        goto cleanup;
    }
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
