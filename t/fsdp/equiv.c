/* ZeRO-3 (FSDP) against DDP: on every rank a DDP model stepped by AdamW
 * (decay on matrices only) and an FSDP model of the same start stepped by
 * phx_zero_optimizer_new(fsdp, stage 3) wrapping the same AdamW, both
 * driven by a GradScaler, train side by side on the same rows for 10
 * steps, gradients clipped to norm CLIP (DDP: phx_clip_grad_norm; FSDP:
 * phx_zero_clip_grad_norm over the shards, the norms compared at every
 * step); at step 4 the last rank's loss gradient holds an inf, so both
 * scalers must skip that step on every rank. Afterwards (the FSDP side
 * gathered with phx_fsdp_gather_full) the two agree within 1e-6
 * (relative, per tensor), the FSDP side is bitwise equal across ranks,
 * each rank's optimizer state is two f32 tensors per owned element, and
 * no full parameter or gradient memory is left outside forward/backward.
 * Models: an MLP with parameter counts not divisible by 2, 3 or 4, the
 * BatchNorm CNN (buffers), a small GPT with nested units (blocks, and
 * residual branches inside the second block), and a forward-only
 * (autograd) model holding a forward-only unit and a unit nested in it;
 * FULL_SHARD and SHARD_GRAD_OP, prefetch on and off; worlds 2, 3 and 4 on
 * threads and gloo; and hybrid sharding at world 4 (2 groups of 2). */
#include "t/tap.h"
#include "t/ddp-util.h"
#include "t/fsdp/fsdp-util.h"

#define STEPS 10
#define ROWS 2 /* per rank */
#define INF_STEP 4
#define V 17
#define BS 8
#define LR 1e-3 /* see t/zero/equiv.c: reduce-scatter sums in another order than all-reduce */
#include "t/shard-util.h"
#define CLIP 0.05

enum { M_MLP, M_CNN, M_GPT, M_FO, N_MODELS };
static const char *const model_names[N_MODELS] = {"MLP", "CNN (BatchNorm)", "GPT", "forward-only MLP"};
static const int64_t mlp_sizes[] = {7, 13, 11, 5};
/* The units of each model (fnmatch patterns over the module paths). */
static const char *const unit_patterns[N_MODELS][4] = {
    {"0", "4", NULL},
    {"0", "5", NULL},
    {"h.0", "h.1", "h.1.0.fn", NULL}, /* h.1 holds its second branch, h.1.0.fn nested in it */
    {"0", "0.0", NULL}, /* the forward-only "0" holds 0.2, its Linear 0.0 nested in it */
};

typedef struct job {
    int model;
    phx_fsdp_sharding sharding;
    bool no_prefetch;
    bool hybrid; /* shard within groups of 2 consecutive ranks, replicate across them */
} job;

/* A forward-only module running its children in order. */
static phx_status fo_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    const phx_tensor *h = x;
    for (size_t i = 0; i < phx_module_num_children(self); i++) {
        phx_tensor *o = NULL;
        phx_status st = phx_module_forward(phx_module_child(self, i), h, &o);
        if (st) return st;
        h = o;
    }
    *y = (phx_tensor *)h;
    return PHX_OK;
}

static void fo_free(phx_module *self)
{
    (void)self;
}

static const phx_module_vtable fo_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "ForwardOnly", .forward = fo_forward, .free = fo_free};

/* tu_mlp's layers (Linear, Tanh, Linear, Tanh, Linear) as a forward-only
 * root {"0": forward-only {Linear, Tanh, Linear}, "1": Tanh, "2": Linear}. */
static phx_module *fo_model(uint64_t seed)
{
    phx_module *seq = tu_mlp(mlp_sizes, 4, seed);
    phx_module *root = phx_module_new(&fo_vt, NULL), *inner = phx_module_new(&fo_vt, NULL);
    char name[24];
    for (size_t i = 0; i < phx_module_num_children(seq); i++) {
        snprintf(name, sizeof name, "%zu", i < 3 ? i : i - 2);
        phx_module_add_child(i < 3 ? inner : root, name, phx_module_clone(phx_module_child(seq, i)));
        if (i == 2) phx_module_add_child(root, "0", inner);
    }
    phx_module_free(seq);
    return root;
}

