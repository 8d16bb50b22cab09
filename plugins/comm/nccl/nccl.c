/* phx-comm-nccl.so: collectives over NCCL (doc/guide/gpu.md).
 *
 * Rendezvous: rank 0 makes the NCCL unique id and publishes it in the
 * store under <prefix>nccl/uid; every rank reads it and joins with
 * ncclCommInitRankConfig on its device (the comm's cuda device, or
 * cuda:LOCAL_RANK for CPU buffers). The communicator is non-blocking, so
 * initialisation and every call can be bounded by PHX_TIMEOUT.
 *
 * Ordering: collectives run on a dedicated NCCL stream that first waits
 * (cudaStreamWaitEvent) for the work the calling thread queued on its
 * compute stream, so they overlap the compute issued after them (DDP's
 * buckets during backward). An event recorded after each collective goes
 * into a ring; a watchdog thread completes the ring's works in issue
 * order as their events fire, polls ncclCommGetAsyncError, and aborts
 * the communicator when an error shows (PHX_EPEER for a remote error,
 * PHX_EDEVICE otherwise) or when the oldest collective has not finished
 * after PHX_TIMEOUT (PHX_ETIMEOUT): every pending work completes with
 * that error and later calls fail at once. The stall check: once the
 * oldest collective has waited PHX_DESYNC_CHECK_MS, the watchdog
 * publishes what this rank issued (its last 64 collectives) through the
 * store and compares the other ranks' records (phx_kit_record_exchange),
 * so ranks out of step abort with PHX_EDESYNC naming both collectives
 * within about a second instead of PHX_TIMEOUT.
 *
 * The probe counts GPUs without initialising CUDA (NVML, see
 * plugins/device/cuda/visible.c), so phx_spawn may fork ranks after it.
 *
 * CPU buffers are staged through the device (pinned host buffer and a
 * device buffer, one staged collective in flight), so NCCL — the default
 * wherever each local rank has a GPU — also serves CPU tensors. */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include "phalanx/plugin/comm_v1.h"
#include "phalanx/plugin/device_v1.h"
#include "phalanx/plugin/kit.h"
#include "plugins/device/cuda/visible.h"

#define PX_RING 256 /* collectives in flight per communicator */
#define PX_HIST 64 /* collectives a stall-check record holds */
#define PX_REC_MAX (PX_HIST * 184 + 64)

typedef struct px_op {
    cudaEvent_t done; /* recorded on the NCCL stream after the collective */
    phx_work *work;
    double issued; /* monotonic seconds */
    const char *what;
    long long seq;
    void *host_out; /* staged: copy pinned -> here on completion */
    size_t out_bytes;
    size_t out_off; /* offset of the result in the pinned buffer */
} px_op;

typedef struct px_nccl {
    int rank, size, dev;
    int host_buffers; /* args->device was the CPU */
    double timeout_s;
    ncclComm_t comm;
    cudaStream_t stream; /* the NCCL stream */
    cudaEvent_t ready; /* compute stream -> NCCL stream */
    const phx_device_v1 *devt; /* the cuda device table (compute streams) */
    void *barrier_buf; /* one int on the device */
    /* staging for CPU buffers */
    void *stage_dev, *stage_host;
    size_t stage_bytes;
    int staged_pending;
    /* the ring, under mu */
    pthread_mutex_t issue_mu; /* one issuer at a time: NCCL calls in order */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* watchdog: new work or stop */
    pthread_cond_t space; /* issuers: a slot or the stage freed */
    px_op ring[PX_RING];
    unsigned head, tail; /* head: oldest pending; tail: next free */
    long long seq;
    int stop, broken;
    phx_status broken_st;
    char broken_msg[1024];
    pthread_t watchdog;
    /* the stall check (phalanx/plugin/kit.h): under mu */
    phx_store *store;
    char prefix[128]; /* <comm prefix>nccl/ */
    double check_s; /* PHX_DESYNC_CHECK_MS; 0: off */
    phx_kit_op hist[PX_HIST]; /* collective #q (op seq q + 1) at hist[q % PX_HIST] */
    long long checked; /* the op whose record went out */
    double next_poll;
    int64_t gen;
} px_nccl;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static phx_status cuda_err(cudaError_t e, int dev, const char *what)
{
    if (e == cudaSuccess) return PHX_OK;
    (void)cudaGetLastError();
    return phx_error(e == cudaErrorMemoryAllocation ? PHX_ENOMEM : PHX_EDEVICE, "nccl: cuda:%d: %s: %s (%s)", dev, what,
                     cudaGetErrorString(e), cudaGetErrorName(e));
}

