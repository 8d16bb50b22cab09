/* A packed GEMM of our own for CPUs with AVX-512 (gemm.c decides when):
 * the GotoBLAS/BLIS loop nest, blocks of B (KC x NC) and of A (MC x KC)
 * copied into panels that an 8 x 48 micro-kernel (24 zmm accumulators)
 * multiplies from the cache. Two kinds of panels and micro-kernel:
 *
 * - widened (f32, f16, and bf16 on a CPU without AVX512-BF16): the copies
 *   widen f16 and bf16 to f32 as they go, and the micro-kernel multiplies
 *   with FMA (vfmadd231ps, a broadcast A value);
 * - pairs (bf16 on a CPU with AVX512-BF16): the copies keep bf16 and put
 *   two consecutive k values of a row (or column) side by side in one
 *   32-bit element, k padded to even with zeros, and the micro-kernel
 *   multiplies with vdpbf16ps: each f32 lane adds the products of a pair,
 *   twice the work of an FMA in the same instruction. vdpbf16ps reads
 *   bf16 subnormals as zero and flushes subnormal results to zero, and
 *   rounds to nearest whatever MXCSR says (doc/reference/tensors.md).
 *
 * Either way half-precision operands need no whole scratch copies, and
 * the copying is split over the threads with the multiplication.
 *
 * Threads take whole column panels of C (row panels when C is taller
 * than wide); a C of few columns is computed as C^T = B^T A^T, which
 * fills more of the tiles. A C element's sum runs over k in the same order
 * whatever the split, the orientation and whether its tile is whole or an
 * edge (the k blocks, and so the pairs, start at the same k), so the
 * result has the same bits on any thread count. */
#include "config.h"
#include <stdint.h>
#include <string.h>
#include "kernels/cpu/gemm-avx512.h"
#include "kernels/cpu/half-x86.h"

#if PX_HAVE_X86
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,fma,f16c")))
/* only called where px_cpu_has_avx512bf16() */
#define TBF16 __attribute__((target("avx512f,avx512bw,avx512bf16,fma,f16c")))

