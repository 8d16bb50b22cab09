/* Activations forward and backward (formulas in kernels/math.h). The
 * activation and dtype are compile-time constants inside each loop. */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_INLINE void px_act_fwd_loop(int act, int64_t n, const void *x, void *y, int dt)
{
    for (int64_t i = 0; i < n; i++) px_st(y, dt, i, phx_act(act, px_ld(x, dt, i)));
}

PX_INLINE void px_act_bwd_loop(int act, int64_t n, const void *x, const void *y, const void *dy, void *dx, int dt)
{
    /* relu and the gelus read x; tanh and sigmoid read y */
    if (act == PHX_ACT_TANH || act == PHX_ACT_SIGMOID)
        for (int64_t i = 0; i < n; i++) px_st(dx, dt, i, px_ld(dy, dt, i) * phx_act_grad(act, 0.0f, px_ld(y, dt, i)));
    else
        for (int64_t i = 0; i < n; i++) px_st(dx, dt, i, px_ld(dy, dt, i) * phx_act_grad(act, px_ld(x, dt, i), 0.0f));
}

#define PX_ACT_DISPATCH(act, CALL) \
    switch (act) { \
    case PHX_ACT_RELU: { \
        enum { ACT = PHX_ACT_RELU }; \
        CALL; \
        break; \
    } \
    case PHX_ACT_GELU: { \
        enum { ACT = PHX_ACT_GELU }; \
        CALL; \
        break; \
    } \
    case PHX_ACT_GELU_TANH: { \
        enum { ACT = PHX_ACT_GELU_TANH }; \
        CALL; \
        break; \
    } \
    case PHX_ACT_TANH: { \
        enum { ACT = PHX_ACT_TANH }; \
        CALL; \
        break; \
    } \
    case PHX_ACT_SIGMOID: { \
        enum { ACT = PHX_ACT_SIGMOID }; \
        CALL; \
        break; \
    } \
    default: \
        return phx_error(PHX_EINVAL, "activation: kind %d, expected 0..4 (relu, gelu, gelu_tanh, tanh, sigmoid)", \
                         (int)act); \
    }

/* The kernels' bodies, built once per instruction set. */
#define PX_ACT_VARIANTS(suffix, attr) \
    attr static phx_status act_fwd_##suffix(phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt) \
    { \
        PX_ACT_DISPATCH(act, PX_FLOAT_DISPATCH("act_forward", dt, px_act_fwd_loop(ACT, n, x, y, DT))); \
        return PHX_OK; \
    } \
    attr static phx_status act_bwd_##suffix(phx_activation act, int64_t n, const void *x, const void *y, \
                                            const void *dy, void *dx, phx_dtype dt) \
    { \
        PX_ACT_DISPATCH(act, PX_FLOAT_DISPATCH("act_backward", dt, px_act_bwd_loop(ACT, n, x, y, dy, dx, DT))); \
        return PHX_OK; \
    }
PX_ACT_VARIANTS(generic, )
#if PX_HAVE_ISA_VARIANTS
PX_ACT_VARIANTS(avx2, PX_TARGET_AVX2)
PX_ACT_VARIANTS(avx512, PX_TARGET_AVX512)
#endif

/* relu is memory-bound: AVX2 unless PHX_CPU_ISA says otherwise. */
static int act_isa(phx_activation act)
{
    return px_cpu_isa(act == PHX_ACT_RELU ? PX_ISA_AVX2 : PX_ISA_AVX512);
}

phx_status px_cpu_act_forward(int dev, phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("act_forward", n);
    switch (act_isa(act)) {
    case -1: return PHX_EINVAL;
#if PX_HAVE_ISA_VARIANTS
    case PX_ISA_AVX512: return act_fwd_avx512(act, n, x, y, dt);
    case PX_ISA_AVX2: return act_fwd_avx2(act, n, x, y, dt);
#endif
    default: return act_fwd_generic(act, n, x, y, dt);
    }
}

phx_status px_cpu_act_backward(int dev, phx_activation act, int64_t n, const void *x, const void *y, const void *dy,
                               void *dx, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("act_backward", n);
    switch (act_isa(act)) {
    case -1: return PHX_EINVAL;
#if PX_HAVE_ISA_VARIANTS
    case PX_ISA_AVX512: return act_bwd_avx512(act, n, x, y, dy, dx, dt);
    case PX_ISA_AVX2: return act_bwd_avx2(act, n, x, y, dy, dx, dt);
#endif
    default: return act_bwd_generic(act, n, x, y, dy, dx, dt);
    }
}
