/* f32 convolutions with few taps per output (c kh kw <= 27: a network's
 * first layer, one or three input channels) computed directly with
 * AVX-512, 32 output pixels of a row at a time:
 *   forward:         the taps' 32 inputs are loaded once (zeros in the
 *                    padding), then each output channel is 27 or fewer
 *                    FMAs of them against its broadcast weights
 *   backward weight: the image's column matrix (taps x pixels, rows
 *                    padded to 32) is built once, then dW of each output
 *                    channel is kept in registers while dY streams past,
 *                    one image at a time, and summed in double
 * A GEMM of depth 9 (the implicit GEMM, oneDNN) spends more on its
 * blocks than on the arithmetic. Threads take whole images (forward) or
 * output channels (weight): the same sums on any thread count. Taken:
 * stride 1, groups 1 (px_cpu_conv2d_small_takes). */
#include "config.h"
#include <string.h>
#include "kernels/cpu/conv-avx512.h"

#if PX_HAVE_X86
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,fma")))

enum {
    TAPS_MOST = 27, /* c kh kw taken */
    PX = 32, /* output pixels of a row at a time: two vectors */
};

#define lanes px_lanes16

typedef struct small_job {
    const phx_conv2d_desc *d;
    const float *x, *w, *bias, *dy;
    float *y, *dw, *db;
    int64_t kd;
    /* tap kr reads plane plane[kr], row oy + dy_[kr], column ox + dx_[kr] */
    int64_t plane[TAPS_MOST], dy_[TAPS_MOST], dx_[TAPS_MOST];
    int failed;
} small_job;

/* xb[kr][0 .. 31]: the input tap kr reads for output pixels (oy, ox0 ..
 * ox0 + 31) of image xi, 0 in the padding and past the row */
T512 static void taps(const small_job *j, const float *xi, int64_t oy, int64_t ox0, float *xb)
{
    const phx_conv2d_desc *d = j->d;
    int64_t n = d->ow - ox0;
    for (int64_t kr = 0; kr < j->kd; kr++) {
        int64_t iy = oy + j->dy_[kr], ix = ox0 + j->dx_[kr];
        int in = iy >= 0 && iy < d->h;
        const float *row = xi + j->plane[kr] + (in ? iy * d->w + ix : 0);
        for (int h = 0; h < 2; h++) {
            __mmask16 m = in ? lanes(-ix - 16 * h, d->w - ix - 16 * h) & lanes(0, n - 16 * h) : 0;
            _mm512_store_ps(xb + kr * PX + 16 * h, _mm512_maskz_loadu_ps(m, row + 16 * h));
        }
    }
}

/* forward of images lo .. hi - 1 */
T512 static void fwd_part(void *arg, int64_t lo, int64_t hi)
{
    small_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    int64_t kd = j->kd, ohw = d->oh * d->ow;
    float xb[TAPS_MOST * PX] __attribute__((aligned(64)));
    for (int64_t b = lo; b < hi; b++) {
        const float *xi = j->x + b * d->c * d->h * d->w;
        for (int64_t oy = 0; oy < d->oh; oy++)
            for (int64_t ox0 = 0; ox0 < d->ow; ox0 += PX) {
                taps(j, xi, oy, ox0, xb);
                __mmask16 m0 = lanes(0, d->ow - ox0), m1 = lanes(0, d->ow - ox0 - 16);
                float *yo = j->y + b * d->k * ohw + oy * d->ow + ox0;
                int64_t co = 0;
                for (; co + 4 <= d->k; co += 4) { /* four channels: eight independent sums */
                    __m512 acc[4][2];
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++)
                        acc[q][0] = acc[q][1] = _mm512_set1_ps(j->bias ? j->bias[co + q] : 0.0f);
                    for (int64_t kr = 0; kr < kd; kr++) {
                        __m512 x0 = _mm512_load_ps(xb + kr * PX), x1 = _mm512_load_ps(xb + kr * PX + 16);
#pragma GCC unroll 4
                        for (int q = 0; q < 4; q++) {
                            __m512 wv = _mm512_set1_ps(j->w[(co + q) * kd + kr]);
                            acc[q][0] = _mm512_fmadd_ps(wv, x0, acc[q][0]);
                            acc[q][1] = _mm512_fmadd_ps(wv, x1, acc[q][1]);
                        }
                    }
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++) {
                        _mm512_mask_storeu_ps(yo + (co + q) * ohw, m0, acc[q][0]);
                        _mm512_mask_storeu_ps(yo + (co + q) * ohw + 16, m1, acc[q][1]);
                    }
                }
                for (; co < d->k; co++) {
                    __m512 a0 = _mm512_set1_ps(j->bias ? j->bias[co] : 0.0f), a1 = a0;
                    for (int64_t kr = 0; kr < kd; kr++) {
                        __m512 wv = _mm512_set1_ps(j->w[co * kd + kr]);
                        a0 = _mm512_fmadd_ps(wv, _mm512_load_ps(xb + kr * PX), a0);
                        a1 = _mm512_fmadd_ps(wv, _mm512_load_ps(xb + kr * PX + 16), a1);
                    }
                    _mm512_mask_storeu_ps(yo + co * ohw, m0, a0);
                    _mm512_mask_storeu_ps(yo + co * ohw + 16, m1, a1);
                }
            }
    }
}