enum {
    MR = PX_MR,
    NR = PX_NR,
    KC = PX_KC,
    MC = PX_MC,
    NC = PX_NC,
    KC_PAIRS = 2 * PX_KC, /* k values of a block of bf16 pairs: panels of as many bytes as KC f32 values */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* n (0..16) consecutive values of dtype dt at p, widened; lanes from n on
 * are 0. Whole vectors use plain loads (a masked load is slower on some
 * CPUs, doc/reference/tensors.md). */
T512 static inline __m512 load16(const void *p, phx_dtype dt, int n)
{
    if (dt == PHX_F32) return n == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
    __m256i h;
    if (n == 16)
        h = _mm256_loadu_si256(p);
    else {
        uint16_t tmp[16] = {0};
        memcpy(tmp, p, (size_t)n * 2);
        h = _mm256_loadu_si256((const __m256i *)tmp);
    }
    if (dt == PHX_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16: the high half */
}

/* x[r] lane c becomes x[c] lane r */
T512 static inline void transpose16(__m512 x[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* u[4i + j], 128-bit lane L: rows 4i .. 4i + 3 of column 4L + j */
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    }
    for (int j = 0; j < 8; j++) {
        x[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        x[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    }
}

/* 16 values (r .. r + 15 of one k) into the panels of R rows: lanes 0-7
 * and 8-15 into two panels when R is 8. rows: the padded row count. */
T512 static inline void store_rows(float *dst, int R, int64_t kc, int64_t r, int64_t kk, int64_t rows, __m512 v)
{
    if (R == MR) {
        float *d = dst + (r / MR) * kc * MR + kk * MR;
        _mm256_storeu_ps(d, _mm512_castps512_ps256(v));
        if (r + MR < rows)
            _mm256_storeu_ps(d + kc * MR, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    } else
        _mm512_storeu_ps(dst + (r / R) * kc * R + kk * R + r % R, v);
}

/* 16 bf16 k-pairs, one per 32-bit element: values 0 .. n - 1 (n <= 32)
 * of a run along k at p, two by two, the odd value in the high half (as
 * vdpbf16ps takes them), zeros from n on */
T512 static inline __m512 load_pairs(const void *p, int n)
{
    if (n == 32) return _mm512_loadu_ps(p);
    uint16_t tmp[32] = {0};
    memcpy(tmp, p, (size_t)n * 2);
    return _mm512_loadu_ps(tmp);
}

/* The 16 elements at (r .. r + n - 1, unit u) of a panel copy, n > 0,
 * value (r, kk) at src[r + kk * ld]: widened values of k = u, or the
 * bf16 pairs of k = 2u and 2u + 1 (a zero high half where 2u + 1 is kc) */
T512 static inline __m512 load_along_r(const char *src, phx_dtype dt, int64_t ld, int64_t kc, int64_t u, int n,
                                       int pairs)
{
    size_t es = phx_dtype_size(dt);
    if (!pairs) return load16(src + (size_t)(u * ld) * es, dt, n);
    /* load16 puts a bf16 in the high half of its lane */
    __m512i lo = _mm512_srli_epi32(_mm512_castps_si512(load16(src + (size_t)(2 * u * ld) * es, dt, n)), 16);
    if (2 * u + 1 == kc) return _mm512_castsi512_ps(lo);
    __m512i hi = _mm512_castps_si512(load16(src + (size_t)((2 * u + 1) * ld) * es, dt, n));
    return _mm512_castsi512_ps(_mm512_or_si512(lo, hi));
}

/* px_avx512_pack (gemm-avx512.h), and with pairs the bf16 k-pairs:
 * element (r, u) holds the values of k = 2u and 2u + 1 of row r, the
 * first in the low half, k padded to even with zeros; the panel is
 * (kc + 1) / 2 elements deep. Values contiguous along k are transposed
 * 16 x 16 (32-bit elements) in registers. Inlined into pack and
 * pack_pairs, so that each is compiled for its kind. */
T512 static inline __attribute__((always_inline)) void pack_kind(float *dst, int R, int64_t rows, int64_t kc,
                                                                 const void *src, phx_dtype dt, int64_t ld, int along_r,
                                                                 int pairs)
{
    size_t es = phx_dtype_size(dt);
    int64_t padded = (rows + R - 1) / R * R, units = pairs ? (kc + 1) / 2 : kc;
    if (along_r) { /* along the rows of src, which is contiguous */
        for (int64_t u = 0; u < units; u++)
            for (int64_t r = 0; r < padded; r += 16) {
                int n = (int)min64(16, rows - r > 0 ? rows - r : 0);
                __m512 v =
                    n ? load_along_r((const char *)src + (size_t)r * es, dt, ld, kc, u, n, pairs) : _mm512_setzero_ps();
                store_rows(dst, R, units, r, u, padded, v);
            }
        return;
    }
    for (int64_t r = 0; r < padded; r += 16)
        for (int64_t u0 = 0; u0 < units; u0 += 16) {
            int nu = (int)min64(16, units - u0);
            __m512 x[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                const char *p = (const char *)src + (size_t)((r + i) * ld + (pairs ? 2 * u0 : u0)) * es;
                x[i] = r + i >= rows ? _mm512_setzero_ps()
                    : pairs          ? load_pairs(p, (int)min64(32, kc - 2 * u0))
                                     : load16(p, dt, nu);
            }
            transpose16(x);
            for (int t = 0; t < nu; t++) store_rows(dst, R, units, r, u0 + t, padded, x[t]);
        }
}

T512 static void pack(float *dst, int R, int64_t rows, int64_t kc, const void *src, phx_dtype dt, int64_t ld,
                      int along_r)
{
    pack_kind(dst, R, rows, kc, src, dt, ld, along_r, 0);
}

T512 static void pack_pairs(float *dst, int R, int64_t rows, int64_t kc, const void *src, int64_t ld, int along_r)
{
    pack_kind(dst, R, rows, kc, src, PHX_BF16, ld, along_r, 1);
}

/* The last k block of a tile whose C is f16 or bf16 (and not swapped):
 * alpha acc + beta C (C the f32 sums of the earlier k blocks, or the
 * caller's C widened) rounded straight into the caller's C, hu (ldhu),
 * by the cast kernel's formula (px_half_st: the same bits as the f32
 * tile rounded by px_cpu_cast after it), without the f32 tile's store
 * and the rounding pass's reload. */
typedef struct half_out {
    uint16_t *hu; /* the tile's first element in the caller's C, or NULL: f32 out */
    int64_t ldhu;
    int bf; /* 1 bf16, 0 f16 */
} half_out;

/* alpha acc + beta C of the first n (1..16) lanes of a tile row's
 * vector, C at p (beta 0 reads nothing) */
T512 static inline __attribute__((always_inline)) __m512 tile_value(__m512 acc, const float *p, int n, float alpha,
                                                                    float beta)
{
    __m512 t = alpha == 1.0f ? acc : _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
    if (beta == 0.0f) return t;
    __m512 c = n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
    return _mm512_fmadd_ps(_mm512_set1_ps(beta), c, t);
}

/* C (rows x cols) = alpha acc + beta C of a micro-tile; beta 0 reads
 * nothing from C. ct: the tile's (r, col) is C's (col, r) (the product
 * was swapped, below): written through buf with the same arithmetic.
 * h.hu (not with ct): rounded into the caller's f16/bf16 C instead */
T512 static inline __attribute__((always_inline)) void tile_store(__m512 acc[MR][3], float *c, int64_t ldc, float alpha,
                                                                  float beta, int rows, int cols, int ct, half_out h)
{
    float buf[MR * NR] __attribute__((aligned(64)));
    float *out = c;
    int64_t ld = ldc;
    if (ct) {
        out = buf, ld = NR;
        for (int r = 0; r < rows && beta != 0.0f; r++)
            for (int col = 0; col < cols; col++) buf[r * NR + col] = c[col * ldc + r];
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= rows) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            int n = cols - 16 * v;
            if (n <= 0) break;
            float *p = out + r * ld + 16 * v;
            __m512 t = tile_value(acc[r][v], p, n, alpha, beta);
            if (h.hu)
                px_half_st(h.bf, h.hu + r * h.ldhu + 16 * v, t, n >= 16 ? 16 : n);
            else if (n >= 16)
                _mm512_storeu_ps(p, t);
            else
                _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), t);
        }
    }
    for (int r = 0; r < rows && ct; r++)
        for (int col = 0; col < cols; col++) c[col * ldc + r] = buf[r * NR + col];
}

/* fn(..., nv), nv the column vectors (1-3) a tile of cols columns needs:
 * a constant in each call, so that the inlined kernel is unrolled for it */
#define BY_VECTORS(cols, fn, ...) \
    ((cols) > 32 ? fn(__VA_ARGS__, 3) : (cols) > 16 ? fn(__VA_ARGS__, 2) : fn(__VA_ARGS__, 1))

/* the FMA micro-kernel on the first nv column vectors of the tile (an
 * edge tile of 16 or 32 columns does no more: a C 128 wide is 48 + 48 +
 * 32, and the third tile multiplying a third of zeros cost our GEMM
 * 10% on such shapes); every column's sum is the same either way */
T512 static inline __attribute__((always_inline)) void micro_nv(int64_t kc, const float *ap, const float *bp,
                                                                __m512 acc[MR][3], int nv)
{
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < kc; kk++, ap += MR, bp += NR) {
        __m512 b[3];
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            __m512 a = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
}

/* px_avx512_micro (gemm-avx512.h) */
T512 static void micro(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha, float beta,
                       int rows, int cols, int ct, half_out h)
{
    __m512 acc[MR][3];
    BY_VECTORS(cols, micro_nv, kc, ap, bp, acc);
    tile_store(acc, c, ldc, alpha, beta, rows, cols, ct, h);
}

/* micro over panels of bf16 pairs kp deep, on the first nv column
 * vectors of the tile (an edge tile of 16 or 32 columns does no more):
 * each lane of a vdpbf16ps adds the pair's odd product and then its even
 * one (Intel's definition; every tile and orientation runs the same
 * instruction on the same pairs, so the bits do not depend on the split) */
TBF16 static inline __attribute__((always_inline)) void micro_pairs_nv(int64_t kp, const float *ap, const float *bp,
                                                                       __m512 acc[MR][3], int nv)
{
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; p++, ap += MR, bp += NR) {
        __m512bh b[3];
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) b[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            __m512bh a = (__m512bh)_mm512_castps_si512(_mm512_set1_ps(ap[r]));
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], b[v], a);
        }
    }
}

