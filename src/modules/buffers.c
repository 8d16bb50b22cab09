/* Module buffers: named non-parameter state (BatchNorm's running_mean,
 * running_var, num_batches_tracked) with PyTorch's state_dict names.
 * Listed in named_buffers() order (own buffers first, then children's,
 * depth first); a wrapper (DDP, DataParallel) lists its model's. Saved in
 * checkpoints, moved by phx_module_to, copied by clone, broadcast by DDP;
 * never touched by optimizers. */
#include <stdio.h>
#include <string.h>
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

static void free_bflat(phx_module *m)
{
    for (size_t i = 0; i < m->n_bflat; i++) px_free(m->bflat_names[i]);
    px_free(m->bflat_names);
    px_free(m->bflat);
    m->bflat = NULL;
    m->bflat_names = NULL;
    m->n_bflat = 0;
    m->bflat_valid = false;
}

void px_module_buffers_changed(phx_module *m)
{
    for (; m; m = m->parent) m->bflat_valid = false;
}

bool px_module_has_buffer(const phx_module *m, const char *name)
{
    for (size_t i = 0; i < m->n_buffers; i++)
        if (strcmp(m->buffers[i]->name, name) == 0) return true;
    return false;
}

static bool taken(const phx_module *m, const char *name)
{
    for (size_t i = 0; i < m->n_children; i++)
        if (strcmp(m->children[i].name, name) == 0) return true;
    for (size_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i]->name, name) == 0) return true;
    return px_module_has_buffer(m, name);
}

px_buffer *px_module_add_buffer(phx_module *m, const char *name, phx_tensor *t)
{
    if (!t) return NULL; /* the allocation's error stands */
    if (!name || !*name || strchr(name, '.') || taken(m, name)) {
        phx_error(PHX_EINVAL, "phx_module_add_buffer: name '%s' is empty, dotted or taken in %s",
                  name ? name : "(null)", phx_module_type(m));
        phx_tensor_free(t);
        return NULL;
    }
    if (m->n_buffers == m->cap_buffers) {
        size_t nc = m->cap_buffers ? 2 * m->cap_buffers : 4;
        px_buffer **nb = px_realloc(m->buffers, nc * sizeof *nb);
        if (!nb) {
            phx_tensor_free(t);
            return NULL;
        }
        m->buffers = nb;
        m->cap_buffers = nc;
    }
    px_buffer *b = px_calloc(1, sizeof *b);
    if (!b || !(b->name = px_strdup(name))) {
        px_free(b);
        phx_tensor_free(t);
        return NULL;
    }
    b->t = t;
    m->buffers[m->n_buffers++] = b;
    px_module_buffers_changed(m);
    return b;
}

phx_status phx_module_add_buffer(phx_module *m, const char *name, phx_tensor *value)
{
    if (!m || !value) {
        phx_tensor_free(value);
        return phx_error(PHX_EINVAL, "phx_module_add_buffer: %s is NULL", m ? "value" : "module");
    }
    if (px_tensor_live("phx_module_add_buffer", "value", value) != PHX_OK) return PHX_ESTATE;
    return px_module_add_buffer(m, name, value) ? PHX_OK : PHX_EINVAL;
}

void px_module_free_buffers(phx_module *m)
{
    for (size_t i = 0; i < m->n_buffers; i++) {
        phx_tensor_free(m->buffers[i]->t);
        px_free(m->buffers[i]->name);
        px_free(m->buffers[i]);
    }
    px_free(m->buffers);
    m->buffers = NULL;
    m->n_buffers = 0;
    free_bflat(m);
}

/* The module whose tree is listed: a wrapper lists its model's. */
static const phx_module *listed(const phx_module *m)
{
    while (m->wrapped && m->n_buffers == 0 && m->n_children == 0) m = m->wrapped;
    return m;
}

static size_t count(const phx_module *m)
{
    size_t n = m->n_buffers;
    for (size_t i = 0; i < m->n_children; i++) n += count(m->children[i].m);
    return n;
}

