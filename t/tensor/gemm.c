/* GEMM against a naive float64 reference: random shapes including 1x1,
 * tall, wide and long-k; all four transposes; alpha/beta other than 1/0;
 * f16/bf16 operands and results. Bound: the f32 accumulation error
 * (k+3) u sum|alpha a b| + |beta c| terms, plus half an ulp of C's dtype.
 * Also the plain-C fallback loop, leading dims, beta = 0 ignoring NaN in
 * C, k = 0, no allocation once warm, and the error messages; then the
 * f32/f16/bf16 cases again on each path PHX_CPU_GEMM forces (blas, dnnl
 * when built with oneDNN, avx512 where the kernels use AVX-512) with odd
 * sizes 1, 7, 33, 1000, and the AVX-512 GEMM split over threads. Where
 * the CPU has AVX512-BF16, PHX_CPU_GEMM=avx512 runs bf16 on the vdpbf16ps
 * kernel (the odd shapes above, then past its blocks with k odd, the same
 * bits on 1 and 2 threads and in both orientations, alpha = 0); the
 * bound above holds for it (a pair's two products are added one at a
 * time, each rounded: k roundings in all), as long as no operand,
 * product or partial sum is subnormal: vdpbf16ps reads bf16 subnormals
 * as zero and flushes subnormal results, which a test checks. An f16
 * product on oneDNN (where it runs bf16 on AMX, or forced) is one bf16
 * GEMM over 3k split terms with lo_a lo_b dropped (kernels/cpu/gemm-dnnl.c):
 * its bound adds 2k roundings and 2^-16 sum|alpha a b|. */
#include "config.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "src/tune/tune.h"
#include "t/core-util.h"

void px_cpu_sgemm_loop(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

static double urand(void)
{
    return cu_urand();
}
static float frand(void)
{
    return cu_frand(-1.0f, 1.0f);
}

typedef struct {
    int64_t m, n, k;
} shape3;

static const shape3 fixed[] = {
    {1, 1, 1},     {1, 1, 7},       {64, 1, 3},   {1, 64, 5},  {200, 3, 17}, {3, 200, 9},
    {33, 47, 129}, {128, 128, 128}, {5, 7, 1000}, {1, 300, 1}, {300, 1, 1},
};
#define NSHAPES 24

static shape3 shape_at(int i)
{
    if (i < (int)(sizeof fixed / sizeof fixed[0])) return fixed[i];
    shape3 s = {1 + (int64_t)(urand() * 70), 1 + (int64_t)(urand() * 70), 1 + (int64_t)(urand() * 70)};
    return s;
}

/* half an ulp (relative) of the result dtype, and its smallest subnormal */
static double out_rel(phx_dtype dt)
{
    return dt == PHX_F16 ? ldexp(1, -11) : dt == PHX_BF16 ? ldexp(1, -8) : 0.0;
}
static double out_abs(phx_dtype dt)
{
    return dt == PHX_F16 ? ldexp(1, -24) : dt == PHX_BF16 ? ldexp(1, -133) : 0.0;
}

/* Checks got (m x n, ldc) against the float64 reference. Returns the
 * worst err/bound ratio (> 1 fails). */
static double check_result(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                           const void *b, int64_t ldb, phx_dtype adt, float beta, const void *c0, const void *got,
                           int64_t ldc, phx_dtype cdt)
{
    double worst = 0.0;
    int path = -1;
    const char *terms = getenv("PHX_CPU_F16_SPLIT");
    int split3 = adt == PHX_F16 && k > 0 && !(terms && !strcmp(terms, "4")) &&
        px_cpu_gemm_path(ta, tb, m, n, k, alpha != 0.0f, adt, cdt, &path) == PHX_OK && path == PX_GEMM_DNNL;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0, sa = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double av = cu_get(a, adt, ta ? p * lda + i : i * lda + p);
                double bv = cu_get(b, adt, tb ? j * ldb + p : p * ldb + j);
                s += av * bv;
                sa += fabs(av * bv);
            }
            double cv = beta != 0.0f ? cu_get(c0, cdt, i * ldc + j) : 0.0;
            double ref = (double)alpha * s + (double)beta * cv;
            double acc = (double)(k + 3) * ldexp(1, -24) * (fabs((double)alpha) * sa + fabs((double)beta * cv));
            /* f16 split into bf16 hi + lo on oneDNN (3 terms): 3k products summed, lo lo dropped (2^-16 |ab|) */
            if (split3) acc += ((double)(2 * k) * ldexp(1, -24) + ldexp(1, -16)) * fabs((double)alpha) * sa;
            /* rounding to C's dtype is relative to the f32 result, within acc of ref */
            double bound = acc + out_rel(cdt) * (fabs(ref) + acc) + out_abs(cdt) + 1e-30;
            double err = fabs((double)cu_get(got, cdt, i * ldc + j) - ref);
            if (!(err <= bound * 1.0000001)) err = isnan(err) ? INFINITY : err;
            if (err / bound > worst) worst = err / bound;
        }
    return worst;
}

