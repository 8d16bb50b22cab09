/* Phalanx — counter-based random numbers (Philox-4x32-10).
 * Element i of a draw is a pure function of (seed, offset + i), so the
 * stream never depends on the number of threads or the device. */
#ifndef PHALANX_RNG_H
#define PHALANX_RNG_H

#include <stdint.h>
#include "phalanx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_rng phx_rng;

/* New generator at offset 0. NULL only on ENOMEM. */
phx_rng *phx_rng_new(uint64_t seed);
void phx_rng_free(phx_rng *r);
uint64_t phx_rng_seed(const phx_rng *r);
/* Offset = number of 32-bit values consumed so far. */
uint64_t phx_rng_offset(const phx_rng *r);
void phx_rng_set_offset(phx_rng *r, uint64_t offset);

/* Fills a float tensor with U[lo, hi) / N(mean, std); advances the offset
 * by numel (uniform) or 2*numel (normal). */
phx_status phx_rng_uniform(phx_rng *r, phx_tensor *t, float lo, float hi);
phx_status phx_rng_normal(phx_rng *r, phx_tensor *t, float mean, float std);

/* Stateless primitives (also used by the kernels): 4 x 32-bit words of
 * Philox-4x32-10 for counter (offset/4) and key seed; u32 number i. */
uint32_t phx_philox_u32(uint64_t seed, uint64_t i);
/* U[0,1) float from the 24 high bits of phx_philox_u32(seed, i). */
float phx_philox_uniform(uint64_t seed, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
