/* Mixed-precision GEMM on the CPU: operands in f16 or bf16, f32
 * accumulation, the result in f32, f16 or bf16. Checked against a float64
 * reference computed from the ROUNDED operands, within the rigorous
 * accumulation bound |c - ref| <= gamma_{k+1} sum_p |a_ip b_pj| (gamma_n =
 * n u / (1 - n u), u = 2^-24; products of f16/bf16 operands are exact in
 * f32) plus, for a low-precision C, one rounding of the result. The
 * roundings f32 -> f16/bf16 are checked first against an independent
 * double-precision rounding (rint on the scaled value).
 *
 * f16 products also run split into bf16 hi and lo parts on oneDNN's bf16
 * matmul (PHX_CPU_GEMM=dnnl; the default where oneDNN runs bf16 on AMX):
 * K' = 3k or 4k exact products accumulated in f32, the 3-term split
 * dropping lo_a lo_b (at most 2^-16 |a b|), so its bound is gamma_{tk+2}
 * sum |a b| (+ 2^-16 sum |a b|); and against the widened path within the
 * sum of both bounds. Where oneDNN declines (no oneDNN, no bf16 matmul)
 * the widened path runs and the same bounds hold. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

typedef struct fmt {
    phx_dtype dt;
    int mant; /* significand bits, hidden bit included */
    int emin; /* exponent of the smallest normal */
    double max; /* largest finite value */
} fmt;

static const fmt F16 = {PHX_F16, 11, -14, 65504.0};
static const fmt BF16 = {PHX_BF16, 8, -126, 3.38953138925153547590470800371487866880e38};

/* x (an f32 value) rounded to fmt, nearest even, overflow to inf. */
static double round_to(double x, const fmt *f)
{
    if (isnan(x) || isinf(x) || x == 0) return x;
    int e;
    frexp(fabs(x), &e);
    int exp = e - 1 < f->emin ? f->emin : e - 1;
    double ulp = ldexp(1.0, exp - (f->mant - 1));
    double r = rint(x / ulp) * ulp;
    if (fabs(r) > f->max) return copysign(INFINITY, x);
    return r;
}

static uint64_t rng_state = 88172645463325252ull;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double normal(void)
{
    double u1 = uniform() + 1e-300, u2 = uniform();
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* The cast kernel against round_to, on random values over the whole range
 * of the format and the edge cases (ties, overflow threshold, subnormals). */
static void check_cast(const fmt *f)
{
    enum { N = 4096 };
    static float v[N];
    int n = 0;
    const float edge[] = {65504.0f,       65519.996f,     65520.0f,     65536.0f,      1e5f,          5.9604645e-8f,
                          2.9802322e-8f,  2.9802326e-8f,  8.940697e-8f, 6.1035156e-5f, 6.1035153e-5f, 1.0009765625f,
                          1.00048828125f, 1.00146484375f, 1.00390625f,  1.01171875f,   3.3895314e38f, FLT_MAX,
                          1e-40f,         -0.0f,          0.0f,         INFINITY,      -INFINITY,     NAN};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        v[n++] = edge[i];
        v[n++] = -edge[i];
    }
    while (n < N) {
        int sc = (int)(uniform() * (f->dt == PHX_F16 ? 44 : 250)) - (f->dt == PHX_F16 ? 28 : 125);
        v[n++] = (float)ldexp(normal(), sc);
    }
    int64_t shape[1] = {N};
    phx_tensor *src = phx_tensor_from_data(PHX_F32, 1, shape, v);
    phx_tensor *dst = phx_tensor_new(f->dt, 1, shape, phx_cpu());
    phx_status st = phx_tensor_cast(dst, src);
    int bad = 0;
    for (int i = 0; i < N && st == PHX_OK; i++) {
        double got = 0, want = round_to(v[i], f);
        phx_tensor_get(dst, i, &got);
        int same = isnan(want) ? isnan(got) : (got == want && signbit(got) == signbit(want));
        if (!same && bad++ < 3)
            diag("%s(%.9g): expected %.9g, got %.9g", phx_dtype_name(f->dt), (double)v[i], want, got);
    }
    ok(st == PHX_OK && bad == 0, "f32 -> %s cast rounds %d values as the float64 reference (%d differ)",
       phx_dtype_name(f->dt), N, bad);
    phx_tensor_free(src);
    phx_tensor_free(dst);
}

/* The f16 path under test: its products per f16 product (1 widened, 3 or
 * 4 split) and the dropped share of |a b| (2^-16 for the 3-term split),
 * and the largest |c - ref| / sum |a b| seen by the last check_gemm. */
