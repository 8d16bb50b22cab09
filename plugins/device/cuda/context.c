/* Per-device state (caching allocator, pool of idle contexts) and the
 * per-thread contexts of cuda-impl.h; CUDA errors into phx_status. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "caching-alloc.h"
#include "cuda-impl.h"

typedef struct px_cuda_dev {
    px_cache *cache;
    pthread_mutex_t mu;
    px_cuda_ctx *pool; /* contexts of exited threads */
    int sm_count;
} px_cuda_dev;

static pthread_once_t px_once = PTHREAD_ONCE_INIT;
static int px_ndev; /* devices seen at first use */
static cudaError_t px_init_err; /* why there are none */
static px_cuda_dev *px_devs; /* px_ndev entries, for the life of the process */
static pthread_key_t px_tls_key;

/* The calling thread's contexts, one slot per device. */
static __thread px_cuda_ctx **px_tls;

phx_status px_cuda_error(cudaError_t e, int dev, const char *what)
{
    if (e == cudaSuccess) return PHX_OK;
    (void)cudaGetLastError(); /* clears the error unless it is sticky */
    phx_status st = e == cudaErrorMemoryAllocation ? PHX_ENOMEM : PHX_EDEVICE;
    return phx_error(st, "cuda:%d: %s: %s (%s)", dev, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

phx_status px_cuda_launched(int dev, const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return PHX_OK;
    return px_cuda_error(e, dev, kernel);
}

static phx_status raw_alloc(void *ud, size_t bytes, void **ptr)
{
    int dev = (int)(intptr_t)ud;
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaSuccess) return PHX_OK;
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc(%zu)", bytes);
    return px_cuda_error(e, dev, what);
}

static void raw_free(void *ud, void *ptr)
{
    int dev = (int)(intptr_t)ud;
    int cur = -1;
    cudaGetDevice(&cur);
    if (cur != dev) cudaSetDevice(dev);
    cudaFree(ptr); /* synchronises: queued work using it has finished */
    if (cur != dev && cur >= 0) cudaSetDevice(cur);
}

/* Thread exit: the thread's contexts go to their devices' pools. */
static void tls_release(void *arg)
{
    px_cuda_ctx **slots = arg;
    for (int d = 0; d < px_ndev; d++) {
        px_cuda_ctx *c = slots[d];
        if (!c) continue;
        pthread_mutex_lock(&px_devs[d].mu);
        c->next = px_devs[d].pool;
        px_devs[d].pool = c;
        pthread_mutex_unlock(&px_devs[d].mu);
    }
    free(slots);
}

static void init_once(void)
{
    int n = 0;
    px_init_err = cudaGetDeviceCount(&n);
    if (px_init_err != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    px_devs = calloc((size_t)n, sizeof *px_devs);
    if (!px_devs || pthread_key_create(&px_tls_key, tls_release) != 0) {
        free(px_devs);
        px_devs = NULL;
        px_init_err = cudaErrorMemoryAllocation;
        return;
    }
    for (int d = 0; d < n; d++) {
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", d);
        px_cache_ops ops = {raw_alloc, raw_free, (void *)(intptr_t)d};
        px_devs[d].cache = px_cache_new(&ops, name);
        pthread_mutex_init(&px_devs[d].mu, NULL);
        if (cudaDeviceGetAttribute(&px_devs[d].sm_count, cudaDevAttrMultiProcessorCount, d) != cudaSuccess)
            px_devs[d].sm_count = 1;
        if (!px_devs[d].cache) {
            px_init_err = cudaErrorMemoryAllocation;
            return;
        }
    }
    px_ndev = n;
}

static phx_status check_dev(int dev)
{
    pthread_once(&px_once, init_once);
    if (px_ndev == 0) {
        if (px_init_err != cudaSuccess && px_init_err != cudaErrorNoDevice)
            return phx_error(PHX_ENOTFOUND, "cuda:%d: no CUDA device (cudaGetDeviceCount: %s)", dev,
                             cudaGetErrorString(px_init_err));
        return phx_error(PHX_ENOTFOUND, "cuda:%d: no CUDA device", dev);
    }
    if (dev < 0 || dev >= px_ndev)
        return phx_error(PHX_EINVAL, "cuda:%d: no such device, this process sees %d (cuda:0..cuda:%d)", dev, px_ndev,
                         px_ndev - 1);
    return PHX_OK;
}

static phx_status ctx_new(int dev, px_cuda_ctx **out)
{
    pthread_mutex_lock(&px_devs[dev].mu);
    px_cuda_ctx *c = px_devs[dev].pool;
    if (c) px_devs[dev].pool = c->next;
    pthread_mutex_unlock(&px_devs[dev].mu);
    if (c) {
        c->next = NULL;
        *out = c;
        return PHX_OK;
    }
    c = calloc(1, sizeof *c);
    if (!c) return phx_error(PHX_ENOMEM, "cuda:%d: out of host memory for a thread context", dev);
    c->dev = dev;
    c->sm_count = px_devs[dev].sm_count;
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(c);
        return px_cuda_error(e, dev, "cudaStreamCreate");
    }
    int made = 0;
    e = cudaEventCreateWithFlags(&c->order, cudaEventDisableTiming);
    if (e == cudaSuccess) made++;
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        if ((e = cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming)) == cudaSuccess) made++;
    if (e != cudaSuccess) {
        phx_status st = px_cuda_error(e, dev, "cudaEventCreate");
        if (made > 0) cudaEventDestroy(c->order);
        for (int i = 0; i + 1 < made; i++) cudaEventDestroy(c->stage_done[i]);
        cudaStreamDestroy(c->stream);
        free(c);
        return st;
    }
    *out = c;
    return PHX_OK;
}

