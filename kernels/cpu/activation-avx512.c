/* AVX-512F activations on f32, 16 lanes at a time with FMA: gelu (erf and
 * tanh forms), tanh and sigmoid, forward and backward. The polynomials are
 * kernels/math.h's (Cephes); what differs: one exp of -u^2 split by FMA
 * (not two), vscalefps for 2^n, gelu_tanh as x sigmoid(2 inner) (no
 * cancellation in 1 + tanh), and erf's tail evaluated only for vectors
 * holding a lane with |u| >= 1 (gelu's forward packs those lanes). Results
 * are within a few ulp of math.h's;
 * t/tensor/isa checks both against float64. */
#include "config.h"
#include "kernels/cpu/cpu.h"

#if PX_HAVE_X86
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,fma")))
#define VI static inline __attribute__((always_inline)) TARGET

#define C(v) _mm512_set1_ps(v)

/* exp(x) from x = n ln2 + r: r's polynomial (Horner to the end), then
 * y 2^n rounded once by vscalefps (subnormal results and overflow to inf
 * for any n) */
VI __m512 exp_core(__m512 n, __m512 r)
{
    __m512 p = C(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, C(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, C(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, C(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, C(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, C(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, r, C(1.0f));
    return _mm512_scalef_ps(_mm512_fmadd_ps(p, r, C(1.0f)), n);
}

#define ROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* as phx_expf: beyond [-104, 89] the result is 0 or inf (the clamp keeps
 * inf - inf out of the reduction), NaN stays NaN */
VI __m512 vexp(__m512 x)
{
    __m512 xc = _mm512_max_ps(C(-104.0f), _mm512_min_ps(C(89.0f), x)); /* NaN is the second operand: kept */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, C(1.44269504088896341f)), ROUND);
    __m512 r = _mm512_fnmadd_ps(n, C(0.693359375f), xc); /* Cody-Waite, as math.h */
    return exp_core(n, _mm512_fnmadd_ps(n, C(-2.12194440e-4f), r));
}

/* exp(-u^2) for 0 <= u <= 10.5 (or NaN), u^2 = hi + lo exactly (so the
 * error does not grow with u); no clamp needed */
VI __m512 exp_neg_sq(__m512 u)
{
    __m512 hi = _mm512_mul_ps(u, u);
    __m512 lo = _mm512_fmsub_ps(u, u, hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(hi, C(-1.44269504088896341f)), ROUND);
    __m512 r = _mm512_fnmsub_ps(n, C(0.693359375f), hi); /* -hi - n ln2 */
    r = _mm512_fnmadd_ps(n, C(-2.12194440e-4f), r);
    return exp_core(n, _mm512_sub_ps(r, lo));
}

/* 1 + erf(u) for |u| < 1 */
VI __m512 erf1p_small(__m512 u)
{
    __m512 z = _mm512_mul_ps(u, u);
    __m512 p = C(7.853861353153693e-5f);
    p = _mm512_fmadd_ps(p, z, C(-8.010193625184903e-4f));
    p = _mm512_fmadd_ps(p, z, C(5.188327685732524e-3f));
    p = _mm512_fmadd_ps(p, z, C(-2.685381193529856e-2f));
    p = _mm512_fmadd_ps(p, z, C(1.128358514861418e-1f));
    p = _mm512_fmadd_ps(p, z, C(-3.761262582423300e-1f));
    p = _mm512_fmadd_ps(p, z, C(1.128379165726710e0f));
    return _mm512_fmadd_ps(u, p, C(1.0f));
}

/* erfc's asymptotic polynomials in y = 1/x^2 (Cephes erfcf) */
VI __m512 erfc_p1(__m512 y) /* 1 <= x < 2 */
{
    __m512 p = C(2.326819970068386e-2f);
    p = _mm512_fmadd_ps(p, y, C(-1.387039388740657e-1f));
    p = _mm512_fmadd_ps(p, y, C(3.687424674597105e-1f));
    p = _mm512_fmadd_ps(p, y, C(-5.824733027278666e-1f));
    p = _mm512_fmadd_ps(p, y, C(6.210004621745983e-1f));
    p = _mm512_fmadd_ps(p, y, C(-4.944515323274145e-1f));
    p = _mm512_fmadd_ps(p, y, C(3.404879937665872e-1f));
    p = _mm512_fmadd_ps(p, y, C(-2.741127028184656e-1f));
    return _mm512_fmadd_ps(p, y, C(5.638259427386472e-1f));
}

VI __m512 erfc_p2(__m512 y) /* x >= 2 */
{
    __m512 p = C(-1.047766399936249e1f);
    p = _mm512_fmadd_ps(p, y, C(1.297719955372516e1f));
    p = _mm512_fmadd_ps(p, y, C(-7.495518717768503e0f));
    p = _mm512_fmadd_ps(p, y, C(2.921019019210786e0f));
    p = _mm512_fmadd_ps(p, y, C(-1.015265279202700e0f));
    p = _mm512_fmadd_ps(p, y, C(4.218463358204948e-1f));
    p = _mm512_fmadd_ps(p, y, C(-2.820767439740514e-1f));
    return _mm512_fmadd_ps(p, y, C(5.641895067754075e-1f));
}

/* 1 + erf(u) for |u| >= 1 (lanes not in `in`) from xc = min(|u|, 10.5)
 * (erfc(10.5) < 2^-150) and e = exp(-xc^2): 2 - erfc(u) or erfc(-u);
 * each polynomial only when a lane needs it (|u| >= 2 is rare in
 * activations) */
VI __m512 erf1p_tail(__m512 u, __m512 xc, __m512 e, __mmask16 in)
{
    __m512 x = _mm512_max_ps(C(1.0f), xc);
    __m512 q = _mm512_rcp14_ps(x); /* 2^-14, one Newton step: 2^-28 */
    q = _mm512_mul_ps(q, _mm512_fnmadd_ps(x, q, C(2.0f)));
    __m512 y = _mm512_mul_ps(q, q);
    __mmask16 lo = _mm512_cmp_ps_mask(x, C(2.0f), _CMP_LT_OQ);
    __mmask16 need = (__mmask16)~in;
    __m512 p;
    if (!(need & (__mmask16)~lo))
        p = erfc_p1(y);
    else if (!(need & lo))
        p = erfc_p2(y);
    else
        p = _mm512_mask_blend_ps(lo, erfc_p2(y), erfc_p1(y));
    __m512 erfc = _mm512_mul_ps(_mm512_mul_ps(e, q), p);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_GT_OQ), erfc,
                                _mm512_sub_ps(C(2.0f), erfc));
}

