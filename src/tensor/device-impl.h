/* Devices (internal). */
#ifndef PHX_CORE_DEVICE_IMPL_H
#define PHX_CORE_DEVICE_IMPL_H

#include "phalanx/device.h"
#include "phalanx/plugin/device_v1.h"

/* The built-in CPU device (kernels/cpu/device.c); the core uses it
 * through phx_device_table, which adds the defaults of its NULL slots. */
extern const phx_device_v1 px_cpu_device;

/* The kernel table of d, or NULL with phx_last_error set. A slot appended
 * after the device plugin's minor is NULL there: check it with
 * PX_NEED_SLOT (or call px_kernel_missing when it is NULL). */
const phx_kernels_v1 *px_device_kernels(phx_device d);

/* PHX_EUNSUPPORTED: device d's kernel table has no slot `slot` (a name in
 * kernels_v1.def), its plugin being older than the slot. The message
 * names who (the public function), the device, the slot, the plugin's
 * ABI and the ABI that added the slot. */
phx_status px_kernel_missing(const char *who, phx_device d, const char *slot);

/* Returns px_kernel_missing(who, d, "slot") from the calling function
 * when the kernel table k (device d's) has no slot. */
#define PX_NEED_SLOT(who, d, k, slot) \
    do { \
        if (!(k)->slot) return px_kernel_missing(who, d, #slot); \
    } while (0)
#endif