/* s[kr][lane] += dY . col[kr] of one channel of one image, lane by lane,
 * and s[kd][lane] += dY (kd a constant where the caller can make it one:
 * the sums stay in registers); next, the next channel's dY, is
 * prefetched a vector at a time meanwhile */
T512 static inline __attribute__((always_inline)) void wgt_channel(int64_t kd, const float *next, const float *dyc,
                                                                   const float *col, int64_t vecs, const int64_t *at,
                                                                   const __mmask16 *mk, double *s)
{
    __m512 acc[TAPS_MOST + 1];
#pragma GCC unroll 28
    for (int kr = 0; kr <= TAPS_MOST; kr++) acc[kr] = _mm512_setzero_ps();
    for (int64_t v = 0; v < vecs; v++, col += kd * 16) {
        __m512 g = _mm512_maskz_loadu_ps(mk[v], dyc + at[v]);
        _mm_prefetch((const char *)(next + at[v]), _MM_HINT_T0);
        acc[TAPS_MOST] = _mm512_add_ps(acc[TAPS_MOST], g);
#pragma GCC unroll 27
        for (int kr = 0; kr < TAPS_MOST; kr++)
            if (kr < kd) acc[kr] = _mm512_fmadd_ps(g, _mm512_load_ps(col + kr * 16), acc[kr]);
    }
#pragma GCC unroll 28
    for (int kr = 0; kr <= TAPS_MOST; kr++) {
        if (kr > kd) break;
        __m512 a = acc[kr == kd ? TAPS_MOST : kr];
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
        _mm512_storeu_pd(s + kr * 16, _mm512_add_pd(_mm512_loadu_pd(s + kr * 16), lo));
        _mm512_storeu_pd(s + kr * 16 + 8, _mm512_add_pd(_mm512_loadu_pd(s + kr * 16 + 8), hi));
    }
}

/* dW (and dB) of output channels lo .. hi - 1 over every image: per
 * image, the column matrix col (16 pixels of a row at a time, the kd
 * taps' values for them side by side, 0 past the row), then each
 * channel's sums over it, added in double after the image */
