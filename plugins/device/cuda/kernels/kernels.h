/* Entry points of the CUDA kernels (the .cu files in plugins/device/cuda/kernels and
 * gemm.c): px_cuda_<name> for each slot of
 * include/phalanx/plugin/kernels_v1.def, with the slot's contract. C
 * linkage; internal to the cuda plugin. The device index is a CUDA device; work is queued on the calling
 * thread's stream for it. */
#ifndef PHX_KERNELS_CUDA_KERNELS_H
#define PHX_KERNELS_CUDA_KERNELS_H

#include "phalanx/plugin/device_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PHX_KERNEL_SLOT(name, ret, args, since) ret px_cuda_##name args;
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT

#ifdef __cplusplus
}
#endif
#endif
