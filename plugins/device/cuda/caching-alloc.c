/* The caching allocator: see caching-alloc.h for the rules.
 *
 * Two hash tables under one mutex: blocks by pointer (for release and
 * statistics), and bins of free blocks by (size class, stream). Block
 * records and bins are recycled, never freed before the cache, so a
 * steady state allocates no host memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "caching-alloc.h"

typedef struct px_block {
    void *ptr;
    size_t size; /* its size class */
    void *stream; /* the stream it was allocated for */
    int in_use;
    struct px_block *hnext; /* chain in the by-pointer table */
    struct px_block *fnext; /* chain in a bin, or in the spare records */
} px_block;

typedef struct px_bin {
    size_t size;
    void *stream;
    px_block *head; /* free blocks of this class for this stream */
    struct px_bin *next; /* chain in the bin table */
} px_bin;

#define PX_BIN_BUCKETS 1024u

struct px_cache {
    pthread_mutex_t mu;
    px_cache_ops ops;
    char name[32];
    px_block **byptr; /* nbyptr buckets, a power of two */
    size_t nbyptr;
    size_t nblocks; /* blocks in byptr (in use and cached) */
    px_bin *bins[PX_BIN_BUCKETS];
    px_block *spare; /* unused block records */
    phx_device_memory_stats_v1 st;
};

size_t px_cache_class(size_t bytes)
{
    if (bytes <= PX_CACHE_SMALL_MAX) {
        if (bytes == 0) return 0;
        return (bytes + PX_CACHE_SMALL_STEP - 1) & ~(PX_CACHE_SMALL_STEP - 1);
    }
    /* step = 2^(floor(log2 bytes) - 3): eight classes per octave */
    int top = 63 - __builtin_clzll((unsigned long long)bytes);
    size_t step = (size_t)1 << (top - 3);
    if (bytes > SIZE_MAX - (step - 1)) return 0;
    return (bytes + step - 1) & ~(step - 1);
}

static size_t ptr_hash(const void *p, size_t nbuckets)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (nbuckets - 1);
}

static size_t bin_hash(size_t size, const void *stream)
{
    uint64_t h = ((uint64_t)size ^ ((uint64_t)(uintptr_t)stream * 0xff51afd7ed558ccdull)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 40) & (PX_BIN_BUCKETS - 1);
}