/* Random A, B, C of the given dtypes, run phx_gemm, compare. */
static double run_case(int ta, int tb, shape3 s, float alpha, float beta, phx_dtype adt, phx_dtype cdt)
{
    int64_t as[2] = {ta ? s.k : s.m, ta ? s.m : s.k}, bs[2] = {tb ? s.n : s.k, tb ? s.k : s.n}, cs[2] = {s.m, s.n};
    phx_tensor *A = phx_tensor_new(adt, 2, as, phx_cpu()), *B = phx_tensor_new(adt, 2, bs, phx_cpu());
    phx_tensor *C = phx_tensor_new(cdt, 2, cs, phx_cpu());
    void *a = phx_tensor_data(A), *b = phx_tensor_data(B), *c = phx_tensor_data(C);
    for (int64_t i = 0; i < as[0] * as[1]; i++) cu_set(a, adt, i, frand());
    for (int64_t i = 0; i < bs[0] * bs[1]; i++) cu_set(b, adt, i, frand());
    /* beta = 0: C holds NaN, which BLAS semantics ignore */
    for (int64_t i = 0; i < s.m * s.n; i++) cu_set(c, cdt, i, beta == 0.0f ? NAN : frand());
    size_t cb = phx_tensor_nbytes(C);
    static unsigned char c0[1 << 20];
    memcpy(c0, c, cb);
    phx_status st = phx_gemm(ta, tb, alpha, A, B, beta, C);
    double w = st == PHX_OK ? check_result(ta, tb, s.m, s.n, s.k, alpha, a, as[1], b, bs[1], adt, beta, c0, c, s.n, cdt)
                            : INFINITY;
    if (st != PHX_OK) diag("phx_gemm failed: %s", phx_last_error());
    phx_tensor_free(A);
    phx_tensor_free(B);
    phx_tensor_free(C);
    return w;
}

static const float alphas[] = {1.0f, 0.5f, -1.5f, 2.0f};
static const float betas[] = {0.0f, -2.0f, 1.0f, 0.25f};

static const shape3 odd[] = {
    {1, 1, 1},
    {7, 33, 1},
    {33, 7, 1000},
    {1000, 33, 7},
    {7, 1000, 33},
    {1, 1000, 1},
    {33, 33, 33},
    {1, 7, 1000},
    /* C 128 wide: two 48-column tiles and one of 32 (the micro-kernel's
     * two-vector edge) */
    {100, 128, 70},
};
#define NODD (int)(sizeof odd / sizeof odd[0])

/* 5 cases: f32, and f16/bf16 into f32 and into their own dtype, every
 * transpose, the odd shapes, with PHX_CPU_GEMM=path. */
static void path_cases(const char *path)
{
    static const phx_dtype dts[] = {PHX_BF16, PHX_F16, PHX_F32};
    setenv("PHX_CPU_GEMM", path, 1);
    for (int d = 0; d < 3; d++)
        for (int own = 0; own < (d < 2 ? 2 : 1); own++) {
            phx_dtype cdt = own ? dts[d] : PHX_F32;
            double worst = 0.0;
            for (int t = 0; t < 4; t++)
                for (int i = 0; i < NODD; i++) {
                    double w = run_case(t & 1, t >> 1, odd[i], alphas[(i + t) % 4], betas[i % 4], dts[d], cdt);
                    if (w > worst) worst = w;
                }
            ok(worst <= 1.0,
               "PHX_CPU_GEMM=%s: %s x %s -> %s, 4 transposes x %d odd shapes, beta 0/-2/1/0.25 (worst %.3g)", path,
               phx_dtype_name(dts[d]), phx_dtype_name(dts[d]), phx_dtype_name(cdt), NODD, worst);
        }
    unsetenv("PHX_CPU_GEMM");
}

/* 1 when the kernels use AVX-512 (PHX_CPU_GEMM=avx512 is available) */
static int kernels_avx512(void)
{
    const char *isa = getenv("PHX_CPU_ISA");
    return cu_cpu_has("avx512f") && cu_cpu_has("fma") && cu_cpu_has("f16c") && (!isa || strcmp(isa, "avx512") == 0);
}

/* a value in [-1, 1] that depends on i alone */
static float fixed_rand(int64_t i)
{
    return (float)((uint32_t)(i * 2654435761u) % 2001u) / 1000.0f - 1.0f;
}

/* C of a random m x k by k x n gemm (adt into f32), with PHX_CPU_GEMM=path
 * and threads BLAS threads: malloc'd, NULL on failure */
static float *gemm_result(const char *path, int threads, phx_dtype adt, int64_t m, int64_t n, int64_t k)
{
    int64_t as[2] = {m, k}, bs[2] = {k, n}, cs[2] = {m, n};
    phx_tensor *A = phx_tensor_new(adt, 2, as, phx_cpu()), *B = phx_tensor_new(adt, 2, bs, phx_cpu());
    phx_tensor *C = phx_tensor_zeros(PHX_F32, 2, cs, phx_cpu());
    for (int64_t i = 0; i < m * k; i++) cu_set(phx_tensor_data(A), adt, i, fixed_rand(i));
    for (int64_t i = 0; i < k * n; i++) cu_set(phx_tensor_data(B), adt, i, fixed_rand(i + 12345));
    int before = phx_num_threads();
    setenv("PHX_CPU_GEMM", path, 1);
    phx_set_num_threads(threads);
    float *out = phx_gemm(false, false, 1.0f, A, B, 0.0f, C) == PHX_OK ? malloc((size_t)(m * n) * sizeof(float)) : NULL;
    if (out) memcpy(out, phx_tensor_data(C), (size_t)(m * n) * sizeof(float));
    phx_set_num_threads(before);
    unsetenv("PHX_CPU_GEMM");
    phx_tensor_free(A), phx_tensor_free(B), phx_tensor_free(C);
    return out;
}

/* 1 when an f16/bf16 C of alpha A B + beta C (the kernel table's gemm,
 * PHX_CPU_GEMM=avx512, threads threads; C in rows of ldc = n + 3) has the
 * bits of the same product into an f32 C (same ldc) holding C's widened
 * values, rounded element by element by math.h's formula (the
 * micro-kernels round their last k block's tiles in registers), and C's
 * padding is untouched. A holds a NaN, an inf and values whose products
 * overflow f16 where special. */
