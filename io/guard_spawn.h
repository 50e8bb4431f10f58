/* guard_spawn.h — the child processes of the guarded readers (checkpoint.c's
 * loader, h5guard.c's file check, both through sandbox.h): a fresh image of this program
 * (/proc/self/exe) that finds its task in an environment variable, and the
 * time limit they share.
 *
 * A fresh image, not a bare fork: a forked copy of a threaded process inherits
 * every lock another thread held at the fork (under AddressSanitizer about one
 * load in 100-300 hung). The variable cannot make an ordinary process a reader
 * by accident: its value carries a random token made for this one spawn, and
 * the parent writes the same token into a pipe the child gets as a second
 * descriptor; the child takes the task only when the value parses, that pipe
 * holds exactly the token, and its output descriptor is a pipe open for
 * writing only. Anything else (a stray `NAME=1`, a value copied from another
 * process) is removed from the environment and has no effect. */
#ifndef MP_GUARD_SPAWN_H
#define MP_GUARD_SPAWN_H

#include <stdint.h>
#include <sys/types.h>

/* Whether this is a sanitizer build (its shadow memory needs terabytes of address space, and it runs slower). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MP_GUARD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MP_GUARD_SANITIZED 1
#endif
#endif
#ifndef MP_GUARD_SANITIZED
#define MP_GUARD_SANITIZED 0
#endif

/* Starts /proc/self/exe with NAME=<cfd>,<tfd>,<token>,<task> in its
 * environment and wfd (the write end of the parent's pipe) as its descriptor
 * cfd; entry is the child's constructor, which must be in the main program
 * (not a shared object) for the new image to run it; argv0 names the process.
 * 0 and *pid set, or an errno value (the caller forks instead). */
int mp_guard_spawn(pid_t *pid, const char *name, const void *entry, int wfd, const char *task, const char *argv0);

/* In the child's constructor: the task the parent gave (pointing into the
 * environment) and *fd, its output descriptor, when NAME is set by a genuine
 * parent; NULL otherwise, NAME then removed from the environment. */
const char *mp_guard_task(const char *name, int *fd);

/* Seconds a guarded child may take for a file of fsize bytes:
 * MECHPROBE_LOAD_TIMEOUT when set (0 < t < 1e6), else 5 s plus 1 s per 16 MiB
 * (a small corrupt file fails in seconds; a valid one reads at well over
 * 16 MiB/s), four times that in a sanitizer build. */
double mp_guard_timeout(uint64_t fsize);

#endif
