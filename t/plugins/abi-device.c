/* A device plugin for t/plugin/abi, built against the frozen ABI 1.0
 * headers (t/plugin/abi-1.0): it calls itself "cuda" but keeps its memory on the
 * host, counts its allocations and runs the CPU's kernels (read through
 * phx_device_table, as a 1.0 table: the slots 1.0 has). It leaves every
 * optional slot NULL (memory_stats, synchronize, current_stream, the
 * events), which a 1.1 core fills with its defaults. */
#include <stdlib.h>
#include <string.h>
#include "phalanx/plugin.h"
#include "phalanx/plugin/device_v1.h"

/* Allocations made; the test reads it through dlsym. */
PHX_PLUGIN_EXPORT int abi_dev_allocs;

static int dev_count(void)
{
    return 1;
}

static phx_status dev_alloc(int dev, size_t bytes, void **ptr)
{
    (void)dev;
    *ptr = malloc(bytes ? bytes : 1);
    if (!*ptr) return phx_error(PHX_ENOMEM, "abi device: out of memory");
    __atomic_add_fetch(&abi_dev_allocs, 1, __ATOMIC_RELAXED);
    return PHX_OK;
}

static void dev_release(int dev, void *ptr)
{
    (void)dev;
    free(ptr);
}

static phx_status dev_copy(int dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    if (bytes) memmove(dst, src, bytes);
    return PHX_OK;
}

static phx_status dev_copy_d2d(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes)
{
    (void)dst_dev, (void)src_dev;
    if (bytes) memmove(dst, src, bytes);
    return PHX_OK;
}

/* Filled by the probe, which runs before the core reads the table. */
static phx_kernels_v1 dev_kernels;

static const phx_device_v1 dev_vtable = {
    .kind = PHX_DEVICE_CUDA,
    .count = dev_count,
    .alloc = dev_alloc,
    .release = dev_release,
    .copy_h2d = dev_copy,
    .copy_d2h = dev_copy,
    .copy_d2d = dev_copy_d2d,
    .kernels = &dev_kernels,
};

static int dev_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)ctx, (void)why, (void)len;
    const phx_device_v1 *cpu = phx_device_table(phx_cpu());
    if (!cpu) return -1;
    memcpy(&dev_kernels, cpu->kernels, sizeof dev_kernels); /* the 1.0 slots */
    return 0;
}

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 =
    PHX_PLUGIN_DESC_INIT(PHX_PLUGIN_DEVICE, "cuda", "1.0",
                         "host memory named cuda, with the CPU's kernels (t/plugin/abi)", dev_probe, &dev_vtable);
