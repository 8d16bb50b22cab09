/* BatchNorm on the CPU over x (n, c, hw), per channel, in the four steps
 * SyncBatchNorm needs between its collectives (PyTorch's algorithm):
 *   stats:          mean, biased var (two passes; each plane summed in 16
 *                   lanes, the planes in f64)
 *   apply:          y = (x - mean) istd w + b, istd = 1/sqrt(var + eps)
 *   backward_reduce sum_dy, sum_dy_xmu = sum dy (x - mean); dw += sum_dy_xmu istd, db += sum_dy
 *   backward_apply  dx = (dy - sum_dy/N - (x - mean) istd^2 sum_dy_xmu/N) istd w */
#include "config.h"
#include "kernels/cpu/cpu.h"

static phx_status bn_check(const char *who, int64_t n, int64_t c, int64_t hw, phx_dtype dt)
{
    if (n < 0 || c < 1 || hw < 1)
        return phx_error(PHX_EINVAL, "%s: shape (%lld, %lld, %lld), expected n >= 0, channels and plane >= 1", who,
                         (long long)n, (long long)c, (long long)hw);
    if (!phx_dtype_is_float(dt))
        return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", who, phx_dtype_name(dt));
    return PHX_OK;
}

/* Each loop below runs channels c0 .. c1 - 1 (a part of px_cpu_parallel_for). */
typedef struct bn_job {
    int64_t n, c, hw;
    const void *x, *dy;
    int dt;
    const float *mean, *var, *w, *b, *sum_dy_in, *sum_dy_xmu_in;
    float eps;
    double count;
    float *mean_out, *var_out, *sum_dy, *sum_dy_xmu, *dw, *db;
    void *y;
} bn_job;

/* A plane's sums in PX_BN_LANES lanes: lane k adds the elements k,
 * k + PX_BN_LANES, ... of the plane, then the lanes are added pairwise.
 * The order is fixed by the plane alone (the same on every rank, thread
 * count and ISA), and the independent lanes let the compiler vectorise
 * what one running sum would serialise on the add latency (4-8x slower). */
#define PX_BN_LANES 16

/* The lanes folded pairwise into lane 0. */
PX_INLINE float px_bn_fold(float *l)
{
    for (int w = PX_BN_LANES / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++) l[k] += l[k + w];
    return l[0];
}

/* sum x[o + i], i < len. */
PX_INLINE float px_bn_sum(const void *x, int dt, int64_t o, int64_t len)
{
    float l[PX_BN_LANES] = {0};
    int64_t i = 0;
    for (; i + PX_BN_LANES <= len; i += PX_BN_LANES)
        for (int k = 0; k < PX_BN_LANES; k++) l[k] += px_ld(x, dt, o + i + k);
    for (int k = 0; i + k < len; k++) l[k] += px_ld(x, dt, o + i + k);
    return px_bn_fold(l);
}

/* sum (x[o + i] - m)^2, i < len. */
PX_INLINE float px_bn_sumsq(const void *x, int dt, int64_t o, int64_t len, float m)
{
    float l[PX_BN_LANES] = {0};
    int64_t i = 0;
    for (; i + PX_BN_LANES <= len; i += PX_BN_LANES)
        for (int k = 0; k < PX_BN_LANES; k++) {
            float dv = px_ld(x, dt, o + i + k) - m;
            l[k] += dv * dv;
        }
    for (int k = 0; i + k < len; k++) {
        float dv = px_ld(x, dt, o + i + k) - m;
        l[k] += dv * dv;
    }
    return px_bn_fold(l);
}

