/* Page-locked host memory and copies on a stream of the caller's own: what
 * the loader needs to copy batch k+1 to the device while step k computes
 * (phx_device_v1's host_alloc ... copy_h2d_async). */
#include "config.h"
#include "plugins/device/cuda/cuda-impl.h"

phx_status px_cuda_host_alloc(int dev, size_t bytes, void **ptr)
{
    if (!ptr) return phx_error(PHX_EINVAL, "cuda:%d: host_alloc: ptr is NULL", dev);
    *ptr = NULL;
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st != PHX_OK) return st;
    cudaError_t e = cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocPortable);
    return e == cudaSuccess ? PHX_OK : px_cuda_error(e, dev, "host_alloc: cudaHostAlloc");
}

void px_cuda_host_release(int dev, void *ptr)
{
    (void)dev;
    if (ptr) cudaFreeHost(ptr);
}

phx_status px_cuda_stream_create(int dev, void **stream)
{
    if (!stream) return phx_error(PHX_EINVAL, "cuda:%d: stream_create: stream is NULL", dev);
    *stream = NULL;
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st != PHX_OK) return st;
    cudaStream_t s;
    /* Non-blocking: the copies must not wait for the legacy default
     * stream, nor it for them. */
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "stream_create: cudaStreamCreateWithFlags");
    *stream = (void *)s;
    return PHX_OK;
}

void px_cuda_stream_destroy(int dev, void *stream)
{
    px_cuda_ctx *ctx;
    if (!stream || px_cuda_ctx_get(dev, &ctx) != PHX_OK) return;
    cudaStreamSynchronize((cudaStream_t)stream);
    cudaStreamDestroy((cudaStream_t)stream);
}

phx_status px_cuda_copy_h2d_async(int dev, void *dst, const void *src_host, size_t bytes, void *stream)
{
    if (bytes == 0) return PHX_OK;
    if (!dst || !src_host) return phx_error(PHX_EINVAL, "cuda:%d: copy_h2d_async: NULL pointer", dev);
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st != PHX_OK) return st;
    cudaStream_t s = stream ? (cudaStream_t)stream : ctx->stream;
    cudaError_t e = cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, s);
    return e == cudaSuccess ? PHX_OK : px_cuda_error(e, dev, "copy_h2d_async: cudaMemcpyAsync");
}
