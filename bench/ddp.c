/* DDP benchmark: training steps/s at world size 2 of the seed model
 * (Linear(10, 1), batch 64, MSE, SGD) and the MLP 784-1024-1024-10 (ReLU,
 * batch 256 per rank, cross-entropy, SGD) on gloo (processes), threads and
 * mpi (this program started again under mpirun, when mpirun and the
 * plugin are there), beside PyTorch DDP over gloo with one thread per rank
 * (bench/torch/ddp.py, run in the same invocation; both sides use one
 * compute thread per rank unless PHX_NUM_THREADS says otherwise), and the
 * gain from overlapping bucket all-reduces with the backward (default
 * buckets against opts.no_overlap: one all-reduce after the backward).
 *
 * Each side runs R rounds (alternating, default 3) and reports the median
 * of its rounds; the targets line compares the medians.
 *
 * Communication hooks: the MLP on gloo with each built-in hook (allreduce,
 * fp16_compress, bf16_compress, PowerSGD rank 1 and 4 with start_iter 2,
 * so the timed steps are compressed): steps/s and the payload bytes the
 * hook's collectives carry per step and rank (phx_ddp_stats.bytes), median
 * of the rounds. --hooks-only prints just that table; BENCH_DDP_HOOK=name
 * runs one hook of it.
 *
 * BENCH_DDP_PROFILE=1: each rank prints where its step time goes (ms per
 * step, of which waiting for the all-reduces after the backward; bucket
 * all-reduces per step) on stderr. BENCH_DDP_FIRST_BUCKET and
 * BENCH_DDP_BUCKET (bytes) set phx_ddp_opts' first_bucket_bytes and
 * bucket_bytes for experiments (unset: the defaults, 1 and 25 MiB).
 *
 * usage: bench/ddp [--seconds S] [--world N] [--rounds R] [--torch SCRIPT | --no-torch] [--hooks-only] */
#include <math.h>
#include <unistd.h>
#define BENCH_NAME "bench/ddp"
#include "bench/bench-util.h"

enum { SEED, MLP };
static const char *model_names[] = {"seed", "mlp"};

/* Communication hooks of the hook table (HOOK_NONE: the wrapper's own path). */
enum { HOOK_NONE, HOOK_ALLREDUCE, HOOK_FP16, HOOK_BF16, HOOK_PSGD1, HOOK_PSGD4, N_HOOKS };
static const char *hook_names[] = {"none", "allreduce", "fp16_compress", "bf16_compress", "powerSGD r1", "powerSGD r4"};

typedef struct bench_arg {
    int model;
    int hook;
    bool no_overlap;
    double seconds;
    char out[256]; /* rank 0 writes steps/s here */
} bench_arg;

static phx_module *make_model(int which)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *m;
    if (which == SEED)
        m = phx_linear_new(10, 1, true, rng);
    else
        m = bench_mlp(rng, 1024, 1024);
    phx_rng_free(rng);
    return m;
}

