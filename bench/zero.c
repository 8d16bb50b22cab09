/* ZeRO benchmark: per-rank memory and step time of a GPT trained with
 * AdamW under DDP, ZeRO-1 (sharded optimizer state), ZeRO-2 (and
 * reduce-scattered gradients) and ZeRO-3 (phx_fsdp_new, one unit per
 * transformer block: with prefetch, without it ("Z3 nopf") and
 * SHARD_GRAD_OP ("Z3 SGO")) at world 1, 2 and 4 on gloo (processes),
 * and hybrid ZeRO-1/2 (HSDP-1, HSDP-2: sharded within groups of --node
 * ranks made by phx_comm_split, replicated across them) where the world
 * is a multiple of --node above it. Each rank's step is --rows sequences
 * of 64 tokens (default 2: a step that communication dominates).
 * --modes "ZeRO-2,Z3 nopf" runs only those rows (comma-separated names as
 * the table prints them; DDP always runs: the ratios are to it). --tcp
 * sets PHX_GLOO_SHM=0 in the ranks: the collectives go over TCP (loopback)
 * as between hosts, where a gather leaves the CPU free for compute (the
 * case prefetch is for), instead of gloo's same-host shared memory, whose
 * copies are CPU work themselves.
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
 * time to the row's (> 1: faster than DDP) at the same world; "CPU ms" is
 * rank 0's CPU time (user + system, all its threads) per timed step, the
 * steadier figure on a machine shared with other jobs.
 *
 * --max-rank-bytes B: instead, for each world and mode, the largest GPT
 * whose per-rank bytes of parameters + gradients + optimizer state fit B:
 * the widest (steps of --width-step at --layers layers) and the deepest
 * (at --width). The bytes are the arithmetic of each mode's entry in
 * `modes` over the parameter count, which is taken from GPTs actually
 * built (fitted on small ones, checked on another; the table's rows,
 * measured on the tensors held, check the arithmetic: a row that differs
 * from it by more than the regions' rounding is reported).
 *
 * usage: bench/zero [--steps N] [--layers L] [--width C] [--worlds "1 2 4"] [--rounds R] [--node N]
 *                   [--rows N] [--modes LIST] [--tcp] [--max-rank-bytes B] [--width-step S] */
#include <math.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#define BENCH_NAME "bench/zero"
#include "bench/bench-util.h"

#define MAX_WORLD 8
#define MAX_STEPS 64
#define VOCAB 256
#define SEQ 64

typedef struct rank_out {
    double params, grads, state; /* bytes */
    double rss; /* bytes */
    double step_s[MAX_STEPS];
    double cpu_s; /* per timed step */
    int ok;
} rank_out;

/* What one rank trains with: the optimizer, and the groups it made. */
typedef struct built {
    phx_optimizer *opt;
    phx_comm *shard, *replicate; /* hybrid: this rank's groups */
} built;

/* A mode: its name, its constructor (the optimizer over the DDP wrapper
 * ddp of the rank's model; node is --node; NULL with phx_last_error on
 * failure) and what its rank holds, for the arithmetic of --max-rank-bytes:
 * parameters and optimizer state whole or sharded, gradients whole
 * (GRADS_FULL), whole plus the rank's reduced shard (GRADS_FULL_SHARD:
 * ZeRO-2's reduce-scatter output beside the DDP buckets) or the shard
 * only; hybrid: sharded within groups of node ranks (shown where the world
 * is several groups). A new mode is one entry and its constructor. */
enum { GRADS_FULL, GRADS_FULL_SHARD, GRADS_SHARD };
/* ZeRO-3 (phx_fsdp_new, one unit per transformer block, the rest in the
 * root): what is gathered beside the shards at the peak, in units of a
 * block (the root is always there during the step; t/fsdp/api checks
 * these peaks). */
enum { FSDP_NONE, FSDP_FULL, FSDP_FULL_NO_PREFETCH, FSDP_GRAD_OP };
typedef struct mode {
    const char *name;
    int stage; /* 0: DDP */
    bool hybrid;
    bool params_sharded, state_sharded;
    int grads;
    phx_status (*build)(const struct mode *md, phx_module *ddp, phx_comm *c, int node, built *b);
    int fsdp; /* FSDP_*: the model is wrapped by phx_fsdp_new instead of phx_ddp_new */
} mode;