phx_status px_cuda_ctx_get(int dev, px_cuda_ctx **out)
{
    phx_status st = check_dev(dev);
    if (st != PHX_OK) return st;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "cudaSetDevice");
    if (!px_tls) {
        px_tls = calloc((size_t)px_ndev, sizeof *px_tls);
        if (!px_tls) return phx_error(PHX_ENOMEM, "cuda:%d: out of host memory for thread state", dev);
        pthread_setspecific(px_tls_key, px_tls);
    }
    if (!px_tls[dev]) {
        st = ctx_new(dev, &px_tls[dev]);
        if (st != PHX_OK) return st;
    }
    *out = px_tls[dev];
    return PHX_OK;
}

phx_status px_cuda_alloc(px_cuda_ctx *ctx, size_t bytes, void **ptr)
{
    return px_cache_alloc(px_devs[ctx->dev].cache, bytes, ctx->stream, ptr);
}

void px_cuda_release(px_cuda_ctx *ctx, void *ptr)
{
    if (px_cache_release(px_devs[ctx->dev].cache, ptr) != PHX_OK) fprintf(stderr, "phalanx: %s\n", phx_last_error());
}

phx_status px_cuda_memory_stats(int dev, phx_device_memory_stats_v1 *out)
{
    phx_status st = check_dev(dev);
    if (st != PHX_OK) return st;
    px_cache_stats(px_devs[dev].cache, out);
    return PHX_OK;
}

phx_status px_cuda_scratch(px_cuda_ctx *ctx, size_t bytes, void **ptr)
{
    if (bytes > ctx->scratch_bytes) {
        /* stream-ordered: kernels queued on the old scratch finish first */
        void *p = NULL;
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        phx_status st = px_cuda_alloc(ctx, want, &p);
        if (st != PHX_OK) return st;
        if (ctx->scratch) px_cuda_release(ctx, ctx->scratch);
        ctx->scratch = p;
        ctx->scratch_bytes = want;
    }
    *ptr = ctx->scratch;
    return PHX_OK;
}

phx_status px_cuda_host_small(px_cuda_ctx *ctx, void **ptr)
{
    if (!ctx->host_small) {
        cudaError_t e = cudaHostAlloc(&ctx->host_small, PX_CUDA_HOST_SMALL, cudaHostAllocDefault);
        if (e != cudaSuccess) {
            ctx->host_small = NULL;
            return px_cuda_error(e, ctx->dev, "cudaHostAlloc (result buffer)");
        }
    }
    *ptr = ctx->host_small;
    return PHX_OK;
}

unsigned px_cuda_grid(const px_cuda_ctx *ctx, int64_t n, int per_block, int waves)
{
    int64_t blocks = (n + per_block - 1) / per_block;
    int64_t cap = (int64_t)ctx->sm_count * waves;
    if (blocks > cap) blocks = cap;
    return blocks < 1 ? 1u : (unsigned)blocks;
}