static int half_c_is_rounded_f32(phx_dtype dt, int64_t m, int64_t n, int64_t k, float alpha, float beta, int threads,
                                 int special)
{
    const phx_kernels_v1 *K = phx_device_table(phx_cpu())->kernels;
    int64_t ldc = n + 3;
    uint16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(k * n) * 2), *ch = malloc((size_t)(m * ldc) * 2);
    uint16_t *ch0 = malloc((size_t)(m * ldc) * 2);
    float *cf = malloc((size_t)(m * ldc) * sizeof(float));
    for (int64_t i = 0; i < m * k; i++) cu_set(a, dt, i, fixed_rand(i) * (special ? 300.0f : 1.0f));
    for (int64_t i = 0; i < k * n; i++) cu_set(b, dt, i, fixed_rand(i + 777));
    if (special) {
        cu_set(a, dt, 0, NAN);
        cu_set(a, dt, k + 1, INFINITY);
    }
    for (int64_t i = 0; i < m * ldc; i++) {
        cu_set(ch, dt, i, fixed_rand(i + 4242));
        ch0[i] = ch[i];
        cf[i] = (float)cu_get(ch, dt, i);
    }
    int before = phx_num_threads();
    setenv("PHX_CPU_GEMM", "avx512", 1);
    phx_set_num_threads(threads);
    int same = K->gemm(0, 0, 0, m, n, k, alpha, a, k, b, n, dt, beta, ch, ldc, dt) == PHX_OK &&
        K->gemm(0, 0, 0, m, n, k, alpha, a, k, b, n, dt, beta, cf, ldc, PHX_F32) == PHX_OK;
    phx_set_num_threads(before);
    unsetenv("PHX_CPU_GEMM");
    for (int64_t i = 0; same && i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            uint16_t want = j >= n ? ch0[i * ldc + j]
                : dt == PHX_BF16   ? phx_f32_to_bf16(cf[i * ldc + j])
                                   : phx_f32_to_f16(cf[i * ldc + j]);
            same &= ch[i * ldc + j] == want;
        }
    free(a), free(b), free(ch), free(ch0), free(cf);
    return same;
}

/* 1 when the two results exist and have the same bits */
static int same_bits(float *x, float *y, int64_t n)
{
    int same = x && y && memcmp(x, y, (size_t)n * sizeof(float)) == 0;
    free(x), free(y);
    return same;
}

/* px_alloc_count growth of one bf16 gemm larger than any before in this
 * thread: the widening path grows its scratch, oneDNN reads in place. */
static uint64_t bf16_allocs(const char *path, int64_t size)
{
    int64_t s2[2] = {size, size};
    phx_tensor *A = phx_tensor_zeros(PHX_BF16, 2, s2, phx_cpu()), *C = phx_tensor_zeros(PHX_F32, 2, s2, phx_cpu());
    setenv("PHX_CPU_GEMM", path, 1);
    uint64_t before = phx_alloc_count();
    phx_status st = phx_gemm(false, false, 1.0f, A, A, 0.0f, C);
    uint64_t n = phx_alloc_count() - before;
    unsetenv("PHX_CPU_GEMM");
    phx_tensor_free(A), phx_tensor_free(C);
    return st == PHX_OK ? n : UINT64_MAX;
}

/* one check: where oneDNN does not take bf16 (why), auto takes the
 * packed GEMM on AVX-512 (its bits), else widens for BLAS (scratch) */
static void bf16_auto_not_dnnl(const char *why)
{
    if (kernels_avx512())
        ok(same_bits(gemm_result("auto", 2, PHX_BF16, 90, 70, 300), gemm_result("avx512", 2, PHX_BF16, 90, 70, 300),
                     90 * 70),
           "PHX_CPU_GEMM=auto %s, AVX-512: the packed GEMM's bits", why);
    else
        ok(bf16_allocs("auto", 450) > 0, "PHX_CPU_GEMM=auto %s: widens into scratch", why);
}

/* bf16 A (1 x 4) times a column of ones, forced onto PHX_CPU_GEMM=path,
 * into f32 (NaN on failure) */
static float bf16_dot4(const char *path, const float av[4])
{
    int64_t sa[2] = {1, 4}, sb[2] = {4, 1}, sc[2] = {1, 1};
    phx_tensor *A = phx_tensor_new(PHX_BF16, 2, sa, phx_cpu()), *B = phx_tensor_new(PHX_BF16, 2, sb, phx_cpu());
    phx_tensor *C = phx_tensor_zeros(PHX_F32, 2, sc, phx_cpu());
    for (int i = 0; i < 4; i++) {
        ((uint16_t *)phx_tensor_data(A))[i] = phx_f32_to_bf16(av[i]);
        ((uint16_t *)phx_tensor_data(B))[i] = phx_f32_to_bf16(1.0f);
    }
    setenv("PHX_CPU_GEMM", path, 1);
    float c = phx_gemm(false, false, 1.0f, A, B, 0.0f, C) == PHX_OK ? *(float *)phx_tensor_data(C) : NAN;
    unsetenv("PHX_CPU_GEMM");
    phx_tensor_free(A), phx_tensor_free(B), phx_tensor_free(C);
    return c;
}

/* 1 when C = A B (m x 3, C^T computed: under half of the tiles) and
 * C' = B^T A^T (3 x m, computed as it stands) of bf16 operands, k deep,
 * on PHX_CPU_GEMM=avx512, are transposes of each other bit for bit */
