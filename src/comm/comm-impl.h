/* Communicator and work handle internals (px_ prefix, not exported). */
#ifndef PHX_CORE_COMM_IMPL_H
#define PHX_CORE_COMM_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include "phalanx/comm.h"
#include "phalanx/plugin.h"
#include "phalanx/plugin/comm_v1.h"
#include "phalanx/plugin/kit.h"

#define PX_WORK_MSG_MAX 512

/* A collective's completion. Works live in their comm's pool and are
 * recycled by phx_work_free, so a steady training step allocates none. */
struct phx_work {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done; /* set once by phx_work_complete */
    int orphan; /* abandoned by a timed-out blocking call:
                                    phx_work_complete recycles it */
    phx_status status;
    uint64_t seq; /* issue number on its comm */
    const char *what; /* "allreduce", ... (static string) */
    phx_comm *comm; /* the pool it returns to */
    struct phx_work *next_free;
    struct phx_work *next_all; /* every handle of the comm, for phx_comm_free */
    char msg[PX_WORK_MSG_MAX]; /* error message, "" on success */
};

struct phx_comm {
    const phx_plugin_desc *desc;
    phx_comm_v1 v; /* the plugin's table as of its minor
                                    (px_abi_adapt): a slot it lacks is NULL */
    phx_tensor *barrier_buf; /* one element on device: the default barrier */
    void *state; /* the plugin's */
    int rank, size, local_rank, local_size;
    phx_store *store;
    int owns_store; /* created by phx_comm_init: freed with the comm */
    char prefix[48]; /* "c<k>/": this comm's keys in the store */
    double timeout_s;
    phx_device device;
    uint64_t seq; /* collectives issued */
    int debug_detail; /* PHX_DEBUG=detail */
    pthread_mutex_t pool_mu;
    phx_work *free_works; /* recycled handles */
    phx_work *all_works; /* every handle made, for phx_comm_free */
    /* process groups (comm-split.c) */
    int own_world; /* the plugin made the world (comm_v1.world) */
    int freed; /* phx_comm_free ran: the plugin state is gone, the struct
                                    lives on while groups split from it do */
    int refs; /* 1 for the caller's handle + 1 per live group split from
                                    it (atomic: a group may be freed on another
                                    thread than its parent) */
    phx_comm *parent; /* the communicator this group was split from */
    int *world_ranks; /* group rank -> rank of the world it came from
                                    (NULL: this is a world) */
    uint64_t nsplit; /* phx_comm_split calls on this communicator */
};

/* Seconds a wait on a work adds to the comm's timeout: the backend
 * enforces the timeout itself and names the peer; its error should win. */
#define PX_WORK_GRACE 2.0

/* A fresh handle from c's pool (NULL and PHX_ENOMEM when none can be made). */
phx_work *px_work_get(phx_comm *c, const char *what);
/* Back to the pool (the work is complete and no one holds it). */
void px_work_put(phx_work *w);
/* Frees every handle of c (at phx_comm_free). */
void px_work_destroy_all(phx_comm *c);
/* For blocking calls: waits (comm timeout + grace), recycles the handle
 * (or leaves it to phx_work_complete when the backend still holds it)
 * and returns its status. */
phx_status px_work_finish(phx_work *w);

/* Drops one reference: the last frees the struct (and the store it
 * owns) and drops the reference it held on its parent. */
void px_comm_unref(phx_comm *c);
/* "" for a world; for a group " [group <prefix> of <n>: group rank g is
 * world rank w, ...]" (messages name group ranks; this says which
 * processes they are). */
const char *px_comm_group_text(const phx_comm *c, char *buf, size_t len);

#endif
