/* h5stream.h — the HDF5 file driver of the files mechprobe writes (run files,
 * checkpoints): HDF5's POSIX driver (sec2), except that large raw-data writes
 * (a capture's attention tiles, chunks of activations) are staged in a
 * bounded buffer and written to the disk by an I/O thread with O_DIRECT.
 *
 * Why: a capture of q, k and the patterns of 8 layers at T = 1024 writes 192
 * MiB; through the page cache that costs the writing thread 160-190 ms of
 * kernel time (page allocation and copy), on cores the forward is using. An
 * O_DIRECT write is a DMA from the staging buffer: the I/O thread sleeps while
 * the disk works, and the forward keeps its cores. The thread never calls HDF5
 * (it only owns descriptors and buffers), so the driver also serves the
 * parallel (not thread-safe) HDF5 build.
 *
 * The files are ordinary HDF5 files (no driver information is stored in them):
 * h5py, h5dump and the POSIX driver read them. Where O_DIRECT is refused
 * (tmpfs, some network file systems) every write is a plain pwrite as in sec2.
 * Ordering: a read or write that overlaps staged data, a flush, a truncate and
 * a close first wait for the staged data to reach the file; an I/O error of
 * the thread fails the next write, flush or close with the system's message. */
#ifndef MP_H5STREAM_H
#define MP_H5STREAM_H

#include <hdf5.h>

/* The driver's id (registered on first use), or H5I_INVALID_HID. */
hid_t mp_h5_stream_driver(void);

/* Sets the driver (and the 4 KiB alignment of raw data it needs to write
 * directly) on a file-access property list; <0 on failure. */
herr_t mp_h5_stream_set(hid_t fapl);
/* The same with an open descriptor (read-write): files opened with this
 * list are that file (the driver writes through duplicates of fd, truncating
 * it for H5F_ACC_TRUNC; its O_DIRECT descriptor is opened through
 * /proc/self/fd), whatever name H5Fcreate/H5Fopen is given: the name is never
 * looked up. The caller keeps fd open until the file is closed. */
herr_t mp_h5_stream_set_fd(hid_t fapl, int fd);

/* The buffered descriptor of file f when it is open with this driver, else -1. */
int mp_h5_stream_fd(hid_t f);

/* For a file being thrown away (see mp_h5_discard_writes): waits for the
 * staged writes in flight, drops the staged data not yet submitted, forgets a
 * pending error, and points both descriptors at nfd. 0, or -1 when f is not
 * open with this driver. */
int mp_h5_stream_redirect(hid_t f, int nfd);

/* Deferred write errors, for a file that is thrown away when a write fails
 * (the dataset capture): with `on`, a failed write (a full disk) is not
 * reported to HDF5, which goes on as if it had succeeded (HDF5 1.10 cannot
 * recover from a failed metadata flush, and frees neither the chunks whose
 * write failed nor a file whose close failed), but kept: mp_h5_stream_deferred
 * returns its errno (0: none). The caller checks after each step and throws
 * the file away on an error. 0, or -1 when f is not open with this driver. */
int mp_h5_stream_defer_errors(hid_t f, int on);
int mp_h5_stream_deferred(hid_t f);

/* Counters of the files this process wrote with the driver (tests, benchmarks). */
typedef struct {
    unsigned long long staged_bytes;  /* written through the staging buffer */
    unsigned long long direct_bytes;  /* of those, written with O_DIRECT */
    unsigned long long plain_bytes;   /* written with plain pwrite on the caller's thread */
} mp_h5_stream_stats;
void mp_h5_stream_get_stats(mp_h5_stream_stats *out);

#endif
