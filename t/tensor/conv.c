/* The CPU convolution kernels on every path PHX_CPU_CONV forces (im2col;
 * oneDNN where built with it; the AVX-512 implicit GEMM and Winograd
 * F(2x2, 3x3) where the kernels use AVX-512) against a float64 direct
 * convolution: forward (with and without bias), backward data, and
 * backward weight adding into a dW (and dB) that already holds values.
 * The shapes cover narrow images (two tile rows per vector), rows of more
 * than 16 tiles, several chunks, padding 0-2, odd sizes and channel
 * counts, 1x1 (also with stride 2, which auto runs on a subsampled copy
 * of the image: checked on its own), 5x5, dilation, stride 2 and groups (which the AVX-512
 * paths hand to oneDNN or im2col), one input channel, and a 4x4 "same"
 * convolution whose output is taller than the formula (padding one more
 * at the bottom and right). The bound: |got - ref| <= tol * sum |terms|
 * of the reference, per element. Then: the AVX-512 paths give the same
 * bits on 1 and 3 threads; auto gives Winograd's bits where it takes the
 * pass, the direct kernel's for one input channel and oneDNN's (im2col's)
 * elsewhere; f16 and bf16 passes on every path and auto give the f32
 * path's result on the widened operands rounded once per output (dx, y),
 * and its dw and db exactly, bit for bit, except bf16 on oneDNN's bf16
 * kernels (PHX_CPU_CONV=dnnl, and auto, where oneDNN has them for this
 * CPU), which sum in their own order: within a bf16 rounding of the f32
 * result plus 3e-6 of the sum of |terms|. auto's f16/bf16 passes of 3x3
 * stride-1 convolutions with 16+ channels (a 16 x 16 shape among them)
 * run on Winograd in the 16-bit tensors: the f32 Winograd's bits, with
 * NaNs and infinities in x and dy too. A bad PHX_CPU_CONV names the
 * choices. */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "t/core-util.h"

typedef struct shape {
    phx_conv2d_desc d;
    int bias;
} shape;

/* n, c, h, w, k, kh, kw, oh, ow, stride, pad, dil, groups */
#define D(n, c, h, w, k, kh, kw, oh, ow, s, p, dl, g) \
    { \
        n, c, h, w, k, kh, kw, oh, ow, s, s, p, p, dl, dl, g \
    }
static const shape shapes[] = {
    {D(2, 3, 5, 6, 4, 3, 3, 5, 6, 1, 1, 1, 1), 1}, /* tiny: 3 tiles a row, two rows a vector */
    {D(3, 19, 37, 35, 21, 3, 3, 37, 35, 1, 1, 1, 1), 0}, /* 18 tiles a row, several chunks */
    {D(5, 16, 13, 13, 24, 3, 3, 11, 11, 1, 0, 1, 1), 1}, /* bench's conv2, narrower */
    {D(3, 7, 17, 16, 9, 3, 3, 17, 16, 1, 1, 1, 1), 0}, /* 8 tiles a row: two rows fill 16 lanes; 9 tile rows */
    {D(1, 8, 9, 40, 16, 3, 3, 11, 42, 1, 2, 1, 1), 1}, /* padding 2: the data pass unpadded */
    {D(2, 32, 14, 14, 17, 1, 1, 14, 14, 1, 0, 1, 1), 1}, /* 1x1 */
    {D(2, 5, 12, 11, 7, 5, 5, 12, 11, 1, 2, 1, 1), 0}, /* 5x5 */
    {D(2, 6, 15, 13, 8, 3, 3, 15, 13, 1, 2, 2, 1), 1}, /* dilation 2 */
    {D(2, 4, 11, 10, 6, 3, 3, 6, 5, 2, 1, 1, 1), 1}, /* stride 2 */
    {D(2, 4, 8, 8, 6, 3, 3, 8, 8, 1, 1, 1, 2), 1}, /* groups 2 */
    {D(4, 1, 28, 28, 8, 3, 3, 26, 26, 1, 0, 1, 1), 1}, /* one input channel */
    {D(2, 3, 8, 8, 4, 4, 4, 8, 8, 1, 1, 1, 1), 1}, /* 4x4 "same": one more at the bottom and right */
    {D(3, 8, 11, 10, 12, 1, 1, 6, 5, 2, 0, 1, 1), 1}, /* 1x1 stride 2 (a projection shortcut); column 9 unread */
    {D(2, 16, 10, 9, 16, 3, 3, 10, 9, 1, 1, 1, 1), 1}, /* 16 in, 16 out: f32 auto on oneDNN, f16/bf16 on Winograd */
    {D(6, 64, 9, 9, 64, 3, 3, 9, 9, 1, 1, 1, 1), 0}, /* 25 tiles an image, Winograd's chunks of 96 cut images */
};
#define SCHUNKS 14 /* its index: threads taking whole images still see the batch's chunks */
#define S1X1 12 /* its index: auto subsamples it and runs the stride-1 1x1 convolution */
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const char *paths[] = {"im2col", "dnnl", "avx512", "winograd", "direct"};
#define NPATHS 5

