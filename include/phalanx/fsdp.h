/* Phalanx — fully sharded data parallel (ZeRO-3, PyTorch's FSDP with
 * FULL_SHARD or SHARD_GRAD_OP): each rank keeps 1/world of every
 * parameter and gradient; a wrapping unit's full parameters exist only
 * while the unit runs. doc/guide/sharding.md ("ZeRO-3") explains the
 * units, what is freed when, and the table against PyTorch's options. */
#ifndef PHALANX_FSDP_H
#define PHALANX_FSDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When a unit's full parameters are freed. */
typedef enum phx_fsdp_sharding {
    /* (default) after each unit's forward, gathered again for its
     * backward (FSDP's FULL_SHARD, ZeRO-3). */
    PHX_FSDP_FULL_SHARD = 0,
    /* kept from a unit's forward to the end of its backward (FSDP's
     * SHARD_GRAD_OP, ZeRO-2 with gradients of 1/world). */
    PHX_FSDP_SHARD_GRAD_OP = 1,
} phx_fsdp_sharding;

/* A user wrap policy (FSDP's auto_wrap_policy): called once per module of
 * the model below the root, children before their parent, with the
 * module, its dotted path ("h.0") and numel, the parameter elements of its
 * subtree not already in a nested unit. true makes the subtree a unit. It
 * must give the same answers on every rank (checked). */
typedef bool (*phx_fsdp_wrap_fn)(const phx_module *m, const char *path, int64_t numel, void *arg);

typedef struct phx_fsdp_opts {
    size_t struct_size; /* sizeof (phx_fsdp_opts): PHX_FSDP_OPTS_INIT sets it */
    /* The wrap policy; NULL: the size policy below. */
    phx_fsdp_wrap_fn wrap;
    void *wrap_arg;
    /* Size policy (FSDP's size_based_auto_wrap_policy): a module with
     * children whose subtree holds at least this many parameter elements
     * not in a nested unit becomes a unit. Leaf modules are never wrapped
     * by it, so a weight that a leaf shares with another module (a tied
     * embedding) stays in its parent's unit. 0: 1e6 elements. The root is
     * always a unit holding what is left. */
    int64_t min_unit_numel;
    phx_fsdp_sharding sharding; /* 0: PHX_FSDP_FULL_SHARD */
    /* true: no prefetch (each unit gathers when it runs). Default (false):
     * a unit's forward issues the all-gather of the unit that ran next in
     * the first forward, and a unit's backward issues the all-gather of
     * the unit whose backward comes next (FSDP's BACKWARD_PRE). */
    bool no_prefetch;
    /* FSDP's MixedPrecision. param_dtype (PHX_BF16 or PHX_F16; 0 =
     * PHX_F32: no cast): each rank casts its f32 shard to param_dtype,
     * the all-gather moves param_dtype, and the result is widened into
     * the f32 full parameters the modules read, so a forward and backward
     * compute exactly what they would with param_dtype-rounded weights;
     * the shards (the optimizer's master weights) stay f32, and
     * phx_fsdp_gather_full gathers them exactly. reduce_dtype (0 = f32):
     * the full gradients, divided by the world, are cast to reduce_dtype
     * before the reduce-scatter (which sums in that dtype), and the
     * result is widened and added into the f32 shard gradient. */
    phx_dtype param_dtype;
    phx_dtype reduce_dtype;
    /* Hybrid sharding (FSDP's HYBRID_SHARD): shard within shard_comm (a
     * group of comm made by phx_comm_split, e.g. the ranks of one node)
     * and replicate across replicate_comm (the ranks holding the same
     * block in the other groups). Each unit is gathered and
     * reduce-scattered within shard_comm, then each rank's reduced block
     * is all-reduced across replicate_comm. Both NULL: shard over comm.
     * size(shard_comm) * size(replicate_comm) must be comm's size
     * (replicate_comm NULL only when shard_comm is the whole world); the
     * groups must partition the world this way and outlive the wrapper.
     * The ZeRO-3 optimizer then shards within shard_comm. */
    phx_comm *shard_comm;
    phx_comm *replicate_comm;
} phx_fsdp_opts;
#define PHX_FSDP_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_fsdp_opts) \
    }

/* Bytes of full parameters (f32) held now and at most since construction
 * or the last phx_fsdp_reset_peak, and the work done. */