TBF16 static void micro_pairs(int64_t kp, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                              float beta, int rows, int cols, int ct, half_out h)
{
    __m512 acc[MR][3];
    BY_VECTORS(cols, micro_pairs_nv, kp, ap, bp, acc);
    tile_store(acc, c, ldc, alpha, beta, rows, cols, ct, h);
}

/* the exported names (static above, so that block() may inline them:
 * the library is built with -fPIC and interposable names are not) */
void px_avx512_pack(float *dst, int R, int64_t rows, int64_t kc, const void *src, phx_dtype dt, int64_t ld, int along_r)
{
    pack(dst, R, rows, kc, src, dt, ld, along_r);
}

void px_avx512_micro(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha, float beta,
                     int rows, int cols, int ct)
{
    micro(kc, ap, bp, c, ldc, alpha, beta, rows, cols, ct, (half_out){NULL, 0, 0});
}

typedef struct job {
    int ta, tb, by_cols, ct; /* ct: m, n, a, b are swapped, C^T = B^T A^T is computed */
    int pairs; /* bf16 pairs and vdpbf16ps, else widened values and FMA */
    int64_t kc; /* depth of a block in k values: KC, or KC_PAIRS (even) */
    int64_t m, n, k;
    float alpha, beta;
    const void *a, *b;
    int64_t lda, ldb;
    phx_dtype dt;
    float *c; /* f32: the caller's C, or scratch when cdt is not f32 */
    int64_t ldc;
    void *cu; /* the caller's C when cdt is not f32 */
    int64_t ldcu;
    phx_dtype cdt;
    int fuse; /* cu's tiles rounded by the micro-kernels in their last k block (half_out) */
    int failed; /* a part ran out of memory (written with __atomic) */
} job;

