/* mp_mpi.c — start-up, process group, collectives and the data-parallel
 * gradient reduction of the MPI layer (see mp_mpi.h). Without MP_HAVE_MPI the
 * group is one process and every collective is the identity. */
#include "mp_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef MP_HAVE_MPI
#include <mpi.h>
#endif

int mp_mpi_built(void) {
#ifdef MP_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

static int launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}

#ifdef MP_HAVE_MPI

static int g_init, g_final, g_alone, g_wrank, g_wsize = 1;
/* A communicator of its own for the failure exit (mp_mpi_abort), so that its
 * barrier can never be matched with a collective the other ranks are in. */
static MPI_Comm g_exit_comm = MPI_COMM_NULL;
/* And one for naming the ranks that did not answer a collective in time. */
static MPI_Comm g_diag_comm = MPI_COMM_NULL;

static mp_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return mp_error(MP_ERR_IO, "MPI: %s: %s", what, msg);
}

static MPI_Comm comm(void) { return g_alone ? MPI_COMM_SELF : MPI_COMM_WORLD; }
static int active(void) { return g_init && !g_final && !g_alone && g_wsize > 1; }

/* ---- collectives with a deadline ----
 * A rank that stops (SIGSTOP, a hung device, a node lost without its
 * connections closing) would leave the others in a blocking collective for
 * ever. Each collective is started non-blocking and polled until
 * MECHPROBE_MPI_TIMEOUT seconds (default 600) have passed; then the ranks that
 * timed out tell each other so on g_diag_comm for a few seconds, and the
 * error names every rank that said nothing. */
static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mpi_timeout(void) {
    const char *e = getenv("MECHPROBE_MPI_TIMEOUT");
    if (e && *e) {
        char *end;
        double t = strtod(e, &end);
        if (*end == '\0' && t > 0 && t < 1e7) return t;
    }
    return 600.0;
}

/* The error after a timeout: asks every other rank on g_diag_comm whether it
 * is there (waiting up to 3 s for the answers) and names those that are not. */
static mp_status timed_out(const char *what, double limit) {
    int n = g_wsize, me = g_wrank;
    char missing[512] = "";
    size_t len = 0;
    int n_missing = 0;
    if (g_diag_comm != MPI_COMM_NULL && n <= 4096) {
        MPI_Request *rq = malloc((size_t)2 * n * sizeof *rq);
        int *in = calloc((size_t)n, sizeof *in);
        if (rq && in) {
            for (int r = 0; r < 2 * n; r++) rq[r] = MPI_REQUEST_NULL;
            for (int r = 0; r < n; r++) {
                if (r == me) continue;
                MPI_Irecv(&in[r], 1, MPI_INT, r, 77, g_diag_comm, &rq[r]);
                MPI_Isend(&me, 1, MPI_INT, r, 77, g_diag_comm, &rq[n + r]);
            }
            double end = wall_s() + 3.0;
            int all = 0;
            while (!all && wall_s() < end) {
                all = 1;
                for (int r = 0; r < n; r++) {
                    int done = 1;
                    if (rq[r] != MPI_REQUEST_NULL) MPI_Test(&rq[r], &done, MPI_STATUS_IGNORE);
                    if (!done) all = 0;
                }
                if (!all) usleep(2000);
            }
            for (int r = 0; r < n; r++) {
                if (r == me || rq[r] == MPI_REQUEST_NULL) continue;
                MPI_Cancel(&rq[r]);
                MPI_Request_free(&rq[r]);
                if (len < sizeof missing - 16)
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", n_missing ? ", " : "", r);
                n_missing++;
            }
            for (int r = 0; r < n; r++)
                if (rq[n + r] != MPI_REQUEST_NULL) MPI_Request_free(&rq[n + r]);
        }
        free(rq);
        free(in);
    }
    if (n_missing)
        return mp_error(MP_ERR_IO, "MPI: %s: rank %d waited %g s; rank%s %s did not answer (stopped, hung, or busy "
                        "for longer than the limit: MECHPROBE_MPI_TIMEOUT=SECONDS)", what, me, limit,
                        n_missing > 1 ? "s" : "", missing);
    return mp_error(MP_ERR_IO, "MPI: %s: rank %d waited %g s for the other ranks (MECHPROBE_MPI_TIMEOUT=SECONDS "
                    "sets the limit)", what, me, limit);
}

