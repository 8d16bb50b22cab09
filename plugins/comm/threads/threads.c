/* The threads communicator: every rank is a thread of this process.
 *
 * Rendezvous: rank 0 allocates the shared state and publishes its address
 * in the (in-process) store under <prefix>threads/shared; the others read
 * it. A TCP store means the ranks live in different processes: refused.
 *
 * Collectives run on a worker thread per rank, in issue order (the kit's
 * communicator, phalanx/plugin/kit.h, whose failure protocol writes the
 * messages of failed ones), and meet
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
 * Each op's first barrier also compares what every rank issued: a rank
 * that issued another collective (kind, count, dtype, reduction, root)
 * fails every rank's op with PHX_EDESYNC naming both, at once.
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
#include "phalanx/plugin/kit.h"

#define PX_STAGE (64u << 10) /* small-op threshold and slot size, bytes */
#define PX_SPINS 4000 /* barrier polls before sleeping */

typedef struct slot {
    const void *send;
    void *recv;
} slot;

/* What a rank issued, written before an op's first barrier and read by
 * every rank after it: ranks out of step are named at that barrier. */
typedef struct opsig {
    phx_kit_op op;
    uint64_t seq;
} opsig;

typedef struct shared {
    int size;
    int attached; /* ranks holding it, under g_live_mu: the last frees */
    uint64_t id; /* unique per shared state (what the store key names) */
    struct shared *next_live; /* g_live, under g_live_mu */
    atomic_uint count; /* arrivals at the current barrier */
    atomic_uint_fast64_t gen; /* barrier generation */
    atomic_int broken;
    phx_status broken_st; /* PHX_ETIMEOUT or PHX_EPEER, under mu */
    pthread_mutex_t mu; /* sleepers, broken, why */
    pthread_cond_t cv;
    char why[512];
    atomic_uint_fast64_t *arrivals; /* per rank: barriers entered */
    slot *slots; /* per rank: this op's buffers */
    opsig *sig[2]; /* per rank, by the parity of the barrier it is for */
    uint8_t *stage[2]; /* size * PX_STAGE bytes each */
} shared;

