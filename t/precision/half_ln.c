/* LayerNorm's f16 weight and bias gradients across threads
 * (kernels/cpu/layernorm.c): on 2 threads dw and db are summed column
 * range by column range after the rows' parts, on AVX-512 with x and dy
 * widened in registers. They must give the bits of 1 thread (the fused
 * serial pass) and of the compiled element-by-element loop they replaced
 * (PHX_CPU_F16_BLOCKS=1), for widths with and without a 16-lane tail;
 * dw and db are also checked against float64 sums, so a loop that drops or
 * repeats columns fails even where the paths agree. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "t/core-util.h"

enum { LR = 1000, MAXC = 100 };

static phx_status run(int64_t cols, const uint16_t *x, const uint16_t *dy, const float *w, const float *b, uint16_t *y,
                      uint16_t *dx, float *mean, float *rstd, float *dw, float *db)
{
    for (int64_t c = 0; c < cols; c++) dw[c] = 0.25f, db[c] = -0.5f;
    phx_status st = px_cpu_layernorm_forward(0, LR, cols, 1e-5f, x, w, b, y, mean, rstd, PHX_F16);
    if (st == PHX_OK) st = px_cpu_layernorm_backward(0, LR, cols, x, w, mean, rstd, dy, dx, dw, db, PHX_F16);
    return st;
}

int main(void)
{
    static const int64_t widths[] = {64, 100, 33};
    plan(9);
    if (px_cpu_isa() != PX_ISA_AVX512) diag("the kernels do not use AVX-512 here: all runs take the compiled loop");
    size_t n = (size_t)LR * MAXC;
    uint16_t *x = malloc(n * 2), *dy = malloc(n * 2), *y[3], *dx[3];
    float w[MAXC], b[MAXC], *mean[3], *rstd[3], dw[3][MAXC], db[3][MAXC];
    for (int t = 0; t < 3; t++) {
        y[t] = malloc(n * 2), dx[t] = malloc(n * 2);
        mean[t] = malloc(LR * sizeof(float)), rstd[t] = malloc(LR * sizeof(float));
        if (!y[t] || !dx[t] || !mean[t] || !rstd[t]) {
            diag("out of memory");
            return 1;
        }
    }
    if (!x || !dy) {
        diag("out of memory");
        return 1;
    }
    for (size_t i = 0; i < n; i++) x[i] = phx_f32_to_f16(cu_frand(-3, 3)), dy[i] = phx_f32_to_f16(cu_frand(-1, 1));
    for (int c = 0; c < MAXC; c++) w[c] = cu_frand(0.5f, 1.5f), b[c] = cu_frand(-1, 1);
    for (int wi = 0; wi < 3; wi++) {
        int64_t cols = widths[wi];
        size_t m = (size_t)(LR * cols);
        phx_status st = PHX_OK;
        for (int t = 0; t < 3 && st == PHX_OK; t++) { /* 1 thread, 2 threads, 2 threads on the old loop */
            phx_set_num_threads(t == 0 ? 1 : 2);
            if (t == 2) setenv("PHX_CPU_F16_BLOCKS", "1", 1);
            st = run(cols, x, dy, w, b, y[t], dx[t], mean[t], rstd[t], dw[t], db[t]);
            unsetenv("PHX_CPU_F16_BLOCKS");
        }
        phx_set_num_threads(1);
        if (st != PHX_OK) diag("layernorm: %s", phx_last_error());
        int same1 = 1, same_old = 1;
        for (int t = 1; t < 3; t++) {
            int s = st == PHX_OK && !memcmp(y[0], y[t], m * 2) && !memcmp(dx[0], dx[t], m * 2) &&
                !memcmp(mean[0], mean[t], LR * 4) && !memcmp(rstd[0], rstd[t], LR * 4) &&
                !memcmp(dw[0], dw[t], (size_t)cols * 4) && !memcmp(db[0], db[t], (size_t)cols * 4);
            if (t == 1)
                same1 = s;
            else
                same_old = s;
        }
        int far = 0;
        for (int64_t c = 0; c < cols && st == PHX_OK; c++) {
            double sw = 0.25, sb = -0.5;
            for (int64_t r = 0; r < LR; r++) {
                double d = phx_f16_to_f32(dy[r * cols + c]);
                sw += d * ((phx_f16_to_f32(x[r * cols + c]) - (double)mean[1][r]) * rstd[1][r]);
                sb += d;
            }
            if (fabs(dw[1][c] - sw) > 1e-4 * (1 + fabs(sw)) || fabs(db[1][c] - sb) > 1e-4 * (1 + fabs(sb))) far++;
        }
        ok(same1, "layernorm f16 %d x %lld on 2 threads: y, statistics, dx, dw, db bitwise those of 1 thread", LR,
           (long long)cols);
        ok(same_old, "layernorm f16 %d x %lld on 2 threads: bitwise the compiled f16 loop's", LR, (long long)cols);
        ok(st == PHX_OK && far == 0, "layernorm f16 %d x %lld: dw, db within 1e-4 of float64 (%d columns off)", LR,
           (long long)cols, far);
    }
    free(x), free(dy);
    for (int t = 0; t < 3; t++) free(y[t]), free(dx[t]), free(mean[t]), free(rstd[t]);
    return done_testing();
}
