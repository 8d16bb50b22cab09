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
/* Waits for every launched bucket (the wrapper's backward calls it, and
 * so phx_backward from the wrapper's output). Called after the wrapper's
 * own backward finished (no training-mode forward with grad mode on,
 * gradient or wrapper backward since: a rank may evaluate alone in
 * between, in eval mode or with grad mode off),
 * it runs nothing and returns that finish's outcome, its error included;
 * after a backward of the inner model it finishes that one. */
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
    uint64_t bytes; /* bytes all-reduced (with a communication hook: the payload of its collectives) */
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

/* --- Communication hooks (PyTorch's DistributedDataParallel.register_comm_hook).
 * A hook replaces the average of each gradient bucket: the wrapper hands
 * it the bucket when the bucket is complete (in bucket order) and, after
 * the hook's work completed, calls its complete slot; then the bucket must
 * hold the gradient every rank uses for the step. doc/guide/ddp.md,
 * "Communication hooks", compares the built-ins with PyTorch's. --- */

/* One bucket as a hook sees it (valid during the call only). */
typedef struct phx_comm_hook_bucket {
    size_t struct_size; /* sizeof (phx_comm_hook_bucket), set by the wrapper */
    phx_tensor *buffer; /* (numel) f32: this rank's gradients of the bucket, flat, not yet averaged */
    phx_comm *comm; /* the wrapper's communicator (NULL: a world of one) */
    size_t index; /* bucket index, 0 .. phx_ddp_num_buckets - 1 (PyTorch's GradBucket.index) */
    bool is_last; /* the last bucket of this backward (GradBucket.is_last) */
    int divisor; /* average over this many ranks: the world size (under a join without
                    divide_by_initial_world_size, the ranks whose step synchronises) */
    size_t n_grads;
    phx_tensor *const *grads; /* (n_grads) the members' gradients, views of buffer with the
                                 parameters' shapes, in bucket order (GradBucket.gradients) */
    const size_t *params; /* (n_grads) their indices into phx_module_param of the model */
    uint64_t *bytes; /* a hook adds the payload bytes of the collectives it issues here
                        (phx_ddp_stats.bytes); may be left alone */
} phx_comm_hook_bucket;

typedef struct phx_comm_hook {
    size_t struct_size; /* sizeof (phx_comm_hook): PHX_COMM_HOOK_INIT sets it */
    const char *name; /* for messages (kept, not copied: a string that outlives the wrapper) */
    /* (required) Starts the reduction of bucket b: either completes it
     * (leaving *work NULL) or issues asynchronous collectives and returns
     * the last one's handle in *work (collectives complete in issue order),
     * as PyTorch's hook returns a future. Every rank must issue the same
     * collectives. Runs on the thread doing backward, possibly while
     * earlier layers still compute. */
    phx_status (*launch)(void *state, const phx_comm_hook_bucket *b, phx_work **work);
    /* (optional) Runs after *work completed, in bucket order, before the
     * optimizer may step (PyTorch's future.then): e.g. decompresses into
     * b->buffer; may issue further (blocking) collectives. NULL: nothing. */
    phx_status (*complete)(void *state, const phx_comm_hook_bucket *b);
} phx_comm_hook;
#define PHX_COMM_HOOK_INIT \
    { \
        .struct_size = sizeof(phx_comm_hook) \
    }

/* Registers hook (copied) with its state (the caller's; it must outlive
 * the wrapper) on a DistributedDataParallel wrapper: only on the wrapper,
 * only once, and only before its first forward (as PyTorch); PHX_ESTATE
 * otherwise, PHX_EINVAL for a module that is not a wrapper or a hook
 * without launch. Every rank must register the same hook. The built-ins
 * below ignore state, except PowerSGD, whose state must be a
 * phx_powersgd_state. */
phx_status phx_ddp_register_comm_hook(phx_module *ddp, const phx_comm_hook *hook, void *state);

/* Built-in hooks (static descriptors, never freed), as
 * torch.distributed.algorithms.ddp_comm_hooks:
 * allreduce: the wrapper's own path (divide by the world size, all-reduce
 *   the f32 bucket), bit for bit the same as no hook;
 * fp16_compress / bf16_compress: the bucket is cast to f16 / bf16, divided
 *   by the world size in that dtype, all-reduced (sum) in that dtype, and
 *   cast back: half the bytes. Each reduction step of every backend adds
 *   in f32 and rounds the sum once to 16 bits, so at world 2 the result is
 *   16(16(16(g0)/2) + 16(16(g1)/2)) computed in f32, as PyTorch's
 *   fp16_compress_hook / bf16_compress_hook on gloo. CPU buckets only
 *   (PHX_EUNSUPPORTED otherwise). */
const phx_comm_hook *phx_comm_hook_allreduce(void);
const phx_comm_hook *phx_comm_hook_fp16_compress(void);
const phx_comm_hook *phx_comm_hook_bf16_compress(void);

/* PowerSGD (Vogels et al. 2019) as PyTorch 1.13's powerSGD_hook: the
 * first start_iter steps all-reduce normally; then each bucket gets its
 * error feedback added, gradients viewed as (shape[0], numel/shape[0])
 * matrices M with rank r = min(rows, cols, matrix_approximation_rank) are
 * compressed when (rows + cols) * r * min_compression_rate < rows * cols
 * (1-D and small tensors are all-reduced uncompressed, batched with P),
 * P = M Q is all-reduced, orthogonalised, Q = M^T P all-reduced and
 * averaged, and M <- P Q^T; the error is the local input minus the
 * result; Q is kept for the next step (warm start). CPU buckets only. */
typedef struct phx_powersgd_state phx_powersgd_state;
typedef struct phx_powersgd_opts {
    size_t struct_size; /* sizeof (phx_powersgd_opts): PHX_POWERSGD_OPTS_INIT sets it */
    int matrix_approximation_rank; /* 0: 1 */
    int64_t start_iter; /* start_powerSGD_iter; 0: 1000. At least 2 unless both
                           no_error_feedback and no_warm_start (PyTorch's rule); then
                           1 is the earliest (step 0 is all-reduced plainly) */
    double min_compression_rate; /* 0: 2 (to compress every matrix, a small positive value) */
    bool no_error_feedback; /* use_error_feedback=False */
    bool no_warm_start; /* warm_start=False: fresh random Q every step */
    float orthogonalization_epsilon; /* 0: none (a zero column stays zero) */
    uint64_t random_seed; /* seed of the generator of the initial Q (normal(0, 1)) */
    /* (optional) Fills the initial Q (cols x r, row-major) of the matrix of
     * parameter `param` (model index) in bucket `bucket` instead of the
     * generator: tests feed the values PyTorch's generator produced. */
    void (*init_q)(void *user, size_t bucket, size_t param, int64_t cols, int64_t r, float *q);
    void *init_q_user;
} phx_powersgd_opts;
#define PHX_POWERSGD_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_powersgd_opts) \
    }
/* New state (the caller frees it after the wrapper); NULL on error
 * (PHX_EINVAL naming the option). opts NULL: the defaults. */
phx_powersgd_state *phx_powersgd_state_new(const phx_powersgd_opts *opts);
void phx_powersgd_state_free(phx_powersgd_state *s);
/* Steps counted so far (PowerSGDState.iter). */
int64_t phx_powersgd_iter(const phx_powersgd_state *s);
const phx_comm_hook *phx_comm_hook_powersgd(void);

#ifdef __cplusplus
}
#endif
#endif
