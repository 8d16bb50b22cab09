/* A comm plugin for t/plugin/abi: collectives through the rendezvous
 * store (each rank publishes its buffer under <prefix>op/<seq>/<rank> and
 * reads the others'), slow but real; reductions of f32 sums only, except
 * in the kit build. Built several ways (tools/local.mk):
 *   against the frozen ABI 1.0 headers (-I t/plugin/abi-1.0 first): a 1.0 plugin
 *     as one built before 1.1 existed, every 1.0 slot filled;
 *   ABI_NO_BARRIER   barrier left NULL (optional since 1.1)
 *   ABI_NO_BROADCAST broadcast left NULL (required): rejected
 *   ABI_MAJOR=N      the descriptor says major N: rejected
 *   ABI_KIT          ops run in issue order on the kit's queue thread
 *                    (phalanx/plugin/kit.h; all-reduces of <= 4 elements
 *                    inline when it is idle), reductions by phx_kit_reduce
 * ABI_NAME is the plugin's name (a bare word). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/plugin.h"
#include "phalanx/plugin/comm_v1.h"
#ifdef ABI_KIT
#include "phalanx/plugin/kit.h"
#endif

#define ABI_STR_(x) #x
#define ABI_STR(x) ABI_STR_(x)

typedef struct abi_state {
    int rank, size;
    phx_store *store;
    char prefix[64];
    double timeout_s;
    uint64_t seq;
#ifdef ABI_KIT
    phx_kit_queue *queue;
#endif
} abi_state;

enum { ALLREDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER, BARRIER };

/* One collective's arguments. */
typedef struct abi_op {
    int kind;
    const void *send;
    void *buf;
    int64_t count;
    phx_dtype dt;
    phx_reduce_op op;
    int root;
} abi_op;

/* Publishes bytes as this rank's part of the current op. */
static phx_status abi_put(abi_state *s, const void *buf, size_t bytes)
{
    char key[128];
    snprintf(key, sizeof key, "%sop/%llu/%d", s->prefix, (unsigned long long)s->seq, s->rank);
    return phx_store_set(s->store, key, buf, bytes);
}

/* Rank r's part of the current op (malloc'd, *len bytes). */
static phx_status abi_get(abi_state *s, int r, void **v, size_t *len)
{
    char key[128];
    snprintf(key, sizeof key, "%sop/%llu/%d", s->prefix, (unsigned long long)s->seq, r);
    return phx_store_get(s->store, key, v, len, s->timeout_s);
}

/* Every rank's part of the current op, in rank order; NULL entries on
 * failure. Free with abi_free_all. */
static phx_status abi_get_all(abi_state *s, void **parts, size_t bytes)
{
    phx_status st = PHX_OK;
    for (int r = 0; r < s->size; r++) parts[r] = NULL;
    for (int r = 0; r < s->size && !st; r++) {
        size_t len;
        if ((st = abi_get(s, r, &parts[r], &len)) == PHX_OK && len != bytes)
            st = phx_error(PHX_EINVAL, "abi: rank %d sent %zu bytes, expected %zu", r, len, bytes);
    }
    return st;
}

static void abi_free_all(abi_state *s, void **parts)
{
    for (int r = 0; r < s->size; r++) free(parts[r]);
}

/* out = the op over every rank's in[off..off+count) */
static phx_status abi_reduce(abi_state *s, void **parts, void *out, int64_t off, int64_t count, phx_dtype dt,
                             phx_reduce_op op)
{
#ifdef ABI_KIT
    return phx_kit_reduce(&out, 1, (const void *const *)parts, s->size, (size_t)off, (size_t)count, dt, op, s->size);
#else
    if (dt != PHX_F32 || op != PHX_SUM) return phx_error(PHX_EUNSUPPORTED, "abi: f32 sums only");
    float *o = out;
    for (int64_t i = 0; i < count; i++) {
        float v = 0;
        for (int r = 0; r < s->size; r++) v += ((const float *)parts[r])[off + i];
        o[i] = v;
    }
    return PHX_OK;
#endif
}