/* *sg = sum dy[o + i], *sgx = sum dy[o + i] (x[o + i] - m), i < len. */
PX_INLINE void px_bn_sum2(const void *x, const void *dy, int dt, int64_t o, int64_t len, float m, float *sg, float *sgx)
{
    float a[PX_BN_LANES] = {0}, ax[PX_BN_LANES] = {0};
    int64_t i = 0;
    for (; i + PX_BN_LANES <= len; i += PX_BN_LANES)
        for (int k = 0; k < PX_BN_LANES; k++) {
            float g = px_ld(dy, dt, o + i + k);
            a[k] += g;
            ax[k] += g * (px_ld(x, dt, o + i + k) - m);
        }
    for (int k = 0; i + k < len; k++) {
        float g = px_ld(dy, dt, o + i + k);
        a[k] += g;
        ax[k] += g * (px_ld(x, dt, o + i + k) - m);
    }
    *sg = px_bn_fold(a);
    *sgx = px_bn_fold(ax);
}

/* The f16/bf16 loops (where px_cpu_half_chunk says the cast kernel
 * converts with the conversion instructions): each plane widened
 * PX_F16_BLOCK elements at a time on the stack, the f32 arithmetic of the
 * loops above in the same order (the blocks are whole multiples of the
 * lanes), results rounded back by the cast kernel: the same bits as
 * px_ld/px_st's element-by-element conversion, which does not vectorise. */
PX_INLINE void px_bn_widen(float *buf, const void *x, int dt, int64_t o, int64_t len)
{
    px_cpu_half_cast_here(buf, PHX_F32, (const uint16_t *)x + o, (phx_dtype)dt, len);
}

/* sum x[o + i] (sq: sum (x[o + i] - m)^2), i < len, in PX_BN_LANES lanes */
PX_INLINE float px_bn_sum_half(const void *x, int dt, int64_t o, int64_t len, float m, int sq)
{
    float l[PX_BN_LANES] = {0}, buf[PX_F16_BLOCK];
    for (int64_t b = 0; b < len; b += PX_F16_BLOCK) {
        int64_t k = len - b < PX_F16_BLOCK ? len - b : PX_F16_BLOCK, i = 0;
        px_bn_widen(buf, x, dt, o + b, k);
        if (sq)
            for (int64_t t = 0; t < k; t++) buf[t] -= m, buf[t] *= buf[t];
        for (; i + PX_BN_LANES <= k; i += PX_BN_LANES)
            for (int q = 0; q < PX_BN_LANES; q++) l[q] += buf[i + q];
        for (int q = 0; i + q < k; q++) l[q] += buf[i + q];
    }
    return px_bn_fold(l);
}

PX_CLONES static void px_bn_stats_half(const bn_job *j, int64_t c0, int64_t c1)
{
    double cnt = (double)(j->n * j->hw);
    for (int64_t ch = c0; ch < c1; ch++) {
        double s = 0.0;
        for (int64_t b = 0; b < j->n; b++) s += px_bn_sum_half(j->x, j->dt, (b * j->c + ch) * j->hw, j->hw, 0, 0);
        double m = cnt > 0 ? s / cnt : 0.0, q = 0.0;
        float mf = (float)m;
        for (int64_t b = 0; b < j->n; b++) q += px_bn_sum_half(j->x, j->dt, (b * j->c + ch) * j->hw, j->hw, mf, 1);
        j->mean_out[ch] = mf;
        j->var_out[ch] = cnt > 0 ? (float)(q / cnt) : 0.0f;
    }
}

PX_CLONES static void px_bn_apply_half(const bn_job *j, int64_t c0, int64_t c1)
{
    float buf[PX_F16_BLOCK];
    for (int64_t ch = c0; ch < c1; ch++) {
        float istd = phx_bn_invstd(j->var[ch], j->eps), m = j->mean[ch];
        float wc = j->w ? j->w[ch] : 1.0f, bc = j->b ? j->b[ch] : 0.0f;
        for (int64_t i = 0; i < j->n; i++) {
            int64_t o = (i * j->c + ch) * j->hw;
            for (int64_t b = 0; b < j->hw; b += PX_F16_BLOCK) {
                int64_t k = j->hw - b < PX_F16_BLOCK ? j->hw - b : PX_F16_BLOCK;
                px_bn_widen(buf, j->x, j->dt, o + b, k);
                for (int64_t t = 0; t < k; t++) buf[t] = phx_bn_apply(buf[t], m, istd, wc, bc);
                px_cpu_half_cast_here((uint16_t *)j->y + o + b, (phx_dtype)j->dt, buf, PHX_F32, k);
            }
        }
    }
}

