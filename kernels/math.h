/* Per-element math shared by the CPU kernels (kernels/cpu) and the CUDA
 * kernels (plugins/device/cuda/kernels): half-precision conversions, activations and
 * their derivatives, Philox-4x32-10, the dropout rule, the SGD and
 * Adam/AdamW updates (PyTorch 1.13 formulas) and the per-element pieces
 * of the losses. The CPU tests exercise these exact functions, so the
 * formulas are checked once for both devices.
 *
 * Valid C11 and C++ (nvcc compiles it in .cu files): static inline
 * functions only; no compound literals, designated initialisers or
 * _Generic. Every function is PHX_HD (__host__ __device__ under nvcc). */
#ifndef PHX_KERNELS_MATH_H
#define PHX_KERNELS_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PHX_HD __host__ __device__
#else
#define PHX_HD
#endif

/* Host code always inlines these: an out-of-line call inside a kernel loop
 * stops its vectorisation (and from an AVX2 clone of a kernel, a call into
 * SSE code costs a state transition per element). nvcc inlines device
 * functions by itself. */
#if defined(__GNUC__) && !defined(__CUDACC__)
#define PHX_FI __attribute__((always_inline))
#else
#define PHX_FI
#endif

/* ---------------------------------------------------------------------
 * Bit casts */

PHX_HD PHX_FI static inline uint32_t phx_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

PHX_HD PHX_FI static inline float phx_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ---------------------------------------------------------------------
 * IEEE binary16 <-> binary32. Conversions work on the bits, plus float
 * operations that are exact or rounded once (so flush-to-zero, FMA
 * contraction or fast-math on either device give the same results).
 * f32 -> f16 rounds to nearest, ties to even; values >= 65520 go to inf;
 * results below 2^-14 become subnormals (or zero). A NaN stays a NaN and
 * keeps the top 10 bits of its payload (f16 -> f32 -> f16 returns every
 * bit pattern unchanged, signalling NaNs included). */

/* c ? a : b as masks: the conversions below compute every case and pick
 * one without branches, so CPU loops over them vectorise (gcc does not
 * if-convert the equivalent ?: chains). */
PHX_HD PHX_FI static inline uint32_t phx_sel_u32(int c, uint32_t a, uint32_t b)
{
    uint32_t mask = 0u - (uint32_t)(c != 0);
    return (a & mask) | (b & ~mask);
}

PHX_HD PHX_FI static inline float phx_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    /* zero or subnormal: m * 2^-24, exact in f32 (a normal number) */
    uint32_t sub = phx_f32_bits((float)(int32_t)m * 5.9604644775390625e-8f);
    uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t special = 0x7f800000u | (m << 13); /* inf, NaN with its payload */
    uint32_t r = phx_sel_u32(e == 31, special, normal);
    return phx_bits_f32(sign | phx_sel_u32(e == 0, sub, r));
}

PHX_HD PHX_FI static inline uint16_t phx_f32_to_f16(float f)
{
    uint32_t x = phx_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    /* normal: rebias the exponent, round the 13 dropped bits to even; a
     * carry out of the mantissa correctly bumps the exponent */
    uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13; /* (15-127)<<23 + 0xfff */
    /* below 2^-14: the f16 subnormal is |f| / 2^-24 rounded to an integer;
     * |f| 2^24 < 2^10 is exact, and adding 1.5 * 2^23 rounds it (to even)
     * into the low mantissa bits. Under flush-to-zero an f32 subnormal
     * input reads as 0, which is also its correctly rounded f16. */
    float scaled = phx_bits_f32(ax) * 16777216.0f + 12582912.0f;
    uint32_t sub = phx_f32_bits(scaled) - 0x4b400000u;
    uint32_t m = (ax >> 13) & 0x3ffu;
    uint32_t nan = 0x7c00u | phx_sel_u32(m != 0, m, 0x200u); /* top 10 payload bits kept */
    uint32_t r = phx_sel_u32(ax < 0x477ff000u, normal, 0x7c00u); /* >= 65520: inf */
    r = phx_sel_u32(ax < 0x38800000u, sub, r);
    return (uint16_t)(sign | phx_sel_u32(ax > 0x7f800000u, nan, r));
}