static phx_status build_ddp(const mode *md, phx_module *ddp, phx_comm *c, int node, built *b);
static phx_status build_zero(const mode *md, phx_module *ddp, phx_comm *c, int node, built *b);
static phx_status build_zero3(const mode *md, phx_module *fsdp, phx_comm *c, int node, built *b);

static const mode modes[] = {
    {"DDP", 0, false, false, false, GRADS_FULL, build_ddp, FSDP_NONE},
    {"ZeRO-1", 1, false, false, true, GRADS_FULL, build_zero, FSDP_NONE},
    {"ZeRO-2", 2, false, false, true, GRADS_FULL_SHARD, build_zero, FSDP_NONE},
    {"HSDP-1", 1, true, false, true, GRADS_FULL, build_zero, FSDP_NONE},
    {"HSDP-2", 2, true, false, true, GRADS_FULL_SHARD, build_zero, FSDP_NONE},
    {"ZeRO-3", 3, false, true, true, GRADS_SHARD, build_zero3, FSDP_FULL},
    {"Z3 nopf", 3, false, true, true, GRADS_SHARD, build_zero3, FSDP_FULL_NO_PREFETCH},
    {"Z3 SGO", 3, false, true, true, GRADS_SHARD, build_zero3, FSDP_GRAD_OP},
};
#define N_MODES ((int)(sizeof modes / sizeof modes[0]))

