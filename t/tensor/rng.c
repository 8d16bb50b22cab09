/* Philox-4x32-10 and the generator: the published known-answer vectors
 * (Random123 kat_vectors), identical numbers for the same seed and offset
 * whether drawn at once, in pieces, or by two threads over halves of a
 * tensor, whatever the thread count; offsets advance as documented; the
 * distributions have the right moments; dropout masks split the same way. */
#include "config.h"
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include "kernels/math.h"
#include "phalanx/phalanx.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

#define N 100003 /* odd: the halves do not start on a Philox block */

typedef struct {
    phx_tensor *whole;
    int64_t start, len;
    int normal;
    phx_status st;
} half_job;

/* Each thread has its own generator, positioned at its half. */
static void *draw_half(void *arg)
{
    half_job *j = arg;
    phx_rng *r = phx_rng_new(1234);
    phx_rng_set_offset(r, (uint64_t)(j->normal ? 2 * j->start : j->start) + 77);
    phx_tensor *v = phx_tensor_view(j->whole, j->start, 1, &j->len);
    j->st = j->normal ? phx_rng_normal(r, v, 0.0f, 1.0f) : phx_rng_uniform(r, v, -1.0f, 3.0f);
    phx_tensor_free(v);
    phx_rng_free(r);
    return NULL;
}

