/* mp_input.h — the one checked reader for input files named on a command line
 * (--text-file, --tokens-file, --corpus, ...): refuses what is not a regular
 * file before reading it (a FIFO would block for ever, /dev/zero would be read
 * until memory runs out) and files over a stated size. */
#ifndef MP_INPUT_H
#define MP_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"

/* Default cap of mp_read_input / mp.read_file: 1 GiB. */
#define MP_INPUT_DEFAULT_MAX ((uint64_t)1 << 30)

/* Opens `path` for reading without ever blocking or reading a non-regular file:
 * stat (links followed), refuse a non-regular file, open with O_NONBLOCK
 * (a FIFO swapped in meanwhile does not block), fstat the descriptor again,
 * refuse a file over max_bytes. `what` (may be NULL) names the argument in
 * messages: "--corpus /dev/zero: is a character device, not a regular file".
 * On success *fd is open (blocking mode restored) and *size its size. */
mp_status mp_open_input(const char *path, const char *what, uint64_t max_bytes, int *fd, uint64_t *size);

/* The whole file in *out (malloc'd, NUL-terminated, *len bytes without the NUL),
 * with the checks of mp_open_input; the cap also holds while reading (a file
 * that grows meanwhile). */
mp_status mp_read_input(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *len);

#endif
