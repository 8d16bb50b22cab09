/* The threads communicator: every rank is a thread of this process.
 *
 * Rendezvous: rank 0 allocates the shared state and publishes its address
 * in the (in-process) store under <prefix>threads/shared; the others read
 * it. A TCP store means the ranks live in different processes: refused.
 *
 * Collectives run on a worker thread per rank, in issue order, and meet
 * at a sense-reversing barrier (spin briefly, then sleep on a condition
 * variable). Every element of a reduction is computed as in[0] op in[1]
 * op ... in rank order, so results are bitwise identical on every rank
 * and do not depend on thread timing:
 *   small (<= PX_STAGE bytes): each rank copies its input into its slot of
 *     a shared staging area, one barrier, then every rank reduces (or
 *     copies) all slots itself. Two staging areas alternate, so the next
 *     small op cannot overwrite a slot someone still reads: one barrier.
 *   large: ranks publish their buffer pointers, barrier, rank r reduces
 *     slice r of all buffers and stores the result into slice r of every
 *     buffer (each byte read once, written once), barrier.
 * A barrier that waits longer than the timeout poisons the world: every
 * rank's current and later collectives fail, naming the ranks that did
 * not arrive. phx_spawn's abort key (phx/spawn/abort) does the same as
 * soon as a sibling thread has failed. */
#include "config.h"
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "phalanx/log.h"
#include "phalanx/plugin/comm_v1.h"
#include "plugins/comm/reduce.h"

#define PX_STAGE (64u << 10)       /* small-op threshold and slot size, bytes */
#define PX_SPINS 4000              /* barrier polls before sleeping */
#define PX_ABORT_KEY "phx/spawn/abort"

enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BARRIER };

typedef struct slot {
    const void *send;
    void *recv;
} slot;

typedef struct shared {
    int size;
    atomic_int attached;           /* ranks holding it: the last frees */
    atomic_uint count;             /* arrivals at the current barrier */
    atomic_uint_fast64_t gen;      /* barrier generation */
    atomic_int broken;
    phx_status broken_st;          /* PHX_ETIMEOUT or PHX_EPEER, under mu */
    pthread_mutex_t mu;            /* sleepers, broken, why */
    pthread_cond_t cv;
    char why[512];
    atomic_uint_fast64_t *arrivals;/* per rank: barriers entered */
    slot *slots;                   /* per rank: this op's buffers */
    uint8_t *stage[2];             /* size * PX_STAGE bytes each */
} shared;

typedef struct op {
    int kind;
    const void *send;
    void *recv;
    int64_t count;
    phx_dtype dt;
    phx_reduce_op rop;
    int root;
    phx_work *w;
} op;

typedef struct tstate {
    int rank, size;
    double timeout;
    phx_store *store;
    shared *sh;
    uint64_t nsmall;               /* small ops run: picks the staging area */
    pthread_mutex_t qmu;           /* the queue */
    pthread_cond_t qcv;
    op *q;
    size_t qcap, qhead, qlen;
    int stop;
    pthread_t worker;
} tstate;

static void deadline_ts(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long ns = ts->tv_nsec + (long)(s * 1e9);
    ts->tv_sec += ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

static void cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Marks the world broken (first reason wins) and wakes every sleeper. */
static void poison(shared *sh, phx_status st, const char *why)
{
    pthread_mutex_lock(&sh->mu);
    if (!atomic_load(&sh->broken)) {
        snprintf(sh->why, sizeof sh->why, "%s", why);
        sh->broken_st = st;
        atomic_store(&sh->broken, 1);
    }
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
}

static phx_status broken_status(shared *sh, char *msg, size_t len)
{
    pthread_mutex_lock(&sh->mu);
    snprintf(msg, len, "%s", sh->why);
    phx_status st = sh->broken_st;
    pthread_mutex_unlock(&sh->mu);
    return st;
}

/* Names the ranks that have entered fewer barriers than we have. */
static void missing_ranks(const tstate *s, uint64_t mine, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
    for (int q = 0; q < s->size && off + 16 < len; q++)
        if (atomic_load(&s->sh->arrivals[q]) < mine)
            off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? ", " : "", q);
}

/* 1 when phx_spawn reports a failed sibling; its message goes into why. */
static int spawn_aborted(tstate *s, char *why, size_t len)
{
    void *v = NULL;
    size_t n = 0;
    if (phx_store_get(s->store, PX_ABORT_KEY, &v, &n, 1e-6) != PHX_OK) return 0;
    snprintf(why, len, "threads: rank %d: another rank of phx_spawn failed (%.*s)", s->rank, (int)n, (char *)v);
    free(v);
    return 1;
}

