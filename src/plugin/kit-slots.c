/* The kit's five collective slots (phalanx/plugin/kit.h): each wraps its
 * arguments into a phx_kit_op and queues it on the plugin's
 * phx_kit_comm (the plugin's state). The core has checked the arguments. */
#include "config.h"
#include "src/plugin/kit-impl.h"

phx_status phx_kit_allreduce(void *kc, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *work)
{
    phx_kit_op o = {PHX_KIT_ALLREDUCE, buf, buf, count, dt, op, 0};
    return px_kit_comm_push(kc, &o, work);
}

phx_status phx_kit_broadcast(void *kc, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work)
{
    phx_kit_op o = {PHX_KIT_BROADCAST, buf, buf, count, dt, PHX_SUM, root};
    return px_kit_comm_push(kc, &o, work);
}

phx_status phx_kit_allgather(void *kc, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *work)
{
    phx_kit_op o = {PHX_KIT_ALLGATHER, send, recv, count, dt, PHX_SUM, 0};
    return px_kit_comm_push(kc, &o, work);
}

phx_status phx_kit_reduce_scatter(void *kc, const void *send, void *recv, int64_t count, phx_dtype dt, phx_reduce_op op,
                                  phx_work *work)
{
    phx_kit_op o = {PHX_KIT_REDUCE_SCATTER, send, recv, count, dt, op, 0};
    return px_kit_comm_push(kc, &o, work);
}

phx_status phx_kit_barrier(void *kc, phx_work *work)
{
    phx_kit_op o = {PHX_KIT_BARRIER, NULL, NULL, 0, PHX_F32, PHX_SUM, 0};
    return px_kit_comm_push(kc, &o, work);
}

void phx_kit_comm_slots(phx_comm_v1 *v)
{
    if (!v) return;
    v->allreduce = phx_kit_allreduce;
    v->broadcast = phx_kit_broadcast;
    v->allgather = phx_kit_allgather;
    v->reduce_scatter = phx_kit_reduce_scatter;
    v->barrier = phx_kit_barrier;
}
