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
    PHX_ACT_RELU = 0, PHX_ACT_GELU = 1, PHX_ACT_GELU_TANH = 2, PHX_ACT_TANH = 3, PHX_ACT_SIGMOID = 4
} phx_activation;

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

typedef struct phx_kernels_v1 {
    /* c <- alpha op(a) op(b) + beta c, row-major with leading dims; a, b in
     * adt (f32/f16/bf16), c in cdt; f32 accumulation. */
    phx_status (*gemm)(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const void *a, int64_t lda, const void *b, int64_t ldb, phx_dtype adt,
                       float beta, void *c, int64_t ldc, phx_dtype cdt);
    /* dst[i] <- (dt) src[i]; any pair of dtypes. */
    phx_status (*cast)(int dev, void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n);
    phx_status (*fill)(int dev, void *dst, phx_dtype dt, int64_t n, double value);
    /* y <- alpha x + beta y; x may be NULL (y <- beta y). Float dtypes. */
    phx_status (*axpby)(int dev, int64_t n, float alpha, const void *x, phx_dtype xdt, float beta,
                        void *y, phx_dtype ydt);
    /* out[i] <- a[i] * b[i] */
    phx_status (*mul)(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt);
    /* y[r,c] += bias[c] for a (rows, cols) y */
    phx_status (*bias_add)(int dev, int64_t rows, int64_t cols, void *y, phx_dtype dt, const float *bias);
    /* db[c] <- beta db[c] + sum_r dy[r,c] */
    phx_status (*bias_grad)(int dev, int64_t rows, int64_t cols, const void *dy, phx_dtype dt,
                            float beta, float *db);
    phx_status (*act_forward)(int dev, phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt);
    /* dx <- dy * act'(x); y = act(x) is given too (sigmoid/tanh use it) */
    phx_status (*act_backward)(int dev, phx_activation act, int64_t n, const void *x, const void *y,
                               const void *dy, void *dx, phx_dtype dt);
    /* mask[i] = philox_uniform(seed, offset + i) >= p; y = x * mask / (1-p) */
    phx_status (*dropout_forward)(int dev, int64_t n, float p, uint64_t seed, uint64_t offset,
                                  const void *x, void *y, uint8_t *mask, phx_dtype dt);
    phx_status (*dropout_backward)(int dev, int64_t n, float p, const uint8_t *mask, const void *dy,
                                   void *dx, phx_dtype dt);
    /* over rows of length cols; statistics in f32; w, b may be NULL (no affine) */
    phx_status (*layernorm_forward)(int dev, int64_t rows, int64_t cols, float eps, const void *x,
                                    const float *w, const float *b, void *y, float *mean, float *rstd,
                                    phx_dtype dt);
    /* dx <- ..., dw += ..., db += ... (dw, db may be NULL) */
    phx_status (*layernorm_backward)(int dev, int64_t rows, int64_t cols, const void *x, const float *w,
                                     const float *mean, const float *rstd, const void *dy, void *dx,
                                     float *dw, float *db, phx_dtype dt);
    /* loss[0] <- sum or mean of (y - t)^2; grad <- d loss / dy (f32) */
    phx_status (*mse)(int dev, int64_t n, const void *y, phx_dtype dt, const float *target, int mean,
                      float *loss, float *grad);
    /* mean over rows of -log softmax(logits)[label] (log_probs: 0) or
     * -logits[label] (log_probs: 1, i.e. nll); grad f32 (rows, classes).
     * A label outside [0, classes) sets *bad_label_host to its row (else -1). */
    phx_status (*cross_entropy)(int dev, int64_t rows, int64_t classes, const void *logits, phx_dtype dt,
                                const int64_t *labels, int log_probs, float *loss, float *grad,
                                int64_t *bad_label_host);
    /* fused updates; step_first: SGD momentum buffer starts as the gradient */
    phx_status (*sgd_step)(int dev, int64_t n, float *p, const float *g, float *momentum_buf,
                           const phx_sgd_hparams *h, int step_first);
    phx_status (*adam_step)(int dev, int64_t n, float *p, const float *g, float *m, float *v, float *vmax,
                            const phx_adam_hparams *h, int64_t step);
    /* g *= inv_scale; *found_inf (device f32) set to 1 when any result is not finite */
    phx_status (*unscale_check)(int dev, int64_t n, float *g, float inv_scale, float *found_inf);
    /* *out_host <- reduction of x (synchronous) */
    phx_status (*reduce)(int dev, phx_reduce_op op, int64_t n, const void *x, phx_dtype dt, double *out_host);
    /* dst[i] <- lo + (hi-lo) philox_uniform(seed, offset + i) */
    phx_status (*rng_uniform)(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                              float lo, float hi);
    /* Box-Muller on numbers offset + 2i, offset + 2i + 1 */
    phx_status (*rng_normal)(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                             float mean, float std);
} phx_kernels_v1;

typedef struct phx_device_v1 {
    int kind;                                   /* phx_device_kind */
    int (*count)(void);
    phx_status (*alloc)(int dev, size_t bytes, void **ptr);
    void (*release)(int dev, void *ptr);
    phx_status (*memory_stats)(int dev, phx_memory_stats *out);
    phx_status (*copy_h2d)(int dev, void *dst, const void *src_host, size_t bytes);
    phx_status (*copy_d2h)(int dev, void *dst_host, const void *src, size_t bytes);
    phx_status (*copy_d2d)(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes);
    phx_status (*synchronize)(int dev);
    /* The calling thread's compute stream on dev (opaque; NULL on CPU). */
    void *(*current_stream)(int dev);
    phx_status (*event_create)(int dev, void **event);
    phx_status (*event_record)(void *event, void *stream);
    phx_status (*stream_wait_event)(void *stream, void *event);
    phx_status (*event_synchronize)(void *event);
    /* 1 done, 0 pending, < 0 error */
    int (*event_query)(void *event);
    void (*event_destroy)(void *event);
    const phx_kernels_v1 *kernels;
} phx_device_v1;

/* The device table for d (built-in CPU or the loaded cuda plugin), or NULL
 * with phx_last_error set. Exported by libphalanx. */
const phx_device_v1 *phx_device_table(phx_device d);

#ifdef __cplusplus
}
#endif
#endif
