/* A comm plugin for t/plugin_abi: collectives through the rendezvous
 * store (each rank publishes its buffer under <prefix>op/<seq>/<rank> and
 * reads the others'), slow but real, f32 only for the reductions. Built
 * several ways (tools/local.mk):
 *   against the frozen ABI 1.0 headers (-I t/abi-1.0 first): a 1.0 plugin
 *     as one built before 1.1 existed, every 1.0 slot filled;
 *   ABI_NO_BARRIER   barrier left NULL (optional since 1.1)
 *   ABI_NO_BROADCAST broadcast left NULL (required): rejected
 *   ABI_MAJOR=N      the descriptor says major N: rejected
 * ABI_NAME is the plugin's name (a bare word). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/plugin.h"
#include "phalanx/plugin/comm_v1.h"

#define ABI_STR_(x) #x
#define ABI_STR(x) ABI_STR_(x)

typedef struct abi_state {
    int rank, size;
    phx_store *store;
    char prefix[64];
    double timeout_s;
    uint64_t seq;
} abi_state;

static phx_status abi_init(const phx_comm_init_args *a, void **state)
{
    abi_state *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "abi: out of memory");
    s->rank = a->rank;
    s->size = a->size;
    s->store = a->store;
    snprintf(s->prefix, sizeof s->prefix, "%s", a->prefix);
    s->timeout_s = a->timeout_s;
    *state = s;
    return PHX_OK;
}

static void abi_finalize(void *state) { free(state); }

static size_t abi_size(phx_dtype dt) { return phx_dtype_size(dt); }

/* Publishes bytes as this rank's part of the next op. */
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

static phx_status abi_done(abi_state *s, phx_status st, phx_work *w)
{
    s->seq++;
    phx_work_complete(w, st, st ? phx_last_error() : NULL);
    return PHX_OK;
}

static phx_status abi_allreduce(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *w)
{
    abi_state *s = state;
    if (dt != PHX_F32 || op != PHX_SUM)
        return phx_error(PHX_EUNSUPPORTED, "abi: allreduce of f32 sums only");
    size_t bytes = (size_t)count * 4;
    phx_status st = abi_put(s, buf, bytes);
    float *sum = calloc((size_t)count + 1, sizeof *sum);
    if (!sum) return phx_error(PHX_ENOMEM, "abi: out of memory");
    for (int r = 0; r < s->size && !st; r++) {
        void *v;
        size_t len;
        if ((st = abi_get(s, r, &v, &len))) break;
        for (int64_t i = 0; i < count && len == bytes; i++) sum[i] += ((float *)v)[i];
        free(v);
    }
    if (!st) memcpy(buf, sum, bytes);
    free(sum);
    return abi_done(s, st, w);
}

#ifndef ABI_NO_BROADCAST
static phx_status abi_broadcast(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *w)
{
    abi_state *s = state;
    size_t bytes = (size_t)count * abi_size(dt), len;
    phx_status st = s->rank == root ? abi_put(s, buf, bytes) : PHX_OK;
    void *v = NULL;
    if (!st && s->rank != root && !(st = abi_get(s, root, &v, &len)) && len == bytes) memcpy(buf, v, bytes);
    free(v);
    return abi_done(s, st, w);
}
#endif

static phx_status abi_allgather(void *state, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *w)
{
    abi_state *s = state;
    size_t bytes = (size_t)count * abi_size(dt);
    phx_status st = abi_put(s, send, bytes);
    for (int r = 0; r < s->size && !st; r++) {
        void *v;
        size_t len;
        if ((st = abi_get(s, r, &v, &len))) break;
        if (len == bytes) memcpy((char *)recv + (size_t)r * bytes, v, bytes);
        free(v);
    }
    return abi_done(s, st, w);
}

static phx_status abi_reduce_scatter(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                     phx_reduce_op op, phx_work *w)
{
    abi_state *s = state;
    if (dt != PHX_F32 || op != PHX_SUM)
        return phx_error(PHX_EUNSUPPORTED, "abi: reduce_scatter of f32 sums only");
    size_t bytes = (size_t)count * 4 * (size_t)s->size;
    phx_status st = abi_put(s, send, bytes);
    float *out = recv;
    for (int64_t i = 0; i < count; i++) out[i] = 0;
    for (int r = 0; r < s->size && !st; r++) {
        void *v;
        size_t len;
        if ((st = abi_get(s, r, &v, &len))) break;
        for (int64_t i = 0; i < count && len == bytes; i++) out[i] += ((float *)v)[(int64_t)s->rank * count + i];
        free(v);
    }
    return abi_done(s, st, w);
}

#ifndef ABI_NO_BARRIER
static phx_status abi_barrier(void *state, phx_work *w)
{
    abi_state *s = state;
    char one = 1;
    phx_status st = abi_put(s, &one, 1);
    for (int r = 0; r < s->size && !st; r++) {
        void *v;
        size_t len;
        if (!(st = abi_get(s, r, &v, &len))) free(v);
    }
    return abi_done(s, st, w);
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
    ABI_MAJOR, 0, (uint32_t)sizeof(phx_plugin_desc), PHX_PLUGIN_COMM, ABI_STR(ABI_NAME), "1.0",
    "a plugin of another major ABI", abi_probe, &abi_vtable,
};
#else
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, ABI_STR(ABI_NAME), "1.0", "collectives through the store (t/plugin_abi)", abi_probe,
    &abi_vtable);
#endif
