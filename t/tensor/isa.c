/* The activation and cast kernels on every instruction-set path this CPU
 * supports (generic, AVX2, AVX-512, forced with px_cpu_isa_set): f32
 * activations against float64 within t/tensor/act's bounds, with NaN, +-inf,
 * +-0, subnormals and large |x| giving what the generic path gives; AVX2
 * activations the generic path's bits, f16 and bf16 ones the path's f32
 * results on the widened operands, rounded; the AVX-512 exp, tanh
 * and 1 + erf within t/tensor/act's ulp bounds; casts f32 <-> f16/bf16 the
 * bits of kernels/math.h on every pattern that matters (all halves, ties,
 * NaN payloads, subnormals) and odd lengths, on AVX-512 with ordinary and
 * with streaming stores; PHX_CPU_ISA good and bad. */
#include "config.h"
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kernels/cpu/cpu.h"
#include "t/core-util.h"


#define NG 4099 /* grid over [-8, 8] */
#define NR 20000 /* log-uniform magnitudes 1e-8 .. 1e3, both signs */
#define N (NG + NR + 64)
static float x[N], dy[N], ygen[N], dxgen[N], y[N], dx[N], xi[N];
static int n_all;

/* Error of got against float64 in t/tensor/act's tolerance (fwd 4e-6
 * relative + 1e-7, bwd 4e-6 + 1e-6), where gen (the generic path) is
 * finite and so is the reference; elsewhere 0 when got is what gen is
 * (any NaN for a NaN), else inf. Divided by max(1, the generic path's
 * error): on inputs t/tensor/act does not sample math.h itself can exceed
 * the bound (gelu_tanh' near x = -5), and a path must do no worse. */
static double worst(const float *got, const float *gen, int act, int bwd, int *at)
{
    double w = 0;
    *at = -1;
    for (int i = 0; i < n_all; i++) {
        double r = bwd ? (double)dy[i] * cu_act_dref(act, x[i]) : cu_act_ref(act, x[i]), e;
        double tol = (bwd ? 1e-6 : 1e-7) + 4e-6 * fabs(r);
        if (isnan(gen[i]) || isinf(gen[i]) || !isfinite(r))
            e = (isnan(gen[i]) && isnan(got[i])) || got[i] == gen[i] ? 0 : INFINITY;
        else
            e = fabs(got[i] - r) / tol / fmax(1, fabs(gen[i] - r) / tol);
        if (!(e <= w)) w = e, *at = i;
    }
    return w;
}

/* the same values: equal bits, or NaN on both sides */
static int same_f32(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}
static int same_half(const uint16_t *a, const uint16_t *b, phx_dtype dt, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i] && !(isnan(cu_get(a, dt, i)) && isnan(cu_get(b, dt, i)))) return 0;
    return 1;
}

/* ulp error of the AVX-512 exp / tanh / 1 + erf over every 1021st float
 * in [lo, hi], as t/tensor/act's sweep of the math.h versions */
#if PX_HAVE_X86
static double d_erf1p(double v)
{
    return erfc(-v);
}
static double sweep(int fn, double (*ref)(double), float lo, float hi, float *at)
{
    static float in[4300000], out[4300000];
    int64_t n = 0;
    for (uint64_t b = 0; b <= 0xffffffffull; b += 1021) {
        float v = phx_bits_f32((uint32_t)b);
        if (v >= lo && v <= hi) in[n++] = v;
    }
    px_avx512_math(fn, n, in, out);
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ref(in[i]), e;
        if (isinf((float)r))
            e = isinf(out[i]) && (out[i] > 0) == (r > 0) ? 0 : INFINITY;
        else {
            int ex;
            frexp(fabs(r), &ex);
            e = fabs((double)out[i] - r) / ldexp(1, ex - 24 < -149 ? -149 : ex - 24);
            if (e != e) e = INFINITY;
        }
        if (!(e <= w)) w = e, *at = in[i];
    }
    return w;
}
#endif

/* f32 patterns for the narrowing casts: every half with low parts that
 * round down, tie and round up (f16: at its ulp 2^13 in the f32 bits,
 * for normals), NaN payloads, subnormals; and every 997th pattern */