static int draw_two_threads(phx_tensor *t, int normal)
{
    int64_t h = N / 2;
    half_job jobs[2] = {{t, 0, h, normal, PHX_OK}, {t, h, N - h, normal, PHX_OK}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, draw_half, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    return jobs[0].st == PHX_OK && jobs[1].st == PHX_OK;
}

int main(void)
{
    plan(30);
    /* 1-3: known answers */
    uint32_t kat_in[3][6] = {
        {0, 0, 0, 0, 0, 0},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u},
    };
    uint32_t kat_out[3][4] = {
        {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t c[4] = {kat_in[i][0], kat_in[i][1], kat_in[i][2], kat_in[i][3]};
        phx_philox4x32_10(c, kat_in[i][4], kat_in[i][5]);
        ok(memcmp(c, kat_out[i], sizeof c) == 0, "Philox-4x32-10 known-answer vector %d (got %08x %08x %08x %08x)", i,
           c[0], c[1], c[2], c[3]);
    }
    /* 4-5: the stream layout */
    uint32_t blk[4];
    phx_philox_block(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, blk);
    uint32_t c4[4] = {0x243f6a88u, 0x85a308d3u, 0, 0};
    phx_philox4x32_10(c4, 0xa4093822u, 0x299f31d0u);
    ok(memcmp(blk, c4, sizeof blk) == 0, "block b of seed s = philox(counter (lo b, hi b, 0, 0), key (lo s, hi s))");
    ok(phx_philox_u32(99, 4 * 1000 + 3) == phx_philox_at(99, 4003) &&
           phx_philox_at(99, 4003) != phx_philox_at(99, 4002) &&
           phx_philox_uniform(99, 7) == (float)(phx_philox_u32(99, 7) >> 8) / 16777216.0f,
       "number i is word i %% 4 of block i / 4; uniform = top 24 bits / 2^24");

    /* 6-11: one draw vs two threads over halves vs two calls */
    int64_t n[1] = {N};
    static float a[N], b[N], c[N];
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, n, phx_cpu());
    phx_rng *r = phx_rng_new(1234);
    phx_set_num_threads(1);
    phx_rng_set_offset(r, 77);
    ok(phx_rng_uniform(r, t, -1.0f, 3.0f) == PHX_OK, "uniform draw");
    is_int(phx_rng_offset(r), 77 + N, "uniform advances the offset by numel");
    phx_tensor_to_host(t, a);
    phx_tensor_fill(t, 0.0);
    phx_set_num_threads(2);
    ok(draw_two_threads(t, 0), "two threads draw one half each");
    phx_tensor_to_host(t, b);
    ok(memcmp(a, b, sizeof a) == 0,
       "same seed and offset: identical numbers with 1 thread and with 2 threads over halves");
    phx_rng_set_offset(r, 77);
    int64_t first[1] = {1001}, rest[1] = {N - 1001};
    phx_tensor *p1 = phx_tensor_view(t, 0, 1, first), *p2 = phx_tensor_view(t, 1001, 1, rest);
    phx_rng_uniform(r, p1, -1.0f, 3.0f);
    phx_rng_uniform(r, p2, -1.0f, 3.0f);
    phx_tensor_to_host(t, c);
    ok(memcmp(a, c, sizeof a) == 0, "two successive draws continue the stream exactly");
    int in_range = 1, grid = 1;
    double sum = 0, sq = 0;
    for (int i = 0; i < N; i++) {
        in_range &= a[i] >= -1.0f && a[i] < 3.0f;
        double u = ((double)a[i] + 1.0) / 4.0;
        grid &= u * 16777216.0 == floor(u * 16777216.0);
        sum += u;
        sq += (u - 0.5) * (u - 0.5);
    }
    ok(in_range && grid, "uniform values lie in [-1, 3) on the 2^-24 grid");

    /* 12-13: moments (mean 1/2 +- 5 sigma, variance 1/12) */
    double mean = sum / N, var = sq / N;
    ok(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / N), "uniform mean %.5f ~ 0.5", mean);
    ok(fabs(var - 1.0 / 12) < 0.002, "uniform variance %.5f ~ 1/12", var);

    /* 14: chi-square over 64 bins of 2^20 draws (dof 63; 99.99%% quantile ~ 117) */
    {
        int64_t m[1] = {1 << 20};
        phx_tensor *u = phx_tensor_new(PHX_F32, 1, m, phx_cpu());
        phx_rng *r2 = phx_rng_new(42);
        phx_rng_uniform(r2, u, 0.0f, 1.0f);
        const float *d = phx_tensor_data(u);
        long bins[64] = {0};
        for (int i = 0; i < (1 << 20); i++) bins[(int)(d[i] * 64)]++;
        double chi = 0, e = (double)(1 << 20) / 64;
        for (int i = 0; i < 64; i++) chi += (bins[i] - e) * (bins[i] - e) / e;
        ok(chi < 117.0, "chi-square of 64 bins = %.1f (< 117)", chi);
        phx_tensor_free(u);
        phx_rng_free(r2);
    }

    /* 15-19: normal */
    phx_rng_set_offset(r, 77);
    phx_set_num_threads(1);
    ok(phx_rng_normal(r, t, 0.0f, 1.0f) == PHX_OK, "normal draw");
    is_int(phx_rng_offset(r), 77 + 2 * (int64_t)N, "normal advances the offset by 2 numel");
    phx_tensor_to_host(t, a);
    phx_tensor_fill(t, 0.0);
    ok(draw_two_threads(t, 1), "two threads draw normal halves");
    phx_tensor_to_host(t, b);
    ok(memcmp(a, b, sizeof a) == 0, "normal: identical with 1 thread and with 2 threads over halves");
    sum = sq = 0;
    long within = 0;
    for (int i = 0; i < N; i++) sum += a[i], sq += (double)a[i] * a[i], within += fabs(a[i]) < 1.0f;
    mean = sum / N;
    double sd = sqrt(sq / N - mean * mean);
    ok(fabs(mean) < 5 / sqrt((double)N) && fabs(sd - 1.0) < 0.01 && fabs((double)within / N - 0.682689) < 0.005,
       "normal: mean %.4f ~ 0, std %.4f ~ 1, P(|z|<1) %.4f ~ 0.6827", mean, sd, (double)within / N);

    /* 20-22: other seeds and dtypes */
    phx_rng *r3 = phx_rng_new(1235);
    phx_rng_uniform(r3, t, -1.0f, 3.0f);
    phx_tensor_to_host(t, b);
    long same = 0;
    phx_rng_set_offset(r, 0);
    phx_rng_uniform(r, t, -1.0f, 3.0f);
    phx_tensor_to_host(t, a);
    for (int i = 0; i < N; i++) same += a[i] == b[i];
    ok(same < 100, "another seed gives other numbers (%ld equal of %d)", same, N);
    ok(phx_rng_seed(r3) == 1235, "seed reported");
    phx_tensor *h = phx_tensor_new(PHX_BF16, 1, n, phx_cpu());
    phx_rng_set_offset(r, 0);
    phx_rng_uniform(r, h, -1.0f, 3.0f);
    const uint16_t *hb = phx_tensor_data(h);
    int match = 1;
    for (int i = 0; i < N; i++) match &= hb[i] == phx_f32_to_bf16(a[i]);
    ok(match, "bf16 uniform = the f32 draw rounded to bf16");

    /* 23-25: dropout masks split like the stream */
    const phx_kernels_v1 *K = phx_device_table(phx_cpu())->kernels;
    static uint8_t m1[N], m2[N];
    static float x[N], y1[N], y2[N];
    for (int i = 0; i < N; i++) x[i] = 1.0f + (float)(i % 7);
    K->dropout_forward(0, N, 0.3f, 5, 1000, x, y1, m1, PHX_F32);
    K->dropout_forward(0, 777, 0.3f, 5, 1000, x, y2, m2, PHX_F32);
    K->dropout_forward(0, N - 777, 0.3f, 5, 1000 + 777, x + 777, y2 + 777, m2 + 777, PHX_F32);
    ok(memcmp(m1, m2, N) == 0 && memcmp(y1, y2, sizeof y1) == 0, "dropout in two pieces at offsets = one call");
    long kept = 0;
    int rule = 1;
    for (int i = 0; i < N; i++) {
        kept += m1[i];
        rule &= m1[i] == (phx_philox_uniform(5, 1000 + (uint64_t)i) >= 0.3f);
        rule &= y1[i] == (m1[i] ? x[i] * (1.0f / 0.7f) : 0.0f);
    }
    ok(rule, "mask[i] = uniform(seed, offset + i) >= p; y = x mask / (1 - p)");
    ok(fabs((double)kept / N - 0.7) < 5 * sqrt(0.21 / N), "keep rate %.4f ~ 0.7", (double)kept / N);

    /* 26-30: errors */
    phx_tensor *it = phx_tensor_new(PHX_I32, 1, n, phx_cpu());
    is_int(phx_rng_uniform(r, it, 0, 1), PHX_EINVAL, "uniform into i32: EINVAL");
    like(phx_last_error(), "tensor is i32, expected f32, f16 or bf16", "message names the dtype");
    uint64_t off = phx_rng_offset(r);
    is_int(phx_rng_uniform(r, t, 2.0f, 1.0f), PHX_EINVAL, "lo > hi: EINVAL");
    is_int(phx_rng_normal(r, t, 0.0f, -1.0f), PHX_EINVAL, "std < 0: EINVAL");
    ok(phx_rng_offset(r) == off && phx_rng_uniform(NULL, t, 0, 1) == PHX_EINVAL,
       "failed draws leave the offset; NULL rng: EINVAL");

    phx_tensor *all[] = {t, p1, p2, h, it};
    for (int i = 0; i < 5; i++) phx_tensor_free(all[i]);
    phx_rng_free(r);
    phx_rng_free(r3);
    return done_testing();
}
