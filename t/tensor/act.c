/* Activation kernels, forward and backward, against float64 references
 * (the formulas from their definitions) and central finite differences of
 * the float64 forward; f16/bf16 within an ulp of the rounded reference;
 * in-place use; split over 2 threads, the bits of 1; relu on NaN on
 * every path; and errors. */
#include "config.h"
#include "kernels/cpu/cpu.h"
#include <stdlib.h>
#include <string.h>
#include "src/base/threads.h"
#include "t/core-util.h"

#define N 4099

/* Worst error in ulp of the float64 value over every 1021st float in
 * [lo, hi] (all floats: lo = -inf); ulps at the exact value's binade,
 * down to the subnormal spacing. */
static double sweep_ulp(float (*f)(float), double (*ref)(double), float lo, float hi, float *at)
{
    double w = 0;
    for (uint64_t b = 0; b <= 0xffffffffull; b += 1021) {
        uint32_t u = (uint32_t)b;
        float v;
        memcpy(&v, &u, 4);
        if (!(v >= lo && v <= hi)) continue;
        double r = ref(v), e;
        if (isinf((float)r))
            e = isinf(f(v)) && (f(v) > 0) == (r > 0) ? 0 : INFINITY;
        else {
            int ex;
            frexp(fabs(r), &ex);
            e = fabs((double)f(v) - r) / ldexp(1, ex - 24 < -149 ? -149 : ex - 24);
            if (e != e) e = INFINITY;
        }
        if (!(e <= w)) w = e, *at = v;
    }
    return w;
}
static float f_exp(float v)
{
    return phx_expf(v);
}
static float f_tanh(float v)
{
    return phx_tanhf(v);
}
static float f_erf1p(float v)
{
    return phx_erf1p(v);
}
static double d_erf1p(double v)
{
    return erfc(-v);
}

static float x[N], y[N], dy[N], dx[N];
static double ref[N];

/* relu as PyTorch: NaN in, NaN out, and the gradient passes there; -0
 * and 0 give +0 and no gradient, even for an infinite or NaN dy. 37 elements: a vector body and a masked
 * tail, NaNs in both; f32 on each ISA path (AVX-512 also with streaming
 * stores), f16 and bf16 on the bits. */
static void relu_nan(const phx_kernels_v1 *K)
{
    enum { M = 37 };
    float xn[M], yn[M], dyn[M], dxn[M];
    for (int i = 0; i < M; i++) xn[i] = (float)(i % 5) - 2.0f, dyn[i] = 1.0f + (float)i;
    xn[3] = NAN, xn[20] = -NAN, xn[35] = NAN, xn[7] = -0.0f;
    /* an infinite or NaN dy where x <= 0 still gives 0 (a select, not dy * 0) */
    dyn[0] = INFINITY, dyn[2] = NAN, dyn[7] = -INFINITY, dyn[31] = NAN;
    for (int path = PX_ISA_GENERIC; path <= PX_ISA_AVX512 + 1; path++) {
        int p = path > PX_ISA_AVX512 ? PX_ISA_AVX512 : path;
        const char *pn = path > PX_ISA_AVX512 ? "avx512+streaming" : px_cpu_isa_name(p);
        if (p > px_cpu_isa_best()) {
            skip(3, p == PX_ISA_AVX2 ? "this CPU has no AVX2" : "this CPU has no AVX-512");
            continue;
        }
        px_cpu_isa_set(p);
        px_cpu_stream_set(path > PX_ISA_AVX512 ? 0 : INT64_MAX);
        int good = 1, gradgood = 1, halfgood = 1;
        K->act_forward(0, PHX_ACT_RELU, M, xn, yn, PHX_F32);
        K->act_backward(0, PHX_ACT_RELU, M, xn, yn, dyn, dxn, PHX_F32);
        for (int i = 0; i < M; i++) {
            if (isnan(xn[i])) {
                good &= isnan(yn[i]);
                gradgood &= dxn[i] == dyn[i];
            } else {
                good &= yn[i] == (xn[i] > 0 ? xn[i] : 0.0f) && !signbit(yn[i]);
                gradgood &= dxn[i] == (xn[i] > 0 ? dyn[i] : 0.0f);
            }
        }
        for (int d = 0; d < 2; d++) {
            phx_dtype dt = d ? PHX_BF16 : PHX_F16;
            uint16_t xh[M], yh[M], dyh[M], dxh[M];
            for (int i = 0; i < M; i++) cu_set(xh, dt, i, xn[i]), cu_set(dyh, dt, i, dyn[i]);
            K->act_forward(0, PHX_ACT_RELU, M, xh, yh, dt);
            K->act_backward(0, PHX_ACT_RELU, M, xh, yh, dyh, dxh, dt);
            for (int i = 0; i < M; i++) {
                double yv = cu_get(yh, dt, i), gv = cu_get(dxh, dt, i);
                halfgood &= isnan(xn[i]) ? isnan(yv) && gv == dyn[i]
                                         : yv == (xn[i] > 0 ? xn[i] : 0.0) && gv == (xn[i] > 0 ? dyn[i] : 0.0);
            }
        }
        ok(good, "%s relu f32: NaN gives NaN, -0 and negatives +0", pn);
        ok(gradgood,
           "%s relu backward f32: a NaN input passes dy, x <= 0 gives 0 for an infinite or NaN dy (PyTorch's "
           "threshold_backward)",
           pn);
        ok(halfgood, "%s relu f16 and bf16: NaN gives NaN and passes dy; x <= 0 gives 0 for any dy", pn);
    }
    px_cpu_stream_set(-1);
    px_cpu_isa_set(px_cpu_isa_best());
}

