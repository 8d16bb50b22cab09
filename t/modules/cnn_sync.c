/* SyncBatchNorm, DDP with buffers and DataParallel with buffers, on the
 * threads backend and on gloo processes:
 *  - SyncBatchNorm over worlds of 1-4 ranks with uneven batches (3, 5, 2
 *    and 4 images) equals BatchNorm2d on the concatenated batch within
 *    1e-5: outputs and input gradients (each rank's rows), parameter
 *    gradients (summed over ranks), running statistics; in eval it is the
 *    plain BatchNorm.
 *  - DDP + SyncBatchNorm trained 3 steps on 2 ranks equals one process
 *    trained on the concatenated batches (parameters and buffers, 1e-5),
 *    and every rank's buffers equal rank 0's bit for bit after each step.
 *  - DDP + BatchNorm: the broadcast at the end of each step gives every
 *    rank rank 0's buffers, and an eval forward after it communicates
 *    nothing; with no_broadcast_buffers they stay apart.
 *  - DataParallel on 2 CPU replicas keeps replica 0's running statistics,
 *    as PyTorch's. */
#include "t/ddp-util.h"

static const int64_t rows_of[4] = {3, 5, 2, 4};
enum { C = 4, H = 3, W = 3 };

/* max |a - b| / max(1, |b|) over host arrays */
static double err(const float *a, const float *b, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i])));
    return e;
}

static float *host(const phx_tensor *t)
{
    float *h = malloc((size_t)phx_tensor_numel(t) * sizeof *h);
    phx_tensor *f = phx_tensor_new(PHX_F32, phx_tensor_ndim(t), phx_tensor_shape(t), phx_cpu());
    phx_tensor_cast(f, t);
    phx_tensor_to_host(f, h);
    phx_tensor_free(f);
    return h;
}

static phx_tensor *images(int64_t n, uint64_t seed, float mean, float std)
{
    int64_t s[4] = {n, C, H, W};
    phx_tensor *t = phx_tensor_new(PHX_F32, 4, s, phx_cpu());
    phx_rng *r = phx_rng_new(seed);
    phx_rng_normal(r, t, mean, std);
    phx_rng_free(r);
    return t;
}

static phx_module *bn(void)
{
    phx_module *m = phx_batchnorm2d_new(C, 1e-5f, 0.1f, true, true);
    phx_rng *r = phx_rng_new(5);
    phx_rng_uniform(r, phx_param_value(phx_module_param(m, 0)), 0.5f, 1.5f);
    phx_rng_uniform(r, phx_param_value(phx_module_param(m, 1)), -0.5f, 0.5f);
    phx_rng_free(r);
    return m;
}

