/* Tensors: reference-counted storage on one device, contiguous row-major
 * views of it, and the front end of the ops (checks, then the device's
 * kernel table). */
#include "config.h"
#include <pthread.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "src/tensor/device-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/autograd/node-impl.h"
#include "src/base/util.h"

size_t phx_dtype_size(phx_dtype dt)
{
    switch (dt) {
    case PHX_F32: return 4;
    case PHX_F16: return 2;
    case PHX_BF16: return 2;
    case PHX_I32: return 4;
    case PHX_I64: return 8;
    }
    return 0;
}

const char *phx_dtype_name(phx_dtype dt)
{
    switch (dt) {
    case PHX_F32: return "f32";
    case PHX_F16: return "f16";
    case PHX_BF16: return "bf16";
    case PHX_I32: return "i32";
    case PHX_I64: return "i64";
    }
    return "?";
}

int phx_dtype_is_float(phx_dtype dt)
{
    return dt == PHX_F32 || dt == PHX_F16 || dt == PHX_BF16;
}

/* Checks ndim/shape and computes numel; bytes of numel elements of size
 * esize must fit in a size_t and an int64. */
static phx_status shape_check(const char *fn, int ndim, const int64_t *shape, size_t esize, int64_t *numel)
{
    if (ndim < 0 || ndim > PHX_MAX_DIMS)
        return phx_error(PHX_EINVAL, "%s: ndim %d, expected 0..%d", fn, ndim, PHX_MAX_DIMS);
    if (ndim > 0 && !shape) return phx_error(PHX_EINVAL, "%s: shape is NULL for ndim %d", fn, ndim);
    int64_t n = 1;
    int64_t limit = INT64_MAX / (int64_t)(esize ? esize : 1);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return phx_error(PHX_EINVAL, "%s: dim %d is %" PRId64 ", expected >= 0", fn, i, shape[i]);
        if (shape[i] > 0 && n > limit / shape[i])
            return phx_error(PHX_EINVAL, "%s: shape too large (dim %d = %" PRId64 ")", fn, i, shape[i]);
        n *= shape[i];
    }
    if ((uint64_t)n * esize > SIZE_MAX) return phx_error(PHX_EINVAL, "%s: tensor too large for this machine", fn);
    *numel = n;
    return PHX_OK;
}

static void storage_drop(px_storage *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->cached && px_storage_cache_put(s)) return;
    /* cached: cannot fail for a live storage */
    const phx_device_v1 *t = phx_device_table(s->pinned ? s->pinned_by : s->device);
    if (t && s->pinned)
        t->host_release(s->pinned_by.index, s->data);
    else if (t)
        t->release(s->device.index, s->data);
    px_free(s);
}

/* Freed handles wait in a process-wide list for the next tensor, so the
 * operations of a warm training step allocate no handle. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static phx_tensor *pool, *pool_tail;

/* Handles are allocated 64 at a time, so that the peak a step needs,
 * which threads (DataParallel's replicas) may reach in any order, is
 * covered by few allocations, all made while warming up. */
#define PX_HANDLE_CHUNK 64
typedef struct handle_chunk {
    struct handle_chunk *next;
    phx_tensor handles[PX_HANDLE_CHUNK];
} handle_chunk;
static handle_chunk *chunks;
static size_t n_made, n_pooled;

static phx_tensor *handle_get(void)
{
    pthread_mutex_lock(&pool_lock);
    if (!pool) {
        handle_chunk *c = px_malloc(sizeof *c);
        if (c) {
            c->next = chunks;
            chunks = c;
            for (int i = 0; i < PX_HANDLE_CHUNK; i++) {
                c->handles[i].next_free = pool;
                if (!pool) pool_tail = &c->handles[i];
                pool = &c->handles[i];
            }
            n_made += PX_HANDLE_CHUNK;
            n_pooled += PX_HANDLE_CHUNK;
        }
    }
    phx_tensor *t = pool;
    if (t) {
        pool = t->next_free;
        if (!pool) pool_tail = NULL;
        n_pooled--;
    }
    pthread_mutex_unlock(&pool_lock);
    if (t) memset(t, 0, sizeof *t);
    return t;
}

/* At exit (or dlclose) the handle chunks, when every handle is back (a
 * handle still held belongs to a tensor the program never freed), and the
 * cached storages go, so that leak checkers see nothing left: they are
 * caches, not leaks. */
__attribute__((destructor)) static void pools_release(void)
{
    pthread_mutex_lock(&pool_lock);
    if (n_pooled == n_made) {
        while (chunks) {
            handle_chunk *c = chunks;
            chunks = c->next;
            px_free(c);
        }
        pool = pool_tail = NULL;
        n_made = n_pooled = 0;
    }
    pthread_mutex_unlock(&pool_lock);
    for (px_storage *s = px_storage_cache_drain(), *next; s; s = next) {
        next = s->cache_next;
        const phx_device_v1 *d = phx_device_table(s->device);
        if (d) d->release(s->device.index, s->data);
        px_free(s);
    }
}

