/* Outputs a module's next forward must not write over
 * (doc/guide/autograd.md, "A module called again before its backward").
 * Before each phx_module_forward the module decides what happens to its
 * last output: while that output's graph has not run its backward and
 * the scope it was made in is still open, the scope keeps it; when it was
 * made within the outermost forward still running, a forward-only
 * module's call scope open then keeps it; when no scope of this thread
 * holds it, or the new input is that output (m(m(x))), the module keeps
 * it until its next call. Its buffers
 * (px_buf_get, Flatten's view) and a forward-only module's call tensors
 * then go to the keeper instead of being reused. An output whose last
 * reference the module drops is marked freed (px_tensor_free_marked), so
 * that a caller still holding it is refused. */
#include "config.h"
#include <stdatomic.h>
#include "src/autograd/node-impl.h"
#include "src/base/util.h"
#include "src/modules/module-impl.h"

enum { KEEP_MAX = 64 }; /* nested forwards tracked; deeper ones keep nothing */

typedef struct keep {
    const phx_tensor *t;
    phx_module *m;
    bool handed; /* t went to its keeper (which holds it alive) */
} keep;

static _Thread_local keep keeps[KEEP_MAX];
static _Thread_local int n_keeps;
static _Thread_local int depth; /* phx_module_forward calls running on this thread */
static _Thread_local px_scope_id user_scope; /* the scope the outermost one runs in */
static _Thread_local uint64_t top_call; /* the outermost one's number */

/* The number of the outermost forward running around this thread's
 * innermost one (0: it is the outermost). */
static uint64_t caller_id(void)
{
    return depth >= 2 ? top_call : 0;
}

/* A child run on its own whose last output is (a view of which is) a
 * container's pending output (v1 = Sequential(lin, Flatten)(x1), then
 * lin(x2)): the container's scope takes a reference to that output now,
 * and the child's buffers holding its memory write elsewhere. */
static void keep_ancestors(const phx_module *m, const phx_tensor *last)
{
    for (phx_module *p = m->parent; p; p = p->parent) {
        phx_tensor *o = p->last_out;
        if (!o || o->storage != last->storage || !px_module_output_pending(o) || !px_scope_alive(p->out_scope))
            continue;
        if (px_scope_own_in(p->out_scope, phx_tensor_retain(o))) keeps[n_keeps++] = (keep){o, p, true};
        return;
    }
}

/* What the call before the last handed over. Its output may still be in
 * the caller's hands (a third call with no scope open: y1 = m(x1);
 * y2 = m(x2); y3 = m(x3)), so the handles are marked freed: an operation
 * on one is refused, not run on whatever reuses the handle. */
static void spares_drop(phx_module *m)
{
    while (m->n_spare) px_tensor_free_marked(m->spare[--m->n_spare], phx_module_type(m));
}

int px_module_keep_begin(phx_module *m, const phx_tensor *x)
{
    static atomic_ullong next_call = 1;
    if (depth++ == 0) {
        user_scope = px_scope_current();
        top_call = atomic_fetch_add(&next_call, 1);
    }
    spares_drop(m);
    m->keep = PX_KEEP_NONE;
    const phx_tensor *last = m->last_out;
    bool pending = last && px_module_output_pending(last);
    /* an earlier call within the outermost forward running around this
     * one (a parent calling its child twice, or a child shared with a
     * container inside it): the caller may use both outputs, whatever the
     * grad mode. A forward-only module's call scope open around it then
     * keeps the earlier one (not the user's scope, which may outlive
     * many such calls); else the module keeps it one call longer. */
    bool in_call = last && caller_id() && m->out_caller == caller_id();
    if (pending && px_scope_alive(m->out_scope))
        m->keep = PX_KEEP_SCOPE;
    else if (in_call && px_scope_alive(m->out_inner) && m->out_inner.serial != user_scope.serial) {
        m->out_scope = m->out_inner;
        m->keep = PX_KEEP_SCOPE;
    } else if (pending || in_call || (last && x->storage == last->storage))
        m->keep = PX_KEEP_SPARE; /* no scope, or another thread's, holds it; or it is x */
    int mark = n_keeps;
    if (m->keep != PX_KEEP_NONE && n_keeps < KEEP_MAX)
        keeps[n_keeps++] = (keep){last, m, false};
    else if (last && n_keeps < KEEP_MAX)
        keep_ancestors(m, last);
    return mark;
}

void px_module_keep_end(phx_module *m, int mark, phx_status st, phx_tensor *y)
{
    uint64_t caller = caller_id();
    n_keeps = mark;
    depth--;
    m->keep = PX_KEEP_NONE;
    if (st != PHX_OK || !y) return;
    if (y != m->last_out) {
        /* the earlier output, where this is its last reference: marked,
         * so that a caller still holding it is refused (a forward-only
         * module's output with grad mode off, or after a backward) */
        px_tensor_free_marked(m->last_out, phx_module_type(m));
        m->last_out = phx_tensor_retain(y);
    }
    m->out_scope = user_scope;
    m->out_caller = caller;
    m->out_inner = px_scope_current();
}

phx_status px_module_keep_tensor(phx_module *m, phx_tensor *t)
{
    if (m->keep == PX_KEEP_SCOPE && px_scope_alive(m->out_scope))
        return px_scope_own_in(m->out_scope, t) ? PHX_OK : PHX_ENOMEM;
    return px_scope_take_one(t, &m->spare, &m->n_spare, &m->cap_spare);
}

/* The kept output t is, or shares memory with (a container's output may
 * be Flatten's view of a child's buffer): -1 if none. */
static int kept_index(const phx_tensor *t)
{
    for (int i = n_keeps - 1; t && i >= 0; i--)
        if (keeps[i].t == t || keeps[i].t->storage == t->storage) return i;
    return -1;
}

bool px_module_keeping(const phx_tensor *t)
{
    return kept_index(t) >= 0;
}

phx_status px_module_keep_slot(phx_tensor **slot)
{
    phx_tensor *t = *slot;
    int i = kept_index(t);
    if (i < 0) return PHX_OK;
    *slot = NULL;
    if (keeps[i].t != t || keeps[i].handed) {
        phx_tensor_free(t); /* another handle on the kept memory, which its keeper holds */
        return PHX_OK;
    }
    keeps[i].handed = true;
    return px_module_keep_tensor(keeps[i].m, t);
}

void px_module_keep_free(phx_module *m)
{
    spares_drop(m);
    px_free(m->spare);
    m->spare = NULL;
    m->cap_spare = 0;
    px_tensor_free_marked(m->last_out, phx_module_type(m));
    m->last_out = NULL;
}
