/* sandbox.c — the guarded child process of the readers of untrusted HDF5
 * files and its supervision (see sandbox.h); the fresh-image spawn and its
 * token are guard_spawn.c's. */
#define _GNU_SOURCE /* pipe2, strsignal */
#include "sandbox.h"
#include "guard_spawn.h"
#include "h5io.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SANDBOX_HEADROOM ((size_t)512 << 20) /* address space for the HDF5 library itself */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the parent ---- */

mp_status mp_sandbox_start(mp_sandbox *sb, const mp_sandbox_spec *spec, const char *path, double timeout) {
    memset(sb, 0, sizeof *sb);
    sb->spec = spec;
    sb->path = path;
    sb->timeout = timeout;
    sb->pid = -1;
    sb->fd = -1;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return mp_error(MP_ERR_IO, "%s: cannot %s (pipe: %s)", path, spec->doing, strerror(errno));
    pid_t pid = -1;
    if (!spec->fork_only && spec->task &&
        mp_guard_spawn(&pid, spec->env, spec->entry, pfd[1], spec->task, spec->argv0) != 0)
        pid = -1;
    if (pid < 0) {
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
            int e = errno;
            close(pfd[0]);
            close(pfd[1]);
            return mp_error(MP_ERR_NOMEM, "%s: cannot %s (fork: %s)", path, spec->doing, strerror(e));
        }
        if (pid == 0) {
            close(pfd[0]);
            spec->run(pfd[1], spec->arg);
            _exit(127);
        }
    }
    close(pfd[1]);
    sb->pid = pid;
    sb->fd = pfd[0];
    sb->deadline = now_s() + timeout;
    return MP_OK;
}

int mp_sandbox_read(mp_sandbox *sb, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        double left = sb->deadline - now_s();
        if (left <= 0) { sb->timed_out = 1; return -1; }
        struct pollfd pfd = {sb->fd, POLLIN, 0};
        int k = poll(&pfd, 1, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { sb->eof = 1; return -1; }
        if (k == 0) continue; /* the deadline check above decides */
        ssize_t got = read(sb->fd, p, n);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) { sb->eof = 1; return -1; }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int mp_sandbox_end(mp_sandbox *sb, int answered) {
    if (!answered && sb->pid > 0) kill(sb->pid, SIGKILL); /* a child stuck or mid-answer ends here */
    if (sb->fd >= 0) close(sb->fd);
    sb->fd = -1;
    int ws = 0;
    while (sb->pid > 0 && waitpid(sb->pid, &ws, 0) < 0 && errno == EINTR) {}
    sb->pid = -1;
    sb->status = ws;
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

mp_status mp_sandbox_failure(const mp_sandbox *sb) {
    const mp_sandbox_spec *s = sb->spec;
    const char *path = sb->path;
    int ws = sb->status;
    if (sb->timed_out)
        return mp_error(MP_ERR_FORMAT, "%s: %s timed out after %g s (a corrupt file, or a file too large for the "
                        "limit: MECHPROBE_LOAD_TIMEOUT=SECONDS)", path, s->reading, sb->timeout);
    if (WIFSIGNALED(ws) && WTERMSIG(ws) != SIGKILL)
        return mp_error(MP_ERR_FORMAT, "%s: corrupt %s: the HDF5 library crashed reading it (signal %d, %s)", path,
                        s->kind, WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    if (WIFSIGNALED(ws))
        return mp_error(MP_ERR_FORMAT, "%s: corrupt %s: the %s was killed (signal %d; out of memory?)", path, s->kind,
                        s->who, WTERMSIG(ws));
    return mp_error(MP_ERR_FORMAT, "%s: corrupt %s: the %s stopped without an answer (exit status %d)", path, s->kind,
                    s->who, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
}

/* ---- the child ---- */

static int limit_known;
static struct rlimit limit_entry; /* the limits the child started with */

void mp_sandbox_limit(size_t bytes) {
    if (MP_GUARD_SANITIZED) return; /* shadow memory needs terabytes of address space */
    if (!limit_known) {
        if (getrlimit(RLIMIT_AS, &limit_entry) != 0) return;
        limit_known = 1;
    }
    FILE *fp = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    int ok = fp && fscanf(fp, "%lu", &pages) == 1;
    if (fp) fclose(fp);
    if (!ok) return;
    long psz = sysconf(_SC_PAGESIZE);
    rlim_t lim = (rlim_t)pages * (rlim_t)(psz > 0 ? psz : 4096);
    if (bytes > RLIM_INFINITY / 4 || lim > RLIM_INFINITY / 4) return;
    lim += (rlim_t)bytes + SANDBOX_HEADROOM;
    if (limit_entry.rlim_cur != RLIM_INFINITY && lim > limit_entry.rlim_cur) lim = limit_entry.rlim_cur;
    if (limit_entry.rlim_max != RLIM_INFINITY && lim > limit_entry.rlim_max) lim = limit_entry.rlim_max;
    struct rlimit rl = {lim, limit_entry.rlim_max};
    setrlimit(RLIMIT_AS, &rl);
}

void mp_sandbox_child_begin(unsigned timeout) {
    /* the parent's handlers (temporary-file cleanup...) are not the child's, and
     * a fault must end the child by its signal (also under sanitizers) */
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGPIPE, SIGXFSZ, SIGUSR1, SIGUSR2,
                               SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
    alarm(timeout + 5); /* ends the child even if the parent is gone */
    mp_sandbox_limit(0);
    mp_io_init();
    H5PLset_loading_state(0); /* a file cannot make us load filter plugins */
}

void mp_sandbox_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) _exit(3);
        p += k;
        n -= (size_t)k;
    }
}
