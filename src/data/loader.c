/* The mini-batch loader: batches of any dataset in a per-epoch order (a
 * DistributedSampler share, an explicit subset, or phx_loader_new's own
 * order: Fisher-Yates on Philox seeded with seed + epoch), assembled on
 * worker threads ahead of the training thread.
 *
 * Batch k of an epoch always lands in slot k % n_slots, and slots are
 * handed out in batch order: whichever worker fills it, the batch holds
 * the same samples, so the result does not depend on the number of
 * workers. At most prefetch batches past the last one delivered are
 * assembled ahead; n_slots = 1 + prefetch adds the batch the caller holds. Every buffer is allocated at construction. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "src/data/dataset-impl.h"
#include "src/data/loader-device.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"
#include "phalanx/data.h"
#include "phalanx/rng.h"
#include "phalanx/sampler.h"

#define PX_LOADER_ERR 384

enum { SLOT_FREE, SLOT_BUSY, SLOT_READY };

typedef struct px_slot {
    phx_tensor *full[PHX_DATASET_MAX_FIELDS]; /* (batch, field...) */
    phx_tensor *part[PHX_DATASET_MAX_FIELDS]; /* (last, field...) views of full, or NULL */
    void *stage[PHX_DATASET_MAX_FIELDS]; /* (batch samples) of the dataset's fields, with a collate */
    int state;
    int64_t batch_no;
    phx_status st;
    char err[PX_LOADER_ERR];
} px_slot;

struct phx_loader {
    phx_dataset *ds;
    phx_loader_opts o;
    bool legacy; /* made by phx_loader_new: its order, no sampler (make_order) */
    int nf_in, nf_out;
    phx_field out_fields[PHX_DATASET_MAX_FIELDS];
    size_t in_bytes[PHX_DATASET_MAX_FIELDS];
    int64_t *base; /* (n_base) the samples drawn from */
    size_t n_base;
    phx_sampler *sampler; /* over positions in base, or NULL (phx_loader_new) */
    int64_t *order; /* (count) this epoch's samples */
    size_t count;
    size_t n_batches;
    int64_t last; /* samples in the last batch when partial, else 0 */
    int64_t epoch;
    bool started;

    px_slot *slots; /* (n_slots) */
    int n_slots;
    pthread_t *threads; /* (workers) */
    int n_threads; /* started */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    bool stop, pausing;
    int busy; /* slots being filled */
    size_t next_assign, next_deliver;
    int held; /* slot the caller holds, or -1 */

    /* With opts.device an accelerator: */
    bool accel;
    px_ldev ldev;
    int held_buf; /* the device buffer of the held slot's batch */
    int pf, pf_buf; /* the slot of the next batch (its copy queued) and its buffer, or -1 */
    int next_buf; /* the device buffer the next copy fills */
};

/* ---- the epoch's order ----------------------------------------------- */