static int bf16_orientations_agree(int64_t m, int64_t k)
{
    int64_t sa[2] = {m, k}, sb[2] = {k, 3}, sc[2] = {m, 3}, st[2] = {3, m};
    phx_tensor *A = phx_tensor_new(PHX_BF16, 2, sa, phx_cpu()), *B = phx_tensor_new(PHX_BF16, 2, sb, phx_cpu());
    phx_tensor *C = phx_tensor_zeros(PHX_F32, 2, sc, phx_cpu()), *CT = phx_tensor_zeros(PHX_F32, 2, st, phx_cpu());
    for (int64_t i = 0; i < m * k; i++) cu_set(phx_tensor_data(A), PHX_BF16, i, fixed_rand(i));
    for (int64_t i = 0; i < k * 3; i++) cu_set(phx_tensor_data(B), PHX_BF16, i, fixed_rand(i + 777));
    setenv("PHX_CPU_GEMM", "avx512", 1);
    int same =
        phx_gemm(false, false, 1.0f, A, B, 0.0f, C) == PHX_OK && phx_gemm(true, true, 1.0f, B, A, 0.0f, CT) == PHX_OK;
    unsetenv("PHX_CPU_GEMM");
    const float *c = phx_tensor_data(C), *ct = phx_tensor_data(CT);
    for (int64_t i = 0; same && i < m; i++)
        for (int j = 0; j < 3; j++) same &= memcmp(&c[i * 3 + j], &ct[j * m + i], sizeof(float)) == 0;
    phx_tensor_free(A), phx_tensor_free(B), phx_tensor_free(C), phx_tensor_free(CT);
    return same;
}