/* A freed handle goes first in line, or last when marked freed (so that
 * a stale pointer to it is caught as long as possible). */
static void handle_put(phx_tensor *t, bool last)
{
    pthread_mutex_lock(&pool_lock);
    if (!pool || !last) {
        t->next_free = pool;
        if (!pool) pool_tail = t;
        pool = t;
    } else {
        t->next_free = NULL;
        pool_tail->next_free = t;
        pool_tail = t;
    }
    n_pooled++;
    pthread_mutex_unlock(&pool_lock);
}

static phx_tensor *handle(px_storage *s, phx_dtype dt, int64_t offset, int ndim, const int64_t *shape, int64_t numel)
{
    phx_tensor *t = handle_get();
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    t->storage = s;
    t->offset = offset;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->dtype = dt;
    return t;
}

/* A tensor on dev; with pin, a CPU tensor in pin's host_alloc memory. */
static phx_tensor *tensor_alloc(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev,
                                const phx_device *pin)
{
    size_t es = phx_dtype_size(dt);
    if (!es) {
        phx_error(PHX_EINVAL, "%s: dtype %d, expected f32, f16, bf16, i32 or i64", fn, (int)dt);
        return NULL;
    }
    int64_t numel;
    if (shape_check(fn, ndim, shape, es, &numel) != PHX_OK) return NULL;
    const phx_device_v1 *table = phx_device_table(pin ? *pin : dev);
    if (!table) return NULL;
    px_storage *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    atomic_init(&s->refs, 1);
    s->bytes = (size_t)numel * es;
    s->device = pin ? phx_cpu() : dev;
    s->pinned = pin != NULL;
    if (pin) s->pinned_by = *pin;
    if ((pin ? table->host_alloc(pin->index, s->bytes, &s->data) : table->alloc(dev.index, s->bytes, &s->data)) !=
        PHX_OK) {
        px_free(s);
        return NULL;
    }
    phx_tensor *t = handle(s, dt, 0, ndim, shape, numel);
    if (!t) storage_drop(s);
    return t;
}

phx_tensor *phx_tensor_new(phx_dtype dt, int ndim, const int64_t *shape, phx_device dev)
{
    return tensor_alloc("phx_tensor_new", dt, ndim, shape, dev, NULL);
}

phx_tensor *px_tensor_pinned(phx_dtype dt, int ndim, const int64_t *shape, phx_device accel)
{
    return tensor_alloc("phx_loader (pinned batch)", dt, ndim, shape, phx_cpu(), &accel);
}

phx_tensor *phx_tensor_zeros(phx_dtype dt, int ndim, const int64_t *shape, phx_device dev)
{
    phx_tensor *t = tensor_alloc("phx_tensor_zeros", dt, ndim, shape, dev, NULL);
    if (t && phx_tensor_fill(t, 0.0) != PHX_OK) {
        phx_tensor_free(t);
        return NULL;
    }
    return t;
}

phx_tensor *phx_tensor_from_data(phx_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    phx_tensor *t = tensor_alloc("phx_tensor_from_data", dt, ndim, shape, phx_cpu(), NULL);
    if (!t) return NULL;
    size_t bytes = phx_tensor_nbytes(t);
    if (bytes && !data) {
        phx_tensor_free(t);
        phx_error(PHX_EINVAL, "phx_tensor_from_data: data is NULL for %" PRId64 " elements", t->numel);
        return NULL;
    }
    if (bytes) memcpy(px_tensor_ptr(t), data, bytes);
    return t;
}

phx_tensor *phx_tensor_view(const phx_tensor *base, int64_t offset, int ndim, const int64_t *shape)
{
    if (px_tensor_live("phx_tensor_view", "base", base) != PHX_OK) return NULL;
    if (base && base->requires_grad && phx_grad_enabled()) {
        char b[64];
        phx_error(PHX_EINVAL,
                  "phx_tensor_view: base %s requires a gradient and grad mode is on, but a view records no "
                  "gradient; expected phx_reshape, phx_narrow or phx_slice (differentiable views), or a view "
                  "under phx_set_grad_enabled(false) or of phx_tensor_detach(base)",
                  phx_tensor_shape_str(base, b, sizeof b));
        return NULL;
    }
    return px_tensor_view(base, offset, ndim, shape);
}

phx_tensor *px_tensor_view(const phx_tensor *base, int64_t offset, int ndim, const int64_t *shape)
{
    if (!base) {
        px_error_null("phx_tensor_view", "base");
        return NULL;
    }
    if (px_tensor_live("phx_tensor_view", "base", base) != PHX_OK) return NULL;
    int64_t numel;
    if (shape_check("phx_tensor_view", ndim, shape, phx_dtype_size(base->dtype), &numel) != PHX_OK) return NULL;
    if (offset < 0 || offset > base->numel || numel > base->numel - offset) {
        char b[64];
        phx_error(PHX_EINVAL,
                  "phx_tensor_view: %" PRId64 " elements at offset %" PRId64 " do not fit in base %s of %" PRId64
                  " elements",
                  numel, offset, phx_tensor_shape_str(base, b, sizeof b), base->numel);
        return NULL;
    }
    phx_tensor *t = handle(base->storage, base->dtype, base->offset + offset, ndim, shape, numel);
    if (t) atomic_fetch_add(&base->storage->refs, 1);
    return t;
}