static void philox_shuffle(int64_t *v, size_t n, uint64_t key)
{
    for (size_t i = n; i > 1; i--) {
        uint64_t r = (uint64_t)phx_philox_u32(key, 2 * i) << 32 | phx_philox_u32(key, 2 * i + 1);
        size_t j = (size_t)(r % i);
        int64_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* Fills order for l->epoch (caller holds mu with no slot busy). */
static void make_order(phx_loader *l)
{
    if (l->legacy) {
        memcpy(l->order, l->base, l->n_base * sizeof *l->order);
        if (l->o.shuffle) philox_shuffle(l->order, l->n_base, l->o.seed + (uint64_t)l->epoch);
        return;
    }
    phx_sampler_set_epoch(l->sampler, l->epoch);
    size_t n;
    const int64_t *pos = phx_sampler_indices(l->sampler, &n);
    for (size_t k = 0; k < n; k++) l->order[k] = l->base[pos[k]];
}

/* ---- assembling a batch ---------------------------------------------- */

static phx_status fill(phx_loader *l, px_slot *s, size_t k)
{
    size_t first = k * (size_t)l->o.batch;
    int64_t n = (int64_t)(l->count - first < (size_t)l->o.batch ? l->count - first : (size_t)l->o.batch);
    const int64_t *idx = l->order + first;
    void *out[PHX_DATASET_MAX_FIELDS];
    for (int f = 0; f < l->nf_out; f++) out[f] = px_tensor_ptr(s->full[f]);
    if (!l->o.collate) return phx_dataset_get_batch(l->ds, idx, n, out);
    phx_status st = phx_dataset_get_batch(l->ds, idx, n, s->stage);
    if (st != PHX_OK) return st;
    phx_error_clear();
    st = l->o.collate(l->o.collate_user, n, (const void *const *)s->stage, out);
    if (st == PHX_OK) return PHX_OK;
    char what[160];
    snprintf(what, sizeof what, "the collate callback on %lld samples (sample %lld first)", (long long)n,
             (long long)idx[0]);
    return px_callback_status(st, what);
}

static void fill_slot(phx_loader *l, px_slot *s, size_t k)
{
    s->st = fill(l, s, k);
    if (s->st != PHX_OK) snprintf(s->err, sizeof s->err, "%s", phx_last_error());
}

static void *worker(void *arg)
{
    phx_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop &&
               (l->pausing || l->next_assign >= l->n_batches ||
                l->next_assign >= l->next_deliver + (size_t)l->o.prefetch ||
                l->slots[l->next_assign % (size_t)l->n_slots].state != SLOT_FREE))
            pthread_cond_wait(&l->work_cv, &l->mu);
        if (l->stop) break;
        size_t k = l->next_assign++;
        px_slot *s = &l->slots[k % (size_t)l->n_slots];
        s->state = SLOT_BUSY;
        s->batch_no = (int64_t)k;
        l->busy++;
        pthread_mutex_unlock(&l->mu);
        fill_slot(l, s, k);
        pthread_mutex_lock(&l->mu);
        s->state = SLOT_READY;
        l->busy--;
        pthread_cond_broadcast(&l->done_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- life cycle ------------------------------------------------------ */

static void stop_workers(phx_loader *l)
{
    if (l->n_threads == 0) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    for (int t = 0; t < l->n_threads; t++) pthread_join(l->threads[t], NULL);
    l->n_threads = 0;
}

void phx_loader_free(phx_loader *l)
{
    if (!l) return;
    stop_workers(l);
    px_ldev_free(&l->ldev); /* waits for copies still reading the slots */
    for (int i = 0; l->slots && i < l->n_slots; i++)
        for (int f = 0; f < PHX_DATASET_MAX_FIELDS; f++) {
            phx_tensor_free(l->slots[i].part[f]);
            phx_tensor_free(l->slots[i].full[f]);
            px_free(l->slots[i].stage[f]);
        }
    if (l->threads) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->work_cv);
        pthread_cond_destroy(&l->done_cv);
    }
    px_free(l->slots);
    px_free(l->threads);
    px_free(l->base);
    px_free(l->order);
    phx_sampler_free(l->sampler);
    phx_dataset_free(l->ds);
    px_free(l);
}

static phx_tensor *batch_tensor(const phx_loader *l, const phx_field *f, int64_t rows)
{
    int64_t shape[PHX_MAX_DIMS] = {rows};
    for (int d = 0; d < f->ndim; d++) shape[d + 1] = f->shape[d];
    if (l->accel) return px_tensor_pinned(f->dtype, f->ndim + 1, shape, l->o.device);
    return phx_tensor_new(f->dtype, f->ndim + 1, shape, phx_cpu());
}

static phx_status alloc_slots(phx_loader *l)
{
    l->slots = px_calloc((size_t)l->n_slots, sizeof *l->slots);
    if (!l->slots) return PHX_ENOMEM;
    for (int i = 0; i < l->n_slots; i++) {
        px_slot *s = &l->slots[i];
        for (int f = 0; f < l->nf_out; f++) {
            const phx_field *fl = &l->out_fields[f];
            if (!(s->full[f] = batch_tensor(l, fl, l->o.batch))) return PHX_ENOMEM;
            if (l->last) {
                int64_t shape[PHX_MAX_DIMS] = {l->last};
                for (int d = 0; d < fl->ndim; d++) shape[d + 1] = fl->shape[d];
                if (!(s->part[f] = px_tensor_view(s->full[f], 0, fl->ndim + 1, shape))) return PHX_ENOMEM;
            }
        }
        for (int f = 0; l->o.collate && f < l->nf_in; f++)
            if (!(s->stage[f] = px_malloc(l->in_bytes[f] * (size_t)l->o.batch + 1))) return PHX_ENOMEM;
    }
    return PHX_OK;
}

static phx_status check_opts(const phx_dataset *ds, const phx_loader_opts *o)
{
    static const char who[] = "phx_loader_new_opts";
    if (o->batch < 1) return phx_error(PHX_EINVAL, "%s: batch %lld, expected >= 1", who, (long long)o->batch);
    if (o->workers < 0 || o->workers > 256)
        return phx_error(PHX_EINVAL, "%s: workers %d, expected 0 to 256", who, o->workers);
    if (o->prefetch < 0 || o->prefetch > 1024)
        return phx_error(PHX_EINVAL, "%s: prefetch %d, expected 0 (2 per worker) to 1024", who, o->prefetch);
    if (o->num_replicas < 0 || (o->num_replicas > 1 && (o->rank < 0 || o->rank >= o->num_replicas)) ||
        (o->num_replicas <= 1 && o->rank != 0))
        return phx_error(PHX_EINVAL, "%s: rank %d of %d replicas, expected 0 <= rank < num_replicas", who, o->rank,
                         o->num_replicas);
    if (o->n_indices > 0 && !o->indices)
        return phx_error(PHX_EINVAL, "%s: n_indices is %zu but indices is NULL", who, o->n_indices);
    int64_t len = phx_dataset_len(ds);
    for (size_t i = 0; o->indices && i < o->n_indices; i++)
        if (o->indices[i] < 0 || o->indices[i] >= len)
            return phx_error(PHX_EINVAL, "%s: indices[%zu] = %lld is outside [0, %lld) of the %s dataset", who, i,
                             (long long)o->indices[i], (long long)len, phx_dataset_type(ds));
    if (o->collate_fields && !o->collate)
        return phx_error(PHX_EINVAL, "%s: collate_fields given without a collate callback", who);
    if (o->collate_fields && (o->n_collate_fields < 1 || o->n_collate_fields > PHX_DATASET_MAX_FIELDS))
        return phx_error(PHX_EINVAL, "%s: %d collate fields, expected 1 to %d", who, o->n_collate_fields,
                         PHX_DATASET_MAX_FIELDS);
    for (int f = 0; o->collate_fields && f < o->n_collate_fields; f++) {
        const phx_field *fl = &o->collate_fields[f];
        if (fl->ndim < 0 || fl->ndim > PHX_MAX_DIMS - 1 || phx_dtype_size(fl->dtype) == 0)
            return phx_error(PHX_EINVAL, "%s: collate field %d has %d dims or a bad dtype (expected 0 to %d dims)", who,
                             f, fl->ndim, PHX_MAX_DIMS - 1);
        for (int d = 0; d < fl->ndim; d++)
            if (fl->shape[d] < 1)
                return phx_error(PHX_EINVAL, "%s: collate field %d has extent %lld in dim %d, expected >= 1", who, f,
                                 (long long)fl->shape[d], d);
    }
    return PHX_OK;
}

static phx_loader *loader_create(phx_dataset *ds, const phx_loader_opts *opts, bool legacy)
{
    phx_loader *l = px_calloc(1, sizeof *l);
    if (!l) return NULL;
    l->ds = phx_dataset_retain(ds);
    l->o = *opts;
    l->o.indices = NULL;
    l->o.collate_fields = NULL;
    l->legacy = legacy;
    l->held = l->pf = -1;
    l->accel = opts->device.kind != PHX_DEVICE_CPU;
    l->nf_in = phx_dataset_num_fields(ds);
    for (int f = 0; f < l->nf_in; f++) l->in_bytes[f] = phx_field_bytes(phx_dataset_field(ds, f));
    l->nf_out = opts->collate_fields ? opts->n_collate_fields : l->nf_in;
    for (int f = 0; f < l->nf_out; f++)
        l->out_fields[f] = opts->collate_fields ? opts->collate_fields[f] : *phx_dataset_field(ds, f);
    l->n_base = opts->indices ? opts->n_indices : (size_t)phx_dataset_len(ds);
    l->base = px_malloc((l->n_base ? l->n_base : 1) * sizeof *l->base);
    if (!l->base) goto fail;
    for (size_t i = 0; i < l->n_base; i++) l->base[i] = opts->indices ? opts->indices[i] : (int64_t)i;
    if (legacy)
        l->count = l->n_base;
    else {
        int replicas = opts->num_replicas > 1 ? opts->num_replicas : 1;
        l->sampler = phx_sampler_new((int64_t)l->n_base, replicas, opts->rank, opts->shuffle, opts->seed,
                                     opts->sampler_drop_last);
        if (!l->sampler) goto fail;
        phx_sampler_indices(l->sampler, &l->count);
    }
    l->order = px_malloc((l->count ? l->count : 1) * sizeof *l->order);
    if (!l->order) goto fail;
    size_t b = (size_t)opts->batch;
    l->n_batches = opts->drop_last ? l->count / b : (l->count + b - 1) / b;
    l->last = opts->drop_last ? 0 : (int64_t)(l->count % b);
    if (opts->workers > 0 && l->o.prefetch == 0) l->o.prefetch = 2 * opts->workers;
    /* On an accelerator the next batch's slot is held too, while its copy
     * runs. */
    l->n_slots = (opts->workers > 0 ? 1 + l->o.prefetch : 1) + (l->accel ? 1 : 0);
    if (alloc_slots(l) != PHX_OK) goto fail;
    if (l->accel && px_ldev_init(&l->ldev, opts->device, l->out_fields, l->nf_out, opts->batch, l->last) != PHX_OK)
        goto fail;
    l->started = true;
    make_order(l);
    if (opts->workers > 0) {
        l->threads = px_calloc((size_t)opts->workers, sizeof *l->threads);
        if (!l->threads) goto fail;
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->work_cv, NULL);
        pthread_cond_init(&l->done_cv, NULL);
        for (int t = 0; t < opts->workers; t++) {
            int e = pthread_create(&l->threads[t], NULL, worker, l);
            if (e) {
                phx_error(PHX_ENOMEM, "phx_loader_new_opts: starting worker %d of %d failed: %s", t, opts->workers,
                          strerror(e));
                goto fail;
            }
            l->n_threads++;
        }
    }
    return l;
fail:
    phx_loader_free(l);
    return NULL;
}