static phx_status nccl_err(px_nccl *s, ncclResult_t r, const char *what)
{
    const char *last = s && s->comm ? ncclGetLastError(s->comm) : ncclGetLastError(NULL);
    phx_status st = r == ncclRemoteError                    ? PHX_EPEER
        : r == ncclInvalidArgument || r == ncclInvalidUsage ? PHX_EINVAL
                                                            : PHX_EDEVICE;
    return phx_error(st, "nccl: rank %d: %s: %s%s%s", s ? s->rank : -1, what, ncclGetErrorString(r),
                     last && *last ? ": " : "", last ? last : "");
}

/* A non-blocking communicator may answer ncclInProgress: wait (bounded)
 * until it settles. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double deadline)
{
    while (r == ncclInProgress) {
        if (now_s() > deadline) return ncclInProgress;
        sleep_us(50);
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclSystemError;
    }
    return r;
}

/* ---- the watchdog */

/* Fails every pending work and aborts the communicator; called by the
 * watchdog with mu held (returns with it held). Issuers see `broken` and
 * refuse new work; the abort waits for an issuer inside an NCCL call
 * (issue_mu), so the communicator is never freed under its feet. */
static void break_locked(px_nccl *s, phx_status st, const char *msg)
{
    s->broken = 1;
    s->broken_st = st;
    snprintf(s->broken_msg, sizeof s->broken_msg, "%s", msg);
    while (s->head != s->tail) {
        px_op *op = &s->ring[s->head % PX_RING];
        phx_work_complete(op->work, s->broken_st, s->broken_msg);
        s->head++;
    }
    s->staged_pending = 0;
    pthread_cond_broadcast(&s->space);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->issue_mu);
    ncclCommAbort(s->comm); /* stops the kernels of every pending collective */
    pthread_mutex_unlock(&s->issue_mu);
    pthread_mutex_lock(&s->mu);
}

/* This rank's record of what it issued (the format of
 * phx_kit_comm_record), with mu held. */
static void record_locked(const px_nccl *s, char *buf, size_t len)
{
    long long n = s->seq, lo = n > PX_HIST ? n - PX_HIST : 0;
    int w = snprintf(buf, len, "phx-kit-record %d %lld 1\n", s->rank, n);
    size_t used = w < 0 ? 0 : (size_t)w;
    for (long long q = lo; q < n && used + 184 < len; q++) {
        char text[160];
        w = snprintf(buf + used, len - used, "%lld %s\n", q, phx_kit_op_text(&s->hist[q % PX_HIST], text, sizeof text));
        if (w > 0) used += (size_t)w;
    }
}

/* The stall check for the oldest pending op, once it has waited
 * check_s: publishes this rank's record through the store (once per op)
 * and compares the other ranks' (every 100 ms while it waits). Called
 * with mu held; 1 with msg when the ranks went out of step. */
static int stall_check(px_nccl *s, const px_op *op, char *msg, size_t len)
{
    if (s->check_s <= 0 || !s->store || s->size < 2 || now_s() - op->issued < s->check_s) return 0;
    int first = op->seq != s->checked;
    if (!first && now_s() < s->next_poll) return 0;
    s->checked = op->seq;
    s->next_poll = now_s() + 0.1;
    char *rec = malloc(PX_REC_MAX), d[768];
    if (!rec) return 0;
    record_locked(s, rec, PX_REC_MAX);
    int64_t gen = s->gen;
    long long seq = op->seq;
    const char *what = op->what;
    pthread_mutex_unlock(&s->mu);
    int differ = phx_kit_record_exchange(s->store, s->prefix, s->rank, s->size, rec, first, &gen, d, sizeof d);
    free(rec);
    pthread_mutex_lock(&s->mu);
    s->gen = gen;
    if (differ)
        snprintf(msg, len, "nccl: rank %d: %s #%lld failed: %s; communicator aborted", s->rank, what, seq - 1, d);
    return differ;
}

