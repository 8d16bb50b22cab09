/* Backward: the nodes reachable from the root, run newest first (a node's
 * consumers were all recorded after it, so every gradient of its output
 * has arrived when its turn comes), gradients summed per node and into
 * leaves, and each parameter announced (phx_param_grad_ready) the moment
 * the last node that uses it has run. */
#include "config.h"
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "src/autograd/node-impl.h"
#include "src/base/util.h"
#include "src/modules/module-impl.h"
#include "src/tensor/device-impl.h"

/* ---- Leaves ---- */

phx_status phx_tensor_set_requires_grad(phx_tensor *t, bool on)
{
    if (!t) return phx_error(PHX_EINVAL, "phx_tensor_set_requires_grad: tensor is NULL");
    if (px_tensor_live("phx_tensor_set_requires_grad", "the tensor", t) != PHX_OK) return PHX_ESTATE;
    if (t->grad_fn)
        return phx_error(PHX_EINVAL,
                         "phx_tensor_set_requires_grad: the tensor was made by %s, expected a leaf (use "
                         "phx_tensor_detach for a leaf with the same values)",
                         t->grad_fn->name);
    if (on && !phx_dtype_is_float(t->dtype))
        return phx_error(PHX_EINVAL,
                         "phx_tensor_set_requires_grad: the tensor is %s, expected f32, f16 or bf16 (only "
                         "floating-point tensors have gradients)",
                         phx_dtype_name(t->dtype));
    t->requires_grad = on;
    return PHX_OK;
}

bool phx_tensor_requires_grad(const phx_tensor *t)
{
    return t && t->requires_grad;
}

phx_tensor *phx_tensor_grad(const phx_tensor *t)
{
    if (!t || t->grad_fn) return NULL;
    if (t->param) return phx_param_grad(t->param);
    return t->grad;
}

phx_status phx_tensor_zero_grad(phx_tensor *t)
{
    if (!t) return phx_error(PHX_EINVAL, "phx_tensor_zero_grad: tensor is NULL");
    if (px_tensor_live("phx_tensor_zero_grad", "the tensor", t) != PHX_OK) return PHX_ESTATE;
    if (t->param) return phx_tensor_fill(phx_param_grad(t->param), 0.0);
    phx_tensor_free(t->grad);
    t->grad = NULL;
    return PHX_OK;
}

const char *phx_tensor_grad_fn(const phx_tensor *t)
{
    return t && t->grad_fn ? t->grad_fn->name : NULL;
}

phx_tensor *phx_tensor_detach(const phx_tensor *t)
{
    if (!t) {
        if (!phx_last_error()[0]) phx_error(PHX_EINVAL, "phx_tensor_detach: tensor is NULL");
        return NULL;
    }
    return px_scope_own(px_tensor_view(t, 0, t->ndim, t->shape));
}

void px_tensor_bump_version(const phx_tensor *t)
{
    if (t) atomic_fetch_add(&t->storage->version, 1);
}

phx_param *px_tensor_param(const phx_tensor *t)
{
    return t ? t->param : NULL;
}

void px_tensor_set_param(phx_tensor *t, phx_param *p)
{
    t->param = p;
    t->requires_grad = p != NULL;
}

void px_tensor_autograd_drop(phx_tensor *t)
{
    if (t->grad_fn) px_node_unref(t->grad_fn);
    t->grad_fn = NULL;
    phx_tensor_free(t->grad);
    t->grad = NULL;
}

/* ---- One sweep ---- */

/* Forward-only modules' captured inputs (capture set) get a gradient only
 * in the backward of phx_module_backward that asked for that dx. */
static _Thread_local const phx_tensor *wanted_capture;

bool px_leaf_wanted(const phx_tensor *leaf)
{
    return leaf->requires_grad && (!leaf->capture || leaf == wanted_capture);
}

const phx_tensor *px_engine_want_capture(const phx_tensor *leaf)
{
    const phx_tensor *prev = wanted_capture;
    wanted_capture = leaf;
    return prev;
}

/* Per-thread arrays of the sweeps in progress, by nesting depth (a module
 * with a hand-written backward may run a forward-only child's backward
 * from inside a sweep). Kept across steps: warm sweeps allocate nothing. */
