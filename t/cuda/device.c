/* The cuda device itself: the caching allocator's statistics and reuse on
 * real device memory, out-of-memory as an error that leaves the device
 * usable, host copies through the pinned staging buffers (sizes around
 * the chunk size), device-to-device and peer copies, events and stream
 * ordering, one stream per thread, tensors on cuda through the public API,
 * and no host allocation by libphalanx in a loop of device ops. Skips
 * without a CUDA device. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

static const phx_device_v1 *G;

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

static void test_alloc(void)
{
    phx_device_memory_stats_v1 s0, s1, s2;
    ok(G->memory_stats(0, &s0) == PHX_OK, "memory_stats");
    void *a = NULL, *b = NULL, *c = NULL;
    ok(G->alloc(0, 1000, &a) == PHX_OK && a, "alloc 1000 bytes");
    ok(((uintptr_t)a & 255) == 0, "256-byte aligned");
    ok(G->alloc(0, (size_t)3 << 20, &b) == PHX_OK && b, "alloc 3 MiB");
    G->memory_stats(0, &s1);
    is_int(s1.in_use_bytes - s0.in_use_bytes, 1024 + ((size_t)3 << 20), "in use grows by the two size classes");
    G->release(0, a);
    G->release(0, b);
    G->memory_stats(0, &s2);
    is_int(s2.in_use_bytes, s0.in_use_bytes, "in use back after release");
    is_int(s2.cached_bytes - s0.cached_bytes, 1024 + ((size_t)3 << 20), "released blocks are cached");
    ok(s2.peak_bytes >= s1.in_use_bytes, "peak keeps the high-water mark");
    ok(G->alloc(0, 3000000, &c) == PHX_OK && c == b, "a request of the same class gets the cached block back");
    G->release(0, c);

    void *huge = (void *)1;
    phx_status st = G->alloc(0, (size_t)1 << 50, &huge);
    is_int(st, PHX_ENOMEM, "alloc 1 PiB: PHX_ENOMEM");
    like(phx_last_error(), "out of memory", "message says out of memory");
    ok(huge == NULL, "*ptr NULL after the failure");
    void *after = NULL;
    ok(G->alloc(0, 4096, &after) == PHX_OK && after, "the device still allocates afterwards");
    G->release(0, after);
    is_int(G->alloc(G->count(), 16, &after), PHX_EINVAL, "a device index past the count: PHX_EINVAL");
    like(phx_last_error(), "no such device", "message says no such device");
}

static void test_copies(void)
{
    size_t sizes[] = {1, 4099, ((size_t)4 << 20) - 1, ((size_t)4 << 20) + 3, (size_t)20 << 20};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        unsigned char *h = malloc(n), *back = malloc(n), *back2 = malloc(n);
        fill_pattern(h, n, (unsigned)si);
        memset(back, 0, n);
        memset(back2, 0, n);
        void *d = NULL, *d2 = NULL;
        G->alloc(0, n, &d);
        G->alloc(0, n, &d2);
        int good = G->copy_h2d(0, d, h, n) == PHX_OK;
        memset(h + n / 2, 0, n - n / 2); /* the source may be reused at once */
        good = good && G->copy_d2d(0, d2, 0, d, n) == PHX_OK && G->copy_d2h(0, back, d2, n) == PHX_OK;
        fill_pattern(h, n, (unsigned)si);
        ok(good && memcmp(back, h, n) == 0, "%zu bytes: host -> device -> device -> host intact", n);
        G->release(0, d);
        G->release(0, d2);
        free(h), free(back), free(back2);
    }
    ok(G->copy_h2d(0, NULL, "x", 0) == PHX_OK, "a zero-byte copy is a no-op");
    if (G->count() >= 2) {
        size_t n = (size_t)5 << 20;
        unsigned char *h = malloc(n), *back = malloc(n);
        fill_pattern(h, n, 99);
        void *d0 = NULL, *d1 = NULL;
        G->alloc(0, n, &d0);
        G->alloc(1, n, &d1);
        int good = G->copy_h2d(0, d0, h, n) == PHX_OK && G->copy_d2d(1, d1, 0, d0, n) == PHX_OK &&
            G->copy_d2h(1, back, d1, n) == PHX_OK;
        ok(good && memcmp(back, h, n) == 0, "peer copy cuda:0 -> cuda:1 intact");
        G->release(0, d0);
        G->release(1, d1);
        free(h), free(back);
    } else {
        skip(1, "one CUDA device: no peer copy");
    }
}