typedef struct data {
    float *x, *w, *b, *dy;
    double *y, *dx, *dw, *db, *ay, *adx, *adw, *adb; /* the reference and its sums of |terms| */
    size_t nx, nw, ny;
} data;

/* x[b][ci][iy][ix] for output (oy, ox) and tap (r, s), or -1 outside */
static int64_t at_input(const phx_conv2d_desc *d, int64_t b, int64_t ci, int64_t oy, int64_t ox, int64_t r, int64_t s)
{
    int64_t iy = oy * d->stride_h - d->pad_h + r * d->dil_h, ix = ox * d->stride_w - d->pad_w + s * d->dil_w;
    if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) return -1;
    return ((b * d->c + ci) * d->h + iy) * d->w + ix;
}

static void reference(const phx_conv2d_desc *d, data *t)
{
    int64_t cg = d->c / d->groups, kg = d->k / d->groups;
    memset(t->dx, 0, t->nx * sizeof(double)), memset(t->adx, 0, t->nx * sizeof(double));
    memset(t->dw, 0, t->nw * sizeof(double)), memset(t->adw, 0, t->nw * sizeof(double));
    memset(t->db, 0, (size_t)d->k * sizeof(double)), memset(t->adb, 0, (size_t)d->k * sizeof(double));
    for (int64_t b = 0; b < d->n; b++)
        for (int64_t co = 0; co < d->k; co++)
            for (int64_t oy = 0; oy < d->oh; oy++)
                for (int64_t ox = 0; ox < d->ow; ox++) {
                    int64_t yi = ((b * d->k + co) * d->oh + oy) * d->ow + ox;
                    double s = t->b[co], a = fabs(t->b[co]), g = t->dy[yi];
                    t->db[co] += g, t->adb[co] += fabs(g);
                    for (int64_t cc = 0; cc < cg; cc++)
                        for (int64_t r = 0; r < d->kh; r++)
                            for (int64_t q = 0; q < d->kw; q++) {
                                int64_t ci = co / kg * cg + cc, xi = at_input(d, b, ci, oy, ox, r, q);
                                int64_t wi = ((co * cg + cc) * d->kh + r) * d->kw + q;
                                if (xi < 0) continue;
                                s += (double)t->w[wi] * t->x[xi], a += fabs((double)t->w[wi] * t->x[xi]);
                                t->dx[xi] += (double)t->w[wi] * g, t->adx[xi] += fabs((double)t->w[wi] * g);
                                t->dw[wi] += (double)t->x[xi] * g, t->adw[wi] += fabs((double)t->x[xi] * g);
                            }
                    t->y[yi] = s, t->ay[yi] = a;
                }
}

/* the worst |got - ref| / (sum |terms| + 1e-30) over n values */
static double worst(const float *got, const double *ref, const double *abs_sum, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(got[i] - ref[i]) / (abs_sum[i] + 1e-30));
    return e;
}

/* the three passes on the path (NULL: auto) into y, dx, dw (dw and db
 * start at 0.5 each, the reference's sums then added) */
