/* Fused optimizer updates and the GradScaler's unscale + non-finite check
 * on the GPU, per element exactly kernels/math.h (phx_sgd_update,
 * phx_adam_update, phx_isfinite) as kernels/cpu/optim.c; built without
 * FMA contraction, so a step gives the CPU's bits. f32 throughout, four
 * elements per 16-byte access when aligned. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

template <int MOM>
__global__ void k_sgd(int64_t n, int64_t nv, float *p, const float *g, float *buf, phx_sgd_hparams h, int first)
{
    float dummy = 0.0f;
    for (int64_t v = px_tid(); v < nv; v += px_nthreads()) {
        float4 pv = ((float4 *)p)[v], gv = __ldg((const float4 *)g + v), bv = make_float4(0, 0, 0, 0);
        if (MOM) bv = ((float4 *)buf)[v];
        float *pe = &pv.x, *be = &bv.x;
        const float *ge = &gv.x;
#pragma unroll
        for (int j = 0; j < 4; j++)
            phx_sgd_update(&pe[j], ge[j], MOM ? &be[j] : &dummy, h.lr, MOM ? h.momentum : 0.0f, h.dampening,
                           h.weight_decay, h.nesterov, first);
        ((float4 *)p)[v] = pv;
        if (MOM) ((float4 *)buf)[v] = bv;
    }
    for (int64_t i = nv * 4 + px_tid(); i < n; i += px_nthreads())
        phx_sgd_update(&p[i], g[i], MOM ? &buf[i] : &dummy, h.lr, MOM ? h.momentum : 0.0f, h.dampening, h.weight_decay,
                       h.nesterov, first);
}

extern "C" phx_status px_cuda_sgd_step(int dev, int64_t n, float *p, const float *g, float *momentum_buf,
                                       const phx_sgd_hparams *h, int step_first)
{
    PX_CHECK_N("sgd_step", n);
    if (!h) return phx_error(PHX_EINVAL, "sgd_step: hparams is NULL");
    if (h->momentum != 0.0f && !momentum_buf && n > 0)
        return phx_error(PHX_EINVAL, "sgd_step: momentum %g needs a momentum buffer, got NULL", (double)h->momentum);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int mom = h->momentum != 0.0f;
    int64_t nv = px_nvec(n, 4, p, g, mom ? momentum_buf : NULL);
    unsigned grid = px_cuda_grid(ctx, nv ? nv : n, PX_THREADS, PX_WAVES);
    if (mom)
        k_sgd<1><<<grid, PX_THREADS, 0, ctx->stream>>>(n, nv, p, g, momentum_buf, *h, step_first);
    else
        k_sgd<0><<<grid, PX_THREADS, 0, ctx->stream>>>(n, nv, p, g, NULL, *h, step_first);
    return px_cuda_launched(dev, "sgd_step");
}

template <int AMS>
__global__ void k_adam(int64_t n, int64_t nv, float *p, const float *g, float *m, float *v, float *vmax,
                       phx_adam_coef c)
{
    for (int64_t k = px_tid(); k < nv; k += px_nthreads()) {
        float4 pv = ((float4 *)p)[k], gv = __ldg((const float4 *)g + k), mv = ((float4 *)m)[k], vv = ((float4 *)v)[k],
               xv = make_float4(0, 0, 0, 0);
        if (AMS) xv = ((float4 *)vmax)[k];
        float *pe = &pv.x, *me = &mv.x, *ve = &vv.x, *xe = &xv.x;
        const float *ge = &gv.x;
#pragma unroll
        for (int j = 0; j < 4; j++) phx_adam_update(&c, &pe[j], ge[j], &me[j], &ve[j], AMS ? &xe[j] : NULL);
        ((float4 *)p)[k] = pv;
        ((float4 *)m)[k] = mv;
        ((float4 *)v)[k] = vv;
        if (AMS) ((float4 *)vmax)[k] = xv;
    }
    for (int64_t i = nv * 4 + px_tid(); i < n; i += px_nthreads())
        phx_adam_update(&c, &p[i], g[i], &m[i], &v[i], AMS ? &vmax[i] : NULL);
}

extern "C" phx_status px_cuda_adam_step(int dev, int64_t n, float *p, const float *g, float *m, float *v, float *vmax,
                                        const phx_adam_hparams *h, int64_t step)
{
    PX_CHECK_N("adam_step", n);
    if (!h) return phx_error(PHX_EINVAL, "adam_step: hparams is NULL");
    if (step < 1) return phx_error(PHX_EINVAL, "adam_step: step %lld, expected >= 1", (long long)step);
    if (h->amsgrad && !vmax && n > 0) return phx_error(PHX_EINVAL, "adam_step: amsgrad needs vmax, got NULL");
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    phx_adam_coef c =
        phx_adam_coef_make(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, h->amsgrad, h->decoupled, step);
    int64_t nv = px_nvec(n, 4, p, g, m, v);
    if (c.amsgrad && !px_aligned16(vmax)) nv = 0;
    unsigned grid = px_cuda_grid(ctx, nv ? nv : n, PX_THREADS, PX_WAVES);
    if (c.amsgrad)
        k_adam<1><<<grid, PX_THREADS, 0, ctx->stream>>>(n, nv, p, g, m, v, vmax, c);
    else
        k_adam<0><<<grid, PX_THREADS, 0, ctx->stream>>>(n, nv, p, g, m, v, NULL, c);
    return px_cuda_launched(dev, "adam_step");
}

__global__ void k_unscale(int64_t n, int64_t nv, float *g, float inv_scale, float *found_inf)
{
    int bad = 0;
    for (int64_t k = px_tid(); k < nv; k += px_nthreads()) {
        float4 x = ((float4 *)g)[k];
        x.x = x.x * inv_scale;
        x.y = x.y * inv_scale;
        x.z = x.z * inv_scale;
        x.w = x.w * inv_scale;
        bad |= !phx_isfinite(x.x) | !phx_isfinite(x.y) | !phx_isfinite(x.z) | !phx_isfinite(x.w);
        ((float4 *)g)[k] = x;
    }
    for (int64_t i = nv * 4 + px_tid(); i < n; i += px_nthreads()) {
        float x = g[i] * inv_scale;
        g[i] = x;
        bad |= !phx_isfinite(x);
    }
    /* one store per block that saw a non-finite value; all store 1.0f */
    if (__syncthreads_or(bad) && threadIdx.x == 0 && found_inf) *found_inf = 1.0f;
}

extern "C" phx_status px_cuda_unscale_check(int dev, int64_t n, float *g, float inv_scale, float *found_inf)
{
    PX_CHECK_N("unscale_check", n);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int64_t nv = px_nvec(n, 4, g);
    unsigned grid = px_cuda_grid(ctx, nv ? nv : n, PX_THREADS, PX_WAVES);
    k_unscale<<<grid, PX_THREADS, 0, ctx->stream>>>(n, nv, g, inv_scale, found_inf);
    return px_cuda_launched(dev, "unscale_check");
}
