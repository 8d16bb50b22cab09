/* LayerNorm over the last dimension on the GPU, PyTorch's definition
 * (biased variance, eps inside the sqrt), statistics in f32 in two passes
 * over x shifted by its first element, like kernels/cpu/layernorm.c; per-element formulas from kernels/math.h.
 * One block per row (grid-stride over rows); the row is read from L2 on
 * the later passes. dw/db: column sums over rows as partials per row
 * split, added in a fixed order. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

#define PX_LN_THREADS 256

template <int DT>
__global__ void k_ln_fwd(int64_t rows, int64_t cols, float eps, const void *x, const float *w, const float *b, void *y,
                         float *mean_out, float *rstd_out)
{
    __shared__ float sh[32];
    float inv_n = 1.0f / (float)cols;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t o = r * cols;
        /* statistics of x - x0, as the CPU: a large common offset costs no
         * precision in d = mean - x0 or in the variance */
        float x0 = px_ld<DT>(x, o);
        float s = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += px_ld<DT>(x, o + c) - x0;
        float d = px_block_sumf(s, sh) * inv_n;
        float v = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float e = (px_ld<DT>(x, o + c) - x0) - d;
            v += e * e;
        }
        float rstd = phx_ln_rstd(px_block_sumf(v, sh) * inv_n, eps);
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[r] = x0 + d;
            if (rstd_out) rstd_out[r] = rstd;
        }
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float t = ((px_ld<DT>(x, o + c) - x0) - d) * rstd;
            if (w) t = t * w[c];
            if (b) t = t + b[c];
            px_st<DT>(y, o + c, t);
        }
    }
}

extern "C" phx_status px_cuda_layernorm_forward(int dev, int64_t rows, int64_t cols, float eps, const void *x,
                                                const float *w, const float *b, void *y, float *mean, float *rstd,
                                                phx_dtype dt)
{
    PX_CHECK_N("layernorm_forward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_forward: %lld columns, expected >= 1", (long long)cols);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "layernorm_forward: eps=%g, expected >= 0", (double)eps);
    PX_CHECK_FLOAT("layernorm_forward", dt);
    if (rows == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int threads = cols >= PX_LN_THREADS ? PX_LN_THREADS : (int)((cols + 31) / 32 * 32);
    unsigned grid = px_cuda_grid(ctx, rows, 1, 16);
    PX_FLOAT_DISPATCH("layernorm_forward", dt,
                      (k_ln_fwd<DT><<<grid, threads, 0, ctx->stream>>>(rows, cols, eps, x, w, b, y, mean, rstd)));
    return px_cuda_launched(dev, "layernorm_forward");
}

/* dx for each row: g = dy w, dx = rstd (g - mean(g) - xhat mean(g xhat)) */
template <int DT>
__global__ void k_ln_bwd_dx(int64_t rows, int64_t cols, const void *x, const float *w, const float *mean,
                            const float *rstd, const void *dy, void *dx)
{
    __shared__ float sh[32];
    float inv_n = 1.0f / (float)cols;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t o = r * cols;
        float mu = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float d = px_ld<DT>(dy, o + c);
            float g = w ? d * w[c] : d;
            float xhat = (px_ld<DT>(x, o + c) - mu) * rs;
            sg += g;
            sgx += g * xhat;
        }
        float mg = px_block_sumf(sg, sh) * inv_n;
        float mgx = px_block_sumf(sgx, sh) * inv_n;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float d = px_ld<DT>(dy, o + c);
            float g = w ? d * w[c] : d;
            float xhat = (px_ld<DT>(x, o + c) - mu) * rs;
            px_st<DT>(dx, o + c, phx_ln_dx(g, xhat, rs, mg, mgx));
        }
    }
}

/* partial column sums of dy xhat (dw) and dy (db) over a split of rows */
template <int DT>
__global__ void k_ln_bwd_wb(int64_t rows, int64_t cols, int64_t rows_per_split, const void *x, const float *mean,
                            const float *rstd, const void *dy, float *part_w, float *part_b)
{
    __shared__ float shw[8][32], shb[8][32];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * rows_per_split;
    int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
    float aw = 0.0f, ab = 0.0f;
    if (c < cols)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = px_ld<DT>(dy, r * cols + c);
            aw += d * ((px_ld<DT>(x, r * cols + c) - mean[r]) * rstd[r]);
            ab += d;
        }
    shw[threadIdx.y][threadIdx.x] = aw;
    shb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float sw = 0.0f, sb = 0.0f;
        for (int j = 0; j < 8; j++) {
            sw += shw[j][threadIdx.x];
            sb += shb[j][threadIdx.x];
        }
        part_w[(int64_t)blockIdx.y * cols + c] = sw;
        part_b[(int64_t)blockIdx.y * cols + c] = sb;
    }
}

__global__ void k_ln_bwd_wb_final(int64_t cols, int splits, const float *part_w, const float *part_b, float *dw,
                                  float *db)
{
    for (int64_t c = px_tid(); c < cols; c += px_nthreads()) {
        float sw = 0.0f, sb = 0.0f;
        for (int j = 0; j < splits; j++) {
            sw += part_w[(int64_t)j * cols + c];
            sb += part_b[(int64_t)j * cols + c];
        }
        if (dw) dw[c] += sw;
        if (db) db[c] += sb;
    }
}

extern "C" phx_status px_cuda_layernorm_backward(int dev, int64_t rows, int64_t cols, const void *x, const float *w,
                                                 const float *mean, const float *rstd, const void *dy, void *dx,
                                                 float *dw, float *db, phx_dtype dt)
{
    PX_CHECK_N("layernorm_backward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_backward: %lld columns, expected >= 1", (long long)cols);
    if (rows > 0 && (!mean || !rstd))
        return phx_error(PHX_EINVAL, "layernorm_backward: mean/rstd are NULL, expected forward's statistics");
    PX_CHECK_FLOAT("layernorm_backward", dt);
    if (rows == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int threads = cols >= PX_LN_THREADS ? PX_LN_THREADS : (int)((cols + 31) / 32 * 32);
    unsigned grid = px_cuda_grid(ctx, rows, 1, 16);
    PX_FLOAT_DISPATCH("layernorm_backward", dt,
                      (k_ln_bwd_dx<DT><<<grid, threads, 0, ctx->stream>>>(rows, cols, x, w, mean, rstd, dy, dx)));
    if (dw || db) {
        int64_t colblocks = (cols + 31) / 32;
        int64_t want = (2 * (int64_t)ctx->sm_count + colblocks - 1) / colblocks;
        int64_t maxs = (rows + 31) / 32;
        int64_t splits = want < maxs ? want : maxs;
        if (splits < 1) splits = 1;
        if (splits > 65535) splits = 65535;
        int64_t rps = (rows + splits - 1) / splits;
        float *part;
        phx_status st = px_cuda_scratch(ctx, (size_t)(2 * splits * cols) * sizeof(float), (void **)&part);
        if (st != PHX_OK) return st;
        dim3 g2((unsigned)colblocks, (unsigned)splits), b2(32, 8);
        PX_FLOAT_DISPATCH("layernorm_backward", dt,
                          (k_ln_bwd_wb<DT><<<g2, b2, 0, ctx->stream>>>(rows, cols, rps, x, mean, rstd, dy, part,
                                                                       part + splits * cols)));
        k_ln_bwd_wb_final<<<px_cuda_grid(ctx, cols, PX_THREADS, 2), PX_THREADS, 0, ctx->stream>>>(
            cols, (int)splits, part, part + splits * cols, dw, db);
    }
    return px_cuda_launched(dev, "layernorm_backward");
}