typedef struct job {
    int mode, steps, node;
    int64_t layers, width;
    rank_out *out; /* (MAX_WORLD) shared */
    double block_numel; /* parameters of one transformer block (FSDP's unit) */
    int rows; /* sequences of SEQ tokens per rank and step (--rows) */
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

static phx_status build_ddp(const mode *md, phx_module *ddp, phx_comm *c, int node, built *b)
{
    (void)md, (void)c, (void)node;
    b->opt = make_adamw(ddp, NULL);
    return b->opt ? PHX_OK : PHX_EINVAL;
}

static phx_status build_zero(const mode *md, phx_module *ddp, phx_comm *c, int node, built *b)
{
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = md->stage;
    if (md->hybrid) {
        /* "Nodes" of node consecutive ranks. */
        int rank = phx_comm_rank(c);
        phx_status st = phx_comm_split(c, rank / node, rank, &b->shard);
        if (st == PHX_OK) st = phx_comm_split(c, rank % node, rank, &b->replicate);
        if (st != PHX_OK) return st;
        zo.shard_comm = b->shard;
        zo.replicate_comm = b->replicate;
    }
    b->opt = phx_zero_optimizer_new(ddp, c, make_adamw, NULL, &zo);
    return b->opt ? PHX_OK : PHX_EINVAL;
}

static phx_status build_zero3(const mode *md, phx_module *fsdp, phx_comm *c, int node, built *b)
{
    (void)md, (void)node;
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = 3;
    b->opt = phx_zero_optimizer_new(fsdp, c, make_adamw, NULL, &zo);
    return b->opt ? PHX_OK : PHX_EINVAL;
}

/* The model's wrapper for a mode: DDP's, or FSDP's with one unit per
 * transformer block (the size policy at a block's parameter count). */
static phx_module *wrap(const mode *md, phx_module *m, phx_comm *c, double block_numel)
{
    if (md->fsdp == FSDP_NONE) return phx_ddp_new(m, c, NULL);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.min_unit_numel = (int64_t)block_numel;
    fo.no_prefetch = md->fsdp == FSDP_FULL_NO_PREFETCH;
    fo.sharding = md->fsdp == FSDP_GRAD_OP ? PHX_FSDP_SHARD_GRAD_OP : PHX_FSDP_FULL_SHARD;
    return phx_fsdp_new(m, c, &fo);
}

/* Per-rank bytes a mode holds for a GPT of n f32 parameters, of which
 * root are outside the blocks and block in each, at world (groups of node
 * ranks when hybrid): the arithmetic of its entry, one element of
 * rounding per rank (per region or unit) left out. ZeRO-3 adds to the
 * shards the full parameters gathered at the peak (the root and the
 * running block, and the prefetched one; every block under SHARD_GRAD_OP)
 * and the full gradients of the root and two blocks (a block's
 * reduce-scatter is in flight while the next block's backward runs), at
 * any world (a world of one gathers into buffers as well). */
static void mode_bytes(const mode *md, double n, double root, double block, int world, int node, double *params,
                       double *grads, double *state)
{
    int group = md->hybrid ? node : world;
    double shard = ceil(n / group);
    double gathered = md->fsdp == FSDP_NONE              ? 0
        : md->fsdp == FSDP_GRAD_OP                       ? n
        : md->fsdp == FSDP_FULL_NO_PREFETCH || n == root ? fmin(n, root + block)
                                                         : fmin(n, root + 2 * block);
    *params = 4 * (md->params_sharded ? shard + gathered : n);
    *grads = 4 *
        (md->grads == GRADS_SHARD ? shard + (md->fsdp != FSDP_NONE ? fmin(n, root + 2 * block) : 0)
             : md->grads == GRADS_FULL_SHARD && group > 1 ? n + shard
                                                          : n);
    *state = 8 * (md->state_sharded ? shard : n);
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

/* CPU seconds of this process, all threads. */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
        1e-6 * ru.ru_stime.tv_usec;
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
    const mode *md = &modes[jb->mode];
    phx_module *ddp = wrap(md, m, c, jb->block_numel);
    if (!ddp) bench_die(md->fsdp ? "phx_fsdp_new" : "phx_ddp_new");
    built bt = {0};
    if (md->build(md, ddp, c, jb->node, &bt) != PHX_OK) bench_die(md->name);
    phx_optimizer *opt = bt.opt;
    phx_comm *shard = bt.shard, *replicate = bt.replicate;
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    int64_t xs[2] = {jb->rows, SEQ};
    phx_tensor *x = phx_tensor_new(PHX_I64, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 2, xs, phx_cpu());
    int64_t *hx = phx_tensor_data(x), *hy = phx_tensor_data(y);
    for (int64_t i = 0; i < (int64_t)jb->rows * SEQ; i++) {
        hx[i] = (i * 7 + rank * 13) % VOCAB;
        hy[i] = (hx[i] * 3 + 1) % VOCAB;
    }
    double cpu = 0;
    for (int s = 0; s < 2 + jb->steps; s++) {
        phx_comm_barrier(c, NULL);
        double t0 = bench_now(), c0 = cpu_now();
        bench_check(bench_step(ddp, opt, loss, x, y, NULL, NULL), "step");
        if (s >= 2) {
            out->step_s[s - 2] = bench_now() - t0;
            cpu += cpu_now() - c0;
        }
    }
    out->cpu_s = cpu / jb->steps;
    double params = 0;
    for (size_t i = 0; i < phx_module_num_params(ddp); i++)
        params += (double)phx_tensor_nbytes(phx_param_value(phx_module_param(ddp, i)));
    out->params = params;
    out->grads = params; /* every gradient is a view into a bucket of the same size */
    if (md->fsdp != FSDP_NONE) {
        /* the shards, and the full buffers at their peak */
        phx_fsdp_stats fs = PHX_FSDP_STATS_INIT;
        if (phx_fsdp_get_stats(ddp, &fs) != PHX_OK) bench_die("phx_fsdp_get_stats");
        out->params = (double)fs.shard_bytes / 2 + (double)fs.peak_gathered_bytes;
        out->grads = (double)fs.shard_bytes / 2 + (double)fs.peak_grad_bytes;
        out->state = state_bytes(phx_zero_inner(opt));
    } else if (md->stage == 0) {
        out->state = state_bytes(opt);
    } else {
        out->state = state_bytes(phx_zero_inner(opt));
        /* ZeRO-2's reduce-scatter output: the rank's block of each bucket. */
        int srank = shard ? phx_comm_rank(shard) : rank;
        if (md->grads == GRADS_FULL_SHARD && phx_comm_size(shard ? shard : c) > 1)
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
    double params, grads, state, rss, ms, cpu_ms;
} row_out;

static row_out run_row(job *jb, int world, bool tcp)
{
    memset(jb->out, 0, sizeof(rank_out) * MAX_WORLD);
    setenv("PHX_COMM", "gloo", 1);
    if (tcp) setenv("PHX_GLOO_SHM", "0", 1);
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
    r.cpu_ms = 1e3 * jb->out[0].cpu_s;
    return r;
}

/* Parameters of the bench's GPT (vocab VOCAB, context SEQ, 4 heads),
 * counted on a built one. */
static double gpt_params_built(int64_t layers, int64_t width)
{
    phx_gpt_config cfg = PHX_GPT_CONFIG_INIT;
    cfg.vocab_size = VOCAB;
    cfg.block_size = SEQ;
    cfg.n_layer = layers;
    cfg.n_head = 4;
    cfg.d_model = width;
    phx_rng *rng = phx_rng_new(1);
    phx_module *m = phx_gpt_new(&cfg, rng);
    phx_rng_free(rng);
    if (!m) bench_die("phx_gpt_new");
    double n = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++)
        n += (double)phx_tensor_numel(phx_param_value(phx_module_param(m, i)));
    phx_module_free(m);
    return n;
}

/* The count as a function of the shape, so large GPTs need not be built:
 * P(L, C) = L (a C^2 + b C) + c C + e, fitted on GPTs of 1 and 2 layers at
 * widths 16 and 32 and checked on one of 3 layers at width 48. */
typedef struct gpt_count {
    double a, b, c, e;
} gpt_count;

static double gpt_params(const gpt_count *k, double layers, double width)
{
    return layers * (k->a * width * width + k->b * width) + k->c * width + k->e;
}

/* Parameters of one transformer block. */
static double gpt_block(const gpt_count *k, double width)
{
    return k->a * width * width + k->b * width;
}

static gpt_count gpt_count_fit(void)
{
    double l16 = gpt_params_built(2, 16) - gpt_params_built(1, 16);
    double l32 = gpt_params_built(2, 32) - gpt_params_built(1, 32);
    double b16 = gpt_params_built(1, 16) - l16, b32 = gpt_params_built(1, 32) - l32;
    gpt_count k;
    /* l(C) = a C^2 + b C at C = 16, 32; base(C) = c C + e */
    k.a = (l32 - 2 * l16) / (32.0 * 32 - 2 * 16 * 16);
    k.b = (l16 - k.a * 16 * 16) / 16;
    k.c = (b32 - b16) / 16;
    k.e = b16 - k.c * 16;
    double want = gpt_params_built(3, 48), got = gpt_params(&k, 3, 48);
    if (want != got) {
        fprintf(stderr,
                "bench/zero: the GPT's parameter count is not L (a C^2 + b C) + c C + e: %.0f built, %.0f "
                "fitted (3 layers, width 48)\n",
                want, got);
        exit(1);
    }
    return k;
}

/* --max-rank-bytes: the widest and the deepest GPT of each mode and world
 * whose per-rank bytes fit budget. */
static void max_rank_bytes(double budget, const char *worlds, int node, int layers, int width, int step)
{
    gpt_count k = gpt_count_fit();
    const double MiB = 1024.0 * 1024.0;
    printf("GPT: vocab %d, context %d, 4 heads, AdamW; largest per-rank parameters + gradients + optimizer state "
           "within %.1f MiB\n",
           VOCAB, SEQ, budget / MiB);
    printf("%-7s %5s  %-28s %10s  %-28s %10s\n", "mode", "world", "widest (width, at layers)", "params",
           "deepest (layers, at width)", "params");
    char buf[64];
    snprintf(buf, sizeof buf, "%s", worlds);
    for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
        int world = atoi(tok);
        if (world < 1) continue;
        for (int md = 0; md < N_MODES; md++) {
            if (modes[md].hybrid && !(world > node && world % node == 0)) continue;
            double p, g, s;
            /* widest: width = step * i, at layers */
            int64_t best_w = 0, best_l = 0;
            for (int64_t i = 1; i < 1 << 20; i++) {
                double c = (double)(step * i);
                mode_bytes(&modes[md], gpt_params(&k, layers, c), gpt_params(&k, 0, c), gpt_block(&k, c), world, node,
                           &p, &g, &s);
                if (p + g + s > budget) break;
                best_w = step * i;
            }
            for (int64_t l = 1; l < 1 << 24; l++) {
                mode_bytes(&modes[md], gpt_params(&k, (double)l, width), gpt_params(&k, 0, width), gpt_block(&k, width),
                           world, node, &p, &g, &s);
                if (p + g + s > budget) break;
                best_l = l;
            }
            char wide[64] = "none", deep[64] = "none";
            double pw = best_w ? gpt_params(&k, layers, (double)best_w) : 0;
            double pl = best_l ? gpt_params(&k, (double)best_l, width) : 0;
            if (best_w) snprintf(wide, sizeof wide, "width %lld, %d layers", (long long)best_w, layers);
            if (best_l) snprintf(deep, sizeof deep, "%lld layers, width %d", (long long)best_l, width);
            printf("%-7s %5d  %-28s %9.2fM  %-28s %9.2fM\n", modes[md].name, world, wide, pw / 1e6, deep, pl / 1e6);
            char row[64];
            snprintf(row, sizeof row, "%s world %d", modes[md].name, world);
            bench_tsv(BENCH_NAME, "largest GPT in the budget (M params)", row, "widest", pw / 1e6);
            bench_tsv(BENCH_NAME, "largest GPT in the budget (M params)", row, "deepest", pl / 1e6);
        }
    }
}

