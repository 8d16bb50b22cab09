/* What the convolutions on the packed AVX-512 GEMM share (conv-avx512.c
 * defines them; conv-winograd.c and conv-small.c use some). x86-64 builds only; callers
 * run on a CPU with AVX-512. */
#ifndef PX_CONV_AVX512_H
#define PX_CONV_AVX512_H
#include "kernels/cpu/gemm-avx512.h"
#if PX_HAVE_X86
#include <immintrin.h>

/* lanes lo .. hi - 1 of 16, clipped to 0 .. 15: a mask for a run of
 * floats at a vector's lanes */
static inline __mmask16 px_lanes16(int64_t lo, int64_t hi)
{
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    return hi <= lo ? (__mmask16)0 : (__mmask16)(((1u << (hi - lo)) - 1) << lo);
}
#endif

/* n cut into near-equal blocks of at most most, rounded up to a multiple
 * of unit: the block size */
int64_t px_conv_block(int64_t n, int64_t most, int64_t unit);

/* An m x kd row-major matrix packed as A panels, k block after k block
 * of kc: block pc at dst + pc * (m rounded up to PX_MR), panel ir of the
 * block at + ir * (that block's depth). dst holds that many floats. */
void px_conv_pack_rows(float *dst, int64_t m, int64_t kd, int64_t kc, const float *w);

/* C (m x nc, leading dimension ldc) = Ap Bp + beta C over kc: every
 * micro-tile of one packed A block (m rows) and B block (nc columns, its
 * panels bstride floats apart: kc PX_NR when packed kc deep). */
void px_conv_tiles(int64_t kc, const float *ap, const float *bp, int64_t bstride, int64_t m, int64_t nc, float *c,
                   int64_t ldc, float beta);

/* db[co] += the sum of dy (n, k, oh, ow; of dtype dt: f32, or f16/bf16
 * widened as read, which needs AVX512BW) over images and pixels, split
 * over the threads by channel. */
void px_conv_bias_grad(const phx_conv2d_desc *d, phx_dtype dt, const void *dy, float *db);

#endif
