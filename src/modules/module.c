/* Modules: the object behind the vtable, parameter registration, dotted
 * names in PyTorch's named_parameters() order, the gradient-ready hook,
 * train/eval, clone, to(device), precision, and the reusable buffers the
 * built-in modules keep their activations in. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "src/modules/module-impl.h"
#include "src/autograd/autograd-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"
#include "phalanx/precision.h"

/* ---- buffers -------------------------------------------------------- */

phx_status px_buf_hand_over(px_buf *b, int64_t *cap)
{
    if (!b->view || !px_module_keeping(b->view)) return PHX_OK;
    if (cap) *cap = b->store ? b->store->numel : 1;
    phx_tensor_free(b->store);
    b->store = NULL;
    return px_module_keep_slot(&b->view);
}

phx_status px_buf_get(px_buf *b, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev, phx_tensor **out)
{
    /* the last call's output, or a view of it, kept: its keeper takes it
     * and its memory */
    int64_t kept = 0;
    phx_status hs = px_buf_hand_over(b, &kept);
    if (hs != PHX_OK) return hs;
    phx_tensor *v = b->view;
    if (v && v->dtype == dt && v->ndim == ndim && phx_device_equal(v->storage->device, dev) &&
        memcmp(v->shape, shape, (size_t)ndim * sizeof *shape) == 0) {
        *out = v;
        return PHX_OK;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    phx_tensor *s = b->store;
    if (!s || s->dtype != dt || !phx_device_equal(s->storage->device, dev) || s->numel < numel) {
        int64_t cap = numel > kept ? numel : kept > 0 ? kept : 1;
        /* a replacement for kept memory has its capacity and comes from
         * the storage cache, to which the kept one returns when its keeper
         * lets it go: a loop that keeps an output on some steps, with
         * batches of several sizes, allocates nothing once warm */
        phx_tensor *ns = kept ? px_tensor_cached("module buffer", dt, 1, &cap, dev) : phx_tensor_new(dt, 1, &cap, dev);
        if (!ns)
            return phx_error(PHX_ENOMEM, "module buffer: cannot allocate %lld elements of %s: %s", (long long)cap,
                             phx_dtype_name(dt), phx_last_error());
        phx_tensor_free(b->view);
        phx_tensor_free(b->store);
        b->view = NULL;
        b->store = s = ns;
    }
    phx_tensor *nv = px_tensor_view(s, 0, ndim, shape);
    if (!nv) return PHX_ENOMEM;
    phx_tensor_free(b->view);
    b->view = nv;
    *out = nv;
    return PHX_OK;
}

phx_status px_buf_like(px_buf *b, phx_dtype dt, const phx_tensor *t, int64_t last, phx_tensor **out)
{
    int64_t shape[PHX_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (t->ndim > 0) shape[t->ndim - 1] = last;
    return px_buf_get(b, dt, t->ndim, shape, t->storage->device, out);
}

void px_buf_free(px_buf *b)
{
    phx_tensor_free(b->view);
    phx_tensor_free(b->store);
    b->view = b->store = NULL;
}

phx_status px_as_dtype(px_buf *b, const phx_tensor *x, phx_dtype dt, const phx_tensor **out)
{
    if (x->dtype == dt) {
        *out = x;
        return PHX_OK;
    }
    phx_tensor *c;
    phx_status st = px_buf_get(b, dt, x->ndim, x->shape, x->storage->device, &c);
    if (st == PHX_OK) st = phx_tensor_cast(c, x);
    *out = c;
    return st;
}

phx_status px_check_float_input(const char *who, const phx_tensor *x)
{
    if (!x) return phx_error(PHX_EINVAL, "%s: input is NULL", who);
    if (!phx_dtype_is_float(x->dtype))
        return phx_error(PHX_EINVAL, "%s: input has dtype %s, expected f32, f16 or bf16", who,
                         phx_dtype_name(x->dtype));
    return PHX_OK;
}

/* ---- construction --------------------------------------------------- */

phx_module *phx_module_new(const phx_module_vtable *vt, void *ctx)
{
    phx_module_vtable own;
    memset(&own, 0, sizeof own);
    if (vt && px_abi_in(&own, sizeof own, vt, "phx_module_new", "phx_module_vtable", "PHX_MODULE_VTABLE_SIZE"))
        return NULL;
    return px_module_new_typed(vt ? &own : NULL, vt, ctx);
}

void px_module_set_vtable(phx_module *m, const phx_module_vtable *vt)
{
    m->vtab = *vt;
    m->vt = &m->vtab;
    m->type = vt;
}

phx_module *px_module_new_typed(const phx_module_vtable *vt, const void *type, void *ctx)
{
    if (!vt || !vt->forward || !vt->free) {
        phx_error(PHX_EINVAL, "phx_module_new: vtable %s lacks a required slot (forward, free)",
                  vt && vt->type_name ? vt->type_name : "(null)");
        return NULL;
    }
    phx_module *m = px_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->vtab = *vt;
    m->vt = &m->vtab;
    m->type = type;
    m->ctx = ctx;
    m->refs = 1;
    m->training = true;
    m->compute_dtype = PHX_F32;
    return m;
}

void *phx_module_ctx(const phx_module *m)
{
    return m ? m->ctx : NULL;
}
const phx_module_vtable *phx_module_vtable_of(const phx_module *m)
{
    return m ? m->type : NULL;
}
const char *phx_module_type(const phx_module *m)
{
    return m && m->vt->type_name ? m->vt->type_name : "?";
}
phx_dtype phx_module_compute_dtype(const phx_module *m)
{
    return m ? m->compute_dtype : PHX_F32;
}
bool phx_module_is_training(const phx_module *m)
{
    return m ? m->training : false;
}
size_t phx_module_num_children(const phx_module *m)
{
    return m ? m->n_children : 0;
}
phx_module *phx_module_find_child(const phx_module *m, const char *name)
{
    if (!m || !name) return NULL;
    for (size_t i = 0; i < m->n_children; i++)
        if (!strcmp(m->children[i].name, name)) return m->children[i].m;
    return NULL;
}

phx_module *phx_module_child(const phx_module *m, size_t i)
{
    return m && i < m->n_children ? m->children[i].m : NULL;
}

static void invalidate_flat(phx_module *m)
{
    px_module_buffers_changed(m);
    for (; m; m = m->parent) m->flat_valid = false;
}

static bool name_ok(const char *who, const char *name)
{
    if (!name || !*name || strchr(name, '.')) {
        phx_error(PHX_EINVAL, "%s: name '%s' is empty or contains a dot", who, name ? name : "(null)");
        return false;
    }
    return true;
}

static bool name_taken(const phx_module *m, const char *name)
{
    for (size_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i]->name, name) == 0) return true;
    for (size_t i = 0; i < m->n_children; i++)
        if (strcmp(m->children[i].name, name) == 0) return true;
    return px_module_has_buffer(m, name);
}