/* Rank's SyncBatchNorm against BatchNorm on every rank's rows. */
static int sync_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int world = phx_comm_size(c), fails = 0;
    int64_t total = 0, first = 0;
    for (int r = 0; r < world; r++) total += rows_of[r], first += r < rank ? rows_of[r] : 0;
    int64_t img = C * H * W, mine = rows_of[rank];
    phx_tensor *x = images(total, 11, 1.5f, 2.0f), *dy = images(total, 12, 0.0f, 1.0f);
    /* the reference: the whole batch in one BatchNorm */
    phx_module *ref = bn(), *sbn = bn();
    phx_tensor *ry, *rdx, *y, *dx;
    phx_module_forward(ref, x, &ry);
    phx_module_backward(ref, dy, &rdx);
    size_t n;
    phx_sync_batchnorm_convert(sbn, c, &n);
    int64_t s[4] = {mine, C, H, W};
    phx_tensor *xv = phx_tensor_view(x, first * img, 4, s), *dyv = phx_tensor_view(dy, first * img, 4, s);
    phx_status st = phx_module_forward(sbn, xv, &y);
    if (st == PHX_OK) st = phx_module_backward(sbn, dyv, &dx);
    if (st != PHX_OK || n != 1 || strcmp(phx_module_type(sbn), "SyncBatchNorm")) {
        printf("# rank %d: %s (converted %zu, type %s)\n", rank, phx_last_error(), n, phx_module_type(sbn));
        return 1;
    }
    float *a = host(y), *b = host(ry), *da = host(dx), *db = host(rdx);
    double e = fmax(err(a, b + first * img, mine * img), err(da, db + first * img, mine * img));
    /* parameter gradients: local sums, added over ranks */
    for (int i = 0; i < 2; i++) {
        phx_tensor *g = phx_param_grad(phx_module_param(sbn, i));
        phx_comm_allreduce(c, g, PHX_SUM, NULL);
        float *ga = host(g), *gb = host(phx_param_grad(phx_module_param(ref, i)));
        e = fmax(e, err(ga, gb, C));
        free(ga), free(gb);
    }
    for (int i = 0; i < 2; i++) {
        float *ba = host(phx_module_buffer(sbn, (size_t)i)), *bb = host(phx_module_buffer(ref, (size_t)i));
        e = fmax(e, err(ba, bb, C));
        free(ba), free(bb);
    }
    double t1 = 0, t2 = 0;
    phx_tensor_get(phx_module_buffer(sbn, 2), 0, &t1);
    phx_tensor_get(phx_module_buffer(ref, 2), 0, &t2);
    if (!(e <= 1e-5) || t1 != 1 || t2 != 1) {
        printf("# rank %d of %d: SyncBatchNorm differs from BatchNorm on the whole batch by %.3g (tracked %g, %g)\n",
               rank, world, e, t1, t2);
        fails++;
    } else if (rank == 0) {
        printf("# world %d: worst relative difference %.3g\n", world, e);
    }
    /* eval: the running statistics, no communication: from the same
     * running statistics (equal above within 1e-5; the whole batch's and
     * the ranks' combined ones may round apart), the same bits */
    for (int i = 0; i < 2; i++)
        if (phx_tensor_copy(phx_module_buffer(ref, (size_t)i), phx_module_buffer(sbn, (size_t)i)) != PHX_OK) fails++;
    phx_module_train(sbn, false);
    phx_module_train(ref, false);
    phx_tensor *ye, *re;
    free(a), free(b);
    if (phx_module_forward(sbn, xv, &ye) != PHX_OK || phx_module_forward(ref, xv, &re) != PHX_OK) fails++;
    a = host(ye), b = host(re);
    if (err(a, b, mine * img) != 0) {
        printf("# rank %d: eval SyncBatchNorm is not the plain BatchNorm\n", rank);
        fails++;
    }
    free(a), free(b), free(da), free(db);
    phx_tensor_free(xv), phx_tensor_free(dyv), phx_tensor_free(x), phx_tensor_free(dy);
    phx_module_free(sbn), phx_module_free(ref);
    phx_comm_free(c);
    fflush(stdout);
    return fails;
}

/* buffers of m equal (bitwise) across ranks: rank 0's broadcast and compared */
static int buffers_same(phx_comm *c, phx_module *m)
{
    int same = 1;
    for (size_t i = 0; i < phx_module_num_buffers(m); i++) {
        phx_tensor *b = phx_module_buffer(m, i);
        phx_tensor *z = phx_tensor_new(phx_tensor_dtype(b), phx_tensor_ndim(b), phx_tensor_shape(b), phx_cpu());
        phx_tensor_copy(z, b);
        phx_comm_broadcast(c, z, 0, NULL);
        size_t nb = phx_tensor_nbytes(b);
        char *h0 = malloc(nb), *h1 = malloc(nb);
        phx_tensor_to_host(z, h0);
        phx_tensor_to_host(b, h1);
        same &= memcmp(h0, h1, nb) == 0;
        free(h0), free(h1);
        phx_tensor_free(z);
    }
    int64_t one = 1;
    phx_tensor *f = phx_tensor_new(PHX_F32, 1, &one, phx_cpu());
    phx_tensor_fill(f, same ? 0.0 : 1.0);
    phx_comm_allreduce(c, f, PHX_SUM, NULL);
    double bad = 1;
    phx_tensor_get(f, 0, &bad);
    phx_tensor_free(f);
    return bad == 0;
}

enum { STEPS = 3, PER_RANK = 4 };

static phx_status step(phx_module *m, phx_optimizer *o, phx_loss *l, phx_tensor *x, phx_tensor *t)
{
    return tu_step(m, o, l, x, t);
}

