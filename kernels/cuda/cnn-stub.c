/* Placeholders for the ABI 1.2 convolution slots until their kernels
 * land: each says it is not implemented. */
#include "config.h"
#include "kernels/cuda/kernels.h"

phx_status px_cuda_conv2d_forward(int dev, const phx_conv2d_desc *d, const void *x, const void *w, const float *bias, void *y, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)x;
    (void)w;
    (void)bias;
    (void)y;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "conv2d_forward: not implemented on this device yet");
}

phx_status px_cuda_conv2d_backward_data(int dev, const phx_conv2d_desc *d, const void *dy, const void *w, void *dx, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)dy;
    (void)w;
    (void)dx;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "conv2d_backward_data: not implemented on this device yet");
}

phx_status px_cuda_conv2d_backward_weight(int dev, const phx_conv2d_desc *d, const void *x, const void *dy, float *dw, float *db, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)x;
    (void)dy;
    (void)dw;
    (void)db;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "conv2d_backward_weight: not implemented on this device yet");
}

phx_status px_cuda_batchnorm_stats(int dev, int64_t n, int64_t c, int64_t hw, const void *x, phx_dtype dt, float *mean, float *var)
{
    (void)dev;
    (void)n;
    (void)c;
    (void)hw;
    (void)x;
    (void)dt;
    (void)mean;
    (void)var;
    return phx_error(PHX_EUNSUPPORTED, "batchnorm_stats: not implemented on this device yet");
}

phx_status px_cuda_batchnorm_apply(int dev, int64_t n, int64_t c, int64_t hw, const void *x, const float *mean, const float *var, float eps, const float *w, const float *b, void *y, phx_dtype dt)
{
    (void)dev;
    (void)n;
    (void)c;
    (void)hw;
    (void)x;
    (void)mean;
    (void)var;
    (void)eps;
    (void)w;
    (void)b;
    (void)y;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "batchnorm_apply: not implemented on this device yet");
}

phx_status px_cuda_batchnorm_backward_reduce(int dev, int64_t n, int64_t c, int64_t hw, const void *x, const void *dy, phx_dtype dt, const float *mean, const float *var, float eps, float *sum_dy, float *sum_dy_xmu, float *dw, float *db)
{
    (void)dev;
    (void)n;
    (void)c;
    (void)hw;
    (void)x;
    (void)dy;
    (void)dt;
    (void)mean;
    (void)var;
    (void)eps;
    (void)sum_dy;
    (void)sum_dy_xmu;
    (void)dw;
    (void)db;
    return phx_error(PHX_EUNSUPPORTED, "batchnorm_backward_reduce: not implemented on this device yet");
}

phx_status px_cuda_batchnorm_backward_apply(int dev, int64_t n, int64_t c, int64_t hw, const void *x, const void *dy, phx_dtype dt, const float *mean, const float *var, float eps, const float *w, const float *sum_dy, const float *sum_dy_xmu, double count, void *dx)
{
    (void)dev;
    (void)n;
    (void)c;
    (void)hw;
    (void)x;
    (void)dy;
    (void)dt;
    (void)mean;
    (void)var;
    (void)eps;
    (void)w;
    (void)sum_dy;
    (void)sum_dy_xmu;
    (void)count;
    (void)dx;
    return phx_error(PHX_EUNSUPPORTED, "batchnorm_backward_apply: not implemented on this device yet");
}

phx_status px_cuda_maxpool2d_forward(int dev, const phx_conv2d_desc *d, const void *x, void *y, int32_t *argmax, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)x;
    (void)y;
    (void)argmax;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "maxpool2d_forward: not implemented on this device yet");
}

phx_status px_cuda_maxpool2d_backward(int dev, const phx_conv2d_desc *d, const int32_t *argmax, const void *dy, void *dx, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)argmax;
    (void)dy;
    (void)dx;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "maxpool2d_backward: not implemented on this device yet");
}

phx_status px_cuda_avgpool2d_forward(int dev, const phx_conv2d_desc *d, int count_include_pad, const void *x, void *y, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)count_include_pad;
    (void)x;
    (void)y;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "avgpool2d_forward: not implemented on this device yet");
}

phx_status px_cuda_avgpool2d_backward(int dev, const phx_conv2d_desc *d, int count_include_pad, const void *dy, void *dx, phx_dtype dt)
{
    (void)dev;
    (void)d;
    (void)count_include_pad;
    (void)dy;
    (void)dx;
    (void)dt;
    return phx_error(PHX_EUNSUPPORTED, "avgpool2d_backward: not implemented on this device yet");
}
