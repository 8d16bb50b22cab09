/* 2-D max and average pooling on the CPU over NCHW planes (PyTorch's
 * MaxPool2d and AvgPool2d): each output reads the window
 *   iy = oy stride_h - pad_h + r dil_h, ix = ox stride_w - pad_w + s dil_w
 * and skips positions outside the input. Max keeps the flat index iy w +
 * ix of the first maximum (NaN wins) for its backward; average divides
 * by kh kw (count_include_pad, PyTorch clips that window to the padded
 * input) or by the positions inside the input. */
#include "config.h"
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#if PX_HAVE_X86
#include <immintrin.h>
#endif

static phx_status pool_check(const char *who, const phx_conv2d_desc *d, phx_dtype dt)
{
    if (!d) return phx_error(PHX_EINVAL, "%s: NULL descriptor", who);
    if (d->n < 0 || d->c < 1 || d->h < 1 || d->w < 1 || d->kh < 1 || d->kw < 1 || d->oh < 1 || d->ow < 1 ||
        d->stride_h < 1 || d->stride_w < 1 || d->pad_h < 0 || d->pad_w < 0 || d->dil_h < 1 || d->dil_w < 1)
        return phx_error(PHX_EINVAL,
                         "%s: input (%lld, %lld, %lld, %lld), window %lldx%lld, output %lldx%lld, stride %lld/%lld, "
                         "padding %lld/%lld, dilation %lld/%lld: expected positive sizes and padding >= 0",
                         who, (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->kh,
                         (long long)d->kw, (long long)d->oh, (long long)d->ow, (long long)d->stride_h,
                         (long long)d->stride_w, (long long)d->pad_h, (long long)d->pad_w, (long long)d->dil_h,
                         (long long)d->dil_w);
    if (!phx_dtype_is_float(dt))
        return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", who, phx_dtype_name(dt));
    return PHX_OK;
}

/* The position in its plane of window element (r, s) of output (oy, ox),
 * or -1 where it falls outside the input (padding). */
static inline int64_t window_at(const phx_conv2d_desc *d, int64_t oy, int64_t ox, int64_t r, int64_t s)
{
    int64_t iy = oy * d->stride_h - d->pad_h + r * d->dil_h, ix = ox * d->stride_w - d->pad_w + s * d->dil_w;
    return iy < 0 || iy >= d->h || ix < 0 || ix >= d->w ? -1 : iy * d->w + ix;
}

/* The max pooling loops run planes p0 .. p1 - 1 (parts of
 * px_cpu_parallel_for). */
PX_INLINE void px_maxpool(const phx_conv2d_desc *d, const void *x, void *y, int32_t *argmax, int dt, int64_t p0,
                          int64_t p1)
{
    int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t oy = 0; oy < d->oh; oy++)
            for (int64_t ox = 0; ox < d->ow; ox++) {
                float best = -INFINITY;
                int64_t at = -1;
                for (int64_t r = 0; r < d->kh; r++)
                    for (int64_t s = 0; s < d->kw; s++) {
                        int64_t i = window_at(d, oy, ox, r, s);
                        if (i < 0) continue;
                        float v = px_ld(x, dt, p * hw + i);
                        if (at < 0 || v > best || (isnan(v) && !isnan(best))) best = v, at = i;
                    }
                int64_t o = p * ohw + oy * d->ow + ox;
                px_st(y, dt, o, best);
                if (argmax) argmax[o] = (int32_t)at;
            }
}

/* 2x2 windows with stride 2 and no padding (the common case): the same
 * results as px_maxpool, without its bounds checks. */
PX_INLINE void px_maxpool_2x2(const phx_conv2d_desc *d, const void *x, void *y, int32_t *argmax, int dt, int64_t p0,
                              int64_t p1)
{
    int64_t hw = d->h * d->w, ohw = d->oh * d->ow, w = d->w;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t oy = 0; oy < d->oh; oy++) {
            int64_t r0 = p * hw + 2 * oy * w, o0 = p * ohw + oy * d->ow;
            for (int64_t ox = 0; ox < d->ow; ox++) {
                int64_t i = r0 + 2 * ox;
                float v0 = px_ld(x, dt, i), v1 = px_ld(x, dt, i + 1), v2 = px_ld(x, dt, i + w),
                      v3 = px_ld(x, dt, i + w + 1);
                /* the first maximum in window order; NaN wins (the first one) */
                float best = v0;
                int32_t at = 0;
                if (v1 > best || (v1 != v1 && best == best)) best = v1, at = 1;
                if (v2 > best || (v2 != v2 && best == best)) best = v2, at = 2;
                if (v3 > best || (v3 != v3 && best == best)) best = v3, at = 3;
                px_st(y, dt, o0 + ox, best);
                if (argmax) argmax[o0 + ox] = (int32_t)(i - p * hw) + (at & 1) + (at >> 1) * (int32_t)w;
            }
        }
}

