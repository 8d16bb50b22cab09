/* Modules in the recorded graph. A module with a hand-written backward
 * runs with recording suspended and becomes one node whose backward is
 * the module's own (fused, bit for bit as before). A forward-only module
 * (backward slot NULL) runs its forward with recording on; the core
 * differentiates the operations it called. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "src/autograd/node-impl.h"
#include "src/base/util.h"
#include "src/modules/module-impl.h"
#include "src/ops/ops-impl.h"

typedef struct module_node {
    phx_module *m; /* NULL once the module was freed or ran forward again */
    uint64_t call; /* m->calls when recorded */
    bool superseded; /* the module ran forward again after this call */
    bool wrapper; /* a DataParallel or DDP wrapper (it holds its model) */
    char name[64]; /* the module's type: the node's name */
} module_node;

/* Whether the module can still run this call's backward: the engine asks
 * before a sweep runs any node (a module called twice in one graph, or
 * its backward run already, refuses the whole backward unchanged). */
static phx_status module_node_check(px_node *n)
{
    module_node *c = px_node_ctx(n);
    if ((c->superseded || (c->m && c->m->calls != c->call)) && c->wrapper)
        return phx_error(PHX_ESTATE,
                         "backward of %s: the wrapper ran forward again after the call this graph recorded; it "
                         "keeps one call's state (a model shared by several inputs: concatenate them with "
                         "phx_cat into one call and split the output with phx_narrow)",
                         c->name);
    if (c->superseded || (c->m && c->m->calls != c->call))
        return phx_error(PHX_ESTATE,
                         "backward of %s: the module ran forward again after the call this graph recorded; a "
                         "module with a hand-written backward keeps one call's state (call it once per graph, "
                         "or give each use its own module)",
                         c->name);
    if (!c->m) return phx_error(PHX_ESTATE, "backward of %s: the module was freed after its forward", c->name);
    /* the user ran this forward's backward already: a graph's run adds
     * nothing twice; its own rerun (retain_graph) does */
    return px_module_refuse_second_backward(c->m, c->call, true, "phx_backward");
}

/* Runs only in a sweep, whose engine ran module_node_check on this node
 * before any node ran: c->m is there and may run this call's backward. */
static phx_status module_node_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    module_node *c = px_node_ctx(n);
    phx_tensor *dx = NULL;
    bool want = px_node_needs(n, 0);
    phx_status st = px_module_run_backward(c->m, grad, want ? &dx : NULL, false);
    if (st != PHX_OK || !want || !dx) return st;
    /* A module casts its input to its compute dtype (an f32 input with a
     * history into an fp16 Linear: a reshape, a mean) and gives dx in
     * that dtype; the gradient goes back through the cast, as autocast's
     * recorded cast does in PyTorch. */
    phx_tensor *g = phx_tensor_retain(dx);
    if (g && g->dtype != n->in[0].dtype) {
        phx_tensor *c2 = px_tensor_cached("phx_backward", n->in[0].dtype, g->ndim, g->shape, g->storage->device);
        st = c2 ? phx_tensor_cast(c2, g) : PHX_ENOMEM;
        phx_tensor_free(g);
        g = c2;
        if (st != PHX_OK) {
            phx_tensor_free(g);
            return st;
        }
    }
    if (!g) return PHX_ENOMEM;
    in_grads[0] = px_scope_own(g);
    return PHX_OK;
}

static phx_status release_call(phx_module *m);

phx_status px_module_forward_fused(phx_module *m, const phx_tensor *x, phx_tensor **y)
{
    if (px_recording_suspended()) { /* a child of a hand-written parent */
        m->calls++;
        return m->vt->forward(m, x, y);
    }
    phx_status st = release_call(m);
    if (st != PHX_OK) return st;
    int prev = px_recording_suspend();
    st = m->vt->forward(m, x, y);
    px_recording_restore(prev);
    m->calls++;
    if (st != PHX_OK || !*y) return st;
    if ((*y)->grad_fn && (*y)->grad_fn != m->last_node) {
        /* A wrapper (DDP, DataParallel) handing on the output of a
         * forward-only model: that output's graph is the model's, which
         * the wrapper's backward runs. The wrapper's node goes on an
         * alias it keeps until its next forward. */
        phx_tensor *alias = px_tensor_view(*y, 0, (*y)->ndim, (*y)->shape);
        if (!alias || px_scope_take_one(alias, &m->owned, &m->n_owned, &m->cap_owned) != PHX_OK) return PHX_ENOMEM;
        *y = alias;
    } else if (*y != x && !(*y)->param) {
        /* The module's output buffer may carry the last call's history. */
        px_node_unref((*y)->grad_fn);
        (*y)->grad_fn = NULL;
        (*y)->requires_grad = false;
    }
    px_node *n;
    st = px_record_always(m->vt->type_name ? m->vt->type_name : "module", module_node_backward, 1, &x, *y, &n);
    if (st != PHX_OK || !n) return st;
    module_node *c = px_node_ctx(n);
    c->m = m;
    c->call = m->calls;
    c->wrapper = m->wrapped != NULL;
    px_node_set_check(n, module_node_check);
    snprintf(c->name, sizeof c->name, "%s", phx_module_type(m));
    n->name = c->name;
    /* The module remembers its last node, to cut it loose when freed. */
    if (m->last_node) {
        module_node *old = px_node_ctx(m->last_node);
        if (old->m == m) old->m = NULL, old->superseded = true;
        px_node_unref(m->last_node);
    }
    m->last_node = px_node_retain(n);
    return PHX_OK;
}

