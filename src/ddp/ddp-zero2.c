/* DDP's side of ZeRO-2 (src/zero): buckets padded to a multiple of the
 * world size and reduce-scattered, each rank keeping the reduced block of
 * every bucket that it owns; the other blocks are cleared so no stale,
 * unreduced gradient is ever read as if it were the average. */
#include <math.h>
#include <string.h>
#include "src/ddp/ddp-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/tensor/device-impl.h"
#include "src/base/util.h"

int64_t px_ddp_bucket_len(const px_ddp *d, int64_t numel)
{
    if (!d->zero2) return numel > 0 ? numel : 1;
    int64_t w = d->zero_world, block = (numel + w - 1) / w;
    return (block > 0 ? block : 1) * w;
}

void px_ddp_zero2_bucket_free(px_bucket *k)
{
    phx_tensor_free(k->out);
    phx_tensor_free(k->mine);
    phx_tensor_free(k->before);
    phx_tensor_free(k->after);
    phx_tensor_free(k->pad);
    k->out = k->mine = k->before = k->after = k->pad = NULL;
    k->block = 0;
}

phx_status px_ddp_zero2_bucket(px_ddp *d, px_bucket *k)
{
    if (!d->zero2) return PHX_OK;
    int64_t len = phx_tensor_numel(k->flat), block = len / d->zero_world, r = d->zero_rank;
    int64_t n_before = r * block, n_after = len - (r + 1) * block, n_pad = len - k->numel;
    k->block = block;
    k->out = phx_tensor_zeros(PHX_F32, 1, &block, phx_tensor_device(k->flat));
    k->mine = px_tensor_view(k->flat, n_before, 1, &block);
    if (n_before > 0) k->before = px_tensor_view(k->flat, 0, 1, &n_before);
    if (n_after > 0) k->after = px_tensor_view(k->flat, (r + 1) * block, 1, &n_after);
    if (n_pad > 0) k->pad = px_tensor_view(k->flat, k->numel, 1, &n_pad);
    if (!k->out || !k->mine || (n_before > 0 && !k->before) || (n_after > 0 && !k->after) || (n_pad > 0 && !k->pad)) {
        px_ddp_zero2_bucket_free(k);
        return PHX_ENOMEM;
    }
    return PHX_OK;
}

/* The current buckets again, as an assignment (reinstalled padded). */
static phx_status reinstall(px_ddp *d)
{
    px_assignment a = {0};
    a.n_buckets = d->n_buckets;
    a.order = px_malloc((d->n_params ? d->n_params : 1) * sizeof *a.order);
    a.start = px_malloc((d->n_buckets + 1) * sizeof *a.start);
    if (!a.order || !a.start) {
        px_assignment_free(&a);
        return PHX_ENOMEM;
    }
    memcpy(a.order, d->bucket_members, d->n_params * sizeof *a.order);
    size_t used = 0;
    for (size_t b = 0; b < d->n_buckets; b++) {
        a.start[b] = used;
        used += d->buckets[b].n_members;
    }
    a.start[d->n_buckets] = used;
    phx_status st = px_ddp_install(d, &a);
    px_assignment_free(&a);
    return st;
}