static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return true;
    size_t nc = *cap ? *cap * 2 : 4;
    void *p = px_realloc(*arr, nc * elem);
    if (!p) return false;
    *arr = p;
    *cap = nc;
    return true;
}

phx_param *phx_module_add_param(phx_module *m, const char *name, phx_tensor *value)
{
    if (!m || !value) {
        phx_error(PHX_EINVAL, "phx_module_add_param: %s is NULL", m ? "value" : "module");
        return NULL;
    }
    if (px_tensor_live("phx_module_add_param", "value", value) != PHX_OK) return NULL;
    if (!name_ok("phx_module_add_param", name)) return NULL;
    if (value->dtype != PHX_F32) {
        phx_error(PHX_EINVAL, "phx_module_add_param: '%s' has dtype %s, parameters are f32", name,
                  phx_dtype_name(value->dtype));
        return NULL;
    }
    if (name_taken(m, name)) {
        phx_error(PHX_EINVAL, "phx_module_add_param: %s already has a member named '%s'", phx_module_type(m), name);
        return NULL;
    }
    if (!grow((void **)&m->params, &m->cap_params, m->n_params, sizeof *m->params)) return NULL;
    phx_param *p = px_calloc(1, sizeof *p);
    char *nm = px_strdup(name);
    phx_tensor *g = phx_tensor_zeros(PHX_F32, value->ndim, value->shape, value->storage->device);
    if (!p || !nm || !g) {
        px_free(p);
        px_free(nm);
        phx_tensor_free(g);
        return NULL;
    }
    p->name = nm;
    p->value = value;
    px_tensor_set_param(value, p);
    p->grad = g;
    p->owner = m;
    m->params[m->n_params++] = p;
    invalidate_flat(m);
    return p;
}

