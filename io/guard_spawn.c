/* guard_spawn.c — the fresh-image child processes of the guarded readers and
 * their token check (guard_spawn.h). */
#define _GNU_SOURCE
#include "guard_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOKEN_LEN 32 /* hex digits */

#define GUARD_SLOWDOWN (MP_GUARD_SANITIZED ? 4.0 : 1.0)

double mp_guard_timeout(uint64_t fsize) {
    const char *e = getenv("MECHPROBE_LOAD_TIMEOUT");
    if (e && *e) {
        char *end;
        double t = strtod(e, &end);
        if (*end == '\0' && t > 0 && t < 1e6) return t;
    }
    return GUARD_SLOWDOWN * (5.0 + (double)(fsize >> 24));
}

/* Whether fd is an open pipe (a FIFO) whose access mode is `acc`. */
static int is_pipe(int fd, int acc) {
    struct stat sb;
    if (fd < 3 || fstat(fd, &sb) != 0 || !S_ISFIFO(sb.st_mode)) return 0;
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_ACCMODE) == acc;
}

const char *mp_guard_task(const char *name, int *fd) {
    const char *e = getenv(name);
    if (!e) return NULL;
    int tfd, used = 0;
    char token[TOKEN_LEN + 1] = "", got[TOKEN_LEN + 2];
    if (sscanf(e, "%d,%d,%32[0-9a-f],%n", fd, &tfd, token, &used) != 3 || used == 0 || e[used] == '\0' ||
        strlen(token) != TOKEN_LEN || *fd == tfd || !is_pipe(tfd, O_RDONLY) || !is_pipe(*fd, O_WRONLY))
        goto ignore;
    /* the token pipe: written and closed by the parent before the spawn */
    int fl = fcntl(tfd, F_GETFL);
    if (fl < 0 || fcntl(tfd, F_SETFL, fl | O_NONBLOCK) != 0) goto ignore;
    size_t n = 0;
    for (;;) {
        ssize_t k = read(tfd, got + n, sizeof got - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
        if (n == sizeof got) break;
    }
    if (n != TOKEN_LEN || memcmp(got, token, TOKEN_LEN) != 0) goto ignore;
    close(tfd);
    return e + used;
ignore:
    unsetenv(name);
    return NULL;
}

/* A fresh random token, TOKEN_LEN hex digits. */
static void make_token(char out[TOKEN_LEN + 1]) {
    unsigned char r[TOKEN_LEN / 2];
    size_t n = 0;
    while (n < sizeof r) {
        ssize_t k = getrandom(r + n, sizeof r - n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    if (n < sizeof r) { /* no getrandom: the clock and the pid, still checked through the pipe */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < sizeof r; i++) {
            x ^= x >> 33;
            x *= 0xff51afd7ed558ccdull;
            r[i] = (unsigned char)(x >> 56);
        }
    }
    for (size_t i = 0; i < sizeof r; i++) snprintf(out + 2 * i, 3, "%02x", r[i]);
}

extern char **environ;

/* Whether the address u is in the main program (the first object listed),
 * not in a shared object loaded by another one: only then does
 * /proc/self/exe carry the child's entry. */
static int in_main_cb(struct dl_phdr_info *info, size_t size, void *u) {
    (void)size;
    const uintptr_t fn = (uintptr_t)u;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && fn >= lo && fn < lo + ph->p_memsz) return 1;
    }
    return -1; /* the first object listed is the main program: stop there */
}

int mp_guard_spawn(pid_t *pid, const char *name, const void *entry, int wfd, const char *task, const char *argv0) {
    if (dl_iterate_phdr(in_main_cb, (void *)(uintptr_t)entry) != 1) return ENOEXEC;
    char token[TOKEN_LEN + 1];
    make_token(token);
    int tp[2];
    if (pipe2(tp, O_CLOEXEC) != 0) return errno;
    if (write(tp[1], token, TOKEN_LEN) != TOKEN_LEN) { /* a fresh pipe holds 64 KiB */
        close(tp[0]);
        close(tp[1]);
        return EIO;
    }
    close(tp[1]);
    size_t n = 0, nl = strlen(name);
    while (environ && environ[n]) n++;
    char **envp = malloc((n + 3) * sizeof *envp);
    size_t tlen = nl + strlen(task) + TOKEN_LEN + 64;
    char *var = malloc(tlen);
    if (!envp || !var) {
        free(envp);
        free(var);
        close(tp[0]);
        return ENOMEM;
    }
    /* the lowest numbers from 3 that are neither of the parent's descriptors, so that no dup2 undoes another
     * and each clears close-on-exec */
    int cfd = 3;
    while (cfd == wfd || cfd == tp[0]) cfd++;
    int tfd = cfd + 1;
    while (tfd == wfd || tfd == tp[0]) tfd++;
    snprintf(var, tlen, "%s=%d,%d,%s,%s", name, cfd, tfd, token, task);
    size_t k = 0;
    envp[k++] = var;
    envp[k++] = "OPENBLAS_NUM_THREADS=1"; /* no BLAS thread pool in a process that multiplies nothing */
    for (size_t i = 0; i < n; i++)
        if (!(strncmp(environ[i], name, nl) == 0 && environ[i][nl] == '=') &&
            strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21))
            envp[k++] = environ[i];
    envp[k] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    int err = posix_spawn_file_actions_init(&fa);
    if (!err) {
        if (!(err = posix_spawnattr_init(&at))) {
            err = posix_spawn_file_actions_adddup2(&fa, wfd, cfd); /* dup2 onto another number clears close-on-exec */
            if (!err) err = posix_spawn_file_actions_adddup2(&fa, tp[0], tfd);
            if (!err) err = posix_spawnattr_setsigmask(&at, &none);
            if (!err) err = posix_spawnattr_setsigdefault(&at, &all);
            if (!err) err = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
            char *argv[] = {(char *)argv0, NULL};
            if (!err) err = posix_spawn(pid, "/proc/self/exe", &fa, &at, argv, envp);
            posix_spawnattr_destroy(&at);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    close(tp[0]);
    free(var);
    free(envp);
    return err;
}
