/* DistributedDataParallel with uneven inputs: PyTorch's model.join().
 *
 * Between phx_ddp_join_begin and phx_ddp_join_end every step of a rank
 * that still trains starts (in the wrapper's forward) with a two-element
 * all-reduce: [1, 1 if its backward all-reduces this step]. A rank out of
 * data calls phx_ddp_join_end, which repeats the same all-reduce with
 * [0, 0] and, when some rank's step synchronises, shadows its backward: an
 * all-reduce of zeros for each bucket, in bucket order. When the first
 * count is 0 every rank has joined; the ranks that joined last (their
 * first count was already 0) hold the model trained on every batch, and
 * the highest of them broadcasts its parameters to the others (PyTorch's
 * authoritative rank). Gradients are divided by the initial world size, or
 * by the ranks whose step synchronises (divide_by_initial_world_size
 * false). */
#include "config.h"
#include <string.h>
#include "src/ddp/ddp-impl.h"
#include "phalanx/ddp.h"

static px_ddp *join_ddp(phx_module *m, const char *who)
{
    if (!m || strcmp(phx_module_type(m), "DistributedDataParallel") != 0) {
        phx_error(PHX_EINVAL, "%s: expected a DistributedDataParallel module, got %s", who,
                  m ? phx_module_type(m) : "NULL");
        return NULL;
    }
    return phx_module_ctx(m);
}

/* The two-element count: this rank's [training, syncing] in, the sums out. */
static phx_status count(px_ddp *d, float training, float syncing, int *n_training, int *n_syncing)
{
    float v[2] = {training, syncing};
    phx_status st = phx_tensor_from_host(d->join_flag, v);
    if (st == PHX_OK) st = phx_comm_allreduce(d->comm, d->join_flag, PHX_SUM, NULL);
    if (st == PHX_OK) st = phx_tensor_to_host(d->join_flag, v);
    *n_training = (int)(v[0] + 0.5f);
    *n_syncing = (int)(v[1] + 0.5f);
    return st;
}

phx_status phx_ddp_join_begin(phx_module *ddp, bool divide_by_initial_world_size)
{
    px_ddp *d = join_ddp(ddp, "phx_ddp_join_begin");
    if (!d) return PHX_EINVAL;
    if (d->join)
        return phx_error(PHX_ESTATE, "phx_ddp_join_begin: already inside a join (call phx_ddp_join_end first)");
    if (d->zero2)
        return phx_error(PHX_EUNSUPPORTED,
                         "phx_ddp_join_begin: the wrapper reduce-scatters for a ZeRO-2 optimizer; joins "
                         "need all-reduce");
    if (!d->join_flag) {
        phx_device dev = d->n_buckets ? phx_tensor_device(d->buckets[0].flat) : phx_cpu();
        if (!(d->join_flag = phx_tensor_zeros(PHX_F32, 1, (const int64_t[]){2}, dev))) return PHX_ENOMEM;
    }
    d->join = true;
    d->join_initial = divide_by_initial_world_size;
    d->join_syncing = d->world;
    return PHX_OK;
}

phx_status px_ddp_join_step(px_ddp *d)
{
    int training;
    phx_status st = count(d, 1.0f, d->no_sync ? 0.0f : 1.0f, &training, &d->join_syncing);
    if (st != PHX_OK)
        return phx_error(st,
                         "DistributedDataParallel (join): rank %d: counting the ranks still training at "
                         "step %llu failed: %s",
                         d->rank, (unsigned long long)d->stats.backwards, phx_last_error());
    return PHX_OK;
}

/* Zeros all-reduced for each bucket, as a syncing rank's backward issues
 * them (the result is not used); through the communication hook when one
 * is registered, as PyTorch's join runs the hook on zero buckets. */
static phx_status shadow_backward(px_ddp *d)
{
    phx_status st = d->rebuild_due ? px_ddp_rebuild(d) : PHX_OK;
    if (st == PHX_OK) d->rebuild_due = false;
    for (size_t b = 0; b < d->n_buckets && st == PHX_OK; b++) {
        if ((st = phx_tensor_fill(d->buckets[b].flat, 0.0)) == PHX_OK)
            st = d->hook ? px_ddp_hook_reduce(d, b, d->world)
                         : phx_comm_allreduce(d->comm, d->buckets[b].flat, PHX_SUM, NULL);
    }
    return st;
}

/* The highest rank among those that joined last (an all-reduce MAX over
 * rank or -1) broadcasts its parameters to the others. */
static phx_status sync_final_model(px_ddp *d, bool last)
{
    float v[2] = {0.0f, last ? (float)d->rank : -1.0f};
    phx_status st = phx_tensor_from_host(d->join_flag, v);
    if (st == PHX_OK) st = phx_comm_allreduce(d->comm, d->join_flag, PHX_MAX, NULL);
    if (st == PHX_OK) st = phx_tensor_to_host(d->join_flag, v);
    int root = (int)v[1];
    for (size_t i = 0; i < d->n_params && st == PHX_OK; i++)
        st = phx_comm_broadcast(d->comm, phx_param_value(d->params[i]), root, NULL);
    /* Inside the join no step synchronised the buffers: the same rank's go. */
    if (st == PHX_OK && !d->opts.no_broadcast_buffers) st = px_ddp_broadcast_buffers(d, root);
    /* The shadowed all-reduces left other ranks' sums in the buckets. */
    for (size_t b = 0; b < d->n_buckets && st == PHX_OK; b++) st = phx_tensor_fill(d->buckets[b].flat, 0.0);
    return st;
}

phx_status phx_ddp_join_end(phx_module *ddp)
{
    px_ddp *d = join_ddp(ddp, "phx_ddp_join_end");
    if (!d) return PHX_EINVAL;
    if (!d->join) return phx_error(PHX_ESTATE, "phx_ddp_join_end: not inside a join (call phx_ddp_join_begin first)");
    d->join = false;
    phx_status st = PHX_OK;
    bool last = true;
    uint64_t shadowed = 0;
    for (;;) {
        int training, syncing;
        if ((st = count(d, 0.0f, 0.0f, &training, &syncing)) != PHX_OK) break;
        if (training == 0) break;
        last = false;
        if (syncing > 0 && (st = shadow_backward(d)) == PHX_OK) shadowed++;
        if (st != PHX_OK) break;
    }
    if (st == PHX_OK) st = sync_final_model(d, last);
    if (st != PHX_OK)
        return phx_error(st, "phx_ddp_join_end: rank %d (after shadowing %llu steps of the other ranks): %s", d->rank,
                         (unsigned long long)shadowed, phx_last_error());
    return PHX_OK;
}