static phx_status barrier(tstate *s, char *msg, size_t len)
{
    shared *sh = s->sh;
    if (atomic_load(&sh->broken)) return broken_status(sh, msg, len);
    uint64_t g = atomic_load(&sh->gen);
    uint64_t mine = atomic_fetch_add(&sh->arrivals[s->rank], 1) + 1;
    if (atomic_fetch_add(&sh->count, 1) == (unsigned)s->size - 1) {
        atomic_store(&sh->count, 0);
        pthread_mutex_lock(&sh->mu);
        atomic_store(&sh->gen, g + 1);
        pthread_cond_broadcast(&sh->cv);
        pthread_mutex_unlock(&sh->mu);
        return PHX_OK;
    }
    for (int i = 0; i < PX_SPINS; i++) {
        if (atomic_load(&sh->gen) != g) return PHX_OK;
        if ((i & 63) == 63) sched_yield();
    }
    double start = now_s();
    pthread_mutex_lock(&sh->mu);
    while (atomic_load(&sh->gen) == g && !atomic_load(&sh->broken)) {
        double waited = now_s() - start;
        if (waited >= s->timeout) {
            char who[256], why[512];
            missing_ranks(s, mine, who, sizeof who);
            snprintf(why, sizeof why, "threads: rank %d waited %.3g s (PHX_TIMEOUT) at a collective; ranks not "
                     "there: %s", s->rank, s->timeout, who[0] ? who : "?");
            pthread_mutex_unlock(&sh->mu);
            poison(sh, PHX_ETIMEOUT, why);
            pthread_mutex_lock(&sh->mu);
            break;
        }
        struct timespec ts;
        deadline_ts(&ts, 0.1);
        pthread_cond_timedwait(&sh->cv, &sh->mu, &ts);
        if (atomic_load(&sh->gen) == g && !atomic_load(&sh->broken)) {
            char why[512];
            pthread_mutex_unlock(&sh->mu);
            if (spawn_aborted(s, why, sizeof why)) poison(sh, PHX_EPEER, why);
            pthread_mutex_lock(&sh->mu);
        }
    }
    int ok = atomic_load(&sh->gen) != g;
    pthread_mutex_unlock(&sh->mu);
    return ok ? PHX_OK : broken_status(sh, msg, len);
}

/* Slice r of count elements split n ways (in multiples of 16 elements,
 * so neighbouring slices do not share cache lines). */
static void slice(int64_t count, int n, int r, int64_t *lo, int64_t *hi)
{
    int64_t units = (count + 15) / 16, per = units / n, extra = units % n;
    int64_t a = r * per + (r < extra ? r : extra), b = a + per + (r < extra);
    *lo = a * 16 < count ? a * 16 : count;
    *hi = b * 16 < count ? b * 16 : count;
}