PX_CLONES static void px_bn_reduce_half(const bn_job *j, int64_t c0, int64_t c1)
{
    float g[PX_F16_BLOCK], xv[PX_F16_BLOCK];
    for (int64_t ch = c0; ch < c1; ch++) {
        double sd = 0.0, sdx = 0.0;
        float m = j->mean[ch];
        for (int64_t i = 0; i < j->n; i++) {
            int64_t o = (i * j->c + ch) * j->hw;
            float a[PX_BN_LANES] = {0}, ax[PX_BN_LANES] = {0};
            for (int64_t b = 0; b < j->hw; b += PX_F16_BLOCK) {
                int64_t k = j->hw - b < PX_F16_BLOCK ? j->hw - b : PX_F16_BLOCK, t = 0;
                px_bn_widen(g, j->dy, j->dt, o + b, k);
                px_bn_widen(xv, j->x, j->dt, o + b, k);
                for (int64_t e = 0; e < k; e++) xv[e] = g[e] * (xv[e] - m);
                for (; t + PX_BN_LANES <= k; t += PX_BN_LANES)
                    for (int q = 0; q < PX_BN_LANES; q++) a[q] += g[t + q], ax[q] += xv[t + q];
                for (int q = 0; t + q < k; q++) a[q] += g[t + q], ax[q] += xv[t + q];
            }
            sd += px_bn_fold(a);
            sdx += px_bn_fold(ax);
        }
        j->sum_dy[ch] = (float)sd;
        j->sum_dy_xmu[ch] = (float)sdx;
        if (j->dw) j->dw[ch] += (float)sdx * phx_bn_invstd(j->var[ch], j->eps);
        if (j->db) j->db[ch] += (float)sd;
    }
}

PX_CLONES static void px_bn_dx_half(const bn_job *j, int64_t c0, int64_t c1)
{
    float g[PX_F16_BLOCK], xv[PX_F16_BLOCK];
    for (int64_t ch = c0; ch < c1; ch++) {
        float istd = phx_bn_invstd(j->var[ch], j->eps);
        float scale = istd * (j->w ? j->w[ch] : 1.0f);
        float mdy = j->sum_dy_in ? (float)(j->sum_dy_in[ch] / j->count) : 0.0f;
        float mdx = j->sum_dy_in ? (float)(j->sum_dy_xmu_in[ch] / j->count) : 0.0f;
        float m = j->mean[ch];
        for (int64_t i = 0; i < j->n; i++) {
            int64_t o = (i * j->c + ch) * j->hw;
            for (int64_t b = 0; b < j->hw; b += PX_F16_BLOCK) {
                int64_t k = j->hw - b < PX_F16_BLOCK ? j->hw - b : PX_F16_BLOCK;
                px_bn_widen(g, j->dy, j->dt, o + b, k);
                px_bn_widen(xv, j->x, j->dt, o + b, k);
                for (int64_t t = 0; t < k; t++) g[t] = phx_bn_dx(g[t], xv[t] - m, istd, mdy, mdx, scale);
                px_cpu_half_cast_here((uint16_t *)j->y + o + b, (phx_dtype)j->dt, g, PHX_F32, k);
            }
        }
    }
}

/* The f16 and bf16 loops on AVX-512: each plane read as f16 or bf16 and
 * widened 16 values at a time in registers (vcvtph2ps; bf16 by a shift),
 * the arithmetic of the loops above with lane k of one vector as lane k
 * of PX_BN_LANES (the same adds in the same order), and each result
 * rounded once on its store (vcvtps2ph; bf16 by math.h's formula in
 * integer lanes, half-x86.h): the bits of the block path above, without
 * its passes through a stack buffer and a px_cpu_cast call per block.
 * f16 vectors holding a NaN lane go through math.h's conversions, as in
 * the cast kernel (cast-x86.c). */