static int g_terms = 1;
static double g_drop = 0, g_err_scale;
static const char *g_path = "";

/* op(A) (m,k) op(B) (k,n) with operands in f->dt, C in cdt. */
static void check_gemm(const fmt *f, phx_dtype cdt, bool ta, bool tb, int m, int n, int k, float alpha, float beta)
{
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n}, sc[2] = {m, n};
    float *a32 = malloc(sizeof(float) * m * k), *b32 = malloc(sizeof(float) * k * n);
    float *c0 = malloc(sizeof(float) * m * n);
    double *ar = malloc(sizeof(double) * m * k), *br = malloc(sizeof(double) * k * n);
    /* Rows of A and columns of B at different magnitudes: a bound that
     * holds per element, not only on average. */
    for (int i = 0; i < m * k; i++) a32[i] = (float)(normal() * ldexp(1.0, (i / k) % 5 - 2));
    for (int i = 0; i < k * n; i++) b32[i] = (float)(normal() * ldexp(1.0, (i % n) % 4 - 1));
    for (int i = 0; i < m * n; i++) c0[i] = (float)normal();
    for (int i = 0; i < m * k; i++) ar[i] = round_to(a32[i], f);
    for (int i = 0; i < k * n; i++) br[i] = round_to(b32[i], f);

    /* Operands stored as the kernel expects: A is (k,m) when transposed. */
    phx_tensor *a = phx_tensor_new(f->dt, 2, sa, phx_cpu()), *b = phx_tensor_new(f->dt, 2, sb, phx_cpu());
    phx_tensor *c = phx_tensor_new(cdt, 2, sc, phx_cpu());
    float *at = malloc(sizeof(float) * m * k), *bt = malloc(sizeof(float) * k * n);
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++) at[ta ? p * m + i : i * k + p] = a32[i * k + p];
    for (int p = 0; p < k; p++)
        for (int j = 0; j < n; j++) bt[tb ? j * k + p : p * n + j] = b32[p * n + j];
    phx_tensor *a_f = phx_tensor_from_data(PHX_F32, 2, sa, at), *b_f = phx_tensor_from_data(PHX_F32, 2, sb, bt);
    phx_tensor *c_f = phx_tensor_from_data(PHX_F32, 2, sc, c0);
    phx_tensor_cast(a, a_f);
    phx_tensor_cast(b, b_f);
    phx_tensor_cast(c, c_f);
    phx_status st = phx_gemm(ta, tb, alpha, a, b, beta, c);

    const double u = ldexp(1.0, -24);
    const int tk = f->dt == PHX_F16 ? g_terms : 1, terms = tk * k + 2; /* k products, alpha, beta c */
    const double drop = f->dt == PHX_F16 ? g_drop : 0;
    g_err_scale = 0;
    const double gamma = terms * u / (1 - terms * u);
    const fmt *cf = cdt == PHX_F16 ? &F16 : cdt == PHX_BF16 ? &BF16 : NULL;
    const double uc = cf ? ldexp(1.0, -cf->mant) : 0;
    double worst = 0, max_rel = 0, max_rel_f32 = 0;
    for (int i = 0; i < m && st == PHX_OK; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0, s = 0, exact = 0, se = 0;
            for (int p = 0; p < k; p++) {
                ref += ar[i * k + p] * br[p * n + j];
                s += fabs(ar[i * k + p] * br[p * n + j]);
                exact += (double)a32[i * k + p] * b32[p * n + j];
                se += fabs((double)a32[i * k + p] * b32[p * n + j]);
            }
            double cin = cf ? round_to(c0[i * n + j], cf) : c0[i * n + j];
            ref = alpha * ref + beta * cin;
            s = fabs(alpha) * s + fabs(beta * cin);
            exact = alpha * exact + beta * c0[i * n + j];
            double got = 0;
            phx_tensor_get(c, (int64_t)i * n + j, &got);
            /* accumulation in f32, then (low-precision C) one more rounding;
             * 2^-24 * 2^emin covers a subnormal result */
            double acc = gamma * s + drop * (s - fabs(beta * cin));
            double bound = acc + uc * (fabs(ref) + acc) + (cf ? ldexp(1.0, cf->emin - cf->mant) : 0);
            if (!cf && s > 0) g_err_scale = fmax(g_err_scale, fabs(got - ref) / s);
            double r = fabs(got - ref) / bound;
            if (!(r <= worst)) worst = r;
            if (fabs(ref) > 1e-3 * s) max_rel = fmax(max_rel, fabs(got - ref) / fabs(ref));
            if (fabs(exact) > 1e-3 * se) max_rel_f32 = fmax(max_rel_f32, fabs(got - exact) / fabs(exact));
            (void)se;
        }
    ok(st == PHX_OK && worst <= 1.0,
       "%s%s x %s -> %s gemm%s%s (%d,%d,%d) alpha %g beta %g: within the f32 accumulation bound (worst %.3f of it)",
       f->dt == PHX_F16 ? g_path : "", phx_dtype_name(f->dt), phx_dtype_name(f->dt), phx_dtype_name(cdt),
       ta ? " A^T" : "", tb ? " B^T" : "", m, n, k, alpha, beta, worst);
    if (st != PHX_OK) diag("%s", phx_last_error());
    diag("  max relative error vs the rounded operands %.3g; vs the unrounded f32 operands %.3g", max_rel, max_rel_f32);
    phx_tensor_free(a);
    phx_tensor_free(b);
    phx_tensor_free(c);
    phx_tensor_free(a_f);
    phx_tensor_free(b_f);
    phx_tensor_free(c_f);
    free(a32), free(b32), free(c0), free(ar), free(br), free(at), free(bt);
}

