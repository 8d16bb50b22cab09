/* Process groups: phx_comm_split (MPI_Comm_split's semantics).
 *
 * Every rank of the parent all-gathers its (color, key) over the parent,
 * so each knows every group: members of a color ranked by key, then by
 * parent rank. The group's communicator is the parent's backend again:
 * the plugin's split slot when it has one (mpi, nccl), else a new
 * instance (init) over the group's ranks that meets its peers in the
 * parent's store under a prefix no other communicator uses:
 * "<parent prefix>s<k>.<color>/", k counting the parent's splits (the
 * same on every rank, as splits are collective). A group holds a
 * reference on its parent, whose struct and store (not its plugin state)
 * outlive phx_comm_free until the last group is freed. */
#include "config.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/log.h"
#include "src/base/util.h"
#include "src/comm/comm-impl.h"
#include "src/tensor/tensor-impl.h"

void px_comm_unref(phx_comm *c)
{
    while (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        phx_comm *parent = c->parent;
        px_work_destroy_all(c);
        phx_tensor_free(c->barrier_buf);
        if (c->owns_store) phx_store_free(c->store);
        pthread_mutex_destroy(&c->pool_mu);
        px_free(c->world_ranks);
        px_free(c);
        c = parent;
    }
}

const char *px_comm_group_text(const phx_comm *c, char *buf, size_t len)
{
    buf[0] = 0;
    if (!c->world_ranks || len < 64) return buf;
    size_t off = (size_t)snprintf(buf, len, " [group %s, %d ranks:", c->prefix, c->size);
    int g = 0;
    for (; g < c->size && off + 48 < len; g++)
        off += (size_t)snprintf(buf + off, len - off, "%s group rank %d is world rank %d", g ? "," : "", g,
                                c->world_ranks[g]);
    snprintf(buf + off, len - off, "%s]", g < c->size ? ", ..." : "");
    return buf;
}

/* Every rank's (color, key) as pairs[2 r], pairs[2 r + 1], gathered over
 * c (a blocking allgather on c's device: it also waits for what was
 * issued on c before). */
static phx_status exchange(phx_comm *c, int color, int key, int64_t *pairs)
{
    static const char who[] = "phx_comm_split";
    const int64_t two = 2, all = 2 * (int64_t)c->size;
    phx_device cpu = phx_cpu();
    int on_cpu = phx_device_equal(c->device, cpu);
    phx_tensor *in = phx_tensor_new(PHX_I64, 1, &two, cpu), *out = phx_tensor_new(PHX_I64, 1, &all, cpu);
    phx_tensor *din = NULL, *dout = NULL;
    phx_status st = PHX_OK;
    if (!in || !out) {
        st = phx_error(PHX_ENOMEM, "%s: out of memory for the exchange of colors", who);
        goto out;
    }
    ((int64_t *)px_tensor_ptr(in))[0] = color;
    ((int64_t *)px_tensor_ptr(in))[1] = key;
    if (!on_cpu) {
        din = phx_tensor_new(PHX_I64, 1, &two, c->device);
        dout = phx_tensor_new(PHX_I64, 1, &all, c->device);
        if (!din || !dout) {
            st = phx_error(PHX_ENOMEM, "%s: no device memory for the exchange of colors: %s", who, phx_last_error());
            goto out;
        }
        if ((st = phx_tensor_copy(din, in))) goto out;
    }
    if ((st = phx_comm_allgather(c, on_cpu ? in : din, on_cpu ? out : dout, NULL))) {
        char why[1024];
        snprintf(why, sizeof why, "%s", phx_last_error());
        st = phx_error(st, "%s: rank %d of %d: exchanging colors and keys over %s: %s", who, c->rank, c->size,
                       c->prefix, why);
        goto out;
    }
    if (!on_cpu && (st = phx_tensor_copy(out, dout))) goto out;
    memcpy(pairs, px_tensor_ptr(out), (size_t)all * sizeof *pairs);
out:
    phx_tensor_free(in);
    phx_tensor_free(out);
    phx_tensor_free(din);
    phx_tensor_free(dout);
    return st;
}

/* The group of color: its parent ranks in group order (key, then parent
 * rank) into members; returns how many. */
static int group_of(const int64_t *pairs, int n, int64_t color, int *members)
{
    int m = 0;
    for (int r = 0; r < n; r++) {
        if (pairs[2 * r] != color) continue;
        int i = m++;
        /* insertion by key; equal keys keep parent-rank order */
        while (i > 0 && pairs[2 * members[i - 1] + 1] > pairs[2 * r + 1]) {
            members[i] = members[i - 1];
            i--;
        }
        members[i] = r;
    }
    return m;
}

/* A communicator struct for the group, sharing c's plugin, store and
 * settings; rank g of the members. */
static phx_comm *group_new(phx_comm *c, const int *members, int m, int g, const char *prefix)
{
    phx_comm *s = px_calloc(1, sizeof *s);
    int *wr = px_malloc((size_t)m * sizeof *wr);
    if (!s || !wr) {
        px_free(s);
        px_free(wr);
        return NULL;
    }
    pthread_mutex_init(&s->pool_mu, NULL);
    s->desc = c->desc;
    s->v = c->v;
    s->rank = g;
    s->size = m;
    s->local_rank = c->local_rank;
    s->local_size = c->local_size;
    s->store = c->store; /* c's: kept alive by the reference below */
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    s->timeout_s = c->timeout_s;
    s->device = c->device;
    s->debug_detail = c->debug_detail;
    s->own_world = c->own_world;
    s->refs = 1;
    for (int i = 0; i < m; i++) wr[i] = c->world_ranks ? c->world_ranks[members[i]] : members[i];
    s->world_ranks = wr;
    if (!s->v.barrier && !(s->barrier_buf = phx_tensor_zeros(PHX_F32, 1, (const int64_t[]){1}, s->device))) {
        pthread_mutex_destroy(&s->pool_mu);
        px_free(wr);
        px_free(s);
        return NULL;
    }
    return s;
}

