/* Elementwise and reduction kernels against float64 references: fill,
 * axpby (every float dtype pair), mul, bias_add, bias_grad (long batches,
 * across the column tiles, f32's summation order bit for bit), reduce,
 * unscale_check with inf/NaN/overflow, dropout backward; error messages. */
#include "config.h"
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "t/core-util.h"

#define N 5003
#define ROWS 301
#define COLS 2100 /* spans bias_grad's column tiles (1024 for f32, 2048 for f16 and bf16) */

#define LONG_ROWS (16 * 4096 + 5) /* past bias_grad's 2^11-block counter, a tail of 5 */

static float a[N], b[N], o[N];
static double ref[N];

/* bias_grad's f32 order (kernels/cpu/elementwise.c), one column at a
 * time in scalar code: blocks of 16 rows summed in row order, a binary
 * counter of 12 levels combining them pairwise (the top level adds in
 * row order), the levels added from the top down, then beta db + sum in
 * double rounded once. */
static float f32_order_col(int64_t rows, int64_t cols, const float *dy, int64_t c)
{
    float lv[12], p;
    unsigned full = 0;
    for (int64_t r = 0; r < rows; r += 16) {
        p = dy[r * cols + c];
        for (int64_t i = r + 1; i < r + 16 && i < rows; i++) p = p + dy[i * cols + c];
        int k = 0;
        while (k < 11 && (full >> k & 1u)) {
            p = lv[k] + p;
            full &= ~(1u << k++);
        }
        if (full >> k & 1u) {
            lv[k] = lv[k] + p;
        } else {
            lv[k] = p;
            full |= 1u << k;
        }
    }
    p = 0.0f;
    for (int k = 11; k >= 0; k--)
        if (full >> k & 1u) p = p + lv[k];
    return p;
}

static int f32_order_matches(int64_t rows, int64_t cols, const float *dy, float beta, float db0, const float *db)
{
    int good = 1;
    for (int64_t c = 0; c < cols; c++) {
        float s = f32_order_col(rows, cols, dy, c);
        float want = beta == 0.0f ? s : (float)((double)beta * db0 + (double)s);
        good &= memcmp(&want, &db[c], sizeof want) == 0;
    }
    return good;
}

/* |db - exact| <= gamma_k sum |dy| (+ the final rounding), k the most
 * roundings an element meets: 15 in its block, one per merge and one
 * per level in the last sum (at most 12), and the partials the top
 * level adds after its first; *worst: the largest error / bound */
static int f32_within_bound(int64_t rows, int64_t cols, const float *dy, float beta, float db0, const float *db,
                            double *worst)
{
    int64_t blocks = (rows + 15) / 16, top = blocks >> 11;
    int lg = 0;
    while (((int64_t)1 << lg) < blocks) lg++;
    double k = 15 + (lg < 11 ? lg : 11) + 12 + (top > 1 ? top - 1 : 0) + 1;
    double u = ldexp(1, -24), gamma = k * u / (1 - k * u);
    *worst = 0;
    for (int64_t c = 0; c < cols; c++) {
        double sum = 0, mag = 0;
        for (int64_t r = 0; r < rows; r++) sum += dy[r * cols + c], mag += fabs(dy[r * cols + c]);
        double exact = beta == 0.0f ? sum : (double)beta * db0 + sum;
        double bound = gamma * mag + u * fabs(exact) + 1e-30;
        double e = fabs((double)db[c] - exact) / bound;
        if (!(e <= *worst)) *worst = e; /* NaN: worst NaN, fails */
    }
    return *worst <= 1;
}

