/* Phalanx — modules: a vtable + context, parameters with dotted names,
 * hand-written or derived (autograd) backward and the gradient-ready hook. */
#ifndef PHALANX_MODULE_H
#define PHALANX_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include "phalanx/tensor.h"
#include "phalanx/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_module phx_module;
typedef struct phx_param phx_param;
typedef struct phx_precision phx_precision;

/* The module interface. forward and free are required; the others are
 * optional (NULL) and the public wrappers handle their absence.
 *
 * forward: *y <- f(x). The module owns *y (a buffer reused across calls with
 *   the same batch shape) and keeps what backward needs. (Built-in
 *   modules write to fresh memory while their last output is kept,
 *   phx_module_forward below; a module of your own that reuses its buffer
 *   then gives the earlier output the new call's values.) A forward-only
 *   module (backward NULL) computes *y with the operations of
 *   phalanx/ops.h and its children's phx_module_forward; they are
 *   recorded, their results belong to the module until its next forward
 *   (the core runs forward in a scope it keeps), and the core derives the
 *   backward (doc/guide/autograd.md).
 * backward: (optional: NULL derives it from what forward recorded) given
 *   dy = dL/dy of the last forward, ADDS dL/dparam into each
 *   parameter's gradient (gradients accumulate until zero_grad), calls
 *   phx_param_grad_ready() once per parameter as soon as its gradient is
 *   final, and when dx != NULL sets *dx = dL/dx (owned by the module).
 *   dx == NULL means the caller does not need the input gradient.
 * free: releases ctx (parameters and children are released by the core).
 * set_train: switches train/eval behaviour (dropout); children are
 *   switched by the core.
 * clone: a new module of the same structure and parameter values, sharing
 *   nothing mutable with self (DataParallel replicas).
 * struct_size: sizeof(phx_module_vtable) as the module's author compiled
 *   it (PHX_MODULE_VTABLE_SIZE); slots appended in later minors read as
 *   NULL for a smaller table (doc/maint/abi.md). */
typedef struct phx_module_vtable {
    size_t struct_size; /* PHX_MODULE_VTABLE_SIZE */
    const char *type_name;
    phx_status (*forward)(phx_module *self, const phx_tensor *x, phx_tensor **y);
    phx_status (*backward)(phx_module *self, const phx_tensor *dy, phx_tensor **dx);
    void (*free)(phx_module *self);
    phx_status (*set_train)(phx_module *self, bool training);
    phx_module *(*clone)(const phx_module *self);
} phx_module_vtable;
#define PHX_MODULE_VTABLE_SIZE sizeof(phx_module_vtable)

/* Called with each parameter whose gradient became final during backward. */
typedef void (*phx_grad_hook)(phx_param *p, void *user);

/* --- Writing a module --- */

/* New module with the given vtable and context. The library reads the
 * vtable through its struct_size (a copy adapted to this library's
 * layout), and keeps vt itself as the module's type: phx_module_vtable_of
 * returns it, so vt must outlive the module. NULL on ENOMEM, a vtable
 * missing a required slot, or PHX_EABI for a struct_size of 0 or a larger
 * table with slots this library does not know. */
phx_module *phx_module_new(const phx_module_vtable *vt, void *ctx);
void *phx_module_ctx(const phx_module *m);
const phx_module_vtable *phx_module_vtable_of(const phx_module *m);
/* Registers a parameter named `name` (no dots). Takes ownership of value
 * (f32 master weights); a zero f32 gradient of the same shape is created.
 * The value becomes a leaf that requires a gradient: operations on it are
 * recorded and backward accumulates into the parameter's gradient.
 * Returns the parameter (owned by m) or NULL. */
phx_param *phx_module_add_param(phx_module *m, const char *name, phx_tensor *value);
/* Registers a child named `name`; takes ownership. Dotted names of its
 * parameters become "name.param". PHX_EINVAL on a duplicate name. */
phx_status phx_module_add_child(phx_module *m, const char *name, phx_module *child);
size_t phx_module_num_children(const phx_module *m);
phx_module *phx_module_child(const phx_module *m, size_t i);
/* The direct child registered as `name`, or NULL. */
phx_module *phx_module_find_child(const phx_module *m, const char *name);
/* The compute dtype set by phx_module_set_precision (PHX_F32 by default). */
phx_dtype phx_module_compute_dtype(const phx_module *m);

/* --- Using a module --- */

/* *y <- m(x), owned by m until its next forward (a module with a
 * hand-written backward returns the same tensor from each call, with the
 * new call's values), except that while *y's graph has not run its
 * backward the next call writes elsewhere, and the scope *y was made in
 * keeps *y until it ends, or with no scope open m keeps it one call
 * longer (y1 = m(x1); y2 = m(x2) in one loss; a third call frees y1 and
 * marks it, so that using it is refused), and a call on m's own last
 * output writes elsewhere too (doc/guide/autograd.md). With grad mode on
 * (phalanx/autograd.h) the call is recorded: a module with a hand-written
 * backward as one node, a forward-only module as the operations it ran;
 * phx_backward on a tensor made from *y reaches m's parameters. */
phx_status phx_module_forward(phx_module *m, const phx_tensor *x, phx_tensor **y);
/* Given dy = dL/dy of m's last forward: adds the parameters' gradients,
 * announces each (phx_param_grad_ready) and sets *dx = dL/dx (owned by m;
 * dx NULL: not wanted). For a forward-only module this is
 * phx_backward_with(y, dy) over the graph its last forward recorded. For
 * a module with a hand-written backward, a call after its backward already
 * ran for this forward (this function, or phx_backward through it) is
 * PHX_ESTATE: it would add the gradients again; so is phx_backward through
 * it after this call. Backwards a wrapper or a container runs, and a graph
 * kept with retain_graph run again, are not refused; after phx_backward
 * with retain_graph, run a second gradient through phx_backward_with. */
