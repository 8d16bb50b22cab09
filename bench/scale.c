/* DDP scaling on paper. An alpha-beta model of the all-reduce, fitted from
 * this machine's measured all-reduces, and the measured forward, backward
 * and optimizer times of the GPT and CNN steps of bench/step predict the
 * efficiency of a DDP step at 8, 64 and 512 ranks on 25 and 100 GB/s
 * networks, and the bucket size that maximises it (doc/maint/bench.md, "DDP
 * scaling on paper"):
 *
 *   all-reduce of n bytes over p ranks, ring:  2(p-1) a + 2 (p-1)/p n/B
 *                                       tree:  2 log2(p) a + 2 n/B
 *   (the faster of the two for each bucket, as NCCL's tuner picks)
 *
 *   a: the per-message latency, fitted at world 2 (a ring of 2 is 2 steps:
 *      the fastest of the 4 B..1 KiB all-reduces, halved: on a shared
 *      machine the fastest is the one least disturbed);
 *   B: the network's (25 or 100 GB/s), or this machine's (the least-squares
 *      slope of time over bytes for 1..64 MiB: a ring of 2 moves n bytes).
 *
 * A step: forward Tf, backward Tb with the gradient bytes G ready at an
 * even rate, buckets of b bytes all-reduced one after another as each
 * fills (the last when backward ends), then the optimizer To. The bucket
 * sizes tried are 64 KiB, 128 KiB, ... up to twice G; of those within
 * 0.1 % of the best efficiency the largest is reported (fewer messages,
 * which the model does not charge beyond a):
 *
 *   end_k = max(ready_k, end_{k-1}) + T_ar(bucket k)
 *   step = Tf + max(Tb, end_last) + To;  efficiency = (Tf + Tb + To) / step
 *
 *   bench/scale [--backend gloo|threads] [--seconds S]
 */
#define BENCH_NAME "bench/scale"
#include <math.h>
#include <sys/mman.h>
#include "bench/bench-util.h"
#include "bench/bench-models.h"

#define N_SIZES 12 /* 4 B, 16 B, ... 4^11 * 4 B = 16 MiB, then 64 MiB */

typedef struct sweep {
    size_t bytes[N_SIZES + 1];
    double s[N_SIZES + 1]; /* rank 0's seconds per all-reduce */
    int n;
} sweep;

static sweep *g_sweep; /* shared with the ranks (mmap) */

/* One rank of the world-2 sweep: each size warmed up, then the best of 3
 * timed loops between barriers. */
static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c;
    bench_check(phx_comm_init(NULL, &c), "phx_comm_init");
    int64_t maxn = (64 << 20) / 4;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &maxn, phx_cpu());
    bench_check(t ? phx_tensor_fill(t, 1.0) : PHX_ENOMEM, "buffer");
    int k = 0;
    for (size_t bytes = 4; bytes <= (64u << 20); bytes *= 4, k++) {
        int64_t cnt = (int64_t)(bytes / 4);
        phx_tensor *v = phx_tensor_view(t, 0, 1, &cnt);
        int it = bytes >= (1u << 20) ? 4 : 200;
        phx_status st = phx_comm_allreduce(c, v, PHX_SUM, NULL);
        double best = 1e30;
        for (int rep = 0; rep < 3 && !st; rep++) {
            st = phx_comm_barrier(c, NULL);
            double t0 = bench_now();
            for (int i = 0; i < it && !st; i++) st = phx_comm_allreduce(c, v, PHX_SUM, NULL);
            double dt = (bench_now() - t0) / it;
            if (dt < best) best = dt;
        }
        phx_tensor_free(v);
        bench_check(st, "all-reduce");
        if (rank == 0) {
            g_sweep->bytes[k] = bytes;
            g_sweep->s[k] = best;
            g_sweep->n = k + 1;
        }
    }
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

typedef struct fit {
    double a; /* seconds per message step */
    double inv_b; /* seconds per byte */
} fit;

static fit fit_sweep(const sweep *w)
{
    double lat = 1e30;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int nb = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->bytes[i] <= 1024 && w->s[i] < lat) lat = w->s[i];
        if (w->bytes[i] >= (1u << 20)) {
            double x = (double)w->bytes[i], y = w->s[i];
            sx += x, sy += y, sxx += x * x, sxy += x * y, nb++;
        }
    }
    fit f = {lat < 1e30 ? lat / 2 : 0, 0};
    if (nb >= 2) f.inv_b = (nb * sxy - sx * sy) / (nb * sxx - sx * sx);
    if (!(f.inv_b > 0)) f.inv_b = w->n ? w->s[w->n - 1] / (double)w->bytes[w->n - 1] : 0;
    return f;
}

/* The model's all-reduce time of n bytes over p ranks. */
static double t_allreduce(double n, int p, double a, double inv_b)
{
    double ring = 2.0 * (p - 1) * a + 2.0 * (p - 1) / p * n * inv_b;
    double tree = 2.0 * log2((double)p) * a + 2.0 * n * inv_b;
    return ring < tree ? ring : tree;
}

/* The step time of the overlap model with buckets of b bytes. */
static double step_time(double tf, double tb, double to, double g, double b, int p, double a, double inv_b)
{
    double end = 0;
    for (double done = 0; done < g; done += b) {
        double n = g - done < b ? g - done : b;
        double ready = tb * (done + n) / g;
        end = (end > ready ? end : ready) + t_allreduce(n, p, a, inv_b);
    }
    return tf + (tb > end ? tb : end) + to;
}

