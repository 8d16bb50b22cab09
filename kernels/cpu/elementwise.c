/* Elementwise kernels: axpby, mul, bias_add, bias_grad. Plain loops the
 * compiler vectorises for f32; f16/bf16 convert per element. */
#include "config.h"
#include "kernels/cpu/cpu.h"
#include <string.h>

/* f32 loops the compiler vectorises with 512-bit registers where the CPU
 * has AVX-512 (additions only: the same bits on every path) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define PX_CLONES_512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PX_CLONES_512
#endif

PX_INLINE void px_axpby_loop(int64_t n, float alpha, const void *x, int xdt, float beta, void *y, int ydt)
{
    if (!x) {
        if (beta == 0.0f)
            for (int64_t i = 0; i < n; i++) px_st(y, ydt, i, 0.0f);
        else
            for (int64_t i = 0; i < n; i++) px_st(y, ydt, i, beta * px_ld(y, ydt, i));
    } else if (beta == 0.0f) { /* BLAS rule: beta 0 does not read y (NaN there is ignored) */
        for (int64_t i = 0; i < n; i++) px_st(y, ydt, i, alpha * px_ld(x, xdt, i));
    } else if (beta == 1.0f) {
        for (int64_t i = 0; i < n; i++) px_st(y, ydt, i, alpha * px_ld(x, xdt, i) + px_ld(y, ydt, i));
    } else {
        for (int64_t i = 0; i < n; i++) px_st(y, ydt, i, alpha * px_ld(x, xdt, i) + beta * px_ld(y, ydt, i));
    }
}

PX_CLONES phx_status px_cpu_axpby(int dev, int64_t n, float alpha, const void *x, phx_dtype xdt, float beta, void *y,
                                  phx_dtype ydt)
{
    (void)dev;
    PX_CHECK_N("axpby", n);
    if (!x) xdt = ydt;
    PX_FLOAT_DISPATCH_AS("axpby", xdt, X,
                         PX_FLOAT_DISPATCH_AS("axpby", ydt, Y, px_axpby_loop(n, alpha, x, X, beta, y, Y)));
    return PHX_OK;
}

PX_INLINE void px_mul_loop(int64_t n, const void *a, const void *b, void *out, int dt)
{
    for (int64_t i = 0; i < n; i++) px_st(out, dt, i, px_ld(a, dt, i) * px_ld(b, dt, i));
}

PX_CLONES phx_status px_cpu_mul(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("mul", n);
    PX_FLOAT_DISPATCH("mul", dt, px_mul_loop(n, a, b, out, DT));
    return PHX_OK;
}

PX_INLINE void px_bias_add_loop(int64_t rows, int64_t cols, void *y, int dt, const float *restrict bias)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols;
        for (int64_t c = 0; c < cols; c++) px_st(y, dt, o + c, px_ld(y, dt, o + c) + bias[c]);
    }
}

/* f32: the same loop compiled for AVX-512 too */
__attribute__((noinline)) PX_CLONES_512 static void px_bias_add_f32(int64_t rows, int64_t cols, float *y,
                                                                    const float *restrict bias)
{
    for (int64_t r = 0; r < rows; r++) {
        float *restrict row = y + r * cols;
        for (int64_t c = 0; c < cols; c++) row[c] = row[c] + bias[c];
    }
}

/* f16 and bf16 on a CPU with AVX2 (F16C with it): blocks of a row
 * widened by the cast kernel, the bias added in f32, rounded back; the
 * bits of the compiled half loops, which convert each element in
 * software. */
static phx_status bias_add_half_blocks(int64_t rows, int64_t cols, uint16_t *y, const float *bias, phx_dtype dt)
{
    float a[PX_F16_BLOCK];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += PX_F16_BLOCK) {
            int64_t k = cols - c < PX_F16_BLOCK ? cols - c : PX_F16_BLOCK;
            uint16_t *row = y + r * cols + c;
            phx_status st = px_cpu_half_cast_here(a, PHX_F32, row, dt, k);
            for (int64_t j = 0; j < k; j++) a[j] += bias[c + j];
            if (st == PHX_OK) st = px_cpu_half_cast_here(row, dt, a, PHX_F32, k);
            if (st != PHX_OK) return st;
        }
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_bias_add(int dev, int64_t rows, int64_t cols, void *y, phx_dtype dt, const float *bias)
{
    (void)dev;
    PX_CHECK_N("bias_add", rows);
    PX_CHECK_N("bias_add", cols);
    if (dt == PHX_F32) {
        px_bias_add_f32(rows, cols, y, bias);
        return PHX_OK;
    }
    if (px_cpu_half_chunk(dt, 1) != 0) return bias_add_half_blocks(rows, cols, y, bias, dt);
    PX_FLOAT_DISPATCH("bias_add", dt, px_bias_add_loop(rows, cols, y, DT, bias));
    return PHX_OK;
}

/* Column sums over rows, a tile of columns at a time: rows are streamed in
 * order (the whole row when cols <= the tile).
 *
 * f32 sums in f32 (what the CPU streams 16 lanes at a time), in a fixed
 * order: blocks of PX_BIAS_BLOCK rows are summed in row order into a
 * block partial; the partials are combined pairwise by a binary counter
 * (level k holds the sum of 2^k consecutive blocks: a new partial p that
 * meets an occupied level k becomes level[k] + p at level k + 1), the
 * top level PX_BIAS_LEVELS - 1 adds every partial that reaches it in
 * row order; at the end the occupied levels are added from the top
 * (the first rows) down, then db = beta db + sum in double, rounded
 * once. Each element goes through at most PX_BIAS_BLOCK - 1 + 2 log2(blocks)
 * + 2 roundings (rows <= PX_BIAS_BLOCK 2^(PX_BIAS_LEVELS - 1)), against
 * rows - 1 for a running sum; t/tensor/ops checks the order bit for bit
 * and the error against float64 with that bound. The levels (4 KiB each)
 * stay in L1 and L2.
 *
 * f16 and bf16 sum in double in row order (16 KiB of running sums). */
