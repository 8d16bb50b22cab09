/* 2-D convolution on the CPU: im2col + phx GEMM (gemm.c) (doc/maint/kernels.md says
 * why this and not oneDNN). Images are taken in chunks whose column
 * matrix fits PX_COL_FLOATS; for each chunk and group g:
 *   col  (C/g kh kw, B oh ow) <- the input windows (0 outside the input)
 *   forward:         Y_g (K/g, B oh ow) = W_g col, then scattered to NCHW + bias
 *   backward data:   dcol = W_g^T dY_g, added back into dx (col2im)
 *   backward weight: dW_g += dY_g col^T, db += row sums of dY_g
 * f16/bf16 convolutions run the f32 path auto (or PHX_CPU_CONV) picks on
 * widened copies of their operands, rounded once on the way out
 * (conv_half); on the im2col path (forced, or where no other kernel takes
 * the shape) activations are widened while building col and rounded once
 * on the way out; all GEMMs are f32. Scratch: slot 0 col, 1 the gathered
 * dY or Y, 2 the f32 weight. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "src/base/util.h"
#include "src/tune/tune.h"

#define PX_COL_FLOATS ((int64_t)4 << 20) /* 16 MiB of column matrix per chunk */

typedef struct conv_geom {
    int64_t cg, kg; /* input and output channels per group */
    int64_t rows; /* cg kh kw: rows of col */
    int64_t ohw, hw;
    int64_t chunk; /* images per chunk */
} conv_geom;

