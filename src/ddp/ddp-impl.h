/* DistributedDataParallel internals (px_ prefix, not exported): the
 * reducer state shared by src/ddp/ddp.c (wrapper, hooks, launch, wait),
 * src/ddp/ddp-buckets.c (assignment rule, bucket storage, rebuild) and
 * src/ddp/ddp-check.c (cross-rank model check, broadcast) and
 * src/ddp/ddp-hook*.c (communication hooks). */
#ifndef PHX_CORE_DDP_IMPL_H
#define PHX_CORE_DDP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/ddp.h"

#define PX_DDP_FIRST_BUCKET_BYTES ((size_t)1 << 20) /* 1 MiB, as dist._DEFAULT_FIRST_BUCKET_BYTES */
#define PX_DDP_BUCKET_BYTES ((size_t)25 << 20) /* 25 MiB, as bucket_cap_mb */
#define PX_DDP_ERR_MAX 512

/* One flat gradient allocation; each member's gradient is a view of it. */
typedef struct px_bucket {
    phx_tensor *flat; /* (numel) f32 on the members' device */
    size_t *members; /* parameter indices, bucket order (points into px_ddp.bucket_members) */
    size_t n_members;
    int64_t numel;
    size_t pending; /* members whose gradient is not ready yet this backward */
    phx_work *work; /* all-reduce in flight, or NULL */
    /* ZeRO-2 (px_ddp_zero2_attach): flat holds world * block elements
     * (zero padded); the bucket is reduce-scattered into out, which is
     * then copied into mine (this rank's block of flat) while the rest of
     * flat (before, after: NULL when empty) is cleared; pad (NULL when
     * empty) is the padding past numel, kept zero. */
    int64_t block;
    phx_tensor *out, *mine, *before, *after, *pad;
} px_bucket;

/* An assignment: buckets as runs of parameter indices. */
typedef struct px_assignment {
    size_t n_buckets;
    size_t *order; /* (n_params) parameter indices, bucket after bucket */
    size_t *start; /* (n_buckets + 1) bucket b is order[start[b] .. start[b+1]) */
} px_assignment;

typedef struct px_ddp {
    phx_module *model;
    phx_comm *comm;
    int rank, world;
    phx_ddp_opts opts; /* caps filled in */
    phx_status broken; /* != PHX_OK: a failed rebuild left gradients half moved */
    /* The precision policy last seen on both the wrapper and the model:
     * a change on either side is passed to the other (phx_module_set_precision
     * on the wrapper acts on the model, as DataParallel's does). */
    const phx_precision *precision;
    phx_dtype compute_dtype;

    size_t n_params;
    phx_param **params; /* (n_params) the model's, named_parameters() order */
    phx_tensor **buffers; /* the model's buffers, refreshed at each broadcast (allocated once) */
    phx_param **by_addr; /* (n_params) params sorted by address, for the hook's lookup */
    size_t *by_addr_idx; /* (n_params) their indices */

    /* buckets */
    px_bucket *buckets; /* (n_buckets) */
    size_t n_buckets;
    size_t *bucket_members; /* (n_params) storage of every bucket's member list */
    size_t *bucket_of; /* (n_params) parameter -> bucket */

    /* per backward */
    bool *ready; /* (n_params) gradient final this backward */
    size_t n_ready;
    size_t next_launch; /* buckets < next_launch are launched */
    bool no_sync;
    phx_status hook_status; /* first error seen inside a hook */
    char hook_err[PX_DDP_ERR_MAX];

    /* rebuild in arrival order after the first backward */
    size_t *arrival; /* (n_params) parameter indices in the order they became ready */
    size_t n_arrival;
    bool recording; /* the first backward is being recorded */
    bool rebuild_due; /* the next backward (or a join's shadow of one) rebuilds */

    /* uneven inputs (phx_ddp_join_begin .. phx_ddp_join_end) */
    bool join; /* each training-mode forward first counts the ranks still training */
    bool join_initial; /* divide by the initial world size, not by those ranks */
    int join_syncing; /* ranks whose backward of this step all-reduces */
    phx_tensor *join_flag; /* (2) f32: [still training, syncing this step] */

    /* ZeRO-2: buckets reduce-scattered, each rank keeping its block */
    bool zero2;
    phx_comm *zero_comm; /* the reduce-scatter's group (d->comm or a shard group) */
    phx_comm *zero_rcomm; /* hybrid: the blocks' all-reduce across groups, or NULL */
    int zero_rank, zero_world; /* in zero_comm */
    phx_tensor *zero_flag; /* () f32: a non-finite gradient on some rank */

    /* communication hook (ddp-hook.c) */
    struct px_ddp_hook *hook; /* registered hook, or NULL: the f32 all-reduce */
    bool forwarded; /* a forward ran: too late to register a hook */
    /* The wrapper's own backward finished (its collectives ran), and no
     * training forward with grad mode on, gradient or wrapper backward came since: a user's
     * phx_ddp_finish_backward then returns that outcome again. */
    bool finished;
    phx_status finish_status;
    char finish_err[PX_DDP_ERR_MAX];

    /* introspection */
    phx_ddp_stats stats;
    phx_ddp_event *trace; /* (trace_cap) events of the current/last backward */
    size_t trace_len, trace_cap;
    bool trace_restart; /* the next event starts a new backward's trace */
    double t0; /* start of the traced backward */
} px_ddp;