#if PX_HAVE_X86
#include "kernels/cpu/half-x86.h"
_Static_assert(PX_BN_LANES == 16, "one 16-lane vector per PX_BN_LANES");

/* Taken by address: a __m512 passed by value to a function compiled
 * without AVX-512 draws GCC's -Wpsabi note. */
PX_INLINE float bn_fold512(const __m512 *acc)
{
    float l[PX_BN_LANES];
    memcpy(l, acc, sizeof l);
    return px_bn_fold(l);
}

/* sum x[i] (sq: sum (x[i] - m)^2), i < len */
PX_T512 static float bn_sum_h512(int bf, const uint16_t *x, int64_t len, float m, int sq)
{
    __m512 acc = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i < len; i += 16) {
        int64_t k = len - i < 16 ? len - i : 16;
        __m512 v = px_half_ld(bf, x + i, k);
        if (sq) v = _mm512_sub_ps(v, vm), v = _mm512_mul_ps(v, v);
        acc = _mm512_mask_add_ps(acc, k == 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1), acc, v);
    }
    return bn_fold512(&acc);
}

PX_T512 static void bn_stats_h512(const bn_job *j, int64_t c0, int64_t c1)
{
    int bf = j->dt == PHX_BF16;
    const uint16_t *x = j->x;
    double cnt = (double)(j->n * j->hw);
    for (int64_t ch = c0; ch < c1; ch++) {
        double s = 0.0;
        for (int64_t b = 0; b < j->n; b++) s += bn_sum_h512(bf, x + (b * j->c + ch) * j->hw, j->hw, 0, 0);
        double m = cnt > 0 ? s / cnt : 0.0, q = 0.0;
        float mf = (float)m;
        for (int64_t b = 0; b < j->n; b++) q += bn_sum_h512(bf, x + (b * j->c + ch) * j->hw, j->hw, mf, 1);
        j->mean_out[ch] = mf;
        j->var_out[ch] = cnt > 0 ? (float)(q / cnt) : 0.0f;
    }
}

PX_T512 static void bn_apply_h512(const bn_job *j, int64_t c0, int64_t c1)
{
    int bf = j->dt == PHX_BF16;
    const uint16_t *x = j->x;
    uint16_t *y = j->y;
    for (int64_t ch = c0; ch < c1; ch++) {
        float istd = phx_bn_invstd(j->var[ch], j->eps);
        __m512 m = _mm512_set1_ps(j->mean[ch]), is = _mm512_set1_ps(istd);
        __m512 wc = _mm512_set1_ps(j->w ? j->w[ch] : 1.0f), bc = _mm512_set1_ps(j->b ? j->b[ch] : 0.0f);
        for (int64_t i = 0; i < j->n; i++) {
            int64_t o = (i * j->c + ch) * j->hw;
            for (int64_t t = 0; t < j->hw; t += 16) {
                int64_t k = j->hw - t < 16 ? j->hw - t : 16;
                __m512 v = px_half_ld(bf, x + o + t, k); /* (x - mean) istd w + b, as phx_bn_apply */
                v = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(v, m), is), wc), bc);
                px_half_st(bf, y + o + t, v, k);
            }
        }
    }
}

PX_T512 static void bn_reduce_h512(const bn_job *j, int64_t c0, int64_t c1)
{
    int bf = j->dt == PHX_BF16;
    const uint16_t *x = j->x, *dy = j->dy;
    for (int64_t ch = c0; ch < c1; ch++) {
        double sd = 0.0, sdx = 0.0;
        __m512 m = _mm512_set1_ps(j->mean[ch]);
        for (int64_t i = 0; i < j->n; i++) {
            int64_t o = (i * j->c + ch) * j->hw;
            __m512 a = _mm512_setzero_ps(), ax = _mm512_setzero_ps();
            for (int64_t t = 0; t < j->hw; t += 16) {
                int64_t k = j->hw - t < 16 ? j->hw - t : 16;
                __mmask16 km = k == 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1);
                __m512 g = px_half_ld(bf, dy + o + t, k), xv = px_half_ld(bf, x + o + t, k);
                a = _mm512_mask_add_ps(a, km, a, g);
                ax = _mm512_mask_add_ps(ax, km, ax, _mm512_mul_ps(g, _mm512_sub_ps(xv, m)));
            }
            sd += bn_fold512(&a);
            sdx += bn_fold512(&ax);
        }
        j->sum_dy[ch] = (float)sd;
        j->sum_dy_xmu[ch] = (float)sdx;
        if (j->dw) j->dw[ch] += (float)sdx * phx_bn_invstd(j->var[ch], j->eps);
        if (j->db) j->db[ch] += (float)sd;
    }
}