static void test_events(void)
{
    void *ev = NULL;
    ok(G->event_create(0, &ev) == PHX_OK && ev, "event_create");
    size_t n = (size_t)64 << 20;
    void *d = NULL;
    G->alloc(0, n, &d);
    G->kernels->fill(0, d, PHX_F32, (int64_t)(n / 4), 2.0);
    ok(G->event_record(ev, NULL) == PHX_OK, "event_record on the current stream");
    ok(G->event_synchronize(ev) == PHX_OK, "event_synchronize");
    is_int(G->event_query(ev), 1, "event_query: done after synchronize");
    /* ordering through stream_wait_event: fill on this thread's stream,
     * reduce after waiting on the event */
    G->kernels->fill(0, d, PHX_F32, (int64_t)(n / 4), 3.0);
    G->event_record(ev, G->current_stream(0));
    ok(G->stream_wait_event(G->current_stream(0), ev) == PHX_OK, "stream_wait_event");
    double sum = 0;
    G->kernels->reduce(0, PHX_SUM, (int64_t)(n / 4), d, PHX_F32, &sum);
    is_close(sum, 3.0 * (double)(n / 4), 0, "the reduce after the event sees the second fill");
    G->event_destroy(ev);
    G->event_destroy(NULL);
    G->release(0, d);
    ok(G->synchronize(0) == PHX_OK, "synchronize");
}

typedef struct targ {
    void *stream;
    int good;
    pthread_barrier_t *bar;
} targ;

static void *thread_main(void *arg)
{
    targ *t = arg;
    t->stream = G->current_stream(0);
    size_t n = (size_t)3 << 20;
    unsigned char *h = malloc(n), *back = malloc(n);
    fill_pattern(h, n, (unsigned)(uintptr_t)t);
    void *d = NULL;
    t->good = G->alloc(0, n, &d) == PHX_OK && G->copy_h2d(0, d, h, n) == PHX_OK &&
        G->copy_d2h(0, back, d, n) == PHX_OK && memcmp(h, back, n) == 0 && t->stream == G->current_stream(0);
    G->release(0, d);
    free(h), free(back);
    if (t->bar) pthread_barrier_wait(t->bar); /* all four alive at once */
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[4];
    targ a[4];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 4);
    for (int i = 0; i < 4; i++) {
        a[i].good = 0;
        a[i].bar = &bar;
        pthread_create(&th[i], NULL, thread_main, &a[i]);
    }
    int good = 1, distinct = 1;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        good &= a[i].good;
    }
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) distinct &= a[i].stream != a[j].stream;
    ok(good, "4 threads copy through their own staging buffers intact");
    ok(distinct && a[0].stream != G->current_stream(0), "each live thread has its own stream");
    /* a new thread after those exited reuses a pooled context */
    pthread_barrier_destroy(&bar);
    targ b = {0, 0, NULL};
    pthread_create(&th[0], NULL, thread_main, &b);
    pthread_join(th[0], NULL);
    int reused = 0;
    for (int i = 0; i < 4; i++) reused |= b.stream == a[i].stream;
    ok(b.good && reused, "a later thread takes a pooled stream");
}

