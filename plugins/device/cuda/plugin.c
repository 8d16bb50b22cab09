/* phx-device-cuda.so: the CUDA device (phx_device_v1) — enumeration,
 * memory through the caching allocator, the per-thread compute streams,
 * events, host and peer copies, synchronisation — and its descriptor.
 * Kernels: plugins/device/cuda/kernels. doc/guide/gpu.md. */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda-impl.h"
#include "visible.h"

/* Fork-safe (no CUDA initialisation): the loader and phx_device_count
 * call this in processes that may fork ranks afterwards. */
static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int visible_count;
static void count_init(void)
{
    visible_count = px_cuda_visible_count(NULL, 0);
}

static int cuda_count(void)
{
    pthread_once(&count_once, count_init);
    return visible_count;
}

static phx_status cuda_alloc(int dev, size_t bytes, void **ptr)
{
    if (!ptr) return phx_error(PHX_EINVAL, "cuda: alloc: ptr is NULL");
    *ptr = NULL;
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st != PHX_OK) return st;
    return px_cuda_alloc(ctx, bytes, ptr);
}

static void cuda_release(int dev, void *ptr)
{
    px_cuda_ctx *ctx;
    if (!ptr || px_cuda_ctx_get(dev, &ctx) != PHX_OK) return;
    px_cuda_release(ctx, ptr);
}

static phx_status cuda_memory_stats(int dev, phx_device_memory_stats_v1 *out)
{
    if (!out) return phx_error(PHX_EINVAL, "cuda: memory_stats: out is NULL");
    return px_cuda_memory_stats(dev, out);
}

/* Host -> device through the two pinned buffers: the host memcpy of a
 * chunk overlaps the DMA of the previous one. Returns once the source has
 * been read (the caller may reuse it); the device copy completes in
 * stream order. */
static phx_status stage_ready(px_cuda_ctx *ctx)
{
    if (ctx->stage[0]) return PHX_OK;
    for (int i = 0; i < 2; i++) {
        cudaError_t e = cudaHostAlloc(&ctx->stage[i], PX_CUDA_STAGE_BYTES, cudaHostAllocDefault);
        if (e != cudaSuccess) {
            if (i == 1) cudaFreeHost(ctx->stage[0]);
            ctx->stage[0] = ctx->stage[1] = NULL;
            return px_cuda_error(e, ctx->dev, "cudaHostAlloc (staging buffers)");
        }
    }
    return PHX_OK;
}

static phx_status cuda_copy_h2d(int dev, void *dst, const void *src_host, size_t bytes)
{
    if (bytes == 0) return PHX_OK;
    if (!dst || !src_host) return phx_error(PHX_EINVAL, "cuda:%d: copy_h2d: NULL pointer", dev);
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st == PHX_OK) st = stage_ready(ctx);
    if (st != PHX_OK) return st;
    for (size_t off = 0; off < bytes; off += PX_CUDA_STAGE_BYTES) {
        size_t n = bytes - off < PX_CUDA_STAGE_BYTES ? bytes - off : PX_CUDA_STAGE_BYTES;
        int s = ctx->stage_next;
        cudaError_t e = cudaEventSynchronize(ctx->stage_done[s]);
        if (e != cudaSuccess) return px_cuda_error(e, dev, "copy_h2d: waiting for the staging buffer");
        memcpy(ctx->stage[s], (const char *)src_host + off, n);
        e = cudaMemcpyAsync((char *)dst + off, ctx->stage[s], n, cudaMemcpyHostToDevice, ctx->stream);
        if (e == cudaSuccess) e = cudaEventRecord(ctx->stage_done[s], ctx->stream);
        if (e != cudaSuccess) return px_cuda_error(e, dev, "copy_h2d: cudaMemcpyAsync");
        ctx->stage_next = s ^ 1;
    }
    return PHX_OK;
}

/* Device -> host, synchronous: chunk i+1's DMA runs while chunk i is
 * copied out of its pinned buffer. */