int main(void)
{
    plan(24 + 4 + 4 + 2 + 10 + 15 + 4 + 2 + 2 + 7 + 3 + 3 + 2);
    struct {
        phx_dtype a, c;
    } combos[] = {
        {PHX_F32, PHX_F32}, {PHX_F16, PHX_F32},   {PHX_BF16, PHX_F32},
        {PHX_F16, PHX_F16}, {PHX_BF16, PHX_BF16}, {PHX_F32, PHX_BF16},
    };
    /* 1-24: every dtype combination x transpose over all shapes and alpha/beta pairs */
    for (int ci = 0; ci < 6; ci++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            double worst = 0.0;
            shape3 wshape = {0, 0, 0};
            for (int i = 0; i < NSHAPES; i++) {
                shape3 s = shape_at(i);
                double w = run_case(ta, tb, s, alphas[i % 4], betas[(i / 4) % 4], combos[ci].a, combos[ci].c);
                if (w > worst) worst = w, wshape = s;
            }
            ok(worst <= 1.0,
               "gemm %s x %s -> %s, A%s B%s: %d shapes within the accumulation bound (worst err/bound %.3g at "
               "%lldx%lldx%lld)",
               phx_dtype_name(combos[ci].a), phx_dtype_name(combos[ci].a), phx_dtype_name(combos[ci].c), ta ? "^T" : "",
               tb ? "^T" : "", NSHAPES, worst, (long long)wshape.m, (long long)wshape.n, (long long)wshape.k);
        }

    /* 25-28: the plain C fallback, with leading dims larger than the rows */
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        double worst = 0.0;
        for (int i = 0; i < NSHAPES; i++) {
            shape3 s = shape_at(i);
            int64_t ar = ta ? s.k : s.m, ac = ta ? s.m : s.k, br = tb ? s.n : s.k, bc = tb ? s.k : s.n;
            int64_t lda = ac + 3, ldb = bc + 1, ldc = s.n + 2;
            static float a[400000], b[400000], c[400000], c0[400000];
            for (int64_t x = 0; x < ar * lda; x++) a[x] = frand();
            for (int64_t x = 0; x < br * ldb; x++) b[x] = frand();
            float beta = betas[i % 4];
            for (int64_t x = 0; x < s.m * ldc; x++) c[x] = c0[x] = beta == 0.0f ? NAN : frand();
            px_cpu_sgemm_loop(ta, tb, s.m, s.n, s.k, alphas[i % 4], a, lda, b, ldb, beta, c, ldc);
            double w =
                check_result(ta, tb, s.m, s.n, s.k, alphas[i % 4], a, lda, b, ldb, PHX_F32, beta, c0, c, ldc, PHX_F32);
            if (w > worst) worst = w;
        }
        ok(worst <= 1.0, "fallback C loop A%s B%s with padded leading dims: within the bound (worst %.3g)",
           ta ? "^T" : "", tb ? "^T" : "", worst);
    }

    /* 29-32: kernel table directly with leading dims (a sub-block), f32 and f16 */
    const phx_kernels_v1 *K = phx_device_table(phx_cpu())->kernels;
    {
        static float a[50 * 40], b[60 * 30], c[20 * 35], c0[20 * 35];
        static uint16_t ah[50 * 40], bh[60 * 30], chh[20 * 35], ch0[20 * 35];
        for (int i = 0; i < 50 * 40; i++) a[i] = frand(), ah[i] = phx_f32_to_f16(a[i]);
        for (int i = 0; i < 60 * 30; i++) b[i] = frand(), bh[i] = phx_f32_to_f16(b[i]);
        for (int i = 0; i < 20 * 35; i++) c[i] = c0[i] = frand(), chh[i] = ch0[i] = phx_f32_to_f16(c[i]);
        /* C(20 x 25 of ld 35) = A^T (A stored 30 x 20 in ld 40) * B (30 x 25 in ld 30) */
        phx_status st = K->gemm(0, 1, 0, 20, 25, 30, 0.75f, a, 40, b, 30, PHX_F32, 0.5f, c, 35, PHX_F32);
        double w = check_result(1, 0, 20, 25, 30, 0.75f, a, 40, b, 30, PHX_F32, 0.5f, c0, c, 35, PHX_F32);
        int untouched = 1;
        for (int i = 0; i < 20; i++)
            for (int j = 25; j < 35; j++) untouched &= memcmp(&c[i * 35 + j], &c0[i * 35 + j], 4) == 0;
        ok(st == PHX_OK && w <= 1.0 && untouched,
           "kernel gemm f32 with lda/ldb/ldc > cols: correct (worst %.3g), padding untouched", w);
        st = K->gemm(0, 1, 0, 20, 25, 30, 0.75f, ah, 40, bh, 30, PHX_F16, 0.5f, chh, 35, PHX_F16);
        w = check_result(1, 0, 20, 25, 30, 0.75f, ah, 40, bh, 30, PHX_F16, 0.5f, ch0, chh, 35, PHX_F16);
        untouched = 1;
        for (int i = 0; i < 20; i++)
            for (int j = 25; j < 35; j++) untouched &= chh[i * 35 + j] == ch0[i * 35 + j];
        ok(st == PHX_OK && w <= 1.0 && untouched,
           "kernel gemm f16 with leading dims: correct (worst %.3g), padding untouched", w);
        /* f16 operands and C of 70K-85K elements each, in leading dims
         * larger than their rows: widened and rounded row by row */
        {
            enum { GM = 301, GN = 263, GK = 277, LDA = GM + 5, LDB = GN + 3, LDC = GN + 7 };
            uint16_t *ha = calloc((size_t)GK * LDA, 2), *hb = calloc((size_t)GK * LDB, 2);
            uint16_t *hc = calloc((size_t)GM * LDC, 2), *hc0 = calloc((size_t)GM * LDC, 2);
            for (int i = 0; i < GK * LDA; i++) ha[i] = phx_f32_to_f16(frand());
            for (int i = 0; i < GK * LDB; i++) hb[i] = phx_f32_to_f16(frand());
            for (int i = 0; i < GM * LDC; i++) hc[i] = hc0[i] = phx_f32_to_f16(frand());
            phx_status s2 = K->gemm(0, 1, 0, GM, GN, GK, 1.25f, ha, LDA, hb, LDB, PHX_F16, -0.5f, hc, LDC, PHX_F16);
            double w2 = check_result(1, 0, GM, GN, GK, 1.25f, ha, LDA, hb, LDB, PHX_F16, -0.5f, hc0, hc, LDC, PHX_F16);
            int kept = 1;
            for (int i = 0; i < GM; i++)
                for (int j = GN; j < LDC; j++) kept &= hc[i * LDC + j] == hc0[i * LDC + j];
            ok(s2 == PHX_OK && w2 <= 1.0 && kept,
               "kernel gemm f16 (%d,%d,%d) with leading dims: correct (worst %.3g), padding untouched", GM, GN, GK, w2);
            free(ha), free(hb), free(hc), free(hc0);
        }
        /* k = 0, and alpha = 0 (BLAS: A B is not computed, an inf in A
         * makes no NaN): C <- beta C */
        float cz[4] = {1, 2, 3, 4}, ca[4] = {1, 2, 3, 4}, inf_a[4] = {INFINITY, 1, 1, 1};
        st = K->gemm(0, 0, 0, 2, 2, 0, 1.0f, a, 1, b, 2, PHX_F32, 3.0f, cz, 2, PHX_F32);
        phx_status st0 = K->gemm(0, 0, 0, 2, 2, 2, 0.0f, inf_a, 2, inf_a, 2, PHX_F32, 0.5f, ca, 2, PHX_F32);
        ok(st == PHX_OK && cz[0] == 3 && cz[3] == 12 && st0 == PHX_OK && ca[0] == 0.5f && ca[3] == 2.0f,
           "k = 0, and alpha = 0 with inf in A, scale C by beta (got %g %g, %g %g)", cz[0], cz[3], ca[0], ca[3]);
    }

    /* 33-34: no allocation once warm (scratch and panels reused) */
    {
        int64_t s2[2] = {64, 64};
        phx_tensor *A = phx_tensor_zeros(PHX_F32, 2, s2, phx_cpu()), *C = phx_tensor_zeros(PHX_F32, 2, s2, phx_cpu());
        phx_tensor *H = phx_tensor_zeros(PHX_F16, 2, s2, phx_cpu()), *HC = phx_tensor_zeros(PHX_F16, 2, s2, phx_cpu());
        phx_gemm(false, true, 1.0f, A, A, 1.0f, C); /* warms the packed GEMM's panels, where it runs */
        uint64_t before = phx_alloc_count();
        for (int i = 0; i < 3; i++) phx_gemm(false, true, 1.0f, A, A, 1.0f, C);
        is_int(phx_alloc_count() - before, 0,
               "f32 gemm allocates nothing once warm (cblas on the tensors, or panels kept)");
        phx_gemm(true, false, 1.0f, H, H, 0.0f, HC);
        before = phx_alloc_count();
        for (int i = 0; i < 3; i++) phx_gemm(true, false, 1.0f, H, H, 0.5f, HC);
        is_int(phx_alloc_count() - before, 0, "f16 gemm allocates nothing once its scratch is warm");
        phx_tensor_free(A), phx_tensor_free(C), phx_tensor_free(H), phx_tensor_free(HC);
    }

    /* 35-44: errors name the shapes; C is left unchanged */
    {
        int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s24[2] = {2, 4}, s22[2] = {2, 2}, s3[3] = {2, 3, 1};
        phx_tensor *A = phx_tensor_zeros(PHX_F32, 2, s23, phx_cpu()), *B = phx_tensor_zeros(PHX_F32, 2, s43, phx_cpu());
        phx_tensor *C = phx_tensor_new(PHX_F32, 2, s24, phx_cpu()), *C2 = phx_tensor_zeros(PHX_F32, 2, s22, phx_cpu());
        phx_tensor *I = phx_tensor_zeros(PHX_I32, 2, s23, phx_cpu()), *H = phx_tensor_zeros(PHX_F16, 2, s43, phx_cpu());
        phx_tensor *T3 = phx_tensor_zeros(PHX_F32, 3, s3, phx_cpu());
        phx_tensor_fill(C, 7.0);
        is_int(phx_gemm(false, false, 1, A, B, 0, C), PHX_EINVAL, "A (2,3) x B (4,3): EINVAL");
        like(phx_last_error(), "inner dims 3 and 4 differ", "message names the inner dims");
        like(phx_last_error(), "(2, 3)", "message names A's shape");
        double v;
        phx_tensor_get(C, 0, &v);
        ok(v == 7.0, "C unchanged after the error");
        is_int(phx_gemm(false, true, 1, A, B, 0, C2), PHX_EINVAL, "A B^T into a (2,2) C: EINVAL");
        like(phx_last_error(), "C is (2, 2), expected (2, 4)", "message gives C's shape and the expected one");
        is_int(phx_gemm(false, true, 1, I, B, 0, C), PHX_EINVAL, "i32 operand: EINVAL");
        like(phx_last_error(), "A is i32, B f32", "message names the dtypes");
        is_int(phx_gemm(false, true, 1, A, H, 0, C), PHX_EINVAL, "f32 A with f16 B: EINVAL");
        is_int(phx_gemm(false, false, 1, T3, B, 0, C), PHX_EINVAL, "3-D operand: EINVAL");
        phx_tensor *all[] = {A, B, C, C2, I, H, T3};
        for (int i = 0; i < 7; i++) phx_tensor_free(all[i]);
    }

    /* 45-59: each path forced */
    path_cases("blas");