bool px_module_output_pending(const phx_tensor *t)
{
    px_node *n = t ? t->grad_fn : NULL;
    if (!n || n->freed) return false;
    if (n->fn != module_node_backward) return true;
    const module_node *c = px_node_ctx(n);
    return c->m && !c->superseded && c->m->calls == c->call && c->m->backward_call != c->call;
}

/* Drops t (a reference of the last call), or hands it to the keeper this
 * call chose (src/modules/module-keep.c); the first failure stays in *st. */
static void release_one(phx_module *m, phx_tensor *t, phx_status *st)
{
    phx_status s = PHX_OK;
    if (m->keep == PX_KEEP_NONE)
        phx_tensor_free(t);
    else if (t)
        s = px_module_keep_tensor(m, t);
    if (*st == PHX_OK) *st = s;
}

/* The last call's tensors, newest first, before the next call. */
static phx_status release_call(phx_module *m)
{
    phx_status st = PHX_OK;
    while (m->n_owned) release_one(m, m->owned[--m->n_owned], &st);
    release_one(m, m->last_x, &st);
    release_one(m, m->last_y, &st);
    m->last_x = m->last_y = NULL;
    return st;
}

phx_status px_module_forward_traced(phx_module *m, const phx_tensor *x, phx_tensor **y)
{
    phx_status rel = release_call(m);
    if (rel != PHX_OK) return rel;
    m->calls++;
    phx_scope *s = phx_scope_begin();
    if (!s) return PHX_ENOMEM;
    int prev = px_recording_resume();
    const phx_tensor *in = x;
    phx_tensor *cap = NULL;
    if (px_recording() && !x->requires_grad && phx_dtype_is_float(x->dtype)) {
        /* A leaf standing for the input, so phx_module_backward can give
         * dx; its gradient is computed only when dx is asked for. */
        cap = px_tensor_view(x, 0, x->ndim, x->shape);
        if (!cap) {
            px_recording_restore(prev);
            phx_scope_end(s);
            return PHX_ENOMEM;
        }
        cap->requires_grad = cap->capture = true;
        in = cap;
    }
    *y = NULL;
    phx_dtype cast = px_autocast_set(m->compute_dtype);
    phx_status st = m->vt->forward(m, in, y);
    px_autocast_set(cast);
    px_recording_restore(prev);
    if (st == PHX_OK && !*y)
        st = phx_error(PHX_EINTERNAL, "%s: forward returned PHX_OK without an output", phx_module_type(m));
    phx_status kept = px_scope_take(s, &m->owned, &m->n_owned, &m->cap_owned);
    if (st == PHX_OK) st = kept;
    if (st != PHX_OK) {
        phx_tensor_free(cap);
        release_call(m);
        *y = NULL;
        return st;
    }
    m->last_x = cap ? cap : phx_tensor_retain((phx_tensor *)x);
    m->last_y = phx_tensor_retain(*y);
    return PHX_OK;
}

phx_status px_module_backward_traced(phx_module *m, const phx_tensor *dy, phx_tensor **dx)
{
    if (!m->last_y)
        return phx_error(PHX_ESTATE,
                         "phx_module_backward: %s has no forward to differentiate (call "
                         "phx_module_forward first, with grad mode on)",
                         phx_module_type(m));
    if (!m->last_y->requires_grad)
        return phx_error(PHX_ESTATE,
                         "phx_module_backward: %s's last forward recorded nothing (grad mode was off, or its "
                         "output depends on no parameter and no input that requires a gradient)",
                         phx_module_type(m));
    phx_tensor *x = m->last_x;
    if (dx && x->capture) phx_tensor_zero_grad(x);
    const phx_tensor *prev = px_engine_want_capture(dx ? x : NULL);
    /* under a wrapper inside a backward that keeps its graph (retain_graph),
     * this one keeps its own too, for that backward's next run */
    phx_status st = phx_backward_retain(m->last_y, dy, px_backward_retaining());
    px_engine_want_capture(prev);
    if (st == PHX_OK && dx) *dx = x->capture ? phx_tensor_grad(x) : NULL;
    return st;
}

void px_module_autograd_free(phx_module *m)
{
    m->keep = PX_KEEP_NONE;
    release_call(m);
    px_module_keep_free(m);
    px_free(m->owned);
    m->owned = NULL;
    m->cap_owned = 0;
    if (m->last_node) {
        module_node *c = px_node_ctx(m->last_node);
        if (c->m == m) c->m = NULL;
        px_node_unref(m->last_node);
        m->last_node = NULL;
    }
}
