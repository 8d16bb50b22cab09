/* DataParallel internals (px_ prefix, not exported): the wrapper state
 * shared by src/dp/dp.c (construction, forward, backward) and
 * src/dp/dp-reduce.c (replica gradients summed into the model's). */
#ifndef PHX_CORE_DP_IMPL_H
#define PHX_CORE_DP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/dp.h"
#include "src/base/threads.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"

#define PX_DP_ERR_MAX 512

enum { PX_DP_FWD = 0, PX_DP_BWD = 1 }; /* the two passes */

/* What a cached set of row views was made for: a tensor's storage, offset,
 * dtype and shape. The views keep that storage alive, so an equal key
 * always means the same memory. */
typedef struct px_dp_key {
    const px_storage *storage;
    int64_t offset;
    phx_dtype dtype;
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
} px_dp_key;

/* One replica and its slice of the current batch. */
typedef struct px_dp_rep {
    phx_module *m; /* a clone on dev; the model itself with one device */
    phx_device dev;
    bool shares; /* m's parameter values are the model's tensors (same device) */
    phx_param **params; /* (n_params) m's parameters, named_parameters() order */
    phx_tensor *grad; /* (total) f32 flat gradient, each parameter's grad a view; all zero
                                between backwards. NULL when its gradients are the model's own
                                (the model itself, or replica 0 on the model's device). */
    int64_t row0, rows; /* its rows of the batch */
    /* Per pass, PX_DP_FWD (x in, y out) and PX_DP_BWD (dy in, dx out): */
    phx_tensor *in_rows[2]; /* its rows of x / dy (views of the caller's tensor) */
    px_buf in_buf[2]; /* those rows copied to dev when they live elsewhere */
    phx_tensor *in[2]; /* what m reads: in_rows, or in_buf's tensor */
    phx_tensor *out[2]; /* y / dx that m produced (owned by m) */
    phx_tensor *out_rows[2]; /* its rows of the gathered y / dx (views) */
    bool out_done[2]; /* the worker already copied out into out_rows */
    bool buffers_shared; /* m's buffers are the model's tensors (replica 0 on its device) */
    phx_status st; /* result of this replica's last task */
    char err[PX_DP_ERR_MAX];
} px_dp_rep;

typedef struct px_dp {
    phx_module *self; /* the wrapper */
    phx_module *model; /* the wrapped module (owned by the caller) */
    size_t n; /* devices = replicas */
    phx_device *devices; /* (n) */
    phx_device out_dev;
    px_dp_rep *reps; /* (n) */
    px_pool *pool; /* n tasks at once: the caller runs replica 0 */

    size_t n_params;
    phx_param **params; /* (n_params) the model's, named_parameters() order */
    int64_t *off; /* (n_params + 1) offset of each parameter in a flat gradient */
    uint64_t *synced; /* (n_params) model parameter version the replicas hold */
    phx_tensor **synced_val; /* (n_params) model value tensor the replicas hold (not retained) */
    bool *dirty; /* (n_params) to refresh in the next forward */
    const phx_precision *precision; /* policy the replicas run with */
    phx_dtype compute_dtype;

    /* Order in which replica 0's gradients became final in the last
     * backward; the model's hooks fire in this order after the sum. */
    size_t *ready; /* (n_params) parameter indices */
    size_t n_ready;
    size_t ready_hint;

    /* The current batch. */
    int64_t *sizes; /* (n) torch.chunk sizes */
    size_t k; /* replicas in use (chunks); 0 before the first forward */
    int64_t batch;
    px_dp_key in_key[2]; /* the x / dy the in_rows views were made for */
    px_dp_key out_key[2]; /* the gathered y / dx the out_rows views were made for */
    px_buf out_buf[2]; /* gathered y (output device) and dx (the input's device) */
    int y_ndim; /* the last forward's output: shape and dtype */
    int64_t y_shape[PHX_MAX_DIMS];
    phx_dtype y_dtype;
    phx_device x_dev; /* device of the last input */
    bool want_dx;
    bool forward_ok; /* the last forward succeeded: backward may run */

    px_buf stage; /* staging for replica gradients on another device */
    float **gsrc; /* (n) replicas' flat gradients, for the CPU sum */
    size_t n_gsrc;
    size_t reduce_tasks; /* pool tasks the CPU sum is split into */
} px_dp;

/* Adds the flat gradients of replicas 0..d->k-1 into the model's
 * parameter gradients (model += r1 + r2 + ..., in replica order, so the
 * result does not depend on thread timing; replica 0 on the model's device
 * added its own during backward) and zeroes them. CPU replicas are summed
 * in parallel on the pool, with no allocation. */
phx_status px_dp_reduce(px_dp *d);
/* Sets every clone's gradients back to zero (after a failed backward). */
void px_dp_zero_replica_grads(px_dp *d);
/* ---- src/dp/dp-buffers.c: module buffers (PyTorch's replicate()) ---- */

/* Replica 0 on the model's device uses the model's buffer tensors, so its
 * updates (BatchNorm's running statistics) land in the model. */
phx_status px_dp_buffers_share(px_dp *d);
/* Before a forward, on the caller's thread: every other replica gets a
 * copy of the model's buffers (their updates are dropped). */
phx_status px_dp_buffers_in(px_dp *d);
/* After a forward: replica 0's buffers, when it does not share them, are
 * copied back into the model. */
phx_status px_dp_buffers_out(px_dp *d);

#endif