phx_loader *phx_loader_new_opts(phx_dataset *ds, const phx_loader_opts *opts)
{
    if (!ds || !opts) {
        px_error_null("phx_loader_new_opts", ds ? "opts" : "the dataset");
        return NULL;
    }
    phx_loader_opts o = PHX_LOADER_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, "phx_loader_new_opts", "phx_loader_opts", "PHX_LOADER_OPTS_INIT")) return NULL;
    if (check_opts(ds, &o) != PHX_OK) return NULL;
    return loader_create(ds, &o, false);
}

phx_loader *phx_loader_new(phx_tensor *x, phx_tensor *y, int64_t batch, bool shuffle, uint64_t seed, bool drop_last,
                           const int64_t *indices, size_t n_indices)
{
    char a[64], b[64];
    if (!x || !y || x->ndim < 1 || y->ndim < 1 || x->shape[0] != y->shape[0]) {
        phx_error(PHX_EINVAL, "phx_loader_new: x %s and y %s need the same number of rows",
                  x ? phx_tensor_shape_str(x, a, sizeof a) : "NULL", y ? phx_tensor_shape_str(y, b, sizeof b) : "NULL");
        return NULL;
    }
    phx_tensor *xy[2] = {x, y};
    phx_dataset *ds = phx_dataset_tensors(xy, 2);
    if (!ds) return NULL;
    phx_loader_opts o = {.struct_size = sizeof o,
                         .batch = batch,
                         .shuffle = shuffle,
                         .seed = seed,
                         .drop_last = drop_last,
                         .indices = indices,
                         .n_indices = indices ? n_indices : 0};
    phx_status st = check_opts(ds, &o);
    if (st != PHX_OK) {
        char msg[512];
        const char *e = phx_last_error(), *colon = strchr(e, ':');
        snprintf(msg, sizeof msg, "%s", colon ? colon + 2 : e);
        phx_error(st, "phx_loader_new: %s", msg);
    }
    phx_loader *l = st == PHX_OK ? loader_create(ds, &o, true) : NULL;
    phx_dataset_free(ds);
    return l;
}