/* A handle marked freed (px_tensor_free_marked) is in the pool already:
 * retaining or freeing it again changes nothing. */
phx_tensor *phx_tensor_retain(phx_tensor *t)
{
    if (t && !t->freed_by[0]) atomic_fetch_add(&t->refs, 1);
    return t;
}

void phx_tensor_free(phx_tensor *t)
{
    if (!t || t->freed_by[0] || atomic_fetch_sub(&t->refs, 1) != 1) return;
    px_tensor_autograd_drop(t);
    storage_drop(t->storage);
    handle_put(t, false);
}

/* What a handle freed by px_tensor_free_marked points to: no memory on
 * the CPU, a count that never reaches 0. */
static px_storage freed_storage = {.refs = LONG_MAX / 2, .device = {PHX_DEVICE_CPU, 0}};

void px_tensor_free_marked(phx_tensor *t, const char *by)
{
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    px_tensor_autograd_drop(t);
    storage_drop(t->storage);
    t->storage = &freed_storage;
    t->offset = 0;
    t->requires_grad = false;
    snprintf(t->freed_by, sizeof t->freed_by, "%s", by && by[0] ? by : "module");
    handle_put(t, true);
}

phx_status px_tensor_live(const char *fn, const char *arg, const phx_tensor *t)
{
    if (!t || !t->freed_by[0]) return PHX_OK;
    return phx_error(PHX_ESTATE,
                     "%s: %s is a freed tensor, an output of a %s module released by a later call of that module or "
                     "its phx_module_free (an output lives until the module's next call, or the call after that "
                     "while its graph waits for a backward and no scope keeps it); expected a live tensor: keep "
                     "a scope open (phx_scope_begin) around the step, or copy the output",
                     fn, arg, t->freed_by);
}

phx_tensor *px_tensor_cached(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev)
{
    size_t es = phx_dtype_size(dt);
    int64_t numel;
    if (!es) {
        phx_error(PHX_EINVAL, "%s: dtype %d, expected f32, f16, bf16, i32 or i64", fn, (int)dt);
        return NULL;
    }
    if (dev.kind != PHX_DEVICE_CPU) return tensor_alloc(fn, dt, ndim, shape, dev, NULL);
    if (shape_check(fn, ndim, shape, es, &numel) != PHX_OK) return NULL;
    size_t bytes = (size_t)numel * es;
    px_storage *s = px_storage_cache_take(bytes);
    if (!s) {
        phx_tensor *t = tensor_alloc(fn, dt, ndim, shape, dev, NULL);
        if (t) t->storage->cached = true;
        return t;
    }
    atomic_store(&s->refs, 1);
    phx_tensor *t = handle(s, dt, 0, ndim, shape, numel);
    if (!t) storage_drop(s);
    return t;
}

int phx_tensor_ndim(const phx_tensor *t)
{
    return t ? t->ndim : 0;
}

int64_t phx_tensor_dim(const phx_tensor *t, int i)
{
    if (!t) return 0;
    if (i < 0) i += t->ndim;
    return i >= 0 && i < t->ndim ? t->shape[i] : 0;
}

const int64_t *phx_tensor_shape(const phx_tensor *t)
{
    return t ? t->shape : NULL;
}
int64_t phx_tensor_numel(const phx_tensor *t)
{
    return t ? t->numel : 0;
}
size_t phx_tensor_nbytes(const phx_tensor *t)
{
    return t ? (size_t)t->numel * phx_dtype_size(t->dtype) : 0;
}
phx_dtype phx_tensor_dtype(const phx_tensor *t)
{
    return t ? t->dtype : PHX_F32;
}
phx_device phx_tensor_device(const phx_tensor *t)
{
    return t ? t->storage->device : phx_cpu();
}
int64_t phx_tensor_offset(const phx_tensor *t)
{
    return t ? t->offset : 0;
}
void *phx_tensor_data(const phx_tensor *t)
{
    return t ? px_tensor_ptr(t) : NULL;
}

int phx_tensor_same_storage(const phx_tensor *a, const phx_tensor *b)
{
    return a && b && a->storage == b->storage && a->storage != &freed_storage;
}

int phx_tensor_same_shape(const phx_tensor *a, const phx_tensor *b)
{
    if (!a || !b || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *px_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    if (!buf || !len) return buf;
    size_t used = 0;
    used += (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (ndim == 1 && used < len) used += (size_t)snprintf(buf + used, len - used, ",");
    if (used < len) snprintf(buf + used, len - used, ")");
    return buf;
}

const char *phx_tensor_shape_str(const phx_tensor *t, char *buf, size_t len)
{
    if (!buf || !len) return buf;
    if (!t) {
        snprintf(buf, len, "(null)");
        return buf;
    }
    return px_shape_str(t->ndim, t->shape, buf, len);
}
