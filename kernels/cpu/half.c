/* The half-dtype path of the CPU row kernels: f16 and bf16 values widened
 * a chunk of rows at a time by the cast kernel (F16C, AVX-512, shifts),
 * run through the kernel's f32 loop, and rounded back. The compiled half
 * loops convert each element in software and do not vectorise; widening
 * is exact and both round to nearest even, so the bits are the same. */
#include "config.h"
#include "kernels/cpu/cpu.h"

int64_t px_cpu_half_chunk(phx_dtype dt, int64_t cols)
{
    if ((dt != PHX_F16 && dt != PHX_BF16) || px_cpu_isa() < PX_ISA_AVX2) return 0;
    return cols >= PX_F16_BLOCK ? 1 : PX_F16_BLOCK / (cols > 0 ? cols : 1);
}

phx_status px_cpu_half_rows(int64_t rows, int64_t cols, phx_dtype dt, const void *in0, const void *in1, void *out,
                            px_half_rows_fn fn, const void *arg)
{
    int64_t chunk = px_cpu_half_chunk(dt, cols);
    size_t bytes = (size_t)(chunk * cols) * sizeof(float);
    float *a = px_cpu_scratch(0, bytes), *b = in1 ? px_cpu_scratch(1, bytes) : NULL, *o = px_cpu_scratch(2, bytes);
    if (!a || (in1 && !b) || !o) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (int64_t r = 0; r < rows && st == PHX_OK; r += chunk) {
        int64_t k = rows - r < chunk ? rows - r : chunk, off = r * cols;
        st = px_cpu_cast(0, a, PHX_F32, (const uint16_t *)in0 + off, dt, k * cols);
        if (st == PHX_OK && in1) st = px_cpu_cast(0, b, PHX_F32, (const uint16_t *)in1 + off, dt, k * cols);
        if (st != PHX_OK) break;
        fn(arg, r, k, a, b, o);
        st = px_cpu_cast(0, (uint16_t *)out + off, dt, o, PHX_F32, k * cols);
    }
    return st;
}
