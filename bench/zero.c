/* ZeRO benchmark: per-rank memory and step time of a GPT trained with
 * AdamW under DDP, ZeRO-1 (sharded optimizer state) and ZeRO-2 (and
 * reduce-scattered gradients) at world 1, 2 and 4 on gloo (processes),
 * and hybrid ZeRO-1/2 (HSDP-1, HSDP-2: sharded within groups of --node
 * ranks made by phx_comm_split, replicated across them) where the world
 * is a multiple of --node above it.
 *
 * Per rank: the bytes of parameters, of gradients (the DDP buckets every
 * parameter's gradient is a view of; ZeRO-2 adds its reduce-scatter
 * output, one block per bucket: the rank's elements) and of optimizer state (the state
 * tensors the optimizer lists; for ZeRO the shard optimizer's; not the
 * all-gather buffers, at most 25 MiB per rank plus world times that),
 * the largest over the ranks, beside the peak RSS of
 * the rank's process (getrusage; each row runs in processes forked from a
 * small parent, whose pages they start with: compare RSS across rows). Step
 * time: the median of the timed steps on rank 0, then the median over R
 * rounds in which the modes alternate, with "vs DDP" the ratio of DDP's
 * time to the row's (> 1: faster than DDP) at the same world.
 *
 * usage: bench/zero [--steps N] [--layers L] [--width C] [--worlds "1 2 4"] [--rounds R] [--node N] */
#include <math.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#define BENCH_NAME "bench/zero"
#include "bench/bench-util.h"

enum { DDP, ZERO1, ZERO2, HSDP1, HSDP2, N_MODES };
static const char *const mode_names[N_MODES] = {"DDP", "ZeRO-1", "ZeRO-2", "HSDP-1", "HSDP-2"};

#define MAX_WORLD 8
#define MAX_STEPS 64
#define VOCAB 256
#define SEQ 64
#define ROWS 2 /* per rank */

typedef struct rank_out {
    double params, grads, state; /* bytes */
    double rss; /* bytes */
    double step_s[MAX_STEPS];
    int ok;
} rank_out;

typedef struct job {
    int mode, steps, node;
    int64_t layers, width;
    rank_out *out; /* (MAX_WORLD) shared */
} job;

static phx_optimizer *make_adamw(phx_module *m, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 1e-4;
    o.weight_decay = 0.1;
    phx_optimizer *opt = phx_adam_new(m, &o);
    if (opt) phx_adam_decay_matrices_only(opt, NULL);
    return opt;
}

static double state_bytes(phx_optimizer *o)
{
    const char **names;
    phx_tensor **ts;
    size_t n = phx_optimizer_state(o, &names, &ts);
    double b = 0;
    for (size_t i = 0; i < n; i++) b += (double)phx_tensor_nbytes(ts[i]);
    return b;
}

