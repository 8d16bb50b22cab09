/* Fork-safe count of the CUDA devices this process will see (visible.c).
 * Internal to the cuda and nccl plugins. */
#ifndef PHX_CUDA_VISIBLE_H
#define PHX_CUDA_VISIBLE_H

#include <stddef.h>

/* Devices visible (NVML's count filtered by CUDA_VISIBLE_DEVICES; without
 * NVML, cudaGetDeviceCount). 0 means none, and why (may be NULL) says why,
 * starting with "no CUDA device". Does not initialise CUDA when NVML is
 * there, so a process may fork CUDA-using children afterwards. */
int px_cuda_visible_count(char *why, size_t why_len);

/* How many of n devices the CUDA_VISIBLE_DEVICES value v leaves (NULL: n):
 * entries up to the first invalid or repeated one, as CUDA reads it. */
int px_cuda_visible_filter(const char *v, int n);

#endif
