/* FSDP's interface and bookkeeping: bad arguments; ranks with different
 * wrap policies refused with PHX_EDESYNC naming the first difference;
 * the size policy; the full-parameter memory (none held outside forward
 * and backward, the peak one unit plus the prefetched one, plus the
 * root); parameters read while resharded refused with PHX_ESTATE and
 * readable between phx_fsdp_gather_full and phx_fsdp_release_full;
 * gradient accumulation over two backwards; the model after its wrapper
 * is freed. */
#include "t/tap.h"
#include "t/ddp-util.h"
#include "t/fsdp/fsdp-util.h"

#define W 16
static const int64_t equal_sizes[] = {W, W, W, W, W, W, W}; /* 6 Linear(16, 16) at children 0, 2, .., 10 */
static const int64_t mlp_sizes[] = {7, 13, 11, 5};

static bool wrap_even(const phx_module *m, const char *path, int64_t numel, void *arg)
{
    (void)m, (void)numel, (void)arg;
    return strchr(path, '.') == NULL && atoi(path) % 2 == 0;
}

static phx_optimizer *make_sgd(phx_module *m, void *arg)
{
    (void)arg;
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.1;
    return phx_sgd_new(m, &o);
}

/* ---- different policies on different ranks ---------------------------- */

typedef struct desync_job {
    const char *const *pats[2]; /* rank 0's, the others' */
    const char *want; /* in every rank's message */
} desync_job;

static int desync_rank(int rank, void *arg)
{
    const desync_job *jb = arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *m = tu_mlp(mlp_sizes, 4, 1);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = fu_wrap_listed;
    fo.wrap_arg = (void *)jb->pats[rank ? 1 : 0];
    phx_module *f = phx_fsdp_new(m, c, &fo);
    int bad = f != NULL || !strstr(phx_last_error(), jb->want) || !strstr(phx_last_error(), "rank 1");
    printf("# rank %d: %s\n", rank, f ? "made" : phx_last_error());
    /* Refused: the model is unchanged and can be wrapped again. */
    size_t n;
    float *h = f ? NULL : tu_flatten(m, &n);
    phx_module *again = f ? NULL : phx_fsdp_new(m, NULL, NULL);
    bad += !h || !again;
    free(h);
    phx_module_free(again);
    phx_module_free(f);
    phx_module_free(m);
    phx_comm_free(c);
    fflush(stdout);
    return bad;
}

/* ---- memory ------------------------------------------------------------ */

typedef struct mem_job {
    phx_fsdp_sharding sharding;
    bool no_prefetch;
    int units_gathered; /* expected peak: the root plus this many units */
} mem_job;