static phx_module *make_model(int kind, uint64_t seed)
{
    if (kind == M_MLP) return tu_mlp(mlp_sizes, 4, seed);
    if (kind == M_FO) return fo_model(seed);
    if (kind == M_CNN) return small_cnn();
    phx_gpt_config c = PHX_GPT_CONFIG_INIT;
    c.vocab_size = V;
    c.block_size = BS;
    c.n_layer = 2;
    c.n_head = 2;
    c.d_model = 16;
    c.bias = false;
    phx_rng *r = phx_rng_new(seed);
    phx_module *m = phx_gpt_new(&c, r);
    phx_rng_free(r);
    return m;
}

/* This rank's rows of step s: new tensors. */
static void make_batch(int kind, int s, int rank, phx_tensor **x, phx_tensor **y)
{
    int64_t first = (int64_t)rank * ROWS;
    if (kind == M_CNN) {
        tu_cnn_batch(s, first, ROWS, x, y);
        return;
    }
    if (kind == M_MLP || kind == M_FO) {
        *x = tu_new2(ROWS, mlp_sizes[0]);
        *y = tu_new2(ROWS, mlp_sizes[3]);
        tu_batch(s, first, ROWS, *x, *y);
        return;
    }
    sh_gpt_batch(s, first, ROWS, BS, V, x, y);
}

typedef struct side {
    phx_module *model, *ddp;
    phx_optimizer *opt;
    bool fsdp;
    double norm; /* the last step's gradient norm before clipping */
    phx_scaler *scaler;
    phx_loss *loss;
    phx_comm *shard, *replicate; /* hybrid: this rank's groups */
} side;

/* forward, loss, scaled loss gradient (poisoned with inf when told),
 * backward, scaler step, zero_grad. */
static phx_status side_step(side *sd, const phx_tensor *x, const phx_tensor *y, bool poison, bool *stepped)
{
    phx_tensor *out;
    float l;
    phx_status st = phx_module_forward(sd->ddp, x, &out);
    if (st == PHX_OK) st = phx_loss_forward(sd->loss, out, y, &l);
    phx_tensor *g = phx_loss_grad(sd->loss);
    if (st == PHX_OK) st = phx_scaler_scale_grad(sd->scaler, g);
    if (st == PHX_OK && poison) st = poison_first(g);
    if (st == PHX_OK) st = phx_module_backward(sd->ddp, g, NULL);
    if (st == PHX_OK) st = phx_scaler_unscale(sd->scaler, sd->opt, NULL);
    if (st == PHX_OK)
        st =
            sd->fsdp ? phx_zero_clip_grad_norm(sd->opt, CLIP, &sd->norm) : phx_clip_grad_norm(sd->ddp, CLIP, &sd->norm);
    if (st == PHX_OK) st = phx_scaler_step(sd->scaler, sd->opt, stepped);
    if (st == PHX_OK) st = phx_optimizer_zero_grad(sd->opt);
    return st;
}

static void side_free(side *sd)
{
    phx_optimizer_free(sd->opt);
    phx_scaler_free(sd->scaler);
    phx_loss_free(sd->loss);
    phx_module_free(sd->ddp);
    phx_module_free(sd->model);
    phx_comm_free(sd->shard);
    phx_comm_free(sd->replicate);
}

