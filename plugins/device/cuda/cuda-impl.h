/* The cuda device plugin's internals, shared by its C files and the
 * kernels in plugins/device/cuda/kernels (C and CUDA C++; C linkage). Not installed.
 *
 * Every thread gets, per device, a context: its compute stream (all the
 * thread's kernels and copies on that device run there, in order), pinned
 * staging buffers for host copies, a device scratch buffer, a cuBLAS
 * handle with its workspace and a cuDNN handle. When the thread exits its contexts go to the
 * device's pool and the next new thread takes one, stream included, so
 * blocks the caching allocator keyed to that stream stay correctly
 * ordered. */
#ifndef PHX_CUDA_IMPL_H
#define PHX_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "phalanx/plugin/device_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host copies move through two pinned buffers of this size, alternating,
 * so the host memcpy of one chunk overlaps the DMA of the other. */
#define PX_CUDA_STAGE_BYTES ((size_t)4 << 20)

/* Pinned bytes for small synchronous results (reductions, flags). */
#define PX_CUDA_HOST_SMALL 4096

typedef struct px_cuda_ctx {
    int dev;
    cudaStream_t stream; /* the thread's compute stream on dev */
    cudaEvent_t order; /* for ordering against other streams */
    int sm_count; /* multiprocessors, for grid sizes */
    void *stage[2]; /* pinned, PX_CUDA_STAGE_BYTES each (lazy) */
    cudaEvent_t stage_done[2]; /* last copy that used stage[i] */
    int stage_next;
    void *host_small; /* pinned, PX_CUDA_HOST_SMALL (lazy) */
    void *scratch; /* device, grown on demand */
    size_t scratch_bytes;
    void *blas; /* cublasHandle_t (lazy, plugins/device/cuda/kernels/gemm.c) */
    void *blas_ws; /* its workspace (device) */
    size_t blas_ws_bytes;
    void *dnn; /* cudnnHandle_t (lazy, plugins/device/cuda/kernels/conv.cu), bound to stream */
    struct px_cuda_ctx *next; /* in the device's pool once the thread exits */
} px_cuda_ctx;

/* Makes dev current for the calling thread and returns its context there
 * (created on first use). PHX_EINVAL for a bad index, PHX_ENOTFOUND when
 * there is no CUDA device, PHX_EDEVICE for CUDA errors. */
phx_status px_cuda_ctx_get(int dev, px_cuda_ctx **out);

/* Turns a CUDA error into a status (PHX_ENOMEM for allocation failures,
 * PHX_EDEVICE otherwise) with phx_last_error "cuda:<dev>: <what>: <CUDA's
 * string> (<error name>)". Clears a non-sticky error. */
phx_status px_cuda_error(cudaError_t e, int dev, const char *what);

/* PHX_OK, or px_cuda_error for the last launch on this thread. */
phx_status px_cuda_launched(int dev, const char *kernel);

/* Device memory through dev's caching allocator, keyed to ctx's stream. */
phx_status px_cuda_alloc(px_cuda_ctx *ctx, size_t bytes, void **ptr);
void px_cuda_release(px_cuda_ctx *ctx, void *ptr);
/* dev's allocator statistics. */
phx_status px_cuda_memory_stats(int dev, phx_device_memory_stats_v1 *out);

/* A device scratch area of at least bytes, valid for work queued on
 * ctx->stream until the next call (which may replace it). */
phx_status px_cuda_scratch(px_cuda_ctx *ctx, size_t bytes, void **ptr);

/* The pinned small host buffer (PX_CUDA_HOST_SMALL bytes). */
phx_status px_cuda_host_small(px_cuda_ctx *ctx, void **ptr);

/* Grid size for n work items of `per_block` each: enough blocks to cover
 * them, at most `waves` blocks per multiprocessor (grid-stride loops
 * cover the rest); at least 1. */
unsigned px_cuda_grid(const px_cuda_ctx *ctx, int64_t n, int per_block, int waves);

/* phx_device_v1's host_alloc, host_release, stream_create, stream_destroy
 * and copy_h2d_async (host.c). */
phx_status px_cuda_host_alloc(int dev, size_t bytes, void **ptr);
void px_cuda_host_release(int dev, void *ptr);
phx_status px_cuda_stream_create(int dev, void **stream);
void px_cuda_stream_destroy(int dev, void *stream);
phx_status px_cuda_copy_h2d_async(int dev, void *dst, const void *src_host, size_t bytes, void *stream);

/* PHX_TF32 for GEMM and convolutions (plugins/device/cuda/kernels/gemm.c): *on <- 0
 * when unset, "" or "0", 1 for "1"; PHX_EINVAL for anything else. */
phx_status px_cuda_tf32(int *on);

/* The kernel table (plugins/device/cuda/kernels) and the device table (plugin.c). */
extern const phx_kernels_v1 px_cuda_kernels;

#ifdef __cplusplus
}
#endif
#endif
