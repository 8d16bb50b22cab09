/* The kit's element-wise reductions (phalanx/plugin/kit.h): n inputs
 * reduced in input order, block by block through an f32 (or integer)
 * accumulator on the stack, each block written to every output. The
 * threads and gloo backends reduce every byte of a large all-reduce here,
 * so the loops are vectorised with the CPU kernels' options (the pragma
 * below, as kernels/cpu/cpu.h): the -O3 of src/plugin/local.mk comes
 * before configure's -O2 on the command line and loses, and -O2 leaves
 * loops of unknown length scalar. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "vect-cost-model=dynamic", "unswitch-loops")
#endif
#include "config.h"
#include <stdint.h>
#include <string.h>
#include "kernels/math.h"
#include "phalanx/plugin/kit.h"

#define BLOCK 256 /* elements per accumulator block */

/* The f32 and half loops also built for AVX2, chosen at load by the CPU
 * as the kernels' PX_CLONES (kernels/cpu/cpu.h): no FMA, every step
 * element-wise, so the same bits on either path. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define PX_KIT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PX_KIT_CLONES
#endif

static inline float red_f(float acc, float x, phx_reduce_op op)
{
    switch (op) {
    case PHX_MAX: return (x > acc || x != x) ? x : acc;
    case PHX_MIN: return (x < acc || x != x) ? x : acc;
    default: return acc + x;
    }
}

#define RED_INT(T, U) \
    static void red_##T(T *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt, \
                        phx_reduce_op op, int div) \
    { \
        T acc[BLOCK]; \
        for (size_t b = 0; b < cnt; b += BLOCK) { \
            size_t m = cnt - b < BLOCK ? cnt - b : BLOCK; \
            memcpy(acc, (const T *)in[0] + off + b, m * sizeof(T)); \
            for (int q = 1; q < n; q++) { \
                const T *x = (const T *)in[q] + off + b; \
                if (op == PHX_MAX) \
                    for (size_t i = 0; i < m; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i]; \
                else if (op == PHX_MIN) \
                    for (size_t i = 0; i < m; i++) acc[i] = x[i] < acc[i] ? x[i] : acc[i]; \
                else \
                    for (size_t i = 0; i < m; i++) acc[i] = (T)((U)acc[i] + (U)x[i]); \
            } \
            if (div > 1) \
                for (size_t i = 0; i < m; i++) acc[i] = (T)(acc[i] / div); \
            for (int o = 0; o < nout; o++) memcpy(out[o] + b, acc, m * sizeof(T)); \
        } \
    }
RED_INT(int32_t, uint32_t)
RED_INT(int64_t, uint64_t)
#undef RED_INT

PX_KIT_CLONES static void red_float(float *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                                    phx_reduce_op op, int div)
{
    float acc[BLOCK];
    for (size_t b = 0; b < cnt; b += BLOCK) {
        size_t m = cnt - b < BLOCK ? cnt - b : BLOCK;
        memcpy(acc, (const float *)in[0] + off + b, m * sizeof(float));
        for (int q = 1; q < n; q++) {
            const float *x = (const float *)in[q] + off + b;
            if (op == PHX_MAX)
                for (size_t i = 0; i < m; i++) acc[i] = red_f(acc[i], x[i], PHX_MAX);
            else if (op == PHX_MIN)
                for (size_t i = 0; i < m; i++) acc[i] = red_f(acc[i], x[i], PHX_MIN);
            else
                for (size_t i = 0; i < m; i++) acc[i] += x[i];
        }
        if (div > 1)
            for (size_t i = 0; i < m; i++) acc[i] /= (float)div;
        for (int o = 0; o < nout; o++) memcpy(out[o] + b, acc, m * sizeof(float));
    }
}

/* f16 (bf = 0) or bf16 (bf = 1): accumulate in f32, round once. Each
 * step is its own loop (widen, combine, narrow) so that each vectorises:
 * the conversions are branch-free (kernels/math.h) and element-wise, so
 * the bits are those of converting one element at a time. */
static void widen_half(float *dst, const uint16_t *x, size_t m, int bf)
{
    if (bf)
        for (size_t i = 0; i < m; i++) dst[i] = phx_bf16_to_f32(x[i]);
    else
        for (size_t i = 0; i < m; i++) dst[i] = phx_f16_to_f32(x[i]);
}

PX_KIT_CLONES static void red_half(uint16_t *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                                   phx_reduce_op op, int div, int bf)
{
    float acc[BLOCK], v[BLOCK];
    uint16_t h[BLOCK];
    for (size_t b = 0; b < cnt; b += BLOCK) {
        size_t m = cnt - b < BLOCK ? cnt - b : BLOCK;
        widen_half(acc, (const uint16_t *)in[0] + off + b, m, bf);
        for (int q = 1; q < n; q++) {
            widen_half(v, (const uint16_t *)in[q] + off + b, m, bf);
            if (op == PHX_MAX)
                for (size_t i = 0; i < m; i++) acc[i] = red_f(acc[i], v[i], PHX_MAX);
            else if (op == PHX_MIN)
                for (size_t i = 0; i < m; i++) acc[i] = red_f(acc[i], v[i], PHX_MIN);
            else
                for (size_t i = 0; i < m; i++) acc[i] += v[i];
        }
        if (div > 1)
            for (size_t i = 0; i < m; i++) acc[i] /= (float)div;
        if (bf)
            for (size_t i = 0; i < m; i++) h[i] = phx_f32_to_bf16(acc[i]);
        else
            for (size_t i = 0; i < m; i++) h[i] = phx_f32_to_f16(acc[i]);
        for (int o = 0; o < nout; o++) memcpy(out[o] + b, h, m * sizeof(uint16_t));
    }
}

phx_status phx_kit_reduce(void *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                          phx_dtype dt, phx_reduce_op op, int div)
{
    if ((unsigned)op > PHX_MIN)
        return phx_error(PHX_EINVAL, "phx_kit_reduce: reduce op %d, expected sum, avg, max or min", (int)op);
    if (n < 1 || nout < 0)
        return phx_error(PHX_EINVAL, "phx_kit_reduce: %d inputs and %d outputs, expected >= 1 and >= 0", n, nout);
    if (op != PHX_AVG) div = 1;
    switch (dt) {
    case PHX_F32: red_float((float *const *)out, nout, in, n, off, cnt, op, div); break;
    case PHX_F16: red_half((uint16_t *const *)out, nout, in, n, off, cnt, op, div, 0); break;
    case PHX_BF16: red_half((uint16_t *const *)out, nout, in, n, off, cnt, op, div, 1); break;
    case PHX_I32: red_int32_t((int32_t *const *)out, nout, in, n, off, cnt, op, div); break;
    case PHX_I64: red_int64_t((int64_t *const *)out, nout, in, n, off, cnt, op, div); break;
    default: return phx_error(PHX_EINVAL, "phx_kit_reduce: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt);
    }
    return PHX_OK;
}

phx_status phx_kit_divide(void *buf, size_t cnt, phx_dtype dt, int div)
{
    const void *in[1] = {buf};
    return phx_kit_reduce(&buf, 1, in, 1, 0, cnt, dt, PHX_AVG, div);
}
