/* 2-D convolution on the GPU through cuDNN's legacy API: NCHW tensor and
 * filter descriptors, a cross-correlation descriptor (PyTorch's
 * convolution) with symmetric padding, stride, dilation and a group
 * count, f32 compute for every data type (f16/bf16 tensors with f32
 * accumulation on tensor cores). f32 uses FMA kernels only, or TF32 tensor
 * cores with PHX_TF32=1, as GEMM does. The algorithm is cuDNN's heuristic
 * choice (cudnnGet*Algorithm_v7, what PyTorch does without
 * cudnn.benchmark): the first candidate that is allowed, whose workspace
 * the caching allocator can give and that cuDNN runs. One cuDNN handle
 * per thread and device, in the thread's context, bound to its stream.
 *
 * Not supported (PHX_EUNSUPPORTED naming the shapes): outputs that
 * symmetric padding does not give, i.e. "same" padding with an even
 * kernel (one more row/column at the bottom/right); an empty input
 * plane; dimensions or element counts beyond int.
 *
 * The bias is added by a kernel after the convolution (it is f32, the
 * output may not be); db is a per-channel sum of dy. dw is f32 and
 * accumulated: f32 data runs BackwardFilter into it with beta = 1;
 * f16/bf16 data get dw in their type (cuDNN's filter gradient has the
 * data's type), which is then added to the f32 dw, like the f32 .grad of
 * an autocast convolution in PyTorch. */
#include <limits.h>
#include <cudnn.h>
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

#define CONV_FMT \
    "x (%lld, %lld, %lld, %lld), w (%lld, %lld, %lld, %lld), y %lldx%lld, stride %lldx%lld, pad %lldx%lld, " \
    "dilation %lldx%lld, groups %lld"
#define CONV_ARGS(d) \
    (long long)(d)->n, (long long)(d)->c, (long long)(d)->h, (long long)(d)->w, (long long)(d)->k, \
        (long long)((d)->c / (d)->groups), (long long)(d)->kh, (long long)(d)->kw, (long long)(d)->oh, \
        (long long)(d)->ow, (long long)(d)->stride_h, (long long)(d)->stride_w, (long long)(d)->pad_h, \
        (long long)(d)->pad_w, (long long)(d)->dil_h, (long long)(d)->dil_w, (long long)(d)->groups

enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };
static const char *const conv_call[3] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                         "cudnnConvolutionBackwardFilter"};

static phx_status dnn_error(cudnnStatus_t s, int dev, const char *kernel, const char *call, const phx_conv2d_desc *d)
{
    int cat = CUDNN_STATUS_CATEGORY(s);
    phx_status st = cat == CUDNN_STATUS_NOT_SUPPORTED ? PHX_EUNSUPPORTED
        : s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
            s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
        ? PHX_ENOMEM
        : cat == CUDNN_STATUS_BAD_PARAM ? PHX_EINVAL
                                        : PHX_EDEVICE;
    if (!d) return phx_error(st, "cuda:%d: %s: %s: %s", dev, kernel, call, cudnnGetErrorString(s));
    return phx_error(st, "cuda:%d: %s: %s for " CONV_FMT ": %s", dev, kernel, call, CONV_ARGS(d),
                     cudnnGetErrorString(s));
}

/* The thread's cuDNN handle on ctx's device, created on first use and
 * bound to the thread's stream there (the context keeps its stream for
 * life, so the binding holds). */
static phx_status dnn_handle(px_cuda_ctx *ctx, const char *kernel, cudnnHandle_t *out)
{
    if (!ctx->dnn) {
        cudnnHandle_t h = NULL;
        cudnnStatus_t s = cudnnCreate(&h);
        if (s != CUDNN_STATUS_SUCCESS) return dnn_error(s, ctx->dev, kernel, "cudnnCreate", NULL);
        if ((s = cudnnSetStream(h, ctx->stream)) != CUDNN_STATUS_SUCCESS) {
            cudnnDestroy(h);
            return dnn_error(s, ctx->dev, kernel, "cudnnSetStream", NULL);
        }
        ctx->dnn = h;
    }
    *out = (cudnnHandle_t)ctx->dnn;
    return PHX_OK;
}