phx_status phx_comm_split(phx_comm *c, int color, int key, phx_comm **sub)
{
    static const char who[] = "phx_comm_split";
    if (!sub) return phx_error(PHX_EINVAL, "%s: sub is NULL: expected where to put the group's communicator", who);
    *sub = NULL;
    if (!c) {
        if (color < PHX_COMM_SPLIT_UNDEFINED)
            return phx_error(PHX_EINVAL, "%s: color %d: expected >= 0 or PHX_COMM_SPLIT_UNDEFINED (-1)", who, color);
        return PHX_OK; /* a world of one splits into a world of one: NULL */
    }
    if (c->freed)
        return phx_error(PHX_EINVAL, "%s: communicator %s (rank %d of %d) was freed by phx_comm_free", who, c->prefix,
                         c->rank, c->size);
    uint64_t k = c->nsplit++;
    int n = c->size;
    int64_t *pairs = px_malloc((size_t)n * 2 * sizeof *pairs);
    int *members = px_malloc((size_t)n * sizeof *members);
    phx_comm *s = NULL;
    phx_status st;
    if (!pairs || !members) {
        st = phx_error(PHX_ENOMEM, "%s: out of memory for %d ranks", who, n);
        goto out;
    }
    /* A bad color is exchanged too, so that every rank fails with the
     * same message instead of its peers waiting for it. */
    if ((st = exchange(c, color, key, pairs))) goto out;
    int64_t maxc = -1;
    for (int r = 0; r < n; r++) {
        if (pairs[2 * r] < PHX_COMM_SPLIT_UNDEFINED || pairs[2 * r] > INT32_MAX) {
            st = phx_error(PHX_EINVAL,
                           "%s: rank %d of %s passed color %" PRId64
                           ": expected >= 0 or PHX_COMM_SPLIT_UNDEFINED (-1) (this is rank %d)",
                           who, r, c->prefix, pairs[2 * r], c->rank);
            goto out;
        }
        if (pairs[2 * r] > maxc) maxc = pairs[2 * r];
    }
    /* The longest prefix any group gets, so every rank decides alike. */
    char prefix[sizeof c->prefix + 32];
    snprintf(prefix, sizeof prefix, "%ss%" PRIu64 ".%" PRId64 "/", c->prefix, k, maxc);
    if (strlen(prefix) >= sizeof c->prefix) {
        st = phx_error(PHX_EINVAL,
                       "%s: the groups of %s would need store prefixes of %zu bytes (at most %zu): splits "
                       "nested too deeply or colors too large",
                       who, c->prefix, strlen(prefix), sizeof c->prefix - 1);
        goto out;
    }
    int m = 0, g = -1;
    if (color >= 0) {
        m = group_of(pairs, n, color, members);
        for (int i = 0; i < m; i++)
            if (members[i] == c->rank) g = i;
        snprintf(prefix, sizeof prefix, "%ss%" PRIu64 ".%d/", c->prefix, k, color);
    }
    int has_split = c->desc->abi_minor >= PHX_COMM_V1_SPLIT_MINOR && c->v.split;
    if (!has_split && c->own_world) {
        st = phx_error(PHX_EUNSUPPORTED,
                       "%s: comm plugin '%s' (ABI %u.%u) makes its own world and has no split slot (since ABI 1.%d): "
                       "it cannot make process groups",
                       who, c->desc->name, c->desc->abi_major, c->desc->abi_minor, PHX_COMM_V1_SPLIT_MINOR);
        goto out;
    }
    if (color >= 0 && !(s = group_new(c, members, m, g, prefix))) {
        st = phx_error(PHX_ENOMEM, "%s: out of memory for the group's communicator", who);
        goto out;
    }
    phx_comm_init_args a = {0};
    if (s) {
        phx_comm_init_args ga = {s->rank,  s->size,   s->local_rank, s->local_size,
                                 s->store, s->prefix, s->timeout_s,  s->device};
        a = ga;
    }
    void *none = NULL;
    if (has_split)
        st = c->v.split(c->state, color, key, s ? &a : NULL, s ? members : NULL, s ? &s->state : &none);
    else
        st = s ? c->v.init(&a, &s->state) : PHX_OK;
    if (!st && none) {
        c->v.finalize(none);
        st = phx_error(PHX_EABI, "comm plugin '%s': split gave a communicator to a rank of no group (color %d)",
                       c->desc->name, color);
    }
    if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", phx_last_error());
        st = phx_error(st, "%s: rank %d of %s (world rank %d): backend '%s' could not make the group of color %d: %s",
                       who, c->rank, c->prefix, c->world_ranks ? c->world_ranks[c->rank] : c->rank, c->desc->name,
                       color, why);
        if (s) {
            s->state = NULL;
            px_comm_unref(s);
            s = NULL;
        }
        goto out;
    }
    if (s) {
        s->parent = c;
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
        phx_log(PHX_LOG_INFO, "communicator %s: group rank %d of %d (rank %d of %s, color %d, key %d), backend %s",
                s->prefix, s->rank, s->size, c->rank, c->prefix, color, key, c->desc->name);
    }
    *sub = s;
out:
    px_free(pairs);
    px_free(members);
    return st;
}