static int rank_main(int rank, void *arg)
{
    job *jb = arg;
    phx_comm *c = NULL;
    if (phx_comm_init(NULL, &c) != PHX_OK) {
        fprintf(stderr, "bench/zero: rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    rank = phx_comm_rank(c);
    rank_out *out = &jb->out[rank];
    phx_gpt_config cfg = PHX_GPT_CONFIG_INIT;
    cfg.vocab_size = VOCAB;
    cfg.block_size = SEQ;
    cfg.n_layer = jb->layers;
    cfg.n_head = 4;
    cfg.d_model = jb->width;
    phx_rng *rng = phx_rng_new(1);
    phx_module *m = phx_gpt_new(&cfg, rng);
    phx_rng_free(rng);
    if (!m) bench_die("phx_gpt_new");
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    if (!ddp) bench_die("phx_ddp_new");
    phx_optimizer *opt;
    phx_comm *shard = NULL, *replicate = NULL;
    if (jb->mode == DDP) {
        opt = make_adamw(ddp, NULL);
    } else {
        phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
        zo.stage = jb->mode == ZERO2 || jb->mode == HSDP2 ? 2 : 1;
        if (jb->mode == HSDP1 || jb->mode == HSDP2) {
            /* "Nodes" of jb->node consecutive ranks. */
            if (phx_comm_split(c, rank / jb->node, rank, &shard) != PHX_OK ||
                phx_comm_split(c, rank % jb->node, rank, &replicate) != PHX_OK)
                bench_die("phx_comm_split");
            zo.shard_comm = shard;
            zo.replicate_comm = replicate;
        }
        opt = phx_zero_optimizer_new(ddp, c, make_adamw, NULL, &zo);
    }
    if (!opt) bench_die("optimizer");
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    int64_t xs[2] = {ROWS, SEQ};
    phx_tensor *x = phx_tensor_new(PHX_I64, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 2, xs, phx_cpu());
    int64_t *hx = phx_tensor_data(x), *hy = phx_tensor_data(y);
    for (int64_t i = 0; i < ROWS * SEQ; i++) {
        hx[i] = (i * 7 + rank * 13) % VOCAB;
        hy[i] = (hx[i] * 3 + 1) % VOCAB;
    }
    for (int s = 0; s < 2 + jb->steps; s++) {
        phx_comm_barrier(c, NULL);
        double t0 = bench_now();
        bench_check(bench_step(ddp, opt, loss, x, y, NULL, NULL), "step");
        if (s >= 2) out->step_s[s - 2] = bench_now() - t0;
    }
    double params = 0;
    for (size_t i = 0; i < phx_module_num_params(ddp); i++)
        params += (double)phx_tensor_nbytes(phx_param_value(phx_module_param(ddp, i)));
    out->params = params;
    out->grads = params; /* every gradient is a view into a bucket of the same size */
    if (jb->mode == DDP) {
        out->state = state_bytes(opt);
    } else {
        out->state = state_bytes(phx_zero_inner(opt));
        /* ZeRO-2's reduce-scatter output: the rank's block of each bucket. */
        int srank = shard ? phx_comm_rank(shard) : rank;
        if ((jb->mode == ZERO2 || jb->mode == HSDP2) && phx_comm_size(shard ? shard : c) > 1)
            out->grads += (double)phx_zero_rank_numel(opt, srank) * sizeof(float);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    out->rss = (double)ru.ru_maxrss * 1024.0;
    out->ok = 1;
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(m);
    phx_comm_free(shard);
    phx_comm_free(replicate);
    phx_comm_free(c);
    return 0;
}

/* One run of mode at world in fresh processes (phx_spawn runs a world of
 * one in the calling process), so each peak RSS is that run's. Fills r
 * (per-rank maxima) and returns rank 0's median step in ms. */
typedef struct row_out {
    double params, grads, state, rss, ms;
} row_out;

static row_out run_row(job *jb, int world)
{
    memset(jb->out, 0, sizeof(rank_out) * MAX_WORLD);
    setenv("PHX_COMM", "gloo", 1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_PORT");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(phx_spawn(world, rank_main, jb) == PHX_OK ? 0 : 1);
    int wst = 0;
    if (pid < 0 || waitpid(pid, &wst, 0) != pid || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        bench_die("a run of the world failed");
    row_out r = {0};
    for (int q = 0; q < world; q++) {
        if (!jb->out[q].ok) bench_die("a rank reported nothing");
        r.params = fmax(r.params, jb->out[q].params);
        r.grads = fmax(r.grads, jb->out[q].grads);
        r.state = fmax(r.state, jb->out[q].state);
        r.rss = fmax(r.rss, jb->out[q].rss);
    }
    r.ms = 1e3 * bench_median(jb->out[0].step_s, jb->steps);
    return r;
}

int main(int argc, char **argv)
{
    int steps = 8, layers = 4, width = 256, rounds = 3, node = 2;
    const char *worlds = "1 2 4";
    bench_opt opts[] = {{"--steps", 'i', &steps},   {"--layers", 'i', &layers}, {"--width", 'i', &width},
                        {"--worlds", 's', &worlds}, {"--rounds", 'i', &rounds}, {"--node", 'i', &node}};
    if (bench_args(argc, argv, opts, sizeof opts / sizeof opts[0],
                   "[--steps N] [--layers L] [--width C] [--worlds \"1 2 4\"] [--rounds R] [--node N]"))
        return 2;
    if (steps < 1 || steps > MAX_STEPS) steps = 8;
    if (rounds < 1 || rounds > 16) rounds = 3;
    if (node < 1 || node > MAX_WORLD) node = 2;
    rank_out *out = mmap(NULL, sizeof(rank_out) * MAX_WORLD, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED) return 1;
    printf("GPT: %d layers, d_model %d, vocab %d, %d tokens x %d rows per rank, AdamW; gloo processes; median of %d "
           "steps, then median of %d rounds (the modes alternate)\n",
           layers, width, VOCAB, SEQ, ROWS, steps, rounds);
    printf("%-7s %5s %11s %10s %10s %10s %9s %9s %7s\n", "mode", "world", "params MiB", "grads MiB", "optim MiB",
           "total MiB", "RSS MiB", "step ms", "vs DDP");
    char buf[64];
    snprintf(buf, sizeof buf, "%s", worlds);
    const double MiB = 1024.0 * 1024.0;
    for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
        int world = atoi(tok);
        if (world < 1 || world > MAX_WORLD) continue;
        row_out rows[N_MODES];
        double ms[N_MODES][16];
        /* Hybrid rows where the world is several groups of node ranks. */
        int n_modes = world > node && world % node == 0 ? N_MODES : HSDP1;
        for (int k = 0; k < rounds; k++)
            for (int mode = 0; mode < n_modes; mode++) {
                job jb = {mode, steps, node, layers, width, out};
                row_out r = run_row(&jb, world);
                ms[mode][k] = r.ms;
                if (k == 0 || r.rss > rows[mode].rss) rows[mode] = r; /* the largest peak RSS of the rounds */
            }
        double ddp_ms = bench_median(ms[DDP], rounds);
        for (int mode = 0; mode < n_modes; mode++) {
            const row_out *r = &rows[mode];
            double t = mode == DDP ? ddp_ms : bench_median(ms[mode], rounds);
            printf("%-7s %5d %11.2f %10.2f %10.2f %10.2f %9.1f %9.1f %7.2f\n", mode_names[mode], world, r->params / MiB,
                   r->grads / MiB, r->state / MiB, (r->params + r->grads + r->state) / MiB, r->rss / MiB, t,
                   ddp_ms / t);
            char row[64];
            snprintf(row, sizeof row, "%s world %d", mode_names[mode], world);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "params", r->params / MiB);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "grads", r->grads / MiB);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "optim", r->state / MiB);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "rss", r->rss / MiB);
            bench_tsv(BENCH_NAME, "step ms", row, "ms", t);
        }
    }
    munmap(out, sizeof(rank_out) * MAX_WORLD);
    return 0;
}
