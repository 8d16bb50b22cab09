/* Graph nodes: what an operation records (its inputs' shapes and where
 * their gradients go, saved tensors, op-private state), reference counted
 * by the tensors they made and by the nodes that consume them. Nodes come
 * from a process-wide free list, so recording allocates nothing once warm. */
#include "config.h"
#include <pthread.h>
#include <string.h>
#include "src/autograd/node-impl.h"
#include "src/base/util.h"

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static px_node *pool; /* free nodes, linked through next */
static atomic_ullong next_seq = 1;

/* Nodes are allocated 32 at a time, so that the peak number a step
 * needs, which threads (DataParallel's replicas) may reach in any order,
 * is covered by few allocations, all made while warming up. */
#define PX_NODE_CHUNK 32
typedef struct node_chunk {
    struct node_chunk *next;
    px_node nodes[PX_NODE_CHUNK];
} node_chunk;
static node_chunk *chunks;
static size_t n_made, n_pooled;

static px_node *node_get(void)
{
    pthread_mutex_lock(&pool_lock);
    if (!pool) {
        node_chunk *c = px_malloc(sizeof *c);
        if (c) {
            c->next = chunks;
            chunks = c;
            for (int i = 0; i < PX_NODE_CHUNK; i++) {
                c->nodes[i].next = pool;
                pool = &c->nodes[i];
            }
            n_made += PX_NODE_CHUNK;
            n_pooled += PX_NODE_CHUNK;
        }
    }
    px_node *n = pool;
    if (n) {
        pool = n->next;
        n_pooled--;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!n) return NULL;
    memset(n, 0, offsetof(px_node, ctx));
    memset(n->ctx, 0, sizeof n->ctx);
    return n;
}

/* At exit the chunks go when every node is back in the pool (a cache, not
 * a leak); a node still held then belongs to a tensor the program never
 * freed. */
__attribute__((destructor)) static void pool_release(void)
{
    pthread_mutex_lock(&pool_lock);
    if (n_pooled == n_made) {
        while (chunks) {
            node_chunk *c = chunks;
            chunks = c->next;
            px_free(c);
        }
        pool = NULL;
        n_made = n_pooled = 0;
    }
    pthread_mutex_unlock(&pool_lock);
}

static void node_put(px_node *n)
{
    if (n->in != n->in_inline) px_free(n->in);
    if (n->saved != n->saved_inline) px_free(n->saved);
    pthread_mutex_lock(&pool_lock);
    n->next = pool;
    pool = n;
    n_pooled++;
    pthread_mutex_unlock(&pool_lock);
}

px_node *px_node_retain(px_node *n)
{
    if (n) atomic_fetch_add(&n->refs, 1);
    return n;
}

void px_node_release_saved(px_node *n)
{
    for (int i = 0; i < n->n_saved; i++) {
        phx_tensor_free(n->saved[i].t);
        n->saved[i].t = NULL;
    }
    n->freed = true;
}

/* Releasing the last reference to the output of a long chain frees the
 * whole chain: through one per-thread list of dead nodes, never by
 * recursion (a saved tensor freed here may free its own maker, which
 * joins the list). */
static _Thread_local px_node *dead;
static _Thread_local bool draining;

void px_node_unref(px_node *n)
{
    if (!n || atomic_fetch_sub(&n->refs, 1) != 1) return;
    n->next = dead;
    dead = n;
    if (draining) return;
    draining = true;
    while (dead) {
        px_node *d = dead;
        dead = d->next;
        px_node_release_saved(d);
        for (int i = 0; i < d->n_in; i++) {
            if (d->in[i].leaf) phx_tensor_free(d->in[i].leaf);
            px_node_unref(d->in[i].node);
        }
        node_put(d);
    }
    draining = false;
}

bool px_grad_needed(int n, const phx_tensor *const *in)
{
    if (!px_recording()) return false;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

static phx_status record(const char *name, px_backward_fn fn, int n_in, const phx_tensor *const *in, phx_tensor *out,
                         px_node **node);

/* The first non-differentiable op behind the inputs, if any. */
static const char *nondiff_of(int n, const phx_tensor *const *in)
{
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->nondiff) return in[i]->nondiff;
    return NULL;
}

phx_status px_record(const char *name, px_backward_fn fn, int n_in, const phx_tensor *const *in, phx_tensor *out,
                     px_node **node)
{
    *node = NULL;
    if (px_grad_needed(n_in, in)) return record(name, fn, n_in, in, out, node);
    if (px_recording()) out->nondiff = nondiff_of(n_in, in);
    return PHX_OK;
}