static phx_status passes(const char *path, const phx_conv2d_desc *d, const data *t, int bias, float *y, float *dx,
                         float *dw, float *db)
{
    const phx_kernels_v1 *K = cu_kernels();
    if (path)
        setenv("PHX_CPU_CONV", path, 1);
    else
        unsetenv("PHX_CPU_CONV");
    for (size_t i = 0; i < t->nw; i++) dw[i] = 0.5f;
    for (int64_t i = 0; i < d->k; i++) db[i] = 0.5f;
    phx_status st = K->conv2d_forward(0, d, t->x, t->w, bias ? t->b : NULL, y, PHX_F32);
    if (st == PHX_OK) st = K->conv2d_backward_data(0, d, t->dy, t->w, dx, PHX_F32);
    if (st == PHX_OK) st = K->conv2d_backward_weight(0, d, t->x, t->dy, dw, bias ? db : NULL, PHX_F32);
    unsetenv("PHX_CPU_CONV");
    return st;
}

/* Whether the f16/bf16 passes on path (NULL: auto) give the f32 passes'
 * bits on path ref (NULL: auto) on the same values: x, w, dy rounded to
 * dt, widened for the f32 run; y and dx of the half run against the f32
 * run's rounded with the scalar rounding of kernels/math.h; dw and db
 * (f32) equal. With specials, x and dy also hold a signalling NaN, a
 * negative quiet NaN, a NaN with a payload and infinities. */