static int mem_rank(int rank, void *arg)
{
    const mem_job *jb = arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int world = phx_comm_size(c), bad = 0;
    phx_module *m = tu_mlp(equal_sizes, 7, 5);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = wrap_even;
    fo.sharding = jb->sharding;
    fo.no_prefetch = jb->no_prefetch;
    phx_module *f = phx_fsdp_new(m, c, &fo);
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    phx_optimizer *z = f ? phx_zero_optimizer_new(f, c, make_sgd, NULL, &zo) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(3, W), *y = tu_new2(3, W);
    phx_status st = z ? PHX_OK : PHX_EINVAL;
    phx_fsdp_stats s = PHX_FSDP_STATS_INIT;
    for (int k = 0; k < 3 && st == PHX_OK; k++) {
        tu_batch(k, 3 * rank, 3, x, y);
        st = tu_step(f, z, loss, x, y);
        if (st == PHX_OK) st = phx_fsdp_get_stats(f, &s);
        if (st == PHX_OK && (s.gathered_bytes || s.grad_bytes)) {
            printf("# rank %d step %d: %llu + %llu bytes held after the step, expected 0\n", rank, k,
                   (unsigned long long)s.gathered_bytes, (unsigned long long)s.grad_bytes);
            bad++;
        }
    }
    if (st != PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        bad++;
    }
    int64_t unit_numel = W * W + W, block = (unit_numel + world - 1) / world;
    uint64_t U = (uint64_t)block * world * 4, R = (uint64_t)world * 4; /* the root holds nothing: one element each */
    uint64_t want = R + (uint64_t)jb->units_gathered * U;
    if (st == PHX_OK &&
        (s.units != 7 || s.largest_unit_bytes != U || s.peak_gathered_bytes != want || s.peak_grad_bytes > R + 2 * U ||
         s.peak_grad_bytes < U || s.shard_bytes != 2 * 4 * (uint64_t)(6 * block + 1))) {
        printf("# rank %d: %zu units, largest %llu bytes (expected %llu), peak gathered %llu (expected %llu), peak "
               "gradients %llu (expected <= %llu), shard %llu\n",
               rank, s.units, (unsigned long long)s.largest_unit_bytes, (unsigned long long)U,
               (unsigned long long)s.peak_gathered_bytes, (unsigned long long)want,
               (unsigned long long)s.peak_grad_bytes, (unsigned long long)(R + 2 * U),
               (unsigned long long)s.shard_bytes);
        bad++;
    } else if (rank == 0) {
        printf("# world %d: peak gathered %llu bytes = root %llu + %d x unit %llu; peak gradients %llu; %llu gathers, "
               "%llu prefetched\n",
               world, (unsigned long long)s.peak_gathered_bytes, (unsigned long long)R, jb->units_gathered,
               (unsigned long long)U, (unsigned long long)s.peak_grad_bytes, (unsigned long long)s.gathers,
               (unsigned long long)s.prefetches);
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(z);
    phx_module_free(f);
    phx_module_free(m);
    phx_comm_free(c);
    fflush(stdout);
    return bad;
}

/* ---- one process --------------------------------------------------------- */

static phx_module *nested_model(void)
{
    phx_rng *r = phx_rng_new(9);
    phx_module *m = phx_sequential_new(), *a = phx_sequential_new(), *b = phx_sequential_new();
    phx_sequential_add(a, phx_linear_new(W, W, true, r));
    phx_sequential_add(a, phx_tanh_new());
    phx_sequential_add(b, phx_linear_new(W, W, true, r));
    phx_sequential_add(m, a);
    phx_sequential_add(m, phx_linear_new(W, W, true, r));
    phx_sequential_add(m, b);
    phx_rng_free(r);
    return m;
}

static void size_policy(void)
{
    phx_module *m = nested_model();
    phx_module *f = phx_fsdp_new(m, NULL, NULL);
    ok(f && phx_fsdp_num_units(f) == 1, "size policy, default 1e6 elements: one unit, the root (%zu units)",
       f ? phx_fsdp_num_units(f) : 0);
    phx_module_free(f);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.min_unit_numel = 200;
    f = phx_fsdp_new(m, NULL, &fo);
    int64_t n0 = 0, n1 = 0, n2 = 0;
    const char *p0 = f ? phx_fsdp_unit_path(f, 0, &n0) : NULL, *p1 = f ? phx_fsdp_unit_path(f, 1, &n1) : NULL;
    const char *p2 = f ? phx_fsdp_unit_path(f, 2, &n2) : NULL;
    ok(f && phx_fsdp_num_units(f) == 3 && p0 && !strcmp(p0, "0") && p1 && !strcmp(p1, "2") && p2 && !strcmp(p2, "") &&
           n0 == W * W + W && n1 == W * W + W && n2 == W * W + W,
       "min_unit_numel 200: the subtrees '0' and '2' are units, the leaf '1' (272 elements) stays in the root "
       "('%s' %lld, '%s' %lld, '%s' %lld)",
       p0 ? p0 : "-", (long long)n0, p1 ? p1 : "-", (long long)n1, p2 ? p2 : "-", (long long)n2);
    phx_module_free(f);
    phx_module_free(m);
}

static void resharded_access(void)
{
    phx_module *m = nested_model(), *ref = nested_model();
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.min_unit_numel = 200;
    phx_module *f = phx_fsdp_new(m, NULL, &fo);
    phx_param *p = f ? phx_module_find_param(f, "0.0.weight") : NULL;
    float h[W * W];
    double v;
    phx_status a = p ? phx_tensor_to_host(phx_param_value(p), h) : PHX_EINVAL;
    phx_status b = p ? phx_tensor_get(phx_param_grad(p), 0, &v) : PHX_EINVAL;
    ok(a == PHX_ESTATE && b == PHX_ESTATE && strstr(phx_last_error(), "phx_fsdp_gather_full"),
       "reading a resharded parameter or gradient: PHX_ESTATE naming phx_fsdp_gather_full (%s)", phx_last_error());
    ok(f && phx_module_zero_grad(f) == PHX_OK, "phx_module_zero_grad on the resharded model does nothing, no error");
    phx_status g = f ? phx_fsdp_gather_full(f) : PHX_EINVAL;
    ok(g == PHX_OK && phx_tensor_to_host(phx_param_value(p), h) == PHX_OK && tu_max_rel(f, ref) == 0,
       "after phx_fsdp_gather_full every parameter reads its value");
    int64_t shape[2] = {2, W};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, shape, phx_cpu()), *y;
    ok(phx_module_forward(f, x, &y) == PHX_ESTATE, "a forward while summoned: PHX_ESTATE (%s)", phx_last_error());
    phx_fsdp_stats s = PHX_FSDP_STATS_INIT;
    phx_fsdp_release_full(f);
    phx_fsdp_get_stats(f, &s);
    ok(s.gathered_bytes == 0 && phx_tensor_to_host(phx_param_value(p), h) == PHX_ESTATE,
       "phx_fsdp_release_full frees them again (%llu bytes held)", (unsigned long long)s.gathered_bytes);
    /* Freed while gathered: the model keeps the values and runs alone. */
    phx_fsdp_gather_full(f);
    phx_module_free(f);
    ok(tu_max_rel(m, ref) == 0 && phx_module_forward(m, x, &y) == PHX_OK,
       "the wrapper freed while gathered: the model holds its values and runs forward alone");
    f = phx_fsdp_new(m, NULL, &fo);
    phx_module_free(f);
    size_t n;
    float *z = tu_flatten(m, &n);
    int zeros = 1;
    for (size_t i = 0; i < n; i++) zeros &= z[i] == 0;
    free(z);
    ok(zeros && phx_module_forward(m, x, &y) == PHX_OK,
       "the wrapper freed while resharded: the model's parameters are zeros (as documented), and it runs");
    phx_tensor_free(x);
    phx_module_free(m);
    phx_module_free(ref);
}