/* where the job's (i, jj) is in its C */
static int64_t tile_at(const job *j, int64_t i, int64_t jj)
{
    return j->ct ? jj * j->ldc + i : i * j->ldc + jj;
}

/* C[i0:i1, j0:j1] of the job, on this thread's panels */
T512 static phx_status block(const job *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    size_t es = phx_dtype_size(j->dt);
    int64_t depth = j->pairs ? (j->kc + 1) / 2 : j->kc; /* of a panel, in 32-bit elements */
    float *bp = px_cpu_scratch(6, (size_t)depth * (size_t)(min64(NC, j1 - j0) + NR) * sizeof(float));
    float *ap = px_cpu_scratch(5, (size_t)depth * (MC + MR) * sizeof(float));
    if (!bp || !ap) return PHX_ENOMEM;
    for (int64_t jc = j0; jc < j1; jc += NC) {
        int64_t nc = min64(NC, j1 - jc);
        for (int64_t pc = 0; pc < j->k; pc += j->kc) {
            int64_t kc = min64(j->kc, j->k - pc), ku = j->pairs ? (kc + 1) / 2 : kc;
            float beta = pc == 0 ? j->beta : 1.0f;
            /* B value (kk, col) sits at b[kk * ldb + col], or b[col * ldb + kk] when transposed */
            const char *bs = (const char *)j->b + (size_t)(j->tb ? jc * j->ldb + pc : pc * j->ldb + jc) * es;
            if (j->pairs)
                pack_pairs(bp, NR, nc, kc, bs, j->ldb, !j->tb);
            else
                pack(bp, NR, nc, kc, bs, j->dt, j->ldb, !j->tb);
            for (int64_t ic = i0; ic < i1; ic += MC) {
                int64_t mc = min64(MC, i1 - ic);
                const char *as = (const char *)j->a + (size_t)(j->ta ? pc * j->lda + ic : ic * j->lda + pc) * es;
                if (j->pairs)
                    pack_pairs(ap, MR, mc, kc, as, j->lda, j->ta);
                else
                    pack(ap, MR, mc, kc, as, j->dt, j->lda, j->ta);
                /* A's 8-row panel (8 KiB) stays in L1 while B's 48-column
                 * panels stream from L2; the other order kept a 48 KiB B
                 * panel that L1 could not hold (1.10x on an Intel Xeon) */
                for (int64_t ir = 0; ir < mc; ir += MR)
                    for (int64_t jr = 0; jr < nc; jr += NR) {
                        float *c = j->c + tile_at(j, ic + ir, jc + jr);
                        int rows = (int)min64(MR, mc - ir), cols = (int)min64(NR, nc - jr);
                        half_out h = {NULL, 0, 0};
                        if (j->fuse && pc + kc >= j->k)
                            h = (half_out){(uint16_t *)j->cu + (ic + ir) * j->ldcu + jc + jr, j->ldcu,
                                           j->cdt == PHX_BF16};
                        if (j->pairs)
                            micro_pairs(ku, ap + ir * ku, bp + jr * ku, c, j->ldc, j->alpha, beta, rows, cols, j->ct,
                                        h);
                        else
                            micro(ku, ap + ir * ku, bp + jr * ku, c, j->ldc, j->alpha, beta, rows, cols, j->ct, h);
                    }
            }
        }
    }
    return PHX_OK;
}

