/* Elementwise kernels: axpby, mul, bias_add, bias_grad. Plain loops the
 * compiler vectorises for f32; f16/bf16 convert per element. */
#include "config.h"
#include "kernels/cpu/cpu.h"

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
            phx_status st = px_cpu_cast(0, a, PHX_F32, row, dt, k);
            for (int64_t j = 0; j < k; j++) a[j] += bias[c + j];
            if (st == PHX_OK) st = px_cpu_cast(0, row, dt, a, PHX_F32, k);
            if (st != PHX_OK) return st;
        }
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_bias_add(int dev, int64_t rows, int64_t cols, void *y, phx_dtype dt, const float *bias)
{
    (void)dev;
    PX_CHECK_N("bias_add", rows);
    PX_CHECK_N("bias_add", cols);
    if (px_cpu_half_chunk(dt, 1) != 0) return bias_add_half_blocks(rows, cols, y, bias, dt);
    PX_FLOAT_DISPATCH("bias_add", dt, px_bias_add_loop(rows, cols, y, DT, bias));
    return PHX_OK;
}

/* Column sums over rows, a tile of columns at a time: rows are streamed in
 * order (the whole row when cols <= the tile), the running sums (double,
 * for long batches; 16 KiB) stay in L1. */
#define PX_BIAS_TILE 2048

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
                px_cpu_cast(0, row, PHX_F32, (const uint16_t *)dy + o, (phx_dtype)dt, w);
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
    int widen = px_cpu_half_chunk(dt, 1) != 0;
    PX_FLOAT_DISPATCH("bias_grad", dt, px_bias_grad_loop(rows, cols, dy, DT, beta, db, widen));
    return PHX_OK;
}
