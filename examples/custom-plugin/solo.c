/* phx-comm-solo.so: a communicator plugin built out of tree, against the
 * installed Phalanx headers (see Makefile, doc/plugins.md).
 *
 * The world is one rank, so every collective is the identity: all-reduce
 * and broadcast leave the buffer as it is, all-gather and reduce-scatter
 * copy their one block. It is still a real plugin: it checks its
 * arguments, refuses worlds of more than one rank and device buffers, and
 * completes every work handle, in issue order, with phx_work_complete.
 *
 * Select it with PHX_PLUGIN_PATH=<this folder> PHX_COMM=solo. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <phalanx/phalanx.h>
#include <phalanx/plugin/comm_v1.h>

typedef struct solo {
    int rank;              /* always 0 */
    unsigned long issued;  /* collectives completed, for the curious */
} solo;

/* Usable anywhere a world of one runs; priority 0 so it is never picked
 * when PHX_COMM names no backend and a real one is installed. */
static int solo_probe(const phx_probe_ctx *ctx, char *why, size_t why_len)
{
    if (ctx->local_size > 1) {
        snprintf(why, why_len, "solo is a world of one rank, this node runs %d", ctx->local_size);
        return -1;
    }
    return 0;
}

static phx_status solo_init(const phx_comm_init_args *a, void **state)
{
    if (a->size != 1 || a->rank != 0)
        return phx_error(PHX_EINVAL, "solo: rank %d of a world of %d; solo is a world of one rank (rank 0 of 1)",
                         a->rank, a->size);
    if (a->device.kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED, "solo: buffers on device kind %d; solo handles CPU buffers only",
                         a->device.kind);
    solo *s = calloc(1, sizeof *s);
    if (!s) return phx_error(PHX_ENOMEM, "solo: out of memory");
    *state = s;
    return PHX_OK;
}

static void solo_finalize(void *state) { free(state); }

/* Checks shared by every collective; completes the work on success. */
static phx_status solo_done(solo *s, int64_t count, phx_dtype dt, phx_work *work, const char *what)
{
    if (count < 0) return phx_error(PHX_EINVAL, "solo %s: count %lld, expected >= 0", what, (long long)count);
    if (phx_dtype_size(dt) == 0) return phx_error(PHX_EINVAL, "solo %s: dtype %d is not a dtype", what, (int)dt);
    s->issued++;
    phx_work_complete(work, PHX_OK, NULL);
    return PHX_OK;
}

static phx_status solo_allreduce(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op,
                                 phx_work *work)
{
    (void)buf; /* sum, avg, max or min over one rank: the buffer itself */
    if (op != PHX_SUM && op != PHX_AVG && op != PHX_MAX && op != PHX_MIN)
        return phx_error(PHX_EINVAL, "solo allreduce: reduce op %d, expected sum, avg, max or min", (int)op);
    return solo_done(state, count, dt, work, "allreduce");
}

static phx_status solo_broadcast(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work)
{
    (void)buf;
    if (root != 0) return phx_error(PHX_EINVAL, "solo broadcast: root %d, the only rank is 0", root);
    return solo_done(state, count, dt, work, "broadcast");
}

/* recv = size * count = count elements: rank 0's block is send. */
static phx_status solo_allgather(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                 phx_work *work)
{
    if (count > 0 && send != recv) memmove(recv, send, (size_t)count * phx_dtype_size(dt));
    return solo_done(state, count, dt, work, "allgather");
}

static phx_status solo_reduce_scatter(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                      phx_reduce_op op, phx_work *work)
{
    if (op != PHX_SUM && op != PHX_AVG && op != PHX_MAX && op != PHX_MIN)
        return phx_error(PHX_EINVAL, "solo reduce_scatter: reduce op %d, expected sum, avg, max or min", (int)op);
    if (count > 0 && send != recv) memmove(recv, send, (size_t)count * phx_dtype_size(dt));
    return solo_done(state, count, dt, work, "reduce_scatter");
}

static phx_status solo_barrier(void *state, phx_work *work)
{
    return solo_done(state, 0, PHX_F32, work, "barrier");
}

static const phx_comm_v1 solo_vtable = {
    .init = solo_init,
    .finalize = solo_finalize,
    .allreduce = solo_allreduce,
    .broadcast = solo_broadcast,
    .allgather = solo_allgather,
    .reduce_scatter = solo_reduce_scatter,
    .barrier = solo_barrier,
};

/* The one exported symbol: data the loader checks before running any of
 * the code above. */
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 =
    PHX_PLUGIN_DESC_INIT(PHX_PLUGIN_COMM, "solo", "1.0", "a world of one rank; collectives are identities",
                         solo_probe, &solo_vtable);