static bool fill(phx_module *root, const phx_module *m, const char *prefix, size_t *k)
{
    for (size_t i = 0; i < m->n_buffers; i++) {
        size_t len = strlen(prefix) + strlen(m->buffers[i]->name) + 1;
        char *s = px_malloc(len);
        if (!s) return false;
        snprintf(s, len, "%s%s", prefix, m->buffers[i]->name);
        root->bflat[*k] = m->buffers[i];
        root->bflat_names[(*k)++] = s;
    }
    for (size_t i = 0; i < m->n_children; i++) {
        size_t len = strlen(prefix) + strlen(m->children[i].name) + 2;
        char *pre = px_malloc(len);
        if (!pre) return false;
        snprintf(pre, len, "%s%s.", prefix, m->children[i].name);
        bool ok = fill(root, m->children[i].m, pre, k);
        px_free(pre);
        if (!ok) return false;
    }
    return true;
}

static const phx_module *ensure(const phx_module *cm)
{
    phx_module *m = (phx_module *)listed(cm); /* the cache is logically const */
    if (m->bflat_valid) return m;
    free_bflat(m);
    size_t n = count(m);
    m->bflat = px_calloc(n ? n : 1, sizeof *m->bflat);
    m->bflat_names = px_calloc(n ? n : 1, sizeof *m->bflat_names);
    size_t k = 0;
    if (!m->bflat || !m->bflat_names || !fill(m, m, "", &k)) {
        m->n_bflat = k;
        free_bflat(m);
        return NULL;
    }
    m->n_bflat = n;
    m->bflat_valid = true;
    return m;
}

size_t phx_module_num_buffers(const phx_module *m)
{
    const phx_module *r = m ? ensure(m) : NULL;
    return r ? r->n_bflat : 0;
}

phx_tensor *phx_module_buffer(const phx_module *m, size_t i)
{
    const phx_module *r = m ? ensure(m) : NULL;
    return r && i < r->n_bflat ? r->bflat[i]->t : NULL;
}

const char *phx_module_buffer_name(const phx_module *m, size_t i)
{
    const phx_module *r = m ? ensure(m) : NULL;
    return r && i < r->n_bflat ? r->bflat_names[i] : NULL;
}

phx_tensor *phx_module_find_buffer(const phx_module *m, const char *name)
{
    const phx_module *r = m && name ? ensure(m) : NULL;
    for (size_t i = 0; r && i < r->n_bflat; i++)
        if (strcmp(r->bflat_names[i], name) == 0) return r->bflat[i]->t;
    return NULL;
}

px_buffer *px_module_buffer_holder(const phx_module *m, size_t i)
{
    const phx_module *r = m ? ensure(m) : NULL;
    return r && i < r->n_bflat ? r->bflat[i] : NULL;
}

phx_status px_module_copy_buffers(phx_module *dst, const phx_module *src)
{
    if (dst->n_buffers != src->n_buffers)
        return phx_error(PHX_EINTERNAL, "clone: %zu buffers, expected %zu", dst->n_buffers, src->n_buffers);
    for (size_t i = 0; i < src->n_buffers; i++) {
        phx_tensor *d = dst->buffers[i]->t, *s = src->buffers[i]->t;
        if (!phx_device_equal(d->storage->device, s->storage->device)) {
            phx_tensor *n = phx_tensor_new(d->dtype, d->ndim, d->shape, s->storage->device);
            if (!n) return PHX_ENOMEM;
            phx_tensor_free(d);
            dst->buffers[i]->t = d = n;
        }
        phx_status st = phx_tensor_copy(d, s);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

phx_status px_module_buffers_to(phx_module *m, phx_device dev)
{
    size_t n = phx_module_num_buffers(m);
    const phx_module *r = listed(m);
    phx_tensor **nv = px_calloc(n ? n : 1, sizeof *nv);
    if (!nv) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (size_t i = 0; i < n && st == PHX_OK; i++) {
        phx_tensor *t = r->bflat[i]->t;
        if (phx_device_equal(t->storage->device, dev)) continue;
        nv[i] = phx_tensor_new(t->dtype, t->ndim, t->shape, dev);
        if (!nv[i] || (st = phx_tensor_copy(nv[i], t)) != PHX_OK)
            st = phx_error(PHX_ENOMEM, "phx_module_to: cannot move buffer '%s': %s", r->bflat_names[i],
                           phx_last_error());
    }
    for (size_t i = 0; i < n; i++) {
        if (st == PHX_OK && nv[i]) {
            phx_tensor_free(r->bflat[i]->t);
            r->bflat[i]->t = nv[i];
        } else if (st != PHX_OK) {
            phx_tensor_free(nv[i]);
        }
    }
    px_free(nv);
    return st;
}
