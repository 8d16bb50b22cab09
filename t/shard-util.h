/* What the sharded-training equivalence tests (t/zero/equiv.c,
 * t/fsdp/equiv.c and their mpi variants) share: the BatchNorm CNN, the
 * GPT's token batches, the distance of two buffers, the AdamW of both
 * sides, an inf planted in a gradient and a sum over the ranks. The
 * includer defines LR (AdamW's learning rate) first. */
#ifndef PHX_T_SHARD_UTIL_H
#define PHX_T_SHARD_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "phalanx/phalanx.h"

/* tu_small_cnn without the convolution's bias, as convolutions before a
 * BatchNorm are built: that bias's gradient is 0 in exact arithmetic (the
 * normalisation removes a per-channel shift), so in f32 it is rounding
 * noise, which AdamW turns into full steps of either sign, and a
 * reduce-scatter sums in another order than an all-reduce (the same holds
 * for the GPT's attention key bias, hence bias = false there). */
static inline phx_module *small_cnn(void)
{
    phx_rng *r = phx_rng_new(3);
    phx_module *m = phx_sequential_new();
    phx_conv2d_opts co = PHX_CONV2D_OPTS_INIT;
    co.bias = false;
    phx_sequential_add(m, phx_conv2d_new(1, 3, 3, 3, &co, r));
    phx_sequential_add(m, phx_batchnorm2d_new(3, 1e-5f, 0.1f, true, true));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_maxpool2d_new(2, 0, 0));
    phx_sequential_add(m, phx_flatten_new());
    phx_sequential_add(m, phx_linear_new(27, 5, true, r));
    phx_rng_free(r);
    return m;
}

/* max |a - b| / max(1, |b|) over two buffers of any dtype (BatchNorm's
 * statistics follow the parameters, so they carry the same rounding);
 * INFINITY when they do not fit. */
static inline double buffer_diff(const phx_tensor *a, const phx_tensor *b)
{
    int64_t n = phx_tensor_numel(a);
    if (n != phx_tensor_numel(b) || phx_tensor_dtype(a) != phx_tensor_dtype(b)) return INFINITY;
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double va, vb;
        if (phx_tensor_get(a, i, &va) != PHX_OK || phx_tensor_get(b, i, &vb) != PHX_OK) return INFINITY;
        e = fmax(e, fabs(va - vb) / fmax(1.0, fabs(vb)));
    }
    return e;
}

static inline phx_optimizer *make_adamw(phx_module *m, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = LR;
    o.weight_decay = 0.1;
    phx_optimizer *opt = phx_adam_new(m, &o);
    if (opt && phx_adam_decay_matrices_only(opt, NULL) != PHX_OK) {
        phx_optimizer_free(opt);
        return NULL;
    }
    return opt;
}

/* g[0] = inf. */
static inline phx_status poison_first(phx_tensor *g)
{
    int64_t n = phx_tensor_numel(g);
    float *h = malloc((size_t)n * sizeof *h);
    phx_status st = h ? phx_tensor_to_host(g, h) : PHX_ENOMEM;
    if (st == PHX_OK) {
        h[0] = INFINITY;
        st = phx_tensor_from_host(g, h);
    }
    free(h);
    return st;
}

/* Sum over ranks of v (a count below 2^24, exact in f32). */
static inline double sum_across(phx_comm *c, double v)
{
    float f = (float)v;
    phx_tensor *t = phx_tensor_from_data(PHX_F32, 0, NULL, &f);
    double out = NAN;
    if (t && phx_comm_allreduce(c, t, PHX_SUM, NULL) == PHX_OK) phx_tensor_get(t, 0, &out);
    phx_tensor_free(t);
    return out;
}

/* Step s's token batch of rows sequences of bs tokens from vocab v, rows
 * first .. first + rows - 1 of the global batch: x hashed from (s, row,
 * position), y a function of x and the token before it. New tensors. */
static inline void sh_gpt_batch(int s, int64_t first, int64_t rows, int64_t bs, int64_t v, phx_tensor **x,
                                phx_tensor **y)
{
    int64_t xs[2] = {rows, bs};
    *x = phx_tensor_new(PHX_I64, 2, xs, phx_cpu());
    *y = phx_tensor_new(PHX_I64, 2, xs, phx_cpu());
    int64_t *hx = phx_tensor_data(*x), *hy = phx_tensor_data(*y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < bs; j++) {
            uint64_t h = (uint64_t)(s * 7919 + (first + r) * 131 + j * 17) * 2654435761u;
            hx[r * bs + j] = (int64_t)((h >> 16) % v);
        }
    for (int64_t i = 0; i < rows * bs; i++) hy[i] = (hx[i] * 3 + (i % bs ? hx[i - 1] : 0)) % v;
}

#endif
