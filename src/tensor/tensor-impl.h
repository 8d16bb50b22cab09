/* Tensor and storage layouts (internal). */
#ifndef PHX_CORE_TENSOR_IMPL_H
#define PHX_CORE_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include "phalanx/tensor.h"
#include "phalanx/module.h"

/* Reference-counted allocation on one device. */
typedef struct px_storage {
    atomic_long refs;
    atomic_ulong version; /* bumped by every in-place write (autograd's saved-tensor check) */
    void *data; /* device memory */
    size_t bytes;
    phx_device device;
    bool pinned; /* CPU memory from pinned_by's host_alloc */
    phx_device pinned_by;
    bool cached; /* a CPU operation result's: back to the cache at the end */
    struct px_storage *cache_next;
} px_storage;

/* A handle: a contiguous row-major view of a storage. */
struct phx_tensor {
    atomic_long refs; /* handle references (phx_tensor_retain) */
    px_storage *storage;
    int64_t offset; /* in elements of dtype */
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
    int64_t numel;
    phx_dtype dtype;
    /* Autograd (src/autograd): a leaf that requires a gradient, or the
     * node that made this tensor (holding a reference to it). */
    bool requires_grad;
    struct px_node *grad_fn;
    phx_tensor *grad; /* a leaf's accumulated gradient (not a parameter's) */
    phx_param *param; /* the parameter whose value this is, or NULL */
    bool capture; /* a forward-only module's input, kept for its dx */
    const char *nondiff; /* made, from inputs that require a gradient, by this non-differentiable op */
    unsigned long long visit; /* the backward sweep that last reached this leaf */
    long pending; /* that sweep's uses of this leaf not yet run */
    phx_tensor *next_free; /* the handle pool's list */
    /* Freed while it may still be in the caller's hands (a module's
     * earlier output, src/modules/module-keep.c): the module's type; the
     * handle waits at the pool's end and operations on it are refused. */
    char freed_by[24];
};

static inline void *px_tensor_ptr(const phx_tensor *t)
{
    return (char *)t->storage->data + (size_t)t->offset * phx_dtype_size(t->dtype);
}

/* A CPU tensor in page-locked memory from accel's host_alloc (malloc'd
 * memory on a device without it), which accel's copy_h2d_async can read
 * while the host goes on. NULL with phx_last_error on failure. */
phx_tensor *px_tensor_pinned(phx_dtype dt, int ndim, const int64_t *shape, phx_device accel);

/* phx_tensor_free, but a last reference leaves the handle marked as freed
 * by a call of the module type by, at the end of the handle pool: an
 * operation given it fails (px_tensor_live) until the pool reissues it. */
void px_tensor_free_marked(phx_tensor *t, const char *by);
/* PHX_OK, or an error naming fn and arg when t is a handle that
 * px_tensor_free_marked freed. */
phx_status px_tensor_live(const char *fn, const char *arg, const phx_tensor *t);

/* phx_tensor_view without its autograd check: a view of any base, with
 * no gradient recorded, for the library's own aliases of tensors that
 * require one (a module output's alias, a saved output, the storage
 * carved into parameters and buckets). Messages name phx_tensor_view. */
phx_tensor *px_tensor_view(const phx_tensor *base, int64_t offset, int ndim, const int64_t *shape);

/* A new tensor whose storage comes from (and returns to) the cache of
 * operation results on the CPU (src/tensor/storage-cache.c); as
 * phx_tensor_new elsewhere. NULL with phx_last_error naming fn. */
phx_tensor *px_tensor_cached(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev);
px_storage *px_storage_cache_take(size_t bytes);
/* Keeps s for a later take; false when the cache is full (release it). */
bool px_storage_cache_put(px_storage *s);
size_t px_storage_cache_bytes(void);
/* Empties the cache: its storages, linked through cache_next. */
px_storage *px_storage_cache_drain(void);

/* "(2, 3)", "(4,)", "()": phx_tensor_shape_str's format for a bare shape. */
const char *px_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);
#endif
