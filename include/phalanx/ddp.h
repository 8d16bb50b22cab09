/* Phalanx — DistributedDataParallel (PyTorch's reducer semantics). */
#ifndef PHALANX_DDP_H
#define PHALANX_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_ddp_opts {
    size_t struct_size; /* sizeof (phx_ddp_opts): PHX_DDP_OPTS_INIT sets it */
    size_t first_bucket_bytes; /* 0: 1 MiB */
    size_t bucket_bytes; /* 0: 25 MiB */
    bool find_unused; /* a parameter without gradient counts as zero */
    bool no_overlap; /* one all-reduce of all buckets after backward (benchmarks) */
    bool no_rebuild; /* keep the initial bucket order */
    /* Buffers (BatchNorm's running statistics) are broadcast from rank 0
     * at construction and at the end of every backward that all-reduces
     * gradients (not under no_sync), PyTorch's broadcast_buffers=True:
     * the next forward, training or evaluation, runs no collective, so
     * rank 0 may evaluate alone. Set this for broadcast_buffers=False
     * (each rank keeps its own; construction still broadcasts them). */
    bool no_broadcast_buffers;
} phx_ddp_opts;
#define PHX_DDP_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_ddp_opts) \
    }

/* Wraps model (the caller keeps its reference; the wrapper holds another,
 * so the two are freed in either order) in a module whose forward is the
 * model's and whose backward all-reduces gradient buckets (average over
 * ranks) as they become ready, waits for all, then broadcasts rank 0's
 * buffers. Checks that every rank has the same parameter names, shapes and
 * dtypes (PHX_EDESYNC on every rank naming the first difference and the
 * ranks), then broadcasts rank 0's parameters and buffers. A forward runs
 * no collective (except inside a join). comm NULL or of size 1 is a world
 * of one: the wrapper runs the model and communicates nothing, so one
 * program runs alone and under phxrun. Set the model's precision, device
 * and SyncBatchNorm before wrapping: doc/guide/ddp.md lists what each call does
 * on the wrapper. Parameter names are the model's. Returns NULL on
 * error. */
phx_module *phx_ddp_new(phx_module *model, phx_comm *comm, const phx_ddp_opts *opts);
/* The wrapped model. */
phx_module *phx_ddp_model(phx_module *ddp);
/* While on, backward accumulates gradients locally without communication;
 * the first backward after turning it off all-reduces the accumulated sum. */
phx_status phx_ddp_set_no_sync(phx_module *ddp, bool no_sync);
/* Uneven inputs (PyTorch's `with model.join(divide_by_initial_world_size)`):
 * call phx_ddp_join_begin on every rank before its training loop and
 * phx_ddp_join_end on each when its data runs out. Inside, each step of a
 * rank still training starts (in a training-mode forward) with a small
 * all-reduce counting the ranks still training; a rank in phx_ddp_join_end shadows the other
 * ranks' gradient all-reduces with zeros until every rank has joined, so
 * none waits for a rank that has no more batches. Gradients are averaged
 * over the initial world size (divide_by_initial_world_size true) or over
 * the ranks whose step synchronises (false). At the end every rank holds
 * the parameters and buffers of the rank that joined last (the highest of
 * those); buffers are not broadcast at the end of steps inside a join.
 * Both are collective; PHX_ESTATE for a join begun twice or ended unbegun;
 * PHX_EUNSUPPORTED while a ZeRO-2 optimizer (phalanx/zero.h) has the
 * wrapper reduce-scatter its buckets. */
phx_status phx_ddp_join_begin(phx_module *ddp, bool divide_by_initial_world_size);
phx_status phx_ddp_join_end(phx_module *ddp);
/* Waits for every launched bucket (the wrapper's backward calls it). */
phx_status phx_ddp_finish_backward(phx_module *ddp);

/* Introspection for tests and benchmarks. */
size_t phx_ddp_num_buckets(phx_module *ddp);
/* Parameter indices (into phx_module_param of the model) of bucket b in
 * bucket order; returns their count, fills up to max. */
size_t phx_ddp_bucket_params(phx_module *ddp, size_t b, size_t *idx, size_t max);

/* --- Counters and an event trace (tests and benchmarks): they show
 * whether buckets are all-reduced while the backward still runs. --- */

typedef enum phx_ddp_event_kind {
    PHX_DDP_EV_READY = 0, /* a parameter's gradient became final (index: parameter) */
    PHX_DDP_EV_LAUNCH = 1, /* a bucket's all-reduce was issued (index: bucket) */
    PHX_DDP_EV_MODEL_DONE = 2, /* the model's backward returned (index: 0) */
    PHX_DDP_EV_DONE = 3 /* a bucket's all-reduce was waited for (index: bucket) */
} phx_ddp_event_kind;

typedef struct phx_ddp_event {
    int kind; /* phx_ddp_event_kind */
    size_t index;
    double t; /* seconds since the first event of that backward */
} phx_ddp_event;

typedef struct phx_ddp_stats {
    size_t struct_size; /* sizeof (phx_ddp_stats): PHX_DDP_STATS_INIT sets it */
    uint64_t backwards; /* backward passes finished (synced or no_sync) */
    uint64_t synced; /* of which all-reduced their gradients */
    uint64_t launches; /* bucket all-reduces issued */
    uint64_t early_launches; /* issued while another gradient of the same
                                  backward was still pending: overlap */
    uint64_t rebuilds; /* bucket rebuilds in arrival order (0 or 1) */
    uint64_t bytes; /* bytes all-reduced */
    double wait_s; /* time finish_backward spent waiting */
} phx_ddp_stats;
#define PHX_DDP_STATS_INIT \
    { \
        .struct_size = sizeof(phx_ddp_stats) \
    }

/* Copies the counters since construction into *out. PHX_EINVAL when ddp is
 * not a DistributedDataParallel module. */
phx_status phx_ddp_get_stats(phx_module *ddp, phx_ddp_stats *out);
/* Events of the last (or current) backward in the order they happened;
 * returns their count and fills up to max. */
size_t phx_ddp_trace(phx_module *ddp, phx_ddp_event *ev, size_t max);

#ifdef __cplusplus
}
#endif
#endif
