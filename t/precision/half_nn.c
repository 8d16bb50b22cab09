/* The f16/bf16 BatchNorm and max-pooling kernels of the CPU: on the
 * vector ISA they widen blocks with the cast kernel and run the f32 loops;
 * on the generic ISA (px_cpu_isa_set) they convert element by element.
 * Both must give the same bits (same f32 arithmetic, same order, exact
 * widening, one round-to-nearest-even narrowing), over planes that fill
 * the 1024-element blocks unevenly and 16-lane tails; and both against a
 * float64 reference from the same f16/bf16 values: batch mean and var
 * within 1e-5 relative (f32 sums in 16 lanes, f64 across planes), BN's y
 * and dx within 2 units of the output format's rounding plus 1e-5 of the
 * terms' scale, max pooling exactly (a max is exact), its gradient within
 * one rounding of the f64 sum; average pooling (its f16/bf16 path widens
 * the whole input) within one rounding of the f64 mean. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "t/core-util.h"

static int same_bits(const uint16_t *a, const uint16_t *b, int64_t n)
{
    return !memcmp(a, b, (size_t)n * 2);
}
static int same_f32(const float *a, const float *b, int64_t n)
{
    return !memcmp(a, b, (size_t)n * sizeof(float));
}

typedef struct bn_out {
    float mean[8], var[8], sd[8], sdx[8], dw[8], db[8];
    uint16_t *y, *dx;
} bn_out;

static void bn_run(int64_t n, int64_t c, int64_t hw, const uint16_t *x, const uint16_t *dy, const float *w,
                   const float *b, phx_dtype dt, bn_out *o, phx_status *st)
{
    memset(o->dw, 0, sizeof o->dw), memset(o->db, 0, sizeof o->db);
    st[0] = px_cpu_batchnorm_stats(0, n, c, hw, x, dt, o->mean, o->var);
    st[1] = px_cpu_batchnorm_apply(0, n, c, hw, x, o->mean, o->var, 1e-5f, w, b, o->y, dt);
    st[2] =
        px_cpu_batchnorm_backward_reduce(0, n, c, hw, x, dy, dt, o->mean, o->var, 1e-5f, o->sd, o->sdx, o->dw, o->db);
    st[3] = px_cpu_batchnorm_backward_apply(0, n, c, hw, x, dy, dt, o->mean, o->var, 1e-5f, w, o->sd, o->sdx,
                                            (double)(n * hw), o->dx);
}

static void check_bn(phx_dtype dt, int64_t n, int64_t c, int64_t hw)
{
    int64_t len = n * c * hw;
    uint16_t *x = malloc(2 * len), *dy = malloc(2 * len);
    bn_out o[2];
    float w[8], b[8];
    for (int i = 0; i < 2; i++) o[i].y = malloc(2 * len), o[i].dx = malloc(2 * len);
    for (int64_t i = 0; i < len; i++) cu_set(x, dt, i, cu_frand(-3, 5)), cu_set(dy, dt, i, cu_frand(-1, 1));
    for (int k = 0; k < c; k++) w[k] = cu_frand(0.5f, 1.5f), b[k] = cu_frand(-1, 1);
    phx_status st[2][4];
    for (int q = 0; q < 2; q++) {
        px_cpu_isa_set(q ? px_cpu_isa_best() : PX_ISA_GENERIC);
        bn_run(n, c, hw, x, dy, w, b, dt, &o[q], st[q]);
    }
    int all_ok = 1;
    for (int i = 0; i < 4; i++) all_ok &= st[0][i] == PHX_OK && st[1][i] == PHX_OK;
    ok(all_ok && same_f32(o[0].mean, o[1].mean, c) && same_f32(o[0].var, o[1].var, c) &&
           same_bits(o[0].y, o[1].y, len) && same_f32(o[0].sd, o[1].sd, c) && same_f32(o[0].sdx, o[1].sdx, c) &&
           same_f32(o[0].dw, o[1].dw, c) && same_f32(o[0].db, o[1].db, c) && same_bits(o[0].dx, o[1].dx, len),
       "%s batchnorm (%lld, %lld, %lld): %s path's bits = the element-by-element path's (stats, y, sums, dw, db, dx)",
       phx_dtype_name(dt), (long long)n, (long long)c, (long long)hw, px_cpu_isa_name(px_cpu_isa_best()));

    /* float64 reference of the vector path's results */
    double cnt = (double)(n * hw), worst_stat = 0, worst_y = 0, worst_dx = 0;
    double u = cu_eps(dt);
    for (int64_t k = 0; k < c; k++) {
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) m += cu_get(x, dt, (i * c + k) * hw + j);
        m /= cnt;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t e = (i * c + k) * hw + j;
                double d = cu_get(x, dt, e) - m, g = cu_get(dy, dt, e);
                v += d * d, sg += g, sgx += g * d;
            }
        v /= cnt;
        worst_stat = fmax(worst_stat, fabs(o[1].mean[k] - m) / (fabs(m) + sqrt(v)));
        worst_stat = fmax(worst_stat, fabs(o[1].var[k] - v) / v);
        double istd = 1 / sqrt(v + 1e-5);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t e = (i * c + k) * hw + j;
                double xm = cu_get(x, dt, e) - m, g = cu_get(dy, dt, e);
                double y = xm * istd * w[k] + b[k];
                double tol_y = 2 * u * fabs(y) + 1e-5 * (fabs(xm * istd * w[k]) + fabs(b[k]) + 1);
                worst_y = fmax(worst_y, fabs(cu_get(o[1].y, dt, e) - y) / tol_y);
                double dx = (g - sg / cnt - xm * istd * istd * sgx / cnt) * istd * w[k];
                double scale = (fabs(g) + fabs(sg / cnt) + fabs(xm * istd * istd * sgx / cnt)) * istd * w[k];
                worst_dx =
                    fmax(worst_dx, fabs(cu_get(o[1].dx, dt, e) - dx) / (2 * u * fabs(dx) + 1e-5 * scale + 1e-30));
            }
    }
    ok(worst_stat <= 1e-5 && worst_y <= 1 && worst_dx <= 1,
       "%s batchnorm (%lld, %lld, %lld) against float64: stats %.2g relative, y %.2f and dx %.2f of their bounds",
       phx_dtype_name(dt), (long long)n, (long long)c, (long long)hw, worst_stat, worst_y, worst_dx);
    px_cpu_isa_set(px_cpu_isa_best());
    free(x), free(dy);
    for (int i = 0; i < 2; i++) free(o[i].y), free(o[i].dx);
}