phx_status phx_module_add_child(phx_module *m, const char *name, phx_module *child)
{
    if (!m || !child) return phx_error(PHX_EINVAL, "phx_module_add_child: %s is NULL", m ? "child" : "module");
    if (!name_ok("phx_module_add_child", name)) return PHX_EINVAL;
    if (child == m || child->parent)
        return phx_error(PHX_EINVAL, "phx_module_add_child: '%s' already belongs to a module", name);
    if (name_taken(m, name))
        return phx_error(PHX_EINVAL, "phx_module_add_child: %s already has a member named '%s'", phx_module_type(m),
                         name);
    if (!grow((void **)&m->children, &m->cap_children, m->n_children, sizeof *m->children)) return PHX_ENOMEM;
    char *nm = px_strdup(name);
    if (!nm) return PHX_ENOMEM;
    m->children[m->n_children].name = nm;
    m->children[m->n_children].m = child;
    m->n_children++;
    child->parent = m;
    invalidate_flat(m);
    return PHX_OK;
}

static void free_flat(phx_module *m)
{
    for (size_t i = 0; i < m->n_flat; i++) px_free(m->flat_names[i]);
    px_free(m->flat_names);
    px_free(m->flat);
    m->flat = NULL;
    m->flat_names = NULL;
    m->n_flat = 0;
    m->flat_valid = false;
}

void phx_module_free(phx_module *m)
{
    if (!m || --m->refs > 0) return;
    px_module_autograd_free(m);
    m->vt->free(m);
    for (size_t i = 0; i < m->n_children; i++) {
        m->children[i].m->parent = NULL;
        phx_module_free(m->children[i].m);
        px_free(m->children[i].name);
    }
    for (size_t i = 0; i < m->n_params; i++) {
        phx_param *p = m->params[i];
        px_tensor_set_param(p->value, NULL); /* a graph may still hold the value */
        phx_tensor_free(p->value);
        phx_tensor_free(p->grad);
        px_free(p->name);
        px_free(p);
    }
    free_flat(m);
    px_module_free_buffers(m);
    px_free(m->children);
    px_free(m->params);
    phx_module *wrapped = m->wrapped;
    px_free(m);
    phx_module_free(wrapped);
}

/* ---- the flat list ---------------------------------------------------- */

static size_t count_params(const phx_module *m)
{
    size_t n = m->n_params;
    for (size_t i = 0; i < m->n_children; i++) n += count_params(m->children[i].m);
    return n;
}

static bool fill_flat(phx_module *root, const phx_module *m, const char *prefix, size_t *k)
{
    for (size_t i = 0; i < m->n_params; i++) {
        size_t len = strlen(prefix) + strlen(m->params[i]->name) + 1;
        char *s = px_malloc(len);
        if (!s) return false;
        snprintf(s, len, "%s%s", prefix, m->params[i]->name);
        root->flat[*k] = m->params[i];
        root->flat_names[(*k)++] = s;
    }
    for (size_t i = 0; i < m->n_children; i++) {
        size_t len = strlen(prefix) + strlen(m->children[i].name) + 2;
        char *pre = px_malloc(len);
        if (!pre) return false;
        snprintf(pre, len, "%s%s.", prefix, m->children[i].name);
        bool ok = fill_flat(root, m->children[i].m, pre, k);
        px_free(pre);
        if (!ok) return false;
    }
    return true;
}

static bool ensure_flat(const phx_module *cm)
{
    phx_module *m = (phx_module *)cm; /* the cache is logically const */
    if (m->flat_valid) return true;
    free_flat(m);
    size_t n = count_params(m);
    m->flat = px_calloc(n ? n : 1, sizeof *m->flat);
    m->flat_names = px_calloc(n ? n : 1, sizeof *m->flat_names);
    size_t k = 0;
    if (!m->flat || !m->flat_names || !fill_flat(m, m, "", &k)) {
        m->n_flat = k;
        free_flat(m);
        return false;
    }
    m->n_flat = n;
    m->flat_valid = true;
    return true;
}

size_t phx_module_num_params(const phx_module *m)
{
    return m && ensure_flat(m) ? m->n_flat : 0;
}