phx_status px_ddp_zero2_attach(px_ddp *d, phx_comm *shard, phx_comm *replicate)
{
    if (d->zero2) return phx_error(PHX_ESTATE, "ZeRO-2: the DDP wrapper already reduce-scatters for an optimizer");
    if (d->n_ready > 0 || d->join)
        return phx_error(PHX_ESTATE, "ZeRO-2: the DDP wrapper is %s; attach between steps, outside a join",
                         d->join ? "inside a join" : "in the middle of a backward");
    if (d->broken != PHX_OK) return phx_error(d->broken, "ZeRO-2: the DDP wrapper is unusable");
    if (d->hook)
        return phx_error(PHX_ESTATE,
                         "ZeRO-2: the DDP wrapper has communication hook '%s', which replaces the all-reduce "
                         "ZeRO-2 would turn into a reduce-scatter; use ZeRO-1 (stage 1) with a hook",
                         px_ddp_hook_name(d));
    if (!d->zero_flag) {
        phx_device dev = d->n_buckets ? phx_tensor_device(d->buckets[0].flat) : phx_cpu();
        if (!(d->zero_flag = phx_tensor_zeros(PHX_F32, 0, NULL, dev))) return PHX_ENOMEM;
    }
    d->zero_comm = shard ? shard : d->comm;
    d->zero_rcomm = replicate;
    d->zero_rank = phx_comm_rank(d->zero_comm);
    d->zero_world = phx_comm_size(d->zero_comm);
    d->zero2 = true;
    phx_status st = reinstall(d);
    if (st != PHX_OK) {
        d->zero2 = false;
        return st;
    }
    /* The partition is the buckets: they must not move any more. */
    d->opts.no_rebuild = true;
    d->rebuild_due = false;
    return PHX_OK;
}

void px_ddp_zero2_detach(px_ddp *d)
{
    if (!d->zero2) return;
    d->zero2 = false;
    for (size_t b = 0; b < d->n_buckets; b++) px_ddp_zero2_bucket_free(&d->buckets[b]);
}

phx_status px_ddp_zero2_settle(px_ddp *d)
{
    if (d->n_buckets == 0) return PHX_OK;
    phx_device dev = phx_tensor_device(d->zero_flag);
    const phx_kernels_v1 *kern = px_device_kernels(dev);
    if (!kern) return PHX_ENOTFOUND;
    if (!kern->unscale_check)
        return phx_error(PHX_EUNSUPPORTED, "ZeRO-2: the gradients' device has no unscale_check kernel");
    phx_status st = PHX_OK;
    /* Hybrid: each block is reduced within its group; add the groups'
     * sums (each already divided by the whole world). Every rank issues
     * every all-reduce, whatever happened locally. */
    if (d->zero_rcomm) {
        for (size_t b = 0; b < d->n_buckets; b++) {
            phx_status rs = phx_comm_allreduce(d->zero_rcomm, d->buckets[b].out, PHX_SUM, NULL);
            if (rs != PHX_OK && st == PHX_OK)
                st = phx_error(rs, "ZeRO-2: all-reducing bucket %zu's block across the replicas: %s", b,
                               phx_last_error());
        }
    }
    if (st == PHX_OK) st = phx_tensor_fill(d->zero_flag, 0.0);
    /* Scaling by 1 leaves the block as it is and raises the flag on inf/NaN. */
    for (size_t b = 0; b < d->n_buckets && st == PHX_OK; b++)
        st = kern->unscale_check(dev.index, d->buckets[b].block, px_tensor_ptr(d->buckets[b].out), 1.0f,
                                 px_tensor_ptr(d->zero_flag));
    /* Every rank reaches this all-reduce, whatever happened locally. */
    phx_status cs = phx_comm_allreduce(d->comm, d->zero_flag, PHX_MAX, NULL);
    if (st == PHX_OK) st = cs;
    double found = 0;
    if (st == PHX_OK) st = phx_tensor_get(d->zero_flag, 0, &found);
    double rest = found != 0 ? NAN : 0.0;
    for (size_t b = 0; b < d->n_buckets && st == PHX_OK; b++) {
        px_bucket *k = &d->buckets[b];
        st = phx_tensor_copy(k->mine, k->out);
        if (st == PHX_OK && k->before) st = phx_tensor_fill(k->before, rest);
        if (st == PHX_OK && k->after) st = phx_tensor_fill(k->after, rest);
        if (st == PHX_OK && k->pad) st = phx_tensor_fill(k->pad, 0.0);
    }
    if (st != PHX_OK) return phx_error(st, "ZeRO-2: settling the reduce-scattered gradients: %s", phx_last_error());
    return PHX_OK;
}
