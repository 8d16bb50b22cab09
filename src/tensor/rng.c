/* Counter-based generator: (seed, offset) is the whole state, so a draw
 * can be split across threads or devices and still give the same numbers. */
#include "config.h"
#include "src/tensor/device-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "kernels/math.h"
#include "phalanx/rng.h"

struct phx_rng {
    uint64_t seed;
    uint64_t offset; /* 32-bit numbers consumed */
};

phx_rng *phx_rng_new(uint64_t seed)
{
    phx_rng *r = px_malloc(sizeof *r);
    if (!r) return NULL;
    r->seed = seed;
    r->offset = 0;
    return r;
}

void phx_rng_free(phx_rng *r)
{
    px_free(r);
}
uint64_t phx_rng_seed(const phx_rng *r)
{
    return r ? r->seed : 0;
}
uint64_t phx_rng_offset(const phx_rng *r)
{
    return r ? r->offset : 0;
}
void phx_rng_set_offset(phx_rng *r, uint64_t offset)
{
    if (r) r->offset = offset;
}

static phx_status rng_args(const char *fn, phx_rng *r, phx_tensor *t)
{
    if (!r || !t) return phx_error(PHX_EINVAL, "%s: %s is NULL", fn, r ? "tensor" : "rng");
    if (px_tensor_live(fn, "the tensor", t) != PHX_OK) return PHX_ESTATE;
    if (!phx_dtype_is_float(t->dtype))
        return phx_error(PHX_EINVAL, "%s: tensor is %s, expected f32, f16 or bf16", fn, phx_dtype_name(t->dtype));
    return PHX_OK;
}

phx_status phx_rng_uniform(phx_rng *r, phx_tensor *t, float lo, float hi)
{
    phx_status st = rng_args("phx_rng_uniform", r, t);
    if (st) return st;
    const phx_kernels_v1 *k = px_device_kernels(t->storage->device);
    if (!k) return PHX_ENOTFOUND;
    st = k->rng_uniform(t->storage->device.index, px_tensor_ptr(t), t->dtype, t->numel, r->seed, r->offset, lo, hi);
    if (st == PHX_OK) r->offset += (uint64_t)t->numel;
    return st;
}

phx_status phx_rng_normal(phx_rng *r, phx_tensor *t, float mean, float std)
{
    phx_status st = rng_args("phx_rng_normal", r, t);
    if (st) return st;
    const phx_kernels_v1 *k = px_device_kernels(t->storage->device);
    if (!k) return PHX_ENOTFOUND;
    st = k->rng_normal(t->storage->device.index, px_tensor_ptr(t), t->dtype, t->numel, r->seed, r->offset, mean, std);
    if (st == PHX_OK) r->offset += 2 * (uint64_t)t->numel;
    return st;
}

uint32_t phx_philox_u32(uint64_t seed, uint64_t i)
{
    return phx_philox_at(seed, i);
}
float phx_philox_uniform(uint64_t seed, uint64_t i)
{
    return phx_u32_to_uniform(phx_philox_at(seed, i));
}