/* Bit patterns of dt that order and NaN rules meet: quiet, signalling and
 * negative NaNs, -0 and +0, infinities, the smallest subnormals. */
static uint16_t special_bits(phx_dtype dt, int i)
{
    static const uint16_t f16[] = {0x7e00, 0x7c01, 0xfe01, 0x8000, 0x0000, 0x7c00, 0xfc00, 0x0001, 0x8001};
    static const uint16_t bf16[] = {0x7fc0, 0x7f81, 0xffc1, 0x8000, 0x0000, 0x7f80, 0xff80, 0x0001, 0x8001};
    return (dt == PHX_BF16 ? bf16 : f16)[i % 9];
}

/* max pooling (k x k, stride s, padding p) of (n, c, h, w) planes,
 * forward and backward; special: a quarter of x special_bits, ties
 * (equal neighbours), windows whose maximum is -0 beside +0, and NaNs in
 * dy where the windows are disjoint (their gradient copies dy's bits; an
 * overlapping window's sum may keep either NaN's payload). A padding of
 * k or more gives windows wholly outside the input: -inf, argmax -1. */
static void check_pool(phx_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p,
                       int special)
{
    int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
    phx_conv2d_desc d = {n, c, h, w, c, k, k, oh, ow, s, s, p, p, 1, 1, c};
    int64_t hw = h * w, ohw = oh * ow, nx = n * c * hw, ny = n * c * ohw;
    uint16_t *x = malloc(2 * nx), *dy = malloc(2 * ny), *y[3], *dx[3];
    int32_t *am[3];
    for (int q = 0; q < 3; q++) y[q] = malloc(2 * ny), dx[q] = malloc(2 * nx), am[q] = malloc(4 * ny);
    for (int64_t i = 0; i < nx; i++) cu_set(x, dt, i, cu_frand(-4, 4));
    for (int64_t i = 0; special && i < nx; i++) {
        if (i % 4 == 1) x[i] = special_bits(dt, (int)(i / 4));
        if (i % 7 == 3) x[i] = x[i - 1]; /* a tie with the previous value */
    }
    /* each plane's first window: -0 then +0 above two negatives (the
     * first zero is the max); the next: +0 then -0 */
    for (int64_t pl = 0; special && pl < n * c; pl++) {
        uint16_t *q = x + pl * hw;
        const float v[8] = {-0.0f, 0.0f, 0.0f, -0.0f, -1.0f, -2.0f, -3.0f, -1.0f};
        for (int t = 0; t < 4; t++) cu_set(q, dt, t, v[t]), cu_set(q, dt, w + t, v[4 + t]);
    }
    for (int64_t i = 0; i < ny; i++) cu_set(dy, dt, i, cu_frand(-1, 1));
    for (int64_t i = 3; special && s >= k && i < ny; i += 11) dy[i] = special_bits(dt, (int)(i % 3));
    /* generic, the best ISA, and AVX2 where the best is AVX-512 (its
     * 2x2 windows take another loop) */
    const int isas[3] = {PX_ISA_GENERIC, px_cpu_isa_best(), PX_ISA_AVX2};
    const int runs = px_cpu_isa_best() == PX_ISA_AVX512 ? 3 : 2;
    int good = 1, same = 1;
    for (int q = 0; q < runs; q++) {
        px_cpu_isa_set(isas[q]);
        good &= px_cpu_maxpool2d_forward(0, &d, x, y[q], am[q], dt) == PHX_OK;
        good &= px_cpu_maxpool2d_backward(0, &d, am[q], dy, dx[q], dt) == PHX_OK;
        same &= same_bits(y[0], y[q], ny) && !memcmp(am[0], am[q], 4 * (size_t)ny) && same_bits(dx[0], dx[q], nx);
    }
    px_cpu_isa_set(px_cpu_isa_best());
    ok(good && same,
       "%s maxpool %lldx%lld stride %lld pad %lld on (%lld, %lld, %lld, %lld)%s: %s%s path's bits = the generic path's",
       phx_dtype_name(dt), (long long)k, (long long)k, (long long)s, (long long)p, (long long)n, (long long)c,
       (long long)h, (long long)w, special ? ", NaNs, +-0 ties, infs, subnormals" : "",
       px_cpu_isa_name(px_cpu_isa_best()), runs == 3 ? " and avx2" : "");
    /* reference: the window's first max, the first NaN winning (the bits
     * of that input; an empty window -inf), dx the f64 sum of the dy
     * routed to each position, rounded once */
    int bad_y = 0, empty = 0;
    const uint16_t ninf = dt == PHX_BF16 ? 0xff80 : 0xfc00;
    double *acc = calloc((size_t)nx, sizeof(double)), worst = 0;
    for (int64_t pl = 0; pl < n * c; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double best = -INFINITY;
                int64_t at = -1;
                for (int64_t r = 0; r < k; r++)
                    for (int64_t t = 0; t < k; t++) {
                        int64_t iy = oy * s - p + r, ix = ox * s - p + t;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        double v = cu_get(x, dt, pl * hw + iy * w + ix);
                        if (at < 0 || (!isnan(best) && (isnan(v) || v > best))) best = v, at = iy * w + ix;
                    }
                int64_t o = pl * ohw + oy * ow + ox;
                bad_y += y[1][o] != (at < 0 ? ninf : x[pl * hw + at]) || am[1][o] != at;
                empty += at < 0;
                if (at >= 0) acc[pl * hw + at] += cu_get(dy, dt, o);
            }
    for (int64_t i = 0; i < nx; i++)
        if (!isnan(acc[i]) || !isnan(cu_get(dx[1], dt, i)))
            worst = fmax(worst, fabs(cu_get(dx[1], dt, i) - acc[i]) / (cu_eps(dt) * fabs(acc[i]) + 1e-30));
    ok(good && bad_y == 0 && !isnan(worst) && worst <= 1.0 && (p < k || empty > 0),
       "%s maxpool %lldx%lld stride %lld pad %lld%s: max and argmax exact (%d differ, %d empty windows), dx within one "
       "rounding (%.2f of it)",
       phx_dtype_name(dt), (long long)k, (long long)k, (long long)s, (long long)p, special ? ", special values" : "",
       bad_y, empty, worst);
    free(x), free(dy), free(acc);
    for (int q = 0; q < 3; q++) free(y[q]), free(dx[q]), free(am[q]);
}

