/* Helpers shared by the elementwise, reduction, matrix and loss
 * operations (internal): kernel slot checks, recording a result, and the
 * unrecorded kernels the backward functions reuse. */
#ifndef PHX_SRC_OPS_MATH_IMPL_H
#define PHX_SRC_OPS_MATH_IMPL_H

#include "src/ops/ops-impl.h"

/* The kernel table of t's device with slot `slot` present; NULL with
 * PHX_EUNSUPPORTED naming fn and the slot otherwise. */
#define PX_OP_SLOT(fn, t, slot) \
    px_op_slot_((fn), (t), px_op_kernels((fn), (t)), #slot, px_op_kernels((fn), (t)) && px_op_kernels((fn), (t))->slot)
const phx_kernels_v1 *px_op_slot_(const char *fn, const phx_tensor *t, const phx_kernels_v1 *k, const char *slot,
                                  bool has);

/* Records out (made by op `name` from the n inputs, differentiated by
 * bwd) when px_grad_needed, then hands it to the scope. *node (may be
 * NULL) is the node or NULL. On failure frees out and returns NULL. */
phx_tensor *px_op_finish(const char *name, px_backward_fn bwd, int n, const phx_tensor *const *in, phx_tensor *out,
                         px_node **node);

/* Ends s (a scope the operation opened for its intermediates) keeping y:
 * y gets one more reference, handed to the enclosing scope (or the caller
 * when none is open). NULL passes through (s still ends). */
phx_tensor *px_scope_keep(phx_scope *s, phx_tensor *y);
/* Saves the node's own output y for backward through a view without
 * history (saving y itself would make y -> node -> y a cycle). */
int px_node_save_out(px_node *n, const phx_tensor *y);
/* y <- op(t; alpha, beta) with the unary kernel, not recorded (scope-owned). */
phx_tensor *px_unary_raw(const char *fn, int op, const phx_tensor *t, float alpha, float beta);
/* a op b with broadcasting, not recorded (scope-owned). */
phx_tensor *px_binary_raw(const char *fn, int op, const phx_tensor *a, const phx_tensor *b);
/* t broadcast to shape (NumPy's rules; t's shape must broadcast), a
 * copy, not recorded (scope-owned). */
phx_tensor *px_expand_raw(const char *fn, const phx_tensor *t, int ndim, const int64_t *shape);
/* A 0-dim tensor of value v (dtype dt, dev), scope-owned. */
phx_tensor *px_scalar_new(const char *fn, double v, phx_dtype dt, phx_device dev);
/* A view of t with another shape of the same numel (scope-owned). */
phx_tensor *px_view_as(const phx_tensor *t, int ndim, const int64_t *shape);
/* op (a phx_reduce_dim_op: sum, mean, logsumexp) over the dims with
 * mask bit i set, keepdim; not recorded (scope-owned). */
phx_tensor *px_reduce_raw(const char *fn, int op, const phx_tensor *t, unsigned mask, bool keepdim);
/* The dims bit mask of ndim dims (0 dims given: all); PHX_EINVAL naming
 * fn for a dim out of range or repeated. */
phx_status px_dims_mask(const char *fn, const phx_tensor *t, int ndim, const int *dims, unsigned *mask);
/* t's shape with the mask's dims set to 1 (keepdim) or removed. */
int px_reduced_shape(const phx_tensor *t, unsigned mask, bool keepdim, int64_t *shape);
#endif