typedef struct pool_job {
    const phx_conv2d_desc *d;
    const void *x, *dy;
    void *y, *dx;
    int32_t *argmax;
    int dt, fast;
} pool_job;

/* The f16/bf16 planes where px_cpu_half_chunk says the cast kernel
 * converts with the conversion instructions (elsewhere the
 * element-by-element px_ld/px_st loops, which t/precision/half_nn checks
 * these against bit for bit): max pooling and its disjoint windows'
 * gradient on the 16-bit values (below); the rest widens each plane into
 * the worker's scratch (slots 0 and 1, allocated first by the calling
 * thread), runs the f32 loop on it and rounds the result back. */
static int pool_half(int dt)
{
    return dt != PHX_F32 && px_cpu_half_chunk((phx_dtype)dt, 1);
}

/* f16/bf16 max pooling straight on the 16-bit values, no widened copies:
 * a max is one of its inputs, so y is the winner's bits, which the f32
 * loops on widened values give too (f16 -> f32 -> f16 and bf16 -> f32 ->
 * bf16 return every pattern unchanged, kernels/math.h). Each value's key
 * (half_key) orders numbers as IEEE does (-0 and +0 equal) and puts every
 * NaN above them, equal to each other: the first strictly greater key
 * wins, which is the f32 loops' `v > best || (isnan(v) && !isnan(best))`
 * (the first NaN wins), with the same argmax. (Subnormals compare as
 * numbers: a caller that sets the CPU's denormals-are-zero flag gets that
 * flag's order in the f32 loops only.) inf: the magnitude bits of inf. */
static inline int32_t half_key(uint16_t v, int32_t inf)
{
    int32_t m = v & 0x7fff, k = v & 0x8000 ? 0x8000 - m : 0x8000 + m;
    return m > inf ? 0x10000 : k;
}

#if PX_HAVE_X86
/* The 2x2 stride-2 windows of output row oy, 16 at a time: a 32-bit lane
 * holds a window row's two values (even column low); the keys of
 * half_key in 32-bit lanes, the same first-greatest choice. */
__attribute__((target("avx512f"))) static void
maxpool_half_row_512(const phx_conv2d_desc *d, int32_t inf, const uint16_t *x, uint16_t *y, int32_t *am, int64_t oy)
{
    const int64_t w = d->w, ow = d->ow;
    const uint16_t *r0 = x + 2 * oy * w, *r1 = r0 + w;
    const __m512i lo16 = _mm512_set1_epi32(0xffff), mag = _mm512_set1_epi32(0x7fff), zero = _mm512_set1_epi32(0x8000);
    const __m512i vinf = _mm512_set1_epi32(inf), nan = _mm512_set1_epi32(0x10000), one = _mm512_set1_epi32(1);
    const __m512i vw = _mm512_set1_epi32((int32_t)w);
    const __m512i cols = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t ox = 0; ox < ow; ox += 16) {
        int64_t k = ow - ox < 16 ? ow - ox : 16;
        __mmask16 lanes = k == 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1);
        __m512i a = _mm512_maskz_loadu_epi32(lanes, r0 + 2 * ox), b = _mm512_maskz_loadu_epi32(lanes, r1 + 2 * ox);
        __m512i v[4] = {_mm512_and_si512(a, lo16), _mm512_srli_epi32(a, 16), _mm512_and_si512(b, lo16),
                        _mm512_srli_epi32(b, 16)};
        __m512i key[4];
        for (int t = 0; t < 4; t++) {
            __m512i m = _mm512_and_si512(v[t], mag);
            __mmask16 neg = _mm512_test_epi32_mask(v[t], zero);
            __m512i kk = _mm512_mask_sub_epi32(_mm512_add_epi32(zero, m), neg, zero, m);
            key[t] = _mm512_mask_mov_epi32(kk, _mm512_cmpgt_epi32_mask(m, vinf), nan);
        }
        __m512i bk = key[0], bv = v[0], col = _mm512_setzero_si512(), row = _mm512_setzero_si512();
        for (int t = 1; t < 4; t++) {
            __mmask16 g = _mm512_cmpgt_epi32_mask(key[t], bk);
            bk = _mm512_mask_mov_epi32(bk, g, key[t]);
            bv = _mm512_mask_mov_epi32(bv, g, v[t]);
            col = _mm512_mask_mov_epi32(col, g, (t & 1) ? one : _mm512_setzero_si512());
            row = _mm512_mask_mov_epi32(row, g, (t >> 1) ? vw : _mm512_setzero_si512());
        }
        __m256i h = _mm512_cvtepi32_epi16(bv);
        if (k == 16)
            _mm256_storeu_si256((__m256i *)(y + oy * ow + ox), h);
        else {
            uint16_t t16[16];
            _mm256_storeu_si256((__m256i *)t16, h);
            memcpy(y + oy * ow + ox, t16, (size_t)k * 2);
        }
        if (am) {
            __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oy * w + 2 * ox)), cols);
            at = _mm512_add_epi32(at, _mm512_add_epi32(col, row));
            _mm512_mask_storeu_epi32(am + oy * ow + ox, lanes, at);
        }
    }
}
#endif