static void *watchdog_main(void *arg)
{
    px_nccl *s = arg;
    cudaSetDevice(s->dev);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->head == s->tail) pthread_cond_wait(&s->wake, &s->mu);
        if (s->head == s->tail) break; /* stop, nothing pending */
        px_op *op = &s->ring[s->head % PX_RING];
        pthread_mutex_unlock(&s->mu);

        cudaError_t q = cudaEventQuery(op->done);
        ncclResult_t async = ncclSuccess;
        if (q == cudaErrorNotReady) ncclCommGetAsyncError(s->comm, &async);
        double waited = now_s() - op->issued;

        pthread_mutex_lock(&s->mu);
        char msg[1024];
        if (q == cudaSuccess) {
            if (op->host_out) {
                memcpy(op->host_out, (char *)s->stage_host + op->out_off, op->out_bytes);
                s->staged_pending = 0;
            }
            phx_work_complete(op->work, PHX_OK, NULL);
            s->head++;
            pthread_cond_broadcast(&s->space);
            continue;
        }
        if (q != cudaErrorNotReady) {
            (void)cudaGetLastError();
            snprintf(msg, sizeof msg, "nccl: rank %d: %s #%lld failed on cuda:%d: %s; communicator aborted", s->rank,
                     op->what, op->seq, s->dev, cudaGetErrorString(q));
            break_locked(s, PHX_EDEVICE, msg);
        } else if (async != ncclSuccess && async != ncclInProgress) {
            const char *last = ncclGetLastError(s->comm);
            snprintf(msg, sizeof msg, "nccl: rank %d: %s #%lld: %s%s%s; communicator aborted", s->rank, op->what,
                     op->seq,
                     async == ncclRemoteError ? "a peer failed or left (ncclRemoteError)" : ncclGetErrorString(async),
                     last && *last ? ": " : "", last ? last : "");
            break_locked(s, async == ncclRemoteError ? PHX_EPEER : PHX_EDEVICE, msg);
        } else if (waited > s->timeout_s) {
            snprintf(msg, sizeof msg,
                     "nccl: rank %d: %s #%lld did not complete within %g s (PHX_TIMEOUT); a peer is stuck or gone; "
                     "communicator aborted",
                     s->rank, op->what, op->seq, s->timeout_s);
            break_locked(s, PHX_ETIMEOUT, msg);
        } else if (stall_check(s, op, msg, sizeof msg)) {
            break_locked(s, PHX_EDESYNC, msg);
        } else {
            /* poll fast while the collective is young, then back off */
            pthread_mutex_unlock(&s->mu);
            sleep_us(waited < 0.002 ? 10 : waited < 0.1 ? 100 : 1000);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- init / finalize */

static void nccl_destroy(px_nccl *s)
{
    cudaSetDevice(s->dev);
    for (int i = 0; i < PX_RING; i++)
        if (s->ring[i].done) cudaEventDestroy(s->ring[i].done);
    if (s->ready) cudaEventDestroy(s->ready);
    if (s->stream) cudaStreamDestroy(s->stream);
    if (s->barrier_buf) cudaFree(s->barrier_buf);
    if (s->stage_dev) cudaFree(s->stage_dev);
    if (s->stage_host) cudaFreeHost(s->stage_host);
    pthread_mutex_destroy(&s->issue_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->space);
    free(s);
}

static phx_status get_unique_id(const phx_comm_init_args *a, ncclUniqueId *id)
{
    char key[512];
    snprintf(key, sizeof key, "%snccl/uid", a->prefix ? a->prefix : "");
    if (a->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess) return nccl_err(NULL, r, "ncclGetUniqueId");
        return phx_store_set(a->store, key, id, sizeof *id);
    }
    void *v = NULL;
    size_t len = 0;
    phx_status st = phx_store_get(a->store, key, &v, &len, a->timeout_s);
    if (st != PHX_OK) return st;
    if (len != sizeof *id) {
        free(v);
        return phx_error(PHX_EDESYNC,
                         "nccl: rank %d: the unique id under '%s' has %zu bytes, expected %zu (another "
                         "NCCL version on rank 0?)",
                         a->rank, key, len, sizeof *id);
    }
    memcpy(id, v, sizeof *id);
    free(v);
    return PHX_OK;
}

