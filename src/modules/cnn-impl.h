/* What the convolutional modules share (internal; src/modules/cnn.c). */
#ifndef PHX_CORE_CNN_IMPL_H
#define PHX_CORE_CNN_IMPL_H

#include "src/modules/module-impl.h"

/* PHX_EINVAL unless x is (N, channels, H, W); the message names x's shape,
 * what was expected, and NHWC when x looks like it. what: "in_channels". */
phx_status px_check_nchw(const char *who, const phx_tensor *x, int64_t channels, const char *what);
/* Sets d->oh, d->ow from d's input, window, stride, padding and dilation;
 * PHX_EINVAL naming the padded input and the window when the window does
 * not fit (an output of size 0). */
phx_status px_window_out(const char *who, phx_conv2d_desc *d);
/* Registers an f32 parameter of shape drawn from U(-bound, bound) (rng
 * NULL: not drawn, for clones); NULL with phx_last_error. */
phx_param *px_add_uniform_param(phx_module *m, const char *name, int ndim, const int64_t *shape, float bound,
                                phx_rng *rng);
/* An f32 tensor of shape filled with v; NULL on failure. */
phx_tensor *px_filled(int ndim, const int64_t *shape, double v);
#endif
