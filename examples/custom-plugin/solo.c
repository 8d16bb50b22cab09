/* phx-comm-solo.so: a communicator plugin built out of tree, against the
 * installed Phalanx headers (see Makefile, doc/plugins.md).
 *
 * The world is one rank, so every collective is the identity: all-reduce
 * and broadcast leave the buffer as it is, all-gather and reduce-scatter
 * copy their one block. It is still a real plugin, built the way a
 * backend for many ranks is, with the plugin author's kit
 * (phalanx/plugin/kit.h):
 *   - its collectives run asynchronously, in issue order, on the kit's
 *     worker queue, which completes each work handle;
 *   - the copies are the kit's reductions over the one rank's input
 *     (phx_kit_reduce), so every dtype and op is handled as the built-in
 *     backends handle it, and an average divides by the world size;
 *   - barrier is left NULL: an optional slot (plugin ABI 1.1), for which
 *     the core runs a one-element all-reduce.
 * It checks its arguments and refuses worlds of more than one rank and
 * device buffers.
 *
 * Select it with PHX_PLUGIN_PATH=<this folder> PHX_COMM=solo. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <phalanx/phalanx.h>
#include <phalanx/plugin/comm_v1.h>
#include <phalanx/plugin/kit.h>

typedef struct solo {
    int size; /* always 1 */
    phx_kit_queue *queue; /* runs the collectives in issue order */
} solo;

/* One collective, as queued. */
typedef struct solo_op {
    const char *what;
    const void *send;
    void *recv;
    int64_t count;
    phx_dtype dt;
    phx_reduce_op op;
} solo_op;

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

/* On the queue's thread: out <- op over the world's one input. */
static phx_status solo_run(void *ctx, const void *job, char *msg, size_t msg_len)
{
    const solo *s = ctx;
    const solo_op *o = job;
    const void *in[1] = {o->send};
    void *out[1] = {o->recv};
    phx_status st = phx_kit_reduce(out, 1, in, s->size, 0, (size_t)o->count, o->dt, o->op, s->size);
    if (st) snprintf(msg, msg_len, "solo %s: %s", o->what, phx_last_error());
    return st;
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
    s->size = 1;
    phx_status st = phx_kit_queue_new(sizeof(solo_op), solo_run, s, "solo", &s->queue);
    if (st) {
        free(s);
        return st;
    }
    *state = s;
    return PHX_OK;
}

static void solo_finalize(void *state)
{
    solo *s = state;
    phx_kit_queue_free(s->queue); /* runs what is still queued */
    free(s);
}

/* Checks shared by every collective, then queues it. */
static phx_status solo_issue(solo *s, const solo_op *o, phx_work *work)
{
    if (o->count < 0) return phx_error(PHX_EINVAL, "solo %s: count %lld, expected >= 0", o->what, (long long)o->count);
    if (phx_dtype_size(o->dt) == 0)
        return phx_error(PHX_EINVAL, "solo %s: dtype %d is not a dtype", o->what, (int)o->dt);
    if (o->op != PHX_SUM && o->op != PHX_AVG && o->op != PHX_MAX && o->op != PHX_MIN)
        return phx_error(PHX_EINVAL, "solo %s: reduce op %d, expected sum, avg, max or min", o->what, (int)o->op);
    return phx_kit_queue_push(s->queue, o, work);
}

static phx_status solo_allreduce(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *work)
{
    solo_op o = {.what = "allreduce", .send = buf, .recv = buf, .count = count, .dt = dt, .op = op};
    return solo_issue(state, &o, work);
}

static phx_status solo_broadcast(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work)
{
    if (root != 0) return phx_error(PHX_EINVAL, "solo broadcast: root %d, the only rank is 0", root);
    solo_op o = {.what = "broadcast", .send = buf, .recv = buf, .count = count, .dt = dt, .op = PHX_SUM};
    return solo_issue(state, &o, work);
}

/* recv = size * count = count elements: rank 0's block is send. */
static phx_status solo_allgather(void *state, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *work)
{
    solo_op o = {.what = "allgather", .send = send, .recv = recv, .count = count, .dt = dt, .op = PHX_SUM};
    return solo_issue(state, &o, work);
}

static phx_status solo_reduce_scatter(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                      phx_reduce_op op, phx_work *work)
{
    solo_op o = {.what = "reduce_scatter", .send = send, .recv = recv, .count = count, .dt = dt, .op = op};
    return solo_issue(state, &o, work);
}

static const phx_comm_v1 solo_vtable = {
    .init = solo_init,
    .finalize = solo_finalize,
    .allreduce = solo_allreduce,
    .broadcast = solo_broadcast,
    .allgather = solo_allgather,
    .reduce_scatter = solo_reduce_scatter,
    .barrier = NULL, /* optional: the core's one-element all-reduce */
};

/* The one exported symbol: data the loader checks before running any of
 * the code above. */
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "solo", "1.0", "a world of one rank; collectives are identities", solo_probe, &solo_vtable);
