/* A mini-batch loader over in-memory CPU tensors: rows of x and y in the
 * order of an index list, reshuffled each epoch (Fisher-Yates driven by
 * Philox(seed + epoch)). Batches are copied into two preallocated pairs of
 * tensors (full batch and last partial batch), so phx_loader_next never
 * allocates. */
#include <string.h>
#include "core/tensor/tensor-impl.h"
#include "core/base/util.h"
#include "phalanx/data.h"
#include "phalanx/rng.h"

struct phx_loader {
    phx_tensor *x, *y;
    size_t xrow, yrow;          /* bytes per row */
    int64_t batch;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t epoch;
    size_t n;                   /* rows per epoch */
    int64_t *base;              /* (n) the given order */
    int64_t *order;             /* (n) this epoch's order */
    size_t pos;
    bool started;
    phx_tensor *xb, *yb;        /* (batch, ...) */
    phx_tensor *xl, *yl;        /* (n % batch, ...) or NULL */
};

static phx_tensor *rows_like(const phx_tensor *t, int64_t rows)
{
    int64_t shape[PHX_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = rows;
    return phx_tensor_new(t->dtype, t->ndim, shape, phx_cpu());
}

void phx_loader_free(phx_loader *l)
{
    if (!l)
        return;
    phx_tensor_free(l->x);
    phx_tensor_free(l->y);
    phx_tensor_free(l->xb);
    phx_tensor_free(l->yb);
    phx_tensor_free(l->xl);
    phx_tensor_free(l->yl);
    px_free(l->base);
    px_free(l->order);
    px_free(l);
}

phx_loader *phx_loader_new(phx_tensor *x, phx_tensor *y, int64_t batch, bool shuffle, uint64_t seed, bool drop_last,
                           const int64_t *indices, size_t n_indices)
{
    char a[64], b[64];
    if (!x || !y || x->ndim < 1 || y->ndim < 1 || x->shape[0] != y->shape[0]) {
        phx_error(PHX_EINVAL, "phx_loader_new: x %s and y %s need the same number of rows",
                  x ? phx_tensor_shape_str(x, a, sizeof a) : "NULL", y ? phx_tensor_shape_str(y, b, sizeof b) : "NULL");
        return NULL;
    }
    if (x->storage->device.kind != PHX_DEVICE_CPU || y->storage->device.kind != PHX_DEVICE_CPU) {
        phx_error(PHX_EUNSUPPORTED, "phx_loader_new: x and y must be CPU tensors (copy batches to the device)");
        return NULL;
    }
    if (batch < 1) {
        phx_error(PHX_EINVAL, "phx_loader_new: batch %lld, expected >= 1", (long long)batch);
        return NULL;
    }
    int64_t rows = x->shape[0];
    for (size_t i = 0; indices && i < n_indices; i++)
        if (indices[i] < 0 || indices[i] >= rows) {
            phx_error(PHX_EINVAL, "phx_loader_new: indices[%zu] = %lld is outside [0, %lld)", i, (long long)indices[i],
                      (long long)rows);
            return NULL;
        }
    phx_loader *l = px_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->x = phx_tensor_retain(x);
    l->y = phx_tensor_retain(y);
    l->xrow = rows ? phx_tensor_nbytes(x) / (size_t)rows : 0;
    l->yrow = rows ? phx_tensor_nbytes(y) / (size_t)rows : 0;
    l->batch = batch;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->seed = seed;
    l->n = indices ? n_indices : (size_t)rows;
    l->base = px_malloc((l->n ? l->n : 1) * sizeof *l->base);
    l->order = px_malloc((l->n ? l->n : 1) * sizeof *l->order);
    int64_t last = (int64_t)(l->n % (size_t)batch);
    l->xb = rows_like(x, batch);
    l->yb = rows_like(y, batch);
    if (last && !drop_last) {
        l->xl = rows_like(x, last);
        l->yl = rows_like(y, last);
    }
    if (!l->base || !l->order || !l->xb || !l->yb || (last && !drop_last && (!l->xl || !l->yl))) {
        phx_loader_free(l);
        return NULL;
    }
    for (size_t i = 0; i < l->n; i++)
        l->base[i] = indices ? indices[i] : (int64_t)i;
    phx_loader_set_epoch(l, 0);
    return l;
}

void phx_loader_set_epoch(phx_loader *l, int64_t epoch)
{
    if (!l)
        return;
    l->epoch = epoch;
    l->pos = 0;
    l->started = true;
    memcpy(l->order, l->base, l->n * sizeof *l->order);
    if (!l->shuffle)
        return;
    uint64_t key = l->seed + (uint64_t)epoch;
    for (size_t i = l->n; i > 1; i--) {
        uint64_t r = (uint64_t)phx_philox_u32(key, 2 * i) << 32 | phx_philox_u32(key, 2 * i + 1);
        size_t j = (size_t)(r % i);
        int64_t t = l->order[i - 1];
        l->order[i - 1] = l->order[j];
        l->order[j] = t;
    }
}

size_t phx_loader_num_batches(const phx_loader *l)
{
    if (!l)
        return 0;
    size_t b = (size_t)l->batch;
    return l->drop_last ? l->n / b : (l->n + b - 1) / b;
}

int phx_loader_next(phx_loader *l, phx_tensor **xb, phx_tensor **yb)
{
    if (!l || !xb || !yb)
        return phx_error(PHX_EINVAL, "phx_loader_next: NULL argument");
    if (!l->started) /* the previous epoch ended: begin the next one */
        phx_loader_set_epoch(l, l->epoch + 1);
    size_t left = l->n - l->pos, b = (size_t)l->batch;
    if (left == 0 || (left < b && l->drop_last)) {
        l->started = false;
        return 0;
    }
    size_t take = left < b ? left : b;
    phx_tensor *tx = take == b ? l->xb : l->xl, *ty = take == b ? l->yb : l->yl;
    char *dx = px_tensor_ptr(tx), *dy = px_tensor_ptr(ty);
    const char *sx = px_tensor_ptr(l->x), *sy = px_tensor_ptr(l->y);
    for (size_t i = 0; i < take; i++) {
        int64_t r = l->order[l->pos + i];
        memcpy(dx + i * l->xrow, sx + (size_t)r * l->xrow, l->xrow);
        memcpy(dy + i * l->yrow, sy + (size_t)r * l->yrow, l->yrow);
    }
    l->pos += take;
    *xb = tx;
    *yb = ty;
    return 1;
}
