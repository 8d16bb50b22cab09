/* Phalanx — DistributedSampler with PyTorch's index rules, and the
 * torch.randperm it needs (mt19937, as torch's CPU generator). */
#ifndef PHALANX_SAMPLER_H
#define PHALANX_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_sampler phx_sampler;

/* n samples over num_replicas ranks. shuffle permutes with
 * torch.randperm(n, generator seeded seed + epoch). drop_last drops the tail
 * so every rank gets floor(n / replicas); else pads by repeating from the
 * start. NULL with PHX_EINVAL for rank >= num_replicas etc. */
phx_sampler *phx_sampler_new(int64_t n, int num_replicas, int rank, bool shuffle, uint64_t seed, bool drop_last);
void phx_sampler_free(phx_sampler *s);
void phx_sampler_set_epoch(phx_sampler *s, int64_t epoch);
/* This rank's indices for the current epoch (owned by s, valid until the
 * next set_epoch); *count receives their number. */
const int64_t *phx_sampler_indices(phx_sampler *s, size_t *count);

/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)). */
phx_status phx_randperm(int64_t n, uint64_t seed, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