/* NCCL 2.18 added ncclCommSplit; older ones get the core's split (init
 * over the group, through the store). */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define PX_HAVE_SPLIT 1
#else
#define PX_HAVE_SPLIT 0
#endif

static phx_status nccl_open(const phx_comm_init_args *a, px_nccl *parent, int color, int key, void **state);

static phx_status nccl_init(const phx_comm_init_args *a, void **state)
{
    return nccl_open(a, NULL, 0, 0, state);
}

/* A communicator of a (its device set up as nccl_init's), its NCCL
 * communicator made from a unique id through the store, or (parent set)
 * by ncclCommSplit of parent with color and key. */
static phx_status nccl_open(const phx_comm_init_args *a, px_nccl *parent, int color, int key, void **state)
{
    if (!a || !state) return phx_error(PHX_EINVAL, "nccl: init: args and state are required");
    if (!a->store) return phx_error(PHX_EINVAL, "nccl: init: no store for the unique id");
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        return phx_error(PHX_ENOTFOUND, "nccl: rank %d: no CUDA device (%s)", a->rank,
                         ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount found 0");
    }
    int host = a->device.kind == PHX_DEVICE_CPU;
    int dev = host ? a->local_rank : a->device.index;
    if (dev < 0 || dev >= ndev)
        return phx_error(PHX_EINVAL, "nccl: rank %d: device cuda:%d, but this process sees %d CUDA device%s%s", a->rank,
                         dev, ndev, ndev == 1 ? "" : "s", host ? " (CPU buffers use cuda:LOCAL_RANK)" : "");
    const phx_device_v1 *devt = NULL;
    if (!host) {
        devt = phx_device_table(a->device);
        if (!devt) return PHX_ENOTFOUND; /* phx_device_table said why */
    }
    px_nccl *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "nccl: init: out of host memory");
    s->rank = a->rank;
    s->size = a->size;
    s->dev = dev;
    s->host_buffers = host;
    s->devt = devt;
    s->timeout_s = a->timeout_s > 0 ? a->timeout_s : 600.0;
    s->store = a->store;
    snprintf(s->prefix, sizeof s->prefix, "%snccl/", a->prefix ? a->prefix : "");
    s->check_s = phx_kit_comm_check_s(NULL);
    pthread_mutex_init(&s->issue_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->space, NULL);

    phx_status st = cuda_err(cudaSetDevice(dev), dev, "cudaSetDevice");
    if (st == PHX_OK)
        st = cuda_err(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), dev, "cudaStreamCreate");
    if (st == PHX_OK)
        st = cuda_err(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming), dev, "cudaEventCreate");
    for (int i = 0; i < PX_RING && st == PHX_OK; i++)
        st = cuda_err(cudaEventCreateWithFlags(&s->ring[i].done, cudaEventDisableTiming), dev, "cudaEventCreate");
    if (st == PHX_OK) st = cuda_err(cudaMalloc(&s->barrier_buf, sizeof(int)), dev, "cudaMalloc (barrier)");
    if (st == PHX_OK) st = cuda_err(cudaMemset(s->barrier_buf, 0, sizeof(int)), dev, "cudaMemset (barrier)");
    ncclUniqueId id;
    if (st == PHX_OK && !parent) st = get_unique_id(a, &id);
    if (st != PHX_OK) {
        nccl_destroy(s);
        return st;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    double deadline = now_s() + s->timeout_s;
    ncclResult_t r;
    const char *call = parent ? "ncclCommSplit" : "ncclCommInitRank";
#if PX_HAVE_SPLIT
    if (parent) {
        pthread_mutex_lock(&parent->issue_mu); /* no abort of the parent meanwhile */
        r = ncclCommSplit(parent->comm, color, key, &s->comm, &cfg);
        if (s->comm) r = settle(s->comm, r, deadline);
        pthread_mutex_unlock(&parent->issue_mu);
    } else
#else
    (void)color, (void)key;
#endif
    {
        r = ncclCommInitRankConfig(&s->comm, a->size, id, a->rank, &cfg);
        if (s->comm) r = settle(s->comm, r, deadline);
    }
    if (r != ncclSuccess) {
        if (r == ncclInProgress)
            st = phx_error(PHX_ETIMEOUT,
                           "nccl: rank %d: %s (world %d, cuda:%d) did not complete within "
                           "%g s (PHX_TIMEOUT); a peer did not join",
                           a->rank, call, a->size, dev, s->timeout_s);
        else
            st = nccl_err(s, r, call);
        if (s->comm) ncclCommAbort(s->comm);
        s->comm = NULL;
        nccl_destroy(s);
        return st;
    }
    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
        ncclCommAbort(s->comm);
        nccl_destroy(s);
        return phx_error(PHX_ENOMEM, "nccl: init: cannot start the watchdog thread");
    }
    *state = s;
    return PHX_OK;
}

