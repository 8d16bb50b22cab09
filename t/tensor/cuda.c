/* The tensor front end on a CUDA device (skipped without one): storage
 * and views on the GPU, copies in every direction, casts, fill/axpby/
 * reduce, phx_gemm, and the RNG giving the CPU's numbers bit for bit.
 * Needs the cuda device plugin on PHX_PLUGIN_PATH. */
#include "config.h"
#include <string.h>
#include "t/core-util.h"

#define N 4099

int main(void)
{
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) skip_all("no CUDA device");
    plan(14);
    phx_device gpu;
    is_int(phx_device_parse("cuda:0", &gpu), PHX_OK, "parse cuda:0");
    int64_t n[1] = {N};
    static float h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = cu_frand(-4, 4);
    phx_memory_stats s0 = PHX_MEMORY_STATS_INIT, s1 = PHX_MEMORY_STATS_INIT;
    phx_device_memory_stats(gpu, &s0);
    phx_tensor *g = phx_tensor_new(PHX_F32, 1, n, gpu);
    phx_device_memory_stats(gpu, &s1);
    ok(g && s1.in_use_bytes >= s0.in_use_bytes + 4 * N, "a tensor on cuda:0 counts in its memory stats");
    phx_tensor_from_host(g, h);
    phx_tensor_to_host(g, back);
    ok(memcmp(h, back, sizeof h) == 0, "host -> device -> host round trip");
    /* device -> device through a view, device -> cpu via copy */
    int64_t half[1] = {N / 2};
    phx_tensor *v = phx_tensor_view(g, N - N / 2, 1, half), *c = phx_tensor_new(PHX_F32, 1, half, phx_cpu());
    phx_tensor *g2 = phx_tensor_new(PHX_F32, 1, half, gpu);
    ok(phx_tensor_copy(g2, v) == PHX_OK && phx_tensor_copy(c, g2) == PHX_OK,
       "copy view -> device tensor -> cpu tensor");
    ok(memcmp(phx_tensor_data(c), h + (N - N / 2), sizeof(float) * (N / 2)) == 0,
       "the copies carry the view's elements");
    phx_tensor_free(g); /* the view keeps the device storage */
    phx_tensor_fill(v, 2.0);
    double sum;
    phx_tensor_reduce(v, PHX_SUM, &sum);
    ok(sum == 2.0 * (N / 2), "base freed first: the view lives on (fill + reduce on the GPU: %g)", sum);
    /* cast and axpby on the device */
    phx_tensor *hb = phx_tensor_new(PHX_BF16, 1, half, gpu), *cb = phx_tensor_new(PHX_BF16, 1, half, phx_cpu());
    phx_tensor_copy(c, g2);
    phx_tensor_cast(hb, g2);
    phx_tensor_copy(cb, hb);
    int same = 1;
    for (int i = 0; i < N / 2; i++)
        same &= ((uint16_t *)phx_tensor_data(cb))[i] == phx_f32_to_bf16(((float *)phx_tensor_data(c))[i]);
    ok(same, "cast f32 -> bf16 on the GPU = kernels/math.h rounding");
    phx_tensor_axpby(2.0f, g2, 0.0f, v);
    phx_tensor_copy(c, v);
    same = 1;
    for (int i = 0; i < N / 2; i++) same &= ((float *)phx_tensor_data(c))[i] == 2.0f * h[N - N / 2 + i];
    ok(same, "axpby on the GPU");
    /* the same Philox stream on both devices */
    phx_rng *r = phx_rng_new(99);
    phx_tensor *ru = phx_tensor_new(PHX_F32, 1, n, gpu), *cu = phx_tensor_new(PHX_F32, 1, n, phx_cpu());
    phx_rng_set_offset(r, 5);
    phx_rng_uniform(r, ru, -1, 1);
    phx_rng_set_offset(r, 5);
    phx_rng_uniform(r, cu, -1, 1);
    phx_tensor_to_host(ru, back);
    ok(memcmp(back, phx_tensor_data(cu), sizeof back) == 0, "uniform: the GPU draws the CPU's numbers bit for bit");
    phx_rng_normal(r, ru, 0, 1);
    phx_rng_set_offset(r, 5 + N);
    phx_rng_normal(r, cu, 0, 1);
    phx_tensor_to_host(ru, back);
    double w = 0;
    for (int i = 0; i < N; i++) w = fmax(w, fabs(back[i] - ((float *)phx_tensor_data(cu))[i]));
    ok(w < 1e-5, "normal: the GPU's numbers = the CPU's up to libm differences (max %.3g)", w);
    /* gemm on the device vs the CPU */
    int64_t s2[2] = {64, 48}, s3[2] = {48, 32}, s4[2] = {64, 32};
    phx_tensor *A = phx_tensor_new(PHX_F32, 2, s2, phx_cpu()), *B = phx_tensor_new(PHX_F32, 2, s3, phx_cpu());
    phx_tensor *C = phx_tensor_new(PHX_F32, 2, s4, phx_cpu()), *Cg = phx_tensor_new(PHX_F32, 2, s4, gpu);
    phx_tensor *Ag = phx_tensor_new(PHX_F32, 2, s2, gpu), *Bg = phx_tensor_new(PHX_F32, 2, s3, gpu);
    phx_rng_uniform(r, A, -1, 1), phx_rng_uniform(r, B, -1, 1);
    phx_tensor_copy(Ag, A), phx_tensor_copy(Bg, B);
    phx_gemm(false, false, 1.0f, A, B, 0.0f, C);
    ok(phx_gemm(false, false, 1.0f, Ag, Bg, 0.0f, Cg) == PHX_OK, "phx_gemm on cuda:0");
    static float cg[64 * 32];
    phx_tensor_to_host(Cg, cg);
    w = 0;
    for (int i = 0; i < 64 * 32; i++) w = fmax(w, fabs(cg[i] - ((float *)phx_tensor_data(C))[i]));
    ok(w < 1e-4, "GPU gemm = CPU gemm (max diff %.3g; TF32 off)", w);
    /* mixing devices is an error */
    is_int(phx_gemm(false, false, 1.0f, A, Bg, 0.0f, C), PHX_EINVAL, "operands on two devices: EINVAL");
    like(phx_last_error(), "A is on cpu, B on cuda:0", "message names both devices");
    phx_tensor *all[] = {v, c, g2, hb, cb, ru, cu, A, B, C, Cg, Ag, Bg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) phx_tensor_free(all[i]);
    phx_rng_free(r);
    phx_device_synchronize(gpu);
    return done_testing();
}
