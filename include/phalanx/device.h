/* Phalanx — devices. "cpu" is built in; "cuda" comes from the device plugin. */
#ifndef PHALANX_DEVICE_H
#define PHALANX_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum phx_device_kind { PHX_DEVICE_CPU = 0, PHX_DEVICE_CUDA = 1 } phx_device_kind;

/* A device is a value: kind + index ("cuda:1" = {PHX_DEVICE_CUDA, 1}). */
typedef struct phx_device {
    int kind; /* phx_device_kind */
    int index; /* 0 for the CPU */
} phx_device;

/* The CPU device {PHX_DEVICE_CPU, 0}. */
phx_device phx_cpu(void);

/* 1 when a and b are the same device. */
int phx_device_equal(phx_device a, phx_device b);

/* Parses "cpu", "cuda", "cuda:N". Loads the device plugin for "cuda".
 * PHX_EINVAL for syntax, PHX_ENOTFOUND when the plugin or index is
 * missing (message says why, e.g. "no CUDA device"). */
phx_status phx_device_parse(const char *name, phx_device *out);

/* Writes "cpu" or "cuda:N" into buf (always NUL-terminated). Returns buf. */
const char *phx_device_name(phx_device d, char *buf, size_t len);

/* The default device: PHX_DEVICE if set (an error if unusable: never a
 * silent fallback), else cuda:LOCAL_RANK when the cuda plugin probes
 * usable, else cpu. */
phx_status phx_device_default(phx_device *out);

/* Number of devices of that kind (CPU: 1; CUDA: 0 without a GPU). */
int phx_device_count(phx_device_kind kind);

/* Waits for all queued work on the device (no-op on CPU). */
phx_status phx_device_synchronize(phx_device d);

typedef struct phx_memory_stats {
    size_t struct_size; /* sizeof (phx_memory_stats): PHX_MEMORY_STATS_INIT sets it */
    uint64_t in_use_bytes; /* handed out to tensors now */
    uint64_t cached_bytes; /* held by the caching allocator, free for reuse */
    uint64_t peak_bytes; /* high-water mark of in_use_bytes */
    uint64_t alloc_calls; /* requests served (from cache or fresh) */
} phx_memory_stats;
#define PHX_MEMORY_STATS_INIT \
    { \
        .struct_size = sizeof(phx_memory_stats) \
    }

/* Allocator statistics of the device (CPU: counts tensor storage). */
phx_status phx_device_memory_stats(phx_device d, phx_memory_stats *out);

/* Number of host allocations made by libphalanx since start (all threads).
 * Tests use the difference across a training step to prove a steady state
 * allocates nothing. */
uint64_t phx_alloc_count(void);

/* The CPU thread budget of the calling thread, which the CPU kernels, the
 * BLAS and oneDNN all take from: in a phx_spawn rank thread or a
 * DataParallel replica its own, else the library's (the value of
 * phx_set_num_threads, else PHX_NUM_THREADS, else SLURM_CPUS_PER_TASK in a
 * task of srun -c, else cores / the local world size), at least 1. */
int phx_num_threads(void);

/* Sets the thread budget: the calling rank thread's own inside phx_spawn's
 * threads (other ranks keep theirs), else the library's. PHX_EINVAL for
 * n < 1. */
phx_status phx_set_num_threads(int n);

#ifdef __cplusplus
}
#endif
#endif
