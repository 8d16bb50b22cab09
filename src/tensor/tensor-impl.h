/* Tensor and storage layouts (internal). */
#ifndef PHX_CORE_TENSOR_IMPL_H
#define PHX_CORE_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include "phalanx/tensor.h"

/* Reference-counted allocation on one device. */
typedef struct px_storage {
    atomic_long refs;
    void *data; /* device memory */
    size_t bytes;
    phx_device device;
    bool pinned; /* CPU memory from pinned_by's host_alloc */
    phx_device pinned_by;
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
};

static inline void *px_tensor_ptr(const phx_tensor *t)
{
    return (char *)t->storage->data + (size_t)t->offset * phx_dtype_size(t->dtype);
}

/* A CPU tensor in page-locked memory from accel's host_alloc (malloc'd
 * memory on a device without it), which accel's copy_h2d_async can read
 * while the host goes on. NULL with phx_last_error on failure. */
phx_tensor *px_tensor_pinned(phx_dtype dt, int ndim, const int64_t *shape, phx_device accel);

/* "(2, 3)", "(4,)", "()": phx_tensor_shape_str's format for a bare shape. */
const char *px_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);
#endif
