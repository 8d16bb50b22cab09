/* The cuda device's kernel table: px_cuda_<name> in every slot of
 * kernels_v1.def (plugins/device/cuda/kernels/kernels.h). */
#include "config.h"
#include "plugins/device/cuda/kernels/kernels.h"
#include "plugins/device/cuda/cuda-impl.h"

const phx_kernels_v1 px_cuda_kernels = {
#define PHX_KERNEL_SLOT(name, ret, args, since) .name = px_cuda_##name,
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT
};
