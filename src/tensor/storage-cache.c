/* A cache of CPU storages for the results of tensor operations and the
 * buffers replacing modules' kept outputs (px_buf_get): a storage whose
 * last handle goes waits here for the next one of the same byte size,
 * so a training step that makes the same intermediates every time
 * allocates nothing once warm (the CUDA device has its own caching
 * allocator). Bounded: past PX_CACHE_LIMIT bytes storages are released. */
#include "config.h"
#include <pthread.h>
#include "src/base/util.h"
#include "src/tensor/tensor-impl.h"

#define PX_CACHE_BUCKETS 512
#define PX_CACHE_LIMIT ((size_t)2 << 30)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static px_storage *buckets[PX_CACHE_BUCKETS]; /* linked through cache_next */
static size_t cached; /* bytes held */

static size_t bucket(size_t bytes)
{
    return (bytes / 64 * 2654435761u) % PX_CACHE_BUCKETS;
}

px_storage *px_storage_cache_take(size_t bytes)
{
    pthread_mutex_lock(&lock);
    px_storage **p = &buckets[bucket(bytes)];
    while (*p && (*p)->bytes != bytes) p = &(*p)->cache_next;
    px_storage *s = *p;
    if (s) {
        *p = s->cache_next;
        cached -= s->bytes;
    }
    pthread_mutex_unlock(&lock);
    return s;
}

bool px_storage_cache_put(px_storage *s)
{
    pthread_mutex_lock(&lock);
    bool keep = cached + s->bytes <= PX_CACHE_LIMIT;
    if (keep) {
        px_storage **b = &buckets[bucket(s->bytes)];
        s->cache_next = *b;
        *b = s;
        cached += s->bytes;
    }
    pthread_mutex_unlock(&lock);
    return keep;
}

size_t px_storage_cache_bytes(void)
{
    pthread_mutex_lock(&lock);
    size_t b = cached;
    pthread_mutex_unlock(&lock);
    return b;
}

px_storage *px_storage_cache_drain(void)
{
    pthread_mutex_lock(&lock);
    px_storage *all = NULL;
    for (int b = 0; b < PX_CACHE_BUCKETS; b++)
        while (buckets[b]) {
            px_storage *s = buckets[b];
            buckets[b] = s->cache_next;
            s->cache_next = all;
            all = s;
        }
    cached = 0;
    pthread_mutex_unlock(&lock);
    return all;
}
