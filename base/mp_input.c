/* mp_input.c — the checked reader for input files named on a command line
 * (see mp_input.h): regular files only, checked before and after opening,
 * opened with O_NONBLOCK, read up to a stated cap. */
#include "mp_input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "--corpus FILE" or "FILE" */
static void name_of(char *buf, size_t n, const char *what, const char *path) {
    if (what && *what) snprintf(buf, n, "%s %s", what, path);
    else snprintf(buf, n, "%s", path);
}

mp_status mp_open_input(const char *path, const char *what, uint64_t max_bytes, int *fd, uint64_t *size) {
    char nm[4200], b1[32], b2[32];
    struct stat sb;
    *fd = -1;
    *size = 0;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "%s: no file name given", what && *what ? what : "input");
    name_of(nm, sizeof nm, what, path);
    if (stat(path, &sb) != 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", nm, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: is %s, not a regular file", nm, mp_file_kind(sb.st_mode));
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", nm, strerror(errno));
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return mp_error(MP_ERR_IO, "%s: cannot open: %s", nm, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) { /* replaced between stat and open */
        close(f);
        return mp_error(MP_ERR_IO, "%s: is %s, not a regular file", nm, mp_file_kind(sb.st_mode));
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > max_bytes) {
        close(f);
        return mp_error(MP_ERR_ARG, "%s: %s is larger than the %s allowed for it", nm,
                        mp_fmt_bytes((double)sb.st_size, b1), mp_fmt_bytes((double)max_bytes, b2));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return MP_OK;
}

mp_status mp_read_input(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *len) {
    char nm[4200], b1[32];
    int fd;
    uint64_t size;
    *out = NULL;
    *len = 0;
    if (max_bytes > (uint64_t)SIZE_MAX / 2) max_bytes = (uint64_t)SIZE_MAX / 2;
    mp_status st = mp_open_input(path, what, max_bytes, &fd, &size);
    if (st != MP_OK) return st;
    name_of(nm, sizeof nm, what, path);
    /* the size stat gave, plus room to see growth (one byte past the cap says "too large") */
    size_t cap = (size_t)size + 1, n = 0;
    if (cap < 4096) cap = 4096;
    if (cap > max_bytes + 2) cap = (size_t)max_bytes + 2;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory reading %s", nm, mp_fmt_bytes((double)cap, b1));
    }
    for (;;) {
        if (n > max_bytes) {
            st = mp_error(MP_ERR_ARG, "%s: more than the %s allowed for it (the file grew while read)", nm,
                          mp_fmt_bytes((double)max_bytes, b1));
            goto fail;
        }
        if (n + 1 >= cap) {
            size_t nc = cap * 2;
            if (nc > max_bytes + 2) nc = (size_t)max_bytes + 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                st = mp_error(MP_ERR_NOMEM, "%s: out of memory reading %s", nm, mp_fmt_bytes((double)nc, b1));
                goto fail;
            }
            buf = nb;
            cap = nc;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0) {
            if (errno == EINTR) continue;
            st = mp_error(MP_ERR_IO, "%s: read failed: %s", nm, strerror(errno));
            goto fail;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return MP_OK;
fail:
    free(buf);
    close(fd);
    return st;
}