static phx_status cuda_copy_d2h(int dev, void *dst_host, const void *src, size_t bytes)
{
    if (bytes == 0) return PHX_OK;
    if (!dst_host || !src) return phx_error(PHX_EINVAL, "cuda:%d: copy_d2h: NULL pointer", dev);
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st == PHX_OK) st = stage_ready(ctx);
    if (st != PHX_OK) return st;
    size_t nchunks = (bytes + PX_CUDA_STAGE_BYTES - 1) / PX_CUDA_STAGE_BYTES;
    cudaError_t e = cudaSuccess;
    /* a pending host-to-device copy may still read either buffer */
    for (int s = 0; s < 2 && e == cudaSuccess; s++) e = cudaEventSynchronize(ctx->stage_done[s]);
    for (size_t i = 0; i <= nchunks && e == cudaSuccess; i++) {
        if (i < nchunks) { /* queue chunk i */
            size_t off = i * PX_CUDA_STAGE_BYTES;
            size_t n = bytes - off < PX_CUDA_STAGE_BYTES ? bytes - off : PX_CUDA_STAGE_BYTES;
            e = cudaMemcpyAsync(ctx->stage[i & 1], (const char *)src + off, n, cudaMemcpyDeviceToHost, ctx->stream);
            if (e == cudaSuccess) e = cudaEventRecord(ctx->stage_done[i & 1], ctx->stream);
        }
        if (i > 0 && e == cudaSuccess) { /* drain chunk i-1 */
            size_t j = i - 1, off = j * PX_CUDA_STAGE_BYTES;
            size_t n = bytes - off < PX_CUDA_STAGE_BYTES ? bytes - off : PX_CUDA_STAGE_BYTES;
            e = cudaEventSynchronize(ctx->stage_done[j & 1]);
            if (e == cudaSuccess) memcpy((char *)dst_host + off, ctx->stage[j & 1], n);
        }
    }
    if (e != cudaSuccess) return px_cuda_error(e, dev, "copy_d2h");
    return PHX_OK;
}

/* Same device: one async copy on the thread's stream. Across devices: the
 * destination's stream waits for the source's queued work, copies, and
 * the source's stream waits for the copy before touching src again. */
static phx_status cuda_copy_d2d(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes)
{
    if (bytes == 0) return PHX_OK;
    if (!dst || !src) return phx_error(PHX_EINVAL, "cuda: copy_d2d: NULL pointer");
    px_cuda_ctx *sc, *dc;
    phx_status st = px_cuda_ctx_get(src_dev, &sc);
    if (st == PHX_OK) st = px_cuda_ctx_get(dst_dev, &dc);
    if (st != PHX_OK) return st;
    cudaError_t e;
    if (src_dev == dst_dev) {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dc->stream);
        return e == cudaSuccess ? PHX_OK : px_cuda_error(e, dst_dev, "copy_d2d: cudaMemcpyAsync");
    }
    cudaSetDevice(src_dev);
    e = cudaEventRecord(sc->order, sc->stream);
    if (e == cudaSuccess) {
        cudaSetDevice(dst_dev);
        e = cudaStreamWaitEvent(dc->stream, sc->order, 0);
    }
    if (e == cudaSuccess) e = cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, dc->stream);
    if (e == cudaSuccess) e = cudaEventRecord(dc->order, dc->stream);
    if (e == cudaSuccess) {
        cudaSetDevice(src_dev);
        e = cudaStreamWaitEvent(sc->stream, dc->order, 0);
        cudaSetDevice(dst_dev);
    }
    if (e != cudaSuccess) {
        char what[64];
        snprintf(what, sizeof what, "copy_d2d from cuda:%d", src_dev);
        return px_cuda_error(e, dst_dev, what);
    }
    return PHX_OK;
}

static phx_status cuda_synchronize(int dev)
{
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st != PHX_OK) return st;
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? PHX_OK : px_cuda_error(e, dev, "cudaDeviceSynchronize");
}

static void *cuda_current_stream(int dev)
{
    px_cuda_ctx *ctx;
    return px_cuda_ctx_get(dev, &ctx) == PHX_OK ? (void *)ctx->stream : NULL;
}

/* An event remembers its device: recording on NULL means that device's
 * current stream for the calling thread. */
typedef struct px_cuda_event {
    cudaEvent_t ev;
    int dev;
} px_cuda_event;