static phx_status conv_check(const char *who, const phx_conv2d_desc *d, conv_geom *g)
{
    if (!d) return phx_error(PHX_EINVAL, "%s: NULL descriptor", who);
    if (d->n < 0 || d->c < 1 || d->h < 1 || d->w < 1 || d->k < 1 || d->kh < 1 || d->kw < 1 || d->oh < 1 || d->ow < 1 ||
        d->stride_h < 1 || d->stride_w < 1 || d->pad_h < 0 || d->pad_w < 0 || d->dil_h < 1 || d->dil_w < 1 ||
        d->groups < 1 || d->c % d->groups || d->k % d->groups)
        return phx_error(PHX_EINVAL,
                         "%s: input (%lld, %lld, %lld, %lld), %lld outputs, kernel %lldx%lld, output %lldx%lld, "
                         "stride %lld/%lld, padding %lld/%lld, dilation %lld/%lld, groups %lld: expected positive "
                         "sizes, padding >= 0 and groups dividing both channel counts",
                         who, (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k,
                         (long long)d->kh, (long long)d->kw, (long long)d->oh, (long long)d->ow, (long long)d->stride_h,
                         (long long)d->stride_w, (long long)d->pad_h, (long long)d->pad_w, (long long)d->dil_h,
                         (long long)d->dil_w, (long long)d->groups);
    g->cg = d->c / d->groups;
    g->kg = d->k / d->groups;
    g->rows = g->cg * d->kh * d->kw;
    g->ohw = d->oh * d->ow;
    g->hw = d->h * d->w;
    int64_t per = g->rows * g->ohw;
    g->chunk = per > 0 && PX_COL_FLOATS / per > 1 ? PX_COL_FLOATS / per : 1;
    if (g->chunk > d->n) g->chunk = d->n > 0 ? d->n : 1;
    return PHX_OK;
}

/* The outputs ox in [*lo, *hi) whose input column ox stride - pad + off
 * lies inside [0, w). */
static void valid_range(int64_t ow, int64_t stride, int64_t pad, int64_t off, int64_t w, int64_t *lo, int64_t *hi)
{
    int64_t a = pad - off; /* ox stride >= a */
    int64_t l = a <= 0 ? 0 : (a + stride - 1) / stride;
    int64_t b = w - 1 + pad - off; /* ox stride <= b */
    int64_t h = b < 0 ? 0 : b / stride + 1;
    *lo = l < ow ? l : ow;
    *hi = h < ow ? h : ow;
    if (*hi < *lo) *hi = *lo;
}

/* col[row, b ohw + p] for the images b0 + bl .. b0 + bh - 1 of a chunk of
 * nb and channels c0 .. c0+cg-1 */
PX_INLINE void px_im2col(const phx_conv2d_desc *d, const conv_geom *g, const void *x, int dt, int64_t b0, int64_t nb,
                         int64_t bl, int64_t bh, int64_t c0, float *col)
{
    int64_t ld = nb * g->ohw;
    for (int64_t cc = 0; cc < g->cg; cc++)
        for (int64_t r = 0; r < d->kh; r++)
            for (int64_t s = 0; s < d->kw; s++) {
                float *row = col + ((cc * d->kh + r) * d->kw + s) * ld;
                for (int64_t b = bl; b < bh; b++) {
                    int64_t xo = ((b0 + b) * d->c + c0 + cc) * g->hw;
                    float *out = row + b * g->ohw;
                    for (int64_t oy = 0; oy < d->oh; oy++) {
                        int64_t iy = oy * d->stride_h - d->pad_h + r * d->dil_h;
                        float *o = out + oy * d->ow;
                        if (iy < 0 || iy >= d->h) {
                            for (int64_t ox = 0; ox < d->ow; ox++) o[ox] = 0.0f;
                            continue;
                        }
                        int64_t base = xo + iy * d->w - d->pad_w + s * d->dil_w, lo, hi;
                        valid_range(d->ow, d->stride_w, d->pad_w, s * d->dil_w, d->w, &lo, &hi);
                        for (int64_t ox = 0; ox < lo; ox++) o[ox] = 0.0f;
                        if (d->stride_w == 1)
                            for (int64_t ox = lo; ox < hi; ox++) o[ox] = px_ld(x, dt, base + ox);
                        else
                            for (int64_t ox = lo; ox < hi; ox++) o[ox] = px_ld(x, dt, base + ox * d->stride_w);
                        for (int64_t ox = hi; ox < d->ow; ox++) o[ox] = 0.0f;
                    }
                }
            }
}

/* dx[...] += col: the inverse scatter of px_im2col into the f32 images
 * dx (the chunk's first image), for the chunk's images bl .. bh - 1 */
PX_INLINE void col2im(const phx_conv2d_desc *d, const conv_geom *g, const float *col, int64_t nb, int64_t bl,
                      int64_t bh, int64_t c0, float *dx)
{
    int64_t ld = nb * g->ohw;
    for (int64_t cc = 0; cc < g->cg; cc++)
        for (int64_t r = 0; r < d->kh; r++)
            for (int64_t s = 0; s < d->kw; s++) {
                const float *row = col + ((cc * d->kh + r) * d->kw + s) * ld;
                for (int64_t b = bl; b < bh; b++) {
                    float *xo = dx + (b * d->c + c0 + cc) * g->hw;
                    const float *in = row + b * g->ohw;
                    for (int64_t oy = 0; oy < d->oh; oy++) {
                        int64_t iy = oy * d->stride_h - d->pad_h + r * d->dil_h;
                        if (iy < 0 || iy >= d->h) continue;
                        int64_t lo, hi;
                        valid_range(d->ow, d->stride_w, d->pad_w, s * d->dil_w, d->w, &lo, &hi);
                        float *dst = xo + iy * d->w - d->pad_w + s * d->dil_w;
                        const float *src = in + oy * d->ow;
                        if (d->stride_w == 1)
                            for (int64_t ox = lo; ox < hi; ox++) dst[ox] += src[ox];
                        else
                            for (int64_t ox = lo; ox < hi; ox++) dst[ox * d->stride_w] += src[ox];
                    }
                }
            }
}

PX_INLINE void px_widen_n(float *dst, const void *src, int dt, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = px_ld(src, dt, i);
}

/* f32 copy of a (k, c/g, kh, kw) weight in dt (scratch slot 2), or w
 * itself for f32 */
static const float *weight_f32(const void *w, phx_dtype dt, int64_t n)
{
    if (dt == PHX_F32) return w;
    float *f = px_cpu_scratch(2, (size_t)n * sizeof(float));
    if (f && dt == PHX_F16) px_widen_n(f, w, PHX_F16, n);
    if (f && dt == PHX_BF16) px_widen_n(f, w, PHX_BF16, n);
    return f;
}

/* (kg, nb ohw) block of y for group gi <-> NCHW images b0 .. b0+nb-1 */
PX_INLINE void px_gather_dy(const phx_conv2d_desc *d, const conv_geom *g, const void *dy, int dt, int64_t b0,
                            int64_t nb, int64_t bl, int64_t bh, int64_t gi, float *out)
{
    for (int64_t kk = 0; kk < g->kg; kk++)
        for (int64_t b = bl; b < bh; b++) {
            int64_t o = ((b0 + b) * d->k + gi * g->kg + kk) * g->ohw;
            float *dst = out + (kk * nb + b) * g->ohw;
            for (int64_t p = 0; p < g->ohw; p++) dst[p] = px_ld(dy, dt, o + p);
        }
}

PX_INLINE void px_scatter_y(const phx_conv2d_desc *d, const conv_geom *g, const float *in, const float *bias,
                            int64_t b0, int64_t nb, int64_t bl, int64_t bh, int64_t gi, void *y, int dt)
{
    for (int64_t kk = 0; kk < g->kg; kk++) {
        int64_t ch = gi * g->kg + kk;
        float bv = bias ? bias[ch] : 0.0f;
        for (int64_t b = bl; b < bh; b++) {
            int64_t o = ((b0 + b) * d->k + ch) * g->ohw;
            const float *src = in + (kk * nb + b) * g->ohw;
            for (int64_t p = 0; p < g->ohw; p++) px_st(y, dt, o + p, src[p] + bv);
        }
    }
}

/* The layout loops of a chunk of nb images starting at b0, split over
 * the thread budget by image (each part writes its own images' columns or
 * planes). */
typedef struct conv_job {
    const phx_conv2d_desc *d;
    const conv_geom *g;
    const void *src; /* x (im2col), dy (gather), the GEMM result (scatter), col (col2im) */
    void *dst;
    const float *bias;
    int dt;
    int64_t b0, nb, c0, gi;
} conv_job;

PX_CLONES static void im2col_part(void *arg, int64_t lo, int64_t hi)
{
    conv_job *j = arg;
    PX_FLOAT_CALL(j->dt, px_im2col(j->d, j->g, j->src, DT, j->b0, j->nb, lo, hi, j->c0, j->dst));
}

PX_CLONES static void gather_part(void *arg, int64_t lo, int64_t hi)
{
    conv_job *j = arg;
    PX_FLOAT_CALL(j->dt, px_gather_dy(j->d, j->g, j->src, DT, j->b0, j->nb, lo, hi, j->gi, j->dst));
}

PX_CLONES static void scatter_part(void *arg, int64_t lo, int64_t hi)
{
    conv_job *j = arg;
    PX_FLOAT_CALL(j->dt, px_scatter_y(j->d, j->g, j->src, j->bias, j->b0, j->nb, lo, hi, j->gi, j->dst, DT));
}

PX_CLONES static void col2im_part(void *arg, int64_t lo, int64_t hi)
{
    conv_job *j = arg;
    col2im(j->d, j->g, j->src, j->nb, lo, hi, j->c0, j->dst);
}

static void run_parts(px_range_fn fn, conv_job j)
{
    px_cpu_parallel_for(j.nb, 1, fn, &j);
}

/* CONV_FALLBACK: oneDNN, then the implicit GEMM where the kernels use
 * AVX-512 (a build without oneDNN, or a shape oneDNN declines) */
enum {
    CONV_IM2COL = PX_CONV_IM2COL,
    CONV_DNNL = PX_CONV_DNNL,
    CONV_AVX512 = PX_CONV_AVX512,
    CONV_WINOGRAD = PX_CONV_WINOGRAD,
    CONV_DIRECT = PX_CONV_DIRECT,
    CONV_FALLBACK = PX_CONV_FALLBACK
};

static const char *const conv_names[] = {
    [CONV_IM2COL] = "im2col",     [CONV_DNNL] = "dnnl",     [CONV_AVX512] = "avx512",
    [CONV_WINOGRAD] = "winograd", [CONV_DIRECT] = "direct", [CONV_FALLBACK] = "fallback"};

const char *px_cpu_conv2d_path_name(int path)
{
    return path >= 0 && path <= CONV_FALLBACK ? conv_names[path] : "?";
}

/* PHX_CPU_CONV=auto's fixed rule, for f32 (and f16, and bf16 without
 * oneDNN's bf16 kernels, all on f32 kernels: conv_half) where the kernels
 * use AVX-512, from what measured fastest on bench/kernels' shapes
 * (doc/guide/cnn.md):
 *   Winograd for the forward and data passes of 3 x 3 stride-1
 *   convolutions of 16 or more channels in and out, not both 16; with
 *   oneDNN in the build, oneDNN's f32 kernels take the weight pass and
 *   the 16-in, 16-out convolutions (at batch 128 they measured 15-35 %
 *   faster per CPU-second than F(2x2, 3x3) on every weight pass of
 *   examples/resnet's, examples/cnn's and bench/kernels' shapes, and on
 *   the forward and data passes of 16 x 16 channels at 28 x 28; the
 *   Winograd GEMMs' depth of 16 leaves its transforms the larger part);
 *   without oneDNN Winograd takes every pass of those convolutions;
 *   the direct kernel for the forward pass where c kh kw <= 27 and the
 *   weight pass where it is <= 9 (a first layer);
 * and oneDNN for the rest; where the build has no oneDNN or oneDNN has no
 * kernel, the implicit GEMM (faster than im2col on 7 of those 9 passes)
 * where the kernels use AVX-512, else im2col. f16, and bf16 without
 * oneDNN's bf16 kernels: Winograd for every pass of those convolutions,
 * 16 x 16 and the weight pass included, as it reads x and dy and writes
 * y in their 16-bit tensors (px_cpu_conv2d_winograd_dt) where oneDNN's
 * f32 kernels need widened copies and a rounding pass (on an Ice Lake
 * Xeon at batch 128 and one thread, the passes this moves took 0.65-0.82x
 * the time of the widened oneDNN ones, doc/guide/precision.md); the rest
 * as f32. bf16 where oneDNN has
 * bf16 kernels for this CPU (AVX512-BF16, AMX): the direct kernel where
 * f32 takes it, oneDNN's bf16 convolutions for every other pass (on
 * bench/step's CNN and ResNet at one thread they measured 1.4x the
 * widened Winograd per CPU-second, doc/guide/precision.md). */
static int winograd_rule(int pass, const phx_conv2d_desc *d, phx_dtype dt)
{
    if (d->c < 16 || d->k < 16) return 0;
    if (dt != PHX_F32) return 1; /* in place on Winograd, against widened copies for oneDNN */
#ifdef HAVE_DNNL
    return pass != 2 && d->c * d->k > 16 * 16;
#else
    (void)pass;
    return 1;
#endif
}

int px_cpu_conv2d_rule(int pass, const phx_conv2d_desc *d, phx_dtype dt)
{
    int native = dt == PHX_BF16 && px_cpu_dnnl_bf16_native();
    if (!native && px_cpu_isa() == PX_ISA_AVX512 && px_cpu_conv2d_winograd_takes(pass, d) && winograd_rule(pass, d, dt))
        return CONV_WINOGRAD;
    if (px_cpu_isa() == PX_ISA_AVX512 && px_cpu_conv2d_small_takes(pass, d) && (pass == 0 || d->c * d->kh * d->kw <= 9))
        return CONV_DIRECT;
    return dt == PHX_BF16 && px_cpu_dnnl_bf16_native() ? CONV_DNNL : CONV_FALLBACK;
}

/* the path a tuning measurement is timing on this thread; -1: none */
static __thread int trial_path = -1;

/* A tuning measurement's operands: zeros of the pass's shapes. */
typedef struct conv_trial {
    int pass;
    const phx_conv2d_desc *d;
    float *x, *w, *y, *dx, *dw, *db; /* y doubles as dy */
} conv_trial;

static phx_status conv_trial_run(void *arg, int path)
{
    conv_trial *t = arg;
    phx_status st;
    if (!t->x) { /* at the first run: a lookup that hits allocates nothing */
        const phx_conv2d_desc *d = t->d;
        size_t nx = (size_t)(d->n * d->c * d->h * d->w), nw = (size_t)(d->k * (d->c / d->groups) * d->kh * d->kw),
               ny = (size_t)(d->n * d->k * d->oh * d->ow);
        t->x = px_calloc(nx, sizeof(float)), t->dx = px_calloc(nx, sizeof(float));
        t->w = px_calloc(nw, sizeof(float)), t->dw = px_calloc(nw, sizeof(float));
        t->y = px_calloc(ny, sizeof(float)), t->db = px_calloc((size_t)d->k, sizeof(float));
        if (!t->x || !t->dx || !t->w || !t->dw || !t->y || !t->db) {
            px_free(t->x), px_free(t->dx), px_free(t->w), px_free(t->dw), px_free(t->y), px_free(t->db);
            t->x = t->dx = t->w = t->dw = t->y = t->db = NULL;
            return PHX_EUNSUPPORTED; /* nothing measured: the fixed rule */
        }
    }
    trial_path = path;
    if (t->pass == 0)
        st = px_cpu_conv2d_forward(0, t->d, t->x, t->w, t->db, t->y, PHX_F32);
    else if (t->pass == 1)
        st = px_cpu_conv2d_backward_data(0, t->d, t->y, t->w, t->dx, PHX_F32);
    else
        st = px_cpu_conv2d_backward_weight(0, t->d, t->x, t->y, t->dw, t->db, PHX_F32);
    trial_path = -1;
    return st;
}

/* The path of a convolution pass. PHX_CPU_CONV=im2col|dnnl|avx512|
 * winograd|direct forces one (the last three only where the kernels use
 * AVX-512; a pass the forced kernel does not take falls to oneDNN, then
 * im2col). auto (or unset): for f32, the tuning cache's choice for the
 * shape class (PHX_TUNE, src/tune/tune.h), else px_cpu_conv2d_rule;
 * f16/bf16 always take the rule (the cache times f32 kernels only). */
phx_status px_cpu_conv2d_path(int pass, const phx_conv2d_desc *d, phx_dtype dt, int *path)
{
    if (trial_path >= 0) {
        *path = trial_path;
        return PHX_OK;
    }
    const char *e = getenv("PHX_CPU_CONV");
    int force = -1;
    if (e && *e && strcmp(e, "auto") != 0) {
        if (!strcmp(e, "im2col"))
            force = CONV_IM2COL;
        else if (!strcmp(e, "dnnl"))
            force = CONV_DNNL;
        else if (!strcmp(e, "avx512"))
            force = CONV_AVX512;
        else if (!strcmp(e, "winograd"))
            force = CONV_WINOGRAD;
        else if (!strcmp(e, "direct"))
            force = CONV_DIRECT;
        else
            return phx_error(PHX_EINVAL,
                             "conv2d: PHX_CPU_CONV='%s', expected auto, im2col, dnnl, avx512, winograd or direct", e);
    }
    if (force >= CONV_AVX512 && px_cpu_isa() != PX_ISA_AVX512)
        return phx_error(PHX_EUNSUPPORTED, "conv2d: PHX_CPU_CONV=%s but the kernels use %s (PHX_CPU_ISA)", e,
                         px_cpu_isa_name(px_cpu_isa()));
    *path = force >= 0 ? force : px_cpu_conv2d_rule(pass, d, dt);
    if (dt != PHX_F32 || force >= 0 || px_tune_measuring()) return PHX_OK;
    px_tune_mode mode;
    phx_status st = px_tune_mode_get(&mode);
    if (st != PHX_OK || mode == PX_TUNE_OFF) return st;

    int avx512 = px_cpu_isa() == PX_ISA_AVX512;
    int usable[CONV_FALLBACK + 1] = {[CONV_IM2COL] = 1,
                                     [CONV_AVX512] = avx512 && px_cpu_conv2d_avx512_takes(pass, d),
                                     [CONV_WINOGRAD] = avx512 && px_cpu_conv2d_winograd_takes(pass, d),
                                     [CONV_DIRECT] = avx512 && px_cpu_conv2d_small_takes(pass, d)};
#ifdef HAVE_DNNL
    usable[CONV_DNNL] = 1;
#endif
    char key[200];
    size_t kl = 0;
    const struct {
        const char *sep;
        int64_t v;
    } parts[] = {{"conv", pass},      {" f32 n", px_tune_pow2(d->n)},
                 {" c", d->c},        {" k", d->k},
                 {" ", d->h},         {"x", d->w},
                 {" ", d->kh},        {"x", d->kw},
                 {" s", d->stride_h}, {"x", d->stride_w},
                 {" p", d->pad_h},    {"x", d->pad_w},
                 {" d", d->dil_h},    {"x", d->dil_w},
                 {" g", d->groups}};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        px_tune_key_str(key, &kl, sizeof key, parts[i].sep);
        px_tune_key_int(key, &kl, sizeof key, parts[i].v);
    }
    conv_trial t = {pass, d, NULL, NULL, NULL, NULL, NULL, NULL};
    st = px_tune_choose(key, conv_names, usable, CONV_FALLBACK + 1, *path, conv_trial_run, &t, path);
    px_free(t.x), px_free(t.dx), px_free(t.w), px_free(t.dw), px_free(t.y), px_free(t.db);
    return st;
}

