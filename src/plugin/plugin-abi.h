/* The slot tables of the plugin vtables: for each table, each slot's
 * place, the ABI minor that appended it and whether a plugin must fill
 * it. The core never calls a plugin's vtable in place: it copies it
 * through px_abi_adapt into a table of the current layout, so that a slot
 * a plugin's minor does not have reads as NULL, and a NULL optional slot
 * then gets the core's default (the user of the table fills it). */
#ifndef PHX_CORE_PLUGIN_ABI_H
#define PHX_CORE_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/plugin.h"

enum { PX_OPTIONAL = 0, PX_REQUIRED = 1 };

typedef struct px_slot {
    const char *name;
    size_t offset; /* offsetof in the current struct */
    size_t size; /* a function or data pointer */
    uint32_t since; /* the minor that appended it */
    int required; /* PX_REQUIRED from `since` on, or PX_OPTIONAL */
} px_slot;

#define PX_SLOT(type, field, since, required) \
    { \
#field, offsetof(type, field), sizeof(((type *)0)->field), (since), (required) \
    }

typedef struct px_table_abi {
    const char *name; /* "phx_comm_v1" */
    size_t size; /* sizeof the current struct */
    size_t head; /* bytes before the first slot (copied as they are) */
    const px_slot *slots; /* in offset order: appended slots come last */
    size_t nslots;
} px_table_abi;

extern const px_table_abi px_comm_abi; /* phx_comm_v1 */
extern const px_table_abi px_device_abi; /* phx_device_v1 (head: kind) */
extern const px_table_abi px_kernels_abi; /* phx_kernels_v1, from kernels_v1.def */

/* Copies src, a table of a plugin of ABI minor `minor`, into dst (abi->size
 * bytes): the head, then each slot with since <= minor; the others are
 * NULL. Then checks that every required slot the plugin's minor has is
 * set. PHX_EABI otherwise, with "<who>: <kind> plugin '<name>' (ABI
 * <major>.<minor>): required slot <table>.<slot> (since 1.<since>) is NULL".
 * Reads data only: no plugin code runs. */
phx_status px_abi_adapt(const px_table_abi *abi, const void *src, uint32_t minor, void *dst, const char *who,
                        const char *kind, const char *name);

/* 1 when the slot called name is in the table of a plugin of that minor. */
int px_abi_has(const px_table_abi *abi, const char *name, uint32_t minor);

/* The minor that appended the slot called name; UINT32_MAX when none. */
uint32_t px_abi_since(const px_table_abi *abi, const char *name);

/* Checks the table description itself (slots in offset order, without
 * gaps or overlaps, covering the struct to its end, since never going
 * down and never above PHX_PLUGIN_ABI_MINOR): 0 when sound, else -1 with
 * why written into why[0..len). For the tests. */
int px_abi_selfcheck(const px_table_abi *abi, char *why, size_t len);

#endif