/* min(|u|, 10.5), NaN kept */
VI __m512 erf_xc(__m512 u)
{
    return _mm512_min_ps(C(10.5f), _mm512_abs_ps(u));
}

/* 1 + erf(u); e = exp(-xc^2) when the caller has it, else computed here
 * only for a vector with a lane outside (-1, 1) */
VI __m512 erf1p(__m512 u, __m512 xc, const __m512 *e)
{
    __m512 small = erf1p_small(u);
    __mmask16 in = _mm512_cmp_ps_mask(xc, C(1.0f), _CMP_LT_OQ); /* NaN: not in */
    if (in == 0xffff) return small;
    __m512 big = erf1p_tail(u, xc, e ? *e : exp_neg_sq(xc), in);
    return _mm512_mask_blend_ps(in, big, small);
}

VI __m512 vtanh(__m512 x)
{
    __m512 ax = _mm512_abs_ps(x);
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = C(-5.70498872745e-3f);
    p = _mm512_fmadd_ps(p, z, C(2.06390887954e-2f));
    p = _mm512_fmadd_ps(p, z, C(-5.37397155531e-2f));
    p = _mm512_fmadd_ps(p, z, C(1.33314422036e-1f));
    p = _mm512_fmadd_ps(p, z, C(-3.33332819422e-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __mmask16 in = _mm512_cmp_ps_mask(ax, C(0.625f), _CMP_LT_OQ);
    if (in == 0xffff) return small;
    __m512 e = vexp(_mm512_add_ps(ax, ax));
    __m512 big = _mm512_sub_ps(C(1.0f), _mm512_div_ps(C(2.0f), _mm512_add_ps(e, C(1.0f))));
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big), sign));
    return _mm512_mask_blend_ps(in, big, small);
}

/* exp(-2 beta (x + kappa x^3)): 1 / (1 + it) is (1 + tanh(inner)) / 2 */
VI __m512 gelu_tanh_e(__m512 x, __m512 x2)
{
    __m512 inner = _mm512_mul_ps(_mm512_mul_ps(x, C(PHX_GELU_BETA)), _mm512_fmadd_ps(C(PHX_GELU_KAPPA), x2, C(1.0f)));
    return vexp(_mm512_mul_ps(inner, C(-2.0f)));
}