/* The pass on the AVX-512 GEMM or oneDNN as conv_path says: PHX_EUNSUPPORTED
 * (nothing written, no error) leaves it to im2col. */
static phx_status conv_fast(int path, int pass, const phx_conv2d_desc *d, const float *x, const float *w,
                            const float *bias, const float *dy, float *y, float *dx, float *dw, float *db)
{
    phx_status st = PHX_EUNSUPPORTED;
    if (path == CONV_AVX512) st = px_cpu_conv2d_avx512(pass, d, x, w, bias, dy, y, dx, dw, db);
    if (path == CONV_WINOGRAD) st = px_cpu_conv2d_winograd(pass, d, x, w, bias, dy, y, dx, dw, db);
    if (path == CONV_DIRECT) st = px_cpu_conv2d_small(pass, d, x, w, bias, dy, y, dw, db);
    if (st != PHX_EUNSUPPORTED || path == CONV_IM2COL) return st;
    st = px_cpu_conv2d_dnnl(pass, d, x, w, bias, dy, y, dx, dw, db);
    if (st == PHX_EUNSUPPORTED && path == CONV_FALLBACK && px_cpu_isa() == PX_ISA_AVX512)
        st = px_cpu_conv2d_avx512(pass, d, x, w, bias, dy, y, dx, dw, db);
    return st;
}