#ifdef HAVE_DNNL
    path_cases("dnnl");
#else
    skip(5, "built without oneDNN: no dnnl path");
#endif
    if (kernels_avx512())
        path_cases("avx512");
    else
        skip(5, "the kernels do not use AVX-512: no avx512 path");

    /* 60-63: the packed AVX-512 GEMM on sizes split over threads, by
     * columns and by rows, past its blocks (KC 256, MC 128, NC 1536), the
     * same bits on one thread and two; auto leaves it skinny shapes */
    if (kernels_avx512()) {
        shape3 wide = {150, 1600, 300}, tall = {1600, 150, 300};
        setenv("PHX_CPU_GEMM", "avx512", 1);
        double w1 = run_case(0, 1, wide, 0.5f, 0.25f, PHX_F32, PHX_F32);
        double w2 = run_case(1, 0, tall, 1.0f, -2.0f, PHX_F16, PHX_F16);
        unsetenv("PHX_CPU_GEMM");
        ok(w1 <= 1.0, "PHX_CPU_GEMM=avx512: f32 150x1600x300, B^T, beta 0.25, within the bound (%.3g)", w1);
        ok(w2 <= 1.0, "PHX_CPU_GEMM=avx512: f16 -> f16 1600x150x300, A^T, beta -2, within the bound (%.3g)", w2);
        ok(same_bits(gemm_result("avx512", 1, PHX_F16, 150, 1600, 300),
                     gemm_result("avx512", 2, PHX_F16, 150, 1600, 300), 150 * 1600),
           "PHX_CPU_GEMM=avx512: f16 150x1600x300, the same bits on 1 and 2 threads");
#ifdef HAVE_CBLAS
        /* unless OpenBLAS runs kernels without AVX2 on this CPU
         * (src/tune/cpu.c): then auto keeps it on the packed GEMM */
        const char *skinny = px_tune_blas_misdetected() == 2 ? "avx512" : "blas";
        ok(same_bits(gemm_result("auto", 2, PHX_F32, 300, 3, 1000), gemm_result(skinny, 2, PHX_F32, 300, 3, 1000),
                     300 * 3),
           "PHX_CPU_GEMM=auto: a C of 3 columns (under half of the 8x48 tiles, as C or C^T) goes to %s (its bits; "
           "OpenBLAS core %s)",
           skinny, px_tune_blas_core());
#else
        skip(1, "built without a BLAS: auto takes the packed GEMM for every shape");
#endif
    } else
        skip(4, "the kernels do not use AVX-512: no avx512 path");

    /* 64-65: the packed AVX-512 GEMM's f16/bf16 C: one k block (70) and
     * two (300 and 600: KC 256, or 512 k values of bf16 pairs; the last
     * block rounds), edge tiles, C tall (split by rows) and wide, beta 0,
     * -0.5 and 1, a swapped product (3 columns, rounded after), 1 and 2
     * threads, NaN/inf/overflow */
    if (kernels_avx512()) {
        static const phx_dtype hdt[2] = {PHX_F16, PHX_BF16};
        for (int d = 0; d < 2; d++) {
            int all = 1;
            for (int t = 1; t <= 2; t++) {
                all &= half_c_is_rounded_f32(hdt[d], 37, 101, 70, 1.0f, 0.0f, t, 0);
                all &= half_c_is_rounded_f32(hdt[d], 37, 130, 600, 0.5f, -0.5f, t, 0);
                all &= half_c_is_rounded_f32(hdt[d], 130, 200, 300, 1.0f, 1.0f, t, 1);
                all &= half_c_is_rounded_f32(hdt[d], 400, 37, 600, 1.0f, -0.5f, t, 0);
                all &= half_c_is_rounded_f32(hdt[d], 300, 3, 70, 1.0f, -0.5f, t, 0);
            }
            ok(all,
               "PHX_CPU_GEMM=avx512: %s C rounded in the micro-kernels has the bits of the f32 C rounded after (1 and "
               "2 "
               "k blocks of f32 or bf16 pairs, edge tiles of 5 and 34 columns, C split by columns and by rows, ldc > n "
               "with its padding kept, beta 0/-0.5/1, a swapped product, 1 and 2 threads, NaN/inf/overflow)",
               phx_dtype_name(hdt[d]));
        }
    } else
        skip(2, "the kernels do not use AVX-512: no avx512 path");

    /* f32 on the BLAS at 2 threads: C cut into blocks of columns (wide)
     * and of rows (tall) on the pool, one single-threaded BLAS call each
     * (gemm.c), transposed operands and beta included */
    {
        shape3 wide = {150, 1600, 300}, tall = {1600, 150, 300};
        int before = phx_num_threads();
        phx_set_num_threads(2);
        setenv("PHX_CPU_GEMM", "blas", 1);
        double w1 = run_case(0, 1, wide, 0.5f, 0.25f, PHX_F32, PHX_F32);
        double w2 = run_case(1, 0, tall, 1.0f, -2.0f, PHX_F32, PHX_F32);
        unsetenv("PHX_CPU_GEMM");
        phx_set_num_threads(before);
        ok(w1 <= 1.0, "PHX_CPU_GEMM=blas, 2 threads: f32 150x1600x300, B^T, beta 0.25, within the bound (%.3g)", w1);
        ok(w2 <= 1.0, "PHX_CPU_GEMM=blas, 2 threads: f32 1600x150x300, A^T, beta -2, within the bound (%.3g)", w2);
    }

    /* 66-72: the vdpbf16ps kernel of the packed GEMM (bf16 pairs), which
     * PHX_CPU_GEMM=avx512 takes for bf16 where the CPU has AVX512-BF16 */
    if (kernels_avx512() && cu_cpu_has("avx512_bf16")) {
        /* a bf16 subnormal (2^-130) times 2^20, and 2^-70 squared (an f32
         * subnormal): the widening kernel keeps both, vdpbf16ps flushes */
        {
            int64_t sa[2] = {1, 2}, sb[2] = {2, 1}, sc[2] = {1, 1};
            phx_tensor *A = phx_tensor_zeros(PHX_BF16, 2, sa, phx_cpu()),
                       *B = phx_tensor_zeros(PHX_BF16, 2, sb, phx_cpu());
            phx_tensor *C = phx_tensor_zeros(PHX_F32, 2, sc, phx_cpu());
            ((uint16_t *)phx_tensor_data(A))[0] = phx_f32_to_bf16(ldexpf(1, -130));
            ((uint16_t *)phx_tensor_data(B))[0] = phx_f32_to_bf16(ldexpf(1, 20));
            setenv("PHX_CPU_GEMM", "avx512", 1);
            phx_status st = phx_gemm(false, false, 1.0f, A, B, 0.0f, C);
            float c_in = *(float *)phx_tensor_data(C);
            ((uint16_t *)phx_tensor_data(A))[0] = phx_f32_to_bf16(ldexpf(1, -70));
            ((uint16_t *)phx_tensor_data(B))[0] = phx_f32_to_bf16(ldexpf(1, -70));
            st = st != PHX_OK ? st : phx_gemm(false, false, 1.0f, A, B, 0.0f, C);
            float c_out = *(float *)phx_tensor_data(C);
            unsetenv("PHX_CPU_GEMM");
            ok(st == PHX_OK && c_in == 0.0f && c_out == 0.0f,
               "PHX_CPU_GEMM=avx512, bf16: vdpbf16ps flushes a subnormal operand and a subnormal product (got %g, %g; "
               "widened: 2^-110, 2^-140)",
               c_in, c_out);
            phx_tensor_free(A), phx_tensor_free(B), phx_tensor_free(C);
        }
        /* (0 + odd 1 + even 0) + odd 3 2^-26 + even -0.5: 0.5 when each
         * product is added in turn, odd first (Intel's definition), 0.5 +
         * 2^-24 when the even one comes first or a pair is summed exactly */
        float order = bf16_dot4("avx512", (const float[4]){0.0f, 1.0f, -0.5f, 3 * ldexpf(1, -26)});
        diag("vdpbf16ps on this CPU: 1, then the pair (-0.5, 3 2^-26), gives 0.5 + %g ulp (odd product first, each "
             "addition rounded: 0; widened: %g)",
             (order - 0.5f) / ldexpf(1, -24),
             (bf16_dot4("blas", (const float[4]){0.0f, 1.0f, -0.5f, 3 * ldexpf(1, -26)}) - 0.5f) / ldexpf(1, -24));
        shape3 wide = {150, 1600, 1101}, tall = {1600, 150, 777};
        setenv("PHX_CPU_GEMM", "avx512", 1);
        double w1 = run_case(0, 1, wide, 0.5f, 0.25f, PHX_BF16, PHX_F32);
        double w2 = run_case(1, 0, tall, -1.5f, -2.0f, PHX_BF16, PHX_BF16);
        unsetenv("PHX_CPU_GEMM");
        ok(w1 <= 1.0,
           "PHX_CPU_GEMM=avx512: bf16 150x1600x1101 (3 k blocks, k odd), B^T, beta 0.25, within the bound (%.3g)", w1);
        ok(w2 <= 1.0, "PHX_CPU_GEMM=avx512: bf16 -> bf16 1600x150x777, A^T, beta -2, within the bound (%.3g)", w2);
        ok(same_bits(gemm_result("avx512", 1, PHX_BF16, 150, 1600, 1101),
                     gemm_result("avx512", 2, PHX_BF16, 150, 1600, 1101), 150 * 1600),
           "PHX_CPU_GEMM=avx512: bf16 150x1600x1101 (column panels), the same bits on 1 and 2 threads");
        ok(same_bits(gemm_result("avx512", 1, PHX_BF16, 1600, 150, 777),
                     gemm_result("avx512", 2, PHX_BF16, 1600, 150, 777), 1600 * 150),
           "PHX_CPU_GEMM=avx512: bf16 1600x150x777 (row panels), the same bits on 1 and 2 threads");
        ok(bf16_orientations_agree(300, 1001),
           "PHX_CPU_GEMM=avx512: bf16 A B (300x3, computed as C^T) and B^T A^T (3x300): transposes, bit for bit");
        /* alpha = 0 (BLAS: A B is not computed, an inf in A makes no NaN) */
        uint16_t inf_a[4] = {phx_f32_to_bf16(INFINITY), 0, 0, 0};
        float ca[4] = {1, 2, 3, 4};
        setenv("PHX_CPU_GEMM", "avx512", 1);
        phx_status st0 = K->gemm(0, 0, 0, 2, 2, 2, 0.0f, inf_a, 2, inf_a, 2, PHX_BF16, 0.5f, ca, 2, PHX_F32);
        unsetenv("PHX_CPU_GEMM");
        ok(st0 == PHX_OK && ca[0] == 0.5f && ca[3] == 2.0f,
           "PHX_CPU_GEMM=avx512: bf16 with alpha = 0 and inf in A scales C by beta (got %g %g)", ca[0], ca[3]);
    } else
        skip(7, "no AVX512-BF16, or the kernels do not use AVX-512: no vdpbf16ps kernel");

        /* 73-75: the path taken is the one expected (scratch use tells them
     * apart). oneDNN has a bf16 kernel where the CPU has AVX-512, and
     * auto takes it where the CPU has AVX512-BF16, unless the ISA is
     * capped (t/tensor/gemm_isa.sh runs this test so) */