int main(void)
{
    plan(5 * 5 + 2 * 5 + 4 + 3 + 6 + 3 * 4);
    const phx_kernels_v1 *K = cu_kernels();
    /* inputs: a grid over [-8, 8], then extremes and values near 0 */
    for (int i = 0; i < N; i++) x[i] = -8.0f + 16.0f * (float)i / (N - 1), dy[i] = cu_frand(-2, 2);
    float extremes[] = {0.0f, -0.0f, 1e-4f, -1e-4f, 30.0f, -30.0f, 100.0f, -100.0f, 1e-30f, -88.0f, 88.0f};
    memcpy(x, extremes, sizeof extremes);

    for (int a = 0; a < 5; a++) {
        /* forward f32 vs float64 */
        phx_status st = K->act_forward(0, (phx_activation)a, N, x, y, PHX_F32);
        for (int i = 0; i < N; i++) ref[i] = cu_act_ref(a, x[i]);
        int64_t at;
        double w = cu_worst(y, PHX_F32, ref, N, 4e-6, 1e-7, &at);
        ok(st == PHX_OK && w <= 1, "%s forward f32 vs float64 (worst %.3g of tol at x=%g)", cu_act_name(a), w,
           at >= 0 ? x[at] : 0.0);
        /* backward f32 vs the analytic float64 derivative */
        st = K->act_backward(0, (phx_activation)a, N, x, y, dy, dx, PHX_F32);
        for (int i = 0; i < N; i++) ref[i] = (double)dy[i] * cu_act_dref(a, x[i]);
        w = cu_worst(dx, PHX_F32, ref, N, 4e-6, 1e-6, &at);
        ok(st == PHX_OK && w <= 1, "%s backward f32 vs float64 derivative (worst %.3g at x=%g)", cu_act_name(a), w,
           at >= 0 ? x[at] : 0.0);
        /* backward vs central differences of the float64 forward */
        double wf = 0;
        for (int i = 0; i < N; i++) {
            double h = 1e-5;
            if (a == PHX_ACT_RELU && fabs(x[i]) < 2 * h) continue; /* the kink */
            double fd = (cu_act_ref(a, (double)x[i] + h) - cu_act_ref(a, (double)x[i] - h)) / (2 * h);
            double e = fabs((double)dx[i] - dy[i] * fd) / (1e-5 + 1e-5 * fabs(dy[i] * fd));
            if (e > wf) wf = e;
        }
        ok(wf <= 1, "%s backward vs finite differences (worst %.3g of tol 1e-5)", cu_act_name(a), wf);
        /* f16 and bf16: within an ulp of the rounded reference */
        phx_dtype dts[2] = {PHX_F16, PHX_BF16};
        double wh = 0;
        for (int d = 0; d < 2; d++) {
            static uint16_t xh[N], yh[N], dyh[N], dxh[N];
            for (int i = 0; i < N; i++) cu_set(xh, dts[d], i, x[i] / 2), cu_set(dyh, dts[d], i, dy[i]);
            K->act_forward(0, (phx_activation)a, N, xh, yh, dts[d]);
            for (int i = 0; i < N; i++) ref[i] = cu_act_ref(a, cu_get(xh, dts[d], i));
            double w1 = cu_worst(yh, dts[d], ref, N, cu_eps(dts[d]), 1e-7, NULL);
            K->act_backward(0, (phx_activation)a, N, xh, yh, dyh, dxh, dts[d]);
            /* tanh/sigmoid differentiate through the stored (rounded) y, as
             * torch does: 1 - y^2 near saturation is then exact in y_h */
            for (int i = 0; i < N; i++) {
                double yv = cu_get(yh, dts[d], i);
                double g = a == PHX_ACT_TANH ? 1 - yv * yv
                    : a == PHX_ACT_SIGMOID   ? yv * (1 - yv)
                                             : cu_act_dref(a, cu_get(xh, dts[d], i));
                ref[i] = cu_get(dyh, dts[d], i) * g;
            }
            double w2 = cu_worst(dxh, dts[d], ref, N, 3 * cu_eps(dts[d]), 1e-6, NULL);
            wh = fmax(wh, fmax(w1, w2));
        }
        ok(wh <= 1, "%s f16 and bf16 forward/backward within an ulp or so (worst %.3g)", cu_act_name(a), wh);
        /* in place: y overwrites x, dx overwrites dy */
        static float xi[N], dyi[N];
        memcpy(xi, x, sizeof x);
        memcpy(dyi, dy, sizeof dy);
        K->act_forward(0, (phx_activation)a, N, xi, xi, PHX_F32);
        int same = memcmp(xi, y, sizeof y) == 0;
        K->act_backward(0, (phx_activation)a, N, x, y, dyi, dyi, PHX_F32);
        ok(same && memcmp(dyi, dx, sizeof dx) == 0, "%s in place gives the same bits", cu_act_name(a));
    }
    /* the math.h functions the CUDA kernels share give these exact values
     * on the generic path (AVX-512 uses FMA: t/tensor/isa checks its bounds) */
    px_cpu_isa_set(PX_ISA_GENERIC);
    for (int a = 0; a < 5; a++) {
        px_cpu_act_forward(0, (phx_activation)a, N, x, y, PHX_F32);
        px_cpu_act_backward(0, (phx_activation)a, N, x, y, dy, dx, PHX_F32);
        int same = 1;
        for (int i = 0; i < N; i++)
            same &= y[i] == phx_act(a, x[i]) || (y[i] != y[i] && phx_act(a, x[i]) != phx_act(a, x[i]));
        ok(same, "%s kernel = phx_act from kernels/math.h", cu_act_name(a));
        same = 1;
        for (int i = 0; i < N; i++) same &= dx[i] == dy[i] * phx_act_grad(a, x[i], y[i]);
        ok(same, "%s backward = dy * phx_act_grad", cu_act_name(a));
    }
    /* the branch-free expf, tanhf and 1 + erf of kernels/math.h */
    float at = 0;
    double w = sweep_ulp(f_exp, exp, -110.0f, 89.0f, &at);
    ok(w <= 1.0, "phx_expf within 1 ulp over [-110, 89], subnormals and overflow included (worst %.3f at %a)", w, at);
    w = sweep_ulp(f_tanh, tanh, -INFINITY, INFINITY, &at);
    ok(w <= 1.5, "phx_tanhf within 1.5 ulp over all floats (worst %.3f at %a)", w, at);
    w = sweep_ulp(f_erf1p, d_erf1p, -13.0f, 13.0f, &at);
    ok(w <= 16.0, "phx_erf1p = 1 + erf within 16 ulp over [-13, 13], tails included (worst %.3f at %a)", w, at);
    ok(isnan(phx_expf(NAN)) && phx_expf(-INFINITY) == 0.0f && isinf(phx_expf(INFINITY)) &&
           phx_tanhf(-INFINITY) == -1.0f && isnan(phx_tanhf(NAN)) && phx_erf1p(-INFINITY) == 0.0f &&
           phx_erf1p(INFINITY) == 2.0f && isnan(phx_erf1p(NAN)),
       "NaN and infinities: exp(-inf) 0, tanh(-inf) -1, 1 + erf(+-inf) 2 and 0, NaN stays NaN");
    /* saturation: no NaN far out */
    K->act_forward(0, PHX_ACT_SIGMOID, 11, extremes, y, PHX_F32);
    ok(y[6] == 1.0f && y[7] == 0.0f && y[9] >= 0.0f, "sigmoid saturates to 1 and 0 without NaN (%g %g)", y[6], y[7]);
    /* large counts run in parts on the calling thread's pool: every part
     * an elementwise slice, so 2 threads give the bits of 1 (odd count:
     * the last part is short; f32 streams its stores at this size) */
    {
        enum { M = 1000003 };
        float *bx = malloc(M * sizeof *bx), *bdy = malloc(M * sizeof *bdy), *o1 = malloc(M * sizeof *o1),
              *o2 = malloc(M * sizeof *o2);
        uint16_t *hx = malloc(M * 2), *h1 = malloc(M * 2), *h2 = malloc(M * 2);
        for (int i = 0; i < M; i++) bx[i] = cu_frand(-6, 6), bdy[i] = cu_frand(-2, 2), cu_set(hx, PHX_BF16, i, bx[i]);
        int same32 = 1, same16 = 1;
        for (int a = 0; a < 5; a++)
            for (int pass = 0; pass < 2; pass++) {
                for (int t = 1; t <= 2; t++) {
                    px_threads_set_local(t);
                    float *o = t == 1 ? o1 : o2;
                    uint16_t *h = t == 1 ? h1 : h2;
                    if (pass == 0) {
                        K->act_forward(0, (phx_activation)a, M, bx, o, PHX_F32);
                        K->act_forward(0, (phx_activation)a, M, hx, h, PHX_BF16);
                    } else {
                        K->act_backward(0, (phx_activation)a, M, bx, bx, bdy, o, PHX_F32);
                        K->act_backward(0, (phx_activation)a, M, hx, hx, hx, h, PHX_BF16);
                    }
                }
                same32 &= memcmp(o1, o2, M * sizeof *o1) == 0;
                same16 &= memcmp(h1, h2, M * 2) == 0;
            }
        ok(same32, "f32 forward and backward of every activation, %d elements: 2 threads give 1 thread's bits", M);
        ok(same16, "bf16 likewise");
        px_threads_set_local(1);
        K->add(0, M, bx, bdy, o1, PHX_F32);
        px_threads_set_local(2);
        K->add(0, M, bx, bdy, o2, PHX_F32);
        int add_ok = memcmp(o1, o2, M * sizeof *o1) == 0;
        for (int i = 0; i < M && add_ok; i += 9973) add_ok = o2[i] == bx[i] + bdy[i];
        ok(add_ok, "add of %d elements: 2 threads give 1 thread's bits, each a + b", M);
        px_threads_set_local(0);
        free(bx), free(bdy), free(o1), free(o2), free(hx), free(h1), free(h2);
    }
    relu_nan(K);
    /* errors */
    is_int(K->act_forward(0, (phx_activation)7, N, x, y, PHX_F32), PHX_EINVAL, "activation kind 7: EINVAL");
    like(phx_last_error(), "kind 7, expected 0..4", "message names the kind");
    is_int(K->act_backward(0, PHX_ACT_GELU, N, x, y, dy, dx, PHX_I32), PHX_EINVAL, "i32 activations: EINVAL");
    like(phx_last_error(), "act_backward: dtype i32, expected f32, f16 or bf16", "message names kernel and dtype");
    is_int(K->act_forward(0, PHX_ACT_RELU, -1, x, y, PHX_F32), PHX_EINVAL, "negative count: EINVAL");
    return done_testing();
}
