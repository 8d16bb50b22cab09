/* How many CUDA devices this process will see, without initialising CUDA.
 *
 * cudaGetDeviceCount() initialises the driver (cuInit), and a process that
 * did that must not fork children that use CUDA: phx_spawn forks, and the
 * loader probes plugins (and phx_device_count counts devices) in the
 * parent. So probes and counts ask NVML (the driver's management
 * library, fork-safe, as PyTorch does) and apply CUDA_VISIBLE_DEVICES
 * themselves; only when NVML is absent do they fall back to
 * cudaGetDeviceCount (which then mostly reports that there is no driver).
 * The device plugin counts again with CUDA at its first real use. Shared
 * by phx-device-cuda.so and phx-comm-nccl.so. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "visible.h"

typedef int (*px_nvml_fn)(void);
typedef int (*px_nvml_count_fn)(unsigned int *);

/* The number of GPUs NVML sees; -1 when NVML cannot answer. */
static int nvml_count(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    px_nvml_fn init = (px_nvml_fn)dlsym(h, "nvmlInit_v2"), shutdown = (px_nvml_fn)dlsym(h, "nvmlShutdown");
    px_nvml_count_fn count = (px_nvml_count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
    int n = -1;
    if (init && shutdown && count && init() == 0) {
        unsigned int c = 0;
        if (count(&c) == 0) n = (int)c;
        shutdown();
    }
    dlclose(h);
    return n;
}

int px_cuda_visible_count(char *why, size_t why_len)
{
    int n = nvml_count();
    if (n >= 0) {
        int vis = px_cuda_visible_filter(getenv("CUDA_VISIBLE_DEVICES"), n);
        if (vis > 0) return vis;
        if (why && n > 0)
            snprintf(why, why_len, "no CUDA device (CUDA_VISIBLE_DEVICES='%s' hides all %d)",
                     getenv("CUDA_VISIBLE_DEVICES"), n);
        else if (why)
            snprintf(why, why_len, "no CUDA device");
        return 0;
    }
    /* no NVML: ask CUDA (initialises the driver when there is one) */
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) snprintf(why, why_len, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why) snprintf(why, why_len, "no CUDA device");
    return n;
}