static int half_same(const char *path, const char *ref, phx_dtype dt, const phx_conv2d_desc *d, const data *t, int bias,
                     int near, int specials)
{
    const phx_kernels_v1 *K = cu_kernels();
    int bf = dt == PHX_BF16;
    size_t nx = t->nx, nw = t->nw, ny = t->ny, nk = (size_t)d->k;
    uint16_t *hx = malloc(nx * 2), *hw = malloc(nw * 2), *hdy = malloc(ny * 2), *hy = malloc(ny * 2),
             *hdx = malloc(nx * 2);
    float *fx = malloc(nx * 4), *fw = malloc(nw * 4), *fdy = malloc(ny * 4), *fy = malloc(ny * 4),
          *fdx = malloc(nx * 4);
    float *fdw = malloc(nw * 4), *fdb = malloc(nk * 4), *hdw = malloc(nw * 4), *hdb = malloc(nk * 4);
    int same = hx && hw && hdy && hy && hdx && fx && fw && fdy && fy && fdx && fdw && fdb && hdw && hdb;
    for (size_t i = 0; same && i < nx; i++)
        hx[i] = bf ? phx_f32_to_bf16(t->x[i]) : phx_f32_to_f16(t->x[i]),
        fx[i] = bf ? phx_bf16_to_f32(hx[i]) : phx_f16_to_f32(hx[i]);
    for (size_t i = 0; same && i < nw; i++)
        hw[i] = bf ? phx_f32_to_bf16(t->w[i]) : phx_f32_to_f16(t->w[i]),
        fw[i] = bf ? phx_bf16_to_f32(hw[i]) : phx_f16_to_f32(hw[i]);
    for (size_t i = 0; same && i < ny; i++)
        hdy[i] = bf ? phx_f32_to_bf16(t->dy[i]) : phx_f32_to_f16(t->dy[i]),
        fdy[i] = bf ? phx_bf16_to_f32(hdy[i]) : phx_f16_to_f32(hdy[i]);
    if (same && specials) { /* sNaN, -qNaN, +inf in x; +inf, -inf, a payload NaN in dy */
        uint16_t sx[3] = {bf ? 0x7f81 : 0x7d01, bf ? 0xffc0 : 0xfe00, bf ? 0x7f80 : 0x7c00};
        uint16_t sdy[3] = {bf ? 0x7f80 : 0x7c00, bf ? 0xff80 : 0xfc00, bf ? 0x7fc5 : 0x7e55};
        size_t ax[3] = {0, nx / 2, nx - 1}, ady[3] = {1, ny / 3, ny - 2};
        for (int i = 0; i < 3; i++) {
            hx[ax[i]] = sx[i], fx[ax[i]] = bf ? phx_bf16_to_f32(sx[i]) : phx_f16_to_f32(sx[i]);
            hdy[ady[i]] = sdy[i], fdy[ady[i]] = bf ? phx_bf16_to_f32(sdy[i]) : phx_f16_to_f32(sdy[i]);
        }
    }
    for (int run = 0; same && run < 2; run++) {
        const char *pp = run ? path : ref;
        if (pp)
            setenv("PHX_CPU_CONV", pp, 1);
        else
            unsetenv("PHX_CPU_CONV");
        float *dw = run ? hdw : fdw, *db = run ? hdb : fdb;
        for (size_t i = 0; i < nw; i++) dw[i] = 0.5f;
        for (size_t i = 0; i < nk; i++) db[i] = 0.5f;
        phx_dtype rt = run ? dt : PHX_F32;
        phx_status st = K->conv2d_forward(0, d, run ? (void *)hx : fx, run ? (void *)hw : fw, bias ? t->b : NULL,
                                          run ? (void *)hy : fy, rt);
        if (st == PHX_OK)
            st = K->conv2d_backward_data(0, d, run ? (void *)hdy : fdy, run ? (void *)hw : fw, run ? (void *)hdx : fdx,
                                         rt);
        if (st == PHX_OK)
            st = K->conv2d_backward_weight(0, d, run ? (void *)hx : fx, run ? (void *)hdy : fdy, dw, bias ? db : NULL,
                                           rt);
        unsetenv("PHX_CPU_CONV");
        if (st != PHX_OK) diag("%s %s: %s", pp ? pp : "auto", phx_dtype_name(rt), phx_last_error());
        same = st == PHX_OK;
    }
    size_t bad = 0;
    if (near) { /* a bf16 rounding (2^-8 relative covers it) plus sums in another order */
        for (size_t i = 0; same && i < ny; i++)
            bad += fabs(phx_bf16_to_f32(hy[i]) - fy[i]) > 0x1p-8 * fabs(fy[i]) + 3e-6 * t->ay[i];
        for (size_t i = 0; same && i < nx; i++)
            bad += fabs(phx_bf16_to_f32(hdx[i]) - fdx[i]) > 0x1p-8 * fabs(fdx[i]) + 3e-6 * t->adx[i];
        for (size_t i = 0; same && i < nw; i++) bad += fabs(hdw[i] - fdw[i]) > 3e-6 * t->adw[i];
        for (size_t i = 0; same && bias && i < nk; i++) bad += fabs(hdb[i] - fdb[i]) > 3e-6 * t->adb[i];
    } else {
        for (size_t i = 0; same && i < ny; i++) bad += hy[i] != (bf ? phx_f32_to_bf16(fy[i]) : phx_f32_to_f16(fy[i]));
        for (size_t i = 0; same && i < nx; i++)
            bad += hdx[i] != (bf ? phx_f32_to_bf16(fdx[i]) : phx_f32_to_f16(fdx[i]));
        if (same) bad += memcmp(hdw, fdw, nw * 4) != 0 || memcmp(hdb, fdb, nk * 4) != 0;
    }
    if (bad) diag("%s %s: %zu values differ", path ? path : "auto", phx_dtype_name(dt), bad);
    free(hx), free(hw), free(hdy), free(hy), free(hdx), free(fx), free(fw), free(fdy), free(fy), free(fdx);
    free(fdw), free(fdb), free(hdw), free(hdb);
    return same && !bad;
}

static int cpu_avx512(void)
{
    return cu_cpu_has("avx512f") && cu_cpu_has("fma") && cu_cpu_has("f16c") &&
        (!getenv("PHX_CPU_ISA") || !strcmp(getenv("PHX_CPU_ISA"), "avx512"));
}

/* The f32 path whose bits auto's f16/bf16 passes give: Winograd for
 * every pass of a 3x3 stride-1 convolution of 16 or more channels in and
 * out (the half rule: in place on Winograd, where the kernels use AVX-512
 * with BW), else auto's own */
static const char *half_auto_ref(const phx_conv2d_desc *d)
{
    int wino = d->kh == 3 && d->kw == 3 && d->stride_h == 1 && d->stride_w == 1 && d->dil_h == 1 && d->dil_w == 1 &&
        d->groups == 1 && d->c >= 16 && d->k >= 16;
    return wino && cpu_avx512() && cu_cpu_has("avx512bw") && cu_cpu_has("avx512vl") ? "winograd" : NULL;
}