/* average pooling (k x k, stride s, padding p, count_include_pad cip):
 * the same bits on both paths, and y within one rounding of the f64 mean */
static void check_avgpool(phx_dtype dt, int64_t n, int64_t c, int64_t h, int64_t k, int64_t s, int64_t p, int cip)
{
    int64_t oh = (h + 2 * p - k) / s + 1;
    phx_conv2d_desc d = {n, c, h, h, c, k, k, oh, oh, s, s, p, p, 1, 1, c};
    int64_t nx = n * c * h * h, ny = n * c * oh * oh;
    uint16_t *x = malloc(2 * nx), *dy = malloc(2 * ny), *y[2], *dx[2];
    for (int q = 0; q < 2; q++) y[q] = malloc(2 * ny), dx[q] = malloc(2 * nx);
    for (int64_t i = 0; i < nx; i++) cu_set(x, dt, i, cu_frand(-4, 4));
    for (int64_t i = 0; i < ny; i++) cu_set(dy, dt, i, cu_frand(-1, 1));
    phx_status st[2][2];
    for (int q = 0; q < 2; q++) {
        px_cpu_isa_set(q ? px_cpu_isa_best() : PX_ISA_GENERIC);
        st[q][0] = px_cpu_avgpool2d_forward(0, &d, cip, x, y[q], dt);
        st[q][1] = px_cpu_avgpool2d_backward(0, &d, cip, dy, dx[q], dt);
    }
    px_cpu_isa_set(px_cpu_isa_best());
    int good = st[0][0] == PHX_OK && st[0][1] == PHX_OK && st[1][0] == PHX_OK && st[1][1] == PHX_OK;
    double worst = 0;
    for (int64_t pl = 0; pl < n * c && good; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < oh; ox++) {
                double sum = 0, sa = 0;
                int cnt = 0;
                for (int64_t r = 0; r < k; r++)
                    for (int64_t t = 0; t < k; t++) {
                        int64_t iy = oy * s - p + r, ix = ox * s - p + t;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= h) continue;
                        double v = cu_get(x, dt, pl * h * h + iy * h + ix);
                        sum += v, sa += fabs(v), cnt++;
                    }
                int div = cip ? (int)(k * k) : cnt; /* no window here crosses the padded edge */
                double ref = sum / div, got = cu_get(y[1], dt, pl * oh * oh + oy * oh + ox);
                worst = fmax(worst, fabs(got - ref) / (cu_eps(dt) * fabs(ref) + 1e-6 * sa / div + 1e-30));
            }
    ok(good && same_bits(y[0], y[1], ny) && same_bits(dx[0], dx[1], nx) && worst <= 1.0,
       "%s avgpool %lldx%lld stride %lld pad %lld%s: %s path's bits = the generic path's, y within one rounding of "
       "float64 (%.2f of it)",
       phx_dtype_name(dt), (long long)k, (long long)k, (long long)s, (long long)p, cip ? " (padding counted)" : "",
       px_cpu_isa_name(px_cpu_isa_best()), worst);
    free(x), free(dy);
    for (int q = 0; q < 2; q++) free(y[q]), free(dx[q]);
}