static int rank_main(int rank, void *varg)
{
    bench_arg *a = varg;
    phx_comm *c = NULL;
    if (phx_comm_init(NULL, &c) != PHX_OK) {
        fprintf(stderr, "bench/ddp: rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    rank = phx_comm_rank(c);
    phx_module *model = make_model(a->model);
    phx_ddp_opts o = {.struct_size = sizeof(phx_ddp_opts), .no_overlap = a->no_overlap};
    /* bucket caps for experiments (bytes; unset: the defaults) */
    if (getenv("BENCH_DDP_FIRST_BUCKET")) o.first_bucket_bytes = strtoull(getenv("BENCH_DDP_FIRST_BUCKET"), NULL, 10);
    if (getenv("BENCH_DDP_BUCKET")) o.bucket_bytes = strtoull(getenv("BENCH_DDP_BUCKET"), NULL, 10);
    phx_module *ddp = phx_ddp_new(model, c, &o);
    phx_powersgd_state *ps = NULL;
    phx_status hs = PHX_OK;
    if (ddp && (a->hook == HOOK_PSGD1 || a->hook == HOOK_PSGD4)) {
        phx_powersgd_opts po = PHX_POWERSGD_OPTS_INIT;
        po.matrix_approximation_rank = a->hook == HOOK_PSGD1 ? 1 : 4;
        po.start_iter = 2; /* compressed from the third warm-up step on */
        ps = phx_powersgd_state_new(&po);
        hs = ps ? phx_ddp_register_comm_hook(ddp, phx_comm_hook_powersgd(), ps) : PHX_ENOMEM;
    } else if (ddp && a->hook != HOOK_NONE) {
        const phx_comm_hook *h = a->hook == HOOK_ALLREDUCE ? phx_comm_hook_allreduce()
            : a->hook == HOOK_FP16                         ? phx_comm_hook_fp16_compress()
                                                           : phx_comm_hook_bf16_compress();
        hs = phx_ddp_register_comm_hook(ddp, h, NULL);
    }
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    phx_optimizer *opt = phx_sgd_new(ddp, &so);
    int64_t batch = a->model == SEED ? 64 : 256, in = a->model == SEED ? 10 : 784;
    int64_t xs[2] = {batch, in}, ys[2] = {batch, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y;
    phx_rng *rng = phx_rng_new(1 + (uint64_t)rank);
    phx_rng_normal(rng, x, 0, 1);
    phx_loss *loss;
    if (a->model == SEED) {
        y = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
        phx_rng_normal(rng, y, 0, 1);
        loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    } else {
        int64_t *lab = malloc((size_t)batch * sizeof *lab);
        bench_labels(lab, batch, rank);
        y = phx_tensor_from_data(PHX_I64, 1, &batch, lab);
        free(lab);
        loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    }
    int rc = ddp && opt && x && y && loss && hs == PHX_OK ? 0 : 1;
#define STEP() \
    do { \
        if (bench_step(ddp, opt, loss, x, y, NULL, NULL) != PHX_OK) rc = 1; \
    } while (0)
    for (int i = 0; i < 3 && !rc; i++) STEP();
    /* Rank 0 sizes the run from a short timed one; all ranks run that many. */
    int64_t one = 1;
    phx_tensor *n_t = phx_tensor_zeros(PHX_F32, 1, &one, phx_cpu());
    phx_comm_barrier(c, NULL);
    double t = bench_now();
    int k = a->model == SEED ? 200 : 5; /* the same count on every rank */
    for (int i = 0; i < k && !rc; i++) STEP();
    float n = (float)(a->seconds / ((bench_now() - t) / k));
    n = n < 3 ? 3 : n;
    phx_tensor_fill(n_t, n);
    phx_comm_broadcast(c, n_t, 0, NULL);
    double nv;
    phx_tensor_get(n_t, 0, &nv);
    phx_comm_barrier(c, NULL);
    phx_ddp_stats s0 = PHX_DDP_STATS_INIT, s1 = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(ddp, &s0);
    t = bench_now();
    for (int i = 0; i < (int)nv && !rc; i++) STEP();
    phx_comm_barrier(c, NULL);
    double sps = (int)nv / (bench_now() - t);
    phx_ddp_get_stats(ddp, &s1);
    double bytes_per_step = (double)(s1.bytes - s0.bytes) / (int)nv;
    if (rc) fprintf(stderr, "bench/ddp: rank %d: %s\n", rank, phx_last_error());
    /* BENCH_DDP_PROFILE: where the step time goes, per rank (stderr) */
    if (getenv("BENCH_DDP_PROFILE") && !rc && nv > 0)
        fprintf(stderr,
                "bench/ddp profile: %s %s rank %d: %.2f ms/step, of which %.2f ms waiting for all-reduces "
                "after the backward; %.1f bucket all-reduces/step (%.1f issued during the backward), %.0f "
                "bytes/step\n",
                getenv("PHX_COMM") ? getenv("PHX_COMM") : "?", model_names[a->model], rank, 1e3 / sps,
                1e3 * (s1.wait_s - s0.wait_s) / nv, (double)(s1.launches - s0.launches) / nv,
                (double)(s1.early_launches - s0.early_launches) / nv, bytes_per_step);
    if (rank == 0 && !rc) {
        FILE *f = fopen(a->out, "w");
        if (f) {
            fprintf(f, "%.3f %.0f\n", sps, bytes_per_step);
            fclose(f);
        }
    }
    phx_tensor_free(n_t);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_rng_free(rng);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_powersgd_state_free(ps);
    phx_module_free(model);
    phx_comm_free(c);
    return rc;
}

/* Under mpirun (measure() for mpi): one rank of the world; the run is
 * described by BENCH_DDP_MODEL, BENCH_DDP_NO_OVERLAP, BENCH_DDP_SECONDS and
 * BENCH_DDP_OUT. */
static int launched(void)
{
    bench_arg a = {.model = atoi(getenv("BENCH_DDP_MODEL") ? getenv("BENCH_DDP_MODEL") : "0"),
                   .no_overlap = getenv("BENCH_DDP_NO_OVERLAP") != NULL,
                   .seconds = atof(getenv("BENCH_DDP_SECONDS") ? getenv("BENCH_DDP_SECONDS") : "2")};
    snprintf(a.out, sizeof a.out, "%s", getenv("BENCH_DDP_OUT") ? getenv("BENCH_DDP_OUT") : "/dev/null");
    return rank_main(atoi(getenv("OMPI_COMM_WORLD_RANK")), &a);
}

/* mpi: this program under mpirun (as root in a container mpirun wants to
 * be told), unbound as the gloo and PyTorch ranks are (--bind-to none, as
 * bench/allreduce): mpirun's default for 2 ranks binds each to one core,
 * where its comm thread's waits take turns with its own backward. */
static int spawn_mpi(const char *self, int world, const bench_arg *a)
{
    char cmd[2048];
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        fprintf(stderr, "bench/ddp: mpirun not found: no mpi rows\n");
        return 1;
    }
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 BENCH_DDP_MODEL=%d %s "
             "BENCH_DDP_SECONDS=%g BENCH_DDP_OUT='%s' mpirun --oversubscribe --bind-to none -np %d '%s'",
             a->model, a->no_overlap ? "BENCH_DDP_NO_OVERLAP=1" : "", a->seconds, a->out, world, self);
    return system(cmd) != 0;
}

static const char *g_self; /* argv[0], for mpirun */

/* steps/s of one configuration, or -1; *bytes (when given): payload bytes
 * all-reduced per step. */
static double measure_hook(const char *backend, int world, int model, bool no_overlap, int hook, double seconds,
                           double *bytes)
{
    bench_arg a = {.model = model, .hook = hook, .no_overlap = no_overlap, .seconds = seconds};
    snprintf(a.out, sizeof a.out, "/tmp/phx-bench-ddp-%d.txt", (int)getpid());
    remove(a.out);
    setenv("PHX_COMM", backend, 1);
    fflush(stdout);
    if (!strcmp(backend, "mpi")) {
        if (spawn_mpi(g_self, world, &a)) return -1;
    } else if (phx_spawn(world, rank_main, &a) != PHX_OK) {
        fprintf(stderr, "bench/ddp: %s %s: %s\n", backend, model_names[model], phx_last_error());
        return -1;
    }
    double v = -1, by = -1;
    FILE *f = fopen(a.out, "r");
    if (f) {
        if (fscanf(f, "%lf %lf", &v, &by) != 2) v = -1;
        fclose(f);
    }
    remove(a.out);
    if (bytes) *bytes = by;
    return v;
}

static double measure(const char *backend, int world, int model, bool no_overlap, double seconds)
{
    return measure_hook(backend, world, model, no_overlap, HOOK_NONE, seconds, NULL);
}

/* The hook table: the MLP on gloo with each hook, medians of the rounds. */
static void hook_table(int world, int rounds, double seconds)
{
    double sps[N_HOOKS], bytes[N_HOOKS], *col = malloc((size_t)rounds * sizeof *col),
                                         *colb = malloc((size_t)rounds * sizeof *colb);
    double(*runs)[N_HOOKS][2] = calloc((size_t)rounds, sizeof *runs);
    if (!col || !colb || !runs) return;
    /* BENCH_DDP_HOOK=name: that hook only (profiling). */
    const char *only = getenv("BENCH_DDP_HOOK");
    for (int r = 0; r < rounds; r++)
        for (int h = 0; h < N_HOOKS; h++)
            runs[r][h][0] = only && strcmp(only, hook_names[h])
                ? -1
                : measure_hook("gloo", world, MLP, false, h, seconds, &runs[r][h][1]);
    for (int h = 0; h < N_HOOKS; h++) {
        for (int r = 0; r < rounds; r++) col[r] = runs[r][h][0], colb[r] = runs[r][h][1];
        sps[h] = bench_median(col, rounds);
        bytes[h] = bench_median(colb, rounds);
    }
    printf("DDP communication hooks, mlp, gloo, world %d (median of %d rounds; bytes: payload all-reduced per step "
           "and rank)\n",
           world, rounds);
    printf("%-14s %10s %10s %14s %10s\n", "hook", "steps/s", "ms/step", "bytes/step", "vs none");
    for (int h = 0; h < N_HOOKS; h++) {
        if (sps[h] <= 0) {
            printf("%-14s %10s\n", hook_names[h], "failed");
            continue;
        }
        printf("%-14s %10.2f %10.2f %14.0f %9.2fx\n", hook_names[h], sps[h], 1e3 / sps[h], bytes[h],
               sps[0] > 0 ? sps[h] / sps[0] : 0);
        char row[64];
        snprintf(row, sizeof row, "mlp gloo %s", hook_names[h]);
        bench_tsv(BENCH_NAME, "comm hooks", row, "steps/s", sps[h]);
        bench_tsv(BENCH_NAME, "comm hooks", row, "bytes/step", bytes[h]);
    }
    free(runs);
    free(col);
    free(colb);
}

/* Runs the PyTorch counterpart; fills torch_sps[model]. */
static void run_torch(const char *script, int world, double seconds, double *torch_sps)
{
    char cmd[1024], line[256];
    snprintf(cmd, sizeof cmd, "%s %s --world %d --seconds %g", bench_python(), script, world, seconds);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    while (fgets(line, sizeof line, p)) {
        char name[32];
        int w;
        double v;
        if (sscanf(line, "torch-ddp %31s %d %lf", name, &w, &v) == 3)
            for (int m = 0; m < 2; m++)
                if (!strcmp(name, model_names[m])) torch_sps[m] = v;
    }
    pclose(p);
}

int main(int argc, char **argv)
{
    double seconds = 2;
    int world = 2, rounds = 3;
    const char *all_tables = "yes"; /* --hooks-only sets it to NULL */
    const char *script = "bench/torch/ddp.py";
    const bench_opt opts[] = {{"--seconds", 'd', &seconds}, {"--world", 'i', &world},
                              {"--rounds", 'i', &rounds},   {"--torch", 's', &script},
                              {"--no-torch", 'n', &script}, {"--hooks-only", 'n', &all_tables}};
    if (getenv("OMPI_COMM_WORLD_RANK")) return launched();
    g_self = argv[0];
    if (bench_args(argc, argv, opts, 6,
                   "[--seconds S] [--world N] [--rounds R] [--torch SCRIPT | --no-torch] [--hooks-only]"))
        return 2;
    if (seconds <= 0 || world < 1 || rounds < 1) {
        fprintf(stderr, "bench/ddp: --seconds must be > 0, --world and --rounds >= 1\n");
        return 2;
    }
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    /* One compute thread per rank, as the PyTorch side. */
    setenv("PHX_NUM_THREADS", "1", 0);
    if (!all_tables) {
        hook_table(world, rounds, seconds);
        return 0;
    }
    const char *backends[] = {"gloo", "threads", "mpi"};
    enum { NB = 3, MPI = 2 };
    double sps[NB][2], no_ov[NB], torch_sps[2];
    if (script && access(script, R_OK) != 0) {
        fprintf(stderr, "bench/ddp: %s not found: no PyTorch column\n", script);
        script = NULL;
    }
    /* Rounds alternate both sides and each reports the median of its
     * rounds, so a busy moment on a shared machine favours neither side
     * and one lucky round does not decide. runs[b][0..1]: the models,
     * [2]: the MLP without overlap; b == NB: PyTorch. */
    double(*runs)[NB + 1][3] = calloc((size_t)rounds, sizeof *runs), *col = malloc((size_t)rounds * sizeof *col);
    if (!runs || !col) return 1;
    for (int round = 0; round < rounds; round++) {
        for (int b = 0; b < NB; b++) {
            for (int m = 0; m < 2; m++) runs[round][b][m] = measure(backends[b], world, m, false, seconds);
            runs[round][b][2] = measure(backends[b], world, MLP, true, seconds);
        }
        double t[2] = {-1, -1};
        if (script) run_torch(script, world, seconds, t);
        runs[round][NB][0] = t[0];
        runs[round][NB][1] = t[1];
    }
    for (int b = 0; b <= NB; b++)
        for (int k = 0; k < 3; k++) {
            for (int r = 0; r < rounds; r++) col[r] = runs[r][b][k];
            double v = bench_median(col, rounds);
            if (b == NB && k < 2)
                torch_sps[k] = v;
            else if (b < NB && k < 2)
                sps[b][k] = v;
            else if (b < NB)
                no_ov[b] = v;
        }
    free(runs);
    free(col);

    printf("DDP, world %d (steps/s, median of %d rounds; PyTorch DDP over gloo, one thread per rank)\n", world, rounds);
    printf("%-6s %-8s %12s %12s %8s\n", "model", "backend", "phalanx", "torch-ddp", "ratio");
    for (int m = 0; m < 2; m++)
        for (int b = 0; b < NB; b++) {
            if (sps[b][m] < 0) continue;
            printf("%-6s %-8s %12.1f", model_names[m], backends[b], sps[b][m]);
            char row[64];
            snprintf(row, sizeof row, "%s %s", model_names[m], backends[b]);
            bench_tsv_ratio(BENCH_NAME, row, sps[b][m], torch_sps[m]);
            bench_vs(sps[b][m], torch_sps[m], 12);
            putchar('\n');
        }
    printf("overlap gain, mlp (medians; buckets all-reduced during backward vs one all-reduce after it):\n");
    for (int b = 0; b < NB; b++)
        if (sps[b][MLP] > 0 && no_ov[b] > 0)
            printf("  %-8s %8.2f vs %8.2f steps/s: %.2fx\n", backends[b], sps[b][MLP], no_ov[b],
                   sps[b][MLP] / no_ov[b]);
    if (torch_sps[SEED] > 0 && torch_sps[MLP] > 0)
        printf("targets (medians): seed >= 10x torch: %s (gloo %.1fx); mlp >= 1.2x torch: %s (gloo %.2fx)\n",
               sps[0][SEED] >= 10 * torch_sps[SEED] ? "met" : "NOT met", sps[0][SEED] / torch_sps[SEED],
               sps[0][MLP] >= 1.2 * torch_sps[MLP] ? "met" : "NOT met", sps[0][MLP] / torch_sps[MLP]);
    if (torch_sps[SEED] > 0 && torch_sps[MLP] > 0 && sps[MPI][SEED] > 0 && sps[MPI][MLP] > 0)
        printf("targets, mpi: seed >= 20x torch: %s (%.1fx); mlp >= 1.5x torch: %s (%.2fx)\n",
               sps[MPI][SEED] >= 20 * torch_sps[SEED] ? "met" : "NOT met", sps[MPI][SEED] / torch_sps[SEED],
               sps[MPI][MLP] >= 1.5 * torch_sps[MLP] ? "met" : "NOT met", sps[MPI][MLP] / torch_sps[MLP]);
    hook_table(world, rounds, seconds);
    return 0;
}