PX_T512 static void bn_dx_h512(const bn_job *j, int64_t c0, int64_t c1)
{
    int bf = j->dt == PHX_BF16;
    const uint16_t *x = j->x, *dy = j->dy;
    uint16_t *dx = j->y;
    for (int64_t ch = c0; ch < c1; ch++) {
        float istd = phx_bn_invstd(j->var[ch], j->eps);
        float scale = istd * (j->w ? j->w[ch] : 1.0f);
        float mdy = j->sum_dy_in ? (float)(j->sum_dy_in[ch] / j->count) : 0.0f;
        float mdx = j->sum_dy_in ? (float)(j->sum_dy_xmu_in[ch] / j->count) : 0.0f;
        /* phx_bn_dx: (dy - mean_dy - xmu (istd istd mean_dy_xmu)) scale */
        __m512 m = _mm512_set1_ps(j->mean[ch]), vmdy = _mm512_set1_ps(mdy);
        __m512 kx = _mm512_set1_ps(istd * istd * mdx), sc = _mm512_set1_ps(scale);
        for (int64_t i = 0; i < j->n; i++) {
            int64_t o = (i * j->c + ch) * j->hw;
            for (int64_t t = 0; t < j->hw; t += 16) {
                int64_t k = j->hw - t < 16 ? j->hw - t : 16;
                __m512 g = px_half_ld(bf, dy + o + t, k), xmu = _mm512_sub_ps(px_half_ld(bf, x + o + t, k), m);
                g = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(g, vmdy), _mm512_mul_ps(xmu, kx)), sc);
                px_half_st(bf, dx + o + t, g, k);
            }
        }
    }
}

/* 1 where the job runs the loops above */
static int bn_h512(const bn_job *j)
{
    return (j->dt == PHX_F16 || j->dt == PHX_BF16) && px_cpu_isa() == PX_ISA_AVX512 && !getenv("PHX_CPU_F16_BLOCKS");
}
#define BN_H512(j, fn, lo, hi) \
    do { \
        if (bn_h512(j)) { \
            fn(j, lo, hi); \
            return; \
        } \
    } while (0)
#else
#define BN_H512(j, fn, lo, hi) ((void)0)
#endif

PX_INLINE void px_bn_stats(int64_t n, int64_t c, int64_t hw, const void *x, int dt, float *mean, float *var, int64_t c0,
                           int64_t c1)
{
    double cnt = (double)(n * hw);
    for (int64_t ch = c0; ch < c1; ch++) {
        double s = 0.0;
        for (int64_t b = 0; b < n; b++) s += px_bn_sum(x, dt, (b * c + ch) * hw, hw);
        double m = cnt > 0 ? s / cnt : 0.0, q = 0.0;
        float mf = (float)m;
        for (int64_t b = 0; b < n; b++) q += px_bn_sumsq(x, dt, (b * c + ch) * hw, hw, mf);
        mean[ch] = mf;
        var[ch] = cnt > 0 ? (float)(q / cnt) : 0.0f;
    }
}

PX_CLONES static void stats_part(void *arg, int64_t lo, int64_t hi)
{
    bn_job *j = arg;
    BN_H512(j, bn_stats_h512, lo, hi);
    if (j->dt != PHX_F32 && px_cpu_half_chunk(j->dt, 1)) {
        px_bn_stats_half(j, lo, hi);
        return;
    }
    PX_FLOAT_CALL(j->dt, px_bn_stats(j->n, j->c, j->hw, j->x, DT, j->mean_out, j->var_out, lo, hi));
}

