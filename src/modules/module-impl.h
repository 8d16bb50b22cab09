/* Module and parameter layouts, and the helpers built-in modules share
 * (internal). */
#ifndef PHX_CORE_MODULE_IMPL_H
#define PHX_CORE_MODULE_IMPL_H

#include <stdbool.h>
#include "phalanx/module.h"
#include "phalanx/plugin/device_v1.h"
#include "src/tensor/device-impl.h"
#include "src/autograd/autograd-impl.h"

struct phx_param {
    char *name; /* leaf name, "weight" */
    phx_tensor *value; /* f32 master weights */
    phx_tensor *grad; /* f32, same shape and device as value */
    uint64_t version; /* bumped on every change of value */
    phx_grad_hook hook;
    void *hook_user;
    phx_module *owner;
};

typedef struct px_child {
    char *name;
    phx_module *m;
} px_child;

/* A module buffer: named non-parameter state. Modules keep the holder
 * and read t at each use (phx_module_to and loading replace or fill it). */
typedef struct px_buffer {
    char *name; /* leaf name, "running_mean" */
    phx_tensor *t;
} px_buffer;

struct phx_module {
    const phx_module_vtable *vt; /* &vtab: the author's table in this library's layout */
    phx_module_vtable vtab;
    const void *type; /* the table given to phx_module_new: the module's type */
    void *ctx;
    phx_module *parent;
    int refs; /* 1 from its creator, +1 from the wrapper holding it */
    phx_module *wrapped; /* a wrapper's model (a reference, released at free) */
    phx_param **params; /* own parameters, registration order */
    size_t n_params, cap_params;
    px_child *children; /* registration order */
    size_t n_children, cap_children;
    bool training;
    phx_dtype compute_dtype; /* phx_precision_dtype of precision, F32 without */
    const phx_precision *precision;
    /* Whole-tree parameter list with dotted names, rebuilt lazily after the
     * tree changes (named_parameters() order). */
    bool flat_valid;
    size_t n_flat;
    phx_param **flat;
    char **flat_names;
    /* Own buffers (src/modules/buffers.c) in registration order, and
     * the whole tree's with dotted names, rebuilt lazily like flat. */
    px_buffer **buffers;
    size_t n_buffers, cap_buffers;
    bool bflat_valid;
    size_t n_bflat;
    px_buffer **bflat;
    char **bflat_names;
    /* Autograd (src/modules/module-autograd.c): forwards run, the node of
     * a hand-written module's last forward; a forward-only module's last
     * call: the tensors its operations returned (released at its next
     * forward), its input as seen by the graph and its output. */
    uint64_t calls;
    uint64_t backward_call; /* calls when its hand-written backward last ran (any caller) */
    bool backward_by_user; /* and that one was the user's phx_module_backward */
    /* its last phx_module_forward's start and end on a clock all modules
     * share: a child's forward lies inside its parent's when it ran as
     * part of it */
    uint64_t fwd_begin, fwd_end;
    /* its parent's fwd_begin when it last ran inside the parent's forward,
     * and its calls then: a parent's backward uses that call's state */
    uint64_t parent_call, calls_in_parent;
    struct px_node *last_node;
    /* src/modules/module-keep.c: a reference to its last forward's
     * output, the scope that call ran in, this call's decision about it,
     * and what it keeps itself until its next call */
    phx_tensor *last_out;
    px_scope_id out_scope;
    uint64_t out_caller; /* the outermost running forward that call was made in (0: it was) */
    px_scope_id out_inner; /* the innermost scope open then */
    int keep;
    phx_tensor **spare;
    size_t n_spare, cap_spare;
    phx_tensor **owned;
    size_t n_owned, cap_owned;
    phx_tensor *last_x, *last_y;
    /* A wrapper that phx_module_forward and phx_module_backward call
     * instead of this module while redirect_off is false (an FSDP unit,
     * whose parents call the module directly). */
    phx_module *redirect;
    bool redirect_off;
};

/* phx_module_forward of a module with a hand-written backward: runs it
 * with recording suspended and records one node for the call. */
phx_status px_module_forward_fused(phx_module *m, const phx_tensor *x, phx_tensor **y);
/* phx_module_forward of a forward-only module: runs its forward with
 * recording on, in a scope whose tensors the module keeps until its next
 * forward. */
phx_status px_module_forward_traced(phx_module *m, const phx_tensor *x, phx_tensor **y);
/* phx_module_backward of a forward-only module: backward from its last
 * output with dy; *dx (when dx) the gradient of its last input. */