VI __m512 fwd16(int act, __m512 x)
{
    switch (act) {
    case PHX_ACT_GELU: {
        __m512 u = _mm512_mul_ps(x, C(PHX_SQRT1_2));
        return _mm512_mul_ps(_mm512_mul_ps(x, C(0.5f)), erf1p(u, erf_xc(u), NULL));
    }
    case PHX_ACT_GELU_TANH: return _mm512_div_ps(x, _mm512_add_ps(C(1.0f), gelu_tanh_e(x, _mm512_mul_ps(x, x))));
    case PHX_ACT_TANH: return vtanh(x);
    default: return _mm512_div_ps(C(1.0f), _mm512_add_ps(C(1.0f), vexp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    }
}

/* dy * act'(x) (gelus) or dy * act'(y) (tanh, sigmoid), as math.h's formulas */
VI __m512 bwd16(int act, __m512 x, __m512 y, __m512 dy)
{
    switch (act) {
    case PHX_ACT_GELU: {
        __m512 u = _mm512_mul_ps(x, C(PHX_SQRT1_2)), xc = erf_xc(u);
        __m512 e = exp_neg_sq(xc); /* exp(-x^2 / 2): the pdf (0 beyond the clamp anyway), and erf's tail */
        __m512 cdf = _mm512_mul_ps(C(0.5f), erf1p(u, xc, &e));
        __m512 g = _mm512_fmadd_ps(x, _mm512_mul_ps(e, C(PHX_INV_SQRT_2PI)), cdf);
        return _mm512_mul_ps(dy, g);
    }
    case PHX_ACT_GELU_TANH: {
        /* s = (1 + t) / 2, 1 - t^2 = 4 s (1 - s) with 1 - s = e s:
         * grad = s (1 + (1 - s) 2 beta x (1 + 3 kappa x^2)) */
        __m512 x2 = _mm512_mul_ps(x, x);
        __m512 e = gelu_tanh_e(x, x2);
        __m512 s = _mm512_div_ps(C(1.0f), _mm512_add_ps(C(1.0f), e));
        __mmask16 einf = _mm512_cmp_ps_mask(e, C(INFINITY), _CMP_EQ_OQ);
        __m512 om = _mm512_mask_mov_ps(_mm512_mul_ps(e, s), einf, C(1.0f));
        __m512 k = _mm512_mul_ps(_mm512_mul_ps(x, C(2.0f * PHX_GELU_BETA)),
                                 _mm512_fmadd_ps(C(3.0f * PHX_GELU_KAPPA), x2, C(1.0f)));
        /* far right om is 0 and k may overflow: the term is 0 (at +inf
         * math.h gives NaN, inf * 0; so do we) */
        __m512 term = _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(om, _mm512_setzero_ps(), _CMP_NEQ_UQ), om, k);
        __m512 g = _mm512_mul_ps(s, _mm512_add_ps(C(1.0f), term));
        g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(x, C(INFINITY), _CMP_EQ_OQ), C(NAN));
        return _mm512_mul_ps(dy, g);
    }
    case PHX_ACT_TANH: return _mm512_mul_ps(dy, _mm512_sub_ps(C(1.0f), _mm512_mul_ps(y, y)));
    default: return _mm512_mul_ps(dy, _mm512_mul_ps(y, _mm512_sub_ps(C(1.0f), y)));
    }
}