/* Whether conv_fast may take the path rather than leave it to im2col:
 * the fallback needs oneDNN or the implicit GEMM. */
static int fast_possible(int path)
{
    if (path == CONV_IM2COL) return 0;
#ifdef HAVE_DNNL
    return 1;
#else
    return path != CONV_FALLBACK || px_cpu_isa() == PX_ISA_AVX512;
#endif
}

/* A cast of n elements split over the thread budget (the conversions of
 * one batch of images are too long for one core at 2 threads). */
typedef struct conv_cast {
    void *dst;
    const void *src;
    phx_dtype dt, st;
    phx_status err;
} conv_cast;

static void cast_part(void *arg, int64_t lo, int64_t hi)
{
    conv_cast *c = arg;
    size_t od = phx_dtype_size(c->dt), os = phx_dtype_size(c->st);
    phx_status st = px_cpu_half_cast_here((char *)c->dst + (size_t)lo * od, c->dt,
                                          (const char *)c->src + (size_t)lo * os, c->st, hi - lo);
    if (st != PHX_OK) c->err = st; /* only a bug: the dtypes are checked */
}

static phx_status cast_split(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    conv_cast c = {dst, src, dt, st, PHX_OK};
    px_cpu_parallel_for(n, (int64_t)1 << 15, cast_part, &c);
    return c.err;
}

