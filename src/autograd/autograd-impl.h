/* The autograd engine's interface for operations (internal): how an
 * operation records a node, saves tensors and writes its backward. */
#ifndef PHX_SRC_AUTOGRAD_IMPL_H
#define PHX_SRC_AUTOGRAD_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include "phalanx/autograd.h"
#include "phalanx/module.h"

typedef struct px_node px_node;

/* A node's backward: grad is the gradient of the node's output (its
 * shape, never NULL). For each input i with px_node_needs(n, i), sets
 * in_grads[i] to a tensor of input i's recorded shape and dtype (made by
 * operations: they run with grad mode off inside a scope the engine owns
 * and ends; return an input or saved tensor itself only after
 * phx_tensor_retain). in_grads[i] left NULL means a zero gradient. */
typedef phx_status (*px_backward_fn)(px_node *n, const phx_tensor *grad, phx_tensor **in_grads);

/* A node's check before a backward's sweep runs any node: an error
 * (PHX_ESTATE naming what) refuses the whole backward while it has
 * changed nothing, where the node's backward would fail after others had
 * added their gradients. */
typedef phx_status (*px_check_fn)(px_node *n);
void px_node_set_check(px_node *n, px_check_fn check);

/* Bytes of zeroed op-private state each node carries (px_node_ctx). */
#define PX_NODE_CTX_BYTES 128

/* 1 when grad mode is on and one of the n inputs requires a gradient:
 * only then must the caller record. NULL inputs count as not requiring. */
bool px_grad_needed(int n, const phx_tensor *const *in);

/* Inside a backward's sweep: whether it keeps the graph (retain_graph), so
 * a backward run within it (a forward-only module's, under a wrapper)
 * keeps its own too. */
bool px_backward_retaining(void);
/* A pool thread running part of a sweep (DataParallel's replicas): takes
 * the sweep's retain_graph; returns the value it replaces. */
bool px_backward_inherit(bool retain);

/* Records that `out` was made by operation `name` from the n inputs, and
 * is differentiated by fn: out becomes a non-leaf that requires a
 * gradient. *node is the new node (to save tensors and fill its ctx), or
 * NULL when nothing had to be recorded (px_grad_needed false). Fails only
 * on ENOMEM; out is then unchanged. */
phx_status px_record(const char *name, px_backward_fn fn, int n, const phx_tensor *const *in, phx_tensor *out,
                     px_node **node);
/* A non-differentiable operation (comparison, argmax, a cast to an
 * integer dtype) made out from the n inputs: when one of them requires a
 * gradient, out remembers op's name so that a backward reaching it says
 * which op cut the path. */
void px_mark_nondiff(const char *op, int n, const phx_tensor *const *in, phx_tensor *out);

/* Keeps a reference to t for backward, with t's version (a later in-place
 * change makes px_node_saved fail naming the op). Returns its index. */
int px_node_save(px_node *n, const phx_tensor *t);
/* Saved tensor i, or NULL with PHX_ESTATE "... modified by an in-place
 * operation" / "... the graph was freed". */
const phx_tensor *px_node_saved(px_node *n, int i);
/* PX_NODE_CTX_BYTES zeroed bytes owned by the node. */
void *px_node_ctx(px_node *n);
/* 1 when input i needs a gradient (it or what made it requires one). */
bool px_node_needs(const px_node *n, int i);
int px_node_num_inputs(const px_node *n);
/* Input i's shape and dtype as recorded. */
int px_node_in_ndim(const px_node *n, int i);
const int64_t *px_node_in_shape(const px_node *n, int i);
phx_dtype px_node_in_dtype(const px_node *n, int i);
phx_device px_node_in_device(const px_node *n, int i);
const char *px_node_name(const px_node *n);

/* Bumps t's storage version: every in-place write through the tensor API
 * (copy, fill, axpby, from_host, cast into, an optimizer step) calls it. */
void px_tensor_bump_version(const phx_tensor *t);

/* The scope that owns results (see phalanx/ops.h): hands t to the
 * innermost open scope of this thread and returns t; with none open
 * returns t (the caller owns it). NULL passes through. */
phx_tensor *px_scope_own(phx_tensor *t);
/* 1 when a scope is open on this thread. */
bool px_scope_open(void);
/* A scope, by its thread, depth (0: none) and the number it got when it
 * opened (unique in the process), so a scope opened later at the same
 * depth is another. */
typedef struct px_scope_id {
    size_t depth;
    uint64_t serial;
    const void *thread; /* its thread's scope stack (compared, never read) */
} px_scope_id;
/* The innermost open scope ({0, 0}: none). */
px_scope_id px_scope_current(void);
/* Whether scope id is this thread's and still open. */
bool px_scope_alive(px_scope_id id);
/* Whether scope id is another thread's (open or not: that thread's
 * stack cannot be read from here). */
bool px_scope_elsewhere(px_scope_id id);
/* Hands t to scope id (which need not be the innermost) when it is still
 * open and returns t; else returns t (the caller keeps it). NULL on
 * ENOMEM, after freeing t. */
phx_tensor *px_scope_own_in(px_scope_id id, phx_tensor *t);

/* The parameter whose value t is (phx_module_add_param marks it), or NULL. */
phx_param *px_tensor_param(const phx_tensor *t);
void px_tensor_set_param(phx_tensor *t, phx_param *p);
#endif
