/* The built-in CPU device: 64-byte aligned host memory (2 MiB aligned on
 * huge pages from 2 MiB up: kernels/cpu/hugepage.c) through the counting
 * allocator, statistics, memcpy copies. Everything is
 * synchronous, so the stream and event slots stay NULL and get the core's
 * defaults for a synchronous device (src/tensor/device.c). */
#include "config.h"
#include <stdatomic.h>
#include <string.h>
#include "src/tensor/device-impl.h"
#include "src/base/util.h"
#include "kernels/cpu/cpu.h"

/* Lives just before each aligned block. */
typedef struct px_cpu_block {
    void *raw;
    size_t bytes;
} px_cpu_block;

static atomic_uint_fast64_t px_cpu_in_use, px_cpu_peak, px_cpu_calls;

static int cpu_count(void)
{
    return 1;
}

static phx_status cpu_alloc(int dev, size_t bytes, void **ptr)
{
    (void)dev;
    size_t head = sizeof(px_cpu_block), align = px_cpu_block_align(bytes);
    if (bytes > SIZE_MAX - head - align) return phx_error(PHX_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
    char *raw = px_malloc(bytes + head + align);
    if (!raw) return phx_error(PHX_ENOMEM, "cpu: out of memory allocating %zu bytes", bytes);
    char *p = px_cpu_block_start(raw, head, bytes);
    px_cpu_block *blk = (px_cpu_block *)p - 1;
    blk->raw = raw;
    blk->bytes = bytes;
    uint64_t now = atomic_fetch_add(&px_cpu_in_use, bytes) + bytes;
    uint64_t peak = atomic_load(&px_cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&px_cpu_peak, &peak, now)) {}
    atomic_fetch_add(&px_cpu_calls, 1);
    *ptr = (void *)p;
    return PHX_OK;
}

static void cpu_release(int dev, void *ptr)
{
    (void)dev;
    if (!ptr) return;
    px_cpu_block *blk = (px_cpu_block *)ptr - 1;
    atomic_fetch_sub(&px_cpu_in_use, blk->bytes);
    px_free(blk->raw);
}

static phx_status cpu_memory_stats(int dev, phx_device_memory_stats_v1 *out)
{
    (void)dev;
    out->in_use_bytes = atomic_load(&px_cpu_in_use);
    out->cached_bytes = 0;
    out->peak_bytes = atomic_load(&px_cpu_peak);
    out->alloc_calls = atomic_load(&px_cpu_calls);
    return PHX_OK;
}

/* memmove: views of one storage may overlap */
static phx_status cpu_copy_h2d(int dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    if (bytes) memmove(dst, src, bytes);
    return PHX_OK;
}

static phx_status cpu_copy_d2d(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes)
{
    (void)dst_dev, (void)src_dev;
    if (bytes) memmove(dst, src, bytes);
    return PHX_OK;
}

const phx_device_v1 px_cpu_device = {
    .kind = PHX_DEVICE_CPU,
    .count = cpu_count,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .memory_stats = cpu_memory_stats,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_h2d,
    .copy_d2d = cpu_copy_d2d,
    .kernels = &px_cpu_kernels,
};