typedef struct split {
    double tf, tb, to; /* seconds */
    double grad_bytes;
} split;

/* The median forward (with the loss), backward and optimizer times of a
 * bench/step model over `seconds`, one process. */
static split measure_model(const char *name, double seconds)
{
    setup s = make(name);
    double tf[512], tb[512], to[512];
    int n = 0;
    double t_end = bench_now() + seconds;
    for (int i = 0; n < 512 && (i < 3 || bench_now() < t_end || n < 5); i++) {
        phx_tensor *out = NULL;
        float l;
        bench_check(phx_optimizer_zero_grad(s.opt), "zero_grad");
        double t0 = bench_now();
        bench_check(phx_module_forward(s.m, s.x, &out), "forward");
        bench_check(phx_loss_forward(s.loss, out, s.y, &l), "loss");
        double t1 = bench_now();
        bench_check(phx_module_backward(s.m, phx_loss_grad(s.loss), NULL), "backward");
        double t2 = bench_now();
        bench_check(phx_optimizer_step(s.opt), "step");
        double t3 = bench_now();
        if (i >= 3) tf[n] = t1 - t0, tb[n] = t2 - t1, to[n] = t3 - t2, n++;
    }
    split r = {bench_median(tf, n), bench_median(tb, n), bench_median(to, n), 0};
    for (size_t i = 0; i < phx_module_num_params(s.m); i++)
        r.grad_bytes += (double)phx_tensor_nbytes(phx_param_value(phx_module_param(s.m, i)));
    setup_free(&s);
    return r;
}

int main(int argc, char **argv)
{
    const char *backend = "gloo";
    double seconds = 2.0;
    const bench_opt opts[] = {{"--backend", 's', &backend}, {"--seconds", 'd', &seconds}};
    if (bench_args(argc, argv, opts, 2, "[--backend gloo|threads] [--seconds S]")) return 2;
    setenv("PHX_LOG", "error", 0);
    g_sweep = mmap(NULL, sizeof *g_sweep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sweep == MAP_FAILED) return 1;
    setenv("PHX_COMM", backend, 1);
    bench_check(phx_spawn(2, rank_main, NULL), "the world-2 all-reduce sweep");
    fit f = fit_sweep(g_sweep);
    printf("all-reduce, %s world 2 (rank 0's time per call):\n", backend);
    for (int i = 0; i < g_sweep->n; i++)
        printf("  %10zu B  %10.1f us  model %10.1f us\n", g_sweep->bytes[i], g_sweep->s[i] * 1e6,
               t_allreduce((double)g_sweep->bytes[i], 2, f.a, f.inv_b) * 1e6);
    printf("fitted: a = %.2f us per message step, B = %.2f GB/s (this machine, %s)\n", f.a * 1e6, 1e-9 / f.inv_b,
           backend);
    bench_tsv("bench/scale", "fit", backend, "alpha us", f.a * 1e6);
    bench_tsv("bench/scale", "fit", backend, "beta GB/s", 1e-9 / f.inv_b);

    const char *models[] = {"gpt", "cnn"};
    const int ranks[] = {8, 64, 512};
    const double nets[] = {25, 100};
    printf("\n%-4s %9s %7s %7s %7s | %9s %5s | %13s | %9s %6s\n", "", "grad MiB", "Tf ms", "Tb ms", "To ms", "network",
           "ranks", "eff (25 MiB)", "best MiB", "eff");
    for (int m = 0; m < 2; m++) {
        split s = measure_model(models[m], seconds);
        for (int ni = 0; ni < 2; ni++)
            for (int ri = 0; ri < 3; ri++) {
                int p = ranks[ri];
                double inv_b = 1.0 / (nets[ni] * 1e9), base = s.tf + s.tb + s.to;
                double e25 = base / step_time(s.tf, s.tb, s.to, s.grad_bytes, 25.0 * (1 << 20), p, f.a, inv_b);
                double eff[40], best = 0, best_b = 0;
                int nb = 0;
                for (double b = 64 * 1024; nb < 40 && (b <= 2 * s.grad_bytes || nb == 0); b *= 2, nb++) {
                    eff[nb] = base / step_time(s.tf, s.tb, s.to, s.grad_bytes, b, p, f.a, inv_b);
                    if (eff[nb] > best) best = eff[nb];
                }
                for (int i = 0; i < nb; i++)
                    if (eff[i] >= best * 0.999) best_b = 64.0 * 1024 * pow(2, i);
                printf("%-4s %9.2f %7.2f %7.2f %7.2f | %4.0f GB/s %5d | %12.1f%% | %9.3f %5.1f%%\n", models[m],
                       s.grad_bytes / (1 << 20), s.tf * 1e3, s.tb * 1e3, s.to * 1e3, nets[ni], p, 100 * e25,
                       best_b / (1 << 20), 100 * best);
                char tab[64], row[32];
                snprintf(tab, sizeof tab, "efficiency %s %.0f GB/s", models[m], nets[ni]);
                snprintf(row, sizeof row, "%d ranks", p);
                bench_tsv("bench/scale", tab, row, "25 MiB buckets", e25);
                bench_tsv("bench/scale", tab, row, "best buckets", best);
                bench_tsv("bench/scale", tab, row, "best bucket MiB", best_b / (1 << 20));
            }
    }
    printf("(a from this machine's %s; B the network's; the GPT on 16x128 tokens, the CNN on 128 images, "
           "one process's measured times; doc/maint/bench.md)\n",
           backend);
    return 0;
}