#define NC (65536 * 12 + 4308000)
static uint32_t cin[NC];
static uint16_t cout16[NC], cref16[NC];
static int64_t nc;

static void cast_inputs(void)
{
    static const uint32_t lowb[6] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
    static const int32_t lowh[6] = {0, 1, 0xfff, 0x1000, 0x1001, -1};
    for (uint32_t h = 0; h < 65536; h++)
        for (int k = 0; k < 6; k++) {
            cin[nc++] = (h << 16) | lowb[k];
            cin[nc++] = phx_f32_bits(phx_f16_to_f32((uint16_t)h)) + (uint32_t)lowh[k];
        }
    for (uint64_t b = 0; b <= 0xffffffffull; b += 997) cin[nc++] = (uint32_t)b;
}

static int cast_bits_ok(phx_dtype dt)
{
    px_cpu_cast(0, cout16, dt, cin, PHX_F32, nc);
    for (int64_t i = 0; i < nc; i++) {
        float f = phx_bits_f32(cin[i]);
        cref16[i] = dt == PHX_F16 ? phx_f32_to_f16(f) : phx_f32_to_bf16(f);
    }
    for (int64_t i = 0; i < nc; i++)
        if (cout16[i] != cref16[i]) {
            diag("f32 %08x -> %s: got %04x, expected %04x", cin[i], phx_dtype_name(dt), cout16[i], cref16[i]);
            return 0;
        }
    return 1;
}