typedef struct tstate {
    int rank, size;
    double timeout;
    phx_store *store;
    shared *sh;
    uint64_t nsmall; /* small ops run: picks the staging area */
    uint64_t nops; /* ops run (the kit's op numbers) */
    phx_kit_comm *kit; /* the slots' state: runs this rank's ops in issue
                            order, with the kit's failure protocol */
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
    char first[384];
    if (!phx_kit_aborted(s->store, first, sizeof first)) return 0;
    snprintf(why, len, "another rank of phx_spawn failed (%s)", first);
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
    /* the timeout counts from the arrival: on a loaded machine the spins'
     * sched_yield calls alone can take seconds */
    double start = now_s();
    for (int i = 0; i < PX_SPINS; i++) {
        if (atomic_load(&sh->gen) != g) return PHX_OK;
        if ((i & 63) == 63) sched_yield();
    }
    pthread_mutex_lock(&sh->mu);
    while (atomic_load(&sh->gen) == g && !atomic_load(&sh->broken)) {
        double waited = now_s() - start;
        if (waited >= s->timeout) {
            char who[256], why[512];
            missing_ranks(s, mine, who, sizeof who);
            snprintf(why, sizeof why,
                     "rank %d waited %.3g s (PHX_TIMEOUT) at a collective; ranks not "
                     "there: %s",
                     s->rank, s->timeout, who[0] ? who : "?");
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

static int same_op(const phx_kit_op *a, const phx_kit_op *b)
{
    return a->kind == b->kind && a->count == b->count && a->dt == b->dt && a->op == b->op && a->root == b->root;
}

/* An op's first barrier: every rank has published what it issued, so a
 * rank that issued another collective is named here, at once (the
 * barrier itself does not tell one op from another). Writing the
 * signature for barrier b by parity is safe: a rank writes that parity
 * again only before barrier b + 2, after every rank has left barrier b
 * and so has read it. */
static phx_status op_barrier(tstate *s, const phx_kit_op *o, char *msg, size_t len)
{
    shared *sh = s->sh;
    int par = (int)(atomic_load(&sh->arrivals[s->rank]) & 1);
    sh->sig[par][s->rank].op = *o;
    sh->sig[par][s->rank].seq = s->nops;
    phx_status st = barrier(s, msg, len);
    if (st) return st;
    for (int q = 0; q < s->size; q++) {
        const opsig *g = &sh->sig[par][q];
        if (q == s->rank || same_op(&g->op, o)) continue;
        char mine[160], theirs[160];
        phx_kit_desync_text(msg, len, s->rank, phx_kit_op_text(o, mine, sizeof mine), s->nops, q,
                            phx_kit_op_text(&g->op, theirs, sizeof theirs));
        return PHX_EDESYNC;
    }
    return PHX_OK;
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

static phx_status run_op(tstate *s, const phx_kit_op *o, char *msg, size_t len)
{
    shared *sh = s->sh;
    const int n = s->size, r = s->rank;
    const size_t esz = phx_dtype_size(o->dt), bytes = (size_t)o->count * esz;
    const void *in[64];
    const void **inp = n <= 64 ? in : malloc((size_t)n * sizeof *inp);
    phx_status st = PHX_OK;
    if (!inp) {
        snprintf(msg, len, "threads: out of memory");
        return PHX_ENOMEM;
    }
    if (o->kind == PHX_KIT_BARRIER) {
        st = op_barrier(s, o, msg, len);
        goto out;
    }
    if (o->count == 0) goto out;
    /* allgather stages its input, the others their buffer */
    int small = o->kind != PHX_KIT_REDUCE_SCATTER && bytes <= PX_STAGE;
    if (small) {
        uint8_t *stage = sh->stage[s->nsmall++ & 1];
        switch (o->kind) {
        case PHX_KIT_ALLREDUCE:
            memcpy(stage + (size_t)r * PX_STAGE, o->recv, bytes);
            if ((st = op_barrier(s, o, msg, len))) break;
            for (int q = 0; q < n; q++) inp[q] = stage + (size_t)q * PX_STAGE;
            st = phx_kit_reduce(&o->recv, 1, inp, n, 0, (size_t)o->count, o->dt, o->op, n);
            break;
        case PHX_KIT_BROADCAST:
            if (r == o->root) memcpy(stage, o->recv, bytes);
            if ((st = op_barrier(s, o, msg, len))) break;
            if (r != o->root) memcpy(o->recv, stage, bytes);
            break;
        case PHX_KIT_ALLGATHER:
            memcpy(stage + (size_t)r * PX_STAGE, o->send, bytes);
            if ((st = op_barrier(s, o, msg, len))) break;
            for (int q = 0; q < n; q++)
                memcpy((uint8_t *)o->recv + (size_t)q * bytes, stage + (size_t)q * PX_STAGE, bytes);
            break;
        default: break; /* reduce_scatter is never small; barrier ran above */
        }
        goto out;
    }
    sh->slots[r].send = o->send;
    sh->slots[r].recv = o->recv;
    if ((st = op_barrier(s, o, msg, len))) goto out;
    int64_t lo, hi;
    switch (o->kind) {
    case PHX_KIT_ALLREDUCE: {
        /* rank r reduces slice r of every buffer and stores it into every
         * buffer: each byte is read once and written once */
        void *outs[64];
        void **outp = n <= 64 ? outs : malloc((size_t)n * sizeof *outp);
        if (!outp) {
            snprintf(msg, len, "threads: out of memory");
            st = PHX_ENOMEM;
            break;
        }
        slice(o->count, n, r, &lo, &hi);
        for (int q = 0; q < n; q++) {
            inp[q] = sh->slots[q].recv;
            outp[q] = (uint8_t *)sh->slots[q].recv + (size_t)lo * esz;
        }
        st = phx_kit_reduce(outp, n, inp, n, (size_t)lo, (size_t)(hi - lo), o->dt, o->op, n);
        if (outp != outs) free(outp);
        if (!st) st = barrier(s, msg, len);
        break;
    }
    case PHX_KIT_BROADCAST:
        if (r != o->root) memcpy(o->recv, sh->slots[o->root].recv, bytes);
        st = barrier(s, msg, len);
        break;
    case PHX_KIT_ALLGATHER:
        for (int q = 0; q < n; q++) {
            uint8_t *dst = (uint8_t *)o->recv + (size_t)q * bytes;
            if (dst != sh->slots[q].send) memcpy(dst, sh->slots[q].send, bytes);
        }
        st = barrier(s, msg, len);
        break;
    case PHX_KIT_REDUCE_SCATTER:
        for (int q = 0; q < n; q++) inp[q] = sh->slots[q].send;
        st = phx_kit_reduce(&o->recv, 1, inp, n, (size_t)r * (size_t)o->count, (size_t)o->count, o->dt, o->op, n);
        if (!st) st = barrier(s, msg, len);
        break;
    case PHX_KIT_BARRIER: break; /* run above */
    }
out:
    if (inp != in) free((void *)inp);
    return st;
}

/* The kit's run function: one op, on the rank's queue thread. */
static phx_status run_job(void *ctx, const phx_kit_op *o, char *msg, size_t len)
{
    tstate *s = ctx;
    phx_status st = run_op(s, o, msg, len);
    s->nops++;
    return st;
}

/* The kit's abort function (its stall check found the ranks out of
 * step): every rank's wait ends with msg. */
static void abort_run(void *ctx, phx_status st, const char *msg)
{
    tstate *s = ctx;
    poison(s->sh, st, msg);
}

/* ------------------------------------------------------------- lifecycle */

static void shared_free(shared *sh)
{
    if (!sh) return;
    free(sh->arrivals);
    free(sh->slots);
    free(sh->sig[0]);
    free(sh->sig[1]);
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
    sh->sig[0] = calloc((size_t)size, sizeof *sh->sig[0]);
    sh->sig[1] = calloc((size_t)size, sizeof *sh->sig[1]);
    sh->stage[0] = malloc((size_t)size * PX_STAGE);
    sh->stage[1] = malloc((size_t)size * PX_STAGE);
    if (!sh->arrivals || !sh->slots || !sh->sig[0] || !sh->sig[1] || !sh->stage[0] || !sh->stage[1]) {
        shared_free(sh);
        return NULL;
    }
    return sh;
}

/* Every live shared state of this process. Rank 0 creates one holding only
 * itself; another rank attaches by finding it here, under the mutex, so a
 * rank that fails (or never comes) before attaching leaks nothing, and one
 * that comes after the others left gets an error, not freed memory. */
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static shared *g_live;
static uint64_t g_next_id;

typedef struct shared_ref {
    shared *sh;
    uint64_t id;
} shared_ref;

static void publish(shared *sh, shared_ref *ref)
{
    pthread_mutex_lock(&g_live_mu);
    sh->id = ++g_next_id;
    sh->attached = 1;
    sh->next_live = g_live;
    g_live = sh;
    pthread_mutex_unlock(&g_live_mu);
    ref->sh = sh;
    ref->id = sh->id;
}

static shared *attach(const shared_ref *ref)
{
    shared *found = NULL;
    pthread_mutex_lock(&g_live_mu);
    for (shared *p = g_live; p; p = p->next_live)
        if (p == ref->sh && p->id == ref->id) {
            p->attached++;
            found = p;
            break;
        }
    pthread_mutex_unlock(&g_live_mu);
    return found;
}

static void detach(shared *sh)
{
    if (!sh) return;
    pthread_mutex_lock(&g_live_mu);
    int last = --sh->attached == 0;
    if (last)
        for (shared **pp = &g_live; *pp; pp = &(*pp)->next_live)
            if (*pp == sh) {
                *pp = sh->next_live;
                break;
            }
    pthread_mutex_unlock(&g_live_mu);
    if (last) shared_free(sh);
}

static phx_status t_init(const phx_comm_init_args *a, void **state)
{
    if (!phx_store_is_local(a->store))
        return phx_error(PHX_EUNSUPPORTED,
                         "threads: the rendezvous store is a TCP store, so the ranks are separate "
                         "processes; the threads backend needs every rank in this process (use gloo)");
    if (a->device.kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED,
                         "threads: buffers on device kind %d; the threads backend moves CPU "
                         "memory only",
                         a->device.kind);
    tstate *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "threads: out of memory");
    s->rank = a->rank;
    s->size = a->size;
    s->timeout = a->timeout_s;
    s->store = a->store;

    char key[128];
    snprintf(key, sizeof key, "%sthreads/shared", a->prefix);
    phx_status st = PHX_OK;
    if (a->rank == 0) {
        shared *sh = shared_new(a->size);
        if (!sh) {
            st = phx_error(PHX_ENOMEM, "threads: out of memory for the shared state");
            goto fail;
        }
        shared_ref ref;
        publish(sh, &ref);
        if ((st = phx_store_set(a->store, key, &ref, sizeof ref))) {
            detach(sh);
            goto fail;
        }
        s->sh = sh;
    } else {
        void *v;
        size_t n;
        shared_ref ref = {0};
        if ((st = phx_store_get(a->store, key, &v, &n, a->timeout_s))) {
            st = phx_error(st, "threads: rank %d: rank 0 did not publish the shared state within %.3g s", a->rank,
                           a->timeout_s);
            goto fail;
        }
        if (n == sizeof ref) memcpy(&ref, v, n);
        free(v);
        if (n != sizeof ref || !ref.sh) {
            st = phx_error(PHX_EINTERNAL, "threads: bad shared-state key");
            goto fail;
        }
        if (!(s->sh = attach(&ref))) {
            st = phx_error(PHX_EPEER, "threads: rank %d: the other ranks already left the group", a->rank);
            goto fail;
        }
        if (s->sh->size != a->size) {
            st = phx_error(PHX_EINVAL, "threads: rank %d has world size %d, rank 0 has %d", a->rank, a->size,
                           s->sh->size);
            detach(s->sh);
            goto fail;
        }
    }
    /* Init is collective: no rank leaves (and frees the shared state)
     * before every rank has attached; a rank that never comes ends the
     * wait at PHX_TIMEOUT, or at once through phx_spawn's abort key. */
    char why[512];
    if ((st = barrier(s, why, sizeof why))) {
        st = phx_error(st, "threads: rank %d: init: %s", a->rank, why);
        detach(s->sh);
        goto fail;
    }
    if ((st = phx_kit_comm_new(a, "threads", run_job, s, &s->kit))) {
        detach(s->sh);
        goto fail;
    }
    phx_kit_comm_set_abort(s->kit, abort_run);
    *state = s->kit;
    return PHX_OK;
fail:
    free(s);
    return st;
}

static void t_finalize(void *state)
{
    tstate *s = phx_kit_comm_ctx(state);
    if (!s) return;
    phx_kit_comm_free(s->kit); /* runs what is queued first */
    detach(s->sh);
    free(s);
}

static int t_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    if (ctx && ctx->in_process) return 100;
    snprintf(why, len,
             "the world spans several processes; threads needs every rank in one process "
             "(phx_spawn with PHX_COMM=threads)");
    return -1;
}

static const phx_comm_v1 vtable = {
    .init = t_init,
    .finalize = t_finalize,
    PHX_KIT_COMM_SLOTS,
};

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "threads", "1.0", "in-process ranks (threads) with shared-memory collectives", t_probe, &vtable);
