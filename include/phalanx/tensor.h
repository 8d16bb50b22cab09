/* Phalanx — tensors: contiguous row-major views of reference-counted storage. */
#ifndef PHALANX_TENSOR_H
#define PHALANX_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/device.h"
#include "phalanx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PHX_MAX_DIMS 4

typedef enum phx_dtype { PHX_F32 = 0, PHX_F16 = 1, PHX_BF16 = 2, PHX_I32 = 3, PHX_I64 = 4 } phx_dtype;
#define PHX_NUM_DTYPES 5

typedef enum phx_reduce_op { PHX_SUM = 0, PHX_AVG = 1, PHX_MAX = 2, PHX_MIN = 3 } phx_reduce_op;

typedef struct phx_tensor phx_tensor;

/* Bytes per element (4, 2, 2, 4, 8); 0 for an invalid dtype. */
size_t phx_dtype_size(phx_dtype dt);
/* "f32", "f16", "bf16", "i32", "i64"; "?" for an invalid dtype. */
const char *phx_dtype_name(phx_dtype dt);
/* 1 for f32, f16, bf16. */
int phx_dtype_is_float(phx_dtype dt);

/* New tensor with fresh storage on dev, contents uninitialised. ndim in
 * 0..4 (0 = scalar), every dim >= 0. Returns NULL on error (EINVAL, ENOMEM).
 * The caller owns the handle: release with phx_tensor_free. */
phx_tensor *phx_tensor_new(phx_dtype dt, int ndim, const int64_t *shape, phx_device dev);
/* As phx_tensor_new, zero-filled. */
phx_tensor *phx_tensor_zeros(phx_dtype dt, int ndim, const int64_t *shape, phx_device dev);
/* New CPU tensor holding a copy of n elements of host data. */
phx_tensor *phx_tensor_from_data(phx_dtype dt, int ndim, const int64_t *shape, const void *data);

/* A view of base's storage: numel(shape) elements starting offset elements
 * past base's first element; must lie inside base. The view keeps the
 * storage alive: base and view may be freed in any order. It records no
 * gradient (requires_grad 0), so a base that requires a gradient is
 * refused (NULL, PHX_EINVAL) while grad mode is on, rather than cut the
 * graph silently: use the differentiable views phx_reshape, phx_narrow or
 * phx_slice, or view under phx_set_grad_enabled(false) or a
 * phx_tensor_detach of base. */
phx_tensor *phx_tensor_view(const phx_tensor *base, int64_t offset, int ndim, const int64_t *shape);

/* Adds a reference to the handle; returns t. */
phx_tensor *phx_tensor_retain(phx_tensor *t);
/* Drops a reference; the storage goes when its last view goes. NULL is a no-op. */
void phx_tensor_free(phx_tensor *t);

int phx_tensor_ndim(const phx_tensor *t);
/* Size of dim i; negative i counts from the end. 0 for a bad index. */
int64_t phx_tensor_dim(const phx_tensor *t, int i);
/* The shape array (ndim entries), owned by the tensor. */
const int64_t *phx_tensor_shape(const phx_tensor *t);
int64_t phx_tensor_numel(const phx_tensor *t);
size_t phx_tensor_nbytes(const phx_tensor *t);
phx_dtype phx_tensor_dtype(const phx_tensor *t);
phx_device phx_tensor_device(const phx_tensor *t);
/* Element offset of the view in its storage. */
int64_t phx_tensor_offset(const phx_tensor *t);
/* Pointer to the first element (device memory for device tensors). */
void *phx_tensor_data(const phx_tensor *t);
/* 1 when both are views of the same storage. */
int phx_tensor_same_storage(const phx_tensor *a, const phx_tensor *b);
/* 1 when shapes are equal. */
int phx_tensor_same_shape(const phx_tensor *a, const phx_tensor *b);
/* Writes "(64, 10)" into buf; returns buf. */
const char *phx_tensor_shape_str(const phx_tensor *t, char *buf, size_t len);

/* --- Operations. Each checks shapes/dtypes/devices (PHX_EINVAL with a
 * message naming both sides) and dispatches through the tensor's device
 * kernel table; on a CUDA device it is asynchronous on the current stream. */

/* dst <- src. Same shape (numel) and dtype; devices may differ. */
phx_status phx_tensor_copy(phx_tensor *dst, const phx_tensor *src);
/* Copies numel elements between t and host memory (synchronous). */
phx_status phx_tensor_to_host(const phx_tensor *t, void *host);
phx_status phx_tensor_from_host(phx_tensor *t, const void *host);
/* dst <- src converted (same numel, same device). f32->f16/bf16 rounds to
 * nearest even; NaN stays NaN, overflow goes to inf. */
phx_status phx_tensor_cast(phx_tensor *dst, const phx_tensor *src);
/* Every element <- value (converted to the dtype). */
phx_status phx_tensor_fill(phx_tensor *t, double value);
/* y <- alpha*x + beta*y (float dtypes; x may be NULL for y <- beta*y). */
phx_status phx_tensor_axpby(float alpha, const phx_tensor *x, float beta, phx_tensor *y);
/* Sum/max/min/avg of all elements into *out (synchronous). */
phx_status phx_tensor_reduce(const phx_tensor *t, phx_reduce_op op, double *out);

/* C <- alpha * op(A) op(B) + beta * C for 2-D row-major tensors.
 * op(X) is X or X^T. A, B in f32/f16/bf16 (same dtype), C in f32, f16 or
 * bf16; products accumulate in f32 and the result is rounded to C's dtype.
 * Shapes: op(A) (m,k), op(B) (k,n), C (m,n). */
phx_status phx_gemm(bool trans_a, bool trans_b, float alpha, const phx_tensor *a, const phx_tensor *b, float beta,
                    phx_tensor *c);

/* Reads one element as double (synchronous; for tests and small checks). */
phx_status phx_tensor_get(const phx_tensor *t, int64_t index, double *out);

#ifdef __cplusplus
}
#endif
#endif