static int widen_ok(phx_dtype st)
{
    static uint16_t h[65536];
    static uint32_t w[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    px_cpu_cast(0, w, PHX_F32, h, st, 65536);
    for (int i = 0; i < 65536; i++) {
        uint32_t r = phx_f32_bits(st == PHX_F16 ? phx_f16_to_f32(h[i]) : phx_bf16_to_f32(h[i]));
        if (w[i] != r) {
            diag("%s %04x -> f32: got %08x, expected %08x", phx_dtype_name(st), h[i], w[i], r);
            return 0;
        }
    }
    return 1;
}

/* lengths 0..40 from misaligned starts, NaN and subnormals inside: the
 * tails and the fix-up of a vector match math.h and nothing past n moves */
static int odd_lengths_ok(void)
{
    static const float v[] = {1.0f, NAN, -0.0f, 1e-40f, 65520.0f, -INFINITY, 3.14159f, 1.00048828125f};
    float src[48];
    uint16_t d[48];
    for (int n = 0; n <= 40; n++)
        for (int off = 0; off < 3; off++)
            for (int t = 0; t < 2; t++) {
                phx_dtype dt = t ? PHX_BF16 : PHX_F16;
                for (int i = 0; i < 48; i++) src[i] = v[(i * 5 + n) % 8] * (float)(1 + i % 3);
                for (int i = 0; i < 48; i++) d[i] = 0xabcd;
                px_cpu_cast(0, d + off, dt, src + off, PHX_F32, n);
                for (int i = 0; i < 48; i++) {
                    uint16_t e = i < off || i >= off + n ? 0xabcd
                        : t                              ? phx_f32_to_bf16(src[i])
                                                         : phx_f32_to_f16(src[i]);
                    if (d[i] != e) {
                        diag("%s n=%d off=%d element %d: %04x, expected %04x", phx_dtype_name(dt), n, off, i, d[i], e);
                        return 0;
                    }
                }
            }
    return 1;
}

/* PHX_CPU_ISA in a child (the variable is read once per process) through
 * libphalanx's kernel table: 0 when the call behaves as expected */
static int env_child(const char *value, int want_ok)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("PHX_CPU_ISA", value, 1);
        float a[3] = {-1.0f, 0.5f, 2.0f}, b[3];
        phx_status st = cu_kernels()->act_forward(0, PHX_ACT_GELU, 3, a, b, PHX_F32);
        if (want_ok) _exit(st == PHX_OK && b[0] == phx_f_gelu(a[0]) && b[2] == phx_f_gelu(a[2]) ? 0 : 1);
        _exit(st == PHX_EINVAL && strstr(phx_last_error(), "PHX_CPU_ISA='") &&
                      strstr(phx_last_error(), "expected generic, avx2 or avx512")
                  ? 0
                  : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

#define PER_PATH (5 * 4 + 8)

/* The row kernels in f16 and bf16 on path p against the generic path's
 * bits: softmax and log-softmax (causal and not) forward and backward,
 * layernorm forward (statistics too) and backward (dw, db too), and add,
 * over shapes whose rows fill the half path's chunks unevenly, one row a
 * chunk, and many rows a chunk. 1 when every bit agrees (NaN as NaN). */
static int rows_half_same(int p, phx_dtype dt)
{
    static const int64_t shapes[][2] = {{300, 128}, {5, 1500}, {301, 7}};
    enum { M = 300 * 128 + 5 * 1500 };
    static uint16_t sx[M], sdy[M], sy[2][M], sdx[2][M];
    static float lw[1500], lb[1500], mean[2][301], rstd[2][301], dw[2][1500], db[2][1500];
    int same = 1;
    for (int s = 0; s < 3; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        for (int64_t i = 0; i < n; i++) cu_set(sx, dt, i, cu_frand(-6, 6)), cu_set(sdy, dt, i, cu_frand(-1, 1));
        for (int64_t c = 0; c < cols; c++) lw[c] = cu_frand(0.5f, 1.5f), lb[c] = cu_frand(-1, 1);
        for (int v = 0; v < 6; v++) {
            int causal = v & 1, lg = (v >> 1) & 1;
            for (int q = 0; q < 2; q++) {
                px_cpu_isa_set(q ? p : PX_ISA_GENERIC);
                if (v < 4) {
                    px_cpu_softmax_forward(0, rows, cols, 0.125f, causal, lg, sx, sy[q], dt);
                    px_cpu_softmax_backward(0, rows, cols, 0.125f, causal, lg, sy[0], sdy, sdx[q], dt);
                } else if (v == 4) {
                    memset(dw[q], 0, sizeof dw[q]), memset(db[q], 0, sizeof db[q]);
                    px_cpu_layernorm_forward(0, rows, cols, 1e-5f, sx, lw, lb, sy[q], mean[q], rstd[q], dt);
                    px_cpu_layernorm_backward(0, rows, cols, sx, lw, mean[0], rstd[0], sdy, sdx[q], dw[q], db[q], dt);
                } else {
                    px_cpu_add(0, n, sx, sdy, sy[q], dt);
                    px_cpu_add(0, n, sy[q], sdy, sdx[q], dt);
                }
            }
            same &= same_half(sy[0], sy[1], dt, (int)n) && same_half(sdx[0], sdx[1], dt, (int)n);
            if (v == 4)
                same &= same_f32(mean[0], mean[1], (int)rows) && same_f32(rstd[0], rstd[1], (int)rows) &&
                    same_f32(dw[0], dw[1], (int)cols) && same_f32(db[0], db[1], (int)cols);
        }
    }
    return same;
}

int main(void)
{
    plan(4 * PER_PATH + 3 + 4);
    ok(env_child("avx-512", 0) == 0, "PHX_CPU_ISA=avx-512: EINVAL naming the variable, its value and the choices");
    ok(env_child("generic", 1) == 0, "PHX_CPU_ISA=generic: the kernel runs, math.h's bits");
    is_int(px_cpu_isa_set(7), PHX_EINVAL, "px_cpu_isa_set(7): EINVAL");
    diag("this CPU: best path %s, AVX512-BF16 %s", px_cpu_isa_name(px_cpu_isa_best()),
         px_cpu_has_avx512bf16() ? "yes" : "no");
    ok(px_cpu_isa_best() >= PX_ISA_GENERIC, "best path is known (%s)", px_cpu_isa_name(px_cpu_isa_best()));

    /* inputs: the grid, random magnitudes, edges */
    int n = 0;
    for (int i = 0; i < NG; i++) x[n++] = -8.0f + 16.0f * (float)i / (NG - 1);
    for (int i = 0; i < NR; i++) x[n++] = (i & 1 ? -1.0f : 1.0f) * (float)pow(10.0, cu_urand() * 11 - 8);
    static const float edges[] = {
        0.0f,     -0.0f,       NAN,          -NAN,    INFINITY,    -INFINITY,    1e-40f,      -1e-40f,      FLT_MIN,
        -FLT_MIN, FLT_MAX,     -FLT_MAX,     1e30f,   -1e30f,      1e13f,        -1e13f,      1e14f,        -1e14f,
        88.0f,    -88.0f,      104.0f,       -104.0f, 1.41421354f, -1.41421354f, 2.82842708f, -2.82842708f, 0.625f,
        -0.625f,  14.8492424f, -14.8492424f, 30.0f,   -30.0f,      1e-4f,        -1e-4f};
    memcpy(x + n, edges, sizeof edges);
    n += (int)(sizeof edges / sizeof edges[0]);
    n_all = n; /* not a multiple of 16: a masked tail */
    for (int i = 0; i < n; i++) dy[i] = cu_frand(-2, 2);
    cast_inputs();

    /* each path with ordinary stores, then AVX-512 again with streaming
     * stores forced on every output (relu, narrowing casts) */
    for (int path = PX_ISA_GENERIC; path <= PX_ISA_AVX512 + 1; path++) {
        int p = path > PX_ISA_AVX512 ? PX_ISA_AVX512 : path, streaming = path > PX_ISA_AVX512;
        const char *pn = streaming ? "avx512+streaming" : px_cpu_isa_name(p);
        if (p > px_cpu_isa_best()) {
            skip(PER_PATH, p == PX_ISA_AVX2 ? "this CPU has no AVX2" : "this CPU has no AVX-512");
            continue;
        }
        px_cpu_stream_set(streaming ? 0 : INT64_MAX);
        for (int a = 0; a < 5; a++) {
            /* the generic path's results, then this path's */
            px_cpu_isa_set(PX_ISA_GENERIC);
            px_cpu_act_forward(0, (phx_activation)a, n, x, ygen, PHX_F32);
            px_cpu_act_backward(0, (phx_activation)a, n, x, ygen, dy, dxgen, PHX_F32);
            px_cpu_isa_set(p);
            phx_status st = px_cpu_act_forward(0, (phx_activation)a, n, x, y, PHX_F32);
            st |= px_cpu_act_backward(0, (phx_activation)a, n, x, ygen, dy, dx, PHX_F32);
            int at, atb;
            double wf = worst(y, ygen, a, 0, &at), wb = worst(dx, dxgen, a, 1, &atb);
            int same = p != PX_ISA_AVX2 || (same_f32(y, ygen, n) && same_f32(dx, dxgen, n));
            ok(st == PHX_OK && wf <= 1 && same, "%s %s forward f32 vs float64 and edges (worst %.3g at x=%g: %g)", pn,
               cu_act_name(a), wf, at >= 0 ? x[at] : 0.0, at >= 0 ? y[at] : 0.0);
            ok(st == PHX_OK && wb <= 1 && same, "%s %s backward f32 vs float64 and edges (worst %.3g at x=%g: %g)", pn,
               cu_act_name(a), wb, atb >= 0 ? x[atb] : 0.0, atb >= 0 ? dx[atb] : 0.0);
            /* f16 and bf16: this path's f32 results on the widened
             * operands, rounded (on AVX2 and AVX-512 the half dtypes run
             * through the f32 kernels; the generic path's loops widen,
             * compute in f32 and round each element) */
            int hsame = 1;
            for (int d = 0; d < 2; d++) {
                phx_dtype dt = d ? PHX_BF16 : PHX_F16;
                static uint16_t xh[N], yh[2][N], dxh[2][N], dyh[N];
                static float xw[N], yw[N], dyw[N], rw[N];
                for (int i = 0; i < n; i++) cu_set(xh, dt, i, x[i]), cu_set(dyh, dt, i, dy[i]);
                for (int q = 0; q < 2; q++) {
                    px_cpu_isa_set(p);
                    if (q == 0) { /* the reference: widen, this path's f32 kernels, round */
                        px_cpu_cast(0, xw, PHX_F32, xh, dt, n);
                        px_cpu_cast(0, dyw, PHX_F32, dyh, dt, n);
                        px_cpu_act_forward(0, (phx_activation)a, n, xw, rw, PHX_F32);
                        px_cpu_cast(0, yh[0], dt, rw, PHX_F32, n);
                        px_cpu_cast(0, yw, PHX_F32, yh[0], dt, n);
                        px_cpu_act_backward(0, (phx_activation)a, n, xw, yw, dyw, rw, PHX_F32);
                        px_cpu_cast(0, dxh[0], dt, rw, PHX_F32, n);
                        continue;
                    }
                    px_cpu_act_forward(0, (phx_activation)a, n, xh, yh[q], dt);
                    px_cpu_act_backward(0, (phx_activation)a, n, xh, yh[0], dyh, dxh[q], dt);
                }
                hsame &= same_half(yh[0], yh[1], dt, n) && same_half(dxh[0], dxh[1], dt, n);
            }
            ok(hsame, "%s %s f16 and bf16: its f32 kernels' bits on the widened operands, rounded", pn, cu_act_name(a));
            /* in place */
            memcpy(xi, x, sizeof x);
            px_cpu_act_forward(0, (phx_activation)a, n, xi, xi, PHX_F32);
            int ip = !memcmp(xi, y, (size_t)n * 4);
            memcpy(xi, dy, sizeof dy);
            px_cpu_act_backward(0, (phx_activation)a, n, x, ygen, xi, xi, PHX_F32);
            ok(ip && !memcmp(xi, dx, (size_t)n * 4), "%s %s in place gives the same bits", pn, cu_act_name(a));
        }
        /* an element's result does not depend on its neighbours (gelu
         * packs erf's tail lanes across vectors): each alone, the bulk's bits */
        px_cpu_isa_set(p);
        int alone = 1;
        for (int a = 0; a < 5; a++) {
            px_cpu_act_forward(0, (phx_activation)a, n, x, y, PHX_F32);
            for (int i = 0; i < n; i++) {
                float one;
                px_cpu_act_forward(0, (phx_activation)a, 1, x + i, &one, PHX_F32);
                if (memcmp(&one, y + i, 4) && !(isnan(one) && isnan(y[i]))) {
                    if (alone) diag("%s at x=%g: alone %a, in bulk %a", cu_act_name(a), x[i], one, y[i]);
                    alone = 0;
                }
            }
        }
        ok(alone, "%s forward of each element alone gives its bits in bulk", pn);
        ok(cast_bits_ok(PHX_F16), "%s cast f32 -> f16: math.h's bits on %lld patterns", pn, (long long)nc);
        ok(cast_bits_ok(PHX_BF16), "%s cast f32 -> bf16: math.h's bits on %lld patterns", pn, (long long)nc);
        ok(widen_ok(PHX_F16), "%s cast f16 -> f32: all 65536 patterns", pn);
        ok(widen_ok(PHX_BF16), "%s cast bf16 -> f32: all 65536 patterns", pn);
        ok(odd_lengths_ok(), "%s casts of 0..40 elements from misaligned starts", pn);
        ok(rows_half_same(p, PHX_F16), "%s softmax, layernorm and add on f16, forward and backward: the generic bits",
           pn);
        ok(rows_half_same(p, PHX_BF16), "%s softmax, layernorm and add on bf16, forward and backward: the generic bits",
           pn);
    }

#if PX_HAVE_X86
    if (px_cpu_isa_best() == PX_ISA_AVX512) {
        float at = 0;
        double w = sweep(0, exp, -110.0f, 89.0f, &at);
        ok(w <= 1.0, "avx512 exp within 1 ulp over [-110, 89] (worst %.3f at %a)", w, at);
        w = sweep(1, tanh, -INFINITY, INFINITY, &at);
        ok(w <= 1.5, "avx512 tanh within 1.5 ulp over all floats (worst %.3f at %a)", w, at);
        w = sweep(2, d_erf1p, -13.0f, 13.0f, &at);
        ok(w <= 16.0, "avx512 1 + erf within 16 ulp over [-13, 13] (worst %.3f at %a)", w, at);
    } else
#endif
        skip(3, "no AVX-512 on this CPU");
    return done_testing();
}