VI void fwd_loop(int act, int64_t n, const float *x, float *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, fwd16(act, _mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, fwd16(act, _mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* gelu forward in two passes over blocks of GELU_BLOCK: the small
 * polynomial for every lane, the lanes with |u| >= 1 (about 1 in 6 for
 * normal data) packed 16 to a vector for erf's tail, results written
 * back by index; a vector with more than 6 such lanes computes its tail
 * at once. A vector then pays for the tail about once per 16 such lanes,
 * not once per vector holding one; each lane gets the same bits whatever
 * its neighbours. y may be x. */
#define GELU_BLOCK 1024
/* x is prefetched this many floats ahead (two blocks): on 4M normal
 * values (16 MiB, past L2) the forward ran 0.42-0.43 ns a value against
 * 0.46-0.47 without (0.43 with x in L2: the loads then hide behind the
 * arithmetic) */
#define GELU_PREFETCH 2048

VI void gelu_fwd_loop(int64_t n, const float *x, float *y)
{
    float tx[GELU_BLOCK + 16], ty[GELU_BLOCK + 16];
    int32_t ti[GELU_BLOCK + 16];
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t b = 0; b < n; b += GELU_BLOCK) {
        int m = n - b < GELU_BLOCK ? (int)(n - b) : GELU_BLOCK, k = 0;
        for (int i = 0; i < m; i += 16) {
            __mmask16 lm = i + 16 <= m ? (__mmask16)0xffff : (__mmask16)((1u << (m - i)) - 1u);
            _mm_prefetch((const char *)(x + b + i + GELU_PREFETCH), _MM_HINT_T0);
            __m512 xv = lm == 0xffff ? _mm512_loadu_ps(x + b + i) : _mm512_maskz_loadu_ps(lm, x + b + i);
            __m512 u = _mm512_mul_ps(xv, C(PHX_SQRT1_2)), xc = erf_xc(u);
            __mmask16 in = _mm512_cmp_ps_mask(xc, C(1.0f), _CMP_LT_OQ); /* NaN: not in */
            __mmask16 out = (__mmask16)(~in & lm);
            __m512 r = erf1p_small(u);
            int c = __builtin_popcount(out);
            if (c > 6) /* mostly tail lanes: as fwd16 */
                r = _mm512_mask_blend_ps(in, erf1p_tail(u, xc, exp_neg_sq(xc), in), r);
            __m512 yv = _mm512_mul_ps(_mm512_mul_ps(xv, C(0.5f)), r);
            if (lm == 0xffff)
                _mm512_storeu_ps(y + b + i, yv);
            else
                _mm512_mask_storeu_ps(y + b + i, lm, yv);
            if (c && c <= 6) {
                _mm512_storeu_ps(tx + k, _mm512_maskz_compress_ps(out, xv));
                _mm512_storeu_si512(ti + k,
                                    _mm512_maskz_compress_epi32(out, _mm512_add_epi32(_mm512_set1_epi32(i), iota)));
                k += c;
            }
        }
        for (int j = 0; j < k; j += 16) {
            __m512 xv = _mm512_loadu_ps(tx + j); /* lanes past k: stale, harmless, not written back */
            __m512 u = _mm512_mul_ps(xv, C(PHX_SQRT1_2)), xc = erf_xc(u);
            __m512 big = erf1p_tail(u, xc, exp_neg_sq(xc), 0);
            _mm512_storeu_ps(ty + j, _mm512_mul_ps(_mm512_mul_ps(xv, C(0.5f)), big));
        }
        for (int j = 0; j < k; j++) y[b + ti[j]] = ty[j];
    }
}

VI void bwd_loop(int act, int64_t n, const float *x, const float *y, const float *dy, float *dx)
{
    /* the gelus read x, tanh and sigmoid y; the other may be NULL */
    int rx = act == PHX_ACT_GELU || act == PHX_ACT_GELU_TANH;
    const float *in = rx ? x : y;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(in + i);
        _mm512_storeu_ps(dx + i, bwd16(act, v, v, _mm512_loadu_ps(dy + i)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, in + i);
        _mm512_mask_storeu_ps(dx + i, m, bwd16(act, v, v, _mm512_maskz_loadu_ps(m, dy + i)));
    }
}

/* act is a constant inside each loop */
#define EACH_ACT(act, CALL) \
    switch (act) { \
        PX_ACT_CASE(PHX_ACT_GELU, CALL) \
        PX_ACT_CASE(PHX_ACT_GELU_TANH, CALL) \
        PX_ACT_CASE(PHX_ACT_TANH, CALL) \
    default: { /* sigmoid: the only other kind this file serves */ \
        enum { ACT = PHX_ACT_SIGMOID }; \
        CALL; \
        break; \
    } \
    }

TARGET void px_avx512_act_forward(int act, int64_t n, const float *x, float *y)
{
    if (act == PHX_ACT_GELU)
        gelu_fwd_loop(n, x, y);
    else
        EACH_ACT(act, fwd_loop(ACT, n, x, y));
}

/* x where !(x <= 0), else +0: vmaxps would return its second operand for
 * a NaN and for -0, so a compare (unordered: true for NaN) and a
 * zero-masked move give phx_f_relu's bits. */
VI __m512 relu16(__m512 x)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NLE_UQ), x);
}

TARGET void px_avx512_relu_forward(int64_t n, const float *x, float *y, int stream)
{
    int64_t i = 0;
    if (stream) /* up to y's first 64-byte line, then whole lines */
        for (; i < n && ((uintptr_t)(y + i) & 63); i++) y[i] = phx_f_relu(x[i]);
    if (stream && !((uintptr_t)(y + i) & 63)) {
        for (; i + 16 <= n; i += 16) _mm512_stream_ps(y + i, relu16(_mm512_loadu_ps(x + i)));
        _mm_sfence(); /* ordered before whatever the caller publishes next */
    }
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, relu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, relu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

TARGET void px_avx512_act_backward(int act, int64_t n, const float *x, const float *y, const float *dy, float *dx)
{
    EACH_ACT(act, bwd_loop(ACT, n, x, y, dy, dx));
}

VI __m512 math16(int fn, __m512 v)
{
    return fn == 0 ? vexp(v) : fn == 1 ? vtanh(v) : erf1p(v, erf_xc(v), NULL);
}

TARGET void px_avx512_math(int fn, int64_t n, const float *in, float *out)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, math16(fn, _mm512_loadu_ps(in + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(out + i, m, math16(fn, _mm512_maskz_loadu_ps(m, in + i)));
    }
}
#endif