phx_status phx_module_backward(phx_module *m, const phx_tensor *dy, phx_tensor **dx);
/* Train (default) or eval mode, recursively. */
phx_status phx_module_train(phx_module *m, bool training);
bool phx_module_is_training(const phx_module *m);
/* A replica (vtable clone, recursively); NULL with PHX_EUNSUPPORTED when a
 * module in the tree has no clone slot. Caller owns it. */
phx_module *phx_module_clone(const phx_module *m);
/* Releases m, its parameters and children. NULL is a no-op. A wrapper
 * (phx_ddp_new, phx_dp_new) holds a reference to its model, so the model
 * and its wrapper may be freed in either order: the model goes when both
 * were freed. */
void phx_module_free(phx_module *m);
const char *phx_module_type(const phx_module *m);

/* Parameters of the whole tree in PyTorch's named_parameters() order (own
 * parameters first, then children in registration order, depth first). */
size_t phx_module_num_params(const phx_module *m);
phx_param *phx_module_param(const phx_module *m, size_t i);
/* Dotted name of parameter i seen from m ("0.weight"). Owned by m. */
const char *phx_module_param_name(const phx_module *m, size_t i);
/* Parameter by dotted name, or NULL. */
phx_param *phx_module_find_param(const phx_module *m, const char *name);
/* Sets the hook on every parameter of the tree (NULL removes it). */
phx_status phx_module_set_grad_hook(phx_module *m, phx_grad_hook fn, void *user);
/* Sets every gradient of the tree to zero. */
phx_status phx_module_zero_grad(phx_module *m);
/* Moves parameters (and their gradients) to dev, recursively. */
phx_status phx_module_to(phx_module *m, phx_device dev);
/* Selects the mixed-precision policy for the tree (NULL = fp32). The policy
 * must outlive the module. */
phx_status phx_module_set_precision(phx_module *m, const phx_precision *p);

/* --- Buffers: named non-parameter state (BatchNorm's running_mean,
 * running_var, num_batches_tracked), in PyTorch's named_buffers() order
 * and state_dict names. Checkpoints save and load them, phx_module_to
 * moves them, phx_module_clone copies them, DDP broadcasts them from rank
 * 0; optimizers never touch them. A wrapper lists its model's. --- */

/* Registers buffer `name` (no dots, not taken by a parameter or child) of
 * any dtype; takes ownership of value, also on failure. */
phx_status phx_module_add_buffer(phx_module *m, const char *name, phx_tensor *value);
size_t phx_module_num_buffers(const phx_module *m);
phx_tensor *phx_module_buffer(const phx_module *m, size_t i);
/* Dotted name of buffer i ("1.running_mean"). Owned by m. */
const char *phx_module_buffer_name(const phx_module *m, size_t i);
phx_tensor *phx_module_find_buffer(const phx_module *m, const char *name);

/* --- Parameters --- */

/* Leaf name ("weight"). */
const char *phx_param_name(const phx_param *p);
phx_tensor *phx_param_value(const phx_param *p);
phx_tensor *phx_param_grad(const phx_param *p);
/* Replaces the gradient tensor (same shape, f32, same device), e.g. with a
 * view into a DDP bucket. Copies the current gradient into it. Takes a
 * reference to grad. */
phx_status phx_param_set_grad(phx_param *p, phx_tensor *grad);
/* Replaces the value tensor (same shape and dtype); takes a reference. */
phx_status phx_param_set_value(phx_param *p, phx_tensor *value);
/* Incremented whenever the value changes (optimizer step, load, copy):
 * lets modules refresh low-precision weight copies once per step. */
uint64_t phx_param_version(const phx_param *p);
void phx_param_touch(phx_param *p);
/* Modules call this once the parameter's gradient is final for this
 * backward; it runs the hook if one is set. */
void phx_param_grad_ready(phx_param *p);

/* --- Built-in modules (PyTorch semantics; NULL + phx_last_error on bad
 * arguments). rng NULL means a generator seeded with 0. --- */

/* y = x W^T + b; W (out, in) ~ kaiming_uniform(a=sqrt 5) = U(+-1/sqrt(in)),
 * b ~ U(+-1/sqrt(in)), drawn in that order from rng. */
phx_module *phx_linear_new(int64_t in_features, int64_t out_features, bool bias, phx_rng *rng);
phx_module *phx_relu_new(void);
/* tanh_approx false: exact erf GELU; true: the tanh approximation. */
phx_module *phx_gelu_new(bool tanh_approx);
phx_module *phx_tanh_new(void);
phx_module *phx_sigmoid_new(void);
/* Inverted dropout with probability p in [0,1); masks from Philox(seed). */
phx_module *phx_dropout_new(float p, uint64_t seed);
/* Over the last dim of size dim; weight=1, bias=0 when affine. */
phx_module *phx_layernorm_new(int64_t dim, float eps, bool affine);
/* Empty Sequential; children named "0", "1", ... in order of phx_sequential_add. */
phx_module *phx_sequential_new(void);
/* Appends m (takes ownership, also on failure). */
phx_status phx_sequential_add(phx_module *seq, phx_module *m);

#ifdef __cplusplus
}
#endif
#endif
