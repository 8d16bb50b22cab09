/* The mpi communicator: collectives over an MPI library (Open MPI) for
 * jobs started by mpirun or srun.
 *
 * World: the plugin makes its own (comm_v1.world): MPI_Init_thread asks
 * for MPI_THREAD_MULTIPLE (a progress thread per communicator and a
 * watchdog call MPI while the application may too) and refuses a library
 * that cannot give it. No TCP store, no MASTER_ADDR. Each communicator
 * duplicates MPI_COMM_WORLD; MPI is finalized at exit.
 *
 * Progress: every collective is queued and returns at once; the kit's
 * communicator (phalanx/plugin/kit.h) runs the queue in issue order on one
 * thread per communicator, so DDP's bucket
 * all-reduces overlap backward. All-reduce of PHX_MPI_SHM_BYTES or more
 * (default 256 KiB) in a world on one node goes through a shared window
 * (mpi-shm.c); the rest through MPI's own collectives. f16/bf16 and f32
 * max/min reduce through user-defined MPI_Ops over the plugin kit's phx_kit_reduce
 * (f32 arithmetic; max/min propagate NaN); avg is sum then divide.
 *
 * Failures: MPI calls block without a timeout, so a watchdog thread turns
 * a collective running longer than PHX_TIMEOUT into PHX_ETIMEOUT naming
 * it and the rank it waits for, prints that line, and ends the job with
 * MPI_Abort (errorcode 124): a stuck MPI call cannot be cancelled. To
 * name the rank, the watchdogs talk on a second duplicate of the world
 * (the side channel): each keeps a receive posted for a query and answers
 * it with the op it is in; the watchdog that times out asks every other
 * rank and names those that give no answer within PX_ASK_S (stopped,
 * or stuck outside MPI), those whose watchdog did not run for longer
 * (stopped, woken by mpirun's SIGCONT), and those that answer from
 * another op. A rank asked while in an op reports at once too; the job
 * ends after the others in the op said they reported (PX_DONE_S at most). A rank that dies makes mpirun end
 * the others. An MPI error (MPI_ERRORS_RETURN) becomes PHX_EPEER, and the
 * kit's failure protocol writes its message and breaks the communicator:
 * later collectives fail at once. */
#include "config.h"
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/log.h"
#include "phalanx/plugin/comm_v1.h"
#include "plugins/comm/mpi/mpi-shm.h"
#include "phalanx/plugin/kit.h"

#define PX_SHM_DEFAULT (256u << 10) /* PHX_MPI_SHM_BYTES default */
#define PX_ABORT_CODE 124 /* MPI_Abort's errorcode on a timeout */
#define PX_CHUNK (1 << 30) /* elements per MPI call (counts are int) */
#define PX_ASK_S 1.0 /* how long a timed-out watchdog waits for the others' answers */
#define PX_TAG_ASK 1 /* side channel: "which op are you in?" */
#define PX_TAG_ANSWER 2 /* side channel: {op running (-1: none), ops entered, ms since its watchdog last ran} */
#define PX_TAG_DONE 3 /* side channel: "I reported; the job ends" */
#define PX_DONE_S 2.0 /* how long the watchdog that ends the job waits for the others to report */
#define PX_TAG_REC 4 /* side channel: a rank's record of what it issued (the stall check) */
#define PX_REC_MAX 16384 /* bytes of a record (phx_kit_comm_record) */

/* ------------------------------------------------------------ MPI itself */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_started; /* MPI usable by this plugin */
static int g_ours; /* initialized here: finalize at exit */
static MPI_Op g_ops[PHX_NUM_DTYPES][4]; /* user ops (MPI_OP_NULL: use a built-in) */

static const char *level_name(int l)
{
    return l == MPI_THREAD_SINGLE    ? "MPI_THREAD_SINGLE"
        : l == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
        : l == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
        : l == MPI_THREAD_MULTIPLE   ? "MPI_THREAD_MULTIPLE"
                                     : "?";
}

static void mpi_msg(int rc, char *buf, size_t len)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error code %d", rc);
    snprintf(buf, len, "%s", s);
}

/* inout[i] = in[i] op inout[i] through the kit (f32 arithmetic). */
#define PX_USER_OP(name, dt, op) \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type) \
    { \
        (void)type; \
        const void *src[2] = {in, inout}; \
        void *dst[1] = {inout}; \
        phx_kit_reduce(dst, 1, src, 2, 0, (size_t)*len, dt, op, 1); \
    }
PX_USER_OP(op_f16_sum, PHX_F16, PHX_SUM)
PX_USER_OP(op_f16_max, PHX_F16, PHX_MAX)
PX_USER_OP(op_f16_min, PHX_F16, PHX_MIN)
PX_USER_OP(op_bf16_sum, PHX_BF16, PHX_SUM)
PX_USER_OP(op_bf16_max, PHX_BF16, PHX_MAX)
PX_USER_OP(op_bf16_min, PHX_BF16, PHX_MIN)
PX_USER_OP(op_f32_max, PHX_F32, PHX_MAX)
PX_USER_OP(op_f32_min, PHX_F32, PHX_MIN)
#undef PX_USER_OP

