/* DDP gradient buckets: PyTorch's assignment rule, the flat allocations
 * the gradients become views of, and the one rebuild in arrival order. */
#include <string.h>
#include "src/ddp/ddp-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

void px_assignment_free(px_assignment *a)
{
    px_free(a->order);
    px_free(a->start);
    a->order = a->start = NULL;
    a->n_buckets = 0;
}

/* An open bucket of one device while assigning. */
typedef struct open_bucket {
    phx_device dev;
    size_t *members; /* (n_params) this device's open bucket */
    size_t n;
    size_t bytes;
    size_t closed; /* buckets of this device closed so far: picks the cap */
} open_bucket;

phx_status px_ddp_assign(px_ddp *d, const size_t *order, size_t first_cap, size_t cap, px_assignment *out)
{
    size_t n = d->n_params;
    memset(out, 0, sizeof *out);
    out->order = px_malloc((n ? n : 1) * sizeof *out->order);
    out->start = px_malloc((n + 2) * sizeof *out->start);
    open_bucket *open = px_calloc(n ? n : 1, sizeof *open); /* at most one per device */
    phx_status st = out->order && out->start && open ? PHX_OK : PHX_ENOMEM;
    size_t n_open = 0, used = 0;
    for (size_t k = 0; k < n && st == PHX_OK; k++) {
        size_t i = order[k];
        phx_tensor *g = phx_param_grad(d->params[i]);
        phx_device dev = phx_tensor_device(g);
        open_bucket *b = NULL;
        for (size_t j = 0; j < n_open; j++)
            if (phx_device_equal(open[j].dev, dev)) b = &open[j];
        if (!b) {
            b = &open[n_open++];
            b->dev = dev;
            b->members = px_malloc(n * sizeof *b->members);
            if (!b->members) {
                st = PHX_ENOMEM;
                break;
            }
        }
        b->members[b->n++] = i;
        b->bytes += phx_tensor_nbytes(g);
        size_t limit = b->closed == 0 ? first_cap : cap;
        if (b->bytes >= limit) {
            out->start[out->n_buckets++] = used;
            memcpy(out->order + used, b->members, b->n * sizeof *b->members);
            used += b->n;
            b->n = 0;
            b->bytes = 0;
            b->closed++;
        }
    }
    for (size_t j = 0; j < n_open && st == PHX_OK; j++) {
        if (open[j].n == 0) continue;
        out->start[out->n_buckets++] = used;
        memcpy(out->order + used, open[j].members, open[j].n * sizeof *open[j].members);
        used += open[j].n;
    }
    for (size_t j = 0; j < n_open; j++) px_free(open[j].members);
    px_free(open);
    if (st != PHX_OK) {
        px_assignment_free(out);
        return st;
    }
    out->start[out->n_buckets] = used;
    return PHX_OK;
}

void px_ddp_buckets_free(px_ddp *d)
{
    for (size_t b = 0; b < d->n_buckets; b++) {
        phx_work_free(d->buckets[b].work);
        px_ddp_zero2_bucket_free(&d->buckets[b]);
        phx_tensor_free(d->buckets[b].flat);
    }
    px_free(d->buckets);
    d->buckets = NULL;
    d->n_buckets = 0;
}

