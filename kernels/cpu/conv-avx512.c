/* f32 convolutions on the packed AVX-512 GEMM (gemm-avx512.h), the
 * column matrix packed straight from the NCHW images into the GEMM's
 * panels (an implicit GEMM: no im2col buffer, no layout reorders):
 *   forward, per image:  Y (k, oh ow) = W (k, c kh kw) col (c kh kw, oh ow) + bias
 *   backward data:       dx is the forward of dy with W transposed and
 *                        flipped, padded (kh - 1) dil - pad (stride 1)
 *   backward weight:     dW (k, c kh kw) += dY (k, oh ow) col^T, image by image
 * Threads take whole images (forward, data) or whole 48-column panels of
 * dW (weight), so each sum runs in the same order on any thread count.
 * Taken: stride 1, groups 1 (px_cpu_conv2d_avx512_takes). */
#include "config.h"
#include <string.h>
#include "kernels/cpu/conv-avx512.h"
#include "kernels/cpu/half-x86.h"

#if PX_HAVE_X86
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,fma")))

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* lanes 0 .. n - 1 of 16 */
static __mmask16 first(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* The planes a stride-1 convolution reads: each input plane copied into
 * a zeroed (hp, wp) plane at (pad_h, pad_w), tall and wide enough for
 * every output's taps. Output pixel (oy, ox) is then flat position
 * q = oy wp + ox, and its tap (r, s) reads q + (r dil_h) wp + s dil_w of
 * the plane: a row of the column matrix is a run of the plane. The
 * positions with ox >= ow are computed and thrown away. */
typedef struct planes {
    int64_t hp, wp, size; /* size: hp wp */
    int64_t slack; /* zeros after the last plane: the thrown-away positions read that far */
    int direct; /* x itself (1x1, no padding) */
} planes;

static planes planes_of(const phx_conv2d_desc *d)
{
    planes p;
    p.hp = d->h + 2 * d->pad_h, p.wp = d->w + 2 * d->pad_w;
    if (p.hp < d->oh + (d->kh - 1) * d->dil_h) p.hp = d->oh + (d->kh - 1) * d->dil_h;
    if (p.wp < d->ow + (d->kw - 1) * d->dil_w) p.wp = d->ow + (d->kw - 1) * d->dil_w;
    p.size = p.hp * p.wp;
    p.slack = (d->kw - 1) * d->dil_w;
    p.direct = p.hp == d->h && p.wp == d->w && !d->pad_h && !d->pad_w && !p.slack;
    return p;
}

/* image xi's planes (scratch slot 1), or xi itself when direct */
T512 static const float *planes_fill(const phx_conv2d_desc *d, const planes *p, const float *xi)
{
    if (p->direct) return xi;
    float *out = px_cpu_scratch(1, (size_t)(d->c * p->size + p->slack) * sizeof(float));
    if (!out) return NULL;
    memset(out, 0, (size_t)(d->c * p->size + p->slack) * sizeof(float));
    for (int64_t ci = 0; ci < d->c; ci++)
        for (int64_t iy = 0; iy < d->h; iy++)
            memcpy(out + ci * p->size + (iy + d->pad_h) * p->wp + d->pad_w, xi + (ci * d->h + iy) * d->w,
                   (size_t)d->w * sizeof(float));
    return out;
}

/* where row kr (channel, kernel row, kernel column) of the column matrix
 * starts in the planes */
static int64_t tap_at(const phx_conv2d_desc *d, const planes *p, int64_t kr)
{
    int64_t s = kr % d->kw, r = kr / d->kw % d->kh, ci = kr / (d->kw * d->kh);
    return ci * p->size + r * d->dil_h * p->wp + s * d->dil_w;
}

int64_t px_conv_block(int64_t n, int64_t most, int64_t unit)
{
    int64_t blocks = (n + most - 1) / most;
    int64_t b = (n + blocks - 1) / blocks;
    return (b + unit - 1) / unit * unit;
}

/* The width of a packed block of n columns, kc deep: a multiple of PX_NR
 * within half of a 1 MiB L2. */
static int64_t cols_block(int64_t n, int64_t kc)
{
    int64_t most = (int64_t)131072 / kc / PX_NR * PX_NR;
    return px_conv_block(n, most > PX_NR ? most : PX_NR, PX_NR);
}

void px_conv_pack_rows(float *dst, int64_t m, int64_t kd, int64_t kc, const float *w)
{
    int64_t mp = (m + PX_MR - 1) / PX_MR * PX_MR;
    for (int64_t pc = 0; pc < kd; pc += kc)
        px_avx512_pack(dst + pc * mp, PX_MR, m, min64(kc, kd - pc), w + pc, PHX_F32, kd, 0);
}

void px_conv_tiles(int64_t kc, const float *ap, const float *bp, int64_t bstride, int64_t m, int64_t nc, float *c,
                   int64_t ldc, float beta)
{
    for (int64_t jr = 0; jr < nc; jr += PX_NR)
        for (int64_t ir = 0; ir < m; ir += PX_MR)
            px_avx512_micro(kc, ap + ir * kc, bp + jr / PX_NR * bstride, c + ir * ldc + jr, ldc, 1.0f, beta,
                            (int)min64(PX_MR, m - ir), (int)min64(PX_NR, nc - jr), 0);
}

typedef struct conv_job {
    const phx_conv2d_desc *d;
    const float *x, *bias, *dy;
    float *y, *dw, *db;
    const float *wp; /* forward: W packed, k block after k block */
    const uint16_t *dyh; /* bias gradient: dy in f16/bf16 (dt) */
    phx_dtype dt;
    planes pl;
    int64_t kd, ohw; /* c kh kw, oh ow */
    int64_t kc, nc; /* the depth and width of a packed block */
    int failed;
} conv_job;

/* forward of images lo .. hi - 1 */
T512 static void fwd_part(void *arg, int64_t lo, int64_t hi)
{
    conv_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    const planes *pl = &j->pl;
    int64_t m = d->k, mp = (m + PX_MR - 1) / PX_MR * PX_MR, n = d->oh * pl->wp;
    float *bp = px_cpu_scratch(6, (size_t)(j->kc * j->nc) * sizeof(float));
    /* C: y itself where its rows are the planes' width, else wp-wide rows cropped into y */
    float *c = pl->wp == d->ow ? NULL : px_cpu_scratch(3, (size_t)(m * n) * sizeof(float));
    if (!bp || (pl->wp != d->ow && !c)) goto oom;
    for (int64_t b = lo; b < hi; b++) {
        const float *src = planes_fill(d, pl, j->x + b * d->c * d->h * d->w);
        float *yi = j->y + b * m * j->ohw, *ci = c ? c : yi;
        if (!src) goto oom;
        for (int64_t jc = 0; jc < n; jc += j->nc) {
            int64_t nc = min64(j->nc, n - jc), ncp = (nc + PX_NR - 1) / PX_NR * PX_NR;
            for (int64_t pc = 0; pc < j->kd; pc += j->kc) {
                int64_t kc = min64(j->kc, j->kd - pc);
                for (int64_t kk = 0; kk < kc; kk++) {
                    const float *row = src + tap_at(d, pl, pc + kk) + jc;
                    float *dst = bp + kk * PX_NR;
                    for (int64_t q = 0; q < ncp; q += 16) {
                        __mmask16 mk = first(nc - q);
                        _mm512_storeu_ps(dst + q / PX_NR * kc * PX_NR + q % PX_NR, _mm512_maskz_loadu_ps(mk, row + q));
                    }
                }
                px_conv_tiles(kc, j->wp + pc * mp, bp, kc * PX_NR, m, nc, ci + jc, n, pc ? 1.0f : 0.0f);
            }
        }
        for (int64_t co = 0; co < m && (c || j->bias); co++) {
            __m512 bv = _mm512_set1_ps(j->bias ? j->bias[co] : 0.0f);
            for (int64_t oy = 0; oy < d->oh; oy++) {
                const float *in = ci + co * n + oy * pl->wp;
                float *out = yi + (co * d->oh + oy) * d->ow;
                for (int64_t ox = 0; ox < d->ow; ox += 16) {
                    __mmask16 mk = first(d->ow - ox);
                    _mm512_mask_storeu_ps(out + ox, mk, _mm512_add_ps(_mm512_maskz_loadu_ps(mk, in + ox), bv));
                }
            }
        }
    }
    return;
oom:
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

/* y (n, k, oh, ow) = conv(x, w) + bias with w (k, kd) in f32 */
static phx_status forward(const phx_conv2d_desc *d, const float *x, const float *w, const float *bias, float *y)
{
    conv_job j = {.d = d, .x = x, .bias = bias, .y = y, .pl = planes_of(d)};
    j.kd = d->c * d->kh * d->kw;
    j.ohw = d->oh * d->ow;
    j.kc = px_conv_block(j.kd, PX_KC, 1);
    j.nc = cols_block(d->oh * j.pl.wp, j.kc);
    int64_t mp = (d->k + PX_MR - 1) / PX_MR * PX_MR;
    float *wp = px_cpu_scratch(0, (size_t)(mp * j.kd) * sizeof(float));
    if (!wp) return phx_error(PHX_ENOMEM, "conv2d: out of memory for the packed weight");
    px_conv_pack_rows(wp, d->k, j.kd, j.kc, w);
    j.wp = wp;
    px_cpu_parallel_for(d->n, 1, fwd_part, &j);
    if (j.failed) return phx_error(PHX_ENOMEM, "conv2d: out of memory for the packed columns");
    return PHX_OK;
}

/* dW columns (48-column panels) lo .. hi - 1, summed over every image:
 * dY with rows wp wide (zeros at ox >= ow) times the column matrix's
 * rows, which are runs of the planes */
T512 static void wgt_part(void *arg, int64_t lo, int64_t hi)
{
    conv_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    const planes *pl = &j->pl;
    int64_t m = d->k, j0 = lo * PX_NR, j1 = min64(hi * PX_NR, j->kd), n = d->oh * pl->wp;
    float *ap = px_cpu_scratch(5, (size_t)(((m + PX_MR - 1) / PX_MR * PX_MR) * j->kc) * sizeof(float));
    float *bp = px_cpu_scratch(6, (size_t)(j->kc * j->nc) * sizeof(float));
    float *rows = px_cpu_scratch(4, (size_t)(j->kc * j->nc) * sizeof(float));
    float *dyp = pl->wp == d->ow ? NULL : px_cpu_scratch(3, (size_t)(m * n) * sizeof(float));
    if (!ap || !bp || !rows || (pl->wp != d->ow && !dyp)) goto oom;
    for (int64_t b = 0; b < d->n; b++) {
        const float *src = planes_fill(d, pl, j->x + b * d->c * d->h * d->w), *dyi = j->dy + b * m * j->ohw;
        if (!src) goto oom;
        if (dyp) {
            for (int64_t r = 0; r < m * d->oh; r++) {
                memcpy(dyp + r * pl->wp, dyi + r * d->ow, (size_t)d->ow * sizeof(float));
                memset(dyp + r * pl->wp + d->ow, 0, (size_t)(pl->wp - d->ow) * sizeof(float));
            }
            dyi = dyp;
        }
        for (int64_t pc = 0; pc < n; pc += j->kc) {
            int64_t kc = min64(j->kc, n - pc);
            px_avx512_pack(ap, PX_MR, m, kc, dyi + pc, PHX_F32, n, 0);
            for (int64_t jc = j0; jc < j1; jc += j->nc) {
                int64_t nc = min64(j->nc, j1 - jc);
                for (int64_t col = 0; col < nc; col++)
                    memcpy(rows + col * kc, src + tap_at(d, pl, jc + col) + pc, (size_t)kc * sizeof(float));
                px_avx512_pack(bp, PX_NR, nc, kc, rows, PHX_F32, kc, 0);
                px_conv_tiles(kc, ap, bp, kc * PX_NR, m, nc, j->dw + jc, j->kd, 1.0f);
            }
        }
    }
    return;
oom:
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

/* px_conv_bias_grad's channels lo .. hi - 1, dy's 16 values at an offset
 * read by LOAD(mask, offset): one body for f32 (AVX-512F) and for f16/bf16
 * (masked 16-bit loads, AVX512BW), so that both sum in one order */
#define BIAS_PART(NAME, TARGET, LOAD) \
    TARGET static void NAME(void *arg, int64_t lo, int64_t hi) \
    { \
        conv_job *j = arg; \
        for (int64_t co = lo; co < hi; co++) { \
            double s = 0.0; \
            for (int64_t b = 0; b < j->d->n; b++) { \
                int64_t row = (b * j->d->k + co) * j->ohw; \
                __m512 acc = _mm512_setzero_ps(); \
                for (int64_t q = 0; q < j->ohw; q += 16) { \
                    int64_t n = min64(16, j->ohw - q); \
                    __mmask16 mk = n == 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); \
                    acc = _mm512_add_ps(acc, LOAD(mk, row + q)); \
                } \
                s += _mm512_reduce_add_ps(acc); \
            } \
            j->db[co] += (float)s; \
        } \
    }
#define BIAS_F32(mk, at) _mm512_maskz_loadu_ps(mk, j->dy + (at))
#define BIAS_HALF(mk, at) px_half_mask_ld(j->dt == PHX_BF16, j->dyh + (at), mk)
BIAS_PART(bias_part, T512, BIAS_F32)
BIAS_PART(bias_part_half, PX_T512BW, BIAS_HALF)

void px_conv_bias_grad(const phx_conv2d_desc *d, phx_dtype dt, const void *dy, float *db)
{
    conv_job j = {.d = d, .db = db, .ohw = d->oh * d->ow, .dt = dt};
    if (dt == PHX_F32)
        j.dy = dy;
    else
        j.dyh = dy;
    px_cpu_parallel_for(d->k, 1, dt == PHX_F32 ? bias_part : bias_part_half, &j);
}

static phx_status weight(const phx_conv2d_desc *d, const float *x, const float *dy, float *dw, float *db)
{
    conv_job j = {.d = d, .x = x, .dy = dy, .dw = dw, .db = db, .pl = planes_of(d)};
    j.kd = d->c * d->kh * d->kw;
    j.ohw = d->oh * d->ow;
    j.kc = px_conv_block(d->oh * j.pl.wp, PX_KC, 1);
    j.nc = cols_block(j.kd, j.kc);
    px_cpu_parallel_for((j.kd + PX_NR - 1) / PX_NR, 1, wgt_part, &j);
    if (j.failed) return phx_error(PHX_ENOMEM, "conv2d: out of memory for the packed columns");
    if (db) px_conv_bias_grad(d, PHX_F32, dy, db);
    return PHX_OK;
}

/* The data pass as a forward: *t is the convolution of dy into dx, and
 * the return the weight (c, k, kh, kw) flipped, in scratch slot 2 (NULL
 * with phx_error on ENOMEM): dx[ci][iy][ix] sums dy[co][oy][ox]
 * w[co][ci][r][s] over oy = iy + pad - r dil, a convolution of dy padded
 * (kh - 1) dil - pad with tap kh - 1 - r. */
static const float *flipped_weight(const phx_conv2d_desc *d, const float *w, phx_conv2d_desc *t)
{
    *t = *d;
    t->c = d->k, t->h = d->oh, t->w = d->ow, t->k = d->c, t->oh = d->h, t->ow = d->w;
    t->pad_h = (d->kh - 1) * d->dil_h - d->pad_h, t->pad_w = (d->kw - 1) * d->dil_w - d->pad_w;
    int64_t taps = d->kh * d->kw;
    float *wt = px_cpu_scratch(2, (size_t)(d->k * d->c * taps) * sizeof(float));
    if (!wt) {
        phx_error(PHX_ENOMEM, "conv2d_backward_data: out of memory for the flipped weight");
        return NULL;
    }
    for (int64_t co = 0; co < d->k; co++)
        for (int64_t ci = 0; ci < d->c; ci++)
            for (int64_t tap = 0; tap < taps; tap++)
                wt[(ci * d->k + co) * taps + taps - 1 - tap] = w[(co * d->c + ci) * taps + tap];
    return wt;
}

int px_cpu_conv2d_avx512_takes(int pass, const phx_conv2d_desc *d)
{
    if (d->groups != 1 || d->n < 1 || d->stride_h != 1 || d->stride_w != 1) return 0;
    /* the data pass as a forward: dy padded (k - 1) dil - pad */
    return pass != 1 || ((d->kh - 1) * d->dil_h >= d->pad_h && (d->kw - 1) * d->dil_w >= d->pad_w);
}

phx_status px_cpu_conv2d_avx512(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                const float *dy, float *y, float *dx, float *dw, float *db)
{
    if (!px_cpu_conv2d_avx512_takes(pass, d)) return PHX_EUNSUPPORTED;
    if (pass == 0) return forward(d, x, w, bias, y);
    if (pass == 1) {
        phx_conv2d_desc t;
        const float *wt = flipped_weight(d, w, &t);
        return wt ? forward(&t, dy, wt, NULL, dx) : PHX_ENOMEM;
    }
    return weight(d, x, dy, dw, db);
}
#else
int px_cpu_conv2d_avx512_takes(int pass, const phx_conv2d_desc *d)
{
    (void)pass, (void)d;
    return 0;
}

phx_status px_cpu_conv2d_avx512(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                const float *dy, float *y, float *dx, float *dw, float *db)
{
    (void)pass, (void)d, (void)x, (void)w, (void)bias, (void)dy, (void)y, (void)dx, (void)dw, (void)db;
    return PHX_EUNSUPPORTED;
}
#endif
