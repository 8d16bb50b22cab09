/* The CUDA plugin's caching allocator, on the CPU: its bookkeeping is
 * CUDA-independent (raw allocation is a callback), so size classes,
 * per-stream reuse, statistics, the retry after emptying the cache, bad
 * releases and thread safety are checked here with a malloc-backed mock
 * that has a byte budget. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "plugins/device/cuda/caching-alloc.h"
#include "t/tap.h"

typedef struct mock {
    pthread_mutex_t mu;
    size_t budget; /* bytes the "device" holds */
    size_t used;
    long allocs, frees, live;
} mock;

static phx_status mock_alloc(void *ud, size_t bytes, void **ptr)
{
    mock *m = ud;
    pthread_mutex_lock(&m->mu);
    if (m->used + bytes > m->budget) {
        pthread_mutex_unlock(&m->mu);
        return phx_error(PHX_ENOMEM, "mock: out of memory");
    }
    /* store the size in front of the block so free can account for it */
    size_t *p = malloc(bytes + 16);
    if (!p) {
        pthread_mutex_unlock(&m->mu);
        return phx_error(PHX_ENOMEM, "mock: malloc");
    }
    p[0] = bytes;
    m->used += bytes;
    m->allocs++;
    m->live++;
    pthread_mutex_unlock(&m->mu);
    *ptr = (char *)p + 16;
    return PHX_OK;
}

static void mock_free(void *ud, void *ptr)
{
    mock *m = ud;
    size_t *p = (size_t *)((char *)ptr - 16);
    pthread_mutex_lock(&m->mu);
    m->used -= p[0];
    m->frees++;
    m->live--;
    pthread_mutex_unlock(&m->mu);
    free(p);
}

static px_cache *new_cache(mock *m, size_t budget)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->budget = budget;
    px_cache_ops ops = {mock_alloc, mock_free, m};
    return px_cache_new(&ops, "mock:0");
}

static void test_classes(void)
{
    /* by hand: 512-byte steps up to 1 MiB, then 8 steps per octave */
    is_int(px_cache_class(0), 0, "class(0) = 0 (no allocation)");
    is_int(px_cache_class(1), 512, "class(1) = 512");
    is_int(px_cache_class(512), 512, "class(512) = 512");
    is_int(px_cache_class(513), 1024, "class(513) = 1024");
    is_int(px_cache_class(1 << 20), 1 << 20, "class(1 MiB) = 1 MiB");
    is_int(px_cache_class((1 << 20) + 1), (1 << 20) + (1 << 17), "class(1 MiB + 1) = 1 MiB + 128 KiB");
    is_int(px_cache_class(3000000), 3145728, "class(3e6) = 12 * 256 KiB");
    is_int(px_cache_class((size_t)25 << 20), (size_t)26 << 20, "class(25 MiB) = 26 MiB (2 MiB steps in 16..32 MiB)");
    is_int(px_cache_class(SIZE_MAX), 0, "class(SIZE_MAX) = 0 (overflow)");
    /* every class covers the request with at most 12.5% (or 511 bytes) waste */
    int good = 1;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t b = (size_t)(x % ((uint64_t)1 << (1 + i % 36))) + 1;
        size_t c = px_cache_class(b);
        double waste = (double)(c - b);
        if (c < b || (c - b >= 512 && waste > 0.125 * (double)b) || (b > (1 << 20) && px_cache_class(c) != c)) good = 0;
    }
    ok(good, "100000 random sizes: class >= size, waste < 512 B or <= 12.5%%, classes are fixed points");
}

static void test_reuse(void)
{
    mock m;
    px_cache *c = new_cache(&m, (size_t)1 << 30);
    void *s1 = (void *)0x1, *s2 = (void *)0x2;
    void *a = NULL, *b = NULL, *d = NULL, *e = NULL;
    ok(px_cache_alloc(c, 1000, s1, &a) == PHX_OK && a, "alloc 1000 bytes");
    phx_device_memory_stats_v1 st;
    px_cache_stats(c, &st);
    is_int(st.in_use_bytes, 1024, "in use = class 1024");
    is_int(st.cached_bytes, 0, "nothing cached");
    ok(px_cache_release(c, a) == PHX_OK, "release");
    px_cache_stats(c, &st);
    is_int(st.in_use_bytes, 0, "in use 0 after release");
    is_int(st.cached_bytes, 1024, "1024 cached");
    ok(px_cache_alloc(c, 600, s1, &b) == PHX_OK && b == a, "same class, same stream: the cached block comes back");
    is_int(m.allocs, 1, "no second raw allocation");
    ok(px_cache_alloc(c, 1024, s2, &d) == PHX_OK && d && d != b, "another stream gets a fresh block");
    ok(px_cache_alloc(c, 2000, s1, &e) == PHX_OK && e && e != b, "another class gets a fresh block");
    is_int(m.allocs, 3, "three raw allocations");
    px_cache_stats(c, &st);
    is_int(st.in_use_bytes, 1024 + 1024 + 2048, "in use sums the classes");
    is_int(st.peak_bytes, 4096, "peak 4096");
    is_int(st.alloc_calls, 4, "4 requests served");
    px_cache_release(c, b);
    px_cache_release(c, d);
    px_cache_release(c, e);
    px_cache_stats(c, &st);
    is_int(st.peak_bytes, 4096, "peak stays after releases");
    is_int(st.cached_bytes, 4096, "all 4096 cached");

    /* bad releases change nothing */
    phx_status r = px_cache_release(c, b);
    is_int(r, PHX_EINVAL, "double release: PHX_EINVAL");
    like(phx_last_error(), "double free", "message says double free");
    int local;
    r = px_cache_release(c, &local);
    is_int(r, PHX_EINVAL, "foreign pointer: PHX_EINVAL");
    like(phx_last_error(), "did not hand out", "message says not ours");
    px_cache_stats(c, &st);
    is_int(st.cached_bytes, 4096, "stats unchanged by bad releases");
    ok(px_cache_release(c, NULL) == PHX_OK, "release(NULL) is a no-op");
    void *z = &local;
    ok(px_cache_alloc(c, 0, s1, &z) == PHX_OK && z == NULL, "alloc(0) gives NULL");

    /* steady state: the same requests again make no raw allocation */
    long before = m.allocs;
    for (int it = 0; it < 100; it++) {
        void *p[3];
        px_cache_alloc(c, 700, s1, &p[0]);
        px_cache_alloc(c, 1800, s1, &p[1]);
        px_cache_alloc(c, 900, s2, &p[2]);
        for (int i = 0; i < 3; i++) px_cache_release(c, p[i]);
    }
    is_int(m.allocs - before, 0, "100 steps of the same requests: no raw allocation");

    is_int(px_cache_empty(c), 4096, "empty frees the 4096 cached bytes");
    is_int(m.live, 0, "every raw block freed");
    px_cache_stats(c, &st);
    is_int(st.cached_bytes, 0, "cached 0 after empty");
    px_cache_free(c);
}