/* Completes n started requests before the deadline, or fails naming the ranks
 * that did not answer. */
static mp_status wait_all(MPI_Request *req, int n, const char *what) {
    double limit = mpi_timeout(), end = wall_s() + limit;
    for (long it = 0;; it++) {
        int flag = 0;
        int rc = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        if (flag) return MP_OK;
        if (it > 200) {
            if ((it & 63) == 0 && wall_s() > end) return timed_out(what, limit);
            usleep(it < 2000 ? 20 : 200);
        }
    }
}

/* Starts a non-blocking collective (its last argument &rq) and waits for it. */
#define COLLECTIVE(what, call)                      \
    do {                                            \
        MPI_Request rq;                             \
        int rc_ = (call);                           \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what); \
        mp_status ws_ = wait_all(&rq, 1, what);     \
        if (ws_ != MP_OK) return ws_;               \
    } while (0)

mp_status mp_mpi_init(int *argc, char ***argv) {
    if (g_init || !launched()) return MP_OK;
    int provided, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return mp_error(MP_ERR_IO, "MPI: cannot initialise (MPI_Init_thread failed)");
    g_init = 1;
    /* failures come back as codes and become mp_status messages */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_wsize);
    if (g_wsize > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_comm) != MPI_SUCCESS) g_exit_comm = MPI_COMM_NULL;
    if (g_wsize > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &g_diag_comm) != MPI_SUCCESS) g_diag_comm = MPI_COMM_NULL;
    return MP_OK;
}

void mp_mpi_finalize(void) {
    mp_mpi_grad_sync_free();
    if (g_init && !g_final) {
        g_final = 1;
        if (g_exit_comm != MPI_COMM_NULL) MPI_Comm_free(&g_exit_comm);
        if (g_diag_comm != MPI_COMM_NULL) MPI_Comm_free(&g_diag_comm);
        MPI_Finalize();
    }
}

/* Ends every rank after a failure. The ranks of a failure they all know of (a
 * collective capture or training step that one rank failed) each print their
 * own message first: without a wait, the first rank's MPI_Abort killed the
 * others before they had written theirs. So the message is flushed and the rank
 * waits at a barrier of the exit communicator for at most 2 s (a rank that
 * failed alone waits the 2 s, then ends the job as before). */
void mp_mpi_abort(int code) {
    if (!(g_init && !g_final && g_wsize > 1)) return;
    fflush(stdout);
    fflush(stderr);
    MPI_Request req;
    if (g_exit_comm != MPI_COMM_NULL && MPI_Ibarrier(g_exit_comm, &req) == MPI_SUCCESS) {
        int done = 0;
        double t0 = MPI_Wtime();
        while (!done && MPI_Wtime() - t0 < 2.0) {
            if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
            if (!done) usleep(1000);
        }
    }
    MPI_Abort(MPI_COMM_WORLD, code);
}

int mp_mpi_world_rank(void) { return g_init ? g_wrank : 0; }
int mp_mpi_world_size(void) { return g_init ? g_wsize : 1; }
int mp_mpi_rank(void) { return active() ? g_wrank : 0; }
int mp_mpi_size(void) { return active() ? g_wsize : 1; }

int mp_mpi_set_alone(int on) {
    int prev = g_alone;
    g_alone = on != 0;
    return prev;
}

void *mp_mpi_comm_ptr(void) {
    static MPI_Comm c;
    c = comm();
    return &c;
}

mp_status mp_mpi_barrier(void) {
    if (!active()) return MP_OK;
    COLLECTIVE("barrier", MPI_Ibarrier(comm(), &rq));
    return MP_OK;
}

mp_status mp_mpi_sum_f64(double *v, int n) {
    if (!active() || n <= 0) return MP_OK;
    COLLECTIVE("sum", MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, comm(), &rq));
    return MP_OK;
}

mp_status mp_mpi_sum_f32(float *v, size_t n) {
    if (!active()) return MP_OK;
    for (size_t done = 0; done < n;) { /* MPI counts are int */
        int k = n - done > (size_t)1 << 30 ? 1 << 30 : (int)(n - done);
        COLLECTIVE("sum", MPI_Iallreduce(MPI_IN_PLACE, v + done, k, MPI_FLOAT, MPI_SUM, comm(), &rq));
        done += (size_t)k;
    }
    return MP_OK;
}