/* The 7 f16 products of main under the path PHX_CPU_GEMM / PHX_CPU_F16_SPLIT
 * pick, and their largest error relative to sum |a b| (f32 C), which f32
 * arithmetic on the f16 values keeps near 1e-6: at most 1e-5. */
static void check_f16_path(const char *gemm, const char *split, int terms, double drop, const char *name)
{
    setenv("PHX_CPU_GEMM", gemm, 1);
    if (split) setenv("PHX_CPU_F16_SPLIT", split, 1);
    g_terms = terms, g_drop = drop, g_path = name;
    double worst = 0;
    check_gemm(&F16, PHX_F32, false, false, 37, 19, 257, 1.0f, 0.0f);
    worst = fmax(worst, g_err_scale);
    check_gemm(&F16, PHX_F32, true, false, 23, 31, 300, 1.0f, 0.0f);
    worst = fmax(worst, g_err_scale);
    check_gemm(&F16, PHX_F32, false, true, 64, 10, 784, 1.0f, 0.0f);
    worst = fmax(worst, g_err_scale);
    check_gemm(&F16, PHX_F32, true, true, 8, 9, 1000, 1.0f, 0.0f);
    worst = fmax(worst, g_err_scale);
    check_gemm(&F16, PHX_F32, false, false, 16, 16, 128, 0.5f, 2.0f);
    check_gemm(&F16, PHX_F16, false, false, 37, 19, 257, 1.0f, 0.0f);
    check_gemm(&F16, PHX_F16, false, true, 64, 33, 512, 1.0f, 1.0f);
    /* the split's blocks (gemm-dnnl.c): k of 1,024 and more in blocks of
     * 256 added up, A of more rows than a 1 MiB A' holds in row blocks */
    check_gemm(&F16, PHX_F32, true, false, 40, 24, 1100, 1.0f, 0.0f);
    worst = fmax(worst, g_err_scale);
    check_gemm(&F16, PHX_F16, false, true, 20, 17, 1030, 1.0f, 1.0f);
    check_gemm(&F16, PHX_F32, false, false, 24, 20, 1040, 0.5f, 2.0f);
    check_gemm(&F16, PHX_F32, false, false, 2800, 8, 64, 1.0f, 0.0f);
    worst = fmax(worst, g_err_scale);
    check_gemm(&F16, PHX_F16, true, false, 2800, 5, 64, 0.5f, 2.0f);
    ok(worst <= 1e-5, "%sf16 gemm: largest error %.3g of sum |a b| (at most 1e-5)", name, worst);
    unsetenv("PHX_CPU_GEMM");
    unsetenv("PHX_CPU_F16_SPLIT");
    g_terms = 1, g_drop = 0, g_path = "";
}

/* oneDNN's matmul cut into blocks at 2 threads (gemm-dnnl.c): blocks of
 * columns (C wide and short), and of rows with a transposed A, take dense
 * copies of the strided parts (C both ways where beta reads it), without
 * which oneDNN ran its slower gemm:jit. Each product checked within its
 * bound; the path is the default one (bf16 and the f16 split on oneDNN
 * where the CPU has the instructions, the widened path elsewhere). */
