/* A caching allocator for device memory, independent of CUDA: the raw
 * allocation and release are callbacks, so the bookkeeping (size classes,
 * per-stream free lists, statistics, the retry after freeing the cache)
 * is tested on the CPU with malloc (t/cuda/alloc.c) and used by the cuda
 * plugin with cudaMalloc/cudaFree.
 *
 * Rules (as in PyTorch's CUDA caching allocator, minus block splitting):
 * - A request is rounded up to its size class (px_cache_class) and served
 *   by a free block of exactly that class cached for the same stream, else
 *   by a fresh raw allocation of the class size.
 * - A released block goes back to its stream's free list: work queued on
 *   that stream before the release is ordered before any reuse, so no
 *   synchronisation is needed. Blocks are never handed to another stream.
 * - When the raw allocation fails, every cached block is released (raw
 *   free) and the allocation is tried once more.
 * Host memory for the bookkeeping grows only with the number of distinct
 * blocks; a steady state (same requests again) allocates nothing.
 * Thread-safe (one mutex per cache). Internal: px_ prefix. */
#ifndef PHX_CUDA_CACHING_ALLOC_H
#define PHX_CUDA_CACHING_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/device.h"
#include "phalanx/plugin/device_v1.h"
#include "phalanx/error.h"

typedef struct px_cache_ops {
    /* Raw allocation of bytes (> 0). Returns PHX_OK or an error status
     * with phx_last_error set (PHX_ENOMEM when the device is full). */
    phx_status (*raw_alloc)(void *ud, size_t bytes, void **ptr);
    /* Raw release; must make sure no queued work still uses the memory
     * (cudaFree synchronises the device). */
    void (*raw_free)(void *ud, void *ptr);
    void *ud;
} px_cache_ops;

typedef struct px_cache px_cache;

/* Requests up to this size round up to a multiple of 512 bytes; larger
 * ones to one eighth of their power of two (at most 12.5% waste). */
#define PX_CACHE_SMALL_MAX ((size_t)1 << 20)
#define PX_CACHE_SMALL_STEP ((size_t)512)

/* The size class of a request of bytes (> 0): what is really allocated.
 * 0 when bytes is so large that rounding would overflow. */
size_t px_cache_class(size_t bytes);

/* A new, empty cache; NULL with phx_last_error on failure. name ("cuda:0")
 * appears in error messages. */
px_cache *px_cache_new(const px_cache_ops *ops, const char *name);

/* Frees every block (in use or cached) through raw_free and the cache.
 * NULL is a no-op. */
void px_cache_free(px_cache *c);

/* *ptr <- a block of at least bytes for work on stream (an opaque key:
 * the caller's stream). bytes == 0 gives *ptr = NULL and PHX_OK. Errors:
 * PHX_ENOMEM naming the request, what is in use and what the retry freed;
 * other raw_alloc errors as they came. */
phx_status px_cache_alloc(px_cache *c, size_t bytes, void *stream, void **ptr);

/* Returns a block to its stream's free list. NULL is a no-op. A pointer
 * this cache did not hand out (or handed out and got back already) is
 * PHX_EINVAL and changes nothing. */
phx_status px_cache_release(px_cache *c, void *ptr);

/* Releases every cached (free) block through raw_free; in-use blocks stay.
 * Returns the bytes released. */
size_t px_cache_empty(px_cache *c);

/* Current statistics (bytes are size-class bytes). */
void px_cache_stats(px_cache *c, phx_device_memory_stats_v1 *out);

#endif