static void test_oom(void)
{
    mock m;
    px_cache *c = new_cache(&m, (size_t)4 << 20); /* a 4 MiB device */
    void *s = (void *)0x1, *a, *b, *d;
    ok(px_cache_alloc(c, 3 << 20, s, &a) == PHX_OK, "3 MiB on a 4 MiB device");
    px_cache_release(c, a);
    ok(px_cache_alloc(c, 2 << 20, s, &b) == PHX_OK, "2 MiB after 3 MiB cached: cache emptied, retried");
    is_int(m.frees, 1, "the cached 3 MiB block was freed for it");
    phx_device_memory_stats_v1 st;
    px_cache_stats(c, &st);
    is_int(st.cached_bytes, 0, "nothing cached after the retry");
    is_int(st.in_use_bytes, 2 << 20, "2 MiB in use");
    phx_status r = px_cache_alloc(c, 3 << 20, s, &d);
    is_int(r, PHX_ENOMEM, "3 MiB more: PHX_ENOMEM");
    like(phx_last_error(), "out of memory allocating 3145728 bytes", "message names the request");
    like(phx_last_error(), "mock: out of memory", "message carries the device's reason");
    px_cache_stats(c, &st);
    is_int(st.in_use_bytes, 2 << 20, "stats unchanged by the failure");
    px_cache_release(c, b);
    px_cache_free(c);
    is_int(m.live, 0, "free releases every block");
}

static void test_many(void)
{
    mock m;
    px_cache *c = new_cache(&m, (size_t)1 << 34);
    enum { N = 5000 };
    static void *p[N];
    int good = 1;
    for (int i = 0; i < N; i++)
        if (px_cache_alloc(c, (size_t)(i % 37 + 1) * 100, (void *)(uintptr_t)(i % 3 + 1), &p[i]) != PHX_OK) good = 0;
    ok(good, "5000 live blocks (the pointer table grows)");
    for (int i = 0; i < N; i += 2) px_cache_release(c, p[i]);
    for (int i = 1; i < N; i += 2) px_cache_release(c, p[i]);
    phx_device_memory_stats_v1 st;
    px_cache_stats(c, &st);
    is_int(st.in_use_bytes, 0, "all released");
    is_int(m.live, N, "all cached");
    long before = m.allocs;
    for (int i = 0; i < N; i++) px_cache_alloc(c, (size_t)(i % 37 + 1) * 100, (void *)(uintptr_t)(i % 3 + 1), &p[i]);
    is_int(m.allocs - before, 0, "the same 5000 requests again: all from the cache");
    px_cache_free(c);
    is_int(m.live, 0, "free releases in-use blocks too");
}

typedef struct targ {
    px_cache *c;
    int id;
    int bad;
} targ;

static void *worker(void *arg)
{
    targ *t = arg;
    void *stream = (void *)(uintptr_t)(t->id + 1);
    void *p[8];
    for (int it = 0; it < 2000; it++) {
        for (int i = 0; i < 8; i++) {
            if (px_cache_alloc(t->c, (size_t)(i + 1) * 1000 + (size_t)t->id, stream, &p[i]) != PHX_OK)
                t->bad = 1;
            else
                memset(p[i], t->id, 16);
        }
        for (int i = 0; i < 8; i++) {
            unsigned char *q = p[i];
            if (q[0] != t->id || q[15] != t->id) t->bad = 1; /* nobody else wrote here */
            if (px_cache_release(t->c, p[i]) != PHX_OK) t->bad = 1;
        }
    }
    return NULL;
}

static void test_threads(void)
{
    mock m;
    px_cache *c = new_cache(&m, (size_t)1 << 30);
    pthread_t th[4];
    targ a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (targ){c, i, 0};
        pthread_create(&th[i], NULL, worker, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad |= a[i].bad;
    }
    ok(!bad, "4 threads x 2000 rounds: every block private to its holder");
    phx_device_memory_stats_v1 st;
    px_cache_stats(c, &st);
    is_int(st.in_use_bytes, 0, "in use 0 after all threads");
    is_int(st.alloc_calls, 4 * 2000 * 8, "every request counted");
    is_int(m.allocs, 4 * 8, "one raw block per (thread stream, class)");
    px_cache_free(c);
}

int main(void)
{
    plan(56);
    test_classes();
    test_reuse();
    test_oom();
    test_many();
    test_threads();
    return done_testing();
}