static phx_status cuda_event_create(int dev, void **event)
{
    if (!event) return phx_error(PHX_EINVAL, "cuda:%d: event_create: event is NULL", dev);
    *event = NULL;
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(dev, &ctx);
    if (st != PHX_OK) return st;
    px_cuda_event *e = malloc(sizeof *e);
    if (!e) return phx_error(PHX_ENOMEM, "cuda:%d: event_create: out of host memory", dev);
    e->dev = dev;
    cudaError_t ce = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        free(e);
        return px_cuda_error(ce, dev, "cudaEventCreate");
    }
    *event = e;
    return PHX_OK;
}

static phx_status resolve_stream(const px_cuda_event *e, void *stream, cudaStream_t *out)
{
    px_cuda_ctx *ctx;
    phx_status st = px_cuda_ctx_get(e->dev, &ctx); /* also makes e->dev current */
    if (st != PHX_OK) return st;
    *out = stream ? (cudaStream_t)stream : ctx->stream;
    return PHX_OK;
}

static phx_status cuda_event_record(void *event, void *stream)
{
    px_cuda_event *e = event;
    if (!e) return phx_error(PHX_EINVAL, "cuda: event_record: event is NULL");
    cudaStream_t s;
    phx_status st = resolve_stream(e, stream, &s);
    if (st != PHX_OK) return st;
    cudaError_t ce = cudaEventRecord(e->ev, s);
    return ce == cudaSuccess ? PHX_OK : px_cuda_error(ce, e->dev, "cudaEventRecord");
}

static phx_status cuda_stream_wait_event(void *stream, void *event)
{
    px_cuda_event *e = event;
    if (!e) return phx_error(PHX_EINVAL, "cuda: stream_wait_event: event is NULL");
    cudaStream_t s;
    phx_status st = resolve_stream(e, stream, &s);
    if (st != PHX_OK) return st;
    cudaError_t ce = cudaStreamWaitEvent(s, e->ev, 0);
    return ce == cudaSuccess ? PHX_OK : px_cuda_error(ce, e->dev, "cudaStreamWaitEvent");
}

static phx_status cuda_event_synchronize(void *event)
{
    px_cuda_event *e = event;
    if (!e) return phx_error(PHX_EINVAL, "cuda: event_synchronize: event is NULL");
    cudaError_t ce = cudaEventSynchronize(e->ev);
    return ce == cudaSuccess ? PHX_OK : px_cuda_error(ce, e->dev, "cudaEventSynchronize");
}

static int cuda_event_query(void *event)
{
    px_cuda_event *e = event;
    if (!e) return phx_error(PHX_EINVAL, "cuda: event_query: event is NULL");
    cudaError_t ce = cudaEventQuery(e->ev);
    if (ce == cudaSuccess) return 1;
    if (ce == cudaErrorNotReady) return 0;
    return px_cuda_error(ce, e->dev, "cudaEventQuery");
}

static void cuda_event_destroy(void *event)
{
    px_cuda_event *e = event;
    if (!e) return;
    cudaEventDestroy(e->ev);
    free(e);
}

static const phx_device_v1 cuda_device = {
    .kind = PHX_DEVICE_CUDA,
    .count = cuda_count,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .memory_stats = cuda_memory_stats,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .synchronize = cuda_synchronize,
    .current_stream = cuda_current_stream,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .event_destroy = cuda_event_destroy,
    .kernels = &px_cuda_kernels,
    .host_alloc = px_cuda_host_alloc,
    .host_release = px_cuda_host_release,
    .stream_create = px_cuda_stream_create,
    .stream_destroy = px_cuda_stream_destroy,
    .copy_h2d_async = px_cuda_copy_h2d_async,
};

/* Usable when the runtime sees a device; the reason otherwise starts
 * with "no CUDA device" so phx-info reads "no device". */
static int cuda_probe(const phx_probe_ctx *ctx, char *why, size_t why_len)
{
    (void)ctx;
    return px_cuda_visible_count(why, why_len) > 0 ? 100 : -1;
}

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_DEVICE, "cuda", PACKAGE_VERSION,
    "NVIDIA GPUs: caching allocator, per-thread streams, CUDA kernels, cuBLAS", cuda_probe, &cuda_device);