typedef struct px_sweep {
    px_node **nodes;
    size_t n, cap;
    phx_tensor **leaves; /* leaves reached, each once */
    size_t n_leaves, cap_leaves;
} px_sweep;

#define PX_MAX_NESTING 16
static _Thread_local px_sweep sweeps[PX_MAX_NESTING];
static _Thread_local int depth;
/* each sweep's retain_graph */
static _Thread_local bool retaining[PX_MAX_NESTING];
static _Thread_local bool inherited; /* a pool thread working for a sweep */

bool px_backward_retaining(void)
{
    return depth > 0 ? retaining[depth - 1] : inherited;
}

bool px_backward_inherit(bool retain)
{
    bool prev = inherited;
    inherited = retain;
    return prev;
}

static atomic_ullong next_visit = 1;
static pthread_key_t sweeps_key;
static pthread_once_t sweeps_once = PTHREAD_ONCE_INIT;

static void sweeps_release(void *unused)
{
    (void)unused;
    for (int i = 0; i < PX_MAX_NESTING; i++) {
        px_free(sweeps[i].nodes);
        px_free(sweeps[i].leaves);
        sweeps[i] = (px_sweep){0};
    }
}

__attribute__((destructor)) static void sweeps_release_at_exit(void)
{
    sweeps_release(NULL);
}

static void sweeps_key_make(void)
{
    pthread_key_create(&sweeps_key, sweeps_release);
}

static bool push(void **arr, size_t *n, size_t *cap, void *v)
{
    if (*n == *cap) {
        if (!*arr) { /* this thread's first: free its arrays when it ends */
            pthread_once(&sweeps_once, sweeps_key_make);
            pthread_setspecific(sweeps_key, sweeps);
        }
        size_t c = *cap ? 2 * *cap : 256;
        void **a = px_realloc(*arr, c * sizeof *a);
        if (!a) return false;
        *arr = a;
        *cap = c;
    }
    ((void **)*arr)[(*n)++] = v;
    return true;
}