/* n elements of src (f16/bf16) widened, exactly, into scratch slot */
static float *widened(int slot, const void *src, phx_dtype dt, int64_t n)
{
    float *f = px_cpu_scratch(slot, (size_t)(n > 0 ? n : 1) * sizeof(float));
    return f && cast_split(f, PHX_F32, src, dt, n) == PHX_OK ? f : NULL;
}

/* A 1 x 1 convolution with stride s > 1 and no padding (ResNet's
 * projection shortcuts) reads only every s-th pixel of every s-th row:
 * under auto (f32, the fixed rule's CONV_FALLBACK, which oneDNN and the
 * implicit GEMM decline for this shape, leaving im2col), the pixels it
 * reads are copied into an (n, c, oh, ow) image in scratch slot 7 (which
 * the f32 kernels never touch) and the pass runs as the stride-1 1 x 1
 * convolution of that image, on oneDNN's 1 x 1 kernel (CONV_FALLBACK:
 * the direct kernel the rule gives a stride-1 1 x 1 forward pass of at
 * most 27 channels was 2x slower on it), on im2col where no fast path
 * takes it; the data pass writes its gradient back into those pixels of
 * dx, zeros elsewhere. f16 and bf16 on the f32 kernels do the same,
 * gathering from and scattering into their tensors (conv_half_strided_1x1),
 * so they keep the f32 path's bits. At
 * batch 128 on examples/resnet's two projections (16 -> 32 at 28 x 28,
 * 32 -> 64 at 14 x 14) the three passes took 1.6 ms of oneDNN plus the
 * copies, against 5.3 ms on im2col. */
static int strided_1x1(const phx_conv2d_desc *d)
{
    return d->kh == 1 && d->kw == 1 && d->pad_h == 0 && d->pad_w == 0 && d->groups == 1 &&
        (d->stride_h > 1 || d->stride_w > 1) && d->n >= 1;
}

typedef struct sub_job {
    const phx_conv2d_desc *d;
    const float *src;
    float *dst;
} sub_job;

/* planes [lo, hi) of the n c planes: x's strided pixels into the image */
static void subsample_part(void *arg, int64_t lo, int64_t hi)
{
    const sub_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    for (int64_t p = lo; p < hi; p++) {
        const float *x = j->src + p * d->h * d->w;
        float *o = j->dst + p * d->oh * d->ow;
        for (int64_t i = 0; i < d->oh; i++) {
            const float *r = x + i * d->stride_h * d->w;
            for (int64_t jj = 0; jj < d->ow; jj++) o[i * d->ow + jj] = r[jj * d->stride_w];
        }
    }
}

/* planes [lo, hi): the image's gradient into dx's strided pixels, zeros
 * elsewhere */
static void upsample_part(void *arg, int64_t lo, int64_t hi)
{
    const sub_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    for (int64_t p = lo; p < hi; p++) {
        const float *g = j->src + p * d->oh * d->ow;
        float *dx = j->dst + p * d->h * d->w;
        memset(dx, 0, (size_t)(d->h * d->w) * sizeof(float));
        for (int64_t i = 0; i < d->oh; i++) {
            float *r = dx + i * d->stride_h * d->w;
            for (int64_t jj = 0; jj < d->ow; jj++) r[jj * d->stride_w] = g[i * d->ow + jj];
        }
    }
}

/* The stride-1 descriptor of the subsampled image. */
static void subsampled_desc(const phx_conv2d_desc *d, phx_conv2d_desc *d1)
{
    *d1 = *d;
    d1->h = d->oh, d1->w = d->ow, d1->stride_h = d1->stride_w = 1, d1->dil_h = d1->dil_w = 1;
}

/* That descriptor, and the image of x in scratch slot 7 (x NULL: the
 * buffer only). */
static float *subsampled(const phx_conv2d_desc *d, const float *x, phx_conv2d_desc *d1)
{
    subsampled_desc(d, d1);
    float *img = px_cpu_scratch(7, (size_t)(d->n * d->c * d->oh * d->ow) * sizeof(float));
    if (img && x) {
        sub_job j = {d, x, img};
        px_cpu_parallel_for(d->n * d->c, 1, subsample_part, &j);
    }
    return img;
}

static phx_status sub_pass(int dev, int pass, const phx_conv2d_desc *d1, const float *x, const float *w,
                           const float *bias, const float *dy, float *y, float *dx, float *dw, float *db)
{
    phx_status st = conv_fast(CONV_FALLBACK, pass, d1, x, w, bias, dy, y, dx, dw, db);
    if (st != PHX_EUNSUPPORTED) return st;
    if (pass == 0) return px_cpu_conv2d_forward(dev, d1, x, w, bias, y, PHX_F32);
    if (pass == 1) return px_cpu_conv2d_backward_data(dev, d1, dy, w, dx, PHX_F32);
    return px_cpu_conv2d_backward_weight(dev, d1, x, dy, dw, db, PHX_F32);
}

