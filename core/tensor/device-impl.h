/* Devices (internal). */
#ifndef PHX_CORE_DEVICE_IMPL_H
#define PHX_CORE_DEVICE_IMPL_H

#include "phalanx/device.h"
#include "phalanx/plugin/device_v1.h"

/* The built-in CPU device (core/tensor/device-cpu.c). */
extern const phx_device_v1 px_cpu_device;

/* The kernel table of d, or NULL with phx_last_error set. */
const phx_kernels_v1 *px_device_kernels(phx_device d);
#endif
