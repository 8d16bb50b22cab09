/* ZeRO internals (px_ prefix, not exported): the partition, the shard and
 * the all-gather plans shared by src/zero/zero.c (partition, shard
 * module, gather, the optimizer) and src/zero/zero-state.c (consolidated
 * state, clipping). */
#ifndef PHX_ZERO_IMPL_H
#define PHX_ZERO_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/zero.h"
#include "src/ddp/ddp-impl.h"
#include "src/fsdp/fsdp-impl.h"

#define PX_ZERO_MAGIC 0x5a45524fu /* "ZERO" */
#define PX_ZERO_REGION_BYTES ((size_t)25 << 20)
/* The all-gather's receive buffer (world chunks; the send buffer is one):
 * small beside the state a shard saves. */
#define PX_ZERO_GATHER_BYTES ((size_t)4 << 20)

/* dst <- src, both views made at construction. */
typedef struct px_zseg {
    phx_tensor *dst, *src;
} px_zseg;

/* Elements [off, off + len) of parameter param. */
typedef struct px_zpiece {
    size_t param;
    int64_t off, len;
} px_zpiece;

/* Elements [off, off + len) of every rank's block of a region: one
 * all-gather through the shared buffers. */
typedef struct px_zchunk {
    int64_t off, len;
    phx_tensor *send, *recv; /* (len), (world * len): views of the shared buffers */
    px_zseg *pack, *unpack; /* this rank's elements into send; the others' out of recv */
    size_t n_pack, n_unpack;
} px_zchunk;

typedef struct px_zregion {
    px_zpiece *pieces; /* the region's flat order */
    size_t n_pieces;
    int64_t numel, block;
    px_zchunk *chunks; /* the block in pieces of at most the gather buffer */
    size_t n_chunks;
} px_zregion;

/* One piece of this rank's shard. */
typedef struct px_zshard {
    px_zpiece piece;
    size_t region;
    int64_t at; /* where the piece starts in its region's flat order */
    phx_param *sp; /* the shard module's parameter */
} px_zshard;

typedef struct px_zero {
    unsigned magic;
    phx_module *model;
    phx_comm *comm;
    /* Hybrid: the replicate group (borrowed; NULL when not hybrid or not
     * given), and whether the world is larger than comm with no replicate
     * group to say which copy of a shard saves. */
    phx_comm *rcomm;
    bool replicas_unknown;
    int rank, world, stage;
    int64_t chunk; /* elements per rank and all-gather */
    phx_module *ddp_mod; /* ZeRO-2: the DDP wrapper (a reference) */
    px_ddp *ddp;
    px_fsdp *fsdp; /* stage 3: the FSDP wrapper's state; regions are its units */
    size_t n_params;
    phx_param **params;
    px_zregion *regions;
    size_t n_regions;
    phx_tensor *send_buf, *recv_buf;
    px_zshard *shard;
    size_t n_shard;
    phx_module *shard_mod;
    phx_optimizer *inner;
    /* consolidated state (phx_zero_consolidate) */
    bool consolidated;
    size_t n_kinds, n_full;
    char **full_names;
    phx_tensor **full; /* (n_params * n_kinds), NULL on ranks that do not hold it */
} px_zero;

static inline int64_t px_zero_block_lo(const px_zregion *g, int r)
{
    int64_t lo = (int64_t)r * g->block;
    return lo < g->numel ? lo : g->numel;
}
static inline int64_t px_zero_block_hi(const px_zregion *g, int r)
{
    return px_zero_block_lo(g, r + 1);
}

/* The ZeRO optimizer behind o, or NULL with PHX_EINVAL naming who. */
px_zero *px_zero_of(phx_optimizer *o, const char *who);
/* Calls fn for every piece of region `region` inside [lo, hi) of its flat
 * order: the parameter, the element range in it and where it starts in
 * the region. Stops at the first failure. */
typedef phx_status (*px_zero_piece_fn)(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg);
phx_status px_zero_for_range(px_zero *z, size_t region, int64_t lo, int64_t hi, px_zero_piece_fn fn, void *arg);
/* The flat range of rank q's part of chunk c of region g. */
void px_zero_chunk_range(const px_zregion *g, const px_zchunk *c, int q, int64_t *lo, int64_t *hi);
/* The chunks, the shared gather buffers and the copy plans. */
phx_status px_zero_make_plans(px_zero *z);
/* PHX_ESTATE when the model changed since construction (before any
 * collective). */
phx_status px_zero_check_model(px_zero *z);
/* Points each piece's gradient view at its parameter's current gradient. */
phx_status px_zero_refresh_grads(px_zero *z);
/* Releases the consolidated state (zero-state.c). */
void px_zero_drop_full(px_zero *z);
#endif
