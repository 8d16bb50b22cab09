/* A device plugin for t/data/loader_device: host memory named "cuda" whose
 * copies on a stream of the caller's own (copy_h2d_async) are not made
 * when queued but when something waits for them (stream_wait_event on the
 * compute stream, event_synchronize), as a real copy engine would make
 * them later. A loader that hands out a batch before making the compute
 * stream wait, or refills a host buffer before its copy is done, delivers
 * wrong rows here. The compute stream is synchronous (the CPU's kernels). */
#include <stdlib.h>
#include <string.h>
#include "phalanx/plugin.h"
#include "phalanx/plugin/device_v1.h"

#define QMAX 256

typedef struct copy_op {
    void *dst;
    const void *src;
    size_t bytes;
} copy_op;

typedef struct astream {
    copy_op q[QMAX];
    int done, queued; /* q[done..queued) are pending */
} astream;

typedef struct aevent {
    astream *s; /* NULL: recorded on the compute stream (always complete) */
    int upto; /* the copies of s before this mark */
} aevent;

/* Read by the test through dlsym: copies queued and not yet made, the
 * streams alive, the host bytes pinned and not released. */
PHX_PLUGIN_EXPORT int async_dev_pending, async_dev_streams;
PHX_PLUGIN_EXPORT long async_dev_pinned;

static void run_upto(astream *s, int upto)
{
    for (; s->done < upto; s->done++) {
        copy_op *c = &s->q[s->done % QMAX];
        memcpy(c->dst, c->src, c->bytes);
        async_dev_pending--;
    }
}

static int dev_count(void)
{
    return 1;
}
static phx_status dev_alloc(int dev, size_t bytes, void **ptr)
{
    (void)dev;
    *ptr = malloc(bytes ? bytes : 1);
    return *ptr ? PHX_OK : phx_error(PHX_ENOMEM, "async device: out of memory");
}
static void dev_release(int dev, void *ptr)
{
    (void)dev;
    free(ptr);
}
static phx_status dev_copy(int dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    if (bytes) memmove(dst, src, bytes);
    return PHX_OK;
}
static phx_status dev_copy_d2d(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes)
{
    (void)dst_dev, (void)src_dev;
    if (bytes) memmove(dst, src, bytes);
    return PHX_OK;
}
static phx_status host_alloc(int dev, size_t bytes, void **ptr)
{
    (void)dev;
    size_t *p = malloc(sizeof(size_t) + (bytes ? bytes : 1));
    if (!p) return phx_error(PHX_ENOMEM, "async device: out of host memory");
    *p = bytes;
    async_dev_pinned += (long)bytes;
    *ptr = p + 1;
    return PHX_OK;
}
static void host_release(int dev, void *ptr)
{
    (void)dev;
    if (!ptr) return;
    size_t *p = (size_t *)ptr - 1;
    async_dev_pinned -= (long)*p;
    free(p);
}
static phx_status stream_create(int dev, void **stream)
{
    (void)dev;
    *stream = calloc(1, sizeof(astream));
    if (!*stream) return phx_error(PHX_ENOMEM, "async device: out of memory");
    async_dev_streams++;
    return PHX_OK;
}
static void stream_destroy(int dev, void *stream)
{
    (void)dev;
    astream *s = stream;
    if (!s) return;
    run_upto(s, s->queued);
    free(s);
    async_dev_streams--;
}
static phx_status copy_h2d_async(int dev, void *dst, const void *src, size_t bytes, void *stream)
{
    (void)dev;
    astream *s = stream;
    if (!s) return dev_copy(dev, dst, src, bytes);
    if (s->queued - s->done >= QMAX) return phx_error(PHX_EINTERNAL, "async device: more than %d copies pending", QMAX);
    s->q[s->queued++ % QMAX] = (copy_op){dst, src, bytes};
    async_dev_pending++;
    return PHX_OK;
}
static void *current_stream(int dev)
{
    (void)dev;
    return NULL; /* the synchronous compute stream */
}
static phx_status event_create(int dev, void **event)
{
    (void)dev;
    *event = calloc(1, sizeof(aevent));
    return *event ? PHX_OK : phx_error(PHX_ENOMEM, "async device: out of memory");
}
static phx_status event_record(void *event, void *stream)
{
    aevent *e = event;
    e->s = stream;
    e->upto = e->s ? e->s->queued : 0;
    return PHX_OK;
}
static phx_status event_synchronize(void *event)
{
    aevent *e = event;
    if (e->s) run_upto(e->s, e->upto);
    return PHX_OK;
}
static phx_status stream_wait_event(void *stream, void *event)
{
    /* The compute stream runs at once: it waits by making the copies now.
     * A copy stream waiting on the compute stream has nothing to wait for. */
    return stream ? PHX_OK : event_synchronize(event);
}
static int event_query(void *event)
{
    aevent *e = event;
    return !e->s || e->s->done >= e->upto;
}
static void event_destroy(void *event)
{
    free(event);
}

/* Filled by the probe, which runs before the core reads the table. */
static phx_kernels_v1 dev_kernels;

static const phx_device_v1 dev_vtable = {
    .kind = PHX_DEVICE_CUDA,
    .count = dev_count,
    .alloc = dev_alloc,
    .release = dev_release,
    .copy_h2d = dev_copy,
    .copy_d2h = dev_copy,
    .copy_d2d = dev_copy_d2d,
    .current_stream = current_stream,
    .event_create = event_create,
    .event_record = event_record,
    .stream_wait_event = stream_wait_event,
    .event_synchronize = event_synchronize,
    .event_query = event_query,
    .event_destroy = event_destroy,
    .kernels = &dev_kernels,
    .host_alloc = host_alloc,
    .host_release = host_release,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .copy_h2d_async = copy_h2d_async,
};

static int dev_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)ctx, (void)why, (void)len;
    const phx_device_v1 *cpu = phx_device_table(phx_cpu());
    if (!cpu) return -1;
    memcpy(&dev_kernels, cpu->kernels, sizeof dev_kernels);
    return 0;
}

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_DEVICE, "cuda", "1.1", "host memory named cuda whose stream copies run late (t/data/loader_device)",
    dev_probe, &dev_vtable);
