/* Phalanx — ZeRO-1 and ZeRO-2: an optimizer whose state is sharded over
 * the ranks (PyTorch's ZeroRedundancyOptimizer), optionally with the
 * gradients reduce-scattered by DDP instead of all-reduced, and
 * optionally sharded within process groups and replicated across them
 * (hybrid sharding). doc/guide/sharding.md explains the partition and
 * what is not built yet. */
#ifndef PHALANX_ZERO_H
#define PHALANX_ZERO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/comm.h"
#include "phalanx/optim.h"
#include "phalanx/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes the optimizer of one rank's shard: any phx_optimizer over `shard`
 * (phx_sgd_new, phx_adam_new, a user optimizer), configured as it would
 * be for the whole model. shard is owned by the ZeRO optimizer and lives
 * as long as it. Its parameters are pieces of the model's: views of
 * contiguous element ranges of a parameter's value and gradient, shaped
 * (1, n) when the parameter is a matrix (ndim >= 2) and (n) otherwise, and
 * owned by the parameter's module, so shape- and type-based rules such as
 * phx_adam_decay_matrices_only classify a piece as its parameter.
 * phx_zero_shard_source maps a piece back. Return NULL (with
 * phx_last_error set) on failure. */
typedef phx_optimizer *(*phx_zero_make_fn)(phx_module *shard, void *arg);

typedef struct phx_zero_opts {
    size_t struct_size; /* sizeof (phx_zero_opts): PHX_ZERO_OPTS_INIT sets it */
    /* 0 or 1: ZeRO-1 (optimizer state sharded; gradients as the caller
     * made them). 2: ZeRO-2: model must be a DDP module (phx_ddp_new) over
     * the same comm; its buckets are then reduce-scattered instead of
     * all-reduced, and each rank's shard is its block of every bucket. */
    int stage;
    /* ZeRO-1: the flat parameter space is cut into regions of at most this
     * many bytes, each split evenly over the ranks. 0: 25 MiB. Ignored for
     * stage 2 (regions are the DDP buckets). */
    size_t region_bytes;
    /* The all-gather's receive buffer: each region's blocks are gathered
     * in chunks of gather_bytes / world bytes per rank (one all-gather
     * each), so the buffers cost this plus one chunk whatever the model.
     * 0: 4 MiB. */
    size_t gather_bytes;
    /* Hybrid sharding (FSDP's HYBRID_SHARD), appended in ABI 1.3: shard
     * within shard_comm (a group of comm made by phx_comm_split, e.g. the
     * ranks of one node) and replicate across replicate_comm (the ranks
     * holding the same shard in the other groups, e.g. one per node).
     * Both NULL: shard over comm. Stage 1: the partition is over
     * shard_comm (the caller's gradients, e.g. DDP's all-reduce over the
     * world, are already the same in every group); replicate_comm may be
     * NULL. Stage 2: the DDP wrapper's buckets are reduce-scattered within
     * shard_comm, then each rank's reduced block is all-reduced across
     * replicate_comm; size(shard_comm) * size(replicate_comm) must be the
     * DDP wrapper's world (replicate_comm NULL only when shard_comm is the
     * whole world). The groups must partition the world this way; the
     * caller keeps them alive as long as the optimizer. */
    phx_comm *shard_comm;
    phx_comm *replicate_comm;
} phx_zero_opts;
#define PHX_ZERO_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_zero_opts) \
    }

