/* DDP communication hooks (phx_ddp_register_comm_hook):
 * - the built-in allreduce hook and a user hook that averages the same way
 *   train bit for bit as the wrapper without a hook (several buckets);
 *   the user hook sees every bucket once per backward, in order, with
 *   is_last on the last, its gradients and parameter indices;
 * - fp16_compress / bf16_compress: after one backward every rank's
 *   gradients equal, bit for bit, the value computed here from the
 *   ranks' own gradients (all-gathered) with this file's conversions:
 *   16(16(16(g0) / 2) + 16(16(g1) / 2)); half the bytes of the f32 path;
 *   the ranks stay identical over training steps;
 * - a join with PowerSGD: the rank out of data runs the hook on zero
 *   buckets (its step count follows), nothing hangs, the ranks end equal;
 * - a world of one rounds through 16 bits;
 * - registration errors: on the model, twice, after a forward, without a
 *   launch slot, PowerSGD without its state, bad PowerSGD options.
 * Two ranks on threads and on gloo. */
#include "t/tap.h"
#include "t/ddp-util.h"

static const int64_t sizes[] = {6, 16, 8, 3};
#define NSIZES 4
#define BATCH 4

/* ---- conversions written here, independent of the library ------------ */

static float round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f; /* NaN */
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

#ifdef __FLT16_MAX__
static float round_f16(float f)
{
    return (float)(_Float16)f;
}
#define HAVE_F16 1
#else
#define HAVE_F16 0
static float round_f16(float f)
{
    return f;
}
#endif

/* ---- helpers ----------------------------------------------------------- */

static size_t num_elems(phx_module *m)
{
    size_t n = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++)
        n += (size_t)phx_tensor_numel(phx_param_grad(phx_module_param(m, i)));
    return n;
}

/* The model's gradients, flat, into h. */
static void grads_flat(phx_module *m, float *h)
{
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        const phx_tensor *g = phx_param_grad(phx_module_param(m, i));
        phx_tensor_to_host(g, h);
        h += phx_tensor_numel(g);
    }
}

/* ---- a user hook: averages as the wrapper does, and checks what it sees */

typedef struct user_state {
    phx_module *ddp;
    size_t expect_next; /* bucket index the next launch should carry */
    size_t expect_complete;
    int bad;
    char why[256];
} user_state;

static void user_fail(user_state *u, const char *what)
{
    if (!u->bad++) snprintf(u->why, sizeof u->why, "%s", what);
}

static phx_status user_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work)
{
    user_state *u = state;
    size_t nb = phx_ddp_num_buckets(u->ddp);
    if (b->index != u->expect_next) user_fail(u, "launch out of bucket order");
    u->expect_next = b->index + 1 == nb ? 0 : b->index + 1;
    if (b->is_last != (b->index + 1 == nb)) user_fail(u, "is_last wrong");
    int64_t total = 0;
    for (size_t j = 0; j < b->n_grads; j++) {
        total += phx_tensor_numel(b->grads[j]);
        if (!phx_tensor_same_storage(b->grads[j], b->buffer)) user_fail(u, "a gradient is not a view of the bucket");
        if (b->params[j] >= 6) user_fail(u, "parameter index out of range");
    }
    if (total != phx_tensor_numel(b->buffer)) user_fail(u, "gradients do not cover the bucket");
    phx_status st = phx_tensor_axpby(0.0f, NULL, 1.0f / (float)b->divisor, b->buffer);
    return st == PHX_OK ? phx_comm_allreduce(b->comm, b->buffer, PHX_SUM, work) : st;
}

static phx_status user_complete(void *state, const phx_comm_hook_bucket *b)
{
    user_state *u = state;
    if (b->index != u->expect_complete) user_fail(u, "complete out of bucket order");
    u->expect_complete = b->is_last ? 0 : b->index + 1;
    return PHX_OK;
}

/* ---- allreduce hook and user hook == no hook --------------------------- */