static void nccl_finalize(void *state)
{
    px_nccl *s = state;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->watchdog, NULL); /* returns once every pending work completed */
    cudaSetDevice(s->dev);
    if (!s->broken) {
        double deadline = now_s() + s->timeout_s;
        ncclResult_t r = settle(s->comm, ncclCommFinalize(s->comm), deadline);
        if (r == ncclSuccess)
            ncclCommDestroy(s->comm);
        else
            ncclCommAbort(s->comm);
    }
    nccl_destroy(s);
}

#if PX_HAVE_SPLIT
/* phx_comm_split: ncclCommSplit of this communicator (collective over it;
 * a rank of no group takes part with NCCL_SPLIT_NOCOLOR). The group keeps
 * this rank's device. */
static phx_status nccl_split(void *state, int color, int key, const phx_comm_init_args *group, const int *parent_ranks,
                             void **sub)
{
    (void)parent_ranks;
    px_nccl *p = state;
    pthread_mutex_lock(&p->mu);
    int broken = p->broken;
    char why[sizeof p->broken_msg];
    snprintf(why, sizeof why, "%s", p->broken_msg);
    pthread_mutex_unlock(&p->mu);
    if (broken)
        return phx_error(PHX_EPEER, "nccl: rank %d: cannot split a communicator that failed earlier (%s)", p->rank,
                         why);
    if (color >= 0 && group) return nccl_open(group, p, color, key, sub);
    phx_status st = cuda_err(cudaSetDevice(p->dev), p->dev, "cudaSetDevice");
    if (st) return st;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t none = NULL;
    pthread_mutex_lock(&p->issue_mu);
    ncclResult_t r =
        settle(p->comm, ncclCommSplit(p->comm, NCCL_SPLIT_NOCOLOR, key, &none, &cfg), now_s() + p->timeout_s);
    pthread_mutex_unlock(&p->issue_mu);
    if (r == ncclInProgress)
        return phx_error(PHX_ETIMEOUT, "nccl: rank %d: ncclCommSplit (no color) did not complete within %g s", p->rank,
                         p->timeout_s);
    return r == ncclSuccess ? PHX_OK : nccl_err(p, r, "ncclCommSplit (no color)");
}
#endif

/* ---- issuing */