int main(void)
{
    plan(38);
    const phx_kernels_v1 *K = cu_kernels();
    for (int i = 0; i < N; i++) a[i] = cu_frand(-3, 3), b[i] = cu_frand(-3, 3);

    /* 1-3: fill */
    static uint16_t h[N];
    static int64_t l[N];
    K->fill(0, o, PHX_F32, N, 0.1);
    K->fill(0, h, PHX_BF16, N, 0.1);
    K->fill(0, l, PHX_I64, N, -5e10);
    ok(o[0] == 0.1f && o[N - 1] == 0.1f, "fill f32 with 0.1 gives (float)0.1");
    ok(h[N - 1] == phx_f32_to_bf16(0.1f), "fill bf16 rounds once to bf16");
    ok(l[0] == -50000000000LL && l[N - 1] == -50000000000LL, "fill i64 with -5e10");

    /* 4-9: axpby over every float dtype pair; one rounding of the exact value */
    phx_dtype dts[3] = {PHX_F32, PHX_F16, PHX_BF16};
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++) {
            static uint32_t xs[N], ys[N];
            static double mag[N];
            for (int i = 0; i < N; i++) cu_set(xs, dts[xi], i, a[i]), cu_set(ys, dts[yi], i, b[i]);
            for (int i = 0; i < N; i++) {
                ref[i] = 1.5 * cu_get(xs, dts[xi], i) - 0.75 * cu_get(ys, dts[yi], i);
                mag[i] = fabs(1.5 * cu_get(xs, dts[xi], i)) + fabs(0.75 * cu_get(ys, dts[yi], i));
            }
            K->axpby(0, N, 1.5f, xs, dts[xi], -0.75f, ys, dts[yi]);
            /* f32 arithmetic (two products, one sum), then one rounding to y's dtype */
            double w = 0;
            for (int i = 0; i < N; i++) {
                double half_ulp = dts[yi] == PHX_F32 ? 0.0 : cu_eps(dts[yi]) / 2;
                double tol = 2 * ldexp(1, -24) * mag[i] * (1 + half_ulp) + half_ulp * fabs(ref[i]) +
                    (dts[yi] == PHX_F16 ? ldexp(1, -25) : 1e-30); /* f16 subnormals */
                w = fmax(w, fabs(cu_get(ys, dts[yi], i) - ref[i]) / tol);
            }
            ok(w <= 1, "axpby x %s, y %s: y = 1.5 x - 0.75 y within the rounding bound (worst %.3g)",
               phx_dtype_name(dts[xi]), phx_dtype_name(dts[yi]), w);
        }
    /* 10-11: beta = 0 does not read y; x NULL scales */
    for (int i = 0; i < N; i++) o[i] = NAN;
    K->axpby(0, N, 2.0f, a, PHX_F32, 0.0f, o, PHX_F32);
    int good = 1;
    for (int i = 0; i < N; i++) good &= o[i] == 2.0f * a[i];
    ok(good, "axpby beta 0: y = alpha x even where y held NaN");
    K->axpby(0, N, 0.0f, NULL, PHX_F32, -0.5f, o, PHX_F32);
    good = 1;
    for (int i = 0; i < N; i++) good &= o[i] == -a[i];
    ok(good, "axpby x NULL: y = beta y");

    /* 12-13: mul: one rounding, so bit-exact against the double product */
    K->mul(0, N, a, b, o, PHX_F32);
    good = 1;
    for (int i = 0; i < N; i++) good &= o[i] == (float)((double)a[i] * b[i]);
    ok(good, "mul f32 = the float64 product rounded once");
    static uint16_t ah[N], bh[N], oh[N];
    for (int i = 0; i < N; i++) ah[i] = phx_f32_to_f16(a[i]), bh[i] = phx_f32_to_f16(b[i]);
    K->mul(0, N, ah, bh, oh, PHX_F16);
    good = 1;
    for (int i = 0; i < N; i++)
        good &= oh[i] == phx_f32_to_f16((float)((double)phx_f16_to_f32(ah[i]) * phx_f16_to_f32(bh[i])));
    ok(good, "mul f16 = the product rounded to f16");

    /* 14-18: bias_add and bias_grad */
    static float y[ROWS * COLS], bias[COLS], db[COLS], y0[ROWS * COLS];
    static double dref[COLS];
    for (int i = 0; i < ROWS * COLS; i++) y[i] = y0[i] = cu_frand(-1, 1);
    for (int c = 0; c < COLS; c++) bias[c] = cu_frand(-1, 1);
    K->bias_add(0, ROWS, COLS, y, PHX_F32, bias);
    good = 1;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) good &= y[r * COLS + c] == y0[r * COLS + c] + bias[c];
    ok(good, "bias_add: y[r,c] += bias[c], exactly, over %d x %d", ROWS, COLS);
    /* f16 and bf16: the f32 sum rounded once, on every instruction set
     * this CPU has (f16 runs in widened blocks where it converts in
     * hardware; rows of 2100 span two blocks and a tail) */
    static uint16_t yh[ROWS * COLS], yh0[ROWS * COLS];
    good = 1;
    for (int p = PX_ISA_GENERIC; p <= px_cpu_isa_best(); p++)
        for (int d = 0; d < 2; d++) {
            phx_dtype dt = d ? PHX_BF16 : PHX_F16;
            for (int i = 0; i < ROWS * COLS; i++) cu_set(yh0, dt, i, y0[i] * 40.0f), yh[i] = yh0[i];
            px_cpu_isa_set(p);
            good &= px_cpu_bias_add(0, ROWS, COLS, yh, dt, bias) == PHX_OK; /* this test's copy: px_cpu_isa_set reaches it */
            for (int r = 0; r < ROWS; r++)
                for (int c = 0; c < COLS; c++) {
                    int i = r * COLS + c;
                    float sum = cu_get(yh0, dt, i) + bias[c];
                    good &= yh[i] == (d ? phx_f32_to_bf16(sum) : phx_f32_to_f16(sum));
                }
        }
    px_cpu_isa_set(px_cpu_isa_best());
    ok(good, "bias_add f16, bf16: the f32 sum rounded once, on each instruction set up to %s",
       px_cpu_isa_name(px_cpu_isa_best()));
    /* bias_grad on f16, bf16: the column sums of the values, in double in
     * row order, exactly (f16 rows are widened by the cast kernel where
     * the CPU converts in hardware) */
    good = 1;
    for (int p = PX_ISA_GENERIC; p <= px_cpu_isa_best(); p++)
        for (int d = 0; d < 2; d++) {
            phx_dtype dt = d ? PHX_BF16 : PHX_F16;
            for (int i = 0; i < ROWS * COLS; i++) cu_set(yh, dt, i, y0[i]);
            px_cpu_isa_set(p);
            good &= px_cpu_bias_grad(0, ROWS, COLS, yh, dt, 0.0f, db) == PHX_OK;
            for (int c = 0; c < COLS; c++) {
                double sum = 0;
                for (int r = 0; r < ROWS; r++) sum += cu_get(yh, dt, r * COLS + c);
                good &= db[c] == (float)sum;
            }
        }
    px_cpu_isa_set(px_cpu_isa_best());
    ok(good, "bias_grad f16, bf16: the column sums in double, exactly, on each instruction set");
    double w = 0;
    /* f32: the documented order (elementwise.c) bit for bit, and within
     * that order's rounding bound of the float64 sums */
    for (int c = 0; c < COLS; c++) db[c] = NAN;
    K->bias_grad(0, ROWS, COLS, y0, PHX_F32, 0.0f, db);
    ok(f32_order_matches(ROWS, COLS, y0, 0.0f, NAN, db),
       "bias_grad f32 beta 0: blocks of 16 rows, pairwise, bit for bit");
    good = f32_within_bound(ROWS, COLS, y0, 0.0f, NAN, db, &w);
    ok(good, "bias_grad f32 beta 0: %d rows within the bound (worst %.3g)", ROWS, w);
    for (int c = 0; c < COLS; c++) db[c] = 2.0f;
    K->bias_grad(0, ROWS, COLS, y0, PHX_F32, 0.5f, db);
    good = f32_order_matches(ROWS, COLS, y0, 0.5f, 2.0f, db) && f32_within_bound(ROWS, COLS, y0, 0.5f, 2.0f, db, &w);
    ok(good, "bias_grad f32 beta 0.5: db = 0.5 db + sums, bit for bit, within the bound (worst %.3g)", w);
    /* past the counter's top level (2^11 blocks), with a tail block, and
     * values of mixed magnitude */
    static float ylong[LONG_ROWS * 3];
    for (int i = 0; i < LONG_ROWS * 3; i++) ylong[i] = cu_frand(-1, 1) * (i % 7 == 0 ? 100.0f : 1.0f);
    float dbl[3];
    K->bias_grad(0, LONG_ROWS, 3, ylong, PHX_F32, 0.0f, dbl);
    good = f32_order_matches(LONG_ROWS, 3, ylong, 0.0f, NAN, dbl) &&
        f32_within_bound(LONG_ROWS, 3, ylong, 0.0f, NAN, dbl, &w);
    ok(good, "bias_grad f32 over %d rows: bit for bit, within the bound (worst %.3g)", LONG_ROWS, w);
    static uint16_t yb[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) yb[i] = phx_f32_to_bf16(y0[i]);
    for (int c = 0; c < COLS; c++) {
        dref[c] = 0;
        for (int r = 0; r < ROWS; r++) dref[c] += phx_bf16_to_f32(yb[r * COLS + c]);
    }
    K->bias_grad(0, ROWS, COLS, yb, PHX_BF16, 0.0f, db);
    w = cu_worst(db, PHX_F32, dref, COLS, 1e-6, 1e-6, NULL);
    ok(w <= 1, "bias_grad of a bf16 dy into f32 db (worst %.3g)", w);
    K->bias_grad(0, 0, COLS, y0, PHX_F32, 0.0f, db);
    ok(db[0] == 0.0f && db[COLS - 1] == 0.0f, "bias_grad over 0 rows gives zeros");

    /* 19-24: reduce */
    double s = 0, mx = -INFINITY, mn = INFINITY, out;
    for (int i = 0; i < N; i++) s += a[i], mx = fmax(mx, a[i]), mn = fmin(mn, a[i]);
    K->reduce(0, PHX_SUM, N, a, PHX_F32, &out);
    ok(fabs(out - s) <= 1e-12 * N, "reduce sum in double (%.15g vs %.15g)", out, s);
    K->reduce(0, PHX_AVG, N, a, PHX_F32, &out);
    ok(fabs(out - s / N) <= 1e-14, "reduce avg");
    double omx, omn;
    K->reduce(0, PHX_MAX, N, a, PHX_F32, &omx);
    K->reduce(0, PHX_MIN, N, a, PHX_F32, &omn);
    ok(omx == mx && omn == mn, "reduce max and min exact");
    int32_t iv[5] = {3, -7, 2147483647, 5, -2147483647};
    K->reduce(0, PHX_SUM, 5, iv, PHX_I32, &out);
    ok(out == 3.0 - 7 + 2147483647.0 + 5 - 2147483647.0, "reduce i32 sum without overflow (%.0f)", out);
    float nanv[4] = {1, NAN, 3, 2};
    K->reduce(0, PHX_MAX, 4, nanv, PHX_F32, &out);
    ok(out != out, "max with a NaN is NaN (as torch.max)");
    K->reduce(0, PHX_SUM, 0, a, PHX_F32, &out);
    ok(out == 0.0, "sum of nothing is 0");

    /* 25-28: unscale_check */
    float g[6] = {2, -4, 8, 1e-3f, 0, 65504}, found = 0;
    K->unscale_check(0, 6, g, 0.5f, &found);
    ok(found == 0 && g[0] == 1 && g[1] == -2 && g[5] == 32752, "finite gradients unscaled exactly, found_inf stays 0");
    float gi[3] = {1, INFINITY, 2};
    K->unscale_check(0, 3, gi, 0.25f, &found);
    ok(found == 1.0f && gi[2] == 0.5f, "inf sets found_inf = 1 (the rest still unscaled)");
    float gn[2] = {NAN, 1}, f2 = 0;
    K->unscale_check(0, 2, gn, 1.0f, &f2);
    float go[1] = {3e38f}, f3 = 0;
    K->unscale_check(0, 1, go, 2.0f, &f3);
    ok(f2 == 1.0f && f3 == 1.0f, "NaN sets found_inf; so does a result that overflows");
    float gz[2] = {1, 2};
    K->unscale_check(0, 2, gz, 1.0f, &found);
    ok(found == 1.0f, "found_inf is never cleared by a clean tensor (accumulates across tensors)");

    /* 29: dropout backward */
    static uint8_t mask[N];
    for (int i = 0; i < N; i++) mask[i] = (uint8_t)(i % 3 != 0);
    K->dropout_backward(0, N, 0.25f, mask, a, o, PHX_F32);
    good = 1;
    for (int i = 0; i < N; i++) good &= o[i] == (mask[i] ? a[i] * (1.0f / 0.75f) : 0.0f);
    ok(good, "dropout backward: dx = mask dy / (1 - p)");

    /* 30-31: errors */
    is_int(K->dropout_forward(0, N, 1.5f, 1, 0, a, o, mask, PHX_F32), PHX_EINVAL, "dropout p = 1.5: EINVAL");
    like(phx_last_error(), "p=1.5, expected 0 <= p <= 1", "message names p");
    return done_testing();
}