/* One thread's part: panels lo .. hi - 1 of C's columns (or rows), and
 * its share of widening and rounding a half-precision C. */
static void part(void *arg, int64_t lo, int64_t hi)
{
    job *j = arg;
    int64_t i0 = 0, i1 = j->m, j0 = 0, j1 = j->n;
    if (j->by_cols)
        j0 = lo * NR, j1 = min64(hi * NR, j->n);
    else
        i0 = lo * MR, i1 = min64(hi * MR, j->m);
    /* the part's rows r0 .. r1 - 1 and columns c0 .. c1 - 1 of the caller's C */
    int64_t r0 = j->ct ? j0 : i0, r1 = j->ct ? j1 : i1, c0 = j->ct ? i0 : j0, c1 = j->ct ? i1 : j1;
    float *c32 = j->c + r0 * j->ldc + c0;
    char *cu = j->cu ? (char *)j->cu + (size_t)(r0 * j->ldcu + c0) * phx_dtype_size(j->cdt) : NULL;
    phx_status st = PHX_OK;
    if (cu && j->beta != 0.0f)
        st = px_cpu_half_cast_rows_here(c32, PHX_F32, j->ldc, cu, j->cdt, j->ldcu, r1 - r0, c1 - c0);
    if (st == PHX_OK) st = block(j, i0, i1, j0, j1);
    if (st == PHX_OK && cu && !j->fuse)
        st = px_cpu_half_cast_rows_here(cu, j->cdt, j->ldcu, c32, PHX_F32, j->ldc, r1 - r0, c1 - c0);
    if (st != PHX_OK) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

/* the share of the 8 x 48 tiles that an m x n C fills */
static double tile_fill(int64_t m, int64_t n)
{
    if (m <= 0 || n <= 0) return 0.0;
    return (double)m / (double)((m + MR - 1) / MR * MR) * (double)n / (double)((n + NR - 1) / NR * NR);
}

/* C^T = B^T A^T where C fills under half of the tiles and C^T more (a C
 * of few columns): the same products summed in the same order, so the
 * same bits. Not otherwise: C^T's tiles are written back through a buffer
 * element by element, which cost the GPT step of bench/step a third of
 * its speed when its 128 x 32 attention products took it. */
static int swapped(int64_t m, int64_t n)
{
    return tile_fill(m, n) < 0.5 && tile_fill(n, m) > tile_fill(m, n);
}

double px_gemm_avx512_fill(int64_t m, int64_t n)
{
    return swapped(m, n) ? tile_fill(n, m) : tile_fill(m, n);
}

/* depth from which an f16/bf16 C is rounded by the micro-kernels
 * (half_out) rather than by a pass over the f32 C after: on the
 * Ice Lake Xeon (family 6 model 106), one thread, 1.05-1.20x on GPT-sized
 * products (2048 x 128..512 x 64..128), about even from k = 512, and
 * 0.85-1.0x at k = 32, where the pass over a C still in the caches is
 * cheaper than rounding 16 lanes at a time in each tile */
#define FUSE_MIN_K 64

/* multiply-adds per thread below which a GEMM runs on the calling
 * thread alone: a pool worker takes tens of microseconds to wake */
#define PART_MIN ((int64_t)1 << 22)

phx_status px_cpu_gemm_avx512(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                              int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                              phx_dtype cdt)
{
    job j = {.ta = trans_a,
             .tb = trans_b,
             .by_cols = n >= m,
             .m = m,
             .n = n,
             .k = k,
             .alpha = alpha,
             .beta = beta,
             .a = a,
             .b = b,
             .lda = lda,
             .ldb = ldb,
             .pairs = adt == PHX_BF16 && px_cpu_has_avx512bf16(),
             .dt = adt,
             .c = c,
             .ldc = ldc,
             .cdt = cdt};
    j.kc = j.pairs ? KC_PAIRS : KC;
    if (cdt != PHX_F32) { /* computed in f32 scratch, rounded once */
        if (!(j.c = px_cpu_scratch(2, (size_t)(m * n) * sizeof(float)))) return PHX_ENOMEM;
        j.ldc = n, j.cu = c, j.ldcu = ldc;
    }
    if (swapped(m, n)) {
        j.ct = 1, j.m = n, j.n = m, j.by_cols = m >= n;
        j.a = b, j.lda = ldb, j.ta = !trans_b;
        j.b = a, j.ldb = lda, j.tb = !trans_a;
        m = j.m, n = j.n;
    }
    j.fuse = j.cu && !j.ct && k >= FUSE_MIN_K && (cdt == PHX_F16 || cdt == PHX_BF16);
    int64_t units = j.by_cols ? (n + NR - 1) / NR : (m + MR - 1) / MR;
    int64_t per_unit = (j.by_cols ? NR * m : MR * n) * k;
    int64_t grain = per_unit > 0 && PART_MIN / per_unit > 1 ? PART_MIN / per_unit : 1;
    px_cpu_parallel_for(units, grain, part, &j);
    if (j.failed) return phx_error(PHX_ENOMEM, "gemm: out of memory for the packed panels");
    return PHX_OK;
}
#else
double px_gemm_avx512_fill(int64_t m, int64_t n)
{
    (void)m, (void)n;
    return 0.0;
}

phx_status px_cpu_gemm_avx512(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                              int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                              phx_dtype cdt)
{
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)adt, (void)beta, (void)c, (void)ldc, (void)cdt;
    return phx_error(PHX_EUNSUPPORTED, "gemm: the AVX-512 GEMM needs an x86-64 build");
}
#endif