static int side_init(side *sd, phx_comm *c, const phx_precision *fp16, const job *jb, bool fsdp)
{
    int rank = phx_comm_rank(c);
    memset(sd, 0, sizeof *sd);
    sd->fsdp = fsdp;
    /* Ranks start apart: the wrappers' broadcast must bring them together. */
    sd->model = make_model(jb->model, 1000 + (uint64_t)rank);
    if (fsdp) {
        phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
        fo.wrap = fu_wrap_listed;
        fo.wrap_arg = (void *)unit_patterns[jb->model];
        fo.sharding = jb->sharding;
        fo.no_prefetch = jb->no_prefetch;
        if (jb->hybrid) {
            if (phx_comm_split(c, rank / 2, rank, &sd->shard) != PHX_OK ||
                phx_comm_split(c, rank % 2, rank, &sd->replicate) != PHX_OK) {
                printf("# rank %d: splitting: %s\n", rank, phx_last_error());
                return 0;
            }
            fo.shard_comm = sd->shard;
            fo.replicate_comm = sd->replicate;
        }
        sd->ddp = sd->model ? phx_fsdp_new(sd->model, c, &fo) : NULL;
        phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
        zo.stage = 3;
        if (sd->ddp) sd->opt = phx_zero_optimizer_new(sd->ddp, c, make_adamw, NULL, &zo);
    } else {
        phx_ddp_opts o = PHX_DDP_OPTS_INIT;
        sd->ddp = sd->model ? phx_ddp_new(sd->model, c, &o) : NULL;
        if (sd->ddp) sd->opt = make_adamw(sd->ddp, NULL);
    }
    phx_scaler_opts so = PHX_SCALER_OPTS_INIT;
    so.init_scale = 1024;
    sd->scaler = phx_scaler_new(fp16, &so);
    sd->loss = phx_loss_new(jb->model == M_GPT ? PHX_LOSS_CROSS_ENTROPY : PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    if (!sd->opt || !sd->scaler || !sd->loss) {
        printf("# rank %d: %s setup: %s\n", rank, fsdp ? "FSDP" : "DDP", phx_last_error());
        return 0;
    }
    return 1;
}

static const char *job_name(const job *jb)
{
    static __thread char buf[64];
    snprintf(buf, sizeof buf, "%s%s%s", jb->hybrid ? "HYBRID_SHARD (2 groups of 2) " : "",
             jb->sharding == PHX_FSDP_FULL_SHARD ? "FULL_SHARD" : "SHARD_GRAD_OP",
             jb->no_prefetch ? " no prefetch" : "");
    return buf;
}

static int run_job(phx_comm *c, const phx_precision *fp16, const job *jb)
{
    int rank = phx_comm_rank(c), world = phx_comm_size(c), fails = 0;
    side a, b;
    int okay = side_init(&a, c, fp16, jb, false);
    okay = side_init(&b, c, fp16, jb, true) && okay;
    const char *what = model_names[jb->model], *how = job_name(jb);
    for (int s = 0; s < STEPS && okay && !fails; s++) {
        phx_tensor *x, *y;
        make_batch(jb->model, s, rank, &x, &y);
        bool poison = s == INF_STEP && rank == world - 1, sa = false, sb = false;
        phx_status st = side_step(&a, x, y, poison, &sa);
        if (st == PHX_OK) st = side_step(&b, x, y, poison, &sb);
        phx_tensor_free(x);
        phx_tensor_free(y);
        phx_fsdp_stats fs = PHX_FSDP_STATS_INIT;
        if (st == PHX_OK) st = phx_fsdp_get_stats(b.ddp, &fs);
        if (st != PHX_OK) {
            printf("# rank %d: %s %s step %d: %s\n", rank, what, how, s, phx_last_error());
            fails++;
        } else if (fs.gathered_bytes != 0 || fs.grad_bytes != 0) {
            printf("# rank %d: %s %s step %d: %llu bytes of full parameters and %llu of full gradients held after "
                   "the step, expected 0\n",
                   rank, what, how, s, (unsigned long long)fs.gathered_bytes, (unsigned long long)fs.grad_bytes);
            fails++;
        } else if (s != INF_STEP && !(fabs(a.norm - b.norm) <= 1e-6 * a.norm)) {
            printf("# rank %d: %s %s step %d: gradient norm %.9g, DDP's %.9g\n", rank, what, how, s, b.norm, a.norm);
            fails++;
        } else if (sa != (s != INF_STEP) || sb != (s != INF_STEP)) {
            printf("# rank %d: %s %s step %d: DDP %s, FSDP %s; expected both to %s\n", rank, what, how, s,
                   sa ? "stepped" : "skipped", sb ? "stepped" : "skipped", s == INF_STEP ? "skip" : "step");
            fails++;
        }
    }
    if (!okay) fails++;
    if (!fails && phx_fsdp_gather_full(b.ddp) != PHX_OK) {
        printf("# rank %d: gather_full: %s\n", rank, phx_last_error());
        fails++;
    }
    if (!fails) {
        double e = tu_max_rel(b.ddp, a.ddp);
        if (!(e <= 1e-6)) {
            printf("# rank %d of %d: %s %s: max relative difference to DDP %.3g (> 1e-6)\n", rank, world, what, how, e);
            fails++;
        }
        if (!tu_same_bits_across(c, b.ddp)) {
            printf("# rank %d: %s %s: parameters differ across ranks\n", rank, what, how);
            fails++;
        }
        for (size_t i = 0; i < phx_module_num_buffers(a.ddp); i++)
            if (!(buffer_diff(phx_module_buffer(b.ddp, i), phx_module_buffer(a.ddp, i)) <= 1e-6)) {
                printf("# rank %d: buffer %s differs by %.3g (> 1e-6)\n", rank, phx_module_buffer_name(a.ddp, i),
                       buffer_diff(phx_module_buffer(b.ddp, i), phx_module_buffer(a.ddp, i)));
                fails++;
            }
        phx_fsdp_release_full(b.ddp);
        const char **names;
        phx_tensor **ts;
        size_t ns = phx_optimizer_state(phx_zero_inner(b.opt), &names, &ts);
        int srank = jb->hybrid ? phx_comm_rank(b.shard) : rank, sworld = jb->hybrid ? phx_comm_size(b.shard) : world;
        int64_t state = 0, total = 0, mine = phx_zero_rank_numel(b.opt, srank);
        for (size_t i = 0; i < ns; i++) state += phx_tensor_numel(ts[i]);
        for (size_t i = 0; i < phx_module_num_params(a.ddp); i++)
            total += phx_tensor_numel(phx_param_value(phx_module_param(a.ddp, i)));
        double owned = sum_across(c, (double)mine);
        int64_t bound = total / sworld + (int64_t)phx_zero_num_regions(b.opt) * 2;
        phx_fsdp_stats fs = PHX_FSDP_STATS_INIT;
        phx_fsdp_get_stats(b.ddp, &fs);
        if (state != 2 * mine || owned != (double)total * (world / sworld) || mine > bound || mine == 0) {
            printf("# rank %d: %s %s: state %lld floats for %lld owned elements (expected 2 per element), owned "
                   "over all ranks %.0f of %lld, at most %lld per rank\n",
                   rank, what, how, (long long)state, (long long)mine, owned, (long long)total, (long long)bound);
            fails++;
        } else if (fs.gathered_bytes != 0 || fs.units != phx_zero_num_regions(b.opt)) {
            printf("# rank %d: after release_full %llu bytes gathered, %zu units for %zu regions\n", rank,
                   (unsigned long long)fs.gathered_bytes, fs.units, phx_zero_num_regions(b.opt));
            fails++;
        } else if (rank == 0) {
            printf("# world %d, %s, %s: %zu units, rank 0 keeps %lld of %lld elements, peak gathered %llu bytes "
                   "(largest unit %llu), %llu gathers (%llu prefetched), max rel %.3g\n",
                   world, what, how, fs.units, (long long)mine, (long long)total,
                   (unsigned long long)fs.peak_gathered_bytes, (unsigned long long)fs.largest_unit_bytes,
                   (unsigned long long)fs.gathers, (unsigned long long)fs.prefetches, e);
        }
    }
    fflush(stdout);
    side_free(&b);
    side_free(&a);
    return fails;
}

static int rank_main(int rank, void *arg)
{
    const job *jb = arg;
    phx_comm *c = tu_comm(rank);
    phx_precision *fp16 = NULL;
    if (!c) return 1;
    if (phx_precision_new("fp16", &fp16) != PHX_OK) {
        printf("# rank %d: fp16 policy: %s\n", rank, phx_last_error());
        phx_comm_free(c);
        return 1;
    }
    int fails = run_job(c, fp16, jb);
    phx_precision_free(fp16);
    phx_comm_free(c);
    return fails ? 1 : 0;
}

#ifndef FSDP_OWN_MAIN /* t/fsdp/mpi.c brings its own */
int main(void)
{
    static const job modes[] = {
        {0, PHX_FSDP_FULL_SHARD, false, false},
        {0, PHX_FSDP_FULL_SHARD, true, false},
        {0, PHX_FSDP_SHARD_GRAD_OP, false, false},
    };
    size_t n_modes = sizeof modes / sizeof modes[0];
    plan((int)(N_MODELS * n_modes * 3 * 2 + N_MODELS * 2));
    for (int m = 0; m < N_MODELS; m++)
        for (size_t k = 0; k < n_modes; k++)
            for (int n = 2; n <= 4; n++) {
                job jb = modes[k];
                jb.model = m;
                tu_spawn_both(n, rank_main, &jb,
                              "%s, FSDP %s + ZeRO-3 AdamW (decay groups) + GradScaler skipping an inf step: equal "
                              "to DDP within 1e-6 after %d steps, state of the shard only, nothing gathered after "
                              "a step",
                              model_names[m], job_name(&jb), STEPS);
            }
    for (int m = 0; m < N_MODELS; m++) {
        job jb = {m, PHX_FSDP_FULL_SHARD, false, true};
        tu_spawn_both(4, rank_main, &jb,
                      "%s, FSDP %s + ZeRO-3 AdamW + GradScaler skipping an inf step: equal to DDP within 1e-6 after "
                      "%d steps",
                      model_names[m], job_name(&jb), STEPS);
    }
    return done_testing();
}
#endif