phx_status px_cpu_batchnorm_stats(int dev, int64_t n, int64_t c, int64_t hw, const void *x, phx_dtype dt, float *mean,
                                  float *var)
{
    (void)dev;
    phx_status st = bn_check("batchnorm_stats", n, c, hw, dt);
    if (st != PHX_OK) return st;
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .dt = dt, .mean_out = mean, .var_out = var};
    px_cpu_parallel_for(c, 1, stats_part, &j);
    return PHX_OK;
}

PX_INLINE void px_bn_apply(int64_t n, int64_t c, int64_t hw, const void *x, const float *mean, const float *var,
                           float eps, const float *w, const float *b, void *y, int dt, int64_t c0, int64_t c1)
{
    for (int64_t ch = c0; ch < c1; ch++) {
        float istd = phx_bn_invstd(var[ch], eps), m = mean[ch], wc = w ? w[ch] : 1.0f, bc = b ? b[ch] : 0.0f;
        for (int64_t i = 0; i < n; i++) {
            int64_t o = (i * c + ch) * hw;
            for (int64_t j = 0; j < hw; j++) px_st(y, dt, o + j, phx_bn_apply(px_ld(x, dt, o + j), m, istd, wc, bc));
        }
    }
}

PX_CLONES static void apply_part(void *arg, int64_t lo, int64_t hi)
{
    bn_job *j = arg;
    BN_H512(j, bn_apply_h512, lo, hi);
    if (j->dt != PHX_F32 && px_cpu_half_chunk(j->dt, 1)) {
        px_bn_apply_half(j, lo, hi);
        return;
    }
    PX_FLOAT_CALL(j->dt, px_bn_apply(j->n, j->c, j->hw, j->x, j->mean, j->var, j->eps, j->w, j->b, j->y, DT, lo, hi));
}

phx_status px_cpu_batchnorm_apply(int dev, int64_t n, int64_t c, int64_t hw, const void *x, const float *mean,
                                  const float *var, float eps, const float *w, const float *b, void *y, phx_dtype dt)
{
    (void)dev;
    phx_status st = bn_check("batchnorm_apply", n, c, hw, dt);
    if (st != PHX_OK) return st;
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "batchnorm_apply: eps=%g, expected >= 0", (double)eps);
    bn_job j = {
        .n = n, .c = c, .hw = hw, .x = x, .dt = dt, .mean = mean, .var = var, .eps = eps, .w = w, .b = b, .y = y};
    px_cpu_parallel_for(c, 1, apply_part, &j);
    return PHX_OK;
}

PX_INLINE void px_bn_reduce(int64_t n, int64_t c, int64_t hw, const void *x, const void *dy, int dt, const float *mean,
                            const float *var, float eps, float *sum_dy, float *sum_dy_xmu, float *dw, float *db,
                            int64_t c0, int64_t c1)
{
    for (int64_t ch = c0; ch < c1; ch++) {
        double sd = 0.0, sdx = 0.0;
        float m = mean[ch];
        for (int64_t i = 0; i < n; i++) {
            float a, ax;
            px_bn_sum2(x, dy, dt, (i * c + ch) * hw, hw, m, &a, &ax);
            sd += a;
            sdx += ax;
        }
        sum_dy[ch] = (float)sd;
        sum_dy_xmu[ch] = (float)sdx;
        if (dw) dw[ch] += (float)sdx * phx_bn_invstd(var[ch], eps);
        if (db) db[ch] += (float)sd;
    }
}

PX_CLONES static void reduce_part(void *arg, int64_t lo, int64_t hi)
{
    bn_job *j = arg;
    BN_H512(j, bn_reduce_h512, lo, hi);
    if (j->dt != PHX_F32 && px_cpu_half_chunk(j->dt, 1)) {
        px_bn_reduce_half(j, lo, hi);
        return;
    }
    PX_FLOAT_CALL(j->dt,
                  px_bn_reduce(j->n, j->c, j->hw, j->x, j->dy, DT, j->mean, j->var, j->eps, j->sum_dy, j->sum_dy_xmu,
                               j->dw, j->db, lo, hi));
}

