/* Phalanx — transformer modules: Embedding, Softmax / LogSoftmax,
 * Residual, causal multi-head self-attention, a pre-LN transformer block
 * and a GPT; see doc/guide/transformer.md. PyTorch semantics and
 * initialisation; parameter names are the state_dict keys of the same
 * model written with torch.nn (bench/torch/gpt.py). */
#ifndef PHALANX_TRANSFORMER_H
#define PHALANX_TRANSFORMER_H

#include <stdbool.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nn.Embedding(num, dim): weight (num, dim) ~ N(0, 1) drawn from rng
 * (NULL: a generator seeded with 0). forward takes an i64 index tensor of
 * any shape with up to 3 dims and returns shape + (dim) in the compute
 * dtype; an index outside [0, num) is PHX_EINVAL naming the index, its
 * position and the table size. backward adds the rows of dy into the
 * weight's gradient (scatter-add) and sets *dx to NULL: indices have no
 * gradient. NULL on num or dim < 1. */
phx_module *phx_embedding_new(int64_t num, int64_t dim, phx_rng *rng);

/* nn.Softmax(dim=-1) and nn.LogSoftmax(dim=-1): over the last dim, math
 * in f32, output in the compute dtype. */
phx_module *phx_softmax_new(void);
phx_module *phx_log_softmax_new(void);

/* y = x + fn(x). Takes ownership of fn (also on failure), registered as
 * the child "fn" (parameter names "fn.<name>"); fn must return its
 * input's shape. backward: dx = dy + dfn(x)/dx. NULL when fn is NULL. */
phx_module *phx_residual_new(phx_module *fn);

/* Causal multi-head self-attention on (B, T, d_model) inputs, as
 * nanoGPT's CausalSelfAttention: children c_attn = Linear(d_model,
 * 3 d_model, bias) giving q, k, v (head h uses columns h*hs .. (h+1)*hs
 * of each, hs = d_model / n_head), softmax(q k^T / sqrt(hs)) with the
 * causal mask, dropout p on the attention weights, the heads
 * concatenated, then c_proj = Linear(d_model, d_model, bias) and dropout
 * p. Dropout masks come from Philox(seed) (two streams: seed and seed+1).
 * Linear weights are drawn from rng in the order c_attn, c_proj. NULL
 * when d_model is not a positive multiple of n_head or p is outside
 * [0, 1). */
phx_module *phx_attention_new(int64_t d_model, int64_t n_head, float dropout, bool bias, uint64_t seed, phx_rng *rng);

/* A pre-LN transformer block written from modules:
 *   Sequential(Residual(Sequential(LayerNorm, Attention)),
 *              Residual(Sequential(LayerNorm, Sequential(Linear(C, 4C), GELU,
 *                                                        Linear(4C, C), Dropout))))
 * i.e. x + attn(ln_1(x)), then x + mlp(ln_2(x)); the Dropout is left out
 * when dropout is 0. Names: "0.fn.0.weight" (ln_1), "0.fn.1.c_attn.weight",
 * "1.fn.0.weight" (ln_2), "1.fn.1.0.weight" (c_fc), "1.fn.1.2.weight"
 * (mlp c_proj), ... */
phx_module *phx_transformer_block_new(int64_t d_model, int64_t n_head, float dropout, bool bias, uint64_t seed,
                                      phx_rng *rng);

typedef struct phx_gpt_config {
    size_t struct_size; /* sizeof (phx_gpt_config): PHX_GPT_CONFIG_INIT sets it */
    int64_t vocab_size; /* tokens (i64 indices in [0, vocab_size)) */
    int64_t block_size; /* longest context T */
    int64_t n_layer, n_head, d_model;
    float dropout; /* embeddings, attention weights, residual branches */
    bool bias; /* biases in Linear layers */
    uint64_t seed; /* Philox seed of the dropout masks (each Dropout its own stream) */
    /* 0: PyTorch's default initialisation (Embedding N(0,1), Linear
     * kaiming-uniform). > 0: GPT-2's: Linear and Embedding weights
     * N(0, init_std), biases 0, the residual projections N(0,
     * init_std / sqrt(2 n_layer)). */
    double init_std;
} phx_gpt_config;
#define PHX_GPT_CONFIG_INIT \
    { \
        .struct_size = sizeof(phx_gpt_config), .vocab_size = 65, .block_size = 128, .n_layer = 4, .n_head = 4, \
        .d_model = 128, .bias = true, .init_std = 0.02 \
    }

/* PHX_GPT_CONFIG_INIT's values: vocab 65, block 128, 4 layers, 4 heads,
 * d_model 128, dropout 0, bias, seed 0, init_std 0.02. Deprecated: use
 * PHX_GPT_CONFIG_INIT. */
phx_gpt_config phx_gpt_defaults(void);

/* A GPT: forward takes (B, T) i64 token indices (T <= block_size) and
 * returns (B, T, vocab_size) logits in the compute dtype. Children:
 *   wte = Embedding(vocab, C), wpe = Embedding(block_size, C),
 *   drop (Dropout, only when dropout > 0), h = Sequential of n_layer
 *   transformer blocks, ln_f = LayerNorm(C), lm_head = Linear(C, vocab,
 *   bias=false) (not tied to wte).
 * Parameters are drawn from rng in named_parameters() order. backward
 * takes dL/dlogits and sets *dx to NULL. NULL with phx_last_error on a
 * bad configuration. */
phx_module *phx_gpt_new(const phx_gpt_config *cfg, phx_rng *rng);

#ifdef __cplusplus
}
#endif
#endif
