/* Shared pieces of the CUDA kernels: dtype loads and stores, 16-byte
 * vector access, launch shapes, argument checks and the entry-point
 * prologue. Per-element formulas come from kernels/math.h, the same
 * functions the CPU kernels (kernels/cpu) run, so the CPU tests cover
 * them; rounding to f16/bf16 uses the hardware conversion for non-NaN
 * values (round to nearest even, like phx_f32_to_f16 bit for bit) and
 * math.h for NaN, to keep its payload rule. Internal to the plugin. */
#ifndef PHX_KERNELS_CUDA_COMMON_CUH
#define PHX_KERNELS_CUDA_COMMON_CUH

#include <stdint.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "kernels/math.h"
#include "plugins/device/cuda/cuda-impl.h"

#define PX_THREADS 256   /* threads per block for flat kernels */
#define PX_WAVES 8       /* blocks per multiprocessor for grid-stride loops */

/* ---- element access: DT is a phx_dtype known at compile time */

template <int DT> struct px_elt { typedef float T; enum { N = 4 }; };          /* f32 */
template <> struct px_elt<PHX_F16> { typedef uint16_t T; enum { N = 8 }; };
template <> struct px_elt<PHX_BF16> { typedef uint16_t T; enum { N = 8 }; };

template <int DT> __device__ __forceinline__ float px_to_f32(typename px_elt<DT>::T v);
template <> __device__ __forceinline__ float px_to_f32<PHX_F32>(float v) { return v; }
template <> __device__ __forceinline__ float px_to_f32<PHX_F16>(uint16_t v)
{
    return __half2float(__ushort_as_half(v));
}
template <> __device__ __forceinline__ float px_to_f32<PHX_BF16>(uint16_t v) { return phx_bf16_to_f32(v); }

