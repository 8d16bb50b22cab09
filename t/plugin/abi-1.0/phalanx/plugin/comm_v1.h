/* Phalanx — frozen communicator plugin vtable, ABI 1.
 * A comm plugin's descriptor (kind PHX_PLUGIN_COMM) points to one of these.
 * Frozen: new slots are only ever appended, with a minor ABI bump. */
#ifndef PHALANX_PLUGIN_COMM_V1_H
#define PHALANX_PLUGIN_COMM_V1_H

#include <stdint.h>
#include "phalanx/plugin.h"
#include "phalanx/tensor.h"
#include "phalanx/store.h"
#include "phalanx/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_comm_init_args {
    int rank, size, local_rank, local_size;
    phx_store *store;    /* rendezvous store, shared by all ranks; the plugin
                            may use it during init (and keep it: it outlives
                            the communicator) */
    const char *prefix;  /* unique key prefix for this communicator ("c0/") */
    double timeout_s;    /* PHX_TIMEOUT: collectives and init give up after this */
    phx_device device;   /* where buffers live */
} phx_comm_init_args;

/* Every collective takes a work handle created by the core. The plugin
 * returns PHX_OK once the operation is queued (or done) and later - on any
 * thread - calls phx_work_complete exactly once. Returning an error means
 * the operation was not queued and the work is not completed by the plugin
 * (the core completes it with that error). Operations on one state must
 * complete in issue order. Buffers: count elements of dt on args.device;
 * allreduce/broadcast are in place; allgather: recv = size*count;
 * reduce_scatter: send = size*count, recv = count. */
typedef struct phx_comm_v1 {
    phx_status (*init)(const phx_comm_init_args *args, void **state);
    void (*finalize)(void *state);
    phx_status (*allreduce)(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op,
                            phx_work *work);
    phx_status (*broadcast)(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work);
    phx_status (*allgather)(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                            phx_work *work);
    phx_status (*reduce_scatter)(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                 phx_reduce_op op, phx_work *work);
    phx_status (*barrier)(void *state, phx_work *work);
} phx_comm_v1;

/* Completes a work handle: st PHX_OK or an error; msg (may be NULL) becomes
 * phx_last_error() of the thread that waits. Thread-safe. Exported by
 * libphalanx for plugins. */
void phx_work_complete(phx_work *work, phx_status st, const char *msg);

#ifdef __cplusplus
}
#endif
#endif