/* DDP + SyncBatchNorm on 2 ranks against one process on both batches. */
static int ddp_rank(int rank, void *arg)
{
    int mode = *(int *)arg, fails = 0; /* 0: SyncBatchNorm; 1: BatchNorm, broadcast; 2: no broadcast */
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *model = tu_small_cnn(), *ref = tu_small_cnn();
    if (mode == 0) phx_sync_batchnorm_convert(model, c, NULL);
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.no_broadcast_buffers = mode == 2;
    phx_module *ddp = phx_ddp_new(model, c, &o);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = phx_sgd_new(ddp, &so), *ropt = phx_sgd_new(ref, &so);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_status st = ddp && opt ? PHX_OK : PHX_ENOMEM;
    int same_each = 1;
    for (int s = 0; s < STEPS && st == PHX_OK; s++) {
        phx_tensor *x, *t, *rx, *rt;
        tu_cnn_batch(s, rank * PER_RANK, PER_RANK, &x, &t);
        tu_cnn_batch(s, 0, 2 * PER_RANK, &rx, &rt);
        st = step(ddp, opt, loss, x, t);
        if (st == PHX_OK) st = step(ref, ropt, loss, rx, rt);
        if (mode == 0) same_each &= buffers_same(c, model);
        phx_tensor_free(x), phx_tensor_free(t), phx_tensor_free(rx), phx_tensor_free(rt);
    }
    if (st != PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    if (mode == 0) {
        double e = tu_max_rel(model, ref);
        for (size_t i = 0; i < 2; i++) {
            float *a = host(phx_module_buffer(model, i)), *b = host(phx_module_buffer(ref, i));
            e = fmax(e, err(a, b, 3));
            free(a), free(b);
        }
        if (!(e <= 1e-5) || !same_each) {
            printf("# rank %d: DDP + SyncBatchNorm differs from one process by %.3g (buffers equal on every rank "
                   "after each step: %d)\n",
                   rank, e, same_each);
            fails++;
        } else if (rank == 0) {
            printf("# DDP + SyncBatchNorm vs one process: %.3g\n", e);
        }
    } else {
        /* the step's end gave every rank rank 0's buffers; the eval forward
         * through DDP keeps them (it runs no collective) */
        int before = buffers_same(c, model);
        phx_module_train(ddp, false);
        phx_tensor *x, *t, *y;
        tu_cnn_batch(9, 0, 2, &x, &t);
        st = phx_module_forward(ddp, x, &y);
        int after = buffers_same(c, model);
        phx_tensor_free(x), phx_tensor_free(t);
        int want_after = mode == 1;
        if (st != PHX_OK || before != want_after || after != want_after) {
            printf("# rank %d, mode %d: buffers equal before %d, after an eval forward %d (want %d): %s\n", rank, mode,
                   before, after, want_after, st ? phx_last_error() : "");
            fails++;
        }
    }
    phx_loss_free(loss);
    phx_optimizer_free(opt), phx_optimizer_free(ropt);
    phx_module_free(ddp), phx_module_free(model), phx_module_free(ref);
    phx_comm_free(c);
    fflush(stdout);
    return fails;
}

/* DataParallel over 2 CPU replicas: the model's running statistics are
 * those of BatchNorm on replica 0's chunk (the first ceil(n/2) rows). */
static void dp_buffers(void)
{
    phx_module *model = bn(), *ref = bn();
    phx_device devs[2] = {phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(model, devs, 2, NULL);
    phx_tensor *x = images(6, 21, 0.5f, 3.0f), *y;
    int64_t s[4] = {3, C, H, W};
    phx_tensor *first = phx_tensor_view(x, 0, 4, s);
    phx_status st = dp ? phx_module_forward(dp, x, &y) : PHX_ENOMEM;
    phx_module_forward(ref, first, &y);
    double e = 0;
    for (size_t i = 0; i < 2; i++) {
        float *a = host(phx_module_buffer(model, i)), *b = host(phx_module_buffer(ref, i));
        e = fmax(e, err(a, b, C));
        free(a), free(b);
    }
    double t = 0;
    phx_tensor_get(phx_module_buffer(model, 2), 0, &t);
    ok(st == PHX_OK && e == 0 && t == 1,
       "DataParallel, 2 CPU replicas: the model keeps replica 0's running statistics (difference %.3g, tracked %g)", e,
       t);
    ok(phx_module_num_buffers(dp) == 3 && !strcmp(phx_module_buffer_name(dp, 0), "running_mean"),
       "the wrapper lists the model's buffers");
    phx_tensor_free(first), phx_tensor_free(x);
    phx_module_free(dp), phx_module_free(model), phx_module_free(ref);
}

int main(void)
{
    plan(2 * 4 + 2 * 3 + 2);
    for (int n = 1; n <= 4; n++)
        tu_spawn_both(n, sync_rank, NULL, "SyncBatchNorm on batches of 3, 5, 2, 4 images equals BatchNorm on them all");
    const char *what[] = {"DDP + SyncBatchNorm, 3 steps, equals one process on both batches; buffers equal on every "
                          "rank after each step",
                          "DDP + BatchNorm: every rank holds rank 0's buffers after a step and after an eval forward",
                          "DDP + BatchNorm with no_broadcast_buffers: ranks keep their own"};
    for (int mode = 0; mode < 3; mode++) tu_spawn_both(2, ddp_rank, &mode, "%s", what[mode]);
    dp_buffers();
    return done_testing();
}