/* Two backwards before a step add their gradients: SGD on an FSDP model
 * of one process equals SGD on the plain model bitwise. */
static void accumulation(void)
{
    phx_module *m = tu_mlp(mlp_sizes, 4, 3), *ref = tu_mlp(mlp_sizes, 4, 3);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = wrap_even;
    phx_module *f = phx_fsdp_new(m, NULL, &fo);
    phx_optimizer *z = f ? phx_zero_optimizer_new(f, NULL, make_sgd, NULL, NULL) : NULL, *o = make_sgd(ref, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(4, mlp_sizes[0]), *y = tu_new2(4, mlp_sizes[3]);
    phx_status st = z ? PHX_OK : PHX_EINVAL;
    for (int s = 0; s < 3 && st == PHX_OK; s++) {
        for (int micro = 0; micro < 2 && st == PHX_OK; micro++) {
            tu_batch(2 * s + micro, 0, 4, x, y);
            st = tu_step(f, NULL, loss, x, y);
            if (st == PHX_OK) st = tu_step(ref, NULL, loss, x, y);
        }
        if (st == PHX_OK) st = phx_optimizer_step(z);
        if (st == PHX_OK) st = phx_optimizer_step(o);
        if (st == PHX_OK) st = phx_optimizer_zero_grad(z);
        if (st == PHX_OK) st = phx_optimizer_zero_grad(o);
    }
    double e = INFINITY;
    if (st == PHX_OK && phx_fsdp_gather_full(f) == PHX_OK) e = tu_max_rel(f, ref);
    ok(st == PHX_OK && e == 0,
       "world 1: two backwards per step accumulate into the shard: 3 SGD steps bitwise equal to the plain model's "
       "(difference %g)",
       e);
    if (st != PHX_OK) diag("%s", phx_last_error());
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(z);
    phx_optimizer_free(o);
    phx_module_free(f);
    phx_module_free(m);
    phx_module_free(ref);
}

/* x <- x rounded to dt (and back to f32). */
static void round_to(phx_tensor *x, phx_dtype dt)
{
    phx_tensor *lp = phx_tensor_new(dt, phx_tensor_ndim(x), phx_tensor_shape(x), phx_cpu());
    phx_tensor_cast(lp, x);
    phx_tensor_cast(x, lp);
    phx_tensor_free(lp);
}

/* MixedPrecision, one process: the FSDP model gathering bf16 computes
 * what the plain model computes with bf16-rounded weights (output and
 * gradients bitwise); with reduce_dtype bf16 the shard's gradients are
 * those rounded to bf16; the master shards stay exact f32. */
static void mixed_precision(void)
{
    for (int reduce = 0; reduce < 2; reduce++) {
        phx_module *m = tu_mlp(mlp_sizes, 4, 8), *ref = tu_mlp(mlp_sizes, 4, 8), *orig = tu_mlp(mlp_sizes, 4, 8);
        phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
        fo.wrap = wrap_even;
        fo.param_dtype = PHX_BF16;
        fo.reduce_dtype = reduce ? PHX_BF16 : PHX_F32;
        phx_module *f = phx_fsdp_new(m, NULL, &fo);
        phx_optimizer *z = f ? phx_zero_optimizer_new(f, NULL, make_sgd, NULL, NULL) : NULL;
        for (size_t i = 0; i < phx_module_num_params(ref); i++)
            round_to(phx_param_value(phx_module_param(ref, i)), PHX_BF16);
        phx_loss *la = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN), *lb = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
        phx_tensor *x = tu_new2(4, mlp_sizes[0]), *y = tu_new2(4, mlp_sizes[3]), *oa = NULL, *ob = NULL;
        tu_batch(0, 0, 4, x, y);
        float l1 = NAN, l2 = NAN;
        phx_status st = z ? phx_module_forward(f, x, &oa) : PHX_EINVAL;
        if (st == PHX_OK) st = phx_loss_forward(la, oa, y, &l1);
        if (st == PHX_OK) st = phx_module_backward(f, phx_loss_grad(la), NULL);
        if (st == PHX_OK) st = phx_module_forward(ref, x, &ob);
        if (st == PHX_OK) st = phx_loss_forward(lb, ob, y, &l2);
        if (st == PHX_OK) st = phx_module_backward(ref, phx_loss_grad(lb), NULL);
        /* The shard's pieces are whole parameters (one process): compare
         * each piece's gradient with the plain model's parameter's. */
        phx_module *shard = z ? phx_zero_shard(z) : NULL;
        double gerr = st == PHX_OK ? 0 : INFINITY;
        for (size_t i = 0; shard && st == PHX_OK && i < phx_module_num_params(shard); i++) {
            size_t src = phx_zero_shard_source(z, i, NULL);
            phx_tensor *g = phx_param_grad(phx_module_param(shard, i));
            phx_tensor *want = phx_tensor_new(PHX_F32, phx_tensor_ndim(g), phx_tensor_shape(g), phx_cpu());
            phx_tensor_from_host(want, phx_tensor_data(phx_param_grad(phx_module_param(ref, src))));
            if (reduce) round_to(want, PHX_BF16);
            int64_t n = phx_tensor_numel(g);
            for (int64_t k = 0; k < n; k++) {
                double a, b;
                phx_tensor_get(g, k, &a);
                phx_tensor_get(want, k, &b);
                gerr = fmax(gerr, fabs(a - b));
            }
            phx_tensor_free(want);
        }
        double master = INFINITY;
        if (st == PHX_OK && phx_fsdp_gather_full(f) == PHX_OK) master = tu_max_rel(f, orig);
        ok(st == PHX_OK && l1 == l2 && gerr == 0 && master == 0,
           "param_dtype bf16%s: loss and gradients bitwise those of bf16-rounded weights%s (loss %.9g vs %.9g, "
           "gradient difference %g), master shards exact (difference %g)",
           reduce ? ", reduce_dtype bf16" : "", reduce ? " (gradients rounded to bf16)" : "", l1, l2, gerr, master);
        if (st != PHX_OK) diag("%s", phx_last_error());
        phx_tensor_free(x);
        phx_tensor_free(y);
        phx_loss_free(la);
        phx_loss_free(lb);
        phx_optimizer_free(z);
        phx_module_free(f);
        phx_module_free(m);
        phx_module_free(ref);
        phx_module_free(orig);
    }
}