PX_CLONES static void maxpool_half_plane(const phx_conv2d_desc *d, int32_t inf, int fast, const uint16_t *x,
                                         uint16_t *y, int32_t *am)
{
    const int64_t w = d->w;
#if PX_HAVE_X86
    if (fast && px_cpu_isa() >= PX_ISA_AVX512) {
        for (int64_t oy = 0; oy < d->oh; oy++) maxpool_half_row_512(d, inf, x, y, am, oy);
        return;
    }
#endif
    if (fast) /* 2x2, stride 2, no padding: the window lies inside */
        for (int64_t oy = 0; oy < d->oh; oy++) {
            const uint16_t *r0 = x + 2 * oy * w, *r1 = r0 + w;
            for (int64_t ox = 0; ox < d->ow; ox++) {
                uint16_t v[4] = {r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
                int32_t bk = half_key(v[0], inf), at = 0;
                for (int t = 1; t < 4; t++) {
                    int32_t k = half_key(v[t], inf);
                    at = k > bk ? t : at;
                    bk = k > bk ? k : bk;
                }
                y[oy * d->ow + ox] = v[at];
                if (am) am[oy * d->ow + ox] = (int32_t)(2 * oy * w + 2 * ox) + (at & 1) + (at >> 1) * (int32_t)w;
            }
        }
    else
        for (int64_t oy = 0; oy < d->oh; oy++)
            for (int64_t ox = 0; ox < d->ow; ox++) {
                int32_t bk = -1; /* below every key */
                int64_t at = -1;
                for (int64_t r = 0; r < d->kh; r++)
                    for (int64_t s = 0; s < d->kw; s++) {
                        int64_t i = window_at(d, oy, ox, r, s);
                        if (i < 0) continue;
                        int32_t k = half_key(x[i], inf);
                        if (k > bk) bk = k, at = i;
                    }
                /* an empty window (all padding): -inf, as the f32 loop's */
                y[oy * d->ow + ox] = at >= 0 ? x[at] : (uint16_t)(0x8000 | inf);
                if (am) am[oy * d->ow + ox] = (int32_t)at;
            }
}

static void maxpool_half(const pool_job *j, int64_t lo, int64_t hi)
{
    const phx_conv2d_desc *d = j->d;
    int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
    int32_t inf = j->dt == PHX_BF16 ? 0x7f80 : 0x7c00;
    for (int64_t p = lo; p < hi; p++)
        maxpool_half_plane(d, inf, j->fast, (const uint16_t *)j->x + p * hw, (uint16_t *)j->y + p * ohw,
                           j->argmax ? j->argmax + p * ohw : NULL);
}

PX_CLONES static void maxpool_part(void *arg, int64_t lo, int64_t hi)
{
    pool_job *j = arg;
    if (pool_half(j->dt)) {
        maxpool_half(j, lo, hi);
        return;
    }
    if (j->fast)
        PX_FLOAT_CALL(j->dt, px_maxpool_2x2(j->d, j->x, j->y, j->argmax, DT, lo, hi));
    else
        PX_FLOAT_CALL(j->dt, px_maxpool(j->d, j->x, j->y, j->argmax, DT, lo, hi));
}

phx_status px_cpu_maxpool2d_forward(int dev, const phx_conv2d_desc *d, const void *x, void *y, int32_t *argmax,
                                    phx_dtype dt)
{
    (void)dev;
    phx_status st = pool_check("maxpool2d_forward", d, dt);
    if (st != PHX_OK) return st;
    if (d->h * d->w > INT32_MAX)
        return phx_error(PHX_EUNSUPPORTED, "maxpool2d_forward: a %lldx%lld plane does not fit int32 indices",
                         (long long)d->h, (long long)d->w);
    bool fast = d->kh == 2 && d->kw == 2 && d->stride_h == 2 && d->stride_w == 2 && d->pad_h == 0 && d->pad_w == 0 &&
        d->dil_h == 1 && d->dil_w == 1 && 2 * d->oh <= d->h && 2 * d->ow <= d->w;
    pool_job j = {.d = d, .x = x, .y = y, .argmax = argmax, .dt = dt, .fast = fast};
    px_cpu_parallel_for(d->n * d->c, 4, maxpool_part, &j);
    return PHX_OK;
}

/* dx of one plane p: f32 sums in acc (windows may overlap), then stored */
PX_INLINE void px_maxpool_bwd(int64_t hw, int64_t ohw, int64_t p, const int32_t *argmax, const void *dy, float *acc,
                              void *dx, int dt)
{
    memset(acc, 0, (size_t)hw * sizeof(float));
    const int32_t *am = argmax + p * ohw;
    for (int64_t o = 0; o < ohw; o++)
        if (am[o] >= 0) acc[am[o]] += px_ld(dy, dt, p * ohw + o);
    for (int64_t i = 0; i < hw; i++) px_st(dx, dt, p * hw + i, acc[i]);
}

/* Windows that do not overlap (stride >= kernel): each input position
 * gets at most one dy, so dx is zeroed and written in one pass. */
PX_INLINE void px_maxpool_bwd_disjoint(int64_t hw, int64_t ohw, int64_t p, const int32_t *argmax, const void *dy,
                                       void *dx, int dt)
{
    const int32_t *am = argmax + p * ohw;
    if (dt == PHX_F32)
        memset((float *)dx + p * hw, 0, (size_t)hw * sizeof(float));
    else
        for (int64_t i = 0; i < hw; i++) px_st(dx, dt, p * hw + i, 0.0f);
    for (int64_t o = 0; o < ohw; o++)
        if (am[o] >= 0) px_st(dx, dt, p * hw + am[o], px_ld(dy, dt, p * ohw + o));
}

/* dx of planes lo .. hi - 1 in f16/bf16. Disjoint windows (fast): each
 * position gets at most one dy, copied as it is (a widened value rounds
 * back to its own bits) into a zeroed plane (+0 in both formats). Else
 * dy's plane widened (slot 1), dx's summed in f32 (slot 0), rounded once */
PX_CLONES static void maxpool_bwd_half(const pool_job *j, int64_t lo, int64_t hi)
{
    int64_t hw = j->d->h * j->d->w, ohw = j->d->oh * j->d->ow;
    if (j->fast) {
        for (int64_t p = lo; p < hi; p++) {
            const int32_t *am = j->argmax + p * ohw;
            const uint16_t *g = (const uint16_t *)j->dy + p * ohw;
            uint16_t *dx = (uint16_t *)j->dx + p * hw;
            memset(dx, 0, (size_t)hw * 2);
            for (int64_t o = 0; o < ohw; o++)
                if (am[o] >= 0) dx[am[o]] = g[o];
        }
        return;
    }
    float *acc = px_cpu_scratch(0, (size_t)hw * sizeof(float)), *g = px_cpu_scratch(1, (size_t)ohw * sizeof(float));
    for (int64_t p = lo; p < hi && acc && g; p++) {
        const int32_t *am = j->argmax + p * ohw;
        px_cpu_half_cast_here(g, PHX_F32, (const uint16_t *)j->dy + p * ohw, (phx_dtype)j->dt, ohw);
        memset(acc, 0, (size_t)hw * sizeof(float));
        for (int64_t o = 0; o < ohw; o++)
            if (am[o] >= 0) acc[am[o]] += g[o];
        px_cpu_half_cast_here((uint16_t *)j->dx + p * hw, (phx_dtype)j->dt, acc, PHX_F32, hw);
    }
}

PX_CLONES static void maxpool_bwd_part(void *arg, int64_t lo, int64_t hi)
{
    pool_job *j = arg;
    int64_t hw = j->d->h * j->d->w, ohw = j->d->oh * j->d->ow;
    if (pool_half(j->dt)) {
        maxpool_bwd_half(j, lo, hi);
        return;
    }
    if (j->fast) {
        for (int64_t p = lo; p < hi; p++)
            PX_FLOAT_CALL(j->dt, px_maxpool_bwd_disjoint(hw, ohw, p, j->argmax, j->dy, j->dx, DT));
        return;
    }
    float *acc = px_cpu_scratch(0, (size_t)hw * sizeof(float)); /* this worker's own */
    for (int64_t p = lo; p < hi && acc; p++)
        PX_FLOAT_CALL(j->dt, px_maxpool_bwd(hw, ohw, p, j->argmax, j->dy, acc, j->dx, DT));
}

phx_status px_cpu_maxpool2d_backward(int dev, const phx_conv2d_desc *d, const int32_t *argmax, const void *dy, void *dx,
                                     phx_dtype dt)
{
    (void)dev;
    phx_status st = pool_check("maxpool2d_backward", d, dt);
    if (st != PHX_OK) return st;
    if (!argmax) return phx_error(PHX_EINVAL, "maxpool2d_backward: argmax is NULL, expected the forward's indices");
    if (!px_cpu_scratch(0, (size_t)(d->h * d->w) * sizeof(float)) ||
        (pool_half(dt) && !px_cpu_scratch(1, (size_t)(d->oh * d->ow) * sizeof(float))))
        return PHX_ENOMEM;
    bool disjoint = d->stride_h >= (d->kh - 1) * d->dil_h + 1 && d->stride_w >= (d->kw - 1) * d->dil_w + 1;
    pool_job j = {.d = d, .dy = dy, .dx = dx, .argmax = (int32_t *)argmax, .dt = dt, .fast = disjoint};
    px_cpu_parallel_for(d->n * d->c, 4, maxpool_bwd_part, &j);
    return PHX_OK;
}

/* The window of output (oy, ox) clipped to the input: rows r0..r1-1 and
 * columns s0..s1-1 of the kernel (dilation 1 for average pooling), and
 * the divisor. */
typedef struct avg_win {
    int64_t y0, y1, x0, x1; /* input rows/columns covered */
    float inv; /* 1 / divisor */
} avg_win;

static avg_win avg_window(const phx_conv2d_desc *d, int count_include_pad, int64_t oy, int64_t ox)
{
    avg_win a;
    int64_t ys = oy * d->stride_h - d->pad_h, xs = ox * d->stride_w - d->pad_w;
    int64_t ye = ys + d->kh, xe = xs + d->kw;
    /* PyTorch: with padding counted, the window is clipped to the padded
     * input (h + pad_h), not to the kernel */
    int64_t pye = ye < d->h + d->pad_h ? ye : d->h + d->pad_h, pxe = xe < d->w + d->pad_w ? xe : d->w + d->pad_w;
    int64_t pool = (pye - ys) * (pxe - xs);
    a.y0 = ys > 0 ? ys : 0, a.x0 = xs > 0 ? xs : 0;
    a.y1 = ye < d->h ? ye : d->h, a.x1 = xe < d->w ? xe : d->w;
    int64_t inside = (a.y1 > a.y0 ? a.y1 - a.y0 : 0) * (a.x1 > a.x0 ? a.x1 - a.x0 : 0);
    int64_t div = count_include_pad ? pool : inside;
    a.inv = div > 0 ? 1.0f / (float)div : 0.0f;
    return a;
}

PX_INLINE void px_avgpool(const phx_conv2d_desc *d, int cip, const void *x, void *y, int dt)
{
    int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
    for (int64_t oy = 0; oy < d->oh; oy++)
        for (int64_t ox = 0; ox < d->ow; ox++) {
            avg_win a = avg_window(d, cip, oy, ox);
            for (int64_t p = 0; p < d->n * d->c; p++) {
                float s = 0.0f;
                for (int64_t iy = a.y0; iy < a.y1; iy++)
                    for (int64_t ix = a.x0; ix < a.x1; ix++) s += px_ld(x, dt, p * hw + iy * d->w + ix);
                px_st(y, dt, p * ohw + oy * d->ow + ox, s * a.inv);
            }
        }
}

/* the f32 loops of the f16/bf16 average pooling (compiled as the others) */
PX_CLONES static void avgpool_f32(const phx_conv2d_desc *d, int cip, const float *x, float *y)
{
    px_avgpool(d, cip, x, y, PHX_F32);
}

static phx_status avg_check(const char *who, const phx_conv2d_desc *d, phx_dtype dt)
{
    phx_status st = pool_check(who, d, dt);
    if (st == PHX_OK && (d->dil_h != 1 || d->dil_w != 1))
        return phx_error(PHX_EINVAL, "%s: dilation %lld/%lld, average pooling has none (expected 1)", who,
                         (long long)d->dil_h, (long long)d->dil_w);
    return st;
}

phx_status px_cpu_avgpool2d_forward(int dev, const phx_conv2d_desc *d, int count_include_pad, const void *x, void *y,
                                    phx_dtype dt)
{
    (void)dev;
    phx_status st = avg_check("avgpool2d_forward", d, dt);
    if (st != PHX_OK) return st;
    if (pool_half(dt)) { /* widened whole (slot 1), the f32 loop into slot 2, rounded once */
        int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->c * d->oh * d->ow;
        float *xs = px_cpu_scratch(1, (size_t)(nx > 0 ? nx : 1) * sizeof(float));
        float *ys = px_cpu_scratch(2, (size_t)(ny > 0 ? ny : 1) * sizeof(float));
        if (!xs || !ys) return PHX_ENOMEM;
        if ((st = px_cpu_half_cast_here(xs, PHX_F32, x, dt, nx)) != PHX_OK) return st;
        avgpool_f32(d, count_include_pad, xs, ys);
        return px_cpu_half_cast_here(y, dt, ys, PHX_F32, ny);
    }
    PX_FLOAT_DISPATCH("avgpool2d_forward", dt, px_avgpool(d, count_include_pad, x, y, DT));
    return PHX_OK;
}

PX_INLINE void px_avgpool_bwd(const phx_conv2d_desc *d, int cip, const void *dy, float *acc, void *dx, int dt)
{
    int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
    for (int64_t p = 0; p < d->n * d->c; p++) {
        memset(acc, 0, (size_t)hw * sizeof(float));
        for (int64_t oy = 0; oy < d->oh; oy++)
            for (int64_t ox = 0; ox < d->ow; ox++) {
                avg_win a = avg_window(d, cip, oy, ox);
                float g = px_ld(dy, dt, p * ohw + oy * d->ow + ox) * a.inv;
                for (int64_t iy = a.y0; iy < a.y1; iy++)
                    for (int64_t ix = a.x0; ix < a.x1; ix++) acc[iy * d->w + ix] += g;
            }
        for (int64_t i = 0; i < hw; i++) px_st(dx, dt, p * hw + i, acc[i]);
    }
}

PX_CLONES static void avgpool_bwd_f32(const phx_conv2d_desc *d, int cip, const float *dy, float *acc, float *dx)
{
    px_avgpool_bwd(d, cip, dy, acc, dx, PHX_F32);
}

phx_status px_cpu_avgpool2d_backward(int dev, const phx_conv2d_desc *d, int count_include_pad, const void *dy, void *dx,
                                     phx_dtype dt)
{
    (void)dev;
    phx_status st = avg_check("avgpool2d_backward", d, dt);
    if (st != PHX_OK) return st;
    float *acc = px_cpu_scratch(0, (size_t)(d->h * d->w) * sizeof(float));
    if (!acc) return PHX_ENOMEM;
    if (pool_half(dt)) { /* dy widened whole (slot 1), dx in f32 (slot 2), rounded once */
        int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->c * d->oh * d->ow;
        float *gs = px_cpu_scratch(1, (size_t)(ny > 0 ? ny : 1) * sizeof(float));
        float *xs = px_cpu_scratch(2, (size_t)(nx > 0 ? nx : 1) * sizeof(float));
        if (!gs || !xs) return PHX_ENOMEM;
        if ((st = px_cpu_half_cast_here(gs, PHX_F32, dy, dt, ny)) != PHX_OK) return st;
        avgpool_bwd_f32(d, count_include_pad, gs, acc, xs);
        return px_cpu_half_cast_here(dx, dt, xs, PHX_F32, nx);
    }
    PX_FLOAT_DISPATCH("avgpool2d_backward", dt, px_avgpool_bwd(d, count_include_pad, dy, acc, dx, DT));
    return PHX_OK;
}