static ncclDataType_t nccl_type(phx_dtype dt)
{
    switch (dt) {
    case PHX_F16: return ncclFloat16;
    case PHX_BF16: return ncclBfloat16;
    case PHX_I32: return ncclInt32;
    case PHX_I64: return ncclInt64;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(phx_reduce_op op)
{
    switch (op) {
    case PHX_AVG: return ncclAvg;
    case PHX_MAX: return ncclMax;
    case PHX_MIN: return ncclMin;
    default: return ncclSum;
    }
}

/* A collective is the kit's record (phalanx/plugin/kit.h); NCCL queues
 * it on its own stream, so the kit's queue is not used. */
typedef phx_kit_op px_call;

static ncclResult_t enqueue(px_nccl *s, const px_call *c, const void *send, void *recv)
{
    size_t n = (size_t)c->count;
    ncclDataType_t t = nccl_type(c->dt);
    switch (c->kind) {
    case PHX_KIT_ALLREDUCE: return ncclAllReduce(send, recv, n, t, nccl_op(c->op), s->comm, s->stream);
    case PHX_KIT_BROADCAST: return ncclBroadcast(send, recv, n, t, c->root, s->comm, s->stream);
    case PHX_KIT_ALLGATHER: return ncclAllGather(send, recv, n, t, s->comm, s->stream);
    case PHX_KIT_REDUCE_SCATTER: return ncclReduceScatter(send, recv, n, t, nccl_op(c->op), s->comm, s->stream);
    default: return ncclAllReduce(s->barrier_buf, s->barrier_buf, 1, ncclInt32, ncclSum, s->comm, s->stream);
    }
}

/* Grows the staging buffers (only when a larger CPU collective comes). */
static phx_status stage_reserve(px_nccl *s, size_t bytes)
{
    if (bytes <= s->stage_bytes) return PHX_OK;
    if (s->stage_dev) cudaFree(s->stage_dev);
    if (s->stage_host) cudaFreeHost(s->stage_host);
    s->stage_dev = s->stage_host = NULL;
    s->stage_bytes = 0;
    phx_status st = cuda_err(cudaMalloc(&s->stage_dev, bytes), s->dev, "cudaMalloc (CPU staging)");
    if (st == PHX_OK)
        st =
            cuda_err(cudaHostAlloc(&s->stage_host, bytes, cudaHostAllocDefault), s->dev, "cudaHostAlloc (CPU staging)");
    if (st == PHX_OK) s->stage_bytes = bytes;
    return st;
}

static phx_status issue(px_nccl *s, const px_call *c, phx_work *work)
{
    /* the core has checked count, dtype, op and root (comm_v1.h) */
    size_t es = c->kind == PHX_KIT_BARRIER ? 0 : phx_dtype_size(c->dt);
    size_t n = (size_t)c->count * es,
           total = c->kind == PHX_KIT_ALLGATHER || c->kind == PHX_KIT_REDUCE_SCATTER ? n * (size_t)s->size : n;
    int staged = s->host_buffers && c->kind != PHX_KIT_BARRIER && n > 0;

    pthread_mutex_lock(&s->issue_mu);
    pthread_mutex_lock(&s->mu);
    while (!s->broken && (s->tail - s->head >= PX_RING || (staged && s->staged_pending)))
        pthread_cond_wait(&s->space, &s->mu);
    if (s->broken) {
        phx_status st = phx_error(s->broken_st, "%s", s->broken_msg);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_unlock(&s->issue_mu);
        return st;
    }
    pthread_mutex_unlock(&s->mu);

    phx_status st = PHX_OK;
    cudaSetDevice(s->dev);
    const void *send = c->send;
    void *recv = c->recv;
    size_t out_off = 0, out_bytes = 0;
    if (staged) {
        /* in-place layouts inside one device buffer */
        st = stage_reserve(s, total);
        if (st == PHX_OK) {
            char *d = s->stage_dev;
            size_t in_off = c->kind == PHX_KIT_ALLGATHER ? (size_t)s->rank * n : 0;
            size_t in_bytes = c->kind == PHX_KIT_REDUCE_SCATTER ? n * (size_t)s->size : n;
            out_off = c->kind == PHX_KIT_REDUCE_SCATTER ? (size_t)s->rank * n : 0;
            out_bytes = c->kind == PHX_KIT_ALLGATHER ? n * (size_t)s->size : n;
            memcpy((char *)s->stage_host + in_off, c->send, in_bytes);
            st = cuda_err(cudaMemcpyAsync(d + in_off, (char *)s->stage_host + in_off, in_bytes, cudaMemcpyHostToDevice,
                                          s->stream),
                          s->dev, "staging to the device");
            send = d + in_off;
            recv = c->kind == PHX_KIT_REDUCE_SCATTER ? d + out_off : d;
        }
    } else if (c->kind != PHX_KIT_BARRIER && s->devt) {
        /* the NCCL stream waits for the caller's queued compute */
        void *cs = s->devt->current_stream(s->dev);
        st = cuda_err(cudaEventRecord(s->ready, (cudaStream_t)cs), s->dev, "cudaEventRecord");
        if (st == PHX_OK) st = cuda_err(cudaStreamWaitEvent(s->stream, s->ready, 0), s->dev, "cudaStreamWaitEvent");
    }
    if (st == PHX_OK && (n > 0 || c->kind == PHX_KIT_BARRIER)) {
        double deadline = now_s() + s->timeout_s;
        ncclResult_t r = settle(s->comm, enqueue(s, c, send, recv), deadline);
        if (r != ncclSuccess) st = nccl_err(s, r, phx_kit_kind_name(c->kind));
    }
    if (st == PHX_OK && staged)
        st = cuda_err(cudaMemcpyAsync((char *)s->stage_host + out_off, (char *)s->stage_dev + out_off, out_bytes,
                                      cudaMemcpyDeviceToHost, s->stream),
                      s->dev, "staging to the host");
    pthread_mutex_lock(&s->mu);
    px_op *op = &s->ring[s->tail % PX_RING];
    if (st == PHX_OK && s->broken) st = phx_error(s->broken_st, "%s", s->broken_msg);
    if (st == PHX_OK) st = cuda_err(cudaEventRecord(op->done, s->stream), s->dev, "cudaEventRecord");
    if (st == PHX_OK) {
        op->work = work;
        op->issued = now_s();
        op->what = phx_kit_kind_name(c->kind);
        s->hist[s->seq % PX_HIST] = *c;
        op->seq = ++s->seq;
        op->host_out = staged ? c->recv : NULL;
        op->out_bytes = out_bytes;
        op->out_off = out_off;
        if (staged) s->staged_pending = 1;
        s->tail++;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->issue_mu);
    return st;
}

static phx_status nccl_allreduce(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *w)
{
    px_call c = {PHX_KIT_ALLREDUCE, buf, buf, count, dt, op, 0};
    return issue(state, &c, w);
}

static phx_status nccl_broadcast(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *w)
{
    px_call c = {PHX_KIT_BROADCAST, buf, buf, count, dt, PHX_SUM, root};
    return issue(state, &c, w);
}

static phx_status nccl_allgather(void *state, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *w)
{
    px_call c = {PHX_KIT_ALLGATHER, send, recv, count, dt, PHX_SUM, 0};
    return issue(state, &c, w);
}

static phx_status nccl_reduce_scatter(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                      phx_reduce_op op, phx_work *w)
{
    px_call c = {PHX_KIT_REDUCE_SCATTER, send, recv, count, dt, op, 0};
    return issue(state, &c, w);
}

static phx_status nccl_barrier(void *state, phx_work *w)
{
    px_call c = {PHX_KIT_BARRIER, NULL, NULL, 0, PHX_F32, PHX_SUM, 0};
    return issue(state, &c, w);
}

static const phx_comm_v1 nccl_vtable = {
    .init = nccl_init,
    .finalize = nccl_finalize,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter,
    .barrier = nccl_barrier,
#if PX_HAVE_SPLIT
    .split = nccl_split,
#endif
};

/* Usable when this process sees a GPU for each local rank: then NCCL
 * outranks gloo (200); for worlds of threads the threads backend should
 * win, so NCCL only offers a low priority there. */
static int nccl_probe(const phx_probe_ctx *ctx, char *why, size_t why_len)
{
    int n = px_cuda_visible_count(why, why_len); /* fork-safe: no CUDA initialisation */
    if (n == 0) return -1;
    if (ctx && ctx->local_size > n) {
        snprintf(why, why_len, "%d ranks on this node but only %d CUDA device%s", ctx->local_size, n,
                 n == 1 ? "" : "s");
        return -1;
    }
    return ctx && ctx->in_process ? 5 : 200;
}

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "nccl", PACKAGE_VERSION,
    "NVIDIA NCCL: GPU collectives on a dedicated stream, with a timeout watchdog", nccl_probe, &nccl_vtable);