static int rank_same(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int bad = 0;
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.first_bucket_bytes = 64; /* several buckets */
    o.bucket_bytes = 100;
    phx_module *m[3], *d[3];
    phx_optimizer *opt[3];
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    user_state u = {0};
    for (int k = 0; k < 3; k++) {
        m[k] = tu_mlp(sizes, NSIZES, 11);
        d[k] = phx_ddp_new(m[k], c, &o);
        phx_sgd_opts so = PHX_SGD_OPTS_INIT;
        so.lr = 0.1;
        so.momentum = 0.9;
        opt[k] = d[k] ? phx_sgd_new(d[k], &so) : NULL;
        if (!opt[k]) {
            printf("# rank %d: %s\n", rank, phx_last_error());
            return 1;
        }
    }
    u.ddp = d[2];
    phx_comm_hook uh = PHX_COMM_HOOK_INIT;
    uh.name = "test-average";
    uh.launch = user_launch;
    uh.complete = user_complete;
    if (phx_ddp_register_comm_hook(d[1], phx_comm_hook_allreduce(), NULL) != PHX_OK ||
        phx_ddp_register_comm_hook(d[2], &uh, &u) != PHX_OK) {
        printf("# rank %d: register: %s\n", rank, phx_last_error());
        bad++;
    }
    if (phx_ddp_num_buckets(d[2]) < 3) {
        printf("# rank %d: only %zu buckets\n", rank, phx_ddp_num_buckets(d[2]));
        bad++;
    }
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *y = tu_new2(BATCH, sizes[NSIZES - 1]);
    for (int s = 0; s < 4 && !bad; s++) {
        tu_batch(s, (int64_t)rank * BATCH, BATCH, x, y);
        for (int k = 0; k < 3 && !bad; k++)
            if (tu_step(d[k], opt[k], loss, x, y) != PHX_OK) {
                printf("# rank %d: step %d, wrapper %d: %s\n", rank, s, k, phx_last_error());
                bad++;
            }
    }
    size_t n;
    float *a = tu_flatten(m[0], &n), *b = tu_flatten(m[1], &n), *h = tu_flatten(m[2], &n);
    if (!bad && memcmp(a, b, n * sizeof *a) != 0) {
        printf("# rank %d: the allreduce hook's parameters differ from the wrapper's own\n", rank);
        bad++;
    }
    if (!bad && memcmp(a, h, n * sizeof *a) != 0) {
        printf("# rank %d: the user hook's parameters differ from the wrapper's own\n", rank);
        bad++;
    }
    if (u.bad) {
        printf("# rank %d: user hook: %s (%d problems)\n", rank, u.why, u.bad);
        bad++;
    }
    phx_ddp_stats s0 = PHX_DDP_STATS_INIT, s1 = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(d[0], &s0);
    phx_ddp_get_stats(d[1], &s1);
    if (s0.bytes != s1.bytes || s0.bytes == 0) {
        printf("# rank %d: bytes %llu without hook, %llu with the allreduce hook\n", rank, (unsigned long long)s0.bytes,
               (unsigned long long)s1.bytes);
        bad++;
    }
    free(a);
    free(b);
    free(h);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    for (int k = 0; k < 3; k++) {
        phx_optimizer_free(opt[k]);
        phx_module_free(d[k]);
        phx_module_free(m[k]);
    }
    phx_comm_free(c);
    return bad;
}

/* ---- fp16 / bf16 compression: bits against the independent value ------- */