static void test_tensors(void)
{
    phx_device cu = {PHX_DEVICE_CUDA, 0};
    int64_t shape[2] = {64, 33};
    phx_tensor *t = phx_tensor_new(PHX_F32, 2, shape, cu), *h = phx_tensor_new(PHX_F32, 2, shape, phx_cpu());
    float v[64 * 33];
    for (int i = 0; i < 64 * 33; i++) v[i] = (float)i - 1000.f;
    int good = t && h && phx_tensor_from_host(h, v) == PHX_OK && phx_tensor_copy(t, h) == PHX_OK;
    double s = 0;
    good = good && phx_tensor_reduce(t, PHX_SUM, &s) == PHX_OK;
    double want = 0;
    for (int i = 0; i < 64 * 33; i++) want += v[i];
    ok(good && s == want, "a cuda tensor: copied from the cpu and summed (%g, want %g)", s, want);
    uint64_t before = phx_alloc_count();
    for (int i = 0; i < 100; i++) {
        phx_tensor_axpby(0.5f, t, 0.5f, t);
        phx_tensor_fill(t, 1.0);
    }
    phx_device_synchronize(cu);
    is_int(phx_alloc_count() - before, 0, "100 rounds of device ops: no host allocation in libphalanx");
    phx_tensor_free(t);
    phx_tensor_free(h);
}

/* The loader on the GPU: pinned batches, the next one's copy on the
 * loader's stream while a kernel reads the current one. Each batch's
 * device sum equals the CPU loader's batch, over two epochs. */
static void test_loader(void)
{
    int64_t n = 1000, d = 4096;
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, (int64_t[]){n, d}, phx_cpu());
    float *xv = x ? phx_tensor_data(x) : NULL;
    for (int64_t i = 0; xv && i < n * d; i++) xv[i] = (float)(i % 977) - 400.f;
    phx_dataset *ds = x ? phx_dataset_tensors(&x, 1) : NULL;
    phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts), .batch = 64, .shuffle = true, .seed = 5, .workers = 2};
    phx_loader *cpu = ds ? phx_loader_new_opts(ds, &o) : NULL;
    o.device = (phx_device){PHX_DEVICE_CUDA, 0};
    phx_loader *gpu = ds ? phx_loader_new_opts(ds, &o) : NULL;
    ok(cpu && gpu, "a loader on cuda:0 (%s)", gpu ? "ok" : phx_last_error());
    int batches = 0, same = 1;
    for (int e = 0; cpu && gpu && e < 2; e++) {
        phx_tensor *a, *b;
        int ra, rb;
        while ((ra = phx_loader_next_batch(cpu, &a, 1)) == 1 && (rb = phx_loader_next_batch(gpu, &b, 1)) == 1) {
            double sa = 0, sb = 0;
            phx_tensor_reduce(a, PHX_SUM, &sa);
            /* The GPU sums in another order: a bound, far below what a
             * batch of other rows would change. */
            if (phx_tensor_device(b).kind != PHX_DEVICE_CUDA || phx_tensor_reduce(b, PHX_SUM, &sb) != PHX_OK ||
                fabs(sa - sb) > 1e-5 * (fabs(sa) + 1)) {
                if (same) diag("epoch %d batch %d: cpu sum %g, cuda sum %g (%s)", e, batches, sa, sb, phx_last_error());
                same = 0;
            }
            batches++;
        }
        if (phx_loader_next_batch(gpu, &b, 1) != 0) same = 0; /* the end of its epoch too */
    }
    ok(same && batches == 2 * 16, "two epochs of cuda batches sum as the cpu loader's (%d batches)", batches);
    phx_loader_free(gpu);
    phx_loader_free(cpu);
    phx_dataset_free(ds);
    phx_tensor_free(x);
}

int main(void)
{
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) skip_all("no CUDA device");
    G = phx_device_table((phx_device){PHX_DEVICE_CUDA, 0});
    if (!G) skip_all("no CUDA device table");
    test_alloc();
    test_copies();
    test_events();
    test_threads();
    test_tensors();
    test_loader();
    return done_testing();
}