/* Whether the table runs mode md: DDP always, the others when --modes
 * (comma-separated names) is not given or names them. */
static bool mode_wanted(int md, const char *list)
{
    if (md == 0 || !list || !*list) return true;
    size_t n = strlen(modes[md].name);
    for (const char *p = list; (p = strstr(p, modes[md].name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

int main(int argc, char **argv)
{
    int steps = 8, layers = 4, width = 256, rounds = 3, node = 2, width_step = 64, seqs = 2;
    double max_bytes = 0;
    const char *worlds = "1 2 4", *mode_list = NULL, *shm = "shm";
    bench_opt opts[] = {{"--steps", 'i', &steps},
                        {"--layers", 'i', &layers},
                        {"--width", 'i', &width},
                        {"--worlds", 's', &worlds},
                        {"--rounds", 'i', &rounds},
                        {"--node", 'i', &node},
                        {"--max-rank-bytes", 'd', &max_bytes},
                        {"--width-step", 'i', &width_step},
                        {"--rows", 'i', &seqs},
                        {"--modes", 's', &mode_list},
                        {"--tcp", 'n', &shm}};
    if (bench_args(argc, argv, opts, sizeof opts / sizeof opts[0],
                   "[--steps N] [--layers L] [--width C] [--worlds \"1 2 4\"] [--rounds R] [--node N] "
                   "[--rows N] [--modes LIST] [--tcp] [--max-rank-bytes B] [--width-step S]"))
        return 2;
    if (steps < 1 || steps > MAX_STEPS) steps = 8;
    if (rounds < 1 || rounds > 16) rounds = 3;
    if (node < 1 || node > MAX_WORLD) node = 2;
    if (width_step < 4 || width_step % 4) width_step = 64;
    if (seqs < 1 || seqs > 256) seqs = 2;
    if (layers < 1 || width < 4 || width % 4) {
        fprintf(stderr, "bench/zero: --layers must be >= 1 and --width a multiple of 4 (4 heads)\n");
        return 2;
    }
    if (max_bytes > 0) {
        max_rank_bytes(max_bytes, worlds, node, layers, width, width_step);
        return 0;
    }
    rank_out *out = mmap(NULL, sizeof(rank_out) * MAX_WORLD, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED) return 1;
    bool any = false;
    for (int md = 1; md < N_MODES; md++) any |= mode_list && mode_wanted(md, mode_list);
    if (mode_list && !any) {
        fprintf(stderr, "bench/zero: --modes '%s' names no mode; the modes:", mode_list);
        for (int md = 1; md < N_MODES; md++) fprintf(stderr, "%s '%s'", md > 1 ? "," : "", modes[md].name);
        fprintf(stderr, "\n");
        return 2;
    }
    bool tcp = shm == NULL;
    printf("GPT: %d layers, d_model %d, vocab %d, %d tokens x %d rows per rank, AdamW; gloo processes (%s); median "
           "of %d steps, then median of %d rounds (the modes alternate)\n",
           layers, width, VOCAB, SEQ, seqs,
           tcp ? "PHX_GLOO_SHM=0: collectives over TCP, as between hosts" : "same-host shared memory", steps, rounds);
    printf("%-7s %5s %11s %10s %10s %10s %9s %9s %7s %7s\n", "mode", "world", "params MiB", "grads MiB", "optim MiB",
           "total MiB", "RSS MiB", "step ms", "vs DDP", "CPU ms");
    double n_params = gpt_params_built(layers, width);
    gpt_count cnt = gpt_count_fit();
    char buf[64];
    snprintf(buf, sizeof buf, "%s", worlds);
    const double MiB = 1024.0 * 1024.0;
    for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
        int world = atoi(tok);
        if (world < 1 || world > MAX_WORLD) continue;
        row_out rows[N_MODES];
        double ms[N_MODES][16], cpu[N_MODES][16];
        /* Hybrid rows where the world is several groups of node ranks. */
        bool hybrid_ok = world > node && world % node == 0;
        for (int k = 0; k < rounds; k++)
            for (int mode = 0; mode < N_MODES; mode++) {
                if ((modes[mode].hybrid && !hybrid_ok) || !mode_wanted(mode, mode_list)) continue;
                job jb = {mode, steps, node, layers, width, out, gpt_block(&cnt, width), seqs};
                row_out r = run_row(&jb, world, tcp);
                ms[mode][k] = r.ms;
                cpu[mode][k] = r.cpu_ms;
                if (k == 0 || r.rss > rows[mode].rss) rows[mode] = r; /* the largest peak RSS of the rounds */
            }
        double ddp_ms = bench_median(ms[0], rounds);
        for (int mode = 0; mode < N_MODES; mode++) {
            if ((modes[mode].hybrid && !hybrid_ok) || !mode_wanted(mode, mode_list)) continue;
            const row_out *r = &rows[mode];
            double t = mode == 0 ? ddp_ms : bench_median(ms[mode], rounds), tc = bench_median(cpu[mode], rounds);
            printf("%-7s %5d %11.2f %10.2f %10.2f %10.2f %9.1f %9.1f %7.2f %7.1f\n", modes[mode].name, world,
                   r->params / MiB, r->grads / MiB, r->state / MiB, (r->params + r->grads + r->state) / MiB,
                   r->rss / MiB, t, ddp_ms / t, tc);
            /* The arithmetic --max-rank-bytes uses, against the tensors held. */
            double p, g, s;
            mode_bytes(&modes[mode], n_params, gpt_params(&cnt, 0, width), gpt_block(&cnt, width), world, node, &p, &g,
                       &s);
            if (fabs(p + g + s - (r->params + r->grads + r->state)) > 64.0 * 12 * world + 1e-3 * (p + g + s))
                printf("note: %s at world %d holds %.0f bytes, the arithmetic says %.0f\n", modes[mode].name, world,
                       r->params + r->grads + r->state, p + g + s);
            char row[64];
            snprintf(row, sizeof row, "%s world %d%s", modes[mode].name, world, tcp ? " tcp" : "");
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "params", r->params / MiB);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "grads", r->grads / MiB);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "optim", r->state / MiB);
            bench_tsv(BENCH_NAME, "per-rank MiB", row, "rss", r->rss / MiB);
            bench_tsv(BENCH_NAME, "step ms", row, "ms", t);
            bench_tsv(BENCH_NAME, "step ms", row, "cpu ms", tc);
        }
    }
    munmap(out, sizeof(rank_out) * MAX_WORLD);
    return 0;
}