/* What a watchdog did to end the job: a collective is stuck, so
 * MPI_Finalize at exit could block for ever (its fence waits for the
 * stuck rank); the exiting thread ends the process instead. */
enum { PX_RUNNING, PX_ENDING /* about to end the job */, PX_ABORTED /* called MPI_Abort */ };
static atomic_int g_aborting = PX_RUNNING;

/* The exit of a process whose watchdog ends the job. Open MPI's
 * MPI_Abort returns at once in a second thread while the first one's is
 * under way (its guard against recursion), so the exiting thread never
 * calls MPI_Finalize then: it ends the process with the same errorcode,
 * and mpirun ends the job on that exit if the watchdog's abort has not
 * yet (t/comm/mpi_stop.sh runs one with MPI's abort slowed down). */
static void mpi_at_exit(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (atomic_load(&g_aborting) != PX_RUNNING) {
        /* The main thread got the watchdog's error and returned: the
         * watchdog is still waiting for the other ranks in the op to
         * report, and aborting now would kill them before their lines
         * are out. It ends the job itself (MPI_Abort, then _exit) when
         * they have; this is the bound if it cannot. */
        fflush(NULL);
        struct timespec nap = {0, 50 * 1000 * 1000};
        for (int i = 0; i < (int)((PX_ASK_S + PX_DONE_S + 1.0) / 0.05); i++) nanosleep(&nap, NULL);
        if (atomic_load(&g_aborting) != PX_ABORTED) MPI_Abort(MPI_COMM_WORLD, PX_ABORT_CODE);
        _exit(PX_ABORT_CODE);
    }
    MPI_Finalize();
}

/* A watchdog ends the job, after a moment for the waiting thread to
 * report its error. */
static _Noreturn void end_job(void)
{
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    fflush(NULL);
    atomic_store(&g_aborting, PX_ABORTED);
    MPI_Abort(MPI_COMM_WORLD, PX_ABORT_CODE);
    _exit(PX_ABORT_CODE); /* MPI_Abort does not return */
}

/* MPI_Init_thread(MPI_THREAD_MULTIPLE) once per process (or accepts an
 * MPI the application started, at that level), and the user ops. */
static phx_status mpi_start(void)
{
    phx_status st = PHX_OK;
    pthread_mutex_lock(&g_mu);
    if (g_started) goto out;
    int inited = 0, fin = 0, level = 0, rc;
    MPI_Finalized(&fin);
    if (fin) {
        st = phx_error(PHX_EUNSUPPORTED, "mpi: MPI was finalized in this process already and cannot start again");
        goto out;
    }
    MPI_Initialized(&inited);
    if (inited) {
        MPI_Query_thread(&level);
    } else {
        /* The loader opens plugins RTLD_LOCAL; MPI libraries load their own
         * components, which expect libmpi's symbols to be global. */
        Dl_info di;
        if (dladdr((void *)MPI_Init_thread, &di) && di.dli_fname)
            dlopen(di.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level)) != MPI_SUCCESS) {
            char m[MPI_MAX_ERROR_STRING + 1];
            mpi_msg(rc, m, sizeof m);
            st = phx_error(PHX_EPEER, "mpi: MPI_Init_thread failed: %s", m);
            goto out;
        }
        g_ours = 1;
        atexit(mpi_at_exit);
    }
    if (level < MPI_THREAD_MULTIPLE) {
        st = phx_error(PHX_EUNSUPPORTED,
                       "mpi: the MPI library gives %s; this plugin needs MPI_THREAD_MULTIPLE "
                       "(a progress thread per communicator and a watchdog call MPI concurrently)%s",
                       level_name(level),
                       inited ? " (the application initialized MPI itself: ask for "
                                "MPI_THREAD_MULTIPLE in MPI_Init_thread)"
                              : "");
        goto out;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    static MPI_User_function *const fns[PHX_NUM_DTYPES][4] = {
        [PHX_F16] = {op_f16_sum, NULL, op_f16_max, op_f16_min},
        [PHX_BF16] = {op_bf16_sum, NULL, op_bf16_max, op_bf16_min},
        [PHX_F32] = {NULL, NULL, op_f32_max, op_f32_min},
    };
    for (int d = 0; d < PHX_NUM_DTYPES; d++)
        for (int o = 0; o < 4; o++) {
            g_ops[d][o] = MPI_OP_NULL;
            if (fns[d][o]) MPI_Op_create(fns[d][o], 1, &g_ops[d][o]);
        }
    g_started = 1;
out:
    pthread_mutex_unlock(&g_mu);
    return st;
}

static MPI_Datatype mpi_type(phx_dtype dt)
{
    switch (dt) {
    case PHX_F32: return MPI_FLOAT;
    case PHX_F16:
    case PHX_BF16: return MPI_UINT16_T;
    case PHX_I32: return MPI_INT32_T;
    default: return MPI_INT64_T;
    }
}

