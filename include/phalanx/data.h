/* Phalanx — data: IDX files (MNIST/Fashion-MNIST) and a mini-batch loader
 * over any dataset (phalanx/dataset.h), with worker threads. */
#ifndef PHALANX_DATA_H
#define PHALANX_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/tensor.h"
#include "phalanx/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads an IDX file (plain or gzip). u8 images become f32 in [0,1] shaped
 * (N, rows*cols); u8 labels become i64 (N). PHX_EIO names the file and the
 * problem (bad magic, truncated, size mismatch). Caller owns *out. */
phx_status phx_idx_read(const char *path, phx_tensor **out);

/* Folder of Debian's dataset-fashion-mnist ("/usr/share/datasets/fashion-mnist"
 * unless PHX_FASHION_MNIST is set). */
const char *phx_fashion_mnist_dir(void);

typedef struct phx_loader phx_loader;

/* Mini-batches of rows of x (N, ...) and y (N, ...) in the order of
 * `indices` (NULL: 0..N-1), reshuffled each epoch when shuffle
 * (Fisher-Yates on Philox seeded with seed + epoch). The loader keeps
 * references to x and y. No workers: batches are copied inside
 * phx_loader_next. */
phx_loader *phx_loader_new(phx_tensor *x, phx_tensor *y, int64_t batch, bool shuffle, uint64_t seed, bool drop_last,
                           const int64_t *indices, size_t n_indices);
void phx_loader_free(phx_loader *l);
/* Starts an epoch (a new order); batches of the previous epoch not yet
 * taken are dropped (workers finish the one they are assembling). */
void phx_loader_set_epoch(phx_loader *l, int64_t epoch);
/* Next batch into loader-owned tensors (fields 0 and 1; yb may be NULL for
 * a one-field dataset), valid until the next call; returns 0 at the end of
 * the epoch (the call after that starts the next epoch), 1 with a batch,
 * < 0 (a phx_status) on error: a dataset or collate callback of that
 * batch returned anything but PHX_OK (message: the batch, the epoch, the
 * sample and the callback's own message; no tensors are handed out; the
 * following call goes on with the next batch). */
int phx_loader_next(phx_loader *l, phx_tensor **xb, phx_tensor **yb);
/* Batches per epoch. */
size_t phx_loader_num_batches(const phx_loader *l);

/* PyTorch's DataLoader(dataset, batch_size, shuffle/sampler=
 * DistributedSampler(dataset, num_replicas, rank, shuffle, seed,
 * drop_last=sampler_drop_last), drop_last, num_workers, prefetch_factor,
 * collate_fn). Zero-initialise and set what differs. */
typedef struct phx_loader_opts {
    size_t struct_size; /* sizeof (phx_loader_opts): PHX_LOADER_OPTS_INIT sets it */
    int64_t batch; /* samples per batch (>= 1) */
    bool shuffle; /* order torch.randperm(n, seed + epoch) each epoch */
    uint64_t seed;
    bool drop_last; /* drop the last partial batch */
    /* This rank's DistributedSampler share; num_replicas 0 or 1: all samples.
     * shuffle above is also the sampler's: set it, as DistributedSampler
     * shuffles by default where this struct, zero-initialised, does not. */
    int num_replicas, rank;
    bool sampler_drop_last; /* drop the tail instead of padding by repetition */
    /* (optional) the samples to draw from, in order, instead of 0..len-1
     * (a subset, e.g. an uneven shard); the sampler then works on positions
     * in this list. Copied. */
    const int64_t *indices;
    size_t n_indices;
    int workers; /* threads assembling batches ahead; 0: inside phx_loader_next */
    int prefetch; /* batches assembled ahead with workers; 0: 2 per worker */
    /* (optional) collate: n samples of the dataset's fields (samples[f]:
     * n consecutive samples of field f) into out[f] (n rows of output field
     * f). Runs on the worker threads. Defaults to copying the samples as
     * they are. */
    phx_status (*collate)(void *user, int64_t n, const void *const *samples, void *const *out);
    void *collate_user;
    /* The collate's output fields (NULL: the dataset's fields). Copied. */
    const phx_field *collate_fields;
    int n_collate_fields;
    /* Where the batches are delivered (zero: the CPU). On an accelerator
     * the workers assemble batches in page-locked host memory, and the
     * copy of batch k+1 to the device is queued on a stream of the
     * loader's own when batch k is handed out, so it moves while the
     * caller computes (PyTorch's pin_memory=True with non_blocking
     * copies). A batch stays valid until the next call, as on the CPU. */
    phx_device device;
} phx_loader_opts;
#define PHX_LOADER_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_loader_opts) \
    }

/* A loader over ds (the loader keeps a reference). Buffers for 1 +
 * prefetch batches are allocated here and reused: phx_loader_next does not
 * allocate. The same seed gives the same batches whatever workers is.
 * Workers start on epoch 0 at once. NULL with PHX_EINVAL naming the bad
 * option. */
phx_loader *phx_loader_new_opts(phx_dataset *ds, const phx_loader_opts *opts);
/* As phx_loader_next, for any number of fields: out[0..n) receive the
 * batch's first n fields (n <= the number of fields). */
int phx_loader_next_batch(phx_loader *l, phx_tensor **out, int n);
/* The current epoch. */
int64_t phx_loader_epoch(const phx_loader *l);
/* Samples per epoch (this rank's share). */
size_t phx_loader_num_samples(const phx_loader *l);

#ifdef __cplusplus
}
#endif
#endif
