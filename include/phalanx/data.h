/* Phalanx — data: IDX files (MNIST/Fashion-MNIST) and a mini-batch loader. */
#ifndef PHALANX_DATA_H
#define PHALANX_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/tensor.h"

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
 * `indices` (NULL: 0..N-1), reshuffled each epoch when shuffle (Philox
 * seeded with seed + epoch). The loader keeps references to x and y. */
phx_loader *phx_loader_new(phx_tensor *x, phx_tensor *y, int64_t batch, bool shuffle, uint64_t seed,
                           bool drop_last, const int64_t *indices, size_t n_indices);
void phx_loader_free(phx_loader *l);
/* Starts an epoch. */
void phx_loader_set_epoch(phx_loader *l, int64_t epoch);
/* Next batch into loader-owned tensors (valid until the next call); returns
 * 0 at the end of the epoch, 1 with a batch, < 0 on error. */
int phx_loader_next(phx_loader *l, phx_tensor **xb, phx_tensor **yb);
size_t phx_loader_num_batches(const phx_loader *l);

#ifdef __cplusplus
}
#endif
#endif
