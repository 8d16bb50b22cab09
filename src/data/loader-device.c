/* The loader's copies to an accelerator (loader-device.h). Every buffer,
 * the stream and the events are made by px_ldev_init: a step allocates
 * nothing. */
#include "config.h"
#include <string.h>
#include "src/data/loader-device.h"
#include "src/tensor/tensor-impl.h"

phx_status px_ldev_init(px_ldev *d, phx_device dev, const phx_field *fields, int nf, int64_t batch, int64_t last)
{
    memset(d, 0, sizeof *d);
    d->dev = dev;
    d->nf = nf;
    if (!(d->t = phx_device_table(dev))) return PHX_EDEVICE; /* its message says why */
    for (int b = 0; b < 2; b++)
        for (int f = 0; f < nf; f++) {
            int64_t shape[PHX_MAX_DIMS] = {batch};
            for (int k = 0; k < fields[f].ndim; k++) shape[k + 1] = fields[f].shape[k];
            if (!(d->full[b][f] = phx_tensor_new(fields[f].dtype, fields[f].ndim + 1, shape, dev)))
                return PHX_ENOMEM; /* phx_tensor_new's message says which */
            shape[0] = last;
            if (last && !(d->part[b][f] = px_tensor_view(d->full[b][f], 0, fields[f].ndim + 1, shape)))
                return PHX_ENOMEM;
        }
    phx_status st = d->t->stream_create(dev.index, &d->stream);
    for (int b = 0; b < 2 && st == PHX_OK; b++) st = d->t->event_create(dev.index, &d->copied[b]);
    if (st == PHX_OK) st = d->t->event_create(dev.index, &d->freed);
    return st;
}

void px_ldev_free(px_ldev *d)
{
    if (!d->t) return;
    for (int b = 0; b < 2; b++) {
        if (d->copied[b]) d->t->event_synchronize(d->copied[b]);
        if (d->copied[b]) d->t->event_destroy(d->copied[b]);
        for (int f = 0; f < d->nf; f++) {
            phx_tensor_free(d->part[b][f]);
            phx_tensor_free(d->full[b][f]);
        }
    }
    if (d->freed) d->t->event_destroy(d->freed);
    if (d->stream) d->t->stream_destroy(d->dev.index, d->stream);
    memset(d, 0, sizeof *d);
}

phx_status px_ldev_copy(px_ldev *d, int b, phx_tensor *const *host, int64_t rows)
{
    void *compute = d->t->current_stream(d->dev.index);
    phx_status st = d->t->event_record(d->freed, compute);
    if (st == PHX_OK) st = d->t->stream_wait_event(d->stream, d->freed);
    for (int f = 0; f < d->nf && st == PHX_OK; f++) {
        int64_t per_row = phx_tensor_numel(host[f]) / phx_tensor_dim(host[f], 0);
        size_t bytes = (size_t)(rows * per_row) * phx_dtype_size(phx_tensor_dtype(host[f]));
        st = d->t->copy_h2d_async(d->dev.index, px_tensor_ptr(d->full[b][f]), px_tensor_ptr(host[f]), bytes, d->stream);
    }
    if (st == PHX_OK) st = d->t->event_record(d->copied[b], d->stream);
    return st;
}

phx_status px_ldev_use(px_ldev *d, int b)
{
    return d->t->stream_wait_event(d->t->current_stream(d->dev.index), d->copied[b]);
}

phx_status px_ldev_settle(px_ldev *d, int b)
{
    return d->t->event_synchronize(d->copied[b]);
}