static int newest_first(const void *a, const void *b)
{
    unsigned long long x = (*(px_node *const *)a)->seq, y = (*(px_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every node reachable from root (each once) and every wanted leaf, with
 * each leaf's count of uses by reached nodes in its pending field. */
static phx_status reach(px_sweep *w, px_node *root, unsigned long long visit)
{
    w->n = w->n_leaves = 0;
    root->visit = visit;
    if (!push((void **)&w->nodes, &w->n, &w->cap, root)) goto oom;
    for (size_t i = 0; i < w->n; i++) {
        px_node *n = w->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            px_node_input *e = &n->in[j];
            if (e->node && e->node->visit != visit) {
                e->node->visit = visit;
                if (!push((void **)&w->nodes, &w->n, &w->cap, e->node)) goto oom;
            } else if (e->leaf && px_leaf_wanted(e->leaf)) {
                if (e->leaf->visit != visit) {
                    e->leaf->visit = visit;
                    e->leaf->pending = 0;
                    if (!push((void **)&w->leaves, &w->n_leaves, &w->cap_leaves, e->leaf)) goto oom;
                }
                e->leaf->pending++;
            }
        }
    }
    qsort(w->nodes, w->n, sizeof *w->nodes, newest_first);
    return PHX_OK;
oom:
    return phx_error(PHX_ENOMEM, "phx_backward: out of memory listing %zu graph nodes", w->n);
}

/* *acc <- *acc + g (a new tensor: *acc may be shared with another node's
 * gradient or a saved tensor), or g itself when *acc is empty. */
static phx_status sum_into(phx_tensor **acc, const phx_tensor *g)
{
    if (!*acc) {
        *acc = phx_tensor_retain((phx_tensor *)g);
        return PHX_OK;
    }
    phx_tensor *s =
        px_tensor_cached("phx_backward", (*acc)->dtype, (*acc)->ndim, (*acc)->shape, (*acc)->storage->device);
    if (!s) return PHX_ENOMEM;
    const phx_kernels_v1 *k = px_device_kernels(s->storage->device);
    phx_status st =
        k->add(s->storage->device.index, s->numel, px_tensor_ptr(*acc), px_tensor_ptr(g), px_tensor_ptr(s), s->dtype);
    if (st != PHX_OK) {
        phx_tensor_free(s);
        return st;
    }
    phx_tensor_free(*acc);
    *acc = s;
    return PHX_OK;
}

/* A leaf's gradient arrives: added into its parameter's gradient or its
 * own (created at the first), converted to f32 for a parameter. */
static phx_status leaf_add(phx_tensor *leaf, const phx_tensor *g)
{
    phx_tensor *dst = leaf->param ? phx_param_grad(leaf->param) : leaf->grad;
    if (!dst) {
        dst = px_tensor_cached("phx_backward", leaf->dtype, leaf->ndim, leaf->shape, leaf->storage->device);
        if (!dst) return PHX_ENOMEM;
        leaf->grad = dst;
        if (!leaf->grad_fn && phx_tensor_fill(dst, 0.0) != PHX_OK) return PHX_EINTERNAL;
    }
    return phx_tensor_axpby(1.0f, g, 1.0f, dst);
}

static phx_status check_grad(const px_node *n, int i, const phx_tensor *g)
{
    const px_node_input *e = &n->in[i];
    bool same = g->ndim == e->ndim && !memcmp(g->shape, e->shape, (size_t)e->ndim * sizeof *e->shape);
    if (same && g->dtype == e->dtype) return PHX_OK;
    char a[64], b[64];
    return phx_error(PHX_EINTERNAL,
                     "backward of %s: the gradient of input %d is %s %s, expected the input's %s %s (a bug in %s's "
                     "backward)",
                     n->name, i, phx_dtype_name(g->dtype), phx_tensor_shape_str(g, a, sizeof a),
                     phx_dtype_name(e->dtype), px_shape_str(e->ndim, e->shape, b, sizeof b), n->name);
}

/* One node: its backward, then each input's gradient to the node that
 * made it or into the leaf. */
static phx_status run_node(px_node *n, bool retain)
{
    phx_tensor *in_grads[PX_NODE_INLINE], **ig = in_grads;
    if (n->n_in > PX_NODE_INLINE) {
        ig = px_calloc((size_t)n->n_in, sizeof *ig);
        if (!ig) return phx_error(PHX_ENOMEM, "backward of %s: out of memory", n->name);
    } else
        memset(in_grads, 0, sizeof in_grads);
    phx_status st = PHX_OK;
    phx_scope *scope = phx_scope_begin();
    if (!scope) st = PHX_ENOMEM;
    if (!st && n->grad) {
        if (n->freed)
            st = phx_error(PHX_ESTATE,
                           "phx_backward: the graph through %s was freed by an earlier backward (call "
                           "phx_backward_retain with retain_graph to run backward twice)",
                           n->name);
        else
            st = n->fn(n, n->grad, ig);
    }
    for (int i = 0; i < n->n_in; i++) {
        px_node_input *e = &n->in[i];
        phx_tensor *g = ig[i];
        if (!st && g) st = check_grad(n, i, g);
        if (!st && g && e->node && e->node->visit == n->visit) st = sum_into(&e->node->grad, g);
        if (e->leaf && px_leaf_wanted(e->leaf)) {
            if (!st && g) st = leaf_add(e->leaf, g);
            /* The last use announces the leaf, with or without a gradient
             * this time (a parameter used but not reached still is final). */
            if (!st && --e->leaf->pending == 0 && e->leaf->param) phx_param_grad_ready(e->leaf->param);
        }
    }
    phx_scope_end(scope);
    if (ig != in_grads) px_free(ig);
    phx_tensor_free(n->grad);
    n->grad = NULL;
    if (!retain) px_node_release_saved(n);
    return st;
}

phx_status phx_backward_retain(const phx_tensor *t, const phx_tensor *grad, bool retain_graph)
{
    const char *fn = "phx_backward";
    if (!t) return phx_last_error()[0] ? PHX_EINVAL : phx_error(PHX_EINVAL, "%s: tensor is NULL", fn);
    if (px_tensor_live(fn, "the tensor", t) != PHX_OK || px_tensor_live(fn, "grad", grad) != PHX_OK) return PHX_ESTATE;
    char a[64], b[64];
    if (!t->requires_grad && t->nondiff)
        return phx_error(PHX_EINVAL,
                         "%s: the tensor %s does not require a gradient: it was made through %s, which is not "
                         "differentiable (expected differentiable operations from the leaves to the loss)",
                         fn, phx_tensor_shape_str(t, a, sizeof a), t->nondiff);
    if (!t->requires_grad)
        return phx_error(PHX_EINVAL,
                         "%s: the tensor %s does not require a gradient: no input of the operations that made it "
                         "requires one, or grad mode was off when they ran",
                         fn, phx_tensor_shape_str(t, a, sizeof a));
    if (!grad && t->numel != 1)
        return phx_error(PHX_EINVAL,
                         "%s: the tensor %s has %" PRId64 " elements; a gradient is implicit only for one element "
                         "(use phx_backward_with)",
                         fn, phx_tensor_shape_str(t, a, sizeof a), t->numel);
    if (grad &&
        (grad->ndim != t->ndim || memcmp(grad->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) ||
         !phx_dtype_is_float(grad->dtype) || !phx_device_equal(grad->storage->device, t->storage->device)))
        return phx_error(
            PHX_EINVAL, "%s: grad is %s %s, expected a float tensor of the tensor's shape %s on its device", fn,
            phx_dtype_name(grad->dtype), phx_tensor_shape_str(grad, a, sizeof a), phx_tensor_shape_str(t, b, sizeof b));
    if (depth == PX_MAX_NESTING)
        return phx_error(PHX_ESTATE, "%s: backward nested %d deep inside modules' backward", fn, depth);
    bool mode = phx_set_grad_enabled(false);
    phx_tensor *seed = (phx_tensor *)grad;
    phx_status st = PHX_OK;
    if (!seed) {
        seed = px_tensor_cached(fn, t->dtype, t->ndim, t->shape, t->storage->device);
        if (!seed || (st = phx_tensor_fill(seed, 1.0)) != PHX_OK) st = st ? st : PHX_ENOMEM;
    } else if (seed->dtype != t->dtype) {
        /* an f32 loss gradient for a bf16 output (mixed precision): the
         * gradient flows in the output's dtype */
        seed = px_tensor_cached(fn, t->dtype, t->ndim, t->shape, t->storage->device);
        if (!seed || (st = phx_tensor_cast(seed, grad)) != PHX_OK) st = st ? st : PHX_ENOMEM;
    } else
        phx_tensor_retain(seed);
    if (!st && !t->grad_fn) {
        if (px_leaf_wanted(t)) st = leaf_add((phx_tensor *)t, seed);
        if (!st && t->param) phx_param_grad_ready(t->param);
    } else if (!st) {
        px_node *root = px_node_retain(t->grad_fn);
        retaining[depth] = retain_graph;
        px_sweep *w = &sweeps[depth++];
        unsigned long long visit = atomic_fetch_add(&next_visit, 1);
        st = reach(w, root, visit);
        /* what would fail midway fails first, before any gradient moved */
        for (size_t i = 0; i < w->n && !st; i++)
            if (w->nodes[i]->check) st = w->nodes[i]->check(w->nodes[i]);
        if (!st) root->grad = phx_tensor_retain(seed);
        for (size_t i = 0; i < w->n && !st; i++) st = run_node(w->nodes[i], retain_graph);
        if (st) /* drop what a failed sweep left behind */
            for (size_t i = 0; i < w->n; i++) {
                phx_tensor_free(w->nodes[i]->grad);
                w->nodes[i]->grad = NULL;
            }
        depth--;
        px_node_unref(root);
    }
    phx_tensor_free(seed);
    phx_set_grad_enabled(mode);
    return st;
}

phx_status phx_backward(const phx_tensor *loss)
{
    return phx_backward_retain(loss, NULL, false);
}

phx_status phx_backward_with(const phx_tensor *t, const phx_tensor *grad)
{
    if (!grad && t) return phx_error(PHX_EINVAL, "phx_backward_with: grad is NULL (use phx_backward for a scalar)");
    return phx_backward_retain(t, grad, false);
}