/* Runs one op synchronously. */
static phx_status abi_run(abi_state *s, const abi_op *o)
{
    size_t es = phx_dtype_size(o->dt), bytes = (size_t)o->count * es;
    void *parts[64];
    phx_status st = PHX_OK;
    if (s->size > 64) return phx_error(PHX_EUNSUPPORTED, "abi: worlds of up to 64 ranks");
    switch (o->kind) {
    case ALLREDUCE:
        if (!(st = abi_put(s, o->buf, bytes)) && !(st = abi_get_all(s, parts, bytes)))
            st = abi_reduce(s, parts, o->buf, 0, o->count, o->dt, o->op);
        abi_free_all(s, parts);
        break;
    case BROADCAST:
        if (s->rank == o->root) {
            st = abi_put(s, o->buf, bytes);
        } else {
            void *v = NULL;
            size_t len;
            if (!(st = abi_get(s, o->root, &v, &len)) && len == bytes) memcpy(o->buf, v, bytes);
            free(v);
        }
        break;
    case ALLGATHER:
        if (!(st = abi_put(s, o->send, bytes)) && !(st = abi_get_all(s, parts, bytes)))
            for (int r = 0; r < s->size; r++) memcpy((char *)o->buf + (size_t)r * bytes, parts[r], bytes);
        abi_free_all(s, parts);
        break;
    case REDUCE_SCATTER:
        bytes *= (size_t)s->size;
        if (!(st = abi_put(s, o->send, bytes)) && !(st = abi_get_all(s, parts, bytes)))
            st = abi_reduce(s, parts, o->buf, (int64_t)s->rank * o->count, o->count, o->dt, o->op);
        abi_free_all(s, parts);
        break;
    default: {
        char one = 1;
        if (!(st = abi_put(s, &one, 1)) && !(st = abi_get_all(s, parts, 1))) st = PHX_OK;
        abi_free_all(s, parts);
    }
    }
    s->seq++;
    return st;
}

#ifdef ABI_KIT
static phx_status abi_job(void *ctx, const void *job, char *msg, size_t len)
{
    phx_status st = abi_run(ctx, job);
    if (st) snprintf(msg, len, "%s", phx_last_error());
    return st;
}
#endif

/* Runs o now (or queues it, in the kit build) and completes w. */
static phx_status abi_issue(void *state, const abi_op *o, phx_work *w)
{
    abi_state *s = state;
#ifdef ABI_KIT
    /* small all-reduces run on the caller's thread when the queue is idle */
    if (o->kind == ALLREDUCE && o->count <= 4) return phx_kit_queue_push_inline(s->queue, o, w);
    return phx_kit_queue_push(s->queue, o, w);
#else
    phx_status st = abi_run(s, o);
    phx_work_complete(w, st, st ? phx_last_error() : NULL);
    return PHX_OK;
#endif
}

static phx_status abi_init(const phx_comm_init_args *a, void **state)
{
    abi_state *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "abi: out of memory");
    s->rank = a->rank;
    s->size = a->size;
    s->store = a->store;
    snprintf(s->prefix, sizeof s->prefix, "%s", a->prefix);
    s->timeout_s = a->timeout_s;
#ifdef ABI_KIT
    phx_status st = phx_kit_queue_new(sizeof(abi_op), abi_job, s, "abi", &s->queue);
    if (st) {
        free(s);
        return st;
    }
#endif
    *state = s;
    return PHX_OK;
}

static void abi_finalize(void *state)
{
#ifdef ABI_KIT
    phx_kit_queue_free(((abi_state *)state)->queue);
#endif
    free(state);
}

static phx_status abi_allreduce(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *w)
{
    abi_op o = {ALLREDUCE, NULL, buf, count, dt, op, 0};
    return abi_issue(state, &o, w);
}

#ifndef ABI_NO_BROADCAST
static phx_status abi_broadcast(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *w)
{
    abi_op o = {BROADCAST, NULL, buf, count, dt, PHX_SUM, root};
    return abi_issue(state, &o, w);
}
#endif

static phx_status abi_allgather(void *state, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *w)
{
    abi_op o = {ALLGATHER, send, recv, count, dt, PHX_SUM, 0};
    return abi_issue(state, &o, w);
}

static phx_status abi_reduce_scatter(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                     phx_reduce_op op, phx_work *w)
{
    abi_op o = {REDUCE_SCATTER, send, recv, count, dt, op, 0};
    return abi_issue(state, &o, w);
}

#ifndef ABI_NO_BARRIER
static phx_status abi_barrier(void *state, phx_work *w)
{
    abi_op o = {BARRIER, NULL, NULL, 0, PHX_F32, PHX_SUM, 0};
    return abi_issue(state, &o, w);
}
#endif

static const phx_comm_v1 abi_vtable = {
    .init = abi_init,
    .finalize = abi_finalize,
    .allreduce = abi_allreduce,
#ifndef ABI_NO_BROADCAST
    .broadcast = abi_broadcast,
#endif
    .allgather = abi_allgather,
    .reduce_scatter = abi_reduce_scatter,
#ifndef ABI_NO_BARRIER
    .barrier = abi_barrier,
#endif
};

static int abi_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)ctx, (void)why, (void)len;
    return 0;
}

#ifdef ABI_MAJOR
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = {
    ABI_MAJOR,         0,     (uint32_t)sizeof(phx_plugin_desc), PHX_PLUGIN_COMM,
    ABI_STR(ABI_NAME), "1.0", "a plugin of another major ABI",   abi_probe,
    &abi_vtable,
};
#else
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, ABI_STR(ABI_NAME), "1.0", "collectives through the store (t/plugin/abi)", abi_probe, &abi_vtable);
#endif
