/* Indexing along the middle dim of (outer, n, inner) on the GPU:
 * index_select and gather (one thread per output element, elements moved
 * as words: any dtype, the CPU's bits), index_add and scatter_add (one
 * thread per source element, atomicAdd on the destination in its own
 * type: f32, and f16/bf16 natively where the GPU has it, as a
 * compare-and-swap loop in CUDA's headers where it does not). Repeated
 * indices therefore sum in an unspecified order: f32 results may differ
 * from the CPU's (and from run to run) by rounding, and each f16/bf16
 * addition rounds to the dtype once, as on the CPU. Indices live on the
 * device and a kernel cannot fail synchronously: an index outside [0, n)
 * is not reported; index_select and gather write 0 (all bits clear)
 * there and index_add and scatter_add skip it (the core checks the
 * indices of CPU tensors only). */
#include "plugins/device/cuda/kernels/nd.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

/* ---- select / gather: y (outer, m, inner); PER_ELT: idx has one entry per
 * element of y (gather), else one per j (index_select) */

template <int BYTES, bool PER_ELT>
__global__ void k_take(int64_t outer, int64_t n, int64_t inner, const void *x, const int64_t *idx, int64_t m, void *y)
{
    typedef typename px_word<BYTES>::T T;
    int64_t total = outer * m * inner;
    for (int64_t e = px_tid(); e < total; e += px_nthreads()) {
        int64_t oj = e / inner, i = e - oj * inner, o = oj / m, j = oj - o * m;
        int64_t k = PER_ELT ? idx[e] : idx[j];
        ((T *)y)[e] = k >= 0 && k < n ? ((const T *)x)[(o * n + k) * inner + i] : (T)0;
    }
}

/* ---- index_add / scatter_add: x (outer, n, inner) += src (outer, m,
 * inner) */

template <int DT> __device__ __forceinline__ void px_atomic_add(void *p, int64_t at, const void *src, int64_t e)
{
    if (DT == PHX_F32)
        atomicAdd((float *)p + at, ((const float *)src)[e]);
    else if (DT == PHX_F16)
        atomicAdd((__half *)p + at, ((const __half *)src)[e]);
    else
        atomicAdd((__nv_bfloat16 *)p + at, ((const __nv_bfloat16 *)src)[e]);
}

template <int DT, bool PER_ELT>
__global__ void k_add_at(int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m,
                         const void *src)
{
    int64_t total = outer * m * inner;
    for (int64_t e = px_tid(); e < total; e += px_nthreads()) {
        int64_t oj = e / inner, i = e - oj * inner, o = oj / m, j = oj - o * m;
        int64_t k = PER_ELT ? idx[e] : idx[j];
        if (k >= 0 && k < n) px_atomic_add<DT>(x, (o * n + k) * inner + i, src, e);
    }
}

/* Checks the sizes; *total <- outer * m * inner (the elements of y or
 * src). */
static phx_status index_check(const char *name, int64_t outer, int64_t n, int64_t inner, int64_t m, const int64_t *idx,
                              int64_t *total)
{
    if (outer < 0 || n < 0 || inner < 0 || m < 0)
        return phx_error(PHX_EINVAL, "%s: shape (%lld, %lld, %lld) and %lld indices, expected sizes >= 0", name,
                         (long long)outer, (long long)n, (long long)inner, (long long)m);
    int64_t big = n > m ? n : m;
    if (outer > 0 && inner > 0 && big > INT64_MAX / outer / inner)
        return phx_error(PHX_EINVAL, "%s: shape (%lld, %lld, %lld) and %lld indices, more than 2^63 elements", name,
                         (long long)outer, (long long)n, (long long)inner, (long long)m);
    *total = outer * m * inner;
    if (*total > 0 && !idx) return phx_error(PHX_EINVAL, "%s: %lld indices and no index array", name, (long long)m);
    return PHX_OK;
}

static phx_status take(const char *name, bool per_elt, int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner,
                       const void *x, const int64_t *idx, int64_t m, void *y)
{
    int64_t total = 0;
    phx_status st = index_check(name, outer, n, inner, m, idx, &total);
    if (st != PHX_OK) return st;
    if (phx_dtype_size(dt) == 0)
        return phx_error(PHX_EINVAL, "%s: dtype %d, expected f32, f16, bf16, i32 or i64", name, (int)dt);
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    if (per_elt)
        PX_BYTES_DISPATCH(name, dt,
                          (k_take<BYTES, true><<<grid, PX_THREADS, 0, ctx->stream>>>(outer, n, inner, x, idx, m, y)));
    else
        PX_BYTES_DISPATCH(name, dt,
                          (k_take<BYTES, false><<<grid, PX_THREADS, 0, ctx->stream>>>(outer, n, inner, x, idx, m, y)));
    return px_cuda_launched(dev, name);
}

static phx_status add_at(const char *name, bool per_elt, int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner,
                         void *x, const int64_t *idx, int64_t m, const void *src)
{
    int64_t total = 0;
    phx_status st = index_check(name, outer, n, inner, m, idx, &total);
    if (st != PHX_OK) return st;
    PX_CHECK_FLOAT(name, dt);
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    if (per_elt)
        PX_FLOAT_DISPATCH(name, dt,
                          (k_add_at<DT, true><<<grid, PX_THREADS, 0, ctx->stream>>>(outer, n, inner, x, idx, m, src)));
    else
        PX_FLOAT_DISPATCH(name, dt,
                          (k_add_at<DT, false><<<grid, PX_THREADS, 0, ctx->stream>>>(outer, n, inner, x, idx, m, src)));
    return px_cuda_launched(dev, name);
}

extern "C" phx_status px_cuda_index_select(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner,
                                           const void *x, const int64_t *idx, int64_t m, void *y)
{
    return take("index_select", false, dev, dt, outer, n, inner, x, idx, m, y);
}

extern "C" phx_status px_cuda_gather(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                                     const int64_t *idx, int64_t m, void *y)
{
    return take("gather", true, dev, dt, outer, n, inner, x, idx, m, y);
}

extern "C" phx_status px_cuda_index_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x,
                                        const int64_t *idx, int64_t m, const void *src)
{
    return add_at("index_add", false, dev, dt, outer, n, inner, x, idx, m, src);
}

extern "C" phx_status px_cuda_scatter_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x,
                                          const int64_t *idx, int64_t m, const void *src)
{
    return add_at("scatter_add", true, dev, dt, outer, n, inner, x, idx, m, src);
}
