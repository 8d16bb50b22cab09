/* Activations forward and backward on the GPU (formulas: kernels/math.h,
 * as kernels/cpu/activation.c). The activation and dtype are template
 * constants; 16-byte groups of 8 when aligned. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

template <int ACT, int DT> __global__ void k_act_fwd(int64_t n, int64_t ng, const void *x, void *y)
{
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float v[PX_G];
        px_ld8<DT>(x, g, v);
#pragma unroll
        for (int j = 0; j < PX_G; j++) v[j] = phx_act(ACT, v[j]);
        px_st8<DT>(y, g, v);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads()) px_st<DT>(y, i, phx_act(ACT, px_ld<DT>(x, i)));
}

/* relu and the gelus read x; tanh and sigmoid read y (as the CPU) */
template <int ACT, int DT>
__global__ void k_act_bwd(int64_t n, int64_t ng, const void *x, const void *y, const void *dy, void *dx)
{
    const bool use_y = ACT == PHX_ACT_TANH || ACT == PHX_ACT_SIGMOID;
    const void *in = use_y ? y : x;
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float d[PX_G], v[PX_G];
        px_ld8<DT>(dy, g, d);
        px_ld8<DT>(in, g, v);
#pragma unroll
        for (int j = 0; j < PX_G; j++)
            d[j] = use_y ? phx_act_bwd(ACT, 0.0f, v[j], d[j]) : phx_act_bwd(ACT, v[j], 0.0f, d[j]);
        px_st8<DT>(dx, g, d);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads()) {
        float v = px_ld<DT>(in, i);
        float d = px_ld<DT>(dy, i);
        px_st<DT>(dx, i, use_y ? phx_act_bwd(ACT, 0.0f, v, d) : phx_act_bwd(ACT, v, 0.0f, d));
    }
}

#define PX_ACT_DISPATCH(act, CALL) \
    switch (act) { \
    case PHX_ACT_RELU: { \
        const int ACT = PHX_ACT_RELU; \
        CALL; \
        break; \
    } \
    case PHX_ACT_GELU: { \
        const int ACT = PHX_ACT_GELU; \
        CALL; \
        break; \
    } \
    case PHX_ACT_GELU_TANH: { \
        const int ACT = PHX_ACT_GELU_TANH; \
        CALL; \
        break; \
    } \
    case PHX_ACT_TANH: { \
        const int ACT = PHX_ACT_TANH; \
        CALL; \
        break; \
    } \
    case PHX_ACT_SIGMOID: { \
        const int ACT = PHX_ACT_SIGMOID; \
        CALL; \
        break; \
    } \
    default: \
        return phx_error(PHX_EINVAL, "activation: kind %d, expected 0..4 (relu, gelu, gelu_tanh, tanh, sigmoid)", \
                         (int)act); \
    }

static phx_status check_act(phx_activation act)
{
    if ((int)act < PHX_ACT_RELU || (int)act > PHX_ACT_SIGMOID)
        return phx_error(PHX_EINVAL, "activation: kind %d, expected 0..4 (relu, gelu, gelu_tanh, tanh, sigmoid)",
                         (int)act);
    return PHX_OK;
}

extern "C" phx_status px_cuda_act_forward(int dev, phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt)
{
    PX_CHECK_N("act_forward", n);
    PX_CHECK_FLOAT("act_forward", dt);
    if (check_act(act) != PHX_OK) return PHX_EINVAL;
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int64_t ng = px_nvec(n, PX_G, x, y);
    unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
    PX_ACT_DISPATCH(
        act,
        PX_FLOAT_DISPATCH("act_forward", dt, (k_act_fwd<ACT, DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, ng, x, y))));
    return px_cuda_launched(dev, "act_forward");
}

extern "C" phx_status px_cuda_act_backward(int dev, phx_activation act, int64_t n, const void *x, const void *y,
                                           const void *dy, void *dx, phx_dtype dt)
{
    PX_CHECK_N("act_backward", n);
    PX_CHECK_FLOAT("act_backward", dt);
    if (check_act(act) != PHX_OK) return PHX_EINVAL;
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int use_y = act == PHX_ACT_TANH || act == PHX_ACT_SIGMOID;
    const void *in = use_y ? y : x;
    if (!in || !dy || !dx)
        return phx_error(PHX_EINVAL, "act_backward: %s is NULL", !in ? (use_y ? "y" : "x") : !dy ? "dy" : "dx");
    int64_t ng = px_nvec(n, PX_G, in, dy, dx);
    unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
    PX_ACT_DISPATCH(act,
                    PX_FLOAT_DISPATCH("act_backward", dt,
                                      (k_act_bwd<ACT, DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, ng, x, y, dy, dx))));
    return px_cuda_launched(dev, "act_backward");
}