/* The strided 1 x 1 route for f16/bf16: x's strided pixels gathered
 * straight from the f16/bf16 tensor and widened into the subsampled image
 * (scratch slot 7), and the image's f32 gradient rounded straight into
 * dx's strided pixels, zeros elsewhere -- instead of widening all of x
 * (stride^2 times the pixels the pass reads) and moving pixels in place
 * one at a time. Planes split over the pool. The values are those of the
 * in-place route (widening is exact, rounding is per element), so the
 * bits are too. */
typedef struct half_sub_job {
    const phx_conv2d_desc *d;
    phx_dtype dt;
    const uint16_t *x; /* gather: x into img */
    float *img;
    const float *g; /* scatter: g into dx */
    uint16_t *dx;
    phx_status st;
} half_sub_job;

#define HALF_SUB_CHUNK 1024

static void half_subsample_part(void *arg, int64_t lo, int64_t hi)
{
    half_sub_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    uint16_t t[HALF_SUB_CHUNK];
    int64_t ohw = d->oh * d->ow;
    for (int64_t p = lo; p < hi; p++) {
        const uint16_t *x = j->x + p * d->h * d->w;
        float *o = j->img + p * ohw;
        for (int64_t e0 = 0; e0 < ohw; e0 += HALF_SUB_CHUNK) {
            int64_t e1 = ohw - e0 < HALF_SUB_CHUNK ? ohw : e0 + HALF_SUB_CHUNK;
            for (int64_t e = e0, r = e0 / d->ow, c = e0 % d->ow; e < e1; e++) {
                t[e - e0] = x[r * d->stride_h * d->w + c * d->stride_w];
                if (++c == d->ow) c = 0, r++;
            }
            phx_status st = px_cpu_half_cast_here(o + e0, PHX_F32, t, j->dt, e1 - e0);
            px_cpu_part_fail(&j->st, st);
        }
    }
}

static void half_upsample_part(void *arg, int64_t lo, int64_t hi)
{
    half_sub_job *j = arg;
    const phx_conv2d_desc *d = j->d;
    uint16_t t[HALF_SUB_CHUNK];
    int64_t ohw = d->oh * d->ow;
    for (int64_t p = lo; p < hi; p++) {
        const float *g = j->g + p * ohw;
        uint16_t *dx = j->dx + p * d->h * d->w;
        memset(dx, 0, (size_t)(d->h * d->w) * 2); /* +0 in f16 and bf16 */
        for (int64_t e0 = 0; e0 < ohw; e0 += HALF_SUB_CHUNK) {
            int64_t e1 = ohw - e0 < HALF_SUB_CHUNK ? ohw : e0 + HALF_SUB_CHUNK;
            phx_status st = px_cpu_half_cast_here(t, j->dt, g + e0, PHX_F32, e1 - e0);
            px_cpu_part_fail(&j->st, st);
            for (int64_t e = e0, r = e0 / d->ow, c = e0 % d->ow; e < e1; e++) {
                dx[r * d->stride_h * d->w + c * d->stride_w] = t[e - e0];
                if (++c == d->ow) c = 0, r++;
            }
        }
    }
}

static phx_status conv_half_strided_1x1(int pass, const phx_conv2d_desc *d, const void *x, const void *w,
                                        const float *bias, const void *dy, void *y, void *dx, float *dw, float *db,
                                        phx_dtype dt)
{
    phx_conv2d_desc d1;
    subsampled_desc(d, &d1);
    int64_t planes = d->n * d->c, n1 = planes * d->oh * d->ow, ny = d->n * d->k * d->oh * d->ow;
    int64_t nw = d->k * (d->c / d->groups) * d->kh * d->kw;
    float *img = NULL, *wf = NULL, *dyf = NULL, *yf = NULL;
    half_sub_job j = {d, dt, x, NULL, NULL, dx, PHX_OK};
    int64_t grain = d->oh * d->ow >= 4096 ? 1 : 4096 / (d->oh * d->ow > 0 ? d->oh * d->ow : 1);
    if ((x || dx) && !(img = px_cpu_scratch(7, (size_t)(n1 > 0 ? n1 : 1) * sizeof(float)))) return PHX_ENOMEM;
    if (w && !(wf = widened(8, w, dt, nw))) return PHX_ENOMEM;
    if (dy && !(dyf = widened(9, dy, dt, ny))) return PHX_ENOMEM;
    if (y && !(yf = px_cpu_scratch(9, (size_t)(ny > 0 ? ny : 1) * sizeof(float)))) return PHX_ENOMEM;
    if (x) {
        j.img = img;
        px_cpu_parallel_for(planes, grain, half_subsample_part, &j);
        if (j.st != PHX_OK) return j.st;
    }
    phx_status st = sub_pass(0, pass, &d1, x ? img : NULL, wf, bias, dyf, yf, dx ? img : NULL, dw, db);
    if (st != PHX_OK) return st;
    if (y) return cast_split(y, dt, yf, PHX_F32, ny);
    if (dx) {
        j.g = img;
        px_cpu_parallel_for(planes, grain, half_upsample_part, &j);
        return j.st;
    }
    return PHX_OK;
}

/* An f16/bf16 pass: bf16 on oneDNN when path is CONV_DNNL and oneDNN
 * has bf16 kernels for this CPU; otherwise on the f32 kernels of path: x,
 * w and dy widened into
 * scratch slots 7, 8 and 9 (the f32 kernels use 0 .. 6), the pass run in
 * f32, and y or dx rounded to dt once per element; dw and db are f32 and
 * accumulate as in f32. So the result is the f32 path's on the widened
 * operands, rounded once (t/tensor/conv checks it bit for bit; oneDNN's
 * bf16 kernels sum in another order, within a rounding of it).
 * PHX_EUNSUPPORTED (nothing written) where the kernels decline. */