static phx_status run_op(tstate *s, const op *o, char *msg, size_t len)
{
    shared *sh = s->sh;
    const int n = s->size, r = s->rank;
    const size_t esz = phx_dtype_size(o->dt), bytes = (size_t)o->count * esz;
    const void *in[64];
    const void **inp = n <= 64 ? in : malloc((size_t)n * sizeof *inp);
    phx_status st = PHX_OK;
    if (!inp) { snprintf(msg, len, "threads: out of memory"); return PHX_ENOMEM; }
    if (o->kind == OP_BARRIER) { st = barrier(s, msg, len); goto out; }
    if (o->count == 0) goto out;
    /* allgather stages its input, the others their buffer */
    int small = o->kind != OP_REDUCE_SCATTER && bytes <= PX_STAGE;
    if (small) {
        uint8_t *stage = sh->stage[s->nsmall++ & 1];
        switch (o->kind) {
        case OP_ALLREDUCE:
            memcpy(stage + (size_t)r * PX_STAGE, o->recv, bytes);
            if ((st = barrier(s, msg, len))) break;
            for (int q = 0; q < n; q++) inp[q] = stage + (size_t)q * PX_STAGE;
            px_reduce_n(o->recv, inp, n, 0, (size_t)o->count, o->dt, o->rop, n);
            break;
        case OP_BROADCAST:
            if (r == o->root) memcpy(stage, o->recv, bytes);
            if ((st = barrier(s, msg, len))) break;
            if (r != o->root) memcpy(o->recv, stage, bytes);
            break;
        case OP_ALLGATHER:
            memcpy(stage + (size_t)r * PX_STAGE, o->send, bytes);
            if ((st = barrier(s, msg, len))) break;
            for (int q = 0; q < n; q++) memcpy((uint8_t *)o->recv + (size_t)q * bytes, stage + (size_t)q * PX_STAGE, bytes);
            break;
        }
        goto out;
    }
    sh->slots[r].send = o->send;
    sh->slots[r].recv = o->recv;
    if ((st = barrier(s, msg, len))) goto out;
    int64_t lo, hi;
    switch (o->kind) {
    case OP_ALLREDUCE: {
        /* rank r reduces slice r of every buffer and stores it into every
         * buffer: each byte is read once and written once */
        void *outs[64];
        void **outp = n <= 64 ? outs : malloc((size_t)n * sizeof *outp);
        if (!outp) { snprintf(msg, len, "threads: out of memory"); st = PHX_ENOMEM; break; }
        slice(o->count, n, r, &lo, &hi);
        for (int q = 0; q < n; q++) {
            inp[q] = sh->slots[q].recv;
            outp[q] = (uint8_t *)sh->slots[q].recv + (size_t)lo * esz;
        }
        px_reduce_to(outp, n, inp, n, (size_t)lo, (size_t)(hi - lo), o->dt, o->rop, n);
        if (outp != outs) free(outp);
        st = barrier(s, msg, len);
        break;
    }
    case OP_BROADCAST:
        if (r != o->root) memcpy(o->recv, sh->slots[o->root].recv, bytes);
        st = barrier(s, msg, len);
        break;
    case OP_ALLGATHER:
        for (int q = 0; q < n; q++) {
            uint8_t *dst = (uint8_t *)o->recv + (size_t)q * bytes;
            if (dst != sh->slots[q].send) memcpy(dst, sh->slots[q].send, bytes);
        }
        st = barrier(s, msg, len);
        break;
    case OP_REDUCE_SCATTER:
        for (int q = 0; q < n; q++) inp[q] = sh->slots[q].send;
        px_reduce_n(o->recv, inp, n, (size_t)r * (size_t)o->count, (size_t)o->count, o->dt, o->rop, n);
        st = barrier(s, msg, len);
        break;
    }
out:
    if (inp != in) free((void *)inp);
    return st;
}

static void *worker_main(void *p)
{
    tstate *s = p;
    char msg[512];
    pthread_mutex_lock(&s->qmu);
    for (;;) {
        while (!s->qlen && !s->stop) pthread_cond_wait(&s->qcv, &s->qmu);
        if (!s->qlen) break;
        op o = s->q[s->qhead];
        pthread_mutex_unlock(&s->qmu);
        msg[0] = 0;
        phx_status st = run_op(s, &o, msg, sizeof msg);
        pthread_mutex_lock(&s->qmu);
        s->qhead = (s->qhead + 1) % s->qcap;
        s->qlen--;
        pthread_mutex_unlock(&s->qmu);
        phx_work_complete(o.w, st, msg);
        pthread_mutex_lock(&s->qmu);
    }
    pthread_mutex_unlock(&s->qmu);
    return NULL;
}

static phx_status enqueue(void *state, const op *o)
{
    tstate *s = state;
    pthread_mutex_lock(&s->qmu);
    if (s->qlen == s->qcap) {
        size_t cap = s->qcap ? 2 * s->qcap : 64;
        op *q = malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&s->qmu);
            return phx_error(PHX_ENOMEM, "threads: cannot grow the queue of rank %d", s->rank);
        }
        for (size_t i = 0; i < s->qlen; i++) q[i] = s->q[(s->qhead + i) % s->qcap];
        free(s->q);
        s->q = q;
        s->qcap = cap;
        s->qhead = 0;
    }
    s->q[(s->qhead + s->qlen++) % s->qcap] = *o;
    pthread_cond_signal(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    return PHX_OK;
}

/* ------------------------------------------------------------- lifecycle */

static void shared_free(shared *sh)
{
    if (!sh) return;
    free(sh->arrivals);
    free(sh->slots);
    free(sh->stage[0]);
    free(sh->stage[1]);
    pthread_mutex_destroy(&sh->mu);
    pthread_cond_destroy(&sh->cv);
    free(sh);
}

static shared *shared_new(int size)
{
    shared *sh = calloc(1, sizeof *sh);
    if (!sh) return NULL;
    sh->size = size;
    pthread_mutex_init(&sh->mu, NULL);
    cond_init(&sh->cv);
    sh->arrivals = calloc((size_t)size, sizeof *sh->arrivals);
    sh->slots = calloc((size_t)size, sizeof *sh->slots);
    sh->stage[0] = malloc((size_t)size * PX_STAGE);
    sh->stage[1] = malloc((size_t)size * PX_STAGE);
    if (!sh->arrivals || !sh->slots || !sh->stage[0] || !sh->stage[1]) { shared_free(sh); return NULL; }
    return sh;
}