void px_mark_nondiff(const char *op, int n, const phx_tensor *const *in, phx_tensor *out)
{
    if (px_grad_needed(n, in))
        out->nondiff = op;
    else if (px_recording())
        out->nondiff = nondiff_of(n, in);
}

phx_status px_record_always(const char *name, px_backward_fn fn, int n_in, const phx_tensor *const *in, phx_tensor *out,
                            px_node **node)
{
    *node = NULL;
    return px_recording() ? record(name, fn, n_in, in, out, node) : PHX_OK;
}

static phx_status record(const char *name, px_backward_fn fn, int n_in, const phx_tensor *const *in, phx_tensor *out,
                         px_node **node)
{
    px_node *n = node_get();
    if (!n) return phx_error(PHX_ENOMEM, "%s: out of memory recording its gradient", name);
    n->in = n->in_inline;
    n->saved = n->saved_inline;
    n->cap_saved = PX_NODE_INLINE;
    if (n_in > PX_NODE_INLINE) {
        n->in = px_calloc((size_t)n_in, sizeof *n->in);
        if (!n->in) {
            n->in = n->in_inline;
            node_put(n);
            return phx_error(PHX_ENOMEM, "%s: out of memory recording %d inputs", name, n_in);
        }
    }
    atomic_init(&n->refs, 1); /* out's */
    n->name = name;
    n->fn = fn;
    n->seq = atomic_fetch_add(&next_seq, 1);
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        px_node_input *e = &n->in[i];
        const phx_tensor *t = in[i];
        if (!t) continue;
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof e->shape);
        e->dtype = t->dtype;
        e->device = t->storage->device;
        if (!t->requires_grad) continue;
        if (t->grad_fn)
            e->node = px_node_retain(t->grad_fn);
        else
            e->leaf = phx_tensor_retain((phx_tensor *)t);
    }
    if (out->grad_fn) px_node_unref(out->grad_fn);
    out->grad_fn = n;
    out->requires_grad = true;
    *node = n;
    return PHX_OK;
}

int px_node_save(px_node *n, const phx_tensor *t)
{
    if (n->n_saved == n->cap_saved) {
        int cap = 2 * n->cap_saved;
        px_node_saved_t *s = px_malloc((size_t)cap * sizeof *s);
        if (!s) {
            phx_error(PHX_ENOMEM, "%s: out of memory saving a tensor for backward", n->name);
            return -1;
        }
        memcpy(s, n->saved, (size_t)n->n_saved * sizeof *s);
        if (n->saved != n->saved_inline) px_free(n->saved);
        n->saved = s;
        n->cap_saved = cap;
    }
    px_node_saved_t *s = &n->saved[n->n_saved];
    s->t = phx_tensor_retain((phx_tensor *)t);
    s->version = atomic_load(&t->storage->version);
    return n->n_saved++;
}

const phx_tensor *px_node_saved(px_node *n, int i)
{
    if (n->freed || i < 0 || i >= n->n_saved || !n->saved[i].t) {
        phx_error(PHX_ESTATE,
                  "backward of %s: its saved tensors were freed by an earlier backward (call "
                  "phx_backward_retain with retain_graph to run backward twice)",
                  n->name);
        return NULL;
    }
    const phx_tensor *t = n->saved[i].t;
    unsigned long now = atomic_load(&t->storage->version);
    if (now != n->saved[i].version) {
        char s[64];
        phx_error(PHX_ESTATE,
                  "backward of %s: a tensor of shape %s it saved was modified by an in-place operation "
                  "(version %lu, saved at %lu); copy it before changing it",
                  n->name, phx_tensor_shape_str(t, s, sizeof s), now, n->saved[i].version);
        return NULL;
    }
    return t;
}

void px_node_set_check(px_node *n, px_check_fn check)
{
    n->check = check;
}

void *px_node_ctx(px_node *n)
{
    return n->ctx;
}

bool px_node_needs(const px_node *n, int i)
{
    if (i < 0 || i >= n->n_in) return false;
    const px_node_input *e = &n->in[i];
    return e->node != NULL || (e->leaf && px_leaf_wanted(e->leaf));
}

int px_node_num_inputs(const px_node *n)
{
    return n->n_in;
}

int px_node_in_ndim(const px_node *n, int i)
{
    return n->in[i].ndim;
}

const int64_t *px_node_in_shape(const px_node *n, int i)
{
    return n->in[i].shape;
}

phx_dtype px_node_in_dtype(const px_node *n, int i)
{
    return n->in[i].dtype;
}

phx_device px_node_in_device(const px_node *n, int i)
{
    return n->in[i].device;
}

const char *px_node_name(const px_node *n)
{
    return n->name;
}