#ifdef HAVE_DNNL
    if (cu_cpu_has("avx512_bf16") && !getenv("ONEDNN_MAX_CPU_ISA") && !getenv("DNNL_MAX_CPU_ISA")) {
        /* oneDNN's brgemm may take a scratchpad of its own (packed B or
         * tiles, one per thread, from thread scratch: on AMX, and on the
         * AVX512-BF16 brgemm of an AMD Zen 4): its first call at a size
         * grows it, later ones do not, and the operands are read in place. */
        uint64_t first = bf16_allocs("dnnl", 300);
        is_int(bf16_allocs("dnnl", 300), 0,
               "PHX_CPU_GEMM=dnnl: bf16 gemm's second call allocates nothing, its operands read in place (first: "
               "%llu, its scratchpad)",
               (unsigned long long)first);
        /* oneDNN's scratchpad for this size first (its growth depends on
         * the calls before), then auto: no scratch of its own */
        bf16_allocs("dnnl", 450);
        is_int(bf16_allocs("auto", 450), 0, "PHX_CPU_GEMM=auto on a CPU with AVX512-BF16: oneDNN (no scratch)");
    } else {
        diag("dnnl with a capped or older ISA: %llu allocations", (unsigned long long)bf16_allocs("dnnl", 300));
        bf16_auto_not_dnnl("without AVX512-BF16 (or capped)");
        skip(1, "no AVX512-BF16 or ISA capped: oneDNN may widen too");
    }
