/* Devices (internal). */
#ifndef PHX_CORE_DEVICE_IMPL_H
#define PHX_CORE_DEVICE_IMPL_H

#include "phalanx/device.h"
#include "phalanx/plugin/device_v1.h"

/* The built-in CPU device (core/tensor/device-cpu.c); the core uses it
 * through phx_device_table, which adds the defaults of its NULL slots. */
extern const phx_device_v1 px_cpu_device;

/* The kernel table of d, or NULL with phx_last_error set. A slot appended
 * after the device plugin's minor is NULL there: check it, and call
 * px_kernel_missing when it is. */
const phx_kernels_v1 *px_device_kernels(phx_device d);

/* PHX_EUNSUPPORTED: device d's plugin is older than kernel slot `slot`
 * (a name in kernels_v1.def); the message names both ABIs. */
phx_status px_kernel_missing(phx_device d, const char *slot);
#endif
