/* The store's key-value table: a chained hash table of byte strings held
 * in reference-counted blobs, shared by the TCP server and the in-process
 * store. Not thread-safe: the owner locks. */
#include "config.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "src/world/store-proto.h"
#include "src/base/util.h"

typedef struct px_entry {
    struct px_entry *next;
    uint64_t hash;
    size_t klen;
    px_blob *val; /* the table's reference */
    uint8_t key[]; /* klen bytes */
} px_entry;

struct px_kv {
    px_entry **buckets;
    size_t nbuckets; /* power of two */
    int64_t count;
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void px_blob_unref(px_blob *b)
{
    if (b && --b->refs == 0) px_free(b);
}

/* The table lets go of a value (a pending reply may still hold it). */
static void drop_value(px_blob *b)
{
    b->live = 0;
    px_blob_unref(b);
}

px_kv *px_kv_new(void)
{
    px_kv *kv = px_calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->nbuckets = 64;
    kv->buckets = px_calloc(kv->nbuckets, sizeof *kv->buckets);
    if (!kv->buckets) {
        px_free(kv);
        return NULL;
    }
    return kv;
}

void px_kv_free(px_kv *kv)
{
    if (!kv) return;
    for (size_t i = 0; i < kv->nbuckets; i++) {
        for (px_entry *e = kv->buckets[i], *n; e; e = n) {
            n = e->next;
            drop_value(e->val);
            px_free(e);
        }
    }
    px_free(kv->buckets);
    px_free(kv);
}

static px_entry **find(const px_kv *kv, const void *key, size_t klen, uint64_t h)
{
    px_entry **pp = &kv->buckets[h & (kv->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0) return pp;
    return pp;
}

px_blob *px_kv_get_blob(const px_kv *kv, const void *key, size_t klen)
{
    px_entry *e = *find(kv, key, klen, hash_bytes(key, klen));
    return e ? e->val : NULL;
}

const uint8_t *px_kv_get(const px_kv *kv, const void *key, size_t klen, size_t *vlen)
{
    px_blob *b = px_kv_get_blob(kv, key, klen);
    if (!b) return NULL;
    *vlen = b->len;
    return b->data;
}

static void grow(px_kv *kv)
{
    size_t n = kv->nbuckets * 2;
    px_entry **b = px_calloc(n, sizeof *b);
    if (!b) return; /* keep the longer chains */
    for (size_t i = 0; i < kv->nbuckets; i++) {
        for (px_entry *e = kv->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    px_free(kv->buckets);
    kv->buckets = b;
    kv->nbuckets = n;
}

/* Stores a copy of val (with a NUL after it) at key, creating the entry. */
static phx_status put(px_kv *kv, const void *key, size_t klen, const void *val, size_t vlen)
{
    uint64_t h = hash_bytes(key, klen);
    px_entry **pp = find(kv, key, klen, h);
    px_blob *copy = px_malloc(sizeof *copy + vlen + 1);
    if (!copy) return PHX_ENOMEM;
    copy->refs = 1;
    copy->live = 1;
    copy->len = vlen;
    if (vlen) memcpy(copy->data, val, vlen);
    copy->data[vlen] = 0;
    if (*pp) {
        drop_value((*pp)->val);
        (*pp)->val = copy;
        return PHX_OK;
    }
    px_entry *e = px_malloc(sizeof *e + klen);
    if (!e) {
        px_free(copy);
        return PHX_ENOMEM;
    }
    e->next = NULL;
    e->hash = h;
    e->klen = klen;
    memcpy(e->key, key, klen);
    e->val = copy;
    *pp = e;
    if (++kv->count > (int64_t)kv->nbuckets) grow(kv);
    return PHX_OK;
}

phx_status px_kv_set(px_kv *kv, const void *key, size_t klen, const void *val, size_t vlen)
{
    return put(kv, key, klen, val, vlen);
}

phx_status px_kv_add(px_kv *kv, const void *key, size_t klen, int64_t delta, int64_t *result)
{
    size_t vlen;
    const uint8_t *v = px_kv_get(kv, key, klen, &vlen);
    int64_t x = 0;
    if (v) {
        char *end;
        errno = 0;
        x = strtoll((const char *)v, &end, 10); /* values are NUL-terminated */
        if (vlen == 0 || errno || end != (const char *)v + vlen)
            return phx_error(PHX_EINVAL, "phx_store_add: the value at the key is not a decimal integer");
    }
    x = (int64_t)((uint64_t)x + (uint64_t)delta); /* wraps like the hardware, never UB */
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%" PRId64, x);
    phx_status st = put(kv, key, klen, buf, (size_t)n);
    if (st == PHX_OK && result) *result = x;
    return st;
}

phx_status px_kv_cas(px_kv *kv, const void *key, size_t klen, const void *exp, size_t elen, const void *des,
                     size_t dlen, int *changed)
{
    size_t vlen;
    const uint8_t *v = px_kv_get(kv, key, klen, &vlen);
    int match = v ? (vlen == elen && (elen == 0 || memcmp(v, exp, elen) == 0)) : elen == 0;
    if (changed) *changed = match;
    return match ? put(kv, key, klen, des, dlen) : PHX_OK;
}

int px_kv_delete(px_kv *kv, const void *key, size_t klen)
{
    px_entry **pp = find(kv, key, klen, hash_bytes(key, klen));
    px_entry *e = *pp;
    if (!e) return 0;
    *pp = e->next;
    drop_value(e->val);
    px_free(e);
    kv->count--;
    return 1;
}

int64_t px_kv_count(const px_kv *kv)
{
    return kv->count;
}