/* avg is reduced as sum, then divided. */
static MPI_Op mpi_op(phx_dtype dt, phx_reduce_op op)
{
    if (op == PHX_AVG) op = PHX_SUM;
    if (g_ops[dt][op] != MPI_OP_NULL) return g_ops[dt][op];
    return op == PHX_MAX ? MPI_MAX : op == PHX_MIN ? MPI_MIN : MPI_SUM;
}

/* The variable that shows an MPI launcher started this process (mpirun,
 * srun --mpi=pmix or pmi2, hydra), or NULL. */
static const char *launcher(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return vars[i];
    return NULL;
}

/* ------------------------------------------------------------ the ops */

typedef struct mstate {
    int rank, size;
    double timeout;
    MPI_Comm comm; /* this communicator's duplicate of the world */
    px_shm *shm; /* NULL: MPI's collectives only */
    size_t shm_min; /* all-reduce bytes from which shm is used */
    phx_kit_comm *kit; /* the slots' state: runs the ops in issue order on
                          its thread, with the kit's failure protocol */
    pthread_mutex_t mu; /* the watchdog's stop flag */
    pthread_cond_t wd_cv; /* the watchdog's sleep */
    int stop;
    pthread_t watchdog;
    /* the side channel (size > 1), the watchdog's thread only after init */
    MPI_Comm side; /* another duplicate of the world: the watchdogs' queries */
    MPI_Request ask_req; /* the posted receive of a query */
    int ask_buf;
    MPI_Request *answer_req; /* per peer: the answer being sent */
    int64_t (*answer_buf)[3];
    struct timespec last_run; /* the watchdog's last pass */
    int asked_by; /* the first rank that asked while this rank was in an op, or -1 */
    atomic_uint_fast64_t entered; /* ops run_op was called for */
    /* the stall check over the side channel (phalanx/plugin/kit.h): a
     * rank whose op runs longer than the check sends its record to every
     * other rank; a rank that receives one compares it with its own and
     * answers with its own record if that changed since it last sent it */
    double check_s; /* 0: off */
    char *rec_out, *rec_in; /* PX_REC_MAX bytes each */
    MPI_Request *rec_req; /* per peer: the record being sent from rec_out */
    MPI_Request rec_in_req; /* the posted receive of a record */
    uint64_t rec_sent_seq; /* the stalled op whose record went out (UINT64_MAX: none) */
    int *rec_owed; /* per peer: it sent a record this rank has not answered */
    int *rec_running; /* per peer: its last record said it was in an op */
} mstate;

/* Runs o; returns PHX_OK or an error with its message in msg. */
static phx_status run_op(void *ctx, const phx_kit_op *o, char *msg, size_t len)
{
    mstate *s = ctx;
    uint64_t seq = atomic_fetch_add(&s->entered, 1); /* the kit's op number */
    const size_t es = phx_dtype_size(o->dt), bytes = (size_t)o->count * es;
    MPI_Datatype t = mpi_type(o->dt);
    const char *call = "";
    int rc = MPI_SUCCESS;
    switch (o->kind) {
    case PHX_KIT_ALLREDUCE:
        if (!o->count || s->size == 1) break;
        if (s->shm && bytes >= s->shm_min) {
            if (px_shm_allreduce(s->shm, o->recv, o->count, o->dt, o->op, seq, msg, len)) return PHX_EDESYNC;
            return PHX_OK; /* divides for avg itself */
        }
        call = "MPI_Allreduce";
        for (int64_t off = 0; off < o->count && rc == MPI_SUCCESS; off += PX_CHUNK) {
            int n = (int)(o->count - off < PX_CHUNK ? o->count - off : PX_CHUNK);
            rc = MPI_Allreduce(MPI_IN_PLACE, (char *)o->recv + (size_t)off * es, n, t, mpi_op(o->dt, o->op), s->comm);
        }
        if (rc == MPI_SUCCESS && o->op == PHX_AVG) phx_kit_divide(o->recv, (size_t)o->count, o->dt, s->size);
        break;
    case PHX_KIT_BROADCAST:
        call = "MPI_Bcast";
        for (size_t off = 0; off < bytes && rc == MPI_SUCCESS; off += PX_CHUNK) {
            int n = (int)(bytes - off < PX_CHUNK ? bytes - off : PX_CHUNK);
            rc = MPI_Bcast((char *)o->recv + off, n, MPI_BYTE, o->root, s->comm);
        }
        break;
    case PHX_KIT_ALLGATHER:
        call = "MPI_Allgather";
        if (bytes > INT_MAX) {
            snprintf(msg, len, "mpi: rank %d: allgather of %zu bytes per rank: MPI counts stop at %d", s->rank, bytes,
                     INT_MAX);
            return PHX_EUNSUPPORTED;
        }
        if (!bytes) break;
        rc = MPI_Allgather(o->send == (char *)o->recv + (size_t)s->rank * bytes ? MPI_IN_PLACE : o->send, (int)bytes,
                           MPI_BYTE, o->recv, (int)bytes, MPI_BYTE, s->comm);
        break;
    case PHX_KIT_REDUCE_SCATTER:
        call = "MPI_Reduce_scatter_block";
        if (o->count > INT_MAX) {
            snprintf(msg, len, "mpi: rank %d: reduce_scatter of %" PRId64 " elements per rank: MPI counts stop at %d",
                     s->rank, o->count, INT_MAX);
            return PHX_EUNSUPPORTED;
        }
        if (!o->count) break;
        rc = MPI_Reduce_scatter_block(o->send, o->recv, (int)o->count, t, mpi_op(o->dt, o->op), s->comm);
        if (rc == MPI_SUCCESS && o->op == PHX_AVG) phx_kit_divide(o->recv, (size_t)o->count, o->dt, s->size);
        break;
    default: call = "MPI_Barrier"; rc = MPI_Barrier(s->comm);
    }
    if (rc == MPI_SUCCESS) return PHX_OK;
    char m[MPI_MAX_ERROR_STRING + 1];
    mpi_msg(rc, m, sizeof m);
    snprintf(msg, len, "%s failed: %s", call, m);
    return PHX_EPEER;
}

