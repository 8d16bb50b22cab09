/* Sequential: children "0", "1", ... run in order; backward runs them in
 * reverse, handing each the previous one's input gradient. */
#include <stdio.h>
#include "src/modules/module-impl.h"
#include "src/base/util.h"

static phx_status seq_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    size_t n = self->n_children;
    if (n == 0) return phx_error(PHX_ESTATE, "phx_sequential_forward: the Sequential is empty");
    const phx_tensor *h = x;
    phx_tensor *out = NULL;
    for (size_t i = 0; i < n; i++) {
        phx_status st = phx_module_forward(self->children[i].m, h, &out);
        if (st != PHX_OK) return st;
        h = out;
    }
    *y = out;
    return PHX_OK;
}

static phx_status seq_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    size_t n = self->n_children;
    if (n == 0) return phx_error(PHX_ESTATE, "phx_sequential_backward: the Sequential is empty");
    const phx_tensor *g = dy;
    for (size_t i = n; i-- > 0;) {
        phx_tensor *d = NULL;
        phx_status st = phx_module_backward(self->children[i].m, g, i > 0 || dx ? &d : NULL);
        if (st != PHX_OK) return st;
        g = d;
    }
    if (dx) *dx = (phx_tensor *)g;
    return PHX_OK;
}

static void seq_free(phx_module *self)
{
    (void)self;
}

static phx_module *seq_clone(const phx_module *self);

static const phx_module_vtable sequential_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Sequential",
    .forward = seq_forward,
    .backward = seq_backward,
    .free = seq_free,
    .set_train = NULL,
    .clone = seq_clone,
};

phx_module *phx_sequential_new(void)
{
    return phx_module_new(&sequential_vt, NULL);
}

phx_status phx_sequential_add(phx_module *seq, phx_module *m)
{
    if (!seq || seq->type != &sequential_vt) {
        phx_module_free(m);
        return phx_error(PHX_EINVAL, "phx_sequential_add: target is %s, not a Sequential",
                         seq ? phx_module_type(seq) : "NULL");
    }
    if (!m) return px_error_null("phx_sequential_add", "module");
    char name[24];
    snprintf(name, sizeof name, "%zu", seq->n_children);
    phx_status st = phx_module_add_child(seq, name, m);
    if (st != PHX_OK && m->parent != seq && !m->parent) phx_module_free(m);
    return st;
}

static phx_module *seq_clone(const phx_module *self)
{
    phx_module *c = phx_sequential_new();
    for (size_t i = 0; c && i < self->n_children; i++) {
        phx_module *ch = phx_module_clone(self->children[i].m);
        if (!ch || phx_sequential_add(c, ch) != PHX_OK) {
            phx_module_free(c);
            c = NULL;
        }
    }
    return c;
}
