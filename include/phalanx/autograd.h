/* Phalanx — autograd: gradients of tensor operations recorded as they run,
 * and scopes that own the tensors operations return (doc/guide/autograd.md).
 *
 * While grad mode is on, every differentiable operation of phalanx/ops.h
 * and every module forward whose input or parameters require a gradient
 * records a node: the operation, its inputs and what its backward needs.
 * phx_backward(loss) runs the nodes in reverse, accumulates the gradients
 * of leaves (parameters' values and tensors marked requires_grad) and
 * calls phx_param_grad_ready on each parameter the moment its gradient is
 * final, so DDP reduces buckets while backward goes on. Saved tensors are
 * released once backward has used them. */
#ifndef PHALANX_AUTOGRAD_H
#define PHALANX_AUTOGRAD_H

#include <stdbool.h>
#include "phalanx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Grad mode (per thread, on by default) ---- */

bool phx_grad_enabled(void);
/* Sets grad mode for the calling thread; returns the previous mode. A
 * no_grad block:
 *     bool prev = phx_set_grad_enabled(false); ...; phx_set_grad_enabled(prev); */
bool phx_set_grad_enabled(bool on);

/* ---- Leaves and gradients ---- */

/* Marks t (a float tensor no operation made) as a leaf whose gradient
 * phx_backward accumulates. PHX_EINVAL for an integer tensor or a tensor
 * with history (use phx_tensor_detach first). */
phx_status phx_tensor_set_requires_grad(phx_tensor *t, bool on);
/* 1 when t is a leaf that requires a gradient or was made from one while
 * grad mode was on. */
bool phx_tensor_requires_grad(const phx_tensor *t);
/* A leaf's accumulated gradient (a parameter value's is its parameter's
 * gradient); NULL before the first backward reached it, or for a tensor
 * that is not a leaf. Owned by the leaf. */
phx_tensor *phx_tensor_grad(const phx_tensor *t);
/* Drops a leaf's accumulated gradient (parameters: use zero_grad). */
phx_status phx_tensor_zero_grad(phx_tensor *t);
/* The name of the operation that made t ("mul", "conv2d", ...), NULL for
 * a leaf or a tensor made without recording. */
const char *phx_tensor_grad_fn(const phx_tensor *t);
/* A tensor sharing t's storage with no history (requires_grad false).
 * Ownership as phalanx/ops.h's results. */
phx_tensor *phx_tensor_detach(const phx_tensor *t);

/* ---- Backward ---- */

/* Gradients of loss (one element) with respect to every leaf it was made
 * from: d loss / d loss = 1. The recorded graph is released afterwards (a
 * second backward through it is PHX_ESTATE). Runs with grad mode off. */
phx_status phx_backward(const phx_tensor *loss);
/* As phx_backward with the gradient of t given (t's shape). */
phx_status phx_backward_with(const phx_tensor *t, const phx_tensor *grad);
/* As phx_backward_with; retain_graph true keeps the graph for another
 * backward (PyTorch's retain_graph). grad NULL: t has one element. */
phx_status phx_backward_retain(const phx_tensor *t, const phx_tensor *grad, bool retain_graph);

/* ---- Scopes: who owns the tensors operations return ---- */

typedef struct phx_scope phx_scope;

/* Opens a scope on the calling thread: until it ends, the tensors that
 * operations return belong to it. Scopes nest. Returns a token for
 * phx_scope_end (never NULL: the scope stack grows as needed, and fails
 * only on ENOMEM, when it returns NULL with phx_last_error). */
phx_scope *phx_scope_begin(void);
/* Ends s and every scope opened after it on this thread: drops their
 * references to the tensors they own (phx_tensor_retain keeps one).
 * Handles and storage return to per-thread caches, so a loop that opens
 * and ends one scope per step allocates nothing once warm. NULL: no-op. */
void phx_scope_end(phx_scope *s);

#ifdef __cplusplus
}
#endif
#endif