static int rank_compress(int rank, void *arg)
{
    bool bf16 = *(int *)arg;
    float (*r16)(float) = bf16 ? round_bf16 : round_f16;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int bad = 0, world = phx_comm_size(c);
    phx_module *m = tu_mlp(sizes, NSIZES, 11), *ref = tu_mlp(sizes, NSIZES, 11);
    phx_module *d = phx_ddp_new(m, c, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *y = tu_new2(BATCH, sizes[NSIZES - 1]);
    if (!d ||
        phx_ddp_register_comm_hook(d, bf16 ? phx_comm_hook_bf16_compress() : phx_comm_hook_fp16_compress(), NULL) !=
            PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    tu_batch(0, (int64_t)rank * BATCH, BATCH, x, y);
    if (tu_step(d, NULL, loss, x, y) != PHX_OK || tu_step(ref, NULL, loss, x, y) != PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    size_t n = num_elems(m);
    float *mine = malloc(n * sizeof *mine), *got = malloc(n * sizeof *got), *all = malloc(2 * n * sizeof *all);
    grads_flat(ref, mine);
    grads_flat(m, got);
    int64_t len = (int64_t)n, len2 = 2 * len;
    phx_tensor *in = phx_tensor_from_data(PHX_F32, 1, &len, mine),
               *out = phx_tensor_zeros(PHX_F32, 1, &len2, phx_cpu());
    if (world != 2 || phx_comm_allgather(c, in, out, NULL) != PHX_OK || phx_tensor_to_host(out, all) != PHX_OK) {
        printf("# rank %d: all-gathering the local gradients: %s\n", rank, phx_last_error());
        bad++;
    }
    size_t wrong = 0, first = 0, lossy = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        float e0 = r16(r16(all[i]) / 2.0f), e1 = r16(r16(all[n + i]) / 2.0f);
        float want = r16(e0 + e1);
        if (memcmp(&want, &got[i], sizeof want) != 0 && !wrong++) first = i;
        lossy += want != all[i] / 2.0f + all[n + i] / 2.0f;
    }
    if (wrong) {
        float e0 = r16(r16(all[first]) / 2.0f), e1 = r16(r16(all[n + first]) / 2.0f);
        printf("# rank %d: %zu of %zu gradients differ; element %zu: got %.9g, expected %.9g (g0 %.9g, g1 %.9g)\n",
               rank, wrong, n, first, got[first], r16(e0 + e1), all[first], all[n + first]);
        bad++;
    }
    if (!bad && lossy == 0) {
        printf("# rank %d: no gradient lost precision: the hook did not compress\n", rank);
        bad++;
    }
    phx_ddp_stats st = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(d, &st);
    if (st.bytes != n * 2) {
        printf("# rank %d: %llu bytes all-reduced for %zu gradients, expected %zu (16 bits each)\n", rank,
               (unsigned long long)st.bytes, n, n * 2);
        bad++;
    }
    /* A few training steps: every rank keeps the same bits. */
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = phx_sgd_new(d, &so);
    phx_optimizer_step(opt);
    phx_optimizer_zero_grad(opt);
    for (int s = 1; s < 4 && !bad; s++) {
        tu_batch(s, (int64_t)rank * BATCH, BATCH, x, y);
        if (tu_step(d, opt, loss, x, y) != PHX_OK) {
            printf("# rank %d: step %d: %s\n", rank, s, phx_last_error());
            bad++;
        }
    }
    if (!bad && !tu_same_bits_across(c, m)) {
        printf("# rank %d: parameters differ across ranks after compressed steps\n", rank);
        bad++;
    }
    if (!bad && rank == 0)
        printf("# %s: %zu gradients equal the independent value bit for bit, %zu of them differ from the f32 "
               "average\n",
               bf16 ? "bf16" : "fp16", n, lossy);
    fflush(stdout);
    free(mine);
    free(got);
    free(all);
    phx_tensor_free(in);
    phx_tensor_free(out);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_optimizer_free(opt);
    phx_loss_free(loss);
    phx_module_free(d);
    phx_module_free(m);
    phx_module_free(ref);
    phx_comm_free(c);
    return bad;
}

/* ---- a join: the rank out of data runs the hook on zero buckets -------- */

static int rank_join(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int bad = 0;
    phx_module *m = tu_mlp(sizes, NSIZES, 11);
    phx_module *d = phx_ddp_new(m, c, NULL);
    phx_powersgd_opts po = PHX_POWERSGD_OPTS_INIT;
    po.start_iter = 2;
    phx_powersgd_state *ps = phx_powersgd_state_new(&po);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = d ? phx_sgd_new(d, &so) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *y = tu_new2(BATCH, sizes[NSIZES - 1]);
    phx_status st = opt && ps ? phx_ddp_register_comm_hook(d, phx_comm_hook_powersgd(), ps) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_ddp_join_begin(d, true);
    for (int s = 0; s < 3 + 3 * rank && st == PHX_OK; s++) {
        tu_batch(s, (int64_t)rank * BATCH, BATCH, x, y);
        st = tu_step(d, opt, loss, x, y);
    }
    if (st == PHX_OK) st = phx_ddp_join_end(d);
    if (st != PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        bad++;
    } else if (phx_powersgd_iter(ps) != 6) {
        printf("# rank %d: PowerSGD counted %lld steps, expected 6 (3 own, 3 shadowed)\n", rank,
               (long long)phx_powersgd_iter(ps));
        bad++;
    }
    if (!bad && !tu_same_bits_across(c, m)) {
        printf("# rank %d: parameters differ across ranks after the join\n", rank);
        bad++;
    }
    fflush(stdout);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(d);
    phx_powersgd_state_free(ps);
    phx_module_free(m);
    phx_comm_free(c);
    return bad;
}

/* ---- a world of one, and registration errors --------------------------- */

static void world_of_one(void)
{
    phx_module *m = tu_mlp(sizes, NSIZES, 11), *ref = tu_mlp(sizes, NSIZES, 11);
    phx_module *d = phx_ddp_new(m, NULL, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *y = tu_new2(BATCH, sizes[NSIZES - 1]);
    tu_batch(0, 0, BATCH, x, y);
    phx_status st = phx_ddp_register_comm_hook(d, phx_comm_hook_bf16_compress(), NULL);
    if (st == PHX_OK) st = tu_step(d, NULL, loss, x, y);
    if (st == PHX_OK) st = tu_step(ref, NULL, loss, x, y);
    size_t n = num_elems(m), wrong = 0, changed = 0;
    float *got = malloc(n * sizeof *got), *g = malloc(n * sizeof *g);
    grads_flat(m, got);
    grads_flat(ref, g);
    for (size_t i = 0; i < n; i++) {
        float want = round_bf16(g[i]);
        wrong += memcmp(&want, &got[i], sizeof want) != 0;
        changed += want != g[i];
    }
    ok(st == PHX_OK && wrong == 0 && changed > 0,
       "a world of one: the bf16 hook leaves each gradient rounded to bf16 (%zu of %zu changed, %zu wrong)", changed, n,
       wrong);
    if (st != PHX_OK) diag("%s", phx_last_error());
    free(got);
    free(g);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_module_free(d);
    phx_module_free(m);
    phx_module_free(ref);
}

static void errors(void)
{
    phx_module *m = tu_mlp(sizes, NSIZES, 11);
    phx_module *d = phx_ddp_new(m, NULL, NULL);
    phx_status st = phx_ddp_register_comm_hook(m, phx_comm_hook_fp16_compress(), NULL);
    ok(st == PHX_EINVAL && strstr(phx_last_error(), "wrapper"), "a hook on the model, not the wrapper: PHX_EINVAL: %s",
       phx_last_error());
    phx_comm_hook none = PHX_COMM_HOOK_INIT;
    none.name = "empty";
    st = phx_ddp_register_comm_hook(d, &none, NULL);
    ok(st == PHX_EINVAL && strstr(phx_last_error(), "launch"), "a hook without launch: PHX_EINVAL: %s",
       phx_last_error());
    st = phx_ddp_register_comm_hook(d, phx_comm_hook_powersgd(), NULL);
    ok(st == PHX_EINVAL && strstr(phx_last_error(), "phx_powersgd_state"), "PowerSGD without its state: PHX_EINVAL: %s",
       phx_last_error());
    st = phx_ddp_register_comm_hook(d, phx_comm_hook_fp16_compress(), NULL);
    ok(st == PHX_OK, "fp16_compress registers before the first forward");
    st = phx_ddp_register_comm_hook(d, phx_comm_hook_allreduce(), NULL);
    ok(st == PHX_ESTATE && strstr(phx_last_error(), "once"), "a second hook: PHX_ESTATE: %s", phx_last_error());

    phx_module *m2 = tu_mlp(sizes, NSIZES, 11);
    phx_module *d2 = phx_ddp_new(m2, NULL, NULL);
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *out = NULL;
    tu_batch(0, 0, BATCH, x, x);
    st = phx_module_forward(d2, x, &out);
    if (st == PHX_OK) st = phx_ddp_register_comm_hook(d2, phx_comm_hook_allreduce(), NULL);
    ok(st == PHX_ESTATE && strstr(phx_last_error(), "before the first forward"),
       "a hook after the first forward: PHX_ESTATE: %s", phx_last_error());

    phx_powersgd_opts po = PHX_POWERSGD_OPTS_INIT;
    po.start_iter = 1;
    phx_powersgd_state *ps = phx_powersgd_state_new(&po);
    ok(!ps && strstr(phx_last_error(), "start_iter"), "PowerSGD with start_iter 1 and error feedback: refused: %s",
       phx_last_error());
    po.no_error_feedback = po.no_warm_start = true;
    ps = phx_powersgd_state_new(&po);
    ok(ps && phx_powersgd_iter(ps) == 0, "PowerSGD with start_iter 1, no error feedback, no warm start: accepted");
    phx_powersgd_state_free(ps);
    po = (phx_powersgd_opts)PHX_POWERSGD_OPTS_INIT;
    po.matrix_approximation_rank = -1;
    ps = phx_powersgd_state_new(&po);
    ok(!ps && strstr(phx_last_error(), "matrix_approximation_rank"), "PowerSGD with rank -1: refused: %s",
       phx_last_error());
    phx_tensor_free(x);
    phx_module_free(d2);
    phx_module_free(m2);
    phx_module_free(d);
    phx_module_free(m);
}

int main(void)
{
    plan(2 + 2 + 2 + 2 + 1 + 9);
    tu_spawn_both(2, rank_same, NULL,
                  "the allreduce hook and a user hook train bit for bit as the wrapper without a hook "
                  "(several buckets, in order, is_last on the last)");
    int bf16 = 0;
    if (HAVE_F16)
        tu_spawn_both(2, rank_compress, &bf16,
                      "fp16_compress: gradients equal 16(16(16(g0)/2) + 16(16(g1)/2)) bit "
                      "for bit, 2 bytes per gradient; ranks stay identical");
    else
        skip(2, "the compiler has no _Float16 for the independent fp16 reference");
    bf16 = 1;
    tu_spawn_both(2, rank_compress, &bf16,
                  "bf16_compress: gradients equal the bf16 value bit for bit, 2 bytes per gradient; ranks stay "
                  "identical");
    tu_spawn_both(2, rank_join, NULL,
                  "a join with PowerSGD (3 and 6 steps): the joined rank runs the hook on zero buckets, nothing "
                  "hangs, both count 6 steps and end with the same parameters");
    world_of_one();
    errors();
    return done_testing();
}