/* A ZeRO optimizer over the parameters of model (a module or its DDP
 * wrapper; the model must outlive the optimizer, as for every optimizer).
 * The parameters, taken in named_parameters() order as one flat f32
 * space, are cut into regions; region g of n elements is split into
 * blocks of ceil(n / world) elements, rank r owning block r (the last
 * blocks may be shorter or empty). Each rank calls make once for its
 * shard. phx_optimizer_step on the result steps the shard's optimizer
 * (with this optimizer's learning rate and step count) and then
 * all-gathers the updated blocks so every rank holds every parameter;
 * phx_optimizer_zero_grad zeroes the whole model's gradients;
 * phx_scaler_step drives it as any optimizer (under DDP every rank sees
 * the same gradients, so every rank makes the same step-or-skip choice;
 * under ZeRO-2 a non-finite gradient on any rank is made visible to all).
 * Collective: every rank calls it with the same model layout (checked:
 * PHX_EDESYNC naming the first rank that differs). comm NULL or of size 1
 * is a world of one: the shard is the whole model and nothing is
 * gathered. With opts->shard_comm (hybrid sharding) "world" and "rank"
 * above and below are those of shard_comm: the partition, the check, the
 * all-gather, phx_zero_rank_numel, phx_zero_clip_grad_norm and
 * phx_zero_consolidate's root are all within the group.
 * All parameters must be f32 on one device. A model changed
 * afterwards (parameters added, replaced or moved) is refused at the next
 * step with PHX_ESTATE. Returns NULL with phx_last_error on error. Free
 * with phx_optimizer_free (under ZeRO-2 the DDP wrapper goes back to
 * all-reduce, keeping its buckets as they are). */
phx_optimizer *phx_zero_optimizer_new(phx_module *model, phx_comm *comm, phx_zero_make_fn make, void *arg,
                                      const phx_zero_opts *opts);
/* The shard's optimizer made by make (owned by zero), or NULL with
 * PHX_EINVAL when zero is not a ZeRO optimizer. */
phx_optimizer *phx_zero_inner(phx_optimizer *zero);
/* The shard module handed to make (owned by zero). */
phx_module *phx_zero_shard(phx_optimizer *zero);
/* Parameter index (into the model's parameters) of the shard's parameter
 * i, and in *offset (may be NULL) the element where the piece starts;
 * (size_t)-1 for a bad i. */
size_t phx_zero_shard_source(phx_optimizer *zero, size_t i, int64_t *offset);
/* Elements of the flat parameter space owned by rank (0 for a bad rank). */
int64_t phx_zero_rank_numel(phx_optimizer *zero, int rank);
/* Number of regions (all-gathers per step). */
size_t phx_zero_num_regions(phx_optimizer *zero);

/* torch.nn.utils.clip_grad_norm_ (norm 2) for a sharded model, FSDP's
 * clip_grad_norm_: each rank sums the squares of its shard's gradients,
 * one all-reduce adds them, and each rank scales its shard's gradients by
 * max_norm / (total + 1e-6) when that is below 1; *total_norm (may be
 * NULL) receives the total. Collective. Under ZeRO-2 it is the only
 * correct clipping (phx_clip_grad_norm over the model sees zeros outside
 * this rank's blocks); under ZeRO-1 it equals phx_clip_grad_norm on the
 * all-reduced gradients and reads only 1/world of them. Call it after
 * phx_scaler_unscale when a GradScaler is used. A non-finite total
 * scales nothing. PHX_EINVAL for max_norm not finite and > 0. */
phx_status phx_zero_clip_grad_norm(phx_optimizer *zero, double max_norm, double *total_norm);

/* Checkpoints. The optimizer's state (phx_optimizer_state, which
 * phx_checkpoint_save and _load use) is the consolidated full state: the
 * tensors a plain optimizer of the same kind would have ("0.weight.exp_avg",
 * shaped as the parameter), built by phx_zero_consolidate and dropped at
 * the next step. Without a consolidation since the last step it lists
 * nothing and logs a warning, so a checkpoint saved then holds no
 * optimizer state.
 * phx_zero_consolidate (collective, PyTorch's consolidate_state_dict):
 * gathers every rank's state onto root (0 .. world-1), or onto every rank
 * for root -1. The full state costs a whole optimizer's memory on the
 * ranks that hold it. PHX_EUNSUPPORTED when the shard optimizer's state
 * tensors are not one per piece and kind ("<piece>.<kind>", the piece's
 * size), or when root owns no elements.
 * phx_zero_load_full_state: after phx_checkpoint_load filled the
 * consolidated state (consolidate with root -1 first, so every rank holds
 * tensors to load into), copies each rank's part into its shard's
 * optimizer. Local; PHX_ESTATE without a consolidated state. */
phx_status phx_zero_consolidate(phx_optimizer *zero, int root);
phx_status phx_zero_load_full_state(phx_optimizer *zero);