/* The descriptors of one convolution: x (n, c, h, w), y (n, k, oh, ow),
 * the filter (k, c/groups, kh, kw), all in the data type, and the
 * convolution itself. */
typedef struct conv_plan {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int fma_only; /* f32 without PHX_TF32: no tensor-core algorithms */
} conv_plan;

static void plan_free(conv_plan *p)
{
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
}

static phx_status plan_make(int dev, const char *kernel, const phx_conv2d_desc *d, phx_dtype dt, conv_plan *p)
{
    p->x = p->y = NULL;
    p->w = NULL;
    p->conv = NULL;
    int64_t dims[] = {d->n,
                      d->c,
                      d->h,
                      d->w,
                      d->k,
                      d->kh,
                      d->kw,
                      d->oh,
                      d->ow,
                      d->stride_h,
                      d->stride_w,
                      d->pad_h,
                      d->pad_w,
                      d->dil_h,
                      d->dil_w,
                      d->groups,
                      d->n * d->c * d->h * d->w,
                      d->n * d->k * d->oh * d->ow,
                      d->k * (d->c / d->groups) * d->kh * d->kw};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] > INT_MAX)
            return phx_error(PHX_EUNSUPPORTED, "cuda:%d: %s: " CONV_FMT ": a size beyond cuDNN's int range", dev,
                             kernel, CONV_ARGS(d));
    int tf32 = 0;
    phx_status st = px_cuda_tf32(&tf32);
    if (st != PHX_OK) return st;
    p->fma_only = dt == PHX_F32 && !tf32;
    cudnnDataType_t t = dt == PHX_F16 ? CUDNN_DATA_HALF : dt == PHX_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnMathType_t math = p->fma_only ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    const char *call = "";
    int on = 0, ok_ = 0, ohc = 0, owc = 0;
    cudnnStatus_t s;
#define DNN_TRY(name, expr) \
    do { \
        call = name; \
        if ((s = (expr)) != CUDNN_STATUS_SUCCESS) goto fail; \
    } while (0)
    DNN_TRY("cudnnCreateTensorDescriptor", cudnnCreateTensorDescriptor(&p->x));
    DNN_TRY("cudnnCreateTensorDescriptor", cudnnCreateTensorDescriptor(&p->y));
    DNN_TRY("cudnnCreateFilterDescriptor", cudnnCreateFilterDescriptor(&p->w));
    DNN_TRY("cudnnCreateConvolutionDescriptor", cudnnCreateConvolutionDescriptor(&p->conv));
    DNN_TRY("cudnnSetTensor4dDescriptor (x)",
            cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, t, (int)d->n, (int)d->c, (int)d->h, (int)d->w));
    DNN_TRY("cudnnSetFilter4dDescriptor",
            cudnnSetFilter4dDescriptor(p->w, t, CUDNN_TENSOR_NCHW, (int)d->k, (int)(d->c / d->groups), (int)d->kh,
                                       (int)d->kw));
    DNN_TRY("cudnnSetConvolution2dDescriptor",
            cudnnSetConvolution2dDescriptor(p->conv, (int)d->pad_h, (int)d->pad_w, (int)d->stride_h, (int)d->stride_w,
                                            (int)d->dil_h, (int)d->dil_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_TRY("cudnnSetConvolutionGroupCount", cudnnSetConvolutionGroupCount(p->conv, (int)d->groups));
    DNN_TRY("cudnnSetConvolutionMathType", cudnnSetConvolutionMathType(p->conv, math));
    DNN_TRY("cudnnGetConvolution2dForwardOutputDim",
            cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &ok_, &ohc, &owc));
    if (ohc != d->oh || owc != d->ow) {
        plan_free(p);
        return phx_error(PHX_EUNSUPPORTED,
                         "cuda:%d: %s: " CONV_FMT ": output %lldx%lld given where symmetric padding gives %dx%d; "
                         "the cuda device cannot pad one side more (\"same\" padding with an even kernel)",
                         dev, kernel, CONV_ARGS(d), (long long)d->oh, (long long)d->ow, ohc, owc);
    }
    DNN_TRY("cudnnSetTensor4dDescriptor (y)",
            cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, t, (int)d->n, (int)d->k, (int)d->oh, (int)d->ow));
