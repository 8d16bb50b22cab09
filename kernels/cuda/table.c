/* The cuda device's kernel table: one entry point per slot of
 * phx_kernels_v1 (kernels/cuda/kernels.h). */
#include "config.h"
#include "kernels/cuda/kernels.h"
#include "plugins/device/cuda/cuda-impl.h"

const phx_kernels_v1 px_cuda_kernels = {
    .gemm = px_cuda_gemm,
    .cast = px_cuda_cast,
    .fill = px_cuda_fill,
    .axpby = px_cuda_axpby,
    .mul = px_cuda_mul,
    .bias_add = px_cuda_bias_add,
    .bias_grad = px_cuda_bias_grad,
    .act_forward = px_cuda_act_forward,
    .act_backward = px_cuda_act_backward,
    .dropout_forward = px_cuda_dropout_forward,
    .dropout_backward = px_cuda_dropout_backward,
    .layernorm_forward = px_cuda_layernorm_forward,
    .layernorm_backward = px_cuda_layernorm_backward,
    .mse = px_cuda_mse,
    .cross_entropy = px_cuda_cross_entropy,
    .sgd_step = px_cuda_sgd_step,
    .adam_step = px_cuda_adam_step,
    .unscale_check = px_cuda_unscale_check,
    .reduce = px_cuda_reduce,
    .rng_uniform = px_cuda_rng_uniform,
    .rng_normal = px_cuda_rng_normal,
    .gemm_batched = px_cuda_gemm_batched,
    .softmax_forward = px_cuda_softmax_forward,
    .softmax_backward = px_cuda_softmax_backward,
    .embedding_forward = px_cuda_embedding_forward,
    .embedding_backward = px_cuda_embedding_backward,
    .add = px_cuda_add,
    .sum_squares = px_cuda_sum_squares,
};