template <int DT> __device__ __forceinline__ typename px_elt<DT>::T px_from_f32(float v);
template <> __device__ __forceinline__ float px_from_f32<PHX_F32>(float v) { return v; }
template <> __device__ __forceinline__ uint16_t px_from_f32<PHX_F16>(float v)
{
    return v != v ? phx_f32_to_f16(v) : __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ uint16_t px_from_f32<PHX_BF16>(float v)
{
    return v != v ? phx_f32_to_bf16(v) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

template <int DT> __device__ __forceinline__ float px_ld(const void *p, int64_t i)
{
    return px_to_f32<DT>(((const typename px_elt<DT>::T *)p)[i]);
}
template <int DT> __device__ __forceinline__ void px_st(void *p, int64_t i, float v)
{
    ((typename px_elt<DT>::T *)p)[i] = px_from_f32<DT>(v);
}

/* Vectorised access in groups of 8 elements: group g is elements
 * 8g..8g+7, one 16-byte load for f16/bf16, two for f32 (the base must be
 * 16-byte aligned). */
#define PX_G 8

template <int DT> __device__ __forceinline__ void px_ld8(const void *p, int64_t g, float *out)
{
    if (DT == PHX_F32) {
        float4 a = __ldg((const float4 *)p + 2 * g), b = __ldg((const float4 *)p + 2 * g + 1);
        out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
        out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
    } else {
        uint4 raw = __ldg((const uint4 *)p + g);
        const uint16_t *e = (const uint16_t *)&raw;
#pragma unroll
        for (int j = 0; j < 8; j++) out[j] = px_to_f32<DT>(e[j]);
    }
}

/* As px_ld8 through the ordinary cache path (data this kernel writes too). */
template <int DT> __device__ __forceinline__ void px_ld8_rw(const void *p, int64_t g, float *out)
{
    if (DT == PHX_F32) {
        float4 a = ((const float4 *)p)[2 * g], b = ((const float4 *)p)[2 * g + 1];
        out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
        out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
    } else {
        uint4 raw = ((const uint4 *)p)[g];
        const uint16_t *e = (const uint16_t *)&raw;
#pragma unroll
        for (int j = 0; j < 8; j++) out[j] = px_to_f32<DT>(e[j]);
    }
}

template <int DT> __device__ __forceinline__ void px_st8(void *p, int64_t g, const float *in)
{
    if (DT == PHX_F32) {
        ((float4 *)p)[2 * g] = make_float4(in[0], in[1], in[2], in[3]);
        ((float4 *)p)[2 * g + 1] = make_float4(in[4], in[5], in[6], in[7]);
    } else {
        uint4 raw;
        uint16_t *e = (uint16_t *)&raw;
#pragma unroll
        for (int j = 0; j < 8; j++) e[j] = (uint16_t)px_from_f32<DT>(in[j]);
        ((uint4 *)p)[g] = raw;
    }
}

/* Float -> integer as the CPU kernels: truncate toward zero, saturate,
 * NaN gives 0. */
__host__ __device__ static inline int64_t px_f2i64(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

__host__ __device__ static inline int32_t px_f2i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

__device__ __forceinline__ int64_t px_tid() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t px_nthreads() { return (int64_t)gridDim.x * blockDim.x; }

/* ---- host side */

static inline int px_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Number of whole groups of per_vec elements to process vectorised when
 * every pointer given is 16-byte aligned (NULL pointers are ignored),
 * else 0 (scalar path for everything). */
static inline int64_t px_nvec(int64_t n, int per_vec, const void *a, const void *b = NULL, const void *c = NULL,
                              const void *d = NULL)
{
    if ((a && !px_aligned16(a)) || (b && !px_aligned16(b)) || (c && !px_aligned16(c)) || (d && !px_aligned16(d)))
        return 0;
    return n / per_vec;
}

/* Makes dev current and fetches the thread's context; returns on error. */
#define PX_CTX(dev, ctx)                                                  \
    px_cuda_ctx *ctx;                                                     \
    do {                                                                  \
        phx_status st_ = px_cuda_ctx_get((dev), &ctx);                    \
        if (st_ != PHX_OK) return st_;                                    \
    } while (0)

#define PX_CHECK_N(name, n)                                                                 \
    do {                                                                                    \
        if ((n) < 0) return phx_error(PHX_EINVAL, "%s: %lld elements, expected >= 0", name, \
                                      (long long)(n));                                      \
    } while (0)

/* Runs CALL with the constant DT for a float dtype, else PHX_EINVAL. */
#define PX_FLOAT_DISPATCH_AS(name, dt, SYM, CALL)                                           \
    do {                                                                                    \
        switch (dt) {                                                                       \
        case PHX_F32: { const int SYM = PHX_F32; (void)SYM; CALL; break; }                             \
        case PHX_F16: { const int SYM = PHX_F16; (void)SYM; CALL; break; }                             \
        case PHX_BF16: { const int SYM = PHX_BF16; (void)SYM; CALL; break; }                           \
        default:                                                                            \
            return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", name,   \
                             phx_dtype_name((phx_dtype)(dt)));                              \
        }                                                                                   \
    } while (0)
#define PX_FLOAT_DISPATCH(name, dt, CALL) PX_FLOAT_DISPATCH_AS(name, dt, DT, CALL)

/* PHX_OK for f32, f16, bf16; else PHX_EINVAL naming the kernel. */
static inline phx_status px_check_float(const char *name, phx_dtype dt)
{
    if (dt == PHX_F32 || dt == PHX_F16 || dt == PHX_BF16) return PHX_OK;
    return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", name, phx_dtype_name(dt));
}
#define PX_CHECK_FLOAT(name, dt)                               \
    do {                                                       \
        phx_status s_ = px_check_float(name, dt);              \
        if (s_ != PHX_OK) return s_;                           \
    } while (0)

/* Block-wide sum of a double (all threads get the result); blockDim.x a
 * multiple of 32, at most 1024. */
__device__ __forceinline__ double px_block_sum(double v, double *shared32)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* shared32 may still be read by a previous call */
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nw ? shared32[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float px_block_sumf(float v, float *shared32)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nw ? shared32[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float px_block_maxf(float v, float *shared32)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nw ? shared32[lane] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- per-channel views of NCHW data and windows over it */

/* Flat index of the i-th of the n * hw values of channel ch in (n, c, hw). */
__device__ __forceinline__ int64_t px_chan_at(int64_t i, int64_t ch, int64_t c, int64_t hw)
{
    int64_t ni = i / hw;
    return (ni * c + ch) * hw + (i - ni * hw);
}

/* PHX_OK when d describes a window kernel `name` can run: sizes >= 0,
 * kernel, stride and dilation >= 1, padding >= 0, groups >= 1 dividing c
 * and k; else PHX_EINVAL naming the kernel and the fields. */
static inline phx_status px_check_window(const char *name, const phx_conv2d_desc *d)
{
    if (!d) return phx_error(PHX_EINVAL, "%s: no window descriptor", name);
    if (d->n < 0 || d->c < 1 || d->h < 0 || d->w < 0 || d->k < 1 || d->oh < 0 || d->ow < 0)
        return phx_error(PHX_EINVAL,
                         "%s: input (%lld, %lld, %lld, %lld), %lld outputs of %lldx%lld, expected sizes >= 0 and "
                         "c, k >= 1",
                         name, (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k,
                         (long long)d->oh, (long long)d->ow);
    if (d->kh < 1 || d->kw < 1 || d->stride_h < 1 || d->stride_w < 1 || d->dil_h < 1 || d->dil_w < 1 ||
        d->pad_h < 0 || d->pad_w < 0)
        return phx_error(PHX_EINVAL,
                         "%s: kernel %lldx%lld, stride %lldx%lld, dilation %lldx%lld, padding %lldx%lld, expected "
                         "kernel, stride, dilation >= 1 and padding >= 0",
                         name, (long long)d->kh, (long long)d->kw, (long long)d->stride_h, (long long)d->stride_w,
                         (long long)d->dil_h, (long long)d->dil_w, (long long)d->pad_h, (long long)d->pad_w);
    if (d->groups < 1 || d->c % d->groups != 0 || d->k % d->groups != 0)
        return phx_error(PHX_EINVAL, "%s: %lld groups for %lld input and %lld output channels, expected a divisor of both",
                         name, (long long)d->groups, (long long)d->c, (long long)d->k);
    return PHX_OK;
}
#define PX_CHECK_WINDOW(name, d)                               \
    do {                                                       \
        phx_status s_ = px_check_window(name, d);              \
        if (s_ != PHX_OK) return s_;                           \
    } while (0)

#endif
