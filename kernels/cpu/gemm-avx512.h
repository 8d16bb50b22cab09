/* The building blocks of the packed AVX-512 GEMM (gemm-avx512.c), shared
 * with the kernels that pack their own operands (conv-avx512.c: the
 * column matrix of a convolution is packed straight from the images).
 * Callers must run on a CPU with AVX-512 (px_cpu_isa). */
#ifndef PX_GEMM_AVX512_H
#define PX_GEMM_AVX512_H
#include <stdint.h>
#include "kernels/cpu/cpu.h"

enum {
    PX_MR = 8, /* rows of a micro-tile: a broadcast each */
    PX_NR = 48, /* columns: three zmm */
    PX_KC = 256, /* depth of a packed block */
    PX_MC = 128, /* rows of A packed at once: 128 KiB, held in L2 */
    PX_NC = 768, /* columns of B packed at once: KC x NC (768 KiB) stays in L2 */
};

/* Packs rows x kc values of dtype dt (value (r, kk) at src[r + kk * ld]
 * when along_r, else src[r * ld + kk]) into panels of R rows (PX_MR or
 * PX_NR), widened to f32: dst[(r / R) * kc * R + kk * R + r % R], rows
 * padded with zeros to a multiple of R. */
void px_avx512_pack(float *dst, int R, int64_t rows, int64_t kc, const void *src, phx_dtype dt, int64_t ld,
                    int along_r);

/* C (rows x cols of the tile, at most PX_MR x PX_NR) = alpha * Ap Bp +
 * beta * C over kc, Ap an PX_MR-row panel and Bp a PX_NR-row panel of
 * px_avx512_pack; beta 0 reads nothing from C. ct: the tile's (r, col) is
 * C's (col, r). */
void px_avx512_micro(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha, float beta,
                     int rows, int cols, int ct);
#endif