/* ---------------------------------------------------------------------
 * bfloat16 <-> binary32: bf16 is the top half of an f32. Round to nearest
 * even, overflow to inf, NaN kept (payload's top 7 bits, quiet bit set
 * only when they are all zero). */

PHX_HD PHX_FI static inline float phx_bf16_to_f32(uint16_t b)
{
    return phx_bits_f32((uint32_t)b << 16);
}

PHX_HD PHX_FI static inline uint16_t phx_f32_to_bf16(float f)
{
    uint32_t x = phx_f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t hi = x >> 16;
    uint32_t nan = phx_sel_u32((hi & 0x7fu) != 0, hi, hi | 0x40u);
    return (uint16_t)phx_sel_u32((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

/* ---------------------------------------------------------------------
 * expf, tanhf and 1 + erf without branches or table lookups (so CPU loops
 * over them vectorise; the activations use them on both devices): expf
 * within 1 ulp (subnormal results included) and tanhf within 1.33 ulp over
 * all floats; inf and NaN as libm. Cephes polynomials (S. Moshier). */

PHX_HD PHX_FI static inline float phx_self_f32(int c, float a, float b)
{
    return phx_bits_f32(phx_sel_u32(c, phx_f32_bits(a), phx_f32_bits(b)));
}

PHX_HD PHX_FI static inline float phx_expf(float x)
{
    /* beyond [-104, 89] the result is 0 or inf anyway (mask selects, not
     * fminf/fmaxf, which gcc calls out of line; a NaN is put back at the
     * end) */
    float xc = phx_self_f32(x < -104.0f, -104.0f, x);
    xc = phx_self_f32(xc > 89.0f, 89.0f, xc);
    /* n = round(x / ln 2): adding 1.5 * 2^23 rounds into the low bits */
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    int32_t ni = (int32_t)phx_f32_bits(t) - 0x4b400000;
    float r = xc - n * 0.693359375f; /* Cody-Waite: ln 2 = 0.693359375 - 2.12194440e-4 */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    /* times 2^n in two steps, so n in [-150, 128] reaches subnormals and inf */
    int32_t h = ni >> 1;
    float res = y * phx_bits_f32((uint32_t)(h + 127) << 23) * phx_bits_f32((uint32_t)(ni - h + 127) << 23);
    return phx_self_f32(x != x, x, res);
}

PHX_HD PHX_FI static inline float phx_tanhf(float x)
{
    float ax = fabsf(x);
    float big = copysignf(1.0f - 2.0f / (phx_expf(2.0f * ax) + 1.0f), x);
    float z = x * x; /* |x| < 0.625: odd polynomial, no cancellation */
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    return phx_self_f32(ax < 0.625f, small, big);
}

/* 1 + erf(u), as gelu needs it, without branches: an odd polynomial for
 * |u| < 1; beyond, erfc(|u|) = exp(-u^2) P(1/u^2) / |u| (exp of u^2 split
 * so its rounding does not grow with u), giving 2 - erfc for u > 0 and,
 * in the left tail, erfc itself — no cancellation against 1 there. Within
 * 15 ulp near u = -1 (where 1 + erf cancels), a few ulp elsewhere. Cephes
 * erff/erfcf coefficients. */
PHX_HD PHX_FI static inline float phx_erf1p(float u)
{
    float au = fabsf(u);
    float z = u * u;
    float ps = 7.853861353153693e-5f;
    ps = ps * z - 8.010193625184903e-4f;
    ps = ps * z + 5.188327685732524e-3f;
    ps = ps * z - 2.685381193529856e-2f;
    ps = ps * z + 1.128358514861418e-1f;
    ps = ps * z - 3.761262582423300e-1f;
    ps = ps * z + 1.128379165726710e0f;
    float small = 1.0f + u * ps;
    /* the tail's argument in [1, 10.5]: erfc(10.5) < 2^-150 is 0 anyway */
    float x = phx_self_f32(au < 1.0f, 1.0f, phx_self_f32(au > 10.5f, 10.5f, au));
    float xh = phx_bits_f32(phx_f32_bits(x) & 0xfffff000u); /* xh^2 is exact */
    float e = phx_expf(-xh * xh) * phx_expf(-(x - xh) * (x + xh));
    float q = 1.0f / x, y = q * q;
    float p1 = 2.326819970068386e-2f; /* 1 <= x < 2 */
    p1 = p1 * y - 1.387039388740657e-1f;
    p1 = p1 * y + 3.687424674597105e-1f;
    p1 = p1 * y - 5.824733027278666e-1f;
    p1 = p1 * y + 6.210004621745983e-1f;
    p1 = p1 * y - 4.944515323274145e-1f;
    p1 = p1 * y + 3.404879937665872e-1f;
    p1 = p1 * y - 2.741127028184656e-1f;
    p1 = p1 * y + 5.638259427386472e-1f;
    float p2 = -1.047766399936249e1f; /* x >= 2 */
    p2 = p2 * y + 1.297719955372516e1f;
    p2 = p2 * y - 7.495518717768503e0f;
    p2 = p2 * y + 2.921019019210786e0f;
    p2 = p2 * y - 1.015265279202700e0f;
    p2 = p2 * y + 4.218463358204948e-1f;
    p2 = p2 * y - 2.820767439740514e-1f;
    p2 = p2 * y + 5.641895067754075e-1f;
    float erfc = e * q * phx_self_f32(x < 2.0f, p1, p2);
    float big = phx_self_f32(u > 0.0f, 2.0f - erfc, erfc);
    return phx_self_f32(au < 1.0f, small, big);
}

/* ---------------------------------------------------------------------
 * Activations (PyTorch 1.13 formulas). *_grad gets x and y = act(x) and
 * returns d act / dx; the kernels multiply by dy. */

#define PHX_SQRT1_2 0.70710678118654752440f /* 1/sqrt(2) */
#define PHX_INV_SQRT_2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */
#define PHX_GELU_BETA 0.79788456080286535588f /* sqrt(2/pi) */
#define PHX_GELU_KAPPA 0.044715f

/* 0 where x <= 0 (-0 gives +0); a NaN passes through, as in PyTorch, so
 * a diverged activation stays visible. */
PHX_HD PHX_FI static inline float phx_f_relu(float x)
{
    return x <= 0.0f ? 0.0f : x;
}
/* Zero where x <= 0, so a NaN x passes the gradient (the backward
 * itself selects: phx_act_bwd). */
PHX_HD PHX_FI static inline float phx_f_relu_grad(float x)
{
    return phx_self_f32(x <= 0.0f, 0.0f, 1.0f);
}

PHX_HD PHX_FI static inline float phx_f_gelu(float x)
{
    return 0.5f * x * phx_erf1p(x * PHX_SQRT1_2);
}
PHX_HD PHX_FI static inline float phx_f_gelu_grad(float x)
{
    float cdf = 0.5f * phx_erf1p(x * PHX_SQRT1_2);
    float pdf = phx_expf(-0.5f * x * x) * PHX_INV_SQRT_2PI;
    return cdf + x * pdf;
}

PHX_HD PHX_FI static inline float phx_f_gelu_tanh(float x)
{
    float inner = PHX_GELU_BETA * (x + PHX_GELU_KAPPA * x * x * x);
    return 0.5f * x * (1.0f + phx_tanhf(inner));
}
PHX_HD PHX_FI static inline float phx_f_gelu_tanh_grad(float x)
{
    float x2 = x * x;
    float inner = PHX_GELU_BETA * (x + PHX_GELU_KAPPA * x2 * x);
    float t = phx_tanhf(inner);
    float left_d = 0.5f * (1.0f + t);
    float right_d = 0.5f * x * (1.0f - t * t) * PHX_GELU_BETA * (1.0f + 3.0f * PHX_GELU_KAPPA * x2);
    return left_d + right_d;
}

PHX_HD PHX_FI static inline float phx_f_tanh(float x)
{
    return phx_tanhf(x);
}
PHX_HD PHX_FI static inline float phx_f_tanh_grad(float y)
{
    return 1.0f - y * y;
}

PHX_HD PHX_FI static inline float phx_f_sigmoid(float x)
{
    return 1.0f / (1.0f + phx_expf(-x));
}
PHX_HD PHX_FI static inline float phx_f_sigmoid_grad(float y)
{
    return y * (1.0f - y);
}

/* act is a phx_activation (0 relu, 1 gelu, 2 gelu_tanh, 3 tanh, 4 sigmoid). */
PHX_HD PHX_FI static inline float phx_act(int act, float x)
{
    switch (act) {
    case 0: return phx_f_relu(x);
    case 1: return phx_f_gelu(x);
    case 2: return phx_f_gelu_tanh(x);
    case 3: return phx_f_tanh(x);
    default: return phx_f_sigmoid(x);
    }
}

PHX_HD PHX_FI static inline float phx_act_grad(int act, float x, float y)
{
    switch (act) {
    case 0: return phx_f_relu_grad(x);
    case 1: return phx_f_gelu_grad(x);
    case 2: return phx_f_gelu_tanh_grad(x);
    case 3: return phx_f_tanh_grad(y);
    default: return phx_f_sigmoid_grad(y);
    }
}

/* dx from dy: dy times the derivative, but relu selects (PyTorch's
 * threshold_backward): 0 where x <= 0 even for an infinite or NaN dy,
 * which a product would turn into NaN. */
PHX_HD PHX_FI static inline float phx_act_bwd(int act, float x, float y, float dy)
{
    if (act == 0) return x <= 0.0f ? 0.0f : dy;
    return dy * phx_act_grad(act, x, y);
}

/* ---------------------------------------------------------------------
 * Philox-4x32-10 (Salmon et al., SC'11). Number i of the stream for seed s
 * is word (i mod 4) of philox(counter = i/4 as (lo, hi, 0, 0),
 * key = (lo32 s, hi32 s)) — curand's Philox4_32_10 with subsequence 0. */

#define PHX_PHILOX_M0 0xD2511F53u
#define PHX_PHILOX_M1 0xCD9E8D57u
#define PHX_PHILOX_W0 0x9E3779B9u
#define PHX_PHILOX_W1 0xBB67AE85u

PHX_HD PHX_FI static inline void phx_philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHX_PHILOX_M0 * c[0];
        uint64_t p1 = (uint64_t)PHX_PHILOX_M1 * c[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c[1] ^ k0;
        uint32_t n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += PHX_PHILOX_W0;
        k1 += PHX_PHILOX_W1;
    }
}

/* The block of 4 numbers starting at 4*block. */
PHX_HD PHX_FI static inline void phx_philox_block(uint64_t seed, uint64_t block, uint32_t out[4])
{
    out[0] = (uint32_t)block;
    out[1] = (uint32_t)(block >> 32);
    out[2] = 0;
    out[3] = 0;
    phx_philox4x32_10(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

PHX_HD PHX_FI static inline uint32_t phx_philox_at(uint64_t seed, uint64_t i)
{
    uint32_t w[4];
    phx_philox_block(seed, i >> 2, w);
    return w[i & 3u];
}

/* U[0,1) from the 24 high bits: exact multiples of 2^-24. */
PHX_HD PHX_FI static inline float phx_u32_to_uniform(uint32_t u)
{
    return (float)(u >> 8) * 5.9604644775390625e-8f;
}

/* Box-Muller from two uniforms; 1-u1 lies in (0,1] so the log is finite. */
PHX_HD PHX_FI static inline float phx_box_muller(float u1, float u2)
{
    float r = sqrtf(-2.0f * logf(1.0f - u1));
    return r * cosf(6.2831853071795864769f * u2);
}

/* ---------------------------------------------------------------------
 * Dropout: element i is kept when philox_uniform(seed, offset + i) >= p
 * and then scaled by 1/(1-p); p = 1 drops everything (scale 0), as in
 * PyTorch. */

PHX_HD PHX_FI static inline int phx_dropout_keep(float u, float p)
{
    return u >= p;
}
PHX_HD PHX_FI static inline float phx_dropout_scale(float p)
{
    return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

/* ---------------------------------------------------------------------
 * SGD, torch/optim/sgd.py _single_tensor_sgd (1.13), one element:
 *   d = g + wd p;  buf = first ? d : momentum buf + (1 - dampening) d
 *   d = nesterov ? d + momentum buf : buf   (when momentum != 0)
 *   p = p - lr d */

PHX_HD PHX_FI static inline void phx_sgd_update(float *p, float g, float *buf, float lr, float momentum,
                                                float dampening, float weight_decay, int nesterov, int first)
{
    float d = g;
    if (weight_decay != 0.0f) d = d + weight_decay * *p;
    if (momentum != 0.0f) {
        float b = first ? d : momentum * *buf + (1.0f - dampening) * d;
        *buf = b;
        d = nesterov ? d + momentum * b : b;
    }
    *p = *p + (-lr) * d;
}

/* ---------------------------------------------------------------------
 * Adam / AdamW, torch/optim/adam.py and adamw.py _single_tensor_* (1.13).
 * The per-step scalars are computed once on the host in double, as
 * PyTorch does in Python, then rounded to float like a Scalar argument. */

typedef struct phx_adam_coef {
    float beta1, one_minus_beta1; /* m = beta1 m + (1 - beta1) g */
    float beta2, one_minus_beta2; /* v = beta2 v + (1 - beta2) g^2 */
    float eps;
    float weight_decay; /* Adam: g += wd p */
    float decay; /* AdamW: p *= 1 - lr wd (1 for Adam) */
    float neg_step_size; /* -lr / (1 - beta1^step) */
    float bc2_sqrt; /* sqrt(1 - beta2^step) */
    int amsgrad, decoupled;
} phx_adam_coef;

/* Host only (uses pow in double). step counts from 1. */
static inline phx_adam_coef phx_adam_coef_make(float lr, float beta1, float beta2, float eps, float weight_decay,
                                               int amsgrad, int decoupled, int64_t step)
{
    phx_adam_coef c;
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    c.beta1 = beta1;
    c.one_minus_beta1 = (float)(1.0 - (double)beta1);
    c.beta2 = beta2;
    c.one_minus_beta2 = (float)(1.0 - (double)beta2);
    c.eps = eps;
    c.weight_decay = decoupled ? 0.0f : weight_decay;
    c.decay = decoupled ? (float)(1.0 - (double)lr * (double)weight_decay) : 1.0f;
    c.neg_step_size = (float)(-(double)lr / bc1);
    c.bc2_sqrt = (float)sqrt(bc2);
    c.amsgrad = amsgrad;
    c.decoupled = decoupled;
    return c;
}

/* One element. vmax is read/written only with amsgrad. */
PHX_HD PHX_FI static inline void phx_adam_update(const phx_adam_coef *c, float *p, float g, float *m, float *v,
                                                 float *vmax)
{
    float pv = *p;
    if (c->decoupled)
        pv = pv * c->decay;
    else if (c->weight_decay != 0.0f)
        g = g + c->weight_decay * pv;
    float mv = *m * c->beta1 + c->one_minus_beta1 * g;
    float vv = *v * c->beta2 + c->one_minus_beta2 * (g * g);
    *m = mv;
    *v = vv;
    float s = vv;
    if (c->amsgrad) {
        s = *vmax > vv ? *vmax : vv;
        *vmax = s;
    }
    float denom = sqrtf(s) / c->bc2_sqrt + c->eps;
    *p = pv + c->neg_step_size * (mv / denom);
}

/* ---------------------------------------------------------------------
 * GradScaler: g * inv_scale and whether the result is finite. */

PHX_HD PHX_FI static inline int phx_isfinite(float x)
{
    return (phx_f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/* ---------------------------------------------------------------------
 * Losses, per element (the row reductions live in the kernels).
 * mse: term (y - t)^2, gradient 2 (y - t) * scale (scale 1 or 1/n).
 * cross entropy over a row x with m = max x, lse = m + log sum exp(x - m):
 *   loss = lse - x[label], d/dx_j = (exp(x_j - lse) - [j == label]) * scale
 * nll (log_probs given): loss = -x[label], d/dx_j = -[j == label] * scale. */

PHX_HD PHX_FI static inline float phx_mse_term(float y, float t)
{
    float d = y - t;
    return d * d;
}
PHX_HD PHX_FI static inline float phx_mse_grad(float y, float t, float scale)
{
    return 2.0f * (y - t) * scale;
}
PHX_HD PHX_FI static inline float phx_xent_grad(float x, float lse, int is_label, float scale)
{
    return (expf(x - lse) - (is_label ? 1.0f : 0.0f)) * scale;
}
PHX_HD PHX_FI static inline float phx_nll_grad(int is_label, float scale)
{
    return is_label ? -scale : 0.0f;
}
/* The same gradient from e = exp(x - m) kept from the sum pass. */
PHX_HD PHX_FI static inline float phx_softmax_grad(float e, float inv_sum, int is_label, float scale)
{
    return (e * inv_sum - (is_label ? 1.0f : 0.0f)) * scale;
}

/* ---------------------------------------------------------------------
 * LayerNorm (PyTorch: biased variance, eps inside the sqrt), per element:
 *   xhat = (x - mean) rstd, rstd = 1/sqrt(var + eps), y = xhat w + b
 * backward with g = dy w, over a row of n:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)) */

PHX_HD PHX_FI static inline float phx_ln_rstd(float var, float eps)
{
    return 1.0f / sqrtf(var + eps);
}
PHX_HD PHX_FI static inline float phx_ln_dx(float g, float xhat, float rstd, float mean_g, float mean_gx)
{
    return rstd * (g - mean_g - xhat * mean_gx);
}

/* ---------------------------------------------------------------------
 * BatchNorm (PyTorch: biased variance for normalising, eps inside the
 * sqrt), per element of channel c over the n * hw values of a batch:
 *   istd = 1/sqrt(var + eps), y = (x - mean) istd w + b
 * backward with batch statistics (count values, all ranks' for
 * SyncBatchNorm), mean_dy = sum_dy / count, mean_dy_xmu =
 * sum dy (x - mean) / count, scale = istd w:
 *   dx = (dy - mean_dy - (x - mean) istd^2 mean_dy_xmu) scale
 * and with fixed statistics (eval) dx = dy scale. The CPU
 * (kernels/cpu) and CUDA (plugins/device/cuda/kernels/batchnorm.cu) kernels both use
 * these. */

PHX_HD PHX_FI static inline float phx_bn_invstd(float var, float eps)
{
    return 1.0f / sqrtf(var + eps);
}
PHX_HD PHX_FI static inline float phx_bn_apply(float x, float mean, float istd, float w, float b)
{
    return (x - mean) * istd * w + b;
}
PHX_HD PHX_FI static inline float phx_bn_dx(float dy, float xmu, float istd, float mean_dy, float mean_dy_xmu,
                                            float scale)
{
    return (dy - mean_dy - xmu * (istd * istd * mean_dy_xmu)) * scale;
}

#endif
