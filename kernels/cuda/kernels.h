/* Entry points of the CUDA kernels (the .cu files in kernels/cuda and gemm.c), one
 * per slot of phx_kernels_v1, with the slot's contract
 * (include/phalanx/plugin/device_v1.h). C linkage; internal to the cuda
 * plugin. The device index is a CUDA device; work is queued on the calling
 * thread's stream for it. */
#ifndef PHX_KERNELS_CUDA_KERNELS_H
#define PHX_KERNELS_CUDA_KERNELS_H

#include "phalanx/plugin/device_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

phx_status px_cuda_gemm(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const void *a, int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta,
                        void *c, int64_t ldc, phx_dtype cdt);
phx_status px_cuda_cast(int dev, void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n);
phx_status px_cuda_fill(int dev, void *dst, phx_dtype dt, int64_t n, double value);
phx_status px_cuda_axpby(int dev, int64_t n, float alpha, const void *x, phx_dtype xdt, float beta, void *y,
                         phx_dtype ydt);
phx_status px_cuda_mul(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt);
phx_status px_cuda_bias_add(int dev, int64_t rows, int64_t cols, void *y, phx_dtype dt, const float *bias);
phx_status px_cuda_bias_grad(int dev, int64_t rows, int64_t cols, const void *dy, phx_dtype dt, float beta,
                             float *db);
phx_status px_cuda_act_forward(int dev, phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt);
phx_status px_cuda_act_backward(int dev, phx_activation act, int64_t n, const void *x, const void *y,
                                const void *dy, void *dx, phx_dtype dt);
phx_status px_cuda_dropout_forward(int dev, int64_t n, float p, uint64_t seed, uint64_t offset, const void *x,
                                   void *y, uint8_t *mask, phx_dtype dt);
phx_status px_cuda_dropout_backward(int dev, int64_t n, float p, const uint8_t *mask, const void *dy, void *dx,
                                    phx_dtype dt);
phx_status px_cuda_layernorm_forward(int dev, int64_t rows, int64_t cols, float eps, const void *x,
                                     const float *w, const float *b, void *y, float *mean, float *rstd,
                                     phx_dtype dt);
phx_status px_cuda_layernorm_backward(int dev, int64_t rows, int64_t cols, const void *x, const float *w,
                                      const float *mean, const float *rstd, const void *dy, void *dx,
                                      float *dw, float *db, phx_dtype dt);
phx_status px_cuda_mse(int dev, int64_t n, const void *y, phx_dtype dt, const float *target, int mean,
                       float *loss, float *grad);
phx_status px_cuda_cross_entropy(int dev, int64_t rows, int64_t classes, const void *logits, phx_dtype dt,
                                 const int64_t *labels, int log_probs, float *loss, float *grad,
                                 int64_t *bad_label_host);
phx_status px_cuda_sgd_step(int dev, int64_t n, float *p, const float *g, float *momentum_buf,
                            const phx_sgd_hparams *h, int step_first);
phx_status px_cuda_adam_step(int dev, int64_t n, float *p, const float *g, float *m, float *v, float *vmax,
                             const phx_adam_hparams *h, int64_t step);
phx_status px_cuda_unscale_check(int dev, int64_t n, float *g, float inv_scale, float *found_inf);
phx_status px_cuda_reduce(int dev, phx_reduce_op op, int64_t n, const void *x, phx_dtype dt, double *out_host);
phx_status px_cuda_rng_uniform(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                               float lo, float hi);
phx_status px_cuda_rng_normal(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                              float mean, float std);

/* appended slots (transformers): gemm.c and attention.cu */
phx_status px_cuda_gemm_batched(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                                int64_t stride_b, phx_dtype adt, float beta, void *c, int64_t ldc, int64_t stride_c,
                                phx_dtype cdt, int64_t batch);
phx_status px_cuda_softmax_forward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                   const void *x, void *y, phx_dtype dt);
phx_status px_cuda_softmax_backward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                    const void *y, const void *dy, void *dx, phx_dtype dt);
phx_status px_cuda_embedding_forward(int dev, int64_t n, int64_t num, int64_t dim, const int64_t *idx,
                                     const float *w, void *y, phx_dtype dt, int64_t *bad_host);
phx_status px_cuda_embedding_backward(int dev, int64_t n, int64_t num, int64_t dim, const int64_t *idx,
                                      const void *dy, phx_dtype dt, float *dw);
phx_status px_cuda_add(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt);
phx_status px_cuda_sum_squares(int dev, int64_t n, const void *x, phx_dtype dt, double *out_host);

#ifdef __cplusplus
}
#endif
#endif
