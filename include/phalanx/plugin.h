/* Phalanx — the plugin descriptor and the loader. See doc/guide/plugins.md. */
#ifndef PHALANX_PLUGIN_H
#define PHALANX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI of the plugin descriptor and the frozen vtables. A plugin loads
 * when its major equals PHX_PLUGIN_ABI_MAJOR and its minor is at least
 * PHX_PLUGIN_ABI_MINOR_OLDEST; a minor only appends slots, and the core
 * reads an appended slot only from a plugin whose minor has it (see
 * doc/guide/plugins.md, "Vtables"). A plugin built against these headers
 * declares PHX_PLUGIN_ABI_MINOR through PHX_PLUGIN_DESC_INIT.
 *   1.0  the first ABI
 *   1.1  optional slots may be NULL (the core supplies their defaults);
 *        the plugin author's kit (phalanx/plugin/kit.h); phx_comm_v1.world;
 *        phx_device_v1.host_alloc .. copy_h2d_async (pinned memory, a copy
 *        stream); the kernel slots gemm_batched .. sum_squares
 *        (transformers, kernels_v1.def)
 *   1.2  the kernel slots conv2d_forward .. avgpool2d_backward over a
 *        phx_conv2d_desc (convolutional networks, kernels_v1.def)
 *   1.3  the kit's op record and communicator (phx_kit_op, phx_kit_comm:
 *        the five collective slots from one run function, the failure
 *        protocol); phx_comm_v1.world and phx_device_v1.memory_stats name
 *        frozen copies of the structs they wrote (same layout)
 *   1.4  the kernel slots copy_strided .. scatter_add (the tensor API and
 *        autograd, kernels_v1.def; phx_binary_op, phx_unary_op,
 *        phx_reduce_dim_op in device_v1.h)
 *   1.5  phx_comm_v1.split (process groups, phx_comm_split) */
#define PHX_PLUGIN_ABI_MAJOR 1
#define PHX_PLUGIN_ABI_MINOR 5
#define PHX_PLUGIN_ABI_MINOR_OLDEST 0

typedef enum phx_plugin_kind { PHX_PLUGIN_COMM = 1, PHX_PLUGIN_PRECISION = 2, PHX_PLUGIN_DEVICE = 3 } phx_plugin_kind;

/* What a probe gets to decide on. */
typedef struct phx_probe_ctx {
    int in_process; /* 1: the world is threads of one process */
    int local_size; /* ranks on this node */
    int local_rank;
} phx_probe_ctx;

/* The one data symbol a plugin exports, named phx_plugin_v1. The loader
 * reads and checks it (abi_major equal, abi_minor >= the oldest supported,
 * struct_size >= the loader's, kind and name equal to those in the file
 * name) before running any plugin code. */
typedef struct phx_plugin_desc {
    uint32_t abi_major;
    uint32_t abi_minor;
    uint32_t struct_size; /* sizeof(phx_plugin_desc) the plugin was built with */
    uint32_t kind; /* phx_plugin_kind */
    const char *name; /* "gloo": the file is phx-comm-gloo.so */
    const char *version; /* plugin's own version string */
    const char *description;
    /* Usable here? Returns a priority >= 0 if so (higher wins when the user
     * names none), or < 0 and writes why into why[0..why_len). */
    int (*probe)(const phx_probe_ctx *ctx, char *why, size_t why_len);
    /* Points to phx_comm_v1, phx_precision_v1 or phx_device_v1. */
    const void *vtable;
} phx_plugin_desc;

#define PHX_PLUGIN_DESC_INIT(kind_, name_, version_, desc_, probe_, vtable_) \
    { \
        PHX_PLUGIN_ABI_MAJOR, PHX_PLUGIN_ABI_MINOR, (uint32_t)sizeof(phx_plugin_desc), (uint32_t)(kind_), (name_), \
            (version_), (desc_), (probe_), (vtable_) \
    }

#if defined(__GNUC__)
#define PHX_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define PHX_PLUGIN_EXPORT
#endif

/* "comm", "precision", "device"; "?" otherwise. */
const char *phx_plugin_kind_name(phx_plugin_kind kind);

/* Loads the plugin chosen by `selection` for kind: a name ("gloo"), an
 * ordered list ("nccl,gloo": the first usable wins), exclusions
 * ("^nccl": any but nccl, by priority), or NULL/"" for the highest probe
 * priority among all found. On success *out points to the descriptor
 * (valid for the life of the process). Failure is PHX_ENOTFOUND (or
 * PHX_EABI) with a message listing the folders searched, the plugins
 * found, and why each candidate was rejected. Never a silent fallback. */
phx_status phx_plugin_load(phx_plugin_kind kind, const char *selection, const phx_probe_ctx *ctx,
                           const phx_plugin_desc **out);

/* One entry per plugin file found, for phx-info. */
typedef struct phx_plugin_info {
    size_t struct_size; /* sizeof (phx_plugin_info): PHX_PLUGIN_INFO_INIT sets it */
    char path[4096];
    char kind[16];
    char name[64];
    char version[64];
    uint32_t abi_major, abi_minor;
    int ok; /* 1: loadable and probe accepted */
    int priority; /* probe result when ok */
    char reason[512]; /* why not ok */
} phx_plugin_info;
#define PHX_PLUGIN_INFO_INIT \
    { \
        .struct_size = sizeof(phx_plugin_info) \
    }

/* Scans the search path (PHX_PLUGIN_PATH, the phalanx/ folder beside
 * libphalanx.so, the configured pkglibdir; never the current directory)
 * and fills up to max entries; returns the number found (may exceed max). */
size_t phx_plugin_scan(phx_plugin_info *infos, size_t max, const phx_probe_ctx *ctx);

/* Writes the folders searched, colon-separated, in order, into buf
 * (always NUL-terminated); returns buf. */
const char *phx_plugin_search_path(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
