/* Phalanx — convolutional networks: Conv2d, BatchNorm1d/2d and
 * SyncBatchNorm, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten; see
 * doc/guide/cnn.md. PyTorch semantics, initialisation and state_dict names;
 * activations are NCHW in the compute dtype, parameters f32. */
#ifndef PHALANX_CNN_H
#define PHALANX_CNN_H

#include <stdbool.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_comm phx_comm;

/* nn.Conv2d's keyword arguments. padding_same: PyTorch's padding="same"
 * (stride 1 only; an even kernel pads one more at the bottom/right). */
typedef struct phx_conv2d_opts {
    size_t struct_size; /* sizeof (phx_conv2d_opts): PHX_CONV2D_OPTS_INIT sets it */
    int64_t stride[2], padding[2], dilation[2];
    int64_t groups;
    bool bias;
    bool padding_same;
} phx_conv2d_opts;
#define PHX_CONV2D_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_conv2d_opts), .stride = {1, 1}, .dilation = {1, 1}, .groups = 1, .bias = true \
    }

/* PHX_CONV2D_OPTS_INIT's values: stride 1, padding 0, dilation 1, groups 1,
 * bias. Deprecated: use PHX_CONV2D_OPTS_INIT. */
phx_conv2d_opts phx_conv2d_opts_default(void);

/* nn.Conv2d(in, out, (kh, kw), ...): weight (out, in / groups, kh, kw) ~
 * U(+-1/sqrt(fan_in)), bias (out) ~ U(+-1/sqrt(fan_in)), fan_in = in /
 * groups kh kw, drawn in that order from rng (NULL: seeded with 0).
 * forward takes (N, in, H, W) and returns (N, out, OH, OW). opts NULL:
 * the defaults. NULL + phx_last_error on bad arguments. */
phx_module *phx_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kh, int64_t kw,
                           const phx_conv2d_opts *opts, phx_rng *rng);

/* nn.BatchNorm2d(C, eps, momentum, affine, track_running_stats) on
 * (N, C, H, W) and nn.BatchNorm1d on (N, C) or (N, C, L). weight 1, bias
 * 0; buffers running_mean (0), running_var (1) and num_batches_tracked
 * (i64, 0) when tracking. Training normalises with the batch's biased
 * variance and updates the running estimates with the unbiased one;
 * momentum < 0 is PyTorch's momentum=None (a cumulative average). Eval
 * uses the running estimates (the batch's when not tracking). A
 * training batch with one value per channel is PHX_EINVAL, as PyTorch's
 * "Expected more than 1 value per channel when training". */
phx_module *phx_batchnorm2d_new(int64_t num_features, float eps, float momentum, bool affine, bool track_running_stats);
phx_module *phx_batchnorm1d_new(int64_t num_features, float eps, float momentum, bool affine, bool track_running_stats);

/* BatchNorm's keyword arguments, PyTorch's defaults in the initialiser. */
typedef struct phx_batchnorm_opts {
    size_t struct_size; /* sizeof (phx_batchnorm_opts): PHX_BATCHNORM_OPTS_INIT sets it */
    float eps; /* 1e-5 */
    float momentum; /* 0.1; < 0: momentum=None (a cumulative average) */
    bool affine; /* true */
    bool track_running_stats; /* true */
} phx_batchnorm_opts;
#define PHX_BATCHNORM_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_batchnorm_opts), .eps = 1e-5f, .momentum = 0.1f, .affine = true, \
        .track_running_stats = true \
    }
/* phx_batchnorm2d_new and phx_batchnorm1d_new with named options (NULL:
 * PHX_BATCHNORM_OPTS_INIT's); the positional forms are deprecated within
 * 1.x. */
phx_module *phx_batchnorm2d_new_opts(int64_t num_features, const phx_batchnorm_opts *opts);
phx_module *phx_batchnorm1d_new_opts(int64_t num_features, const phx_batchnorm_opts *opts);

/* nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm of model
 * becomes synchronized over comm (type "SyncBatchNorm"; parameters,
 * buffers and names unchanged). In training each forward combines every
 * rank's per-channel mean, variance and count (uneven batches included)
 * and each backward all-reduces the two gradient sums, as PyTorch does;
 * in eval, or on a world of one (comm NULL or of size 1: the convert
 * still happens), it is a plain BatchNorm. comm must outlive the model;
 * every rank must run the same forwards. Given a DDP wrapper it converts
 * the wrapped model; a DataParallel wrapper is PHX_EINVAL (convert before
 * wrapping). Returns the number converted through *n (may be NULL). */
phx_status phx_sync_batchnorm_convert(phx_module *model, phx_comm *comm, size_t *n);

/* nn.MaxPool2d(kernel, stride, padding) (stride 0: kernel); padding at
 * most half the kernel, as PyTorch requires. */
phx_module *phx_maxpool2d_new(int64_t kernel, int64_t stride, int64_t padding);
/* nn.AvgPool2d(kernel, stride, padding, count_include_pad=...). */
phx_module *phx_avgpool2d_new(int64_t kernel, int64_t stride, int64_t padding, bool count_include_pad);
/* nn.AdaptiveAvgPool2d((oh, ow)) for sizes that divide the input's (1
 * gives the global average); others are PHX_EUNSUPPORTED at forward. */
phx_module *phx_adaptive_avgpool2d_new(int64_t oh, int64_t ow);
/* nn.Flatten(): (N, ...) -> (N, rest); the gradient is reshaped back. */
phx_module *phx_flatten_new(void);

#ifdef __cplusplus
}
#endif
#endif