static void bad_args(void)
{
    phx_module *m = tu_mlp(mlp_sizes, 4, 1);
    ok(phx_fsdp_new(NULL, NULL, NULL) == NULL, "phx_fsdp_new(NULL model): NULL (%s)", phx_last_error());
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.sharding = 7;
    ok(phx_fsdp_new(m, NULL, &fo) == NULL && strstr(phx_last_error(), "sharding 7"), "sharding 7: refused (%s)",
       phx_last_error());
    fo = (phx_fsdp_opts)PHX_FSDP_OPTS_INIT;
    fo.struct_size = 0;
    ok(phx_fsdp_new(m, NULL, &fo) == NULL, "struct_size 0: refused (%s)", phx_last_error());
    phx_module *f = phx_fsdp_new(m, NULL, NULL);
    ok(f && phx_fsdp_new(m, NULL, NULL) == NULL && phx_ddp_new(m, NULL, NULL) == NULL,
       "a model wrapped by FSDP cannot be wrapped again (%s)", phx_last_error());
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = 2;
    ok(phx_zero_optimizer_new(f, NULL, make_sgd, NULL, &zo) == NULL && strstr(phx_last_error(), "stage 3"),
       "ZeRO stage 2 over an FSDP model: refused (%s)", phx_last_error());
    zo.stage = 3;
    phx_module *plain = tu_mlp(mlp_sizes, 4, 1);
    ok(phx_zero_optimizer_new(plain, NULL, make_sgd, NULL, &zo) == NULL && strstr(phx_last_error(), "FSDP"),
       "ZeRO stage 3 over a plain model: refused (%s)", phx_last_error());
    ok(phx_fsdp_num_units(plain) == 0 && strstr(phx_last_error(), "expected an FSDP module"),
       "phx_fsdp_num_units of a plain module: 0 (%s)", phx_last_error());
    phx_module_free(plain);
    phx_module_free(f);
    phx_module_free(m);
    /* A submodule already sharded by another wrapper: refused before any change. */
    phx_module *outer = phx_sequential_new(), *inner = tu_mlp(mlp_sizes, 4, 2);
    phx_sequential_add(outer, inner);
    phx_sequential_add(outer, phx_tanh_new());
    phx_module *fi = phx_fsdp_new(inner, NULL, NULL);
    phx_module *fw = fi ? phx_fsdp_new(outer, NULL, NULL) : NULL;
    ok(fi && !fw && strstr(phx_last_error(), "already sharded by another FSDP wrapper"),
       "wrapping a model whose submodule another FSDP wrapper shards: refused (%s)", phx_last_error());
    phx_module_free(fi);
    phx_module_free(outer);
}