static void check_blocks(void)
{
    int prev = phx_num_threads();
    phx_set_num_threads(2);
    const fmt *fs[2] = {&BF16, &F16};
    for (int i = 0; i < 2; i++) {
        g_terms = fs[i]->dt == PHX_F16 ? 3 : 1, g_drop = fs[i]->dt == PHX_F16 ? ldexp(1.0, -16) : 0;
        check_gemm(fs[i], PHX_F32, false, false, 40, 256, 96, 1.0f, 1.0f); /* columns: B and C copied */
        check_gemm(fs[i], fs[i]->dt, false, true, 64, 200, 128, 1.0f, 0.0f); /* columns: C copied */
        check_gemm(fs[i], PHX_F32, true, false, 256, 96, 64, 0.5f, 2.0f); /* rows: A^T copied */
        check_gemm(fs[i], fs[i]->dt, true, true, 160, 64, 72, 1.0f, 1.0f);
    }
    g_terms = 1, g_drop = 0;
    phx_set_num_threads(prev);
}

/* A (m,k) B (k,n) in f16 under PHX_CPU_GEMM=gemm into c (f32, m x n):
 * c = A B + beta c. */
static phx_status f16_product_beta(const char *gemm, const char *split, int m, int n, int k, const float *a32,
                                   const float *b32, float beta, float *c)
{
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sc[2] = {m, n};
    phx_tensor *af = phx_tensor_from_data(PHX_F32, 2, sa, (void *)a32),
               *bf = phx_tensor_from_data(PHX_F32, 2, sb, (void *)b32);
    phx_tensor *a = phx_tensor_new(PHX_F16, 2, sa, phx_cpu()), *b = phx_tensor_new(PHX_F16, 2, sb, phx_cpu());
    phx_tensor *cc =
        beta != 0.0f ? phx_tensor_from_data(PHX_F32, 2, sc, c) : phx_tensor_zeros(PHX_F32, 2, sc, phx_cpu());
    phx_tensor_cast(a, af);
    phx_tensor_cast(b, bf);
    setenv("PHX_CPU_GEMM", gemm, 1);
    if (split) setenv("PHX_CPU_F16_SPLIT", split, 1);
    phx_status st = phx_gemm(false, false, 1.0f, a, b, beta, cc);
    unsetenv("PHX_CPU_GEMM");
    unsetenv("PHX_CPU_F16_SPLIT");
    for (int i = 0; i < m * n && st == PHX_OK; i++) {
        double v = 0;
        phx_tensor_get(cc, i, &v);
        c[i] = (float)v;
    }
    phx_tensor_free(af), phx_tensor_free(bf), phx_tensor_free(a), phx_tensor_free(b), phx_tensor_free(cc);
    return st;
}

static phx_status f16_product(const char *gemm, const char *split, int m, int n, int k, const float *a32,
                              const float *b32, float *c)
{
    return f16_product_beta(gemm, split, m, n, k, a32, b32, 0.0f, c);
}

/* inf in the last rows of an A that the split takes in row blocks, C read
 * (beta 1): the split declines before any block writes C, so C is the
 * widened BLAS path's, not a first block's sum added twice. */
static void check_late_inf(void)
{
    enum { M = 2800, N = 8, K = 64 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *cs = malloc(sizeof(float) * M * N), *cw = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) a[i] = (float)round_to(normal(), &F16);
    for (int i = 0; i < K * N; i++) b[i] = (float)round_to(normal(), &F16);
    a[(M - 3) * K + 1] = INFINITY;
    for (int i = 0; i < M * N; i++) cs[i] = cw[i] = (float)(i % 7);
    phx_status s1 = f16_product_beta("dnnl", "3", M, N, K, a, b, 1.0f, cs);
    phx_status s2 = f16_product_beta("blas", NULL, M, N, K, a, b, 1.0f, cw);
    int same = s1 == PHX_OK && s2 == PHX_OK, infs = 0;
    for (int i = 0; i < M * N && same; i++) {
        same = isnan(cs[i]) ? isnan(cw[i]) != 0 : cs[i] == cw[i];
        infs += isinf(cs[i]) != 0;
    }
    ok(same && infs > 0, "f16 (%d,%d,%d) with inf in its last rows, beta 1: the widened path's C (%d inf)", M, N, K,
       infs);
    free(a), free(b), free(cs), free(cw);
}

/* The split path against the widened one: within the sum of their bounds
 * (gamma_{3k} + 2^-16 + gamma_k) sum |a b|; and an operand holding inf or
 * NaN gives the widened BLAS path's bits (the split declines it, and a
 * forced oneDNN path falls to BLAS). */