px_cache *px_cache_new(const px_cache_ops *ops, const char *name)
{
    if (!ops || !ops->raw_alloc || !ops->raw_free) {
        phx_error(PHX_EINVAL, "px_cache_new: ops and both callbacks are required");
        return NULL;
    }
    px_cache *c = calloc(1, sizeof *c);
    if (!c) {
        phx_error(PHX_ENOMEM, "px_cache_new: out of host memory");
        return NULL;
    }
    c->nbyptr = 256;
    c->byptr = calloc(c->nbyptr, sizeof *c->byptr);
    if (!c->byptr) {
        free(c);
        phx_error(PHX_ENOMEM, "px_cache_new: out of host memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->ops = *ops;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "device");
    return c;
}

static px_bin *find_bin(px_cache *c, size_t size, void *stream, int create)
{
    size_t h = bin_hash(size, stream);
    for (px_bin *b = c->bins[h]; b; b = b->next)
        if (b->size == size && b->stream == stream) return b;
    if (!create) return NULL;
    px_bin *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->size = size;
    b->stream = stream;
    b->next = c->bins[h];
    c->bins[h] = b;
    return b;
}

static px_block *find_block(px_cache *c, const void *ptr)
{
    for (px_block *b = c->byptr[ptr_hash(ptr, c->nbyptr)]; b; b = b->hnext)
        if (b->ptr == ptr) return b;
    return NULL;
}

static void unlink_block(px_cache *c, px_block *blk)
{
    px_block **pp = &c->byptr[ptr_hash(blk->ptr, c->nbyptr)];
    while (*pp != blk) pp = &(*pp)->hnext;
    *pp = blk->hnext;
    c->nblocks--;
}

/* Doubles the by-pointer table when it holds more blocks than buckets.
 * Returns 0, or -1 when out of host memory (the table stays usable). */
static int reserve_slot(px_cache *c)
{
    if (c->nblocks < c->nbyptr) return 0;
    size_t n = c->nbyptr * 2;
    px_block **t = calloc(n, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < c->nbyptr; i++) {
        px_block *b = c->byptr[i];
        while (b) {
            px_block *next = b->hnext;
            size_t h = ptr_hash(b->ptr, n);
            b->hnext = t[h];
            t[h] = b;
            b = next;
        }
    }
    free(c->byptr);
    c->byptr = t;
    c->nbyptr = n;
    return 0;
}

static size_t empty_locked(px_cache *c)
{
    size_t freed = 0;
    for (size_t i = 0; i < PX_BIN_BUCKETS; i++) {
        for (px_bin *bin = c->bins[i]; bin; bin = bin->next) {
            while (bin->head) {
                px_block *b = bin->head;
                bin->head = b->fnext;
                unlink_block(c, b);
                c->ops.raw_free(c->ops.ud, b->ptr);
                freed += b->size;
                b->fnext = c->spare;
                c->spare = b;
            }
        }
    }
    c->st.cached_bytes -= freed;
    return freed;
}

static void took(px_cache *c, size_t size)
{
    c->st.in_use_bytes += size;
    if (c->st.in_use_bytes > c->st.peak_bytes) c->st.peak_bytes = c->st.in_use_bytes;
    c->st.alloc_calls++;
}

phx_status px_cache_alloc(px_cache *c, size_t bytes, void *stream, void **ptr)
{
    if (!c || !ptr) return phx_error(PHX_EINVAL, "px_cache_alloc: cache and ptr are required");
    *ptr = NULL;
    if (bytes == 0) return PHX_OK;
    size_t size = px_cache_class(bytes);
    if (size == 0) return phx_error(PHX_ENOMEM, "%s: a request of %zu bytes is larger than any device", c->name, bytes);

    pthread_mutex_lock(&c->mu);
    px_bin *bin = find_bin(c, size, stream, 0);
    if (bin && bin->head) {
        px_block *b = bin->head;
        bin->head = b->fnext;
        b->fnext = NULL;
        b->in_use = 1;
        c->st.cached_bytes -= size;
        took(c, size);
        pthread_mutex_unlock(&c->mu);
        *ptr = b->ptr;
        return PHX_OK;
    }

    /* A fresh block: get its record and table slot first, so nothing can
     * fail once the device memory is taken. */
    px_block *b = c->spare;
    if (b)
        c->spare = b->fnext;
    else
        b = calloc(1, sizeof *b);
    if (!b || reserve_slot(c) != 0) {
        if (b) {
            b->fnext = c->spare;
            c->spare = b;
        }
        pthread_mutex_unlock(&c->mu);
        return phx_error(PHX_ENOMEM, "%s: out of host memory for the allocator's records", c->name);
    }
    void *p = NULL;
    phx_status st = c->ops.raw_alloc(c->ops.ud, size, &p);
    size_t freed = 0;
    if (st == PHX_ENOMEM) {
        freed = empty_locked(c);
        if (freed > 0) st = c->ops.raw_alloc(c->ops.ud, size, &p);
    }
    if (st != PHX_OK) {
        b->fnext = c->spare;
        c->spare = b;
        unsigned long long in_use = (unsigned long long)c->st.in_use_bytes;
        pthread_mutex_unlock(&c->mu);
        if (st != PHX_ENOMEM) return st;
        char why[256];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(PHX_ENOMEM,
                         "%s: out of memory allocating %zu bytes (class %zu; %llu bytes in use, "
                         "%zu cached bytes freed before retrying): %s",
                         c->name, bytes, size, in_use, freed, why);
    }
    b->ptr = p;
    b->size = size;
    b->stream = stream;
    b->in_use = 1;
    b->fnext = NULL;
    size_t h = ptr_hash(p, c->nbyptr);
    b->hnext = c->byptr[h];
    c->byptr[h] = b;
    c->nblocks++;
    took(c, size);
    pthread_mutex_unlock(&c->mu);
    *ptr = p;
    return PHX_OK;
}

phx_status px_cache_release(px_cache *c, void *ptr)
{
    if (!ptr) return PHX_OK;
    if (!c) return phx_error(PHX_EINVAL, "px_cache_release: cache is NULL");
    pthread_mutex_lock(&c->mu);
    px_block *b = find_block(c, ptr);
    if (!b || !b->in_use) {
        pthread_mutex_unlock(&c->mu);
        return phx_error(PHX_EINVAL, "%s: release of %p, which this allocator %s", c->name, ptr,
                         b ? "got back already (double free)" : "did not hand out");
    }
    b->in_use = 0;
    c->st.in_use_bytes -= b->size;
    px_bin *bin = find_bin(c, b->size, b->stream, 1);
    if (bin) {
        b->fnext = bin->head;
        bin->head = b;
        c->st.cached_bytes += b->size;
    } else {
        /* no host memory for a new bin: give the block back instead */
        unlink_block(c, b);
        c->ops.raw_free(c->ops.ud, b->ptr);
        b->fnext = c->spare;
        c->spare = b;
    }
    pthread_mutex_unlock(&c->mu);
    return PHX_OK;
}

size_t px_cache_empty(px_cache *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    size_t freed = empty_locked(c);
    pthread_mutex_unlock(&c->mu);
    return freed;
}

void px_cache_stats(px_cache *c, phx_device_memory_stats_v1 *out)
{
    if (!c || !out) return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

void px_cache_free(px_cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->nbyptr; i++) {
        px_block *b = c->byptr[i];
        while (b) {
            px_block *next = b->hnext;
            c->ops.raw_free(c->ops.ud, b->ptr);
            free(b);
            b = next;
        }
    }
    for (size_t i = 0; i < PX_BIN_BUCKETS; i++) {
        px_bin *bin = c->bins[i];
        while (bin) {
            px_bin *next = bin->next;
            free(bin);
            bin = next;
        }
    }
    while (c->spare) {
        px_block *next = c->spare->fnext;
        free(c->spare);
        c->spare = next;
    }
    free(c->byptr);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
