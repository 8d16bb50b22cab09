/* Activations forward and backward (formulas in kernels/math.h). The
 * activation and dtype are compile-time constants inside each loop; the
 * loops are compiled twice (generic, AVX2) and f32 has AVX-512 loops
 * (activation-avx512.c); px_cpu_isa() picks one per call. */
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
        for (int64_t i = 0; i < n; i++) px_st(dx, dt, i, phx_act_bwd(act, 0.0f, px_ld(y, dt, i), px_ld(dy, dt, i)));
    else
        for (int64_t i = 0; i < n; i++) px_st(dx, dt, i, phx_act_bwd(act, px_ld(x, dt, i), 0.0f, px_ld(dy, dt, i)));
}

#define PX_ACT_DISPATCH(act, CALL) \
    switch (act) { \
        PX_ACT_CASE(PHX_ACT_RELU, CALL) \
        PX_ACT_CASE(PHX_ACT_GELU, CALL) \
        PX_ACT_CASE(PHX_ACT_GELU_TANH, CALL) \
        PX_ACT_CASE(PHX_ACT_TANH, CALL) \
        PX_ACT_CASE(PHX_ACT_SIGMOID, CALL) \
    default: \
        return phx_error(PHX_EINVAL, "activation: kind %d, expected 0..4 (relu, gelu, gelu_tanh, tanh, sigmoid)", \
                         (int)act); \
    }

/* The compiled loops, for the generic and the AVX2 paths (the same bits) */
PX_INLINE phx_status fwd_any(phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt)
{
    PX_ACT_DISPATCH(act, PX_FLOAT_DISPATCH("act_forward", dt, px_act_fwd_loop(ACT, n, x, y, DT)));
    return PHX_OK;
}

PX_INLINE phx_status bwd_any(phx_activation act, int64_t n, const void *x, const void *y, const void *dy, void *dx,
                             phx_dtype dt)
{
    PX_ACT_DISPATCH(act, PX_FLOAT_DISPATCH("act_backward", dt, px_act_bwd_loop(ACT, n, x, y, dy, dx, DT)));
    return PHX_OK;
}

static phx_status fwd_generic(phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt)
{
    return fwd_any(act, n, x, y, dt);
}

static phx_status bwd_generic(phx_activation act, int64_t n, const void *x, const void *y, const void *dy, void *dx,
                              phx_dtype dt)
{
    return bwd_any(act, n, x, y, dy, dx, dt);
}

#if PX_HAVE_X86
PX_TARGET_AVX2 static phx_status fwd_avx2(phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt)
{
    return fwd_any(act, n, x, y, dt);
}

PX_TARGET_AVX2 static phx_status bwd_avx2(phx_activation act, int64_t n, const void *x, const void *y, const void *dy,
                                          void *dx, phx_dtype dt)
{
    return bwd_any(act, n, x, y, dy, dx, dt);
}

/* AVX-512 serves f32 gelu, gelu_tanh, tanh and sigmoid (and relu's
 * forward, below); the half dtypes and relu's backward stay on the
 * compiled AVX2 loops */
static int avx512_serves(phx_activation act, phx_dtype dt)
{
    return dt == PHX_F32 &&
        (act == PHX_ACT_GELU || act == PHX_ACT_GELU_TANH || act == PHX_ACT_TANH || act == PHX_ACT_SIGMOID);
}
#endif

/* f16 and bf16 on a CPU with AVX2 (F16C comes with it): blocks widened
 * by the cast kernel's conversion instructions, run through the f32
 * kernels and rounded once into the half dtype. The compiled half loops
 * convert each element in software and do not vectorise (relu on 4M f16:
 * 21 ms, against 1 ms in f32; the bf16 gelus took a quarter of a bf16 GPT
 * step). The values are the f32 kernels' rounded to f16 or bf16. */