/* Sharded checkpoints (doc/guide/sharding.md "Checkpoints", the format in
 * doc/reference/formats.md). phx_zero_checkpoint_save (collective): each
 * rank writes the pieces it owns (parameter values and optimizer state)
 * to dir/shard-<rank>-of-<world>.g<generation>.safetensors (rank 0 also
 * the buffers); after every rank's shard is on disk rank 0 writes
 * dir/index.json (which shard holds which element range of which tensor,
 * the world, the optimizer's type, state kinds, step count and lr, the
 * scaler) and renames it into place last, then removes every shard file
 * the index does not name (older generations, a dead save's). Every file
 * is written atomically (temporary file, fsync, rename): a save killed or
 * failed on any rank leaves the previous index and its shards loadable.
 * model is the optimizer's model; scaler may be NULL. dir, created if
 * missing, must be one folder every rank sees (a shared filesystem).
 * Hybrid sharding: the shard groups hold the same shards, so only the
 * group of the ranks first in their replicate group writes (the others
 * wait for it and return its outcome); a hybrid ZeRO-1 given shard_comm
 * without replicate_comm (over a larger world) cannot say which group
 * writes and is refused with PHX_EINVAL, nothing written.
 * PHX_EUNSUPPORTED when the ranks' shard optimizers keep different state
 * kinds, or on a rank whose shard optimizer does not keep one state tensor
 * per piece and kind (the other ranks then fail with PHX_EIO); nothing is
 * written then.
 * phx_zero_checkpoint_load (collective): loads at any world size (the
 * saved one, smaller, larger): each rank reads the parameters and
 * buffers and, of the optimizer state, only the shard tensors overlapping
 * its own pieces, checking each tensor's CRC-32; then every rank commits
 * or none does. Refused (PHX_EIO, naming the file and the tensor, nothing
 * changed; PHX_ENOTFOUND for no index) for a missing or corrupt shard or
 * index, an index of another model (names, order or shapes differ), or
 * optimizer state of another type or kinds. Restores the step count, lr and (when scaler is given)
 * the scaler; drops a consolidated state.
 * phx_zero_checkpoint_load_full: the same into a plain optimizer of one
 * process (opt over model, e.g. phx_adam_new; opt and scaler may be
 * NULL): the state consolidated as "<param>.<kind>" tensors shaped as the
 * parameters.
 * phx_zero_checkpoint_export: one ordinary checkpoint at path, as
 * phx_checkpoint_save would write it for the same model, plain optimizer
 * and scaler (parameters, buffers, "optim.<param>.<kind>", optim.steps,
 * optim.type, scaler.*), for phx_checkpoint_load or inference. */
phx_status phx_zero_checkpoint_save(const char *dir, phx_module *model, phx_optimizer *zero, phx_scaler *scaler);
phx_status phx_zero_checkpoint_load(const char *dir, phx_module *model, phx_optimizer *zero, phx_scaler *scaler);
phx_status phx_zero_checkpoint_load_full(const char *dir, phx_module *model, phx_optimizer *opt, phx_scaler *scaler);
phx_status phx_zero_checkpoint_export(const char *dir, const char *path);

/* Stage 3 (ZeRO-3, phalanx/fsdp.h): phx_zero_optimizer_new over an FSDP
 * module (phx_fsdp_new) with opts->stage 3 or 0 (stage 1 or 2 there, or
 * stage 3 over another module, is PHX_EINVAL; comm must be NULL or the
 * FSDP wrapper's; shard_comm and replicate_comm must be NULL: a hybrid
 * FSDP wrapper (phx_fsdp_opts.shard_comm) makes the optimizer shard
 * within its group).
 * The regions are the FSDP units (whole parameters in unit order, the
 * unit's blocks) and each piece is a view of the rank's persistent shard
 * of its unit (values and gradients). phx_optimizer_step steps the shard
 * and gathers nothing (the next forward gathers each unit).
 * phx_optimizer_model of the result is the shard module, so
 * phx_optimizer_zero_grad and the GradScaler see the shard's gradients.
 * The optimizer holds a reference to the FSDP module. Clipping,
 * consolidation and the sharded checkpoints (whose format is the same:
 * a stage-3 checkpoint loads under stages 1 and 2 and at any world size)
 * work as above. */

#ifdef __cplusplus
}
#endif
#endif