static void check_split_vs_widened(void)
{
    enum { M = 96, N = 80, K = 640 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *cs = malloc(sizeof(float) * M * N), *cw = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) a[i] = (float)round_to(normal(), &F16);
    for (int i = 0; i < K * N; i++) b[i] = (float)round_to(normal() * 4, &F16);
    phx_status s1 = f16_product("dnnl", "3", M, N, K, a, b, cs), s2 = f16_product("avx512", NULL, M, N, K, a, b, cw);
    if (s2 != PHX_OK) s2 = f16_product("blas", NULL, M, N, K, a, b, cw);
    const double u = ldexp(1.0, -24);
    double worst = 0, max_rel = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int p = 0; p < K; p++) s += fabs((double)a[i * K + p] * b[p * N + j]);
            double bound = (3 * K + 2) * u * s + ldexp(1.0, -16) * s + (K + 2) * u * s;
            double d = fabs((double)cs[i * N + j] - cw[i * N + j]);
            worst = fmax(worst, d / bound);
            max_rel = fmax(max_rel, d / s);
        }
    ok(s1 == PHX_OK && s2 == PHX_OK && worst <= 1.0,
       "f16 (%d,%d,%d): split bf16 against widened f32 within both bounds (worst %.3f of it, %.3g of sum |a b|)", M, N,
       K, worst, max_rel);
    /* inf and NaN in the operands: the split declines, the bits are the widened path's */
    a[5] = INFINITY, a[K + 7] = -INFINITY, b[3 * N + 2] = NAN;
    s1 = f16_product("dnnl", "3", M, N, K, a, b, cs);
    s2 = f16_product("blas", NULL, M, N, K, a, b, cw); /* where a forced oneDNN path falls */
    int same = s1 == PHX_OK && s2 == PHX_OK, infs = 0;
    for (int i = 0; i < M * N && same; i++) {
        same = isnan(cs[i]) ? isnan(cw[i]) != 0 : cs[i] == cw[i];
        infs += isinf(cs[i]) != 0;
    }
    ok(same && infs > 0,
       "f16 operands with inf and NaN: PHX_CPU_GEMM=dnnl gives the widened BLAS path's results (%d inf)", infs);
    free(a), free(b), free(cs), free(cw);
}

int main(void)
{
    plan(2 + 2 * 7 + 2 + 2 * 13 + 1 + 2 + 8);
    check_cast(&F16);
    check_cast(&BF16);
    const fmt *fs[2] = {&F16, &BF16};
    for (int i = 0; i < 2; i++) {
        const fmt *f = fs[i];
        /* the default path: f16 may take the 3-term split (on AMX), whose bound covers the widened path's too */
        g_terms = 3, g_drop = ldexp(1.0, -16);
        check_gemm(f, PHX_F32, false, false, 37, 19, 257, 1.0f, 0.0f);
        check_gemm(f, PHX_F32, true, false, 23, 31, 300, 1.0f, 0.0f);
        check_gemm(f, PHX_F32, false, true, 64, 10, 784, 1.0f, 0.0f);
        check_gemm(f, PHX_F32, true, true, 8, 9, 1000, 1.0f, 0.0f);
        check_gemm(f, PHX_F32, false, false, 16, 16, 128, 0.5f, 2.0f);
        check_gemm(f, f->dt, false, false, 37, 19, 257, 1.0f, 0.0f);
        check_gemm(f, f->dt, false, true, 64, 33, 512, 1.0f, 1.0f);
    }
    g_terms = 1, g_drop = 0;
    check_f16_path("dnnl", "3", 3, ldexp(1.0, -16), "split-3 ");
    check_f16_path("dnnl", "4", 4, 0, "split-4 ");
    check_split_vs_widened();
    check_late_inf();
    check_blocks();
    /* Mixed operand dtypes are an error, not a silent conversion. */
    int64_t s2[2] = {2, 2};
    phx_tensor *h = phx_tensor_zeros(PHX_F16, 2, s2, phx_cpu()), *bf = phx_tensor_zeros(PHX_BF16, 2, s2, phx_cpu());
    phx_tensor *c = phx_tensor_zeros(PHX_F32, 2, s2, phx_cpu());
    is_int(phx_gemm(false, false, 1, h, bf, 0, c), PHX_EINVAL, "f16 x bf16 operands: PHX_EINVAL");
    like(phx_last_error(), "bf16", "the error names the dtypes");
    phx_tensor_free(h);
    phx_tensor_free(bf);
    phx_tensor_free(c);
    return done_testing();
}
