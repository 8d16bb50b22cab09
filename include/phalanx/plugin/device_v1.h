/* Phalanx — frozen device vtable and kernel table, ABI 1.
 * The built-in CPU device and the cuda plugin (kind PHX_PLUGIN_DEVICE)
 * both fill these. All pointers are device memory of that device unless
 * named *_host. Every kernel is asynchronous on the device's current
 * stream (synchronous on the CPU). Element counts are int64_t. Float
 * kernels take a dtype for their activation-sized operands (f32, f16 or
 * bf16; math in f32); parameters, gradients and optimizer state are f32. */
#ifndef PHALANX_PLUGIN_DEVICE_V1_H
#define PHALANX_PLUGIN_DEVICE_V1_H

#include <stdint.h>
#include "phalanx/plugin.h"
#include "phalanx/tensor.h"
#include "phalanx/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum phx_activation {
    PHX_ACT_RELU = 0,
    PHX_ACT_GELU = 1,
    PHX_ACT_GELU_TANH = 2,
    PHX_ACT_TANH = 3,
    PHX_ACT_SIGMOID = 4
} phx_activation;

/* Operations of the binary kernel (minor 4): out <- a op b. */
typedef enum phx_binary_op {
    PHX_BIN_ADD = 0,
    PHX_BIN_SUB = 1,
    PHX_BIN_MUL = 2,
    PHX_BIN_DIV = 3,
    PHX_BIN_POW = 4, /* a^b, powf */
    PHX_BIN_MAX = 5, /* maximum: NaN in either gives NaN */
    PHX_BIN_MIN = 6,
    PHX_BIN_EQ = 7, /* comparisons: 1 or 0 */
    PHX_BIN_NE = 8,
    PHX_BIN_LT = 9,
    PHX_BIN_LE = 10,
    PHX_BIN_GT = 11,
    PHX_BIN_GE = 12
} phx_binary_op;

/* Operations of the unary kernel (minor 4): y <- op(x; alpha, beta). */
typedef enum phx_unary_op {
    PHX_UN_NEG = 0,
    PHX_UN_EXP = 1,
    PHX_UN_LOG = 2,
    PHX_UN_SQRT = 3,
    PHX_UN_RSQRT = 4,
    PHX_UN_ABS = 5,
    PHX_UN_SIGN = 6, /* -1, 0 or 1 (NaN stays NaN) */
    PHX_UN_AFFINE = 7, /* alpha x + beta */
    PHX_UN_POW = 8, /* x^alpha */
    PHX_UN_CLAMP = 9, /* min(max(x, alpha), beta); NaN bounds are absent, NaN x stays NaN */
    PHX_UN_RECIP = 10, /* 1 / x */
    PHX_UN_EQ = 11, /* comparisons with alpha: 1 or 0 */
    PHX_UN_NE = 12,
    PHX_UN_LT = 13,
    PHX_UN_LE = 14,
    PHX_UN_GT = 15,
    PHX_UN_GE = 16,
    PHX_UN_SQUARE = 17 /* x * x */
} phx_unary_op;

/* Operations of the reduce_dim kernel (minor 4). */
typedef enum phx_reduce_dim_op {
    PHX_RED_SUM = 0,
    PHX_RED_MEAN = 1,
    PHX_RED_MAX = 2,
    PHX_RED_MIN = 3,
    PHX_RED_LOGSUMEXP = 4
} phx_reduce_dim_op;

/* SGD, PyTorch's formula. first: the momentum buffer is uninitialised. */
typedef struct phx_sgd_hparams {
    float lr, momentum, dampening, weight_decay;
    int nesterov;
} phx_sgd_hparams;

/* Adam/AdamW, PyTorch's formula; step counts from 1. */
typedef struct phx_adam_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    int amsgrad, decoupled;
} phx_adam_hparams;

