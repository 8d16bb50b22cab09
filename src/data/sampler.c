/* DistributedSampler (torch.utils.data.distributed) and torch.randperm on
 * the CPU generator, reproduced index for index.
 *
 * torch's CPU generator is a 32-bit Mersenne Twister seeded with the low
 * 32 bits of manual_seed(); randperm draws one number per position
 * (Fisher-Yates from the front: swap i with i + random() % (n - i)). */
#include <string.h>
#include "phalanx/sampler.h"
#include "src/base/util.h"
#include "src/base/abi.h"

/* --- mt19937 (the standard 32-bit engine, as at::mt19937) --- */

#define MT_N 624
#define MT_M 397

typedef struct px_mt19937 {
    uint32_t state[MT_N];
    int next;
} px_mt19937;

static void mt_seed(px_mt19937 *g, uint64_t seed)
{
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (int j = 1; j < MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + (uint32_t)j;
    g->next = MT_N;
}

static void mt_twist(px_mt19937 *g)
{
    for (int k = 0; k < MT_N; k++) {
        uint32_t y = (g->state[k] & 0x80000000u) | (g->state[(k + 1) % MT_N] & 0x7fffffffu);
        g->state[k] = g->state[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    g->next = 0;
}

static uint32_t mt_next(px_mt19937 *g)
{
    if (g->next >= MT_N) mt_twist(g);
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

phx_status phx_randperm(int64_t n, uint64_t seed, int64_t *out)
{
    if (n < 0) return phx_error(PHX_EINVAL, "phx_randperm: n is %lld, expected >= 0", (long long)n);
    if (n > 0 && !out) return phx_error(PHX_EINVAL, "phx_randperm: out is NULL");
    px_mt19937 g; /* 2.5 KiB on the stack: no allocation */
    mt_seed(&g, seed);
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = 0; i + 1 < n; i++) {
        int64_t z = (int64_t)(mt_next(&g) % (uint64_t)(n - i));
        int64_t t = out[i];
        out[i] = out[z + i];
        out[z + i] = t;
    }
    return PHX_OK;
}

/* --- DistributedSampler --- */

struct phx_sampler {
    int64_t n; /* dataset length */
    int replicas, rank;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t epoch;
    int64_t num_samples; /* per rank */
    int64_t total; /* num_samples * replicas */
    int64_t *perm; /* (n) scratch for the epoch's order */
    int64_t *mine; /* (num_samples) this rank's indices */
    bool fresh; /* mine matches epoch */
};

phx_sampler *phx_sampler_new(int64_t n, int num_replicas, int rank, bool shuffle, uint64_t seed, bool drop_last)
{
    if (n < 0) {
        phx_error(PHX_EINVAL, "phx_sampler_new: dataset length is %lld, expected >= 0", (long long)n);
        return NULL;
    }
    if (num_replicas < 1) {
        phx_error(PHX_EINVAL, "phx_sampler_new: num_replicas is %d, expected >= 1", num_replicas);
        return NULL;
    }
    if (rank < 0 || rank >= num_replicas) {
        phx_error(PHX_EINVAL, "phx_sampler_new: rank is %d, expected in [0, %d]", rank, num_replicas - 1);
        return NULL;
    }
    phx_sampler *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n = n;
    s->replicas = num_replicas;
    s->rank = rank;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->seed = seed;
    /* torch: with drop_last and a remainder, ceil((n - R) / R) = floor(n / R);
     * otherwise ceil(n / R). */
    if (drop_last)
        s->num_samples = n / num_replicas;
    else
        s->num_samples = (n + num_replicas - 1) / num_replicas;
    s->total = s->num_samples * num_replicas;
    s->perm = px_malloc((size_t)(n > 0 ? n : 1) * sizeof *s->perm);
    s->mine = px_malloc((size_t)(s->num_samples > 0 ? s->num_samples : 1) * sizeof *s->mine);
    if (!s->perm || !s->mine) {
        phx_sampler_free(s);
        return NULL;
    }
    return s;
}

phx_sampler *phx_sampler_new_opts(int64_t n, const phx_sampler_opts *opts)
{
    phx_sampler_opts o = PHX_SAMPLER_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, "phx_sampler_new_opts", "phx_sampler_opts", "PHX_SAMPLER_OPTS_INIT")) return NULL;
    return phx_sampler_new(n, o.num_replicas ? o.num_replicas : 1, o.rank, o.shuffle, o.seed, o.drop_last);
}

void phx_sampler_free(phx_sampler *s)
{
    if (!s) return;
    px_free(s->perm);
    px_free(s->mine);
    px_free(s);
}

void phx_sampler_set_epoch(phx_sampler *s, int64_t epoch)
{
    if (!s) return;
    s->epoch = epoch;
    s->fresh = false;
}

/* Fills s->mine for the current epoch: the epoch's order, padded by
 * repeating it from the start (or truncated with drop_last) to total,
 * then every replicas-th element starting at rank. */
static void sampler_fill(phx_sampler *s)
{
    if (s->shuffle)
        phx_randperm(s->n, s->seed + (uint64_t)s->epoch, s->perm);
    else
        for (int64_t i = 0; i < s->n; i++) s->perm[i] = i;
    for (int64_t k = 0; k < s->num_samples; k++) {
        int64_t pos = s->rank + k * s->replicas; /* < total */
        s->mine[k] = s->perm[pos % s->n]; /* pos >= n only when padding */
    }
    s->fresh = true;
}

const int64_t *phx_sampler_indices(phx_sampler *s, size_t *count)
{
    if (!s) {
        phx_error(PHX_EINVAL, "phx_sampler_indices: sampler is NULL");
        if (count) *count = 0;
        return NULL;
    }
    if (!s->fresh) sampler_fill(s);
    if (count) *count = (size_t)s->num_samples;
    return s->mine;
}