static int path_available(int p)
{
    if (p == 1) {
#ifdef HAVE_DNNL
        return 1;
#else
        return 0;
#endif
    }
    return p < 2 || cpu_avx512();
}

/* Whether bf16 (h 0) on path p (NPATHS: auto) may run on oneDNN's bf16
 * kernels: a build with oneDNN on a CPU with AVX512-BF16 */
static int bf16_native(int h, int p)
{
#ifdef HAVE_DNNL
    return h == 0 && (p == 1 || p == NPATHS) && cu_cpu_has("avx512_bf16");
#else
    (void)h, (void)p;
    return 0;
#endif
}

int main(void)
{
    plan(NPATHS * NSHAPES + 11 + 2 * (NPATHS + 1));
    size_t most_x = 0, most_w = 0, most_y = 0;
    for (int s = 0; s < NSHAPES; s++) {
        const phx_conv2d_desc *d = &shapes[s].d;
        size_t nx = (size_t)(d->n * d->c * d->h * d->w), nw = (size_t)(d->k * d->c / d->groups * d->kh * d->kw);
        size_t ny = (size_t)(d->n * d->k * d->oh * d->ow);
        most_x = nx > most_x ? nx : most_x, most_w = nw > most_w ? nw : most_w, most_y = ny > most_y ? ny : most_y;
    }
    data t = {0};
    t.x = malloc(most_x * 4), t.w = malloc(most_w * 4), t.b = malloc(64 * 4), t.dy = malloc(most_y * 4);
    t.y = malloc(most_y * 8), t.ay = malloc(most_y * 8), t.dx = malloc(most_x * 8), t.adx = malloc(most_x * 8);
    t.dw = malloc(most_w * 8), t.adw = malloc(most_w * 8), t.db = malloc(64 * 8), t.adb = malloc(64 * 8);
    float *y = malloc(most_y * 4), *dx = malloc(most_x * 4), *dw = malloc(most_w * 4), *db = malloc(64 * 4);
    float *y2 = malloc(most_y * 4), *dx2 = malloc(most_x * 4), *dw2 = malloc(most_w * 4), *db2 = malloc(64 * 4);
    if (!t.x || !t.w || !t.b || !t.dy || !t.y || !t.ay || !t.dx || !t.adx || !t.dw || !t.adw || !t.db || !t.adb || !y ||
        !dx || !dw || !db || !y2 || !dx2 || !dw2 || !db2) {
        printf("Bail out! out of memory\n");
        return 1;
    }
    int avx = cpu_avx512();
    int half_bad[2][NPATHS + 1] = {{0}}, special_bad[2] = {0};
    for (int s = 0; s < NSHAPES; s++) {
        const phx_conv2d_desc *d = &shapes[s].d;
        t.nx = (size_t)(d->n * d->c * d->h * d->w), t.nw = (size_t)(d->k * d->c / d->groups * d->kh * d->kw);
        t.ny = (size_t)(d->n * d->k * d->oh * d->ow);
        for (size_t i = 0; i < t.nx; i++) t.x[i] = cu_frand(-1.0f, 1.0f);
        for (size_t i = 0; i < t.nw; i++) t.w[i] = cu_frand(-1.0f, 1.0f);
        for (size_t i = 0; i < t.ny; i++) t.dy[i] = cu_frand(-1.0f, 1.0f);
        for (int64_t i = 0; i < d->k; i++) t.b[i] = shapes[s].bias ? cu_frand(-1.0f, 1.0f) : 0.0f;
        reference(d, &t);
        for (size_t i = 0; i < t.nw; i++) t.dw[i] += 0.5, t.adw[i] += 0.5;
        for (int64_t i = 0; i < d->k; i++) t.db[i] += 0.5, t.adb[i] += 0.5;
        for (int p = 0; p < NPATHS; p++) {
            char what[160];
            snprintf(what, sizeof what,
                     "PHX_CPU_CONV=%s: %lldx%lldx%lldx%lld -> %lld, %lldx%lld, stride %lld, pad %lld, "
                     "dil %lld, groups %lld",
                     paths[p], (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k,
                     (long long)d->kh, (long long)d->kw, (long long)d->stride_h, (long long)d->pad_h,
                     (long long)d->dil_h, (long long)d->groups);
            if (!path_available(p)) {
                skip(1, p == 1 ? "built without oneDNN" : "the kernels do not use AVX-512");
                continue;
            }
            phx_status st = passes(paths[p], d, &t, shapes[s].bias, y, dx, dw, db);
            double e = st == PHX_OK ? worst(y, t.y, t.ay, t.ny) : INFINITY;
            e = fmax(e, st == PHX_OK ? worst(dx, t.dx, t.adx, t.nx) : INFINITY);
            e = fmax(e, st == PHX_OK ? worst(dw, t.dw, t.adw, t.nw) : INFINITY);
            if (shapes[s].bias) e = fmax(e, st == PHX_OK ? worst(db, t.db, t.adb, (size_t)d->k) : INFINITY);
            /* f32 sums: a few ulps of the sum of |terms|; Winograd's
             * transforms add a few more (doc/maint/kernels.md) */
            if (!ok(e <= 2e-6, "%s: y, dx, dw%s within 2e-6 of the sum of |terms| (worst %.2g)", what,
                    shapes[s].bias ? ", db" : "", e))
                diag("%s", st == PHX_OK ? "" : phx_last_error());
        }
        if (s == S1X1) { /* auto's own route for it */
            phx_status st = passes(NULL, d, &t, shapes[s].bias, y, dx, dw, db);
            double e = st == PHX_OK ? worst(y, t.y, t.ay, t.ny) : INFINITY;
            e = fmax(e, st == PHX_OK ? worst(dx, t.dx, t.adx, t.nx) : INFINITY);
            e = fmax(e, st == PHX_OK ? worst(dw, t.dw, t.adw, t.nw) : INFINITY);
            e = fmax(e, st == PHX_OK ? worst(db, t.db, t.adb, (size_t)d->k) : INFINITY);
            if (!ok(e <= 2e-6, "auto: 1x1 stride 2: y, dx, dw, db within 2e-6 of the sum of |terms| (worst %.2g)", e))
                diag("%s", st == PHX_OK ? "" : phx_last_error());
        }
        for (int h = 0; h < 2; h++)
            for (int p = 0; p <= NPATHS; p++)
                if (p == NPATHS || path_available(p))
                    half_bad[h][p] += !half_same(p < NPATHS ? paths[p] : NULL,
                                                 p < NPATHS              ? paths[p]
                                                     : bf16_native(h, p) ? NULL
                                                                         : half_auto_ref(d),
                                                 h ? PHX_F16 : PHX_BF16, d, &t, shapes[s].bias, bf16_native(h, p), 0);
        if (s == 1 || s == NSHAPES - 1) /* NaNs and infinities through auto's f16/bf16 route */
            for (int h = 0; h < 2; h++)
                special_bad[h] += !half_same(NULL, bf16_native(h, NPATHS) ? NULL : half_auto_ref(d),
                                             h ? PHX_F16 : PHX_BF16, d, &t, shapes[s].bias, bf16_native(h, NPATHS), 1);
        /* bits on 1 and 3 threads: the implicit GEMM and Winograd on 18
         * tiles a row and several chunks, the direct kernel on one input
         * channel, Winograd on chunks that cut images (its data pass's
         * threads take whole images) */
        if (s == 1 || s == 10 || s == SCHUNKS)
            for (int p = s == 1 ? 2 : s == 10 ? 4 : 3; p < (s == 1 ? 4 : s == 10 ? 5 : 4); p++) {
                if (!avx) {
                    skip(1, "the kernels do not use AVX-512");
                    continue;
                }
                int before = phx_num_threads();
                phx_set_num_threads(1);
                phx_status st = passes(paths[p], d, &t, 1, y, dx, dw, db);
                phx_set_num_threads(3);
                if (st == PHX_OK) st = passes(paths[p], d, &t, 1, y2, dx2, dw2, db2);
                phx_set_num_threads(before);
                ok(st == PHX_OK && !memcmp(y, y2, t.ny * 4) && !memcmp(dx, dx2, t.nx * 4) &&
                       !memcmp(dw, dw2, t.nw * 4) && !memcmp(db, db2, (size_t)d->k * 4),
                   "PHX_CPU_CONV=%s: the same bits on 1 and 3 threads", paths[p]);
            }
        if (s == 10) { /* auto: the direct kernel's bits for one input channel's forward and weight */
            int same = 1;
            if (avx) {
                passes(NULL, d, &t, 1, y, dx, dw, db);
                passes("direct", d, &t, 1, y2, dx2, dw2, db2);
                same = !memcmp(y, y2, t.ny * 4) && !memcmp(dw, dw2, t.nw * 4) && !memcmp(db, db2, (size_t)d->k * 4);
            }
            ok(same, "auto: one input channel takes the direct kernel for forward and weight");
        }
    }
    /* auto on bench's conv2 shape: Winograd's bits for the forward and
     * data passes; the weight pass oneDNN's where the build has it, else
     * Winograd's too */
    {
        const phx_conv2d_desc *d = &shapes[2].d;
        t.nx = (size_t)(d->n * d->c * d->h * d->w), t.nw = (size_t)(d->k * d->c * 9);
        t.ny = (size_t)(d->n * d->k * d->oh * d->ow);
        int same = 1, wsame = 1;
#ifdef HAVE_DNNL
        const char *wpath = "dnnl";
#else
        const char *wpath = "winograd";
#endif
        if (avx) {
            passes(NULL, d, &t, 1, y, dx, dw, db);
            passes("winograd", d, &t, 1, y2, dx2, dw2, db2);
            same = !memcmp(y, y2, t.ny * 4) && !memcmp(dx, dx2, t.nx * 4);
            passes(wpath, d, &t, 1, y2, dx2, dw2, db2);
            wsame = !memcmp(dw, dw2, t.nw * 4) && !memcmp(db, db2, (size_t)d->k * 4);
        }
        ok(same, "auto: 16 -> 24 channels, 3x3, stride 1 take Winograd for the forward and data passes");
        ok(wsame, "auto: and %s for the weight pass", wpath);
    }
    for (int h = 0; h < 2; h++)
        for (int p = 0; p <= NPATHS; p++) {
            if (p < NPATHS && !path_available(p)) {
                skip(1, p == 1 ? "built without oneDNN" : "the kernels do not use AVX-512");
                continue;
            }
            if (bf16_native(h, p))
                ok(half_bad[h][p] == 0,
                   "PHX_CPU_CONV=%s, bf16 on oneDNN's bf16 kernels: y, dx, dw, db within a bf16 rounding of the f32 "
                   "path's on the widened operands + 3e-6 of the sum of |terms| (%d of %d shapes differ)",
                   p < NPATHS ? paths[p] : "auto", half_bad[h][p], NSHAPES);
            else
                ok(half_bad[h][p] == 0,
                   "PHX_CPU_CONV=%s, %s: y and dx are the f32 path's on the widened operands rounded once, dw and "
                   "db its bits (%d of %d shapes differ)",
                   p < NPATHS ? paths[p] : "auto", h ? "f16" : "bf16", half_bad[h][p], NSHAPES);
        }
    for (int h = 0; h < 2; h++)
        ok(special_bad[h] == 0,
           "auto, %s, NaNs (signalling, negative, with a payload) and infinities in x and dy: the f32 path's bits "
           "rounded once (%d of 2 shapes differ)",
           h ? "f16" : "bf16", special_bad[h]);
    setenv("PHX_CPU_CONV", "fast", 1);
    phx_status st = cu_kernels()->conv2d_forward(0, &shapes[0].d, t.x, t.w, NULL, y, PHX_F32);
    unsetenv("PHX_CPU_CONV");
    ok(st == PHX_EINVAL &&
           strstr(phx_last_error(), "PHX_CPU_CONV='fast', expected auto, im2col, dnnl, avx512, winograd or direct"),
       "PHX_CPU_CONV=fast is refused naming the choices (%s)", phx_last_error());
    free(t.x), free(t.w), free(t.b), free(t.dy), free(t.y), free(t.ay), free(t.dx), free(t.adx), free(t.dw);
    free(t.adw), free(t.db), free(t.adb), free(y), free(dx), free(dw), free(db), free(y2), free(dx2), free(dw2),
        free(db2);
    return done_testing();
}