/* PyTorch's compute_bucket_assignment_by_size for parameters visited in
 * `order` (n entries, parameter indices): a bucket per device collects
 * parameters until its bytes reach the current cap (first_cap for the
 * first bucket of that device, cap afterwards), then closes; open buckets
 * are appended at the end. Fills *out (caller frees with
 * px_assignment_free). */
phx_status px_ddp_assign(px_ddp *d, const size_t *order, size_t first_cap, size_t cap, px_assignment *out);
void px_assignment_free(px_assignment *a);

/* Allocates the buckets of assignment a and points every gradient into
 * them (copying the current gradients). Replaces the current buckets. */
phx_status px_ddp_install(px_ddp *d, const px_assignment *a);
/* Releases the bucket storage (the parameters keep their views). */
void px_ddp_buckets_free(px_ddp *d);
/* Broadcasts rank 0's arrival order and rebuilds the buckets in it. */
phx_status px_ddp_rebuild(px_ddp *d);
/* The join's count at the start of an active rank's step (ddp-join.c). */
phx_status px_ddp_join_step(px_ddp *d);

/* Communication hooks (ddp-hook.c). launch starts bucket b's reduction
 * through the registered hook (averaging over div ranks); complete runs
 * after its work was waited for; reduce does both and waits (a join's
 * shadow of a backward); free releases the registration. */
phx_status px_ddp_hook_launch(px_ddp *d, size_t b, int div, phx_work **work);
phx_status px_ddp_hook_complete(px_ddp *d, size_t b);
phx_status px_ddp_hook_reduce(px_ddp *d, size_t b, int div);
void px_ddp_hook_free(px_ddp *d);
/* The registered hook's name, "(unnamed)" when it gave none; NULL when d
 * has no hook. */
const char *px_ddp_hook_name(const px_ddp *d);

/* Checks that every rank has the same parameter names, shapes and dtypes
 * (PHX_EDESYNC naming the first difference on every rank). */
phx_status px_ddp_check_models(px_ddp *d);
/* Copies rank 0's parameter values to every rank. */
phx_status px_ddp_broadcast_params(px_ddp *d);
/* Broadcasts the model's buffers from root (PyTorch's broadcast_buffers):
 * from rank 0 at construction and at the end of each synchronised
 * backward unless opts.no_broadcast_buffers; from the last rank to join
 * at phx_ddp_join_end. */
phx_status px_ddp_broadcast_buffers(px_ddp *d, int root);

/* ZeRO-2 (src/zero): the reducer state of a DDP module, or NULL with
 * PHX_EINVAL naming who. */
px_ddp *px_ddp_of(phx_module *ddp, const char *who);
/* Switches d to reduce-scatter over shard (d->comm when NULL), each
 * reduced block then all-reduced over replicate (NULL: none; hybrid
 * sharding): reinstalls the current buckets padded to a multiple of
 * shard's size and turns the arrival-order rebuild off,
 * so the buckets (the ZeRO-2 partition) stay fixed. Between backwards
 * only (PHX_ESTATE otherwise); refused inside a join. detach goes back to
 * all-reduce (the padding stays). */
phx_status px_ddp_zero2_attach(px_ddp *d, phx_comm *shard, phx_comm *replicate);
void px_ddp_zero2_detach(px_ddp *d);
/* After the reduce-scatters of a backward: under hybrid sharding each
 * bucket's reduced block all-reduced (sum, blocking) over zero_rcomm;
 * then one all-reduce (max) over the world of
 * whether any rank's block holds a non-finite value, then each bucket's
 * reduced block copied into place and the other blocks cleared (filled
 * with NaN when some rank's block was not finite, so every rank's
 * GradScaler skips the step). */
phx_status px_ddp_zero2_settle(px_ddp *d);
/* The padded length of a bucket of numel elements (numel, at least 1,
 * without ZeRO-2), and its block, out and views once flat exists
 * (ddp-zero2.c); bucket_free releases them. */
int64_t px_ddp_bucket_len(const px_ddp *d, int64_t numel);
phx_status px_ddp_zero2_bucket(px_ddp *d, px_bucket *k);
void px_ddp_zero2_bucket_free(px_bucket *k);
#endif
