/* The CPU device's kernel table. */
#include "config.h"
#include "kernels/cpu/cpu.h"

const phx_kernels_v1 px_cpu_kernels = {
    .gemm = px_cpu_gemm,
    .cast = px_cpu_cast,
    .fill = px_cpu_fill,
    .axpby = px_cpu_axpby,
    .mul = px_cpu_mul,
    .bias_add = px_cpu_bias_add,
    .bias_grad = px_cpu_bias_grad,
    .act_forward = px_cpu_act_forward,
    .act_backward = px_cpu_act_backward,
    .dropout_forward = px_cpu_dropout_forward,
    .dropout_backward = px_cpu_dropout_backward,
    .layernorm_forward = px_cpu_layernorm_forward,
    .layernorm_backward = px_cpu_layernorm_backward,
    .mse = px_cpu_mse,
    .cross_entropy = px_cpu_cross_entropy,
    .sgd_step = px_cpu_sgd_step,
    .adam_step = px_cpu_adam_step,
    .unscale_check = px_cpu_unscale_check,
    .reduce = px_cpu_reduce,
    .rng_uniform = px_cpu_rng_uniform,
    .rng_normal = px_cpu_rng_normal,
    .gemm_batched = px_cpu_gemm_batched,
    .softmax_forward = px_cpu_softmax_forward,
    .softmax_backward = px_cpu_softmax_backward,
    .embedding_forward = px_cpu_embedding_forward,
    .embedding_backward = px_cpu_embedding_backward,
    .add = px_cpu_add,
    .sum_squares = px_cpu_sum_squares,
};