void phx_loader_set_epoch(phx_loader *l, int64_t epoch)
{
    if (!l) return;
    if (l->n_threads) pthread_mutex_lock(&l->mu);
    l->pausing = true;
    while (l->busy > 0) pthread_cond_wait(&l->done_cv, &l->mu);
    if (l->pf >= 0) px_ldev_settle(&l->ldev, l->pf_buf); /* the slot is about to be refilled */
    l->pf = -1;
    l->epoch = epoch;
    make_order(l);
    for (int i = 0; i < l->n_slots; i++) l->slots[i].state = SLOT_FREE;
    l->next_assign = l->next_deliver = 0;
    l->held = -1;
    l->started = true;
    l->pausing = false;
    if (l->n_threads) {
        pthread_cond_broadcast(&l->work_cv);
        pthread_mutex_unlock(&l->mu);
    }
}

size_t phx_loader_num_batches(const phx_loader *l)
{
    return l ? l->n_batches : 0;
}
size_t phx_loader_num_samples(const phx_loader *l)
{
    return l ? l->count : 0;
}
int64_t phx_loader_epoch(const phx_loader *l)
{
    return l ? l->epoch : 0;
}

/* Takes batch next_deliver (l->mu held with workers): waits for it, or
 * assembles it here without workers. Returns its slot. */