mp_status mp_mpi_max_i64(int64_t *v, int n) {
    if (!active() || n <= 0) return MP_OK;
    COLLECTIVE("max", MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, comm(), &rq));
    return MP_OK;
}

mp_status mp_mpi_allgather_i64(int64_t v, int64_t *all) {
    if (!active()) { all[0] = v; return MP_OK; }
    COLLECTIVE("allgather", MPI_Iallgather(&v, 1, MPI_INT64_T, all, 1, MPI_INT64_T, comm(), &rq));
    return MP_OK;
}

mp_status mp_mpi_bcast(void *buf, size_t n, int root) {
    if (!active()) return MP_OK;
    if (n > (size_t)1 << 30) return mp_error(MP_ERR_ARG, "MPI: broadcast of %zu bytes (at most 1 GiB)", n);
    COLLECTIVE("broadcast", MPI_Ibcast(buf, (int)n, MPI_BYTE, root, comm(), &rq));
    return MP_OK;
}

mp_status mp_mpi_allgatherv_i32(const int32_t *mine, int n_mine, int32_t *all, const int64_t *counts) {
    if (!active()) {
        if (n_mine) memcpy(all, mine, (size_t)n_mine * sizeof *all);
        return MP_OK;
    }
    int *c = mp_malloc((size_t)g_wsize * 2 * sizeof *c, "gathered counts");
    if (!c) return MP_ERR_NOMEM;
    int64_t off = 0;
    for (int r = 0; r < g_wsize; r++) {
        if (counts[r] < 0 || counts[r] > INT32_MAX || off > INT32_MAX) {
            free(c);
            return mp_error(MP_ERR_ARG, "MPI: too many values to gather (%lld from rank %d)", (long long)counts[r], r);
        }
        c[r] = (int)counts[r];
        c[g_wsize + r] = (int)off;
        off += counts[r];
    }
    MPI_Request rq;
    int rc = MPI_Iallgatherv(mine, n_mine, MPI_INT32_T, all, c, c + g_wsize, MPI_INT32_T, comm(), &rq);
    mp_status st = rc == MPI_SUCCESS ? wait_all(&rq, 1, "allgather") : mpi_fail(rc, "allgather");
    free(c); /* (after a timeout the job ends: the request is never completed) */
    return st;
}

mp_status mp_mpi_gather_bytes(const void *buf, size_t n, int root, char **out, size_t *lens) {
    *out = NULL;
    if (!active()) {
        lens[0] = n;
        if (!(*out = mp_malloc(n ? n : 1, "gathered results"))) return MP_ERR_NOMEM;
        if (n) memcpy(*out, buf, n);
        return MP_OK;
    }
    const int size = g_wsize, me = g_wrank;
    int64_t mine = (int64_t)n;
    int64_t *all = mp_malloc((size_t)size * sizeof *all, "gathered sizes");
    int *counts = mp_malloc((size_t)size * sizeof *counts, "gathered sizes");
    int *displs = mp_malloc((size_t)size * sizeof *displs, "gathered sizes");
    mp_status st = MP_OK;
    int rc;
    if (!all || !counts || !displs) { st = MP_ERR_NOMEM; goto cleanup; }
    MPI_Request rq;
    if ((rc = MPI_Igather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, root, comm(), &rq)) != MPI_SUCCESS) {
        st = mpi_fail(rc, "gather");
        goto cleanup;
    }
    if ((st = wait_all(&rq, 1, "gather")) != MP_OK) goto cleanup;
    /* everyone learns whether the total fits MPI's int counts */
    int64_t total = 0;
    if (me == root)
        for (int r = 0; r < size; r++) total += all[r];
    if ((rc = MPI_Ibcast(&total, 1, MPI_INT64_T, root, comm(), &rq)) != MPI_SUCCESS) { st = mpi_fail(rc, "gather"); goto cleanup; }
    if ((st = wait_all(&rq, 1, "gather")) != MP_OK) goto cleanup;
    if (total > INT32_MAX) {
        st = mp_error(MP_ERR_ARG, "MPI: gathering %lld bytes of results on rank %d (at most 2 GiB)", (long long)total,
                      root);
        goto cleanup;
    }
    if (me == root) {
        int off = 0;
        for (int r = 0; r < size; r++) {
            counts[r] = (int)all[r];
            displs[r] = off;
            off += counts[r];
            lens[r] = (size_t)all[r];
        }
        if (!(*out = mp_malloc(total ? (size_t)total : 1, "gathered results"))) { st = MP_ERR_NOMEM; goto cleanup; }
    }
    /* (a root that could not allocate has left above with MP_ERR_NOMEM: its caller raises the error, which
       ends the job, the other ranks included) */
    if ((rc = MPI_Igatherv(buf, (int)n, MPI_BYTE, *out, counts, displs, MPI_BYTE, root, comm(), &rq)) != MPI_SUCCESS)
        st = mpi_fail(rc, "gather");
    else
        st = wait_all(&rq, 1, "gather");