phx_status px_ddp_install(px_ddp *d, const px_assignment *a)
{
    px_bucket *nb = px_calloc(a->n_buckets ? a->n_buckets : 1, sizeof *nb);
    if (!nb) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    /* Allocate every bucket first: a failure here leaves the old ones in
     * place and the wrapper usable. */
    for (size_t b = 0; b < a->n_buckets && st == PHX_OK; b++) {
        px_bucket *k = &nb[b];
        k->members = d->bucket_members + a->start[b];
        k->n_members = a->start[b + 1] - a->start[b];
        for (size_t j = 0; j < k->n_members; j++)
            k->numel += phx_tensor_numel(phx_param_grad(d->params[a->order[a->start[b] + j]]));
        int64_t len = px_ddp_bucket_len(d, k->numel);
        phx_device dev = phx_tensor_device(phx_param_grad(d->params[a->order[a->start[b]]]));
        k->flat = phx_tensor_zeros(PHX_F32, 1, &len, dev);
        if (!k->flat)
            st = phx_error(PHX_ENOMEM, "DistributedDataParallel: cannot allocate bucket %zu (%lld floats): %s", b,
                           (long long)len, phx_last_error());
        else
            st = px_ddp_zero2_bucket(d, k);
    }
    /* Point each gradient into its bucket (phx_param_set_grad copies the
     * gradient accumulated so far). */
    bool moved = false;
    for (size_t b = 0; b < a->n_buckets && st == PHX_OK; b++) {
        px_bucket *k = &nb[b];
        int64_t off = 0;
        for (size_t j = 0; j < k->n_members && st == PHX_OK; j++) {
            size_t i = a->order[a->start[b] + j];
            phx_tensor *g = phx_param_grad(d->params[i]);
            int64_t numel = phx_tensor_numel(g); /* set_grad below releases g */
            phx_tensor *v = px_tensor_view(k->flat, off, phx_tensor_ndim(g), phx_tensor_shape(g));
            if (!v)
                st = PHX_ENOMEM;
            else if ((st = phx_param_set_grad(d->params[i], v)) == PHX_OK)
                moved = true;
            phx_tensor_free(v); /* the parameter holds its own reference */
            off += numel;
        }
    }
    if (st != PHX_OK) {
        /* A failed allocation leaves the old buckets in use. Gradients
         * already moved stay valid views of the new storage (their
         * reference keeps it alive), but they no longer match the old
         * buckets: then the wrapper refuses further work. */
        for (size_t b = 0; b < a->n_buckets; b++) {
            px_ddp_zero2_bucket_free(&nb[b]);
            phx_tensor_free(nb[b].flat);
        }
        px_free(nb);
        if (moved) d->broken = st;
        return st;
    }
    px_ddp_buckets_free(d);
    memcpy(d->bucket_members, a->order, d->n_params * sizeof *a->order);
    d->buckets = nb;
    d->n_buckets = a->n_buckets;
    for (size_t b = 0; b < a->n_buckets; b++) {
        for (size_t j = 0; j < nb[b].n_members; j++) d->bucket_of[nb[b].members[j]] = b;
        nb[b].pending = nb[b].n_members;
    }
    return PHX_OK;
}

phx_status px_ddp_rebuild(px_ddp *d)
{
    size_t n = d->n_params;
    d->rebuild_due = false;
    /* Rank 0's order for everyone: the same buckets on every rank. */
    int64_t len = (int64_t)(n ? n : 1);
    phx_tensor *host = phx_tensor_new(PHX_I64, 1, &len, phx_cpu());
    phx_tensor *dev = phx_tensor_new(PHX_I64, 1, &len, phx_comm_device(d->comm));
    if (!host || !dev) {
        phx_tensor_free(host);
        phx_tensor_free(dev);
        return PHX_ENOMEM;
    }
    int64_t *h = px_tensor_ptr(host);
    for (size_t k = 0; k < n; k++) h[k] = (int64_t)d->arrival[k];
    phx_status st = phx_tensor_copy(dev, host);
    if (st == PHX_OK) st = phx_comm_broadcast(d->comm, dev, 0, NULL);
    if (st == PHX_OK) st = phx_tensor_copy(host, dev);
    phx_tensor_free(dev);
    if (st != PHX_OK) {
        phx_tensor_free(host);
        return phx_error(st, "DistributedDataParallel: broadcasting the gradient arrival order: %s", phx_last_error());
    }
    /* Must be a permutation (it is, unless a rank is corrupt). */
    size_t *order = px_malloc((n ? n : 1) * sizeof *order);
    bool *seen = px_calloc(n ? n : 1, sizeof *seen);
    if (!order || !seen) {
        px_free(order);
        px_free(seen);
        phx_tensor_free(host);
        return PHX_ENOMEM;
    }
    for (size_t k = 0; k < n && st == PHX_OK; k++) {
        if (h[k] < 0 || (size_t)h[k] >= n || seen[h[k]])
            st = phx_error(PHX_EDESYNC,
                           "DistributedDataParallel: rank 0's gradient order has entry %lld at %zu, "
                           "not a permutation of %zu parameters",
                           (long long)h[k], k, n);
        else {
            seen[h[k]] = true;
            order[k] = (size_t)h[k];
        }
    }
    phx_tensor_free(host);
    px_free(seen);
    px_assignment a;
    if (st == PHX_OK) st = px_ddp_assign(d, order, d->opts.first_bucket_bytes, d->opts.bucket_bytes, &a);
    px_free(order);
    if (st != PHX_OK) return st;
    /* Unchanged assignment: keep the storage. */
    bool same = a.n_buckets == d->n_buckets && memcmp(a.order, d->bucket_members, n * sizeof *a.order) == 0;
    for (size_t b = 0; same && b < a.n_buckets; b++) same = a.start[b + 1] - a.start[b] == d->buckets[b].n_members;
    if (!same) st = px_ddp_install(d, &a);
    px_assignment_free(&a);
    if (st == PHX_OK) d->stats.rebuilds++;
    return st;
}
