/* Node layout and the engine's own helpers (internal to src/autograd and
 * the tensor layer that frees handles). */
#ifndef PHX_SRC_AUTOGRAD_NODE_IMPL_H
#define PHX_SRC_AUTOGRAD_NODE_IMPL_H

#include <stdatomic.h>
#include "src/autograd/autograd-impl.h"
#include "src/tensor/tensor-impl.h"

#define PX_NODE_INLINE 4

/* Where input i's gradient goes: the node that made it, or the leaf
 * itself (a reference), or nowhere (both NULL). */
typedef struct px_node_input {
    px_node *node;
    phx_tensor *leaf;
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
    phx_dtype dtype;
    phx_device device;
} px_node_input;

typedef struct px_node_saved_t {
    phx_tensor *t;
    unsigned long version; /* the storage's version when saved */
} px_node_saved_t;

struct px_node {
    atomic_long refs; /* the tensor it made + consumers' edges + sweeps */
    const char *name;
    px_backward_fn fn;
    px_check_fn check; /* NULL, or run on every node before a sweep runs any */
    unsigned long long seq; /* recording order: consumers have larger seq */
    int n_in;
    px_node_input *in; /* in_inline or heap when n_in > PX_NODE_INLINE */
    px_node_saved_t *saved;
    int n_saved, cap_saved;
    bool freed; /* saved tensors released by a backward */
    /* one sweep's state */
    unsigned long long visit; /* the sweep that reached it */
    phx_tensor *grad; /* gradient of its output summed so far */
    px_node *next; /* free list / dead list */
    px_node_input in_inline[PX_NODE_INLINE];
    px_node_saved_t saved_inline[PX_NODE_INLINE];
    unsigned char ctx[PX_NODE_CTX_BYTES] __attribute__((aligned(16)));
};

px_node *px_node_retain(px_node *n);
/* Drops a reference; the last one frees the node and what it holds. */
void px_node_unref(px_node *n);
/* Frees the saved tensors (after a backward without retain_graph). */
void px_node_release_saved(px_node *n);
/* 1 when operations record now: grad mode on and not inside a module
 * with a hand-written backward. */
bool px_recording(void);
/* 1 when the leaf's gradient is wanted by the running backward. */
bool px_leaf_wanted(const phx_tensor *leaf);
/* Suspends recording (inside a module whose backward is hand-written);
 * returns the previous state for px_recording_restore. */
int px_recording_suspend(void);
/* 1 inside a hand-written module's forward (its children's calls are
 * its own business: nothing about them is recorded). */
bool px_recording_suspended(void);
/* Re-enables recording inside a forward-only module's forward. */
int px_recording_resume(void);
void px_recording_restore(int prev);
/* The captured module input whose gradient this thread's sweeps compute
 * (NULL: none); returns the previous. */
const phx_tensor *px_engine_want_capture(const phx_tensor *leaf);
/* Records a node for out even when no input requires a gradient (a
 * module whose parameters do), when recording is on. */
phx_status px_record_always(const char *name, px_backward_fn fn, int n, const phx_tensor *const *in, phx_tensor *out,
                            px_node **node);
/* Ends scope s, moving the tensors it owns to the end of (*arr, *n,
 * *cap) instead of releasing them. */
phx_status px_scope_take(phx_scope *s, phx_tensor ***arr, size_t *n, size_t *cap);
/* Appends t (its reference) to (*arr, *n, *cap); frees t on ENOMEM. */
phx_status px_scope_take_one(phx_tensor *t, phx_tensor ***arr, size_t *n, size_t *cap);
/* Releases a handle's autograd fields (from phx_tensor_free). */
void px_tensor_autograd_drop(phx_tensor *t);
#endif
