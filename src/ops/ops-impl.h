/* Helpers the tensor operations share (internal): argument checks with
 * messages naming the operation, result tensors owned by the scope, and
 * broadcasting. */
#ifndef PHX_SRC_OPS_IMPL_H
#define PHX_SRC_OPS_IMPL_H

#include <stdbool.h>
#include "phalanx/ops.h"
#include "phalanx/plugin/device_v1.h"
#include "src/autograd/autograd-impl.h"
#include "src/tensor/tensor-impl.h"

/* PHX_OK when none of the n inputs is NULL. A NULL input is most often
 * the result of an operation that just failed: its message is kept as it
 * is (nothing is prefixed); with no message pending, names fn and the
 * operand ("phx_add: b is NULL"). names[i] names input i. */
phx_status px_op_inputs(const char *fn, int n, const phx_tensor *const *in, const char *const *names);
/* PHX_EINVAL naming fn and both operands when they are on different
 * devices or (same_dtype) of different dtypes. */
phx_status px_op_same(const char *fn, const char *an, const phx_tensor *a, const char *bn, const phx_tensor *b,
                      bool same_dtype);
/* PHX_EINVAL unless t is f32, f16 or bf16. */
phx_status px_op_float(const char *fn, const char *name, const phx_tensor *t);
/* dim normalised to 0 .. ndim-1 (negative counts from the end) in *out;
 * PHX_EINVAL naming fn, the dim and the shape when out of range. ndim is
 * the rank the dim refers to (t's, or t's + 1 for unsqueeze/stack). */
phx_status px_op_dim(const char *fn, const phx_tensor *t, int ndim, int dim, int *out);
/* A new contiguous tensor for an operation's result, on dev; NULL with
 * phx_last_error naming fn on failure. Not yet owned by a scope: return
 * it through px_scope_own (or free it on a later failure). */
phx_tensor *px_op_new(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev);
/* The device kernel table for t, checking that slot `slot` exists (minor
 * 4 slots may be NULL in an older plugin). */
const phx_kernels_v1 *px_op_kernels(const char *fn, const phx_tensor *t);

/* Row-major strides (elements) of shape. */
void px_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* The broadcast shape of a and b (NumPy's rules) in *ndim/shape;
 * PHX_EINVAL naming fn, both shapes and the dim that cannot broadcast. */
phx_status px_broadcast_shape(const char *fn, const phx_tensor *a, const phx_tensor *b, int *ndim, int64_t *shape);
/* Strides to read t as shape (ndim >= t's, aligned on the right): t's
 * contiguous strides, 0 where t's dim is 1 or absent. */
void px_broadcast_strides(const phx_tensor *t, int ndim, const int64_t *shape, int64_t *strides);
/* g summed over the dims that broadcasting added or expanded so it has
 * shape (ndim dims): the gradient of a broadcast operand. Returns g with
 * one more reference when the shapes already match. Ownership as the
 * operations'. */
phx_tensor *px_sum_to(const phx_tensor *g, int ndim, const int64_t *shape);

/* The compute dtype of the forward-only module whose forward runs on this
 * thread (its precision policy's; PHX_F32 outside one or without a
 * policy): matmul casts its operands to it (doc/guide/precision.md, the
 * autocast table). */
phx_dtype px_autocast_dtype(void);
/* Under autocast (a compute dtype other than f32), a low-precision t
 * widened to f32 (recorded): the f32 list of doc/guide/precision.md (softmax,
 * reductions, losses); else t itself. */
const phx_tensor *px_autocast_f32(const phx_tensor *t);
/* Sets it; returns the previous (src/modules/module-autograd.c). */
phx_dtype px_autocast_set(phx_dtype dt);
/* Shape and index operations' helpers (src/ops/shape.c). */
/* The device's copy_strided kernel on like's device and dtype; a clear
 * PHX_EUNSUPPORTED naming fn when the device's table lacks it. */
phx_status px_op_copy_strided(const char *fn, const phx_tensor *like, int ndim, const int64_t *shape, void *dst,
                              const int64_t *dst_strides, const void *src, const int64_t *src_strides);
/* A zero-filled result tensor, handed to the scope (px_scope_own). */
phx_tensor *px_op_zeros(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev);
#endif
