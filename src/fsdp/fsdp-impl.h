/* FSDP internals (px_ prefix, not exported): the units, their shards and
 * full buffers, shared by src/fsdp/fsdp.c (the wrapper, gather and
 * reduce-scatter), src/fsdp/fsdp-units.c (the wrap policy and the layout
 * check) and src/zero (the stage-3 optimizer over the shards). */
#ifndef PHX_FSDP_IMPL_H
#define PHX_FSDP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/fsdp.h"
#include "phalanx/comm.h"

#define PX_FSDP_MAGIC 0x46534450u /* "FSDP" */
#define PX_FSDP_MIN_UNIT_NUMEL ((int64_t)1000000)
#define PX_FSDP_ERR_MAX 512

/* One wrapping unit: a module subtree's parameters not in a nested unit,
 * as one flat f32 space of numel elements padded to world * block; rank
 * r keeps elements [r * block, (r + 1) * block). */
typedef struct px_funit {
    phx_module *inner; /* the subtree's root (the model for the root unit) */
    phx_module *wrap; /* the unit's wrapper module; NULL for the root */
    char *path; /* dotted path, "" for the root */
    size_t *params; /* indices into the model's parameters, in its order */
    int64_t *offs; /* where each starts in the flat space */
    size_t n_params;
    int64_t numel, block;
    phx_tensor *shard_v, *shard_g; /* (block): persistent */
    phx_tensor *rs_out; /* (block): the reduce-scatter's output */
    /* (world * block): the parameters' value and gradient tensors are
     * views of these storages; their memory is allocated at gather and
     * freed at reshard (data NULL in between). */
    phx_tensor *full_v, *full_g;
    /* Mixed precision (NULL without): the shard in param_dtype, the
     * gathered param_dtype values (memory only between gather and
     * widening), the full gradients and the reduce-scatter's output in
     * reduce_dtype (memory only while reducing). */
    phx_tensor *shard_lp, *full_lp, *full_g_lp, *rs_lp;
    bool exact; /* this gather moves f32 (phx_fsdp_gather_full) */
    phx_work *gwork; /* an all-gather in flight into full_v */
    phx_work *rwork; /* a reduce-scatter in flight out of full_g */
    bool rs_pending; /* rs_out not yet added into shard_g */
    bool gathered; /* full_v holds (or is receiving) the parameters */
    bool keep; /* gathered by phx_fsdp_gather_full */
    bool forwarded; /* ran forward since the last backward */
    bool backwarded; /* its backward ran in this backward pass */
} px_funit;

typedef struct px_fsdp {
    unsigned magic;
    phx_module *self, *model;
    /* The sharding group (the whole world unless hybrid): gathers and
     * reduce-scatters, blocks of world elements, this rank's block rank. */
    phx_comm *comm;
    int rank, world;
    /* The whole world (layout check, broadcasts, the non-finite flag, the
     * gradients' average) and, when hybrid, the replicas of this shard. */
    phx_comm *wcomm, *rcomm;
    int wrank, wworld;
    phx_fsdp_opts opts;
    size_t n_params;
    phx_param **params;
    size_t *unit_of; /* unit of each parameter */
    px_funit *units; /* nested units first, the root last */
    size_t n_units;
    /* Units in the order of the first forward (prefetch) */
    size_t *order;
    size_t n_order;
    bool order_done;
    size_t fwd_pos, bwd_pos; /* position in order of the running forward / backward */
    bool summoned; /* phx_fsdp_gather_full */
    bool in_backward;
    /* phx_fsdp_set_no_sync: backwards keep each unit's full gradients
     * (accumulating) instead of reduce-scattering them. */
    bool no_sync;
    phx_tensor *flag; /* the non-finite gradient flag, a scalar */
    phx_status pending_status; /* a failure inside a unit's backward */
    char pending_err[PX_FSDP_ERR_MAX];
    phx_fsdp_stats stats;
} px_fsdp;

/* The FSDP state of a wrapper module, or NULL (no error set) when m is
 * not one. */
px_fsdp *px_fsdp_get(phx_module *m);
/* Finds the units (wrap policy), fills units and unit_of; checks that
 * every rank has the same units (PHX_EDESYNC naming the first
 * difference). Collective. */
phx_status px_fsdp_find_units(px_fsdp *f);
phx_status px_fsdp_check_layout(px_fsdp *f);

/* src/fsdp/fsdp-comm.c. Frees t's memory (a unit's full buffer), keeping
 * the count of bytes held. */
void px_fsdp_full_free(px_fsdp *f, phx_tensor *t, bool grad);
/* Issues the all-gather of unit u (no-op when gathered): of the f32
 * shard when exact or without param_dtype, else of its cast. */
phx_status px_fsdp_gather_start(px_fsdp *f, px_funit *u, bool prefetch, bool exact);
/* Unit u gathered and complete (widened into f32 under param_dtype);
 * px_fsdp_gather_wait is the non-exact form. */
phx_status px_fsdp_gather_wait_as(px_fsdp *f, px_funit *u, bool exact);
phx_status px_fsdp_gather_wait(px_fsdp *f, px_funit *u);
/* Frees unit u's full parameters unless summoned (waits for a gather in flight). */
void px_fsdp_reshard(px_fsdp *f, px_funit *u);
/* Unit u's full gradients, zeroed, for its backward. */
phx_status px_fsdp_grads_open(px_fsdp *f, px_funit *u);
/* Divides unit u's full gradients by the world and issues their
 * reduce-scatter, finishing the one in flight first. */
phx_status px_fsdp_rs_launch(px_fsdp *f, px_funit *u);
/* Waits for every reduce-scatter, adds it into the shard gradients and
 * frees the full gradients. */
phx_status px_fsdp_rs_finish_all(px_fsdp *f);
/* Whether a unit keeps full gradients accumulated under no_sync, not
 * yet reduced into the shards (outside a backward). */
bool px_fsdp_unsynced(const px_fsdp *f);
/* Makes a non-finite shard gradient on any rank visible on every rank. */
phx_status px_fsdp_settle_nonfinite(px_fsdp *f);
/* Broadcasts the model's buffers from rank 0 of the whole world. */
phx_status px_fsdp_broadcast_buffers(px_fsdp *f);
#endif
