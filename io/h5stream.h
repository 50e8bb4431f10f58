/* h5stream.h — the HDF5 file driver of the files mechprobe writes (run files,
 * checkpoints): HDF5's POSIX driver (sec2), except that large raw-data writes
 * (a capture's attention tiles, chunks of activations) are staged in
 * bounded buffers (8 x 4 MiB) and written to the disk by an I/O thread with
 * O_DIRECT. A staging buffer goes to the I/O thread when full, on a flush, and
 * whenever that thread is idle (so the disk never waits for a buffer to fill,
 * and a busy disk gets large writes). Writers may also borrow a staging
 * buffer and pack data straight into it (mp_h5_stream_lend: no second copy).
 * After each 16 MiB it wrote the I/O thread asks a sync thread for an
 * fdatasync, which runs while the writes go on: the disk's flush (on a
 * virtual disk, the host's write-back) overlaps the forward instead of all of
 * it waiting in the commit's fsync (150-200 ms for 192 MiB here).
 *
 * Why: a capture of q, k and the patterns of 8 layers at T = 1024 writes 192
 * MiB; through the page cache that costs the writing thread 160-190 ms of
 * kernel time (page allocation and copy), on cores the forward is using. An
 * O_DIRECT write is a DMA from the staging buffer: the I/O thread sleeps while
 * the disk works, and the forward keeps its cores. The threads never call HDF5
 * (they only own descriptors and buffers), so the driver also serves the
 * parallel (not thread-safe) HDF5 build.
 *
 * The files are ordinary HDF5 files (no driver information is stored in them):
 * h5py, h5dump and the POSIX driver read them. Where O_DIRECT is refused
 * (tmpfs, some network file systems) every write is a plain pwrite as in sec2.
 * Ordering: a read or write that overlaps staged data, a flush, a truncate and
 * a close first wait for the staged data to reach the file; an I/O error of
 * the threads (a write, an fdatasync) fails the next write, flush or close
 * with the system's message. */
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

/* Zero-copy raw writes. A writer of many raw chunks (the capture's
 * attention tiles) borrows a staging buffer, packs chunks into it and hands
 * HDF5 pointers into it (H5Dwrite_chunk): the driver records each such write
 * where it lies instead of copying it, and the I/O thread writes the buffer
 * out once it is handed back. Writes of parts of the buffer that are not
 * 4 KiB-aligned are copied as usual. The buffer's bytes must not change from
 * their write until the hand-back; hand every buffer back before the file is
 * closed. Writes overlapping bytes recorded in a lent buffer (HDF5 rewriting
 * a chunk), reads of them and flushes write those bytes first, so the
 * order of writes is kept. No HDF5 call: lend and hand back may run on any
 * thread. */
typedef struct mp_h5_stream mp_h5_stream;
/* The driver's handle of file f when it is open with this driver and writes
 * with O_DIRECT, else NULL (no lending: write as usual). */
mp_h5_stream *mp_h5_stream_of(hid_t f);
/* The largest buffer mp_h5_stream_lend gives (one staging buffer, 4 MiB). */
size_t mp_h5_stream_lend_max(void);
/* A page-aligned buffer of `bytes` (<= mp_h5_stream_lend_max()), waiting
 * while the staging buffers are being written; NULL when none can be lent
 * (no memory, or all but one already lent): write as usual. */
void *mp_h5_stream_lend(mp_h5_stream *s, size_t bytes);
/* Hands a lent buffer back: what was written from it goes to the file in
 * the background (errors as for other staged writes), the rest is dropped. */
void mp_h5_stream_hand_back(mp_h5_stream *s, void *buf);

/* Counters of the files this process wrote with the driver (tests, benchmarks). */
typedef struct {
    unsigned long long staged_bytes;  /* written through the staging buffers, lent ones included */
    unsigned long long direct_bytes;  /* of those, written with O_DIRECT */
    unsigned long long plain_bytes;   /* written with plain pwrite on the caller's thread */
    unsigned long long lent_bytes;    /* of the staged bytes, recorded in lent buffers (not copied) */
    double wait_s;                    /* time writers waited for a staging buffer (the disk behind) */
} mp_h5_stream_stats;
void mp_h5_stream_get_stats(mp_h5_stream_stats *out);

#endif
