/* Random fills from the Philox stream: element i uses number offset + i
 * (uniform) or numbers offset + 2i, offset + 2i + 1 (normal, Box-Muller),
 * so any split of a tensor across threads or calls gives the same values. */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_INLINE void px_uniform_loop(void *dst, int dt, int64_t n, uint64_t seed, uint64_t offset, float lo, float hi)
{
    float span = hi - lo;
    uint32_t buf[PX_PHILOX_BUF];
    for (int64_t i0 = 0; i0 < n; i0 += PX_PHILOX_CHUNK) {
        int64_t m = n - i0 < PX_PHILOX_CHUNK ? n - i0 : PX_PHILOX_CHUNK;
        const uint32_t *u = px_philox_chunk(seed, offset + (uint64_t)i0, m, buf);
        for (int64_t i = 0; i < m; i++) px_st(dst, dt, i0 + i, lo + span * phx_u32_to_uniform(u[i]));
    }
}

PX_INLINE void px_normal_loop(void *dst, int dt, int64_t n, uint64_t seed, uint64_t offset, float mean, float std)
{
    uint32_t buf[PX_PHILOX_BUF];
    for (int64_t i0 = 0; i0 < n; i0 += PX_PHILOX_CHUNK / 2) {
        int64_t m = n - i0 < PX_PHILOX_CHUNK / 2 ? n - i0 : PX_PHILOX_CHUNK / 2;
        const uint32_t *u = px_philox_chunk(seed, offset + 2 * (uint64_t)i0, 2 * m, buf);
        for (int64_t i = 0; i < m; i++)
            px_st(dst, dt, i0 + i,
                  mean + std * phx_box_muller(phx_u32_to_uniform(u[2 * i]), phx_u32_to_uniform(u[2 * i + 1])));
    }
}

PX_CLONES phx_status px_cpu_rng_uniform(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                                        float lo, float hi)
{
    (void)dev;
    PX_CHECK_N("rng_uniform", n);
    if (!(lo <= hi))
        return phx_error(PHX_EINVAL, "rng_uniform: range [%g, %g), expected lo <= hi", (double)lo, (double)hi);
    PX_FLOAT_DISPATCH("rng_uniform", dt, px_uniform_loop(dst, DT, n, seed, offset, lo, hi));
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_rng_normal(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                                       float mean, float std)
{
    (void)dev;
    PX_CHECK_N("rng_normal", n);
    if (!(std >= 0.0f)) return phx_error(PHX_EINVAL, "rng_normal: std=%g, expected >= 0", (double)std);
    PX_FLOAT_DISPATCH("rng_normal", dt, px_normal_loop(dst, DT, n, seed, offset, mean, std));
    return PHX_OK;
}
