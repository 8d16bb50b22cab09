/* A comm plugin for t/comm/split_plugins: it makes its own world (a world
 * of one, through comm_v1.world, as mpi does) and has no split slot (an
 * ABI 1.1 plugin), so phx_comm_split must refuse it by name. Collectives
 * of a world of one: copies, completed at once. */
#include <string.h>
#include "phalanx/plugin.h"
#include "phalanx/plugin/comm_v1.h"

static int token;

static phx_status ow_init(const phx_comm_init_args *a, void **state)
{
    if (a->size != 1) return phx_error(PHX_EUNSUPPORTED, "ownworld: worlds of one only");
    *state = &token;
    return PHX_OK;
}

static void ow_finalize(void *state)
{
    (void)state;
}

static phx_status ow_allreduce(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *work)
{
    (void)state, (void)buf, (void)count, (void)dt, (void)op;
    phx_work_complete(work, PHX_OK, NULL);
    return PHX_OK;
}

static phx_status ow_broadcast(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work)
{
    (void)state, (void)buf, (void)count, (void)dt, (void)root;
    phx_work_complete(work, PHX_OK, NULL);
    return PHX_OK;
}

static phx_status ow_allgather(void *state, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *work)
{
    (void)state;
    if (send != recv) memmove(recv, send, (size_t)count * phx_dtype_size(dt));
    phx_work_complete(work, PHX_OK, NULL);
    return PHX_OK;
}

static phx_status ow_reduce_scatter(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                    phx_reduce_op op, phx_work *work)
{
    (void)state, (void)op;
    memmove(recv, send, (size_t)count * phx_dtype_size(dt));
    phx_work_complete(work, PHX_OK, NULL);
    return PHX_OK;
}

static phx_status ow_world(phx_comm_world_v1 *w)
{
    w->rank = 0;
    w->size = 1;
    w->local_rank = 0;
    w->local_size = 1;
    return PHX_OK;
}

static int ow_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)ctx, (void)why, (void)len;
    return 1;
}

static const phx_comm_v1 vtable = {
    .init = ow_init,
    .finalize = ow_finalize,
    .allreduce = ow_allreduce,
    .broadcast = ow_broadcast,
    .allgather = ow_allgather,
    .reduce_scatter = ow_reduce_scatter,
    .world = ow_world,
};

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = {
    .abi_major = PHX_PLUGIN_ABI_MAJOR,
    .abi_minor = PHX_COMM_V1_WORLD_MINOR,
    .struct_size = (uint32_t)sizeof(phx_plugin_desc),
    .kind = PHX_PLUGIN_COMM,
    .name = "ownworld",
    .version = "1.0",
    .description = "test: its own world of one, no split slot",
    .probe = ow_probe,
    .vtable = &vtable,
};