int main(void)
{
    plan(2 * (3 * 2 + 5 * 2 + 2));
    if (px_cpu_isa_best() == PX_ISA_GENERIC) diag("this CPU has no vector path: both runs are the generic one");
    const phx_dtype dts[2] = {PHX_F16, PHX_BF16};
    for (int i = 0; i < 2; i++) {
        check_bn(dts[i], 3, 5, 1100); /* a plane of one full block and a tail of 76 */
        check_bn(dts[i], 4, 3, 49); /* 7x7 planes: 3 lanes-rows and a tail */
        check_bn(dts[i], 2, 2, 7);
        check_pool(dts[i], 3, 4, 36, 36, 2, 2, 0, 0); /* the 2x2 fast path (16 windows and 2), disjoint backward */
        check_pool(dts[i], 2, 3, 15, 15, 3, 2, 1, 0); /* overlapping windows with padding */
        check_pool(dts[i], 2, 3, 12, 41, 2, 2, 0, 1); /* both, on special values (an odd width, h != w) */
        check_pool(dts[i], 2, 3, 17, 15, 3, 2, 1, 1);
        check_pool(dts[i], 2, 3, 5, 6, 2, 2, 2, 1); /* windows wholly in the padding */
        check_avgpool(dts[i], 4, 8, 7, 7, 1, 0, 0); /* global average pooling of 7x7 planes */
        check_avgpool(dts[i], 2, 3, 15, 3, 2, 1, 1);
    }
    return done_testing();
}
