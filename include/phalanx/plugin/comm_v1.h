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

/* The world a plugin that makes its own reports (phx_comm_v1.world):
 * frozen, the layout phx_world had before public structs carried their
 * size, so plugins built for any 1.x minor write the same bytes. */
typedef struct phx_comm_world_v1 {
    int rank, size, local_rank, local_size;
    char master_addr[256]; /* left alone by the plugin */
    int master_port; /* left alone by the plugin */
} phx_comm_world_v1;

typedef struct phx_comm_init_args {
    int rank, size, local_rank, local_size;
    phx_store *store; /* rendezvous store, shared by all ranks; the plugin
                            may use it during init (and keep it: it outlives
                            the communicator) */
    const char *prefix; /* unique key prefix for this communicator ("c0/") */
    double timeout_s; /* PHX_TIMEOUT: collectives and init give up after this */
    phx_device device; /* where buffers live */
} phx_comm_init_args;

/* Every collective takes a work handle created by the core. The plugin
 * returns PHX_OK once the operation is queued (or done) and later - on any
 * thread - calls phx_work_complete exactly once. Returning an error means
 * the operation was not queued and the work is not completed by the plugin
 * (the core completes it with that error). Operations on one state must
 * complete in issue order. Buffers: count elements of dt on args.device;
 * allreduce/broadcast are in place; allgather: recv = size*count;
 * reduce_scatter: send = size*count, recv = count.
 * The core validates arguments before calling a slot: state is the one
 * init returned, count >= 0, dt is a valid dtype, op is sum, avg, max or
 * min, 0 <= root < size, buffers are on args.device and hold the counts
 * above (send and recv overlap only as allgather's in-place block), and
 * work is a fresh handle. A slot does not check them again; it returns an
 * error only for what the core cannot know (a dtype or size its library
 * cannot move, no memory, a broken connection). */
typedef struct phx_comm_v1 {
    phx_status (*init)(const phx_comm_init_args *args, void **state);
    void (*finalize)(void *state);
    phx_status (*allreduce)(void *state, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *work);
    phx_status (*broadcast)(void *state, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work);
    phx_status (*allgather)(void *state, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *work);
    phx_status (*reduce_scatter)(void *state, const void *send, void *recv, int64_t count, phx_dtype dt,
                                 phx_reduce_op op, phx_work *work);
    phx_status (*barrier)(void *state, phx_work *work);
    /* (optional; read only from a plugin whose descriptor says abi_minor
     * >= PHX_COMM_V1_WORLD_MINOR) A plugin that makes its own world (MPI)
     * fills rank, size, local_rank and local_size of *out from its own
     * launcher, starting its library if needed (master_addr/master_port are
     * left alone), or returns an error through phx_error. The core calls it
     * when phx_comm_init takes the world from the environment (no rank,
     * size or store in the options, not inside phx_spawn's threads); it
     * then builds no TCP store, and init gets this world and an in-process
     * store. NULL (the default): the world comes from the environment and
     * the ranks meet through the TCP store at MASTER_ADDR:MASTER_PORT. */
    phx_status (*world)(phx_comm_world_v1 *out);
    /* (optional; read only from a plugin whose descriptor says abi_minor
     * >= PHX_COMM_V1_SPLIT_MINOR) phx_comm_split: makes the group this
     * rank joins out of the communicator state. Collective over every
     * rank of state, each calling it once, in the same order relative to
     * the collectives on state (none of which is in flight: the core has
     * just waited for its own exchange). The core has already gathered
     * every rank's color and key and worked out the groups:
     *   color >= 0: group describes this rank's group: its rank and size
     *     in the group (ordered by key, then rank in state), local_rank
     *     and local_size as state's (the processes of this node), the
     *     store, a prefix no other communicator uses, the timeout and
     *     device; parent_ranks[g] is the rank in state of group rank g
     *     (group->size entries). *sub gets the new state, which the core
     *     uses with the other slots and frees with finalize.
     *   color == PHX_COMM_SPLIT_UNDEFINED: this rank joins no group; group
     *     and parent_ranks are NULL; the slot takes part in whatever its
     *     library's split needs (MPI_Comm_split with MPI_UNDEFINED) and
     *     leaves *sub NULL.
     * An error leaves *sub NULL and state usable. NULL (the default): the
     * core calls init with group on the members only, which suits a
     * plugin that meets its peers through the store under the prefix
     * (threads, gloo, nccl); a plugin that makes its own world (world
     * above) and has no split gets PHX_EUNSUPPORTED. */
    phx_status (*split)(void *state, int color, int key, const phx_comm_init_args *group, const int *parent_ranks,
                        void **sub);
} phx_comm_v1;

/* The descriptor minor from which phx_comm_v1.world is read. */
#define PHX_COMM_V1_WORLD_MINOR 1
/* The descriptor minor from which phx_comm_v1.split is read. */
#define PHX_COMM_V1_SPLIT_MINOR 5

/* Completes a work handle: st PHX_OK or an error; msg (may be NULL) becomes
 * phx_last_error() of the thread that waits. Thread-safe. Exported by
 * libphalanx for plugins. */
void phx_work_complete(phx_work *work, phx_status st, const char *msg);

#ifdef __cplusplus
}
#endif
#endif