phx_status px_module_backward_traced(phx_module *m, const phx_tensor *dy, phx_tensor **dx);
/* Whether t, a module's output, is part of a graph whose backward has
 * not run (a hand-written module's node: the module's last call, not yet
 * differentiated). */
bool px_module_output_pending(const phx_tensor *t);

/* ---- src/modules/module-keep.c --------------------------------------- */

/* What a module's call does with its last output: reuse its memory, hand
 * it to the scope it was made in, or keep it until the module's next call. */
enum { PX_KEEP_NONE, PX_KEEP_SCOPE, PX_KEEP_SPARE };
/* Decides for m's call on x (phx_module_forward, before the module runs);
 * returns a mark for px_module_keep_end. */
int px_module_keep_begin(phx_module *m, const phx_tensor *x);
/* After the call: y (on success) becomes m's last output. */
void px_module_keep_end(phx_module *m, int mark, phx_status st, phx_tensor *y);
/* When *slot (a module's buffer) holds an output a running forward must
 * not write over: hands it to its keeper and sets *slot NULL. */
phx_status px_module_keep_slot(phx_tensor **slot);
/* Hands t (a reference) to the keeper this call of m chose. */
phx_status px_module_keep_tensor(phx_module *m, phx_tensor *t);
/* Whether t is an output a running forward must not write over. */
bool px_module_keeping(const phx_tensor *t);
/* Releases m's last output and spares (phx_module_free). */
void px_module_keep_free(phx_module *m);
/* Releases what the module's autograd fields hold (at phx_module_free). */
void px_module_autograd_free(phx_module *m);

/* A device buffer reused across calls: allocated on first use, re-viewed
 * when the shape shrinks, reallocated only when it must grow or the dtype
 * or device changes. The returned tensor stays owned by the buffer. */
typedef struct px_buf {
    phx_tensor *store; /* 1-D capacity */
    phx_tensor *view; /* the shape last asked for */
} px_buf;

/* Hand-written backwards running on this thread (phx_module_backward and
 * the graph's module nodes): only a call at depth 0 is the user's. */
extern _Thread_local int px_module_backward_depth;
/* PHX_ESTATE naming `who` when the hand-written backward of m's forward
 * number `call` ran already (only the user's phx_module_backward when
 * user_only: a graph's own rerun with retain_graph is allowed), else
 * PHX_OK. A second backward of one forward would add its gradients
 * again; PyTorch refuses it too. */
phx_status px_module_refuse_second_backward(const phx_module *m, uint64_t call, bool user_only, const char *who);
/* Runs m's hand-written backward one level deeper and records it (as the
 * user's when by_user). */
phx_status px_module_run_backward(phx_module *m, const phx_tensor *dy, phx_tensor **dx, bool by_user);

phx_status px_buf_get(px_buf *b, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev, phx_tensor **out);
/* When b holds the last call's output and this call keeps it
 * (src/modules/module-keep.c): hands it to its keeper, leaving b empty
 * (*cap, when not NULL: the elements its memory held). Done by
 * px_buf_get; a module returning other memory this call calls it. */
phx_status px_buf_hand_over(px_buf *b, int64_t *cap);
/* As px_buf_get with the shape of t and its last dim replaced by last. */
phx_status px_buf_like(px_buf *b, phx_dtype dt, const phx_tensor *t, int64_t last, phx_tensor **out);
void px_buf_free(px_buf *b);

/* x itself when it already has dtype dt, else x cast into b. */
phx_status px_as_dtype(px_buf *b, const phx_tensor *x, phx_dtype dt, const phx_tensor **out);

/* The kernel table of a device: px_device_kernels (src/tensor/device-impl.h). */

/* Copies the values of src's own parameters into dst's (same names and
 * shapes; used by clone slots). */
phx_status px_module_copy_params(phx_module *dst, const phx_module *src);
/* Gives a freshly cloned tree the mode and precision of the original. */
void px_module_copy_settings(phx_module *dst, const phx_module *src);
/* Lists model's parameters as wrapper's own, under the model's names (not
 * "module.*"): for the DataParallel and DDP wrappers, which have no
 * parameters or children of their own, so wrapper's flat list is filled
 * here once and never invalidated. The wrapper also takes a reference to
 * model, released when the wrapper is freed (after its free slot ran), so
 * the two may be freed in either order. Call once, on a fresh wrapper; on
 * failure what was filled is freed with the wrapper. */
phx_status px_module_adopt_params(phx_module *wrapper, const phx_module *model);

/* ---- src/modules/buffers.c ------------------------------------------ */