#else
    bf16_auto_not_dnnl("without oneDNN");
    skip(1, "built without oneDNN");
#endif
    ok(bf16_allocs("blas", 700) > 0, "PHX_CPU_GEMM=blas: bf16 gemm widens into scratch");

    /* 76-78: a bad PHX_CPU_GEMM */
    {
        int64_t s2[2] = {2, 2};
        phx_tensor *A = phx_tensor_zeros(PHX_BF16, 2, s2, phx_cpu()), *C = phx_tensor_zeros(PHX_F32, 2, s2, phx_cpu());
        setenv("PHX_CPU_GEMM", "sbgemm", 1);
        is_int(phx_gemm(false, false, 1.0f, A, A, 0.0f, C), PHX_EINVAL, "PHX_CPU_GEMM=sbgemm: EINVAL");
        like(phx_last_error(), "PHX_CPU_GEMM=sbgemm, expected auto, blas, dnnl or avx512",
             "message names the variable");
        setenv("PHX_CPU_GEMM", "auto", 1);
        is_int(phx_gemm(false, false, 1.0f, A, A, 0.0f, C), PHX_OK, "PHX_CPU_GEMM=auto: accepted");
        unsetenv("PHX_CPU_GEMM");
        phx_tensor_free(A), phx_tensor_free(C);
    }

    /* 79-80: a leading dim below BLAS's bound, max(1, row length), is
     * refused naming that bound, also for an empty A (2,0) */
    {
        float a0[1] = {0}, b0[6] = {0}, c0[6] = {5, 5, 5, 5, 5, 5};
        is_int(K->gemm(0, 0, 0, 2, 3, 0, 1.0f, a0, 0, b0, 3, PHX_F32, 0.0f, c0, 3, PHX_F32), PHX_EINVAL,
               "kernel gemm (2,0) x (0,3) with lda 0: EINVAL");
        like(phx_last_error(), "lda=0 ldb=3 ldc=3, expected >= 1, 3, 3",
             "message gives the bound it checks (1 for an empty row)");
    }
    return done_testing();
}
