/* Element-wise reductions shared by the threads and gloo backends: n
 * inputs reduced in input order (rank order), so every rank that computes
 * an element computes it the same way. f16 and bf16 accumulate in f32 and
 * round once; integer sums wrap (two's complement); max and min propagate
 * NaN; avg divides the sum by `div` (integers: truncated toward zero).
 * Header-only (static inline); valid C and C++. */
#ifndef PHX_PLUGINS_COMM_REDUCE_H
#define PHX_PLUGINS_COMM_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/math.h"
#include "phalanx/tensor.h"

#define PX_RED_BLOCK 256   /* elements per accumulator block (on the stack) */

static inline float px_red_f(float acc, float x, phx_reduce_op op)
{
    switch (op) {
    case PHX_MAX: return (x > acc || x != x) ? x : acc;
    case PHX_MIN: return (x < acc || x != x) ? x : acc;
    default: return acc + x;
    }
}

/* Every reducer writes each block of results to nout outputs (out[o] +
 * the block's offset within the range): the threads backend stores its
 * slice straight into every rank's buffer. */
#define PX_RED_INT(T, U)                                                                        \
    static inline void px_red_##T(T *const *out, int nout, const void *const *in, int n, size_t off, \
                                  size_t cnt, phx_reduce_op op, int div)                         \
    {                                                                                            \
        T acc[PX_RED_BLOCK];                                                                     \
        for (size_t b = 0; b < cnt; b += PX_RED_BLOCK) {                                         \
            size_t m = cnt - b < PX_RED_BLOCK ? cnt - b : PX_RED_BLOCK;                          \
            memcpy(acc, (const T *)in[0] + off + b, m * sizeof(T));                              \
            for (int q = 1; q < n; q++) {                                                        \
                const T *x = (const T *)in[q] + off + b;                                         \
                if (op == PHX_MAX) for (size_t i = 0; i < m; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i]; \
                else if (op == PHX_MIN) for (size_t i = 0; i < m; i++) acc[i] = x[i] < acc[i] ? x[i] : acc[i]; \
                else for (size_t i = 0; i < m; i++) acc[i] = (T)((U)acc[i] + (U)x[i]);            \
            }                                                                                    \
            if (div > 1) for (size_t i = 0; i < m; i++) acc[i] = (T)(acc[i] / div);              \
            for (int o = 0; o < nout; o++) memcpy(out[o] + b, acc, m * sizeof(T));               \
        }                                                                                        \
    }
PX_RED_INT(int32_t, uint32_t)
PX_RED_INT(int64_t, uint64_t)
#undef PX_RED_INT

static inline void px_red_float(float *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                                phx_reduce_op op, int div)
{
    float acc[PX_RED_BLOCK];
    for (size_t b = 0; b < cnt; b += PX_RED_BLOCK) {
        size_t m = cnt - b < PX_RED_BLOCK ? cnt - b : PX_RED_BLOCK;
        memcpy(acc, (const float *)in[0] + off + b, m * sizeof(float));
        for (int q = 1; q < n; q++) {
            const float *x = (const float *)in[q] + off + b;
            if (op == PHX_MAX) for (size_t i = 0; i < m; i++) acc[i] = px_red_f(acc[i], x[i], PHX_MAX);
            else if (op == PHX_MIN) for (size_t i = 0; i < m; i++) acc[i] = px_red_f(acc[i], x[i], PHX_MIN);
            else for (size_t i = 0; i < m; i++) acc[i] += x[i];
        }
        if (div > 1) for (size_t i = 0; i < m; i++) acc[i] /= (float)div;
        for (int o = 0; o < nout; o++) memcpy(out[o] + b, acc, m * sizeof(float));
    }
}

/* f16 (bf = 0) or bf16 (bf = 1): accumulate in f32, round once. */
static inline void px_red_half(uint16_t *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                               phx_reduce_op op, int div, int bf)
{
    float acc[PX_RED_BLOCK];
    uint16_t h[PX_RED_BLOCK];
    for (size_t b = 0; b < cnt; b += PX_RED_BLOCK) {
        size_t m = cnt - b < PX_RED_BLOCK ? cnt - b : PX_RED_BLOCK;
        for (int q = 0; q < n; q++) {
            const uint16_t *x = (const uint16_t *)in[q] + off + b;
            for (size_t i = 0; i < m; i++) {
                float v = bf ? phx_bf16_to_f32(x[i]) : phx_f16_to_f32(x[i]);
                acc[i] = q == 0 ? v : px_red_f(acc[i], v, op);
            }
        }
        if (div > 1) for (size_t i = 0; i < m; i++) acc[i] /= (float)div;
        for (size_t i = 0; i < m; i++) h[i] = bf ? phx_f32_to_bf16(acc[i]) : phx_f32_to_f16(acc[i]);
        for (int o = 0; o < nout; o++) memcpy(out[o] + b, h, m * sizeof(uint16_t));
    }
}

/* Writes op over q of in[q][off .. off+cnt), taken in order q = 0..n-1,
 * to out[o][0..cnt) for every o < nout; for PHX_AVG the sum is divided by
 * div. An output may be one of the inputs (at the same offset): each
 * block is read before it is written. */
static inline void px_reduce_to(void *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                                phx_dtype dt, phx_reduce_op op, int div)
{
    if (op != PHX_AVG) div = 1;
    switch (dt) {
    case PHX_F32: px_red_float((float *const *)out, nout, in, n, off, cnt, op, div); break;
    case PHX_F16: px_red_half((uint16_t *const *)out, nout, in, n, off, cnt, op, div, 0); break;
    case PHX_BF16: px_red_half((uint16_t *const *)out, nout, in, n, off, cnt, op, div, 1); break;
    case PHX_I32: px_red_int32_t((int32_t *const *)out, nout, in, n, off, cnt, op, div); break;
    case PHX_I64: px_red_int64_t((int64_t *const *)out, nout, in, n, off, cnt, op, div); break;
    }
}

/* One output. */
static inline void px_reduce_n(void *out, const void *const *in, int n, size_t off, size_t cnt, phx_dtype dt,
                               phx_reduce_op op, int div)
{
    void *const outs[1] = {out};
    px_reduce_to(outs, 1, in, n, off, cnt, dt, op, div);
}

/* buf /= div element-wise (the avg of a sum made elsewhere). */
static inline void px_divide(void *buf, size_t cnt, phx_dtype dt, int div)
{
    const void *in[1] = {buf};
    px_reduce_n(buf, in, 1, 0, cnt, dt, PHX_AVG, div);
}

#endif