static px_slot *take(phx_loader *l)
{
    size_t k = l->next_deliver;
    int i = (int)(k % (size_t)l->n_slots);
    px_slot *s = &l->slots[i];
    if (l->n_threads == 0) {
        s->batch_no = (int64_t)k;
        fill_slot(l, s, k);
        s->state = SLOT_READY;
    }
    while (!(s->state == SLOT_READY && s->batch_no == (int64_t)k)) pthread_cond_wait(&l->done_cv, &l->mu);
    l->next_deliver++;
    if (l->n_threads) /* one more batch may be assembled ahead */
        pthread_cond_broadcast(&l->work_cv);
    return s;
}

/* Queues the copy of slot s's batch into device buffer b (nothing for a
 * batch that failed: its error is reported when it is handed out). */
static phx_status copy_slot(phx_loader *l, px_slot *s, int b)
{
    if (s->st != PHX_OK) return PHX_OK;
    bool partial = l->last && (size_t)s->batch_no == l->n_batches - 1;
    return px_ldev_copy(&l->ldev, b, s->full, partial ? l->last : l->o.batch);
}

/* On an accelerator (l->mu held with workers): hands out the batch whose
 * copy was queued by the previous call (or takes and copies it now, at
 * the start of an epoch), makes the caller's stream wait for it, and
 * queues the copy of the batch after it. NULL at the end of the epoch. */