static phx_status fwd_half_blocks(phx_activation act, int64_t n, const uint16_t *x, uint16_t *y, phx_dtype dt)
{
    float a[PX_F16_BLOCK], b[PX_F16_BLOCK];
    for (int64_t i = 0; i < n; i += PX_F16_BLOCK) {
        int64_t k = n - i < PX_F16_BLOCK ? n - i : PX_F16_BLOCK;
        phx_status st = px_cpu_half_cast_here(a, PHX_F32, x + i, dt, k);
        if (st == PHX_OK) st = px_cpu_act_forward(0, act, k, a, b, PHX_F32);
        if (st == PHX_OK) st = px_cpu_half_cast_here(y + i, dt, b, PHX_F32, k);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

static phx_status bwd_half_blocks(phx_activation act, int64_t n, const uint16_t *x, const uint16_t *y,
                                  const uint16_t *dy, uint16_t *dx, phx_dtype dt)
{
    float a[PX_F16_BLOCK], b[PX_F16_BLOCK], g[PX_F16_BLOCK], d[PX_F16_BLOCK];
    for (int64_t i = 0; i < n; i += PX_F16_BLOCK) {
        int64_t k = n - i < PX_F16_BLOCK ? n - i : PX_F16_BLOCK;
        phx_status st = x ? px_cpu_half_cast_here(a, PHX_F32, x + i, dt, k) : PHX_OK;
        if (st == PHX_OK && y) st = px_cpu_half_cast_here(b, PHX_F32, y + i, dt, k);
        if (st == PHX_OK) st = px_cpu_half_cast_here(g, PHX_F32, dy + i, dt, k);
        if (st == PHX_OK) st = px_cpu_act_backward(0, act, k, x ? a : NULL, y ? b : NULL, g, d, PHX_F32);
        if (st == PHX_OK) st = px_cpu_half_cast_here(dx + i, dt, d, PHX_F32, k);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

#if PX_HAVE_X86
/* relu on f16 and bf16 bits, without widening: relu keeps x exactly when
 * x > 0 or x is NaN, that is when the bits less one are below +inf's
 * (sign clear, not zero, not NaN) or the magnitude's bits are above
 * +inf's (a NaN of either sign). The forward keeps x or writes +0, and the
 * backward passes dy or writes +0 (phx_act_bwd's select, whatever dy is),
 * the bits of the f32 kernels rounded back (a NaN's payload aside). 16-bit
 * integer lanes, compiled for AVX2. */
PX_TARGET_AVX2 static inline int relu_half_keeps(uint16_t x, uint16_t inf)
{
    return (uint16_t)(x - 1u) < inf || (uint16_t)(x & 0x7fff) > inf;
}

PX_TARGET_AVX2 static void relu_half_fwd(int64_t n, const uint16_t *x, uint16_t *y, phx_dtype dt)
{
    const uint16_t inf = dt == PHX_F16 ? 0x7c00 : 0x7f80;
    for (int64_t i = 0; i < n; i++) y[i] = relu_half_keeps(x[i], inf) ? x[i] : 0;
}

PX_TARGET_AVX2 static void relu_half_bwd(int64_t n, const uint16_t *x, const uint16_t *dy, uint16_t *dx, phx_dtype dt)
{
    const uint16_t inf = dt == PHX_F16 ? 0x7c00 : 0x7f80;
    /* dy read whatever x is, so that the loop vectorises (a read under
     * the condition kept it scalar: a quarter of a bf16 CNN step's
     * samples on an Intel Xeon of family 6 model 106) */
    for (int64_t i = 0; i < n; i++) {
        uint16_t g = dy[i];
        dx[i] = relu_half_keeps(x[i], inf) ? g : 0; /* phx_act_bwd's select */
    }
}
#endif

/* Elements of a part of a parallel activation: blocks of PX_ACT_BLOCK,
 * so each part but the last starts and ends on a 64-byte line of f32. */
#define PX_ACT_BLOCK 16
#define PX_ACT_GRAIN_BLOCKS 4096 /* 64 Ki elements a part at least */

typedef struct act_job {
    phx_activation act;
    const void *x, *y, *dy;
    void *out;
    int64_t n;
    phx_dtype dt;
    int isa, stream;
    phx_status st; /* the first part's (every part sees the same arguments) */
} act_job;

/* The slice of j's elements that blocks [b0, b1) hold: its offset, its
 * count. */
static int64_t act_slice(const act_job *j, int64_t b0, int64_t b1, int64_t *n)
{
    int64_t lo = b0 * PX_ACT_BLOCK, hi = b1 * PX_ACT_BLOCK < j->n ? b1 * PX_ACT_BLOCK : j->n;
    *n = hi - lo;
    return lo;
}

static phx_status act_forward_range(const act_job *j, int64_t off, int64_t n);
static phx_status act_backward_range(const act_job *j, int64_t off, int64_t n);

static void act_forward_part(void *arg, int64_t b0, int64_t b1)
{
    act_job *j = arg;
    int64_t n, off = act_slice(j, b0, b1, &n);
    phx_status st = act_forward_range(j, off, n);
    if (b0 == 0) j->st = st;
}

static void act_backward_part(void *arg, int64_t b0, int64_t b1)
{
    act_job *j = arg;
    int64_t n, off = act_slice(j, b0, b1, &n);
    phx_status st = act_backward_range(j, off, n);
    if (b0 == 0) j->st = st;
}

/* p + off elements of dt (NULL stays NULL). */
static const void *at(const void *p, phx_dtype dt, int64_t off)
{
    return p ? (const char *)p + off * (int64_t)phx_dtype_size(dt) : NULL;
}

/* An activation is elementwise: its parts give the bits of one call. */
static phx_status act_run(act_job *j, px_range_fn part)
{
    int64_t blocks = (j->n + PX_ACT_BLOCK - 1) / PX_ACT_BLOCK;
    j->st = PHX_OK;
    if (blocks == 0) part(j, 0, 0); /* nothing to compute; the arguments still checked */
    px_cpu_parallel_for(blocks, PX_ACT_GRAIN_BLOCKS, part, j);
    return j->st;
}

phx_status px_cpu_act_forward(int dev, phx_activation act, int64_t n, const void *x, void *y, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("act_forward", n);
    int isa = px_cpu_isa();
    if (isa < 0) return PHX_EINVAL;
    act_job j = {act, x, NULL, NULL, y, n, dt, isa, px_cpu_streams(8 * n), PHX_OK};
    return act_run(&j, act_forward_part);
}

phx_status px_cpu_act_backward(int dev, phx_activation act, int64_t n, const void *x, const void *y, const void *dy,
                               void *dx, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("act_backward", n);
    int isa = px_cpu_isa();
    if (isa < 0) return PHX_EINVAL;
    act_job j = {act, x, y, dy, dx, n, dt, isa, 0, PHX_OK};
    return act_run(&j, act_backward_part);
}

static phx_status act_forward_range(const act_job *j, int64_t off, int64_t n)
{
    phx_activation act = j->act;
    phx_dtype dt = j->dt;
    const void *x = at(j->x, dt, off);
    void *y = (void *)at(j->out, dt, off);
#if PX_HAVE_X86
    int isa = j->isa;
    if (isa == PX_ISA_AVX512 && avx512_serves(act, dt)) {
        px_avx512_act_forward(act, n, x, y);
        return PHX_OK;
    }
    if (isa == PX_ISA_AVX512 && act == PHX_ACT_RELU && dt == PHX_F32) {
        px_avx512_relu_forward(n, x, y, j->stream);
        return PHX_OK;
    }
    if (px_cpu_half_chunk(dt, 1) && act == PHX_ACT_RELU) {
        relu_half_fwd(n, x, y, dt);
        return PHX_OK;
    }
    if (px_cpu_half_chunk(dt, 1) && (unsigned)act <= PHX_ACT_SIGMOID) return fwd_half_blocks(act, n, x, y, dt);
    if (isa >= PX_ISA_AVX2) return fwd_avx2(act, n, x, y, dt);
#endif
    return fwd_generic(act, n, x, y, dt);
}

static phx_status act_backward_range(const act_job *j, int64_t off, int64_t n)
{
    phx_activation act = j->act;
    phx_dtype dt = j->dt;
    const void *x = at(j->x, dt, off), *y = at(j->y, dt, off), *dy = at(j->dy, dt, off);
    void *dx = (void *)at(j->out, dt, off);
#if PX_HAVE_X86
    int isa = j->isa;
    if (isa == PX_ISA_AVX512 && avx512_serves(act, dt)) {
        px_avx512_act_backward(act, n, x, y, dy, dx);
        return PHX_OK;
    }
    if (px_cpu_half_chunk(dt, 1) && act == PHX_ACT_RELU && x) {
        relu_half_bwd(n, x, dy, dx, dt);
        return PHX_OK;
    }
    if (px_cpu_half_chunk(dt, 1) && (unsigned)act <= PHX_ACT_SIGMOID) return bwd_half_blocks(act, n, x, y, dy, dx, dt);
    if (isa >= PX_ISA_AVX2) return bwd_avx2(act, n, x, y, dy, dx, dt);
#endif
    return bwd_generic(act, n, x, y, dy, dx, dt);
}
