/* phx_chunk_sizes against torch.chunk (t/ref/dp_chunk.txt, written by
 * bench/torch/chunk.py), and the DataParallel wrapper really splitting a
 * batch that way: each replica sees its rows, the output comes back whole
 * and in order on the output device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void check_table(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/t/ref/dp_chunk.txt", top ? top : ".");
    FILE *f = fopen(path, "r");
    if (!ok(f != NULL, "open %s", path)) return;
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        long long b, n, k;
        int used;
        if (sscanf(line, "%lld %lld %lld%n", &b, &n, &k, &used) != 3) {
            ok(0, "parse '%s'", line);
            continue;
        }
        int64_t want[8] = {0}, got[8] = {0};
        const char *p = line + used;
        for (long long i = 0; i < k && i < 8; i++) {
            char *end;
            want[i] = strtoll(p, &end, 10);
            p = end;
        }
        size_t gk = phx_chunk_sizes(b, (size_t)n, got);
        int same = gk == (size_t)k && memcmp(want, got, sizeof want) == 0;
        if (!ok(same, "B=%lld n=%lld: %lld chunks as torch.chunk", b, n, k))
            diag("  expected %lld chunks %lld %lld %lld %lld, got %zu: %lld %lld %lld %lld", k, (long long)want[0],
                 (long long)want[1], (long long)want[2], (long long)want[3], gk, (long long)got[0], (long long)got[1],
                 (long long)got[2], (long long)got[3]);
        cases++;
    }
    fclose(f);
    is_int(cases, 20, "the table covers B in {1,2,5,10,64} x n in {1,2,3,4}");
}

/* Linear(4,4) with W = I, b = 0: y is x exactly, so any misplaced row shows. */
static phx_module *identity_model(void)
{
    phx_module *m = phx_linear_new(4, 4, true, NULL);
    float w[16] = {0}, b[4] = {0};
    for (int i = 0; i < 4; i++) w[i * 4 + i] = 1.0f;
    phx_tensor_from_host(phx_param_value(phx_module_find_param(m, "weight")), w);
    phx_tensor_from_host(phx_param_value(phx_module_find_param(m, "bias")), b);
    return m;
}

static void check_order(size_t n, int64_t batch)
{
    phx_module *m = identity_model();
    phx_device devs[4] = {phx_cpu(), phx_cpu(), phx_cpu(), phx_cpu()};
    phx_device out = phx_cpu();
    phx_module *dp = phx_dp_new(m, devs, n, &out);
    int64_t shape[2] = {batch, 4};
    float *xs = malloc(sizeof(float) * (size_t)(batch * 4)), *ys = malloc(sizeof(float) * (size_t)(batch * 4));
    for (int64_t i = 0; i < batch * 4; i++) xs[i] = (float)i + 0.25f;
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 2, shape, xs), *y = NULL;
    phx_status st = phx_module_forward(dp, x, &y);
    int good = st == PHX_OK && y && phx_tensor_ndim(y) == 2 && phx_tensor_dim(y, 0) == batch &&
        phx_tensor_dim(y, 1) == 4 && phx_device_equal(phx_tensor_device(y), out);
    if (good) {
        phx_tensor_to_host(y, ys);
        good = memcmp(xs, ys, sizeof(float) * (size_t)(batch * 4)) == 0;
    }
    if (!ok(good, "DataParallel(%zu) over batch %lld: output (%lld, 4) on cpu, every row in place", n, (long long)batch,
            (long long)batch))
        diag("  status %s: %s", phx_status_name(st), phx_last_error());
    free(xs);
    free(ys);
    phx_tensor_free(x);
    phx_module_free(dp);
    phx_module_free(m);
}

int main(void)
{
    check_table();
    int64_t sizes[4] = {-1, -1, -1, -1};
    is_int(phx_chunk_sizes(0, 4, sizes), 0, "batch 0: no chunks");
    like(phx_last_error(), "batch 0", "batch 0: the error names the batch");
    is_int(phx_chunk_sizes(5, 0, sizes), 0, "0 chunks asked: none made");
    const int64_t batches[] = {1, 2, 5, 10, 64};
    for (size_t n = 1; n <= 4; n++)
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) check_order(n, batches[b]);
    return done_testing();
}