static px_slot *take_on_device(phx_loader *l, phx_status *st)
{
    px_slot *s;
    int b;
    if (l->pf >= 0) {
        s = &l->slots[l->pf];
        b = l->pf_buf;
        l->pf = -1;
    } else {
        if (l->next_deliver >= l->n_batches) return NULL;
        s = take(l);
        b = l->next_buf;
        l->next_buf ^= 1;
        *st = copy_slot(l, s, b);
    }
    l->held = (int)(s - l->slots);
    l->held_buf = b;
    if (*st == PHX_OK && s->st == PHX_OK) *st = px_ldev_use(&l->ldev, b);
    if (*st == PHX_OK && l->next_deliver < l->n_batches) {
        px_slot *n = take(l);
        l->pf = (int)(n - l->slots);
        l->pf_buf = l->next_buf;
        l->next_buf ^= 1;
        *st = copy_slot(l, n, l->pf_buf);
    }
    return s;
}

int phx_loader_next_batch(phx_loader *l, phx_tensor **out, int n)
{
    if (!l || (!out && n > 0)) return phx_error(PHX_EINVAL, "phx_loader_next: %s is NULL", l ? "out" : "the loader");
    if (n < 0 || n > l->nf_out)
        return phx_error(PHX_EINVAL, "phx_loader_next: %d fields asked for, the batches have %d", n, l->nf_out);
    if (!l->started) /* the previous epoch ended: begin the next one */
        phx_loader_set_epoch(l, l->epoch + 1);
    if (l->n_threads) pthread_mutex_lock(&l->mu);
    phx_status st = PHX_OK;
    if (l->held >= 0) {
        /* On an accelerator its copy must be done before it is refilled. */
        if (l->accel) st = px_ldev_settle(&l->ldev, l->held_buf);
        l->slots[l->held].state = SLOT_FREE;
        l->held = -1;
        if (l->n_threads) pthread_cond_broadcast(&l->work_cv);
    }
    px_slot *s = NULL;
    if (st == PHX_OK && l->accel)
        s = take_on_device(l, &st);
    else if (st == PHX_OK && l->next_deliver < l->n_batches) {
        s = take(l);
        l->held = (int)(s - l->slots);
    }
    if (!s && st == PHX_OK) l->started = false;
    if (l->n_threads) pthread_mutex_unlock(&l->mu);
    if (st != PHX_OK) return phx_error(st, "phx_loader_next: copying a batch to the device: %s", phx_last_error());
    if (!s) return 0;
    if (s->st != PHX_OK)
        return phx_error(s->st, "phx_loader_next: batch %lld of epoch %lld (%s dataset): %s", (long long)s->batch_no,
                         (long long)l->epoch, phx_dataset_type(l->ds), s->err);
    bool partial = l->last && (size_t)s->batch_no == l->n_batches - 1;
    for (int f = 0; f < n; f++)
        if (l->accel)
            out[f] = partial ? l->ldev.part[l->held_buf][f] : l->ldev.full[l->held_buf][f];
        else
            out[f] = partial ? s->part[f] : s->full[f];
    return 1;
}

int phx_loader_next(phx_loader *l, phx_tensor **xb, phx_tensor **yb)
{
    if (!l || !xb) return phx_error(PHX_EINVAL, "phx_loader_next: NULL argument");
    if (yb && l->nf_out < 2)
        return phx_error(PHX_EINVAL,
                         "phx_loader_next: the batches have %d field, pass yb = NULL or use "
                         "phx_loader_next_batch",
                         l->nf_out);
    phx_tensor *out[2];
    int r = phx_loader_next_batch(l, out, yb ? 2 : 1);
    if (r == 1) {
        *xb = out[0];
        if (yb) *yb = out[1];
    }
    return r;
}
