/* Reductions on the GPU: the whole-tensor reduce (sum/avg in double,
 * max/min propagating NaN, as kernels/cpu/reduce.c) and bias_grad's
 * column sums (double, as kernels/cpu/elementwise.c). Two passes with
 * per-block partials in the thread's scratch, summed in a fixed order:
 * the results are deterministic run to run. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

#define PX_RED_BLOCKS_MAX 1024

template <int DT> __device__ __forceinline__ double px_ld_d(const void *p, int64_t i)
{
    if (DT == PHX_I32) return (double)((const int32_t *)p)[i];
    if (DT == PHX_I64) return (double)((const int64_t *)p)[i];
    return (double)px_ld < DT == PHX_I32 || DT == PHX_I64 ? PHX_F32 : DT > (p, i);
}

/* max/min that return a NaN operand */
__device__ __forceinline__ double px_pick(int op, double a, double b)
{
    if (a != a) return a;
    if (b != b) return b;
    return op == PHX_MAX ? (b > a ? b : a) : (b < a ? b : a);
}

__device__ double px_block_pick(int op, double v, double *sh)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = px_pick(op, v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[lane < nw ? lane : 0];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = px_pick(op, v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* pass 1: block b reduces its grid-stride share into part[b] */
template <int DT> __global__ void k_reduce_part(int op, int64_t n, const void *x, double *part)
{
    __shared__ double sh[32];
    double acc;
    if (op == PHX_SUM || op == PHX_AVG) {
        acc = 0.0;
        for (int64_t i = px_tid(); i < n; i += px_nthreads()) acc += px_ld_d<DT>(x, i);
        acc = px_block_sum(acc, sh);
    } else {
        acc = px_ld_d<DT>(x, 0); /* neutral for max/min: an element */
        for (int64_t i = px_tid(); i < n; i += px_nthreads()) acc = px_pick(op, acc, px_ld_d<DT>(x, i));
        acc = px_block_pick(op, acc, sh);
    }
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* pass 2: one block combines nparts partials into *out */
__global__ void k_reduce_final(int op, int nparts, const double *part, double *out)
{
    __shared__ double sh[32];
    double acc;
    if (op == PHX_SUM || op == PHX_AVG) {
        acc = 0.0;
        for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += part[i];
        acc = px_block_sum(acc, sh);
    } else {
        acc = part[0];
        for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc = px_pick(op, acc, part[i]);
        acc = px_block_pick(op, acc, sh);
    }
    if (threadIdx.x == 0) *out = acc;
}

extern "C" phx_status px_cuda_reduce(int dev, phx_reduce_op op, int64_t n, const void *x, phx_dtype dt,
                                     double *out_host)
{
    PX_CHECK_N("reduce", n);
    if (op < PHX_SUM || op > PHX_MIN)
        return phx_error(PHX_EINVAL, "reduce: op %d, expected sum, avg, max or min", (int)op);
    if (dt < PHX_F32 || dt > PHX_I64)
        return phx_error(PHX_EINVAL, "reduce: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt);
    if (!out_host) return phx_error(PHX_EINVAL, "reduce: out_host is NULL");
    if (n == 0) {
        if (op == PHX_MAX || op == PHX_MIN)
            return phx_error(PHX_EINVAL, "reduce: %s of an empty tensor, expected at least one element",
                             op == PHX_MAX ? "max" : "min");
        *out_host = op == PHX_SUM ? 0.0 : NAN;
        return PHX_OK;
    }
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, 4);
    if (grid > PX_RED_BLOCKS_MAX) grid = PX_RED_BLOCKS_MAX;
    double *part, *host;
    phx_status st = px_cuda_scratch(ctx, (grid + 1) * sizeof(double), (void **)&part);
    if (st == PHX_OK) st = px_cuda_host_small(ctx, (void **)&host);
    if (st != PHX_OK) return st;
    cudaStream_t s = ctx->stream;
    switch (dt) {
    case PHX_F32: k_reduce_part<PHX_F32><<<grid, PX_THREADS, 0, s>>>(op, n, x, part); break;
    case PHX_F16: k_reduce_part<PHX_F16><<<grid, PX_THREADS, 0, s>>>(op, n, x, part); break;
    case PHX_BF16: k_reduce_part<PHX_BF16><<<grid, PX_THREADS, 0, s>>>(op, n, x, part); break;
    case PHX_I32: k_reduce_part<PHX_I32><<<grid, PX_THREADS, 0, s>>>(op, n, x, part); break;
    default: k_reduce_part<PHX_I64><<<grid, PX_THREADS, 0, s>>>(op, n, x, part); break;
    }
    k_reduce_final<<<1, PX_THREADS, 0, s>>>(op, (int)grid, part, part + grid);
    if ((st = px_cuda_launched(dev, "reduce")) != PHX_OK) return st;
    cudaError_t e = cudaMemcpyAsync(host, part + grid, sizeof(double), cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "reduce: reading the result");
    *out_host = op == PHX_AVG ? host[0] / (double)n : host[0];
    return PHX_OK;
}

/* ---- bias_grad: db[c] <- beta db[c] + sum_r dy[r, c]
 * pass 1: block (bx, by), 32 x 8 threads, sums columns bx*32.. over the
 * rows of split by (rows r with r mod 8 == ty within the split), then
 * across ty; part[by][c]. pass 2: db[c] from the splits in order. */

#define PX_COLS_PER_BLOCK 32
#define PX_ROW_LANES 8

template <int DT>
__global__ void k_colsum_part(int64_t rows, int64_t cols, int64_t rows_per_split, const void *dy, double *part)
{
    __shared__ double sh[PX_ROW_LANES][PX_COLS_PER_BLOCK];
    int64_t c = (int64_t)blockIdx.x * PX_COLS_PER_BLOCK + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * rows_per_split;
    int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
    double acc = 0.0;
    if (c < cols)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += PX_ROW_LANES) acc += (double)px_ld<DT>(dy, r * cols + c);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        double s = 0.0;
        for (int j = 0; j < PX_ROW_LANES; j++) s += sh[j][threadIdx.x];
        part[(int64_t)blockIdx.y * cols + c] = s;
    }
}

__global__ void k_colsum_final(int64_t cols, int splits, const double *part, float beta, float *db)
{
    for (int64_t c = px_tid(); c < cols; c += px_nthreads()) {
        double s = 0.0;
        for (int j = 0; j < splits; j++) s += part[(int64_t)j * cols + c];
        db[c] = beta == 0.0f ? (float)s : (float)((double)beta * db[c] + s);
    }
}

extern "C" phx_status px_cuda_bias_grad(int dev, int64_t rows, int64_t cols, const void *dy, phx_dtype dt, float beta,
                                        float *db)
{
    PX_CHECK_N("bias_grad", rows);
    PX_CHECK_N("bias_grad", cols);
    PX_CHECK_FLOAT("bias_grad", dt);
    if (cols == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int64_t colblocks = (cols + PX_COLS_PER_BLOCK - 1) / PX_COLS_PER_BLOCK;
    /* enough splits to fill the device twice over, each at least 32 rows */
    int64_t want = (2 * (int64_t)ctx->sm_count + colblocks - 1) / colblocks;
    int64_t maxs = (rows + 31) / 32;
    int64_t splits = want < maxs ? want : maxs;
    if (splits < 1) splits = 1;
    if (splits > 65535) splits = 65535;
    int64_t rps = (rows + splits - 1) / splits;
    if (rps < 1) rps = 1;
    double *part;
    phx_status st = px_cuda_scratch(ctx, (size_t)(splits * cols) * sizeof(double), (void **)&part);
    if (st != PHX_OK) return st;
    if (colblocks > 2147483647) return phx_error(PHX_EUNSUPPORTED, "bias_grad: %lld columns", (long long)cols);
    dim3 grid((unsigned)colblocks, (unsigned)splits), block(PX_COLS_PER_BLOCK, PX_ROW_LANES);
    PX_FLOAT_DISPATCH("bias_grad", dt, (k_colsum_part<DT><<<grid, block, 0, ctx->stream>>>(rows, cols, rps, dy, part)));
    k_colsum_final<<<px_cuda_grid(ctx, cols, PX_THREADS, 2), PX_THREADS, 0, ctx->stream>>>(cols, (int)splits, part,
                                                                                           beta, db);
    return px_cuda_launched(dev, "bias_grad");
}
