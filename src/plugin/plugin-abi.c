/* The slot tables of phx_comm_v1, phx_device_v1 and phx_kernels_v1 and the
 * adapter that reads a plugin's table according to its minor. Appending a
 * slot: one line at the end of the struct (or of kernels_v1.def) and one
 * line at the end of its table here, with the minor that adds it. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "src/plugin/plugin-abi.h"
#include "phalanx/plugin/comm_v1.h"
#include "phalanx/plugin/device_v1.h"

static const px_slot comm_slots[] = {
    PX_SLOT(phx_comm_v1, init, 0, PX_REQUIRED),      PX_SLOT(phx_comm_v1, finalize, 0, PX_REQUIRED),
    PX_SLOT(phx_comm_v1, allreduce, 0, PX_REQUIRED), PX_SLOT(phx_comm_v1, broadcast, 0, PX_REQUIRED),
    PX_SLOT(phx_comm_v1, allgather, 0, PX_REQUIRED), PX_SLOT(phx_comm_v1, reduce_scatter, 0, PX_REQUIRED),
    PX_SLOT(phx_comm_v1, barrier, 0, PX_OPTIONAL), /* one-element all-reduce */
    PX_SLOT(phx_comm_v1, world, 1, PX_OPTIONAL), /* the environment's world, a TCP store */
    PX_SLOT(phx_comm_v1, split, 5, PX_OPTIONAL), /* init over the group, under a new prefix */
};

const px_table_abi px_comm_abi = {
    .name = "phx_comm_v1",
    .size = sizeof(phx_comm_v1),
    .head = 0,
    .slots = comm_slots,
    .nslots = sizeof comm_slots / sizeof comm_slots[0],
};

static const px_slot device_slots[] = {
    PX_SLOT(phx_device_v1, count, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, alloc, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, release, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, memory_stats, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, copy_h2d, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, copy_d2h, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, copy_d2d, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, synchronize, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, current_stream, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, event_create, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, event_record, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, stream_wait_event, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, event_synchronize, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, event_query, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, event_destroy, 0, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, kernels, 0, PX_REQUIRED),
    PX_SLOT(phx_device_v1, host_alloc, 1, PX_OPTIONAL), /* malloc */
    PX_SLOT(phx_device_v1, host_release, 1, PX_OPTIONAL), /* free */
    PX_SLOT(phx_device_v1, stream_create, 1, PX_OPTIONAL), /* a NULL stream */
    PX_SLOT(phx_device_v1, stream_destroy, 1, PX_OPTIONAL),
    PX_SLOT(phx_device_v1, copy_h2d_async, 1, PX_OPTIONAL), /* copy_h2d */
};

const px_table_abi px_device_abi = {
    .name = "phx_device_v1",
    .size = sizeof(phx_device_v1),
    .head = offsetof(phx_device_v1, count), /* kind, padding */
    .slots = device_slots,
    .nslots = sizeof device_slots / sizeof device_slots[0],
};

static const px_slot kernel_slots[] = {
#define PHX_KERNEL_SLOT(name, ret, args, since) PX_SLOT(phx_kernels_v1, name, since, PX_REQUIRED),
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT
};

const px_table_abi px_kernels_abi = {
    .name = "phx_kernels_v1",
    .size = sizeof(phx_kernels_v1),
    .head = 0,
    .slots = kernel_slots,
    .nslots = sizeof kernel_slots / sizeof kernel_slots[0],
};

static int is_null(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

phx_status px_abi_adapt(const px_table_abi *abi, const void *src, uint32_t minor, void *dst, const char *who,
                        const char *kind, const char *name)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    memset(d, 0, abi->size);
    memcpy(d, s, abi->head);
    for (size_t i = 0; i < abi->nslots; i++) {
        const px_slot *sl = &abi->slots[i];
        if (sl->since > minor) continue; /* past the end of the plugin's table */
        memcpy(d + sl->offset, s + sl->offset, sl->size);
        if (sl->required && is_null(d + sl->offset, sl->size))
            return phx_error(PHX_EABI, "%s: %s plugin '%s' (ABI %d.%u): required slot %s.%s (since ABI %d.%u) is NULL",
                             who, kind, name, PHX_PLUGIN_ABI_MAJOR, minor, abi->name, sl->name, PHX_PLUGIN_ABI_MAJOR,
                             sl->since);
    }
    return PHX_OK;
}

uint32_t px_abi_since(const px_table_abi *abi, const char *name)
{
    for (size_t i = 0; i < abi->nslots; i++)
        if (strcmp(abi->slots[i].name, name) == 0) return abi->slots[i].since;
    return UINT32_MAX;
}

int px_abi_has(const px_table_abi *abi, const char *name, uint32_t minor)
{
    uint32_t since = px_abi_since(abi, name);
    return since != UINT32_MAX && since <= minor;
}

int px_abi_selfcheck(const px_table_abi *abi, char *why, size_t len)
{
    size_t at = abi->head;
    uint32_t since = 0;
    for (size_t i = 0; i < abi->nslots; i++) {
        const px_slot *sl = &abi->slots[i];
        if (sl->offset != at) {
            snprintf(why, len, "%s.%s is at offset %zu, expected %zu (slots out of order or missing)", abi->name,
                     sl->name, sl->offset, at);
            return -1;
        }
        if (sl->since < since || sl->since > PHX_PLUGIN_ABI_MINOR) {
            snprintf(why, len, "%s.%s is since minor %u, expected %u..%d (appended slots come last)", abi->name,
                     sl->name, sl->since, since, PHX_PLUGIN_ABI_MINOR);
            return -1;
        }
        since = sl->since;
        at = sl->offset + sl->size;
    }
    if (at != abi->size) {
        snprintf(why, len, "%s: the slots end at byte %zu, the struct at %zu (a field without a slot line?)", abi->name,
                 at, abi->size);
        return -1;
    }
    return 0;
}
