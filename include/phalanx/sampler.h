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

/* DistributedSampler's keyword arguments. num_replicas 0: 1. */
typedef struct phx_sampler_opts {
    size_t struct_size; /* sizeof (phx_sampler_opts): PHX_SAMPLER_OPTS_INIT sets it */
    int num_replicas, rank;
    bool shuffle; /* torch's default: true */
    uint64_t seed;
    bool drop_last;
} phx_sampler_opts;
#define PHX_SAMPLER_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_sampler_opts), .num_replicas = 1, .shuffle = true \
    }
/* phx_sampler_new with named options (NULL: PHX_SAMPLER_OPTS_INIT's); the
 * positional phx_sampler_new is deprecated within 1.x. */
phx_sampler *phx_sampler_new_opts(int64_t n, const phx_sampler_opts *opts);
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