cleanup:
    if (st != MP_OK && *out) { free(*out); *out = NULL; }
    free(all);
    free(counts);
    free(displs);
    return st;
}

int mp_mpi_first_failed(int failed) {
    if (!active()) return failed ? 0 : -1;
    int v = failed ? g_wrank : g_wsize, lowest = v;
    MPI_Request rq;
    if (MPI_Iallreduce(&v, &lowest, 1, MPI_INT, MPI_MIN, comm(), &rq) != MPI_SUCCESS ||
        wait_all(&rq, 1, "agreeing on a failure") != MP_OK)
        return failed ? g_wrank : 0;
    return lowest < g_wsize ? lowest : -1;
}

/* ---- data-parallel gradient reduction ---- */

typedef struct {
    float *buf;          /* the fused buffer: buckets in the order the backward hands them over */
    size_t cap, off;
    const mp_config *cfg;
    MPI_Request *req;
    int n_req, cap_req;
} gsync;

static gsync g_gs;

void mp_mpi_grad_sync_free(void) {
    free(g_gs.buf);
    free(g_gs.req);
    memset(&g_gs, 0, sizeof g_gs);
}

static mp_status gs_counts(void *user, int64_t *counts, int n) {
    gsync *s = user;
    s->off = 0;
    s->n_req = 0;
    COLLECTIVE("summing the target counts", MPI_Iallreduce(MPI_IN_PLACE, counts, n, MPI_INT64_T, MPI_SUM, comm(), &rq));
    return MP_OK;
}

/* Calls fn(segment, floats) for the gradient tensors of bucket `layer`
 * (a block, or -1: everything that is not per block), in mp_params order. */
static void each_segment(const mp_config *c, mp_grads *g, int layer, void (*fn)(gsync *, float *, size_t, int),
                         gsync *s, int pack) {
    mp_param_desc d[MP_PARAM_MAX];
    int nd = mp_params_describe(c, &g->g, d);
    for (int i = 0; i < nd; i++) {
        if (d[i].per_layer != (layer >= 0)) continue;
        size_t per = d[i].per_layer ? d[i].n / (size_t)c->n_layer : d[i].n;
        fn(s, d[i].p + (layer >= 0 ? (size_t)layer * per : 0), per, pack);
    }
}

static void copy_seg(gsync *s, float *p, size_t n, int pack) {
    if (pack) memcpy(s->buf + s->off, p, n * sizeof(float));
    else memcpy(p, s->buf + s->off, n * sizeof(float));
    s->off += n;
}