phx_param *phx_module_param(const phx_module *m, size_t i)
{
    if (!m || !ensure_flat(m) || i >= m->n_flat) return NULL;
    return m->flat[i];
}

const char *phx_module_param_name(const phx_module *m, size_t i)
{
    if (!m || !ensure_flat(m) || i >= m->n_flat) return NULL;
    return m->flat_names[i];
}

phx_param *phx_module_find_param(const phx_module *m, const char *name)
{
    if (!m || !name || !ensure_flat(m)) return NULL;
    for (size_t i = 0; i < m->n_flat; i++)
        if (strcmp(m->flat_names[i], name) == 0) return m->flat[i];
    return NULL;
}

/* ---- running -------------------------------------------------------- */

phx_status phx_module_forward(phx_module *m, const phx_tensor *x, phx_tensor **y)
{
    if (!m || !x || !y)
        return phx_error(PHX_EINVAL, "phx_module_forward: %s is NULL", !m ? "module" : !x ? "input" : "y");
    if (px_tensor_live("phx_module_forward", "the input", x) != PHX_OK) return PHX_ESTATE;
    if (m->redirect && !m->redirect_off) return phx_module_forward(m->redirect, x, y);
    static atomic_ullong clock = 1;
    int mark = px_module_keep_begin(m, x);
    m->fwd_begin = atomic_fetch_add(&clock, 1);
    phx_status st = m->vt->backward ? px_module_forward_fused(m, x, y) : px_module_forward_traced(m, x, y);
    m->fwd_end = atomic_fetch_add(&clock, 1);
    px_module_keep_end(m, mark, st, st == PHX_OK ? *y : NULL);
    /* inside its parent's forward: the parent's backward will use this
     * call's state. A second call within a hand-written parent's forward
     * leaves the first's count, so that backward is refused; a forward-
     * only parent's graph holds every call. */
    phx_module *p = m->parent;
    if (st == PHX_OK && p && p->fwd_begin > p->fwd_end && (m->parent_call != p->fwd_begin || !p->vt->backward))
        m->parent_call = p->fwd_begin, m->calls_in_parent = m->calls;
    return st;
}

_Thread_local int px_module_backward_depth;

phx_status phx_module_backward(phx_module *m, const phx_tensor *dy, phx_tensor **dx)
{
    if (!m || !dy) return phx_error(PHX_EINVAL, "phx_module_backward: %s is NULL", !m ? "module" : "dy");
    if (px_tensor_live("phx_module_backward", "dy", dy) != PHX_OK) return PHX_ESTATE;
    if (dx) *dx = NULL;
    if (m->redirect && !m->redirect_off) return phx_module_backward(m->redirect, dy, dx);
    if (!m->vt->backward) return px_module_backward_traced(m, dy, dx);
    /* Calls from inside another backward (a container's children; a graph
     * kept with retain_graph) are the caller's to count. */
    bool top = px_module_backward_depth == 0;
    if (top && m->calls > 0) {
        phx_status st = px_module_refuse_second_backward(m, m->calls, false, "phx_module_backward");
        if (st != PHX_OK) return st;
    }
    return px_module_run_backward(m, dy, dx, top);
}

/* A descendant of `top` with a hand-written backward whose last forward
 * ran inside top's last forward, and whose backward the user ran for it
 * already: NULL if none. Forward-only children are searched through (a
 * hand-written grandchild under one), and a child whose last forward was
 * its own, outside top's, is not top's business. */
static const phx_module *child_run_by_user(const phx_module *top, const phx_module *m)
{
    for (size_t i = 0; i < m->n_children; i++) {
        const phx_module *c = m->children[i].m;
        bool inside = c->fwd_begin > top->fwd_begin && c->fwd_end < top->fwd_end;
        if (inside && c->vt->backward && c->calls > 0 && c->backward_by_user && c->backward_call == c->calls) return c;
        const phx_module *g = child_run_by_user(top, c);
        if (g) return g;
    }
    return NULL;
}

/* A descendant that ran inside its parent's last forward, as part of m's
 * last forward, and ran forward again since (on its own): m's backward
 * would use the newer call's state. NULL if none. */