typedef struct phx_fsdp_stats {
    size_t struct_size; /* sizeof (phx_fsdp_stats): PHX_FSDP_STATS_INIT sets it */
    size_t units;
    uint64_t gathered_bytes; /* full parameter buffers allocated now */
    uint64_t peak_gathered_bytes;
    uint64_t grad_bytes; /* full gradient buffers allocated now */
    uint64_t peak_grad_bytes;
    uint64_t largest_unit_bytes; /* the largest unit's full (padded) parameters */
    uint64_t shard_bytes; /* this rank's persistent shard: values + gradients */
    uint64_t gathers, reduce_scatters, prefetches;
    uint64_t unsynced_backwards; /* appended in ABI 1.5: backwards run under no_sync */
} phx_fsdp_stats;
#define PHX_FSDP_STATS_INIT \
    { \
        .struct_size = sizeof(phx_fsdp_stats) \
    }

/* Wraps model (FSDP(model)): returns a module whose forward and backward
 * run the model's with its units gathered, and whose backward
 * reduce-scatters each unit's gradients (averaged over the ranks, as DDP)
 * into the rank's shard of them. The wrapper holds a reference to model
 * and lists its parameters and buffers. Collective: every rank calls it
 * with the same model layout and the same units (checked: PHX_EDESYNC
 * naming the first unit that differs). Rank 0's parameters and buffers
 * are broadcast first, as phx_ddp_new does; buffers are not sharded and
 * are broadcast from rank 0 again at the end of each backward.
 * From here on the parameters' values and gradients hold memory only
 * while their unit is gathered: reading one outside the wrapper's
 * forward and backward is valid only between phx_fsdp_gather_full and
 * phx_fsdp_release_full (phx_module_zero_grad skips resharded
 * gradients). Step the shards with phx_zero_optimizer_new(fsdp, ...)
 * (stage 3, phalanx/zero.h). All parameters must be f32 on one device;
 * the model must not change afterwards. Freeing the wrapper leaves the
 * model's parameters with their own memory again, holding the full
 * values when the model was gathered (phx_fsdp_gather_full) and zeros
 * otherwise. comm NULL or of size 1: a world of one. NULL with
 * phx_last_error on error. */
phx_module *phx_fsdp_new(phx_module *model, phx_comm *comm, const phx_fsdp_opts *opts);
/* The wrapped model, or NULL with PHX_EINVAL when fsdp is not an FSDP module. */
phx_module *phx_fsdp_model(phx_module *fsdp);
/* Units: 0 .. n-1 in the order they were found (nested units before the
 * units containing them), the root last. */
size_t phx_fsdp_num_units(phx_module *fsdp);
/* Dotted path of unit i ("" for the root; owned by fsdp), its parameter
 * elements in *numel (may be NULL); NULL for a bad i. */
const char *phx_fsdp_unit_path(phx_module *fsdp, size_t i, int64_t *numel);
/* FSDP's summon_full_params: gathers every unit (collective) so the
 * parameters can be read or saved (phx_checkpoint_save) until
 * phx_fsdp_release_full. Values written meanwhile are lost at the
 * release (the shards are the master copy). A forward or backward
 * meanwhile is refused (PHX_ESTATE). */
phx_status phx_fsdp_gather_full(phx_module *fsdp);
/* Frees what phx_fsdp_gather_full gathered (local). */
phx_status phx_fsdp_release_full(phx_module *fsdp);
/* FSDP's no_sync (gradient accumulation without communication; ABI
 * 1.5): while set, each backward keeps every unit's full gradients and
 * adds into them, reduce-scattering nothing (no non-finite check, no
 * buffer broadcast either); the first backward after it is cleared adds
 * its gradients to the kept ones and reduce-scatters the sum, so the
 * shards get the same average as micro-batches reduced one by one. It
 * costs the full gradients of every unit per rank meanwhile (the
 * parameters are still gathered for each forward and backward). A
 * ZeRO-3 step while kept gradients are not yet reduced is refused
 * (PHX_ESTATE): end each accumulation with a backward outside no_sync,
 * as with DDP. Refused during a backward. Local: every rank sets it
 * alike. */
phx_status phx_fsdp_set_no_sync(phx_module *fsdp, bool no_sync);
phx_status phx_fsdp_get_stats(phx_module *fsdp, phx_fsdp_stats *out);
/* Sets the peaks to the current values. */
phx_status phx_fsdp_reset_peak(phx_module *fsdp);

#ifdef __cplusplus
}
#endif
#endif