int main(void)
{
    plan(4 + 2 * 3 * 2 + 2 + 7 + 1 + 2 + 8);
    static const char *const only0[] = {"0", NULL}, *const both[] = {"0", "4", NULL}, *const only2[] = {"2", NULL};
    desync_job d1 = {{only0, both}, "units"};
    tu_spawn_both(2, desync_rank, &d1, "rank 1 wraps one unit more: PHX_EDESYNC on every rank naming the unit count");
    desync_job d2 = {{only0, only2}, "unit 0 differs between rank 0 and rank 1"};
    tu_spawn_both(2, desync_rank, &d2,
                  "rank 1 wraps '2' where rank 0 wraps '0': PHX_EDESYNC naming unit 0; the model unchanged");
    mem_job m1 = {PHX_FSDP_FULL_SHARD, true, 1}, m2 = {PHX_FSDP_FULL_SHARD, false, 2},
            m3 = {PHX_FSDP_SHARD_GRAD_OP, true, 6};
    for (int n = 2; n <= 3; n++) {
        tu_spawn_both(n, mem_rank, &m1,
                      "FULL_SHARD without prefetch: nothing held after a step, peak = root + one unit, gradients "
                      "<= root + two units");
        tu_spawn_both(n, mem_rank, &m2, "FULL_SHARD with prefetch: peak = root + two units (the prefetched one)");
        tu_spawn_both(n, mem_rank, &m3, "SHARD_GRAD_OP: peak = root + every unit (kept from forward to backward)");
    }
    size_policy();
    resharded_access();
    accumulation();
    mixed_precision();
    bad_args();
    return done_testing();
}