static const phx_module *child_run_again(const phx_module *m)
{
    for (size_t i = 0; i < m->n_children; i++) {
        const phx_module *c = m->children[i].m;
        if (c->parent_call != m->fwd_begin) continue; /* m's last forward did not use it */
        if (c->calls != c->calls_in_parent) return c;
        const phx_module *g = child_run_again(c);
        if (g) return g;
    }
    return NULL;
}

phx_status px_module_refuse_second_backward(const phx_module *m, uint64_t call, bool user_only, const char *who)
{
    if (m->backward_call == call && (!user_only || m->backward_by_user))
        return phx_error(PHX_ESTATE,
                         "%s: %s ran the backward of this %s's last forward already (a second one would add the "
                         "gradients again); run the forward again first",
                         who, m->backward_by_user ? "phx_module_backward" : "a phx_backward through it",
                         phx_module_type(m));
    /* its children run inside its backward: one the user ran already
     * would add its gradients again halfway through */
    const phx_module *c = child_run_by_user(m, m);
    if (c)
        return phx_error(PHX_ESTATE,
                         "%s: phx_module_backward ran the backward of this %s's child %s for its last forward "
                         "already (a second one would add the gradients again); run the forward again first",
                         who, phx_module_type(m), phx_module_type(c));
    if ((c = child_run_again(m)))
        return phx_error(PHX_ESTATE,
                         "%s: this %s's child %s ran forward again after the %s's last forward used it, or twice "
                         "in it (its backward keeps one call's state); run the %s's forward again first",
                         who, phx_module_type(m), phx_module_type(c), phx_module_type(m), phx_module_type(m));
    return PHX_OK;
}

phx_status px_module_run_backward(phx_module *m, const phx_tensor *dy, phx_tensor **dx, bool by_user)
{
    px_module_backward_depth++;
    phx_status st = m->vt->backward(m, dy, dx);
    px_module_backward_depth--;
    if (st == PHX_OK) m->backward_call = m->calls, m->backward_by_user = by_user;
    return st;
}

phx_status phx_module_train(phx_module *m, bool training)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_module_train: module is NULL");
    if (m->vt->set_train) {
        phx_status st = m->vt->set_train(m, training);
        if (st != PHX_OK) return st;
    }
    m->training = training;
    for (size_t i = 0; i < m->n_children; i++) {
        phx_status st = phx_module_train(m->children[i].m, training);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

/* A forward-only module without a context (its forward finds its
 * children by name) is cloned by the core: same vtable, cloned children. */
static bool core_clonable(const phx_module *m)
{
    return !m->vt->clone && !m->vt->backward && !m->ctx;
}

static phx_module *core_clone(const phx_module *m)
{
    phx_module *c = px_module_new_typed(m->vt, m->type, NULL);
    for (size_t i = 0; c && i < m->n_children; i++) {
        phx_module *ch = phx_module_clone(m->children[i].m);
        if (!ch || phx_module_add_child(c, m->children[i].name, ch) != PHX_OK) {
            phx_module_free(ch);
            phx_module_free(c);
            return NULL;
        }
    }
    for (size_t i = 0; c && i < m->n_params; i++) {
        phx_param *p = m->params[i];
        phx_tensor *v = phx_tensor_new(PHX_F32, p->value->ndim, p->value->shape, p->value->storage->device);
        if (!v || phx_tensor_copy(v, p->value) != PHX_OK || !phx_module_add_param(c, p->name, v)) {
            phx_tensor_free(v);
            phx_module_free(c);
            return NULL;
        }
    }
    return c;
}

static const phx_module *find_unclonable(const phx_module *m)
{
    if (!m->vt->clone && !core_clonable(m)) return m;
    for (size_t i = 0; i < m->n_children; i++) {
        const phx_module *u = find_unclonable(m->children[i].m);
        if (u) return u;
    }
    return NULL;
}

void px_module_copy_settings(phx_module *dst, const phx_module *src)
{
    dst->training = src->training;
    dst->compute_dtype = src->compute_dtype;
    dst->precision = src->precision;
    if (dst->vt->set_train) /* a module with its own mode state gets told */
        (void)dst->vt->set_train(dst, dst->training);
    for (size_t i = 0; i < dst->n_children && i < src->n_children; i++)
        px_module_copy_settings(dst->children[i].m, src->children[i].m);
}

phx_module *phx_module_clone(const phx_module *m)
{
    if (!m) {
        px_error_null("phx_module_clone", "module");
        return NULL;
    }
    const phx_module *u = find_unclonable(m);
    if (u) {
        phx_error(PHX_EUNSUPPORTED, "phx_module_clone: module of type %s has no clone slot", phx_module_type(u));
        return NULL;
    }
    phx_module *c = m->vt->clone ? m->vt->clone(m) : core_clone(m);
    if (!c) return NULL;
    size_t n = phx_module_num_params(m);
    bool same = phx_module_num_params(c) == n;
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(phx_module_param_name(c, i), phx_module_param_name(m, i)) == 0 &&
            phx_tensor_same_shape(phx_module_param(c, i)->value, phx_module_param(m, i)->value);
    same = same && phx_module_num_buffers(c) == phx_module_num_buffers(m);
    if (!same) {
        phx_module_free(c);
        phx_error(PHX_EINTERNAL, "phx_module_clone: clone of %s has different parameters or buffers",
                  phx_module_type(m));
        return NULL;
    }
    px_module_copy_settings(c, m);
    return c;
}

phx_status px_module_copy_params(phx_module *dst, const phx_module *src)
{
    if (dst->n_params != src->n_params)
        return phx_error(PHX_EINTERNAL, "clone: %zu parameters, expected %zu", dst->n_params, src->n_params);
    for (size_t i = 0; i < src->n_params; i++) {
        phx_status st = phx_tensor_copy(dst->params[i]->value, src->params[i]->value);
        if (st != PHX_OK) return st;
        dst->params[i]->version++;
    }
    return PHX_OK;
}

phx_status px_module_adopt_params(phx_module *wrapper, const phx_module *model)
{
    size_t n = phx_module_num_params(model);
    wrapper->wrapped = (phx_module *)model;
    wrapper->wrapped->refs++;
    wrapper->flat = px_calloc(n ? n : 1, sizeof *wrapper->flat);
    wrapper->flat_names = px_calloc(n ? n : 1, sizeof *wrapper->flat_names);
    if (!wrapper->flat || !wrapper->flat_names) return PHX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        wrapper->flat[i] = phx_module_param(model, i);
        if (!(wrapper->flat_names[i] = px_strdup(phx_module_param_name(model, i)))) return PHX_ENOMEM;
        wrapper->n_flat = i + 1;
    }
    wrapper->flat_valid = true;
    return PHX_OK;
}