static void detach(shared *sh)
{
    if (sh && atomic_fetch_sub(&sh->attached, 1) == 1) shared_free(sh);
}

static phx_status t_init(const phx_comm_init_args *a, void **state)
{
    if (!phx_store_is_local(a->store))
        return phx_error(PHX_EUNSUPPORTED, "threads: the rendezvous store is a TCP store, so the ranks are separate "
                         "processes; the threads backend needs every rank in this process (use gloo)");
    if (a->device.kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED, "threads: buffers on device kind %d; the threads backend moves CPU "
                         "memory only", a->device.kind);
    tstate *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "threads: out of memory");
    s->rank = a->rank;
    s->size = a->size;
    s->timeout = a->timeout_s;
    s->store = a->store;
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);

    char key[128];
    snprintf(key, sizeof key, "%sthreads/shared", a->prefix);
    phx_status st = PHX_OK;
    if (a->rank == 0) {
        shared *sh = shared_new(a->size);
        if (!sh) { st = phx_error(PHX_ENOMEM, "threads: out of memory for the shared state"); goto fail; }
        atomic_store(&sh->attached, a->size);    /* every rank will attach */
        if ((st = phx_store_set(a->store, key, &sh, sizeof sh))) { shared_free(sh); goto fail; }
        s->sh = sh;
    } else {
        void *v;
        size_t n;
        if ((st = phx_store_get(a->store, key, &v, &n, a->timeout_s))) {
            st = phx_error(st, "threads: rank %d: rank 0 did not publish the shared state within %.3g s",
                           a->rank, a->timeout_s);
            goto fail;
        }
        if (n == sizeof s->sh) memcpy(&s->sh, v, n);
        free(v);
        if (n != sizeof s->sh || !s->sh) { st = phx_error(PHX_EINTERNAL, "threads: bad shared-state key"); goto fail; }
        if (s->sh->size != a->size) {
            st = phx_error(PHX_EINVAL, "threads: rank %d has world size %d, rank 0 has %d", a->rank, a->size,
                           s->sh->size);
            detach(s->sh);
            goto fail;
        }
    }
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        detach(s->sh);
        st = phx_error(PHX_EIO, "threads: cannot start the worker thread of rank %d", a->rank);
        goto fail;
    }
    *state = s;
    return PHX_OK;
fail:
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
    free(s);
    return st;
}

static void t_finalize(void *state)
{
    tstate *s = state;
    if (!s) return;
    pthread_mutex_lock(&s->qmu);
    s->stop = 1;
    pthread_cond_signal(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    pthread_join(s->worker, NULL);   /* runs what is queued first */
    detach(s->sh);
    free(s->q);
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
    free(s);
}

static phx_status t_allreduce(void *st, void *buf, int64_t count, phx_dtype dt, phx_reduce_op rop, phx_work *w)
{
    op o = {OP_ALLREDUCE, NULL, buf, count, dt, rop, 0, w};
    return enqueue(st, &o);
}

static phx_status t_broadcast(void *st, void *buf, int64_t count, phx_dtype dt, int root, phx_work *w)
{
    op o = {OP_BROADCAST, NULL, buf, count, dt, PHX_SUM, root, w};
    return enqueue(st, &o);
}

static phx_status t_allgather(void *st, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *w)
{
    op o = {OP_ALLGATHER, send, recv, count, dt, PHX_SUM, 0, w};
    return enqueue(st, &o);
}

static phx_status t_reduce_scatter(void *st, const void *send, void *recv, int64_t count, phx_dtype dt,
                                   phx_reduce_op rop, phx_work *w)
{
    op o = {OP_REDUCE_SCATTER, send, recv, count, dt, rop, 0, w};
    return enqueue(st, &o);
}

static phx_status t_barrier(void *st, phx_work *w)
{
    op o = {OP_BARRIER, NULL, NULL, 0, PHX_F32, PHX_SUM, 0, w};
    return enqueue(st, &o);
}

static int t_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    if (ctx && ctx->in_process) return 100;
    snprintf(why, len, "the world spans several processes; threads needs every rank in one process "
             "(phx_spawn with PHX_COMM=threads, or DataParallel)");
    return -1;
}

static const phx_comm_v1 vtable = {
    .init = t_init,
    .finalize = t_finalize,
    .allreduce = t_allreduce,
    .broadcast = t_broadcast,
    .allgather = t_allgather,
    .reduce_scatter = t_reduce_scatter,
    .barrier = t_barrier,
};

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "threads", "1.0", "in-process ranks (threads) with shared-memory collectives", t_probe,
    &vtable);
