/* copy_strided on the GPU: a copy of elements between two strided
 * layouts of the same shape (permuted, narrowed, expanded or
 * concatenated views), one thread per element of the coalesced shape
 * (nd.cuh). Both sides contiguous after coalescing: one device-to-device
 * cudaMemcpyAsync. Any dtype: elements are moved as 2-, 4- or 8-byte
 * words, so the result is the CPU's bit for bit. */
#include "plugins/device/cuda/kernels/nd.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

template <int BYTES> __global__ void k_copy_strided(px_nd d, int64_t n, void *dst, const void *src)
{
    typedef typename px_word<BYTES>::T T;
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        int64_t off[2];
        px_nd_at<2>(d, i, off);
        ((T *)dst)[off[0]] = ((const T *)src)[off[1]];
    }
}

extern "C" phx_status px_cuda_copy_strided(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *dst,
                                           const int64_t *dst_strides, const void *src, const int64_t *src_strides)
{
    if (ndim > 0 && (!dst_strides || !src_strides))
        return phx_error(PHX_EINVAL, "copy_strided: %d dims and no %s strides", ndim, dst_strides ? "src" : "dst");
    size_t es = phx_dtype_size(dt);
    if (es == 0) return phx_error(PHX_EINVAL, "copy_strided: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt);
    const int64_t *strides[2] = {dst_strides, src_strides};
    px_nd d = {};
    int64_t n = 0;
    phx_status st = px_nd_make("copy_strided", ndim, shape, 2, strides, &d, &n);
    if (st != PHX_OK || n == 0) return st;
    PX_CTX(dev, ctx);
    if (px_nd_flat(&d, 0) && px_nd_flat(&d, 1)) {
        if (dst == src) return PHX_OK;
        cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)n * es, cudaMemcpyDeviceToDevice, ctx->stream);
        return px_cuda_error(e, dev, "copy_strided: cudaMemcpyAsync");
    }
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, PX_WAVES);
    PX_BYTES_DISPATCH("copy_strided", dt,
                      (k_copy_strided<BYTES><<<grid, PX_THREADS, 0, ctx->stream>>>(d, n, dst, src)));
    return px_cuda_launched(dev, "copy_strided");
}
