/* mp_mpi.h — the MPI layer of mechprobe: start-up under a launcher (mpirun,
 * srun), the process group the other layers work in, the data-parallel
 * gradient reduction the trainer calls (mp_grad_sync, runtime/train.h), and
 * the few collectives the Lua bindings and the parallel capture writer need.
 *
 * Built in every configuration: without MPI (MP_MPI=OFF, or a process started
 * without a launcher) the group is this process alone (rank 0 of 1) and every
 * collective is the identity, so callers need no #ifdef. mpi.h is included
 * only by the .c files of this directory.
 *
 * The group is the world, except inside a sweep item (mp_mpi_set_alone), where
 * the process works alone: no data parallelism, no split captures. */
#ifndef MP_MPI_H
#define MP_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"
#include "train.h"

/* 1 when built with MPI. */
int mp_mpi_built(void);
/* Initialises MPI when the environment says a launcher started this process
 * (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE); otherwise nothing.
 * Errors are MP_ERR_IO with MPI's message. */
mp_status mp_mpi_init(int *argc, char ***argv);
/* MPI_Finalize when initialised (a no-op otherwise, and the second time). */
void mp_mpi_finalize(void);
/* Ends the whole job with `code` (MPI_Abort) when the world has several
 * ranks; returns otherwise (the caller exits as usual). */
void mp_mpi_abort(int code);

/* The world (0 and 1 without MPI). */
int mp_mpi_world_rank(void);
int mp_mpi_world_size(void);
/* The current group: the world, or this process alone inside a sweep item. */
int mp_mpi_rank(void);
int mp_mpi_size(void);
/* Makes the current group this process alone (on = 1) or the world again;
 * returns the previous setting. */
int mp_mpi_set_alone(int on);

/* The gradient reduction of the current group for mp_train_ws.sync (one fused
 * buffer, a bucket per block, reduced with MPI_Iallreduce as the backward
 * produces them); NULL when the group has one rank. */
const mp_grad_sync *mp_mpi_grad_sync(void);
/* Releases the fused buffer (also done by mp_mpi_finalize). */
void mp_mpi_grad_sync_free(void);

/* Collectives over the current group (identity with one rank). */
mp_status mp_mpi_barrier(void);
mp_status mp_mpi_sum_f64(double *v, int n);
mp_status mp_mpi_sum_f32(float *v, size_t n);
mp_status mp_mpi_max_i64(int64_t *v, int n);
/* all[r] = v of rank r (all has mp_mpi_size() entries). */
mp_status mp_mpi_allgather_i64(int64_t v, int64_t *all);
mp_status mp_mpi_bcast(void *buf, size_t n, int root);
/* Every rank's `n_mine` ints concatenated in rank order into all (which holds
 * the sum of counts[]; counts[r] = rank r's n, from mp_mpi_allgather_i64). */
mp_status mp_mpi_allgatherv_i32(const int32_t *mine, int n_mine, int32_t *all, const int64_t *counts);
/* Root receives the byte strings of every rank concatenated in rank order:
 * *out (free()) and lens[size]; other ranks get *out = NULL. */
mp_status mp_mpi_gather_bytes(const void *buf, size_t n, int root, char **out, size_t *lens);
/* Agreement after a phase some rank may have failed: returns the lowest rank
 * whose `failed` is non-zero, or -1 when none did. */
int mp_mpi_first_failed(int failed);

/* The communicator of the current group as an opaque value for the parallel
 * HDF5 writer (an MPI_Comm; meaningless without MPI). */
void *mp_mpi_comm_ptr(void);

#endif
