/* The CPU device's kernel table: px_cpu_<name> in every slot of
 * kernels_v1.def. */
#include "config.h"
#include "kernels/cpu/cpu.h"

const phx_kernels_v1 px_cpu_kernels = {
#define PHX_KERNEL_SLOT(name, ret, args, since) .name = px_cpu_##name,
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT
};
