/* Dropout: keep element i when philox_uniform(seed, offset + i) >= p,
 * scale kept elements by 1/(1-p). The mask (1 byte per element) is what
 * backward replays. */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_INLINE void px_dropout_fwd_loop(int64_t n, float p, uint64_t seed, uint64_t offset, const void *x, void *y,
                                   uint8_t *mask, int dt)
{
    float scale = phx_dropout_scale(p);
    uint32_t buf[PX_PHILOX_BUF];
    for (int64_t i0 = 0; i0 < n; i0 += PX_PHILOX_CHUNK) {
        int64_t m = n - i0 < PX_PHILOX_CHUNK ? n - i0 : PX_PHILOX_CHUNK;
        const uint32_t *u = px_philox_chunk(seed, offset + (uint64_t)i0, m, buf);
        for (int64_t i = 0; i < m; i++) {
            int keep = phx_dropout_keep(phx_u32_to_uniform(u[i]), p);
            if (mask) mask[i0 + i] = (uint8_t)keep;
            px_st(y, dt, i0 + i, phx_self_f32(keep, px_ld(x, dt, i0 + i) * scale, 0.0f));
        }
    }
}

static phx_status check_p(const char *name, float p)
{
    if (!(p >= 0.0f && p <= 1.0f)) return phx_error(PHX_EINVAL, "%s: p=%g, expected 0 <= p <= 1", name, (double)p);
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_dropout_forward(int dev, int64_t n, float p, uint64_t seed, uint64_t offset, const void *x,
                                            void *y, uint8_t *mask, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("dropout_forward", n);
    if (check_p("dropout_forward", p)) return PHX_EINVAL;
    PX_FLOAT_DISPATCH("dropout_forward", dt, px_dropout_fwd_loop(n, p, seed, offset, x, y, mask, DT));
    return PHX_OK;
}

PX_INLINE void px_dropout_bwd_loop(int64_t n, float p, const uint8_t *mask, const void *dy, void *dx, int dt)
{
    float scale = phx_dropout_scale(p);
    for (int64_t i = 0; i < n; i++) px_st(dx, dt, i, mask[i] ? px_ld(dy, dt, i) * scale : 0.0f);
}

PX_CLONES phx_status px_cpu_dropout_backward(int dev, int64_t n, float p, const uint8_t *mask, const void *dy, void *dx,
                                             phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("dropout_backward", n);
    if (check_p("dropout_backward", p)) return PHX_EINVAL;
    if (!mask && n > 0) return phx_error(PHX_EINVAL, "dropout_backward: mask is NULL, expected forward's mask");
    PX_FLOAT_DISPATCH("dropout_backward", dt, px_dropout_bwd_loop(n, p, mask, dy, dx, DT));
    return PHX_OK;
}