phx_status px_cpu_batchnorm_backward_reduce(int dev, int64_t n, int64_t c, int64_t hw, const void *x, const void *dy,
                                            phx_dtype dt, const float *mean, const float *var, float eps, float *sum_dy,
                                            float *sum_dy_xmu, float *dw, float *db)
{
    (void)dev;
    phx_status st = bn_check("batchnorm_backward_reduce", n, c, hw, dt);
    if (st != PHX_OK) return st;
    bn_job j = {.n = n,
                .c = c,
                .hw = hw,
                .x = x,
                .dy = dy,
                .dt = dt,
                .mean = mean,
                .var = var,
                .eps = eps,
                .sum_dy = sum_dy,
                .sum_dy_xmu = sum_dy_xmu,
                .dw = dw,
                .db = db};
    px_cpu_parallel_for(c, 1, reduce_part, &j);
    return PHX_OK;
}

PX_INLINE void px_bn_dx(int64_t n, int64_t c, int64_t hw, const void *x, const void *dy, int dt, const float *mean,
                        const float *var, float eps, const float *w, const float *sum_dy, const float *sum_dy_xmu,
                        double count, void *dx, int64_t c0, int64_t c1)
{
    for (int64_t ch = c0; ch < c1; ch++) {
        float istd = phx_bn_invstd(var[ch], eps);
        float scale = istd * (w ? w[ch] : 1.0f);
        float mdy = sum_dy ? (float)(sum_dy[ch] / count) : 0.0f;
        float mdx = sum_dy ? (float)(sum_dy_xmu[ch] / count) : 0.0f;
        float m = mean[ch];
        for (int64_t i = 0; i < n; i++) {
            int64_t o = (i * c + ch) * hw;
            for (int64_t j = 0; j < hw; j++)
                px_st(dx, dt, o + j, phx_bn_dx(px_ld(dy, dt, o + j), px_ld(x, dt, o + j) - m, istd, mdy, mdx, scale));
        }
    }
}

PX_CLONES static void dx_part(void *arg, int64_t lo, int64_t hi)
{
    bn_job *j = arg;
    BN_H512(j, bn_dx_h512, lo, hi);
    if (j->dt != PHX_F32 && px_cpu_half_chunk(j->dt, 1)) {
        px_bn_dx_half(j, lo, hi);
        return;
    }
    PX_FLOAT_CALL(j->dt,
                  px_bn_dx(j->n, j->c, j->hw, j->x, j->dy, DT, j->mean, j->var, j->eps, j->w, j->sum_dy_in,
                           j->sum_dy_xmu_in, j->count, j->y, lo, hi));
}

phx_status px_cpu_batchnorm_backward_apply(int dev, int64_t n, int64_t c, int64_t hw, const void *x, const void *dy,
                                           phx_dtype dt, const float *mean, const float *var, float eps, const float *w,
                                           const float *sum_dy, const float *sum_dy_xmu, double count, void *dx)
{
    (void)dev;
    phx_status st = bn_check("batchnorm_backward_apply", n, c, hw, dt);
    if (st != PHX_OK) return st;
    if (sum_dy && !(count > 0)) return phx_error(PHX_EINVAL, "batchnorm_backward_apply: count %g, expected > 0", count);
    bn_job j = {.n = n,
                .c = c,
                .hw = hw,
                .x = x,
                .dy = dy,
                .dt = dt,
                .mean = mean,
                .var = var,
                .eps = eps,
                .w = w,
                .sum_dy_in = sum_dy,
                .sum_dy_xmu_in = sum_dy_xmu,
                .count = count,
                .y = dx};
    px_cpu_parallel_for(c, 1, dx_part, &j);
    return PHX_OK;
}