static double mono_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + 1e-9 * (double)(now.tv_nsec - t->tv_nsec);
}

/* This rank's answer: the op it is in (-1: none), how many it entered,
 * and the ms since the watchdog's previous pass (a process that was
 * stopped answers late, when it continues: the gap shows it). */
static void my_state(mstate *s, int64_t out[3])
{
    uint64_t seq;
    out[0] = phx_kit_comm_running(s->kit, NULL, &seq, NULL) ? (int64_t)seq : -1;
    out[1] = (int64_t)atomic_load(&s->entered);
    out[2] = (int64_t)(1e3 * mono_since(&s->last_run));
}

/* Answers the queries that came (the watchdog's thread). */
static void answer_queries(mstate *s)
{
    for (;;) {
        int done = 0;
        MPI_Status st;
        if (s->ask_req == MPI_REQUEST_NULL || MPI_Test(&s->ask_req, &done, &st) != MPI_SUCCESS || !done) return;
        int q = st.MPI_SOURCE, free_slot = 1;
        if (s->answer_req[q] != MPI_REQUEST_NULL) MPI_Test(&s->answer_req[q], &free_slot, MPI_STATUS_IGNORE);
        if (s->asked_by < 0 && phx_kit_comm_running(s->kit, NULL, NULL, NULL)) s->asked_by = q;
        if (free_slot) { /* else an answer to q is still on its way: q has it soon */
            my_state(s, s->answer_buf[q]);
            MPI_Isend(s->answer_buf[q], 3, MPI_INT64_T, q, PX_TAG_ANSWER, s->side, &s->answer_req[q]);
        }
        if (MPI_Irecv(&s->ask_buf, 1, MPI_INT, MPI_ANY_SOURCE, PX_TAG_ASK, s->side, &s->ask_req) != MPI_SUCCESS)
            s->ask_req = MPI_REQUEST_NULL;
    }
}

/* Asks every other rank which op it is in, waits up to PX_ASK_S for the
 * answers (answering the others' queries meanwhile), and writes to why
 * the ranks to blame: those that did not answer, then those in another
 * op than seq. */