static mp_status gs_ready(void *user, mp_grads *g, const mp_config *c, int layer) {
    gsync *s = user;
    if (s->cap < g->n) {
        if (s->n_req) return mp_error(MP_ERR_ARG, "MPI: the model changed size during a gradient reduction");
        free(s->buf);
        s->cap = 0;
        if (!(s->buf = mp_malloc(g->n * sizeof(float), "the gradient all-reduce buffer"))) return MP_ERR_NOMEM;
        s->cap = g->n;
    }
    if (s->n_req == s->cap_req) {
        int nc = s->cap_req ? 2 * s->cap_req : c->n_layer + 1;
        MPI_Request *r = realloc(s->req, (size_t)nc * sizeof *r);
        if (!r) return mp_error(MP_ERR_NOMEM, "out of memory for the all-reduce requests");
        s->req = r;
        s->cap_req = nc;
    }
    s->cfg = c;
    size_t start = s->off;
    each_segment(c, g, layer, copy_seg, s, 1);
    size_t len = s->off - start;
    if (len > INT32_MAX) return mp_error(MP_ERR_ARG, "MPI: a bucket of %zu gradients (at most 2^31)", len);
    int rc = MPI_Iallreduce(MPI_IN_PLACE, s->buf + start, (int)len, MPI_FLOAT, MPI_SUM, comm(), &s->req[s->n_req++]);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "starting a gradient all-reduce");
    /* give the reductions already started a chance to progress */
    int flag;
    MPI_Testall(s->n_req, s->req, &flag, MPI_STATUSES_IGNORE);
    return MP_OK;
}

static mp_status gs_finish(void *user, mp_grads *g, double *loss) {
    gsync *s = user;
    mp_status ws = wait_all(s->req, s->n_req, "waiting for the gradient all-reduce");
    if (ws != MP_OK) return ws;
    if (s->n_req != s->cfg->n_layer + 1)
        return mp_error(MP_ERR_ARG, "MPI: %d gradient buckets reduced, expected %d", s->n_req, s->cfg->n_layer + 1);
    s->n_req = 0;
    /* the sums back into the gradients, in the order they were packed */
    s->off = 0;
    for (int l = s->cfg->n_layer - 1; l >= -1; l--) each_segment(s->cfg, g, l, copy_seg, s, 0);
    COLLECTIVE("summing the loss", MPI_Iallreduce(MPI_IN_PLACE, loss, 1, MPI_DOUBLE, MPI_SUM, comm(), &rq));
    return MP_OK;
}

const mp_grad_sync *mp_mpi_grad_sync(void) {
    static mp_grad_sync sync = {&g_gs, gs_counts, gs_ready, gs_finish};
    return active() ? &sync : NULL;
}

#else /* one process */

mp_status mp_mpi_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (launched())
        fprintf(stderr, "mechprobe: started by an MPI launcher, but built without MPI (MP_MPI=OFF, or Open MPI "
                        "not found): running as a single process\n");
    return MP_OK;
}
void mp_mpi_finalize(void) {}
void mp_mpi_abort(int code) { (void)code; }
int mp_mpi_world_rank(void) { return 0; }
int mp_mpi_world_size(void) { return 1; }
int mp_mpi_rank(void) { return 0; }
int mp_mpi_size(void) { return 1; }
int mp_mpi_set_alone(int on) { (void)on; return 0; }
void *mp_mpi_comm_ptr(void) { return NULL; }
const mp_grad_sync *mp_mpi_grad_sync(void) { return NULL; }
void mp_mpi_grad_sync_free(void) {}
mp_status mp_mpi_barrier(void) { return MP_OK; }
mp_status mp_mpi_sum_f64(double *v, int n) { (void)v; (void)n; return MP_OK; }
mp_status mp_mpi_sum_f32(float *v, size_t n) { (void)v; (void)n; return MP_OK; }
mp_status mp_mpi_max_i64(int64_t *v, int n) { (void)v; (void)n; return MP_OK; }
mp_status mp_mpi_allgather_i64(int64_t v, int64_t *all) { all[0] = v; return MP_OK; }
mp_status mp_mpi_bcast(void *buf, size_t n, int root) { (void)buf; (void)n; (void)root; return MP_OK; }
mp_status mp_mpi_allgatherv_i32(const int32_t *mine, int n_mine, int32_t *all, const int64_t *counts) {
    (void)counts;
    if (n_mine) memcpy(all, mine, (size_t)n_mine * sizeof *all);
    return MP_OK;
}
mp_status mp_mpi_gather_bytes(const void *buf, size_t n, int root, char **out, size_t *lens) {
    (void)root;
    lens[0] = n;
    if (!(*out = mp_malloc(n ? n : 1, "gathered results"))) return MP_ERR_NOMEM;
    if (n) memcpy(*out, buf, n);
    return MP_OK;
}
int mp_mpi_first_failed(int failed) { return failed ? 0 : -1; }

#endif