static phx_status conv_half(int path, int pass, const phx_conv2d_desc *d, const void *x, const void *w,
                            const float *bias, const void *dy, void *y, void *dx, float *dw, float *db, phx_dtype dt)
{
    /* oneDNN's bf16 kernels: no copies, f32 accumulation, one rounding */
    if (dt == PHX_BF16 && path == CONV_DNNL && px_cpu_dnnl_bf16_native()) {
        phx_status st = px_cpu_conv2d_dnnl_dt(pass, d, dt, x, w, bias, dy, y, dx, dw, db);
        if (st != PHX_EUNSUPPORTED) return st;
    }
    if (path == CONV_FALLBACK && strided_1x1(d)) /* the f32 pass's route, on the pixels it reads */
        return conv_half_strided_1x1(pass, d, x, w, bias, dy, y, dx, dw, db, dt);
    int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->k * d->oh * d->ow;
    int64_t nw = d->k * (d->c / d->groups) * d->kh * d->kw;
    float *xf = NULL, *wf = NULL, *dyf = NULL, *yf = NULL, *dxf = NULL;
    if (path == CONV_WINOGRAD && px_cpu_conv2d_winograd_takes(pass, d)) {
        /* x, dy and y read and written as they are; the weight (small)
         * widened; dx through f32 (its patches add up) */
        if (w && !(wf = widened(8, w, dt, nw))) return PHX_ENOMEM;
        if (dx && !(dxf = px_cpu_scratch(7, (size_t)(nx > 0 ? nx : 1) * sizeof(float)))) return PHX_ENOMEM;
        phx_status st = px_cpu_conv2d_winograd_dt(pass, d, dt, x, wf, bias, dy, y, dxf, dw, db);
        if (st != PHX_OK || !dx) return st;
        return cast_split(dx, dt, dxf, PHX_F32, nx);
    }
    if (x && !(xf = widened(7, x, dt, nx))) return PHX_ENOMEM;
    if (w && !(wf = widened(8, w, dt, nw))) return PHX_ENOMEM;
    if (dy && !(dyf = widened(9, dy, dt, ny))) return PHX_ENOMEM;
    /* the f32 output in the slot of the operand the pass does not read */
    if (y && !(yf = px_cpu_scratch(9, (size_t)(ny > 0 ? ny : 1) * sizeof(float)))) return PHX_ENOMEM;
    if (dx && !(dxf = px_cpu_scratch(7, (size_t)(nx > 0 ? nx : 1) * sizeof(float)))) return PHX_ENOMEM;
    phx_status st = conv_fast(path, pass, d, xf, wf, bias, dyf, yf, dxf, dw, db);
    if (st != PHX_OK) return st;
    if (y) return cast_split(y, dt, yf, PHX_F32, ny);
    if (dx) return cast_split(dx, dt, dxf, PHX_F32, nx);
    return PHX_OK;
}

static phx_status col_scratch(const conv_geom *g, float **col, float **blk)
{
    *col = px_cpu_scratch(0, (size_t)(g->rows * g->chunk * g->ohw) * sizeof(float));
    *blk = px_cpu_scratch(1, (size_t)(g->kg * g->chunk * g->ohw) * sizeof(float));
    return *col && *blk ? PHX_OK : PHX_ENOMEM;
}

phx_status px_cpu_conv2d_forward(int dev, const phx_conv2d_desc *d, const void *x, const void *w, const float *bias,
                                 void *y, phx_dtype dt)
{
    conv_geom g;
    phx_status st = conv_check("conv2d_forward", d, &g);
    if (st != PHX_OK) return st;
    if (!phx_dtype_is_float(dt))
        return phx_error(PHX_EINVAL, "conv2d_forward: dtype %s, expected f32, f16 or bf16", phx_dtype_name(dt));
    int path;
    if ((st = px_cpu_conv2d_path(0, d, dt, &path)) != PHX_OK) return st;
    if (dt != PHX_F32 && fast_possible(path) &&
        (st = conv_half(path, 0, d, x, w, bias, NULL, y, NULL, NULL, NULL, dt)) != PHX_EUNSUPPORTED)
        return st;
    if (dt == PHX_F32 && path == CONV_FALLBACK && strided_1x1(d)) {
        phx_conv2d_desc d1;
        float *img = subsampled(d, x, &d1);
        return img ? sub_pass(dev, 0, &d1, img, w, bias, NULL, y, NULL, NULL, NULL) : PHX_ENOMEM;
    }
    if (dt == PHX_F32 && (st = conv_fast(path, 0, d, x, w, bias, NULL, y, NULL, NULL, NULL)) != PHX_EUNSUPPORTED)
        return st;
    float *col, *blk;
    const float *wf = weight_f32(w, dt, d->k * g.rows);
    if (!wf || (st = col_scratch(&g, &col, &blk)) != PHX_OK) return PHX_ENOMEM;
    for (int64_t b0 = 0; b0 < d->n; b0 += g.chunk) {
        int64_t nb = d->n - b0 < g.chunk ? d->n - b0 : g.chunk;
        for (int64_t gi = 0; gi < d->groups; gi++) {
            run_parts(im2col_part, (conv_job){d, &g, x, col, NULL, dt, b0, nb, gi * g.cg, gi});
            st = px_cpu_gemm(dev, 0, 0, g.kg, nb * g.ohw, g.rows, 1.0f, wf + gi * g.kg * g.rows, g.rows, col,
                             nb * g.ohw, PHX_F32, 0.0f, blk, nb * g.ohw, PHX_F32);
            if (st != PHX_OK) return st;
            run_parts(scatter_part, (conv_job){d, &g, blk, y, bias, dt, b0, nb, 0, gi});
        }
    }
    return PHX_OK;
}