#define PX_BIAS_TILE 2048
#define PX_BIAS_F32_TILE 1024
#define PX_BIAS_BLOCK 16
#define PX_BIAS_LEVELS 12

/* acc[j] += rows r0 .. r1 - 1 at column j, in row order, four rows per
 * pass over acc (the same order as one row at a time) */
PX_INLINE void px_bias_rows_f32(float *restrict acc, const float *restrict dy, int64_t cols, int64_t r0, int64_t r1,
                                int64_t w)
{
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        const float *restrict a = dy + r * cols, *restrict b = a + cols, *restrict c = b + cols, *restrict d = c + cols;
        for (int64_t j = 0; j < w; j++) acc[j] = (((acc[j] + a[j]) + b[j]) + c[j]) + d[j];
    }
    for (; r < r1; r++) {
        const float *restrict a = dy + r * cols;
        for (int64_t j = 0; j < w; j++) acc[j] += a[j];
    }
}

__attribute__((noinline)) PX_CLONES_512 static void px_bias_grad_f32(int64_t rows, int64_t cols, const float *dy,
                                                                     float beta, float *db)
{
    float lv[PX_BIAS_LEVELS][PX_BIAS_F32_TILE], p[PX_BIAS_F32_TILE];
    for (int64_t c0 = 0; c0 < cols; c0 += PX_BIAS_F32_TILE) {
        int64_t w = cols - c0 < PX_BIAS_F32_TILE ? cols - c0 : PX_BIAS_F32_TILE;
        uint64_t full = 0; /* bit k: level k holds a sum */
        for (int64_t r = 0; r < rows; r += PX_BIAS_BLOCK) {
            int64_t r1 = rows - r < PX_BIAS_BLOCK ? rows : r + PX_BIAS_BLOCK;
            for (int64_t j = 0; j < w; j++) p[j] = dy[r * cols + c0 + j];
            px_bias_rows_f32(p, dy + c0, cols, r + 1, r1, w);
            int k = 0;
            while (k < PX_BIAS_LEVELS - 1 && (full >> k & 1u)) {
                for (int64_t j = 0; j < w; j++) p[j] = lv[k][j] + p[j];
                full &= ~((uint64_t)1 << k++);
            }
            if (full >> k & 1u) { /* the top level */
                for (int64_t j = 0; j < w; j++) lv[k][j] += p[j];
            } else {
                memcpy(lv[k], p, (size_t)w * sizeof(float));
                full |= (uint64_t)1 << k;
            }
        }
        for (int64_t j = 0; j < w; j++) p[j] = 0.0f;
        for (int k = PX_BIAS_LEVELS - 1; k >= 0; k--)
            if (full >> k & 1u)
                for (int64_t j = 0; j < w; j++) p[j] += lv[k][j];
        if (beta == 0.0f)
            for (int64_t j = 0; j < w; j++) db[c0 + j] = p[j];
        else
            for (int64_t j = 0; j < w; j++) db[c0 + j] = (float)((double)beta * db[c0 + j] + (double)p[j]);
    }
}

PX_INLINE void px_bias_grad_loop(int64_t rows, int64_t cols, const void *dy, int dt, float beta, float *db,
                                  int widen)
{
    double acc[PX_BIAS_TILE];
    float row[PX_BIAS_TILE]; /* widen: f16/bf16 rows converted by the cast kernel, the same values */
    for (int64_t c0 = 0; c0 < cols; c0 += PX_BIAS_TILE) {
        int64_t w = cols - c0 < PX_BIAS_TILE ? cols - c0 : PX_BIAS_TILE;
        for (int64_t j = 0; j < w; j++) acc[j] = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            int64_t o = r * cols + c0;
            if (dt != PHX_F32 && widen) {
                px_cpu_half_cast_here(row, PHX_F32, (const uint16_t *)dy + o, (phx_dtype)dt, w);
                for (int64_t j = 0; j < w; j++) acc[j] += (double)row[j];
            } else {
                for (int64_t j = 0; j < w; j++) acc[j] += (double)px_ld(dy, dt, o + j);
            }
        }
        if (beta == 0.0f)
            for (int64_t j = 0; j < w; j++) db[c0 + j] = (float)acc[j];
        else
            for (int64_t j = 0; j < w; j++) db[c0 + j] = (float)((double)beta * db[c0 + j] + acc[j]);
    }
}

PX_CLONES phx_status px_cpu_bias_grad(int dev, int64_t rows, int64_t cols, const void *dy, phx_dtype dt, float beta,
                                      float *db)
{
    (void)dev;
    PX_CHECK_N("bias_grad", rows);
    PX_CHECK_N("bias_grad", cols);
    if (dt == PHX_F32) {
        px_bias_grad_f32(rows, cols, dy, beta, db);
        return PHX_OK;
    }
    int widen = px_cpu_half_chunk(dt, 1) != 0;
    PX_FLOAT_DISPATCH("bias_grad", dt, px_bias_grad_loop(rows, cols, dy, DT, beta, db, widen));
    return PHX_OK;
}
