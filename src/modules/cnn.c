/* Shape checks and parameter creation shared by Conv2d, BatchNorm and
 * the pooling modules. */
#include <stdio.h>
#include "src/modules/cnn-impl.h"
#include "src/tensor/tensor-impl.h"

phx_status px_check_nchw(const char *who, const phx_tensor *x, int64_t channels, const char *what)
{
    if (x->ndim == 4 && x->shape[1] == channels) return PHX_OK;
    char s[64];
    phx_tensor_shape_str(x, s, sizeof s);
    const char *hint = x->ndim == 4 && x->shape[3] == channels ? " (this looks like NHWC: permute to NCHW)" : "";
    return phx_error(PHX_EINVAL, "%s: input is %s, expected (N, %lld, H, W) with %s %lld%s", who, s, (long long)channels,
                     what, (long long)channels, hint);
}

static int64_t out_size(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride)
{
    int64_t span = in + 2 * pad - dil * (k - 1) - 1;
    return span < 0 ? 0 : span / stride + 1;
}

phx_status px_window_out(const char *who, phx_conv2d_desc *d)
{
    d->oh = out_size(d->h, d->pad_h, d->dil_h, d->kh, d->stride_h);
    d->ow = out_size(d->w, d->pad_w, d->dil_w, d->kw, d->stride_w);
    if (d->oh >= 1 && d->ow >= 1) return PHX_OK;
    return phx_error(PHX_EINVAL,
                     "%s: the %lldx%lld window (dilation %lld, %lld) is larger than the padded input %lldx%lld "
                     "(input %lldx%lld, padding %lld, %lld): the output would be empty",
                     who, (long long)d->kh, (long long)d->kw, (long long)d->dil_h, (long long)d->dil_w,
                     (long long)(d->h + 2 * d->pad_h), (long long)(d->w + 2 * d->pad_w), (long long)d->h,
                     (long long)d->w, (long long)d->pad_h, (long long)d->pad_w);
}

phx_param *px_add_uniform_param(phx_module *m, const char *name, int ndim, const int64_t *shape, float bound,
                                phx_rng *rng)
{
    phx_tensor *t = phx_tensor_new(PHX_F32, ndim, shape, phx_cpu());
    phx_param *p = NULL;
    if (t && (!rng || phx_rng_uniform(rng, t, -bound, bound) == PHX_OK)) p = phx_module_add_param(m, name, t);
    if (!p) phx_tensor_free(t);
    return p;
}

phx_tensor *px_filled(int ndim, const int64_t *shape, double v)
{
    phx_tensor *t = phx_tensor_new(PHX_F32, ndim, shape, phx_cpu());
    if (t && phx_tensor_fill(t, v) != PHX_OK) {
        phx_tensor_free(t);
        return NULL;
    }
    return t;
}