phx_status px_cpu_conv2d_backward_data(int dev, const phx_conv2d_desc *d, const void *dy, const void *w, void *dx,
                                       phx_dtype dt)
{
    conv_geom g;
    phx_status st = conv_check("conv2d_backward_data", d, &g);
    if (st != PHX_OK) return st;
    if (!phx_dtype_is_float(dt))
        return phx_error(PHX_EINVAL, "conv2d_backward_data: dtype %s, expected f32, f16 or bf16", phx_dtype_name(dt));
    int path;
    if ((st = px_cpu_conv2d_path(1, d, dt, &path)) != PHX_OK) return st;
    if (dt != PHX_F32 && fast_possible(path) &&
        (st = conv_half(path, 1, d, NULL, w, NULL, dy, NULL, dx, NULL, NULL, dt)) != PHX_EUNSUPPORTED)
        return st;
    if (dt == PHX_F32 && path == CONV_FALLBACK && strided_1x1(d)) {
        phx_conv2d_desc d1;
        float *img = subsampled(d, NULL, &d1);
        if (!img) return PHX_ENOMEM;
        if ((st = sub_pass(dev, 1, &d1, NULL, w, NULL, dy, NULL, img, NULL, NULL)) != PHX_OK) return st;
        sub_job j = {d, img, dx};
        px_cpu_parallel_for(d->n * d->c, 1, upsample_part, &j);
        return PHX_OK;
    }
    if (dt == PHX_F32 && (st = conv_fast(path, 1, d, NULL, w, NULL, dy, NULL, dx, NULL, NULL)) != PHX_EUNSUPPORTED)
        return st;
    float *col, *blk;
    const float *wf = weight_f32(w, dt, d->k * g.rows);
    if (!wf || (st = col_scratch(&g, &col, &blk)) != PHX_OK) return PHX_ENOMEM;
    /* f32 dx accumulates in place; f16/bf16 through an f32 image chunk */
    int64_t img = d->c * g.hw;
    float *acc = dt == PHX_F32 ? dx : px_cpu_scratch(3, (size_t)(g.chunk * img) * sizeof(float));
    if (!acc) return PHX_ENOMEM;
    for (int64_t b0 = 0; b0 < d->n; b0 += g.chunk) {
        int64_t nb = d->n - b0 < g.chunk ? d->n - b0 : g.chunk;
        float *a = dt == PHX_F32 ? acc + b0 * img : acc; /* the chunk's first image */
        memset(a, 0, (size_t)(nb * img) * sizeof(float));
        for (int64_t gi = 0; gi < d->groups; gi++) {
            run_parts(gather_part, (conv_job){d, &g, dy, blk, NULL, dt, b0, nb, 0, gi});
            st = px_cpu_gemm(dev, 1, 0, g.rows, nb * g.ohw, g.kg, 1.0f, wf + gi * g.kg * g.rows, g.rows, blk,
                             nb * g.ohw, PHX_F32, 0.0f, col, nb * g.ohw, PHX_F32);
            if (st != PHX_OK) return st;
            run_parts(col2im_part, (conv_job){d, &g, col, a, NULL, dt, b0, nb, gi * g.cg, gi});
        }
        if (dt != PHX_F32 && (st = px_cpu_cast(dev, (uint16_t *)dx + b0 * img, dt, acc, PHX_F32, nb * img)) != PHX_OK)
            return st;
    }
    return PHX_OK;
}

phx_status px_cpu_conv2d_backward_weight(int dev, const phx_conv2d_desc *d, const void *x, const void *dy, float *dw,
                                         float *db, phx_dtype dt)
{
    conv_geom g;
    phx_status st = conv_check("conv2d_backward_weight", d, &g);
    if (st != PHX_OK) return st;
    if (!phx_dtype_is_float(dt))
        return phx_error(PHX_EINVAL, "conv2d_backward_weight: dtype %s, expected f32, f16 or bf16", phx_dtype_name(dt));
    int path;
    if ((st = px_cpu_conv2d_path(2, d, dt, &path)) != PHX_OK) return st;
    if (dt != PHX_F32 && fast_possible(path) &&
        (st = conv_half(path, 2, d, x, NULL, NULL, dy, NULL, NULL, dw, db, dt)) != PHX_EUNSUPPORTED)
        return st;
    if (dt == PHX_F32 && path == CONV_FALLBACK && strided_1x1(d)) {
        phx_conv2d_desc d1;
        float *img = subsampled(d, x, &d1);
        return img ? sub_pass(dev, 2, &d1, img, NULL, NULL, dy, NULL, NULL, dw, db) : PHX_ENOMEM;
    }
    if (dt == PHX_F32 && (st = conv_fast(path, 2, d, x, NULL, NULL, dy, NULL, NULL, dw, db)) != PHX_EUNSUPPORTED)
        return st;
    float *col, *blk;
    if ((st = col_scratch(&g, &col, &blk)) != PHX_OK) return PHX_ENOMEM;
    for (int64_t b0 = 0; b0 < d->n; b0 += g.chunk) {
        int64_t nb = d->n - b0 < g.chunk ? d->n - b0 : g.chunk, cols = nb * g.ohw;
        for (int64_t gi = 0; gi < d->groups; gi++) {
            run_parts(im2col_part, (conv_job){d, &g, x, col, NULL, dt, b0, nb, gi * g.cg, gi});
            run_parts(gather_part, (conv_job){d, &g, dy, blk, NULL, dt, b0, nb, 0, gi});
            st = px_cpu_gemm(dev, 0, 1, g.kg, g.rows, cols, 1.0f, blk, cols, col, cols, PHX_F32, 1.0f,
                             dw + gi * g.kg * g.rows, g.rows, PHX_F32);
            if (st != PHX_OK) return st;
            if (db)
                for (int64_t kk = 0; kk < g.kg; kk++) {
                    const float *r = blk + kk * cols;
                    double s = 0.0;
                    for (int64_t i = 0; i < cols; i++) s += r[i];
                    db[gi * g.kg + kk] += (float)s;
                }
        }
    }
    return PHX_OK;
}