T512 static void wgt_part(void *arg, int64_t lo, int64_t hi)
{
    small_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    int64_t kd = j->kd, ohw = d->oh * d->ow, blocks = (d->ow + PX - 1) / PX, vecs = d->oh * blocks * 2;
    float *col = px_cpu_scratch(1, (size_t)(kd * vecs * 16) * sizeof(float));
    double *sum = px_cpu_scratch(3, (size_t)((hi - lo) * (kd + 1) * 16) * sizeof(double));
    int64_t *at = px_cpu_scratch(4, (size_t)vecs * (sizeof(int64_t) + sizeof(__mmask16)));
    if (!col || !sum || !at) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    __mmask16 *mk = (__mmask16 *)(at + vecs);
    for (int64_t v = 0; v < vecs; v++) { /* vector v: 16 pixels of row oy from ox */
        int64_t oy = v / (2 * blocks), ox = v % (2 * blocks) * 16;
        at[v] = oy * d->ow + ox, mk[v] = lanes(0, d->ow - ox);
    }
    memset(sum, 0, (size_t)((hi - lo) * (kd + 1) * 16) * sizeof(double));
    float xb[TAPS_MOST * PX] __attribute__((aligned(64)));
    for (int64_t b = 0; b < d->n; b++) {
        const float *xi = j->x + b * d->c * d->h * d->w;
        for (int64_t oy = 0; oy < d->oh; oy++)
            for (int64_t bl = 0; bl < blocks; bl++) {
                taps(j, xi, oy, bl * PX, xb);
                float *c = col + (oy * blocks + bl) * 2 * kd * 16;
                for (int64_t kr = 0; kr < kd; kr++)
                    for (int h = 0; h < 2; h++)
                        _mm512_store_ps(c + (h * kd + kr) * 16, _mm512_load_ps(xb + kr * PX + 16 * h));
            }
        for (int64_t co = lo; co < hi; co++) {
            double *s = sum + (co - lo) * (kd + 1) * 16;
            const float *dyc = j->dy + (b * d->k + co) * ohw;
            if (kd == 9) /* one input channel, 3 x 3 */
                wgt_channel(9, dyc + ohw, dyc, col, vecs, at, mk, s);
            else if (kd == 27) /* three, 3 x 3 */
                wgt_channel(27, dyc + ohw, dyc, col, vecs, at, mk, s);
            else
                wgt_channel(kd, dyc + ohw, dyc, col, vecs, at, mk, s);
        }
    }
    for (int64_t co = lo; co < hi; co++)
        for (int64_t kr = 0; kr <= kd; kr++) {
            const double *s = sum + ((co - lo) * (kd + 1) + kr) * 16;
            double t = 0.0;
            for (int l = 0; l < 16; l++) t += s[l];
            if (kr < kd)
                j->dw[co * kd + kr] += (float)t;
            else if (j->db)
                j->db[co] += (float)t;
        }
}

int px_cpu_conv2d_small_takes(int pass, const phx_conv2d_desc *d)
{
    return pass != 1 && d->groups == 1 && d->n >= 1 && d->stride_h == 1 && d->stride_w == 1 &&
        d->c * d->kh * d->kw <= TAPS_MOST;
}

phx_status px_cpu_conv2d_small(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                               const float *dy, float *y, float *dw, float *db)
{
    if (!px_cpu_conv2d_small_takes(pass, d)) return PHX_EUNSUPPORTED;
    small_job j = {
        .d = d, .x = x, .w = w, .bias = bias, .dy = dy, .y = y, .dw = dw, .db = db, .kd = d->c * d->kh * d->kw};
    for (int64_t kr = 0; kr < j.kd; kr++) {
        int64_t s = kr % d->kw, r = kr / d->kw % d->kh, ci = kr / (d->kw * d->kh);
        j.plane[kr] = ci * d->h * d->w, j.dy_[kr] = r * d->dil_h - d->pad_h, j.dx_[kr] = s * d->dil_w - d->pad_w;
    }
    if (pass == 0) {
        px_cpu_parallel_for(d->n, 1, fwd_part, &j);
        return PHX_OK;
    }
    px_cpu_parallel_for(d->k, 1, wgt_part, &j);
    if (j.failed) return phx_error(PHX_ENOMEM, "conv2d_backward_weight: out of memory for the column matrix");
    return PHX_OK;
}
#else
int px_cpu_conv2d_small_takes(int pass, const phx_conv2d_desc *d)
{
    (void)pass, (void)d;
    return 0;
}

phx_status px_cpu_conv2d_small(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                               const float *dy, float *y, float *dw, float *db)
{
    (void)pass, (void)d, (void)x, (void)w, (void)bias, (void)dy, (void)y, (void)dw, (void)db;
    return PHX_EUNSUPPORTED;
}
#endif