/* A 2-D window over NCHW images (minor 2): convolution and pooling. The
 * input is (n, c, h, w), the output (n, k, oh, ow); a convolution's weight
 * is (k, c / groups, kh, kw), pooling has k = c and groups = c. pad_h and
 * pad_w are the top and left padding; oh and ow are given, normally
 * (h + 2 pad_h - dil_h (kh - 1) - 1) / stride_h + 1, and positions past
 * the bottom/right edge count as padding. */
typedef struct phx_conv2d_desc {
    int64_t n, c, h, w;
    int64_t k, kh, kw;
    int64_t oh, ow;
    int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int64_t groups;
} phx_conv2d_desc;

/* One function pointer per line of kernels_v1.def, in its order: that file
 * documents each slot and the minor that added it. */
typedef struct phx_kernels_v1 {
#define PHX_KERNEL_SLOT(name, ret, args, since) ret(*name) args;
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT
} phx_kernels_v1;

/* A device's allocator statistics (phx_device_v1.memory_stats): frozen,
 * the layout phx_memory_stats had before public structs carried their
 * size, so plugins of every 1.x minor write the same bytes. */
typedef struct phx_device_memory_stats_v1 {
    uint64_t in_use_bytes, cached_bytes, peak_bytes, alloc_calls;
} phx_device_memory_stats_v1;

/* Required slots must be non-NULL; an optional one may be NULL and the
 * core supplies the default named beside it. Slots appended in a later
 * minor are read only from plugins of that minor or newer. */
typedef struct phx_device_v1 {
    int kind; /* phx_device_kind */
    int (*count)(void); /* required */
    phx_status (*alloc)(int dev, size_t bytes, void **ptr); /* required */
    void (*release)(int dev, void *ptr); /* required */
    /* (optional) defaults to PHX_EUNSUPPORTED "the device has no statistics" */
    phx_status (*memory_stats)(int dev, phx_device_memory_stats_v1 *out);
    phx_status (*copy_h2d)(int dev, void *dst, const void *src_host, size_t bytes); /* required */
    phx_status (*copy_d2h)(int dev, void *dst_host, const void *src, size_t bytes); /* required */
    phx_status (*copy_d2d)(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes); /* required */
    /* (optional) defaults to PHX_OK at once: a synchronous device */
    phx_status (*synchronize)(int dev);
    /* The calling thread's compute stream on dev (opaque).
     * (optional) defaults to NULL: a synchronous device has no stream */
    void *(*current_stream)(int dev);
    /* Events: (optional) all five NULL or all five set. The defaults are
     * those of a synchronous device: an event is complete once recorded
     * (create gives a token, record/wait/synchronize do nothing, query
     * answers 1, destroy does nothing). */
    phx_status (*event_create)(int dev, void **event);
    phx_status (*event_record)(void *event, void *stream);
    phx_status (*stream_wait_event)(void *stream, void *event);
    phx_status (*event_synchronize)(void *event);
    /* 1 done, 0 pending, < 0 error */
    int (*event_query)(void *event);
    void (*event_destroy)(void *event);
    const phx_kernels_v1 *kernels; /* required: every slot of its minor set */
    /* Page-locked host memory that copy_h2d_async reads while the host
     * goes on (the loader's batches). (optional, minor 1) both NULL or both
     * set; the default is malloc and free. */
    phx_status (*host_alloc)(int dev, size_t bytes, void **ptr);
    void (*host_release)(int dev, void *ptr);
    /* A stream of the caller's own (the loader's copy stream), and a
     * host-to-device copy on it that returns at once; the copy may read
     * src_host until an event recorded after it on that stream completes.
     * (optional, minor 1) all three NULL or all set; the default is a
     * NULL stream and copy_h2d: a copy done when the call returns. */
    phx_status (*stream_create)(int dev, void **stream);
    void (*stream_destroy)(int dev, void *stream);
    phx_status (*copy_h2d_async)(int dev, void *dst, const void *src_host, size_t bytes, void *stream);
} phx_device_v1;

/* The device table for d (built-in CPU or the loaded cuda plugin), or NULL
 * with phx_last_error set. Exported by libphalanx. */
const phx_device_v1 *phx_device_table(phx_device d);

#ifdef __cplusplus
}
#endif
#endif