/* ---- tree-wide settings --------------------------------------------- */

phx_status phx_module_set_grad_hook(phx_module *m, phx_grad_hook fn, void *user)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_module_set_grad_hook: module is NULL");
    size_t n = phx_module_num_params(m);
    for (size_t i = 0; i < n; i++) {
        phx_param *p = m->flat[i];
        p->hook = fn;
        p->hook_user = fn ? user : NULL;
    }
    return PHX_OK;
}

phx_status phx_module_zero_grad(phx_module *m)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_module_zero_grad: module is NULL");
    size_t n = phx_module_num_params(m);
    for (size_t i = 0; i < n; i++) {
        /* A gradient without memory is resharded (FSDP): its shard is
         * zeroed by its optimizer. */
        if (!m->flat[i]->grad->storage->data && m->flat[i]->grad->numel) continue;
        phx_status st = phx_tensor_fill(m->flat[i]->grad, 0.0);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

static phx_tensor *moved(const phx_tensor *t, phx_device dev)
{
    phx_tensor *n = phx_tensor_new(t->dtype, t->ndim, t->shape, dev);
    if (n && phx_tensor_copy(n, t) != PHX_OK) {
        phx_tensor_free(n);
        return NULL;
    }
    return n;
}

phx_status phx_module_to(phx_module *m, phx_device dev)
{
    if (!m) return px_error_null("phx_module_to", "module");
    if (!phx_device_table(dev)) return PHX_ENOTFOUND;
    size_t n = phx_module_num_params(m);
    /* Copy everything first so a failure leaves the model where it was. */
    phx_tensor **nv = px_calloc(2 * (n ? n : 1), sizeof *nv);
    if (!nv) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (size_t i = 0; i < n && st == PHX_OK; i++) {
        phx_param *p = m->flat[i];
        if (phx_device_equal(p->value->storage->device, dev)) continue;
        nv[2 * i] = moved(p->value, dev);
        nv[2 * i + 1] = moved(p->grad, dev);
        if (!nv[2 * i] || !nv[2 * i + 1])
            st = phx_error(PHX_ENOMEM, "phx_module_to: cannot move '%s': %s", m->flat_names[i], phx_last_error());
    }
    for (size_t i = 0; i < n; i++) {
        phx_param *p = m->flat[i];
        if (st == PHX_OK && nv[2 * i]) {
            px_tensor_set_param(p->value, NULL);
            phx_tensor_free(p->value);
            phx_tensor_free(p->grad);
            p->value = nv[2 * i];
            px_tensor_set_param(p->value, p);
            p->grad = nv[2 * i + 1];
            p->version++;
        } else if (st != PHX_OK) {
            phx_tensor_free(nv[2 * i]);
            phx_tensor_free(nv[2 * i + 1]);
        }
    }
    px_free(nv);
    return st == PHX_OK ? px_module_buffers_to(m, dev) : st;
}

static void set_dtype(phx_module *m, const phx_precision *p, phx_dtype dt)
{
    m->precision = p;
    m->compute_dtype = dt;
    for (size_t i = 0; i < m->n_children; i++) set_dtype(m->children[i].m, p, dt);
}

phx_status phx_module_set_precision(phx_module *m, const phx_precision *p)
{
    if (!m) return px_error_null("phx_module_set_precision", "module");
    phx_dtype dt = p ? phx_precision_dtype(p) : PHX_F32;
    if (!phx_dtype_is_float(dt))
        return phx_error(PHX_EINVAL, "phx_module_set_precision: policy compute dtype %s is not a float type",
                         phx_dtype_name(dt));
    set_dtype(m, p, dt);
    return PHX_OK;
}

/* ---- parameters ----------------------------------------------------- */

const char *phx_param_name(const phx_param *p)
{
    return p ? p->name : NULL;
}
phx_tensor *phx_param_value(const phx_param *p)
{
    return p ? p->value : NULL;
}
phx_tensor *phx_param_grad(const phx_param *p)
{
    return p ? p->grad : NULL;
}
uint64_t phx_param_version(const phx_param *p)
{
    return p ? p->version : 0;
}
void phx_param_touch(phx_param *p)
{
    if (p) p->version++;
}

void phx_param_grad_ready(phx_param *p)
{
    if (p && p->hook) p->hook(p, p->hook_user);
}

static phx_status check_replacement(const char *who, const phx_param *p, const phx_tensor *t)
{
    if (!p || !t) return phx_error(PHX_EINVAL, "%s: %s is NULL", who, p ? "tensor" : "parameter");
    if (px_tensor_live(who, "the tensor", t) != PHX_OK) return PHX_ESTATE;
    char a[64], b[64];
    if (!phx_tensor_same_shape(t, p->value) || t->dtype != PHX_F32)
        return phx_error(PHX_EINVAL, "%s: '%s' is %s %s, the tensor is %s %s", who, p->name, phx_dtype_name(PHX_F32),
                         phx_tensor_shape_str(p->value, a, sizeof a), phx_dtype_name(t->dtype),
                         phx_tensor_shape_str(t, b, sizeof b));
    return PHX_OK;
}

phx_status phx_param_set_grad(phx_param *p, phx_tensor *grad)
{
    phx_status st = check_replacement("phx_param_set_grad", p, grad);
    if (st != PHX_OK) return st;
    if (!phx_device_equal(grad->storage->device, p->grad->storage->device))
        return phx_error(PHX_EINVAL, "phx_param_set_grad: '%s': gradient on another device", p->name);
    if (grad == p->grad) return PHX_OK;
    st = phx_tensor_copy(grad, p->grad);
    if (st != PHX_OK) return st;
    phx_tensor_retain(grad);
    phx_tensor_free(p->grad);
    p->grad = grad;
    return PHX_OK;
}

phx_status phx_param_set_value(phx_param *p, phx_tensor *value)
{
    phx_status st = check_replacement("phx_param_set_value", p, value);
    if (st != PHX_OK) return st;
    if (value != p->value) {
        phx_tensor_retain(value);
        px_tensor_set_param(p->value, NULL);
        phx_tensor_free(p->value);
        p->value = value;
        px_tensor_set_param(value, p);
    }
    p->version++;
    return PHX_OK;
}