/* Registers buffer `name` of m (takes ownership of t, also on failure);
 * NULL with phx_last_error on a bad or taken name. */
px_buffer *px_module_add_buffer(phx_module *m, const char *name, phx_tensor *t);
/* Frees m's buffers and its flat buffer list (phx_module_free). */
void px_module_free_buffers(phx_module *m);
/* Marks m's and its ancestors' flat buffer lists stale. */
void px_module_buffers_changed(phx_module *m);
/* Whether m has an own buffer named name. */
bool px_module_has_buffer(const phx_module *m, const char *name);
/* The holder of buffer i of m's tree (named_buffers() order), or NULL. */
px_buffer *px_module_buffer_holder(const phx_module *m, size_t i);
/* Copies the values of src's own buffers into dst's (clone slots). */
phx_status px_module_copy_buffers(phx_module *dst, const phx_module *src);
/* Moves the tree's buffers to dev (phx_module_to): all or nothing. */
phx_status px_module_buffers_to(phx_module *m, phx_device dev);

/* A module's own parameter i. */
static inline phx_param *px_own_param(const phx_module *m, size_t i)
{
    return m->params[i];
}

/* Checks shared by the elementwise modules: x float, on a device. */
phx_status px_check_float_input(const char *who, const phx_tensor *x);

/* ---- src/modules/common.c ------------------------------------------ */

/* A module of vt with a zeroed context of ctx_size bytes (px_calloc'ed:
 * vt->free frees it with px_free); *ctx points at it. NULL when out of
 * memory (the context is freed). */
/* phx_module_new for a vtable already in this library's layout (vt),
 * whose author's table is type (the same, or an older layout). */
phx_module *px_module_new_typed(const phx_module_vtable *vt, const void *type, void *ctx);
/* Makes m a module of vt (SyncBatchNorm's conversion). */
void px_module_set_vtable(phx_module *m, const phx_module_vtable *vt);

phx_module *px_module_alloc(const phx_module_vtable *vt, size_t ctx_size, void **ctx);

/* What a module keeps from its forward for its backward. */
typedef struct px_io {
    phx_tensor *x; /* input of the last forward, compute dtype (retained) */
    px_buf xc; /* the input cast to the compute dtype */
    px_buf y; /* output */
    px_buf dyc; /* dy cast to x's dtype */
    px_buf dx; /* input gradient, x's shape and dtype */
} px_io;

/* Forward's operands: *xin is x in dtype dt (x itself or its cast in
 * io->xc); *out is io->y in dtype dt, shaped as x with the last dim
 * replaced by last (x's own shape when last < 0). */
phx_status px_io_forward(px_io *io, const phx_tensor *x, phx_dtype dt, int64_t last, const phx_tensor **xin,
                         phx_tensor **out);
/* Keeps xin (retained) as the input of the last forward, releasing the
 * previous one. */
void px_io_keep(px_io *io, const phx_tensor *xin);
/* Backward's operands when dx has the input's shape: *g is dy in io->x's
 * dtype (dy itself or its cast in io->dyc), *d is io->dx. */
phx_status px_io_backward(px_io *io, const phx_tensor *dy, const phx_tensor **g, phx_tensor **d);
void px_io_free(px_io *io);

/* Whether dy can be the gradient of out: a float tensor of out's shape. */
bool px_dy_fits(const phx_tensor *dy, const phx_tensor *out);
/* The EINVAL for a dy that does not fit the last forward's output out. */
phx_status px_dy_mismatch(const char *who, const phx_tensor *dy, const phx_tensor *out);

/* The weight operand of a product in compute dtype dt: w's f32 value, or
 * its cast kept in wc and refreshed only when w's version moved past
 * *wc_version (UINT64_MAX: none yet), i.e. once per optimizer step. NULL
 * with *st on failure. */
const phx_tensor *px_weight_operand(px_buf *wc, uint64_t *wc_version, phx_param *w, phx_dtype dt, phx_status *st);
/* PHX_EINVAL naming both devices when x and w are on different ones. */
phx_status px_check_same_device(const char *who, const phx_tensor *x, const phx_tensor *w);

/* Registers an f32 parameter (dim) filled with v; NULL with
 * phx_last_error. */
phx_param *px_add_filled_param(phx_module *m, const char *name, int64_t dim, double v);

/* The end of a clone slot: gives clone, a fresh module of self's type and
 * shapes, self's device and parameter values. clone itself when self has
 * no parameters of its own; NULL (clone freed) on failure. */
phx_module *px_module_clone_values(phx_module *clone, const phx_module *self);
#endif