#undef DNN_TRY
    return PHX_OK;
fail:
    plan_free(p);
    return dnn_error(s, dev, kernel, call, d);
}

typedef struct conv_algo {
    int algo;
    cudnnMathType_t math;
    cudnnStatus_t status;
} conv_algo;

/* cuDNN's heuristic ranking for the direction, best first. */
static cudnnStatus_t conv_algos(cudnnHandle_t h, const conv_plan *p, int dir, conv_algo *out, int cap, int *n)
{
    cudnnStatus_t s;
    *n = 0;
    if (dir == CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int want = cap < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? cap : CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
        s = cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, want, n, r);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < *n; i++) out[i] = {(int)r[i].algo, r[i].mathType, r[i].status};
    } else if (dir == CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int want = cap < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT ? cap : CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
        s = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x, want, n, r);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < *n; i++) out[i] = {(int)r[i].algo, r[i].mathType, r[i].status};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int want = cap < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT ? cap : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
        s = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w, want, n, r);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < *n; i++) out[i] = {(int)r[i].algo, r[i].mathType, r[i].status};
    }
    return s;
}

static cudnnStatus_t conv_ws(cudnnHandle_t h, const conv_plan *p, int dir, int algo, size_t *bytes)
{
    if (dir == CONV_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, (cudnnConvolutionFwdAlgo_t)algo,
                                                       bytes);
    if (dir == CONV_BWD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv, p->w,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* out <- op(a, b) + beta out: FWD y from (x, w), BWD_DATA dx from (w, dy),
 * BWD_FILTER dw from (x, dy). */
static cudnnStatus_t conv_call_run(cudnnHandle_t h, const conv_plan *p, int dir, int algo, void *ws, size_t bytes,
                                   const void *a, const void *b, float beta, void *out)
{
    const float one = 1.0f;
    if (dir == CONV_FWD)
        return cudnnConvolutionForward(h, &one, p->x, a, p->w, b, p->conv, (cudnnConvolutionFwdAlgo_t)algo, ws, bytes,
                                       &beta, p->y, out);
    if (dir == CONV_BWD_DATA)
        return cudnnConvolutionBackwardData(h, &one, p->w, a, p->y, b, p->conv, (cudnnConvolutionBwdDataAlgo_t)algo, ws,
                                            bytes, &beta, p->x, out);
    return cudnnConvolutionBackwardFilter(h, &one, p->x, a, p->y, b, p->conv, (cudnnConvolutionBwdFilterAlgo_t)algo, ws,
                                          bytes, &beta, p->w, out);
}

/* Runs the direction with the first candidate that is allowed, whose
 * workspace can be had and that cuDNN accepts. */
static phx_status conv_exec(px_cuda_ctx *ctx, cudnnHandle_t h, conv_plan *p, int dir, const char *kernel,
                            const phx_conv2d_desc *d, const void *a, const void *b, float beta, void *out)
{
    conv_algo cand[16];
    int n = 0;
    cudnnStatus_t s = conv_algos(h, p, dir, cand, 16, &n);
    if (s != CUDNN_STATUS_SUCCESS) return dnn_error(s, ctx->dev, kernel, "cudnnGet*Algorithm_v7", d);
    phx_status last = PHX_OK;
    for (int i = 0; i < n; i++) {
        if (cand[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (p->fma_only && cand[i].math != CUDNN_FMA_MATH && cand[i].math != CUDNN_DEFAULT_MATH) continue;
        cudnnMathType_t math = p->fma_only ? CUDNN_FMA_MATH : cand[i].math;
        size_t bytes = 0;
        if ((s = cudnnSetConvolutionMathType(p->conv, math)) != CUDNN_STATUS_SUCCESS ||
            (s = conv_ws(h, p, dir, cand[i].algo, &bytes)) != CUDNN_STATUS_SUCCESS) {
            last = dnn_error(s, ctx->dev, kernel, "cudnnGet*WorkspaceSize", d);
            continue;
        }
        void *ws = NULL;
        phx_status st = px_cuda_alloc(ctx, bytes, &ws);
        if (st == PHX_ENOMEM) { /* a slower algorithm may need less */
            last = st;
            continue;
        }
        if (st != PHX_OK) return st;
        s = conv_call_run(h, p, dir, cand[i].algo, ws, bytes, a, b, beta, out);
        if (ws) px_cuda_release(ctx, ws); /* stream-ordered: reused only after this call's work */
        if (s == CUDNN_STATUS_SUCCESS) return px_cuda_launched(ctx->dev, kernel);
        last = dnn_error(s, ctx->dev, kernel, conv_call[dir], d);
        if (CUDNN_STATUS_CATEGORY(s) != CUDNN_STATUS_NOT_SUPPORTED) return last;
    }
    if (last != PHX_OK) return last;
    return phx_error(PHX_EUNSUPPORTED, "cuda:%d: %s: " CONV_FMT ": cuDNN offers no algorithm for it", ctx->dev, kernel,
                     CONV_ARGS(d));
}

/* Checks common to the three entry points; *empty <- 1 when there is no
 * convolution to run (no image or no output position). */
static phx_status conv_check(const char *kernel, const phx_conv2d_desc *d, phx_dtype dt, int *empty)
{
    phx_status st = px_check_window(kernel, d);
    if (st != PHX_OK) return st;
    if ((st = px_check_float(kernel, dt)) != PHX_OK) return st;
    *empty = d->n == 0 || d->oh == 0 || d->ow == 0;
    if (!*empty && (d->h == 0 || d->w == 0))
        return phx_error(PHX_EUNSUPPORTED, "%s: " CONV_FMT ": an empty input plane", kernel, CONV_ARGS(d));
    return PHX_OK;
}

/* y (n, k, hw) += bias[k] */
template <int DT> __global__ void k_conv_bias(int64_t total, int64_t k, int64_t hw, const float *bias, void *y)
{
    for (int64_t i = px_tid(); i < total; i += px_nthreads()) px_st<DT>(y, i, px_ld<DT>(y, i) + bias[(i / hw) % k]);
}

/* db[ch] += the sum of dy (n, k, hw) over n and hw; one block per channel. */
template <int DT> __global__ void k_conv_db(int64_t n, int64_t k, int64_t hw, const void *dy, float *db)
{
    __shared__ float sh[32];
    int64_t m = n * hw;
    for (int64_t ch = blockIdx.x; ch < k; ch += gridDim.x) {
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) s += px_ld<DT>(dy, px_chan_at(i, ch, k, hw));
        s = px_block_sumf(s, sh);
        if (threadIdx.x == 0) db[ch] += s;
    }
}

/* What every convolution slot does first: check the descriptor (*empty:
 * nothing to compute, nothing made), then the device context, its cuDNN
 * handle and the shape's plan (freed by the caller with plan_free). */
static phx_status conv_begin(int dev, const char *kernel, const phx_conv2d_desc *d, phx_dtype dt, int *empty,
                             px_cuda_ctx **ctx, cudnnHandle_t *h, conv_plan *p)
{
    phx_status st = conv_check(kernel, d, dt, empty);
    if (st != PHX_OK || *empty) return st;
    if ((st = px_cuda_ctx_get(dev, ctx)) != PHX_OK || (st = dnn_handle(*ctx, kernel, h)) != PHX_OK) return st;
    return plan_make(dev, kernel, d, dt, p);
}

extern "C" phx_status px_cuda_conv2d_forward(int dev, const phx_conv2d_desc *d, const void *x, const void *w,
                                             const float *bias, void *y, phx_dtype dt)
{
    const char *kernel = "conv2d_forward";
    int empty = 0;
    px_cuda_ctx *ctx;
    cudnnHandle_t h;
    conv_plan p;
    phx_status st = conv_begin(dev, kernel, d, dt, &empty, &ctx, &h, &p);
    if (st != PHX_OK || empty) return st;
    st = conv_exec(ctx, h, &p, CONV_FWD, kernel, d, x, w, 0.0f, y);
    plan_free(&p);
    if (st != PHX_OK || !bias) return st;
    int64_t hw = d->oh * d->ow, total = d->n * d->k * hw;
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH(kernel, dt, (k_conv_bias<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(total, d->k, hw, bias, y)));
    return px_cuda_launched(dev, "conv2d_forward (bias)");
}

extern "C" phx_status px_cuda_conv2d_backward_data(int dev, const phx_conv2d_desc *d, const void *dy, const void *w,
                                                   void *dx, phx_dtype dt)
{
    const char *kernel = "conv2d_backward_data";
    int empty = 0;
    phx_status st = conv_check(kernel, d, dt, &empty);
    if (st != PHX_OK) return st;
    px_cuda_ctx *ctx;
    if ((st = px_cuda_ctx_get(dev, &ctx)) != PHX_OK) return st;
    if (empty) { /* no output position: every dx is 0 */
        size_t bytes = (size_t)(d->n * d->c * d->h * d->w) * phx_dtype_size(dt);
        if (bytes == 0) return PHX_OK;
        return px_cuda_error(cudaMemsetAsync(dx, 0, bytes, ctx->stream), dev, "conv2d_backward_data (zero dx)");
    }
    cudnnHandle_t h;
    conv_plan p;
    if ((st = dnn_handle(ctx, kernel, &h)) != PHX_OK || (st = plan_make(dev, kernel, d, dt, &p)) != PHX_OK) return st;
    st = conv_exec(ctx, h, &p, CONV_BWD_DATA, kernel, d, w, dy, 0.0f, dx);
    plan_free(&p);
    return st;
}

extern "C" phx_status px_cuda_conv2d_backward_weight(int dev, const phx_conv2d_desc *d, const void *x, const void *dy,
                                                     float *dw, float *db, phx_dtype dt)
{
    const char *kernel = "conv2d_backward_weight";
    int empty = 0;
    px_cuda_ctx *ctx;
    cudnnHandle_t h;
    conv_plan p;
    phx_status st = conv_begin(dev, kernel, d, dt, &empty, &ctx, &h, &p);
    if (st != PHX_OK || empty) return st;
    int64_t nw = d->k * (d->c / d->groups) * d->kh * d->kw;
    if (dt == PHX_F32) {
        st = conv_exec(ctx, h, &p, CONV_BWD_FILTER, kernel, d, x, dy, 1.0f, dw);
    } else {
        void *tmp = NULL; /* dw in dt, then added to the f32 dw */
        st = px_cuda_alloc(ctx, (size_t)nw * phx_dtype_size(dt), &tmp);
        if (st == PHX_OK) st = conv_exec(ctx, h, &p, CONV_BWD_FILTER, kernel, d, x, dy, 0.0f, tmp);
        if (st == PHX_OK) st = px_cuda_axpby(dev, nw, 1.0f, tmp, dt, 1.0f, dw, PHX_F32);
        if (tmp) px_cuda_release(ctx, tmp);
    }
    plan_free(&p);
    if (st != PHX_OK || !db) return st;
    int64_t hw = d->oh * d->ow;
    unsigned grid = px_cuda_grid(ctx, d->k, 1, 16);
    int threads = d->n * hw >= PX_THREADS ? PX_THREADS : (int)((d->n * hw + 31) / 32 * 32);
    PX_FLOAT_DISPATCH(kernel, dt, (k_conv_db<DT><<<grid, threads, 0, ctx->stream>>>(d->n, d->k, hw, dy, db)));
    return px_cuda_launched(dev, "conv2d_backward_weight (bias)");
}