static void ask_peers(mstate *s, uint64_t seq, char *why, size_t len, int *same)
{
    int n = s->size;
    MPI_Request *req = calloc((size_t)n * 2, sizeof *req);
    int64_t(*got)[3] = calloc((size_t)n, sizeof *got);
    int *answered = calloc((size_t)n, sizeof *answered);
    snprintf(why, len, "a rank is stuck, dead or issued other collectives");
    if (!req || !got || !answered || s->side == MPI_COMM_NULL) goto out;
    int one = 1, left = 0;
    for (int q = 0; q < n; q++) {
        req[q] = req[n + q] = MPI_REQUEST_NULL;
        if (q == s->rank) continue;
        MPI_Irecv(got[q], 3, MPI_INT64_T, q, PX_TAG_ANSWER, s->side, &req[q]);
        MPI_Isend(&one, 1, MPI_INT, q, PX_TAG_ASK, s->side, &req[n + q]);
        left++;
    }
    struct timespec t0, now, nap = {0, 5 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        answer_queries(s);
        clock_gettime(CLOCK_MONOTONIC, &s->last_run);
        for (int q = 0; q < n; q++) {
            int done = 0;
            if (q == s->rank || answered[q] || req[q] == MPI_REQUEST_NULL) continue;
            if (MPI_Test(&req[q], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
                answered[q] = 1;
                left--;
                if (got[q][0] >= 0 && (uint64_t)got[q][0] == seq) same[q] = 1;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!left || (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > PX_ASK_S) break;
        nanosleep(&nap, NULL);
    }
    size_t used = 0;
    why[0] = '\0';
    for (int pass = 0; pass < 2; pass++)
        for (int q = 0; q < n && used + 1 < len; q++) {
            if (q == s->rank || answered[q] != pass) continue;
            const char *sep = used ? "; " : "";
            int w = 0;
            if (!answered[q])
                w = snprintf(why + used, len - used,
                             "%srank %d stopped answering (no answer within %.3g s; this rank is in op #%" PRIu64 ")",
                             sep, q, PX_ASK_S, seq);
            else if ((double)got[q][2] > 1e3 * PX_ASK_S)
                w = snprintf(why + used, len - used,
                             "%srank %d stopped answering (it did not run for %.1f s; %s op #%" PRId64
                             ", this rank is in #%" PRIu64 ")",
                             sep, q, 1e-3 * (double)got[q][2], got[q][0] >= 0 ? "it is in" : "its last was",
                             got[q][0] >= 0 ? got[q][0] : got[q][1] - 1, seq);
            else if (got[q][0] >= 0 && (uint64_t)got[q][0] != seq)
                w = snprintf(why + used, len - used, "%srank %d is in op #%" PRId64 ", this rank in #%" PRIu64, sep, q,
                             got[q][0], seq);
            else if (got[q][0] < 0 && got[q][1] > 0)
                w = snprintf(why + used, len - used,
                             "%srank %d is in no collective (its last was op #%" PRId64 ", this rank is in #%" PRIu64
                             ")",
                             sep, q, got[q][1] - 1, seq);
            else if (got[q][0] < 0)
                w = snprintf(why + used, len - used, "%srank %d has issued no collective yet", sep, q);
            if (w > 0) used += (size_t)w < len - used ? (size_t)w : len - used - 1;
        }
    if (!used)
        snprintf(why, len, "every other rank answered from op #%" PRIu64 " too: the collective itself is stuck", seq);
out:
    if (req)
        for (int i = 0; i < 2 * n; i++)
            if (req[i] != MPI_REQUEST_NULL) MPI_Request_free(&req[i]);
    free(req);
    free(got);
    free(answered);
}

/* Tells the others this rank has reported, and waits up to PX_DONE_S for
 * the same word from the ranks in `same` (those in this op), answering
 * queries meanwhile: the job ends only after they reported too. */
static void wait_reports(mstate *s, const int *same)
{
    int n = s->size, one = 1, left = 0;
    MPI_Request *req = calloc((size_t)n * 2, sizeof *req);
    int *word = calloc((size_t)n, sizeof *word);
    if (!req || !word || s->side == MPI_COMM_NULL) goto out;
    for (int q = 0; q < n; q++) {
        req[q] = req[n + q] = MPI_REQUEST_NULL;
        if (q == s->rank) continue;
        MPI_Isend(&one, 1, MPI_INT, q, PX_TAG_DONE, s->side, &req[n + q]);
        if (same[q] && MPI_Irecv(&word[q], 1, MPI_INT, q, PX_TAG_DONE, s->side, &req[q]) == MPI_SUCCESS) left++;
    }
    struct timespec t0, nap = {0, 5 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (left > 0 && mono_since(&t0) < PX_DONE_S) {
        answer_queries(s);
        for (int q = 0; q < n; q++) {
            int done = 0;
            if (req[q] != MPI_REQUEST_NULL && MPI_Test(&req[q], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                left--;
        }
        nanosleep(&nap, NULL);
    }
out:
    if (req)
        for (int i = 0; i < 2 * n; i++)
            if (req[i] != MPI_REQUEST_NULL) MPI_Request_free(&req[i]);
    free(req);
    free(word);
}

/* Sends this rank's record to the peers in `to` (all when NULL) when the
 * sends of the previous one are done (else on a later pass); 1 when sent. */
static int rec_send(mstate *s, const int *to)
{
    int done = 1;
    for (int q = 0; q < s->size && done; q++)
        if (s->rec_req[q] != MPI_REQUEST_NULL) MPI_Test(&s->rec_req[q], &done, MPI_STATUS_IGNORE);
    if (!done) return 0;
    size_t n = phx_kit_comm_record(s->kit, s->rec_out, PX_REC_MAX);
    for (int q = 0; q < s->size; q++)
        if (q != s->rank && (!to || to[q]))
            MPI_Isend(s->rec_out, (int)n + 1, MPI_CHAR, q, PX_TAG_REC, s->side, &s->rec_req[q]);
    return 1;
}

/* The stall check's pass (the watchdog's thread): compares the records
 * that came, sends this rank's when its op has run check_s (once per op)
 * and answers the ranks that sent theirs. 1 with why when a rank issued
 * another collective at some op number than this rank. */
static int rec_pass(mstate *s, char *why, size_t len)
{
    if (s->side == MPI_COMM_NULL || s->check_s <= 0) return 0;
    int differ = 0, owed = 0;
    for (;;) {
        int done = 0;
        MPI_Status st;
        if (s->rec_in_req == MPI_REQUEST_NULL || MPI_Test(&s->rec_in_req, &done, &st) != MPI_SUCCESS || !done) break;
        int q = st.MPI_SOURCE, n = 0, r, running = 0;
        unsigned long long issued;
        MPI_Get_count(&st, MPI_CHAR, &n);
        s->rec_in[n > 0 && n <= PX_REC_MAX ? n - 1 : 0] = '\0';
        if (sscanf(s->rec_in, "phx-kit-record %d %llu %d", &r, &issued, &running) == 3) s->rec_running[q] = running;
        if (!differ) differ = phx_kit_comm_compare(s->kit, q, s->rec_in, why, len);
        s->rec_owed[q] = 1;
        owed = 1;
        if (MPI_Irecv(s->rec_in, PX_REC_MAX, MPI_CHAR, MPI_ANY_SOURCE, PX_TAG_REC, s->side, &s->rec_in_req) !=
            MPI_SUCCESS)
            s->rec_in_req = MPI_REQUEST_NULL;
    }
    uint64_t seq;
    double secs;
    if (phx_kit_comm_running(s->kit, NULL, &seq, &secs) && secs >= s->check_s && seq != s->rec_sent_seq) {
        if (rec_send(s, NULL)) {
            s->rec_sent_seq = seq;
            memset(s->rec_owed, 0, (size_t)s->size * sizeof *s->rec_owed);
        }
    } else if (owed && rec_send(s, s->rec_owed)) {
        memset(s->rec_owed, 0, (size_t)s->size * sizeof *s->rec_owed);
    }
    return differ;
}

/* Ends the job when the running collective outlives the timeout, or when
 * another rank that timed out in it asks (the job ends anyway: every rank
 * in the op reports then, not only the first). */
static void *watchdog_main(void *arg)
{
    mstate *s = arg;
    double nap = s->timeout / 20;
    if (nap > 0.25) nap = 0.25;
    if (s->check_s > 0 && nap > s->check_s / 10) nap = s->check_s / 10;
    if (nap < 0.005) nap = 0.005;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        phx_kit_op o;
        uint64_t seq;
        double secs;
        if (s->side != MPI_COMM_NULL) answer_queries(s);
        clock_gettime(CLOCK_MONOTONIC, &s->last_run);
        char d[1024];
        if (rec_pass(s, d, sizeof d)) {
            char msg[1200];
            if (!phx_kit_comm_desync(s->kit, d, msg, sizeof msg)) {
                /* no op runs: this rank's next one fails with it, and the
                 * ranks stuck in theirs end the job */
                phx_log(PHX_LOG_ERROR, "mpi: rank %d: %s", s->rank, d);
            } else {
                /* the stuck MPI call cannot be cancelled: as after a
                 * timeout, the job ends once the ranks in an op reported */
                atomic_store(&g_aborting, PX_ENDING);
                pthread_mutex_unlock(&s->mu);
                phx_log(PHX_LOG_ERROR, "%s; ending the job with MPI_Abort", msg);
                wait_reports(s, s->rec_running);
                end_job();
            }
        }
        if (phx_kit_comm_running(s->kit, &o, &seq, &secs) && (secs > s->timeout || s->asked_by >= 0)) {
            char msg[1024], why[768], within[96];
            int *same = calloc((size_t)s->size, sizeof *same), by = s->asked_by;
            atomic_store(&g_aborting, PX_ENDING);
            pthread_mutex_unlock(&s->mu);
            if (secs > s->timeout)
                snprintf(within, sizeof within, "%.3g s (PHX_TIMEOUT)", s->timeout);
            else
                snprintf(within, sizeof within, "%.2g s (rank %d reached PHX_TIMEOUT, %.3g s, first)", secs, by,
                         s->timeout);
            if (same)
                ask_peers(s, seq, why, sizeof why, same);
            else
                snprintf(why, sizeof why, "a rank is stuck, dead or issued other collectives");
            snprintf(msg, sizeof msg,
                     "mpi: rank %d: %s(count=%" PRId64 ", %s) #%" PRIu64 " did not complete within %s: %s; ending "
                     "the job with MPI_Abort",
                     s->rank, phx_kit_kind_name(o.kind), o.count, phx_dtype_name(o.dt), seq, within, why);
            phx_log(PHX_LOG_ERROR, "%s", msg);
            phx_kit_comm_expire(s->kit, PHX_ETIMEOUT, msg);
            if (same) wait_reports(s, same);
            free(same);
            end_job();
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(nap * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&s->wd_cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ------------------------------------------------------------ vtable */

static phx_status m_world(phx_comm_world_v1 *w)
{
    phx_status st = mpi_start();
    if (st) return st;
    MPI_Comm node;
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return phx_error(PHX_EPEER, "mpi: rank %d: MPI_Comm_split_type (ranks on this node) failed", w->rank);
    MPI_Comm_rank(node, &w->local_rank);
    MPI_Comm_size(node, &w->local_size);
    MPI_Comm_free(&node);
    return PHX_OK;
}

static size_t shm_threshold(void)
{
    const char *v = getenv("PHX_MPI_SHM_BYTES");
    if (!v || !*v) return PX_SHM_DEFAULT;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno) {
        phx_log(PHX_LOG_WARN, "PHX_MPI_SHM_BYTES='%s' is not a number of bytes; using %u", v, PX_SHM_DEFAULT);
        return PX_SHM_DEFAULT;
    }
    return x ? (size_t)x : SIZE_MAX; /* 0: never */
}

static void m_finalize(void *state);

/* Withdraws the posted query receive and frees the side channel. */
static void side_free(mstate *s)
{
    if (s->ask_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&s->ask_req);
        MPI_Wait(&s->ask_req, MPI_STATUS_IGNORE);
    }
    if (s->rec_in_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&s->rec_in_req);
        MPI_Wait(&s->rec_in_req, MPI_STATUS_IGNORE);
    }
    if (s->rec_req)
        for (int q = 0; q < s->size; q++)
            if (s->rec_req[q] != MPI_REQUEST_NULL) MPI_Request_free(&s->rec_req[q]);
    free(s->rec_req);
    free(s->rec_out);
    free(s->rec_in);
    free(s->rec_owed);
    free(s->rec_running);
    s->rec_req = NULL;
    s->rec_out = s->rec_in = NULL;
    s->rec_owed = s->rec_running = NULL;
    if (s->answer_req)
        for (int q = 0; q < s->size; q++)
            if (s->answer_req[q] != MPI_REQUEST_NULL) MPI_Request_free(&s->answer_req[q]);
    if (s->side != MPI_COMM_NULL) MPI_Comm_free(&s->side);
    free(s->answer_req);
    free(s->answer_buf);
    s->answer_req = NULL;
    s->answer_buf = NULL;
}

static phx_status m_open(const phx_comm_init_args *a, MPI_Comm base, void **state);

static phx_status m_init(const phx_comm_init_args *a, void **state)
{
    if (a->device.kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED, "mpi: buffers on device kind %d; this plugin moves CPU memory only",
                         a->device.kind);
    phx_status st = mpi_start();
    if (st) return st;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != a->rank || size != a->size)
        return phx_error(PHX_EINVAL,
                         "mpi: this communicator is rank %d of %d, but MPI_COMM_WORLD is rank %d of %d: "
                         "start every rank with mpirun or srun (phxrun and phx_spawn start ranks MPI does not "
                         "know about)",
                         a->rank, a->size, rank, size);
    return m_open(a, MPI_COMM_WORLD, state);
}

/* A communicator over base (the world, or a group from m_split): its own
 * duplicates of base for the ops and the watchdogs' side channel. */
static phx_status m_open(const phx_comm_init_args *a, MPI_Comm base, void **state)
{
    phx_status st;
    int rank, size, rc;
    MPI_Comm_rank(base, &rank);
    MPI_Comm_size(base, &size);
    mstate *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "mpi: out of memory");
    s->rank = rank;
    s->size = size;
    s->timeout = a->timeout_s;
    s->comm = s->side = MPI_COMM_NULL;
    s->ask_req = s->rec_in_req = MPI_REQUEST_NULL;
    s->asked_by = -1;
    s->rec_sent_seq = UINT64_MAX;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wd_cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = MPI_Comm_dup(base, &s->comm)) != MPI_SUCCESS) {
        char m[MPI_MAX_ERROR_STRING + 1];
        mpi_msg(rc, m, sizeof m);
        st = phx_error(PHX_EPEER, "mpi: rank %d: MPI_Comm_dup failed: %s", rank, m);
        goto fail;
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    s->shm_min = shm_threshold();
    if (size > 1 && s->shm_min != SIZE_MAX) {
        MPI_Comm node;
        int nsize = 0;
        if (MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
            MPI_Comm_size(node, &nsize);
            MPI_Comm_free(&node);
        }
        if (nsize == size) { /* the same on every rank: all on one node */
            char why[256];
            int mine, all = 0;
            if (!(s->shm = px_shm_new(s->comm, why, sizeof why)))
                phx_log(PHX_LOG_WARN, "mpi: rank %d: no shared window (%s); all-reduce goes through MPI", rank, why);
            mine = s->shm != NULL;
            MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, s->comm);
            if (!all && s->shm) { /* every rank takes the same path */
                px_shm_free(s->shm);
                s->shm = NULL;
            }
        }
    }
    if (size > 1) {
        s->answer_req = malloc((size_t)size * sizeof *s->answer_req);
        s->answer_buf = calloc((size_t)size, sizeof *s->answer_buf);
        if (!s->answer_req || !s->answer_buf) {
            st = phx_error(PHX_ENOMEM, "mpi: out of memory");
            goto fail;
        }
        for (int q = 0; q < size; q++) s->answer_req[q] = MPI_REQUEST_NULL;
        if ((rc = MPI_Comm_dup(base, &s->side)) != MPI_SUCCESS) {
            char m[MPI_MAX_ERROR_STRING + 1];
            mpi_msg(rc, m, sizeof m);
            st = phx_error(PHX_EPEER, "mpi: rank %d: MPI_Comm_dup (the watchdogs' side channel) failed: %s", rank, m);
            goto fail;
        }
        MPI_Comm_set_errhandler(s->side, MPI_ERRORS_RETURN);
        MPI_Irecv(&s->ask_buf, 1, MPI_INT, MPI_ANY_SOURCE, PX_TAG_ASK, s->side, &s->ask_req);
        s->rec_out = malloc(PX_REC_MAX);
        s->rec_in = malloc(PX_REC_MAX);
        s->rec_req = malloc((size_t)size * sizeof *s->rec_req);
        s->rec_owed = calloc((size_t)size, sizeof *s->rec_owed);
        s->rec_running = calloc((size_t)size, sizeof *s->rec_running);
        if (!s->rec_out || !s->rec_in || !s->rec_req || !s->rec_owed || !s->rec_running) {
            st = phx_error(PHX_ENOMEM, "mpi: out of memory");
            goto fail;
        }
        for (int q = 0; q < size; q++) s->rec_req[q] = MPI_REQUEST_NULL;
        MPI_Irecv(s->rec_in, PX_REC_MAX, MPI_CHAR, MPI_ANY_SOURCE, PX_TAG_REC, s->side, &s->rec_in_req);
    }
    clock_gettime(CLOCK_MONOTONIC, &s->last_run);
    if ((st = phx_kit_comm_new(a, "mpi", run_op, s, &s->kit))) goto fail;
    phx_kit_comm_set_exchange(s->kit, 1); /* the ranks share no store: the side channel */
    s->check_s = size > 1 ? phx_kit_comm_check_s(s->kit) : 0;
    if (pthread_create(&s->watchdog, NULL, watchdog_main, s)) {
        s->watchdog = 0;
        m_finalize(s->kit);
        return phx_error(PHX_ENOMEM, "mpi: cannot start the watchdog thread");
    }
    phx_log(PHX_LOG_INFO, "mpi: rank %d of %d; all-reduce from %zu bytes through %s", rank, size,
            s->shm ? s->shm_min : 0, s->shm ? "a shared window" : "MPI (no shared window)");
    *state = s->kit;
    return PHX_OK;
fail:
    px_shm_free(s->shm);
    side_free(s);
    if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
    pthread_cond_destroy(&s->wd_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return st;
}

/* Runs what is queued, then frees the window and the duplicate
 * (collective: every rank frees its communicators in the same order). */
static void m_finalize(void *state)
{
    mstate *s = phx_kit_comm_ctx(state);
    if (!s) return;
    phx_kit_comm_drain(s->kit);
    if (s->watchdog) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->wd_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->watchdog, NULL);
    }
    phx_kit_comm_free(s->kit);
    px_shm_free(s->shm);
    side_free(s);
    MPI_Comm_free(&s->comm);
    pthread_cond_destroy(&s->wd_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* phx_comm_split: MPI_Comm_split of this communicator's duplicate (the
 * core has just waited for its last op, so its queue thread is idle),
 * then a communicator over the group as m_init makes one over the world.
 * Ranks of no group take part with MPI_UNDEFINED. */
static phx_status m_split(void *state, int color, int key, const phx_comm_init_args *group, const int *parent_ranks,
                          void **sub)
{
    (void)parent_ranks;
    mstate *s = phx_kit_comm_ctx(state);
    MPI_Comm part = MPI_COMM_NULL;
    int rc = MPI_Comm_split(s->comm, color >= 0 ? color : MPI_UNDEFINED, key, &part);
    if (rc != MPI_SUCCESS) {
        char m[MPI_MAX_ERROR_STRING + 1];
        mpi_msg(rc, m, sizeof m);
        return phx_error(PHX_EPEER, "mpi: rank %d: MPI_Comm_split (color %d, key %d) failed: %s", s->rank, color, key,
                         m);
    }
    if (part == MPI_COMM_NULL) return PHX_OK;
    int grank = -1, gsize = -1;
    MPI_Comm_rank(part, &grank);
    MPI_Comm_size(part, &gsize);
    phx_status st;
    if (!group || grank != group->rank || gsize != group->size)
        st = phx_error(PHX_EINTERNAL,
                       "mpi: rank %d: MPI_Comm_split made group rank %d of %d, the core expected %d of %d", s->rank,
                       grank, gsize, group ? group->rank : -1, group ? group->size : 0);
    else
        st = m_open(group, part, sub);
    MPI_Comm_free(&part);
    return st;
}

/* Usable when an MPI launcher started the process; then preferred over
 * gloo (70 > 50), below threads for in-process worlds. */
static int m_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)ctx;
    if (launcher()) return 70;
    snprintf(why, len,
             "not started by an MPI launcher (no OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK): run the "
             "program under mpirun or srun");
    return -1;
}

static const phx_comm_v1 vtable = {
    .init = m_init,
    .finalize = m_finalize,
    PHX_KIT_COMM_SLOTS,
    .world = m_world,
    .split = m_split,
};

/* An ABI 1.5 plugin: it has comm_v1.world and comm_v1.split. */
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = {
    .abi_major = PHX_PLUGIN_ABI_MAJOR,
    .abi_minor = PHX_COMM_V1_SPLIT_MINOR,
    .struct_size = (uint32_t)sizeof(phx_plugin_desc),
    .kind = PHX_PLUGIN_COMM,
    .name = "mpi",
    .version = "1.0",
    .description = "CPU collectives over MPI (Open MPI) for jobs started by mpirun or srun; shared-memory "
                   "all-reduce within a node",
    .probe = m_probe,
    .vtable = &vtable,
};
